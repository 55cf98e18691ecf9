/*
 * service/http/guard.c - the request head guard: 413, 414 and 431 answered
 * with the contract's JSON, before evhttp buffers anything oversized.
 *
 * Why: evhttp enforces its own limits (max_headers_size, max_body_size)
 * but answers them itself, with an HTML page and the wrong status for two
 * of them (a long request line or oversized headers both become 400, a
 * body over the limit a bare 413), and offers no hook between reading a
 * request's head and reading its body.  So every connection's socket
 * bufferevent is wrapped (evhttp_set_bevcb) in a filter bufferevent whose
 * input filter follows HTTP/1.1 framing - request head, Content-Length or
 * chunked body, trailers - the way evhttp reads it, and checks the limits
 * as bytes arrive:
 *   request line > 8 KiB               -> 414 uri_too_long
 *   header lines > 16 KiB in all       -> 431 headers_too_large
 *   Content-Length (or chunked total) > --max-body -> 413 payload_too_large
 *   all bodies held at once > --max-bodies -> 503 (Retry-After)
 *   no or two Host, CL with TE, TE in 1.0, NUL / bare CR / bare LF -> 400
 * A request within limits passes through untouched, except that its body
 * is gathered here whole and the request handed on in one piece (a
 * chunked body as one Content-Length body).  Why gather: evhttp 2.1 reads
 * a Content-Length body only once all of it sits in its input buffer, and
 * that buffer stops filling at the input watermark (GUARD_IN_HIGH), so a
 * body over the watermark would wait forever; and a body counted here can
 * be capped across connections (--max-bodies, srv->body_bytes) from its
 * head on, the way nginx's client_body_buffer_size bounds it.  The bytes a
 * connection holds are given back once an answer has been written (evhttp
 * frees a request with its reply) or the connection ends.  Body bytes
 * taken count as progress for evhttp's timeout; `Expect: 100-continue`
 * is answered here (evhttp would only once the body is in).
 * A request over a limit is replaced by a one-line request for
 * /.tessera-guard/<secret>/<status>/<reason>, which the router answers
 * with the JSON error (svc_guard_answer); from then on the connection's
 * input is read and dropped, so a client still sending its body is not
 * reset before it reads the answer (a 400 also closes it: the framing is
 * not trusted).  The secret is random per process, so no client can reach
 * that path, or forge the method header below, itself.
 *
 * A method evhttp cannot route (one it does not know: it would answer 501
 * in HTML; CONNECT: it would read the target as an authority) is sent on
 * as PATCH with "<secret> METHOD" in SVC_METHOD_HEADER, so the router
 * answers 405 with the path's Allow (or 404), like for any other method.
 *
 * What is not HTTP/1.x (a request line that is not METHOD SP target SP
 * HTTP/1.0|1.1, a header line without a name and colon, a bad or doubled
 * Content-Length, a transfer coding other than chunked, bad chunk framing)
 * closes the connection without an answer: evhttp's own would be an HTML
 * page outside the contract, and it would close anyway.
 *
 * Output goes from the filter's buffer straight to the socket (writer.c),
 * so evhttp's write callback, which SSE uses for flow control and evhttp
 * for closing, fires only when the kernel has every byte.
 *
 * evhttp's own limits stay set as a backstop: headers 64 KiB (above the
 * guard's), body --max-body.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "http.h"
#include "log.h"
#include "server.h"
#include "writer.h"

#define GUARD_LINE_MAX 8192           /* request line */
#define GUARD_HEADERS_MAX 16384       /* header lines, CRLFs included */
#define GUARD_CHUNK_LINE_MAX 1024     /* chunk-size lines and trailers */
#define GUARD_IN_HIGH (256 * 1024)    /* input high-water marks (> a whole head) */
#define GUARD_PREFIX "/.tessera-guard/"

typedef enum gstate {
    G_HEAD,       /* reading a request head */
    G_BODY,       /* Content-Length body: body_left bytes */
    G_CHUNK_SIZE, /* chunked: a chunk-size line */
    G_CHUNK_DATA, /* chunked: body_left bytes of chunk data */
    G_CHUNK_END,  /* chunked: the CRLF after the data */
    G_TRAILER,    /* chunked: trailer lines until an empty one */
    G_REJECTED,   /* answered or dropped: ignore everything */
    G_RAW,        /* upgraded to a websocket (svc_guard_upgrade): bytes pass as they are */
} gstate;

typedef struct guard {
    svc_server *srv;
    struct bufferevent *bev; /* the filter (the connection's bufferevent) */
    svc_writer out;          /* the output side (writer.c) */
    gstate state;
    size_t line_start;       /* G_HEAD: where the current line starts in src */
    bool first_line;
    bool no_body;            /* HEAD / TRACE */
    size_t header_bytes;
    long long content_length; /* -1: none */
    bool chunked, seen_cl, seen_te;
    bool http10;              /* HTTP/1.0 request line */
    bool expect_continue;     /* Expect: 100-continue */
    int hosts;                /* Host header lines */
    int bad;                  /* a GUARD_BAD_* found in the head (answered 400 at its end) */
    /* a method evhttp does not route (it would answer 501, or take CONNECT's
     * target for an authority): sent on as PATCH + SVC_METHOD_HEADER */
    char method[16];
    size_t method_len;
    bool foreign;
    unsigned long long body_left, body_total;
    /* a request with a body, gathered whole before evhttp sees any of it:
     * head (a chunked one as it came, see rewrite; a Content-Length one as
     * passed on) and body */
    struct evbuffer *head, *body;
    /* body bytes this connection counts in srv->body_bytes (--max-bodies):
     * held = reserved for the body being gathered here; passed = bodies
     * handed to evhttp, which keeps each until its request is answered */
    unsigned long long held, passed;
    struct guard *prev, *next; /* every guard, for svc_guard_upgrade */
} guard;

static guard *all_guards; /* the loop's */

static void reset_head(guard *g)
{
    g->state = G_HEAD;
    g->line_start = 0;
    g->first_line = true;
    g->no_body = false;
    g->header_bytes = 0;
    g->content_length = -1;
    g->chunked = g->seen_cl = g->seen_te = false;
    g->http10 = g->expect_continue = false;
    g->hosts = 0;
    g->bad = 0;
    g->foreign = false;
    g->method_len = 0;
    g->body_total = 0;
    if (g->head)
        evbuffer_drain(g->head, evbuffer_get_length(g->head));
    if (g->body)
        evbuffer_drain(g->body, evbuffer_get_length(g->body));
}

/* Why a head was refused with 400 (the marker's reason, svc_guard_answer). */
enum {
    GUARD_BAD_NO_HOST = 1,  /* HTTP/1.1 without Host */
    GUARD_BAD_TWO_HOSTS,    /* Host twice */
    GUARD_BAD_CL_TE,        /* Content-Length and Transfer-Encoding together */
    GUARD_BAD_TE_10,        /* Transfer-Encoding in an HTTP/1.0 request */
    GUARD_BAD_BYTES,        /* a NUL, a bare CR or a bare LF in the head */
    GUARD_BAD_COUNT
};

/* Body bytes in flight (--max-bodies): reserve n for this connection, or
 * false when every body held at once would pass the limit. */
static bool charge(guard *g, unsigned long long n)
{
    svc_server *s = g->srv;
    if (s->body_bytes + n > (unsigned long long)s->cfg.max_bodies)
        return false;
    s->body_bytes += n;
    g->held += n;
    return true;
}

static void release_held(guard *g)
{
    g->srv->body_bytes -= g->held;
    g->held = 0;
}

static void release_passed(guard *g)
{
    g->srv->body_bytes -= g->passed;
    g->passed = 0;
}

/* Replace the request with the marker request and drop the rest.  A 400
 * (framing that cannot be trusted) also closes the connection once
 * answered: where the next request would start is unknown. */
static void reject(guard *g, struct evbuffer *src, struct evbuffer *dst, int status, int why)
{
    SVC_DEBUG("http guard: rejecting a request with %d", status);
    evbuffer_drain(src, evbuffer_get_length(src));
    release_held(g);
    evbuffer_add_printf(dst, "GET " GUARD_PREFIX "%s/%d/%d HTTP/1.1\r\nHost: guard\r\n%s\r\n",
                        g->srv->guard_secret, status, why,
                        status == 400 ? "Connection: close\r\n" : "");
    g->state = G_REJECTED;
}

/* Not HTTP/1.x: close the connection without an answer (evhttp's would be
 * an HTML page outside the contract). */
static void drop(guard *g, struct evbuffer *src, const char *why)
{
    SVC_DEBUG("http guard: closing a connection: %s", why);
    evbuffer_drain(src, evbuffer_get_length(src));
    g->state = G_REJECTED;
    evutil_socket_t fd = bufferevent_getfd(g->bev);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR); /* evhttp reads EOF and frees the connection */
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    size_t k = strspn(s, " \t");
    memmove(s, s + k, n - k + 1);
}

/* Copy line [start, start+len) of src into buf (NUL-terminated, cut to size). */
static size_t copy_line(struct evbuffer *src, size_t start, size_t len, char *buf, size_t size)
{
    size_t n = len < size - 1 ? len : size - 1;
    struct evbuffer_ptr p;
    evbuffer_ptr_set(src, &p, start, EVBUFFER_PTR_SET);
    if (evbuffer_copyout_from(src, &p, buf, n) < 0)
        n = 0;
    buf[n] = '\0';
    return n;
}

/* "METHOD SP target SP HTTP/1.x"; notes whether the method has no body. */
static bool request_line(guard *g, struct evbuffer *src, size_t start, size_t len)
{
    char line[GUARD_LINE_MAX + 1];
    copy_line(src, start, len, line, sizeof line);
    char *sp1 = strchr(line, ' ');
    char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || sp1 == line || sp2 == sp1 + 1 || strchr(sp2 + 1, ' '))
        return false;
    for (char *c = line; c < sp1; c++)
        if (*c < 'A' || *c > 'Z')
            return false;
    if (strcmp(sp2 + 1, "HTTP/1.1") != 0 && strcmp(sp2 + 1, "HTTP/1.0") != 0)
        return false;
    g->http10 = strcmp(sp2 + 1, "HTTP/1.0") == 0;
    *sp1 = '\0';
    g->no_body = strcmp(line, "HEAD") == 0 || strcmp(line, "TRACE") == 0;
    static const char *const known[] = {"GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS",
                                        "TRACE", "PATCH"};
    g->foreign = true;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(line, known[i]) == 0)
            g->foreign = false;
    g->method_len = (size_t)(sp1 - line);
    snprintf(g->method, sizeof g->method, "%s", g->method_len < sizeof g->method ? line : "OTHER");
    return true;
}

/* Move a request head (its first head_len bytes of src) to dst; a foreign
 * method becomes PATCH with the real one in SVC_METHOD_HEADER. */
static void pass_head(guard *g, struct evbuffer *src, struct evbuffer *dst, size_t head_len)
{
    if (!g->foreign) {
        evbuffer_remove_buffer(src, dst, head_len);
        return;
    }
    size_t eol = 0;
    struct evbuffer_ptr e = evbuffer_search_eol(src, NULL, &eol, EVBUFFER_EOL_CRLF);
    size_t line_total = e.pos < 0 ? head_len : (size_t)e.pos + eol;
    evbuffer_drain(src, g->method_len);
    evbuffer_add(dst, "PATCH", 5);
    evbuffer_remove_buffer(src, dst, line_total - g->method_len);
    evbuffer_add_printf(dst, SVC_METHOD_HEADER ": %s %s\r\n", g->srv->guard_secret, g->method);
    evbuffer_remove_buffer(src, dst, head_len - line_total);
}

/* A header line; notes the framing headers (the first of each counts, as
 * with evhttp_find_header), Host and Expect.  0: a header line; -1: not
 * one (the connection is dropped); > 0: a GUARD_BAD_* (answered 400). */
static int header_line(guard *g, struct evbuffer *src, size_t start, size_t len)
{
    char line[160];
    size_t n = copy_line(src, start, len, line, sizeof line);
    if (line[0] == ' ' || line[0] == '\t')
        return g->header_bytes > 0 ? 0 : -1; /* a folded continuation of the previous one */
    char *colon = memchr(line, ':', n);
    if (!colon) {
        /* the name may be long: look for the colon past the copy */
        struct evbuffer_ptr p;
        evbuffer_ptr_set(src, &p, start, EVBUFFER_PTR_SET);
        struct evbuffer_ptr c = evbuffer_search_range(src, ":", 1, &p, NULL);
        if (c.pos < 0 || (size_t)c.pos >= start + len || c.pos == (ev_ssize_t)start)
            return -1;
        return 0;
    }
    if (colon == line)
        return -1;
    for (char *c = line; c < colon; c++)
        if (*c == ' ' || *c == '\t')
            return -1;
    *colon = '\0';
    char *value = colon + 1;
    if (strcasecmp(line, "Content-Length") == 0) {
        if (len >= sizeof line - 1)
            return -1; /* longer than any valid length */
        trim(value);
        char *end = NULL;
        long long v = value[0] >= '0' && value[0] <= '9' ? strtoll(value, &end, 10) : -1;
        if (v < 0 || !end || *end)
            return -1;
        if (g->seen_cl && v != g->content_length)
            return -1; /* two different lengths: a smuggling attempt */
        g->seen_cl = true;
        g->content_length = v;
        if (g->seen_te)
            return GUARD_BAD_CL_TE;
    } else if (strcasecmp(line, "Transfer-Encoding") == 0) {
        if (g->seen_te)
            return -1;
        g->seen_te = true;
        if (g->http10)
            return GUARD_BAD_TE_10; /* RFC 9112 6.1: the framing is faulty */
        if (g->seen_cl)
            return GUARD_BAD_CL_TE; /* a smuggling shape: refuse, do not guess */
        trim(value);
        if (strcasecmp(value, "chunked") != 0)
            return -1; /* no other coding is supported */
        g->chunked = true;
    } else if (strcasecmp(line, "Host") == 0) {
        if (++g->hosts > 1)
            return GUARD_BAD_TWO_HOSTS;
    } else if (strcasecmp(line, "Expect") == 0) {
        trim(value);
        g->expect_continue = strcasecmp(value, "100-continue") == 0;
    }
    return 0;
}

/* Whether bytes [start, start+len) of src hold a NUL or a CR (a line's own
 * CRLF is outside the range). */
static bool bad_bytes(struct evbuffer *src, size_t start, size_t len)
{
    struct evbuffer_ptr p, end;
    evbuffer_ptr_set(src, &p, start, EVBUFFER_PTR_SET);
    evbuffer_ptr_set(src, &end, start + len, EVBUFFER_PTR_SET);
    return evbuffer_search_range(src, "\0", 1, &p, &end).pos >= 0 ||
           evbuffer_search_range(src, "\r", 1, &p, &end).pos >= 0;
}

/* An accepted head with a body and Expect: 100-continue: tell the client
 * to send it (evhttp would only once the body is here, see filter_in).
 * Straight to the socket, and only when no reply is still on its way. */
static void send_continue(guard *g)
{
    if (g->http10 || !g->expect_continue ||
        evbuffer_get_length(bufferevent_get_output(g->bev)) > 0)
        return;
    evutil_socket_t fd = bufferevent_getfd(g->bev);
    static const char msg[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (fd >= 0 && send(fd, msg, sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        SVC_DEBUG("http guard: cannot send 100 Continue: %s", strerror(errno));
}

/* Move n bytes of src to dst. */
static void pass(struct evbuffer *src, struct evbuffer *dst, size_t n)
{
    evbuffer_remove_buffer(src, dst, n);
}

/* One line at the front of src: its length without the EOL, and with it. */
static bool front_line(struct evbuffer *src, size_t *len, size_t *total)
{
    size_t eol = 0;
    struct evbuffer_ptr e = evbuffer_search_eol(src, NULL, &eol, EVBUFFER_EOL_CRLF);
    if (e.pos < 0)
        return false;
    *len = (size_t)e.pos;
    *total = (size_t)e.pos + eol;
    return true;
}

/* A chunked request, complete: hand evhttp the same request with its body
 * as one Content-Length body (so its size was checked before evhttp saw
 * any of it, and a refusal is the contract's 413). */
static void rewrite(guard *g, struct evbuffer *dst)
{
    bool first = true;
    char *line;
    size_t n;
    while ((line = evbuffer_readln(g->head, &n, EVBUFFER_EOL_CRLF)) != NULL) {
        if (n == 0) {
            free(line);
            break;
        }
        const char *colon = first ? NULL : strchr(line, ':');
        size_t name = colon ? (size_t)(colon - line) : 0;
        bool framing = colon && ((name == 17 && strncasecmp(line, "Transfer-Encoding", 17) == 0) ||
                                 (name == 14 && strncasecmp(line, "Content-Length", 14) == 0));
        if (first && g->foreign) {
            evbuffer_add(dst, "PATCH", 5);
            evbuffer_add(dst, line + g->method_len, n - g->method_len);
            evbuffer_add_printf(dst, "\r\n" SVC_METHOD_HEADER ": %s %s\r\n",
                                g->srv->guard_secret, g->method);
        } else if (!framing) {
            evbuffer_add(dst, line, n);
            evbuffer_add(dst, "\r\n", 2);
        }
        first = false;
        free(line);
    }
    evbuffer_add_printf(dst, "Content-Length: %zu\r\n\r\n", evbuffer_get_length(g->body));
    evbuffer_add_buffer(dst, g->body);
}

/* The end of an accepted head (head bytes at the front of src): pass it
 * on, or start gathering its body.  False when it was refused. */
static bool end_of_head(guard *g, struct evbuffer *src, struct evbuffer *dst, size_t head)
{
    const unsigned long long max_body = (unsigned long long)g->srv->cfg.max_body;
    if (g->hosts == 0 && !g->http10) {
        reject(g, src, dst, 400, GUARD_BAD_NO_HOST);
        return false;
    }
    if (g->no_body || (!g->chunked && g->content_length <= 0)) {
        pass_head(g, src, dst, head);
        reset_head(g);
        return true;
    }
    if (!g->chunked && (unsigned long long)g->content_length > max_body) {
        reject(g, src, dst, 413, 0);
        return false;
    }
    if (!g->chunked && !charge(g, (unsigned long long)g->content_length)) {
        reject(g, src, dst, 503, 0);
        return false;
    }
    if ((!g->head && !(g->head = evbuffer_new())) || (!g->body && !(g->body = evbuffer_new()))) {
        drop(g, src, "out of memory");
        return false;
    }
    if (g->chunked) {
        evbuffer_remove_buffer(src, g->head, head); /* rewritten at its end */
        g->state = G_CHUNK_SIZE;
    } else {
        pass_head(g, src, g->head, head);
        g->state = G_BODY;
        g->body_left = (unsigned long long)g->content_length;
    }
    send_continue(g);
    return true;
}

/* A gathered request is whole: hand it to evhttp in one piece; its body's
 * charge now lasts until its answer is written (on_written). */
static void hand_over(guard *g, struct evbuffer *dst)
{
    if (g->chunked) {
        rewrite(g, dst);
    } else {
        evbuffer_add_buffer(dst, g->head);
        evbuffer_add_buffer(dst, g->body);
    }
    g->passed += g->held;
    g->held = 0;
    reset_head(g);
}

/* The input filter: requests pass from the socket (src) to evhttp (dst).
 * BEV_OK whenever bytes were taken, even into the guard's own buffers, so
 * that an upload in progress counts as progress for evhttp's timeout. */
static enum bufferevent_filter_result filter_in(struct evbuffer *src, struct evbuffer *dst,
                                                ev_ssize_t limit, enum bufferevent_flush_mode mode,
                                                void *ctx)
{
    (void)limit;
    (void)mode;
    guard *g = ctx;
    const unsigned long long max_body = (unsigned long long)g->srv->cfg.max_body;
    bool moved = false;
    for (;;) {
        size_t avail = evbuffer_get_length(src);
        switch (g->state) {
        case G_REJECTED:
            evbuffer_drain(src, avail);
            return moved ? BEV_OK : BEV_NEED_MORE;
        case G_RAW:
            if (!avail)
                return moved ? BEV_OK : BEV_NEED_MORE;
            evbuffer_remove_buffer(src, dst, avail);
            return BEV_OK;
        case G_HEAD: {
            struct evbuffer_ptr p;
            evbuffer_ptr_set(src, &p, g->line_start, EVBUFFER_PTR_SET);
            size_t eol = 0;
            struct evbuffer_ptr e = evbuffer_search_eol(src, &p, &eol, EVBUFFER_EOL_CRLF);
            if (e.pos < 0) {
                size_t partial = avail - g->line_start;
                if (g->first_line && partial > GUARD_LINE_MAX) {
                    reject(g, src, dst, 414, 0);
                    return BEV_OK;
                }
                if (!g->first_line && g->header_bytes + partial > GUARD_HEADERS_MAX) {
                    reject(g, src, dst, 431, 0);
                    return BEV_OK;
                }
                return moved ? BEV_OK : BEV_NEED_MORE;
            }
            size_t len = (size_t)e.pos - g->line_start;
            if (g->first_line && len == 0 && g->line_start == 0) {
                /* a stray CRLF between requests: RFC 9112 2.2 says
                 * ignore it; so does evhttp, so just pass it */
                pass(src, dst, eol);
                moved = true;
                continue;
            }
            /* every line ends in CRLF; no NUL or CR inside one (a bare
             * LF would end the line for one parser and not another) */
            if (eol != 2 || bad_bytes(src, g->line_start, len)) {
                reject(g, src, dst, 400, GUARD_BAD_BYTES);
                return BEV_OK;
            }
            if (g->first_line) {
                if (len > GUARD_LINE_MAX) {
                    reject(g, src, dst, 414, 0);
                    return BEV_OK;
                }
                if (!request_line(g, src, g->line_start, len)) {
                    drop(g, src, "not an HTTP/1.x request line");
                    return moved ? BEV_OK : BEV_NEED_MORE;
                }
                g->first_line = false;
            } else if (len == 0) {
                /* end of the head: refuse it whole, pass it, or gather
                 * its body */
                end_of_head(g, src, dst, (size_t)e.pos + eol);
                moved = true;
                continue;
            } else {
                g->header_bytes += len + eol;
                if (g->header_bytes > GUARD_HEADERS_MAX) {
                    reject(g, src, dst, 431, 0);
                    return BEV_OK;
                }
                int h = header_line(g, src, g->line_start, len);
                if (h < 0) {
                    drop(g, src, "a malformed header line");
                    return moved ? BEV_OK : BEV_NEED_MORE;
                }
                if (h > 0) {
                    reject(g, src, dst, 400, h);
                    return BEV_OK;
                }
            }
            g->line_start = (size_t)e.pos + eol;
            continue;
        }
        case G_BODY:
        case G_CHUNK_DATA: {
            if (!avail)
                return moved ? BEV_OK : BEV_NEED_MORE;
            size_t n = g->body_left < avail ? (size_t)g->body_left : avail;
            evbuffer_remove_buffer(src, g->body, n);
            moved = true;
            g->body_left -= n;
            if (g->body_left == 0) {
                if (g->state == G_BODY)
                    hand_over(g, dst);
                else
                    g->state = G_CHUNK_END;
            }
            continue;
        }
        case G_CHUNK_SIZE:
        case G_CHUNK_END:
        case G_TRAILER: {
            size_t len, total;
            if (!front_line(src, &len, &total)) {
                if (avail > GUARD_CHUNK_LINE_MAX)
                    drop(g, src, "a chunk line past the limit");
                return moved ? BEV_OK : BEV_NEED_MORE;
            }
            if (g->state == G_CHUNK_SIZE) {
                char line[64];
                copy_line(src, 0, len, line, sizeof line);
                char *end = NULL;
                bool hex = (line[0] >= '0' && line[0] <= '9') ||
                           (line[0] >= 'a' && line[0] <= 'f') || (line[0] >= 'A' && line[0] <= 'F');
                unsigned long long size = hex ? strtoull(line, &end, 16) : 0;
                if (!hex || (*end && *end != ';' && *end != ' ' && *end != '\t') ||
                    len > GUARD_CHUNK_LINE_MAX) {
                    drop(g, src, "a malformed chunk size");
                    return moved ? BEV_OK : BEV_NEED_MORE;
                }
                g->body_total += size;
                if (size > max_body || g->body_total > max_body) {
                    reject(g, src, dst, 413, 0);
                    return BEV_OK;
                }
                if (!charge(g, size)) {
                    reject(g, src, dst, 503, 0);
                    return BEV_OK;
                }
                evbuffer_drain(src, total);
                moved = true;
                if (size == 0) {
                    g->state = G_TRAILER;
                } else {
                    g->state = G_CHUNK_DATA;
                    g->body_left = size;
                }
            } else if (g->state == G_CHUNK_END) {
                if (len != 0) {
                    drop(g, src, "chunk data longer than its size");
                    return moved ? BEV_OK : BEV_NEED_MORE;
                }
                evbuffer_drain(src, total);
                moved = true;
                g->state = G_CHUNK_SIZE;
            } else {
                evbuffer_drain(src, total); /* trailer fields are dropped */
                moved = true;
                if (len == 0)
                    hand_over(g, dst);
            }
            continue;
        }
        }
    }
}

static void guard_free(void *ctx)
{
    guard *g = ctx;
    if (g->prev)
        g->prev->next = g->next;
    else if (all_guards == g)
        all_guards = g->next;
    if (g->next)
        g->next->prev = g->prev;
    release_held(g);
    release_passed(g);
    svc_writer_free(&g->out);
    if (g->head)
        evbuffer_free(g->head);
    if (g->body)
        evbuffer_free(g->body);
    free(g);
}

/* An answer is out: the body its request held is gone, or about to be
 * (evhttp frees a request once its reply is written). */
static void on_written(void *arg)
{
    release_passed(arg);
}

struct bufferevent *svc_guard_bev(struct event_base *base, void *server)
{
    guard *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->srv = server;
    reset_head(g);
    struct bufferevent *sock = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!sock) {
        free(g);
        return NULL;
    }
    /* a client that writes while it is being answered (or streamed to)
     * fills these and then its own socket */
    bufferevent_setwatermark(sock, EV_READ, 0, GUARD_IN_HIGH);
    struct bufferevent *f =
        bufferevent_filter_new(sock, filter_in, svc_writer_filter, BEV_OPT_CLOSE_ON_FREE,
                               guard_free, g);
    if (!f) {
        bufferevent_free(sock);
        free(g);
        return NULL;
    }
    bufferevent_setwatermark(f, EV_READ, 0, GUARD_IN_HIGH);
    g->bev = f;
    g->next = all_guards;
    if (all_guards)
        all_guards->prev = g;
    all_guards = g;
    if (svc_writer_init(&g->out, f, on_written, g) < 0) {
        bufferevent_free(f); /* frees g through guard_free */
        return NULL;
    }
    return f;
}

bool svc_guard_upgrade(struct bufferevent *bev)
{
    for (guard *g = all_guards; g; g = g->next) {
        if (g->bev != bev)
            continue;
        /* mid-request (a pipelined one): not a clean switch; the head and
         * body buffers stay allocated, empty, between a connection's requests */
        if (g->state != G_HEAD || g->line_start != 0 ||
            (g->head && evbuffer_get_length(g->head)) ||
            (g->body && evbuffer_get_length(g->body)))
            return false;
        g->state = G_RAW;
        return true;
    }
    return false;
}

bool svc_guard_answer(svc_req *r)
{
    svc_server *s = r->srv;
    size_t n = strlen(GUARD_PREFIX);
    if (strncmp(r->path, GUARD_PREFIX, n) != 0)
        return false;
    const char *rest = r->path + n;
    size_t k = strlen(s->guard_secret);
    if (strncmp(rest, s->guard_secret, k) != 0 || rest[k] != '/')
        return false;
    char *end = NULL;
    long status = strtol(rest + k + 1, &end, 10);
    long why = end && *end == '/' ? strtol(end + 1, NULL, 10) : 0;
    free(r->path);
    r->path = strdup("(request refused by the head guard)");
    if (!r->path) {
        svc_reply_error(r, 500, "internal", NULL, "out of memory");
        return true;
    }
    static const char *const bad[GUARD_BAD_COUNT] = {
        [GUARD_BAD_NO_HOST] = "an HTTP/1.1 request needs a Host header",
        [GUARD_BAD_TWO_HOSTS] = "the request has more than one Host header",
        [GUARD_BAD_CL_TE] = "the request has both Content-Length and Transfer-Encoding",
        [GUARD_BAD_TE_10] = "an HTTP/1.0 request cannot use Transfer-Encoding",
        [GUARD_BAD_BYTES] = "the request head holds a NUL, a bare CR or a line not ended by CRLF",
    };
    switch (status) {
    case 400:
        svc_reply_error(r, 400, "bad_request", NULL, "%s",
                        why > 0 && why < GUARD_BAD_COUNT ? bad[why] : "malformed request head");
        break;
    case 413:
        svc_reply_error(r, 413, "payload_too_large", NULL,
                        "the request body is larger than the limit of %lld bytes (--max-body)",
                        s->cfg.max_body);
        break;
    case 414:
        svc_reply_error(r, 414, "uri_too_long", NULL,
                        "the request line is longer than %d bytes", GUARD_LINE_MAX);
        break;
    case 503:
        svc_req_add_header(r, "Retry-After", "1");
        svc_reply_error(r, 503, "unavailable", NULL,
                        "request bodies in flight hold the limit of %lld bytes (--max-bodies); "
                        "nothing was accepted, try again",
                        s->cfg.max_bodies);
        break;
    default:
        svc_reply_error(r, 431, "headers_too_large", NULL,
                        "the request headers are larger than %d bytes in all", GUARD_HEADERS_MAX);
        break;
    }
    return true;
}
