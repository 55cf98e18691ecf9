/*
 * pipeline/cfg_group.c - CFG-parallel (docs/multi-gpu.md part 4): one
 * batch's UNet rows split over the engines of a group, with one all_gather
 * of the noise prediction per UNet call.
 *
 * Why lockstep rather than a leader that ships rows to helpers: every rank
 * runs the same batch (same images, same order, same deterministic sampler
 * arithmetic), so what a rank needs for its rows (latents, timesteps, text
 * conditioning) it already has, and the only thing that crosses between
 * devices is the prediction: one all_gather per call, whose bytes are the
 * rows themselves.  On the host comm the all_gather moves bits, and the CPU
 * backend's rows do not depend on how many rows share a call (its GEMM's
 * order of arithmetic does not depend on the matrix height, group norm and
 * attention work per row), so a split image equals its one-engine run byte
 * for byte.
 *
 * Each rank's block in the all_gather starts with a header: the step's
 * fingerprint (image ids, their steps and timesteps, the call's shape),
 * the rank's UNet status and message.  So ranks that fell out of lockstep
 * (an embedder cancelled on one rank only) fail with "ranks disagree"
 * instead of mixing two images' rows, and a rank whose own call failed
 * (out of memory, a device error) still joins the collective and every rank
 * fails the same images with its message, keeping the group whole.  A rank
 * that stops calling at all is the comm's business: its peers fail within
 * the timeout, naming the op and the rank (backend/comm/comm.h).
 *
 * The group is a host comm: every engine's UNet takes and returns host
 * memory (the CUDA backend copies in and out), so its ranks are threads of
 * this process exchanging host buffers whatever the devices are.  Keeping
 * the prediction on the GPUs and gathering it with NCCL on the backend's
 * stream would save two copies per call; not built (docs/multi-gpu.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/comm/comm.h"
#include "core/error.h"
#include "pipeline/batch_internal.h"

#define CFG_MAX_RANKS 8
#define CFG_MAGIC 0x54535243464750ULL /* "TSRCFGP" */

struct tsr_cfg_group {
    int n;
    tsr_engine *engines[CFG_MAX_RANKS]; /* borrowed */
    tsr_comm_group *comm;               /* owned */
};

/* One rank's block header in the all_gather: 256 bytes, so the rows after
 * it stay aligned. */
typedef struct cfg_header {
    uint64_t magic;
    uint64_t fingerprint;
    uint64_t lead_seed;           /* the call's first image: named when ranks disagree */
    int32_t rank, rows, share, status;
    int32_t images, lead_step;
    char message[208];
} cfg_header;
_Static_assert(sizeof(cfg_header) == 256, "cfg_header is 256 bytes");

int tsr_cfg_group_create(tsr_engine *const *engines, int n, double timeout_s,
                         tsr_cfg_group **out)
{
    if (!out)
        return tsr_errorf(TSR_ERR_INVALID, "cfg group: out is NULL");
    *out = NULL;
    if (!engines || n < 2 || n > CFG_MAX_RANKS)
        return tsr_errorf(TSR_ERR_INVALID, "cfg group: %d engines (2..%d)", n, CFG_MAX_RANKS);
    for (int i = 0; i < n; i++) {
        if (!engines[i])
            return tsr_errorf(TSR_ERR_INVALID, "cfg group: engine %d is NULL", i);
        for (int k = 0; k < i; k++)
            if (engines[k] == engines[i])
                return tsr_errorf(TSR_ERR_INVALID,
                                  "cfg group: engines %d and %d are the same engine (each rank "
                                  "needs its own, used by its own thread)",
                                  k, i);
    }
    /* the same model: the same UNet shape and latent space, or the rows
     * of one rank would not be the rows the others expect */
    for (int i = 1; i < n; i++) {
        const tsr_engine *a = engines[0], *b = engines[i];
        if (a->in_channels != b->in_channels || a->latent_channels != b->latent_channels ||
            a->family != b->family || a->sdxl != b->sdxl ||
            strcmp(a->model_name, b->model_name) != 0)
            return tsr_errorf(TSR_ERR_INVALID,
                              "cfg group: engine %d runs '%s' (%s), engine 0 '%s' (%s): a "
                              "group needs one model",
                              i, b->model_name, tsr_engine_family(b), a->model_name,
                              tsr_engine_family(a));
    }
    tsr_cfg_group *g = calloc(1, sizeof *g);
    if (!g)
        return tsr_errorf(TSR_ERR_NOMEM, "cfg group: out of memory");
    g->n = n;
    for (int i = 0; i < n; i++)
        g->engines[i] = engines[i];
    tsr_comm_options o;
    tsr_comm_options_init(&o);
    o.kind = TSR_COMM_HOST;
    o.size = n;
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

void tsr_cfg_group_destroy(tsr_cfg_group *g)
{
    if (!g)
        return;
    tsr_comm_group_destroy(g->comm);
    free(g);
}

int tsr_cfg_group_size(const tsr_cfg_group *g)
{
    return g ? g->n : 0;
}

void tsr_cfg_group_abort(tsr_cfg_group *g, int rank, const char *why)
{
    if (!g || rank < 0 || rank >= g->n)
        return;
    tsr_comm_abort(tsr_comm_group_rank(g->comm, rank), why ? why : "left");
}

int tsr_cfg_group_broken(const tsr_cfg_group *g, const char **reason, uint64_t *blame)
{
    if (reason)
        *reason = NULL;
    if (blame)
        *blame = 0;
    if (!g)
        return 0;
    const tsr_comm *c = tsr_comm_group_rank(g->comm, 0);
    if (!tsr_comm_broken(c, reason))
        return 0;
    if (blame)
        *blame = tsr_comm_failed_ranks(c);
    return 1;
}

int tsr_batch_set_cfg_group(tsr_batch *b, tsr_cfg_group *g, int rank)
{
    if (!b)
        return tsr_errorf(TSR_ERR_INVALID, "cfg group: batch is NULL");
    if (b->n_images > 0 || b->busy > 0)
        return tsr_errorf(TSR_ERR_INVALID,
                          "cfg group: the batch holds %d images (attach or detach it empty)",
                          b->n_images);
    if (g && (rank < 0 || rank >= g->n))
        return tsr_errorf(TSR_ERR_INVALID, "cfg group: rank %d outside 0..%d", rank, g->n - 1);
    if (g && g->engines[rank] != b->e)
        return tsr_errorf(TSR_ERR_INVALID,
                          "cfg group: the batch's engine is not the group's engine of rank %d",
                          rank);
    b->group = g;
    b->rank = g ? rank : 0;
    b->blame = 0;
    return TSR_OK;
}

uint64_t tsr_batch_cfg_blame(const tsr_batch *b)
{
    return b ? b->blame : 0;
}

int tsr_cfg_share(const tsr_batch *b, int rows, int *r0, int *r1)
{
    if (!b->group) {
        *r0 = 0;
        *r1 = rows;
        return rows;
    }
    const int n = b->group->n, share = (rows + n - 1) / n;
    int a = b->rank * share, z = a + share;
    if (a > rows)
        a = rows;
    if (z > rows)
        z = rows;
    *r0 = a;
    *r1 = z;
    return share;
}

static size_t block_bytes(int share, size_t nl)
{
    return sizeof(cfg_header) + (size_t)share * nl * sizeof(float);
}

float *tsr_cfg_slot(tsr_batch *b, int share, size_t nl)
{
    const size_t blk = block_bytes(share, nl), need = blk * (size_t)b->group->n;
    if (need > b->gather_cap) {
        uint8_t *p = realloc(b->gather, need);
        if (!p) {
            tsr_errorf(TSR_ERR_NOMEM, "out of memory for the cfg all_gather (%zu bytes)", need);
            return NULL;
        }
        b->gather = p;
        b->gather_cap = need;
    }
    return (float *)(b->gather + blk * (size_t)b->rank + sizeof(cfg_header));
}

int tsr_cfg_exchange(tsr_batch *b, uint64_t fingerprint, int local_rc, int rows, int share,
                     size_t nl, int images, uint64_t lead_seed, int lead_step)
{
    tsr_cfg_group *g = b->group;
    const int n = g->n;
    const size_t blk = block_bytes(share, nl);
    b->blame = 0;
    cfg_header *mine = (cfg_header *)(b->gather + blk * (size_t)b->rank);
    memset(mine, 0, sizeof *mine);
    mine->magic = CFG_MAGIC;
    mine->fingerprint = fingerprint;
    mine->rank = b->rank;
    mine->rows = rows;
    mine->share = share;
    mine->status = local_rc;
    mine->images = images;
    mine->lead_seed = lead_seed;
    mine->lead_step = lead_step;
    if (local_rc < 0)
        snprintf(mine->message, sizeof mine->message, "%s", tsr_last_error());
    tsr_comm *c = tsr_comm_group_rank(g->comm, b->rank);
    int rc = tsr_comm_all_gather(c, mine, b->gather, blk, TSR_COMM_BYTES);
    if (rc < 0) {
        b->blame = tsr_comm_failed_ranks(c);
        char why[512];
        snprintf(why, sizeof why, "%s", tsr_last_error()); /* not formatted from itself */
        return tsr_errorf(TSR_ERR_BACKEND, "cfg-parallel: %s", why);
    }
    /* a failed rank first (its message is the one to give), then lockstep */
    for (int q = 0; q < n; q++) {
        const cfg_header *h = (const cfg_header *)(b->gather + blk * (size_t)q);
        if (h->status < 0) {
            b->blame = 1ULL << q;
            if (q == b->rank)
                return tsr_errorf(h->status, "%s", h->message);
            return tsr_errorf(h->status, "cfg-parallel: the UNet call failed on rank %d of %d: %s",
                              q, n, h->message);
        }
    }
    for (int q = 0; q < n; q++) {
        const cfg_header *h = (const cfg_header *)(b->gather + blk * (size_t)q);
        if (h->magic != CFG_MAGIC || h->rank != q || h->fingerprint != fingerprint ||
            h->rows != rows) {
            /* a bug of the driver, not of the images: TSR_ERR_BACKEND, so a
             * server reruns them rather than fail them */
            b->blame = 0;
            return tsr_errorf(TSR_ERR_BACKEND,
                              "cfg-parallel (rank %d of %d): ranks disagree on the step: rank %d "
                              "runs %d images in %d rows, the first seed %llu at step %d; rank %d "
                              "%d images in %d rows, seed %llu at step %d (the batches of a group "
                              "must be driven in lockstep)",
                              b->rank, n, b->rank, images, rows, (unsigned long long)lead_seed,
                              lead_step, q, h->images, h->rows,
                              (unsigned long long)h->lead_seed, h->lead_step);
        }
    }
    /* rank q's rows follow its header; the last block may hold fewer */
    for (int q = 0; q < n; q++) {
        const int a = q * share;
        int k = rows - a < share ? rows - a : share;
        if (k <= 0)
            break;
        memcpy(b->out + (size_t)a * nl, b->gather + blk * (size_t)q + sizeof(cfg_header),
               (size_t)k * nl * sizeof(float));
    }
    return TSR_OK;
}
