/*
 * pipeline/hires.c - A1111's hires fix as a phase of an image's life, and
 * A1111's inpainting "fill".
 *
 * Why in the engine and not in the service: the second pass is an img2img
 * pass at a larger size, and an image in it is like any other denoising
 * image - so it is one.  When the first pass's sampler finishes
 * (pipeline/step.c, advance), tsr_batch_image_hires upscales the latents,
 * draws new noise, makes a new sampler and leaves the image DENOISING at
 * the new size; the next step's pick_group gathers it with every image of
 * that latent size and prompt length, so second passes share UNet calls
 * with each other and with plain images of that size.  Nothing above the
 * public API has to know (the service sets parameters; the CLI too).
 *
 * The arithmetic is A1111's (modules/processing.py,
 * StableDiffusionProcessingTxt2Img): the target is int(width * hr_scale) x
 * int(height * hr_scale), or hr_resize_x/y with the aspect kept and the
 * latents cropped when both are given (calculate_target_resolution); latent
 * upscalers are torch's interpolate (pipeline/upscale.c); image upscalers
 * decode, resize with Pillow's Lanczos (or nearest) and encode; the noise
 * is the seed's first draw at the new latent size (a fresh
 * torch.Generator, as A1111's new ImageRNG), and the second pass is
 * sample_img2img with explicit steps: K = hr_second_pass_steps or steps
 * evaluations at the end of a schedule of int(K / min(strength, 0.999))
 * steps (setup_img2img_steps).  Tessera's sampler takes img2img strength as
 * diffusers does (int(N * strength) steps of N), so the pass asks for
 * strength (K + 0.5) / N, which gives exactly K.  The Lanczos path is, step
 * for step, Tessera's own img2img of the resized image (VAE sample noise,
 * then the noise): tests/pipeline/test_hires.c composes it by hand through
 * the public API and gets the same bytes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/image.h"
#include "pipeline/hires.h"

bool tsr_hires_wanted(const tsr_image_params *p)
{
    return p->hires_scale != 0 || p->hires_width != 0 || p->hires_height != 0;
}

#define FIELD_ERR(name, code, ...)              \
    do {                                        \
        if (field)                              \
            *field = (name);                    \
        return tsr_errorf((code), __VA_ARGS__); \
    } while (0)

int tsr_hires_check(const tsr_engine *e, const tsr_image_params *p, int w, int h,
                    tsr_hires_plan *plan, const char **field)
{
    memset(plan, 0, sizeof *plan);
    if (!tsr_hires_wanted(p))
        return TSR_OK;
    const bool resize = p->hires_width != 0 || p->hires_height != 0;
    if (p->init_image)
        FIELD_ERR("hires_scale", TSR_ERR_INVALID,
                  "the hires fix is a txt2img second pass: not with an init image");
    if (!resize && !(p->hires_scale > 0 && p->hires_scale <= 16))
        FIELD_ERR("hires_scale", TSR_ERR_INVALID, "hires scale must be within (0, 16], got %g",
                  p->hires_scale);
    if (p->hires_width < 0 || p->hires_width > TSR_MAX_SIZE)
        FIELD_ERR("hires_width", TSR_ERR_INVALID, "hires width must be within 0..%d, got %d",
                  TSR_MAX_SIZE, p->hires_width);
    if (p->hires_height < 0 || p->hires_height > TSR_MAX_SIZE)
        FIELD_ERR("hires_height", TSR_ERR_INVALID, "hires height must be within 0..%d, got %d",
                  TSR_MAX_SIZE, p->hires_height);
    if (p->hires_steps < 0 || p->hires_steps > TSR_MAX_STEPS)
        FIELD_ERR("hires_steps", TSR_ERR_INVALID, "hires steps must be within 0..%d, got %d",
                  TSR_MAX_STEPS, p->hires_steps);
    if (!(p->hires_strength > 0 && p->hires_strength <= 1))
        FIELD_ERR("hires_strength", TSR_ERR_INVALID,
                  "hires strength (denoising strength) must be within (0, 1], got %g",
                  p->hires_strength);
    tsr_upscaler_kind kind;
    tsr_upscale_mode mode;
    bool aa;
    if (tsr_hires_upscaler_parse(p->hires_upscaler, &kind, &mode, &aa) < 0) {
        char why[256]; /* the message, copied out of the buffer it is rewritten into */
        snprintf(why, sizeof why, "%s", tsr_last_error());
        FIELD_ERR("hires_upscaler", TSR_ERR_INVALID, "%s", why);
    }

    /* calculate_target_resolution */
    const int rx = p->hires_width, ry = p->hires_height;
    const char *size_field = "hires_scale";
    if (!resize) {
        plan->to_w = (int)((double)w * p->hires_scale);
        plan->to_h = (int)((double)h * p->hires_scale);
    } else if (ry == 0) {
        size_field = "hires_width";
        plan->to_w = rx;
        plan->to_h = (int)((long long)rx * h / w);
    } else if (rx == 0) {
        size_field = "hires_height";
        plan->to_w = (int)((long long)ry * w / h);
        plan->to_h = ry;
    } else {
        size_field = "hires_width";
        if ((double)w / h < (double)rx / ry) {
            plan->to_w = rx;
            plan->to_h = (int)((long long)rx * h / w);
        } else {
            plan->to_w = (int)((long long)ry * w / h);
            plan->to_h = ry;
        }
        /* in latent pixels (A1111's opt_f is the VAE factor, 8) */
        plan->trunc_x = (plan->to_w - rx) / e->vae_factor;
        plan->trunc_y = (plan->to_h - ry) / e->vae_factor;
    }
    const int m = e->size_multiple > 8 ? e->size_multiple : 8, f = e->vae_factor;
    /* latent upscalers interpolate to (to_h // f, to_w // f), so a target
     * off the VAE's grid is floored, as in A1111; image-space ones resize
     * the picture to the target itself, which must then be on it */
    if (kind != TSR_UPSCALER_LATENT && (plan->to_w % m || plan->to_h % m))
        FIELD_ERR(size_field, TSR_ERR_INVALID,
                  "the hires fix upscales %dx%d to %dx%d, which is not in multiples of %d (the "
                  "latent upscalers take it, floored)",
                  w, h, plan->to_w, plan->to_h, m);
    plan->final_w = (plan->to_w / f - plan->trunc_x) * f;
    plan->final_h = (plan->to_h / f - plan->trunc_y) * f;
    if (plan->final_w % m || plan->final_h % m)
        FIELD_ERR(size_field, TSR_ERR_INVALID,
                  "the hires fix would make %dx%d (upscaled to %dx%d), which is not in multiples "
                  "of %d",
                  plan->final_w, plan->final_h, plan->to_w, plan->to_h, m);
    if (plan->to_w < TSR_MIN_SIZE || plan->to_h < TSR_MIN_SIZE || plan->to_w > TSR_MAX_SIZE ||
        plan->to_h > TSR_MAX_SIZE || plan->final_w < TSR_MIN_SIZE ||
        plan->final_h < TSR_MIN_SIZE)
        FIELD_ERR(size_field, TSR_ERR_INVALID,
                  "the hires fix would make %dx%d (upscaled to %dx%d); sides must be within "
                  "%d..%d",
                  plan->final_w, plan->final_h, plan->to_w, plan->to_h, TSR_MIN_SIZE,
                  TSR_MAX_SIZE);
    /* setup_img2img_steps with explicit steps */
    plan->steps = p->hires_steps ? p->hires_steps : p->steps;
    const double s = p->hires_strength < 0.999 ? p->hires_strength : 0.999;
    const double sched = (double)plan->steps / s;
    if (sched > TSR_MAX_STEPS)
        FIELD_ERR("hires_strength", TSR_ERR_INVALID,
                  "the hires pass's %d steps at strength %g make a schedule of %.0f steps, more "
                  "than %d",
                  plan->steps, p->hires_strength, floor(sched), TSR_MAX_STEPS);
    plan->sched_steps = (int)sched;
    return TSR_OK;
}

/* The first pass's latents, upscaled (or decoded, resized and encoded), at
 * to_h/f x to_w/f (floored); j's size fields are updated to it. */
static int upscale_latents(tsr_engine *e, tsr_batch_image *j, long long max_decode_pixels,
                           float **out)
{
    tsr_upscaler_kind kind;
    tsr_upscale_mode mode;
    bool aa;
    TSR_TRY(tsr_hires_upscaler_parse(j->upscaler, &kind, &mode, &aa));
    const int C = e->latent_channels, f = e->vae_factor;
    const int olh = j->hires_to_h / f, olw = j->hires_to_w / f;
    float *lat = malloc((size_t)olh * olw * C * sizeof(float));
    if (!lat)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory for the hires latents");
    if (kind == TSR_UPSCALER_LATENT) {
        tsr_latent_upscale(j->latent, j->lh, j->lw, C, lat, olh, olw, mode, aa);
        j->lh = olh;
        j->lw = olw;
        j->width = olw * f;
        j->height = olh * f;
        *out = lat;
        return TSR_OK;
    }
    /* image space: decode, to 8 bits, resize, encode (VAE sample noise from
     * the seed's fresh stream, then the noise: Tessera's img2img order) */
    int rc = TSR_OK;
    const size_t npix = (size_t)j->width * j->height;
    const size_t opix = (size_t)j->hires_to_w * j->hires_to_h;
    float *img = malloc(npix * 3 * sizeof(float)), *pix = malloc(opix * 3 * sizeof(float));
    uint8_t *rgb = malloc(npix * 3), *big = NULL;
    if (!img || !pix || !rgb) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory for the hires upscale");
        goto done;
    }
    tsr_vae_set_circular(e->vae, j->params.tiling != 0); /* seamless tiling */
    if ((long long)npix > max_decode_pixels) {
        const tsr_vae_tiling tiling = {.tile = 64, .overlap = 16};
        rc = tsr_vae_decode_tiled(e->vae, j->latent, 1, j->lh, j->lw, &tiling, img);
    } else {
        rc = tsr_vae_decode(e->vae, j->latent, 1, j->lh, j->lw, img);
    }
    if (rc < 0)
        goto done;
    tsr_vae_to_u8(img, npix * 3, rgb);
    rc = tsr_image_resample(rgb, j->width, j->height, 3, j->hires_to_w, j->hires_to_h, 0,
                            kind == TSR_UPSCALER_NEAREST ? TSR_RESAMPLE_NEAREST
                                                         : TSR_RESAMPLE_LANCZOS,
                            &big);
    if (rc < 0)
        goto done;
    tsr_vae_from_u8(big, opix * 3, pix);
    j->lh = olh;
    j->lw = olw;
    j->width = j->hires_to_w;
    j->height = j->hires_to_h;
    tsr_rng_init(&j->rng, j->rng_kind, j->seed);
    rc = tsr_batch_image_encode(e, j, pix, lat);
done:
    free(img);
    free(pix);
    free(rgb);
    free(big);
    if (rc < 0) {
        free(lat);
        return rc;
    }
    *out = lat;
    return TSR_OK;
}

int tsr_batch_image_hires(tsr_engine *e, tsr_batch_image *j, long long max_decode_pixels)
{
    const int C = e->latent_channels;
    tsr_upscaler_kind kind;
    tsr_upscale_mode mode;
    bool aa;
    TSR_TRY(tsr_hires_upscaler_parse(j->upscaler, &kind, &mode, &aa));
    const int first_steps = tsr_sampler_steps_total(j->sampler);
    float *up = NULL;
    TSR_TRY(upscale_latents(e, j, max_decode_pixels, &up));
    /* A1111's crop: samples[:, :, ty//2 : H - (ty+1)//2, tx//2 : W - (tx+1)//2] */
    const int ty = j->hires_trunc_y, tx = j->hires_trunc_x;
    const int lh = j->lh - ty, lw = j->lw - tx;
    const size_t n = (size_t)lh * lw * C;
    float *lat = malloc(n * sizeof(float)), *noise = malloc(n * sizeof(float));
    float *x0 = calloc(n, sizeof(float));
    int rc = TSR_OK;
    if (!lat || !noise || !x0) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory for the hires pass");
        goto fail;
    }
    for (int y = 0; y < lh; y++)
        memcpy(lat + (size_t)y * lw * C, up + ((size_t)(y + ty / 2) * j->lw + tx / 2) * C,
               (size_t)lw * C * sizeof(float));
    /* the second pass's sampler: K steps at the end of a schedule of N */
    tsr_sampler_params sp = tsr_sampler_params_default();
    sp.kind = j->sampler_kind;
    sp.schedule = j->schedule;
    sp.steps = j->hires_sched;
    sp.strength = ((double)j->hires_steps + 0.5) / j->hires_sched;
    if (sp.strength > 1.0)
        sp.strength = 1.0;
    if (tsr_schedule_is_comfy(j->schedule)) {
        /* ComfyUI's second KSampler: K steps with its denoise (the sampler
         * takes the last K + 1 sigmas of int(K / denoise) itself) */
        sp.steps = j->hires_steps;
        sp.strength = j->params.hires_strength;
    }
    sp.eta = j->params.eta;
    sp.channels = C;
    sp.height = lh;
    sp.width = lw;
    sp.nhwc = true;
    tsr_sampler *s = NULL;
    TSR_CHECK_GOTO(rc, tsr_sampler_create(&e->sched, &sp, &s), fail);
    /* the noise: the seed's first draw at the new size (a fresh generator,
     * as A1111's new ImageRNG); the image-space path already drew its VAE
     * sample from that fresh stream, as Tessera's img2img does */
    if (kind == TSR_UPSCALER_LATENT)
        tsr_rng_init(&j->rng, j->rng_kind, j->seed);
    /* (ComfyUI's batch: the second KSampler's randn over the batch, slice i) */
    rc = tsr_rng_randn_nhwc_slice(&j->rng, kind == TSR_UPSCALER_LATENT ? j->params.noise_index : 0,
                                  C, lh, lw, noise);
    if (rc < 0) {
        tsr_sampler_free(s);
        goto fail;
    }
    tsr_sampler_add_noise(s, lat, noise, lat);
    tsr_sampler_free(j->sampler);
    j->sampler = s;
    free(j->latent);
    free(j->x0);
    j->latent = lat;
    j->x0 = x0;
    j->lh = lh;
    j->lw = lw;
    j->width = lw * e->vae_factor;
    j->height = lh * e->vae_factor;
    /* SDXL's size conditioning follows the new size unless it was given */
    if (!j->params.original_height)
        j->time_ids[0] = (float)j->height;
    if (!j->params.original_width)
        j->time_ids[1] = (float)j->width;
    if (!j->params.target_height)
        j->time_ids[4] = (float)j->height;
    if (!j->params.target_width)
        j->time_ids[5] = (float)j->width;
    j->step_offset = first_steps;
    j->steps_later = 0;
    j->hires = false;
    j->state = TSR_IMAGE_DENOISING;
    free(up);
    free(noise);
    return TSR_OK;
fail:
    free(up);
    free(lat);
    free(noise);
    free(x0);
    return rc;
}

/* ---- A1111's inpainting fill ---- */

int tsr_latent_fill(int mode, const float *mask, int lh, int lw, int C, tsr_rng_kind kind,
                    uint64_t seed, float *latent)
{
    if (mode != 2 && mode != 3)
        return TSR_OK;
    const size_t px = (size_t)lh * lw;
    float *noise = NULL;
    if (mode == 2) {
        noise = malloc(px * C * sizeof(float));
        if (!noise)
            return tsr_errorf(TSR_ERR_NOMEM, "out of memory for the latent noise");
        tsr_rng r;
        tsr_rng_init(&r, kind, seed);
        int rc = tsr_rng_randn_nhwc(&r, C, lh, lw, noise);
        if (rc < 0) {
            free(noise);
            return rc;
        }
    }
    for (size_t q = 0; q < px; q++) {
        const float m = mask[q], keep = 1.0f - m;
        for (int c = 0; c < C; c++) {
            float *v = &latent[q * C + c];
            *v = noise ? *v * keep + noise[q * C + c] * m : *v * keep;
        }
    }
    free(noise);
    return TSR_OK;
}

/* Pillow's fixed-point helpers: a * b / 255 rounded, and the >> 8 pair. */
static inline uint32_t div255(uint32_t a)
{
    a += 128;
    return ((a >> 8) + a) >> 8;
}
#define SHIFT_DIV255(a) ((((a) >> 8) + (a)) >> 8)
#define PREC 7

/* Image.alpha_composite(dst, src) for one RGBA pixel (AlphaComposite.c). */
static void composite(uint8_t *dst, const uint8_t *src)
{
    if (src[3] == 0)
        return;
    const uint32_t blend = (uint32_t)dst[3] * (255u - src[3]);
    const uint32_t outa255 = (uint32_t)src[3] * 255u + blend;
    const uint32_t coef1 = (uint32_t)src[3] * 255u * 255u * (1u << PREC) / outa255;
    const uint32_t coef2 = 255u * (1u << PREC) - coef1;
    for (int c = 0; c < 3; c++) {
        const uint32_t t = (uint32_t)src[c] * coef1 + (uint32_t)dst[c] * coef2 + (0x80u << PREC);
        dst[c] = (uint8_t)(SHIFT_DIV255(t) >> PREC);
    }
    const uint32_t a = outa255 + 0x80u;
    dst[3] = (uint8_t)SHIFT_DIV255(a);
}

int tsr_mask_fill(uint8_t *rgb, const uint8_t *mask, int w, int h)
{
    const size_t npix = (size_t)w * h;
    tsr_image masked = {0}, blurred = {0};
    uint8_t *mod = calloc(npix, 4);
    int rc = tsr_image_alloc(&masked, (uint32_t)w, (uint32_t)h, 4);
    if (rc < 0 || !mod) {
        free(mod);
        tsr_image_free(&masked);
        return rc < 0 ? rc : tsr_errorf(TSR_ERR_NOMEM, "out of memory for the inpainting fill");
    }
    /* the image pasted (premultiplied, "RGBa") through the inverted mask
     * onto transparent black: every band blended with 255 - mask */
    for (size_t i = 0; i < npix; i++) {
        const uint32_t keep = 255u - mask[i];
        for (int c = 0; c < 3; c++)
            masked.data[4 * i + c] = (uint8_t)div255((uint32_t)rgb[3 * i + c] * keep);
        masked.data[4 * i + 3] = (uint8_t)div255(255u * keep);
    }
    static const struct {
        double radius;
        int repeats;
    } passes[] = {{256, 1}, {64, 1}, {16, 2}, {4, 4}, {2, 2}, {0, 1}};
    for (size_t k = 0; k < sizeof passes / sizeof passes[0] && rc == TSR_OK; k++) {
        rc = tsr_image_gaussian_blur_pil(&masked, passes[k].radius, &blurred);
        if (rc < 0)
            break;
        /* .convert("RGBA"): un-premultiply (Convert.c's rgba2rgbA) */
        for (size_t i = 0; i < npix; i++) {
            uint8_t *q = blurred.data + 4 * i;
            const uint32_t a = q[3];
            if (a != 0 && a != 255)
                for (int c = 0; c < 3; c++) {
                    const uint32_t v = 255u * q[c] / a;
                    q[c] = (uint8_t)(v > 255 ? 255 : v);
                }
        }
        for (int r = 0; r < passes[k].repeats; r++)
            for (size_t i = 0; i < npix; i++)
                composite(mod + 4 * i, blurred.data + 4 * i);
        tsr_image_free(&blurred);
    }
    if (rc == TSR_OK)
        for (size_t i = 0; i < npix; i++)
            memcpy(rgb + 3 * i, mod + 4 * i, 3); /* .convert("RGB") drops alpha */
    free(mod);
    tsr_image_free(&masked);
    return rc;
}
