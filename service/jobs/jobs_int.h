/*
 * service/jobs/jobs_int.h - what the three files of the job table share,
 * not for the rest of service/ (which sees jobs.h).
 *
 * jobs.c holds the life of a job (states, events, queue order, the
 * workers' reports), table.c the table itself (one hash by id for jobs and
 * batches, insertion, batches, garbage collection) and tile_cache.c the
 * finished images' tiles in RAM (the --tile-cache-mb LRU).  The struct
 * below is the one state all three read.
 */
#ifndef SVC_JOBS_INT_H
#define SVC_JOBS_INT_H

#include <stddef.h>

#include "jobs.h"

struct svc_server;

/* An intrusive hash by id (table.c); its links live in the entries. */
typedef struct svc_idtable {
    svc_idlink **buckets;
    size_t n_buckets, count;
} svc_idtable;

struct svc_jobs {
    svc_idtable by_id;              /* jobs */
    svc_idtable batch_by_id;        /* batches */
    svc_job *first, *last;          /* every job, oldest first */
    svc_batch *bfirst;
    svc_job *qhead, *qtail;         /* jobs with queued images, in submission order */
    svc_image *tl_head, *tl_tail;   /* finished images holding tile bytes, LRU first */
    size_t tl_bytes;
};

/* tile_cache.c */
void svc_jobs_tile_lru_remove(svc_jobs *t, svc_image *img);
void svc_jobs_tile_lru_push(svc_jobs *t, svc_image *img);
void svc_jobs_tile_evict(struct svc_server *s);

#endif
