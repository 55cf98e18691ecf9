/*
 * service/http/http.h - the HTTP layer: evhttp set-up, the router, replies.
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

typedef struct svc_req {
    struct svc_server *srv;
    struct evhttp_request *req;
    double t0;
    char method[12];
    char *path;       /* owned: the decoded path */
    char *query;      /* owned or NULL */
    bool encoded;     /* the path came percent-encoded (not a canonical resource URL) */
    size_t bytes_out; /* streamed responses count here */
} svc_req;

/* Once per process, before the loop: libevent's log through the server's,
 * and the descriptor limit raised to its hard limit. */
void svc_http_process_init(void);
/* Bind and start serving on s->base.  0, or -1 (logged). */
int svc_http_start(struct svc_server *s);
void svc_http_stop(struct svc_server *s);

/* Replies (each ends r: it is freed). */
void svc_reply_json(svc_req *r, int status, cJSON *body);
void svc_reply_error(svc_req *r, int status, const char *code, const char *field,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The contract's error object {"error": {code, message, field}}. */
cJSON *svc_error_body(const char *code, const char *field, const char *msg);
/* body is drained into the reply (may be NULL). */
void svc_reply_buffer(svc_req *r, int status, const char *content_type, struct evbuffer *body);
void svc_reply_method_not_allowed(svc_req *r, const char *allow);
/* 200 text/event-stream (no-cache, unbuffered by proxies, CORS as every
 * reply), then evhttp_send_reply_start: the caller sends chunks. */
void svc_reply_stream_start(svc_req *r);
/* 503 with Retry-After. */
void svc_reply_unavailable(svc_req *r);
/* 503 + Retry-After 5: --queue's Redis is away (docs/scale-out.md). */
void svc_reply_queue_unreachable(svc_req *r);

void svc_req_add_header(svc_req *r, const char *name, const char *value);
const char *svc_req_header(svc_req *r, const char *name);
/* The body as bytes (NUL-terminated copy, owned by r's request). */
const char *svc_req_body(svc_req *r, size_t *len);
/* Watch r's connection for the client going away while its answer is
 * pending (a stream, a call that waits for its job): on_close runs when
 * evhttp closes the connection, and *watch (a read event on its socket,
 * added; NULL when the socket is not available; the caller frees it) calls
 * on_readable, which classifies with svc_peer_state, to see an EOF that
 * evhttp would notice only at the next write.  Returns the connection, or
 * NULL (nothing watched) when r has none. */
struct evhttp_connection *svc_req_watch_peer(svc_req *r,
                                             void (*on_close)(struct evhttp_connection *, void *),
                                             void (*on_readable)(int fd, short what, void *arg),
                                             void *arg, struct event **watch);
/* Access log + metrics for a response that ends outside svc_reply_*
 * (streams), then free r. */
void svc_req_finish(svc_req *r, int status);

/* Routes (routes_*.c); rest = path after the prefix. */
void svc_route_jobs(svc_req *r, const char *rest);
void svc_route_batches(svc_req *r, const char *rest);
/* --queue: answer later: again(r, rest) runs once ready(srv, id) holds or
 * `seconds` passed, looking every 10 ms (routes_jobs.c).  false: it cannot
 * wait (out of memory); answer now. */
bool svc_route_wait(svc_req *r, const char *rest, uint64_t id, double seconds,
                    bool (*ready)(struct svc_server *s, const char *rest, uint64_t id),
                    void (*again)(svc_req *r, const char *rest));
void svc_route_ops(svc_req *r);
bool svc_route_is_ops(const char *path);
/* Compatibility APIs: /sdapi/v1/... (AUTOMATIC1111, a1111.c; rest =
 * the path after "/sdapi/v1") and /v1/images/... (OpenAI images,
 * openai.c; rest = the path after "/v1/images"). */
void svc_route_a1111(svc_req *r, const char *rest);
void svc_route_openai_images(svc_req *r, const char *rest);
/* GET /v1/models/{id} (OpenAI's model object; id = the rest of the path). */
void svc_route_openai_model(svc_req *r, const char *id);
/* Paths answered in OpenAI's error shape (/v1/images..., /v1/models/...),
 * and their 401. */
bool svc_openai_path(const char *path);
void svc_openai_unauthorized(svc_req *r);
/* Answer every OpenAI call still waiting (shutdown). */
void svc_openai_close_all(struct svc_server *s);

/* The head guard (http/guard.c): a bufferevent that checks request heads. */
#define SVC_METHOD_HEADER "X-Tessera-Guard-Method"
struct bufferevent *svc_guard_bev(struct event_base *base, void *server);
/* A request the guard replaced: answer it (true) or not ours (false). */
bool svc_guard_answer(svc_req *r);


#endif
