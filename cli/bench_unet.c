/*
 * cli/bench_unet.c - `tessera bench unet`: time one UNet call of a
 * real-shaped model and measure its memory.
 *
 * Why this way: the numbers that matter for a denoising step are the
 * seconds per UNet call at the batch the service runs (2 rows: CFG) and the
 * memory the process needs for it.  The benchmark loads the model's UNet
 * exactly as the pipeline does (fp16 on disk widened once to f32), closes
 * the model file so its mmapped pages no longer count, runs --warmup calls
 * (the first one plans the workspace), then times --iters calls with rows at
 * different timesteps.  Memory is read from /proc/self/status: VmHWM (peak
 * RSS) over the whole run, which includes loading, and the peak of the calls
 * alone (the high-water mark is reset through /proc/self/clear_refs after
 * loading; where that is refused, the call peak is reported as -1).
 * tools/bench/bench_unet.py runs diffusers at the same shape, thread count
 * and inputs, measured the same way, and prints both side by side.
 *
 * Besides wall time, the median CPU time of the calls (all threads of the
 * process) is reported: on a shared machine it moves far less with the
 * load than wall time does, so it is what comparisons between runs (such as
 * --round-rows against none) should use, at --threads 1 best.
 *
 * --round-rows gives the CPU backend TSR_BACKEND_CAP_ROUND_ROWS (rows
 * padded up to 1, 2, 4, ..., 64 as a graph-replaying GPU backend wants), to
 * measure what that padding costs; the output reports the rows computed.
 * --device cpu-f16 runs the f16 storage test variant.
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
#include "model/model.h"
#include "unet/unet.h"

int tsr_bench_unet(int argc, char **argv);

/* CPU time of the whole process (every thread), seconds. */
static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}






/* Owned buffers of the run. */
typedef struct bench_io {
    float *lat, *t, *ctx, *te, *ids, *out;
} bench_io;

static void io_free(bench_io *io)
{
    free(io->lat);
    free(io->t);
    free(io->ctx);
    free(io->te);
    free(io->ids);
    free(io->out);
}

static int make_inputs(const tsr_unet_desc *d, int64_t batch, int64_t size, bench_io *io,
                       tsr_unet_inputs *in)
{
    const int64_t h = size / 8, L = 77;
    const size_t lat = (size_t)(batch * h * h * d->in_channels);
    const size_t ctx = (size_t)(batch * L * d->cross_attention_dim);
    const size_t out = (size_t)(batch * h * h * d->out_channels);
    const int64_t pooled = d->text_time ? d->projection_class_embeddings_input_dim -
                                              6 * (int64_t)d->addition_time_embed_dim
                                        : 0;
    if (d->text_time && pooled < 1)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "text_time config without 6 time ids");
    memset(io, 0, sizeof *io);
    io->lat = malloc(lat * sizeof(float));
    io->t = malloc((size_t)batch * sizeof(float));
    io->ctx = malloc(ctx * sizeof(float));
    io->out = malloc(out * sizeof(float));
    if (d->text_time) {
        io->te = malloc((size_t)(batch * pooled) * sizeof(float));
        io->ids = malloc((size_t)batch * 6 * sizeof(float));
    }
    if (!io->lat || !io->t || !io->ctx || !io->out || (d->text_time && (!io->te || !io->ids)))
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate the inputs");
    uint64_t s = 0x9E3779B97F4A7C15ull;
    tsr_cli_fill_normal(io->lat, lat, &s);
    tsr_cli_fill_normal(io->ctx, ctx, &s);
    for (int64_t r = 0; r < batch; r++) {
        io->t[r] = (float)(999 - (37 * r) % 1000); /* rows at different steps */
        if (d->text_time) {
            const float ids[6] = {(float)size, (float)size, 0, 0, (float)size, (float)size};
            memcpy(io->ids + r * 6, ids, sizeof ids);
        }
    }
    if (d->text_time)
        tsr_cli_fill_normal(io->te, (size_t)(batch * pooled), &s);
    *in = (tsr_unet_inputs){.batch = (int)batch, .height = (int)h, .width = (int)h,
                            .channels = d->in_channels, .context_len = (int)L,
                            .latents = io->lat, .timesteps = io->t, .context = io->ctx,
                            .text_embeds = io->te, .time_ids = io->ids};
    return TSR_OK;
}

int tsr_bench_unet(int argc, char **argv)
{
    const char *model_path = NULL;
    int64_t size = 256, batch = 2, threads = 0, iters = 3, warmup = 1;
    bool json = false, round_rows = false;
    const char *device = "cpu";
    const tsr_arg_spec specs[] = {
        {"device", TSR_ARG_STRING, &device, "DEV",
         "backend: cpu (default), cuda, cuda:N, auto, or the cpu-f16 / cpu-bf16 test variants", 0,
         0, 0, 0},
        {"round-rows", TSR_ARG_FLAG, &round_rows, NULL,
         "CPU: pad rows up to 1, 2, 4, ..., 64 as a graph-replaying backend does (to measure it)",
         0, 0, 0, 0},
        {"model", TSR_ARG_STRING, &model_path, "DIR", "diffusers folder or single file (required)",
         0, 0, 0, 0},
        {"size", TSR_ARG_INT, &size, "PX", "image size in pixels, square (default 256)", 64, 8192,
         0, 0},
        {"batch", TSR_ARG_INT, &batch, "N", "rows per call (default 2: one image with CFG)", 1,
         TSR_UNET_MAX_BATCH, 0, 0},
        {"threads", TSR_ARG_INT, &threads, "N", "threads (0 = all cores)", 0, 1024, 0, 0},
        {"iters", TSR_ARG_INT, &iters, "N", "timed calls; the median is reported (default 3)", 1,
         1000, 0, 0},
        {"warmup", TSR_ARG_INT, &warmup, "N", "untimed calls first (default 1)", 0, 100, 0, 0},
        {"json", TSR_ARG_FLAG, &json, NULL, "print JSON instead of text", 0, 0, 0, 0},
    };
    const tsr_cli_command cmd = {
        .name = "bench unet",
        .synopsis = "bench unet --model DIR [--device DEV] [--size PX] [--batch N] [--threads N] "
                    "[--round-rows] [--iters N] "
                    "[--json]",
        .summary = "time one UNet call of a model and measure its peak memory",
        .description = "Loads the UNet (f32 on the CPU), runs --warmup calls, then reports the\n"
                       "median of --iters calls.  Memory: peak RSS of the process (VmHWM, with\n"
                       "loading) and of the calls alone.  tools/bench/bench_unet.py compares\n"
                       "with diffusers at the same shape and thread count.",
        .specs = specs,
        .n_specs = (int)(sizeof specs / sizeof specs[0]),
    };
    int rc = tsr_args_parse(&cmd, argc, argv, NULL, 0, NULL);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc < 0)
        return TSR_EXIT_USAGE;
    if (!model_path) {
        fprintf(stderr, "tessera bench unet: --model DIR is required\n");
        return TSR_EXIT_USAGE;
    }
    if (size % 8) {
        fprintf(stderr, "tessera bench unet: --size %lld is not a multiple of 8\n",
                (long long)size);
        return TSR_EXIT_USAGE;
    }

    tsr_backend *be = NULL;
    tsr_model *m = NULL;
    tsr_weights *w = NULL;
    tsr_unet *u = NULL;
    bench_io io = {0};
    double *times = NULL, *cpu_times = NULL;
    tsr_unet_inputs in;
    double t0 = tsr_cli_now();
    if (round_rows) {
        tsr_cpu_options o = {.n_threads = (int)threads, .round_rows = true};
        if (strncmp(device, "cpu", 3) != 0) {
            rc = tsr_errorf(TSR_ERR_INVALID, "--round-rows is for the CPU backend");
            goto fail;
        }
        if (strcmp(device, "cpu-f16") == 0)
            o.storage = TSR_F16;
        else if (strcmp(device, "cpu-bf16") == 0)
            o.storage = TSR_BF16;
        TSR_CHECK_GOTO(rc, tsr_backend_cpu_create_ex(&o, &be), fail);
    } else {
        TSR_CHECK_GOTO(rc, tsr_backend_open(device, (int)threads, &be), fail);
    }
    TSR_CHECK_GOTO(rc, tsr_model_open(model_path, &m), fail);
    const tsr_unet_desc *dm = tsr_model_unet_desc(m);
    if (!dm) {
        rc = tsr_errorf(TSR_ERR_NOT_FOUND, "%s: the model has no UNet", model_path);
        goto fail;
    }
    const tsr_unet_desc desc = *dm;
    TSR_CHECK_GOTO(rc, tsr_weights_load(m, TSR_COMP_UNET, be, &w), fail);
    tsr_model_close(m); /* weights outlive the model; drop the file mappings */
    m = NULL;
    TSR_CHECK_GOTO(rc, tsr_unet_create(&desc, w, be, &u), fail);
    const double load_s = tsr_cli_now() - t0;
    const double load_peak = tsr_cli_proc_mib("VmHWM"), rss_loaded = tsr_cli_proc_mib("VmRSS");
    const bool call_peak_ok = tsr_cli_reset_peak_rss();
    TSR_CHECK_GOTO(rc, make_inputs(&desc, batch, size, &io, &in), fail);
    times = calloc((size_t)iters, sizeof(double));
    cpu_times = calloc((size_t)iters, sizeof(double));
    if (!times || !cpu_times) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
        goto fail;
    }
    double first_s = 0;
    for (int64_t i = 0; i < warmup + iters; i++) {
        double ts = tsr_cli_now(), cs = cpu_now();
        TSR_CHECK_GOTO(rc, tsr_unet_forward(u, &in, io.out), fail);
        double dt = tsr_cli_now() - ts;
        if (i == 0)
            first_s = dt;
        if (i >= warmup) {
            times[i - warmup] = dt;
            cpu_times[i - warmup] = cpu_now() - cs;
        }
    }
    const double peak = tsr_cli_proc_mib("VmHWM");
    const double call_peak = call_peak_ok ? peak : -1;
    const double total_peak = peak > load_peak ? peak : load_peak;
    qsort(times, (size_t)iters, sizeof(double), tsr_cli_cmp_double);
    const double med = iters % 2 ? times[iters / 2]
                                 : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
    const int nthreads = tsr_backend_threads(be), rows = tsr_unet_rows(u, (int)batch);
    qsort(cpu_times, (size_t)iters, sizeof(double), tsr_cli_cmp_double);
    const double cpu_med = iters % 2 ? cpu_times[iters / 2]
                                     : 0.5 * (cpu_times[iters / 2 - 1] + cpu_times[iters / 2]);
    double checksum = 0;
    const size_t n_out = (size_t)(batch * (size / 8) * (size / 8) * desc.out_channels);
    for (size_t i = 0; i < n_out; i++)
        checksum += fabs(io.out[i]);
    const double ws_mib = (double)tsr_unet_workspace_bytes(u) / 1048576.0;
    const double w_mib = (double)tsr_weights_bytes(w) / 1048576.0;
    if (json)
        printf("{\"impl\": \"tessera\", \"model\": \"%s\", \"size\": %lld, \"batch\": %lld, "
               "\"rows_computed\": %d, \"threads\": %d, \"iters\": %lld, \"median_s\": %.4f, "
               "\"min_s\": %.4f, \"cpu_s\": %.4f, "
               "\"first_s\": %.4f, \"load_s\": %.2f, \"weights_mib\": %.1f, "
               "\"workspace_mib\": %.1f, \"rss_loaded_mib\": %.1f, \"peak_rss_call_mib\": %.1f, "
               "\"peak_rss_mib\": %.1f, \"mean_abs_out\": %.6g}\n",
               model_path, (long long)size, (long long)batch, rows, nthreads, (long long)iters, med,
               times[0], cpu_med, first_s, load_s, w_mib, ws_mib, rss_loaded, call_peak, total_peak,
               checksum / (double)n_out);
    else {
        printf("backend: %s; UNet %s at %lldx%lld, batch %lld (%d rows computed)\n", be->name,
               model_path, (long long)size, (long long)size, (long long)batch, rows);
        printf("median %.3f s per call over %lld calls (min %.3f s, first call %.3f s); CPU time "
               "%.3f s per call\n",
               med, (long long)iters, times[0], first_s, cpu_med);
        printf("load %.1f s; weights %.1f MiB, workspace %.1f MiB\n", load_s, w_mib, ws_mib);
        printf("RSS after load %.1f MiB; peak RSS during the calls %.1f MiB; peak RSS overall "
               "%.1f MiB\n",
               rss_loaded, call_peak, total_peak);
    }
    rc = TSR_OK;
fail:
    if (rc < 0)
        tsr_cli_report("bench unet", rc);
    free(times);
    free(cpu_times);
    io_free(&io);
    tsr_unet_free(u);
    tsr_weights_free(w);
    tsr_model_close(m);
    tsr_backend_destroy(be);
    return rc < 0 ? TSR_EXIT_FAILURE : TSR_EXIT_OK;
}
