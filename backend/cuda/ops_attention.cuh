/*
 * backend/cuda/ops_attention.cuh - fused scaled-dot-product attention on the
 * GPU (ops_attention.cu).  Declarations only.
 */
#ifndef TSR_CUDA_OPS_ATTENTION_CUH
#define TSR_CUDA_OPS_ATTENTION_CUH

#include "cuda_internal.cuh"

/* Largest head size the kernel takes (SD's UNets: 40, 64, 80, 160; the
 * VAE's mid block: 512). */
#define TSR_CU_ATTN_MAX_D 512

int tsr_cu_attention(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k, const tsr_tensor *v,
                     const tsr_attention_params *p, tsr_tensor *y);

#endif
