/*
 * scheduler/sampler.c - the per-image sampler object: defaults resolution,
 * img2img truncation, input scaling, add_noise and step dispatch.
 *
 * Why here: everything that is the same for all samplers lives in
 * one place; the sampler_*.c files hold only each family's step() math.
 * The sampler's position `pos` is diffusers' step_index: an index into the
 * full timestep list that starts at the img2img begin index (diffusers'
 * set_begin_index(t_start * order)) and grows by one per model evaluation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "scheduler/sched_internal.h"

/* No a*b+c contraction: gcc does none in ISO C mode (-std=c17); clang needs the pragma. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

tsr_sampler_params tsr_sampler_params_default(void)
{
    tsr_sampler_params p;
    memset(&p, 0, sizeof p);
    p.kind = TSR_SAMPLER_EULER;
    p.schedule = TSR_SCHEDULE_DEFAULT;
    p.steps = 30;
    p.strength = 1.0;
    p.eta = 0.0;
    p.channels = 4;
    p.height = 64;
    p.width = 64;
    p.nhwc = true;
    return p;
}

/* from_config(): file values over class defaults; keys the class lacks are
 * dropped. */
static void resolve(tsr_sampler_kind k, const tsr_sched_config *in, tsr_sched_resolved *c)
{
    *c = *in;
    bool sd_betas = k == TSR_SAMPLER_HEUN || k == TSR_SAMPLER_DPMPP_SDE || k == TSR_SAMPLER_LCM ||
                    k == TSR_SAMPLER_DPM2 || k == TSR_SAMPLER_DPM2_A;
    if (c->num_train_timesteps < 0)
        c->num_train_timesteps = 1000;
    if (isnan(c->beta_start))
        c->beta_start = sd_betas ? 0.00085 : 0.0001;
    if (isnan(c->beta_end))
        c->beta_end = sd_betas ? 0.012 : 0.02;
    if (c->beta_schedule == TSR_BETA_UNSET)
        c->beta_schedule = k == TSR_SAMPLER_LCM ? TSR_BETA_SCALED_LINEAR : TSR_BETA_LINEAR;
    bool leading = k == TSR_SAMPLER_DDIM || k == TSR_SAMPLER_PNDM || k == TSR_SAMPLER_PLMS ||
                   k == TSR_SAMPLER_LCM || k == TSR_SAMPLER_DDPM;
    if (c->timestep_spacing == TSR_SPACING_UNSET)
        c->timestep_spacing = leading ? TSR_SPACING_LEADING : TSR_SPACING_LINSPACE;
    if (c->steps_offset < 0)
        c->steps_offset = 0;
    if (c->prediction_type == TSR_PRED_UNSET)
        c->prediction_type = TSR_PRED_EPSILON;
    if (c->rescale_betas_zero_snr < 0)
        c->rescale_betas_zero_snr = 0;
    if (c->final_sigmas_type == TSR_FINAL_UNSET)
        c->final_sigmas_type = TSR_FINAL_ZERO;
    if (k != TSR_SAMPLER_EULER && k != TSR_SAMPLER_DPMPP_2M && k != TSR_SAMPLER_DPMPP_2M_SDE &&
        k != TSR_SAMPLER_DPMPP_3M_SDE && k != TSR_SAMPLER_UNIPC)
        c->final_sigmas_type = TSR_FINAL_ZERO;
    if (c->clip_sample < 0)
        c->clip_sample = k == TSR_SAMPLER_DDIM || k == TSR_SAMPLER_DDPM ? 1 : 0;
    if (k != TSR_SAMPLER_DDIM && k != TSR_SAMPLER_HEUN && k != TSR_SAMPLER_LCM &&
        k != TSR_SAMPLER_DDPM)
        c->clip_sample = 0;
    if (isnan(c->clip_sample_range))
        c->clip_sample_range = 1.0;
    if (c->set_alpha_to_one < 0)
        c->set_alpha_to_one = k == TSR_SAMPLER_PNDM || k == TSR_SAMPLER_PLMS ? 0 : 1;
    if (c->skip_prk_steps < 0)
        c->skip_prk_steps = 0;
    if (k == TSR_SAMPLER_PLMS)
        c->skip_prk_steps = 1; /* A1111's PLMS: PNDMScheduler(skip_prk_steps=True) */
    if (c->solver_order < 0)
        c->solver_order = 2;
    if (k == TSR_SAMPLER_DPMPP_3M_SDE)
        c->solver_order = 3;
    if (c->lower_order_final < 0)
        c->lower_order_final = 1;
    if (c->euler_at_final < 0)
        c->euler_at_final = 0;
    if (c->use_karras_sigmas < 0)
        c->use_karras_sigmas = 0;
    if (c->use_exponential_sigmas < 0)
        c->use_exponential_sigmas = 0;
    if (!tsr_sampler_supports_schedule(k, TSR_SCHEDULE_KARRAS))
        c->use_karras_sigmas = c->use_exponential_sigmas = 0;
    if (c->original_inference_steps < 0)
        c->original_inference_steps = 50;
    if (isnan(c->timestep_scaling))
        c->timestep_scaling = 10.0;
    if (c->variance_type == TSR_VARIANCE_UNSET)
        c->variance_type = TSR_VARIANCE_FIXED_SMALL;
}

static bool sigma_based(tsr_sampler_kind k)
{
    return tsr_sched_is_sigma_kind(k);
}

static int order_of(tsr_sampler_kind k)
{
    return tsr_sched_is_two_stage(k) ? 2 : 1;
}

int tsr_sampler_create(const tsr_sched_config *cfg, const tsr_sampler_params *p, tsr_sampler **out)
{
    int rc = 0;
    *out = NULL;
    if (!cfg || !p)
        return tsr_errorf(TSR_ERR_INVALID, "sampler: NULL argument");
    if ((unsigned)p->kind >= TSR_SAMPLER_COUNT || (unsigned)p->schedule >= TSR_SCHEDULE_COUNT)
        return tsr_errorf(TSR_ERR_INVALID, "sampler: bad sampler or schedule id");
    if (p->steps < 1 || p->steps > TSR_SCHED_MAX_STEPS)
        return tsr_errorf(TSR_ERR_INVALID, "sampler: steps %d is outside [1, %d]", p->steps,
                          TSR_SCHED_MAX_STEPS);
    if (!(p->strength > 0 && p->strength <= 1))
        return tsr_errorf(TSR_ERR_INVALID, "sampler: strength %g is outside (0, 1]", p->strength);
    if (!(p->eta >= 0 && p->eta <= 10))
        return tsr_errorf(TSR_ERR_INVALID, "sampler: eta %g is outside [0, 10]", p->eta);
    if (p->channels <= 0 || p->height <= 0 || p->width <= 0 || p->channels > 4096 ||
        p->height > 65536 || p->width > 65536 ||
        (size_t)p->channels * (size_t)p->height > ((size_t)1 << 34) / (size_t)p->width)
        return tsr_errorf(TSR_ERR_INVALID, "sampler: bad latent shape %dx%dx%d", p->channels,
                          p->height, p->width);
    if (!tsr_sampler_supports_schedule(p->kind, p->schedule))
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "sampler %s does not support the %s schedule",
                          tsr_sampler_name(p->kind), tsr_schedule_name(p->schedule));
    tsr_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return tsr_errorf(TSR_ERR_NOMEM, "sampler: no memory");
    s->p = *p;
    s->n = (size_t)p->channels * (size_t)p->height * (size_t)p->width;
    resolve(p->kind, cfg, &s->c);
    if (p->schedule == TSR_SCHEDULE_KARRAS) {
        s->c.use_karras_sigmas = 1;
        s->c.use_exponential_sigmas = 0;
    } else if (p->schedule == TSR_SCHEDULE_EXPONENTIAL) {
        s->c.use_exponential_sigmas = 1;
        s->c.use_karras_sigmas = 0;
    } else if (p->schedule == TSR_SCHEDULE_SGM_UNIFORM) {
        s->c.timestep_spacing = TSR_SPACING_TRAILING;
        s->c.use_karras_sigmas = s->c.use_exponential_sigmas = 0;
    } else if (tsr_schedule_is_comfy(p->schedule)) {
        /* ComfyUI's list as it is: no diffusers sigma options, a final 0 */
        s->c.use_karras_sigmas = s->c.use_exponential_sigmas = 0;
        s->c.final_sigmas_type = TSR_FINAL_ZERO;
    }
    if (s->c.prediction_type == TSR_PRED_SAMPLE &&
        (p->kind == TSR_SAMPLER_EULER_A || p->kind == TSR_SAMPLER_DPMPP_SDE ||
         p->kind == TSR_SAMPLER_PNDM || p->kind == TSR_SAMPLER_PLMS || p->kind == TSR_SAMPLER_DPM2 ||
         p->kind == TSR_SAMPLER_DPM2_A)) {
        rc = tsr_errorf(TSR_ERR_UNSUPPORTED, "sampler %s: prediction_type \"sample\" is not supported",
                        tsr_sampler_name(p->kind));
        goto fail;
    }
    TSR_CHECK_GOTO(rc, tsr_sched_make_alphas(s), fail);
    TSR_CHECK_GOTO(rc, tsr_sched_make_timesteps(s), fail);

    /* img2img: diffusers' get_timesteps() */
    int n_inf = p->steps;
    int init_t = (int)((double)n_inf * p->strength);
    if (init_t > n_inf)
        init_t = n_inf;
    int t_start = n_inf - init_t > 0 ? n_inf - init_t : 0;
    if (tsr_schedule_is_comfy(p->schedule))
        t_start = 0; /* ComfyUI's denoise is in the sigma list already */
    s->begin = t_start * order_of(p->kind);
    if (s->begin >= s->nt) {
        rc = tsr_errorf(TSR_ERR_UNSUPPORTED,
                        "sampler: strength %g leaves no denoising step out of %d", p->strength,
                        p->steps);
        goto fail;
    }
    s->pos = s->begin;

    size_t bytes = s->n * sizeof(float);
    int nh = p->kind == TSR_SAMPLER_PNDM || p->kind == TSR_SAMPLER_PLMS || p->kind == TSR_SAMPLER_LMS
                 ? 4
                 : 3;
    for (int i = 0; i < nh; i++)
        if (!(s->hist[i] = calloc(1, bytes)))
            goto nomem;
    if (!(s->save = calloc(1, bytes)) || !(s->tmp = calloc(1, bytes)) ||
        !(s->tmp2 = calloc(1, bytes)))
        goto nomem;
    *out = s;
    return 0;
nomem:
    rc = tsr_errorf(TSR_ERR_NOMEM, "sampler: no memory for a %zu-element latent", s->n);
fail:
    tsr_sampler_free(s);
    return rc;
}

void tsr_sampler_free(tsr_sampler *s)
{
    if (!s)
        return;
    free(s->acp);
    free(s->timesteps);
    free(s->sigmas);
    free(s->aux);
    for (int i = 0; i < TSR_SCHED_HIST; i++)
        free(s->hist[i]);
    free(s->save);
    free(s->tmp);
    free(s->tmp2);
    free(s);
}

size_t tsr_sampler_numel(const tsr_sampler *s) { return s->n; }
int tsr_sampler_evals_total(const tsr_sampler *s) { return s->nt - s->begin; }
int tsr_sampler_evals_done(const tsr_sampler *s) { return s->pos - s->begin; }
bool tsr_sampler_done(const tsr_sampler *s) { return s->pos >= s->nt; }

int tsr_sampler_evals_for_next_step(const tsr_sampler *s)
{
    if (tsr_sampler_done(s))
        return 0;
    if (order_of(s->p.kind) == 2)
        return s->pos + 1 < s->nt ? 2 : 1;
    return 1;
}

int tsr_sampler_steps_total(const tsr_sampler *s)
{
    int e = tsr_sampler_evals_total(s);
    return order_of(s->p.kind) == 2 ? (e + 1) / 2 : e;
}

int tsr_sampler_steps_done(const tsr_sampler *s)
{
    int e = tsr_sampler_evals_done(s);
    return order_of(s->p.kind) == 2 ? (e + 1) / 2 : e;
}

double tsr_sampler_timestep(const tsr_sampler *s)
{
    return s->pos < s->nt ? s->timesteps[s->pos] : 0;
}

float tsr_sampler_input_divisor(const tsr_sampler *s)
{
    if (!sigma_based(s->p.kind) || s->pos >= s->nt)
        return 1.0f;
    float sigma = s->sigmas[s->pos];
    if (s->have_save && s->p.kind != TSR_SAMPLER_HEUN && order_of(s->p.kind) == 2)
        sigma = s->mid_sigma; /* the second evaluation of DPM++ SDE, DPM2, DPM2 a, DPM++ 2S a */
    return sqrtf(sigma * sigma + 1.0f);
}

void tsr_sampler_scale_input(const tsr_sampler *s, const float *x, float *out)
{
    float d = tsr_sampler_input_divisor(s);
    if (d == 1.0f && !sigma_based(s->p.kind)) {
        if (out != x)
            memmove(out, x, s->n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < s->n; i++)
        out[i] = x[i] / d;
}

float tsr_sampler_init_noise_sigma(const tsr_sampler *s)
{
    if (!sigma_based(s->p.kind))
        return 1.0f;
    if (tsr_schedule_is_comfy(s->p.schedule)) {
        /* k-diffusion's KSAMPLER: sqrt(1 + sigma0^2) when sigma0 is the
         * model's sigma_max (math.isclose, rel_tol 1e-5) or above, else sigma0 */
        float s0 = s->sigmas[0], mx = s->comfy_sigma_max;
        if (fabsf(s0 - mx) <= 1e-5f * fmaxf(fabsf(s0), fabsf(mx)) || s0 > mx)
            return sqrtf(1.0f + s0 * s0);
        return s0;
    }
    float mx = 0;
    for (int i = 0; i < s->ns; i++)
        if (s->sigmas[i] > mx)
            mx = s->sigmas[i];
    if (s->c.timestep_spacing == TSR_SPACING_LINSPACE || s->c.timestep_spacing == TSR_SPACING_TRAILING)
        return mx;
    return sqrtf(mx * mx + 1.0f);
}

void tsr_sampler_scale_noise(const tsr_sampler *s, float *x)
{
    float k = tsr_sampler_init_noise_sigma(s);
    for (size_t i = 0; i < s->n; i++)
        x[i] = x[i] * k;
}

/* scheduler.add_noise with the noise level of full-schedule index `idx`
 * (diffusers' sigmas[step_index] for the sigma schedulers, or
 * alphas_cumprod[timesteps[idx]] for the DDPM family, which look the level
 * up by timestep value). */
static void add_noise_at(const tsr_sampler *s, int idx, const float *x0, const float *noise,
                         float *out)
{
    tsr_sampler_kind k = s->p.kind;
    if (sigma_based(k)) {
        float sigma = s->sigmas[idx];
        for (size_t i = 0; i < s->n; i++)
            out[i] = x0[i] + noise[i] * sigma;
    } else if (tsr_sched_is_multistep(k)) {
        float sigma = s->sigmas[idx];
        float alpha_t = 1.0f / sqrtf(sigma * sigma + 1.0f);
        float sigma_t = sigma * alpha_t;
        for (size_t i = 0; i < s->n; i++)
            out[i] = alpha_t * x0[i] + sigma_t * noise[i];
    } else {
        float a = tsr_sched_acp(s, (long)s->timesteps[idx]);
        float sa = sqrtf(a), sb = sqrtf(1.0f - a);
        for (size_t i = 0; i < s->n; i++)
            out[i] = sa * x0[i] + sb * noise[i];
    }
}

void tsr_sampler_add_noise(const tsr_sampler *s, const float *x0, const float *noise, float *out)
{
    if (tsr_schedule_is_comfy(s->p.schedule) && sigma_based(s->p.kind)) {
        /* k-diffusion's KSAMPLER: latent + noise * sqrt(1 + sigma0^2) when
         * sigma0 is the model's sigma_max (denoise 1 on an image), else
         * latent + noise * sigma0 */
        float k = tsr_sampler_init_noise_sigma(s);
        for (size_t i = 0; i < s->n; i++)
            out[i] = x0[i] + noise[i] * k;
        return;
    }
    add_noise_at(s, s->begin, x0, noise, out);
}

int tsr_sampler_add_noise_next(const tsr_sampler *s, const float *x0, const float *noise,
                               float *out)
{
    if (tsr_sampler_done(s))
        return tsr_errorf(TSR_ERR_INVALID, "sampler: add_noise_next() after the last step");
    add_noise_at(s, s->pos, x0, noise, out);
    return TSR_OK;
}

int tsr_sched_noise(tsr_sampler *s, tsr_rng *rng, float *dst)
{
    if (!rng)
        return tsr_errorf(TSR_ERR_INVALID, "sampler %s needs an rng for its noise",
                          tsr_sampler_name(s->p.kind));
    if (s->p.nhwc)
        return tsr_rng_randn_nhwc(rng, s->p.channels, s->p.height, s->p.width, dst);
    return tsr_rng_randn(rng, dst, s->n);
}

int tsr_sampler_step(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    if (!s || !mo || !x)
        return tsr_errorf(TSR_ERR_INVALID, "sampler: NULL argument");
    if (tsr_sampler_done(s))
        return tsr_errorf(TSR_ERR_INVALID, "sampler: step() after the last step");
    switch (s->p.kind) {
    case TSR_SAMPLER_EULER:
    case TSR_SAMPLER_EULER_A:
    case TSR_SAMPLER_HEUN:
    case TSR_SAMPLER_LMS:
    case TSR_SAMPLER_DPMPP_SDE:
        return tsr_sched_step_sigma(s, mo, x, rng, x0);
    case TSR_SAMPLER_DPM2:
    case TSR_SAMPLER_DPM2_A:
    case TSR_SAMPLER_DPMPP_2S_A:
        return tsr_sched_step_kdiff(s, mo, x, rng, x0);
    case TSR_SAMPLER_DPMPP_2M:
    case TSR_SAMPLER_DPMPP_2M_SDE:
    case TSR_SAMPLER_DPMPP_3M_SDE:
    case TSR_SAMPLER_UNIPC:
        return tsr_sched_step_multistep(s, mo, x, rng, x0);
    default:
        return tsr_sched_step_ddpm(s, mo, x, rng, x0);
    }
}

const double *tsr_sampler_timesteps(const tsr_sampler *s, int *n)
{
    *n = s->nt - s->begin;
    return s->timesteps + s->begin;
}

const float *tsr_sampler_sigmas(const tsr_sampler *s, int *n)
{
    *n = s->ns;
    return s->sigmas;
}
