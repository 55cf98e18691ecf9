/*
 * service/queue/redis/redis_conn.h - the one way a node opens a Redis
 * connection: TCP or TLS (rediss://, redis_tls.h), AUTH with the ACL user
 * and the password, a PING, SELECT.
 *
 * Every connection of the cluster (command, follower, pop, publisher:
 * cluster.c's svc_cl_rc_ensure) and the start-up check of `tessera serve`
 * (tsr_service_check_queue) go through svc_redis_open, so a reconnect
 * authenticates exactly as the first connection did.  The outcome says
 * whether to retry (Redis away) or to stop (a wrong password, an untrusted
 * certificate, TLS against a plain port: retrying cannot help), with a
 * one-line reason that names the host, the port and the user, never the
 * password.
 */
#ifndef SVC_REDIS_CONN_H
#define SVC_REDIS_CONN_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "redis_tls.h"
#include "redis_url.h"

enum {
    SVC_REDIS_OK = 0,
    SVC_REDIS_EDOWN = -1,   /* unreachable or lost: retry with backoff */
    SVC_REDIS_EFATAL = -2,  /* the configuration is wrong: auth, TLS, DB */
};

/* A connected, authenticated context (and its TLS bridge, NULL for
 * redis://).  connect_ms bounds the TCP connect and the TLS handshake;
 * io_s is the read/write timeout of every later command. */
typedef struct svc_redis_link {
    redisContext *ctx;
    svc_tls_bridge *tls;
} svc_redis_link;

int svc_redis_open(const svc_redis_url *u, int connect_ms, int io_s, svc_redis_link *out,
                   char *err, size_t err_size);
/* Close the context, then its bridge; the link is cleared. */
void svc_redis_close(svc_redis_link *l);

/* The password from `file` (one line; one trailing newline stripped; a
 * warning when group or others can read it) or, when file is NULL, from
 * $TESSERA_REDIS_PASSWORD (unset or empty: no password).  0, or -1 with a
 * message in err that names the file, never the password. */
int svc_redis_password_load(const char *file, char *out, size_t out_size, char *err,
                            size_t err_size);

/* Everything --queue needs but the model: the URL parsed, the password
 * loaded, the CA file set; the rules between them checked (--queue-ca
 * needs rediss://, a URL user needs a password).  0, or -1 with err. */
int svc_redis_target(const char *url, const char *password_file, const char *ca_file,
                     svc_redis_url *out, char *err, size_t err_size);

#endif
