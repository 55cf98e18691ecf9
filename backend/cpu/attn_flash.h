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
 *   V: vp + bh * lkp * dp, rows [lkp][dp] with dp = d rounded up to 8
 *      (padding columns zero).
 */
#ifndef TSR_BACKEND_CPU_ATTN_FLASH_H
#define TSR_BACKEND_CPU_ATTN_FLASH_H

#include <stdbool.h>
#include <stdint.h>

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
    float scale;
    bool causal;
} attn_flash_job;

/* Floats of per-worker scratch a task needs: the output accumulator, running
 * max and running sum for qb + ATTN_RMAX rows (a kernel's last group of rows
 * may run past qb), then the scores [ATTN_RMAX][kb]. */
static inline int64_t attn_flash_scratch_floats(const attn_flash_job *j)
{
    return (j->qb + ATTN_RMAX) * (j->dp + 2) + ATTN_RMAX * j->kb;
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
