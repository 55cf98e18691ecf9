/*
 * pipeline/batch_image.c - one image outside the UNet call: created from checked
 * parameters (a deep copy, so the caller's buffers are free the moment
 * submit returns), prepared (sampler, prompt encoding, initial latents) and
 * freed.
 *
 * The prepare phase draws from the image's own RNG stream in diffusers'
 * order: txt2img draws the initial noise; img2img draws the VAE sample noise
 * then the noise added at the first timestep; inpainting (9-channel UNet)
 * draws the initial noise and then the masked image's VAE sample noise;
 * inpainting with a 4-channel UNet draws the init image's VAE sample noise,
 * the initial noise, then the masked image's sample noise (unused, drawn to
 * keep later draws in step), and keeps the image latents and noise for the
 * per-step blend in pipeline/step.c.
 * Since every stream is the image's own, preparing an image later than it
 * was submitted (between other images' steps) changes none of its numbers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/log.h"
#include "pipeline/embeddings.h"
#include "pipeline/hires.h"
#include "pipeline/lora.h"
#include "pipeline/pipeline_internal.h"

double tsr_pipeline_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *dup_str(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static void *dup_bytes(const void *p, size_t n)
{
    void *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

void tsr_batch_image_free(tsr_batch_image *j)
{
    if (!j)
        return;
    tsr_sampler_free(j->sampler);
    free(j->latent);
    free(j->x0);
    free(j->mask);
    free(j->masked);
    free(j->image_latent);
    free(j->noise);
    tsr_text_embedding_free(&j->cond);
    tsr_text_embedding_free(&j->uncond);
    free(j->prompt);
    free(j->negative);
    free(j->upscaler);
    tsr_image_lora_free(j->lora);
    free((void *)j->params.init_image);
    free((void *)j->params.mask);
    free(j->rgb);
    free(j->parameters);
    free(j);
}

int tsr_batch_image_create(const tsr_engine *e, const tsr_image_params *p,
                           const tsr_params_resolved *r, tsr_batch_image **out)
{
    *out = NULL;
    tsr_batch_image *j = calloc(1, sizeof *j);
    if (!j)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    j->state = TSR_IMAGE_QUEUED;
    j->params = *p;
    j->params.prompt = j->params.negative_prompt = j->params.sampler = j->params.schedule = NULL;
    j->params.rng = NULL;
    j->params.init_image = j->params.mask = NULL;
    j->params.hires_upscaler = NULL;
    j->res = *r;
    j->width = r->width;
    j->height = r->height;
    j->lh = r->height / e->vae_factor;
    j->lw = r->width / e->vae_factor;
    j->sampler_kind = r->sampler;
    j->schedule = r->schedule;
    j->rng_kind = r->rng;
    j->seed = p->seed;
    j->cfg = p->cfg_scale > 1.0;
    j->cfg_scale = p->cfg_scale;
    j->rescale = p->guidance_rescale;
    j->steps = p->steps;
    j->clip_skip = p->clip_skip;
    j->strength = p->init_image ? p->strength : -1.0;
    j->prompt = dup_str(p->prompt);
    j->negative = dup_str(p->negative_prompt);
    if (tsr_hires_wanted(p)) {
        tsr_hires_plan plan;
        int rc = tsr_hires_check(e, p, j->width, j->height, &plan, NULL);
        if (rc < 0) {
            tsr_batch_image_free(j);
            return rc;
        }
        j->hires = true;
        j->hires_to_w = plan.to_w;
        j->hires_to_h = plan.to_h;
        j->hires_trunc_x = plan.trunc_x;
        j->hires_trunc_y = plan.trunc_y;
        j->hires_steps = plan.steps;
        j->hires_sched = plan.sched_steps;
        j->steps_later = plan.steps;
        j->upscaler = dup_str(p->hires_upscaler);
        j->params.hires_upscaler = j->upscaler;
    }
    const size_t npix = (size_t)r->width * r->height;
    if (p->init_image)
        j->params.init_image = dup_bytes(p->init_image, npix * 3);
    if (p->mask)
        j->params.mask = dup_bytes(p->mask, npix);
    if (!j->prompt || (p->negative_prompt && !j->negative) ||
        (p->hires_upscaler && j->hires && !j->upscaler) ||
        (p->init_image && !j->params.init_image) || (p->mask && !j->params.mask)) {
        tsr_batch_image_free(j);
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory copying the image parameters");
    }
    /* the copies stand in for the caller's strings from here on */
    j->params.prompt = j->prompt;
    j->params.negative_prompt = j->negative;
    /* LoRAs: the prompt's tags come out of the text that is encoded */
    j->params.loras = NULL;
    j->params.n_loras = 0;
    const int lrc = tsr_image_lora_create(e, p, &j->lora);
    if (lrc < 0) {
        tsr_batch_image_free(j);
        return lrc;
    }
    if (j->lora)
        j->params.prompt = tsr_image_lora_prompt(j->lora);
    /* SDXL micro-conditioning, diffusers' defaults: original = target =
     * the image size, crop (0, 0) */
    const float ids[6] = {
        (float)(p->original_height ? p->original_height : j->height),
        (float)(p->original_width ? p->original_width : j->width),
        (float)p->crop_top,
        (float)p->crop_left,
        (float)(p->target_height ? p->target_height : j->height),
        (float)(p->target_width ? p->target_width : j->width),
    };
    memcpy(j->time_ids, ids, sizeof ids);
    *out = j;
    return TSR_OK;
}

/* Encode an 8-bit RGB image to latents (diffusers' retrieve_latents with
 * sample mode): mean + std * noise drawn from the image's stream. */
int tsr_batch_image_encode(tsr_engine *e, tsr_batch_image *j, const float *pixels, float *latent)
{
    const size_t n = (size_t)j->lh * j->lw * e->latent_channels;
    float *mean = malloc(n * sizeof(float)), *logvar = malloc(n * sizeof(float));
    float *noise = malloc(n * sizeof(float));
    int rc = TSR_OK;
    if (!mean || !logvar || !noise) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory encoding the init image");
        goto done;
    }
    tsr_vae_set_circular(e->vae, j->params.tiling != 0); /* seamless tiling */
    TSR_CHECK_GOTO(rc, tsr_vae_encode(e->vae, pixels, 1, j->height, j->width, mean, logvar), done);
    TSR_CHECK_GOTO(rc, tsr_rng_randn_nhwc(&j->rng, e->latent_channels, j->lh, j->lw, noise), done);
    tsr_vae_sample(tsr_vae_get_desc(e->vae), mean, logvar, noise, n, latent);
done:
    free(mean);
    free(logvar);
    free(noise);
    return rc;
}

static int prepare_latents(tsr_engine *e, tsr_batch_image *j, const tsr_image_params *p)
{
    const size_t n = (size_t)j->lh * j->lw * e->latent_channels;
    const size_t npix = (size_t)j->width * j->height;
    j->latent = malloc(n * sizeof(float));
    j->x0 = calloc(n, sizeof(float));
    if (!j->latent || !j->x0)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory for latents");
    if (!p->init_image) {
        /* noise_index: ComfyUI's batch, latent i of one randn (usually 0) */
        TSR_TRY(tsr_rng_randn_nhwc_slice(&j->rng, p->noise_index, e->latent_channels, j->lh,
                                         j->lw, j->latent));
        tsr_sampler_scale_noise(j->sampler, j->latent);
        return TSR_OK;
    }
    float *pixels = malloc(npix * 3 * sizeof(float));
    float *noise = malloc(n * sizeof(float));
    int rc = TSR_OK;
    if (!pixels || !noise) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory for the init image");
        goto done;
    }
    if (p->mask && p->mask_fill != 1) {
        /* A1111's fill (every mode but "original"): the masked area painted
         * from blurred surroundings before anything is encoded */
        uint8_t *filled = malloc(npix * 3);
        if (!filled) {
            rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory for the init image");
            goto done;
        }
        memcpy(filled, p->init_image, npix * 3);
        rc = tsr_mask_fill(filled, p->mask, j->width, j->height);
        if (rc == TSR_OK)
            tsr_vae_from_u8(filled, npix * 3, pixels);
        free(filled);
        if (rc < 0)
            goto done;
    } else {
        tsr_vae_from_u8(p->init_image, npix * 3, pixels);
    }
    if (!p->mask) { /* img2img */
        TSR_CHECK_GOTO(rc, tsr_batch_image_encode(e, j, pixels, j->latent), done);
        TSR_CHECK_GOTO(rc, tsr_rng_randn_nhwc(&j->rng, e->latent_channels, j->lh, j->lw, noise),
                       done);
        tsr_sampler_add_noise(j->sampler, j->latent, noise, j->latent);
        goto done;
    }
    /* inpainting, diffusers' StableDiffusionInpaintPipeline: the init image
     * is encoded when strength < 1 (9-channel) or always (4-channel, whose
     * loop re-noises it every step); then the noise; latents from noise
     * (strength 1) or image + noise; then the masked image (pixels where the
     * mask is < 0.5) encoded */
    const bool strength_max = p->strength >= 1.0;
    const bool plain = e->in_channels == e->latent_channels; /* 4-channel model */
    float *image_latent = NULL;
    j->mask = malloc((size_t)j->lh * j->lw * sizeof(float));
    if (!j->mask) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory for the mask");
        goto done;
    }
    /* binarize at 0.5, then torch's nearest resize to the latent size */
    for (int y = 0; y < j->lh; y++)
        for (int x = 0; x < j->lw; x++) {
            int sy = (int)((int64_t)y * j->height / j->lh),
                sx = (int)((int64_t)x * j->width / j->lw);
            j->mask[y * j->lw + x] = p->mask[(size_t)sy * j->width + sx] >= 128 ? 1.0f : 0.0f;
        }
    if (!strength_max || plain) {
        image_latent = malloc(n * sizeof(float));
        if (!image_latent) {
            rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory for the init image");
            goto done;
        }
        TSR_CHECK_GOTO(rc, tsr_batch_image_encode(e, j, pixels, image_latent), inpaint_done);
        TSR_CHECK_GOTO(rc,
                       tsr_latent_fill(p->mask_fill, j->mask, j->lh, j->lw, e->latent_channels,
                                       j->rng_kind, j->seed, image_latent),
                       inpaint_done);
    }
    TSR_CHECK_GOTO(rc, tsr_rng_randn_nhwc(&j->rng, e->latent_channels, j->lh, j->lw, noise),
                   inpaint_done);
    if (strength_max) {
        memcpy(j->latent, noise, n * sizeof(float));
        tsr_sampler_scale_noise(j->sampler, j->latent);
    } else {
        tsr_sampler_add_noise(j->sampler, image_latent, noise, j->latent);
    }
    if (plain) {
        /* keep the image latents and the initial noise for the per-step
         * blend (pipeline/step.c) */
        j->image_latent = image_latent;
        image_latent = NULL;
        j->noise = noise;
        noise = malloc(n * sizeof(float));
        if (!noise) {
            rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory for the mask");
            goto inpaint_done;
        }
        /* the UNet never sees the masked image, but diffusers still encodes
         * it with the generator: draw (and drop) that sample's noise so
         * later draws (ancestral samplers) stay in step */
        TSR_CHECK_GOTO(rc, tsr_rng_randn_nhwc(&j->rng, e->latent_channels, j->lh, j->lw, noise),
                       inpaint_done);
        goto inpaint_done;
    }
    j->masked = malloc(n * sizeof(float));
    if (!j->masked) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory for the mask");
        goto inpaint_done;
    }
    for (size_t i = 0; i < npix; i++)
        if (p->mask[i] >= 128)
            pixels[3 * i] = pixels[3 * i + 1] = pixels[3 * i + 2] = 0.0f;
    TSR_CHECK_GOTO(rc, tsr_batch_image_encode(e, j, pixels, j->masked), inpaint_done);
inpaint_done:
    free(image_latent);
done:
    free(pixels);
    free(noise);
    return rc;
}

static int encode_prompts(tsr_engine *e, tsr_batch_image *j, const tsr_image_params *p)
{
    const char *prompt = p->prompt;
    TSR_TRY(tsr_text_cond_encode(e->cond, &prompt, 1, p->clip_skip, &j->cond));
    if (!j->cfg)
        return TSR_OK;
    if (!p->negative_prompt && e->force_zeros) {
        /* diffusers: zeros when no negative prompt is given (SDXL) */
        tsr_text_embedding *u = &j->uncond;
        u->n_tokens = j->cond.n_tokens;
        u->dim = j->cond.dim;
        u->context = calloc((size_t)u->n_tokens * u->dim, sizeof(float));
        u->pooled_dim = j->cond.pooled_dim;
        if (u->pooled_dim)
            u->pooled = calloc((size_t)u->pooled_dim, sizeof(float));
        if (!u->context || (u->pooled_dim && !u->pooled))
            return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
        return TSR_OK;
    }
    if (!p->negative_prompt || !*p->negative_prompt) {
        /* the empty prompt's conditioning is computed once per model */
        const tsr_text_embedding *empty;
        TSR_TRY(tsr_text_cond_empty(e->cond, p->clip_skip, &empty));
        TSR_TRY(tsr_text_embedding_copy(&j->uncond, empty));
    } else {
        TSR_TRY(tsr_text_cond_encode(e->cond, &p->negative_prompt, 1, p->clip_skip, &j->uncond));
    }
    /* a prompt and its negative share one length: pad the shorter with
     * empty-prompt windows, as A1111 does */
    const int n = j->cond.n_tokens > j->uncond.n_tokens ? j->cond.n_tokens : j->uncond.n_tokens;
    TSR_TRY(tsr_text_cond_pad(e->cond, p->clip_skip, &j->cond, n));
    TSR_TRY(tsr_text_cond_pad(e->cond, p->clip_skip, &j->uncond, n));
    return TSR_OK;
}

static int make_sampler(tsr_engine *e, tsr_batch_image *j, const tsr_image_params *p)
{
    tsr_sampler_params sp = tsr_sampler_params_default();
    sp.kind = j->sampler_kind;
    sp.schedule = j->schedule;
    sp.steps = p->steps;
    sp.strength = p->init_image ? p->strength : 1.0;
    sp.eta = p->eta;
    sp.channels = e->latent_channels;
    sp.height = j->lh;
    sp.width = j->lw;
    sp.nhwc = true;
    return tsr_sampler_create(&e->sched, &sp, &j->sampler);
}

int tsr_batch_image_prepare(tsr_engine *e, tsr_batch_image *j)
{
    const tsr_image_params *p = &j->params;
    tsr_rng_init(&j->rng, j->rng_kind, j->seed);
    TSR_TRY(make_sampler(e, j, p));
    TSR_TRY(tsr_image_lora_acquire(e, j->lora));
    TSR_TRY(tsr_engine_emb_refresh(e));
    tsr_engine_emb_begin(e);
    tsr_text_cond_set_lora(e->cond, tsr_image_lora_set(j->lora));
    const int erc = encode_prompts(e, j, p);
    tsr_text_cond_set_lora(e->cond, NULL);
    TSR_TRY(erc);
    snprintf(j->ti_hashes, sizeof j->ti_hashes, "%s", tsr_engine_emb_hashes(e));
    TSR_TRY(prepare_latents(e, j, p));
    /* the init image and mask are in the latents now */
    free((void *)j->params.init_image);
    free((void *)j->params.mask);
    j->params.init_image = j->params.mask = NULL;
    return TSR_OK;
}
