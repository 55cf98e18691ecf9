/*
 * service/store/images.c - images in and out of the service through the engine's
 * public codecs (tsr_image_decode, tsr_image_encode_png in tessera.h), so
 * the served PNG is byte for byte the one `tessera generate` writes and an
 * uploaded image gets the same checks as the CLI's --init-image.
 */
#include <stdio.h>
#include <stdlib.h>

#include "images.h"
#include "tessera.h"

int svc_image_decode(const uint8_t *data, size_t len, int channels, uint8_t **pixels, int *width,
                     int *height, char *err, size_t err_size)
{
    if (tsr_image_decode(data, len, channels, SVC_IMAGE_MAX_SIDE, pixels, width, height) !=
        TSR_OK) {
        snprintf(err, err_size, "%s", tsr_last_error());
        return -1;
    }
    return 0;
}

int svc_png_encode(const uint8_t *rgb, int width, int height, const char *parameters,
                   uint8_t **out, size_t *out_len, char *err, size_t err_size)
{
    if (tsr_image_encode_png(rgb, width, height, parameters, out, out_len) != TSR_OK) {
        snprintf(err, err_size, "%s", tsr_last_error());
        return -1;
    }
    return 0;
}
