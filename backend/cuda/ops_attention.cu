/*
 * backend/cuda/ops_attention.cu - attention as one kernel, flash-attention
 * style: tiled over keys, online softmax, f32 accumulation, no Lq x Lk
 * buffer anywhere.
 *
 * Why this way (correct first, every SD head size on one path): a block
 * takes ATT_QROWS query rows of one (batch, head) and walks the keys in
 * tiles of 32, staged in shared memory as f32.  Each warp owns ATT_RPW query
 * rows; for one row, lane j scores key j of the tile (a dot product over the
 * head dim against the pre-scaled query in shared memory), the warp reduces
 * the tile's max and sum, and the running max, sum and output are updated
 * with the online-softmax rescale of cuda_math.h (tested on the host).
 * Lane l accumulates output dims l, l+32, ..., so any head size up to 512
 * works: 40, 80, 160 (SD1.x/2.x UNet), 64 (SDXL, the text encoders) on the
 * 32-key variant, 512 (the VAE's mid-block attention, one head) on the
 * 16-key one.
 * Masked keys (causal, or past the end of a tile) weigh exactly 0.
 *
 * This is the correctness kernel, not the fast one: it uses CUDA cores, not
 * tensor cores (mma.sync / wgmma are the speed issue's), and cuDNN's fused
 * SDPA is not used yet.  The memory it needs beyond q, k, v and y is its
 * shared-memory tile only.
 */
#include "ops_attention.cuh"

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
