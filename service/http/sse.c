/*
 * service/http/sse.c - see sse.h.
 *
 * Flow control: a client has at most one chunk in flight.  pump() packs the
 * events after its cursor (up to CHUNK_BUDGET bytes) into one chunk and
 * sends it with evhttp_send_reply_chunk_with_cb; the callback runs when the
 * connection's output has drained, and pumps again.  Every chunk, the
 * keepalives included, goes through that one call, because evhttp keeps a
 * single write callback per connection and any other send would drop ours.
 *
 * Ends: when the job's (batch's) history ends with a final event and the
 * client has it, the reply is ended (the connection stays usable).  When
 * the client goes away, evhttp's close callback or the read watch marks it
 * gone; it is freed by the reaper event on the next loop iteration (never
 * inside evhttp's callback: redis' freeClientAsync).
 */
#include "sse.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "http.h"
#include "log.h"
#include "server.h"
#include "util.h"

#define CHUNK_BUDGET (64 * 1024)
#define KEEPALIVE_S 15

typedef struct svc_sse_client {
    svc_server *srv;
    svc_req *r;                 /* owned until the stream ends */
    svc_job *job;               /* one of job / batch */
    svc_batch *batch;
    uint32_t cursor;            /* events sent */
    bool inflight;              /* a chunk waits for its flush callback */
    bool ended;                 /* reply ended (or connection gone) */
    bool gone;                  /* the connection closed under us */
    bool req_detached;          /* evhttp let go of the request: we free it */
    struct event *watch;        /* EOF detection on the socket */
    struct event *keepalive;    /* every KEEPALIVE_S from the stream's start */
    bool keepalive_due;         /* fired while a chunk was in flight */
    struct evhttp_connection *evcon;
    struct svc_sse_client *sprev, *snext; /* the job's / batch's clients */
    struct svc_sse_client *gprev, *gnext; /* every client */
    struct svc_sse_client *dead_next;
} svc_sse_client;

struct svc_sse {
    svc_server *srv;
    svc_sse_client *all;
    int count;
    svc_sse_client *dead;       /* waiting for the reaper */
    struct event *reaper;
};

static void pump(svc_sse_client *c);

static svc_sse_client **stream_head(svc_sse_client *c)
{
    return c->job ? &c->job->clients : &c->batch->clients;
}

static void unlink_client(svc_sse_client *c)
{
    svc_sse *x = c->srv->sse;
    svc_sse_client **head = stream_head(c);
    if (c->sprev)
        c->sprev->snext = c->snext;
    else if (*head == c)
        *head = c->snext;
    if (c->snext)
        c->snext->sprev = c->sprev;
    c->sprev = c->snext = NULL;
    if (c->gprev)
        c->gprev->gnext = c->gnext;
    else if (x->all == c)
        x->all = c->gnext;
    if (c->gnext)
        c->gnext->gprev = c->gprev;
    c->gprev = c->gnext = NULL;
    x->count--;
}

/* Schedule the free (safe point: the reaper event). */
static void retire(svc_sse_client *c)
{
    if (c->watch) {
        event_free(c->watch);
        c->watch = NULL;
    }
    if (c->keepalive) {
        event_free(c->keepalive);
        c->keepalive = NULL;
    }
    unlink_client(c);
    svc_sse *x = c->srv->sse;
    c->dead_next = x->dead;
    x->dead = c;
    event_active(x->reaper, 0, 0);
}

static void reap(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    svc_sse *x = arg;
    svc_sse_client *c = x->dead;
    x->dead = NULL;
    while (c) {
        svc_sse_client *next = c->dead_next;
        if (c->req_detached && c->r && c->r->req) {
            /* evhttp detached the request when the connection failed: the
             * request is ours to free, which reply_end does when it has no
             * connection */
            evhttp_send_reply_end(c->r->req);
        }
        if (c->r) {
            c->r->req = NULL;
            svc_req_finish(c->r, 200);
        }
        free(c);
        c = next;
    }
}

/* End the reply normally (history complete, or shutdown). */
static void end_stream(svc_sse_client *c)
{
    if (c->ended)
        return;
    c->ended = true;
    if (c->evcon)
        evhttp_connection_set_closecb(c->evcon, NULL, NULL);
    if (!c->gone)
        evhttp_send_reply_end(c->r->req);
    c->r->req = NULL; /* evhttp's again */
    retire(c);
}

static void on_close(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    svc_sse_client *c = arg;
    if (c->ended)
        return;
    c->gone = true;
    c->ended = true;
    /* a request detached by a failed write has no connection any more;
     * otherwise evhttp frees it with the connection */
    c->req_detached = evhttp_request_get_connection(c->r->req) == NULL;
    if (!c->req_detached)
        c->r->req = NULL;
    retire(c);
}

static void send_keepalive(svc_sse_client *c);

static void on_flushed(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    svc_sse_client *c = arg;
    c->inflight = false;
    if (!c->ended)
        pump(c);
    if (!c->ended && !c->inflight && c->keepalive_due)
        send_keepalive(c);
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    svc_sse_client *c = arg;
    const int peer = svc_peer_state(fd);
    if (peer == SVC_PEER_CLOSED) {
        /* the client closed: end here, evhttp sees the EOF and frees */
        end_stream(c);
        return;
    }
    /* the client sent bytes (a pipelined request?): stop watching, failed
     * writes still tell us when it goes */
    if (peer == SVC_PEER_SENT && c->watch)
        event_del(c->watch);
}

static uint32_t history_len(const svc_sse_client *c)
{
    return c->job ? c->job->hist.n : c->batch->hist.n;
}

static bool over(const svc_sse_client *c)
{
    return c->job ? svc_job_stream_over(c->job) : svc_batch_stream_over(c->batch);
}

static void send_chunk(svc_sse_client *c, struct evbuffer *buf)
{
    c->r->bytes_out += evbuffer_get_length(buf);
    c->inflight = true;
    evhttp_send_reply_chunk_with_cb(c->r->req, buf, on_flushed, c);
}

static void pump(svc_sse_client *c)
{
    if (c->ended || c->inflight)
        return;
    uint32_t n = history_len(c);
    if (c->cursor < n) {
        struct evbuffer *buf = evbuffer_new();
        if (!buf)
            return;
        while (c->cursor < n && evbuffer_get_length(buf) < CHUNK_BUDGET) {
            if (c->job)
                svc_job_event_sse(c->job, c->cursor, buf);
            else
                svc_batch_event_sse(c->batch, c->cursor, buf);
            c->cursor++;
        }
        send_chunk(c, buf);
        evbuffer_free(buf);
    }
    if (c->cursor >= n && over(c))
        end_stream(c);
}

static void send_keepalive(svc_sse_client *c)
{
    c->keepalive_due = false;
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        return;
    evbuffer_add(buf, ": keepalive\n\n", 13);
    send_chunk(c, buf);
    evbuffer_free(buf);
}

/* Every KEEPALIVE_S of a stream, whatever else it carries (a proxy's idle
 * timer sees bytes; a client sees the server is alive).  Sent after the
 * chunk in flight, if any. */
static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    svc_sse_client *c = arg;
    if (c->ended)
        return;
    if (c->inflight)
        c->keepalive_due = true;
    else
        send_keepalive(c);
}

svc_sse *svc_sse_new(svc_server *s)
{
    svc_sse *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->srv = s;
    x->reaper = event_new(s->base, -1, 0, reap, x);
    if (!x->reaper) {
        svc_sse_free(x);
        return NULL;
    }
    return x;
}

void svc_sse_free(svc_sse *x)
{
    if (!x)
        return;
    if (x->reaper)
        reap(-1, 0, x);
    if (x->reaper)
        event_free(x->reaper);
    free(x);
}

static void open_stream(svc_server *s, svc_req *r, svc_job *j, svc_batch *b, uint32_t last_id)
{
    svc_sse_client *c = calloc(1, sizeof *c);
    if (!c) {
        svc_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    c->srv = s;
    c->r = r;
    c->job = j;
    c->batch = b;
    uint32_t n = j ? j->hist.n : b->hist.n;
    /* --queue: a client resuming here after reading on another api node
     * may be ahead of this node by a few events (that node's follower read
     * them first): it waits for them rather than get its events again.
     * Event ids are the same on every api node (docs/scale-out.md). */
    const bool behind = s->cluster && !(j ? svc_job_stream_over(j) : svc_batch_stream_over(b));
    c->cursor = last_id < n || behind ? last_id : n;
    svc_reply_stream_start(r);
    c->evcon = svc_req_watch_peer(r, on_close, on_readable, c, &c->watch);
    c->keepalive = event_new(s->base, -1, EV_PERSIST, on_keepalive, c);
    if (c->keepalive) {
        struct timeval tv = {KEEPALIVE_S, 0};
        event_add(c->keepalive, &tv);
    }
    svc_sse_client **head = j ? &j->clients : &b->clients;
    c->snext = *head;
    if (*head)
        (*head)->sprev = c;
    *head = c;
    svc_sse *x = s->sse;
    c->gnext = x->all;
    if (x->all)
        x->all->gprev = c;
    x->all = c;
    x->count++;
    pump(c);
}

void svc_sse_open_job(svc_server *s, svc_req *r, svc_job *j, uint32_t last_id)
{
    open_stream(s, r, j, NULL, last_id);
}

void svc_sse_open_batch(svc_server *s, svc_req *r, svc_batch *b, uint32_t last_id)
{
    open_stream(s, r, NULL, b, last_id);
}

void svc_sse_job_notify(svc_server *s, svc_job *j)
{
    (void)s;
    for (svc_sse_client *c = j->clients, *next; c; c = next) {
        next = c->snext;
        pump(c);
    }
}

void svc_sse_batch_notify(svc_server *s, svc_batch *b)
{
    (void)s;
    for (svc_sse_client *c = b->clients, *next; c; c = next) {
        next = c->snext;
        pump(c);
    }
}

int svc_sse_count(const svc_sse *x)
{
    return x ? x->count : 0;
}

void svc_sse_close_all(svc_server *s)
{
    svc_sse *x = s->sse;
    if (!x)
        return;
    while (x->all)
        end_stream(x->all);
    reap(-1, 0, x);
}
