/*
 * service/http/http.c - evhttp set-up, the router, replies, the access log,
 * authentication and CORS (see http.h).
 *
 * Limits: the head guard (http/guard.c) answers 413/414/431 itself;
 * evhttp's own limits are set above the guard's as a backstop, and a URI
 * past 8 KiB that reached a handler anyway is refused here too.
 */
#include "http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "auth.h"
#include "log.h"
#include "server.h"
#include "sse.h"
#include "util.h"
#include "web_assets.h"

static bool serve_web(svc_req *r);

#define URI_MAX 8192

static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
    }
}

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

void svc_req_add_header(svc_req *r, const char *name, const char *value)
{
    if (r->req)
        evhttp_add_header(evhttp_request_get_output_headers(r->req), name, value);
}

const char *svc_req_header(svc_req *r, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(r->req), name);
}

const char *svc_req_body(svc_req *r, size_t *len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(r->req);
    *len = evbuffer_get_length(in);
    if (*len == 0)
        return "";
    return (const char *)evbuffer_pullup(in, -1);
}

static void common_headers(svc_req *r)
{
    if (r->srv->cfg.cors_origin) {
        svc_req_add_header(r, "Access-Control-Allow-Origin", r->srv->cfg.cors_origin);
        svc_req_add_header(r, "Access-Control-Expose-Headers", "Location, ETag, Retry-After");
        if (strcmp(r->srv->cfg.cors_origin, "*") != 0)
            svc_req_add_header(r, "Vary", "Origin");
    }
}

/* A client's bytes for the access log, as nginx writes them: a control
 * byte, DEL, a byte past ASCII, '"' and '\\' become \xHH, so no path can
 * forge a log line or reach a terminal as an escape sequence.  Cut to fit
 * out (size >= 5). */
static void log_escape(const char *in, char *out, size_t size)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        bool esc = *p < 0x20 || *p >= 0x7f || *p == '"' || *p == '\\';
        size_t need = esc ? 4 : 1;
        if (o + need + 1 > size)
            break;
        if (esc)
            o += (size_t)snprintf(out + o, size - o, "\\x%02X", *p);
        else
            out[o++] = (char)*p;
    }
    out[o] = '\0';
}

void svc_req_finish(svc_req *r, int status)
{
    svc_server *s = r->srv;
    if (status >= 100 && status < 600)
        s->metrics.http[status]++;
    if (svc_log_enabled(TSR_LOG_INFO)) {
        char method[4 * sizeof r->method + 1], path[4 * 1024 + 1];
        log_escape(r->method, method, sizeof method);
        log_escape(r->path ? r->path : "?", path, sizeof path);
        SVC_INFO("http: %s %s %d %zu %.1fms", method, path, status, r->bytes_out,
                 (svc_now_mono() - r->t0) * 1000.0);
    }
    free(r->path);
    free(r->query);
    free(r);
}

void svc_reply_stream_start(svc_req *r)
{
    svc_req_add_header(r, "Content-Type", "text/event-stream");
    svc_req_add_header(r, "Cache-Control", "no-cache");
    svc_req_add_header(r, "X-Accel-Buffering", "no");
    common_headers(r); /* a page on another origin reads the stream too */
    evhttp_send_reply_start(r->req, 200, "OK");
}

void svc_reply_buffer(svc_req *r, int status, const char *content_type, struct evbuffer *body)
{
    if (content_type)
        svc_req_add_header(r, "Content-Type", content_type);
    common_headers(r);
    r->bytes_out = body ? evbuffer_get_length(body) : 0;
    evhttp_send_reply(r->req, status, reason(status), body);
    r->req = NULL;
    svc_req_finish(r, status);
}

void svc_reply_json(svc_req *r, int status, cJSON *body)
{
    char *text = body ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    struct evbuffer *buf = evbuffer_new();
    if (!text || !buf) {
        cJSON_free(text);
        if (buf)
            evbuffer_free(buf);
        /* last resort: a fixed body */
        struct evbuffer *b = evbuffer_new();
        if (b)
            evbuffer_add_printf(b, "{\"error\":{\"code\":\"internal\",\"message\":\"out of "
                                   "memory\",\"field\":null}}\n");
        svc_reply_buffer(r, 500, "application/json", b);
        if (b)
            evbuffer_free(b);
        return;
    }
    evbuffer_add(buf, text, strlen(text));
    evbuffer_add(buf, "\n", 1);
    cJSON_free(text);
    svc_reply_buffer(r, status, "application/json", buf);
    evbuffer_free(buf);
}

cJSON *svc_error_body(const char *code, const char *field, const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    if (field && field[0])
        cJSON_AddStringToObject(e, "field", field);
    else
        cJSON_AddNullToObject(e, "field");
    return o;
}

void svc_reply_error(svc_req *r, int status, const char *code, const char *field,
                     const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *o = svc_error_body(code, field, msg);
    if (status >= 400 && status != 404 && svc_log_enabled(TSR_LOG_DEBUG)) {
        char path[1024], text[4 * sizeof msg];
        log_escape(r->path ? r->path : "?", path, sizeof path);
        log_escape(msg, text, sizeof text);
        SVC_DEBUG("http: %s %s -> %d %s: %s", r->method, path, status, code, text);
    }
    svc_reply_json(r, status, o);
}

struct evhttp_connection *svc_req_watch_peer(svc_req *r,
                                             void (*on_close)(struct evhttp_connection *, void *),
                                             void (*on_readable)(int fd, short what, void *arg),
                                             void *arg, struct event **watch)
{
    *watch = NULL;
    struct evhttp_connection *evcon = evhttp_request_get_connection(r->req);
    if (!evcon)
        return NULL;
    evhttp_connection_set_closecb(evcon, on_close, arg);
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd >= 0) {
        *watch = event_new(r->srv->base, fd, EV_READ | EV_PERSIST, on_readable, arg);
        if (*watch)
            event_add(*watch, NULL);
    }
    return evcon;
}

void svc_reply_method_not_allowed(svc_req *r, const char *allow)
{
    svc_req_add_header(r, "Allow", allow);
    svc_reply_error(r, 405, "method_not_allowed", NULL, "%s is not allowed on %s (allowed: %s)",
                    r->method, r->path, allow);
}

void svc_reply_unavailable(svc_req *r)
{
    svc_server *s = r->srv;
    svc_req_add_header(r, "Retry-After", s->phase == SVC_PHASE_LOADING ? "5" : "30");
    svc_reply_error(r, 503, "unavailable", NULL, "%s",
                    s->phase == SVC_PHASE_LOADING ? "the model is still loading"
                                                  : "the server is shutting down");
}

void svc_reply_queue_unreachable(svc_req *r)
{
    svc_req_add_header(r, "Retry-After", "5");
    svc_reply_error(r, 503, "unavailable", NULL,
                    "the job queue (Redis, --queue) cannot be reached; nothing was accepted");
}

static void preflight(svc_req *r)
{
    svc_req_add_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, HEAD, OPTIONS");
    svc_req_add_header(r, "Access-Control-Allow-Headers",
                       "Authorization, Content-Type, Last-Event-ID, If-None-Match");
    svc_req_add_header(r, "Access-Control-Max-Age", "600");
    svc_reply_buffer(r, 204, NULL, NULL);
}

static void on_request(struct evhttp_request *req, void *arg)
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
    if (evhttp_request_get_command(req) == EVHTTP_REQ_OPTIONS && s->cfg.cors_origin) {
        preflight(r);
        return;
    }
    const bool v1 = strncmp(r->path, "/v1/", 4) == 0;
    const bool sdapi = strncmp(r->path, "/sdapi/", 7) == 0; /* A1111 clients: Basic too */
    const char *authz = svc_req_header(r, "Authorization");
    if ((v1 || sdapi) && s->token && !svc_auth_check(s->token, s->token_len, authz) &&
        !(sdapi && svc_auth_check_basic(s->token, s->token_len, authz))) {
        if (svc_openai_path(r->path)) {
            svc_openai_unauthorized(r); /* OpenAI's error shape */
            return;
        }
        svc_req_add_header(r, "WWW-Authenticate", "Bearer");
        if (sdapi)
            svc_req_add_header(r, "WWW-Authenticate", "Basic realm=\"tessera\"");
        svc_reply_error(r, 401, "unauthorized", NULL,
                        "a valid bearer token is required (Authorization: Bearer <token>)");
        return;
    }
    if (svc_route_is_ops(r->path)) {
        svc_route_ops(r);
    } else if (strncmp(r->path, "/v1/jobs", 8) == 0 &&
               (r->path[8] == '\0' || r->path[8] == '/')) {
        svc_route_jobs(r, r->path + 8);
    } else if (strncmp(r->path, "/v1/batches", 11) == 0 &&
               (r->path[11] == '\0' || r->path[11] == '/')) {
        svc_route_batches(r, r->path + 11);
    } else if (strncmp(r->path, "/v1/images", 10) == 0 &&
               (r->path[10] == '\0' || r->path[10] == '/')) {
        svc_route_openai_images(r, r->path + 10);
    } else if (strncmp(r->path, "/v1/models/", 11) == 0) {
        svc_route_openai_model(r, r->path + 11);
    } else if (strncmp(r->path, "/sdapi/v1", 9) == 0 &&
               (r->path[9] == '\0' || r->path[9] == '/')) {
        svc_route_a1111(r, r->path + 9);
    } else if (!serve_web(r)) {
        svc_reply_error(r, 404, "not_found", NULL, "no such path: %s", r->path);
    }
}

/* The page: / (index.html), /app.js, /style.css, compiled in. */
static bool serve_web(svc_req *r)
{
    const char *name = strcmp(r->path, "/") == 0 ? "index.html" : r->path + 1;
    const svc_web_asset *a = NULL;
    for (const svc_web_asset *x = svc_web_assets; x->name; x++)
        if (strcmp(x->name, name) == 0)
            a = x;
    if (!a)
        return false;
    if (strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0) {
        svc_reply_method_not_allowed(r, "GET, HEAD");
        return true;
    }
    char hex[65], etag[40];
    svc_sha256_hex(a->data, a->len, hex);
    snprintf(etag, sizeof etag, "\"%.32s\"", hex);
    svc_req_add_header(r, "ETag", etag);
    svc_req_add_header(r, "Cache-Control", "no-cache");
    svc_req_add_header(r, "X-Content-Type-Options", "nosniff");
    const char *inm = svc_req_header(r, "If-None-Match");
    if (inm && strstr(inm, etag)) {
        svc_reply_buffer(r, 304, NULL, NULL);
        return true;
    }
    struct evbuffer *buf = evbuffer_new();
    if (buf)
        evbuffer_add(buf, a->data, a->len);
    svc_reply_buffer(r, 200, a->content_type, buf);
    if (buf)
        evbuffer_free(buf);
    return true;
}

static struct bufferevent *make_bev(struct event_base *base, void *arg)
{
    return svc_guard_bev(base, arg);
}

/* accept() failed.  libevent's listener would log a warning and try again
 * at once, and the listening socket stays readable, so running out of
 * descriptors (EMFILE) spins the loop at 100% CPU.  Instead: stop
 * accepting for ACCEPT_PAUSE_MS, then try again (nginx's
 * accept_mutex_delay idea); connections already open go on, and as they
 * close, descriptors free up.  Logged at most once a second. */
#define ACCEPT_PAUSE_MS 100

/* The error callback gets evhttp's argument (its struct evhttp), not
 * ours: the one server of the process is found here. */
static svc_server *accept_server;

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    svc_server *s = arg;
    if (s->listener)
        evconnlistener_enable(s->listener);
}

static void on_accept_error(struct evconnlistener *l, void *arg)
{
    (void)arg;
    svc_server *s = accept_server;
    if (!s)
        return;
    int e = EVUTIL_SOCKET_ERROR();
    s->accept_errors++;
    double now = svc_now_mono();
    if (now - s->accept_error_logged >= 1.0) {
        struct rlimit rl;
        long long lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long long)rl.rlim_cur : -1;
        SVC_WARN("http: accept() failed: %s (%llu times so far; descriptor limit %lld); "
                 "pausing new connections for %d ms",
                 strerror(e), (unsigned long long)s->accept_errors, lim, ACCEPT_PAUSE_MS);
        s->accept_error_logged = now;
    }
    evconnlistener_disable(l);
    struct timeval tv = {0, ACCEPT_PAUSE_MS * 1000};
    if (!s->ev_accept_resume)
        s->ev_accept_resume = evtimer_new(s->base, on_accept_resume, s);
    if (s->ev_accept_resume)
        evtimer_add(s->ev_accept_resume, &tv);
    else
        evconnlistener_enable(l); /* out of memory: better busy than deaf */
}

/* libevent's own messages, through the server's log and level (they would
 * go to stderr, whatever --log-level says). */
static void on_libevent_log(int severity, const char *msg)
{
    tsr_log_level level = severity == EVENT_LOG_DEBUG ? TSR_LOG_DEBUG
                          : severity == EVENT_LOG_MSG ? TSR_LOG_INFO
                          : severity == EVENT_LOG_WARN ? TSR_LOG_WARN
                                                       : TSR_LOG_ERROR;
    SVC_LOG_AT(level, "libevent: %s", msg);
}

void svc_http_process_init(void)
{
    event_set_log_callback(on_libevent_log);
    /* every connection is a descriptor: take the hard limit (nginx's
     * worker_rlimit_nofile); what is left past it is handled above */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            SVC_WARN("cannot raise the descriptor limit to %llu: %s", (unsigned long long)want,
                     strerror(errno));
    }
}

int svc_http_start(svc_server *s)
{
    s->http = evhttp_new(s->base);
    if (!s->http) {
        SVC_ERROR("cannot create the HTTP server");
        return -1;
    }
    /* backstops above the guard's limits (http/guard.c) */
    evhttp_set_max_headers_size(s->http, 64 * 1024);
    evhttp_set_max_body_size(s->http, s->cfg.max_body);
    /* no progress for 50 s (libevent's default): the connection closes; a
     * head trickling in counts as none until it is whole (the guard holds
     * it), so a slowloris client is cut after 50 s.  Streams send a
     * keepalive every 15 s, so only a reader that stopped reading hits it */
    evhttp_set_timeout(s->http, 50);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_default_content_type(s->http, "application/json");
    evhttp_set_bevcb(s->http, make_bev, s);
    evhttp_set_gencb(s->http, on_request, s);
    struct evhttp_bound_socket *h =
        evhttp_bind_socket_with_handle(s->http, s->cfg.host, (ev_uint16_t)s->cfg.port);
    if (!h) {
        SVC_ERROR("cannot listen on %s:%d (address in use, or not an address of this machine)",
                  s->cfg.host, s->cfg.port);
        return -1;
    }
    s->listener = evhttp_bound_socket_get_listener(h);
    if (s->listener) {
        accept_server = s;
        evconnlistener_set_error_cb(s->listener, on_accept_error);
    }
    /* the port actually bound (port 0: the kernel's choice) */
    evutil_socket_t fd = evhttp_bound_socket_get_fd(h);
    struct sockaddr_storage ss;
    ev_socklen_t len = sizeof ss;
    s->port = s->cfg.port;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET)
            s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return 0;
}

void svc_http_stop(svc_server *s)
{
    if (s->ev_accept_resume) {
        event_free(s->ev_accept_resume);
        s->ev_accept_resume = NULL;
    }
    s->listener = NULL; /* evhttp's */
    if (accept_server == s)
        accept_server = NULL;
    if (s->http) {
        evhttp_free(s->http);
        s->http = NULL;
    }
}
