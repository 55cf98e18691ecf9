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
