/*
 * service/store.h - the data directory and the storage thread.
 *
 * Layout (docs/service-design.md, "Durability"):
 *     <data-dir>/journal.log            accepted / final job records
 *     <data-dir>/jobs/<id>/job.json     a finished job: parameters, seeds,
 *                                       state, timings, image hashes
 *     <data-dir>/jobs/<id>/<i>.png      image i, with the A1111 parameters
 *     <data-dir>/jobs/<id>/<i>.tiles    image i's final JPEG tiles (tiles.h)
 * Every file is written atomically (tmp, fsync, rename, fsync of the
 * directory).
 *
 * The storage thread owns every write after start-up: journal appends (an
 * fsync each, so the loop never waits on a disk), PNG encoding + writes of
 * finished images, and job.json sidecars.  Tasks run in the order they are
 * queued, so a job's images are on disk before its job.json, and its
 * job.json before its final journal record.  Completions are posted to the
 * loop's mailbox.
 */
#ifndef SVC_STORE_H
#define SVC_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "mailbox.h"
#include "queue.h"

typedef struct svc_store svc_store;

/* Creates <data_dir>/jobs.  0 or -errno. */
int svc_store_prepare(const char *data_dir);
/* Calls fn with the text of every <data_dir>/jobs/<id>/job.json (start-up,
 * any thread, before the storage thread runs). */
void svc_store_scan(const char *data_dir, void (*fn)(void *user, const char *dir_name,
                                                     const char *json, size_t len),
                    void *user);
/* "<data_dir>/jobs/<id>/<index>.png" into buf. */
void svc_store_image_path(const char *data_dir, const char *job_id, int index, char *buf,
                          size_t size);

svc_store *svc_store_start(const char *data_dir, svc_journal *journal, svc_mailbox *mb);
/* Finish every queued task, then end the thread and free. */
void svc_store_stop(svc_store *s);

/* Append journal records (payloads and the arrays are taken over) and
 * fsync; then post TASK_DONE(cookie, status) when cookie is not NULL. */
void svc_store_journal(svc_store *s, char **payloads, size_t *lens, int n, void *cookie);
/* Encode and write image `index` of job `job` (rgb and infotext are taken
 * over); then post IMAGE_STORED, or IMAGE_FAILED when it cannot be written. */
void svc_store_image(svc_store *s, uint64_t job, int index, uint8_t *rgb, int width, int height,
                     char *infotext);
/* Write jobs/<id>/job.json (json taken over). */
void svc_store_job_file(svc_store *s, uint64_t job, char *json);
/* Write jobs/<id>/<index>.tiles (data taken over; tiles.h has the format). */
void svc_store_tiles(svc_store *s, uint64_t job, int index, uint8_t *data, size_t len);
/* Remove jobs/<id> and everything in it (garbage collection). */
void svc_store_remove_job(svc_store *s, uint64_t job);
/* Post TASK_DONE(cookie) once every task queued before it is done. */
void svc_store_barrier(svc_store *s, void *cookie);
/* Tasks waiting (for /metrics and drain). */
int svc_store_pending(svc_store *s);

#endif
