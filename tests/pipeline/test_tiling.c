/*
 * tests/pipeline/test_tiling.c - seamless tiling (tsr_image_params.tiling,
 * A1111's `tiling`): circular padding in every UNet and VAE convolution.
 *
 * Why these cases: the reference is diffusers' own pipeline with every
 * Conv2d of its UNet and VAE switched to padding_mode 'circular', exactly
 * A1111's patch (goldens by tools/reference/make_tiling_goldens.py, on the
 * tiny sd1_sharp and sdxl_sharp models whose pixels move with the padding:
 * the goldens assert tiled and plain differ by far more than the
 * tolerance), txt2img square and not, img2img (the VAE encoder too), SDXL.  What a user sees -
 * the left and right, top and bottom edges continuing each other - is
 * measured on the trained demo model, whose images are smooth enough for a
 * seam to show.  Tiled and plain images must never share a UNet call, and
 * each must equal its solo run byte for byte when submitted together.
 */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera.h"
#include "pipeline_test.h"
#include "test.h"

/* Each manifest case, tiled and plain, against diffusers' images. */
static int test_diffusers(void)
{
    cJSON *j = pt_load_json("pipeline/tiling/manifest.json");
    ASSERT_TRUE(j);
    tsr_engine *e = NULL;
    char open_name[256] = "";
    const int tol = cJSON_GetObjectItem(j, "tolerance")->valueint;
    uint8_t *init = NULL;
    int iw = 0, ih = 0;
    if (pt_read_png("pipeline/tiling/init.png", 3, &init, &iw, &ih))
        return 1;
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases"))
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        /* "tests/data/models/X" -> "models/X" (tsr_test_path is under tests/data) */
        const char *model = strstr(cJSON_GetObjectItem(c, "model")->valuestring, "models/");
        ASSERT_TRUE(model != NULL);
        if (strcmp(model, open_name) != 0) {
            if (e)
                tsr_engine_close(e);
            if (pt_open_model(model, NULL, 2, &e))
                return 1;
            snprintf(open_name, sizeof open_name, "%s", model);
        }
        for (int tiled = 1; tiled >= 0; tiled--) {
            tsr_image_params p;
            tsr_image_params_init(&p);
            p.prompt = cJSON_GetObjectItem(j, "prompt")->valuestring;
            p.steps = cJSON_GetObjectItem(j, "steps")->valueint;
            p.cfg_scale = cJSON_GetObjectItem(j, "cfg")->valuedouble;
            p.sampler = cJSON_GetObjectItem(j, "sampler")->valuestring;
            p.width = cJSON_GetObjectItem(c, "width")->valueint;
            p.height = cJSON_GetObjectItem(c, "height")->valueint;
            p.seed = (uint64_t)cJSON_GetObjectItem(c, "seed")->valuedouble;
            if (strcmp(cJSON_GetObjectItem(c, "kind")->valuestring, "img2img") == 0) {
                ASSERT_TRUE(iw == p.width && ih == p.height);
                p.init_image = init;
                p.strength = cJSON_GetObjectItem(c, "strength")->valuedouble;
            }
            p.tiling = tiled;
            tsr_result r;
            if (pt_run(e, &p, 1, &r, NULL))
                return 1;
            char rel[256];
            snprintf(rel, sizeof rel, "pipeline/tiling/%s%s.png", name, tiled ? "" : "_plain");
            uint8_t *want, *other;
            int w, h, w2, h2;
            if (pt_read_png(rel, 3, &want, &w, &h))
                return 1;
            snprintf(rel, sizeof rel, "pipeline/tiling/%s%s.png", name, tiled ? "_plain" : "");
            if (pt_read_png(rel, 3, &other, &w2, &h2))
                return 1;
            ASSERT_TRUE(w == r.width && h == r.height && w2 == w && h2 == h);
            const int worst = pt_max_diff(r.rgb, want, (size_t)w * h * 3);
            const int far = pt_max_diff(r.rgb, other, (size_t)w * h * 3);
            printf("%s%s: %d/255 from diffusers' image, %d from the %s one\n", name,
                   tiled ? "" : " (plain)", worst, far, tiled ? "plain" : "tiled");
            if (worst > tol)
                TSR_FAIL("%s%s: differs from diffusers by up to %d (tolerance %d)", name,
                         tiled ? "" : " (plain)", worst, tol);
            ASSERT_TRUE(far > 4 * tol); /* the other mode is far outside the tolerance */
            ASSERT_TRUE((strstr(r.parameters, "Tiling: True") != NULL) == (tiled != 0));
            free(want);
            free(other);
            tsr_result_free(&r);
        }
        n++;
    }
    ASSERT_EQ(n, 4);
    free(init);
    cJSON_Delete(j);
    tsr_engine_close(e);
    return 0;
}

/* Mean |difference| between column x and column x+1 (wrapping: x = w-1
 * pairs with 0) of an RGB image; vertical: rows. */
static double seam(const uint8_t *px, int w, int h, bool vertical, int at)
{
    double s = 0;
    const int len = vertical ? w : h;
    for (int i = 0; i < len; i++)
        for (int c = 0; c < 3; c++) {
            size_t a, b;
            if (vertical) {
                a = ((size_t)at * w + i) * 3 + c;
                b = ((size_t)((at + 1) % h) * w + i) * 3 + c;
            } else {
                a = ((size_t)i * w + at) * 3 + c;
                b = ((size_t)i * w + (at + 1) % w) * 3 + c;
            }
            s += fabs((double)px[a] - (double)px[b]);
        }
    return s / (len * 3);
}

static double neighbours(const uint8_t *px, int w, int h, bool vertical)
{
    const int n = vertical ? h - 1 : w - 1;
    double s = 0;
    for (int at = 0; at < n; at++)
        s += seam(px, w, h, vertical, at);
    return s / n;
}

/* The demo model (trained, smooth images): with tiling the wrap-around
 * seam differs no more than neighbouring columns (rows) do; without it the
 * seam is far larger. */
static int test_seamless(void)
{
    tsr_engine *e;
    if (pt_open_model("../../models/demo", NULL, 2, &e))
        return 1;
    double plain_sum[2] = {0, 0}, tiled_sum[2] = {0, 0};
    for (int s = 5; s <= 7; s++) {
        for (int tiled = 0; tiled <= 1; tiled++) {
            tsr_image_params p;
            tsr_image_params_init(&p);
            p.prompt = "a red star and a green ring";
            p.width = p.height = 128;
            p.steps = 12;
            p.seed = (uint64_t)s;
            p.tiling = tiled;
            tsr_result r;
            if (pt_run(e, &p, 1, &r, NULL))
                return 1;
            for (int v = 0; v < 2; v++) {
                const int at = v ? r.height - 1 : r.width - 1;
                const double sm = seam(r.rgb, r.width, r.height, v, at);
                const double nb = neighbours(r.rgb, r.width, r.height, v);
                printf("seed %d %s %s: seam %.2f, neighbours %.2f\n", s,
                       tiled ? "tiled" : "plain", v ? "top/bottom" : "left/right", sm, nb);
                if (tiled && sm > 1.5 * nb)
                    TSR_FAIL("seed %d: the tiled image's %s seam %.2f exceeds 1.5x its "
                             "neighbouring differences %.2f",
                             s, v ? "top/bottom" : "left/right", sm, nb);
                (tiled ? tiled_sum : plain_sum)[v] += sm;
            }
            tsr_result_free(&r);
        }
    }
    for (int v = 0; v < 2; v++)
        if (plain_sum[v] < 3 * tiled_sum[v])
            TSR_FAIL("%s: plain seams (%.2f) not 3x the tiled ones (%.2f): the test cannot tell",
                     v ? "top/bottom" : "left/right", plain_sum[v], tiled_sum[v]);
    tsr_engine_close(e);
    return 0;
}

/* A tiled and a plain image of one shape submitted together: separate UNet
 * calls, each byte-identical to its solo run. */
static int test_batched(void)
{
    tsr_engine *e;
    if (pt_open_model("models/sd1_sharp", NULL, 2, &e))
        return 1;
    tsr_image_params p[2];
    for (int i = 0; i < 2; i++) {
        tsr_image_params_init(&p[i]);
        p[i].prompt = "a photo of a red cat on a green sofa";
        p[i].width = p[i].height = 64;
        p[i].steps = 4;
        p[i].sampler = "euler_a";
        p[i].seed = 77;
        p[i].tiling = i == 0;
    }
    tsr_result both[2], solo[2];
    tsr_batch_stats st;
    if (pt_run(e, p, 2, both, &st))
        return 1;
    ASSERT_EQ(st.unet_calls, 8); /* 4 steps each, never shared */
    for (int i = 0; i < 2; i++) {
        tsr_batch_stats one;
        if (pt_run(e, &p[i], 1, &solo[i], &one))
            return 1;
        ASSERT_EQ(one.unet_calls, 4);
        ASSERT_TRUE(memcmp(both[i].rgb, solo[i].rgb, (size_t)64 * 64 * 3) == 0);
    }
    ASSERT_TRUE(pt_max_diff(solo[0].rgb, solo[1].rgb, (size_t)64 * 64 * 3) > 8);
    /* two tiled images of one shape do share calls */
    p[1].tiling = 1;
    p[1].seed = 78;
    tsr_result two[2];
    if (pt_run(e, p, 2, two, &st))
        return 1;
    ASSERT_EQ(st.unet_calls, 4);
    ASSERT_TRUE(memcmp(two[0].rgb, solo[0].rgb, (size_t)64 * 64 * 3) == 0);
    for (int i = 0; i < 2; i++) {
        tsr_result_free(&both[i]);
        tsr_result_free(&solo[i]);
        tsr_result_free(&two[i]);
    }
    /* a value other than 0 or 1 is refused, naming the field */
    p[0].tiling = 2;
    const char *field = NULL;
    ASSERT_TRUE(tsr_image_params_check(e, &p[0], &field) == TSR_ERR_INVALID);
    ASSERT_STR_EQ(field, "tiling");
    tsr_engine_close(e);
    return 0;
}

/* `tessera generate --tiling` gives diffusers' tiled image (the first
 * manifest case) and says so in the PNG's infotext. */
static int test_cli(void)
{
    pt_cli cli;
    int rc = pt_cli_open(&cli, "tiling_cli", "models/sd1_sharp");
    if (rc)
        return rc;
    /* t2i_64x64 of tests/data/pipeline/tiling/manifest.json */
    char *argv[] = {(char *)cli.bin, "--log-level", "warn", "generate", "--model", cli.model,
                    "--prompt", "a photo of a red cat on a green sofa", "--seed", "6301",
                    "--steps", "6", "--cfg-scale", "7.5", "--width", "64", "--height", "64",
                    "--sampler", "euler", "--quiet", "--output", cli.png, "--tiling", NULL};
    tsr_test_child r;
    ASSERT_TRUE(tsr_test_spawn(argv, cli.log, NULL, 300, &r) == 0);
    ASSERT_TRUE(r.exited && r.status == 0);
    size_t size = 0;
    void *file = tsr_test_read_file(cli.png, &size);
    ASSERT_TRUE(file);
    ASSERT_TRUE(memmem(file, size, "Tiling: True", 12) != NULL);
    uint8_t *got, *want;
    int w, h, w2, h2;
    ASSERT_OK(tsr_image_decode(file, size, 3, 0, &got, &w, &h));
    free(file);
    if (pt_read_png("pipeline/tiling/t2i_64x64.png", 3, &want, &w2, &h2))
        return 1;
    ASSERT_TRUE(w == w2 && h == h2);
    const int d = pt_max_diff(got, want, (size_t)w * h * 3);
    printf("generate --tiling: %d/255 from diffusers' tiled image\n", d);
    ASSERT_TRUE(d <= 2);
    free(got);
    free(want);
    pt_cli_close(&cli);
    return 0;
}

static const tsr_test_entry k_tests[] = {
    {"cli", test_cli},
    {"diffusers", test_diffusers},
    {"seamless", test_seamless},
    {"batched", test_batched},
};
TSR_TEST_TABLE_MAIN(k_tests)
