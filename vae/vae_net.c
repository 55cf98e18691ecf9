/*
 * vae/vae_net.c - the AutoencoderKL network: its weights, looked up under
 * diffusers' names, and the encoder and decoder forward passes.
 *
 * Structure (diffusers' Encoder / Decoder, eps 1e-6 everywhere):
 *   encoder: conv_in, per block `layers_per_block` ResnetBlock2D and, except
 *            the last, a stride-2 conv on the input padded (0, 1, 0, 1);
 *            mid (resnet, single-head attention, resnet); GroupNorm+SiLU;
 *            conv_out to 2*latent channels; quant_conv (1x1).
 *   decoder: post_quant_conv (1x1); conv_in; mid; per block in reverse
 *            width order `layers_per_block + 1` resnets and, except the
 *            last, nearest 2x upsampling + conv; GroupNorm+SiLU; conv_out.
 *
 * Memory: the pass rotates between three workspace slots, each as large as
 * the largest activation.  A resnet reads x from slot a, builds norm1 in b,
 * conv1 in c (normed in place), conv2 in b, the shortcut (if any) in c, and
 * leaves its sum in b; upsampling reads a, upsamples into b, convolves into
 * c.  That is the same three-tensor peak PyTorch's eager graph reaches, with
 * no allocation per op.  Only the mid attention takes temporaries (k and v)
 * from the arena after the slots.  A resnet's final add is conv2's fused
 * residual: into slot b (residual x), or with a shortcut conv, the shortcut
 * goes to b first and the sum to a (x is dead by then); the attention's
 * residual add is its output projection's.
 *
 * Activations are in the backend's activation dtype; latents, images and
 * moments cross as f32 (tsr_arena_upload_f32 / _download_f32).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "vae/vae_internal.h"

/* ---- weights ---- */

/* Fetch `name` and check its shape against ne[0..ndim).  A 2-D request also
 * accepts a [o, 1, 1, i] 1x1 conv (OHWI), viewed as [o, i]. */
static int wget(const tsr_weights *w, tsr_tensor *out, int ndim, int64_t n0, int64_t n1,
                int64_t n2, int64_t n3, const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static int wget(const tsr_weights *w, tsr_tensor *out, int ndim, int64_t n0, int64_t n1,
                int64_t n2, int64_t n3, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const tsr_tensor *t;
    TSR_TRY(tsr_weights_get(w, name, &t));
    const int64_t ne[4] = {n0, n1, n2, n3};
    const bool fl = t->dtype == TSR_F32 || t->dtype == TSR_F16 || t->dtype == TSR_BF16;
    bool ok = t->ndim == ndim && fl;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->ne[i] == ne[i];
    if (!ok && ndim == 2 && t->ndim == 4 && fl && t->ne[0] == n0 && t->ne[1] == 1 &&
        t->ne[2] == 1 && t->ne[3] == n1) {
        *out = tsr_tensor_view2(t, n0, n1);
        return TSR_OK;
    }
    if (!ok) {
        char got[64], want[64];
        tsr_tensor wt = tsr_tensor_make(TSR_F32, ndim, ne, NULL, NULL);
        return tsr_errorf(TSR_ERR_FORMAT, "vae: weight '%s' is %s %s, expected a float %s", name,
                          tsr_dtype_name(t->dtype), tsr_tensor_shape_str(t, got, sizeof got),
                          tsr_tensor_shape_str(&wt, want, sizeof want));
    }
    *out = *t;
    return TSR_OK;
}

#define CONV(dst, co, k, ci, ...) TSR_TRY(wget(w, &(dst), 4, co, k, k, ci, __VA_ARGS__))
#define VEC(dst, c, ...) TSR_TRY(wget(w, &(dst), 1, c, 0, 0, 0, __VA_ARGS__))
#define MAT(dst, o, i, ...) TSR_TRY(wget(w, &(dst), 2, o, i, 0, 0, __VA_ARGS__))

static int load_resnet(const tsr_weights *w, vae_resnet *r, int cin, int cout, const char *p)
{
    r->cin = cin;
    r->cout = cout;
    VEC(r->n1_w, cin, "%s.norm1.weight", p);
    VEC(r->n1_b, cin, "%s.norm1.bias", p);
    CONV(r->c1_w, cout, 3, cin, "%s.conv1.weight", p);
    VEC(r->c1_b, cout, "%s.conv1.bias", p);
    VEC(r->n2_w, cout, "%s.norm2.weight", p);
    VEC(r->n2_b, cout, "%s.norm2.bias", p);
    CONV(r->c2_w, cout, 3, cout, "%s.conv2.weight", p);
    VEC(r->c2_b, cout, "%s.conv2.bias", p);
    r->has_sc = cin != cout;
    if (r->has_sc) {
        CONV(r->sc_w, cout, 1, cin, "%s.conv_shortcut.weight", p);
        VEC(r->sc_b, cout, "%s.conv_shortcut.bias", p);
    }
    return TSR_OK;
}

static int load_mid(const tsr_weights *w, vae_half *h, int c, const char *half)
{
    char p[128];
    snprintf(p, sizeof p, "%s.mid_block.resnets.0", half);
    TSR_TRY(load_resnet(w, &h->mid0, c, c, p));
    snprintf(p, sizeof p, "%s.mid_block.resnets.1", half);
    TSR_TRY(load_resnet(w, &h->mid1, c, c, p));
    vae_attn *a = &h->attn;
    a->c = c;
    const char *q = "mid_block.attentions.0";
    VEC(a->gn_w, c, "%s.%s.group_norm.weight", half, q);
    VEC(a->gn_b, c, "%s.%s.group_norm.bias", half, q);
    MAT(a->q_w, c, c, "%s.%s.to_q.weight", half, q);
    VEC(a->q_b, c, "%s.%s.to_q.bias", half, q);
    MAT(a->k_w, c, c, "%s.%s.to_k.weight", half, q);
    VEC(a->k_b, c, "%s.%s.to_k.bias", half, q);
    MAT(a->v_w, c, c, "%s.%s.to_v.weight", half, q);
    VEC(a->v_b, c, "%s.%s.to_v.bias", half, q);
    MAT(a->o_w, c, c, "%s.%s.to_out.0.weight", half, q);
    VEC(a->o_b, c, "%s.%s.to_out.0.bias", half, q);
    return TSR_OK;
}

static int load_encoder(tsr_vae *v, const tsr_weights *w)
{
    const tsr_vae_desc *d = &v->desc;
    vae_half *e = &v->enc;
    const int nb = d->n_blocks, lat2 = 2 * d->latent_channels;
    CONV(e->conv_in_w, d->block_out_channels[0], 3, d->in_channels, "encoder.conv_in.weight");
    VEC(e->conv_in_b, d->block_out_channels[0], "encoder.conv_in.bias");
    int prev = d->block_out_channels[0];
    for (int i = 0; i < nb; i++) {
        vae_stage *s = &e->stage[i];
        const int out = d->block_out_channels[i];
        s->n_res = d->layers_per_block;
        for (int j = 0; j < s->n_res; j++) {
            char p[128];
            snprintf(p, sizeof p, "encoder.down_blocks.%d.resnets.%d", i, j);
            TSR_TRY(load_resnet(w, &s->res[j], j == 0 ? prev : out, out, p));
        }
        s->has_sampler = i + 1 < nb;
        if (s->has_sampler) {
            CONV(s->samp_w, out, 3, out, "encoder.down_blocks.%d.downsamplers.0.conv.weight", i);
            VEC(s->samp_b, out, "encoder.down_blocks.%d.downsamplers.0.conv.bias", i);
        }
        prev = out;
    }
    TSR_TRY(load_mid(w, e, prev, "encoder"));
    VEC(e->norm_out_w, prev, "encoder.conv_norm_out.weight");
    VEC(e->norm_out_b, prev, "encoder.conv_norm_out.bias");
    CONV(e->conv_out_w, lat2, 3, prev, "encoder.conv_out.weight");
    VEC(e->conv_out_b, lat2, "encoder.conv_out.bias");
    CONV(v->quant_w, lat2, 1, lat2, "quant_conv.weight");
    VEC(v->quant_b, lat2, "quant_conv.bias");
    return TSR_OK;
}

static int load_decoder(tsr_vae *v, const tsr_weights *w)
{
    const tsr_vae_desc *d = &v->desc;
    vae_half *h = &v->dec;
    const int nb = d->n_blocks, lat = d->latent_channels;
    const int top = d->block_out_channels[nb - 1];
    CONV(v->post_w, lat, 1, lat, "post_quant_conv.weight");
    VEC(v->post_b, lat, "post_quant_conv.bias");
    CONV(h->conv_in_w, top, 3, lat, "decoder.conv_in.weight");
    VEC(h->conv_in_b, top, "decoder.conv_in.bias");
    TSR_TRY(load_mid(w, h, top, "decoder"));
    int prev = top;
    for (int i = 0; i < nb; i++) {
        vae_stage *s = &h->stage[i];
        const int out = d->block_out_channels[nb - 1 - i];
        s->n_res = d->layers_per_block + 1;
        for (int j = 0; j < s->n_res; j++) {
            char p[128];
            snprintf(p, sizeof p, "decoder.up_blocks.%d.resnets.%d", i, j);
            TSR_TRY(load_resnet(w, &s->res[j], j == 0 ? prev : out, out, p));
        }
        s->has_sampler = i + 1 < nb;
        if (s->has_sampler) {
            CONV(s->samp_w, out, 3, out, "decoder.up_blocks.%d.upsamplers.0.conv.weight", i);
            VEC(s->samp_b, out, "decoder.up_blocks.%d.upsamplers.0.conv.bias", i);
        }
        prev = out;
    }
    VEC(h->norm_out_w, prev, "decoder.conv_norm_out.weight");
    VEC(h->norm_out_b, prev, "decoder.conv_norm_out.bias");
    CONV(h->conv_out_w, d->out_channels, 3, prev, "decoder.conv_out.weight");
    VEC(h->conv_out_b, d->out_channels, "decoder.conv_out.bias");
    return TSR_OK;
}

#undef CONV
#undef VEC
#undef MAT

int tsr_vae_net_load(tsr_vae *v, const tsr_weights *w)
{
    if (v->desc.layers_per_block + 1 > VAE_MAX_RESNETS)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "vae: layers_per_block %d exceeds %d",
                          v->desc.layers_per_block, VAE_MAX_RESNETS - 1);
    TSR_TRY(load_decoder(v, w));
    /* Decoder-only weights are allowed; encode then reports it. */
    const tsr_tensor *probe;
    v->has_encoder = tsr_weights_get(w, "encoder.conv_in.weight", &probe) == TSR_OK;
    tsr_error_clear();
    if (v->has_encoder)
        TSR_TRY(load_encoder(v, w));
    return TSR_OK;
}

/* ---- forward ---- */

#define OP(expr) TSR_ARENA_OP(r, expr)

/* A view of slot s as [n, h, w, c]; records the size a slot needs. */
static int slot(vae_run *r, int s, int64_t n, int64_t h, int64_t w, int64_t c, tsr_tensor *t)
{
    uint64_t e = (uint64_t)n;
    if (!tsr_mul_overflow_u64(e, (uint64_t)h, &e) || !tsr_mul_overflow_u64(e, (uint64_t)w, &e) ||
        !tsr_mul_overflow_u64(e, (uint64_t)c, &e) || e > (uint64_t)(SIZE_MAX / 16))
        return tsr_errorf(TSR_ERR_RANGE, "vae: activation [%lld, %lld, %lld, %lld] is too large",
                          (long long)n, (long long)h, (long long)w, (long long)c);
    if (e > r->need)
        r->need = (size_t)e;
    if (!r->measuring && e > r->v->slot_elems)
        return tsr_errorf(TSR_ERR_INTERNAL, "vae: workspace slot too small (%zu < %llu)",
                          r->v->slot_elems, (unsigned long long)e);
    const int64_t ne[4] = {n, h, w, c};
    *t = tsr_tensor_make(tsr_backend_act_dtype(r->v->backend), 4, ne,
                         r->measuring ? NULL : r->v->slot[s], r->v->backend);
    return TSR_OK;
}

static inline int nxt(int s, int k) { return (s + k) % 3; }

/* y = conv(x) + b [+ res] */
static int conv(vae_run *r, const tsr_tensor *x, const tsr_tensor *wt, const tsr_tensor *b,
                int stride, int pad, const tsr_tensor *res, tsr_tensor *y)
{
    tsr_conv2d_params p = tsr_conv2d_params_make(stride, pad);
    p.circular = r->circular; /* seamless tiling; pad 0 convs are unchanged by it */
    OP(tsr_conv2d_fused(r->v->backend, x, wt, b, &p, &(tsr_epilogue){.residual = res}, y));
    return TSR_OK;
}

/* x (slot cur) -> result in slot cur+1, or with a shortcut conv in slot cur. */
static int resnet(vae_run *r, const vae_resnet *rs, const tsr_tensor *x, tsr_tensor *y)
{
    tsr_backend *be = r->v->backend;
    const int G = r->v->desc.norm_num_groups;
    const int64_t N = x->ne[0], H = x->ne[1], W = x->ne[2];
    const int a = r->cur, b = nxt(a, 1), c = nxt(a, 2);
    tsr_tensor tb, tc, ob;
    TSR_TRY(slot(r, b, N, H, W, rs->cin, &tb));
    OP(tsr_group_norm(be, x, &rs->n1_w, &rs->n1_b, G, VAE_GN_EPS, true, &tb));
    TSR_TRY(slot(r, c, N, H, W, rs->cout, &tc));
    TSR_TRY(conv(r, &tb, &rs->c1_w, &rs->c1_b, 1, 1, NULL, &tc));
    OP(tsr_group_norm(be, &tc, &rs->n2_w, &rs->n2_b, G, VAE_GN_EPS, true, &tc));
    if (rs->has_sc) {
        tsr_tensor sc;
        TSR_TRY(slot(r, b, N, H, W, rs->cout, &sc));
        TSR_TRY(conv(r, x, &rs->sc_w, &rs->sc_b, 1, 0, NULL, &sc));
        TSR_TRY(slot(r, a, N, H, W, rs->cout, &ob));
        TSR_TRY(conv(r, &tc, &rs->c2_w, &rs->c2_b, 1, 1, &sc, &ob));
        r->cur = a;
    } else {
        TSR_TRY(slot(r, b, N, H, W, rs->cout, &ob));
        TSR_TRY(conv(r, &tc, &rs->c2_w, &rs->c2_b, 1, 1, x, &ob));
        r->cur = b;
    }
    *y = ob;
    return TSR_OK;
}

/* Single-head self-attention over the H*W positions, with residual. */
static int attention(vae_run *r, const vae_attn *at, const tsr_tensor *x, tsr_tensor *y)
{
    tsr_backend *be = r->v->backend;
    const int64_t N = x->ne[0], H = x->ne[1], W = x->ne[2], C = at->c;
    const int a = r->cur, b = nxt(a, 1), c = nxt(a, 2);
    const size_t mark = tsr_arena_mark(r->ws);
    tsr_tensor tb, tc, k, v;
    TSR_TRY(slot(r, b, N, H, W, C, &tb));
    TSR_TRY(slot(r, c, N, H, W, C, &tc));
    OP(tsr_group_norm(be, x, &at->gn_w, &at->gn_b, r->v->desc.norm_num_groups, VAE_GN_EPS, false,
                      &tb));
    const int64_t ne[3] = {N, H * W, C};
    TSR_TRY(tsr_arena_act(r->ws, &k, 3, ne));
    TSR_TRY(tsr_arena_act(r->ws, &v, 3, ne));
    tsr_tensor seq_b = tsr_tensor_view3(&tb, N, H * W, C);
    tsr_tensor seq_c = tsr_tensor_view3(&tc, N, H * W, C);
    const tsr_tensor seq_x = tsr_tensor_view3(x, N, H * W, C);
    OP(tsr_linear(be, &seq_b, &at->q_w, &at->q_b, &seq_c));
    OP(tsr_linear(be, &seq_b, &at->k_w, &at->k_b, &k));
    OP(tsr_linear(be, &seq_b, &at->v_w, &at->v_b, &v));
    const tsr_attention_params ap = {1, 0.0f, false};
    OP(tsr_attention(be, &seq_c, &k, &v, &ap, &seq_b));
    /* to_out + bias, then + x */
    OP(tsr_linear_fused(be, &seq_b, &at->o_w, &at->o_b, &(tsr_epilogue){.residual = &seq_x},
                        &seq_c));
    tsr_arena_reset(r->ws, mark);
    r->cur = c;
    *y = tc;
    return TSR_OK;
}

static int mid_block(vae_run *r, const vae_half *h, tsr_tensor *x)
{
    tsr_tensor t;
    TSR_TRY(resnet(r, &h->mid0, x, &t));
    TSR_TRY(attention(r, &h->attn, &t, x));
    TSR_TRY(resnet(r, &h->mid1, x, &t));
    *x = t;
    return TSR_OK;
}

/* GroupNorm + SiLU in place, then conv_out into the next slot. */
static int head(vae_run *r, const vae_half *h, tsr_tensor *x, int cout)
{
    OP(tsr_group_norm(r->v->backend, x, &h->norm_out_w, &h->norm_out_b,
                      r->v->desc.norm_num_groups, VAE_GN_EPS, true, x));
    tsr_tensor y;
    r->cur = nxt(r->cur, 1);
    TSR_TRY(slot(r, r->cur, x->ne[0], x->ne[1], x->ne[2], cout, &y));
    TSR_TRY(conv(r, x, &h->conv_out_w, &h->conv_out_b, 1, 1, NULL, &y));
    *x = y;
    return TSR_OK;
}

int tsr_vae_net_decode(vae_run *r, const float *latents, int B, int h, int w, float *images)
{
    tsr_vae *v = r->v;
    tsr_backend *be = v->backend;
    const tsr_vae_desc *d = &v->desc;
    const int C = d->latent_channels;
    tsr_tensor x, y;
    r->cur = 0;
    TSR_TRY(slot(r, 0, B, h, w, C, &x));
    TSR_TRY(tsr_arena_upload_f32(r->ws, &x, latents, 0));
    /* z = latents / scaling_factor + shift_factor */
    OP(tsr_scale(be, &x, (float)(1.0 / d->scaling_factor), &x));
    if (d->shift_factor != 0.0) {
        const size_t mark = tsr_arena_mark(r->ws);
        tsr_tensor sh;
        const int64_t ne1[1] = {C};
        TSR_TRY(tsr_arena_act(r->ws, &sh, 1, ne1));
        float host[64];
        for (int i = 0; i < C && i < 64; i++)
            host[i] = (float)d->shift_factor;
        TSR_TRY(tsr_arena_upload_f32(r->ws, &sh, host, 0));
        OP(tsr_binary(be, TSR_BINARY_ADD, &x, &sh, &x));
        tsr_arena_reset(r->ws, mark);
    }
    TSR_TRY(slot(r, 1, B, h, w, C, &y));
    TSR_TRY(conv(r, &x, &v->post_w, &v->post_b, 1, 0, NULL, &y));
    const int top = d->block_out_channels[d->n_blocks - 1];
    TSR_TRY(slot(r, 2, B, h, w, top, &x));
    TSR_TRY(conv(r, &y, &v->dec.conv_in_w, &v->dec.conv_in_b, 1, 1, NULL, &x));
    r->cur = 2;
    TSR_TRY(mid_block(r, &v->dec, &x));
    for (int i = 0; i < d->n_blocks; i++) {
        const vae_stage *s = &v->dec.stage[i];
        for (int j = 0; j < s->n_res; j++) {
            TSR_TRY(resnet(r, &s->res[j], &x, &y));
            x = y;
        }
        if (s->has_sampler) {
            tsr_tensor up;
            const int b = nxt(r->cur, 1), c = nxt(r->cur, 2);
            TSR_TRY(slot(r, b, x.ne[0], 2 * x.ne[1], 2 * x.ne[2], x.ne[3], &up));
            OP(tsr_upsample_nearest2x(be, &x, &up));
            TSR_TRY(slot(r, c, up.ne[0], up.ne[1], up.ne[2], up.ne[3], &y));
            TSR_TRY(conv(r, &up, &s->samp_w, &s->samp_b, 1, 1, NULL, &y));
            r->cur = c;
            x = y;
        }
    }
    TSR_TRY(head(r, &v->dec, &x, d->out_channels));
    TSR_TRY(tsr_arena_download_f32(r->ws, &x, 0, images));
    OP(tsr_backend_sync(be));
    return TSR_OK;
}

int tsr_vae_net_encode(vae_run *r, const float *images, int B, int H, int W, float *moments)
{
    tsr_vae *v = r->v;
    tsr_backend *be = v->backend;
    const tsr_vae_desc *d = &v->desc;
    tsr_tensor x, y;
    r->cur = 0;
    TSR_TRY(slot(r, 0, B, H, W, d->in_channels, &x));
    TSR_TRY(tsr_arena_upload_f32(r->ws, &x, images, 0));
    TSR_TRY(slot(r, 1, B, H, W, d->block_out_channels[0], &y));
    TSR_TRY(conv(r, &x, &v->enc.conv_in_w, &v->enc.conv_in_b, 1, 1, NULL, &y));
    r->cur = 1;
    x = y;
    for (int i = 0; i < d->n_blocks; i++) {
        const vae_stage *s = &v->enc.stage[i];
        for (int j = 0; j < s->n_res; j++) {
            TSR_TRY(resnet(r, &s->res[j], &x, &y));
            x = y;
        }
        if (s->has_sampler) {
            /* diffusers pads (0, 1, 0, 1) and convolves with stride 2, no padding */
            const int b = nxt(r->cur, 1);
            const int64_t ho = (x.ne[1] + 1 - 3) / 2 + 1, wo = (x.ne[2] + 1 - 3) / 2 + 1;
            TSR_TRY(slot(r, b, x.ne[0], ho, wo, x.ne[3], &y));
            const tsr_conv2d_params p = {2, 2, 0, 0, 1, 1, false};
            OP(tsr_conv2d(be, &x, &s->samp_w, &s->samp_b, &p, &y));
            r->cur = b;
            x = y;
        }
    }
    TSR_TRY(mid_block(r, &v->enc, &x));
    TSR_TRY(head(r, &v->enc, &x, 2 * d->latent_channels));
    r->cur = nxt(r->cur, 1);
    TSR_TRY(slot(r, r->cur, x.ne[0], x.ne[1], x.ne[2], x.ne[3], &y));
    TSR_TRY(conv(r, &x, &v->quant_w, &v->quant_b, 1, 0, NULL, &y));
    TSR_TRY(tsr_arena_download_f32(r->ws, &y, 0, moments));
    OP(tsr_backend_sync(be));
    return TSR_OK;
}
