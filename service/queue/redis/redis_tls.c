/*
 * service/queue/redis/redis_tls.c - see redis_tls.h: TCP connect with a
 * deadline, the OpenSSL handshake with certificate and host name checks,
 * then a bridge thread between a socketpair end and the TLS session.
 *
 * Why a thread and not OpenSSL inside hiredis: hiredis 0.14 (Debian 12)
 * calls read()/write() on its fd itself, and the cluster code uses its
 * blocking API everywhere (pipelines, MULTI, timeouts).  One SSL object
 * must not be read and written from two threads at once, so the bridge is
 * one thread on non-blocking sockets: it moves what hiredis wrote into
 * SSL_write and what SSL_read returns back to hiredis, and sleeps in
 * poll() on what the last OpenSSL call asked for (WANT_READ/WANT_WRITE).
 * Either side closing ends it: hiredis sees EOF (a lost connection, which
 * the cluster code already retries), or the bridge sees hiredis's end
 * closed by redisFree().
 *
 * Verification fails closed: SSL_VERIFY_PEER against the CA file or the
 * system's trust store, and the host name (or IP address) of the URL must
 * be in the certificate (SSL_set1_host / X509_VERIFY_PARAM_set1_ip_asc).
 * TLS 1.2 at least.
 */
#include "redis_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define BRIDGE_BUF 16384
/* what a failed handshake most often means */
#define PLAIN_HINT "is it a plain, non-TLS port? that needs redis://"

struct svc_tls_bridge {
    SSL *ssl;
    int sock;           /* the TCP socket under the TLS session */
    int plain;          /* the bridge's end of the socketpair */
    atomic_bool stop;
    pthread_t thread;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL, 0);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Wait for `events` on fd until the deadline; 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {fd, events, 0};
        int n = poll(&p, 1, (int)left + 1);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* A non-blocking TCP socket connected to host:port, or -1 with err. */
static int tcp_connect(const char *host, int port, double deadline, char *err, size_t n)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char serv[16];
    snprintf(serv, sizeof serv, "%d", port);
    int g = getaddrinfo(host, serv, &hints, &res);
    if (g != 0) {
        snprintf(err, n, "cannot resolve %s: %s", host, gai_strerror(g));
        return -1;
    }
    int fd = -1, last = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (set_nonblock(fd) == 0 &&
            (connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS)) {
            int w = wait_fd(fd, POLLOUT, deadline);
            int so = 0;
            socklen_t sl = sizeof so;
            if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) == 0 && so == 0)
                break; /* connected */
            last = w == 0 ? ETIMEDOUT : (so ? so : errno);
        } else {
            last = errno;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, n, "%s", strerror(last ? last : ECONNREFUSED));
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* OpenSSL's reason for the last failure, short ("wrong version number"). */
static const char *ssl_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "no reason given";
}

static bool is_ip_literal(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* ------------------------------------------------------------ the bridge */

/* What the last SSL call needs before it can go on: POLLIN, POLLOUT or 0
 * (it made progress); -1 when the session is over. */
static int ssl_wants(SSL *ssl, int ret)
{
    switch (SSL_get_error(ssl, ret)) {
    case SSL_ERROR_WANT_READ:
        return POLLIN;
    case SSL_ERROR_WANT_WRITE:
        return POLLOUT;
    default:
        return -1; /* closed by the peer, or a TLS or socket error */
    }
}

static void *bridge_main(void *arg)
{
    svc_tls_bridge *b = arg;
    char up[BRIDGE_BUF], down[BRIDGE_BUF];
    size_t up_len = 0, up_off = 0, down_len = 0, down_off = 0;
    short w_wait = 0, r_wait = POLLIN;
    while (!atomic_load(&b->stop)) {
        bool progress = false;
        /* hiredis -> TLS */
        if (up_len == 0) {
            ssize_t n = recv(b->plain, up, sizeof up, 0);
            if (n == 0)
                break; /* hiredis closed its end (redisFree) */
            if (n > 0) {
                up_len = (size_t)n;
                up_off = 0;
                progress = true;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                break;
            }
        }
        if (up_off < up_len) {
            ERR_clear_error();
            int n = SSL_write(b->ssl, up + up_off, (int)(up_len - up_off));
            if (n > 0) {
                up_off += (size_t)n;
                if (up_off == up_len)
                    up_off = up_len = 0;
                progress = true;
                w_wait = 0;
            } else {
                int w = ssl_wants(b->ssl, n);
                if (w < 0)
                    break;
                w_wait = (short)w;
            }
        }
        /* TLS -> hiredis */
        if (down_len == 0) {
            ERR_clear_error();
            int n = SSL_read(b->ssl, down, (int)sizeof down);
            if (n > 0) {
                down_len = (size_t)n;
                down_off = 0;
                progress = true;
            } else {
                int w = ssl_wants(b->ssl, n);
                if (w < 0)
                    break; /* the server closed the session: hiredis sees EOF */
                r_wait = (short)w;
            }
        }
        if (down_off < down_len) {
            ssize_t n = send(b->plain, down + down_off, down_len - down_off, MSG_NOSIGNAL);
            if (n > 0) {
                down_off += (size_t)n;
                if (down_off == down_len)
                    down_off = down_len = 0;
                progress = true;
            } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                break;
            }
        }
        if (progress)
            continue;
        struct pollfd p[2] = {{b->plain, 0, 0}, {b->sock, 0, 0}};
        if (up_len == 0)
            p[0].events |= POLLIN;
        if (down_off < down_len)
            p[0].events |= POLLOUT;
        if (up_off < up_len)
            p[1].events |= w_wait;
        if (down_len == 0)
            p[1].events |= r_wait;
        int n = poll(p, 2, 500);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && (p[0].revents & (POLLHUP | POLLERR | POLLNVAL)) &&
            !(p[0].revents & POLLIN))
            break; /* hiredis is gone, with bytes still unsent: drop them */
    }
    /* hiredis sees EOF from here on */
    shutdown(b->plain, SHUT_RDWR);
    return NULL;
}

/* ------------------------------------------------------------ connect */

static SSL *make_ssl(const char *host, const char *ca_file, char *err, size_t n)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        snprintf(err, n, "TLS: cannot create a context: %s", ssl_reason());
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL *ssl = NULL;
    if (ca_file && *ca_file) {
        if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
            snprintf(err, n, "--queue-ca %s: cannot load it as PEM certificates: %s", ca_file,
                     ssl_reason());
            goto out;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        snprintf(err, n, "TLS: cannot load the system's trust store: %s (give --queue-ca)",
                 ssl_reason());
        goto out;
    }
    ssl = SSL_new(ctx);
    if (!ssl) {
        snprintf(err, n, "TLS: out of memory");
        goto out;
    }
    bool ok;
    if (is_ip_literal(host)) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1;
    } else {
        ok = SSL_set_tlsext_host_name(ssl, host) == 1 && SSL_set1_host(ssl, host) == 1;
    }
    if (!ok) {
        snprintf(err, n, "TLS: cannot set the expected host name '%s'", host);
        SSL_free(ssl);
        ssl = NULL;
    }
out:
    SSL_CTX_free(ctx); /* the SSL holds its own reference */
    return ssl;
}

int svc_tls_connect(const char *host, int port, const char *ca_file, int timeout_ms, int *fd,
                    svc_tls_bridge **out, char *err, size_t err_size)
{
    *fd = -1;
    *out = NULL;
    const double deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 5000);
    ERR_clear_error();
    SSL *ssl = make_ssl(host, ca_file, err, err_size);
    if (!ssl)
        return SVC_TLS_ECONFIG;
    int rc = SVC_TLS_EDOWN;
    int sock = tcp_connect(host, port, deadline, err, err_size);
    int sv[2] = {-1, -1};
    svc_tls_bridge *b = NULL;
    if (sock < 0)
        goto fail;
    SSL_set_fd(ssl, sock);
    for (;;) {
        ERR_clear_error();
        int r = SSL_connect(ssl);
        if (r == 1)
            break;
        int e = SSL_get_error(ssl, r);
        long v = SSL_get_verify_result(ssl);
        if (v != X509_V_OK) {
            rc = SVC_TLS_EVERIFY;
            if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
                snprintf(err, err_size, "the TLS certificate of %s:%d does not name '%s' (%s)",
                         host, port, host, X509_verify_cert_error_string(v));
            else
                snprintf(err, err_size, "the TLS certificate of %s:%d is not trusted: %s (%s)",
                         host, port, X509_verify_cert_error_string(v),
                         ca_file && *ca_file ? "not signed by --queue-ca's CA"
                                             : "not signed by a CA of the system's trust store; "
                                               "give --queue-ca");
            goto fail;
        }
        short want = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        if (!want) {
            rc = SVC_TLS_EHANDSHAKE;
            if (e == SSL_ERROR_SYSCALL && !ERR_peek_last_error())
                snprintf(err, err_size, "the TLS handshake with %s:%d failed: the server closed "
                         "the connection (" PLAIN_HINT "; or it wants a client certificate)",
                         host, port);
            else
                snprintf(err, err_size, "the TLS handshake with %s:%d failed: %s (" PLAIN_HINT ")",
                         host, port, ssl_reason());
            goto fail;
        }
        int w = wait_fd(sock, want, deadline);
        if (w <= 0) {
            rc = SVC_TLS_EHANDSHAKE;
            snprintf(err, err_size, "no TLS answer from %s:%d within %d ms (" PLAIN_HINT ")",
                     host, port, timeout_ms);
            goto fail;
        }
    }
    rc = SVC_TLS_ECONFIG;
    b = calloc(1, sizeof *b);
    if (!b || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
        set_nonblock(sv[1]) < 0) {
        snprintf(err, err_size, "TLS: cannot make the bridge socket: %s", strerror(errno));
        goto fail;
    }
    b->ssl = ssl;
    b->sock = sock;
    b->plain = sv[1];
    atomic_init(&b->stop, false);
    if (pthread_create(&b->thread, NULL, bridge_main, b) != 0) {
        snprintf(err, err_size, "TLS: cannot start the bridge thread");
        goto fail;
    }
    *fd = sv[0];
    *out = b;
    return SVC_TLS_OK;
fail:
    if (sv[0] >= 0)
        close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    free(b);
    SSL_free(ssl);
    if (sock >= 0)
        close(sock);
    return rc;
}

void svc_tls_close(svc_tls_bridge *b)
{
    if (!b)
        return;
    atomic_store(&b->stop, true);
    pthread_join(b->thread, NULL);
    /* best effort close_notify; the socket is non-blocking, so no wait */
    SSL_shutdown(b->ssl);
    SSL_free(b->ssl);
    close(b->sock);
    close(b->plain);
    free(b);
}
