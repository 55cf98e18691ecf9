/*
 * backend/cpu/cpu_isa.h - which vector instruction set the CPU kernels use.
 *
 * Why Tessera decides this itself: the kernels' speed must not hinge on how
 * a library guesses the CPU (OpenBLAS reads OPENBLAS_CORETYPE, and some
 * hosts pin it to an older core as a guard).  The level is read once from
 * cpuid and xgetbv (the instructions and the OS's saving of their
 * registers) and may be lowered, never raised, by the environment variable
 * TESSERA_CPU_ISA=scalar|avx2|avx512: the tests use that to run the same
 * data through every kernel a machine has and compare.
 */
#ifndef TSR_BACKEND_CPU_ISA_H
#define TSR_BACKEND_CPU_ISA_H

#include <stdbool.h>

typedef enum tsr_cpu_isa_level {
    TSR_CPU_ISA_SCALAR = 0, /* portable C (compiled FMA where the build allows) */
    TSR_CPU_ISA_AVX2 = 1,   /* AVX2 + FMA, 8 floats per register */
    TSR_CPU_ISA_AVX512 = 2, /* AVX-512 F/BW/DQ/VL, 16 floats per register */
} tsr_cpu_isa_level;

/* Detected once (thread-safe), then capped by TESSERA_CPU_ISA: a value
 * above what the CPU has is capped to the CPU; an unknown value logs a
 * warning and is ignored. */
tsr_cpu_isa_level tsr_cpu_isa(void);
/* What the CPU itself supports, before the environment's cap. */
tsr_cpu_isa_level tsr_cpu_isa_detected(void);
/* Whether the chosen level is AVX-512 and the CPU has AVX512_BF16 (the
 * bf16 dot product vdpbf16ps): what the "cpu-bf16gemm" variant needs. */
bool tsr_cpu_has_bf16_dot(void);
/* "scalar", "avx2", "avx512" */
const char *tsr_cpu_isa_name(tsr_cpu_isa_level level);

/* The machine's measured multiply-add ceiling (cpu_peak.c): register-only
 * chains of the kind's instruction on `threads` threads at once, about
 * `seconds` each (<= 0: 0.2).  GFLOP/s counting 2 per multiply-add; 0 where
 * the kind is not available at the chosen level (tsr_cpu_isa, so
 * TESSERA_CPU_ISA caps it too) or a thread would not start. */
typedef enum tsr_cpu_peak_kind {
    TSR_CPU_PEAK_SCALAR, /* scalar fmaf */
    TSR_CPU_PEAK_AVX2,   /* vfmadd on 8 floats */
    TSR_CPU_PEAK_AVX512, /* vfmadd on 16 floats */
    TSR_CPU_PEAK_BF16,   /* vdpbf16ps: 32 bf16 products summed into 16 floats */
} tsr_cpu_peak_kind;
#define TSR_CPU_PEAK_MAX_THREADS 256
bool tsr_cpu_peak_available(tsr_cpu_peak_kind kind);
const char *tsr_cpu_peak_name(tsr_cpu_peak_kind kind);
double tsr_cpu_peak_gflops(tsr_cpu_peak_kind kind, int threads, double seconds);

#endif
