/*
 * fuzz/fuzz_params.c - libFuzzer target for the HTTP service's request
 * parsing (service/base/json.c, service/api/native/params.c, the base64 decoder in
 * service/base/codec.c and the PNG/JPEG decoder in service/store/images.c).
 *
 * Why: these read bytes from the network before anything else does.  The
 * first input byte picks what to exercise; the rest is the input:
 *   0  a job body: strict JSON -> parameters; a job that parses must come
 *      back unchanged through the journal's form (svc_params_request), as a
 *      restarted server relies on that
 *   1  a batch body: each of `jobs` over `defaults`
 *   2  base64: decode, and a decoded value must survive encode -> decode
 *   3  an image file (PNG or JPEG) as RGB and as gray
 * No engine is loaded: the engine's own checks are not part of this target.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "params.h"
#include "images.h"
#include "util.h"

#define CHECK(c)              \
    do {                      \
        if (!(c))             \
            __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same_params(const svc_params *a, const svc_params *b)
{
    CHECK(strcmp(a->prompt, b->prompt) == 0);
    CHECK((a->negative_prompt == NULL) == (b->negative_prompt == NULL));
    CHECK(!a->negative_prompt || strcmp(a->negative_prompt, b->negative_prompt) == 0);
    CHECK(a->width == b->width && a->height == b->height && a->steps == b->steps);
    CHECK(a->cfg_scale == b->cfg_scale && a->guidance_rescale == b->guidance_rescale);
    CHECK(a->seed == b->seed && a->n == b->n && a->clip_skip == b->clip_skip);
    CHECK(strcmp(a->rng, b->rng) == 0);
    CHECK((a->sampler == NULL) == (b->sampler == NULL));
    CHECK((a->init_rgb == NULL) == (b->init_rgb == NULL));
    CHECK((a->mask_gray == NULL) == (b->mask_gray == NULL));
    if (a->init_rgb) {
        CHECK(a->strength == b->strength);
        CHECK(memcmp(a->init_rgb, b->init_rgb, (size_t)a->width * a->height * 3) == 0);
    }
}

static void job(const cJSON *obj, const cJSON *defaults)
{
    svc_params_ctx ctx = {128, 1024, NULL, NULL};
    svc_params *p = NULL;
    svc_param_error err;
    if (svc_params_parse(obj, defaults, &ctx, &p, &err) < 0) {
        CHECK(err.message[0] != '\0');
        return;
    }
    cJSON *view = svc_params_view(p);
    cJSON *req = svc_params_request(p);
    CHECK(view && req);
    char *text = cJSON_PrintUnformatted(req);
    CHECK(text);
    char why[256];
    cJSON *back = svc_json_parse(text, strlen(text), why, sizeof why);
    CHECK(back);
    svc_params *q = NULL;
    CHECK(svc_params_parse(back, NULL, &ctx, &q, &err) == 0);
    same_params(p, q);
    svc_params_unref(q);
    cJSON_Delete(back);
    cJSON_free(text);
    cJSON_Delete(req);
    cJSON_Delete(view);
    svc_params_unref(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char why[256];
    switch (data[0] % 4) {
    case 0: {
        cJSON *o = svc_json_parse(text, len, why, sizeof why);
        if (o)
            job(o, NULL);
        cJSON_Delete(o);
        break;
    }
    case 1: {
        cJSON *o = svc_json_parse(text, len, why, sizeof why);
        const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(o, "jobs");
        const cJSON *defaults = cJSON_GetObjectItemCaseSensitive(o, "defaults");
        const cJSON *it;
        int k = 0;
        cJSON_ArrayForEach(it, jobs)
        {
            if (k++ >= 8)
                break;
            job(it, defaults);
        }
        cJSON_Delete(o);
        break;
    }
    case 2: {
        uint8_t *out = NULL, *again = NULL;
        size_t n = 0, m = 0;
        if (svc_base64_decode(text, len, &out, &n, why, sizeof why)) {
            char *enc = svc_base64_encode(out, n);
            CHECK(enc);
            CHECK(svc_base64_decode(enc, strlen(enc), &again, &m, why, sizeof why));
            CHECK(m == n && memcmp(out, again, n) == 0);
            free(enc);
        }
        free(out);
        free(again);
        break;
    }
    default: {
        for (int channels = 1; channels <= 3; channels += 2) {
            uint8_t *px = NULL;
            int w = 0, h = 0;
            if (svc_image_decode((const uint8_t *)text, len, channels, &px, &w, &h, why,
                                 sizeof why) == 0)
                CHECK(px && w >= 1 && h >= 1 && w <= SVC_IMAGE_MAX_SIDE &&
                      h <= SVC_IMAGE_MAX_SIDE);
            free(px);
        }
        break;
    }
    }
    return 0;
}
