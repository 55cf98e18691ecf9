/*
 * pipeline/pipeline_internal.h - the engine and per-image state shared by
 * pipeline/engine.c and pipeline/batch.c.  Not part of the public API.
 */
#ifndef TSR_PIPELINE_INTERNAL_H
#define TSR_PIPELINE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"
#include "scheduler/rng.h"
#include "scheduler/scheduler.h"
#include "tessera.h"
#include "text/conditioner.h"
#include "unet/unet.h"
#include "vae/preview.h"
#include "vae/vae.h"

struct tsr_engine {
    tsr_backend *backend;   /* owned */
    tsr_model *model;       /* owned */
    tsr_text_cond *cond;    /* owned */
    tsr_weights *unet_w, *vae_w; /* owned */
    tsr_unet *unet;         /* owned */
    tsr_vae *vae;           /* owned */
    tsr_taesd *taesd;       /* owned, optional */
    tsr_preview_linear_map preview_map; /* published or fitted to this VAE (vae/preview.h) */
    bool preview_linear;    /* false when no map could be made: no linear previews */
    tsr_sched_config sched; /* the model's scheduler config (+ prediction override) */
    tsr_sampler_kind default_sampler;
    tsr_family family;
    bool sdxl;
    bool force_zeros;       /* model_index force_zeros_for_empty_prompt */
    int in_channels;        /* UNet input: 4, or 9 to inpaint */
    int latent_channels;    /* VAE latent channels */
    int vae_factor;         /* 8 */
    int size_multiple;      /* image sides must be multiples of this (the VAE factor) */
    int default_size;
    char model_name[256];   /* file or folder stem, for the infotext */
    char model_hash[11];    /* A1111 AutoV2 hash of a single file, computed at open; "" unknown */
    struct tsr_engine_lora *lora; /* owned: LoRA tables and cache (pipeline/lora.c) */
    struct tsr_engine_emb *emb;   /* owned: textual inversion (pipeline/embeddings.c) */
    /* Replicas (tsr_engine_open_replica): `src` is the engine whose weights
     * (unet_w, vae_w, the text encoders') this one borrows, holding one of
     * its references; an engine is freed when its last reference goes. */
    struct tsr_engine *src;
    _Atomic int refs;             /* 1 + replicas still open */
};

/* Replicas by broadcast (pipeline/replica.c).  tsr_engine_receive_weights:
 * rank `rank`'s copy of src's weights into e (its backend and model open):
 * e->unet_w, e->vae_w and te[] (the text encoders', for
 * tsr_text_cond_open_given) on success, nothing allocated on failure.
 * tsr_engine_replica_by_broadcast: tsr_engine_open_replica for a source on
 * a GPU (a group of one on the same device, else of two with a thread of
 * its own sending). */
int tsr_engine_receive_weights(tsr_engine *e, const tsr_engine *src, tsr_replica_group *g,
                               int rank, tsr_weights *te[2]);
int tsr_engine_replica_by_broadcast(tsr_engine *src, const tsr_engine_options *o,
                                    tsr_engine **out);

/* Parameters after checking: the defaults applied and names resolved. */
typedef struct tsr_params_resolved {
    int width, height;
    tsr_sampler_kind sampler;
    tsr_schedule schedule;
    tsr_rng_kind rng;
} tsr_params_resolved;

/* Check p against e (pipeline/params.c); *field names a bad parameter. */
int tsr_params_resolve(const tsr_engine *e, const tsr_image_params *p, tsr_params_resolved *r,
                       const char **field);

/* One image in flight.  Owned by its batch (pipeline/batch.c) from submit
 * until take; everything it points to is owned by it. */
typedef struct tsr_batch_image {
    int id;
    uint64_t order;     /* submission sequence: the oldest image leads a step */
    tsr_image_state state;
    int status;         /* TSR_OK unless FAILED or CANCELLED */
    bool final_reported; /* the step callback has seen its final state */
    /* the submitted parameters, deep-copied (pointers owned); init_image and
     * mask are released once the prepare phase has used them */
    tsr_image_params params;
    tsr_params_resolved res;
    double prepare_s, denoise_s, decode_s;
    int width, height;  /* image */
    int lh, lw;         /* latent */
    tsr_sampler *sampler;
    tsr_sampler_kind sampler_kind;
    tsr_schedule schedule;
    tsr_rng rng;
    float *latent;      /* [lh, lw, C] NHWC */
    float *x0;          /* x0 prediction of the last evaluation */
    float *mask;        /* inpainting: [lh, lw] in {0, 1} (1 = repaint); NULL otherwise */
    float *masked;      /* inpainting model: masked-image latents [lh, lw, C] */
    float *image_latent; /* inpainting, 4-channel model: init image latents [lh, lw, C] */
    float *noise;       /* inpainting, 4-channel model: the initial noise, re-added per step */
    tsr_text_embedding cond, uncond;
    bool cfg;
    double cfg_scale, rescale;
    float time_ids[6];
    /* for the infotext */
    char *prompt, *negative;
    int steps, clip_skip;
    double strength;    /* < 0 without an init image */
    uint64_t seed;
    tsr_rng_kind rng_kind;
    /* hires fix (pipeline/hires.c): the plan made at submit */
    bool hires;         /* a second pass follows the one running */
    int hires_to_w, hires_to_h, hires_trunc_x, hires_trunc_y; /* A1111's target arithmetic */
    int hires_steps, hires_sched; /* its steps, and the schedule they end */
    char *upscaler;     /* the upscaler's name as given (owned; NULL = "Latent") */
    int step_offset;    /* user-visible steps of the passes before the running one */
    int steps_later;    /* ... and of the pass still to come */
    struct tsr_image_lora *lora; /* owned: its LoRAs (pipeline/lora.c); NULL = none */
    char ti_hashes[512];         /* A1111's "TI hashes" of the embeddings its prompts used */
    /* result */
    uint8_t *rgb;
    char *parameters;
} tsr_batch_image;

/* Progress over both passes of a hires image (one pass otherwise). */
static inline int tsr_batch_image_steps_done(const tsr_batch_image *j)
{
    return j->sampler ? j->step_offset + tsr_sampler_steps_done(j->sampler) : 0;
}
static inline int tsr_batch_image_steps_total(const tsr_batch_image *j)
{
    return (j->sampler ? j->step_offset + tsr_sampler_steps_total(j->sampler) : j->steps) +
           j->steps_later;
}

/* Encode 8-bit-derived pixels ([-1, 1], j->height x j->width) to latents
 * (j->lh x j->lw): the VAE's mean + std * noise drawn from j's stream. */
int tsr_batch_image_encode(tsr_engine *e, tsr_batch_image *j, const float *pixels, float *latent);

/* The A1111 infotext for a finished image (owned string in image->parameters). */
int tsr_batch_image_infotext(const tsr_engine *e, tsr_batch_image *j);

/* pipeline/batch_image.c: an image's life outside the UNet call. */
/* Copy p (already checked into r) into a new QUEUED image. */
int tsr_batch_image_create(const tsr_engine *e, const tsr_image_params *p,
                           const tsr_params_resolved *r, tsr_batch_image **out);
void tsr_batch_image_free(tsr_batch_image *j);
/* The prepare phase: sampler, prompt encoding, initial latents (img2img and
 * inpainting encode their image).  QUEUED -> DENOISING on success. */
int tsr_batch_image_prepare(tsr_engine *e, tsr_batch_image *j);
/* Rows of one UNet call this image takes (2 with guidance). */
static inline int tsr_batch_image_rows(const tsr_batch_image *j) { return j->cfg ? 2 : 1; }

/* Monotonic seconds. */
double tsr_pipeline_now(void);

#endif
