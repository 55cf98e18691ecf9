/*
 * service/worker.c - see worker.h.
 */
#include "worker_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"
#include "weights.h"

static void post(svc_worker *w, svc_msg *m)
{
    if (!m) {
        SVC_ERROR("worker %d: out of memory posting a message", w->cfg.index);
        return;
    }
    m->worker = w->cfg.index;
    svc_mailbox_post(w->cfg.mailbox, m);
}

void svc_worker_post(svc_worker *w, svc_msg *m)
{
    post(w, m);
}

static svc_msg *image_msg(svc_msg_type type, const slot *s)
{
    svc_msg *m = svc_msg_new(type);
    if (m) {
        m->job = s->job_id;
        m->index = s->index;
    }
    return m;
}

static int find_slot(svc_worker *w, int batch_image)
{
    for (int i = 0; i < w->n_slots; i++)
        if (w->slots[i].batch_image == batch_image)
            return i;
    return -1;
}

static void drop_slot(svc_worker *w, int i)
{
    svc_params_unref(w->slots[i].params);
    memmove(&w->slots[i], &w->slots[i + 1], (size_t)(w->n_slots - i - 1) * sizeof w->slots[0]);
    w->n_slots--;
}

/* A final image: take it out of the batch and hand it on. */
static void finish(svc_worker *w, int i, tsr_image_state state, int status)
{
    slot s = w->slots[i];
    drop_slot(w, i);
    tsr_result res;
    memset(&res, 0, sizeof res);
    int rc = tsr_batch_take(w->batch, s.batch_image, &res);
    if (rc == TSR_OK && res.status == TSR_OK && res.rgb) {
        /* the tile encoder publishes its final tiles, then the storage
         * thread encodes and writes the PNG and tells the loop */
        if (w->cfg.tiles)
            svc_tiles_final(w->cfg.tiles, s.job_id, s.index, s.evals + 1, s.last_step, res.rgb,
                            res.width, res.height, res.parameters);
        else
            svc_store_image(w->cfg.store, s.job_id, s.index, res.rgb, res.width, res.height,
                            res.parameters);
        res.rgb = NULL;
        res.parameters = NULL;
        tsr_result_free(&res);
        return;
    }
    if (w->cfg.tiles)
        svc_tiles_forget(w->cfg.tiles, s.job_id, s.index);
    if ((rc == TSR_OK && res.status == TSR_ERR_CANCELLED) ||
        (rc < 0 && state == TSR_IMAGE_CANCELLED)) {
        post(w, image_msg(SVC_MSG_IMAGE_CANCELLED, &s));
    } else {
        svc_msg *m = image_msg(SVC_MSG_IMAGE_FAILED, &s);
        int why = rc < 0 ? rc : (res.status != TSR_OK ? res.status : status);
        if (m) {
            char text[512];
            const char *detail = tsr_last_error();
            snprintf(text, sizeof text, "%s%s%s", tsr_strerror(why), detail[0] ? ": " : "",
                     detail);
            m->status = why;
            m->text = strdup(text);
        }
        post(w, m);
    }
    tsr_result_free(&res);
}

static void on_step(void *user, const tsr_step_info *info)
{
    svc_worker *w = user;
    int i = find_slot(w, info->image);
    if (i < 0)
        return;
    switch (info->state) {
    case TSR_IMAGE_DENOISING:
        w->slots[i].evals++;
        if (w->cfg.tiles && info->preview_rgb && info->preview_width > 0 &&
            info->preview_height > 0) {
            /* a copy for the encoder pool: the only cost on this thread */
            const size_t n = (size_t)info->preview_width * info->preview_height * 3;
            uint8_t *copy = malloc(n);
            if (copy) {
                memcpy(copy, info->preview_rgb, n);
                svc_tiles_preview(w->cfg.tiles, w->slots[i].job_id, w->slots[i].index,
                                  w->slots[i].evals, info->step, copy, info->preview_width,
                                  info->preview_height);
            }
        }
        if (info->step != w->slots[i].last_step) {
            w->slots[i].last_step = info->step;
            svc_msg *m = image_msg(SVC_MSG_IMAGE_STEP, &w->slots[i]);
            if (m) {
                m->step = info->step;
                m->steps = info->steps;
            }
            post(w, m);
        }
        break;
    case TSR_IMAGE_FAILED:
        if (info->status == TSR_ERR_BACKEND || info->status == TSR_ERR_NOMEM) {
            /* the device's fault, perhaps: decided once the step returns */
            w->slots[i].pending = info->status;
            break;
        }
        finish(w, i, info->state, info->status);
        break;
    case TSR_IMAGE_DONE:
    case TSR_IMAGE_CANCELLED: finish(w, i, info->state, info->status); break;
    default: break;
    }
}

static void cancel_slot(svc_worker *w, int i)
{
    if (w->leading) /* the partner cancels it at the same point */
        svc_pair_cancel(w->cfg.pair, w->slots[i].batch_image);
    int rc = tsr_batch_cancel(w->batch, w->slots[i].batch_image);
    if (rc < 0 && rc != TSR_ERR_INVALID) {
        SVC_WARN("worker %d: cannot cancel image %d: %s", w->cfg.index, w->slots[i].batch_image,
                 tsr_last_error());
        return;
    }
    /* CANCELLED at once (or already final): take it now */
    finish(w, i, TSR_IMAGE_CANCELLED, TSR_ERR_CANCELLED);
}

static void apply_cancels(svc_worker *w)
{
    pthread_mutex_lock(&w->mu);
    uint64_t *list = w->cancels;
    int n = w->n_cancels;
    w->cancels = NULL;
    w->n_cancels = w->cap_cancels = 0;
    pthread_mutex_unlock(&w->mu);
    const bool all = atomic_load(&w->abort);
    for (int i = w->n_slots - 1; i >= 0; i--) {
        bool hit = all;
        for (int k = 0; k < n && !hit; k++)
            hit = w->slots[i].job_id == list[k];
        if (hit)
            cancel_slot(w, i);
    }
    free(list);
}

/* Take the device out: every image it holds goes back to the front of the
 * queue in its order (oldest first), to rerun from its start elsewhere.
 * The REQUEUED messages are posted before the entries are pushed, so the
 * loop hears of the requeue before any other worker's STARTED. */
/* Every unfinished image of this worker's batch leaves it: cancelled and
 * taken, its tiles forgotten, and handed back to the front of the queue to
 * rerun from its start (REQUEUED posted before the entries are pushed), or,
 * where the queue cannot take it back, failed with status and
 * "<what>: <why>". */
static void requeue_slots(svc_worker *w, int status, const char *what, const char *why)
{
    svc_queue *q = w->cfg.queue;
    svc_entry *entries[MAX_SLOTS];
    int n = 0;
    for (int i = 0; i < w->n_slots; i++) {
        slot *s = &w->slots[i];
        tsr_batch_cancel(w->batch, s->batch_image); /* INVALID when already final */
        tsr_result res;
        memset(&res, 0, sizeof res);
        if (tsr_batch_take(w->batch, s->batch_image, &res) == TSR_OK)
            tsr_result_free(&res);
        if (w->cfg.tiles)
            svc_tiles_forget(w->cfg.tiles, s->job_id, s->index);
        svc_entry *e = q->ops->requeue ? svc_entry_new(s->job_id, s->index, s->params) : NULL;
        if (e) {
            snprintf(e->owner, sizeof e->owner, "%s", s->owner);
            entries[n++] = e;
            post(w, image_msg(SVC_MSG_IMAGE_REQUEUED, s));
        } else {
            svc_msg *f = image_msg(SVC_MSG_IMAGE_FAILED, s);
            if (f) {
                char text[512];
                snprintf(text, sizeof text, "%s: %s", what, why);
                f->status = status;
                f->text = strdup(text);
            }
            post(w, f);
        }
        svc_params_unref(s->params);
        s->params = NULL;
    }
    w->n_slots = 0;
    if (n > 0)
        q->ops->requeue(q, entries, n);
}

static void fail_device(svc_worker *w, int status, const char *reason)
{
    w->failed = true;
    atomic_store(&w->gone, true);
    if (w->cfg.pair) {
        svc_pair_mark_dead(w->cfg.pair, w->cfg.pair_me);
        if (w->leading) /* the partner's step fails at once, not after the timeout */
            svc_pair_abort(w->cfg.pair, reason);
    }
    SVC_ERROR("device %s (worker %d) is taken out: %s; its %d unfinished image%s rerun on the "
              "other devices",
              w->cfg.name, w->cfg.index, reason, w->n_slots, w->n_slots == 1 ? "" : "s");
    svc_msg *m = svc_msg_new(SVC_MSG_DEVICE_FAILED);
    if (m) {
        m->status = status;
        m->images = w->n_slots;
        m->text = strdup(reason);
    }
    post(w, m);
    char what[96];
    snprintf(what, sizeof what, "device %s failed", w->cfg.name);
    requeue_slots(w, status, what, reason);
    if (w->leading) {
        svc_pair_end(w->cfg.pair, w->batch);
        w->leading = false;
    }
}

void svc_worker_take_out(svc_worker *w, int status, const char *reason)
{
    fail_device(w, status, reason);
}

/* A leader's pair failed for its partner's sake (or the pairing's: ranks
 * out of step): its device is fine, so its images go back to the front of
 * the queue, to rerun from their start, and the pair ends. */
static void pair_failed(svc_worker *w, const char *why)
{
    SVC_ERROR("device %s (worker %d): its CFG pair failed: %s; its %d unfinished image%s rerun",
              w->cfg.name, w->cfg.index, why, w->n_slots, w->n_slots == 1 ? "" : "s");
    requeue_slots(w, TSR_ERR_BACKEND, "CFG pair failed", why);
    svc_pair_end(w->cfg.pair, w->batch);
    w->leading = false;
}

/* After a step: a call that failed for the device's sake takes it out;
 * otherwise the images that waited on that verdict fail as usual. */
static void after_step(svc_worker *w, int rc)
{
    const int limit = w->cfg.oom_limit > 0 ? w->cfg.oom_limit : 3;
    if (rc == TSR_ERR_NOMEM)
        w->oom_in_a_row++;
    else if (rc >= 0)
        w->oom_in_a_row = 0;
    char reason[512];
    if (rc == TSR_ERR_BACKEND) {
        snprintf(reason, sizeof reason, "device error: %s", tsr_last_error());
        fail_device(w, rc, reason);
        return;
    }
    if (rc == TSR_ERR_NOMEM && w->oom_in_a_row >= limit) {
        snprintf(reason, sizeof reason, "out of memory in %d UNet calls in a row: %s", limit,
                 tsr_last_error());
        fail_device(w, rc, reason);
        return;
    }
    for (int i = w->n_slots - 1; i >= 0; i--)
        if (w->slots[i].pending)
            finish(w, i, TSR_IMAGE_FAILED, w->slots[i].pending);
}

/* Submit a queue entry to the batch. */
static void admit(svc_worker *w, svc_entry *e)
{
    tsr_image_params p;
    svc_params_to_engine(e->params, e->index, &p);
    slot s = {0, e->job, e->index, e->width, e->height, -1, 0, 0, NULL, ""};
    svc_msg *m = image_msg(SVC_MSG_IMAGE_STARTED, &s);
    post(w, m);
    int rc = tsr_batch_submit(w->batch, &p, &s.batch_image);
    if (rc == TSR_OK && w->leading)
        svc_pair_submit(w->cfg.pair, s.batch_image, e->params, e->index);
    if (rc < 0) {
        svc_msg *f = image_msg(SVC_MSG_IMAGE_FAILED, &s);
        if (f) {
            f->status = rc;
            f->text = strdup(tsr_last_error());
        }
        post(w, f);
    } else {
        s.params = svc_params_ref(e->params);
        snprintf(s.owner, sizeof s.owner, "%s", e->owner);
        w->slots[w->n_slots++] = s;
    }
    svc_entry_free(e);
}

/* Pull entries while the batch has room.  Blocks only when the batch is
 * empty.  Returns false when the queue is closed and nothing runs.  With
 * static batching a running batch takes nobody: its images start together
 * and the batch waits for the slowest before the next group is admitted. */
static bool fill(svc_worker *w)
{
    int max = w->cfg.max_batch < MAX_SLOTS ? w->cfg.max_batch : MAX_SLOTS;
    const bool was_empty = w->n_slots == 0;
    if (w->cfg.static_batching && !was_empty)
        return true;
    if (w->leading && !svc_pair_keeps_filling(w->cfg.pair))
        return true; /* auto: the pair runs its one image */
    if (w->cfg.pair && was_empty) {
        /* idle: wait for an entry, or for the partner to claim this device */
        bool follow = false;
        svc_entry *e = svc_pair_idle_pop(w->cfg.pair, w->cfg.pair_me, w->cfg.queue, &w->abort,
                                         &follow);
        if (follow) {
            if (!svc_pair_follow(w->cfg.pair, w->cfg.pair_me, w))
                return false; /* this device failed while following: the thread ends */
            return true;      /* back to the top: idle again */
        }
        if (!e)
            return false; /* closed (drain) or aborted */
        w->leading = svc_pair_try_lead(w->cfg.pair, w->cfg.pair_me, w->cfg.queue, e, w->batch,
                                       atomic_load(&w->engine));
        admit(w, e);
        if (w->n_slots == 0 && w->leading) { /* its submit failed: nothing to pair for */
            svc_pair_end(w->cfg.pair, w->batch);
            w->leading = false;
        }
        if (w->n_slots == 0 || (w->leading && !svc_pair_keeps_filling(w->cfg.pair)))
            return true;
        if (w->leading)
            max = svc_pair_capacity(w->cfg.pair, w->cfg.max_batch);
    } else if (w->leading) {
        max = svc_pair_capacity(w->cfg.pair, w->cfg.max_batch);
    }
    while (w->n_slots < max && !atomic_load(&w->abort)) {
        bool shape = w->n_slots > 0;
        svc_entry *e = w->cfg.queue->ops->pop(w->cfg.queue, shape, shape ? w->slots[0].width : 0,
                                              shape ? w->slots[0].height : 0,
                                              w->n_slots == 0 ? -1 : 0);
        if (!e)
            break;
        admit(w, e);
    }
    if (w->n_slots == 0)
        return false; /* the blocking pop gave nothing: closed (drain) or aborted */
    /* a new group may wait a little for company (--max-wait-ms) */
    if (was_empty && w->cfg.max_wait_ms > 0) {
        const double deadline = svc_now_mono() + w->cfg.max_wait_ms / 1000.0;
        while (w->n_slots < max && !atomic_load(&w->abort)) {
            int left = (int)((deadline - svc_now_mono()) * 1000.0);
            if (left <= 0)
                break;
            svc_entry *e = w->cfg.queue->ops->pop(w->cfg.queue, true, w->slots[0].width,
                                                  w->slots[0].height, left);
            if (!e)
                break;
            admit(w, e);
        }
    }
    return true;
}

static void *worker_main(void *arg)
{
    svc_worker *w = arg;
    tsr_engine_options eo;
    tsr_engine_options_init(&eo);
    eo.model = w->cfg.model;
    eo.device = w->cfg.device;
    eo.threads = w->cfg.threads;
    eo.precision = w->cfg.precision;
    eo.lora_dir = w->cfg.lora_dir;
    eo.embeddings_dir = w->cfg.embeddings_dir;
    eo.lora_cache_mb = w->cfg.lora_cache_mb;
    tsr_engine *engine = NULL;
    int rc = TSR_ERR_UNSUPPORTED;
    svc_worker *src = w->cfg.share_from;
    svc_weights *wg = w->cfg.weights;
    if (wg && w->cfg.weights_rank > 0) {
        /* the first device's weights by broadcast (weights.h) */
        rc = svc_weights_rank_open(wg, w->cfg.weights_rank, NULL, &eo, &w->abort, &engine);
    } else if (src) {
        /* the first CPU worker's weights, once it has them (it may fail:
         * then read the model as usual) */
        const struct timespec tick = {0, 5 * 1000 * 1000};
        while (atomic_load(&src->opened) == 0 && !atomic_load(&w->abort))
            nanosleep(&tick, NULL);
        if (atomic_load(&src->opened) == 1) {
            rc = tsr_engine_open_replica(atomic_load(&src->engine), &eo, &engine);
            if (rc != TSR_OK)
                SVC_WARN("worker %d: cannot share worker %d's weights (%s); reading the model",
                         w->cfg.index, src->cfg.index, tsr_last_error());
        }
    }
    if (rc != TSR_OK)
        rc = tsr_engine_open(&eo, &engine);
    if (wg && w->cfg.weights_rank == 0) /* send (a failure costs the others a read) */
        svc_weights_rank_open(wg, 0, rc == TSR_OK ? engine : NULL, &eo, &w->abort, NULL);
    if (rc == TSR_OK) {
        tsr_batch_options bo;
        tsr_batch_options_init(&bo);
        bo.max_rows = 2 * w->cfg.max_batch;
        if (bo.max_images < 2 * w->cfg.max_batch)
            bo.max_images = 2 * w->cfg.max_batch;
        if (w->cfg.pair) /* a leader holds up to twice --max-batch images (pair.h) */
            bo.max_rows = 4 * w->cfg.max_batch < 64 ? 4 * w->cfg.max_batch : 64;
        rc = tsr_batch_create(engine, &bo, &w->batch);
    }
    if (rc != TSR_OK) {
        svc_msg *m = svc_msg_new(SVC_MSG_ENGINE_FAILED);
        if (m) {
            const char *detail = tsr_last_error();
            char text[1024];
            snprintf(text, sizeof text, "%s", detail[0] ? detail : tsr_strerror(rc));
            m->text = strdup(text);
            m->status = rc;
        }
        post(w, m);
        tsr_engine_close(engine);
        atomic_store(&w->opened, -1);
        post(w, svc_msg_new(SVC_MSG_WORKER_EXIT));
        return NULL;
    }
    w->preview_mode = TSR_PREVIEW_NONE;
    tsr_batch_set_callback(w->batch, on_step, w, TSR_PREVIEW_NONE);
    atomic_store(&w->engine, engine);
    atomic_store(&w->opened, 1);
    if (w->cfg.pair)
        svc_pair_register(w->cfg.pair, w->cfg.pair_me, w);
    post(w, svc_msg_new(SVC_MSG_ENGINE_READY));

    tsr_batch_stats last;
    tsr_batch_stats_get(w->batch, &last);
    for (;;) {
        apply_cancels(w);
        if (!fill(w))
            break; /* queue closed (drain) and nothing to run */
        apply_cancels(w);
        if (w->n_slots == 0) {
            if (w->leading) { /* everything cancelled: the pair parts */
                svc_pair_end(w->cfg.pair, w->batch);
                w->leading = false;
            }
            continue;
        }
        tsr_batch_stats_get(w->batch, &last); /* following moves the counts too */
        /* previews (image size) every --preview-every UNet calls only:
         * the engine computes them for the calls that ask */
        const int every = w->cfg.preview_every > 0 ? w->cfg.preview_every : 1;
        const int mode = w->cfg.tiles && (w->calls + 1) % (uint64_t)every == 0
                             ? TSR_PREVIEW_IMAGE
                             : TSR_PREVIEW_NONE;
        if (mode != w->preview_mode) {
            tsr_batch_set_callback(w->batch, on_step, w, mode);
            w->preview_mode = mode;
        }
        if (w->cfg.fault_after_calls >= 0 &&
            last.unet_calls >= (uint64_t)w->cfg.fault_after_calls) {
            char reason[160];
            snprintf(reason, sizeof reason,
                     "simulated sticky device error (TESSERA_FAULT_DEVICE, after %d UNet calls)",
                     w->cfg.fault_after_calls);
            fail_device(w, TSR_ERR_BACKEND, reason);
            break;
        }
        w->calls++;
        int finished = 0;
        const double t0 = svc_now_mono();
        if (w->leading)
            svc_pair_step(w->cfg.pair);
        rc = tsr_batch_step(w->batch, &finished);
        const double step_s = svc_now_mono() - t0;
        if (rc < 0)
            SVC_ERROR("worker %d (%s): UNet call failed: %s", w->cfg.index, w->cfg.name,
                      tsr_last_error());
        svc_worker_report_calls(w, &last, step_s, w->leading ? 2 : 1);
        if (rc < 0 && w->leading && !svc_pair_own_fault(w->cfg.pair, w->batch)) {
            char why[512];
            snprintf(why, sizeof why, "%s", tsr_last_error());
            pair_failed(w, why);
            continue;
        }
        after_step(w, rc);
        if (w->failed)
            break;
        /* an image the engine let go of without a final callback would pin
         * its slot forever: reconcile when the batch says nothing is left */
        if (tsr_batch_active(w->batch) == 0) {
            while (w->n_slots > 0)
                finish(w, w->n_slots - 1, TSR_IMAGE_FAILED, TSR_ERR_INTERNAL);
        }
        if (w->leading && w->n_slots == 0) { /* the pair's images are done: it parts */
            svc_pair_end(w->cfg.pair, w->batch);
            w->leading = false;
        }
    }
    post(w, svc_msg_new(SVC_MSG_WORKER_EXIT));
    return NULL;
}

void svc_worker_report_calls(svc_worker *w, const tsr_batch_stats *before, double seconds,
                             int ranks)
{
    svc_msg *busy = svc_msg_new(SVC_MSG_DEVICE_STEP);
    if (busy)
        busy->seconds = seconds;
    post(w, busy);
    tsr_batch_stats now;
    tsr_batch_stats_get(w->batch, &now);
    if (now.unet_calls <= before->unet_calls)
        return;
    /* one call per step; should a step ever make more, report them as
     * calls of the average size */
    const uint64_t calls = now.unet_calls - before->unet_calls;
    for (uint64_t k = 0; k < calls; k++) {
        svc_msg *m = svc_msg_new(SVC_MSG_UNET_CALL);
        if (m) {
            m->images = calls == 1 ? now.last_call_images
                                   : (int)((now.images_evaluated - before->images_evaluated) /
                                           calls);
            m->seconds = calls == 1 ? now.last_call_seconds
                                    : (now.unet_seconds - before->unet_seconds) / (double)calls;
            m->ranks = ranks;
        }
        post(w, m);
    }
}

void svc_worker_reset_callback(svc_worker *w)
{
    tsr_batch_set_callback(w->batch, on_step, w, w->preview_mode);
}

svc_worker *svc_worker_start(const svc_worker_config *cfg)
{
    svc_worker *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->cfg = *cfg;
    atomic_init(&w->engine, NULL);
    atomic_init(&w->opened, 0);
    atomic_init(&w->gone, false);
    atomic_init(&w->abort, false);
    pthread_mutex_init(&w->mu, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    w->started = true;
    return w;
}

tsr_engine *svc_worker_engine(svc_worker *w)
{
    return atomic_load(&w->engine);
}

void svc_worker_cancel(svc_worker *w, uint64_t job)
{
    if (atomic_load(&w->gone))
        return; /* a failed device holds no images and reads no more cancels */
    pthread_mutex_lock(&w->mu);
    if (w->n_cancels == w->cap_cancels) {
        int cap = w->cap_cancels ? 2 * w->cap_cancels : 16;
        uint64_t *nl = realloc(w->cancels, (size_t)cap * sizeof *nl);
        if (!nl) {
            pthread_mutex_unlock(&w->mu);
            SVC_ERROR("worker %d: out of memory queueing a cancel", w->cfg.index);
            return;
        }
        w->cancels = nl;
        w->cap_cancels = cap;
    }
    w->cancels[w->n_cancels++] = job;
    pthread_mutex_unlock(&w->mu);
}

void svc_worker_abort(svc_worker *w)
{
    atomic_store(&w->abort, true);
}

void svc_worker_join(svc_worker *w)
{
    if (w && w->started) {
        pthread_join(w->thread, NULL);
        w->started = false;
    }
}

void svc_worker_free(svc_worker *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n_slots; i++)
        svc_params_unref(w->slots[i].params);
    tsr_batch_free(w->batch);
    tsr_engine_close(atomic_load(&w->engine));
    free(w->cancels);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
