/*
 * backend/cpu/cpu_wide.c - the CPU backend's f16/bf16 storage variants
 * ("cpu-f16", "cpu-bf16"): a test mode for the model code's f16 path, and
 * the bf16 compute variant "cpu-bf16gemm" (below).
 *
 * Why it exists: a GPU backend will store weights and activations in f16,
 * and the model code must then size, view, upload and download every tensor
 * in that dtype.  This variant makes the CPU do the same, ahead of any GPU:
 * it reports f16 (or bf16) as its weight and activation dtype, so
 * model/weights.c stores f16 and unet/, vae/ and text/ allocate f16
 * activations, and each op widens its f16 inputs to f32 in scratch, runs the
 * f32 code unchanged and rounds its result back to f16.  That is the
 * numerics of a GPU storing f16 and accumulating in f32 (each op's output
 * rounded once), so the tiny goldens under this variant bound what f16
 * storage costs in accuracy (tests/unet, tests/vae: the f16 cases).
 *
 * It accepts any float dtype on every input, so an f32 tensor (TAESD's
 * weights, a timestep vector) passes straight through.  The widened copies
 * live in grow-only context buffers, one per operand slot.  Speed is not a
 * goal: weights are widened on every call.
 *
 * "cpu-bf16gemm" is the opt-in fast mode for CPUs with AVX512_BF16: weights
 * are stored bf16 (half the memory) and activations stay f32.  A conv or
 * linear keeps its bf16 weights, rounds its input to bf16 once, and runs
 * the GEMM on bf16 pairs with f32 sums (gemm.h, tsr_gemm.pairs): the
 * vdpbf16ps kernel does twice the multiply-adds of an f32 FMA per
 * instruction.  Everything else (norms, attention, elementwise) runs the
 * f32 code, its bf16 parameters widened.  Images differ from f32's by the
 * bf16 rounding of weights and GEMM inputs (docs/perf.md measures it).
 */
#include <stdint.h>
#include <stdio.h>

#include "backend/cpu/cpu_internal.h"
#include "core/error.h"

enum { S_X, S_W, S_B, S_R, S_Y, S_AUX };

/* An f32 view of t: t itself when already f32 (or i32), else a widened copy
 * in slot `slot`.  *out is where the result goes. */
static int widen(cpu_ctx *c, int slot, const tsr_tensor *t, tsr_tensor *store,
                 const tsr_tensor **out)
{
    *out = t;
    if (!t || t->dtype == TSR_F32 || t->dtype == TSR_I32)
        return TSR_OK;
    const int64_t n = tsr_tensor_numel(t);
    float *p = tsr_cpu_buf_grow(&c->wide[slot], (size_t)n * sizeof(float));
    if (!p)
        return tsr_errorf(TSR_ERR_NOMEM, "cpu backend: cannot widen %lld elements to f32",
                          (long long)n);
    tsr_cpu_convert_n(c, p, TSR_F32, t->data, t->dtype, n);
    *store = tsr_tensor_make(TSR_F32, t->ndim, t->ne, p, t->backend);
    *out = store;
    return TSR_OK;
}

/* Where an op writes its f32 result: y itself when f32, else slot S_Y. */
static int out_begin(cpu_ctx *c, tsr_tensor *y, tsr_tensor *store, tsr_tensor **out)
{
    *out = y;
    if (y->dtype == TSR_F32)
        return TSR_OK;
    const int64_t n = tsr_tensor_numel(y);
    float *p = tsr_cpu_buf_grow(&c->wide[S_Y], (size_t)n * sizeof(float));
    if (!p)
        return tsr_errorf(TSR_ERR_NOMEM, "cpu backend: cannot allocate %lld f32 outputs",
                          (long long)n);
    *store = tsr_tensor_make(TSR_F32, y->ndim, y->ne, p, y->backend);
    *out = store;
    return TSR_OK;
}

/* Round the f32 result back into y (when y is not f32). */
static int out_end(cpu_ctx *c, int rc, tsr_tensor *y, const tsr_tensor *res)
{
    if (rc == TSR_OK && res != y)
        tsr_cpu_convert_n(c, y->data, y->dtype, res->data, TSR_F32, tsr_tensor_numel(y));
    return rc;
}

/* Declares the widened inputs and the f32 output of one op. */
#define WIDE_PROLOGUE                                         \
    cpu_ctx *c = cpu_ctx_of(b);                               \
    tsr_tensor st_[CPU_WIDE_SLOTS], yst_, *Y;                 \
    (void)st_

#define WIDEN(slot, t, name)                                  \
    const tsr_tensor *name;                                   \
    TSR_TRY(widen(c, slot, t, &st_[slot], &name))

#define OUT() TSR_TRY(out_begin(c, y, &yst_, &Y))

const float *tsr_cpu_bf16_pairs(cpu_ctx *c, const float *x, int64_t n)
{
    uint16_t *p = tsr_cpu_buf_grow(&c->pairs, (size_t)n * sizeof(uint16_t));
    if (!p) {
        tsr_errorf(TSR_ERR_NOMEM, "cpu backend: cannot round %lld values to bf16", (long long)n);
        return NULL;
    }
    tsr_cpu_convert_n(c, p, TSR_BF16, x, TSR_F32, n);
    return (const float *)(const void *)p;
}

/* The weights of a conv or linear as they are (no widening) where the
 * bf16 GEMM takes them: the cpu-bf16gemm variant, bf16 weights, f32
 * activations, and an even K per tap (k = channels for a conv, the input
 * width for a linear) so that bf16 pairs never straddle a tap.  Otherwise
 * the f32 path (the weights widened per call: small or odd layers only,
 * such as a 3-channel encoder input). */
static bool keep_bf16(const cpu_ctx *c, const tsr_tensor *x, const tsr_tensor *w, int64_t k)
{
    return c->bf16gemm && w->dtype == TSR_BF16 && x->dtype == TSR_F32 && k % 2 == 0;
}

#define WEIGHT(t, name, k)                                                                         \
    const tsr_tensor *name = t;                                                                    \
    if (!keep_bf16(c, X, t, k))                                                                    \
    TSR_TRY(widen(c, S_W, t, &st_[S_W], &name))

static int w_conv2d(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w,
                    const tsr_tensor *bias, const tsr_conv2d_params *p, const tsr_epilogue *e,
                    tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, x, X);
    WEIGHT(w, W, x->ne[3]);
    WIDEN(S_B, bias, B);
    tsr_epilogue ew = e ? *e : (tsr_epilogue){0};
    if (e)
        TSR_TRY(widen(c, S_R, e->residual, &st_[S_R], &ew.residual));
    OUT();
    return out_end(c, tsr_cpu_conv2d(b, X, W, B, p, e ? &ew : NULL, Y), y, Y);
}

static int w_linear(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w,
                    const tsr_tensor *bias, const tsr_epilogue *e, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, x, X);
    WEIGHT(w, W, w->ne[1]);
    WIDEN(S_B, bias, B);
    tsr_epilogue ew = e ? *e : (tsr_epilogue){0};
    if (e)
        TSR_TRY(widen(c, S_R, e->residual, &st_[S_R], &ew.residual));
    OUT();
    return out_end(c, tsr_cpu_linear(b, X, W, B, e ? &ew : NULL, Y), y, Y);
}

static int w_matmul(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bm, bool ta, bool tb,
                    float alpha, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, a, A);
    WIDEN(S_W, bm, BM);
    OUT();
    return out_end(c, tsr_cpu_matmul(b, A, BM, ta, tb, alpha, Y), y, Y);
}

static int w_group_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                        const tsr_tensor *beta, int groups, float eps, bool silu, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, x, X);
    WIDEN(S_W, gamma, G);
    WIDEN(S_B, beta, BE);
    OUT();
    return out_end(c, tsr_cpu_group_norm(b, X, G, BE, groups, eps, silu, Y), y, Y);
}

static int w_layer_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                        const tsr_tensor *beta, float eps, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, x, X);
    WIDEN(S_W, gamma, G);
    WIDEN(S_B, beta, BE);
    OUT();
    return out_end(c, tsr_cpu_layer_norm(b, X, G, BE, eps, Y), y, Y);
}

static int w_softmax(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, x, X);
    OUT();
    return out_end(c, tsr_cpu_softmax(b, X, Y), y, Y);
}

static int w_attention(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k,
                       const tsr_tensor *v, const tsr_attention_params *p, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, q, Q);
    WIDEN(S_W, k, K);
    WIDEN(S_B, v, V);
    OUT();
    return out_end(c, tsr_cpu_attention(b, Q, K, V, p, Y), y, Y);
}

static int w_unary(tsr_backend *b, tsr_unary_kind kind, const tsr_tensor *x, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, x, X);
    OUT();
    return out_end(c, tsr_cpu_unary(b, kind, X, Y), y, Y);
}

static int w_geglu(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, x, X);
    OUT();
    return out_end(c, tsr_cpu_geglu(b, X, Y), y, Y);
}

static int w_binary(tsr_backend *b, tsr_binary_kind kind, const tsr_tensor *a,
                    const tsr_tensor *bt, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, a, A);
    WIDEN(S_W, bt, BT);
    OUT();
    return out_end(c, tsr_cpu_binary(b, kind, A, BT, Y), y, Y);
}

static int w_scale(tsr_backend *b, const tsr_tensor *x, float s, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, x, X);
    OUT();
    return out_end(c, tsr_cpu_scale(b, X, s, Y), y, Y);
}

static int w_concat(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bt, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, a, A);
    WIDEN(S_W, bt, BT);
    OUT();
    return out_end(c, tsr_cpu_concat(b, A, BT, Y), y, Y);
}

static int w_upsample(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_X, x, X);
    OUT();
    return out_end(c, tsr_cpu_upsample_nearest(b, X, Y), y, Y);
}

static int w_timestep(tsr_backend *b, const tsr_tensor *t, const tsr_timestep_params *p,
                      tsr_tensor *y)
{
    WIDE_PROLOGUE;
    OUT();
    return out_end(c, tsr_cpu_timestep_embedding(b, t, p, Y), y, Y);
}

static int w_embedding(tsr_backend *b, const tsr_tensor *ids, const tsr_tensor *table,
                       tsr_tensor *y)
{
    WIDE_PROLOGUE;
    WIDEN(S_W, table, T);
    OUT();
    return out_end(c, tsr_cpu_embedding(b, ids, T, Y), y, Y);
}

static bool wide_supports_op(tsr_backend *b, const tsr_op_desc *d, char *why, size_t n)
{
    (void)b;
    for (int i = 0; i < TSR_OP_MAX_SRC; i++) {
        const tsr_tensor *t = d->src[i];
        bool ok = !t || t->dtype == TSR_F32 || t->dtype == TSR_F16 || t->dtype == TSR_BF16 ||
                  (d->op == TSR_OP_EMBEDDING && i == 0 && t->dtype == TSR_I32);
        if (!ok) {
            snprintf(why, n, "input %d is %s", i, tsr_dtype_name(t->dtype));
            return false;
        }
    }
    if (d->dtype != TSR_F32 && d->dtype != TSR_F16 && d->dtype != TSR_BF16) {
        snprintf(why, n, "activations are %s", tsr_dtype_name(d->dtype));
        return false;
    }
    return true;
}

const tsr_backend_iface tsr_cpu_wide_iface = {
    .destroy = tsr_cpu_destroy,
    .alloc = tsr_cpu_alloc,
    .free = tsr_cpu_free,
    .upload = tsr_cpu_copy,
    .download = tsr_cpu_copy,
    .supports_op = wide_supports_op,
    .conv2d = w_conv2d,
    .linear = w_linear,
    .matmul = w_matmul,
    .group_norm = w_group_norm,
    .layer_norm = w_layer_norm,
    .softmax = w_softmax,
    .attention = w_attention,
    .unary = w_unary,
    .geglu = w_geglu,
    .binary = w_binary,
    .scale = w_scale,
    .concat = w_concat,
    .upsample_nearest = w_upsample,
    .timestep_embedding = w_timestep,
    .embedding = w_embedding,
    .convert = tsr_cpu_convert,
};
