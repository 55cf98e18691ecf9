/*
 * pipeline/batch_internal.h - the batch struct, shared by pipeline/batch.c
 * (bookkeeping) and pipeline/step.c (the UNet call).  Not public.
 */
#ifndef TSR_PIPELINE_BATCH_INTERNAL_H
#define TSR_PIPELINE_BATCH_INTERNAL_H

#include "pipeline/pipeline_internal.h"

struct tsr_batch {
    tsr_engine *e;          /* borrowed */
    tsr_batch_options opt;
    tsr_batch_image **images; /* owned: every image from submit until take */
    int n_images, cap;
    tsr_batch_image **graveyard; /* owned: taken during a step, freed when it returns */
    int n_grave, grave_cap;
    int busy;               /* > 0 while a step or prepare phase runs */
    int next_id;
    uint64_t next_order;
    tsr_step_fn cb;
    void *user;             /* borrowed */
    int previews;           /* tsr_preview_mode */
    tsr_batch_stats stats;
    /* UNet call buffers: grown to the largest call, released when the batch
     * runs empty (tsr_batch_release_buffers) */
    float *in, *t, *ctx, *pooled, *tids, *out, *guided;
    size_t in_cap, t_cap, ctx_cap, pooled_cap, tids_cap, out_cap, guided_cap;
    uint8_t *preview, *preview_small; /* RGB previews handed to the callback */
    size_t preview_cap, preview_small_cap;
    /* CFG-parallel (pipeline/cfg_group.c): the group this batch is rank
     * `rank` of (borrowed; NULL = alone), the all_gather buffer (one block
     * per rank: a header, then the rank's rows of the prediction), and the
     * ranks blamed for the last grouped call's failure */
    tsr_cfg_group *group;
    int rank;
    uint8_t *gather;
    size_t gather_cap;
    uint64_t blame;
};

/* pipeline/cfg_group.c.  The rows [*r0, *r1) of a call of `rows` rows that
 * this batch's rank computes, and the rows per rank (the all_gather's
 * block); alone: all of them. */
int tsr_cfg_share(const tsr_batch *b, int rows, int *r0, int *r1);
/* Where this rank's UNet output goes: room for `share` rows of nl floats in
 * the gather buffer (NULL out of memory, with the error raised). */
float *tsr_cfg_slot(tsr_batch *b, int share, size_t nl);
/* The call's one all_gather: this rank's rows (in tsr_cfg_slot) and its
 * status (`local_rc`, the UNet call's; its message is tsr_last_error) go
 * to every rank, with the step's fingerprint; then every rank's rows are
 * laid out in b->out ([rows, nl]).  Fails (TSR_ERR_BACKEND, or the failed
 * rank's status) when the collective fails, a rank's call failed or the
 * ranks disagree on the step (images, lead_seed and lead_step, the call's
 * first image's, name it then); b->blame says whom to blame. */
int tsr_cfg_exchange(tsr_batch *b, uint64_t fingerprint, int local_rc, int rows, int share,
                     size_t nl, int images, uint64_t lead_seed, int lead_step);

void tsr_batch_release_buffers(tsr_batch *b);
/* Free images taken during a step, once nothing runs. */
void tsr_batch_bury(tsr_batch *b);
/* Mark j FAILED with rc and report it. */
void tsr_batch_fail_image(tsr_batch *b, tsr_batch_image *j, int rc);
/* Give the callback j's final state, once. */
void tsr_batch_report_final(tsr_batch *b, tsr_batch_image *j);

#endif
