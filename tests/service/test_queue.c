/*
 * tests/service/test_queue.c - the in-process queue's pop rule
 * (service/queue/local.c): fair turns across keys, and the old rule kept
 * exactly within one key.
 *
 * Why a C unit test next to tests/service/test_fairness.py: the HTTP test
 * shows the effect on a running server (a flood holds another key's first
 * image back by one free row), but timing decides which rows are free when.
 * Here the queue is driven directly, pop by pop, so the order itself is
 * checked: whose turn it is, the shape preference and the passes within a
 * key, and, with one key (or keys off), the very order of the rule before
 * fair turns, against a copy of that rule kept here as the reference
 * (1,000 random pushes and pops).  With several keys, the queue (which
 * keeps a table of the waiting keys) is checked against the fair rule
 * written plainly here, by walking the whole list, over random pushes,
 * pops and cancels of four keys.
 */
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "queue.h"
#include "test.h"

static svc_params *shape(int w, int h)
{
    svc_params *p = calloc(1, sizeof *p);
    atomic_init(&p->refs, 1);
    p->width = w;
    p->height = h;
    p->n = 1;
    return p;
}

/* Push one entry: job id, owner, w x h. */
static void push(svc_queue *q, uint64_t job, const char *owner, int w, int h)
{
    svc_params *p = shape(w, h);
    svc_entry *e = svc_entry_new(job, 0, p);
    svc_params_unref(p);
    snprintf(e->owner, sizeof e->owner, "%s", owner);
    q->ops->push(q, &e, 1);
}

/* Pop (never blocking) and return the job id, 0 for none. */
static uint64_t pop(svc_queue *q, bool have_shape, int w, int h)
{
    svc_entry *e = q->ops->pop(q, have_shape, w, h, 0);
    if (!e)
        return 0;
    uint64_t id = e->job;
    svc_entry_free(e);
    return id;
}

static int test_turns(void)
{
    svc_queue *q = svc_queue_local_new(2);
    for (uint64_t i = 1; i <= 6; i++)
        push(q, i, "alice", 64, 64); /* the flood: 1..6 */
    push(q, 101, "bob", 64, 64);
    push(q, 201, "carol", 64, 64);
    push(q, 102, "bob", 64, 64);
    /* each free row to the next key in name order, oldest first within */
    const uint64_t want[] = {1, 101, 201, 2, 102, 3, 4, 5, 6};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        ASSERT_EQ(pop(q, k > 0, 64, 64), want[k]);
    ASSERT_EQ(pop(q, true, 64, 64), 0);
    /* the turn persists across an empty queue: alice was served last, so a
     * newcomer goes before her next image, whatever the names' order */
    push(q, 7, "alice", 64, 64);
    push(q, 8, "alice", 64, 64);
    ASSERT_EQ(pop(q, false, 0, 0), 7);
    push(q, 301, "aaron", 64, 64);
    ASSERT_EQ(pop(q, true, 64, 64), 301);
    ASSERT_EQ(pop(q, true, 64, 64), 8);
    q->ops->destroy(q);
    return 0;
}

static int test_shapes_within_a_key(void)
{
    svc_queue *q = svc_queue_local_new(2);
    push(q, 1, "alice", 64, 64);
    push(q, 2, "alice", 128, 128);
    push(q, 3, "alice", 128, 128);
    push(q, 101, "bob", 64, 64);
    push(q, 102, "bob", 128, 128);
    /* a 128x128 batch: alice's turn takes her first 128 (1 passed once);
     * bob's his 128; alice's her next 128 (1 passed twice); then 1 goes
     * first whatever its shape */
    ASSERT_EQ(pop(q, true, 128, 128), 2);
    ASSERT_EQ(pop(q, true, 128, 128), 102);
    ASSERT_EQ(pop(q, true, 128, 128), 3);
    ASSERT_EQ(pop(q, true, 128, 128), 101); /* bob's turn: only a 64 left */
    ASSERT_EQ(pop(q, true, 128, 128), 1);
    /* a cancelled job's entries leave; the turns go on without it */
    push(q, 4, "alice", 64, 64);
    push(q, 104, "bob", 64, 64);
    push(q, 105, "bob", 64, 64);
    ASSERT_EQ(q->ops->remove_job(q, 4), 1);
    ASSERT_EQ(q->ops->length(q), 2);
    ASSERT_EQ(pop(q, true, 64, 64), 104);
    ASSERT_EQ(pop(q, true, 64, 64), 105);
    q->ops->destroy(q);
    return 0;
}

/* The rule before fair turns, as the reference for one key. */
typedef struct ref_entry {
    uint64_t job;
    int w, h, passed;
} ref_entry;

static uint64_t ref_pop(ref_entry *v, int *n, int max_batch, bool have_shape, int w, int h)
{
    if (*n == 0)
        return 0;
    int pick = 0;
    if (have_shape) {
        pick = -1;
        for (int i = 0; i < *n && pick < 0; i++)
            if (v[i].passed >= max_batch || (v[i].w == w && v[i].h == h))
                pick = i;
        if (pick < 0)
            pick = 0;
        for (int i = 0; i < pick; i++)
            v[i].passed++;
    }
    uint64_t id = v[pick].job;
    memmove(&v[pick], &v[pick + 1], (size_t)(*n - pick - 1) * sizeof v[0]);
    (*n)--;
    return id;
}

static int one_key_matches(const char *owner)
{
    static ref_entry ref[1100];
    int n = 0;
    const int max_batch = 3;
    svc_queue *q = svc_queue_local_new(max_batch);
    unsigned seed = 12345;
    uint64_t next = 1;
    for (int step = 0; step < 1000; step++) {
        seed = seed * 1103515245u + 12345u;
        const int r = (int)((seed >> 16) % 100);
        const int side = 64 * (1 + (int)((seed >> 8) % 3));
        if (r < 55) {
            push(q, next, owner, side, side);
            ref[n++] = (ref_entry){next, side, side, 0};
            next++;
        } else {
            const bool have = r % 4 != 0;
            ASSERT_EQ(pop(q, have, side, side), ref_pop(ref, &n, max_batch, have, side, side));
        }
    }
    while (n > 0)
        ASSERT_EQ(pop(q, true, 64, 64), ref_pop(ref, &n, max_batch, true, 64, 64));
    ASSERT_EQ(pop(q, false, 0, 0), 0);
    q->ops->destroy(q);
    return 0;
}

/* The fair rule written plainly: the turn from a walk of the whole list,
 * then the old rule within that key. */
typedef struct fair_entry {
    uint64_t job;
    int key, w, h, passed;
} fair_entry;

static uint64_t fair_pop(fair_entry *v, int *n, int *turn, int max_batch, bool have_shape,
                         int w, int h)
{
    if (*n == 0)
        return 0;
    int first = -1, after = -1; /* keys are 0..3, named in that order */
    bool several = false;
    for (int i = 0; i < *n; i++) {
        several |= v[i].key != v[0].key;
        if (first < 0 || v[i].key < first)
            first = v[i].key;
        if (v[i].key > *turn && (after < 0 || v[i].key < after))
            after = v[i].key;
    }
    const int key = after >= 0 ? after : first;
    int pick = -1, oldest = -1;
    for (int i = 0; i < *n && pick < 0; i++) {
        if (several && v[i].key != key)
            continue;
        if (oldest < 0)
            oldest = i;
        if (!have_shape || v[i].passed >= max_batch || (v[i].w == w && v[i].h == h))
            pick = i;
    }
    if (pick < 0)
        pick = oldest;
    for (int i = 0; i < pick; i++)
        if (!several || v[i].key == key)
            v[i].passed++;
    *turn = v[pick].key;
    uint64_t id = v[pick].job;
    memmove(&v[pick], &v[pick + 1], (size_t)(*n - pick - 1) * sizeof v[0]);
    (*n)--;
    return id;
}

static int test_keys_match_the_plain_rule(void)
{
    static const char *const names[] = {"a", "b", "c", "d"};
    static fair_entry ref[2000];
    int n = 0, turn = -1;
    const int max_batch = 2;
    svc_queue *q = svc_queue_local_new(max_batch);
    unsigned seed = 777;
    uint64_t next = 1;
    for (int step = 0; step < 3000; step++) {
        seed = seed * 1103515245u + 12345u;
        const int r = (int)((seed >> 16) % 100);
        const int side = 64 * (1 + (int)((seed >> 8) % 2));
        /* key a floods; b, c, d come and go */
        const int key = r < 30 ? 0 : 1 + (int)((seed >> 4) % 3);
        if (r < 52) {
            push(q, next, names[key], side, side);
            ref[n++] = (fair_entry){next, key, side, side, 0};
            next++;
        } else if (r < 56 && n > 0) {
            /* a cancel: one job's entry leaves wherever it waits */
            const int i = (int)((seed >> 3) % (unsigned)n);
            ASSERT_EQ(q->ops->remove_job(q, ref[i].job), 1);
            memmove(&ref[i], &ref[i + 1], (size_t)(n - i - 1) * sizeof ref[0]);
            n--;
        } else {
            const bool have = r % 5 != 0;
            ASSERT_EQ(pop(q, have, side, side), fair_pop(ref, &n, &turn, max_batch, have, side,
                                                         side));
        }
        ASSERT_EQ(q->ops->length(q), n);
    }
    while (n > 0)
        ASSERT_EQ(pop(q, true, 64, 64), fair_pop(ref, &n, &turn, max_batch, true, 64, 64));
    q->ops->destroy(q);
    return 0;
}

static int test_one_key_is_the_old_rule(void)
{
    return one_key_matches("alice");
}

static int test_keys_off_is_the_old_rule(void)
{
    return one_key_matches("");
}

/* A failed device's images go back to the front, in their order, ahead of
 * every waiting entry of their key; the key's turn is unchanged
 * (docs/multi-gpu.md part 3). */
static int test_requeue_front(void)
{
    svc_queue *q = svc_queue_local_new(2);
    for (uint64_t i = 1; i <= 4; i++)
        push(q, i, "alice", 64, 64);
    svc_entry *taken[2];
    taken[0] = q->ops->pop(q, false, 0, 0, 0);
    taken[1] = q->ops->pop(q, true, 64, 64, 0);
    ASSERT_TRUE(taken[0] && taken[1]);
    ASSERT_EQ(taken[0]->job, 1);
    ASSERT_EQ(taken[1]->job, 2);
    push(q, 101, "bob", 64, 64);
    push(q, 5, "alice", 128, 128);
    ASSERT_EQ(q->ops->length(q), 4);
    q->ops->requeue(q, taken, 2); /* the device holding 1 and 2 failed */
    ASSERT_EQ(q->ops->length(q), 6);
    /* alice was served last: bob's turn, then alice's oldest: 1, 2 again */
    const uint64_t want[] = {101, 1, 2, 3, 4, 5};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        ASSERT_EQ(pop(q, k > 0, 64, 64), want[k]);
    ASSERT_EQ(pop(q, true, 64, 64), 0);
    ASSERT_EQ(q->ops->length(q), 0);
    q->ops->destroy(q);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"requeue_front", test_requeue_front},
    {"turns", test_turns},
    {"shapes_within_a_key", test_shapes_within_a_key},
    {"keys_match_the_plain_rule", test_keys_match_the_plain_rule},
    {"one_key_is_the_old_rule", test_one_key_is_the_old_rule},
    {"keys_off_is_the_old_rule", test_keys_off_is_the_old_rule},
};

TSR_TEST_TABLE_MAIN(tests)
