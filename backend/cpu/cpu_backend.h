/*
 * backend/cpu/cpu_backend.h - the CPU backend: f32 compute, OpenBLAS GEMM,
 * a thread pool for everything else.  It is also the oracle other backends
 * are tested against.
 */
#ifndef TSR_BACKEND_CPU_H
#define TSR_BACKEND_CPU_H

#include "backend/backend.h"

/* n_threads: 0 = all online CPUs.  Owned: tsr_backend_destroy(). */
int tsr_backend_cpu_create(int n_threads, tsr_backend **out);

#endif
