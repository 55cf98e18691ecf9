/*
 * unet/unet_transformer.c - Transformer2DModel with BasicTransformerBlocks
 * (diffusers), as the SD UNets use it.
 *
 *   n = GroupNorm(x, eps 1e-6)                  (no SiLU)
 *   h = proj_in(n)        conv 1x1 (SD 1.x) or linear (SD 2.x, SDXL):
 *                         in NHWC both are one GEMM over tokens, so a conv
 *                         weight [C,1,1,C] is simply viewed as [C, C]
 *   per layer:
 *     h += to_out(attn(LN1(h)))                 self-attention
 *     h += to_out(attn(LN2(h), context))        cross-attention
 *     h += ff2(GEGLU(ff1(LN3(h))))              feed-forward (inner = 4C)
 *   x += proj_out(h)                            in place
 *
 * Every `h +=` is the fused residual of the linear that produces the
 * addend (to_out, ff.net.2): the result goes to the other of two token
 * buffers, which then swap roles (a backend may not write its output over
 * the residual it reads).  proj_out's `x +=` stays a separate add because
 * its result must land in x itself.
 *
 * Memory: the feed-forward's inner activations (12C floats per token, the
 * largest tensors of the whole UNet) are computed over chunks of tokens, so
 * they cost a fixed FF_CHUNK_BYTES instead of growing with the image; the
 * q/k/v/out buffers of attention are released before the feed-forward runs.
 * Attention itself is the backend's query-chunked op: no Lq x Lk matrix.
 * upcast_attention changes nothing here: the CPU backend computes in f32,
 * and a backend storing f16 accumulates attention in f32.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unet/unet_internal.h"

#define FF_CHUNK_BYTES ((size_t)48 << 20)
#define TRANSFORMER_GN_EPS 1e-6f
#define LAYER_NORM_EPS 1e-5f

/* A [C, C] view of a projection weight stored as linear [C,C] or conv
 * OHWI [C,1,1,C] (the same bytes). */
static int bind_proj(const tsr_weights *w, const char *p, const char *what, int c, bool linear,
                     tsr_tensor *view, const tsr_tensor **bias)
{
    char name[256];
    const tsr_tensor *t;
    const int64_t lin[2] = {c, c}, conv[4] = {c, 1, 1, c}, vc[1] = {c};
    snprintf(name, sizeof name, "%s.weight", what);
    TSR_TRY(unet_weightf(w, &t, linear ? 2 : 4, linear ? lin : conv, p, name));
    *view = tsr_tensor_view2(t, c, c);
    snprintf(name, sizeof name, "%s.bias", what);
    return unet_weightf(w, bias, 1, vc, p, name);
}

static int bind_attn(const tsr_weights *w, const char *p, int c, int kv_dim, unet_attn *a)
{
    const int64_t q[2] = {c, c}, kv[2] = {c, kv_dim}, vc[1] = {c};
    TSR_TRY(unet_weightf(w, &a->q_w, 2, q, p, "to_q.weight"));
    TSR_TRY(unet_weightf(w, &a->k_w, 2, kv, p, "to_k.weight"));
    TSR_TRY(unet_weightf(w, &a->v_w, 2, kv, p, "to_v.weight"));
    TSR_TRY(unet_weightf(w, &a->o_w, 2, q, p, "to_out.0.weight"));
    return unet_weightf(w, &a->o_b, 1, vc, p, "to_out.0.bias");
}

static int bind_layer(const tsr_weights *w, const char *p, int c, int cross, unet_tlayer *l)
{
    char sub[256];
    const int64_t vc[1] = {c};
    TSR_TRY(unet_weightf(w, &l->ln1_w, 1, vc, p, "norm1.weight"));
    TSR_TRY(unet_weightf(w, &l->ln1_b, 1, vc, p, "norm1.bias"));
    TSR_TRY(unet_weightf(w, &l->ln2_w, 1, vc, p, "norm2.weight"));
    TSR_TRY(unet_weightf(w, &l->ln2_b, 1, vc, p, "norm2.bias"));
    TSR_TRY(unet_weightf(w, &l->ln3_w, 1, vc, p, "norm3.weight"));
    TSR_TRY(unet_weightf(w, &l->ln3_b, 1, vc, p, "norm3.bias"));
    snprintf(sub, sizeof sub, "%sattn1.", p);
    TSR_TRY(bind_attn(w, sub, c, c, &l->self));
    snprintf(sub, sizeof sub, "%sattn2.", p);
    TSR_TRY(bind_attn(w, sub, c, cross, &l->cross));
    /* The inner width is read from ff.net.2 (diffusers' ff_mult is 4) and
     * the GEGLU projection checked against it. */
    char name[300];
    snprintf(name, sizeof name, "%sff.net.2.weight", p);
    TSR_TRY(tsr_weights_get(w, name, &l->ff2_w));
    if (l->ff2_w->ndim != 2 || l->ff2_w->ne[0] != c || l->ff2_w->ne[1] < 1 ||
        l->ff2_w->ne[1] > 16 * (int64_t)c)
        return tsr_errorf(TSR_ERR_FORMAT, "unet: weight '%s' is not [%d, inner]", name, c);
    l->inner = (int)l->ff2_w->ne[1];
    const int64_t f1[2] = {2 * (int64_t)l->inner, c}, f1b[1] = {2 * (int64_t)l->inner};
    TSR_TRY(unet_weightf(w, &l->ff1_w, 2, f1, p, "ff.net.0.proj.weight"));
    TSR_TRY(unet_weightf(w, &l->ff1_b, 1, f1b, p, "ff.net.0.proj.bias"));
    return unet_weightf(w, &l->ff2_b, 1, vc, p, "ff.net.2.bias");
}

int unet_transformer_bind(const tsr_weights *w, const char *p, int channels, int heads,
                          int n_layers, int cross_dim, unet_transformer *t)
{
    memset(t, 0, sizeof *t);
    t->channels = channels;
    t->heads = heads;
    t->cross_dim = cross_dim;
    const int64_t vc[1] = {channels};
    TSR_TRY(unet_weightf(w, &t->norm_w, 1, vc, p, "norm.weight"));
    TSR_TRY(unet_weightf(w, &t->norm_b, 1, vc, p, "norm.bias"));
    /* use_linear_projection is decided per model; diffusers stores the
     * weight as [C, C] (linear) or [C, C, 1, 1] (conv, OHWI here). */
    const tsr_tensor *probe;
    char name[300];
    snprintf(name, sizeof name, "%sproj_in.weight", p);
    TSR_TRY(tsr_weights_get(w, name, &probe));
    bool linear = probe->ndim == 2;
    TSR_TRY(bind_proj(w, p, "proj_in", channels, linear, &t->proj_in_w, &t->proj_in_b));
    TSR_TRY(bind_proj(w, p, "proj_out", channels, linear, &t->proj_out_w, &t->proj_out_b));
    t->layers = calloc((size_t)n_layers, sizeof *t->layers);
    if (!t->layers)
        return tsr_errorf(TSR_ERR_NOMEM, "unet: cannot allocate %d transformer layers", n_layers);
    t->n_layers = n_layers;
    for (int i = 0; i < n_layers; i++) {
        snprintf(name, sizeof name, "%stransformer_blocks.%d.", p, i);
        TSR_TRY(bind_layer(w, name, channels, cross_dim, &t->layers[i]));
    }
    /* A checkpoint with more layers than the config says is a mismatch. */
    snprintf(name, sizeof name, "%stransformer_blocks.%d.norm1.weight", p, n_layers);
    if (tsr_weights_get(w, name, &probe) == TSR_OK)
        return tsr_errorf(TSR_ERR_FORMAT, "unet: '%s' exists but the config gives %d layers",
                          name, n_layers);
    tsr_error_clear();
    return TSR_OK;
}

void unet_transformer_release(unet_transformer *t)
{
    free(t->layers);
    t->layers = NULL;
    t->n_layers = 0;
}

/* out [B,T,C] = to_out(attention(to_q(xq), to_k(kv), to_v(kv))) + res. */
static int attention(unet_run *r, const unet_attn *a, int heads, const tsr_tensor *xq,
                     const tsr_tensor *kv, const tsr_tensor *res, tsr_tensor *out)
{
    tsr_arena *ws = r->ws;
    tsr_backend *be = r->be;
    const int64_t B = xq->ne[0], T = xq->ne[1], C = xq->ne[2], L = kv->ne[1];
    const size_t mark = tsr_arena_mark(ws);
    tsr_tensor q, k, v, o;
    int64_t nq[3] = {B, T, C}, nk[3] = {B, L, C};
    TSR_TRY(tsr_arena_act(ws, &q, 3, nq));
    TSR_TRY(tsr_arena_act(ws, &k, 3, nk));
    TSR_TRY(tsr_arena_act(ws, &v, 3, nk));
    TSR_TRY(tsr_arena_act(ws, &o, 3, nq));
    const tsr_attention_params ap = {.heads = heads, .scale = 0.0f, .causal = false};
    OP(unet_linear(r, xq, a->q_w, NULL, NULL, &q));
    OP(unet_linear(r, kv, a->k_w, NULL, NULL, &k));
    OP(unet_linear(r, kv, a->v_w, NULL, NULL, &v));
    OP(tsr_attention(be, &q, &k, &v, &ap, &o));
    OP(unet_linear(r, &o, a->o_w, a->o_b, &(tsr_epilogue){.residual = res}, out));
    tsr_arena_reset(ws, mark);
    return TSR_OK;
}

/* out [R, C] = ff2(GEGLU(ff1(x [R, C]))) + res over chunks of rows.  The
 * chunks restart at every image (T rows each), so no GEMM spans two images
 * and an image's arithmetic is the same alone or batched (see "Batch
 * independence" in backend/cpu/ops_conv.c). */
static int feed_forward(unet_run *r, const unet_tlayer *l, const tsr_tensor *x,
                        const tsr_tensor *res, int64_t T, tsr_tensor *out)
{
    tsr_arena *ws = r->ws;
    tsr_backend *be = r->be;
    const int64_t R = x->ne[0], inner = l->inner;
    const size_t es = tsr_dtype_size(x->dtype);
    int64_t chunk = (int64_t)(FF_CHUNK_BYTES / ((size_t)3 * (size_t)inner * es));
    chunk = chunk < 64 ? 64 : chunk & ~(int64_t)63;
    if (chunk > T)
        chunk = T;
    const size_t mark = tsr_arena_mark(ws);
    tsr_tensor f, g;
    int64_t nf[2] = {chunk, 2 * inner}, ng[2] = {chunk, inner};
    TSR_TRY(tsr_arena_act(ws, &f, 2, nf));
    TSR_TRY(tsr_arena_act(ws, &g, 2, ng));
    int64_t n = 0;
    for (int64_t r0 = 0; r0 < R && !ws->measuring; r0 += n) {
        const int64_t image_end = (r0 / T + 1) * T;
        n = image_end - r0 < chunk ? image_end - r0 : chunk;
        tsr_tensor xc = tsr_tensor_rows(x, r0, n), oc = tsr_tensor_rows(out, r0, n);
        tsr_tensor rc = tsr_tensor_rows(res, r0, n);
        tsr_tensor fc = tsr_tensor_rows(&f, 0, n), gc = tsr_tensor_rows(&g, 0, n);
        TSR_TRY(unet_linear_row(r, r0 / T, &xc, l->ff1_w, l->ff1_b, NULL, &fc));
        TSR_TRY(tsr_geglu(be, &fc, &gc));
        TSR_TRY(unet_linear_row(r, r0 / T, &gc, l->ff2_w, l->ff2_b,
                                &(tsr_epilogue){.residual = &rc}, &oc));
    }
    tsr_arena_reset(ws, mark);
    return TSR_OK;
}

int unet_transformer_forward(unet_run *r, const unet_transformer *t, tsr_tensor *x)
{
    tsr_arena *ws = r->ws;
    tsr_backend *be = r->be;
    const int64_t B = x->ne[0], T = x->ne[1] * x->ne[2], C = x->ne[3];
    const size_t mark = tsr_arena_mark(ws);
    tsr_tensor n4, h, a;
    TSR_TRY(unet_alloc4(ws, &n4, B, x->ne[1], x->ne[2], C));
    int64_t ns[3] = {B, T, C};
    TSR_TRY(tsr_arena_act(ws, &h, 3, ns));
    TSR_TRY(tsr_arena_act(ws, &a, 3, ns));
    tsr_tensor n = tsr_tensor_view3(&n4, B, T, C), x3 = tsr_tensor_view3(x, B, T, C);
    const tsr_tensor a2 = tsr_tensor_view2(&a, B * T, C);

    OP(tsr_group_norm(be, x, t->norm_w, t->norm_b, r->desc->norm_num_groups, TRANSFORMER_GN_EPS,
                      false, &n4));
    OP(unet_linear(r, &n, &t->proj_in_w, t->proj_in_b, NULL, &h));
    /* h + block(...) goes to n, and then n is the new h */
#define SWAP_HN()           \
    do {                    \
        tsr_tensor tmp = h; \
        h = n;              \
        n = tmp;            \
    } while (0)
    for (int i = 0; i < t->n_layers; i++) {
        const unet_tlayer *l = &t->layers[i];
        OP(tsr_layer_norm(be, &h, l->ln1_w, l->ln1_b, LAYER_NORM_EPS, &a));
        TSR_TRY(attention(r, &l->self, t->heads, &a, &a, &h, &n));
        SWAP_HN();
        OP(tsr_layer_norm(be, &h, l->ln2_w, l->ln2_b, LAYER_NORM_EPS, &a));
        TSR_TRY(attention(r, &l->cross, t->heads, &a, &r->context, &h, &n));
        SWAP_HN();
        OP(tsr_layer_norm(be, &h, l->ln3_w, l->ln3_b, LAYER_NORM_EPS, &a));
        const tsr_tensor h2 = tsr_tensor_view2(&h, B * T, C);
        tsr_tensor n2 = tsr_tensor_view2(&n, B * T, C);
        TSR_TRY(feed_forward(r, l, &a2, &h2, T, &n2));
        SWAP_HN();
    }
#undef SWAP_HN
    OP(unet_linear(r, &h, &t->proj_out_w, t->proj_out_b, NULL, &n));
    OP(tsr_binary(be, TSR_BINARY_ADD, &x3, &n, &x3));
    tsr_arena_reset(ws, mark);
    return TSR_OK;
}
