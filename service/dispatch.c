/*
 * service/dispatch.c - what the loop does with each mailbox message
 * (mailbox.h): the one place where other threads' news (engines, images,
 * storage, tiles, the cluster) reaches the job table, the metrics and the
 * drain.  Worker roles get a second mailbox whose image messages go on to
 * Redis instead (svc_server_on_work_msg).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <event2/event.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "log.h"
#include "server_int.h"

/* Worker roles: what the local workers and their store say goes to Redis;
 * the rest is the loop's as usual. */
void svc_server_on_work_msg(void *user, svc_msg *m)
{
    svc_server *s = user;
    if (!svc_msg_is_image_news(m->type)) {
        svc_server_on_msg(user, m);
        return;
    }
    if (m->type == SVC_MSG_IMAGE_STORED)
        s->metrics.images++;
    if (m->type == SVC_MSG_TILES && m->tiles && s->cfg.role == TSR_ROLE_WORKER) {
        s->metrics.tile_encode_seconds += m->tiles->encode_seconds;
        s->metrics.tiles_published += (uint64_t)m->tiles->n;
        for (int i = 0; i < m->tiles->n; i++)
            s->metrics.tile_bytes += m->tiles->tiles[i].len;
    }
    svc_cluster_forward(s->cluster, m);
}

/* The last running image just ended and nothing is queued: hand the pages
 * that the work freed back to the system.  glibc keeps freed memory in each
 * thread's arena (the workers' activations, the encoders' buffers), so
 * without this an idle server holds its busiest moment's high-water mark:
 * service_soak measured idle RSS steps of 7-9 MiB with the 64 px demo model.
 * malloc_trim walks every arena and costs about a millisecond; it runs once
 * when the busy period ends, on the loop, and once more a quarter second
 * later if the server is still idle, for what the workers free after their
 * last message (their batch's scratch: on a loaded machine that can come
 * after the loop's first trim, and the idle RSS then kept 8-16 MiB). */
/* Not under ASan or TSan (gcc's macros): they replace malloc, glibc's heap
 * is never set up, and the engine's own trims (pipeline/step.c) skip it too. */
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define SVC_HEAP_TRIM 1
#else
#define SVC_HEAP_TRIM 0
#endif

#if SVC_HEAP_TRIM
static bool idle(const svc_server *s)
{
    return s->running_images == 0 && s->queue->ops->length(s->queue) == 0;
}

static void trim_if_still_idle(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    if (idle(arg))
        malloc_trim(0);
}
#endif

static void release_idle_memory(svc_server *s)
{
#if SVC_HEAP_TRIM
    if (!idle(s))
        return;
    malloc_trim(0);
    const struct timeval later = {0, 250000};
    event_base_once(s->base, -1, EV_TIMEOUT, trim_if_still_idle, s, &later);
#else
    (void)s;
#endif
}

void svc_server_on_msg(void *user, svc_msg *m)
{
    svc_server *s = user;
    if (s->cluster && s->accepting && svc_server_defer_for_accept(s, m))
        return;
    switch (m->type) {
    case SVC_MSG_ENGINE_READY:
        s->n_ready++;
        SVC_INFO("worker %d: engine ready (%s)", m->worker,
                 tsr_engine_device(svc_worker_engine(s->workers[m->worker])));
        if (s->n_ready == s->n_workers)
            svc_server_become_ready(s);
        break;
    case SVC_MSG_ENGINE_FAILED:
        s->n_failed++;
        SVC_ERROR("worker %d: cannot open the model %s on %s: %s", m->worker, s->cfg.model,
                  s->cfg.device, m->text ? m->text : "unknown error");
        s->exit_code = TSR_ERR_IO;
        if (s->phase == SVC_PHASE_LOADING)
            svc_server_begin_drain(s, "start-up failed");
        break;
    case SVC_MSG_IMAGE_STARTED: svc_jobs_on_started(s, m->job, m->index); break;
    case SVC_MSG_IMAGE_STEP: svc_jobs_on_step(s, m->job, m->index, m->step, m->steps); break;
    case SVC_MSG_IMAGE_STORED:
        svc_jobs_on_stored(s, m->job, m->index, m->etag, m->bytes, &m->text);
        break;
    case SVC_MSG_IMAGE_FAILED: svc_jobs_on_failed(s, m->job, m->index, m->status, m->text); break;
    case SVC_MSG_IMAGE_CANCELLED: svc_jobs_on_cancelled(s, m->job, m->index); break;
    case SVC_MSG_UNET_CALL:
        if (m->worker >= 0 && m->worker < s->devices.n) {
            s->devices.v[m->worker].calls++;
            s->devices.v[m->worker].images += (uint64_t)(m->images > 0 ? m->images : 0);
            s->devices.v[m->worker].cfg_calls += m->ranks > 1;
        }
        s->metrics.unet_calls++;
        svc_hist_observe(&s->metrics.unet_images, m->images);
        svc_hist_observe(&s->metrics.unet_seconds, m->seconds);
        break;
    case SVC_MSG_WORKER_EXIT:
        s->n_exited++;
        svc_server_maybe_finish_drain(s);
        break;
    case SVC_MSG_DEVICE_STEP:
        if (m->worker >= 0 && m->worker < s->devices.n)
            s->devices.v[m->worker].busy_seconds += m->seconds;
        break;
    case SVC_MSG_DEVICE_FAILED:
        if (m->worker >= 0 && m->worker < s->devices.n) {
            svc_device *d = &s->devices.v[m->worker];
            d->up = false;
            d->failures++;
            d->requeued += (uint64_t)(m->images > 0 ? m->images : 0);
            snprintf(d->reason, sizeof d->reason, "%s", m->text ? m->text : "failed");
            if (svc_devices_up(&s->devices) == 0)
                SVC_ERROR("every device has failed: /readyz answers 503 and new work is "
                          "refused; queued jobs stay journaled and rerun at the next start");
        }
        break;
    case SVC_MSG_IMAGE_REQUEUED: svc_jobs_on_requeued(s, m->job, m->index); break;
    case SVC_MSG_TILES:
        svc_jobs_on_tiles(s, m->job, m->index, &m->tiles);
        break;
    case SVC_MSG_CLUSTER_ACCEPT: svc_server_cluster_accept(s, m->job, m->text, m->images); break;
    case SVC_MSG_CLUSTER_CANCEL: {
        /* from the follower (api roles) and the publisher (worker roles) */
        svc_job *j = svc_jobs_find(s->jobs, m->job);
        if (j)
            svc_job_cancel(s, j); /* false when already final */
        if (s->work_store)
            svc_server_cancel_running(s, m->job);
        break;
    }
    case SVC_MSG_TASK_DONE:
        if (m->cookie == &s->store_flushed) {
            if (--s->flushes_waiting <= 0)
                svc_server_stop_loop(s);
        } else
            svc_server_accept_done(s, m->cookie, m->status);
        break;
    }
    svc_jobs_update_positions(s);
    if (m->type == SVC_MSG_IMAGE_STORED || m->type == SVC_MSG_IMAGE_CANCELLED ||
        m->type == SVC_MSG_IMAGE_FAILED) {
        svc_jobs_gc(s); /* never inside a route: the job may be in use there */
        release_idle_memory(s);
    }
}
