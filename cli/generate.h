/*
 * cli/generate.h - `tessera generate`'s options and the checks it runs
 * before and around the engine (cli/generate_check.c).
 *
 * Why a second file: the command itself (cmd_generate.c) is the flow -
 * parse, check, load, submit, step, write - while the rules that make every
 * failure name its flag and fail early live here: which flags need files,
 * where the output may go, and which flag an engine message is about.
 */
#ifndef TSR_CLI_GENERATE_H
#define TSR_CLI_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "image/image.h"
#include "tessera.h"

/* Images per request: 1..64.  One UNet call carries at most
 * GEN_MAX_ROWS rows (16 images with guidance, 32 without); a larger batch
 * runs as several calls per step. */
#define GEN_MAX_BATCH 64
#define GEN_MAX_ROWS 32
/* A1111's "Only masked padding, pixels": 0..256, default 32. */
#define GEN_FULL_RES_PADDING 32
#define GEN_FULL_RES_PADDING_MAX 256
/* A1111's default JPEG quality (opts.jpeg_quality). */
#define GEN_JPEG_QUALITY 80

typedef enum gen_format { GEN_PNG, GEN_JPEG } gen_format;

typedef struct gen_opts {
    const char *model, *prompt, *negative, *sampler, *schedule, *rng, *init, *mask;
    const char *preview_dir, *device, *output, *prediction, *taesd, *resize_mode, *tokenizer,
        *precision;
    const char *parallel; /* --parallel data|cfg (cfg: --device A,B) */
    int64_t steps, width, height, batch, clip_skip, threads;
    uint64_t seed;
    double cfg, strength, rescale, eta;
    double mask_blur; /* A1111's mask blur: Pillow GaussianBlur radius of the overlay mask */
    const char *lora_dir, *lora; /* --lora-dir, --lora NAME[:W[:W_UNET]][,...] */
    const char *embeddings_dir;  /* --embeddings-dir: textual inversion */
    /* A1111's "inpaint only masked": crop the mask's region (grown by the
     * padding and to the target aspect), inpaint it at --width x --height,
     * paste it back into the full-size init image */
    bool inpaint_full_res, full_res_padding_given;
    int64_t full_res_padding;
    bool quiet, seed_given, strength_given;
    /* hires fix (A1111's): --hires-scale, --hires-steps, --hires-strength,
     * --hires-upscaler; inpainting's --inpainting-fill (A1111's numbers) */
    double hires_scale, hires_strength;
    int64_t hires_steps, inpainting_fill;
    const char *hires_upscaler;
    bool hires_steps_given, hires_strength_given, inpainting_fill_given;
    bool tiling; /* --tiling: seamless textures (A1111's tiling) */
    /* derived by gen_precheck */
    gen_format format;
    tsr_resize_mode resize;
} gen_opts;

/* Checks that need no model, in the order a user would fix them.  Prints
 * the message (naming the flag) and returns the exit code: 0 to go on,
 * TSR_EXIT_USAGE or TSR_EXIT_FAILURE. */
int gen_precheck(gen_opts *o);

/* The flag an engine error is about, from the lead's field names
 * ("clip_skip" -> "--clip-skip"); NULL when unknown. */
const char *gen_flag_for_field(const char *field);

/* The flag(s) an engine message is about, judged from its words until the
 * engine reports the field itself (tsr_image_params_check); NULL when
 * unknown.  `opening`: the message came from tsr_engine_open. */
const char *gen_flag_for_message(const char *msg, const gen_opts *o, bool opening);

/* Print "tessera generate: FLAG: MESSAGE" (or without the flag when the
 * message already starts with it or none is known) and return the exit
 * code for status `rc`: 2 for a value the model cannot take, 1 otherwise. */
int gen_report(int rc, const char *msg, const gen_opts *o, bool opening);

/* --lora's list into specs (names point into *buf, owned; free it). */
int gen_parse_loras(const char *arg, tsr_lora_spec *out, int max, int *n, char **buf);

/* OUT.png -> OUT-i.png for batches. */
void gen_output_name(const char *out, int i, int n, char *buf, size_t size);

/* cli/generate_cfg.c: --device A,B --parallel cfg (docs/multi-gpu.md section
 * 6).  Open rank 0's engine (*e0, owned by the caller) and rank 1's (owned
 * by the gen_cfg) with their group; attach the command's batch and make
 * rank 1's; submit each image to rank 1 too; start rank 1's thread before
 * the first step, join it after the last (its status); free (aborting the
 * group first if rank 1 still runs). */
typedef struct gen_cfg gen_cfg;
int gen_cfg_open(const char *devices, const tsr_engine_options *eo, tsr_engine **e0,
                 gen_cfg **out);
int gen_cfg_attach(gen_cfg *c, tsr_batch *b0, const tsr_batch_options *bo);
int gen_cfg_submit(gen_cfg *c, const tsr_image_params *p);
int gen_cfg_start(gen_cfg *c);
int gen_cfg_join(gen_cfg *c);
void gen_cfg_free(gen_cfg *c);

#endif
