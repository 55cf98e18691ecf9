/*
 * cli/bench_vae.c - `tessera bench vae`: time a VAE decode of a
 * model's VAE at one image size and batch, report peak memory, and
 * optionally the cost of a latent preview.
 *
 * Why it looks like this: tools/bench/bench_vae.py runs the same decode in
 * diffusers in the same run (same shape, same thread count) and reads this
 * command's --json, so both sides report the median of --iters decodes
 * after --warmup untimed ones, and both report memory the same way: the
 * process's peak RSS (VmHWM) and its RSS before the first decode (weights
 * loaded), whose difference is what the decode itself needed.  Latents are
 * pseudo-random normal numbers; speed and memory do not depend on values.
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
#include "vae/preview.h"
#include "vae/vae.h"

int tsr_bench_vae(int argc, char **argv);






int tsr_bench_vae(int argc, char **argv)
{
    const char *model_dir = NULL, *taesd_path = NULL, *device = "cpu";
    int64_t size = 512, batch = 1, threads = 0, iters = 3, warmup = 1, tile = 0;
    bool json = false, preview = false;
    const tsr_arg_spec specs[] = {
        {"model", TSR_ARG_STRING, &model_dir, "DIR", "model folder or file with a VAE (required)", 0,
         0, 0, 0},
        {"size", TSR_ARG_INT, &size, "N", "image edge in pixels (default 512)", 8, 8192, 0, 0},
        {"batch", TSR_ARG_INT, &batch, "N", "images per decode call (default 1)", 1, 64, 0, 0},
        {"device", TSR_ARG_STRING, &device, "DEV",
         "backend: cpu (default), cuda, cuda:N, auto, or the cpu-f16 / cpu-bf16 test variants", 0,
         0, 0, 0},
        {"threads", TSR_ARG_INT, &threads, "N", "threads (0 = all cores)", 0, 1024, 0, 0},
        {"iters", TSR_ARG_INT, &iters, "N", "timed decodes; the median is reported (default 3)", 1,
         100, 0, 0},
        {"warmup", TSR_ARG_INT, &warmup, "N", "untimed decodes first (default 1)", 0, 100, 0, 0},
        {"tile", TSR_ARG_INT, &tile, "N", "tiled decode with tiles of N latent pixels (0 = off)", 0,
         8192, 0, 0},
        {"preview", TSR_ARG_FLAG, &preview, NULL, "also time the linear preview (and TAESD)", 0, 0, 0,
         0},
        {"taesd", TSR_ARG_STRING, &taesd_path, "PATH", "TAESD decoder weights for --preview", 0, 0,
         0, 0},
        {"json", TSR_ARG_FLAG, &json, NULL, "print JSON instead of text", 0, 0, 0, 0},
    };
    const tsr_cli_command cmd = {
        .name = "bench vae",
        .synopsis = "bench vae --model DIR [--device DEV] [--size N] [--batch N] [--threads N] "
                    "[--iters N] "
                    "[--tile N] [--preview [--taesd PATH]] [--json]",
        .summary = "time a VAE decode and report peak memory",
        .description = "Decodes random latents of (size/8)^2 with the model's VAE: median of\n"
                       "--iters calls after --warmup calls.  Memory: peak RSS of the process and\n"
                       "RSS before the first decode.  tools/bench/bench_vae.py runs diffusers on\n"
                       "the same shape for comparison.",
        .specs = specs,
        .n_specs = (int)(sizeof specs / sizeof specs[0]),
    };
    int rc = tsr_args_parse(&cmd, argc, argv, NULL, 0, NULL);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc < 0)
        return TSR_EXIT_USAGE;
    if (!model_dir) {
        fprintf(stderr, "tessera bench vae: --model DIR is required\n");
        return TSR_EXIT_USAGE;
    }

    tsr_backend *be = NULL;
    tsr_model *model = NULL;
    tsr_weights *w = NULL;
    tsr_vae *vae = NULL;
    tsr_taesd *taesd = NULL;
    float *lat = NULL, *img = NULL;
    uint8_t *rgb = NULL;
    double *times = calloc((size_t)iters, sizeof(double));
    int status = TSR_EXIT_FAILURE;
    if (!times)
        goto done;
    TSR_CHECK_GOTO(rc, tsr_backend_open(device, (int)threads, &be), fail);
    TSR_CHECK_GOTO(rc, tsr_model_open(model_dir, &model), fail);
    if (!tsr_model_has(model, TSR_COMP_VAE)) {
        rc = tsr_errorf(TSR_ERR_NOT_FOUND, "%s has no VAE", model_dir);
        goto fail;
    }
    double t_load = tsr_cli_now();
    TSR_CHECK_GOTO(rc, tsr_weights_load(model, TSR_COMP_VAE, be, &w), fail);
    t_load = tsr_cli_now() - t_load;
    TSR_CHECK_GOTO(rc, tsr_vae_create(tsr_model_vae_desc(model), w, be, &vae), fail);
    const int f = tsr_vae_factor(vae), C = tsr_vae_get_desc(vae)->latent_channels;
    if (size % f) {
        rc = tsr_errorf(TSR_ERR_INVALID, "--size %lld is not a multiple of %d", (long long)size, f);
        goto fail;
    }
    const int h = (int)size / f;
    const size_t nl = (size_t)batch * h * h * C, ni = (size_t)batch * size * size * 3;
    lat = malloc(nl * sizeof(float));
    img = malloc(ni * sizeof(float));
    if (!lat || !img) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
        goto fail;
    }
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    tsr_cli_fill_normal(lat, nl, &seed);
    for (size_t i = 0; i < ni; i++) /* touch the output so it counts before the decode */
        img[i] = 0;
    const double rss_before = tsr_cli_proc_mib("VmRSS");
    const tsr_vae_tiling tl = {(int)tile, 0};
    for (int64_t i = 0; i < warmup + iters; i++) {
        double t0 = tsr_cli_now();
        rc = tsr_vae_decode_tiled(vae, lat, (int)batch, h, h, &tl, img);
        if (rc < 0)
            goto fail;
        if (i >= warmup)
            times[i - warmup] = tsr_cli_now() - t0;
    }
    const double med = tsr_cli_median(times, (int)iters), best = times[0];
    const double peak = tsr_cli_proc_mib("VmHWM");

    double lin_ms = -1, taesd_ms = -1;
    if (preview) {
        rgb = malloc((size_t)64 * h * h * 3);
        if (!rgb) {
            rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
            goto fail;
        }
        const int reps = 50;
        tsr_preview_linear_map map;
        TSR_CHECK_GOTO(rc, tsr_preview_published_map(TSR_FAMILY_SD1, &map), fail);
        double t0 = tsr_cli_now();
        for (int i = 0; i < reps; i++)
            TSR_CHECK_GOTO(rc, tsr_preview_linear(&map, lat, h, h, C, NULL, rgb), fail);
        lin_ms = (tsr_cli_now() - t0) / reps * 1e3;
        if (taesd_path) {
            TSR_CHECK_GOTO(rc, tsr_taesd_open(taesd_path, be, &taesd), fail);
            TSR_CHECK_GOTO(rc, tsr_taesd_preview(taesd, lat, h, h, rgb), fail); /* warm-up */
            for (int64_t i = 0; i < iters; i++) {
                t0 = tsr_cli_now();
                TSR_CHECK_GOTO(rc, tsr_taesd_preview(taesd, lat, h, h, rgb), fail);
                times[i] = tsr_cli_now() - t0;
            }
            taesd_ms = tsr_cli_median(times, (int)iters) * 1e3;
        }
    }
    if (json) {
        printf("{\"backend\": \"%s\", \"threads\": %d, \"size\": %lld, \"batch\": %lld, \"tile\": %lld, "
               "\"iters\": %lld, \"decode_ms\": %.2f, \"min_ms\": %.2f, \"load_s\": %.3f, "
               "\"weights_mib\": %.1f, \"workspace_mib\": %.1f, \"rss_before_mib\": %.1f, "
               "\"peak_rss_mib\": %.1f, \"preview_linear_ms\": %.4f, \"preview_taesd_ms\": %.2f}\n",
               be->name, tsr_backend_threads(be), (long long)size, (long long)batch, (long long)tile,
               (long long)iters,
               med * 1e3, best * 1e3, t_load, tsr_weights_bytes(w) / 1048576.0,
               tsr_vae_workspace_bytes(vae) / 1048576.0, rss_before, peak, lin_ms, taesd_ms);
    } else {
        printf("backend: %s\nVAE decode %lldx%lld, batch %lld%s: median %.1f ms (min %.1f) of %lld\n",
               be->name, (long long)size, (long long)size, (long long)batch,
               tile ? " (tiled)" : "", med * 1e3, best * 1e3, (long long)iters);
        printf("weights %.1f MiB (loaded in %.2f s), workspace %.1f MiB\n",
               tsr_weights_bytes(w) / 1048576.0, t_load, tsr_vae_workspace_bytes(vae) / 1048576.0);
        printf("RSS before decode %.1f MiB, peak RSS %.1f MiB (decode added %.1f MiB)\n", rss_before,
               peak, peak - rss_before);
        if (preview) {
            printf("linear preview %dx%d: %.4f ms\n", h, h, lin_ms);
            if (taesd_ms >= 0)
                printf("TAESD preview %lldx%lld: %.1f ms\n", (long long)size, (long long)size,
                       taesd_ms);
        }
    }
    status = TSR_EXIT_OK;
    goto done;
fail:
    tsr_cli_report("bench vae", rc);
done:
    free(times);
    free(lat);
    free(img);
    free(rgb);
    tsr_taesd_free(taesd);
    tsr_vae_free(vae);
    tsr_weights_free(w);
    tsr_model_close(model);
    tsr_backend_destroy(be);
    return status;
}
