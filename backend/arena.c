/*
 * backend/arena.c - see arena.h.
 */
#include "backend/arena.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"

static size_t align_up(size_t n)
{
    return (n + TSR_ARENA_ALIGN - 1) & ~(size_t)(TSR_ARENA_ALIGN - 1);
}

int tsr_arena_init(tsr_arena *a, tsr_backend *backend, size_t cap)
{
    memset(a, 0, sizeof *a);
    a->backend = backend;
    cap = align_up(cap ? cap : TSR_ARENA_ALIGN);
    if (backend)
        a->base = tsr_backend_alloc(backend, cap);
    else
        a->base = aligned_alloc(TSR_ARENA_ALIGN, cap);
    if (!a->base)
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate an arena of %zu bytes", cap);
    a->cap = cap;
    return TSR_OK;
}

void tsr_arena_init_measure(tsr_arena *a, tsr_backend *backend)
{
    memset(a, 0, sizeof *a);
    a->backend = backend;
    a->measuring = true;
    a->cap = SIZE_MAX;
}

void tsr_arena_free(tsr_arena *a)
{
    if (a->base) {
        if (a->backend)
            tsr_backend_free(a->backend, a->base);
        else
            free(a->base);
    }
    memset(a, 0, sizeof *a);
}

void *tsr_arena_alloc(tsr_arena *a, size_t bytes)
{
    size_t need = align_up(bytes ? bytes : 1);
    if (need < bytes || a->used > a->cap - need) {
        tsr_errorf(TSR_ERR_NOMEM, "arena exhausted: %zu of %zu bytes used, %zu more requested",
                   a->used, a->cap, bytes);
        return NULL;
    }
    void *p = a->measuring ? NULL : a->base + a->used;
    a->used += need;
    if (a->used > a->peak)
        a->peak = a->used;
    return p;
}

int tsr_arena_tensor(tsr_arena *a, tsr_tensor *t, tsr_dtype dtype, int ndim, const int64_t *ne)
{
    if (ndim < 1 || ndim > TSR_MAX_DIMS)
        return tsr_errorf(TSR_ERR_INVALID, "tensor rank %d outside 1..%d", ndim, TSR_MAX_DIMS);
    uint64_t bytes = tsr_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        if (ne[i] < 0 || !tsr_mul_overflow_u64(bytes, (uint64_t)ne[i], &bytes))
            return tsr_errorf(TSR_ERR_RANGE, "tensor size overflows");
    }
    void *p = tsr_arena_alloc(a, (size_t)bytes);
    if (!p && !a->measuring)
        return TSR_ERR_NOMEM;
    *t = tsr_tensor_make(dtype, ndim, ne, p, a->backend);
    return TSR_OK;
}
