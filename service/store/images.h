/*
 * service/store/images.h - images in and out of the service (service/store/images.c),
 * through the engine's public codecs (tessera.h):
 *
 * - svc_image_decode: a PNG or JPEG from memory (init images and masks sent
 *   as base64) to 8-bit RGB or gray; sizes are checked before anything is
 *   allocated, so a hostile header cannot ask for gigabytes.
 * - svc_png_encode: RGB to PNG with the A1111 `parameters` text, byte for
 *   byte the file `tessera generate` writes.
 */
#ifndef SVC_SVC_PNG_H
#define SVC_SVC_PNG_H

#include <stddef.h>
#include <stdint.h>

#define SVC_IMAGE_MAX_SIDE 4096

/* channels 3 (RGB), 1 (gray) or 4 (RGBA).  *pixels malloc'd (free()).  Returns 0, or
 * -1 with a message in err ("not a PNG or JPEG image", "PNG: ...", ...). */
int svc_image_decode(const uint8_t *data, size_t len, int channels, uint8_t **pixels, int *width,
                     int *height, char *err, size_t err_size);

/* PNG bytes (malloc'd) of an RGB image with an optional `parameters` text.
 * Returns 0 or -1 with a message in err. */
int svc_png_encode(const uint8_t *rgb, int width, int height, const char *parameters,
                   uint8_t **out, size_t *out_len, char *err, size_t err_size);

#endif
