/*
 * service/jobs/table.c - the job table: jobs and batches by id, in age
 * order, and their garbage collection (jobs.h).
 *
 * Jobs and batches are found by a 64-bit random id through one intrusive
 * hash (svc_idtable, its links inside the entries), which doubles its
 * buckets once the chains average two: written once for both kinds.  Jobs
 * are also kept in one list, oldest first, which is the order of the
 * garbage collection (--keep-jobs, --keep-hours): mark, then sweep, since a
 * batch goes as a whole and its jobs are spread through the list.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_int.h"
#include "log.h"
#include "server.h"
#include "tiles.h"
#include "util.h"

#define JOB_OF(l) ((svc_job *)(void *)((char *)(l) - offsetof(svc_job, hlink)))
#define BATCH_OF(l) ((svc_batch *)(void *)((char *)(l) - offsetof(svc_batch, hlink)))

/* ------------------------------------------------------------ the id hash */

static size_t hash_id(uint64_t id, size_t n)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (size_t)(id & (n - 1));
}

/* n: a power of two.  -1 when out of memory. */
static int idtable_init(svc_idtable *h, size_t n)
{
    h->buckets = calloc(n, sizeof *h->buckets);
    h->n_buckets = h->buckets ? n : 0;
    h->count = 0;
    return h->buckets ? 0 : -1;
}

static svc_idlink *idtable_find(const svc_idtable *h, uint64_t id)
{
    for (svc_idlink *l = h->buckets[hash_id(id, h->n_buckets)]; l; l = l->next)
        if (l->id == id)
            return l;
    return NULL;
}

static void idtable_grow(svc_idtable *h)
{
    size_t n = h->n_buckets * 2;
    svc_idlink **nb = calloc(n, sizeof *nb);
    if (!nb)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < h->n_buckets; i++) {
        for (svc_idlink *l = h->buckets[i], *next; l; l = next) {
            next = l->next;
            size_t b = hash_id(l->id, n);
            l->next = nb[b];
            nb[b] = l;
        }
    }
    free(h->buckets);
    h->buckets = nb;
    h->n_buckets = n;
}

static void idtable_insert(svc_idtable *h, svc_idlink *l, uint64_t id)
{
    if (h->count + 1 > h->n_buckets * 2)
        idtable_grow(h);
    l->id = id;
    size_t b = hash_id(id, h->n_buckets);
    l->next = h->buckets[b];
    h->buckets[b] = l;
    h->count++;
}

static void idtable_remove(svc_idtable *h, svc_idlink *l)
{
    svc_idlink **p = &h->buckets[hash_id(l->id, h->n_buckets)];
    while (*p && *p != l)
        p = &(*p)->next;
    if (*p)
        *p = l->next;
    h->count--;
}

/* -------------------------------------------------------------- the table */

svc_jobs *svc_jobs_new(void)
{
    svc_jobs *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    if (idtable_init(&t->by_id, 1024) < 0 || idtable_init(&t->batch_by_id, 256) < 0) {
        free(t->by_id.buckets);
        free(t);
        return NULL;
    }
    return t;
}

void svc_job_free(svc_job *j)
{
    if (!j)
        return;
    svc_params_unref(j->params);
    cJSON_Delete(j->view);
    if (j->images)
        for (int i = 0; i < j->n; i++) {
            free(j->images[i].infotext);
            svc_tilemap_free(j->images[i].tiles);
        }
    free(j->images);
    free(j->error_code);
    free(j->error_message);
    free(j->hist.ev);
    free(j);
}

void svc_jobs_free(svc_jobs *t)
{
    if (!t)
        return;
    for (svc_job *j = t->first, *next; j; j = next) {
        next = j->next;
        svc_job_free(j);
    }
    for (svc_batch *b = t->bfirst, *next; b; b = next) {
        next = b->next;
        free(b->jobs);
        free(b->hist.ev);
        free(b);
    }
    free(t->by_id.buckets);
    free(t->batch_by_id.buckets);
    free(t);
}

svc_job *svc_jobs_find(svc_jobs *t, uint64_t id)
{
    svc_idlink *l = idtable_find(&t->by_id, id);
    return l ? JOB_OF(l) : NULL;
}

svc_batch *svc_jobs_find_batch(svc_jobs *t, uint64_t id)
{
    svc_idlink *l = idtable_find(&t->batch_by_id, id);
    return l ? BATCH_OF(l) : NULL;
}

uint64_t svc_jobs_new_id(svc_jobs *t)
{
    uint64_t id;
    do
        id = svc_random_u64();
    while (id == 0 || svc_jobs_find(t, id));
    return id;
}

uint64_t svc_jobs_new_batch_id(svc_jobs *t)
{
    uint64_t id;
    do
        id = svc_random_u64();
    while (id == 0 || svc_jobs_find_batch(t, id));
    return id;
}

void svc_jobs_insert(svc_jobs *t, svc_job *j)
{
    idtable_insert(&t->by_id, &j->hlink, j->id);
    j->next = NULL;
    if (t->last)
        t->last->next = j;
    else
        t->first = j;
    t->last = j;
}

svc_batch *svc_batch_new(svc_jobs *t, uint64_t id, double created)
{
    svc_batch *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->id = id;
    svc_id_format('b', id, b->ids);
    b->created = created;
    idtable_insert(&t->batch_by_id, &b->hlink, id);
    b->next = t->bfirst;
    t->bfirst = b;
    return b;
}

void svc_batch_add(svc_batch *b, svc_job *j, int index)
{
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        svc_job **nj = realloc(b->jobs, (size_t)cap * sizeof *nj);
        if (!nj) {
            SVC_ERROR("jobs: out of memory adding %s to batch %s", j->ids, b->ids);
            return;
        }
        b->jobs = nj;
        b->cap = cap;
    }
    /* keep batch order (a restart may add them out of order) */
    int at = b->n;
    while (at > 0 && b->jobs[at - 1]->batch_index > index) {
        b->jobs[at] = b->jobs[at - 1];
        at--;
    }
    b->jobs[at] = j;
    b->n++;
    j->batch = b;
    j->batch_index = index;
    if (svc_state_final(j->state))
        b->final_jobs++;
}

void svc_jobs_rebuild_batches(svc_jobs *t)
{
    svc_batch *first_new = t->bfirst;
    for (svc_job *j = t->first; j; j = j->next) {
        if (!j->batch_id || j->batch)
            continue;
        svc_batch *b = svc_jobs_find_batch(t, j->batch_id);
        if (!b && !(b = svc_batch_new(t, j->batch_id, j->created)))
            continue;
        svc_batch_add(b, j, j->batch_index);
    }
    /* the batches made here (pushed in front of the list) get histories */
    for (svc_batch *b = t->bfirst; b && b != first_new; b = b->next) {
        for (int i = 0; i < b->n; i++) {
            svc_job *j = b->jobs[i];
            if (!svc_state_final(j->state))
                continue;
            for (int k = 0; k < j->n; k++)
                if (j->images[k].state == SVC_DONE)
                    svc_history_add(&b->hist, (svc_event){SVC_EV_B_IMAGE, i, k, 0, 0, 0});
            svc_history_add(&b->hist, (svc_event){SVC_EV_B_JOB, i, 0, 0, 0, 0});
        }
        if (b->final_jobs == b->n)
            svc_history_add(&b->hist, (svc_event){SVC_EV_B_DONE, 0, 0, 0, 0, 0});
    }
}

svc_job *svc_job_new(uint64_t id, svc_params *params, double created)
{
    svc_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->id = id;
    svc_id_format('j', id, j->ids);
    j->params = params;
    j->n = params->n;
    j->steps = params->steps;
    j->created = created;
    j->created_mono = svc_now_mono();
    j->position = -1;
    j->batch_index = -1;
    j->view = svc_params_view(params);
    j->images = calloc((size_t)j->n, sizeof *j->images);
    if (!j->view || !j->images) {
        j->params = NULL; /* the caller keeps its reference on failure */
        svc_job_free(j);
        return NULL;
    }
    for (int i = 0; i < j->n; i++) {
        /* ComfyUI's batch noise: every image keeps the seed (svc_params_to_engine) */
        j->images[i].seed = params->comfy_batch_noise ? params->seed : params->seed + (uint64_t)i;
        j->images[i].steps = params->steps;
    }
    return j;
}

/* ------------------------------------------------------------------- gc */

static void unlink_job(svc_jobs *t, svc_job *j, svc_job *prev)
{
    for (int i = 0; i < j->n; i++)
        svc_jobs_tile_lru_remove(t, &j->images[i]);
    idtable_remove(&t->by_id, &j->hlink);
    if (prev)
        prev->next = j->next;
    else
        t->first = j->next;
    if (t->last == j)
        t->last = prev;
}

/* A batch goes as a whole, once every job in it is final, persisted and
 * unwatched and no client follows the batch stream.  Its finishing time is
 * its last job's. */
static bool batch_evictable(const svc_batch *b, double *finished)
{
    if (b->clients || b->final_jobs < b->n)
        return false;
    double last = 0;
    for (int i = 0; i < b->n; i++) {
        const svc_job *j = b->jobs[i];
        if (!svc_state_final(j->state) || j->clients || j->watches || !j->persisted)
            return false;
        if (j->finished > last)
            last = j->finished;
    }
    *finished = last;
    return true;
}

static void unlink_batch(svc_jobs *t, svc_batch *b)
{
    idtable_remove(&t->batch_by_id, &b->hlink);
    for (svc_batch **p = &t->bfirst; *p; p = &(*p)->next) {
        if (*p == b) {
            *p = b->next;
            break;
        }
    }
}

/* Oldest first: a job (or a whole batch, counted as its jobs) goes when it
 * finished before the --keep-hours cutoff, or while more than --keep-jobs
 * finished jobs remain.  Mark, then sweep, since a batch's jobs are spread
 * through the job list. */
void svc_jobs_gc(svc_server *s)
{
    const int keep = s->cfg.keep_jobs;
    const double hours = s->cfg.keep_hours;
    svc_jobs_tile_evict(s);
    if (keep <= 0 && hours <= 0)
        return;
    svc_jobs *t = s->jobs;
    int finished = 0;
    for (svc_job *j = t->first; j; j = j->next)
        finished += svc_state_final(j->state) && !j->batch_id;
    const double cutoff = hours > 0 ? svc_now_unix() - hours * 3600.0 : -1.0;
    /* mark: jobs (and batches, through their first job) in age order */
    for (svc_job *j = t->first; j; j = j->next) {
        j->doomed = false;
        if (j->batch) {
            svc_batch *b = j->batch;
            if (j != b->jobs[0])
                continue; /* decided with the batch's first job */
            b->doomed = false;
            double last;
            if (!batch_evictable(b, &last))
                continue;
            bool old = cutoff > 0 && last > 0 && last < cutoff;
            bool over = keep > 0 && finished > keep;
            if (old || over) {
                b->doomed = true;
                finished -= b->n;
            }
            continue;
        }
        if (j->batch_id)
            continue; /* names a batch not rebuilt: keep */
        bool evictable = svc_state_final(j->state) && !j->clients && !j->watches &&
                         j->persisted;
        bool old = evictable && cutoff > 0 && j->finished > 0 && j->finished < cutoff;
        bool over = evictable && keep > 0 && finished > keep;
        if (old || over) {
            j->doomed = true;
            finished--;
        }
    }
    /* sweep */
    for (svc_job *j = t->first, *prev = NULL, *next; j; j = next) {
        next = j->next;
        if (!j->doomed && !(j->batch && j->batch->doomed)) {
            prev = j;
            continue;
        }
        unlink_job(t, j, prev);
        svc_store_remove_job(s->store, j->id);
        if (!j->batch)
            SVC_INFO("job %s: garbage-collected (%s)", j->ids,
                     cutoff > 0 && j->finished < cutoff ? "--keep-hours" : "--keep-jobs");
        svc_job_free(j);
    }
    for (svc_batch *b = t->bfirst, *next; b; b = next) {
        next = b->next;
        if (!b->doomed)
            continue;
        SVC_INFO("batch %s: garbage-collected with its %d jobs", b->ids, b->n);
        unlink_batch(t, b);
        free(b->jobs);
        free(b->hist.ev);
        free(b);
    }
}

void svc_job_set_owner(svc_job *j, const char *owner)
{
    snprintf(j->owner, sizeof j->owner, "%s", owner ? owner : "");
}

const char *svc_batch_owner(const svc_batch *b)
{
    return b->n > 0 ? b->jobs[0]->owner : "";
}
