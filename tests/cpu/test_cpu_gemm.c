/*
 * tests/cpu/test_cpu_gemm.c - Tessera's CPU GEMM (backend/cpu/gemm.c)
 * against a double-precision reference, and the promises its order of
 * arithmetic makes (gemm.h):
 *   - every micro-kernel this CPU has (portable C, AVX2, AVX-512) gives the
 *     same bits (the kernels are switched with TESSERA_CPU_ISA in child
 *     processes, since the level is read once per process);
 *   - a row's result does not depend on the matrix height, on the rows
 *     around it or on the thread count (batch independence);
 *   - the implicit im2col equals an explicit one, for strides, padding and
 *     odd sizes;
 *   - transposed operands, alpha, accumulate, edges smaller than a tile.
 * `test_cpu_gemm bench M N K [threads]` times one shape against OpenBLAS.
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/gemm.h"
#include "core/tensor.h"
#include "tests/test.h"

static uint32_t rng = 12345;
static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}
static float *rand_buf(int64_t n)
{
    float *p = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

static tsr_backend *cpu(int threads)
{
    tsr_backend *b = NULL;
    if (tsr_backend_cpu_create(threads, &b) != 0) {
        fprintf(stderr, "cpu backend\n");
        exit(1);
    }
    return b;
}

/* C = alpha A B^T with A [m][k], B [n][k] and C [m][n], all packed. */
static tsr_gemm plain(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                      float alpha)
{
    return (tsr_gemm){.m = m,
                      .n = n,
                      .k = k,
                      .a = a,
                      .lda = k,
                      .b = b,
                      .ldb = k,
                      .c = c,
                      .ldc = n,
                      .alpha = alpha};
}

/* Reference in double: C = (acc ? C0 : 0) + alpha * A B^T. */
static double ref_err(const tsr_gemm *g, const float *c0)
{
    double worst = 0;
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            double s = 0, mag = 0;
            for (int64_t p = 0; p < g->k; p++) {
                double a = g->a_km ? g->a[p * g->lda + i] : g->a[i * g->lda + p];
                double bv = g->b_kn ? g->b[p * g->ldb + j] : g->b[j * g->ldb + p];
                s += a * bv;
                mag += fabs(a * bv);
            }
            double want = (g->accumulate ? c0[i * g->ldc + j] : 0) + g->alpha * s;
            double e = fabs(want - g->c[i * g->ldc + j]) / (fabs(g->alpha) * mag + 1e-6);
            if (e > worst)
                worst = e;
        }
    return worst;
}

static int case_reference(void)
{
    tsr_backend *b = cpu(2);
    cpu_ctx *c = cpu_ctx_of(b);
    /* {13, 300, 8000}: B's packed panels (all of K) exceed the driver's 8 MiB, so
     * the columns split into two blocks */
    const int64_t shapes[][3] = {{1, 1, 1},     {5, 7, 3},     {6, 16, 256},
                                 {7, 17, 257},  {97, 33, 600}, {200, 320, 40},
                                 {13, 1000, 9}, {300, 5, 513}, {13, 300, 8000}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int variant = 0; variant < 8; variant++) {
            const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            tsr_gemm g = {.m = m,
                          .n = n,
                          .k = k,
                          .a_km = variant & 1,
                          .b_kn = (variant >> 1) & 1,
                          .accumulate = (variant >> 2) & 1,
                          .alpha = (variant & 4) ? 0.5f : 1.0f};
            g.lda = (g.a_km ? m : k) + 3;
            g.ldb = (g.b_kn ? n : k) + 1;
            g.ldc = n + 2;
            float *a = rand_buf((g.a_km ? k : m) * g.lda), *bm = rand_buf((g.b_kn ? k : n) * g.ldb);
            float *cm = rand_buf(m * g.ldc), *c0 = malloc((size_t)(m * g.ldc) * sizeof(float));
            memcpy(c0, cm, (size_t)(m * g.ldc) * sizeof(float));
            g.a = a, g.b = bm, g.c = cm;
            ASSERT_TRUE(tsr_cpu_gemm(c, &g) == 0);
            double e = ref_err(&g, c0);
            if (e > 1e-5) {
                fprintf(stderr, "m=%lld n=%lld k=%lld variant %d: rel error %g\n", (long long)m,
                        (long long)n, (long long)k, variant, e);
                return 1;
            }
            /* the padding between rows (ldc > n) is untouched */
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = n; j < g.ldc; j++)
                    ASSERT_TRUE(cm[i * g.ldc + j] == c0[i * g.ldc + j]);
            free(a), free(bm), free(cm), free(c0);
        }
    tsr_backend_destroy(b);
    return 0;
}

/* A row's bits do not depend on the matrix height or the thread count. */
static int case_rows_independent(void)
{
    const int64_t m = 301, n = 70, k = 700;
    float *a = rand_buf(m * k), *bm = rand_buf(n * k);
    float *full = calloc((size_t)(m * n), sizeof(float)),
          *part = calloc((size_t)(m * n), sizeof(float));
    tsr_backend *b2 = cpu(2), *b1 = cpu(1);
    tsr_gemm g = plain(m, n, k, a, bm, full, 1.0f);
    ASSERT_TRUE(tsr_cpu_gemm(cpu_ctx_of(b2), &g) == 0);
    /* rows in uneven slices, one thread */
    const int64_t cuts[] = {0, 1, 7, 100, 101, 250, 301};
    for (size_t s = 0; s + 1 < sizeof cuts / sizeof cuts[0]; s++) {
        tsr_gemm h = g;
        h.m = cuts[s + 1] - cuts[s];
        h.a = a + cuts[s] * k;
        h.c = part + cuts[s] * n;
        ASSERT_TRUE(tsr_cpu_gemm(cpu_ctx_of(b1), &h) == 0);
    }
    ASSERT_TRUE(memcmp(full, part, (size_t)(m * n) * sizeof(float)) == 0);
    tsr_backend_destroy(b1), tsr_backend_destroy(b2);
    free(a), free(bm), free(full), free(part);
    return 0;
}

/* The implicit im2col against an explicit one. */
static int case_im2col(void)
{
    tsr_backend *b = cpu(2);
    const struct {
        int64_t n, h, w, ci, co, kh, kw;
        int sh, sw, pt, pl, pb, pr;
    } cs[] = {{2, 9, 7, 5, 11, 3, 3, 1, 1, 1, 1, 1, 1},
              {1, 16, 16, 4, 32, 3, 3, 2, 2, 0, 0, 1, 1},
              {3, 5, 8, 300, 7, 3, 3, 1, 1, 1, 1, 1, 1},
              {1, 6, 6, 3, 5, 1, 1, 1, 1, 0, 0, 0, 0},
              {1, 10, 3, 2, 40, 2, 3, 2, 1, 1, 0, 0, 2}};
    for (size_t s = 0; s < sizeof cs / sizeof cs[0]; s++) {
        const int64_t ho = (cs[s].h + cs[s].pt + cs[s].pb - cs[s].kh) / cs[s].sh + 1;
        const int64_t wo = (cs[s].w + cs[s].pl + cs[s].pr - cs[s].kw) / cs[s].sw + 1;
        const int64_t m = cs[s].n * ho * wo, k = cs[s].kh * cs[s].kw * cs[s].ci, n = cs[s].co;
        float *x = rand_buf(cs[s].n * cs[s].h * cs[s].w * cs[s].ci), *w = rand_buf(n * k);
        float *col = calloc((size_t)(m * k), sizeof(float));
        for (int64_t r = 0; r < m; r++) {
            int64_t img = r / (ho * wo), oh = r % (ho * wo) / wo, ow = r % wo;
            for (int64_t a = 0; a < cs[s].kh; a++)
                for (int64_t bb = 0; bb < cs[s].kw; bb++) {
                    int64_t ih = oh * cs[s].sh - cs[s].pt + a, iw = ow * cs[s].sw - cs[s].pl + bb;
                    if (ih < 0 || ih >= cs[s].h || iw < 0 || iw >= cs[s].w)
                        continue;
                    memcpy(col + r * k + (a * cs[s].kw + bb) * cs[s].ci,
                           x + ((img * cs[s].h + ih) * cs[s].w + iw) * cs[s].ci,
                           (size_t)cs[s].ci * sizeof(float));
                }
        }
        float *y1 = calloc((size_t)(m * n), sizeof(float)),
              *y2 = calloc((size_t)(m * n), sizeof(float));
        tsr_gemm_im2col cv = {.x = x,
                              .h = cs[s].h,
                              .w = cs[s].w,
                              .ci = cs[s].ci,
                              .kh = cs[s].kh,
                              .kw = cs[s].kw,
                              .ho = ho,
                              .wo = wo,
                              .sh = cs[s].sh,
                              .sw = cs[s].sw,
                              .pt = cs[s].pt,
                              .pl = cs[s].pl};
        tsr_gemm g = plain(m, n, k, col, w, y1, 1.0f);
        ASSERT_TRUE(tsr_cpu_gemm(cpu_ctx_of(b), &g) == 0);
        g.a = NULL, g.conv = &cv, g.c = y2;
        ASSERT_TRUE(tsr_cpu_gemm(cpu_ctx_of(b), &g) == 0);
        /* the two split k differently (a conv's k-blocks follow its taps),
         * so they agree to rounding, and both match the double reference */
        g.a = col, g.conv = NULL;
        const double e = ref_err(&g, y1 /* unused: not accumulating */);
        g.c = y1;
        const double e1 = ref_err(&g, y1);
        if (e > 1e-5 || e1 > 1e-5) {
            fprintf(stderr, "im2col case %zu: rel error %g (implicit), %g (explicit)\n", s, e, e1);
            return 1;
        }
        free(x), free(w), free(col), free(y1), free(y2);
    }
    tsr_backend_destroy(b);
    return 0;
}

/* v rounded to bf16 in place; returns the bf16 copy */
static uint16_t *to_bf16(float *v, int64_t n)
{
    uint16_t *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) {
        h[i] = tsr_f32_to_bf16(v[i]);
        v[i] = tsr_bf16_to_f32(h[i]);
    }
    return h;
}

/* The bf16-pair GEMM (the cpu-bf16gemm variant) against the double
 * reference of the bf16-rounded operands: plain, edges, alpha, accumulate,
 * k spanning several k-blocks, and the implicit im2col with padding and
 * stride.  Its sums are f32, so the bound is f32's. */
static int case_bf16_pairs(void)
{
    if (!tsr_cpu_has_bf16_dot()) {
        fprintf(stderr, "no AVX512_BF16 here: skipped\n");
        return TSR_TEST_SKIP;
    }
    tsr_backend *b = cpu(2);
    cpu_ctx *c = cpu_ctx_of(b);
    const int64_t shapes[][3] = {{1, 1, 2}, {5, 7, 6}, {6, 32, 256}, {7, 33, 258},
                                 {97, 40, 1600}, {200, 320, 40}, {13, 100, 10}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int variant = 0; variant < 2; variant++) {
            const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            float *a = rand_buf(m * k), *bm = rand_buf(n * k), *cm = rand_buf(m * n);
            float *c0 = malloc((size_t)(m * n) * sizeof(float));
            memcpy(c0, cm, (size_t)(m * n) * sizeof(float));
            uint16_t *a16 = to_bf16(a, m * k), *b16 = to_bf16(bm, n * k);
            tsr_gemm g = plain(m, n, k / 2, (const float *)(void *)a16,
                               (const float *)(void *)b16, cm, variant ? 0.5f : 1.0f);
            g.accumulate = variant;
            g.pairs = true;
            ASSERT_TRUE(tsr_cpu_gemm(c, &g) == 0);
            tsr_gemm ref = plain(m, n, k, a, bm, cm, g.alpha);
            ref.accumulate = g.accumulate;
            const double e = ref_err(&ref, c0);
            if (e > 1e-5) {
                fprintf(stderr, "bf16 m=%lld n=%lld k=%lld variant %d: rel error %g\n",
                        (long long)m, (long long)n, (long long)k, variant, e);
                return 1;
            }
            free(a), free(bm), free(cm), free(c0), free(a16), free(b16);
        }
    /* a 3x3 conv, padding 1, stride 2, 10 channels (5 pairs per tap) */
    const int64_t h = 9, w = 7, ci = 10, co = 37, ho = 5, wo = 4, m = 2 * ho * wo, k = 9 * ci;
    float *x = rand_buf(2 * h * w * ci), *wt = rand_buf(co * k), *y = calloc((size_t)(m * co), 4);
    uint16_t *x16 = to_bf16(x, 2 * h * w * ci), *w16 = to_bf16(wt, co * k);
    float *col = calloc((size_t)(m * k), sizeof(float));
    for (int64_t r = 0; r < m; r++) {
        const int64_t img = r / (ho * wo), oh = r % (ho * wo) / wo, ow = r % wo;
        for (int64_t t = 0; t < 9; t++) {
            const int64_t ih = oh * 2 - 1 + t / 3, iw = ow * 2 - 1 + t % 3;
            if (ih >= 0 && ih < h && iw >= 0 && iw < w)
                memcpy(col + r * k + t * ci, x + ((img * h + ih) * w + iw) * ci,
                       (size_t)ci * sizeof(float));
        }
    }
    tsr_gemm_im2col cv = {.x = (const float *)(void *)x16, .h = h, .w = w, .ci = ci / 2,
                          .kh = 3, .kw = 3, .ho = ho, .wo = wo, .sh = 2, .sw = 2, .pt = 1, .pl = 1};
    tsr_gemm g = plain(m, co, k / 2, NULL, (const float *)(void *)w16, y, 1.0f);
    g.conv = &cv, g.pairs = true;
    ASSERT_TRUE(tsr_cpu_gemm(c, &g) == 0);
    tsr_gemm ref = plain(m, co, k, col, wt, y, 1.0f);
    const double e = ref_err(&ref, y);
    if (e > 1e-5) {
        fprintf(stderr, "bf16 conv: rel error %g\n", e);
        return 1;
    }
    free(x), free(wt), free(y), free(x16), free(w16), free(col);
    tsr_backend_destroy(b);
    return 0;
}

/* k-blocks tile [0, K), are at most TSR_GEMM_KC long, and stay inside one
 * conv tap when taps are at least half a block. */
static int case_kblocks(void)
{
    const int64_t cis[] = {3, 4, 128, 191, 192, 256, 300, 320, 384, 385, 512, 640, 960, 1280, 2560};
    for (size_t i = 0; i < sizeof cis / sizeof cis[0]; i++)
        for (int conv = 0; conv < 2; conv++) {
            tsr_gemm_im2col cv = {.ci = cis[i], .kh = 3, .kw = 3};
            tsr_gemm g = {.k = 9 * cis[i], .conv = conv ? &cv : NULL};
            int64_t k0 = 0, blocks = 0;
            while (k0 < g.k) {
                const int64_t kc = tsr_gemm_kblock(&g, k0);
                ASSERT_TRUE(kc >= 1 && kc <= TSR_GEMM_KC && k0 + kc <= g.k);
                if (conv && cis[i] * 2 >= TSR_GEMM_KC)
                    ASSERT_TRUE(k0 / cis[i] == (k0 + kc - 1) / cis[i]);
                k0 += kc;
                blocks++;
            }
            ASSERT_TRUE(k0 == g.k && blocks >= (g.k + TSR_GEMM_KC - 1) / TSR_GEMM_KC);
        }
    /* the UNet's channel counts give whole taps of 320 */
    tsr_gemm_im2col cv = {.ci = 1280, .kh = 3, .kw = 3};
    tsr_gemm g = {.k = 9 * 1280, .conv = &cv};
    ASSERT_EQ(tsr_gemm_kblock(&g, 0), 320);
    return 0;
}

/* Print a checksum-free dump: the raw bits of C for a fixed problem, so the
 * parent can compare kernels across processes. */
static int case_dump(const char *path)
{
    const int64_t m = 131, n = 77, k = 530;
    rng = 777;
    float *a = rand_buf(m * k), *bm = rand_buf(n * k), *cm = rand_buf(m * n);
    tsr_backend *b = cpu(2);
    tsr_gemm g = plain(m, n, k, a, bm, cm, 0.75f);
    g.accumulate = true;
    ASSERT_TRUE(tsr_cpu_gemm(cpu_ctx_of(b), &g) == 0);
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f && fwrite(cm, sizeof(float), (size_t)(m * n), f) == (size_t)(m * n));
    fclose(f);
    printf("kernel %s\n", tsr_cpu_gemm_kernel());
    tsr_backend_destroy(b);
    free(a), free(bm), free(cm);
    return 0;
}

static const char *self_path;

static int case_kernels_agree(void)
{
    const char *self = self_path;
    const char *levels[] = {"scalar", "avx2", "avx512"};
    char cmd[1200], path[3][512];
    int ran = 0;
    for (int i = 0; i < 3; i++) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path[i], sizeof path[i], "%s/tsr_gemm_dump_%s_%d.bin", tmp && *tmp ? tmp : "/tmp",
                 levels[i], (int)getpid());
        snprintf(cmd, sizeof cmd, "TESSERA_CPU_ISA=%s '%s' dump %s", levels[i], self, path[i]);
        ASSERT_TRUE(system(cmd) == 0);
    }
    /* levels above the CPU's are capped, so compare what each produced */
    float *d[3];
    const size_t count = 131 * 77;
    for (int i = 0; i < 3; i++) {
        d[i] = malloc(count * sizeof(float));
        FILE *f = fopen(path[i], "rb");
        ASSERT_TRUE(f && fread(d[i], sizeof(float), count, f) == count);
        fclose(f);
        remove(path[i]);
    }
    for (int i = 1; i < 3; i++) {
        ASSERT_TRUE(memcmp(d[0], d[i], count * sizeof(float)) == 0);
        ran++;
    }
    for (int i = 0; i < 3; i++)
        free(d[i]);
    return ran == 2 ? 0 : 1;
}

/* Process CPU seconds: on a shared machine, work per CPU second is steadier
 * than wall time (both sides spin or sleep the same way when idle). */
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int case_bench(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    const int64_t m = atoll(argv[2]), n = atoll(argv[3]), k = atoll(argv[4]);
    const int threads = argc > 5 ? atoi(argv[5]) : 2;
    float *a = rand_buf(m * k), *bm = rand_buf(n * k), *cm = calloc((size_t)(m * n), sizeof(float));
    tsr_backend *b = cpu(threads);
    tsr_gemm g = plain(m, n, k, a, bm, cm, 1.0f);
    double best_t = 1e9, best_o = 1e9;
    for (int it = 0; it < 6; it++) {
        double t0 = now();
        tsr_cpu_gemm(cpu_ctx_of(b), &g);
        double t1 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a,
                    (int)k, bm, (int)k, 0.0f, cm, (int)n);
        double t2 = now();
        if (it > 0) {
            best_t = t1 - t0 < best_t ? t1 - t0 : best_t;
            best_o = t2 - t1 < best_o ? t2 - t1 : best_o;
        }
    }
    const double gf = 2.0 * (double)m * (double)n * (double)k * 1e-9;
    printf("%lldx%lldx%lld threads %d: tessera %s %.2f cpu-ms %.1f GFLOP/cpu-s | "
           "openblas %.2f cpu-ms %.1f "
           "GFLOP/cpu-s\n",
           (long long)m, (long long)n, (long long)k, threads, tsr_cpu_gemm_kernel(), best_t * 1e3,
           gf / best_t, best_o * 1e3, gf / best_o);
    tsr_backend_destroy(b);
    free(a), free(bm), free(cm);
    return 0;
}

/* The measured ceiling (cpu_peak.c): every kind the chosen level has gives a
 * finite positive figure on one and on two threads, the others 0.  Not a
 * timing bound (a loaded machine measures less, and that is its figure). */
static int case_peak(void)
{
    const tsr_cpu_peak_kind kinds[] = {TSR_CPU_PEAK_SCALAR, TSR_CPU_PEAK_AVX2,
                                       TSR_CPU_PEAK_AVX512, TSR_CPU_PEAK_BF16};
    ASSERT_TRUE(tsr_cpu_peak_available(TSR_CPU_PEAK_SCALAR));
    ASSERT_TRUE(tsr_cpu_peak_available(TSR_CPU_PEAK_AVX2) == (tsr_cpu_isa() >= TSR_CPU_ISA_AVX2));
    ASSERT_TRUE(tsr_cpu_peak_available(TSR_CPU_PEAK_BF16) == tsr_cpu_has_bf16_dot());
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        for (int threads = 1; threads <= 2; threads++) {
            const double g = tsr_cpu_peak_gflops(kinds[i], threads, 0.02);
            fprintf(stderr, "%s, %d thread(s): %.1f GFLOP/s\n", tsr_cpu_peak_name(kinds[i]),
                    threads, g);
            if (tsr_cpu_peak_available(kinds[i]))
                ASSERT_TRUE(g > 0 && isfinite(g));
            else
                ASSERT_TRUE(g == 0);
        }
    return 0;
}

static const tsr_test_entry cases[] = {
    {"reference", case_reference},
    {"rows_independent", case_rows_independent},
    {"im2col", case_im2col},
    {"kblocks", case_kblocks},
    {"kernels_agree", case_kernels_agree},
    {"bf16_pairs", case_bf16_pairs},
    {"peak", case_peak},
};

int main(int argc, char **argv)
{
    self_path = argv[0];
    if (argc > 2 && strcmp(argv[1], "dump") == 0)
        return case_dump(argv[2]);
    if (argc > 1 && strcmp(argv[1], "bench") == 0)
        return case_bench(argc, argv);
    return tsr_test_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
