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
 */
#include "a1111.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fields.h"
#include "images.h"
#include "json.h"
#include "tessera.h"
#include "util.h"

/* ------------------------------------------------------------------ names */

/* lower-case; ' ', '-' and '_' dropped: "DPM++ 2M" ~ "dpm++_2m" ~ "dpm++2m" */
static void fold(const char *in, char *out, size_t size)
{
    size_t j = 0;
    for (; *in && j + 1 < size; in++) {
        char c = *in;
        if (c == ' ' || c == '-' || c == '_')
            continue;
        out[j++] = (char)tolower((unsigned char)c);
    }
    out[j] = '\0';
}

bool svc_a1111_schedule(const char *name, const char **schedule, const char **label)
{
    const tsr_schedule_desc *sd = NULL;
    int ns = tsr_schedules(&sd);
    char want[64], a[64], b[64];
    if (!name || strlen(name) >= sizeof want)
        return false;
    fold(name, want, sizeof want);
    for (int i = 0; i < ns; i++) {
        fold(sd[i].name, a, sizeof a);
        fold(sd[i].a1111, b, sizeof b);
        if (strcmp(want, a) == 0 || strcmp(want, b) == 0) {
            *schedule = sd[i].name;
            *label = sd[i].a1111;
            return true;
        }
    }
    return false;
}

static const tsr_sampler_desc *find_sampler(const char *name)
{
    const tsr_sampler_desc *sd = NULL;
    int n = tsr_samplers(&sd);
    char want[96], a[96];
    if (strlen(name) >= sizeof want)
        return NULL;
    fold(name, want, sizeof want);
    const char *bare = strncmp(want, "k", 1) == 0 ? want + 1 : NULL; /* k_euler_a */
    for (int i = 0; i < n; i++) {
        fold(sd[i].a1111, a, sizeof a);
        if (strcmp(want, a) == 0)
            return &sd[i];
        fold(sd[i].name, a, sizeof a);
        if (strcmp(want, a) == 0 || (bare && strcmp(bare, a) == 0))
            return &sd[i];
    }
    return NULL;
}

bool svc_a1111_sampler(const char *name, const char **sampler, const char **a1111_name,
                       const char **schedule)
{
    *schedule = NULL;
    if (!name || !name[0] || strlen(name) > 80)
        return false;
    const tsr_sampler_desc *d = find_sampler(name);
    if (!d) {
        /* old style: the schedule's label at the end ("DPM++ 2M Karras") */
        const tsr_schedule_desc *sd = NULL;
        int ns = tsr_schedules(&sd);
        size_t len = strlen(name);
        for (int i = 0; i < ns && !d; i++) {
            size_t ll = strlen(sd[i].a1111);
            if (len > ll + 1 && name[len - ll - 1] == ' ' &&
                strcasecmp(name + len - ll, sd[i].a1111) == 0) {
                char base[96];
                snprintf(base, sizeof base, "%.*s", (int)(len - ll - 1), name);
                d = find_sampler(base);
                if (d)
                    *schedule = sd[i].name;
            }
        }
    }
    if (!d)
        return false;
    *sampler = d->name;
    *a1111_name = d->a1111;
    return true;
}

const char *svc_a1111_field(const char *f)
{
    static const struct {
        const char *native, *a1111;
    } map[] = {
        {"sampler", "sampler_name"},     {"strength", "denoising_strength"},
        {"init_image", "init_images"},   {"clip_skip", "override_settings.CLIP_stop_at_last_layers"},
        {"n", "batch_size"},
    };
    if (!f)
        return "";
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(f, map[i].native) == 0)
            return map[i].a1111;
    return f;
}

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

static int get_int(rd *x, const char *name, long long lo, long long hi, long long dflt,
                   long long *out)
{
    return svc_fields_int(&x->f, name, lo, hi, dflt, out) < 0 ? refused(x) : 0;
}

static int get_num(rd *x, const char *name, double dflt, double *out)
{
    return svc_fields_number(&x->f, name, -HUGE_VAL, HUGE_VAL, false, dflt, out, NULL) < 0
               ? refused(x)
               : 0;
}

/* A boolean; 0 and 1 count too (A1111's forms send some flags as ints). */
static int get_bool(rd *x, const char *name, bool dflt, bool *out)
{
    return svc_fields_bool(&x->f, name, true, dflt, out) < 0 ? refused(x) : 0;
}

static int get_str(rd *x, const char *name, size_t max, const char **out)
{
    return svc_fields_string(&x->f, name, max, false, out) < 0 ? refused(x) : 0;
}

static int get_kind(rd *x, const char *name, int kind)
{
    return svc_fields_kind(&x->f, name, kind) < 0 ? refused(x) : 0;
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

/* ------------------------------------------------------------ the fields */

/* Fields A1111 clients send that Tessera accepts and ignores, with the type
 * each must still have ('n' number, 'i' integer, 'b' boolean, 's' string,
 * 'a' array, 'o' object). */
static const struct {
    const char *name;
    char type;
} k_ignored[] = {
    {"eta", 'n'},          {"s_churn", 'n'},       {"s_noise", 'n'},
    {"s_tmin", 'n'},       {"s_tmax", 'n'},        {"s_min_uncond", 'n'},
    {"script_args", 'a'},  {"do_not_save_samples", 'b'}, {"do_not_save_grid", 'b'},
    {"override_settings_restore_afterwards", 'b'}, {"disable_extra_networks", 'b'},
    {"comments", 'o'},     {"force_task_id", 's'}, {"infotext", 's'},
    {"refiner_switch_at", 'n'}, {"firstphase_width", 'i'}, {"firstphase_height", 'i'},
    {"hr_scale", 'n'},     {"hr_upscaler", 's'},   {"hr_second_pass_steps", 'i'},
    {"hr_resize_x", 'i'},  {"hr_resize_y", 'i'},   {"hr_checkpoint_name", 's'},
    {"hr_sampler_name", 's'}, {"hr_scheduler", 's'}, {"hr_prompt", 's'},
    {"hr_negative_prompt", 's'}, {"image_cfg_scale", 'n'}, {"mask_blur", 'i'},
    {"mask_blur_x", 'i'},  {"mask_blur_y", 'i'},   {"mask_round", 'b'},
    {"inpaint_full_res", 'b'}, {"inpaint_full_res_padding", 'i'},
    {"include_init_images", 'b'}, {"initial_noise_multiplier", 'n'},
    {"sampler_index", 's'}, {"firstpass_image", 's'},
};

static int check_ignored(rd *x)
{
    for (size_t i = 0; i < sizeof k_ignored / sizeof k_ignored[0]; i++) {
        const char *n = k_ignored[i].name;
        long long iv;
        double dv;
        bool bv;
        const char *sv;
        int rc = 0;
        switch (k_ignored[i].type) {
        case 'n': rc = get_num(x, n, 0, &dv); break;
        case 'i': rc = get_int(x, n, -(1ll << 40), 1ll << 40, 0, &iv); break;
        case 'b': rc = get_bool(x, n, false, &bv); break;
        case 's': rc = get_str(x, n, SVC_MAX_PROMPT_BYTES, &sv); break;
        case 'a': rc = get_kind(x, n, cJSON_Array); break;
        default: rc = get_kind(x, n, cJSON_Object); break;
        }
        if (rc < 0)
            return -1;
    }
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
        cJSON *copy = cJSON_Duplicate(given, true);
        if (!copy) {
            cJSON_Delete(o);
            return NULL;
        }
        /* the literal rides along in valuestring; cJSON prints valuedouble */
        cJSON_ReplaceItemViaPointer(o, it, copy);
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

/* ------------------------------------------------------------ translate */

void svc_a1111_req_free(svc_a1111_req *q)
{
    cJSON_Delete(q->native);
    cJSON_Delete(q->parameters);
    memset(q, 0, sizeof *q);
}

static int refuse_true(rd *x, const char *name, const char *why)
{
    bool v = false;
    if (get_bool(x, name, false, &v) < 0)
        return -1;
    if (v)
        return fail(x, 422, name, "%s=true is not supported: %s", name, why);
    return 0;
}

static int add_or_fail(rd *x, cJSON *o, const char *name, cJSON *v)
{
    if (!v || !cJSON_AddItemToObject(o, name, v)) {
        cJSON_Delete(v);
        return fail(x, 400, NULL, "out of memory");
    }
    return 0;
}

int svc_a1111_translate(const cJSON *body, bool img2img, const svc_a1111_defaults *d,
                        svc_a1111_req *q, svc_a1111_error *err)
{
    rd x;
    svc_fields_init(&x.f, body, NULL, false);
    x.err = err;
    memset(q, 0, sizeof *q);
    memset(err, 0, sizeof *err);
    q->img2img = img2img;
    if (!cJSON_IsObject(body))
        return fail(&x, 400, NULL, "the body must be a JSON object");
    const int max_size = d && d->max_size ? d->max_size : TSR_MAX_SIZE;
    const char *prompt, *negative, *sampler_name, *sampler_index, *scheduler, *script_name,
        *refiner, *mask;
    long long steps, width, height, batch_size, n_iter, subseed, rh, rw, resize_mode = 0,
                                                                  fill = 0, invert = 0;
    double cfg, strength, subseed_strength;
    uint64_t subseed_u = 0;
    bool sub_random = false;
    if (get_str(&x, "prompt", SVC_MAX_PROMPT_BYTES, &prompt) < 0 ||
        get_str(&x, "negative_prompt", SVC_MAX_PROMPT_BYTES, &negative) < 0 ||
        get_int(&x, "steps", 1, TSR_MAX_STEPS, 50, &steps) < 0 ||
        get_num(&x, "cfg_scale", 7.0, &cfg) < 0 ||
        get_int(&x, "width", 0, 1 << 30, 512, &width) < 0 ||
        get_int(&x, "height", 0, 1 << 30, 512, &height) < 0 ||
        get_seed(&x, "seed", &q->seed, &q->seed_random) < 0 ||
        get_int(&x, "subseed", -1, (long long)UINT32_MAX, -1, &subseed) < 0 ||
        get_num(&x, "subseed_strength", 0, &subseed_strength) < 0 ||
        get_int(&x, "seed_resize_from_h", -1, 1 << 30, -1, &rh) < 0 ||
        get_int(&x, "seed_resize_from_w", -1, 1 << 30, -1, &rw) < 0 ||
        get_str(&x, "sampler_name", 96, &sampler_name) < 0 ||
        get_str(&x, "sampler_index", 96, &sampler_index) < 0 ||
        get_str(&x, "scheduler", 64, &scheduler) < 0 ||
        get_int(&x, "batch_size", 1, SVC_A1111_MAX_IMAGES, 1, &batch_size) < 0 ||
        get_int(&x, "n_iter", 1, SVC_A1111_MAX_IMAGES, 1, &n_iter) < 0 ||
        get_num(&x, "denoising_strength", 0.75, &strength) < 0 ||
        get_bool(&x, "send_images", true, &q->send_images) < 0 ||
        get_bool(&x, "save_images", false, &q->save_images) < 0 ||
        get_str(&x, "script_name", 256, &script_name) < 0 ||
        get_str(&x, "refiner_checkpoint", 256, &refiner) < 0 ||
        get_kind(&x, "alwayson_scripts", cJSON_Object) < 0 ||
        get_kind(&x, "override_settings", cJSON_Object) < 0 ||
        get_kind(&x, "styles", cJSON_Array) < 0 ||
        refuse_true(&x, "restore_faces", "Tessera has no face restoration model") < 0 ||
        refuse_true(&x, "tiling", "Tessera does not make tileable images") < 0 ||
        refuse_true(&x, "enable_hr",
                    "Tessera has no hires-fix second pass (generate at the final size, or "
                    "upscale with img2img)") < 0 ||
        check_ignored(&x) < 0)
        goto bad;
    const cJSON *styles = item(&x, "styles"), *st;
    cJSON_ArrayForEach(st, styles)
    {
        if (!cJSON_IsString(st)) {
            fail(&x, 422, "styles", "styles must be an array of strings");
            goto bad;
        }
    }
    if (batch_size * n_iter > SVC_A1111_MAX_IMAGES) {
        fail(&x, 422, "batch_size", "batch_size * n_iter is %lld; at most %d images per call",
             batch_size * n_iter, SVC_A1111_MAX_IMAGES);
        goto bad;
    }
    if (subseed_strength != 0) {
        fail(&x, 422, "subseed_strength",
             "subseed_strength must be 0: variation seeds are not supported, got %g",
             subseed_strength);
        goto bad;
    }
    if (rh > 0 || rw > 0) {
        fail(&x, 422, rh > 0 ? "seed_resize_from_h" : "seed_resize_from_w",
             "seed_resize_from_h/w must be -1 or 0: resizing the seed is not supported");
        goto bad;
    }
    if (script_name && script_name[0]) {
        fail(&x, 422, "script_name", "script_name: no scripts are available on this server "
             "(got \"%.64s\")", script_name);
        goto bad;
    }
    const cJSON *aos = item(&x, "alwayson_scripts");
    if (aos && aos->child) {
        fail(&x, 422, "alwayson_scripts",
             "alwayson_scripts: no scripts are available on this server (got \"%.64s\")",
             aos->child->string);
        goto bad;
    }
    if (refiner && refiner[0]) {
        fail(&x, 422, "refiner_checkpoint", "refiner_checkpoint is not supported");
        goto bad;
    }
    if (width % 8 || height % 8 || width < TSR_MIN_SIZE || height < TSR_MIN_SIZE ||
        width > max_size || height > max_size) {
        bool bw = width % 8 || width < TSR_MIN_SIZE || width > max_size;
        fail(&x, 422, bw ? "width" : "height",
             "%s must be a multiple of 8 between %d and %d, got %lld", bw ? "width" : "height",
             TSR_MIN_SIZE, max_size, bw ? width : height);
        goto bad;
    }
    /* sampler and scheduler */
    const char *sname = sampler_name ? sampler_name : sampler_index ? sampler_index : "Euler";
    const char *field = sampler_name ? "sampler_name" : "sampler_index";
    const char *tsampler = NULL, *a1111 = NULL, *sched = NULL, *label = "Automatic";
    if (!svc_a1111_sampler(sname, &tsampler, &a1111, &sched)) {
        fail(&x, 422, field, "%s: unknown sampler \"%.80s\" (GET /sdapi/v1/samplers lists them)",
             field, sname);
        goto bad;
    }
    if (sched) {
        const char *dummy;
        q->schedule_in_name = true;
        svc_a1111_schedule(sched, &dummy, &label);
    } else if (scheduler) {
        if (!svc_a1111_schedule(scheduler, &sched, &label)) {
            fail(&x, 422, "scheduler",
                 "scheduler: unknown or unsupported scheduler \"%.64s\" (GET "
                 "/sdapi/v1/schedulers lists them)",
                 scheduler);
            goto bad;
        }
    }
    snprintf(q->sampler_name, sizeof q->sampler_name, "%s", a1111);
    snprintf(q->scheduler, sizeof q->scheduler, "%s", label);
    /* override_settings */
    long long clip_skip = d && d->clip_skip ? d->clip_skip : 1;
    const cJSON *ov = item(&x, "override_settings");
    svc_fields fo;
    svc_fields_init(&fo, ov, NULL, false);
    if (ov && svc_fields_int(&fo, "CLIP_stop_at_last_layers", 1, 12, clip_skip, &clip_skip) < 0) {
        fail(&x, 422, "override_settings.CLIP_stop_at_last_layers", "%s", fo.message);
        goto bad;
    }
    /* sub-seed: reported only */
    if (subseed < 0) {
        sub_random = true;
        subseed_u = svc_random_u64() % 4294967294ull;
    } else {
        subseed_u = (uint64_t)subseed;
    }
    (void)sub_random;
    q->subseed = (int64_t)subseed_u;
    q->subseed_strength = subseed_strength;
    if (!q->seed_random && q->seed > UINT64_MAX - (uint64_t)(batch_size * n_iter)) {
        fail(&x, 422, "seed", "seed + batch_size * n_iter passes 18446744073709551615");
        goto bad;
    }
    /* the native object */
    cJSON *n = q->native = cJSON_CreateObject();
    if (!n) {
        fail(&x, 400, NULL, "out of memory");
        goto bad;
    }
    if (add_or_fail(&x, n, "prompt", cJSON_CreateString(prompt ? prompt : "")) < 0 ||
        add_or_fail(&x, n, "negative_prompt", cJSON_CreateString(negative ? negative : "")) < 0 ||
        add_or_fail(&x, n, "width", cJSON_CreateNumber((double)width)) < 0 ||
        add_or_fail(&x, n, "height", cJSON_CreateNumber((double)height)) < 0 ||
        add_or_fail(&x, n, "steps", cJSON_CreateNumber((double)steps)) < 0 ||
        add_or_fail(&x, n, "cfg_scale", cJSON_CreateNumber(cfg)) < 0 ||
        add_or_fail(&x, n, "sampler", cJSON_CreateString(tsampler)) < 0 ||
        (sched && add_or_fail(&x, n, "scheduler", cJSON_CreateString(sched)) < 0) ||
        add_or_fail(&x, n, "clip_skip", cJSON_CreateNumber((double)clip_skip)) < 0)
        goto bad;
    if (img2img) {
        const cJSON *inits = item(&x, "init_images");
        if (!inits) {
            fail(&x, 422, "init_images", "init_images is required (a list with one base64 image)");
            goto bad;
        }
        if (!cJSON_IsArray(inits) || cJSON_GetArraySize(inits) != 1 ||
            !cJSON_IsString(inits->child)) {
            fail(&x, 422, "init_images",
                 "init_images must be a list of exactly one base64 PNG or JPEG string");
            goto bad;
        }
        if (inits->child->type & SVC_JSON_HAS_NUL) {
            fail(&x, 422, "init_images", "init_images is not valid base64: it contains U+0000");
            goto bad;
        }
        if (get_int(&x, "resize_mode", 0, 3, 0, &resize_mode) < 0 ||
            get_int(&x, "inpainting_fill", 0, 3, 0, &fill) < 0 ||
            get_int(&x, "inpainting_mask_invert", 0, 1, 0, &invert) < 0 ||
            get_str(&x, "mask", SIZE_MAX, &mask) < 0)
            goto bad;
        if (item(&x, "latent_mask")) {
            fail(&x, 422, "latent_mask", "latent_mask is not supported");
            goto bad;
        }
        if (resize_mode != 0) {
            fail(&x, 422, "resize_mode",
                 "resize_mode must be 0 (just resize): crop, fill and latent upscale are not "
                 "supported, got %lld",
                 resize_mode);
            goto bad;
        }
        if (!(strength > 0 && strength <= 1)) {
            fail(&x, 422, "denoising_strength",
                 "denoising_strength must be a number in (0, 1], got %g", strength);
            goto bad;
        }
        if (mask && fill != 1) {
            fail(&x, 422, "inpainting_fill",
                 "inpainting_fill must be 1 (original) with a mask: Tessera inpaints from the "
                 "original image's latents; fill (0), latent noise (2) and latent nothing (3) "
                 "are not supported, got %lld",
                 fill);
            goto bad;
        }
        char *b = NULL;
        if (prepare_image(&x, "init_images", inits->child->valuestring, 3, (int)width,
                          (int)height, false, &b) < 0)
            goto bad;
        if (add_or_fail(&x, n, "init_image", cJSON_CreateString(b)) < 0) {
            free(b);
            goto bad;
        }
        free(b);
        if (mask) {
            if (prepare_image(&x, "mask", mask, 1, (int)width, (int)height, invert == 1, &b) < 0)
                goto bad;
            if (add_or_fail(&x, n, "mask", cJSON_CreateString(b)) < 0) {
                free(b);
                goto bad;
            }
            free(b);
        }
        if (add_or_fail(&x, n, "strength", cJSON_CreateNumber(strength)) < 0)
            goto bad;
    }
    bool with_images = false;
    if (img2img && get_bool(&x, "include_init_images", false, &with_images) < 0)
        goto bad;
    q->parameters = parameters_json(body, img2img, with_images);
    if (!q->parameters) {
        fail(&x, 400, NULL, "out of memory");
        goto bad;
    }
    q->styles = cJSON_GetObjectItemCaseSensitive(q->parameters, "styles");
    q->batch_size = (int)batch_size;
    q->n_iter = (int)n_iter;
    q->total = (int)(batch_size * n_iter);
    q->prompt = cJSON_GetObjectItemCaseSensitive(n, "prompt")->valuestring;
    q->negative_prompt = cJSON_GetObjectItemCaseSensitive(n, "negative_prompt")->valuestring;
    q->width = (int)width;
    q->height = (int)height;
    q->steps = (int)steps;
    q->clip_skip = (int)clip_skip;
    q->cfg_scale = cfg;
    q->denoising_strength = img2img ? strength : 0;
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
