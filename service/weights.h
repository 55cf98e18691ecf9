/*
 * service/weights.h - how each device of `--device a,b,...` gets the
 * model's weights (docs/multi-gpu.md part 2): read once, by the first
 * device of its kind, and then borrowed (CPU devices: one read-only copy)
 * or broadcast (CUDA devices: each GPU its own copy, in one NCCL group;
 * CPU devices too with TESSERA_SHARE_WEIGHTS=broadcast, over the host
 * comm, which is how CI runs the broadcast through the server).
 *
 * Why a file of its own: the plan is made once at start for all workers
 * (server.c), and a broadcast group joins several worker threads, one
 * rank each (a collective waits for its peers), which hand each other the
 * source engine here: rank 0 publishes its engine once open and then
 * sends; the other ranks wait for it and open their replicas.  The group
 * is freed by the last rank to finish its open, so the NCCL communicators
 * do not outlive the load.
 *
 * TESSERA_SHARE_WEIGHTS: unset (or 1): CPU devices borrow, CUDA devices
 * broadcast; "broadcast": both broadcast; "0": every device reads the
 * model itself (for measuring).  Where a group cannot be made (no NCCL,
 * two entries on one GPU) its devices read the model each, with a warning
 * saying why.
 */
#ifndef SVC_WEIGHTS_H
#define SVC_WEIGHTS_H

#include <stdatomic.h>
#include <stdbool.h>

#include "tessera.h"

/* One broadcast group.  Shared by its ranks' workers. */
typedef struct svc_weights svc_weights;

/* What device i does: borrow from source[i] (group[i] NULL, source >= 0),
 * take rank[i] of group[i], or read the model (both unset). */
typedef struct svc_weights_plan {
    int source[64];
    svc_weights *group[64];
    int rank[64];
} svc_weights_plan;

/* Plan for names[0..n) (n <= 64) under `mode` (TESSERA_SHARE_WEIGHTS). */
void svc_weights_plan_make(char *const *names, int n, const char *mode, svc_weights_plan *p);

/* Rank `rank` of g gets its engine (worker thread; abort: give up when set):
 * rank 0 publishes `own` (NULL when its open failed) and sends its weights;
 * a rank > 0 waits for rank 0's engine and opens a replica on eo->device.
 * *engine is set only for a rank > 0 that opened.  Every rank calls it
 * once; the last frees g. */
int svc_weights_rank_open(svc_weights *g, int rank, tsr_engine *own,
                          const tsr_engine_options *eo, atomic_bool *abort, tsr_engine **engine);
/* For a rank whose worker never started: it leaves (its peers give up at
 * once) and counts as done. */
void svc_weights_leave(svc_weights *g, int rank);

#endif
