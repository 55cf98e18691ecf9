/*
 * backend/cuda/ops_attention_fa2.cuh - the FlashAttention-2-style
 * tensor-core attention kernel (ops_attention_fa2.cu; its index maps in
 * fa2_layout.h).  Declarations only.
 */
#ifndef TSR_CUDA_OPS_ATTENTION_FA2_CUH
#define TSR_CUDA_OPS_ATTENTION_FA2_CUH

#include "cuda_internal.cuh"

/* Attention on the FA2 kernel where it applies: f16 q, k, v and y, head
 * dim d of 40, 64, 80 or 160, scale > 0, batch x heads <= 65535, 16-byte
 * aligned data, an sm_80+ device.  TSR_OK or an error once launched; 1
 * where it does not apply (the caller tries its other paths), except that
 * with TSR_CUDA_ATTENTION_FA2_STRICT=1 an f16 shape of one of those head
 * dims it declines is an error with the reason. */
int tsr_cu_attention_fa2(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k,
                         const tsr_tensor *v, const tsr_attention_params *p, tsr_tensor *y,
                         int64_t d, float scale);

#endif
