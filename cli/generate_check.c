/*
 * cli/generate_check.c - see generate.h.
 *
 * Everything decidable from the command line is decided here before the
 * model is loaded (a multi-GB load should not precede "--output must end
 * in .png"), and every message names the flag it is about.  The exit code
 * follows the convention in cli/args.h: 2 when the command line is wrong,
 * 1 when a named file or folder is missing, unreadable or not writable.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "core/error.h"
#include "generate.h"
#include "scheduler/rng.h"
#include "scheduler/scheduler.h"
#include "tessera.h"

#define PROMPT_MAX (1u << 20) /* the tokenizer's input cap */

#define USAGE(...)                                                                           \
    do {                                                                                     \
        fprintf(stderr, "tessera generate: " __VA_ARGS__);                                   \
        fputc('\n', stderr);                                                                 \
        return TSR_EXIT_USAGE;                                                               \
    } while (0)

#define FAILURE(...)                                                                         \
    do {                                                                                     \
        fprintf(stderr, "tessera generate: " __VA_ARGS__);                                   \
        fputc('\n', stderr);                                                                 \
        return TSR_EXIT_FAILURE;                                                             \
    } while (0)

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF);
 * 0 when valid, else the 1-based byte offset of the first bad byte. */
static size_t utf8_bad_at(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (p[i]) {
        unsigned c = p[i], n, cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            n = 2, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            n = 3, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            n = 4, cp = c & 0x07;
        else
            return i + 1;
        for (unsigned k = 1; k < n; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return i + 1;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return i + 1;
        i += n;
    }
    return 0;
}

static int check_text(const char *flag, const char *text)
{
    if (!text)
        return 0;
    if (strlen(text) > PROMPT_MAX)
        USAGE("--%s is %zu bytes, more than the %u the tokenizer takes", flag, strlen(text),
              PROMPT_MAX);
    size_t bad = utf8_bad_at(text);
    if (bad)
        USAGE("--%s is not valid UTF-8 (byte %zu)", flag, bad);
    return 0;
}

static bool has_ext(const char *path, const char *ext)
{
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    return dot && (!slash || dot > slash) && dot != path && strcasecmp(dot, ext) == 0;
}

/* The folder that will hold `path`, and whether a file can be created there:
 * a temporary file is made and removed (access(2) cannot see read-only
 * mounts or ACLs). */
static int check_output(const gen_opts *o)
{
    char dir[4096];
    const char *slash = strrchr(o->output, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == o->output)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - o->output), o->output);
    struct stat st;
    if (stat(dir, &st) != 0)
        FAILURE("--output %s: the folder %s does not exist", o->output, dir);
    if (!S_ISDIR(st.st_mode))
        FAILURE("--output %s: %s is not a folder", o->output, dir);
    if (stat(o->output, &st) == 0 && S_ISDIR(st.st_mode))
        USAGE("--output %s is a folder; give a file name ending in .png, .jpg or .jpeg", o->output);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.tessera-write-test-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0)
        FAILURE("--output %s: cannot write in %s: %s", o->output, dir, strerror(errno));
    close(fd);
    unlink(probe);
    return 0;
}

/* A file flag's file must exist and be readable: fail before the model
 * loads, naming the flag. */
static int check_readable(const char *flag, const char *path, bool dir_ok)
{
    if (!path)
        return 0;
    struct stat st;
    if (stat(path, &st) != 0)
        FAILURE("--%s %s: %s", flag, path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        if (!dir_ok)
            FAILURE("--%s %s: is a folder, not a file", flag, path);
        if (access(path, R_OK | X_OK) != 0)
            FAILURE("--%s %s: %s", flag, path, strerror(errno));
        return 0;
    }
    if (access(path, R_OK) != 0)
        FAILURE("--%s %s: %s", flag, path, strerror(errno));
    return 0;
}

static bool device_syntax_ok(const char *d)
{
    if (strcmp(d, "auto") == 0 || strcmp(d, "cpu") == 0 || strcmp(d, "cuda") == 0)
        return true;
    if (strncmp(d, "cuda:", 5) != 0 || !d[5] || strlen(d + 5) > 3)
        return false;
    for (const char *p = d + 5; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return atoi(d + 5) <= 255;
}

int gen_precheck(gen_opts *o)
{
    int rc;
    if (!o->prompt)
        USAGE("--prompt is required");
    if ((rc = check_text("prompt", o->prompt)) || (rc = check_text("negative-prompt", o->negative)))
        return rc;
    tsr_sampler_kind kind;
    tsr_schedule schedule;
    if (o->sampler && tsr_sampler_parse(o->sampler, &kind, &schedule) < 0)
        USAGE("--sampler: %s", tsr_last_error());
    if (o->schedule && tsr_schedule_parse(o->schedule, &schedule) < 0)
        USAGE("--scheduler: %s", tsr_last_error());
    if (tsr_rng_kind_parse(o->rng) < 0 || strcmp(o->rng, "cpu_scalar") == 0)
        USAGE("--rng must be cpu or cuda, not '%s'", o->rng);
    tsr_error_clear();
    if (o->width % 8)
        USAGE("--width must be a multiple of 8, got %lld", (long long)o->width);
    if (o->height % 8)
        USAGE("--height must be a multiple of 8, got %lld", (long long)o->height);
    if (o->mask && !o->init)
        USAGE("--mask needs --init-image (inpainting repaints part of an init image)");
    if (o->inpaint_full_res && !o->mask)
        USAGE("--inpaint-full-res needs --mask (it inpaints the region around the mask's white "
              "pixels)");
    if (o->full_res_padding_given && !o->inpaint_full_res)
        USAGE("--inpaint-full-res-padding needs --inpaint-full-res");
    if (o->strength_given && !o->init)
        USAGE("--strength needs --init-image (it sets how much img2img changes the init image)");
    if (!(o->hires_scale > 0) && (o->hires_steps_given || o->hires_strength_given ||
                                  o->hires_upscaler))
        USAGE("--hires-steps, --hires-strength and --hires-upscaler need --hires-scale (the "
              "hires fix's second pass)");
    if (o->hires_scale > 0 && o->init)
        USAGE("--hires-scale is a second pass after txt2img: not with --init-image");
    if (o->inpainting_fill_given && !o->mask)
        USAGE("--inpainting-fill needs --mask (it says what the masked area starts from)");
    o->resize = TSR_RESIZE_JUST;
    if (o->resize_mode) {
        if (!o->init)
            USAGE("--resize-mode needs --init-image (it says how the init image fits the size)");
        if (tsr_resize_mode_parse(o->resize_mode, &o->resize) < 0)
            USAGE("--resize-mode must be just-resize, crop-and-resize or resize-and-fill, not '%s'",
                  o->resize_mode);
    }
    if (o->prediction && strcmp(o->prediction, "epsilon") && strcmp(o->prediction, "v"))
        USAGE("--prediction must be epsilon or v, not '%s'", o->prediction);
    if (o->precision && strcmp(o->precision, "f32") && strcmp(o->precision, "bf16"))
        USAGE("--precision must be f32 or bf16, not '%s'", o->precision);
    const bool cfg_split = o->parallel && strcmp(o->parallel, "cfg") == 0;
    if (o->parallel && !cfg_split && strcmp(o->parallel, "data"))
        USAGE("--parallel must be data or cfg, not '%s'", o->parallel);
    if (cfg_split) {
        /* docs/multi-gpu.md section 6: two devices, each a valid name */
        char a[64] = "", b[64] = "";
        const char *comma = strchr(o->device, ',');
        const size_t na = comma ? (size_t)(comma - o->device) : 0;
        if (comma && na < sizeof a && strlen(comma + 1) < sizeof b) {
            memcpy(a, o->device, na);
            a[na] = '\0';
            strcpy(b, comma + 1);
        }
        if (!a[0] || !b[0] || strchr(b, ',') || !device_syntax_ok(a) || !device_syntax_ok(b))
            USAGE("--parallel cfg needs two devices, --device A,B (e.g. cpu,cpu), not '%s'",
                  o->device);
    } else if (!device_syntax_ok(o->device)) {
        USAGE("--device must be auto, cpu, cuda or cuda:N, not '%s'%s", o->device,
              strchr(o->device, ',') ? " (two devices: add --parallel cfg)" : "");
    }
    if (has_ext(o->output, ".png"))
        o->format = GEN_PNG;
    else if (has_ext(o->output, ".jpg") || has_ext(o->output, ".jpeg"))
        o->format = GEN_JPEG;
    else
        USAGE("--output must end in .png, .jpg or .jpeg, got '%s'", o->output);

    /* files and folders: exit 1 */
    if ((rc = check_readable("model", o->model, true)) ||
        (rc = check_readable("taesd", o->taesd, false)) ||
        (rc = check_readable("init-image", o->init, false)) ||
        (rc = check_readable("mask", o->mask, false)))
        return rc;
    if ((rc = check_output(o)))
        return rc;
    if (o->preview_dir) {
        struct stat st;
        if (stat(o->preview_dir, &st) != 0 && mkdir(o->preview_dir, 0777) != 0)
            FAILURE("--preview-dir: cannot create %s: %s", o->preview_dir, strerror(errno));
        if (stat(o->preview_dir, &st) == 0 && !S_ISDIR(st.st_mode))
            FAILURE("--preview-dir %s is not a folder", o->preview_dir);
    }
    return 0;
}

/* Engine field names (tsr_image_params and tsr_engine_options) -> flags. */
static const struct {
    const char *field, *flag;
} field_flags[] = {
    {"prompt", "--prompt"},
    {"negative_prompt", "--negative-prompt"},
    {"width", "--width"},
    {"height", "--height"},
    {"steps", "--steps"},
    {"cfg_scale", "--cfg-scale"},
    {"guidance_rescale", "--guidance-rescale"},
    {"sampler", "--sampler"},
    {"scheduler", "--scheduler"},
    {"seed", "--seed"},
    {"rng", "--rng"},
    {"clip_skip", "--clip-skip"},
    {"eta", "--eta"},
    {"init_image", "--init-image"},
    {"strength", "--strength"},
    {"mask", "--mask"},
    {"hires_scale", "--hires-scale"},
    {"hires_width", "--hires-scale"},
    {"hires_height", "--hires-scale"},
    {"hires_steps", "--hires-steps"},
    {"hires_strength", "--hires-strength"},
    {"hires_upscaler", "--hires-upscaler"},
    {"mask_fill", "--inpainting-fill"},
    {"tiling", "--tiling"},
    {"model", "--model"},
    {"device", "--device"},
    {"threads", "--threads"},
    {"prediction", "--prediction"},
    {"taesd", "--taesd"},
    {"loras", "--lora"},
};

const char *gen_flag_for_field(const char *field)
{
    for (size_t i = 0; field && i < sizeof field_flags / sizeof field_flags[0]; i++)
        if (strcmp(field, field_flags[i].field) == 0)
            return field_flags[i].flag;
    return NULL;
}

/* Words of the engine's messages (pipeline/batch.c check_params, text/,
 * scheduler/) -> the flags they are about; the first match wins, so more
 * specific phrases come first.  Stopgap until tsr_image_params_check
 * reports the field (then gen_flag_for_field is all that is needed). */
static const struct {
    const char *words, *flag;
} message_flags[] = {
    {"inpainting model: give", "--init-image and --mask"},
    {"mask needs an init image", "--mask"},
    {"width and height", "--width/--height"},
    {"multiples of", "--width/--height"},
    {"hidden state", "--clip-skip"},
    {"clip skip", "--clip-skip"},
    {"negative prompt", "--negative-prompt"},
    {"guidance rescale", "--guidance-rescale"},
    {"cfg scale", "--cfg-scale"},
    {"steps", "--steps"},
    {"strength", "--strength"},
    {"init image", "--init-image"},
    {"mask", "--mask"},
    {"schedule", "--sampler/--scheduler"},
    {"sampler", "--sampler"},
    {"rng", "--rng"},
    {"eta", "--eta"},
    {"no prompt", "--prompt"},
    {"prompt", "--prompt"},
};

const char *gen_flag_for_message(const char *msg, const gen_opts *o, bool opening)
{
    if (!msg)
        return NULL;
    if (opening) {
        /* tsr_engine_open: the device, the TAESD file or the model */
        if (o->taesd && strstr(msg, o->taesd))
            return "--taesd";
        if (strcasestr(msg, "cuda") || strcasestr(msg, "device") || strcasestr(msg, "backend"))
            return "--device";
        if (strstr(msg, "prediction"))
            return "--prediction";
        return "--model";
    }
    for (size_t i = 0; i < sizeof message_flags / sizeof message_flags[0]; i++)
        if (strcasestr(msg, message_flags[i].words))
            return message_flags[i].flag;
    return NULL;
}

int gen_report(int rc, const char *msg, const gen_opts *o, bool opening)
{
    const char *flag = gen_flag_for_message(msg, o, opening);
    if (flag && strcmp(flag, "--clip-skip") == 0 && strstr(msg, "hidden state"))
        fprintf(stderr,
                "tessera generate: --clip-skip %lld is more than this model's text encoder has "
                "layers for (%s)\n",
                (long long)o->clip_skip, msg);
    else if (flag && strncmp(msg, flag, strlen(flag)) != 0)
        fprintf(stderr, "tessera generate: %s: %s\n", flag, msg);
    else
        fprintf(stderr, "tessera generate: %s\n", msg);
    if (opening)
        return TSR_EXIT_FAILURE; /* the model, device or TAESD file failed to load */
    return (rc == TSR_ERR_INVALID || rc == TSR_ERR_UNSUPPORTED || rc == TSR_ERR_RANGE)
               ? TSR_EXIT_USAGE
               : TSR_EXIT_FAILURE;
}

void gen_output_name(const char *out, int i, int n, char *buf, size_t size)
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
