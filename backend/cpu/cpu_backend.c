/*
 * backend/cpu/cpu_backend.c - the CPU backend's context, memory and op
 * table.  (Ops are filled in by backend/cpu/ops_*.c.)
 */
#include "backend/cpu/cpu_backend.h"

#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "core/error.h"
#include "core/pool.h"

typedef struct cpu_ctx {
    tsr_pool *pool;
} cpu_ctx;

static void cpu_destroy(tsr_backend *b)
{
    cpu_ctx *c = b->ctx;
    tsr_pool_destroy(c->pool);
    free(c);
    free(b);
}

static void *cpu_alloc(tsr_backend *b, size_t bytes)
{
    (void)b;
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

static const tsr_backend_iface cpu_iface = {
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
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
    b->iface = &cpu_iface;
    b->ctx = c;
    b->kind = TSR_BACKEND_CPU;
    b->host_visible = true;
    snprintf(b->name, sizeof b->name, "cpu (%d threads)", tsr_pool_size(c->pool));
    *out = b;
    return TSR_OK;
}
