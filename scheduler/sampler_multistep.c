/*
 * scheduler/sampler_multistep.c - DPM-Solver++ (2M, 2M SDE, 3M SDE, order 3)
 * and UniPC (bh1/bh2 predictor-corrector), in the data-prediction (x0) form
 * diffusers uses for Stable Diffusion.
 *
 * Why: both keep a short history of converted model outputs and combine
 * them with coefficients built from log-SNR differences (lambda).  The
 * coefficients are float computations on float32 sigmas exactly as the
 * diffusers code builds them from 0-dim tensors; the small linear systems
 * of UniPC (torch.linalg.solve) are solved in double and rounded, which
 * agrees with LAPACK's float result to an ulp or so.  The history records
 * each output's sigma, so a schedule that repeats a noise level (leading or
 * linspace spacing at 999-1000 steps) steps through it instead of dividing
 * by zero, where diffusers produces NaN.
 */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "scheduler/sched_internal.h"

/* No a*b+c contraction: gcc does none in ISO C mode (-std=c17); clang needs the pragma. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

static void alpha_sigma(float sigma, float *alpha_t, float *sigma_t)
{
    *alpha_t = 1.0f / sqrtf(sigma * sigma + 1.0f);
    *sigma_t = sigma * *alpha_t;
}

static float lambda_of(float sigma)
{
    float a, s;
    alpha_sigma(sigma, &a, &s);
    return logf(a) - logf(s);
}

/* convert_model_output for the x0-predicting solvers */
static void to_x0(const tsr_sampler *s, const float *mo, const float *x, float *out)
{
    float a, st;
    alpha_sigma(s->sigmas[s->pos], &a, &st);
    if (s->c.prediction_type == TSR_PRED_EPSILON)
        for (size_t i = 0; i < s->n; i++)
            out[i] = (x[i] - st * mo[i]) / a;
    else if (s->c.prediction_type == TSR_PRED_V)
        for (size_t i = 0; i < s->n; i++)
            out[i] = a * x[i] - st * mo[i];
    else
        memcpy(out, mo, s->n * sizeof(float));
}

/* Push a converted output (copied) as the newest history entry, taken at
 * `sigma`.  An output at the same sigma as the newest entry replaces it:
 * a schedule that repeats a noise level (diffusers' own at some step counts,
 * docs/samplers.md) then never divides by a zero log-SNR difference.  With
 * distinct sigmas, as in every schedule diffusers can run, this is
 * diffusers' list. */
static void push_hist(tsr_sampler *s, const float *m, float sigma, int keep)
{
    if (s->nhist > 0 && s->hist_sigma[s->nhist - 1] == sigma) {
        memcpy(s->hist[s->nhist - 1], m, s->n * sizeof(float));
        return;
    }
    if (s->nhist == keep) {
        float *old = s->hist[0];
        memmove(s->hist, s->hist + 1, (size_t)(keep - 1) * sizeof(float *));
        memmove(s->hist_sigma, s->hist_sigma + 1, (size_t)(keep - 1) * sizeof(float));
        s->hist[keep - 1] = old;
        s->nhist--;
    }
    s->hist_sigma[s->nhist] = sigma;
    memcpy(s->hist[s->nhist++], m, s->n * sizeof(float));
}

static int step_dpm(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    int nts = s->nt, pos = s->pos, order = s->c.solver_order;
    bool sde = s->p.kind == TSR_SAMPLER_DPMPP_2M_SDE || s->p.kind == TSR_SAMPLER_DPMPP_3M_SDE;
    bool lof = pos == nts - 1 && (s->c.euler_at_final == 1 || (s->c.lower_order_final == 1 && nts < 15) ||
                                  s->c.final_sigmas_type == TSR_FINAL_ZERO);
    bool los = pos == nts - 2 && s->c.lower_order_final == 1 && nts < 15;
    to_x0(s, mo, x, s->tmp);
    if (x0)
        memcpy(x0, s->tmp, s->n * sizeof(float));
    push_hist(s, s->tmp, s->sigmas[pos], order);
    float *noise = s->tmp2;
    if (sde)
        TSR_TRY(tsr_sched_noise(s, rng, noise));
    const float *m0 = s->hist[s->nhist - 1];
    float at, st, as0, ss0;
    alpha_sigma(s->sigmas[pos + 1], &at, &st);
    alpha_sigma(s->sigmas[pos], &as0, &ss0);
    float lt = logf(at) - logf(st), ls0 = logf(as0) - logf(ss0);
    float h = lt - ls0;
    int use = (order == 1 || s->lower_order_nums < 1 || lof)             ? 1
              : (order == 2 || s->lower_order_nums < 2 || los) ? 2
                                                                         : 3;
    if (use > s->nhist)
        use = s->nhist; /* fewer distinct noise levels than steps so far */
    if (h == 0.0f) {
        /* a step between equal noise levels leaves the sample as it is */
        if (s->lower_order_nums < order)
            s->lower_order_nums++;
        return 0;
    }
    float emh = expf(-h), em2h = expf(-2.0f * h);
    if (use == 1) {
        if (!sde) {
            float c1 = st / ss0, c2 = at * (emh - 1.0f);
            for (size_t i = 0; i < s->n; i++)
                x[i] = c1 * x[i] - c2 * m0[i];
        } else {
            float c1 = st / ss0 * emh, c2 = at * (1.0f - em2h), c3 = st * sqrtf(1.0f - em2h);
            for (size_t i = 0; i < s->n; i++)
                x[i] = c1 * x[i] + c2 * m0[i] + c3 * noise[i];
        }
    } else if (use == 2) {
        const float *m1 = s->hist[s->nhist - 2];
        float ls1 = lambda_of(s->hist_sigma[s->nhist - 2]);
        float h0 = ls0 - ls1, r0 = h0 / h, inv_r0 = 1.0f / r0;
        if (!sde) {
            float c1 = st / ss0, c2 = at * (emh - 1.0f), c3 = 0.5f * (at * (emh - 1.0f));
            for (size_t i = 0; i < s->n; i++) {
                float d1 = inv_r0 * (m0[i] - m1[i]);
                x[i] = c1 * x[i] - c2 * m0[i] - c3 * d1;
            }
        } else {
            float c1 = st / ss0 * emh, c2 = at * (1.0f - em2h), c3 = 0.5f * (at * (1.0f - em2h));
            float c4 = st * sqrtf(1.0f - em2h);
            for (size_t i = 0; i < s->n; i++) {
                float d1 = inv_r0 * (m0[i] - m1[i]);
                x[i] = c1 * x[i] + c2 * m0[i] + c3 * d1 + c4 * noise[i];
            }
        }
    } else {
        const float *m1 = s->hist[s->nhist - 2], *m2 = s->hist[s->nhist - 3];
        float ls1 = lambda_of(s->hist_sigma[s->nhist - 2]);
        float ls2 = lambda_of(s->hist_sigma[s->nhist - 3]);
        float h0 = ls0 - ls1, h1 = ls1 - ls2, r0 = h0 / h, r1 = h1 / h;
        float i0 = 1.0f / r0, i1 = 1.0f / r1, k1 = r0 / (r0 + r1), k2 = 1.0f / (r0 + r1);
        float c1, c2, c3, c4, c5 = 0;
        if (!sde) {
            c1 = st / ss0;
            c2 = at * (emh - 1.0f);
            c3 = at * ((emh - 1.0f) / h + 1.0f);
            c4 = at * ((emh - 1.0f + h) / (h * h) - 0.5f);
        } else {
            c1 = st / ss0 * emh;
            c2 = at * (1.0f - em2h);
            c3 = at * ((1.0f - em2h) / (-2.0f * h) + 1.0f);
            c4 = at * ((1.0f - em2h - 2.0f * h) / ((2.0f * h) * (2.0f * h)) - 0.5f);
            c5 = st * sqrtf(1.0f - em2h);
        }
        for (size_t i = 0; i < s->n; i++) {
            float d10 = i0 * (m0[i] - m1[i]), d11 = i1 * (m1[i] - m2[i]);
            float d1 = d10 + k1 * (d10 - d11), d2 = k2 * (d10 - d11);
            if (!sde)
                x[i] = c1 * x[i] - c2 * m0[i] + c3 * d1 - c4 * d2;
            else
                x[i] = c1 * x[i] + c2 * m0[i] + c3 * d1 + c4 * d2 + c5 * noise[i];
        }
    }
    if (s->lower_order_nums < order)
        s->lower_order_nums++;
    return 0;
}

/* Solve the k x k system R rho = b (k <= 3) by Gaussian elimination with
 * partial pivoting, in double. */
static void solve_small(int k, double R[3][3], double *b, double *rho)
{
    for (int c = 0; c < k; c++) {
        int p = c;
        for (int r = c + 1; r < k; r++)
            if (fabs(R[r][c]) > fabs(R[p][c]))
                p = r;
        if (p != c) {
            for (int j = 0; j < k; j++) {
                double t = R[c][j];
                R[c][j] = R[p][j];
                R[p][j] = t;
            }
            double t = b[c];
            b[c] = b[p];
            b[p] = t;
        }
        for (int r = c + 1; r < k; r++) {
            double f = R[r][c] / R[c][c];
            for (int j = c; j < k; j++)
                R[r][j] -= f * R[c][j];
            b[r] -= f * b[c];
        }
    }
    for (int r = k - 1; r >= 0; r--) {
        double v = b[r];
        for (int j = r + 1; j < k; j++)
            v -= R[r][j] * rho[j];
        rho[r] = v / R[r][r];
    }
}

/* Shared setup of UniPC's predictor (corrector=false) and corrector.
 * sig_t: the target sigma; the base point and the earlier ones are the
 * history's, newest first.  Fills rks[order-1], b[order], h_phi_1, B_h;
 * returns h (0: the target is the base point's noise level). */
static float unipc_coeffs(const tsr_sampler *s, int order, float sig_t, float *rks, float *b,
                          float *h_phi_1, float *B_h, float *at_out, float *c1_out)
{
    float at, st, as0, ss0;
    const float *hs = s->hist_sigma + s->nhist - 1; /* hs[-i]: the i-th point back */
    alpha_sigma(sig_t, &at, &st);
    alpha_sigma(hs[0], &as0, &ss0);
    float lt = logf(at) - logf(st), ls0 = logf(as0) - logf(ss0);
    float h = lt - ls0;
    if (h == 0.0f)
        return h;
    for (int i = 1; i < order; i++)
        rks[i - 1] = (lambda_of(hs[-i]) - ls0) / h;
    float hh = -h;
    float hp1 = expm1f(hh);
    float hpk = hp1 / hh - 1.0f;
    float bh = expm1f(hh); /* B(h) of the bh2 variant (diffusers default) */
    long fact = 1;
    for (int i = 1; i <= order; i++) {
        b[i - 1] = hpk * (float)fact / bh;
        fact *= i + 1;
        hpk = hpk / hh - (float)(1.0 / (double)fact);
    }
    *h_phi_1 = hp1;
    *B_h = bh;
    *at_out = at;
    *c1_out = st / ss0;
    return h;
}

static void unipc_rhos(int order, const float *rks, const float *b, bool full, float *rho)
{
    int k = full ? order : order - 1;
    double R[3][3], bb[3], r[3];
    for (int i = 0; i < k; i++) {
        for (int j = 0; j < k; j++) {
            double rk = j < order - 1 ? rks[j] : 1.0;
            R[i][j] = i == 0 ? 1.0 : pow(rk, i);
        }
        bb[i] = b[i];
    }
    solve_small(k, R, bb, r);
    for (int i = 0; i < k; i++)
        rho[i] = (float)r[i];
}

static int step_unipc(tsr_sampler *s, const float *mo, float *x, float *x0)
{
    int pos = s->pos, nts = s->nt, so = s->c.solver_order;
    float *mc = s->tmp;
    to_x0(s, mo, x, mc);
    if (x0)
        memcpy(x0, mc, s->n * sizeof(float));
    bool use_corrector = pos > 0 && s->have_save;
    float rks[3], b[3], hp1, bh, at, c1, rho[3];
    /* multistep_uni_c_bh_update at target pos from pos-1 (nothing to
     * correct after a step between equal noise levels) */
    if (use_corrector &&
        unipc_coeffs(s, s->this_order, s->sigmas[pos], rks, b, &hp1, &bh, &at, &c1) != 0.0f) {
        int order = s->this_order;
        if (order == 1)
            rho[0] = 0.5f;
        else
            unipc_rhos(order, rks, b, true, rho);
        const float *m0 = s->hist[s->nhist - 1];
        float c2 = at * hp1, c3 = at * bh;
        for (size_t i = 0; i < s->n; i++) {
            float xt_ = c1 * s->save[i] - c2 * m0[i];
            float corr = 0.0f;
            for (int j = 1; j < order; j++) {
                float d1 = (s->hist[s->nhist - 1 - j][i] - m0[i]) / rks[j - 1];
                corr = j == 1 ? rho[0] * d1 : corr + rho[j - 1] * d1;
            }
            float d1t = mc[i] - m0[i];
            float inner = order > 1 ? corr + rho[order - 1] * d1t : rho[0] * d1t;
            x[i] = xt_ - c3 * inner;
        }
    }
    push_hist(s, mc, s->sigmas[pos], so);
    int this_order = s->c.lower_order_final == 1 ? (so < nts - pos ? so : nts - pos) : so;
    if (this_order > s->lower_order_nums + 1)
        this_order = s->lower_order_nums + 1;
    if (this_order > s->nhist)
        this_order = s->nhist; /* fewer distinct noise levels than steps so far */
    s->this_order = this_order;
    memcpy(s->save, x, s->n * sizeof(float));
    s->have_save = true;
    /* multistep_uni_p_bh_update to pos+1 from pos (a step between equal
     * noise levels leaves the sample as it is) */
    if (unipc_coeffs(s, this_order, s->sigmas[pos + 1], rks, b, &hp1, &bh, &at, &c1) != 0.0f) {
        int order = this_order;
        if (order == 2)
            rho[0] = 0.5f;
        else if (order == 3)
            unipc_rhos(order, rks, b, false, rho);
        const float *m0 = s->hist[s->nhist - 1];
        float c2 = at * hp1, c3 = at * bh;
        for (size_t i = 0; i < s->n; i++) {
            float xt_ = c1 * x[i] - c2 * m0[i];
            if (order == 1) {
                x[i] = xt_ - c3 * 0.0f;
                continue;
            }
            float pred = 0.0f;
            for (int j = 1; j < order; j++) {
                float d1 = (s->hist[s->nhist - 1 - j][i] - m0[i]) / rks[j - 1];
                pred = j == 1 ? rho[0] * d1 : pred + rho[j - 1] * d1;
            }
            x[i] = xt_ - c3 * pred;
        }
    }
    if (s->lower_order_nums < so)
        s->lower_order_nums++;
    return 0;
}

int tsr_sched_step_multistep(tsr_sampler *s, const float *mo, float *x, tsr_rng *rng, float *x0)
{
    int rc = s->p.kind == TSR_SAMPLER_UNIPC ? step_unipc(s, mo, x, x0) : step_dpm(s, mo, x, rng, x0);
    if (rc == 0)
        s->pos++;
    return rc;
}
