/*
 * pipeline/params.c - image parameters: defaults, the checks every caller
 * shares, and the sampler/schedule tables of the public API.
 *
 * tsr_image_params_check is the single place a request's parameters are
 * judged.  tsr_batch_submit calls it, and so can a server on its own thread
 * before it queues anything: it reads only what tsr_engine_open fixed (sizes,
 * channel counts, the text encoders' depth), never a batch, so it is safe
 * beside a worker that steps a batch of the same engine.  Every failure
 * names the parameter (`field`) so that the CLI can name its flag and the
 * server its JSON field.
 */
#include <pthread.h>
#include <string.h>

#include "core/error.h"
#include "pipeline/hires.h"
#include "pipeline/lora.h"
#include "pipeline/pipeline_internal.h"

void tsr_image_params_init(tsr_image_params *p)
{
    memset(p, 0, sizeof *p);
    p->prompt = "";
    p->steps = 30;
    p->cfg_scale = 7.5;
    p->rng = "cpu";
    p->clip_skip = 1;
    p->strength = 0.75;
    p->hires_strength = 0.7;
    p->mask_fill = 1;
}

const char *tsr_image_state_name(tsr_image_state s)
{
    static const char *const names[] = {"queued", "encoding", "denoising", "decoding",
                                        "done",   "failed",   "cancelled"};
    return (unsigned)s < sizeof names / sizeof *names ? names[s] : "?";
}

/* Raise an error about one field. */
#define FIELD_ERR(name, code, ...)            \
    do {                                      \
        if (field)                            \
            *field = (name);                  \
        return tsr_errorf((code), __VA_ARGS__); \
    } while (0)

int tsr_params_resolve(const tsr_engine *e, const tsr_image_params *p, tsr_params_resolved *r,
                       const char **field)
{
    if (field)
        *field = NULL;
    if (!p)
        return tsr_errorf(TSR_ERR_INVALID, "no parameters");
    memset(r, 0, sizeof *r);
    r->width = p->width ? p->width : e->default_size;
    r->height = p->height ? p->height : e->default_size;
    const int m = e->size_multiple;
    const char *wh = (r->width < TSR_MIN_SIZE || r->width > TSR_MAX_SIZE || r->width % 8 ||
                      r->width % m)
                         ? "width"
                         : "height";
    if (r->width < TSR_MIN_SIZE || r->width > TSR_MAX_SIZE || r->height < TSR_MIN_SIZE ||
        r->height > TSR_MAX_SIZE)
        FIELD_ERR(wh, TSR_ERR_INVALID, "width and height must be within %d..%d, got %dx%d",
                  TSR_MIN_SIZE, TSR_MAX_SIZE, r->width, r->height);
    if (r->width % 8 || r->height % 8)
        FIELD_ERR(wh, TSR_ERR_INVALID, "width and height must be multiples of 8, got %dx%d",
                  r->width, r->height);
    if (r->width % m || r->height % m)
        FIELD_ERR(wh, TSR_ERR_INVALID,
                  "this model's VAE needs width and height in multiples of %d, got %dx%d", m,
                  r->width, r->height);
    if (p->steps < 1 || p->steps > TSR_MAX_STEPS)
        FIELD_ERR("steps", TSR_ERR_INVALID, "steps must be within 1..%d, got %d", TSR_MAX_STEPS,
                  p->steps);
    if (!(p->cfg_scale >= 0 && p->cfg_scale <= 100))
        FIELD_ERR("cfg_scale", TSR_ERR_INVALID, "cfg scale must be within 0..100, got %g",
                  p->cfg_scale);
    if (!(p->guidance_rescale >= 0 && p->guidance_rescale <= 1))
        FIELD_ERR("guidance_rescale", TSR_ERR_INVALID,
                  "guidance rescale must be within 0..1, got %g", p->guidance_rescale);
    if (!(p->eta >= 0 && p->eta <= 1))
        FIELD_ERR("eta", TSR_ERR_INVALID, "eta must be within 0..1, got %g", p->eta);
    const int max_skip = tsr_text_cond_max_clip_skip(e->cond);
    if (p->clip_skip < 1 || p->clip_skip > max_skip)
        FIELD_ERR("clip_skip", TSR_ERR_INVALID,
                  "clip skip must be within 1..%d for this model's text encoder, got %d",
                  max_skip, p->clip_skip);
    if (!p->prompt)
        FIELD_ERR("prompt", TSR_ERR_INVALID, "no prompt");

    const char *rng = p->rng ? p->rng : "cpu";
    int kind = tsr_rng_kind_parse(rng);
    if (kind < 0)
        FIELD_ERR("rng", TSR_ERR_INVALID, "rng must be cpu or cuda, not '%s'", rng);
    r->rng = (tsr_rng_kind)kind;

    r->sampler = e->default_sampler;
    r->schedule = TSR_SCHEDULE_DEFAULT;
    if (p->sampler && *p->sampler && tsr_sampler_parse(p->sampler, &r->sampler, &r->schedule) < 0)
        FIELD_ERR("sampler", TSR_ERR_INVALID, "%s", tsr_last_error());
    if (p->schedule && *p->schedule && tsr_schedule_parse(p->schedule, &r->schedule) < 0)
        FIELD_ERR("scheduler", TSR_ERR_INVALID, "%s", tsr_last_error());
    if (!tsr_sampler_supports_schedule(r->sampler, r->schedule))
        FIELD_ERR("scheduler", TSR_ERR_UNSUPPORTED, "sampler %s does not offer the %s schedule",
                  tsr_sampler_name(r->sampler), tsr_schedule_name(r->schedule));

    if (p->init_image && !(p->strength > 0 && p->strength <= 1))
        FIELD_ERR("strength", TSR_ERR_INVALID, "strength must be within (0, 1], got %g",
                  p->strength);
    const bool inpaint_model = e->in_channels != e->latent_channels;
    if (p->mask && !p->init_image)
        FIELD_ERR("mask", TSR_ERR_INVALID, "a mask needs an init image");
    if (inpaint_model && !p->mask)
        FIELD_ERR(p->init_image ? "mask" : "init_image", TSR_ERR_INVALID,
                  "this is an inpainting model: give an init image and a mask");
    if (p->init_image && (int)((double)p->steps * p->strength) < 1)
        FIELD_ERR("strength", TSR_ERR_INVALID,
                  "strength %g leaves no denoising step out of %d (steps x strength must be at "
                  "least 1)",
                  p->strength, p->steps);
    if (p->noise_index < 0 || p->noise_index > 4095)
        FIELD_ERR("noise_index", TSR_ERR_INVALID, "noise_index must be within 0..4095, got %d",
                  p->noise_index);
    if (p->tiling != 0 && p->tiling != 1)
        FIELD_ERR("tiling", TSR_ERR_INVALID, "tiling must be 0 or 1 (true or false), got %d",
                  p->tiling);
    if (p->mask_fill < 0 || p->mask_fill > 3)
        FIELD_ERR("mask_fill", TSR_ERR_INVALID,
                  "mask fill must be 0 (fill), 1 (original), 2 (latent noise) or 3 (latent "
                  "nothing), got %d",
                  p->mask_fill);
    tsr_hires_plan plan;
    TSR_TRY(tsr_hires_check(e, p, r->width, r->height, &plan, field));
    TSR_TRY(tsr_image_lora_check(e, p, field));
    return TSR_OK;
}

int tsr_image_params_check(const tsr_engine *e, const tsr_image_params *p, const char **field)
{
    tsr_params_resolved r;
    return tsr_params_resolve(e, p, &r, field);
}

/* ---- the sampler and schedule tables ---- */

static tsr_sampler_desc g_samplers[TSR_SAMPLER_COUNT];
static tsr_schedule_desc g_schedules[TSR_SCHEDULE_COUNT];
static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;

static void fill_tables(void)
{
    for (int s = 0; s < TSR_SCHEDULE_COUNT; s++) {
        g_schedules[s].name = tsr_schedule_name((tsr_schedule)s);
        g_schedules[s].a1111 = tsr_schedule_display_name((tsr_schedule)s);
    }
    for (int k = 0; k < TSR_SAMPLER_COUNT; k++) {
        tsr_sampler_desc *d = &g_samplers[k];
        d->name = tsr_sampler_name((tsr_sampler_kind)k);
        d->a1111 = tsr_sampler_display_name((tsr_sampler_kind)k);
        d->diffusers = tsr_sampler_class_name((tsr_sampler_kind)k);
        for (int s = 0; s < TSR_SCHEDULE_COUNT; s++)
            if (tsr_sampler_supports_schedule((tsr_sampler_kind)k, (tsr_schedule)s))
                d->schedules |= 1u << s;
    }
}

int tsr_samplers(const tsr_sampler_desc **out)
{
    pthread_once(&g_tables_once, fill_tables);
    *out = g_samplers;
    return TSR_SAMPLER_COUNT;
}

int tsr_schedules(const tsr_schedule_desc **out)
{
    pthread_once(&g_tables_once, fill_tables);
    *out = g_schedules;
    return TSR_SCHEDULE_COUNT;
}
