/*
 * backend/cpu/attn_avx2.c - the flash attention kernel for AVX2 + FMA
 * (attn_flash_impl.h with a 16-float vector of two __m256).
 *
 * Compiled with -mavx2 -mfma whatever the rest of the build targets
 * (CMakeLists.txt), so a -DTESSERA_NATIVE=OFF build still has it; it is
 * called only when tsr_cpu_isa() says the CPU and OS support AVX2.  Six
 * rows x two __m256 = 12 accumulators, plus two loaded K or V vectors,
 * fit the 16 YMM registers and keep both FMA pipes busy.
 */
#if defined(__x86_64__)
#include <immintrin.h>

#include "backend/cpu/attn_flash.h"
#include "backend/cpu/cpu_simd.h"

#ifndef TSR_CPU_AVX2
#error "attn_avx2.c must be compiled with -mavx2 -mfma"
#endif

typedef struct v16 {
    __m256 lo, hi;
} v16;
typedef __m256 v8;

static inline v16 v16_zero(void) { return (v16){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline v16 v16_set1(float x) { return (v16){_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
static inline v16 v16_bcast(const float *p)
{
    const __m256 b = _mm256_broadcast_ss(p);
    return (v16){b, b};
}
static inline v16 v16_load(const float *p)
{
    return (v16){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}
static inline void v16_store(float *p, v16 a)
{
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
}
static inline v16 v16_fma(v16 a, v16 b, v16 c)
{
    return (v16){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
static inline v16 v16_mul(v16 a, v16 b)
{
    return (v16){_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
}
static inline v16 v16_sub(v16 a, v16 b)
{
    return (v16){_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)};
}
static inline v16 v16_add(v16 a, v16 b)
{
    return (v16){_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
}
static inline v16 v16_max(v16 a, v16 b)
{
    return (v16){_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)};
}
/* attn_exp2_1 (attn_flash.h) on 8 lanes, step for step */
static inline __m256 exp2_8(__m256 x)
{
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(ATTN_EXP2_LO), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(ATTN_EXP2_LO));
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(ATTN_EXP2_C6);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP2_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP2_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP2_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP2_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_EXP2_C1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    p = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    return _mm256_andnot_ps(under, p);
}
static inline v16 v16_exp2(v16 a) { return (v16){exp2_8(a.lo), exp2_8(a.hi)}; }
static inline float v16_hsum(v16 a) { return tsr_hsum8(_mm256_add_ps(a.lo, a.hi)); }
static inline float v16_hmax(v16 a) { return tsr_hmax8(_mm256_max_ps(a.lo, a.hi)); }

static inline v8 v8_set1(float x) { return _mm256_set1_ps(x); }
static inline v8 v8_bcast(const float *p) { return _mm256_broadcast_ss(p); }
static inline v8 v8_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void v8_store(float *p, v8 a) { _mm256_storeu_ps(p, a); }
static inline v8 v8_fma(v8 a, v8 b, v8 c) { return _mm256_fmadd_ps(a, b, c); }
static inline v8 v8_mul(v8 a, v8 b) { return _mm256_mul_ps(a, b); }

#define ATTN_FN tsr_cpu_attn_flash_avx2
#define ATTN_R 6
#include "backend/cpu/attn_flash_impl.h"
#endif
