/*
 * scheduler/sched_schedule.c - beta schedules, timesteps and sigmas as the
 * diffusers classes' __init__ and set_timesteps() compute them.
 *
 * Why so literal: a sigma that differs in its last float bit changes every
 * later step a little, and a timestep that differs changes the UNet input.
 * So each array is built with the precision diffusers uses for it: betas,
 * alphas_cumprod and sigmas of the training schedule are float32 torch
 * tensors (cumprod accumulates in double, as ATen's CPU kernel does); the
 * inference timesteps and interpolated/Karras sigmas are float64 numpy
 * arrays rounded to float32 at the end.  numpy's linspace, arange (with its
 * "start + i*delta" fill), interp and round-half-even are re-created below.
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

/* torch.linspace(start, end, steps, dtype=float32) on the CPU. */
static void torch_linspace_f32(double start_d, double end_d, int steps, float *out)
{
    float start = (float)start_d, end = (float)end_d;
    if (steps == 1) {
        out[0] = start;
        return;
    }
    float step = (end - start) / (float)(steps - 1);
    int halfway = steps / 2;
    for (int i = 0; i < steps; i++)
        out[i] = i < halfway ? start + step * (float)i : end - step * (float)(steps - i - 1);
}

/* np.linspace(start, stop, num) (endpoint=True), float64. */
static void np_linspace(double start, double stop, int num, double *out)
{
    if (num == 1) {
        out[0] = start;
        return;
    }
    double step = (stop - start) / (double)(num - 1);
    for (int i = 0; i < num; i++)
        out[i] = (double)i * step + start;
    out[num - 1] = stop;
}

/* np.arange(start, stop, step) for float64; returns the length (<= max). */
static int np_arange(double start, double stop, double step, double *out, int max)
{
    double len_d = ceil((stop - start) / step);
    if (!(len_d > 0))
        return 0;
    int len = len_d > (double)max ? max : (int)len_d;
    double delta = (start + step) - start;
    for (int i = 0; i < len; i++)
        out[i] = i == 0 ? start : (i == 1 ? start + step : start + (double)i * delta);
    return len;
}

/* np.interp(x, arange(len), fp) with fp float32. */
static double np_interp(double x, const float *fp, int len)
{
    if (x <= 0)
        return fp[0];
    if (x >= (double)(len - 1))
        return fp[len - 1];
    int j = (int)floor(x);
    if ((double)j == x)
        return fp[j];
    double slope = ((double)fp[j + 1] - (double)fp[j]) / 1.0;
    return slope * (x - (double)j) + (double)fp[j];
}

/* _sigma_to_t: log_sigmas is float32 (np.log of the float32 sigmas). */
double tsr_sched_sigma_to_t(double sigma, const float *log_sigmas, int len)
{
    double ls = log(sigma > 1e-10 ? sigma : 1e-10);
    int low = 0;
    for (int i = 0; i < len; i++)
        if (ls - (double)log_sigmas[i] >= 0)
            low = i;
    if (low > len - 2)
        low = len - 2;
    double lo = log_sigmas[low], hi = log_sigmas[low + 1];
    double w = (lo - ls) / (lo - hi);
    w = w < 0 ? 0 : (w > 1 ? 1 : w);
    return (1 - w) * (double)low + w * (double)(low + 1);
}

static void karras(double smin, double smax, int n, double *out)
{
    double ramp[TSR_SCHED_MAX_STEPS + 2];
    np_linspace(0, 1, n, ramp);
    double min_inv = pow(smin, 1.0 / 7.0), max_inv = pow(smax, 1.0 / 7.0);
    for (int i = 0; i < n; i++)
        out[i] = pow(max_inv + ramp[i] * (min_inv - max_inv), 7.0);
}

static void exponential(double smin, double smax, int n, double *out)
{
    np_linspace(log(smax), log(smin), n, out);
    for (int i = 0; i < n; i++)
        out[i] = exp(out[i]);
}

static bool has_zero_snr(tsr_sampler_kind k)
{
    return k == TSR_SAMPLER_EULER || k == TSR_SAMPLER_EULER_A || k == TSR_SAMPLER_DDIM ||
           k == TSR_SAMPLER_DPMPP_2M || k == TSR_SAMPLER_DPMPP_2M_SDE ||
           k == TSR_SAMPLER_DPMPP_3M_SDE || k == TSR_SAMPLER_UNIPC || k == TSR_SAMPLER_LCM ||
           k == TSR_SAMPLER_DDPM || k == TSR_SAMPLER_DPMPP_2S_A;
}

/* The samplers whose schedule is EulerDiscreteScheduler's (DPM++ 2S a has
 * no diffusers class and borrows Euler's). */
static bool euler_schedule(tsr_sampler_kind k)
{
    return k == TSR_SAMPLER_EULER || k == TSR_SAMPLER_DPMPP_2S_A;
}

bool tsr_sched_is_sigma_kind(tsr_sampler_kind k)
{
    return k == TSR_SAMPLER_EULER || k == TSR_SAMPLER_EULER_A || k == TSR_SAMPLER_HEUN ||
           k == TSR_SAMPLER_LMS || k == TSR_SAMPLER_DPMPP_SDE || k == TSR_SAMPLER_DPM2 ||
           k == TSR_SAMPLER_DPM2_A || k == TSR_SAMPLER_DPMPP_2S_A;
}

bool tsr_sched_is_two_stage(tsr_sampler_kind k)
{
    return k == TSR_SAMPLER_HEUN || k == TSR_SAMPLER_DPMPP_SDE || k == TSR_SAMPLER_DPM2 ||
           k == TSR_SAMPLER_DPM2_A || k == TSR_SAMPLER_DPMPP_2S_A;
}

bool tsr_sched_is_multistep(tsr_sampler_kind k)
{
    return k == TSR_SAMPLER_DPMPP_2M || k == TSR_SAMPLER_DPMPP_2M_SDE ||
           k == TSR_SAMPLER_DPMPP_3M_SDE || k == TSR_SAMPLER_UNIPC;
}

float tsr_sched_acp(const tsr_sampler *s, long t)
{
    if (t < 0)
        return s->final_acp;
    if (t >= s->num_train)
        t = s->num_train - 1;
    return s->acp[t];
}

/* diffusers' "leading" spacing: step_ratio = N // points, which is 0 when
 * there are more points than training timesteps (then every timestep would
 * be steps_offset).  Tessera uses a ratio of at least 1; the timesteps past
 * the training schedule that this makes read its last entry. */
static int leading_ratio(int N, int points)
{
    int r = N / points;
    return r > 0 ? r : 1;
}

int tsr_sched_make_alphas(tsr_sampler *s)
{
    const tsr_sched_config *c = &s->c;
    int N = c->num_train_timesteps;
    s->num_train = N;
    float *betas = calloc((size_t)N, sizeof(float));
    s->acp = calloc((size_t)N, sizeof(float));
    if (!betas || !s->acp) {
        free(betas);
        return tsr_errorf(TSR_ERR_NOMEM, "scheduler: no memory for %d train timesteps", N);
    }
    if (c->beta_schedule == TSR_BETA_LINEAR) {
        torch_linspace_f32(c->beta_start, c->beta_end, N, betas);
    } else if (c->beta_schedule == TSR_BETA_SCALED_LINEAR) {
        torch_linspace_f32(pow(c->beta_start, 0.5), pow(c->beta_end, 0.5), N, betas);
        for (int i = 0; i < N; i++)
            betas[i] = betas[i] * betas[i];
    } else {
        for (int i = 0; i < N; i++) {
            double t1 = (double)i / N, t2 = (double)(i + 1) / N;
            double a1 = cos((t1 + 0.008) / 1.008 * 3.14159265358979323846 / 2);
            double a2 = cos((t2 + 0.008) / 1.008 * 3.14159265358979323846 / 2);
            double b = 1 - (a2 * a2) / (a1 * a1);
            betas[i] = (float)(b < 0.999 ? b : 0.999);
        }
    }
    bool zsnr = c->rescale_betas_zero_snr == 1 && has_zero_snr(s->p.kind);
    if (zsnr) {
        /* rescale_zero_terminal_snr, in float32 tensor arithmetic */
        double acc = 1;
        float *sq = s->acp;
        for (int i = 0; i < N; i++) {
            acc *= (double)(1.0f - betas[i]);
            sq[i] = sqrtf((float)acc);
        }
        float a0 = sq[0], aT = sq[N - 1];
        float scale = a0 / (a0 - aT);
        for (int i = 0; i < N; i++) {
            sq[i] = sq[i] - aT;
            sq[i] = sq[i] * scale;
            sq[i] = sq[i] * sq[i]; /* alphas_bar */
        }
        for (int i = N - 1; i >= 1; i--)
            betas[i] = 1.0f - sq[i] / sq[i - 1];
        betas[0] = 1.0f - sq[0];
    }
    double acc = 1;
    for (int i = 0; i < N; i++) {
        acc *= (double)(1.0f - betas[i]);
        s->acp[i] = (float)acc;
    }
    if (zsnr && (euler_schedule(s->p.kind) || s->p.kind == TSR_SAMPLER_EULER_A))
        s->acp[N - 1] = 0x1p-24f;
    free(betas);
    bool one = s->c.set_alpha_to_one == 1;
    s->final_acp = one ? 1.0f : s->acp[0];
    return 0;
}

static float sigma_min_last(const tsr_sampler *s)
{
    float a = s->acp[0];
    return sqrtf((1.0f - a) / a);
}

/* Euler, Euler a, Heun, LMS, DPM++ SDE, DPM2, DPM2 a, DPM++ 2S a. */
static int sigma_family(tsr_sampler *s, double *ts, float *train_sig, float *logsig, double *sig)
{
    const tsr_sched_config *c = &s->c;
    int N = s->num_train, n = s->p.steps, m = 0;
    tsr_sampler_kind k = s->p.kind;
    bool comfy = tsr_schedule_is_comfy(s->p.schedule);
    if (comfy) {
        TSR_TRY(tsr_sched_comfy_fill(s, ts, sig, &m));
        n = m;
    } else if (c->timestep_spacing == TSR_SPACING_LINSPACE) {
        np_linspace(0, N - 1, n, ts);
        /* float32 except in DPMSolverSDEScheduler (dtype=float) */
        for (int i = 0; i < n; i++)
            sig[i] = k == TSR_SAMPLER_DPMPP_SDE ? ts[n - 1 - i] : (double)(float)ts[n - 1 - i];
        for (int i = 0; i < n; i++)
            ts[i] = sig[i];
        m = n;
    } else if (c->timestep_spacing == TSR_SPACING_LEADING) {
        int ratio = leading_ratio(N, n);
        for (int i = 0; i < n; i++)
            ts[i] = (double)((n - 1 - i) * ratio) + c->steps_offset;
        m = n;
    } else {
        double tmp[TSR_SCHED_MAX_STEPS + 2];
        m = np_arange(N, 0, -((double)N / n), tmp, n + 1);
        for (int i = 0; i < m; i++)
            ts[i] = (double)(float)nearbyint(tmp[i]) - 1;
    }
    for (int i = 0; i < m && !comfy; i++)
        sig[i] = np_interp(ts[i], train_sig, N);
    if (c->use_karras_sigmas == 1 || c->use_exponential_sigmas == 1) {
        double smin = sig[m - 1], smax = sig[0];
        if (euler_schedule(k) && !isnan(c->sigma_min))
            smin = c->sigma_min;
        if (euler_schedule(k) && !isnan(c->sigma_max))
            smax = c->sigma_max;
        if (c->use_karras_sigmas == 1)
            karras(smin, smax, n, sig);
        else
            exponential(smin, smax, n, sig);
        m = n;
        bool round_t = c->use_karras_sigmas == 1 &&
                       (k == TSR_SAMPLER_DPM2 || k == TSR_SAMPLER_DPM2_A); /* KDPM2: .round() */
        for (int i = 0; i < m; i++) {
            ts[i] = tsr_sched_sigma_to_t(sig[i], logsig, N);
            if (round_t)
                ts[i] = nearbyint(ts[i]);
        }
    }
    s->num_inference_steps = n;
    if (k == TSR_SAMPLER_DPM2 || k == TSR_SAMPLER_DPM2_A || k == TSR_SAMPLER_DPMPP_2S_A)
        return tsr_sched_kdiff_arrays(s, ts, sig, m, logsig);
    float last = 0;
    if (k == TSR_SAMPLER_EULER && c->final_sigmas_type == TSR_FINAL_SIGMA_MIN)
        last = sigma_min_last(s);
    /* final arrays */
    if (k == TSR_SAMPLER_HEUN || k == TSR_SAMPLER_DPMPP_SDE) {
        double mid[TSR_SCHED_MAX_STEPS + 2];
        if (k == TSR_SAMPLER_DPMPP_SDE) {
            for (int i = 0; i + 1 < m; i++) {
                double t0 = -log(sig[i]), t1 = -log(sig[i + 1]);
                double tp = t0 + (t1 - t0) * 0.5;
                mid[i] = tsr_sched_sigma_to_t(exp(-tp), logsig, N);
            }
        }
        s->nt = 2 * m - 1;
        s->ns = 2 * m;
        s->timesteps = malloc((size_t)s->nt * sizeof(double));
        s->sigmas = malloc((size_t)s->ns * sizeof(float));
        if (!s->timesteps || !s->sigmas)
            return tsr_errorf(TSR_ERR_NOMEM, "scheduler: no memory");
        s->sigmas[0] = (float)sig[0];
        for (int i = 1; i < m; i++)
            s->sigmas[2 * i - 1] = s->sigmas[2 * i] = (float)sig[i];
        s->sigmas[2 * m - 1] = 0;
        s->timesteps[0] = (float)ts[0];
        for (int i = 1; i < m; i++) {
            s->timesteps[2 * i - 1] = (float)ts[i];
            s->timesteps[2 * i] = (float)ts[i];
        }
        if (k == TSR_SAMPLER_DPMPP_SDE)
            for (int i = 1; i < m; i++)
                s->timesteps[2 * i - 1] = (float)mid[i - 1];
        return 0;
    }
    s->nt = m;
    s->ns = m + 1;
    s->timesteps = malloc((size_t)s->nt * sizeof(double));
    s->sigmas = malloc((size_t)s->ns * sizeof(float));
    if (!s->timesteps || !s->sigmas)
        return tsr_errorf(TSR_ERR_NOMEM, "scheduler: no memory");
    for (int i = 0; i < m; i++) {
        s->timesteps[i] = (float)ts[i];
        s->sigmas[i] = (float)sig[i];
    }
    s->sigmas[m] = last;
    return 0;
}

/* DPM-Solver multistep and UniPC. */
static int multistep_family(tsr_sampler *s, double *ts, float *train_sig, float *logsig, double *sig)
{
    const tsr_sched_config *c = &s->c;
    int N = s->num_train, n = s->p.steps, m = n;
    bool unipc = s->p.kind == TSR_SAMPLER_UNIPC;
    bool comfy = tsr_schedule_is_comfy(s->p.schedule);
    double tmp[TSR_SCHED_MAX_STEPS + 2];
    if (comfy) {
        TSR_TRY(tsr_sched_comfy_fill(s, ts, sig, &m));
        n = m;
    } else if (c->timestep_spacing == TSR_SPACING_LINSPACE) {
        np_linspace(0, N - 1, n + 1, tmp);
        for (int i = 0; i < n; i++)
            ts[i] = nearbyint(tmp[n - i]);
    } else if (c->timestep_spacing == TSR_SPACING_LEADING) {
        int ratio = leading_ratio(N, n + 1);
        for (int i = 0; i < n; i++)
            ts[i] = (double)((n - i) * ratio) + c->steps_offset;
    } else {
        m = np_arange(N, 0, -((double)N / n), tmp, n + 1);
        for (int i = 0; i < m; i++)
            ts[i] = nearbyint(tmp[i]) - 1;
    }
    float last = 0;
    bool sigma_min_final = c->final_sigmas_type == TSR_FINAL_SIGMA_MIN;
    if (c->use_karras_sigmas == 1 || c->use_exponential_sigmas == 1) {
        double smin = train_sig[0], smax = train_sig[N - 1];
        m = n;
        if (c->use_karras_sigmas == 1)
            karras(smin, smax, n, sig);
        else
            exponential(smin, smax, n, sig);
        for (int i = 0; i < m; i++) {
            double t = tsr_sched_sigma_to_t(sig[i], logsig, N);
            if (c->use_karras_sigmas == 1 && (unipc || c->beta_schedule != TSR_BETA_SQUAREDCOS))
                t = nearbyint(t);
            ts[i] = trunc(t); /* .to(int64) */
        }
        if (sigma_min_final)
            last = unipc ? (float)sig[m - 1] : sigma_min_last(s);
    } else {
        for (int i = 0; i < m && !comfy; i++)
            sig[i] = np_interp(ts[i], train_sig, N);
        if (sigma_min_final)
            last = sigma_min_last(s);
    }
    s->num_inference_steps = m;
    s->nt = m;
    s->ns = m + 1;
    s->timesteps = malloc((size_t)m * sizeof(double));
    s->sigmas = malloc((size_t)(m + 1) * sizeof(float));
    if (!s->timesteps || !s->sigmas)
        return tsr_errorf(TSR_ERR_NOMEM, "scheduler: no memory");
    for (int i = 0; i < m; i++) {
        s->timesteps[i] = ts[i];
        s->sigmas[i] = (float)sig[i];
    }
    s->sigmas[m] = last;
    return 0;
}

/* DDIM, DDPM, PNDM/PLMS, LCM: integer timesteps, no sigmas. */
static int ddpm_family(tsr_sampler *s, double *ts)
{
    const tsr_sched_config *c = &s->c;
    int N = s->num_train, n = s->p.steps, m = n;
    tsr_sampler_kind k = s->p.kind;
    double tmp[TSR_SCHED_MAX_STEPS + 8];
    s->num_inference_steps = n;
    if (k == TSR_SAMPLER_LCM) {
        int orig = c->original_inference_steps;
        if (orig > N)
            return tsr_errorf(TSR_ERR_INVALID, "scheduler: original_inference_steps %d > %d", orig, N);
        /* diffusers refuses more steps than original_inference_steps unless
         * set_timesteps() is given a larger one: Tessera gives it the step
         * count (at most the training schedule's length) */
        if (n > orig)
            orig = n < N ? n : N;
        int kk = N / orig, len = orig;
        double idx[TSR_SCHED_MAX_STEPS + 2];
        for (int i = 0; i < n; i++)
            idx[i] = (double)i * ((double)len / n);
        for (int i = 0; i < n; i++) {
            int j = (int)floor(idx[i]);
            ts[i] = (double)((len - j) * kk - 1); /* reversed origin list */
        }
    } else if (k == TSR_SAMPLER_DDIM || k == TSR_SAMPLER_DDPM) {
        if (c->timestep_spacing == TSR_SPACING_LINSPACE) {
            np_linspace(0, N - 1, n, tmp);
            for (int i = 0; i < n; i++)
                ts[i] = nearbyint(tmp[n - 1 - i]);
        } else if (c->timestep_spacing == TSR_SPACING_LEADING) {
            for (int i = 0; i < n; i++)
                ts[i] = (double)((n - 1 - i) * leading_ratio(N, n)) + c->steps_offset;
        } else {
            m = np_arange(N, 0, -((double)N / n), tmp, n + 1);
            for (int i = 0; i < m; i++)
                ts[i] = nearbyint(tmp[i]) - 1;
        }
    } else { /* PNDM, PLMS: ascending _timesteps first */
        double a[TSR_SCHED_MAX_STEPS + 2];
        if (c->timestep_spacing == TSR_SPACING_LINSPACE) {
            np_linspace(0, N - 1, n, tmp);
            for (int i = 0; i < n; i++)
                a[i] = nearbyint(tmp[i]);
        } else if (c->timestep_spacing == TSR_SPACING_LEADING) {
            for (int i = 0; i < n; i++)
                a[i] = (double)(i * leading_ratio(N, n)) + c->steps_offset;
        } else {
            m = np_arange(N, 0, -((double)N / n), tmp, n + 1);
            for (int i = 0; i < m; i++)
                a[i] = nearbyint(tmp[m - 1 - i]) - 1;
        }
        n = m;
        /* The PRK warm-up takes the last 4 timesteps (diffusers fails with
         * fewer); below 4 steps PNDM runs PLMS alone, as skip_prk_steps. */
        if (n < 4)
            s->c.skip_prk_steps = 1;
        if (c->skip_prk_steps == 1) {
            /* concat(a[:-1], a[-2:-1], a[-1:])[::-1] */
            double b[TSR_SCHED_MAX_STEPS + 3];
            int nb = 0;
            for (int i = 0; i < n - 1; i++)
                b[nb++] = a[i];
            if (n >= 2)
                b[nb++] = a[n - 2];
            b[nb++] = a[n - 1];
            for (int i = 0; i < nb; i++)
                ts[i] = b[nb - 1 - i];
            m = nb;
        } else {
            double prk[8], prk2[16];
            int half = N / s->p.steps / 2;
            for (int i = 0; i < 4; i++) {
                prk[2 * i] = a[n - 4 + i];
                prk[2 * i + 1] = a[n - 4 + i] + half;
            }
            /* prk[:-1].repeat(2)[1:-1][::-1] */
            int np2 = 0;
            for (int i = 0; i < 7; i++) {
                prk2[np2++] = prk[i];
                prk2[np2++] = prk[i];
            }
            int cnt = 0;
            for (int i = np2 - 2; i >= 1; i--)
                ts[cnt++] = prk2[i];
            for (int i = n - 4; i >= 0; i--)
                ts[cnt++] = a[i];
            m = cnt;
            s->counter = 0;
        }
    }
    s->nt = m;
    s->timesteps = malloc((size_t)m * sizeof(double));
    if (!s->timesteps)
        return tsr_errorf(TSR_ERR_NOMEM, "scheduler: no memory");
    memcpy(s->timesteps, ts, (size_t)m * sizeof(double));
    /* "leading" with steps_offset reaches timestep N at N steps: the UNet
     * gets N and alphas_cumprod is read at N - 1 (tsr_sched_acp), which is
     * what diffusers' np.interp does for the sigma samplers at the same
     * timestep (its DDIM, PNDM and DDPM index past the end and fail). */
    return 0;
}

int tsr_sched_make_timesteps(tsr_sampler *s)
{
    int N = s->num_train, rc = 0;
    /* PNDM with PRK has the most timesteps: 12 + (steps - 3) */
    double *ts = malloc((TSR_SCHED_MAX_STEPS + 16) * sizeof(double));
    double *sig = malloc((TSR_SCHED_MAX_STEPS + 16) * sizeof(double));
    float *train_sig = malloc((size_t)N * sizeof(float));
    float *logsig = malloc((size_t)N * sizeof(float));
    if (!ts || !sig || !train_sig || !logsig) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "scheduler: no memory");
        goto done;
    }
    for (int i = 0; i < N; i++) {
        float a = s->acp[i];
        train_sig[i] = sqrtf((1.0f - a) / a);
        logsig[i] = logf(train_sig[i]);
    }
    if (tsr_sched_is_sigma_kind(s->p.kind))
        rc = sigma_family(s, ts, train_sig, logsig, sig);
    else if (tsr_sched_is_multistep(s->p.kind))
        rc = multistep_family(s, ts, train_sig, logsig, sig);
    else
        rc = ddpm_family(s, ts);
done:
    free(ts);
    free(sig);
    free(train_sig);
    free(logsig);
    return rc;
}
