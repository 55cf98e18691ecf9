/*
 * pipeline/hires.h - the hires fix's pieces (pipeline/hires.c,
 * pipeline/upscale.c).  Not public: the engine runs the hires fix itself
 * from tsr_image_params; tests reach the pieces through this header.
 */
#ifndef TSR_PIPELINE_HIRES_H
#define TSR_PIPELINE_HIRES_H

#include <stdbool.h>

#include "pipeline/pipeline_internal.h"

/* torch.nn.functional.interpolate's modes, as A1111's latent upscalers use
 * them (align_corners False). */
typedef enum tsr_upscale_mode {
    TSR_UPSCALE_NEAREST = 0,       /* mode="nearest" */
    TSR_UPSCALE_NEAREST_EXACT = 1, /* mode="nearest-exact" */
    TSR_UPSCALE_BILINEAR = 2,      /* mode="bilinear" */
    TSR_UPSCALE_BICUBIC = 3,       /* mode="bicubic" (A = -0.75) */
} tsr_upscale_mode;

/* Where an upscaler works: on the latents, or on the decoded image (which is
 * then encoded again). */
typedef enum tsr_upscaler_kind {
    TSR_UPSCALER_LATENT = 0,
    TSR_UPSCALER_LANCZOS = 1, /* "Lanczos", and "None" (A1111 resizes with Lanczos then) */
    TSR_UPSCALER_NEAREST = 2, /* "Nearest": Pillow's NEAREST */
} tsr_upscaler_kind;

/* An upscaler by A1111's name: the kind, and for "Latent ..." the mode.
 * NULL or "" = "Latent".  TSR_ERR_INVALID for an unknown name. */
int tsr_hires_upscaler_parse(const char *name, tsr_upscaler_kind *kind, tsr_upscale_mode *mode,
                             bool *antialias);

/* interpolate(x, size=(oh, ow), mode, antialias) on an NHWC float image of
 * c channels.  antialias applies to bilinear and bicubic (torch's _aa
 * kernels: triangle / Keys a = -0.5 filters widened by the scale when
 * shrinking, weights normalised over the taps inside the image).
 * in and out must not overlap. */
void tsr_latent_upscale(const float *in, int h, int w, int c, float *out, int oh, int ow,
                        tsr_upscale_mode mode, bool antialias);

/* A1111's target arithmetic (calculate_target_resolution): the size the
 * first pass is upscaled to and the latent pixels then cut off each way. */
typedef struct tsr_hires_plan {
    int to_w, to_h;         /* upscale to (image pixels) */
    int trunc_x, trunc_y;   /* latent columns / rows cut, split as A1111 splits them */
    int final_w, final_h;   /* the image that comes out */
    int steps;              /* the second pass's steps (K) */
    int sched_steps;        /* the schedule they are the end of: int(K / min(s, 0.999)) */
} tsr_hires_plan;

/* Whether p asks for the hires fix. */
bool tsr_hires_wanted(const tsr_image_params *p);
/* Check the hires fields of p for an image of w x h; *field names the bad
 * one.  Fills *plan. */
int tsr_hires_check(const tsr_engine *e, const tsr_image_params *p, int w, int h,
                    tsr_hires_plan *plan, const char **field);

/* The end of the first pass: upscale j's latents (or decode, Lanczos-resize
 * and encode them), cut, draw new noise from the seed and restart j's
 * sampler as the second pass.  j stays DENOISING. */
int tsr_batch_image_hires(tsr_engine *e, tsr_batch_image *j, long long max_decode_pixels);

/* A1111's masking.fill on an RGB image: the pixels where mask >= 128 take
 * colours blurred in from around them (Pillow's GaussianBlur at radii 256,
 * 64, 16, 4, 2, 0 over the premultiplied unmasked image, alpha-composited).
 * In place. */
int tsr_mask_fill(uint8_t *rgb, const uint8_t *mask, int w, int h);

/* A1111's inpainting_fill 2 (latent noise: the masked latents replaced by
 * the seed's first draw, as create_random_tensors makes it) and 3 (latent
 * nothing: the masked latents zeroed) on the init image's latents, before
 * noise is added: latent = latent * (1 - mask) + noise * mask.  mask is
 * lh x lw in [0, 1]; latent NHWC.  Modes 0 and 1 leave the latents.  The
 * seed's stream here is a fresh one, so the image's own draws keep their
 * order. */
int tsr_latent_fill(int mode, const float *mask, int lh, int lw, int C, tsr_rng_kind kind,
                    uint64_t seed, float *latent);

#endif
