/*
 * backend/cuda/ops_attention_cudnn.cuh - attention on cuDNN's fused SDPA
 * (flash attention) through the backend graph API (ops_attention_cudnn.cu).
 * Declarations only.
 */
#ifndef TSR_CUDA_OPS_ATTENTION_CUDNN_CUH
#define TSR_CUDA_OPS_ATTENTION_CUDNN_CUH

#include "cuda_internal.cuh"

/* y = softmax(scale * q k^T) v on cuDNN's SDPA node, with a plan cached per
 * shape in the context.  `d` is the head size, `scale` the resolved one (never
 * 0).  Returns 1 where this path does not apply (dtype, head size, causal,
 * alignment, a cuDNN older than 9.13, or a shape whose plan cuDNN would not
 * build: the caller runs another path), TSR_OK when it ran, or a negative
 * error when executing the plan failed.  With TSR_CUDA_ATTENTION_CUDNN_STRICT=1
 * a shape that passes the static checks but for which cuDNN builds no plan
 * fails with TSR_ERR_BACKEND and cuDNN's reason instead of returning 1: how
 * the GPU test proves the path really ran (TSR_ERR_UNSUPPORTED would read as
 * a skip there). */
int tsr_cu_attention_cudnn(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k,
                           const tsr_tensor *v, const tsr_attention_params *p, tsr_tensor *y,
                           int64_t d, float scale);

/* Destroys the context's plan cache (every cuDNN descriptor it holds).
 * Called by the backend's destroy, after the stream is synchronised and
 * before the cuDNN handle is destroyed; safe when no plan was ever built. */
void tsr_cu_attention_cudnn_release(cuda_ctx *c);

#endif
