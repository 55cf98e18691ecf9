/*
 * backend/cpu/gemm.h - Tessera's own single-precision GEMM for the CPU
 * backend: linear layers, 1x1 convs and KxK convs (with the im2col done
 * inside the packing, never materialised), and batched matmul.
 *
 * Why its own and not OpenBLAS's: (1) speed that does not depend on how a
 * library guesses the CPU: the micro-kernel is chosen from cpu_isa.h
 * (AVX-512, AVX2, portable C), whatever OPENBLAS_CORETYPE says; (2) a KxK
 * conv packs its GEMM operand straight from the NHWC image, which removes
 * im2col's write and re-read of a 9x larger column matrix; (3) one fixed
 * order of arithmetic: every C element is the sum over k in blocks whose
 * bounds follow from the problem's shape alone (tsr_gemm_kblock), each
 * block's partial sum formed with fused multiply-adds in k order from
 * zero, scaled by alpha and added to C in block order.  Row
 * and column tiling, thread count, matrix height and vector width change
 * where an element is computed, never how, so an image's result is the
 * same alone or in any batch, at any thread count, on AVX2 and on AVX-512
 * (tests: cpu_gemm, batch_*).
 *
 * Layout (BLIS's panels): B is packed, all of K for a block of columns,
 * into NR-wide column panels shared by all threads; each task owns an MC x
 * run block of C across every k-block (so C stays in L2 and the pool meets
 * twice per column block), reads A's MC x KC block per k-block in place
 * through row pointers (a conv's spanning taps gathered row by row first,
 * a k-major A packed into MR-row panels) in its own scratch and runs the
 * MR x NR micro-kernel over (B panel, A rows) pairs, B's panel staying in
 * L1 and A's block in L2.
 */
#ifndef TSR_BACKEND_CPU_GEMM_H
#define TSR_BACKEND_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/cpu/cpu_internal.h"

/* The longest k-block.  The blocks themselves follow from the problem's
 * shape alone (tsr_gemm_kblock), which fixes the order of arithmetic. */
#define TSR_GEMM_KC 384

/* A as the implicit im2col of NHWC images under an OHWI kernel: row m is
 * the output pixel m (flattened n*Ho*Wo + oh*Wo + ow), column k is
 * (kernel row, kernel column, input channel) in that order. */
typedef struct tsr_gemm_im2col {
    const float *x; /* NHWC input */
    int64_t h, w, ci;
    int64_t kh, kw, ho, wo;
    int sh, sw, pt, pl;
    bool circular; /* padding wraps around the image (tsr_conv2d_params) */
} tsr_gemm_im2col;

typedef struct tsr_gemm {
    int64_t m, n, k;
    /* A(i, p) = a_km ? a[p * lda + i] : a[i * lda + p], or the im2col */
    const float *a;
    int64_t lda;
    bool a_km;
    const tsr_gemm_im2col *conv; /* non-NULL: A is this im2col (a unused) */
    /* B(j, p) = b_kn ? b[p * ldb + j] : b[j * ldb + p] */
    const float *b;
    int64_t ldb;
    bool b_kn;
    /* C(i, j) = c[i * ldc + j] = (accumulate ? C : 0) + alpha * sum_p A(i,p)
     * B(j,p) */
    float *c;
    int64_t ldc;
    float alpha;
    bool accumulate;
    /* non-NULL (with accumulate): every row of C is first set to these n
     * values, by the task that owns the block, right before it adds its
     * first k-block (a layer's bias, written in parallel and while the
     * block is in cache, not by the caller alone before the call) */
    const float *bias;
    /* The bf16 variant ("cpu-bf16gemm"): a (or the im2col's x) and b hold
     * bf16 values two to a 32-bit unit, consecutive k in one unit, and
     * k, lda, ldb and the im2col's ci count units (half the bf16 values).
     * The packing moves units as it moves floats; the AVX512_BF16 kernel
     * (tsr_gemm_kernel_bf16, which must exist) takes their dot products
     * in f32.  Only a and b row-major (a_km, b_kn false). */
    bool pairs;
} tsr_gemm;

/* The length of the k-block that starts at k0.  Blocks split the run of
 * columns that lie contiguous in memory (a conv's kernel tap of Ci
 * channels, else the whole row of K) into equal parts of at most
 * TSR_GEMM_KC, or group whole runs when they are short, so a block never
 * straddles two taps unless taps are short: then the micro-kernel can read
 * A where it lies.  A function of the shape only. */
int64_t tsr_gemm_kblock(const tsr_gemm *g, int64_t k0);

/* Runs on the context's pool; scratch from the context (the shared buffer
 * holds packed B, worker buffers packed A).  TSR_ERR_NOMEM when scratch
 * cannot grow. */
int tsr_cpu_gemm(cpu_ctx *c, const tsr_gemm *g);

/* The micro-kernel in use, e.g. "avx2 6x16" (logged at debug level once,
 * and printed by `tessera bench`). */
const char *tsr_cpu_gemm_kernel(void);

#endif
