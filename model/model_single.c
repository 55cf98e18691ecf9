/*
 * model/model_single.c - single-file LDM/SGM checkpoints (.safetensors):
 * family detection, config synthesis from tensor shapes, key mapping.
 *
 * Why this shape: a single file carries weights but no configs.  The family
 * comes from which text-encoder prefix is present (cond_stage_model.
 * transformer = SD 1.x's HF CLIP, cond_stage_model.model = SD 2.x's
 * OpenCLIP, conditioner.embedders.* = SDXL; a refiner has only the OpenCLIP
 * bigG one).  The configs start from the family defaults and take every
 * count that shapes can tell (channels per block, layers per block, which
 * blocks have attention, transformer depth, context width, projections), so
 * smaller models of the same families load too.  What shapes cannot tell
 * (head counts, group counts) comes from the family defaults - unless the
 * file carries "tessera.config.*" metadata, which `tessera convert` writes
 * so a folder -> file -> folder round trip is exact.  Then the configs
 * generate the name rules (model/ldm_names.c) and every key is mapped,
 * known-ignored (EMA copies, DDPM schedule buffers, position_ids), or
 * reported as unrecognised.
 *
 * SD 2.x v vs epsilon cannot be read from weights: v is assumed (and
 * flagged so `inspect` says so) unless the metadata records it.
 *
 * A file written by `tessera convert` also carries what generation needs
 * beyond weights: the scheduler config, model_index.json and the tokenizer
 * files ("tessera.scheduler", "tessera.model_index",
 * "tessera.tokenizer.vocab.json", ...), so it generates the images its
 * folder did.  The tokenizer files are written to a private temporary
 * folder (tsr_model_tokenizer_dir) that tsr_model_close removes: the
 * tokenizer reads folders, and a few small files at open cost nothing next
 * to the weights.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/json.h"
#include "model/ldm_names.h"
#include "core/log.h"
#include "model/model_internal.h"

typedef struct prefix_def {
    const char *prefix;
    int comp; /* tsr_component, or -1 */
    bool openclip;
} prefix_def;

static const prefix_def prefixes[] = {
    {"model.diffusion_model.", TSR_COMP_UNET, false},
    {"first_stage_model.", TSR_COMP_VAE, false},
    {"cond_stage_model.transformer.", TSR_COMP_TEXT_ENCODER, false},
    {"cond_stage_model.model.", TSR_COMP_TEXT_ENCODER, true},
    {"conditioner.embedders.0.transformer.", TSR_COMP_TEXT_ENCODER, false},
    {"conditioner.embedders.1.model.", TSR_COMP_TEXT_ENCODER_2, true},
    {"conditioner.embedders.0.model.", TSR_COMP_TEXT_ENCODER_2, true}, /* refiner */
};
#define N_PREFIXES (sizeof prefixes / sizeof prefixes[0])

/* Keys that carry no weights we use: EMA copies and DDPM buffers. */
static bool known_ignored(const char *key)
{
    static const char *const pre[] = {"model_ema.", "lora_", "control_model."};
    static const char *const exact[] = {
        "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod",
        "sqrt_one_minus_alphas_cumprod", "log_one_minus_alphas_cumprod",
        "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod", "posterior_variance",
        "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2",
        "logvar", "v_pred", "edm_vpred", "model.diffusion_model.v_pred"};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (strncmp(key, pre[i], strlen(pre[i])) == 0)
            return true;
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strcmp(key, exact[i]) == 0)
            return true;
    return false;
}

typedef struct single_ctx {
    tsr_model *m;
    const tsr_safetensors *st;
    const char *prefix[TSR_COMP_COUNT]; /* chosen prefix per component, or NULL */
    bool openclip[TSR_COMP_COUNT];
} single_ctx;

/* Entry of prefix + printf(rel), or NULL. */
static const tsr_st_entry *findf(const single_ctx *s, tsr_component c, const char *fmt, ...)
    TSR_PRINTF(3, 4);

static const tsr_st_entry *findf(const single_ctx *s, tsr_component c, const char *fmt, ...)
{
    char name[TSR_LDM_NAME_MAX * 2];
    int n = snprintf(name, sizeof name, "%s", s->prefix[c] ? s->prefix[c] : "");
    if (n < 0 || (size_t)n >= sizeof name)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + n, sizeof name - (size_t)n, fmt, ap);
    va_end(ap);
    return tsr_st_find(s->st, name);
}

/* Shape dim d of a required tensor with the given rank. */
static int need_dim(const single_ctx *s, const tsr_st_entry *e, const char *what, int ndim, int d,
                    int *out)
{
    if (!e)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: %s is missing", s->m->path, what);
    if (e->ndim != ndim && !(ndim == -4 && (e->ndim == 4 || e->ndim == 2)))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: %s ('%s') has %d dims, expected %d", s->m->path,
                          what, e->name, e->ndim, ndim < 0 ? -ndim : ndim);
    int64_t v = e->shape[d];
    if (v < 1 || v > (1 << 20))
        return tsr_errorf(TSR_ERR_RANGE, "%s: %s ('%s') dim %d = %lld is out of range",
                          s->m->path, what, e->name, d, (long long)v);
    *out = (int)v;
    return TSR_OK;
}

/* Count indices i = 0.. while fmt(i) exists (at most `max`). */
static int count_while(const single_ctx *s, tsr_component c, const char *fmt, int max)
{
    int i = 0;
    while (i < max) {
        char rel[TSR_LDM_NAME_MAX];
        snprintf(rel, sizeof rel, fmt, i);
        if (!findf(s, c, "%s", rel))
            break;
        i++;
    }
    return i;
}

static int heads_for(tsr_family f, int channels)
{
    if (f == TSR_FAMILY_SD1)
        return channels % 8 == 0 ? 8 : 1;
    if (channels % 64 == 0)
        return channels / 64;
    return channels % 8 == 0 ? 8 : 1;
}

/* Config metadata written by `tessera convert`, when present. */
static int config_from_metadata(single_ctx *s, tsr_component c, bool *found)
{
    char key[64];
    snprintf(key, sizeof key, TSR_META_CONFIG_PREFIX "%s", tsr_component_name(c));
    const char *v = tsr_st_metadata(s->st, key);
    *found = false;
    if (!v)
        return TSR_OK;
    char label[128];
    snprintf(label, sizeof label, "metadata %s", key);
    TSR_TRY(tsr_json_parse(v, strlen(v), label, &s->m->comp[c].config));
    TSR_TRY(tsr_model_parse_component_config(s->m, c, label));
    *found = true;
    return TSR_OK;
}

static int infer_unet(single_ctx *s, tsr_unet_desc *u)
{
    const tsr_model *m = s->m;
    const tsr_component C = TSR_COMP_UNET;
    int model_ch = 0;
    memset(u, 0, sizeof *u);
    const tsr_st_entry *conv_in = findf(s, C, "input_blocks.0.0.weight");
    TSR_TRY(need_dim(s, conv_in, "the UNet input conv", 4, 0, &model_ch));
    TSR_TRY(need_dim(s, conv_in, "the UNet input conv", 4, 1, &u->in_channels));
    TSR_TRY(need_dim(s, findf(s, C, "out.2.weight"), "the UNet output conv", 4, 0,
                     &u->out_channels));
    /* input block count: the largest index among the keys */
    int total = 0;
    int n_down = 0;
    size_t plen = strlen(s->prefix[C]);
    for (size_t i = 0; i < tsr_st_count(s->st); i++) {
        const char *k = tsr_st_entry_at(s->st, i)->name;
        if (strncmp(k, s->prefix[C], plen) != 0 || strncmp(k + plen, "input_blocks.", 13) != 0)
            continue;
        char *end = NULL;
        long idx = strtol(k + plen + 13, &end, 10);
        if (end == k + plen + 13 || *end != '.' || idx < 0 || idx > 1000)
            continue;
        if (idx + 1 > total)
            total = (int)idx + 1;
        if (strcmp(end, ".0.op.weight") == 0)
            n_down++;
    }
    int nb = n_down + 1;
    if (nb > TSR_MAX_BLOCKS || total < 2 || total % nb != 0 || total / nb < 2)
        return tsr_errorf(TSR_ERR_FORMAT,
                          "%s: cannot infer the UNet layout (%d input blocks, %d downsamplers)",
                          m->path, total, n_down);
    u->n_blocks = nb;
    u->layers_per_block = total / nb - 1;
    const int L = u->layers_per_block;
    const tsr_st_entry *attn_proj = NULL, *attn_k = NULL;
    for (int i = 0; i < nb; i++) {
        int n = 1 + i * (L + 1);
        TSR_TRY(need_dim(s, findf(s, C, "input_blocks.%d.0.out_layers.3.weight", n),
                         "a UNet down-block resnet conv", 4, 0, &u->block_out_channels[i]));
        const tsr_st_entry *pin = findf(s, C, "input_blocks.%d.1.proj_in.weight", n);
        u->down_attn[i] = pin != NULL;
        u->transformer_layers[i] = 1;
        if (pin) {
            attn_proj = attn_proj ? attn_proj : pin;
            char fmt[96];
            snprintf(fmt, sizeof fmt, "input_blocks.%d.1.transformer_blocks.%%d.attn1.to_q.weight",
                     n);
            u->transformer_layers[i] = count_while(s, C, fmt, 64);
            if (u->transformer_layers[i] < 1)
                return tsr_errorf(TSR_ERR_FORMAT, "%s: UNet input block %d has no transformer blocks",
                                  m->path, n);
            if (!attn_k)
                attn_k = findf(s, C, "input_blocks.%d.1.transformer_blocks.0.attn2.to_k.weight", n);
        }
    }
    for (int i = 0; i < nb; i++)
        u->up_attn[i] = u->down_attn[nb - 1 - i];
    u->mid_attn = true;
    if (!attn_proj) {
        attn_proj = findf(s, C, "middle_block.1.proj_in.weight");
        attn_k = findf(s, C, "middle_block.1.transformer_blocks.0.attn2.to_k.weight");
    }
    if (!attn_proj)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: the UNet has no attention blocks", m->path);
    u->use_linear_projection = attn_proj->ndim == 2;
    TSR_TRY(need_dim(s, attn_k, "the UNet cross-attention key projection", 2, 1,
                     &u->cross_attention_dim));
    if (model_ch != u->block_out_channels[0])
        return tsr_errorf(TSR_ERR_FORMAT, "%s: UNet conv_in has %d channels but block 0 has %d",
                          m->path, model_ch, u->block_out_channels[0]);
    const tsr_st_entry *label = findf(s, C, "label_emb.0.0.weight");
    if (label) {
        u->text_time = true;
        TSR_TRY(need_dim(s, label, "the UNet add-embedding", 2, 1,
                         &u->projection_class_embeddings_input_dim));
        /* adm = pooled text width + n_ids * time dim; 6 ids for the base
         * (size, crop, target), 5 for the refiner (aesthetic score) */
        int pooled = 1280;
        const tsr_st_entry *proj = findf(s, TSR_COMP_TEXT_ENCODER_2, "text_projection");
        if (s->prefix[TSR_COMP_TEXT_ENCODER_2] && proj && proj->ndim == 2 && proj->shape[1] > 0 &&
            proj->shape[1] < (1 << 20))
            pooled = (int)proj->shape[1];
        int ids = s->m->refiner ? 5 : 6;
        int rest = u->projection_class_embeddings_input_dim - pooled;
        u->addition_time_embed_dim = (rest > 0 && rest % ids == 0 && (rest / ids) % 2 == 0)
                                         ? rest / ids
                                         : 256;
    }
    tsr_family f = s->m->family;
    for (int i = 0; i < nb; i++)
        u->heads[i] = heads_for(f, u->block_out_channels[i]);
    u->norm_num_groups = 32;
    for (int i = 0; i < nb; i++)
        while (u->norm_num_groups > 1 && u->block_out_channels[i] % u->norm_num_groups)
            u->norm_num_groups /= 2;
    u->norm_eps = 1e-5;
    u->flip_sin_to_cos = true;
    u->freq_shift = 0;
    u->upcast_attention = f == TSR_FAMILY_SD2;
    u->sample_size = f == TSR_FAMILY_SDXL ? 128 : f == TSR_FAMILY_SD2 ? 96 : 64;
    return TSR_OK;
}

static int infer_vae(single_ctx *s, tsr_vae_desc *v)
{
    const tsr_component C = TSR_COMP_VAE;
    memset(v, 0, sizeof *v);
    TSR_TRY(need_dim(s, findf(s, C, "encoder.conv_in.weight"), "the VAE encoder input conv", 4, 1,
                     &v->in_channels));
    TSR_TRY(need_dim(s, findf(s, C, "decoder.conv_out.weight"), "the VAE decoder output conv", 4,
                     0, &v->out_channels));
    TSR_TRY(need_dim(s, findf(s, C, "post_quant_conv.weight"), "the VAE post-quant conv", 4, 0,
                     &v->latent_channels));
    v->n_blocks = count_while(s, C, "encoder.down.%d.block.0.conv1.weight", TSR_MAX_BLOCKS + 1);
    if (v->n_blocks < 1 || v->n_blocks > TSR_MAX_BLOCKS)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: cannot infer the VAE layout (%d encoder blocks)",
                          s->m->path, v->n_blocks);
    v->layers_per_block = count_while(s, C, "encoder.down.0.block.%d.conv1.weight", 17);
    if (v->layers_per_block > 16)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: too many VAE resnets per block", s->m->path);
    for (int i = 0; i < v->n_blocks; i++)
        TSR_TRY(need_dim(s, findf(s, C, "encoder.down.%d.block.0.conv2.weight", i),
                         "a VAE encoder resnet conv", 4, 0, &v->block_out_channels[i]));
    v->norm_num_groups = 32;
    for (int i = 0; i < v->n_blocks; i++)
        while (v->norm_num_groups > 1 && v->block_out_channels[i] % v->norm_num_groups)
            v->norm_num_groups /= 2;
    bool xl = s->m->family == TSR_FAMILY_SDXL;
    v->scaling_factor = xl ? 0.13025 : 0.18215;
    v->sample_size = xl ? 1024 : s->m->family == TSR_FAMILY_SD2 ? 768 : 512;
    v->force_upcast = true;
    return TSR_OK;
}

static int infer_clip(single_ctx *s, tsr_component C, tsr_textenc_desc *c)
{
    memset(c, 0, sizeof *c);
    const tsr_st_entry *tok, *pos;
    c->layer_norm_eps = 1e-5;
    c->bos_token_id = 0;
    c->eos_token_id = 2;
    c->pad_token_id = 1;
    if (s->openclip[C]) {
        tok = findf(s, C, "token_embedding.weight");
        pos = findf(s, C, "positional_embedding");
        c->hidden_act = TSR_TEXTENC_GELU;
        int total = count_while(s, C, "transformer.resblocks.%d.ln_1.weight", 129);
        TSR_TRY(need_dim(s, findf(s, C, "transformer.resblocks.0.mlp.c_fc.weight"),
                         "the text encoder MLP", 2, 0, &c->intermediate_size));
        c->num_hidden_layers = total;
        /* SD 2.x's ViT-H has 24 layers and uses the penultimate one; diffusers
         * keeps 23 (see docs).  SDXL's encoders keep all (the pipeline picks
         * the penultimate hidden state itself). */
        if (C == TSR_COMP_TEXT_ENCODER && total == 24)
            c->num_hidden_layers = 23;
        const tsr_st_entry *proj = findf(s, C, "text_projection");
        if (C == TSR_COMP_TEXT_ENCODER_2) {
            c->with_projection = true;
            TSR_TRY(need_dim(s, proj, "the text projection", 2, 1, &c->projection_dim));
        }
    } else {
        const char *tm = findf(s, C, "text_model.embeddings.token_embedding.weight") ? "text_model."
                                                                                     : "";
        tok = findf(s, C, "%sembeddings.token_embedding.weight", tm);
        pos = findf(s, C, "%sembeddings.position_embedding.weight", tm);
        char fmt[96];
        snprintf(fmt, sizeof fmt, "%sencoder.layers.%%d.mlp.fc1.weight", tm);
        c->num_hidden_layers = count_while(s, C, fmt, 129);
        TSR_TRY(need_dim(s, findf(s, C, "%sencoder.layers.0.mlp.fc1.weight", tm),
                         "the text encoder MLP", 2, 0, &c->intermediate_size));
        c->hidden_act = TSR_TEXTENC_QUICK_GELU;
    }
    TSR_TRY(need_dim(s, tok, "the token embedding", 2, 0, &c->vocab_size));
    TSR_TRY(need_dim(s, tok, "the token embedding", 2, 1, &c->hidden_size));
    TSR_TRY(need_dim(s, pos, "the position embedding", 2, 0, &c->max_position_embeddings));
    if (c->num_hidden_layers < 1 || c->num_hidden_layers > 128)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: cannot count the text encoder layers", s->m->path);
    c->num_attention_heads = c->hidden_size % 64 == 0 ? c->hidden_size / 64 : 1;
    return TSR_OK;
}

static int synthesise(single_ctx *s, tsr_component c)
{
    tsr_model_component *mc = &s->m->comp[c];
    bool found = false;
    TSR_TRY(config_from_metadata(s, c, &found));
    if (found)
        return TSR_OK;
    switch (c) {
    case TSR_COMP_UNET:
        TSR_TRY(infer_unet(s, &mc->unet));
        return tsr_unet_desc_emit(&mc->unet, &mc->config);
    case TSR_COMP_VAE:
        TSR_TRY(infer_vae(s, &mc->vae));
        return tsr_vae_desc_emit(&mc->vae, &mc->config);
    default:
        TSR_TRY(infer_clip(s, c, &mc->clip));
        return tsr_textenc_desc_emit(&mc->clip, &mc->config);
    }
}

static int build_rules(single_ctx *s, tsr_component c, tsr_ldm_map *map)
{
    const tsr_model_component *mc = &s->m->comp[c];
    switch (c) {
    case TSR_COMP_UNET: return tsr_ldm_unet_rules(&mc->unet, map);
    case TSR_COMP_VAE: return tsr_ldm_vae_rules(&mc->vae, map);
    default:
        if (!s->openclip[c])
            return tsr_ldm_clip_hf_rules(map);
        {
            int total = count_while(s, c, "transformer.resblocks.%d.ln_1.weight", 129);
            int keep = mc->clip.num_hidden_layers;
            if (keep > total)
                keep = total; /* the missing layers are reported when loading */
            return tsr_ldm_openclip_rules(keep, total, mc->clip.with_projection, map);
        }
    }
}

/* Bytes of a transposed 2-D tensor, for the in-memory image. */
typedef struct pending_t {
    tsr_component comp;
    char name[TSR_LDM_NAME_MAX];
    const tsr_st_entry *src;
} pending_t;

/* Build a safetensors image holding the transposed tensors and index it. */
static int add_transposed(tsr_model *m, const tsr_safetensors *st, pending_t *p, int n)
{
    if (n == 0)
        return TSR_OK;
    int rc = TSR_OK;
    cJSON *hdr = cJSON_CreateObject();
    char *json = NULL;
    uint64_t off = 0;
    if (!hdr)
        return tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
    for (int i = 0; i < n; i++) {
        const tsr_st_entry *e = p[i].src;
        cJSON *t = cJSON_AddObjectToObject(hdr, p[i].name);
        double shape[2] = {(double)e->shape[1], (double)e->shape[0]};
        double offs[2] = {(double)off, (double)(off + e->nbytes)};
        if (!t || !cJSON_AddStringToObject(t, "dtype", tsr_st_dtype_name(e->dtype)) ||
            !cJSON_AddItemToObject(t, "shape", cJSON_CreateDoubleArray(shape, 2)) ||
            !cJSON_AddItemToObject(t, "data_offsets", cJSON_CreateDoubleArray(offs, 2))) {
            rc = tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
            goto done;
        }
        off += e->nbytes;
    }
    json = cJSON_PrintUnformatted(hdr);
    if (!json) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
        goto done;
    }
    size_t hlen = (strlen(json) + 7) & ~(size_t)7;
    size_t total = 8 + hlen + (size_t)off;
    unsigned char *img = calloc(1, total);
    if (!img) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
        goto done;
    }
    for (int b = 0; b < 8; b++)
        img[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
    memset(img + 8, ' ', hlen);
    memcpy(img + 8, json, strlen(json));
    unsigned char *data = img + 8 + hlen;
    uint64_t o = 0;
    for (int i = 0; i < n; i++) {
        const tsr_st_entry *e = p[i].src;
        size_t es = tsr_st_dtype_size(e->dtype);
        size_t rows = (size_t)e->shape[0], cols = (size_t)e->shape[1];
        const unsigned char *src = tsr_st_data(st, e);
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++)
                memcpy(data + o + (c * rows + r) * es, src + (r * cols + c) * es, es);
        o += e->nbytes;
    }
    m->mem_image = img;
    tsr_safetensors *mem = NULL;
    TSR_CHECK_GOTO(rc, tsr_st_open_memory(img, total, "transposed tensors", &mem), done);
    TSR_CHECK_GOTO(rc, tsr_model_add_file(m, mem), done);
    for (int i = 0; i < n; i++) {
        const tsr_st_entry *e = tsr_st_find(mem, p[i].name);
        if (!e) {
            rc = tsr_errorf(TSR_ERR_INTERNAL, "model: transposed '%s' lost", p[i].name);
            goto done;
        }
        TSR_CHECK_GOTO(rc, tsr_model_add_tensor(m, p[i].comp, p[i].name, mem, e), done);
    }
done:
    cJSON_free(json);
    cJSON_Delete(hdr);
    return rc;
}

static int map_component(single_ctx *s, tsr_component c, pending_t *pend, int *n_pend,
                         int max_pend)
{
    tsr_model *m = s->m;
    tsr_ldm_map map;
    tsr_ldm_map_init(&map);
    int rc = build_rules(s, c, &map);
    if (rc < 0)
        goto done;
    size_t plen = strlen(s->prefix[c]);
    for (size_t i = 0; i < tsr_st_count(s->st); i++) {
        const tsr_st_entry *e = tsr_st_entry_at(s->st, i);
        if (strncmp(e->name, s->prefix[c], plen) != 0)
            continue;
        tsr_ldm_target t[3];
        bool ignored = false;
        int n = tsr_ldm_to_internal(&map, e->name + plen, t, &ignored);
        if (ignored) {
            m->n_ignored++;
            continue;
        }
        if (n == 0) {
            TSR_CHECK_GOTO(rc, tsr_model_add_unrecognised(m, e->name), done);
            continue;
        }
        for (int k = 0; k < n; k++) {
            tsr_st_entry adj = *e;
            switch (t[k].xform) {
            case TSR_XF_NONE: break;
            case TSR_XF_SQUEEZE:
                if (adj.ndim == 4 && adj.shape[2] == 1 && adj.shape[3] == 1)
                    adj.ndim = 2;
                else if (adj.ndim != 2) {
                    rc = tsr_errorf(TSR_ERR_FORMAT, "%s: '%s' should be [C, C, 1, 1]", m->path,
                                    e->name);
                    goto done;
                }
                break;
            case TSR_XF_SPLIT3:
                if (adj.ndim < 1 || adj.shape[0] % 3 != 0 || adj.nbytes % 3 != 0) {
                    rc = tsr_errorf(TSR_ERR_FORMAT, "%s: '%s' rows are not divisible by 3",
                                    m->path, e->name);
                    goto done;
                }
                adj.shape[0] /= 3;
                adj.nbytes /= 3;
                adj.offset += (uint64_t)t[k].part * adj.nbytes;
                break;
            case TSR_XF_TRANSPOSE:
                if (adj.ndim != 2) {
                    rc = tsr_errorf(TSR_ERR_FORMAT, "%s: '%s' should be 2-D", m->path, e->name);
                    goto done;
                }
                if (*n_pend == max_pend) {
                    rc = tsr_errorf(TSR_ERR_RANGE, "%s: too many transposed tensors", m->path);
                    goto done;
                }
                pend[*n_pend].comp = c;
                pend[*n_pend].src = e;
                snprintf(pend[*n_pend].name, sizeof pend[*n_pend].name, "%s", t[k].name);
                (*n_pend)++;
                continue;
            }
            TSR_CHECK_GOTO(rc, tsr_model_add_tensor(m, c, t[k].name, s->st, &adj), done);
        }
    }
    rc = TSR_OK;
done:
    tsr_ldm_map_free(&map);
    return rc;
}

static bool any_with_prefix(const tsr_safetensors *st, const char *prefix)
{
    /* entries are sorted: binary-search the first name >= prefix */
    size_t lo = 0, hi = tsr_st_count(st), plen = strlen(prefix);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(tsr_st_entry_at(st, mid)->name, prefix) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < tsr_st_count(st) && strncmp(tsr_st_entry_at(st, lo)->name, prefix, plen) == 0;
}

static void detect_family(single_ctx *s)
{
    tsr_model *m = s->m;
    bool xl_base = any_with_prefix(s->st, "conditioner.embedders.1.model.");
    bool xl_ref = !xl_base && any_with_prefix(s->st, "conditioner.embedders.0.model.");
    if (xl_base || xl_ref) {
        m->family = TSR_FAMILY_SDXL;
        m->refiner = xl_ref;
    } else if (any_with_prefix(s->st, "cond_stage_model.model.")) {
        m->family = TSR_FAMILY_SD2;
    } else if (any_with_prefix(s->st, "cond_stage_model.transformer.")) {
        m->family = TSR_FAMILY_SD1;
    } else if (any_with_prefix(s->st, "model.diffusion_model.label_emb.")) {
        m->family = TSR_FAMILY_SDXL;
    } else {
        const tsr_st_entry *k = tsr_st_find(
            s->st, "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight");
        m->family = (k && k->ndim == 2 && k->shape[1] == 1024) ? TSR_FAMILY_SD2 : TSR_FAMILY_SD1;
    }
    for (size_t p = 0; p < N_PREFIXES; p++) {
        int c = prefixes[p].comp;
        if (s->prefix[c] || !any_with_prefix(s->st, prefixes[p].prefix))
            continue;
        if (m->refiner && c == TSR_COMP_TEXT_ENCODER)
            continue;
        s->prefix[c] = prefixes[p].prefix;
        s->openclip[c] = prefixes[p].openclip;
    }
}

static int write_text_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return tsr_errorf(TSR_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    return ok ? TSR_OK : tsr_errorf(TSR_ERR_IO, "%s: write failed", path);
}

/* Remove what extract_tokenizers made (only the names it writes). */
void tsr_model_remove_tmp(tsr_model *m)
{
    if (!m->tmp_dir)
        return;
    static const char *const files[] = TSR_TOKENIZER_FILES;
    static const char *const tok[2] = {"tokenizer", "tokenizer_2"};
    char p[4096];
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < TSR_N_TOKENIZER_FILES; k++) {
            snprintf(p, sizeof p, "%s/%s/%s", m->tmp_dir, tok[i], files[k]);
            unlink(p);
        }
        snprintf(p, sizeof p, "%s/%s", m->tmp_dir, tok[i]);
        rmdir(p);
    }
    rmdir(m->tmp_dir);
    free(m->tmp_dir);
    m->tmp_dir = NULL;
}

/* Tokenizer folders carried in metadata -> a private temporary folder. */
static int extract_tokenizers(tsr_model *m, const tsr_safetensors *st)
{
    static const char *const files[] = TSR_TOKENIZER_FILES;
    static const char *const tok[2] = {"tokenizer", "tokenizer_2"};
    for (int i = 0; i < 2; i++) {
        char key[128], dir[4096], p[4200];
        snprintf(key, sizeof key, TSR_META_TOKENIZER_PREFIX "%s/vocab.json", tok[i]);
        if (!tsr_st_metadata(st, key))
            continue;
        if (!m->tmp_dir) {
            const char *base = getenv("TMPDIR");
            snprintf(dir, sizeof dir, "%s/tessera-model-XXXXXX", base && *base ? base : "/tmp");
            if (!mkdtemp(dir))
                return tsr_errorf(TSR_ERR_IO, "%s: cannot create a folder for its tokenizer (%s): %s",
                                  m->path, dir, strerror(errno));
            if (!(m->tmp_dir = strdup(dir)))
                return tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
        }
        snprintf(dir, sizeof dir, "%s/%s", m->tmp_dir, tok[i]);
        if (mkdir(dir, 0700) != 0)
            return tsr_errorf(TSR_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
        for (int k = 0; k < TSR_N_TOKENIZER_FILES; k++) {
            snprintf(key, sizeof key, TSR_META_TOKENIZER_PREFIX "%s/%s", tok[i], files[k]);
            const char *text = tsr_st_metadata(st, key);
            if (!text)
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, files[k]);
            TSR_TRY(write_text_file(p, text));
        }
        if (!(m->tokenizer_dir[i] = strdup(dir)))
            return tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
    }
    return TSR_OK;
}

/* "tessera.scheduler" / "tessera.model_index": JSON objects. */
static int json_from_metadata(const tsr_safetensors *st, const char *key, cJSON **out)
{
    const char *v = tsr_st_metadata(st, key);
    if (!v)
        return TSR_OK;
    char label[128];
    snprintf(label, sizeof label, "metadata %s", key);
    TSR_TRY(tsr_json_parse(v, strlen(v), label, out));
    return tsr_json_expect_object(*out, label, "an object");
}

int tsr_model_open_single(tsr_model *m, const char *path)
{
    tsr_safetensors *st = NULL;
    m->layout = TSR_LAYOUT_SINGLE_FILE;
    TSR_TRY(tsr_st_open(path, &st));
    TSR_TRY(tsr_model_add_file(m, st));
    single_ctx s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.st = st;
    detect_family(&s);
    if (!s.prefix[TSR_COMP_UNET])
        return tsr_errorf(TSR_ERR_FORMAT,
                          "%s: no UNet tensors (model.diffusion_model.*): not an SD checkpoint in "
                          "the original LDM layout",
                          path);
    /* text encoders first: the UNet's add-embedding width depends on them */
    static const tsr_component order[] = {TSR_COMP_TEXT_ENCODER, TSR_COMP_TEXT_ENCODER_2,
                                          TSR_COMP_UNET, TSR_COMP_VAE};
    for (int i = 0; i < TSR_COMP_COUNT; i++) {
        tsr_component c = order[i];
        if (!s.prefix[c])
            continue;
        m->comp[c].present = true;
        int rc = synthesise(&s, c);
        if (rc < 0)
            return tsr_error_prefix(rc, "%s", tsr_component_name(c));
    }
    pending_t pend[8];
    int n_pend = 0;
    for (int c = 0; c < TSR_COMP_COUNT; c++)
        if (s.prefix[c])
            TSR_TRY(map_component(&s, (tsr_component)c, pend, &n_pend, 8));
    TSR_TRY(add_transposed(m, st, pend, n_pend));
    /* keys under no component prefix */
    for (size_t i = 0; i < tsr_st_count(st); i++) {
        const char *k = tsr_st_entry_at(st, i)->name;
        bool claimed = false;
        for (int c = 0; c < TSR_COMP_COUNT && !claimed; c++)
            claimed = s.prefix[c] && strncmp(k, s.prefix[c], strlen(s.prefix[c])) == 0;
        if (claimed)
            continue;
        if (known_ignored(k))
            m->n_ignored++;
        else
            TSR_TRY(tsr_model_add_unrecognised(m, k));
    }
    TSR_TRY(tsr_model_finish_index(m));

    const tsr_unet_desc *u = &m->comp[TSR_COMP_UNET].unet;
    m->inpainting = u->in_channels == 9;
    m->prediction = TSR_PREDICTION_EPSILON;
    m->prediction_assumed = false;
    const char *meta = tsr_st_metadata(st, TSR_META_PREDICTION);
    if (meta && strcmp(meta, "v_prediction") == 0) {
        m->prediction = TSR_PREDICTION_V;
    } else if (meta && strcmp(meta, "epsilon") == 0) {
        m->prediction = TSR_PREDICTION_EPSILON;
    } else if (tsr_st_find(st, "v_pred") || tsr_st_find(st, "edm_vpred")) {
        m->prediction = TSR_PREDICTION_V; /* marker key some v-prediction SDXL merges carry */
    } else if (m->family == TSR_FAMILY_SD2) {
        m->prediction = TSR_PREDICTION_V;
        m->prediction_assumed = true;
    }
    TSR_TRY(json_from_metadata(st, TSR_META_SCHEDULER, &m->scheduler));
    TSR_TRY(json_from_metadata(st, TSR_META_INDEX, &m->index));
    return extract_tokenizers(m, st);
}
