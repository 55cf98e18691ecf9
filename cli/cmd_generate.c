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
    int *index_of; /* the batch's image id -> image index */
    int n_images;
    int write_errors;
} progress;


static void on_step(void *user, const tsr_step_info *info)
{
    progress *pr = user;
    if (info->state != TSR_IMAGE_DENOISING)
        return; /* final states: reported after the loop from the results */
    pr->evals_done++;
    if (pr->preview_dir && info->preview_rgb) {
        int index = info->image <= pr->n_images ? pr->index_of[info->image] : info->image;
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

/* A1111's inpainting overlay (--mask-blur R > 0): the mask blurred with
 * Pillow's GaussianBlur(R), doubled and clipped (A1111's mask_for_overlay
 * when not inpainting at full resolution), then the init image shown
 * through where that mask is below 255.  *out owned. */
static int mask_overlay(const gen_opts *o, const tsr_image *gen, const tsr_image *init,
                        const tsr_image *mask, tsr_image *out)
{
    tsr_image blurred = {0};
    TSR_TRY(tsr_image_gaussian_blur_pil(mask, o->mask_blur, &blurred));
    const size_t n = (size_t)blurred.width * blurred.height;
    for (size_t i = 0; i < n; i++)
        blurred.data[i] = blurred.data[i] >= 128 ? 255 : (uint8_t)(blurred.data[i] * 2);
    int rc = tsr_image_mask_overlay(gen, init, &blurred, out);
    tsr_image_free(&blurred);
    return rc;
}

/* A1111's "inpaint only masked" (--inpaint-full-res): the full-size init
 * image, the binarized full-size mask, the region inpainted and the
 * overlay mask (the binarized mask blurred with --mask-blur, doubled and
 * clipped, zero outside the region). */
typedef struct full_res {
    tsr_image init, mask, overlay;
    tsr_rect region;
} full_res;

static void full_res_free(full_res *fr)
{
    tsr_image_free(&fr->init);
    tsr_image_free(&fr->mask);
    tsr_image_free(&fr->overlay);
}

/* Fit the mask to the init image's size (--resize-mode), binarize it as
 * A1111 does (> 128), find the region, and replace *init and *mask by
 * their crops resized to the target size (Lanczos, A1111's "just resize"
 * of an already matching aspect).  Prints the message; returns the exit
 * code (0 to go on). */
static int full_res_prepare(const gen_opts *o, tsr_image *init, tsr_image *mask, full_res *fr)
{
    int rc;
    if (mask->width != init->width || mask->height != init->height) {
        tsr_image fitted;
        rc = tsr_image_resize_a1111(mask, o->resize, init->width, init->height, &fitted);
        if (rc < 0) {
            fprintf(stderr, "tessera generate: --mask: %s\n", tsr_last_error());
            return TSR_EXIT_FAILURE;
        }
        TSR_INFO("--mask: %ux%u -> %ux%u (the init image's size, %s)", mask->width, mask->height,
                 init->width, init->height, tsr_resize_mode_name(o->resize));
        tsr_image_free(mask);
        *mask = fitted;
    }
    const size_t n = (size_t)mask->width * mask->height;
    for (size_t i = 0; i < n; i++)
        mask->data[i] = mask->data[i] > 128 ? 255 : 0;
    rc = tsr_crop_region(mask, (int)o->full_res_padding, (int)o->width, (int)o->height,
                         &fr->region);
    if (rc == 0) {
        fprintf(stderr,
                "tessera generate: --mask %s has no white pixel (none above 128): "
                "--inpaint-full-res has no region to inpaint\n",
                o->mask);
        return TSR_EXIT_USAGE;
    }
    tsr_image crop = {0}, sized = {0}, blurred = {0};
    const tsr_rect r = fr->region;
    if (rc < 0 || tsr_image_gaussian_blur_pil(mask, o->mask_blur, &blurred) < 0)
        goto fail;
    for (int y = 0; y < (int)blurred.height; y++)
        for (int x = 0; x < (int)blurred.width; x++) {
            uint8_t *m = &blurred.data[(size_t)y * blurred.width + x];
            if (x < r.x1 || x >= r.x2 || y < r.y1 || y >= r.y2)
                *m = 0;
            else
                *m = *m >= 128 ? 255 : (uint8_t)(*m * 2);
        }
    fr->overlay = blurred;
    if (tsr_image_crop(init, r, &crop) < 0 ||
        tsr_image_resize(&crop, (uint32_t)o->width, (uint32_t)o->height, &sized) < 0)
        goto fail;
    tsr_image_free(&crop);
    fr->init = *init;
    *init = sized;
    if (tsr_image_crop(mask, r, &crop) < 0 ||
        tsr_image_resize(&crop, (uint32_t)o->width, (uint32_t)o->height, &sized) < 0)
        goto fail;
    tsr_image_free(&crop);
    fr->mask = *mask;
    *mask = sized;
    TSR_INFO("--inpaint-full-res: region %d,%d %dx%d of %ux%u (padding %lld) -> %lldx%lld",
             r.x1, r.y1, r.x2 - r.x1, r.y2 - r.y1, fr->init.width, fr->init.height,
             (long long)o->full_res_padding, (long long)o->width, (long long)o->height);
    return 0;
fail:
    fprintf(stderr, "tessera generate: --inpaint-full-res: %s\n", tsr_last_error());
    tsr_image_free(&crop);
    return TSR_EXIT_FAILURE;
}

/* The generated region resized back to the region's size (Lanczos),
 * placed into the full-size init image and mixed through the overlay mask:
 * outside the blurred mask and the region, the init image exactly. */
static int full_res_paste(const full_res *fr, const tsr_image *gen, tsr_image *out)
{
    const tsr_rect r = fr->region;
    tsr_image back = {0}, placed = {0};
    int rc = tsr_image_resize(gen, (uint32_t)(r.x2 - r.x1), (uint32_t)(r.y2 - r.y1), &back);
    if (rc == TSR_OK)
        rc = tsr_image_alloc(&placed, fr->init.width, fr->init.height, 3);
    if (rc == TSR_OK) {
        memcpy(placed.data, fr->init.data, tsr_image_bytes(&fr->init));
        const size_t row = (size_t)back.width * 3;
        for (uint32_t y = 0; y < back.height; y++)
            memcpy(placed.data + ((size_t)(r.y1 + (int)y) * placed.width + (size_t)r.x1) * 3,
                   back.data + y * row, row);
        rc = tsr_image_mask_overlay(&placed, &fr->init, &fr->overlay, out);
    }
    tsr_image_free(&back);
    tsr_image_free(&placed);
    return rc;
}

/* A1111's infotext for "only masked": appended to the parameters' last line. */
static char *full_res_parameters(const gen_opts *o, const char *params)
{
    const size_t size = strlen(params) + 96;
    char *s = malloc(size);
    if (s)
        snprintf(s, size, "%s, Inpaint area: Only masked, Masked area padding: %lld", params,
                 (long long)o->full_res_padding);
    return s;
}

static int write_image(const gen_opts *o, const char *path, const tsr_result *res,
                       const tsr_image *init, const tsr_image *mask, const full_res *fr)
{
    tsr_image img = {(uint32_t)res->width, (uint32_t)res->height, 3, res->rgb};
    tsr_image pasted = {0};
    char *params = NULL;
    const char *text = res->parameters;
    if (o->inpaint_full_res) {
        TSR_TRY(full_res_paste(fr, &img, &pasted));
        img = pasted;
        if (text && (params = full_res_parameters(o, text)))
            text = params;
    } else if (o->mask && o->mask_blur > 0) {
        TSR_TRY(mask_overlay(o, &img, init, mask, &pasted));
        img = pasted;
    }
    int rc;
    if (o->format == GEN_JPEG) {
        rc = tsr_jpeg_write(path, &img, GEN_JPEG_QUALITY, text);
    } else {
        tsr_png_text chunk = {"parameters", text};
        rc = tsr_png_write(path, &img, &chunk, 1);
    }
    tsr_image_free(&pasted);
    free(params);
    return rc;
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
    o.mask_blur = 4;
    o.full_res_padding = GEN_FULL_RES_PADDING;
    o.device = "auto";
    o.hires_strength = 0.7;
    o.inpainting_fill = 1;
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
         "sigma schedule: default, karras, exponential, sgm_uniform, or ComfyUI's comfy_normal, "
         "comfy_karras, comfy_exponential, comfy_sgm_uniform, comfy_simple, comfy_ddim_uniform, "
         "comfy_beta (docs/samplers.md)", 0, 0, 0, 0},
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
         "inpainting (any model; 9-channel inpainting models or ordinary ones): white = repaint, "
         "black = keep", 0, 0, 0, 0},
        {"mask-blur", TSR_ARG_FLOAT, &o.mask_blur, "R",
         "inpainting: paste the result over the init image through the mask blurred with "
         "Pillow's GaussianBlur(R) and doubled, as A1111 does; 0..64 (default 4); 0 = no "
         "paste (diffusers' image)",
         0, 0, 0, 64},
        {"inpaint-full-res", TSR_ARG_FLAG, &o.inpaint_full_res, NULL,
         "inpainting: A1111's \"only masked\": inpaint the mask's bounding box (grown by the "
         "padding, then to the --width:--height aspect) at --width x --height and paste it back "
         "into the init image at its own size through the blurred mask", 0, 0, 0, 0},
        {"inpaint-full-res-padding", TSR_ARG_INT, &o.full_res_padding, "N",
         "with --inpaint-full-res: pixels added around the mask's box, 0..256 (default 32)", 0,
         GEN_FULL_RES_PADDING_MAX, 0, 0, .seen = &o.full_res_padding_given},
        {"inpainting-fill", TSR_ARG_INT, &o.inpainting_fill, "N",
         "inpainting: what the masked area starts from, A1111's inpainting_fill: 0 fill "
         "(blurred surroundings), 1 original (default), 2 latent noise, 3 latent nothing", 0, 3,
         0, 0, .seen = &o.inpainting_fill_given},
        {"hires-scale", TSR_ARG_FLOAT, &o.hires_scale, "F",
         "hires fix: a second img2img pass at int(width * F) x int(height * F), (0, 16] "
         "(default 0 = off; txt2img only)", 0, 0, 0, 16},
        {"hires-steps", TSR_ARG_INT, &o.hires_steps, "N",
         "hires fix: the second pass's steps, 0..1000 (default 0 = --steps)", 0, TSR_MAX_STEPS,
         0, 0, .seen = &o.hires_steps_given},
        {"hires-strength", TSR_ARG_FLOAT, &o.hires_strength, "F",
         "hires fix: the second pass's denoising strength, (0, 1] (default 0.7)", 0, 0, 0, 1,
         .fmin_open = true, .seen = &o.hires_strength_given},
        {"hires-upscaler", TSR_ARG_STRING, &o.hires_upscaler, "NAME",
         "hires fix: Latent (default), \"Latent (antialiased)\", \"Latent (bicubic)\", "
         "\"Latent (bicubic antialiased)\", \"Latent (nearest)\", \"Latent (nearest-exact)\", "
         "Lanczos, Nearest, None", 0, 0, 0, 0},
        {"tiling", TSR_ARG_FLAG, &o.tiling, NULL,
         "seamless tiling (A1111's): every padded convolution of the UNet and the VAE pads "
         "circularly, so the image's left and right (and top and bottom) edges continue each "
         "other",
         0, 0, 0, 0},
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
        {"parallel", TSR_ARG_STRING, &o.parallel, "data|cfg",
         "cfg: split every image's UNet rows over the two devices of --device A,B (cpu,cpu: "
         "one copy of the weights, --threads shared out); data (default): one device", 0, 0, 0,
         0},
        {"precision", TSR_ARG_STRING, &o.precision, "f32|bf16",
         "f32 (default; equals diffusers) or bf16: the CPU's fast mode where it has AVX512_BF16 "
         "(bf16 weights and GEMM inputs, f32 sums)", 0, 0, 0, 0},
        {"tokenizer", TSR_ARG_STRING, &o.tokenizer, "default|a1111", TSR_CLI_TOKENIZER_HELP, 0, 0,
         0, 0},
        {"lora-dir", TSR_ARG_STRING, &o.lora_dir, "DIR",
         "folder of LoRA files (NAME.safetensors): kohya/A1111 or diffusers/PEFT, LoRA or LoCon",
         0, 0, 0, 0},
        {"lora", TSR_ARG_STRING, &o.lora, "NAME[:W[:W_UNET]][,...]",
         "LoRAs from --lora-dir at multiplier W (text encoders; the UNet's W_UNET, default W), "
         "as the prompt's <lora:NAME:W> tags, which also work", 0, 0, 0, 0},
        {"embeddings-dir", TSR_ARG_STRING, &o.embeddings_dir, "DIR",
         "textual-inversion embeddings (NAME.safetensors: A1111 emb_params, SDXL clip_l/clip_g); "
         "used where NAME is a word of the prompt", 0, 0, 0, 0},
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
            "Size: --width/--height default to the model's own size, its UNet sample_size times\n"
            "the VAE factor (8, or 2^(levels-1) for a VAE with fewer levels): 512 for SD 1.x,\n"
            "768 for SD 2.x v-models, 1024 for SDXL, 128 for models/demo.  Init images and\n"
            "masks are fitted to that size with --resize-mode.\n"
            "With --inpaint-full-res (A1111's \"only masked\") the output keeps the init\n"
            "image's size: the mask's box plus --inpaint-full-res-padding, grown to the\n"
            "--width:--height aspect, is inpainted at --width x --height and pasted back.\n"
            "Other defaults: the model's own scheduler; cfg 7.5; 30 steps.  With --rng cpu the\n"
            "result equals diffusers' with generator=torch.Generator(\"cpu\").manual_seed(seed);\n"
            "seeds are unsigned 64-bit as manual_seed takes them.  --batch-size N makes N\n"
            "images (seeds s..s+N-1); up to 16 with guidance (32 without) share each UNet call\n"
            "and the rest run in further calls.  A .png carries A1111's 'parameters' text chunk;\n"
            "a .jpg/.jpeg carries the same text as an EXIF UserComment, as A1111 writes it.\n"
            "--hires-scale F is A1111's hires fix: the image is made at --width x --height,\n"
            "upscaled (--hires-upscaler) and denoised again at the larger size for\n"
            "--hires-steps steps at --hires-strength (docs/api.md, \"Hires fix\").",
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
    full_res fr = {0};
    tsr_engine *engine = NULL;
    tsr_batch *batch = NULL;
    gen_cfg *cfg = NULL; /* --parallel cfg: rank 1 (cli/generate_cfg.c) */
    int exit_code = TSR_EXIT_FAILURE, image_ids[GEN_MAX_BATCH] = {0}, n_images = 0;
    int index_of[GEN_MAX_BATCH + 2] = {0};
    tsr_lora_spec lora_specs[16];
    int n_lora_specs = 0;
    char *lora_buf = NULL;
    if (o.lora && gen_parse_loras(o.lora, lora_specs, 16, &n_lora_specs, &lora_buf) < 0) {
        fprintf(stderr, "tessera generate: --lora: %s\n", tsr_last_error());
        return TSR_EXIT_USAGE;
    }
    if (o.init && load_image("init-image", o.init, 3, &init) < 0) {
        free(lora_buf);
        return TSR_EXIT_FAILURE;
    }
    if (o.mask && load_image("mask", o.mask, 1, &mask) < 0) {
        tsr_image_free(&init);
        free(lora_buf);
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
    eo.precision = o.precision;
    eo.lora_dir = o.lora_dir;
    eo.embeddings_dir = o.embeddings_dir;
    const double t_open = tsr_cli_now();
    /* --parallel cfg (checked: --device A,B): two engines, one group */
    const bool cfg_split = o.parallel && strcmp(o.parallel, "cfg") == 0;
    rc = cfg_split ? gen_cfg_open(o.device, &eo, &engine, &cfg)
                   : tsr_engine_open(&eo, &engine);
    const double load_s = tsr_cli_now() - t_open;
    if (rc < 0) {
        exit_code = gen_report(rc, tsr_last_error(), &o, true);
        goto done;
    }
    if (!o.width)
        o.width = tsr_engine_default_size(engine);
    if (!o.height)
        o.height = tsr_engine_default_size(engine);
    if (o.inpaint_full_res) {
        /* the output keeps the init image's size; only the region is fitted */
        if ((exit_code = full_res_prepare(&o, &init, &mask, &fr)) != 0)
            goto done;
        exit_code = TSR_EXIT_FAILURE;
    } else if ((o.init && fit_image("init-image", &init, &o) < 0) ||
               (o.mask && fit_image("mask", &mask, &o) < 0)) {
        goto done;
    }
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
    if (rc == TSR_OK && cfg)
        rc = gen_cfg_attach(cfg, batch, &bo);
    if (rc < 0)
        goto fail;
    progress pr = {isatty(STDERR_FILENO) && !o.quiet, (int)o.batch, 0, 0, 0, o.preview_dir,
                   index_of, GEN_MAX_BATCH + 1, 0};
    /* linear previews at latent size; TAESD's are at image size */
    tsr_batch_set_callback(batch, on_step, &pr,
                           o.preview_dir ? TSR_PREVIEW_LATENT : TSR_PREVIEW_NONE);

    for (int i = 0; i < o.batch; i++) {
        tsr_image_params p;
        tsr_image_params_init(&p);
        p.prompt = o.prompt;
        p.negative_prompt = o.negative;
        p.loras = lora_specs;
        p.n_loras = n_lora_specs;
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
        p.mask_fill = (int)o.inpainting_fill;
        p.hires_scale = o.hires_scale;
        p.hires_steps = (int)o.hires_steps;
        p.hires_strength = o.hires_strength;
        p.hires_upscaler = o.hires_upscaler;
        p.tiling = o.tiling ? 1 : 0;
        const char *field = NULL;
        rc = tsr_image_params_check(engine, &p, &field);
        if (rc == TSR_OK)
            rc = tsr_batch_submit(batch, &p, &image_ids[n_images]);
        if (rc == TSR_OK && cfg)
            rc = gen_cfg_submit(cfg, &p);
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
        index_of[image_ids[n_images]] = i;
        n_images++;
    }
    pr.start = tsr_cli_now();
    TSR_INFO("generating %d image%s of %lldx%lld on %s, seed %llu", n_images,
             n_images > 1 ? "s" : "", (long long)o.width, (long long)o.height,
             tsr_engine_device(engine), (unsigned long long)o.seed);
    const int hires_steps = o.hires_scale > 0 ? (int)(o.hires_steps ? o.hires_steps : o.steps) : 0;
    pr.evals_total = n_images * ((int)o.steps + hires_steps);
    double step_s[2 * TSR_MAX_STEPS + 8];
    int n_steps = 0;
    if (cfg && (rc = gen_cfg_start(cfg)) < 0)
        goto fail;
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
    if (cfg && (rc = gen_cfg_join(cfg)) < 0)
        goto fail;

    int failures = 0;
    for (int i = 0; i < n_images; i++) {
        tsr_result res;
        rc = tsr_batch_take(batch, image_ids[i], &res);
        if (rc < 0 || res.status != TSR_OK) {
            fprintf(stderr, "tessera generate: image %d failed: %s\n", i,
                    rc < 0 ? tsr_last_error() : tsr_strerror(res.status));
            failures++;
            tsr_result_free(&res);
            continue;
        }
        char path[4096];
        gen_output_name(o.output, i, n_images, path, sizeof path);
        rc = write_image(&o, path, &res, &init, &mask, &fr);
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
    TSR_INFO("%d image%s in %.2f s (load %.2f s, %d UNet calls, median %.3f s per call)", n_images,
             n_images > 1 ? "s" : "", tsr_cli_now() - pr.start, load_s, n_steps,
             n_steps ? step_s[n_steps / 2] : 0.0);
    exit_code = failures ? TSR_EXIT_FAILURE : TSR_EXIT_OK;
    goto done;
fail:
    tsr_cli_report("generate", rc);
    exit_code = TSR_EXIT_FAILURE;
done:
    gen_cfg_free(cfg); /* before rank 0's batch: rank 1 may wait on it */
    tsr_batch_free(batch);
    tsr_engine_close(engine);
    tsr_image_free(&init);
    tsr_image_free(&mask);
    full_res_free(&fr);
    free(lora_buf);
    return exit_code;
}
