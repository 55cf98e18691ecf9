/*
 * text/clip.c - the CLIP text transformer on the backend interface.
 *
 * Pre-LN transformer: x = tok_emb[ids] + pos_emb; per layer
 *   x += out_proj(attn(ln1(x)))   (causal self-attention, all heads at once)
 *   x += fc2(act(fc1(ln2(x))))
 * then final_layer_norm.  Padding tokens are attended like any token (the SD
 * pipelines pass no attention mask), which is why the pad id matters.
 *
 * The forward pass is written once and run twice the first time a shape is
 * seen: in measuring mode (the workspace arena hands out NULL and ops are
 * skipped) to size the workspace exactly, then for real.  Activations are in
 * the backend's activation dtype; outputs reach the host as f32 through
 * tsr_arena_download_f32 (planned too: the measuring pass walks the whole
 * function).
 */
#include "text/clip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/arena.h"
#include "core/error.h"
#include "model/lora.h"

typedef struct clip_layer {
    const tsr_tensor *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    const tsr_tensor *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b;
    const tsr_tensor *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} clip_layer;

struct tsr_clip {
    tsr_textenc_desc cfg;
    tsr_unary_kind act;
    tsr_backend *backend;
    const tsr_tensor *tok_emb, *pos_emb, *final_w, *final_b, *proj;
    clip_layer layers[TSR_CLIP_MAX_LAYERS];
    tsr_arena ws;
    int64_t ws_tokens; /* batch*len the workspace was planned for */
    const tsr_lora_set *lora;      /* borrowed: tsr_clip_set_lora; NULL = none */
    tsr_component lora_comp;       /* which encoder the LoRA keys name */
    tsr_lora_scratch lora_scratch; /* owned */
    const tsr_clip_fix *fix;       /* borrowed: tsr_clip_set_fixes */
    int n_fix;
    float *fix_host;               /* owned: the vectors packed for one upload */
};

void tsr_clip_set_fixes(tsr_clip *c, const tsr_clip_fix *fix, int n)
{
    c->fix = n > 0 ? fix : NULL;
    c->n_fix = n > 0 ? n : 0;
}

/* x's rows named by the fixes become their vectors: packed on the host,
 * uploaded once in the activation dtype, then copied row by row on the
 * device (any backend). */
static int apply_fixes(tsr_clip *c, tsr_arena *ws, tsr_tensor *x, int B, int L)
{
    const int64_t D = c->cfg.hidden_size;
    const int64_t rows = ws->measuring ? (int64_t)B * L : c->n_fix;
    if (rows == 0)
        return TSR_OK;
    tsr_tensor stage;
    const int64_t ne[2] = {rows, D};
    TSR_TRY(tsr_arena_act(ws, &stage, 2, ne));
    if (ws->measuring)
        return TSR_OK;
    free(c->fix_host);
    c->fix_host = malloc((size_t)rows * D * sizeof(float));
    if (!c->fix_host)
        return tsr_errorf(TSR_ERR_NOMEM, "text encoder: out of memory");
    for (int i = 0; i < c->n_fix; i++) {
        if (c->fix[i].row < 0 || c->fix[i].row >= (int64_t)B * L)
            return tsr_errorf(TSR_ERR_RANGE, "text encoder: embedding row %lld outside %d x %d",
                              (long long)c->fix[i].row, B, L);
        memcpy(c->fix_host + (size_t)i * D, c->fix[i].vec, (size_t)D * sizeof(float));
    }
    TSR_TRY(tsr_arena_upload_f32(ws, &stage, c->fix_host, rows));
    const size_t es = tsr_dtype_size(x->dtype);
    const int64_t ne1[1] = {D};
    for (int i = 0; i < c->n_fix; i++) {
        tsr_tensor src = tsr_tensor_like(&stage, 1, ne1, (char *)stage.data + (size_t)(i * D) * es);
        tsr_tensor dst =
            tsr_tensor_like(x, 1, ne1, (char *)x->data + (size_t)(c->fix[i].row * D) * es);
        TSR_TRY(tsr_convert(c->backend, &src, &dst));
    }
    return TSR_OK;
}

void tsr_clip_set_lora(tsr_clip *c, const tsr_lora_set *set, tsr_component comp)
{
    c->lora = set;
    c->lora_comp = comp;
}

/* A linear and the LoRA deltas on its weight (every row of an encode call
 * belongs to one image, so one set serves them all). */
static int clip_linear(tsr_clip *c, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *b,
                       tsr_tensor *y)
{
    TSR_TRY(tsr_linear(c->backend, x, w, b, y));
    return tsr_lora_linear(&c->lora_scratch, c->lora, c->lora_comp, w, x, y);
}

/* Fetch a weight and check its shape (n1 = 0 for 1-D tensors). */
static int get_weight(const tsr_weights *w, const tsr_tensor **out, int64_t n0, int64_t n1,
                      const char *fmt, int layer)
{
    char name[160];
    snprintf(name, sizeof name, fmt, layer);
    TSR_TRY(tsr_weights_get(w, name, out));
    const tsr_tensor *t = *out;
    bool ok = n1 ? (t->ndim == 2 && t->ne[0] == n0 && t->ne[1] == n1)
                 : (t->ndim == 1 && t->ne[0] == n0);
    if (!ok) {
        char shape[64];
        return tsr_errorf(TSR_ERR_FORMAT, "text encoder weight '%s' has shape %s, expected [%lld%s%lld]",
                          name, tsr_tensor_shape_str(t, shape, sizeof shape), (long long)n0,
                          n1 ? ", " : "", (long long)(n1 ? n1 : 0));
    }
    return TSR_OK;
}

int tsr_clip_create(const tsr_textenc_desc *cfg, const tsr_weights *w, tsr_backend *backend,
                    tsr_clip **out)
{
    *out = NULL;
    tsr_clip *c = calloc(1, sizeof *c);
    if (!c)
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate the text encoder");
    if (cfg->num_hidden_layers > TSR_CLIP_MAX_LAYERS) {
        free(c);
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "text encoder has %d layers (at most %d)",
                          cfg->num_hidden_layers, TSR_CLIP_MAX_LAYERS);
    }
    c->cfg = *cfg;
    c->act = cfg->hidden_act == TSR_TEXTENC_QUICK_GELU ? TSR_UNARY_QUICK_GELU : TSR_UNARY_GELU;
    c->backend = backend;
    const int64_t D = cfg->hidden_size, I = cfg->intermediate_size;
    int rc;
#define W(dst, n0, n1, fmt, i) TSR_CHECK_GOTO(rc, get_weight(w, &(dst), n0, n1, fmt, i), fail)
    W(c->tok_emb, cfg->vocab_size, D, "text_model.embeddings.token_embedding.weight", 0);
    W(c->pos_emb, cfg->max_position_embeddings, D, "text_model.embeddings.position_embedding.weight", 0);
    W(c->final_w, D, 0, "text_model.final_layer_norm.weight", 0);
    W(c->final_b, D, 0, "text_model.final_layer_norm.bias", 0);
    /* CLIPTextConfig always carries projection_dim; whether the model has a
     * projection (CLIPTextModelWithProjection) is told by its weights. */
    c->cfg.projection_dim = 0;
    if (tsr_weights_get(w, "text_projection.weight", &c->proj) == TSR_OK) {
        if (c->proj->ndim != 2 || c->proj->ne[1] != D || c->proj->ne[0] > I) {
            rc = tsr_errorf(TSR_ERR_FORMAT, "text encoder weight 'text_projection.weight' is not "
                                            "[projection_dim <= %lld, %lld]", (long long)I,
                            (long long)D);
            goto fail;
        }
        c->cfg.projection_dim = (int)c->proj->ne[0];
    } else {
        c->proj = NULL;
    }
    tsr_error_clear();
    for (int i = 0; i < cfg->num_hidden_layers; i++) {
        clip_layer *l = &c->layers[i];
#define P "text_model.encoder.layers.%d."
        W(l->ln1_w, D, 0, P "layer_norm1.weight", i);
        W(l->ln1_b, D, 0, P "layer_norm1.bias", i);
        W(l->ln2_w, D, 0, P "layer_norm2.weight", i);
        W(l->ln2_b, D, 0, P "layer_norm2.bias", i);
        W(l->q_w, D, D, P "self_attn.q_proj.weight", i);
        W(l->q_b, D, 0, P "self_attn.q_proj.bias", i);
        W(l->k_w, D, D, P "self_attn.k_proj.weight", i);
        W(l->k_b, D, 0, P "self_attn.k_proj.bias", i);
        W(l->v_w, D, D, P "self_attn.v_proj.weight", i);
        W(l->v_b, D, 0, P "self_attn.v_proj.bias", i);
        W(l->o_w, D, D, P "self_attn.out_proj.weight", i);
        W(l->o_b, D, 0, P "self_attn.out_proj.bias", i);
        W(l->fc1_w, I, D, P "mlp.fc1.weight", i);
        W(l->fc1_b, I, 0, P "mlp.fc1.bias", i);
        W(l->fc2_w, D, I, P "mlp.fc2.weight", i);
        W(l->fc2_b, D, 0, P "mlp.fc2.bias", i);
#undef P
    }
#undef W
    *out = c;
    return TSR_OK;
fail:
    free(c);
    return rc;
}

void tsr_clip_free(tsr_clip *c)
{
    if (!c)
        return;
    tsr_arena_free(&c->ws);
    tsr_lora_scratch_free(&c->lora_scratch);
    free(c->fix_host);
    free(c);
}

const tsr_textenc_desc *tsr_clip_get_config(const tsr_clip *c)
{
    return &c->cfg;
}

#define OP(expr) TSR_ARENA_OP(ws, expr)

static int alloc3(tsr_arena *ws, tsr_tensor *t, int64_t b, int64_t l, int64_t d)
{
    int64_t ne[3] = {b, l, d};
    return tsr_arena_act(ws, t, 3, ne);
}

/* Row b of a [B, L, D] tensor at position `pos`, copied to row b of `dst`
 * [B, D] (host-visible memory only). */
static int copy_row(tsr_backend *be, const tsr_tensor *t, int64_t b, int64_t pos,
                    const tsr_tensor *dst)
{
    const int64_t L = t->ne[1], D = t->ne[2];
    const size_t es = tsr_dtype_size(t->dtype);
    const char *src = (const char *)t->data + (size_t)((b * L + pos) * D) * es;
    return tsr_backend_download(be, (char *)dst->data + (size_t)(b * D) * es, src, (size_t)D * es);
}

static int clip_forward(tsr_clip *c, tsr_arena *ws, const int32_t *ids, int B, int L,
                        const tsr_clip_output *o, float *hidden, float *pooled, float *projected)
{
    const tsr_textenc_desc *cfg = &c->cfg;
    tsr_backend *be = c->backend;
    const int64_t D = cfg->hidden_size, I = cfg->intermediate_size;
    const int target = cfg->num_hidden_layers - o->skip + 1; /* layers to run for `hidden` */
    const bool need_all = pooled || projected;
    const int run = need_all ? cfg->num_hidden_layers : target;

    tsr_tensor ids_t, x, h, q, k, v, a, f, keep = {0};
    int64_t ne_ids[2] = {B, L};
    TSR_TRY(tsr_arena_tensor(ws, &ids_t, TSR_I32, 2, ne_ids));
    TSR_TRY(alloc3(ws, &x, B, L, D));
    TSR_TRY(alloc3(ws, &h, B, L, D));
    TSR_TRY(alloc3(ws, &q, B, L, D));
    TSR_TRY(alloc3(ws, &k, B, L, D));
    TSR_TRY(alloc3(ws, &v, B, L, D));
    TSR_TRY(alloc3(ws, &a, B, L, D));
    TSR_TRY(alloc3(ws, &f, B, L, I));
    if ((need_all && target < cfg->num_hidden_layers) || ws->measuring) /* plan for the worst case */
        TSR_TRY(alloc3(ws, &keep, B, L, D));

    OP(tsr_backend_upload(be, ids_t.data, ids, (size_t)B * L * sizeof(int32_t)));
    OP(tsr_embedding(be, &ids_t, c->tok_emb, &x));
    TSR_TRY(apply_fixes(c, ws, &x, B, L));
    tsr_tensor pos = tsr_tensor_view2(c->pos_emb, L, D);
    OP(tsr_binary(be, TSR_BINARY_ADD, &x, &pos, &x));

    const tsr_attention_params ap = {cfg->num_attention_heads, 0.0f, true};
    if (target == 0 && keep.data) /* the embeddings themselves (hidden_states[0]) */
        OP(tsr_scale(be, &x, 1.0f, &keep));
    for (int i = 0; i < run; i++) {
        const clip_layer *l = &c->layers[i];
        OP(tsr_layer_norm(be, &x, l->ln1_w, l->ln1_b, (float)cfg->layer_norm_eps, &h));
        OP(clip_linear(c, &h, l->q_w, l->q_b, &q));
        OP(clip_linear(c, &h, l->k_w, l->k_b, &k));
        OP(clip_linear(c, &h, l->v_w, l->v_b, &v));
        OP(tsr_attention(be, &q, &k, &v, &ap, &a));
        OP(clip_linear(c, &a, l->o_w, l->o_b, &h));
        OP(tsr_binary(be, TSR_BINARY_ADD, &x, &h, &x));
        OP(tsr_layer_norm(be, &x, l->ln2_w, l->ln2_b, (float)cfg->layer_norm_eps, &h));
        OP(clip_linear(c, &h, l->fc1_w, l->fc1_b, &f));
        OP(tsr_unary(be, c->act, &f, &f));
        OP(clip_linear(c, &f, l->fc2_w, l->fc2_b, &h));
        OP(tsr_binary(be, TSR_BINARY_ADD, &x, &h, &x));
        if (i + 1 == target && keep.data)
            OP(tsr_scale(be, &x, 1.0f, &keep));
    }

    /* h = final_layer_norm(last state) serves pooled output, and `hidden`
     * when it is the last layer's normed state. */
    OP(tsr_layer_norm(be, &x, c->final_w, c->final_b, (float)cfg->layer_norm_eps, &h));
    const tsr_tensor *chosen = target == run ? &x : &keep;
    if (o->final_norm) {
        if (chosen != &x)
            OP(tsr_layer_norm(be, chosen, c->final_w, c->final_b, (float)cfg->layer_norm_eps, &q));
        chosen = chosen == &x ? &h : &q;
    }
    TSR_TRY(tsr_arena_download_f32(ws, chosen, 0, hidden));

    if (need_all || ws->measuring) {
        /* EOS position: first id equal to eos_token_id, or the argmax of the
         * ids for legacy configs (eos_token_id == 2), as transformers does. */
        tsr_tensor pool_t = tsr_tensor_view2(&a, B, D);
        for (int b = 0; b < B && !ws->measuring; b++) {
            const int32_t *row = ids + (size_t)b * L;
            int pos_eos = 0;
            for (int t = 0; t < L; t++) {
                bool better = cfg->eos_token_id == 2 ? row[t] > row[pos_eos]
                                                     : row[t] == cfg->eos_token_id;
                if (better) {
                    pos_eos = t;
                    if (cfg->eos_token_id != 2)
                        break;
                }
            }
            if (be->host_visible) {
                TSR_TRY(copy_row(be, &h, b, pos_eos, &pool_t));
            } else {
                /* device memory: a device-side copy of the row (tsr_convert
                 * between equal dtypes) */
                const size_t es = tsr_dtype_size(h.dtype);
                const int64_t ne1[1] = {D};
                tsr_tensor src_row = tsr_tensor_like(
                    &h, 1, ne1, (char *)h.data + (size_t)(((int64_t)b * L + pos_eos) * D) * es);
                tsr_tensor dst_row =
                    tsr_tensor_like(&pool_t, 1, ne1, (char *)pool_t.data + (size_t)(b * D) * es);
                TSR_TRY(tsr_convert(be, &src_row, &dst_row));
            }
        }
        if (pooled || ws->measuring)
            TSR_TRY(tsr_arena_download_f32(ws, &pool_t, 0, pooled));
        if (projected || (ws->measuring && c->proj)) {
            if (!c->proj)
                return tsr_errorf(TSR_ERR_INVALID, "this text encoder has no text_projection");
            tsr_tensor proj_t = tsr_tensor_view2(&f, B, cfg->projection_dim);
            OP(clip_linear(c, &pool_t, c->proj, NULL, &proj_t));
            TSR_TRY(tsr_arena_download_f32(ws, &proj_t, 0, projected));
        }
    }
    return ws->measuring ? TSR_OK : tsr_backend_sync(be);
}

int tsr_clip_encode(tsr_clip *c, const int32_t *ids, int batch, int len, const tsr_clip_output *o,
                    float *hidden, float *pooled, float *projected)
{
    const tsr_textenc_desc *cfg = &c->cfg;
    if (!o || !ids || !hidden)
        return tsr_errorf(TSR_ERR_INVALID, "text encoder: NULL argument");
    if (batch < 1 || batch > 4096)
        return tsr_errorf(TSR_ERR_INVALID, "text encoder batch %d outside 1..4096", batch);
    if (len < 1 || len > cfg->max_position_embeddings)
        return tsr_errorf(TSR_ERR_INVALID, "sequence length %d outside 1..%d", len,
                          cfg->max_position_embeddings);
    if (o->skip < 1 || o->skip > cfg->num_hidden_layers + 1)
        return tsr_errorf(TSR_ERR_INVALID, "hidden state %d from the end is outside 1..%d",
                          o->skip, cfg->num_hidden_layers + 1);
    if (projected && cfg->projection_dim == 0)
        return tsr_errorf(TSR_ERR_INVALID, "this text encoder has no text_projection");
    for (int64_t i = 0; i < (int64_t)batch * len; i++)
        if (ids[i] < 0 || ids[i] >= cfg->vocab_size)
            return tsr_errorf(TSR_ERR_RANGE, "token id %d at %lld outside the vocabulary (%d)",
                              ids[i], (long long)i, cfg->vocab_size);

    /* Plan once per largest shape: a measuring pass sizes the workspace. */
    const int64_t tokens = (int64_t)batch * cfg->max_position_embeddings;
    if (tokens > c->ws_tokens) {
        tsr_arena plan;
        tsr_arena_init_measure(&plan, c->backend);
        const tsr_clip_output worst = {cfg->num_hidden_layers, true};
        TSR_TRY(clip_forward(c, &plan, ids, batch, cfg->max_position_embeddings, &worst, NULL, NULL, NULL));
        tsr_arena_free(&c->ws);
        c->ws_tokens = 0;
        TSR_TRY(tsr_arena_init(&c->ws, c->backend, plan.peak));
        c->ws_tokens = tokens;
    }
    tsr_arena_reset(&c->ws, 0);
    return clip_forward(c, &c->ws, ids, batch, len, o, hidden, pooled, projected);
}
