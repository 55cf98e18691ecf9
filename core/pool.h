/*
 * core/pool.h - a fixed thread pool with a blocking parallel-for.
 *
 * Why: the CPU backend splits elementwise ops, norms and attention heads
 * across cores.  Threads are created once; a parallel_for wakes them, the
 * calling thread works too, and the call returns when every range is done.
 * Calls are not reentrant: a task must not call parallel_for on the same
 * pool (the CPU backend never nests).
 */
#ifndef TSR_CORE_POOL_H
#define TSR_CORE_POOL_H

#include <stdint.h>

typedef struct tsr_pool tsr_pool;

/* fn processes items [begin, end); `worker` is 0..n_threads-1. */
typedef void (*tsr_pool_fn)(void *ctx, int64_t begin, int64_t end, int worker);

/* n_threads counts the caller; 0 = number of online CPUs. */
int tsr_pool_create(int n_threads, tsr_pool **out);
void tsr_pool_destroy(tsr_pool *pool);
int tsr_pool_size(const tsr_pool *pool);

/* Split [0, n) into chunks of at least `grain` items and run them.  With a
 * NULL pool, or when n is small, runs inline on the caller. */
void tsr_pool_parallel_for(tsr_pool *pool, int64_t n, int64_t grain, tsr_pool_fn fn, void *ctx);

/* The same with chunks of exactly `chunk` items (the last may be shorter),
 * for items so heavy (a GEMM task) that the four-chunks-per-thread rule
 * would leave a thread idle for a large share of the call. */
void tsr_pool_parallel_for_chunk(tsr_pool *pool, int64_t n, int64_t chunk, tsr_pool_fn fn,
                                 void *ctx);

/* Number of online CPUs (at least 1). */
int tsr_cpu_count(void);

#endif
