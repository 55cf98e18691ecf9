/*
 * backend/cpu/ops_norm.c - group norm (with optional fused SiLU), layer norm
 * and softmax.
 *
 * Why this way: in NHWC a group's values are strided (C/G channels out of
 * every pixel), so group norm first reduces per *channel* over the pixels
 * (contiguous rows, vectorisable, split over the pool in fixed blocks of
 * positions whose double partial sums are added in block order, so the
 * result never depends on thread scheduling) and only then folds the
 * channels into groups.  Sums are kept in double so E[x^2] - E[x]^2 does not
 * cancel.  The normalisation pass is then one fused multiply-add per element
 * with per-channel scale and shift (gamma*rstd, beta - mean*gamma*rstd),
 * followed by SiLU in the same pass when asked, saving a round trip through
 * memory in every ResNet block.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_simd.h"
#include "core/error.h"

/* ---- group norm ---- */

typedef struct gn_stats_job {
    const float *x; /* all images */
    int64_t c, positions, nblocks;
    double *partial; /* [N][nblocks][2][C]: one row pair per image and block of positions */
} gn_stats_job;

/* Positions per statistics block.  The blocks are fixed by the shape alone,
 * and their partial sums are added in block order, so the statistics (and
 * the image) do not depend on which thread took which block, nor on how
 * many images share the call.  The tasks are (image, block) pairs of the
 * whole batch in one parallel_for: a small latent is one block per image,
 * and one call per image ran each image's statistics on the caller alone
 * while the other threads waited. */
#define GN_BLOCK 256

static void gn_stats_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const gn_stats_job *j = ctx_;
    for (int64_t t = begin; t < end; t++) {
        const int64_t in = t / j->nblocks, b = t % j->nblocks;
        double *sum = j->partial + t * 2 * j->c, *sq = sum + j->c;
        memset(sum, 0, (size_t)(2 * j->c) * sizeof(double));
        const int64_t p1 = (b + 1) * GN_BLOCK < j->positions ? (b + 1) * GN_BLOCK : j->positions;
        for (int64_t p = b * GN_BLOCK; p < p1; p++) {
            const float *row = j->x + (in * j->positions + p) * j->c;
            for (int64_t i = 0; i < j->c; i++) {
                double v = row[i];
                sum[i] += v;
                sq[i] += v * v;
            }
        }
    }
}

typedef struct gn_apply_job {
    const float *x;
    float *y;
    const float *scale, *shift; /* [N][C] */
    int64_t c, positions;
    bool silu;
} gn_apply_job;

static void gn_apply_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const gn_apply_job *j = ctx_;
    for (int64_t r = begin; r < end; r++) {
        int64_t n = r / j->positions;
        const float *a = j->scale + n * j->c, *s = j->shift + n * j->c;
        const float *xr = j->x + r * j->c;
        float *yr = j->y + r * j->c;
        for (int64_t i = 0; i < j->c; i++)
            yr[i] = xr[i] * a[i] + s[i];
        if (j->silu)
            tsr_cpu_silu_row(yr, yr, j->c);
    }
}

int tsr_cpu_group_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                       const tsr_tensor *beta, int groups, float eps, bool silu, tsr_tensor *y)
{
    cpu_ctx *c = cpu_ctx_of(b);
    int64_t n = x->ne[0], ch = x->ne[x->ndim - 1];
    int64_t positions = tsr_tensor_numel(x) / (n * ch);
    int64_t cpg = ch / groups;
    const int64_t nblocks = (positions + GN_BLOCK - 1) / GN_BLOCK;
    /* one shared scratch: [N][nblocks][2][C] doubles of partial sums, then
     * the per-image scale and shift [2][N][C] floats */
    const size_t partial_bytes = (size_t)(n * nblocks * 2 * ch) * sizeof(double);
    double *partial = tsr_cpu_scratch_shared(c, partial_bytes + (size_t)(2 * n * ch) * sizeof(float));
    if (!partial)
        return TSR_ERR_NOMEM;
    float *scale = (float *)((char *)partial + partial_bytes), *shift = scale + n * ch;
    const float *gp = gamma->data, *bp = beta ? beta->data : NULL;
    gn_stats_job sj = {.x = x->data, .c = ch, .positions = positions, .nblocks = nblocks,
                       .partial = partial};
    const int64_t per_block = positions < GN_BLOCK ? positions : GN_BLOCK;
    tsr_pool_parallel_for(c->pool, n * nblocks, tsr_cpu_grain(ch * per_block, 1 << 15),
                          gn_stats_task, &sj);
    for (int64_t in = 0; in < n; in++) {
        double cnt = (double)positions * (double)cpg;
        for (int g = 0; g < groups; g++) {
            double s = 0, q = 0;
            for (int64_t blk = 0; blk < nblocks; blk++) {
                const double *acc = partial + (in * nblocks + blk) * 2 * ch;
                for (int64_t i = g * cpg; i < (g + 1) * cpg; i++) {
                    s += acc[i];
                    q += acc[ch + i];
                }
            }
            double mean = s / cnt;
            double var = q / cnt - mean * mean;
            if (var < 0)
                var = 0;
            double rstd = 1.0 / sqrt(var + (double)eps);
            for (int64_t i = g * cpg; i < (g + 1) * cpg; i++) {
                double a = rstd * gp[i];
                scale[in * ch + i] = (float)a;
                shift[in * ch + i] = (float)((bp ? bp[i] : 0.0) - mean * a);
            }
        }
    }
    gn_apply_job aj = {.x = x->data, .y = y->data, .scale = scale, .shift = shift, .c = ch,
                       .positions = positions, .silu = silu};
    tsr_pool_parallel_for(c->pool, n * positions, tsr_cpu_grain(ch, 1 << 14), gn_apply_task, &aj);
    return TSR_OK;
}

/* ---- layer norm ---- */

typedef struct ln_job {
    const float *x, *gamma, *beta;
    float *y;
    int64_t c;
    float eps;
} ln_job;

static void ln_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const ln_job *j = ctx_;
    for (int64_t r = begin; r < end; r++) {
        const float *xr = j->x + r * j->c;
        float *yr = j->y + r * j->c;
        double s = 0;
        for (int64_t i = 0; i < j->c; i++)
            s += xr[i];
        float mean = (float)(s / (double)j->c);
        double q = 0;
        for (int64_t i = 0; i < j->c; i++) {
            double d = xr[i] - mean;
            q += d * d;
        }
        float rstd = (float)(1.0 / sqrt(q / (double)j->c + (double)j->eps));
        if (j->beta)
            for (int64_t i = 0; i < j->c; i++)
                yr[i] = (xr[i] - mean) * rstd * j->gamma[i] + j->beta[i];
        else
            for (int64_t i = 0; i < j->c; i++)
                yr[i] = (xr[i] - mean) * rstd * j->gamma[i];
    }
}

int tsr_cpu_layer_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                       const tsr_tensor *beta, float eps, tsr_tensor *y)
{
    cpu_ctx *c = cpu_ctx_of(b);
    ln_job j = {.x = x->data, .gamma = gamma->data, .beta = beta ? beta->data : NULL,
                .y = y->data, .c = x->ne[x->ndim - 1], .eps = eps};
    tsr_pool_parallel_for(c->pool, tsr_cpu_rows(x), tsr_cpu_grain(j.c, 1 << 14), ln_task, &j);
    return TSR_OK;
}

/* ---- softmax ---- */

typedef struct sm_job {
    const float *x;
    float *y;
    int64_t c;
} sm_job;

float tsr_cpu_row_max(const float *x, int64_t n)
{
    float m = -INFINITY;
    int64_t i = 0;
#ifdef TSR_CPU_AVX2
    if (n >= 8) {
        __m256 vm = _mm256_loadu_ps(x);
        for (i = 8; i + 8 <= n; i += 8)
            vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
        m = tsr_hmax8(vm);
    }
#endif
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static void sm_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const sm_job *j = ctx_;
    for (int64_t r = begin; r < end; r++) {
        const float *xr = j->x + r * j->c;
        float *yr = j->y + r * j->c;
        float m = tsr_cpu_row_max(xr, j->c);
        float s = tsr_cpu_exp_sum_row(yr, xr, m, j->c);
        float inv = 1.0f / s;
        for (int64_t i = 0; i < j->c; i++)
            yr[i] *= inv;
    }
}

int tsr_cpu_softmax(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    cpu_ctx *c = cpu_ctx_of(b);
    sm_job j = {.x = x->data, .y = y->data, .c = x->ne[x->ndim - 1]};
    tsr_pool_parallel_for(c->pool, tsr_cpu_rows(x), tsr_cpu_grain(j.c, 1 << 14), sm_task, &j);
    return TSR_OK;
}
