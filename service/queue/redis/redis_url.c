/*
 * service/queue/redis/redis_url.c - see redis_url.h.
 */
#include "redis_url.h"

#include <stdio.h>
#include <string.h>

#include "service.h"

static int fail(char *err, size_t n, const char *msg)
{
    if (err && n)
        snprintf(err, n, "%s", msg);
    return -1;
}

/* Decimal digits [s, e) into 0..max; false if empty, not digits or too big. */
static int parse_num(const char *s, const char *e, long max, long *out)
{
    if (s == e || e - s > 9)
        return -1;
    long v = 0;
    for (const char *p = s; p < e; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

/* A user name character: printable ASCII but the URL's delimiters, '%'
 * (no percent-decoding) and space. */
static int user_char_ok(unsigned char c)
{
    return c > ' ' && c < 0x7f && !strchr(":@/?#[]%", c);
}

int svc_redis_url_parse(const char *url, svc_redis_url *out, char *err, size_t err_size)
{
    static const char plain[] = "redis://", tls[] = "rediss://";
    memset(out, 0, sizeof *out);
    out->port = 6379;
    const char *p;
    if (url && strncmp(url, plain, sizeof plain - 1) == 0) {
        p = url + sizeof plain - 1;
    } else if (url && strncmp(url, tls, sizeof tls - 1) == 0) {
        p = url + sizeof tls - 1;
        out->tls = true;
    } else {
        return fail(err, err_size, "must start with redis:// or rediss:// (TLS); unix sockets "
                                   "are not supported");
    }
    const char *end = p + strlen(p);
    /* userinfo: up to the last '@' (a host, port or path never holds one) */
    const char *at = NULL;
    for (const char *c = p; c < end; c++)
        if (*c == '@')
            at = c;
    if (at) {
        if (memchr(p, ':', (size_t)(at - p)))
            return fail(err, err_size, "a password in the URL is not accepted (it would show in "
                                       "ps, shell history and logs): put it in a file given "
                                       "with --queue-password-file FILE (mode 600) or in "
                                       "TESSERA_REDIS_PASSWORD");
        if (at == p)
            return fail(err, err_size, "the user name before '@' is empty");
        if ((size_t)(at - p) >= sizeof out->user)
            return fail(err, err_size, "the user name is too long");
        for (const char *c = p; c < at; c++)
            if (!user_char_ok((unsigned char)*c))
                return fail(err, err_size, "the user name contains a character not allowed "
                                           "(space, control, '%', '/', '?', '#', '[', ']' "
                                           "or '@')");
        memcpy(out->user, p, (size_t)(at - p));
        out->user[at - p] = '\0';
        p = at + 1;
    }
    if (memchr(p, '?', (size_t)(end - p)) || memchr(p, '#', (size_t)(end - p)))
        return fail(err, err_size, "query strings and fragments are not supported");
    const char *slash = memchr(p, '/', (size_t)(end - p));
    const char *hend = slash ? slash : end; /* host[:port] is [p, hend) */
    const char *host = p, *host_end, *port = NULL;
    if (*p == '[') {
        const char *close = memchr(p, ']', (size_t)(hend - p));
        if (!close)
            return fail(err, err_size, "an IPv6 host needs its closing ']'");
        host = p + 1;
        host_end = close;
        if (close + 1 < hend) {
            if (close[1] != ':')
                return fail(err, err_size, "expected ':PORT' after ']'");
            port = close + 2;
        }
    } else {
        const char *colon = memchr(p, ':', (size_t)(hend - p));
        host_end = colon ? colon : hend;
        if (colon)
            port = colon + 1;
    }
    if (host_end == host)
        return fail(err, err_size, "the host is missing");
    if ((size_t)(host_end - host) >= sizeof out->host)
        return fail(err, err_size, "the host is too long");
    for (const char *c = host; c < host_end; c++)
        if ((unsigned char)*c <= ' ' || *c == '[' || *c == ']' || *c == 0x7f ||
            (*p != '[' && *c == ':'))
            return fail(err, err_size, "the host contains a character not allowed");
    memcpy(out->host, host, (size_t)(host_end - host));
    out->host[host_end - host] = '\0';
    long v = 0;
    if (port) {
        if (parse_num(port, hend, 65535, &v) < 0 || v == 0)
            return fail(err, err_size, "the port must be 1..65535");
        out->port = (int)v;
    }
    if (slash && slash + 1 < end) {
        if (parse_num(slash + 1, end, 65535, &v) < 0)
            return fail(err, err_size, "the database must be a number 0..65535");
        out->db = (int)v;
    }
    return 0;
}

void svc_redis_url_wipe(svc_redis_url *u)
{
    volatile char *w = u->password;
    for (size_t i = 0; i < sizeof u->password; i++)
        w[i] = 0;
}

void svc_redis_url_redact(const char *url, char *out, size_t out_size)
{
    if (!out_size)
        return;
    const char *at = url ? strrchr(url, '@') : NULL;
    const char *scheme = url ? strstr(url, "://") : NULL;
    if (!at || !scheme || scheme > at) {
        snprintf(out, out_size, "%s", url ? url : "");
        return;
    }
    const char *ui = scheme + 3;
    const char *colon = memchr(ui, ':', (size_t)(at - ui));
    if (!colon) {
        snprintf(out, out_size, "%s", url);
        return;
    }
    snprintf(out, out_size, "%.*s:***%s", (int)(colon - url), url, at);
}

int tsr_service_check_queue_url(const char *url, char *err, size_t err_size)
{
    svc_redis_url u;
    char e[200], shown[300];
    if (svc_redis_url_parse(url, &u, e, sizeof e) == 0)
        return 0;
    svc_redis_url_redact(url, shown, sizeof shown);
    if (err && err_size)
        snprintf(err, err_size, "'%s': %s", shown, e);
    return -1;
}
