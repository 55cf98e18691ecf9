/*
 * tests/cpu/test_cpu_isa.c - the same image from every vector level this
 * CPU has.  `tessera generate` (the demo model, a fixed prompt and seed)
 * runs once per level, chosen with TESSERA_CPU_ISA in the child's
 * environment; the PNGs must agree within 1/255 per value (the GEMM is bit
 * for bit the same on every level, gemm.h; what else is vectorised may
 * round differently in the last bit).  The AVX-512 run needs a CPU with
 * AVX-512 and is skipped (said on stderr) where there is none, so on an
 * AVX2 machine the test compares the portable C kernels with AVX2.
 * bf16_psnr bounds the opt-in bf16 mode's distance from f32 where the CPU
 * has AVX512_BF16 (skipped elsewhere).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu_isa.h"
#include "image/image.h"
#include "test.h"

static int generate_ex(const char *level, const char *precision, const char *out,
                       const char *log)
{
    const char *bin = getenv("TSR_BIN"), *src = getenv("TSR_SOURCE_DIR");
    if (!bin || !src) {
        fprintf(stderr, "TSR_BIN / TSR_SOURCE_DIR not set (run through ctest)\n");
        return -1;
    }
    char model[PATH_MAX];
    snprintf(model, sizeof model, "%s/models/demo", src);
    char *argv[] = {(char *)bin, "generate",  "--model",
                    model,       "--prompt",  "a red star in the upper left on a blue background",
                    "--seed",    "42",        "--steps",
                    "12",        "--threads", "2",
                    "--output",  (char *)out, "--quiet",
                    "--precision", (char *)precision, NULL};
    setenv("TESSERA_CPU_ISA", level, 1);
    tsr_test_child c;
    int rc = tsr_test_spawn(argv, log, NULL, 600, &c);
    unsetenv("TESSERA_CPU_ISA");
    if (rc != 0 || !c.exited || c.status != 0) {
        fprintf(stderr, "generate at %s failed (see %s)\n", level, log);
        return -1;
    }
    fprintf(stderr, "%s %s: %.2f s\n", level, precision, c.seconds);
    return 0;
}

static int generate(const char *level, const char *out, const char *log)
{
    return generate_ex(level, "f32", out, log);
}

static int case_same_image(void)
{
    char dir[] = "/tmp/tsr-isa-XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    const tsr_cpu_isa_level have = tsr_cpu_isa_detected();
    const char *levels[] = {"scalar", "avx2", "avx512"};
    tsr_image img[3];
    memset(img, 0, sizeof img);
    int ran = 0;
    for (int l = 0; l < 3; l++) {
        if ((tsr_cpu_isa_level)l > have) {
            fprintf(stderr, "%s: skipped, this CPU has only %s\n", levels[l],
                    tsr_cpu_isa_name(have));
            continue;
        }
        char out[PATH_MAX], log[PATH_MAX];
        snprintf(out, sizeof out, "%s/%s.png", dir, levels[l]);
        snprintf(log, sizeof log, "%s/%s.log", dir, levels[l]);
        ASSERT_TRUE(generate(levels[l], out, log) == 0);
        ASSERT_OK(tsr_png_read(out, 3, &img[l], NULL));
        remove(out), remove(log);
        ran++;
    }
    rmdir(dir);
    if (ran < 2) {
        fprintf(stderr, "only one vector level here: nothing to compare\n");
        return TSR_TEST_SKIP;
    }
    /* every level against the best one the CPU has */
    const int ref = have > TSR_CPU_ISA_AVX512 ? TSR_CPU_ISA_AVX512 : (int)have;
    for (int l = 0; l < 3; l++) {
        if (l == ref || !img[l].data)
            continue;
        ASSERT_EQ(img[l].width, img[ref].width);
        ASSERT_EQ(img[l].height, img[ref].height);
        size_t n = (size_t)img[l].width * img[l].height * 3, differ = 0;
        int worst = 0;
        for (size_t i = 0; i < n; i++) {
            int d = abs((int)img[l].data[i] - (int)img[ref].data[i]);
            differ += d != 0;
            worst = d > worst ? d : worst;
        }
        fprintf(stderr, "%s vs %s: %zu of %zu values differ, by at most %d/255\n", levels[l],
                levels[ref], differ, n, worst);
        ASSERT_TRUE(worst <= 1);
    }
    for (int l = 0; l < 3; l++)
        tsr_image_free(&img[l]);
    return 0;
}

/* The opt-in bf16 mode (--precision bf16, AVX512_BF16 only) against f32:
 * close (PSNR of the demo image at least 40 dB, no value more than 24/255
 * off), and not the same image, which would mean the mode did not run. */
static int case_bf16_psnr(void)
{
    if (!tsr_cpu_has_bf16_dot()) {
        fprintf(stderr, "no AVX512_BF16 here (level %s): the bf16 mode cannot run\n",
                tsr_cpu_isa_name(tsr_cpu_isa()));
        return TSR_TEST_SKIP;
    }
    char dir[] = "/tmp/tsr-bf16-XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    const char *prec[2] = {"f32", "bf16"};
    tsr_image img[2];
    memset(img, 0, sizeof img);
    for (int i = 0; i < 2; i++) {
        char out[PATH_MAX], log[PATH_MAX];
        snprintf(out, sizeof out, "%s/%s.png", dir, prec[i]);
        snprintf(log, sizeof log, "%s/%s.log", dir, prec[i]);
        ASSERT_TRUE(generate_ex("avx512", prec[i], out, log) == 0);
        ASSERT_OK(tsr_png_read(out, 3, &img[i], NULL));
        remove(out), remove(log);
    }
    rmdir(dir);
    ASSERT_EQ(img[0].width, img[1].width);
    ASSERT_EQ(img[0].height, img[1].height);
    const size_t n = (size_t)img[0].width * img[0].height * 3;
    double se = 0;
    int worst = 0;
    for (size_t i = 0; i < n; i++) {
        const int d = abs((int)img[0].data[i] - (int)img[1].data[i]);
        se += (double)d * d;
        worst = d > worst ? d : worst;
    }
    const double psnr = se > 0 ? 10 * log10(255.0 * 255.0 * (double)n / se) : INFINITY;
    fprintf(stderr, "bf16 vs f32: PSNR %.1f dB, max %d/255\n", psnr, worst);
    ASSERT_TRUE(se > 0);
    ASSERT_TRUE(psnr >= 40.0);
    ASSERT_TRUE(worst <= 24);
    tsr_image_free(&img[0]), tsr_image_free(&img[1]);
    return 0;
}

int main(int argc, char **argv)
{
    static const tsr_test_entry cases[] = {{"same_image", case_same_image},
                                           {"bf16_psnr", case_bf16_psnr}};
    return tsr_test_main(argc, argv, cases, 2);
}
