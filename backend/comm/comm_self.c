/*
 * backend/comm/comm_self.c - the one-rank comm.
 *
 * Why it exists: code written for N devices (gather the noise prediction,
 * broadcast the weights) runs unchanged on one, with no threads and no
 * library behind it.  Every collective of one rank is the identity: a copy
 * from send to recv, or nothing when the op is in place.  Buffers are host
 * memory (the CPU backend's); a single GPU in a multi-device code path uses
 * an nccl comm of size 1 instead, since copying device memory needs CUDA.
 */
#include <string.h>

#include "backend/comm/comm_impl.h"

static int self_run(tsr_comm *c, const comm_args *a)
{
    tsr_comm_group *g = c->group;
    const size_t bytes = a->count * tsr_comm_dtype_size(a->dtype);
    switch (a->op) {
    case COMM_OP_ALL_GATHER:
    case COMM_OP_ALL_REDUCE:
    case COMM_OP_BROADCAST: /* out of place (tsr_comm_broadcast_from): a copy */
        if (bytes && a->send != a->recv)
            memmove(a->recv, a->send, bytes);
        return TSR_OK;
    case COMM_OP_BARRIER: return TSR_OK;
    case COMM_OP_WAIT: {
        pthread_mutex_lock(&g->mu);
        const bool broken = g->broken;
        pthread_mutex_unlock(&g->mu);
        return broken ? tsr_errorf(TSR_ERR_BACKEND, "the group is broken: %s", g->reason) : TSR_OK;
    }
    case COMM_OP_COUNT: break;
    }
    return tsr_errorf(TSR_ERR_INTERNAL, "unknown op %d", (int)a->op);
}

static const comm_impl_ops self_ops = {self_run, NULL, NULL};

int tsr_comm_self_init(tsr_comm_group *g, const tsr_comm_options *o)
{
    (void)o;
    g->ops = &self_ops;
    return TSR_OK;
}
