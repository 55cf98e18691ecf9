/*
 * cli/cmd_bench.c - `tessera bench ops`: time the heavy ops at the
 * shapes a Stable Diffusion 1.5 UNet runs at 512x512.
 *
 * Why these shapes: nearly all of a denoising step is the 3x3 convs of the
 * ResNet blocks at 64x64x320 .. 8x8x1280, the 1x1 projections, the GEMMs of
 * attention and feed-forward (4096 tokens x 320 at the top level) and
 * self-attention over 4096 tokens, all at batch 2 (classifier-free
 * guidance).  Benchmarking exactly those, with a warm-up call (scratch
 * growth, page faults) and the median of --iters timed calls, gives numbers
 * that predict a real step; tools/bench/bench_ops.py runs the same list
 * through PyTorch for comparison (keep the two lists in sync).
 *
 * GFLOP/s counts 2 flops per multiply-add: conv 2*N*Ho*Wo*Co*KH*KW*Ci,
 * linear 2*M*N*K, attention 4*B*H*Lq*Lk*D (QK^T and PV).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "cli_util.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "commands.h"
#include "core/error.h"

typedef enum bench_kind { B_CONV, B_LINEAR, B_ATTN } bench_kind;

typedef struct bench_shape {
    const char *name;
    bench_kind kind;
    /* conv: n h w ci co k stride pad | linear: m k n | attn: b lq lk heads d */
    int a, b, c, d, e, f, g, h;
} bench_shape;

/* SD 1.5 UNet at 512x512 (latent 64x64), batch 2.  Mirrored in bench_ops.py. */
static const bench_shape shapes[] = {
    {"conv_in 3x3 64x64 4->320", B_CONV, 2, 64, 64, 4, 320, 3, 1, 1},
    {"conv 3x3 64x64 320->320", B_CONV, 2, 64, 64, 320, 320, 3, 1, 1},
    {"conv 3x3 s2 64x64 320->320", B_CONV, 2, 64, 64, 320, 320, 3, 2, 1},
    {"conv 3x3 32x32 640->640", B_CONV, 2, 32, 32, 640, 640, 3, 1, 1},
    {"conv 3x3 16x16 1280->1280", B_CONV, 2, 16, 16, 1280, 1280, 3, 1, 1},
    {"conv 3x3 8x8 1280->1280", B_CONV, 2, 8, 8, 1280, 1280, 3, 1, 1},
    {"conv 1x1 64x64 320->320 (proj)", B_CONV, 2, 64, 64, 320, 320, 1, 1, 0},
    {"conv 1x1 64x64 640->320 (shortcut)", B_CONV, 2, 64, 64, 640, 320, 1, 1, 0},
    {"linear 8192x320 -> 320 (q/k/v/out)", B_LINEAR, 8192, 320, 320, 0, 0, 0, 0, 0},
    {"linear 8192x320 -> 2560 (geglu proj)", B_LINEAR, 8192, 320, 2560, 0, 0, 0, 0, 0},
    {"linear 8192x1280 -> 320 (ff out)", B_LINEAR, 8192, 1280, 320, 0, 0, 0, 0, 0},
    {"linear 154x768 -> 320 (cross k/v)", B_LINEAR, 154, 768, 320, 0, 0, 0, 0, 0},
    {"linear 2048x640 -> 640 (32x32 attn)", B_LINEAR, 2048, 640, 640, 0, 0, 0, 0, 0},
    {"linear 512x1280 -> 1280 (16x16 attn)", B_LINEAR, 512, 1280, 1280, 0, 0, 0, 0, 0},
    {"attention self 4096x4096 8x40", B_ATTN, 2, 4096, 4096, 8, 40, 0, 0, 0},
    {"attention cross 4096x77 8x40", B_ATTN, 2, 4096, 77, 8, 40, 0, 0, 0},
    {"attention self 1024x1024 8x80", B_ATTN, 2, 1024, 1024, 8, 80, 0, 0, 0},
    {"attention self 256x256 8x160", B_ATTN, 2, 256, 256, 8, 160, 0, 0, 0},
};



/* Owned buffers of one benchmark; freed by bufs_free. */
typedef struct bench_bufs {
    float *p[5];
} bench_bufs;

static float *rand_floats(size_t n, uint64_t *state)
{
    float *p = malloc(n * sizeof(float));
    if (!p)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(*state >> 40) / 16777216.0 - 0.5);
    }
    return p;
}

static void bufs_free(bench_bufs *bb)
{
    for (int i = 0; i < 5; i++)
        free(bb->p[i]);
}

/* Run one shape once. */
static int run_once(tsr_backend *be, const bench_shape *s, bench_bufs *bb, double *flops)
{
    if (s->kind == B_CONV) {
        int n = s->a, h = s->b, w = s->c, ci = s->d, co = s->e, k = s->f, st = s->g, pad = s->h;
        int ho = (h + 2 * pad - k) / st + 1, wo = (w + 2 * pad - k) / st + 1;
        tsr_tensor x = tsr_tensor_4d(TSR_F32, n, h, w, ci, bb->p[0]);
        tsr_tensor wt = tsr_tensor_4d(TSR_F32, co, k, k, ci, bb->p[1]);
        tsr_tensor bias = tsr_tensor_1d(TSR_F32, co, bb->p[2]);
        tsr_tensor y = tsr_tensor_4d(TSR_F32, n, ho, wo, co, bb->p[3]);
        tsr_conv2d_params p = tsr_conv2d_params_make(st, pad);
        *flops = 2.0 * n * ho * wo * co * (double)k * k * ci;
        return tsr_conv2d(be, &x, &wt, &bias, &p, &y);
    }
    if (s->kind == B_LINEAR) {
        tsr_tensor x = tsr_tensor_2d(TSR_F32, s->a, s->b, bb->p[0]);
        tsr_tensor wt = tsr_tensor_2d(TSR_F32, s->c, s->b, bb->p[1]);
        tsr_tensor bias = tsr_tensor_1d(TSR_F32, s->c, bb->p[2]);
        tsr_tensor y = tsr_tensor_2d(TSR_F32, s->a, s->c, bb->p[3]);
        *flops = 2.0 * s->a * (double)s->b * s->c;
        return tsr_linear(be, &x, &wt, &bias, &y);
    }
    int b = s->a, lq = s->b, lk = s->c, heads = s->d, d = s->e;
    tsr_tensor q = tsr_tensor_3d(TSR_F32, b, lq, heads * d, bb->p[0]);
    tsr_tensor k = tsr_tensor_3d(TSR_F32, b, lk, heads * d, bb->p[1]);
    tsr_tensor v = tsr_tensor_3d(TSR_F32, b, lk, heads * d, bb->p[2]);
    tsr_tensor y = tsr_tensor_3d(TSR_F32, b, lq, heads * d, bb->p[3]);
    tsr_attention_params p = {.heads = heads};
    *flops = 4.0 * b * heads * (double)lq * lk * d;
    return tsr_attention(be, &q, &k, &v, &p, &y);
}

static int alloc_bufs(const bench_shape *s, bench_bufs *bb)
{
    size_t n[4];
    if (s->kind == B_CONV) {
        n[0] = (size_t)s->a * s->b * s->c * s->d;
        n[1] = (size_t)s->e * s->f * s->f * s->d;
        n[2] = (size_t)s->e;
        n[3] = (size_t)s->a * s->b * s->c * s->e; /* >= output for stride >= 1 */
    } else if (s->kind == B_LINEAR) {
        n[0] = (size_t)s->a * s->b;
        n[1] = (size_t)s->c * s->b;
        n[2] = (size_t)s->c;
        n[3] = (size_t)s->a * s->c;
    } else {
        n[0] = (size_t)s->a * s->b * s->d * s->e;
        n[1] = n[2] = (size_t)s->a * s->c * s->d * s->e;
        n[3] = n[0];
    }
    uint64_t state = 42;
    memset(bb, 0, sizeof *bb);
    for (int i = 0; i < 4; i++)
        if (!(bb->p[i] = rand_floats(n[i], &state)))
            return tsr_errorf(TSR_ERR_NOMEM, "bench: cannot allocate %zu floats", n[i]);
    return TSR_OK;
}

static const char *kind_name(bench_kind k)
{
    return k == B_CONV ? "conv2d" : k == B_LINEAR ? "linear" : "attention";
}

static int bench_ops(int argc, char **argv)
{
    int64_t threads = 0, iters = 5;
    bool json = false;
    const char *filter = NULL;
    const tsr_arg_spec specs[] = {
        {"threads", TSR_ARG_INT, &threads, "N", "threads (0 = all cores)", 0, 1024, 0, 0},
        {"iters", TSR_ARG_INT, &iters, "N", "timed calls per shape; the median is reported (default 5)",
         1, 1000, 0, 0},
        {"filter", TSR_ARG_STRING, &filter, "TEXT", "only shapes whose name contains TEXT", 0, 0, 0, 0},
        {"json", TSR_ARG_FLAG, &json, NULL, "print JSON instead of a table", 0, 0, 0, 0},
    };
    const tsr_cli_command cmd = {
        .name = "bench ops",
        .synopsis = "bench ops [--threads N] [--iters N] [--filter TEXT] [--json]",
        .summary = "time conv2d, linear and attention at SD 1.5 UNet shapes (512x512, batch 2)",
        .description = "Reports the median time of --iters calls after one warm-up call, and\n"
                       "GFLOP/s (2 flops per multiply-add).  tools/bench/bench_ops.py compares\n"
                       "the same shapes with PyTorch.",
        .specs = specs,
        .n_specs = (int)(sizeof specs / sizeof specs[0]),
    };
    int rc = tsr_args_parse(&cmd, argc, argv, NULL, 0, NULL);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc < 0)
        return TSR_EXIT_USAGE;

    tsr_backend *be = NULL;
    rc = tsr_backend_cpu_create((int)threads, &be);
    if (rc < 0) {
        tsr_cli_report("bench ops", rc);
        return TSR_EXIT_FAILURE;
    }
    double *times = calloc((size_t)iters, sizeof(double));
    if (!times) {
        tsr_backend_destroy(be);
        fprintf(stderr, "tessera bench ops: out of memory\n");
        return TSR_EXIT_FAILURE;
    }
    int nthreads = 0;
    sscanf(be->name, "cpu (%d", &nthreads);
    if (json)
        printf("{\"backend\": \"%s\", \"threads\": %d, \"iters\": %d, \"results\": [", be->name,
               nthreads, (int)iters);
    else
        printf("backend: %s, median of %d calls\n\n%-40s %10s %10s\n", be->name, (int)iters, "op",
               "ms", "GFLOP/s");
    int status = TSR_EXIT_OK, printed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const bench_shape *s = &shapes[i];
        if (filter && !strstr(s->name, filter))
            continue;
        bench_bufs bb;
        double flops = 0;
        rc = alloc_bufs(s, &bb);
        if (rc == 0)
            rc = run_once(be, s, &bb, &flops); /* warm-up: scratch growth, page faults */
        for (int64_t it = 0; rc == 0 && it < iters; it++) {
            double t0 = tsr_cli_now();
            rc = run_once(be, s, &bb, &flops);
            times[it] = tsr_cli_now() - t0;
        }
        bufs_free(&bb);
        if (rc < 0) {
            tsr_cli_report("bench ops", rc);
            status = TSR_EXIT_FAILURE;
            break;
        }
        qsort(times, (size_t)iters, sizeof(double), tsr_cli_cmp_double);
        double med = iters % 2 ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
        double gflops = flops / med * 1e-9;
        if (json)
            printf("%s\n  {\"name\": \"%s\", \"op\": \"%s\", \"ms\": %.4f, \"min_ms\": %.4f, "
                   "\"gflops\": %.2f, \"flops\": %.0f}",
                   printed ? "," : "", s->name, kind_name(s->kind), med * 1e3, times[0] * 1e3,
                   gflops, flops);
        else
            printf("%-40s %10.3f %10.1f\n", s->name, med * 1e3, gflops);
        printed++;
        fflush(stdout);
    }
    if (json)
        printf("\n]}\n");
    free(times);
    tsr_backend_destroy(be);
    return status;
}

int tsr_bench_vae(int argc, char **argv); /* cli/bench_vae.c */
int tsr_bench_unet(int argc, char **argv); /* cli/bench_unet.c */

int tsr_cmd_bench(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "ops") == 0)
        return bench_ops(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "vae") == 0)
        return tsr_bench_vae(argc - 1, argv + 1); /* bench_vae.c */
    if (argc >= 2 && strcmp(argv[1], "unet") == 0)
        return tsr_bench_unet(argc - 1, argv + 1); /* bench_unet.c */
    FILE *out = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
                    ? stdout
                    : stderr;
    fprintf(out, "usage: tessera bench ops [--threads N] [--iters N] [--filter TEXT] [--json]\n\n"
                 "  ops   time conv2d, linear and attention at SD 1.5 UNet shapes\n"
                 "  vae   time a VAE decode of a model (--model DIR) and its peak memory\n"
                 "  unet  time one UNet call of a model (--model DIR) and its peak memory\n\n"
                 "Run 'tessera bench ops --help' for its options.\n\n%s\n",
            TSR_ARGS_EXIT_HELP);
    if (out == stdout)
        return TSR_EXIT_OK;
    if (argc >= 2)
        fprintf(stderr, "tessera bench: unknown benchmark '%s'\n", argv[1]);
    return TSR_EXIT_USAGE;
}
