/*
 * service/api/openai/openai_edits.c - POST /v1/images/edits (multipart/form-data),
 * GET /v1/models/{id}, and the /v1/images router (docs/compat-openai.md).
 *
 * An edit is the generations request with an image: the form's text fields
 * become a JSON object (numbers and booleans as literals, the rest as
 * strings) that goes through the same checks as a generations body, so
 * both routes refuse the same values with the same messages.  The image
 * becomes the native job's init_image.  OpenAI's mask marks the area to edit
 * with alpha 0 (transparent); Tessera's mask is gray with white = repaint,
 * so the mask is decoded as RGBA and rewritten as a gray PNG (alpha 0 ->
 * 255, else 0) before it goes to the native parser.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai.h"
#include "gate.h"
#include "json.h"
#include "multipart.h"
#include "server.h"
#include "images.h"
#include "util.h"

/* Fields read as JSON literals when they look like one. */
static const char *const numeric[] = {"n",        "partial_images", "output_compression",
                                      "seed",     "steps",          "cfg_scale",
                                      "clip_skip", "guidance_rescale", "strength", NULL};

static bool in_list(const char *const *l, const char *s)
{
    for (; *l; l++)
        if (!strcmp(*l, s))
            return true;
    return false;
}

/* A whole string that is a JSON number (RFC 8259), of at most 64 bytes. */
static bool json_number(const char *s, size_t n)
{
    return n <= 64 && svc_json_scan_number(s, s + n, NULL) == s + n;
}

static bool is_image_part(const char *name)
{
    return !strcmp(name, "image") || !strcmp(name, "image[]") || !strcmp(name, "mask");
}

/* The form's text fields as a JSON object parsed by the strict reader
 * (literals kept, UTF-8 checked).  NULL with e filled. */
static cJSON *form_to_json(const svc_mp_form *f, oai_err *e)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        oai_bad(e, NULL, "internal", "out of memory");
        e->status = 500;
        return NULL;
    }
    for (int i = 0; i < f->n; i++) {
        const svc_mp_part *p = &f->parts[i];
        if (is_image_part(p->name))
            continue;
        if (p->filename) {
            cJSON_Delete(o);
            oai_bad(e, p->name, "invalid_value", "%.60s must be a text field, not a file",
                    p->name);
            return NULL;
        }
        if (cJSON_GetObjectItemCaseSensitive(o, p->name)) {
            cJSON_Delete(o);
            oai_bad(e, p->name, "invalid_value", "%.60s is given twice", p->name);
            return NULL;
        }
        const char *v = (const char *)p->data;
        if (memchr(v, '\0', p->len)) {
            cJSON_Delete(o);
            oai_bad(e, p->name, "invalid_value", "%.60s holds a NUL byte", p->name);
            return NULL;
        }
        cJSON *it;
        if (in_list(numeric, p->name) && json_number(v, p->len)) {
            char lit[72];
            snprintf(lit, sizeof lit, "%.*s", (int)p->len, v);
            it = cJSON_CreateRaw(lit);
        } else if (!strcmp(p->name, "stream") && p->len == 4 && !memcmp(v, "true", 4)) {
            it = cJSON_CreateTrue();
        } else if (!strcmp(p->name, "stream") && p->len == 5 && !memcmp(v, "false", 5)) {
            it = cJSON_CreateFalse();
        } else {
            char *sv = strndup(v, p->len);
            it = sv ? cJSON_CreateString(sv) : NULL;
            free(sv);
        }
        if (!it) {
            cJSON_Delete(o);
            oai_bad(e, NULL, "internal", "out of memory");
            e->status = 500;
            return NULL;
        }
        cJSON_AddItemToObject(o, p->name, it);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) {
        oai_bad(e, NULL, "internal", "out of memory");
        e->status = 500;
        return NULL;
    }
    char err[256];
    cJSON *in = svc_json_parse(text, strlen(text), err, sizeof err);
    cJSON_free(text);
    if (!in)
        oai_bad(e, NULL, "invalid_value", "the form's fields are not valid text: %s", err);
    return in;
}

/* OpenAI's mask (transparent = edit) as Tessera's (white = repaint), PNG
 * in base64.  NULL with e filled. */
static char *convert_mask(const svc_mp_part *m, oai_err *e)
{
    uint8_t *rgba = NULL;
    int w = 0, h = 0;
    char err[256];
    if (svc_image_decode(m->data, m->len, 4, &rgba, &w, &h, err, sizeof err) < 0) {
        oai_bad(e, "mask", "invalid_image", "mask: %s", err);
        return NULL;
    }
    size_t px = (size_t)w * (size_t)h;
    uint8_t *rgb = malloc(px * 3);
    if (!rgb) {
        free(rgba);
        oai_bad(e, NULL, "internal", "out of memory");
        e->status = 500;
        return NULL;
    }
    for (size_t i = 0; i < px; i++) {
        uint8_t v = rgba[i * 4 + 3] == 0 ? 255 : 0;
        rgb[i * 3] = rgb[i * 3 + 1] = rgb[i * 3 + 2] = v;
    }
    free(rgba);
    uint8_t *png = NULL;
    size_t len = 0;
    int rc = svc_png_encode(rgb, w, h, NULL, &png, &len, err, sizeof err);
    free(rgb);
    if (rc < 0) {
        oai_bad(e, "mask", "invalid_image", "mask: %s", err);
        return NULL;
    }
    char *b = svc_base64_encode(png, len);
    free(png);
    if (!b) {
        oai_bad(e, NULL, "internal", "out of memory");
        e->status = 500;
    }
    return b;
}

/* Build the native object of an edit from the form. */
static int edit_fields(oai_call *c, const svc_mp_form *f, cJSON *nat, oai_err *e)
{
    int images = svc_mp_count(f, "image") + svc_mp_count(f, "image[]");
    if (images == 0)
        return oai_bad(e, "image", "missing_required_parameter", "image is required (a PNG or "
                       "JPEG file part named image)");
    if (images > 1)
        return oai_bad(e, "image", "invalid_value", "Tessera edits one image; got %d image "
                       "parts", images);
    if (svc_mp_count(f, "mask") > 1)
        return oai_bad(e, "mask", "invalid_value", "mask is given twice");
    const svc_mp_part *img = svc_mp_find(f, "image", 0);
    if (!img)
        img = svc_mp_find(f, "image[]", 0);
    const svc_mp_part *mask = svc_mp_find(f, "mask", 0);
    cJSON *in = form_to_json(f, e);
    if (!in)
        return -1;
    int rc = oai_take_fields(c, in, nat, e);
    cJSON_Delete(in);
    if (rc < 0)
        return -1;
    if (img->len == 0)
        return oai_bad(e, "image", "invalid_image", "image is empty");
    char *b = svc_base64_encode(img->data, img->len);
    if (!b) {
        oai_bad(e, NULL, "internal", "out of memory");
        e->status = 500;
        return -1;
    }
    cJSON_AddStringToObject(nat, "init_image", b);
    free(b);
    c->image_tokens = 1;
    if (mask) {
        char *mb = convert_mask(mask, e);
        if (!mb)
            return -1;
        cJSON_AddStringToObject(nat, "mask", mb);
        free(mb);
        c->image_tokens = 2;
    }
    return 0;
}

void oai_edits(svc_req *r)
{
    if (!svc_gate_open_or_reply(r))
        return;
    char boundary[SVC_MP_MAX_BOUNDARY + 1], err[256];
    if (svc_mp_boundary(svc_req_header(r, "Content-Type"), boundary, sizeof boundary, err,
                        sizeof err) < 0) {
        oai_reply_error(r, 400, NULL, "invalid_multipart", "%s", err);
        return;
    }
    size_t len = 0;
    const char *body = svc_req_body(r, &len);
    svc_mp_form form;
    if (svc_mp_parse((const uint8_t *)body, len, boundary, &form, err, sizeof err) < 0) {
        oai_reply_error(r, 400, NULL, "invalid_multipart", "the multipart body is malformed: %s",
                        err);
        return;
    }
    oai_call *c = oai_call_new(r, true);
    cJSON *nat = cJSON_CreateObject();
    oai_err e;
    const int taken = c && nat ? edit_fields(c, &form, nat, &e) : -1;
    svc_mp_free(&form);
    oai_submit(r, c, nat, taken, &e);
}

/* ------------------------------------------------------- models, routes */

void svc_openai_model(svc_req *r, const char *id)
{
    svc_server *s = r->srv;
    if (s->phase == SVC_PHASE_LOADING) {
        svc_gate_open_or_reply(r);
        return;
    }
    if (strcmp(id, s->model_name) != 0) {
        oai_reply_error(r, 404, "model", "model_not_found", "the model \"%.200s\" does not "
                        "exist (this server serves \"%.200s\")", id, s->model_name);
        return;
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)(long long)s->model_created);
    cJSON_AddStringToObject(m, "owned_by", "tessera");
    svc_reply_json(r, 200, m);
}

void svc_openai_generations(svc_req *r, const char *rest)
{
    (void)rest;
    oai_generations(r);
}

void svc_openai_edits(svc_req *r, const char *rest)
{
    (void)rest;
    oai_edits(r);
}

void svc_openai_no_route(svc_req *r, const char *rest)
{
    (void)rest;
    oai_reply_error(r, 404, NULL, "not_found", "no such path: %.200s (Tessera serves "
                    "/v1/images/generations and /v1/images/edits)", r->path);
}
