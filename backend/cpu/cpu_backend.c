/*
 * backend/cpu/cpu_backend.c - the CPU backend's context, memory, scratch and
 * op table.  The ops themselves live in backend/cpu/ops_*.c, one file per
 * family.
 *
 * Threads: GEMMs run on OpenBLAS's own threads (set to the backend's thread
 * count at creation); everything else is split over the context's tsr_pool.
 * Where many small GEMMs run inside pool tasks (attention), OpenBLAS is
 * switched to one thread for the duration so the two never oversubscribe.
 *
 * Scratch only grows (see cpu_internal.h), so steady-state ops do not call
 * malloc.
 */
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "core/error.h"
#include "core/pool.h"

static void buf_free(cpu_buf *b)
{
    free(b->ptr);
    b->ptr = NULL;
    b->cap = 0;
}

static void *buf_grow(cpu_buf *b, size_t bytes)
{
    if (bytes <= b->cap && b->ptr)
        return b->ptr;
    if (bytes > SIZE_MAX - 4096)
        return NULL;
    /* grow by at least 1/4 to avoid creeping reallocations */
    size_t cap = bytes + bytes / 4;
    if (cap < bytes)
        cap = bytes;
    cap = (cap + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, cap);
    if (!p)
        return NULL;
    free(b->ptr);
    b->ptr = p;
    b->cap = cap;
    return p;
}

void *tsr_cpu_scratch_shared(cpu_ctx *c, size_t bytes)
{
    void *p = buf_grow(&c->shared, bytes);
    if (!p)
        tsr_errorf(TSR_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes of scratch", bytes);
    return p;
}

void *tsr_cpu_scratch_worker(cpu_ctx *c, int worker, size_t bytes)
{
    if (worker < 0 || worker >= c->n_threads)
        return NULL;
    return buf_grow(&c->worker[worker], bytes);
}

int tsr_cpu_scratch_workers_reserve(cpu_ctx *c, size_t bytes)
{
    for (int i = 0; i < c->n_threads; i++)
        if (!buf_grow(&c->worker[i], bytes))
            return tsr_errorf(TSR_ERR_NOMEM,
                              "cpu backend: cannot allocate %zu bytes of scratch per thread", bytes);
    return TSR_OK;
}

void tsr_cpu_blas_threads(int n)
{
    if (openblas_get_num_threads() != n)
        openblas_set_num_threads(n);
}

static void cpu_destroy(tsr_backend *b)
{
    cpu_ctx *c = b->ctx;
    if (c) {
        tsr_pool_destroy(c->pool);
        buf_free(&c->shared);
        if (c->worker)
            for (int i = 0; i < c->n_threads; i++)
                buf_free(&c->worker[i]);
        free(c->worker);
        free(c);
    }
    free(b);
}

static void *cpu_alloc(tsr_backend *b, size_t bytes)
{
    (void)b;
    if (bytes > SIZE_MAX - 64)
        return NULL;
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static void cpu_free(tsr_backend *b, void *p)
{
    (void)b;
    free(p);
}

static int cpu_copy(tsr_backend *b, void *dst, const void *src, size_t bytes)
{
    (void)b;
    memmove(dst, src, bytes);
    return TSR_OK;
}

static bool cpu_supports_op(tsr_backend *b, tsr_op op, tsr_dtype dtype)
{
    (void)b;
    return (unsigned)op < (unsigned)TSR_OP_COUNT && dtype == TSR_F32;
}

static const tsr_backend_iface cpu_iface = {
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .supports_op = cpu_supports_op,
    .conv2d = tsr_cpu_conv2d,
    .linear = tsr_cpu_linear,
    .matmul = tsr_cpu_matmul,
    .group_norm = tsr_cpu_group_norm,
    .layer_norm = tsr_cpu_layer_norm,
    .softmax = tsr_cpu_softmax,
    .attention = tsr_cpu_attention,
    .unary = tsr_cpu_unary,
    .geglu = tsr_cpu_geglu,
    .binary = tsr_cpu_binary,
    .scale = tsr_cpu_scale,
    .concat = tsr_cpu_concat,
    .upsample_nearest = tsr_cpu_upsample_nearest,
    .timestep_embedding = tsr_cpu_timestep_embedding,
    .embedding = tsr_cpu_embedding,
};

int tsr_backend_cpu_create(int n_threads, tsr_backend **out)
{
    *out = NULL;
    tsr_backend *b = calloc(1, sizeof *b);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate the CPU backend");
    }
    int rc = tsr_pool_create(n_threads, &c->pool);
    if (rc < 0) {
        free(b);
        free(c);
        return rc;
    }
    c->n_threads = tsr_pool_size(c->pool);
    c->worker = calloc((size_t)c->n_threads, sizeof *c->worker);
    if (!c->worker) {
        tsr_pool_destroy(c->pool);
        free(b);
        free(c);
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate the CPU backend");
    }
    tsr_cpu_blas_threads(c->n_threads);
    b->iface = &cpu_iface;
    b->ctx = c;
    b->kind = TSR_BACKEND_CPU;
    b->host_visible = true;
    snprintf(b->name, sizeof b->name, "cpu (%d threads)", c->n_threads);
    *out = b;
    return TSR_OK;
}
