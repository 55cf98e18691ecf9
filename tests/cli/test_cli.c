/*
 * tests/cli/test_cli.c - the `tessera` program's contract, checked by
 * running it ($TSR_BIN): exit codes, flag checks before the model loads,
 * seeds, batches, JPEG in and out, resize modes, convert round trips, and
 * that a CPU run neither links nor loads the CUDA libraries.
 *
 * Each case is one ctest entry (cli_<case>).  Cases that generate images use
 * the tiny models in tests/data/models/ (64x64, 1-3 steps) or models/demo.
 * Nothing here needs Python; where the claim is "the same image", the
 * pixels of two PNGs written by the program are compared exactly.
 */
#include "test.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/image.h"
#include "tessera.h"
#include "text/tokenizer.h"

#define TIMEOUT 280.0
#define MAX_ARGS 64

/* ---- running the program ---- */

typedef struct run_out {
    int status;   /* exit status, or -1 when it did not exit by itself */
    char *out;    /* stdout (owned) */
    char *err;    /* stderr (owned) */
    long rss_kib; /* peak resident memory */
} run_out;

static char g_tmp[PATH_MAX];

static void run_free(run_out *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

static char *slurp(const char *path)
{
    size_t n = 0;
    char *s = tsr_test_read_file(path, &n);
    char *z = s ? realloc(s, n + 1) : NULL;
    if (!z) {
        free(s);
        return strdup("");
    }
    z[n] = '\0';
    return z;
}

/* Run `tessera ARGS...` (NULL-terminated); prints the command and stderr. */
static int run_v(run_out *r, const char *first, va_list ap)
{
    memset(r, 0, sizeof *r);
    const char *bin = getenv("TSR_BIN");
    if (!bin)
        return -1;
    char *argv[MAX_ARGS];
    int n = 0;
    argv[n++] = (char *)bin;
    for (const char *a = first; a && n < MAX_ARGS - 1; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    argv[n] = NULL;
    printf("$ tessera");
    for (int i = 1; i < n; i++)
        printf(" '%s'", argv[i]);
    printf("\n");
    char out[PATH_MAX + 16], err[PATH_MAX + 16];
    snprintf(out, sizeof out, "%s/stdout.txt", g_tmp);
    snprintf(err, sizeof err, "%s/stderr.txt", g_tmp);
    tsr_test_child c;
    if (tsr_test_spawn(argv, out, err, TIMEOUT, &c) != 0)
        return -1;
    r->status = c.exited ? c.status : -1;
    r->rss_kib = c.max_rss_kib;
    r->out = slurp(out);
    r->err = slurp(err);
    printf("  -> exit %d, %.2f s\n%s", r->status, c.seconds, r->err);
    return 0;
}

static int run(run_out *r, const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    int rc = run_v(r, first, ap);
    va_end(ap);
    return rc;
}

#define RUN(r, ...)                                                                           \
    do {                                                                                      \
        if (run((r), __VA_ARGS__, (const char *)NULL) != 0)                                   \
            TSR_FAIL("cannot run %s", getenv("TSR_BIN") ? getenv("TSR_BIN") : "$TSR_BIN");    \
    } while (0)

/* Exit status `code` and every word in the message (NULL-terminated). */
static int expect(const run_out *r, int code, ...)
{
    if (r->status != code)
        TSR_FAIL("exit %d, expected %d", r->status, code);
    va_list ap;
    va_start(ap, code);
    for (const char *w = va_arg(ap, const char *); w; w = va_arg(ap, const char *))
        if (!strstr(r->err, w)) {
            va_end(ap);
            TSR_FAIL("the message does not say \"%s\": %s", w, r->err);
        }
    va_end(ap);
    return 0;
}

#define EXPECT(r, code, ...)                                                                  \
    do {                                                                                      \
        if (expect((r), (code), __VA_ARGS__, (const char *)NULL))                            \
            return 1;                                                                         \
    } while (0)

/* The engine logs "model NAME (FAMILY) on cpu ..." once it has loaded. */
#define ASSERT_NOT_LOADED(r)                                                                  \
    do {                                                                                      \
        if (strstr((r)->err, ") on "))                                                        \
            TSR_FAIL("the model was loaded before the error: %s", (r)->err);                  \
    } while (0)

/* ---- paths and files ---- */

static const char *tmp_path(const char *name, char *buf)
{
    snprintf(buf, PATH_MAX, "%s/%s", g_tmp, name);
    return buf;
}

static const char *model_path(const char *name, char *buf)
{
    if (strcmp(name, "demo") == 0) {
        const char *src = getenv("TSR_SOURCE_DIR");
        snprintf(buf, PATH_MAX, "%s/models/demo", src ? src : ".");
        return buf;
    }
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s", name);
    return tsr_test_path(rel, buf, PATH_MAX);
}

static const char *data_path(const char *rel, char *buf)
{
    return tsr_test_path(rel, buf, PATH_MAX);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    chmod(path, 0755);
    remove(path);
    return 0;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Max abs difference of two PNGs' pixels (-1 on a read or size mismatch). */
static int png_diff(const char *a, const char *b)
{
    tsr_image x = {0}, y = {0};
    int mx = -1;
    if (tsr_image_read(a, 3, &x) == 0 && tsr_image_read(b, 3, &y) == 0 && x.width == y.width &&
        x.height == y.height) {
        mx = 0;
        for (size_t i = 0; i < tsr_image_bytes(&x); i++) {
            int d = abs((int)x.data[i] - (int)y.data[i]);
            mx = d > mx ? d : mx;
        }
    } else {
        fprintf(stderr, "cannot compare %s and %s: %s\n", a, b, tsr_last_error());
    }
    tsr_image_free(&x);
    tsr_image_free(&y);
    return mx;
}

/* The PNG's "parameters" text (owned) or NULL. */
static char *png_parameters(const char *path)
{
    tsr_image img = {0};
    tsr_png_meta meta = {0};
    char *p = NULL;
    if (tsr_png_read(path, 0, &img, &meta) == 0 && tsr_png_meta_find(&meta, "parameters"))
        p = strdup(tsr_png_meta_find(&meta, "parameters"));
    tsr_image_free(&img);
    tsr_png_meta_free(&meta);
    return p;
}

static cJSON *load_json(const char *path)
{
    char *s = slurp(path);
    cJSON *j = cJSON_Parse(s);
    free(s);
    return j;
}

/* ---- exit codes and help ---- */

static int test_exit_codes(void)
{
    run_out r;
    char m[PATH_MAX], bad[PATH_MAX];
    model_path("demo", m);
    tmp_path("garbage.safetensors", bad);
    FILE *f = fopen(bad, "w");
    ASSERT_TRUE(f != NULL);
    fputs("not a model", f);
    fclose(f);
    static const char *const commands[] = {"inspect", "convert", "tokenize", "encode",
                                           "generate", "bench"};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        RUN(&r, commands[i], "--help");
        ASSERT_EQ(r.status, 0);
        if (!strstr(r.out, "exit status: 0 success; 1 the work failed"))
            TSR_FAIL("tessera %s --help does not state the exit codes", commands[i]);
        run_free(&r);
        /* a usage error: 2 */
        if (strcmp(commands[i], "bench") == 0)
            RUN(&r, "bench", "ops", "--no-such-flag");
        else
            RUN(&r, commands[i], "--no-such-flag");
        EXPECT(&r, 2, "--no-such-flag");
        run_free(&r);
    }
    RUN(&r, "--help");
    ASSERT_TRUE(strstr(r.out, "exit status") != NULL);
    run_free(&r);
    /* a file that is not a model: 1, the same for every command */
    RUN(&r, "inspect", bad);
    EXPECT(&r, 1, "garbage.safetensors");
    run_free(&r);
    char out[PATH_MAX];
    RUN(&r, "convert", bad, tmp_path("out", out));
    EXPECT(&r, 1, "garbage.safetensors");
    run_free(&r);
    RUN(&r, "tokenize", "--model", "/nonexistent/model", "a cat");
    EXPECT(&r, 1, "/nonexistent/model");
    run_free(&r);
    RUN(&r, "encode", "--model", bad, "a cat");
    EXPECT(&r, 1, "garbage.safetensors");
    run_free(&r);
    RUN(&r, "generate", "--model", bad, "--prompt", "a cat");
    EXPECT(&r, 1, "--model", "garbage.safetensors");
    run_free(&r);
    RUN(&r, "bench", "vae", "--model", bad);
    EXPECT(&r, 1, "garbage.safetensors");
    run_free(&r);
    /* bench peak: a bad value is a usage error; a short run reports every kind */
    RUN(&r, "bench", "peak", "--seconds", "0");
    EXPECT(&r, 2, "--seconds");
    run_free(&r);
    RUN(&r, "bench", "peak", "--seconds", "0.02", "--threads", "2", "--json");
    ASSERT_EQ(r.status, 0);
    if (!strstr(r.out, "\"kind\": \"scalar fma\"") || !strstr(r.out, "\"gflops_all\""))
        TSR_FAIL("bench peak --json: %s", r.out);
    run_free(&r);
    /* missing files: 1; bad values: 2 */
    RUN(&r, "inspect", "/nonexistent/model");
    EXPECT(&r, 1, "/nonexistent/model");
    run_free(&r);
    RUN(&r, "generate", "--model", "/nonexistent/model", "--prompt", "a cat");
    EXPECT(&r, 1, "--model", "/nonexistent/model");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", m, "--prompt", "a cat", "--steps", "0");
    EXPECT(&r, 2, "--steps");
    run_free(&r);
    RUN(&r, "inspect", "--prediction", "x", m);
    EXPECT(&r, 2, "--prediction");
    run_free(&r);
    RUN(&r, "convert", "--dtype", "f8", m, out);
    EXPECT(&r, 2, "--dtype");
    run_free(&r);
    return 0;
}

static int test_help_rules(void)
{
    run_out r;
    RUN(&r, "generate", "--help");
    ASSERT_EQ(r.status, 0);
    /* one batch rule, stated the same way in help, README and docs/api.md */
    static const char rule[] = "images per request, 1..64";
    if (!strstr(r.out, rule))
        TSR_FAIL("generate --help lacks \"%s\"", rule);
    if (!strstr(r.out, "sample_size times\nthe VAE factor") ||
        !strstr(r.out, "128 for models/demo"))
        TSR_FAIL("generate --help does not state the default size rule");
    if (!strstr(r.out, "(0, 1]") || !strstr(r.out, "-1 = random"))
        TSR_FAIL("generate --help: strength or seed wording");
    run_free(&r);
    const char *src = getenv("TSR_SOURCE_DIR");
    static const char *const docs[] = {"README.md", "docs/api.md"};
    for (int i = 0; i < 2; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", src ? src : ".", docs[i]);
        char *text = slurp(p);
        bool ok = strstr(text, rule) != NULL;
        free(text);
        if (!ok)
            TSR_FAIL("%s lacks \"%s\"", docs[i], rule);
    }
    return 0;
}

/* ---- numbers and seeds ---- */

static int test_int_range(void)
{
    run_out r;
    char m[PATH_MAX];
    model_path("demo", m);
    /* too large for 64 bits: a range message, not "expects an integer" */
    RUN(&r, "generate", "--model", m, "--prompt", "x", "--steps", "99999999999999999999");
    EXPECT(&r, 2, "--steps must be between 1 and 1000");
    run_free(&r);
    RUN(&r, "generate", "--model", m, "--prompt", "x", "--width", "-99999999999999999999");
    EXPECT(&r, 2, "--width must be between 64 and 4096");
    run_free(&r);
    RUN(&r, "generate", "--model", m, "--prompt", "x", "--seed", "18446744073709551616");
    EXPECT(&r, 2, "--seed must be between 0 and 18446744073709551615");
    run_free(&r);
    RUN(&r, "generate", "--model", m, "--prompt", "x", "--seed", "-2");
    EXPECT(&r, 2, "--seed must be between 0 and 18446744073709551615");
    run_free(&r);
    RUN(&r, "generate", "--model", m, "--prompt", "x", "--threads", "1e3");
    EXPECT(&r, 2, "--threads expects an integer");
    run_free(&r);
    RUN(&r, "generate", "--model", m, "--prompt", "x", "--batch-size", "65");
    EXPECT(&r, 2, "--batch-size must be between 1 and 64");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", m, "--prompt", "x", "--cfg-scale", "1e999");
    EXPECT(&r, 2, "--cfg-scale must be between 0 and 100");
    run_free(&r);
    return 0;
}

static int test_seed_u64(void)
{
    run_out r;
    char m[PATH_MAX], out[PATH_MAX], p0[PATH_MAX], p1[PATH_MAX], single[PATH_MAX];
    model_path("sd1", m);
    RUN(&r, "generate", "--model", m, "--prompt", "a cat", "--steps", "2", "--width", "64",
        "--height", "64", "--seed", "9223372036854775807", "--batch-size", "2", "--output",
        tmp_path("s.png", out));
    EXPECT(&r, 0, "seed 9223372036854775807");
    if (!strstr(r.out, "s-1.png (seed 9223372036854775808)"))
        TSR_FAIL("stdout: %s", r.out);
    run_free(&r);
    char *params = png_parameters(tmp_path("s-1.png", p1));
    ASSERT_TRUE(params != NULL);
    bool ok = strstr(params, "Seed: 9223372036854775808,") != NULL;
    printf("image 1: %s\n", params);
    free(params);
    ASSERT_TRUE(ok);
    /* image 1 is the image of seed s+1 */
    RUN(&r, "generate", "--model", m, "--prompt", "a cat", "--steps", "2", "--width", "64",
        "--height", "64", "--seed", "9223372036854775808", "--output", tmp_path("one.png", single));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    ASSERT_EQ(png_diff(p1, single), 0);
    /* seed + i wraps mod 2^64 */
    RUN(&r, "generate", "--model", m, "--prompt", "a cat", "--steps", "2", "--width", "64",
        "--height", "64", "--seed", "18446744073709551615", "--batch-size", "2", "--output",
        tmp_path("w.png", out));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    params = png_parameters(tmp_path("w-1.png", p1));
    ok = params && strstr(params, "Seed: 0,");
    free(params);
    ASSERT_TRUE(ok);
    params = png_parameters(tmp_path("w-0.png", p0));
    ok = params && strstr(params, "Seed: 18446744073709551615,");
    free(params);
    ASSERT_TRUE(ok);
    RUN(&r, "generate", "--model", m, "--prompt", "a cat", "--steps", "2", "--width", "64",
        "--height", "64", "--seed", "0", "--output", tmp_path("zero.png", single));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    ASSERT_EQ(png_diff(p1, single), 0);
    /* -1 is random: a seed is printed and recorded */
    RUN(&r, "generate", "--model", m, "--prompt", "a cat", "--steps", "1", "--width", "64",
        "--height", "64", "--seed", "-1", "--output", tmp_path("r.png", out));
    ASSERT_EQ(r.status, 0);
    ASSERT_TRUE(strstr(r.out, "(seed ") != NULL);
    run_free(&r);
    return 0;
}

static int test_batch_rows(void)
{
    /* 33 images with guidance = 66 rows: three UNet calls per step (16, 16
     * and 1 images), not a failure; image 32 is the image of seed s+32 */
    run_out r;
    char m[PATH_MAX], out[PATH_MAX], last[PATH_MAX], single[PATH_MAX];
    model_path("sd1", m);
    RUN(&r, "generate", "--model", m, "--prompt", "a cat", "--steps", "1", "--width", "64",
        "--height", "64", "--seed", "100", "--batch-size", "33", "--output", tmp_path("b.png", out));
    EXPECT(&r, 0, "33 images", "3 UNet calls");
    run_free(&r);
    for (int i = 0; i < 33; i++) {
        char name[32], p[PATH_MAX];
        snprintf(name, sizeof name, "b-%d.png", i);
        if (!exists(tmp_path(name, p)))
            TSR_FAIL("%s missing", p);
    }
    RUN(&r, "generate", "--model", m, "--prompt", "a cat", "--steps", "1", "--width", "64",
        "--height", "64", "--seed", "132", "--output", tmp_path("single.png", single));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    ASSERT_EQ(png_diff(tmp_path("b-32.png", last), single), 0);
    return 0;
}

/* ---- flags named in every error, checked before the model loads ---- */

static int test_flag_errors(void)
{
    run_out r;
    char demo[PATH_MAX], inp[PATH_MAX], init[PATH_MAX], junk[PATH_MAX];
    model_path("demo", demo);
    model_path("sd1_inpaint", inp);
    data_path("pipeline/init.png", init);
    tmp_path("junk.png", junk);
    FILE *f = fopen(junk, "w");
    ASSERT_TRUE(f != NULL);
    fputs("GIF89a not an image we read", f);
    fclose(f);
    /* after loading: a value this model cannot take (2), naming the flag */
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--steps", "1", "--clip-skip", "5");
    EXPECT(&r, 2, "--clip-skip: clip skip must be within 1..3");
    run_free(&r);
    RUN(&r, "generate", "--model", inp, "--prompt", "x", "--steps", "1", "--width", "64",
        "--height", "64", "--init-image", init, "--strength", "0.5");
    EXPECT(&r, 2, "--mask");
    run_free(&r);
    /* before loading */
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--taesd", "/nonexistent/taesd");
    EXPECT(&r, 1, "--taesd /nonexistent/taesd");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--strength", "0.5");
    EXPECT(&r, 2, "--strength needs --init-image");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", init, "--strength", "0");
    EXPECT(&r, 2, "--strength must be in (0, 1], got 0");
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", init, "--strength",
        "1.5");
    EXPECT(&r, 2, "--strength must be in (0, 1], got 1.5");
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--negative-prompt", "bad \xff");
    EXPECT(&r, 2, "--negative-prompt");
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", "/nonexistent/i.png");
    EXPECT(&r, 1, "--init-image /nonexistent/i.png");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", init, "--mask",
        "/nonexistent/m.png");
    EXPECT(&r, 1, "--mask /nonexistent/m.png");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", junk);
    EXPECT(&r, 1, "--init-image", "not a PNG or JPEG");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", init, "--resize-mode",
        "stretch");
    EXPECT(&r, 2, "--resize-mode");
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--resize-mode", "crop-and-resize");
    EXPECT(&r, 2, "--resize-mode needs --init-image");
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--device", "gpu");
    EXPECT(&r, 2, "--device");
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--precision", "fp8");
    EXPECT(&r, 2, "--precision");
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--steps", "1", "--precision", "bf16",
        "--device", "cuda");
    EXPECT(&r, 1, "precision bf16 is the CPU's fast mode");
    run_free(&r);
    /* a CPU (or a TESSERA_CPU_ISA cap) without AVX512_BF16 refuses the mode */
    setenv("TESSERA_CPU_ISA", "avx2", 1);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--steps", "1", "--precision", "bf16");
    unsetenv("TESSERA_CPU_ISA");
    EXPECT(&r, 1, "needs a CPU with AVX512_BF16");
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--prediction", "x0");
    EXPECT(&r, 2, "--prediction");
    run_free(&r);
    RUN(&r, "generate", "--model", demo);
    EXPECT(&r, 2, "--prompt");
    run_free(&r);
    return 0;
}

static int test_output_checks(void)
{
    run_out r;
    char demo[PATH_MAX], p[PATH_MAX];
    model_path("demo", demo);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--output", "/nonexistent-dir/x.png");
    EXPECT(&r, 1, "--output", "/nonexistent-dir");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    /* a folder nobody may create files in (root included) */
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--output", "/proc/x.png");
    EXPECT(&r, 1, "--output", "cannot write in /proc");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--output", tmp_path("x.webp", p));
    EXPECT(&r, 2, "--output must end in .png, .jpg or .jpeg");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--output", tmp_path("noext", p));
    EXPECT(&r, 2, "--output must end in");
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--output", g_tmp);
    EXPECT(&r, 2, "--output");
    run_free(&r);
    /* the probe leaves nothing behind */
    DIR *d = opendir(g_tmp);
    ASSERT_TRUE(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, "tessera-write-test"))
            TSR_FAIL("%s left behind", e->d_name);
    closedir(d);
    return 0;
}

/* ---- JPEG ---- */

static int test_jpeg_output(void)
{
    run_out r;
    char demo[PATH_MAX], out[PATH_MAX], p[PATH_MAX], png[PATH_MAX];
    model_path("demo", demo);
    RUN(&r, "generate", "--model", demo, "--prompt", "a red circle, \xe7\x8c\xab", "--steps", "2",
        "--seed", "41", "--batch-size", "2", "--output", tmp_path("x.jpg", out));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    for (int i = 0; i < 2; i++) {
        char name[32], want[64];
        snprintf(name, sizeof name, "x-%d.jpg", i);
        tsr_image img = {0};
        char *params = NULL;
        ASSERT_OK(tsr_jpeg_read(tmp_path(name, p), 3, &img, &params));
        ASSERT_EQ(img.width, 128);
        ASSERT_EQ(img.height, 128);
        ASSERT_TRUE(params != NULL);
        printf("%s: %s\n", name, params);
        snprintf(want, sizeof want, "Seed: %d,", 41 + i);
        bool ok = strncmp(params, "a red circle, \xe7\x8c\xab\nSteps: 2,", 25) == 0 &&
                  strstr(params, want) && strstr(params, "Model: demo");
        free(params);
        tsr_image_free(&img);
        if (!ok)
            TSR_FAIL("%s: parameters", name);
    }
    /* .jpeg, and the pixels are the PNG's up to JPEG's loss */
    RUN(&r, "generate", "--model", demo, "--prompt", "a red circle", "--steps", "2", "--seed",
        "41", "--output", tmp_path("y.JPEG", out));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "a red circle", "--steps", "2", "--seed",
        "41", "--output", tmp_path("y.png", png));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    tsr_image a = {0}, b = {0};
    ASSERT_OK(tsr_image_read(out, 3, &a));
    ASSERT_OK(tsr_image_read(png, 3, &b));
    double sum = 0;
    for (size_t i = 0; i < tsr_image_bytes(&a); i++)
        sum += abs((int)a.data[i] - (int)b.data[i]);
    double mean = sum / (double)tsr_image_bytes(&a);
    printf("JPEG vs PNG: mean abs diff %.2f\n", mean);
    tsr_image_free(&a);
    tsr_image_free(&b);
    ASSERT_TRUE(mean < 6.0);
    return 0;
}

/* An init image as JPEG, of another size and aspect: fitted with the
 * resize mode exactly as image/resize.c fits it. */
static int test_init_jpeg_resize(void)
{
    run_out r;
    char sd1[PATH_MAX], inp[PATH_MAX], init_src[PATH_MAX], mask_src[PATH_MAX];
    char jpg[PATH_MAX], mjpg[PATH_MAX], ref[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
    model_path("sd1", sd1);
    model_path("sd1_inpaint", inp);
    data_path("pipeline/init.png", init_src);
    data_path("pipeline/mask.png", mask_src);
    tsr_image src = {0}, wide = {0}, dec = {0}, fit = {0};
    ASSERT_OK(tsr_png_read(init_src, 3, &src, NULL));
    ASSERT_OK(tsr_image_resize(&src, 100, 60, &wide));
    ASSERT_OK(tsr_jpeg_write(tmp_path("init.jpg", jpg), &wide, 95, NULL));
    ASSERT_OK(tsr_jpeg_read(jpg, 3, &dec, NULL));
    static const char *const modes[] = {"just-resize", "crop-and-resize", "resize-and-fill"};
    for (int m = 0; m < 3; m++) {
        tsr_resize_mode mode;
        ASSERT_OK(tsr_resize_mode_parse(modes[m], &mode));
        ASSERT_OK(tsr_image_resize_a1111(&dec, mode, 64, 64, &fit));
        ASSERT_OK(tsr_png_write(tmp_path("fit.png", ref), &fit, NULL, 0));
        tsr_image_free(&fit);
        RUN(&r, "generate", "--model", sd1, "--prompt", "a cat", "--steps", "3", "--width", "64",
            "--height", "64", "--seed", "7", "--init-image", jpg, "--strength", "0.6",
            "--resize-mode", modes[m], "--output", tmp_path("a.png", a));
        EXPECT(&r, 0, "100x60 -> 64x64");
        run_free(&r);
        RUN(&r, "generate", "--model", sd1, "--prompt", "a cat", "--steps", "3", "--width", "64",
            "--height", "64", "--seed", "7", "--init-image", ref, "--strength", "0.6", "--output",
            tmp_path("b.png", b));
        ASSERT_EQ(r.status, 0);
        run_free(&r);
        if (png_diff(a, b) != 0)
            TSR_FAIL("%s: the CLI's fitted init image differs from image/resize.c's", modes[m]);
    }
    /* a JPEG mask of yet another size, on the inpainting model */
    tsr_image mask = {0}, tall = {0};
    ASSERT_OK(tsr_png_read(mask_src, 1, &mask, NULL));
    ASSERT_OK(tsr_image_resize(&mask, 48, 80, &tall));
    ASSERT_OK(tsr_jpeg_write(tmp_path("mask.jpg", mjpg), &tall, 95, NULL));
    RUN(&r, "generate", "--model", inp, "--prompt", "a cat", "--steps", "2", "--width", "64",
        "--height", "64", "--seed", "7", "--init-image", jpg, "--mask", mjpg, "--resize-mode",
        "resize-and-fill", "--output", tmp_path("c.png", a));
    EXPECT(&r, 0, "--mask: 48x80 -> 64x64");
    run_free(&r);
    tsr_image_free(&mask);
    tsr_image_free(&tall);
    tsr_image_free(&src);
    tsr_image_free(&wide);
    tsr_image_free(&dec);
    return 0;
}

/* Inpainting with an ordinary 4-channel model: --mask-blur 0 is the engine's
 * (diffusers') image; the default (4) pastes it over the init image through
 * the mask blurred with Pillow's GaussianBlur(4), doubled - pixel for pixel
 * what image/blur.c computes. */
static int test_mask_blur(void)
{
    run_out r;
    char sd1[PATH_MAX], init[PATH_MAX], maskp[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
    model_path("sd1", sd1);
    data_path("pipeline/init.png", init);
    data_path("pipeline/mask.png", maskp);
    RUN(&r, "generate", "--model", sd1, "--prompt", "a cat", "--steps", "2", "--width", "64",
        "--height", "64", "--seed", "3", "--init-image", init, "--mask", maskp, "--mask-blur",
        "0", "--output", tmp_path("raw.png", a));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    RUN(&r, "generate", "--model", sd1, "--prompt", "a cat", "--steps", "2", "--width", "64",
        "--height", "64", "--seed", "3", "--init-image", init, "--mask", maskp, "--output",
        tmp_path("pasted.png", b));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    tsr_image raw = {0}, pasted = {0}, orig = {0}, mask = {0}, blurred = {0}, want = {0};
    ASSERT_OK(tsr_png_read(a, 3, &raw, NULL));
    ASSERT_OK(tsr_png_read(b, 3, &pasted, NULL));
    ASSERT_OK(tsr_png_read(init, 3, &orig, NULL));
    ASSERT_OK(tsr_png_read(maskp, 1, &mask, NULL));
    ASSERT_OK(tsr_image_gaussian_blur_pil(&mask, 4, &blurred));
    for (size_t i = 0; i < 64 * 64; i++)
        blurred.data[i] = blurred.data[i] >= 128 ? 255 : (uint8_t)(2 * blurred.data[i]);
    ASSERT_OK(tsr_image_mask_overlay(&raw, &orig, &blurred, &want));
    ASSERT_TRUE(memcmp(want.data, pasted.data, 64 * 64 * 3) == 0);
    ASSERT_TRUE(memcmp(raw.data, pasted.data, 64 * 64 * 3) != 0);
    /* far from the mask the init image comes back exactly */
    ASSERT_TRUE(memcmp(pasted.data, orig.data, 3) == 0);
    tsr_image_free(&raw);
    tsr_image_free(&pasted);
    tsr_image_free(&orig);
    tsr_image_free(&mask);
    tsr_image_free(&blurred);
    tsr_image_free(&want);
    RUN(&r, "generate", "--model", sd1, "--prompt", "x", "--mask-blur", "65", "--init-image",
        init, "--mask", maskp);
    EXPECT(&r, 2, "--mask-blur");
    run_free(&r);
    return 0;
}

/* A1111's "inpaint only masked" on the demo model (128x128): a 256x192
 * init image with a small mask comes back at 256x192; outside the blurred
 * mask (restricted to the region) the init image exactly, inside the mask
 * the inpainted pixels.  Flag checks before the model loads; a blank mask
 * refused naming --mask. */
static int test_inpaint_full_res(void)
{
    run_out r;
    char demo[PATH_MAX], initp[PATH_MAX], maskp[PATH_MAX], blank[PATH_MAX], out[PATH_MAX];
    model_path("demo", demo);
    tsr_image init = {0}, mask = {0}, got = {0}, blurred = {0};
    ASSERT_OK(tsr_image_alloc(&init, 256, 192, 3));
    for (uint32_t y = 0; y < 192; y++)
        for (uint32_t x = 0; x < 256; x++) {
            uint8_t *p = &init.data[(y * 256 + x) * 3];
            p[0] = (uint8_t)x;
            p[1] = (uint8_t)(y + 40);
            p[2] = (uint8_t)((x * 7 + y * 3) & 255);
        }
    ASSERT_OK(tsr_png_write(tmp_path("init.png", initp), &init, NULL, 0));
    ASSERT_OK(tsr_image_alloc(&mask, 256, 192, 1));
    memset(mask.data, 0, 256 * 192);
    ASSERT_OK(tsr_png_write(tmp_path("blank.png", blank), &mask, NULL, 0));
    for (int y = 70; y < 100; y++)
        for (int x = 150; x < 190; x++)
            mask.data[y * 256 + x] = 255;
    ASSERT_OK(tsr_png_write(tmp_path("mask.png", maskp), &mask, NULL, 0));

    RUN(&r, "generate", "--model", demo, "--prompt", "a cat", "--steps", "2", "--seed", "5",
        "--init-image", initp, "--mask", maskp, "--inpaint-full-res", "--output",
        tmp_path("out.png", out));
    /* box 150,70 40x30, padding 32 -> 118,38 104x94, square -> 118,33 104x104 */
    EXPECT(&r, 0, "--inpaint-full-res: region 118,33 104x104 of 256x192");
    run_free(&r);
    ASSERT_OK(tsr_png_read(out, 3, &got, NULL));
    ASSERT_EQ(got.width, 256);
    ASSERT_EQ(got.height, 192);
    char *params = png_parameters(out);
    ASSERT_TRUE(params && strstr(params, "Inpaint area: Only masked, Masked area padding: 32"));
    free(params);
    ASSERT_OK(tsr_image_gaussian_blur_pil(&mask, 4, &blurred));
    size_t same_outside = 0, outside = 0, inside = 0, differ_inside = 0;
    for (int y = 0; y < 192; y++)
        for (int x = 0; x < 256; x++) {
            const size_t i = (size_t)y * 256 + x;
            const bool in_region = x >= 118 && x < 222 && y >= 33 && y < 137;
            const bool differs = memcmp(&got.data[3 * i], &init.data[3 * i], 3) != 0;
            if (!in_region || blurred.data[i] == 0) {
                outside++;
                same_outside += !differs;
            } else if (mask.data[i]) {
                inside++;
                differ_inside += differs;
            }
        }
    if (same_outside != outside)
        TSR_FAIL("%zu of %zu pixels outside the blurred mask differ from the init image",
                 outside - same_outside, outside);
    if (differ_inside * 10 < inside * 9)
        TSR_FAIL("only %zu of %zu pixels inside the mask were repainted", differ_inside, inside);
    tsr_image_free(&got);
    tsr_image_free(&blurred);

    /* a mask of another size is fitted to the init image first */
    tsr_image small = {0};
    ASSERT_OK(tsr_image_resize(&mask, 128, 96, &small));
    ASSERT_OK(tsr_png_write(tmp_path("small.png", maskp), &small, NULL, 0));
    tsr_image_free(&small);
    RUN(&r, "generate", "--model", demo, "--prompt", "a cat", "--steps", "2", "--seed", "5",
        "--init-image", initp, "--mask", maskp, "--inpaint-full-res",
        "--inpaint-full-res-padding", "0", "--width", "64", "--height", "128", "--output",
        tmp_path("out2.png", out));
    /* box 150,70 40x30, aspect 1:2 -> 150,45 40x80 */
    EXPECT(&r, 0, "--mask: 128x96 -> 256x192", "region 150,45 40x80 of 256x192 (padding 0)");
    run_free(&r);
    ASSERT_OK(tsr_png_read(out, 3, &got, NULL));
    ASSERT_EQ(got.width, 256);
    ASSERT_EQ(got.height, 192);
    tsr_image_free(&got);

    /* checks before the model loads */
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", initp,
        "--inpaint-full-res");
    EXPECT(&r, 2, "--inpaint-full-res", "--mask");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", initp, "--mask",
        maskp, "--inpaint-full-res", "--inpaint-full-res-padding", "257");
    EXPECT(&r, 2, "--inpaint-full-res-padding");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", initp, "--mask",
        maskp, "--inpaint-full-res", "--inpaint-full-res-padding", "-1");
    EXPECT(&r, 2, "--inpaint-full-res-padding");
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", initp, "--mask",
        maskp, "--inpaint-full-res-padding", "8");
    EXPECT(&r, 2, "--inpaint-full-res-padding needs --inpaint-full-res");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    /* a mask with nothing to repaint */
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--steps", "2", "--init-image", initp,
        "--mask", blank, "--inpaint-full-res", "--output", tmp_path("none.png", out));
    EXPECT(&r, 2, "--mask", "no white pixel");
    ASSERT_TRUE(!exists(out));
    run_free(&r);
    tsr_image_free(&init);
    tsr_image_free(&mask);
    return 0;
}

/* ---- convert ---- */

static int test_convert_in_place(void)
{
    run_out r;
    char demo[PATH_MAX], m[PATH_MAX], single[PATH_MAX], link[PATH_MAX], cmd[3 * PATH_MAX];
    model_path("demo", demo);
    tmp_path("m", m);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s' && ls -lR '%s' > '%s/before.txt'", demo, m, m,
             g_tmp);
    ASSERT_EQ(system(cmd), 0);
    RUN(&r, "convert", m, m);
    EXPECT(&r, 2, "IN and OUT are the same path");
    run_free(&r);
    char inner[PATH_MAX];
    snprintf(inner, sizeof inner, "%s/unet/x.safetensors", m);
    RUN(&r, "convert", m, inner);
    EXPECT(&r, 2, "OUT is inside IN");
    run_free(&r);
    ASSERT_EQ(symlink(m, tmp_path("link", link)), 0);
    RUN(&r, "convert", link, m);
    EXPECT(&r, 2, "same path");
    run_free(&r);
    RUN(&r, "convert", m, tmp_path("m.safetensors", single));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    RUN(&r, "convert", single, g_tmp);
    EXPECT(&r, 2, "IN is inside OUT");
    run_free(&r);
    RUN(&r, "convert", single, single);
    EXPECT(&r, 2, "same path");
    run_free(&r);
    /* the model folder was not touched */
    snprintf(cmd, sizeof cmd, "ls -lR '%s' > '%s/after.txt' && cmp '%s/before.txt' '%s/after.txt'",
             m, g_tmp, g_tmp, g_tmp);
    ASSERT_EQ(system(cmd), 0);
    return 0;
}

/* A real LDM file (no tessera metadata) becomes the folder diffusers'
 * from_single_file makes for its family. */
static int test_convert_ldm_folder(void)
{
    static const struct {
        const char *file, *scheduler, *prediction, *pad[2];
        int force_zeros; /* -1: absent */
    } cases[] = {
        {"sd1.safetensors", "PNDMScheduler", "epsilon", {"<|endoftext|>", NULL}, -1},
        {"sd2v.safetensors", "DDIMScheduler", "v_prediction", {"!", NULL}, -1},
        {"sdxl.safetensors", "EulerDiscreteScheduler", "epsilon", {"<|endoftext|>", "!"}, 1},
    };
    tsr_tokenizer *def = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&def));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_out r;
        char rel[128], src[PATH_MAX], out[PATH_MAX], p[PATH_MAX * 2];
        snprintf(rel, sizeof rel, "models/%s", cases[i].file);
        data_path(rel, src);
        snprintf(rel, sizeof rel, "folder%zu", i);
        RUN(&r, "convert", src, tmp_path(rel, out));
        ASSERT_EQ(r.status, 0);
        run_free(&r);
        snprintf(p, sizeof p, "%s/scheduler/scheduler_config.json", out);
        cJSON *s = load_json(p);
        ASSERT_TRUE(s != NULL);
        ASSERT_STR_EQ(cJSON_GetObjectItem(s, "_class_name")->valuestring, cases[i].scheduler);
        ASSERT_STR_EQ(cJSON_GetObjectItem(s, "prediction_type")->valuestring, cases[i].prediction);
        ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(s, "clip_sample")));
        ASSERT_EQ(cJSON_GetObjectItem(s, "steps_offset")->valueint, 1);
        cJSON_Delete(s);
        snprintf(p, sizeof p, "%s/model_index.json", out);
        cJSON *idx = load_json(p);
        ASSERT_TRUE(idx != NULL);
        ASSERT_STR_EQ(cJSON_GetArrayItem(cJSON_GetObjectItem(idx, "scheduler"), 1)->valuestring,
                      cases[i].scheduler);
        const cJSON *fz = cJSON_GetObjectItem(idx, "force_zeros_for_empty_prompt");
        ASSERT_EQ(fz ? cJSON_IsTrue(fz) : -1, cases[i].force_zeros);
        static const char *const tok[2] = {"tokenizer", "tokenizer_2"};
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/%s", out, tok[k]);
            if (!cases[i].pad[k]) {
                ASSERT_TRUE(!exists(p));
                continue;
            }
            ASSERT_TRUE(cJSON_IsArray(cJSON_GetObjectItem(idx, tok[k])));
            tsr_tokenizer *t = NULL;
            ASSERT_OK(tsr_tokenizer_load(p, &t));
            ASSERT_EQ(tsr_tokenizer_vocab_size(t), 49408);
            ASSERT_STR_EQ(tsr_tokenizer_token(t, tsr_tokenizer_pad(t)), cases[i].pad[k]);
            /* the same ids as the embedded tokenizer */
            static const char prompt[] = "a (photo:1.2) of an astronaut riding a horse, 4k";
            int32_t x[TSR_CLIP_MAX_LENGTH], y[TSR_CLIP_MAX_LENGTH];
            int nx = tsr_tokenizer_encode_window(t, prompt, sizeof prompt - 1, x);
            int ny = tsr_tokenizer_encode_window(def, prompt, sizeof prompt - 1, y);
            ASSERT_EQ(nx, ny);
            ASSERT_EQ(memcmp(x, y, (size_t)nx * sizeof x[0]), 0);
            tsr_tokenizer_free(t);
        }
        cJSON_Delete(idx);
    }
    tsr_tokenizer_free(def);
    return 0;
}

/* folder -> single file -> folder: the same images as the original for
 * every sampler (and the model's default), 4 steps (PNDM's minimum). */
static int convert_images(const char *model, int size, bool inpaint)
{
    run_out r;
    char src[PATH_MAX], file[PATH_MAX], back[PATH_MAX], init[PATH_MAX], mask[PATH_MAX];
    model_path(model, src);
    data_path("pipeline/init.png", init);
    data_path("pipeline/mask.png", mask);
    RUN(&r, "convert", src, tmp_path("m.safetensors", file));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    RUN(&r, "convert", file, tmp_path("back", back));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    static const char *const samplers[] = {"",     "euler",  "euler_a", "heun",
                                           "dpmpp_2m", "dpmpp_2m_sde", "dpmpp_sde", "ddim",
                                           "pndm", "lms",    "unipc",   "lcm"};
    char side[16];
    snprintf(side, sizeof side, "%d", size);
    const char *paths[3] = {src, file, back};
    for (size_t s = 0; s < sizeof samplers / sizeof samplers[0]; s++) {
        char outs[3][PATH_MAX];
        for (int k = 0; k < 3; k++) {
            char name[64];
            snprintf(name, sizeof name, "o%d.png", k);
            tmp_path(name, outs[k]);
            const char *sampler_flag = samplers[s][0] ? "--sampler" : "--steps";
            const char *sampler_value = samplers[s][0] ? samplers[s] : "4";
            if (inpaint)
                RUN(&r, "generate", "--model", paths[k], "--prompt", "a red cat", "--steps", "4",
                    "--width", side, "--height", side, "--seed", "11", sampler_flag,
                    sampler_value, "--init-image", init, "--mask", mask, "--strength", "1",
                    "--output", outs[k]);
            else
                RUN(&r, "generate", "--model", paths[k], "--prompt", "a red cat",
                    "--negative-prompt", "blue", "--steps", "4", "--width", side, "--height",
                    side, "--seed", "11", sampler_flag, sampler_value, "--output", outs[k]);
            if (r.status != 0)
                TSR_FAIL("%s with sampler '%s' failed", paths[k], samplers[s]);
            run_free(&r);
        }
        for (int k = 1; k < 3; k++) {
            int d = png_diff(outs[0], outs[k]);
            if (d != 0)
                TSR_FAIL("sampler '%s': %s differs from the original folder by %d", samplers[s],
                         k == 1 ? "the single file" : "the folder converted back", d);
        }
    }
    /* the folder converted back holds what the original does */
    static const char *const same[] = {"scheduler/scheduler_config.json", "tokenizer/vocab.json",
                                       "tokenizer/merges.txt"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char a[PATH_MAX * 2], b[PATH_MAX * 2];
        snprintf(a, sizeof a, "%s/%s", src, same[i]);
        snprintf(b, sizeof b, "%s/%s", back, same[i]);
        cJSON *ja = strstr(same[i], ".json") ? load_json(a) : NULL;
        cJSON *jb = ja ? load_json(b) : NULL;
        bool eq;
        if (ja) {
            eq = cJSON_Compare(ja, jb, true);
        } else {
            char *ta = slurp(a), *tb = slurp(b);
            eq = strcmp(ta, tb) == 0;
            free(ta);
            free(tb);
        }
        cJSON_Delete(ja);
        cJSON_Delete(jb);
        if (!eq)
            TSR_FAIL("%s differs after folder -> file -> folder", same[i]);
    }
    return 0;
}

static int test_convert_images_demo(void) { return convert_images("demo", 64, false); }
static int test_convert_images_sd1(void) { return convert_images("sd1", 64, false); }
static int test_convert_images_sd2v(void) { return convert_images("sd2v", 64, false); }
static int test_convert_images_sdxl(void) { return convert_images("sdxl", 64, false); }
static int test_convert_images_sd1_inpaint(void) { return convert_images("sd1_inpaint", 64, true); }

/* ---- CUDA stays out of a CPU run ---- */

static int test_cuda_lazy(void)
{
    const char *bin = getenv("TSR_BIN");
    ASSERT_TRUE(bin != NULL);
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "ldd '%s' 2>&1", bin);
    FILE *p = popen(cmd, "r");
    ASSERT_TRUE(p != NULL);
    char line[1024];
    int lines = 0;
    while (fgets(line, sizeof line, p)) {
        lines++;
        if (strstr(line, "libcudart") || strstr(line, "libcublas") || strstr(line, "libcuda."))
            TSR_FAIL("the program links a CUDA library: %s", line);
    }
    pclose(p);
    ASSERT_TRUE(lines > 2); /* ldd ran */
    run_out r;
    RUN(&r, "--help");
    ASSERT_EQ(r.status, 0);
    printf("tessera --help: %ld KiB resident at peak\n", r.rss_kib);
    ASSERT_TRUE(r.rss_kib > 0 && r.rss_kib < 64 * 1024);
    run_free(&r);
    /* the CUDA module hidden: CPU runs work, CUDA requests fail cleanly */
    char demo[PATH_MAX], out[PATH_MAX];
    model_path("demo", demo);
    setenv("TSR_CUDA_MODULE", "/nonexistent/libtessera_cuda.so", 1);
    RUN(&r, "generate", "--model", demo, "--prompt", "a red circle", "--steps", "2", "--output",
        tmp_path("cpu.png", out));
    int st = r.status;
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "a red circle", "--steps", "2", "--device",
        "cuda", "--output", tmp_path("cuda.png", out));
    unsetenv("TSR_CUDA_MODULE");
    ASSERT_EQ(st, 0);
    /* a build without CUDA (the sanitizer builds) says so instead */
    if (strstr(r.err, "has no CUDA backend"))
        EXPECT(&r, 1, "--device", "has no CUDA backend");
    else
        EXPECT(&r, 1, "--device", "could not be loaded");
    run_free(&r);
    /* the module built next to the program loads into it: every Tessera
     * symbol it calls resolves from the program (on a machine without the
     * CUDA libraries it cannot load, for that reason only) */
    char module[PATH_MAX];
    snprintf(module, sizeof module, "%s", bin);
    char *slash = strrchr(module, '/');
    if (slash && (snprintf(slash + 1, sizeof module - (size_t)(slash + 1 - module),
                           "libtessera_cuda.so"),
                  exists(module))) {
        RUN(&r, "generate", "--model", demo, "--prompt", "a red circle", "--steps", "1",
            "--device", "cuda", "--output", tmp_path("cuda.png", out));
        if (r.status != 0 && strstr(r.err, "could not be loaded") && !strstr(r.err, "libcu"))
            TSR_FAIL("the CUDA module does not load into the program: %s", r.err);
        run_free(&r);
    }
    return 0;
}

static const tsr_test_entry tests[] = {
    {"exit_codes", test_exit_codes},
    {"help_rules", test_help_rules},
    {"int_range", test_int_range},
    {"seed_u64", test_seed_u64},
    {"batch_rows", test_batch_rows},
    {"flag_errors", test_flag_errors},
    {"output_checks", test_output_checks},
    {"jpeg_output", test_jpeg_output},
    {"init_jpeg_resize", test_init_jpeg_resize},
    {"mask_blur", test_mask_blur},
    {"inpaint_full_res", test_inpaint_full_res},
    {"convert_in_place", test_convert_in_place},
    {"convert_ldm_folder", test_convert_ldm_folder},
    {"convert_images_demo", test_convert_images_demo},
    {"convert_images_sd1", test_convert_images_sd1},
    {"convert_images_sd2v", test_convert_images_sd2v},
    {"convert_images_sdxl", test_convert_images_sdxl},
    {"convert_images_sd1_inpaint", test_convert_images_sd1_inpaint},
    {"cuda_lazy", test_cuda_lazy},
};

/* Every case runs in its own temporary folder, removed afterwards unless
 * TSR_CLI_KEEP is set. */
int main(int argc, char **argv)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tsr_cli_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    int rc = tsr_test_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
    if (!getenv("TSR_CLI_KEEP"))
        nftw(g_tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    else
        printf("kept %s\n", g_tmp);
    return rc;
}
