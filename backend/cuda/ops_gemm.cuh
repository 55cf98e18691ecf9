/*
 * backend/cuda/ops_gemm.cuh - linear (cuBLASLt) and batched matmul (cuBLAS)
 * on the GPU (ops_gemm.cu).  Declarations only.
 */
#ifndef TSR_CUDA_OPS_GEMM_CUH
#define TSR_CUDA_OPS_GEMM_CUH

#include "cuda_internal.cuh"

/* cuBLASLt's workspace, allocated once per backend. */
#define TSR_CU_LT_WORKSPACE ((size_t)32 << 20)

cudaDataType_t tsr_cu_data_type(tsr_dtype dt);

int tsr_cu_linear(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                  const tsr_epilogue *e, tsr_tensor *y);
/* y[rows, out] = x[rows, in] w[out, in]^T with no bias or epilogue: the
 * GEMM of linear, also taken by 1x1 convolutions (ops_conv.cu). */
int tsr_cu_gemm_rows(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, tsr_tensor *y);
int tsr_cu_matmul(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bm, bool trans_a,
                  bool trans_b, float alpha, tsr_tensor *y);

#endif
