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
};

void tsr_batch_release_buffers(tsr_batch *b);
/* Free images taken during a step, once nothing runs. */
void tsr_batch_bury(tsr_batch *b);
/* Mark j FAILED with rc and report it. */
void tsr_batch_fail_image(tsr_batch *b, tsr_batch_image *j, int rc);
/* Give the callback j's final state, once. */
void tsr_batch_report_final(tsr_batch *b, tsr_batch_image *j);

#endif
