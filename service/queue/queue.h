/*
 * service/queue/queue.h - the two things a scale-out deployment would move to a
 * shared store (Redis streams: XADD / XREADGROUP / XACK), behind small
 * tables of functions:
 *
 * - svc_queue: images waiting for a worker.  The loop pushes a job's images
 *   and removes them on cancel; workers pop, preferring the shape their
 *   batch is running, under the fairness rule of docs/service-design.md.
 *   Entries carry parameters (by reference), never tensors.
 * - svc_journal: the durable record of accepted and finished jobs, replayed
 *   at start so accepted work survives a crash, and compacted at start and
 *   while running: the caller's classify function says which record each
 *   job still needs (its key's live record), so the journal can drop the
 *   rest on its own thread without asking the loop.
 *
 * The local implementations (queue/local.c, journal.c) are in-process: one mutex
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

/* The in-process queue (queue/local.c).  max_batch is the fairness bound. */
svc_queue *svc_queue_local_new(int max_batch);

/* ---- journal ---- */

typedef struct svc_journal svc_journal;
/* Called once per record in file order; payload is the record's JSON text
 * (not NUL-terminated; len bytes).  Return non-zero to stop (out of
 * memory: the open then fails rather than drop what was not read). */
typedef int (*svc_journal_fn)(void *user, const char *payload, size_t len);
/* What a record means for compaction (the journal keeps, per key, at most
 * one live record: the last LIVE one, until an END for that key). */
typedef enum svc_journal_class {
    SVC_JOURNAL_DEAD = 0, /* not needed after it is written */
    SVC_JOURNAL_LIVE,     /* from now on the key's record (replaces the previous one) */
    SVC_JOURNAL_END,      /* the key needs no record any more */
} svc_journal_class;
/* Classifies a record and names its key (non-zero); any thread. */
typedef svc_journal_class (*svc_journal_class_fn)(const char *payload, size_t len,
                                                  uint64_t *key);
typedef struct svc_journal_ops {
    /* Append records and make them durable (fsync) before returning.
     * 0 or -errno.  May compact the file afterwards (see the options). */
    int (*append)(svc_journal *j, const char *const *payloads, const size_t *lens, int n);
    /* Rewrite the journal with only these records (atomically). */
    int (*rewrite)(svc_journal *j, const char *const *payloads, const size_t *lens, int n);
    /* Whether key has a live record (classify said LIVE and no END since). */
    bool (*holds)(svc_journal *j, uint64_t key);
    void (*close)(svc_journal *j);
} svc_journal_ops;
struct svc_journal {
    const svc_journal_ops *ops;
};

typedef struct svc_journal_options {
    svc_journal_fn replay;         /* each intact record at open, in file order */
    void *user;                    /* replay's */
    svc_journal_class_fn classify; /* NULL: never compacted while running */
    size_t compact_bytes;          /* rewrite while running once the records no longer
                                    * needed pass this many bytes and outweigh the live
                                    * ones; 0 = only the caller's rewrite */
} svc_journal_options;

/* Open (creating) the journal file at path and replay it through
 * opt->replay.  A torn tail is logged as a warning and cut off; damaged
 * records before intact ones are skipped (the reader resynchronises at the
 * next intact record), the damaged file is kept as <path>.corrupt-<epoch>
 * and the file rewritten without them (journal.c).  0 or -errno (the file
 * cannot be opened / read / truncated / copied). */
int svc_journal_local_open(const char *path, const svc_journal_options *opt, svc_journal **out);

#endif
