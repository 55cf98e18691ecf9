/*
 * service/api/a1111/a1111_image.c - A1111 init images and masks as the native
 * parameters want them (see a1111.h): decoded, resized to the
 * requested width x height (A1111's resize_mode 0, "just resize"),
 * inverted for inpainting_mask_invert, and re-encoded as PNG when anything
 * changed.  Bilinear where A1111 uses Lanczos: docs/compat-a1111.md says so.
 */
#include "a1111.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fields.h"
#include "images.h"
#include "util.h"

static int oom(char *err, size_t err_size)
{
    snprintf(err, err_size, "out of memory");
    return -2;
}

static int bad(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t err_size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
    return -1;
}

/* Bilinear resize of an 8-bit image with c channels (A1111 uses Lanczos;
 * docs/compat-a1111.md says so). */
static uint8_t *resize(const uint8_t *src, int sw, int sh, int c, int dw, int dh)
{
    uint8_t *dst = malloc((size_t)dw * dh * c);
    if (!dst)
        return NULL;
    for (int y = 0; y < dh; y++) {
        double fy = ((double)y + 0.5) * sh / dh - 0.5;
        if (fy < 0)
            fy = 0;
        int y0 = (int)fy;
        int y1 = y0 + 1 < sh ? y0 + 1 : y0;
        double wy = fy - y0;
        for (int xx = 0; xx < dw; xx++) {
            double fx = ((double)xx + 0.5) * sw / dw - 0.5;
            if (fx < 0)
                fx = 0;
            int x0 = (int)fx;
            int x1 = x0 + 1 < sw ? x0 + 1 : x0;
            double wx = fx - x0;
            for (int k = 0; k < c; k++) {
                double a = src[((size_t)y0 * sw + x0) * c + k];
                double b = src[((size_t)y0 * sw + x1) * c + k];
                double d = src[((size_t)y1 * sw + x0) * c + k];
                double e = src[((size_t)y1 * sw + x1) * c + k];
                double v = (a * (1 - wx) + b * wx) * (1 - wy) + (d * (1 - wx) + e * wx) * wy;
                dst[((size_t)y * dw + xx) * c + k] = (uint8_t)lrint(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
    return dst;
}

/* A base64 image (optionally a data: URL) as the native object wants it:
 * at width x height; resized and re-encoded as PNG when its size differs,
 * or when it is a mask to invert.  *out: a malloc'd base64 string. */
int svc_a1111_image(const char *field, const char *b64, int channels, int w, int h, bool invert,
                    char **out, char *err, size_t err_size)
{
    *out = NULL;
    uint8_t *file = NULL, *px = NULL;
    size_t file_len = 0;
    int iw = 0, ih = 0;
    char why[160];
    if (svc_fields_base64(field, b64, &file, &file_len, err, err_size) < 0)
        return -1;
    if (svc_image_decode(file, file_len, channels, &px, &iw, &ih, why, sizeof why) < 0) {
        free(file);
        return bad(err, err_size, "%s: %s", field, why);
    }
    if (iw == w && ih == h && !invert) {
        free(px);
        *out = svc_base64_encode(file, file_len);
        free(file);
        return *out ? 0 : oom(err, err_size);
    }
    free(file);
    uint8_t *sized = iw == w && ih == h ? px : resize(px, iw, ih, channels, w, h);
    if (sized != px)
        free(px);
    if (!sized)
        return oom(err, err_size);
    uint8_t *rgb = sized;
    if (channels == 1) {
        rgb = malloc((size_t)w * h * 3);
        for (size_t i = 0; rgb && i < (size_t)w * h; i++) {
            uint8_t v = invert ? (uint8_t)(255 - sized[i]) : sized[i];
            rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = v;
        }
        free(sized);
        if (!rgb)
            return oom(err, err_size);
    }
    uint8_t *png = NULL;
    size_t png_len = 0;
    int rc = svc_png_encode(rgb, w, h, NULL, &png, &png_len, why, sizeof why);
    free(rgb);
    if (rc < 0)
        return bad(err, err_size, "%s: %s", field, why);
    *out = svc_base64_encode(png, png_len);
    free(png);
    return *out ? 0 : oom(err, err_size);
}
