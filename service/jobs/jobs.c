/*
 * service/jobs/jobs.c - the life of a job (see jobs.h).
 *
 * States: a job is queued until a worker takes its first image, running
 * until every image is final, then done (all images stored), failed (an
 * image failed: the rest are cancelled, the job carries the error) or
 * cancelled (DELETE).  Each change appends an event and wakes the job's
 * streams (and its batch's).  Final states are persisted through the
 * storage thread (job.json, then the journal's final record).
 *
 * The table itself (ids, batches, garbage collection) is table.c's, the
 * finished images' tiles in RAM tile_cache.c's (jobs_int.h).  Memory of
 * finished jobs: the job itself (a few hundred bytes plus its event
 * history) is bounded by --keep-jobs; its tiles, by far the larger part,
 * by --tile-cache-mb.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_int.h"
#include "log.h"
#include "server.h"
#include "sse.h"
#include "tiles.h"
#include "util.h"

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
        snprintf(e->owner, sizeof e->owner, "%s", j->owner); /* fair turns */
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
    svc_keys_count(&s->keys, j->owner, 1, 0);
    s->queue->ops->push(s->queue, entries, n);
    s->positions_dirty = true;
}

/* Fair turns (queue/local.c): with several keys waiting, a job's first
 * image comes after its key's older queued images (a of them) and, from
 * each other key, at most a + 1 more (one per turn, the turn order
 * unknown here): its position is that bound.  With one key it is the plain
 * count of the images ahead.  --queue's workers take the shared stream in
 * order (docs/scale-out.md): plain count.  Per key: its name, its queued
 * images, and those met so far in the walk. */
typedef struct key_tally {
    const char *owner;
    int total, ahead;
} key_tally;

static key_tally *tally_of(key_tally *v, int n, const char *owner)
{
    for (int k = 0; k < n; k++)
        if (strcmp(v[k].owner, owner) == 0)
            return &v[k];
    return NULL;
}

/* The keys with queued images (NULL, 0 when fewer than two or out of
 * memory: plain counts). */
static key_tally *tally_keys(svc_server *s, int *n_out)
{
    key_tally *v = NULL;
    int n = 0, cap = 0;
    *n_out = 0;
    if (s->cluster)
        return NULL;
    for (svc_job *j = s->jobs->qhead; j; j = j->qnext) {
        key_tally *t = tally_of(v, n, j->owner);
        if (!t) {
            if (n == cap) {
                cap = cap ? 2 * cap : 8;
                key_tally *nv = realloc(v, (size_t)cap * sizeof *nv);
                if (!nv) {
                    free(v);
                    return NULL;
                }
                v = nv;
            }
            t = &v[n++];
            *t = (key_tally){j->owner, 0, 0};
        }
        t->total += j->queued_images;
    }
    if (n < 2) {
        free(v);
        return NULL;
    }
    *n_out = n;
    return v;
}

void svc_jobs_update_positions(svc_server *s)
{
    if (!s->positions_dirty)
        return;
    s->positions_dirty = false;
    int ahead = 0, n_keys;
    key_tally *keys = tally_keys(s, &n_keys);
    for (svc_job *j = s->jobs->qhead; j; j = j->qnext) {
        int position = ahead;
        key_tally *mine = keys ? tally_of(keys, n_keys, j->owner) : NULL;
        if (mine) {
            position = mine->ahead;
            for (int k = 0; k < n_keys; k++)
                if (&keys[k] != mine)
                    position += keys[k].total < mine->ahead + 1 ? keys[k].total
                                                                : mine->ahead + 1;
            mine->ahead += j->queued_images;
        }
        if (j->position != position) {
            j->position = position;
            /* --queue: a job's events come from the shared event stream
             * only (same ids on every api node): its one `queued` event is
             * svc_job_queued_event's; the position is in GET /v1/jobs/{id} */
            if (j->state == SVC_QUEUED && !s->cluster)
                emit(s, j, SVC_EV_QUEUED, position, 0, 0, 0);
        }
        ahead += j->queued_images;
    }
    free(keys);
}

void svc_job_queued_event(svc_server *s, svc_job *j, int position)
{
    if (j->state == SVC_QUEUED && j->hist.n == 0)
        emit(s, j, SVC_EV_QUEUED, position, 0, 0, 0);
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
        svc_jobs_tile_lru_push(s->jobs, &j->images[i]); /* dropped later, never inside a route */
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
    if (j)
        svc_keys_count(&s->keys, j->owner, 0, 1);
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

void svc_jobs_on_requeued(svc_server *s, uint64_t job, int index)
{
    svc_job *j;
    svc_image *img = image_of(s, job, index, &j);
    s->running_images--;
    if (!img || img->state != SVC_RUNNING || svc_state_final(j->state))
        return; /* cancelled meanwhile: a worker that takes it again finds it final */
    SVC_INFO("job %s image %d: its device failed; back in the queue, it reruns from its start",
             j->ids, index);
    img->state = SVC_QUEUED;
    img->step = 0;
    if (j->queued_images++ == 0 && !j->in_queue_order) {
        /* back at the front, where the queue put its image */
        svc_jobs *t = s->jobs;
        j->qprev = NULL;
        j->qnext = t->qhead;
        if (t->qhead)
            t->qhead->qprev = j;
        else
            t->qtail = j;
        t->qhead = j;
        j->in_queue_order = true;
    }
    s->positions_dirty = true;
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
