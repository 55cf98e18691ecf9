/*
 * backend/cpu/cpu_isa.c - run-time detection of the vector ISA (see
 * cpu_isa.h).
 *
 * A CPU flag alone is not enough: the OS must also save the wide registers
 * on a context switch, which XCR0 (read with xgetbv, allowed once OSXSAVE is
 * set) tells: bits 1-2 (SSE, AVX state) for YMM, plus 5-7 (opmask, ZMM
 * upper halves, ZMM16-31) for AVX-512.  The answer is computed once under
 * pthread_once, so concurrent first callers see one value and the
 * environment is read (and a bad value warned about) once per process.
 */
#include "backend/cpu/cpu_isa.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xcr0(void)
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
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28);
    if (!fma || !osxsave || !avx)
        return TSR_CPU_ISA_SCALAR;
    const uint64_t xcr = xcr0();
    if ((xcr & 0x6) != 0x6) /* XMM and YMM state */
        return TSR_CPU_ISA_SCALAR;
    if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return TSR_CPU_ISA_SCALAR;
    if (!(b & (1u << 5))) /* AVX2 */
        return TSR_CPU_ISA_SCALAR;
    const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    if (f && dq && bw && vl && (xcr & 0xe6) == 0xe6) /* + opmask, ZMM_Hi256, Hi16_ZMM */
        return TSR_CPU_ISA_AVX512;
    return TSR_CPU_ISA_AVX2;
}
#else
static tsr_cpu_isa_level detect(void) { return TSR_CPU_ISA_SCALAR; }
#endif

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static tsr_cpu_isa_level isa_level = TSR_CPU_ISA_SCALAR;

static void isa_init(void)
{
    tsr_cpu_isa_level l = detect();
    const char *env = getenv("TESSERA_CPU_ISA");
    if (env && *env) {
        int want = -1;
        for (int i = TSR_CPU_ISA_SCALAR; i <= TSR_CPU_ISA_AVX512; i++)
            if (strcmp(env, tsr_cpu_isa_name((tsr_cpu_isa_level)i)) == 0)
                want = i;
        if (want < 0)
            TSR_WARN("TESSERA_CPU_ISA=%s is not scalar, avx2 or avx512; ignored", env);
        else if (want < (int)l)
            l = (tsr_cpu_isa_level)want;
    }
    isa_level = l;
}

tsr_cpu_isa_level tsr_cpu_isa(void)
{
    pthread_once(&isa_once, isa_init);
    return isa_level;
}

const char *tsr_cpu_isa_name(tsr_cpu_isa_level l)
{
    switch (l) {
    case TSR_CPU_ISA_AVX2:
        return "avx2";
    case TSR_CPU_ISA_AVX512:
        return "avx512";
    default:
        return "scalar";
    }
}
