/*
 * backend/cpu/attn_avx512.c - the flash attention kernel for AVX-512
 * (F, BW, DQ, VL): attn_flash_impl.h with a __m512 as its 16-float vector.
 *
 * Compiled with the AVX-512 flags whatever the rest of the build targets
 * (CMakeLists.txt), and called only when tsr_cpu_isa() says the CPU and OS
 * support it.  It is the AVX2 kernel's text with another vector type: the
 * same blocking, and per lane the same operations in the same order (the
 * exp2 below is attn_exp2_1's, step for step; the horizontal sum adds the two
 * 256-bit halves and then runs tsr_hsum8's tree), so it should give the
 * AVX2 kernel's bits.  Eight rows: eight ZMM accumulators cover the FMA
 * latency of two pipes; 32 registers leave room.
 */
#if defined(__x86_64__)
#include <immintrin.h>

#include "backend/cpu/attn_flash.h"
#include "backend/cpu/cpu_simd.h"

#if !defined(__AVX512F__) || !defined(__AVX512DQ__) || !defined(__AVX512VL__)
#error "attn_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl"
#endif

typedef __m512 v16;
typedef __m256 v8;

static inline v16 v16_zero(void) { return _mm512_setzero_ps(); }
static inline v16 v16_set1(float x) { return _mm512_set1_ps(x); }
static inline v16 v16_bcast(const float *p) { return _mm512_set1_ps(*p); }
static inline v16 v16_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void v16_store(float *p, v16 a) { _mm512_storeu_ps(p, a); }
static inline v16 v16_fma(v16 a, v16 b, v16 c) { return _mm512_fmadd_ps(a, b, c); }
static inline v16 v16_mul(v16 a, v16 b) { return _mm512_mul_ps(a, b); }
static inline v16 v16_sub(v16 a, v16 b) { return _mm512_sub_ps(a, b); }
static inline v16 v16_add(v16 a, v16 b) { return _mm512_add_ps(a, b); }
static inline v16 v16_max(v16 a, v16 b) { return _mm512_max_ps(a, b); }

/* attn_exp2_1 (attn_flash.h) on 16 lanes, step for step */
static inline v16 v16_exp2(v16 x)
{
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(ATTN_EXP2_LO), _CMP_LT_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(ATTN_EXP2_LO));
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(ATTN_EXP2_C6);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP2_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP2_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP2_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP2_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_EXP2_C1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
    p = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
    return _mm512_maskz_mov_ps((__mmask16)~under, p);
}

static inline float v16_hsum(v16 a)
{
    return tsr_hsum8(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)));
}
static inline float v16_hmax(v16 a)
{
    return tsr_hmax8(_mm256_max_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)));
}

static inline v8 v8_set1(float x) { return _mm256_set1_ps(x); }
static inline v8 v8_bcast(const float *p) { return _mm256_broadcast_ss(p); }
static inline v8 v8_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void v8_store(float *p, v8 a) { _mm256_storeu_ps(p, a); }
static inline v8 v8_fma(v8 a, v8 b, v8 c) { return _mm256_fmadd_ps(a, b, c); }
static inline v8 v8_mul(v8 a, v8 b) { return _mm256_mul_ps(a, b); }

#define ATTN_FN tsr_cpu_attn_flash_avx512
#define ATTN_R 8
#include "backend/cpu/attn_flash_impl.h"
#endif
