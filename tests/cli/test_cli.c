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

#include "cli_harness.h"
#include "image/image.h"
#include "tessera.h"
#include "text/tokenizer.h"

/* `tessera generate --model MODEL --prompt x ARGS...` exits `code` with
 * `says` in its message; before_load: it refused before loading the model
 * (the flags are checked first). */
#define GENERATE_REFUSED(code, says, before_load, model, ...)                                 \
    do {                                                                                      \
        run_out r_;                                                                           \
        RUN(&r_, "generate", "--model", (model), "--prompt", "x", __VA_ARGS__);               \
        EXPECT(&r_, (code), (says));                                                          \
        if (before_load)                                                                      \
            ASSERT_NOT_LOADED(&r_);                                                           \
        run_free(&r_);                                                                        \
    } while (0)

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
    char m[PATH_MAX];
    model_path("demo", m);
    /* too large for 64 bits: a range message, not "expects an integer" */
    GENERATE_REFUSED(2, "--steps must be between 1 and 1000", false, m,
                     "--steps", "99999999999999999999");
    GENERATE_REFUSED(2, "--width must be between 64 and 4096", false, m,
                     "--width", "-99999999999999999999");
    GENERATE_REFUSED(2, "--seed must be between 0 and 18446744073709551615", false, m,
                     "--seed", "18446744073709551616");
    GENERATE_REFUSED(2, "--seed must be between 0 and 18446744073709551615", false, m, "--seed",
                     "-2");
    GENERATE_REFUSED(2, "--threads expects an integer", false, m, "--threads", "1e3");
    GENERATE_REFUSED(2, "--batch-size must be between 1 and 64", true, m, "--batch-size", "65");
    GENERATE_REFUSED(2, "--cfg-scale must be between 0 and 100", false, m, "--cfg-scale", "1e999");
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
    GENERATE_REFUSED(2, "--clip-skip: clip skip must be within 1..3", false, demo,
                     "--steps", "1", "--clip-skip", "5");
    GENERATE_REFUSED(2, "--mask", false, inp, "--steps", "1", "--width", "64", "--height", "64",
                     "--init-image", init, "--strength", "0.5");
    /* before loading */
    GENERATE_REFUSED(1, "--taesd /nonexistent/taesd", true, demo, "--taesd", "/nonexistent/taesd");
    GENERATE_REFUSED(2, "--strength needs --init-image", true, demo, "--strength", "0.5");
    GENERATE_REFUSED(2, "--strength must be in (0, 1], got 0", false, demo,
                     "--init-image", init, "--strength", "0");
    /* the hires fix and the fill modes (issue 58) */
    GENERATE_REFUSED(2, "--hires-steps, --hires-strength and --hires-upscaler need --hires-scale",
                     true, demo, "--hires-steps", "4");
    GENERATE_REFUSED(2, "--hires-scale is a second pass after txt2img", true, demo,
                     "--hires-scale", "2", "--init-image", init);
    GENERATE_REFUSED(2, "--inpainting-fill needs --mask", true, demo, "--inpainting-fill", "2");
    GENERATE_REFUSED(2, "--hires-scale: the hires fix upscales 128x128 to 166x166", false, demo,
                     "--hires-scale", "1.3", "--hires-upscaler", "Lanczos");
    GENERATE_REFUSED(2, "--hires-upscaler: unknown hires upscaler \"ESRGAN_4x\"", false, demo,
                     "--hires-scale", "2", "--hires-upscaler", "ESRGAN_4x");
    GENERATE_REFUSED(2, "--strength must be in (0, 1], got 1.5", false, demo,
                     "--init-image", init, "--strength", "1.5");
    GENERATE_REFUSED(2, "--negative-prompt", false, demo, "--negative-prompt", "bad \xff");
    GENERATE_REFUSED(1, "--init-image /nonexistent/i.png", true, demo,
                     "--init-image", "/nonexistent/i.png");
    GENERATE_REFUSED(1, "--mask /nonexistent/m.png", true, demo,
                     "--init-image", init, "--mask", "/nonexistent/m.png");
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", junk);
    EXPECT(&r, 1, "--init-image", "not a PNG or JPEG");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    GENERATE_REFUSED(2, "--resize-mode", false, demo,
                     "--init-image", init, "--resize-mode", "stretch");
    GENERATE_REFUSED(2, "--resize-mode needs --init-image", false, demo,
                     "--resize-mode", "crop-and-resize");
    GENERATE_REFUSED(2, "--device", false, demo, "--device", "gpu");
    GENERATE_REFUSED(2, "--precision", false, demo, "--precision", "fp8");
    GENERATE_REFUSED(1, "precision bf16 is the CPU's fast mode", false, demo,
                     "--steps", "1", "--precision", "bf16", "--device", "cuda");
    /* a CPU (or a TESSERA_CPU_ISA cap) without AVX512_BF16 refuses the mode */
    setenv("TESSERA_CPU_ISA", "avx2", 1);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--steps", "1", "--precision", "bf16");
    unsetenv("TESSERA_CPU_ISA");
    EXPECT(&r, 1, "needs a CPU with AVX512_BF16");
    run_free(&r);
    GENERATE_REFUSED(2, "--prediction", false, demo, "--prediction", "x0");
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
    GENERATE_REFUSED(2, "--output must end in .png, .jpg or .jpeg", true, demo,
                     "--output", tmp_path("x.webp", p));
    GENERATE_REFUSED(2, "--output must end in", false, demo, "--output", tmp_path("noext", p));
    GENERATE_REFUSED(2, "--output", false, demo, "--output", g_tmp);
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
