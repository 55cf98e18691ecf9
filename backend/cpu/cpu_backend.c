/*
 * backend/cpu/cpu_backend.c - the CPU backend's context, memory, scratch and
 * op table.  The ops themselves live in backend/cpu/ops_*.c, one file per
 * family.
 *
 * Threads: every op, GEMMs included (gemm.h), is split over the context's
 * tsr_pool.  The backend's name says which GEMM micro-kernel cpu_isa.h chose
 * ("cpu (2 threads, avx2 6x16)"), so `tessera bench` and the logs show it.
 *
 * supports_op: the f32 backend runs every op with f32 activations and
 * parameters (and converts between any float dtypes); the storage variants
 * (cpu_wide.c) run every op with any float dtypes.
 *
 * Scratch only grows (see cpu_internal.h), so steady-state ops do not call
 * malloc.
 */
#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/gemm.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu_internal.h"
#include "core/error.h"
#include "core/pool.h"

/* The RAM this process can ever have: physical memory, or the cgroup's
 * limit (v2 memory.max, v1 memory.limit_in_bytes) when that is lower, as in
 * a container.  0 when unknown. */
static size_t host_memory_bytes(void)
{
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t total = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    static const char *const limits[] = {"/sys/fs/cgroup/memory.max",
                                         "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        FILE *f = fopen(limits[i], "r");
        unsigned long long v = 0;
        const int got = f ? fscanf(f, "%llu", &v) : 0; /* "max": no number, no limit */
        if (f)
            fclose(f);
        if (got == 1 && v > 0 && (total == 0 || v < total))
            total = (size_t)v;
    }
    return total;
}

static void buf_free(cpu_buf *b)
{
    free(b->ptr);
    b->ptr = NULL;
    b->cap = 0;
}

void *tsr_cpu_buf_grow(cpu_buf *b, size_t bytes)
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
    void *p = tsr_cpu_buf_grow(&c->shared, bytes);
    if (!p)
        tsr_errorf(TSR_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes of scratch", bytes);
    return p;
}

void *tsr_cpu_scratch_worker(cpu_ctx *c, int worker, size_t bytes)
{
    if (worker < 0 || worker >= c->n_threads)
        return NULL;
    return tsr_cpu_buf_grow(&c->worker[worker], bytes);
}

int tsr_cpu_scratch_workers_reserve(cpu_ctx *c, size_t bytes)
{
    for (int i = 0; i < c->n_threads; i++)
        if (!tsr_cpu_buf_grow(&c->worker[i], bytes))
            return tsr_errorf(TSR_ERR_NOMEM,
                              "cpu backend: cannot allocate %zu bytes of scratch per thread", bytes);
    return TSR_OK;
}

void tsr_cpu_destroy(tsr_backend *b)
{
    cpu_ctx *c = b->ctx;
    if (c) {
        tsr_pool_destroy(c->pool);
        buf_free(&c->shared);
        if (c->worker)
            for (int i = 0; i < c->n_threads; i++)
                buf_free(&c->worker[i]);
        for (int i = 0; i < CPU_WIDE_SLOTS; i++)
            buf_free(&c->wide[i]);
        buf_free(&c->pairs);
        free(c->worker);
        free(c);
    }
    free(b);
}

void *tsr_cpu_alloc(tsr_backend *b, size_t bytes)
{
    (void)b;
    if (bytes > SIZE_MAX - 64)
        return NULL;
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

void tsr_cpu_free(tsr_backend *b, void *p)
{
    (void)b;
    free(p);
}

int tsr_cpu_copy(tsr_backend *b, void *dst, const void *src, size_t bytes)
{
    (void)b;
    memmove(dst, src, bytes);
    return TSR_OK;
}

static bool is_float(tsr_dtype d) { return d == TSR_F32 || d == TSR_F16 || d == TSR_BF16; }

/* f32 everywhere, except the inputs that have their own dtype: the ids of
 * embedding (i32) and either side of convert (any float). */
static bool cpu_supports_op(tsr_backend *b, const tsr_op_desc *d, char *why, size_t n)
{
    (void)b;
    if (d->op == TSR_OP_CONVERT) {
        if (is_float(d->dtype) && (!d->src[0] || is_float(d->src[0]->dtype)))
            return true;
        snprintf(why, n, "convert takes float dtypes only");
        return false;
    }
    if (d->dtype != TSR_F32) {
        snprintf(why, n, "the CPU backend computes in f32, activations are %s (the cpu-f16 "
                         "test variant stores f16)", tsr_dtype_name(d->dtype));
        return false;
    }
    for (int i = 0; i < TSR_OP_MAX_SRC; i++) {
        const tsr_tensor *t = d->src[i];
        if (!t || t->dtype == TSR_F32 || (d->op == TSR_OP_EMBEDDING && i == 0))
            continue;
        snprintf(why, n, "input %d is %s; the CPU backend computes in f32", i,
                 tsr_dtype_name(t->dtype));
        return false;
    }
    return true;
}

const tsr_backend_iface tsr_cpu_iface = {
    .destroy = tsr_cpu_destroy,
    .alloc = tsr_cpu_alloc,
    .free = tsr_cpu_free,
    .upload = tsr_cpu_copy,
    .download = tsr_cpu_copy,
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
    .convert = tsr_cpu_convert,
};

int tsr_backend_cpu_create(int n_threads, tsr_backend **out)
{
    tsr_cpu_options o = {.n_threads = n_threads, .storage = TSR_F32};
    return tsr_backend_cpu_create_ex(&o, out);
}

int tsr_backend_cpu_create_ex(const tsr_cpu_options *o, tsr_backend **out)
{
    *out = NULL;
    if (!is_float(o->storage))
        return tsr_errorf(TSR_ERR_INVALID, "cpu backend: storage dtype %s is not a float dtype",
                          tsr_dtype_name(o->storage));
    if (o->bf16gemm && (o->storage != TSR_F32 || !tsr_cpu_has_bf16_dot()))
        return tsr_errorf(TSR_ERR_UNSUPPORTED,
                          "cpu-bf16gemm needs a CPU with AVX512_BF16 (this one runs %s%s); "
                          "use --device cpu",
                          tsr_cpu_isa_name(tsr_cpu_isa()),
                          tsr_cpu_isa() < tsr_cpu_isa_detected() ? ", capped by TESSERA_CPU_ISA"
                                                                 : " without it");
    const int n_threads = o->n_threads;
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
    c->storage = o->storage;
    c->bf16gemm = o->bf16gemm;
    b->iface = o->storage == TSR_F32 && !o->bf16gemm ? &tsr_cpu_iface : &tsr_cpu_wide_iface;
    b->ctx = c;
    b->kind = TSR_BACKEND_CPU;
    b->host_visible = true;
    b->weight_dtype = o->bf16gemm ? TSR_BF16 : o->storage;
    b->act_dtype = o->storage;
    b->caps = o->round_rows ? TSR_BACKEND_CAP_ROUND_ROWS : 0;
    b->n_threads = c->n_threads;
    b->memory_bytes = host_memory_bytes();
    if (o->bf16gemm)
        snprintf(b->name, sizeof b->name, "cpu-bf16gemm (%d threads, avx512bf16 6x32)",
                 c->n_threads);
    else if (o->storage == TSR_F32)
        snprintf(b->name, sizeof b->name, "cpu (%d threads, %s)", c->n_threads,
                 tsr_cpu_gemm_kernel());
    else
        snprintf(b->name, sizeof b->name, "cpu-%s (%d threads, %s)", tsr_dtype_name(o->storage),
                 c->n_threads, tsr_cpu_gemm_kernel());
    TSR_DEBUG("%s: gemm kernel %s, vector level %s (the CPU has %s)", b->name,
              tsr_cpu_gemm_kernel(), tsr_cpu_isa_name(tsr_cpu_isa()),
              tsr_cpu_isa_name(tsr_cpu_isa_detected()));
    *out = b;
    return TSR_OK;
}
