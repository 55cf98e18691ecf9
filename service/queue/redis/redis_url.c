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

int svc_redis_url_parse(const char *url, svc_redis_url *out, char *err, size_t err_size)
{
    static const char scheme[] = "redis://";
    memset(out, 0, sizeof *out);
    out->port = 6379;
    if (!url || strncmp(url, scheme, sizeof scheme - 1) != 0)
        return fail(err, err_size, "must start with redis:// (rediss:// and unix sockets are "
                                   "not supported)");
    const char *p = url + sizeof scheme - 1;
    const char *end = p + strlen(p);
    if (memchr(p, '@', (size_t)(end - p)))
        return fail(err, err_size, "credentials in the URL are not supported");
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

int tsr_service_check_queue_url(const char *url, char *err, size_t err_size)
{
    svc_redis_url u;
    return svc_redis_url_parse(url, &u, err, err_size);
}
