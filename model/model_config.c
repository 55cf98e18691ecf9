/*
 * model/model_config.c - parsing and emitting component configs.
 *
 * Why this shape: each parser reads the fields through core/json.h's typed,
 * range-checked getters into a fixed-size struct, then cross-checks the
 * fields against one another (array lengths equal the block count, channel
 * counts divisible by the group and head counts), so code that later walks
 * the blocks can trust every index.  Anything diffusers can express but SD
 * models never use (class embeddings, other block types) is refused with
 * TSR_ERR_UNSUPPORTED rather than silently misread.
 */
#include "model/model_config.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/json.h"

static const char *lbl(const char *label) { return label ? label : "config.json"; }

/* An int-or-array field broadcast to n entries; absent -> def. */
static int get_per_block(const cJSON *j, const char *label, const char *key, int def, int min,
                         int max, int n, int *out)
{
    int vals[TSR_MAX_BLOCKS], cnt = 0;
    TSR_TRY(tsr_json_get_int_array(j, label, key, min, max, vals, TSR_MAX_BLOCKS, &cnt));
    const cJSON *item = tsr_json_member(j, key);
    bool scalar = item && cJSON_IsNumber(item);
    for (int i = 0; i < n; i++) {
        if (cnt == 0)
            out[i] = def;
        else if (scalar)
            out[i] = vals[0];
        else if (cnt != n)
            return tsr_errorf(TSR_ERR_FORMAT, "%s: \"%s\" has %d entries, expected %d (one per block)",
                              label, key, cnt, n);
        else
            out[i] = vals[i];
    }
    return TSR_OK;
}

static int check_class(const cJSON *j, const char *label, const char *want)
{
    const char *cls = NULL;
    TSR_TRY(tsr_json_get_string(j, label, "_class_name", NULL, &cls));
    if (cls && strcmp(cls, want) != 0)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: _class_name is \"%s\", expected \"%s\"", label,
                          cls, want);
    return TSR_OK;
}

/* act_fn: SiLU is the only activation the UNet and VAE code has. */
static int check_silu(const cJSON *j, const char *label)
{
    const char *act = NULL;
    TSR_TRY(tsr_json_get_string(j, label, "act_fn", "silu", &act));
    if (strcmp(act, "silu") != 0)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: act_fn \"%s\" is not supported", label, act);
    return TSR_OK;
}

/* Group norm needs block i's channels divisible by its group count. */
static int check_groups(const char *label, int i, int channels, int groups)
{
    if (channels % groups)
        return tsr_errorf(TSR_ERR_RANGE,
                          "%s: block_out_channels[%d] = %d is not divisible by norm_num_groups %d",
                          label, i, channels, groups);
    return TSR_OK;
}

/* String array of block types, each one of two accepted names. */
static int get_block_types(const cJSON *j, const char *label, const char *key, int n,
                           const char *with, const char *without, bool def_with_last,
                           bool reverse_default, bool *out)
{
    const char *types[TSR_MAX_BLOCKS];
    int cnt = 0;
    TSR_TRY(tsr_json_get_string_array(j, label, key, types, TSR_MAX_BLOCKS, &cnt));
    if (cnt == 0) {
        /* SD default: attention everywhere but the lowest-resolution block. */
        for (int i = 0; i < n; i++) {
            int k = reverse_default ? n - 1 - i : i;
            out[i] = def_with_last ? true : (k != n - 1);
        }
        return TSR_OK;
    }
    if (cnt != n)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: \"%s\" has %d entries, expected %d", label, key, cnt,
                          n);
    for (int i = 0; i < n; i++) {
        if (with && strcmp(types[i], with) == 0)
            out[i] = true;
        else if (strcmp(types[i], without) == 0)
            out[i] = false;
        else
            return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: %s[%d] = \"%s\" is not supported", label,
                              key, i, types[i]);
    }
    return TSR_OK;
}

/* UNet2DConditionModel options the SD families leave at their defaults.
 * A config that changes one would be misread, so it is refused by name. */
static int check_unet_defaults(const cJSON *j, const char *label)
{
    static const struct {
        const char *key;
        const char *str; /* expected string, or NULL for a number/bool */
        double num;      /* expected number (bools: 0/1) */
    } defaults[] = {
        {"conv_in_kernel", NULL, 3},          {"conv_out_kernel", NULL, 3},
        {"mid_block_scale_factor", NULL, 1},  {"resnet_out_scale_factor", NULL, 1},
        {"resnet_time_scale_shift", "default", 0}, {"attention_type", "default", 0},
        {"time_embedding_type", "positional", 0}, {"dual_cross_attention", NULL, 0},
        {"only_cross_attention", NULL, 0},    {"resnet_skip_time_act", NULL, 0},
        {"class_embeddings_concat", NULL, 0},
    };
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
        const cJSON *v = tsr_json_member(j, defaults[i].key);
        if (!v)
            continue;
        bool ok;
        if (defaults[i].str)
            ok = cJSON_IsString(v) && strcmp(v->valuestring, defaults[i].str) == 0;
        else if (cJSON_IsBool(v))
            ok = (cJSON_IsTrue(v) ? 1.0 : 0.0) == defaults[i].num;
        else
            ok = cJSON_IsNumber(v) && v->valuedouble == defaults[i].num;
        if (!ok)
            return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: \"%s\" other than its default is not supported",
                              label, defaults[i].key);
    }
    /* options that only exist when set: any non-null value is a variant */
    static const char *const absent[] = {"reverse_transformer_layers_per_block", "timestep_post_act",
                                         "cross_attention_norm", "time_embedding_act_fn",
                                         "time_embedding_dim", "encoder_hid_dim_type",
                                         "mid_block_only_cross_attention"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        const cJSON *v = tsr_json_member(j, absent[i]);
        if (v && !(cJSON_IsBool(v) && cJSON_IsFalse(v)))
            return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: \"%s\" is not supported", label, absent[i]);
    }
    return TSR_OK;
}

int tsr_unet_desc_parse(const cJSON *j, const char *label_in, tsr_unet_desc *out)
{
    const char *label = lbl(label_in);
    tsr_unet_desc c;
    memset(&c, 0, sizeof c);
    TSR_TRY(tsr_json_expect_object(j, label, "a UNet config"));
    TSR_TRY(tsr_json_check_unique_keys(j, label));
    TSR_TRY(check_class(j, label, "UNet2DConditionModel"));
    TSR_TRY(tsr_json_get_int(j, label, "in_channels", 4, 1, 64, &c.in_channels));
    TSR_TRY(tsr_json_get_int(j, label, "out_channels", 4, 1, 64, &c.out_channels));
    TSR_TRY(tsr_json_get_int(j, label, "sample_size", 64, 1, 4096, &c.sample_size));
    TSR_TRY(tsr_json_get_int_array(j, label, "block_out_channels", 1, TSR_MAX_CHANNELS,
                                   c.block_out_channels, TSR_MAX_BLOCKS, &c.n_blocks));
    if (c.n_blocks == 0) {
        const int def[4] = {320, 640, 1280, 1280};
        c.n_blocks = 4;
        memcpy(c.block_out_channels, def, sizeof def);
    }
    int n = c.n_blocks;
    int lpb[TSR_MAX_BLOCKS];
    TSR_TRY(get_per_block(j, label, "layers_per_block", 2, 1, 16, n, lpb));
    for (int i = 1; i < n; i++)
        if (lpb[i] != lpb[0])
            return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: per-block layers_per_block is not supported",
                              label);
    c.layers_per_block = lpb[0];
    TSR_TRY(get_block_types(j, label, "down_block_types", n, "CrossAttnDownBlock2D", "DownBlock2D",
                            false, false, c.down_attn));
    TSR_TRY(get_block_types(j, label, "up_block_types", n, "CrossAttnUpBlock2D", "UpBlock2D", false,
                            true, c.up_attn));
    const char *mid = NULL;
    TSR_TRY(tsr_json_get_string(j, label, "mid_block_type", "UNetMidBlock2DCrossAttn", &mid));
    if (strcmp(mid, "UNetMidBlock2DCrossAttn") != 0)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: mid_block_type \"%s\" is not supported", label,
                          mid);
    c.mid_attn = true;
    TSR_TRY(get_per_block(j, label, "transformer_layers_per_block", 1, 1, 64, n,
                          c.transformer_layers));
    if (tsr_json_has(j, "num_attention_heads"))
        TSR_TRY(get_per_block(j, label, "num_attention_heads", 8, 1, 1024, n, c.heads));
    else
        TSR_TRY(get_per_block(j, label, "attention_head_dim", 8, 1, 1024, n, c.heads));
    const cJSON *cad = tsr_json_member(j, "cross_attention_dim");
    if (cad && !cJSON_IsNumber(cad))
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: cross_attention_dim must be one number", label);
    TSR_TRY(tsr_json_get_int(j, label, "cross_attention_dim", 1280, 1, TSR_MAX_CHANNELS,
                             &c.cross_attention_dim));
    TSR_TRY(tsr_json_get_bool(j, label, "use_linear_projection", false, &c.use_linear_projection));
    TSR_TRY(tsr_json_get_bool(j, label, "upcast_attention", false, &c.upcast_attention));
    TSR_TRY(tsr_json_get_int(j, label, "norm_num_groups", 32, 1, 1024, &c.norm_num_groups));
    TSR_TRY(tsr_json_get_double(j, label, "norm_eps", 1e-5, 1e-12, 1.0, &c.norm_eps));
    TSR_TRY(tsr_json_get_bool(j, label, "flip_sin_to_cos", true, &c.flip_sin_to_cos));
    TSR_TRY(tsr_json_get_double(j, label, "freq_shift", 0.0, -16.0, 16.0, &c.freq_shift));
    TSR_TRY(check_silu(j, label));
    static const char *const unsupported[] = {"class_embed_type", "num_class_embeds",
                                              "time_cond_proj_dim", "encoder_hid_dim"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (tsr_json_has(j, unsupported[i]))
            return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: \"%s\" is not supported", label,
                              unsupported[i]);
    TSR_TRY(check_unet_defaults(j, label));
    const char *add = NULL;
    TSR_TRY(tsr_json_get_string(j, label, "addition_embed_type", NULL, &add));
    if (add) {
        if (strcmp(add, "text_time") != 0)
            return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: addition_embed_type \"%s\" is not supported",
                              label, add);
        c.text_time = true;
        TSR_TRY(tsr_json_need_int(j, label, "addition_time_embed_dim", 2, 8192,
                                  &c.addition_time_embed_dim));
        TSR_TRY(tsr_json_need_int(j, label, "projection_class_embeddings_input_dim", 1, 65536,
                                  &c.projection_class_embeddings_input_dim));
        if (c.addition_time_embed_dim % 2)
            return tsr_errorf(TSR_ERR_RANGE, "%s: addition_time_embed_dim must be even", label);
    }
    /* cross-checks the model code relies on */
    for (int i = 0; i < n; i++) {
        int ch = c.block_out_channels[i];
        TSR_TRY(check_groups(label, i, ch, c.norm_num_groups));
        if (ch % c.heads[i])
            return tsr_errorf(TSR_ERR_RANGE,
                              "%s: block_out_channels[%d] = %d is not divisible by %d heads", label,
                              i, ch, c.heads[i]);
        if (c.up_attn[i] != c.down_attn[n - 1 - i])
            return tsr_errorf(TSR_ERR_UNSUPPORTED,
                              "%s: up_block_types[%d] does not mirror down_block_types[%d]", label,
                              i, n - 1 - i);
    }
    *out = c;
    return TSR_OK;
}

int tsr_vae_desc_parse(const cJSON *j, const char *label_in, tsr_vae_desc *out)
{
    const char *label = lbl(label_in);
    tsr_vae_desc c;
    memset(&c, 0, sizeof c);
    TSR_TRY(tsr_json_expect_object(j, label, "a VAE config"));
    TSR_TRY(tsr_json_check_unique_keys(j, label));
    TSR_TRY(check_class(j, label, "AutoencoderKL"));
    TSR_TRY(tsr_json_get_int(j, label, "in_channels", 3, 1, 64, &c.in_channels));
    TSR_TRY(tsr_json_get_int(j, label, "out_channels", 3, 1, 64, &c.out_channels));
    TSR_TRY(tsr_json_get_int(j, label, "latent_channels", 4, 1, 64, &c.latent_channels));
    TSR_TRY(tsr_json_get_int(j, label, "sample_size", 32, 1, 8192, &c.sample_size));
    TSR_TRY(tsr_json_get_int_array(j, label, "block_out_channels", 1, TSR_MAX_CHANNELS,
                                   c.block_out_channels, TSR_MAX_BLOCKS, &c.n_blocks));
    if (c.n_blocks == 0) {
        c.n_blocks = 1;
        c.block_out_channels[0] = 64;
    }
    bool dummy[TSR_MAX_BLOCKS];
    TSR_TRY(get_block_types(j, label, "down_block_types", c.n_blocks, NULL, "DownEncoderBlock2D",
                            true, false, dummy));
    TSR_TRY(get_block_types(j, label, "up_block_types", c.n_blocks, NULL, "UpDecoderBlock2D", true,
                            false, dummy));
    TSR_TRY(tsr_json_get_int(j, label, "layers_per_block", 1, 1, 16, &c.layers_per_block));
    TSR_TRY(tsr_json_get_int(j, label, "norm_num_groups", 32, 1, 1024, &c.norm_num_groups));
    TSR_TRY(tsr_json_get_double(j, label, "scaling_factor", 0.18215, 1e-6, 1e6, &c.scaling_factor));
    TSR_TRY(tsr_json_get_double(j, label, "shift_factor", 0.0, -1e6, 1e6, &c.shift_factor));
    TSR_TRY(tsr_json_get_bool(j, label, "force_upcast", true, &c.force_upcast));
    TSR_TRY(check_silu(j, label));
    static const char *const must_be_true[] = {"use_quant_conv", "use_post_quant_conv",
                                               "mid_block_add_attention"};
    for (size_t i = 0; i < sizeof must_be_true / sizeof must_be_true[0]; i++) {
        bool v = true;
        TSR_TRY(tsr_json_get_bool(j, label, must_be_true[i], true, &v));
        if (!v)
            return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: %s = false is not supported", label,
                              must_be_true[i]);
    }
    for (int i = 0; i < c.n_blocks; i++)
        TSR_TRY(check_groups(label, i, c.block_out_channels[i], c.norm_num_groups));
    *out = c;
    return TSR_OK;
}

int tsr_textenc_desc_parse(const cJSON *j, const char *label_in, tsr_textenc_desc *out)
{
    const char *label = lbl(label_in);
    tsr_textenc_desc c;
    memset(&c, 0, sizeof c);
    TSR_TRY(tsr_json_expect_object(j, label, "a CLIP text config"));
    TSR_TRY(tsr_json_check_unique_keys(j, label));
    TSR_TRY(tsr_json_get_int(j, label, "vocab_size", 49408, 1, 1 << 20, &c.vocab_size));
    TSR_TRY(tsr_json_get_int(j, label, "hidden_size", 512, 1, TSR_MAX_CHANNELS, &c.hidden_size));
    TSR_TRY(tsr_json_get_int(j, label, "intermediate_size", 2048, 1, 4 * TSR_MAX_CHANNELS,
                             &c.intermediate_size));
    TSR_TRY(tsr_json_get_int(j, label, "num_hidden_layers", 12, 1, 128, &c.num_hidden_layers));
    TSR_TRY(tsr_json_get_int(j, label, "num_attention_heads", 8, 1, 1024, &c.num_attention_heads));
    TSR_TRY(tsr_json_get_int(j, label, "max_position_embeddings", 77, 1, 4096,
                             &c.max_position_embeddings));
    TSR_TRY(tsr_json_get_int(j, label, "projection_dim", 512, 1, TSR_MAX_CHANNELS,
                             &c.projection_dim));
    TSR_TRY(tsr_json_get_double(j, label, "layer_norm_eps", 1e-5, 1e-12, 1.0, &c.layer_norm_eps));
    TSR_TRY(tsr_json_get_int(j, label, "bos_token_id", 49406, 0, 1 << 20, &c.bos_token_id));
    TSR_TRY(tsr_json_get_int(j, label, "eos_token_id", 49407, 0, 1 << 20, &c.eos_token_id));
    TSR_TRY(tsr_json_get_int(j, label, "pad_token_id", 1, 0, 1 << 20, &c.pad_token_id));
    const char *act = NULL;
    TSR_TRY(tsr_json_get_string(j, label, "hidden_act", "quick_gelu", &act));
    if (strcmp(act, "quick_gelu") == 0)
        c.hidden_act = TSR_TEXTENC_QUICK_GELU;
    else if (strcmp(act, "gelu") == 0)
        c.hidden_act = TSR_TEXTENC_GELU;
    else
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: hidden_act \"%s\" is not supported", label, act);
    const char *arch[4];
    int n_arch = 0;
    TSR_TRY(tsr_json_get_string_array(j, label, "architectures", arch, 4, &n_arch));
    for (int i = 0; i < n_arch; i++)
        if (strcmp(arch[i], "CLIPTextModelWithProjection") == 0)
            c.with_projection = true;
    if (c.hidden_size % c.num_attention_heads)
        return tsr_errorf(TSR_ERR_RANGE, "%s: hidden_size %d is not divisible by %d heads", label,
                          c.hidden_size, c.num_attention_heads);
    if (!c.with_projection)
        c.projection_dim = 0;
    *out = c;
    return TSR_OK;
}

/* ---- emitters ---- */

static bool add_int_array(cJSON *o, const char *key, const int *v, int n)
{
    cJSON *a = cJSON_CreateIntArray(v, n);
    return a && cJSON_AddItemToObject(o, key, a);
}

static bool add_str_array(cJSON *o, const char *key, const char *const *v, int n)
{
    cJSON *a = cJSON_CreateStringArray(v, n);
    return a && cJSON_AddItemToObject(o, key, a);
}

/* What a diffusers UNet or VAE config.json starts with: the class, the
 * diffusers version whose configs these are, and the activation. */
static bool add_diffusers_head(cJSON *o, const char *class_name)
{
    return cJSON_AddStringToObject(o, "_class_name", class_name) &&
           cJSON_AddStringToObject(o, "_diffusers_version", "0.35.2") &&
           cJSON_AddStringToObject(o, "act_fn", "silu");
}

#define ADD_OK(expr)   \
    do {               \
        if (!(expr))   \
            goto nomem; \
    } while (0)

int tsr_unet_desc_emit(const tsr_unet_desc *c, cJSON **out)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        goto nomem;
    const char *down[TSR_MAX_BLOCKS], *up[TSR_MAX_BLOCKS];
    for (int i = 0; i < c->n_blocks; i++) {
        down[i] = c->down_attn[i] ? "CrossAttnDownBlock2D" : "DownBlock2D";
        up[i] = c->up_attn[i] ? "CrossAttnUpBlock2D" : "UpBlock2D";
    }
    ADD_OK(add_diffusers_head(o, "UNet2DConditionModel"));
    if (c->text_time) {
        ADD_OK(cJSON_AddStringToObject(o, "addition_embed_type", "text_time"));
        ADD_OK(cJSON_AddNumberToObject(o, "addition_time_embed_dim", c->addition_time_embed_dim));
        ADD_OK(cJSON_AddNumberToObject(o, "projection_class_embeddings_input_dim",
                                       c->projection_class_embeddings_input_dim));
    }
    ADD_OK(add_int_array(o, "attention_head_dim", c->heads, c->n_blocks));
    ADD_OK(add_int_array(o, "block_out_channels", c->block_out_channels, c->n_blocks));
    ADD_OK(cJSON_AddNumberToObject(o, "cross_attention_dim", c->cross_attention_dim));
    ADD_OK(add_str_array(o, "down_block_types", down, c->n_blocks));
    ADD_OK(cJSON_AddBoolToObject(o, "flip_sin_to_cos", c->flip_sin_to_cos));
    ADD_OK(cJSON_AddNumberToObject(o, "freq_shift", c->freq_shift));
    ADD_OK(cJSON_AddNumberToObject(o, "in_channels", c->in_channels));
    ADD_OK(cJSON_AddNumberToObject(o, "layers_per_block", c->layers_per_block));
    ADD_OK(cJSON_AddStringToObject(o, "mid_block_type", "UNetMidBlock2DCrossAttn"));
    ADD_OK(cJSON_AddNumberToObject(o, "norm_eps", c->norm_eps));
    ADD_OK(cJSON_AddNumberToObject(o, "norm_num_groups", c->norm_num_groups));
    ADD_OK(cJSON_AddNumberToObject(o, "out_channels", c->out_channels));
    ADD_OK(cJSON_AddNumberToObject(o, "sample_size", c->sample_size));
    ADD_OK(add_int_array(o, "transformer_layers_per_block", c->transformer_layers, c->n_blocks));
    ADD_OK(add_str_array(o, "up_block_types", up, c->n_blocks));
    ADD_OK(cJSON_AddBoolToObject(o, "upcast_attention", c->upcast_attention));
    ADD_OK(cJSON_AddBoolToObject(o, "use_linear_projection", c->use_linear_projection));
    *out = o;
    return TSR_OK;
nomem:
    cJSON_Delete(o);
    return tsr_errorf(TSR_ERR_NOMEM, "cannot build a UNet config");
}

int tsr_vae_desc_emit(const tsr_vae_desc *c, cJSON **out)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        goto nomem;
    const char *down[TSR_MAX_BLOCKS], *up[TSR_MAX_BLOCKS];
    for (int i = 0; i < c->n_blocks; i++) {
        down[i] = "DownEncoderBlock2D";
        up[i] = "UpDecoderBlock2D";
    }
    ADD_OK(add_diffusers_head(o, "AutoencoderKL"));
    ADD_OK(add_int_array(o, "block_out_channels", c->block_out_channels, c->n_blocks));
    ADD_OK(add_str_array(o, "down_block_types", down, c->n_blocks));
    ADD_OK(cJSON_AddBoolToObject(o, "force_upcast", c->force_upcast));
    ADD_OK(cJSON_AddNumberToObject(o, "in_channels", c->in_channels));
    ADD_OK(cJSON_AddNumberToObject(o, "latent_channels", c->latent_channels));
    ADD_OK(cJSON_AddNumberToObject(o, "layers_per_block", c->layers_per_block));
    ADD_OK(cJSON_AddNumberToObject(o, "norm_num_groups", c->norm_num_groups));
    ADD_OK(cJSON_AddNumberToObject(o, "out_channels", c->out_channels));
    ADD_OK(cJSON_AddNumberToObject(o, "sample_size", c->sample_size));
    ADD_OK(cJSON_AddNumberToObject(o, "scaling_factor", c->scaling_factor));
    if (c->shift_factor != 0.0)
        ADD_OK(cJSON_AddNumberToObject(o, "shift_factor", c->shift_factor));
    ADD_OK(add_str_array(o, "up_block_types", up, c->n_blocks));
    *out = o;
    return TSR_OK;
nomem:
    cJSON_Delete(o);
    return tsr_errorf(TSR_ERR_NOMEM, "cannot build a VAE config");
}

int tsr_textenc_desc_emit(const tsr_textenc_desc *c, cJSON **out)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        goto nomem;
    const char *arch = c->with_projection ? "CLIPTextModelWithProjection" : "CLIPTextModel";
    ADD_OK(add_str_array(o, "architectures", &arch, 1));
    ADD_OK(cJSON_AddNumberToObject(o, "bos_token_id", c->bos_token_id));
    ADD_OK(cJSON_AddNumberToObject(o, "eos_token_id", c->eos_token_id));
    ADD_OK(cJSON_AddStringToObject(o, "hidden_act",
                                   c->hidden_act == TSR_TEXTENC_GELU ? "gelu" : "quick_gelu"));
    ADD_OK(cJSON_AddNumberToObject(o, "hidden_size", c->hidden_size));
    ADD_OK(cJSON_AddNumberToObject(o, "intermediate_size", c->intermediate_size));
    ADD_OK(cJSON_AddNumberToObject(o, "layer_norm_eps", c->layer_norm_eps));
    ADD_OK(cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_position_embeddings));
    ADD_OK(cJSON_AddStringToObject(o, "model_type", "clip_text_model"));
    ADD_OK(cJSON_AddNumberToObject(o, "num_attention_heads", c->num_attention_heads));
    ADD_OK(cJSON_AddNumberToObject(o, "num_hidden_layers", c->num_hidden_layers));
    ADD_OK(cJSON_AddNumberToObject(o, "pad_token_id", c->pad_token_id));
    if (c->with_projection)
        ADD_OK(cJSON_AddNumberToObject(o, "projection_dim", c->projection_dim));
    ADD_OK(cJSON_AddStringToObject(o, "torch_dtype", "float32"));
    ADD_OK(cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size));
    *out = o;
    return TSR_OK;
nomem:
    cJSON_Delete(o);
    return tsr_errorf(TSR_ERR_NOMEM, "cannot build a CLIP config");
}
