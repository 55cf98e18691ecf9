/*
 * service/api/native/params.c - see params.h.
 */
#include "params.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fields.h"
#include "images.h"
#include "json.h"
#include "util.h"

/* The native reader: svc_fields over the job and its batch's defaults. */
typedef struct parser {
    svc_fields f;
} parser;

static int fail(parser *ps, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(parser *ps, const char *field, const char *fmt, ...)
{
    char msg[sizeof ps->f.message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return svc_fields_fail(&ps->f, field, "%s", msg);
}

static const cJSON *get(parser *ps, const char *name)
{
    return svc_fields_get(&ps->f, name);
}

static void describe(parser *ps, const cJSON *it, char *buf, size_t size)
{
    svc_fields_describe(&ps->f, it, buf, size);
}

/* A string, copied (NULL when absent). */
static int get_string(parser *ps, const char *name, size_t max_len, bool required, char **out)
{
    const char *v = NULL;
    *out = NULL;
    if (svc_fields_string(&ps->f, name, max_len, required, &v) < 0)
        return -1;
    if (v && !(*out = strdup(v)))
        return fail(ps, name, "out of memory");
    return 0;
}

static int get_seed(parser *ps, uint64_t *seed, bool *random)
{
    if (svc_fields_seed(&ps->f, "seed", true,
                        "an integer between 0 and 18446744073709551615, or -1 for random", seed,
                        random) < 0)
        return -1;
    /* A1111 draws 32-bit seeds; so does `tessera generate` */
    if (*random)
        *seed = svc_random_u64() & 0xFFFFFFFFull;
    return 0;
}

/* base64 (optionally a data: URL) -> file bytes -> pixels. */
static int get_image(parser *ps, const char *name, int channels, uint8_t **file, size_t *file_len,
                     uint8_t **pixels, int *w, int *h)
{
    *file = NULL;
    *pixels = NULL;
    const cJSON *it = get(ps, name);
    if (!it)
        return 0;
    if (!cJSON_IsString(it) || !it->valuestring) {
        char got[64];
        describe(ps, it, got, sizeof got);
        return fail(ps, name, "%s must be a base64 PNG or JPEG string, got %s", name, got);
    }
    if (it->type & SVC_JSON_HAS_NUL)
        return fail(ps, name, "%s is not valid base64: it contains U+0000", name);
    char why[256];
    if (svc_fields_base64(name, it->valuestring, file, file_len, why, sizeof why) < 0)
        return fail(ps, name, "%s", why);
    if (svc_image_decode(*file, *file_len, channels, pixels, w, h, why, sizeof why) < 0)
        return fail(ps, name, "%s: %s", name, why);
    return 0;
}

/* "loras": [{"name": "x", "weight": 0.8, "te_weight": 1, "unet_weight": 0.5}], the
 * weights in -1000..1000 (te_weight and unet_weight default to weight, which
 * defaults to 1).  Names are checked by the engine (--lora-dir). */
static int get_loras(parser *ps, svc_params *p)
{
    const cJSON *a = get(ps, "loras");
    if (!a || cJSON_IsNull(a))
        return 0;
    if (!cJSON_IsArray(a))
        return fail(ps, "loras", "loras must be an array of {name, weight}");
    if (cJSON_GetArraySize(a) > SVC_MAX_LORAS)
        return fail(ps, "loras", "loras has %d entries; at most %d", cJSON_GetArraySize(a),
                    SVC_MAX_LORAS);
    const cJSON *it;
    cJSON_ArrayForEach(it, a)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (!cJSON_IsObject(it) || !cJSON_IsString(name) || !name->valuestring[0] ||
            strlen(name->valuestring) > 128)
            return fail(ps, "loras", "loras[%d] needs a \"name\" of 1..128 bytes", p->n_loras);
        if (name->type & SVC_JSON_HAS_NUL) /* "k\u0000../x" must not become "k" */
            return fail(ps, "loras", "loras[%d].name holds a NUL byte", p->n_loras);
        double w[3] = {1.0, 0, 0};
        static const char *keys[3] = {"weight", "te_weight", "unet_weight"};
        for (int k = 0; k < 3; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, keys[k]);
            if (k > 0)
                w[k] = w[0];
            if (!v || cJSON_IsNull(v))
                continue;
            if (!cJSON_IsNumber(v) || !(v->valuedouble >= -1000 && v->valuedouble <= 1000))
                return fail(ps, "loras", "loras[%d].%s must be a number in -1000..1000",
                            p->n_loras, keys[k]);
            w[k] = v->valuedouble;
        }
        tsr_lora_spec *s = &p->loras[p->n_loras];
        if (!(s->name = strdup(name->valuestring)))
            return fail(ps, NULL, "out of memory");
        s->te_weight = w[1];
        s->unet_weight = w[2];
        p->n_loras++;
    }
    return 0;
}

static void params_free(svc_params *p)
{
    if (!p)
        return;
    free(p->prompt);
    free(p->negative_prompt);
    free(p->sampler);
    free(p->scheduler);
    free(p->rng);
    free(p->hires_upscaler);
    for (int i = 0; i < p->n_loras; i++)
        free((char *)p->loras[i].name);
    free(p->init_rgb);
    free(p->mask_gray);
    free(p->init_file);
    free(p->mask_file);
    free(p);
}

svc_params *svc_params_ref(svc_params *p)
{
    atomic_fetch_add(&p->refs, 1);
    return p;
}

void svc_params_unref(svc_params *p)
{
    if (p && atomic_fetch_sub(&p->refs, 1) == 1)
        params_free(p);
}

static int side_ok(long long v, int max_size)
{
    return v >= TSR_MIN_SIZE && v <= max_size && v % 8 == 0;
}

/* width / height: an integer, a multiple of 8 within TSR_MIN_SIZE..max. */
static int get_side(parser *ps, const char *name, int max_size, long long *out, bool *given)
{
    const cJSON *it = get(ps, name);
    *given = it != NULL;
    *out = 0;
    if (!it)
        return 0;
    char got[64];
    describe(ps, it, got, sizeof got);
    const char *lit = svc_json_literal(it);
    long long v = 0;
    if (cJSON_IsNumber(it) && lit && svc_json_literal_is_integer(lit)) {
        errno = 0;
        v = strtoll(lit, NULL, 10);
        if (errno == ERANGE)
            v = 0;
    }
    if (!side_ok(v, max_size))
        return fail(ps, name, "%s must be an integer multiple of 8 between %d and %d, got %s", name,
                    TSR_MIN_SIZE, max_size, got);
    *out = v;
    return 0;
}

/* The reader's refusal as the native error; -1. */
static int failed(const parser *ps, svc_param_error *err)
{
    snprintf(err->field, sizeof err->field, "%s", ps->f.field);
    err->from_defaults = ps->f.from_defaults;
    snprintf(err->message, sizeof err->message, "%s", ps->f.message);
    return -1;
}

int svc_params_parse(const cJSON *job, const cJSON *defaults, const svc_params_ctx *ctx,
                     svc_params **out, svc_param_error *err)
{
    parser ps;
    svc_fields_init(&ps.f, job, defaults && cJSON_IsObject(defaults) ? defaults : NULL, false);
    memset(err, 0, sizeof *err);
    *out = NULL;
    if (!job || !cJSON_IsObject(job)) {
        fail(&ps, NULL, "a job must be a JSON object");
        return failed(&ps, err);
    }
    const int max_size = ctx && ctx->max_size ? ctx->max_size : TSR_MAX_SIZE;
    const int default_size = ctx && ctx->default_size ? ctx->default_size : 512;
    svc_params *p = calloc(1, sizeof *p);
    if (!p) {
        fail(&ps, NULL, "out of memory");
        return failed(&ps, err);
    }
    atomic_init(&p->refs, 1);
    long long n, width, height, steps, clip_skip;
    bool strength_given = false, w_given = false, h_given = false;
    int iw = 0, ih = 0, mw = 0, mh = 0;
    if (get_string(&ps, "prompt", SVC_MAX_PROMPT_BYTES, true, &p->prompt) < 0 ||
        get_string(&ps, "negative_prompt", SVC_MAX_PROMPT_BYTES, false, &p->negative_prompt) < 0 ||
        svc_fields_int(&ps.f, "n", 1, SVC_MAX_IMAGES_PER_JOB, 1, &n) < 0 ||
        get_side(&ps, "width", max_size, &width, &w_given) < 0 ||
        get_side(&ps, "height", max_size, &height, &h_given) < 0 ||
        svc_fields_int(&ps.f, "steps", 1, TSR_MAX_STEPS, 30, &steps) < 0 ||
        svc_fields_number(&ps.f, "cfg_scale", 0, 100, false, 7.5, &p->cfg_scale, NULL) < 0 ||
        svc_fields_number(&ps.f, "guidance_rescale", 0, 1, false, 0, &p->guidance_rescale,
                          NULL) < 0 ||
        get_string(&ps, "sampler", 64, false, &p->sampler) < 0 ||
        get_string(&ps, "scheduler", 64, false, &p->scheduler) < 0 ||
        get_seed(&ps, &p->seed, &p->seed_random) < 0 ||
        get_string(&ps, "rng", 16, false, &p->rng) < 0 ||
        svc_fields_int(&ps.f, "clip_skip", 1, 12, 1, &clip_skip) < 0 ||
        svc_fields_number(&ps.f, "strength", 0, 1, true, 0.75, &p->strength, &strength_given) <
            0 ||
        get_image(&ps, "init_image", 3, &p->init_file, &p->init_file_len, &p->init_rgb, &iw,
                  &ih) < 0 ||
        get_image(&ps, "mask", 1, &p->mask_file, &p->mask_file_len, &p->mask_gray, &mw, &mh) < 0)
        goto bad;
    long long hw, hh, hsteps, fill;
    if (svc_fields_number(&ps.f, "hires_scale", 0, 16, false, 0, &p->hires_scale, NULL) < 0 ||
        svc_fields_int(&ps.f, "hires_width", 0, max_size, 0, &hw) < 0 ||
        svc_fields_int(&ps.f, "hires_height", 0, max_size, 0, &hh) < 0 ||
        svc_fields_int(&ps.f, "hires_steps", 0, TSR_MAX_STEPS, 0, &hsteps) < 0 ||
        svc_fields_number(&ps.f, "hires_strength", 0, 1, true, 0.7, &p->hires_strength, NULL) <
            0 ||
        get_string(&ps, "hires_upscaler", 64, false, &p->hires_upscaler) < 0 ||
        svc_fields_int(&ps.f, "mask_fill", 0, 3, 1, &fill) < 0 || get_loras(&ps, p) < 0 ||
        svc_fields_bool(&ps.f, "tiling", false, false, &p->tiling) < 0 ||
        svc_fields_bool(&ps.f, "comfy_batch_noise", false, false, &p->comfy_batch_noise) < 0)
        goto bad;
    p->hires_width = (int)hw;
    p->hires_height = (int)hh;
    p->hires_steps = (int)hsteps;
    p->mask_fill = (int)fill;
    (void)strength_given; /* without init_image, strength is checked and unused */
    /* sides: given ones must be valid; absent ones come from the init image
     * or the model */
    const bool wi = w_given, hi = h_given;
    if (p->init_rgb) {
        if (!side_ok(iw, max_size) || !side_ok(ih, max_size)) {
            fail(&ps, "init_image",
                 "init_image is %dx%d; its sides must be multiples of 8 between %d and %d", iw, ih,
                 TSR_MIN_SIZE, max_size);
            goto bad;
        }
        if ((wi && width != iw) || (hi && height != ih)) {
            fail(&ps, wi && width != iw ? "width" : "height",
                 "init_image is %dx%d but width/height ask for %lldx%lld (resize the image, or "
                 "leave width and height out)",
                 iw, ih, wi ? width : iw, hi ? height : ih);
            goto bad;
        }
        width = iw;
        height = ih;
    }
    if (p->mask_gray) {
        if (!p->init_rgb) {
            fail(&ps, "mask", "mask needs init_image (the image to inpaint)");
            goto bad;
        }
        if (mw != iw || mh != ih) {
            fail(&ps, "mask", "mask is %dx%d but init_image is %dx%d", mw, mh, iw, ih);
            goto bad;
        }
    }
    if (p->rng && strcmp(p->rng, "cpu") != 0 && strcmp(p->rng, "cuda") != 0) {
        fail(&ps, "rng", "rng must be \"cpu\" or \"cuda\", got \"%.32s\"", p->rng);
        goto bad;
    }
    if (!p->rng && !(p->rng = strdup("cpu"))) {
        fail(&ps, NULL, "out of memory");
        goto bad;
    }
    if (p->sampler && !p->sampler[0]) {
        fail(&ps, "sampler", "sampler must not be empty (leave it out for the model's own)");
        goto bad;
    }
    if (p->scheduler && !p->scheduler[0]) {
        fail(&ps, "scheduler", "scheduler must not be empty (leave it out for the default)");
        goto bad;
    }
    p->n = (int)n;
    p->width = wi || p->init_rgb ? (int)width : default_size;
    p->height = hi || p->init_rgb ? (int)height : default_size;
    p->steps = (int)steps;
    p->clip_skip = (int)clip_skip;
    if (!p->init_rgb)
        p->strength = 0.75;
    int to_w = 0, to_h = 0;
    if (svc_params_hires(p, &to_w, &to_h, NULL) && (to_w > max_size || to_h > max_size)) {
        fail(&ps, p->hires_width || p->hires_height ? "hires_width" : "hires_scale",
             "the hires fix would upscale %dx%d to %dx%d; this server's largest side is %d",
             p->width, p->height, to_w, to_h, max_size);
        goto bad;
    }
    if (ctx && ctx->check) {
        tsr_image_params ep;
        svc_params_to_engine(p, 0, &ep);
        const char *field = NULL;
        int rc = ctx->check(ctx->check_user, &ep, &field);
        if (rc < 0) {
            const char *detail = tsr_last_error();
            fail(&ps, field, "%s", detail && detail[0] ? detail : tsr_strerror(rc));
            goto bad;
        }
    }
    *out = p;
    return 0;
bad:
    params_free(p);
    return failed(&ps, err);
}

void svc_params_to_engine(const svc_params *p, int index, tsr_image_params *o)
{
    tsr_image_params_init(o);
    o->prompt = p->prompt;
    o->negative_prompt = p->negative_prompt;
    o->width = p->width;
    o->height = p->height;
    o->steps = p->steps;
    o->cfg_scale = p->cfg_scale;
    o->guidance_rescale = p->guidance_rescale;
    o->sampler = p->sampler;
    o->schedule = p->scheduler;
    o->seed = p->comfy_batch_noise ? p->seed : p->seed + (uint64_t)index;
    o->noise_index = p->comfy_batch_noise ? index : 0;
    o->rng = p->rng;
    o->clip_skip = p->clip_skip;
    o->init_image = p->init_rgb;
    o->mask = p->mask_gray;
    if (p->init_rgb)
        o->strength = p->strength;
    o->hires_scale = p->hires_scale;
    o->hires_width = p->hires_width;
    o->hires_height = p->hires_height;
    o->hires_steps = p->hires_steps;
    o->hires_strength = p->hires_strength;
    o->hires_upscaler = p->hires_upscaler;
    o->mask_fill = p->mask_fill;
    o->tiling = p->tiling ? 1 : 0;
    o->loras = p->n_loras ? p->loras : NULL;
    o->n_loras = p->n_loras;
}

bool svc_params_hires(const svc_params *p, int *w, int *h, int *steps)
{
    const bool on = p->hires_scale > 0 || p->hires_width > 0 || p->hires_height > 0;
    long long tw = p->width, th = p->height;
    const long long rx = p->hires_width, ry = p->hires_height;
    if (on && rx == 0 && ry == 0) {
        tw = (long long)((double)p->width * p->hires_scale);
        th = (long long)((double)p->height * p->hires_scale);
    } else if (on && (ry == 0 || (rx && (double)p->width / p->height < (double)rx / ry))) {
        tw = rx;
        th = rx * p->height / p->width;
    } else if (on) {
        tw = ry * p->width / p->height;
        th = ry;
    }
    if (w)
        *w = (int)(tw < INT32_MAX ? tw : INT32_MAX);
    if (h)
        *h = (int)(th < INT32_MAX ? th : INT32_MAX);
    if (steps)
        *steps = on ? (p->hires_steps ? p->hires_steps : p->steps) : 0;
    return on;
}

/* The hires and fill fields, when they say something (o: common's). */
static void add_hires(cJSON *o, const svc_params *p)
{
    if (svc_params_hires(p, NULL, NULL, NULL)) {
        svc_json_add_double(o, "hires_scale", p->hires_scale);
        cJSON_AddNumberToObject(o, "hires_width", p->hires_width);
        cJSON_AddNumberToObject(o, "hires_height", p->hires_height);
        cJSON_AddNumberToObject(o, "hires_steps", p->hires_steps);
        svc_json_add_double(o, "hires_strength", p->hires_strength);
        svc_json_add_string_or_null(o, "hires_upscaler", p->hires_upscaler);
    }
    if (p->mask_gray)
        cJSON_AddNumberToObject(o, "mask_fill", p->mask_fill);
    if (p->tiling) /* only when on, like the fields above (so the journal replays it) */
        cJSON_AddBoolToObject(o, "tiling", true);
    if (p->comfy_batch_noise)
        cJSON_AddBoolToObject(o, "comfy_batch_noise", true);
}

static cJSON *common(const svc_params *p)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "prompt", p->prompt);
    svc_json_add_string_or_null(o, "negative_prompt", p->negative_prompt);
    cJSON_AddNumberToObject(o, "width", p->width);
    cJSON_AddNumberToObject(o, "height", p->height);
    cJSON_AddNumberToObject(o, "steps", p->steps);
    svc_json_add_double(o, "cfg_scale", p->cfg_scale);
    svc_json_add_string_or_null(o, "sampler", p->sampler);
    svc_json_add_string_or_null(o, "scheduler", p->scheduler);
    cJSON_AddItemToObject(o, "seed", svc_json_u64(p->seed));
    cJSON_AddNumberToObject(o, "n", p->n);
    cJSON_AddStringToObject(o, "rng", p->rng);
    cJSON_AddNumberToObject(o, "clip_skip", p->clip_skip);
    svc_json_add_double(o, "guidance_rescale", p->guidance_rescale);
    if (p->n_loras) {
        cJSON *a = cJSON_AddArrayToObject(o, "loras");
        for (int i = 0; a && i < p->n_loras; i++) {
            cJSON *l = cJSON_CreateObject();
            cJSON_AddStringToObject(l, "name", p->loras[i].name);
            svc_json_add_double(l, "te_weight", p->loras[i].te_weight);
            svc_json_add_double(l, "unet_weight", p->loras[i].unet_weight);
            cJSON_AddItemToArray(a, l);
        }
    }
    return o;
}

cJSON *svc_params_view(const svc_params *p)
{
    cJSON *o = common(p);
    if (!o)
        return NULL;
    svc_json_add_number_or_null(o, "strength", p->strength, p->init_rgb != NULL);
    cJSON_AddBoolToObject(o, "init_image", p->init_rgb != NULL);
    cJSON_AddBoolToObject(o, "mask", p->mask_gray != NULL);
    add_hires(o, p);
    return o;
}

/* o[name] = the file's bytes in base64; false when out of memory. */
static bool add_base64(cJSON *o, const char *name, const uint8_t *file, size_t len)
{
    char *b = svc_base64_encode(file, len);
    bool ok = b && cJSON_AddStringToObject(o, name, b);
    free(b);
    return ok;
}

cJSON *svc_params_request(const svc_params *p)
{
    cJSON *o = common(p);
    if (!o)
        return NULL;
    if (p->init_file) {
        svc_json_add_double(o, "strength", p->strength);
        if (!add_base64(o, "init_image", p->init_file, p->init_file_len)) {
            cJSON_Delete(o);
            return NULL;
        }
        /* width/height come from the image */
        cJSON_DeleteItemFromObjectCaseSensitive(o, "width");
        cJSON_DeleteItemFromObjectCaseSensitive(o, "height");
    }
    if (p->mask_file && !add_base64(o, "mask", p->mask_file, p->mask_file_len)) {
        cJSON_Delete(o);
        return NULL;
    }
    add_hires(o, p);
    return o;
}
