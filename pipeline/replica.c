/*
 * pipeline/replica.c - replicas whose weights come by broadcast
 * (docs/multi-gpu.md part 2): the checkpoint is read and converted once, on
 * rank 0, and every other rank gets its own copy of the bytes through one
 * collective per component.
 *
 * Why it is built this way.  A CPU replica can borrow its source's weights
 * (one read-only copy in host memory, pipeline/engine.c); a GPU cannot read
 * another GPU's memory as its own, so each device needs its own copy, and
 * reading and converting the checkpoint once per device costs N reads and
 * N conversions.  The weights of a component are one arena (model/weights.c)
 * and a replica opens the same model on the same kind of backend, so its
 * arenas have exactly the source's sizes: a replica allocates them, takes
 * the source's tensor table with every data pointer rebased onto its own
 * arena (tsr_weights_clone_layout), and then every rank calls one
 * broadcast per component, in one fixed order (text encoders, UNet, VAE),
 * root 0.  Nothing in that path is GPU-specific: on CPU devices the host
 * comm runs the same sequence (TESSERA_SHARE_WEIGHTS=broadcast in the
 * server; tests/pipeline/test_replica.c), so CI checks the rebased tables
 * and the collective sequence byte for byte.
 *
 * The ranks: one thread each (a collective waits for its peers), the group
 * made by one thread for all (NCCL's ncclCommInitAll shape).  Rank 0 is the
 * root: usually the source engine itself (tsr_replica_group_send, in
 * place); in a group of one it is a replica on the source's own device,
 * and its broadcast is a copy from the source's arenas into its own
 * (tsr_comm_broadcast_from): how one GPU exercises the NCCL path, since
 * NCCL refuses two ranks on one device.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/comm/comm.h"
#include "core/error.h"
#include "pipeline/pipeline_internal.h"

struct tsr_replica_group {
    tsr_comm_group *comm; /* owned */
    int n;
    bool cuda;                            /* nccl: ranks on CUDA devices */
    int device[TSR_COMM_MAX_RANKS];       /* CUDA device of each rank (cuda), else -1 */
};

/* "cuda" / "cuda:N" -> N (1), "cpu..." -> host (0), else -1. */
static int parse_device(const char *name, int *cuda_dev)
{
    *cuda_dev = -1;
    if (!name)
        return -1;
    if (strcmp(name, "cuda") == 0) {
        *cuda_dev = 0;
        return 1;
    }
    if (strncmp(name, "cuda:", 5) == 0) {
        char *end = NULL;
        long v = strtol(name + 5, &end, 10);
        if (end == name + 5 || *end || v < 0 || v > 1023)
            return -1;
        *cuda_dev = (int)v;
        return 1;
    }
    if (strncmp(name, "cpu", 3) == 0 && (name[3] == '\0' || name[3] == '-' || name[3] == ':'))
        return 0;
    return -1;
}

int tsr_replica_group_create(const char *const *devices, int n, double timeout_s,
                             tsr_replica_group **out)
{
    if (out)
        *out = NULL;
    if (!devices || !out)
        return tsr_errorf(TSR_ERR_INVALID, "replica group: NULL argument");
    if (n < 1 || n > TSR_COMM_MAX_RANKS)
        return tsr_errorf(TSR_ERR_INVALID, "replica group: %d devices (1..%d)", n,
                          TSR_COMM_MAX_RANKS);
    tsr_replica_group *g = calloc(1, sizeof *g);
    if (!g)
        return tsr_errorf(TSR_ERR_NOMEM, "replica group: out of memory");
    g->n = n;
    int kind0 = -1;
    for (int r = 0; r < n; r++) {
        int dev;
        const int kind = parse_device(devices[r], &dev);
        if (kind < 0) {
            free(g);
            return tsr_errorf(TSR_ERR_INVALID,
                              "replica group: device '%s' of rank %d is not cpu, cuda or cuda:N",
                              devices[r] ? devices[r] : "(null)", r);
        }
        if (r == 0)
            kind0 = kind;
        else if (kind != kind0) {
            free(g);
            return tsr_errorf(TSR_ERR_UNSUPPORTED,
                              "replica group: %s and %s are different kinds of device (weights "
                              "are broadcast between CUDA devices or between CPU devices)",
                              devices[0], devices[r]);
        }
        g->device[r] = dev;
    }
    g->cuda = kind0 == 1;
    tsr_comm_options o;
    tsr_comm_options_init(&o);
    o.kind = g->cuda ? TSR_COMM_NCCL : n == 1 ? TSR_COMM_SELF : TSR_COMM_HOST;
    o.size = n;
    o.devices = g->cuda ? g->device : NULL;
    if (timeout_s > 0)
        o.timeout_s = timeout_s;
    int rc = tsr_comm_group_create(&o, &g->comm);
    if (rc < 0) {
        free(g);
        return rc;
    }
    *out = g;
    return TSR_OK;
}

void tsr_replica_group_destroy(tsr_replica_group *g)
{
    if (!g)
        return;
    tsr_comm_group_destroy(g->comm);
    free(g);
}

int tsr_replica_group_size(const tsr_replica_group *g) { return g ? g->n : 0; }

const char *tsr_replica_group_kind(const tsr_replica_group *g)
{
    return g ? tsr_comm_kind_name(tsr_comm_kind_of(tsr_comm_group_rank(g->comm, 0))) : "";
}

void tsr_replica_group_abort(tsr_replica_group *g, int rank, const char *why)
{
    if (g)
        tsr_comm_abort(tsr_comm_group_rank(g->comm, rank), why);
}

/* ---------------------------------------------------- the collective sequence */

/* The components in broadcast order: text encoders, UNet, VAE.  n <= 4. */
static int weights_in_order(const tsr_engine *e, const tsr_weights *w[4])
{
    int n = 0;
    for (int k = 0; k < 2; k++) {
        const tsr_weights *t = tsr_text_cond_weights(e->cond, k);
        if (t)
            w[n++] = t;
    }
    w[n++] = e->unet_w;
    w[n++] = e->vae_w;
    return n;
}

/* Whether this rank's backend is the kind of memory its comm moves. */
static int check_rank_backend(const tsr_replica_group *g, tsr_comm *c, const tsr_backend *b,
                              const char *who)
{
    const int rank = tsr_comm_rank(c);
    if (g->cuda) {
        if (b->kind != TSR_BACKEND_CUDA || b->device != g->device[rank])
            return tsr_errorf(TSR_ERR_INVALID,
                              "replica group: rank %d is CUDA device %d, but %s is on %s", rank,
                              g->device[rank], who, b->name);
    } else if (!b->host_visible) {
        return tsr_errorf(TSR_ERR_INVALID,
                          "replica group: rank %d moves host memory, but %s is on %s", rank, who,
                          b->name);
    }
    return TSR_OK;
}

/* One broadcast per component, root 0: `from` the source's weights (read
 * on the root only), `to` this rank's (NULL: the source's own, in place). */
static int broadcast_all(tsr_comm *c, const tsr_weights *const *from, tsr_weights *const *to,
                         int n)
{
    const bool root = tsr_comm_rank(c) == 0;
    for (int i = 0; i < n; i++) {
        void *src = NULL, *dst = NULL;
        size_t sb = 0, db = 0;
        tsr_weights_region(from[i], &src, &sb);
        dst = src;
        db = sb;
        if (to)
            tsr_weights_region(to[i], &dst, &db);
        if (db != sb)
            return tsr_errorf(TSR_ERR_INTERNAL, "replica: component %d has %zu bytes, its copy %zu",
                              i, sb, db);
        TSR_TRY(tsr_comm_broadcast_from(c, root ? src : NULL, dst, sb, TSR_COMM_BYTES, 0));
    }
    return TSR_OK;
}

int tsr_replica_group_send(tsr_replica_group *g, tsr_engine *src)
{
    if (!g || !src)
        return tsr_errorf(TSR_ERR_INVALID, "tsr_replica_group_send: NULL argument");
    tsr_comm *c = tsr_comm_group_rank(g->comm, 0);
    if (g->n < 2) {
        tsr_comm_abort(c, "a group of one has no one to send to");
        return tsr_errorf(TSR_ERR_INVALID,
                          "tsr_replica_group_send: a group of one has no one to send to (its "
                          "rank 0 is a replica: tsr_engine_open_replica_bcast)");
    }
    int rc = check_rank_backend(g, c, src->backend, "the source engine");
    if (rc < 0) {
        tsr_comm_abort(c, tsr_last_error());
        return rc;
    }
    const tsr_weights *w[4];
    const int n = weights_in_order(src, w);
    return broadcast_all(c, w, NULL, n);
}

/* Called by engine_open (pipeline/engine.c) for a replica on rank `rank`,
 * once its backend and model are open: its own arenas with `src`'s
 * layout, filled by the broadcast.  On success e->unet_w and e->vae_w are
 * set (owned) and te[0..1] hold the text encoders' weights for
 * tsr_text_cond_open_given; on failure nothing is left allocated. */
int tsr_engine_receive_weights(tsr_engine *e, const tsr_engine *src, tsr_replica_group *g,
                               int rank, tsr_weights *te[2])
{
    te[0] = te[1] = NULL;
    tsr_comm *c = tsr_comm_group_rank(g->comm, rank);
    TSR_TRY(check_rank_backend(g, c, e->backend, "the replica"));
    if (rank == 0) /* the root reads the source's arenas: the same device */
        TSR_TRY(check_rank_backend(g, c, src->backend, "its source"));
    const tsr_weights *from[4];
    tsr_weights *to[4] = {NULL, NULL, NULL, NULL};
    const int n = weights_in_order(src, from);
    int rc = TSR_OK;
    for (int i = 0; i < n; i++)
        TSR_CHECK_GOTO(rc, tsr_weights_clone_layout(from[i], e->backend, &to[i]), fail);
    TSR_CHECK_GOTO(rc, broadcast_all(c, from, to, n), fail);
    for (int i = 0; i < n - 2; i++)
        te[i] = to[i];
    e->unet_w = to[n - 2];
    e->vae_w = to[n - 1];
    return TSR_OK;
fail:
    for (int i = 0; i < n; i++)
        tsr_weights_free(to[i]);
    return rc;
}

/* -------------------------------------------- tsr_engine_open_replica on GPUs */

typedef struct send_arg {
    tsr_replica_group *g;
    tsr_engine *src;
    int rc;
    char error[512];
} send_arg;

static void *send_main(void *p)
{
    send_arg *a = p;
    a->rc = tsr_replica_group_send(a->g, a->src);
    if (a->rc < 0)
        snprintf(a->error, sizeof a->error, "%s", tsr_last_error());
    return NULL;
}

int tsr_engine_replica_by_broadcast(tsr_engine *src, const tsr_engine_options *o,
                                    tsr_engine **out)
{
    *out = NULL;
    const char *want = o->device && *o->device ? o->device : "auto";
    int dev = -1;
    if (src->backend->kind != TSR_BACKEND_CUDA || parse_device(want, &dev) != 1)
        return tsr_errorf(TSR_ERR_UNSUPPORTED,
                          "a replica on %s cannot get the weights of an engine on %s (weights "
                          "are borrowed between host-memory engines of one weight dtype and "
                          "broadcast between CUDA devices named cuda:N)",
                          want, src->backend->name);
    char src_name[16];
    snprintf(src_name, sizeof src_name, "cuda:%d", src->backend->device);
    tsr_replica_group *g = NULL;
    if (dev == src->backend->device) {
        /* one GPU: the replica is rank 0 of a group of one, its broadcast a
         * copy from the source's arenas through NCCL */
        const char *devs[1] = {want};
        TSR_TRY(tsr_replica_group_create(devs, 1, 0, &g));
        int rc = tsr_engine_open_replica_bcast(g, 0, src, o, out);
        tsr_replica_group_destroy(g);
        return rc;
    }
    const char *devs[2] = {src_name, want};
    TSR_TRY(tsr_replica_group_create(devs, 2, 0, &g));
    send_arg a = {g, src, TSR_OK, ""};
    pthread_t t;
    if (pthread_create(&t, NULL, send_main, &a) != 0) {
        tsr_replica_group_destroy(g);
        return tsr_errorf(TSR_ERR_NOMEM, "replica: cannot start the sending thread");
    }
    int rc = tsr_engine_open_replica_bcast(g, 1, src, o, out);
    pthread_join(t, NULL);
    tsr_replica_group_destroy(g);
    if (rc == TSR_OK && a.rc < 0) { /* cannot happen: the ranks finish the op together */
        tsr_engine_close(*out);
        *out = NULL;
        return tsr_errorf(a.rc, "replica: the source's broadcast failed: %s", a.error);
    }
    return rc;
}
