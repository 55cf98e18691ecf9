/*
 * service/server.c - tsr_service_run: start-up, the mailbox dispatch,
 * accepting jobs, drain and shutdown.
 *
 * Start-up: data directory (locked first: one server per directory, see
 * store.h), finished jobs loaded from their job.json and the
 * journal replayed and compacted (both in store/recovery.c), storage thread, HTTP listener, then one
 * worker per device, which open their engines while /readyz answers 503.
 * When every engine is open the jobs the journal left unfinished are
 * queued again and the "listening on" line is printed.
 *
 * Drain (SIGTERM / SIGINT): new work gets 503; the queue closes, so
 * workers finish what they run and end; after --drain-timeout they cancel
 * what is left (not journaled as final: it reruns at the next start).
 * Once every worker has ended and the storage thread has written what it
 * was given, the loop ends.  A second signal skips the wait.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <event2/event.h>
#include <event2/thread.h>

#include "auth.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "redis_url.h"
#include "server.h"
#include "a1111.h"
#include "sse.h"
#include "util.h"

#define MAX_WORKERS 16

void tsr_service_config_init(tsr_service_config *c)
{
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->device = "auto";
    c->max_batch = 16;
    c->max_queue = 256;
    c->data_dir = "./tessera-data";
    c->drain_timeout_s = 30;
    c->max_body = 32ll << 20;
    c->max_bodies = 256ll << 20;
    c->log_level = TSR_LOG_INFO;
    c->tile_size = 64;
    c->preview_every = 1;
    c->tile_threshold = 2.0;
    c->tile_threads = 1;
    c->keep_jobs = 10000;
    c->tile_cache_mb = 32;
    c->journal_compact_kb = 1024;
    c->result_ttl_s = 86400;
    c->claim_idle_ms = 30000;
    c->max_attempts = 3;
}

/* ------------------------------------------------------------ helpers */

static int engine_check(void *user, const tsr_image_params *p, const char **field)
{
    return tsr_image_params_check((const tsr_engine *)user, p, field);
}

void svc_server_params_ctx(svc_server *s, svc_params_ctx *ctx)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->default_size = s->default_size ? s->default_size : 512;
    ctx->max_size = TSR_MAX_SIZE;
    if (s->engine0) {
        ctx->check = engine_check;
        ctx->check_user = s->engine0;
    }
}

void svc_server_cancel_running(svc_server *s, uint64_t job)
{
    for (int i = 0; i < s->n_workers; i++)
        svc_worker_cancel(s->workers[i], job);
}

/* ------------------------------------------------------------ accepting */

typedef struct pending_accept {
    svc_job **jobs;
    int *stream_pos;   /* --queue: the accept event's position, once the
                        * follower read it before the accept ended; else -1 */
    int n, images;
    svc_msg *deferred, *deferred_tail; /* --queue: the follower's messages
                                        * for these jobs, read before the
                                        * accept ended (replayed, in order) */
    void (*done)(void *user, int status);
    void *user;
    struct pending_accept *next; /* s->accepting */
} pending_accept;

static void on_msg(void *user, svc_msg *m);

/* The pending accept of job `id` (NULL if none). */
static pending_accept *accepting_of(svc_server *s, uint64_t id)
{
    for (pending_accept *pa = s->accepting; pa; pa = pa->next)
        for (int i = 0; i < pa->n; i++)
            if (pa->jobs[i]->id == id)
                return pa;
    return NULL;
}

/* --queue: a follower message (started, step, tiles, ...) for a job whose
 * accept has not ended here yet is kept for accept_done, so that this node
 * applies the job's events in the stream's order like every other api node
 * (the message's owned fields move to the copy). */
static bool defer_for_accept(svc_server *s, svc_msg *m)
{
    switch (m->type) {
    case SVC_MSG_IMAGE_STARTED:
    case SVC_MSG_IMAGE_STEP:
    case SVC_MSG_IMAGE_STORED:
    case SVC_MSG_IMAGE_FAILED:
    case SVC_MSG_IMAGE_CANCELLED:
    case SVC_MSG_TILES:
    case SVC_MSG_CLUSTER_CANCEL: break;
    default: return false;
    }
    pending_accept *pa = accepting_of(s, m->job);
    svc_msg *copy = pa ? malloc(sizeof *copy) : NULL;
    if (!copy)
        return false;
    *copy = *m;
    copy->next = NULL;
    m->text = NULL;
    m->tiles = NULL;
    if (pa->deferred_tail)
        pa->deferred_tail->next = copy;
    else
        pa->deferred = copy;
    pa->deferred_tail = copy;
    return true;
}

/* Whether job `id` is being accepted here (the cluster's follower may
 * see it in the event stream before the accept completes); its `queued`
 * position is kept for accept_done. */
static bool accepting(svc_server *s, uint64_t id, int pos)
{
    for (pending_accept *pa = s->accepting; pa; pa = pa->next)
        for (int i = 0; i < pa->n; i++)
            if (pa->jobs[i]->id == id) {
                pa->stream_pos[i] = pos;
                return true;
            }
    return false;
}

void svc_server_accept(svc_server *s, svc_job **jobs, int n, void (*done)(void *user, int status),
                       void *user)
{
    pending_accept *pa = calloc(1, sizeof *pa);
    char **payloads = calloc((size_t)n, sizeof *payloads);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    svc_job **copy = calloc((size_t)n, sizeof *copy);
    int *stream_pos = malloc((size_t)n * sizeof *stream_pos);
    bool ok = pa && payloads && lens && copy && stream_pos;
    for (int i = 0; ok && i < n; i++) {
        payloads[i] = svc_job_accept_record(jobs[i]);
        ok = payloads[i] != NULL;
        if (ok)
            lens[i] = strlen(payloads[i]);
    }
    if (!ok) {
        if (payloads)
            for (int i = 0; i < n; i++)
                free(payloads[i]);
        free(payloads);
        free(lens);
        free(copy);
        free(stream_pos);
        free(pa);
        for (int i = 0; i < n; i++)
            svc_job_free(jobs[i]);
        done(user, -ENOMEM);
        return;
    }
    memcpy(copy, jobs, (size_t)n * sizeof *copy);
    pa->jobs = copy;
    pa->stream_pos = stream_pos;
    for (int i = 0; i < n; i++)
        stream_pos[i] = -1;
    pa->n = n;
    for (int i = 0; i < n; i++)
        pa->images += jobs[i]->n;
    pa->done = done;
    pa->user = user;
    s->pending_images += pa->images;
    if (s->cluster) {
        pa->next = s->accepting;
        s->accepting = pa;
        /* the queue is the journal: MULTI, XADD per image, EXEC */
        char **ids = calloc((size_t)n, sizeof *ids);
        int *images = calloc((size_t)n, sizeof *images);
        for (int i = 0; ids && images && i < n; i++) {
            ids[i] = strdup(jobs[i]->ids);
            images[i] = jobs[i]->n;
        }
        free(lens);
        if (!ids || !images) {
            free(ids);
            free(images);
            for (int i = 0; i < n; i++)
                free(payloads[i]);
            free(payloads);
            svc_msg *m = svc_msg_new(SVC_MSG_TASK_DONE);
            if (m) {
                m->cookie = pa;
                m->status = -ENOMEM;
            }
            svc_mailbox_post(s->mailbox, m);
            return;
        }
        svc_cluster_accept(s->cluster, ids, images, payloads, n, pa);
        return;
    }
    svc_store_journal(s->store, payloads, lens, n, pa);
}

static void accept_done(svc_server *s, pending_accept *pa, int status)
{
    s->pending_images -= pa->images;
    for (pending_accept **pp = &s->accepting; *pp; pp = &(*pp)->next)
        if (*pp == pa) {
            *pp = pa->next;
            break;
        }
    if (status < 0) {
        for (int i = 0; i < pa->n; i++) {
            if (pa->jobs[i]->batch)
                pa->jobs[i]->batch->n = 0; /* the batch never was */
            svc_job_free(pa->jobs[i]);
        }
    } else {
        for (int i = 0; i < pa->n; i++) {
            svc_jobs_insert(s->jobs, pa->jobs[i]);
            svc_job_enqueue(s, pa->jobs[i]);
            /* --queue: the follower read the accept first */
            if (pa->stream_pos[i] >= 0)
                svc_job_queued_event(s, pa->jobs[i], pa->stream_pos[i]);
        }
        svc_jobs_update_positions(s);
    }
    pa->done(pa->user, status < 0 ? status : 0);
    for (svc_msg *m = pa->deferred, *next; m; m = next) {
        next = m->next;
        if (status >= 0)
            on_msg(s, m);
        svc_msg_free(m);
    }
    free(pa->jobs);
    free(pa->stream_pos);
    free(pa);
}

/* ----------------------------------------------------------- ready/drain */

static void stop_loop(svc_server *s);

static void maybe_finish_drain(svc_server *s)
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

static void begin_drain(svc_server *s, const char *why)
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
    if (!loading || s->n_ready + s->n_failed >= s->n_workers) {
        struct timeval tv = {s->cfg.drain_timeout_s, 0};
        evtimer_add(s->ev_drain, &tv);
    }
    maybe_finish_drain(s);
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
    begin_drain(s, name);
}

static void describe_devices(svc_server *s)
{
    size_t off = 0;
    s->device_desc[0] = '\0';
    for (int i = 0; i < s->n_workers; i++) {
        tsr_engine *e = svc_worker_engine(s->workers[i]);
        off += (size_t)snprintf(s->device_desc + off, sizeof s->device_desc - off, "%s%s",
                                i ? ", " : "", e ? tsr_engine_device(e) : "?");
        if (off >= sizeof s->device_desc)
            break;
    }
}

static void become_ready(svc_server *s)
{
    s->engine0 = svc_worker_engine(s->workers[0]);
    snprintf(s->model_name, sizeof s->model_name, "%s", tsr_engine_model_name(s->engine0));
    snprintf(s->family, sizeof s->family, "%s", tsr_engine_family(s->engine0));
    s->default_size = tsr_engine_default_size(s->engine0);
    s->inpainting = tsr_engine_is_inpainting(s->engine0) != 0;
    struct stat st;
    s->model_created = stat(s->cfg.model, &st) == 0 ? (double)st.st_mtime : svc_now_unix();
    describe_devices(s);
    svc_server_replay_jobs(s);
    if (s->phase == SVC_PHASE_LOADING)
        s->phase = SVC_PHASE_READY;
    else {
        /* a signal came while loading: the drain clock starts now */
        struct timeval tv = {s->cfg.drain_timeout_s, 0};
        evtimer_add(s->ev_drain, &tv);
    }
    FILE *out = s->cfg.ready_out ? s->cfg.ready_out : stdout;
    const char *host = s->cfg.host;
    bool v6 = strchr(host, ':') != NULL;
    fprintf(out, "tessera serve: listening on http://%s%s%s:%d (model %s, device %s)\n",
            v6 ? "[" : "", host, v6 ? "]" : "", s->port, s->model_name, s->device_desc);
    fflush(out);
    /* after the line above, which is the first address a script sees */
    if (s->cluster && svc_cluster_start(s->cluster, s->model_name) < 0) {
        s->exit_code = TSR_ERR_INTERNAL;
        begin_drain(s, "start-up failed");
    }
}

/* ----------------------------------------------------------- dispatch */

/* A job accepted by any api node (the cluster's event stream): the job
 * table mirrors it, and its first event, `queued`, is emitted now, from the
 * stream, on every api node (docs/scale-out.md: same event ids everywhere).
 * Jobs this node accepted only get that event; jobs it already has (loaded
 * finished from --data-dir) nothing. */
static void cluster_accept(svc_server *s, uint64_t id, const char *rec, int pos)
{
    svc_job *known = svc_jobs_find(s->jobs, id);
    if (known) {
        svc_job_queued_event(s, known, pos);
        return;
    }
    if (!rec || accepting(s, id, pos))
        return;
    char err[128];
    cJSON *o = svc_json_parse(rec, strlen(rec), err, sizeof err);
    const cJSON *req = o ? cJSON_GetObjectItemCaseSensitive(o, "request") : NULL;
    const cJSON *created = o ? cJSON_GetObjectItemCaseSensitive(o, "created") : NULL;
    svc_params_ctx ctx;
    memset(&ctx, 0, sizeof ctx); /* checked by the node that accepted it */
    ctx.default_size = s->default_size ? s->default_size : 512;
    ctx.max_size = TSR_MAX_SIZE;
    svc_params *p = NULL;
    svc_param_error pe;
    if (!req || svc_params_parse(req, NULL, &ctx, &p, &pe) < 0) {
        SVC_WARN("cluster: an accepted job cannot be read (%s); not mirrored",
                 o ? pe.message : err);
        cJSON_Delete(o);
        return;
    }
    svc_job *j = svc_job_new(id, p, cJSON_IsNumber(created) ? created->valuedouble
                                                            : svc_now_unix());
    if (!j) {
        cJSON_Delete(o);
        svc_params_unref(p);
        return;
    }
    svc_jobs_insert(s->jobs, j);
    /* a batch's jobs are accepted in one MULTI, so they arrive together */
    const cJSON *batch = cJSON_GetObjectItemCaseSensitive(o, "batch");
    const cJSON *bi = cJSON_GetObjectItemCaseSensitive(o, "batch_index");
    uint64_t bid = 0;
    if (cJSON_IsString(batch) && svc_id_parse(batch->valuestring, 'b', &bid)) {
        svc_batch *b = svc_jobs_find_batch(s->jobs, bid);
        if (!b)
            b = svc_batch_new(s->jobs, bid, j->created);
        if (b)
            svc_batch_add(b, j, cJSON_IsNumber(bi) ? (int)bi->valuedouble : b->n);
    }
    cJSON_Delete(o);
    svc_job_enqueue(s, j);
    svc_job_queued_event(s, j, pos);
}

/* Worker roles: what the local workers and their store say goes to Redis;
 * the rest is the loop's as usual. */
static void on_work_msg(void *user, svc_msg *m)
{
    svc_server *s = user;
    switch (m->type) {
    case SVC_MSG_IMAGE_STARTED:
    case SVC_MSG_IMAGE_STEP:
    case SVC_MSG_IMAGE_STORED:
    case SVC_MSG_IMAGE_FAILED:
    case SVC_MSG_IMAGE_CANCELLED:
    case SVC_MSG_TILES:
        if (m->type == SVC_MSG_IMAGE_STORED)
            s->metrics.images++;
        if (m->type == SVC_MSG_TILES && m->tiles && s->cfg.role == TSR_ROLE_WORKER) {
            s->metrics.tile_encode_seconds += m->tiles->encode_seconds;
            s->metrics.tiles_published += (uint64_t)m->tiles->n;
            for (int i = 0; i < m->tiles->n; i++)
                s->metrics.tile_bytes += m->tiles->tiles[i].len;
        }
        svc_cluster_forward(s->cluster, m);
        break;
    default: on_msg(user, m); break;
    }
}

/* The last running image just ended and nothing is queued: hand the pages
 * that the work freed back to the system.  glibc keeps freed memory in each
 * thread's arena (the workers' activations, the encoders' buffers), so
 * without this an idle server holds its busiest moment's high-water mark:
 * service_soak measured idle RSS steps of 7-9 MiB with the 64 px demo model.
 * malloc_trim walks every arena; it runs once per busy period, on the loop,
 * and costs about a millisecond. */
static void release_idle_memory(svc_server *s)
{
#ifdef __GLIBC__
    if (s->running_images == 0 && s->queue->ops->length(s->queue) == 0)
        malloc_trim(0);
#else
    (void)s;
#endif
}

static void on_msg(void *user, svc_msg *m)
{
    svc_server *s = user;
    if (s->cluster && s->accepting && defer_for_accept(s, m))
        return;
    switch (m->type) {
    case SVC_MSG_ENGINE_READY:
        s->n_ready++;
        SVC_INFO("worker %d: engine ready (%s)", m->worker,
                 tsr_engine_device(svc_worker_engine(s->workers[m->worker])));
        if (s->n_ready == s->n_workers)
            become_ready(s);
        break;
    case SVC_MSG_ENGINE_FAILED:
        s->n_failed++;
        SVC_ERROR("worker %d: cannot open the model %s on %s: %s", m->worker, s->cfg.model,
                  s->cfg.device, m->text ? m->text : "unknown error");
        s->exit_code = TSR_ERR_IO;
        if (s->phase == SVC_PHASE_LOADING)
            begin_drain(s, "start-up failed");
        break;
    case SVC_MSG_IMAGE_STARTED: svc_jobs_on_started(s, m->job, m->index); break;
    case SVC_MSG_IMAGE_STEP: svc_jobs_on_step(s, m->job, m->index, m->step, m->steps); break;
    case SVC_MSG_IMAGE_STORED:
        svc_jobs_on_stored(s, m->job, m->index, m->etag, m->bytes, &m->text);
        break;
    case SVC_MSG_IMAGE_FAILED: svc_jobs_on_failed(s, m->job, m->index, m->status, m->text); break;
    case SVC_MSG_IMAGE_CANCELLED: svc_jobs_on_cancelled(s, m->job, m->index); break;
    case SVC_MSG_UNET_CALL:
        s->metrics.unet_calls++;
        svc_hist_observe(&s->metrics.unet_images, m->images);
        svc_hist_observe(&s->metrics.unet_seconds, m->seconds);
        break;
    case SVC_MSG_WORKER_EXIT:
        s->n_exited++;
        maybe_finish_drain(s);
        break;
    case SVC_MSG_TILES:
        svc_jobs_on_tiles(s, m->job, m->index, &m->tiles);
        break;
    case SVC_MSG_CLUSTER_ACCEPT: cluster_accept(s, m->job, m->text, m->images); break;
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
                stop_loop(s);
        } else
            accept_done(s, m->cookie, m->status);
        break;
    }
    svc_jobs_update_positions(s);
    if (m->type == SVC_MSG_IMAGE_STORED || m->type == SVC_MSG_IMAGE_CANCELLED ||
        m->type == SVC_MSG_IMAGE_FAILED) {
        svc_jobs_gc(s); /* never inside a route: the job may be in use there */
        release_idle_memory(s);
    }
}

static void on_gc_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    svc_jobs_gc(arg);
}

static void stop_loop(svc_server *s)
{
    s->phase = SVC_PHASE_STOPPING;
    svc_sse_close_all(s);
    svc_openai_close_all(s);
    event_base_loopexit(s->base, NULL);
}

/* ----------------------------------------------------------- start-up */

/* --queue: the cluster object, its queues, and the worker roles' store
 * directory and mailbox. */
static int start_cluster(svc_server *s)
{
    svc_cluster_config cc;
    memset(&cc, 0, sizeof cc);
    char err[160];
    if (svc_redis_url_parse(s->cfg.queue_url, &cc.url, err, sizeof err) < 0) {
        SVC_ERROR("--queue %s: %s", s->cfg.queue_url, err);
        return -1;
    }
    snprintf(s->work_dir, sizeof s->work_dir, "%s/worker", s->cfg.data_dir);
    if (s->cfg.role != TSR_ROLE_API) {
        int e = svc_store_prepare(s->work_dir);
        if (e < 0) {
            SVC_ERROR("%s: %s", s->work_dir, strerror(-e));
            return -1;
        }
        s->work_mailbox = svc_mailbox_new(s->base, on_work_msg, s);
        if (!s->work_mailbox)
            return -1;
    }
    cc.role = s->cfg.role;
    cc.result_ttl_s = s->cfg.result_ttl_s;
    cc.claim_idle_ms = s->cfg.claim_idle_ms;
    cc.max_attempts = s->cfg.max_attempts;
    cc.max_batch = s->cfg.max_batch;
    cc.data_dir = s->cfg.data_dir;
    cc.scratch_dir = s->work_dir;
    cc.mailbox = s->mailbox;
    s->cluster = svc_cluster_new(&cc);
    if (!s->cluster)
        return -1;
    s->queue = svc_cluster_mirror_queue(s->cluster);
    s->work_queue = s->cfg.role == TSR_ROLE_API ? s->queue : svc_cluster_work_queue(s->cluster);
    return 0;
}

/* "cpu,cpu" -> workers; threads split across CPU workers. */
static int start_workers(svc_server *s)
{
    char list[512];
    snprintf(list, sizeof list, "%s", s->cfg.device && *s->cfg.device ? s->cfg.device : "auto");
    char *names[MAX_WORKERS];
    int n = 0, n_cpu = 0;
    char *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (!*tok)
            continue;
        if (n == MAX_WORKERS) {
            SVC_ERROR("--device: at most %d devices", MAX_WORKERS);
            return -1;
        }
        names[n++] = tok;
        n_cpu += strcmp(tok, "cpu") == 0;
    }
    if (n == 0) {
        SVC_ERROR("--device: no device given");
        return -1;
    }
    int threads = s->cfg.threads;
    if (n_cpu > 1) {
        int total = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
        threads = total / n_cpu > 0 ? total / n_cpu : 1;
    }
    s->workers = calloc((size_t)n, sizeof *s->workers);
    if (!s->workers)
        return -1;
    for (int i = 0; i < n; i++) {
        svc_worker_config wc;
        memset(&wc, 0, sizeof wc);
        wc.index = i;
        wc.model = s->cfg.model;
        snprintf(wc.device, sizeof wc.device, "%s", names[i]);
        wc.threads = threads;
        wc.precision = s->cfg.precision;
        wc.max_batch = s->cfg.max_batch;
        wc.max_wait_ms = s->cfg.max_wait_ms;
        wc.static_batching = s->cfg.static_batching != 0;
        wc.queue = s->work_queue ? s->work_queue : s->queue;
        wc.mailbox = s->work_mailbox ? s->work_mailbox : s->mailbox;
        wc.store = s->work_store ? s->work_store : s->store;
        wc.tiles = s->tiles;
        wc.preview_every = s->cfg.preview_every;
        s->workers[i] = svc_worker_start(&wc);
        if (!s->workers[i]) {
            SVC_ERROR("cannot start worker %d", i);
            return -1;
        }
        s->n_workers++;
    }
    return 0;
}

static void on_engine_log(void *user, tsr_log_level level, const char *message)
{
    svc_log_engine(user, level, message);
}

int tsr_service_run(const tsr_service_config *cfg)
{
    svc_server *s = calloc(1, sizeof *s);
    if (!s)
        return TSR_ERR_NOMEM;
    s->cfg = *cfg;
    if (!s->cfg.host)
        s->cfg.host = "127.0.0.1";
    if (!s->cfg.data_dir)
        s->cfg.data_dir = "./tessera-data";
    if (s->cfg.max_batch < 1)
        s->cfg.max_batch = 1;
    if (s->cfg.max_batch > 32)
        s->cfg.max_batch = 32;
    if (s->cfg.max_body <= 0)
        s->cfg.max_body = 32ll << 20;
    if (s->cfg.max_bodies < s->cfg.max_body) /* one body of the largest size always fits */
        s->cfg.max_bodies = s->cfg.max_body;
    svc_log_set_level((tsr_log_level)s->cfg.log_level);
    tsr_log_set_level((tsr_log_level)s->cfg.log_level);
    svc_http_process_init();
    tsr_log_set_callback(on_engine_log, NULL);
    svc_metrics_init(&s->metrics);
    s->exit_code = 0;
    int rc = TSR_ERR_IO;
    int lock_fd = -1; /* <data-dir>/lock, held until the end (store.h) */
    snprintf(s->guard_secret, sizeof s->guard_secret, "%016llx%016llx",
             (unsigned long long)svc_random_u64(), (unsigned long long)svc_random_u64());
    signal(SIGPIPE, SIG_IGN);

    if (evthread_use_pthreads() != 0) {
        SVC_ERROR("libevent has no pthreads support");
        goto out;
    }
    s->base = event_base_new();
    if (!s->base || evthread_make_base_notifiable(s->base) != 0) {
        SVC_ERROR("cannot create the event loop");
        goto out;
    }
    if (s->cfg.token_file && svc_auth_load(s->cfg.token_file, &s->token, &s->token_len) < 0) {
        rc = TSR_ERR_INVALID;
        goto out;
    }
    int e = svc_store_prepare(s->cfg.data_dir);
    if (e < 0) {
        SVC_ERROR("--data-dir %s: %s", s->cfg.data_dir, strerror(-e));
        goto out;
    }
    long holder = 0;
    e = svc_store_lock(s->cfg.data_dir, &lock_fd, &holder);
    if (e == -EBUSY) {
        SVC_ERROR("data dir %s is in use by another tessera serve (pid %ld); give each server "
                  "its own --data-dir",
                  s->cfg.data_dir, holder);
        goto out;
    }
    if (e < 0) {
        SVC_ERROR("--data-dir %s: cannot lock %s/lock: %s", s->cfg.data_dir, s->cfg.data_dir,
                  strerror(-e));
        goto out;
    }
    s->jobs = svc_jobs_new();
    s->mailbox = svc_mailbox_new(s->base, on_msg, s);
    if (s->cfg.queue_url && start_cluster(s) < 0)
        goto out;
    if (!s->cluster)
        s->queue = svc_queue_local_new(s->cfg.max_batch);
    if (!s->jobs || !s->queue || !s->mailbox) {
        rc = TSR_ERR_NOMEM;
        goto out;
    }
    if (svc_server_load_state(s) < 0)
        goto out;
    if (s->cluster) {
        /* the shared queue is the journal: nothing is replayed locally */
        cJSON_Delete(s->replay);
        s->replay = NULL;
    }
    s->store = svc_store_start(s->cfg.data_dir, s->journal, s->mailbox);
    if (s->cluster && s->cfg.role != TSR_ROLE_API) {
        s->work_store = svc_store_start(s->work_dir, NULL, s->work_mailbox);
        if (!s->work_store)
            goto out;
    }
    if (s->store) {
        svc_tiles_config tc;
        memset(&tc, 0, sizeof tc);
        tc.threads = s->cfg.tile_threads;
        tc.tile_size = s->cfg.tile_size;
        tc.threshold = s->cfg.tile_threshold;
        /* worker roles: tiles go to the event stream (docs/scale-out.md), the
         * final .tiles file to the worker store with the PNG */
        tc.mailbox = s->work_mailbox ? s->work_mailbox : s->mailbox;
        tc.store = s->work_store ? s->work_store : s->store;
        s->tiles = svc_tiles_start(&tc);
        if (!s->tiles)
            goto out;
    }
    svc_jobs_gc(s);
    s->sse = svc_sse_new(s);
    s->ev_sigterm = evsignal_new(s->base, SIGTERM, on_signal, s);
    s->ev_sigint = evsignal_new(s->base, SIGINT, on_signal, s);
    s->ev_drain = evtimer_new(s->base, on_drain_timeout, s);
    if (!s->store || !s->sse || !s->ev_sigterm || !s->ev_sigint || !s->ev_drain) {
        rc = TSR_ERR_NOMEM;
        goto out;
    }
    if (s->cfg.keep_hours > 0) {
        s->ev_gc = event_new(s->base, -1, EV_PERSIST, on_gc_timer, s);
        struct timeval gtv = {60, 0};
        if (s->ev_gc)
            evtimer_add(s->ev_gc, &gtv);
    }
    evsignal_add(s->ev_sigterm, NULL);
    evsignal_add(s->ev_sigint, NULL);
    if (svc_http_start(s) < 0)
        goto out;
    SVC_INFO("tessera serve %s: loading %s on %s; data in %s", tsr_version(), s->cfg.model,
             s->cfg.device ? s->cfg.device : "auto", s->cfg.data_dir);
    if (start_workers(s) < 0) {
        s->exit_code = TSR_ERR_INTERNAL;
        begin_drain(s, "start-up failed");
    }
    event_base_dispatch(s->base);
    rc = s->exit_code;
    SVC_INFO("stopped");

out:
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
    tsr_log_set_callback(NULL, NULL);
    free(s->token);
    if (lock_fd >= 0)
        close(lock_fd); /* after the journal's last write */
    free(s);
    return rc;
}
