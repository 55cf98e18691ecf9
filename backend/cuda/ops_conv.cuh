/*
 * backend/cuda/ops_conv.cuh - conv2d through cuDNN (ops_conv.cu).
 * Declarations only.
 */
#ifndef TSR_CUDA_OPS_CONV_CUH
#define TSR_CUDA_OPS_CONV_CUH

#include "cuda_internal.cuh"

int tsr_cu_conv2d(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                  const tsr_conv2d_params *p, const tsr_epilogue *e, tsr_tensor *y);

#endif
