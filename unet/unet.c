/*
 * unet/unet.c - UNet2DConditionModel: config walk, embeddings, skips, plan.
 *
 * The config (tsr_unet_desc) becomes a fixed list of blocks at create time,
 * with every weight looked up and shape-checked once; a forward pass is then
 * a straight walk over that list issuing backend ops:
 *
 *   emb  = linear_2(SiLU(linear_1(timestep_embedding(t))))
 *          [+ add_embedding(concat(text_embeds, timestep_embedding(time_ids)))]
 *   h    = conv_in(x)                                  -> skip
 *   down: per block, per layer: h = resnet(h, emb) [; h = transformer(h, ctx)] -> skip
 *         then (not last) h = conv3x3 stride 2 (h)      -> skip
 *   mid:  resnet, transformer, resnet
 *   up:   per block, per layer: h = resnet(concat(h, pop skip), emb) [; transformer]
 *         then (not last) h = conv3x3(nearest2x(h))
 *   out  = conv_out(SiLU(GroupNorm(h)))
 *
 * Channel counts are not re-derived from diffusers' formulas: the create
 * step simulates the skip stack (what each resnet really receives) and
 * checks every weight against it, which is the same thing, checked.
 *
 * Workspace (one arena, planned by a measuring pass per input shape):
 * inputs, the time embedding and the context sit at the bottom; the skip
 * tensors are pushed in order during the down pass and popped in reverse
 * during the up pass, which is exactly a stack.  An up-pass resnet's output
 * is placed where its popped skip began whenever it fits below the concat
 * buffer (the skip and the previous hidden state are dead once concatenated),
 * so the up pass gives memory back as it climbs.  Blocks put their own
 * temporaries above and release them before returning.
 *
 * Activations are in the backend's activation dtype (f16 on a GPU); inputs
 * and the output cross as f32 through tsr_arena_upload_f32 / _download_f32.
 *
 * Row rounding: on a backend with TSR_BACKEND_CAP_ROUND_ROWS (one that
 * replays captured graphs, which needs fixed shapes) a call's rows are
 * padded up to 1, 2, 4, 8, 16, 32 or 64 with copies of the last row, and the
 * padded outputs are never downloaded.  Rows are independent, so the real
 * rows' values do not depend on the padding (up to the last bits a GEMM of
 * another height may round differently).  The plan is per padded count.
 */
#include "unet/unet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unet/unet_internal.h"

#define UNET_MAX_LAYERS 17 /* layers_per_block (<= 16) + 1 in the up blocks */
#define UNET_MAX_SKIPS (1 + TSR_MAX_BLOCKS * UNET_MAX_LAYERS)

typedef struct unet_block {
    int n_res;
    bool attn;
    unet_resnet res[UNET_MAX_LAYERS];
    unet_transformer tr[UNET_MAX_LAYERS];
    const tsr_tensor *sample_w, *sample_b; /* down/upsampler conv; NULL when absent */
} unet_block;

/* Skip stack: each entry remembers where in the arena it began. */
typedef struct skip_stack {
    tsr_tensor t[UNET_MAX_SKIPS];
    size_t base[UNET_MAX_SKIPS];
    int n;
} skip_stack;

struct tsr_unet {
    tsr_unet_desc d;
    tsr_backend *be; /* borrowed */
    int temb_dim;
    const tsr_tensor *t1_w, *t1_b, *t2_w, *t2_b; /* time_embedding */
    const tsr_tensor *a1_w, *a1_b, *a2_w, *a2_b; /* add_embedding (text_time) */
    const tsr_tensor *conv_in_w, *conv_in_b, *norm_out_w, *norm_out_b, *conv_out_w, *conv_out_b;
    unet_block down[TSR_MAX_BLOCKS], up[TSR_MAX_BLOCKS];
    unet_resnet mid_res[2];
    unet_transformer mid_tr;
    tsr_arena ws;       /* owned workspace */
    int plan[5];        /* B, H, W, L, n_time_ids of the last plan */
    tsr_lora_scratch lora_scratch; /* owned: the LoRA deltas' scratch */
};

/* ------------------------------------------------------------- create */

static int bind_linear(const tsr_weights *w, const char *p, int64_t out, int64_t in,
                       const tsr_tensor **wt, const tsr_tensor **b)
{
    const int64_t ne[2] = {out, in}, nb[1] = {out};
    TSR_TRY(unet_weightf(w, wt, 2, ne, p, "weight"));
    return unet_weightf(w, b, 1, nb, p, "bias");
}

static int bind_conv(const tsr_weights *w, const char *p, int64_t out, int64_t in,
                     const tsr_tensor **wt, const tsr_tensor **b)
{
    const int64_t ne[4] = {out, 3, 3, in}, nb[1] = {out};
    TSR_TRY(unet_weightf(w, wt, 4, ne, p, "weight"));
    return unet_weightf(w, b, 1, nb, p, "bias");
}

static int unet_bind(tsr_unet *u, const tsr_weights *w)
{
    const tsr_unet_desc *d = &u->d;
    const int n = d->n_blocks, c0 = d->block_out_channels[0];
    char p[160];
    /* time_embedding_dim is 4 * block_out_channels[0] unless configured:
     * take it from the weight and check the rest against it. */
    TSR_TRY(tsr_weights_get(w, "time_embedding.linear_1.weight", &u->t1_w));
    if (u->t1_w->ndim != 2 || u->t1_w->ne[0] < 1 || u->t1_w->ne[0] > 4 * TSR_MAX_CHANNELS)
        return tsr_errorf(TSR_ERR_FORMAT, "unet: time_embedding.linear_1.weight is not 2-D");
    u->temb_dim = (int)u->t1_w->ne[0];
    const int T = u->temb_dim;
    TSR_TRY(bind_linear(w, "time_embedding.linear_1.", T, c0, &u->t1_w, &u->t1_b));
    TSR_TRY(bind_linear(w, "time_embedding.linear_2.", T, T, &u->t2_w, &u->t2_b));
    if (d->text_time) {
        TSR_TRY(bind_linear(w, "add_embedding.linear_1.", T,
                            d->projection_class_embeddings_input_dim, &u->a1_w, &u->a1_b));
        TSR_TRY(bind_linear(w, "add_embedding.linear_2.", T, T, &u->a2_w, &u->a2_b));
    }
    const int64_t conv_in[4] = {c0, 3, 3, d->in_channels}, vc0[1] = {c0};
    TSR_TRY(unet_weight(w, &u->conv_in_w, 4, conv_in, "conv_in.weight"));
    TSR_TRY(unet_weight(w, &u->conv_in_b, 1, vc0, "conv_in.bias"));
    TSR_TRY(unet_weight(w, &u->norm_out_w, 1, vc0, "conv_norm_out.weight"));
    TSR_TRY(unet_weight(w, &u->norm_out_b, 1, vc0, "conv_norm_out.bias"));
    const int64_t vout[1] = {d->out_channels};
    const int64_t conv_out[4] = {d->out_channels, 3, 3, c0};
    TSR_TRY(unet_weight(w, &u->conv_out_w, 4, conv_out, "conv_out.weight"));
    TSR_TRY(unet_weight(w, &u->conv_out_b, 1, vout, "conv_out.bias"));

    /* Simulated skip stack: channel count of each pushed tensor. */
    int skips[UNET_MAX_SKIPS], ns = 0, cur = c0;
    skips[ns++] = c0;
    for (int i = 0; i < n; i++) {
        unet_block *b = &u->down[i];
        const int co = d->block_out_channels[i];
        b->n_res = d->layers_per_block;
        b->attn = d->down_attn[i];
        for (int j = 0; j < b->n_res; j++) {
            snprintf(p, sizeof p, "down_blocks.%d.resnets.%d.", i, j);
            TSR_TRY(unet_resnet_bind(w, p, cur, co, T, &b->res[j]));
            cur = co;
            if (b->attn) {
                snprintf(p, sizeof p, "down_blocks.%d.attentions.%d.", i, j);
                TSR_TRY(unet_transformer_bind(w, p, co, d->heads[i], d->transformer_layers[i],
                                              d->cross_attention_dim, &b->tr[j]));
            }
            skips[ns++] = cur;
        }
        if (i < n - 1) {
            snprintf(p, sizeof p, "down_blocks.%d.downsamplers.0.conv.", i);
            TSR_TRY(bind_conv(w, p, cur, cur, &b->sample_w, &b->sample_b));
            skips[ns++] = cur;
        }
    }
    const int cm = d->block_out_channels[n - 1];
    TSR_TRY(unet_resnet_bind(w, "mid_block.resnets.0.", cur, cm, T, &u->mid_res[0]));
    TSR_TRY(unet_transformer_bind(w, "mid_block.attentions.0.", cm, d->heads[n - 1],
                                  d->transformer_layers[n - 1], d->cross_attention_dim,
                                  &u->mid_tr));
    TSR_TRY(unet_resnet_bind(w, "mid_block.resnets.1.", cm, cm, T, &u->mid_res[1]));
    cur = cm;
    for (int i = 0; i < n; i++) {
        unet_block *b = &u->up[i];
        const int rb = n - 1 - i; /* the down block this one mirrors */
        const int co = d->block_out_channels[rb];
        b->n_res = d->layers_per_block + 1;
        b->attn = d->up_attn[i];
        for (int j = 0; j < b->n_res; j++) {
            const int cs = skips[--ns];
            snprintf(p, sizeof p, "up_blocks.%d.resnets.%d.", i, j);
            TSR_TRY(unet_resnet_bind(w, p, cur + cs, co, T, &b->res[j]));
            cur = co;
            if (b->attn) {
                snprintf(p, sizeof p, "up_blocks.%d.attentions.%d.", i, j);
                TSR_TRY(unet_transformer_bind(w, p, co, d->heads[rb], d->transformer_layers[rb],
                                              d->cross_attention_dim, &b->tr[j]));
            }
        }
        if (i < n - 1) {
            snprintf(p, sizeof p, "up_blocks.%d.upsamplers.0.conv.", i);
            TSR_TRY(bind_conv(w, p, cur, cur, &b->sample_w, &b->sample_b));
        }
    }
    if (ns != 0 || cur != c0)
        return tsr_errorf(TSR_ERR_INTERNAL, "unet: skip bookkeeping is off (%d left)", ns);
    return TSR_OK;
}

static void unet_release(tsr_unet *u)
{
    for (int i = 0; i < TSR_MAX_BLOCKS; i++)
        for (int j = 0; j < UNET_MAX_LAYERS; j++) {
            unet_transformer_release(&u->down[i].tr[j]);
            unet_transformer_release(&u->up[i].tr[j]);
        }
    unet_transformer_release(&u->mid_tr);
}

int tsr_unet_create(const tsr_unet_desc *desc, const tsr_weights *weights, tsr_backend *backend,
                    tsr_unet **out)
{
    if (!out)
        return tsr_errorf(TSR_ERR_INVALID, "unet: NULL output pointer");
    *out = NULL;
    if (!desc || !weights || !backend)
        return tsr_errorf(TSR_ERR_INVALID, "unet: NULL config, weights or backend");
    if (desc->n_blocks < 1 || desc->n_blocks > TSR_MAX_BLOCKS || desc->layers_per_block < 1 ||
        desc->layers_per_block > UNET_MAX_LAYERS - 1 || desc->norm_num_groups < 1)
        return tsr_errorf(TSR_ERR_INVALID, "unet: config not from tsr_unet_desc_parse");
    tsr_unet *u = calloc(1, sizeof *u);
    if (!u)
        return tsr_errorf(TSR_ERR_NOMEM, "unet: cannot allocate the model");
    u->d = *desc;
    u->be = backend;
    int rc = unet_bind(u, weights);
    if (rc < 0) {
        unet_release(u);
        free(u);
        return rc;
    }
    *out = u;
    return TSR_OK;
}

void tsr_unet_free(tsr_unet *u)
{
    if (!u)
        return;
    unet_release(u);
    tsr_arena_free(&u->ws);
    tsr_lora_scratch_free(&u->lora_scratch);
    free(u);
}

const tsr_unet_desc *tsr_unet_get_desc(const tsr_unet *u) { return &u->d; }
size_t tsr_unet_workspace_bytes(const tsr_unet *u) { return u->ws.cap; }

/* ------------------------------------------------------------ forward */

static int n_time_ids(const tsr_unet_inputs *in)
{
    return in->n_time_ids ? in->n_time_ids : 6;
}

/* Time embedding (+ SDXL's added embedding); leaves SiLU(emb) in r->temb_act.
 * B rows, of which the first `given` come from the inputs (the rest repeat
 * the last, see "Row rounding").  Timesteps and time ids stay f32: they are
 * the inputs of tsr_timestep_embedding. */
static int embed(tsr_unet *u, unet_run *r, const tsr_unet_inputs *in, int64_t B)
{
    tsr_arena *ws = r->ws;
    tsr_backend *be = u->be;
    const tsr_unet_desc *d = &u->d;
    const int64_t given = in->batch, T = u->temb_dim, c0 = d->block_out_channels[0];
    const tsr_epilogue silu = {.has_act = true, .act = TSR_UNARY_SILU};
    TSR_TRY(tsr_arena_act(ws, &r->temb_act, 2, (int64_t[]){B, T}));
    const size_t mark = tsr_arena_mark(ws);
    tsr_tensor t, tp, th, emb;
    TSR_TRY(tsr_arena_tensor(ws, &t, TSR_F32, 1, (int64_t[]){B}));
    TSR_TRY(tsr_arena_act(ws, &tp, 2, (int64_t[]){B, c0}));
    TSR_TRY(tsr_arena_act(ws, &th, 2, (int64_t[]){B, T}));
    TSR_TRY(tsr_arena_act(ws, &emb, 2, (int64_t[]){B, T}));
    const tsr_timestep_params tparams = {(int)c0, d->flip_sin_to_cos, (float)d->freq_shift};
    TSR_TRY(tsr_arena_upload_f32(ws, &t, in->timesteps, given));
    OP(tsr_timestep_embedding(be, &t, &tparams, &tp));
    OP(unet_linear(r, &tp, u->t1_w, u->t1_b, &silu, &th));
    OP(unet_linear(r, &th, u->t2_w, u->t2_b, NULL, &emb));
    tsr_tensor aug, *e = &emb; /* the embedding SiLU reads (aug: + add_embedding) */
    if (d->text_time) {
        const int64_t nt = n_time_ids(in), ad = d->addition_time_embed_dim;
        const int64_t pooled = d->projection_class_embeddings_input_dim - nt * ad;
        tsr_tensor ids, ide, te, cat;
        TSR_TRY(tsr_arena_tensor(ws, &ids, TSR_F32, 1, (int64_t[]){B * nt}));
        TSR_TRY(tsr_arena_act(ws, &ide, 2, (int64_t[]){B * nt, ad}));
        TSR_TRY(tsr_arena_act(ws, &te, 2, (int64_t[]){B, pooled}));
        TSR_TRY(tsr_arena_act(ws, &cat, 2, (int64_t[]){B, pooled + nt * ad}));
        TSR_TRY(tsr_arena_act(ws, &aug, 2, (int64_t[]){B, T}));
        const tsr_timestep_params ap = {(int)ad, d->flip_sin_to_cos, (float)d->freq_shift};
        tsr_tensor ide_rows = tsr_tensor_view2(&ide, B, nt * ad);
        tsr_tensor id_rows = tsr_tensor_view2(&ids, B, nt);
        TSR_TRY(tsr_arena_upload_f32(ws, &id_rows, in->time_ids, given));
        TSR_TRY(tsr_arena_upload_f32(ws, &te, in->text_embeds, given));
        OP(tsr_timestep_embedding(be, &ids, &ap, &ide));
        OP(tsr_concat(be, &te, &ide_rows, &cat));
        OP(unet_linear(r, &cat, u->a1_w, u->a1_b, &silu, &th));
        /* emb + add_embedding(...), fused: the sum is in aug */
        OP(unet_linear(r, &th, u->a2_w, u->a2_b, &(tsr_epilogue){.residual = &emb}, &aug));
        e = &aug;
    }
    OP(tsr_unary(be, TSR_UNARY_SILU, e, &r->temb_act));
    tsr_arena_reset(ws, mark);
    return TSR_OK;
}

/* Allocate a new activation at the top of the arena and push it. */
static int push_new(tsr_arena *ws, skip_stack *s, int64_t b, int64_t h, int64_t w, int64_t c)
{
    if (s->n >= UNET_MAX_SKIPS)
        return tsr_errorf(TSR_ERR_INTERNAL, "unet: skip stack overflow");
    s->base[s->n] = tsr_arena_mark(ws);
    TSR_TRY(unet_alloc4(ws, &s->t[s->n], b, h, w, c));
    s->n++;
    return TSR_OK;
}

static size_t act_bytes(const tsr_arena *ws, int64_t b, int64_t h, int64_t w, int64_t c)
{
    size_t n = (size_t)(b * h * w * c) * tsr_dtype_size(tsr_backend_act_dtype(ws->backend));
    return (n + TSR_ARENA_ALIGN - 1) & ~(size_t)(TSR_ARENA_ALIGN - 1);
}

/* One up-block layer: out = resnet(concat(cur, skip)) [+ transformer]. */
static int up_layer(unet_run *r, const unet_block *b, int j, skip_stack *s, tsr_tensor *cur)
{
    tsr_arena *ws = r->ws;
    const unet_resnet *rn = &b->res[j];
    const tsr_tensor skip = s->t[--s->n];
    const size_t base = s->base[s->n];
    const int64_t B = cur->ne[0], H = cur->ne[1], W = cur->ne[2];
    const size_t top = tsr_arena_mark(ws);
    tsr_tensor cat, out;
    TSR_TRY(unet_alloc4(ws, &cat, B, H, W, cur->ne[3] + skip.ne[3]));
    OP(tsr_concat(r->be, cur, &skip, &cat));
    const size_t cat_end = tsr_arena_mark(ws);
    /* Everything from the skip's base up is dead once concatenated. */
    size_t out_end;
    if (base + act_bytes(ws, B, H, W, rn->cout) <= top) {
        tsr_arena_reset(ws, base);
        TSR_TRY(unet_alloc4(ws, &out, B, H, W, rn->cout));
        out_end = tsr_arena_mark(ws);
        tsr_arena_reset(ws, cat_end);
    } else {
        TSR_TRY(unet_alloc4(ws, &out, B, H, W, rn->cout));
        out_end = tsr_arena_mark(ws);
    }
    TSR_TRY(unet_resnet_forward(r, rn, &cat, &out));
    tsr_arena_reset(ws, out_end);
    if (b->attn)
        TSR_TRY(unet_transformer_forward(r, &b->tr[j], &out));
    *cur = out;
    return TSR_OK;
}

/* One pass over B rows (B >= in->batch: see "Row rounding"). */
static int unet_walk(tsr_unet *u, tsr_arena *ws, const tsr_unet_inputs *in, int64_t B, float *out)
{
    const tsr_unet_desc *d = &u->d;
    tsr_backend *be = u->be;
    const int64_t L = in->context_len;
    int64_t H = in->height, W = in->width;
    unet_run r = {.be = be, .ws = ws, .desc = d, .loras = in->loras,
                  .n_loras = in->loras ? in->batch : 0, .lora_scratch = &u->lora_scratch,
                  .circular = in->circular};
    tsr_conv2d_params p3 = tsr_conv2d_params_make(1, 1), p3s2 = tsr_conv2d_params_make(2, 1);
    p3.circular = p3s2.circular = in->circular;

    tsr_tensor x;
    TSR_TRY(unet_alloc4(ws, &x, B, H, W, d->in_channels));
    TSR_TRY(tsr_arena_act(ws, &r.context, 3, (int64_t[]){B, L, d->cross_attention_dim}));
    TSR_TRY(tsr_arena_upload_f32(ws, &x, in->latents, in->batch));
    TSR_TRY(tsr_arena_upload_f32(ws, &r.context, in->context, in->batch));
    TSR_TRY(embed(u, &r, in, B));

    /* the skip stack lives on this call's stack (under 7 KiB), not in u: a
     * measuring walk (tsr_unet_workspace_need, for the engine's memory
     * estimate) may run on another thread while a forward uses u */
    skip_stack stack;
    skip_stack *s = &stack;
    s->n = 0;
    int rc;
#define CK(expr) TSR_CHECK_GOTO(rc, (expr), done)
    tsr_tensor cur;
    CK(push_new(ws, s, B, H, W, d->block_out_channels[0]));
    cur = s->t[s->n - 1];
    if (!ws->measuring)
        CK(unet_conv(&r, &x, u->conv_in_w, u->conv_in_b, &p3, NULL, &cur));

    for (int i = 0; i < d->n_blocks; i++) {
        const unet_block *b = &u->down[i];
        for (int j = 0; j < b->n_res; j++) {
            CK(push_new(ws, s, B, H, W, b->res[j].cout));
            tsr_tensor *o = &s->t[s->n - 1];
            CK(unet_resnet_forward(&r, &b->res[j], &cur, o));
            if (b->attn)
                CK(unet_transformer_forward(&r, &b->tr[j], o));
            cur = *o;
        }
        if (b->sample_w) {
            H = (H + 1) / 2; /* conv 3x3, stride 2, pad 1 */
            W = (W + 1) / 2;
            CK(push_new(ws, s, B, H, W, cur.ne[3]));
            tsr_tensor *o = &s->t[s->n - 1];
            if (!ws->measuring)
                CK(unet_conv(&r, &cur, b->sample_w, b->sample_b, &p3s2, NULL, o));
            cur = *o;
        }
    }

    tsr_tensor m0, m1;
    CK(unet_alloc4(ws, &m0, B, H, W, u->mid_res[0].cout));
    CK(unet_resnet_forward(&r, &u->mid_res[0], &cur, &m0));
    CK(unet_transformer_forward(&r, &u->mid_tr, &m0));
    CK(unet_alloc4(ws, &m1, B, H, W, u->mid_res[1].cout));
    CK(unet_resnet_forward(&r, &u->mid_res[1], &m0, &m1));
    cur = m1;

    for (int i = 0; i < d->n_blocks; i++) {
        const unet_block *b = &u->up[i];
        for (int j = 0; j < b->n_res; j++)
            CK(up_layer(&r, b, j, s, &cur));
        if (b->sample_w) {
            /* to the size of the skip this level meets (2H, or 2H - 1 after
             * an odd downsample), as diffusers' upsample_size does */
            H = s->t[s->n - 1].ne[1];
            W = s->t[s->n - 1].ne[2];
            tsr_tensor up, o;
            CK(unet_alloc4(ws, &up, B, H, W, cur.ne[3]));
            CK(unet_alloc4(ws, &o, B, H, W, cur.ne[3]));
            if (!ws->measuring) {
                CK(tsr_upsample_nearest(be, &cur, &up));
                CK(unet_conv(&r, &up, b->sample_w, b->sample_b, &p3, NULL, &o));
            }
            cur = o;
        }
    }

    tsr_tensor gn, y;
    CK(unet_alloc4(ws, &gn, B, H, W, cur.ne[3]));
    CK(unet_alloc4(ws, &y, B, H, W, d->out_channels));
    if (!ws->measuring) {
        CK(tsr_group_norm(be, &cur, u->norm_out_w, u->norm_out_b, d->norm_num_groups,
                          (float)d->norm_eps, true, &gn));
        CK(unet_conv(&r, &gn, u->conv_out_w, u->conv_out_b, &p3, NULL, &y));
    }
    CK(tsr_arena_download_f32(ws, &y, in->batch, out)); /* the real rows only */
    if (!ws->measuring)
        CK(tsr_backend_sync(be));
    rc = TSR_OK;
done:
#undef CK
    return rc;
}

static int check_inputs(const tsr_unet *u, const tsr_unet_inputs *in)
{
    const tsr_unet_desc *d = &u->d;
    if (!in || !in->latents || !in->timesteps || !in->context)
        return tsr_errorf(TSR_ERR_INVALID, "unet: latents, timesteps and context are required");
    if (in->batch < 1 || in->batch > TSR_UNET_MAX_BATCH)
        return tsr_errorf(TSR_ERR_INVALID, "unet: batch of %d rows outside 1..%d", in->batch,
                          TSR_UNET_MAX_BATCH);
    if (in->channels != d->in_channels)
        return tsr_errorf(TSR_ERR_INVALID,
                          "unet: latents have %d channels, this UNet takes %d%s", in->channels,
                          d->in_channels,
                          d->in_channels == 9 ? " (inpainting: latents + mask + masked image)"
                                              : "");
    if (in->height < 1 || in->width < 1 || in->height > TSR_UNET_MAX_SIZE ||
        in->width > TSR_UNET_MAX_SIZE)
        return tsr_errorf(TSR_ERR_INVALID, "unet: latent size %dx%d outside 1..%d", in->height,
                          in->width, TSR_UNET_MAX_SIZE);
    if (in->context_len < 1 || in->context_len > TSR_UNET_MAX_CONTEXT)
        return tsr_errorf(TSR_ERR_INVALID, "unet: context length %d outside 1..%d",
                          in->context_len, TSR_UNET_MAX_CONTEXT);
    if (d->text_time) {
        if (!in->text_embeds || !in->time_ids)
            return tsr_errorf(TSR_ERR_INVALID,
                              "unet: this UNet (addition_embed_type text_time, SDXL) needs "
                              "pooled text embeddings and time_ids");
        const int nt = n_time_ids(in);
        if (nt < 1 || nt > TSR_UNET_MAX_TIME_IDS ||
            d->projection_class_embeddings_input_dim - nt * d->addition_time_embed_dim < 1)
            return tsr_errorf(TSR_ERR_INVALID,
                              "unet: %d time_ids of width %d do not fit "
                              "projection_class_embeddings_input_dim %d",
                              nt, d->addition_time_embed_dim,
                              d->projection_class_embeddings_input_dim);
    } else if (in->text_embeds || in->time_ids) {
        return tsr_errorf(TSR_ERR_INVALID, "unet: text_embeds/time_ids given, but this UNet has "
                                           "no text_time embedding (not SDXL)");
    }
    return TSR_OK;
}

/* Rows a call runs: the given count, or (TSR_BACKEND_CAP_ROUND_ROWS) the
 * next of 1, 2, 4, ..., 64. */
static int run_rows(const tsr_unet *u, int batch)
{
    if (!tsr_backend_has_cap(u->be, TSR_BACKEND_CAP_ROUND_ROWS))
        return batch;
    int rows = 1;
    while (rows < batch)
        rows *= 2;
    return rows < TSR_UNET_MAX_BATCH ? rows : TSR_UNET_MAX_BATCH;
}

int tsr_unet_rows(const tsr_unet *u, int batch) { return run_rows(u, batch); }

static bool same_plan(const tsr_unet *u, const tsr_unet_inputs *in)
{
    return u->ws.base && u->plan[0] == run_rows(u, in->batch) && u->plan[1] == in->height &&
           u->plan[2] == in->width && u->plan[3] == in->context_len &&
           u->plan[4] == n_time_ids(in);
}

int tsr_unet_plan(tsr_unet *u, const tsr_unet_inputs *in)
{
    TSR_TRY(check_inputs(u, in));
    if (same_plan(u, in))
        return TSR_OK;
    const int rows = run_rows(u, in->batch);
    tsr_arena plan;
    tsr_arena_init_measure(&plan, u->be);
    TSR_TRY(unet_walk(u, &plan, in, rows, NULL));
    if (plan.peak > u->ws.cap) {
        tsr_arena_free(&u->ws);
        memset(u->plan, 0, sizeof u->plan);
        TSR_TRY(tsr_arena_init(&u->ws, u->be, plan.peak));
    }
    const int key[5] = {rows, in->height, in->width, in->context_len, n_time_ids(in)};
    memcpy(u->plan, key, sizeof key);
    return TSR_OK;
}

int tsr_unet_workspace_need(tsr_unet *u, const tsr_unet_inputs *in, size_t *bytes)
{
    *bytes = 0;
    TSR_TRY(check_inputs(u, in));
    tsr_arena plan;
    tsr_arena_init_measure(&plan, u->be);
    int rc = unet_walk(u, &plan, in, run_rows(u, in->batch), NULL);
    *bytes = plan.peak;
    tsr_arena_free(&plan);
    return rc;
}

void tsr_unet_trim(tsr_unet *u)
{
    tsr_arena_free(&u->ws);
    memset(&u->ws, 0, sizeof u->ws);
    memset(u->plan, 0, sizeof u->plan);
    tsr_lora_scratch_free(&u->lora_scratch);
}

int tsr_unet_forward(tsr_unet *u, const tsr_unet_inputs *in, float *out)
{
    if (!u || !out)
        return tsr_errorf(TSR_ERR_INVALID, "unet: NULL model or output");
    TSR_TRY(tsr_unet_plan(u, in));
    tsr_arena_reset(&u->ws, 0);
    return unet_walk(u, &u->ws, in, run_rows(u, in->batch), out);
}
