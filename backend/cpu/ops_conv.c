/*
 * backend/cpu/ops_conv.c - 2-D convolution, NHWC activations, OHWI weights.
 *
 * Why this shape of algorithm: with channels innermost, a 1x1 stride-1
 * unpadded conv *is* a GEMM (rows = pixels, K = Ci), and a KxK conv is one
 * on the im2col matrix, whose K = KH*KW*Ci matches the OHWI weight rows
 * exactly, so the weights are used in place (y = cols @ w^T).  The im2col
 * matrix is never built: Tessera's GEMM (gemm.h) reads A's rows straight
 * from the image where a k-block lies inside one tap, and otherwise
 * gathers each row's k-block, one contiguous run of Ci floats per kernel
 * tap (zeros past the border), so a 3x3 conv reads its input once per
 * k-block instead of writing and re-reading a 9x larger column buffer.
 *
 * Circular padding (seamless tiling) is the same packing with the tap's
 * row and column wrapped around the image instead of read as zeros.
 *
 * The GEMM's tasks set their block of y to the bias and accumulate onto it
 * (tsr_gemm.bias); a fused residual / activation (tsr_cpu_epilogue) then
 * runs as one pass over y.
 *
 * Batch independence: the GEMM's order of arithmetic does not depend on the
 * matrix height (gemm.h), so the whole batch is one GEMM and an image's
 * result is still the same alone or in any batch, which is what the server
 * promises: byte-identical to `tessera generate` of it alone (tests:
 * cpu_gemm_rows_independent, batch_join_mid_batch, service_batching,
 * service_soak).  The UNet keeps its feed-forward chunks and resnet
 * shortcuts inside one image; group norm sums fixed blocks in order.
 */
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

int tsr_cpu_conv2d(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                   const tsr_conv2d_params *p, const tsr_epilogue *e, tsr_tensor *y)
{
    cpu_ctx *c = cpu_ctx_of(b);
    const int64_t n = x->ne[0], h = x->ne[1], wd = x->ne[2], ci = x->ne[3];
    const int64_t co = w->ne[0], kh = w->ne[1], kw = w->ne[2];
    const int64_t ho = y->ne[1], wo = y->ne[2];
    const int64_t m = n * ho * wo;
    /* bf16 weights (the "cpu-bf16gemm" variant, cpu_wide.c): x is rounded
     * to bf16 once and the GEMM runs on bf16 pairs (gemm.h), so k, the
     * strides and the channels count pairs */
    const bool pairs = w->dtype == TSR_BF16;
    const int64_t u = pairs ? 2 : 1;
    const float *src = x->data;
    if (pairs && !(src = tsr_cpu_bf16_pairs(c, x->data, tsr_tensor_numel(x))))
        return TSR_ERR_NOMEM;
    tsr_gemm g = {.m = m,
                  .n = co,
                  .k = kh * kw * ci / u,
                  .b = w->data,
                  .ldb = kh * kw * ci / u,
                  .c = y->data,
                  .ldc = co,
                  .alpha = 1.0f,
                  .accumulate = bias != NULL,
                  .bias = bias ? bias->data : NULL,
                  .pairs = pairs};
    const bool pointwise = kh == 1 && kw == 1 && p->stride_h == 1 && p->stride_w == 1 &&
                           p->pad_t == 0 && p->pad_l == 0 && p->pad_b == 0 && p->pad_r == 0;
    tsr_gemm_im2col cv = {.x = src,
                          .h = h,
                          .w = wd,
                          .ci = ci / u,
                          .kh = kh,
                          .kw = kw,
                          .ho = ho,
                          .wo = wo,
                          .sh = p->stride_h,
                          .sw = p->stride_w,
                          .pt = p->pad_t,
                          .pl = p->pad_l,
                          .circular = p->circular};
    if (pointwise) {
        g.a = src; /* a 1x1 conv is a GEMM on the pixels as they lie */
        g.lda = ci / u;
    } else {
        g.conv = &cv;
    }
    int rc = tsr_cpu_gemm(c, &g);
    if (rc < 0)
        return rc;
    if (tsr_cpu_epilogue_any(e))
        tsr_cpu_epilogue(c, y, 0, m, e);
    return TSR_OK;
}
