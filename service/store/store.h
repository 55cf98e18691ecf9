/*
 * service/store/store.h - the data directory and the storage thread.
 *
 * Layout (docs/service-design.md, "Durability" and "Limits: the data dir"):
 *     <data-dir>/lock                   held (flock) by the one server using
 *                                       the directory; its pid inside
 *     <data-dir>/journal.log            accepted / final job records
 *     <data-dir>/journal.log.corrupt-<t> a damaged journal as it was found
 *     <data-dir>/jobs/<id>/job.json     a finished job: parameters, seeds,
 *                                       state, timings, image hashes
 *     <data-dir>/jobs/<id>/<i>.png      image i, with the A1111 parameters
 *     <data-dir>/jobs/<id>/<i>.tiles    image i's final JPEG tiles (tiles.h)
 *     <data-dir>/worker/                a --role worker's scratch store
 * Every file is written atomically (tmp, fsync, rename, fsync of the
 * directory).
 *
 * Why one lock file: two servers on one directory would each replay and
 * compact the same journal and replace the file under the other, losing
 * accepted jobs.  The lock is taken before anything reads the journal, is
 * released by the kernel when the process dies (kill -9 included, so a
 * stale file never blocks a restart), and names the holder's pid for the
 * message the second server prints.
 *
 * The storage thread owns every write after start-up: journal appends (an
 * fsync each, so the loop never waits on a disk), PNG encoding + writes of
 * finished images, and job.json sidecars.  Tasks run in the order they are
 * queued, so a job's images are on disk before its job.json, and its
 * job.json before its final journal record.  When job.json cannot be
 * written (ENOSPC, EIO...) the final record carries the job.json text
 * itself ("job"), so the job is rebuilt from the journal after a restart
 * (store/recovery.c); such a record stays in the journal until the job is
 * garbage-collected, which journals a "removed" record for it.
 * Completions are posted to the loop's mailbox.
 */
#ifndef SVC_STORE_H
#define SVC_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "mailbox.h"
#include "journal.h"

typedef struct svc_store svc_store;

/* Creates <data_dir>/jobs.  0 or -errno. */
int svc_store_prepare(const char *data_dir);
/* Takes <data_dir>/lock (flock LOCK_EX | LOCK_NB, O_CLOEXEC) and writes
 * this process's pid into it.  0 with *fd to keep open for the server's
 * life (closing it unlocks); -EBUSY when another process holds it, with
 * *holder the pid written there (0 when unreadable); or -errno. */
int svc_store_lock(const char *data_dir, int *fd, long *holder);
/* Calls fn with the text of every <data_dir>/jobs/<id>/job.json (start-up,
 * any thread, before the storage thread runs). */
void svc_store_scan(const char *data_dir, void (*fn)(void *user, const char *dir_name,
                                                     const char *json, size_t len),
                    void *user);
/* "<data_dir>/jobs/<id>/<index>.png" into buf. */
void svc_store_image_path(const char *data_dir, const char *job_id, int index, char *buf,
                          size_t size);
/* A finished image's PNG as stored, read whole into *data (malloc'd; the
 * caller frees), or -errno (logged).  What the native route sends and the
 * compat APIs encode inline. */
#define SVC_STORE_IMAGE_MAX (256u << 20)
int svc_store_read_image(const char *data_dir, const char *job_id, int index, char **data,
                         size_t *len);
/* The same, base64-encoded (A1111's and OpenAI's answers carry images
 * inline); NULL when it cannot be read (logged) or on out of memory. */
char *svc_store_image_b64(const char *data_dir, const char *job_id, int index);

/* journal NULL: a store that never journals (a worker role's scratch). */
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
/* A final job: write jobs/<id>/job.json (json), then append the final
 * journal record (record: a JSON object); both taken over.  When job.json
 * cannot be written, the record is appended with the job.json object
 * added as "job" (store.c). */
void svc_store_final(svc_store *s, uint64_t job, char *json, char *record);
/* Write jobs/<id>/<index>.tiles (data taken over; tiles.h has the format). */
void svc_store_tiles(svc_store *s, uint64_t job, int index, uint8_t *data, size_t len);
/* Remove jobs/<id> and everything in it (garbage collection); first a
 * "removed" journal record when the journal still holds one for the job
 * (a final record that carries its job.json). */
void svc_store_remove_job(svc_store *s, uint64_t job);
/* Post TASK_DONE(cookie) once every task queued before it is done. */
void svc_store_barrier(svc_store *s, void *cookie);

#endif
