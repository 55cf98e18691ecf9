/*
 * service/api/comfy/comfy_scale.c - ComfyUI's ImageScale and ImageScaleBy,
 * computed as ComfyUI computes them (comfy/utils.py common_upscale).
 *
 * Why our own resampler and not tsr_image_resample for every method:
 * ComfyUI's IMAGE is float (0..1, channels last), and ImageScale runs
 * torch.nn.functional.interpolate on it for nearest-exact, bilinear, area
 * and bicubic (align_corners False, no antialias): those are torch's
 * formulas in float32, which the engine's Pillow filters are not.  Only
 * lanczos goes through Pillow in ComfyUI (the image clipped and truncated
 * to 8 bits, Image.LANCZOS, then / 255), and the engine's Lanczos equals
 * Pillow's (tests/image/), so that one is tsr_image_resample.  The size
 * rules are the nodes' (Python's round, ties to even: nearbyint): ImageScale
 * 0 = from the other side's ratio, ImageScaleBy round(side * scale_by),
 * crop "center" cutting the input to the new aspect first.
 *
 * Where the float image meets 8 bits: Tessera's images are 8-bit (an
 * upload, or the sampled image the store keeps), read as k / 255 exactly as
 * ComfyUI's LoadImage reads a file (float32 k / 255, which 255 * x gives
 * back exactly for every k).  Out again: SaveImage's way (clip(255 * x),
 * truncated) for an output, round(255 * x) for pixels going into VAEEncode
 * (ComfyUI hands the VAE the floats; Tessera's init image is 8-bit, so
 * bilinear, area and bicubic there are within 0.5/255 of ComfyUI's, and
 * nearest-exact and lanczos exact).  The float32 arithmetic follows
 * torch's CPU kernels for ComfyUI's channels-last tensor (bilinear: four
 * products of the two axes' weights summed in order; bicubic: A = -0.75,
 * rows then columns; area: adaptive average pooling's windows), but torch
 * vectorises and may fuse multiply-adds, so results agree to about 1e-6,
 * not always to the bit (tools/reference/make_comfy_scale_goldens.py,
 * tests/service/test_comfy_scale.c).
 */
#include "comfy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"

static const char *const k_methods[] = {"nearest-exact", "bilinear", "area", "bicubic", "lanczos"};

int comfy_scale_method_of(const char *name)
{
    for (int i = 0; name && i < (int)(sizeof k_methods / sizeof k_methods[0]); i++)
        if (strcmp(k_methods[i], name) == 0)
            return i;
    return -1;
}

const char *comfy_scale_method_name(comfy_scale_method m)
{
    return (unsigned)m < sizeof k_methods / sizeof k_methods[0] ? k_methods[m] : "?";
}

bool comfy_scale_size(const comfy_scale *op, int w, int h, int *ow, int *oh)
{
    double W, H;
    if (op->scale_by > 0) {
        W = nearbyint((double)w * op->scale_by);
        H = nearbyint((double)h * op->scale_by);
    } else if (op->width == 0 && op->height == 0) {
        W = w, H = h; /* ImageScale passes the image through */
    } else if (op->width == 0) {
        H = op->height;
        W = fmax(1, nearbyint((double)((long long)w * op->height) / h));
    } else if (op->height == 0) {
        W = op->width;
        H = fmax(1, nearbyint((double)((long long)h * op->width) / w));
    } else {
        W = op->width, H = op->height;
    }
    if (!(W >= 1 && H >= 1 && W <= COMFY_SCALE_MAX && H <= COMFY_SCALE_MAX))
        return false;
    *ow = (int)W;
    *oh = (int)H;
    return true;
}

/* ---------------------------------------------------- torch's kernels */

/* nearest-exact: src = min(floorf((dst + 0.5) * scale), in - 1), scale =
 * in / out in float (ATen's nearest_neighbor_exact_compute_source_index) */
static void nearest_index(int in, int out, int *idx)
{
    const float scale = (float)in / (float)out;
    for (int i = 0; i < out; i++) {
        int s = (int)floorf((float)((i + 0.5) * (double)scale));
        idx[i] = s < in - 1 ? s : in - 1;
    }
}

/* linear (align_corners False): ATen's area_pixel_compute_source_index
 * and guard_index_and_lambda */
static void linear_weights(int in, int out, int *i0, int *i1, float *l0, float *l1)
{
    const float scale = (float)in / (float)out;
    for (int i = 0; i < out; i++) {
        if (in == out) {
            i0[i] = i1[i] = i;
            l0[i] = 1.0f, l1[i] = 0.0f;
            continue;
        }
        float real = scale * ((float)i + 0.5f) - 0.5f;
        if (real < 0)
            real = 0;
        int k = (int)floorf(real);
        if (k > in - 1)
            k = in - 1;
        float lam = real - (float)k;
        lam = lam < 0 ? 0 : lam > 1 ? 1 : lam;
        i0[i] = k;
        i1[i] = k + (k < in - 1 ? 1 : 0);
        l1[i] = lam;
        l0[i] = 1.0f - lam;
    }
}

static float cubic1(float x, float a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
static float cubic2(float x, float a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

/* cubic (A = -0.75, align_corners False): four taps, clamped at the edges */
static void cubic_weights(int in, int out, int *idx, float *wt)
{
    const float scale = (float)in / (float)out;
    const float a = -0.75f;
    for (int i = 0; i < out; i++) {
        float real = scale * ((float)i + 0.5f) - 0.5f;
        int k = (int)floorf(real);
        if (k > in - 1)
            k = in - 1;
        float t = real - (float)k;
        t = t < 0 ? 0 : t > 1 ? 1 : t;
        wt[4 * i + 0] = cubic2(t + 1.0f, a);
        wt[4 * i + 1] = cubic1(t, a);
        wt[4 * i + 2] = cubic1(1.0f - t, a);
        wt[4 * i + 3] = cubic2(1.0f - t + 1.0f, a);
        for (int j = 0; j < 4; j++) {
            int s = k - 1 + j;
            idx[4 * i + j] = s < 0 ? 0 : s > in - 1 ? in - 1 : s;
        }
    }
}

/* one interpolate call: in (w x h, c channels, interleaved) -> out */
static int interpolate(const float *in, int w, int h, int c, comfy_scale_method m, int ow, int oh,
                       float *out)
{
    if (m == CS_NEAREST_EXACT) {
        int *xs = malloc((size_t)ow * sizeof *xs), *ys = malloc((size_t)oh * sizeof *ys);
        if (!xs || !ys) {
            free(xs);
            free(ys);
            return -1;
        }
        nearest_index(w, ow, xs);
        nearest_index(h, oh, ys);
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                memcpy(out + ((size_t)y * ow + x) * c, in + ((size_t)ys[y] * w + xs[x]) * c,
                       (size_t)c * sizeof *out);
        free(xs);
        free(ys);
        return 0;
    }
    if (m == CS_AREA) {
        /* adaptive_avg_pool2d: window [floor(i*in/out), ceil((i+1)*in/out)) */
        for (int y = 0; y < oh; y++) {
            int y0 = (int)(((long long)y * h) / oh);
            int y1 = (int)(((long long)(y + 1) * h + oh - 1) / oh);
            for (int x = 0; x < ow; x++) {
                int x0 = (int)(((long long)x * w) / ow),
                    x1 = (int)(((long long)(x + 1) * w + ow - 1) / ow);
                float *o = out + ((size_t)y * ow + x) * c;
                for (int k = 0; k < c; k++)
                    o[k] = 0;
                for (int iy = y0; iy < y1; iy++)
                    for (int ix = x0; ix < x1; ix++)
                        for (int k = 0; k < c; k++)
                            o[k] = o[k] + in[((size_t)iy * w + ix) * c + k];
                const float n = (float)((y1 - y0) * (x1 - x0));
                for (int k = 0; k < c; k++)
                    o[k] = o[k] / n;
            }
        }
        return 0;
    }
    if (m == CS_BILINEAR) {
        int *x0 = malloc((size_t)ow * 2 * sizeof *x0), *y0 = malloc((size_t)oh * 2 * sizeof *y0);
        float *xl = malloc((size_t)ow * 2 * sizeof *xl), *yl = malloc((size_t)oh * 2 * sizeof *yl);
        if (!x0 || !y0 || !xl || !yl) {
            free(x0), free(y0), free(xl), free(yl);
            return -1;
        }
        linear_weights(w, ow, x0, x0 + ow, xl, xl + ow);
        linear_weights(h, oh, y0, y0 + oh, yl, yl + oh);
        for (int y = 0; y < oh; y++) {
            const float *r0 = in + (size_t)y0[y] * w * c, *r1 = in + (size_t)y0[oh + y] * w * c;
            for (int x = 0; x < ow; x++) {
                /* torch's channels-last kernel: the four weights are products */
                const float w00 = yl[y] * xl[x], w01 = yl[y] * xl[ow + x];
                const float w10 = yl[oh + y] * xl[x], w11 = yl[oh + y] * xl[ow + x];
                const float *a = r0 + (size_t)x0[x] * c, *b = r0 + (size_t)x0[ow + x] * c;
                const float *d = r1 + (size_t)x0[x] * c, *e = r1 + (size_t)x0[ow + x] * c;
                float *o = out + ((size_t)y * ow + x) * c;
                for (int k = 0; k < c; k++)
                    o[k] = w00 * a[k] + w01 * b[k] + w10 * d[k] + w11 * e[k];
            }
        }
        free(x0), free(y0), free(xl), free(yl);
        return 0;
    }
    /* bicubic: each output row is sum_j wy_j * (sum_i wx_i * px), in order */
    int *xi = malloc((size_t)ow * 4 * sizeof *xi), *yi = malloc((size_t)oh * 4 * sizeof *yi);
    float *xw = malloc((size_t)ow * 4 * sizeof *xw), *yw = malloc((size_t)oh * 4 * sizeof *yw);
    if (!xi || !yi || !xw || !yw) {
        free(xi), free(yi), free(xw), free(yw);
        return -1;
    }
    cubic_weights(w, ow, xi, xw);
    cubic_weights(h, oh, yi, yw);
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++)
            for (int k = 0; k < c; k++) {
                float acc = 0;
                for (int j = 0; j < 4; j++) {
                    const float *row = in + (size_t)yi[4 * y + j] * w * c;
                    float t = row[(size_t)xi[4 * x] * c + k] * xw[4 * x];
                    for (int i = 1; i < 4; i++)
                        t += row[(size_t)xi[4 * x + i] * c + k] * xw[4 * x + i];
                    acc = j == 0 ? t * yw[4 * y] : acc + t * yw[4 * y + j];
                }
                out[((size_t)y * ow + x) * c + k] = acc;
            }
    free(xi), free(yi), free(xw), free(yw);
    return 0;
}

/* lanczos as ComfyUI's comfy.utils.lanczos: clip(255 x) truncated to 8
 * bits, Pillow's LANCZOS, / 255 */
static int lanczos(const float *in, int w, int h, int c, int ow, int oh, float *out)
{
    size_t n = (size_t)w * h * c;
    uint8_t *u8 = malloc(n), *res = NULL;
    if (!u8)
        return -1;
    for (size_t i = 0; i < n; i++) {
        float v = 255.0f * in[i];
        u8[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    int rc = tsr_image_resample(u8, w, h, c, ow, oh, COMFY_SCALE_MAX, TSR_RESAMPLE_LANCZOS, &res);
    free(u8);
    if (rc != TSR_OK)
        return -1;
    for (size_t i = 0; i < (size_t)ow * oh * c; i++)
        out[i] = (float)res[i] / 255.0f;
    free(res);
    return 0;
}

int comfy_scale_apply(const float *in, int w, int h, int c, const comfy_scale *op, float **out,
                      int *ow, int *oh, char *err, size_t err_size)
{
    *out = NULL;
    int W, H;
    if (!comfy_scale_size(op, w, h, &W, &H)) {
        snprintf(err, err_size, "scaling %dx%d gives a side outside 1..%d", w, h, COMFY_SCALE_MAX);
        return -1;
    }
    /* crop "center": cut the input to the new aspect (common_upscale) */
    int cx = 0, cy = 0;
    if (op->crop_center && op->scale_by <= 0 && !(op->width == 0 && op->height == 0)) {
        const double old_aspect = (double)w / h, new_aspect = (double)W / H;
        if (old_aspect > new_aspect)
            cx = (int)nearbyint((w - w * (new_aspect / old_aspect)) / 2);
        else if (old_aspect < new_aspect)
            cy = (int)nearbyint((h - h * (old_aspect / new_aspect)) / 2);
    }
    const int iw = w - 2 * cx, ih = h - 2 * cy;
    if (iw < 1 || ih < 1) {
        snprintf(err, err_size, "crop center leaves nothing of %dx%d", w, h);
        return -1;
    }
    float *src = (float *)in, *cut = NULL;
    if (cx || cy) {
        cut = malloc((size_t)iw * ih * c * sizeof *cut);
        if (!cut)
            goto oom;
        for (int y = 0; y < ih; y++)
            memcpy(cut + (size_t)y * iw * c, in + ((size_t)(y + cy) * w + cx) * c,
                   (size_t)iw * c * sizeof *cut);
        src = cut;
    }
    float *dst = malloc((size_t)W * H * c * sizeof *dst);
    if (!dst)
        goto oom;
    int rc = op->method == CS_LANCZOS ? lanczos(src, iw, ih, c, W, H, dst)
                                      : interpolate(src, iw, ih, c, op->method, W, H, dst);
    free(cut);
    if (rc < 0) {
        free(dst);
        snprintf(err, err_size, "out of memory scaling to %dx%d", W, H);
        return -1;
    }
    *out = dst;
    *ow = W;
    *oh = H;
    return 0;
oom:
    free(cut);
    snprintf(err, err_size, "out of memory scaling to %dx%d", W, H);
    return -1;
}

int comfy_scale_rgb(const uint8_t *rgb, int w, int h, const comfy_scale *ops, int n, bool save,
                    uint8_t **out, int *ow, int *oh, char *err, size_t err_size)
{
    *out = NULL;
    size_t count = (size_t)w * h * 3;
    float *cur = malloc(count * sizeof *cur);
    if (!cur) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        cur[i] = (float)rgb[i] / 255.0f; /* LoadImage's float32 k / 255 */
    int cw = w, ch = h;
    for (int i = 0; i < n; i++) {
        float *next = NULL;
        int nw, nh;
        if (comfy_scale_apply(cur, cw, ch, 3, &ops[i], &next, &nw, &nh, err, err_size) < 0) {
            free(cur);
            return -1;
        }
        free(cur);
        cur = next, cw = nw, ch = nh;
    }
    count = (size_t)cw * ch * 3;
    uint8_t *px = malloc(count);
    if (!px) {
        free(cur);
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        float v = 255.0f * cur[i];
        v = v < 0 ? 0 : v > 255 ? 255 : v;
        px[i] = (uint8_t)(save ? v : nearbyintf(v)); /* SaveImage truncates */
    }
    free(cur);
    *out = px;
    *ow = cw;
    *oh = ch;
    return 0;
}
