/*
 * backend/cpu/ops_attention.c - multi-head scaled dot-product attention as
 * one fused, flash-style kernel, chosen at run time for the CPU's ISA.
 *
 * Why this way: a 64x64 latent gives Lq = Lk = 4096, and a full score
 * matrix per head would be 64 MiB.  The earlier version chunked the queries
 * and ran two OpenBLAS GEMMs per chunk (S = Q K^T, then P V) around a
 * softmax; perf showed 31% of its time in OpenBLAS re-packing K and V for
 * every chunk and the scores for P V, 7% zeroing, and with head sizes of 40
 * the GEMMs themselves are too thin to run well.  Now:
 *
 *   1. K and V of each (batch, head) are packed once into the shared
 *      scratch, in parallel over (batch, 16 keys) with all heads read in
 *      one pass (attn_flash.h: K as chunks of 16 keys [d][16], V as tiles
 *      of 16 columns, each tile's keys contiguous).  Extra memory: about
 *      the size of K and V, independent of Lq, never Lq * Lk.
 *   2. Tasks of (batch, head, block of qb queries) run the kernel
 *      (attn_flash_impl.h): scores for 6 rows x 16 keys at a time in
 *      registers, an online softmax, P V accumulated into a [qb][dp] block
 *      in the worker's scratch, y = O / l per group of rows after its last
 *      key block.  Nothing of size Lk is written; the K/V block of kb keys
 *      is reused by all qb rows while it sits in L2.
 *
 * Blocking: qb = 128 query rows (fewer for a short Lq, and halved down to
 * 32 while there are fewer than 4 tasks per thread), so the O block of a
 * 512-wide head (256 KiB) and a K/V block share L2, and each K/V byte is
 * fetched from L3 once per 128 queries (64 rows cost the VAE's head ~9%
 * more time); kb keys so that a K block plus a V block is ~128 KiB (256
 * keys at head size 40, 32 at 512; 64 KiB was slower).  Measured in
 * docs/perf.md, "Attention kernel".
 *
 * Kernels: AVX-512, AVX2 or plain C, by tsr_cpu_isa() (cpu_isa.h; cap with
 * TESSERA_CPU_ISA), each compiled for its ISA alone.  Batch independence
 * holds by construction: a task never mixes images, and a row's arithmetic
 * does not depend on the other rows computed with it.  No BLAS is called,
 * so OpenBLAS's thread count is left alone.
 *
 * Causal mask (bottom-right aligned, see backend.h): query i sees keys
 * j <= i + (Lk - Lq).  A query that sees no key at all gets a zero row.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "backend/cpu/attn_flash.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_isa.h"
#include "core/error.h"
#include "core/log.h"

#define ATTN_QB 128               /* query rows per task, at most */
#define ATTN_QB_MIN 32            /* ... and at least, when halving for more tasks */
#define ATTN_KV_BYTES (128 << 10) /* target size of one K block + V block */
#define ATTN_KB_MAX 256

typedef struct attn_run {
    attn_flash_job job;
    const float *k, *v; /* unpacked [B, lk, heads*d], borrowed */
    float *kp, *vp;     /* packed, in the shared scratch */
    attn_flash_fn fn;
    cpu_ctx *ctx;
} attn_run;

/* The kernel for `isa`, capped at what the CPU runs. */
static attn_flash_fn kernel_for(tsr_cpu_isa_level isa)
{
    if (isa > tsr_cpu_isa())
        isa = tsr_cpu_isa();
#if defined(__x86_64__)
    if (isa == TSR_CPU_ISA_AVX512)
        return tsr_cpu_attn_flash_avx512;
    if (isa == TSR_CPU_ISA_AVX2)
        return tsr_cpu_attn_flash_avx2;
#endif
    return tsr_cpu_attn_flash_scalar;
}

static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_kernel(void)
{
    TSR_DEBUG("cpu attention: %s flash kernel", tsr_cpu_isa_name(tsr_cpu_isa()));
}

/* Pack K and V (layout: attn_flash.h) for items [begin, end) of (batch,
 * chunk of 16 keys), every head at once, so the source rows [key][heads*d]
 * are read front to back.  Packing is cheap in instructions but not in
 * cache misses when K and V come cold from memory: perf puts it at ~20% of
 * the 256x256 D=160 case (Lq = 256 reuses each packed key only 256 times),
 * under 1% at Lq = 4096. */
static void pack_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    const attn_run *a = ctx_;
    const attn_flash_job *j = &a->job;
    const int64_t d = j->d, dp = j->dp, hd = j->heads * d, lk = j->lk, lkp = j->lkp;
    const int64_t nch = lkp / ATTN_KCHUNK;
    for (int64_t t = begin; t < end; t++) {
        const int64_t bi = t / nch, k0 = (t % nch) * ATTN_KCHUNK;
        const int64_t nk = lk - k0 < ATTN_KCHUNK ? lk - k0 : ATTN_KCHUNK; /* >= 1 */
        const float *k = a->k + (bi * lk + k0) * hd, *v = a->v + (bi * lk + k0) * hd;
        for (int64_t h = 0; h < j->heads; h++) {
            const int64_t bh = bi * j->heads + h;
            float *chunk = a->kp + bh * lkp * d + k0 * d;
            for (int64_t lane = 0; lane < nk; lane++) {
                const float *src = k + lane * hd + h * d;
                for (int64_t c = 0; c < d; c++)
                    chunk[c * ATTN_KCHUNK + lane] = src[c];
            }
            for (int64_t lane = nk; lane < ATTN_KCHUNK; lane++)
                for (int64_t c = 0; c < d; c++)
                    chunk[c * ATTN_KCHUNK + lane] = 0.0f;
            for (int64_t ct = 0; ct < dp; ct += 16) {
                const int64_t w = dp - ct < 16 ? dp - ct : 16; /* 16, or 8 for the last */
                const int64_t nc = d - ct < w ? d - ct : w;    /* real columns */
                float *tile = a->vp + bh * lkp * dp + ct * lkp + k0 * w;
                for (int64_t key = 0; key < nk; key++) {
                    const float *src = v + key * hd + h * d + ct;
                    float *dst = tile + key * w;
                    for (int64_t c = 0; c < nc; c++)
                        dst[c] = src[c];
                    for (int64_t c = nc; c < w; c++)
                        dst[c] = 0.0f;
                }
                memset(tile + nk * w, 0, (size_t)((ATTN_KCHUNK - nk) * w) * sizeof(float));
            }
        }
    }
}

static void flash_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    const attn_run *a = ctx_;
    float *scratch = a->ctx->worker[worker].ptr;
    for (int64_t t = begin; t < end; t++)
        a->fn(&a->job, t, scratch);
}

int tsr_cpu_attention(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k, const tsr_tensor *v,
                      const tsr_attention_params *p, tsr_tensor *y)
{
    pthread_once(&log_once, log_kernel);
    return tsr_cpu_attention_isa(b, q, k, v, p, y, tsr_cpu_isa());
}

int tsr_cpu_attention_isa(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k,
                          const tsr_tensor *v, const tsr_attention_params *p, tsr_tensor *y,
                          tsr_cpu_isa_level isa)
{
    cpu_ctx *c = cpu_ctx_of(b);
    attn_run a = {.k = k->data, .v = v->data, .fn = kernel_for(isa), .ctx = c};
    attn_flash_job *j = &a.job;
    *j = (attn_flash_job){.q = q->data,
                          .y = y->data,
                          .lq = q->ne[1],
                          .lk = k->ne[1],
                          .heads = p->heads,
                          .causal = p->causal};
    j->d = q->ne[2] / p->heads;
    j->dp = (j->d + 7) / 8 * 8;
    j->lkp = (j->lk + ATTN_KCHUNK - 1) / ATTN_KCHUNK * ATTN_KCHUNK;
    j->scale = (p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)j->d)) * ATTN_LOG2E;
    const int64_t bh = q->ne[0] * j->heads; /* every ne >= 1 (tsr_attention checks) */
    /* ~4 tasks per thread at least, for balance (rows do not care: see above) */
    j->qb = j->lq < ATTN_QB ? j->lq : ATTN_QB;
    while (j->qb > ATTN_QB_MIN && bh * ((j->lq + j->qb - 1) / j->qb) < 4 * (int64_t)c->n_threads)
        j->qb /= 2;
    j->nqb = (j->lq + j->qb - 1) / j->qb;
    int64_t kb = ATTN_KV_BYTES / (2 * j->dp * (int64_t)sizeof(float));
    kb = kb / ATTN_KCHUNK * ATTN_KCHUNK;
    kb = kb < ATTN_KCHUNK ? ATTN_KCHUNK : (kb > ATTN_KB_MAX ? ATTN_KB_MAX : kb);
    j->kb = kb < j->lkp ? kb : j->lkp;
    const size_t packed = (size_t)(bh * j->lkp * (j->d + j->dp)) * sizeof(float);
    float *shared = tsr_cpu_scratch_shared(c, packed);
    if (!shared)
        return TSR_ERR_NOMEM;
    a.kp = shared;
    a.vp = shared + bh * j->lkp * j->d;
    j->kp = a.kp;
    j->vp = a.vp;
    int rc =
        tsr_cpu_scratch_workers_reserve(c, (size_t)attn_flash_scratch_floats(j) * sizeof(float));
    if (rc < 0)
        return rc;
    tsr_pool_parallel_for(c->pool, q->ne[0] * (j->lkp / ATTN_KCHUNK), 1, pack_task, &a);
    tsr_pool_parallel_for(c->pool, bh * j->nqb, 1, flash_task, &a);
    return TSR_OK;
}
