/*
 * service/http/stream.h - replies that take time: the client's connection
 * watched while an answer is pending (svc_peer), and a reply produced
 * over time, one chunk in flight (svc_stream).
 *
 * Users: SSE streams of jobs and batches (sse.c), A1111's txt2img and
 * img2img, which wait for their jobs (api/a1111/a1111.c), and OpenAI's
 * images calls and their `stream: true` (api/openai/openai.c,
 * openai_stream.c).  Owner: the event loop.  Both structs live inside the
 * owner's object, which frees them at a safe point (never inside evhttp's
 * callbacks: redis' freeClientAsync).
 */
#ifndef SVC_STREAM_H
#define SVC_STREAM_H

#include <stdbool.h>

#include "http.h"

struct evbuffer;
struct event;
struct evhttp_connection;

/* The client's side of a pending answer.  Two signs that it went away:
 * evhttp closing the connection (a failed write, a timeout), and an EOF
 * on the socket, which evhttp would notice only at its next write (a read
 * watch classifies it with svc_peer_state; bytes of a pipelined request
 * only stop the watch).  gone(arg) runs once, for the first of them:
 * - closed: evhttp is freeing the connection and, with it, r's request
 *   (r->req is NULL), unless a failed write had detached the request
 *   first (`detached`: it is ours, svc_peer_release frees it);
 * - EOF (closed false): the connection is still there; an answer sent now
 *   goes into the void and evhttp then sees the close. */
typedef struct svc_peer {
    svc_req *r;                      /* borrowed: the request watched */
    struct evhttp_connection *evcon; /* NULL when not watching */
    struct event *watch;             /* the read watch; NULL when none */
    bool closed;
    bool detached;
    void (*gone)(void *arg);
    void *arg;
} svc_peer;

void svc_peer_watch(svc_peer *p, svc_req *r, void (*gone)(void *arg), void *arg);
/* Stop watching (before answering r, and at the owner's free). */
void svc_peer_stop(svc_peer *p);
/* Whether r can still be answered (its request is there and evhttp's). */
bool svc_peer_answerable(const svc_peer *p);
/* Done with r (p's request, or NULL once answered) without an answer
 * (the client went away, shutdown): stop watching, free a detached request
 * (ending a stream reply if `started`, else a 499), log r with status and
 * free it.  The owner forgets r. */
void svc_peer_release(svc_peer *p, svc_req *r, bool started, int status);

/* A reply produced over time, llama.cpp's server_http_res::next() idea:
 * the stream pulls the next chunk from its producer when the previous one
 * has left (evhttp's write callback), so a slow reader costs its own
 * buffer and nothing else; a `: keepalive` comment goes out every 15 s
 * from the start (after the chunk in flight, if any).  Every chunk goes
 * through one evhttp call, because evhttp keeps one write callback per
 * connection and any other send would drop ours.
 *
 * next(arg, out) appends what is ready to out (possibly nothing) and
 * returns false once the reply is complete after out; the stream then
 * ends the reply and calls done(arg). */
typedef struct svc_stream {
    svc_peer *peer; /* borrowed: the owner's watch of the request */
    bool (*next)(void *arg, struct evbuffer *out);
    void (*done)(void *arg);
    void *arg;
    struct event *keepalive;
    bool inflight;      /* a chunk waits for its write callback */
    bool keepalive_due; /* the timer fired while a chunk was in flight */
    bool ended;
} svc_stream;

/* 200 text/event-stream on peer's request (headers already added stay),
 * the keepalive, and a first pull. */
void svc_stream_begin(svc_stream *st, svc_peer *peer, bool (*next)(void *, struct evbuffer *),
                      void (*done)(void *), void *arg);
/* Something new may be ready: pull it when no chunk is in flight. */
void svc_stream_pump(svc_stream *st);
/* End the reply now (shutdown, the client's EOF): `last` (NULL: none) goes
 * out first, past the flow control.  When r could be answered it is
 * logged (200) and freed: true, and the owner forgets r. */
bool svc_stream_end(svc_stream *st, struct evbuffer *last);
/* Drop the keepalive (the owner's free); the reply is left as it is. */
void svc_stream_stop(svc_stream *st);

#endif
