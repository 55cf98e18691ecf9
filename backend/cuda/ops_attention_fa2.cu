/*
 * backend/cuda/ops_attention_fa2.cu - attention forward, FlashAttention-2
 * style, on mma.sync tensor-core instructions (TSR_CUDA_ATTENTION=fa2;
 * opt-in until a GPU run has checked it).
 *
 * Why it is built this way.  The WMMA kernel of ops_attention.cu keeps the
 * running output O in shared memory, because a WMMA accumulator's
 * element-to-(row, col) map is opaque: every key tile it stores S, reloads
 * it for the softmax, stores P, reloads O, rescales it and stores it again.
 * At SD1.5's 4096x4096 self-attention that made it slower than the GEMM
 * path (2.4 against 1.7 ms on an H200, PyTorch SDPA 0.17 ms).  With
 * mma.sync.m16n8k16 the fragment layouts are documented (PTX ISA), so here
 * O, the row max m and the row sum l stay in registers for the whole key
 * sweep, and the S accumulators of two adjacent n8 tiles become, after the
 * softmax, the A operand of P V in registers (the FA2 trick): per key tile
 * the only shared-memory traffic is ldmatrix of K and V.
 *
 * Design.  A block of 4 warps takes 64 query rows of one (batch, head)
 * (grid: query blocks x batch*heads, <= 65535); warp w owns rows
 * 16w..16w+15, its Q fragments loaded once (ldmatrix.x4) into registers.
 * Keys are walked in tiles of BK = 64 (32 for d = 160, for registers), K
 * and V staged by 16-byte cp.async (zero-filled past lk) into two shared
 * buffers, so the next tile loads while this one is computed.  Per tile and
 * warp: S = Q K^T (B operands by ldmatrix.x4 of K rows), the tile's scores
 * masked to -inf where causal or past lk (only on tiles that need it), the
 * online softmax in the exp2 domain with scale*log2(e) folded into one fma,
 * then O += P V (B operands by ldmatrix.x4.trans of V rows; .x2 for an odd
 * last n8 tile: d = 40 has 5).  Head dims 40 (the QK^T reduction padded to
 * 48 with zero chunks in shared memory), 64, 80 and 160; f16 in and out,
 * f32 accumulation.  Shared rows are padded to an odd number of 16-byte
 * chunks, so ldmatrix is conflict-free without a swizzle.  At the end each
 * warp stages its 16 output rows (already divided by l; a row that saw no
 * key is 0) in its own Q rows of shared memory and writes them with 16-byte
 * stores.  No Lq x Lk buffer; no memory beyond q, k, v and y.
 *
 * Every index map (fragment coordinates, ldmatrix addresses, the S -> P
 * register reuse, the shared layout) and the per-lane masking and softmax
 * step are functions of fa2_layout.h, replayed on the host for whole
 * blocks by tests/gpu/test_fa2_layout.c (label unit) with ldmatrix and
 * mma.sync emulated from the PTX ISA's fragment description, against a
 * triple loop and the CPU backend.
 *
 * Resources (nvcc 13.0.88, -Xptxas -v, with __launch_bounds__(128, 4) for
 * d <= 64 and (128, 3) above; 0 bytes of spill stores/loads and 0 bytes of
 * stack frame in every instantiation on sm_80, 86, 89 and 90):
 *   head dim   BK  registers (sm_80/86/89 | sm_90)  shared/block  blocks/SM by regs
 *   40         64  120 | 127                        35 KiB        4
 *   64         64  128 | 128                        45 KiB        4
 *   80         64  157 | 158                        55 KiB        3
 *   160        32  168 | 168                        63 KiB        3
 * (shared: Q 64 x LDC plus K and V, 2 x BK x LDC each, in 16-byte chunks;
 * LDC = 7, 9, 11, 21.)  Without the minimum-blocks hint ptxas took 103, 135,
 * 133 and 167 registers on sm_90; the hint keeps d <= 64 at 4 blocks (16
 * warps) per SM.  Per key tile and warp: d64 issues 64 mma.sync and 32
 * ldmatrix, d40 44 and 24 (counted in the PTX; Q's 4 or 3 ldmatrix come
 * once); every loop is unrolled, no local memory.
 *
 * Unverified: nothing here has run on a GPU yet.  The host test checks
 * the maps and the arithmetic, sequentially; it cannot check that the
 * hardware matches its reading of the PTX ISA, the cp.async / barrier
 * ordering of the double buffer, or speed.  tests/gpu's
 * gpu_ops_attention_fa2 and gpu_ops_attention_sd_fa2 (TSR_CUDA_ATTENTION=fa2
 * with TSR_CUDA_ATTENTION_FA2_STRICT=1 at every SD attention shape, batch
 * 2 and 32, causal too, against the CPU at 3e-3) and run.sh's timing stage
 * (bench ops under TSR_CUDA_ATTENTION=fa2 beside the other paths and
 * PyTorch SDPA; the UNet with fa2) are the check; docs/perf.md names the
 * command.  No speed is claimed.
 */
#include "fa2_layout.h"
#include "ops_attention_fa2.cuh"

#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the PTX this kernel is made of (sm_80+) ---- */

static __device__ __forceinline__ uint32_t fa2_saddr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, bypassing L1; zero-filled when !full (src is
 * then not read, but is kept a valid address). */
static __device__ __forceinline__ void fa2_cp_async16(uint32_t dst, const void *src, bool full)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(full ? 16 : 0)
                 : "memory");
}

static __device__ __forceinline__ void fa2_cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* all but the newest n committed groups have landed (this thread's) */
template <int N> static __device__ __forceinline__ void fa2_cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

static __device__ __forceinline__ void fa2_ldm_x4(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void fa2_ldm_x4_trans(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void fa2_ldm_x2_trans(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

/* c[0..3] += A (16x16, a[0..3]) x B (16x8, b0, b1) */
static __device__ __forceinline__ void fa2_mma(float *c, const uint32_t *a, uint32_t b0,
                                               uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* two floats rounded to f16 in one b32: lo in the low 16 bits */
static __device__ __forceinline__ uint32_t fa2_pack(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}

/* ---- the kernel ---- */

/* grid (ceil(lq / 64), batch * heads); q, y [b, lq, heads*D], k, v
 * [b, lk, heads*D]; sl2 = scale * log2(e) */
template <int D>
__global__ void __launch_bounds__(TSR_FA2_WARPS * 32, D <= 64 ? 4 : 3)
    k_attention_fa2(const __half *__restrict__ q, const __half *__restrict__ k,
                    const __half *__restrict__ v, __half *__restrict__ y, int lq, int lk, int heads,
                    float sl2, int causal)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int DK = TSR_FA2_DK(D), BK = TSR_FA2_BK(D), LDC = TSR_FA2_LDC(D);
    constexpr int CD = D / 8;   /* chunks of data per row */
    constexpr int CQ = DK / 8;  /* chunks the QK^T reduction reads (CD.. are zero) */
    constexpr int NT = BK / 8;  /* n8 tiles of S */
    constexpr int NO = D / 8;   /* n8 tiles of O */
    constexpr int KQ = DK / 16; /* k-steps of QK^T */
    constexpr int KP = BK / 16; /* k-steps of PV */
    constexpr int NTH = TSR_FA2_WARPS * 32, ROWS = TSR_FA2_ROWS;
    static_assert(D % 8 == 0 && NT % 2 == 0 && LDC % 2 == 1, "fa2 shape");

    extern __shared__ uint4 fa2_smem[];
    uint4 *qs = fa2_smem;          /* [ROWS][LDC]; the output's staging at the end */
    uint4 *ks = qs + ROWS * LDC;   /* [2][BK][LDC] */
    uint4 *vs = ks + 2 * BK * LDC; /* [2][BK][LDC] */

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int bh = blockIdx.y, bi = bh / heads, h = bh % heads;
    const int q0 = blockIdx.x * ROWS, row0 = q0 + 16 * warp;
    const int64_t hd = (int64_t)heads * D;
    const __half *qg = q + (int64_t)bi * lq * hd + (int64_t)h * D;
    const __half *kg = k + (int64_t)bi * lk * hd + (int64_t)h * D;
    const __half *vg = v + (int64_t)bi * lk * hd + (int64_t)h * D;

    /* keys past the last one any row of this block may see are skipped */
    const int last_q = (q0 + ROWS < lq ? q0 + ROWS : lq) - 1;
    const int kend = causal ? (int)tsr_cu_causal_keys(last_q, lq, lk) : lk;
    const int ntiles = (kend + BK - 1) / BK;

    /* the zero chunks of the padded QK^T reduction (d = 40: dims 40..47) of
     * Q and both K buffers; cp.async never writes them */
    if constexpr (CQ > CD) {
        for (int e = tid; e < (ROWS + 2 * BK) * (CQ - CD); e += NTH) {
            const int r = e / (CQ - CD), c = CD + e % (CQ - CD);
            qs[tsr_fa2_smem(r, c, LDC)] = make_uint4(0u, 0u, 0u, 0u); /* rows past ROWS: ks */
        }
    }
    for (int e = tid; e < ROWS * CD; e += NTH) {
        const int r = e / CD, c = e % CD, qi = q0 + r;
        const bool in = qi < lq;
        fa2_cp_async16(fa2_saddr(qs + tsr_fa2_smem(r, c, LDC)),
                       qg + (in ? (int64_t)qi * hd + 8 * c : 0), in);
    }
    auto load_kv = [&](int t) {
        const int k0 = t * BK, buf = (t & 1) * BK * LDC;
        for (int e = tid; e < BK * CD; e += NTH) {
            const int r = e / CD, c = e % CD, kj = k0 + r;
            const bool in = kj < lk;
            const int64_t off = in ? (int64_t)kj * hd + 8 * c : 0;
            const int at = buf + tsr_fa2_smem(r, c, LDC);
            fa2_cp_async16(fa2_saddr(ks + at), kg + off, in);
            fa2_cp_async16(fa2_saddr(vs + at), vg + off, in);
        }
    };
    if (ntiles > 0)
        load_kv(0);
    fa2_cp_commit();

    float o[4 * NO], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    TSR_FA2_UNROLL
    for (int i = 0; i < 4 * NO; i++)
        o[i] = 0.0f;
    uint32_t qa[KQ][4];

    for (int t = 0; t < ntiles; t++) {
        if (t + 1 < ntiles) {
            load_kv(t + 1);
            fa2_cp_commit();
            fa2_cp_wait<1>();
        } else {
            fa2_cp_wait<0>();
        }
        __syncthreads(); /* tile t (and Q, the zero chunks) visible to every warp */
        if (t == 0) {
            TSR_FA2_UNROLL
            for (int kk = 0; kk < KQ; kk++)
                fa2_ldm_x4(qa[kk],
                           fa2_saddr(qs + tsr_fa2_smem(tsr_fa2_ldm_q_row(lane, warp),
                                                       tsr_fa2_ldm_q_chunk(lane, kk), LDC)));
        }
        const uint4 *kb = ks + (t & 1) * BK * LDC, *vb = vs + (t & 1) * BK * LDC;

        /* S = Q K^T */
        float s[4 * NT];
        TSR_FA2_UNROLL
        for (int i = 0; i < 4 * NT; i++)
            s[i] = 0.0f;
        TSR_FA2_UNROLL
        for (int kk = 0; kk < KQ; kk++) {
            TSR_FA2_UNROLL
            for (int jp = 0; jp < NT / 2; jp++) {
                uint32_t b[4];
                fa2_ldm_x4(b, fa2_saddr(kb + tsr_fa2_smem(tsr_fa2_ldm_k_row(lane, jp),
                                                          tsr_fa2_ldm_k_chunk(lane, kk), LDC)));
                fa2_mma(&s[4 * (2 * jp)], qa[kk], b[0], b[1]);
                fa2_mma(&s[4 * (2 * jp + 1)], qa[kk], b[2], b[3]);
            }
        }

        /* masking, online softmax: s becomes P */
        const int k0 = t * BK;
        if (tsr_fa2_tile_needs_mask(row0, k0, BK, lq, lk, causal))
            tsr_fa2_mask(s, NT, lane, row0, k0, lq, lk, causal);
        float mx[2];
        tsr_fa2_lane_max(s, NT, mx);
        TSR_FA2_UNROLL
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        }
        tsr_fa2_update(s, NT, o, NO, m, l, mx, sl2);

        /* O += P V, P straight from the S registers */
        TSR_FA2_UNROLL
        for (int kk = 0; kk < KP; kk++) {
            uint32_t a[4];
            TSR_FA2_UNROLL
            for (int r = 0; r < 4; r++)
                a[r] = fa2_pack(s[tsr_fa2_p_src(kk, r, 0)], s[tsr_fa2_p_src(kk, r, 1)]);
            const int vrow = tsr_fa2_ldm_v_row(lane, kk);
            TSR_FA2_UNROLL
            for (int np = 0; np < NO / 2; np++) {
                uint32_t b[4];
                fa2_ldm_x4_trans(
                    b, fa2_saddr(vb + tsr_fa2_smem(vrow, tsr_fa2_ldm_v_chunk(lane, np), LDC)));
                fa2_mma(&o[4 * (2 * np)], a, b[0], b[1]);
                fa2_mma(&o[4 * (2 * np + 1)], a, b[2], b[3]);
            }
            if (NO % 2) {
                uint32_t b[2];
                fa2_ldm_x2_trans(
                    b, fa2_saddr(vb + tsr_fa2_smem(vrow, tsr_fa2_ldm_v_chunk(lane, NO / 2), LDC)));
                fa2_mma(&o[4 * (NO - 1)], a, b[0], b[1]);
            }
        }
        __syncthreads(); /* every warp is done with buffer t & 1 before it is refilled */
    }

    /* the output: l summed over the quad, O / l staged in this warp's own Q
     * rows as f16, then 16-byte stores of whole rows */
    fa2_cp_wait<0>();
    __syncthreads(); /* no copy into qs in flight (ntiles == 0) */
    float inv[2];
    TSR_FA2_UNROLL
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = tsr_fa2_inv_sum(l[r]);
    }
    __half *stage = reinterpret_cast<__half *>(qs);
    TSR_FA2_UNROLL
    for (int n = 0; n < NO; n++) {
        TSR_FA2_UNROLL
        for (int r = 0; r < 2; r++) {
            const int row = 16 * warp + tsr_fa2_c_row(lane, 2 * r);
            const int col = 8 * n + tsr_fa2_c_col(lane, 2 * r);
            *reinterpret_cast<uint32_t *>(stage + 8 * tsr_fa2_smem(row, col / 8, LDC) + col % 8) =
                fa2_pack(o[4 * n + 2 * r] * inv[r], o[4 * n + 2 * r + 1] * inv[r]);
        }
    }
    __syncwarp();
    for (int e = lane; e < 16 * CD; e += 32) {
        const int r = e / CD, c = e % CD, qi = row0 + r;
        if (qi < lq)
            *reinterpret_cast<uint4 *>(y + ((int64_t)bi * lq + qi) * hd + (int64_t)h * D + 8 * c) =
                qs[tsr_fa2_smem(16 * warp + r, c, LDC)];
    }
#endif
}

template <int D>
static int fa2_launch(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k, const tsr_tensor *v,
                      tsr_tensor *y, int heads, float scale, int causal)
{
    const size_t smem = tsr_fa2_smem_bytes(D);
    if (smem > 48 * 1024)
        TSR_CUDA_CHECK(cudaFuncSetAttribute(
            k_attention_fa2<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int64_t bsz = q->ne[0], lq = q->ne[1], lk = k->ne[1];
    dim3 grid((unsigned)((lq + TSR_FA2_ROWS - 1) / TSR_FA2_ROWS), (unsigned)(bsz * heads));
    const float sl2 = scale * 1.4426950408889634f; /* log2(e) */
    k_attention_fa2<D><<<grid, TSR_FA2_WARPS * 32, smem, tsr_cu_ctx(b)->stream>>>(
        (const __half *)q->data, (const __half *)k->data, (const __half *)v->data,
        (__half *)y->data, (int)lq, (int)lk, heads, sl2, causal);
    TSR_CUDA_LAUNCHED("attention (fa2)");
    return TSR_OK;
}

static bool fa2_aligned(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* TSR_CUDA_ATTENTION_FA2_STRICT=1: a shape of a head dim and dtype the
 * kernel has (what the tests force it on) that it still declines is an
 * error naming the reason, not a silent run on another path. */
static int fa2_decline(const char *why)
{
    static int strict = -1;
    if (strict < 0) {
        const char *e = getenv("TSR_CUDA_ATTENTION_FA2_STRICT");
        strict = e && strcmp(e, "1") == 0;
    }
    if (strict)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "attention (fa2, strict): %s", why);
    TSR_DEBUG("attention: fa2 declines (%s); another path runs", why);
    return 1;
}

int tsr_cu_attention_fa2(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k,
                         const tsr_tensor *v, const tsr_attention_params *p, tsr_tensor *y,
                         int64_t d, float scale)
{
    const int64_t bsz = q->ne[0], lq = q->ne[1], lk = k->ne[1];
    if (q->dtype != TSR_F16 || k->dtype != TSR_F16 || v->dtype != TSR_F16 || y->dtype != TSR_F16 ||
        (d != 40 && d != 64 && d != 80 && d != 160))
        return 1; /* not this kernel's shape */
    if (!(scale > 0.0f) || !isfinite(scale))
        return fa2_decline("scale is not positive");
    if (lq > INT32_MAX || lk > INT32_MAX)
        return fa2_decline("sequence longer than 2^31");
    if (bsz * p->heads > 65535)
        return fa2_decline("batch x heads over 65535");
    if (!fa2_aligned(q->data) || !fa2_aligned(k->data) || !fa2_aligned(v->data) ||
        !fa2_aligned(y->data))
        return fa2_decline("q, k, v or y not 16-byte aligned");
    int major = 0;
    TSR_CUDA_CHECK(
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, tsr_cu_ctx(b)->device));
    if (major < 8) /* mma.sync m16n8k16, ldmatrix, cp.async */
        return fa2_decline("the device is older than sm_80");
    if (lq == 0 || bsz == 0)
        return TSR_OK;
    const int c = p->causal ? 1 : 0;
    switch (d) {
    case 40: return fa2_launch<40>(b, q, k, v, y, p->heads, scale, c);
    case 64: return fa2_launch<64>(b, q, k, v, y, p->heads, scale, c);
    case 80: return fa2_launch<80>(b, q, k, v, y, p->heads, scale, c);
    default: return fa2_launch<160>(b, q, k, v, y, p->heads, scale, c);
    }
}
