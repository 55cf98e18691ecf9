/*
 * backend/cpu/gemm_kernels.h - the GEMM micro-kernels (gemm_kernels.c)
 * behind backend/cpu/gemm.c, one per vector level.
 *
 * A micro-kernel computes one MR x NR tile of C from a packed A panel
 * (kc steps of MR floats: A(i0..i0+MR, p)) and a packed B panel (kc steps
 * of NR floats), both 64-byte aligned:
 *     acc = sum over p of A[p] * B[p]   (fused multiply-adds, p in order, from
 * 0) C   = (accumulate ? C : 0) + alpha * acc with the product alpha * acc
 * rounded before the add.  Every kernel does exactly these roundings, so they
 * agree bit for bit.
 */
#ifndef TSR_BACKEND_CPU_GEMM_KERNELS_H
#define TSR_BACKEND_CPU_GEMM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/cpu/cpu_isa.h"

typedef void (*tsr_gemm_ukr)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                             float alpha, bool accumulate);

/* The same tile with A unpacked: row i of the panel is the kc contiguous
 * floats at a[i] (MR pointers).  Same roundings as tsr_gemm_ukr. */
typedef void (*tsr_gemm_ukr_rows)(int64_t kc, const float *const *a, const float *bp, float *c,
                                  int64_t ldc, float alpha, bool accumulate);

/* Pack a full B panel from B stored [N][K] (row j of the panel at b + j * ldb):
 * dst[p * nr + j] = b[j * ldb + p] for p < kc, j < nr (a transpose; copies
 * only). */
typedef void (*tsr_gemm_pack_fn)(const float *b, int64_t ldb, int64_t kc, int nr, float *dst);

typedef struct tsr_gemm_kernel {
    int mr, nr;
    tsr_gemm_ukr fn;
    tsr_gemm_ukr_rows fn_rows;
    tsr_gemm_pack_fn pack_b_nk;
    const char *name;
} tsr_gemm_kernel;

/* The kernel for a vector level (the best one the level allows). */
const tsr_gemm_kernel *tsr_gemm_kernel_for(tsr_cpu_isa_level level);

/* The bf16-pair kernel (tsr_gemm.pairs), or NULL where the CPU (or
 * TESSERA_CPU_ISA) gives no AVX512_BF16. */
const tsr_gemm_kernel *tsr_gemm_kernel_bf16(void);
#define TSR_GEMM_MAX_MR 8
#define TSR_GEMM_MAX_NR 32

#endif
