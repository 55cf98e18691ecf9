/*
 * text/clip.h - the CLIP text transformer (CLIPTextModel and
 * CLIPTextModelWithProjection), configured from text_encoder{,_2}/config.json.
 *
 * One struct serves the three families: SD 1.x (ViT-L/14, quick-GELU), SD 2.x
 * (OpenCLIP ViT-H, GELU, shipped by diffusers already cut to 23 layers) and
 * SDXL's pair (CLIP-L and OpenCLIP bigG with a text projection).  What a
 * family takes from it is chosen by tsr_clip_output: which hidden state
 * (counted from the end, like A1111's clip_skip), whether the final layer
 * norm is applied to it, and whether the pooled EOS embedding is projected.
 *
 * Memory: weights are borrowed from a tsr_weights; activations live in a
 * workspace arena planned by a measuring pass for the largest batch seen, so
 * repeated calls allocate nothing.
 */
#ifndef TSR_TEXT_CLIP_H
#define TSR_TEXT_CLIP_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"
#include "model/model_config.h"

#define TSR_CLIP_MAX_LAYERS 128

typedef struct tsr_clip_output {
    /* Which hidden state to return: 1 = the last layer's output, 2 = the
     * penultimate, ..., num_layers + 1 = the embeddings (transformers'
     * hidden_states[-skip]; A1111's clip_skip for SD 1.x).  */
    int skip;
    /* Apply final_layer_norm to the returned hidden state (SD 1.x/2.x do;
     * SDXL uses the penultimate state without it). */
    bool final_norm;
} tsr_clip_output;

typedef struct tsr_clip tsr_clip;

/* The config is the parsed text_encoder config (model/model_config.h,
 * copied).  Borrowed: weights and backend must outlive the encoder.  Checks
 * that every tensor the config needs is present with the right shape.
 * Whether pooled output can be projected is told by the weights: a
 * text_projection.weight of [projection_dim, hidden_size]. */
int tsr_clip_create(const tsr_textenc_desc *cfg, const tsr_weights *weights, tsr_backend *backend,
                    tsr_clip **out);
void tsr_clip_free(tsr_clip *c);
/* The config in use (projection_dim is 0 when there is no projection). */
const tsr_textenc_desc *tsr_clip_get_config(const tsr_clip *c);

/* Encode `batch` sequences of `len` ids (len <= max_positions).
 *   hidden  [batch, len, hidden_size] host floats: the state chosen by `o`.
 *   pooled  [batch, hidden_size] or NULL: final-normed state at the EOS
 *           position (transformers' pooler_output).
 *   projected [batch, projection_dim] or NULL: pooled @ text_projection^T
 *           (CLIPTextModelWithProjection's text_embeds). */
int tsr_clip_encode(tsr_clip *c, const int32_t *ids, int batch, int len, const tsr_clip_output *o,
                    float *hidden, float *pooled, float *projected);

/* Textual-inversion vectors for the following encode calls (borrowed
 * until replaced; n = 0: none).  Row `row` (b * len + t) of the token
 * embedding output is `vec` [hidden_size] instead of the table's row for its
 * id; the position embedding is added as usual (A1111's EmbeddingsWithFixes,
 * and diffusers' added tokens give the same input). */
typedef struct tsr_clip_fix {
    int64_t row;
    const float *vec;
} tsr_clip_fix;
void tsr_clip_set_fixes(tsr_clip *c, const tsr_clip_fix *fix, int n);

/* LoRAs for the following encode calls (borrowed until replaced; NULL =
 * none); comp says which encoder's keys apply (TSR_COMP_TEXT_ENCODER or
 * TSR_COMP_TEXT_ENCODER_2) and te_scale is the weight (model/lora.h). */
struct tsr_lora_set;
void tsr_clip_set_lora(tsr_clip *c, const struct tsr_lora_set *set, tsr_component comp);

#endif
