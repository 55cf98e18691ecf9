/*
 * service/store/journal.h - the durable record of accepted and finished
 * jobs (svc_journal), behind a small table of functions.
 *
 * Replayed at start so accepted work survives a crash, and compacted at
 * start and while running: the caller's classify function says which
 * record each job still needs (its key's live record), so the journal can
 * drop the rest on its own thread without asking the loop.  The one
 * implementation, store/journal.c, is an append-only CRC'd file; with
 * --queue redis:// the shared Redis stream plays its part and no local
 * journal is written (docs/scale-out.md).  The journal is used by one
 * thread at a time: the loop at start, then the storage thread only.
 */
#ifndef SVC_JOURNAL_H
#define SVC_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
