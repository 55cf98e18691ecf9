/*
 * backend/comm/comm.h - collectives between the devices of one server:
 * all_gather, broadcast, all_reduce (sum) and barrier, host-synchronous and
 * stream-ordered.
 *
 * Why it is built this way.  `tessera serve --device a,b,...` runs one worker
 * thread per device in one process, so a group of ranks is created once, by
 * one thread, and each worker takes its rank's handle (tsr_comm_group_rank);
 * NCCL's single-process initialisation (ncclCommInitAll) has that shape, and
 * the host implementation (threads sharing memory) gets it for free.  Three
 * implementations sit behind the same calls (backend/comm/comm_impl.h holds
 * the table):
 *   self  size 1: every op is a copy (or nothing, in place).
 *   host  threads of this process and shared memory: for CPU devices and for
 *         tests.  Deterministic: all_reduce adds the ranks' values in rank
 *         order 0..size-1, so every rank gets the same bits, and an image
 *         split over ranks can equal its one-device run byte for byte.
 *   nccl  libnccl.so.2 and the CUDA driver (libcuda.so.1) dlopened at run
 *         time, never linked, like the CUDA backend module: the program runs
 *         where neither exists, and this file compiles without CUDA headers
 *         (comm_nccl_abi.h declares the few NCCL entry points used).
 *
 * Failure is the part that matters for a server: a collective blocks until
 * every rank has joined it, so one dead device would hang every other one.
 * Here a rank waits at most the group's timeout (tsr_comm_options.timeout_s,
 * default 30 s or $TSR_COMM_TIMEOUT_S) for its peers (host: for them to
 * arrive; nccl: for the op to complete, transfer included); a rank that knows it
 * is going away (a sticky CUDA error, an out-of-memory it will not survive)
 * calls tsr_comm_abort and its peers fail at once instead.  Either way the
 * group is then *broken*: its collective sequence is out of step, so every
 * later op on every rank fails at once with the same reason, and
 * tsr_comm_failed_ranks says whom to take out before a new group is made
 * over the survivors.  Every error names the op and the rank that saw it:
 *   "all_gather (rank 1 of 2): peer rank 0 did not arrive within 30 s".
 *
 * Buffers.  self and host ops take host-addressable memory (the CPU
 * backend's memory is host memory); nccl ops take device memory of the
 * rank's CUDA device (or registered host memory).  The stream-ordered
 * variants (_async) take the caller's stream (a cudaStream_t, as void *;
 * NULL = the comm's own stream) and return once the op is enqueued; then
 * tsr_comm_wait blocks the host until the stream's collectives are done,
 * watching for the timeout, a peer's abort and NCCL's asynchronous errors.
 * For self and host the variants run synchronously and ignore the stream.
 *
 * Threads: one rank's handle is used by one thread at a time; different
 * ranks run on different threads (a collective waits for its peers, so two
 * ranks on one thread would deadlock until the timeout).  tsr_comm_abort
 * may be called from any thread.
 */
#ifndef TSR_BACKEND_COMM_H
#define TSR_BACKEND_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

/* Ranks in a group: at most one per bit of tsr_comm_failed_ranks's mask. */
#define TSR_COMM_MAX_RANKS 64
/* The default wait for peers, seconds ($TSR_COMM_TIMEOUT_S overrides it). */
#define TSR_COMM_DEFAULT_TIMEOUT_S 30.0

typedef enum tsr_comm_kind {
    TSR_COMM_SELF,
    TSR_COMM_HOST,
    TSR_COMM_NCCL,
} tsr_comm_kind;

/* Element types.  all_gather and broadcast move bits (f16 and bf16 as raw
 * 16-bit words); all_reduce sums f32, f16 and bf16 (not bytes). */
typedef enum tsr_comm_dtype {
    TSR_COMM_BYTES,
    TSR_COMM_F32,
    TSR_COMM_F16,
    TSR_COMM_BF16,
    TSR_COMM_DTYPE_COUNT
} tsr_comm_dtype;

typedef struct tsr_comm_options {
    tsr_comm_kind kind;
    int size;           /* ranks, 1..TSR_COMM_MAX_RANKS (self: 1) */
    const int *devices; /* nccl: the CUDA device of each rank (NULL: rank r on
                         * device r); borrowed for the create call */
    double timeout_s;   /* how long a rank waits for its peers (> 0) */
} tsr_comm_options;

/* A group of ranks, and one rank's handle in it.  Opaque. */
typedef struct tsr_comm_group tsr_comm_group;
typedef struct tsr_comm tsr_comm;

/* Defaults: host, size 1, devices NULL, timeout $TSR_COMM_TIMEOUT_S or 30. */
void tsr_comm_options_init(tsr_comm_options *o);
/* "self", "host", "nccl" -> the kind; TSR_ERR_INVALID naming them else. */
int tsr_comm_kind_parse(const char *name, tsr_comm_kind *out);
const char *tsr_comm_kind_name(tsr_comm_kind kind);
const char *tsr_comm_dtype_name(tsr_comm_dtype dtype);
/* Bytes per element (0 for an unknown dtype). */
size_t tsr_comm_dtype_size(tsr_comm_dtype dtype);

/* Create every rank of a group (nccl: ncclCommInitAll over the devices).
 * A missing NCCL or GPU is TSR_ERR_UNSUPPORTED with the loader's reason
 * ("nccl: libnccl.so.2 not found (...)", "nccl: no CUDA device: ...").
 * Owned: tsr_comm_group_destroy, once no rank is inside an op. */
int tsr_comm_group_create(const tsr_comm_options *o, tsr_comm_group **out);
void tsr_comm_group_destroy(tsr_comm_group *g);
/* Rank r's handle (borrowed: valid until the group is destroyed); NULL for
 * a rank out of range. */
tsr_comm *tsr_comm_group_rank(tsr_comm_group *g, int rank);

int tsr_comm_rank(const tsr_comm *c);
int tsr_comm_size(const tsr_comm *c);
tsr_comm_kind tsr_comm_kind_of(const tsr_comm *c);
/* The rank's CUDA device (nccl), or -1. */
int tsr_comm_device(const tsr_comm *c);
double tsr_comm_timeout(const tsr_comm *c);

/* Host-synchronous collectives: when one returns TSR_OK the result is in
 * place on this rank and the peers are done with this rank's buffers.
 *   all_gather  send [count] -> recv [size * count], rank q's block at
 *               q * count.  In place when send == recv + rank * count.
 *   broadcast   buf [count] of `root` -> buf of every rank.
 *   all_reduce  recv = sum over ranks of send (elementwise, [count]);
 *               send == recv is allowed.  Host: f32 adds in rank order;
 *               f16/bf16 widen to f32, add in rank order, round once.
 *   barrier     returns once every rank has entered it.
 * All ranks must call the same ops in the same order with the same count,
 * dtype and root; a mismatch breaks the group (TSR_ERR_INVALID naming both
 * calls).  Errors: TSR_ERR_INVALID (arguments), TSR_ERR_BACKEND (a peer
 * timed out or left, the group is broken, NCCL or CUDA failed). */
int tsr_comm_all_gather(tsr_comm *c, const void *send, void *recv, size_t count,
                        tsr_comm_dtype dtype);
int tsr_comm_broadcast(tsr_comm *c, void *buf, size_t count, tsr_comm_dtype dtype, int root);
/* Broadcast out of place: the root's `send` [count] -> `recv` of every
 * rank, the root's own included (a copy unless send == recv, which is
 * tsr_comm_broadcast).  send is read on the root only (NULL elsewhere);
 * on the root it must be recv or not overlap it.  What a one-rank group
 * needs to give a second buffer on the same device its bytes (nccl: a
 * device copy through NCCL; docs/multi-gpu.md part 2). */
int tsr_comm_broadcast_from(tsr_comm *c, const void *send, void *recv, size_t count,
                            tsr_comm_dtype dtype, int root);
int tsr_comm_all_reduce(tsr_comm *c, const void *send, void *recv, size_t count,
                        tsr_comm_dtype dtype);
int tsr_comm_barrier(tsr_comm *c);

/* Stream-ordered: enqueue on `stream` (nccl: a cudaStream_t of the rank's
 * device, NULL = the comm's own) and return; the buffers must stay valid
 * until the stream has run the op.  tsr_comm_wait blocks the host until the
 * collectives enqueued on `stream` are done, within the timeout (on a
 * timeout, a peer's abort or an NCCL error it aborts the communicator and
 * breaks the group).  self/host: the op runs before the call returns. */
int tsr_comm_all_gather_async(tsr_comm *c, const void *send, void *recv, size_t count,
                              tsr_comm_dtype dtype, void *stream);
int tsr_comm_broadcast_async(tsr_comm *c, void *buf, size_t count, tsr_comm_dtype dtype, int root,
                             void *stream);
int tsr_comm_all_reduce_async(tsr_comm *c, const void *send, void *recv, size_t count,
                              tsr_comm_dtype dtype, void *stream);
int tsr_comm_wait(tsr_comm *c, void *stream);

/* Leave the group for good: peers waiting in a collective, and every later
 * op on any rank, fail at once with "rank R left the group: <why>".  For a
 * rank whose device failed.  Any thread; a rank inside an op finishes the
 * copies it has started first. */
void tsr_comm_abort(tsr_comm *c, const char *why);
/* Whether the group is broken; when it is, *reason (borrowed, stable once
 * broken) says why.  reason may be NULL. */
bool tsr_comm_broken(const tsr_comm *c, const char **reason);
/* The ranks to blame for the break (bit r = rank r): those that did not
 * arrive in time, or left.  0 when the group is whole, or when nobody in
 * particular is to blame (mismatched calls, an NCCL error). */
uint64_t tsr_comm_failed_ranks(const tsr_comm *c);

#endif
