/*
 * cli/generate_cfg.c - `tessera generate --device A,B --parallel cfg`: the
 * images' UNet rows split over two devices (tsr_cfg_group, tessera.h;
 * docs/multi-gpu.md section 6).
 *
 * Why a file of its own: the command's own batch stays rank 0 and does all
 * it did before (previews, results, output); this file opens the second
 * engine (a replica of the first when both are CPU devices: one copy of
 * the weights), gives it a batch on rank 1 with the same images, and steps
 * that batch on a thread of its own, as the group's lockstep asks: the same
 * submits before the first step, then one tsr_batch_step per step of rank
 * 0's, until its batch is empty too.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"

struct gen_cfg {
    tsr_engine *e1;       /* owned: rank 1's engine */
    tsr_cfg_group *group; /* owned */
    tsr_batch *b1;        /* owned: rank 1's batch */
    pthread_t thread;
    bool started;
    int rc;               /* rank 1's first failure */
    char err[512];
};

/* "A,B" -> the two names; anything else is not a pair. */
static int split_pair(const char *devices, char *a, char *b, size_t size)
{
    const char *comma = strchr(devices, ',');
    if (!comma || strchr(comma + 1, ','))
        return -1;
    const size_t na = (size_t)(comma - devices), nb = strlen(comma + 1);
    if (na == 0 || nb == 0 || na >= size || nb >= size)
        return -1;
    memcpy(a, devices, na);
    a[na] = '\0';
    memcpy(b, comma + 1, nb + 1);
    return 0;
}

int gen_cfg_open(const char *devices, const tsr_engine_options *eo, tsr_engine **e0,
                 gen_cfg **out)
{
    *e0 = NULL;
    *out = NULL;
    char a[64], b[64];
    if (split_pair(devices, a, b, sizeof a) < 0) {
        fprintf(stderr, "tessera generate: --parallel cfg needs two devices: --device A,B (e.g. "
                        "cpu,cpu), not '%s'\n",
                devices);
        return TSR_ERR_INVALID;
    }
    gen_cfg *c = calloc(1, sizeof *c);
    if (!c)
        return TSR_ERR_NOMEM;
    tsr_engine_options o = *eo;
    o.device = a;
    if (o.threads > 1)
        o.threads /= 2; /* --threads is the whole: half per device */
    int rc = tsr_engine_open(&o, e0);
    if (rc == TSR_OK) {
        o.device = b;
        /* CPU devices share the first's weights; others read their own */
        rc = strcmp(a, "cpu") == 0 && strcmp(b, "cpu") == 0
                 ? tsr_engine_open_replica(*e0, &o, &c->e1)
                 : tsr_engine_open(&o, &c->e1);
    }
    if (rc == TSR_OK) {
        tsr_engine *es[2] = {*e0, c->e1};
        rc = tsr_cfg_group_create(es, 2, 0, &c->group);
    }
    if (rc < 0) {
        gen_cfg_free(c);
        return rc;
    }
    *out = c;
    return TSR_OK;
}

int gen_cfg_attach(gen_cfg *c, tsr_batch *b0, const tsr_batch_options *bo)
{
    int rc = tsr_batch_set_cfg_group(b0, c->group, 0);
    if (rc == TSR_OK)
        rc = tsr_batch_create(c->e1, bo, &c->b1);
    if (rc == TSR_OK)
        rc = tsr_batch_set_cfg_group(c->b1, c->group, 1);
    return rc;
}

int gen_cfg_submit(gen_cfg *c, const tsr_image_params *p)
{
    int id;
    return tsr_batch_submit(c->b1, p, &id);
}

static void *run_rank1(void *arg)
{
    gen_cfg *c = arg;
    while (c->rc == TSR_OK && tsr_batch_active(c->b1) > 0) {
        int rc = tsr_batch_step(c->b1, NULL);
        if (rc < 0) {
            c->rc = rc;
            snprintf(c->err, sizeof c->err, "%s", tsr_last_error());
        }
    }
    return NULL;
}

int gen_cfg_start(gen_cfg *c)
{
    if (pthread_create(&c->thread, NULL, run_rank1, c) != 0)
        return TSR_ERR_NOMEM;
    c->started = true;
    return TSR_OK;
}

int gen_cfg_join(gen_cfg *c)
{
    if (c->started) {
        pthread_join(c->thread, NULL);
        c->started = false;
    }
    if (c->rc < 0)
        fprintf(stderr, "tessera generate: device 2 of --parallel cfg failed: %s\n", c->err);
    return c->rc;
}

void gen_cfg_free(gen_cfg *c)
{
    if (!c)
        return;
    if (c->started) {
        /* rank 0 stopped early (a failure): rank 1 must not wait for it */
        tsr_cfg_group_abort(c->group, 0, "tessera generate stopped");
        pthread_join(c->thread, NULL);
    }
    tsr_batch_free(c->b1);
    tsr_cfg_group_destroy(c->group);
    tsr_engine_close(c->e1);
    free(c);
}
