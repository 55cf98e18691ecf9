/*
 * service/queue/redis/cluster_int.h - what the cluster's three files share (cluster.h
 * is the interface; docs/scale-out.md the design):
 *   cluster.c       connections, the object's life, shared helpers, metrics
 *   cluster_work.c  worker side: the work queue (take, claim, dead letters)
 *                   and the publisher thread (events, results, acks)
 *   cluster_api.c   api side: accepts, cancels, the shared figures, the
 *                   follower thread
 * Ownership is cluster.h's: fields under `mu` are shared; rconn contexts
 * belong to one thread each.
 */
#ifndef SVC_CLUSTER_INT_H
#define SVC_CLUSTER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "cluster.h"

#define EVENTS_MAXLEN "1000000"
#define DEAD_MAXLEN "10000"
#define GROUP "workers"

typedef struct rconn {
    const svc_redis_url *url;
    redisContext *ctx;
    struct svc_tls_bridge *tls; /* rediss://: ctx's TLS bridge (redis_tls.h) */
    char last_err[64];        /* the start of the last failure logged (log it on change) */
    int backoff_ms;
    bool down_logged;
    const char *who;
    int timeout_s;
} rconn;

typedef enum ptask_type {
    PT_STARTED,
    PT_STEP,
    PT_STORED,
    PT_FAILED,
    PT_CANCELLED,
    PT_TILES,
} ptask_type;

struct svc_tileset;

typedef struct ptask {
    ptask_type type;
    uint64_t job;
    int index, step, steps, status;
    char etag[33];
    size_t bytes;
    char *text;
    struct svc_tileset *tiles; /* PT_TILES (owned) */
    struct ptask *next;
} ptask;

typedef struct atask {
    uint64_t cancel;      /* a cancel instead of an accept */
    char **ids, **recs;
    int *images;
    int n;
    void *cookie;
    struct atask *next;
} atask;

/* An image this node's workers hold (taken, not acked). */
typedef struct inflight {
    uint64_t job;
    int index;
    char id[48];
    bool cancelled;       /* a user cancelled its job (the loop was told) */
    struct inflight *next;
} inflight;

typedef struct cqueue {
    svc_queue base;
    svc_cluster *c;
    bool work;
} cqueue;

typedef struct consumer_pending {
    char name[128];
    long long count;
} consumer_pending;

struct svc_cluster {
    svc_cluster_config cfg;
    char prefix[300];
    char k_q[320], k_events[320], k_dead[320];
    char consumer[128];
    cqueue mirror, work;

    pthread_mutex_t mu;
    pthread_cond_t cond;      /* tasks, start, close */
    bool started, closed;
    atomic_bool stop, stop_publisher;
    ptask *p_head, *p_tail;   /* publisher tasks */
    atask *a_head, *a_tail;   /* accept tasks */
    inflight *flying;
    consumer_pending pending[32];
    int n_pending;
    bool have_threads[3];
    pthread_t threads[3];     /* command, follower, publisher */

    pthread_mutex_t pop_mu;   /* the pop connection */
    rconn pop;
    double last_claim;

    atomic_int qlen;          /* XLEN q (waiting + taken), refreshed */
    atomic_llong dead_len, claims, dead_total, results, attempts_over;
    atomic_ullong tile_seq;   /* makes each published tile set's key unique */
    atomic_bool reachable;
};

/* ---- cluster.c: connections (each used by one thread) ---- */
bool svc_cl_rc_ensure(rconn *r);
/* Drop a failed connection (logged once until it comes back). */
void svc_cl_rc_drop(rconn *r);
/* End of a thread: close without a word. */
void svc_cl_rc_close(rconn *r);
/* A command; NULL when the connection failed (it is dropped). */
redisReply *svc_cl_rc_cmd(rconn *r, const char *fmt, ...);
redisReply *svc_cl_rc_argv(rconn *r, int argc, const char **argv, const size_t *lens);
/* Sleep the next backoff step (100 ms doubling to 5 s). */
void svc_cl_rc_backoff(rconn *r, atomic_bool *stop);
bool svc_cl_is_error(const redisReply *r);

/* ---- cluster.c: shared helpers ---- */
void svc_cl_post(svc_cluster *c, svc_msg *m);
const redisReply *svc_cl_field(const redisReply *fields, const char *name);
const char *svc_cl_field_str(const redisReply *fields, const char *name);
int svc_cl_field_int(const redisReply *fields, const char *name, int dflt);
/* XACK + XDEL of a queue entry. */
bool svc_cl_ack(svc_cluster *c, rconn *r, const char *id);
/* A `failed` event (and a dead letter) and the ack, in one MULTI. */
bool svc_cl_fail_image(svc_cluster *c, rconn *r, const char *id, const char *job, int index,
                       int status, const char *msg, bool dead, int attempts);
void svc_cl_ensure_group(svc_cluster *c, rconn *r);
void svc_cl_q_push(svc_queue *q, svc_entry **entries, int n);
int svc_cl_q_remove_job(svc_queue *q, uint64_t job);
int svc_cl_q_length(svc_queue *q);
void svc_cl_q_close(svc_queue *q);
void svc_cl_q_destroy(svc_queue *q);
extern const svc_queue_ops svc_cl_mirror_ops;

/* ---- cluster_work.c: the workers' queue and the publisher ---- */
extern const svc_queue_ops svc_cl_work_ops;
void *svc_cl_publisher_main(void *arg);
void svc_cl_free_ptask(ptask *t);

/* ---- cluster_api.c: accepts, cancels, figures, the follower ---- */
void *svc_cl_command_main(void *arg);
void *svc_cl_follower_main(void *arg);
void svc_cl_free_atask(atask *t);

#endif
