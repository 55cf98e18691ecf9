/*
 * backend/cuda/cuda_internal.cuh - what the CUDA op files share: the backend
 * context (stream, library handles, grow-only scratch, the conv algorithm
 * cache) and small launch helpers.  Each op family's entry points are
 * declared in its own declaration-only header (ops_norm.cuh, ...), as ggml
 * does, and registered in cuda_backend.cu's table.
 *
 * Scratch: one device buffer per backend that only grows (cuDNN and
 * cuBLASLt workspaces, group-norm statistics, padded conv inputs).  It grows
 * on the first call of a shape and never after, so a denoising loop
 * allocates nothing once its first step has run.  Ops run one at a time on
 * a backend's stream (a backend is not shared by two threads), so one
 * buffer is enough; it is only freed after a stream sync.
 */
#ifndef TSR_CUDA_INTERNAL_CUH
#define TSR_CUDA_INTERNAL_CUH

#include <stdint.h>

#include "cuda_check.cuh"
#include "cuda_math.h"

extern "C" {
#include "backend/backend.h"
}

#define TSR_CU_CONV_CACHE 256

typedef struct cuda_conv_algo {
    int64_t key[12]; /* n, h, w, ci, co, kh, kw, stride_h, stride_w, pad_h, pad_w, dtype */
    cudnnConvolutionFwdAlgo_t algo;
    size_t workspace;
    bool used;
} cuda_conv_algo;

/* ops_attention_cudnn.cu's per-shape cuDNN SDPA plans (opaque here). */
struct tsr_cu_sdpa_cache;

typedef struct cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t cublas;
    cublasLtHandle_t lt;
    cudnnHandle_t cudnn;
    void *lt_workspace; /* owned; cuBLASLt's (TSR_CU_LT_WORKSPACE bytes) */
    void *scratch; /* owned; grow-only, see above */
    size_t scratch_cap;
    int *flag_dev;  /* owned; embedding range check */
    int *flag_host; /* owned, pinned */
    int sm_count;
    int att_path;            /* tsr_cu_att_path: TSR_CUDA_ATTENTION, read at creation */
    size_t att_scratch_max;  /* S/P bytes per chunk: TSR_CUDA_ATTENTION_SCRATCH_MIB */
    struct tsr_cu_sdpa_cache *sdpa; /* owned; made on first use (ops_attention_cudnn.cu) */
    cuda_conv_algo conv_cache[TSR_CU_CONV_CACHE];
} cuda_ctx;

static inline cuda_ctx *tsr_cu_ctx(tsr_backend *b) { return (cuda_ctx *)b->ctx; }

/* Scratch of at least `bytes` (contents not kept); NULL after raising an
 * error.  Valid until the next call. */
void *tsr_cu_scratch(tsr_backend *b, size_t bytes);

/* Fails fast once a sticky error made b's device unusable (op name and
 * device in the message; other devices are unaffected: cuda_sticky.h);
 * TSR_OK otherwise. */
int tsr_cu_usable(tsr_backend *b, const char *op);

/* Blocks of `threads` for n elements, capped (grid-stride loops do the rest). */
static inline unsigned tsr_cu_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1)
        b = 1;
    if (b > (1 << 20))
        b = 1 << 20;
    return (unsigned)b;
}

/* The epilogue of conv2d and linear, in backend.h's order:
 * y = act((y + bias) + residual), bias [C] over y's last dim (any float
 * dtype, NULL = none), residual broadcast as tsr_binary's b. */
int tsr_cu_epilogue(tsr_backend *b, tsr_tensor *y, const tsr_tensor *bias, const tsr_epilogue *e,
                    const char *op);

#endif
