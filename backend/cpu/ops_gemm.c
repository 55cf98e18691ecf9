/*
 * backend/cpu/ops_gemm.c - linear and batched matmul on Tessera's GEMM.
 *
 * Row-major views map directly onto gemm.h: linear is x[M,in] @ w[out,in]^T
 * over every row at once (a row's result does not depend on the others),
 * matmul is a loop over the batch with the transposes folded into packing.
 * The GEMM's tasks write the bias into their blocks of y first and
 * accumulate onto it (tsr_gemm.bias), saving a pass over the output.  A fused residual and activation then run as one
 * pass over y (tsr_cpu_epilogue): the residual is added after the bias, as
 * the separate add did, so the fused call rounds exactly like the two calls
 * it replaces.
 */
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

int tsr_cpu_linear(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                   const tsr_epilogue *e, tsr_tensor *y)
{
    cpu_ctx *c = cpu_ctx_of(b);
    const int64_t in = w->ne[1], out = w->ne[0];
    const int64_t m = tsr_cpu_rows(x);
    /* bf16 weights: x rounded to bf16 once, the GEMM on pairs (ops_conv.c) */
    const bool pairs = w->dtype == TSR_BF16;
    const int64_t u = pairs ? 2 : 1;
    const float *src = x->data;
    if (pairs && !(src = tsr_cpu_bf16_pairs(c, x->data, m * in)))
        return TSR_ERR_NOMEM;
    /* one GEMM over every row: a row's result does not depend on the rows
     * around it (gemm.h), so images in a batch cannot disturb each other */
    tsr_gemm g = {.m = m,
                  .n = out,
                  .k = in / u,
                  .a = src,
                  .lda = in / u,
                  .b = w->data,
                  .ldb = in / u,
                  .c = y->data,
                  .ldc = out,
                  .alpha = 1.0f,
                  .accumulate = bias != NULL,
                  .bias = bias ? bias->data : NULL,
                  .pairs = pairs};
    int rc = tsr_cpu_gemm(c, &g);
    if (rc < 0)
        return rc;
    if (tsr_cpu_epilogue_any(e))
        tsr_cpu_epilogue(c, y, 0, m, e);
    return TSR_OK;
}

int tsr_cpu_matmul(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bm, bool trans_a,
                   bool trans_b, float alpha, tsr_tensor *y)
{
    cpu_ctx *c = cpu_ctx_of(b);
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
        /* y = op(a) op(b): gemm.h's B(j, p) is op(b)'s column j, row p */
        tsr_gemm g = {.m = m,
                      .n = n,
                      .k = k,
                      .a = ap + (ba > 1 ? i : 0) * ar * ac,
                      .lda = ac,
                      .a_km = trans_a,
                      .b = bp + (bb > 1 ? i : 0) * br * bc,
                      .ldb = bc,
                      .b_kn = !trans_b,
                      .c = yp + i * m * n,
                      .ldc = n,
                      .alpha = alpha};
        int rc = tsr_cpu_gemm(c, &g);
        if (rc < 0)
            return rc;
    }
    return TSR_OK;
}
