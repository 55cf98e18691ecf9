/*
 * service/http/sse.c - see sse.h.
 *
 * A client is a producer for the long-reply primitive (stream.h): next()
 * packs the events after its cursor (up to CHUNK_BUDGET bytes) into the
 * chunk the stream asks for, and says the reply is complete once the
 * job's (batch's) history ends with a final event the client has; the
 * stream then ends the reply (the connection stays usable).  Flow
 * control, keepalives and the peer watch are the stream's.
 *
 * When the client goes away the client is retired: unlinked at once, freed
 * by the reaper event on the next loop iteration (never inside evhttp's
 * callback: redis' freeClientAsync).
 */
#include "sse.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "http.h"
#include "server.h"
#include "stream.h"

#define CHUNK_BUDGET (64 * 1024)

typedef struct svc_sse_client {
    svc_server *srv;
    svc_peer peer;              /* the request (owned until the stream ends) and its client */
    svc_stream stream;
    svc_job *job;               /* one of job / batch */
    svc_batch *batch;
    uint32_t cursor;            /* events sent */
    bool retired;               /* unlinked, waiting for the reaper */
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
    if (c->retired)
        return;
    c->retired = true;
    svc_stream_stop(&c->stream);
    svc_peer_stop(&c->peer);
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
        svc_peer_release(&c->peer, c->peer.r, true, 200);
        free(c);
        c = next;
    }
}

/* The stream asks for its next chunk. */
static bool next_chunk(void *arg, struct evbuffer *out)
{
    svc_sse_client *c = arg;
    const uint32_t n = c->job ? c->job->hist.n : c->batch->hist.n;
    while (c->cursor < n && evbuffer_get_length(out) < CHUNK_BUDGET) {
        if (c->job)
            svc_job_event_sse(c->srv, c->job, c->cursor, out);
        else
            svc_batch_event_sse(c->srv, c->batch, c->cursor, out);
        c->cursor++;
    }
    return !(c->cursor >= n && (c->job ? svc_job_stream_over(c->job)
                                       : svc_batch_stream_over(c->batch)));
}

static void on_done(void *arg)
{
    retire(arg);
}

/* The client went away: at EOF the reply ends here (evhttp then sees the
 * EOF and frees); after evhttp's close nothing more can be sent. */
static void on_gone(void *arg)
{
    svc_sse_client *c = arg;
    if (!c->peer.closed)
        svc_stream_end(&c->stream, NULL);
    retire(c);
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
    c->job = j;
    c->batch = b;
    uint32_t n = j ? j->hist.n : b->hist.n;
    /* --queue: a client resuming here after reading on another api node
     * may be ahead of this node by a few events (that node's follower read
     * them first): it waits for them rather than get its events again.
     * Event ids are the same on every api node (docs/scale-out.md). */
    const bool behind = s->cluster && !(j ? svc_job_stream_over(j) : svc_batch_stream_over(b));
    c->cursor = last_id < n || behind ? last_id : n;
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
    svc_peer_watch(&c->peer, r, on_gone, c);
    svc_stream_begin(&c->stream, &c->peer, next_chunk, on_done, c);
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
        svc_stream_pump(&c->stream);
    }
}

void svc_sse_batch_notify(svc_server *s, svc_batch *b)
{
    (void)s;
    for (svc_sse_client *c = b->clients, *next; c; c = next) {
        next = c->snext;
        svc_stream_pump(&c->stream);
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
    while (x->all) {
        svc_stream_end(&x->all->stream, NULL);
        retire(x->all);
    }
    reap(-1, 0, x);
}
