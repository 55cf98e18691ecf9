/*
 * backend/cuda/cuda_backend.cu - the CUDA backend: device memory, one stream
 * per backend, explicit sync, and a cuBLAS handle bound to that stream.
 *
 * Why it is built this way: every op the model code issues is enqueued on
 * the backend's stream, so a UNet step is one stream of work with no host
 * round-trips; the host sees results only after tsr_backend_sync().  Weights
 * and workspaces are single device allocations (arenas) made at load and
 * plan time, so the denoising loop allocates nothing.
 *
 * Events are cudaEvents (timing disabled) recorded on and waited for by the
 * backend's stream; pinned host memory is cudaHostAlloc'd, so uploads and
 * downloads from it overlap with compute.  The backend stores f16 weights
 * and activations (tsr_backend_weight_dtype / act_dtype) and will accumulate
 * in f32.
 *
 * Status: memory, transfers, sync, events and pinned memory are
 * implemented.  Compute ops are added
 * family by family (GEMM on cuBLAS(Lt), conv on cuDNN, fused norm/attention
 * kernels); until an op is here, supports_op() answers false and the caller
 * runs it on the CPU backend.  This build compiles without a GPU, and
 * tsr_cuda_device_count() returns 0 when no driver or device is present, so
 * `--device auto` falls back to the CPU cleanly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.cuh"

extern "C" {
#include "backend/cuda/cuda_backend.h"
}

typedef struct cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t cublas;
} cuda_ctx;

static void cuda_destroy(tsr_backend *b)
{
    cuda_ctx *c = (cuda_ctx *)b->ctx;
    if (c) {
        cudaSetDevice(c->device);
        if (c->cublas)
            cublasDestroy(c->cublas);
        if (c->stream)
            cudaStreamDestroy(c->stream);
        free(c);
    }
    free(b);
}

static void *cuda_alloc(tsr_backend *b, size_t bytes)
{
    cuda_ctx *c = (cuda_ctx *)b->ctx;
    void *p = NULL;
    if (cudaSetDevice(c->device) != cudaSuccess || cudaMalloc(&p, bytes) != cudaSuccess) {
        tsr_errorf(TSR_ERR_NOMEM, "%s: cannot allocate %zu bytes of device memory", b->name,
                   bytes);
        return NULL;
    }
    return p;
}

static void cuda_free(tsr_backend *b, void *p)
{
    cuda_ctx *c = (cuda_ctx *)b->ctx;
    cudaSetDevice(c->device);
    cudaFree(p);
}

static int cuda_upload(tsr_backend *b, void *dst, const void *src, size_t bytes)
{
    cuda_ctx *c = (cuda_ctx *)b->ctx;
    TSR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    return TSR_OK;
}

static int cuda_download(tsr_backend *b, void *dst, const void *src, size_t bytes)
{
    cuda_ctx *c = (cuda_ctx *)b->ctx;
    TSR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    return TSR_OK;
}

static int cuda_sync(tsr_backend *b)
{
    cuda_ctx *c = (cuda_ctx *)b->ctx;
    TSR_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return TSR_OK;
}

static void *cuda_host_alloc_pinned(tsr_backend *b, size_t bytes)
{
    (void)b;
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free_pinned(tsr_backend *b, void *p)
{
    (void)b;
    cudaFreeHost(p);
}

static int cuda_event_create(tsr_backend *b, void **impl)
{
    cuda_ctx *c = (cuda_ctx *)b->ctx;
    cudaEvent_t ev = NULL;
    TSR_CUDA_CHECK(cudaSetDevice(c->device));
    TSR_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    *impl = (void *)ev;
    return TSR_OK;
}

static void cuda_event_destroy(tsr_backend *b, void *impl)
{
    (void)b;
    cudaEventDestroy((cudaEvent_t)impl);
}

static int cuda_event_record(tsr_backend *b, void *impl)
{
    cuda_ctx *c = (cuda_ctx *)b->ctx;
    TSR_CUDA_CHECK(cudaEventRecord((cudaEvent_t)impl, c->stream));
    return TSR_OK;
}

static int cuda_event_wait(tsr_backend *b, void *impl)
{
    cuda_ctx *c = (cuda_ctx *)b->ctx;
    TSR_CUDA_CHECK(cudaStreamWaitEvent(c->stream, (cudaEvent_t)impl, 0));
    return TSR_OK;
}

static int cuda_event_sync(tsr_backend *b, void *impl)
{
    (void)b;
    TSR_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)impl));
    return TSR_OK;
}

static bool cuda_supports_op(tsr_backend *b, const tsr_op_desc *op, char *why, size_t n)
{
    (void)b;
    /* no compute ops yet: callers fall back to the CPU */
    snprintf(why, n, "no CUDA kernel for %s yet", tsr_op_name(op->op));
    return false;
}

/* Filled by name at run time (C++ has no designated initialisers before
 * C++20, and positional ones break when the table grows). */
static tsr_backend_iface cuda_iface_make(void)
{
    tsr_backend_iface i;
    memset(&i, 0, sizeof i);
    i.destroy = cuda_destroy;
    i.alloc = cuda_alloc;
    i.free = cuda_free;
    i.upload = cuda_upload;
    i.download = cuda_download;
    i.sync = cuda_sync;
    i.host_alloc_pinned = cuda_host_alloc_pinned;
    i.host_free_pinned = cuda_host_free_pinned;
    i.event_create = cuda_event_create;
    i.event_destroy = cuda_event_destroy;
    i.event_record = cuda_event_record;
    i.event_wait = cuda_event_wait;
    i.event_sync = cuda_event_sync;
    i.supports_op = cuda_supports_op;
    return i;
}

static const tsr_backend_iface cuda_iface = cuda_iface_make();

extern "C" int tsr_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

static int cuda_create_impl(int device, cuda_ctx *c, tsr_backend *b)
{
    TSR_CUDA_CHECK(cudaSetDevice(device));
    TSR_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    TSR_CUDA_CHECK(cublasCreate(&c->cublas));
    TSR_CUDA_CHECK(cublasSetStream(c->cublas, c->stream));
    cudaDeviceProp prop;
    TSR_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    snprintf(b->name, sizeof b->name, "cuda:%d (%s)", device, prop.name);
    return TSR_OK;
}

extern "C" int tsr_backend_cuda_create(int device, tsr_backend **out)
{
    *out = NULL;
    int n = tsr_cuda_device_count();
    if (device < 0 || device >= n)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "no CUDA device %d (this machine has %d)", device, n);
    tsr_backend *b = (tsr_backend *)calloc(1, sizeof *b);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate the CUDA backend");
    }
    c->device = device;
    b->iface = &cuda_iface;
    b->ctx = c;
    b->kind = TSR_BACKEND_CUDA;
    b->device = device;
    b->host_visible = false;
    b->weight_dtype = TSR_F16;
    b->act_dtype = TSR_F16;
    b->caps = TSR_BACKEND_CAP_ROUND_ROWS;
    b->n_threads = 0;
    int rc = cuda_create_impl(device, c, b);
    if (rc < 0) {
        cuda_destroy(b);
        return rc;
    }
    *out = b;
    return TSR_OK;
}
