/*
 * service/queue/redis/redis_conn.c - see redis_conn.h.
 *
 * The order on a new connection is fixed: transport (TCP, or TLS with the
 * certificate checked), AUTH when a password is set, PING (so a server
 * that wants a password says NOAUTH now, not at the first real command,
 * and a plain connection to a TLS port is seen closing), SELECT when the
 * URL names a DB.  Each step's failure is classified: the transport
 * failing to connect is "down" (retried), everything after a successful
 * connect that the server refuses is "fatal" (the node's configuration
 * is wrong; at start-up `tessera serve` stops with exit 2, later the
 * cluster threads log it and keep retrying, in case the operator is
 * rotating the password).
 */
#include "redis_conn.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "log.h"
#include "service.h"

/* "host:port", brackets around an IPv6 address. */
static void where(const svc_redis_url *u, char *out, size_t n)
{
    bool v6 = strchr(u->host, ':') != NULL;
    snprintf(out, n, "%s%s%s:%d", v6 ? "[" : "", u->host, v6 ? "]" : "", u->port);
}

/* One command on a fresh context; the reply, or NULL with the context's
 * error. */
static redisReply *cmd_argv(redisContext *c, int argc, const char **argv)
{
    size_t lens[3];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    return redisCommandArgv(c, argc, argv, lens);
}

/* A reply that is NULL (the connection failed) or an error: its text in
 * err after `what`; the outcome. */
static int step_failed(const svc_redis_url *u, redisContext *c, redisReply *rep,
                       const char *what, char *err, size_t n)
{
    char at[300];
    where(u, at, sizeof at);
    int rc = SVC_REDIS_EFATAL;
    if (!rep) {
        /* a plain Redis port never drops a fresh connection at its first
         * command; a TLS port does (it got no ClientHello) */
        bool dropped = c->err == REDIS_ERR_EOF ||
                       (c->err == REDIS_ERR_IO && (strcmp(c->errstr, strerror(ECONNRESET)) == 0 ||
                                                   strcmp(c->errstr, strerror(EPIPE)) == 0));
        if (dropped && !u->tls)
            snprintf(err, n, "redis: %s closed the connection at the first command (a TLS "
                     "port? then use rediss://)", at);
        else if (dropped)
            snprintf(err, n, "redis: %s closed the TLS connection at the first command", at);
        else {
            snprintf(err, n, "redis: %s at %s: %s", what, at, c->errstr);
            rc = SVC_REDIS_EDOWN; /* a timeout or a reset: Redis may be busy */
        }
    } else if (strncmp(rep->str, "NOAUTH", 6) == 0) {
        snprintf(err, n, "redis: %s requires a password (NOAUTH): give it with "
                 "--queue-password-file FILE or TESSERA_REDIS_PASSWORD", at);
    } else if (strcmp(what, "AUTH") == 0) {
        snprintf(err, n, "redis: authentication failed for user '%s' at %s (%.*s)",
                 u->user[0] ? u->user : "default", at, 200, rep->str);
    } else {
        snprintf(err, n, "redis: %s at %s refused: %.*s", what, at, 200, rep->str);
    }
    freeReplyObject(rep);
    return rc;
}

int svc_redis_open(const svc_redis_url *u, int connect_ms, int io_s, svc_redis_link *out,
                   char *err, size_t err_size)
{
    out->ctx = NULL;
    out->tls = NULL;
    char at[300];
    where(u, at, sizeof at);
    if (connect_ms <= 0)
        connect_ms = 1000;
    redisContext *c = NULL;
    svc_tls_bridge *tls = NULL;
    if (u->tls) {
        int fd = -1;
        char why[400];
        int t = svc_tls_connect(u->host, u->port, u->ca_file, connect_ms, &fd, &tls, why,
                                sizeof why);
        if (t != SVC_TLS_OK) {
            if (t == SVC_TLS_EDOWN)
                snprintf(err, err_size, "redis: cannot reach rediss://%s: %s", at, why);
            else
                snprintf(err, err_size, "redis: %s", why);
            return t == SVC_TLS_EDOWN ? SVC_REDIS_EDOWN : SVC_REDIS_EFATAL;
        }
        c = redisConnectFd(fd);
        if (!c || c->err) {
            if (!c)
                close(fd);
            snprintf(err, err_size, "redis: rediss://%s: %s", at, c ? c->errstr : "out of memory");
            redisFree(c);
            svc_tls_close(tls);
            return SVC_REDIS_EDOWN;
        }
    } else {
        struct timeval tv = {connect_ms / 1000, (connect_ms % 1000) * 1000};
        c = redisConnectWithTimeout(u->host, u->port, tv);
        if (!c || c->err) {
            snprintf(err, err_size, "redis: cannot reach redis://%s: %s", at,
                     c ? c->errstr : "out of memory");
            redisFree(c);
            return SVC_REDIS_EDOWN;
        }
    }
    struct timeval io = {io_s > 0 ? io_s : 10, 0};
    redisSetTimeout(c, io);
    int rc = SVC_REDIS_OK;
    redisReply *rep;
    if (u->password[0]) {
        const char *argv[3] = {"AUTH", u->user[0] ? u->user : u->password, u->password};
        rep = cmd_argv(c, u->user[0] ? 3 : 2, argv);
        if (!rep || rep->type == REDIS_REPLY_ERROR) {
            rc = step_failed(u, c, rep, "AUTH", err, err_size);
            goto out;
        }
        freeReplyObject(rep);
    }
    const char *ping[1] = {"PING"};
    rep = cmd_argv(c, 1, ping);
    if (!rep || rep->type == REDIS_REPLY_ERROR) {
        rc = step_failed(u, c, rep, "PING", err, err_size);
        goto out;
    }
    freeReplyObject(rep);
    if (u->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", u->db);
        const char *argv[2] = {"SELECT", db};
        rep = cmd_argv(c, 2, argv);
        if (!rep || rep->type == REDIS_REPLY_ERROR) {
            rc = step_failed(u, c, rep, "SELECT", err, err_size);
            goto out;
        }
        freeReplyObject(rep);
    }
out:
    if (rc != SVC_REDIS_OK) {
        redisFree(c);
        svc_tls_close(tls);
        return rc;
    }
    out->ctx = c;
    out->tls = tls;
    return SVC_REDIS_OK;
}

void svc_redis_close(svc_redis_link *l)
{
    redisFree(l->ctx); /* closes hiredis's end: the bridge sees EOF */
    svc_tls_close(l->tls);
    l->ctx = NULL;
    l->tls = NULL;
}

int svc_redis_password_load(const char *file, char *out, size_t out_size, char *err,
                            size_t err_size)
{
    out[0] = '\0';
    if (!file) {
        const char *env = getenv("TESSERA_REDIS_PASSWORD");
        if (!env || !*env)
            return 0;
        if (strlen(env) >= out_size || strpbrk(env, "\r\n")) {
            snprintf(err, err_size, "TESSERA_REDIS_PASSWORD: %s",
                     strlen(env) >= out_size ? "too long" : "holds a line break");
            return -1;
        }
        snprintf(out, out_size, "%s", env);
        return 0;
    }
    char *text = NULL;
    size_t n = 0;
    int rc = svc_read_file(file, &text, &n, out_size);
    if (rc < 0) {
        snprintf(err, err_size, "--queue-password-file %s: %s", file,
                 rc == -EFBIG ? "too long for a password" : strerror(-rc));
        return -1;
    }
    /* one trailing newline (\n or \r\n) is the editor's, not the password's */
    if (n && text[n - 1] == '\n')
        text[--n] = '\0';
    if (n && text[n - 1] == '\r')
        text[--n] = '\0';
    rc = -1;
    if (n == 0)
        snprintf(err, err_size, "--queue-password-file %s: the file is empty", file);
    else if (strlen(text) != n || strpbrk(text, "\r\n"))
        snprintf(err, err_size, "--queue-password-file %s: the password must be one line "
                 "(no NUL, no line break inside)", file);
    else if (n >= out_size)
        snprintf(err, err_size, "--queue-password-file %s: too long for a password", file);
    else {
        memcpy(out, text, n + 1);
        rc = 0;
        struct stat st;
        if (stat(file, &st) == 0 && (st.st_mode & 077))
            SVC_WARN("--queue-password-file %s can be read by group or others (mode %03o); "
                     "chmod 600 it", file, (unsigned)(st.st_mode & 0777));
    }
    volatile char *w = text;
    for (size_t i = 0; i < n; i++)
        w[i] = 0;
    free(text);
    return rc;
}

int svc_redis_target(const char *url, const char *password_file, const char *ca_file,
                     svc_redis_url *out, char *err, size_t err_size)
{
    char e[300], shown[300];
    if (svc_redis_url_parse(url, out, e, sizeof e) < 0) {
        svc_redis_url_redact(url, shown, sizeof shown);
        snprintf(err, err_size, "--queue '%s': %s", shown, e);
        return -1;
    }
    if (ca_file) {
        if (!out->tls) {
            snprintf(err, err_size, "--queue-ca needs a rediss:// (TLS) --queue URL");
            return -1;
        }
        if (strlen(ca_file) >= sizeof out->ca_file) {
            snprintf(err, err_size, "--queue-ca: the path is too long");
            return -1;
        }
        if (access(ca_file, R_OK) != 0) {
            snprintf(err, err_size, "--queue-ca %s: %s", ca_file, strerror(errno));
            return -1;
        }
        snprintf(out->ca_file, sizeof out->ca_file, "%s", ca_file);
    }
    if (svc_redis_password_load(password_file, out->password, sizeof out->password, err,
                                err_size) < 0)
        return -1;
    if (out->user[0] && !out->password[0]) {
        snprintf(err, err_size, "--queue names the user '%s' but no password was given "
                 "(--queue-password-file FILE or TESSERA_REDIS_PASSWORD)", out->user);
        return -1;
    }
    return 0;
}

int tsr_service_check_queue(const tsr_service_config *c, char *err, size_t err_size)
{
    if (!c->queue_url) {
        if (c->queue_password_file || c->queue_ca) {
            snprintf(err, err_size, "--queue-password-file and --queue-ca need --queue");
            return -1;
        }
        return 0;
    }
    svc_redis_url u;
    if (svc_redis_target(c->queue_url, c->queue_password_file, c->queue_ca, &u, err,
                         err_size) < 0) {
        svc_redis_url_wipe(&u);
        return -1;
    }
    /* as tsr_service_run does: a closed peer is an error, not a signal */
    signal(SIGPIPE, SIG_IGN);
    svc_redis_link l;
    int rc = svc_redis_open(&u, 3000, 5, &l, err, err_size);
    svc_redis_url_wipe(&u);
    if (rc == SVC_REDIS_OK) {
        svc_redis_close(&l);
        return 0;
    }
    if (rc == SVC_REDIS_EDOWN) {
        /* Redis may come up after the node: the node waits for it */
        SVC_WARN("%s (the node starts and keeps trying)", err);
        err[0] = '\0';
        return 0;
    }
    return -1;
}
