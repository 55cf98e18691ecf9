/*
 * service/http/listen.c - the HTTP server's life: once per process
 * (libevent's log, the descriptor limit), evhttp's set-up and limits,
 * the listening socket, and what happens when accept() fails.
 *
 * Why here and alone: these are the parts that touch the process and the
 * socket, not a request.  Every connection's bufferevent is the head
 * guard's (guard.c), every request goes to the router (router.c).  When
 * accept() fails (out of descriptors) the listener pauses instead of
 * spinning, as nginx's accept_mutex_delay does.
 */
#include "http.h"

#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "log.h"
#include "server.h"
#include "util.h"

static struct bufferevent *make_bev(struct event_base *base, void *arg)
{
    return svc_guard_bev(base, arg);
}

/* accept() failed.  libevent's listener would log a warning and try again
 * at once, and the listening socket stays readable, so running out of
 * descriptors (EMFILE) spins the loop at 100% CPU.  Instead: stop
 * accepting for ACCEPT_PAUSE_MS, then try again (nginx's
 * accept_mutex_delay idea); connections already open go on, and as they
 * close, descriptors free up.  Logged at most once a second. */
#define ACCEPT_PAUSE_MS 100

/* The error callback gets evhttp's argument (its struct evhttp), not
 * ours: the one server of the process is found here. */
static svc_server *accept_server;

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    svc_server *s = arg;
    if (s->listener)
        evconnlistener_enable(s->listener);
}

static void on_accept_error(struct evconnlistener *l, void *arg)
{
    (void)arg;
    svc_server *s = accept_server;
    if (!s)
        return;
    int e = EVUTIL_SOCKET_ERROR();
    s->accept_errors++;
    double now = svc_now_mono();
    if (now - s->accept_error_logged >= 1.0) {
        struct rlimit rl;
        long long lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long long)rl.rlim_cur : -1;
        SVC_WARN("http: accept() failed: %s (%llu times so far; descriptor limit %lld); "
                 "pausing new connections for %d ms",
                 strerror(e), (unsigned long long)s->accept_errors, lim, ACCEPT_PAUSE_MS);
        s->accept_error_logged = now;
    }
    evconnlistener_disable(l);
    struct timeval tv = {0, ACCEPT_PAUSE_MS * 1000};
    if (!s->ev_accept_resume)
        s->ev_accept_resume = evtimer_new(s->base, on_accept_resume, s);
    if (s->ev_accept_resume)
        evtimer_add(s->ev_accept_resume, &tv);
    else
        evconnlistener_enable(l); /* out of memory: better busy than deaf */
}

/* libevent's own messages, through the server's log and level (they would
 * go to stderr, whatever --log-level says). */
static void on_libevent_log(int severity, const char *msg)
{
    tsr_log_level level = severity == EVENT_LOG_DEBUG ? TSR_LOG_DEBUG
                          : severity == EVENT_LOG_MSG ? TSR_LOG_INFO
                          : severity == EVENT_LOG_WARN ? TSR_LOG_WARN
                                                       : TSR_LOG_ERROR;
    SVC_LOG_AT(level, "libevent: %s", msg);
}

void svc_http_process_init(void)
{
    event_set_log_callback(on_libevent_log);
    /* every connection is a descriptor: take the hard limit (nginx's
     * worker_rlimit_nofile); what is left past it is handled above */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            SVC_WARN("cannot raise the descriptor limit to %llu: %s", (unsigned long long)want,
                     strerror(errno));
    }
}

int svc_http_start(svc_server *s)
{
    s->http = evhttp_new(s->base);
    if (!s->http) {
        SVC_ERROR("cannot create the HTTP server");
        return -1;
    }
    /* backstops above the guard's limits (http/guard.c) */
    evhttp_set_max_headers_size(s->http, 64 * 1024);
    evhttp_set_max_body_size(s->http, s->cfg.max_body);
    /* no progress for 50 s (libevent's default): the connection closes; a
     * head trickling in counts as none until it is whole (the guard holds
     * it), so a slowloris client is cut after 50 s.  Streams send a
     * keepalive every 15 s, so only a reader that stopped reading hits it */
    evhttp_set_timeout(s->http, 50);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_default_content_type(s->http, "application/json");
    evhttp_set_bevcb(s->http, make_bev, s);
    evhttp_set_gencb(s->http, svc_http_on_request, s);
    struct evhttp_bound_socket *h =
        evhttp_bind_socket_with_handle(s->http, s->cfg.host, (ev_uint16_t)s->cfg.port);
    if (!h) {
        SVC_ERROR("cannot listen on %s:%d (address in use, or not an address of this machine)",
                  s->cfg.host, s->cfg.port);
        return -1;
    }
    s->listener = evhttp_bound_socket_get_listener(h);
    if (s->listener) {
        accept_server = s;
        evconnlistener_set_error_cb(s->listener, on_accept_error);
    }
    /* the port actually bound (port 0: the kernel's choice) */
    evutil_socket_t fd = evhttp_bound_socket_get_fd(h);
    struct sockaddr_storage ss;
    ev_socklen_t len = sizeof ss;
    s->port = s->cfg.port;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET)
            s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return 0;
}

void svc_http_stop(svc_server *s)
{
    if (s->ev_accept_resume) {
        event_free(s->ev_accept_resume);
        s->ev_accept_resume = NULL;
    }
    s->listener = NULL; /* evhttp's */
    if (accept_server == s)
        accept_server = NULL;
    if (s->http) {
        evhttp_free(s->http);
        s->http = NULL;
    }
}
