/*
 * service/http/stream.c - see stream.h.
 *
 * Why one primitive: SSE, A1111's waiting calls and OpenAI's calls each
 * used to watch the client's connection with their own close callback,
 * read watch and detached-request bookkeeping, and SSE and OpenAI's
 * stream each had their own chunk pump and keepalive.  The rules are
 * subtle (evhttp frees the request with the connection, except when a
 * failed write detached it first; a write callback must not be replaced
 * by a second send; nothing is freed inside evhttp's callbacks), so they
 * are written once, here.
 */
#include "stream.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "server.h"
#include "socket.h"

#define KEEPALIVE_S 15

/* ------------------------------------------------------------ the peer */

static void peer_closed(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    svc_peer *p = arg;
    p->closed = true;
    p->evcon = NULL;
    /* a request detached by a failed write has no connection any more;
     * otherwise evhttp frees it with the connection */
    p->detached = p->r->req && evhttp_request_get_connection(p->r->req) == NULL;
    if (!p->detached)
        p->r->req = NULL;
    if (p->watch) {
        event_free(p->watch);
        p->watch = NULL;
    }
    p->gone(p->arg);
}

static void peer_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    svc_peer *p = arg;
    const int state = svc_peer_state(fd);
    if (state == SVC_PEER_QUIET)
        return;
    /* EOF: tell the owner; bytes (a pipelined request): stop watching,
     * evhttp's close still tells */
    event_del(p->watch);
    if (state == SVC_PEER_CLOSED)
        p->gone(p->arg);
}

void svc_peer_watch(svc_peer *p, svc_req *r, void (*gone)(void *arg), void *arg)
{
    p->r = r;
    p->gone = gone;
    p->arg = arg;
    p->watch = NULL;
    p->evcon = r->req ? evhttp_request_get_connection(r->req) : NULL;
    if (!p->evcon)
        return;
    evhttp_connection_set_closecb(p->evcon, peer_closed, p);
    struct bufferevent *bev = evhttp_connection_get_bufferevent(p->evcon);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd >= 0) {
        p->watch = event_new(r->srv->base, fd, EV_READ | EV_PERSIST, peer_readable, p);
        if (p->watch)
            event_add(p->watch, NULL);
    }
}

void svc_peer_stop(svc_peer *p)
{
    if (p->watch) {
        event_free(p->watch);
        p->watch = NULL;
    }
    if (p->evcon) {
        evhttp_connection_set_closecb(p->evcon, NULL, NULL);
        p->evcon = NULL;
    }
}

bool svc_peer_answerable(const svc_peer *p)
{
    return p->r && p->r->req && !p->detached;
}

void svc_peer_release(svc_peer *p, svc_req *r, bool started, int status)
{
    svc_peer_stop(p);
    p->r = NULL;
    if (!r)
        return;
    if (p->detached && r->req) {
        /* ours: a reply on a request without a connection frees it */
        if (started)
            evhttp_send_reply_end(r->req);
        else
            evhttp_send_reply(r->req, 499, "Client Closed Request", NULL);
    }
    r->req = NULL;
    svc_req_finish(r, status);
}

/* ---------------------------------------------------------- the stream */

static void send_chunk(svc_stream *st, struct evbuffer *buf);

static void send_keepalive(svc_stream *st)
{
    st->keepalive_due = false;
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        return;
    evbuffer_add(buf, ": keepalive\n\n", 13);
    send_chunk(st, buf);
    evbuffer_free(buf);
}

static void on_flushed(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    svc_stream *st = arg;
    st->inflight = false;
    svc_stream_pump(st);
    if (!st->ended && !st->inflight && st->keepalive_due)
        send_keepalive(st);
}

static void send_chunk(svc_stream *st, struct evbuffer *buf)
{
    st->peer->r->bytes_out += evbuffer_get_length(buf);
    st->inflight = true;
    evhttp_send_reply_chunk_with_cb(st->peer->r->req, buf, on_flushed, st);
}

static bool can_send(const svc_stream *st)
{
    return st->peer && !st->ended && !st->peer->closed && svc_peer_answerable(st->peer);
}

/* Every KEEPALIVE_S, whatever else the stream carries (a proxy's idle
 * timer sees bytes; a client sees the server is alive). */
static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    svc_stream *st = arg;
    if (!can_send(st))
        return;
    if (st->inflight)
        st->keepalive_due = true;
    else
        send_keepalive(st);
}

void svc_stream_begin(svc_stream *st, svc_peer *peer, bool (*next)(void *, struct evbuffer *),
                      void (*done)(void *), void *arg)
{
    st->peer = peer;
    st->next = next;
    st->done = done;
    st->arg = arg;
    svc_reply_stream_start(peer->r);
    st->keepalive = event_new(peer->r->srv->base, -1, EV_PERSIST, on_keepalive, st);
    if (st->keepalive) {
        struct timeval tv = {KEEPALIVE_S, 0};
        event_add(st->keepalive, &tv);
    }
    svc_stream_pump(st);
}

void svc_stream_pump(svc_stream *st)
{
    if (st->inflight || !can_send(st))
        return;
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        return;
    const bool more = st->next(st->arg, buf);
    if (evbuffer_get_length(buf))
        send_chunk(st, buf);
    evbuffer_free(buf);
    if (!more) {
        svc_stream_end(st, NULL);
        st->done(st->arg);
    }
}

bool svc_stream_end(svc_stream *st, struct evbuffer *last)
{
    if (st->ended)
        return false;
    st->ended = true;
    svc_stream_stop(st);
    svc_peer *p = st->peer;
    const bool live = !p->closed && svc_peer_answerable(p);
    svc_peer_stop(p);
    if (!live)
        return false;
    svc_req *r = p->r;
    p->r = NULL;
    if (last && evbuffer_get_length(last)) {
        r->bytes_out += evbuffer_get_length(last);
        evhttp_send_reply_chunk(r->req, last);
    }
    evhttp_send_reply_end(r->req);
    r->req = NULL;
    svc_req_finish(r, 200);
    return true;
}

void svc_stream_stop(svc_stream *st)
{
    if (st->keepalive) {
        event_free(st->keepalive);
        st->keepalive = NULL;
    }
}
