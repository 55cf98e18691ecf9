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

/* Route the library's log lines (already formatted, no trailing newline) to
 * a function instead of stderr; NULL restores stderr.  `user` is borrowed.
 * The function may be called from any thread that uses the library (the
 * caller's, the CPU backend's loader threads), possibly concurrently: it
 * must be thread-safe and must not call back into the library. */
typedef void (*tsr_log_fn)(void *user, tsr_log_level level, const char *message);
void tsr_log_set_callback(tsr_log_fn fn, void *user);

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
    const char *precision;  /* NULL/"f32": f32 everywhere (images equal diffusers');
                             * "bf16": the CPU's opt-in fast mode on AVX512_BF16 (weights
                             * stored bf16, conv/linear products in bf16 with f32 sums;
                             * device auto or cpu; docs/perf.md gives its error) */
    const char *lora_dir;   /* NULL = no LoRAs; the folder LoRA names resolve in */
    int lora_cache_mb;      /* loaded LoRAs kept up to this many MiB (LRU); 0 = 1024 */
    const char *embeddings_dir; /* NULL = none; textual-inversion *.safetensors, used when
                                 * their name is in a prompt (docs/lora.md "Embeddings");
                                 * read at open and again when the folder changes */
} tsr_engine_options;

void tsr_engine_options_init(tsr_engine_options *o);
/* Owned: tsr_engine_close(). */
int tsr_engine_open(const tsr_engine_options *o, tsr_engine **out);
/* A second engine of src's model on o->device (o->model is ignored) that
 * borrows src's weights instead of reading the checkpoint again: one copy
 * of the weights in host memory for several CPU devices (docs/multi-gpu.md
 * part 2).  Both must be on host-memory backends with the same weight
 * dtype, or both on CUDA devices: then the replica gets its own copy by
 * broadcast (below; TSR_ERR_UNSUPPORTED otherwise, or where NCCL is
 * missing: open it with tsr_engine_open).
 * The replica has its own threads, scratch, caches, LoRAs and embeddings,
 * so src and replica may run on different threads at once.  src stays
 * allocated until it and all its replicas are closed, in any order.
 * Owned: tsr_engine_close(). */
int tsr_engine_open_replica(tsr_engine *src, const tsr_engine_options *o, tsr_engine **out);
void tsr_engine_close(tsr_engine *e);

/* Replicas whose weights come by broadcast (docs/multi-gpu.md part 2): the
 * checkpoint is read once, by the source engine (rank 0), and every other
 * rank's replica gets its own copy of the weights (its arenas, the
 * source's tensor table rebased onto them) through one broadcast per
 * component.  How GPUs share one read (NCCL); CPU devices can do it too
 * (the host comm), though borrowing (tsr_engine_open_replica) is cheaper
 * there.  tsr_engine_open_replica on a GPU source uses this itself.
 *
 * A group of n ranks (1..64), rank r on devices[r] ("cuda:N" for every rank:
 * NCCL, one device each; "cpu"/"cpu-f16"/...: the host comm), made by one
 * thread; then each rank runs on a thread of its own: rank 0 calls
 * tsr_replica_group_send with the source engine while every other rank
 * calls tsr_engine_open_replica_bcast.  In a group of one, rank 0 is itself
 * a replica on the source's device (its broadcast copies the source's
 * weights).  A rank that will not take part calls tsr_replica_group_abort:
 * its peers fail at once instead of after the timeout (timeout_s <= 0: the
 * default, 30 s or $TSR_COMM_TIMEOUT_S).  Errors are the comm's, naming op
 * and rank ("broadcast (rank 1 of 2): rank 0 left the group: ...");
 * TSR_ERR_UNSUPPORTED when the group cannot be made (no NCCL, devices of two
 * kinds).  A group serves one round of opens.  Owned:
 * tsr_replica_group_destroy, once no rank is inside a call. */
typedef struct tsr_replica_group tsr_replica_group;
int tsr_replica_group_create(const char *const *devices, int n, double timeout_s,
                             tsr_replica_group **out);
void tsr_replica_group_destroy(tsr_replica_group *g);
int tsr_replica_group_size(const tsr_replica_group *g);
/* "nccl", "host" or "self" */
const char *tsr_replica_group_kind(const tsr_replica_group *g);
/* Rank 0: src's weights to every other rank; returns once they have them
 * (src is unchanged and usable either way). */
int tsr_replica_group_send(tsr_replica_group *g, tsr_engine *src);
/* Rank `rank` (1..n-1; 0 in a group of one): a replica of src's model on
 * o->device (which must be the rank's device) with its own copy of src's
 * weights.  It holds no reference on src: either may be closed first once
 * this returns.  A failure leaves the group (the peers fail too).  Owned:
 * tsr_engine_close(). */
int tsr_engine_open_replica_bcast(tsr_replica_group *g, int rank, tsr_engine *src,
                                  const tsr_engine_options *o, tsr_engine **out);
void tsr_replica_group_abort(tsr_replica_group *g, int rank, const char *why);
/* Default image side for the model's family: 512 SD 1.x, 768 SD 2.x v,
 * 1024 SDXL (or the UNet's sample_size times the VAE factor when it says
 * otherwise, as models/demo: 16 x 8 = 128). */
int tsr_engine_default_size(const tsr_engine *e);
/* "SD1.x", "SD2.x", "SDXL" */
const char *tsr_engine_family(const tsr_engine *e);
/* The backend in use, e.g. "cpu (2 threads)". */
const char *tsr_engine_device(const tsr_engine *e);
/* Whether the UNet is an inpainting UNet (9 input channels). */
int tsr_engine_is_inpainting(const tsr_engine *e);
/* The model's name for humans and infotexts: the file or folder stem. */
const char *tsr_engine_model_name(const tsr_engine *e);
/* A1111's short model hash ("AutoV2", 10 hex digits) of a single-file
 * checkpoint, computed once at open; "" for folders. */
const char *tsr_engine_model_hash(const tsr_engine *e);

/* The samplers and schedules every engine offers (static tables, never
 * freed).  Any of a sampler's names is accepted where a sampler is asked
 * for; an A1111 name may carry a schedule ("DPM++ 2M Karras"). */
typedef struct tsr_sampler_desc {
    const char *name;           /* short name: "euler_a" */
    const char *a1111;          /* A1111's name: "Euler a" */
    const char *diffusers;      /* the diffusers class it matches */
    unsigned schedules;         /* bit i set: offers tsr_schedules()[i] */
} tsr_sampler_desc;
typedef struct tsr_schedule_desc {
    const char *name;           /* "default", "karras", "exponential", "sgm_uniform" */
    const char *a1111;          /* A1111's scheduler name: "Automatic", "Karras", ... */
} tsr_schedule_desc;
/* Return the number of entries; *out gets the table. */
int tsr_samplers(const tsr_sampler_desc **out);
int tsr_schedules(const tsr_schedule_desc **out);

#define TSR_MIN_SIZE 64
#define TSR_MAX_SIZE 4096
#define TSR_MAX_STEPS 1000

/* One LoRA of an image: its name in lora_dir and its multipliers. */
typedef struct tsr_lora_spec {
    const char *name;   /* file stem: [^/\\:] without "..", not starting with '.' */
    double unet_weight; /* the UNet's deltas times this */
    double te_weight;   /* the text encoders' deltas times this */
} tsr_lora_spec;

/* The LoRA names in `dir`: stems of its *.safetensors files that are valid
 * names and resolve inside it (links followed), sorted.  *names owned:
 * tsr_lora_list_free.  A1111's /sdapi/v1/loras lists these. */
int tsr_lora_list(const char *dir, char ***names, int *n);
void tsr_lora_list_free(char **names, int n);

/* The textual-inversion embeddings of the engine's embeddings_dir, read
 * from the folder now (callable from any thread: it touches nothing the
 * engine's own thread uses), sorted by name; A1111's /sdapi/v1/embeddings
 * lists these.  Owned: tsr_embedding_info_free. */
typedef struct tsr_embedding_info {
    char *name;    /* file stem: the word a prompt uses */
    int loaded;    /* 1 = fits this model; 0 = skipped, `error` says why */
    int vectors;   /* tokens it stands for; 0 when unknown */
    int shape;     /* vector width, summed over the text encoders (768, 2048); 0 unknown */
    char hash[13]; /* A1111's TI hash (SHA-256 of the file, 12 hex digits); "" skipped */
    char *error;   /* NULL when loaded */
} tsr_embedding_info;
int tsr_engine_embeddings(const tsr_engine *e, tsr_embedding_info **out, int *n);
void tsr_embedding_info_free(tsr_embedding_info *a, int n);

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
    /* inpainting: gray 8-bit, width*height; >= 128 = repaint.  9-channel
     * inpainting models see it in their input; ordinary (4-channel) models
     * inpaint as diffusers' StableDiffusionInpaintPipeline does: after every
     * evaluation the init image's latents, noised to the next level, replace
     * the latents outside the mask.  The result is not pasted over the init
     * image (the CLI's --mask-blur does that). */
    const uint8_t *mask;
    /* SDXL micro-conditioning; 0 = diffusers' defaults (the image size, 0) */
    int original_width, original_height, crop_top, crop_left, target_width, target_height;
    /* LoRAs (docs/lora.md): files "<name>.safetensors" in the engine's
     * lora_dir, besides the prompt's <lora:name:w> tags (borrowed until
     * submit; at most 16 in all; a bad one fails with field "loras") */
    const struct tsr_lora_spec *loras;
    int n_loras;
    /* hires fix (A1111's): after the last step, the latents are upscaled and
     * denoised again as an img2img image at the larger size (docs/api.md,
     * "Hires fix").  On when hires_scale > 0 or hires_width/height > 0;
     * txt2img only.  The second pass runs hires_steps (0 = steps) steps of a
     * schedule of int(hires_steps / min(hires_strength, 0.999)) steps, with
     * noise drawn afresh from the image's seed at the new size. */
    double hires_scale;          /* final size int(width * s) x int(height * s) */
    int hires_width, hires_height; /* A1111's hr_resize_x/y (0 = from the other / the scale) */
    int hires_steps;             /* 0 = steps */
    double hires_strength;       /* (0, 1], default 0.7 */
    const char *hires_upscaler;  /* NULL = "Latent"; "Latent (antialiased)", "Latent (bicubic)",
                                  * "Latent (bicubic antialiased)", "Latent (nearest)",
                                  * "Latent (nearest-exact)", "Lanczos", "None" (copied) */
    /* inpainting: A1111's inpainting_fill, what the masked area starts from:
     * 0 fill (blurred surroundings), 1 original (default), 2 latent noise,
     * 3 latent nothing */
    int mask_fill;
    /* seamless tiling (A1111's `tiling`): 1 = every padded convolution of
     * the UNet and the VAE pads circularly, so the image's left and right
     * (and top and bottom) edges continue each other; 0 (default) = off */
    int tiling;
    /* ComfyUI's batch noise (docs/samplers.md, "Seed convention"): 0
     * (default) = the seed's own first draw; i > 0 = latent i of one
     * torch.randn over i + 1 latents from the seed (txt2img and the hires
     * pass), so image i of a ComfyUI batch is made with `seed` and i. 0..4095 */
    int noise_index;
} tsr_image_params;

void tsr_image_params_init(tsr_image_params *p);

/* Check parameters against an engine without touching any batch: the same
 * checks and messages tsr_batch_submit gives (sizes, steps, guidance,
 * sampler and schedule names, rng, clip skip against the text encoder's
 * depth, strength, init image and mask against the model).  `field` (may be
 * NULL) gets the name of the offending parameter - "width", "height",
 * "steps", "cfg_scale", "guidance_rescale", "sampler", "scheduler", "rng",
 * "clip_skip", "eta", "prompt", "negative_prompt", "strength", "init_image",
 * "mask", "hires_scale", "hires_width", "hires_height", "hires_steps",
 * "hires_strength", "hires_upscaler", "mask_fill", "tiling", "noise_index" - or NULL.  Reads only
 * what is fixed at tsr_engine_open, so a server may call it on its own
 * thread while a worker steps a batch of the same engine. */
int tsr_image_params_check(const tsr_engine *e, const tsr_image_params *p, const char **field);

/* ------------------------------------------------------------------------
 * Batches.
 *
 * Life of an image (tsr_image_state):
 *   QUEUED     submitted: parameters checked and copied, nothing computed
 *   ENCODING   the prepare phase: prompts encoded, init image VAE-encoded,
 *              initial noise drawn (run by tsr_batch_step before a UNet
 *              call, timed separately: tsr_image_info.prepare_seconds)
 *   DENOISING  taking part in UNet calls
 *   DECODING   all steps done; the VAE decodes it (in chunks of at most
 *              max_decode_images, tiled above max_decode_pixels)
 *   DONE / FAILED / CANCELLED   final; the result waits for tsr_batch_take
 *
 * Bounds: a batch holds at most max_images images in any state until they are
 * taken; submit fails with TSR_ERR_RANGE past that.  The batch's own buffers
 * and the UNet/VAE workspaces are released when the batch runs empty, so a
 * burst of large images does not pin their memory afterwards.
 * tsr_engine_memory_estimate() gives the peak a step can need.
 * ------------------------------------------------------------------------ */

typedef enum tsr_image_state {
    TSR_IMAGE_QUEUED = 0,
    TSR_IMAGE_ENCODING = 1,
    TSR_IMAGE_DENOISING = 2,
    TSR_IMAGE_DECODING = 3,
    TSR_IMAGE_DONE = 4,
    TSR_IMAGE_FAILED = 5,
    TSR_IMAGE_CANCELLED = 6,
} tsr_image_state;

/* "queued", "encoding", "denoising", "decoding", "done", "failed", "cancelled" */
const char *tsr_image_state_name(tsr_image_state s);

/* Previews given to the step callback. */
typedef enum tsr_preview_mode {
    TSR_PREVIEW_NONE = 0,
    TSR_PREVIEW_LATENT = 1, /* latent size (1/8 of the image): cheapest */
    TSR_PREVIEW_IMAGE = 2,  /* image size (linear map upscaled, or TAESD) */
} tsr_preview_mode;

typedef struct tsr_batch_options {
    int max_rows;          /* UNet rows per call, 1..64; default 32 (16 images with guidance) */
    int max_images;        /* images held in any state until taken; default 256, 1..65536 */
    int max_decode_images; /* images per VAE decode call; default 4 */
    long long max_decode_pixels; /* images larger than this (w*h) decode in tiles; default 1048576 */
} tsr_batch_options;

void tsr_batch_options_init(tsr_batch_options *o);

/* Per-evaluation progress, given to the step callback.  Pointers are
 * borrowed for the duration of the call. */
typedef struct tsr_step_info {
    int image;
    tsr_image_state state;     /* DENOISING after an evaluation; DONE or FAILED
                                * once when the image reaches it (a cancel is
                                * the caller's own act and is not reported) */
    int status;                /* why it failed (FAILED/CANCELLED), else TSR_OK */
    int step, steps;           /* user-visible steps done / total */
    double timestep;
    int preview_width, preview_height; /* latent or image size, per tsr_preview_mode */
    const uint8_t *preview_rgb;        /* RGB 8-bit, or NULL when previews are off */
    const float *x0;           /* the x0 prediction, latent NHWC (NULL once final) */
    int latent_height, latent_width, latent_channels;
} tsr_step_info;

/* The step callback runs on the thread inside tsr_batch_step.  From inside
 * it the callback may call, on the same batch: tsr_batch_submit (the image
 * joins at the next step), tsr_batch_cancel (any image, including the one
 * reported: it leaves before the next UNet call; its memory is kept until
 * the step returns), tsr_batch_take (images in a final state; the one
 * reported once it is final), tsr_batch_image_info, tsr_batch_active,
 * tsr_batch_stats.  It must not call tsr_batch_step (which then fails with
 * TSR_ERR_INVALID) or tsr_batch_free. */
typedef void (*tsr_step_fn)(void *user, const tsr_step_info *info);

/* o NULL = defaults.  Owned: tsr_batch_free(). */
int tsr_batch_create(tsr_engine *e, const tsr_batch_options *o, tsr_batch **out);
void tsr_batch_free(tsr_batch *b);
/* Called after every model evaluation of every image, and once when an
 * image reaches DONE or FAILED (borrowed user).  previews: tsr_preview_mode;
 * with a TAESD decoder on the engine, previews come from it at image size
 * in either mode. */
void tsr_batch_set_callback(tsr_batch *b, tsr_step_fn fn, void *user, int previews);
/* Check and copy the parameters (init image and mask included); *image is the
 * new image's id (> 0).  Fails, naming the field, and adds nothing on any
 * bad parameter or when the batch already holds max_images images. */
int tsr_batch_submit(tsr_batch *b, const tsr_image_params *p, int *image);
/* Run the prepare phase (ENCODING) of up to max_images queued images, oldest
 * first (max_images <= 0: all).  tsr_batch_step calls it itself for the
 * queued images that can fill its rows; call it explicitly to move prompt
 * encoding out of the next step.  *prepared (may be NULL) gets the count.
 * An image whose preparation fails becomes FAILED; that is not an error of
 * this call. */
int tsr_batch_prepare(tsr_batch *b, int max_images, int *prepared);
/* One UNet call (see above).  *finished gets the number of images that
 * reached a final state in it (may be NULL).  Returns TSR_OK with nothing to
 * do when no image is queued or denoising.  A failing UNet call fails the
 * images in it (they report FAILED) and returns the error; the batch stays
 * usable. */
int tsr_batch_step(tsr_batch *b, int *finished);
/* Cancel a queued or running image: it becomes CANCELLED at once (its slot
 * is free for the next UNet call).  TSR_ERR_NOT_FOUND for an unknown id;
 * TSR_ERR_INVALID when it is already final. */
int tsr_batch_cancel(tsr_batch *b, int image);
/* Images queued, encoding, denoising or decoding. */
int tsr_batch_active(const tsr_batch *b);

typedef struct tsr_image_info {
    int image;
    tsr_image_state state;
    int status;                /* TSR_OK, or why it failed / was cancelled */
    int step, steps;           /* user-visible steps done / total (0/steps while queued) */
    int width, height;
    uint64_t seed;
    double prepare_seconds;    /* the prepare phase */
    double denoise_seconds;    /* wall time of the UNet calls it took part in (incl. its sampler) */
    double decode_seconds;     /* its share of the VAE decode */
} tsr_image_info;

/* TSR_ERR_NOT_FOUND for an unknown (or already taken) id. */
int tsr_batch_image_info(const tsr_batch *b, int image, tsr_image_info *out);

typedef struct tsr_batch_stats {
    uint64_t unet_calls;       /* since creation */
    uint64_t unet_rows;        /* rows summed over those calls */
    uint64_t images_evaluated; /* image evaluations summed over those calls */
    int last_call_images, last_call_rows;
    double last_call_seconds;  /* the UNet forward of the last call */
    double unet_seconds, prepare_seconds, decode_seconds; /* totals */
    int queued, running, finished; /* images now: queued/encoding, denoising/decoding, final */
} tsr_batch_stats;

void tsr_batch_stats_get(const tsr_batch *b, tsr_batch_stats *out);

/* ------------------------------------------------------------------------
 * CFG-parallel: one batch's UNet rows split over several engines
 * (docs/multi-gpu.md part 4).
 *
 * A group joins n engines (2..8, each on its own device, e.g. a CPU engine
 * and its tsr_engine_open_replica).  Each engine runs its own batch,
 * attached to its rank with tsr_batch_set_cfg_group, on its own thread, and
 * the n batches are driven in lockstep: the same images submitted in the
 * same order, the same cancels between the same steps, tsr_batch_step
 * called as often.  Each step every rank lays out the call's rows ([uncond,
 * cond] per image), runs the UNet on its contiguous share of them (rank r:
 * rows r*k .. r*k+k-1, k = ceil(rows / n); one image with guidance: rank 0
 * the unconditional row, rank 1 the conditional one), and one all_gather
 * gives every rank the whole noise prediction; every rank then applies the
 * same guidance and sampler step, so all hold the same latents.  Rank 0
 * decodes and makes previews; on the other ranks an image that finishes
 * becomes DONE without pixels (tsr_result.rgb NULL).  On CPU engines the
 * image equals the one-engine run byte for byte.
 *
 * Errors: a rank whose UNet call fails tells its peers in the same
 * all_gather, so every rank fails the call's images with that rank's
 * message; a rank that stops calling makes its peers fail within the
 * timeout (default 30 s, $TSR_COMM_TIMEOUT_S) with an error naming the op
 * and the rank ("all_gather (rank 0 of 2): peer rank 1 did not arrive
 * within 30 s"); ranks out of lockstep fail with "ranks disagree".  After
 * a timeout or an abort the group is broken: every later grouped step fails
 * at once; make a new group.
 * ------------------------------------------------------------------------ */
typedef struct tsr_cfg_group tsr_cfg_group;

/* engines borrowed (they must outlive the group); timeout_s <= 0: the
 * default.  Owned: tsr_cfg_group_destroy, once no batch steps with it. */
int tsr_cfg_group_create(tsr_engine *const *engines, int n, double timeout_s,
                         tsr_cfg_group **out);
void tsr_cfg_group_destroy(tsr_cfg_group *g);
int tsr_cfg_group_size(const tsr_cfg_group *g);
/* Rank `rank` leaves for good (its device failed): its peers' steps fail
 * at once with "rank R left the group: why".  Any thread. */
void tsr_cfg_group_abort(tsr_cfg_group *g, int rank, const char *why);
/* 1 when broken (*reason borrowed, may be NULL; *blame: bit r = rank r to
 * blame, 0 when nobody in particular), else 0. */
int tsr_cfg_group_broken(const tsr_cfg_group *g, const char **reason, uint64_t *blame);
/* Attach an empty batch to rank `rank` of g (g NULL: detach; the batch
 * runs alone again).  TSR_ERR_INVALID while the batch holds images or
 * when the batch's engine is not the group's engine of that rank. */
int tsr_batch_set_cfg_group(tsr_batch *b, tsr_cfg_group *g, int rank);
/* After a grouped tsr_batch_step failed: the ranks to blame (bit r), 0
 * when it did not fail or nobody in particular is (ranks disagree).  A
 * server tells its own device's failure (its bit) from a peer's. */
uint64_t tsr_batch_cfg_blame(const tsr_batch *b);

typedef struct tsr_result {
    int image;
    int status;         /* TSR_OK, or why the image failed / was cancelled */
    int width, height;
    uint8_t *rgb;       /* owned by the caller after take: free(); NULL unless TSR_OK */
    char *parameters;   /* A1111 infotext, owned: free(); NULL unless TSR_OK */
    uint64_t seed;
} tsr_result;

/* Take an image in a final state (DONE, FAILED, CANCELLED) out of the batch;
 * returns TSR_ERR_NOT_FOUND when `image` is unknown or not final. */
int tsr_batch_take(tsr_batch *b, int image, tsr_result *out);
void tsr_result_free(tsr_result *r);

/* Upper bound, in bytes, of the memory one tsr_batch_step of `images`
 * images of width x height (cfg: with guidance, two rows each) can add on
 * top of the loaded engine: UNet workspace for those rows + the batch's
 * row buffers + VAE decode workspace for one decode chunk + per-image state.
 * The UNet and VAE terms come from their planning passes, so they are exact
 * for this engine's backend and model.  docs/api.md gives the formula.
 * Reads only what is fixed at tsr_engine_open, so a server may call it on
 * its own thread while a worker steps a batch of the same engine (as
 * tsr_image_params_check). */
int tsr_engine_memory_estimate(tsr_engine *e, const tsr_batch_options *o, int images, int width,
                               int height, int cfg, size_t *bytes);
/* The memory of the engine's device in all, in bytes: the GPU's for CUDA;
 * for the CPU the host's RAM, or its cgroup's limit when that is lower.
 * 0 when unknown.  With tsr_engine_memory_estimate it tells a server what
 * this device can never run (the estimate alone is larger). */
size_t tsr_engine_device_memory(const tsr_engine *e);

/* ------------------------------------------------------------------------
 * Utilities an embedder needs beside generation.
 * ------------------------------------------------------------------------ */

/* Images in memory: a PNG or JPEG (init images and masks as a client sends
 * them) decoded to 8-bit pixels, channels 3 (RGB), 1 (gray) or 4 (RGBA: an
 * image without alpha gets 255; the OpenAI edits route reads masks so), sides up to
 * max_side (0 = TSR_MAX_SIZE); sizes are checked before anything is
 * allocated.  *pixels owned: free().  The message (tsr_last_error) says
 * what is wrong ("not a PNG or JPEG image", "PNG: ...", "... 5000x10:
 * larger than 4096"). */
int tsr_image_decode(const void *data, size_t len, int channels, int max_side, uint8_t **pixels,
                     int *width, int *height);
/* An RGB image as PNG bytes with an optional A1111 `parameters` text chunk,
 * byte for byte what `tessera generate` writes.  *png owned: free(). */
int tsr_image_encode_png(const uint8_t *rgb, int width, int height, const char *parameters,
                         uint8_t **png, size_t *len);

/* Resampling filters for tsr_image_resample: Pillow's Image.NEAREST and
 * Image.LANCZOS (the Lanczos pixels equal Pillow's, tests/image/). */
typedef enum tsr_resample { TSR_RESAMPLE_NEAREST = 0, TSR_RESAMPLE_LANCZOS = 1 } tsr_resample;

/* An 8-bit image (channels 1, 3 or 4, rows without padding) resampled to
 * out_width x out_height, each side up to max_side (0 = TSR_MAX_SIZE; at
 * most 16384), checked before anything is allocated.  *out owned: free(). */
int tsr_image_resample(const uint8_t *pixels, int width, int height, int channels,
                       int out_width, int out_height, int max_side, tsr_resample filter,
                       uint8_t **out);

/* The A1111 infotext a PNG carries: its "parameters" text chunk (the last
 * one, as PIL's info keeps), *text NULL when it has none.  Not a PNG, or a
 * damaged one: an error.  *text owned: free(). */
int tsr_image_png_parameters(const void *data, size_t len, char **text);

/* SHA-256 (FIPS 180-4): content hashes for ETags and content-addressed
 * storage.  The same code hashes checkpoints for the A1111 infotext. */
typedef struct tsr_sha256_ctx {
    uint32_t state[8];
    uint64_t bytes;     /* total bytes hashed so far */
    uint8_t block[64];  /* pending partial block */
    size_t fill;        /* bytes in `block` */
} tsr_sha256_ctx;

void tsr_sha256_init(tsr_sha256_ctx *ctx);
void tsr_sha256_update(tsr_sha256_ctx *ctx, const void *data, size_t len);
void tsr_sha256_final(tsr_sha256_ctx *ctx, uint8_t digest[32]);
/* One-shot helpers.  hex: 65 bytes (64 lowercase digits + NUL). */
void tsr_sha256(const void *data, size_t len, uint8_t digest[32]);
void tsr_sha256_hex(const uint8_t digest[32], char hex[65]);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_H */
