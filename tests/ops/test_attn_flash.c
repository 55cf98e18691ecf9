/*
 * tests/ops/test_attn_flash.c - the CPU backend's flash attention kernel
 * against a plain double-precision attention written here, and its
 * invariants.
 *
 * Why beside the golden cases: the PyTorch goldens (test_ops.c) cover a
 * few shapes; the kernel has edges of its own (head sizes not a multiple of
 * 16 or of 8, Lk not a multiple of its 16-key chunks or of its key blocks,
 * query blocks with a partial last group, causal rows that see no key), so
 * this walks those with an obviously correct reference.  It also checks
 * what the kernel promises by construction: an image's result does not
 * depend on the rest of its batch (bit for bit), and every ISA level the CPU
 * runs agrees with the others.  TESSERA_CPU_ISA caps the level for the whole
 * process (ctest runs the reference case again with it set to "scalar").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_isa.h"
#include "test.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;

/* uniform in [-1, 1) */
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 40) / (double)(1ull << 23) - 1.0);
}

static float *rand_buf(size_t n)
{
    float *p = malloc(n * sizeof(float));
    if (p)
        for (size_t i = 0; i < n; i++)
            p[i] = frand();
    return p;
}

typedef struct attn_shape {
    int b, lq, lk, heads, d;
    bool causal;
    float scale; /* 0 = 1/sqrt(d) */
} attn_shape;

/* The definition: y_i = sum_j softmax_j(scale q_i . k_j) v_j over the keys
 * j <= i + (lk - lq) when causal; a query that sees no key is zero. */
static void attn_ref(const attn_shape *s, const float *q, const float *k, const float *v, float *y)
{
    const int hd = s->heads * s->d;
    const double scale = s->scale != 0.0f ? s->scale : 1.0 / sqrt((double)s->d);
    double *w = malloc((size_t)s->lk * sizeof(double));
    for (int bi = 0; bi < s->b; bi++)
        for (int h = 0; h < s->heads; h++)
            for (int i = 0; i < s->lq; i++) {
                int nv = s->causal ? i + (s->lk - s->lq) + 1 : s->lk;
                nv = nv < 0 ? 0 : (nv > s->lk ? s->lk : nv);
                const float *qi = q + ((size_t)bi * s->lq + i) * hd + h * s->d;
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j < nv; j++) {
                    const float *kj = k + ((size_t)bi * s->lk + j) * hd + h * s->d;
                    double dot = 0.0;
                    for (int c = 0; c < s->d; c++)
                        dot += (double)qi[c] * kj[c];
                    w[j] = dot * scale;
                    m = w[j] > m ? w[j] : m;
                }
                for (int j = 0; j < nv; j++)
                    sum += (w[j] = exp(w[j] - m));
                float *yi = y + ((size_t)bi * s->lq + i) * hd + h * s->d;
                for (int c = 0; c < s->d; c++) {
                    double acc = 0.0;
                    for (int j = 0; j < nv; j++)
                        acc += w[j] * v[((size_t)bi * s->lk + j) * hd + h * s->d + c];
                    yi[c] = nv ? (float)(acc / sum) : 0.0f;
                }
            }
    free(w);
}

/* Runs the CPU backend's attention (kernel `isa`, capped at the CPU's) on
 * the whole batch into y. */
static int run(tsr_backend *be, const attn_shape *s, const float *q, const float *k, const float *v,
               float *y, tsr_cpu_isa_level isa)
{
    const int hd = s->heads * s->d;
    tsr_tensor tq = tsr_tensor_3d(TSR_F32, s->b, s->lq, hd, (float *)q);
    tsr_tensor tk = tsr_tensor_3d(TSR_F32, s->b, s->lk, hd, (float *)k);
    tsr_tensor tv = tsr_tensor_3d(TSR_F32, s->b, s->lk, hd, (float *)v);
    tsr_tensor ty = tsr_tensor_3d(TSR_F32, s->b, s->lq, hd, y);
    tsr_attention_params p = {.heads = s->heads, .scale = s->scale, .causal = s->causal};
    if (isa == tsr_cpu_isa())
        return tsr_attention(be, &tq, &tk, &tv, &p, &ty); /* the public path */
    return tsr_cpu_attention_isa(be, &tq, &tk, &tv, &p, &ty, isa);
}

/* Head sizes of SD (40, 64, 80, 160, the VAE's 512) and odd ones (8, 13);
 * Lk across 16-key chunks and key blocks (256 keys at d 40, 32 at 512);
 * Lq across query blocks (64) and row groups; causal with Lq > Lk (leading
 * rows see no key) and Lq < Lk; a large scale (scores far apart: the
 * running max jumps and exps underflow). */
static const attn_shape shapes[] = {
    {2, 37, 50, 3, 8, false, 0},   {2, 70, 45, 2, 40, true, 0},    {1, 100, 600, 2, 40, false, 0},
    {1, 300, 300, 1, 40, true, 0}, {1, 130, 257, 2, 64, false, 0}, {3, 65, 65, 2, 80, true, 0},
    {2, 33, 77, 2, 160, false, 0}, {1, 80, 96, 1, 512, true, 0},   {1, 20, 200, 1, 512, false, 0},
    {2, 29, 40, 3, 13, true, 0},   {2, 29, 40, 3, 13, false, 0},   {1, 50, 70, 2, 40, false, 8.0f},
    {1, 1, 1, 1, 40, false, 0},    {1, 3, 1, 2, 24, true, 0},
};

typedef struct bufs {
    float *q, *k, *v, *y, *ref;
} bufs;

static void bufs_free(bufs *x)
{
    free(x->q);
    free(x->k);
    free(x->v);
    free(x->y);
    free(x->ref);
}

static bool bufs_make(const attn_shape *s, bufs *x)
{
    const size_t hd = (size_t)s->heads * s->d, nq = (size_t)s->b * s->lq * hd;
    const size_t nk = (size_t)s->b * s->lk * hd;
    x->q = rand_buf(nq);
    x->k = rand_buf(nk);
    x->v = rand_buf(nk);
    x->y = malloc(nq * sizeof(float));
    x->ref = malloc(nq * sizeof(float));
    return x->q && x->k && x->v && x->y && x->ref;
}

static void describe(char *buf, size_t n, const attn_shape *s)
{
    snprintf(buf, n, "b%d lq%d lk%d h%d d%d%s scale %g", s->b, s->lq, s->lk, s->heads, s->d,
             s->causal ? " causal" : "", (double)s->scale);
}

/* Every shape against the reference, with the process's ISA level. */
static int test_reference(void)
{
    tsr_backend *be = NULL;
    ASSERT_OK(tsr_backend_cpu_create(3, &be));
    printf("cpu isa: %s\n", tsr_cpu_isa_name(tsr_cpu_isa()));
    int failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const attn_shape *s = &shapes[i];
        bufs x;
        ASSERT_TRUE(bufs_make(s, &x));
        char what[96];
        describe(what, sizeof what, s);
        attn_ref(s, x.q, x.k, x.v, x.ref);
        memset(x.y, 0xff, (size_t)s->b * s->lq * s->heads * s->d * sizeof(float)); /* NaN */
        ASSERT_OK(run(be, s, x.q, x.k, x.v, x.y, tsr_cpu_isa()));
        /* a few float roundings; with scale 8 the scores reach ~50, and the
         * rounding of a score (~|s| ulp) comes out of exp ~10x larger */
        failed |= tsr_test_check_close(what, x.y, x.ref, (size_t)s->b * s->lq * s->heads * s->d,
                                       s->scale != 0.0f ? 2e-5 : 2e-6);
        /* rows that see no key are exactly zero */
        const int hd = s->heads * s->d;
        for (int bi = 0; bi < s->b && s->causal; bi++)
            for (int r = 0; r < s->lq && r + (s->lk - s->lq) + 1 <= 0; r++)
                for (int c = 0; c < hd; c++)
                    if (x.y[((size_t)bi * s->lq + r) * hd + c] != 0.0f) {
                        fprintf(stderr, "%s: row %d sees no key but is not zero\n", what, r);
                        failed = 1;
                    }
        bufs_free(&x);
    }
    tsr_backend_destroy(be);
    return failed;
}

/* A batch of three equals each image run alone, bit for bit (and with a
 * different thread count). */
static int test_batch_independent(void)
{
    tsr_backend *be3 = NULL, *be2 = NULL;
    ASSERT_OK(tsr_backend_cpu_create(3, &be3));
    ASSERT_OK(tsr_backend_cpu_create(2, &be2));
    static const attn_shape cases[] = {
        {3, 150, 300, 2, 40, false, 0},
        {3, 150, 150, 2, 40, true, 0},
        {3, 70, 90, 3, 13, true, 0},
        {3, 40, 77, 1, 512, false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const attn_shape *s = &cases[i];
        const size_t hd = (size_t)s->heads * s->d;
        const size_t per_q = (size_t)s->lq * hd, per_k = (size_t)s->lk * hd;
        bufs x;
        ASSERT_TRUE(bufs_make(s, &x));
        ASSERT_OK(run(be3, s, x.q, x.k, x.v, x.y, tsr_cpu_isa()));
        attn_shape one = *s;
        one.b = 1;
        for (int bi = 0; bi < s->b; bi++) {
            ASSERT_OK(run(bi == 1 ? be2 : be3, &one, x.q + bi * per_q, x.k + bi * per_k,
                          x.v + bi * per_k, x.ref, tsr_cpu_isa()));
            if (memcmp(x.ref, x.y + bi * per_q, per_q * sizeof(float)) != 0) {
                char what[96];
                describe(what, sizeof what, s);
                bufs_free(&x);
                TSR_FAIL("%s: image %d alone differs from image %d of the batch", what, bi, bi);
            }
        }
        bufs_free(&x);
    }
    tsr_backend_destroy(be2);
    tsr_backend_destroy(be3);
    return 0;
}

/* Every ISA level this CPU runs gives what the best one gives: bit for bit
 * where the plain C kernel's fmaf is an instruction (FP_FAST_FMAF: the
 * kernels are one source doing the same operations per lane), within a
 * float rounding or two where it multiplies and adds instead (~10x that with
 * scale 8, where exp amplifies a score's rounding). */
static int test_isa_agree(void)
{
    tsr_backend *be = NULL;
    ASSERT_OK(tsr_backend_cpu_create(2, &be));
    const tsr_cpu_isa_level best = tsr_cpu_isa();
    if (best == TSR_CPU_ISA_SCALAR) {
        tsr_backend_destroy(be);
        printf("skip: only the scalar kernel runs here (TESSERA_CPU_ISA or the CPU)\n");
        return TSR_TEST_SKIP;
    }
    int failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const attn_shape *s = &shapes[i];
        const size_t n = (size_t)s->b * s->lq * s->heads * s->d;
        bufs x;
        ASSERT_TRUE(bufs_make(s, &x));
        ASSERT_OK(run(be, s, x.q, x.k, x.v, x.ref, best));
        for (int l = TSR_CPU_ISA_SCALAR; l < (int)best; l++) {
            char what[128];
            describe(what, sizeof what, s);
            snprintf(what + strlen(what), sizeof what - strlen(what), " %s vs %s",
                     tsr_cpu_isa_name((tsr_cpu_isa_level)l), tsr_cpu_isa_name(best));
            ASSERT_OK(run(be, s, x.q, x.k, x.v, x.y, (tsr_cpu_isa_level)l));
#ifdef FP_FAST_FMAF
            failed |= tsr_test_check_close(what, x.y, x.ref, n, 0.0); /* bit for bit */
#else
            failed |= tsr_test_check_close(what, x.y, x.ref, n, s->scale != 0.0f ? 1e-5 : 1e-6);
#endif
        }
        bufs_free(&x);
    }
    tsr_backend_destroy(be);
    return failed;
}

/* TESSERA_CPU_ISA caps the level: whatever the CPU, "scalar" gives scalar,
 * and a named level is never exceeded. */
static int test_isa_env(void)
{
    const char *env = getenv("TESSERA_CPU_ISA");
    const tsr_cpu_isa_level l = tsr_cpu_isa();
    ASSERT_STR_EQ(tsr_cpu_isa_name(TSR_CPU_ISA_SCALAR), "scalar");
    ASSERT_STR_EQ(tsr_cpu_isa_name(TSR_CPU_ISA_AVX2), "avx2");
    ASSERT_STR_EQ(tsr_cpu_isa_name(TSR_CPU_ISA_AVX512), "avx512");
    ASSERT_EQ(tsr_cpu_isa(), l); /* stable */
    if (env && strcmp(env, "scalar") == 0)
        ASSERT_EQ(l, TSR_CPU_ISA_SCALAR);
    if (env && strcmp(env, "avx2") == 0)
        ASSERT_TRUE(l <= TSR_CPU_ISA_AVX2);
    printf("TESSERA_CPU_ISA=%s -> %s\n", env ? env : "(unset)", tsr_cpu_isa_name(l));
    return 0;
}

static const tsr_test_entry tests[] = {
    {"reference", test_reference},
    {"batch_independent", test_batch_independent},
    {"isa_agree", test_isa_agree},
    {"isa_env", test_isa_env},
};

TSR_TEST_TABLE_MAIN(tests)
