/*
 * backend/cpu/ops_gemm.c - linear and batched matmul on OpenBLAS sgemm.
 *
 * Why OpenBLAS and no hand-written kernel: its sgemm is within a few percent
 * of the machine's FMA peak on every x86 core we target, it threads itself,
 * and every conv and attention in the model bottoms out here or in the same
 * call.  Row-major views map directly: linear is x[M,in] @ w[out,in]^T,
 * matmul is a loop over the batch.  A bias is written into y first and the
 * GEMM accumulates onto it (beta = 1), saving a pass over the output.  A
 * fused residual and activation then run as one pass over y
 * (tsr_cpu_epilogue): the residual is added after the bias, as the separate
 * add did, so the fused call rounds exactly like the two calls it replaces.
 */
#include <cblas.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "core/error.h"

#define LINEAR_BLOCK 64

/* y[r, :] = bias for every row. */
static void fill_rows(float *y, const float *bias, int64_t rows, int64_t n)
{
    for (int64_t r = 0; r < rows; r++)
        memcpy(y + r * n, bias, (size_t)n * sizeof(float));
}

int tsr_cpu_linear(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                   const tsr_epilogue *e, tsr_tensor *y)
{
    cpu_ctx *c = cpu_ctx_of(b);
    int64_t in = w->ne[1], out = w->ne[0];
    int64_t m = tsr_cpu_rows(x);
    float beta = 0.0f;
    if (bias) {
        fill_rows(y->data, bias->data, m, out);
        beta = 1.0f;
    }
    /* Row blocks fixed by position, never by the batch: one GEMM per image
     * when the input says where images begin ([N, L, C] or NHWC), and within
     * that (or for a 2-D [rows, C] input) blocks of LINEAR_BLOCK rows from
     * the start.  A token's result then depends only on its block, which is
     * the same alone or batched whenever an image's rows are a multiple of
     * the block (SD latents: 64x64 -> 4096, 1024, 256, 64 tokens); see
     * "Batch independence" in ops_conv.c.  A block is big enough for
     * OpenBLAS's kernels to run at full speed. */
    int64_t nb = x->ndim >= 3 ? x->ne[0] : 1;
    if (x->ndim < 3 && m <= LINEAR_BLOCK)
        nb = m; /* a short 2-D input is rows of images (embeddings): one GEMM per row */
    const int64_t mb = m / nb;
    const float *xp = x->data;
    float *yp = y->data;
    for (int64_t i = 0; i < nb; i++)
        for (int64_t r0 = 0; r0 < mb; r0 += LINEAR_BLOCK) {
            const int64_t rows = mb - r0 < LINEAR_BLOCK ? mb - r0 : LINEAR_BLOCK;
            const int64_t off = i * mb + r0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)out, (int)in,
                        1.0f, xp + off * in, (int)in, w->data, (int)in, beta, yp + off * out,
                        (int)out);
        }
    if (tsr_cpu_epilogue_any(e))
        tsr_cpu_epilogue(c, y, 0, m, e);
    return TSR_OK;
}

int tsr_cpu_matmul(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bm, bool trans_a,
                   bool trans_b, float alpha, tsr_tensor *y)
{
    (void)b;
    /* shapes validated by tsr_matmul: rank 2 or 3, batch 1 broadcasts */
    int64_t ba = a->ndim == 3 ? a->ne[0] : 1, bb = bm->ndim == 3 ? bm->ne[0] : 1;
    int64_t ar = a->ne[a->ndim - 2], ac = a->ne[a->ndim - 1];
    int64_t br = bm->ne[bm->ndim - 2], bc = bm->ne[bm->ndim - 1];
    int64_t m = trans_a ? ac : ar, k = trans_a ? ar : ac;
    int64_t n = trans_b ? br : bc;
    int64_t batch = ba > bb ? ba : bb;
    const float *ap = a->data, *bp = bm->data;
    float *yp = y->data;
    for (int64_t i = 0; i < batch; i++) {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha,
                    ap + (ba > 1 ? i : 0) * ar * ac, (int)ac, bp + (bb > 1 ? i : 0) * br * bc,
                    (int)bc, 0.0f, yp + i * m * n, (int)n);
    }
    return TSR_OK;
}
