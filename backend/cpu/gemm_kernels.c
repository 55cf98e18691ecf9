/*
 * backend/cpu/gemm_kernels.c - GEMM micro-kernels: AVX-512 (6 x 32), AVX2
 * (6 x 16) and portable C (6 x 16), see gemm_kernels.h for the contract.
 *
 * Why these shapes: a micro-kernel keeps its MR x NR tile of C in
 * registers for the whole k loop and needs MR*NR/W accumulators plus NR/W
 * registers of B and one broadcast of A (W = floats per register).  AVX2
 * has 16 registers: 6 x 16 uses 12 accumulators + 2 + 1, and its 12
 * independent FMA chains cover the FMA latency (4-5 cycles) on both FMA
 * ports.  AVX-512 has 32 registers; 6 x 32 keeps the same A packing (MR = 6)
 * with 12 accumulators of 16 floats, doubling the work per broadcast.
 * The kernels are compiled with target attributes, so one binary carries
 * them all whatever -march the build used; cpu_isa.h picks one at run time.
 * The k loop is in intrinsics rather than assembly: GCC and clang keep all
 * 12 accumulators in registers, which is what matters here.
 *
 * The portable kernel uses fmaf and separate multiply and add statements so
 * that its roundings are exactly those of the vector kernels (the build
 * compiles ISO C, where the compiler does not contract a * b + c on its own).
 */
#include "backend/cpu/gemm_kernels.h"

#include <math.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TSR_GEMM_X86 1
#endif

#define MR 6

/* ---- portable C ---- */

#define NR_C 16

static void ukr_c(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha,
                  bool accumulate)
{
    float acc[MR][NR_C] = {{0}};
    for (int64_t p = 0; p < kc; p++) {
        const float *a = ap + p * MR, *b = bp + p * NR_C;
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR_C; j++)
                acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR_C; j++) {
            const float t = alpha * acc[i][j];
            c[i * ldc + j] = accumulate ? c[i * ldc + j] + t : t;
        }
}

static void ukr_c_rows(int64_t kc, const float *const *a, const float *bp, float *c, int64_t ldc,
                       float alpha, bool accumulate)
{
    float acc[MR][NR_C] = {{0}};
    for (int64_t p = 0; p < kc; p++) {
        const float *b = bp + p * NR_C;
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR_C; j++)
                acc[i][j] = fmaf(a[i][p], b[j], acc[i][j]);
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR_C; j++) {
            const float t = alpha * acc[i][j];
            c[i * ldc + j] = accumulate ? c[i * ldc + j] + t : t;
        }
}

static void pack_b_c(const float *b, int64_t ldb, int64_t kc, int nr, float *dst)
{
    for (int j = 0; j < nr; j++)
        for (int64_t p = 0; p < kc; p++)
            dst[p * nr + j] = b[j * ldb + p];
}

#ifdef TSR_GEMM_X86

/* ---- AVX2 + FMA: 6 x 16 ---- */

#define AVX2_TARGET __attribute__((target("avx2,fma")))

#define AVX2_ROW(r, addr)                                                                          \
    do {                                                                                           \
        const __m256 t = _mm256_broadcast_ss(addr);                                                \
        c##r##0 = _mm256_fmadd_ps(t, b0, c##r##0);                                                 \
        c##r##1 = _mm256_fmadd_ps(t, b1, c##r##1);                                                 \
    } while (0)

#define AVX2_STORE(r)                                                                              \
    do {                                                                                           \
        float *cr = c + (r)*ldc;                                                                   \
        __m256 x0 = _mm256_mul_ps(c##r##0, al), x1 = _mm256_mul_ps(c##r##1, al);                   \
        if (accumulate) {                                                                          \
            x0 = _mm256_add_ps(_mm256_loadu_ps(cr), x0);                                           \
            x1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), x1);                                       \
        }                                                                                          \
        _mm256_storeu_ps(cr, x0);                                                                  \
        _mm256_storeu_ps(cr + 8, x1);                                                              \
    } while (0)

/* The k loop over one A source: FETCH(r) is the address of A(row r, k). */
#define AVX2_KLOOP(FETCH, ADVANCE)                                                                 \
    _Pragma("GCC unroll 4") for (int64_t p = 0; p < kc; p++)                                       \
    {                                                                                              \
        const __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);                         \
        AVX2_ROW(0, FETCH(0));                                                                     \
        AVX2_ROW(1, FETCH(1));                                                                     \
        AVX2_ROW(2, FETCH(2));                                                                     \
        AVX2_ROW(3, FETCH(3));                                                                     \
        AVX2_ROW(4, FETCH(4));                                                                     \
        AVX2_ROW(5, FETCH(5));                                                                     \
        ADVANCE;                                                                                   \
        bp += 16;                                                                                  \
    }

#define AVX2_BEGIN                                                                                 \
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;       \
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;                       \
    /* C's tile is read at the end: ask for it now, while the k loop runs */                       \
    for (int r = 0; r < MR; r++) {                                                                 \
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);                                    \
        _mm_prefetch((const char *)(c + r * ldc + 15), _MM_HINT_T0);                               \
    }

#define AVX2_END                                                                                   \
    const __m256 al = _mm256_set1_ps(alpha);                                                       \
    AVX2_STORE(0);                                                                                 \
    AVX2_STORE(1);                                                                                 \
    AVX2_STORE(2);                                                                                 \
    AVX2_STORE(3);                                                                                 \
    AVX2_STORE(4);                                                                                 \
    AVX2_STORE(5);

#define PACKED(r) (ap + (r))
#define ROWS(r) (a##r + p)

AVX2_TARGET static void ukr_avx2(int64_t kc, const float *ap, const float *bp, float *c,
                                 int64_t ldc, float alpha,
                                 bool accumulate){AVX2_BEGIN AVX2_KLOOP(PACKED, ap += MR) AVX2_END}

AVX2_TARGET static void ukr_avx2_rows(int64_t kc, const float *const *a, const float *bp, float *c,
                                      int64_t ldc, float alpha, bool accumulate)
{
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    AVX2_BEGIN
    AVX2_KLOOP(ROWS, (void)0)
    AVX2_END
}

/* The B panel transpose in 8 x 8 blocks (eight rows of B, eight k): four
 * unpack/shuffle/permute steps instead of 64 scalar strided stores.  Used
 * by the AVX-512 kernel too (it only moves data). */
AVX2_TARGET static void pack_b_avx2(const float *b, int64_t ldb, int64_t kc, int nr, float *dst)
{
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8)
        for (int j0 = 0; j0 < nr; j0 += 8) {
            const float *s = b + j0 * ldb + p;
            const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ldb);
            const __m256 r2 = _mm256_loadu_ps(s + 2 * ldb), r3 = _mm256_loadu_ps(s + 3 * ldb);
            const __m256 r4 = _mm256_loadu_ps(s + 4 * ldb), r5 = _mm256_loadu_ps(s + 5 * ldb);
            const __m256 r6 = _mm256_loadu_ps(s + 6 * ldb), r7 = _mm256_loadu_ps(s + 7 * ldb);
            const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            float *d = dst + p * nr + j0;
            _mm256_store_ps(d, _mm256_permute2f128_ps(s0, s4, 0x20));
            _mm256_store_ps(d + nr, _mm256_permute2f128_ps(s1, s5, 0x20));
            _mm256_store_ps(d + 2 * nr, _mm256_permute2f128_ps(s2, s6, 0x20));
            _mm256_store_ps(d + 3 * nr, _mm256_permute2f128_ps(s3, s7, 0x20));
            _mm256_store_ps(d + 4 * nr, _mm256_permute2f128_ps(s0, s4, 0x31));
            _mm256_store_ps(d + 5 * nr, _mm256_permute2f128_ps(s1, s5, 0x31));
            _mm256_store_ps(d + 6 * nr, _mm256_permute2f128_ps(s2, s6, 0x31));
            _mm256_store_ps(d + 7 * nr, _mm256_permute2f128_ps(s3, s7, 0x31));
        }
    for (; p < kc; p++)
        for (int j = 0; j < nr; j++)
            dst[p * nr + j] = b[j * ldb + p];
}

/* ---- AVX-512: 6 x 32 ---- */

#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))

#define AVX512_ROW(r, addr)                                                                        \
    do {                                                                                           \
        const __m512 t = _mm512_set1_ps(*(addr));                                                  \
        c##r##0 = _mm512_fmadd_ps(t, b0, c##r##0);                                                 \
        c##r##1 = _mm512_fmadd_ps(t, b1, c##r##1);                                                 \
    } while (0)

#define AVX512_STORE(r)                                                                            \
    do {                                                                                           \
        float *cr = c + (r)*ldc;                                                                   \
        __m512 x0 = _mm512_mul_ps(c##r##0, al), x1 = _mm512_mul_ps(c##r##1, al);                   \
        if (accumulate) {                                                                          \
            x0 = _mm512_add_ps(_mm512_loadu_ps(cr), x0);                                           \
            x1 = _mm512_add_ps(_mm512_loadu_ps(cr + 16), x1);                                      \
        }                                                                                          \
        _mm512_storeu_ps(cr, x0);                                                                  \
        _mm512_storeu_ps(cr + 16, x1);                                                             \
    } while (0)

/* ROW is AVX512_ROW (f32 FMAs) or BF16_ROW (bf16 pair dot products) */
#define AVX512_KLOOP(ROW, FETCH, ADVANCE)                                                          \
    _Pragma("GCC unroll 4") for (int64_t p = 0; p < kc; p++)                                       \
    {                                                                                              \
        const __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);                        \
        ROW(0, FETCH(0));                                                                          \
        ROW(1, FETCH(1));                                                                          \
        ROW(2, FETCH(2));                                                                          \
        ROW(3, FETCH(3));                                                                          \
        ROW(4, FETCH(4));                                                                          \
        ROW(5, FETCH(5));                                                                          \
        ADVANCE;                                                                                   \
        bp += 32;                                                                                  \
    }

#define AVX512_BEGIN                                                                               \
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;       \
    __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;                       \
    for (int r = 0; r < MR; r++) {                                                                 \
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);                                    \
        _mm_prefetch((const char *)(c + r * ldc + 31), _MM_HINT_T0);                               \
    }

#define AVX512_END                                                                                 \
    const __m512 al = _mm512_set1_ps(alpha);                                                       \
    AVX512_STORE(0);                                                                               \
    AVX512_STORE(1);                                                                               \
    AVX512_STORE(2);                                                                               \
    AVX512_STORE(3);                                                                               \
    AVX512_STORE(4);                                                                               \
    AVX512_STORE(5);

AVX512_TARGET static void ukr_avx512(int64_t kc, const float *ap, const float *bp, float *c,
                                     int64_t ldc, float alpha, bool accumulate){
    AVX512_BEGIN AVX512_KLOOP(AVX512_ROW, PACKED, ap += MR) AVX512_END}

AVX512_TARGET static void ukr_avx512_rows(int64_t kc, const float *const *a, const float *bp,
                                          float *c, int64_t ldc, float alpha, bool accumulate)
{
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    AVX512_BEGIN
    AVX512_KLOOP(AVX512_ROW, ROWS, (void)0)
    AVX512_END
}

/* ---- AVX512_BF16: 6 x 32 over bf16 pairs ----
 *
 * The "cpu-bf16gemm" variant (gemm.h, tsr_gemm.pairs): each 32-bit unit of
 * A and B holds two bf16 values of consecutive k, the lower half first, so
 * the driver's packing moves pairs exactly as it moves floats.  vdpbf16ps
 * adds a[2j] * b[2j] + a[2j + 1] * b[2j + 1] to f32 lane j: lane j of B's
 * register is column j's pair, A's pair is broadcast.  The roundings are the
 * instruction's (products exact, sums in f32 with round-to-nearest-even,
 * denormals flushed), not those of the f32 kernels. */

#define BF16_TARGET                                                                                \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma")))

#define BF16_ROW(r, addr)                                                                          \
    do {                                                                                           \
        const __m512 t = _mm512_set1_ps(*(addr));                                                  \
        c##r##0 = _mm512_dpbf16_ps(c##r##0, (__m512bh)t, (__m512bh)b0);                            \
        c##r##1 = _mm512_dpbf16_ps(c##r##1, (__m512bh)t, (__m512bh)b1);                            \
    } while (0)

BF16_TARGET static void ukr_bf16(int64_t kc, const float *ap, const float *bp, float *c,
                                 int64_t ldc, float alpha, bool accumulate)
{
    AVX512_BEGIN
    AVX512_KLOOP(BF16_ROW, PACKED, ap += MR)
    AVX512_END
}

BF16_TARGET static void ukr_bf16_rows(int64_t kc, const float *const *a, const float *bp, float *c,
                                      int64_t ldc, float alpha, bool accumulate)
{
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    AVX512_BEGIN
    AVX512_KLOOP(BF16_ROW, ROWS, (void)0)
    AVX512_END
}
#endif

static const tsr_gemm_kernel k_c = {MR, NR_C, ukr_c, ukr_c_rows, pack_b_c, "c 6x16"};
#ifdef TSR_GEMM_X86
static const tsr_gemm_kernel k_avx2 = {MR, 16, ukr_avx2, ukr_avx2_rows, pack_b_avx2, "avx2 6x16"};
static const tsr_gemm_kernel k_avx512 = {MR,          32,           ukr_avx512, ukr_avx512_rows,
                                         pack_b_avx2, "avx512 6x32"};
static const tsr_gemm_kernel k_bf16 = {MR,          32,          ukr_bf16, ukr_bf16_rows,
                                       pack_b_avx2, "avx512bf16 6x32"};
#endif

const tsr_gemm_kernel *tsr_gemm_kernel_bf16(void)
{
#ifdef TSR_GEMM_X86
    if (tsr_cpu_has_bf16_dot())
        return &k_bf16;
#endif
    return NULL;
}

const tsr_gemm_kernel *tsr_gemm_kernel_for(tsr_cpu_isa_level level)
{
#ifdef TSR_GEMM_X86
    if (level >= TSR_CPU_ISA_AVX512)
        return &k_avx512;
    if (level >= TSR_CPU_ISA_AVX2)
        return &k_avx2;
#endif
    (void)level;
    return &k_c;
}
