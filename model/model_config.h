/*
 * model/model_config.h - typed component configurations (UNet, VAE, CLIP
 * text encoders) parsed from, and written back to, diffusers config.json.
 *
 * Why a typed struct next to the JSON: the model code (unet/, vae/, text/)
 * and the LDM name mapping (model/ldm_names.c) need a handful of integers
 * they can trust, and the configs come from strangers.  Parsing once, with
 * every field range-checked and every array length checked against the
 * block count, means no later loop can index past an array because a
 * config said "block_out_channels": [] or "layers_per_block": 1e9.  The
 * emitters go the other way, for single-file checkpoints whose configs are
 * synthesised from family defaults and tensor shapes, and for `tessera
 * convert`, which writes a diffusers folder.
 *
 * Field names follow diffusers.  Note diffusers' historical quirk: the UNet's
 * "attention_head_dim" is really the number of heads per block (SD 1.x: 8;
 * SD 2.x: [5, 10, 20, 20] for 64-wide heads); "num_attention_heads", when
 * present, takes precedence.  `heads` below holds the resolved head count.
 */
#ifndef TSR_CORE_MODEL_CONFIG_H
#define TSR_CORE_MODEL_CONFIG_H

#include <stdbool.h>

#include <cJSON.h>

#define TSR_MAX_BLOCKS 6
#define TSR_MAX_CHANNELS 16384

typedef struct tsr_unet_desc {
    int in_channels, out_channels, sample_size;
    int n_blocks;                           /* down blocks = up blocks */
    int block_out_channels[TSR_MAX_BLOCKS]; /* per down block */
    int layers_per_block;                   /* resnets per down block (up: +1) */
    bool down_attn[TSR_MAX_BLOCKS];         /* CrossAttnDownBlock2D (vs DownBlock2D) */
    bool up_attn[TSR_MAX_BLOCKS];           /* CrossAttnUpBlock2D, in up order */
    bool mid_attn;                          /* UNetMidBlock2DCrossAttn (always for SD) */
    int transformer_layers[TSR_MAX_BLOCKS]; /* per down block; up uses the reverse */
    int heads[TSR_MAX_BLOCKS];              /* attention heads per down block */
    int cross_attention_dim;
    bool use_linear_projection;
    bool upcast_attention;
    int norm_num_groups;
    double norm_eps;
    bool flip_sin_to_cos;
    double freq_shift;
    bool text_time; /* addition_embed_type == "text_time" (SDXL) */
    int addition_time_embed_dim;
    int projection_class_embeddings_input_dim;
} tsr_unet_desc;

typedef struct tsr_vae_desc {
    int in_channels, out_channels, latent_channels, sample_size;
    int n_blocks;
    int block_out_channels[TSR_MAX_BLOCKS];
    int layers_per_block; /* encoder resnets per block (decoder: +1) */
    int norm_num_groups;
    double scaling_factor;
    double shift_factor; /* 0 when absent */
    bool force_upcast;
} tsr_vae_desc;

typedef enum tsr_textenc_act {
    TSR_TEXTENC_QUICK_GELU, /* OpenAI CLIP ViT-L/14 (SD 1.x, SDXL encoder 1) */
    TSR_TEXTENC_GELU,       /* OpenCLIP ViT-H, ViT-bigG (SD 2.x, SDXL encoder 2) */
} tsr_textenc_act;

typedef struct tsr_textenc_desc {
    int vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
    int max_position_embeddings;
    int projection_dim;   /* 0 when the model has no text_projection */
    bool with_projection; /* CLIPTextModelWithProjection */
    tsr_textenc_act hidden_act;
    double layer_norm_eps;
    int bos_token_id, eos_token_id, pad_token_id;
} tsr_textenc_desc;

/* Parse a config.json tree (borrowed); `label` names it in errors.  Every
 * field is range-checked, arrays are checked against the block count, and
 * unsupported block types are TSR_ERR_UNSUPPORTED. */
int tsr_unet_desc_parse(const cJSON *json, const char *label, tsr_unet_desc *out);
int tsr_vae_desc_parse(const cJSON *json, const char *label, tsr_vae_desc *out);
int tsr_textenc_desc_parse(const cJSON *json, const char *label, tsr_textenc_desc *out);

/* Write a diffusers-style config.json tree.  *out owned (cJSON_Delete). */
int tsr_unet_desc_emit(const tsr_unet_desc *c, cJSON **out);
int tsr_vae_desc_emit(const tsr_vae_desc *c, cJSON **out);
int tsr_textenc_desc_emit(const tsr_textenc_desc *c, cJSON **out);

#endif
