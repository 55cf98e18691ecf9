/*
 * backend/cuda/cuda_sticky.c - see cuda_sticky.h.
 *
 * Each device has a state (0 usable, 1 being recorded, 2 recorded) and a
 * text.  The first marker moves 0 -> 1 by compare-and-swap, writes the text
 * and publishes it with 1 -> 2 (release); a reader that sees 2 (acquire)
 * reads a text that is never written again.  A reader that catches the
 * short window at 1 gets a generic text: the device is unusable either way.
 * No lock, so the check before every op costs one atomic load.
 */
#include "backend/cuda/cuda_sticky.h"

#include <stdatomic.h>
#include <stdio.h>

static atomic_int state[TSR_CU_STICKY_DEVICES];
static char text[TSR_CU_STICKY_DEVICES][160];

static int slot(int device)
{
    return device < TSR_CU_STICKY_DEVICES ? device : TSR_CU_STICKY_DEVICES - 1;
}

static void mark_one(int d, const char *what)
{
    int expect = 0;
    if (!atomic_compare_exchange_strong(&state[d], &expect, 1))
        return; /* the first error wins */
    snprintf(text[d], sizeof text[d], "%s", what && *what ? what : "unknown CUDA error");
    atomic_store_explicit(&state[d], 2, memory_order_release);
}

void tsr_cu_sticky_mark(int device, const char *what)
{
    if (device >= 0) {
        mark_one(slot(device), what);
        return;
    }
    for (int d = 0; d < TSR_CU_STICKY_DEVICES; d++)
        mark_one(d, what);
}

const char *tsr_cu_sticky_error(int device)
{
    if (device < 0)
        return NULL;
    const int d = slot(device);
    switch (atomic_load_explicit(&state[d], memory_order_acquire)) {
    case 0: return NULL;
    case 1: return "a CUDA error (being recorded)";
    default: return text[d];
    }
}

void tsr_cu_sticky_reset_for_test(void)
{
    for (int d = 0; d < TSR_CU_STICKY_DEVICES; d++) {
        atomic_store(&state[d], 0);
        text[d][0] = '\0';
    }
}
