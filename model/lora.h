/*
 * model/lora.h - LoRA files: reading them into one internal form, binding
 * them to a loaded model, and adding their low-rank deltas per row.
 *
 * Why it is built this way (docs/lora.md has the whole design): kohya/A1111
 * files (`lora_unet_*`, `lora_te*_*` with `.alpha`) and diffusers/PEFT files
 * (`unet.<module>.lora_A/lora_B`, `text_encoder.<module>...`, the older
 * `.lora.down/.lora.up`) all say the same thing: for a weight W of the
 * model, a down matrix A [r, in (,kh,kw)], an up matrix B [out, r] and a
 * scale alpha / r.  The key mapping (lora_keys.c) turns every key into
 * (component, weight name, part) by looking the module up in a table built
 * from the model's own weight names - diffusers names and, for the UNet,
 * their LDM spellings through model/ldm_names.c, both flattened the way
 * kohya flattens them ('.' -> '_') - so no hand-written string surgery
 * guesses at underscores.  Unknown keys are listed by name.
 *
 * The weights are never merged: a merged copy would cost a model's memory
 * per LoRA and could not serve rows with different LoRAs in one call.
 * Instead the base op runs once over all rows, and each row then adds
 * weight * alpha / r * B(A x_row) through the ordinary backend ops
 * (tsr_linear, tsr_conv2d, tsr_scale, tsr_binary), on that row's slice
 * only.  A row's delta is therefore computed by the same calls on the same
 * shapes whether the row runs alone or in a batch, which keeps a batched
 * image byte-identical to its solo run, and any backend that runs those
 * ops (the CPU, CUDA) runs LoRAs with no kernel of its own.
 */
#ifndef TSR_MODEL_LORA_H
#define TSR_MODEL_LORA_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "model/model.h"

#define TSR_LORA_MAX_PER_IMAGE 16
#define TSR_LORA_NAME_MAX 128

/* ---- key mapping (pure: lora_keys.c; fuzzed by fuzz/fuzz_lora_keys.c) ---- */

typedef enum tsr_lora_part {
    TSR_LORA_PART_DOWN,  /* lora_down / lora_A / lora.down */
    TSR_LORA_PART_UP,    /* lora_up / lora_B / lora.up */
    TSR_LORA_PART_ALPHA, /* scalar alpha */
} tsr_lora_part;

typedef struct tsr_lora_key {
    tsr_component comp; /* UNET, TEXT_ENCODER, TEXT_ENCODER_2 */
    bool flat;          /* kohya: module is '_'-flattened; else a dotted module path */
    tsr_lora_part part;
    char module[256];   /* flattened (kohya) or dotted (PEFT) module, no ".weight" */
} tsr_lora_key;

/* Split a file key into its parts.  sdxl: "lora_te_" means encoder 1 of two
 * only in the SD1 spelling; both spellings are accepted.  TSR_ERR_NOT_FOUND
 * (with the key in the message) for a key of no known form; TSR_ERR_UNSUPPORTED
 * for a known but unsupported form (LoCon's Tucker `lora_mid`, LoHa, LoKr,
 * DoRA's magnitude). */
int tsr_lora_parse_key(const char *key, tsr_lora_key *out);

/* Module lookup of one component: flattened and dotted module names of the
 * model's weights (each `<module>.weight`), sorted. */
typedef struct tsr_lora_names tsr_lora_names;

/* Build from weight names (`<module>.weight`, others ignored); for the
 * UNet, `ldm` (may be NULL) adds each name's LDM spelling as an alias. */
int tsr_lora_names_build(const char *const *weight_names, size_t n, const tsr_unet_desc *ldm,
                         tsr_lora_names **out);
void tsr_lora_names_free(tsr_lora_names *n);
/* The diffusers weight name ("<module>.weight") of a key's module, or NULL. */
const char *tsr_lora_names_find(const tsr_lora_names *n, const tsr_lora_key *k);

/* ---- files bound to a model ---- */

/* What a LoRA may touch: the model's weights, per component (borrowed). */
typedef struct tsr_lora_model {
    tsr_backend *backend;
    const tsr_weights *weights[TSR_COMP_COUNT]; /* UNET, TEXT_ENCODER(_2); NULL when absent */
    const tsr_lora_names *names[TSR_COMP_COUNT];
} tsr_lora_model;

typedef struct tsr_lora tsr_lora;

/* Read `path`, map and check every key against `m`, and upload the
 * matrices to m->backend in its weight dtype.  Fails naming the key: an
 * unknown key, a module the model lacks, a shape that does not fit, an
 * up without its down.  Owned: tsr_lora_free. */
int tsr_lora_load(const char *path, const tsr_lora_model *m, tsr_lora **out);
void tsr_lora_free(tsr_lora *l);
size_t tsr_lora_bytes(const tsr_lora *l);
/* Modules per component (0 = the file does not touch it). */
int tsr_lora_module_count(const tsr_lora *l, tsr_component c);
/* A1111's "Lora hashes" short hash: sha256 of the file, 12 hex digits. */
const char *tsr_lora_hash(const tsr_lora *l);

/* ---- application ---- */

typedef struct tsr_lora_use {
    const tsr_lora *lora; /* borrowed */
    float unet_scale, te_scale;
} tsr_lora_use;

/* The LoRAs of one image (one row's set). */
typedef struct tsr_lora_set {
    int n;
    tsr_lora_use use[TSR_LORA_MAX_PER_IMAGE];
} tsr_lora_set;

/* Backend scratch for the deltas, grown to the largest need; owned by the
 * model that applies them (the UNet, a text encoder). */
typedef struct tsr_lora_scratch {
    tsr_backend *backend;
    void *data;
    size_t cap;
} tsr_lora_scratch;

void tsr_lora_scratch_free(tsr_lora_scratch *s);

/* Whether any LoRA of `set` has a delta for weight w in component c. */
bool tsr_lora_set_touches(const tsr_lora_set *set, tsr_component c, const tsr_tensor *w);

/* y += sum over set of scale * B(A x) for weight w: linear (x [..., in],
 * y [..., out]) or conv2d (x NHWC, y NHWC, the base op's params).  A
 * NULL or empty set does nothing. */
int tsr_lora_linear(tsr_lora_scratch *s, const tsr_lora_set *set, tsr_component c,
                    const tsr_tensor *w, const tsr_tensor *x, tsr_tensor *y);
int tsr_lora_conv2d(tsr_lora_scratch *s, const tsr_lora_set *set, tsr_component c,
                    const tsr_tensor *w, const tsr_tensor *x, const tsr_conv2d_params *p,
                    tsr_tensor *y);

/* Per row: x and y have the rows as their outermost dim; row i takes
 * sets[i] (NULL = none; rows at or past n_sets take none). */
int tsr_lora_linear_rows(tsr_lora_scratch *s, const tsr_lora_set *const *sets, int n_sets,
                         tsr_component c, const tsr_tensor *w, const tsr_tensor *x,
                         tsr_tensor *y);
int tsr_lora_conv2d_rows(tsr_lora_scratch *s, const tsr_lora_set *const *sets, int n_sets,
                         tsr_component c, const tsr_tensor *w, const tsr_tensor *x,
                         const tsr_conv2d_params *p, tsr_tensor *y);
bool tsr_lora_rows_touch(const tsr_lora_set *const *sets, int n_sets, tsr_component c,
                         const tsr_tensor *w);

/* ---- names inside --lora-dir (lora_dir.c) ---- */

/* The file of LoRA `name` inside `dir`: "<dir>/<name>.safetensors", after
 * refusing names with '/', '\\', "..", a leading '.', control characters or
 * more than TSR_LORA_NAME_MAX bytes, and files whose real path (links
 * resolved) is not inside the real `dir`.  *path owned (free). */
int tsr_lora_resolve(const char *dir, const char *name, char **path);
/* Check a name alone (the rules above, no file system). */
int tsr_lora_check_name(const char *name);

/* ---- the cache of loaded LoRAs (lora_cache.c) ---- */

/* LoRAs load on first use and stay while their bytes fit `cap_bytes`;
 * past it the least recently used one that no image holds is freed.  A
 * held (acquired, not yet released) LoRA is never freed, so the cache may
 * exceed its bound while every entry is in use.  Thread-safe. */
typedef struct tsr_lora_cache tsr_lora_cache;

/* dir may be NULL (every acquire then fails naming --lora-dir); m is copied
 * (its weights and backend borrowed).  Owned: tsr_lora_cache_free. */
int tsr_lora_cache_create(const char *dir, size_t cap_bytes, const tsr_lora_model *m,
                          tsr_lora_cache **out);
void tsr_lora_cache_free(tsr_lora_cache *c);
const char *tsr_lora_cache_dir(const tsr_lora_cache *c);
/* Load (or find) LoRA `name` and hold it; release once per acquire. */
int tsr_lora_cache_acquire(tsr_lora_cache *c, const char *name, const tsr_lora **out);
void tsr_lora_cache_release(tsr_lora_cache *c, const tsr_lora *l);
/* Entries loaded now and their bytes (for tests and metrics). */
void tsr_lora_cache_stats(tsr_lora_cache *c, int *entries, size_t *bytes);

#endif
