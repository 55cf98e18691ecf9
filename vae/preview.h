/*
 * vae/preview.h - cheap previews of latents during denoising.
 *
 * Two ways, from cheapest:
 *   - a linear projection of each latent pixel to RGB with published
 *     per-family factors (SD 1.x/2.x share the SD VAE's latent space; SDXL
 *     has its own), giving an image at 1/8 of the final size (upscaling it
 *     for display is the page's job).  It costs a 4x3 matrix per latent
 *     pixel: nothing next to a UNet step.
 *   - TAESD, madebyollin's tiny autoencoder, when its decoder weights are
 *     given by path (taesd_decoder.safetensors / taesdxl_decoder.safetensors,
 *     the original Sequential naming "1.weight", "3.conv.0.weight", ...).
 *     A full-size image that looks like the final one, at the cost of
 *     ~40 64-channel convs.
 *
 * Both take latents as the UNet sees them (scaled), one NHWC row
 * [h, w, C], and produce 8-bit RGB the way ComfyUI's previewers do:
 * ((x + 1) / 2) clamped to [0, 1] times 255, truncated (linear), and
 * clamp(x, 0, 1) * 255 truncated for TAESD, whose decoder outputs [0, 1].
 */
#ifndef TSR_VAE_PREVIEW_H
#define TSR_VAE_PREVIEW_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/model.h"

/* Linear preview: latents [h, w, 4] -> rgb [h, w, 3].  family SD1/SD2 use
 * the SD 1.5 factors, SDXL its own; others are TSR_ERR_UNSUPPORTED.  rgb_f
 * (optional, may be NULL) receives the projection before the 8-bit mapping;
 * rgb (may be NULL) the 8-bit pixels. */
int tsr_preview_linear(tsr_family family, const float *latents, int h, int w, int channels,
                       float *rgb_f, uint8_t *rgb);

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
