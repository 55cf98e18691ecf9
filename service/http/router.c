/*
 * service/http/router.c - the route table, and the request's way to it:
 * on_request decodes the path, lets the head guard answer what it
 * refused, answers CORS preflights and the 401, then matches the path
 * against the table once.
 *
 * Why a table: the paths of three APIs (native, A1111, OpenAI) used to be
 * an if/else chain here and a router per prefix, each with its own 405
 * and 404.  One list of {root, path, methods, handler, dialect, shape}
 * rows, read top to bottom like the CLI's command table or an nginx
 * location list, says what the server answers; the 405 (with Allow, the
 * union of the methods of the rows of that path) and the 404 come from
 * here, in the error dialect of the path (reply.c renders it).
 *
 * Matching: `root` is a literal prefix that ends at a '/' or at the end
 * of the path (/v1/imagesX is not under /v1/images); `path` is matched
 * against the rest: `*` is one segment (no '/', possibly empty), a final
 * `**` is whatever is left.  A row with a `shape` matches only when
 * shape(rest) holds (an image's name, a tile's).  The first row that
 * matches picks the path; the rows right after it with the same root,
 * path and shape are its other methods.  A row marked AS_WRITTEN answers
 * 404 to a percent-encoded path (the server writes those URLs one way,
 * and a cache keys on that spelling).  The handler gets `rest`, the path
 * after its root.
 */
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "a1111.h"
#include "auth.h"
#include "comfy.h"
#include "comfy_ui.h"
#include "openai.h"
#include "routes.h"
#include "server.h"
#include "signed.h"
#include "util.h"

#define URI_MAX 8192

enum {
    M_GET = 1 << 0,
    M_HEAD = 1 << 1,
    M_POST = 1 << 2,
    M_DELETE = 1 << 3,
    M_OTHER = 1 << 7, /* PUT, PATCH, OPTIONS...: no row but M_ANY takes them */
    M_ANY = 0xff, /* the handler answers every method (a 404 for a whole subtree) */
};
#define M_READ (M_GET | M_HEAD)

enum {
    AS_WRITTEN = 1 << 0,
    ADMIN = 1 << 1,     /* settings: an admin key (with keys on) */
    MULTIPART = 1 << 2, /* a POST body is multipart/form-data (else application/json) */
    UNTYPED = 1 << 3,   /* a POST body may also come without Content-Type (ComfyUI's clients
                         * send JSON so; any other type still gets 415, and the Origin
                         * check stands: docs/security.md) */
};

typedef struct svc_route {
    const char *root;
    const char *path;
    unsigned methods;
    void (*handler)(svc_req *r, const char *rest);
    svc_dialect dialect;
    bool (*shape)(const char *rest); /* NULL: any rest the path matches */
    unsigned flags;
} svc_route;

#define NATIVE SVC_DIALECT_NATIVE
#define A1111 SVC_DIALECT_A1111
#define OPENAI SVC_DIALECT_OPENAI
#define COMFY SVC_DIALECT_COMFY

static void not_found(svc_req *r, const char *rest);

static const svc_route k_routes[] = {
    /* operations (routes_ops.c) */
    {"/healthz", "", M_READ, svc_ops_healthz, NATIVE, NULL, 0},
    {"/readyz", "", M_READ, svc_ops_readyz, NATIVE, NULL, 0},
    {"/metrics", "", M_READ, svc_ops_metrics, NATIVE, NULL, 0},
    {"/v1/models", "", M_READ, svc_ops_models, NATIVE, NULL, 0},
    {"/v1/samplers", "", M_READ, svc_ops_samplers, NATIVE, NULL, 0},
    {"/v1/schedulers", "", M_READ, svc_ops_schedulers, NATIVE, NULL, 0},
    /* native jobs and batches (routes_jobs.c, routes_batches.c) */
    {"/v1/jobs", "", M_POST, svc_jobs_submit, NATIVE, NULL, 0},
    {"/v1/jobs", "/*", M_READ | M_DELETE, svc_jobs_job, NATIVE, NULL, 0},
    {"/v1/jobs", "/*/events", M_GET, svc_jobs_events, NATIVE, NULL, 0},
    {"/v1/jobs", "/*/images/**", M_READ, svc_jobs_tiles, NATIVE, svc_jobs_is_tile_path,
     AS_WRITTEN},
    {"/v1/jobs", "/*/images/**", M_READ, svc_jobs_image, NATIVE, svc_jobs_is_image_name,
     AS_WRITTEN},
    {"/v1/jobs", "/*/images/**", M_ANY, svc_jobs_no_image, NATIVE, NULL, AS_WRITTEN},
    {"/v1/batches", "", M_POST, svc_batches_submit, NATIVE, NULL, 0},
    {"/v1/batches", "/*", M_READ | M_DELETE, svc_batches_batch, NATIVE, NULL, 0},
    {"/v1/batches", "/*/events", M_GET, svc_batches_events, NATIVE, NULL, 0},
    /* OpenAI images (openai.c, openai_edits.c) */
    {"/v1/images", "/generations", M_POST, svc_openai_generations, OPENAI, NULL, 0},
    {"/v1/images", "/edits", M_POST, svc_openai_edits, OPENAI, NULL, MULTIPART},
    {"/v1/images", "**", M_ANY, svc_openai_no_route, OPENAI, NULL, 0},
    {"/v1/models/", "**", M_READ, svc_openai_model, OPENAI, NULL, 0},
    /* AUTOMATIC1111 (a1111.c, a1111_info.c) */
    {"/sdapi/v1", "/txt2img", M_POST, svc_a1111_generate, A1111, NULL, 0},
    {"/sdapi/v1", "/img2img", M_POST, svc_a1111_generate, A1111, NULL, 0},
    {"/sdapi/v1", "/progress", M_READ, svc_a1111_progress, A1111, NULL, 0},
    {"/sdapi/v1", "/interrupt", M_POST, svc_a1111_stop, A1111, NULL, 0},
    {"/sdapi/v1", "/skip", M_POST, svc_a1111_stop, A1111, NULL, 0},
    {"/sdapi/v1", "/options", M_READ, svc_a1111_options, A1111, NULL, 0},
    {"/sdapi/v1", "/options", M_POST, svc_a1111_set_options, A1111, NULL, ADMIN},
    {"/sdapi/v1", "/extra-single-image", M_POST, svc_a1111_extra_single, A1111, NULL, 0},
    {"/sdapi/v1", "/extra-batch-images", M_POST, svc_a1111_extra_batch, A1111, NULL, 0},
    {"/sdapi/v1", "/png-info", M_POST, svc_a1111_png_info, A1111, NULL, 0},
    {"/sdapi/v1", "/samplers", M_READ, svc_a1111_samplers, A1111, NULL, 0},
    {"/sdapi/v1", "/schedulers", M_READ, svc_a1111_schedulers, A1111, NULL, 0},
    {"/sdapi/v1", "/sd-models", M_READ, svc_a1111_sd_models, A1111, NULL, 0},
    {"/sdapi/v1", "/loras", M_READ, svc_a1111_loras, A1111, NULL, 0},
    {"/sdapi/v1", "/embeddings", M_READ, svc_a1111_embeddings, A1111, NULL, 0},
    {"/sdapi/v1", "/cmd-flags", M_READ, svc_a1111_cmd_flags, A1111, NULL, 0},
    {"/sdapi/v1", "/memory", M_READ, svc_a1111_memory, A1111, NULL, 0},
    /* the lists clients probe at start, answered "nothing installed" */
    {"/sdapi/v1", "/*", M_READ, svc_a1111_fixed, A1111, svc_a1111_is_fixed_get, 0},
    {"/sdapi/v1", "/*", M_POST, svc_a1111_fixed, A1111, svc_a1111_is_fixed_post, 0},
    {"/sdapi/v1", "**", M_ANY, not_found, A1111, NULL, 0},
    /* ComfyUI (api/comfy/: comfy_routes.c, comfy_info.c; docs/compat-comfyui.md) */
    {"/prompt", "", M_POST, svc_comfy_prompt, COMFY, NULL, UNTYPED},
    {"/prompt", "", M_READ, svc_comfy_prompt_info, COMFY, NULL, 0},
    {"/history", "", M_READ | M_POST, svc_comfy_history, COMFY, NULL, UNTYPED},
    {"/history", "/*", M_READ, svc_comfy_history, COMFY, NULL, 0},
    {"/view", "", M_READ, svc_comfy_view, COMFY, NULL, 0},
    {"/queue", "", M_READ | M_POST, svc_comfy_queue, COMFY, NULL, UNTYPED},
    {"/interrupt", "", M_POST, svc_comfy_interrupt, COMFY, NULL, UNTYPED},
    {"/object_info", "", M_READ, svc_comfy_object_info, COMFY, NULL, 0},
    {"/object_info", "/*", M_READ, svc_comfy_object_info, COMFY, NULL, 0},
    {"/system_stats", "", M_READ, svc_comfy_system_stats, COMFY, NULL, 0},
    {"/embeddings", "", M_READ, svc_comfy_list, COMFY, NULL, 0},
    {"/extensions", "", M_READ, svc_comfy_list, COMFY, NULL, 0},
    {"/models", "", M_READ, svc_comfy_models, COMFY, NULL, 0},
    {"/models", "/*", M_READ, svc_comfy_models, COMFY, NULL, 0},
    {"/upload", "/image", M_POST, svc_comfy_upload_image, COMFY, NULL, MULTIPART},
    {"/ws", "", M_GET, svc_comfy_ws, COMFY, NULL, 0},
    /* ComfyUI's web UI (--comfy-ui): its files, users, settings, user data
     * (api/comfy/comfy_ui.c, comfy_userdata.c) */
    {COMFY_UI_ROOT, "/login", M_READ | M_POST, svc_comfy_login, NATIVE, NULL, 0},
    {COMFY_UI_ROOT, "/logout", M_POST, svc_comfy_logout, NATIVE, NULL, UNTYPED},
    {COMFY_UI_ROOT, "**", M_READ, svc_comfy_ui_static, NATIVE, NULL, 0},
    {"/assets", "/**", M_READ, svc_comfy_ui_assets, NATIVE, NULL, 0},
    {"/users", "", M_READ | M_POST, svc_comfy_users, COMFY, NULL, UNTYPED},
    {"/settings", "", M_READ | M_POST, svc_comfy_settings, COMFY, NULL, UNTYPED},
    {"/settings", "/*", M_READ | M_POST, svc_comfy_settings, COMFY, NULL, UNTYPED},
    {"/userdata", "", M_READ, svc_comfy_userdata_list, COMFY, NULL, 0},
    {"/userdata", "/**", M_READ | M_POST | M_DELETE, svc_comfy_userdata, COMFY, NULL, UNTYPED},
    {"/v2/userdata", "", M_READ, svc_comfy_userdata_v2, COMFY, NULL, 0},
    {"/jobs", "", M_READ, svc_comfy_jobs, COMFY, NULL, 0},
    {"/jobs", "/cancel", M_POST, svc_comfy_jobs_cancel, COMFY, NULL, UNTYPED},
    {"/jobs", "/*", M_READ, svc_comfy_jobs, COMFY, NULL, 0},
    {"/jobs", "/*/cancel", M_POST, svc_comfy_jobs_cancel, COMFY, NULL, UNTYPED},
    {"/features", "", M_READ, svc_comfy_features, COMFY, NULL, 0},
    {"/i18n", "", M_READ, svc_comfy_i18n, COMFY, NULL, 0},
    {"/experiment", "/**", M_READ, svc_comfy_experiment_models, COMFY, NULL, 0},
    {"/workflow_templates", "", M_READ, svc_comfy_empty_object, COMFY, NULL, 0},
    {"/global_subgraphs", "", M_READ, svc_comfy_empty_object, COMFY, NULL, 0},
    {"/node_replacements", "", M_READ, svc_comfy_empty_object, COMFY, NULL, 0},
};

/* ---------------------------------------------------------------- matching */

static unsigned method_bit(const char *m)
{
    static const struct {
        const char *name;
        unsigned bit;
    } k[] = {{"GET", M_GET}, {"HEAD", M_HEAD}, {"POST", M_POST}, {"DELETE", M_DELETE}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(m, k[i].name) == 0)
            return k[i].bit;
    return M_OTHER;
}

/* "GET, HEAD, POST, DELETE" for the bits set, in that order. */
static void allow_text(unsigned methods, char *buf, size_t size)
{
    static const char *const names[] = {"GET", "HEAD", "POST", "DELETE"};
    size_t o = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < 4; i++)
        if (methods & (1u << i))
            o += (size_t)snprintf(buf + o, size - o, "%s%s", o ? ", " : "", names[i]);
}

/* The rest of path after root, or NULL when root does not hold it. */
static const char *under_root(const char *path, const char *root)
{
    size_t n = strlen(root);
    if (strncmp(path, root, n) != 0)
        return NULL;
    if (root[n - 1] != '/' && path[n] != '\0' && path[n] != '/')
        return NULL;
    return path + n;
}

static bool match_pattern(const char *pat, const char *s)
{
    while (*pat) {
        if (pat[0] == '*' && pat[1] == '*')
            return true;
        if (*pat == '*') {
            while (*s && *s != '/')
                s++;
            pat++;
            continue;
        }
        if (*pat++ != *s++)
            return false;
    }
    return *s == '\0';
}

static bool matches(const svc_route *rt, const char *path, const char **rest)
{
    *rest = under_root(path, rt->root);
    return *rest && match_pattern(rt->path, *rest) && (!rt->shape || rt->shape(*rest));
}

static bool same_path(const svc_route *a, const svc_route *b)
{
    return strcmp(a->root, b->root) == 0 && strcmp(a->path, b->path) == 0 && a->shape == b->shape;
}

static void not_found(svc_req *r, const char *rest)
{
    (void)rest;
    svc_problem p = {.status = 404, .code = "not_found"};
    char msg[1024];
    snprintf(msg, sizeof msg, "no such path: %s", r->path);
    p.message = msg;
    svc_reply_problem(r, r->dialect, &p);
}

static void dispatch(svc_req *r)
{
    const size_t n = sizeof k_routes / sizeof k_routes[0];
    const unsigned bit = method_bit(r->method);
    const char *rest = NULL;
    size_t i = 0;
    while (i < n && !matches(&k_routes[i], r->path, &rest))
        i++;
    if (i == n) {
        if (!svc_page_serve(r)) {
            r->dialect = SVC_DIALECT_NATIVE;
            not_found(r, NULL);
        }
        return;
    }
    const svc_route *first = &k_routes[i];
    r->dialect = first->dialect;
    if ((first->flags & AS_WRITTEN) && r->encoded) {
        svc_reply_error(r, 404, "not_found", NULL, "no such path (not the image's URL)");
        return;
    }
    unsigned allowed = 0;
    for (size_t k = i; k < n && same_path(&k_routes[k], first); k++) {
        if (k_routes[k].methods & bit) {
            const bool untyped = ((k_routes[k].flags & UNTYPED) &&
                                  !svc_req_header(r, "Content-Type")) ||
                                 svc_comfy_ui_any_body(r);
            if (bit == M_POST && !untyped && !svc_browser_body_ok(r, k_routes[k].flags & MULTIPART))
                return;
            if ((k_routes[k].flags & ADMIN) && r->key && r->key->role != SVC_KEY_ADMIN) {
                svc_problem p = {.status = 403, .code = "forbidden",
                                 .message = "changing settings needs an admin key"};
                svc_reply_problem(r, r->dialect, &p);
                return;
            }
            k_routes[k].handler(r, rest);
            return;
        }
        allowed |= k_routes[k].methods;
    }
    char allow[64];
    allow_text(allowed, allow, sizeof allow);
    /* A1111's 405 has always been the native object (no "detail") */
    svc_reply_method_not_allowed(r, first->dialect == A1111 ? NATIVE : first->dialect, allow);
}

/* ------------------------------------------------------------- the request */

static const char *method_name(enum evhttp_cmd_type t)
{
    switch (t) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
    default: return "OTHER";
    }
}

static void preflight(svc_req *r)
{
    svc_req_add_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, HEAD, OPTIONS");
    svc_req_add_header(r, "Access-Control-Allow-Headers",
                       "Authorization, Content-Type, Last-Event-ID, If-None-Match");
    svc_req_add_header(r, "Access-Control-Max-Age", "600");
    svc_reply_buffer(r, 204, NULL, NULL);
}

/* /v1/jobs/<id>/images/...: a PNG, a tile or a manifest, the paths a
 * signed URL opens (http/signed.h). */
static bool image_path(const char *path)
{
    if (strncmp(path, "/v1/jobs/", 9) != 0)
        return false;
    const char *slash = strchr(path + 9, '/');
    return slash && strncmp(slash, "/images/", 8) == 0;
}

/* A signed image URL with a bad or expired signature: 403, whatever else
 * the request carries (a key does not mend a tampered URL). */
static void bad_signature(svc_req *r, svc_url_verdict v)
{
    svc_problem p = {.status = 403,
                     .code = "forbidden",
                     .message = v == SVC_URL_EXPIRED
                                    ? "this signed URL has expired; ask for the job again "
                                      "for a fresh one"
                                    : "this URL's signature (md5, expires) is not valid"};
    svc_reply_problem(r, SVC_DIALECT_NATIVE, &p);
}

/* --keys / --token-file: /v1/... and /sdapi/... take a key (A1111 clients
 * may send it as Basic's password); r->key is whose it is.  The web UI's
 * requests (ui: /comfy/api/... and /comfy/ws, rewritten) may instead carry
 * its session cookie (api/comfy/comfy_login.c), which then has to pass
 * svc_browser_cookie_ok; no other path looks at the cookie.  An image,
 * tile or manifest URL may instead carry a signature: valid, it is let in
 * without a key (r->signed_until); bad or expired, answered 403 here. */
static bool authorized(svc_req *r, bool ui, bool *answered)
{
    svc_server *s = r->srv;
    const bool v1 = strncmp(r->path, "/v1/", 4) == 0;
    const bool sdapi = strncmp(r->path, "/sdapi/", 7) == 0;
    /* ComfyUI's routes (and its web UI's) take the key too */
    const bool comfy = svc_comfy_is_path(r->path) || svc_comfy_ui_is_path(r->path);
    *answered = false;
    if (!(v1 || sdapi || comfy) || s->keys.n == 0)
        return true;
    if (image_path(r->path)) {
        svc_url_verdict v =
            svc_url_verify(&s->urls, r->path, r->query, svc_now_unix(), &r->signed_until);
        if (v == SVC_URL_OK)
            return true;
        if (v != SVC_URL_UNSIGNED) {
            bad_signature(r, v);
            *answered = true;
            return false;
        }
    }
    const char *auth = svc_req_header(r, "Authorization");
    r->key = svc_keys_check(&s->keys, auth, sdapi);
    if (!r->key && !auth && ui && comfy) {
        r->key = svc_comfy_session_key(r);
        r->by_cookie = r->key != NULL;
        if (r->by_cookie && !svc_browser_cookie_ok(r)) {
            *answered = true;
            return false;
        }
    }
    return r->key != NULL;
}

/* The 401: OpenAI's shape on OpenAI's paths (by prefix, before any
 * match: /v1/images..., /v1/models/...), the native one elsewhere.  The
 * challenge is Bearer only, on /sdapi/ too: a Basic one would make a
 * browser ask for and cache credentials, then send them with cross-site
 * requests (webuiapi sends Basic unasked, which is still accepted). */
static void unauthorized(svc_req *r)
{
    const bool openai =
        strncmp(r->path, "/v1/images", 10) == 0 || strncmp(r->path, "/v1/models/", 11) == 0;
    svc_problem p = {.status = 401,
                     .code = openai ? "invalid_api_key" : "unauthorized",
                     .message = "a valid API key is required (Authorization: Bearer <key>)"};
    svc_req_add_header(r, "WWW-Authenticate", "Bearer");
    svc_reply_problem(r, openai ? SVC_DIALECT_OPENAI : SVC_DIALECT_NATIVE, &p);
}

void svc_http_on_request(struct evhttp_request *req, void *arg)
{
    svc_server *s = arg;
    svc_req *r = calloc(1, sizeof *r);
    if (!r) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    r->srv = s;
    r->req = req;
    r->t0 = svc_now_mono();
    snprintf(r->method, sizeof r->method, "%s", method_name(evhttp_request_get_command(req)));
    /* a method evhttp does not route, passed on by the guard as PATCH with
     * "<secret> METHOD" in SVC_METHOD_HEADER; the same header from a client
     * lacks the secret and changes nothing (PATCH gets its 405) */
    if (evhttp_request_get_command(req) == EVHTTP_REQ_PATCH) {
        struct evkeyvalq *in = evhttp_request_get_input_headers(req);
        size_t k = strlen(s->guard_secret);
        for (struct evkeyval *h = in->tqh_first; h; h = h->next.tqe_next)
            if (strcasecmp(h->key, SVC_METHOD_HEADER) == 0 &&
                strncmp(h->value, s->guard_secret, k) == 0 && h->value[k] == ' ')
                snprintf(r->method, sizeof r->method, "%s", h->value + k + 1);
    }
    const char *raw = evhttp_request_get_uri(req);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    size_t plen = 0;
    r->path = evhttp_uridecode(path && *path ? path : "/", 0, &plen);
    if (!r->path) {
        r->path = strdup("?");
        svc_reply_error(r, 404, "not_found", NULL, "the request path cannot be decoded");
        return;
    }
    if (uri && evhttp_uri_get_query(uri))
        r->query = strdup(evhttp_uri_get_query(uri));
    r->encoded = path && strchr(path, '%') != NULL;
    if (svc_guard_answer(r))
        return;
    if (raw && strlen(raw) > URI_MAX) {
        svc_reply_error(r, 414, "uri_too_long", NULL, "the request URI is longer than %d bytes",
                        URI_MAX);
        return;
    }
    if (plen != strlen(r->path)) {
        svc_reply_error(r, 404, "not_found", NULL, "no such path");
        return;
    }
    /* ComfyUI answers its routes under /api/ too (its frontend and newer
     * clients use those): /api/prompt is /prompt from here on */
    /* --comfy-ui: /comfy/api/x is /api/x, /comfy/ws is /ws */
    const bool ui = svc_comfy_ui_rewrite(r);
    if (strncmp(r->path, "/api/", 5) == 0 &&
        (svc_comfy_is_path(r->path + 4) || svc_comfy_ui_is_path(r->path + 4)))
        memmove(r->path, r->path + 4, strlen(r->path + 4) + 1);
    if (!svc_browser_check(r))
        return;
    if (evhttp_request_get_command(req) == EVHTTP_REQ_OPTIONS && s->cfg.cors_origin) {
        preflight(r);
        return;
    }
    bool answered = false;
    if (!authorized(r, ui, &answered)) {
        if (!answered)
            unauthorized(r);
        return;
    }
    dispatch(r);
}
