/*
 * service/cluster.c - see cluster.h; the design is docs/scale-out.md.
 *
 * Keys (prefix tsr:<model>:): q (stream, group "workers", one entry per
 * image), events (stream: accept / started / step / image / failed),
 * png:<job>:<i> (result, EX --result-ttl), tries:<job>:<i> (takes), dead
 * (dead letters).  Event fields: t (type), job, i (index) and per type
 * rec | step, steps | etag, bytes, info | status, msg.
 */
#include "cluster.h"

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

#include "json.h"
#include "log.h"
#include "params.h"
#include "service.h"
#include "store.h"
#include "tessera.h"
#include "util.h"

#define EVENTS_MAXLEN "1000000"
#define DEAD_MAXLEN "10000"
#define GROUP "workers"

/* ------------------------------------------------------------ connections */

typedef struct rconn {
    const svc_redis_url *url;
    redisContext *ctx;
    int backoff_ms;
    bool down_logged;
    const char *who;
    int timeout_s;
} rconn;

static bool rc_ensure(rconn *r)
{
    if (r->ctx)
        return true;
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout(r->url->host, r->url->port, tv);
    if (!c || c->err) {
        if (!r->down_logged)
            SVC_WARN("cluster %s: cannot reach redis://%s:%d: %s (retrying)", r->who,
                     r->url->host, r->url->port, c ? c->errstr : "out of memory");
        r->down_logged = true;
        redisFree(c);
        return false;
    }
    struct timeval io = {r->timeout_s > 0 ? r->timeout_s : 10, 0};
    redisSetTimeout(c, io);
    if (r->url->db) {
        redisReply *rep = redisCommand(c, "SELECT %d", r->url->db);
        bool ok = rep && rep->type != REDIS_REPLY_ERROR;
        if (!ok)
            SVC_WARN("cluster %s: SELECT %d failed: %s", r->who, r->url->db,
                     rep ? rep->str : c->errstr);
        freeReplyObject(rep);
        if (!ok) {
            redisFree(c);
            return false;
        }
    }
    if (r->down_logged)
        SVC_INFO("cluster %s: connected to redis://%s:%d", r->who, r->url->host, r->url->port);
    r->down_logged = false;
    r->backoff_ms = 0;
    r->ctx = c;
    return true;
}

static void rc_drop(rconn *r)
{
    if (r->ctx) {
        if (!r->down_logged)
            SVC_WARN("cluster %s: lost redis://%s:%d: %s", r->who, r->url->host, r->url->port,
                     r->ctx->errstr[0] ? r->ctx->errstr : "error");
        r->down_logged = true;
        redisFree(r->ctx);
        r->ctx = NULL;
    }
}

/* End of a thread: close without a word. */
static void rc_close(rconn *r)
{
    redisFree(r->ctx);
    r->ctx = NULL;
}

/* A command; NULL when the connection failed (it is dropped). */
static redisReply *rc_cmd(rconn *r, const char *fmt, ...)
{
    if (!rc_ensure(r))
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(r->ctx, fmt, ap);
    va_end(ap);
    if (!rep)
        rc_drop(r);
    return rep;
}

static redisReply *rc_argv(rconn *r, int argc, const char **argv, const size_t *lens)
{
    if (!rc_ensure(r))
        return NULL;
    redisReply *rep = redisCommandArgv(r->ctx, argc, argv, lens);
    if (!rep)
        rc_drop(r);
    return rep;
}

/* Sleep the next backoff step (100 ms doubling to 5 s), waking early
 * when *stop is set. */
static void rc_backoff(rconn *r, atomic_bool *stop)
{
    r->backoff_ms = r->backoff_ms ? r->backoff_ms * 2 : 100;
    if (r->backoff_ms > 5000)
        r->backoff_ms = 5000;
    for (int t = 0; t < r->backoff_ms && !(stop && atomic_load(stop)); t += 50)
        usleep(50 * 1000);
}

static bool is_error(const redisReply *r)
{
    return !r || r->type == REDIS_REPLY_ERROR;
}

/* ------------------------------------------------------------ the object */

typedef enum ptask_type { PT_STARTED, PT_STEP, PT_STORED, PT_FAILED, PT_CANCELLED } ptask_type;

typedef struct ptask {
    ptask_type type;
    uint64_t job;
    int index, step, steps, status;
    char etag[33];
    size_t bytes;
    char *text;
    struct ptask *next;
} ptask;

typedef struct atask {
    uint64_t cancel;      /* a cancel instead of an accept */
    char **ids, **recs;
    int *images;
    int n;
    void *cookie;
    struct atask *next;
} atask;

/* An image this node's workers hold (taken, not acked). */
typedef struct inflight {
    uint64_t job;
    int index;
    char id[48];
    struct inflight *next;
} inflight;

typedef struct cqueue {
    svc_queue base;
    svc_cluster *c;
    bool work;
} cqueue;

typedef struct consumer_pending {
    char name[128];
    long long count;
} consumer_pending;

struct svc_cluster {
    svc_cluster_config cfg;
    char prefix[300];
    char k_q[320], k_events[320], k_dead[320];
    char consumer[128];
    cqueue mirror, work;

    pthread_mutex_t mu;
    pthread_cond_t cond;      /* tasks, start, close */
    bool started, closed;
    atomic_bool stop, stop_publisher;
    ptask *p_head, *p_tail;   /* publisher tasks */
    atask *a_head, *a_tail;   /* accept tasks */
    inflight *flying;
    consumer_pending pending[32];
    int n_pending;
    bool have_threads[3];
    pthread_t threads[3];     /* command, follower, publisher */

    pthread_mutex_t pop_mu;   /* the pop connection */
    rconn pop;
    double last_claim;

    atomic_int qlen;          /* XLEN q (waiting + taken), refreshed */
    atomic_llong dead_len, claims, dead_total, results, attempts_over;
    atomic_bool reachable;
};

static const svc_queue_ops mirror_ops, work_ops;

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
    c->mirror.base.ops = &mirror_ops;
    c->mirror.c = c;
    c->work.base.ops = &work_ops;
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

static void post(svc_cluster *c, svc_msg *m)
{
    if (m)
        svc_mailbox_post(c->cfg.mailbox, m);
    else
        SVC_ERROR("cluster: out of memory posting a message");
}

/* ------------------------------------------------------------ queues */

static void q_push(svc_queue *q, svc_entry **entries, int n)
{
    (void)q;
    for (int i = 0; i < n; i++)
        svc_entry_free(entries[i]);
}

static int q_remove_job(svc_queue *q, uint64_t job)
{
    (void)q;
    (void)job;
    return 0;
}

static int q_length(svc_queue *q)
{
    return atomic_load(&((cqueue *)q)->c->qlen);
}

static void q_close(svc_queue *q)
{
    svc_cluster *c = ((cqueue *)q)->c;
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
}

static void q_destroy(svc_queue *q)
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

static const svc_queue_ops mirror_ops = {q_push, q_remove_job, mirror_pop, q_length, q_close,
                                         q_destroy};

/* Field `name` of a stream entry's field array. */
static const redisReply *field(const redisReply *fields, const char *name)
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

static const char *field_str(const redisReply *fields, const char *name)
{
    const redisReply *v = field(fields, name);
    return v ? v->str : NULL;
}

static int field_int(const redisReply *fields, const char *name, int dflt)
{
    const char *s = field_str(fields, name);
    return s ? atoi(s) : dflt;
}

/* Ack and delete a queue entry (pop connection or publisher's). */
static bool ack(svc_cluster *c, rconn *r, const char *id)
{
    redisReply *a = rc_cmd(r, "XACK %s " GROUP " %s", c->k_q, id);
    bool ok = !is_error(a);
    freeReplyObject(a);
    if (ok) {
        redisReply *d = rc_cmd(r, "XDEL %s %s", c->k_q, id);
        freeReplyObject(d);
    }
    return ok;
}

/* Write a `failed` event for an image and ack its entry in one MULTI. */
static bool fail_image(svc_cluster *c, rconn *r, const char *id, const char *job, int index,
                       int status, const char *msg, bool dead, int attempts)
{
    if (!rc_ensure(r))
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
            rc_drop(r);
            return false;
        }
        if (i == n - 1)
            ok = rep && rep->type == REDIS_REPLY_ARRAY;
        freeReplyObject(rep);
    }
    return ok;
}

static void ensure_group(svc_cluster *c, rconn *r)
{
    redisReply *rep = rc_cmd(r, "XGROUP CREATE %s " GROUP " 0 MKSTREAM", c->k_q);
    freeReplyObject(rep); /* BUSYGROUP: it exists */
}

/* One stream entry taken (new or claimed): an svc_entry, or NULL when it
 * was dealt with here (already stored, dead-lettered, unreadable). */
static svc_entry *take(svc_cluster *c, const redisReply *ent)
{
    if (ent->type != REDIS_REPLY_ARRAY || ent->elements < 2 ||
        ent->element[0]->type != REDIS_REPLY_STRING)
        return NULL;
    const char *id = ent->element[0]->str;
    const redisReply *fields = ent->element[1];
    const char *job = field_str(fields, "job");
    const char *rec = field_str(fields, "rec");
    int index = field_int(fields, "i", -1);
    uint64_t jid = 0;
    if (!job || !rec || index < 0 || index >= SVC_MAX_IMAGES_PER_JOB ||
        !svc_id_parse(job, 'j', &jid)) {
        SVC_WARN("cluster: queue entry %s is not an image of a job; dropped", id);
        ack(c, &c->pop, id);
        return NULL;
    }
    /* stored already (a worker died between the store and the ack) */
    redisReply *ex = rc_cmd(&c->pop, "EXISTS %spng:%s:%d", c->prefix, job, index);
    bool stored = ex && ex->type == REDIS_REPLY_INTEGER && ex->integer > 0;
    freeReplyObject(ex);
    if (!ex)
        return NULL;
    if (stored) {
        ack(c, &c->pop, id);
        return NULL;
    }
    redisReply *cx = rc_cmd(&c->pop, "EXISTS %scancel:%s", c->prefix, job);
    bool cancelled = cx && cx->type == REDIS_REPLY_INTEGER && cx->integer > 0;
    freeReplyObject(cx);
    if (cancelled) {
        ack(c, &c->pop, id); /* every mirror has cancelled the job */
        return NULL;
    }
    redisReply *tr = rc_cmd(&c->pop, "INCR %stries:%s:%d", c->prefix, job, index);
    long long tries = tr && tr->type == REDIS_REPLY_INTEGER ? tr->integer : 1;
    freeReplyObject(tr);
    redisReply *te = rc_cmd(&c->pop, "EXPIRE %stries:%s:%d 86400", c->prefix, job, index);
    freeReplyObject(te);
    if (tries > c->cfg.max_attempts) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "dead-lettered after %lld attempts (the worker running it died or was "
                 "stopped each time)",
                 tries - 1);
        SVC_WARN("cluster: job %s image %d %s", job, index, msg);
        if (fail_image(c, &c->pop, id, job, index, TSR_ERR_INTERNAL, msg, true, (int)tries - 1))
            atomic_fetch_add(&c->dead_total, 1);
        return NULL;
    }
    char err[128];
    cJSON *o = svc_json_parse(rec, strlen(rec), err, sizeof err);
    const cJSON *req = o ? cJSON_GetObjectItemCaseSensitive(o, "request") : NULL;
    svc_params_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.default_size = 512;
    ctx.max_size = TSR_MAX_SIZE;
    svc_params *p = NULL;
    svc_param_error pe;
    if (!req || svc_params_parse(req, NULL, &ctx, &p, &pe) < 0) {
        cJSON_Delete(o);
        fail_image(c, &c->pop, id, job, index, TSR_ERR_INVALID,
                   "the queued request cannot be read", true, (int)tries);
        atomic_fetch_add(&c->dead_total, 1);
        return NULL;
    }
    /* fault injection for tests/cluster: a "poison" prompt that kills the
     * worker taking it (after its take was counted), as a crashing job would */
    const char *poison = getenv("TSR_TEST_POISON_PROMPT");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(req, "prompt");
    if (poison && cJSON_IsString(prompt) && strcmp(prompt->valuestring, poison) == 0) {
        SVC_ERROR("cluster: TSR_TEST_POISON_PROMPT taken (job %s image %d): crashing", job, index);
        raise(SIGKILL); /* no core file */
    }
    cJSON_Delete(o);
    svc_entry *e = index < p->n ? svc_entry_new(jid, index, p) : NULL;
    svc_params_unref(p);
    inflight *f = e ? calloc(1, sizeof *f) : NULL;
    if (!f) {
        svc_entry_free(e);
        return NULL; /* stays pending: another take later */
    }
    f->job = jid;
    f->index = index;
    snprintf(f->id, sizeof f->id, "%s", id);
    pthread_mutex_lock(&c->mu);
    f->next = c->flying;
    c->flying = f;
    pthread_mutex_unlock(&c->mu);
    return e;
}

/* The first entry of an XREADGROUP reply (or NULL). */
static const redisReply *first_read(const redisReply *rep)
{
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements < 1)
        return NULL;
    const redisReply *s = rep->element[0];
    if (s->type != REDIS_REPLY_ARRAY || s->elements < 2)
        return NULL;
    const redisReply *list = s->element[1];
    if (list->type != REDIS_REPLY_ARRAY || list->elements < 1)
        return NULL;
    return list->element[0];
}

static bool is_closed(svc_cluster *c)
{
    pthread_mutex_lock(&c->mu);
    bool closed = c->closed;
    pthread_mutex_unlock(&c->mu);
    return closed;
}

static svc_entry *work_pop(svc_queue *q, bool have_shape, int width, int height, int wait_ms)
{
    (void)have_shape;
    (void)width;
    (void)height;
    svc_cluster *c = ((cqueue *)q)->c;
    /* the key prefix is known once engine 0 is open */
    pthread_mutex_lock(&c->mu);
    while (!c->started && !c->closed && wait_ms < 0)
        pthread_cond_wait(&c->cond, &c->mu);
    bool go = c->started && !c->closed;
    pthread_mutex_unlock(&c->mu);
    if (!go)
        return NULL;
    const double deadline = svc_now_mono() + (wait_ms > 0 ? wait_ms / 1000.0 : 0);
    svc_entry *e = NULL;
    pthread_mutex_lock(&c->pop_mu);
    while (!e && !is_closed(c)) {
        if (!rc_ensure(&c->pop)) {
            if (wait_ms >= 0)
                break;
            rc_backoff(&c->pop, NULL);
            continue;
        }
        /* a dead consumer's image first */
        const double now = svc_now_mono();
        if (now - c->last_claim >= c->cfg.claim_idle_ms / 4000.0) {
            c->last_claim = now;
            redisReply *rep = rc_cmd(&c->pop, "XAUTOCLAIM %s " GROUP " %s %d 0-0 COUNT 1",
                                     c->k_q, c->consumer, c->cfg.claim_idle_ms);
            if (rep && rep->type == REDIS_REPLY_ERROR && strstr(rep->str, "NOGROUP"))
                ensure_group(c, &c->pop);
            if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 &&
                rep->element[1]->type == REDIS_REPLY_ARRAY && rep->element[1]->elements > 0) {
                const redisReply *ent = rep->element[1]->element[0];
                if (ent->type == REDIS_REPLY_ARRAY && ent->elements >= 1 &&
                    ent->element[0]->type == REDIS_REPLY_STRING) {
                    atomic_fetch_add(&c->claims, 1);
                    SVC_INFO("cluster: claimed %s (pending on a consumer for %d ms)",
                             ent->element[0]->str, c->cfg.claim_idle_ms);
                    e = take(c, ent);
                }
                c->last_claim = 0; /* there may be more */
            }
            freeReplyObject(rep);
            if (e)
                break;
        }
        int block = 0;
        if (wait_ms < 0)
            block = 200;
        else if (wait_ms > 0) {
            block = (int)((deadline - svc_now_mono()) * 1000.0);
            if (block <= 0)
                break;
            if (block > 200)
                block = 200;
        }
        redisReply *rep =
            block > 0 ? rc_cmd(&c->pop,
                               "XREADGROUP GROUP " GROUP " %s COUNT 1 BLOCK %d STREAMS %s >",
                               c->consumer, block, c->k_q)
                      : rc_cmd(&c->pop, "XREADGROUP GROUP " GROUP " %s COUNT 1 STREAMS %s >",
                               c->consumer, c->k_q);
        if (rep && rep->type == REDIS_REPLY_ERROR) {
            if (strstr(rep->str, "NOGROUP"))
                ensure_group(c, &c->pop);
            else
                SVC_WARN("cluster: XREADGROUP: %s", rep->str);
        }
        const redisReply *ent = first_read(rep);
        if (ent)
            e = take(c, ent);
        freeReplyObject(rep);
        if (!rep && wait_ms < 0)
            rc_backoff(&c->pop, NULL);
        if (e || wait_ms == 0)
            break;
    }
    pthread_mutex_unlock(&c->pop_mu);
    return e;
}

static const svc_queue_ops work_ops = {q_push, q_remove_job, work_pop, q_length, q_close,
                                       q_destroy};

/* ------------------------------------------------------------ accepts */

void svc_cluster_accept(svc_cluster *c, char **ids, int *images, char **recs, int n,
                        void *cookie)
{
    atask *t = calloc(1, sizeof *t);
    if (!t) {
        for (int i = 0; i < n; i++) {
            free(ids[i]);
            free(recs[i]);
        }
        free(ids);
        free(recs);
        free(images);
        svc_msg *m = svc_msg_new(SVC_MSG_TASK_DONE);
        if (m) {
            m->cookie = cookie;
            m->status = -ENOMEM;
        }
        post(c, m);
        return;
    }
    t->ids = ids;
    t->recs = recs;
    t->images = images;
    t->n = n;
    t->cookie = cookie;
    pthread_mutex_lock(&c->mu);
    if (c->a_tail)
        c->a_tail->next = t;
    else
        c->a_head = t;
    c->a_tail = t;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
}

void svc_cluster_cancel(svc_cluster *c, uint64_t job)
{
    atask *t = calloc(1, sizeof *t);
    if (!t) {
        SVC_ERROR("cluster: out of memory sending a cancel");
        return;
    }
    t->cancel = job;
    pthread_mutex_lock(&c->mu);
    if (c->a_tail)
        c->a_tail->next = t;
    else
        c->a_head = t;
    c->a_tail = t;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
}

static void run_cancel(svc_cluster *c, rconn *r, uint64_t job)
{
    char id[20];
    svc_id_format('j', job, id);
    redisReply *a = rc_cmd(r, "SET %scancel:%s 1 EX %d", c->prefix, id, c->cfg.result_ttl_s);
    redisReply *b = a ? rc_cmd(r, "XADD %s MAXLEN ~ " EVENTS_MAXLEN " * t cancel job %s",
                               c->k_events, id)
                      : NULL;
    if (is_error(a) || is_error(b))
        SVC_WARN("cluster: the cancel of %s could not be sent to the other nodes", id);
    freeReplyObject(a);
    freeReplyObject(b);
}

static int run_accept(svc_cluster *c, rconn *r, atask *t)
{
    if (!rc_ensure(r))
        return -EAGAIN;
    int cmds = 0;
    redisAppendCommand(r->ctx, "MULTI");
    cmds++;
    for (int k = 0; k < t->n; k++) {
        for (int i = 0; i < t->images[k]; i++) {
            redisAppendCommand(r->ctx, "XADD %s * job %s i %d rec %s", c->k_q, t->ids[k], i,
                               t->recs[k]);
            cmds++;
        }
        redisAppendCommand(r->ctx, "XADD %s MAXLEN ~ " EVENTS_MAXLEN " * t accept job %s rec %s",
                           c->k_events, t->ids[k], t->recs[k]);
        cmds++;
    }
    redisAppendCommand(r->ctx, "EXEC");
    cmds++;
    int rc = 0;
    for (int i = 0; i < cmds; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(r->ctx, (void **)&rep) != REDIS_OK) {
            rc_drop(r);
            return -EAGAIN;
        }
        if (i == cmds - 1 && (!rep || rep->type != REDIS_REPLY_ARRAY))
            rc = -EIO;
        freeReplyObject(rep);
    }
    return rc;
}

static void free_atask(atask *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->ids[i]);
        free(t->recs[i]);
    }
    free(t->ids);
    free(t->recs);
    free(t->images);
    free(t);
}

/* XLEN q, XLEN dead, XPENDING summary. */
static void refresh_figures(svc_cluster *c, rconn *r)
{
    redisReply *a = rc_cmd(r, "XLEN %s", c->k_q);
    if (a && a->type == REDIS_REPLY_INTEGER)
        atomic_store(&c->qlen, (int)(a->integer > INT_MAX ? INT_MAX : a->integer));
    atomic_store(&c->reachable, a != NULL);
    freeReplyObject(a);
    if (!a)
        return;
    redisReply *d = rc_cmd(r, "XLEN %s", c->k_dead);
    if (d && d->type == REDIS_REPLY_INTEGER)
        atomic_store(&c->dead_len, d->integer);
    freeReplyObject(d);
    redisReply *p = rc_cmd(r, "XPENDING %s " GROUP, c->k_q);
    consumer_pending list[32];
    int n = 0;
    if (p && p->type == REDIS_REPLY_ARRAY && p->elements >= 4 &&
        p->element[3]->type == REDIS_REPLY_ARRAY) {
        const redisReply *cs = p->element[3];
        for (size_t i = 0; i < cs->elements && n < 32; i++) {
            const redisReply *e = cs->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
                e->element[0]->type != REDIS_REPLY_STRING ||
                e->element[1]->type != REDIS_REPLY_STRING)
                continue;
            snprintf(list[n].name, sizeof list[n].name, "%s", e->element[0]->str);
            list[n].count = atoll(e->element[1]->str);
            n++;
        }
    }
    if (p && p->type == REDIS_REPLY_ERROR && strstr(p->str, "NOGROUP"))
        ensure_group(c, r);
    freeReplyObject(p);
    pthread_mutex_lock(&c->mu);
    memcpy(c->pending, list, (size_t)n * sizeof list[0]);
    c->n_pending = n;
    pthread_mutex_unlock(&c->mu);
}

static void *command_main(void *arg)
{
    svc_cluster *c = arg;
    rconn r = {.url = &c->cfg.url, .who = "api", .timeout_s = 5};
    double next_refresh = 0;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->a_head && !atomic_load(&c->stop) && svc_now_mono() < next_refresh) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 250 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&c->cond, &c->mu, &ts);
        }
        atask *t = c->a_head;
        if (t) {
            c->a_head = t->next;
            if (!c->a_head)
                c->a_tail = NULL;
        }
        pthread_mutex_unlock(&c->mu);
        if (!t && atomic_load(&c->stop))
            break;
        if (t && t->cancel) {
            run_cancel(c, &r, t->cancel);
            free_atask(t);
            continue;
        }
        if (t) {
            int rc = run_accept(c, &r, t);
            if (rc == -EAGAIN)
                atomic_store(&c->reachable, false);
            svc_msg *m = svc_msg_new(SVC_MSG_TASK_DONE);
            if (m) {
                m->cookie = t->cookie;
                m->status = rc;
            }
            post(c, m);
            free_atask(t);
            continue;
        }
        refresh_figures(c, &r);
        next_refresh = svc_now_mono() + 0.25;
    }
    rc_close(&r);
    return NULL;
}

/* ------------------------------------------------------------ follower */

static svc_msg *image_msg(svc_msg_type type, uint64_t job, int index)
{
    svc_msg *m = svc_msg_new(type);
    if (m) {
        m->job = job;
        m->index = index;
    }
    return m;
}

/* The result of an `image` event into <data_dir>/jobs/<job>/<i>.png. */
static int copy_png(svc_cluster *c, rconn *r, const char *job, int index, size_t *bytes)
{
    char path[PATH_MAX], dir[PATH_MAX];
    svc_store_image_path(c->cfg.data_dir, job, index, path, sizeof path);
    if (access(path, R_OK) == 0)
        return 0; /* a copy from before a restart */
    redisReply *rep = rc_cmd(r, "GET %spng:%s:%d", c->prefix, job, index);
    if (!rep)
        return -EAGAIN;
    int rc = 0;
    if (rep->type != REDIS_REPLY_STRING) {
        rc = -ENOENT;
    } else {
        snprintf(dir, sizeof dir, "%s/jobs/%s", c->cfg.data_dir, job);
        rc = svc_mkdirs(dir);
        if (rc == 0)
            rc = svc_write_file_atomic(path, rep->str, rep->len);
        *bytes = rep->len;
    }
    freeReplyObject(rep);
    return rc;
}

/* One event-stream entry into a mailbox message.  false: retry (Redis). */
static bool follow_one(svc_cluster *c, rconn *r, const redisReply *fields)
{
    const char *t = field_str(fields, "t");
    const char *job = field_str(fields, "job");
    uint64_t jid = 0;
    if (!t || !job || !svc_id_parse(job, 'j', &jid))
        return true;
    const int index = field_int(fields, "i", 0);
    svc_msg *m = NULL;
    if (strcmp(t, "accept") == 0) {
        const char *rec = field_str(fields, "rec");
        if (!rec)
            return true;
        m = svc_msg_new(SVC_MSG_CLUSTER_ACCEPT);
        if (m) {
            m->job = jid;
            m->text = strdup(rec);
        }
    } else if (strcmp(t, "cancel") == 0) {
        m = svc_msg_new(SVC_MSG_CLUSTER_CANCEL);
        if (m)
            m->job = jid;
    } else if (strcmp(t, "started") == 0) {
        m = image_msg(SVC_MSG_IMAGE_STARTED, jid, index);
    } else if (strcmp(t, "step") == 0) {
        m = image_msg(SVC_MSG_IMAGE_STEP, jid, index);
        if (m) {
            m->step = field_int(fields, "step", 0);
            m->steps = field_int(fields, "steps", 0);
        }
    } else if (strcmp(t, "image") == 0) {
        size_t bytes = 0;
        int rc = copy_png(c, r, job, index, &bytes);
        if (rc == -EAGAIN)
            return false;
        if (rc < 0) {
            m = image_msg(SVC_MSG_IMAGE_FAILED, jid, index);
            if (m) {
                m->status = TSR_ERR_IO;
                m->text = strdup(rc == -ENOENT ? "the result expired from the queue's store "
                                               "(--result-ttl) before this node copied it"
                                               : "the result cannot be written to --data-dir");
            }
        } else {
            m = image_msg(SVC_MSG_IMAGE_STORED, jid, index);
            if (m) {
                const char *etag = field_str(fields, "etag");
                const char *info = field_str(fields, "info");
                snprintf(m->etag, sizeof m->etag, "%s", etag ? etag : "");
                const char *b = field_str(fields, "bytes");
                m->bytes = b ? (size_t)strtoull(b, NULL, 10) : bytes;
                m->text = info ? strdup(info) : NULL;
            }
        }
    } else if (strcmp(t, "failed") == 0) {
        m = image_msg(SVC_MSG_IMAGE_FAILED, jid, index);
        if (m) {
            m->status = field_int(fields, "status", TSR_ERR_INTERNAL);
            const char *msg = field_str(fields, "msg");
            m->text = strdup(msg ? msg : "failed");
        }
    } else {
        return true;
    }
    post(c, m);
    return true;
}

static void *follower_main(void *arg)
{
    svc_cluster *c = arg;
    rconn r = {.url = &c->cfg.url, .who = "follower", .timeout_s = 10};
    char cursor[64] = "0";
    while (!atomic_load(&c->stop)) {
        redisReply *rep = rc_cmd(&r, "XREAD COUNT 256 BLOCK 1000 STREAMS %s %s", c->k_events,
                                 cursor);
        if (!rep) {
            rc_backoff(&r, &c->stop);
            continue;
        }
        const redisReply *list = NULL;
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
            rep->element[0]->type == REDIS_REPLY_ARRAY && rep->element[0]->elements >= 2)
            list = rep->element[0]->element[1];
        for (size_t i = 0; list && i < list->elements && !atomic_load(&c->stop); i++) {
            const redisReply *ent = list->element[i];
            if (ent->type != REDIS_REPLY_ARRAY || ent->elements < 2 ||
                ent->element[0]->type != REDIS_REPLY_STRING)
                continue;
            while (!follow_one(c, &r, ent->element[1]) && !atomic_load(&c->stop))
                rc_backoff(&r, &c->stop);
            snprintf(cursor, sizeof cursor, "%s", ent->element[0]->str);
        }
        freeReplyObject(rep);
    }
    rc_close(&r);
    return NULL;
}

/* ------------------------------------------------------------ publisher */

void svc_cluster_forward(svc_cluster *c, const svc_msg *m)
{
    ptask *t = calloc(1, sizeof *t);
    if (!t) {
        SVC_ERROR("cluster: out of memory forwarding an event (the image reruns elsewhere)");
        return;
    }
    t->job = m->job;
    t->index = m->index;
    switch (m->type) {
    case SVC_MSG_IMAGE_STARTED: t->type = PT_STARTED; break;
    case SVC_MSG_IMAGE_STEP:
        t->type = PT_STEP;
        t->step = m->step;
        t->steps = m->steps;
        break;
    case SVC_MSG_IMAGE_STORED:
        t->type = PT_STORED;
        snprintf(t->etag, sizeof t->etag, "%s", m->etag);
        t->bytes = m->bytes;
        t->text = m->text ? strdup(m->text) : NULL;
        break;
    case SVC_MSG_IMAGE_FAILED:
        t->type = PT_FAILED;
        t->status = m->status;
        t->text = strdup(m->text ? m->text : "failed");
        break;
    case SVC_MSG_IMAGE_CANCELLED: t->type = PT_CANCELLED; break;
    default: free(t); return;
    }
    pthread_mutex_lock(&c->mu);
    if (c->p_tail)
        c->p_tail->next = t;
    else
        c->p_head = t;
    c->p_tail = t;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
}

/* Remove (job, index) from the in-flight list; its stream id into id. */
static bool land(svc_cluster *c, uint64_t job, int index, char *id, size_t size)
{
    bool found = false;
    pthread_mutex_lock(&c->mu);
    for (inflight **pp = &c->flying; *pp; pp = &(*pp)->next) {
        if ((*pp)->job == job && (*pp)->index == index) {
            inflight *f = *pp;
            snprintf(id, size, "%s", f->id);
            *pp = f->next;
            free(f);
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}

static bool flight_id(svc_cluster *c, uint64_t job, int index, char *id, size_t size)
{
    bool found = false;
    pthread_mutex_lock(&c->mu);
    for (inflight *f = c->flying; f; f = f->next)
        if (f->job == job && f->index == index) {
            snprintf(id, size, "%s", f->id);
            found = true;
            break;
        }
    pthread_mutex_unlock(&c->mu);
    return found;
}

/* One task; false: Redis is away, retry it. */
static bool publish(svc_cluster *c, rconn *r, ptask *t)
{
    char job[20], idx[16];
    svc_id_format('j', t->job, job);
    snprintf(idx, sizeof idx, "%d", t->index);
    char id[48];
    switch (t->type) {
    case PT_STARTED: {
        redisReply *rep = rc_cmd(r,
                                 "XADD %s MAXLEN ~ " EVENTS_MAXLEN
                                 " * t started job %s i %s consumer %s",
                                 c->k_events, job, idx, c->consumer);
        freeReplyObject(rep);
        return rep != NULL;
    }
    case PT_STEP: {
        redisReply *rep = rc_cmd(r,
                                 "XADD %s MAXLEN ~ " EVENTS_MAXLEN
                                 " * t step job %s i %s step %d steps %d",
                                 c->k_events, job, idx, t->step, t->steps);
        freeReplyObject(rep);
        return rep != NULL;
    }
    case PT_CANCELLED:
        /* cut short by a drain: not acked, so another worker claims it */
        land(c, t->job, t->index, id, sizeof id);
        return true;
    case PT_FAILED:
        if (!flight_id(c, t->job, t->index, id, sizeof id))
            return true;
        if (!fail_image(c, r, id, job, t->index, t->status, t->text, false, 0))
            return false;
        land(c, t->job, t->index, id, sizeof id);
        return true;
    case PT_STORED: break;
    }
    /* the result, then its event, in one MULTI; then the ack */
    char path[PATH_MAX];
    svc_store_image_path(c->cfg.scratch_dir, job, t->index, path, sizeof path);
    char *png = NULL;
    size_t len = 0;
    if (svc_read_file(path, &png, &len, (size_t)1 << 30) < 0) {
        SVC_ERROR("cluster: cannot read the stored result %s; the image reruns", path);
        land(c, t->job, t->index, id, sizeof id);
        return true;
    }
    if (!rc_ensure(r)) {
        free(png);
        return false;
    }
    char key[400], ttl[16], bytes[24];
    snprintf(key, sizeof key, "%spng:%s:%d", c->prefix, job, t->index);
    snprintf(ttl, sizeof ttl, "%d", c->cfg.result_ttl_s);
    snprintf(bytes, sizeof bytes, "%zu", t->bytes);
    redisAppendCommand(r->ctx, "MULTI");
    const char *set[] = {"SET", key, png, "EX", ttl};
    const size_t set_len[] = {3, strlen(key), len, 2, strlen(ttl)};
    redisAppendCommandArgv(r->ctx, 5, set, set_len);
    redisAppendCommand(r->ctx,
                       "XADD %s MAXLEN ~ " EVENTS_MAXLEN
                       " * t image job %s i %s etag %s bytes %s info %s consumer %s",
                       c->k_events, job, idx, t->etag, bytes, t->text ? t->text : "",
                       c->consumer);
    redisAppendCommand(r->ctx, "EXEC");
    free(png);
    bool ok = true;
    for (int i = 0; i < 4; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(r->ctx, (void **)&rep) != REDIS_OK) {
            rc_drop(r);
            return false;
        }
        if (i == 3)
            ok = rep && rep->type == REDIS_REPLY_ARRAY;
        freeReplyObject(rep);
    }
    if (!ok)
        return false;
    atomic_fetch_add(&c->results, 1);
    if (flight_id(c, t->job, t->index, id, sizeof id) && !ack(c, r, id))
        return false; /* stored; the ack is retried (a claim would find the result) */
    land(c, t->job, t->index, id, sizeof id);
    unlink(path);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/jobs/%s", c->cfg.scratch_dir, job);
    rmdir(dir); /* fails while other images of the job are there */
    return true;
}

/* Reset the idle time of this node's in-flight entries (the heartbeat). */
static void heartbeat(svc_cluster *c, rconn *r)
{
    const char *argv[6 + 64];
    size_t lens[6 + 64];
    char ids[64][48];
    int n = 0;
    pthread_mutex_lock(&c->mu);
    for (inflight *f = c->flying; f && n < 64; f = f->next) {
        snprintf(ids[n], sizeof ids[n], "%s", f->id);
        n++;
    }
    pthread_mutex_unlock(&c->mu);
    if (n == 0)
        return;
    int a = 0;
    argv[a++] = "XCLAIM";
    argv[a++] = c->k_q;
    argv[a++] = GROUP;
    argv[a++] = c->consumer;
    argv[a++] = "0";
    for (int i = 0; i < n; i++)
        argv[a++] = ids[i];
    argv[a++] = "JUSTID";
    for (int i = 0; i < a; i++)
        lens[i] = strlen(argv[i]);
    redisReply *rep = rc_argv(r, a, argv, lens);
    freeReplyObject(rep);
}

static void free_ptask(ptask *t)
{
    free(t->text);
    free(t);
}

static void *publisher_main(void *arg)
{
    svc_cluster *c = arg;
    rconn r = {.url = &c->cfg.url, .who = "publisher", .timeout_s = 10};
    double next_beat = svc_now_mono() + c->cfg.claim_idle_ms / 3000.0;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->p_head && !atomic_load(&c->stop_publisher) &&
               svc_now_mono() < next_beat) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&c->cond, &c->mu, &ts);
        }
        ptask *t = c->p_head;
        pthread_mutex_unlock(&c->mu);
        if (!t && atomic_load(&c->stop_publisher))
            break;
        if (!t) {
            heartbeat(c, &r);
            next_beat = svc_now_mono() + c->cfg.claim_idle_ms / 3000.0;
            continue;
        }
        if (!publish(c, &r, t)) {
            if (atomic_load(&c->stop_publisher) && atomic_load(&c->stop))
                break; /* giving up at exit: pending entries are claimed elsewhere */
            rc_backoff(&r, NULL);
            continue;
        }
        pthread_mutex_lock(&c->mu);
        c->p_head = t->next;
        if (!c->p_head)
            c->p_tail = NULL;
        pthread_mutex_unlock(&c->mu);
        free_ptask(t);
        if (svc_now_mono() >= next_beat) {
            heartbeat(c, &r);
            next_beat = svc_now_mono() + c->cfg.claim_idle_ms / 3000.0;
        }
    }
    rc_close(&r);
    return NULL;
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
    void *(*mains[3])(void *) = {command_main, follower_main, publisher_main};
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
    SVC_INFO("cluster: queue redis://%s:%d/%d, keys %s*, consumer %s", c->cfg.url.host,
             c->cfg.url.port, c->cfg.url.db, c->prefix, c->consumer);
    return 0;
}

void svc_cluster_stop(svc_cluster *c, int wait_s)
{
    if (!c)
        return;
    q_close(&c->mirror.base);
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
        free_atask(t);
    }
    for (ptask *t = c->p_head, *n; t; t = n) {
        n = t->next;
        free_ptask(t);
    }
    for (inflight *f = c->flying, *n; f; f = n) {
        n = f->next;
        free(f);
    }
    rc_close(&c->pop);
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
