/*
 * pipeline/batch.c - a batch's bookkeeping: create, submit, prepare,
 * cancel, take, image info and stats.  The UNet call itself is in
 * pipeline/step.c.
 *
 * Ownership: the batch owns every image from submit until take.  Images live
 * in one array in submission order of arrival (unordered after takes; each
 * carries its submission sequence number).  While a step or a prepare phase
 * runs (b->busy > 0) the step callback may take or cancel images: an image
 * taken then leaves the array at once but is freed only when the step
 * returns (b->graveyard), because the step may still hold a pointer to it.
 * Nothing else is freed under a running step.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "pipeline/batch_internal.h"

void tsr_batch_options_init(tsr_batch_options *o)
{
    memset(o, 0, sizeof *o);
    o->max_rows = 32;
    o->max_images = 256;
    o->max_decode_images = 4;
    o->max_decode_pixels = 1024LL * 1024;
}

static int check_options(const tsr_batch_options *o)
{
    if (o->max_rows < 1 || o->max_rows > TSR_UNET_MAX_BATCH)
        return tsr_errorf(TSR_ERR_INVALID, "rows per UNet call %d outside 1..%d", o->max_rows,
                          TSR_UNET_MAX_BATCH);
    if (o->max_images < 1 || o->max_images > 65536)
        return tsr_errorf(TSR_ERR_INVALID, "images per batch %d outside 1..65536", o->max_images);
    if (o->max_decode_images < 1 || o->max_decode_images > 64)
        return tsr_errorf(TSR_ERR_INVALID, "images per VAE decode %d outside 1..64",
                          o->max_decode_images);
    if (o->max_decode_pixels < 64 * 64)
        return tsr_errorf(TSR_ERR_INVALID, "untiled decode limit %lld below 64x64 pixels",
                          o->max_decode_pixels);
    return TSR_OK;
}

int tsr_batch_create(tsr_engine *e, const tsr_batch_options *o, tsr_batch **out)
{
    *out = NULL;
    tsr_batch_options def;
    if (!o) {
        tsr_batch_options_init(&def);
        o = &def;
    }
    TSR_TRY(check_options(o));
    tsr_batch *b = calloc(1, sizeof *b);
    if (!b)
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate a batch");
    b->e = e;
    b->opt = *o;
    b->next_id = 1;
    *out = b;
    return TSR_OK;
}

void tsr_batch_release_buffers(tsr_batch *b)
{
    float **bufs[] = {&b->in, &b->t, &b->ctx, &b->pooled, &b->tids, &b->out, &b->guided};
    size_t *caps[] = {&b->in_cap,  &b->t_cap,   &b->ctx_cap,   &b->pooled_cap,
                      &b->tids_cap, &b->out_cap, &b->guided_cap};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        free(*bufs[i]);
        *bufs[i] = NULL;
        *caps[i] = 0;
    }
    free(b->preview);
    b->preview = NULL;
    b->preview_cap = 0;
    free(b->preview_small);
    b->preview_small = NULL;
    b->preview_small_cap = 0;
    free(b->gather);
    b->gather = NULL;
    b->gather_cap = 0;
}

void tsr_batch_free(tsr_batch *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->n_images; i++)
        tsr_batch_image_free(b->images[i]);
    free(b->images);
    for (int i = 0; i < b->n_grave; i++)
        tsr_batch_image_free(b->graveyard[i]);
    free(b->graveyard);
    tsr_batch_release_buffers(b);
    free(b);
}

void tsr_batch_set_callback(tsr_batch *b, tsr_step_fn fn, void *user, int previews)
{
    b->cb = fn;
    b->user = user;
    b->previews = previews < 0 ? 0 : previews > TSR_PREVIEW_IMAGE ? TSR_PREVIEW_IMAGE : previews;
}

static bool is_final(tsr_image_state s)
{
    return s == TSR_IMAGE_DONE || s == TSR_IMAGE_FAILED || s == TSR_IMAGE_CANCELLED;
}

int tsr_batch_active(const tsr_batch *b)
{
    int n = 0;
    for (int i = 0; i < b->n_images; i++)
        n += !is_final(b->images[i]->state);
    return n;
}

/* ---- submit ---- */

int tsr_batch_submit(tsr_batch *b, const tsr_image_params *p, int *image)
{
    if (image)
        *image = 0;
    tsr_params_resolved r;
    TSR_TRY(tsr_params_resolve(b->e, p, &r, NULL));
    if (b->n_images >= b->opt.max_images)
        return tsr_errorf(TSR_ERR_RANGE,
                          "the batch already holds %d images (its limit); take finished ones "
                          "first",
                          b->n_images);
    if (b->n_images == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        tsr_batch_image **images = realloc(b->images, (size_t)cap * sizeof *images);
        if (!images)
            return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
        b->images = images;
        b->cap = cap;
    }
    tsr_batch_image *j;
    TSR_TRY(tsr_batch_image_create(b->e, p, &r, &j));
    j->id = b->next_id++;
    j->order = b->next_order++;
    b->images[b->n_images++] = j;
    if (image)
        *image = j->id;
    return TSR_OK;
}

/* ---- prepare ---- */

void tsr_batch_report_final(tsr_batch *b, tsr_batch_image *j)
{
    if (j->final_reported || !b->cb)
        return;
    j->final_reported = true;
    tsr_step_info info;
    memset(&info, 0, sizeof info);
    info.image = j->id;
    info.state = j->state;
    info.status = j->status;
    info.step = tsr_batch_image_steps_done(j);
    info.steps = tsr_batch_image_steps_total(j);
    info.latent_height = j->lh;
    info.latent_width = j->lw;
    info.latent_channels = b->e->latent_channels;
    b->cb(b->user, &info);
}

void tsr_batch_fail_image(tsr_batch *b, tsr_batch_image *j, int rc)
{
    j->status = rc;
    j->state = TSR_IMAGE_FAILED;
    TSR_WARN("image %d failed: %s", j->id, tsr_last_error());
    tsr_batch_report_final(b, j);
}

/* The oldest queued image, or NULL. */
static tsr_batch_image *oldest_queued(const tsr_batch *b)
{
    tsr_batch_image *best = NULL;
    for (int i = 0; i < b->n_images; i++)
        if (b->images[i]->state == TSR_IMAGE_QUEUED && (!best || b->images[i]->order < best->order))
            best = b->images[i];
    return best;
}

int tsr_batch_prepare(tsr_batch *b, int max_images, int *prepared)
{
    if (prepared)
        *prepared = 0;
    int n = 0;
    b->busy++;
    tsr_batch_image *j;
    while ((max_images <= 0 || n < max_images) && (j = oldest_queued(b)) != NULL) {
        j->state = TSR_IMAGE_ENCODING;
        const double t0 = tsr_pipeline_now();
        int rc = tsr_batch_image_prepare(b->e, j);
        j->prepare_s = tsr_pipeline_now() - t0;
        b->stats.prepare_seconds += j->prepare_s;
        n++;
        if (j->state != TSR_IMAGE_ENCODING) /* cancelled meanwhile (cannot happen today) */
            continue;
        if (rc < 0)
            tsr_batch_fail_image(b, j, rc);
        else
            j->state = TSR_IMAGE_DENOISING;
    }
    b->busy--;
    tsr_batch_bury(b);
    if (prepared)
        *prepared = n;
    return TSR_OK;
}

/* ---- cancel, take, info ---- */

static int find_image(const tsr_batch *b, int id)
{
    for (int i = 0; i < b->n_images; i++)
        if (b->images[i]->id == id)
            return i;
    return -1;
}

int tsr_batch_cancel(tsr_batch *b, int image)
{
    int i = find_image(b, image);
    if (i < 0)
        return tsr_errorf(TSR_ERR_NOT_FOUND, "no image %d", image);
    tsr_batch_image *j = b->images[i];
    if (is_final(j->state))
        return tsr_errorf(TSR_ERR_INVALID, "image %d is already %s", image,
                          tsr_image_state_name(j->state));
    j->state = TSR_IMAGE_CANCELLED;
    j->status = TSR_ERR_CANCELLED;
    j->final_reported = true; /* the caller made it: not reported back */
    return TSR_OK;
}

int tsr_batch_take(tsr_batch *b, int image, tsr_result *out)
{
    memset(out, 0, sizeof *out);
    int i = find_image(b, image);
    if (i < 0 || !is_final(b->images[i]->state))
        return tsr_errorf(TSR_ERR_NOT_FOUND, "image %d is %s", image,
                          i < 0 ? "unknown" : tsr_image_state_name(b->images[i]->state));
    tsr_batch_image *j = b->images[i];
    out->image = j->id;
    out->status = j->status;
    out->width = j->width;
    out->height = j->height;
    out->seed = j->seed;
    if (j->state == TSR_IMAGE_DONE) {
        out->rgb = j->rgb;
        out->parameters = j->parameters;
        j->rgb = NULL;
        j->parameters = NULL;
    }
    b->images[i] = b->images[--b->n_images];
    if (b->busy > 0) {
        /* a step may still point at it: free it when the step returns */
        if (b->n_grave == b->grave_cap) {
            int cap = b->grave_cap ? 2 * b->grave_cap : 8;
            tsr_batch_image **g = realloc(b->graveyard, (size_t)cap * sizeof *g);
            if (!g) {
                /* keep it in the batch rather than free it under the step */
                b->images[b->n_images++] = j;
                j->rgb = out->rgb;
                j->parameters = out->parameters;
                memset(out, 0, sizeof *out);
                return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
            }
            b->graveyard = g;
            b->grave_cap = cap;
        }
        b->graveyard[b->n_grave++] = j;
    } else {
        tsr_batch_image_free(j);
    }
    return TSR_OK;
}

void tsr_batch_bury(tsr_batch *b)
{
    if (b->busy > 0)
        return;
    for (int i = 0; i < b->n_grave; i++)
        tsr_batch_image_free(b->graveyard[i]);
    b->n_grave = 0;
}

void tsr_result_free(tsr_result *r)
{
    if (!r)
        return;
    free(r->rgb);
    free(r->parameters);
    memset(r, 0, sizeof *r);
}

int tsr_batch_image_info(const tsr_batch *b, int image, tsr_image_info *out)
{
    memset(out, 0, sizeof *out);
    int i = find_image(b, image);
    if (i < 0)
        return tsr_errorf(TSR_ERR_NOT_FOUND, "no image %d", image);
    const tsr_batch_image *j = b->images[i];
    out->image = j->id;
    out->state = j->state;
    out->status = j->status;
    out->step = tsr_batch_image_steps_done(j);
    out->steps = tsr_batch_image_steps_total(j);
    out->width = j->width;
    out->height = j->height;
    out->seed = j->seed;
    out->prepare_seconds = j->prepare_s;
    out->denoise_seconds = j->denoise_s;
    out->decode_seconds = j->decode_s;
    return TSR_OK;
}

void tsr_batch_stats_get(const tsr_batch *b, tsr_batch_stats *out)
{
    *out = b->stats;
    out->queued = out->running = out->finished = 0;
    for (int i = 0; i < b->n_images; i++) {
        tsr_image_state s = b->images[i]->state;
        if (s == TSR_IMAGE_QUEUED || s == TSR_IMAGE_ENCODING)
            out->queued++;
        else if (s == TSR_IMAGE_DENOISING || s == TSR_IMAGE_DECODING)
            out->running++;
        else
            out->finished++;
    }
}
