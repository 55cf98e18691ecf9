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
#include <cblas.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "core/error.h"

#define TSR_CONV_COL_BYTES ((size_t)16 << 20)

typedef struct im2col_job {
    const float *x;
    float *col;
    int64_t h, w, ci, kh, kw, ho, wo;
    int sh, sw, pt, pl;
    int64_t row0; /* first flattened output row (n*Ho + oh) of the tile */
} im2col_job;

static void im2col_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const im2col_job *j = ctx_;
    int64_t k = j->kh * j->kw * j->ci;
    size_t px = (size_t)j->ci * sizeof(float);
    for (int64_t i = begin; i < end; i++) {
        /* i indexes (tile row, ow) */
        int64_t r = j->row0 + i / j->wo, ow = i % j->wo;
        int64_t n = r / j->ho, oh = r % j->ho;
        float *dst = j->col + i * k;
        int64_t iw0 = ow * j->sw - j->pl;
        for (int64_t a = 0; a < j->kh; a++) {
            int64_t ih = oh * j->sh - j->pt + a;
            float *d = dst + a * j->kw * j->ci;
            if (ih < 0 || ih >= j->h) {
                memset(d, 0, px * (size_t)j->kw);
                continue;
            }
            const float *src = j->x + ((n * j->h + ih) * j->w) * j->ci;
            if (iw0 >= 0 && iw0 + j->kw <= j->w) {
                memcpy(d, src + iw0 * j->ci, px * (size_t)j->kw);
                continue;
            }
            for (int64_t c = 0; c < j->kw; c++) {
                int64_t iw = iw0 + c;
                if (iw < 0 || iw >= j->w)
                    memset(d + c * j->ci, 0, px);
                else
                    memcpy(d + c * j->ci, src + iw * j->ci, px);
            }
        }
    }
}

static void fill_bias(float *y, const float *bias, int64_t rows, int64_t co)
{
    for (int64_t r = 0; r < rows; r++)
        memcpy(y + r * co, bias, (size_t)co * sizeof(float));
}

int tsr_cpu_conv2d(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                   const tsr_conv2d_params *p, const tsr_epilogue *e, tsr_tensor *y)
{
    cpu_ctx *c = cpu_ctx_of(b);
    int64_t n = x->ne[0], h = x->ne[1], wd = x->ne[2], ci = x->ne[3];
    int64_t co = w->ne[0], kh = w->ne[1], kw = w->ne[2];
    int64_t ho = y->ne[1], wo = y->ne[2];
    int64_t k = kh * kw * ci;
    float *yp = y->data;
    const float *wp = w->data;
    float beta = bias ? 1.0f : 0.0f;
    const bool epi = tsr_cpu_epilogue_any(e);

    if (kh == 1 && kw == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_t == 0 &&
        p->pad_l == 0 && p->pad_b == 0 && p->pad_r == 0) {
        /* one GEMM per image: see "Batch independence" above */
        const int64_t m = h * wd;
        for (int64_t img = 0; img < n; img++) {
            float *yi = yp + img * m * co;
            if (bias)
                fill_bias(yi, bias->data, m, co);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)co, (int)ci, 1.0f,
                        (const float *)x->data + img * m * ci, (int)ci, wp, (int)ci, beta, yi,
                        (int)co);
            if (epi)
                tsr_cpu_epilogue(c, y, img * m, m, e);
        }
        return TSR_OK;
    }

    int64_t row_bytes = wo * k * (int64_t)sizeof(float);
    int64_t tile = (int64_t)(TSR_CONV_COL_BYTES / (size_t)row_bytes);
    if (tile < 1)
        tile = 1;
    if (tile > ho)
        tile = ho;
    float *col = tsr_cpu_scratch_shared(c, (size_t)(tile * row_bytes));
    if (!col)
        return TSR_ERR_NOMEM;
    im2col_job j = {.x = x->data, .col = col, .h = h, .w = wd, .ci = ci, .kh = kh, .kw = kw,
                    .ho = ho, .wo = wo, .sh = p->stride_h, .sw = p->stride_w, .pt = p->pad_t,
                    .pl = p->pad_l};
    int64_t rows_done = 0;
    /* tiles restart at every image, so an image's GEMMs are the same
     * whatever else is in the batch (see "Batch independence") */
    for (int64_t r0 = 0; r0 < n * ho; r0 += rows_done) {
        const int64_t end = (r0 / ho + 1) * ho; /* the end of this image's rows */
        int64_t rows = end - r0 < tile ? end - r0 : tile;
        rows_done = rows;
        int64_t m = rows * wo;
        j.row0 = r0;
        tsr_pool_parallel_for(c->pool, m, tsr_cpu_grain(k, 1 << 14), im2col_task, &j);
        float *yt = yp + r0 * wo * co;
        if (bias)
            fill_bias(yt, bias->data, m, co);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)co, (int)k, 1.0f, col,
                    (int)k, wp, (int)k, beta, yt, (int)co);
        if (epi)
            tsr_cpu_epilogue(c, y, r0 * wo, m, e);
    }
    return TSR_OK;
}
