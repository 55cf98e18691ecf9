/*
 * service/queue/redis/cluster_api.c - the api side of the cluster (cluster_int.h):
 * accepts and cancels (command thread), the shared figures for the 429 and
 * /metrics, and the follower thread that turns the event stream into the
 * loop's mailbox messages.
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

/* ------------------------------------------------------------ accepts */

/* Hand a task to the api thread (any thread). */
static void push_atask(svc_cluster *c, atask *t)
{
    pthread_mutex_lock(&c->mu);
    if (c->a_tail)
        c->a_tail->next = t;
    else
        c->a_head = t;
    c->a_tail = t;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
}

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
        svc_cl_post(c, m);
        return;
    }
    t->ids = ids;
    t->recs = recs;
    t->images = images;
    t->n = n;
    t->cookie = cookie;
    push_atask(c, t);
}

void svc_cluster_cancel(svc_cluster *c, uint64_t job)
{
    atask *t = calloc(1, sizeof *t);
    if (!t) {
        SVC_ERROR("cluster: out of memory sending a cancel");
        return;
    }
    t->cancel = job;
    push_atask(c, t);
}

static void run_cancel(svc_cluster *c, rconn *r, uint64_t job)
{
    char id[20];
    svc_id_format('j', job, id);
    redisReply *a = svc_cl_rc_cmd(r, "SET %scancel:%s 1 EX %d", c->prefix, id, c->cfg.result_ttl_s);
    redisReply *b = a ? svc_cl_rc_cmd(r, "XADD %s MAXLEN ~ " EVENTS_MAXLEN " * t cancel job %s",
                               c->k_events, id)
                      : NULL;
    if (svc_cl_is_error(a) || svc_cl_is_error(b))
        SVC_WARN("cluster: the cancel of %s could not be sent to the other nodes", id);
    freeReplyObject(a);
    freeReplyObject(b);
}

static int run_accept(svc_cluster *c, rconn *r, atask *t)
{
    if (!svc_cl_rc_ensure(r))
        return -EAGAIN;
    int cmds = 0;
    /* pos: images ahead in the shared queue (the last refresh, plus this
     * task's earlier jobs): the job's `queued` event, the same on every node */
    int pos = atomic_load(&c->qlen);
    redisAppendCommand(r->ctx, "MULTI");
    cmds++;
    for (int k = 0; k < t->n; k++) {
        for (int i = 0; i < t->images[k]; i++) {
            redisAppendCommand(r->ctx, "XADD %s * job %s i %d rec %s", c->k_q, t->ids[k], i,
                               t->recs[k]);
            cmds++;
        }
        redisAppendCommand(r->ctx,
                           "XADD %s MAXLEN ~ " EVENTS_MAXLEN " * t accept job %s pos %d rec %s",
                           c->k_events, t->ids[k], pos, t->recs[k]);
        pos += t->images[k];
        cmds++;
    }
    redisAppendCommand(r->ctx, "EXEC");
    cmds++;
    int rc = 0;
    for (int i = 0; i < cmds; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(r->ctx, (void **)&rep) != REDIS_OK) {
            svc_cl_rc_drop(r);
            return -EAGAIN;
        }
        if (i == cmds - 1 && (!rep || rep->type != REDIS_REPLY_ARRAY))
            rc = -EIO;
        freeReplyObject(rep);
    }
    return rc;
}

void svc_cl_free_atask(atask *t)
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
    redisReply *a = svc_cl_rc_cmd(r, "XLEN %s", c->k_q);
    if (a && a->type == REDIS_REPLY_INTEGER)
        atomic_store(&c->qlen, (int)(a->integer > INT_MAX ? INT_MAX : a->integer));
    atomic_store(&c->reachable, a != NULL);
    freeReplyObject(a);
    if (!a)
        return;
    redisReply *d = svc_cl_rc_cmd(r, "XLEN %s", c->k_dead);
    if (d && d->type == REDIS_REPLY_INTEGER)
        atomic_store(&c->dead_len, d->integer);
    freeReplyObject(d);
    redisReply *p = svc_cl_rc_cmd(r, "XPENDING %s " GROUP, c->k_q);
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
        svc_cl_ensure_group(c, r);
    freeReplyObject(p);
    pthread_mutex_lock(&c->mu);
    memcpy(c->pending, list, (size_t)n * sizeof list[0]);
    c->n_pending = n;
    pthread_mutex_unlock(&c->mu);
}

void *svc_cl_command_main(void *arg)
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
            svc_cl_free_atask(t);
            continue;
        }
        if (t) {
            int rc = run_accept(c, &r, t);
            if (rc == -EAGAIN)
                atomic_store(&c->reachable, false);
            /* fault injection for tests/cluster: the accept's end reaches the
             * loop late, after the follower has read the job's first events */
            const char *delay = getenv("TSR_TEST_ACCEPT_DELAY_MS");
            if (delay && atoi(delay) > 0)
                usleep((useconds_t)atoi(delay) * 1000);
            svc_msg *m = svc_msg_new(SVC_MSG_TASK_DONE);
            if (m) {
                m->cookie = t->cookie;
                m->status = rc;
            }
            svc_cl_post(c, m);
            svc_cl_free_atask(t);
            continue;
        }
        refresh_figures(c, &r);
        next_refresh = svc_now_mono() + 0.25;
    }
    svc_cl_rc_close(&r);
    return NULL;
}

/* ------------------------------------------------------------ follower */

static svc_msg *svc_cl_image_msg(svc_msg_type type, uint64_t job, int index)
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
    redisReply *rep = svc_cl_rc_cmd(r, "GET %spng:%s:%d", c->prefix, job, index);
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

/* A `tiles` event: its tile set from its key (NULL, and *rc < 0, when the
 * key expired or is malformed: the publish is skipped; -EAGAIN: retry).
 * The final set is also the image's .tiles file: written into --data-dir
 * (once; a rerun's identical final set finds it there). */
static svc_tileset *fetch_tiles(svc_cluster *c, rconn *r, const redisReply *fields, const char *job,
                                int index, int *rc)
{
    const char *key = svc_cl_field_str(fields, "key");
    *rc = 0;
    if (!key || strncmp(key, c->prefix, strlen(c->prefix)) != 0) {
        *rc = -EINVAL;
        return NULL;
    }
    redisReply *rep = svc_cl_rc_cmd(r, "GET %s", key);
    if (!rep) {
        *rc = -EAGAIN;
        return NULL;
    }
    svc_tileset *ts = NULL;
    if (rep->type == REDIS_REPLY_STRING)
        ts = svc_tileset_from_file((const uint8_t *)rep->str, rep->len);
    if (!ts) {
        *rc = -ENOENT;
        freeReplyObject(rep);
        return NULL;
    }
    ts->step = svc_cl_field_int(fields, "step", ts->step);
    ts->version = svc_cl_field_int(fields, "version", ts->version);
    ts->final = svc_cl_field_int(fields, "final", 0) != 0;
    if (ts->final) {
        char path[PATH_MAX], dir[PATH_MAX];
        snprintf(path, sizeof path, "%s/jobs/%s/%d.tiles", c->cfg.data_dir, job, index);
        snprintf(dir, sizeof dir, "%s/jobs/%s", c->cfg.data_dir, job);
        if (access(path, R_OK) != 0 &&
            (svc_mkdirs(dir) < 0 || svc_write_file_atomic(path, rep->str, rep->len) < 0))
            SVC_WARN("cluster: cannot write %s (the final tiles are served from memory only)",
                     path);
    }
    freeReplyObject(rep);
    return ts;
}

/* One event-stream entry into a mailbox message.  false: retry (Redis). */
static bool follow_one(svc_cluster *c, rconn *r, const redisReply *fields)
{
    const char *t = svc_cl_field_str(fields, "t");
    const char *job = svc_cl_field_str(fields, "job");
    uint64_t jid = 0;
    if (!t || !job || !svc_id_parse(job, 'j', &jid))
        return true;
    const int index = svc_cl_field_int(fields, "i", 0);
    svc_msg *m = NULL;
    if (strcmp(t, "accept") == 0) {
        const char *rec = svc_cl_field_str(fields, "rec");
        if (!rec)
            return true;
        m = svc_msg_new(SVC_MSG_CLUSTER_ACCEPT);
        if (m) {
            m->job = jid;
            m->images = svc_cl_field_int(fields, "pos", 0);
            m->text = strdup(rec);
        }
    } else if (strcmp(t, "cancel") == 0) {
        m = svc_msg_new(SVC_MSG_CLUSTER_CANCEL);
        if (m)
            m->job = jid;
    } else if (strcmp(t, "started") == 0) {
        m = svc_cl_image_msg(SVC_MSG_IMAGE_STARTED, jid, index);
    } else if (strcmp(t, "step") == 0) {
        m = svc_cl_image_msg(SVC_MSG_IMAGE_STEP, jid, index);
        if (m) {
            m->step = svc_cl_field_int(fields, "step", 0);
            m->steps = svc_cl_field_int(fields, "steps", 0);
        }
    } else if (strcmp(t, "image") == 0) {
        size_t bytes = 0;
        int rc = copy_png(c, r, job, index, &bytes);
        if (rc == -EAGAIN)
            return false;
        if (rc < 0) {
            m = svc_cl_image_msg(SVC_MSG_IMAGE_FAILED, jid, index);
            if (m) {
                m->status = TSR_ERR_IO;
                m->text = strdup(rc == -ENOENT ? "the result expired from the queue's store "
                                               "(--result-ttl) before this node copied it"
                                               : "the result cannot be written to --data-dir");
            }
        } else {
            m = svc_cl_image_msg(SVC_MSG_IMAGE_STORED, jid, index);
            if (m) {
                const char *etag = svc_cl_field_str(fields, "etag");
                const char *info = svc_cl_field_str(fields, "info");
                snprintf(m->etag, sizeof m->etag, "%s", etag ? etag : "");
                const char *b = svc_cl_field_str(fields, "bytes");
                m->bytes = b ? (size_t)strtoull(b, NULL, 10) : bytes;
                m->text = info ? strdup(info) : NULL;
            }
        }
    } else if (strcmp(t, "tiles") == 0) {
        int rc = 0;
        svc_tileset *ts = fetch_tiles(c, r, fields, job, index, &rc);
        if (rc == -EAGAIN)
            return false;
        if (!ts)
            return true; /* expired (--result-ttl): a preview less, nothing else */
        m = svc_cl_image_msg(SVC_MSG_TILES, jid, index);
        if (!m) {
            svc_tileset_free(ts);
            return true;
        }
        m->step = ts->step;
        m->tiles = ts;
    } else if (strcmp(t, "failed") == 0) {
        m = svc_cl_image_msg(SVC_MSG_IMAGE_FAILED, jid, index);
        if (m) {
            m->status = svc_cl_field_int(fields, "status", TSR_ERR_INTERNAL);
            const char *msg = svc_cl_field_str(fields, "msg");
            m->text = strdup(msg ? msg : "failed");
        }
    } else {
        return true;
    }
    svc_cl_post(c, m);
    return true;
}

void *svc_cl_follower_main(void *arg)
{
    svc_cluster *c = arg;
    rconn r = {.url = &c->cfg.url, .who = "follower", .timeout_s = 10};
    char cursor[64] = "0";
    while (!atomic_load(&c->stop)) {
        redisReply *rep = svc_cl_rc_cmd(&r, "XREAD COUNT 256 BLOCK 1000 STREAMS %s %s", c->k_events,
                                 cursor);
        if (!rep) {
            svc_cl_rc_backoff(&r, &c->stop);
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
                svc_cl_rc_backoff(&r, &c->stop);
            snprintf(cursor, sizeof cursor, "%s", ent->element[0]->str);
        }
        freeReplyObject(rep);
    }
    svc_cl_rc_close(&r);
    return NULL;
}

