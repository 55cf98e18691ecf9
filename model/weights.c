/*
 * model/weights.c - materialising one component's weights on a backend.
 *
 * Why this shape: one arena per component (sizes summed first, so it is one
 * backend allocation, as llm.c does), every tensor converted to the dtype
 * the backend asks for (tsr_backend_weight_dtype: f32 on the CPU, f16 on a
 * GPU; a tensor already in that dtype is copied, never widened and
 * narrowed) and 4-D conv weights permuted once from PyTorch's OIHW to the
 * OHWI layout the conv op takes, so no op ever re-layouts weights at run
 * time.  Source bytes are copied into an aligned
 * scratch buffer before conversion because safetensors does not promise
 * alignment.  For a backend whose memory is not host-visible, each tensor is
 * staged in host scratch and uploaded.  Names are copied into one block the
 * weights own, so weights outlive the tsr_model they came from; lookup is a
 * binary search over the (already sorted) names.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model_internal.h"
#include "core/pool.h"

struct tsr_weights {
    tsr_backend *backend; /* borrowed */
    tsr_arena arena;
    size_t n;
    char **names;        /* point into name_block */
    char *name_block;    /* owned */
    tsr_tensor *tensors; /* owned array; data in the arena */
    char label[32];      /* component name, for errors */
};

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Element count of an entry, checked (as f32, the widest dtype). */
static int entry_numel(const tsr_model *m, const char *name, const tsr_st_entry *e, size_t *out)
{
    if (e->ndim > TSR_MAX_DIMS)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dims (at most %d)",
                          m->path, name, e->ndim, TSR_MAX_DIMS);
    tsr_dtype dt;
    if (!tsr_st_dtype_to_tsr(e->dtype, &dt))
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; weights must be F32, "
                          "F16 or BF16", m->path, name, tsr_st_dtype_name(e->dtype));
    uint64_t n = tsr_st_numel(e);
    uint64_t bytes;
    if (!tsr_mul_overflow_u64(n, 4, &bytes) || bytes > SIZE_MAX / 2)
        return tsr_errorf(TSR_ERR_RANGE, "%s: tensor '%s' is too large", m->path, name);
    *out = (size_t)n;
    return TSR_OK;
}

/* Conversion and permutation run on a pool created for the load: widening
 * gigabytes of f16 on one core was most of an SDXL load. */
typedef struct convert_job {
    void *dst;
    const void *src;
    tsr_dtype from, to;
    int64_t o, i, h, w; /* permute OIHW -> OHWI (elements of `to`) */
} convert_job;

#define CONVERT_GRAIN 65536

static void convert_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const convert_job *j = ctx;
    const size_t fs = tsr_dtype_size(j->from), ts = tsr_dtype_size(j->to);
    const void *src = (const char *)j->src + (size_t)begin * fs;
    void *dst = (char *)j->dst + (size_t)begin * ts;
    const size_t n = (size_t)(end - begin);
    if (j->to == j->from) {
        memcpy(dst, src, n * ts);
    } else if (j->to == TSR_F32) {
        tsr_convert_to_f32(dst, src, j->from, n);
    } else if (j->from == TSR_F32) {
        tsr_convert_from_f32(dst, j->to, src, n);
    } else { /* between 16-bit dtypes, through f32 in pieces */
        float tmp[1024];
        for (size_t k = 0; k < n; k += 1024) {
            const size_t m = n - k < 1024 ? n - k : 1024;
            tsr_convert_to_f32(tmp, (const char *)src + k * fs, j->from, m);
            tsr_convert_from_f32((char *)dst + k * ts, j->to, tmp, m);
        }
    }
}

/* rows of the output: one output channel each; elements of 2 or 4 bytes */
#define PERMUTE(T)                                                                   \
    do {                                                                             \
        const T *src = j->src;                                                       \
        T *dst = j->dst;                                                             \
        for (int64_t a = begin; a < end; a++)                                        \
            for (int64_t c = 0; c < i; c++)                                          \
                for (int64_t y = 0; y < h; y++)                                      \
                    for (int64_t x = 0; x < w; x++)                                  \
                        dst[((a * h + y) * w + x) * i + c] =                         \
                            src[((a * i + c) * h + y) * w + x];                      \
    } while (0)

static void permute_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const convert_job *j = ctx;
    const int64_t i = j->i, h = j->h, w = j->w;
    if (tsr_dtype_size(j->to) == 4)
        PERMUTE(uint32_t);
    else
        PERMUTE(uint16_t);
}
#undef PERMUTE

int tsr_weights_load(const tsr_model *m, tsr_component c, tsr_backend *backend,
                     tsr_weights **out)
{
    *out = NULL;
    if (!tsr_model_has(m, c))
        return tsr_errorf(TSR_ERR_NOT_FOUND, "%s: the model has no %s", m->path,
                          tsr_component_name(c));
    const tsr_model_component *mc = &m->comp[c];
    int rc = TSR_OK;
    void *raw = NULL, *conv_buf = NULL, *perm = NULL;
    const tsr_dtype want = tsr_backend_weight_dtype(backend);
    const size_t ws = tsr_dtype_size(want);
    tsr_pool *pool = NULL;
    tsr_weights *w = calloc(1, sizeof *w);
    if (!w)
        return tsr_errorf(TSR_ERR_NOMEM, "weights: out of memory");
    w->backend = backend;
    snprintf(w->label, sizeof w->label, "%s", tsr_component_name(c));

    /* pass 1: sizes */
    size_t total = 0, names_len = 0, max_numel = 1, max_raw = 1;
    for (size_t i = 0; i < mc->n; i++) {
        size_t numel = 0;
        TSR_CHECK_GOTO(rc, entry_numel(m, mc->tensors[i].name, &mc->tensors[i].entry, &numel),
                       fail);
        size_t b = align64(numel * ws);
        if (total > SIZE_MAX - b) {
            rc = tsr_errorf(TSR_ERR_RANGE, "%s: %s weights exceed the address space", m->path,
                            w->label);
            goto fail;
        }
        total += b;
        names_len += strlen(mc->tensors[i].name) + 1;
        if (numel > max_numel)
            max_numel = numel;
        if (mc->tensors[i].entry.nbytes > max_raw)
            max_raw = (size_t)mc->tensors[i].entry.nbytes;
    }
    w->n = mc->n;
    w->names = calloc(mc->n ? mc->n : 1, sizeof *w->names);
    w->tensors = calloc(mc->n ? mc->n : 1, sizeof *w->tensors);
    w->name_block = malloc(names_len ? names_len : 1);
    raw = aligned_alloc(64, align64(max_raw));
    conv_buf = aligned_alloc(64, align64(max_numel * ws));
    perm = aligned_alloc(64, align64(max_numel * ws));
    if (!w->names || !w->tensors || !w->name_block || !raw || !conv_buf || !perm) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "weights: out of memory staging %s", w->label);
        goto fail;
    }
    TSR_CHECK_GOTO(rc, tsr_arena_init(&w->arena, backend, total), fail);
    TSR_CHECK_GOTO(rc, tsr_pool_create(0, &pool), fail);

    /* pass 2: convert (unless the file has the dtype already), permute, place */
    char *np = w->name_block;
    bool host = !backend || backend->host_visible;
    for (size_t i = 0; i < mc->n; i++) {
        const tsr_tensor_ref *r = &mc->tensors[i];
        const tsr_st_entry *e = &r->entry;
        size_t numel = (size_t)tsr_st_numel(e);
        tsr_dtype dt = TSR_F32;
        tsr_st_dtype_to_tsr(e->dtype, &dt);
        void *dst = tsr_arena_alloc(&w->arena, numel * ws);
        if (!dst) {
            rc = tsr_errorf(TSR_ERR_INTERNAL, "weights: arena sizing is wrong for %s", w->label);
            goto fail;
        }
        const void *bytes = tsr_st_data(r->file, e);
        if (!tsr_st_data_aligned(r->file, e)) { /* safetensors promises no alignment */
            memcpy(raw, bytes, (size_t)e->nbytes);
            bytes = raw;
        }
        int64_t ne[TSR_MAX_DIMS] = {1, 1, 1, 1};
        int ndim = e->ndim ? e->ndim : 1;
        for (int d = 0; d < e->ndim; d++)
            ne[d] = e->shape[d];
        /* host memory takes the converted values directly; 4-D conv weights
         * go through scratch in the target dtype to be permuted OIHW -> OHWI.
         * A tensor already in the target dtype is not converted at all. */
        const bool conv = e->ndim == 4;
        const void *src = bytes;
        if (dt != want || (host && !conv)) {
            void *converted = host && !conv ? dst : conv_buf;
            convert_job cj = {converted, bytes, dt, want, 0, 0, 0, 0};
            tsr_pool_parallel_for(pool, (int64_t)numel, CONVERT_GRAIN, convert_range, &cj);
            src = converted;
        }
        if (conv) {
            void *permuted = host ? dst : perm;
            convert_job pj = {permuted, src, want, want, e->shape[0], e->shape[1], e->shape[2],
                              e->shape[3]};
            tsr_pool_parallel_for(pool, e->shape[0], 1, permute_range, &pj);
            ne[1] = e->shape[2];
            ne[2] = e->shape[3];
            ne[3] = e->shape[1];
            src = permuted;
        }
        if (!host)
            TSR_CHECK_GOTO(rc, tsr_backend_upload(backend, dst, src, numel * ws), fail);
        /* the mapped pages have served (on a device backend, once the
         * asynchronous upload has read them) */
        if (!host)
            TSR_CHECK_GOTO(rc, tsr_backend_sync(backend), fail);
        tsr_st_release(r->file, e);
        w->tensors[i] = tsr_tensor_make(want, ndim, ne, dst, backend);
        size_t len = strlen(r->name) + 1;
        memcpy(np, r->name, len);
        w->names[i] = np;
        np += len;
    }
    free(raw);
    free(conv_buf);
    free(perm);
    tsr_pool_destroy(pool);
    *out = w;
    return TSR_OK;
fail:
    free(raw);
    free(conv_buf);
    free(perm);
    tsr_pool_destroy(pool);
    tsr_weights_free(w);
    return rc;
}

void tsr_weights_free(tsr_weights *w)
{
    if (!w)
        return;
    tsr_arena_free(&w->arena);
    free(w->names);
    free(w->name_block);
    free(w->tensors);
    free(w);
}

int tsr_weights_get(const tsr_weights *w, const char *name, const tsr_tensor **out)
{
    size_t lo = 0, hi = w->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int k = strcmp(w->names[mid], name);
        if (k == 0) {
            *out = &w->tensors[mid];
            return TSR_OK;
        }
        if (k < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return tsr_errorf(TSR_ERR_NOT_FOUND, "%s weights: tensor '%s' is missing", w->label, name);
}

int tsr_weights_getf(const tsr_weights *w, const tsr_tensor **out, const char *fmt, ...)
{
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof name)
        return tsr_errorf(TSR_ERR_RANGE, "%s weights: tensor name too long", w->label);
    return tsr_weights_get(w, name, out);
}

size_t tsr_weights_bytes(const tsr_weights *w) { return w->arena.used; }

void tsr_weights_region(const tsr_weights *w, void **base, size_t *bytes)
{
    *base = w->arena.base;
    *bytes = w->arena.used;
}

int tsr_weights_clone_layout(const tsr_weights *src, tsr_backend *backend, tsr_weights **out)
{
    *out = NULL;
    const tsr_dtype want = tsr_backend_weight_dtype(backend);
    for (size_t i = 0; i < src->n; i++)
        if (src->tensors[i].dtype != want)
            return tsr_errorf(TSR_ERR_UNSUPPORTED,
                              "%s weights: %s stores %s weights, these are %s (tensor '%s')",
                              src->label, backend ? backend->name : "the host",
                              tsr_dtype_name(want), tsr_dtype_name(src->tensors[i].dtype),
                              src->names[i]);
    int rc;
    tsr_weights *w = calloc(1, sizeof *w);
    if (!w)
        return tsr_errorf(TSR_ERR_NOMEM, "weights: out of memory");
    w->backend = backend;
    memcpy(w->label, src->label, sizeof w->label);
    size_t names_len = 0;
    for (size_t i = 0; i < src->n; i++)
        names_len += strlen(src->names[i]) + 1;
    w->n = src->n;
    w->names = calloc(src->n ? src->n : 1, sizeof *w->names);
    w->tensors = calloc(src->n ? src->n : 1, sizeof *w->tensors);
    w->name_block = malloc(names_len ? names_len : 1);
    if (!w->names || !w->tensors || !w->name_block) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "weights: out of memory copying the %s table", w->label);
        goto fail;
    }
    TSR_CHECK_GOTO(rc, tsr_arena_init(&w->arena, backend, src->arena.used), fail);
    w->arena.used = src->arena.used;
    if (names_len)
        memcpy(w->name_block, src->name_block, names_len);
    const unsigned char *from = src->arena.base;
    for (size_t i = 0; i < src->n; i++) {
        w->names[i] = w->name_block + (src->names[i] - src->name_block);
        tsr_tensor t = src->tensors[i];
        const size_t off = (size_t)((const unsigned char *)t.data - from);
        const size_t nbytes = (size_t)tsr_tensor_numel(&t) * tsr_dtype_size(t.dtype);
        if ((const unsigned char *)t.data < from || off > src->arena.used ||
            nbytes > src->arena.used - off) {
            rc = tsr_errorf(TSR_ERR_INTERNAL, "%s weights: tensor '%s' lies outside its arena",
                            w->label, src->names[i]);
            goto fail;
        }
        t.data = w->arena.base + off;
        t.backend = backend;
        w->tensors[i] = t;
    }
    *out = w;
    return TSR_OK;
fail:
    tsr_weights_free(w);
    return rc;
}

size_t tsr_weights_count(const tsr_weights *w) { return w->n; }

int tsr_weights_at(const tsr_weights *w, size_t i, const char **name, const tsr_tensor **t)
{
    if (i >= w->n)
        return tsr_errorf(TSR_ERR_RANGE, "%s weights: index %zu out of range", w->label, i);
    if (name)
        *name = w->names[i];
    if (t)
        *t = &w->tensors[i];
    return TSR_OK;
}
