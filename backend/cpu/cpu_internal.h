/*
 * backend/cpu/cpu_internal.h - what the CPU backend's op files share: the
 * context (thread pool, scratch), the op entry points registered in
 * cpu_backend.c's table, and small helpers.
 *
 * Why a context-held scratch: a denoising loop runs the same ops thousands
 * of times, so the buffers an op needs beyond its output (im2col columns,
 * attention score rows, per-thread partial sums) live in the context and only
 * ever grow.  After the first step nothing is allocated.  There is one shared
 * buffer (filled by many threads, used by one GEMM) and one buffer per pool
 * worker (private to that worker inside a parallel_for).  Ops run one at a
 * time on a backend; a backend is not used by two threads at once.
 */
#ifndef TSR_BACKEND_CPU_INTERNAL_H
#define TSR_BACKEND_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_isa.h"
#include "core/pool.h"

typedef struct cpu_buf {
    void *ptr; /* owned; 64-byte aligned */
    size_t cap;
} cpu_buf;

#define CPU_WIDE_SLOTS 6

typedef struct cpu_ctx {
    tsr_pool *pool; /* owned */
    int n_threads;
    cpu_buf shared;   /* one op-wide buffer (im2col columns) */
    cpu_buf *worker;  /* owned; n_threads per-worker buffers */
    /* storage variants (cpu_wide.c): f32 copies of an op's f16/bf16 tensors */
    tsr_dtype storage;
    cpu_buf wide[CPU_WIDE_SLOTS];
    /* the "cpu-bf16gemm" variant: bf16 weights, f32 activations; conv and
     * linear with bf16 weights run the GEMM on bf16 pairs (gemm.h) from a
     * bf16 copy of x kept here */
    bool bf16gemm;
    cpu_buf pairs;
} cpu_ctx;

static inline cpu_ctx *cpu_ctx_of(tsr_backend *b) { return (cpu_ctx *)b->ctx; }

/* Grow a buffer to at least `bytes` (contents not kept); NULL when out of
 * memory (nothing raised). */
void *tsr_cpu_buf_grow(cpu_buf *b, size_t bytes);

/* Grow-only scratch.  Returns NULL after raising TSR_ERR_NOMEM.  The
 * returned memory is borrowed from the context until the next call that
 * grows the same buffer. */
void *tsr_cpu_scratch_shared(cpu_ctx *c, size_t bytes);
void *tsr_cpu_scratch_worker(cpu_ctx *c, int worker, size_t bytes);
/* Ensure every worker buffer holds `bytes` (call before a parallel_for, so
 * workers never allocate). */
int tsr_cpu_scratch_workers_reserve(cpu_ctx *c, size_t bytes);

/* The f32 table and the memory functions the storage variants share. */
extern const tsr_backend_iface tsr_cpu_iface;
extern const tsr_backend_iface tsr_cpu_wide_iface; /* cpu_wide.c */
void tsr_cpu_destroy(tsr_backend *b);
void *tsr_cpu_alloc(tsr_backend *b, size_t bytes);
void tsr_cpu_free(tsr_backend *b, void *p);
int tsr_cpu_copy(tsr_backend *b, void *dst, const void *src, size_t bytes);

/* ops (registered in cpu_backend.c) */
int tsr_cpu_conv2d(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                   const tsr_conv2d_params *p, const tsr_epilogue *e, tsr_tensor *y);
int tsr_cpu_linear(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                   const tsr_epilogue *e, tsr_tensor *y);
int tsr_cpu_matmul(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bm, bool trans_a,
                   bool trans_b, float alpha, tsr_tensor *y);
int tsr_cpu_group_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                       const tsr_tensor *beta, int groups, float eps, bool silu, tsr_tensor *y);
int tsr_cpu_layer_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                       const tsr_tensor *beta, float eps, tsr_tensor *y);
int tsr_cpu_softmax(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
int tsr_cpu_attention(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k,
                      const tsr_tensor *v, const tsr_attention_params *p, tsr_tensor *y);
/* tsr_cpu_attention with the kernel of a given ISA level (capped at
 * tsr_cpu_isa()), for tests that compare the kernels. */
int tsr_cpu_attention_isa(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k,
                          const tsr_tensor *v, const tsr_attention_params *p, tsr_tensor *y,
                          tsr_cpu_isa_level isa);
int tsr_cpu_unary(tsr_backend *b, tsr_unary_kind kind, const tsr_tensor *x, tsr_tensor *y);
int tsr_cpu_geglu(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
int tsr_cpu_binary(tsr_backend *b, tsr_binary_kind kind, const tsr_tensor *a, const tsr_tensor *bt,
                   tsr_tensor *y);
int tsr_cpu_scale(tsr_backend *b, const tsr_tensor *x, float s, tsr_tensor *y);
int tsr_cpu_concat(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bt, tsr_tensor *y);
int tsr_cpu_upsample_nearest(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
int tsr_cpu_timestep_embedding(tsr_backend *b, const tsr_tensor *t, const tsr_timestep_params *p,
                               tsr_tensor *y);
int tsr_cpu_embedding(tsr_backend *b, const tsr_tensor *ids, const tsr_tensor *table,
                      tsr_tensor *y);
int tsr_cpu_convert(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);

/* The conv/linear epilogue (ops_elementwise.c) on rows [row0, row0 + rows)
 * of y viewed as [rows of y, last dim]: y += residual (broadcast), then
 * the activation, as the separate tsr_binary and tsr_unary would. */
void tsr_cpu_epilogue(cpu_ctx *c, const tsr_tensor *y, int64_t row0, int64_t rows,
                      const tsr_epilogue *e);
static inline bool tsr_cpu_epilogue_any(const tsr_epilogue *e)
{
    return e && (e->residual || e->has_act);
}
/* x[0..n) rounded to bf16 (to nearest even) in the context's pairs
 * buffer, viewed as the 32-bit units of tsr_gemm.pairs; NULL after raising
 * TSR_ERR_NOMEM (cpu_wide.c). */
const float *tsr_cpu_bf16_pairs(cpu_ctx *c, const float *x, int64_t n);
/* Convert n elements between float dtypes on the pool. */
void tsr_cpu_convert_n(cpu_ctx *c, void *dst, tsr_dtype dd, const void *src, tsr_dtype sd,
                       int64_t n);

/* Shared row helpers (ops_elementwise.c), in place allowed (y == x). */
void tsr_cpu_silu_row(float *y, const float *x, int64_t n);
/* max of x[0..n) (n >= 1; ops_norm.c). */
float tsr_cpu_row_max(const float *x, int64_t n);
/* y[i] = exp(x[i] - m); returns the sum. */
float tsr_cpu_exp_sum_row(float *y, const float *x, float m, int64_t n);

/* Rows of the innermost dim: numel / ne[ndim-1]. */
static inline int64_t tsr_cpu_rows(const tsr_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i + 1 < t->ndim; i++)
        n *= t->ne[i];
    return n;
}

/* y[r, :] = bias for each of `rows` rows of n (the bias a conv or linear
 * GEMM then accumulates onto). */
static inline void tsr_cpu_fill_rows(float *y, const float *bias, int64_t rows, int64_t n)
{
    for (int64_t r = 0; r < rows; r++)
        memcpy(y + r * n, bias, (size_t)n * sizeof(float));
}

/* Grain so that each pool task handles at least ~`work` elements. */
static inline int64_t tsr_cpu_grain(int64_t row_len, int64_t work)
{
    if (row_len < 1)
        row_len = 1;
    int64_t g = work / row_len;
    return g < 1 ? 1 : g;
}

#endif
