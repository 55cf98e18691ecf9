/*
 * backend/cpu/ops_conv.c - 2-D convolution, NHWC activations, OHWI weights.
 *
 * Why this shape of algorithm: with channels innermost, a 1x1 stride-1
 * unpadded conv *is* a GEMM (rows = pixels, K = Ci), and a KxK conv becomes
 * one after im2col, whose K = KH*KW*Ci matches the OHWI weight rows exactly,
 * so the weights are used in place (y = cols @ w^T).  In NHWC the KW input
 * pixels under one kernel row are adjacent, so each column row is filled
 * with KH memcpys of KW*Ci floats (split only at the image border).
 *
 * The column buffer is tiled over output rows (flattened n*Ho + oh) so it
 * stays under TSR_CONV_COL_BYTES whatever the image size; each tile's
 * output rows are contiguous in y, so a tile is one GEMM writing straight
 * into y.  im2col is split over the thread pool; the GEMM threads itself.
 * A fused residual / activation (tsr_cpu_epilogue) runs on each tile right
 * after its GEMM, while the tile is still warm in cache.
 *
 * Batch independence: a row's result from OpenBLAS depends on the height
 * of the matrix it is computed in (kernel and thread split change with
 * it), so a GEMM spanning several images gave an image a result that
 * depended on which images shared its UNet call (a few values in 12,288
 * off by 1/255).  So no GEMM spans two images: conv tiles restart at each
 * image and 1x1 convs run per image; linear (ops_gemm.c) runs per image for
 * [N, L, C] inputs, in 64-row blocks within, and per row for short 2-D
 * inputs (embeddings); the UNet keeps its feed-forward chunks and resnet
 * shortcuts inside one image; group norm sums fixed blocks in order.  An
 * image's arithmetic is then the same alone or in any batch, which is what
 * the server promises: byte-identical to `tessera generate` of it alone
 * (tests: batch_join_mid_batch, service_batching, service_soak).
 */
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

static void fill_bias(float *y, const float *bias, int64_t rows, int64_t co) {
  for (int64_t r = 0; r < rows; r++)
    memcpy(y + r * co, bias, (size_t)co * sizeof(float));
}

int tsr_cpu_conv2d(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w,
                   const tsr_tensor *bias, const tsr_conv2d_params *p,
                   const tsr_epilogue *e, tsr_tensor *y) {
  cpu_ctx *c = cpu_ctx_of(b);
  const int64_t n = x->ne[0], h = x->ne[1], wd = x->ne[2], ci = x->ne[3];
  const int64_t co = w->ne[0], kh = w->ne[1], kw = w->ne[2];
  const int64_t ho = y->ne[1], wo = y->ne[2];
  const int64_t m = n * ho * wo;
  if (bias)
    fill_bias(y->data, bias->data, m, co);
  tsr_gemm g = {.m = m,
                .n = co,
                .k = kh * kw * ci,
                .b = w->data,
                .ldb = kh * kw * ci,
                .c = y->data,
                .ldc = co,
                .alpha = 1.0f,
                .accumulate = bias != NULL};
  const bool pointwise = kh == 1 && kw == 1 && p->stride_h == 1 &&
                         p->stride_w == 1 && p->pad_t == 0 && p->pad_l == 0 &&
                         p->pad_b == 0 && p->pad_r == 0;
  tsr_gemm_im2col cv = {.x = x->data,
                        .h = h,
                        .w = wd,
                        .ci = ci,
                        .kh = kh,
                        .kw = kw,
                        .ho = ho,
                        .wo = wo,
                        .sh = p->stride_h,
                        .sw = p->stride_w,
                        .pt = p->pad_t,
                        .pl = p->pad_l};
  if (pointwise) {
    g.a = x->data; /* a 1x1 conv is a GEMM on the pixels as they lie */
    g.lda = ci;
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
