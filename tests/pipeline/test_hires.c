/*
 * tests/pipeline/test_hires.c - the hires fix and A1111's inpainting fill
 * modes (pipeline/hires.c, pipeline/upscale.c).
 *
 * Why these cases: the latent upscalers and the pixel fill are checked
 * against what torch and Pillow compute (goldens by
 * tools/reference/make_upscale_refs.py); the hires pass as a whole is
 * checked by composing it by hand through the public API - txt2img at the
 * base size, Pillow's Lanczos resize, img2img with A1111's step arithmetic
 * - which must give the same bytes as one hires image; the latent path by
 * what can be seen from outside (size, progress over both passes, the
 * infotext, UNet calls shared with a plain image of the second pass's
 * size, and the same bytes alone or in company) and against diffusers'
 * pipelines composed as A1111 runs the pass (diffusers_latent; references
 * by tools/reference/make_hires_refs.py).  Tiny models keep it fast.
 */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/hires.h"
#include "tessera.h"
#include "pipeline_test.h"
#include "test.h"

static tsr_image_params base(const char *sampler)
{
    tsr_image_params p;
    tsr_image_params_init(&p);
    p.prompt = "a red cat";
    p.width = p.height = 64;
    p.steps = 4;
    p.seed = 77;
    p.sampler = sampler;
    return p;
}

/* ---- the latent upscalers against torch ---- */

static float *read_f32(const char *rel, size_t n)
{
    char path[512];
    size_t size = 0;
    float *v = tsr_test_read_file(tsr_test_path(rel, path, sizeof path), &size);
    if (v && size != n * sizeof(float)) {
        free(v);
        return NULL;
    }
    return v;
}

static int test_upscale_modes(void)
{
    cJSON *j = pt_load_json("pipeline/hires/upscale.json");
    ASSERT_TRUE(j);
    const int C = 4, H = 5, W = 7;
    float *in = read_f32("pipeline/hires/upscale_in.f32", (size_t)C * H * W);
    ASSERT_TRUE(in);
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases"))
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *mode = cJSON_GetObjectItem(c, "mode")->valuestring;
        const int oh = cJSON_GetObjectItem(c, "h")->valueint, ow = cJSON_GetObjectItem(c, "w")->valueint;
        tsr_upscale_mode m = TSR_UPSCALE_BILINEAR;
        bool aa = strstr(mode, "_aa") != NULL;
        if (!strcmp(mode, "nearest"))
            m = TSR_UPSCALE_NEAREST;
        else if (!strcmp(mode, "nearest_exact"))
            m = TSR_UPSCALE_NEAREST_EXACT;
        else if (!strncmp(mode, "bicubic", 7))
            m = TSR_UPSCALE_BICUBIC;
        char rel[256];
        snprintf(rel, sizeof rel, "pipeline/hires/upscale_%s.f32", name);
        const size_t no = (size_t)oh * ow * C;
        float *want = read_f32(rel, no), *got = malloc(no * sizeof(float));
        ASSERT_TRUE(want && got);
        tsr_latent_upscale(in, H, W, C, got, oh, ow, m, aa);
        if (tsr_test_check_close(name, got, want, no, 2e-6)) {
            free(want);
            free(got);
            TSR_FAIL("upscale %s differs from torch", name);
        }
        free(want);
        free(got);
        n++;
    }
    ASSERT_EQ(n, 24);
    free(in);
    cJSON_Delete(j);
    /* A1111's names map to those modes */
    tsr_upscaler_kind k;
    tsr_upscale_mode m;
    bool aa;
    ASSERT_OK(tsr_hires_upscaler_parse("Latent (bicubic antialiased)", &k, &m, &aa));
    ASSERT_TRUE(k == TSR_UPSCALER_LATENT && m == TSR_UPSCALE_BICUBIC && aa);
    ASSERT_OK(tsr_hires_upscaler_parse(NULL, &k, &m, &aa));
    ASSERT_TRUE(k == TSR_UPSCALER_LATENT && m == TSR_UPSCALE_BILINEAR && !aa);
    ASSERT_OK(tsr_hires_upscaler_parse("None", &k, &m, &aa));
    ASSERT_TRUE(k == TSR_UPSCALER_LANCZOS);
    ASSERT_TRUE(tsr_hires_upscaler_parse("ESRGAN_4x", &k, &m, &aa) < 0);
    return 0;
}

/* ---- A1111's masking.fill against Pillow ---- */

static int test_fill_pixels(void)
{
    uint8_t *img, *mask, *want;
    int w, h, w2, h2, w3, h3;
    if (pt_read_png("pipeline/hires/fill_image.png", 3, &img, &w, &h) ||
        pt_read_png("pipeline/hires/fill_mask.png", 1, &mask, &w2, &h2) ||
        pt_read_png("pipeline/hires/fill_out.png", 3, &want, &w3, &h3))
        return 1;
    ASSERT_TRUE(w == w2 && w == w3 && h == h2 && h == h3);
    ASSERT_OK(tsr_mask_fill(img, mask, w, h));
    int bad = 0, worst = 0;
    for (int i = 0; i < w * h * 3; i++) {
        int d = abs((int)img[i] - (int)want[i]);
        bad += d != 0;
        worst = d > worst ? d : worst;
    }
    if (bad)
        TSR_FAIL("fill: %d of %d values differ from Pillow's (worst by %d)", bad, w * h * 3,
                 worst);
    free(img);
    free(mask);
    free(want);
    return 0;
}

/* The latent fills' arithmetic: latent * (1 - m) (+ the seed's first draw
 * * m), exactly; the seed's draw is the one a txt2img image starts from. */
static int test_fill_latent(void)
{
    const int lh = 3, lw = 5, C = 4;
    const size_t n = (size_t)lh * lw * C;
    float mask[15], lat[60], out2[60], out3[60], noise[60];
    for (int i = 0; i < lh * lw; i++)
        mask[i] = (i % 3 == 0) ? 1.0f : 0.0f;
    for (size_t i = 0; i < n; i++)
        lat[i] = (float)i * 0.25f - 3.0f;
    memcpy(out2, lat, sizeof lat);
    memcpy(out3, lat, sizeof lat);
    ASSERT_OK(tsr_latent_fill(2, mask, lh, lw, C, TSR_RNG_CPU, 1234, out2));
    ASSERT_OK(tsr_latent_fill(3, mask, lh, lw, C, TSR_RNG_CPU, 1234, out3));
    tsr_rng r;
    tsr_rng_init(&r, TSR_RNG_CPU, 1234);
    ASSERT_OK(tsr_rng_randn_nhwc(&r, C, lh, lw, noise));
    int changed = 0;
    for (size_t i = 0; i < n; i++) {
        const float m = mask[i / C];
        ASSERT_TRUE(out3[i] == (m ? 0.0f : lat[i]));
        ASSERT_TRUE(out2[i] == (m ? noise[i] : lat[i]));
        changed += m && out2[i] != lat[i];
    }
    ASSERT_EQ(changed, 5 * C);
    /* modes 0 and 1 leave the latents alone */
    float same[60];
    memcpy(same, lat, sizeof lat);
    ASSERT_OK(tsr_latent_fill(0, mask, lh, lw, C, TSR_RNG_CPU, 1, same));
    ASSERT_OK(tsr_latent_fill(1, mask, lh, lw, C, TSR_RNG_CPU, 1, same));
    ASSERT_TRUE(memcmp(same, lat, sizeof lat) == 0);
    return 0;
}

/* Inpainting with each fill mode runs; 0, 2 and 3 each change the image
 * from "original", and the same call twice gives the same bytes. */
static int test_fill_modes(void)
{
    tsr_engine *e;
    if (pt_open_model("models/sd1", NULL, 2, &e))
        return 1;
    static uint8_t rgb[64 * 64 * 3], gray[64 * 64];
    for (int i = 0; i < 64 * 64; i++) {
        rgb[3 * i] = (uint8_t)(i * 7);
        rgb[3 * i + 1] = (uint8_t)(i / 64 * 4);
        rgb[3 * i + 2] = 200;
        gray[i] = (i % 64 > 16 && i % 64 < 48 && i / 64 > 16 && i / 64 < 48) ? 255 : 0;
    }
    tsr_result r[4];
    for (int mode = 0; mode < 4; mode++) {
        tsr_image_params p = base("euler");
        p.init_image = rgb;
        p.mask = gray;
        p.strength = 0.8;
        p.mask_fill = mode;
        if (pt_run(e, &p, 1, &r[mode], NULL))
            return 1;
    }
    for (int mode = 0; mode < 4; mode++)
        if (mode != 1)
            ASSERT_TRUE(memcmp(r[mode].rgb, r[1].rgb, 64 * 64 * 3) != 0);
    ASSERT_TRUE(memcmp(r[2].rgb, r[3].rgb, 64 * 64 * 3) != 0);
    tsr_result again;
    tsr_image_params p = base("euler");
    p.init_image = rgb;
    p.mask = gray;
    p.strength = 0.8;
    p.mask_fill = 2;
    if (pt_run(e, &p, 1, &again, NULL))
        return 1;
    ASSERT_TRUE(memcmp(again.rgb, r[2].rgb, 64 * 64 * 3) == 0);
    tsr_result_free(&again);
    for (int mode = 0; mode < 4; mode++)
        tsr_result_free(&r[mode]);
    tsr_engine_close(e);
    return 0;
}

/* ---- the hires pass, composed by hand ---- */

/* One hires image with the Lanczos upscaler equals txt2img, Pillow's
 * Lanczos, and img2img of N = int(K / min(s, 0.999)) steps at a strength
 * that leaves K of them. */
static int by_hand(tsr_engine *e, const char *sampler, int steps, int k, double s)
{
    tsr_image_params p = base(sampler);
    p.steps = steps;
    p.hires_scale = 2;
    p.hires_steps = k;
    p.hires_strength = s;
    p.hires_upscaler = "Lanczos";
    tsr_result hires;
    if (pt_run(e, &p, 1, &hires, NULL))
        return 1;
    ASSERT_EQ(hires.width, 128);
    ASSERT_EQ(hires.height, 128);

    tsr_image_params first = base(sampler);
    first.steps = steps;
    tsr_result r1;
    if (pt_run(e, &first, 1, &r1, NULL))
        return 1;
    uint8_t *big = NULL;
    ASSERT_OK(tsr_image_resample(r1.rgb, 64, 64, 3, 128, 128, 0, TSR_RESAMPLE_LANCZOS, &big));
    const int kk = k ? k : steps;
    const int n = (int)(kk / (s < 0.999 ? s : 0.999));
    tsr_image_params q = base(sampler);
    q.width = q.height = 128;
    q.steps = n;
    q.strength = (kk + 0.5) / n > 1 ? 1 : (kk + 0.5) / n;
    q.init_image = big;
    tsr_result r2;
    if (pt_run(e, &q, 1, &r2, NULL))
        return 1;
    if (memcmp(r2.rgb, hires.rgb, 128 * 128 * 3) != 0)
        TSR_FAIL("%s, %d steps, hires %d at %g: the hires image differs from the composition",
                 sampler, steps, k, s);
    /* the infotext is the first pass's, with A1111's hires fields */
    char want[256];
    snprintf(want, sizeof want, "Size: 64x64");
    ASSERT_TRUE(strstr(hires.parameters, want));
    ASSERT_TRUE(strstr(hires.parameters, "Hires upscale: 2, "));
    ASSERT_TRUE(strstr(hires.parameters, "Hires upscaler: Lanczos"));
    snprintf(want, sizeof want, "Denoising strength: %g", s);
    ASSERT_TRUE(strstr(hires.parameters, want));
    ASSERT_TRUE((k != 0) == (strstr(hires.parameters, "Hires steps: ") != NULL));
    free(big);
    tsr_result_free(&hires);
    tsr_result_free(&r1);
    tsr_result_free(&r2);
    return 0;
}

static int test_lanczos_by_hand(void)
{
    tsr_engine *e;
    if (pt_open_model("models/sd1", NULL, 2, &e))
        return 1;
    /* K of N: 3 of int(3 / 0.55) = 5; all steps (s = 1: N = int(4 / 0.999) = 4);
     * an ancestral sampler (its draws continue the fresh stream) */
    if (by_hand(e, "euler", 4, 3, 0.55) || by_hand(e, "euler", 4, 0, 1.0) ||
        by_hand(e, "euler_a", 3, 2, 0.7))
        return 1;
    tsr_engine_close(e);
    return 0;
}

typedef struct progress {
    int id, calls, last_step, steps, bad;
} progress;

static void on_step(void *user, const tsr_step_info *info)
{
    progress *pr = user;
    if (info->image != pr->id || info->state != TSR_IMAGE_DENOISING)
        return;
    pr->calls++;
    if (info->step < pr->last_step || (pr->steps && info->steps != pr->steps))
        pr->bad++;
    pr->last_step = info->step;
    pr->steps = info->steps;
}

/* The latent path: size, progress over both passes, its second pass in the
 * same UNet calls as a plain image of that size, the same bytes alone. */
static int test_latent_pass(void)
{
    tsr_engine *e;
    if (pt_open_model("models/sd1", NULL, 2, &e))
        return 1;
    tsr_image_params p = base("euler_a");
    p.hires_scale = 2;
    p.hires_steps = 3;
    p.hires_strength = 0.5;
    p.hires_upscaler = "Latent (bicubic)";
    tsr_image_params q = base("euler");
    q.width = q.height = 128;
    q.steps = 8;
    q.seed = 5;

    tsr_batch *b;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    progress pr = {0};
    tsr_batch_set_callback(b, on_step, &pr, TSR_PREVIEW_NONE);
    ASSERT_OK(tsr_batch_submit(b, &p, &pr.id));
    tsr_image_info info;
    ASSERT_OK(tsr_batch_image_info(b, pr.id, &info));
    ASSERT_EQ(info.steps, 4 + 3);
    int id2;
    ASSERT_OK(tsr_batch_submit(b, &q, &id2));
    while (tsr_batch_active(b) > 0)
        ASSERT_OK(tsr_batch_step(b, NULL));
    tsr_batch_stats st;
    tsr_batch_stats_get(b, &st);
    tsr_result together, other;
    ASSERT_OK(tsr_batch_take(b, pr.id, &together));
    ASSERT_OK(tsr_batch_take(b, id2, &other));
    tsr_batch_free(b);
    ASSERT_EQ(together.status, TSR_OK);
    ASSERT_EQ(together.width, 128);
    ASSERT_EQ(pr.calls, 7);
    ASSERT_EQ(pr.last_step, 7);
    ASSERT_EQ(pr.steps, 7);
    ASSERT_EQ(pr.bad, 0);
    /* 4 + 3 + 8 evaluations in fewer calls: the second pass shared some */
    ASSERT_EQ(st.images_evaluated, 15);
    ASSERT_TRUE(st.unet_calls < 15);
    ASSERT_TRUE(strstr(together.parameters, "Size: 64x64"));
    ASSERT_TRUE(strstr(together.parameters,
                       "Denoising strength: 0.5, RNG: CPU, Hires upscale: 2, Hires steps: 3, "
                       "Hires upscaler: Latent (bicubic), Version"));
    tsr_result alone;
    if (pt_run(e, &p, 1, &alone, NULL))
        return 1;
    ASSERT_TRUE(memcmp(alone.rgb, together.rgb, 128 * 128 * 3) == 0);
    /* and not the image without the upscale mode's difference */
    p.hires_upscaler = "Latent (nearest)";
    tsr_result nearest;
    if (pt_run(e, &p, 1, &nearest, NULL))
        return 1;
    ASSERT_TRUE(memcmp(nearest.rgb, together.rgb, 128 * 128 * 3) != 0);
    tsr_result_free(&together);
    tsr_result_free(&other);
    tsr_result_free(&alone);
    tsr_result_free(&nearest);
    tsr_engine_close(e);
    return 0;
}

/* The latent path against diffusers' own pipelines composed as A1111's
 * hires pass runs (tools/reference/make_hires_refs.py: txt2img to latents,
 * torch's interpolate, img2img from latents with a fresh generator), on
 * the tiny model whose pixels move with everything (sd1_sharp).  Within
 * the pipeline goldens' tolerance, and the upscale mode matters beyond it. */
static int test_diffusers_latent(void)
{
    cJSON *j = pt_load_json("pipeline/hires/diffusers.json");
    ASSERT_TRUE(j);
    tsr_engine *e;
    if (pt_open_model("models/sd1_sharp", NULL, 2, &e))
        return 1;
    const int tol = cJSON_GetObjectItem(j, "tolerance")->valueint;
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases"))
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        tsr_image_params p;
        tsr_image_params_init(&p);
        p.prompt = cJSON_GetObjectItem(c, "prompt")->valuestring;
        p.width = p.height = 64;
        p.steps = cJSON_GetObjectItem(c, "steps")->valueint;
        p.seed = (uint64_t)cJSON_GetObjectItem(c, "seed")->valuedouble;
        p.cfg_scale = cJSON_GetObjectItem(c, "cfg_scale")->valuedouble;
        p.sampler = cJSON_GetObjectItem(c, "sampler")->valuestring;
        p.hires_scale = 2;
        p.hires_steps = cJSON_GetObjectItem(c, "hires_steps")->valueint;
        p.hires_strength = cJSON_GetObjectItem(c, "hires_strength")->valuedouble;
        p.hires_upscaler = cJSON_GetObjectItem(c, "hires_upscaler")->valuestring;
        tsr_result r;
        if (pt_run(e, &p, 1, &r, NULL))
            return 1;
        char rel[256];
        snprintf(rel, sizeof rel, "pipeline/hires/diffusers_%s.png", name);
        uint8_t *want;
        int w, h;
        if (pt_read_png(rel, 3, &want, &w, &h))
            return 1;
        ASSERT_TRUE(w == r.width && h == r.height);
        const int worst = pt_max_diff(r.rgb, want, (size_t)w * h * 3);
        if (worst > tol)
            TSR_FAIL("%s: differs from diffusers by up to %d (tolerance %d)", name, worst, tol);
        if (n == 0) {
            /* sensitivity: another upscale mode is far outside the tolerance */
            p.hires_upscaler = "Latent (nearest)";
            tsr_result other;
            if (pt_run(e, &p, 1, &other, NULL))
                return 1;
            ASSERT_TRUE(pt_max_diff(other.rgb, want, (size_t)w * h * 3) > 4 * tol);
            tsr_result_free(&other);
        }
        free(want);
        tsr_result_free(&r);
        n++;
    }
    ASSERT_EQ(n, 3);
    cJSON_Delete(j);
    tsr_engine_close(e);
    return 0;
}

/* Bad hires and fill parameters name their field; hr_resize's crop. */
static int test_checks(void)
{
    tsr_engine *e;
    if (pt_open_model("models/sd1", NULL, 2, &e))
        return 1;
    static uint8_t rgb[64 * 64 * 3];
    static const char *const fields[] = {"hires_strength", "hires_upscaler", "hires_scale",
                                         "hires_scale",    "mask_fill",      "hires_strength",
                                         "hires_steps",    "hires_width"};
    for (int i = 0; i < 8; i++) {
        tsr_image_params p = base("euler");
        p.hires_scale = 2;
        switch (i) {
        case 0: p.hires_strength = 0; break;
        case 1: p.hires_upscaler = "ESRGAN_4x"; break;
        case 2: p.hires_scale = 1.3; break; /* 83x83 */
        case 3: p.init_image = rgb; break;
        case 4: p.hires_scale = 0; p.mask_fill = 4; break;
        case 5: p.hires_steps = 1000; p.hires_strength = 0.5; break;
        case 6: p.hires_steps = -1; break;
        case 7: p.hires_width = 5000; break;
        }
        const char *field = NULL;
        int rc = tsr_image_params_check(e, &p, &field);
        if (rc != TSR_ERR_INVALID || !field || strcmp(field, fields[i]) != 0)
            TSR_FAIL("case %d: rc %d field %s (want %s): %s", i, rc, field ? field : "(null)",
                     fields[i], tsr_last_error());
    }
    /* hr_resize_x/y with another aspect: upscaled to cover, then cropped */
    tsr_hires_plan plan;
    tsr_image_params p = base("euler");
    p.hires_width = 192;
    p.hires_height = 128;
    ASSERT_OK(tsr_hires_check(e, &p, 64, 64, &plan, NULL));
    ASSERT_EQ(plan.to_w, 192);
    ASSERT_EQ(plan.to_h, 192);
    ASSERT_TRUE(plan.trunc_y > 0 && plan.trunc_x == 0); /* 64 pixels, in latent rows */
    ASSERT_EQ(plan.final_w, 192);
    ASSERT_EQ(plan.final_h, 128);
    ASSERT_EQ(plan.steps, 4);
    ASSERT_EQ(plan.sched_steps, 5); /* int(4 / 0.7) */
    /* a target off the VAE's grid: the latent upscalers floor it (A1111's
     * size=(to_h // f, to_w // f)), the image-space ones refuse it */
    tsr_image_params q = base("euler");
    q.hires_scale = 1.52; /* 64 -> 97 */
    ASSERT_OK(tsr_hires_check(e, &q, 64, 64, &plan, NULL));
    ASSERT_EQ(plan.to_w, 97);
    ASSERT_EQ(plan.final_w, 96);
    q.hires_upscaler = "Lanczos";
    const char *field = NULL;
    ASSERT_TRUE(tsr_hires_check(e, &q, 64, 64, &plan, &field) == TSR_ERR_INVALID);
    ASSERT_STR_EQ(field, "hires_scale");
    tsr_result r;
    p.steps = 2;
    if (pt_run(e, &p, 1, &r, NULL))
        return 1;
    ASSERT_EQ(r.width, 192);
    ASSERT_EQ(r.height, 128);
    ASSERT_TRUE(strstr(r.parameters, "Hires resize: 192x128"));
    tsr_result_free(&r);
    tsr_engine_close(e);
    return 0;
}

static const tsr_test_entry k_tests[] = {
    {"upscale_modes", test_upscale_modes}, {"fill_pixels", test_fill_pixels},
    {"fill_latent", test_fill_latent},     {"fill_modes", test_fill_modes},
    {"lanczos_by_hand", test_lanczos_by_hand}, {"latent_pass", test_latent_pass},
    {"checks", test_checks},               {"diffusers_latent", test_diffusers_latent},
};
TSR_TEST_TABLE_MAIN(k_tests)
