/*
 * service/api/openai/openai.h - what the OpenAI images routes share between
 * openai.c (requests, replies, waiting) and openai_stream.c
 * (the `stream: true` responses).  docs/compat-openai.md is the contract.
 *
 * A call (oai_call) lives from the request until its reply ends: it owns
 * the svc_req, watches its native job (svc_job_watch) and the client's
 * socket (EOF: the client went away, the job is cancelled).  Owner: the
 * event loop.  Calls are freed at a safe point (a zero-delay event), never
 * inside evhttp's or the job's callbacks.
 */
#ifndef SVC_COMPAT_OPENAI_H
#define SVC_COMPAT_OPENAI_H

#include <stdbool.h>
#include <stdint.h>

#include "http.h"
#include "jobs.h"
#include "stream.h"

struct svc_server;
struct event;
struct evbuffer;
struct evhttp_connection;

#define OAI_MAX_N 10
#define OAI_MAX_PARTIAL 3

typedef struct oai_call {
    struct svc_server *srv;
    svc_req *r;                 /* owned until the reply ends (NULL once freed by evhttp) */
    svc_job *job;               /* borrowed; watched while `watching` */
    svc_watch watch;
    bool watching;
    bool edit;                  /* /edits: image_edit.* stream events */
    bool url;                   /* response_format url */
    bool stream;
    int partial_images;         /* 0..3 */
    int width, height;
    char quality[16], background[16];
    int text_tokens;            /* usage: an estimate (words of the prompt) */
    int image_tokens;           /* usage: input images (edits) */
    double created;
    int *partials_sent;         /* per image (stream) */
    /* connection */
    svc_peer peer;              /* the client, from the accept on (stream.h) */
    svc_stream st;              /* streams: the reply (stream.h) */
    struct evbuffer *pending;   /* streams: events not yet handed to the stream */
    bool started;               /* streams: reply started */
    bool closing;               /* streams: end once pending is sent */
    bool accepted;              /* the job is journaled and in the table */
    bool gone;                  /* the client went away (EOF or closed connection) */
    bool done;                  /* finished: waiting for the deferred free */
    struct oai_call *prev, *next; /* every live call (close_all) */
} oai_call;

/* Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
 * type follows the status (400/404/405/413 invalid_request_error, 401
 * authentication_error...: http/reply.c renders it).  Ends r. */
#define oai_reply_error(r, status, param, code, ...)                                          \
    svc_reply_errorf((r), SVC_DIALECT_OPENAI, (status), (code), (param), __VA_ARGS__)
/* Stop watching the connection (before a reply ends it normally). */
void oai_call_detach_conn(oai_call *c);
/* Unwatch, drop the socket watch, and free c at a safe point (r must have
 * been answered or be NULL). */
void oai_call_finish(oai_call *c);

/* A request error: status, OpenAI's param and code, a message. */
typedef struct oai_err {
    int status;
    char param[64];
    char code[32];
    char msg[600];
} oai_err;

/* Fill e (status 400); returns -1. */
int oai_bad(oai_err *e, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A call answering r (not attached yet), NULL on out of memory. */
oai_call *oai_call_new(svc_req *r, bool edit);
/* Check OpenAI's fields of `in` into c; move what the native parser reads
 * (prompt, n, size as width/height, the extensions) into `nat`. */
int oai_take_fields(oai_call *c, cJSON *in, cJSON *nat, oai_err *e);
/* After the fields were taken into c and nat (taken: 0, or -1 with *e;
 * c or nat NULL: out of memory): parse `nat` into a job, ask the submit
 * gate, accept it.  Takes c and nat over and ends in a reply (error) or in
 * the job's watch. */
void oai_submit(svc_req *r, oai_call *c, cJSON *nat, int taken, const oai_err *e);
/* The routes (http/router.c's table): POST /v1/images/generations and
 * /edits, any other path under /v1/images (404), GET /v1/models/{id}
 * (rest: the id). */
void svc_openai_generations(svc_req *r, const char *rest);
void svc_openai_edits(svc_req *r, const char *rest);
void svc_openai_no_route(svc_req *r, const char *rest);
void svc_openai_model(svc_req *r, const char *rest);
/* The submit paths behind them. */
void oai_generations(svc_req *r);
void oai_edits(svc_req *r);                 /* openai_edits.c */

/* ---- openai_stream.c ---- */

/* Start the event-stream reply of c (after the job was accepted). */
void oai_stream_start(oai_call *c);
/* A job event for a streaming call. */
void oai_stream_event(oai_call *c, const svc_event *ev);
/* The client went away or the server stops: end the stream now. */
void oai_stream_abort(oai_call *c);
/* The server stops: an error event, then the end. */
void oai_stream_shutdown(oai_call *c);
/* The usage object of the completed events and responses. */
cJSON *oai_usage_json(const oai_call *c);
/* The PNG (base64) of a finished image of c's job, NULL on failure (logged). */
char *oai_image_b64(oai_call *c, int index);

#endif
