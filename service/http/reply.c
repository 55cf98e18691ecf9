/*
 * service/http/reply.c - every answer leaves through here: the replies,
 * the one error renderer, the access log.
 *
 * Why one renderer: the three APIs write their errors in three shapes
 * (native {"error": {code, message, field}}, A1111's native object plus
 * FastAPI's "detail", OpenAI's {"error": {message, type, param, code}}),
 * and a handler should not know which shape its path speaks.  A handler
 * reports a problem (status, code, field, message, Retry-After) and
 * svc_reply_problem writes it in the dialect asked for, as nginx's
 * special_response.c writes every error page.  The router picks the
 * dialect from the route table (router.c); svc_reply_errorf formats the
 * message, and the per-dialect names handlers call (svc_reply_error,
 * svc_a1111_reply_error, oai_reply_error) are macros over it.
 *
 * Every reply adds the CORS headers when configured, counts into /metrics
 * and writes one access-log line (svc_req_finish), then frees the svc_req.
 */
#include "http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "json.h"
#include "log.h"
#include "server.h"
#include "util.h"

static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
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

/* ------------------------------------------------------ the error renderer */

/* OpenAI's error "type" follows the status. */
static const char *openai_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "invalid_request_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static cJSON *problem_body(svc_dialect d, const svc_problem *p)
{
    const char *field = p->field && p->field[0] ? p->field : NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    if (d == SVC_DIALECT_OPENAI) {
        cJSON_AddStringToObject(e, "message", p->message);
        cJSON_AddStringToObject(e, "type", openai_type(p->status));
        svc_json_add_string_or_null(e, "param", field);
        svc_json_add_string_or_null(e, "code", p->code);
        return o;
    }
    if (d == SVC_DIALECT_COMFY) {
        /* ComfyUI's: the code is its "type", the field its "details" */
        cJSON_AddStringToObject(e, "type", p->code ? p->code : "error");
        cJSON_AddStringToObject(e, "message", p->message);
        cJSON_AddStringToObject(e, "details", field ? field : "");
        cJSON_AddObjectToObject(e, "extra_info");
        cJSON_AddObjectToObject(o, "node_errors");
        return o;
    }
    cJSON_AddStringToObject(e, "code", p->code);
    cJSON_AddStringToObject(e, "message", p->message);
    svc_json_add_string_or_null(e, "field", field);
    if (d == SVC_DIALECT_A1111)
        cJSON_AddStringToObject(o, "detail", p->message); /* FastAPI's key, which A1111
                                                            * clients print */
    return o;
}

void svc_reply_problem(svc_req *r, svc_dialect d, const svc_problem *p)
{
    if (p->retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", p->retry_after);
        svc_req_add_header(r, "Retry-After", v);
    }
    if (p->status >= 400 && p->status != 404 && svc_log_enabled(TSR_LOG_DEBUG)) {
        char path[1024], text[4 * 1024];
        log_escape(r->path ? r->path : "?", path, sizeof path);
        log_escape(p->message, text, sizeof text);
        SVC_DEBUG("http: %s %s -> %d %s: %s", r->method, path, p->status,
                  p->code ? p->code : "-", text);
    }
    svc_reply_json(r, p->status, problem_body(d, p));
}

void svc_reply_errorf(svc_req *r, svc_dialect d, int status, const char *code,
                      const char *field, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    svc_problem p = {.status = status, .code = code, .field = field, .message = msg};
    svc_reply_problem(r, d, &p);
}

void svc_reply_method_not_allowed(svc_req *r, svc_dialect d, const char *allow)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s is not allowed on %s (allowed: %s)", r->method, r->path, allow);
    svc_req_add_header(r, "Allow", allow);
    svc_problem p = {.status = 405, .code = "method_not_allowed", .message = msg};
    svc_reply_problem(r, d, &p);
}

void svc_reply_unavailable(svc_req *r)
{
    const bool loading = r->srv->phase == SVC_PHASE_LOADING;
    svc_problem p = {.status = 503,
                     .code = "unavailable",
                     .message = loading ? "the model is still loading"
                                        : "the server is shutting down",
                     .retry_after = loading ? 5 : 30};
    svc_reply_problem(r, SVC_DIALECT_NATIVE, &p);
}

cJSON *svc_req_json_object(svc_req *r)
{
    size_t len = 0;
    const char *body = svc_req_body(r, &len);
    char err[256];
    cJSON *obj = svc_json_parse(body, len, err, sizeof err);
    if (!obj) {
        svc_reply_errorf(r, r->dialect, 400, "invalid_json", NULL,
                         "the body is not valid JSON: %s", err);
        return NULL;
    }
    if (!cJSON_IsObject(obj)) {
        cJSON_Delete(obj);
        svc_reply_errorf(r, r->dialect, 400, "invalid_json", NULL,
                         "the body must be a JSON object");
        return NULL;
    }
    return obj;
}
