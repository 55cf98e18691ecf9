/*
 * scheduler/rng.h - seeded Gaussian noise that reproduces torch.randn.
 *
 * Why: users compare images by seed.  A seed only means something if the
 * initial latents (and the per-step noise of ancestral/SDE samplers) are the
 * numbers PyTorch would draw, so the engine carries its own bit-for-bit
 * re-implementation of torch's two generators instead of any RNG of its own:
 *
 *  - TSR_RNG_CPU: a CPU torch.Generator (MT19937).  torch.randn fills a float
 *    tensor of >= 16 elements with 24-bit uniforms and turns each block of 16
 *    into normals with Box-Muller; on x86 with AVX2 (the usual case) it uses
 *    the Cephes-style log/sincos polynomials of ATen's avx_mathfun.h, which
 *    we evaluate here in scalar float arithmetic with the same operation
 *    order, so the results are identical.  A tensor of < 16 elements takes
 *    the scalar path: double-precision Box-Muller from 53-bit uniforms, with
 *    the second value of each pair cached in the generator and returned by
 *    the next scalar draw (also across calls, as torch does).
 *  - TSR_RNG_CPU_SCALAR: the same generator when torch runs its portable
 *    (non-AVX2) kernel: ARM, or x86 with ATEN_CPU_CAPABILITY=default/avx512.
 *    It uses libm's logf/cosf/sinf, so it matches torch built on the same
 *    libm.
 *  - TSR_RNG_CUDA: a CUDA torch.Generator (Philox4x32-10, A1111's default),
 *    computed on the CPU so every backend draws the same latents.  Element i
 *    of a draw is the first value of curand_normal4() for subsequence i at
 *    the generator's offset; each draw advances the offset as
 *    distribution_nullary_kernel does.  Not verifiable here without a GPU,
 *    and the GPU's Box-Muller uses the approximate __sincosf, so values agree
 *    with a real GPU to about 1e-6 absolute, not bit for bit (docs/samplers.md).
 *
 * A tsr_rng is a stream: successive tsr_rng_randn() calls continue it
 * exactly as successive torch.randn(..., generator=g) calls do.  It is a
 * plain value (no allocation): copy it to fork a stream.  Fields are private.
 * Not thread-safe per object; one object per image.
 */
#ifndef TSR_SCHEDULER_RNG_H
#define TSR_SCHEDULER_RNG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tsr_rng_kind {
    TSR_RNG_CPU = 0,        /* torch CPU generator, AVX2 kernel (x86 default) */
    TSR_RNG_CUDA = 1,       /* torch CUDA generator (Philox), emulated on the CPU */
    TSR_RNG_CPU_SCALAR = 2, /* torch CPU generator, portable kernel */
} tsr_rng_kind;

typedef struct tsr_rng {
    tsr_rng_kind kind;
    uint64_t seed;
    /* MT19937 (CPU kinds) */
    uint32_t mt[624];
    int mti;
    bool has_next_double; /* cached second Box-Muller value of the scalar path */
    double next_double;
    /* Philox (CUDA kind) */
    uint64_t philox_offset;     /* in 32-bit outputs, as torch counts it */
    uint32_t cuda_grid_blocks;  /* 0: grid never capped (see tsr_rng_set_cuda_grid_limit) */
} tsr_rng;

/* Seed a stream: torch.Generator(device).manual_seed(seed).  The CPU
 * generator uses the low 32 bits of the seed, as torch does. */
void tsr_rng_init(tsr_rng *rng, tsr_rng_kind kind, uint64_t seed);

/* "cpu", "cuda" ("gpu", "nv" accepted), "cpu-scalar".  -1 when unknown. */
int tsr_rng_kind_parse(const char *name);
const char *tsr_rng_kind_name(tsr_rng_kind kind);

/* torch.randn(n, generator=g): n contiguous standard normals into out[0..n)
 * (borrowed).  The shape does not matter, only the element count.  Errors:
 * TSR_ERR_INVALID (NULL with n > 0), TSR_ERR_RANGE (n beyond 2^40). */
int tsr_rng_randn(tsr_rng *rng, float *out, size_t n);

/* Draw one latent of c x h x w in torch's NCHW order (one torch.randn((1,c,
 * h,w)) call) and store it channels-last: out[(y*w + x)*c + ch].  Needs a
 * temporary of c*h*w floats (TSR_ERR_NOMEM). */
int tsr_rng_randn_nhwc(tsr_rng *rng, int c, int h, int w, float *out);
/* ComfyUI's batch noise: latent `index` (0..4095) of one torch.randn((index
 * + 1, c, h, w)) call, stored channels-last (index 0 is tsr_rng_randn_nhwc).
 * Draws the whole prefix (a temporary of (index + 1) * c*h*w floats). */
int tsr_rng_randn_nhwc_slice(tsr_rng *rng, int index, int c, int h, int w, float *out);

/* The CUDA kernel caps its grid at (SM count x blocks per SM) blocks of 256
 * threads; tensors larger than 256 x that many elements then take values
 * from later outputs of each thread's subsequence, and the offset advances
 * by more.  0 (default) assumes the grid is never capped, which holds for
 * one SD/SDXL latent on any current GPU.  E.g. RTX 4090: 128 SMs x 6 = 768. */
void tsr_rng_set_cuda_grid_limit(tsr_rng *rng, uint32_t max_blocks);

/* Building blocks, exposed for tests. */
uint32_t tsr_rng_mt_next(tsr_rng *rng); /* one MT19937 output */
/* Philox4x32-10 of counter ctr[4] with key key[2] into out[4]. */
void tsr_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#endif
