/*
 * fuzz/fuzz_comfy_workflow.c - libFuzzer target for ComfyUI workflows
 * (service/api/comfy/comfy_graph.c, over service/base/json.c's reader).
 *
 * Why: POST /prompt hands the validator an arbitrary graph from the
 * network - cycles, dangling links, deep chains, huge ids, wrong types.
 * The input is the body's "prompt" object as JSON text.  Checked: the
 * compiler never crashes or leaks (ASan), it answers exactly one of a plan
 * (1..COMFY_MAX_CHAINS native job objects, each with a prompt, every output
 * on one of them with at most COMFY_MAX_SCALES ImageScale ops) or
 * ComfyUI's error body (an "error" object with type and message, and a
 * "node_errors" object), and it is deterministic (a second compile gives
 * the same jobs' text or error text).  No engine is loaded; LoadImage's
 * files are fixed stand-ins: "in.png" a header only, "real.png" a real
 * 12x8 PNG, so LoadImage -> ImageScale -> VAEEncode decodes and scales it.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "comfy.h"
#include "images.h"
#include "json.h"

#define CHECK(c)              \
    do {                      \
        if (!(c))             \
            __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *load(void *user, const char *name, char *err, size_t err_size)
{
    (void)user;
    if (strcmp(name, "real.png") == 0) {
        uint8_t rgb[12 * 8 * 3], *png = NULL;
        for (size_t i = 0; i < sizeof rgb; i++)
            rgb[i] = (uint8_t)(i * 37);
        size_t len = 0;
        if (svc_png_encode(rgb, 12, 8, NULL, &png, &len, err, err_size) < 0)
            return NULL;
        char *b64 = svc_base64_encode(png, len);
        free(png);
        return b64;
    }
    if (strcmp(name, "in.png") != 0) {
        strncpy(err, "no such image", err_size - 1);
        err[err_size - 1] = '\0';
        return NULL;
    }
    return strdup("iVBORw0KGgo=");
}

static char *run(const cJSON *prompt, int *rc)
{
    static const char *const ckpt[] = {"demo", NULL};
    static const char *const loras[] = {"a.safetensors", NULL};
    static const char *const images[] = {"in.png", "real.png", NULL};
    comfy_context ctx = {.checkpoints = ckpt, .loras = loras, .images = images, .load_image = load,
                         .load_mask = load};
    comfy_plan plan;
    cJSON *err = NULL;
    *rc = comfy_compile(prompt, &ctx, &plan, &err);
    char *text;
    if (*rc == 0) {
        CHECK(err == NULL && plan.n_chains >= 1 && plan.n_chains <= COMFY_MAX_CHAINS);
        CHECK(plan.n_outputs >= plan.n_chains && plan.n_order >= 1);
        cJSON *all = cJSON_CreateArray();
        for (int c = 0; c < plan.n_chains; c++) {
            CHECK(cJSON_IsObject(plan.chains[c].job));
            CHECK(cJSON_IsString(cJSON_GetObjectItem(plan.chains[c].job, "prompt")));
            cJSON_AddItemToArray(all, cJSON_Duplicate(plan.chains[c].job, true));
        }
        for (int k = 0; k < plan.n_outputs; k++) {
            const comfy_output *o = &plan.outputs[k];
            CHECK(o->chain >= 0 && o->chain < plan.n_chains);
            CHECK(o->n_scales >= 0 && o->n_scales <= COMFY_MAX_SCALES);
            cJSON_AddItemToArray(all, cJSON_CreateNumber(o->chain * 10 + o->n_scales));
        }
        text = cJSON_PrintUnformatted(all);
        cJSON_Delete(all);
        comfy_plan_free(&plan);
    } else {
        CHECK(*rc == -1 && err != NULL);
        const cJSON *e = cJSON_GetObjectItem(err, "error");
        CHECK(cJSON_IsObject(e));
        CHECK(cJSON_IsString(cJSON_GetObjectItem(e, "type")));
        CHECK(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
        CHECK(cJSON_IsObject(cJSON_GetObjectItem(err, "node_errors")));
        text = cJSON_PrintUnformatted(err);
        cJSON_Delete(err);
    }
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char msg[128];
    cJSON *prompt = svc_json_parse((const char *)data, size, msg, sizeof msg);
    if (!prompt)
        return 0;
    int rc1, rc2;
    char *a = run(prompt, &rc1), *b = run(prompt, &rc2);
    CHECK(rc1 == rc2);
    CHECK(a && b && strcmp(a, b) == 0);
    free(a);
    free(b);
    cJSON_Delete(prompt);
    return 0;
}
