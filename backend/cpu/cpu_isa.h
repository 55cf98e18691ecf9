/*
 * backend/cpu/cpu_isa.h - which vector instruction set the CPU backend's
 * hand-written kernels use, chosen once at run time.
 *
 * Why run time: one binary must run on the machine that built it and on
 * others (a -DTESSERA_NATIVE=OFF package, a container moved to an older or
 * newer host).  The kernels for each level are compiled for that level
 * alone (their own translation units with their own -m flags), whatever
 * the rest of the build targets, and the backend calls the best one the CPU
 * and the OS support.  One mechanism for the whole backend, so every op (and
 * oneDNN's ISA cap) agrees on what "avx512" means here.
 *
 * TESSERA_CPU_ISA=scalar|avx2|avx512 caps the level (to compare kernels, or
 * to rule out one that misbehaves); a level above what the CPU has is capped
 * to the CPU, an unknown value logs a warning and is ignored.
 */
#ifndef TSR_BACKEND_CPU_ISA_H
#define TSR_BACKEND_CPU_ISA_H

typedef enum tsr_cpu_isa_level {
    TSR_CPU_ISA_SCALAR = 0,
    TSR_CPU_ISA_AVX2 = 1,
    TSR_CPU_ISA_AVX512 = 2
} tsr_cpu_isa_level;

/* Detected once (cpuid + xgetbv: AVX2+FMA with OS YMM support;
 * AVX512F+BW+DQ+VL with OS ZMM support), then capped by the environment
 * variable TESSERA_CPU_ISA=scalar|avx2|avx512 (a value above what the CPU
 * has is capped to the CPU, an unknown value logs a warning and is
 * ignored).  Thread-safe (pthread_once). */
tsr_cpu_isa_level tsr_cpu_isa(void);
const char *tsr_cpu_isa_name(tsr_cpu_isa_level l); /* "scalar", "avx2", "avx512" */

#endif
