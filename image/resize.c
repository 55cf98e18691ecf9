/*
 * image/resize.c - resampling 8-bit images as PIL's Image.resize(size,
 * LANCZOS, box) does, and A1111's three img2img resize modes on top of it.
 *
 * Why PIL's algorithm and not just "a Lanczos filter": A1111 prepares every
 * init image and mask with PIL (modules/images.py resize_image, upscaler
 * "None", i.e. plain LANCZOS), so the same input must give the same pixels
 * here or img2img starts from a different picture.  This file reproduces
 * Pillow's libImaging/Resample.c step by step:
 *   - per output pixel a window of the Lanczos-3 kernel, widened by the
 *     downscale factor (filterscale = max(in/out, 1)), centred at
 *     in0 + (x + 0.5) * scale, bounds rounded with C's (int) truncation and
 *     clamped to the image; weights normalised to sum 1 in double, then
 *     converted to 22-bit fixed point (round half away from zero);
 *   - a horizontal pass (skipped when the width and horizontal box are
 *     unchanged) into an 8-bit temporary covering only the rows the
 *     vertical pass reads, then a vertical pass; each pass starts its sums
 *     at 1 << 21 and clips (sum >> 22) to 0..255.
 * Integer arithmetic after the weights makes the result exact: it equals
 * Pillow 9.5.0's - the version A1111 pins - pixel for pixel
 * (tests/image/test_resize.c against tests/data/image/resize/, made by
 * tools/reference/make_resize_refs.py).  Pillow 13 runs the vertical pass
 * first when the height shrinks much more than the width
 * (python-pillow/Pillow#9549), which moves some pixels by a few levels;
 * A1111 installs do not have it.
 *
 * A1111's "resize and fill" pads the borders with PIL resizes of a zero-size
 * box at the image edge; in Pillow that is the Lanczos weights of the three
 * rows (columns) nearest the edge at distances 0.5, 1.5 and 2.5, so the
 * border is a smoothed copy of the edge, not a plain repeat.  Falling out of
 * the same code (box support) keeps that quirk exact too.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "image/image.h"

#define PRECISION_BITS (32 - 8 - 2)
#define LANCZOS_SUPPORT 3.0

static double sinc(double x)
{
    if (x == 0.0)
        return 1.0;
    x *= M_PI;
    return sin(x) / x;
}

static double lanczos(double x)
{
    return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3.0) : 0.0;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc: ksize weights per
 * output position (fixed point) and [xmin, count] bounds.  Owned buffers. */
typedef struct coeffs {
    int ksize;
    int *bounds; /* 2 per output */
    int32_t *k;  /* ksize per output */
} coeffs;

static void coeffs_free(coeffs *c)
{
    free(c->bounds);
    free(c->k);
    memset(c, 0, sizeof *c);
}

static int coeffs_make(int in_size, double in0, double in1, int out_size, coeffs *c)
{
    memset(c, 0, sizeof *c);
    double scale = (in1 - in0) / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = LANCZOS_SUPPORT * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double *pre = malloc((size_t)out_size * (size_t)ksize * sizeof *pre);
    c->bounds = malloc((size_t)out_size * 2 * sizeof *c->bounds);
    c->k = malloc((size_t)out_size * (size_t)ksize * sizeof *c->k);
    if (!pre || !c->bounds || !c->k) {
        free(pre);
        coeffs_free(c);
        return tsr_errorf(TSR_ERR_NOMEM, "resize: out of memory");
    }
    c->ksize = ksize;
    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        double *k = pre + (size_t)xx * ksize;
        int x = 0;
        for (; x < xmax; x++) {
            double w = lanczos((x + xmin - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0)
                k[x] /= ww;
        for (; x < ksize; x++)
            k[x] = 0;
        c->bounds[xx * 2] = xmin;
        c->bounds[xx * 2 + 1] = xmax;
    }
    for (size_t i = 0; i < (size_t)out_size * (size_t)ksize; i++)
        c->k[i] = pre[i] < 0 ? (int32_t)(-0.5 + pre[i] * (1 << PRECISION_BITS))
                             : (int32_t)(0.5 + pre[i] * (1 << PRECISION_BITS));
    free(pre);
    return TSR_OK;
}

static uint8_t clip8(int64_t v)
{
    v >>= PRECISION_BITS; /* arithmetic shift: floor, as Pillow's lookup table */
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

int tsr_image_resize_box(const tsr_image *src, uint32_t width, uint32_t height,
                         const double box_in[4], tsr_image *dst)
{
    memset(dst, 0, sizeof *dst);
    if (!src || !src->data || src->width == 0 || src->height == 0)
        return tsr_errorf(TSR_ERR_INVALID, "resize: no source image");
    const uint32_t ch = src->channels;
    TSR_TRY(tsr_image_check_size(width, height, ch, NULL, "resize"));
    double box[4] = {0, 0, src->width, src->height};
    if (box_in)
        memcpy(box, box_in, sizeof box);
    if (box[0] < 0 || box[1] < 0 || box[2] > src->width || box[3] > src->height ||
        box[2] - box[0] < 0 || box[3] - box[1] < 0)
        return tsr_errorf(TSR_ERR_INVALID, "resize: box (%g, %g, %g, %g) outside the %ux%u image",
                          box[0], box[1], box[2], box[3], src->width, src->height);
    const bool need_h = width != src->width || box[0] != 0 || box[2] != width;
    const bool need_v = height != src->height || box[1] != 0 || box[3] != height;
    coeffs ch_h = {0}, ch_v = {0};
    tsr_image tmp = {0};
    int rc = TSR_OK;
    TSR_CHECK_GOTO(rc, coeffs_make((int)src->width, box[0], box[2], (int)width, &ch_h), done);
    TSR_CHECK_GOTO(rc, coeffs_make((int)src->height, box[1], box[3], (int)height, &ch_v), done);
    const tsr_image *cur = src;
    /* rows of the source the vertical pass reads */
    int y_first = ch_v.bounds[0];
    int y_last = ch_v.bounds[height * 2 - 2] + ch_v.bounds[height * 2 - 1];
    if (need_h) {
        for (uint32_t i = 0; i < height; i++)
            ch_v.bounds[i * 2] -= y_first;
        uint32_t rows = (uint32_t)(y_last - y_first);
        if (rows == 0)
            rows = 1; /* Pillow's temporary is never read in this case */
        TSR_CHECK_GOTO(rc, tsr_image_alloc(&tmp, width, rows, ch), done);
        for (uint32_t y = 0; y < (uint32_t)(y_last - y_first); y++) {
            const uint8_t *in = src->data + (size_t)(y + (uint32_t)y_first) * src->width * ch;
            uint8_t *out = tmp.data + (size_t)y * width * ch;
            for (uint32_t xx = 0; xx < width; xx++) {
                const int xmin = ch_h.bounds[xx * 2], xmax = ch_h.bounds[xx * 2 + 1];
                const int32_t *k = ch_h.k + (size_t)xx * ch_h.ksize;
                for (uint32_t c = 0; c < ch; c++) {
                    int64_t ss = 1 << (PRECISION_BITS - 1);
                    for (int x = 0; x < xmax; x++)
                        ss += (int64_t)in[(size_t)(x + xmin) * ch + c] * k[x];
                    out[(size_t)xx * ch + c] = clip8(ss);
                }
            }
        }
        cur = &tmp;
    }
    if (need_v) {
        TSR_CHECK_GOTO(rc, tsr_image_alloc(dst, cur->width, height, ch), done);
        const size_t stride = (size_t)cur->width * ch;
        for (uint32_t yy = 0; yy < height; yy++) {
            const int ymin = ch_v.bounds[yy * 2], ymax = ch_v.bounds[yy * 2 + 1];
            const int32_t *k = ch_v.k + (size_t)yy * ch_v.ksize;
            uint8_t *out = dst->data + (size_t)yy * stride;
            for (size_t i = 0; i < stride; i++) {
                int64_t ss = 1 << (PRECISION_BITS - 1);
                for (int y = 0; y < ymax; y++)
                    ss += (int64_t)cur->data[(size_t)(y + ymin) * stride + i] * k[y];
                out[i] = clip8(ss);
            }
        }
    } else if (cur == &tmp) {
        *dst = tmp;
        memset(&tmp, 0, sizeof tmp);
    } else {
        TSR_CHECK_GOTO(rc, tsr_image_alloc(dst, src->width, src->height, ch), done);
        memcpy(dst->data, src->data, tsr_image_bytes(src));
    }
done:
    if (rc < 0)
        tsr_image_free(dst);
    tsr_image_free(&tmp);
    coeffs_free(&ch_h);
    coeffs_free(&ch_v);
    return rc;
}

int tsr_image_resize(const tsr_image *src, uint32_t width, uint32_t height, tsr_image *dst)
{
    return tsr_image_resize_box(src, width, height, NULL, dst);
}

/* ---- A1111's resize modes ---- */

int tsr_resize_mode_parse(const char *s, tsr_resize_mode *out)
{
    static const struct {
        const char *name;
        tsr_resize_mode mode;
    } names[] = {
        {"just-resize", TSR_RESIZE_JUST},       {"just resize", TSR_RESIZE_JUST},
        {"crop-and-resize", TSR_RESIZE_CROP},   {"crop and resize", TSR_RESIZE_CROP},
        {"resize-and-fill", TSR_RESIZE_FILL},   {"resize and fill", TSR_RESIZE_FILL},
        {"0", TSR_RESIZE_JUST}, {"1", TSR_RESIZE_CROP}, {"2", TSR_RESIZE_FILL},
    };
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].mode;
            return TSR_OK;
        }
    return tsr_errorf(TSR_ERR_INVALID,
                      "unknown resize mode '%s': expected just-resize, crop-and-resize or "
                      "resize-and-fill",
                      s ? s : "");
}

const char *tsr_resize_mode_name(tsr_resize_mode m)
{
    switch (m) {
    case TSR_RESIZE_CROP: return "crop-and-resize";
    case TSR_RESIZE_FILL: return "resize-and-fill";
    default: return "just-resize";
    }
}

/* Image.paste(part, (x0, y0)) into dst: clipped to dst. */
static void paste(tsr_image *dst, const tsr_image *part, int64_t x0, int64_t y0)
{
    const uint32_t ch = dst->channels;
    for (uint32_t y = 0; y < part->height; y++) {
        int64_t ty = y0 + y;
        if (ty < 0 || ty >= dst->height)
            continue;
        int64_t from = x0 < 0 ? -x0 : 0, to = part->width;
        if (x0 + to > dst->width)
            to = dst->width - x0;
        if (to <= from)
            continue;
        memcpy(dst->data + ((size_t)ty * dst->width + (size_t)(x0 + from)) * ch,
               part->data + ((size_t)y * part->width + (size_t)from) * ch,
               (size_t)(to - from) * ch);
    }
}

/* Paste resize(src, w, h, box) at (x, y). */
static int paste_resized(tsr_image *dst, const tsr_image *src, uint32_t w, uint32_t h,
                         const double box[4], int64_t x, int64_t y)
{
    tsr_image part = {0};
    TSR_TRY(tsr_image_resize_box(src, w, h, box, &part));
    paste(dst, &part, x, y);
    tsr_image_free(&part);
    return TSR_OK;
}

int tsr_image_resize_a1111(const tsr_image *src, tsr_resize_mode mode, uint32_t width,
                           uint32_t height, tsr_image *dst)
{
    memset(dst, 0, sizeof *dst);
    if (!src || !src->data || src->width == 0 || src->height == 0)
        return tsr_errorf(TSR_ERR_INVALID, "resize: no source image");
    if (mode == TSR_RESIZE_JUST)
        return tsr_image_resize(src, width, height, dst);
    /* Python: ratio = width / height etc., with // floor division */
    const int64_t W = width, H = height, iw = src->width, ih = src->height;
    const double ratio = (double)W / (double)H, src_ratio = (double)iw / (double)ih;
    int64_t src_w, src_h;
    if (mode == TSR_RESIZE_CROP) {
        src_w = ratio > src_ratio ? W : iw * H / ih;
        src_h = ratio <= src_ratio ? H : ih * W / iw;
    } else {
        src_w = ratio < src_ratio ? W : iw * H / ih;
        src_h = ratio >= src_ratio ? H : ih * W / iw;
    }
    if (src_w < 1)
        src_w = 1;
    if (src_h < 1)
        src_h = 1;
    tsr_image resized = {0};
    int rc = TSR_OK;
    TSR_CHECK_GOTO(rc, tsr_image_resize(src, (uint32_t)src_w, (uint32_t)src_h, &resized), done);
    TSR_CHECK_GOTO(rc, tsr_image_alloc(dst, width, height, src->channels), done);
    memset(dst->data, 0, tsr_image_bytes(dst)); /* Image.new("RGB", ...) is black */
    paste(dst, &resized, W / 2 - src_w / 2, H / 2 - src_h / 2);
    if (mode == TSR_RESIZE_FILL) {
        const double rw = resized.width, rh = resized.height;
        if (ratio < src_ratio) {
            int64_t fill = H / 2 - src_h / 2;
            if (fill > 0) {
                const double top[4] = {0, 0, (double)W, 0}, bottom[4] = {0, rh, (double)W, rh};
                TSR_CHECK_GOTO(rc, paste_resized(dst, &resized, width, (uint32_t)fill, top, 0, 0),
                               done);
                TSR_CHECK_GOTO(rc, paste_resized(dst, &resized, width, (uint32_t)fill, bottom, 0,
                                                 fill + src_h),
                               done);
            }
        } else if (ratio > src_ratio) {
            int64_t fill = W / 2 - src_w / 2;
            if (fill > 0) {
                const double left[4] = {0, 0, 0, (double)H}, right[4] = {rw, 0, rw, (double)H};
                TSR_CHECK_GOTO(rc, paste_resized(dst, &resized, (uint32_t)fill, height, left, 0, 0),
                               done);
                TSR_CHECK_GOTO(rc, paste_resized(dst, &resized, (uint32_t)fill, height, right,
                                                 fill + src_w, 0),
                               done);
            }
        }
    }
done:
    if (rc < 0)
        tsr_image_free(dst);
    tsr_image_free(&resized);
    return rc;
}
