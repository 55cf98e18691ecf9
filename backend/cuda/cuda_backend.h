/*
 * backend/cuda/cuda_backend.h - the CUDA backend (compiled when the build
 * finds nvcc; see CMake option TESSERA_CUDA).  Declarations only, so that C
 * code that never includes CUDA headers can open it.
 */
#ifndef TSR_BACKEND_CUDA_H
#define TSR_BACKEND_CUDA_H

#include "backend/backend.h"

/* Number of usable CUDA devices; 0 when the driver or a GPU is absent. */
int tsr_cuda_device_count(void);

/* Open device `device`.  TSR_ERR_UNSUPPORTED when there is no such GPU.
 * Owned: tsr_backend_destroy(). */
int tsr_backend_cuda_create(int device, tsr_backend **out);

#endif
