/*
 * backend/cpu/cpu_backend.h - the CPU backend: f32 compute, OpenBLAS GEMM,
 * a thread pool for everything else.  It is also the oracle other backends
 * are tested against.
 *
 * The storage variants (TSR_F16, TSR_BF16) are a test mode: weights and
 * activations are stored in that dtype, every op widens its inputs to f32,
 * runs the f32 code and rounds its result back.  They prove the model
 * code's f16 path (tensor sizes, uploads through tsr_convert, views) on a
 * machine without a GPU; they are slower than the f32 backend, never
 * faster.
 */
#ifndef TSR_BACKEND_CPU_H
#define TSR_BACKEND_CPU_H

#include "backend/backend.h"

typedef struct tsr_cpu_options {
    int n_threads;     /* 0 = all online CPUs */
    tsr_dtype storage; /* TSR_F32 (the default, zero) or the test variants TSR_F16 / TSR_BF16 */
    bool round_rows;   /* advertise TSR_BACKEND_CAP_ROUND_ROWS (to measure what it costs) */
    /* "cpu-bf16gemm": weights stored bf16, activations f32, conv and linear
     * products in bf16 with f32 sums (AVX512_BF16 only; storage f32) */
    bool bf16gemm;
} tsr_cpu_options;

/* n_threads: 0 = all online CPUs.  Owned: tsr_backend_destroy(). */
int tsr_backend_cpu_create(int n_threads, tsr_backend **out);
int tsr_backend_cpu_create_ex(const tsr_cpu_options *o, tsr_backend **out);

#endif
