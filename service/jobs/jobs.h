/*
 * service/jobs/jobs.h - jobs, their images and event histories, and batches.
 *
 * Owner: the event loop, alone.  Workers and the storage thread report
 * through the mailbox (mailbox.h) and dispatch.c hands each message to the
 * svc_jobs_on_* function here, which changes states, appends events and
 * wakes the SSE clients of that job.
 *
 * Events are kept, compactly, for the life of the job in memory: an event
 * is {kind, a few ints}; its JSON is made when a client reads it.  Event
 * ids are 1, 2, ... per job (per batch for batch streams) and equal the
 * history index + 1, so Last-Event-ID resumes are a lookup.
 *
 * Finished jobs, and whole batches once all their jobs are final, are
 * dropped by svc_jobs_gc (--keep-jobs, default 10000 / --keep-hours); with
 * both 0 they are kept for the life of the process.  Finished jobs come
 * back from the data directory at start.  A finished job's preview tiles
 * are the bulk of its memory, so they are budgeted apart from the job
 * (--tile-cache-mb): the table keeps finished images with tiles in RAM in
 * least recently used order and drops the oldest past the budget (tiles.h
 * says what is kept and how they come back from disk).
 */
#ifndef SVC_JOBS_H
#define SVC_JOBS_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "params.h"

struct svc_server;
struct svc_sse_client;
struct svc_tileset;
struct svc_tilemap;
struct evbuffer;

typedef enum svc_state {
    SVC_QUEUED = 0,
    SVC_RUNNING,
    SVC_DONE,
    SVC_FAILED,
    SVC_CANCELLED,
} svc_state;

const char *svc_state_name(svc_state s);
static inline bool svc_state_final(svc_state s)
{
    return s >= SVC_DONE;
}

/* A job's or batch's link in the table's hash by id: one hash for both
 * (table.c), the entry found again from its link by offsetof. */
typedef struct svc_idlink {
    uint64_t id;
    struct svc_idlink *next;
} svc_idlink;

typedef enum svc_event_kind {
    SVC_EV_QUEUED,    /* a = position */
    SVC_EV_STARTED,
    SVC_EV_STEP,      /* a = image, b = step, c = steps, eta */
    SVC_EV_IMAGE,     /* a = index */
    SVC_EV_DONE,
    SVC_EV_FAILED,
    SVC_EV_CANCELLED,
    SVC_EV_TILES,     /* a = image, b = publish index in its tilemap, c = step */
    /* batch streams */
    SVC_EV_B_IMAGE,   /* job = job index in the batch, a = image index */
    SVC_EV_B_JOB,     /* job = job index in the batch */
    SVC_EV_B_DONE,
} svc_event_kind;

typedef struct svc_event {
    uint8_t kind;
    int32_t job, a, b, c;
    float eta;
} svc_event;

typedef struct svc_history {
    svc_event *ev;
    uint32_t n, cap;
} svc_history;

typedef struct svc_image {
    svc_state state;
    int step, steps;
    uint64_t seed;
    char etag[33];    /* "" until stored */
    size_t bytes;
    char *infotext;   /* owned */
    double started_mono;
    struct svc_tilemap *tiles; /* owned: preview/final tiles; loaded lazily after a restart
                                * or after being dropped (svc_image_tiles) */
    bool tiles_unreadable;     /* the .tiles file is missing or malformed: not tried again */
    /* finished jobs' images holding tile bytes, least recently used first */
    bool in_tile_lru;
    size_t tile_lru_bytes;
    struct svc_image *tile_prev, *tile_next;
} svc_image;

typedef struct svc_batch svc_batch;
struct svc_job;

/* An in-process observer of one job's events, for routes that answer when
 * the job ends or relay its progress in another shape (the A1111 and
 * OpenAI compatibility routes).  The caller owns the struct; on_event runs
 * on the loop right after each event is appended (after the SSE clients
 * are written), and may call svc_job_unwatch on itself.  A watched job is
 * never garbage-collected. */
typedef struct svc_watch {
    void (*on_event)(struct svc_server *s, struct svc_job *j, const svc_event *ev, void *arg);
    void *arg;
    struct svc_watch *prev, *next; /* the job's watchers (jobs.c) */
} svc_watch;

typedef struct svc_job {
    uint64_t id;
    char ids[20];             /* "j_..." */
    svc_state state;
    svc_params *params;       /* one reference; NULL for jobs loaded finished */
    cJSON *view;              /* resolved parameters (owned) */
    int n, steps;
    svc_image *images;        /* n */
    double created, started, finished; /* unix seconds; 0 = not yet */
    double created_mono;
    char *error_code, *error_message;  /* owned; NULL unless failed */
    svc_batch *batch;         /* borrowed (batches live as long as jobs) */
    uint64_t batch_id;        /* at start-up, before batches are rebuilt */
    int batch_index;
    char owner[64];           /* the name of the key that made it; "" = none (docs/security.md) */
    svc_history hist;
    struct svc_sse_client *clients; /* subscribed streams (sse.c) */
    svc_watch *watches;       /* in-process observers (svc_job_watch) */
    /* queue bookkeeping */
    int queued_images;        /* entries still in the queue */
    int position;             /* last position reported */
    bool in_queue_order;
    struct svc_job *qprev, *qnext;
    bool first_step_seen;
    bool persisted;           /* final state journaled */
    bool doomed;              /* gc: marked for removal */
    svc_idlink hlink;         /* the table's hash by id (table.c) */
    struct svc_job *next;     /* every job, oldest first */
} svc_job;

struct svc_batch {
    uint64_t id;
    char ids[20];
    double created;
    svc_job **jobs;           /* borrowed; in batch order */
    int n, cap;
    int final_jobs;
    bool doomed;              /* gc: marked for removal with its jobs */
    svc_history hist;
    struct svc_sse_client *clients;
    svc_idlink hlink;         /* the table's hash by id (table.c) */
    struct svc_batch *next;
};

typedef struct svc_jobs svc_jobs;

svc_jobs *svc_jobs_new(void);
void svc_jobs_free(svc_jobs *t);
svc_job *svc_jobs_find(svc_jobs *t, uint64_t id);
svc_batch *svc_jobs_find_batch(svc_jobs *t, uint64_t id);
/* Ids not yet in use. */
uint64_t svc_jobs_new_id(svc_jobs *t);
uint64_t svc_jobs_new_batch_id(svc_jobs *t);
/* At start-up: group jobs that name a batch (batch_id) into batches and
 * give each batch the history its jobs' states imply. */
void svc_jobs_rebuild_batches(svc_jobs *t);

/* A new queued job (not in the table yet); takes over params' reference. */
svc_job *svc_job_new(uint64_t id, svc_params *params, double created);
void svc_job_free(svc_job *j);
/* The owner of a batch: its first job's ("" when empty). */
const char *svc_batch_owner(const svc_batch *b);
/* Give the job to the key named owner (NULL or "": no owner). */
void svc_job_set_owner(svc_job *j, const char *owner);
void svc_jobs_insert(svc_jobs *t, svc_job *j);
svc_batch *svc_batch_new(svc_jobs *t, uint64_t id, double created);
void svc_batch_add(svc_batch *b, svc_job *j, int index);

/* Start / stop observing j (see svc_watch). */
void svc_job_watch(svc_job *j, svc_watch *w);
void svc_job_unwatch(svc_job *j, svc_watch *w);

/* ---- life of a job (jobs.c; the server calls these on the loop) ---- */

/* Push its images to the queue and report its position. */
void svc_job_enqueue(struct svc_server *s, svc_job *j);
/* Recompute queue positions; emit `queued` where they changed. */
void svc_jobs_update_positions(struct svc_server *s);
/* --queue: the job's one `queued` event (position from the shared event
 * stream's accept entry), if it has no event yet. */
void svc_job_queued_event(struct svc_server *s, svc_job *j, int position);
void svc_jobs_on_started(struct svc_server *s, uint64_t job, int index);
void svc_jobs_on_step(struct svc_server *s, uint64_t job, int index, int step, int steps);
void svc_jobs_on_stored(struct svc_server *s, uint64_t job, int index, const char *etag,
                        size_t bytes, char **infotext);
/* Tiles published by the encoder (*ts taken over). */
void svc_jobs_on_tiles(struct svc_server *s, uint64_t job, int index, struct svc_tileset **ts);
/* Drop finished jobs past --keep-jobs / --keep-hours (memory and disk),
 * and finished jobs' tile bytes past --tile-cache-mb (memory). */
void svc_jobs_gc(struct svc_server *s);
/* An image's tile map, loading <i>.tiles for a done image whose map is
 * not in RAM (NULL if none).  The map's tile bytes stay valid until the
 * next call or the next svc_jobs_gc (--tile-cache-mb may drop them). */
struct svc_tilemap *svc_image_tiles(struct svc_server *s, svc_job *j, int index);
/* A failed device handed a running image back to the queue: it is queued
 * again (its job stays running) and reruns from its start. */
void svc_jobs_on_requeued(struct svc_server *s, uint64_t job, int index);
void svc_jobs_on_failed(struct svc_server *s, uint64_t job, int index, int status,
                        const char *message);
void svc_jobs_on_cancelled(struct svc_server *s, uint64_t job, int index);
/* User cancel: false when already final. */
bool svc_job_cancel(struct svc_server *s, svc_job *j);
/* A job that cannot run (replayed with parameters no longer valid). */
void svc_job_fail(struct svc_server *s, svc_job *j, const char *code, const char *message);

/* ---- persistence ---- */

/* The journal's ACCEPT record for a job (malloc'd JSON text). */
char *svc_job_accept_record(const svc_job *j);
/* A job rebuilt from its job.json (final jobs), NULL if unreadable. */
svc_job *svc_job_from_file(const char *json, size_t len);

/* ---- views (jobs_json.c) ---- */

cJSON *svc_job_json(struct svc_server *s, const svc_job *j);
/* The job.json sidecar: the job object plus what a restart needs. */
cJSON *svc_job_file_json(struct svc_server *s, const svc_job *j);
cJSON *svc_batch_json(struct svc_server *s, const svc_batch *b);
/* The URLs the server hands out, signed with keys on (http/signed.h:
 * "?md5=SIG&expires=EPOCH" appended, the expiry the job's; buf: 256 bytes
 * is enough):
 * "/v1/jobs/<id>/images/<i>.png" */
void svc_image_url(const struct svc_server *s, const svc_job *j, int index, char *buf,
                   size_t size);
/* "/v1/jobs/<id>/images/<i>/tiles/<version>/<row>_<col>.jpg" */
void svc_tile_url(const struct svc_server *s, const svc_job *j, int index, int version, int row,
                  int col, char *buf, size_t size);
/* "/v1/jobs/<id>/images/<i>/tiles" (the tile manifest) */
void svc_manifest_url(const struct svc_server *s, const svc_job *j, int index, char *buf,
                      size_t size);
/* Append event `ev` (id = index + 1) of a job / batch stream as SSE text. */
void svc_job_event_sse(const struct svc_server *s, const svc_job *j, uint32_t index,
                       struct evbuffer *out);
void svc_batch_event_sse(const struct svc_server *s, const svc_batch *b, uint32_t index,
                         struct evbuffer *out);
/* Whether the stream's last event is final (the stream then ends). */
bool svc_job_stream_over(const svc_job *j);
bool svc_batch_stream_over(const svc_batch *b);

/* Append an event to a history; false on out of memory. */
bool svc_history_add(svc_history *h, svc_event ev);

#endif
