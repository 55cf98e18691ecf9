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

int tsr_arena_act(tsr_arena *a, tsr_tensor *t, int ndim, const int64_t *ne)
{
    return tsr_arena_tensor(a, t, tsr_backend_act_dtype(a->backend), ndim, ne);
}

static int copy_in(tsr_backend *be, void *dst, const void *src, size_t bytes)
{
    if (be)
        return tsr_backend_upload(be, dst, src, bytes);
    memcpy(dst, src, bytes);
    return TSR_OK;
}

/* Upload `rows` rows (outermost dim) of host data into t, then repeat the
 * last of them in t's remaining rows. */
static int upload_rows(tsr_backend *be, tsr_tensor *t, const void *host, int64_t rows)
{
    const size_t rb = tsr_tensor_nbytes(t) / (size_t)t->ne[0];
    TSR_TRY(copy_in(be, t->data, host, rb * (size_t)rows));
    const char *last = (const char *)host + rb * (size_t)(rows - 1);
    for (int64_t r = rows; r < t->ne[0]; r++)
        TSR_TRY(copy_in(be, (char *)t->data + rb * (size_t)r, last, rb));
    return TSR_OK;
}

static int check_rows(const char *what, const tsr_tensor *t, int64_t *rows)
{
    if (*rows == 0)
        *rows = t->ne[0];
    if (*rows < 1 || *rows > t->ne[0])
        return tsr_errorf(TSR_ERR_INVALID, "%s: %lld rows of a tensor with %lld", what,
                          (long long)*rows, (long long)t->ne[0]);
    return TSR_OK;
}

int tsr_arena_upload_f32(tsr_arena *a, tsr_tensor *t, const float *host, int64_t rows)
{
    TSR_TRY(check_rows("upload", t, &rows));
    tsr_backend *be = a->backend;
    if (t->dtype == TSR_F32)
        return a->measuring ? TSR_OK : upload_rows(be, t, host, rows);
    if (!be)
        return tsr_errorf(TSR_ERR_INVALID, "upload: a %s tensor in host memory",
                          tsr_dtype_name(t->dtype));
    const size_t mark = tsr_arena_mark(a);
    tsr_tensor f;
    TSR_TRY(tsr_arena_tensor(a, &f, TSR_F32, t->ndim, t->ne));
    if (!a->measuring) {
        TSR_TRY(upload_rows(be, &f, host, rows));
        TSR_TRY(tsr_convert(be, &f, t));
    }
    tsr_arena_reset(a, mark);
    return TSR_OK;
}

int tsr_arena_download_f32(tsr_arena *a, const tsr_tensor *t, int64_t rows, float *host)
{
    TSR_TRY(check_rows("download", t, &rows));
    tsr_backend *be = a->backend;
    const tsr_tensor part = tsr_tensor_rows(t, 0, rows);
    if (t->dtype == TSR_F32 && !be) {
        if (!a->measuring)
            memcpy(host, part.data, tsr_tensor_nbytes(&part));
        return TSR_OK;
    }
    if (t->dtype == TSR_F32)
        return a->measuring ? TSR_OK
                            : tsr_backend_download(be, host, part.data, tsr_tensor_nbytes(&part));
    if (!be)
        return tsr_errorf(TSR_ERR_INVALID, "download: a %s tensor in host memory",
                          tsr_dtype_name(t->dtype));
    const size_t mark = tsr_arena_mark(a);
    tsr_tensor f;
    TSR_TRY(tsr_arena_tensor(a, &f, TSR_F32, part.ndim, part.ne));
    if (!a->measuring) {
        TSR_TRY(tsr_convert(be, &part, &f));
        TSR_TRY(tsr_backend_download(be, host, f.data, tsr_tensor_nbytes(&f)));
    }
    tsr_arena_reset(a, mark);
    return TSR_OK;
}
