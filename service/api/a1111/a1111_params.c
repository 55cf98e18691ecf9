/*
 * service/api/a1111/a1111_params.c - the A1111 request translator (see
 * a1111.h and docs/compat-a1111.md).
 *
 * Why a separate pass before svc_params_parse: A1111 names and defaults
 * differ (steps 50, cfg_scale 7, 512x512, "Euler", an empty negative prompt,
 * init_images as a list resized to width x height), and A1111 clients send
 * dozens of fields on every call that Tessera has no use for.  This file
 * decides, field by field, whether a value is honoured, accepted and
 * ignored, or refused, and builds the native object; svc_params_parse then
 * applies the native checks, and its errors are renamed back to A1111's
 * field names (svc_a1111_field).  No server state is read, so the fuzzer
 * runs it alone.
 *
 * Why a table: the fields are data, as the CLI's options are (tsr_arg_spec,
 * cli/args.h).  k_fields lists every field A1111 clients send, with its
 * type, range, default and where its value goes (or that it is checked and
 * ignored), and is read in order through the shared field reader
 * (service/api/fields.h), so the first bad field is the one named and the
 * wording is the other dialects'.  What a row cannot say is a named rule,
 * run in a fixed order after the table: values that depend on each other
 * (batch_size * n_iter, the size, the seeds), names to resolve (sampler and
 * scheduler), what Tessera refuses (scripts, variation seeds, a hires pass
 * with its own sampler, prompt or checkpoint), the hires fix's fields, and
 * img2img's images and masks.
 */
#include "a1111.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fields.h"
#include "images.h"
#include "json.h"
#include "tessera.h"
#include "util.h"

/* ----------------------------------------------------------------- reader */

/* The body's reader (service/api/fields.h: null is absent, integers by
 * their literal) and this call's error. */
typedef struct rd {
    svc_fields f;
    svc_a1111_error *err;
} rd;

static int fail(rd *x, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(rd *x, int status, const char *field, const char *fmt, ...)
{
    x->err->status = status;
    snprintf(x->err->field, sizeof x->err->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err->message, sizeof x->err->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* A reader's refusal as this call's: 422, the field and the message. */
static int refused(rd *x)
{
    return fail(x, 422, x->f.field, "%s", x->f.message);
}

static const cJSON *item(rd *x, const char *name)
{
    return svc_fields_get(&x->f, name);
}

/* seed: -1 (random) or 0 .. 2^64-1 */
static int get_seed(rd *x, const char *name, uint64_t *out, bool *random)
{
    if (svc_fields_seed(&x->f, name, false,
                        "-1 (random) or an integer between 0 and 18446744073709551615", out,
                        random) < 0)
        return refused(x);
    /* A1111: random.randrange(4294967294) */
    if (*random)
        *out = svc_random_u64() % 4294967294ull;
    return 0;
}

/* A1111's fields and their defaults: `parameters` starts from these. */
static cJSON *defaults_json(bool img2img)
{
    static const char common[] =
        "{\"prompt\":\"\",\"negative_prompt\":\"\",\"styles\":null,\"seed\":-1,\"subseed\":-1,"
        "\"subseed_strength\":0,\"seed_resize_from_h\":-1,\"seed_resize_from_w\":-1,"
        "\"sampler_name\":null,\"scheduler\":null,\"batch_size\":1,\"n_iter\":1,\"steps\":50,"
        "\"cfg_scale\":7.0,\"width\":512,\"height\":512,\"restore_faces\":null,\"tiling\":null,"
        "\"do_not_save_samples\":false,\"do_not_save_grid\":false,\"eta\":null,"
        "\"denoising_strength\":null,\"s_min_uncond\":null,\"s_churn\":null,\"s_tmax\":null,"
        "\"s_tmin\":null,\"s_noise\":null,\"override_settings\":null,"
        "\"override_settings_restore_afterwards\":true,\"refiner_checkpoint\":null,"
        "\"refiner_switch_at\":null,\"disable_extra_networks\":false,\"firstpass_image\":null,"
        "\"comments\":null,\"sampler_index\":\"Euler\",\"script_name\":null,\"script_args\":[],"
        "\"send_images\":true,\"save_images\":false,\"alwayson_scripts\":{},"
        "\"force_task_id\":null,\"infotext\":null}";
    static const char txt[] =
        "{\"enable_hr\":false,\"firstphase_width\":0,\"firstphase_height\":0,\"hr_scale\":2.0,"
        "\"hr_upscaler\":null,\"hr_second_pass_steps\":0,\"hr_resize_x\":0,\"hr_resize_y\":0,"
        "\"hr_checkpoint_name\":null,\"hr_sampler_name\":null,\"hr_scheduler\":null,"
        "\"hr_prompt\":\"\",\"hr_negative_prompt\":\"\"}";
    static const char img[] =
        "{\"init_images\":null,\"resize_mode\":0,\"image_cfg_scale\":null,\"mask\":null,"
        "\"mask_blur_x\":4,\"mask_blur_y\":4,\"mask_blur\":null,\"mask_round\":true,"
        "\"inpainting_fill\":0,\"inpaint_full_res\":true,\"inpaint_full_res_padding\":0,"
        "\"inpainting_mask_invert\":0,\"initial_noise_multiplier\":null,\"latent_mask\":null,"
        "\"include_init_images\":false}";
    cJSON *o = cJSON_Parse(common);
    cJSON *extra = cJSON_Parse(img2img ? img : txt);
    if (!o || !extra) {
        cJSON_Delete(o);
        cJSON_Delete(extra);
        return NULL;
    }
    if (img2img)
        cJSON_ReplaceItemInObjectCaseSensitive(o, "denoising_strength",
                                               cJSON_CreateNumber(0.75));
    cJSON *it = extra->child;
    while (it) {
        cJSON *next = it->next;
        cJSON_DetachItemViaPointer(extra, it);
        cJSON_AddItemToObject(o, it->string, it);
        it = next;
    }
    cJSON_Delete(extra);
    return o;
}

/* The request over the defaults: known fields only (pydantic drops the
 * rest); init_images and mask left out unless include_init_images, as
 * A1111 does. */
/* A member as `parameters` echoes it: what pydantic would have made of it
 * (the coercion table, fields.c), so "30" for steps reads back as 30. */
static cJSON *echo_of(const cJSON *dflt, const cJSON *given)
{
    double v = 0;
    if (cJSON_IsNumber(dflt) && !cJSON_IsNumber(given) &&
        (svc_fields_coerce(SVC_COERCE_PYDANTIC, 'n', given, &v) ||
         svc_fields_coerce(SVC_COERCE_PYDANTIC, 'i', given, &v)))
        return cJSON_CreateNumber(v);
    if (cJSON_IsBool(dflt) && !cJSON_IsBool(given) &&
        svc_fields_coerce(SVC_COERCE_PYDANTIC, 'b', given, &v))
        return cJSON_CreateBool(v != 0);
    return cJSON_Duplicate(given, true);
}

static cJSON *parameters_json(const cJSON *body, bool img2img, bool with_images)
{
    cJSON *o = defaults_json(img2img);
    if (!o)
        return NULL;
    for (cJSON *it = o->child; it; it = it->next) {
        const cJSON *given = cJSON_GetObjectItemCaseSensitive(body, it->string);
        if (!given || (img2img && !with_images && (strcmp(it->string, "init_images") == 0 ||
                                                   strcmp(it->string, "mask") == 0)))
            continue;
        cJSON *copy = echo_of(it, given);
        if (!copy) {
            cJSON_Delete(o);
            return NULL;
        }
        /* the literal rides along in valuestring; cJSON prints valuedouble
         * (by name: a coerced value is a new item without one) */
        cJSON_ReplaceItemInObjectCaseSensitive(o, it->string, copy);
        it = copy;
    }
    return o;
}

/* An image through svc_a1111_image, its error as this request's. */
static int prepare_image(rd *x, const char *field, const char *b64, int channels, int w, int h,
                         bool invert, char **out)
{
    char why[400];
    int rc = svc_a1111_image(field, b64, channels, w, h, invert, out, why, sizeof why);
    if (rc == 0)
        return 0;
    return fail(x, rc == -2 ? 400 : 422, rc == -2 ? NULL : field, "%s", why);
}

/* ------------------------------------------------------------ the table */

/* What the fields resolve to while a call is translated. */
typedef struct a1111_vals {
    const char *prompt, *negative, *sampler_name, *sampler_index, *scheduler, *script_name,
        *refiner, *mask;
    /* the hires fix (txt2img) */
    bool enable_hr;
    bool tiling; /* seamless tiling: native "tiling" */
    double hr_scale;
    long long hr_steps, hr_rx, hr_ry, fp_w, fp_h;
    const char *hr_upscaler, *hr_checkpoint, *hr_sampler, *hr_scheduler, *hr_prompt,
        *hr_negative;
    long long steps, width, height, subseed, rh, rw, batch_size, n_iter, resize_mode, fill,
        invert;
    double cfg, strength, subseed_strength;
    uint64_t seed;
    bool seed_random, send_images, save_images, with_images;
    /* resolved by the rules */
    const svc_a1111_defaults *d;
    int max_size;
    long long clip_skip;
    const char *tsampler, *sched; /* Tessera's sampler and schedule (NULL: the default) */
    const cJSON *init;            /* init_images[0] */
    const char *init_b64;         /* it, ready for the native parser */
} a1111_vals;

/* One A1111 field: its type, range and default, and where its value goes
 * (the CLI's tsr_arg_spec, cli/args.h, for a JSON body).  Types: 'i'
 * integer in [lo, hi]; 'n' any finite number; 'b' boolean (0 and 1 too);
 * 's' string of at most hi bytes; 'a' array; 'o' object; 'S' seed (-1 or
 * 0 .. 2^64-1, get_seed); 't' a flag refused when true (refuse_true, `why`
 * says so).  at = NONE: checked, then ignored (A1111 clients send dozens of
 * fields Tessera has no use for; a wrong type is still a 422). */
typedef struct a1111_field {
    const char *name;
    char type;
    long long lo, hi;
    double dflt;
    ptrdiff_t at;
    const char *why;
} a1111_field;

#define NONE ((ptrdiff_t)-1)
#define AT(m) ((ptrdiff_t)offsetof(a1111_vals, m))
#define TEXT SVC_MAX_PROMPT_BYTES
#define WIDE (1ll << 40) /* ignored integers: any that a client may send */
/* rows of fields checked, then ignored */
#define NUM(n) {n, 'n', 0, 0, 0, NONE, NULL}
#define INT(n) {n, 'i', -WIDE, WIDE, 0, NONE, NULL}
#define BOOL(n) {n, 'b', 0, 0, 0, NONE, NULL}
#define STR(n) {n, 's', 0, TEXT, 0, NONE, NULL}
#define ARR(n) {n, 'a', 0, 0, 0, NONE, NULL}
#define OBJ(n) {n, 'o', 0, 0, 0, NONE, NULL}

/* Read in this order, so that the first bad field is the one named. */
static const a1111_field k_fields[] = {
    {"prompt", 's', 0, TEXT, 0, AT(prompt), NULL},
    {"negative_prompt", 's', 0, TEXT, 0, AT(negative), NULL},
    {"steps", 'i', 1, TSR_MAX_STEPS, 50, AT(steps), NULL},
    {"cfg_scale", 'n', 0, 0, 7.0, AT(cfg), NULL},
    {"width", 'i', 0, 1 << 30, 512, AT(width), NULL},
    {"height", 'i', 0, 1 << 30, 512, AT(height), NULL},
    {"seed", 'S', 0, 0, 0, AT(seed), NULL},
    {"subseed", 'i', -1, UINT32_MAX, -1, AT(subseed), NULL},
    {"subseed_strength", 'n', 0, 0, 0, AT(subseed_strength), NULL},
    {"seed_resize_from_h", 'i', -1, 1 << 30, -1, AT(rh), NULL},
    {"seed_resize_from_w", 'i', -1, 1 << 30, -1, AT(rw), NULL},
    {"sampler_name", 's', 0, 96, 0, AT(sampler_name), NULL},
    {"sampler_index", 's', 0, 96, 0, AT(sampler_index), NULL},
    {"scheduler", 's', 0, 64, 0, AT(scheduler), NULL},
    {"batch_size", 'i', 1, SVC_A1111_MAX_IMAGES, 1, AT(batch_size), NULL},
    {"n_iter", 'i', 1, SVC_A1111_MAX_IMAGES, 1, AT(n_iter), NULL},
    {"denoising_strength", 'n', 0, 0, 0.75, AT(strength), NULL},
    {"send_images", 'b', 0, 0, 1, AT(send_images), NULL},
    {"save_images", 'b', 0, 0, 0, AT(save_images), NULL},
    {"script_name", 's', 0, 256, 0, AT(script_name), NULL},
    {"refiner_checkpoint", 's', 0, 256, 0, AT(refiner), NULL},
    {"alwayson_scripts", 'o', 0, 0, 0, NONE, NULL},
    {"override_settings", 'o', 0, 0, 0, NONE, NULL},
    {"styles", 'a', 0, 0, 0, NONE, NULL},
    {"restore_faces", 't', 0, 0, 0, NONE, "Tessera has no face restoration model"},
    {"tiling", 'b', 0, 0, 0, AT(tiling), NULL},
    {"enable_hr", 'b', 0, 0, 0, AT(enable_hr), NULL},
    {"firstphase_width", 'i', 0, 1 << 30, 0, AT(fp_w), NULL},
    {"firstphase_height", 'i', 0, 1 << 30, 0, AT(fp_h), NULL},
    {"hr_scale", 'n', 0, 0, 2.0, AT(hr_scale), NULL},
    {"hr_upscaler", 's', 0, 64, 0, AT(hr_upscaler), NULL},
    {"hr_second_pass_steps", 'i', 0, TSR_MAX_STEPS, 0, AT(hr_steps), NULL},
    {"hr_resize_x", 'i', 0, 1 << 30, 0, AT(hr_rx), NULL},
    {"hr_resize_y", 'i', 0, 1 << 30, 0, AT(hr_ry), NULL},
    {"hr_checkpoint_name", 's', 0, 256, 0, AT(hr_checkpoint), NULL},
    {"hr_sampler_name", 's', 0, 96, 0, AT(hr_sampler), NULL},
    {"hr_scheduler", 's', 0, 64, 0, AT(hr_scheduler), NULL},
    {"hr_prompt", 's', 0, TEXT, 0, AT(hr_prompt), NULL},
    {"hr_negative_prompt", 's', 0, TEXT, 0, AT(hr_negative), NULL},
    /* accepted and ignored (type-checked) */
    NUM("eta"), NUM("s_churn"), NUM("s_noise"), NUM("s_tmin"), NUM("s_tmax"), NUM("s_min_uncond"),
    ARR("script_args"), BOOL("do_not_save_samples"), BOOL("do_not_save_grid"),
    BOOL("override_settings_restore_afterwards"), BOOL("disable_extra_networks"), OBJ("comments"),
    STR("force_task_id"), STR("infotext"), NUM("refiner_switch_at"), NUM("image_cfg_scale"),
    INT("mask_blur"), INT("mask_blur_x"), INT("mask_blur_y"), BOOL("mask_round"),
    BOOL("inpaint_full_res"), INT("inpaint_full_res_padding"),
    {"include_init_images", 'b', 0, 0, 0, AT(with_images), NULL},
    NUM("initial_noise_multiplier"), STR("firstpass_image"),
};

/* img2img's own, read once init_images is known to be one image. */
static const a1111_field k_img2img_fields[] = {
    {"resize_mode", 'i', 0, 3, 0, AT(resize_mode), NULL},
    {"inpainting_fill", 'i', 0, 3, 0, AT(fill), NULL},
    {"inpainting_mask_invert", 'i', 0, 1, 0, AT(invert), NULL},
    {"mask", 's', 0, LLONG_MAX, 0, AT(mask), NULL},
};

static int refuse_true(rd *x, const char *name, const char *why)
{
    bool v = false;
    if (svc_fields_bool(&x->f, name, true, false, &v) < 0)
        return refused(x);
    if (v)
        return fail(x, 422, name, "%s=true is not supported: %s", name, why);
    return 0;
}

static int read_field(rd *x, const a1111_field *fd, a1111_vals *v)
{
    union {
        long long i;
        double n;
        bool b;
        const char *s;
    } val;
    size_t size = 0; /* of the value kept */
    int rc = 0;
    switch (fd->type) {
    case 'S': return get_seed(x, fd->name, &v->seed, &v->seed_random);
    case 't': return refuse_true(x, fd->name, fd->why);
    case 'i':
        rc = svc_fields_int(&x->f, fd->name, fd->lo, fd->hi, (long long)fd->dflt, &val.i);
        size = sizeof val.i;
        break;
    case 'n':
        rc = svc_fields_number(&x->f, fd->name, -HUGE_VAL, HUGE_VAL, false, fd->dflt, &val.n,
                               NULL);
        size = sizeof val.n;
        break;
    case 'b':
        rc = svc_fields_bool(&x->f, fd->name, true, fd->dflt != 0, &val.b);
        size = sizeof val.b;
        break;
    case 's':
        rc = svc_fields_string(&x->f, fd->name, (size_t)fd->hi, false, &val.s);
        size = sizeof val.s;
        break;
    default: rc = svc_fields_kind(&x->f, fd->name, fd->type == 'a' ? cJSON_Array : cJSON_Object);
    }
    if (rc < 0)
        return refused(x);
    if (size && fd->at != NONE)
        memcpy((char *)v + fd->at, &val, size);
    return 0;
}

static int read_fields(rd *x, const a1111_field *t, size_t n, a1111_vals *v)
{
    for (size_t i = 0; i < n; i++)
        if (read_field(x, &t[i], v) < 0)
            return -1;
    return 0;
}

/* ------------------------------------------------------------ the rules */

/* What the table cannot say: values that depend on each other, names to
 * resolve, and what Tessera refuses.  Run in this order after the table
 * (the first refusal is the one answered). */
typedef int a1111_rule(rd *x, a1111_vals *v);

static int styles_are_strings(rd *x, a1111_vals *v)
{
    (void)v;
    const cJSON *st;
    cJSON_ArrayForEach(st, item(x, "styles"))
    {
        if (!cJSON_IsString(st))
            return fail(x, 422, "styles", "styles must be an array of strings");
    }
    return 0;
}

static int images_per_call(rd *x, a1111_vals *v)
{
    if (v->batch_size * v->n_iter > SVC_A1111_MAX_IMAGES)
        return fail(x, 422, "batch_size", "batch_size * n_iter is %lld; at most %d images per call",
                    v->batch_size * v->n_iter, SVC_A1111_MAX_IMAGES);
    return 0;
}

static int no_variation_seeds(rd *x, a1111_vals *v)
{
    if (v->subseed_strength != 0)
        return fail(x, 422, "subseed_strength",
                    "subseed_strength must be 0: variation seeds are not supported, got %g",
                    v->subseed_strength);
    if (v->rh > 0 || v->rw > 0)
        return fail(x, 422, v->rh > 0 ? "seed_resize_from_h" : "seed_resize_from_w",
                    "seed_resize_from_h/w must be -1 or 0: resizing the seed is not supported");
    return 0;
}

static int no_scripts(rd *x, a1111_vals *v)
{
    if (v->script_name && v->script_name[0])
        return fail(x, 422, "script_name", "script_name: no scripts are available on this "
                    "server (got \"%.64s\")", v->script_name);
    const cJSON *aos = item(x, "alwayson_scripts");
    if (aos && aos->child)
        return fail(x, 422, "alwayson_scripts",
                    "alwayson_scripts: no scripts are available on this server (got \"%.64s\")",
                    aos->child->string);
    if (v->refiner && v->refiner[0])
        return fail(x, 422, "refiner_checkpoint", "refiner_checkpoint is not supported");
    return 0;
}

static int size_ok(rd *x, a1111_vals *v)
{
    const long long w = v->width, h = v->height, max = v->max_size;
    if (w % 8 || h % 8 || w < TSR_MIN_SIZE || h < TSR_MIN_SIZE || w > max || h > max) {
        bool bw = w % 8 || w < TSR_MIN_SIZE || w > max;
        return fail(x, 422, bw ? "width" : "height",
                    "%s must be a multiple of 8 between %d and %d, got %lld",
                    bw ? "width" : "height", TSR_MIN_SIZE, v->max_size, bw ? w : h);
    }
    return 0;
}

/* sampler_name (or sampler_index, or "Euler") and scheduler to Tessera's
 * names; "DPM++ 2M Karras" carries its schedule in the name. */
static int sampler_and_scheduler(rd *x, a1111_vals *v, svc_a1111_req *q)
{
    const char *sname = v->sampler_name    ? v->sampler_name
                        : v->sampler_index ? v->sampler_index
                                           : "Euler";
    const char *field = v->sampler_name ? "sampler_name" : "sampler_index";
    const char *a1111 = NULL, *label = "Automatic";
    if (!svc_a1111_sampler(sname, &v->tsampler, &a1111, &v->sched))
        return fail(x, 422, field, "%s: unknown sampler \"%.80s\" (GET /sdapi/v1/samplers lists "
                    "them)", field, sname);
    if (v->sched) {
        const char *dummy;
        q->schedule_in_name = true;
        svc_a1111_schedule(v->sched, &dummy, &label);
    } else if (v->scheduler && !svc_a1111_schedule(v->scheduler, &v->sched, &label)) {
        return fail(x, 422, "scheduler",
                    "scheduler: unknown or unsupported scheduler \"%.64s\" (GET "
                    "/sdapi/v1/schedulers lists them)",
                    v->scheduler);
    }
    snprintf(q->sampler_name, sizeof q->sampler_name, "%s", a1111);
    snprintf(q->scheduler, sizeof q->scheduler, "%s", label);
    return 0;
}

/* override_settings.CLIP_stop_at_last_layers over the server's default. */
static int clip_skip(rd *x, a1111_vals *v)
{
    v->clip_skip = v->d && v->d->clip_skip ? v->d->clip_skip : 1;
    const cJSON *ov = item(x, "override_settings");
    svc_fields fo;
    svc_fields_init(&fo, ov, NULL, false);
    fo.coerce = SVC_COERCE_PYDANTIC;
    if (ov && svc_fields_int(&fo, "CLIP_stop_at_last_layers", 1, 12, v->clip_skip,
                             &v->clip_skip) < 0)
        return fail(x, 422, "override_settings.CLIP_stop_at_last_layers", "%s", fo.message);
    return 0;
}

/* The sub-seed is reported only; the seeds of the call must not wrap. */
static int seeds(rd *x, a1111_vals *v, svc_a1111_req *q)
{
    q->subseed = (int64_t)(v->subseed < 0 ? svc_random_u64() % 4294967294ull
                                          : (uint64_t)v->subseed);
    q->subseed_strength = v->subseed_strength;
    if (!v->seed_random && v->seed > UINT64_MAX - (uint64_t)(v->batch_size * v->n_iter))
        return fail(x, 422, "seed", "seed + batch_size * n_iter passes 18446744073709551615");
    return 0;
}

/* firstphase_width/height (the old API): the first pass's size, with
 * width x height then only the old target (A1111's __post_init__, whether
 * or not enable_hr is set). */
static int first_phase(rd *x, a1111_vals *v)
{
    (void)x;
    if (v->fp_w != 0 || v->fp_h != 0) {
        v->width = v->fp_w;
        v->height = v->fp_h;
    }
    return 0;
}

static a1111_rule *const k_rules[] = {styles_are_strings, images_per_call, no_variation_seeds,
                                      no_scripts,         first_phase,     size_ok};


/* img2img: init_images is one base64 image. */
static int one_init_image(rd *x, a1111_vals *v)
{
    const cJSON *inits = item(x, "init_images");
    if (!inits)
        return fail(x, 422, "init_images", "init_images is required (a list with one base64 "
                    "image)");
    if (!cJSON_IsArray(inits) || cJSON_GetArraySize(inits) != 1 ||
        !cJSON_IsString(inits->child))
        return fail(x, 422, "init_images",
                    "init_images must be a list of exactly one base64 PNG or JPEG string");
    if (inits->child->type & SVC_JSON_HAS_NUL)
        return fail(x, 422, "init_images", "init_images is not valid base64: it contains U+0000");
    v->init = inits->child;
    return 0;
}

/* img2img: what Tessera's inpainting and resizing do not cover. */
static int img2img_supported(rd *x, a1111_vals *v)
{
    if (item(x, "latent_mask"))
        return fail(x, 422, "latent_mask", "latent_mask is not supported");
    if (v->resize_mode != 0)
        return fail(x, 422, "resize_mode",
                    "resize_mode must be 0 (just resize): crop, fill and latent upscale are not "
                    "supported, got %lld",
                    v->resize_mode);
    if (!(v->strength > 0 && v->strength <= 1))
        return fail(x, 422, "denoising_strength",
                    "denoising_strength must be a number in (0, 1], got %g", v->strength);
    return 0;
}

/* ------------------------------------------------------------ translate */

void svc_a1111_req_free(svc_a1111_req *q)
{
    cJSON_Delete(q->native);
    cJSON_Delete(q->parameters);
    memset(q, 0, sizeof *q);
}

static int add_or_fail(rd *x, cJSON *o, const char *name, cJSON *v)
{
    if (!v || !cJSON_AddItemToObject(o, name, v)) {
        cJSON_Delete(v);
        return fail(x, 400, NULL, "out of memory");
    }
    return 0;
}

/* A base64 image for the native object, resized (and a mask inverted) by
 * svc_a1111_image; the native object takes it. */
static int add_image(rd *x, cJSON *n, const char *native, const char *field, const char *b64,
                     int channels, const a1111_vals *v, bool invert)
{
    char *b = NULL;
    if (prepare_image(x, field, b64, channels, (int)v->width, (int)v->height, invert, &b) < 0)
        return -1;
    int rc = add_or_fail(x, n, native, cJSON_CreateString(b));
    free(b);
    return rc;
}

/* The native object: the resolved values under the native names. */
static cJSON *native_json(rd *x, const a1111_vals *v)
{
    cJSON *n = cJSON_CreateObject();
    if (!n) {
        fail(x, 400, NULL, "out of memory");
        return NULL;
    }
    if (add_or_fail(x, n, "prompt", cJSON_CreateString(v->prompt ? v->prompt : "")) < 0 ||
        add_or_fail(x, n, "negative_prompt", cJSON_CreateString(v->negative ? v->negative : "")) <
            0 ||
        add_or_fail(x, n, "width", cJSON_CreateNumber((double)v->width)) < 0 ||
        add_or_fail(x, n, "height", cJSON_CreateNumber((double)v->height)) < 0 ||
        add_or_fail(x, n, "steps", cJSON_CreateNumber((double)v->steps)) < 0 ||
        add_or_fail(x, n, "cfg_scale", cJSON_CreateNumber(v->cfg)) < 0 ||
        add_or_fail(x, n, "sampler", cJSON_CreateString(v->tsampler)) < 0 ||
        (v->sched && add_or_fail(x, n, "scheduler", cJSON_CreateString(v->sched)) < 0) ||
        add_or_fail(x, n, "clip_skip", cJSON_CreateNumber((double)v->clip_skip)) < 0 ||
        (v->tiling && add_or_fail(x, n, "tiling", cJSON_CreateTrue()) < 0)) {
        cJSON_Delete(n);
        return NULL;
    }
    return n;
}

/* img2img's half: the images into the native object n. */
static int img2img(rd *x, a1111_vals *v, cJSON *n)
{
    if (one_init_image(x, v) < 0 ||
        read_fields(x, k_img2img_fields, sizeof k_img2img_fields / sizeof k_img2img_fields[0],
                    v) < 0 ||
        img2img_supported(x, v) < 0 ||
        add_image(x, n, "init_image", "init_images", v->init->valuestring, 3, v, false) < 0 ||
        (v->mask && add_image(x, n, "mask", "mask", v->mask, 1, v, v->invert == 1) < 0) ||
        (v->mask && add_or_fail(x, n, "mask_fill", cJSON_CreateNumber((double)v->fill)) < 0) ||
        add_or_fail(x, n, "strength", cJSON_CreateNumber(v->strength)) < 0)
        return -1;
    return 0;
}

/* A second-pass setting that must say "the same as the first". */
static bool same_or_unset(const char *v, const char *same_word, const char *first)
{
    return !v || !v[0] || (same_word && strcmp(v, same_word) == 0) ||
           (first && strcmp(v, first) == 0);
}

/* txt2img's enable_hr: the hires fix's fields into the native object. */
static int hires(rd *x, a1111_vals *v, cJSON *n)
{
    if (!v->enable_hr)
        return 0;
    if (!same_or_unset(v->hr_checkpoint, "Use same checkpoint", NULL))
        return fail(x, 422, "hr_checkpoint_name",
                    "hr_checkpoint_name: a second checkpoint for the hires pass is not supported");
    if (!same_or_unset(v->hr_sampler, "Use same sampler", v->sampler_name))
        return fail(x, 422, "hr_sampler_name",
                    "hr_sampler_name: a different sampler for the hires pass is not supported");
    if (!same_or_unset(v->hr_scheduler, "Use same scheduler", v->scheduler))
        return fail(x, 422, "hr_scheduler",
                    "hr_scheduler: a different scheduler for the hires pass is not supported");
    if (!same_or_unset(v->hr_prompt, NULL, v->prompt ? v->prompt : ""))
        return fail(x, 422, "hr_prompt",
                    "hr_prompt: a different prompt for the hires pass is not supported");
    if (!same_or_unset(v->hr_negative, NULL, v->negative ? v->negative : ""))
        return fail(x, 422, "hr_negative_prompt",
                    "hr_negative_prompt: a different negative prompt for the hires pass is not "
                    "supported");
    if (v->hr_rx == 0 && v->hr_ry == 0 && !(v->hr_scale > 0 && v->hr_scale <= 16))
        return fail(x, 422, "hr_scale", "hr_scale must be a number in (0, 16], got %g",
                    v->hr_scale);
    if (v->hr_rx > v->max_size || v->hr_ry > v->max_size)
        return fail(x, 422, v->hr_rx > v->max_size ? "hr_resize_x" : "hr_resize_y",
                    "hr_resize_x/y must be at most %d", v->max_size);
    if (!(v->strength > 0 && v->strength <= 1))
        return fail(x, 422, "denoising_strength",
                    "denoising_strength must be a number in (0, 1] with enable_hr, got %g",
                    v->strength);
    const bool resize = v->hr_rx || v->hr_ry;
    if (add_or_fail(x, n, "hires_scale", cJSON_CreateNumber(resize ? 0 : v->hr_scale)) < 0 ||
        add_or_fail(x, n, "hires_width", cJSON_CreateNumber((double)v->hr_rx)) < 0 ||
        add_or_fail(x, n, "hires_height", cJSON_CreateNumber((double)v->hr_ry)) < 0 ||
        add_or_fail(x, n, "hires_steps", cJSON_CreateNumber((double)v->hr_steps)) < 0 ||
        add_or_fail(x, n, "hires_strength", cJSON_CreateNumber(v->strength)) < 0 ||
        (v->hr_upscaler &&
         add_or_fail(x, n, "hires_upscaler", cJSON_CreateString(v->hr_upscaler)) < 0))
        return -1;
    return 0;
}

int svc_a1111_translate(const cJSON *body, bool img2img_call, const svc_a1111_defaults *d,
                        svc_a1111_req *q, svc_a1111_error *err)
{
    rd x;
    svc_fields_init(&x.f, body, NULL, false);
    x.f.coerce = SVC_COERCE_PYDANTIC; /* A1111's bodies: pydantic's types */
    x.err = err;
    memset(q, 0, sizeof *q);
    memset(err, 0, sizeof *err);
    q->img2img = img2img_call;
    if (!cJSON_IsObject(body))
        return fail(&x, 400, NULL, "the body must be a JSON object");
    a1111_vals v;
    memset(&v, 0, sizeof v);
    v.d = d;
    v.max_size = d && d->max_size ? d->max_size : TSR_MAX_SIZE;
    if (read_fields(&x, k_fields, sizeof k_fields / sizeof k_fields[0], &v) < 0)
        goto bad;
    for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++)
        if (k_rules[i](&x, &v) < 0)
            goto bad;
    if (sampler_and_scheduler(&x, &v, q) < 0 || clip_skip(&x, &v) < 0 || seeds(&x, &v, q) < 0)
        goto bad;
    q->seed = v.seed;
    q->seed_random = v.seed_random;
    q->native = native_json(&x, &v);
    if (!q->native || (img2img_call && img2img(&x, &v, q->native) < 0) ||
        (!img2img_call && hires(&x, &v, q->native) < 0))
        goto bad;
    q->hires = !img2img_call && v.enable_hr;
    if (q->hires) {
        q->hr_scale = v.hr_scale;
        q->hr_resize_x = (int)v.hr_rx;
        q->hr_resize_y = (int)v.hr_ry;
        q->hr_steps = (int)v.hr_steps;
        snprintf(q->hr_upscaler, sizeof q->hr_upscaler, "%s",
                 v.hr_upscaler ? v.hr_upscaler : "");
    }
    q->parameters = parameters_json(body, img2img_call, img2img_call && v.with_images);
    if (!q->parameters) {
        fail(&x, 400, NULL, "out of memory");
        goto bad;
    }
    q->styles = cJSON_GetObjectItemCaseSensitive(q->parameters, "styles");
    q->batch_size = (int)v.batch_size;
    q->n_iter = (int)v.n_iter;
    q->total = (int)(v.batch_size * v.n_iter);
    q->prompt = cJSON_GetObjectItemCaseSensitive(q->native, "prompt")->valuestring;
    q->negative_prompt = cJSON_GetObjectItemCaseSensitive(q->native, "negative_prompt")->valuestring;
    q->width = (int)v.width;
    q->height = (int)v.height;
    q->steps = (int)v.steps;
    q->clip_skip = (int)v.clip_skip;
    q->cfg_scale = v.cfg;
    q->denoising_strength = img2img_call || q->hires ? v.strength : 0;
    q->send_images = v.send_images;
    q->save_images = v.save_images;
    return 0;
bad:
    svc_a1111_req_free(q);
    if (!err->message[0])
        fail(&x, 400, NULL, "invalid request");
    return -1;
}

int svc_a1111_chunks(const svc_a1111_req *q)
{
    return (q->total + SVC_MAX_IMAGES_PER_JOB - 1) / SVC_MAX_IMAGES_PER_JOB;
}

cJSON *svc_a1111_chunk(const svc_a1111_req *q, int k, int *n_out)
{
    int first = k * SVC_MAX_IMAGES_PER_JOB;
    int n = q->total - first < SVC_MAX_IMAGES_PER_JOB ? q->total - first : SVC_MAX_IMAGES_PER_JOB;
    *n_out = n;
    cJSON *o = cJSON_Duplicate(q->native, true);
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "n", n);
    cJSON_AddItemToObject(o, "seed", svc_json_u64(q->seed + (uint64_t)first));
    /* print and read back with the strict reader, which keeps the number
     * literals svc_params_parse checks */
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        return NULL;
    char why[128];
    cJSON *back = svc_json_parse(text, strlen(text), why, sizeof why);
    cJSON_free(text);
    return back;
}
