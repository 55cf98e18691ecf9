/*
 * service/queue/redis/cluster_work.c - the worker side of the cluster (cluster_int.h):
 * the work queue's pop (XAUTOCLAIM first, then XREADGROUP; takes counted,
 * dead letters, results already stored) and the publisher thread (events,
 * results with their event in one MULTI, then XACK + XDEL; the heartbeat).
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

#include "json.h"
#include "log.h"
#include "params.h"
#include "service.h"
#include "store.h"
#include "tessera.h"
#include "tiles.h"
#include "util.h"

/* One stream entry taken (new or claimed): an svc_entry, or NULL when it
 * was dealt with here (already stored, dead-lettered, unreadable). */
static svc_entry *take(svc_cluster *c, const redisReply *ent)
{
    if (ent->type != REDIS_REPLY_ARRAY || ent->elements < 2 ||
        ent->element[0]->type != REDIS_REPLY_STRING)
        return NULL;
    const char *id = ent->element[0]->str;
    const redisReply *fields = ent->element[1];
    const char *job = svc_cl_field_str(fields, "job");
    const char *rec = svc_cl_field_str(fields, "rec");
    int index = svc_cl_field_int(fields, "i", -1);
    uint64_t jid = 0;
    if (!job || !rec || index < 0 || index >= SVC_MAX_IMAGES_PER_JOB ||
        !svc_id_parse(job, 'j', &jid)) {
        SVC_WARN("cluster: queue entry %s is not an image of a job; dropped", id);
        svc_cl_ack(c, &c->pop, id);
        return NULL;
    }
    /* stored already (a worker died between the store and the ack) */
    redisReply *ex = svc_cl_rc_cmd(&c->pop, "EXISTS %spng:%s:%d", c->prefix, job, index);
    bool stored = ex && ex->type == REDIS_REPLY_INTEGER && ex->integer > 0;
    freeReplyObject(ex);
    if (!ex)
        return NULL;
    if (stored) {
        svc_cl_ack(c, &c->pop, id);
        return NULL;
    }
    redisReply *cx = svc_cl_rc_cmd(&c->pop, "EXISTS %scancel:%s", c->prefix, job);
    bool cancelled = cx && cx->type == REDIS_REPLY_INTEGER && cx->integer > 0;
    freeReplyObject(cx);
    if (cancelled) {
        svc_cl_ack(c, &c->pop, id); /* every mirror has cancelled the job */
        return NULL;
    }
    redisReply *tr = svc_cl_rc_cmd(&c->pop, "INCR %stries:%s:%d", c->prefix, job, index);
    long long tries = tr && tr->type == REDIS_REPLY_INTEGER ? tr->integer : 1;
    freeReplyObject(tr);
    redisReply *te = svc_cl_rc_cmd(&c->pop, "EXPIRE %stries:%s:%d 86400", c->prefix, job, index);
    freeReplyObject(te);
    if (tries > c->cfg.max_attempts) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "dead-lettered after %lld attempts (the worker running it died or was "
                 "stopped each time)",
                 tries - 1);
        SVC_WARN("cluster: job %s image %d %s", job, index, msg);
        if (svc_cl_fail_image(c, &c->pop, id, job, index, TSR_ERR_INTERNAL, msg, true,
                              (int)tries - 1))
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
        svc_cl_fail_image(c, &c->pop, id, job, index, TSR_ERR_INVALID,
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
        if (!svc_cl_rc_ensure(&c->pop)) {
            if (wait_ms >= 0)
                break;
            svc_cl_rc_backoff(&c->pop, NULL);
            continue;
        }
        /* a dead consumer's image first */
        const double now = svc_now_mono();
        if (now - c->last_claim >= c->cfg.claim_idle_ms / 4000.0) {
            c->last_claim = now;
            redisReply *rep = svc_cl_rc_cmd(&c->pop, "XAUTOCLAIM %s " GROUP " %s %d 0-0 COUNT 1",
                                     c->k_q, c->consumer, c->cfg.claim_idle_ms);
            if (rep && rep->type == REDIS_REPLY_ERROR && strstr(rep->str, "NOGROUP"))
                svc_cl_ensure_group(c, &c->pop);
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
            block > 0 ? svc_cl_rc_cmd(&c->pop,
                               "XREADGROUP GROUP " GROUP " %s COUNT 1 BLOCK %d STREAMS %s >",
                               c->consumer, block, c->k_q)
                      : svc_cl_rc_cmd(&c->pop, "XREADGROUP GROUP " GROUP " %s COUNT 1 STREAMS %s >",
                               c->consumer, c->k_q);
        if (rep && rep->type == REDIS_REPLY_ERROR) {
            if (strstr(rep->str, "NOGROUP"))
                svc_cl_ensure_group(c, &c->pop);
            else
                SVC_WARN("cluster: XREADGROUP: %s", rep->str);
        }
        const redisReply *ent = first_read(rep);
        if (ent)
            e = take(c, ent);
        freeReplyObject(rep);
        if (!rep && wait_ms < 0)
            svc_cl_rc_backoff(&c->pop, NULL);
        if (e || wait_ms == 0)
            break;
    }
    pthread_mutex_unlock(&c->pop_mu);
    return e;
}

const svc_queue_ops svc_cl_work_ops = {svc_cl_q_push,   svc_cl_q_remove_job, work_pop,
                                     svc_cl_q_length, svc_cl_q_close,      svc_cl_q_destroy,
                                     NULL /* requeue: a failed device's images fail */};

/* ------------------------------------------------------------ publisher */

void svc_cluster_forward(svc_cluster *c, svc_msg *m)
{
    if (m->type == SVC_MSG_TILES && (!m->tiles || (m->tiles->n == 0 && !m->tiles->final)))
        return; /* nothing changed enough to publish */
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
    case SVC_MSG_TILES:
        t->type = PT_TILES;
        t->tiles = m->tiles;
        m->tiles = NULL;
        break;
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

/* The four replies of MULTI, SET, XADD, EXEC: whether EXEC ran them
 * (false, with the connection dropped when Redis went away). */
static bool exec_ok(rconn *r)
{
    bool ok = true;
    for (int i = 0; i < 4; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(r->ctx, (void **)&rep) != REDIS_OK) {
            svc_cl_rc_drop(r);
            return false;
        }
        if (i == 3)
            ok = rep && rep->type == REDIS_REPLY_ARRAY;
        freeReplyObject(rep);
    }
    return ok;
}

/* A published tile set: its bytes (the .tiles file format of service/tiles/tiles.h,
 * a few KB per changed tile) under a key of their own with the result's
 * TTL, and a small `tiles` event naming the key, in one MULTI.  The key is
 * unique per publish (consumer + a counter), so a rerun of the image
 * elsewhere never changes the bytes an earlier event names.  The final
 * set's bytes are the image's .tiles file. */
static bool publish_tiles(svc_cluster *c, rconn *r, ptask *t, const char *job, const char *idx)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (svc_tiles_file_encode(t->tiles, &bytes, &len) < 0) {
        SVC_WARN("cluster: out of memory publishing tiles of %s image %s; skipped", job, idx);
        return true;
    }
    if (!svc_cl_rc_ensure(r)) {
        free(bytes);
        return false;
    }
    char key[480], ttl[16];
    snprintf(key, sizeof key, "%stiles:%s:%s:%d:%s:%llu", c->prefix, job, idx, t->tiles->version,
             c->consumer, (unsigned long long)atomic_fetch_add(&c->tile_seq, 1));
    snprintf(ttl, sizeof ttl, "%d", c->cfg.result_ttl_s);
    redisAppendCommand(r->ctx, "MULTI");
    const char *set[] = {"SET", key, (const char *)bytes, "EX", ttl};
    const size_t set_len[] = {3, strlen(key), len, 2, strlen(ttl)};
    redisAppendCommandArgv(r->ctx, 5, set, set_len);
    redisAppendCommand(r->ctx,
                       "XADD %s MAXLEN ~ " EVENTS_MAXLEN
                       " * t tiles job %s i %s step %d version %d final %d n %d key %s",
                       c->k_events, job, idx, t->tiles->step, t->tiles->version,
                       t->tiles->final ? 1 : 0, t->tiles->n, key);
    redisAppendCommand(r->ctx, "EXEC");
    free(bytes);
    return exec_ok(r);
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
        redisReply *rep = svc_cl_rc_cmd(r,
                                 "XADD %s MAXLEN ~ " EVENTS_MAXLEN
                                 " * t started job %s i %s consumer %s",
                                 c->k_events, job, idx, c->consumer);
        freeReplyObject(rep);
        return rep != NULL;
    }
    case PT_STEP: {
        redisReply *rep = svc_cl_rc_cmd(r,
                                 "XADD %s MAXLEN ~ " EVENTS_MAXLEN
                                 " * t step job %s i %s step %d steps %d",
                                 c->k_events, job, idx, t->step, t->steps);
        freeReplyObject(rep);
        return rep != NULL;
    }
    case PT_CANCELLED: {
        /* cut short by a user's cancel: acked (nobody wants it); by a
         * drain: not acked, so another worker claims it */
        bool user = false;
        pthread_mutex_lock(&c->mu);
        for (inflight *f = c->flying; f; f = f->next)
            if (f->job == t->job && f->index == t->index)
                user = f->cancelled;
        pthread_mutex_unlock(&c->mu);
        if (user && flight_id(c, t->job, t->index, id, sizeof id) && !svc_cl_ack(c, r, id))
            return false;
        land(c, t->job, t->index, id, sizeof id);
        return true;
    }
    case PT_FAILED:
        if (!flight_id(c, t->job, t->index, id, sizeof id))
            return true;
        if (!svc_cl_fail_image(c, r, id, job, t->index, t->status, t->text, false, 0))
            return false;
        land(c, t->job, t->index, id, sizeof id);
        return true;
    case PT_TILES: return publish_tiles(c, r, t, job, idx);
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
    if (!svc_cl_rc_ensure(r)) {
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
    if (!exec_ok(r))
        return false;
    atomic_fetch_add(&c->results, 1);
    if (flight_id(c, t->job, t->index, id, sizeof id) && !svc_cl_ack(c, r, id))
        return false; /* stored; the ack is retried (a claim would find the result) */
    land(c, t->job, t->index, id, sizeof id);
    unlink(path);
    /* the tile encoder's <i>.tiles (its bytes went with the final tiles event) */
    snprintf(path, sizeof path, "%s/jobs/%s/%d.tiles", c->cfg.scratch_dir, job, t->index);
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
    redisReply *rep = svc_cl_rc_argv(r, a, argv, lens);
    freeReplyObject(rep);
}

void svc_cl_free_ptask(ptask *t)
{
    svc_tileset_free(t->tiles);
    free(t->text);
    free(t);
}

/* Jobs of in-flight images that a user cancelled on any node (their
 * cancel:<job> key): the loop is told (CLUSTER_CANCEL), and it cancels them
 * in the local workers' batches. */
static void check_cancels(svc_cluster *c, rconn *r)
{
    enum { MAX = 64 };
    uint64_t jobs[MAX];
    int n = 0;
    pthread_mutex_lock(&c->mu);
    for (inflight *f = c->flying; f && n < MAX; f = f->next) {
        bool seen = f->cancelled;
        for (int k = 0; k < n && !seen; k++)
            seen = jobs[k] == f->job;
        if (!seen)
            jobs[n++] = f->job;
    }
    pthread_mutex_unlock(&c->mu);
    if (n == 0 || !svc_cl_rc_ensure(r))
        return;
    const char *argv[MAX + 1];
    size_t lens[MAX + 1];
    char keys[MAX][360];
    argv[0] = "MGET";
    lens[0] = 4;
    for (int k = 0; k < n; k++) {
        char id[20];
        svc_id_format('j', jobs[k], id);
        snprintf(keys[k], sizeof keys[k], "%scancel:%s", c->prefix, id);
        argv[k + 1] = keys[k];
        lens[k + 1] = strlen(keys[k]);
    }
    redisReply *rep = svc_cl_rc_argv(r, n + 1, argv, lens);
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == (size_t)n) {
        for (int k = 0; k < n; k++) {
            if (rep->element[k]->type != REDIS_REPLY_STRING)
                continue;
            pthread_mutex_lock(&c->mu);
            for (inflight *f = c->flying; f; f = f->next)
                if (f->job == jobs[k])
                    f->cancelled = true;
            pthread_mutex_unlock(&c->mu);
            svc_msg *m = svc_msg_new(SVC_MSG_CLUSTER_CANCEL);
            if (m)
                m->job = jobs[k];
            svc_cl_post(c, m);
        }
    }
    freeReplyObject(rep);
}

void *svc_cl_publisher_main(void *arg)
{
    svc_cluster *c = arg;
    rconn r = {.url = &c->cfg.url, .who = "publisher", .timeout_s = 10};
    double next_beat = svc_now_mono() + c->cfg.claim_idle_ms / 3000.0;
    double next_check = svc_now_mono() + 0.25;
    for (;;) {
        if (svc_now_mono() >= next_check) {
            check_cancels(c, &r);
            next_check = svc_now_mono() + 0.25;
        }
        pthread_mutex_lock(&c->mu);
        while (!c->p_head && !atomic_load(&c->stop_publisher) &&
               svc_now_mono() < next_beat && svc_now_mono() < next_check) {
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
            if (svc_now_mono() >= next_beat) {
                heartbeat(c, &r);
                next_beat = svc_now_mono() + c->cfg.claim_idle_ms / 3000.0;
            }
            continue;
        }
        if (!publish(c, &r, t)) {
            if (atomic_load(&c->stop_publisher) && atomic_load(&c->stop))
                break; /* giving up at exit: pending entries are claimed elsewhere */
            svc_cl_rc_backoff(&r, NULL);
            continue;
        }
        pthread_mutex_lock(&c->mu);
        c->p_head = t->next;
        if (!c->p_head)
            c->p_tail = NULL;
        pthread_mutex_unlock(&c->mu);
        svc_cl_free_ptask(t);
        if (svc_now_mono() >= next_beat) {
            heartbeat(c, &r);
            next_beat = svc_now_mono() + c->cfg.claim_idle_ms / 3000.0;
        }
    }
    svc_cl_rc_close(&r);
    return NULL;
}

