/*
 * backend/cuda/ops_attention.cu - scaled-dot-product attention on the GPU,
 * two paths:
 *
 * 1. GEMM path (the default): per batch item and chunk of query rows,
 *      S = scale * Q K^T   cuBLAS strided-batched GEMM over the heads, f16
 *                          (or bf16/f32) in, f32 out, f32 accumulation;
 *      P = softmax(S)      own kernel, one block per row, f32, causal mask,
 *                          stored in v's dtype;
 *      Y = P V             cuBLAS strided-batched GEMM, written straight
 *                          into y's [b, i, h*D + d] layout (ldc = heads*D).
 *    Both products run on the tensor cores at any head size (40, 64, 80,
 *    160, and the VAE's 512).  The S/P buffer is the backend's scratch,
 *    bounded: the query rows are cut into chunks so that S (f32) and P of
 *    one chunk take at most TSR_CUDA_ATTENTION_SCRATCH_MIB (default 256)
 *    MiB.  Measured on an H200 (docs/perf.md): 20-70x the flash kernel
 *    below on SD's self-attention.
 * 2. Flash path (TSR_CUDA_ATTENTION=flash, and the fallback when the
 *    scratch cannot be had): one kernel, tiled over keys, online softmax,
 *    f32 accumulation, no Lq x Lk buffer at all.  A block takes ATT_QROWS
 *    query rows of one (batch, head) and walks the keys in tiles of 32,
 *    staged in shared memory as f32.  Each warp owns ATT_RPW query rows; for
 *    one row, lane j scores key j of the tile, the warp reduces the tile's
 *    max and sum, and the running max, sum and output are updated with the
 *    online-softmax rescale of cuda_math.h (tested on the host).  Lane l
 *    accumulates output dims l, l+32, ..., so any head size up to 512 works.
 *    CUDA cores only: correct everywhere, slow (docs/perf.md).
 * Masked keys (causal, or past the end of a tile) weigh exactly 0 on both
 * paths, and a row with no visible key is 0.
 *
 * Not yet: a tensor-core flash kernel (mma/wgmma, no S buffer) or cuDNN's
 * fused SDPA, which would save the S/P round trip through memory.
 */
#include "ops_attention.cuh"
#include "ops_gemm.cuh"

#include <stdlib.h>
#include <string.h>

#define ATT_WARPS 4 /* warps per block */

/* Two shapes of the kernel:
 *   head dims <= 160 (every UNet and text-encoder head): tiles of 32 keys,
 *     4 query rows per warp, 5 output dims per lane;
 *   head dims <= 512 (the VAE's single 512-wide head): tiles of 16 keys
 *     (lanes 16..31 score nothing), 1 row per warp, 16 dims per lane, so the
 *     f32 tiles fit the 99 KiB of shared memory sm_86/sm_89 allow. */
template <int KT, int RPW> static size_t att_smem(int64_t d)
{
    return (size_t)(KT * (d + 1) + KT * d + ATT_WARPS * RPW * d) * sizeof(float);
}

/* grid (query tiles, batch * heads); y[b, i, h*D + d] */
template <int KT, int RPW, int DPL>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attention(const void *q, const void *k, const void *v, void *y, int dt, int64_t lq,
                int64_t lk, int heads, int64_t d, float scale, int causal)
{
    const int ATT_KT = KT, ATT_RPW = RPW, ATT_DPL = DPL, ATT_QROWS = ATT_WARPS * RPW;
    extern __shared__ float smem[];
    float *ks = smem;                    /* [KT][d + 1] (padded: no bank conflicts) */
    float *vs = ks + ATT_KT * (d + 1);   /* [KT][d] */
    float *qs = vs + ATT_KT * d;         /* [QROWS][d], pre-scaled */
    const int bh = blockIdx.y, bi = bh / heads, h = bh % heads;
    const int64_t q0 = (int64_t)blockIdx.x * ATT_QROWS;
    const int64_t hd = (int64_t)heads * d;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    for (int64_t e = threadIdx.x; e < ATT_QROWS * d; e += blockDim.x) {
        int64_t r = e / d, c = e % d, qi = q0 + r;
        qs[e] = qi < lq ? tsr_cu_load(q, dt, ((int64_t)bi * lq + qi) * hd + h * d + c) * scale
                        : 0.0f;
    }

    float m[ATT_RPW], l[ATT_RPW], o[ATT_RPW][ATT_DPL];
    for (int r = 0; r < ATT_RPW; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int t = 0; t < ATT_DPL; t++)
            o[r][t] = 0.0f;
    }

    /* keys past the last one any row of this block may see are skipped */
    int64_t kend = lk;
    if (causal) {
        int64_t last_q = q0 + ATT_QROWS - 1 < lq ? q0 + ATT_QROWS - 1 : lq - 1;
        int64_t lim = last_q + (lk - lq) + 1;
        kend = lim < 0 ? 0 : lim < lk ? lim : lk;
    }

    for (int64_t k0 = 0; k0 < kend; k0 += ATT_KT) {
        __syncthreads(); /* the previous tile is consumed (and qs is written) */
        for (int64_t e = threadIdx.x; e < ATT_KT * d; e += blockDim.x) {
            int64_t j = e / d, c = e % d, kj = k0 + j;
            float kv = 0.0f, vv = 0.0f;
            if (kj < lk) {
                int64_t off = ((int64_t)bi * lk + kj) * hd + h * d + c;
                kv = tsr_cu_load(k, dt, off);
                vv = tsr_cu_load(v, dt, off);
            }
            ks[j * (d + 1) + c] = kv;
            vs[j * d + c] = vv;
        }
        __syncthreads();
        for (int r = 0; r < ATT_RPW; r++) {
            const int64_t row = warp * ATT_RPW + r, qi = q0 + row;
            if (qi >= lq)
                break; /* warp-uniform */
            const int64_t kj = k0 + lane;
            float s = -INFINITY;
            if (lane < ATT_KT && kj < lk && (!causal || tsr_cu_causal_visible(qi, kj, lq, lk))) {
                const float *qr = qs + row * d, *kr = ks + lane * (d + 1);
                float acc = 0.0f;
                for (int64_t c = 0; c < d; c++)
                    acc += qr[c] * kr[c];
                s = acc;
            }
            float tmax = s;
            for (int off = 16; off > 0; off >>= 1)
                tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, off));
            const float mn = tsr_cu_osm_new_max(m[r], tmax);
            const float corr = tsr_cu_osm_rescale(m[r], mn);
            const float p = tsr_cu_osm_weight(s, mn);
            float psum = p;
            for (int off = 16; off > 0; off >>= 1)
                psum += __shfl_xor_sync(0xffffffffu, psum, off);
            l[r] = l[r] * corr + psum;
            m[r] = mn;
            for (int t = 0; t < ATT_DPL; t++)
                o[r][t] *= corr;
            for (int j = 0; j < ATT_KT; j++) {
                const float pj = __shfl_sync(0xffffffffu, p, j);
                const float *vr = vs + j * d;
                for (int t = 0; t < ATT_DPL; t++) {
                    const int64_t c = lane + 32 * t;
                    if (c < d)
                        o[r][t] += pj * vr[c];
                }
            }
        }
    }

    for (int r = 0; r < ATT_RPW; r++) {
        const int64_t qi = q0 + warp * ATT_RPW + r;
        if (qi >= lq)
            break;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f; /* no visible key: 0 */
        for (int t = 0; t < ATT_DPL; t++) {
            const int64_t c = lane + 32 * t;
            if (c < d)
                tsr_cu_store(y, dt, ((int64_t)bi * lq + qi) * hd + h * d + c, o[r][t] * inv);
        }
    }
}

/* softmax of one row of S (f32, [rows][lk]) per block into P (v's dtype);
 * row r is query row q0 + (r % qc) of its head; causal masks keys past
 * i + (lk - lq). */
__global__ void __launch_bounds__(256)
    k_att_softmax(const float *s, void *p, int dt, int64_t qc, int64_t lk, int64_t q0,
                  int64_t lq, int causal)
{
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    const float *row = s + r * lk;
    const int64_t qi = q0 + r % qc;
    int64_t vis = lk;
    if (causal) {
        int64_t lim = qi + (lk - lq) + 1;
        vis = lim < 0 ? 0 : lim < lk ? lim : lk;
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < vis; j += blockDim.x)
        mx = fmaxf(mx, row[j]);
    for (int off = 16; off > 0; off >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0)
        red[warp] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < nw; w++)
        mx = fmaxf(mx, red[w]);
    __syncthreads();
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < vis; j += blockDim.x)
        sum += __expf(row[j] - mx);
    for (int off = 16; off > 0; off >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0)
        red[warp] = sum;
    __syncthreads();
    sum = 0.0f;
    for (int w = 0; w < nw; w++)
        sum += red[w];
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int64_t j = threadIdx.x; j < lk; j += blockDim.x)
        tsr_cu_store(p, dt, r * lk + j, j < vis ? __expf(row[j] - mx) * inv : 0.0f);
}

/* Bytes of S/P scratch one chunk may take (TSR_CUDA_ATTENTION_SCRATCH_MIB). */
static size_t att_scratch_limit(void)
{
    const char *e = getenv("TSR_CUDA_ATTENTION_SCRATCH_MIB");
    long mib = e && *e ? strtol(e, NULL, 10) : 256;
    if (mib < 1)
        mib = 1;
    return (size_t)mib << 20;
}

/* The GEMM path (header comment).  Returns 1 when the scratch could not be
 * had (the caller falls back to the flash kernel), TSR_OK or an error. */
static int att_gemm(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k, const tsr_tensor *v,
                    const tsr_attention_params *p, tsr_tensor *y, int64_t d, float scale)
{
    cuda_ctx *c = tsr_cu_ctx(b);
    const int64_t bsz = q->ne[0], lq = q->ne[1], lk = k->ne[1], heads = p->heads;
    const int64_t hd = heads * d;
    const size_t esz = tsr_dtype_size(v->dtype);
    const size_t row_bytes = (size_t)heads * (size_t)lk * (sizeof(float) + esz);
    int64_t qc = (int64_t)(att_scratch_limit() / row_bytes);
    if (qc < 1)
        qc = 1;
    if (qc > lq)
        qc = lq;
    if (lk > INT32_MAX || hd > INT32_MAX || qc * lk > INT32_MAX || heads * qc > INT32_MAX)
        return 1;
    const size_t s_bytes = ((size_t)(heads * qc * lk) * sizeof(float) + 255) & ~(size_t)255;
    const size_t p_bytes = (size_t)(heads * qc * lk) * esz;
    char *scratch = (char *)tsr_cu_scratch(b, s_bytes + p_bytes);
    if (!scratch) {
        tsr_error_clear();
        return 1;
    }
    float *sbuf = (float *)scratch;
    void *pbuf = scratch + s_bytes;
    const cudaDataType_t tq = tsr_cu_data_type(q->dtype), tv = tsr_cu_data_type(v->dtype);
    const cudaDataType_t ty = tsr_cu_data_type(y->dtype);
    const size_t qsz = tsr_dtype_size(q->dtype), ysz = tsr_dtype_size(y->dtype);
    const float one = 1.0f, zero = 0.0f;
    for (int64_t bi = 0; bi < bsz; bi++) {
        const char *kb = (const char *)k->data + (size_t)(bi * lk * hd) * qsz;
        const char *vb = (const char *)v->data + (size_t)(bi * lk * hd) * esz;
        for (int64_t q0 = 0; q0 < lq; q0 += qc) {
            const int64_t n = lq - q0 < qc ? lq - q0 : qc;
            const char *qb = (const char *)q->data + (size_t)((bi * lq + q0) * hd) * qsz;
            char *yb = (char *)y->data + (size_t)((bi * lq + q0) * hd) * ysz;
            /* column-major S_h^T [lk, n] (ld lk) = K_h (A: [d, lk], ld hd, transposed)
             * x Q_h^T (B: [d, n], ld hd); heads d elements apart in A and B */
            TSR_CUDA_CHECK(cublasGemmStridedBatchedEx(
                c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)lk, (int)n, (int)d, &scale, kb, tq,
                (int)hd, (long long)d, qb, tq, (int)hd, (long long)d, &zero, sbuf, CUDA_R_32F,
                (int)lk, (long long)(n * lk), (int)heads, CUBLAS_COMPUTE_32F,
                CUBLAS_GEMM_DEFAULT));
            k_att_softmax<<<(unsigned)(heads * n), 256, 0, c->stream>>>(
                sbuf, pbuf, (int)v->dtype, n, lk, q0, lq, p->causal ? 1 : 0);
            TSR_CUDA_LAUNCHED("attention");
            /* column-major Y_h^T [d, n] (ld hd) = V_h (A: [d, lk], ld hd)
             * x P_h^T (B: [lk, n], ld lk) */
            TSR_CUDA_CHECK(cublasGemmStridedBatchedEx(
                c->cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)d, (int)n, (int)lk, &one, vb, tv,
                (int)hd, (long long)d, pbuf, tv, (int)lk, (long long)(n * lk), &zero, yb, ty,
                (int)hd, (long long)d, (int)heads, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }
    }
    return TSR_OK;
}

static bool att_flash_forced(void)
{
    const char *e = getenv("TSR_CUDA_ATTENTION");
    return e && strcmp(e, "flash") == 0;
}

int tsr_cu_attention(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k, const tsr_tensor *v,
                     const tsr_attention_params *p, tsr_tensor *y)
{
    int rc = tsr_cu_usable("attention");
    if (rc < 0)
        return rc;
    const int64_t bsz = q->ne[0], lq = q->ne[1], lk = k->ne[1];
    const int64_t d = q->ne[2] / p->heads;
    if (d > TSR_CU_ATTN_MAX_D || (int64_t)bsz * p->heads > 65535)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "attention: head size %lld x %lld heads",
                          (long long)d, (long long)bsz * p->heads);
    const float scale = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)d);
    const int causal = p->causal ? 1 : 0;
    if (!att_flash_forced() && q->dtype == k->dtype && v->dtype == y->dtype) {
        rc = att_gemm(b, q, k, v, p, y, d, scale);
        if (rc <= 0)
            return rc;
    }
    cudaStream_t st = tsr_cu_ctx(b)->stream;
    if (d <= 160) {
        const size_t smem = att_smem<32, 4>(d);
        if (smem > 48 * 1024)
            TSR_CUDA_CHECK(cudaFuncSetAttribute(k_attention<32, 4, 5>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)smem));
        dim3 grid((unsigned)((lq + ATT_WARPS * 4 - 1) / (ATT_WARPS * 4)), (unsigned)(bsz * p->heads));
        k_attention<32, 4, 5><<<grid, ATT_WARPS * 32, smem, st>>>(
            q->data, k->data, v->data, y->data, (int)q->dtype, lq, lk, p->heads, d, scale, causal);
    } else {
        const size_t smem = att_smem<16, 1>(d);
        TSR_CUDA_CHECK(cudaFuncSetAttribute(k_attention<16, 1, 16>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        dim3 grid((unsigned)((lq + ATT_WARPS - 1) / ATT_WARPS), (unsigned)(bsz * p->heads));
        k_attention<16, 1, 16><<<grid, ATT_WARPS * 32, smem, st>>>(
            q->data, k->data, v->data, y->data, (int)q->dtype, lq, lk, p->heads, d, scale, causal);
    }
    TSR_CUDA_LAUNCHED("attention");
    return TSR_OK;
}
