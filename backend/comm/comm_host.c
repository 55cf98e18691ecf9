/*
 * backend/comm/comm_host.c - collectives between threads of this process
 * through shared memory: the comm of CPU devices (`--device cpu,cpu`) and of
 * the tests.
 *
 * Why it is built this way.  The ranks share an address space, so no data
 * is staged: each rank posts its buffers' addresses, and once every rank has
 * posted (barrier A) each copies straight from its peers' buffers; a second
 * barrier (B) keeps every rank in the op until its peers are done reading
 * its buffers, so the caller may reuse them as soon as the call returns.
 * all_reduce splits the elements into one slice per rank: rank r sums slice
 * r over all ranks, in rank order 0..size-1, into a group scratch buffer
 * (barrier B), then every rank copies the whole scratch out.  Each element
 * is added once, in one fixed order, so every rank gets the same bits, run
 * after run: an image whose halves ran on two CPU devices can equal its
 * one-device run byte for byte (issue 57, part 4).
 *
 * Barrier A is where a dead peer shows: a rank waits there at most the
 * group's timeout; if a peer has not posted by then the group breaks, naming
 * the missing ranks, and every rank waiting or arriving later fails at once
 * (as it does when a peer calls tsr_comm_abort).  Barrier B has no timeout
 * and ignores the break: every rank past A is doing bounded copies, and a
 * rank that left B early could free a buffer a peer is still reading.
 * The last rank to reach A also checks that all ranks called the same op
 * with the same count, dtype and root (a mismatch breaks the group) and
 * grows the scratch, under the group's mutex, before anyone reads it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/comm/comm_impl.h"
#include "core/tensor.h"

typedef struct host_post {
    comm_op op;
    const void *send;
    void *recv;
    size_t count;
    tsr_comm_dtype dtype;
    int root;
} host_post;

/* Guarded by the group's mutex, except the posts and the scratch, which
 * are written before barrier A (posts) or between A and B (scratch slices)
 * and read after it. */
typedef struct host_group {
    uint64_t gen;  /* barriers completed */
    int arrived;   /* ranks at the current barrier */
    uint64_t here; /* which */
    int status;    /* the current op, as settled at barrier A */
    char error[256];
    host_post posts[TSR_COMM_MAX_RANKS];
    unsigned char *scratch; /* all_reduce results */
    size_t scratch_cap;
} host_group;

static void describe(const host_post *p, char *buf, size_t size)
{
    if (p->op == COMM_OP_BARRIER)
        snprintf(buf, size, "barrier");
    else if (p->op == COMM_OP_BROADCAST)
        snprintf(buf, size, "broadcast (%zu %s from root %d)", p->count,
                 tsr_comm_dtype_name(p->dtype), p->root);
    else
        snprintf(buf, size, "%s (%zu %s)", tsr_comm_op_name(p->op), p->count,
                 tsr_comm_dtype_name(p->dtype));
}

/* The last rank at barrier A, under the mutex: do the calls agree, and is
 * there room for the result?  Sets h->status. */
static void settle(tsr_comm_group *g, host_group *h)
{
    h->status = TSR_OK;
    const host_post *p0 = &h->posts[0];
    for (int r = 1; r < g->size; r++) {
        const host_post *p = &h->posts[r];
        if (p->op != p0->op ||
            (p->op != COMM_OP_BARRIER && (p->count != p0->count || p->dtype != p0->dtype ||
                                          (p->op == COMM_OP_BROADCAST && p->root != p0->root)))) {
            char a[96], b[96];
            describe(p0, a, sizeof a);
            describe(p, b, sizeof b);
            snprintf(h->error, sizeof h->error, "ranks disagree: rank 0 called %s, rank %d %s", a,
                     r, b);
            h->status = TSR_ERR_INVALID;
            tsr_comm_break_locked(g, 0, "%s", h->error);
            return;
        }
    }
    if (p0->op == COMM_OP_ALL_REDUCE) {
        const size_t bytes = p0->count * tsr_comm_dtype_size(p0->dtype);
        if (bytes > h->scratch_cap) {
            unsigned char *s = realloc(h->scratch, bytes);
            if (!s) {
                snprintf(h->error, sizeof h->error, "out of memory for a %zu-byte scratch", bytes);
                h->status = TSR_ERR_NOMEM;
                return;
            }
            h->scratch = s;
            h->scratch_cap = bytes;
        }
    }
}

/* Wait for every rank.  Barrier A (first = true): timed, refused when the
 * group is broken, settles the op; B: neither. */
static int arrive(tsr_comm_group *g, host_group *h, int rank, bool first)
{
    int rc = TSR_OK;
    pthread_mutex_lock(&g->mu);
    if (first && g->broken) {
        rc = tsr_errorf(TSR_ERR_BACKEND, "%s", g->reason);
        goto out;
    }
    const uint64_t gen = h->gen, me = (uint64_t)1 << rank;
    h->here |= me;
    if (++h->arrived == g->size) {
        if (first)
            settle(g, h);
        h->arrived = 0;
        h->here = 0;
        h->gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        const struct timespec deadline = tsr_comm_deadline(g->timeout_s);
        while (h->gen == gen && !(first && g->broken)) {
            if (!first) {
                pthread_cond_wait(&g->cv, &g->mu);
                continue;
            }
            const int e = pthread_cond_timedwait(&g->cv, &g->mu, &deadline);
            if (e == ETIMEDOUT && h->gen == gen && !g->broken) {
                const uint64_t all = g->size == 64 ? ~(uint64_t)0 : ((uint64_t)1 << g->size) - 1;
                const uint64_t missing = all & ~h->here;
                char who[160];
                tsr_comm_format_ranks(missing, who, sizeof who);
                tsr_comm_break_locked(g, missing, "peer %s did not arrive within %g s", who,
                                      g->timeout_s);
            }
        }
        if (h->gen == gen) { /* broken before everyone came: leave */
            h->here &= ~me;
            h->arrived--;
            rc = tsr_errorf(TSR_ERR_BACKEND, "%s", g->reason);
            goto out;
        }
    }
    if (first && h->status < 0)
        rc = tsr_errorf(h->status, "%s", h->error);
out:
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* out[i] = sum over ranks q (in order) of posts[q].send[i], i in [lo, hi). */
static void reduce_slice(const host_group *h, int size, tsr_comm_dtype dt, size_t lo, size_t hi)
{
    if (dt == TSR_COMM_F32) {
        float *out = (float *)h->scratch;
        for (size_t i = lo; i < hi; i++) {
            float s = ((const float *)h->posts[0].send)[i];
            for (int q = 1; q < size; q++)
                s += ((const float *)h->posts[q].send)[i];
            out[i] = s;
        }
        return;
    }
    uint16_t *out = (uint16_t *)h->scratch;
    const bool f16 = dt == TSR_COMM_F16;
    for (size_t i = lo; i < hi; i++) {
        float s = 0;
        for (int q = 0; q < size; q++) {
            const uint16_t v = ((const uint16_t *)h->posts[q].send)[i];
            const float f = f16 ? tsr_f16_to_f32(v) : tsr_bf16_to_f32(v);
            s = q == 0 ? f : s + f;
        }
        out[i] = f16 ? tsr_f32_to_f16(s) : tsr_f32_to_bf16(s);
    }
}

static int host_run(tsr_comm *c, const comm_args *a)
{
    tsr_comm_group *g = c->group;
    host_group *h = g->impl;
    const int rank = c->rank, size = g->size;
    if (a->op == COMM_OP_WAIT) { /* nothing is ever pending */
        pthread_mutex_lock(&g->mu);
        const bool broken = g->broken;
        pthread_mutex_unlock(&g->mu);
        return broken ? tsr_errorf(TSR_ERR_BACKEND, "the group is broken: %s", g->reason) : TSR_OK;
    }
    /* only this rank writes its post, and only while every peer is outside
     * the window between barriers A and B */
    pthread_mutex_lock(&g->mu);
    h->posts[rank] = (host_post){a->op, a->send, a->recv, a->count, a->dtype, a->root};
    pthread_mutex_unlock(&g->mu);
    TSR_TRY(arrive(g, h, rank, true));
    if (a->op == COMM_OP_BARRIER)
        return TSR_OK;

    const size_t bytes = a->count * tsr_comm_dtype_size(a->dtype);
    switch (a->op) {
    case COMM_OP_ALL_GATHER:
        for (int q = 0; q < size && bytes; q++) {
            unsigned char *dst = (unsigned char *)a->recv + (size_t)q * bytes;
            if (h->posts[q].send != dst)
                memcpy(dst, h->posts[q].send, bytes);
        }
        break;
    case COMM_OP_BROADCAST: /* from the root's send (its recv when in place) */
        if (bytes && a->recv != h->posts[a->root].send)
            memcpy(a->recv, h->posts[a->root].send, bytes);
        break;
    case COMM_OP_ALL_REDUCE:
        reduce_slice(h, size, a->dtype, a->count * (size_t)rank / (size_t)size,
                     a->count * (size_t)(rank + 1) / (size_t)size);
        break;
    default: break;
    }
    arrive(g, h, rank, false); /* B: peers are done with this rank's buffers */
    if (a->op == COMM_OP_ALL_REDUCE && bytes)
        memcpy(a->recv, h->scratch, bytes); /* the next op's A waits for this copy */
    return TSR_OK;
}

static void host_destroy(tsr_comm_group *g)
{
    host_group *h = g->impl;
    if (h)
        free(h->scratch);
    free(h);
    g->impl = NULL;
}

static const comm_impl_ops host_ops = {host_run, NULL, host_destroy};

int tsr_comm_host_init(tsr_comm_group *g, const tsr_comm_options *o)
{
    (void)o;
    host_group *h = calloc(1, sizeof *h);
    if (!h)
        return tsr_errorf(TSR_ERR_NOMEM, "comm host: out of memory");
    g->impl = h;
    g->ops = &host_ops;
    return TSR_OK;
}
