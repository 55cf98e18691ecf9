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
    char model_hash[11];    /* A1111 AutoV2 hash of a single file; "" unknown */
    bool hash_done;
};

/* One image in flight. */
typedef struct tsr_job {
    int id;
    uint64_t order;     /* submission sequence: the oldest image leads a step */
    int status;         /* TSR_OK while running and when done well */
    bool running;       /* still denoising */
    int width, height;  /* image */
    int lh, lw;         /* latent */
    tsr_sampler *sampler;
    tsr_sampler_kind sampler_kind;
    tsr_schedule schedule;
    tsr_rng rng;
    float *latent;      /* [lh, lw, C] NHWC */
    float *x0;          /* x0 prediction of the last evaluation */
    float *mask;        /* inpainting: [lh, lw] in {0, 1}; NULL otherwise */
    float *masked;      /* inpainting: masked-image latents [lh, lw, C] */
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
    /* result */
    uint8_t *rgb;
    char *parameters;
} tsr_job;

/* The A1111 infotext for a finished job (owned string in job->parameters). */
int tsr_job_infotext(tsr_engine *e, tsr_job *j);

#endif
