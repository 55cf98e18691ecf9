/*
 * image/image.c - the owned 8-bit image: size checks, allocation and
 * channel conversion.
 *
 * Why: every decoder calls tsr_image_check_size() with the dimensions from
 * the file header before it allocates anything, so a hostile header can at
 * worst ask for TSR_IMAGE_MAX_PIXELS * 4 bytes (1 GiB), and all size
 * arithmetic is done in 64 bits after the per-side check.  Conversion lives
 * here (not in libpng/libjpeg transforms) so PNG and JPEG give the same
 * gray/RGB results, matching PIL's convert().
 */
#include "image/image.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/image_internal.h"

static void limits_resolve(const tsr_image_limits *limits, uint32_t *side, uint64_t *pixels)
{
    *side = TSR_IMAGE_MAX_SIDE;
    *pixels = TSR_IMAGE_MAX_PIXELS;
    if (limits) {
        if (limits->max_side && limits->max_side < *side)
            *side = limits->max_side;
        if (limits->max_pixels && limits->max_pixels < *pixels)
            *pixels = limits->max_pixels;
    }
}

int tsr_image_check_size(uint32_t width, uint32_t height, uint32_t channels,
                         const tsr_image_limits *limits, const char *what)
{
    uint32_t side;
    uint64_t pixels;
    limits_resolve(limits, &side, &pixels);
    if (!what)
        what = "image";
    if (channels != 1 && channels != 3 && channels != 4)
        return tsr_errorf(TSR_ERR_INVALID, "%s: %u channels (1, 3 or 4 supported)", what,
                          channels);
    if (width == 0 || height == 0)
        return tsr_errorf(TSR_ERR_RANGE, "%s: %ux%u: zero size", what, width, height);
    if (width > side || height > side)
        return tsr_errorf(TSR_ERR_RANGE, "%s: %ux%u exceeds the %u limit", what, width, height,
                          side);
    if ((uint64_t)width * height > pixels)
        return tsr_errorf(TSR_ERR_RANGE, "%s: %ux%u exceeds the %llu-pixel limit", what, width,
                          height, (unsigned long long)pixels);
    return TSR_OK;
}

int tsr_image_alloc(tsr_image *img, uint32_t width, uint32_t height, uint32_t channels)
{
    memset(img, 0, sizeof(*img));
    TSR_TRY(tsr_image_check_size(width, height, channels, NULL, "image"));
    uint64_t bytes = (uint64_t)width * height * channels;
    if (bytes > SIZE_MAX)
        return tsr_errorf(TSR_ERR_RANGE, "image: %ux%u does not fit in memory", width, height);
    img->data = malloc((size_t)bytes);
    if (!img->data)
        return tsr_errorf(TSR_ERR_NOMEM, "image: cannot allocate %ux%ux%u (%llu bytes)", width,
                          height, channels, (unsigned long long)bytes);
    img->width = width;
    img->height = height;
    img->channels = channels;
    return TSR_OK;
}

void tsr_image_free(tsr_image *img)
{
    if (!img)
        return;
    free(img->data);
    memset(img, 0, sizeof(*img));
}

size_t tsr_image_bytes(const tsr_image *img)
{
    return (size_t)img->width * img->height * img->channels;
}

static inline uint8_t luma(uint8_t r, uint8_t g, uint8_t b)
{
    /* PIL: L = R*299/1000 + G*587/1000 + B*114/1000, computed in fixed point
     * with rounding; max is 255000 + 500 -> 255. */
    return (uint8_t)(((uint32_t)r * 299 + (uint32_t)g * 587 + (uint32_t)b * 114 + 500) / 1000);
}

void tsr_image_convert_row(const uint8_t *src, uint32_t sc, uint8_t *dst, uint32_t dc, size_t n)
{
    for (size_t i = 0; i < n; i++, src += sc, dst += dc) {
        uint8_t r, g, b, a = 255;
        switch (sc) {
        case 1: r = g = b = src[0]; break;
        case 2: r = g = b = src[0]; a = src[1]; break;
        case 3: r = src[0]; g = src[1]; b = src[2]; break;
        default: r = src[0]; g = src[1]; b = src[2]; a = src[3]; break;
        }
        if (dc == 1) {
            dst[0] = (sc <= 2) ? r : luma(r, g, b);
        } else {
            dst[0] = r;
            dst[1] = g;
            dst[2] = b;
            if (dc == 4)
                dst[3] = a;
        }
    }
}

int tsr_image_convert(const tsr_image *src, uint32_t channels, tsr_image *dst)
{
    memset(dst, 0, sizeof(*dst));
    if (!src || !src->data)
        return tsr_errorf(TSR_ERR_INVALID, "image convert: no source image");
    if (src->channels != 1 && src->channels != 3 && src->channels != 4)
        return tsr_errorf(TSR_ERR_INVALID, "image convert: source has %u channels",
                          src->channels);
    TSR_TRY(tsr_image_alloc(dst, src->width, src->height, channels));
    if (channels == src->channels) {
        memcpy(dst->data, src->data, tsr_image_bytes(src));
        return TSR_OK;
    }
    size_t w = src->width;
    for (uint32_t y = 0; y < src->height; y++)
        tsr_image_convert_row(src->data + y * w * src->channels, src->channels,
                              dst->data + y * w * channels, channels, w);
    return TSR_OK;
}

/* ---- reading any supported format ---- */

static bool is_png(const uint8_t *p, size_t n)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    return n >= 8 && memcmp(p, sig, 8) == 0;
}

static bool is_jpeg(const uint8_t *p, size_t n)
{
    return n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF;
}

int tsr_image_read_memory(const void *data, size_t size, const char *name, int want_channels,
                          const tsr_image_limits *limits, tsr_image *img)
{
    if (img)
        memset(img, 0, sizeof *img);
    if (!name)
        name = "image";
    if (!img || (!data && size))
        return tsr_errorf(TSR_ERR_INVALID, "%s: no data or no output image", name);
    if (is_png(data, size))
        return tsr_png_read_ex(name, data, size, want_channels, limits, img, NULL);
    if (is_jpeg(data, size))
        return tsr_jpeg_decode(data, size, name, want_channels, limits, img);
    return tsr_errorf(TSR_ERR_FORMAT, "%s: not a PNG or JPEG file", name);
}

int tsr_image_read(const char *path, int want_channels, tsr_image *img)
{
    if (img)
        memset(img, 0, sizeof *img);
    if (!path || !img)
        return tsr_errorf(TSR_ERR_INVALID, "image read: no path or no image");
    FILE *f = fopen(path, "rb");
    if (!f)
        return tsr_errorf(errno == ENOENT ? TSR_ERR_NOT_FOUND : TSR_ERR_IO, "%s: cannot open: %s",
                          path, strerror(errno));
    uint8_t head[8] = {0};
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    if (is_png(head, n))
        return tsr_png_read(path, want_channels, img, NULL);
    if (is_jpeg(head, n))
        return tsr_jpeg_read(path, want_channels, img, NULL);
    return tsr_errorf(TSR_ERR_FORMAT, "%s: not a PNG or JPEG file%s", path,
                      n == 0 ? " (it is empty)" : "");
}
