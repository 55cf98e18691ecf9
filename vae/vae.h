/*
 * vae/vae.h - diffusers' AutoencoderKL (the SD 1.x / 2.x / SDXL VAE) on the
 * backend interface: decoder, encoder, tiled variants for large images, and
 * the conversions between the decoder's [-1, 1] floats and 8-bit pixels.
 *
 * Why it is built this way:
 *   - The network is built from the parsed config (tsr_vae_desc): the number
 *     of blocks, their widths, resnets per block and the group count, so the
 *     tiny test VAEs and the published ones run the same code.  The spatial
 *     factor is 2^(n_blocks-1) (8 for the published configs).
 *   - Who applies scaling_factor / shift_factor is fixed here, once:
 *     tsr_vae_decode() takes latents as the UNet sees them and itself
 *     computes z = latents / scaling_factor + shift_factor (what diffusers'
 *     pipelines do before vae.decode); tsr_vae_encode() returns the raw
 *     latent distribution (mean, logvar) and tsr_vae_sample() turns it into
 *     UNet latents (mean + std * noise - shift_factor) * scaling_factor (what
 *     img2img pipelines do after vae.encode).  Nobody else scales.
 *   - All activations live in one workspace planned by a measuring pass per
 *     shape (three rotating "slots" as large as the largest activation, plus
 *     the attention temporaries), so a decode allocates nothing per op and
 *     the peak is about three activations, as in PyTorch.
 *   - A whole batch is decoded in one pass (every op takes N).
 *   - Tiled decode/encode split the latent plane into overlapping tiles,
 *     run each tile through the same network and blend them with linear
 *     ramps over the overlaps (weights normalised to sum to one), so memory
 *     is bounded by the tile size and no seams show.
 *
 * Layouts: latents NHWC [B, h, w, latent_channels]; images NHWC
 * [B, h*f, w*f, out_channels] (f = tsr_vae_factor()); host float arrays.
 *
 * force_upcast: the CPU backend computes in f32 anyway; the flag is kept
 * (tsr_vae_force_upcast) so a GPU backend storing f16 activations runs this
 * VAE in f32 (SDXL's VAE overflows in f16).
 */
#ifndef TSR_VAE_VAE_H
#define TSR_VAE_VAE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"
#include "model/model_config.h"

typedef struct tsr_vae tsr_vae;

/* Tiling in latent pixels.  tile = 0 disables tiling.  overlap must be less
 * than tile/2 (0 = tile/4).  Tiles are spread evenly so the last one ends at
 * the border; a plane no larger than one tile is processed whole. */
typedef struct tsr_vae_tiling {
    int tile;    /* tile edge in latent pixels (>= 4) */
    int overlap; /* overlap between neighbours in latent pixels */
} tsr_vae_tiling;

/* Build the VAE.  desc is copied; weights and backend are borrowed and must
 * outlive the VAE.  Every tensor the config needs is checked for presence
 * and shape here.  *out owned: free with tsr_vae_free(). */
int tsr_vae_create(const tsr_vae_desc *desc, const tsr_weights *weights, tsr_backend *backend,
                   tsr_vae **out);
void tsr_vae_free(tsr_vae *v);

const tsr_vae_desc *tsr_vae_get_desc(const tsr_vae *v);
/* Image pixels per latent pixel (8 for the published VAEs). */
int tsr_vae_factor(const tsr_vae *v);
bool tsr_vae_force_upcast(const tsr_vae *v);
/* Bytes of the workspace currently held (0 before the first call). */
size_t tsr_vae_workspace_bytes(const tsr_vae *v);
/* The workspace an untiled decode of [B, h, w] latents needs (planning
 * only; holds nothing). */
int tsr_vae_decode_workspace_need(tsr_vae *v, int B, int h, int w, size_t *bytes);
/* Release the workspace (the next call plans again). */
void tsr_vae_trim(tsr_vae *v);
/* Seamless tiling (A1111's `tiling`): from now on every padded conv of the
 * encoder and decoder pads circularly (torch's padding_mode 'circular'; the
 * encoder's downsamplers pad with zeros themselves, as in diffusers, and
 * stay so).  A setting of the VAE, which runs one call at a time: the
 * pipeline sets it before each call.  While on, the _tiled calls run the
 * plane whole (tiles would wrap around their own edges). */
void tsr_vae_set_circular(tsr_vae *v, bool on);

/* Decode UNet latents [batch, h, w, C] (host) into images
 * [batch, h*f, w*f, out_channels] (host) in the decoder's raw range (about
 * [-1, 1], not clamped).  Applies 1/scaling_factor and shift_factor. */
int tsr_vae_decode(tsr_vae *v, const float *latents, int batch, int h, int w, float *images);
/* Same, by overlapping tiles (tiling NULL or tile 0 = untiled). */
int tsr_vae_decode_tiled(tsr_vae *v, const float *latents, int batch, int h, int w,
                         const tsr_vae_tiling *tiling, float *images);

/* Encode images [batch, H, W, in_channels] (host, in [-1, 1]; H and W
 * multiples of f) into the latent distribution: mean and logvar, each
 * [batch, H/f, W/f, C] (host).  logvar is clamped to [-30, 20] as diffusers'
 * DiagonalGaussianDistribution does.  No scaling is applied. */
int tsr_vae_encode(tsr_vae *v, const float *images, int batch, int H, int W, float *mean,
                   float *logvar);
int tsr_vae_encode_tiled(tsr_vae *v, const float *images, int batch, int H, int W,
                         const tsr_vae_tiling *tiling, float *mean, float *logvar);

/* UNet latents from a distribution and caller-drawn standard normal noise
 * (diffusers draws it with the pipeline's generator):
 *   latents = (mean + exp(0.5 * logvar) * noise - shift_factor) * scaling_factor
 * noise may be NULL for the mode (mean).  n elements; out may alias mean. */
void tsr_vae_sample(const tsr_vae_desc *desc, const float *mean, const float *logvar,
                    const float *noise, size_t n, float *out);

/* Decoder floats -> 8-bit pixels as diffusers' VaeImageProcessor does:
 * round(clamp(x / 2 + 0.5, 0, 1) * 255), ties to even (numpy's round). */
void tsr_vae_to_u8(const float *x, size_t n, uint8_t *out);
/* 8-bit pixels -> encoder input: p / 255 * 2 - 1. */
void tsr_vae_from_u8(const uint8_t *p, size_t n, float *out);

#endif
