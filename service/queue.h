/*
 * service/queue.h - the two things a scale-out deployment would move to a
 * shared store (Redis streams: XADD / XREADGROUP / XACK), behind small
 * tables of functions:
 *
 * - svc_queue: images waiting for a worker.  The loop pushes a job's images
 *   and removes them on cancel; workers pop, preferring the shape their
 *   batch is running, under the fairness rule of docs/service-design.md.
 *   Entries carry parameters (by reference), never tensors.
 * - svc_journal: the durable record of accepted and finished jobs, replayed
 *   at start so accepted work survives a crash.
 *
 * The local implementations (sched.c, journal.c) are in-process: one mutex
 * + condition variable for the queue, an append-only CRC'd file for the
 * journal.  Threads: push/remove/close from the loop, pop from workers
 * (any thread is safe); the journal is used by one thread at a time (the
 * loop at start, then the storage thread only).
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
} svc_queue_ops;
struct svc_queue {
    const svc_queue_ops *ops;
};

/* The in-process queue (sched.c).  max_batch is the fairness bound. */
svc_queue *svc_queue_local_new(int max_batch);

/* ---- journal ---- */

typedef struct svc_journal svc_journal;
/* Called once per record in file order; payload is the record's JSON text
 * (not NUL-terminated; len bytes).  Return non-zero to stop. */
typedef int (*svc_journal_fn)(void *user, const char *payload, size_t len);
typedef struct svc_journal_ops {
    /* Append records and make them durable (fsync) before returning.
     * 0 or -errno. */
    int (*append)(svc_journal *j, const char *const *payloads, const size_t *lens, int n);
    /* Rewrite the journal with only these records (atomically). */
    int (*rewrite)(svc_journal *j, const char *const *payloads, const size_t *lens, int n);
    void (*close)(svc_journal *j);
} svc_journal_ops;
struct svc_journal {
    const svc_journal_ops *ops;
};

/* Open (creating) the journal file at path and replay it through fn.  A
 * torn or corrupt tail is logged as a warning and cut off.  0 or -errno
 * (the file cannot be opened / read / truncated). */
int svc_journal_local_open(const char *path, svc_journal_fn fn, void *user, svc_journal **out);

#endif
