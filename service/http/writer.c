/*
 * service/http/writer.c - see writer.h.
 *
 * evhttp writes into the filter's output buffer; this file moves those
 * bytes to the socket itself, from an event of its own (`kick`, activated
 * whenever evhttp adds output), and then tells evhttp the buffer has
 * drained with a deferred write callback.  Why not let the filter hand its
 * output to the socket bufferevent:
 * - libevent 2.1's filter moves output only when data is added while
 *   writing is enabled; evhttp adds a reply first and enables writing
 *   after, so replies (its own error pages included) would wait;
 * - the filter reports "drained" as soon as the bytes reach the socket
 *   bufferevent, not the kernel, and evhttp then frees a Connection: close
 *   connection with its last reply unsent;
 * - when the filter writes while evhttp is still inside
 *   evhttp_send_reply_chunk_with_cb, the write callback fires before evhttp
 *   has installed it, and an SSE stream waiting for it stalls.
 * Here the callback fires only once every byte is in the kernel, always
 * from the loop, never inside an evhttp call.
 */
#include "writer.h"

#include <errno.h>
#include <stdbool.h>

#include <event2/buffer.h>
#include <event2/event.h>

static bool alive(svc_writer *w)
{
    /* evhttp frees a connection with bufferevent_free, which clears the
     * callbacks at once but finalizes (and frees the guard) later; touching
     * the bufferevent in between would finalize it twice */
    bufferevent_event_cb eventcb = NULL;
    bufferevent_getcb(w->bev, NULL, NULL, &eventcb, NULL);
    return eventcb != NULL;
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    svc_writer *w = arg;
    if (!alive(w)) {
        if (w->writable)
            event_del(w->writable);
        return;
    }
    struct evbuffer *out = bufferevent_get_output(w->bev);
    evutil_socket_t sock = bufferevent_getfd(w->bev);
    if (sock < 0 || evbuffer_get_length(out) == 0)
        return;
    while (evbuffer_get_length(out) > 0) {
        int n = evbuffer_write(out, sock);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (!w->writable)
                w->writable = event_new(bufferevent_get_base(w->bev), sock, EV_WRITE, on_kick, w);
            if (w->writable)
                event_add(w->writable, NULL);
            return;
        }
        /* the peer is gone: give the bytes to the socket bufferevent, whose
         * own write fails and reports it to evhttp */
        struct bufferevent *u = bufferevent_get_underlying(w->bev);
        if (u)
            evbuffer_add_buffer(bufferevent_get_output(u), out);
        else
            evbuffer_drain(out, evbuffer_get_length(out));
        return;
    }
    w->written(w->arg);
    bufferevent_trigger(w->bev, EV_WRITE, BEV_TRIG_DEFER_CALLBACKS);
}

static void on_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void)buf;
    svc_writer *w = arg;
    if (info->n_added)
        event_active(w->kick, 0, 0);
}

enum bufferevent_filter_result svc_writer_filter(struct evbuffer *src, struct evbuffer *dst,
                                                 ev_ssize_t limit,
                                                 enum bufferevent_flush_mode mode, void *ctx)
{
    (void)src;
    (void)dst;
    (void)limit;
    (void)mode;
    (void)ctx;
    return BEV_NEED_MORE;
}

int svc_writer_init(svc_writer *w, struct bufferevent *f, void (*written)(void *), void *arg)
{
    w->bev = f;
    w->written = written;
    w->arg = arg;
    w->kick = event_new(bufferevent_get_base(f), -1, 0, on_kick, w);
    if (!w->kick || !evbuffer_add_cb(bufferevent_get_output(f), on_output, w))
        return -1;
    return 0;
}

void svc_writer_free(svc_writer *w)
{
    if (w->kick)
        event_free(w->kick);
    if (w->writable)
        event_free(w->writable);
    w->kick = w->writable = NULL;
}
