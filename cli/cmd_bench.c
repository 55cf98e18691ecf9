/*
 * cli/cmd_bench.c - `tessera bench ops`: time the heavy ops at the
 * shapes a Stable Diffusion 1.5 UNet runs at 512x512.
 *
 * Why these shapes: nearly all of a denoising step is the 3x3 convs of the
 * ResNet blocks at 64x64x320 .. 8x8x1280, the 1x1 projections, the GEMMs of
 * attention and feed-forward (4096 tokens x 320 at the top level) and
 * self-attention over 4096 tokens, all at batch 2 (classifier-free
 * guidance), plus the VAE decoder's single-head attention over the same
 * 4096 positions (one image).  Benchmarking exactly those, with a warm-up call (scratch
 * growth, page faults) and the median of --iters timed calls, gives numbers
 * that predict a real step; tools/bench/bench_ops.py runs the same list
 * through PyTorch for comparison (keep the two lists in sync).
 *
 * GFLOP/s counts 2 flops per multiply-add: conv 2*N*Ho*Wo*Co*KH*KW*Ci,
 * linear 2*M*N*K, attention 4*B*H*Lq*Lk*D (QK^T and PV).
 *
 * --device picks the backend as everywhere else (cpu, cuda, the cpu-f16
 * test variant): buffers are allocated on it and filled through upload in
 * the dtypes it asks for, and every timed call ends with a sync, so a GPU's
 * asynchronous ops are timed to completion.  An op the device refuses is
 * reported as such and skipped.
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
#include "commands.h"
#include "core/error.h"

/* cli/bench_peak.c: the measured ceiling of a CPU backend's GEMMs (false: a GPU) */
bool tsr_bench_backend_peak(const tsr_backend *be, int threads, double *gflops,
                            const char **kind_name);

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
    /* the VAE decoder's mid-block attention at 512x512: one head of 512, one image */
    {"attention self 4096x4096 1x512 (VAE mid)", B_ATTN, 1, 4096, 4096, 1, 512, 0, 0, 0},
};



/* The tensors of one benchmark, in backend memory (data owned; freed by
 * bufs_free): x, weight, bias, y for conv/linear; q, k, v, y for attention. */
typedef struct bench_bufs {
    tsr_backend *be;
    tsr_tensor t[4];
} bench_bufs;

static void bufs_free(bench_bufs *bb)
{
    for (int i = 0; i < 4; i++)
        if (bb->t[i].data)
            tsr_backend_free(bb->be, bb->t[i].data);
    memset(bb->t, 0, sizeof bb->t);
}

/* Shapes of the four tensors, and which hold parameters. */
static void shapes_of(const bench_shape *s, tsr_tensor t[4], bool param[4])
{
    const tsr_dtype f = TSR_F32;
    memset(param, 0, 4 * sizeof(bool));
    if (s->kind == B_CONV) {
        int n = s->a, h = s->b, w = s->c, ci = s->d, co = s->e, k = s->f, st = s->g, pad = s->h;
        int ho = (h + 2 * pad - k) / st + 1, wo = (w + 2 * pad - k) / st + 1;
        t[0] = tsr_tensor_4d(f, n, h, w, ci, NULL);
        t[1] = tsr_tensor_4d(f, co, k, k, ci, NULL);
        t[2] = tsr_tensor_1d(f, co, NULL);
        t[3] = tsr_tensor_4d(f, n, ho, wo, co, NULL);
        param[1] = param[2] = true;
    } else if (s->kind == B_LINEAR) {
        t[0] = tsr_tensor_2d(f, s->a, s->b, NULL);
        t[1] = tsr_tensor_2d(f, s->c, s->b, NULL);
        t[2] = tsr_tensor_1d(f, s->c, NULL);
        t[3] = tsr_tensor_2d(f, s->a, s->c, NULL);
        param[1] = param[2] = true;
    } else {
        int b = s->a, lq = s->b, lk = s->c, hd = s->d * s->e;
        t[0] = tsr_tensor_3d(f, b, lq, hd, NULL);
        t[1] = tsr_tensor_3d(f, b, lk, hd, NULL);
        t[2] = tsr_tensor_3d(f, b, lk, hd, NULL);
        t[3] = tsr_tensor_3d(f, b, lq, hd, NULL);
    }
}

/* Random values in [-0.5, 0.5), uploaded in each tensor's dtype. */
static int alloc_bufs(tsr_backend *be, const bench_shape *s, bench_bufs *bb)
{
    bool param[4];
    memset(bb, 0, sizeof *bb);
    bb->be = be;
    shapes_of(s, bb->t, param);
    uint64_t state = 42;
    for (int i = 0; i < 4; i++) {
        tsr_tensor *t = &bb->t[i];
        t->dtype = param[i] ? tsr_backend_weight_dtype(be) : tsr_backend_act_dtype(be);
        t->backend = be;
        const size_t n = (size_t)tsr_tensor_numel(t), bytes = tsr_tensor_nbytes(t);
        float *host = malloc(n * sizeof(float));
        t->data = tsr_backend_alloc(be, bytes);
        if (!host || !t->data) {
            free(host);
            return tsr_errorf(TSR_ERR_NOMEM, "bench: cannot allocate %zu bytes", bytes);
        }
        for (size_t j = 0; j < n; j++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            host[j] = (float)((double)(state >> 40) / 16777216.0 - 0.5);
        }
        tsr_convert_from_f32(host, t->dtype, host, n); /* in place: never wider */
        int rc = tsr_backend_upload(be, t->data, host, bytes);
        if (rc == TSR_OK)
            rc = tsr_backend_sync(be);
        free(host);
        TSR_TRY(rc);
    }
    return TSR_OK;
}

/* Run one shape once, to completion. */
static int run_once(tsr_backend *be, const bench_shape *s, bench_bufs *bb, double *flops)
{
    tsr_tensor *t = bb->t;
    int rc;
    if (s->kind == B_CONV) {
        tsr_conv2d_params p = tsr_conv2d_params_make(s->g, s->h);
        *flops = 2.0 * (double)tsr_tensor_numel(&t[3]) * s->f * s->f * s->d;
        rc = tsr_conv2d(be, &t[0], &t[1], &t[2], &p, &t[3]);
    } else if (s->kind == B_LINEAR) {
        *flops = 2.0 * s->a * (double)s->b * s->c;
        rc = tsr_linear(be, &t[0], &t[1], &t[2], &t[3]);
    } else {
        tsr_attention_params p = {.heads = s->d};
        *flops = 4.0 * s->a * s->d * (double)s->b * s->c * s->e;
        rc = tsr_attention(be, &t[0], &t[1], &t[2], &p, &t[3]);
    }
    return rc < 0 ? rc : tsr_backend_sync(be);
}

static const char *kind_name(bench_kind k)
{
    return k == B_CONV ? "conv2d" : k == B_LINEAR ? "linear" : "attention";
}

static int bench_ops(int argc, char **argv)
{
    int64_t threads = 0, iters = 5;
    bool json = false;
    const char *filter = NULL, *device = "cpu";
    const tsr_arg_spec specs[] = {
        {"device", TSR_ARG_STRING, &device, "DEV",
         "backend: cpu (default), cuda, cuda:N, auto, or the cpu-f16 / cpu-bf16 test variants", 0,
         0, 0, 0},
        {"threads", TSR_ARG_INT, &threads, "N", "threads (0 = all cores)", 0, 1024, 0, 0},
        {"iters", TSR_ARG_INT, &iters, "N", "timed calls per shape; the median is reported (default 5)",
         1, 1000, 0, 0},
        {"filter", TSR_ARG_STRING, &filter, "TEXT", "only shapes whose name contains TEXT", 0, 0, 0, 0},
        {"json", TSR_ARG_FLAG, &json, NULL, "print JSON instead of a table", 0, 0, 0, 0},
    };
    const tsr_cli_command cmd = {
        .name = "bench ops",
        .synopsis = "bench ops [--device DEV] [--threads N] [--iters N] [--filter TEXT] [--json]",
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
    rc = tsr_backend_open(device, (int)threads, &be);
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
    const int nthreads = tsr_backend_threads(be);
    const char *dt = tsr_dtype_name(tsr_backend_act_dtype(be));
    /* the ceiling the ops run under (bench_peak.c), measured on as many threads */
    double peak = 0;
    const char *peak_kind = NULL;
    const bool have_peak = tsr_bench_backend_peak(be, nthreads, &peak, &peak_kind);
    if (json) {
        printf("{\"backend\": \"%s\", \"threads\": %d, \"dtype\": \"%s\", \"iters\": %d, ",
               be->name, nthreads, dt, (int)iters);
        if (have_peak)
            printf("\"peak_gflops\": %.2f, \"peak_kind\": \"%s\", ", peak, peak_kind);
        printf("\"results\": [");
    } else {
        printf("backend: %s (%s activations), median of %d calls\n", be->name, dt, (int)iters);
        if (have_peak)
            printf("peak: %.1f GFLOP/s measured (%s, %d threads: tessera bench peak)\n", peak,
                   peak_kind, nthreads);
        printf("\n%-40s %10s %10s %7s\n", "op", "ms", "GFLOP/s", "% peak");
    }
    int status = TSR_EXIT_OK, printed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const bench_shape *s = &shapes[i];
        if (filter && !strstr(s->name, filter))
            continue;
        bench_bufs bb;
        double flops = 0;
        rc = alloc_bufs(be, s, &bb);
        if (rc == 0)
            rc = run_once(be, s, &bb, &flops); /* warm-up: scratch growth, page faults */
        if (rc == TSR_ERR_UNSUPPORTED) { /* the device has no kernel for it: say so, go on */
            if (json)
                printf("%s\n  {\"name\": \"%s\", \"op\": \"%s\", \"unsupported\": \"%s\"}",
                       printed ? "," : "", s->name, kind_name(s->kind), tsr_last_error());
            else
                printf("%-40s unsupported: %s\n", s->name, tsr_last_error());
            printed++;
            bufs_free(&bb);
            rc = 0;
            continue;
        }
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
        else if (have_peak)
            printf("%-40s %10.3f %10.1f %6.0f%%\n", s->name, med * 1e3, gflops,
                   100.0 * gflops / peak);
        else
            printf("%-40s %10.3f %10.1f %7s\n", s->name, med * 1e3, gflops, "-");
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
int tsr_bench_peak(int argc, char **argv); /* cli/bench_peak.c */
int tsr_bench_unet(int argc, char **argv); /* cli/bench_unet.c */

int tsr_cmd_bench(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "ops") == 0)
        return bench_ops(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "vae") == 0)
        return tsr_bench_vae(argc - 1, argv + 1); /* bench_vae.c */
    if (argc >= 2 && strcmp(argv[1], "unet") == 0)
        return tsr_bench_unet(argc - 1, argv + 1); /* bench_unet.c */
    if (argc >= 2 && strcmp(argv[1], "peak") == 0)
        return tsr_bench_peak(argc - 1, argv + 1); /* bench_peak.c */
    FILE *out = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
                    ? stdout
                    : stderr;
    fprintf(out, "usage: tessera bench ops [--device DEV] [--threads N] [--iters N] [--filter TEXT] "
                 "[--json]\n\n"
                 "  ops   time conv2d, linear and attention at SD 1.5 UNet shapes\n"
                 "  vae   time a VAE decode of a model (--model DIR) and its peak memory\n"
                 "  unet  time one UNet call of a model (--model DIR) and its peak memory\n"
                 "  peak  measure the CPU's multiply-add ceiling (what ops are reported against)\n\n"
                 "Run 'tessera bench ops --help' for its options.\n\n%s\n",
            TSR_ARGS_EXIT_HELP);
    if (out == stdout)
        return TSR_EXIT_OK;
    if (argc >= 2)
        fprintf(stderr, "tessera bench: unknown benchmark '%s'\n", argv[1]);
    return TSR_EXIT_USAGE;
}
