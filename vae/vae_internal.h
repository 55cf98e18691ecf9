/*
 * vae/vae_internal.h - the AutoencoderKL's parts, shared by vae_net.c (the
 * network: weights and forward passes) and vae.c (planning, the public
 * calls, tiling).  Not a public header.
 *
 * Weights are held by value as tensor descriptors (views into the borrowed
 * tsr_weights arena), so an attention projection stored as a 1x1 conv in
 * old checkpoints ([C, 1, 1, C] in OHWI) can be viewed as the [C, C]
 * matrix it is without a copy.
 */
#ifndef TSR_VAE_INTERNAL_H
#define TSR_VAE_INTERNAL_H

#include "backend/arena.h"
#include "vae/vae.h"

#define VAE_MAX_RESNETS 17 /* layers_per_block <= 16, decoder +1 */
#define VAE_GN_EPS 1e-6f   /* every norm of diffusers' VAE */

typedef struct vae_resnet {
    int cin, cout;
    tsr_tensor n1_w, n1_b, c1_w, c1_b, n2_w, n2_b, c2_w, c2_b;
    tsr_tensor sc_w, sc_b; /* conv_shortcut when cin != cout */
    bool has_sc;
} vae_resnet;

typedef struct vae_attn {
    int c;
    tsr_tensor gn_w, gn_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;
} vae_attn;

typedef struct vae_stage {
    int n_res;
    vae_resnet res[VAE_MAX_RESNETS];
    bool has_sampler; /* encoder: downsampler, decoder: upsampler */
    tsr_tensor samp_w, samp_b;
} vae_stage;

typedef struct vae_half {
    tsr_tensor conv_in_w, conv_in_b;
    vae_stage stage[TSR_MAX_BLOCKS];
    vae_resnet mid0, mid1;
    vae_attn attn;
    tsr_tensor norm_out_w, norm_out_b, conv_out_w, conv_out_b;
} vae_half;

typedef enum vae_mode { VAE_DECODE = 1, VAE_ENCODE = 2 } vae_mode;

struct tsr_vae {
    tsr_vae_desc desc;
    tsr_backend *backend; /* borrowed */
    int factor;
    bool has_encoder;
    bool circular; /* tsr_vae_set_circular: seamless tiling for the calls that follow */
    vae_half enc, dec;
    tsr_tensor quant_w, quant_b, post_w, post_b;

    /* workspace: three activation slots, then attention temporaries */
    tsr_arena ws;
    void *slot[3]; /* activations in the backend's activation dtype */
    size_t slot_elems;
    size_t ws_mark; /* arena offset after the slots */
    int plan_mode, plan_b, plan_h, plan_w; /* shape the workspace is laid out for */

    /* host staging (grow-only): encoder moments, tile input and output */
    float *host;
    size_t host_elems;
    float *tile_in, *tile_out;
    size_t tile_in_elems, tile_out_elems;
};

/* One forward pass.  In measuring mode (ws->measuring) no op runs: the pass
 * records in `need` the largest activation (elements) a slot must hold and
 * the arena records the temporaries' peak. */
typedef struct vae_run {
    tsr_vae *v;
    tsr_arena *ws;
    bool measuring;
    size_t need;
    int cur; /* slot holding the current activation */
    bool circular; /* tsr_vae.circular at the call: padded convs wrap */
} vae_run;

/* Load and shape-check every tensor the config needs. */
int tsr_vae_net_load(tsr_vae *v, const tsr_weights *w);

/* Decoder: latents (host, UNet scale) [B,h,w,C] -> images (host).
 * Encoder: images (host) [B,H,W,Cin] -> moments [B,h,w,2C] written to
 * `out` (host).  Either may be run in measuring mode with NULL pointers. */
int tsr_vae_net_decode(vae_run *r, const float *latents, int B, int h, int w, float *images);
int tsr_vae_net_encode(vae_run *r, const float *images, int B, int H, int W, float *moments);

#endif
