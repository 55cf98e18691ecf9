/*
 * backend/cpu/attn_flash_impl.h - the flash attention kernel, written once
 * for a 16-float vector and included by attn_scalar.c, attn_avx2.c and
 * attn_avx512.c, each of which first defines:
 *
 *   ATTN_FN        the function's name
 *   ATTN_R         query rows held in registers (<= ATTN_RMAX)
 *   v16            16 floats: v16_zero, v16_set1(x), v16_bcast(const float *),
 *                  v16_load / v16_store (unaligned), v16_fma(a, b, c) = a*b+c
 *                  fused, v16_mul, v16_sub, v16_add, v16_max, v16_exp2
 *                  (attn_exp2_1's steps, attn_flash.h),
 *                  v16_hsum (lanes i and i+8 added, then tsr_hsum8's tree),
 *                  v16_hmax
 *   v8             8 floats: v8_zero, v8_bcast, v8_load, v8_store, v8_fma,
 *                  v8_mul, v8_set1 (the tail of a head size that is 8 mod 16)
 *
 * Why one source: the AVX-512 kernel cannot run on the machines this is
 * developed on; as the same text as the AVX2 one (which the tests run) it
 * has the same blocking, the same order of operations per output element
 * and the same masking, so only the vector type is new.  Per lane the three
 * do the same arithmetic (fused multiply-adds in the same order, the same
 * exp, the same reduction trees), so with a hardware FMA they agree bit for
 * bit.
 *
 * The algorithm (FlashAttention's, on a CPU): a task owns a block of qb
 * query rows of one (batch, head) and walks the keys in blocks of kb (K and
 * V blocks that stay in L2 while every row of the query block uses them).
 * For each group of ATTN_R rows and each key block:
 *   1. S = scale * Q K^T for the block, ATTN_R rows x 16 keys at a time:
 *      the accumulators stay in registers, each step broadcasts one q value
 *      per row and multiplies it into 16 keys' values of that dimension
 *      (hence K packed [d][16] per chunk of 16 keys).
 *   2. Online softmax per row: keys the row may not see (causal mask,
 *      padding) are -inf; the block's max m' updates the running max m, and
 *      if it grew, the running sum l and the accumulator O are scaled by
 *      exp(m - m'); then P = exp(S - m), l += sum P.
 *   3. O += P V, ATTN_R rows x 16 columns of O in registers, one broadcast
 *      of P per row and key (V packed by tiles of 16 columns, each tile's
 *      keys contiguous, so the loop over keys streams).
 * After a group's last key block, y = O / l for its rows (while O is in L1,
 * so the stores to y overlap the next group's work; a row that saw no key
 * is zero), and the next group's q rows are prefetched during the first.  Each row's result
 * depends only on its own q, the keys and the fixed block boundaries, never
 * on the other rows of its group or its task, so batch composition, thread
 * count and query blocking cannot change a bit of it.
 */

#include <math.h>
#include <string.h>

#include "backend/cpu/attn_flash.h"
#include "backend/cpu/cpu_simd.h"

/* The FMA loops run 40+ times with a dozen FMAs each: unrolled by 4, their
 * counter and branch stop costing a sixth of the instructions. */
#define ATTN_UNROLL_N 4
#define ATTN_PRAGMA(x) _Pragma(#x)
#define ATTN_UNROLL_(n) ATTN_PRAGMA(GCC unroll n)
#define ATTN_UNROLL ATTN_UNROLL_(ATTN_UNROLL_N)

/* S[r][0 .. 16 * nch) = scale * q_r . k for the group's rows (the scale
 * includes log2(e): scores in log2 units, see attn_exp2_1). */
static inline void attn_qk(const float *const *qr, const float *kc, int64_t d, int64_t nch,
                           float scale, float *s, int64_t kb)
{
    const v16 vs = v16_set1(scale);
    for (int64_t ch = 0; ch < nch; ch++) {
        const float *kp = kc + ch * d * ATTN_KCHUNK;
        v16 acc[ATTN_R];
        for (int r = 0; r < ATTN_R; r++)
            acc[r] = v16_zero();
        ATTN_UNROLL
        for (int64_t c = 0; c < d; c++) {
            const v16 kv = v16_load(kp + c * ATTN_KCHUNK);
            for (int r = 0; r < ATTN_R; r++)
                acc[r] = v16_fma(v16_bcast(qr[r] + c), kv, acc[r]);
        }
        for (int r = 0; r < ATTN_R; r++)
            v16_store(s + r * kb + ch * ATTN_KCHUNK, v16_mul(acc[r], vs));
    }
}

/* The online softmax step of one row over n = 16 * nch scores, of which
 * the first `vis` are visible.  Leaves P in s (zeros where masked). */
static inline void attn_softmax_row(float *s, int64_t nch, int64_t vis, float *m, float *l,
                                    float *o, int64_t dp)
{
    const int64_t n = nch * ATTN_KCHUNK;
    if (vis <= 0) {
        memset(s, 0, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t i = vis; i < n; i++)
        s[i] = -INFINITY;
    v16 vm = v16_load(s);
    for (int64_t ch = 1; ch < nch; ch++)
        vm = v16_max(vm, v16_load(s + ch * ATTN_KCHUNK));
    const float bm = v16_hmax(vm);
    if (bm > *m) {
        /* 2^-inf is 0: the first block zeroes the (already zero) O */
        const float alpha = attn_exp2_1(*m - bm);
        *l *= alpha;
        const v8 va = v8_set1(alpha);
        for (int64_t c = 0; c < dp; c += 8)
            v8_store(o + c, v8_mul(v8_load(o + c), va));
        *m = bm;
    }
    const v16 vmax = v16_set1(*m);
    v16 sum = v16_zero();
    for (int64_t ch = 0; ch < nch; ch++) {
        float *sp = s + ch * ATTN_KCHUNK;
        const v16 p = v16_exp2(v16_sub(v16_load(sp), vmax));
        v16_store(sp, p);
        sum = v16_add(sum, p);
    }
    *l += v16_hsum(sum);
}

/* O[r] += P[r] V over the n keys from k0 (vh: the head's packed V, tiles of
 * lkp keys), 16 (then 8) columns at a time. */
static inline void attn_pv(float *const *out, const float *s, int64_t kb, const float *vh,
                           int64_t k0, int64_t lkp, int64_t n, int64_t dp)
{
    int64_t ct = 0;
    for (; ct + 16 <= dp; ct += 16) {
        const float *vt = vh + ct * lkp + k0 * 16; /* this tile's keys, contiguous */
        v16 acc[ATTN_R];
        for (int r = 0; r < ATTN_R; r++)
            acc[r] = v16_load(out[r] + ct);
        ATTN_UNROLL
        for (int64_t j = 0; j < n; j++) {
            const v16 vv = v16_load(vt + j * 16);
            for (int r = 0; r < ATTN_R; r++)
                acc[r] = v16_fma(v16_bcast(s + r * kb + j), vv, acc[r]);
        }
        for (int r = 0; r < ATTN_R; r++)
            v16_store(out[r] + ct, acc[r]);
    }
    if (ct < dp) { /* dp is a multiple of 8 */
        const float *vt = vh + ct * lkp + k0 * 8;
        v8 acc[ATTN_R];
        for (int r = 0; r < ATTN_R; r++)
            acc[r] = v8_load(out[r] + ct);
        ATTN_UNROLL
        for (int64_t j = 0; j < n; j++) {
            const v8 vv = v8_load(vt + j * 8);
            for (int r = 0; r < ATTN_R; r++)
                acc[r] = v8_fma(v8_bcast(s + r * kb + j), vv, acc[r]);
        }
        for (int r = 0; r < ATTN_R; r++)
            v8_store(out[r] + ct, acc[r]);
    }
}

/* y = O / l for one row (a row that saw no key keeps l = 0: zeros). */
static inline void attn_store_row(float *y, const float *o, float l, int64_t d)
{
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t c = 0; c < d; c++)
        y[c] = o[c] * inv;
}

void ATTN_FN(const attn_flash_job *j, int64_t task, float *scratch)
{
    const int64_t blk = task % j->nqb, bh = task / j->nqb;
    const int64_t h = bh % j->heads, bi = bh / j->heads;
    const int64_t d = j->d, dp = j->dp, hd = j->heads * d, kb = j->kb;
    const int64_t q0 = blk * j->qb;
    const int64_t rows = j->lq - q0 < j->qb ? j->lq - q0 : j->qb;
    const float *q = j->q + (bi * j->lq + q0) * hd + h * d;
    float *y = j->y + (bi * j->lq + q0) * hd + h * d;
    const int64_t kmax = attn_flash_visible(j, q0 + rows - 1);
    if (kmax <= 0) {
        for (int64_t r = 0; r < rows; r++)
            memset(y + r * hd, 0, (size_t)d * sizeof(float));
        return;
    }
    const float *kp = j->kp + bh * j->lkp * d, *vp = j->vp + bh * j->lkp * dp;
    /* scratch (attn_flash_scratch_floats): O, m and l for qr = qb + ATTN_RMAX
     * rows (a last group may run past qb), then S [ATTN_RMAX][kb] */
    const int64_t qr_rows = j->qb + ATTN_RMAX;
    float *o = scratch, *m = o + qr_rows * dp, *l = m + qr_rows, *s = l + qr_rows;
    memset(o, 0, (size_t)(qr_rows * dp) * sizeof(float));
    for (int64_t r = 0; r < qr_rows; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int64_t k0 = 0; k0 < kmax; k0 += kb) {
        const int64_t kn = kmax - k0 < kb ? kmax - k0 : kb;
        for (int64_t g = 0; g < rows; g += ATTN_R) {
            /* rows past the block's end repeat its last row into spare O rows */
            const float *qr[ATTN_R];
            float *out[ATTN_R];
            int64_t vis[ATTN_R];
            for (int r = 0; r < ATTN_R; r++) {
                const int64_t i = g + r < rows ? g + r : rows - 1;
                qr[r] = q + i * hd;
                out[r] = o + (g + r) * dp;
                vis[r] = attn_flash_visible(j, q0 + i) - k0;
            }
            /* the group's last row sees the most keys */
            int64_t gn = vis[ATTN_R - 1] < kn ? vis[ATTN_R - 1] : kn;
            if (gn <= 0)
                continue;
            const int64_t nch = (gn + ATTN_KCHUNK - 1) / ATTN_KCHUNK;
            attn_qk(qr, kp + k0 * d, d, nch, j->scale, s, kb);
            for (int r = 0; r < ATTN_R; r++)
                attn_softmax_row(s + r * kb, nch, vis[r], &m[g + r], &l[g + r], out[r], dp);
            attn_pv(out, s, kb, vp, k0, j->lkp, nch * ATTN_KCHUNK, dp);
            if (k0 == 0 && g + ATTN_R < rows) /* the next group's q, ahead of use */
                for (int r = 0; r < ATTN_R && g + ATTN_R + r < rows; r++)
                    for (int64_t c = 0; c < d; c += 16)
                        __builtin_prefetch(q + (g + ATTN_R + r) * hd + c);
            if (vis[ATTN_R - 1] <= kn) /* the group's last block: y = O / l now */
                for (int r = 0; r < ATTN_R && g + r < rows; r++)
                    attn_store_row(y + (g + r) * hd, out[r], l[g + r], d);
        }
    }
    /* rows of groups that saw no key at all were never stored */
    for (int64_t g = 0; g < rows; g += ATTN_R) {
        const int64_t last = g + ATTN_R - 1 < rows ? g + ATTN_R - 1 : rows - 1;
        if (attn_flash_visible(j, q0 + last) <= 0)
            for (int64_t r = g; r <= last; r++)
                memset(y + r * hd, 0, (size_t)d * sizeof(float));
    }
}
