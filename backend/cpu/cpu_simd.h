/*
 * backend/cpu/cpu_simd.h - vector exp for the CPU backend's hot loops.
 *
 * Why: softmax inside attention evaluates exp for every query-key pair
 * (268 M per SD 1.5 self-attention at 512x512), and a libm call per element
 * would cost more than both GEMMs around it.  tsr_exp8 evaluates eight
 * exps at once with AVX2+FMA: a Cody-Waite range reduction x = n ln2 + r and
 * a degree-6 polynomial for e^r (Cephes' expf coefficients, relative error
 * about 1e-7), scaled by 2^n through the exponent bits.  Inputs below -87.3
 * give exactly 0 (a masked score), above 88.7 are clamped.  Builds without
 * AVX2 use the scalar tsr_exp1 with the same formula, so results agree.
 */
#ifndef TSR_BACKEND_CPU_SIMD_H
#define TSR_BACKEND_CPU_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TSR_CPU_AVX2 1
#endif

#define TSR_EXP_HI 88.7228f
#define TSR_EXP_LO -87.3365f

static inline float tsr_exp1(float x)
{
    if (x < TSR_EXP_LO)
        return 0.0f;
    if (x > TSR_EXP_HI)
        x = TSR_EXP_HI;
    float n = nearbyintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r) + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return p * s;
}

/* erf by Abramowitz & Stegun 7.1.26: erf(|x|) = 1 - t P(t) e^(-x^2),
 * t = 1 / (1 + 0.3275911 |x|): 1.5e-7 in exact arithmetic, 5.1e-7 measured in
 * f32 over [-6, 6] (the cancellation in 1 - t P e near 0), the formula
 * PyTorch's vectorised CPU erf uses too.  GELU needs 1 + erf, so an
 * absolute bound is the one that matters.  tsr_erf8 does the very same
 * operations (checked: bit-equal to tsr_erf1 over that range). */
#define TSR_ERF_P 0.3275911f
#define TSR_ERF_A1 0.254829592f
#define TSR_ERF_A2 -0.284496736f
#define TSR_ERF_A3 1.421413741f
#define TSR_ERF_A4 -1.453152027f
#define TSR_ERF_A5 1.061405429f

static inline float tsr_erf1(float x)
{
    const float ax = fabsf(x);
    const float t = 1.0f / fmaf(TSR_ERF_P, ax, 1.0f);
    float p = fmaf(TSR_ERF_A5, t, TSR_ERF_A4);
    p = fmaf(p, t, TSR_ERF_A3);
    p = fmaf(p, t, TSR_ERF_A2);
    p = fmaf(p, t, TSR_ERF_A1);
    p = p * t;
    const float y = fmaf(-p, tsr_exp1(-(ax * ax)), 1.0f);
    return copysignf(y, x);
}

#ifdef TSR_CPU_AVX2
static inline __m256 tsr_exp8(__m256 x)
{
    __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(TSR_EXP_LO), _CMP_LT_OQ);
    x = _mm256_min_ps(x, _mm256_set1_ps(TSR_EXP_HI));
    x = _mm256_max_ps(x, _mm256_set1_ps(TSR_EXP_LO));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, y);
}

static inline __m256 tsr_erf8(__m256 x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 ax = _mm256_andnot_ps(sign, x);
    const __m256 t = _mm256_div_ps(
        _mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(TSR_ERF_P), ax, _mm256_set1_ps(1.0f)));
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(TSR_ERF_A5), t, _mm256_set1_ps(TSR_ERF_A4));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(TSR_ERF_A3));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(TSR_ERF_A2));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(TSR_ERF_A1));
    p = _mm256_mul_ps(p, t);
    const __m256 e = tsr_exp8(_mm256_xor_ps(_mm256_mul_ps(ax, ax), sign));
    const __m256 y = _mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.0f));
    return _mm256_or_ps(y, _mm256_and_ps(x, sign));
}

static inline float tsr_hsum8(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

static inline float tsr_hmax8(__m256 v)
{
    __m128 lo = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_max_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}
#endif

#endif
