/*
 * backend/cpu/cpu_peak.c - the machine's measured multiply-add ceiling
 * (cpu_isa.h, tsr_cpu_peak_gflops).
 *
 * Why measure it: a kernel's GFLOP/s means little without the ceiling it
 * runs under, and the ceiling is not in any table one can trust here.  Zen 4
 * runs an AVX-512 FMA as two 256-bit halves (the same peak as AVX2), Zen 5
 * server parts have full 512-bit FMA pipes (twice AVX2's), clocks differ
 * between hosts and under load.  So `tessera bench ops` runs this first and
 * reports every op as a share of it, and docs/perf.md can say how far a
 * kernel (Tessera's or PyTorch's) is from what the cores can do at all.
 *
 * How: each thread runs twelve independent chains of register-only fused
 * multiply-adds (twelve covers an FMA's latency times its issue width on
 * current x86 cores), with an empty asm statement per round so that the
 * compiler keeps every chain; no memory is touched.  Flops count 2 per
 * multiply-add (a bf16 dot vdpbf16ps does 32 per 512-bit register).  The
 * threads spin on one flag so that they start together; the figure is the
 * total over the wall time from the start to the last thread's end, after a
 * calibration run that sizes the work to about `seconds` per thread.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "backend/cpu/cpu_isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TSR_PEAK_X86 1
#endif

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Flops of one round of twelve chains, per kind. */
static double round_flops(tsr_cpu_peak_kind kind)
{
    switch (kind) {
    case TSR_CPU_PEAK_AVX512: return 12.0 * 16 * 2;
    case TSR_CPU_PEAK_BF16: return 12.0 * 32 * 2;
    case TSR_CPU_PEAK_AVX2: return 12.0 * 8 * 2;
    default: return 12.0 * 2;
    }
}

#define CHAINS(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7) OP(8) OP(9) OP(10) OP(11)

/* An asm constraint that keeps a scalar float in a vector register, where
 * the target has one the compiler knows by a letter. */
#if defined(TSR_PEAK_X86)
#define FREG "+x"
#elif defined(__aarch64__)
#define FREG "+w"
#endif

static float run_scalar(int64_t rounds)
{
    float a0 = 0, a1 = 1, a2 = 2, a3 = 3, a4 = 4, a5 = 5, a6 = 6, a7 = 7, a8 = 8, a9 = 9, a10 = 10,
          a11 = 11;
    for (int64_t r = 0; r < rounds; r++) {
#define S(i) a##i = __builtin_fmaf(a##i, 0.999999f, 1e-7f);
        CHAINS(S)
#undef S
#ifdef FREG
        __asm__ volatile(""
                         : FREG(a0), FREG(a1), FREG(a2), FREG(a3), FREG(a4), FREG(a5), FREG(a6),
                           FREG(a7), FREG(a8), FREG(a9), FREG(a10), FREG(a11));
#else
        __asm__ volatile("" : : : "memory");
#endif
    }
    return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
}

#ifdef TSR_PEAK_X86
__attribute__((target("avx2,fma"))) static float run_avx2(int64_t rounds)
{
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2),
           a3 = _mm256_set1_ps(3), a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5),
           a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7), a8 = _mm256_set1_ps(8),
           a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
    for (int64_t r = 0; r < rounds; r++) {
#define V(i) a##i = _mm256_fmadd_ps(a##i, b, c);
        CHAINS(V)
#undef V
        __asm__ volatile(""
                         : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6),
                           "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}

__attribute__((target("avx512f"))) static float run_avx512(int64_t rounds)
{
    const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2),
           a3 = _mm512_set1_ps(3), a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5),
           a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7), a8 = _mm512_set1_ps(8),
           a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
    for (int64_t r = 0; r < rounds; r++) {
#define V(i) a##i = _mm512_fmadd_ps(a##i, b, c);
        CHAINS(V)
#undef V
        __asm__ volatile(""
                         : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6),
                           "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512bf16"))) static float run_bf16(int64_t rounds)
{
    const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f80); /* bf16 1.0 */
    const __m512bh c = (__m512bh)_mm512_set1_epi16(0x3380); /* bf16 ~6e-8 */
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2),
           a3 = _mm512_set1_ps(3), a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5),
           a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7), a8 = _mm512_set1_ps(8),
           a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
    for (int64_t r = 0; r < rounds; r++) {
#define V(i) a##i = _mm512_dpbf16_ps(a##i, b, c);
        CHAINS(V)
#undef V
        __asm__ volatile(""
                         : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6),
                           "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}
#endif

static float run_kind(tsr_cpu_peak_kind kind, int64_t rounds)
{
#ifdef TSR_PEAK_X86
    switch (kind) {
    case TSR_CPU_PEAK_AVX2: return run_avx2(rounds);
    case TSR_CPU_PEAK_AVX512: return run_avx512(rounds);
    case TSR_CPU_PEAK_BF16: return run_bf16(rounds);
    default: break;
    }
#endif
    return run_scalar(rounds);
}

typedef struct peak_job {
    tsr_cpu_peak_kind kind;
    int64_t rounds;
    atomic_int *go;
    double t_end;
    volatile float sink;
} peak_job;

static void *peak_thread(void *arg)
{
    peak_job *j = arg;
    while (!atomic_load_explicit(j->go, memory_order_acquire))
        ;
    j->sink = run_kind(j->kind, j->rounds);
    j->t_end = now_s();
    return NULL;
}

bool tsr_cpu_peak_available(tsr_cpu_peak_kind kind)
{
    switch (kind) {
    case TSR_CPU_PEAK_SCALAR: return true;
    case TSR_CPU_PEAK_AVX2: return tsr_cpu_isa() >= TSR_CPU_ISA_AVX2;
    case TSR_CPU_PEAK_AVX512: return tsr_cpu_isa() >= TSR_CPU_ISA_AVX512;
    case TSR_CPU_PEAK_BF16: return tsr_cpu_has_bf16_dot();
    }
    return false;
}

const char *tsr_cpu_peak_name(tsr_cpu_peak_kind kind)
{
    switch (kind) {
    case TSR_CPU_PEAK_SCALAR: return "scalar fma";
    case TSR_CPU_PEAK_AVX2: return "avx2 fma";
    case TSR_CPU_PEAK_AVX512: return "avx512 fma";
    case TSR_CPU_PEAK_BF16: return "avx512 bf16 dot";
    }
    return "?";
}

double tsr_cpu_peak_gflops(tsr_cpu_peak_kind kind, int threads, double seconds)
{
    if (!tsr_cpu_peak_available(kind))
        return 0.0;
    if (threads < 1)
        threads = 1;
    if (threads > TSR_CPU_PEAK_MAX_THREADS)
        threads = TSR_CPU_PEAK_MAX_THREADS;
    /* calibrate on this thread: rounds per second */
    int64_t rounds = 1 << 16;
    double dt;
    for (;;) {
        const double t0 = now_s();
        volatile float sink = run_kind(kind, rounds);
        (void)sink;
        dt = now_s() - t0;
        if (dt > 0.02 || rounds > ((int64_t)1 << 40))
            break;
        rounds *= 4;
    }
    const int64_t want = (int64_t)((double)rounds * (seconds > 0 ? seconds : 0.2) / dt) + 1;
    peak_job jobs[TSR_CPU_PEAK_MAX_THREADS];
    pthread_t tids[TSR_CPU_PEAK_MAX_THREADS];
    atomic_int go = 0;
    int started = 0;
    for (int i = 0; i < threads; i++) {
        jobs[i] = (peak_job){.kind = kind, .rounds = want, .go = &go};
        if (pthread_create(&tids[i], NULL, peak_thread, &jobs[i]) != 0)
            break;
        started++;
    }
    const double t0 = now_s();
    atomic_store_explicit(&go, 1, memory_order_release);
    double t_last = t0;
    for (int i = 0; i < started; i++) {
        pthread_join(tids[i], NULL);
        if (jobs[i].t_end > t_last)
            t_last = jobs[i].t_end;
    }
    if (started < threads || t_last <= t0) /* a thread would not start: no figure */
        return 0.0;
    return round_flops(kind) * (double)want * started / (t_last - t0) * 1e-9;
}
