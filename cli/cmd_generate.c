/*
 * cli/cmd_generate.c - `tessera generate`: text-to-image,
 * img2img and inpainting from the command line.
 *
 * Everything that can be checked without the model (flag ranges, sampler
 * and schedule names, sizes, readable init image and mask) is checked
 * before the model is loaded, so a typo fails in milliseconds with a
 * message naming the flag, and nothing is written.  The images of one
 * command share UNet calls (tsr_batch): --batch-size 4 with guidance runs 8
 * rows per call.  Image i uses seed s+i (A1111's convention).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "image/image.h"
#include "scheduler/rng.h"
#include "scheduler/scheduler.h"
#include "tessera.h"

#define MAX_BATCH 64

typedef struct gen_opts {
    const char *model, *prompt, *negative, *sampler, *schedule, *rng, *init, *mask;
    const char *preview_dir, *device, *output, *prediction, *taesd;
    int64_t steps, width, height, batch, clip_skip, threads;
    int64_t seed;
    double cfg, strength, rescale, eta;
    bool quiet, seed_given;
} gen_opts;

typedef struct progress {
    bool tty;
    int images;
    int evals_done, evals_total;
    double start;
    const char *preview_dir;
    int *job_index; /* job id -> image index */
    int n_jobs;
    int write_errors;
} progress;


static void on_step(void *user, const tsr_step_info *info)
{
    progress *pr = user;
    if (info->state != TSR_JOB_DENOISING)
        return; /* final states: reported after the loop from the results */
    pr->evals_done++;
    if (pr->preview_dir && info->preview_rgb) {
        int index = info->job <= pr->n_jobs ? pr->job_index[info->job] : info->job;
        char path[4096];
        snprintf(path, sizeof path, "%s/image%d-step%03d.png", pr->preview_dir, index, info->step);
        tsr_image img = {(uint32_t)info->preview_width, (uint32_t)info->preview_height, 3,
                         (uint8_t *)info->preview_rgb};
        if (tsr_png_write(path, &img, NULL, 0) != TSR_OK && pr->write_errors++ == 0)
            fprintf(stderr, "tessera generate: cannot write previews: %s\n", tsr_last_error());
    }
    if (!pr->tty)
        return;
    const double elapsed = tsr_cli_now() - pr->start;
    const double rate = elapsed > 0 ? pr->evals_done / elapsed : 0;
    const double eta = rate > 0 ? (pr->evals_total - pr->evals_done) / rate : 0;
    const int width = 30, filled = pr->evals_total ? width * pr->evals_done / pr->evals_total : 0;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    bar[width] = '\0';
    fprintf(stderr, "\r[%s] step %d/%d  %.2f it/s  ETA %.1fs ", bar, info->step, info->steps,
            rate, eta);
    fflush(stderr);
}


/* The flag that sets an engine parameter (tsr_image_params_check's field). */
static const char *flag_of_field(const char *field)
{
    static const char *const map[][2] = {
        {"width", "--width"},         {"height", "--height"},
        {"steps", "--steps"},         {"cfg_scale", "--cfg-scale"},
        {"guidance_rescale", "--guidance-rescale"}, {"sampler", "--sampler"},
        {"scheduler", "--scheduler"},  {"rng", "--rng"},
        {"clip_skip", "--clip-skip"}, {"eta", "--eta"},
        {"prompt", "--prompt"},       {"negative_prompt", "--negative-prompt"},
        {"strength", "--strength"},   {"init_image", "--init-image"},
        {"mask", "--mask"},
    };
    for (size_t i = 0; field && i < sizeof map / sizeof *map; i++)
        if (strcmp(field, map[i][0]) == 0)
            return map[i][1];
    return NULL;
}

static int load_png(const char *flag, const char *path, int channels, tsr_image *img)
{
    int rc = tsr_png_read(path, channels, img, NULL);
    if (rc < 0)
        fprintf(stderr, "tessera generate: --%s: %s\n", flag, tsr_last_error());
    return rc;
}

/* Checks that need no model.  Prints the error naming the flag. */
static int precheck(const gen_opts *o)
{
    tsr_sampler_kind kind;
    tsr_schedule schedule;
    if (o->sampler && tsr_sampler_parse(o->sampler, &kind, &schedule) < 0) {
        fprintf(stderr, "tessera generate: --sampler: %s\n", tsr_last_error());
        return TSR_ERR_INVALID;
    }
    if (o->schedule && tsr_schedule_parse(o->schedule, &schedule) < 0) {
        fprintf(stderr, "tessera generate: --scheduler: %s\n", tsr_last_error());
        return TSR_ERR_INVALID;
    }
    if (tsr_rng_kind_parse(o->rng) < 0 || strcmp(o->rng, "cpu_scalar") == 0) {
        fprintf(stderr, "tessera generate: --rng must be cpu or cuda, not '%s'\n", o->rng);
        return TSR_ERR_INVALID;
    }
    const struct {
        const char *flag;
        int64_t v;
    } sides[] = {{"width", o->width}, {"height", o->height}};
    for (int i = 0; i < 2; i++) {
        if (sides[i].v && sides[i].v % 8) {
            fprintf(stderr, "tessera generate: --%s must be a multiple of 8, got %lld\n",
                    sides[i].flag, (long long)sides[i].v);
            return TSR_ERR_INVALID;
        }
    }
    if (o->mask && !o->init) {
        fprintf(stderr, "tessera generate: --mask needs --init-image\n");
        return TSR_ERR_INVALID;
    }
    if (o->preview_dir) {
        struct stat st;
        if (stat(o->preview_dir, &st) != 0 && mkdir(o->preview_dir, 0777) != 0) {
            fprintf(stderr, "tessera generate: --preview-dir: cannot create %s: %s\n",
                    o->preview_dir, strerror(errno));
            return TSR_ERR_IO;
        }
    }
    return TSR_OK;
}

/* OUT.png -> OUT-i.png for batches. */
static void output_name(const char *out, int i, int n, char *buf, size_t size)
{
    if (n == 1) {
        snprintf(buf, size, "%s", out);
        return;
    }
    const char *dot = strrchr(out, '.');
    const char *slash = strrchr(out, '/');
    if (!dot || (slash && dot < slash))
        snprintf(buf, size, "%s-%d", out, i);
    else
        snprintf(buf, size, "%.*s-%d%s", (int)(dot - out), out, i, dot);
}

int tsr_cmd_generate(int argc, char **argv)
{
    gen_opts o;
    memset(&o, 0, sizeof o);
    o.steps = 30;
    o.cfg = 7.5;
    o.rng = "cpu";
    o.batch = 1;
    o.clip_skip = 1;
    o.strength = 0.75;
    o.device = "auto";
    o.seed = -1;
    const tsr_arg_spec specs[] = {
        {"model", TSR_ARG_STRING, &o.model, "DIR_OR_FILE",
         "diffusers folder or single .safetensors (default: models/demo)", 0, 0, 0, 0},
        {"prompt", TSR_ARG_STRING, &o.prompt, "TEXT", "what to draw (A1111 syntax)", 0, 0, 0, 0},
        {"negative-prompt", TSR_ARG_STRING, &o.negative, "TEXT", "what to avoid", 0, 0, 0, 0},
        {"steps", TSR_ARG_INT, &o.steps, "N", "sampling steps, 1..1000 (default 30)", 1,
         TSR_MAX_STEPS, 0, 0},
        {"cfg-scale", TSR_ARG_FLOAT, &o.cfg, "F", "classifier-free guidance (default 7.5)", 0, 0, 0,
         100},
        {"guidance-rescale", TSR_ARG_FLOAT, &o.rescale, "F",
         "rescale guidance for v-prediction models, 0..1 (default 0)", 0, 0, 0, 1},
        {"sampler", TSR_ARG_STRING, &o.sampler, "NAME",
         "euler, euler_a, heun, dpmpp_2m, dpmpp_2m_sde, dpmpp_sde, ddim, pndm, lms, unipc, lcm; "
         "also diffusers class and A1111 names (default: the model's)", 0, 0, 0, 0},
        {"scheduler", TSR_ARG_STRING, &o.schedule, "NAME",
         "sigma schedule: default, karras, exponential, sgm_uniform", 0, 0, 0, 0},
        {"seed", TSR_ARG_INT, &o.seed, "N", "seed; image i uses seed+i (default: random)", -1,
         INT64_MAX, 0, 0},
        {"rng", TSR_ARG_STRING, &o.rng, "cpu|cuda",
         "noise: torch CPU generator (default) or torch CUDA generator (A1111)", 0, 0, 0, 0},
        {"width", TSR_ARG_INT, &o.width, "W", "image width, multiple of 8 (default: the model's)",
         TSR_MIN_SIZE, TSR_MAX_SIZE, 0, 0},
        {"height", TSR_ARG_INT, &o.height, "H", "image height, multiple of 8 (default: the model's)",
         TSR_MIN_SIZE, TSR_MAX_SIZE, 0, 0},
        {"batch-size", TSR_ARG_INT, &o.batch, "N", "images to make (default 1)", 1, MAX_BATCH, 0,
         0},
        {"init-image", TSR_ARG_STRING, &o.init, "PNG", "img2img: start from this image", 0, 0, 0,
         0},
        {"strength", TSR_ARG_FLOAT, &o.strength, "F",
         "img2img: how much to change the init image, (0, 1] (default 0.75)", 0, 0, 1e-6, 1},
        {"mask", TSR_ARG_STRING, &o.mask, "PNG",
         "inpainting (inpainting models): white = repaint, black = keep", 0, 0, 0, 0},
        {"clip-skip", TSR_ARG_INT, &o.clip_skip, "N", "1 = the family's default layer (A1111)", 1,
         12, 0, 0},
        {"eta", TSR_ARG_FLOAT, &o.eta, "F", "DDIM eta (default 0)", 0, 0, 0, 1},
        {"preview-dir", TSR_ARG_STRING, &o.preview_dir, "DIR",
         "write a preview PNG (1/8 size) after every step", 0, 0, 0, 0},
        {"taesd", TSR_ARG_STRING, &o.taesd, "PATH", "TAESD decoder weights for previews", 0, 0, 0,
         0},
        {"prediction", TSR_ARG_STRING, &o.prediction, "KIND",
         "override the model's prediction type: epsilon or v", 0, 0, 0, 0},
        {"device", TSR_ARG_STRING, &o.device, "DEV", "auto (default), cpu, cuda or cuda:N", 0, 0,
         0, 0},
        {"threads", TSR_ARG_INT, &o.threads, "N", "CPU threads (0 = all cores)", 0, 1024, 0, 0},
        {"output", TSR_ARG_STRING, &o.output, "OUT.png",
         "where to write; batches write OUT-0.png, OUT-1.png, ... (default tessera.png)", 0, 0, 0,
         0},
        {"quiet", TSR_ARG_FLAG, &o.quiet, NULL, "no progress bar", 0, 0, 0, 0},
    };
    const tsr_cli_command cmd = {
        .name = "generate",
        .synopsis = "generate [--model DIR_OR_FILE] --prompt TEXT [options] [--output OUT.png]",
        .summary = "generate images from a prompt (txt2img, img2img, inpainting)",
        .description =
            "Defaults come from the model: 512 for SD 1.x, 768 for SD 2.x v-models, 1024 for\n"
            "SDXL; the model's own scheduler; cfg 7.5; 30 steps.  With --rng cpu the result\n"
            "equals diffusers' with generator=torch.Generator(\"cpu\").manual_seed(seed).\n"
            "The PNG carries an A1111 'parameters' text chunk.",
        .specs = specs,
        .n_specs = (int)(sizeof specs / sizeof specs[0]),
    };
    int rc = tsr_args_parse(&cmd, argc, argv, NULL, 0, NULL);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc)
        return TSR_EXIT_USAGE;
    if (!o.prompt) {
        fprintf(stderr, "tessera generate: --prompt is required\n");
        return TSR_EXIT_USAGE;
    }
    if (precheck(&o) < 0)
        return TSR_EXIT_USAGE;
    if (!o.model)
        o.model = tsr_cli_default_model();
    if (!o.output)
        o.output = "tessera.png";
    if (o.seed < 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        o.seed = (int64_t)((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20)) & 0xffffffffll;
    }

    tsr_image init = {0}, mask = {0};
    tsr_engine *engine = NULL;
    tsr_batch *batch = NULL;
    int exit_code = TSR_EXIT_FAILURE, jobs[MAX_BATCH] = {0}, n_jobs = 0;
    int job_index[MAX_BATCH + 2] = {0};
    if (o.init && load_png("init-image", o.init, 3, &init) < 0)
        return TSR_EXIT_USAGE;
    if (o.mask && load_png("mask", o.mask, 1, &mask) < 0) {
        tsr_image_free(&init);
        return TSR_EXIT_USAGE;
    }
    if (o.init) {
        if ((o.width && o.width != (int64_t)init.width) ||
            (o.height && o.height != (int64_t)init.height)) {
            fprintf(stderr, "tessera generate: --init-image is %ux%u but --width/--height ask for "
                            "%lldx%lld (resize the image first)\n",
                    init.width, init.height, (long long)(o.width ? o.width : init.width),
                    (long long)(o.height ? o.height : init.height));
            goto usage;
        }
        o.width = init.width;
        o.height = init.height;
        if (o.mask && (mask.width != init.width || mask.height != init.height)) {
            fprintf(stderr, "tessera generate: --mask is %ux%u but --init-image is %ux%u\n",
                    mask.width, mask.height, init.width, init.height);
            goto usage;
        }
    }

    tsr_engine_options eo;
    tsr_engine_options_init(&eo);
    eo.model = o.model;
    eo.device = o.device;
    eo.threads = (int)o.threads;
    eo.prediction = o.prediction;
    eo.taesd = o.taesd;
    const double t_open = tsr_cli_now();
    rc = tsr_engine_open(&eo, &engine);
    const double load_s = tsr_cli_now() - t_open;
    if (rc < 0) {
        /* the detail names the model path or the device that failed */
        fprintf(stderr, "tessera generate: %s\n", tsr_last_error());
        goto usage;
    }
    if (!o.width)
        o.width = tsr_engine_default_size(engine);
    if (!o.height)
        o.height = tsr_engine_default_size(engine);
    tsr_batch_options bo;
    tsr_batch_options_init(&bo);
    bo.max_rows = (int)(o.cfg > 1 ? 2 * o.batch : o.batch);
    TSR_CHECK_GOTO(rc, tsr_batch_create(engine, &bo, &batch), fail);
    progress pr = {isatty(STDERR_FILENO) && !o.quiet, (int)o.batch, 0, 0, 0, o.preview_dir,
                   job_index, MAX_BATCH + 1, 0};
    /* TAESD previews are at image size; linear ones at latent size */
    tsr_batch_set_callback(batch, on_step, &pr,
                           o.preview_dir ? TSR_PREVIEW_LATENT : TSR_PREVIEW_NONE);

    for (int i = 0; i < o.batch; i++) {
        tsr_image_params p;
        tsr_image_params_init(&p);
        p.prompt = o.prompt;
        p.negative_prompt = o.negative;
        p.width = (int)o.width;
        p.height = (int)o.height;
        p.steps = (int)o.steps;
        p.cfg_scale = o.cfg;
        p.guidance_rescale = o.rescale;
        p.sampler = o.sampler;
        p.schedule = o.schedule;
        p.seed = (uint64_t)o.seed + (uint64_t)i;
        p.rng = o.rng;
        p.clip_skip = (int)o.clip_skip;
        p.eta = o.eta;
        p.init_image = o.init ? init.data : NULL;
        p.strength = o.strength;
        p.mask = o.mask ? mask.data : NULL;
        const char *field = NULL;
        rc = tsr_image_params_check(engine, &p, &field);
        if (rc == TSR_OK)
            rc = tsr_batch_submit(batch, &p, &jobs[n_jobs]);
        if (rc < 0) {
            /* the first image fails the same way as the rest: bad input */
            const char *flag = flag_of_field(field);
            fprintf(stderr, "tessera generate: %s%s%s\n", flag ? flag : "", flag ? ": " : "",
                    tsr_last_error());
            goto usage;
        }
        job_index[jobs[n_jobs]] = i;
        n_jobs++;
    }
    pr.evals_total = 0;
    /* evaluations per image are known once submitted; count them */
    pr.start = tsr_cli_now();
    TSR_INFO("generating %d image%s of %lldx%lld on %s, seed %lld", n_jobs, n_jobs > 1 ? "s" : "",
             (long long)o.width, (long long)o.height, tsr_engine_device(engine), (long long)o.seed);
    pr.evals_total = n_jobs * (int)o.steps;
    double step_s[2 * TSR_MAX_STEPS + 8];
    int n_steps = 0;
    while (tsr_batch_active(batch) > 0) {
        const double t0 = tsr_cli_now();
        rc = tsr_batch_step(batch, NULL);
        if (rc < 0)
            goto fail;
        if (n_steps < (int)(sizeof step_s / sizeof step_s[0]))
            step_s[n_steps++] = tsr_cli_now() - t0;
    }
    if (pr.tty)
        fprintf(stderr, "\n");

    int failures = 0;
    for (int i = 0; i < n_jobs; i++) {
        tsr_result res;
        rc = tsr_batch_take(batch, jobs[i], &res);
        if (rc < 0 || res.status != TSR_OK) {
            fprintf(stderr, "tessera generate: image %d failed: %s\n", i,
                    rc < 0 ? tsr_last_error() : tsr_strerror(res.status));
            failures++;
            tsr_result_free(&res);
            continue;
        }
        char path[4096];
        output_name(o.output, i, n_jobs, path, sizeof path);
        tsr_image img = {(uint32_t)res.width, (uint32_t)res.height, 3, res.rgb};
        tsr_png_text text = {"parameters", res.parameters};
        rc = tsr_png_write(path, &img, &text, 1);
        if (rc < 0) {
            fprintf(stderr, "tessera generate: --output %s: %s\n", path, tsr_last_error());
            failures++;
        } else {
            printf("%s (seed %llu)\n", path, (unsigned long long)res.seed);
        }
        tsr_result_free(&res);
    }
    /* the last UNet call also decodes: the median is the denoising step */
    qsort(step_s, (size_t)n_steps, sizeof step_s[0], tsr_cli_cmp_double);
    TSR_INFO("%d image%s in %.2f s (load %.2f s, %d UNet calls, median %.3f s per call)", n_jobs,
             n_jobs > 1 ? "s" : "", tsr_cli_now() - pr.start, load_s, n_steps,
             n_steps ? step_s[n_steps / 2] : 0.0);
    exit_code = failures ? TSR_EXIT_FAILURE : TSR_EXIT_OK;
    goto done;
usage:
    exit_code = TSR_EXIT_USAGE;
    goto done;
fail:
    tsr_cli_report("generate", rc);
    exit_code = TSR_EXIT_FAILURE;
done:
    tsr_batch_free(batch);
    tsr_engine_close(engine);
    tsr_image_free(&init);
    tsr_image_free(&mask);
    return exit_code;
}
