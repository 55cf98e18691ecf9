/*
 * pipeline/upscale.c - the latent upscalers of A1111's hires fix:
 * torch.nn.functional.interpolate(latents, size, mode, antialias) with
 * align_corners False, on NHWC floats.
 *
 * Why written out per mode rather than one generic resampler: torch has two
 * families of kernels and A1111's names pick between them.  The plain ones
 * (nearest, nearest-exact, bilinear, bicubic with Keys' A = -0.75) compute a
 * source coordinate per output pixel and read a fixed number of neighbours,
 * clamping indices at the border.  The antialiased ones (_upsample_*_aa, the
 * Pillow-style kernels) centre a filter - triangle for bilinear, Keys with
 * a = -0.5 for bicubic - on each output pixel, widen it by the scale when
 * shrinking, keep only the taps inside the image and normalise their
 * weights; they run one axis at a time.  Upscaling bilinear with and without
 * antialias therefore agree (same weights, border included), while the two
 * bicubics differ everywhere.  Arithmetic is float, as torch's for float
 * tensors; the order of the sums follows torch's kernels, so results agree
 * to a few ulps (tests/pipeline/test_upscale.c against goldens made with
 * torch by tools/reference/make_upscale_refs.py).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "pipeline/hires.h"

static const struct {
    const char *name;
    tsr_upscale_mode mode;
    bool antialias;
} k_latent_modes[] = {
    {"Latent", TSR_UPSCALE_BILINEAR, false},
    {"Latent (antialiased)", TSR_UPSCALE_BILINEAR, true},
    {"Latent (bicubic)", TSR_UPSCALE_BICUBIC, false},
    {"Latent (bicubic antialiased)", TSR_UPSCALE_BICUBIC, true},
    {"Latent (nearest)", TSR_UPSCALE_NEAREST, false},
    {"Latent (nearest-exact)", TSR_UPSCALE_NEAREST_EXACT, false},
};

int tsr_hires_upscaler_parse(const char *name, tsr_upscaler_kind *kind, tsr_upscale_mode *mode,
                             bool *antialias)
{
    *kind = TSR_UPSCALER_LATENT;
    *mode = TSR_UPSCALE_BILINEAR;
    *antialias = false;
    if (!name || !*name)
        return TSR_OK;
    for (size_t i = 0; i < sizeof k_latent_modes / sizeof k_latent_modes[0]; i++)
        if (strcasecmp(name, k_latent_modes[i].name) == 0) {
            *mode = k_latent_modes[i].mode;
            *antialias = k_latent_modes[i].antialias;
            return TSR_OK;
        }
    if (strcasecmp(name, "Lanczos") == 0 || strcasecmp(name, "None") == 0) {
        *kind = TSR_UPSCALER_LANCZOS;
        return TSR_OK;
    }
    if (strcasecmp(name, "Nearest") == 0) {
        *kind = TSR_UPSCALER_NEAREST;
        return TSR_OK;
    }
    return tsr_errorf(TSR_ERR_INVALID,
                      "unknown hires upscaler \"%.64s\": one of Latent, Latent (antialiased), "
                      "Latent (bicubic), Latent (bicubic antialiased), Latent (nearest), Latent "
                      "(nearest-exact), Lanczos, Nearest, None",
                      name);
}

/* ---- plain kernels: a source coordinate per output pixel ---- */

static int nearest_index(int dst, int in, int out, bool exact)
{
    if (!exact && out == in)
        return dst;
    if (!exact && out == 2 * in)
        return dst >> 1;
    const float scale = (float)in / (float)out;
    const float src = exact ? floorf(((float)dst + 0.5f) * scale) : floorf((float)dst * scale);
    const int i = (int)src;
    return i < in - 1 ? i : in - 1;
}

/* Keys' cubic convolution with parameter A (torch's cubic_convolution1/2). */
static float cubic1(float x, float A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
static float cubic2(float x, float A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

/* Taps of one output coordinate: up to `max` input indices and weights. */
typedef struct taps {
    int n;
    int idx[64];
    float w[64];
} taps;

static void plain_taps(int dst, int in, int out, tsr_upscale_mode mode, taps *t)
{
    const float scale = (float)in / (float)out;
    float real = scale * ((float)dst + 0.5f) - 0.5f;
    if (mode == TSR_UPSCALE_BILINEAR) {
        if (real < 0)
            real = 0;
        int i0 = (int)floorf(real);
        if (i0 > in - 1)
            i0 = in - 1;
        float l = real - (float)i0;
        l = l < 0 ? 0 : l > 1 ? 1 : l;
        t->n = 2;
        t->idx[0] = i0;
        t->idx[1] = i0 < in - 1 ? i0 + 1 : i0;
        t->w[0] = 1.0f - l;
        t->w[1] = l;
        return;
    }
    /* bicubic: floor, the fraction, four taps clamped into the image */
    const float f = floorf(real);
    const int i0 = (int)f;
    const float x = real - f;
    const float A = -0.75f;
    t->n = 4;
    t->w[0] = cubic2(x + 1.0f, A);
    t->w[1] = cubic1(x, A);
    t->w[2] = cubic1(1.0f - x, A);
    t->w[3] = cubic2(2.0f - x, A);
    for (int k = 0; k < 4; k++) {
        int i = i0 - 1 + k;
        t->idx[k] = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
    }
}

/* ---- antialiased kernels (torch's _compute_weights_aa) ---- */

static float aa_filter(float x, tsr_upscale_mode mode)
{
    x = fabsf(x);
    if (mode == TSR_UPSCALE_BILINEAR)
        return x < 1.0f ? 1.0f - x : 0.0f;
    const float a = -0.5f;
    if (x < 1.0f)
        return cubic1(x, a);
    if (x < 2.0f)
        return cubic2(x, a);
    return 0.0f;
}

static void aa_taps(int dst, int in, int out, tsr_upscale_mode mode, taps *t)
{
    const float scale = (float)in / (float)out;
    const float size = mode == TSR_UPSCALE_BILINEAR ? 2.0f : 4.0f;
    float support = scale >= 1.0f ? size * 0.5f * scale : size * 0.5f;
    const float center = scale * ((float)dst + 0.5f);
    const float invscale = scale >= 1.0f ? 1.0f / scale : 1.0f;
    int xmin = (int)(center - support + 0.5f);
    if (xmin < 0)
        xmin = 0;
    int xmax = (int)(center + support + 0.5f);
    if (xmax > in)
        xmax = in;
    int n = xmax - xmin;
    if (n > 64)
        n = 64; /* scales past 16x shrinking: never asked for by the hires fix */
    float total = 0;
    for (int j = 0; j < n; j++) {
        t->w[j] = aa_filter(((float)(j + xmin) - center + 0.5f) * invscale, mode);
        t->idx[j] = xmin + j;
        total += t->w[j];
    }
    if (total != 0.0f)
        for (int j = 0; j < n; j++)
            t->w[j] /= total;
    t->n = n;
}

/* One axis of the separable aa resample: rows of `len` pixels of c
 * channels, `stride` floats apart in the axis. */
static void aa_axis(const float *in, float *out, int outer, int len_in, int len_out,
                    size_t step_outer_in, size_t step_outer_out, size_t step, int c,
                    tsr_upscale_mode mode)
{
    taps t;
    for (int o = 0; o < len_out; o++) {
        aa_taps(o, len_in, len_out, mode, &t);
        for (int r = 0; r < outer; r++) {
            const float *src = in + (size_t)r * step_outer_in;
            float *dst = out + (size_t)r * step_outer_out + (size_t)o * step;
            for (int ch = 0; ch < c; ch++) {
                float acc = src[(size_t)t.idx[0] * step + ch] * t.w[0];
                for (int k = 1; k < t.n; k++)
                    acc += src[(size_t)t.idx[k] * step + ch] * t.w[k];
                dst[ch] = t.n > 0 ? acc : 0.0f;
            }
        }
    }
}

void tsr_latent_upscale(const float *in, int h, int w, int c, float *out, int oh, int ow,
                        tsr_upscale_mode mode, bool antialias)
{
    if (mode == TSR_UPSCALE_NEAREST || mode == TSR_UPSCALE_NEAREST_EXACT) {
        const bool exact = mode == TSR_UPSCALE_NEAREST_EXACT;
        for (int y = 0; y < oh; y++) {
            const int sy = nearest_index(y, h, oh, exact);
            for (int x = 0; x < ow; x++) {
                const int sx = nearest_index(x, w, ow, exact);
                memcpy(out + ((size_t)y * ow + x) * c, in + ((size_t)sy * w + sx) * c,
                       (size_t)c * sizeof(float));
            }
        }
        return;
    }
    if (antialias) {
        /* height first, then width (torch's separable order); a plain copy
         * where an axis keeps its size */
        float *tmp = NULL;
        const float *src = in;
        if (oh != h) {
            float *dst = ow != w ? (tmp = malloc((size_t)oh * w * c * sizeof(float))) : out;
            if (!dst)
                return;
            /* rows (y) along the axis: outer = columns, step = a row */
            aa_axis(in, dst, w, h, oh, (size_t)c, (size_t)c, (size_t)w * c, c, mode);
            src = dst;
        }
        if (ow != w || src == in) {
            const int rows = oh;
            aa_axis(src, out, rows, w, ow, (size_t)w * c, (size_t)ow * c, (size_t)c, c, mode);
        }
        free(tmp);
        return;
    }
    /* plain bilinear / bicubic: per output pixel, rows outer, columns inner */
    taps ty, tx;
    memset(&ty, 0, sizeof ty);
    memset(&tx, 0, sizeof tx);
    for (int y = 0; y < oh; y++) {
        plain_taps(y, h, oh, mode, &ty);
        for (int x = 0; x < ow; x++) {
            plain_taps(x, w, ow, mode, &tx);
            float *dst = out + ((size_t)y * ow + x) * c;
            for (int ch = 0; ch < c; ch++) {
                float acc = 0;
                for (int i = 0; i < ty.n; i++) {
                    const float *row = in + (size_t)ty.idx[i] * w * c + ch;
                    float r = row[(size_t)tx.idx[0] * c] * tx.w[0];
                    for (int k = 1; k < tx.n; k++)
                        r += row[(size_t)tx.idx[k] * c] * tx.w[k];
                    acc = i == 0 ? r * ty.w[0] : acc + r * ty.w[i];
                }
                dst[ch] = acc;
            }
        }
    }
}
