/*
 * backend/cuda/ops_norm.cuh - group norm (+ fused SiLU), layer norm and
 * softmax on the GPU (ops_norm.cu).  Declarations only.
 */
#ifndef TSR_CUDA_OPS_NORM_CUH
#define TSR_CUDA_OPS_NORM_CUH

#include "cuda_internal.cuh"

int tsr_cu_group_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                      const tsr_tensor *beta, int groups, float eps, bool silu, tsr_tensor *y);
int tsr_cu_layer_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                      const tsr_tensor *beta, float eps, tsr_tensor *y);
int tsr_cu_softmax(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);

#endif
