/*
 * backend/cpu/attn_flash.h - what ops_attention.c shares with the flash
 * attention kernels (attn_scalar.c, attn_avx2.c, attn_avx512.c): the job
 * description, the packed K/V layout and the scratch each task needs.
 *
 * The kernels are one source, attn_flash_impl.h, compiled three times with
 * a different 16-float vector type (see that file); ops_attention.c packs
 * K and V, picks the kernel for tsr_cpu_isa() and runs the tasks.
 *
 * Packed layout, per (batch, head) bh = b * heads + h, keys padded with
 * zeros to lkp = a multiple of ATTN_KCHUNK:
 *   K: kp + bh * lkp * d,  chunks of 16 keys, each [d][16] (key in the lane)
 *   V: vp + bh * lkp * dp, dp = d rounded up to 8 (padding columns zero),
 *      by tiles of 16 columns (the last 8 wide when dp is 8 mod 16): the
 *      tile at column ct starts at ct * lkp and holds [lkp][16] (or [lkp][8]),
 *      so P V's loop over keys reads one contiguous stream per tile (rows
 *      of dp floats would put a 512-wide head's keys 2 KiB apart, all in
 *      the same two L1 sets).
 */
#ifndef TSR_BACKEND_CPU_ATTN_FLASH_H
#define TSR_BACKEND_CPU_ATTN_FLASH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define ATTN_KCHUNK 16 /* keys per packed K chunk = one 16-float vector */
#define ATTN_RMAX 8    /* most query rows a kernel holds in registers */

typedef struct attn_flash_job {
    const float *q;       /* [B, lq, heads*d], borrowed */
    const float *kp, *vp; /* packed (above), borrowed */
    float *y;             /* [B, lq, heads*d] */
    int64_t lq, lk, heads, d, dp, lkp;
    int64_t qb;  /* query rows per task */
    int64_t nqb; /* query blocks per (batch, head) */
    int64_t kb;  /* keys per key block, a multiple of ATTN_KCHUNK */
    float scale; /* softmax scale times log2(e) */
    bool causal;
} attn_flash_job;

/* Floats of per-worker scratch a task needs: the output accumulator, running
 * max and running sum for qb + ATTN_RMAX rows (a kernel's last group of rows
 * may run past qb), then the scores [ATTN_RMAX][kb]. */
static inline int64_t attn_flash_scratch_floats(const attn_flash_job *j)
{
    return (j->qb + ATTN_RMAX) * (j->dp + 2) + ATTN_RMAX * j->kb;
}

/* 2^x for the online softmax, whose arguments are s - max <= 0 (scores are
 * kept in log2 units: the scale is multiplied by log2(e) once): below
 * ATTN_EXP2_LO exactly 0 (a masked key is -inf), else 2^n * p(r) with
 * n = round(x), r = x - n in [-0.5, 0.5] and p a degree-6 polynomial
 * (least-squares fit on Chebyshev nodes, relative error 7.9e-8 evaluated in
 * float, as Cephes' expf), 2^n added to p's exponent bits (n >= -126 keeps
 * the result normal).  No upper clamp: x <= 0.  Each kernel's vector
 * version does these operations in this order; this one is for the scalar
 * rescale factor exp2(m_old - m_new). */
#define ATTN_EXP2_LO -126.0f
#define ATTN_LOG2E 1.44269504088896341f
#define ATTN_EXP2_C6 1.5353361959569156e-4f
#define ATTN_EXP2_C5 1.3398875016719103e-3f
#define ATTN_EXP2_C4 9.6184369176626205e-3f
#define ATTN_EXP2_C3 5.5503323674201965e-2f
#define ATTN_EXP2_C2 2.4022647738456726e-1f
#define ATTN_EXP2_C1 6.9314718246459961e-1f

static inline float attn_exp2_1(float x)
{
    if (x < ATTN_EXP2_LO)
        return 0.0f;
    const float n = nearbyintf(x), r = x - n;
    float p = ATTN_EXP2_C6;
    p = fmaf(p, r, ATTN_EXP2_C5);
    p = fmaf(p, r, ATTN_EXP2_C4);
    p = fmaf(p, r, ATTN_EXP2_C3);
    p = fmaf(p, r, ATTN_EXP2_C2);
    p = fmaf(p, r, ATTN_EXP2_C1);
    p = fmaf(p, r, 1.0f);
    uint32_t bits;
    memcpy(&bits, &p, sizeof bits);
    bits += (uint32_t)((int32_t)n * (1 << 23));
    memcpy(&p, &bits, sizeof p);
    return p;
}

/* Number of keys query row i may see (bottom-right aligned causal mask). */
static inline int64_t attn_flash_visible(const attn_flash_job *j, int64_t i)
{
    if (!j->causal)
        return j->lk;
    int64_t v = i + (j->lk - j->lq) + 1;
    return v < 0 ? 0 : (v > j->lk ? j->lk : v);
}

/* One task: query block `task % nqb` of (batch, head) `task / nqb`, into y.
 * `scratch` holds attn_flash_scratch_floats() floats, 64-byte aligned. */
typedef void (*attn_flash_fn)(const attn_flash_job *j, int64_t task, float *scratch);
void tsr_cpu_attn_flash_scalar(const attn_flash_job *j, int64_t task, float *scratch);
#if defined(__x86_64__)
void tsr_cpu_attn_flash_avx2(const attn_flash_job *j, int64_t task, float *scratch);
void tsr_cpu_attn_flash_avx512(const attn_flash_job *j, int64_t task, float *scratch);
#endif

#endif
