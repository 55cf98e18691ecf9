/*
 * vae/preview.h - cheap previews of latents during denoising.
 *
 * Two ways, from cheapest:
 *   - a linear projection of each latent pixel to RGB, rgb = latent @ fac +
 *     bias, giving an image at 1/f of the final size (f = the VAE factor;
 *     upscaling it for display is the page's job).  It costs a Cx3 matrix
 *     per latent pixel: nothing next to a UNet step.
 *   - TAESD, madebyollin's tiny autoencoder, when its decoder weights are
 *     given by path (taesd_decoder.safetensors / taesdxl_decoder.safetensors,
 *     the original Sequential naming "1.weight", "3.conv.0.weight", ...).
 *     A full-size image that looks like the final one, at the cost of
 *     ~40 64-channel convs.
 *
 * Which linear map (the rule; the engine applies it once at open):
 *   - the published factors (ComfyUI's SD 1.5 / SDXL numbers) when the VAE
 *     is the family's standard one: 4 latent channels, blocks 128/256/512/512,
 *     no shift, and the family's published scaling_factor (0.18215 for SD
 *     1.x/2.x, 0.13025 for SDXL) - tsr_preview_vae_is_published();
 *   - otherwise a map fitted to this VAE (tsr_preview_fit): flat-colour
 *     images are encoded, their latents (UNet scale) averaged per image, and
 *     rgb ~= latent @ fac + bias solved by ridge least squares.  A latent
 *     space is the VAE's own, not the family's: a custom or tiny VAE with
 *     SD 1.x's UNet layout has entirely different latent colours, and the
 *     published factors would show nonsense.
 *
 * Why fit from flat colours: the linear preview is at latent resolution, so
 * what it must get right is each latent pixel's average colour; a flat
 * image's latent is that relation with no texture in the way, and 35 tiny
 * images (4x4 latent pixels each) cost one small encoder call at load.  A
 * small VAE's decoder is far from linear, so its preview is coarse: within
 * ~1.15x of the best linear map for test images on the demo VAEs (see
 * tests/vae/test_preview_fit.c), against 2-4x worse with SD 1.5's factors.
 *
 * Both previews take latents as the UNet sees them (scaled), one NHWC row
 * [h, w, C], and produce 8-bit RGB the way ComfyUI's previewers do:
 * ((x + 1) / 2) clamped to [0, 1] times 255, truncated (linear), and
 * clamp(x, 0, 1) * 255 truncated for TAESD, whose decoder outputs [0, 1].
 */
#ifndef TSR_VAE_PREVIEW_H
#define TSR_VAE_PREVIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"
#include "model/model_config.h"
#include "vae/vae.h"

#define TSR_PREVIEW_MAX_CH 16

/* A linear latent -> RGB map on UNet-scale latents: for each pixel,
 * rgb[c] = sum_k latent[k] * fac[k][c] + bias[c], in [-1, 1] nominally. */
typedef struct tsr_preview_linear_map {
    int channels; /* latent channels, 1..TSR_PREVIEW_MAX_CH */
    float fac[TSR_PREVIEW_MAX_CH][3];
    float bias[3];
} tsr_preview_linear_map;

/* ComfyUI's published map for a family: SD1/SD2 the SD 1.5 factors, SDXL
 * its own; other families TSR_ERR_UNSUPPORTED. */
int tsr_preview_published_map(tsr_family family, tsr_preview_linear_map *out);

/* True when `d` is the family's standard VAE, for which the published map
 * holds (see the rule above). */
bool tsr_preview_vae_is_published(tsr_family family, const tsr_vae_desc *d);

/* Fit a map for this VAE (needs its encoder and 3 image channels): encodes
 * flat-colour images in one call (the VAE's workspace grows to that batch),
 * then solves in double precision.  TSR_ERR_FORMAT when the latents do not
 * depend on the colour (a singular system) or are not finite. */
int tsr_preview_fit(tsr_vae *vae, tsr_preview_linear_map *out);

/* Linear preview: latents [h, w, channels] -> rgb [h, w, 3]; channels must
 * equal map->channels.  rgb_f (optional, may be NULL) receives the
 * projection before the 8-bit mapping; rgb (may be NULL) the 8-bit pixels. */
int tsr_preview_linear(const tsr_preview_linear_map *map, const float *latents, int h, int w,
                       int channels, float *rgb_f, uint8_t *rgb);

typedef struct tsr_taesd tsr_taesd;

/* Load a TAESD decoder (f32/f16/bf16 safetensors) onto a host-visible
 * backend (the CPU; ReLU and tanh run on host memory until the backend has
 * those ops).  Owned: free with tsr_taesd_free().  backend borrowed. */
int tsr_taesd_open(const char *path, tsr_backend *backend, tsr_taesd **out);
void tsr_taesd_free(tsr_taesd *t);
int tsr_taesd_latent_channels(const tsr_taesd *t);

/* Decoder output [batch, 8h, 8w, 3] (host floats, nominally [0, 1]) from
 * UNet latents [batch, h, w, C] (host). */
int tsr_taesd_decode(tsr_taesd *t, const float *latents, int batch, int h, int w, float *images);
/* One image: latents [h, w, C] -> rgb [8h, 8w, 3] bytes. */
int tsr_taesd_preview(tsr_taesd *t, const float *latents, int h, int w, uint8_t *rgb);

#endif
