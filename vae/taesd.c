/*
 * vae/taesd.c - madebyollin's Tiny AutoEncoder (TAESD) decoder, for
 * full-size previews.
 *
 * Architecture (read from madebyollin/taesd's taesd.py, written anew here):
 * a Sequential of
 *   0 Clamp: tanh(x / 3) * 3
 *   1 conv3x3(C -> 64) + ReLU (2)
 *   3-5 Block x3, 6 Upsample 2x, 7 conv3x3 no bias
 *   8-10 Block x3, 11 Upsample, 12 conv3x3 no bias
 *   13-15 Block x3, 16 Upsample, 17 conv3x3 no bias
 *   18 Block, 19 conv3x3(64 -> 3)
 * where Block(x) = relu(conv(relu(conv(relu(conv(x))))) + skip(x)) with
 * 3x3 convs with bias and skip the identity (64 -> 64).  The state dict keys
 * are the Sequential indices: "1.weight", "3.conv.0.weight", "3.conv.2.bias",
 * "7.weight", ...  The decoder maps UNet-scale latents to RGB in about
 * [0, 1].
 *
 * Memory: weights are converted to f32 OHWI into one arena; activations
 * rotate through three slots as large as the 64-channel map at full size.
 * ReLU and tanh are not backend ops yet, so they run on the slots' host
 * memory: TAESD needs a host-visible backend (the CPU).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/arena.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "vae/preview.h"

#define TAESD_CONVS 35 /* 1 + 10 blocks * 3 + 3 upsample convs + 1 final */

typedef struct taesd_conv {
    tsr_tensor w, b; /* b.data NULL when the conv has no bias */
    bool has_bias;
} taesd_conv;

struct tsr_taesd {
    tsr_backend *backend; /* borrowed */
    int latent_c, width;
    tsr_arena weights;
    taesd_conv conv[TAESD_CONVS];
    tsr_arena ws;
    float *slot[3];
    size_t slot_elems;
};

/* The Sequential's layout: for each conv, its key prefix, whether it has a
 * bias, and its input/output widths (0 = latent channels, 3 = RGB). */
typedef struct conv_spec {
    char name[24];
    bool bias;
    int cin, cout; /* -1: latent channels, -2: width */
} conv_spec;

static int build_specs(conv_spec *s)
{
    int n = 0;
    snprintf(s[n].name, sizeof s[n].name, "1");
    s[n].bias = true, s[n].cin = -1, s[n].cout = -2, n++;
    static const int blocks[10] = {3, 4, 5, 8, 9, 10, 13, 14, 15, 18};
    static const int ups[3] = {7, 12, 17};
    int u = 0;
    for (int b = 0; b < 10; b++) {
        for (int k = 0; k < 3; k++) {
            snprintf(s[n].name, sizeof s[n].name, "%d.conv.%d", blocks[b], 2 * k);
            s[n].bias = true, s[n].cin = -2, s[n].cout = -2, n++;
        }
        if (u < 3 && blocks[b] + 2 == ups[u]) {
            snprintf(s[n].name, sizeof s[n].name, "%d", ups[u]);
            s[n].bias = false, s[n].cin = -2, s[n].cout = -2, n++;
            u++;
        }
    }
    snprintf(s[n].name, sizeof s[n].name, "19");
    s[n].bias = true, s[n].cin = -2, s[n].cout = 3, n++;
    return n;
}

/* Read one tensor as f32 (converting f16/bf16), OIHW -> OHWI for 4-D. */
static int read_f32(const tsr_safetensors *st, const tsr_st_entry *e, const char *path, float *dst)
{
    tsr_dtype dt;
    if (!tsr_st_dtype_to_tsr(e->dtype, &dt) || (dt != TSR_F32 && dt != TSR_F16 && dt != TSR_BF16))
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (want F32/F16/BF16)",
                          path, e->name, tsr_st_dtype_name(e->dtype));
    const unsigned char *src = tsr_st_data(st, e);
    const size_t n = (size_t)tsr_st_numel(e), es = tsr_dtype_size(dt);
    const int64_t O = e->shape[0];
    const int64_t I = e->ndim == 4 ? e->shape[1] : 1, KH = e->ndim == 4 ? e->shape[2] : 1,
                  KW = e->ndim == 4 ? e->shape[3] : 1;
    for (size_t i = 0; i < n; i++) {
        float f;
        if (dt == TSR_F32) {
            memcpy(&f, src + i * es, 4);
        } else {
            uint16_t hv;
            memcpy(&hv, src + i * es, 2);
            f = dt == TSR_F16 ? tsr_f16_to_f32(hv) : tsr_bf16_to_f32(hv);
        }
        size_t j = i;
        if (e->ndim == 4) { /* i = ((o*I + ci)*KH + y)*KW + x -> ((o*KH + y)*KW + x)*I + ci */
            int64_t x = (int64_t)i % KW, y = (int64_t)(i / KW) % KH, ci = (int64_t)(i / (KW * KH)) % I,
                    o = (int64_t)i / (KW * KH * I);
            j = (size_t)(((o * KH + y) * KW + x) * I + ci);
        }
        dst[j] = f;
    }
    (void)O;
    return TSR_OK;
}

int tsr_taesd_open(const char *path, tsr_backend *backend, tsr_taesd **out)
{
    if (!out)
        return tsr_errorf(TSR_ERR_INVALID, "taesd: NULL output");
    *out = NULL;
    if (!path || !backend)
        return tsr_errorf(TSR_ERR_INVALID, "taesd: NULL argument");
    if (!backend->host_visible)
        return tsr_errorf(TSR_ERR_UNSUPPORTED,
                          "taesd: backend %s is not host-visible (TAESD runs on the CPU for now)",
                          backend->name);
    tsr_safetensors *st = NULL;
    TSR_TRY(tsr_st_open(path, &st));
    tsr_taesd *t = calloc(1, sizeof *t);
    conv_spec spec[TAESD_CONVS];
    int rc = TSR_OK;
    if (!t) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "taesd: out of memory");
        goto fail;
    }
    t->backend = backend;
    const tsr_st_entry *first = tsr_st_find(st, "1.weight");
    if (!first || first->ndim != 4 || first->shape[2] != 3 || first->shape[3] != 3 ||
        first->shape[0] < 1 || first->shape[0] > 1024 || first->shape[1] < 1 || first->shape[1] > 64) {
        rc = tsr_errorf(TSR_ERR_FORMAT,
                        "%s: not a madebyollin/taesd decoder (no 3x3 conv '1.weight' of "
                        "[width, latent channels, 3, 3])",
                        path);
        goto fail;
    }
    t->width = (int)first->shape[0];
    t->latent_c = (int)first->shape[1];
    const int n = build_specs(spec);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const int ci = spec[i].cin == -1 ? t->latent_c : t->width;
        const int co = spec[i].cout == -2 ? t->width : spec[i].cout;
        total += (size_t)co * 9 * ci + (size_t)TSR_ARENA_ALIGN / 4 + (size_t)co + TSR_ARENA_ALIGN / 4;
    }
    TSR_CHECK_GOTO(rc, tsr_arena_init(&t->weights, backend, total * sizeof(float)), fail);
    for (int i = 0; i < n; i++) {
        const int ci = spec[i].cin == -1 ? t->latent_c : t->width;
        const int co = spec[i].cout == -2 ? t->width : spec[i].cout;
        char key[48];
        snprintf(key, sizeof key, "%s.weight", spec[i].name);
        const tsr_st_entry *e = tsr_st_find(st, key);
        if (!e || e->ndim != 4 || e->shape[0] != co || e->shape[1] != ci || e->shape[2] != 3 ||
            e->shape[3] != 3) {
            rc = tsr_errorf(TSR_ERR_FORMAT, "%s: tensor '%s' %s, expected [%d, %d, 3, 3]", path, key,
                            e ? "has another shape" : "is missing", co, ci);
            goto fail;
        }
        taesd_conv *c = &t->conv[i];
        const int64_t ne[4] = {co, 3, 3, ci};
        TSR_CHECK_GOTO(rc, tsr_arena_tensor(&t->weights, &c->w, TSR_F32, 4, ne), fail);
        TSR_CHECK_GOTO(rc, read_f32(st, e, path, c->w.data), fail);
        c->has_bias = spec[i].bias;
        snprintf(key, sizeof key, "%s.bias", spec[i].name);
        e = tsr_st_find(st, key);
        if (spec[i].bias) {
            if (!e || e->ndim != 1 || e->shape[0] != co) {
                rc = tsr_errorf(TSR_ERR_FORMAT, "%s: tensor '%s' %s, expected [%d]", path, key,
                                e ? "has another shape" : "is missing", co);
                goto fail;
            }
            const int64_t nb[1] = {co};
            TSR_CHECK_GOTO(rc, tsr_arena_tensor(&t->weights, &c->b, TSR_F32, 1, nb), fail);
            TSR_CHECK_GOTO(rc, read_f32(st, e, path, c->b.data), fail);
        } else if (e) {
            rc = tsr_errorf(TSR_ERR_FORMAT, "%s: unexpected bias '%s'", path, key);
            goto fail;
        }
    }
    tsr_st_close(st);
    *out = t;
    return TSR_OK;
fail:
    tsr_st_close(st);
    tsr_taesd_free(t);
    return rc;
}

void tsr_taesd_free(tsr_taesd *t)
{
    if (!t)
        return;
    tsr_arena_free(&t->weights);
    tsr_arena_free(&t->ws);
    free(t);
}

int tsr_taesd_latent_channels(const tsr_taesd *t) { return t->latent_c; }

static void relu(tsr_tensor *x)
{
    float *p = x->data;
    const size_t n = (size_t)tsr_tensor_numel(x);
    for (size_t i = 0; i < n; i++)
        p[i] = p[i] > 0.0f ? p[i] : 0.0f;
}

/* TAESD stays f32 (its ReLU and tanh run on the host; see preview.h), so
 * its activations name f32 rather than the backend's activation dtype. */
static tsr_tensor slot(tsr_taesd *t, int s, int64_t n, int64_t h, int64_t w, int64_t c)
{
    const int64_t ne[4] = {n, h, w, c};
    return tsr_tensor_make(TSR_F32, 4, ne, t->slot[s], t->backend);
}

static int conv(tsr_taesd *t, int i, const tsr_tensor *x, tsr_tensor *y)
{
    const tsr_conv2d_params p = tsr_conv2d_params_make(1, 1);
    const taesd_conv *c = &t->conv[i];
    return tsr_conv2d(t->backend, x, &c->w, c->has_bias ? &c->b : NULL, &p, y);
}

int tsr_taesd_decode(tsr_taesd *t, const float *latents, int batch, int h, int w, float *images)
{
    if (!t || !latents || !images)
        return tsr_errorf(TSR_ERR_INVALID, "taesd: NULL argument");
    if (batch < 1 || batch > 4096 || h < 1 || w < 1 || h > 4096 || w > 4096)
        return tsr_errorf(TSR_ERR_INVALID, "taesd: batch %d, latent %dx%d out of range", batch, w, h);
    tsr_backend *be = t->backend;
    const int64_t W = t->width, C = t->latent_c;
    uint64_t need = (uint64_t)batch * 64 * (uint64_t)h * (uint64_t)w * (uint64_t)W;
    if (need > (uint64_t)SIZE_MAX / 64 || need > (1ull << 40))
        return tsr_errorf(TSR_ERR_RANGE, "taesd: %d x %dx%d is too large", batch, w, h);
    if (need > t->slot_elems) {
        tsr_arena_free(&t->ws);
        memset(&t->ws, 0, sizeof t->ws);
        t->slot_elems = 0;
        const size_t bytes = ((size_t)need * sizeof(float) + 63) & ~(size_t)63;
        TSR_TRY(tsr_arena_init(&t->ws, be, 3 * bytes));
        for (int i = 0; i < 3; i++)
            t->slot[i] = tsr_arena_alloc(&t->ws, bytes);
        t->slot_elems = (size_t)need;
    }
    int64_t H = h, Wd = w;
    tsr_tensor x = slot(t, 0, batch, H, Wd, C);
    {
        float *p = x.data;
        const size_t n = (size_t)tsr_tensor_numel(&x);
        for (size_t i = 0; i < n; i++) /* Clamp: tanh(x / 3) * 3 */
            p[i] = tanhf(latents[i] / 3.0f) * 3.0f;
    }
    int cur = 1, ci = 0;
    tsr_tensor y = slot(t, 1, batch, H, Wd, W);
    TSR_TRY(conv(t, ci++, &x, &y));
    relu(&y);
    x = y;
    for (int stage = 0; stage < 4; stage++) {
        const int nblocks = stage < 3 ? 3 : 1;
        for (int b = 0; b < nblocks; b++) {
            const int a = cur, s1 = (cur + 1) % 3, s2 = (cur + 2) % 3;
            tsr_tensor t1 = slot(t, s1, batch, H, Wd, W), t2 = slot(t, s2, batch, H, Wd, W);
            TSR_TRY(conv(t, ci++, &x, &t1));
            relu(&t1);
            TSR_TRY(conv(t, ci++, &t1, &t2));
            relu(&t2);
            TSR_TRY(conv(t, ci++, &t2, &t1));
            TSR_TRY(tsr_binary(be, TSR_BINARY_ADD, &t1, &x, &t1));
            relu(&t1);
            (void)a;
            cur = s1;
            x = t1;
        }
        if (stage < 3) {
            const int s1 = (cur + 1) % 3, s2 = (cur + 2) % 3;
            tsr_tensor up = slot(t, s1, batch, 2 * H, 2 * Wd, W);
            TSR_TRY(tsr_upsample_nearest2x(be, &x, &up));
            H *= 2;
            Wd *= 2;
            y = slot(t, s2, batch, H, Wd, W);
            TSR_TRY(conv(t, ci++, &up, &y));
            cur = s2;
            x = y;
        }
    }
    y = slot(t, (cur + 1) % 3, batch, H, Wd, 3);
    TSR_TRY(conv(t, ci++, &x, &y));
    TSR_TRY(tsr_backend_download(be, images, y.data, tsr_tensor_nbytes(&y)));
    return tsr_backend_sync(be);
}

int tsr_taesd_preview(tsr_taesd *t, const float *latents, int h, int w, uint8_t *rgb)
{
    if (!rgb)
        return tsr_errorf(TSR_ERR_INVALID, "taesd: NULL output");
    if (h < 1 || w < 1 || h > 4096 || w > 4096)
        return tsr_errorf(TSR_ERR_INVALID, "taesd: latent %dx%d out of range", w, h);
    const size_t n = (size_t)64 * h * w * 3;
    float *img = malloc(n * sizeof(float));
    if (!img)
        return tsr_errorf(TSR_ERR_NOMEM, "taesd: out of memory");
    int rc = tsr_taesd_decode(t, latents, 1, h, w, img);
    if (rc == TSR_OK)
        for (size_t i = 0; i < n; i++) {
            float v = img[i] > 0.0f ? (img[i] < 1.0f ? img[i] : 1.0f) : 0.0f;
            rgb[i] = (uint8_t)(v * 255.0f);
        }
    free(img);
    return rc;
}
