/*
 * service/queue/redis/redis_tls.h - a TLS connection to Redis that hiredis
 * 0.14 can use as a plain socket (rediss://, docs/scale-out.md "TLS").
 *
 * Debian 12's hiredis (0.14) has no TLS, and no Debian source carries a
 * newer one for bookworm; its blocking context reads and writes its file
 * descriptor directly (no I/O hooks before 1.0).  So the TLS session lives
 * outside hiredis: svc_tls_connect() opens the TCP connection, runs the
 * OpenSSL handshake in the caller's thread (so a bad certificate or a
 * plain port is reported at once, with the reason), verifies the server's
 * certificate against the CA file (or the system's trust store) and its
 * name against the URL's host, then hands back one end of a socketpair.
 * hiredis gets that end (redisConnectFd); a small bridge thread owned by
 * the connection relays bytes between the other end and the TLS session.
 * Nothing of the cluster code changes: pipelining, timeouts
 * (SO_RCVTIMEO on the socketpair end) and "connection lost" all behave as
 * on a TCP socket.  The cost is one copy and one thread hop per direction,
 * far below a Redis round trip (docs/scale-out.md has the figure).
 *
 * Owner: svc_tls_close() ends and joins the bridge; call it after
 * redisFree() has closed the hiredis end (the bridge then sees EOF).
 */
#ifndef SVC_REDIS_TLS_H
#define SVC_REDIS_TLS_H

#include <stddef.h>

typedef struct svc_tls_bridge svc_tls_bridge;

/* Outcomes, so the caller can tell "retry later" from "fix the config". */
enum {
    SVC_TLS_OK = 0,
    SVC_TLS_EDOWN = -1,    /* TCP: cannot connect (down, refused, timed out) */
    SVC_TLS_EVERIFY = -2,  /* the certificate is not trusted, or names another host */
    SVC_TLS_EHANDSHAKE = -3, /* no TLS there (a plain port?), or no common protocol */
    SVC_TLS_ECONFIG = -4,  /* the CA file cannot be read, out of memory, no thread */
};

/* Connect to host:port over TLS; ca_file NULL or "" = the system's trust
 * store.  On SVC_TLS_OK, *fd is the plain end for redisConnectFd (the
 * caller owns it; hiredis closes it) and *out the bridge.  Otherwise a
 * one-line reason in err. */
int svc_tls_connect(const char *host, int port, const char *ca_file, int timeout_ms, int *fd,
                    svc_tls_bridge **out, char *err, size_t err_size);

/* Stop the bridge, close the TLS session and its socket, free it. */
void svc_tls_close(svc_tls_bridge *b);

#endif
