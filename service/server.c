/*
 * service/server.c - tsr_service_run: start-up and the loop.  Taking
 * jobs in is accept.c's, the mailbox dispatch dispatch.c's, drain and
 * shutdown drain.c's (server_int.h says why it is cut this way).
 *
 * Start-up: data directory (locked first: one server per directory, see
 * store.h), finished jobs loaded from their job.json and the
 * journal replayed and compacted (both in store/recovery.c), storage thread, HTTP listener, then one
 * worker per device, which open their engines while /readyz answers 503.
 * When every engine is open the jobs the journal left unfinished are
 * queued again and the "listening on" line is printed.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "auth.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "redis_url.h"
#include "redis_conn.h"
#include "server_int.h"
#include "a1111.h"
#include "sse.h"
#include "util.h"
#include "weights.h"

#define MAX_WORKERS 16

/* The one place the serve defaults are written: `tessera serve --help`
 * prints them from here (cli/cmd_serve.c), tsr_service_run falls back to
 * them, and docs/api.md's table says it copies them from here. */
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
    c->url_ttl_s = 86400;
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

void svc_server_become_ready(svc_server *s)
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
        svc_server_start_drain_clock(s);
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
        svc_server_begin_drain(s, "start-up failed");
    }
}

static void on_gc_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    svc_jobs_gc(arg);
}

/* ----------------------------------------------------------- start-up */

/* --queue: the cluster object, its queues, and the worker roles' store
 * directory and mailbox. */
static int start_cluster(svc_server *s)
{
    svc_cluster_config cc;
    memset(&cc, 0, sizeof cc);
    char err[400];
    if (svc_redis_target(s->cfg.queue_url, s->cfg.queue_password_file, s->cfg.queue_ca,
                         &cc.url, err, sizeof err) < 0) {
        svc_redis_url_wipe(&cc.url);
        SVC_ERROR("%s", err);
        return -1;
    }
    snprintf(s->work_dir, sizeof s->work_dir, "%s/worker", s->cfg.data_dir);
    if (s->cfg.role != TSR_ROLE_API) {
        int e = svc_store_prepare(s->work_dir);
        if (e < 0) {
            SVC_ERROR("%s: %s", s->work_dir, strerror(-e));
            return -1;
        }
        s->work_mailbox = svc_mailbox_new(s->base, svc_server_on_work_msg, s);
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
    svc_redis_url_wipe(&cc.url); /* the cluster holds its own copy */
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
    if (!s->workers || svc_devices_init(&s->devices, names, n) != 0)
        return -1;
    /* CFG-parallel (pair.h): devices 2k and 2k+1 may pair up */
    int parallel = svc_parallel_parse(s->cfg.parallel);
    if (parallel < 0) {
        SVC_ERROR("--parallel must be auto, data or cfg, not '%s'", s->cfg.parallel);
        return -1;
    }
    if (parallel != SVC_PARALLEL_DATA && s->work_queue && s->work_queue != s->queue) {
        if (parallel == SVC_PARALLEL_CFG) {
            SVC_ERROR("--parallel cfg needs the in-process queue (not --queue redis://)");
            return -1;
        }
        parallel = SVC_PARALLEL_DATA; /* auto with Redis: data parallel */
    }
    if (parallel != SVC_PARALLEL_DATA && n >= 2) {
        s->pairs = calloc((size_t)(n / 2), sizeof *s->pairs);
        if (!s->pairs)
            return -1;
        for (int k = 0; k < n / 2; k++)
            if (!(s->pairs[s->n_pairs++] = svc_pair_new((svc_parallel)parallel)))
                return -1;
        SVC_INFO("--parallel %s: devices pair up as %s", svc_parallel_name((svc_parallel)parallel),
                 n == 2 ? "(0, 1)" : "(0, 1), (2, 3), ...");
    }
    /* the fault switch (docs/multi-gpu.md): the environment only */
    const char *fault = getenv("TESSERA_FAULT_DEVICE");
    svc_weights_plan wplan;
    svc_weights_plan_make(names, n, getenv("TESSERA_SHARE_WEIGHTS"), &wplan);
    for (int i = 0; i < n; i++) {
        char err[256];
        if (svc_devices_fault_after(fault, s->devices.v[i].name, err, sizeof err) < -1) {
            SVC_ERROR("%s", err);
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        svc_worker_config wc;
        memset(&wc, 0, sizeof wc);
        wc.index = i;
        wc.model = s->cfg.model;
        snprintf(wc.device, sizeof wc.device, "%s", names[i]);
        wc.threads = threads;
        wc.precision = s->cfg.precision;
        wc.lora_dir = s->cfg.lora_dir;
        wc.embeddings_dir = s->cfg.embeddings_dir;
        wc.lora_cache_mb = s->cfg.lora_cache_mb;
        wc.max_batch = s->cfg.max_batch;
        wc.max_wait_ms = s->cfg.max_wait_ms;
        wc.static_batching = s->cfg.static_batching != 0;
        wc.queue = s->work_queue ? s->work_queue : s->queue;
        wc.mailbox = s->work_mailbox ? s->work_mailbox : s->mailbox;
        wc.store = s->work_store ? s->work_store : s->store;
        wc.tiles = s->tiles;
        wc.preview_every = s->cfg.preview_every;
        snprintf(wc.name, sizeof wc.name, "%s", s->devices.v[i].name);
        /* the weights read once per kind of device: borrowed or broadcast
         * (weights.h, docs/multi-gpu.md part 2) */
        if (wplan.source[i] >= 0)
            wc.share_from = s->workers[wplan.source[i]];
        wc.weights = wplan.group[i];
        wc.weights_rank = wplan.rank[i];
        char err[256];
        if (i / 2 < s->n_pairs) {
            wc.pair = s->pairs[i / 2];
            wc.pair_me = i % 2;
        }
        wc.fault_after_calls = svc_devices_fault_after(fault, wc.name, err, sizeof err);
        if (wc.fault_after_calls >= 0)
            SVC_WARN("TESSERA_FAULT_DEVICE: device %s will fail after %d UNet calls", wc.name,
                     wc.fault_after_calls);
        s->workers[i] = svc_worker_start(&wc);
        if (!s->workers[i]) {
            SVC_ERROR("cannot start worker %d", i);
            for (int k = i; k < n; k++) /* their broadcast peers must not wait */
                if (wplan.group[k])
                    svc_weights_leave(wplan.group[k], wplan.rank[k]);
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
    tsr_service_config dflt; /* the defaults, written once: tsr_service_config_init */
    tsr_service_config_init(&dflt);
    if (!s->cfg.host)
        s->cfg.host = dflt.host;
    if (!s->cfg.data_dir)
        s->cfg.data_dir = dflt.data_dir;
    if (s->cfg.max_batch < 1)
        s->cfg.max_batch = 1;
    if (s->cfg.max_batch > 32)
        s->cfg.max_batch = 32;
    if (s->cfg.max_body <= 0)
        s->cfg.max_body = dflt.max_body;
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
    char why[512];
    if (svc_keys_load(s->cfg.keys_file, s->cfg.token_file, true, &s->keys, why, sizeof why) <
        0) {
        SVC_ERROR("%s", why);
        rc = TSR_ERR_INVALID;
        goto out;
    }
    int e = svc_store_prepare(s->cfg.data_dir);
    if (e < 0) {
        SVC_ERROR("--data-dir %s: %s", s->cfg.data_dir, strerror(-e));
        goto out;
    }
    if (s->keys.n > 0 && svc_url_signer_start(&s->urls, s->cfg.url_secret_file, s->cfg.data_dir,
                                              s->cfg.url_ttl_s, why, sizeof why) < 0) {
        SVC_ERROR("%s", why);
        rc = TSR_ERR_INVALID;
        goto out;
    }
    if (s->urls.on && s->cfg.queue_url && !s->cfg.url_secret_file)
        SVC_WARN("--queue with keys: give every api node the same --url-secret-file, or an image "
                 "URL one node signed gets 403 from another (docs/scale-out.md)");
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
    s->mailbox = svc_mailbox_new(s->base, svc_server_on_msg, s);
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
    svc_a1111_state(s); /* A1111's options from the data dir (a1111_options.c) */
    s->sse = svc_sse_new(s);
    if (!s->store || !s->sse || svc_server_watch_signals(s) < 0) {
        rc = TSR_ERR_NOMEM;
        goto out;
    }
    if (s->cfg.keep_hours > 0) {
        s->ev_gc = event_new(s->base, -1, EV_PERSIST, on_gc_timer, s);
        struct timeval gtv = {60, 0};
        if (s->ev_gc)
            evtimer_add(s->ev_gc, &gtv);
    }
    if (svc_http_start(s) < 0)
        goto out;
    SVC_INFO("tessera serve %s: loading %s on %s; data in %s", tsr_version(), s->cfg.model,
             s->cfg.device ? s->cfg.device : "auto", s->cfg.data_dir);
    if (start_workers(s) < 0) {
        s->exit_code = TSR_ERR_INTERNAL;
        svc_server_begin_drain(s, "start-up failed");
    }
    event_base_dispatch(s->base);
    rc = s->exit_code;
    SVC_INFO("stopped");

out:
    svc_server_shutdown(s);
    tsr_log_set_callback(NULL, NULL);
    if (lock_fd >= 0)
        close(lock_fd); /* after the journal's last write */
    return rc;
}
