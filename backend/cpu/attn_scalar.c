/*
 * backend/cpu/attn_scalar.c - the flash attention kernel in plain C
 * (attn_flash_impl.h with a 16-float array as its vector), for CPUs
 * without AVX2 (and other architectures) and for TESSERA_CPU_ISA=scalar.
 *
 * Each "vector" operation is a loop over 16 lanes that the compiler may
 * vectorise for whatever the build targets.  Per lane it does what the AVX2
 * kernel does: fused multiply-adds where the C library's fmaf is a single
 * instruction (FP_FAST_FMAF, as on a -march=native x86 build or AArch64;
 * then the two kernels agree bit for bit), a multiply and an add otherwise
 * (a software fmaf would cost ~10x); exp2 is attn_exp2_1 lane by lane;
 * and the horizontal sum follows tsr_hsum8's tree.
 */
#include <math.h>

#include "backend/cpu/attn_flash.h"
#include "backend/cpu/cpu_simd.h"

typedef struct v16 {
    float v[16];
} v16;
typedef struct v8 {
    float v[8];
} v8;

#ifdef FP_FAST_FMAF
#define ATTN_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define ATTN_FMA(a, b, c) ((a) * (b) + (c))
#endif

#define LANES(n, expr)                                                                             \
    for (int i_ = 0; i_ < (n); i_++)                                                               \
    expr

static inline v16 v16_zero(void) { return (v16){{0}}; }
static inline v16 v16_set1(float x)
{
    v16 r;
    LANES(16, r.v[i_] = x);
    return r;
}
static inline v16 v16_bcast(const float *p) { return v16_set1(*p); }
static inline v16 v16_load(const float *p)
{
    v16 r;
    memcpy(r.v, p, sizeof r.v);
    return r;
}
static inline void v16_store(float *p, v16 a) { memcpy(p, a.v, sizeof a.v); }
static inline v16 v16_fma(v16 a, v16 b, v16 c)
{
    LANES(16, c.v[i_] = ATTN_FMA(a.v[i_], b.v[i_], c.v[i_]));
    return c;
}
static inline v16 v16_mul(v16 a, v16 b)
{
    LANES(16, a.v[i_] *= b.v[i_]);
    return a;
}
static inline v16 v16_sub(v16 a, v16 b)
{
    LANES(16, a.v[i_] -= b.v[i_]);
    return a;
}
static inline v16 v16_add(v16 a, v16 b)
{
    LANES(16, a.v[i_] += b.v[i_]);
    return a;
}
static inline v16 v16_max(v16 a, v16 b)
{
    /* _mm256_max_ps(a, b): b unless a > b */
    LANES(16, a.v[i_] = a.v[i_] > b.v[i_] ? a.v[i_] : b.v[i_]);
    return a;
}
/* attn_exp2_1 with ATTN_FMA */
static inline float exp2_lane(float x)
{
    if (x < ATTN_EXP2_LO)
        return 0.0f;
    const float n = nearbyintf(x), r = x - n;
    float p = ATTN_EXP2_C6;
    p = ATTN_FMA(p, r, ATTN_EXP2_C5);
    p = ATTN_FMA(p, r, ATTN_EXP2_C4);
    p = ATTN_FMA(p, r, ATTN_EXP2_C3);
    p = ATTN_FMA(p, r, ATTN_EXP2_C2);
    p = ATTN_FMA(p, r, ATTN_EXP2_C1);
    p = ATTN_FMA(p, r, 1.0f);
    uint32_t bits;
    memcpy(&bits, &p, sizeof bits);
    bits += (uint32_t)((int32_t)n * (1 << 23));
    memcpy(&p, &bits, sizeof p);
    return p;
}
static inline v16 v16_exp2(v16 a)
{
    LANES(16, a.v[i_] = exp2_lane(a.v[i_]));
    return a;
}
/* lanes i + (i+8), then tsr_hsum8: (0+4, 1+5, 2+6, 3+7), (0+2, 1+3), 0+1 */
static inline float v16_hsum(v16 a)
{
    float t[8], u[4];
    LANES(8, t[i_] = a.v[i_] + a.v[i_ + 8]);
    LANES(4, u[i_] = t[i_] + t[i_ + 4]);
    return (u[0] + u[2]) + (u[1] + u[3]);
}
static inline float v16_hmax(v16 a)
{
    float m = a.v[0];
    LANES(16, m = a.v[i_] > m ? a.v[i_] : m);
    return m;
}

static inline v8 v8_set1(float x)
{
    v8 r;
    LANES(8, r.v[i_] = x);
    return r;
}
static inline v8 v8_bcast(const float *p) { return v8_set1(*p); }
static inline v8 v8_load(const float *p)
{
    v8 r;
    memcpy(r.v, p, sizeof r.v);
    return r;
}
static inline void v8_store(float *p, v8 a) { memcpy(p, a.v, sizeof a.v); }
static inline v8 v8_fma(v8 a, v8 b, v8 c)
{
    LANES(8, c.v[i_] = ATTN_FMA(a.v[i_], b.v[i_], c.v[i_]));
    return c;
}
static inline v8 v8_mul(v8 a, v8 b)
{
    LANES(8, a.v[i_] *= b.v[i_]);
    return a;
}

#define ATTN_FN tsr_cpu_attn_flash_scalar
#define ATTN_R 4
#include "backend/cpu/attn_flash_impl.h"
