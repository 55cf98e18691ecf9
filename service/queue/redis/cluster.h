/*
 * service/queue/redis/cluster.h - several `tessera serve` nodes on one Redis Streams
 * queue (--queue redis://...; docs/scale-out.md is the design).
 *
 * The cluster object owns every Redis connection of a node, each used by
 * one thread only (hiredis contexts are not thread-safe; no Redis call is
 * ever made on the event loop):
 * - the command thread (every role): accepts (MULTI: XADD q per image,
 *   XADD events accept; EXEC) and, every 250 ms, the shared figures
 *   (XLEN q, XPENDING summary, XLEN dead) for the 429 and /metrics;
 * - the follower thread (api, both): XREAD BLOCK on the event stream; turns
 *   entries into the mailbox messages local workers send (the loop's job
 *   table becomes a mirror of the cluster's jobs); copies PNGs into
 *   --data-dir before it posts IMAGE_STORED;
 * - the pop connection (worker, both): XAUTOCLAIM / XREADGROUP for the
 *   worker threads (one at a time, under pop_mu);
 * - the publisher thread (worker, both): progress events, stored results
 *   (MULTI: SET png EX ttl, XADD events image; EXEC), then XACK + XDEL;
 *   re-claims its in-flight entries as a heartbeat.
 * Commands that fail because Redis is away are retried with backoff
 * (100 ms doubling to 5 s), except accepts, which fail at once (503).
 *
 * Owner: the cluster's fields below its mutex (tasks, in-flight list) are
 * shared under `mu`; counters are atomics; everything else belongs to the
 * thread that uses it.
 */
#ifndef SVC_CLUSTER_H
#define SVC_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mailbox.h"
#include "queue.h"
#include "redis_url.h"

struct evbuffer;

typedef struct svc_cluster_config {
    svc_redis_url url;
    int role;                 /* tsr_service_role */
    int result_ttl_s;
    int claim_idle_ms;
    int max_attempts;
    int max_batch;
    const char *data_dir;     /* api: where PNG copies go (borrowed) */
    const char *scratch_dir;  /* worker: the worker store's directory (borrowed) */
    svc_mailbox *mailbox;     /* the loop's (borrowed) */
} svc_cluster_config;

typedef struct svc_cluster svc_cluster;

svc_cluster *svc_cluster_new(const svc_cluster_config *cfg);
/* The model is known (engine 0 open): key prefix tsr:<model>:, threads. */
int svc_cluster_start(svc_cluster *c, const char *model_name);
/* Stop every thread; the publisher first sends what it holds (up to
 * wait_s seconds while Redis is away). */
void svc_cluster_stop(svc_cluster *c, int wait_s);
void svc_cluster_free(svc_cluster *c);

/* The loop's queue: pushes are counted and dropped (the images are in
 * Redis), length is the shared queue's, pop blocks until close. */
svc_queue *svc_cluster_mirror_queue(svc_cluster *c);
/* The workers' queue: pop takes images from the shared stream. */
svc_queue *svc_cluster_work_queue(svc_cluster *c);

/* api: queue jobs.  ids[i] ("j_..."), images[i], recs[i] (ACCEPT record
 * text, taken over with the arrays); posts TASK_DONE(cookie, 0 or
 * -EAGAIN when Redis cannot be reached). */
void svc_cluster_accept(svc_cluster *c, char **ids, int *images, char **recs, int n,
                        void *cookie);
/* api: a user cancel, for every node: mirrors cancel the job, workers
 * skip its images not yet started (running ones finish; their results are
 * ignored).  Best effort: dropped with a warning while Redis is away. */
void svc_cluster_cancel(svc_cluster *c, uint64_t job);
/* worker: a local worker's, tile encoder's or worker store's message
 * (IMAGE_STARTED, STEP, TILES, STORED, FAILED, CANCELLED) goes to the event
 * stream; STORED and FAILED are acked once written.  A TILES message's
 * tileset is taken over (m->tiles becomes NULL). */
void svc_cluster_forward(svc_cluster *c, svc_msg *m);
/* Prometheus lines (queue length, pending per consumer, claims, dead). */
void svc_cluster_metrics(svc_cluster *c, struct evbuffer *out);
/* Whether the command connection was up at its last try. */
bool svc_cluster_reachable(svc_cluster *c);

#endif
