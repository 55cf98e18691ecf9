/*
 * scheduler/sampler_ddpm.c - the samplers that index alphas_cumprod by an
 * integer timestep: DDIM, DDPM, PNDM (PRK warm-up and PLMS) and LCM.
 *
 * Why together: they share the "alpha_prod_t / alpha_prod_t_prev" view of
 * the schedule and the final_alpha_cumprod rule (set_alpha_to_one).  PNDM's
 * PLMS runs one extra evaluation at the start (the second evaluation at the
 * first timestep) and its optional PRK warm-up runs 4 evaluations per step;
 * both are just more entries in the timestep list, exactly as diffusers
 * lays them out.
 */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "scheduler/sched_internal.h"

/* No a*b+c contraction: gcc does none in ISO C mode (-std=c17); clang needs the pragma. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

static float acp_at(const tsr_sampler *s, long t) { return tsr_sched_acp(s, t); }

static void clip(const tsr_sampler *s, float *x0)
{
    if (s->c.clip_sample != 1)
        return;
    float r = (float)s->c.clip_sample_range;
    for (size_t i = 0; i < s->n; i++)
        x0[i] = x0[i] < -r ? -r : (x0[i] > r ? r : x0[i]);
}

static int step_ddim(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    long t = (long)s->timesteps[s->pos];
    long prev_t = t - s->num_train / s->num_inference_steps;
    float at = acp_at(s, t), ap = acp_at(s, prev_t);
    float bt = 1.0f - at;
    float sa = sqrtf(at), sb = sqrtf(bt);
    float *p0 = x0 ? x0 : s->tmp, *eps = s->tmp2;
    for (size_t i = 0; i < s->n; i++) {
        if (s->c.prediction_type == TSR_PRED_EPSILON) {
            p0[i] = (x[i] - sb * mo[i]) / sa;
            eps[i] = mo[i];
        } else if (s->c.prediction_type == TSR_PRED_V) {
            p0[i] = sa * x[i] - sb * mo[i];
            eps[i] = sa * mo[i] + sb * x[i];
        } else {
            p0[i] = mo[i];
            eps[i] = (x[i] - sa * p0[i]) / sb;
        }
    }
    clip(s, p0);
    float bp = 1.0f - ap;
    float var = bp / bt * (1.0f - at / ap);
    float std = (float)s->p.eta * sqrtf(var);
    float cdir = sqrtf(1.0f - ap - std * std), cx0 = sqrtf(ap);
    for (size_t i = 0; i < s->n; i++)
        x[i] = cx0 * p0[i] + cdir * eps[i];
    if (s->p.eta > 0) {
        TSR_TRY(tsr_sched_noise(s, rng, s->tmp2));
        for (size_t i = 0; i < s->n; i++)
            x[i] = x[i] + std * s->tmp2[i];
    }
    return 0;
}

/* PNDMScheduler._get_prev_sample, in place on out (sample may alias out) */
static void pndm_prev(const tsr_sampler *s, const float *sample, long t, long prev_t,
                      const float *mo_in, float *out, float *x0)
{
    float at = acp_at(s, t), ap = acp_at(s, prev_t);
    float bt = 1.0f - at, bp = 1.0f - ap;
    float sa = sqrtf(at), sb = sqrtf(bt);
    float c1 = sqrtf(ap / at);
    float denom = at * sqrtf(bp) + sqrtf(at * bt * ap);
    float c2 = ap - at;
    for (size_t i = 0; i < s->n; i++) {
        float mo = mo_in[i];
        if (s->c.prediction_type == TSR_PRED_V)
            mo = sa * mo + sb * sample[i];
        if (x0)
            x0[i] = (sample[i] - sb * mo) / sa;
        out[i] = c1 * sample[i] - c2 * mo / denom;
    }
}

static void ets_push(tsr_sampler *s, const float *mo)
{
    if (s->nhist == 4) {
        float *old = s->hist[0];
        memmove(s->hist, s->hist + 1, 3 * sizeof(float *));
        s->hist[3] = old;
        s->nhist = 3;
    }
    memcpy(s->hist[s->nhist++], mo, s->n * sizeof(float));
}

static int step_pndm(tsr_sampler *s, const float *mo, float *x, float *x0)
{
    long N = s->num_train, n_inf = s->num_inference_steps;
    long t = (long)s->timesteps[s->pos];
    float *cur_mo = s->tmp2, *comb = s->tmp;
    int nprk = s->c.skip_prk_steps == 1 ? 0 : 12;
    if (s->counter < nprk) {
        long diff = (s->counter % 2) ? 0 : N / n_inf / 2;
        long prev_t = t - diff;
        t = (long)s->timesteps[s->counter / 4 * 4]; /* full prk list, as diffusers */
        const float *use = mo;
        int r = s->counter % 4;
        if (r == 0) {
            for (size_t i = 0; i < s->n; i++)
                cur_mo[i] = 0.0f + (float)(1.0 / 6.0) * mo[i];
            ets_push(s, mo);
            memcpy(s->save, x, s->n * sizeof(float));
            s->have_save = true;
        } else if (r == 1 || r == 2) {
            for (size_t i = 0; i < s->n; i++)
                cur_mo[i] = cur_mo[i] + (float)(1.0 / 3.0) * mo[i];
        } else {
            for (size_t i = 0; i < s->n; i++)
                comb[i] = cur_mo[i] + (float)(1.0 / 6.0) * mo[i];
            use = comb;
        }
        pndm_prev(s, s->have_save ? s->save : x, t, prev_t, use, x, x0);
        s->counter++;
        return 0;
    }
    long prev_t = t - N / n_inf;
    if (s->counter != 1) {
        ets_push(s, mo);
    } else {
        prev_t = t;
        t = t + N / n_inf;
    }
    const float *sample = x;
    const float *use = comb;
    int ne = s->nhist;
    if (ne == 1 && s->counter == 0) {
        use = mo;
        memcpy(s->save, x, s->n * sizeof(float));
        s->have_save = true;
    } else if (ne == 1 && s->counter == 1) {
        const float *e1 = s->hist[0];
        for (size_t i = 0; i < s->n; i++)
            comb[i] = (mo[i] + e1[i]) / 2.0f;
        sample = s->save;
        s->have_save = false;
    } else if (ne == 2) {
        const float *e1 = s->hist[1], *e2 = s->hist[0];
        for (size_t i = 0; i < s->n; i++)
            comb[i] = (3.0f * e1[i] - e2[i]) / 2.0f;
    } else if (ne == 3) {
        const float *e1 = s->hist[2], *e2 = s->hist[1], *e3 = s->hist[0];
        for (size_t i = 0; i < s->n; i++)
            comb[i] = (23.0f * e1[i] - 16.0f * e2[i] + 5.0f * e3[i]) / 12.0f;
    } else {
        const float *e1 = s->hist[3], *e2 = s->hist[2], *e3 = s->hist[1], *e4 = s->hist[0];
        const float k = (float)(1.0 / 24.0);
        for (size_t i = 0; i < s->n; i++)
            comb[i] = k * (55.0f * e1[i] - 59.0f * e2[i] + 37.0f * e3[i] - 9.0f * e4[i]);
    }
    pndm_prev(s, sample, t, prev_t, use, x, x0);
    s->counter++;
    return 0;
}

/* DDPMScheduler.step: the posterior mean of x_{t-1} given x_t and x0, plus
 * noise of the posterior variance (fixed_small; fixed_small_log takes it
 * through log/exp) when t > 0.  prev_t is the next timestep in the list
 * (-1 after the last: alphas_cumprod_prev = 1). */
static int step_ddpm(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    long t = (long)s->timesteps[s->pos];
    long prev_t = s->pos + 1 < s->nt ? (long)s->timesteps[s->pos + 1] : -1;
    float at = acp_at(s, t), ap = prev_t >= 0 ? acp_at(s, prev_t) : 1.0f;
    float bt = 1.0f - at, bp = 1.0f - ap;
    float cur_a = at / ap, cur_b = 1.0f - cur_a;
    float sa = sqrtf(at), sb = sqrtf(bt);
    float *p0 = x0 ? x0 : s->tmp;
    for (size_t i = 0; i < s->n; i++) {
        if (s->c.prediction_type == TSR_PRED_EPSILON)
            p0[i] = (x[i] - sb * mo[i]) / sa;
        else if (s->c.prediction_type == TSR_PRED_V)
            p0[i] = sa * x[i] - sb * mo[i];
        else
            p0[i] = mo[i];
    }
    clip(s, p0);
    float c0 = sqrtf(ap) * cur_b / bt;
    float cx = sqrtf(cur_a) * bp / bt;
    for (size_t i = 0; i < s->n; i++)
        x[i] = c0 * p0[i] + cx * x[i];
    if (t > 0) {
        /* _get_variance: its own prev_t lookup gives the same entry */
        float var = (1.0f - ap) / (1.0f - at) * (1.0f - at / ap);
        var = var < 1e-20f ? 1e-20f : var;
        float sd = s->c.variance_type == TSR_VARIANCE_FIXED_SMALL_LOG ? expf(0.5f * logf(var))
                                                                      : sqrtf(var);
        TSR_TRY(tsr_sched_noise(s, rng, s->tmp2));
        for (size_t i = 0; i < s->n; i++)
            x[i] = x[i] + sd * s->tmp2[i];
    }
    return 0;
}

static int step_lcm(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    long t = (long)s->timesteps[s->pos];
    long prev_t = s->pos + 1 < s->nt ? (long)s->timesteps[s->pos + 1] : t;
    float at = acp_at(s, t), ap = acp_at(s, prev_t);
    float bt = 1.0f - at, bp = 1.0f - ap;
    float scaled = (float)t * (float)s->c.timestep_scaling;
    float c_skip = 0.25f / (scaled * scaled + 0.25f);
    float c_out = scaled / sqrtf(scaled * scaled + 0.25f);
    float sa = sqrtf(at), sb = sqrtf(bt);
    float *p0 = s->tmp;
    for (size_t i = 0; i < s->n; i++) {
        if (s->c.prediction_type == TSR_PRED_EPSILON)
            p0[i] = (x[i] - sb * mo[i]) / sa;
        else if (s->c.prediction_type == TSR_PRED_V)
            p0[i] = sa * x[i] - sb * mo[i];
        else
            p0[i] = mo[i];
    }
    clip(s, p0);
    for (size_t i = 0; i < s->n; i++)
        p0[i] = c_out * p0[i] + c_skip * x[i];
    if (x0)
        memcpy(x0, p0, s->n * sizeof(float));
    if (s->pos != s->num_inference_steps - 1) {
        TSR_TRY(tsr_sched_noise(s, rng, s->tmp2));
        float ca = sqrtf(ap), cb = sqrtf(bp);
        for (size_t i = 0; i < s->n; i++)
            x[i] = ca * p0[i] + cb * s->tmp2[i];
    } else {
        memcpy(x, p0, s->n * sizeof(float));
    }
    return 0;
}

int tsr_sched_step_ddpm(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    int rc;
    if (s->p.kind == TSR_SAMPLER_DDIM)
        rc = step_ddim(s, mo, x, rng, x0);
    else if (s->p.kind == TSR_SAMPLER_DDPM)
        rc = step_ddpm(s, mo, x, rng, x0);
    else if (s->p.kind == TSR_SAMPLER_PNDM || s->p.kind == TSR_SAMPLER_PLMS)
        rc = step_pndm(s, mo, x, x0);
    else
        rc = step_lcm(s, mo, x, rng, x0);
    if (rc == 0)
        s->pos++;
    return rc;
}
