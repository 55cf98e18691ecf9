/*
 * backend/cuda/cuda_math.h - the per-element arithmetic of the CUDA kernels,
 * as inline functions that compile both as CUDA device code and as plain C.
 *
 * Why: CI has no GPU, so the kernels themselves cannot run there; but what
 * decides whether their results match the CPU backend is a handful of
 * formulas (f16/bf16 rounding, the activations, the online-softmax update,
 * the broadcasting index, the merge of group-norm partial statistics).  They
 * live here, once, marked TSR_HD (__host__ __device__ under nvcc, nothing
 * under a C compiler), and tests/gpu/test_cuda_math.c checks them against
 * the CPU backend on the build machine.  The kernels in ops_*.cu call these
 * very functions, so a host test covers the code that runs on the GPU.
 *
 * Everything here is pure: no CUDA headers, no globals, C17 and C++17.
 */
#ifndef TSR_CUDA_MATH_H
#define TSR_CUDA_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define TSR_HD __host__ __device__ __forceinline__
#else
#define TSR_HD static inline
#endif

/* Storage dtypes, as core/tensor.h numbers them (TSR_F32 = 0, TSR_F16 = 1,
 * TSR_BF16 = 2, TSR_I32 = 3): kernels take the dtype as an int so one
 * kernel serves every storage type. */
enum { TSR_CU_F32 = 0, TSR_CU_F16 = 1, TSR_CU_BF16 = 2, TSR_CU_I32 = 3 };

/* ---- bit casts ---- */

TSR_HD uint32_t tsr_cu_f32_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

TSR_HD float tsr_cu_bits_f32(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* ---- f16 / bf16 (round to nearest even, as PyTorch and core/tensor.c) ---- */

TSR_HD float tsr_cu_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (e == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in f32 */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (e == 31)
        return tsr_cu_bits_f32(sign | 0x7f800000u | (mant << 13));
    return tsr_cu_bits_f32(sign | ((e + 112u) << 23) | (mant << 13));
}

TSR_HD uint16_t tsr_cu_f32_to_f16(float f)
{
    uint32_t u = tsr_cu_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or nan (nan stays quiet) */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    if (a >= 0x477ff000u) /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        /* below the smallest normal: adding 0.5 lets the f32 adder round the
         * subnormal mantissa to nearest even */
        float v = tsr_cu_bits_f32(a) + 0.5f;
        return (uint16_t)(sign | (tsr_cu_f32_bits(v) - 0x3f000000u));
    }
    uint32_t odd = (a >> 13) & 1u;
    a += 0xc8000fffu + odd; /* rebias the exponent, round to nearest even */
    return (uint16_t)(sign | (a >> 13));
}

TSR_HD float tsr_cu_bf16_to_f32(uint16_t h) { return tsr_cu_bits_f32((uint32_t)h << 16); }

TSR_HD uint16_t tsr_cu_f32_to_bf16(float f)
{
    uint32_t u = tsr_cu_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet nan */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Element i of a float tensor of dtype dt, widened to f32. */
TSR_HD float tsr_cu_load(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case TSR_CU_F16: return tsr_cu_f16_to_f32(((const uint16_t *)p)[i]);
    case TSR_CU_BF16: return tsr_cu_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* Store v as element i of a float tensor of dtype dt (rounded to nearest even). */
TSR_HD void tsr_cu_store(void *p, int dt, int64_t i, float v)
{
    switch (dt) {
    case TSR_CU_F16: ((uint16_t *)p)[i] = tsr_cu_f32_to_f16(v); break;
    case TSR_CU_BF16: ((uint16_t *)p)[i] = tsr_cu_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* ---- activations (backend.h: silu, gelu (erf), gelu_tanh, quick_gelu) ---- */

enum { TSR_CU_SILU = 0, TSR_CU_GELU = 1, TSR_CU_GELU_TANH = 2, TSR_CU_QUICK_GELU = 3 };

TSR_HD float tsr_cu_silu(float x) { return x / (1.0f + expf(-x)); }

TSR_HD float tsr_cu_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

/* 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written as the
 * CPU backend writes it: 1 + tanh(u) = 2 - 2 / (e^{2u} + 1), which is exact
 * at both tails (no inf/inf). */
TSR_HD float tsr_cu_gelu_tanh(float x)
{
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    float e = expf(2.0f * k0 * (x + k1 * x * x * x));
    return 0.5f * x * (2.0f - 2.0f / (e + 1.0f));
}

TSR_HD float tsr_cu_quick_gelu(float x) { return x / (1.0f + expf(-1.702f * x)); }

TSR_HD float tsr_cu_act(int kind, float x)
{
    switch (kind) {
    case TSR_CU_SILU: return tsr_cu_silu(x);
    case TSR_CU_GELU: return tsr_cu_gelu(x);
    case TSR_CU_GELU_TANH: return tsr_cu_gelu_tanh(x);
    default: return tsr_cu_quick_gelu(x);
    }
}

/* ---- broadcasting (tsr_binary's b, the epilogue's residual) ----
 * b is aligned to a's innermost dims (numpy); a dim of b that is 1 has
 * stride 0.  tsr_cu_bcast_strides fills bs[4] for a's 4 (padded) dims;
 * tsr_cu_bcast_index maps a's linear index to b's. */

TSR_HD void tsr_cu_bcast_strides(const int64_t *a_ne, int a_ndim, const int64_t *b_ne,
                                 int b_ndim, int64_t bs[4])
{
    /* a's dims right-aligned into 4 slots: slot 4 - a_ndim + k holds a_ne[k] */
    int64_t stride = 1;
    for (int s = 3; s >= 0; s--) {
        int kb = b_ndim - (4 - s); /* b's dim in slot s, if any */
        int64_t nb = kb >= 0 ? b_ne[kb] : 1;
        bs[s] = nb == 1 ? 0 : stride;
        stride *= nb;
    }
    (void)a_ne;
    (void)a_ndim;
}

/* a's shape right-aligned into 4 slots (leading 1s). */
TSR_HD void tsr_cu_shape4(const int64_t *ne, int ndim, int64_t out[4])
{
    for (int s = 0; s < 4; s++) {
        int k = ndim - (4 - s);
        out[s] = k >= 0 ? ne[k] : 1;
    }
}

TSR_HD int64_t tsr_cu_bcast_index(int64_t i, const int64_t a4[4], const int64_t bs[4])
{
    int64_t j = 0;
    for (int s = 3; s >= 0; s--) {
        int64_t c = i % a4[s];
        i /= a4[s];
        j += c * bs[s];
    }
    return j;
}

/* ---- online softmax (attention: one running max m and sum l per row) ----
 * Folding a block whose max is tile_max: the new max, and the factor by
 * which the previous sum and output accumulator are rescaled.  -inf (every
 * key so far masked) never produces a NaN: exp(-inf - -inf) is avoided. */

TSR_HD float tsr_cu_osm_new_max(float m_old, float tile_max)
{
    return tile_max > m_old ? tile_max : m_old;
}

TSR_HD float tsr_cu_osm_rescale(float m_old, float m_new)
{
    if (m_old == -INFINITY)
        return 0.0f; /* nothing accumulated yet */
    return expf(m_old - m_new);
}

/* exp(s - m) for a score, 0 for a masked one (or while m is still -inf). */
TSR_HD float tsr_cu_osm_weight(float s, float m)
{
    if (s == -INFINITY || m == -INFINITY)
        return 0.0f;
    return expf(s - m);
}

/* Whether key j is visible to query i under the causal mask of backend.h:
 * j <= i + (Lk - Lq). */
TSR_HD int tsr_cu_causal_visible(int64_t i, int64_t j, int64_t lq, int64_t lk)
{
    return j <= i + (lk - lq);
}

/* How many keys (a prefix 0..n-1 of the Lk) query i sees under that mask:
 * the loop bound of the kernels that walk keys in order. */
TSR_HD int64_t tsr_cu_causal_keys(int64_t i, int64_t lq, int64_t lk)
{
    const int64_t n = i + (lk - lq) + 1;
    return n < 0 ? 0 : n < lk ? n : lk;
}

/* ---- group/layer-norm statistics: Welford per thread, Chan's merge ----
 * Each thread folds its elements one by one (tsr_cu_stats_add); threads,
 * then warps, merge pairwise (tsr_cu_stats_merge).  Stable in f32 where
 * E[x^2] - E[x]^2 is not (the CPU keeps doubles for that reason). */

typedef struct tsr_cu_stats {
    float n, mean, m2;
} tsr_cu_stats;

TSR_HD void tsr_cu_stats_add(tsr_cu_stats *s, float x)
{
    s->n += 1.0f;
    float d = x - s->mean;
    s->mean += d / s->n;
    s->m2 += d * (x - s->mean);
}

TSR_HD tsr_cu_stats tsr_cu_stats_merge(tsr_cu_stats a, tsr_cu_stats b)
{
    tsr_cu_stats r;
    r.n = a.n + b.n;
    if (r.n == 0.0f) {
        r.mean = 0.0f;
        r.m2 = 0.0f;
        return r;
    }
    float d = b.mean - a.mean, fb = b.n / r.n;
    r.mean = a.mean + d * fb;
    r.m2 = a.m2 + b.m2 + d * d * a.n * fb;
    return r;
}

/* 1/sqrt(var + eps) from merged statistics (population variance, as torch). */
TSR_HD float tsr_cu_stats_rstd(tsr_cu_stats s, float eps)
{
    float var = s.n > 0.0f ? s.m2 / s.n : 0.0f;
    if (var < 0.0f)
        var = 0.0f;
    return 1.0f / sqrtf(var + eps);
}

/* Element `k` of the (n, group) slice of an NHWC group norm: the offset into
 * image n's [positions, C] block of the k-th value of group g, walking
 * positions outer, the group's channels inner (so neighbouring threads read
 * neighbouring channels). */
TSR_HD int64_t tsr_cu_gn_offset(int64_t k, int64_t c, int64_t cpg, int64_t g)
{
    return (k / cpg) * c + g * cpg + k % cpg;
}

/* ---- timestep embedding (diffusers' get_timestep_embedding) ----
 * Value k of the `half` frequencies for timestep t, in the order and
 * precision of the CPU backend. */
TSR_HD float tsr_cu_timestep_arg(float t, int64_t k, int64_t nfreq, float shift)
{
    const float neg_log = (float)-9.210340371976184; /* -ln(10000) */
    const float denom = (float)((double)nfreq - (double)shift);
    float e = (neg_log * (float)k) / denom;
    return t * expf(e);
}

#endif
