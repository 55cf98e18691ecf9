/*
 * tests/pipeline/test_batch_mixed.c - the soak's mixed waves at engine
 * level: many images of different prompts and step counts in one tsr_batch,
 * each compared byte for byte with its solo run at one thread (what
 * `tessera generate --threads 1` gives, the soak's reference).
 *
 * Why this shape: the service soak (tests/service/test_soak.py) recorded a
 * rare 1/255 flip between a served image and `tessera generate`, seen about
 * once in ten mixed waves and never in service_batching's uniform jobs.  The
 * waves differ from that test in three ways at once: prompts of different
 * lengths, images at different timesteps in one UNet call (1 and 2 steps
 * mixed) joining between calls, and a server at two threads against
 * generate at one.  This runs the same mixture through the public API
 * without HTTP (a third of the images at once, the rest one or two per UNet
 * call, so calls hold 1 to 16 images of both step counts and decode chunks
 * of varying size), and each dimension apart (threads alone, batch alone),
 * so a failure says which one an op depends on.  The compare is exact.
 * Both engines live in one process, which is sound for Tessera's own GEMM
 * (no global state); it was not for OpenBLAS, whose thread count is global.
 *
 * The flip's cause (tests/service/KNOWN_ISSUES.md): it was recorded while
 * OpenBLAS ran the GEMMs, and there a row's result depended on the thread
 * count, so `generate --threads 1` and `--threads 2` (the soak's server)
 * gave one image in twelve of these a value off by 1/255.  threads_cli runs
 * the CLI itself at both counts, each in its own process, which would have
 * failed on that build (checked: 1 of 12 images, 1 value of 12,288).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera.h"
#include "test.h"

#define N_IMAGES 48
#define SIDE 64

static const char *k_prompts[] = {"a red circle", "two green stars on black",
                                  "a small blue square in the top left corner",
                                  "a yellow triangle on a purple background",
                                  "there is a white ring on the right"};

static int open_demo(int threads, tsr_engine **e)
{
    char path[512];
    const char *src = getenv("TSR_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/models/demo", src ? src : ".");
    tsr_engine_options o;
    tsr_engine_options_init(&o);
    o.model = path;
    o.device = "cpu";
    o.threads = threads;
    ASSERT_OK(tsr_engine_open(&o, e));
    return 0;
}

/* Image k: the soak's prompts, 64x64, 1 or 2 steps. */
static void params_of(int k, tsr_image_params *p)
{
    tsr_image_params_init(p);
    p->prompt = k_prompts[(k * 3) % 5];
    p->width = p->height = SIDE;
    p->steps = 1 + (k / 3) % 2;
    p->seed = 4000 + (uint64_t)k;
}

/* Run images [0, n) in one batch (max_batch rows), results into out. */
static int run(tsr_engine *e, const tsr_image_params *p, int n, tsr_result *out)
{
    tsr_batch *b;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    int ids[N_IMAGES];
    ASSERT_TRUE(n <= N_IMAGES);
    /* a first wave at once, then the rest joining between calls, one or
     * two at a time, as the server's clients do */
    int next = 0;
    for (; next < n && next < n / 3 + 1; next++)
        ASSERT_OK(tsr_batch_submit(b, &p[next], &ids[next]));
    for (int guard = 0; tsr_batch_active(b) > 0 || next < n; guard++) {
        ASSERT_TRUE(guard < 100000);
        for (int k = 0; k < 1 + guard % 2 && next < n; k++, next++)
            ASSERT_OK(tsr_batch_submit(b, &p[next], &ids[next]));
        ASSERT_OK(tsr_batch_step(b, NULL));
    }
    for (int i = 0; i < n; i++) {
        ASSERT_OK(tsr_batch_take(b, ids[i], &out[i]));
        ASSERT_EQ(out[i].status, TSR_OK);
    }
    tsr_batch_free(b);
    return 0;
}

/* Images of `many` (one batch) against `one` (each alone): how many differ,
 * printing the largest difference of each. */
static int count_diffs(const tsr_result *many, const tsr_result *one, int n, const char *what)
{
    const size_t bytes = (size_t)SIDE * SIDE * 3;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int md = 0, nd = 0;
        for (size_t j = 0; j < bytes; j++) {
            const int d = abs((int)many[i].rgb[j] - (int)one[i].rgb[j]);
            md = d > md ? d : md;
            nd += d != 0;
        }
        if (nd) {
            printf("%s: image %d differs from its solo run: max %d, %d values\n", what, i, md,
                   nd);
            bad++;
        }
    }
    return bad;
}

static int solo_runs(tsr_engine *e, const tsr_image_params *p, int n, tsr_result *out)
{
    for (int i = 0; i < n; i++)
        if (run(e, &p[i], 1, &out[i]))
            return 1;
    return 0;
}

static void free_all(tsr_result *r, int n)
{
    for (int i = 0; i < n; i++)
        tsr_result_free(&r[i]);
}

/* One batch at two threads (the soak's server) against each image alone
 * at one thread (the soak's `tessera generate`), and the two dimensions
 * apart: batched against solo at two threads, solo at one against two. */
static int test_mixed(void)
{
    tsr_engine *e1, *e2;
    if (open_demo(1, &e1) || open_demo(2, &e2))
        return 1;
    tsr_image_params p[N_IMAGES];
    for (int i = 0; i < N_IMAGES; i++)
        params_of(i, &p[i]);
    static tsr_result batched[N_IMAGES], solo1[N_IMAGES], solo2[N_IMAGES];
    if (run(e2, p, N_IMAGES, batched) || solo_runs(e1, p, N_IMAGES, solo1) ||
        solo_runs(e2, p, N_IMAGES, solo2))
        return 1;
    const int threads = count_diffs(solo2, solo1, N_IMAGES, "solo, 2 threads vs 1");
    const int batch = count_diffs(batched, solo2, N_IMAGES, "batched vs solo, 2 threads");
    const int soak = count_diffs(batched, solo1, N_IMAGES, "batched at 2 vs solo at 1");
    printf("%d of %d images differ (threads %d, batch %d)\n", soak, N_IMAGES, threads, batch);
    ASSERT_EQ(threads, 0);
    ASSERT_EQ(batch, 0);
    ASSERT_EQ(soak, 0);
    free_all(batched, N_IMAGES);
    free_all(solo1, N_IMAGES);
    free_all(solo2, N_IMAGES);
    tsr_engine_close(e1);
    tsr_engine_close(e2);
    return 0;
}

/* Image k's RGB from `tessera generate --threads t` (own process). */
static int generate_rgb(const char *bin, const char *dir, int k, int threads, uint8_t **rgb)
{
    tsr_image_params p;
    params_of(k, &p);
    char model[600], png[600], log[600], seed[32], steps[16], th[16];
    const char *src = getenv("TSR_SOURCE_DIR");
    snprintf(model, sizeof model, "%s/models/demo", src ? src : ".");
    snprintf(png, sizeof png, "%s/%d-%d.png", dir, k, threads);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)p.seed);
    snprintf(steps, sizeof steps, "%d", p.steps);
    snprintf(th, sizeof th, "%d", threads);
    char *argv[] = {(char *)bin, "--log-level", "warn", "generate", "--model", model,
                    "--device", "cpu", "--prompt", (char *)p.prompt, "--seed", seed, "--steps",
                    steps, "--width", "64", "--height", "64", "--threads", th, "--quiet",
                    "--output", png, NULL};
    tsr_test_child r;
    ASSERT_TRUE(tsr_test_spawn(argv, log, NULL, 300, &r) == 0);
    ASSERT_TRUE(r.exited && r.status == 0);
    size_t size = 0;
    void *file = tsr_test_read_file(png, &size);
    ASSERT_TRUE(file);
    int w, h;
    ASSERT_OK(tsr_image_decode(file, size, 3, 0, rgb, &w, &h));
    free(file);
    ASSERT_TRUE(w == SIDE && h == SIDE);
    unlink(png);
    unlink(log);
    return 0;
}

/* `tessera generate` at one and at two threads, each in its own process
 * (the soak's two sides): the same image. */
static int test_threads_cli(void)
{
    const char *bin = getenv("TSR_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        printf("no TSR_BIN: skipped\n");
        return TSR_TEST_SKIP;
    }
    char dir[] = "/tmp/tsr_batch_mixed_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    int bad = 0;
    for (int k = 0; k < 12; k++) {
        uint8_t *one, *two;
        if (generate_rgb(bin, dir, k, 1, &one) || generate_rgb(bin, dir, k, 2, &two))
            return 1;
        if (memcmp(one, two, (size_t)SIDE * SIDE * 3) != 0) {
            printf("image %d: --threads 1 and 2 differ\n", k);
            bad++;
        }
        free(one);
        free(two);
    }
    rmdir(dir);
    printf("%d of 12 images differ between --threads 1 and 2\n", bad);
    ASSERT_EQ(bad, 0);
    return 0;
}

static const tsr_test_entry k_tests[] = {
    {"mixed", test_mixed},
    {"threads_cli", test_threads_cli},
};
TSR_TEST_TABLE_MAIN(k_tests)
