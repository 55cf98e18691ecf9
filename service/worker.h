/*
 * service/worker.h - one thread per device: its own tsr_engine and
 * tsr_batch, fed from the queue (step-level continuous batching).
 *
 * Before every tsr_batch_step the worker applies pending cancellations and
 * pulls entries while fewer than max_batch images are active, preferring
 * the shape its batch is running (queue.h).  The step callback turns engine
 * progress into mailbox messages; finished images go to the storage thread
 * (PNG + write) and from there to the loop.  The worker never touches the
 * loop's state.
 *
 * A failed device (docs/multi-gpu.md part 3): a UNet call that fails with
 * TSR_ERR_BACKEND (the CUDA backend's sticky errors surface so), oom_limit
 * calls in a row out of memory, or the fault switch take the device out.
 * The worker posts DEVICE_FAILED, hands its unfinished images back to the
 * front of the queue in their order (IMAGE_REQUEUED each, then
 * ops->requeue) so the other devices rerun them from their start with the
 * same seed, and its thread ends.  The engine stays open until
 * svc_worker_free (the loop's checks may still read it).
 *
 * Owner: the worker's thread owns its engine and batch.  The engine is read
 * by the loop too (tsr_image_params_check, model facts: read-only, allowed
 * by tessera.h) once ENGINE_READY has been posted.  The cancel list is
 * shared (its own mutex).
 */
#ifndef SVC_WORKER_H
#define SVC_WORKER_H

#include <stdint.h>

#include "mailbox.h"
#include "queue.h"
#include "store.h"
#include "tiles.h"
#include "tessera.h"

typedef struct svc_worker_config {
    int index;
    const char *model;   /* borrowed */
    char device[64];     /* "cpu", "cuda:1", "auto" */
    int threads;         /* CPU threads (0 = all) */
    const char *precision; /* borrowed: NULL/"f32" or "bf16" */
    const char *lora_dir;  /* borrowed: NULL = no LoRAs */
    const char *embeddings_dir; /* borrowed: NULL = no embeddings */
    int lora_cache_mb;
    int max_batch;       /* images per UNet call (rows = 2x with guidance) */
    int max_wait_ms;     /* wait this long to fill a new group */
    bool static_batching; /* admit only into an empty batch (the load tests' baseline) */
    svc_queue *queue;
    svc_mailbox *mailbox;
    svc_store *store;
    struct svc_tiles *tiles; /* preview tiles; NULL = none */
    int preview_every;       /* previews every N UNet calls (default 1) */
    char name[64];           /* the device's name in logs, /readyz, /metrics ("cpu:1") */
    int fault_after_calls;   /* TESSERA_FAULT_DEVICE: fail at the first step once N UNet
                                calls are made (-1: never) */
    int oom_limit;           /* failed UNet calls out of memory in a row that take the
                                device out (0: 3) */
    struct svc_worker *share_from; /* CPU devices: open a replica of this worker's engine
                                      (its weights, read once: docs/multi-gpu.md part 2);
                                      NULL: read the model */
    struct svc_weights *weights;   /* or: rank weights_rank of this broadcast group
                                      (weights.h; rank 0 reads and sends); NULL: none */
    int weights_rank;
    struct svc_pair *pair;   /* CFG-parallel partner channel (pair.h); NULL: never pairs */
    int pair_me;             /* this worker's place in it, 0 or 1 */
} svc_worker_config;

typedef struct svc_worker svc_worker;

/* Start the thread (it opens the engine and posts ENGINE_READY or
 * ENGINE_FAILED).  NULL if the thread cannot start. */
svc_worker *svc_worker_start(const svc_worker_config *cfg);
/* The engine, once ENGINE_READY was posted (else NULL). */
tsr_engine *svc_worker_engine(svc_worker *w);
/* Cancel the images of `job` this worker runs, before its next UNet call
 * (any thread). */
void svc_worker_cancel(svc_worker *w, uint64_t job);
/* Cancel everything running now and after; the thread ends once its batch
 * is empty and the queue is closed (drain timeout). */
void svc_worker_abort(svc_worker *w);
/* Join the thread (the queue must be closed first). */
void svc_worker_join(svc_worker *w);
/* Close the engine and free (after join). */
void svc_worker_free(svc_worker *w);

#endif
