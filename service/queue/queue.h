/*
 * service/queue/queue.h - the queue: images waiting for a worker, behind a
 * small table of functions (svc_queue_ops) with two implementations.
 *
 * The loop pushes a job's images and removes them on cancel; workers pop,
 * preferring the shape their batch is running, under the fairness rule of
 * docs/service-design.md (keys take turns; within a key, oldest first).  Entries carry parameters (by reference), never
 * tensors.  queue/local.c is the in-process queue (one mutex + condition
 * variable); with --queue redis://, queue/redis/ gives the api roles a
 * mirror of the shared Redis stream and the worker roles a queue fed by
 * XREADGROUP (docs/scale-out.md).  Threads: push/remove/close from the
 * loop, pop from workers (any thread is safe).  The journal, the other
 * half of what a restart needs, is store/journal.h's.
 */
#ifndef SVC_QUEUE_H
#define SVC_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "params.h"

/* One image waiting for a worker. */
typedef struct svc_entry {
    uint64_t job;        /* the job's id */
    int index;           /* image index in the job (seed = job seed + index) */
    int width, height;   /* the shape workers group by */
    svc_params *params;  /* one reference, owned by the entry */
    char owner[64];      /* the job's key name ("" = none): fair turns (local.c) */
    /* queue bookkeeping (the implementation's) */
    uint64_t seq;
    int passed;          /* times a younger entry was taken instead */
    struct svc_entry *prev, *next;
} svc_entry;

/* malloc'd entry holding a new reference to params. */
svc_entry *svc_entry_new(uint64_t job, int index, svc_params *params);
void svc_entry_free(svc_entry *e);

typedef struct svc_queue svc_queue;
typedef struct svc_queue_ops {
    /* Append n entries in order (ownership passes to the queue). */
    void (*push)(svc_queue *q, svc_entry **entries, int n);
    /* Drop every waiting entry of `job`; returns how many. */
    int (*remove_job)(svc_queue *q, uint64_t job);
    /* Take the next entry for a worker whose batch runs images of
     * width x height (have_shape false: an empty batch).  wait_ms < 0
     * blocks until an entry comes or the queue closes, 0 never blocks.
     * NULL when nothing is there (or the queue is closed). */
    svc_entry *(*pop)(svc_queue *q, bool have_shape, int width, int height, int wait_ms);
    /* Entries waiting. */
    int (*length)(svc_queue *q);
    /* Stop handing out entries (drain) and wake every blocked pop. */
    void (*close)(svc_queue *q);
    void (*destroy)(svc_queue *q);
    /* Put entries back at the front, in the order given, ahead of every
     * waiting entry (a failed device's unfinished images, which rerun from
     * their start: docs/multi-gpu.md part 3).  Ownership passes to the
     * queue.  NULL where the queue cannot (the Redis work queue): the
     * caller fails those images instead.  Entries are taken even when the
     * queue is closed (the journal reruns them at the next start). */
    void (*requeue)(svc_queue *q, svc_entry **entries, int n);
} svc_queue_ops;
struct svc_queue {
    const svc_queue_ops *ops;
};

/* The in-process queue (queue/local.c).  max_batch is the fairness bound. */
svc_queue *svc_queue_local_new(int max_batch);

#endif
