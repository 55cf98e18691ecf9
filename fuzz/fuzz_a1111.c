/*
 * fuzz/fuzz_a1111.c - libFuzzer target for the AUTOMATIC1111 request
 * translator (service/api/a1111/a1111_params.c): an A1111 txt2img / img2img
 * body to native job objects, as /sdapi/v1 reads it before svc_params_parse.
 *
 * Why: the body comes from the network, carries base64 images that are
 * decoded, resized and re-encoded, and every field has its own rules.  The
 * first input byte picks what to exercise; the rest is the input:
 *   0  a txt2img body, 1  an img2img body: a body that translates must give
 *      chunks of at most 16 images that add up to batch_size * n_iter, with
 *      consecutive seeds, each a native object svc_params_parse reads (or
 *      refuses with a message); a refusal has a status and a message
 *   2  a sampler or scheduler name (A1111's spellings)
 * No engine is loaded: the engine's own checks are not part of this target.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "a1111.h"
#include "json.h"
#include "params.h"

#define CHECK(c)              \
    do {                      \
        if (!(c))             \
            __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void body(const cJSON *o, bool img2img)
{
    svc_a1111_defaults d = {1, 1024};
    svc_a1111_req q;
    svc_a1111_error e;
    if (svc_a1111_translate(o, img2img, &d, &q, &e) < 0) {
        CHECK(e.message[0] != '\0');
        CHECK(e.status == 400 || e.status == 422);
        CHECK(q.native == NULL && q.parameters == NULL);
        return;
    }
    CHECK(q.native && q.parameters && q.prompt && q.negative_prompt);
    CHECK(q.total == q.batch_size * q.n_iter && q.total >= 1 && q.total <= SVC_A1111_MAX_IMAGES);
    CHECK(q.sampler_name[0] && q.scheduler[0]);
    svc_params_ctx ctx = {512, 1024, NULL, NULL};
    int chunks = svc_a1111_chunks(&q), images = 0;
    CHECK(chunks >= 1 && chunks <= (SVC_A1111_MAX_IMAGES + 15) / 16);
    for (int k = 0; k < chunks; k++) {
        int n = 0;
        cJSON *c = svc_a1111_chunk(&q, k, &n);
        CHECK(c && n >= 1 && n <= SVC_MAX_IMAGES_PER_JOB);
        images += n;
        svc_params *p = NULL;
        svc_param_error pe;
        if (svc_params_parse(c, NULL, &ctx, &p, &pe) == 0) {
            CHECK(p->n == n && p->seed == q.seed + (uint64_t)k * SVC_MAX_IMAGES_PER_JOB);
            CHECK(p->width == q.width && p->height == q.height && p->steps == q.steps);
            CHECK((p->init_rgb != NULL) == img2img);
            svc_params_unref(p);
        } else {
            CHECK(pe.message[0] != '\0');
            CHECK(svc_a1111_field(pe.field) != NULL);
        }
        cJSON_Delete(c);
    }
    CHECK(images == q.total);
    char *text = cJSON_PrintUnformatted(q.parameters);
    CHECK(text);
    cJSON_free(text);
    svc_a1111_req_free(&q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char why[256];
    switch (data[0] % 3) {
    case 0:
    case 1: {
        cJSON *o = svc_json_parse(text, len, why, sizeof why);
        if (o)
            body(o, data[0] % 3 == 1);
        cJSON_Delete(o);
        break;
    }
    default: {
        char name[128];
        size_t n = len < sizeof name - 1 ? len : sizeof name - 1;
        memcpy(name, text, n);
        name[n] = '\0';
        const char *s = NULL, *a = NULL, *sched = NULL, *label = NULL;
        if (svc_a1111_sampler(name, &s, &a, &sched))
            CHECK(s && a && s[0] && a[0]);
        if (svc_a1111_schedule(name, &sched, &label))
            CHECK(sched && label);
        break;
    }
    }
    return 0;
}
