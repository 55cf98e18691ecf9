/*
 * service/weights.c - see weights.h.
 */
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

struct svc_weights {
    tsr_replica_group *group; /* owned */
    int n;
    atomic_int left;                /* ranks yet to call svc_weights_rank_open */
    _Atomic(tsr_engine *) source;  /* rank 0's engine, once open */
    atomic_int state;               /* 0 rank 0 opening, 1 open, -1 failed */
    char devices[160];              /* "cuda:0, cuda:1", for logs */
};

static svc_weights *group_new(char *const *names, const int *members, int n)
{
    const char *devs[64];
    svc_weights *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    size_t used = 0;
    for (int r = 0; r < n; r++) {
        devs[r] = names[members[r]];
        int k = snprintf(g->devices + used, sizeof g->devices - used, "%s%s", r ? ", " : "",
                         devs[r]);
        if (k > 0 && (size_t)k < sizeof g->devices - used)
            used += (size_t)k;
    }
    if (tsr_replica_group_create(devs, n, 0, &g->group) != TSR_OK) {
        SVC_WARN("weights: %s cannot share one read by broadcast (%s); each reads the model",
                 g->devices, tsr_last_error());
        free(g);
        return NULL;
    }
    g->n = n;
    atomic_init(&g->left, n);
    atomic_init(&g->source, NULL);
    atomic_init(&g->state, 0);
    SVC_INFO("weights: %s read once, on %s, then broadcast (%s)", g->devices, devs[0],
             tsr_replica_group_kind(g->group));
    return g;
}

static bool is_cpu(const char *name) { return strcmp(name, "cpu") == 0; }
static bool is_cuda(const char *name)
{
    return strcmp(name, "cuda") == 0 || strncmp(name, "cuda:", 5) == 0;
}

void svc_weights_plan_make(char *const *names, int n, const char *mode, svc_weights_plan *p)
{
    for (int i = 0; i < 64; i++) {
        p->source[i] = -1;
        p->group[i] = NULL;
        p->rank[i] = 0;
    }
    if (n > 64 || (mode && strcmp(mode, "0") == 0))
        return;
    const bool cpu_bcast = mode && strcmp(mode, "broadcast") == 0;
    for (int kind = 0; kind < 2; kind++) { /* 0: CPU devices, 1: CUDA devices */
        int members[64], m = 0;
        for (int i = 0; i < n; i++)
            if (kind ? is_cuda(names[i]) : is_cpu(names[i]))
                members[m++] = i;
        if (m < 2)
            continue;
        svc_weights *g = kind || cpu_bcast ? group_new(names, members, m) : NULL;
        for (int r = 0; r < m; r++) {
            const int i = members[r];
            if (g) {
                p->group[i] = g;
                p->rank[i] = r;
            } else if (!kind && r > 0) {
                p->source[i] = members[0]; /* CPU devices borrow */
            }
        }
    }
}

static void done(svc_weights *g)
{
    if (atomic_fetch_sub(&g->left, 1) == 1) {
        tsr_replica_group_destroy(g->group);
        free(g);
    }
}

int svc_weights_rank_open(svc_weights *g, int rank, tsr_engine *own,
                          const tsr_engine_options *eo, atomic_bool *abort, tsr_engine **engine)
{
    int rc = TSR_OK;
    if (rank == 0) {
        if (!own) {
            atomic_store(&g->state, -1);
            tsr_replica_group_abort(g->group, 0, "the first device could not open the model");
        } else {
            atomic_store(&g->source, own);
            atomic_store(&g->state, 1);
            const double t0 = svc_now_mono();
            rc = tsr_replica_group_send(g->group, own);
            if (rc == TSR_OK)
                SVC_INFO("weights: sent from %s to %d device%s in %.2f s", eo->device, g->n - 1,
                         g->n == 2 ? "" : "s", svc_now_mono() - t0);
            else
                SVC_WARN("weights: the broadcast from %s failed (%s); the others read the model",
                         eo->device, tsr_last_error());
        }
        done(g);
        return rc;
    }
    const struct timespec tick = {0, 5 * 1000 * 1000};
    while (atomic_load(&g->state) == 0 && !atomic_load(abort))
        nanosleep(&tick, NULL);
    tsr_engine *src = atomic_load(&g->state) == 1 ? atomic_load(&g->source) : NULL;
    if (src) {
        rc = tsr_engine_open_replica_bcast(g->group, rank, src, eo, engine);
        if (rc != TSR_OK)
            SVC_WARN("weights: %s cannot take the first device's weights by broadcast (%s); "
                     "reading the model",
                     eo->device, tsr_last_error());
    } else {
        rc = TSR_ERR_UNSUPPORTED;
        tsr_replica_group_abort(g->group, rank, "stopped before the first device opened");
    }
    done(g);
    return rc;
}

void svc_weights_leave(svc_weights *g, int rank)
{
    if (rank == 0)
        atomic_store(&g->state, -1);
    tsr_replica_group_abort(g->group, rank, "its worker did not start");
    done(g);
}
