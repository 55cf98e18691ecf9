/*
 * unet/unet.h - diffusers' UNet2DConditionModel on the backend interface.
 *
 * Why this shape: the network is built from the parsed config
 * (tsr_unet_desc, model/model_config.h) and the component's weights
 * (tsr_weights, diffusers names), so every SD 1.x, SD 2.x, SDXL and
 * inpainting UNet, and any smaller config of those families that diffusers
 * accepts, is the same code walking a different block list.  Every shape a
 * weight must have is derived from the config and checked at create time,
 * so a mismatched checkpoint fails there, naming the tensor, not inside an
 * op.
 *
 * Batching: each row of a call carries its own timestep, its own text
 * context and (SDXL) its own pooled embedding and time_ids, because the
 * service batches images that are at different steps, and classifier-free
 * guidance doubles the rows.  Rows never mix: the output of a batch equals
 * the rows run one by one.
 *
 * Memory: activations live in one workspace arena owned by the UNet, sized
 * by a measuring pass the first time a (batch, height, width, context
 * length) shape is seen and reused afterwards; a forward pass allocates
 * nothing else (the CPU backend's own scratch only grows).  Attention goes
 * through the backend's query-chunked tsr_attention, so no Lq x Lk score
 * matrix is ever materialised, and the feed-forward runs over token chunks.
 *
 * A tsr_unet runs one call at a time (its workspace is shared by calls):
 * callers serialise, or create one per worker over the same weights.
 *
 * Inputs and outputs are host pointers for now: the call uploads the
 * inputs into the workspace and downloads the output (a memmove on the CPU
 * backend).  A device-resident variant is left for the GPU pipeline.
 */
#ifndef TSR_UNET_UNET_H
#define TSR_UNET_UNET_H

#include <stddef.h>

#include "backend/backend.h"
#include "model/model.h"
#include "model/model_config.h"

/* Rows per call (at least 32 are required by the service). */
#define TSR_UNET_MAX_BATCH 64
/* Latent height/width limit (8192 px at the VAE's factor 8). */
#define TSR_UNET_MAX_SIZE 1024
/* Context (text) tokens per row. */
#define TSR_UNET_MAX_CONTEXT 8192
/* SDXL base passes 6 time ids (original size, crop, target size); the
 * refiner 5 (with an aesthetic score). */
#define TSR_UNET_MAX_TIME_IDS 16

typedef struct tsr_unet tsr_unet;

typedef struct tsr_unet_inputs {
    int batch;       /* rows B, 1..TSR_UNET_MAX_BATCH */
    int height;      /* latent H (any size: odd sizes follow diffusers' upsample_size) */
    int width;       /* latent W, same */
    int channels;    /* latent channels given: must equal in_channels (4, or 9 to inpaint) */
    int context_len; /* L, tokens per row */
    const float *latents;   /* [B, H, W, in_channels] NHWC, host; borrowed */
    const float *timesteps; /* [B] one timestep per row, host; borrowed */
    const float *context;   /* [B, L, cross_attention_dim], host; borrowed */
    /* text_time (SDXL) only; NULL otherwise: */
    const float *text_embeds; /* [B, pooled_dim] pooled text embeddings */
    const float *time_ids;    /* [B, n_time_ids] */
    int n_time_ids;           /* 0 = 6 (SDXL base) */
    /* LoRAs: loras[i] is row i's set (NULL = none); NULL = no LoRAs at all.
     * Borrowed; see model/lora.h. */
    const struct tsr_lora_set *const *loras;
    /* Seamless tiling (A1111's `tiling`): every padded conv of the call pads
     * circularly (torch's padding_mode 'circular'), for all its rows. */
    bool circular;
} tsr_unet_inputs;

/* Build the network: desc is copied; weights and backend are borrowed and
 * must outlive the UNet.  Fails naming the first missing or mis-shaped
 * weight.  *out owned: free with tsr_unet_free(). */
int tsr_unet_create(const tsr_unet_desc *desc, const tsr_weights *weights, tsr_backend *backend,
                    tsr_unet **out);
void tsr_unet_free(tsr_unet *u);

/* One UNet call.  `out` receives [B, H, W, out_channels] NHWC floats
 * (host, caller-owned).  Errors (bad channel/size/row counts, NULL
 * pointers) are reported before any work is done. */
int tsr_unet_forward(tsr_unet *u, const tsr_unet_inputs *in, float *out);

/* Plan (size and allocate) the workspace for a shape without running it;
 * tsr_unet_forward does this itself when the shape changes. */
int tsr_unet_plan(tsr_unet *u, const tsr_unet_inputs *in);

/* Rows a call with `batch` rows computes: batch itself, or on a backend
 * with TSR_BACKEND_CAP_ROUND_ROWS the next of 1, 2, 4, ..., 64 (the extra
 * rows repeat the last one and their outputs are dropped). */
int tsr_unet_rows(const tsr_unet *u, int batch);

const tsr_unet_desc *tsr_unet_get_desc(const tsr_unet *u);
/* Bytes of the workspace currently allocated (0 before the first plan). */
size_t tsr_unet_workspace_bytes(const tsr_unet *u);
/* The workspace a forward pass of this shape needs (a planning pass; holds
 * nothing, writes nothing in u: safe while another thread runs a forward). */
int tsr_unet_workspace_need(tsr_unet *u, const tsr_unet_inputs *in, size_t *bytes);
/* Release the workspace (the next forward plans again). */
void tsr_unet_trim(tsr_unet *u);

#endif
