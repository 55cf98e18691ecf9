/*
 * service/api/a1111/a1111.h - the AUTOMATIC1111-compatible API (/sdapi/v1/...),
 * docs/compat-a1111.md.
 *
 * Two halves:
 * - the translator (a1111_params.c): an A1111 txt2img / img2img body
 *   to the native job object that svc_params_parse reads, plus what the
 *   answer needs (seeds, the echoed `parameters`, names for `info`).  It
 *   needs no server nor engine, so fuzz/fuzz_a1111.c runs it alone.
 * - the routes (a1111.c, a1111_info.c): txt2img/img2img block
 *   their request until their native jobs are final (svc_job_watch), the
 *   progress/interrupt/skip calls, and the read-only lists.
 *
 * A call of batch_size * n_iter images becomes ceil(total / 16) native jobs
 * (SVC_MAX_IMAGES_PER_JOB) of consecutive seeds, submitted together, so they
 * share the queue and the UNet calls with every other job.
 */
#ifndef SVC_COMPAT_A1111_H
#define SVC_COMPAT_A1111_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "params.h"

struct svc_server;

/* Images one txt2img/img2img call may ask for (batch_size * n_iter). */
#define SVC_A1111_MAX_IMAGES 64

typedef struct svc_a1111_error {
    int status;          /* 422 (a field's value) or 400 */
    char field[64];      /* A1111's name of the offending field; "" when none */
    char message[512];
} svc_a1111_error;

/* What the translator resolved (owned pointers freed by svc_a1111_req_free). */
typedef struct svc_a1111_req {
    bool img2img;
    bool hires;          /* txt2img with enable_hr */
    double hr_scale;     /* with hires: A1111's hr_* as honoured (info's extra params) */
    int hr_resize_x, hr_resize_y, hr_steps;
    char hr_upscaler[72]; /* "" = not given */
    cJSON *native;       /* the native job object without "n" and "seed" */
    cJSON *parameters;   /* A1111's `parameters`: the request over its defaults */
    int batch_size, n_iter, total;
    uint64_t seed;       /* resolved: seed of image 0 */
    bool seed_random;
    int64_t subseed;     /* resolved (random for -1); reported, not used */
    double subseed_strength;
    char sampler_name[64];  /* A1111's name of the sampler ("Euler a") */
    char scheduler[32];     /* A1111's scheduler name ("Automatic", "Karras") */
    bool schedule_in_name;  /* it came from sampler_name ("DPM++ 2M Karras") */
    char *prompt, *negative_prompt; /* borrowed from native */
    int width, height, steps, clip_skip;
    double cfg_scale, denoising_strength;
    bool send_images, save_images;
    cJSON *styles;       /* borrowed from parameters: array or NULL */
} svc_a1111_req;

/* Server-side defaults the translator applies (POST /sdapi/v1/options). */
typedef struct svc_a1111_defaults {
    int clip_skip;       /* CLIP_stop_at_last_layers; 1 = the last layer */
    int max_size;        /* largest side; 0 = TSR_MAX_SIZE */
} svc_a1111_defaults;

/* Translate an A1111 body (a JSON object).  0 with *out filled, or -1 with
 * err (out is then empty).  Random seeds are drawn here. */
int svc_a1111_translate(const cJSON *body, bool img2img, const svc_a1111_defaults *d,
                        svc_a1111_req *out, svc_a1111_error *err);
void svc_a1111_req_free(svc_a1111_req *q);

/* The native object for chunk k (images 16k ..): "n" and "seed" added. */
cJSON *svc_a1111_chunk(const svc_a1111_req *q, int k, int *n_out);
int svc_a1111_chunks(const svc_a1111_req *q);

/* A base64 image (or data: URL) for the native object, at w x h
 * (a1111_image.c): resized, inverted (masks) and re-encoded as PNG
 * when needed, else the file as sent.  *out: malloc'd base64.  0, -1 (bad
 * image: err says why, naming `field`) or -2 (out of memory). */
int svc_a1111_image(const char *field, const char *b64, int channels, int w, int h, bool invert,
                    char **out, char *err, size_t err_size);

/* A1111's name for a native parameter error's field ("sampler" ->
 * "sampler_name", "strength" -> "denoising_strength", ...). */
const char *svc_a1111_field(const char *native_field);

/* A sampler name as A1111 spells it ("Euler a", "DPM++ 2M Karras",
 * "k_euler_a", or Tessera's "euler_a") to Tessera's sampler and schedule
 * names; *schedule is NULL when the name carries none.  false: unknown. */
bool svc_a1111_sampler(const char *name, const char **sampler, const char **a1111_name,
                       const char **schedule);
/* A scheduler name ("Automatic", "karras", "SGM Uniform") to Tessera's
 * ("default", ...) and A1111's label.  false: unknown. */
bool svc_a1111_schedule(const char *name, const char **schedule, const char **label);

/* ---- routes (a1111.c, a1111_info.c) ---- */
struct svc_req;
/* An error in Tessera's shape plus FastAPI's "detail" (ends r;
 * http/reply.c renders it). */
#define svc_a1111_reply_error(r, status, code, field, ...)                                    \
    svc_reply_errorf((r), SVC_DIALECT_A1111, (status), (code), (field), __VA_ARGS__)
/* The routes (http/router.c's table; rest is the path after /sdapi/v1).
 * POST /txt2img and /img2img (generate), /interrupt and /skip (stop);
 * GET /progress (a1111.c). */
void svc_a1111_generate(struct svc_req *r, const char *rest);
void svc_a1111_stop(struct svc_req *r, const char *rest);
void svc_a1111_progress(struct svc_req *r, const char *rest);
/* GET /options, /samplers, /schedulers, /sd-models, /cmd-flags, /memory;
 * POST /options (a1111_info.c). */
void svc_a1111_options(struct svc_req *r, const char *rest);
void svc_a1111_set_options(struct svc_req *r, const char *rest);
void svc_a1111_samplers(struct svc_req *r, const char *rest);
void svc_a1111_schedulers(struct svc_req *r, const char *rest);
void svc_a1111_sd_models(struct svc_req *r, const char *rest);
/* GET /sdapi/v1/loras: the LoRAs of --lora-dir (docs/lora.md). */
void svc_a1111_loras(struct svc_req *r, const char *rest);
/* GET /sdapi/v1/embeddings: --embeddings-dir's textual inversion (a1111_embeddings.c). */
void svc_a1111_embeddings(struct svc_req *r, const char *rest);
void svc_a1111_cmd_flags(struct svc_req *r, const char *rest);
void svc_a1111_memory(struct svc_req *r, const char *rest);
/* POST /extra-single-image, /extra-batch-images, /png-info (a1111_extras.c). */
void svc_a1111_extra_single(struct svc_req *r, const char *rest);
void svc_a1111_extra_batch(struct svc_req *r, const char *rest);
void svc_a1111_png_info(struct svc_req *r, const char *rest);
/* The lists clients probe, answered with a fixed value: rest is one of
 * them for GET (is_fixed_get) or a no-op POST (is_fixed_post). */
void svc_a1111_fixed(struct svc_req *r, const char *rest);
bool svc_a1111_is_fixed_get(const char *rest);
bool svc_a1111_is_fixed_post(const char *rest);
/* Server-wide options state (the one instance lives in svc_server). */
typedef struct svc_a1111 svc_a1111;
svc_a1111 *svc_a1111_state(struct svc_server *s);
void svc_a1111_free(struct svc_server *s);
int svc_a1111_clip_skip(struct svc_server *s);
void svc_a1111_set_clip_skip(struct svc_server *s, int v);
/* The options store (a1111_options.c): the values POST /options set, read
 * from the data dir when the state is made (svc_a1111_state, at start);
 * borrowed from the state. */
cJSON *svc_a1111_options_load(struct svc_server *s);
cJSON *svc_a1111_options_set(struct svc_server *s);
/* "demo [0123456789]" as A1111 titles the checkpoint (a1111_info.c). */
void svc_a1111_model_title(struct svc_server *s, char *buf, size_t size);

#endif
