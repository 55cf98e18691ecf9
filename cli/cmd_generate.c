/*
 * cli/cmd_generate.c - `tessera generate`: text-to-image,
 * img2img and inpainting from the command line.
 *
 * Everything that can be checked without the model (flag ranges, sampler
 * and schedule names, sizes, the output's extension and folder, that every
 * named file exists) is checked before the model is loaded
 * (cli/generate_check.c), so a typo fails in milliseconds with a message
 * naming the flag, and nothing is written.  Init images and masks (PNG or
 * JPEG, any size) are read before the load too, and fitted to the target
 * size with A1111's resize modes once the model's default size is known.
 * The images of one command share UNet calls (tsr_batch): up to 16 images
 * with guidance (32 rows) per call, larger batches in several calls per
 * step.  Image i uses seed s+i mod 2^64 (A1111's convention).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "generate.h"
#include "image/image.h"
#include "scheduler/scheduler.h"
#include "tessera.h"

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

/* Read an init image or mask (PNG or JPEG); the message names the flag. */
static int load_image(const char *flag, const char *path, int channels, tsr_image *img)
{
    int rc = tsr_image_read(path, channels, img);
    if (rc < 0)
        fprintf(stderr, "tessera generate: --%s: %s\n", flag, tsr_last_error());
    return rc;
}

/* Fit an init image or mask to the target size with the resize mode. */
static int fit_image(const char *flag, tsr_image *img, const gen_opts *o)
{
    if (img->width == (uint32_t)o->width && img->height == (uint32_t)o->height)
        return TSR_OK;
    tsr_image out;
    int rc = tsr_image_resize_a1111(img, o->resize, (uint32_t)o->width, (uint32_t)o->height, &out);
    if (rc < 0) {
        fprintf(stderr, "tessera generate: --%s: %s\n", flag, tsr_last_error());
        return rc;
    }
    TSR_INFO("--%s: %ux%u -> %lldx%lld (%s)", flag, img->width, img->height, (long long)o->width,
             (long long)o->height, tsr_resize_mode_name(o->resize));
    tsr_image_free(img);
    *img = out;
    return TSR_OK;
}

static int write_image(const gen_opts *o, const char *path, const tsr_result *res)
{
    tsr_image img = {(uint32_t)res->width, (uint32_t)res->height, 3, res->rgb};
    if (o->format == GEN_JPEG)
        return tsr_jpeg_write(path, &img, GEN_JPEG_QUALITY, res->parameters);
    tsr_png_text text = {"parameters", res->parameters};
    return tsr_png_write(path, &img, &text, 1);
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
    const tsr_arg_spec specs[] = {
        {"model", TSR_ARG_STRING, &o.model, "DIR_OR_FILE",
         "diffusers folder or single .safetensors (default: models/demo)", 0, 0, 0, 0},
        {"prompt", TSR_ARG_STRING, &o.prompt, "TEXT", "what to draw (A1111 syntax)", 0, 0, 0, 0},
        {"negative-prompt", TSR_ARG_STRING, &o.negative, "TEXT", "what to avoid", 0, 0, 0, 0},
        {"steps", TSR_ARG_INT, &o.steps, "N", "sampling steps, 1..1000 (default 30)", 1,
         TSR_MAX_STEPS, 0, 0},
        {"cfg-scale", TSR_ARG_FLOAT, &o.cfg, "F",
         "classifier-free guidance, 0..100 (default 7.5; <= 1 turns it off)", 0, 0, 0, 100},
        {"guidance-rescale", TSR_ARG_FLOAT, &o.rescale, "F",
         "rescale guidance for v-prediction models, 0..1 (default 0)", 0, 0, 0, 1},
        {"sampler", TSR_ARG_STRING, &o.sampler, "NAME",
         TSR_SAMPLER_NAMES "; also diffusers class and A1111 names such as \"DPM++ 2M Karras\" "
         "(default: the model's)", 0, 0, 0, 0},
        {"scheduler", TSR_ARG_STRING, &o.schedule, "NAME",
         "sigma schedule: default, karras, exponential, sgm_uniform", 0, 0, 0, 0},
        {"seed", TSR_ARG_U64, &o.seed, "N",
         "0..2^64-1, or -1 = random (default); image i uses seed+i mod 2^64", -1, 0, 0, 0,
         .seen = &o.seed_given},
        {"rng", TSR_ARG_STRING, &o.rng, "cpu|cuda",
         "noise: torch CPU generator (default) or torch CUDA generator (A1111)", 0, 0, 0, 0},
        {"width", TSR_ARG_INT, &o.width, "W",
         "image width, 64..4096, multiple of 8 (default: the model's size)", TSR_MIN_SIZE,
         TSR_MAX_SIZE, 0, 0},
        {"height", TSR_ARG_INT, &o.height, "H",
         "image height, 64..4096, multiple of 8 (default: the model's size)", TSR_MIN_SIZE,
         TSR_MAX_SIZE, 0, 0},
        {"batch-size", TSR_ARG_INT, &o.batch, "N",
         "images per request, 1..64 (default 1); up to 16 share each UNet call", 1,
         GEN_MAX_BATCH, 0, 0},
        {"init-image", TSR_ARG_STRING, &o.init, "PNG|JPEG",
         "img2img: start from this image (any size: fitted with --resize-mode)", 0, 0, 0, 0},
        {"strength", TSR_ARG_FLOAT, &o.strength, "F",
         "img2img: how much to change the init image, (0, 1] (default 0.75)", 0, 0, 0, 1,
         .fmin_open = true, .seen = &o.strength_given},
        {"mask", TSR_ARG_STRING, &o.mask, "PNG|JPEG",
         "inpainting (inpainting models): white = repaint, black = keep", 0, 0, 0, 0},
        {"resize-mode", TSR_ARG_STRING, &o.resize_mode, "MODE",
         "fit the init image and mask to the size as A1111 does: just-resize (default), "
         "crop-and-resize, resize-and-fill", 0, 0, 0, 0},
        {"clip-skip", TSR_ARG_INT, &o.clip_skip, "N",
         "1..12, 1 = the family's default layer (A1111); at most the encoder's layers + 1", 1,
         12, 0, 0},
        {"eta", TSR_ARG_FLOAT, &o.eta, "F", "DDIM eta, 0..1 (default 0)", 0, 0, 0, 1},
        {"preview-dir", TSR_ARG_STRING, &o.preview_dir, "DIR",
         "write a preview PNG (1/8 size) after every step", 0, 0, 0, 0},
        {"taesd", TSR_ARG_STRING, &o.taesd, "PATH", "TAESD decoder weights for previews", 0, 0, 0,
         0},
        {"prediction", TSR_ARG_STRING, &o.prediction, "KIND",
         "override the model's prediction type: epsilon or v", 0, 0, 0, 0},
        {"device", TSR_ARG_STRING, &o.device, "DEV", "auto (default), cpu, cuda or cuda:N", 0, 0,
         0, 0},
        {"threads", TSR_ARG_INT, &o.threads, "N", "CPU threads, 0..1024 (0 = all cores)", 0, 1024,
         0, 0},
        {"tokenizer", TSR_ARG_STRING, &o.tokenizer, "default|a1111", TSR_CLI_TOKENIZER_HELP, 0, 0,
         0, 0},
        {"output", TSR_ARG_STRING, &o.output, "OUT.png",
         "where to write: .png, or .jpg/.jpeg (quality 80); batches write OUT-0.png, OUT-1.png, "
         "... (default tessera.png)", 0, 0, 0, 0},
        {"quiet", TSR_ARG_FLAG, &o.quiet, NULL, "no progress bar", 0, 0, 0, 0},
    };
    const tsr_cli_command cmd = {
        .name = "generate",
        .synopsis = "generate [--model DIR_OR_FILE] --prompt TEXT [options] [--output OUT.png]",
        .summary = "generate images from a prompt (txt2img, img2img, inpainting)",
        .description =
            "Size: --width/--height default to the model's own size, its UNet sample_size x 8\n"
            "(the VAE factor): 512 for SD 1.x, 768 for SD 2.x v-models, 1024 for SDXL, 128 for\n"
            "models/demo.  Init images and masks are fitted to that size with --resize-mode.\n"
            "Other defaults: the model's own scheduler; cfg 7.5; 30 steps.  With --rng cpu the\n"
            "result equals diffusers' with generator=torch.Generator(\"cpu\").manual_seed(seed);\n"
            "seeds are unsigned 64-bit as manual_seed takes them.  --batch-size N makes N\n"
            "images (seeds s..s+N-1); up to 16 with guidance (32 without) share each UNet call\n"
            "and the rest run in further calls.  A .png carries A1111's 'parameters' text chunk;\n"
            "a .jpg/.jpeg carries the same text as an EXIF UserComment, as A1111 writes it.",
        .specs = specs,
        .n_specs = (int)(sizeof specs / sizeof specs[0]),
    };
    int rc = tsr_args_parse(&cmd, argc, argv, NULL, 0, NULL);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc)
        return TSR_EXIT_USAGE;
    if (!o.model)
        o.model = tsr_cli_default_model();
    if (!o.output)
        o.output = "tessera.png";
    rc = gen_precheck(&o);
    if (rc)
        return rc;
    if (!o.seed_given) {
        /* A1111's random seeds are 32-bit; so are ours */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        o.seed = ((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20)) & 0xffffffffu;
    }

    tsr_image init = {0}, mask = {0};
    tsr_engine *engine = NULL;
    tsr_batch *batch = NULL;
    int exit_code = TSR_EXIT_FAILURE, jobs[GEN_MAX_BATCH] = {0}, n_jobs = 0;
    int job_index[GEN_MAX_BATCH + 2] = {0};
    if (o.init && load_image("init-image", o.init, 3, &init) < 0)
        return TSR_EXIT_FAILURE;
    if (o.mask && load_image("mask", o.mask, 1, &mask) < 0) {
        tsr_image_free(&init);
        return TSR_EXIT_FAILURE;
    }

    tsr_engine_options eo;
    tsr_engine_options_init(&eo);
    eo.model = o.model;
    eo.device = o.device;
    eo.threads = (int)o.threads;
    eo.prediction = o.prediction;
    eo.taesd = o.taesd;
    eo.tokenizer = o.tokenizer;
    const double t_open = tsr_cli_now();
    rc = tsr_engine_open(&eo, &engine);
    const double load_s = tsr_cli_now() - t_open;
    if (rc < 0) {
        exit_code = gen_report(rc, tsr_last_error(), &o, true);
        goto done;
    }
    if (!o.width)
        o.width = tsr_engine_default_size(engine);
    if (!o.height)
        o.height = tsr_engine_default_size(engine);
    if ((o.init && fit_image("init-image", &init, &o) < 0) ||
        (o.mask && fit_image("mask", &mask, &o) < 0))
        goto done;
    /* one call holds at most GEN_MAX_ROWS rows; the batch runs the rest
     * in later calls of the same step */
    const int rows_per_image = o.cfg > 1 ? 2 : 1;
    int rows = (int)o.batch * rows_per_image;
    if (rows > GEN_MAX_ROWS)
        rows = GEN_MAX_ROWS;
    tsr_batch_options bo;
    tsr_batch_options_init(&bo);
    bo.max_rows = rows;
    rc = tsr_batch_create(engine, &bo, &batch);
    if (rc < 0)
        goto fail;
    progress pr = {isatty(STDERR_FILENO) && !o.quiet, (int)o.batch, 0, 0, 0, o.preview_dir,
                   job_index, GEN_MAX_BATCH + 1, 0};
    /* linear previews at latent size; TAESD's are at image size */
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
        p.seed = o.seed + (uint64_t)i; /* wraps mod 2^64 */
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
            const char *flag = gen_flag_for_field(field);
            if (flag) {
                fprintf(stderr, "tessera generate: %s: %s\n", flag, tsr_last_error());
                exit_code = (rc == TSR_ERR_INVALID || rc == TSR_ERR_UNSUPPORTED ||
                             rc == TSR_ERR_RANGE)
                                ? TSR_EXIT_USAGE
                                : TSR_EXIT_FAILURE;
            } else {
                exit_code = gen_report(rc, tsr_last_error(), &o, false);
            }
            goto done;
        }
        job_index[jobs[n_jobs]] = i;
        n_jobs++;
    }
    pr.start = tsr_cli_now();
    TSR_INFO("generating %d image%s of %lldx%lld on %s, seed %llu", n_jobs, n_jobs > 1 ? "s" : "",
             (long long)o.width, (long long)o.height, tsr_engine_device(engine),
             (unsigned long long)o.seed);
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
        gen_output_name(o.output, i, n_jobs, path, sizeof path);
        rc = write_image(&o, path, &res);
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
