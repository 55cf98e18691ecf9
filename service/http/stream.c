/*
 * service/http/stream.c - replies that take time: watching the client's
 * connection while an answer is pending (see http.h).
 */
#include "http.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "server.h"

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
