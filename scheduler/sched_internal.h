/*
 * scheduler/sched_internal.h - the sampler object shared by the scheduler
 * sources (not part of the public API).
 *
 * Why one struct for all samplers: each diffusers class is a handful of
 * arrays and counters; a tagged struct with a few history buffers keeps
 * every sampler a pair of small functions (init, step) and lets the common
 * code (truncation for img2img, input scaling, add_noise) live once.
 * Scalars that diffusers keeps in float32 tensors are `float` here, and the
 * code computes them with the same operations so rounding matches.
 */
#ifndef TSR_SCHED_INTERNAL_H
#define TSR_SCHED_INTERNAL_H

#include "scheduler/scheduler.h"

#define TSR_SCHED_MAX_TRAIN 10000
#define TSR_SCHED_MAX_STEPS 1000
#define TSR_SCHED_HIST 4

/* A config with every field resolved to the class default. */
typedef tsr_sched_config tsr_sched_resolved;

struct tsr_sampler {
    tsr_sampler_params p;
    tsr_sched_resolved c;
    size_t n;

    int num_train;
    float *acp;           /* alphas_cumprod[num_train] */
    float final_acp;      /* DDIM/PNDM/LCM final_alpha_cumprod */

    int nt;               /* timesteps (full schedule, before truncation) */
    double *timesteps;    /* owned */
    int ns;               /* sigmas (sigma samplers; 0 otherwise) */
    float *sigmas;        /* owned */
    /* DPM2, DPM2 a, DPM++ 2S a: per step k (m + 1 entries each) the
     * interpolated / midpoint sigma, sigma_up and sigma_down; owned */
    float *aux;
    int num_inference_steps; /* diffusers' self.num_inference_steps */

    float comfy_sigma_max; /* comfy_* schedules: the model's largest discrete sigma */

    int begin;            /* first eval index (img2img truncation) */
    int pos;              /* next eval index = diffusers' step_index */

    /* history */
    float *hist[TSR_SCHED_HIST]; /* model outputs / derivatives / ets, newest last */
    int nhist;
    float hist_sigma[TSR_SCHED_HIST]; /* multistep / LMS: the sigma of each entry */
    float *save;          /* Heun / DPM-SDE first-stage sample, UniPC last_sample, PNDM cur_sample */
    float *tmp;           /* scratch: noise, converted output */
    float *tmp2;
    bool have_save;
    float heun_dt;
    float mid_sigma;      /* DPM++ SDE mid_point_sigma */
    int lower_order_nums, this_order;
    int counter;          /* PNDM */
};

/* Sampler families (sched_schedule.c). */
/* Euler, Euler a, Heun, LMS, DPM++ SDE, DPM2, DPM2 a, DPM++ 2S a: sigma-space
 * samplers whose model input is scaled by 1/sqrt(sigma^2 + 1). */
bool tsr_sched_is_sigma_kind(tsr_sampler_kind k);
/* Two evaluations per step but the last: Heun, DPM++ SDE, DPM2, DPM2 a, DPM++ 2S a. */
bool tsr_sched_is_two_stage(tsr_sampler_kind k);
/* DPM-Solver++ multistep (2M, 2M SDE, 3M SDE) and UniPC. */
bool tsr_sched_is_multistep(tsr_sampler_kind k);
/* alphas_cumprod[t]; t < 0 is final_alpha_cumprod, t past the training
 * schedule is its last entry (as np.interp clamps for the sigma samplers). */
float tsr_sched_acp(const tsr_sampler *s, long t);

int tsr_sched_make_alphas(tsr_sampler *s);
int tsr_sched_make_timesteps(tsr_sampler *s);
/* The arrays of the two-evaluation k-diffusion samplers (sched_kdiff.c). */
int tsr_sched_kdiff_arrays(tsr_sampler *s, const double *ts, const double *sig, int m,
                           const float *logsig);
/* The comfy_* schedules (sched_comfy.c): ComfyUI's sigmas of p.steps steps
 * with denoise p.strength into sig[0..*m-1] (the final 0 left out; at most
 * steps + 1 entries) and the UNet's timestep of each (the nearest discrete
 * one) into ts; sets s->comfy_sigma_max. */
int tsr_sched_comfy_fill(tsr_sampler *s, double *ts, double *sig, int *m);
/* diffusers' _sigma_to_t (log_sigmas float32, the rest double). */
double tsr_sched_sigma_to_t(double sigma, const float *log_sigmas, int len);

/* per-family step (sampler_*.c) */
int tsr_sched_step_sigma(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0);
int tsr_sched_step_kdiff(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0);
int tsr_sched_step_multistep(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0);
int tsr_sched_step_ddpm(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0);
/* pred_original_sample of the sigma samplers (clipped when the config says so) */
void tsr_sched_sigma_x0(const tsr_sampler *s, float sigma, const float *mo, const float *x,
                        float *x0);

/* Draw the latent-shaped noise of one randn_tensor() call into dst. */
int tsr_sched_noise(tsr_sampler *s, tsr_rng *rng, float *dst);

/* Helpers used by several samplers. */
static inline float tsr_f_sqrt(float x) { return __builtin_sqrtf(x); }

#endif
