/*
 * service/api/native/params.h - a job's parameters: from a JSON object (a POST body,
 * or a batch's `defaults` overlaid by one of its `jobs`) to checked,
 * resolved values ready for tsr_batch_submit.
 *
 * Every rejection names its field and says what was expected and what came
 * ("steps must be an integer between 1 and 1000, got 30.5").  Types are
 * strict: integers must be JSON integers (the literal, not the value, is
 * checked, so `1e3` is refused for steps), strings must be strings.  Only
 * `seed` takes numbers beyond 2^53 (0..2^64-1, or -1 for random).  Unknown
 * fields are ignored.  After the service's own checks the engine's
 * tsr_image_params_check has the last word (sampler names, clip skip
 * against the text encoder, mask against the model), through a callback so
 * the parser also runs without an engine (the fuzzer, tests).
 *
 * svc_params is immutable once parsed and shared by reference between the
 * loop, the queue entries and the workers (atomic count).
 */
#ifndef SVC_PARAMS_H
#define SVC_PARAMS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "tessera.h"

#define SVC_MAX_IMAGES_PER_JOB 16
#define SVC_MAX_PROMPT_BYTES 65536
#define SVC_MAX_LORAS 16 /* per image, prompt tags included (the engine's bound) */

typedef struct svc_params {
    atomic_int refs;
    char *prompt;
    char *negative_prompt; /* NULL: none given */
    int width, height;     /* resolved: never 0 */
    int steps;
    double cfg_scale, guidance_rescale, strength;
    char *sampler;         /* NULL: the model's scheduler */
    char *scheduler;       /* NULL: the sampler's default */
    char *rng;             /* "cpu" or "cuda" */
    int clip_skip;
    uint64_t seed;         /* resolved (random when not given) */
    bool seed_random;      /* it was drawn by the server */
    int n;
    /* img2img / inpainting: the decoded pixels, and the file as sent (the
     * journal keeps it, so a job replayed after a restart decodes the same) */
    uint8_t *init_rgb, *mask_gray;
    uint8_t *init_file, *mask_file;
    size_t init_file_len, mask_file_len;
    /* the hires fix (tsr_image_params' hires_*; on when hires_scale > 0 or
     * hires_width/height > 0) and inpainting's mask_fill (A1111's
     * inpainting_fill, default 1) */
    double hires_scale, hires_strength;
    int hires_width, hires_height, hires_steps;
    char *hires_upscaler; /* NULL: "Latent" */
    int mask_fill;
    bool tiling; /* seamless tiling (tsr_image_params.tiling; A1111's `tiling`) */
    /* ComfyUI's batch noise: image i keeps `seed` and takes latent i of one
     * randn over the batch (tsr_image_params.noise_index); false: seed + i */
    bool comfy_batch_noise;
    /* LoRAs ("loras": [{name, weight, te_weight?, unet_weight?}]); names owned */
    tsr_lora_spec loras[SVC_MAX_LORAS];
    int n_loras;
} svc_params;

/* Whether p asks for the hires fix; *w x *h (may be NULL) the size its
 * first pass is upscaled to (A1111's arithmetic; its steps in *steps):
 * what the gate counts for the second pass. */
bool svc_params_hires(const svc_params *p, int *w, int *h, int *steps);

typedef struct svc_params_ctx {
    int default_size; /* the model's side for absent width/height */
    int max_size;     /* largest side accepted */
    /* the engine's check (tsr_image_params_check); NULL = skip */
    int (*check)(void *user, const tsr_image_params *p, const char **field);
    void *check_user;
} svc_params_ctx;

typedef struct svc_param_error {
    char field[64];      /* "steps", "init_image", ...; "" when not one field */
    bool from_defaults;  /* the offending value came from a batch's defaults */
    char message[512];
} svc_param_error;

/* Parse `job` (a JSON object) over `defaults` (an object or NULL).
 * Returns 0 with *out (one reference), or -1 with err filled. */
int svc_params_parse(const cJSON *job, const cJSON *defaults, const svc_params_ctx *ctx,
                     svc_params **out, svc_param_error *err);

svc_params *svc_params_ref(svc_params *p);
void svc_params_unref(svc_params *p);

/* Fill an engine parameter block for image `index` (seed + index).
 * Borrowed pointers into p. */
void svc_params_to_engine(const svc_params *p, int index, tsr_image_params *out);

/* The resolved parameters as GET /v1/jobs shows them (images as booleans). */
cJSON *svc_params_view(const svc_params *p);
/* The parameters as a request that parses back to the same svc_params
 * (seed fixed, images as base64): what the journal keeps. */
cJSON *svc_params_request(const svc_params *p);

#endif
