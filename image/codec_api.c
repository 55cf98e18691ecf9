/*
 * image/codec_api.c - the image codecs of the public API (tessera.h):
 * decode a PNG or JPEG from memory, encode a PNG with the A1111 infotext.
 * Thin over image/'s readers and writer, so an embedder (the HTTP service)
 * gets the same checks, limits and bytes as the CLI without its own codec.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/image.h"

int tsr_image_decode(const void *data, size_t len, int channels, int max_side, uint8_t **pixels,
                     int *width, int *height)
{
    *pixels = NULL;
    *width = *height = 0;
    if (channels != 1 && channels != 3 && channels != 4)
        return tsr_errorf(TSR_ERR_INVALID, "image decode: channels must be 1, 3 or 4, not %d",
                          channels);
    if (max_side <= 0 || max_side > TSR_MAX_SIZE)
        max_side = TSR_MAX_SIZE;
    tsr_image_limits lim = {.max_side = (uint32_t)max_side,
                            .max_pixels = (uint64_t)max_side * (uint64_t)max_side};
    tsr_image img;
    memset(&img, 0, sizeof img);
    TSR_TRY(tsr_image_read_memory(data, len, "image", channels, &lim, &img));
    *pixels = img.data;
    *width = (int)img.width;
    *height = (int)img.height;
    return TSR_OK;
}

int tsr_image_encode_png(const uint8_t *rgb, int width, int height, const char *parameters,
                         uint8_t **png, size_t *len)
{
    *png = NULL;
    *len = 0;
    if (!rgb || width < 1 || height < 1)
        return tsr_errorf(TSR_ERR_INVALID, "image encode: no pixels (%dx%d)", width, height);
    tsr_image img = {(uint32_t)width, (uint32_t)height, 3, (uint8_t *)rgb};
    tsr_png_text text = {"parameters", parameters};
    return tsr_png_write_memory(&img, parameters ? &text : NULL, parameters ? 1 : 0, png, len);
}
