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

/* Which attention path runs (ops_attention.cu): AUTO is the default order;
 * the others force one where it applies (CUDNN: ops_attention_cudnn.cu). */
enum tsr_cu_att_path {
    TSR_CU_ATT_AUTO,
    TSR_CU_ATT_WMMA,
    TSR_CU_ATT_GEMM,
    TSR_CU_ATT_FLASH,
    TSR_CU_ATT_FA2, /* ops_attention_fa2.cu */
    TSR_CU_ATT_CUDNN
};

/* Reads TSR_CUDA_ATTENTION (cudnn|fa2|wmma|gemm|flash) and
 * TSR_CUDA_ATTENTION_SCRATCH_MIB (default 256) into the context, once, when
 * the backend is created. */
void tsr_cu_attention_config(cuda_ctx *c);

int tsr_cu_attention(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k, const tsr_tensor *v,
                     const tsr_attention_params *p, tsr_tensor *y);

#endif
