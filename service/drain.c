/*
 * service/drain.c - how the server ends (server_int.h).
 *
 * Drain (SIGTERM / SIGINT): new work gets 503; the queue closes, so
 * workers finish what they run and end; after --drain-timeout they cancel
 * what is left (not journaled as final: it reruns at the next start).
 * Once every worker has ended and the storage thread has written what it
 * was given, the loop ends.  A second signal skips the wait.  Shutdown
 * then frees in the reverse order of start-up; it is also the cleanup of
 * a start that failed half-way, so every step accepts what was never made.
 */
#include <signal.h>
#include <stdlib.h>

#include <event2/event.h>

#include "a1111.h"
#include "comfy.h"
#include "comfy_ui.h"
#include "http.h"
#include "log.h"
#include "server_int.h"
#include "sse.h"

void svc_server_maybe_finish_drain(svc_server *s)
{
    if (s->phase != SVC_PHASE_DRAINING || s->n_exited < s->n_workers || s->store_flushed)
        return;
    /* every worker has ended: the tile encoder hands its last images to the
     * store (milliseconds), then wait for the storage thread's queue */
    svc_tiles_flush(s->tiles);
    s->store_flushed = true;
    s->flushes_waiting = 1;
    svc_store_barrier(s->store, &s->store_flushed);
    if (s->work_store) {
        s->flushes_waiting++;
        svc_store_barrier(s->work_store, &s->store_flushed);
    }
}

void svc_server_start_drain_clock(svc_server *s)
{
    struct timeval tv = {s->cfg.drain_timeout_s, 0};
    evtimer_add(s->ev_drain, &tv);
}

void svc_server_begin_drain(svc_server *s, const char *why)
{
    if (s->phase >= SVC_PHASE_DRAINING)
        return;
    const bool loading = s->phase == SVC_PHASE_LOADING;
    s->phase = SVC_PHASE_DRAINING;
    if (loading)
        SVC_INFO("%s: stopping once the engines are open", why);
    else
        SVC_INFO("%s: draining (running images finish, up to %d s; queued ones rerun at the "
                 "next start)",
                 why, s->cfg.drain_timeout_s);
    s->queue->ops->close(s->queue);
    if (s->work_queue && s->work_queue != s->queue)
        s->work_queue->ops->close(s->work_queue);
    if (!loading || s->n_ready + s->n_failed >= s->n_workers)
        svc_server_start_drain_clock(s);
    svc_server_maybe_finish_drain(s);
}

static void abort_workers(svc_server *s)
{
    if (s->drain_aborted)
        return;
    s->drain_aborted = true;
    for (int i = 0; i < s->n_workers; i++)
        svc_worker_abort(s->workers[i]);
}

static void on_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    svc_server *s = arg;
    if (s->n_exited < s->n_workers)
        SVC_WARN("drain: %d s passed; cancelling the images still running (they rerun at the "
                 "next start)",
                 s->cfg.drain_timeout_s);
    abort_workers(s);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    svc_server *s = arg;
    const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (s->phase >= SVC_PHASE_DRAINING) {
        SVC_WARN("%s again: cancelling what runs now", name);
        abort_workers(s);
        return;
    }
    svc_server_begin_drain(s, name);
}

void svc_server_stop_loop(svc_server *s)
{
    s->phase = SVC_PHASE_STOPPING;
    svc_sse_close_all(s);
    svc_openai_close_all(s);
    svc_comfy_ws_close_all(s);
    event_base_loopexit(s->base, NULL);
}

int svc_server_watch_signals(svc_server *s)
{
    s->ev_sigterm = evsignal_new(s->base, SIGTERM, on_signal, s);
    s->ev_sigint = evsignal_new(s->base, SIGINT, on_signal, s);
    s->ev_drain = evtimer_new(s->base, on_drain_timeout, s);
    if (!s->ev_sigterm || !s->ev_sigint || !s->ev_drain)
        return -1;
    evsignal_add(s->ev_sigterm, NULL);
    evsignal_add(s->ev_sigint, NULL);
    return 0;
}

/* In the reverse order of start-up: nothing new reaches the workers, the
 * workers end (whatever still runs is cancelled: not journaled as final,
 * so it reruns at the next start), the tile encoder hands its finals to the
 * store, the storage threads write what they hold, and only then the
 * journal closes. */
void svc_server_shutdown(svc_server *s)
{
    if (s->queue)
        s->queue->ops->close(s->queue);
    for (int i = 0; i < s->n_workers; i++) {
        svc_worker_abort(s->workers[i]);
        svc_worker_join(s->workers[i]);
    }
    svc_tiles_stop(s->tiles); /* finals go on to the store first */
    svc_store_stop(s->work_store);
    svc_store_stop(s->store);
    svc_cluster_stop(s->cluster, s->cfg.drain_timeout_s > 5 ? 5 : s->cfg.drain_timeout_s);
    svc_http_stop(s);
    svc_a1111_free(s); /* after the HTTP server: its calls ended with their connections */
    svc_sse_free(s->sse);
    for (int i = 0; i < s->n_workers; i++)
        svc_worker_free(s->workers[i]);
    free(s->workers);
    for (int k = 0; k < s->n_pairs; k++)
        svc_pair_free(s->pairs[k]);
    free(s->pairs);
    svc_devices_free(&s->devices);
    if (s->journal)
        s->journal->ops->close(s->journal);
    if (s->queue)
        s->queue->ops->destroy(s->queue);
    svc_cluster_free(s->cluster);
    svc_jobs_free(s->jobs);
    cJSON_Delete(s->replay);
    svc_mailbox_free(s->work_mailbox);
    svc_mailbox_free(s->mailbox);
    if (s->ev_sigterm)
        event_free(s->ev_sigterm);
    if (s->ev_sigint)
        event_free(s->ev_sigint);
    if (s->ev_drain)
        event_free(s->ev_drain);
    if (s->ev_gc)
        event_free(s->ev_gc);
    if (s->base)
        event_base_free(s->base);
    svc_comfy_login_free(s->comfy_login);
    svc_keys_free(&s->keys);
    free(s);
}
