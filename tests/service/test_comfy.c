/*
 * tests/service/test_comfy.c - ComfyUI workflows in, native jobs or
 * ComfyUI's node_errors out (service/api/comfy/comfy_graph.c), case by case.
 *
 * Why a C unit test: the validator's answers to hostile graphs (cycles,
 * dangling links, wrong types, huge or deep graphs, unknown nodes) are a
 * table of cases, each a patch to ComfyUI's default txt2img workflow and
 * the error it must give (top-level type, and the node id and error type
 * it must name).  Driving comfy_compile directly keeps 40+ cases to a
 * fraction of a second; tests/compat/test_comfy_api.py checks the same
 * answers come back over HTTP as 400s, and that a good workflow's image is
 * `tessera generate`'s.  The good cases check the compiled native fields
 * (txt2img, hires fix, LoRA + clip skip, img2img, a 64-bit seed).
 *
 * A patch is a JSON object: a key "<id>" sets or (null) removes a node; a
 * key "<id>/inputs/<name>" (or "<id>/class_type") sets or removes that
 * member.  Graphs of more than one chain, and ImageScale(By) around them:
 * test_comfy_chains.c (the same executable; helpers in test_comfy.h).
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

static const char *k_base =
    "{\"3\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 42, \"steps\": 4, \"cfg\": 7.5,"
    " \"sampler_name\": \"euler\", \"scheduler\": \"normal\", \"denoise\": 1.0, \"model\": [\"4\", 0],"
    " \"positive\": [\"6\", 0], \"negative\": [\"7\", 0], \"latent_image\": [\"5\", 0]}},"
    " \"4\": {\"class_type\": \"CheckpointLoaderSimple\", \"inputs\": {\"ckpt_name\": \"demo\"}},"
    " \"5\": {\"class_type\": \"EmptyLatentImage\", \"inputs\": {\"width\": 64, \"height\": 64,"
    " \"batch_size\": 1}},"
    " \"6\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"a red apple\", \"clip\": [\"4\", 1]}},"
    " \"7\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"blurry\", \"clip\": [\"4\", 1]}},"
    " \"8\": {\"class_type\": \"VAEDecode\", \"inputs\": {\"samples\": [\"3\", 0], \"vae\": [\"4\", 2]}},"
    " \"9\": {\"class_type\": \"SaveImage\", \"inputs\": {\"filename_prefix\": \"ComfyUI\","
    " \"images\": [\"8\", 0]}}}";

/* real.png: a 20x12 RGB PNG, pixel (x, y) = (12 x, 20 y, x + y) */
static char *real_png(void)
{
    uint8_t rgb[20 * 12 * 3], *png = NULL;
    for (int y = 0; y < 12; y++)
        for (int x = 0; x < 20; x++) {
            rgb[(y * 20 + x) * 3] = (uint8_t)(12 * x);
            rgb[(y * 20 + x) * 3 + 1] = (uint8_t)(20 * y);
            rgb[(y * 20 + x) * 3 + 2] = (uint8_t)(x + y);
        }
    size_t len = 0;
    char err[128];
    if (svc_png_encode(rgb, 20, 12, NULL, &png, &len, err, sizeof err) < 0)
        return NULL;
    char *b64 = svc_base64_encode(png, len);
    free(png);
    return b64;
}

static char *load(void *user, const char *name, char *err, size_t err_size)
{
    (void)user;
    if (strcmp(name, "real.png") == 0)
        return real_png();
    if (strcmp(name, "in.png") != 0) {
        snprintf(err, err_size, "no such image");
        return NULL;
    }
    return strdup("iVBORw0KGgo=");
}

static const char *const k_ckpt[] = {"demo", NULL};
static const char *const k_loras[] = {"a.safetensors", "b.safetensors", NULL};
static const char *const k_images[] = {"in.png", "real.png", NULL};

static cJSON *parse(const char *text)
{
    char err[128];
    cJSON *o = svc_json_parse(text, strlen(text), err, sizeof err);
    if (!o)
        fprintf(stderr, "bad test JSON: %s\n%s\n", err, text);
    return o;
}

/* The base workflow with a patch applied (see the head comment). */
cJSON *patched(const char *patch)
{
    cJSON *w = parse(k_base);
    cJSON *p = patch ? parse(patch) : NULL;
    cJSON *it;
    cJSON_ArrayForEach(it, p) {
        char key[128];
        snprintf(key, sizeof key, "%s", it->string);
        char *slash = strchr(key, '/');
        cJSON *parent = w;
        char *name = key;
        if (slash) {
            *slash = '\0';
            parent = cJSON_GetObjectItem(w, key);
            name = slash + 1;
            char *s2 = strchr(name, '/');
            if (s2) {
                *s2 = '\0';
                parent = cJSON_GetObjectItem(parent, name);
                name = s2 + 1;
            }
        }
        cJSON_DeleteItemFromObjectCaseSensitive(parent, name);
        if (!cJSON_IsNull(it))
            cJSON_AddItemToObject(parent, name, cJSON_Duplicate(it, true));
    }
    cJSON_Delete(p);
    return w;
}

int compile_it(const cJSON *w, comfy_plan *plan, cJSON **err)
{
    comfy_context ctx = {.checkpoints = k_ckpt, .loras = k_loras, .images = k_images,
                         .load_image = load,
                         .load_mask = load};
    return comfy_compile(w, &ctx, plan, err);
}


static const bad_case k_bad[] = {
    {"not_an_object", NULL, "[1, 2]", "invalid_prompt", NULL, NULL},
    {"empty", NULL, "{}", "prompt_no_outputs", NULL, NULL},
    {"unknown_class", "{\"10\": {\"class_type\": \"UpscaleModelLoader\", \"inputs\": {}}}", NULL,
     "invalid_prompt", NULL, NULL},
    {"missing_class_type", "{\"4/class_type\": null}", NULL, "invalid_prompt", NULL, NULL},
    {"class_type_number", "{\"4/class_type\": 5}", NULL, "invalid_prompt", NULL, NULL},
    {"node_not_object", "{\"5\": 5}", NULL, "invalid_prompt", NULL, NULL},
    {"no_output", "{\"9\": null}", NULL, "prompt_no_outputs", NULL, NULL},
    {"missing_input", "{\"3/inputs/seed\": null}", NULL, NODE_FAILED, "3", "required_input_missing"},
    {"missing_link_input", "{\"3/inputs/positive\": null}", NULL, NODE_FAILED, "3",
     "required_input_missing"},
    {"dangling_link", "{\"3/inputs/model\": [\"99\", 0]}", NULL, NODE_FAILED, "3",
     "bad_linked_input"},
    {"removed_node", "{\"5\": null}", NULL, NODE_FAILED, "3", "bad_linked_input"},
    {"link_short", "{\"3/inputs/model\": [\"4\"]}", NULL, NODE_FAILED, "3", "bad_linked_input"},
    {"link_index_range", "{\"3/inputs/model\": [\"4\", 7]}", NULL, NODE_FAILED, "3",
     "return_type_mismatch"},
    {"link_wrong_type", "{\"3/inputs/positive\": [\"4\", 0]}", NULL, NODE_FAILED, "3",
     "return_type_mismatch"},
    {"link_negative_index", "{\"3/inputs/model\": [\"4\", -1]}", NULL, NODE_FAILED, "3",
     "bad_linked_input"},
    {"link_float_index", "{\"3/inputs/model\": [\"4\", 0.5]}", NULL, NODE_FAILED, "3",
     "bad_linked_input"},
    {"link_numeric_id", "{\"3/inputs/model\": [4, 0]}", NULL, NODE_FAILED, "3", "bad_linked_input"},
    {"link_to_widget", "{\"3/inputs/seed\": [\"4\", 0]}", NULL, NODE_FAILED, "3",
     "return_type_mismatch"},
    {"literal_for_link", "{\"3/inputs/model\": \"4\"}", NULL, NODE_FAILED, "3", "bad_linked_input"},
    {"seed_negative", "{\"3/inputs/seed\": -1}", NULL, NODE_FAILED, "3", "value_smaller_than_min"},
    {"seed_too_big", "{\"3/inputs/seed\": 18446744073709551616}", NULL, NODE_FAILED, "3",
     "value_bigger_than_max"},
    {"seed_string", "{\"3/inputs/seed\": \"42\"}", NULL, NODE_FAILED, "3", "invalid_input_type"},
    {"steps_zero", "{\"3/inputs/steps\": 0}", NULL, NODE_FAILED, "3", "value_smaller_than_min"},
    {"steps_fraction", "{\"3/inputs/steps\": 1.5}", NULL, NODE_FAILED, "3", "invalid_input_type"},
    {"cfg_huge", "{\"3/inputs/cfg\": 1000}", NULL, NODE_FAILED, "3", "value_bigger_than_max"},
    {"cfg_bool", "{\"3/inputs/cfg\": true}", NULL, NODE_FAILED, "3", "invalid_input_type"},
    {"sampler_unknown", "{\"3/inputs/sampler_name\": \"euler_cfg_pp\"}", NULL, NODE_FAILED, "3",
     "value_not_in_list"},
    {"scheduler_unmapped", "{\"3/inputs/scheduler\": \"kl_optimal\"}", NULL, NODE_FAILED, "3",
     "value_not_in_list"},
    {"checkpoint_other", "{\"4/inputs/ckpt_name\": \"sdxl.safetensors\"}", NULL, NODE_FAILED, "4",
     "value_not_in_list"},
    {"width_small", "{\"5/inputs/width\": 30}", NULL, NODE_FAILED, "5", "value_smaller_than_min"},
    {"batch_big", "{\"5/inputs/batch_size\": 17}", NULL, NODE_FAILED, "5", "value_bigger_than_max"},
    {"text_not_string", "{\"6/inputs/text\": [\"a\", \"b\", \"c\"]}", NULL, NODE_FAILED, "6",
     "bad_linked_input"},
    {"text_number", "{\"6/inputs/text\": 12}", NULL, NODE_FAILED, "6", "invalid_input_type"},
    {"self_cycle", "{\"3/inputs/latent_image\": [\"3\", 0]}", NULL, NODE_FAILED, "3",
     "dependency_cycle"},
    {"two_node_cycle",
     "{\"20\": {\"class_type\": \"CLIPSetLastLayer\", \"inputs\": {\"clip\": [\"21\", 0],"
     " \"stop_at_clip_layer\": -1}}, \"21\": {\"class_type\": \"CLIPSetLastLayer\", \"inputs\":"
     " {\"clip\": [\"20\", 0], \"stop_at_clip_layer\": -1}}, \"6/inputs/clip\": [\"20\", 0]}",
     NULL, NODE_FAILED, NULL, "dependency_cycle"},
    /* five sampled chains: the fifth (output 9 sorts last) is over the bound */
    {"five_chains",
     "{ \"30\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 1, \"steps\": 4, \"cfg\": 7,"
     " \"sampler_name\": \"euler\", \"scheduler\": \"normal\", \"denoise\": 1.0, \"model\": [\"4\", 0],"
     " \"positive\": [\"6\", 0], \"negative\": [\"7\", 0], \"latent_image\": [\"5\", 0]}},"
     " \"31\": {\"class_type\": \"VAEDecode\", \"inputs\": {\"samples\": [\"30\", 0], \"vae\": [\"4\", 2]}},"
     " \"32\": {\"class_type\": \"PreviewImage\", \"inputs\": {\"images\": [\"31\", 0]}},"
     " \"33\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 2, \"steps\": 4, \"cfg\": 7,"
     " \"sampler_name\": \"euler\", \"scheduler\": \"normal\", \"denoise\": 1.0, \"model\": [\"4\", 0],"
     " \"positive\": [\"6\", 0], \"negative\": [\"7\", 0], \"latent_image\": [\"5\", 0]}},"
     " \"34\": {\"class_type\": \"VAEDecode\", \"inputs\": {\"samples\": [\"33\", 0], \"vae\": [\"4\", 2]}},"
     " \"35\": {\"class_type\": \"PreviewImage\", \"inputs\": {\"images\": [\"34\", 0]}},"
     " \"36\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 3, \"steps\": 4, \"cfg\": 7,"
     " \"sampler_name\": \"euler\", \"scheduler\": \"normal\", \"denoise\": 1.0, \"model\": [\"4\", 0],"
     " \"positive\": [\"6\", 0], \"negative\": [\"7\", 0], \"latent_image\": [\"5\", 0]}},"
     " \"37\": {\"class_type\": \"VAEDecode\", \"inputs\": {\"samples\": [\"36\", 0], \"vae\": [\"4\", 2]}},"
     " \"38\": {\"class_type\": \"PreviewImage\", \"inputs\": {\"images\": [\"37\", 0]}},"
     " \"39\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 4, \"steps\": 4, \"cfg\": 7,"
     " \"sampler_name\": \"euler\", \"scheduler\": \"normal\", \"denoise\": 1.0, \"model\": [\"4\", 0],"
     " \"positive\": [\"6\", 0], \"negative\": [\"7\", 0], \"latent_image\": [\"5\", 0]}},"
     " \"40\": {\"class_type\": \"VAEDecode\", \"inputs\": {\"samples\": [\"39\", 0], \"vae\": [\"4\", 2]}},"
     " \"41\": {\"class_type\": \"PreviewImage\", \"inputs\": {\"images\": [\"40\", 0]}}}",
     NULL, NODE_FAILED, "3", "unsupported_graph"},
    {"save_loaded_image",
     "{\"40\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"in.png\"}},"
     " \"9/inputs/images\": [\"40\", 0]}", NULL, NODE_FAILED, "9", "unsupported_graph"},
    {"decode_empty_latent", "{\"8/inputs/samples\": [\"5\", 0]}", NULL, NODE_FAILED, "8",
     "unsupported_graph"},
    {"denoise_on_empty", "{\"3/inputs/denoise\": 0.5}", NULL, NODE_FAILED, "3",
     "unsupported_graph"},
    {"advanced_partial",
     "{\"3\": {\"class_type\": \"KSamplerAdvanced\", \"inputs\": {\"add_noise\": \"enable\","
     " \"noise_seed\": 42, \"steps\": 4, \"cfg\": 7.5, \"sampler_name\": \"euler\", \"scheduler\":"
     " \"normal\", \"model\": [\"4\", 0], \"positive\": [\"6\", 0], \"negative\": [\"7\", 0],"
     " \"latent_image\": [\"5\", 0], \"start_at_step\": 2, \"end_at_step\": 10000,"
     " \"return_with_leftover_noise\": \"disable\"}}}", NULL, NODE_FAILED, "3", "unsupported_value"},
    {"hires_other_cfg",
     "{\"10\": {\"class_type\": \"LatentUpscaleBy\", \"inputs\": {\"samples\": [\"3\", 0],"
     " \"upscale_method\": \"bilinear\", \"scale_by\": 2.0}}, \"11\": {\"class_type\": \"KSampler\","
     " \"inputs\": {\"seed\": 42, \"steps\": 3, \"cfg\": 5, \"sampler_name\": \"euler\", \"scheduler\":"
     " \"normal\", \"denoise\": 0.5, \"model\": [\"4\", 0], \"positive\": [\"6\", 0], \"negative\":"
     " [\"7\", 0], \"latent_image\": [\"10\", 0]}}, \"8/inputs/samples\": [\"11\", 0]}",
     NULL, NODE_FAILED, "11", "unsupported_graph"},
    {"upscale_area",
     "{\"10\": {\"class_type\": \"LatentUpscaleBy\", \"inputs\": {\"samples\": [\"3\", 0],"
     " \"upscale_method\": \"area\", \"scale_by\": 2.0}}, \"8/inputs/samples\": [\"10\", 0]}",
     NULL, NODE_FAILED, "10", "value_not_in_list"},
    {"load_unknown_image",
     "{\"20\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"../../etc/passwd\"}},"
     " \"21\": {\"class_type\": \"VAEEncode\", \"inputs\": {\"pixels\": [\"20\", 0], \"vae\": [\"4\", 2]}},"
     " \"3/inputs/latent_image\": [\"21\", 0]}", NULL, NODE_FAILED, "20", "value_not_in_list"},
    {"lora_unknown",
     "{\"12\": {\"class_type\": \"LoraLoader\", \"inputs\": {\"model\": [\"4\", 0], \"clip\": [\"4\", 1],"
     " \"lora_name\": \"zzz.safetensors\", \"strength_model\": 1, \"strength_clip\": 1}},"
     " \"3/inputs/model\": [\"12\", 0]}", NULL, NODE_FAILED, "12", "value_not_in_list"},
    {"negative_other_clip",
     "{\"13\": {\"class_type\": \"CLIPSetLastLayer\", \"inputs\": {\"clip\": [\"4\", 1],"
     " \"stop_at_clip_layer\": -2}}, \"7/inputs/clip\": [\"13\", 0]}", NULL, NODE_FAILED, "7",
     "unsupported_graph"},
    {"inputs_not_object", "{\"5/inputs\": 5}", NULL, NODE_FAILED, "5", "invalid_prompt"},
    {"clip_layer_zero",
     "{\"13\": {\"class_type\": \"CLIPSetLastLayer\", \"inputs\": {\"clip\": [\"4\", 1],"
     " \"stop_at_clip_layer\": 0}}, \"6/inputs/clip\": [\"13\", 0], \"7/inputs/clip\": [\"13\", 0]}",
     NULL, NODE_FAILED, "13", "value_bigger_than_max"},
};

/* The error body's shape, and that it names what the case expects. */
int check_bad(const bad_case *c)
{
    cJSON *w = c->raw ? parse(c->raw) : patched(c->patch);
    ASSERT_TRUE(w != NULL);
    comfy_plan plan;
    cJSON *err = NULL;
    int rc = compile_it(w, &plan, &err);
    cJSON_Delete(w);
    if (rc == 0) {
        comfy_plan_free(&plan);
        TSR_FAIL("%s: compiled, want %s", c->name, c->type);
    }
    ASSERT_TRUE(err != NULL);
    const cJSON *e = cJSON_GetObjectItem(err, "error");
    const cJSON *ne = cJSON_GetObjectItem(err, "node_errors");
    ASSERT_TRUE(cJSON_IsObject(e) && cJSON_IsObject(ne));
    ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
    ASSERT_TRUE(cJSON_IsObject(cJSON_GetObjectItem(e, "extra_info")));
    const cJSON *type = cJSON_GetObjectItem(e, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, c->type) != 0) {
        char *t = cJSON_PrintUnformatted(err);
        fprintf(stderr, "%s: want %s, got %s\n", c->name, c->type, t);
        free(t);
        cJSON_Delete(err);
        return 1;
    }
    bool found = c->node_type == NULL;
    const cJSON *entry;
    cJSON_ArrayForEach(entry, ne) {
        if (c->node && strcmp(entry->string, c->node) != 0)
            continue;
        ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(entry, "class_type")));
        ASSERT_TRUE(cJSON_IsArray(cJSON_GetObjectItem(entry, "dependent_outputs")));
        const cJSON *er;
        cJSON_ArrayForEach(er, cJSON_GetObjectItem(entry, "errors")) {
            const cJSON *et = cJSON_GetObjectItem(er, "type");
            ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(er, "details")));
            if (c->node_type && cJSON_IsString(et) && strcmp(et->valuestring, c->node_type) == 0)
                found = true;
        }
    }
    if (!found) {
        char *t = cJSON_PrintUnformatted(err);
        fprintf(stderr, "%s: want node %s with %s, got %s\n", c->name, c->node ? c->node : "*",
                c->node_type, t);
        free(t);
    }
    cJSON_Delete(err);
    return found ? 0 : 1;
}

static int test_hostile(void)
{
    int failed = 0;
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++)
        failed += check_bad(&k_bad[i]);
    printf("  %zu hostile workflows, %d wrong\n", sizeof k_bad / sizeof k_bad[0], failed);
    return failed ? 1 : 0;
}

/* Bounds: nodes, depth, id length, string length. */
static int test_bounds(void)
{
    /* 300 nodes */
    cJSON *w = patched(NULL);
    for (int i = 0; i < 300; i++) {
        char id[16];
        snprintf(id, sizeof id, "n%d", i);
        cJSON *n = cJSON_AddObjectToObject(w, id);
        cJSON_AddStringToObject(n, "class_type", "EmptyLatentImage");
        cJSON_AddObjectToObject(n, "inputs");
    }
    bad_case c = {"too_many_nodes", NULL, NULL, "invalid_prompt", NULL, NULL};
    char *text = cJSON_PrintUnformatted(w);
    cJSON_Delete(w);
    c.raw = text;
    int rc = check_bad(&c);
    free(text);
    ASSERT_EQ(rc, 0);
    /* a CLIPSetLastLayer chain 100 deep */
    w = patched(NULL);
    for (int i = 0; i < 100; i++) {
        char id[16], prev[16];
        snprintf(id, sizeof id, "c%d", i);
        snprintf(prev, sizeof prev, "c%d", i - 1);
        cJSON *n = cJSON_AddObjectToObject(w, id);
        cJSON_AddStringToObject(n, "class_type", "CLIPSetLastLayer");
        cJSON *in = cJSON_AddObjectToObject(n, "inputs");
        cJSON *link = cJSON_AddArrayToObject(in, "clip");
        cJSON_AddItemToArray(link, cJSON_CreateString(i ? prev : "4"));
        cJSON_AddItemToArray(link, cJSON_CreateNumber(i ? 0 : 1));
        cJSON_AddNumberToObject(in, "stop_at_clip_layer", -1);
    }
    cJSON *clip = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(w, "6"), "inputs"),
                                      "clip");
    cJSON_ReplaceItemInArray(clip, 0, cJSON_CreateString("c99"));
    cJSON_ReplaceItemInArray(clip, 1, cJSON_CreateNumber(0));
    text = cJSON_PrintUnformatted(w);
    cJSON_Delete(w);
    bad_case d = {"too_deep", NULL, text, NODE_FAILED, NULL, "graph_too_deep"};
    rc = check_bad(&d);
    free(text);
    ASSERT_EQ(rc, 0);
    /* a 100-byte id, an empty id */
    char big[300];
    snprintf(big, sizeof big, "{\"%0100d\": {\"class_type\": \"SaveImage\", \"inputs\": {}}}", 7);
    bad_case e = {"long_id", NULL, big, "invalid_prompt", NULL, NULL};
    ASSERT_EQ(check_bad(&e), 0);
    bad_case f = {"empty_id", NULL, "{\"\": {\"class_type\": \"SaveImage\", \"inputs\": {}}}",
                  "invalid_prompt", NULL, NULL};
    ASSERT_EQ(check_bad(&f), 0);
    /* a 70,000-byte prompt */
    size_t n = 70000;
    char *s = malloc(n + 64);
    ASSERT_TRUE(s != NULL);
    memcpy(s, "{\"6/inputs/text\": \"", 19);
    memset(s + 19, 'a', n);
    memcpy(s + 19 + n, "\"}", 3);
    bad_case g = {"long_text", s, NULL, NODE_FAILED, "6", "value_too_long"};
    rc = check_bad(&g);
    free(s);
    ASSERT_EQ(rc, 0);
    return 0;
}

/* Several errors are reported at once, each naming its input. */
static int test_all_errors(void)
{
    cJSON *w = patched("{\"3/inputs/seed\": -1, \"3/inputs/steps\": 0, \"5/inputs/width\": 1}");
    comfy_plan plan;
    cJSON *err = NULL;
    ASSERT_EQ(compile_it(w, &plan, &err), -1);
    cJSON_Delete(w);
    const cJSON *ne = cJSON_GetObjectItem(err, "node_errors");
    ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(ne, "3"), "errors")), 2);
    ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(ne, "5"), "errors")), 1);
    ASSERT_STR_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(ne, "3"), "class_type")->valuestring,
                  "KSampler");
    const cJSON *deps = cJSON_GetObjectItem(cJSON_GetObjectItem(ne, "5"), "dependent_outputs");
    ASSERT_EQ(cJSON_GetArraySize(deps), 1);
    ASSERT_STR_EQ(cJSON_GetArrayItem(deps, 0)->valuestring, "9");
    cJSON_Delete(err);
    return 0;
}

/* Compile a patch of the base; the job's JSON text (owned). */
char *job_text(const char *patch, comfy_plan *plan)
{
    cJSON *w = patched(patch);
    cJSON *err = NULL;
    int rc = compile_it(w, plan, &err);
    cJSON_Delete(w);
    if (rc < 0) {
        char *t = cJSON_PrintUnformatted(err);
        fprintf(stderr, "did not compile: %s\n", t);
        free(t);
        cJSON_Delete(err);
        return NULL;
    }
    return cJSON_PrintUnformatted(plan->chains[0].job);
}

static int test_txt2img(void)
{
    comfy_plan plan;
    char *t = job_text("{\"3/inputs/seed\": 18446744073709551615, \"5/inputs/batch_size\": 2}",
                       &plan);
    ASSERT_TRUE(t != NULL);
    /* the seed keeps its 64 bits as the literal the native reader takes */
    ASSERT_STR_EQ(svc_json_literal(cJSON_GetObjectItem(plan.chains[0].job, "seed")), "18446744073709551615");
    cJSON_DeleteItemFromObject(plan.chains[0].job, "seed");
    free(t);
    t = cJSON_PrintUnformatted(plan.chains[0].job);
    ASSERT_STR_EQ(t, "{\"prompt\":\"a red apple\",\"negative_prompt\":\"blurry\",\"clip_skip\":1,"
                     "\"steps\":4,\"cfg_scale\":7.5,"
                     "\"sampler\":\"euler\",\"scheduler\":\"comfy_normal\",\"rng\":\"cpu\","
                     "\"width\":64,\"height\":64,\"n\":2,\"comfy_batch_noise\":true}");
    ASSERT_EQ(plan.n_outputs, 1);
    ASSERT_STR_EQ(plan.outputs[0].node, "9");
    ASSERT_EQ(plan.n_chains, 1);
    ASSERT_STR_EQ(plan.chains[0].sampler_node, "3");
    /* dependencies first, the output last; all seven nodes */
    ASSERT_EQ(plan.n_order, 7);
    ASSERT_STR_EQ(plan.order[plan.n_order - 1], "9");
    ASSERT_STR_EQ(plan.order[0], "4");
    free(t);
    comfy_plan_free(&plan);
    return 0;
}

/* ComfyUI's scheduler names: the ComfyUI-exact comfy_* schedule where the
 * sampler takes one, else diffusers' nearest or (none) the comfy_* name the
 * engine refuses; ComfyUI's ddim is euler. */
static int test_scheduler_map(void)
{
    static const char *const cases[][3] = {
        {"euler", "normal", "\"sampler\":\"euler\",\"scheduler\":\"comfy_normal\""},
        {"euler", "beta", "\"sampler\":\"euler\",\"scheduler\":\"comfy_beta\""},
        {"dpmpp_2m", "karras", "\"sampler\":\"dpmpp_2m\",\"scheduler\":\"comfy_karras\""},
        {"euler_ancestral", "simple", "\"sampler\":\"euler_a\",\"scheduler\":\"comfy_simple\""},
        {"heun", "ddim_uniform", "\"sampler\":\"heun\",\"scheduler\":\"comfy_ddim_uniform\""},
        {"lms", "sgm_uniform", "\"sampler\":\"lms\",\"scheduler\":\"comfy_sgm_uniform\""},
        {"ddim", "exponential", "\"sampler\":\"euler\",\"scheduler\":\"comfy_exponential\""},
        {"uni_pc", "normal", "\"sampler\":\"unipc\",\"scheduler\":\"default\""},
        {"dpmpp_2m_sde", "karras", "\"sampler\":\"dpmpp_2m_sde\",\"scheduler\":\"karras\""},
        {"uni_pc", "beta", "\"sampler\":\"unipc\",\"scheduler\":\"comfy_beta\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char patch[256];
        snprintf(patch, sizeof patch,
                 "{\"3/inputs/sampler_name\": \"%s\", \"3/inputs/scheduler\": \"%s\"}",
                 cases[i][0], cases[i][1]);
        comfy_plan plan;
        char *t = job_text(patch, &plan);
        ASSERT_TRUE(t != NULL);
        if (!strstr(t, cases[i][2]))
            TSR_FAIL("%s + %s: %s has no %s", cases[i][0], cases[i][1], t, cases[i][2]);
        free(t);
        comfy_plan_free(&plan);
    }
    return 0;
}

static int test_hires(void)
{
    comfy_plan plan;
    char *t = job_text(
        "{\"10\": {\"class_type\": \"LatentUpscaleBy\", \"inputs\": {\"samples\": [\"3\", 0],"
        " \"upscale_method\": \"nearest-exact\", \"scale_by\": 2.0}}, \"11\": {\"class_type\":"
        " \"KSampler\", \"inputs\": {\"seed\": 42, \"steps\": 3, \"cfg\": 7.5, \"sampler_name\":"
        " \"euler\", \"scheduler\": \"normal\", \"denoise\": 0.5, \"model\": [\"4\", 0], \"positive\":"
        " [\"6\", 0], \"negative\": [\"7\", 0], \"latent_image\": [\"10\", 0]}},"
        " \"8/inputs/samples\": [\"11\", 0]}", &plan);
    ASSERT_TRUE(t != NULL);
    ASSERT_TRUE(strstr(t, "\"hires_scale\":2,") != NULL);
    ASSERT_TRUE(strstr(t, "\"hires_upscaler\":\"Latent (nearest-exact)\"") != NULL);
    ASSERT_TRUE(strstr(t, "\"hires_steps\":3,\"hires_strength\":0.5") != NULL);
    ASSERT_TRUE(strstr(t, "\"steps\":4,") != NULL);
    ASSERT_STR_EQ(plan.chains[0].sampler_node, "11");
    free(t);
    comfy_plan_free(&plan);
    return 0;
}

/* KSampler -> VAEDecode -> ImageScale -> VAEEncode -> KSampler: the hires
 * fix in image space (lanczos -> Lanczos, nearest-exact -> Nearest); the
 * methods the engine has no path for, and crop center, are refused on
 * ImageScale. */
static int image_scale_job(const char *method, const char *crop, int w, int h, comfy_plan *plan,
                           char **text, cJSON **err)
{
    char wf[1024];
    snprintf(wf, sizeof wf,
             "{\"10\": {\"class_type\": \"ImageScale\", \"inputs\": {\"image\": [\"8\", 0],"
             " \"upscale_method\": \"%s\", \"width\": %d, \"height\": %d, \"crop\": \"%s\"}},"
             " \"12\": {\"class_type\": \"VAEEncode\", \"inputs\": {\"pixels\": [\"10\", 0],"
             " \"vae\": [\"4\", 2]}},"
             " \"11\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 42, \"steps\": 3,"
             " \"cfg\": 7.5, \"sampler_name\": \"euler\", \"scheduler\": \"normal\", \"denoise\": 0.5,"
             " \"model\": [\"4\", 0], \"positive\": [\"6\", 0], \"negative\": [\"7\", 0],"
             " \"latent_image\": [\"12\", 0]}},"
             " \"13\": {\"class_type\": \"VAEDecode\", \"inputs\": {\"samples\": [\"11\", 0],"
             " \"vae\": [\"4\", 2]}}, \"9/inputs/images\": [\"13\", 0]}",
             method, w, h, crop);
    cJSON *jw = patched(wf);
    *err = NULL;
    *text = NULL;
    int rc = compile_it(jw, plan, err);
    cJSON_Delete(jw);
    if (rc < 0)
        return -1;
    *text = cJSON_PrintUnformatted(plan->chains[0].job);
    return 0;
}

static int test_image_scale(void)
{
    comfy_plan plan;
    char *t = NULL;
    cJSON *err = NULL;
    ASSERT_TRUE(image_scale_job("lanczos", "disabled", 128, 96, &plan, &t, &err) == 0);
    ASSERT_TRUE(strstr(t, "\"hires_width\":128,\"hires_height\":96,\"hires_upscaler\":\"Lanczos\"") != NULL);
    ASSERT_TRUE(strstr(t, "\"hires_steps\":3,\"hires_strength\":0.5") != NULL);
    ASSERT_TRUE(strstr(t, "\"scheduler\":\"comfy_normal\"") != NULL);
    ASSERT_TRUE(strstr(t, "init_image") == NULL);
    ASSERT_STR_EQ(plan.chains[0].sampler_node, "11");
    free(t);
    comfy_plan_free(&plan);
    ASSERT_TRUE(image_scale_job("nearest-exact", "disabled", 0, 128, &plan, &t, &err) == 0);
    ASSERT_TRUE(strstr(t, "\"hires_width\":0,\"hires_height\":128,\"hires_upscaler\":\"Nearest\"") != NULL);
    free(t);
    comfy_plan_free(&plan);
    static const char *const refused[][3] = {
        {"bilinear", "disabled", "upscale_method"}, {"area", "disabled", "upscale_method"},
        {"bicubic", "disabled", "upscale_method"}, {"lanczos", "center", "crop"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        ASSERT_TRUE(image_scale_job(refused[i][0], refused[i][1], 128, 128, &plan, &t, &err) < 0);
        char *e = cJSON_PrintUnformatted(err);
        ASSERT_TRUE(e != NULL);
        if (!strstr(e, "\"10\"") || !strstr(e, refused[i][2]))
            TSR_FAIL("%s/%s: %s", refused[i][0], refused[i][1], e);
        free(e);
        cJSON_Delete(err);
    }
    ASSERT_TRUE(image_scale_job("lanczos", "disabled", 0, 0, &plan, &t, &err) < 0);
    cJSON_Delete(err);
    return 0;
}

static int test_lora_clip_skip(void)
{
    comfy_plan plan;
    char *t = job_text(
        "{\"12\": {\"class_type\": \"LoraLoader\", \"inputs\": {\"model\": [\"4\", 0], \"clip\":"
        " [\"4\", 1], \"lora_name\": \"a.safetensors\", \"strength_model\": 0.8, \"strength_clip\":"
        " 0.5}}, \"14\": {\"class_type\": \"LoraLoader\", \"inputs\": {\"model\": [\"4\", 0], \"clip\":"
        " [\"12\", 1], \"lora_name\": \"b.safetensors\", \"strength_model\": 1, \"strength_clip\": 0.25}},"
        " \"13\": {\"class_type\": \"CLIPSetLastLayer\", \"inputs\": {\"clip\": [\"14\", 1],"
        " \"stop_at_clip_layer\": -2}}, \"3/inputs/model\": [\"12\", 0], \"6/inputs/clip\": [\"13\", 0],"
        " \"7/inputs/clip\": [\"13\", 0]}", &plan);
    ASSERT_TRUE(t != NULL);
    ASSERT_TRUE(strstr(t, "\"clip_skip\":2,") != NULL);
    /* a: on both paths; b: only on the CLIP path (its model output unused) */
    ASSERT_TRUE(strstr(t, "\"loras\":[{\"name\":\"a\",\"unet_weight\":0.8,\"te_weight\":0.5},"
                          "{\"name\":\"b\",\"unet_weight\":0,\"te_weight\":0.25}]") != NULL);
    free(t);
    comfy_plan_free(&plan);
    return 0;
}

static int test_img2img(void)
{
    comfy_plan plan;
    char *t = job_text(
        "{\"20\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"in.png\"}},"
        " \"21\": {\"class_type\": \"VAEEncode\", \"inputs\": {\"pixels\": [\"20\", 0], \"vae\":"
        " [\"4\", 2]}}, \"3/inputs/latent_image\": [\"21\", 0], \"3/inputs/denoise\": 0.6}", &plan);
    ASSERT_TRUE(t != NULL);
    ASSERT_TRUE(strstr(t, "\"init_image\":\"iVBORw0KGgo=\",\"strength\":0.6") != NULL);
    ASSERT_TRUE(strstr(t, "\"width\"") == NULL);
    free(t);
    comfy_plan_free(&plan);
    return 0;
}

static int test_inpaint(void)
{
    comfy_plan plan;
    const char *load =
        "\"20\": {\"class_type\": \"LoadImage\", \"inputs\": {\"image\": \"in.png\"}},";
    char patch[1024];
    snprintf(patch, sizeof patch,
             "{%s \"21\": {\"class_type\": \"VAEEncode\", \"inputs\": {\"pixels\": [\"20\", 0],"
             " \"vae\": [\"4\", 2]}}, \"22\": {\"class_type\": \"SetLatentNoiseMask\", \"inputs\":"
             " {\"samples\": [\"21\", 0], \"mask\": [\"20\", 1]}}, \"3/inputs/latent_image\":"
             " [\"22\", 0], \"3/inputs/denoise\": 0.7}", load);
    char *t = job_text(patch, &plan);
    ASSERT_TRUE(t != NULL);
    ASSERT_TRUE(strstr(t, "\"init_image\":\"iVBORw0KGgo=\",\"mask\":\"iVBORw0KGgo=\","
                          "\"strength\":0.7,\"mask_fill\":1") != NULL);
    free(t);
    comfy_plan_free(&plan);
    snprintf(patch, sizeof patch,
             "{%s \"22\": {\"class_type\": \"VAEEncodeForInpaint\", \"inputs\": {\"pixels\":"
             " [\"20\", 0], \"vae\": [\"4\", 2], \"mask\": [\"20\", 1], \"grow_mask_by\": 6}},"
             " \"3/inputs/latent_image\": [\"22\", 0]}", load);
    t = job_text(patch, &plan);
    ASSERT_TRUE(t != NULL);
    ASSERT_TRUE(strstr(t, "\"strength\":1,\"mask_fill\":0") != NULL);
    free(t);
    comfy_plan_free(&plan);
    /* a noise mask on an empty latent: nothing to inpaint */
    snprintf(patch, sizeof patch,
             "{%s \"22\": {\"class_type\": \"SetLatentNoiseMask\", \"inputs\": {\"samples\":"
             " [\"5\", 0], \"mask\": [\"20\", 1]}}, \"3/inputs/latent_image\": [\"22\", 0]}", load);
    bad_case c = {"noise_mask_on_empty", patch, NULL, NODE_FAILED, "22", "unsupported_graph"};
    ASSERT_EQ(check_bad(&c), 0);
    /* the IMAGE output where the MASK goes */
    snprintf(patch, sizeof patch,
             "{%s \"22\": {\"class_type\": \"VAEEncodeForInpaint\", \"inputs\": {\"pixels\":"
             " [\"20\", 0], \"vae\": [\"4\", 2], \"mask\": [\"20\", 0], \"grow_mask_by\": 6}},"
             " \"3/inputs/latent_image\": [\"22\", 0]}", load);
    bad_case d = {"mask_from_image", patch, NULL, NODE_FAILED, "22", "return_type_mismatch"};
    ASSERT_EQ(check_bad(&d), 0);
    return 0;
}

/* Unreachable nodes are not validated (ComfyUI's rule), but must be known classes. */
static int test_unreachable(void)
{
    comfy_plan plan;
    char *t = job_text("{\"50\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": -5}}}", &plan);
    ASSERT_TRUE(t != NULL);
    free(t);
    comfy_plan_free(&plan);
    return 0;
}

/* /object_info renders every class with its inputs, in ComfyUI's shape. */
static int test_object_info(void)
{
    comfy_context ctx = {.checkpoints = k_ckpt, .loras = k_loras, .images = k_images};
    cJSON *o = comfy_object_info(&ctx, NULL);
    const comfy_class *classes;
    int n = comfy_classes(&classes);
    ASSERT_EQ(cJSON_GetArraySize(o), n);
    const cJSON *ks = cJSON_GetObjectItem(o, "KSampler");
    const cJSON *req = cJSON_GetObjectItem(cJSON_GetObjectItem(ks, "input"), "required");
    const cJSON *steps = cJSON_GetObjectItem(req, "steps");
    ASSERT_STR_EQ(cJSON_GetArrayItem(steps, 0)->valuestring, "INT");
    ASSERT_NEAR(cJSON_GetObjectItem(cJSON_GetArrayItem(steps, 1), "default")->valuedouble, 20, 0);
    const cJSON *ck = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "CheckpointLoaderSimple"),
                                                "input"), "required"), "ckpt_name");
    ASSERT_STR_EQ(cJSON_GetArrayItem(cJSON_GetArrayItem(ck, 0), 0)->valuestring, "demo");
    ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "SaveImage"),
                                                  "output_node")));
    cJSON_Delete(o);
    ASSERT_TRUE(comfy_object_info(&ctx, "NoSuchNode") == NULL);
    return 0;
}

/* The websocket's accept key against RFC 6455's own example (section 1.3). */
static int test_ws_accept(void)
{
    char out[29];
    ASSERT_TRUE(comfy_ws_accept("dGhlIHNhbXBsZSBub25jZQ==", out));
    ASSERT_STR_EQ(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    ASSERT_TRUE(!comfy_ws_accept("short", out));
    return 0;
}

static const tsr_test_entry k_tests[] = {
    {"ws_accept", test_ws_accept},
    {"hostile", test_hostile},       {"bounds", test_bounds},
    {"all_errors", test_all_errors}, {"txt2img", test_txt2img}, {"scheduler_map", test_scheduler_map},
    {"image_scale", test_image_scale},
    {"hires", test_hires},           {"lora_clip_skip", test_lora_clip_skip},
    {"img2img", test_img2img},       {"inpaint", test_inpaint},
    {"unreachable", test_unreachable},
    {"two_chains", test_two_chains}, {"scaled_output", test_scaled_output},
    {"img2img_scaled", test_img2img_scaled},
    {"object_info", test_object_info},
};

TSR_TEST_TABLE_MAIN(k_tests)
