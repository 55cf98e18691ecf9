/*
 * model/ldm_names.h - the name mapping between original LDM / SGM checkpoint
 * keys and diffusers' per-component names, both ways.
 *
 * Why table-driven: the LDM UNet numbers its blocks flatly
 * (input_blocks.7.1.transformer_blocks.0...) while diffusers nests them
 * (down_blocks.2.attentions.0.transformer_blocks.0...), and which flat
 * index means what depends on the config (layers per block, which blocks
 * have attention).  Rather than hand-written string surgery per key, the
 * config generates a list of prefix rules ("input_blocks.4.0." ->
 * "down_blocks.1.resnets.0.", kind = UNet resnet), and each kind has a small
 * suffix table (in_layers.0 -> norm1 ...).  A key maps through the rule with
 * the longest matching prefix; the reverse direction (for `tessera convert
 * --to single`) walks the same rules backwards.  Names are relative to the
 * component prefix (model.diffusion_model., first_stage_model., ...).
 *
 * A few tensors change shape on the way: OpenCLIP's fused attention
 * in_proj_weight [3C, C] is split into q/k/v rows (contiguous, so no copy),
 * its text_projection [C, P] is the transpose of diffusers' Linear weight,
 * and the VAE's mid-block attention stores 1x1 convs [C, C, 1, 1] where
 * diffusers has linears [C, C].  `xform` and `part` describe that.
 */
#ifndef TSR_CORE_LDM_NAMES_H
#define TSR_CORE_LDM_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#include "model/model_config.h"

#define TSR_LDM_NAME_MAX 256

typedef enum tsr_ldm_kind {
    TSR_LDM_SAME,           /* suffix unchanged */
    TSR_LDM_EXACT,          /* the rule names one whole tensor */
    TSR_LDM_UNET_RES,       /* in_layers.0 -> norm1, emb_layers.1 -> time_emb_proj ... */
    TSR_LDM_VAE_RES,        /* nin_shortcut -> conv_shortcut */
    TSR_LDM_VAE_ATTN,       /* norm -> group_norm, q -> to_q, proj_out -> to_out.0 */
    TSR_LDM_OPENCLIP_LAYER, /* ln_1 -> layer_norm1, attn.in_proj_* -> q/k/v_proj */
    TSR_LDM_IGNORE,         /* known and deliberately dropped (position_ids, EMA) */
} tsr_ldm_kind;

typedef enum tsr_ldm_xform {
    TSR_XF_NONE,
    TSR_XF_SQUEEZE,   /* LDM [C, C, 1, 1] <-> diffusers [C, C] */
    TSR_XF_SPLIT3,    /* LDM rows [3C, ...] -> part 0/1/2 of C rows */
    TSR_XF_TRANSPOSE, /* LDM [A, B] <-> diffusers [B, A] */
} tsr_ldm_xform;

typedef struct tsr_ldm_rule {
    char *ldm;  /* owned; prefix (ends in '.') or whole name for EXACT/IGNORE-exact */
    char *diff; /* owned; NULL for IGNORE */
    tsr_ldm_kind kind;
    tsr_ldm_xform xform; /* EXACT only */
    bool exact;          /* `ldm` is a whole name, not a prefix */
    bool forward_only;   /* a legacy spelling: never produced by the reverse map */
} tsr_ldm_rule;

typedef struct tsr_ldm_map {
    tsr_ldm_rule *rules; /* owned */
    size_t n, cap;
} tsr_ldm_map;

typedef struct tsr_ldm_target {
    char name[TSR_LDM_NAME_MAX]; /* internal (diffusers) name */
    tsr_ldm_xform xform;
    int part; /* for TSR_XF_SPLIT3: 0 (q), 1 (k), 2 (v) */
} tsr_ldm_target;

void tsr_ldm_map_init(tsr_ldm_map *m);
void tsr_ldm_map_free(tsr_ldm_map *m);
/* Add a rule; `ldm`/`diff` are printf-expanded by the callers below. */
int tsr_ldm_map_add(tsr_ldm_map *m, const char *ldm, const char *diff, tsr_ldm_kind kind,
                    tsr_ldm_xform xform, bool exact, bool forward_only);

/* Rules for each component, generated from its config. */
int tsr_ldm_unet_rules(const tsr_unet_desc *c, tsr_ldm_map *m);
int tsr_ldm_vae_rules(const tsr_vae_desc *c, tsr_ldm_map *m);
/* HF-named CLIP under "...transformer." (SD 1.x, SDXL encoder 1). */
int tsr_ldm_clip_hf_rules(tsr_ldm_map *m);
/* OpenCLIP under "...model.": layers [0, keep_layers) are mapped, later
 * ones (up to total_layers) are known-ignored; text_projection is mapped
 * (transposed) when with_projection, else ignored. */
int tsr_ldm_openclip_rules(int keep_layers, int total_layers, bool with_projection,
                           tsr_ldm_map *m);

/* Map an LDM name (relative to the component prefix).  Returns the number
 * of targets written (1, or 3 for a split), 0 when no rule matches, and
 * sets *ignored when an IGNORE rule matched (returning 0). */
int tsr_ldm_to_internal(const tsr_ldm_map *m, const char *ldm, tsr_ldm_target out[3],
                        bool *ignored);
/* Map an internal name back; false when no rule produces it. */
bool tsr_ldm_from_internal(const tsr_ldm_map *m, const char *internal, char *ldm, size_t size,
                           tsr_ldm_xform *xform, int *part);

#endif
