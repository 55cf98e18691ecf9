/*
 * tests/service/test_comfy_chains.c - ComfyUI graphs of more than one
 * sampled chain, and ImageScale / ImageScaleBy around a chain
 * (service/api/comfy/comfy_plan.c), compiled case by case; part of
 * unit_comfy (test_comfy.c runs them, test_comfy.h shares its helpers).
 * The resampling's arithmetic itself: test_comfy_scale.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "comfy.h"
#include "images.h"
#include "json.h"
#include "test.h"
#include "test_comfy.h"

/* Two sampled chains (another prompt and seed, the same checkpoint and
 * negative): two jobs, each output on its chain, ordered by output id; the
 * nodes each chain needs. */
int test_two_chains(void)
{
    comfy_plan plan;
    char *t = job_text(
        "{\"16\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"a blue ball\","
        " \"clip\": [\"4\", 1]}}, \"30\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 7,"
        " \"steps\": 3, \"cfg\": 6, \"sampler_name\": \"euler\", \"scheduler\": \"karras\","
        " \"denoise\": 1.0, \"model\": [\"4\", 0], \"positive\": [\"16\", 0], \"negative\":"
        " [\"7\", 0], \"latent_image\": [\"5\", 0]}}, \"31\": {\"class_type\": \"VAEDecode\","
        " \"inputs\": {\"samples\": [\"30\", 0], \"vae\": [\"4\", 2]}}, \"32\": {\"class_type\":"
        " \"SaveImage\", \"inputs\": {\"images\": [\"31\", 0], \"filename_prefix\": \"b\"}}}",
        &plan);
    ASSERT_TRUE(t != NULL);
    free(t);
    ASSERT_EQ(plan.n_chains, 2);
    ASSERT_EQ(plan.n_outputs, 2);
    /* outputs in id order ("32" < "9"); the first output's chain is chain 0 */
    ASSERT_STR_EQ(plan.outputs[0].node, "32");
    ASSERT_EQ(plan.outputs[0].chain, 0);
    ASSERT_STR_EQ(plan.outputs[1].node, "9");
    ASSERT_EQ(plan.outputs[1].chain, 1);
    ASSERT_STR_EQ(plan.chains[0].sampler_node, "30");
    ASSERT_STR_EQ(plan.chains[1].sampler_node, "3");
    char *a = cJSON_PrintUnformatted(plan.chains[0].job);
    char *b = cJSON_PrintUnformatted(plan.chains[1].job);
    ASSERT_TRUE(strstr(a, "\"prompt\":\"a blue ball\",\"negative_prompt\":\"blurry\"") != NULL);
    ASSERT_TRUE(strstr(a, "\"seed\":7,\"steps\":3,\"cfg_scale\":6,") != NULL);
    ASSERT_TRUE(strstr(a, "\"scheduler\":\"comfy_karras\"") != NULL);
    ASSERT_TRUE(strstr(b, "\"prompt\":\"a red apple\"") != NULL);
    ASSERT_TRUE(strstr(b, "\"seed\":42,\"steps\":4,\"cfg_scale\":7.5,") != NULL);
    free(a);
    free(b);
    /* the checkpoint, the latent and the negative: both; 16: chain 0; 6: chain 1 */
    ASSERT_EQ(plan.n_order, 11);
    for (int i = 0; i < plan.n_order; i++) {
        const char *id = plan.order[i];
        int want = !strcmp(id, "4") || !strcmp(id, "5") || !strcmp(id, "7") ? 3
                   : !strcmp(id, "16") || !strcmp(id, "30") || !strcmp(id, "31") ||
                           !strcmp(id, "32") ? 1 : 2;
        if (plan.order_chains[i] != want)
            TSR_FAIL("node %s: chains %d, want %d", id, plan.order_chains[i], want);
    }
    comfy_plan_free(&plan);
    /* both chains' models through LoraLoader 12, which takes LoraLoader 14's:
     * 14, reached only through 12, is needed by both, though the
     * validator's walk checks it once */
    t = job_text(
        "{\"14\": {\"class_type\": \"LoraLoader\", \"inputs\": {\"model\": [\"4\", 0], \"clip\":"
        " [\"4\", 1], \"lora_name\": \"b.safetensors\", \"strength_model\": 1, \"strength_clip\":"
        " 1}}, \"12\": {\"class_type\": \"LoraLoader\", \"inputs\": {\"model\": [\"14\", 0],"
        " \"clip\": [\"14\", 1], \"lora_name\": \"a.safetensors\", \"strength_model\": 1,"
        " \"strength_clip\": 1}}, \"3/inputs/model\": [\"12\", 0], \"30\": {\"class_type\": \"KSampler\", \"inputs\":"
        " {\"seed\": 7, \"steps\": 3, \"cfg\": 6, \"sampler_name\": \"euler\", \"scheduler\":"
        " \"normal\", \"denoise\": 1.0, \"model\": [\"12\", 0], \"positive\": [\"6\", 0],"
        " \"negative\": [\"7\", 0], \"latent_image\": [\"5\", 0]}}, \"31\": {\"class_type\":"
        " \"VAEDecode\", \"inputs\": {\"samples\": [\"30\", 0], \"vae\": [\"4\", 2]}},"
        " \"10\": {\"class_type\": \"PreviewImage\", \"inputs\": {\"images\": [\"31\", 0]}}}",
        &plan);
    ASSERT_TRUE(t != NULL);
    free(t);
    ASSERT_EQ(plan.n_chains, 2);
    for (int i = 0; i < plan.n_order; i++)
        if ((!strcmp(plan.order[i], "14") || !strcmp(plan.order[i], "12")) &&
            plan.order_chains[i] != 3)
            TSR_FAIL("node %s: chains %d, want both", plan.order[i], plan.order_chains[i]);
    comfy_plan_free(&plan);
    return 0;
}

/* ImageScale / ImageScaleBy between VAEDecode and the output: kept on the
 * output, in the order they apply; the size bound is checked per chain. */
int test_scaled_output(void)
{
    comfy_plan plan;
    char *t = job_text(
        "{\"10\": {\"class_type\": \"ImageScaleBy\", \"inputs\": {\"image\": [\"8\", 0],"
        " \"upscale_method\": \"bicubic\", \"scale_by\": 8}}, \"11\": {\"class_type\":"
        " \"ImageScale\", \"inputs\": {\"image\": [\"10\", 0], \"upscale_method\": \"area\","
        " \"width\": 100, \"height\": 0, \"crop\": \"center\"}}, \"9/inputs/images\": [\"11\", 0],"
        " \"12\": {\"class_type\": \"PreviewImage\", \"inputs\": {\"images\": [\"8\", 0]}}}",
        &plan);
    ASSERT_TRUE(t != NULL);
    free(t);
    ASSERT_EQ(plan.n_chains, 1);
    ASSERT_STR_EQ(plan.outputs[0].node, "12");
    ASSERT_EQ(plan.outputs[0].n_scales, 0);
    ASSERT_TRUE(plan.outputs[0].temp);
    const comfy_output *o = &plan.outputs[1];
    ASSERT_STR_EQ(o->node, "9");
    ASSERT_EQ(o->n_scales, 2);
    ASSERT_EQ(o->scales[0].method, CS_BICUBIC);
    ASSERT_NEAR(o->scales[0].scale_by, 8, 0);
    ASSERT_STR_EQ(o->scales[0].node, "10");
    ASSERT_EQ(o->scales[1].method, CS_AREA);
    ASSERT_EQ(o->scales[1].width, 100);
    ASSERT_TRUE(o->scales[1].crop_center);
    ASSERT_TRUE(comfy_check_output_sizes(&plan, 0, 64, 64) == NULL);
    /* 1024 * 8 is past 4096: the error names ImageScaleBy 10 */
    cJSON *e = comfy_check_output_sizes(&plan, 0, 1024, 64);
    ASSERT_TRUE(e != NULL);
    const cJSON *ne = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "node_errors"), "10");
    ASSERT_STR_EQ(cJSON_GetObjectItem(ne, "class_type")->valuestring, "ImageScaleBy");
    cJSON_Delete(e);
    comfy_plan_free(&plan);
    /* five ImageScale nodes in a row: over the bound */
    bad_case c = {"five_scales",
                  "{\"10\": {\"class_type\": \"ImageScaleBy\", \"inputs\": {\"image\": [\"8\", 0],"
                  " \"upscale_method\": \"area\", \"scale_by\": 1}}, \"11\": {\"class_type\":"
                  " \"ImageScaleBy\", \"inputs\": {\"image\": [\"10\", 0], \"upscale_method\":"
                  " \"area\", \"scale_by\": 1}}, \"12\": {\"class_type\": \"ImageScaleBy\","
                  " \"inputs\": {\"image\": [\"11\", 0], \"upscale_method\": \"area\","
                  " \"scale_by\": 1}}, \"13\": {\"class_type\": \"ImageScaleBy\", \"inputs\":"
                  " {\"image\": [\"12\", 0], \"upscale_method\": \"area\", \"scale_by\": 1}},"
                  " \"14\": {\"class_type\": \"ImageScaleBy\", \"inputs\": {\"image\": [\"13\", 0],"
                  " \"upscale_method\": \"area\", \"scale_by\": 1}}, \"9/inputs/images\":"
                  " [\"14\", 0]}",
                  NULL, NODE_FAILED, "10", "unsupported_graph"};
    ASSERT_EQ(check_bad(&c), 0);
    return 0;
}

/* LoadImage -> ImageScale -> VAEEncode: the init image is the upload
 * scaled (nearest-exact 2x: each pixel twice) and cut to multiples of 8
 * (ComfyUI's VAE crop, centred: 40x24 stays, 45x27 -> 40x24 from (2, 1)). */
static int scaled_init(const char *scale, uint8_t **rgb, int *w, int *h)
{
    char patch[1024];
    snprintf(patch, sizeof patch,
             "{\"20\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"real.png\"}},"
             " \"22\": %s, \"21\": {\"class_type\": \"VAEEncode\", \"inputs\": {\"pixels\":"
             " [\"22\", 0], \"vae\": [\"4\", 2]}}, \"3/inputs/latent_image\": [\"21\", 0],"
             " \"3/inputs/denoise\": 0.5}", scale);
    comfy_plan plan;
    char *t = job_text(patch, &plan);
    ASSERT_TRUE(t != NULL);
    free(t);
    const char *b64 = cJSON_GetObjectItem(plan.chains[0].job, "init_image")->valuestring;
    uint8_t *png = NULL;
    size_t len = 0;
    char err[128];
    ASSERT_TRUE(svc_base64_decode(b64, strlen(b64), &png, &len, err, sizeof err));
    ASSERT_EQ(svc_image_decode(png, len, 3, rgb, w, h, err, sizeof err), 0);
    free(png);
    comfy_plan_free(&plan);
    return 0;
}

int test_img2img_scaled(void)
{
    uint8_t *rgb = NULL;
    int w, h;
    ASSERT_EQ(scaled_init("{\"class_type\": \"ImageScaleBy\", \"inputs\": {\"image\": [\"20\", 0],"
                          " \"upscale_method\": \"nearest-exact\", \"scale_by\": 2}}", &rgb, &w, &h),
              0);
    ASSERT_EQ(w, 40);
    ASSERT_EQ(h, 24);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            if (rgb[(y * w + x) * 3] != 12 * (x / 2) || rgb[(y * w + x) * 3 + 1] != 20 * (y / 2))
                TSR_FAIL("(%d, %d) is not source pixel (%d, %d)", x, y, x / 2, y / 2);
    free(rgb);
    ASSERT_EQ(scaled_init("{\"class_type\": \"ImageScale\", \"inputs\": {\"image\": [\"20\", 0],"
                          " \"upscale_method\": \"nearest-exact\", \"width\": 45, \"height\": 27,"
                          " \"crop\": \"disabled\"}}", &rgb, &w, &h),
              0);
    ASSERT_EQ(w, 40);
    ASSERT_EQ(h, 24);
    free(rgb);
    /* a size past the bound is refused on the ImageScale node */
    bad_case c = {"scaled_too_big",
                  "{\"20\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"real.png\"}},"
                  " \"22\": {\"class_type\": \"ImageScaleBy\", \"inputs\": {\"image\": [\"20\", 0],"
                  " \"upscale_method\": \"area\", \"scale_by\": 0.01}}, \"21\": {\"class_type\":"
                  " \"VAEEncode\", \"inputs\": {\"pixels\": [\"22\", 0], \"vae\": [\"4\", 2]}},"
                  " \"3/inputs/latent_image\": [\"21\", 0]}",
                  NULL, NODE_FAILED, "22", "value_not_accepted"};
    ASSERT_EQ(check_bad(&c), 0);
    return 0;
}

