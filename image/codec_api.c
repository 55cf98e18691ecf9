/*
 * image/codec_api.c - the image codecs of the public API (tessera.h):
 * decode a PNG or JPEG from memory, encode a PNG with the A1111 infotext,
 * read that infotext back, resample (Pillow's Lanczos and nearest).
 * Thin over image/'s readers and writer, so an embedder (the HTTP service)
 * gets the same checks, limits and bytes as the CLI without its own codec.
 */
#include <math.h>
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

/* Pillow's NEAREST resize: the source pixel under each output pixel's
 * centre. */
static void nearest(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh)
{
    for (int y = 0; y < dh; y++) {
        int sy = (int)floor(((double)y + 0.5) * sh / dh);
        sy = sy < sh ? sy : sh - 1;
        for (int x = 0; x < dw; x++) {
            int sx = (int)floor(((double)x + 0.5) * sw / dw);
            sx = sx < sw ? sx : sw - 1;
            memcpy(dst + ((size_t)y * dw + x) * c, src + ((size_t)sy * sw + sx) * c, (size_t)c);
        }
    }
}

int tsr_image_resample(const uint8_t *pixels, int width, int height, int channels,
                       int out_width, int out_height, int max_side, tsr_resample filter,
                       uint8_t **out)
{
    *out = NULL;
    if (max_side <= 0)
        max_side = TSR_MAX_SIZE;
    if (max_side > (int)TSR_IMAGE_MAX_SIDE)
        max_side = (int)TSR_IMAGE_MAX_SIDE;
    if (!pixels || width < 1 || height < 1 || (channels != 1 && channels != 3 && channels != 4))
        return tsr_errorf(TSR_ERR_INVALID, "image resample: no pixels (%dx%d, %d channels)",
                          width, height, channels);
    if (out_width < 1 || out_height < 1 || out_width > max_side || out_height > max_side)
        return tsr_errorf(TSR_ERR_INVALID,
                          "image resample: %dx%d: each side must be 1 to %d pixels", out_width,
                          out_height, max_side);
    if (filter == TSR_RESAMPLE_NEAREST) {
        uint8_t *dst = malloc((size_t)out_width * (size_t)out_height * (size_t)channels);
        if (!dst)
            return tsr_errorf(TSR_ERR_NOMEM, "image resample: out of memory");
        nearest(pixels, width, height, channels, dst, out_width, out_height);
        *out = dst;
        return TSR_OK;
    }
    if (filter != TSR_RESAMPLE_LANCZOS)
        return tsr_errorf(TSR_ERR_INVALID, "image resample: unknown filter %d", (int)filter);
    tsr_image src = {(uint32_t)width, (uint32_t)height, (uint32_t)channels, (uint8_t *)pixels};
    tsr_image dst;
    memset(&dst, 0, sizeof dst);
    TSR_TRY(tsr_image_resize(&src, (uint32_t)out_width, (uint32_t)out_height, &dst));
    *out = dst.data;
    return TSR_OK;
}

int tsr_image_png_parameters(const void *data, size_t len, char **text)
{
    *text = NULL;
    tsr_image img;
    tsr_png_meta meta;
    memset(&img, 0, sizeof img);
    memset(&meta, 0, sizeof meta);
    TSR_TRY(tsr_png_read_memory(data, len, "image", 0, &img, &meta));
    free(img.data);
    const char *p = tsr_png_meta_find(&meta, "parameters");
    int rc = TSR_OK;
    if (p && !(*text = strdup(p)))
        rc = tsr_errorf(TSR_ERR_NOMEM, "png info: out of memory");
    tsr_png_meta_free(&meta);
    return rc;
}
