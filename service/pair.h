/*
 * service/pair.h - CFG-parallel in the server (`--parallel auto|data|cfg`,
 * docs/multi-gpu.md part 4): two devices' workers pair up to run one batch
 * with its UNet rows split between them (tsr_cfg_group, tessera.h).
 *
 * Why pairs of workers rather than a third kind of thread: each device
 * already has a worker thread that owns its engine, and a grouped batch
 * needs one thread per rank.  So devices 2k and 2k+1 are partners; either
 * may lead.  The leader is the worker that took the image: it keeps doing
 * everything a worker does (queue, slots, messages, previews, results, its
 * own device's failure), attaches its batch to rank 0, and sends its
 * partner, through this channel, what the partner's batch must do to stay
 * in lockstep: each image it submits, each cancel, each step, and the end.
 * The partner (the follower) attaches its batch to rank 1, runs those
 * commands and discards what finishes (rank 0 holds the pixels); it posts
 * only its device's metrics.  So one image is still owned by one worker,
 * and the failure rules of part 3 hold as they are: a failed leader
 * requeues its images; a failed follower leaves the group, the leader's
 * next step fails at once blaming rank 1, and the leader requeues its
 * images to rerun from their start on the devices still up.
 *
 * When a pair forms (an idle worker has just taken an entry into its
 * empty batch and its partner waits idle):
 *   cfg   always; the pair then keeps taking entries, up to twice
 *         --max-batch images (each device still runs at most --max-batch
 *         rows' worth of images), and lasts while its batch holds any;
 *   auto  only when the queue is otherwise empty and the image has
 *         guidance: a lone image at half the latency; the pair takes
 *         nothing more and parts when that image is done, so under load
 *         every device runs its own images (data parallel);
 *   data  never (part 3's scheduler as it was).
 * An idle worker of a pair waits for entries in short timed pops (5 ms),
 * so its partner can claim it between them.
 *
 * Threads: a pair is shared by its two workers (its mutex); the server
 * makes it before the workers start and frees it after both have joined.
 */
#ifndef SVC_PAIR_H
#define SVC_PAIR_H

#include <stdatomic.h>
#include <stdbool.h>

#include "queue.h"
#include "tessera.h"

typedef enum svc_parallel {
    SVC_PARALLEL_DATA = 0,
    SVC_PARALLEL_AUTO = 1,
    SVC_PARALLEL_CFG = 2,
} svc_parallel;

/* "auto", "data", "cfg" -> the mode; -1 else. */
int svc_parallel_parse(const char *name);
const char *svc_parallel_name(svc_parallel mode);

typedef struct svc_pair svc_pair;
struct svc_worker;

/* A pair for two workers' devices.  NULL out of memory. */
svc_pair *svc_pair_new(svc_parallel mode);
/* After both workers have joined. */
void svc_pair_free(svc_pair *p);

/* An idle worker's wait for its next entry (`me`: 0 or 1, its place in
 * the pair).  Returns an entry, or NULL with *follow set (the partner
 * claimed this worker: run svc_pair_follow) or clear (the queue is closed,
 * or `abort` was set). */
svc_entry *svc_pair_idle_pop(svc_pair *p, int me, svc_queue *q, atomic_bool *abort,
                             bool *follow);

/* Worker `me` (0 or 1) of the pair, once its engine is open. */
void svc_pair_register(svc_pair *p, int me, struct svc_worker *w);
/* The worker `me` took `e` into its empty batch `b` (engine `mine`):
 * whether a pair forms now (the mode's rule and an idle, healthy partner),
 * and if so claim the partner and attach b to rank 0.  true: `me` leads. */
bool svc_pair_try_lead(svc_pair *p, int me, svc_queue *q, const svc_entry *e, tsr_batch *b,
                       tsr_engine *mine);
/* Images a leading worker may hold. */
int svc_pair_capacity(const svc_pair *p, int max_batch);
/* Whether a leading worker takes more entries after the first. */
bool svc_pair_keeps_filling(const svc_pair *p);

/* The leader's commands for its partner, in the order its batch does them. */
void svc_pair_submit(svc_pair *p, int leader_image, const struct svc_params *params, int index);
void svc_pair_cancel(svc_pair *p, int leader_image);
void svc_pair_step(svc_pair *p);
/* The leader's device failed: its partner's step fails at once. */
void svc_pair_abort(svc_pair *p, const char *why);
/* End the pair: the partner leaves (waited for), b is detached. */
void svc_pair_end(svc_pair *p, tsr_batch *b);
/* A failed grouped step of the leader: whether its own device is to blame
 * (else the partner or the pairing: requeue and end). */
bool svc_pair_own_fault(const svc_pair *p, const tsr_batch *b);
/* This worker's device is out for good: never claim it again. */
void svc_pair_mark_dead(svc_pair *p, int me);

/* The follower's side, on the claimed worker's thread: run the leader's
 * commands on w's batch until the pair ends.  false when w's own device
 * failed meanwhile (its thread ends, as any failed worker's). */
bool svc_pair_follow(svc_pair *p, int me, struct svc_worker *w);

#endif
