/*
 * backend/cuda/ops_conv.cu - conv2d on cuDNN (9.x), NHWC activations and
 * OHWI (cuDNN's "NHWC" filter format, KRSC) weights, exactly Tessera's
 * layouts, so nothing is transposed.
 *
 * Why the legacy API: cudnnConvolutionForward with NHWC descriptors is
 * still in cuDNN 9 (cudnn_cnn.h), needs no graph building, and runs the
 * tensor-core kernels for f16/bf16 (CUDNN_TENSOR_OP_MATH; f32 runs with
 * CUDNN_FMA_MATH so it never drops to TF32).  Compute type is f32.
 *
 * Algorithm: chosen once per shape by cuDNN's heuristics
 * (cudnnGetConvolutionForwardAlgorithm_v7, no benchmarking, so the result
 * is deterministic for a shape and costs no GPU time) and cached in the
 * backend context.  Its workspace comes from the backend's grow-only
 * scratch.
 *
 * Asymmetric padding (the VAE encoder's downsampling pads right/bottom only)
 * is not expressible in the legacy descriptor: such an input is first
 * copied into a zero-padded buffer (scratch), then convolved unpadded.
 *
 * Circular padding (seamless tiling, tsr_conv2d_params.circular) has no
 * cuDNN mode either: the same copy wraps around the image instead of
 * writing zeros (k_pad's circ), then the conv runs unpadded.
 *
 * Bias, residual and activation run as one elementwise pass after the
 * convolution (tsr_cu_epilogue), in backend.h's order; cuDNN's fused
 * conv-bias-activation takes neither a residual added after the bias nor
 * GELU, so it is not used.
 */
#include "ops_conv.cuh"
#include "ops_elementwise.cuh"
#include "ops_gemm.cuh"

#define CONV_WORKSPACE_MAX ((size_t)1 << 30)

static cudnnDataType_t dnn_type(tsr_dtype dt)
{
    switch (dt) {
    case TSR_F16: return CUDNN_DATA_HALF;
    case TSR_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
    }
}

__global__ void k_pad(const void *x, void *y, int dt, int64_t h, int64_t w, int64_t c, int64_t hp,
                      int64_t wp, int64_t pt, int64_t pl, int circ, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)blockDim.x * gridDim.x) {
        int64_t ch = i % c, t = i / c, col = t % wp;
        t /= wp;
        int64_t row = t % hp, img = t / hp;
        int64_t sr = row - pt, sc = col - pl;
        if (circ) { /* a pad is at most the size (ops.c checks): one wrap */
            sr = sr < 0 ? sr + h : sr >= h ? sr - h : sr;
            sc = sc < 0 ? sc + w : sc >= w ? sc - w : sc;
        }
        float v = 0.0f;
        if (sr >= 0 && sr < h && sc >= 0 && sc < w)
            v = tsr_cu_load(x, dt, ((img * h + sr) * w + sc) * c + ch);
        tsr_cu_store(y, dt, i, v);
    }
}

typedef struct conv_desc {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} conv_desc;

static void conv_release(conv_desc *d)
{
    if (d->conv)
        cudnnDestroyConvolutionDescriptor(d->conv);
    if (d->w)
        cudnnDestroyFilterDescriptor(d->w);
    if (d->y)
        cudnnDestroyTensorDescriptor(d->y);
    if (d->x)
        cudnnDestroyTensorDescriptor(d->x);
}

/* The cached algorithm for this shape, chosen on first use. */
static int conv_algo(cuda_ctx *c, const int64_t key[12], const conv_desc *d,
                     cudnnConvolutionFwdAlgo_t *algo, size_t *ws)
{
    unsigned hsh = 2166136261u;
    for (int i = 0; i < 12; i++)
        hsh = (hsh ^ (unsigned)key[i]) * 16777619u;
    for (int probe = 0; probe < TSR_CU_CONV_CACHE; probe++) {
        cuda_conv_algo *e = &c->conv_cache[(hsh + (unsigned)probe) % TSR_CU_CONV_CACHE];
        if (e->used && memcmp(e->key, key, sizeof e->key) == 0) {
            *algo = e->algo;
            *ws = e->workspace;
            return TSR_OK;
        }
        if (e->used)
            continue;
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int got = 0;
        TSR_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
            c->cudnn, d->x, d->w, d->conv, d->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
        int pick = -1;
        for (int i = 0; i < got && pick < 0; i++)
            if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= CONV_WORKSPACE_MAX)
                pick = i;
        if (pick < 0)
            return tsr_errorf(TSR_ERR_BACKEND, "conv2d: cuDNN offers no algorithm for this shape");
        size_t need = 0;
        TSR_CUDA_CHECK(cudnnGetConvolutionForwardWorkspaceSize(c->cudnn, d->x, d->w, d->conv, d->y,
                                                               perf[pick].algo, &need));
        memcpy(e->key, key, sizeof e->key);
        e->algo = perf[pick].algo;
        e->workspace = need;
        e->used = true;
        *algo = e->algo;
        *ws = need;
        return TSR_OK;
    }
    /* cache full: choose without caching (never happens with SD's shapes) */
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    TSR_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        c->cudnn, d->x, d->w, d->conv, d->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
    if (got < 1 || perf[0].status != CUDNN_STATUS_SUCCESS)
        return tsr_errorf(TSR_ERR_BACKEND, "conv2d: cuDNN offers no algorithm for this shape");
    *algo = perf[0].algo;
    TSR_CUDA_CHECK(cudnnGetConvolutionForwardWorkspaceSize(c->cudnn, d->x, d->w, d->conv, d->y,
                                                           *algo, ws));
    return TSR_OK;
}

static int conv_run(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w,
                    const tsr_conv2d_params *p, tsr_tensor *y, conv_desc *d)
{
    cuda_ctx *c = tsr_cu_ctx(b);
    const int64_t n = x->ne[0], h = x->ne[1], wd = x->ne[2], ci = x->ne[3];
    const int64_t co = w->ne[0], kh = w->ne[1], kw = w->ne[2];
    const bool padded = p->pad_t || p->pad_l || p->pad_b || p->pad_r;
    /* sym: cuDNN pads (zeros) itself; otherwise k_pad copies into scratch */
    const bool sym = p->pad_t == p->pad_b && p->pad_l == p->pad_r && !(p->circular && padded);
    const int64_t hp = sym ? h : h + p->pad_t + p->pad_b, wp = sym ? wd : wd + p->pad_l + p->pad_r;
    const int ph = sym ? p->pad_t : 0, pw = sym ? p->pad_l : 0;
    if (n > INT32_MAX || hp > INT32_MAX || wp > INT32_MAX || ci > INT32_MAX || co > INT32_MAX)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "conv2d: dimensions past 2^31");
    const cudnnDataType_t t = dnn_type(x->dtype);
    TSR_CUDA_CHECK(cudnnCreateTensorDescriptor(&d->x));
    TSR_CUDA_CHECK(cudnnCreateTensorDescriptor(&d->y));
    TSR_CUDA_CHECK(cudnnCreateFilterDescriptor(&d->w));
    TSR_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&d->conv));
    TSR_CUDA_CHECK(cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NHWC, t, (int)n, (int)ci, (int)hp,
                                              (int)wp));
    TSR_CUDA_CHECK(cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NHWC, t, (int)n, (int)co,
                                              (int)y->ne[1], (int)y->ne[2]));
    TSR_CUDA_CHECK(cudnnSetFilter4dDescriptor(d->w, t, CUDNN_TENSOR_NHWC, (int)co, (int)ci, (int)kh,
                                              (int)kw));
    TSR_CUDA_CHECK(cudnnSetConvolution2dDescriptor(d->conv, ph, pw, p->stride_h, p->stride_w, 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    TSR_CUDA_CHECK(cudnnSetConvolutionMathType(
        d->conv, x->dtype == TSR_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    const int64_t key[12] = {n, hp, wp, ci, co, kh, kw, p->stride_h, p->stride_w, ph, pw,
                             (int64_t)x->dtype};
    cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    size_t ws = 0;
    int rc = conv_algo(c, key, d, &algo, &ws);
    if (rc < 0)
        return rc;
    const size_t pad_bytes =
        sym ? 0 : (((size_t)(n * hp * wp * ci) * tsr_dtype_size(x->dtype) + 255) & ~(size_t)255);
    char *scratch = (char *)(pad_bytes + ws ? tsr_cu_scratch(b, pad_bytes + ws) : NULL);
    if (pad_bytes + ws && !scratch)
        return TSR_ERR_NOMEM;
    const void *src = x->data;
    if (!sym) {
        const int64_t total = n * hp * wp * ci;
        k_pad<<<tsr_cu_blocks(total, 256), 256, 0, c->stream>>>(x->data, scratch, (int)x->dtype, h,
                                                                wd, ci, hp, wp, p->pad_t,
                                                                p->pad_l, p->circular ? 1 : 0,
                                                                total);
        TSR_CUDA_LAUNCHED("conv2d");
        src = scratch;
    }
    const float alpha = 1.0f, beta = 0.0f;
    TSR_CUDA_CHECK(cudnnConvolutionForward(c->cudnn, &alpha, d->x, src, d->w, w->data, d->conv, algo,
                                           ws ? scratch + pad_bytes : NULL, ws, &beta, d->y,
                                           y->data));
    return TSR_OK;
}

int tsr_cu_conv2d(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                  const tsr_conv2d_params *p, const tsr_epilogue *e, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "conv2d");
    if (rc < 0)
        return rc;
    if (w->ne[1] == 1 && w->ne[2] == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_t == 0 &&
        p->pad_l == 0 && p->pad_b == 0 && p->pad_r == 0 && x->dtype == w->dtype &&
        x->dtype == y->dtype) {
        /* 1x1, stride 1, no padding: on NHWC/OHWI tensors a GEMM over the
         * n*h*w pixels (cuBLASLt); cuDNN's NHWC choice for it ran at ~5 TFLOP/s
         * on an H200 (docs/perf.md) */
        const int64_t px = x->ne[0] * x->ne[1] * x->ne[2];
        tsr_tensor x2 = tsr_tensor_2d(x->dtype, px, x->ne[3], x->data);
        tsr_tensor w2 = tsr_tensor_2d(w->dtype, w->ne[0], w->ne[3], w->data);
        tsr_tensor y2 = tsr_tensor_2d(y->dtype, px, w->ne[0], y->data);
        rc = tsr_cu_gemm_rows(b, &x2, &w2, &y2);
    } else {
        conv_desc d;
        memset(&d, 0, sizeof d);
        rc = conv_run(b, x, w, p, y, &d);
        conv_release(&d);
    }
    if (rc < 0)
        return rc;
    return tsr_cu_epilogue(b, y, bias, e, "conv2d");
}
