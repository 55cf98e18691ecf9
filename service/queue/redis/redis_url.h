/*
 * service/queue/redis/redis_url.h - the --queue URL: redis://HOST[:PORT][/DB].
 *
 * HOST is a name, an IPv4 address or [an IPv6 address]; PORT 1..65535
 * (default 6379); DB 0..65535 (default 0).  Credentials, query strings and
 * unix sockets are refused with a message (not supported yet).  Pure
 * function, fuzzed by fuzz/fuzz_redis_url.c.
 */
#ifndef SVC_REDIS_URL_H
#define SVC_REDIS_URL_H

#include <stddef.h>

typedef struct svc_redis_url {
    char host[256];
    int port;
    int db;
} svc_redis_url;

/* 0, or -1 with a message in err (NUL-terminated, truncated to err_size). */
int svc_redis_url_parse(const char *url, svc_redis_url *out, char *err, size_t err_size);

#endif
