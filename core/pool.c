/*
 * core/pool.c - see pool.h.  Workers sleep on a condition variable between
 * jobs; each job is split into chunks claimed with an atomic counter, so
 * uneven chunk costs balance out.
 */
#include "core/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/error.h"

struct tsr_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_cond_t done;
    uint64_t generation; /* bumped per job */
    bool stop;
    /* current job */
    tsr_pool_fn fn;
    void *ctx;
    int64_t n, chunk;
    atomic_int_fast64_t next;
    int active; /* workers still inside the current job */
};

int tsr_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void run_chunks(tsr_pool *p, int worker)
{
    for (;;) {
        int64_t begin = atomic_fetch_add(&p->next, p->chunk);
        if (begin >= p->n)
            break;
        int64_t end = begin + p->chunk < p->n ? begin + p->chunk : p->n;
        p->fn(p->ctx, begin, end, worker);
    }
}

struct worker_arg {
    tsr_pool *pool;
    int index;
};

static void *worker_main(void *arg_)
{
    struct worker_arg *arg = arg_;
    tsr_pool *p = arg->pool;
    int index = arg->index;
    free(arg);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_chunks(p, index);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int tsr_pool_create(int n_threads, tsr_pool **out)
{
    *out = NULL;
    if (n_threads <= 0)
        n_threads = tsr_cpu_count();
    if (n_threads > 1024)
        return tsr_errorf(TSR_ERR_INVALID, "thread count %d is too large", n_threads);
    tsr_pool *p = calloc(1, sizeof *p);
    if (!p)
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate thread pool");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        tsr_pool_destroy(p);
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *arg = malloc(sizeof *arg);
        if (arg) {
            arg->pool = p;
            arg->index = i;
        }
        if (!arg || pthread_create(&p->threads[i], NULL, worker_main, arg) != 0) {
            free(arg);
            p->n_threads = i;
            tsr_pool_destroy(p);
            return tsr_errorf(TSR_ERR_INTERNAL, "cannot start worker thread %d", i);
        }
    }
    *out = p;
    return TSR_OK;
}

void tsr_pool_destroy(tsr_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++)
        if (p->threads)
            pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int tsr_pool_size(const tsr_pool *p) { return p ? p->n_threads : 1; }

static void run_split(tsr_pool *p, int64_t n, int64_t chunk, tsr_pool_fn fn, void *ctx);

void tsr_pool_parallel_for(tsr_pool *p, int64_t n, int64_t grain, tsr_pool_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    if (!p || p->n_threads == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    /* about four chunks per thread for balance, never below the grain */
    int64_t chunk = n / ((int64_t)p->n_threads * 4);
    if (chunk < grain)
        chunk = grain;
    run_split(p, n, chunk, fn, ctx);
}

void tsr_pool_parallel_for_chunk(tsr_pool *p, int64_t n, int64_t chunk, tsr_pool_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (chunk < 1)
        chunk = 1;
    if (!p || p->n_threads == 1 || n <= chunk) {
        fn(ctx, 0, n, 0);
        return;
    }
    run_split(p, n, chunk, fn, ctx);
}

static void run_split(tsr_pool *p, int64_t n, int64_t chunk, tsr_pool_fn fn, void *ctx)
{
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk;
    atomic_store(&p->next, 0);
    p->active = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
