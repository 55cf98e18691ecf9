/*
 * scheduler/sampler_kdiff.c - the two-evaluation k-diffusion samplers:
 * DPM2 (KDPM2DiscreteScheduler), DPM2 a (KDPM2AncestralDiscreteScheduler)
 * and DPM++ 2S a (k-diffusion's sample_dpmpp_2s_ancestral, which diffusers
 * lacks).
 *
 * Why together: each step of all three evaluates the model at the step's
 * sigma, moves to an intermediate sigma (DPM2: the geometric mean of this
 * and the next sigma; DPM2 a: of this sigma and sigma_down; DPM++ 2S a: the
 * log-midpoint towards sigma_down), evaluates there, and finishes the step
 * from the saved sample - ancestral ones then add noise * sigma_up.  So
 * they share one layout: the timesteps interleave step and intermediate
 * timesteps, `aux` holds the intermediate sigma, sigma_up and sigma_down of
 * every step, and the sampler's `save` is the sample at the step's start.
 *
 * Arrays follow diffusers: the KDPM2 classes compute the intermediate
 * sigmas as float32 tensors (log, lerp at 0.5, exp) and their timesteps
 * with _sigma_to_t; DPM++ 2S a takes EulerDiscreteScheduler's sigmas and
 * lays its arrays out as DPMSolverSDEScheduler does (docs/samplers.md).
 * torch's vectorised log/exp (SLEEF, within 1 ulp) and its sqrt (MKL) can
 * differ from libm's by an ulp, so an intermediate sigma can too; that is
 * ~1e-7 of a step, except where diffusers' sigma_down cancels (2 steps,
 * docs/samplers.md).
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

/* torch's lerp(start, end, 0.5): end - (end - start) * 0.5 */
static float lerp_half(float start, float end)
{
    float d = end - start;
    return end - d * 0.5f;
}

int tsr_sched_kdiff_arrays(tsr_sampler *s, const double *ts, const double *sig, int m,
                           const float *logsig)
{
    tsr_sampler_kind k = s->p.kind;
    int N = s->num_train;
    bool kdpm2 = k == TSR_SAMPLER_DPM2 || k == TSR_SAMPLER_DPM2_A;
    s->nt = 2 * m - 1;
    s->ns = kdpm2 ? 2 * m + 2 : 2 * m;
    s->timesteps = malloc((size_t)s->nt * sizeof(double));
    s->sigmas = malloc((size_t)s->ns * sizeof(float));
    s->aux = malloc((size_t)(3 * (m + 1)) * sizeof(float));
    if (!s->timesteps || !s->sigmas || !s->aux)
        return tsr_errorf(TSR_ERR_NOMEM, "scheduler: no memory");
    float *sg = s->sigmas; /* the plain sigmas first, then spread out below */
    float *mid = s->aux, *up = s->aux + m + 1, *down = s->aux + 2 * (m + 1);
    float plain[TSR_SCHED_MAX_STEPS + 1];
    for (int i = 0; i < m; i++)
        plain[i] = (float)sig[i];
    plain[m] = 0.0f;
    /* the timesteps are float32 in diffusers except Karras-rounded KDPM2 ones (float64) */
    bool f64 = kdpm2 && s->c.use_karras_sigmas == 1;
    if (k == TSR_SAMPLER_DPM2) {
        mid[0] = NAN; /* lerp with the final 0: unused */
        for (int i = 1; i <= m; i++) {
            float a = logf(plain[i]), b = logf(plain[i - 1]);
            mid[i] = expf(lerp_half(a, b));
            up[i] = down[i] = 0.0f;
        }
        up[0] = down[0] = 0.0f;
    } else if (k == TSR_SAMPLER_DPM2_A) {
        for (int i = 0; i <= m; i++) {
            float sf = plain[i], st = i < m ? plain[i + 1] : 0.0f;
            float st2 = st * st, sf2 = sf * sf;
            up[i] = sqrtf(st2 * (sf2 - st2) / sf2);
            down[i] = i < m ? sqrtf(st2 - up[i] * up[i]) : 0.0f;
            mid[i] = expf(lerp_half(logf(sf), logf(down[i])));
        }
        mid[m] = 0.0f;
        if (m >= 1)
            mid[m - 1] = 0.0f;
    } else { /* DPM++ 2S a: k-diffusion's get_ancestral_step with eta 1 */
        for (int i = 0; i < m; i++) {
            float s0 = plain[i], s1 = plain[i + 1];
            float u = sqrtf(s1 * s1 * (s0 * s0 - s1 * s1) / (s0 * s0));
            up[i] = u < s1 ? u : s1; /* min(sigma_to, up) */
            down[i] = sqrtf(s1 * s1 - up[i] * up[i]);
            float t = -logf(s0), t_next = -logf(down[i]);
            float h = t_next - t;
            mid[i] = expf(-(t + 0.5f * h));
        }
        mid[m] = up[m] = down[m] = 0.0f;
    }
    /* timesteps: DPM2 [t0, m1, t1, m2, t2, ...]; DPM2 a and DPM++ 2S a
     * [t0, m0, t1, m1, ...] (each step's own intermediate point) */
    s->timesteps[0] = f64 ? ts[0] : (float)ts[0];
    for (int i = 1; i < m; i++) {
        float mi = k == TSR_SAMPLER_DPM2 ? mid[i] : mid[i - 1];
        double tm = tsr_sched_sigma_to_t(mi, logsig, N);
        s->timesteps[2 * i - 1] = f64 ? tm : (float)tm;
        s->timesteps[2 * i] = f64 ? ts[i] : (float)ts[i];
    }
    /* sigmas: KDPM2 [s0, s1, s1, ..., s_{m-1}, s_{m-1}, 0, 0, 0];
     * DPM++ 2S a (DPMSolverSDEScheduler's) [s0, s1, s1, ..., s_{m-1}, s_{m-1}, 0] */
    sg[0] = plain[0];
    for (int i = 1; i < m; i++)
        sg[2 * i - 1] = sg[2 * i] = plain[i];
    sg[2 * m - 1] = 0.0f;
    if (kdpm2)
        sg[2 * m] = sg[2 * m + 1] = 0.0f;
    return 0;
}

/* DPM2 / DPM2 a: sample + derivative * dt, the derivative taken at sigma_in. */
static int step_kdpm2(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    int m = (s->nt + 1) / 2, k = s->pos / 2;
    const float *mid = s->aux, *up = s->aux + m + 1, *down = s->aux + 2 * (m + 1);
    bool anc = s->p.kind == TSR_SAMPLER_DPM2_A;
    float sigma = s->sigmas[2 * k];
    float *p0 = x0 ? x0 : s->tmp;
    if (!s->have_save) {
        /* first order: to the intermediate sigma */
        float to = anc ? mid[k] : mid[k + 1];
        tsr_sched_sigma_x0(s, sigma, mo, x, p0);
        float dt = to - sigma;
        memcpy(s->save, x, s->n * sizeof(float));
        for (size_t i = 0; i < s->n; i++) {
            float d = (x[i] - p0[i]) / sigma;
            x[i] = x[i] + d * dt;
        }
        s->mid_sigma = to;
        s->have_save = true;
        return 0;
    }
    /* second order: the derivative at the intermediate sigma, from the saved sample */
    float si = s->mid_sigma;
    float next = anc ? down[k] : s->sigmas[2 * k + 1];
    tsr_sched_sigma_x0(s, si, mo, x, p0);
    float dt = next - sigma;
    for (size_t i = 0; i < s->n; i++) {
        float d = (x[i] - p0[i]) / si;
        x[i] = s->save[i] + d * dt;
    }
    s->have_save = false;
    if (anc) {
        TSR_TRY(tsr_sched_noise(s, rng, s->tmp2));
        for (size_t i = 0; i < s->n; i++)
            x[i] = x[i] + s->tmp2[i] * up[k];
    }
    return 0;
}

/* DPM++ 2S a (k-diffusion): DPM-Solver++(2S) to sigma_down, then noise * sigma_up. */
static int step_2s_a(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    int m = (s->nt + 1) / 2, k = s->pos / 2;
    const float *mid = s->aux, *up = s->aux + m + 1, *down = s->aux + 2 * (m + 1);
    float s0 = s->sigmas[2 * k], s1 = k + 1 < m ? s->sigmas[2 * k + 1] : 0.0f;
    float *p0 = x0 ? x0 : s->tmp;
    float t = -logf(s0);
    if (!s->have_save && down[k] == 0.0f) {
        /* the last step (sigma_down 0): Euler */
        tsr_sched_sigma_x0(s, s0, mo, x, p0);
        float dt = down[k] - s0;
        for (size_t i = 0; i < s->n; i++) {
            float d = (x[i] - p0[i]) / s0;
            x[i] = x[i] + d * dt;
        }
    } else if (!s->have_save) {
        tsr_sched_sigma_x0(s, s0, mo, x, p0);
        float h = -logf(down[k]) - t;
        float sm = t + 0.5f * h;
        float c1 = expf(-sm) / expf(-t), c2 = expm1f(-h * 0.5f);
        memcpy(s->save, x, s->n * sizeof(float));
        for (size_t i = 0; i < s->n; i++)
            x[i] = c1 * x[i] - c2 * p0[i];
        s->mid_sigma = mid[k];
        s->have_save = true;
        return 0;
    } else {
        tsr_sched_sigma_x0(s, s->mid_sigma, mo, x, p0);
        float t_next = -logf(down[k]);
        float h = t_next - t;
        float c1 = expf(-t_next) / expf(-t), c2 = expm1f(-h);
        for (size_t i = 0; i < s->n; i++)
            x[i] = c1 * s->save[i] - c2 * p0[i];
        s->have_save = false;
    }
    if (s1 > 0.0f) {
        TSR_TRY(tsr_sched_noise(s, rng, s->tmp2));
        for (size_t i = 0; i < s->n; i++) {
            float nz = s->tmp2[i] * 1.0f;
            x[i] = x[i] + nz * up[k];
        }
    }
    return 0;
}

int tsr_sched_step_kdiff(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    int rc = s->p.kind == TSR_SAMPLER_DPMPP_2S_A ? step_2s_a(s, mo, x, rng, x0)
                                                  : step_kdpm2(s, mo, x, rng, x0);
    if (rc == 0)
        s->pos++;
    return rc;
}
