/*
 * vae/vae.c - the public VAE calls: argument checks, workspace planning,
 * the tiled variants and the pixel conversions.  The network itself is in
 * vae_net.c.
 *
 * Planning: the first call at a (mode, batch, h, w) runs the forward pass in
 * measuring mode (no op runs), which yields the largest activation (the
 * size of each of the three slots) and the peak of the temporaries; the
 * workspace grows only when that total exceeds what is held, so repeated
 * calls at one shape, or at smaller ones, allocate nothing.
 *
 * Tiling: the latent plane is cut into tiles of `tile` latent pixels spread
 * evenly so the last ends at the border (neighbours overlap by at least
 * `overlap`).  Each tile is run through the untiled path and accumulated
 * into the output with a separable weight: a linear ramp across each
 * overlap with a neighbour, divided by the sum of the ramps of all tiles
 * covering that row or column.  Because the 2-D weight is a product of 1-D
 * weights that each sum to one, the blend is a partition of unity without a
 * per-pixel weight buffer.  The ramp also gives the pixels nearest a tile's
 * cut edge (where zero padding replaced real neighbours) the least weight.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "vae/vae_internal.h"

#define VAE_MAX_BATCH 4096
#define VAE_MAX_LATENT 8192 /* latent pixels per side (65536 image pixels at f = 8) */

int tsr_vae_create(const tsr_vae_desc *desc, const tsr_weights *weights, tsr_backend *backend,
                   tsr_vae **out)
{
    if (!out)
        return tsr_errorf(TSR_ERR_INVALID, "vae: NULL output");
    *out = NULL;
    if (!desc || !weights || !backend)
        return tsr_errorf(TSR_ERR_INVALID, "vae: NULL argument");
    if (desc->n_blocks < 1 || desc->n_blocks > TSR_MAX_BLOCKS || desc->latent_channels < 1 ||
        desc->latent_channels > 64 || desc->norm_num_groups < 1 || !(desc->scaling_factor > 0))
        return tsr_errorf(TSR_ERR_INVALID, "vae: invalid config (blocks %d, latent channels %d)",
                          desc->n_blocks, desc->latent_channels);
    tsr_vae *v = calloc(1, sizeof *v);
    if (!v)
        return tsr_errorf(TSR_ERR_NOMEM, "vae: out of memory");
    v->desc = *desc;
    v->backend = backend;
    v->factor = 1 << (desc->n_blocks - 1);
    int rc = tsr_vae_net_load(v, weights);
    if (rc < 0) {
        free(v);
        return rc;
    }
    *out = v;
    return TSR_OK;
}

void tsr_vae_free(tsr_vae *v)
{
    if (!v)
        return;
    tsr_arena_free(&v->ws);
    free(v->host);
    free(v->tile_in);
    free(v->tile_out);
    free(v);
}

const tsr_vae_desc *tsr_vae_get_desc(const tsr_vae *v) { return &v->desc; }
int tsr_vae_factor(const tsr_vae *v) { return v->factor; }
bool tsr_vae_force_upcast(const tsr_vae *v) { return v->desc.force_upcast; }
size_t tsr_vae_workspace_bytes(const tsr_vae *v) { return v->ws.cap; }

/* Grow a host buffer to at least n floats. */
static int grow(float **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return TSR_OK;
    if (n > SIZE_MAX / sizeof(float))
        return tsr_errorf(TSR_ERR_RANGE, "vae: host buffer of %zu floats is too large", n);
    float *q = realloc(*p, n * sizeof(float));
    if (!q)
        return tsr_errorf(TSR_ERR_NOMEM, "vae: cannot allocate %zu bytes", n * sizeof(float));
    *p = q;
    *cap = n;
    return TSR_OK;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Lay the workspace out for one shape (see the file comment). */
static int plan(tsr_vae *v, vae_mode mode, int B, int h, int w)
{
    if (v->plan_mode == (int)mode && v->plan_b == B && v->plan_h == h && v->plan_w == w) {
        tsr_arena_reset(&v->ws, v->ws_mark);
        return TSR_OK;
    }
    tsr_arena m;
    tsr_arena_init_measure(&m, v->backend);
    vae_run r = {.v = v, .ws = &m, .measuring = true};
    int rc = mode == VAE_DECODE ? tsr_vae_net_decode(&r, NULL, B, h, w, NULL)
                                : tsr_vae_net_encode(&r, NULL, B, h * v->factor, w * v->factor, NULL);
    const size_t temps = m.peak;
    tsr_arena_free(&m);
    TSR_TRY(rc);
    if (r.need > SIZE_MAX / 64)
        return tsr_errorf(TSR_ERR_RANGE, "vae: workspace too large");
    const size_t es = tsr_dtype_size(tsr_backend_act_dtype(v->backend));
    const size_t slot_bytes = align64(r.need * es);
    const size_t total = 3 * slot_bytes + temps + 4 * TSR_ARENA_ALIGN;
    v->plan_mode = 0;
    if (total > v->ws.cap) {
        tsr_arena_free(&v->ws);
        memset(&v->ws, 0, sizeof v->ws);
        v->slot_elems = 0;
        TSR_TRY(tsr_arena_init(&v->ws, v->backend, total));
    }
    tsr_arena_reset(&v->ws, 0);
    for (int i = 0; i < 3; i++) {
        v->slot[i] = tsr_arena_alloc(&v->ws, slot_bytes);
        if (!v->slot[i])
            return tsr_errorf(TSR_ERR_INTERNAL, "vae: workspace layout failed");
    }
    v->slot_elems = slot_bytes / es;
    v->ws_mark = tsr_arena_mark(&v->ws);
    v->plan_mode = (int)mode;
    v->plan_b = B;
    v->plan_h = h;
    v->plan_w = w;
    return TSR_OK;
}

int tsr_vae_decode_workspace_need(tsr_vae *v, int B, int h, int w, size_t *bytes)
{
    *bytes = 0;
    tsr_arena m;
    tsr_arena_init_measure(&m, v->backend);
    vae_run r = {.v = v, .ws = &m, .measuring = true};
    int rc = tsr_vae_net_decode(&r, NULL, B, h, w, NULL);
    const size_t temps = m.peak;
    tsr_arena_free(&m);
    TSR_TRY(rc);
    *bytes = 3 * align64(r.need * sizeof(float)) + temps + 4 * TSR_ARENA_ALIGN;
    return TSR_OK;
}

void tsr_vae_set_circular(tsr_vae *v, bool on) { v->circular = on; }

void tsr_vae_trim(tsr_vae *v)
{
    tsr_arena_free(&v->ws);
    memset(&v->ws, 0, sizeof v->ws);
    v->slot_elems = 0;
    v->plan_mode = 0;
    v->plan_b = v->plan_h = v->plan_w = 0;
}

static int check_shape(const char *what, int batch, int h, int w)
{
    if (batch < 1 || batch > VAE_MAX_BATCH)
        return tsr_errorf(TSR_ERR_INVALID, "vae %s: batch %d outside 1..%d", what, batch,
                          VAE_MAX_BATCH);
    if (h < 1 || w < 1 || h > VAE_MAX_LATENT || w > VAE_MAX_LATENT)
        return tsr_errorf(TSR_ERR_INVALID, "vae %s: latent size %dx%d outside 1..%d", what, h, w,
                          VAE_MAX_LATENT);
    return TSR_OK;
}

static int decode_whole(tsr_vae *v, const float *latents, int B, int h, int w, float *images)
{
    TSR_TRY(plan(v, VAE_DECODE, B, h, w));
    vae_run r = {.v = v, .ws = &v->ws, .measuring = false, .circular = v->circular};
    int rc = tsr_vae_net_decode(&r, latents, B, h, w, images);
    tsr_arena_reset(&v->ws, v->ws_mark);
    return rc;
}

/* Moments [B, h, w, 2C] -> mean, clamped logvar [B, h, w, C]. */
static void split_moments(const float *mom, size_t pixels, int C, float *mean, float *logvar)
{
    for (size_t p = 0; p < pixels; p++) {
        const float *m = mom + p * 2 * (size_t)C;
        memcpy(mean + p * (size_t)C, m, (size_t)C * sizeof(float));
        for (int c = 0; c < C; c++) {
            float lv = m[C + c];
            logvar[p * (size_t)C + c] = lv < -30.0f ? -30.0f : lv > 20.0f ? 20.0f : lv;
        }
    }
}

static int encode_whole(tsr_vae *v, const float *images, int B, int h, int w, float *mean,
                        float *logvar)
{
    const int C = v->desc.latent_channels;
    const size_t pixels = (size_t)B * h * w;
    TSR_TRY(grow(&v->host, &v->host_elems, pixels * 2 * C));
    TSR_TRY(plan(v, VAE_ENCODE, B, h, w));
    vae_run r = {.v = v, .ws = &v->ws, .measuring = false, .circular = v->circular};
    int rc = tsr_vae_net_encode(&r, images, B, h * v->factor, w * v->factor, v->host);
    tsr_arena_reset(&v->ws, v->ws_mark);
    TSR_TRY(rc);
    split_moments(v->host, pixels, C, mean, logvar);
    return TSR_OK;
}

int tsr_vae_decode(tsr_vae *v, const float *latents, int batch, int h, int w, float *images)
{
    if (!v || !latents || !images)
        return tsr_errorf(TSR_ERR_INVALID, "vae decode: NULL argument");
    TSR_TRY(check_shape("decode", batch, h, w));
    return decode_whole(v, latents, batch, h, w, images);
}

static int encode_check(tsr_vae *v, const float *images, int batch, int H, int W,
                        const float *mean, const float *logvar)
{
    if (!v || !images || !mean || !logvar)
        return tsr_errorf(TSR_ERR_INVALID, "vae encode: NULL argument");
    if (!v->has_encoder)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "vae encode: these VAE weights have no encoder");
    const int f = v->factor;
    if (H < f || W < f || H % f || W % f)
        return tsr_errorf(TSR_ERR_INVALID,
                          "vae encode: image %dx%d is not a positive multiple of %d on each side",
                          W, H, f);
    return check_shape("encode", batch, H / f, W / f);
}

int tsr_vae_encode(tsr_vae *v, const float *images, int batch, int H, int W, float *mean,
                   float *logvar)
{
    TSR_TRY(encode_check(v, images, batch, H, W, mean, logvar));
    return encode_whole(v, images, batch, H / v->factor, W / v->factor, mean, logvar);
}

/* ---- tiling ---- */

typedef struct axis_tiles {
    int count;
    int *start; /* latent pixels, owned */
    float *weight; /* per output position along the axis, per tile: count * out_len, owned */
} axis_tiles;

static void axis_free(axis_tiles *a)
{
    free(a->start);
    free(a->weight);
}

/* Tiles along one axis of n latent pixels, and their normalised blending
 * weights along the output axis (n * mul positions). */
static int axis_plan(int n, int tile, int overlap, int mul, axis_tiles *a)
{
    memset(a, 0, sizeof *a);
    const int T = tile < n ? tile : n;
    int count = 1;
    if (n > T)
        count = 1 + (n - T + (T - overlap) - 1) / (T - overlap);
    const size_t len = (size_t)n * mul;
    a->count = count;
    a->start = malloc((size_t)count * sizeof(int));
    a->weight = calloc((size_t)count * len, sizeof(float));
    float *sum = calloc(len, sizeof(float));
    if (!a->start || !a->weight || !sum) {
        free(sum);
        axis_free(a);
        return tsr_errorf(TSR_ERR_NOMEM, "vae: out of memory planning tiles");
    }
    for (int i = 0; i < count; i++)
        a->start[i] = count == 1 ? 0 : (int)(((int64_t)i * (n - T) + (count - 1) / 2) / (count - 1));
    for (int i = 0; i < count; i++) {
        const double S = (double)a->start[i] * mul, E = (double)(a->start[i] + T) * mul;
        const double left = i > 0 ? (double)(a->start[i - 1] + T - a->start[i]) * mul : 0;
        const double right = i + 1 < count ? (double)(a->start[i] + T - a->start[i + 1]) * mul : 0;
        for (size_t p = (size_t)S; p < (size_t)E; p++) {
            double r = 1.0;
            if (left > 0)
                r = fmin(r, ((double)p - S + 0.5) / left);
            if (right > 0)
                r = fmin(r, (E - (double)p - 0.5) / right);
            a->weight[(size_t)i * len + p] = (float)r;
            sum[p] += (float)r;
        }
    }
    for (int i = 0; i < count; i++)
        for (size_t p = 0; p < len; p++)
            if (sum[p] > 0)
                a->weight[(size_t)i * len + p] /= sum[p];
    free(sum);
    return TSR_OK;
}

static int check_tiling(const tsr_vae_tiling *t, int *tile, int *overlap)
{
    *tile = t ? t->tile : 0;
    *overlap = t ? t->overlap : 0;
    if (*tile == 0)
        return TSR_OK;
    if (*tile < 4 || *tile > VAE_MAX_LATENT)
        return tsr_errorf(TSR_ERR_INVALID, "vae tiling: tile %d outside 4..%d latent pixels", *tile,
                          VAE_MAX_LATENT);
    if (*overlap == 0)
        *overlap = *tile / 4;
    if (*overlap < 0 || 2 * *overlap >= *tile)
        return tsr_errorf(TSR_ERR_INVALID, "vae tiling: overlap %d must be in 0..%d for tile %d",
                          *overlap, (*tile - 1) / 2, *tile);
    return TSR_OK;
}

/* Copy a [B, rows, cols, C] window at (y0, x0) of a [B, H, W, C] plane. */
static void gather(const float *src, int B, int H, int W, int C, int y0, int x0, int rows,
                   int cols, float *dst)
{
    for (int b = 0; b < B; b++)
        for (int y = 0; y < rows; y++)
            memcpy(dst + (((size_t)b * rows + y) * cols) * C,
                   src + (((size_t)b * H + y0 + y) * W + x0) * C, (size_t)cols * C * sizeof(float));
}

/* dst window (y0, x0) += wy[y] * wx[x] * tile. */
static void blend(float *dst, int B, int H, int W, int C, int y0, int x0, int rows, int cols,
                  const float *tile, const float *wy, const float *wx)
{
    for (int b = 0; b < B; b++)
        for (int y = 0; y < rows; y++) {
            float *d = dst + (((size_t)b * H + y0 + y) * W + x0) * C;
            const float *s = tile + (((size_t)b * rows + y) * cols) * C;
            for (int x = 0; x < cols; x++) {
                const float k = wy[y0 + y] * wx[x0 + x];
                for (int c = 0; c < C; c++)
                    d[(size_t)x * C + c] += k * s[(size_t)x * C + c];
            }
        }
}

/* Shared driver: decode (latents -> images) or encode (images -> mean,
 * logvar), h x w latent pixels. */
static int run_tiled(tsr_vae *v, vae_mode mode, const float *in, int B, int h, int w, int tile,
                     int overlap, float *out0, float *out1)
{
    const int f = v->factor, C = v->desc.latent_channels;
    const int in_mul = mode == VAE_DECODE ? 1 : f, out_mul = mode == VAE_DECODE ? f : 1;
    const int in_c = mode == VAE_DECODE ? C : v->desc.in_channels;
    const int out_c = mode == VAE_DECODE ? v->desc.out_channels : C;
    axis_tiles ay = {0}, ax = {0};
    int rc = axis_plan(h, tile, overlap, out_mul, &ay);
    if (rc == TSR_OK)
        rc = axis_plan(w, tile, overlap, out_mul, &ax);
    if (rc < 0)
        goto done;
    const int th = tile < h ? tile : h, tw = tile < w ? tile : w;
    const size_t in_elems = (size_t)B * th * in_mul * tw * in_mul * in_c;
    const size_t out_elems = (size_t)B * th * out_mul * tw * out_mul * out_c;
    TSR_CHECK_GOTO(rc, grow(&v->tile_in, &v->tile_in_elems, in_elems), done);
    TSR_CHECK_GOTO(rc, grow(&v->tile_out, &v->tile_out_elems, 2 * out_elems), done);
    const int H = h * out_mul, W = w * out_mul;
    const size_t total = (size_t)B * H * W * out_c;
    memset(out0, 0, total * sizeof(float));
    if (out1)
        memset(out1, 0, total * sizeof(float));
    for (int ty = 0; ty < ay.count; ty++)
        for (int tx = 0; tx < ax.count; tx++) {
            const int y0 = ay.start[ty], x0 = ax.start[tx];
            gather(in, B, h * in_mul, w * in_mul, in_c, y0 * in_mul, x0 * in_mul, th * in_mul,
                   tw * in_mul, v->tile_in);
            float *t0 = v->tile_out, *t1 = v->tile_out + out_elems;
            if (mode == VAE_DECODE)
                rc = decode_whole(v, v->tile_in, B, th, tw, t0);
            else
                rc = encode_whole(v, v->tile_in, B, th, tw, t0, t1);
            if (rc < 0)
                goto done;
            const float *wy = ay.weight + (size_t)ty * H, *wx = ax.weight + (size_t)tx * W;
            blend(out0, B, H, W, out_c, y0 * out_mul, x0 * out_mul, th * out_mul, tw * out_mul, t0,
                  wy, wx);
            if (out1)
                blend(out1, B, H, W, out_c, y0 * out_mul, x0 * out_mul, th * out_mul,
                      tw * out_mul, t1, wy, wx);
        }
done:
    axis_free(&ay);
    axis_free(&ax);
    return rc;
}

int tsr_vae_decode_tiled(tsr_vae *v, const float *latents, int batch, int h, int w,
                         const tsr_vae_tiling *tiling, float *images)
{
    if (!v || !latents || !images)
        return tsr_errorf(TSR_ERR_INVALID, "vae decode: NULL argument");
    TSR_TRY(check_shape("decode", batch, h, w));
    int tile, overlap;
    TSR_TRY(check_tiling(tiling, &tile, &overlap));
    if (tile == 0 || (h <= tile && w <= tile) || v->circular) /* circular: see vae.h */
        return decode_whole(v, latents, batch, h, w, images);
    return run_tiled(v, VAE_DECODE, latents, batch, h, w, tile, overlap, images, NULL);
}

int tsr_vae_encode_tiled(tsr_vae *v, const float *images, int batch, int H, int W,
                         const tsr_vae_tiling *tiling, float *mean, float *logvar)
{
    TSR_TRY(encode_check(v, images, batch, H, W, mean, logvar));
    int tile, overlap;
    TSR_TRY(check_tiling(tiling, &tile, &overlap));
    const int h = H / v->factor, w = W / v->factor;
    if (tile == 0 || (h <= tile && w <= tile) || v->circular)
        return encode_whole(v, images, batch, h, w, mean, logvar);
    return run_tiled(v, VAE_ENCODE, images, batch, h, w, tile, overlap, mean, logvar);
}

/* ---- conversions ---- */

void tsr_vae_sample(const tsr_vae_desc *desc, const float *mean, const float *logvar,
                    const float *noise, size_t n, float *out)
{
    const float sf = (float)desc->scaling_factor, shift = (float)desc->shift_factor;
    for (size_t i = 0; i < n; i++) {
        float z = mean[i];
        if (noise)
            z += expf(0.5f * logvar[i]) * noise[i];
        out[i] = (z - shift) * sf;
    }
}

void tsr_vae_to_u8(const float *x, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        float v = x[i] / 2.0f + 0.5f;
        v = v > 0.0f ? (v < 1.0f ? v : 1.0f) : 0.0f; /* NaN -> 0 */
        out[i] = (uint8_t)nearbyintf(v * 255.0f);
    }
}

void tsr_vae_from_u8(const uint8_t *p, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (float)p[i] / 255.0f * 2.0f - 1.0f;
}
