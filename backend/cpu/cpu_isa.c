/*
 * backend/cpu/cpu_isa.c - the CPU's vector level, read once (cpu_isa.h).
 *
 * AVX2 needs the CPU's AVX2 and FMA bits and the OS saving YMM state
 * (XCR0 bits 1-2); AVX-512 needs F, BW, DQ and VL and the OS saving the
 * opmask and ZMM state as well (XCR0 bits 5-7).  GCC's and clang's
 * <cpuid.h> give the raw leaves; xgetbv is read with inline assembly so the
 * file needs no -mxsave.
 */
#include "backend/cpu/cpu_isa.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static tsr_cpu_isa_level detect(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return TSR_CPU_ISA_SCALAR;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (!fma || !osxsave || !avx)
        return TSR_CPU_ISA_SCALAR;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6)
        return TSR_CPU_ISA_SCALAR;
    if (__get_cpuid_max(0, NULL) < 7)
        return TSR_CPU_ISA_SCALAR;
    __cpuid_count(7, 0, a, b, c, d);
    if (!((b >> 5) & 1))
        return TSR_CPU_ISA_SCALAR; /* no AVX2 */
    const int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    if (f && dq && bw && vl && (xcr0 & 0xe6) == 0xe6)
        return TSR_CPU_ISA_AVX512;
    return TSR_CPU_ISA_AVX2;
}

/* AVX512_BF16: cpuid leaf 7 sub-leaf 1, EAX bit 5 (meaningful with AVX-512) */
static bool detect_bf16(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7)
        return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (a < 1)
        return false;
    __cpuid_count(7, 1, a, b, c, d);
    return (a >> 5) & 1;
}
#else
static tsr_cpu_isa_level detect(void) { return TSR_CPU_ISA_SCALAR; }
static bool detect_bf16(void) { return false; }
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static tsr_cpu_isa_level detected, chosen;
static bool bf16_dot;

static void init(void)
{
    detected = chosen = detect();
    const char *env = getenv("TESSERA_CPU_ISA");
    if (env && *env) {
        tsr_cpu_isa_level want = chosen;
        if (strcmp(env, "scalar") == 0)
            want = TSR_CPU_ISA_SCALAR;
        else if (strcmp(env, "avx2") == 0)
            want = TSR_CPU_ISA_AVX2;
        else if (strcmp(env, "avx512") == 0)
            want = TSR_CPU_ISA_AVX512;
        else
            TSR_WARN("TESSERA_CPU_ISA=%s is not one of scalar, avx2, avx512; ignored", env);
        if (want < chosen)
            chosen = want;
    }
    bf16_dot = chosen == TSR_CPU_ISA_AVX512 && detect_bf16();
    TSR_DEBUG("cpu: vector level %s (the CPU has %s)%s", tsr_cpu_isa_name(chosen),
              tsr_cpu_isa_name(detected), bf16_dot ? ", avx512_bf16" : "");
}

tsr_cpu_isa_level tsr_cpu_isa(void)
{
    pthread_once(&once, init);
    return chosen;
}

tsr_cpu_isa_level tsr_cpu_isa_detected(void)
{
    pthread_once(&once, init);
    return detected;
}

bool tsr_cpu_has_bf16_dot(void)
{
    pthread_once(&once, init);
    return bf16_dot;
}

const char *tsr_cpu_isa_name(tsr_cpu_isa_level level)
{
    switch (level) {
    case TSR_CPU_ISA_AVX512: return "avx512";
    case TSR_CPU_ISA_AVX2: return "avx2";
    default: return "scalar";
    }
}
