/*
 * backend/cuda/ops_gemm.cu - linear through cuBLASLt, matmul through cuBLAS.
 *
 * Why this way: Tessera's tensors are row-major; cuBLAS is column-major.  A
 * row-major [R, C] matrix is the column-major [C, R] one, so
 * y[rows, out] = x[rows, in] @ w[out, in]^T is computed as the
 * column-major y^T[out, rows] = op(W) X: A = w (column-major [in, out],
 * transposed), B = x (column-major [in, rows]), m = out, n = rows, k = in.  Inputs
 * and outputs are f16 (or bf16/f32), the compute type is CUBLAS_COMPUTE_32F:
 * f32 accumulation, as backend.h requires.  The bias is fused as cuBLASLt's
 * BIAS epilogue when it has the output's dtype (the weights loader stores it
 * so); the residual and activation of tsr_linear_fused then run in one
 * elementwise pass (tsr_cu_epilogue), in the contract's order.
 *
 * matmul (attention-free uses: a handful per model) is cublasGemmStridedBatchedEx,
 * which takes a batch stride of 0 for a broadcast operand; its transposes
 * map as: Y^T = op(B^T) op(A^T).
 *
 * Descriptors and the heuristic's algorithm are made per call for now; a
 * per-shape cache (and CUDA graphs) are the speed issue's.
 */
#include "ops_gemm.cuh"
#include "ops_elementwise.cuh"

cudaDataType_t tsr_cu_data_type(tsr_dtype dt)
{
    switch (dt) {
    case TSR_F16: return CUDA_R_16F;
    case TSR_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
    }
}

/* The largest power of two (at most 256) dividing the address. */
static uint32_t ptr_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0)
        al >>= 1;
    return al;
}

typedef struct lt_call {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
} lt_call;

static void lt_release(lt_call *l)
{
    if (l->pref)
        cublasLtMatmulPreferenceDestroy(l->pref);
    if (l->c)
        cublasLtMatrixLayoutDestroy(l->c);
    if (l->b)
        cublasLtMatrixLayoutDestroy(l->b);
    if (l->a)
        cublasLtMatrixLayoutDestroy(l->a);
    if (l->desc)
        cublasLtMatmulDescDestroy(l->desc);
}

static int lt_linear(tsr_backend *bk, const tsr_tensor *x, const tsr_tensor *w,
                     const tsr_tensor *bias, tsr_tensor *y, lt_call *l)
{
    cuda_ctx *c = tsr_cu_ctx(bk);
    const int64_t in = x->ne[x->ndim - 1], out = w->ne[0], rows = tsr_tensor_numel(x) / in;
    const cudaDataType_t t = tsr_cu_data_type(x->dtype);
    TSR_CUDA_CHECK(cublasLtMatmulDescCreate(&l->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opt = CUBLAS_OP_T, opn = CUBLAS_OP_N;
    TSR_CUDA_CHECK(cublasLtMatmulDescSetAttribute(l->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opt,
                                                  sizeof opt));
    TSR_CUDA_CHECK(cublasLtMatmulDescSetAttribute(l->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opn,
                                                  sizeof opn));
    if (bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        const void *bp = bias->data;
        TSR_CUDA_CHECK(cublasLtMatmulDescSetAttribute(l->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                      sizeof epi));
        TSR_CUDA_CHECK(cublasLtMatmulDescSetAttribute(l->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bp, sizeof bp));
    }
    /* A = w stored column-major as [in, out] (ld in), used transposed;
     * B = x as [in, rows] (ld in); C = D = y as [out, rows] (ld out) */
    TSR_CUDA_CHECK(cublasLtMatrixLayoutCreate(&l->a, t, (uint64_t)in, (uint64_t)out, in));
    TSR_CUDA_CHECK(cublasLtMatrixLayoutCreate(&l->b, t, (uint64_t)in, (uint64_t)rows, in));
    TSR_CUDA_CHECK(cublasLtMatrixLayoutCreate(&l->c, t, (uint64_t)out, (uint64_t)rows, out));
    TSR_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&l->pref));
    const size_t ws = TSR_CU_LT_WORKSPACE;
    TSR_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(
        l->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    /* the heuristic assumes 256-byte aligned operands unless told: views
     * (rows of a batch, one half of a GEGLU input) may be less aligned */
    const uint32_t al_a = ptr_align(w->data), al_b = ptr_align(x->data), al_c = ptr_align(y->data);
    TSR_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(
        l->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    TSR_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(
        l->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    TSR_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(
        l->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
    TSR_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(
        l->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    TSR_CUDA_CHECK(cublasLtMatmulAlgoGetHeuristic(c->lt, l->desc, l->a, l->b, l->c, l->c, l->pref,
                                                  1, &res, &found));
    if (found < 1)
        return tsr_errorf(TSR_ERR_BACKEND, "linear: cuBLASLt has no algorithm for %lld x %lld x %lld",
                          (long long)rows, (long long)out, (long long)in);
    const float alpha = 1.0f, beta = 0.0f;
    TSR_CUDA_CHECK(cublasLtMatmul(c->lt, l->desc, &alpha, w->data, l->a, x->data, l->b, &beta,
                                  y->data, l->c, y->data, l->c, &res.algo, c->lt_workspace, ws,
                                  c->stream));
    return TSR_OK;
}

int tsr_cu_linear(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                  const tsr_epilogue *e, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "linear");
    if (rc < 0)
        return rc;
    const bool fuse_bias = bias && bias->dtype == y->dtype;
    lt_call l;
    memset(&l, 0, sizeof l);
    rc = lt_linear(b, x, w, fuse_bias ? bias : NULL, y, &l);
    lt_release(&l);
    if (rc < 0)
        return rc;
    return tsr_cu_epilogue(b, y, fuse_bias ? NULL : bias, e, "linear");
}

int tsr_cu_gemm_rows(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, tsr_tensor *y)
{
    lt_call l;
    memset(&l, 0, sizeof l);
    int rc = lt_linear(b, x, w, NULL, y, &l);
    lt_release(&l);
    return rc;
}

int tsr_cu_matmul(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bm, bool trans_a,
                  bool trans_b, float alpha, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "matmul");
    if (rc < 0)
        return rc;
    cuda_ctx *c = tsr_cu_ctx(b);
    const int64_t ba = a->ndim == 3 ? a->ne[0] : 1, bb = bm->ndim == 3 ? bm->ne[0] : 1;
    const int64_t ar = a->ne[a->ndim - 2], ac = a->ne[a->ndim - 1];
    const int64_t br = bm->ne[bm->ndim - 2], bc = bm->ne[bm->ndim - 1];
    const int64_t m = trans_a ? ac : ar, k = trans_a ? ar : ac, n = trans_b ? br : bc;
    const int64_t batch = ba > bb ? ba : bb;
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || batch > INT32_MAX)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "matmul: dimensions past 2^31");
    const cudaDataType_t t = tsr_cu_data_type(a->dtype);
    /* column-major: Y^T [n, m] = op(B^T) [n, k] . op(A^T) [k, m] */
    const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int64_t ldb = trans_b ? k : n, lda = trans_a ? m : k;
    const long long sb = bb == 1 ? 0 : (long long)(k * n), sa = ba == 1 ? 0 : (long long)(m * k);
    const float beta = 0.0f;
    TSR_CUDA_CHECK(cublasGemmStridedBatchedEx(
        c->cublas, opb, opa, (int)n, (int)m, (int)k, &alpha, bm->data, t, (int)ldb, sb, a->data, t,
        (int)lda, sa, &beta, y->data, t, (int)n, (long long)(m * n), (int)batch,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return TSR_OK;
}
