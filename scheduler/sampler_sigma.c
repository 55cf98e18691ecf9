/*
 * scheduler/sampler_sigma.c - the k-diffusion-style samplers that work in
 * sigma space: Euler, Euler ancestral, Heun, LMS and DPM++ SDE.
 *
 * Why written this way: each step is the diffusers step() transcribed with
 * float scalars and one element-wise expression per tensor operation, in
 * the order PyTorch evaluates it, so that rounding matches diffusers.  The
 * x0 prediction is the pred_original_sample diffusers returns.
 *
 * DPM++ SDE: diffusers draws its noise from torchsde's BrownianTree, seeded
 * from torch's global RNG (not the pipeline generator), so it cannot be
 * reproduced from a seed at all.  Tessera draws a standard normal from the
 * image's stream wherever diffusers calls its noise sampler (both stages of
 * each step but the last) - the same distribution the tree's normalised
 * increments have, and the convention the goldens patch in.
 */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "scheduler/sched_internal.h"

/* No a*b+c contraction: gcc does none in ISO C mode (-std=c17); clang needs the pragma. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* pred_original_sample for a sigma-space model input. */
void tsr_sched_sigma_x0(const tsr_sampler *s, float sigma, const float *mo, const float *x, float *x0)
{
    size_t n = s->n;
    if (s->c.prediction_type == TSR_PRED_EPSILON) {
        for (size_t i = 0; i < n; i++)
            x0[i] = x[i] - sigma * mo[i];
    } else if (s->c.prediction_type == TSR_PRED_V) {
        float c1 = -sigma / sqrtf(sigma * sigma + 1.0f);
        float c2 = sigma * sigma + 1.0f;
        for (size_t i = 0; i < n; i++)
            x0[i] = mo[i] * c1 + x[i] / c2;
    } else {
        memcpy(x0, mo, n * sizeof(float));
    }
    if (s->c.clip_sample == 1) {
        float r = (float)s->c.clip_sample_range;
        for (size_t i = 0; i < n; i++)
            x0[i] = x0[i] < -r ? -r : (x0[i] > r ? r : x0[i]);
    }
}

static int step_euler(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    float sigma = s->sigmas[s->pos], next = s->sigmas[s->pos + 1];
    float *p0 = x0 ? x0 : s->tmp;
    tsr_sched_sigma_x0(s, sigma, mo, x, p0);
    if (s->p.kind == TSR_SAMPLER_EULER) {
        float dt = next - sigma;
        for (size_t i = 0; i < s->n; i++) {
            float d = (x[i] - p0[i]) / sigma;
            x[i] = x[i] + d * dt;
        }
        return 0;
    }
    float st2 = next * next, sf2 = sigma * sigma;
    float up = sqrtf(st2 * (sf2 - st2) / sf2);
    float down = sqrtf(st2 - up * up);
    float dt = down - sigma;
    for (size_t i = 0; i < s->n; i++) {
        float d = (x[i] - p0[i]) / sigma;
        x[i] = x[i] + d * dt;
    }
    TSR_TRY(tsr_sched_noise(s, rng, s->tmp2));
    for (size_t i = 0; i < s->n; i++)
        x[i] = x[i] + s->tmp2[i] * up;
    return 0;
}

static int step_heun(tsr_sampler *s, const float *mo, float *x, float *x0)
{
    float *p0 = x0 ? x0 : s->tmp;
    float *prev_d = s->hist[0];
    if (!s->have_save) {
        float sigma = s->sigmas[s->pos], next = s->sigmas[s->pos + 1];
        tsr_sched_sigma_x0(s, sigma, mo, x, p0);
        float dt = next - sigma;
        for (size_t i = 0; i < s->n; i++)
            prev_d[i] = (x[i] - p0[i]) / sigma;
        memcpy(s->save, x, s->n * sizeof(float));
        s->heun_dt = dt;
        s->have_save = true;
        for (size_t i = 0; i < s->n; i++)
            x[i] = x[i] + prev_d[i] * dt;
    } else {
        float next = s->sigmas[s->pos];
        tsr_sched_sigma_x0(s, next, mo, x, p0);
        float dt = s->heun_dt;
        for (size_t i = 0; i < s->n; i++) {
            float d = (x[i] - p0[i]) / next;
            d = (prev_d[i] + d) / 2.0f;
            x[i] = s->save[i] + d * dt;
        }
        s->have_save = false;
    }
    return 0;
}

/* integral over [a, b] of prod_{k != j} (tau - p[k]) / (p[j] - p[k]), p[k]
 * the sigma of the k-th derivative back (p[0] = a); the integrand is a
 * polynomial of degree <= 3, so 4-point Gauss-Legendre is exact (diffusers
 * uses scipy's quad, which agrees to ~1e-7). */
static double lms_coeff(const float *p, int order, double a, double b, int j)
{
    static const double gx[4] = {-0.8611363115940526, -0.3399810435848563, 0.3399810435848563,
                                 0.8611363115940526};
    static const double gw[4] = {0.3478548451374538, 0.6521451548625461, 0.6521451548625461,
                                 0.3478548451374538};
    double sum = 0;
    for (int q = 0; q < 4; q++) {
        double tau = (b - a) / 2 * gx[q] + (a + b) / 2, prod = 1.0;
        for (int k = 0; k < order; k++) {
            if (k == j)
                continue;
            prod *= (tau - (double)p[k]) / ((double)p[j] - (double)p[k]);
        }
        sum += gw[q] * prod;
    }
    return sum * (b - a) / 2;
}

static int step_lms(tsr_sampler *s, const float *mo, float *x, float *x0)
{
    float sigma = s->sigmas[s->pos];
    float *p0 = x0 ? x0 : s->tmp;
    tsr_sched_sigma_x0(s, sigma, mo, x, p0);
    /* rotate the derivative history (newest last, at most 4); a derivative
     * at the noise level of the newest one replaces it, so a schedule that
     * repeats a sigma (leading spacing at 1000 steps) never divides by a
     * zero difference: the step between the two is then 0 wide */
    if (s->nhist == 0 || s->hist_sigma[s->nhist - 1] != sigma) {
        if (s->nhist == 4) {
            float *old = s->hist[0];
            memmove(s->hist, s->hist + 1, 3 * sizeof(float *));
            memmove(s->hist_sigma, s->hist_sigma + 1, 3 * sizeof(float));
            s->hist[3] = old;
            s->nhist = 3;
        }
        s->hist_sigma[s->nhist++] = sigma;
    }
    float *d = s->hist[s->nhist - 1];
    for (size_t i = 0; i < s->n; i++)
        d[i] = (x[i] - p0[i]) / sigma;
    int order = s->pos + 1 < 4 ? s->pos + 1 : 4;
    if (order > s->nhist)
        order = s->nhist;
    float coef[4], pts[4];
    for (int j = 0; j < order; j++)
        pts[j] = s->hist_sigma[s->nhist - 1 - j];
    for (int j = 0; j < order; j++)
        coef[j] = (float)lms_coeff(pts, order, sigma, s->sigmas[s->pos + 1], j);
    for (size_t i = 0; i < s->n; i++) {
        float acc = 0.0f;
        for (int j = 0; j < order; j++)
            acc = acc + coef[j] * s->hist[s->nhist - 1 - j][i];
        x[i] = x[i] + acc;
    }
    return 0;
}

static int step_dpmpp_sde(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    bool first = !s->have_save;
    float sigma = first ? s->sigmas[s->pos] : s->sigmas[s->pos - 1];
    float next = first ? s->sigmas[s->pos + 1] : s->sigmas[s->pos];
    float t = -logf(sigma), t_next = -logf(next);
    float delta = t_next - t;
    float t_prop = t + delta * 0.5f;
    float sigma_in = first ? sigma : expf(-t_prop);
    float *p0 = x0 ? x0 : s->tmp;
    tsr_sched_sigma_x0(s, sigma_in, mo, x, p0);
    if (next == 0.0f) {
        float dt = next - sigma;
        for (size_t i = 0; i < s->n; i++) {
            float d = (x[i] - p0[i]) / sigma;
            x[i] = x[i] + d * dt;
        }
        return 0;
    }
    if (first)
        t_next = t_prop;
    const float *src = first ? x : s->save;
    float sf = expf(-t), st = expf(-t_next);
    float up = sqrtf(st * st * (sf * sf - st * st) / (sf * sf));
    up = up < st ? up : st; /* python min(sigma_to, up): sigma_to unless up is smaller */
    float down = sqrtf(st * st - up * up);
    float anc_t = -logf(down);
    float c1 = expf(-anc_t) / expf(-t);
    float c2 = expm1f(t - anc_t);
    TSR_TRY(tsr_sched_noise(s, rng, s->tmp2));
    for (size_t i = 0; i < s->n; i++) {
        float v = c1 * src[i] - c2 * p0[i];
        float nz = s->tmp2[i] * 1.0f;
        x[i] = v + nz * up;
    }
    if (first) {
        /* keep the stage-1 input sample: it was x before the update */
        s->mid_sigma = expf(-t_next);
    }
    s->have_save = first;
    return 0;
}

int tsr_sched_step_sigma(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    int rc = 0;
    switch (s->p.kind) {
    case TSR_SAMPLER_EULER:
    case TSR_SAMPLER_EULER_A:
        rc = step_euler(s, mo, x, rng, x0);
        break;
    case TSR_SAMPLER_HEUN:
        rc = step_heun(s, mo, x, x0);
        break;
    case TSR_SAMPLER_LMS:
        rc = step_lms(s, mo, x, x0);
        break;
    default:
        if (!s->have_save)
            memcpy(s->save, x, s->n * sizeof(float)); /* stage-1 input, for stage 2 */
        rc = step_dpmpp_sde(s, mo, x, rng, x0);
        break;
    }
    if (rc == 0)
        s->pos++;
    return rc;
}
