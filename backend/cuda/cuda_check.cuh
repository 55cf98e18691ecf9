/*
 * backend/cuda/cuda_check.cuh - one status-check macro for every NVIDIA
 * library the backend calls (CUDA runtime, cuBLAS, cuBLASLt, cuDNN).  A
 * failure is logged with the call, file and line, raised as TSR_ERR_BACKEND
 * (TSR_ERR_NOMEM for an out-of-memory) with the library's own error name,
 * and returned: a failing kernel fails one request, never the process.
 *
 * A CUDA error that poisons the context (an illegal address, a launch
 * failure: "sticky" errors) cannot be recovered inside the process; the
 * backend records it for the device it happened on (tsr_cuda_mark_sticky,
 * cuda_sticky.h) and every later op on that device fails fast with a
 * message saying the device is unusable.
 */
#ifndef TSR_CUDA_CHECK_CUH
#define TSR_CUDA_CHECK_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

extern "C" {
#include "core/error.h"
#include "core/log.h"
}

static inline const char *tsr_cuda_status_name(cudaError_t e) { return cudaGetErrorString(e); }
static inline const char *tsr_cuda_status_name(cublasStatus_t s) { return cublasGetStatusString(s); }
static inline const char *tsr_cuda_status_name(cudnnStatus_t s) { return cudnnGetErrorString(s); }
static inline bool tsr_cuda_status_ok(cudaError_t e) { return e == cudaSuccess; }
static inline bool tsr_cuda_status_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }
static inline bool tsr_cuda_status_ok(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS; }
static inline int tsr_cuda_status_code(cudaError_t e)
{
    return e == cudaErrorMemoryAllocation ? TSR_ERR_NOMEM : TSR_ERR_BACKEND;
}
static inline int tsr_cuda_status_code(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_ALLOC_FAILED ? TSR_ERR_NOMEM : TSR_ERR_BACKEND;
}
static inline int tsr_cuda_status_code(cudnnStatus_t s)
{
    return s == CUDNN_STATUS_ALLOC_FAILED ? TSR_ERR_NOMEM : TSR_ERR_BACKEND;
}

/* Errors after which the CUDA context is unusable for the process. */
static inline bool tsr_cuda_is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout: return true;
    default: return false;
    }
}
static inline bool tsr_cuda_is_sticky(cublasStatus_t) { return false; }
static inline bool tsr_cuda_is_sticky(cudnnStatus_t) { return false; }

/* Records a sticky error for the calling thread's current device
 * (cuda_backend.cu). */
extern "C" void tsr_cuda_mark_sticky(const char *what);

#define TSR_CUDA_CHECK(call)                                                                  \
    do {                                                                                      \
        auto tsr_cuda_st_ = (call);                                                           \
        if (!tsr_cuda_status_ok(tsr_cuda_st_)) {                                              \
            TSR_ERROR("%s failed at %s:%d: %s", #call, __FILE__, __LINE__,                    \
                      tsr_cuda_status_name(tsr_cuda_st_));                                    \
            if (tsr_cuda_is_sticky(tsr_cuda_st_))                                             \
                tsr_cuda_mark_sticky(tsr_cuda_status_name(tsr_cuda_st_));                     \
            return tsr_errorf(tsr_cuda_status_code(tsr_cuda_st_), "%s (%s:%d): %s", #call,    \
                              __FILE__, __LINE__, tsr_cuda_status_name(tsr_cuda_st_));        \
        }                                                                                     \
    } while (0)

/* After a kernel launch: a bad configuration shows here, an execution
 * fault at the next synchronising call. */
#define TSR_CUDA_LAUNCHED(opname)                                                             \
    do {                                                                                      \
        cudaError_t tsr_cuda_le_ = cudaGetLastError();                                        \
        if (tsr_cuda_le_ != cudaSuccess) {                                                    \
            TSR_ERROR("%s: kernel launch failed at %s:%d: %s", opname, __FILE__, __LINE__,    \
                      cudaGetErrorString(tsr_cuda_le_));                                      \
            if (tsr_cuda_is_sticky(tsr_cuda_le_))                                             \
                tsr_cuda_mark_sticky(cudaGetErrorString(tsr_cuda_le_));                       \
            return tsr_errorf(TSR_ERR_BACKEND, "%s: kernel launch failed (%s:%d): %s",        \
                              opname, __FILE__, __LINE__, cudaGetErrorString(tsr_cuda_le_));  \
        }                                                                                     \
    } while (0)

#endif
