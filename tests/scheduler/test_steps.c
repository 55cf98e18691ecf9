/*
 * tests/scheduler/test_steps.c - every sampler at every step count the CLI
 * allows (1..1000).
 *
 * Why: diffusers' own schedules break at the ends of that range (DDIM, PNDM
 * and DDPM index alphas_cumprod at timestep 1000 with "leading" spacing and
 * steps_offset 1; DPM-Solver++ and UniPC repeat a noise level and produce
 * NaN; LMS too; LCM refuses more steps than original_inference_steps; PRK
 * needs 4 steps).  Tessera takes every count, follows diffusers' timesteps
 * and sigmas wherever diffusers builds them, and stays finite where
 * diffusers does not (docs/samplers.md).  Two tests:
 *   steps NAME   the 999- and 1000-step goldens of one sampler
 *                (tests/data/scheduler/steps.*): timesteps and sigmas as
 *                diffusers builds them, the final sample where diffusers'
 *                run is finite, finite output everywhere.  1 and 2 steps are
 *                ordinary full-sequence goldens (test_scheduler.c).
 *   step_counts  every sampler x schedule x config x strength at 1..5, 999
 *                and 1000 steps: it is created, runs and stays finite.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/json.h"
#include "scheduler/scheduler.h"
#include "sched_test.h"
#include "test.h"
#include "tessera.h"

static const char *jstr(const cJSON *c, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(c, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Run a sampler to the end on latent x with the goldens' fake model; the
 * timesteps given to the model are `ts` when non-NULL (diffusers'),
 * Tessera's own otherwise.  Fails on a non-finite sample or x0. */
static int run_to_end(const char *what, tsr_sampler *s, float *x, tsr_rng *rng, const double *ts)
{
    size_t n = tsr_sampler_numel(s);
    float *in = malloc(n * 4), *mo = malloc(n * 4), *x0 = malloc(n * 4);
    int rc = 1, k = 0;
    if (!in || !mo || !x0)
        goto out;
    for (; !tsr_sampler_done(s); k++) {
        double t = ts ? ts[k] : tsr_sampler_timestep(s);
        tsr_sampler_scale_input(s, x, in);
        tsr_sched_test_fake_model(in, t, n, mo);
        if (tsr_sampler_step(s, mo, x, rng, x0) < 0) {
            fprintf(stderr, "%s: step %d: %s\n", what, k, tsr_last_error());
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            if (!isfinite(x[i]) || !isfinite(x0[i])) {
                fprintf(stderr, "%s: non-finite after evaluation %d of %d (x %g, x0 %g)\n", what,
                        k + 1, tsr_sampler_evals_total(s), x[i], x0[i]);
                goto out;
            }
    }
    rc = k == tsr_sampler_evals_total(s) ? 0 : 1;
    if (rc)
        fprintf(stderr, "%s: %d evaluations, evals_total %d\n", what, k, tsr_sampler_evals_total(s));
out:
    free(in);
    free(mo);
    free(x0);
    return rc;
}

static int run_range(const cJSON *c, tsr_safetensors *st)
{
    const char *name = jstr(c, "name");
    const char *status = jstr(c, "diffusers");
    tsr_sched_config cfg;
    if (tsr_sched_config_from_json(cJSON_GetObjectItem(c, "config"), name, &cfg) < 0) {
        fprintf(stderr, "%s: config: %s\n", name, tsr_last_error());
        return 1;
    }
    tsr_sampler_params p = tsr_sampler_params_default();
    p.schedule = TSR_SCHEDULE_DEFAULT;
    if (tsr_sampler_parse(jstr(c, "sampler"), &p.kind, &p.schedule) < 0 ||
        tsr_schedule_parse(jstr(c, "schedule"), &p.schedule) < 0)
        return 1;
    p.steps = cJSON_GetObjectItem(c, "steps")->valueint;
    const cJSON *shape = cJSON_GetObjectItem(c, "shape");
    p.channels = cJSON_GetArrayItem(shape, 1)->valueint;
    p.height = cJSON_GetArrayItem(shape, 2)->valueint;
    p.width = cJSON_GetArrayItem(shape, 3)->valueint;
    p.nhwc = false;
    uint64_t seed = (uint64_t)cJSON_GetObjectItem(c, "seed")->valuedouble;

    char key[256];
    size_t nts = 0, nsig = 0, nfin = 0;
    snprintf(key, sizeof key, "%s.timesteps", name);
    const float *tsw = tsr_sched_test_f32(st, key, &nts);
    snprintf(key, sizeof key, "%s.sigmas", name);
    const float *sigw = tsr_sched_test_f32(st, key, &nsig);
    snprintf(key, sizeof key, "%s.final", name);
    const float *finw = tsr_sched_test_f32(st, key, &nfin);

    tsr_sampler *s = NULL;
    if (tsr_sampler_create(&cfg, &p, &s) < 0) {
        fprintf(stderr, "%s: create: %s\n", name, tsr_last_error());
        return 1;
    }
    int rc = 1;
    size_t n = tsr_sampler_numel(s);
    float *x = malloc(n * 4);
    double *ts = NULL;
    if (!x)
        goto out;
    int ntc = 0;
    const double *tsc = tsr_sampler_timesteps(s, &ntc);
    if (tsw) {
        if ((size_t)ntc != nts) {
            fprintf(stderr, "%s: %d timesteps, diffusers has %zu\n", name, ntc, nts);
            goto out;
        }
        for (size_t i = 0; i < nts; i++)
            if (fabs(tsc[i] - tsw[i]) > 1e-4 * fmax(1.0, fabs(tsw[i]))) {
                fprintf(stderr, "%s: timestep[%zu] %.9g vs %.9g\n", name, i, tsc[i], tsw[i]);
                goto out;
            }
        /* the model gets diffusers' timesteps (fractional ones differ by
         * ~1e-5, checked above), as in the full-sequence goldens */
        ts = malloc(nts * sizeof(double));
        if (!ts)
            goto out;
        for (size_t i = 0; i < nts; i++)
            ts[i] = tsw[i];
    }
    if (sigw) {
        int nsc = 0;
        const float *sc = tsr_sampler_sigmas(s, &nsc);
        if ((size_t)nsc != nsig || tsr_sched_test_close("sigmas", sc, sigw, NULL, nsig, 1e-6)) {
            fprintf(stderr, "%s: sigmas differ (%d vs %zu)\n", name, nsc, nsig);
            goto out;
        }
    }
    tsr_rng rng;
    tsr_rng_init(&rng, TSR_RNG_CPU, seed);
    if (tsr_rng_randn(&rng, x, n) < 0)
        goto out;
    tsr_sampler_scale_noise(s, x);
    if (run_to_end(name, s, x, &rng, ts))
        goto out;
    if (finw) {
        char what[300];
        snprintf(what, sizeof what, "%s final sample", name);
        /* ~1000 steps add up the ulp-level differences every step has with
         * torch (its MKL sqrt, its log/exp): 1e-6..1e-5 of the final
         * magnitude, ~1e-5 with per-step noise, 5e-5 for 3M SDE whose
         * third-order coefficients cancel at h ~ 0.005 */
        double tol = p.kind == TSR_SAMPLER_DPMPP_3M_SDE ? 1e-4 : 2e-5;
        if (nfin != n || tsr_sched_test_close(what, x, finw, NULL, n, tol))
            goto out;
    } else if (strcmp(status, "ok") == 0) {
        fprintf(stderr, "%s: golden final sample missing\n", name);
        goto out;
    }
    if (getenv("TSR_SCHED_VERBOSE"))
        fprintf(stderr, "%s: ok (diffusers: %s; checked%s%s%s)\n", name, status,
                tsw ? " timesteps" : "", sigw ? " sigmas" : "", finw ? " final" : "");
    rc = 0;
out:
    free(x);
    free(ts);
    tsr_sampler_free(s);
    return rc;
}

int tsr_sched_test_steps(const char *sampler)
{
    char path[512];
    tsr_safetensors *st = NULL;
    cJSON *root = NULL;
    ASSERT_OK(tsr_st_open(tsr_test_path("scheduler/steps.safetensors", path, sizeof path), &st));
    ASSERT_OK(tsr_json_load_file(tsr_test_path("scheduler/steps.json", path, sizeof path), &root));
    int ran = 0, failed = 0;
    for (const cJSON *c = cJSON_GetObjectItem(root, "runs")->child; c; c = c->next) {
        if (strcmp(jstr(c, "sampler"), sampler) != 0)
            continue;
        ran++;
        if (run_range(c, st)) {
            failed++;
            fprintf(stderr, "FAILED %s\n", jstr(c, "name"));
        }
    }
    cJSON_Delete(root);
    tsr_st_close(st);
    printf("%s: %d step-range runs, %d failed\n", sampler, ran, failed);
    ASSERT_TRUE(ran > 0);
    ASSERT_EQ(failed, 0);
    return 0;
}

/* ------------------------------------------------------- every step count */

static const char *const k_configs[] = {
    /* the demo model's: leading, steps_offset 1, no skip_prk_steps (PRK) */
    "{\"_class_name\":\"DDIMScheduler\",\"beta_start\":0.00085,\"beta_end\":0.012,"
    "\"beta_schedule\":\"scaled_linear\",\"set_alpha_to_one\":false,\"steps_offset\":1,"
    "\"clip_sample\":false,\"timestep_spacing\":\"leading\"}",
    /* SD 1.5's: each class's own spacing */
    "{\"_class_name\":\"PNDMScheduler\",\"beta_start\":0.00085,\"beta_end\":0.012,"
    "\"beta_schedule\":\"scaled_linear\",\"set_alpha_to_one\":false,\"skip_prk_steps\":true,"
    "\"steps_offset\":1,\"clip_sample\":false}",
    /* SD-Turbo's: trailing */
    "{\"_class_name\":\"EulerAncestralDiscreteScheduler\",\"beta_start\":0.00085,"
    "\"beta_end\":0.012,\"beta_schedule\":\"scaled_linear\",\"steps_offset\":1,"
    "\"timestep_spacing\":\"trailing\"}",
    /* linspace everywhere, linear betas */
    "{\"beta_schedule\":\"linear\",\"timestep_spacing\":\"linspace\"}",
    /* zero terminal SNR, v-prediction, trailing */
    "{\"beta_start\":0.00085,\"beta_end\":0.012,\"beta_schedule\":\"scaled_linear\","
    "\"prediction_type\":\"v_prediction\",\"rescale_betas_zero_snr\":true,"
    "\"timestep_spacing\":\"trailing\",\"set_alpha_to_one\":false}",
};

int tsr_sched_test_step_counts(void)
{
    static const int counts[] = {1, 2, 3, 4, 5, 999, 1000};
    static const double strengths[] = {1.0, 0.5};
    int runs = 0;
    for (size_t ci = 0; ci < sizeof k_configs / sizeof *k_configs; ci++) {
        cJSON *j = NULL;
        tsr_sched_config cfg;
        ASSERT_OK(tsr_json_parse(k_configs[ci], strlen(k_configs[ci]), "config", &j));
        ASSERT_OK(tsr_sched_config_from_json(j, "config", &cfg));
        cJSON_Delete(j);
        bool zsnr = cfg.rescale_betas_zero_snr == 1;
        for (int k = 0; k < TSR_SAMPLER_COUNT; k++) {
            /* zero SNR's infinite first sigma: only the samplers diffusers
             * runs with it (the others give inf/NaN in diffusers too) */
            if (zsnr && k != TSR_SAMPLER_EULER && k != TSR_SAMPLER_EULER_A &&
                k != TSR_SAMPLER_DDIM && k != TSR_SAMPLER_DDPM && k != TSR_SAMPLER_LCM &&
                k != TSR_SAMPLER_DPMPP_2S_A)
                continue;
            for (int sch = 0; sch < TSR_SCHEDULE_COUNT; sch++) {
                if (!tsr_sampler_supports_schedule((tsr_sampler_kind)k, (tsr_schedule)sch))
                    continue;
                for (size_t ni = 0; ni < sizeof counts / sizeof *counts; ni++) {
                    for (size_t si = 0; si < 2; si++) {
                        tsr_sampler_params p = tsr_sampler_params_default();
                        p.kind = (tsr_sampler_kind)k;
                        p.schedule = (tsr_schedule)sch;
                        p.steps = counts[ni];
                        p.strength = strengths[si];
                        p.channels = 4;
                        p.height = 2;
                        p.width = 2;
                        char what[160];
                        snprintf(what, sizeof what, "config %zu %s %s %d steps strength %g", ci,
                                 tsr_sampler_name(p.kind), tsr_schedule_name(p.schedule), p.steps,
                                 p.strength);
                        tsr_sampler *s = NULL;
                        int rc = tsr_sampler_create(&cfg, &p, &s);
                        bool comfy = tsr_schedule_is_comfy(p.schedule);
                        /* ComfyUI's tables are its scaled_linear betas only,
                         * without zero terminal SNR */
                        if (comfy && (cfg.beta_schedule != TSR_BETA_SCALED_LINEAR ||
                                      cfg.rescale_betas_zero_snr == 1)) {
                            if (rc != TSR_ERR_UNSUPPORTED)
                                TSR_FAIL("%s: got %d, want TSR_ERR_UNSUPPORTED", what, rc);
                            continue;
                        }
                        /* ComfyUI's denoise runs the last steps of a longer
                         * schedule: 1 step at 0.5 is one step of 2 */
                        if (!comfy && p.strength < 1 && p.steps == 1) {
                            /* int(1 * 0.5) = 0 steps to run: refused, as diffusers does */
                            if (rc != TSR_ERR_UNSUPPORTED)
                                TSR_FAIL("%s: got %d, want TSR_ERR_UNSUPPORTED", what, rc);
                            continue;
                        }
                        if (rc < 0)
                            TSR_FAIL("%s: create: %s", what, tsr_last_error());
                        float x[16];
                        tsr_rng rng;
                        tsr_rng_init(&rng, TSR_RNG_CPU, 5 + (uint64_t)runs);
                        if (tsr_rng_randn(&rng, x, 16) < 0)
                            TSR_FAIL("%s: randn", what);
                        if (p.strength < 1) {
                            float img[16];
                            for (int i = 0; i < 16; i++)
                                img[i] = 0.5f * cosf((float)i);
                            tsr_sampler_add_noise(s, img, x, x);
                        } else {
                            tsr_sampler_scale_noise(s, x);
                        }
                        int bad = run_to_end(what, s, x, &rng, NULL);
                        bool pndm = k == TSR_SAMPLER_PNDM || k == TSR_SAMPLER_PLMS;
                        /* ComfyUI's ddim_uniform and beta may give more or
                         * fewer steps than asked (tests/scheduler/test_comfy_sched.c) */
                        bool exact = !comfy || (p.schedule != TSR_SCHEDULE_COMFY_DDIM_UNIFORM &&
                                                p.schedule != TSR_SCHEDULE_COMFY_BETA);
                        if (!bad && (p.strength == 1 || comfy) && !pndm && exact &&
                            tsr_sampler_steps_total(s) != p.steps) {
                            fprintf(stderr, "%s: %d user-visible steps\n", what,
                                    tsr_sampler_steps_total(s));
                            bad = 1;
                        }
                        tsr_sampler_free(s);
                        if (bad)
                            return 1;
                        runs++;
                    }
                }
            }
        }
    }
    printf("%d runs\n", runs);
    return 0;
}
