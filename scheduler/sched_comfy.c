/*
 * scheduler/sched_comfy.c - ComfyUI's sigma schedules (issue 59).
 *
 * Why a separate table and not diffusers' arrays: ComfyUI does not ask the
 * scheduler config for timesteps.  Its ModelSamplingDiscrete builds the 1000
 * discrete sigmas once (betas = linspace(sqrt(beta_start), sqrt(beta_end),
 * 1000, float64)^2, alphas_cumprod in float64, sigmas and log-sigmas stored
 * as float32) and every schedule in comfy/samplers.py is a different walk
 * over that table: `normal` reads sigma at float32 linspace timesteps by
 * log-sigma interpolation, `simple` and `ddim_uniform` pick table entries,
 * `beta` picks them at Beta(0.6, 0.6) quantiles, `karras`/`exponential` span
 * the table's sigma_min..sigma_max.  KSampler's `denoise` < 1 builds the
 * schedule of int(steps / denoise) steps and keeps its last steps + 1
 * sigmas.  This file reproduces those walks with the same precisions
 * (float32 where torch works in float32) so the lists match ComfyUI within
 * ~1e-7 relative; the maths was read from ComfyUI's comfy/samplers.py,
 * comfy/model_sampling.py and k-diffusion's get_sigmas_*, and written anew.
 * The Beta quantile (scipy.stats.beta.ppf in ComfyUI) is our own: the
 * regularized incomplete beta by its continued fraction, inverted by
 * bisection to the last bit, since only its rounding to a timestep matters.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "scheduler/sched_internal.h"

#define COMFY_MAX_TOTAL 10000

typedef struct comfy_table {
    int n;
    float *sig;    /* sigmas[n], ascending (float32, as ComfyUI's buffer) */
    float *logsig; /* log of the float64 sigma, stored float32 */
} comfy_table;

bool tsr_schedule_is_comfy(tsr_schedule s)
{
    return s >= TSR_SCHEDULE_COMFY_NORMAL && s < TSR_SCHEDULE_COUNT;
}

/* torch.linspace for float64: the two halves are anchored at each end. */
static double lin_f64(double a, double b, int n, int i)
{
    if (n == 1)
        return a;
    double step = (b - a) / (double)(n - 1);
    return i < n / 2 ? a + step * i : b - step * (double)(n - 1 - i);
}

/* torch.linspace for float32: step in float, each half anchored at its end,
 * and the multiply-add fused (torch's CPU kernels are built with FMA
 * contraction).  This is torch's scalar path, exactly; for 2 * the vector
 * width (32 points with AVX-512) and more, torch fills vectors from one
 * fused base per vector, which differs by an ulp here and there (and from
 * one CPU to another): the lists then agree to ~1e-7, not to the bit. */
static float lin_f32(float a, float b, int n, int i)
{
    if (n == 1)
        return a;
    float step = (b - a) / (float)(n - 1);
    return i < n / 2 ? fmaf(step, (float)i, a) : fmaf(-step, (float)(n - 1 - i), b);
}

static int table_make(const tsr_sched_config *cfg, comfy_table *t)
{
    memset(t, 0, sizeof *t);
    if (cfg->beta_schedule != TSR_BETA_UNSET && cfg->beta_schedule != TSR_BETA_SCALED_LINEAR)
        return tsr_errorf(TSR_ERR_UNSUPPORTED,
                          "comfy schedules: the model's beta_schedule is not scaled_linear "
                          "(ComfyUI's \"linear\"), the only one Tessera reproduces");
    if (cfg->rescale_betas_zero_snr == 1)
        return tsr_errorf(TSR_ERR_UNSUPPORTED,
                          "comfy schedules: the model rescales its betas to zero terminal SNR "
                          "(ComfyUI's zsnr option is not reproduced)");
    int n = cfg->num_train_timesteps > 0 ? cfg->num_train_timesteps : 1000;
    double b0 = isnan(cfg->beta_start) ? 0.00085 : cfg->beta_start;
    double b1 = isnan(cfg->beta_end) ? 0.012 : cfg->beta_end;
    if (n < 2 || n > TSR_SCHED_MAX_TRAIN || !(b0 > 0 && b1 < 1 && b0 <= b1))
        return tsr_errorf(TSR_ERR_INVALID, "comfy schedules: bad beta range %g..%g over %d steps",
                          b0, b1, n);
    t->n = n;
    t->sig = malloc((size_t)n * sizeof(float));
    t->logsig = malloc((size_t)n * sizeof(float));
    if (!t->sig || !t->logsig) {
        free(t->sig);
        free(t->logsig);
        return tsr_errorf(TSR_ERR_NOMEM, "comfy schedules: no memory");
    }
    double s0 = sqrt(b0), s1 = sqrt(b1), acp = 1;
    for (int i = 0; i < n; i++) {
        double beta = lin_f64(s0, s1, n, i);
        beta = beta * beta;
        acp *= 1.0 - beta;
        double sg = sqrt((1.0 - acp) / acp);
        t->sig[i] = (float)sg;
        t->logsig[i] = (float)log(sg);
    }
    return 0;
}

static void table_free(comfy_table *t)
{
    free(t->sig);
    free(t->logsig);
}

/* ModelSamplingDiscrete.timestep: argmin |log(sigma) - log_sigmas| (float32). */
static int table_timestep(const comfy_table *t, float sigma)
{
    float ls = logf(sigma);
    int best = 0;
    float bd = fabsf(ls - t->logsig[0]);
    for (int i = 1; i < t->n; i++) {
        float d = fabsf(ls - t->logsig[i]);
        if (d < bd) {
            bd = d;
            best = i;
        }
    }
    return best;
}

/* ModelSamplingDiscrete.sigma: log-linear interpolation at a float32 t. */
static float table_sigma(const comfy_table *t, float ts)
{
    float mx = (float)(t->n - 1);
    ts = ts < 0 ? 0 : ts > mx ? mx : ts;
    int lo = (int)floorf(ts), hi = (int)ceilf(ts);
    float w = ts - floorf(ts);
    float l = (1.0f - w) * t->logsig[lo] + w * t->logsig[hi];
    return expf(l);
}

/* One schedule of `steps` steps; out holds at least steps + 2 floats.
 * Returns the count (the final 0 included). */
static int schedule(const comfy_table *t, tsr_schedule s, int steps, float *out)
{
    int n = t->n, k = 0;
    float smin = t->sig[0], smax = t->sig[n - 1];
    switch (s) {
    case TSR_SCHEDULE_COMFY_NORMAL:
    case TSR_SCHEDULE_COMFY_SGM_UNIFORM: {
        float start = (float)table_timestep(t, smax), end = (float)table_timestep(t, smin);
        bool zero = true;
        int pts = steps;
        if (s == TSR_SCHEDULE_COMFY_SGM_UNIFORM) {
            for (int i = 0; i < steps; i++)
                out[k++] = table_sigma(t, lin_f32(start, end, steps + 1, i));
        } else {
            /* a model whose last sigma is ~0 gets one more point instead of
             * the appended zero */
            if (fabsf(table_sigma(t, end)) <= 1e-5f) {
                pts++;
                zero = false;
            }
            for (int i = 0; i < pts; i++)
                out[k++] = table_sigma(t, lin_f32(start, end, pts, i));
        }
        if (zero)
            out[k++] = 0;
        return k;
    }
    case TSR_SCHEDULE_COMFY_KARRAS: {
        double rho = 7.0, mn = pow((double)smin, 1 / rho), mxr = pow((double)smax, 1 / rho);
        float d = (float)(mn - mxr);
        for (int i = 0; i < steps; i++) {
            float r = lin_f32(0.0f, 1.0f, steps, i);
            float v = (float)mxr + r * d;
            out[k++] = powf(v, 7.0f);
        }
        out[k++] = 0;
        return k;
    }
    case TSR_SCHEDULE_COMFY_EXPONENTIAL: {
        float a = (float)log((double)smax), b = (float)log((double)smin);
        for (int i = 0; i < steps; i++)
            out[k++] = expf(lin_f32(a, b, steps, i));
        out[k++] = 0;
        return k;
    }
    case TSR_SCHEDULE_COMFY_SIMPLE: {
        double ss = (double)n / steps;
        for (int i = 0; i < steps; i++)
            out[k++] = t->sig[n - 1 - (int)(i * ss)];
        out[k++] = 0;
        return k;
    }
    case TSR_SCHEDULE_COMFY_DDIM_UNIFORM: {
        /* every ss-th table entry from index 1 up, reversed, then 0 (or,
         * when sigmas[1] is ~0, one step more and no 0): the count is
         * ceil((n - 1) / ss), which may exceed steps (7 steps: 8) */
        int st = steps;
        bool zero = true;
        if (fabsf(t->sig[1]) <= 1e-5f) {
            st++;
            zero = false;
        }
        int ss = n / st > 1 ? n / st : 1;
        int cnt = 0;
        for (int x = 1; x < n; x += ss)
            cnt++;
        for (int j = 0; j < cnt; j++)
            out[k++] = t->sig[1 + (cnt - 1 - j) * ss];
        if (zero)
            out[k++] = 0;
        return k;
    }
    case TSR_SCHEDULE_COMFY_BETA: {
        int last = -1;
        for (int i = 0; i < steps; i++) {
            double p = 1.0 - (double)i * (1.0 / (double)steps);
            int ts = (int)nearbyint(tsr_beta_ppf(p, 0.6, 0.6) * (double)(n - 1));
            if (ts != last)
                out[k++] = t->sig[ts];
            last = ts;
        }
        out[k++] = 0;
        return k;
    }
    default:
        return 0;
    }
}

/* The most sigmas schedule() writes for `steps` (ddim_uniform's count). */
static int schedule_cap(int n, int steps)
{
    int ss = n / (steps + 1) > 1 ? n / (steps + 1) : 1;
    int c = (n - 1 + ss - 1) / ss;
    return (c > steps + 1 ? c : steps + 1) + 2;
}

int tsr_comfy_sigmas(const tsr_sched_config *cfg, tsr_schedule sch, int steps, double denoise,
                     float *out, int cap, int *n_out)
{
    *n_out = 0;
    if (!cfg || !out)
        return tsr_errorf(TSR_ERR_INVALID, "comfy schedules: NULL argument");
    if (!tsr_schedule_is_comfy(sch))
        return tsr_errorf(TSR_ERR_INVALID, "comfy schedules: \"%s\" is not a comfy_* schedule",
                          tsr_schedule_name(sch));
    if (steps < 1 || steps > TSR_SCHED_MAX_STEPS)
        return tsr_errorf(TSR_ERR_INVALID, "comfy schedules: steps %d is outside [1, %d]", steps,
                          TSR_SCHED_MAX_STEPS);
    if (!(denoise > 0 && denoise <= 1))
        return tsr_errorf(TSR_ERR_INVALID, "comfy schedules: denoise %g is outside (0, 1]",
                          denoise);
    int total = steps;
    if (denoise <= 0.9999) {
        double tot = floor((double)steps / denoise);
        if (tot > COMFY_MAX_TOTAL)
            return tsr_errorf(TSR_ERR_INVALID,
                              "comfy schedules: denoise %g makes a schedule of %.0f steps "
                              "(at most %d)",
                              denoise, tot, COMFY_MAX_TOTAL);
        total = (int)tot;
    }
    comfy_table t;
    TSR_TRY(table_make(cfg, &t));
    int rc = 0, len = schedule_cap(t.n, total);
    float *buf = malloc((size_t)len * sizeof(float));
    if (!buf) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "comfy schedules: no memory");
        goto done;
    }
    int m = schedule(&t, sch, total, buf);
    int first = 0;
    if (total != steps && m > steps + 1)
        first = m - (steps + 1); /* sigmas[-(steps + 1):] */
    if (m - first > cap) {
        rc = tsr_errorf(TSR_ERR_INVALID, "comfy schedules: %d sigmas do not fit in %d",
                        m - first, cap);
        goto done;
    }
    memcpy(out, buf + first, (size_t)(m - first) * sizeof(float));
    *n_out = m - first;
done:
    free(buf);
    table_free(&t);
    return rc;
}

int tsr_comfy_timestep(const tsr_sched_config *cfg, double sigma, int *ts)
{
    comfy_table t;
    if (!(sigma > 0))
        return tsr_errorf(TSR_ERR_INVALID, "comfy timestep: sigma %g is not positive", sigma);
    TSR_TRY(table_make(cfg, &t));
    *ts = table_timestep(&t, (float)sigma);
    table_free(&t);
    return 0;
}

/* ---- the Beta distribution ---- */

/* Continued fraction of I_x(a, b) (modified Lentz). */
static double beta_cf(double x, double a, double b)
{
    const double tiny = 1e-300;
    double qab = a + b, qap = a + 1, qam = a - 1;
    double c = 1, d = 1 - qab * x / qap;
    if (fabs(d) < tiny)
        d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 10000; m++) {
        int m2 = 2 * m;
        double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1 + aa * d;
        if (fabs(d) < tiny)
            d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1 / d;
        h *= d * c;
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1 + aa * d;
        if (fabs(d) < tiny)
            d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-16)
            break;
    }
    return h;
}

double tsr_beta_cdf(double x, double a, double b)
{
    if (!(a > 0 && b > 0) || !(x >= 0 && x <= 1))
        return NAN;
    if (x == 0 || x == 1)
        return x;
    double lbt = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
    double front = exp(lbt);
    if (x < (a + 1) / (a + b + 2))
        return front * beta_cf(x, a, b) / a;
    return 1 - front * beta_cf(1 - x, b, a) / b;
}

double tsr_beta_ppf(double p, double a, double b)
{
    if (!(a > 0 && b > 0) || !(p >= 0 && p <= 1))
        return NAN;
    if (p == 0 || p == 1)
        return p;
    /* the median of a symmetric Beta is 1/2; scipy's answer there is a hair
     * above it, which ComfyUI's rint(ppf * 999) then rounds up: keep the
     * upper end of the bracket (the least x whose cdf reaches p) */
    if (a == b && p == 0.5)
        return 0.5;
    double lo = 0, hi = 1;
    for (int i = 0; i < 200 && hi - lo > 0; i++) {
        double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi)
            break;
        if (tsr_beta_cdf(mid, a, b) < p)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

int tsr_sched_comfy_fill(tsr_sampler *s, double *ts, double *sig, int *m)
{
    float buf[TSR_SCHED_MAX_STEPS + 4];
    int n = 0;
    *m = 0;
    TSR_TRY(tsr_comfy_sigmas(&s->c, s->p.schedule, s->p.steps, s->p.strength, buf,
                             (int)(sizeof buf / sizeof buf[0]), &n));
    comfy_table t;
    TSR_TRY(table_make(&s->c, &t));
    for (int i = 0; i + 1 < n; i++) {
        sig[i] = buf[i];
        ts[i] = table_timestep(&t, buf[i]);
    }
    s->comfy_sigma_max = t.sig[t.n - 1];
    table_free(&t);
    *m = n - 1;
    return 0;
}
