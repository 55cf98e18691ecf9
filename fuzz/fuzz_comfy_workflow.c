/*
 * fuzz/fuzz_comfy_workflow.c - libFuzzer target for ComfyUI workflows
 * (service/api/comfy/comfy_graph.c, over service/base/json.c's reader).
 *
 * Why: POST /prompt hands the validator an arbitrary graph from the
 * network - cycles, dangling links, deep chains, huge ids, wrong types.
 * The input is the body's "prompt" object as JSON text.  Checked: the
 * compiler never crashes or leaks (ASan), it answers exactly one of a plan
 * (a native job object with a prompt) or ComfyUI's error body (an "error"
 * object with type and message, and a "node_errors" object), and it is
 * deterministic (a second compile gives the same job text or error text).
 * No engine is loaded; LoadImage's file is a fixed stand-in.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comfy.h"
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
    static const char *const images[] = {"in.png", NULL};
    comfy_context ctx = {.checkpoints = ckpt, .loras = loras, .images = images, .load_image = load,
                         .load_mask = load};
    comfy_plan plan;
    cJSON *err = NULL;
    *rc = comfy_compile(prompt, &ctx, &plan, &err);
    char *text;
    if (*rc == 0) {
        CHECK(err == NULL && cJSON_IsObject(plan.job));
        CHECK(cJSON_IsString(cJSON_GetObjectItem(plan.job, "prompt")));
        CHECK(plan.n_outputs >= 1 && plan.n_order >= 1);
        text = cJSON_PrintUnformatted(plan.job);
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
