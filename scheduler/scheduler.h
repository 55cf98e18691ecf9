/*
 * scheduler/scheduler.h - samplers and noise schedules, step for step as
 * diffusers does them.
 *
 * Why this shape: the pipeline holds a batch of independent images that join
 * and leave between UNet calls, each with its own sampler, step count and
 * seed.  So a sampler is a small per-image state machine over one latent
 * (a float array of any length): it owns its timestep/sigma schedule and its
 * history (multistep outputs, Heun's first stage, PNDM's ets), and the
 * pipeline only asks "which timestep and input scale for the next model
 * evaluation?" and hands back the model output.  Samplers that need two
 * evaluations per step (Heun, DPM++ SDE, DPM2, DPM++ 2S a) or an extra one
 * (PNDM's PLMS warm-up) simply report more evaluations; the pipeline never
 * needs to know which sampler it drives.
 *
 * Fidelity: each sampler mirrors the diffusers 0.35.2 class of the same name,
 * including float32 rounding of the scalar coefficients (diffusers keeps
 * sigmas and alphas in float32 tensors) and the order of the element-wise
 * operations, so full step sequences match diffusers within ~1e-6
 * (tests/scheduler).  DPM++ 2S a, which diffusers lacks, follows k-diffusion
 * (docs/samplers.md).  Noise for ancestral/SDE samplers comes from a tsr_rng
 * stream drawn exactly where diffusers calls randn_tensor(generator=...).
 *
 * Usage for one image (txt2img):
 *     tsr_sched_config cfg; tsr_sched_config_from_json(json, "scheduler_config.json", &cfg);
 *     tsr_sampler_params p = tsr_sampler_params_default();
 *     p.kind = TSR_SAMPLER_EULER_A; p.steps = 30; p.channels = 4; p.height = 64; p.width = 64;
 *     tsr_sampler *s; tsr_sampler_create(&cfg, &p, &s);
 *     tsr_rng rng; tsr_rng_init(&rng, TSR_RNG_CPU, seed);
 *     tsr_rng_randn_nhwc(&rng, 4, 64, 64, latent);   // then * init_noise_sigma
 *     tsr_sampler_scale_noise(s, latent);
 *     while (!tsr_sampler_done(s)) {
 *         double t = tsr_sampler_timestep(s);
 *         tsr_sampler_scale_input(s, latent, unet_in);       // model input
 *         ... unet(unet_in, t) -> eps (with CFG) ...
 *         tsr_sampler_step(s, eps, latent, &rng, x0_preview);
 *     }
 * img2img: set p.strength; noise the encoded image with tsr_sampler_add_noise().
 */
#ifndef TSR_SCHEDULER_H
#define TSR_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>

#include "scheduler/rng.h"

struct cJSON;

typedef enum tsr_sampler_kind {
    TSR_SAMPLER_EULER,        /* EulerDiscreteScheduler */
    TSR_SAMPLER_EULER_A,      /* EulerAncestralDiscreteScheduler */
    TSR_SAMPLER_HEUN,         /* HeunDiscreteScheduler */
    TSR_SAMPLER_DPMPP_2M,     /* DPMSolverMultistepScheduler (dpmsolver++) */
    TSR_SAMPLER_DPMPP_2M_SDE, /* DPMSolverMultistepScheduler (sde-dpmsolver++) */
    TSR_SAMPLER_DPMPP_SDE,    /* DPMSolverSDEScheduler (noise: see docs/samplers.md) */
    TSR_SAMPLER_DDIM,         /* DDIMScheduler */
    TSR_SAMPLER_PNDM,         /* PNDMScheduler */
    TSR_SAMPLER_LMS,          /* LMSDiscreteScheduler */
    TSR_SAMPLER_UNIPC,        /* UniPCMultistepScheduler */
    TSR_SAMPLER_LCM,          /* LCMScheduler */
    TSR_SAMPLER_PLMS,         /* PNDMScheduler with skip_prk_steps (A1111's PLMS) */
    TSR_SAMPLER_DPM2,         /* KDPM2DiscreteScheduler */
    TSR_SAMPLER_DPM2_A,       /* KDPM2AncestralDiscreteScheduler */
    TSR_SAMPLER_DPMPP_2S_A,   /* k-diffusion's sample_dpmpp_2s_ancestral (no diffusers class) */
    TSR_SAMPLER_DPMPP_3M_SDE, /* DPMSolverMultistepScheduler (sde-dpmsolver++, order 3) */
    TSR_SAMPLER_DDPM,         /* DDPMScheduler */
    TSR_SAMPLER_COUNT
} tsr_sampler_kind;

typedef enum tsr_schedule {
    TSR_SCHEDULE_DEFAULT,     /* the config's own spacing */
    TSR_SCHEDULE_KARRAS,      /* use_karras_sigmas */
    TSR_SCHEDULE_EXPONENTIAL, /* use_exponential_sigmas */
    TSR_SCHEDULE_SGM_UNIFORM, /* timestep_spacing = "trailing" */
    /* ComfyUI's schedules, as its comfy/samplers.py computes them over the
     * model's 1000 discrete sigmas (sched_comfy.c, docs/samplers.md): */
    TSR_SCHEDULE_COMFY_NORMAL,      /* "comfy_normal" */
    TSR_SCHEDULE_COMFY_KARRAS,      /* "comfy_karras": rho 7 over sigma_min..sigma_max */
    TSR_SCHEDULE_COMFY_EXPONENTIAL, /* "comfy_exponential" */
    TSR_SCHEDULE_COMFY_SGM_UNIFORM, /* "comfy_sgm_uniform" */
    TSR_SCHEDULE_COMFY_SIMPLE,      /* "comfy_simple" */
    TSR_SCHEDULE_COMFY_DDIM_UNIFORM,/* "comfy_ddim_uniform" */
    TSR_SCHEDULE_COMFY_BETA,        /* "comfy_beta": Beta(0.6, 0.6) quantiles */
    TSR_SCHEDULE_COUNT
} tsr_schedule;

/* Enumerated config values; 0 is always "unset: use the class default". */
enum { TSR_BETA_UNSET, TSR_BETA_LINEAR, TSR_BETA_SCALED_LINEAR, TSR_BETA_SQUAREDCOS };
enum { TSR_SPACING_UNSET, TSR_SPACING_LEADING, TSR_SPACING_TRAILING, TSR_SPACING_LINSPACE };
enum { TSR_PRED_UNSET, TSR_PRED_EPSILON, TSR_PRED_V, TSR_PRED_SAMPLE };
enum { TSR_FINAL_UNSET, TSR_FINAL_ZERO, TSR_FINAL_SIGMA_MIN };
enum { TSR_INTERP_UNSET, TSR_INTERP_LINEAR, TSR_INTERP_LOG_LINEAR };
enum { TSR_VARIANCE_UNSET, TSR_VARIANCE_FIXED_SMALL, TSR_VARIANCE_FIXED_SMALL_LOG };

/* A scheduler_config.json.  Fields hold what the file says; a field left
 * unset (0 for enums, -1 for ints and booleans, NAN for doubles) takes the
 * default of the diffusers class the sampler mirrors, exactly as
 * `Class.from_config(config)` does. */
typedef struct tsr_sched_config {
    int num_train_timesteps;     /* -1 */
    double beta_start, beta_end; /* NAN */
    int beta_schedule;           /* TSR_BETA_* */
    int timestep_spacing;        /* TSR_SPACING_* */
    int steps_offset;            /* -1 */
    int prediction_type;         /* TSR_PRED_* */
    int rescale_betas_zero_snr;  /* -1 / 0 / 1 */
    int final_sigmas_type;       /* TSR_FINAL_* */
    int interpolation_type;      /* TSR_INTERP_* (Euler) */
    int clip_sample;             /* -1 / 0 / 1 */
    double clip_sample_range;    /* NAN */
    int set_alpha_to_one;        /* -1 / 0 / 1 */
    int skip_prk_steps;          /* -1 / 0 / 1 (PNDM) */
    int solver_order;            /* -1 (DPM, UniPC) */
    int lower_order_final;       /* -1 / 0 / 1 */
    int euler_at_final;          /* -1 / 0 / 1 */
    int use_karras_sigmas;       /* -1 / 0 / 1: the model's own choice */
    int use_exponential_sigmas;  /* -1 / 0 / 1 */
    int original_inference_steps;/* -1 (LCM) */
    double timestep_scaling;     /* NAN (LCM) */
    double sigma_min, sigma_max; /* NAN (Euler only, as diffusers) */
    int variance_type;           /* TSR_VARIANCE_* (DDPM) */
} tsr_sched_config;

/* All fields unset. */
void tsr_sched_config_init(tsr_sched_config *cfg);

/* Read a scheduler_config.json object (borrowed).  Unknown keys are ignored
 * (as diffusers does); known keys are type- and range-checked, and options
 * Tessera does not implement (thresholding, trained_betas, timestep_type
 * "continuous", use_beta_sigmas, use_flow_sigmas, algorithm/solver types
 * other than the samplers' own) are TSR_ERR_UNSUPPORTED naming the key.
 * `label` (borrowed, may be NULL) names the file in errors.  NULL `obj`
 * gives the unset config. */
int tsr_sched_config_from_json(const struct cJSON *obj, const char *label, tsr_sched_config *cfg);

/* Names.  Short CLI names: euler, euler_a, heun, dpmpp_2m, dpmpp_2m_sde,
 * dpmpp_sde, ddim, pndm, lms, unipc, lcm, plms, dpm2, dpm2_a, dpmpp_2s_a,
 * dpmpp_3m_sde, ddpm (TSR_SAMPLER_NAMES).  Schedules: default, karras,
 * exponential, sgm_uniform. */
#define TSR_SAMPLER_NAMES                                                                      \
    "euler, euler_a, heun, dpmpp_2m, dpmpp_2m_sde, dpmpp_sde, dpmpp_2s_a, dpmpp_3m_sde, dpm2, " \
    "dpm2_a, ddim, ddpm, pndm, plms, lms, unipc, lcm"
const char *tsr_sampler_name(tsr_sampler_kind kind);          /* "euler_a" */
const char *tsr_sampler_display_name(tsr_sampler_kind kind);  /* A1111: "Euler a" */
/* The diffusers class the sampler follows; for DPM++ 2S a, which has none,
 * "(k-diffusion sample_dpmpp_2s_ancestral)". */
const char *tsr_sampler_class_name(tsr_sampler_kind kind);
const char *tsr_schedule_name(tsr_schedule schedule);         /* "karras" */
const char *tsr_schedule_display_name(tsr_schedule schedule); /* A1111: "Karras" */
/* Parse any accepted spelling of a sampler: a short name, a diffusers class
 * name, or an A1111 display name that may carry a schedule ("DPM++ 2M
 * Karras", "Euler a", "DPM++ 2M SDE Exponential").  Case-insensitive;
 * '-', ' ' and '_' are interchangeable in short names.  *schedule is set
 * only when the name carries one (else left unchanged), so callers can
 * default it first.  TSR_ERR_INVALID naming the input when unknown. */
int tsr_sampler_parse(const char *name, tsr_sampler_kind *kind, tsr_schedule *schedule);
/* "default" | "karras" | "exponential" | "sgm_uniform" (also "Karras",
 * "Exponential", "SGM Uniform", "automatic" = default). */
int tsr_schedule_parse(const char *name, tsr_schedule *schedule);
/* The sampler a diffusers class name in scheduler_config.json
 * ("_class_name") stands for; TSR_ERR_NOT_FOUND when not one of ours.
 * DPMSolverMultistepScheduler maps to dpmpp_2m or dpmpp_2m_sde by the
 * config's algorithm_type (and solver_order 3 with SDE: dpmpp_3m_sde);
 * KDPM2DiscreteScheduler, KDPM2AncestralDiscreteScheduler and DDPMScheduler
 * to dpm2, dpm2_a and ddpm; PNDMScheduler to pndm (the file's skip_prk_steps). */
int tsr_sampler_from_config(const struct cJSON *obj, tsr_sampler_kind *kind);
/* Whether `kind` supports `schedule` (the diffusers class has the option;
 * the comfy_* schedules: euler, euler_a, heun, lms, dpmpp_2m). */
bool tsr_sampler_supports_schedule(tsr_sampler_kind kind, tsr_schedule schedule);
/* Whether `schedule` is one of ComfyUI's (TSR_SCHEDULE_COMFY_*). */
bool tsr_schedule_is_comfy(tsr_schedule schedule);

/* ComfyUI's sigma list (KSampler.set_steps): the schedule of `steps` steps
 * over the model's discrete sigmas (cfg's scaled_linear betas; other beta
 * schedules are TSR_ERR_UNSUPPORTED), or with 0 < denoise <= 0.9999 the last
 * steps + 1 sigmas of the schedule of int(steps / denoise) steps.  Writes
 * *n sigmas, the last one 0, into out[cap] (steps + 2 always fits).
 * TSR_ERR_INVALID for a non-comfy schedule, steps outside [1, 1000],
 * denoise outside (0, 1], a schedule longer than 10000 steps or a short
 * buffer. */
int tsr_comfy_sigmas(const tsr_sched_config *cfg, tsr_schedule schedule, int steps,
                     double denoise, float *out, int cap, int *n);
/* ComfyUI's timestep for a sigma (ModelSamplingDiscrete.timestep: the index
 * of the nearest discrete log-sigma, the first on a tie). */
int tsr_comfy_timestep(const tsr_sched_config *cfg, double sigma, int *t);
/* The regularized incomplete beta function I_x(a, b) and its inverse (the
 * Beta(a, b) distribution's cdf and ppf), for a, b > 0; NAN outside the
 * domain.  The inverse is accurate to ~1e-15 in x. */
double tsr_beta_cdf(double x, double a, double b);
double tsr_beta_ppf(double p, double a, double b);

typedef struct tsr_sampler_params {
    tsr_sampler_kind kind;
    tsr_schedule schedule;
    int steps;        /* num_inference_steps, 1..1000 (every sampler; see docs/samplers.md) */
    double strength;  /* img2img strength in (0, 1]; 1 = txt2img (default); for
                       * the comfy_* schedules ComfyUI's KSampler denoise */
    double eta;       /* DDIM eta (default 0) */
    int channels, height, width; /* latent shape, for the layout of drawn noise */
    bool nhwc;        /* latent stored channels-last (default true) */
} tsr_sampler_params;

tsr_sampler_params tsr_sampler_params_default(void);

typedef struct tsr_sampler tsr_sampler;

/* Build a sampler for one image.  `cfg` borrowed (copied).  Errors:
 * TSR_ERR_INVALID (steps, strength, shape), TSR_ERR_UNSUPPORTED (schedule
 * not offered by that sampler's diffusers class, or strength too low to
 * leave any step), TSR_ERR_NOMEM.  *out owned: tsr_sampler_free(). */
int tsr_sampler_create(const tsr_sched_config *cfg, const tsr_sampler_params *params,
                       tsr_sampler **out);
void tsr_sampler_free(tsr_sampler *s);

/* Elements of the latent (channels * height * width). */
size_t tsr_sampler_numel(const tsr_sampler *s);
/* Model evaluations: total after img2img truncation, done so far. */
int tsr_sampler_evals_total(const tsr_sampler *s);
int tsr_sampler_evals_done(const tsr_sampler *s);
bool tsr_sampler_done(const tsr_sampler *s);
/* Evaluations that the next user-visible step takes (1, or 2 for Heun,
 * DPM++ SDE, DPM2, DPM2 a and DPM++ 2S a except their last step). */
int tsr_sampler_evals_for_next_step(const tsr_sampler *s);
/* Progress in user-visible steps (steps_total = evals for most samplers). */
int tsr_sampler_steps_total(const tsr_sampler *s);
int tsr_sampler_steps_done(const tsr_sampler *s);

/* Timestep to give the UNet for the next evaluation (may be fractional for
 * Euler-family schedules).  Only valid while !done. */
double tsr_sampler_timestep(const tsr_sampler *s);
/* scale_model_input: out = sample / sqrt(sigma^2 + 1) for the sigma-based
 * samplers, a copy for the others.  out may equal sample. */
void tsr_sampler_scale_input(const tsr_sampler *s, const float *sample, float *out);
/* The divisor above (1 for the non-sigma samplers). */
float tsr_sampler_input_divisor(const tsr_sampler *s);
/* init_noise_sigma, and latents *= init_noise_sigma in place (txt2img). */
float tsr_sampler_init_noise_sigma(const tsr_sampler *s);
void tsr_sampler_scale_noise(const tsr_sampler *s, float *latent);
/* img2img: out = scheduler.add_noise(x0, noise, first timestep).  Buffers
 * borrowed; out may alias either input. */
void tsr_sampler_add_noise(const tsr_sampler *s, const float *x0, const float *noise, float *out);
/* Inpainting with a 4-channel model: scheduler.add_noise(x0, noise,
 * timesteps[i + 1]) called after step i, as diffusers'
 * StableDiffusionInpaintPipeline does.  With the pipelines' begin index set,
 * diffusers' sigma schedulers take the level at their current step_index
 * (the next evaluation's: for Heun that is per evaluation, since the loop
 * runs once per timestep entry), and DDIM/PNDM/LCM look alphas_cumprod up at
 * the next evaluation's timestep: both are the sampler's current position.
 * TSR_ERR_INVALID when done (the pipeline blends with the clean latents
 * after the last step). */
int tsr_sampler_add_noise_next(const tsr_sampler *s, const float *x0, const float *noise,
                               float *out);

/* One model evaluation: consume model_output (the UNet result after CFG),
 * advance `sample` in place, and write the x0 prediction (for previews) to
 * x0 when non-NULL (diffusers' pred_original_sample/denoised; for samplers
 * without one it is derived from the model output).  `rng` is needed by
 * ancestral/SDE samplers (may be NULL for the others).  Errors:
 * TSR_ERR_INVALID when already done or rng missing, TSR_ERR_NOMEM. */
int tsr_sampler_step(tsr_sampler *s, const float *model_output, float *sample, tsr_rng *rng,
                     float *x0);

/* The schedule, for tests and logs: timesteps (evals_total entries as
 * diffusers' scheduler.timesteps after truncation) and sigmas (diffusers'
 * scheduler.sigmas, full length; NULL and 0 for non-sigma samplers).
 * Borrowed from the sampler. */
const double *tsr_sampler_timesteps(const tsr_sampler *s, int *n);
const float *tsr_sampler_sigmas(const tsr_sampler *s, int *n);

#endif
