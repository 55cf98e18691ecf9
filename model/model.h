/*
 * model/model.h - opening a model however it arrives, and loading weights.
 *
 * Two layouts resolve to one set of internal names (diffusers' names, per
 * component):
 *   - a diffusers folder: model_index.json, unet/, vae/, text_encoder/,
 *     text_encoder_2/, tokenizer/, tokenizer_2/, scheduler/, each with its
 *     config and *.safetensors or *.fp16.safetensors weights;
 *   - a single-file checkpoint with the original LDM key names (SD 1.x,
 *     SD 2.x, SDXL base and refiner), whose keys are renamed through
 *     model/ldm_names.c and whose configs are synthesised from the family and
 *     the tensor shapes.
 * Pickle checkpoints (.ckpt, .pt, .pth, .bin) are refused: unpickling runs
 * arbitrary code.  The message says how to convert them.
 *
 * A tsr_model only indexes tensors (zero-copy into the mmapped files).
 * tsr_weights_load() then materialises one component on a backend, in one
 * arena, as f32 on the CPU backend, with 4-D conv weights permuted from
 * PyTorch's OIHW to the OHWI layout the ops take.
 */
#ifndef TSR_CORE_MODEL_H
#define TSR_CORE_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "backend/arena.h"
#include "model/model_config.h"
#include "core/safetensors.h"

struct cJSON;

typedef enum tsr_family {
    TSR_FAMILY_UNKNOWN,
    TSR_FAMILY_SD1,
    TSR_FAMILY_SD2,
    TSR_FAMILY_SDXL,
} tsr_family;

typedef enum tsr_prediction {
    TSR_PREDICTION_EPSILON,
    TSR_PREDICTION_V,
} tsr_prediction;

typedef enum tsr_component {
    TSR_COMP_UNET,
    TSR_COMP_VAE,
    TSR_COMP_TEXT_ENCODER,
    TSR_COMP_TEXT_ENCODER_2,
    TSR_COMP_COUNT
} tsr_component;

typedef enum tsr_model_layout {
    TSR_LAYOUT_DIFFUSERS,
    TSR_LAYOUT_SINGLE_FILE,
} tsr_model_layout;

typedef struct tsr_model tsr_model;

/* Open a diffusers folder or a single .safetensors file.  Owned. */
int tsr_model_open(const char *path, tsr_model **out);
void tsr_model_close(tsr_model *m);

const char *tsr_model_path(const tsr_model *m);
tsr_model_layout tsr_model_layout_of(const tsr_model *m);
tsr_family tsr_model_family(const tsr_model *m);
tsr_prediction tsr_model_prediction(const tsr_model *m);
bool tsr_model_is_inpainting(const tsr_model *m);
bool tsr_model_is_refiner(const tsr_model *m);
/* Single files cannot say whether an SD 2.x model predicts v or epsilon:
 * v is assumed (the 768-v models are the common ones) and this returns
 * true until tsr_model_set_prediction() overrides it (--prediction). */
bool tsr_model_prediction_assumed(const tsr_model *m);
void tsr_model_set_prediction(tsr_model *m, tsr_prediction p);
const char *tsr_family_name(tsr_family f);       /* "SD1.x" */
const char *tsr_component_name(tsr_component c); /* "unet", "text_encoder_2" */

/* Whether the model has this component (SD1 has no text_encoder_2). */
bool tsr_model_has(const tsr_model *m, tsr_component c);
/* The component's config (diffusers config.json, parsed or synthesised).
 * Borrowed; NULL when absent. */
const struct cJSON *tsr_model_config(const tsr_model *m, tsr_component c);
/* The same configs, parsed and range-checked (borrowed; NULL when absent).
 * which = 0: text_encoder, 1: text_encoder_2. */
const tsr_unet_desc *tsr_model_unet_desc(const tsr_model *m);
const tsr_vae_desc *tsr_model_vae_desc(const tsr_model *m);
const tsr_textenc_desc *tsr_model_textenc_desc(const tsr_model *m, int which);
/* model_index.json, scheduler/scheduler_config.json (NULL when absent). */
const struct cJSON *tsr_model_index(const tsr_model *m);
const struct cJSON *tsr_model_scheduler_config(const tsr_model *m);
/* Folder of tokenizer files for encoder 0 or 1, or NULL when the model has
 * none (single files without `tessera convert` metadata).  For a single
 * file that carries its tokenizers in metadata this is a private temporary
 * folder holding them, removed by tsr_model_close(). */
const char *tsr_model_tokenizer_dir(const tsr_model *m, int which);

/* What diffusers' from_single_file() completes a single file of this family
 * with (model/model_defaults.c): its config repository's scheduler config
 * (with the model's prediction type; owned, cJSON_Delete), the pad token of
 * encoder `which`'s tokenizer ("<|endoftext|>" or "!"), and the pipeline's
 * model_index.json flags (added to `index`). */
int tsr_model_default_scheduler(const tsr_model *m, struct cJSON **out);
const char *tsr_model_default_tokenizer_pad(const tsr_model *m, int which);
int tsr_model_default_index_flags(const tsr_model *m, struct cJSON *index);

/* The component's tensors, by internal (diffusers) name, sorted. */
size_t tsr_model_tensor_count(const tsr_model *m, tsr_component c);
/* i-th tensor: its internal name, its entry and data in the source file. */
int tsr_model_tensor_at(const tsr_model *m, tsr_component c, size_t i, const char **name,
                        const tsr_safetensors **file, const tsr_st_entry **entry);
int tsr_model_tensor_find(const tsr_model *m, tsr_component c, const char *name,
                          const tsr_safetensors **file, const tsr_st_entry **entry);
/* Number of parameters (elements) of a component. */
uint64_t tsr_model_param_count(const tsr_model *m, tsr_component c);
/* Single files: keys that mapped to no component (borrowed, sorted). */
size_t tsr_model_unrecognised_count(const tsr_model *m);
const char *tsr_model_unrecognised_at(const tsr_model *m, size_t i);

/* The metadata keys `tessera convert` writes into single files so that a
 * round trip keeps the configs exactly. */
#define TSR_META_CONFIG_PREFIX "tessera.config."
#define TSR_META_PREDICTION "tessera.prediction"
/* ...and so that the file generates what the folder did: the scheduler
 * config, model_index.json, and each tokenizer folder's files
 * ("tessera.tokenizer/vocab.json", "tessera.tokenizer_2/merges.txt"). */
#define TSR_META_SCHEDULER "tessera.scheduler"
#define TSR_META_INDEX "tessera.model_index"
#define TSR_META_TOKENIZER_PREFIX "tessera."
/* The tokenizer files carried (tokenizer.json, the fast tokenizer's
 * duplicate of these, is not). */
#define TSR_TOKENIZER_FILES                                                               \
    {"vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"}
#define TSR_N_TOKENIZER_FILES 4

/* Weights of one component, materialised on a backend. */
typedef struct tsr_weights tsr_weights;

int tsr_weights_load(const tsr_model *m, tsr_component c, tsr_backend *backend,
                     tsr_weights **out);
void tsr_weights_free(tsr_weights *w);
/* Borrowed tensor; TSR_ERR_NOT_FOUND (naming it) when absent. */
int tsr_weights_get(const tsr_weights *w, const char *name, const tsr_tensor **out);
/* Same, with a printf-style name: tsr_weights_getf(w, &t, "down_blocks.%d.x", i). */
int tsr_weights_getf(const tsr_weights *w, const tsr_tensor **out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
size_t tsr_weights_bytes(const tsr_weights *w);
/* The same layout on another backend, its bytes not yet there: an arena of
 * src's size on `backend` and src's tensor table (names, shapes, dtypes,
 * offsets) with every data pointer rebased onto it.  What a replica fills
 * by broadcast (docs/multi-gpu.md part 2).  TSR_ERR_UNSUPPORTED unless the
 * backend stores weights in src's dtype.  Owned: tsr_weights_free. */
int tsr_weights_clone_layout(const tsr_weights *src, tsr_backend *backend, tsr_weights **out);
/* The one allocation that holds every tensor: its start and the bytes in
 * use (on the weights' backend, device memory there). */
void tsr_weights_region(const tsr_weights *w, void **base, size_t *bytes);
/* Iteration in name order: i-th name and tensor (both borrowed). */
size_t tsr_weights_count(const tsr_weights *w);
int tsr_weights_at(const tsr_weights *w, size_t i, const char **name, const tsr_tensor **t);

#endif
