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

/* One kind's twelve chains and their sum: VEC the accumulator type, SET1
 * its broadcast of a float, STEP(x) one multiply-add into x, CON the asm
 * constraint that keeps a VEC in a register, ADD a sum of two, FIRST(s) a
 * float out of the total (so that nothing is dead code). */
#define PEAK_CHAINS(VEC, SET1, STEP, CON, ADD, FIRST)                                              \
    VEC a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4), a5 = SET1(5),        \
        a6 = SET1(6), a7 = SET1(7), a8 = SET1(8), a9 = SET1(9), a10 = SET1(10), a11 = SET1(11);    \
    for (int64_t r = 0; r < rounds; r++) {                                                         \
        a0 = STEP(a0), a1 = STEP(a1), a2 = STEP(a2), a3 = STEP(a3), a4 = STEP(a4);                 \
        a5 = STEP(a5), a6 = STEP(a6), a7 = STEP(a7), a8 = STEP(a8), a9 = STEP(a9);                 \
        a10 = STEP(a10), a11 = STEP(a11);                                                          \
        __asm__ volatile(""                                                                        \
                         : CON(a0), CON(a1), CON(a2), CON(a3), CON(a4), CON(a5), CON(a6), CON(a7), \
                           CON(a8), CON(a9), CON(a10), CON(a11));                                  \
    }                                                                                              \
    VEC s_ = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));                    \
    s_ = ADD(s_, ADD(ADD(a8, a9), ADD(a10, a11)));                                                 \
    return FIRST(s_)

/* The constraint that keeps a float in a vector register, where the target
 * has a letter for one; elsewhere memory (slower, still a figure). */
#if defined(TSR_PEAK_X86)
#define CON_F(x) "+x"(x)
#elif defined(__aarch64__)
#define CON_F(x) "+w"(x)
#else
#define CON_F(x) "+m"(x)
#endif
#define SET_F(v) ((float)(v))
#define STEP_F(x) __builtin_fmaf(x, 0.999999f, 1e-7f)
#define ADD_F(x, y) ((x) + (y))
#define FIRST_F(x) (x)

static float run_scalar(int64_t rounds)
{
    PEAK_CHAINS(float, SET_F, STEP_F, CON_F, ADD_F, FIRST_F);
}

#ifdef TSR_PEAK_X86
#define CON_X(x) "+x"(x)
#define CON_V(x) "+v"(x)
#define STEP_256(x) _mm256_fmadd_ps(x, _mm256_set1_ps(0.999999f), _mm256_set1_ps(1e-7f))
#define FIRST_256(x) _mm_cvtss_f32(_mm256_castps256_ps128(x))
#define STEP_512(x) _mm512_fmadd_ps(x, _mm512_set1_ps(0.999999f), _mm512_set1_ps(1e-7f))
/* bf16 1.0 times bf16 ~6e-8, in pairs: 32 products summed into 16 floats */
#define STEP_BF16(x)                                                                               \
    _mm512_dpbf16_ps(x, (__m512bh)_mm512_set1_epi16(0x3f80), (__m512bh)_mm512_set1_epi16(0x3380))

__attribute__((target("avx2,fma"))) static float run_avx2(int64_t rounds)
{
    PEAK_CHAINS(__m256, _mm256_set1_ps, STEP_256, CON_X, _mm256_add_ps, FIRST_256);
}

__attribute__((target("avx512f"))) static float run_avx512(int64_t rounds)
{
    PEAK_CHAINS(__m512, _mm512_set1_ps, STEP_512, CON_V, _mm512_add_ps, _mm512_reduce_add_ps);
}

__attribute__((target("avx512f,avx512bf16"))) static float run_bf16(int64_t rounds)
{
    PEAK_CHAINS(__m512, _mm512_set1_ps, STEP_BF16, CON_V, _mm512_add_ps, _mm512_reduce_add_ps);
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
