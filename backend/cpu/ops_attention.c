/*
 * backend/cpu/ops_attention.c - multi-head scaled dot-product attention,
 * query-chunked.
 *
 * Why this way: a 64x64 latent gives Lq = Lk = 4096, and a full score matrix
 * per head would be 64 MiB (x heads x batch).  Instead the work is split
 * into tasks of (batch, head, block of queries); a task computes its block's
 * scores S = scale * Q_blk K^T into a per-worker buffer sized to stay in L2,
 * takes the row softmax in place (vector exp), and multiplies P V straight
 * into y.  Q, K, V and y stay in their [B, L, H*D] layout: the head's slice
 * is addressed with the leading dimension H*D, so no transposes or copies.
 * Tasks run on the pool with OpenBLAS set to one thread (many independent
 * small GEMMs scale better than one GEMM threaded at a time).  Extra memory
 * is n_threads * block * Lk floats, independent of Lq.
 *
 * Causal mask (bottom-right aligned, see backend.h): query i sees keys
 * j <= i + (Lk - Lq).  A query that sees no key at all gets a zero row.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_simd.h"
#include "core/error.h"

#define ATTN_SCORE_BYTES ((size_t)1 << 20) /* per-worker score block target */
#define ATTN_MIN_ROWS 16
#define ATTN_MAX_ROWS 256

typedef struct attn_job {
    const float *q, *k, *v;
    float *y;
    int64_t lq, lk, heads, d, block, nblocks;
    float scale;
    bool causal;
    cpu_ctx *ctx;
} attn_job;

/* Number of keys query row `i` may see. */
static int64_t visible(const attn_job *j, int64_t i)
{
    if (!j->causal)
        return j->lk;
    int64_t v = i + (j->lk - j->lq) + 1;
    return v < 0 ? 0 : (v > j->lk ? j->lk : v);
}

static void attn_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    const attn_job *j = ctx_;
    int64_t hd = j->heads * j->d;
    /* reserved: block * lk floats of scores, then block inverse row sums */
    float *s = j->ctx->worker[worker].ptr;
    float *inv = s + j->block * j->lk;
    for (int64_t t = begin; t < end; t++) {
        int64_t blk = t % j->nblocks, bh = t / j->nblocks;
        int64_t h = bh % j->heads, bi = bh / j->heads;
        int64_t q0 = blk * j->block;
        int64_t rows = j->lq - q0 < j->block ? j->lq - q0 : j->block;
        int64_t kmax = visible(j, q0 + rows - 1);
        const float *qp = j->q + (bi * j->lq + q0) * hd + h * j->d;
        const float *kp = j->k + bi * j->lk * hd + h * j->d;
        const float *vp = j->v + bi * j->lk * hd + h * j->d;
        float *yp = j->y + (bi * j->lq + q0) * hd + h * j->d;
        if (kmax <= 0) {
            for (int64_t r = 0; r < rows; r++)
                memset(yp + r * hd, 0, (size_t)j->d * sizeof(float));
            continue;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)kmax, (int)j->d,
                    j->scale, qp, (int)hd, kp, (int)hd, 0.0f, s, (int)kmax);
        for (int64_t r = 0; r < rows; r++) {
            float *sr = s + r * kmax;
            int64_t nv = visible(j, q0 + r);
            if (nv <= 0) {
                memset(sr, 0, (size_t)kmax * sizeof(float));
                inv[r] = 0.0f;
                continue;
            }
            inv[r] = 1.0f / tsr_cpu_exp_sum_row(sr, sr, tsr_cpu_row_max(sr, nv), nv);
            if (nv < kmax)
                memset(sr + nv, 0, (size_t)(kmax - nv) * sizeof(float));
        }
        /* unnormalised P V, then one scale per output row (D, not Lk, values) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)j->d, (int)kmax,
                    1.0f, s, (int)kmax, vp, (int)hd, 0.0f, yp, (int)hd);
        for (int64_t r = 0; r < rows; r++) {
            float *yr = yp + r * hd;
            for (int64_t c = 0; c < j->d; c++)
                yr[c] *= inv[r];
        }
    }
}

int tsr_cpu_attention(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k,
                      const tsr_tensor *v, const tsr_attention_params *p, tsr_tensor *y)
{
    cpu_ctx *c = cpu_ctx_of(b);
    attn_job j = {.q = q->data, .k = k->data, .v = v->data, .y = y->data, .lq = q->ne[1],
                  .lk = k->ne[1], .heads = p->heads, .causal = p->causal, .ctx = c};
    j.d = q->ne[2] / p->heads;
    j.scale = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)j.d);
    int64_t rows = (int64_t)(ATTN_SCORE_BYTES / ((size_t)j.lk * sizeof(float)));
    if (rows < ATTN_MIN_ROWS)
        rows = ATTN_MIN_ROWS;
    if (rows > ATTN_MAX_ROWS)
        rows = ATTN_MAX_ROWS;
    if (rows > j.lq)
        rows = j.lq;
    j.block = rows;
    j.nblocks = (j.lq + rows - 1) / rows;
    int rc = tsr_cpu_scratch_workers_reserve(c, (size_t)(rows * j.lk + rows) * sizeof(float));
    if (rc < 0)
        return rc;
    int64_t tasks = q->ne[0] * j.heads * j.nblocks;
    const int blas = tsr_cpu_blas_single_begin();
    tsr_pool_parallel_for(c->pool, tasks, 1, attn_task, &j);
    tsr_cpu_blas_single_end(blas);
    return TSR_OK;
}
