/*
 * backend/cuda/ops_attention.cu - scaled-dot-product attention on the GPU,
 * three paths, tried in this order (TSR_CUDA_ATTENTION=wmma|gemm|flash
 * forces one where it applies):
 *
 * 0. (before them, opt-in) TSR_CUDA_ATTENTION=cudnn: cuDNN's fused SDPA,
 *    ops_attention_cudnn.cu, on every shape it takes (f16, head dims a
 *    multiple of 8, not causal); a shape cuDNN builds no plan for falls
 *    through to the order below.  Opt-in until a GPU run has checked it
 *    (docs/perf.md); then the default for self-attention if it wins.
 *    TSR_CUDA_ATTENTION=fa2 runs the FlashAttention-2-style mma.sync
 *    kernel of ops_attention_fa2.cu instead (f16, head dims 40/64/80/160,
 *    opt-in: unverified on a GPU so far).
 * 1. Tensor-core flash kernel (f16, head dims up to 160), for key sequences
 *    of at most 128 (cross-attention over the text, the text encoders):
 *    tiled over keys, online softmax, WMMA 16x16x16 products with f32
 *    accumulation, no Lq x Lk buffer (k_attention_wmma below has the
 *    details).  Its running output lives in shared memory, so over long key
 *    sequences it is slower than the GEMM path (H200: 2.4 against 1.7 ms at
 *    SD1.5's 4096x4096, 0.108 against 0.181 ms at 4096x77).
 * 2. GEMM path (any dtype and head size: self-attention, the VAE's one
 *    512-wide head):
 *    per batch item and chunk of query rows,
 *      S = scale * Q K^T   cuBLAS strided-batched GEMM over the heads, f32 out;
 *      P = softmax(S)      own kernel, one block per row, f32, causal mask,
 *                          stored in v's dtype;
 *      Y = P V             cuBLAS strided-batched GEMM, written straight
 *                          into y's [b, i, h*D + d] layout (ldc = heads*D).
 *    The S/P buffer is the backend's scratch, bounded: the query rows are
 *    cut into chunks of at most TSR_CUDA_ATTENTION_SCRATCH_MIB (default 256)
 *    MiB of S and P.
 * 3. CUDA-core flash kernel (TSR_CUDA_ATTENTION=flash, and the fallback when
 *    neither applies or the scratch cannot be had): one kernel, tiled over
 *    keys, online softmax, f32 everywhere.  A block takes ATT_QROWS query
 *    rows of one (batch, head) and walks the keys in tiles of 32, staged in
 *    shared memory as f32.  Each warp owns ATT_RPW query rows; for one row,
 *    lane j scores key j of the tile, the warp reduces the tile's max and
 *    sum, and the running max, sum and output are updated with the
 *    online-softmax rescale of cuda_math.h (tested on the host).  Lane l
 *    accumulates output dims l, l+32, ..., so any head size up to 512 works.
 * Masked keys (causal, or past the end of a tile) weigh exactly 0 on every
 * path, and a row with no visible key is 0.  Timings of each on an H200:
 * docs/perf.md.
 */
#include "ops_attention.cuh"
#include "ops_attention_cudnn.cuh"
#include "ops_attention_fa2.cuh"
#include "ops_gemm.cuh"

#include <cuda_fp16.h>
#include <mma.h>
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
    const int64_t last_q = q0 + ATT_QROWS - 1 < lq ? q0 + ATT_QROWS - 1 : lq - 1;
    const int64_t kend = causal ? tsr_cu_causal_keys(last_q, lq, lk) : lk;

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

/* ---- the tensor-core flash path (f16, head dims up to 160) ----
 * A block of 4 warps takes 64 query rows of one (batch, head); warp w owns
 * rows 16w..16w+15.  Keys are walked in tiles of BK (64 for padded head dims
 * up to 80, 32 above, so the shared memory fits sm_86/89's 99 KiB), K and V
 * staged in shared memory as f16 with the head dim zero-padded to DP (a
 * multiple of 16).  Per tile and warp: S = Q K^T on the tensor cores (WMMA
 * 16x16x16, f32 accumulators) into a warp-private f32 tile; the online-softmax
 * update of cuda_math.h by lane pairs (lane 2r and 2r+1 share row r, half of
 * the tile's columns each), P stored as f16; the running output O (f32, in
 * shared memory, since a WMMA accumulator's element-to-row map is opaque) is
 * rescaled by the lane pairs, then O += P V on the tensor cores.  No Lq x Lk
 * buffer; the only memory beyond q, k, v and y is shared. */
#define WM_WARPS 4
/* Longest key sequence the default dispatch sends to the tensor-core flash
 * kernel (tsr_cu_attention). */
#define TSR_CU_ATTN_WMMA_MAX_LK 128
#define WM_QROWS (16 * WM_WARPS)

template <int DP, int BK> struct wm_smem {
    static constexpr int LDH = DP + 8;  /* f16 rows of Q, K, V (ldm: multiple of 8) */
    static constexpr int LDS = BK + 4;  /* f32 rows of S (multiple of 4) */
    static constexpr int LDP = BK + 8;  /* f16 rows of P */
    static constexpr int LDO = DP + 4;  /* f32 rows of O */
    static constexpr size_t q = (size_t)WM_QROWS * LDH * 2, k = (size_t)BK * LDH * 2;
    static constexpr size_t sf = (size_t)16 * LDS * 4, pf = (size_t)16 * LDP * 2,
                            of = (size_t)16 * LDO * 4;
    static constexpr size_t bytes = q + 2 * k + WM_WARPS * (sf + pf + of);
};

template <int DP, int BK>
__global__ void __launch_bounds__(WM_WARPS * 32)
    k_attention_wmma(const __half *q, const __half *k, const __half *v, __half *y, int64_t lq,
                     int64_t lk, int heads, int d, float scale, int causal)
{
    using namespace nvcuda;
    typedef wm_smem<DP, BK> L;
    extern __shared__ __align__(128) unsigned char wm_raw[];
    __half *qs = (__half *)wm_raw;
    __half *ks = (__half *)(wm_raw + L::q);
    __half *vs = (__half *)(wm_raw + L::q + L::k);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    unsigned char *wbase = wm_raw + L::q + 2 * L::k + warp * (L::sf + L::pf + L::of);
    float *sf = (float *)wbase;
    __half *pf = (__half *)(wbase + L::sf);
    float *of = (float *)(wbase + L::sf + L::pf);

    const int bh = blockIdx.y, bi = bh / heads, h = bh % heads;
    const int64_t q0 = (int64_t)blockIdx.x * WM_QROWS;
    const int64_t hd = (int64_t)heads * d;
    const __half hz = __float2half(0.0f);

    for (int e = threadIdx.x; e < WM_QROWS * DP; e += blockDim.x) {
        const int r = e / DP, c = e % DP;
        const int64_t qi = q0 + r;
        qs[r * L::LDH + c] = (qi < lq && c < d) ? q[((int64_t)bi * lq + qi) * hd + h * d + c] : hz;
    }
    for (int e = lane; e < 16 * L::LDO; e += 32)
        of[e] = 0.0f;
    /* lane pair (2r, 2r+1) owns row r of the warp's 16 */
    const int row = lane / 2, half = lane % 2;
    const int64_t qi = q0 + warp * 16 + row;
    float m = -INFINITY, l = 0.0f;

    /* keys past the last one any row of this block may see are skipped */
    const int64_t last_q = q0 + WM_QROWS - 1 < lq ? q0 + WM_QROWS - 1 : lq - 1;
    const int64_t kend = causal ? tsr_cu_causal_keys(last_q, lq, lk) : lk;
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> qa[DP / 16];
    for (int kk = 0; kk < DP / 16; kk++)
        wmma::load_matrix_sync(qa[kk], qs + (warp * 16) * L::LDH + kk * 16, L::LDH);

    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads(); /* every warp is done with the previous K/V tile */
        for (int e = threadIdx.x; e < BK * DP; e += blockDim.x) {
            const int j = e / DP, c = e % DP;
            const int64_t kj = k0 + j;
            __half kv = hz, vv = hz;
            if (kj < lk && c < d) {
                const int64_t off = ((int64_t)bi * lk + kj) * hd + h * d + c;
                kv = k[off];
                vv = v[off];
            }
            ks[j * L::LDH + c] = kv;
            vs[j * L::LDH + c] = vv;
        }
        __syncthreads();
        /* S = Q K^T: B(dim, key) = K[key][dim], column-major with ldm LDH */
        for (int j = 0; j < BK / 16; j++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int kk = 0; kk < DP / 16; kk++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> kb;
                wmma::load_matrix_sync(kb, ks + (j * 16) * L::LDH + kk * 16, L::LDH);
                wmma::mma_sync(acc, qa[kk], kb, acc);
            }
            wmma::store_matrix_sync(sf + j * 16, acc, L::LDS, wmma::mem_row_major);
        }
        __syncwarp();
        /* online softmax over this tile, half a row per lane */
        const int c0 = half * (BK / 2);
        float tmax = -INFINITY;
        for (int c = c0; c < c0 + BK / 2; c++) {
            const int64_t kj = k0 + c;
            const bool vis = kj < lk && (!causal || tsr_cu_causal_visible(qi, kj, lq, lk));
            const float sv = vis ? sf[row * L::LDS + c] * scale : -INFINITY;
            sf[row * L::LDS + c] = sv;
            tmax = fmaxf(tmax, sv);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        const float mn = tsr_cu_osm_new_max(m, tmax);
        const float corr = tsr_cu_osm_rescale(m, mn);
        float psum = 0.0f;
        for (int c = c0; c < c0 + BK / 2; c++) {
            const float p = tsr_cu_osm_weight(sf[row * L::LDS + c], mn);
            const __half ph = __float2half(p);
            pf[row * L::LDP + c] = ph;
            psum += __half2float(ph); /* the weights the product will use */
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l = l * corr + psum;
        m = mn;
        for (int c = half * (DP / 2); c < (half + 1) * (DP / 2); c++)
            of[row * L::LDO + c] *= corr;
        __syncwarp();
        /* O += P V: B(key, dim) = V[key][dim], row-major with ldm LDH */
        for (int j = 0; j < DP / 16; j++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, of + j * 16, L::LDO, wmma::mem_row_major);
            for (int kk = 0; kk < BK / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> pa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> vb;
                wmma::load_matrix_sync(pa, pf + kk * 16, L::LDP);
                wmma::load_matrix_sync(vb, vs + (kk * 16) * L::LDH + j * 16, L::LDH);
                wmma::mma_sync(acc, pa, vb, acc);
            }
            wmma::store_matrix_sync(of + j * 16, acc, L::LDO, wmma::mem_row_major);
        }
        __syncwarp();
    }

    if (qi < lq) {
        const float inv = l > 0.0f ? 1.0f / l : 0.0f; /* no visible key: 0 */
        for (int c = half; c < d; c += 2)
            y[((int64_t)bi * lq + qi) * hd + h * d + c] = __float2half(of[row * L::LDO + c] * inv);
    }
}

template <int DP>
static int att_wmma_launch(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k,
                           const tsr_tensor *v, tsr_tensor *y, int heads, int d, float scale,
                           int causal)
{
    constexpr int BK = DP <= 80 ? 64 : 32;
    const size_t smem = wm_smem<DP, BK>::bytes;
    if (smem > 48 * 1024)
        TSR_CUDA_CHECK(cudaFuncSetAttribute(k_attention_wmma<DP, BK>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
    const int64_t bsz = q->ne[0], lq = q->ne[1], lk = k->ne[1];
    dim3 grid((unsigned)((lq + WM_QROWS - 1) / WM_QROWS), (unsigned)(bsz * heads));
    k_attention_wmma<DP, BK><<<grid, WM_WARPS * 32, smem, tsr_cu_ctx(b)->stream>>>(
        (const __half *)q->data, (const __half *)k->data, (const __half *)v->data,
        (__half *)y->data, lq, lk, heads, d, scale, causal);
    TSR_CUDA_LAUNCHED("attention");
    return TSR_OK;
}

/* The tensor-core flash path, where it applies (f16, head dim <= 160);
 * 1 where it does not. */
static int att_wmma(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k, const tsr_tensor *v,
                    const tsr_attention_params *p, tsr_tensor *y, int64_t d, float scale)
{
    if (q->dtype != TSR_F16 || k->dtype != TSR_F16 || v->dtype != TSR_F16 ||
        y->dtype != TSR_F16 || d > 160 || (int64_t)q->ne[0] * p->heads > 65535)
        return 1;
    const int c = p->causal ? 1 : 0, di = (int)d;
    switch ((d + 15) / 16) {
    case 1: return att_wmma_launch<16>(b, q, k, v, y, p->heads, di, scale, c);
    case 2: return att_wmma_launch<32>(b, q, k, v, y, p->heads, di, scale, c);
    case 3: return att_wmma_launch<48>(b, q, k, v, y, p->heads, di, scale, c);
    case 4: return att_wmma_launch<64>(b, q, k, v, y, p->heads, di, scale, c);
    case 5: return att_wmma_launch<80>(b, q, k, v, y, p->heads, di, scale, c);
    case 6: return att_wmma_launch<96>(b, q, k, v, y, p->heads, di, scale, c);
    case 7: return att_wmma_launch<112>(b, q, k, v, y, p->heads, di, scale, c);
    case 8: return att_wmma_launch<128>(b, q, k, v, y, p->heads, di, scale, c);
    case 9: return att_wmma_launch<144>(b, q, k, v, y, p->heads, di, scale, c);
    default: return att_wmma_launch<160>(b, q, k, v, y, p->heads, di, scale, c);
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
    const int64_t vis = causal ? tsr_cu_causal_keys(qi, lq, lk) : lk;
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

void tsr_cu_attention_config(cuda_ctx *c)
{
    const char *e = getenv("TSR_CUDA_ATTENTION");
    c->att_path = !e                        ? TSR_CU_ATT_AUTO
                  : strcmp(e, "wmma") == 0  ? TSR_CU_ATT_WMMA
                  : strcmp(e, "gemm") == 0  ? TSR_CU_ATT_GEMM
                  : strcmp(e, "flash") == 0 ? TSR_CU_ATT_FLASH
                  : strcmp(e, "cudnn") == 0 ? TSR_CU_ATT_CUDNN
                  : strcmp(e, "fa2") == 0   ? TSR_CU_ATT_FA2
                                            : TSR_CU_ATT_AUTO;
    e = getenv("TSR_CUDA_ATTENTION_SCRATCH_MIB");
    long mib = e && *e ? strtol(e, NULL, 10) : 256;
    if (mib < 1)
        mib = 1;
    c->att_scratch_max = (size_t)mib << 20;
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
    int64_t qc = (int64_t)(c->att_scratch_max / row_bytes);
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

int tsr_cu_attention(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k, const tsr_tensor *v,
                     const tsr_attention_params *p, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "attention");
    if (rc < 0)
        return rc;
    const int64_t bsz = q->ne[0], lq = q->ne[1], lk = k->ne[1];
    const int64_t d = q->ne[2] / p->heads;
    if (d > TSR_CU_ATTN_MAX_D || (int64_t)bsz * p->heads > 65535)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "attention: head size %lld x %lld heads",
                          (long long)d, (long long)bsz * p->heads);
    const float scale = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)d);
    const int causal = p->causal ? 1 : 0;
    const int path = tsr_cu_ctx(b)->att_path;
    /* the FA2 kernel (ops_attention_fa2.cu), opt-in (TSR_CUDA_ATTENTION=fa2)
     * until a GPU run has checked it; a shape it does not take runs on the
     * GEMM path (or, with TSR_CUDA_ATTENTION_FA2_STRICT=1, fails) */
    if (path == TSR_CU_ATT_FA2) {
        rc = tsr_cu_attention_fa2(b, q, k, v, p, y, d, scale);
        if (rc <= 0)
            return rc;
    }
    /* cuDNN's fused SDPA (TSR_CUDA_ATTENTION=cudnn, opt-in until a GPU run
     * has checked it) on every shape it takes, then the default order */
    if (path == TSR_CU_ATT_CUDNN) {
        rc = tsr_cu_attention_cudnn(b, q, k, v, p, y, d, scale);
        if (rc <= 0)
            return rc;
    }
    const bool auto_order = path == TSR_CU_ATT_AUTO || path == TSR_CU_ATT_CUDNN;
    /* the tensor-core flash kernel wins only over short key sequences (the
     * cross-attention's 77 text tokens, the text encoders): 0.108 against
     * the GEMM path's 0.181 ms at 4096x77, but 2.4 against 1.7 ms at
     * 4096x4096 on an H200 (docs/perf.md) */
    if (path == TSR_CU_ATT_WMMA || (auto_order && lk <= TSR_CU_ATTN_WMMA_MAX_LK)) {
        rc = att_wmma(b, q, k, v, p, y, d, scale);
        if (rc <= 0)
            return rc;
    }
    if (path != TSR_CU_ATT_FLASH && q->dtype == k->dtype && v->dtype == y->dtype) {
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
