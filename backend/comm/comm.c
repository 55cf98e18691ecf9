/*
 * backend/comm/comm.c - the generic half of comm.h: options, groups, the
 * argument checks every implementation shares, errors that name the op and
 * the rank, and the broken state.
 *
 * Why here and not in each implementation: the rules (what a valid call is,
 * how an error reads, that a broken group refuses every later op at once)
 * must be the same for self, host and nccl, so a caller can switch
 * implementations (CPU devices in CI, GPUs in production) and keep its
 * error handling.  The implementations (comm_self.c, comm_host.c,
 * comm_nccl.c) get checked arguments and report failures without the
 * prefix, which this file adds.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/comm/comm_impl.h"

static const char *const op_names[COMM_OP_COUNT] = {"all_gather", "broadcast", "all_reduce",
                                                    "barrier", "wait"};

const char *tsr_comm_op_name(comm_op op)
{
    return (unsigned)op < COMM_OP_COUNT ? op_names[op] : "?";
}

void tsr_comm_options_init(tsr_comm_options *o)
{
    memset(o, 0, sizeof *o);
    o->kind = TSR_COMM_HOST;
    o->size = 1;
    o->timeout_s = TSR_COMM_DEFAULT_TIMEOUT_S;
    const char *env = getenv("TSR_COMM_TIMEOUT_S");
    if (env && *env) {
        char *end = NULL;
        double t = strtod(env, &end);
        if (end && !*end && isfinite(t) && t > 0)
            o->timeout_s = t;
    }
}

int tsr_comm_kind_parse(const char *name, tsr_comm_kind *out)
{
    static const char *const names[] = {"self", "host", "nccl"};
    for (int k = 0; k < 3; k++) {
        if (name && strcmp(name, names[k]) == 0) {
            *out = (tsr_comm_kind)k;
            return TSR_OK;
        }
    }
    return tsr_errorf(TSR_ERR_INVALID, "unknown comm '%s': expected self, host or nccl",
                      name ? name : "(null)");
}

const char *tsr_comm_kind_name(tsr_comm_kind kind)
{
    switch (kind) {
    case TSR_COMM_SELF: return "self";
    case TSR_COMM_HOST: return "host";
    case TSR_COMM_NCCL: return "nccl";
    }
    return "?";
}

const char *tsr_comm_dtype_name(tsr_comm_dtype dtype)
{
    switch (dtype) {
    case TSR_COMM_BYTES: return "bytes";
    case TSR_COMM_F32: return "f32";
    case TSR_COMM_F16: return "f16";
    case TSR_COMM_BF16: return "bf16";
    case TSR_COMM_DTYPE_COUNT: break;
    }
    return "?";
}

size_t tsr_comm_dtype_size(tsr_comm_dtype dtype)
{
    switch (dtype) {
    case TSR_COMM_BYTES: return 1;
    case TSR_COMM_F32: return 4;
    case TSR_COMM_F16:
    case TSR_COMM_BF16: return 2;
    case TSR_COMM_DTYPE_COUNT: break;
    }
    return 0;
}

double tsr_comm_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

struct timespec tsr_comm_deadline(double seconds)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (seconds > 1e9)
        seconds = 1e9;
    const double whole = floor(seconds);
    t.tv_sec += (time_t)whole;
    t.tv_nsec += (long)((seconds - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

void tsr_comm_format_ranks(uint64_t mask, char *buf, size_t size)
{
    int n = 0;
    for (int r = 0; r < TSR_COMM_MAX_RANKS; r++)
        n += (int)((mask >> r) & 1u);
    size_t off = (size_t)snprintf(buf, size, "%s", n == 1 ? "rank" : "ranks");
    const char *sep = " ";
    for (int r = 0; r < TSR_COMM_MAX_RANKS && off < size; r++) {
        if (!((mask >> r) & 1u))
            continue;
        off += (size_t)snprintf(buf + off, size - off, "%s%d", sep, r);
        sep = ", ";
    }
}

void tsr_comm_break_locked(tsr_comm_group *g, uint64_t failed, const char *fmt, ...)
{
    if (!g->broken) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->reason, sizeof g->reason, fmt, ap);
        va_end(ap);
        g->failed = failed;
        g->broken = true;
    }
    pthread_cond_broadcast(&g->cv);
}

/* ---------------------------------------------------------------- groups */

int tsr_comm_group_create(const tsr_comm_options *o, tsr_comm_group **out)
{
    *out = NULL;
    if (!o)
        return tsr_errorf(TSR_ERR_INVALID, "comm: no options");
    if (o->kind != TSR_COMM_SELF && o->kind != TSR_COMM_HOST && o->kind != TSR_COMM_NCCL)
        return tsr_errorf(TSR_ERR_INVALID, "comm: unknown kind %d", (int)o->kind);
    if (o->size < 1 || o->size > TSR_COMM_MAX_RANKS)
        return tsr_errorf(TSR_ERR_INVALID, "comm %s: size %d is outside 1..%d",
                          tsr_comm_kind_name(o->kind), o->size, TSR_COMM_MAX_RANKS);
    if (o->kind == TSR_COMM_SELF && o->size != 1)
        return tsr_errorf(TSR_ERR_INVALID, "comm self: size %d (a self comm has one rank)",
                          o->size);
    if (!(o->timeout_s > 0) || !isfinite(o->timeout_s))
        return tsr_errorf(TSR_ERR_INVALID, "comm %s: timeout %g s (must be > 0)",
                          tsr_comm_kind_name(o->kind), o->timeout_s);
    int rc = TSR_OK;
    bool sync_made = false;
    tsr_comm_group *g = calloc(1, sizeof *g);
    if (!g)
        return tsr_errorf(TSR_ERR_NOMEM, "comm: out of memory for a group");
    g->kind = o->kind;
    g->size = o->size;
    g->timeout_s = o->timeout_s;
    g->ranks = calloc((size_t)o->size, sizeof *g->ranks);
    if (!g->ranks) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "comm: out of memory for %d ranks", o->size);
        goto fail;
    }
    for (int r = 0; r < o->size; r++) {
        g->ranks[r].group = g;
        g->ranks[r].rank = r;
        g->ranks[r].device = -1;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (pthread_mutex_init(&g->mu, NULL) != 0) {
        pthread_condattr_destroy(&attr);
        rc = tsr_errorf(TSR_ERR_NOMEM, "comm: cannot make a mutex");
        goto fail;
    }
    if (pthread_cond_init(&g->cv, &attr) != 0) {
        pthread_condattr_destroy(&attr);
        pthread_mutex_destroy(&g->mu);
        rc = tsr_errorf(TSR_ERR_NOMEM, "comm: cannot make a condition variable");
        goto fail;
    }
    pthread_condattr_destroy(&attr);
    sync_made = true;
    switch (o->kind) {
    case TSR_COMM_SELF: rc = tsr_comm_self_init(g, o); break;
    case TSR_COMM_HOST: rc = tsr_comm_host_init(g, o); break;
    case TSR_COMM_NCCL: rc = tsr_comm_nccl_init(g, o); break;
    }
    if (rc < 0)
        goto fail;
    *out = g;
    return TSR_OK;

fail:
    if (sync_made) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
    }
    free(g->ranks);
    free(g);
    return rc;
}

void tsr_comm_group_destroy(tsr_comm_group *g)
{
    if (!g)
        return;
    if (g->ops && g->ops->destroy)
        g->ops->destroy(g);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->ranks);
    free(g);
}

tsr_comm *tsr_comm_group_rank(tsr_comm_group *g, int rank)
{
    if (!g || rank < 0 || rank >= g->size)
        return NULL;
    return &g->ranks[rank];
}

int tsr_comm_rank(const tsr_comm *c) { return c ? c->rank : -1; }
int tsr_comm_size(const tsr_comm *c) { return c ? c->group->size : 0; }
tsr_comm_kind tsr_comm_kind_of(const tsr_comm *c) { return c->group->kind; }
int tsr_comm_device(const tsr_comm *c) { return c ? c->device : -1; }
double tsr_comm_timeout(const tsr_comm *c) { return c ? c->group->timeout_s : 0; }

/* ------------------------------------------------------- failure state */

void tsr_comm_abort(tsr_comm *c, const char *why)
{
    if (!c)
        return;
    tsr_comm_group *g = c->group;
    pthread_mutex_lock(&g->mu);
    tsr_comm_break_locked(g, (uint64_t)1 << c->rank, "rank %d left the group: %s", c->rank,
                          why && *why ? why : "aborted");
    pthread_mutex_unlock(&g->mu);
    if (g->ops->abort_rank)
        g->ops->abort_rank(c);
}

bool tsr_comm_broken(const tsr_comm *c, const char **reason)
{
    if (reason)
        *reason = NULL;
    if (!c)
        return false;
    tsr_comm_group *g = c->group;
    pthread_mutex_lock(&g->mu);
    const bool broken = g->broken;
    pthread_mutex_unlock(&g->mu);
    if (broken && reason)
        *reason = g->reason; /* never written again once broken */
    return broken;
}

uint64_t tsr_comm_failed_ranks(const tsr_comm *c)
{
    if (!c)
        return 0;
    tsr_comm_group *g = c->group;
    pthread_mutex_lock(&g->mu);
    const uint64_t f = g->broken ? g->failed : 0;
    pthread_mutex_unlock(&g->mu);
    return f;
}

/* ------------------------------------------------------------ the ops */

static bool overlap(const void *a, size_t na, const void *b, size_t nb)
{
    const char *pa = a, *pb = b;
    return na && nb && pa < pb + nb && pb < pa + na;
}

/* The checks every implementation shares; raises with the prefix. */
static int check(const tsr_comm *c, const comm_args *a, const char *op)
{
    const int size = c->group->size, rank = c->rank;
    if (a->op == COMM_OP_BARRIER || a->op == COMM_OP_WAIT)
        return TSR_OK;
    const size_t es = tsr_comm_dtype_size(a->dtype);
    if (es == 0)
        return tsr_errorf(TSR_ERR_INVALID, "%s (rank %d of %d): unknown dtype %d", op, rank, size,
                          (int)a->dtype);
    if (a->count > SIZE_MAX / es / (size_t)size)
        return tsr_errorf(TSR_ERR_RANGE, "%s (rank %d of %d): %zu elements of %s overflow", op,
                          rank, size, a->count, tsr_comm_dtype_name(a->dtype));
    const size_t bytes = a->count * es;
    switch (a->op) {
    case COMM_OP_ALL_GATHER: {
        if (a->count && (!a->send || !a->recv))
            return tsr_errorf(TSR_ERR_INVALID, "%s (rank %d of %d): NULL buffer", op, rank, size);
        const char *mine = (const char *)a->recv + (size_t)rank * bytes;
        if (a->send != mine && overlap(a->send, bytes, a->recv, bytes * (size_t)size))
            return tsr_errorf(TSR_ERR_INVALID,
                              "%s (rank %d of %d): send overlaps recv (in place means send == "
                              "recv + rank * count)",
                              op, rank, size);
        break;
    }
    case COMM_OP_BROADCAST:
        if (a->count && !a->recv)
            return tsr_errorf(TSR_ERR_INVALID, "%s (rank %d of %d): NULL buffer", op, rank, size);
        if (a->root < 0 || a->root >= size)
            return tsr_errorf(TSR_ERR_INVALID, "%s (rank %d of %d): root %d is not a rank", op,
                              rank, size, a->root);
        if (rank == a->root && a->count && !a->send)
            return tsr_errorf(TSR_ERR_INVALID, "%s (rank %d of %d): the root has no send buffer",
                              op, rank, size);
        if (rank == a->root && a->send != a->recv && overlap(a->send, bytes, a->recv, bytes))
            return tsr_errorf(TSR_ERR_INVALID,
                              "%s (rank %d of %d): send and recv overlap without being equal", op,
                              rank, size);
        break;
    case COMM_OP_ALL_REDUCE:
        if (a->dtype == TSR_COMM_BYTES)
            return tsr_errorf(TSR_ERR_INVALID,
                              "%s (rank %d of %d): bytes cannot be summed (f32, f16 or bf16)", op,
                              rank, size);
        if (a->count && (!a->send || !a->recv))
            return tsr_errorf(TSR_ERR_INVALID, "%s (rank %d of %d): NULL buffer", op, rank, size);
        if (a->send != a->recv && overlap(a->send, bytes, a->recv, bytes))
            return tsr_errorf(TSR_ERR_INVALID,
                              "%s (rank %d of %d): send and recv overlap without being equal", op,
                              rank, size);
        break;
    default: break;
    }
    return TSR_OK;
}

static int run(tsr_comm *c, const comm_args *a)
{
    const char *op = tsr_comm_op_name(a->op);
    if (!c)
        return tsr_errorf(TSR_ERR_INVALID, "%s: no comm", op);
    tsr_comm_group *g = c->group;
    TSR_TRY(check(c, a, op));
    pthread_mutex_lock(&g->mu);
    const bool broken = g->broken;
    pthread_mutex_unlock(&g->mu);
    /* a broken group refuses every op at once; wait still reaches the
     * implementation, which must stop what this rank has enqueued (nccl:
     * ncclCommAbort) before it reports the break */
    if (broken && a->op != COMM_OP_WAIT)
        return tsr_errorf(TSR_ERR_BACKEND, "%s (rank %d of %d): the group is broken: %s", op,
                          c->rank, g->size, g->reason);
    int rc = g->ops->run(c, a);
    if (rc < 0)
        return tsr_error_prefix(rc, "%s (rank %d of %d)", op, c->rank, g->size);
    return rc;
}

int tsr_comm_all_gather(tsr_comm *c, const void *send, void *recv, size_t count,
                        tsr_comm_dtype dtype)
{
    comm_args a = {COMM_OP_ALL_GATHER, send, recv, count, dtype, 0, NULL, false};
    return run(c, &a);
}

int tsr_comm_broadcast(tsr_comm *c, void *buf, size_t count, tsr_comm_dtype dtype, int root)
{
    comm_args a = {COMM_OP_BROADCAST, buf, buf, count, dtype, root, NULL, false};
    return run(c, &a);
}

int tsr_comm_broadcast_from(tsr_comm *c, const void *send, void *recv, size_t count,
                            tsr_comm_dtype dtype, int root)
{
    /* off the root send is never read: recv stands in, so no implementation
     * sees a NULL there */
    const bool is_root = c && c->rank == root;
    comm_args a = {COMM_OP_BROADCAST, is_root ? send : recv, recv, count, dtype, root, NULL, false};
    return run(c, &a);
}

int tsr_comm_all_reduce(tsr_comm *c, const void *send, void *recv, size_t count,
                        tsr_comm_dtype dtype)
{
    comm_args a = {COMM_OP_ALL_REDUCE, send, recv, count, dtype, 0, NULL, false};
    return run(c, &a);
}

int tsr_comm_barrier(tsr_comm *c)
{
    comm_args a = {COMM_OP_BARRIER, NULL, NULL, 0, TSR_COMM_BYTES, 0, NULL, false};
    return run(c, &a);
}

int tsr_comm_all_gather_async(tsr_comm *c, const void *send, void *recv, size_t count,
                              tsr_comm_dtype dtype, void *stream)
{
    comm_args a = {COMM_OP_ALL_GATHER, send, recv, count, dtype, 0, stream, true};
    return run(c, &a);
}

int tsr_comm_broadcast_async(tsr_comm *c, void *buf, size_t count, tsr_comm_dtype dtype, int root,
                             void *stream)
{
    comm_args a = {COMM_OP_BROADCAST, buf, buf, count, dtype, root, stream, true};
    return run(c, &a);
}

int tsr_comm_all_reduce_async(tsr_comm *c, const void *send, void *recv, size_t count,
                              tsr_comm_dtype dtype, void *stream)
{
    comm_args a = {COMM_OP_ALL_REDUCE, send, recv, count, dtype, 0, stream, true};
    return run(c, &a);
}

int tsr_comm_wait(tsr_comm *c, void *stream)
{
    comm_args a = {COMM_OP_WAIT, NULL, NULL, 0, TSR_COMM_BYTES, 0, stream, false};
    return run(c, &a);
}
