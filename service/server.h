/*
 * service/server.h - the server: what the event loop owns, and the few
 * calls the rest of service/ makes on it (accept, cancel, persist, the
 * parameter checks).  The calls between its own four files (server.c,
 * accept.c, dispatch.c, drain.c) are server_int.h's.
 *
 * Ownership (one owner per piece of state):
 * - svc_server and everything reached from it below is owned by the loop
 *   thread, except: `queue` (its own mutex; workers pop), `store` (its own
 *   thread and queue), the workers (their own threads; engines read-only
 *   from the loop after ENGINE_READY), and `mailbox` (its own mutex).
 * - Model facts (model_name, ...) are written once when engine 0 is ready
 *   and only read afterwards.
 */
#ifndef SVC_SERVER_H
#define SVC_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "cluster.h"
#include "devices.h"
#include "jobs.h"
#include "journal.h"
#include "mailbox.h"
#include "metrics.h"
#include "queue.h"
#include "service.h"
#include "signed.h"
#include "store.h"
#include "tiles.h"
#include "tessera.h"
#include "worker.h"
#include "pair.h"

struct event_base;
struct event;
struct evhttp;
struct evconnlistener;
struct svc_sse;

typedef enum svc_phase {
    SVC_PHASE_LOADING,  /* engines opening: 503 for work */
    SVC_PHASE_READY,
    SVC_PHASE_DRAINING, /* SIGTERM: 503 for new work, running images finish */
    SVC_PHASE_STOPPING, /* workers and storage done; the loop is ending */
} svc_phase;

typedef struct svc_server {
    tsr_service_config cfg;
    struct event_base *base;
    struct evhttp *http;
    struct evconnlistener *listener; /* evhttp's; paused on accept errors (http.c) */
    struct event *ev_accept_resume;
    unsigned long long accept_errors;
    double accept_error_logged;
    svc_phase phase;
    int port;

    svc_worker **workers;
    int n_workers, n_ready, n_exited, n_failed;
    struct svc_pair **pairs;   /* --parallel auto|cfg: devices 2k and 2k+1 (pair.h) */
    int n_pairs;
    svc_devices devices;       /* one per worker: names, up/failed, counters (devices.h) */
    tsr_engine *engine0;       /* worker 0's, for checks and facts */
    char model_name[256], family[32], device_desc[512];
    int default_size;
    bool inpainting;
    double model_created;

    svc_queue *queue;
    svc_journal *journal;
    /* --queue redis:// (docs/scale-out.md): the cluster's threads and
     * connections; `queue` is then its mirror queue and the workers pop
     * `work_queue`.  Worker roles give their workers a store of their own
     * (<data-dir>/worker, scratch) and a mailbox whose messages go to
     * Redis instead of the job table. */
    svc_cluster *cluster;
    svc_queue *work_queue;
    svc_store *work_store;
    svc_mailbox *work_mailbox;
    struct pending_accept *accepting; /* cluster accepts waiting for Redis (accept.c) */
    int flushes_waiting;       /* store barriers before the loop may end */
    char work_dir[4096];       /* <data-dir>/worker */
    svc_store *store;
    struct svc_tiles *tiles;   /* preview tile encoder pool (own threads) */
    struct event *ev_gc;       /* --keep-hours sweep */
    svc_mailbox *mailbox;
    svc_jobs *jobs;
    svc_metrics metrics;
    struct svc_sse *sse;
    struct svc_a1111 *a1111;   /* /sdapi/v1 state (a1111.c); NULL until used */

    svc_keys keys;             /* --keys / --token-file (http/auth.c); n == 0: open */
    svc_url_signer urls;       /* signed image URLs, on with keys (http/signed.h) */
    struct svc_comfy_login *comfy_login; /* the web UI's sessions (api/comfy/comfy_login.c) */
    char guard_secret[33];     /* marks requests the head guard rewrote (http/guard.c) */

    unsigned long long body_bytes; /* request bodies held, at most cfg.max_bodies (http/guard.c) */
    int pending_images;        /* accepted, waiting for the journal's fsync */
    int running_images;        /* taken by workers, not yet final */
    bool positions_dirty;

    struct event *ev_sigterm, *ev_sigint, *ev_drain;
    bool drain_aborted;        /* workers told to cancel what runs */
    bool store_flushed;
    int exit_code;

    /* replay at start: unfinished jobs from the journal, run once ready */
    cJSON *replay;             /* array of ACCEPT records */
} svc_server;

/* Engine 0's parameter context (checks, default size). */
void svc_server_params_ctx(svc_server *s, svc_params_ctx *ctx);
/* Tell every worker to cancel the running images of a job. */
void svc_server_cancel_running(svc_server *s, uint64_t job);
/* Journal a job's final state and write its job.json (async, in order). */
void svc_server_persist_final(svc_server *s, svc_job *j);
/* Start-up (store/recovery.c): load the finished jobs' job.json files, then
 * replay and compact the journal, keeping its unfinished accepts in
 * s->replay.  0, or -1 (logged) when the journal cannot be opened. */
int svc_server_load_state(svc_server *s);
/* Once the engines are open: queue s->replay's jobs again (parameters that
 * no longer parse are journaled as failed), then drop s->replay. */
void svc_server_replay_jobs(svc_server *s);
/* Accept jobs: journal them (fsync on the storage thread), then insert and
 * enqueue them and call done(user, status) on the loop. */
void svc_server_accept(svc_server *s, svc_job **jobs, int n, void (*done)(void *user, int status),
                       void *user);

#endif
