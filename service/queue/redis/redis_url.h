/*
 * service/queue/redis/redis_url.h - the --queue URL and what a connection
 * to it needs: redis[s]://[USER@]HOST[:PORT][/DB].
 *
 * HOST is a name, an IPv4 address or [an IPv6 address]; PORT 1..65535
 * (default 6379); DB 0..65535 (default 0).  `rediss://` means TLS
 * (service/queue/redis/redis_tls.c); USER is an ACL user name.  A password
 * in the URL (`redis://:pw@h`, `redis://u:pw@h`) is refused: a URL is on
 * the command line (ps, shell history, unit files) and in logs, so the
 * password comes from --queue-password-file or TESSERA_REDIS_PASSWORD
 * (svc_redis_password_load, redis_conn.h) into `password`, which nothing ever logs.
 * Query strings and unix sockets are refused with a message.  The parser
 * is a pure function, fuzzed by fuzz/fuzz_redis_url.c and unit-tested by
 * tests/cluster/test_redis_url.c.
 */
#ifndef SVC_REDIS_URL_H
#define SVC_REDIS_URL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct svc_redis_url {
    char host[256];
    int port;
    int db;
    bool tls;            /* rediss:// */
    char user[128];      /* ACL user; "" = the default user */
    /* not from the URL: */
    char password[512];  /* "" = no AUTH (svc_redis_password_load) */
    char ca_file[1024];  /* --queue-ca; "" = the system's trust store (rediss:// only) */
} svc_redis_url;

/* 0, or -1 with a message in err (NUL-terminated, truncated to err_size).
 * Fills host, port, db, tls, user; clears password and ca_file. */
int svc_redis_url_parse(const char *url, svc_redis_url *out, char *err, size_t err_size);

/* `url` for a message: a password in it (refused, but typed) becomes ***. */
void svc_redis_url_redact(const char *url, char *out, size_t out_size);

/* Overwrite the password in memory (before the struct is freed). */
void svc_redis_url_wipe(svc_redis_url *u);

#endif
