/*
 * image/blur.c - Pillow's ImageFilter.GaussianBlur and the inpainting
 * overlay, for A1111's "mask blur".
 *
 * Pillow does not convolve with a Gaussian: it runs three box blurs of one
 * fractional radius (chosen so that three passes have the Gaussian's
 * variance), all horizontal passes first and then all vertical ones, each
 * rounding to 8 bits.  A box of fractional radius r = l + a (l whole) gives
 * every pixel within l a fixed-point weight ww = 2^24 / (2r + 1) and the two
 * pixels at distance l + 1 the rest, fw = (2^24 - (2l + 1) ww) / 2; indices
 * past an edge repeat the edge pixel; the sum rounds with + 2^23 >> 24.
 * Restated here from that description; checked against Pillow's output in
 * tests/image/test_blur.c (references by tools/reference/make_blur_refs.py).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/image.h"

/* The box radius whose `passes` box blurs have the variance of a Gaussian
 * of standard deviation `radius` (single precision, as Pillow computes it). */
static float box_radius(float radius, int passes)
{
    float sigma2 = radius * radius / passes;
    float len = (float)sqrt(12.0 * sigma2 + 1.0);
    float whole = (float)floor((len - 1.0) / 2.0);
    float frac = (2 * whole + 1) * (whole * (whole + 1) - 3 * sigma2);
    frac /= 6 * (sigma2 - (whole + 1) * (whole + 1));
    return whole + frac;
}

/* One box pass over n samples spaced `stride` apart (in -> out). */
static void box_line(const uint8_t *in, uint8_t *out, int n, size_t stride, int r, uint32_t ww,
                     uint32_t fw)
{
    const int last = n - 1;
#define AT(i) ((uint64_t)in[(size_t)((i) < 0 ? 0 : ((i) > last ? last : (i))) * stride])
    uint64_t acc = 0;
    for (int k = -r; k <= r; k++)
        acc += AT(k);
    for (int x = 0; x < n; x++) {
        uint64_t bulk = acc * ww + (AT(x - r - 1) + AT(x + r + 1)) * fw;
        out[(size_t)x * stride] = (uint8_t)((bulk + (1u << 23)) >> 24);
        acc += AT(x + r + 1) - AT(x - r);
    }
#undef AT
}

int tsr_image_gaussian_blur_pil(const tsr_image *src, double radius, tsr_image *dst)
{
    memset(dst, 0, sizeof *dst);
    if (!src || !src->data || !(radius >= 0) || radius > 1000)
        return tsr_errorf(TSR_ERR_INVALID, "gaussian blur: bad image or radius %g", radius);
    TSR_TRY(tsr_image_alloc(dst, src->width, src->height, src->channels));
    const size_t bytes = (size_t)src->width * src->height * src->channels;
    memcpy(dst->data, src->data, bytes);
    const float fr = box_radius((float)radius, 3);
    if (radius == 0 || fr <= 0)
        return TSR_OK;
    const int r = (int)fr;
    const uint32_t ww = (uint32_t)((float)(1 << 24) / (fr * 2 + 1));
    const uint32_t fw = ((1u << 24) - (uint32_t)(r * 2 + 1) * ww) / 2;
    const int W = (int)src->width, H = (int)src->height, C = (int)src->channels;
    const int longest = W > H ? W : H;
    uint8_t *line = malloc((size_t)longest);
    uint8_t *tmp = malloc((size_t)longest);
    if (!line || !tmp) {
        free(line);
        free(tmp);
        tsr_image_free(dst);
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory blurring a %dx%d image", W, H);
    }
    /* three horizontal passes, then three vertical ones, per channel */
    for (int dir = 0; dir < 2; dir++) {
        const int n = dir == 0 ? W : H, lines = dir == 0 ? H : W;
        const size_t stride = dir == 0 ? (size_t)C : (size_t)W * C;
        for (int l = 0; l < lines; l++)
            for (int c = 0; c < C; c++) {
                uint8_t *p = dst->data + (dir == 0 ? (size_t)l * W * C : (size_t)l * C) + c;
                for (int x = 0; x < n; x++)
                    line[x] = p[(size_t)x * stride];
                box_line(line, tmp, n, 1, r, ww, fw);
                box_line(tmp, line, n, 1, r, ww, fw);
                box_line(line, tmp, n, 1, r, ww, fw);
                for (int x = 0; x < n; x++)
                    p[(size_t)x * stride] = tmp[x];
            }
    }
    free(line);
    free(tmp);
    return TSR_OK;
}

int tsr_image_mask_overlay(const tsr_image *generated, const tsr_image *original,
                           const tsr_image *mask, tsr_image *out)
{
    memset(out, 0, sizeof *out);
    if (!generated || !original || !mask || generated->channels != 3 ||
        original->channels != 3 || mask->channels != 1 || generated->width != original->width ||
        generated->height != original->height || mask->width != original->width ||
        mask->height != original->height)
        return tsr_errorf(TSR_ERR_INVALID,
                          "mask overlay: needs RGB images and a gray mask of one size");
    TSR_TRY(tsr_image_alloc(out, original->width, original->height, 3));
    const size_t npix = (size_t)original->width * original->height;
    for (size_t i = 0; i < npix; i++) {
        const unsigned m = mask->data[i];
        for (int c = 0; c < 3; c++) {
            const unsigned g = generated->data[3 * i + c], o = original->data[3 * i + c];
            out->data[3 * i + c] = (uint8_t)((g * m + o * (255 - m) + 127) / 255);
        }
    }
    return TSR_OK;
}
