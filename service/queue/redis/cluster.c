/*
 * service/queue/redis/cluster.c - see cluster.h; the design is docs/scale-out.md.
 *
 * Keys (prefix tsr:<model>:): q (stream, group "workers", one entry per
 * image), events (stream: accept / started / step / image / failed),
 * png:<job>:<i> (result, EX --result-ttl), tries:<job>:<i> (takes), dead
 * (dead letters).  Event fields: t (type), job, i (index) and per type
 * rec | step, steps | etag, bytes, info | status, msg.
 */
#include "cluster_int.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <hiredis/hiredis.h>

#include "log.h"
#include "redis_conn.h"
#include "service.h"
#include "store.h"
#include "tessera.h"
#include "util.h"

/* ------------------------------------------------------------ connections */

/* Every connection of the node is made here (redis_conn.c: TLS, AUTH,
 * PING, SELECT), so a reconnect authenticates as the first one did.  A
 * failure is logged once until it changes or the connection comes back;
 * a refused password or certificate is retried too (it may be rotated). */
bool svc_cl_rc_ensure(rconn *r)
{
    if (r->ctx)
        return true;
    svc_redis_link l;
    char err[512];
    /* TCP connect 1 s (as before TLS); a TLS handshake gets 3 s (a managed
     * Redis across a WAN, a loaded node) */
    int rc = svc_redis_open(r->url, r->url->tls ? 3000 : 1000,
                            r->timeout_s > 0 ? r->timeout_s : 10, &l, err, sizeof err);
    if (rc != SVC_REDIS_OK) {
        if (!r->down_logged || strncmp(r->last_err, err, sizeof r->last_err - 1) != 0)
            SVC_WARN("cluster %s: %s (retrying)", r->who, err);
        snprintf(r->last_err, sizeof r->last_err, "%s", err);
        r->down_logged = true;
        return false;
    }
    if (r->down_logged)
        SVC_INFO("cluster %s: connected to %s://%s:%d", r->who, r->url->tls ? "rediss" : "redis",
                 r->url->host, r->url->port);
    r->down_logged = false;
    r->last_err[0] = '\0';
    r->backoff_ms = 0;
    r->ctx = l.ctx;
    r->tls = l.tls;
    return true;
}

void svc_cl_rc_drop(rconn *r)
{
    if (r->ctx) {
        if (!r->down_logged)
            SVC_WARN("cluster %s: lost %s://%s:%d: %s", r->who, r->url->tls ? "rediss" : "redis",
                     r->url->host, r->url->port, r->ctx->errstr[0] ? r->ctx->errstr : "error");
        r->down_logged = true;
        svc_cl_rc_close(r);
    }
}

/* End of a thread: close without a word. */
void svc_cl_rc_close(rconn *r)
{
    svc_redis_link l = {r->ctx, r->tls};
    svc_redis_close(&l);
    r->ctx = NULL;
    r->tls = NULL;
}

/* A command; NULL when the connection failed (it is dropped). */
redisReply *svc_cl_rc_cmd(rconn *r, const char *fmt, ...)
{
    if (!svc_cl_rc_ensure(r))
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(r->ctx, fmt, ap);
    va_end(ap);
    if (!rep)
        svc_cl_rc_drop(r);
    return rep;
}

redisReply *svc_cl_rc_argv(rconn *r, int argc, const char **argv, const size_t *lens)
{
    if (!svc_cl_rc_ensure(r))
        return NULL;
    redisReply *rep = redisCommandArgv(r->ctx, argc, argv, lens);
    if (!rep)
        svc_cl_rc_drop(r);
    return rep;
}

/* Sleep the next backoff step (100 ms doubling to 5 s), waking early
 * when *stop is set. */
void svc_cl_rc_backoff(rconn *r, atomic_bool *stop)
{
    r->backoff_ms = r->backoff_ms ? r->backoff_ms * 2 : 100;
    if (r->backoff_ms > 5000)
        r->backoff_ms = 5000;
    for (int t = 0; t < r->backoff_ms && !(stop && atomic_load(stop)); t += 50)
        usleep(50 * 1000);
}

bool svc_cl_is_error(const redisReply *r)
{
    return !r || r->type == REDIS_REPLY_ERROR;
}

svc_cluster *svc_cluster_new(const svc_cluster_config *cfg)
{
    svc_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cfg = *cfg;
    if (c->cfg.claim_idle_ms <= 0)
        c->cfg.claim_idle_ms = 30000;
    if (c->cfg.result_ttl_s <= 0)
        c->cfg.result_ttl_s = 86400;
    if (c->cfg.max_attempts <= 0)
        c->cfg.max_attempts = 3;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cond, NULL);
    pthread_mutex_init(&c->pop_mu, NULL);
    c->mirror.base.ops = &svc_cl_mirror_ops;
    c->mirror.c = c;
    c->work.base.ops = &svc_cl_work_ops;
    c->work.c = c;
    c->work.work = true;
    c->pop.url = &c->cfg.url;
    c->pop.who = "worker";
    c->pop.timeout_s = 10;
    char host[64] = "node";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(c->consumer, sizeof c->consumer, "%s-%d-%04x", host, (int)getpid(),
             (unsigned)(svc_random_u64() & 0xffff));
    atomic_init(&c->qlen, 0);
    atomic_init(&c->reachable, true);
    return c;
}

svc_queue *svc_cluster_mirror_queue(svc_cluster *c)
{
    return &c->mirror.base;
}

svc_queue *svc_cluster_work_queue(svc_cluster *c)
{
    return &c->work.base;
}

bool svc_cluster_reachable(svc_cluster *c)
{
    return atomic_load(&c->reachable);
}

void svc_cl_post(svc_cluster *c, svc_msg *m)
{
    if (m)
        svc_mailbox_post(c->cfg.mailbox, m);
    else
        SVC_ERROR("cluster: out of memory posting a message");
}

/* ------------------------------------------------------------ queues */

void svc_cl_q_push(svc_queue *q, svc_entry **entries, int n)
{
    (void)q;
    for (int i = 0; i < n; i++)
        svc_entry_free(entries[i]);
}

int svc_cl_q_remove_job(svc_queue *q, uint64_t job)
{
    (void)q;
    (void)job;
    return 0;
}

int svc_cl_q_length(svc_queue *q)
{
    return atomic_load(&((cqueue *)q)->c->qlen);
}

void svc_cl_q_close(svc_queue *q)
{
    svc_cluster *c = ((cqueue *)q)->c;
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
}

void svc_cl_q_destroy(svc_queue *q)
{
    (void)q; /* part of the cluster object */
}

static svc_entry *mirror_pop(svc_queue *q, bool have_shape, int width, int height, int wait_ms)
{
    (void)have_shape;
    (void)width;
    (void)height;
    svc_cluster *c = ((cqueue *)q)->c;
    if (wait_ms >= 0)
        return NULL;
    pthread_mutex_lock(&c->mu);
    while (!c->closed)
        pthread_cond_wait(&c->cond, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

const svc_queue_ops svc_cl_mirror_ops = {svc_cl_q_push,   svc_cl_q_remove_job, mirror_pop,
                                     svc_cl_q_length, svc_cl_q_close,      svc_cl_q_destroy,
                                     NULL /* requeue: a failed device's images fail */};

/* Field `name` of a stream entry's field array. */
const redisReply *svc_cl_field(const redisReply *fields, const char *name)
{
    if (!fields || fields->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < fields->elements; i += 2) {
        const redisReply *k = fields->element[i];
        if (k->type == REDIS_REPLY_STRING && strcmp(k->str, name) == 0)
            return fields->element[i + 1]->type == REDIS_REPLY_STRING ? fields->element[i + 1]
                                                                      : NULL;
    }
    return NULL;
}

const char *svc_cl_field_str(const redisReply *fields, const char *name)
{
    const redisReply *v = svc_cl_field(fields, name);
    return v ? v->str : NULL;
}

int svc_cl_field_int(const redisReply *fields, const char *name, int dflt)
{
    const char *s = svc_cl_field_str(fields, name);
    return s ? atoi(s) : dflt;
}

/* Ack and delete a queue entry (pop connection or publisher's). */
bool svc_cl_ack(svc_cluster *c, rconn *r, const char *id)
{
    redisReply *a = svc_cl_rc_cmd(r, "XACK %s " GROUP " %s", c->k_q, id);
    bool ok = !svc_cl_is_error(a);
    freeReplyObject(a);
    if (ok) {
        redisReply *d = svc_cl_rc_cmd(r, "XDEL %s %s", c->k_q, id);
        freeReplyObject(d);
    }
    return ok;
}

/* Write a `failed` event for an image and ack its entry in one MULTI. */
bool svc_cl_fail_image(svc_cluster *c, rconn *r, const char *id, const char *job, int index,
                       int status, const char *msg, bool dead, int attempts)
{
    if (!svc_cl_rc_ensure(r))
        return false;
    char idx[16], st[16], att[16];
    snprintf(idx, sizeof idx, "%d", index);
    snprintf(st, sizeof st, "%d", status);
    snprintf(att, sizeof att, "%d", attempts);
    int n = 0;
    redisAppendCommand(r->ctx, "MULTI");
    n++;
    if (dead) {
        redisAppendCommand(r->ctx,
                           "XADD %s MAXLEN ~ " DEAD_MAXLEN " * job %s i %s attempts %s "
                           "reason %s consumer %s",
                           c->k_dead, job, idx, att, msg, c->consumer);
        n++;
    }
    redisAppendCommand(r->ctx,
                       "XADD %s MAXLEN ~ " EVENTS_MAXLEN " * t failed job %s i %s status %s "
                       "msg %s",
                       c->k_events, job, idx, st, msg);
    redisAppendCommand(r->ctx, "XACK %s " GROUP " %s", c->k_q, id);
    redisAppendCommand(r->ctx, "XDEL %s %s", c->k_q, id);
    redisAppendCommand(r->ctx, "EXEC");
    n += 4;
    bool ok = true;
    for (int i = 0; i < n; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(r->ctx, (void **)&rep) != REDIS_OK) {
            svc_cl_rc_drop(r);
            return false;
        }
        if (i == n - 1)
            ok = rep && rep->type == REDIS_REPLY_ARRAY;
        freeReplyObject(rep);
    }
    return ok;
}

void svc_cl_ensure_group(svc_cluster *c, rconn *r)
{
    redisReply *rep = svc_cl_rc_cmd(r, "XGROUP CREATE %s " GROUP " 0 MKSTREAM", c->k_q);
    freeReplyObject(rep); /* BUSYGROUP: it exists */
}

/* ------------------------------------------------------------ life */

int svc_cluster_start(svc_cluster *c, const char *model_name)
{
    char name[256];
    size_t k = 0;
    for (const char *p = model_name; *p && k + 1 < sizeof name; p++)
        name[k++] = (*p == ' ' || *p == ':' || (unsigned char)*p < 0x20) ? '_' : *p;
    name[k] = '\0';
    snprintf(c->prefix, sizeof c->prefix, "tsr:%s:", name);
    snprintf(c->k_q, sizeof c->k_q, "%sq", c->prefix);
    snprintf(c->k_events, sizeof c->k_events, "%sevents", c->prefix);
    snprintf(c->k_dead, sizeof c->k_dead, "%sdead", c->prefix);
    void *(*mains[3])(void *) = {svc_cl_command_main, svc_cl_follower_main, svc_cl_publisher_main};
    const bool want[3] = {true, c->cfg.role != TSR_ROLE_WORKER, c->cfg.role != TSR_ROLE_API};
    for (int i = 0; i < 3; i++) {
        if (!want[i])
            continue;
        if (pthread_create(&c->threads[i], NULL, mains[i], c) != 0) {
            SVC_ERROR("cluster: cannot start a thread");
            return -1;
        }
        c->have_threads[i] = true;
    }
    pthread_mutex_lock(&c->mu);
    c->started = true;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
    SVC_INFO("cluster: queue %s://%s%s%s:%d/%d%s, keys %s*, consumer %s",
             c->cfg.url.tls ? "rediss" : "redis", c->cfg.url.user, c->cfg.url.user[0] ? "@" : "",
             c->cfg.url.host, c->cfg.url.port, c->cfg.url.db,
             c->cfg.url.password[0] ? " (password set)" : "", c->prefix, c->consumer);
    return 0;
}

void svc_cluster_stop(svc_cluster *c, int wait_s)
{
    if (!c)
        return;
    svc_cl_q_close(&c->mirror.base);
    /* the publisher sends what it holds first */
    atomic_store(&c->stop_publisher, true);
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
    if (c->have_threads[2]) {
        const double deadline = svc_now_mono() + wait_s;
        for (;;) {
            pthread_mutex_lock(&c->mu);
            bool empty = c->p_head == NULL;
            pthread_mutex_unlock(&c->mu);
            if (empty || svc_now_mono() > deadline)
                break;
            usleep(20 * 1000);
        }
    }
    atomic_store(&c->stop, true);
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < 3; i++)
        if (c->have_threads[i]) {
            pthread_join(c->threads[i], NULL);
            c->have_threads[i] = false;
        }
}

void svc_cluster_free(svc_cluster *c)
{
    if (!c)
        return;
    svc_cluster_stop(c, 0);
    for (atask *t = c->a_head, *n; t; t = n) {
        n = t->next;
        svc_cl_free_atask(t);
    }
    for (ptask *t = c->p_head, *n; t; t = n) {
        n = t->next;
        svc_cl_free_ptask(t);
    }
    for (inflight *f = c->flying, *n; f; f = n) {
        n = f->next;
        free(f);
    }
    svc_cl_rc_close(&c->pop);
    svc_redis_url_wipe(&c->cfg.url);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->pop_mu);
    free(c);
}

void svc_cluster_metrics(svc_cluster *c, struct evbuffer *out)
{
    if (!c)
        return;
    evbuffer_add_printf(out,
                        "# HELP tessera_cluster_queue_entries Images in the shared queue "
                        "(waiting or taken, not yet acked).\n"
                        "# TYPE tessera_cluster_queue_entries gauge\n"
                        "tessera_cluster_queue_entries %d\n",
                        atomic_load(&c->qlen));
    evbuffer_add_printf(out, "# HELP tessera_cluster_pending Images taken and not yet acked, "
                             "per consumer.\n# TYPE tessera_cluster_pending gauge\n");
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n_pending; i++) {
        char name[128];
        size_t k = 0;
        for (const char *p = c->pending[i].name; *p && k + 1 < sizeof name; p++)
            if (*p != '"' && *p != '\\' && *p != '\n')
                name[k++] = *p;
        name[k] = '\0';
        evbuffer_add_printf(out, "tessera_cluster_pending{consumer=\"%s\"} %lld\n", name,
                            c->pending[i].count);
    }
    pthread_mutex_unlock(&c->mu);
    evbuffer_add_printf(out,
                        "# HELP tessera_cluster_claims_total Images this node took over from "
                        "another consumer (XAUTOCLAIM).\n"
                        "# TYPE tessera_cluster_claims_total counter\n"
                        "tessera_cluster_claims_total %lld\n"
                        "# HELP tessera_cluster_dead_letters Entries in the dead-letter stream.\n"
                        "# TYPE tessera_cluster_dead_letters gauge\n"
                        "tessera_cluster_dead_letters %lld\n"
                        "# HELP tessera_cluster_dead_lettered_total Images this node "
                        "dead-lettered.\n"
                        "# TYPE tessera_cluster_dead_lettered_total counter\n"
                        "tessera_cluster_dead_lettered_total %lld\n"
                        "# HELP tessera_cluster_results_total Results this node stored.\n"
                        "# TYPE tessera_cluster_results_total counter\n"
                        "tessera_cluster_results_total %lld\n"
                        "# HELP tessera_cluster_up Whether Redis answered the last refresh.\n"
                        "# TYPE tessera_cluster_up gauge\n"
                        "tessera_cluster_up %d\n",
                        atomic_load(&c->claims), atomic_load(&c->dead_len),
                        atomic_load(&c->dead_total), atomic_load(&c->results),
                        atomic_load(&c->reachable) ? 1 : 0);
}

