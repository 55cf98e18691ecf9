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
 * Ops live one family per file (ops_norm.cu, ops_elementwise.cu,
 * ops_attention.cu, ops_gemm.cu, ops_conv.cu; declarations in the matching
 * .cuh), as ggml does; this file holds the context, the table and
 * supports_op(), which says yes exactly for what those files implement and
 * names the reason otherwise.  Design notes: docs/cuda.md.  This build
 * compiles without a GPU, and tsr_cuda_device_count() returns 0 when no
 * driver or device is present, so `--device auto` falls back to the CPU
 * cleanly.
 *
 * A sticky CUDA error (an illegal address, a launch failure) poisons the
 * CUDA context of the device it happened on: it is recorded for that device
 * (tsr_cuda_mark_sticky, cuda_sticky.h) and every later op of every backend
 * on that device fails fast with that message; other devices go on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"
#include "ops_attention.cuh"
#include "ops_attention_cudnn.cuh"
#include "ops_conv.cuh"
#include "ops_elementwise.cuh"
#include "ops_gemm.cuh"
#include "ops_norm.cuh"

extern "C" {
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_sticky.h"
}

/* The failing call ran on the calling thread's current device (ops run on
 * the thread that made their backend, whose device it set; alloc, events
 * and destroy set it again), so that device's context is the poisoned one.
 * Should the runtime not say, every device is marked: failing too much
 * beats running on a poisoned context. */
extern "C" void tsr_cuda_mark_sticky(const char *what)
{
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess)
        device = -1;
    tsr_cu_sticky_mark(device, what);
}

int tsr_cu_usable(tsr_backend *b, const char *op)
{
    const int device = tsr_cu_ctx(b)->device;
    const char *why = tsr_cu_sticky_error(device);
    if (why)
        return tsr_errorf(TSR_ERR_BACKEND,
                          "%s: CUDA device %d is unusable after an earlier error (%s); "
                          "restart the process",
                          op, device, why);
    return TSR_OK;
}

void *tsr_cu_scratch(tsr_backend *b, size_t bytes)
{
    cuda_ctx *c = tsr_cu_ctx(b);
    if (bytes <= c->scratch_cap)
        return c->scratch;
    /* grow (rare: first use of a larger shape): the old buffer may still be
     * read by queued work, so wait for the stream before freeing it */
    if (c->scratch) {
        if (cudaStreamSynchronize(c->stream) != cudaSuccess) {
            tsr_errorf(TSR_ERR_BACKEND, "scratch: stream failed: %s",
                       cudaGetErrorString(cudaGetLastError()));
            return NULL;
        }
        cudaFree(c->scratch);
        c->scratch = NULL;
        c->scratch_cap = 0;
    }
    size_t cap = bytes + bytes / 4;
    cap = (cap + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    if (cudaMalloc(&c->scratch, cap) != cudaSuccess) {
        cudaGetLastError();
        c->scratch = NULL;
        tsr_errorf(TSR_ERR_NOMEM, "%s: cannot allocate %zu bytes of scratch", b->name, cap);
        return NULL;
    }
    c->scratch_cap = cap;
    return c->scratch;
}

static void cuda_destroy(tsr_backend *b)
{
    cuda_ctx *c = (cuda_ctx *)b->ctx;
    if (c) {
        cudaSetDevice(c->device);
        if (c->stream)
            cudaStreamSynchronize(c->stream);
        tsr_cu_attention_cudnn_release(c); /* its plans hold the cuDNN handle */
        if (c->cudnn)
            cudnnDestroy(c->cudnn);
        if (c->lt)
            cublasLtDestroy(c->lt);
        if (c->cublas)
            cublasDestroy(c->cublas);
        cudaFree(c->scratch);
        cudaFree(c->lt_workspace);
        cudaFree(c->flag_dev);
        if (c->flag_host)
            cudaFreeHost(c->flag_host);
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

static bool is_float(tsr_dtype dt) { return dt == TSR_F32 || dt == TSR_F16 || dt == TSR_BF16; }

/* Says yes exactly for what ops_*.cu implement.  Activations: f32, f16,
 * bf16.  Parameters (norm affines, biases, embedding tables, binary's b,
 * the residual) may be any float dtype: the kernels widen each element.
 * GEMM and convolution weights must have the activations' dtype (the
 * weights loader stores them in tsr_backend_weight_dtype). */
static bool cuda_supports_op(tsr_backend *b, const tsr_op_desc *op, char *why, size_t n)
{
    if (!is_float(op->dtype)) {
        snprintf(why, n, "%s activations are not supported", tsr_dtype_name(op->dtype));
        return false;
    }
    const char *sticky = tsr_cu_sticky_error(tsr_cu_ctx(b)->device);
    if (sticky) {
        snprintf(why, n, "the device is unusable after an earlier error (%s)", sticky);
        return false;
    }
    if (!op->dst)
        return true; /* coarse query: every op has a kernel */
    for (int i = 0; i < TSR_OP_MAX_SRC; i++) {
        const tsr_tensor *t = op->src[i];
        if (!t)
            continue;
        const bool ids = (op->op == TSR_OP_EMBEDDING && i == 0) ||
                         (op->op == TSR_OP_TIMESTEP_EMBEDDING && i == 0);
        if (ids)
            continue;
        if (!is_float(t->dtype)) {
            snprintf(why, n, "input %d is %s", i, tsr_dtype_name(t->dtype));
            return false;
        }
    }
    switch (op->op) {
    case TSR_OP_CONV2D:
    case TSR_OP_LINEAR:
        if (op->src[1]->dtype != op->dtype) {
            snprintf(why, n, "%s weights with %s activations (store weights in the activation dtype)",
                     tsr_dtype_name(op->src[1]->dtype), tsr_dtype_name(op->dtype));
            return false;
        }
        if (op->op == TSR_OP_CONV2D && op->dtype == TSR_BF16) {
            snprintf(why, n, "bf16 convolution is not enabled (cuDNN NHWC bf16 is unchecked)");
            return false;
        }
        return true;
    case TSR_OP_MATMUL:
        if (op->src[1]->dtype != op->dtype) {
            snprintf(why, n, "b is %s, a is %s", tsr_dtype_name(op->src[1]->dtype),
                     tsr_dtype_name(op->dtype));
            return false;
        }
        return true;
    case TSR_OP_ATTENTION: {
        const int64_t hd = op->src[0]->ne[op->src[0]->ndim - 1];
        const int64_t d = op->p.attention.heads > 0 ? hd / op->p.attention.heads : 0;
        if (d < 1 || d > TSR_CU_ATTN_MAX_D) {
            snprintf(why, n, "head size %lld has no kernel (at most %d)", (long long)d,
                     TSR_CU_ATTN_MAX_D);
            return false;
        }
        if (op->src[1]->dtype != op->dtype || op->src[2]->dtype != op->dtype) {
            snprintf(why, n, "q, k and v must share a dtype");
            return false;
        }
        return true;
    }
    case TSR_OP_TIMESTEP_EMBEDDING:
        if (op->src[0]->dtype != TSR_F32) {
            snprintf(why, n, "timesteps must be f32");
            return false;
        }
        return true;
    case TSR_OP_EMBEDDING:
        if (op->src[0]->dtype != TSR_I32) {
            snprintf(why, n, "ids must be i32");
            return false;
        }
        return true;
    default: return true;
    }
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
    i.conv2d = tsr_cu_conv2d;
    i.linear = tsr_cu_linear;
    i.matmul = tsr_cu_matmul;
    i.group_norm = tsr_cu_group_norm;
    i.layer_norm = tsr_cu_layer_norm;
    i.softmax = tsr_cu_softmax;
    i.attention = tsr_cu_attention;
    i.unary = tsr_cu_unary;
    i.geglu = tsr_cu_geglu;
    i.binary = tsr_cu_binary;
    i.scale = tsr_cu_scale;
    i.concat = tsr_cu_concat;
    i.upsample_nearest = tsr_cu_upsample_nearest;
    i.timestep_embedding = tsr_cu_timestep_embedding;
    i.embedding = tsr_cu_embedding;
    i.convert = tsr_cu_convert;
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
    /* f32 GEMMs stay f32 (no TF32); f16 ones accumulate in f32 by their
     * compute type (ops_gemm.cu) */
    TSR_CUDA_CHECK(cublasSetMathMode(c->cublas, CUBLAS_DEFAULT_MATH));
    TSR_CUDA_CHECK(cublasLtCreate(&c->lt));
    TSR_CUDA_CHECK(cudnnCreate(&c->cudnn));
    TSR_CUDA_CHECK(cudnnSetStream(c->cudnn, c->stream));
    TSR_CUDA_CHECK(cudaMalloc(&c->lt_workspace, TSR_CU_LT_WORKSPACE));
    TSR_CUDA_CHECK(cudaMalloc((void **)&c->flag_dev, sizeof(int)));
    TSR_CUDA_CHECK(cudaHostAlloc((void **)&c->flag_host, sizeof(int), cudaHostAllocDefault));
    cudaDeviceProp prop;
    TSR_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    c->sm_count = prop.multiProcessorCount;
    b->memory_bytes = prop.totalGlobalMem;
    tsr_cu_attention_config(c);
    snprintf(b->name, sizeof b->name, "cuda:%d (%s)", device, prop.name);
    TSR_INFO("%s: sm_%d%d, %d SMs, cuDNN %zu, cuBLASLt %zu", b->name, prop.major, prop.minor,
             prop.multiProcessorCount, cudnnGetVersion(), cublasLtGetVersion());
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
