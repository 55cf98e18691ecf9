/*
 * service/pair.c - see pair.h.
 *
 * The channel is a list of commands under the pair's mutex: the leader
 * appends (submit, cancel, step, end) in the order its own batch does those
 * things, the follower takes them in that order, so its batch sees the same
 * submits and cancels before the same steps.  Lockstep is checked, not
 * assumed: every grouped UNet call exchanges a fingerprint of the step
 * (pipeline/cfg_group.c), so a slip fails the call ("ranks disagree")
 * instead of mixing two images' rows.
 *
 * A tsr_cfg_group is made each time a pair forms (its rank 0 is the
 * leader's engine, and either partner may lead) and destroyed once both
 * batches have left it: a host comm group costs a few allocations, and a
 * group a failure broke is never reused.
 */
#include "pair.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"
#include "worker_int.h"

/* An idle worker's timed pop: how long its partner may wait to claim it. */
#define POLL_MS 5
/* A follower holds at most this many images at once (a pair's capacity is
 * at most 32). */
#define FOLLOW_MAX 64

typedef enum cmd_kind { CMD_SUBMIT, CMD_CANCEL, CMD_STEP, CMD_END } cmd_kind;

typedef struct pair_cmd {
    cmd_kind kind;
    int leader_image;   /* SUBMIT, CANCEL: the leader's batch id */
    svc_params *params; /* SUBMIT: one reference */
    int index;          /* SUBMIT: image index in its job */
    struct pair_cmd *next;
} pair_cmd;

struct svc_pair {
    svc_parallel mode;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    svc_worker *member[2];
    bool idle[2];       /* in its idle wait, claimable */
    bool dead[2];       /* taken out: never claimed again */
    int leader;         /* -1: not paired */
    bool follower_done; /* the follower has left the pair formed now */
    pair_cmd *head, *tail;
    tsr_cfg_group *group;
};

int svc_parallel_parse(const char *name)
{
    if (!name || strcmp(name, "auto") == 0)
        return SVC_PARALLEL_AUTO;
    if (strcmp(name, "data") == 0)
        return SVC_PARALLEL_DATA;
    if (strcmp(name, "cfg") == 0)
        return SVC_PARALLEL_CFG;
    return -1;
}

const char *svc_parallel_name(svc_parallel mode)
{
    return mode == SVC_PARALLEL_CFG ? "cfg" : mode == SVC_PARALLEL_DATA ? "data" : "auto";
}

svc_pair *svc_pair_new(svc_parallel mode)
{
    svc_pair *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->mode = mode;
    p->leader = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &attr);
    pthread_condattr_destroy(&attr);
    return p;
}

static void drop_cmds(svc_pair *p)
{
    while (p->head) {
        pair_cmd *c = p->head;
        p->head = c->next;
        svc_params_unref(c->params);
        free(c);
    }
    p->tail = NULL;
}

void svc_pair_free(svc_pair *p)
{
    if (!p)
        return;
    drop_cmds(p);
    tsr_cfg_group_destroy(p->group);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void svc_pair_register(svc_pair *p, int me, svc_worker *w)
{
    pthread_mutex_lock(&p->mu);
    p->member[me] = w;
    pthread_mutex_unlock(&p->mu);
}

void svc_pair_mark_dead(svc_pair *p, int me)
{
    pthread_mutex_lock(&p->mu);
    p->dead[me] = true;
    p->idle[me] = false;
    pthread_mutex_unlock(&p->mu);
}

/* Deadline `ms` from now on the monotonic clock. */
static struct timespec after_ms(long ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

svc_entry *svc_pair_idle_pop(svc_pair *p, int me, svc_queue *q, atomic_bool *abort, bool *follow)
{
    *follow = false;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        if (p->leader == 1 - me && !p->follower_done) {
            pthread_mutex_unlock(&p->mu);
            *follow = true;
            return NULL;
        }
        if (atomic_load(abort)) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        p->idle[me] = !p->dead[me];
        pthread_mutex_unlock(&p->mu);
        const double t0 = svc_now_mono();
        svc_entry *e = q->ops->pop(q, false, 0, 0, POLL_MS);
        const double waited = svc_now_mono() - t0;
        pthread_mutex_lock(&p->mu);
        p->idle[me] = false;
        const bool claimed = p->leader == 1 - me && !p->follower_done;
        pthread_mutex_unlock(&p->mu);
        if (claimed) {
            /* claimed while it took an entry: the entry goes back in front */
            if (e)
                q->ops->requeue(q, &e, 1);
            *follow = true;
            return NULL;
        }
        if (e)
            return e;
        if (waited < POLL_MS / 2000.0)
            return NULL; /* a timed pop ends early only when the queue is closed */
    }
}

bool svc_pair_try_lead(svc_pair *p, int me, svc_queue *q, const svc_entry *e, tsr_batch *b,
                       tsr_engine *mine)
{
    if (p->mode == SVC_PARALLEL_DATA)
        return false;
    if (p->mode == SVC_PARALLEL_AUTO && (q->ops->length(q) > 0 || !(e->params->cfg_scale > 1.0)))
        return false; /* auto: a lone image with guidance only */
    const int other = 1 - me;
    pthread_mutex_lock(&p->mu);
    bool ok = p->leader < 0 && p->idle[other] && !p->dead[other] && !p->dead[me] &&
              p->member[other] != NULL;
    tsr_cfg_group *g = NULL;
    if (ok) {
        tsr_engine *es[2] = {mine, svc_worker_engine(p->member[other])};
        ok = es[1] && tsr_cfg_group_create(es, 2, 0, &g) == TSR_OK &&
             tsr_batch_set_cfg_group(b, g, 0) == TSR_OK;
        if (!ok) {
            SVC_WARN("device %s: cannot pair with %s: %s", p->member[me]->cfg.name,
                     p->member[other]->cfg.name, tsr_last_error());
            tsr_cfg_group_destroy(g);
        }
    }
    if (ok) {
        p->group = g;
        p->leader = me;
        p->follower_done = false;
        p->idle[other] = false;
        drop_cmds(p);
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

int svc_pair_capacity(const svc_pair *p, int max_batch)
{
    if (p->mode != SVC_PARALLEL_CFG)
        return 1;
    int n = 2 * max_batch;
    return n > 32 ? 32 : n; /* 64 rows with guidance: one UNet call's limit */
}

bool svc_pair_keeps_filling(const svc_pair *p)
{
    return p->mode == SVC_PARALLEL_CFG;
}

static void push(svc_pair *p, cmd_kind kind, int leader_image, const svc_params *params,
                 int index)
{
    pair_cmd *c = calloc(1, sizeof *c);
    if (!c) {
        /* the follower would fall out of lockstep: make the next step fail */
        SVC_ERROR("CFG pair: out of memory for a command; the pair breaks");
        svc_pair_abort(p, "out of memory in the pair's channel");
        return;
    }
    c->kind = kind;
    c->leader_image = leader_image;
    c->params = params ? svc_params_ref((svc_params *)params) : NULL;
    c->index = index;
    pthread_mutex_lock(&p->mu);
    if (p->tail)
        p->tail->next = c;
    else
        p->head = c;
    p->tail = c;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void svc_pair_submit(svc_pair *p, int leader_image, const struct svc_params *params, int index)
{
    push(p, CMD_SUBMIT, leader_image, params, index);
}

void svc_pair_cancel(svc_pair *p, int leader_image)
{
    push(p, CMD_CANCEL, leader_image, NULL, 0);
}

void svc_pair_step(svc_pair *p)
{
    push(p, CMD_STEP, 0, NULL, 0);
}

void svc_pair_abort(svc_pair *p, const char *why)
{
    pthread_mutex_lock(&p->mu);
    tsr_cfg_group *g = p->group;
    pthread_mutex_unlock(&p->mu);
    if (g)
        tsr_cfg_group_abort(g, 0, why);
}

void svc_pair_end(svc_pair *p, tsr_batch *b)
{
    push(p, CMD_END, 0, NULL, 0);
    pthread_mutex_lock(&p->mu);
    /* the follower leaves at END (or at once, should the group break);
     * bounded all the same, so a leader cannot hang on a lost partner */
    const struct timespec until = after_ms(120 * 1000);
    while (!p->follower_done)
        if (pthread_cond_timedwait(&p->cv, &p->mu, &until) != 0)
            break;
    const bool left = p->follower_done;
    tsr_cfg_group *g = p->group;
    p->group = NULL;
    p->leader = -1;
    p->follower_done = false;
    drop_cmds(p);
    pthread_mutex_unlock(&p->mu);
    if (tsr_batch_set_cfg_group(b, NULL, 0) != TSR_OK)
        SVC_ERROR("CFG pair: cannot detach the leader's batch: %s", tsr_last_error());
    if (left)
        tsr_cfg_group_destroy(g);
    else
        SVC_ERROR("CFG pair: the partner did not leave within 120 s; its group is kept");
}

bool svc_pair_own_fault(const svc_pair *p, const tsr_batch *b)
{
    (void)p;
    return (tsr_batch_cfg_blame(b) & 1) != 0; /* the leader is rank 0 */
}

/* ---- the follower ---- */

typedef struct follow_state {
    tsr_batch *b;
    int leader[FOLLOW_MAX], own[FOLLOW_MAX];
    int n;
} follow_state;

static int find_own(const follow_state *s, int own)
{
    for (int i = 0; i < s->n; i++)
        if (s->own[i] == own)
            return i;
    return -1;
}

static void forget(follow_state *s, int i)
{
    s->leader[i] = s->leader[s->n - 1];
    s->own[i] = s->own[s->n - 1];
    s->n--;
}

/* Drop an image of the follower's batch: rank 0 holds its result. */
static void discard(follow_state *s, int i)
{
    tsr_batch_cancel(s->b, s->own[i]); /* TSR_ERR_INVALID when already final */
    tsr_result r;
    if (tsr_batch_take(s->b, s->own[i], &r) == TSR_OK)
        tsr_result_free(&r);
    forget(s, i);
}

static void on_follower_step(void *user, const tsr_step_info *info)
{
    follow_state *s = user;
    if (info->state != TSR_IMAGE_DONE && info->state != TSR_IMAGE_FAILED)
        return;
    int i = find_own(s, info->image);
    if (i >= 0)
        discard(s, i);
}

/* Run one command; true when the pair is over for this follower. */
static bool follow_one(svc_pair *p, svc_worker *w, tsr_cfg_group *g, follow_state *s,
                       const pair_cmd *c, char *failed, size_t failed_size)
{
    (void)p;
    switch (c->kind) {
    case CMD_SUBMIT: {
        tsr_image_params ip;
        svc_params_to_engine(c->params, c->index, &ip);
        int id = 0;
        if (s->n < FOLLOW_MAX && tsr_batch_submit(s->b, &ip, &id) == TSR_OK) {
            s->leader[s->n] = c->leader_image;
            s->own[s->n++] = id;
        } else {
            /* out of step from here on: the next call says so */
            SVC_ERROR("device %s: CFG follower cannot submit: %s", w->cfg.name,
                      tsr_last_error());
        }
        return false;
    }
    case CMD_CANCEL:
        for (int i = 0; i < s->n; i++)
            if (s->leader[i] == c->leader_image) {
                discard(s, i);
                break;
            }
        return false;
    case CMD_STEP: {
        tsr_batch_stats before;
        tsr_batch_stats_get(s->b, &before);
        if (w->cfg.fault_after_calls >= 0 &&
            before.unet_calls >= (uint64_t)w->cfg.fault_after_calls) {
            snprintf(failed, failed_size,
                     "simulated sticky device error (TESSERA_FAULT_DEVICE, after %d UNet calls)",
                     w->cfg.fault_after_calls);
            tsr_cfg_group_abort(g, 1, failed);
            return true;
        }
        w->calls++;
        const double t0 = svc_now_mono();
        int rc = tsr_batch_step(s->b, NULL);
        svc_worker_report_calls(w, &before, svc_now_mono() - t0, 2);
        if (rc < 0) {
            const uint64_t blame = tsr_batch_cfg_blame(s->b);
            if ((blame & 2) && rc == TSR_ERR_BACKEND) {
                snprintf(failed, failed_size, "device error: %s", tsr_last_error());
                return true;
            }
            /* a peer's failure, or images failed on both ranks (the leader
             * decides what becomes of them); a broken group ends the pair */
            return tsr_cfg_group_broken(g, NULL, NULL) != 0;
        }
        return false;
    }
    case CMD_END: return true;
    }
    return true;
}

bool svc_pair_follow(svc_pair *p, int me, svc_worker *w)
{
    follow_state *s = calloc(1, sizeof *s);
    pthread_mutex_lock(&p->mu);
    tsr_cfg_group *g = p->group;
    pthread_mutex_unlock(&p->mu);
    char failed[512] = "";
    if (!s || !g || tsr_batch_set_cfg_group(w->batch, g, 1) != TSR_OK) {
        SVC_ERROR("device %s: cannot follow its CFG partner: %s", w->cfg.name,
                  s ? tsr_last_error() : "out of memory");
        if (g)
            tsr_cfg_group_abort(g, 1, "the partner could not join the pair");
    } else {
        s->b = w->batch;
        tsr_batch_set_callback(w->batch, on_follower_step, s, TSR_PREVIEW_NONE);
        pthread_mutex_lock(&p->mu);
        for (;;) {
            while (!p->head && !atomic_load(&w->abort)) {
                const struct timespec until = after_ms(100);
                pthread_cond_timedwait(&p->cv, &p->mu, &until);
            }
            if (atomic_load(&w->abort)) {
                /* shutting down (after the drain): leave now, not when the
                 * leader's images are done; its next step fails at once and
                 * its images go back to the queue (journaled: they rerun at
                 * the next start) */
                pthread_mutex_unlock(&p->mu);
                tsr_cfg_group_abort(g, 1, "the server is shutting down");
                pthread_mutex_lock(&p->mu);
                break;
            }
            pair_cmd *c = p->head;
            p->head = c->next;
            if (!p->head)
                p->tail = NULL;
            pthread_mutex_unlock(&p->mu);
            const bool over = follow_one(p, w, g, s, c, failed, sizeof failed);
            svc_params_unref(c->params);
            free(c);
            pthread_mutex_lock(&p->mu);
            if (over)
                break;
        }
        pthread_mutex_unlock(&p->mu);
        while (s->n > 0)
            discard(s, s->n - 1);
        if (tsr_batch_set_cfg_group(w->batch, NULL, 0) != TSR_OK)
            SVC_ERROR("device %s: cannot leave its CFG pair's group: %s", w->cfg.name,
                      tsr_last_error());
        svc_worker_reset_callback(w);
    }
    free(s);
    if (failed[0])
        svc_worker_take_out(w, TSR_ERR_BACKEND, failed); /* marks it dead in the pair too */
    pthread_mutex_lock(&p->mu);
    (void)me;
    p->follower_done = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return failed[0] == 0;
}
