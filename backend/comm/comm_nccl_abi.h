/*
 * backend/comm/comm_nccl_abi.h - the part of NCCL's and the CUDA driver's
 * C ABI that comm_nccl.c uses, declared here under Tessera's own names.
 *
 * Why declare rather than include nccl.h and cuda.h: the nccl comm is part
 * of every build (CI has neither header), and both libraries are dlopened
 * at run time, so all the program needs is the few types, constants and
 * signatures below.  They are the stable ABI of NCCL 2.x (the enum values
 * and ncclUniqueId's 128 bytes have not changed since 2.0; ncclCommAbort
 * and ncclCommGetAsyncError exist since 2.4) and of the CUDA driver API
 * (the _v2 entry points since CUDA 4).  tests/comm/test_comm_nccl_abi.c
 * checks every value here against nccl.h where a build machine has it.
 */
#ifndef TSR_BACKEND_COMM_NCCL_ABI_H
#define TSR_BACKEND_COMM_NCCL_ABI_H

#include <stddef.h>

/* ---- NCCL ---- */
typedef struct tsr_nccl_comm_st *tsr_nccl_comm; /* ncclComm_t */
typedef int tsr_nccl_result;                    /* ncclResult_t */
enum {
    TSR_NCCL_SUCCESS = 0,
    TSR_NCCL_UNHANDLED_CUDA_ERROR = 1,
    TSR_NCCL_SYSTEM_ERROR = 2,
    TSR_NCCL_INTERNAL_ERROR = 3,
    TSR_NCCL_INVALID_ARGUMENT = 4,
    TSR_NCCL_INVALID_USAGE = 5,
    TSR_NCCL_REMOTE_ERROR = 6,
    TSR_NCCL_IN_PROGRESS = 7,
};
typedef int tsr_nccl_data_type; /* ncclDataType_t */
enum {
    TSR_NCCL_UINT8 = 1,
    TSR_NCCL_FLOAT16 = 6,
    TSR_NCCL_FLOAT32 = 7,
    TSR_NCCL_BFLOAT16 = 9,
};
typedef int tsr_nccl_red_op; /* ncclRedOp_t */
enum { TSR_NCCL_SUM = 0 };
#define TSR_NCCL_UNIQUE_ID_BYTES 128
typedef struct tsr_nccl_unique_id {
    char internal[TSR_NCCL_UNIQUE_ID_BYTES];
} tsr_nccl_unique_id;

typedef struct tsr_nccl_api {
    tsr_nccl_result (*get_version)(int *version);       /* ncclGetVersion */
    const char *(*get_error_string)(tsr_nccl_result r); /* ncclGetErrorString */
    tsr_nccl_result (*comm_init_all)(tsr_nccl_comm *comms, int ndev,
                                     const int *devlist); /* ncclCommInitAll */
    tsr_nccl_result (*comm_destroy)(tsr_nccl_comm comm);  /* ncclCommDestroy */
    tsr_nccl_result (*comm_abort)(tsr_nccl_comm comm);    /* ncclCommAbort */
    tsr_nccl_result (*comm_get_async_error)(tsr_nccl_comm comm,
                                            tsr_nccl_result *err); /* ncclCommGetAsyncError */
    tsr_nccl_result (*all_gather)(const void *send, void *recv, size_t sendcount,
                                  tsr_nccl_data_type dt, tsr_nccl_comm comm,
                                  void *stream); /* ncclAllGather */
    tsr_nccl_result (*broadcast)(const void *send, void *recv, size_t count, tsr_nccl_data_type dt,
                                 int root, tsr_nccl_comm comm, void *stream); /* ncclBroadcast */
    tsr_nccl_result (*all_reduce)(const void *send, void *recv, size_t count, tsr_nccl_data_type dt,
                                  tsr_nccl_red_op op, tsr_nccl_comm comm,
                                  void *stream);       /* ncclAllReduce */
    const char *(*get_last_error)(tsr_nccl_comm comm); /* ncclGetLastError, 2.13+;
                                                        * may be NULL */
} tsr_nccl_api;

/* ---- CUDA driver API ---- */
typedef int tsr_cu_result; /* CUresult */
enum {
    TSR_CU_SUCCESS = 0,
    TSR_CU_ERROR_NO_DEVICE = 100,
    TSR_CU_ERROR_NOT_READY = 600,
};
typedef int tsr_cu_device;                      /* CUdevice */
typedef struct tsr_cu_ctx_st *tsr_cu_context;   /* CUcontext */
typedef struct tsr_cu_stream_st *tsr_cu_stream; /* CUstream == cudaStream_t */
typedef unsigned long long tsr_cu_deviceptr;    /* CUdeviceptr (64-bit) */
enum { TSR_CU_STREAM_NON_BLOCKING = 1 };

typedef struct tsr_cu_api {
    tsr_cu_result (*init)(unsigned flags);                        /* cuInit */
    tsr_cu_result (*device_get_count)(int *count);                /* cuDeviceGetCount */
    tsr_cu_result (*device_get)(tsr_cu_device *dev, int ordinal); /* cuDeviceGet */
    tsr_cu_result (*primary_ctx_retain)(tsr_cu_context *ctx,
                                        tsr_cu_device dev);  /* cuDevicePrimaryCtxRetain */
    tsr_cu_result (*primary_ctx_release)(tsr_cu_device dev); /* cuDevicePrimaryCtxRelease_v2 */
    tsr_cu_result (*ctx_set_current)(tsr_cu_context ctx);    /* cuCtxSetCurrent */
    tsr_cu_result (*stream_create)(tsr_cu_stream *s, unsigned flags); /* cuStreamCreate */
    tsr_cu_result (*stream_destroy)(tsr_cu_stream s);                 /* cuStreamDestroy_v2 */
    tsr_cu_result (*stream_query)(tsr_cu_stream s);                   /* cuStreamQuery */
    tsr_cu_result (*mem_alloc)(tsr_cu_deviceptr *p, size_t bytes);    /* cuMemAlloc_v2 */
    tsr_cu_result (*mem_free)(tsr_cu_deviceptr p);                    /* cuMemFree_v2 */
    tsr_cu_result (*get_error_name)(tsr_cu_result r, const char **s); /* cuGetErrorName */
} tsr_cu_api;

#endif
