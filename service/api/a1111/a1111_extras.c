/*
 * service/api/a1111/a1111_extras.c - A1111's extras: POST
 * /sdapi/v1/extra-single-image, /extra-batch-images and /png-info.
 *
 * Why it is built this way: the extras are image-in, image-out, with no
 * job, so they do not pass the submit gate; they are a translator like the
 * rest of api/a1111/, reading A1111's fields with the shared field reader
 * under its coercion rules, and their work is the engine's public codecs
 * (tessera.h: tsr_image_decode, tsr_image_resample with Pillow's Lanczos
 * and nearest, tsr_image_encode_png, tsr_image_png_parameters), so an
 * upscale here is Pillow's bytes, as A1111's Lanczos and Nearest
 * upscalers are.  The size rules are A1111's (modules/upscaler.py:
 * dest = int(side * scale) // 8 * 8, one pass of the upscaler, then Lanczos
 * to dest; "upscale to" takes the larger ratio and crops or pads to the
 * box when upscaling_crop), and so is the blend of a second upscaler
 * (Pillow's Image.blend).  The output size is checked before anything is
 * allocated.  Face restoration (GFPGAN, CodeFormer) needs models Tessera
 * does not have: a visibility above 0 is a 422 saying so.  The work runs
 * on the event loop: bounded by EXTRAS_MAX_SIDE/PIXELS, it is a few
 * hundred milliseconds at worst (docs/compat-a1111.md).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a1111.h"
#include "codec.h"
#include "fields.h"
#include "http.h"
#include "json.h"
#include "images.h"
#include "server.h"
#include "tessera.h"

#define EXTRAS_MAX_SIDE 8192
#define EXTRAS_MAX_PIXELS (8192ll * 4096ll)

typedef struct extras_opts {
    long long mode;              /* resize_mode: 0 by factor, 1 to a size */
    double by;                   /* upscaling_resize */
    long long to_w, to_h;        /* upscaling_resize_w/h */
    bool crop;                   /* upscaling_crop */
    const char *up1, *up2;       /* upscaler_1/2: "None", "Lanczos", "Nearest" */
    double up2_visibility;       /* extras_upscaler_2_visibility */
} extras_opts;

typedef struct extras_error {
    int status;
    char field[64];
    char message[512];
} extras_error;

static int fail(extras_error *e, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(extras_error *e, int status, const char *field, const char *fmt, ...)
{
    e->status = status;
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *const k_upscalers[] = {"None", "Lanczos", "Nearest", NULL};

/* A1111's ExtrasBaseRequest fields, read in its order. */
static int read_opts(const cJSON *body, extras_opts *o, extras_error *e)
{
    svc_fields f;
    svc_fields_init(&f, body, NULL, false);
    f.coerce = SVC_COERCE_PYDANTIC;
    double gfpgan = 0, codeformer = 0, weight = 0;
    bool show = true, first = false;
    if (svc_fields_int(&f, "resize_mode", 0, 1, 0, &o->mode) < 0 ||
        svc_fields_bool(&f, "show_extras_results", false, true, &show) < 0 ||
        svc_fields_number(&f, "gfpgan_visibility", 0, 1, false, 0, &gfpgan, NULL) < 0 ||
        svc_fields_number(&f, "codeformer_visibility", 0, 1, false, 0, &codeformer, NULL) < 0 ||
        svc_fields_number(&f, "codeformer_weight", 0, 1, false, 0, &weight, NULL) < 0 ||
        svc_fields_number(&f, "upscaling_resize", 1, 8, false, 2, &o->by, NULL) < 0 ||
        svc_fields_int(&f, "upscaling_resize_w", 1, EXTRAS_MAX_SIDE, 512, &o->to_w) < 0 ||
        svc_fields_int(&f, "upscaling_resize_h", 1, EXTRAS_MAX_SIDE, 512, &o->to_h) < 0 ||
        svc_fields_bool(&f, "upscaling_crop", false, true, &o->crop) < 0 ||
        svc_fields_enum(&f, "upscaler_1", k_upscalers, &o->up1) < 0 ||
        svc_fields_enum(&f, "upscaler_2", k_upscalers, &o->up2) < 0 ||
        svc_fields_number(&f, "extras_upscaler_2_visibility", 0, 1, false, 0, &o->up2_visibility,
                          NULL) < 0 ||
        svc_fields_bool(&f, "upscale_first", false, false, &first) < 0)
        return fail(e, 422, f.field, "%s", f.message);
    if (gfpgan > 0)
        return fail(e, 422, "gfpgan_visibility",
                    "gfpgan_visibility must be 0: face restoration needs a GFPGAN model, which "
                    "Tessera does not have");
    if (codeformer > 0)
        return fail(e, 422, "codeformer_visibility",
                    "codeformer_visibility must be 0: face restoration needs a CodeFormer "
                    "model, which Tessera does not have");
    if (!o->up1)
        o->up1 = "None";
    if (!o->up2)
        o->up2 = "None";
    return 0;
}

/* --------------------------------------------------------------- pixels */

typedef struct picture {
    uint8_t *rgb;
    int w, h;
    char *parameters; /* the infotext it came with, or NULL */
} picture;

static void picture_free(picture *p)
{
    free(p->rgb);
    free(p->parameters);
    memset(p, 0, sizeof *p);
}

/* base64 or a base64 data: URL to its bytes (svc_fields_base64). */
static int bytes_of(const char *field, const char *s, uint8_t **out, size_t *len,
                    extras_error *e)
{
    char why[300];
    if (svc_fields_base64(field, s, out, len, why, sizeof why) < 0)
        return fail(e, 422, field, "%s", why);
    return 0;
}

static int decode(const char *field, const char *s, picture *p, extras_error *e)
{
    uint8_t *file = NULL;
    size_t len = 0;
    if (bytes_of(field, s, &file, &len, e) < 0)
        return -1;
    char why[300];
    int rc = svc_image_decode(file, len, 3, &p->rgb, &p->w, &p->h, why, sizeof why);
    if (rc == 0 && tsr_image_png_parameters(file, len, &p->parameters) != TSR_OK)
        p->parameters = NULL; /* a JPEG: no infotext */
    free(file);
    if (rc < 0)
        return fail(e, 422, field, "%s: %s", field, why);
    return 0;
}

/* A1111's Upscaler.upscale: dest = int(side * scale) // 8 * 8 (at least 8
 * here), one pass of the filter to int(side * scale), then Lanczos to dest
 * when that differs.  "None" passes nothing and goes straight to dest. */
static int upscale(const picture *in, const char *name, double scale, picture *out,
                   extras_error *e)
{
    const int dw = (int)(floor(in->w * scale) / 8) * 8, dh = (int)(floor(in->h * scale) / 8) * 8;
    const int pw = (int)floor(in->w * scale), ph = (int)floor(in->h * scale);
    if (dw < 8 || dh < 8)
        return fail(e, 422, "upscaling_resize", "the result would be %dx%d; at least 8x8", dw, dh);
    uint8_t *cur = NULL;
    int cw = in->w, ch = in->h;
    if (strcmp(name, "None") != 0 && scale != 1) {
        tsr_resample f = strcmp(name, "Nearest") == 0 ? TSR_RESAMPLE_NEAREST
                                                      : TSR_RESAMPLE_LANCZOS;
        if (tsr_image_resample(in->rgb, in->w, in->h, 3, pw, ph, EXTRAS_MAX_SIDE, f, &cur) !=
            TSR_OK)
            return fail(e, 422, "upscaling_resize", "%s", tsr_last_error());
        cw = pw;
        ch = ph;
    }
    const uint8_t *src = cur ? cur : in->rgb;
    if (cw != dw || ch != dh) {
        uint8_t *fin = NULL;
        int rc = tsr_image_resample(src, cw, ch, 3, dw, dh, EXTRAS_MAX_SIDE,
                                    TSR_RESAMPLE_LANCZOS, &fin);
        free(cur);
        if (rc != TSR_OK)
            return fail(e, 422, "upscaling_resize", "%s", tsr_last_error());
        cur = fin;
    } else if (!cur) {
        cur = malloc((size_t)dw * dh * 3);
        if (!cur)
            return fail(e, 500, NULL, "out of memory");
        memcpy(cur, in->rgb, (size_t)dw * dh * 3);
    }
    out->rgb = cur;
    out->w = dw;
    out->h = dh;
    return 0;
}

/* PIL's Image.new("RGB", (w, h)) with the picture pasted at its centre. */
static int crop_to(picture *p, int w, int h, extras_error *e)
{
    uint8_t *dst = calloc((size_t)w * h, 3);
    if (!dst)
        return fail(e, 500, NULL, "out of memory");
    const int x0 = w / 2 - p->w / 2, y0 = h / 2 - p->h / 2;
    for (int y = 0; y < p->h; y++) {
        const int dy = y + y0;
        if (dy < 0 || dy >= h)
            continue;
        for (int x = 0; x < p->w; x++) {
            const int dx = x + x0;
            if (dx >= 0 && dx < w)
                memcpy(dst + ((size_t)dy * w + dx) * 3, p->rgb + ((size_t)y * p->w + x) * 3, 3);
        }
    }
    free(p->rgb);
    p->rgb = dst;
    p->w = w;
    p->h = h;
    return 0;
}

/* One image through A1111's postprocessing upscale; *info gets A1111's
 * infotext of what was done ("" when nothing was). */
static int run_one(picture *p, const extras_opts *o, char *info, size_t info_size,
                   extras_error *e)
{
    info[0] = '\0';
    if (strcmp(o->up1, "None") == 0)
        return 0; /* A1111: no first upscaler, no upscaling */
    const double scale = o->mode == 1 ? fmax((double)o->to_w / p->w, (double)o->to_h / p->h)
                                      : o->by;
    const double ow = floor(p->w * scale), oh = floor(p->h * scale);
    const double bw = o->mode == 1 && o->crop ? fmax(ow, (double)o->to_w) : ow;
    const double bh = o->mode == 1 && o->crop ? fmax(oh, (double)o->to_h) : oh;
    if (bw > EXTRAS_MAX_SIDE || bh > EXTRAS_MAX_SIDE || bw * bh > (double)EXTRAS_MAX_PIXELS)
        return fail(e, 422, o->mode == 1 ? "upscaling_resize_w" : "upscaling_resize",
                    "upscaling %dx%d by %g gives %.0fx%.0f; at most %d pixels a side and %lld "
                    "in all",
                    p->w, p->h, scale, ow, oh, EXTRAS_MAX_SIDE, EXTRAS_MAX_PIXELS);
    picture a = {0}, b = {0};
    if (upscale(p, o->up1, scale, &a, e) < 0)
        return -1;
    const bool second = strcmp(o->up2, "None") != 0 && o->up2_visibility > 0;
    if (second) {
        if (upscale(p, o->up2, scale, &b, e) < 0) {
            picture_free(&a);
            return -1;
        }
        /* Pillow's Image.blend: in1 + alpha * (in2 - in1), truncated */
        const float alpha = (float)o->up2_visibility;
        for (size_t i = 0; i < (size_t)a.w * a.h * 3; i++) {
            const float v = (float)a.rgb[i] + alpha * ((float)b.rgb[i] - (float)a.rgb[i]);
            a.rgb[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : (int)v);
        }
        picture_free(&b);
    }
    if (o->mode == 1 && o->crop && crop_to(&a, (int)o->to_w, (int)o->to_h, e) < 0) {
        picture_free(&a);
        return -1;
    }
    free(p->rgb);
    p->rgb = a.rgb;
    p->w = a.w;
    p->h = a.h;
    if (o->mode == 1)
        snprintf(info, info_size, "Postprocess upscale to: %lldx%lld", o->to_w, o->to_h);
    else
        snprintf(info, info_size, "Postprocess upscale by: %g", o->by);
    size_t l = strlen(info);
    snprintf(info + l, info_size - l, ", Postprocess upscaler: %s", o->up1);
    if (second) {
        l = strlen(info);
        snprintf(info + l, info_size - l, ", Postprocess upscaler 2: %s", o->up2);
    }
    return 0;
}

/* The result as base64 PNG, the infotext it came with kept (A1111 keeps
 * the image's PNG info). */
static cJSON *encoded(const picture *p, extras_error *e)
{
    uint8_t *png = NULL;
    size_t len = 0;
    char why[200];
    if (svc_png_encode(p->rgb, p->w, p->h, p->parameters, &png, &len, why, sizeof why) < 0) {
        fail(e, 500, NULL, "%s", why);
        return NULL;
    }
    char *b64 = svc_base64_encode(png, len);
    free(png);
    cJSON *s = b64 ? cJSON_CreateString(b64) : NULL;
    free(b64);
    if (!s)
        fail(e, 500, NULL, "out of memory");
    return s;
}

/* ui_common.plaintext_to_html: each line escaped, <br> between, in <p>. */
static cJSON *html_of(const char *text)
{
    size_t n = strlen(text);
    char *h = malloc(n * 6 + 16);
    if (!h)
        return NULL;
    char *o = h + sprintf(h, "<p>");
    for (const char *c = text; *c; c++) {
        switch (*c) {
        case '<': o += sprintf(o, "&lt;"); break;
        case '>': o += sprintf(o, "&gt;"); break;
        case '&': o += sprintf(o, "&amp;"); break;
        case '"': o += sprintf(o, "&quot;"); break;
        case '\'': o += sprintf(o, "&#x27;"); break;
        case '\n': o += sprintf(o, "<br>\n"); break;
        default: *o++ = *c;
        }
    }
    sprintf(o, "</p>");
    cJSON *s = cJSON_CreateString(h);
    free(h);
    return s;
}

static void reply_error(svc_req *r, const extras_error *e)
{
    svc_a1111_reply_error(r, e->status, e->status == 422 ? "invalid_parameter" : "internal",
                          e->field[0] ? e->field : NULL, "%s", e->message);
}

/* ---------------------------------------------------------------- routes */

void svc_a1111_extra_single(svc_req *r, const char *rest)
{
    (void)rest;
    cJSON *body = svc_req_json_object(r);
    if (!body)
        return;
    extras_opts o;
    extras_error e = {0};
    picture p = {0};
    svc_fields f;
    svc_fields_init(&f, body, NULL, false);
    const char *image = NULL;
    char info[512];
    cJSON *out = NULL;
    if (read_opts(body, &o, &e) < 0)
        goto bad;
    if (svc_fields_string(&f, "image", (size_t)-1, true, &image) < 0) {
        fail(&e, 422, "image", "%s", f.message);
        goto bad;
    }
    if (decode("image", image, &p, &e) < 0 || run_one(&p, &o, info, sizeof info, &e) < 0)
        goto bad;
    out = cJSON_CreateObject();
    cJSON *img = encoded(&p, &e);
    if (!out || !img) {
        cJSON_Delete(img);
        goto bad;
    }
    cJSON_AddItemToObject(out, "html_info", html_of(info));
    cJSON_AddItemToObject(out, "image", img);
    picture_free(&p);
    cJSON_Delete(body);
    svc_reply_json(r, 200, out);
    return;
bad:
    cJSON_Delete(out);
    picture_free(&p);
    cJSON_Delete(body);
    reply_error(r, &e);
}

void svc_a1111_extra_batch(svc_req *r, const char *rest)
{
    (void)rest;
    cJSON *body = svc_req_json_object(r);
    if (!body)
        return;
    extras_opts o;
    extras_error e = {0};
    svc_fields f;
    svc_fields_init(&f, body, NULL, false);
    cJSON *out = cJSON_CreateObject(), *images = cJSON_AddArrayToObject(out, "images");
    const cJSON *list = NULL;
    char info[512] = "";
    if (read_opts(body, &o, &e) < 0)
        goto bad;
    if (svc_fields_kind(&f, "imageList", cJSON_Array) < 0) {
        fail(&e, 422, "imageList", "%s", f.message);
        goto bad;
    }
    list = svc_fields_get(&f, "imageList");
    if (!list || !list->child) {
        fail(&e, 422, "imageList", "imageList is required: a list of {\"data\": base64, "
                                   "\"name\": ...}");
        goto bad;
    }
    if (cJSON_GetArraySize(list) > SVC_A1111_MAX_IMAGES) {
        fail(&e, 422, "imageList", "imageList has %d images; at most %d",
             cJSON_GetArraySize(list), SVC_A1111_MAX_IMAGES);
        goto bad;
    }
    int i = 0;
    for (const cJSON *it = list->child; it; it = it->next, i++) {
        const cJSON *data = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "data") : it;
        char field[64];
        snprintf(field, sizeof field, "imageList[%d].data", i);
        if (!cJSON_IsString(data) || (data->type & SVC_JSON_HAS_NUL)) {
            fail(&e, 422, field, "%s must be a base64 image (or a data: URL)", field);
            goto bad;
        }
        picture p = {0};
        if (decode(field, data->valuestring, &p, &e) < 0 ||
            run_one(&p, &o, info, sizeof info, &e) < 0) {
            picture_free(&p);
            goto bad;
        }
        cJSON *img = encoded(&p, &e);
        picture_free(&p);
        if (!img)
            goto bad;
        cJSON_AddItemToArray(images, img);
    }
    cJSON_AddItemToObject(out, "html_info", html_of(info));
    cJSON_Delete(body);
    svc_reply_json(r, 200, out);
    return;
bad:
    cJSON_Delete(out);
    cJSON_Delete(body);
    reply_error(r, &e);
}

/* infotext_utils.parse_generation_parameters, its plain part: "Prompt",
 * "Negative prompt", then the last line's "key: value" pairs (values may
 * be quoted), "Size" also as "Size-1" and "Size-2".  Values stay strings. */
static cJSON *parse_infotext(const char *text)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    const char *last = strrchr(text, '\n');
    const char *params = last ? last + 1 : text;
    /* a last line without "Steps: " is still prompt text, as A1111 treats it */
    if (!strstr(params, "Steps: "))
        params = text + strlen(text);
    const char *neg = strstr(text, "\nNegative prompt: ");
    if (!neg && strncmp(text, "Negative prompt: ", 17) == 0)
        neg = text - 1;
    const char *prompt_end = neg && neg < params ? neg : (params > text ? params - 1 : params);
    if (prompt_end < text)
        prompt_end = text;
    char *prompt = strndup(text, (size_t)(prompt_end - text));
    cJSON_AddStringToObject(o, "Prompt", prompt ? prompt : "");
    free(prompt);
    if (neg && neg < params) {
        const char *ns = neg + 18;
        const char *ne = params > ns ? params - 1 : ns;
        char *np = strndup(ns, (size_t)(ne - ns));
        cJSON_AddStringToObject(o, "Negative prompt", np ? np : "");
        free(np);
    } else {
        cJSON_AddStringToObject(o, "Negative prompt", "");
    }
    const char *c = params;
    while (*c) {
        const char *colon = strstr(c, ": ");
        if (!colon)
            break;
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(colon - c), c);
        const char *v = colon + 2, *end;
        char *val;
        if (*v == '"') {
            const char *q = v + 1;
            while (*q && *q != '"')
                q += q[0] == '\\' && q[1] ? 2 : 1;
            end = *q ? q + 1 : q;
            val = strndup(v, (size_t)(end - v));
            cJSON *un = val ? cJSON_Parse(val) : NULL;
            if (cJSON_IsString(un)) {
                free(val);
                val = strdup(un->valuestring);
            }
            cJSON_Delete(un);
        } else {
            end = strstr(v, ", ");
            end = end ? end : v + strlen(v);
            val = strndup(v, (size_t)(end - v));
        }
        if (val) {
            cJSON_AddStringToObject(o, key, val);
            int w = 0, h = 0;
            if (strcmp(key, "Size") == 0 && sscanf(val, "%dx%d", &w, &h) == 2) {
                char n[16];
                snprintf(n, sizeof n, "%d", w);
                cJSON_AddStringToObject(o, "Size-1", n);
                snprintf(n, sizeof n, "%d", h);
                cJSON_AddStringToObject(o, "Size-2", n);
            }
            free(val);
        }
        c = *end ? end + (end[0] == ',' ? 2 : (end[0] == '"' && end[1] == ',' ? 3 : 1)) : end;
        while (*c == ' ' || *c == ',')
            c++;
    }
    return o;
}

void svc_a1111_png_info(svc_req *r, const char *rest)
{
    (void)rest;
    cJSON *body = svc_req_json_object(r);
    if (!body)
        return;
    svc_fields f;
    svc_fields_init(&f, body, NULL, false);
    extras_error e = {0};
    const char *image = NULL;
    uint8_t *file = NULL;
    size_t len = 0;
    char *text = NULL;
    if (svc_fields_string(&f, "image", (size_t)-1, true, &image) < 0) {
        fail(&e, 422, "image", "%s", f.message);
        goto bad;
    }
    if (bytes_of("image", image, &file, &len, &e) < 0)
        goto bad;
    if (tsr_image_png_parameters(file, len, &text) != TSR_OK) {
        /* A1111 reads any image; a JPEG or a damaged PNG has no infotext */
        uint8_t *px = NULL;
        int w = 0, h = 0;
        char why[300];
        if (svc_image_decode(file, len, 3, &px, &w, &h, why, sizeof why) < 0) {
            fail(&e, 422, "image", "image: %s", why);
            goto bad;
        }
        free(px);
        text = NULL;
    }
    free(file);
    file = NULL;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "info", text ? text : "");
    cJSON_AddObjectToObject(out, "items");
    cJSON_AddItemToObject(out, "parameters", text ? parse_infotext(text) : cJSON_CreateObject());
    free(text);
    cJSON_Delete(body);
    svc_reply_json(r, 200, out);
    return;
bad:
    free(file);
    free(text);
    cJSON_Delete(body);
    reply_error(r, &e);
}
