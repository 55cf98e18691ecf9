/*
 * service/http/http.h - the HTTP layer: evhttp set-up (listen.c), the
 * route table (router.c), replies and the error renderer (reply.c), the
 * page (page.c).
 *
 * Every request gets a svc_req (allocated when its handler starts, freed
 * when its reply is sent), which carries what the access log needs.  A
 * handler answers through svc_reply_* exactly once, now or later (a POST
 * waits for the journal's fsync; an SSE stream lasts).  Replies add the
 * CORS header when configured and count into /metrics.
 *
 * Limits: the request head guard (http/guard.c) answers 413/414/431 with
 * the contract's JSON before evhttp buffers anything oversized.
 */
#ifndef SVC_HTTP_H
#define SVC_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

struct svc_server;
struct evhttp_request;
struct evbuffer;
struct event_base;
struct bufferevent;
struct evhttp_connection;
struct event;

/* The error dialect of a path: which shape its error bodies take. */
typedef enum svc_dialect {
    SVC_DIALECT_NATIVE, /* {"error": {"code", "message", "field"}} (docs/openapi.yaml) */
    SVC_DIALECT_A1111,  /* the native object plus FastAPI's "detail": the message */
    SVC_DIALECT_OPENAI, /* {"error": {"message", "type", "param", "code"}} */
    SVC_DIALECT_COMFY,  /* ComfyUI's {"error": {"type", "message", "details", "extra_info"},
                         * "node_errors": {}} (docs/compat-comfyui.md) */
} svc_dialect;

typedef struct svc_req {
    struct svc_server *srv;
    struct evhttp_request *req;
    double t0;
    char method[12];
    char *path;       /* owned: the decoded path */
    char *query;      /* owned or NULL */
    bool encoded;     /* the path came percent-encoded (not a canonical resource URL) */
    size_t bytes_out; /* streamed responses count here */
    svc_dialect dialect; /* the matched route's (router.c) */
    bool waited;         /* svc_route_wait ran it again: it waits no more */
    const struct svc_key *key; /* whose key (http/auth.c); NULL: keys off or public path */
    long long signed_until; /* > 0: let in by a signed URL valid until then (Unix s) */
    bool by_cookie;         /* key is the web UI's session cookie's (router.c) */
} svc_req;

/* Once per process, before the loop: libevent's log through the server's,
 * and the descriptor limit raised to its hard limit (listen.c). */
void svc_http_process_init(void);
/* Bind and start serving on s->base.  0, or -1 (logged). */
int svc_http_start(struct svc_server *s);
void svc_http_stop(struct svc_server *s);
/* evhttp's request callback: decode, guard, CORS, auth, the route table
 * (router.c). */
void svc_http_on_request(struct evhttp_request *req, void *arg);
/* Browser defence (browser.c): Host on a loopback address and Origin;
 * false when it answered 403. */
bool svc_browser_check(svc_req *r);
/* A request the web UI's session cookie signs in: no other site's (an
 * Origin that is not the server's own, Sec-Fetch-Site other than
 * same-origin/none, or a state-changing request with neither); false when
 * it answered 403. */
bool svc_browser_cookie_ok(svc_req *r);
/* The body's media type: application/json, or multipart/form-data;
 * false when it answered 415 in r's dialect. */
bool svc_browser_body_ok(svc_req *r, bool multipart);
/* The compiled-in page (page.c): true when path is one of its assets
 * (answered), false otherwise (nothing sent). */
bool svc_page_serve(svc_req *r);

/* Replies (reply.c; each ends r: it is freed). */
void svc_reply_json(svc_req *r, int status, cJSON *body);
/* body is drained into the reply (may be NULL). */
void svc_reply_buffer(svc_req *r, int status, const char *content_type, struct evbuffer *body);
/* 200 text/event-stream (no-cache, unbuffered by proxies, CORS as every
 * reply), then evhttp_send_reply_start: the caller sends chunks. */
void svc_reply_stream_start(svc_req *r);

/* An error, as a handler reports it; svc_reply_problem writes it in a
 * dialect's shape (field is OpenAI's "param"). */
typedef struct svc_problem {
    int status;
    const char *code;
    const char *field;   /* NULL or "": none */
    const char *message;
    int retry_after;     /* seconds, sent as Retry-After; 0: none */
} svc_problem;
void svc_reply_problem(svc_req *r, svc_dialect d, const svc_problem *p);
void svc_reply_errorf(svc_req *r, svc_dialect d, int status, const char *code,
                      const char *field, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The native shape; the A1111 and OpenAI ones are svc_a1111_reply_error
 * (a1111.h) and oai_reply_error (openai.h). */
#define svc_reply_error(r, status, code, field, ...)                                          \
    svc_reply_errorf((r), SVC_DIALECT_NATIVE, (status), (code), (field), __VA_ARGS__)
/* 405 with Allow (the router's, from its table). */
void svc_reply_method_not_allowed(svc_req *r, svc_dialect d, const char *allow);
/* The request body as a JSON object (owned: cJSON_Delete), read with the
 * strict reader (base/json.h); NULL after a 400 invalid_json in r's
 * dialect ("the body is not valid JSON: ..." / "the body must be a JSON
 * object"), which ends r. */
cJSON *svc_req_json_object(svc_req *r);
/* 503 with Retry-After. */
void svc_reply_unavailable(svc_req *r);

void svc_req_add_header(svc_req *r, const char *name, const char *value);
const char *svc_req_header(svc_req *r, const char *name);
/* The body as bytes (NUL-terminated copy, owned by r's request). */
const char *svc_req_body(svc_req *r, size_t *len);
/* Access log + metrics for a response that ends outside svc_reply_*
 * (streams), then free r. */
void svc_req_finish(svc_req *r, int status);

/* --queue: answer later: again(r, rest) runs (with r->waited set) once
 * ready(srv, id) holds or `seconds` passed, looking every 10 ms
 * (routes_jobs.c).  false: it cannot wait (out of memory); answer now. */
bool svc_route_wait(svc_req *r, const char *rest, uint64_t id, double seconds,
                    bool (*ready)(struct svc_server *s, const char *rest, uint64_t id),
                    void (*again)(svc_req *r, const char *rest));
/* --queue: a job or batch another api node accepted is known here once
 * this node's follower has read it (docs/scale-out.md): when `known` is
 * false and r has not waited yet, wait up to a second for ready(), then
 * run handler(r, rest) again (true: r is answered later). */
bool svc_route_await(svc_req *r, const char *rest, uint64_t id, bool known,
                     bool (*ready)(struct svc_server *s, const char *rest, uint64_t id),
                     void (*handler)(svc_req *r, const char *rest));
/* The job (kind 'j') or batch ('b') of rest ("/<id>[/...]"), or NULL when
 * r is answered (404) or waits (svc_route_await: handler runs again). */
void *svc_route_lookup(svc_req *r, const char *rest, char kind,
                       void (*handler)(svc_req *r, const char *rest));
/* Answer every OpenAI call still waiting (shutdown). */
void svc_openai_close_all(struct svc_server *s);

/* The head guard (http/guard.c): a bufferevent that checks request heads. */
#define SVC_METHOD_HEADER "X-Tessera-Guard-Method"
struct bufferevent *svc_guard_bev(struct event_base *base, void *server);
/* A request the guard replaced: answer it (true) or not ours (false). */
bool svc_guard_answer(svc_req *r);
/* A connection switched protocols (ComfyUI's websocket, api/comfy/comfy_ws.c):
 * its later bytes pass the guard as they are.  bev: the connection's
 * bufferevent; false when it is not a guard's or is mid-request. */
bool svc_guard_upgrade(struct bufferevent *bev);


#endif
