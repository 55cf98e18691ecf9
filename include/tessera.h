/*
 * tessera.h - the public C API of Tessera.
 *
 * Why it looks like this: callers (the CLI, the HTTP service, embedders) see
 * only opaque handles, status codes and plain structs.  Every function that
 * can fail returns a tsr_status (0 = success, negative = error class); the
 * human-readable detail of the most recent failure on the calling thread is
 * available from tsr_last_error(), so a server can fail one request with a
 * precise message instead of the process.
 *
 * Ownership: pointers marked "owned" pass ownership to the receiver;
 * "borrowed" pointers stay owned by the caller and must outlive the call.
 */
#ifndef TESSERA_H
#define TESSERA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_VERSION_MAJOR 0
#define TESSERA_VERSION_MINOR 1
#define TESSERA_VERSION_PATCH 0

/* Status codes.  Negative values are errors; tsr_strerror names them. */
typedef enum tsr_status {
    TSR_OK = 0,
    TSR_ERR_NOMEM = -1,       /* an allocation failed */
    TSR_ERR_IO = -2,          /* a file could not be opened, read or written */
    TSR_ERR_FORMAT = -3,      /* a file or payload is malformed */
    TSR_ERR_INVALID = -4,     /* an argument is out of its domain */
    TSR_ERR_UNSUPPORTED = -5, /* valid, but not implemented / not supported here */
    TSR_ERR_NOT_FOUND = -6,   /* a named tensor, file or key is missing */
    TSR_ERR_RANGE = -7,       /* a size or index is out of range (hostile sizes) */
    TSR_ERR_BACKEND = -8,     /* the compute backend failed (CUDA, cuBLAS, ...) */
    TSR_ERR_UNSAFE = -9,      /* refused on safety grounds (pickle checkpoints) */
    TSR_ERR_CANCELLED = -10,  /* work was cancelled */
    TSR_ERR_INTERNAL = -11,   /* a bug: an invariant did not hold */
} tsr_status;

/* Short, static description of a status code ("out of memory", ...). */
const char *tsr_strerror(int status);

/* Detail of the last error raised on this thread (e.g. "model.safetensors:
 * tensor 'x' ends at 4096 past the end of the file (2048 bytes)").  Never
 * NULL; empty when no error was raised.  Borrowed: valid until the next
 * error on this thread. */
const char *tsr_last_error(void);

/* Log levels.  Messages below the current level are not even formatted. */
typedef enum tsr_log_level {
    TSR_LOG_DEBUG = 0,
    TSR_LOG_INFO = 1,
    TSR_LOG_WARN = 2,
    TSR_LOG_ERROR = 3,
    TSR_LOG_NONE = 4,
} tsr_log_level;

void tsr_log_set_level(tsr_log_level level);

/* "0.1.0" */
const char *tsr_version(void);

/* ------------------------------------------------------------------------
 * Generation.
 *
 * An engine is one model loaded on one backend: its text conditioning,
 * UNet, VAE, scheduler config and preview decoder.  A batch is a set of
 * independent images in flight on an engine.  Each image has its own
 * prompt, seed, sampler, step count and guidance; images join with
 * tsr_batch_submit() and leave when finished or cancelled, between UNet
 * calls.  tsr_batch_step() runs one UNet call over up to max_rows rows
 * (classifier-free guidance takes two rows per image) of images that share
 * a latent size and prompt length, advances each of them one model
 * evaluation, and decodes those that finish.
 *
 * Reproducibility: image i of a request with seed s uses seed s + i (A1111's
 * convention); with rng "cpu" its noise is torch.randn from a CPU
 * torch.Generator seeded with that seed, so the result equals diffusers'
 * with generator=[torch.Generator("cpu").manual_seed(s + i), ...].
 *
 * Threading: an engine and its batches are used from one thread at a time.
 * ------------------------------------------------------------------------ */

typedef struct tsr_engine tsr_engine;
typedef struct tsr_batch tsr_batch;

typedef struct tsr_engine_options {
    const char *model;      /* diffusers folder or single .safetensors (borrowed) */
    const char *device;     /* "auto" (default), "cpu", "cuda", "cuda:N" */
    int threads;            /* CPU threads; 0 = all cores */
    const char *prediction; /* NULL = the model's; "epsilon" or "v" overrides */
    const char *taesd;      /* NULL, or a TAESD decoder .safetensors for previews */
    const char *tokenizer;  /* NULL/"default": transformers >= 5's CLIPTokenizer (what
                             * diffusers runs); "a1111": the slow tokenizer with ftfy, as
                             * A1111 runs it (docs/prompts.md) */
} tsr_engine_options;

void tsr_engine_options_init(tsr_engine_options *o);
/* Owned: tsr_engine_close(). */
int tsr_engine_open(const tsr_engine_options *o, tsr_engine **out);
void tsr_engine_close(tsr_engine *e);
/* Default image side for the model's family: 512 SD 1.x, 768 SD 2.x v,
 * 1024 SDXL (or the UNet's sample_size * 8 when it says otherwise). */
int tsr_engine_default_size(const tsr_engine *e);
/* "SD1.x", "SD2.x", "SDXL" */
const char *tsr_engine_family(const tsr_engine *e);
/* The backend in use, e.g. "cpu (2 threads)". */
const char *tsr_engine_device(const tsr_engine *e);
/* Whether the UNet is an inpainting UNet (9 input channels). */
int tsr_engine_is_inpainting(const tsr_engine *e);

#define TSR_MIN_SIZE 64
#define TSR_MAX_SIZE 4096
#define TSR_MAX_STEPS 1000

typedef struct tsr_image_params {
    const char *prompt;          /* UTF-8, A1111 syntax (copied at submit) */
    const char *negative_prompt; /* NULL = none given (diffusers' behaviour) */
    int width, height;           /* multiples of 8; 0 = model default */
    int steps;                   /* 1..1000 (default 30) */
    double cfg_scale;            /* default 7.5; <= 1 disables guidance */
    double guidance_rescale;     /* 0..1 (default 0) */
    const char *sampler;         /* NULL = the model's scheduler; short, diffusers
                                  * or A1111 name ("dpmpp_2m", "DPM++ 2M Karras") */
    const char *schedule;        /* NULL = sampler/model default; "karras", ... */
    uint64_t seed;
    const char *rng;             /* "cpu" (default) or "cuda" */
    int clip_skip;               /* 1 (default) = the family's default layer */
    double eta;                  /* DDIM eta (default 0) */
    /* img2img: RGB 8-bit, width*height*3, borrowed until submit returns */
    const uint8_t *init_image;
    double strength;             /* (0, 1], default 0.75 with an init image */
    /* inpainting (9-channel models): gray 8-bit, width*height; >= 128 = repaint */
    const uint8_t *mask;
    /* SDXL micro-conditioning; 0 = diffusers' defaults (the image size, 0) */
    int original_width, original_height, crop_top, crop_left, target_width, target_height;
} tsr_image_params;

void tsr_image_params_init(tsr_image_params *p);

/* Per-evaluation progress, given to the step callback.  Pointers are
 * borrowed for the duration of the call. */
typedef struct tsr_step_info {
    int job;
    int step, steps;           /* user-visible steps done / total */
    double timestep;
    int preview_width, preview_height; /* the latent size (1/8 of the image for SD) */
    const uint8_t *preview_rgb;        /* RGB 8-bit, or NULL when previews are off */
    const float *x0;           /* the x0 prediction, latent NHWC */
    int latent_height, latent_width, latent_channels;
} tsr_step_info;

typedef void (*tsr_step_fn)(void *user, const tsr_step_info *info);

/* max_rows: UNet rows per call (1..64; 16 images with guidance = 32). */
int tsr_batch_create(tsr_engine *e, int max_rows, tsr_batch **out);
void tsr_batch_free(tsr_batch *b);
/* Called after every model evaluation of every image (borrowed user). */
void tsr_batch_set_callback(tsr_batch *b, tsr_step_fn fn, void *user, int previews);
/* Validate, encode the prompts and draw the initial noise; *job is the new
 * image's id.  Fails (and adds nothing) on any bad parameter. */
int tsr_batch_submit(tsr_batch *b, const tsr_image_params *p, int *job);
/* One UNet call (see above).  *finished gets the number of images that
 * completed in it (may be NULL).  Returns TSR_OK with nothing to do when no
 * image is active. */
int tsr_batch_step(tsr_batch *b, int *finished);
int tsr_batch_cancel(tsr_batch *b, int job);
/* Images still being denoised. */
int tsr_batch_active(const tsr_batch *b);

typedef struct tsr_result {
    int job;
    int status;         /* TSR_OK, or why the image failed / was cancelled */
    int width, height;
    uint8_t *rgb;       /* owned by the caller after take: free() */
    char *parameters;   /* A1111 infotext, owned: free() */
    uint64_t seed;
} tsr_result;

/* Take a finished (or failed/cancelled) image out of the batch; returns
 * TSR_ERR_NOT_FOUND when `job` is unknown or still running. */
int tsr_batch_take(tsr_batch *b, int job, tsr_result *out);
void tsr_result_free(tsr_result *r);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_H */
