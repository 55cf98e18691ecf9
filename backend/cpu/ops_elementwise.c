/*
 * backend/cpu/ops_elementwise.c - activations, broadcasting arithmetic and
 * the data-movement ops (scale, concat, nearest upsample, timestep
 * embedding, embedding lookup).
 *
 * Why: these are memory-bound, so each is one pass over its data split into
 * row ranges over the thread pool, with the innermost (channel) dimension as
 * a contiguous inner loop the compiler vectorises.  Activations that need
 * exp or erf use the AVX2 tsr_exp8 / tsr_erf8 (cpu_simd.h), whose scalar
 * twins finish a row's tail with the same operations.  Broadcasting reduces every b to "inner
 * stride 0 or 1 plus an offset per outer row", which covers a bias [C], a
 * per-image [N,1,1,C] and full shapes with one loop.  The conv/linear
 * epilogue (residual, activation) reuses that loop and the row functions,
 * so a fused op computes each element with the very same operations as the
 * separate add and activation did.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_simd.h"
#include "core/error.h"

#define ELEM_GRAIN (1 << 14)

/* ---- row helpers ---- */

void tsr_cpu_silu_row(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
#ifdef TSR_CPU_AVX2
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 e = tsr_exp8(_mm256_sub_ps(zero, v));
        _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
    }
#endif
    for (; i < n; i++)
        y[i] = x[i] / (1.0f + tsr_exp1(-x[i]));
}

float tsr_cpu_exp_sum_row(float *y, const float *x, float m, int64_t n)
{
    int64_t i = 0;
    float s = 0.0f;
#ifdef TSR_CPU_AVX2
    __m256 vm = _mm256_set1_ps(m), vs = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 e = tsr_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(y + i, e);
        vs = _mm256_add_ps(vs, e);
    }
    s = tsr_hsum8(vs);
#endif
    for (; i < n; i++) {
        y[i] = tsr_exp1(x[i] - m);
        s += y[i];
    }
    return s;
}

static void quick_gelu_row(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
#ifdef TSR_CPU_AVX2
    const __m256 one = _mm256_set1_ps(1.0f), k = _mm256_set1_ps(-1.702f);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 e = tsr_exp8(_mm256_mul_ps(k, v));
        _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
    }
#endif
    for (; i < n; i++)
        y[i] = x[i] / (1.0f + tsr_exp1(-1.702f * x[i]));
}

/* 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); 1 + tanh(u) = 2 - 2/(e^{2u}+1) */
static void gelu_tanh_row(float *y, const float *x, int64_t n)
{
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    int64_t i = 0;
#ifdef TSR_CPU_AVX2
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
    const __m256 vk0 = _mm256_set1_ps(2.0f * k0), vk1 = _mm256_set1_ps(k1);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
        __m256 u2 = _mm256_mul_ps(vk0, _mm256_fmadd_ps(vk1, v3, v));
        __m256 e = tsr_exp8(u2);
        __m256 t = _mm256_sub_ps(two, _mm256_div_ps(two, _mm256_add_ps(e, one)));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v), t));
    }
#endif
    for (; i < n; i++) {
        float v = x[i];
        float e = tsr_exp1(2.0f * k0 * (v + k1 * v * v * v));
        y[i] = 0.5f * v * (2.0f - 2.0f / (e + 1.0f));
    }
}

static void gelu_row(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
#ifdef TSR_CPU_AVX2
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 rs2 = _mm256_set1_ps(0.70710678118654752f);
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 e = tsr_erf8(_mm256_mul_ps(v, rs2));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, e)));
    }
#endif
    for (; i < n; i++)
        y[i] = 0.5f * x[i] * (1.0f + tsr_erf1(x[i] * 0.70710678118654752f));
}

static void act_row(tsr_unary_kind kind, float *y, const float *x, int64_t n)
{
    switch (kind) {
    case TSR_UNARY_SILU: tsr_cpu_silu_row(y, x, n); break;
    case TSR_UNARY_GELU: gelu_row(y, x, n); break;
    case TSR_UNARY_GELU_TANH: gelu_tanh_row(y, x, n); break;
    case TSR_UNARY_QUICK_GELU: quick_gelu_row(y, x, n); break;
    }
}

/* ---- unary ---- */

typedef struct unary_job {
    const float *x;
    float *y;
    tsr_unary_kind kind;
} unary_job;

static void unary_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const unary_job *j = ctx_;
    const float *x = j->x + begin;
    float *y = j->y + begin;
    act_row(j->kind, y, x, end - begin);
}

int tsr_cpu_unary(tsr_backend *b, tsr_unary_kind kind, const tsr_tensor *x, tsr_tensor *y)
{
    unary_job j = {.x = x->data, .y = y->data, .kind = kind};
    tsr_pool_parallel_for(cpu_ctx_of(b)->pool, tsr_tensor_numel(x), ELEM_GRAIN, unary_task, &j);
    return TSR_OK;
}

/* ---- geglu ---- */

typedef struct geglu_job {
    const float *x;
    float *y;
    int64_t d;
} geglu_job;

static void geglu_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const geglu_job *j = ctx_;
    for (int64_t r = begin; r < end; r++) {
        const float *xr = j->x + r * 2 * j->d;
        float *yr = j->y + r * j->d;
        gelu_row(yr, xr + j->d, j->d);
        for (int64_t i = 0; i < j->d; i++)
            yr[i] *= xr[i];
    }
}

int tsr_cpu_geglu(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    geglu_job j = {.x = x->data, .y = y->data, .d = y->ne[y->ndim - 1]};
    tsr_pool_parallel_for(cpu_ctx_of(b)->pool, tsr_cpu_rows(x), tsr_cpu_grain(2 * j.d, ELEM_GRAIN),
                          geglu_task, &j);
    return TSR_OK;
}

/* ---- binary with broadcasting ---- */

typedef struct binary_job {
    const float *a, *b;
    float *y;
    tsr_binary_kind kind;
    int64_t ae[4];      /* a's shape, right-aligned to 4 dims */
    int64_t bstride[4]; /* b's element stride per a-dim (0 = broadcast) */
} binary_job;

static void binary_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const binary_job *j = ctx_;
    int64_t inner = j->ae[3], bs = j->bstride[3];
    for (int64_t r = begin; r < end; r++) {
        int64_t i2 = r % j->ae[2], i1 = (r / j->ae[2]) % j->ae[1], i0 = r / (j->ae[2] * j->ae[1]);
        const float *bp = j->b + i0 * j->bstride[0] + i1 * j->bstride[1] + i2 * j->bstride[2];
        const float *ap = j->a + r * inner;
        float *yp = j->y + r * inner;
        if (bs == 1) {
            if (j->kind == TSR_BINARY_ADD)
                for (int64_t i = 0; i < inner; i++)
                    yp[i] = ap[i] + bp[i];
            else
                for (int64_t i = 0; i < inner; i++)
                    yp[i] = ap[i] * bp[i];
        } else {
            float s = bp[0];
            if (j->kind == TSR_BINARY_ADD)
                for (int64_t i = 0; i < inner; i++)
                    yp[i] = ap[i] + s;
            else
                for (int64_t i = 0; i < inner; i++)
                    yp[i] = ap[i] * s;
        }
    }
}

/* a's shape right-aligned to 4 dims, and b's element stride per a-dim. */
static void bcast_setup(const tsr_tensor *a, const tsr_tensor *bt, int64_t ae[4], int64_t bs[4])
{
    int64_t be[4];
    for (int d = 0; d < 4; d++) {
        int ia = a->ndim - 4 + d, ib = bt->ndim - 4 + d;
        ae[d] = ia >= 0 ? a->ne[ia] : 1;
        be[d] = ib >= 0 ? bt->ne[ib] : 1;
    }
    int64_t stride = 1;
    for (int d = 3; d >= 0; d--) {
        bs[d] = be[d] == 1 ? 0 : stride;
        stride *= be[d];
    }
}

int tsr_cpu_binary(tsr_backend *b, tsr_binary_kind kind, const tsr_tensor *a, const tsr_tensor *bt,
                   tsr_tensor *y)
{
    binary_job j = {.a = a->data, .b = bt->data, .y = y->data, .kind = kind};
    bcast_setup(a, bt, j.ae, j.bstride);
    int64_t rows = j.ae[0] * j.ae[1] * j.ae[2];
    tsr_pool_parallel_for(cpu_ctx_of(b)->pool, rows, tsr_cpu_grain(j.ae[3], ELEM_GRAIN),
                          binary_task, &j);
    return TSR_OK;
}

/* ---- conv / linear epilogue ---- */

typedef struct epi_job {
    binary_job add; /* y += residual, with the residual broadcast */
    int64_t row0;
    bool has_res, has_act;
    tsr_unary_kind act;
} epi_job;

static void epi_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    const epi_job *j = ctx_;
    if (j->has_res)
        binary_task((void *)&j->add, j->row0 + begin, j->row0 + end, worker);
    if (j->has_act) {
        const int64_t inner = j->add.ae[3];
        for (int64_t r = j->row0 + begin; r < j->row0 + end; r++)
            act_row(j->act, j->add.y + r * inner, j->add.y + r * inner, inner);
    }
}

void tsr_cpu_epilogue(cpu_ctx *c, const tsr_tensor *y, int64_t row0, int64_t rows,
                      const tsr_epilogue *e)
{
    epi_job j = {.add = {.a = y->data, .y = y->data, .kind = TSR_BINARY_ADD},
                 .row0 = row0,
                 .has_res = e->residual != NULL,
                 .has_act = e->has_act,
                 .act = e->act};
    if (e->residual) {
        j.add.b = e->residual->data;
        bcast_setup(y, e->residual, j.add.ae, j.add.bstride);
    } else {
        j.add.ae[0] = j.add.ae[1] = j.add.ae[2] = 1;
        j.add.ae[3] = y->ne[y->ndim - 1];
    }
    tsr_pool_parallel_for(c->pool, rows, tsr_cpu_grain(j.add.ae[3], ELEM_GRAIN), epi_task, &j);
}

/* ---- convert between float dtypes ---- */

typedef struct convert_job {
    void *dst;
    const void *src;
    tsr_dtype dd, sd;
} convert_job;

static void convert_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const convert_job *j = ctx_;
    const size_t ds = tsr_dtype_size(j->dd), ss = tsr_dtype_size(j->sd);
    char *d = (char *)j->dst + (size_t)begin * ds;
    const char *s = (const char *)j->src + (size_t)begin * ss;
    size_t n = (size_t)(end - begin);
    if (j->sd == j->dd) {
        memcpy(d, s, n * ds);
    } else if (j->sd == TSR_F32) {
        tsr_convert_from_f32(d, j->dd, (const float *)s, n);
    } else if (j->dd == TSR_F32) {
        tsr_convert_to_f32((float *)d, s, j->sd, n);
    } else { /* 16 bits to 16 bits, through f32 in pieces */
        float tmp[1024];
        for (size_t i = 0; i < n; i += 1024) {
            size_t m = n - i < 1024 ? n - i : 1024;
            tsr_convert_to_f32(tmp, s + i * ss, j->sd, m);
            tsr_convert_from_f32(d + i * ds, j->dd, tmp, m);
        }
    }
}

void tsr_cpu_convert_n(cpu_ctx *c, void *dst, tsr_dtype dd, const void *src, tsr_dtype sd,
                       int64_t n)
{
    convert_job j = {.dst = dst, .src = src, .dd = dd, .sd = sd};
    tsr_pool_parallel_for(c->pool, n, ELEM_GRAIN * 4, convert_task, &j);
}

int tsr_cpu_convert(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    if (x->data == y->data)
        return TSR_OK; /* same dtype, exact alias: nothing to do */
    tsr_cpu_convert_n(cpu_ctx_of(b), y->data, y->dtype, x->data, x->dtype, tsr_tensor_numel(x));
    return TSR_OK;
}

/* ---- scale ---- */

typedef struct scale_job {
    const float *x;
    float *y;
    float s;
} scale_job;

static void scale_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const scale_job *j = ctx_;
    for (int64_t i = begin; i < end; i++)
        j->y[i] = j->x[i] * j->s;
}

int tsr_cpu_scale(tsr_backend *b, const tsr_tensor *x, float s, tsr_tensor *y)
{
    scale_job j = {.x = x->data, .y = y->data, .s = s};
    tsr_pool_parallel_for(cpu_ctx_of(b)->pool, tsr_tensor_numel(x), ELEM_GRAIN, scale_task, &j);
    return TSR_OK;
}

/* ---- concat along the last dim ---- */

typedef struct concat_job {
    const float *a, *b;
    float *y;
    int64_t ca, cb;
} concat_job;

static void concat_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const concat_job *j = ctx_;
    int64_t cy = j->ca + j->cb;
    for (int64_t r = begin; r < end; r++) {
        memcpy(j->y + r * cy, j->a + r * j->ca, (size_t)j->ca * sizeof(float));
        memcpy(j->y + r * cy + j->ca, j->b + r * j->cb, (size_t)j->cb * sizeof(float));
    }
}

int tsr_cpu_concat(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bt, tsr_tensor *y)
{
    concat_job j = {.a = a->data,
                    .b = bt->data,
                    .y = y->data,
                    .ca = a->ne[a->ndim - 1],
                    .cb = bt->ne[bt->ndim - 1]};
    tsr_pool_parallel_for(cpu_ctx_of(b)->pool, tsr_cpu_rows(a),
                          tsr_cpu_grain(j.ca + j.cb, ELEM_GRAIN), concat_task, &j);
    return TSR_OK;
}

/* ---- nearest upsample to y's size, NHWC ---- */

typedef struct up_job {
    const float *x;
    float *y;
    int64_t h, w, c, ho, wo;
} up_job;

/* torch's "nearest": source index floor(dst * in / out), exact in integers */
static void up_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const up_job *j = ctx_;
    const size_t px = (size_t)j->c * sizeof(float);
    const int64_t yrow = j->wo * j->c;
    for (int64_t r = begin; r < end; r++) {
        /* r = n*Ho + oh */
        const int64_t n = r / j->ho, oh = r % j->ho, ih = oh * j->h / j->ho;
        const float *src = j->x + (n * j->h + ih) * j->w * j->c;
        float *dst = j->y + r * yrow;
        for (int64_t ow = 0; ow < j->wo; ow++)
            memcpy(dst + ow * j->c, src + (ow * j->w / j->wo) * j->c, px);
    }
}

int tsr_cpu_upsample_nearest(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    up_job j = {.x = x->data,
                .y = y->data,
                .h = x->ne[1],
                .w = x->ne[2],
                .c = x->ne[3],
                .ho = y->ne[1],
                .wo = y->ne[2]};
    tsr_pool_parallel_for(cpu_ctx_of(b)->pool, x->ne[0] * j.ho,
                          tsr_cpu_grain(j.wo * j.c, ELEM_GRAIN), up_task, &j);
    return TSR_OK;
}

/* ---- timestep embedding (diffusers' get_timestep_embedding) ---- */

int tsr_cpu_timestep_embedding(tsr_backend *b, const tsr_tensor *t, const tsr_timestep_params *p,
                               tsr_tensor *y)
{
    (void)b;
    /* Every step in f32 in the order diffusers evaluates it, so the
     * arguments of sin/cos (t * freq, up to ~1000) round the same way.  The
     * one step that cannot match bit for bit is exp: glibc's expf is
     * correctly rounded, torch's vectorised exp is off by one ulp for some
     * frequencies, which t = 999 amplifies to ~6e-5 in the argument (see
     * tests/ops: this op is compared at 1e-4). */
    int64_t n = t->ne[0], dim = p->dim, half = dim / 2;
    const float *tp = t->data;
    float *yp = y->data;
    const float neg_log = (float)-9.210340371976184; /* -ln(10000) */
    const float denom = (float)((double)half - (double)p->downscale_freq_shift);
    for (int64_t i = 0; i < n; i++) {
        float *row = yp + i * dim;
        for (int64_t k = 0; k < half; k++) {
            float e = (neg_log * (float)k) / denom;
            float arg = tp[i] * expf(e);
            float s = sinf(arg), c = cosf(arg);
            row[p->flip_sin_to_cos ? half + k : k] = s;
            row[p->flip_sin_to_cos ? k : half + k] = c;
        }
        if (dim % 2)
            row[dim - 1] = 0.0f;
    }
    return TSR_OK;
}

/* ---- embedding lookup ---- */

int tsr_cpu_embedding(tsr_backend *b, const tsr_tensor *ids, const tsr_tensor *table, tsr_tensor *y)
{
    (void)b;
    int64_t n = tsr_tensor_numel(ids), v = table->ne[0], d = table->ne[1];
    const int32_t *ip = ids->data;
    for (int64_t i = 0; i < n; i++)
        if (ip[i] < 0 || ip[i] >= v)
            return tsr_errorf(TSR_ERR_RANGE,
                              "embedding: id %d at position %lld is outside [0, %lld)", (int)ip[i],
                              (long long)i, (long long)v);
    const float *tb = table->data;
    float *yp = y->data;
    for (int64_t i = 0; i < n; i++)
        memcpy(yp + i * d, tb + (int64_t)ip[i] * d, (size_t)d * sizeof(float));
    return TSR_OK;
}
