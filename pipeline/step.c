/*
 * pipeline/step.c - one UNet call over a group of images, and what follows
 * it: each image's guidance and sampler step, progress reports with
 * previews, and the VAE decode of images that finished.
 *
 * A step prepares queued images while rows are free, takes the oldest
 * denoising image, gathers every denoising image with the same latent size
 * and prompt length (they can share one UNet call), lays out their rows -
 * [uncond, cond] per image when classifier-free guidance is on, as diffusers
 * concatenates them - runs the UNet once, and lets each image's sampler
 * consume its own guided output.  Images that finish are decoded in chunks
 * of at most max_decode_images, and those larger than max_decode_pixels
 * are decoded in tiles, so the VAE's workspace is bounded whatever the
 * batch holds.  When the batch runs empty, its buffers and the UNet/VAE
 * workspaces are released.
 *
 * step_group is cut as unet.c is: pick_group chooses the images,
 * lay_out_rows writes their rows, run_unet makes the one call, advance
 * lets each image's guidance and sampler consume it; each part reads the
 * call_group the pick filled, and nothing else passes between them.
 */
#include <math.h>
#if defined(__GLIBC__) || defined(__linux__)
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "pipeline/batch_internal.h"
#include "pipeline/lora.h"
#include "pipeline/hires.h"

/* malloc_trim hands glibc's freed pages back to the system.  Not under ASan
 * or TSan: they replace malloc, so glibc's heap is never set up, and two
 * threads trimming at once race in its lazy set-up (a SEGV in mtrim, seen in
 * the ASan run of cfg_parallel_disagree, whose two ranks end together). */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TSR_SANITIZED_HEAP 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TSR_SANITIZED_HEAP 1
#endif
#if defined(__GLIBC__) && !defined(TSR_SANITIZED_HEAP)
#define TSR_HEAP_TRIM 1
#else
#define TSR_HEAP_TRIM 0
#endif

#define MAX_ROWS TSR_UNET_MAX_BATCH

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

static int reserve_u8(uint8_t **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return TSR_OK;
    uint8_t *p = realloc(*buf, n);
    if (!p)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory for a %zu-byte preview", n);
    *buf = p;
    *cap = n;
    return TSR_OK;
}

static bool same_group(const tsr_batch_image *a, const tsr_batch_image *b)
{
    /* tiling pads every conv of the call circularly: tiled and plain images
     * never share a UNet call (nor a decode: the decode takes a group's) */
    return a->lh == b->lh && a->lw == b->lw && a->cond.n_tokens == b->cond.n_tokens &&
           a->params.tiling == b->params.tiling;
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

/* Decoded images: tiles of 64 latent pixels (512 image pixels) with 16 of
 * overlap for images above the untiled limit. */
static int decode_chunk(tsr_batch *b, tsr_batch_image **done, int nd)
{
    tsr_engine *e = b->e;
    const int lh = done[0]->lh, lw = done[0]->lw, C = e->latent_channels;
    const size_t nl = (size_t)lh * lw * C, npix = (size_t)done[0]->width * done[0]->height;
    float *lat = malloc(nd * nl * sizeof(float)), *img = malloc(nd * npix * 3 * sizeof(float));
    int rc = TSR_OK;
    const double t0 = tsr_pipeline_now();
    if (!lat || !img)
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory decoding %d images", nd);
    for (int i = 0; i < nd && rc == TSR_OK; i++)
        memcpy(lat + i * nl, done[i]->latent, nl * sizeof(float));
    if (rc == TSR_OK) {
        /* a chunk is one group's, so one tiling value; tiled images decode
         * whole even above max_decode_pixels (vae.h) */
        tsr_vae_set_circular(e->vae, done[0]->params.tiling != 0);
        if ((long long)npix > b->opt.max_decode_pixels) {
            const tsr_vae_tiling tiling = {.tile = 64, .overlap = 16};
            rc = tsr_vae_decode_tiled(e->vae, lat, nd, lh, lw, &tiling, img);
        } else {
            rc = tsr_vae_decode(e->vae, lat, nd, lh, lw, img);
        }
    }
    const double dt = tsr_pipeline_now() - t0;
    b->stats.decode_seconds += dt;
    for (int i = 0; i < nd; i++) {
        tsr_batch_image *j = done[i];
        j->decode_s += dt / nd;
        if (j->state != TSR_IMAGE_DECODING)
            continue; /* cancelled by the callback meanwhile */
        if (rc < 0) {
            tsr_batch_fail_image(b, j, rc);
            continue;
        }
        j->rgb = malloc(npix * 3);
        if (!j->rgb) {
            tsr_batch_fail_image(b, j, tsr_errorf(TSR_ERR_NOMEM, "out of memory"));
            continue;
        }
        tsr_vae_to_u8(img + i * npix * 3, npix * 3, j->rgb);
        int irc = tsr_batch_image_infotext(e, j);
        if (irc < 0) {
            tsr_batch_fail_image(b, j, irc);
            continue;
        }
        j->state = TSR_IMAGE_DONE;
        tsr_batch_report_final(b, j);
    }
    free(lat);
    free(img);
    return rc;
}

/* Decode the group's images that finished, in bounded chunks; returns how
 * many reached a final state. */
static int decode_finished(tsr_batch *b, tsr_batch_image **group, int n)
{
    tsr_batch_image *done[MAX_ROWS];
    int nd = 0, finals = 0;
    for (int i = 0; i < n; i++)
        if (group[i]->state == TSR_IMAGE_DECODING)
            done[nd++] = group[i];
    if (b->rank > 0) {
        /* CFG-parallel: rank 0 decodes; here the image ends without pixels */
        for (int i = 0; i < nd; i++) {
            done[i]->state = TSR_IMAGE_DONE;
            tsr_batch_report_final(b, done[i]);
        }
        return nd;
    }
    for (int i = 0; i < nd; i += b->opt.max_decode_images) {
        int k = nd - i < b->opt.max_decode_images ? nd - i : b->opt.max_decode_images;
        decode_chunk(b, done + i, k);
        tsr_error_clear();
    }
    for (int i = 0; i < nd; i++)
        finals += done[i]->state == TSR_IMAGE_DONE || done[i]->state == TSR_IMAGE_FAILED;
    return finals;
}

/* Bilinear upscale (half-pixel centres, clamped edges) of an RGB image. */
static void upscale_rgb(const uint8_t *src, int sh, int sw, uint8_t *dst, int dh, int dw)
{
    for (int y = 0; y < dh; y++) {
        double fy = ((double)y + 0.5) * sh / dh - 0.5;
        if (fy < 0)
            fy = 0;
        int y0 = (int)fy, y1 = y0 + 1 < sh ? y0 + 1 : sh - 1;
        double wy = fy - y0;
        for (int x = 0; x < dw; x++) {
            double fx = ((double)x + 0.5) * sw / dw - 0.5;
            if (fx < 0)
                fx = 0;
            int x0 = (int)fx, x1 = x0 + 1 < sw ? x0 + 1 : sw - 1;
            double wx = fx - x0;
            for (int c = 0; c < 3; c++) {
                double a = src[((size_t)y0 * sw + x0) * 3 + c], bb = src[((size_t)y0 * sw + x1) * 3 + c];
                double cc = src[((size_t)y1 * sw + x0) * 3 + c], d = src[((size_t)y1 * sw + x1) * 3 + c];
                double v = (a * (1 - wx) + bb * wx) * (1 - wy) + (cc * (1 - wx) + d * wx) * wy;
                dst[((size_t)y * dw + x) * 3 + c] = (uint8_t)(v + 0.5);
            }
        }
    }
}

/* The preview for the callback: TAESD (image size) when the engine has it,
 * else the linear map at latent size, upscaled for TSR_PREVIEW_IMAGE. */
static void make_preview(tsr_batch *b, tsr_batch_image *j, tsr_step_info *info)
{
    tsr_engine *e = b->e;
    const int ih = j->lh * e->vae_factor, iw = j->lw * e->vae_factor;
    int rc;
    if (e->taesd) {
        rc = reserve_u8(&b->preview, &b->preview_cap, (size_t)ih * iw * 3);
        if (rc == TSR_OK)
            rc = tsr_taesd_preview(e->taesd, j->x0, j->lh, j->lw, b->preview);
        if (rc == TSR_OK) {
            info->preview_rgb = b->preview;
            info->preview_width = iw;
            info->preview_height = ih;
        }
        tsr_error_clear();
        return;
    }
    if (!e->preview_linear)
        return;
    rc = reserve_u8(&b->preview_small, &b->preview_small_cap, (size_t)j->lh * j->lw * 3);
    if (rc == TSR_OK)
        rc = tsr_preview_linear(&e->preview_map, j->x0, j->lh, j->lw, e->latent_channels, NULL,
                                b->preview_small);
    if (rc == TSR_OK && b->previews == TSR_PREVIEW_LATENT) {
        info->preview_rgb = b->preview_small;
        info->preview_width = j->lw;
        info->preview_height = j->lh;
    } else if (rc == TSR_OK &&
               reserve_u8(&b->preview, &b->preview_cap, (size_t)ih * iw * 3) == TSR_OK) {
        upscale_rgb(b->preview_small, j->lh, j->lw, b->preview, ih, iw);
        info->preview_rgb = b->preview;
        info->preview_width = iw;
        info->preview_height = ih;
    }
    tsr_error_clear();
}

static void report_step(tsr_batch *b, tsr_batch_image *j)
{
    if (!b->cb)
        return;
    tsr_step_info info;
    memset(&info, 0, sizeof info);
    info.image = j->id;
    info.state = TSR_IMAGE_DENOISING;
    info.step = tsr_batch_image_steps_done(j);
    info.steps = tsr_batch_image_steps_total(j);
    info.timestep = tsr_sampler_done(j->sampler) ? 0 : tsr_sampler_timestep(j->sampler);
    info.x0 = j->x0;
    info.latent_height = j->lh;
    info.latent_width = j->lw;
    info.latent_channels = b->e->latent_channels;
    if (b->previews && b->rank == 0) /* CFG-parallel: rank 0 makes them */
        make_preview(b, j, &info);
    b->cb(b->user, &info);
}

/* Inpainting with a 4-channel model, after each evaluation (diffusers'
 * StableDiffusionInpaintPipeline loop): outside the mask the latents are
 * replaced by the init image's latents noised to the next evaluation's level
 * with the initial noise - or the clean latents after the last one:
 * latents = (1 - mask) * known + mask * latents.  tmp holds C * lh * lw. */
static int blend_known(tsr_batch_image *j, int C, float *tmp)
{
    const size_t px = (size_t)j->lh * j->lw;
    const float *known = j->image_latent;
    if (!tsr_sampler_done(j->sampler)) {
        TSR_TRY(tsr_sampler_add_noise_next(j->sampler, j->image_latent, j->noise, tmp));
        known = tmp;
    }
    for (size_t p = 0; p < px; p++) {
        const float m = j->mask[p], keep = 1.0f - m;
        for (int c = 0; c < C; c++) {
            const size_t i = p * C + c;
            j->latent[i] = keep * known[i] + m * j->latent[i];
        }
    }
    return TSR_OK;
}

/* Rows held by denoising images. */
static int denoising_rows(const tsr_batch *b)
{
    int rows = 0;
    for (int i = 0; i < b->n_images; i++)
        if (b->images[i]->state == TSR_IMAGE_DENOISING)
            rows += tsr_batch_image_rows(b->images[i]);
    return rows;
}

/* Prepare queued images while their rows fit beside the denoising ones
 * (at least one when none is denoising). */
static void prepare_to_fill(tsr_batch *b)
{
    for (;;) {
        tsr_batch_image *next = NULL;
        for (int i = 0; i < b->n_images; i++)
            if (b->images[i]->state == TSR_IMAGE_QUEUED &&
                (!next || b->images[i]->order < next->order))
                next = b->images[i];
        if (!next)
            return;
        const int rows = denoising_rows(b);
        if (rows > 0 && rows + tsr_batch_image_rows(next) > b->opt.max_rows)
            return;
        tsr_batch_prepare(b, 1, NULL);
    }
}

static void release_if_idle(tsr_batch *b)
{
    if (tsr_batch_active(b) > 0)
        return;
    tsr_batch_release_buffers(b);
    tsr_unet_trim(b->e->unet);
    tsr_vae_trim(b->e->vae);
#if TSR_HEAP_TRIM
    /* glibc keeps freed heap pages (and raises its mmap threshold after
     * large frees), so without this the workspaces just released would stay
     * in the process's RSS until the next allocation reuses them. */
    malloc_trim(0);
#endif
}

/* One UNet call's group: its images, their rows, and the shape they share
 * (the lead's: every member has its latent size and prompt length). */
typedef struct call_group {
    tsr_batch_image *images[MAX_ROWS];
    int n, rows;
    int lh, lw, C, Cin;    /* latent size, latent and UNet input channels */
    int L, D, P;           /* prompt tokens, context width, pooled width */
    size_t px, nl;         /* latent pixels, latent floats per row */
    double unet_seconds;
} call_group;

/* Pick: the oldest denoising image leads, and every compatible denoising
 * image joins while its rows fit.  false when nothing is denoising. */
static bool pick_group(const tsr_batch *b, call_group *g)
{
    const tsr_engine *e = b->e;
    tsr_batch_image *lead = NULL;
    for (int i = 0; i < b->n_images; i++)
        if (b->images[i]->state == TSR_IMAGE_DENOISING &&
            (!lead || b->images[i]->order < lead->order))
            lead = b->images[i];
    if (!lead)
        return false;
    g->n = 0;
    g->rows = 0;
    for (int i = 0; i < b->n_images; i++) {
        tsr_batch_image *j = b->images[i];
        if (j->state != TSR_IMAGE_DENOISING || !same_group(lead, j) ||
            g->rows + tsr_batch_image_rows(j) > b->opt.max_rows)
            continue;
        g->images[g->n++] = j;
        g->rows += tsr_batch_image_rows(j);
    }
    g->lh = lead->lh;
    g->lw = lead->lw;
    g->C = e->latent_channels;
    g->Cin = e->in_channels;
    g->L = lead->cond.n_tokens;
    g->D = lead->cond.dim;
    g->P = lead->cond.pooled_dim;
    g->px = (size_t)g->lh * g->lw;
    g->nl = g->px * g->C;
    return true;
}

/* Lay out: [uncond, cond] rows per image (one row without guidance), each
 * with its scaled latent (inpainting: latent, mask and masked-image
 * latents per pixel), timestep, context and SDXL's pooled embedding and
 * time ids. */
static int lay_out_rows(tsr_batch *b, const call_group *g)
{
    const tsr_engine *e = b->e;
    const int rows = g->rows, C = g->C, Cin = g->Cin, L = g->L, D = g->D, P = g->P;
    const size_t px = g->px, nl = g->nl;
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
    for (int gi = 0; gi < g->n; gi++) {
        tsr_batch_image *j = g->images[gi];
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
        for (int k = 0; k < tsr_batch_image_rows(j); k++) {
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
        r += tsr_batch_image_rows(j);
    }
    return TSR_OK;
}

/* A failing call fails every image in it (each with the call's message). */
static int fail_call(tsr_batch *b, const call_group *g, int rc)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tsr_last_error());
    for (int gi = 0; gi < g->n; gi++) {
        tsr_errorf(rc, "%s", msg);
        if (g->images[gi]->state == TSR_IMAGE_DENOISING)
            tsr_batch_fail_image(b, g->images[gi], rc);
    }
    return tsr_errorf(rc, "%s", msg);
}

/* What the ranks of a CFG-parallel group must agree on before their rows
 * mix: the call's shape, and each image's seed, progress and timestep
 * (FNV-1a over them). */
static uint64_t step_fingerprint(const call_group *g)
{
    uint64_t h = 1469598103934665603ULL;
    const int64_t shape[] = {g->n, g->rows, g->lh, g->lw, g->Cin, g->L};
    const unsigned char *p = (const unsigned char *)shape;
    for (size_t i = 0; i < sizeof shape; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    for (int gi = 0; gi < g->n; gi++) {
        const tsr_batch_image *j = g->images[gi];
        const double t = tsr_sampler_timestep(j->sampler);
        /* not the id: each rank's batch numbers its images itself */
        int64_t v[3] = {(int64_t)j->seed, tsr_batch_image_steps_done(j), 0};
        memcpy(&v[2], &t, sizeof t);
        p = (const unsigned char *)v;
        for (size_t i = 0; i < sizeof v; i++)
            h = (h ^ p[i]) * 1099511628211ULL;
    }
    return h;
}

/* Run: the one UNet call, timed into the batch's stats. */
static int run_unet(tsr_batch *b, call_group *g)
{
    tsr_engine *e = b->e;
    tsr_unet_inputs in;
    memset(&in, 0, sizeof in);
    in.batch = g->rows;
    in.height = g->lh;
    in.width = g->lw;
    in.channels = g->Cin;
    in.context_len = g->L;
    in.latents = b->in;
    in.timesteps = b->t;
    in.context = b->ctx;
    if (e->sdxl) {
        in.text_embeds = b->pooled;
        in.time_ids = b->tids;
        in.n_time_ids = 6;
    }
    /* LoRAs: each row takes its image's set; none at all = NULL */
    const tsr_lora_set *sets[TSR_UNET_MAX_BATCH];
    bool any_lora = false;
    for (int gi = 0, r = 0; gi < g->n; gi++)
        for (int k = 0; k < tsr_batch_image_rows(g->images[gi]) && r < TSR_UNET_MAX_BATCH; k++) {
            sets[r] = tsr_image_lora_set(g->images[gi]->lora);
            any_lora |= sets[r++] != NULL;
        }
    in.loras = any_lora ? sets : NULL;
    in.circular = g->images[0]->params.tiling != 0; /* one value per group (same_group) */
    /* CFG-parallel: this rank's rows only, into its block of the all_gather
     * (pipeline/cfg_group.c); alone: every row, straight into b->out */
    int r0, r1;
    const int share = tsr_cfg_share(b, g->rows, &r0, &r1);
    float *out = b->out;
    if (b->group) {
        in.batch = r1 - r0;
        in.latents += (size_t)r0 * g->px * g->Cin;
        in.timesteps += r0;
        in.context += (size_t)r0 * g->L * g->D;
        if (e->sdxl) {
            in.text_embeds += (size_t)r0 * g->P;
            in.time_ids += (size_t)r0 * 6;
        }
        if (in.loras)
            in.loras += r0;
        if (!(out = tsr_cfg_slot(b, share, g->nl)))
            return fail_call(b, g, TSR_ERR_NOMEM);
    }
    const double t0 = tsr_pipeline_now();
    int rc = in.batch > 0 ? tsr_unet_forward(e->unet, &in, out) : TSR_OK;
    if (b->group)
        rc = tsr_cfg_exchange(b, step_fingerprint(g), rc, g->rows, share, g->nl, g->n,
                              g->images[0]->seed, tsr_batch_image_steps_done(g->images[0]));
    const double unet_s = tsr_pipeline_now() - t0;
    g->unet_seconds = unet_s;
    b->stats.unet_calls++;
    b->stats.unet_rows += (uint64_t)(r1 - r0);
    b->stats.images_evaluated += (uint64_t)g->n;
    b->stats.last_call_images = g->n;
    b->stats.last_call_rows = r1 - r0;
    b->stats.last_call_seconds = unet_s;
    b->stats.unet_seconds += unet_s;
    return rc < 0 ? fail_call(b, g, rc) : TSR_OK;
}

/* Advance: each image applies its own guidance to its rows' output and its
 * sampler takes the step; progress is reported, and an image whose sampler
 * is done moves on to DECODING. */
static void advance(tsr_batch *b, const call_group *g)
{
    const size_t nl = g->nl;
    int r = 0;
    for (int gi = 0; gi < g->n; gi++) {
        tsr_batch_image *j = g->images[gi];
        const float *pred = b->out + (size_t)r * nl;
        r += tsr_batch_image_rows(j);
        j->denoise_s += g->unet_seconds;
        if (j->state != TSR_IMAGE_DENOISING)
            continue; /* cancelled from the callback during this step */
        if (j->cfg) {
            const float *u = pred, *c = pred + nl;
            const float s = (float)j->cfg_scale;
            for (size_t i = 0; i < nl; i++)
                b->guided[i] = u[i] + s * (c[i] - u[i]);
            if (j->rescale > 0)
                rescale_guidance(b->guided, c, nl, j->rescale);
            pred = b->guided;
        }
        int rc = tsr_sampler_step(j->sampler, pred, j->latent, &j->rng, j->x0);
        if (rc == TSR_OK && j->image_latent)
            rc = blend_known(j, g->C, b->guided);
        if (rc < 0) {
            tsr_batch_fail_image(b, j, rc);
            continue;
        }
        if (tsr_sampler_done(j->sampler))
            j->state = TSR_IMAGE_DECODING;
        report_step(b, j);
        if (j->state == TSR_IMAGE_DECODING && j->hires) {
            /* the first pass is done: upscale and go on denoising at the
             * new size, in whatever group that size joins (pipeline/hires.c) */
            rc = tsr_batch_image_hires(b->e, j, b->opt.max_decode_pixels);
            if (rc < 0)
                tsr_batch_fail_image(b, j, rc);
        }
    }
}

/* One UNet call: pick, lay out, run, advance, then decode what finished. */
static int step_group(tsr_batch *b, int *finished)
{
    call_group g;
    if (!pick_group(b, &g))
        return TSR_OK;
    TSR_TRY(lay_out_rows(b, &g));
    int rc = run_unet(b, &g);
    if (rc < 0) {
        if (finished)
            *finished = g.n;
        return rc;
    }
    advance(b, &g);
    int nd = decode_finished(b, g.images, g.n);
    if (finished)
        *finished = nd;
    return TSR_OK;
}

int tsr_batch_step(tsr_batch *b, int *finished)
{
    if (finished)
        *finished = 0;
    if (b->busy > 0)
        return tsr_errorf(TSR_ERR_INVALID, "tsr_batch_step called from inside a step callback");
    b->busy++;
    prepare_to_fill(b);
    int rc = step_group(b, finished);
    b->busy--;
    tsr_batch_bury(b);
    release_if_idle(b);
    return rc;
}
