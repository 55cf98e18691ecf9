/*
 * service/api/a1111/a1111_options.c - /sdapi/v1/options: A1111's settings
 * as one table of data (name, type, default, what Tessera does with it),
 * the values a client set, and their file in the data dir.
 *
 * Why it is built this way: A1111 keeps every option it knows, and clients
 * (SillyTavern, Open WebUI, webuiapi scripts) read them back to learn and
 * switch state, so an option that Tessera cannot act on must still
 * round-trip.  The table is the whole contract: GET lists every row (the
 * value set, else the default), POST reads each key with the shared field
 * reader under A1111's coercion rules (api/fields.c) against its row's
 * type, and answers per key: applied (Tessera acts on it), stored (kept and
 * echoed, no effect, with why) or ignored (not an A1111 option).  A POST
 * with a refused key changes nothing (all or nothing) and answers 422
 * naming each.  The values set are written whole, atomically
 * (base/files.c), to <data dir>/a1111-options.json after each change and
 * read when the server starts; a damaged file is logged and ignored, never
 * fatal, since options are preferences, not data.  A new option is one row.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a1111.h"
#include "fields.h"
#include "files.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "server.h"

#define OPTIONS_FILE "a1111-options.json"
#define OPTIONS_FILE_MAX (1u << 20)
#define OPTION_STRING_MAX 4096

typedef struct a1111_option {
    const char *name;
    char type;         /* 'b' boolean, 'i' integer in [lo, hi], 'n' number (any when
                        * lo == hi), 's' string, 'a' array of strings */
    const char *dflt;  /* A1111's default as a JSON literal; NULL: the server's own */
    double lo, hi;
    const char *effect; /* NULL: stored, no effect (`why_not` or the generic why);
                         * else what applying it does */
    const char *why_not;
} a1111_option;

#define B(n, d) {n, 'b', d, 0, 0, NULL, NULL}
#define I(n, d, lo, hi) {n, 'i', d, lo, hi, NULL, NULL}
#define N(n, d) {n, 'n', d, 0, 0, NULL, NULL}
#define S(n, d) {n, 's', d, 0, 0, NULL, NULL}
#define A(n, d) {n, 'a', d, 0, 0, NULL, NULL}

/* A1111's shared options (modules/shared_options.py) that its API returns
 * and clients read; defaults as A1111 ships them. */
static const a1111_option k_options[] = {
    {"sd_model_checkpoint", 's', NULL, 0, 0, "checked: this server has one model", NULL},
    {"CLIP_stop_at_last_layers", 'i', NULL, 1, 12,
     "the clip skip of every later call without override_settings", NULL},
    {"eta_ddim", 'n', "0.0", 0, 0, NULL,
     "Tessera's DDIM is deterministic (eta 0); the A1111 API does not pass eta"},
    {"eta_ancestral", 'n', "1.0", 0, 0, NULL,
     "Tessera's ancestral samplers use eta 1; the A1111 API does not pass eta"},
    {"samples_format", 's', "\"png\"", 0, 0, NULL, "Tessera answers and stores PNG images"},
    {"jpeg_quality", 'i', "80", 1, 100, NULL, "Tessera answers and stores PNG images"},
    {"outdir_samples", 's', NULL, 0, 0, NULL, "images are kept in the data dir (--data-dir)"},
    {"show_progress_every_n_steps", 'i', NULL, -1, 1000, NULL,
     "previews follow --preview-every"},
    {"sd_vae", 's', "\"Automatic\"", 0, 0, NULL, "the model's own VAE is used"},
    {"sd_unet", 's', "\"Automatic\"", 0, 0, NULL, "the model's own UNet is used"},
    B("send_seed", "true"), B("send_size", "true"),
    B("samples_save", "true"), S("samples_filename_pattern", "\"\""),
    B("save_images_add_number", "true"), B("grid_save", "true"), S("grid_format", "\"png\""),
    B("enable_pnginfo", "true"), B("save_txt", "false"), B("webp_lossless", "false"),
    B("export_for_4chan", "true"), N("img_downscale_threshold", "4.0"),
    I("target_side_length", "4000", 0, 1 << 20), N("img_max_size_mp", "200"),
    B("use_original_name_batch", "true"), B("save_selected_only", "true"),
    B("do_not_add_watermark", "false"), S("outdir_txt2img_samples", "\"outputs/txt2img-images\""),
    S("outdir_img2img_samples", "\"outputs/img2img-images\""),
    S("outdir_extras_samples", "\"outputs/extras-images\""), S("outdir_grids", "\"\""),
    S("outdir_save", "\"log/images\""), B("save_to_dirs", "true"),
    S("upscaler_for_img2img", "null"), B("face_restoration", "false"),
    S("face_restoration_model", "\"CodeFormer\""), N("code_former_weight", "0.5"),
    I("sd_checkpoint_cache", "0", 0, 100), B("sd_vae_overrides_per_model_preferences", "true"),
    N("initial_noise_multiplier", "1.0"), B("img2img_color_correction", "false"),
    B("img2img_fix_steps", "false"), S("img2img_background_color", "\"#ffffff\""),
    B("enable_quantization", "false"), S("emphasis", "\"Original\""),
    B("enable_batch_seeds", "true"), I("comma_padding_backtrack", "20", 0, 74),
    B("upcast_attn", "false"), S("randn_source", "\"GPU\""), S("ddim_discretize", "\"uniform\""),
    N("s_churn", "0.0"), N("s_tmin", "0.0"), N("s_tmax", "0.0"), N("s_noise", "1.0"),
    S("k_sched_type", "\"Automatic\""), N("sigma_min", "0.0"), N("sigma_max", "0.0"),
    N("rho", "0.0"), I("eta_noise_seed_delta", "0", 0, 1 << 30),
    B("always_discard_next_to_last_sigma", "false"), B("sgm_noise_multiplier", "false"),
    S("uni_pc_variant", "\"bh1\""), S("uni_pc_skip_type", "\"time_uniform\""),
    I("uni_pc_order", "3", 1, 50), B("uni_pc_lower_order_final", "true"),
    B("live_previews_enable", "true"), S("live_previews_image_format", "\"png\""),
    B("show_progress_grid", "true"), S("show_progress_type", "\"Approx NN\""),
    S("live_preview_content", "\"Prompt\""), N("live_preview_refresh_period", "1000"),
    A("quicksettings_list", "[\"sd_model_checkpoint\"]"), A("hide_samplers", "[]"),
    S("sd_hypernetwork", "\"None\""), S("sd_lora", "\"None\""),
    B("add_model_hash_to_info", "true"), B("add_model_name_to_info", "true"),
    B("add_version_to_infotext", "true"), B("return_grid", "true"), B("return_mask", "false"),
    B("return_mask_composite", "false"), B("samples_log_stdout", "false"),
    N("token_merging_ratio", "0.0"), I("ESRGAN_tile", "192", 0, 512),
    I("ESRGAN_tile_overlap", "8", 0, 48), B("dont_fix_second_order_samplers_schedule", "false"),
    B("api_enable_requests", "true"), B("api_forbid_local_requests", "true"),
    S("api_useragent", "\"\""), B("interrogate_keep_models_in_memory", "false"),
    B("multiple_tqdm", "true"), N("memmon_poll_rate", "8"),
};

static const a1111_option *option_of(const char *name)
{
    for (size_t i = 0; i < sizeof k_options / sizeof k_options[0]; i++)
        if (strcmp(k_options[i].name, name) == 0)
            return &k_options[i];
    return NULL;
}

/* ------------------------------------------------------------- one value */

/* `it` (the member `name` of obj) as the row's type, coerced the way
 * pydantic would; NULL with *why when refused, NULL with why "" for null
 * (back to the default). */
static cJSON *value_of(const a1111_option *o, const cJSON *obj, char *why, size_t size)
{
    svc_fields f;
    svc_fields_init(&f, obj, NULL, false);
    f.coerce = SVC_COERCE_PYDANTIC;
    why[0] = '\0';
    const cJSON *it = svc_fields_get(&f, o->name);
    if (!it)
        return NULL;
    cJSON *v = NULL;
    int rc = 0;
    if (o->type == 'b') {
        bool b = false;
        rc = svc_fields_bool(&f, o->name, false, false, &b);
        v = rc == 0 ? cJSON_CreateBool(b) : NULL;
    } else if (o->type == 'i') {
        long long i = 0;
        rc = svc_fields_int(&f, o->name, (long long)o->lo, (long long)o->hi, 0, &i);
        v = rc == 0 ? cJSON_CreateNumber((double)i) : NULL;
    } else if (o->type == 'n') {
        double n = 0;
        const bool any = o->lo == o->hi;
        rc = svc_fields_number(&f, o->name, any ? -HUGE_VAL : o->lo, any ? HUGE_VAL : o->hi,
                               false, 0, &n, NULL);
        v = rc == 0 ? cJSON_CreateNumber(n) : NULL;
    } else if (o->type == 's') {
        const char *s = NULL;
        rc = svc_fields_string(&f, o->name, OPTION_STRING_MAX, false, &s);
        v = rc == 0 ? cJSON_CreateString(s) : NULL;
    } else {
        rc = svc_fields_kind(&f, o->name, cJSON_Array);
        for (const cJSON *e = rc == 0 ? it->child : NULL; e; e = e->next)
            if (!cJSON_IsString(e) || (e->type & SVC_JSON_HAS_NUL) ||
                strlen(e->valuestring) > OPTION_STRING_MAX)
                rc = svc_fields_fail(&f, o->name, "%s must be an array of strings", o->name);
        v = rc == 0 ? cJSON_Duplicate(it, true) : NULL;
    }
    if (rc < 0)
        snprintf(why, size, "%s", f.message);
    else if (!v)
        snprintf(why, size, "out of memory");
    return v;
}

/* A1111's title of the model: "demo [hash]" (a1111_info.c). */
static bool is_loaded_model(svc_server *s, const char *name)
{
    char title[300];
    svc_a1111_model_title(s, title, sizeof title);
    return strcmp(name, title) == 0 || strcmp(name, s->model_name) == 0;
}

/* Check a value against what Tessera can do (after its type); "" when fine. */
static void check_effect(svc_server *s, const a1111_option *o, const cJSON *v, char *why,
                         size_t size)
{
    why[0] = '\0';
    if (strcmp(o->name, "sd_model_checkpoint") == 0 && !is_loaded_model(s, v->valuestring)) {
        char title[300];
        svc_a1111_model_title(s, title, sizeof title);
        snprintf(why, size,
                 "sd_model_checkpoint: this server has one model, \"%s\"; switching models is "
                 "not supported",
                 title);
    }
}

/* What setting it does: CLIP_stop_at_last_layers is the server's clip skip. */
static void apply(svc_server *s, const a1111_option *o, const cJSON *v)
{
    if (strcmp(o->name, "CLIP_stop_at_last_layers") == 0)
        svc_a1111_set_clip_skip(s, v ? (int)v->valuedouble : 1);
}

/* ---------------------------------------------------------------- the file */

static void file_path(svc_server *s, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", s->cfg.data_dir, OPTIONS_FILE);
}

cJSON *svc_a1111_options_load(svc_server *s)
{
    cJSON *set = cJSON_CreateObject();
    char path[4096], *text = NULL;
    size_t len = 0;
    if (!set || !s->cfg.data_dir)
        return set;
    file_path(s, path, sizeof path);
    int e = svc_read_file(path, &text, &len, OPTIONS_FILE_MAX);
    if (e < 0) {
        if (e != -ENOENT) /* ENOENT: none set yet */
            SVC_WARN("%s: cannot read (errno %d); A1111 options start from their defaults",
                     path, -e);
        return set;
    }
    char why[256];
    cJSON *o = svc_json_parse(text, len, why, sizeof why);
    free(text);
    if (!cJSON_IsObject(o)) {
        SVC_WARN("%s: damaged (%s); ignored, A1111 options start from their defaults", path,
                 o ? "not a JSON object" : why);
        cJSON_Delete(o);
        return set;
    }
    for (const cJSON *it = o->child; it; it = it->next) {
        const a1111_option *opt = option_of(it->string);
        char bad[512];
        cJSON *v = opt ? value_of(opt, o, bad, sizeof bad) : NULL;
        if (v && opt->effect)
            check_effect(s, opt, v, bad, sizeof bad);
        if (!v || bad[0]) {
            SVC_WARN("%s: option %s dropped: %s", path, it->string,
                     opt ? (bad[0] ? bad : "null") : "not an A1111 option");
            cJSON_Delete(v);
            continue;
        }
        apply(s, opt, v);
        cJSON_AddItemToObject(set, opt->name, v);
    }
    cJSON_Delete(o);
    return set;
}

static bool save(svc_server *s, const cJSON *set)
{
    char path[4096];
    file_path(s, path, sizeof path);
    char *text = cJSON_Print(set);
    int e = text ? svc_write_file_atomic(path, text, strlen(text)) : -12;
    cJSON_free(text);
    if (e < 0)
        SVC_WARN("%s: cannot write the A1111 options (errno %d); they last until a restart",
                 path, -e);
    return e == 0;
}

/* ---------------------------------------------------------------- routes */

/* The value GET shows for a row without a value set. */
static cJSON *default_of(svc_server *s, const a1111_option *o)
{
    if (strcmp(o->name, "sd_model_checkpoint") == 0) {
        char title[300];
        svc_a1111_model_title(s, title, sizeof title);
        return cJSON_CreateString(title);
    }
    if (strcmp(o->name, "CLIP_stop_at_last_layers") == 0)
        return cJSON_CreateNumber(svc_a1111_clip_skip(s));
    if (strcmp(o->name, "outdir_samples") == 0)
        return cJSON_CreateString(s->cfg.data_dir ? s->cfg.data_dir : "");
    if (strcmp(o->name, "show_progress_every_n_steps") == 0)
        return cJSON_CreateNumber(s->cfg.preview_every > 0 ? s->cfg.preview_every : 1);
    return cJSON_Parse(o->dflt);
}

void svc_a1111_options(svc_req *r, const char *rest)
{
    (void)rest;
    svc_server *s = r->srv;
    const cJSON *set = svc_a1111_options_set(s);
    cJSON *out = cJSON_CreateObject();
    for (size_t i = 0; out && i < sizeof k_options / sizeof k_options[0]; i++) {
        const a1111_option *o = &k_options[i];
        const cJSON *v = o->effect ? NULL : cJSON_GetObjectItemCaseSensitive(set, o->name);
        cJSON_AddItemToObject(out, o->name, v ? cJSON_Duplicate(v, true) : default_of(s, o));
    }
    svc_reply_json(r, 200, out);
}

/* POST: every key read first (all or nothing), then stored and applied. */
void svc_a1111_set_options(svc_req *r, const char *rest)
{
    (void)rest;
    svc_server *s = r->srv;
    cJSON *body = svc_req_json_object(r);
    if (!body)
        return;
    cJSON *set = svc_a1111_options_set(s);
    cJSON *vals = cJSON_CreateObject(), *res = cJSON_CreateObject();
    cJSON *applied = cJSON_AddArrayToObject(res, "applied");
    cJSON *stored = cJSON_AddArrayToObject(res, "stored");
    cJSON *ignored = cJSON_AddArrayToObject(res, "ignored");
    cJSON *notes = cJSON_AddObjectToObject(res, "notes");
    char refused[1024] = "", first[64] = "";
    int n_refused = 0;
    for (const cJSON *it = body->child; it && set && vals && notes; it = it->next) {
        const a1111_option *o = option_of(it->string);
        if (!o) {
            cJSON_AddItemToArray(ignored, cJSON_CreateString(it->string));
            cJSON_AddStringToObject(notes, it->string, "not an A1111 option; not kept");
            continue;
        }
        char why[512];
        cJSON *v = value_of(o, body, why, sizeof why);
        if (v && o->effect)
            check_effect(s, o, v, why, sizeof why);
        if (why[0]) {
            if (!n_refused++)
                snprintf(first, sizeof first, "%s", o->name);
            size_t l = strlen(refused);
            snprintf(refused + l, sizeof refused - l, "%s%s", l ? "; " : "", why);
            cJSON_Delete(v);
            continue;
        }
        /* v NULL: null, back to the default */
        cJSON_AddItemToObject(vals, o->name, v ? v : cJSON_CreateNull());
        cJSON_AddItemToArray(o->effect ? applied : stored, cJSON_CreateString(o->name));
        cJSON_AddStringToObject(notes, o->name,
                                o->effect ? o->effect
                                          : o->why_not ? o->why_not
                                                       : "kept and echoed; Tessera has no such "
                                                         "setting");
    }
    cJSON_Delete(body);
    if (!set || !vals || !notes) {
        cJSON_Delete(vals);
        cJSON_Delete(res);
        svc_a1111_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    if (n_refused) {
        cJSON_Delete(vals);
        cJSON_Delete(res);
        svc_a1111_reply_error(r, 422, "invalid_parameter", first, "%s", refused);
        return;
    }
    bool changed = false;
    for (cJSON *v = vals->child; v; v = v->next) {
        const a1111_option *o = option_of(v->string);
        if (strcmp(o->name, "sd_model_checkpoint") == 0)
            continue; /* checked, nothing to keep */
        apply(s, o, cJSON_IsNull(v) ? NULL : v);
        cJSON_DeleteItemFromObjectCaseSensitive(set, o->name);
        if (!cJSON_IsNull(v))
            cJSON_AddItemToObject(set, o->name, cJSON_Duplicate(v, true));
        changed = true;
    }
    cJSON_Delete(vals);
    cJSON_AddBoolToObject(res, "saved", changed ? save(s, set) : true);
    svc_reply_json(r, 200, res);
}
