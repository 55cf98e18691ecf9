/*
 * pipeline/batch.c - images in flight: submit, step, cancel, take.
 *
 * Each image (tsr_job) owns its sampler state, its RNG stream, its latent
 * and its conditioning, so images are independent and can join or leave
 * between UNet calls.  A step takes the oldest running image, gathers every
 * running image with the same latent size and prompt length (they can share
 * one UNet call), lays out their rows - [uncond, cond] per image when
 * classifier-free guidance is on, as diffusers concatenates them - runs the
 * UNet once, and lets each image's sampler consume its own guided output.
 * Images that finish are decoded together in one VAE call.
 *
 * The order of random draws per image is diffusers' with one generator per
 * image: txt2img draws the initial noise; img2img draws the VAE sample noise
 * then the noise added at the first timestep; inpainting (9-channel UNet)
 * draws the initial noise and then the masked image's VAE sample noise;
 * ancestral/SDE samplers continue the same stream.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "pipeline/pipeline_internal.h"

#define MAX_ROWS TSR_UNET_MAX_BATCH

struct tsr_batch {
    tsr_engine *e;
    int max_rows;
    tsr_job **jobs; /* running and finished (until taken) */
    int n_jobs, cap;
    int next_id;
    uint64_t next_order;
    tsr_step_fn cb;
    void *user;
    bool previews;
    /* UNet call buffers; they only grow */
    float *in, *t, *ctx, *pooled, *tids, *out, *guided;
    size_t in_cap, t_cap, ctx_cap, pooled_cap, tids_cap, out_cap, guided_cap;
    uint8_t *preview;
    size_t preview_cap;
};

void tsr_image_params_init(tsr_image_params *p)
{
    memset(p, 0, sizeof *p);
    p->prompt = "";
    p->steps = 30;
    p->cfg_scale = 7.5;
    p->rng = "cpu";
    p->clip_skip = 1;
    p->strength = 0.75;
}

static void job_free(tsr_job *j)
{
    if (!j)
        return;
    tsr_sampler_free(j->sampler);
    free(j->latent);
    free(j->x0);
    free(j->mask);
    free(j->masked);
    tsr_text_embedding_free(&j->cond);
    tsr_text_embedding_free(&j->uncond);
    free(j->prompt);
    free(j->negative);
    free(j->rgb);
    free(j->parameters);
    free(j);
}

int tsr_batch_create(tsr_engine *e, int max_rows, tsr_batch **out)
{
    *out = NULL;
    if (max_rows < 1 || max_rows > MAX_ROWS)
        return tsr_errorf(TSR_ERR_INVALID, "rows per UNet call %d outside 1..%d", max_rows,
                          MAX_ROWS);
    tsr_batch *b = calloc(1, sizeof *b);
    if (!b)
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate a batch");
    b->e = e;
    b->max_rows = max_rows;
    b->next_id = 1;
    *out = b;
    return TSR_OK;
}

void tsr_batch_free(tsr_batch *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->n_jobs; i++)
        job_free(b->jobs[i]);
    free(b->jobs);
    free(b->in);
    free(b->t);
    free(b->ctx);
    free(b->pooled);
    free(b->tids);
    free(b->out);
    free(b->guided);
    free(b->preview);
    free(b);
}

void tsr_batch_set_callback(tsr_batch *b, tsr_step_fn fn, void *user, int previews)
{
    b->cb = fn;
    b->user = user;
    b->previews = previews != 0;
}

int tsr_batch_active(const tsr_batch *b)
{
    int n = 0;
    for (int i = 0; i < b->n_jobs; i++)
        n += b->jobs[i]->running;
    return n;
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

/* Grow *buf to hold n floats. */
static int reserve(float **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return TSR_OK;
    float *p = realloc(*buf, n * sizeof(float));
    if (!p)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory for %zu floats", n);
    *buf = p;
    *cap = n;
    return TSR_OK;
}

/* ---- submit ---- */

static int check_params(const tsr_engine *e, const tsr_image_params *p, int *w, int *h)
{
    *w = p->width ? p->width : e->default_size;
    *h = p->height ? p->height : e->default_size;
    const int m = e->size_multiple;
    if (*w < TSR_MIN_SIZE || *w > TSR_MAX_SIZE || *h < TSR_MIN_SIZE || *h > TSR_MAX_SIZE)
        return tsr_errorf(TSR_ERR_INVALID, "width and height must be within %d..%d, got %dx%d",
                          TSR_MIN_SIZE, TSR_MAX_SIZE, *w, *h);
    if (*w % 8 || *h % 8)
        return tsr_errorf(TSR_ERR_INVALID, "width and height must be multiples of 8, got %dx%d", *w,
                          *h);
    if (*w % m || *h % m)
        return tsr_errorf(TSR_ERR_INVALID,
                          "this model's VAE needs width and height in multiples of %d, got %dx%d",
                          m, *w, *h);
    if (p->steps < 1 || p->steps > TSR_MAX_STEPS)
        return tsr_errorf(TSR_ERR_INVALID, "steps must be within 1..%d, got %d", TSR_MAX_STEPS,
                          p->steps);
    if (!(p->cfg_scale >= 0 && p->cfg_scale <= 100))
        return tsr_errorf(TSR_ERR_INVALID, "cfg scale must be within 0..100, got %g", p->cfg_scale);
    if (!(p->guidance_rescale >= 0 && p->guidance_rescale <= 1))
        return tsr_errorf(TSR_ERR_INVALID, "guidance rescale must be within 0..1, got %g",
                          p->guidance_rescale);
    if (p->clip_skip < 1 || p->clip_skip > 12)
        return tsr_errorf(TSR_ERR_INVALID, "clip skip must be within 1..12, got %d", p->clip_skip);
    if (!p->prompt)
        return tsr_errorf(TSR_ERR_INVALID, "no prompt");
    if (p->init_image && !(p->strength > 0 && p->strength <= 1))
        return tsr_errorf(TSR_ERR_INVALID, "strength must be within (0, 1], got %g", p->strength);
    const bool inpaint_model = e->in_channels != e->latent_channels;
    if (p->mask && !p->init_image)
        return tsr_errorf(TSR_ERR_INVALID, "a mask needs an init image");
    if (p->mask && !inpaint_model)
        return tsr_errorf(TSR_ERR_UNSUPPORTED,
                          "inpainting with a mask needs an inpainting model (9-channel UNet)");
    if (inpaint_model && !p->mask)
        return tsr_errorf(TSR_ERR_INVALID, "this is an inpainting model: give an init image and a "
                                           "mask");
    return TSR_OK;
}

/* Encode an 8-bit RGB image to latents (diffusers' retrieve_latents with
 * sample mode): mean + std * noise drawn from the image's stream. */
static int encode_image(tsr_engine *e, tsr_job *j, const float *pixels, float *latent)
{
    const size_t n = (size_t)j->lh * j->lw * e->latent_channels;
    float *mean = malloc(n * sizeof(float)), *logvar = malloc(n * sizeof(float));
    float *noise = malloc(n * sizeof(float));
    int rc = TSR_OK;
    if (!mean || !logvar || !noise) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory encoding the init image");
        goto done;
    }
    TSR_CHECK_GOTO(rc, tsr_vae_encode(e->vae, pixels, 1, j->height, j->width, mean, logvar), done);
    TSR_CHECK_GOTO(rc, tsr_rng_randn_nhwc(&j->rng, e->latent_channels, j->lh, j->lw, noise), done);
    tsr_vae_sample(tsr_vae_get_desc(e->vae), mean, logvar, noise, n, latent);
done:
    free(mean);
    free(logvar);
    free(noise);
    return rc;
}

static int prepare_latents(tsr_engine *e, tsr_job *j, const tsr_image_params *p)
{
    const size_t n = (size_t)j->lh * j->lw * e->latent_channels;
    const size_t npix = (size_t)j->width * j->height;
    j->latent = malloc(n * sizeof(float));
    j->x0 = calloc(n, sizeof(float));
    if (!j->latent || !j->x0)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory for latents");
    if (!p->init_image) {
        TSR_TRY(tsr_rng_randn_nhwc(&j->rng, e->latent_channels, j->lh, j->lw, j->latent));
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
    tsr_vae_from_u8(p->init_image, npix * 3, pixels);
    if (!p->mask) { /* img2img */
        TSR_CHECK_GOTO(rc, encode_image(e, j, pixels, j->latent), done);
        TSR_CHECK_GOTO(rc, tsr_rng_randn_nhwc(&j->rng, e->latent_channels, j->lh, j->lw, noise),
                       done);
        tsr_sampler_add_noise(j->sampler, j->latent, noise, j->latent);
        goto done;
    }
    /* inpainting model: latents from noise (strength 1) or image + noise,
     * then the masked image (pixels where the mask is < 0.5) encoded */
    const bool strength_max = p->strength >= 1.0;
    float *image_latent = NULL;
    if (!strength_max) {
        image_latent = malloc(n * sizeof(float));
        if (!image_latent) {
            rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory for the init image");
            goto done;
        }
        TSR_CHECK_GOTO(rc, encode_image(e, j, pixels, image_latent), inpaint_done);
    }
    TSR_CHECK_GOTO(rc, tsr_rng_randn_nhwc(&j->rng, e->latent_channels, j->lh, j->lw, noise),
                   inpaint_done);
    if (strength_max) {
        memcpy(j->latent, noise, n * sizeof(float));
        tsr_sampler_scale_noise(j->sampler, j->latent);
    } else {
        tsr_sampler_add_noise(j->sampler, image_latent, noise, j->latent);
    }
    j->mask = malloc((size_t)j->lh * j->lw * sizeof(float));
    j->masked = malloc(n * sizeof(float));
    if (!j->mask || !j->masked) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory for the mask");
        goto inpaint_done;
    }
    /* binarize at 0.5, then torch's nearest resize to the latent size */
    for (int y = 0; y < j->lh; y++)
        for (int x = 0; x < j->lw; x++) {
            int sy = (int)((int64_t)y * j->height / j->lh), sx = (int)((int64_t)x * j->width / j->lw);
            j->mask[y * j->lw + x] = p->mask[(size_t)sy * j->width + sx] >= 128 ? 1.0f : 0.0f;
        }
    for (size_t i = 0; i < npix; i++)
        if (p->mask[i] >= 128)
            pixels[3 * i] = pixels[3 * i + 1] = pixels[3 * i + 2] = 0.0f;
    TSR_CHECK_GOTO(rc, encode_image(e, j, pixels, j->masked), inpaint_done);
inpaint_done:
    free(image_latent);
done:
    free(pixels);
    free(noise);
    return rc;
}

static int encode_prompts(tsr_engine *e, tsr_job *j, const tsr_image_params *p)
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

static int make_sampler(tsr_engine *e, tsr_job *j, const tsr_image_params *p)
{
    j->sampler_kind = e->default_sampler;
    j->schedule = TSR_SCHEDULE_DEFAULT;
    if (p->sampler && *p->sampler)
        TSR_TRY(tsr_sampler_parse(p->sampler, &j->sampler_kind, &j->schedule));
    if (p->schedule && *p->schedule)
        TSR_TRY(tsr_schedule_parse(p->schedule, &j->schedule));
    if (!tsr_sampler_supports_schedule(j->sampler_kind, j->schedule))
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "sampler %s does not offer the %s schedule",
                          tsr_sampler_name(j->sampler_kind), tsr_schedule_name(j->schedule));
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

static int job_setup(tsr_batch *b, tsr_job *j, const tsr_image_params *p)
{
    tsr_engine *e = b->e;
    TSR_TRY(check_params(e, p, &j->width, &j->height));
    j->lh = j->height / e->vae_factor;
    j->lw = j->width / e->vae_factor;
    const char *rng = p->rng ? p->rng : "cpu";
    int kind = tsr_rng_kind_parse(rng);
    if (kind < 0)
        return tsr_errorf(TSR_ERR_INVALID, "rng must be cpu or cuda, not '%s'", rng);
    j->rng_kind = (tsr_rng_kind)kind;
    j->seed = p->seed;
    tsr_rng_init(&j->rng, j->rng_kind, p->seed);
    j->cfg = p->cfg_scale > 1.0;
    j->cfg_scale = p->cfg_scale;
    j->rescale = p->guidance_rescale;
    j->steps = p->steps;
    j->clip_skip = p->clip_skip;
    j->strength = p->init_image ? p->strength : -1.0;
    j->prompt = dup_str(p->prompt);
    j->negative = dup_str(p->negative_prompt);
    if (!j->prompt || (p->negative_prompt && !j->negative))
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    TSR_TRY(make_sampler(e, j, p));
    TSR_TRY(encode_prompts(e, j, p));
    TSR_TRY(prepare_latents(e, j, p));
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
    return TSR_OK;
}

int tsr_batch_submit(tsr_batch *b, const tsr_image_params *p, int *job)
{
    if (job)
        *job = 0;
    if (!p)
        return tsr_errorf(TSR_ERR_INVALID, "no parameters");
    if (b->n_jobs == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        tsr_job **jobs = realloc(b->jobs, (size_t)cap * sizeof *jobs);
        if (!jobs)
            return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
        b->jobs = jobs;
        b->cap = cap;
    }
    tsr_job *j = calloc(1, sizeof *j);
    if (!j)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    int rc = job_setup(b, j, p);
    if (rc < 0) {
        job_free(j);
        return rc;
    }
    j->id = b->next_id++;
    j->order = b->next_order++;
    j->running = true;
    j->status = TSR_OK;
    b->jobs[b->n_jobs++] = j;
    if (job)
        *job = j->id;
    return TSR_OK;
}

/* ---- step ---- */

static bool same_group(const tsr_job *a, const tsr_job *b)
{
    return a->lh == b->lh && a->lw == b->lw && a->cond.n_tokens == b->cond.n_tokens;
}

static int job_rows(const tsr_job *j)
{
    return j->cfg ? 2 : 1;
}

/* diffusers' rescale_noise_cfg: match the std of the guided prediction to
 * the text-conditioned one (torch.std: unbiased), then blend. */
static void rescale_guidance(float *guided, const float *text, size_t n, double phi)
{
    double st = 0, sg = 0, mt = 0, mg = 0;
    for (size_t i = 0; i < n; i++) {
        mt += text[i];
        mg += guided[i];
    }
    mt /= (double)n;
    mg /= (double)n;
    for (size_t i = 0; i < n; i++) {
        st += (text[i] - mt) * (text[i] - mt);
        sg += (guided[i] - mg) * (guided[i] - mg);
    }
    const double ratio = sg > 0 ? sqrt(st / sg) : 1.0;
    for (size_t i = 0; i < n; i++)
        guided[i] = (float)(phi * guided[i] * ratio + (1 - phi) * guided[i]);
}

static void fail_job(tsr_job *j, int rc)
{
    j->status = rc;
    j->running = false;
    TSR_WARN("image %d failed: %s", j->id, tsr_last_error());
}

static int decode_finished(tsr_batch *b, tsr_job **group, int n)
{
    tsr_engine *e = b->e;
    tsr_job *done[MAX_ROWS];
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (group[i]->running && tsr_sampler_done(group[i]->sampler))
            done[nd++] = group[i];
    if (nd == 0)
        return 0;
    const int lh = done[0]->lh, lw = done[0]->lw, C = e->latent_channels;
    const size_t nl = (size_t)lh * lw * C, npix = (size_t)done[0]->width * done[0]->height;
    float *lat = malloc(nd * nl * sizeof(float)), *img = malloc(nd * npix * 3 * sizeof(float));
    int rc = TSR_OK;
    if (!lat || !img)
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory decoding %d images", nd);
    for (int i = 0; i < nd && rc == TSR_OK; i++)
        memcpy(lat + i * nl, done[i]->latent, nl * sizeof(float));
    if (rc == TSR_OK)
        rc = tsr_vae_decode(e->vae, lat, nd, lh, lw, img);
    for (int i = 0; i < nd; i++) {
        tsr_job *j = done[i];
        if (rc == TSR_OK) {
            j->rgb = malloc(npix * 3);
            if (!j->rgb) {
                fail_job(j, tsr_errorf(TSR_ERR_NOMEM, "out of memory"));
                continue;
            }
            tsr_vae_to_u8(img + i * npix * 3, npix * 3, j->rgb);
            int irc = tsr_job_infotext(e, j);
            if (irc < 0) {
                fail_job(j, irc);
                continue;
            }
            j->running = false;
        } else {
            fail_job(j, rc);
        }
    }
    free(lat);
    free(img);
    return nd;
}

static void report_step(tsr_batch *b, tsr_job *j)
{
    if (!b->cb)
        return;
    tsr_engine *e = b->e;
    tsr_step_info info;
    memset(&info, 0, sizeof info);
    info.job = j->id;
    info.step = tsr_sampler_steps_done(j->sampler);
    info.steps = tsr_sampler_steps_total(j->sampler);
    info.timestep = tsr_sampler_done(j->sampler) ? 0 : tsr_sampler_timestep(j->sampler);
    info.x0 = j->x0;
    info.latent_height = j->lh;
    info.latent_width = j->lw;
    info.latent_channels = e->latent_channels;
    if (b->previews) {
        size_t need = (size_t)j->lh * j->lw * 3;
        if (need > b->preview_cap) {
            uint8_t *p = realloc(b->preview, need);
            if (p) {
                b->preview = p;
                b->preview_cap = need;
            }
        }
        if (need <= b->preview_cap) {
            int rc = e->taesd || !e->preview_linear
                         ? TSR_ERR_UNSUPPORTED
                         : tsr_preview_linear(&e->preview_map, j->x0, j->lh, j->lw,
                                              e->latent_channels, NULL, b->preview);
            if (rc == TSR_OK) {
                info.preview_rgb = b->preview;
                info.preview_width = j->lw;
                info.preview_height = j->lh;
            }
            tsr_error_clear();
        }
    }
    b->cb(b->user, &info);
}

int tsr_batch_step(tsr_batch *b, int *finished)
{
    if (finished)
        *finished = 0;
    tsr_engine *e = b->e;
    tsr_job *lead = NULL;
    for (int i = 0; i < b->n_jobs; i++)
        if (b->jobs[i]->running && (!lead || b->jobs[i]->order < lead->order))
            lead = b->jobs[i];
    if (!lead)
        return TSR_OK;

    /* the group: the oldest image and every compatible one that fits */
    tsr_job *group[MAX_ROWS];
    int n = 0, rows = 0;
    for (int i = 0; i < b->n_jobs; i++) {
        tsr_job *j = b->jobs[i];
        if (!j->running || !same_group(lead, j) || rows + job_rows(j) > b->max_rows)
            continue;
        group[n++] = j;
        rows += job_rows(j);
    }
    const int lh = lead->lh, lw = lead->lw, C = e->latent_channels, Cin = e->in_channels;
    const int L = lead->cond.n_tokens, D = lead->cond.dim, P = lead->cond.pooled_dim;
    const size_t px = (size_t)lh * lw, nl = px * C;
    TSR_TRY(reserve(&b->in, &b->in_cap, rows * px * Cin));
    TSR_TRY(reserve(&b->out, &b->out_cap, rows * nl));
    TSR_TRY(reserve(&b->ctx, &b->ctx_cap, (size_t)rows * L * D));
    TSR_TRY(reserve(&b->guided, &b->guided_cap, nl));
    TSR_TRY(reserve(&b->t, &b->t_cap, (size_t)rows));
    if (e->sdxl) {
        TSR_TRY(reserve(&b->pooled, &b->pooled_cap, (size_t)rows * P));
        TSR_TRY(reserve(&b->tids, &b->tids_cap, (size_t)rows * 6));
    }

    int r = 0;
    for (int g = 0; g < n; g++) {
        tsr_job *j = group[g];
        /* scale_model_input once, shared by the image's rows */
        float *row0 = b->in + (size_t)r * px * Cin;
        if (Cin == C) {
            tsr_sampler_scale_input(j->sampler, j->latent, row0);
        } else { /* inpainting: [latent, mask, masked-image latents] per pixel */
            tsr_sampler_scale_input(j->sampler, j->latent, b->guided);
            for (size_t p = 0; p < px; p++) {
                float *dst = row0 + p * Cin;
                memcpy(dst, b->guided + p * C, C * sizeof(float));
                dst[C] = j->mask[p];
                memcpy(dst + C + 1, j->masked + p * C, C * sizeof(float));
            }
        }
        const float t = (float)tsr_sampler_timestep(j->sampler);
        for (int k = 0; k < job_rows(j); k++) {
            const tsr_text_embedding *te = (j->cfg && k == 0) ? &j->uncond : &j->cond;
            if (k > 0)
                memcpy(b->in + (size_t)(r + k) * px * Cin, row0, px * Cin * sizeof(float));
            b->t[r + k] = t;
            memcpy(b->ctx + (size_t)(r + k) * L * D, te->context, (size_t)L * D * sizeof(float));
            if (e->sdxl) {
                memcpy(b->pooled + (size_t)(r + k) * P, te->pooled, (size_t)P * sizeof(float));
                memcpy(b->tids + (size_t)(r + k) * 6, j->time_ids, sizeof j->time_ids);
            }
        }
        r += job_rows(j);
    }

    tsr_unet_inputs in;
    memset(&in, 0, sizeof in);
    in.batch = rows;
    in.height = lh;
    in.width = lw;
    in.channels = Cin;
    in.context_len = L;
    in.latents = b->in;
    in.timesteps = b->t;
    in.context = b->ctx;
    if (e->sdxl) {
        in.text_embeds = b->pooled;
        in.time_ids = b->tids;
        in.n_time_ids = 6;
    }
    int rc = tsr_unet_forward(e->unet, &in, b->out);
    if (rc < 0) {
        for (int g = 0; g < n; g++)
            fail_job(group[g], rc);
        return rc;
    }

    r = 0;
    for (int g = 0; g < n; g++) {
        tsr_job *j = group[g];
        const float *pred = b->out + (size_t)r * nl;
        if (j->cfg) {
            const float *u = pred, *c = pred + nl;
            const float s = (float)j->cfg_scale;
            for (size_t i = 0; i < nl; i++)
                b->guided[i] = u[i] + s * (c[i] - u[i]);
            if (j->rescale > 0)
                rescale_guidance(b->guided, c, nl, j->rescale);
            pred = b->guided;
        }
        rc = tsr_sampler_step(j->sampler, pred, j->latent, &j->rng, j->x0);
        if (rc < 0)
            fail_job(j, rc);
        else
            report_step(b, j);
        r += job_rows(j);
    }
    int nd = decode_finished(b, group, n);
    if (finished)
        *finished = nd;
    return TSR_OK;
}

/* ---- cancel, take ---- */

static int find_job(const tsr_batch *b, int id)
{
    for (int i = 0; i < b->n_jobs; i++)
        if (b->jobs[i]->id == id)
            return i;
    return -1;
}

int tsr_batch_cancel(tsr_batch *b, int job)
{
    int i = find_job(b, job);
    if (i < 0)
        return tsr_errorf(TSR_ERR_NOT_FOUND, "no image %d", job);
    if (b->jobs[i]->running) {
        b->jobs[i]->running = false;
        b->jobs[i]->status = TSR_ERR_CANCELLED;
    }
    return TSR_OK;
}

int tsr_batch_take(tsr_batch *b, int job, tsr_result *out)
{
    memset(out, 0, sizeof *out);
    int i = find_job(b, job);
    if (i < 0 || b->jobs[i]->running)
        return tsr_errorf(TSR_ERR_NOT_FOUND, "image %d is %s", job, i < 0 ? "unknown" : "running");
    tsr_job *j = b->jobs[i];
    out->job = j->id;
    out->status = j->status;
    out->width = j->width;
    out->height = j->height;
    out->seed = j->seed;
    out->rgb = j->rgb;
    out->parameters = j->parameters;
    j->rgb = NULL;
    j->parameters = NULL;
    job_free(j);
    b->jobs[i] = b->jobs[--b->n_jobs];
    return TSR_OK;
}

void tsr_result_free(tsr_result *r)
{
    if (!r)
        return;
    free(r->rgb);
    free(r->parameters);
    memset(r, 0, sizeof *r);
}
