/*
 * backend/arena.h - bump allocators for weights and activations.
 *
 * Why: a denoising loop must not call malloc per op, and a model's weights
 * should be one allocation (as llm.c does).  An arena is one block from a
 * backend's allocator, carved with 64-byte alignment.  Marks and resets give
 * stack discipline for activations: a layer takes a mark, allocates its
 * temporaries, and resets to the mark when done.
 *
 * Planning: an arena created with tsr_arena_init_measure() hands out NULL
 * pointers and only records the peak, so a forward pass run once in that
 * mode gives the exact workspace size for a (batch, height, width) shape;
 * the real workspace is then allocated once with that size.
 *
 * Activations take the dtype their backend asks for (tsr_arena_act), so
 * model code never names f32; host data (f32) crosses into and out of them
 * through tsr_arena_upload_f32 / tsr_arena_download_f32, which convert on
 * the backend through a temporary f32 tensor at the top of the arena when
 * the activation dtype is not f32 (so the planning pass counts it).
 */
#ifndef TSR_CORE_ARENA_H
#define TSR_CORE_ARENA_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "core/tensor.h"

#define TSR_ARENA_ALIGN 64

typedef struct tsr_arena {
    unsigned char *base; /* owned (via backend allocator); NULL when measuring */
    size_t cap;
    size_t used;
    size_t peak;
    bool measuring;
    tsr_backend *backend; /* borrowed; NULL = host malloc */
} tsr_arena;

/* Allocate `cap` bytes from `backend` (NULL = host). */
int tsr_arena_init(tsr_arena *a, tsr_backend *backend, size_t cap);
/* A planning arena: no memory, unbounded, records the peak. */
void tsr_arena_init_measure(tsr_arena *a, tsr_backend *backend);
void tsr_arena_free(tsr_arena *a);

/* Returns NULL and raises TSR_ERR_NOMEM when full (or always NULL while
 * measuring: check tsr_arena_ok()). */
void *tsr_arena_alloc(tsr_arena *a, size_t bytes);
/* Allocate a contiguous tensor; returns a status. */
int tsr_arena_tensor(tsr_arena *a, tsr_tensor *t, tsr_dtype dtype, int ndim, const int64_t *ne);

/* An activation: a tensor in the arena's backend's activation dtype
 * (f32 for a host arena). */
int tsr_arena_act(tsr_arena *a, tsr_tensor *t, int ndim, const int64_t *ne);

/* Fill t (in the arena's backend, any float dtype) from host f32 values.
 * `rows` leading rows (outermost dim) come from `host`; the rest of t's
 * rows are copies of the last one (0 = all of t's rows from host).  Skipped
 * while measuring.  Host memory must stay valid until the backend syncs. */
int tsr_arena_upload_f32(tsr_arena *a, tsr_tensor *t, const float *host, int64_t rows);
/* Copy the first `rows` rows of t (0 = all) to host f32 values. */
int tsr_arena_download_f32(tsr_arena *a, const tsr_tensor *t, int64_t rows, float *host);

static inline size_t tsr_arena_mark(const tsr_arena *a) { return a->used; }
static inline void tsr_arena_reset(tsr_arena *a, size_t mark) { a->used = mark; }

/* Run an op unless the arena is only planning (measuring mode hands out
 * NULL data, so forward passes skip their ops and only record sizes).  The
 * model code (text/, unet/, vae/) wraps each backend call in this; returns
 * from the enclosing function on failure (TSR_TRY). */
#define TSR_ARENA_OP(arena, expr)  \
    do {                           \
        if (!(arena)->measuring)   \
            TSR_TRY(expr);         \
    } while (0)

#endif
