/*
 * tests/scheduler/test_comfy_sched.c - ComfyUI's sigma schedules and batch
 * noise against tools/reference/make_comfy_sigma_goldens.py (issue 59).
 *
 * Why these checks: the goldens are ComfyUI's formulas run in torch/scipy,
 * so every (schedule, steps, denoise, beta range) case compares the whole
 * sigma list within 1e-6 relative and the UNet timestep of every sigma
 * exactly; the sampler object is checked to carry the same list, integer
 * timesteps and ComfyUI's noise scaling; the Beta quantile is checked against
 * scipy; ComfyUI's batch noise (one torch.randn over [B, 4, h, w]) against
 * our CPU rng drawing the whole batch from one stream.  Bad inputs must fail
 * with an error, not a list.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "scheduler/scheduler.h"
#include "tessera.h"
#include "test.h"

static cJSON *load(void)
{
    char path[512];
    size_t n = 0;
    char *txt = tsr_test_read_file(tsr_test_path("scheduler/comfy_sigmas.json", path, sizeof path), &n);
    if (!txt)
        return NULL;
    cJSON *j = cJSON_ParseWithLength(txt, n);
    free(txt);
    return j;
}

static int parse_schedule(const char *comfy, tsr_schedule *s)
{
    char name[64];
    snprintf(name, sizeof name, "comfy_%s", comfy);
    return tsr_schedule_parse(name, s);
}

static void cfg_for(const cJSON *c, tsr_sched_config *cfg)
{
    tsr_sched_config_init(cfg);
    cfg->num_train_timesteps = 1000;
    cfg->beta_start = cJSON_GetObjectItem(c, "beta_start")->valuedouble;
    cfg->beta_end = cJSON_GetObjectItem(c, "beta_end")->valuedouble;
    cfg->beta_schedule = TSR_BETA_SCALED_LINEAR;
}

static int test_sigmas(void)
{
    cJSON *j = load();
    ASSERT_TRUE(j != NULL);
    const cJSON *cases = cJSON_GetObjectItem(j, "cases"), *c;
    int ran = 0, bad = 0;
    double worst = 0;
    static float got[1100];
    cJSON_ArrayForEach(c, cases)
    {
        tsr_sched_config cfg;
        cfg_for(c, &cfg);
        tsr_schedule sch;
        const char *name = cJSON_GetObjectItem(c, "schedule")->valuestring;
        ASSERT_OK(parse_schedule(name, &sch));
        int steps = cJSON_GetObjectItem(c, "steps")->valueint;
        double denoise = cJSON_GetObjectItem(c, "denoise")->valuedouble;
        const cJSON *want = cJSON_GetObjectItem(c, "sigmas");
        const cJSON *wts = cJSON_GetObjectItem(c, "timesteps");
        int n = 0;
        ASSERT_OK(tsr_comfy_sigmas(&cfg, sch, steps, denoise, got, 1100, &n));
        ran++;
        if (n != cJSON_GetArraySize(want)) {
            fprintf(stderr, "%s %s steps %d denoise %g: %d sigmas, want %d\n",
                    cJSON_GetObjectItem(c, "model")->valuestring, name, steps, denoise, n,
                    cJSON_GetArraySize(want));
            bad++;
            continue;
        }
        for (int i = 0; i < n; i++) {
            double w = cJSON_GetArrayItem(want, i)->valuedouble;
            double tol = 1e-6 * fabs(w);
            if (w > 0 && fabs(got[i] - w) / w > worst)
                worst = fabs(got[i] - w) / w;
            if (!(fabs(got[i] - w) <= tol)) {
                fprintf(stderr, "%s %s steps %d denoise %g: sigma[%d] %.9g want %.9g\n",
                        cJSON_GetObjectItem(c, "model")->valuestring, name, steps, denoise, i,
                        got[i], w);
                bad++;
                break;
            }
            if (w > 0) {
                int t = -1;
                ASSERT_OK(tsr_comfy_timestep(&cfg, got[i], &t));
                if (t != cJSON_GetArrayItem(wts, i)->valueint) {
                    fprintf(stderr, "%s %s steps %d: timestep[%d] %d want %d\n", name,
                            cJSON_GetObjectItem(c, "model")->valuestring, steps, i, t,
                            cJSON_GetArrayItem(wts, i)->valueint);
                    bad++;
                    break;
                }
            }
        }
    }
    printf("comfy sigmas: %d cases, %d failed, worst relative error %.3g\n", ran, bad, worst);
    cJSON_Delete(j);
    ASSERT_TRUE(ran > 100);
    ASSERT_EQ(bad, 0);
    return 0;
}

static int test_beta_ppf(void)
{
    cJSON *j = load();
    ASSERT_TRUE(j != NULL);
    const cJSON *rows = cJSON_GetObjectItem(j, "beta_ppf"), *r;
    int ran = 0;
    cJSON_ArrayForEach(r, rows)
    {
        double p = cJSON_GetArrayItem(r, 0)->valuedouble, a = cJSON_GetArrayItem(r, 1)->valuedouble;
        double b = cJSON_GetArrayItem(r, 2)->valuedouble, w = cJSON_GetArrayItem(r, 3)->valuedouble;
        double x = tsr_beta_ppf(p, a, b);
        if (!(fabs(x - w) <= 1e-12 + 1e-9 * fabs(w))) {
            fprintf(stderr, "beta ppf(%g, %g, %g) = %.17g, scipy %.17g\n", p, a, b, x, w);
            cJSON_Delete(j);
            return 1;
        }
        /* and the cdf inverts it */
        ASSERT_NEAR(tsr_beta_cdf(x, a, b), p, 1e-12 + 1e-9 * p);
        ran++;
    }
    cJSON_Delete(j);
    ASSERT_TRUE(ran >= 40);
    ASSERT_TRUE(isnan(tsr_beta_ppf(1.5, 0.6, 0.6)));
    ASSERT_TRUE(isnan(tsr_beta_ppf(0.5, 0, 0.6)));
    ASSERT_EQ(tsr_beta_ppf(1.0, 0.6, 0.6), 1.0);
    ASSERT_EQ(tsr_beta_ppf(0.0, 0.6, 0.6), 0.0);
    return 0;
}

/* The sampler object carries ComfyUI's list, nearest-integer timesteps, and
 * k-diffusion's noise scaling. */
static int test_sampler(void)
{
    tsr_sched_config cfg;
    tsr_sched_config_init(&cfg);
    cfg.beta_start = 0.00085;
    cfg.beta_end = 0.012;
    cfg.beta_schedule = TSR_BETA_SCALED_LINEAR;
    cfg.num_train_timesteps = 1000;
    cfg.timestep_spacing = TSR_SPACING_LEADING;
    cfg.steps_offset = 1;
    tsr_sampler_params p = tsr_sampler_params_default();
    p.channels = 4;
    p.height = p.width = 8;
    float want[64];
    tsr_schedule all[] = {TSR_SCHEDULE_COMFY_NORMAL, TSR_SCHEDULE_COMFY_BETA,
                          TSR_SCHEDULE_COMFY_SIMPLE, TSR_SCHEDULE_COMFY_KARRAS};
    tsr_sampler_kind kinds[] = {TSR_SAMPLER_EULER, TSR_SAMPLER_EULER_A, TSR_SAMPLER_DPMPP_2M,
                                TSR_SAMPLER_LMS};
    for (size_t si = 0; si < sizeof all / sizeof all[0]; si++)
        for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
            for (int d = 0; d < 2; d++) {
                p.schedule = all[si];
                p.kind = kinds[ki];
                p.steps = 12;
                p.strength = d ? 0.6 : 1.0;
                int n = 0;
                ASSERT_OK(tsr_comfy_sigmas(&cfg, p.schedule, p.steps, p.strength, want, 64, &n));
                tsr_sampler *s = NULL;
                ASSERT_OK(tsr_sampler_create(&cfg, &p, &s));
                int ns = 0, nt = 0;
                const float *sig = tsr_sampler_sigmas(s, &ns);
                const double *ts = tsr_sampler_timesteps(s, &nt);
                ASSERT_EQ(ns, n);
                ASSERT_EQ(nt, n - 1);
                ASSERT_EQ(tsr_sampler_evals_total(s), n - 1);
                for (int i = 0; i < n; i++)
                    ASSERT_EQ(sig[i], want[i]);
                for (int i = 0; i + 1 < n; i++) {
                    int t = -1;
                    ASSERT_OK(tsr_comfy_timestep(&cfg, want[i], &t));
                    ASSERT_EQ(ts[i], (double)t);
                }
                if (p.kind != TSR_SAMPLER_DPMPP_2M) {
                    float k = tsr_sampler_init_noise_sigma(s);
                    float w = d ? want[0] : sqrtf(1.0f + want[0] * want[0]);
                    ASSERT_EQ(k, w);
                    /* img2img's first noise: the same scale over the image */
                    float x0[256], nz[256], out[256];
                    for (int i = 0; i < 256; i++) {
                        x0[i] = 0.01f * (float)(i % 17);
                        nz[i] = 0.5f - 0.003f * (float)i;
                    }
                    tsr_sampler_add_noise(s, x0, nz, out);
                    for (int i = 0; i < 256; i++)
                        ASSERT_EQ(out[i], x0[i] + nz[i] * w);
                }
                tsr_sampler_free(s);
            }
    /* Heun: two evaluations per step but the last */
    p.kind = TSR_SAMPLER_HEUN;
    p.schedule = TSR_SCHEDULE_COMFY_NORMAL;
    p.steps = 5;
    p.strength = 1;
    tsr_sampler *s = NULL;
    ASSERT_OK(tsr_sampler_create(&cfg, &p, &s));
    ASSERT_EQ(tsr_sampler_evals_total(s), 9);
    tsr_sampler_free(s);
    /* samplers without a sigma-list step refuse the comfy schedules */
    p.kind = TSR_SAMPLER_DDIM;
    ASSERT_EQ(tsr_sampler_create(&cfg, &p, &s), TSR_ERR_UNSUPPORTED);
    p.kind = TSR_SAMPLER_DPM2;
    ASSERT_EQ(tsr_sampler_create(&cfg, &p, &s), TSR_ERR_UNSUPPORTED);
    return 0;
}

static int test_errors(void)
{
    tsr_sched_config cfg;
    tsr_sched_config_init(&cfg);
    cfg.beta_schedule = TSR_BETA_SCALED_LINEAR;
    float out[16];
    int n = 0;
    ASSERT_EQ(tsr_comfy_sigmas(&cfg, TSR_SCHEDULE_KARRAS, 5, 1, out, 16, &n), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_comfy_sigmas(&cfg, TSR_SCHEDULE_COMFY_NORMAL, 0, 1, out, 16, &n), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_comfy_sigmas(&cfg, TSR_SCHEDULE_COMFY_NORMAL, 1001, 1, out, 16, &n),
              TSR_ERR_INVALID);
    ASSERT_EQ(tsr_comfy_sigmas(&cfg, TSR_SCHEDULE_COMFY_NORMAL, 5, 0, out, 16, &n), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_comfy_sigmas(&cfg, TSR_SCHEDULE_COMFY_NORMAL, 5, 1.5, out, 16, &n),
              TSR_ERR_INVALID);
    ASSERT_EQ(tsr_comfy_sigmas(&cfg, TSR_SCHEDULE_COMFY_NORMAL, 1000, 0.01, out, 16, &n),
              TSR_ERR_INVALID); /* 100,000 steps */
    ASSERT_EQ(tsr_comfy_sigmas(&cfg, TSR_SCHEDULE_COMFY_NORMAL, 20, 1, out, 16, &n), TSR_ERR_INVALID);
    ASSERT_EQ(n, 0);
    cfg.beta_schedule = TSR_BETA_LINEAR;
    ASSERT_EQ(tsr_comfy_sigmas(&cfg, TSR_SCHEDULE_COMFY_NORMAL, 5, 1, out, 16, &n),
              TSR_ERR_UNSUPPORTED);
    ASSERT_EQ(tsr_comfy_timestep(&cfg, 1.0, &n), TSR_ERR_UNSUPPORTED);
    cfg.beta_schedule = TSR_BETA_SCALED_LINEAR;
    cfg.rescale_betas_zero_snr = 1;
    ASSERT_EQ(tsr_comfy_sigmas(&cfg, TSR_SCHEDULE_COMFY_BETA, 5, 1, out, 16, &n),
              TSR_ERR_UNSUPPORTED);
    tsr_schedule s;
    ASSERT_EQ(tsr_schedule_parse("comfy_nope", &s), TSR_ERR_INVALID);
    ASSERT_OK(tsr_schedule_parse("comfy_ddim_uniform", &s));
    ASSERT_EQ(s, TSR_SCHEDULE_COMFY_DDIM_UNIFORM);
    ASSERT_TRUE(tsr_schedule_is_comfy(s));
    ASSERT_TRUE(!tsr_schedule_is_comfy(TSR_SCHEDULE_SGM_UNIFORM));
    return 0;
}

/* ComfyUI: torch.manual_seed(seed); torch.randn([B, 4, h, w]) on the CPU:
 * image i's noise is slice i of one stream.  Our CPU rng drawing B * 4*h*w
 * at once from the seed gives the same bits; drawing image i alone from
 * seed (image 0) matches slice 0 only. */
static int test_batch_noise(void)
{
    cJSON *j = load();
    ASSERT_TRUE(j != NULL);
    const cJSON *nz = cJSON_GetObjectItem(j, "noise");
    uint64_t seed = (uint64_t)cJSON_GetObjectItem(nz, "seed")->valuedouble;
    const cJSON *shape = cJSON_GetObjectItem(nz, "shape"), *data = cJSON_GetObjectItem(nz, "data");
    size_t total = 1;
    for (int i = 0; i < 4; i++)
        total *= (size_t)cJSON_GetArrayItem(shape, i)->valueint;
    int B = cJSON_GetArrayItem(shape, 0)->valueint;
    size_t per = total / (size_t)B;
    ASSERT_EQ((size_t)cJSON_GetArraySize(data), total);
    float *got = malloc(total * sizeof(float)), *one = malloc(per * sizeof(float));
    ASSERT_TRUE(got && one);
    tsr_rng rng;
    tsr_rng_init(&rng, TSR_RNG_CPU, seed);
    ASSERT_OK(tsr_rng_randn(&rng, got, total));
    size_t mism = 0;
    for (size_t i = 0; i < total; i++)
        if (got[i] != (float)cJSON_GetArrayItem(data, (int)i)->valuedouble)
            mism++;
    tsr_rng_init(&rng, TSR_RNG_CPU, seed);
    ASSERT_OK(tsr_rng_randn(&rng, one, per));
    size_t mism0 = 0;
    for (size_t i = 0; i < per; i++)
        if (one[i] != (float)cJSON_GetArrayItem(data, (int)i)->valuedouble)
            mism0++;
    /* the engine's per-image draw: latent i of one randn over i + 1, NHWC */
    size_t mism_slice = 0;
    int C = cJSON_GetArrayItem(shape, 1)->valueint, H = cJSON_GetArrayItem(shape, 2)->valueint,
        W = cJSON_GetArrayItem(shape, 3)->valueint;
    for (int b = 0; b < B; b++) {
        tsr_rng_init(&rng, TSR_RNG_CPU, seed);
        ASSERT_OK(tsr_rng_randn_nhwc_slice(&rng, b, C, H, W, one));
        for (int ch = 0; ch < C; ch++)
            for (int p = 0; p < H * W; p++) {
                size_t k = (size_t)b * per + (size_t)ch * (size_t)(H * W) + (size_t)p;
                if (one[(size_t)p * (size_t)C + (size_t)ch] !=
                    (float)cJSON_GetArrayItem(data, (int)k)->valuedouble)
                    mism_slice++;
            }
    }
    tsr_rng_init(&rng, TSR_RNG_CPU, seed);
    ASSERT_EQ(tsr_rng_randn_nhwc_slice(&rng, -1, C, H, W, one), TSR_ERR_RANGE);
    ASSERT_EQ(tsr_rng_randn_nhwc_slice(&rng, 4096, C, H, W, one), TSR_ERR_RANGE);
    printf("batch noise: %zu of %zu differ (whole batch), %zu of %zu (image 0 alone), %zu "
           "(each image as a slice)\n",
           mism, total, mism0, per, mism_slice);
    ASSERT_EQ(mism_slice, 0);
    free(got);
    free(one);
    cJSON_Delete(j);
    ASSERT_EQ(mism, 0);
    ASSERT_EQ(mism0, 0);
    return 0;
}

static const tsr_test_entry k_tests[] = {
    {"sigmas", test_sigmas},
    {"beta_ppf", test_beta_ppf},
    {"sampler", test_sampler},
    {"errors", test_errors},
    {"batch_noise", test_batch_noise},
};

TSR_TEST_TABLE_MAIN(k_tests)
