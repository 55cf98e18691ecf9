/*
 * service/api/openai/openai.c - the OpenAI-compatible images API:
 * POST /v1/images/generations, POST /v1/images/edits (multipart), and
 * GET /v1/models/{id} (docs/compat-openai.md is the contract).
 *
 * Why this shape: an OpenAI request becomes a native job.  Its fields are
 * checked here (OpenAI's names, OpenAI's error shape), then turned into the
 * native JSON object and parsed by svc_params_parse, so an OpenAI image is
 * byte for byte the native job's (and `tessera generate`'s) and goes
 * through the same queue, journal and step-level batching.  The call then
 * watches its job (svc_job_watch) and answers when it ends; a streaming
 * call relays previews and images as OpenAI's events (openai_stream.c).
 * A client that goes away cancels its job: an OpenAI client has no way to
 * find the job again.
 */
#include "openai.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "fields.h"
#include "gate.h"
#include "json.h"
#include "log.h"
#include "multipart.h"
#include "server.h"
#include "images.h"
#include "util.h"

static oai_call *live_calls; /* the loop's; one server per process */

/* ----------------------------------------------------------------- calls */

static void free_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    oai_call *c = arg;
    svc_peer_release(&c->peer, c->r, c->started, 499);
    if (c->pending)
        evbuffer_free(c->pending);
    free(c->partials_sent);
    free(c);
}

void oai_call_detach_conn(oai_call *c)
{
    svc_peer_stop(&c->peer);
}

void oai_call_finish(oai_call *c)
{
    if (c->done)
        return;
    c->done = true;
    if (c->watching) {
        svc_job_unwatch(c->job, &c->watch);
        c->watching = false;
    }
    oai_call_detach_conn(c);
    svc_stream_stop(&c->st);
    if (c->prev)
        c->prev->next = c->next;
    else if (live_calls == c)
        live_calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    struct timeval zero = {0, 0};
    if (event_base_once(c->srv->base, -1, EV_TIMEOUT, free_later, c, &zero) < 0)
        free_later(-1, 0, c);
}

/* Answer a call that has no result (error), if its request is still ours
 * to answer, and finish it. */
static void call_fail(oai_call *c, int status, const char *code, const char *msg)
{
    oai_call_detach_conn(c);
    if (c->r && svc_peer_answerable(&c->peer)) {
        svc_req *r = c->r;
        c->r = NULL;
        if (status == 503)
            svc_req_add_header(r, "Retry-After", "30");
        if (c->job && c->accepted)
            svc_req_add_header(r, "X-Tessera-Job", c->job->ids);
        oai_reply_error(r, status, NULL, code, "%s", msg);
    }
    oai_call_finish(c);
}

/* The client went away: cancel the job, answer what is left of r.  Before
 * the job is accepted only the mark is set (on_accepted comes back here). */
static void client_gone(oai_call *c)
{
    svc_server *s = c->srv;
    c->gone = true;
    if (c->done || !c->accepted)
        return;
    if (c->job && !svc_state_final(c->job->state)) {
        SVC_INFO("openai: the client of %s went away: job cancelled", c->job->ids);
        if (svc_job_cancel(s, c->job))
            svc_jobs_update_positions(s);
    }
    if (c->done)
        return; /* the cancel's event ended the call */
    if (c->stream && c->started) {
        oai_stream_abort(c);
        return;
    }
    call_fail(c, 499, "client_closed", "the client closed the connection");
}

/* The peer watch's word (stream.h): EOF, or evhttp closed the connection. */
static void on_gone(void *arg)
{
    oai_call *c = arg;
    if (!c->done)
        client_gone(c);
}

oai_call *oai_call_new(svc_req *r, bool edit)
{
    oai_call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->srv = r->srv;
    c->r = r;
    c->edit = edit;
    c->created = svc_now_unix();
    snprintf(c->quality, sizeof c->quality, "auto");
    snprintf(c->background, sizeof c->background, "auto");
    return c;
}

/* Watch the client's connection (from the accept on). */
static void call_attach(oai_call *c)
{
    c->next = live_calls;
    if (live_calls)
        live_calls->prev = c;
    live_calls = c;
    svc_peer_watch(&c->peer, c->r, on_gone, c);
}

void svc_openai_close_all(svc_server *s)
{
    (void)s;
    while (live_calls) {
        oai_call *c = live_calls;
        if (c->stream && c->started)
            oai_stream_shutdown(c);
        else
            call_fail(c, 503, "unavailable", "the server is shutting down");
    }
}

/* ------------------------------------------------------- final responses */

cJSON *oai_usage_json(const oai_call *c)
{
    cJSON *u = cJSON_CreateObject();
    int in = c->text_tokens + c->image_tokens;
    cJSON_AddNumberToObject(u, "input_tokens", in);
    cJSON *d = cJSON_AddObjectToObject(u, "input_tokens_details");
    cJSON_AddNumberToObject(d, "image_tokens", c->image_tokens);
    cJSON_AddNumberToObject(d, "text_tokens", c->text_tokens);
    cJSON_AddNumberToObject(u, "output_tokens", 0);
    cJSON_AddNumberToObject(u, "total_tokens", in);
    return u;
}

char *oai_image_b64(oai_call *c, int index)
{
    return svc_store_image_b64(c->srv->cfg.data_dir, c->job->ids, index);
}

/* The URL of an image: absolute when the Host header is a plain host[:port]. */
static void image_url(oai_call *c, int index, char *buf, size_t size)
{
    char path[256];
    svc_image_url(c->srv, c->job, index, path, sizeof path);
    const char *host = c->r ? svc_req_header(c->r, "Host") : NULL;
    bool ok = host && host[0] && strlen(host) < 256;
    for (const char *p = host; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
             strchr(".-:[]_", *p);
    if (ok)
        snprintf(buf, size, "http://%s%s", host, path);
    else
        snprintf(buf, size, "%s", path);
}

static void reply_done(oai_call *c)
{
    svc_job *j = c->job;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "created", (double)(long long)c->created);
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < j->n; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToArray(data, d);
        if (c->url) {
            char url[512];
            image_url(c, i, url, sizeof url);
            cJSON_AddStringToObject(d, "url", url);
            continue;
        }
        char *b = oai_image_b64(c, i);
        if (!b) {
            cJSON_Delete(o);
            svc_req *r = c->r;
            c->r = NULL;
            oai_reply_error(r, 500, NULL, "internal", "image %d of %s is missing from the data "
                            "directory", i, j->ids);
            return;
        }
        cJSON_AddStringToObject(d, "b64_json", b);
        free(b);
    }
    cJSON_AddStringToObject(o, "background", "opaque");
    cJSON_AddStringToObject(o, "output_format", "png");
    char size[32];
    snprintf(size, sizeof size, "%dx%d", c->width, c->height);
    cJSON_AddStringToObject(o, "size", size);
    if (!strcmp(c->quality, "low") || !strcmp(c->quality, "medium") ||
        !strcmp(c->quality, "high"))
        cJSON_AddStringToObject(o, "quality", c->quality);
    cJSON_AddItemToObject(o, "usage", oai_usage_json(c));
    svc_req *r = c->r;
    c->r = NULL;
    svc_req_add_header(r, "X-Tessera-Job", j->ids);
    svc_reply_json(r, 200, o);
}

static void on_job_event(svc_server *s, svc_job *j, const svc_event *ev, void *arg)
{
    (void)s;
    (void)j;
    oai_call *c = arg;
    if (c->done)
        return;
    if (c->stream) {
        oai_stream_event(c, ev);
        return;
    }
    if (ev->kind == SVC_EV_DONE) {
        oai_call_detach_conn(c);
        if (c->r && c->r->req)
            reply_done(c);
        oai_call_finish(c);
    } else if (ev->kind == SVC_EV_CANCELLED && c->gone) {
        call_fail(c, 499, "client_closed", "the client closed the connection");
    } else if (ev->kind == SVC_EV_CANCELLED) {
        char msg[160];
        snprintf(msg, sizeof msg, "job %s was cancelled (DELETE /v1/jobs/{id}, or the server is "
                 "shutting down)", c->job->ids);
        call_fail(c, 503, "cancelled", msg);
    } else if (ev->kind == SVC_EV_FAILED) {
        bool bad = c->job->error_code && !strcmp(c->job->error_code, "invalid_parameter");
        char msg[700];
        snprintf(msg, sizeof msg, "job %s failed: %.600s", c->job->ids,
                 c->job->error_message ? c->job->error_message : "unknown error");
        call_fail(c, bad ? 400 : 500, bad ? "invalid_value" : "generation_failed", msg);
    }
}

static void on_accepted(void *user, int status)
{
    oai_call *c = user;
    c->accepted = true;
    svc_gate g;
    if (!svc_gate_accepted(status, "the job", &g)) {
        c->job = NULL; /* not inserted: svc_server_accept freed it */
        call_fail(c, g.status, g.code, g.message);
        return;
    }
    c->watch.on_event = on_job_event;
    c->watch.arg = c;
    svc_job_watch(c->job, &c->watch);
    c->watching = true;
    if (c->gone) {
        client_gone(c);
        return;
    }
    if (c->stream)
        oai_stream_start(c);
}

/* -------------------------------------------------------------- requests */

int oai_bad(oai_err *e, const char *param, const char *code, const char *fmt, ...)
{
    e->status = 400;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* A field reader's refusal as OpenAI's (400, `code`). */
static int bad_field(const svc_fields *f, oai_err *e, const char *code)
{
    return oai_bad(e, f->field, code, "%s", f->message);
}

/* An optional string among `allowed` (NULL-terminated; NULL = any string of
 * up to `max` bytes).  *out = NULL when absent or null. */
static int opt_string(svc_fields *f, const char *name, const char *const *allowed, size_t max,
                      const char **out, oai_err *e)
{
    if (allowed)
        return svc_fields_enum(f, name, allowed, out) < 0 ? bad_field(f, e, "invalid_value") : 0;
    const cJSON *it = svc_fields_get(f, name);
    *out = NULL;
    if (!it)
        return 0;
    if (cJSON_IsString(it) && !(it->type & SVC_JSON_HAS_NUL) && strlen(it->valuestring) <= max) {
        *out = it->valuestring;
        return 0;
    }
    char what[64];
    snprintf(what, sizeof what, "a string of at most %zu bytes", max);
    svc_fields_refuse(f, name, it, what);
    return bad_field(f, e, "invalid_value");
}

static int opt_int(svc_fields *f, const char *name, int lo, int hi, int def, int *out,
                   oai_err *e)
{
    long long v = def;
    if (svc_fields_int(f, name, lo, hi, def, &v) < 0)
        return bad_field(f, e, "invalid_value");
    *out = (int)v;
    return 0;
}

/* "WxH" with both sides multiples of 8 in the model's limits. */
static int parse_size(const char *v, int *w, int *h, oai_err *e)
{
    long a = 0, b = 0;
    int n = 0;
    bool ok = v[0] >= '1' && v[0] <= '9' && sscanf(v, "%5ldx%5ld%n", &a, &b, &n) == 2 &&
              v[n] == '\0' && strspn(v, "0123456789x") == strlen(v);
    if (!ok)
        return oai_bad(e, "size", "invalid_size", "size must be \"auto\" or \"WIDTHxHEIGHT\" "
                   "(e.g. \"512x512\"), got \"%.40s\"", v);
    if (a < TSR_MIN_SIZE || b < TSR_MIN_SIZE || a > TSR_MAX_SIZE || b > TSR_MAX_SIZE || a % 8 ||
        b % 8)
        return oai_bad(e, "size", "invalid_size", "size %ldx%ld: each side must be a multiple of 8 "
                   "between %d and %d", a, b, TSR_MIN_SIZE, TSR_MAX_SIZE);
    *w = (int)a;
    *h = (int)b;
    return 0;
}

static int count_words(const char *s)
{
    int n = 0;
    bool in = false;
    for (; *s; s++) {
        bool sp = *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r';
        n += !sp && !in;
        in = !sp;
    }
    return n;
}

/* An integer item with its literal, as svc_json_parse makes them (the
 * native parser checks literals). */
static void add_int(cJSON *o, const char *name, int v)
{
    cJSON *it = cJSON_CreateNumber(v);
    char lit[16];
    snprintf(lit, sizeof lit, "%d", v);
    if (it)
        it->valuestring = strdup(lit);
    cJSON_AddItemToObject(o, name, it);
}

/* Native fields passed through as they are (Tessera's extensions). */
static const char *const passthrough[] = {"seed",      "steps",     "negative_prompt",
                                          "cfg_scale", "sampler",   "scheduler",
                                          "clip_skip", "guidance_rescale", "rng",
                                          "strength",  "loras",     NULL};

/* Check OpenAI's fields of `in` into c and move what the native parser
 * reads into `nat`.  The edits route adds init_image/mask itself. */
int oai_take_fields(oai_call *c, cJSON *in, cJSON *nat, oai_err *e)
{
    svc_server *s = c->srv;
    svc_fields f;
    svc_fields_init(&f, in, NULL, true);
    const cJSON *prompt = svc_fields_get(&f, "prompt");
    if (!prompt)
        return oai_bad(e, "prompt", "missing_required_parameter", "prompt is required");
    if (!cJSON_IsString(prompt)) {
        svc_fields_refuse(&f, "prompt", prompt, "a string");
        return bad_field(&f, e, "invalid_type");
    }
    c->text_tokens = count_words(prompt->valuestring);
    int n = 1;
    if (opt_int(&f, "n", 1, OAI_MAX_N, 1, &n, e) < 0)
        return -1;
    static const char *const formats[] = {"b64_json", "url", NULL};
    static const char *const outfmt[] = {"png", NULL};
    static const char *const qualities[] = {"auto", "low", "medium", "high", "standard", "hd",
                                            NULL};
    static const char *const styles[] = {"vivid", "natural", NULL};
    static const char *const backgrounds[] = {"auto", "opaque", "transparent", NULL};
    static const char *const moderations[] = {"auto", "low", NULL};
    static const char *const fidelities[] = {"high", "low", NULL};
    const char *size = NULL, *fmt = NULL, *v = NULL, *model = NULL;
    int ignored = 0;
    if (opt_string(&f, "size", NULL, 32, &size, e) < 0 ||
        opt_string(&f, "response_format", formats, 0, &fmt, e) < 0 ||
        opt_string(&f, "output_format", outfmt, 0, &v, e) < 0 ||
        opt_int(&f, "output_compression", 0, 100, 100, &ignored, e) < 0 ||
        opt_string(&f, "quality", qualities, 0, &v, e) < 0)
        return -1;
    if (v)
        snprintf(c->quality, sizeof c->quality, "%s", v);
    if (opt_string(&f, "background", backgrounds, 0, &v, e) < 0)
        return -1;
    if (v && !strcmp(v, "transparent"))
        return oai_bad(e, "background", "unsupported_value", "background \"transparent\" is not "
                   "supported: Tessera makes opaque RGB images (use \"auto\" or \"opaque\")");
    if (v)
        snprintf(c->background, sizeof c->background, "%s", v);
    if (opt_string(&f, "style", styles, 0, &v, e) < 0 ||
        opt_string(&f, "moderation", moderations, 0, &v, e) < 0 ||
        opt_string(&f, "input_fidelity", fidelities, 0, &v, e) < 0 ||
        opt_string(&f, "user", NULL, 256, &v, e) < 0 ||
        opt_string(&f, "safety_identifier", NULL, 256, &v, e) < 0 ||
        opt_string(&f, "model", NULL, 256, &model, e) < 0)
        return -1;
    if (model && strcmp(model, s->model_name) != 0 && strncmp(model, "dall-e", 6) != 0 &&
        strncmp(model, "gpt-image", 9) != 0)
        return oai_bad(e, "model", "model_not_found", "model \"%.100s\" is not loaded: this server "
                   "serves \"%.100s\" (OpenAI's dall-e-* and gpt-image-* names map to it)", model,
                   s->model_name);
    if (svc_fields_bool(&f, "stream", false, false, &c->stream) < 0)
        return bad_field(&f, e, "invalid_type");
    if (opt_int(&f, "partial_images", 0, OAI_MAX_PARTIAL, 0, &c->partial_images, e) < 0)
        return -1;
    c->url = fmt && !strcmp(fmt, "url");
    if (c->stream && c->url)
        return oai_bad(e, "response_format", "unsupported_value", "response_format \"url\" cannot "
                   "be streamed: streams carry b64_json");
    if (size && strcmp(size, "auto") != 0) {
        if (parse_size(size, &c->width, &c->height, e) < 0)
            return -1;
        add_int(nat, "width", c->width);
        add_int(nat, "height", c->height);
    }
    cJSON_AddItemToObject(nat, "prompt", cJSON_DetachItemFromObjectCaseSensitive(in, "prompt"));
    add_int(nat, "n", n);
    for (const char *const *p = passthrough; *p; p++) {
        cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(in, *p);
        if (it && cJSON_IsNull(it))
            cJSON_Delete(it);
        else if (it)
            cJSON_AddItemToObject(nat, *p, it);
    }
    return 0;
}

/* The native parameter names the caller knows under OpenAI's. */
static const char *openai_param(const char *native)
{
    if (!strcmp(native, "width") || !strcmp(native, "height"))
        return "size";
    if (!strcmp(native, "init_image"))
        return "image";
    return native;
}

/* Parse `nat`, check the queue, create and accept the job; ends in a reply
 * (error) or in on_accepted.  Takes c over. */
void oai_submit(svc_req *r, oai_call *c, cJSON *nat, int taken, const oai_err *e)
{
    if (!c || !nat || taken < 0) {
        if (!c || !nat)
            oai_reply_error(r, 500, NULL, "internal", "out of memory");
        else
            oai_reply_error(r, e->status, e->param, e->code, "%s", e->msg);
        cJSON_Delete(nat);
        free(c);
        return;
    }
    svc_server *s = c->srv;
    svc_params *p = NULL;
    svc_param_error pe;
    int rc = svc_gate_parse(s, nat, NULL, &p, &pe);
    cJSON_Delete(nat);
    if (rc < 0) {
        free(c);
        oai_reply_error(r, 400, openai_param(pe.field), "invalid_value", "%s", pe.message);
        return;
    }
    c->width = p->width;
    c->height = p->height;
    svc_gate g;
    if (!svc_gate_check(s, svc_key_name(r->key), &p, 1, &g)) {
        svc_params_unref(p);
        free(c);
        svc_gate_reply(r, &g, NULL);
        return;
    }
    svc_job *j = svc_job_new(svc_jobs_new_id(s->jobs), p, svc_now_unix());
    if (j)
        svc_job_set_owner(j, svc_key_name(r->key));
    if (j && c->stream)
        c->partials_sent = calloc((size_t)j->n, sizeof *c->partials_sent);
    if (!j || (c->stream && !c->partials_sent)) {
        svc_job_free(j);
        if (!j)
            svc_params_unref(p);
        free(c);
        oai_reply_error(r, 500, NULL, "internal", "out of memory");
        return;
    }
    c->job = j;
    call_attach(c);
    svc_gate_accept(s, &j, 1, on_accepted, c);
}

void oai_generations(svc_req *r)
{
    if (!svc_gate_open_or_reply(r))
        return;
    size_t len = 0;
    const char *body = svc_req_body(r, &len);
    char err[256];
    cJSON *in = svc_json_parse(body, len, err, sizeof err);
    if (!in || !cJSON_IsObject(in)) {
        cJSON_Delete(in);
        oai_reply_error(r, 400, NULL, "invalid_json", "the body must be a JSON object%s%s",
                        in ? "" : ": ", in ? "" : err);
        return;
    }
    oai_call *c = oai_call_new(r, false);
    cJSON *nat = cJSON_CreateObject();
    oai_err e;
    const int taken = c && nat ? oai_take_fields(c, in, nat, &e) : -1;
    cJSON_Delete(in);
    oai_submit(r, c, nat, taken, &e);
}
