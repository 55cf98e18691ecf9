/*
 * backend/comm/comm_impl.h - what the implementations of comm.h share: the
 * group (size, timeout, and whether and why it is broken) and the table of
 * functions each implementation fills.
 *
 * Why: comm.c checks every argument once and puts the op and rank in front
 * of every error, for all three implementations, so an implementation only
 * moves bytes and reports what went wrong in its own words ("peer rank 0 did
 * not arrive within 30 s").  The broken state lives in the group, guarded by
 * the group's mutex, because every implementation needs it the same way: the
 * host one waits on the group's condition variable, the NCCL one polls the
 * flag while its stream runs.
 */
#ifndef TSR_BACKEND_COMM_IMPL_H
#define TSR_BACKEND_COMM_IMPL_H

#include <pthread.h>
#include <time.h>

#include "backend/comm/comm.h"
#include "core/error.h"

/* The ops an implementation provides; count is in elements, and the
 * arguments are checked by comm.c.  stream is NULL for the synchronous
 * calls.  Each returns TSR_OK or raises an error without the op/rank
 * prefix (comm.c adds it). */
typedef enum comm_op {
    COMM_OP_ALL_GATHER,
    COMM_OP_BROADCAST,
    COMM_OP_ALL_REDUCE,
    COMM_OP_BARRIER,
    COMM_OP_WAIT,
    COMM_OP_COUNT
} comm_op;

const char *tsr_comm_op_name(comm_op op);

typedef struct comm_args {
    comm_op op;
    const void *send;
    void *recv;
    size_t count;
    tsr_comm_dtype dtype;
    int root;
    void *stream;
    bool async; /* the _async variant (enqueue only) */
} comm_args;

typedef struct comm_impl_ops {
    int (*run)(tsr_comm *c, const comm_args *a);
    /* tell a rank's communicator to stop (nccl: ncclCommAbort); may be NULL */
    void (*abort_rank)(tsr_comm *c);
    /* free what the implementation made for the group */
    void (*destroy)(tsr_comm_group *g);
} comm_impl_ops;

struct tsr_comm {
    tsr_comm_group *group; /* borrowed: the group owns its ranks */
    int rank;
    int device; /* nccl: CUDA device; -1 */
    void *impl; /* the implementation's per-rank state */
};

struct tsr_comm_group {
    const comm_impl_ops *ops;
    tsr_comm_kind kind;
    int size;
    double timeout_s;
    tsr_comm *ranks; /* [size], owned */
    void *impl;      /* the implementation's group state, owned */

    /* guarded by mu; cv (CLOCK_MONOTONIC) wakes ranks waiting on peers */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool broken;
    uint64_t failed;  /* ranks to blame */
    char reason[256]; /* written once, when the group breaks */
};

/* Break the group (first reason wins) and wake every waiter.  Call with
 * g->mu held.  failed: the ranks to blame. */
void tsr_comm_break_locked(tsr_comm_group *g, uint64_t failed, const char *fmt, ...)
    TSR_PRINTF(3, 4);

/* A monotonic deadline `seconds` from now, for pthread_cond_timedwait on
 * g->cv. */
struct timespec tsr_comm_deadline(double seconds);
double tsr_comm_now(void);

/* "rank 2" / "ranks 0, 2" for a mask, into buf. */
void tsr_comm_format_ranks(uint64_t mask, char *buf, size_t size);

/* The implementations' group constructors: fill g->ops, g->impl and the
 * ranks' impl/device (g->size, g->timeout_s and g->ranks[].rank are set). */
int tsr_comm_self_init(tsr_comm_group *g, const tsr_comm_options *o);
int tsr_comm_host_init(tsr_comm_group *g, const tsr_comm_options *o);
int tsr_comm_nccl_init(tsr_comm_group *g, const tsr_comm_options *o);

#endif
