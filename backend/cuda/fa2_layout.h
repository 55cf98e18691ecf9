/*
 * backend/cuda/fa2_layout.h - the bookkeeping of the FlashAttention-2 kernel
 * (ops_attention_fa2.cu): which matrix element each lane's registers hold,
 * which shared-memory row each lane hands to ldmatrix, where a 16-byte
 * chunk of a row lives in shared memory, and the per-lane online-softmax
 * step over one key tile.  Plain C17 and C++17, like cuda_math.h: TSR_HD
 * functions the kernel calls on the device and tests/gpu/test_fa2_layout.c
 * calls on the host.
 *
 * Why: this kernel cannot run in CI (no GPU), and a wrong lane map does not
 * crash, it silently mixes rows.  So every map the kernel relies on is a
 * function here, and the host test replays a whole thread block with them:
 * ldmatrix and mma.sync are emulated from the PTX ISA's own description of
 * their fragments (written out independently in the test), and the result
 * must equal a plain triple loop (S = QK^T, O = PV, exact on small
 * integers) and the CPU backend's attention (masking, online softmax).
 *
 * Conventions.  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, with
 * g = lane >> 2 and t = lane & 3:
 *   A 16x16 (row-major), 4 b32 registers of 2 halves: reg 0 (g, 2t..2t+1),
 *     reg 1 (g+8, 2t..), reg 2 (g, 2t+8..), reg 3 (g+8, 2t+8..);
 *   B 16x8 (k x n, "col": n-major), 2 registers: reg 0 (k = 2t..2t+1, n = g),
 *     reg 1 (k = 2t+8.., n = g);
 *   C/D 16x8 f32, 4 floats: c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1).
 * A warp's S tile of 16 rows x BK keys is BK/8 such C fragments, held as
 * s[4*j + i] (n8 tile j, element i); its output O, 16 rows x D dims, is
 * D/8 fragments o[4*n + i].
 *
 * Shared memory holds rows of 16-byte chunks (8 halves).  A row of the head
 * dim d uses CD = d/8 chunks of data; the QK^T reduction is padded to DK (a
 * multiple of 16) with zero chunks CD..DK/8-1 (d = 40 -> 48); the row
 * stride is LDC = (DK/8) | 1 chunks, odd, so the 8 rows of an 8x8 ldmatrix
 * matrix (8 consecutive rows, one chunk column) fall in 8 different 16-byte
 * bank groups: conflict-free without a swizzle.
 */
#ifndef TSR_CUDA_FA2_LAYOUT_H
#define TSR_CUDA_FA2_LAYOUT_H

#include "cuda_math.h"

#if defined(__CUDA_ARCH__)
#define TSR_FA2_UNROLL _Pragma("unroll")
#else
#define TSR_FA2_UNROLL
#endif

/* ---- the kernel's shape, per head dim ---- */

#define TSR_FA2_WARPS 4                          /* warps per block; each owns 16 query rows */
#define TSR_FA2_ROWS (16 * TSR_FA2_WARPS)        /* query rows per block */
#define TSR_FA2_DK(d) (((d) + 15) / 16 * 16)     /* the QK^T reduction, zero-padded */
#define TSR_FA2_BK(d) ((d) <= 80 ? 64 : 32)      /* keys per tile (registers: see the .cu) */
#define TSR_FA2_LDC(d) ((TSR_FA2_DK(d) / 8) | 1) /* shared row stride in 16-byte chunks */

/* Bytes of shared memory: Q [ROWS][LDC] (reused to stage the output), then
 * K and V, two buffers each, [BK][LDC]. */
TSR_HD size_t tsr_fa2_smem_bytes(int d)
{
    return (size_t)16 * TSR_FA2_LDC(d) * (TSR_FA2_ROWS + 4 * TSR_FA2_BK(d));
}

/* Chunk (row, chunk) of a [rows][ldc] region, in 16-byte units. */
TSR_HD int tsr_fa2_smem(int row, int chunk, int ldc) { return row * ldc + chunk; }

/* ---- fragment coordinates (the C map is what the kernel uses to mask
 * scores and to place its output) ---- */

TSR_HD int tsr_fa2_c_row(int lane, int i) { return (lane >> 2) + ((i >> 1) << 3); }
TSR_HD int tsr_fa2_c_col(int lane, int i) { return ((lane & 3) << 1) + (i & 1); }

/* The FA2 register reuse: the A operand of P V for key step kk (keys
 * 16kk..16kk+15) is the S accumulators of n8 tiles 2kk and 2kk+1, rounded to
 * f16.  Half h (0 = low 16 bits) of A register r comes from s[this]. */
TSR_HD int tsr_fa2_p_src(int kk, int r, int h) { return 4 * (2 * kk + (r >> 1)) + 2 * (r & 1) + h; }

/* ---- ldmatrix.x4: lane l supplies the address of row (l & 7) of matrix
 * (l >> 3); register m of every lane receives from matrix m.  (.x2: lanes
 * 0..15 supply matrices 0 and 1.) ---- */

/* Q, A operand of k-step kk for warp w: matrices (rows 0-7, chunk 2kk),
 * (rows 8-15, 2kk), (rows 0-7, 2kk+1), (rows 8-15, 2kk+1) = A regs 0..3. */
TSR_HD int tsr_fa2_ldm_q_row(int lane, int warp) { return 16 * warp + (lane & 7) + (lane & 8); }
TSR_HD int tsr_fa2_ldm_q_chunk(int lane, int kk) { return 2 * kk + (lane >> 4); }

/* K, B operands of n8 tiles 2jp and 2jp+1 (keys 16jp..16jp+15) at k-step
 * kk: matrices (keys 0-7, chunk 2kk), (keys 0-7, 2kk+1), (keys 8-15, 2kk),
 * (keys 8-15, 2kk+1) = B regs 0,1 of tile 2jp, then of tile 2jp+1. */
TSR_HD int tsr_fa2_ldm_k_row(int lane, int jp) { return 16 * jp + (lane & 7) + ((lane >> 4) << 3); }
TSR_HD int tsr_fa2_ldm_k_chunk(int lane, int kk) { return 2 * kk + ((lane >> 3) & 1); }

/* V with .trans, B operands of output n8 tiles 2np and 2np+1 (dims
 * 16np..16np+15) at key step kk: matrices (keys 0-7, chunk 2np), (keys
 * 8-15, 2np), (keys 0-7, 2np+1), (keys 8-15, 2np+1) = B regs 0,1 of tile
 * 2np, then of tile 2np+1.  For an odd tile count the last tile takes .x2
 * with the same map (lanes 0..15). */
TSR_HD int tsr_fa2_ldm_v_row(int lane, int kk) { return 16 * kk + (lane & 7) + (lane & 8); }
TSR_HD int tsr_fa2_ldm_v_chunk(int lane, int np) { return 2 * np + (lane >> 4); }

/* ---- masking and the online softmax, one lane at a time ----
 * Scores are raw q.k; the softmax runs in the exp2 domain with
 * sl2 = scale * log2(e) folded into one fma (FA2): p = 2^(s*sl2 - m*sl2). */

TSR_HD float tsr_fa2_exp2(float x)
{
#if defined(__CUDA_ARCH__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

/* Whether query row qi sees key kj (keys past lk are tile padding). */
TSR_HD int tsr_fa2_visible(int64_t qi, int64_t kj, int64_t lq, int64_t lk, int causal)
{
    return kj < lk && (!causal || tsr_cu_causal_visible(qi, kj, lq, lk));
}

/* Whether any (row, key) of rows row0..row0+15 and keys k0..k0+bk-1 is
 * masked: only such tiles pay for tsr_fa2_mask. */
TSR_HD int tsr_fa2_tile_needs_mask(int64_t row0, int64_t k0, int bk, int64_t lq, int64_t lk,
                                   int causal)
{
    return k0 + bk > lk || (causal && !tsr_cu_causal_visible(row0, k0 + bk - 1, lq, lk));
}

/* The scores this lane holds that row qi may not see become -inf.  row0:
 * the warp's first query row; k0: the tile's first key; nt n8 tiles. */
TSR_HD void tsr_fa2_mask(float *s, int nt, int lane, int64_t row0, int64_t k0, int64_t lq,
                         int64_t lk, int causal)
{
    TSR_FA2_UNROLL
    for (int j = 0; j < nt; j++) {
        TSR_FA2_UNROLL
        for (int i = 0; i < 4; i++) {
            const int64_t qi = row0 + tsr_fa2_c_row(lane, i);
            const int64_t kj = k0 + 8 * j + tsr_fa2_c_col(lane, i);
            if (!tsr_fa2_visible(qi, kj, lq, lk, causal))
                s[4 * j + i] = -INFINITY;
        }
    }
}

/* This lane's maxima of its two rows (mx[0]: row g, mx[1]: row g+8); the
 * kernel then takes the max over the 4 lanes of the quad (shfl xor 1, 2). */
TSR_HD void tsr_fa2_lane_max(const float *s, int nt, float *mx)
{
    mx[0] = -INFINITY;
    mx[1] = -INFINITY;
    TSR_FA2_UNROLL
    for (int j = 0; j < nt; j++) {
        mx[0] = fmaxf(mx[0], fmaxf(s[4 * j], s[4 * j + 1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
}

/* The online-softmax step once mx holds the rows' tile maxima (quad-wide):
 * m (running max of raw scores, -inf while nothing was visible), l (this
 * lane's partial row sum: the quad's lanes are summed once, at the end) and
 * the output o (no n8 tiles) are rescaled; s becomes the weights p.  A
 * masked score (-inf) weighs exactly 0, and nothing is NaN while a row has
 * seen no key yet (its max then counts as 0). */
TSR_HD void tsr_fa2_update(float *s, int nt, float *o, int no, float *m, float *l, const float *mx,
                           float sl2)
{
    TSR_FA2_UNROLL
    for (int r = 0; r < 2; r++) {
        const float mn = fmaxf(m[r], mx[r]);
        const float ms = mn == -INFINITY ? 0.0f : mn * sl2;
        const float corr = tsr_fa2_exp2(m[r] * sl2 - ms); /* 0 when m[r] was -inf */
        m[r] = mn;
        float sum = 0.0f;
        TSR_FA2_UNROLL
        for (int j = 0; j < nt; j++) {
            const float p0 = tsr_fa2_exp2(fmaf(s[4 * j + 2 * r], sl2, -ms));
            const float p1 = tsr_fa2_exp2(fmaf(s[4 * j + 2 * r + 1], sl2, -ms));
            s[4 * j + 2 * r] = p0;
            s[4 * j + 2 * r + 1] = p1;
            sum += p0 + p1;
        }
        l[r] = l[r] * corr + sum;
        TSR_FA2_UNROLL
        for (int n = 0; n < no; n++) {
            o[4 * n + 2 * r] *= corr;
            o[4 * n + 2 * r + 1] *= corr;
        }
    }
}

/* 1/l of a row once l is summed over the quad: 0 for a row that saw no key
 * (its output is then 0, as backend.h asks). */
TSR_HD float tsr_fa2_inv_sum(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }

#endif
