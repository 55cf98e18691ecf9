/*
 * service/queue/local.c - the in-process image queue (svc_queue, see queue.h).
 *
 * State: a doubly linked list of entries in submission order, owned by this
 * file and guarded by `mu`; idle workers wait on `cv`.  Pushed from the
 * loop, popped by workers.
 *
 * Pop rule (docs/service-design.md, "Scheduling"): a worker whose batch
 * runs shape WxH takes the oldest entry of that shape, unless an older
 * entry has already been passed over max_batch times - then it takes the
 * oldest such entry, whatever its shape.  Every entry skipped by a pop
 * counts one pass, so no entry waits behind more than max_batch younger
 * ones.  A worker with an empty batch takes the oldest entry.
 *
 * Fair turns (issue 62): when entries of more than one key (svc_entry.owner)
 * wait, each pop first picks the key whose turn it is - the first key after
 * the one served last, in name order, cyclically - and applies the rule
 * above to that key's entries only (its passes count within the key).  So a
 * free row goes to each waiting key in turn, and a key's flood holds another
 * key's first image back by at most one row per other waiting key.  Name
 * order rather than arrival order keeps the turn a single string (`turn`)
 * that stays right as keys come and go.  With one key waiting (or keys
 * off: every owner "") the rule is exactly the plain one.  Whose turn it is
 * comes from `keys`, the waiting keys with their entry counts (kept by push
 * and unlink), so a pop costs a look at the keys plus the walk up to its
 * pick, as before, not a walk of the whole list; should that table fail to
 * grow (out of memory), pops walk the list for the keys until it empties.
 *
 * Requeue (a failed device's unfinished images, docs/multi-gpu.md part 3)
 * links entries in at the head, in their order: within their key they are
 * then the oldest, so the next worker with a free row takes them first,
 * and the key's turn is unchanged.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "queue.h"

typedef struct local_queue {
    svc_queue base;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    svc_entry *head, *tail;
    int length;
    int max_batch;
    uint64_t next_seq;
    bool closed;
    char turn[64]; /* the key served last (fair turns) */
    struct key_count {
        char name[64];
        int n;         /* its entries waiting */
    } *keys;           /* the keys with entries waiting, unordered */
    int n_keys, cap_keys;
    bool keys_lost;    /* `keys` could not grow: walk the list instead */
} local_queue;

static struct key_count *key_find(local_queue *q, const char *name)
{
    for (int k = 0; k < q->n_keys; k++)
        if (strcmp(q->keys[k].name, name) == 0)
            return &q->keys[k];
    return NULL;
}

static void key_add(local_queue *q, const char *name)
{
    if (q->keys_lost)
        return;
    struct key_count *c = key_find(q, name);
    if (!c) {
        if (q->n_keys == q->cap_keys) {
            int cap = q->cap_keys ? 2 * q->cap_keys : 8;
            struct key_count *v = realloc(q->keys, (size_t)cap * sizeof *v);
            if (!v) {
                q->keys_lost = true;
                return;
            }
            q->keys = v;
            q->cap_keys = cap;
        }
        c = &q->keys[q->n_keys++];
        snprintf(c->name, sizeof c->name, "%s", name);
        c->n = 0;
    }
    c->n++;
}

static void key_drop(local_queue *q, const char *name)
{
    struct key_count *c = q->keys_lost ? NULL : key_find(q, name);
    if (c && --c->n == 0)
        *c = q->keys[--q->n_keys];
}

svc_entry *svc_entry_new(uint64_t job, int index, svc_params *params)
{
    svc_entry *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->job = job;
    e->index = index;
    e->width = params->width;
    e->height = params->height;
    e->params = svc_params_ref(params);
    return e;
}

void svc_entry_free(svc_entry *e)
{
    if (!e)
        return;
    svc_params_unref(e->params);
    free(e);
}

static void unlink_entry(local_queue *q, svc_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        q->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        q->tail = e->prev;
    e->prev = e->next = NULL;
    q->length--;
    key_drop(q, e->owner);
    if (q->length == 0) {
        q->n_keys = 0;
        q->keys_lost = false;
    }
}

static void q_push(svc_queue *base, svc_entry **entries, int n)
{
    local_queue *q = (local_queue *)base;
    pthread_mutex_lock(&q->mu);
    for (int i = 0; i < n; i++) {
        svc_entry *e = entries[i];
        e->seq = q->next_seq++;
        e->passed = 0;
        e->next = NULL;
        e->prev = q->tail;
        if (q->tail)
            q->tail->next = e;
        else
            q->head = e;
        q->tail = e;
        q->length++;
        key_add(q, e->owner);
    }
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static void q_requeue(svc_queue *base, svc_entry **entries, int n)
{
    local_queue *q = (local_queue *)base;
    pthread_mutex_lock(&q->mu);
    for (int i = n - 1; i >= 0; i--) {
        svc_entry *e = entries[i];
        e->seq = 0; /* older than anything waiting */
        e->passed = 0;
        e->prev = NULL;
        e->next = q->head;
        if (q->head)
            q->head->prev = e;
        else
            q->tail = e;
        q->head = e;
        q->length++;
        key_add(q, e->owner);
    }
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static int q_remove_job(svc_queue *base, uint64_t job)
{
    local_queue *q = (local_queue *)base;
    int removed = 0;
    pthread_mutex_lock(&q->mu);
    for (svc_entry *e = q->head, *next; e; e = next) {
        next = e->next;
        if (e->job == job) {
            unlink_entry(q, e);
            svc_entry_free(e);
            removed++;
        }
    }
    pthread_mutex_unlock(&q->mu);
    return removed;
}

/* Fold one waiting key into the turn search (turn_key). */
static void turn_consider(const char *name, const char *turn, const char **first,
                          const char **after)
{
    if (strcmp(name, *first) < 0)
        *first = name;
    if (strcmp(name, turn) > 0 && (!*after || strcmp(name, *after) < 0))
        *after = name;
}

/* The key whose turn it is: among the owners of waiting entries, the first
 * after q->turn in name order, else (wrapping) the first.  *several: more
 * than one key waits.  Under q->mu, with q->head set. */
static const char *turn_key(const local_queue *q, bool *several)
{
    const char *first = q->head->owner, *after = NULL;
    *several = false;
    if (!q->keys_lost) {
        *several = q->n_keys > 1;
        for (int k = 0; k < q->n_keys; k++)
            turn_consider(q->keys[k].name, q->turn, &first, &after);
        return after ? after : first;
    }
    for (const svc_entry *e = q->head; e; e = e->next) {
        *several |= strcmp(e->owner, first) != 0;
        turn_consider(e->owner, q->turn, &first, &after);
    }
    return after ? after : first;
}

/* The pop rule, under q->mu. */
static svc_entry *choose(local_queue *q, bool have_shape, int width, int height)
{
    if (!q->head)
        return NULL;
    bool several;
    const char *key = turn_key(q, &several);
    svc_entry *pick = NULL, *oldest = NULL;
    for (svc_entry *e = q->head; e; e = e->next) {
        if (several && strcmp(e->owner, key) != 0)
            continue;
        if (!oldest)
            oldest = e;
        if (!have_shape || e->passed >= q->max_batch ||
            (e->width == width && e->height == height)) {
            pick = e;
            break;
        }
    }
    if (!pick)
        pick = oldest ? oldest : q->head; /* (the key always has one) */
    for (svc_entry *e = q->head; e != pick; e = e->next)
        if (!several || strcmp(e->owner, key) == 0)
            e->passed++;
    snprintf(q->turn, sizeof q->turn, "%s", pick->owner);
    return pick;
}

static svc_entry *q_pop(svc_queue *base, bool have_shape, int width, int height, int wait_ms)
{
    local_queue *q = (local_queue *)base;
    struct timespec deadline;
    if (wait_ms > 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += wait_ms / 1000;
        deadline.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&q->mu);
    svc_entry *e = NULL;
    for (;;) {
        if (q->closed)
            break;
        e = choose(q, have_shape, width, height);
        if (e) {
            unlink_entry(q, e);
            break;
        }
        if (wait_ms == 0)
            break;
        if (wait_ms < 0) {
            pthread_cond_wait(&q->cv, &q->mu);
        } else if (pthread_cond_timedwait(&q->cv, &q->mu, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    pthread_mutex_unlock(&q->mu);
    return e;
}

static int q_length(svc_queue *base)
{
    local_queue *q = (local_queue *)base;
    pthread_mutex_lock(&q->mu);
    int n = q->length;
    pthread_mutex_unlock(&q->mu);
    return n;
}

static void q_close(svc_queue *base)
{
    local_queue *q = (local_queue *)base;
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static void q_destroy(svc_queue *base)
{
    local_queue *q = (local_queue *)base;
    if (!q)
        return;
    for (svc_entry *e = q->head, *next; e; e = next) {
        next = e->next;
        svc_entry_free(e);
    }
    free(q->keys);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

static const svc_queue_ops local_ops = {q_push,  q_remove_job, q_pop,    q_length,
                                        q_close, q_destroy,    q_requeue};

svc_queue *svc_queue_local_new(int max_batch)
{
    local_queue *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->base.ops = &local_ops;
    q->max_batch = max_batch > 0 ? max_batch : 1;
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &attr);
    pthread_condattr_destroy(&attr);
    return &q->base;
}
