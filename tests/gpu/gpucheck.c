/*
 * tests/gpu/gpucheck.c - two small helpers for tests/gpu/run.sh, built with
 * the project's own PNG reader and RNG so the GPU machine needs no Python
 * imaging package:
 *
 *   gpucheck psnr A.png B.png        prints "psnr <dB> maxdiff <0..255>"
 *                                    (PSNR over all RGB bytes; "inf" when equal)
 *   gpucheck rng SEED N GRID OUT     writes N float32 of torch.randn(N,
 *                                    generator=torch.Generator("cuda")
 *                                    .manual_seed(SEED)) as tessera's --rng cuda
 *                                    emulates it (grid cap GRID blocks, 0 = none)
 *
 * Exit status: 0 ok, 1 failure (message on stderr), 2 usage.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "scheduler/rng.h"
#include "tessera.h"

static int cmd_psnr(const char *a, const char *b)
{
    tsr_image x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    if (tsr_image_read(a, 3, &x) < 0 || tsr_image_read(b, 3, &y) < 0) {
        fprintf(stderr, "gpucheck psnr: %s\n", tsr_last_error());
        tsr_image_free(&x);
        tsr_image_free(&y);
        return 1;
    }
    if (x.width != y.width || x.height != y.height) {
        fprintf(stderr, "gpucheck psnr: sizes differ: %ux%u vs %ux%u\n", x.width, x.height,
                y.width, y.height);
        tsr_image_free(&x);
        tsr_image_free(&y);
        return 1;
    }
    const size_t n = (size_t)x.width * x.height * 3;
    double se = 0;
    int mx = 0;
    for (size_t i = 0; i < n; i++) {
        int d = (int)x.data[i] - (int)y.data[i];
        se += (double)d * d;
        if (abs(d) > mx)
            mx = abs(d);
    }
    if (se == 0)
        printf("psnr inf maxdiff 0\n");
    else
        printf("psnr %.2f maxdiff %d\n", 10.0 * log10(255.0 * 255.0 / (se / (double)n)), mx);
    tsr_image_free(&x);
    tsr_image_free(&y);
    return 0;
}

static int cmd_rng(const char *seed, const char *count, const char *grid, const char *out)
{
    const unsigned long long s = strtoull(seed, NULL, 10);
    const size_t n = (size_t)strtoull(count, NULL, 10);
    float *v = malloc((n ? n : 1) * sizeof(float));
    tsr_rng r;
    tsr_rng_init(&r, TSR_RNG_CUDA, s);
    tsr_rng_set_cuda_grid_limit(&r, (uint32_t)strtoul(grid, NULL, 10));
    FILE *f = NULL;
    int rc = 1;
    if (!v || tsr_rng_randn(&r, v, n) < 0)
        fprintf(stderr, "gpucheck rng: %s\n", tsr_last_error());
    else if (!(f = fopen(out, "wb")) || fwrite(v, sizeof(float), n, f) != n)
        fprintf(stderr, "gpucheck rng: cannot write %s\n", out);
    else
        rc = 0;
    if (f && fclose(f) != 0)
        rc = 1;
    free(v);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "psnr") == 0)
        return cmd_psnr(argv[2], argv[3]);
    if (argc == 6 && strcmp(argv[1], "rng") == 0)
        return cmd_rng(argv[2], argv[3], argv[4], argv[5]);
    fprintf(stderr, "usage: gpucheck psnr A.png B.png | gpucheck rng SEED N GRID OUT.f32\n");
    return 2;
}
