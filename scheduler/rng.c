/*
 * scheduler/rng.c - torch.randn re-implemented (see rng.h for the why).
 *
 * Everything here is about reproducing rounding, so the float paths are
 * written one IEEE operation per statement, in the order ATen performs them
 * (ATen's AVX2 intrinsics never fuse a multiply and an add except where it
 * calls _mm256_fmadd_ps, which we mirror with fmaf).  The project compiles
 * C17 in ISO mode, where GCC does not contract a*b+c on its own
 * (-ffp-contract=off); the pragma below states that intent for any compiler.
 * Nothing here allocates except tsr_rng_randn_nhwc's temporary.
 */
#include "scheduler/rng.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* No a*b+c contraction: gcc does none in ISO C mode (-std=c17); clang needs the pragma. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---------------------------------------------------------------- MT19937 */

static void mt_seed(tsr_rng *r, uint32_t seed)
{
    r->mt[0] = seed;
    for (int i = 1; i < 624; i++)
        r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->mti = 624;
}

uint32_t tsr_rng_mt_next(tsr_rng *r)
{
    if (r->mti >= 624) {
        for (int i = 0; i < 624; i++) {
            uint32_t y = (r->mt[i] & 0x80000000u) | (r->mt[(i + 1) % 624] & 0x7fffffffu);
            uint32_t v = r->mt[(i + 397) % 624] ^ (y >> 1);
            if (y & 1u)
                v ^= 0x9908b0dfu;
            r->mt[i] = v;
        }
        r->mti = 0;
    }
    uint32_t y = r->mt[r->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* CPUGeneratorImpl::random64: first output in the high word. */
static uint64_t mt_next64(tsr_rng *r)
{
    uint64_t hi = tsr_rng_mt_next(r);
    uint64_t lo = tsr_rng_mt_next(r);
    return (hi << 32) | lo;
}

/* uniform_real_distribution<float>: 24 random bits times 2^-24 (exact). */
static float uniform_f32(tsr_rng *r)
{
    return (float)(tsr_rng_mt_next(r) & 0xffffffu) * (1.0f / 16777216.0f);
}

/* uniform_real_distribution<double>: 53 random bits of random64(). */
static double uniform_f64(tsr_rng *r)
{
    return (double)(mt_next64(r) & ((UINT64_C(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/* at::normal_distribution<double>, the path for tensors of < 16 elements. */
static double normal_f64(tsr_rng *r)
{
    if (r->has_next_double) {
        r->has_next_double = false;
        return r->next_double;
    }
    double u1 = uniform_f64(r);
    double u2 = uniform_f64(r);
    double radius = sqrt(-2.0 * log1p(-u2));
    double theta = 2.0 * 3.14159265358979323846 * u1;
    r->next_double = radius * sin(theta);
    r->has_next_double = true;
    return radius * cos(theta);
}

/* ------------------------------------- ATen avx_mathfun.h, one lane at a time */

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* log256_ps for one lane (Cephes logf polynomial).  Inputs here are in (0, 1]. */
static float cephes_logf(float x)
{
    const float one = 1.0f;
    bool invalid = x <= 0.0f;
    x = x > FLT_MIN ? x : FLT_MIN; /* max_ps(x, min_norm_pos) */
    int32_t imm0 = (int32_t)(f2u(x) >> 23);
    x = u2f((f2u(x) & ~0x7f800000u) | f2u(0.5f));
    imm0 -= 0x7f;
    float e = (float)imm0;
    e = e + one;
    bool mask = x < (float)0.707106781186547524;
    float tmp = mask ? x : 0.0f;
    x = x - one;
    e = e - (mask ? one : 0.0f);
    x = x + tmp;
    float z = x * x;
    static const float p[9] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                               -1.2420140846E-1f, +1.4249322787E-1f, -1.6668057665E-1f,
                               +2.0000714765E-1f, -2.4999993993E-1f, +3.3333331174E-1f};
    float y = p[0];
    for (int i = 1; i < 9; i++)
        y = fmaf(y, x, p[i]);
    y = y * x;
    y = fmaf(y, z, e * -2.12194440e-4f);
    y = fmaf(-z, 0.5f, y);
    x = x + y;
    x = fmaf(e, 0.693359375f, x);
    return invalid ? NAN : x;
}

/* sincos256_ps for one lane. */
static void cephes_sincosf(float xin, float *s, float *c)
{
    uint32_t sign_sin = f2u(xin) & 0x80000000u;
    float x = u2f(f2u(xin) & 0x7fffffffu);
    float y = x * (float)1.27323954473516;
    int32_t j = (int32_t)y; /* cvttps: truncation */
    j = (j + 1) & ~1;
    y = (float)j;
    uint32_t swap_sin = ((uint32_t)j & 4u) << 29;
    bool poly_mask = ((uint32_t)j & 2u) == 0;
    x = fmaf(y, -0.78515625f, x);
    x = fmaf(y, -2.4187564849853515625e-4f, x);
    x = fmaf(y, (float)-3.77489497744594108e-8, x);
    uint32_t sign_cos = (~(uint32_t)(j - 2) & 4u) << 29;
    sign_sin ^= swap_sin;

    float z = x * x;
    float yc = fmaf((float)2.443315711809948E-005, z, (float)-1.388731625493765E-003);
    yc = fmaf(yc, z, (float)4.166664568298827E-002);
    yc = yc * z;
    yc = fmaf(yc, z, -(z * 0.5f));
    yc = yc + 1.0f;

    float ys = fmaf(-1.9515295891E-4f, z, 8.3321608736E-3f);
    ys = fmaf(ys, z, -1.6666654611E-1f);
    ys = ys * z;
    ys = fmaf(ys, x, x);

    float ysin2 = poly_mask ? ys : 0.0f;
    float ysin1 = poly_mask ? 0.0f : yc;
    ys = ys - ysin2;
    yc = yc - ysin1;
    float vs = ysin1 + ysin2;
    float vc = yc + ys;
    *s = u2f(f2u(vs) ^ sign_sin);
    *c = u2f(f2u(vc) ^ sign_cos);
}

/* normal_fill_16_AVX2 with mean 0, std 1. */
static void normal_fill_16_avx2(float *d)
{
    const float two_pi = (float)(2.0 * 3.14159265358979323846);
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - d[j];
        float u2 = d[j + 8];
        float lg = cephes_logf(u1);
        float radius = sqrtf(-2.0f * lg);
        float theta = two_pi * u2;
        float st, ct;
        cephes_sincosf(theta, &st, &ct);
        float n1 = radius * ct;
        float n2 = radius * st;
        d[j] = fmaf(n1, 1.0f, 0.0f);
        d[j + 8] = fmaf(n2, 1.0f, 0.0f);
    }
}

/* normal_fill_16<float> (portable kernel) with mean 0, std 1. */
static void normal_fill_16_scalar(float *d)
{
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - d[j];
        float u2 = d[j + 8];
        float radius = sqrtf(-2.0f * logf(u1));
        float theta = (float)((double)2.0f * 3.14159265358979323846 * (double)u2);
        d[j] = radius * cosf(theta) * 1.0f + 0.0f;
        d[j + 8] = radius * sinf(theta) * 1.0f + 0.0f;
    }
}

static void randn_cpu(tsr_rng *r, float *out, size_t n)
{
    if (n < 16) {
        for (size_t i = 0; i < n; i++)
            out[i] = (float)normal_f64(r);
        return;
    }
    void (*fill16)(float *) =
        r->kind == TSR_RNG_CPU_SCALAR ? normal_fill_16_scalar : normal_fill_16_avx2;
    for (size_t i = 0; i < n; i++)
        out[i] = uniform_f32(r);
    for (size_t i = 0; i + 16 <= n; i += 16)
        fill16(out + i);
    if (n % 16 != 0) {
        /* torch recomputes the last 16 values from fresh uniforms */
        float *d = out + n - 16;
        for (int i = 0; i < 16; i++)
            d[i] = uniform_f32(r);
        fill16(d);
    }
}

/* ------------------------------------------------------------------ Philox */

void tsr_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4])
{
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* curand's _curand_box_muller in float: u, v as nvcc compiles them (fused),
 * then sqrt(-2 log u) times (sin v, cos v). */
static void box_muller_f32(uint32_t x, uint32_t y, float *a, float *b)
{
    const float inv32 = 2.3283064e-10f;
    const float inv32_2pi = 2.3283064e-10f * 6.2831855f;
    float u = fmaf((float)x, inv32, inv32 / 2.0f);
    float v = fmaf((float)y, inv32_2pi, inv32_2pi / 2.0f);
    float s = sqrtf(-2.0f * logf(u));
    *a = (float)sin((double)v) * s;
    *b = (float)cos((double)v) * s;
}

static void randn_cuda(tsr_rng *r, float *out, size_t n)
{
    const uint64_t block = 256, unroll = 4;
    uint64_t grid = (n + block - 1) / block;
    if (r->cuda_grid_blocks && grid > r->cuda_grid_blocks)
        grid = r->cuda_grid_blocks;
    uint64_t threads = grid * block;
    uint64_t counter_offset = ((n - 1) / (threads * unroll) + 1) * 4;
    uint64_t base = r->philox_offset; /* curand_init offset: skipahead in outputs */
    uint32_t key[2] = {(uint32_t)r->seed, (uint32_t)(r->seed >> 32)};
    uint64_t stride = threads * unroll;
    for (uint64_t idx = 0; idx < threads && idx < n; idx++) {
        uint64_t ctr = base / 4; /* torch offsets are multiples of 4 */
        for (uint64_t li = idx; li < n; li += stride, ctr++) {
            uint32_t c[4] = {(uint32_t)ctr, (uint32_t)(ctr >> 32), (uint32_t)idx,
                             (uint32_t)(idx >> 32)};
            uint32_t o[4];
            tsr_philox4x32_10(c, key, o);
            float v[4];
            box_muller_f32(o[0], o[1], &v[0], &v[1]);
            box_muller_f32(o[2], o[3], &v[2], &v[3]);
            for (uint64_t ii = 0; ii < unroll; ii++) {
                uint64_t e = li + threads * ii;
                if (e < n)
                    out[e] = v[ii];
            }
        }
    }
    r->philox_offset += counter_offset;
}

/* ------------------------------------------------------------------ public */

void tsr_rng_init(tsr_rng *r, tsr_rng_kind kind, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->seed = seed;
    if (kind != TSR_RNG_CUDA)
        mt_seed(r, (uint32_t)(seed & 0xffffffffu));
}

int tsr_rng_kind_parse(const char *name)
{
    if (!name)
        return -1;
    if (strcmp(name, "cpu") == 0)
        return TSR_RNG_CPU;
    if (strcmp(name, "cuda") == 0 || strcmp(name, "gpu") == 0 || strcmp(name, "nv") == 0)
        return TSR_RNG_CUDA;
    if (strcmp(name, "cpu-scalar") == 0)
        return TSR_RNG_CPU_SCALAR;
    return -1;
}

const char *tsr_rng_kind_name(tsr_rng_kind kind)
{
    switch (kind) {
    case TSR_RNG_CPU: return "cpu";
    case TSR_RNG_CUDA: return "cuda";
    case TSR_RNG_CPU_SCALAR: return "cpu-scalar";
    }
    return "?";
}

void tsr_rng_set_cuda_grid_limit(tsr_rng *r, uint32_t max_blocks) { r->cuda_grid_blocks = max_blocks; }

int tsr_rng_randn(tsr_rng *r, float *out, size_t n)
{
    if (n == 0)
        return 0;
    if (!r || !out)
        return tsr_errorf(TSR_ERR_INVALID, "rng: NULL argument");
    if (n > (UINT64_C(1) << 40))
        return tsr_errorf(TSR_ERR_RANGE, "rng: %zu elements is too many for one draw", n);
    if (r->kind == TSR_RNG_CUDA)
        randn_cuda(r, out, n);
    else
        randn_cpu(r, out, n);
    return 0;
}

int tsr_rng_randn_nhwc(tsr_rng *r, int c, int h, int w, float *out)
{
    if (c <= 0 || h <= 0 || w <= 0 || (size_t)c * (size_t)h > SIZE_MAX / (size_t)w / sizeof(float))
        return tsr_errorf(TSR_ERR_RANGE, "rng: bad latent shape %dx%dx%d", c, h, w);
    size_t hw = (size_t)h * (size_t)w, n = hw * (size_t)c;
    float *tmp = malloc(n * sizeof(float));
    if (!tmp)
        return tsr_errorf(TSR_ERR_NOMEM, "rng: no memory for %zu floats", n);
    int rc = tsr_rng_randn(r, tmp, n);
    if (rc == 0)
        for (size_t ch = 0; ch < (size_t)c; ch++)
            for (size_t p = 0; p < hw; p++)
                out[p * (size_t)c + ch] = tmp[ch * hw + p];
    free(tmp);
    return rc;
}

int tsr_rng_randn_nhwc_slice(tsr_rng *r, int index, int c, int h, int w, float *out)
{
    if (index == 0)
        return tsr_rng_randn_nhwc(r, c, h, w, out);
    if (index < 0 || index > 4095)
        return tsr_errorf(TSR_ERR_RANGE, "rng: batch slice %d is outside [0, 4095]", index);
    if (c <= 0 || h <= 0 || w <= 0 ||
        (size_t)c * (size_t)h > SIZE_MAX / (size_t)w / sizeof(float) / 4096)
        return tsr_errorf(TSR_ERR_RANGE, "rng: bad latent shape %dx%dx%d", c, h, w);
    size_t hw = (size_t)h * (size_t)w, n = hw * (size_t)c;
    /* one torch.randn over index + 1 latents: the vectorised draw of a long
     * tensor is not a sum of short ones, so the whole prefix is drawn */
    float *tmp = malloc((size_t)(index + 1) * n * sizeof(float));
    if (!tmp)
        return tsr_errorf(TSR_ERR_NOMEM, "rng: no memory for %zu floats", (size_t)(index + 1) * n);
    int rc = tsr_rng_randn(r, tmp, (size_t)(index + 1) * n);
    const float *src = tmp + (size_t)index * n;
    if (rc == 0)
        for (size_t ch = 0; ch < (size_t)c; ch++)
            for (size_t p = 0; p < hw; p++)
                out[p * (size_t)c + ch] = src[ch * hw + p];
    free(tmp);
    return rc;
}
