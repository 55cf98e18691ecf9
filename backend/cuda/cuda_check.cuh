/*
 * backend/cuda/cuda_check.cuh - one status-check macro for every NVIDIA
 * library the backend calls (CUDA runtime, cuBLAS; cuDNN and NCCL join when
 * their ops land).  A failure is logged with the call, file and line, raised
 * as TSR_ERR_BACKEND with the library's own error name, and returned: a
 * failing kernel fails one request, never the process.
 */
#ifndef TSR_CUDA_CHECK_CUH
#define TSR_CUDA_CHECK_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "core/error.h"
#include "core/log.h"
}

static inline const char *tsr_cuda_status_name(cudaError_t e) { return cudaGetErrorString(e); }
static inline const char *tsr_cuda_status_name(cublasStatus_t s) { return cublasGetStatusString(s); }
static inline bool tsr_cuda_status_ok(cudaError_t e) { return e == cudaSuccess; }
static inline bool tsr_cuda_status_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }

#define TSR_CUDA_CHECK(call)                                                                  \
    do {                                                                                      \
        auto tsr_cuda_st_ = (call);                                                           \
        if (!tsr_cuda_status_ok(tsr_cuda_st_)) {                                              \
            TSR_ERROR("%s failed at %s:%d: %s", #call, __FILE__, __LINE__,                    \
                      tsr_cuda_status_name(tsr_cuda_st_));                                    \
            return tsr_errorf(TSR_ERR_BACKEND, "%s: %s", #call,                               \
                              tsr_cuda_status_name(tsr_cuda_st_));                            \
        }                                                                                     \
    } while (0)

#endif
