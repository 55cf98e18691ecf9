/*
 * backend/cuda/ops_elementwise.cuh - activations, broadcasting arithmetic and
 * data movement on the GPU (ops_elementwise.cu).  Declarations only.
 */
#ifndef TSR_CUDA_OPS_ELEMENTWISE_CUH
#define TSR_CUDA_OPS_ELEMENTWISE_CUH

#include "cuda_internal.cuh"

int tsr_cu_unary(tsr_backend *b, tsr_unary_kind kind, const tsr_tensor *x, tsr_tensor *y);
int tsr_cu_geglu(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
int tsr_cu_binary(tsr_backend *b, tsr_binary_kind kind, const tsr_tensor *a, const tsr_tensor *bt,
                  tsr_tensor *y);
int tsr_cu_scale(tsr_backend *b, const tsr_tensor *x, float s, tsr_tensor *y);
int tsr_cu_concat(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bt, tsr_tensor *y);
int tsr_cu_upsample_nearest(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
int tsr_cu_timestep_embedding(tsr_backend *b, const tsr_tensor *t, const tsr_timestep_params *p,
                              tsr_tensor *y);
int tsr_cu_embedding(tsr_backend *b, const tsr_tensor *ids, const tsr_tensor *table,
                     tsr_tensor *y);
int tsr_cu_convert(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);

#endif
