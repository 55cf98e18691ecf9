/*
 * service/jobs/jobs.c - the job table and the life of a job (see jobs.h).
 *
 * States: a job is queued until a worker takes its first image, running
 * until every image is final, then done (all images stored), failed (an
 * image failed: the rest are cancelled, the job carries the error) or
 * cancelled (DELETE).  Each change appends an event and wakes the job's
 * streams (and its batch's).  Final states are persisted through the
 * storage thread (job.json, then the journal's final record).
 *
 * Memory of finished jobs: the job itself (a few hundred bytes plus its
 * event history) is bounded by --keep-jobs (default 10000); its tiles, by
 * far the larger part, by --tile-cache-mb through a least-recently-used
 * list of images (finalize adds them, svc_image_tiles moves them to the
 * end, tile_evict drops the oldest).  Eviction runs only where no route
 * holds a tile pointer: in svc_jobs_gc and at the start of svc_image_tiles.
 */
#include "jobs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "server.h"
#include "sse.h"
#include "tiles.h"
#include "util.h"

struct svc_jobs {
    svc_job **buckets;
    size_t n_buckets, count;
    svc_job *first, *last;          /* every job, oldest first */
    svc_batch **bbuckets;
    size_t n_bbuckets, bcount;
    svc_batch *bfirst;
    svc_job *qhead, *qtail;         /* jobs with queued images, in submission order */
    svc_image *tl_head, *tl_tail;   /* finished images holding tile bytes, LRU first */
    size_t tl_bytes;
};

const char *svc_state_name(svc_state s)
{
    static const char *names[] = {"queued", "running", "done", "failed", "cancelled"};
    return (unsigned)s < 5 ? names[s] : "unknown";
}

bool svc_history_add(svc_history *h, svc_event ev)
{
    if (h->n == h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 16;
        svc_event *nv = realloc(h->ev, (size_t)cap * sizeof *nv);
        if (!nv) {
            SVC_ERROR("jobs: out of memory for an event");
            return false;
        }
        h->ev = nv;
        h->cap = cap;
    }
    h->ev[h->n++] = ev;
    return true;
}

static size_t hash_id(uint64_t id, size_t n)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (size_t)(id & (n - 1));
}

svc_jobs *svc_jobs_new(void)
{
    svc_jobs *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->n_buckets = 1024;
    t->buckets = calloc(t->n_buckets, sizeof *t->buckets);
    t->n_bbuckets = 256;
    t->bbuckets = calloc(t->n_bbuckets, sizeof *t->bbuckets);
    if (!t->buckets || !t->bbuckets) {
        free(t->buckets);
        free(t->bbuckets);
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
    free(t->buckets);
    free(t->bbuckets);
    free(t);
}

svc_job *svc_jobs_find(svc_jobs *t, uint64_t id)
{
    for (svc_job *j = t->buckets[hash_id(id, t->n_buckets)]; j; j = j->hnext)
        if (j->id == id)
            return j;
    return NULL;
}

svc_batch *svc_jobs_find_batch(svc_jobs *t, uint64_t id)
{
    for (svc_batch *b = t->bbuckets[hash_id(id, t->n_bbuckets)]; b; b = b->hnext)
        if (b->id == id)
            return b;
    return NULL;
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

static void grow(svc_jobs *t)
{
    size_t n = t->n_buckets * 2;
    svc_job **nb = calloc(n, sizeof *nb);
    if (!nb)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < t->n_buckets; i++) {
        for (svc_job *j = t->buckets[i], *next; j; j = next) {
            next = j->hnext;
            size_t h = hash_id(j->id, n);
            j->hnext = nb[h];
            nb[h] = j;
        }
    }
    free(t->buckets);
    t->buckets = nb;
    t->n_buckets = n;
}

void svc_jobs_insert(svc_jobs *t, svc_job *j)
{
    if (t->count + 1 > t->n_buckets * 2)
        grow(t);
    size_t h = hash_id(j->id, t->n_buckets);
    j->hnext = t->buckets[h];
    t->buckets[h] = j;
    j->next = NULL;
    if (t->last)
        t->last->next = j;
    else
        t->first = j;
    t->last = j;
    t->count++;
}

svc_batch *svc_batch_new(svc_jobs *t, uint64_t id, double created)
{
    svc_batch *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->id = id;
    svc_id_format('b', id, b->ids);
    b->created = created;
    if (t->bcount + 1 > t->n_bbuckets * 2) {
        size_t n = t->n_bbuckets * 2;
        svc_batch **nb = calloc(n, sizeof *nb);
        if (nb) {
            for (size_t i = 0; i < t->n_bbuckets; i++) {
                for (svc_batch *x = t->bbuckets[i], *next; x; x = next) {
                    next = x->hnext;
                    size_t h = hash_id(x->id, n);
                    x->hnext = nb[h];
                    nb[h] = x;
                }
            }
            free(t->bbuckets);
            t->bbuckets = nb;
            t->n_bbuckets = n;
        }
    }
    size_t h = hash_id(id, t->n_bbuckets);
    b->hnext = t->bbuckets[h];
    t->bbuckets[h] = b;
    b->next = t->bfirst;
    t->bfirst = b;
    t->bcount++;
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
        j->images[i].seed = params->seed + (uint64_t)i;
        j->images[i].steps = params->steps;
    }
    return j;
}

/* ---------------------------------------------------------------- events */

void svc_job_watch(svc_job *j, svc_watch *w)
{
    w->prev = NULL;
    w->next = j->watches;
    if (j->watches)
        j->watches->prev = w;
    j->watches = w;
}

void svc_job_unwatch(svc_job *j, svc_watch *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else if (j->watches == w)
        j->watches = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

static void emit(svc_server *s, svc_job *j, svc_event_kind kind, int a, int b, int c, double eta)
{
    svc_event ev = {(uint8_t)kind, 0, a, b, c, (float)eta};
    if (!svc_history_add(&j->hist, ev))
        return;
    svc_sse_job_notify(s, j);
    for (svc_watch *w = j->watches, *next; w; w = next) {
        next = w->next; /* on_event may unwatch itself */
        w->on_event(s, j, &ev, w->arg);
    }
}

static void emit_batch(svc_server *s, svc_batch *b, svc_event_kind kind, int job, int a)
{
    svc_event ev = {(uint8_t)kind, job, a, 0, 0, 0};
    if (svc_history_add(&b->hist, ev))
        svc_sse_batch_notify(s, b);
}

/* ----------------------------------------------------------- queue order */

static void qorder_remove(svc_jobs *t, svc_job *j)
{
    if (!j->in_queue_order)
        return;
    if (j->qprev)
        j->qprev->qnext = j->qnext;
    else
        t->qhead = j->qnext;
    if (j->qnext)
        j->qnext->qprev = j->qprev;
    else
        t->qtail = j->qprev;
    j->qprev = j->qnext = NULL;
    j->in_queue_order = false;
}

void svc_job_enqueue(svc_server *s, svc_job *j)
{
    svc_jobs *t = s->jobs;
    svc_entry *entries[SVC_MAX_IMAGES_PER_JOB];
    int n = 0;
    for (int i = 0; i < j->n && n < SVC_MAX_IMAGES_PER_JOB; i++) {
        svc_entry *e = svc_entry_new(j->id, i, j->params);
        if (!e) {
            SVC_ERROR("jobs: out of memory queueing %s", j->ids);
            for (int k = 0; k < n; k++)
                svc_entry_free(entries[k]);
            svc_job_fail(s, j, "internal", "out of memory queueing the job");
            return;
        }
        entries[n++] = e;
    }
    j->queued_images = n;
    j->in_queue_order = true;
    j->qnext = NULL;
    j->qprev = t->qtail;
    if (t->qtail)
        t->qtail->qnext = j;
    else
        t->qhead = j;
    t->qtail = j;
    s->metrics.jobs[SVC_JC_QUEUED]++;
    s->queue->ops->push(s->queue, entries, n);
    s->positions_dirty = true;
}

void svc_jobs_update_positions(svc_server *s)
{
    if (!s->positions_dirty)
        return;
    s->positions_dirty = false;
    int ahead = 0;
    for (svc_job *j = s->jobs->qhead; j; j = j->qnext) {
        if (j->position != ahead) {
            j->position = ahead;
            /* --queue: a job's events come from the shared event stream
             * only (same ids on every api node): its one `queued` event is
             * svc_job_queued_event's; the position is in GET /v1/jobs/{id} */
            if (j->state == SVC_QUEUED && !s->cluster)
                emit(s, j, SVC_EV_QUEUED, ahead, 0, 0, 0);
        }
        ahead += j->queued_images;
    }
}

void svc_job_queued_event(svc_server *s, svc_job *j, int position)
{
    if (j->state == SVC_QUEUED && j->hist.n == 0)
        emit(s, j, SVC_EV_QUEUED, position, 0, 0, 0);
}

/* ------------------------------------------------- finished jobs' tiles */

static void tile_lru_remove(svc_jobs *t, svc_image *img)
{
    if (!img->in_tile_lru)
        return;
    if (img->tile_prev)
        img->tile_prev->tile_next = img->tile_next;
    else
        t->tl_head = img->tile_next;
    if (img->tile_next)
        img->tile_next->tile_prev = img->tile_prev;
    else
        t->tl_tail = img->tile_prev;
    img->tile_prev = img->tile_next = NULL;
    t->tl_bytes -= img->tile_lru_bytes;
    img->tile_lru_bytes = 0;
    img->in_tile_lru = false;
}

/* At the end (most recently used); only maps that hold bytes. */
static void tile_lru_push(svc_jobs *t, svc_image *img)
{
    tile_lru_remove(t, img);
    if (!img->tiles || img->tiles->dropped || img->tiles->bytes == 0)
        return;
    img->tile_lru_bytes = img->tiles->bytes;
    img->tile_prev = t->tl_tail;
    img->tile_next = NULL;
    if (t->tl_tail)
        t->tl_tail->tile_next = img;
    else
        t->tl_head = img;
    t->tl_tail = img;
    t->tl_bytes += img->tile_lru_bytes;
    img->in_tile_lru = true;
}

/* Drop the least recently used finished images' tile bytes past the budget. */
static void tile_evict(svc_server *s)
{
    svc_jobs *t = s->jobs;
    const size_t budget =
        s->cfg.tile_cache_mb > 0 ? (size_t)s->cfg.tile_cache_mb << 20 : (size_t)0;
    while (t->tl_bytes > budget && t->tl_head) {
        svc_image *img = t->tl_head;
        tile_lru_remove(t, img);
        svc_tilemap_drop(img->tiles);
    }
}

/* ------------------------------------------------------------- finishing */

static void finalize(svc_server *s, svc_job *j, svc_state state)
{
    j->state = state;
    j->finished = svc_now_unix();
    qorder_remove(s->jobs, j);
    j->queued_images = 0;
    s->positions_dirty = true;
    switch (state) {
    case SVC_DONE:
        s->metrics.jobs[SVC_JC_DONE]++;
        svc_hist_observe(&s->metrics.done, svc_now_mono() - j->created_mono);
        emit(s, j, SVC_EV_DONE, 0, 0, 0, 0);
        break;
    case SVC_FAILED:
        s->metrics.jobs[SVC_JC_FAILED]++;
        emit(s, j, SVC_EV_FAILED, 0, 0, 0, 0);
        break;
    default:
        s->metrics.jobs[SVC_JC_CANCELLED]++;
        emit(s, j, SVC_EV_CANCELLED, 0, 0, 0, 0);
        break;
    }
    if (j->batch) {
        svc_batch *b = j->batch;
        emit_batch(s, b, SVC_EV_B_JOB, j->batch_index, 0);
        if (++b->final_jobs == b->n)
            emit_batch(s, b, SVC_EV_B_DONE, 0, 0);
    }
    svc_server_persist_final(s, j);
    for (int i = 0; i < j->n; i++)
        tile_lru_push(s->jobs, &j->images[i]); /* dropped later, never inside a route */
    SVC_INFO("job %s %s (%d image%s)", j->ids, svc_state_name(state), j->n, j->n == 1 ? "" : "s");
}

/* All images final: the job's end. */
static void maybe_finish(svc_server *s, svc_job *j)
{
    if (svc_state_final(j->state))
        return;
    bool failed = false, cancelled = false;
    for (int i = 0; i < j->n; i++) {
        if (!svc_state_final(j->images[i].state))
            return;
        failed |= j->images[i].state == SVC_FAILED;
        cancelled |= j->images[i].state == SVC_CANCELLED;
    }
    finalize(s, j, failed ? SVC_FAILED : cancelled ? SVC_CANCELLED : SVC_DONE);
}

/* Stop everything of a job that is not final: queued entries and running
 * images; marks those images `mark`. */
static void stop_images(svc_server *s, svc_job *j, svc_state mark)
{
    if (j->queued_images > 0)
        s->queue->ops->remove_job(s->queue, j->id);
    j->queued_images = 0;
    qorder_remove(s->jobs, j);
    s->positions_dirty = true;
    bool running = false;
    for (int i = 0; i < j->n; i++) {
        svc_image *img = &j->images[i];
        running |= img->state == SVC_RUNNING;
        if (!svc_state_final(img->state))
            img->state = mark;
    }
    /* a worker may have taken an image the loop has not heard of yet: tell
     * them all (cheap; unknown jobs are ignored) */
    (void)running;
    svc_server_cancel_running(s, j->id);
}

bool svc_job_cancel(svc_server *s, svc_job *j)
{
    if (svc_state_final(j->state))
        return false;
    stop_images(s, j, SVC_CANCELLED);
    finalize(s, j, SVC_CANCELLED);
    return true;
}

void svc_job_fail(svc_server *s, svc_job *j, const char *code, const char *message)
{
    if (svc_state_final(j->state))
        return;
    free(j->error_code);
    free(j->error_message);
    j->error_code = strdup(code);
    j->error_message = strdup(message ? message : "");
    stop_images(s, j, SVC_FAILED);
    finalize(s, j, SVC_FAILED);
}

/* ------------------------------------------------------- worker messages */

static svc_image *image_of(svc_server *s, uint64_t job, int index, svc_job **out)
{
    svc_job *j = svc_jobs_find(s->jobs, job);
    *out = j;
    if (!j || index < 0 || index >= j->n)
        return NULL;
    return &j->images[index];
}

void svc_jobs_on_started(svc_server *s, uint64_t job, int index)
{
    svc_job *j;
    svc_image *img = image_of(s, job, index, &j);
    s->running_images++;
    if (!img || img->state != SVC_QUEUED || svc_state_final(j->state))
        return;
    img->state = SVC_RUNNING;
    img->started_mono = svc_now_mono();
    img->step = 0;
    if (j->queued_images > 0 && --j->queued_images == 0)
        qorder_remove(s->jobs, j);
    s->positions_dirty = true;
    if (j->state == SVC_QUEUED) {
        j->state = SVC_RUNNING;
        j->started = svc_now_unix();
        s->metrics.jobs[SVC_JC_RUNNING]++;
        emit(s, j, SVC_EV_STARTED, 0, 0, 0, 0);
    }
}

void svc_jobs_on_step(svc_server *s, uint64_t job, int index, int step, int steps)
{
    svc_job *j;
    svc_image *img = image_of(s, job, index, &j);
    if (!img || img->state != SVC_RUNNING || svc_state_final(j->state))
        return;
    img->step = step;
    img->steps = steps;
    const double now = svc_now_mono();
    const double elapsed = now - img->started_mono;
    const double eta = step > 0 ? elapsed / step * (steps - step) : 0.0;
    if (!j->first_step_seen) {
        j->first_step_seen = true;
        svc_hist_observe(&s->metrics.first_step, now - j->created_mono);
    }
    emit(s, j, SVC_EV_STEP, index, step, steps, eta);
}

void svc_jobs_on_stored(svc_server *s, uint64_t job, int index, const char *etag, size_t bytes,
                        char **infotext)
{
    svc_job *j;
    svc_image *img = image_of(s, job, index, &j);
    s->running_images--;
    s->metrics.images++;
    if (!img || svc_state_final(img->state) || svc_state_final(j->state))
        return; /* cancelled meanwhile: the file stays, the job's story has ended */
    img->state = SVC_DONE;
    img->step = img->steps;
    snprintf(img->etag, sizeof img->etag, "%s", etag);
    img->bytes = bytes;
    free(img->infotext);
    img->infotext = *infotext;
    *infotext = NULL;
    emit(s, j, SVC_EV_IMAGE, index, 0, 0, 0);
    if (j->batch)
        emit_batch(s, j->batch, SVC_EV_B_IMAGE, j->batch_index, index);
    maybe_finish(s, j);
}

void svc_jobs_on_failed(svc_server *s, uint64_t job, int index, int status, const char *message)
{
    svc_job *j;
    svc_image *img = image_of(s, job, index, &j);
    s->running_images--;
    if (!img || svc_state_final(j->state))
        return;
    SVC_WARN("job %s image %d failed: %s", j->ids, index, message ? message : tsr_strerror(status));
    img->state = SVC_FAILED;
    char text[600];
    snprintf(text, sizeof text, "image %d failed: %s", index,
             message && message[0] ? message : tsr_strerror(status));
    svc_job_fail(s, j, status == TSR_ERR_NOMEM ? "out_of_memory" : "generation_failed", text);
}

void svc_jobs_on_cancelled(svc_server *s, uint64_t job, int index)
{
    svc_job *j;
    svc_image *img = image_of(s, job, index, &j);
    s->running_images--;
    if (!img || svc_state_final(j->state))
        return;
    if (s->phase >= SVC_PHASE_DRAINING) {
        /* the drain cut it short: it reruns at the next start */
        img->state = SVC_QUEUED;
        img->step = 0;
        return;
    }
    img->state = SVC_CANCELLED;
    maybe_finish(s, j);
}

/* ---------------------------------------------------------------- tiles */

void svc_jobs_on_tiles(svc_server *s, uint64_t job, int index, svc_tileset **tsp)
{
    svc_job *j;
    svc_image *img = image_of(s, job, index, &j);
    svc_tileset *ts = *tsp;
    /* a preview that lost the race with a cancel, or a job already over */
    if (!img || img->state != SVC_RUNNING || svc_state_final(j->state))
        return;
    s->metrics.tile_encode_seconds += ts->encode_seconds;
    s->metrics.tiles_published += (uint64_t)ts->n;
    for (int i = 0; i < ts->n; i++)
        s->metrics.tile_bytes += ts->tiles[i].len;
    int pub = svc_tilemap_apply(&img->tiles, ts);
    if (pub < 0) {
        SVC_WARN("job %s image %d: tiles dropped (out of memory or a new grid)", j->ids, index);
        return;
    }
    if (img->tiles->pubs[pub].n > 0)
        emit(s, j, SVC_EV_TILES, index, pub, ts->step, 0);
}

svc_tilemap *svc_image_tiles(svc_server *s, svc_job *j, int index)
{
    svc_image *img = &j->images[index];
    svc_tilemap *m = img->tiles;
    if (m && !m->dropped) {
        if (img->in_tile_lru)
            tile_lru_push(s->jobs, img); /* used: to the end */
        return m;
    }
    /* not in RAM (after a restart, or dropped past --tile-cache-mb): the
     * final versions from <i>.tiles, for a done image only */
    if (img->state != SVC_DONE || img->tiles_unreadable)
        return m;
    tile_evict(s); /* make room first: nothing else is handed out now */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/jobs/%s/%d.tiles", s->cfg.data_dir, j->ids, index);
    char *data = NULL;
    size_t len = 0;
    int rc = svc_read_file(path, &data, &len, 256u << 20);
    if (rc == 0 && svc_tilemap_reload(&img->tiles, (const uint8_t *)data, len) < 0) {
        SVC_WARN("%s: not a tile file (or out of memory); ignored", path);
        rc = -EINVAL;
    }
    free(data);
    if (rc < 0) {
        img->tiles_unreadable = rc != -ENOMEM;
        return img->tiles;
    }
    if (svc_state_final(j->state))
        tile_lru_push(s->jobs, img);
    return img->tiles;
}

/* ------------------------------------------------------------------- gc */

static void unlink_job(svc_jobs *t, svc_job *j, svc_job *prev)
{
    for (int i = 0; i < j->n; i++)
        tile_lru_remove(t, &j->images[i]);
    svc_job **h = &t->buckets[hash_id(j->id, t->n_buckets)];
    while (*h && *h != j)
        h = &(*h)->hnext;
    if (*h)
        *h = j->hnext;
    if (prev)
        prev->next = j->next;
    else
        t->first = j->next;
    if (t->last == j)
        t->last = prev;
    t->count--;
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
    svc_batch **h = &t->bbuckets[hash_id(b->id, t->n_bbuckets)];
    while (*h && *h != b)
        h = &(*h)->hnext;
    if (*h)
        *h = b->hnext;
    for (svc_batch **p = &t->bfirst; *p; p = &(*p)->next) {
        if (*p == b) {
            *p = b->next;
            break;
        }
    }
    t->bcount--;
}

/* Oldest first: a job (or a whole batch, counted as its jobs) goes when it
 * finished before the --keep-hours cutoff, or while more than --keep-jobs
 * finished jobs remain.  Mark, then sweep, since a batch's jobs are spread
 * through the job list. */
void svc_jobs_gc(svc_server *s)
{
    const int keep = s->cfg.keep_jobs;
    const double hours = s->cfg.keep_hours;
    tile_evict(s);
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
