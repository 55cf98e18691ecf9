/*
 * model/ldm_names.c - rule generation and lookup for LDM <-> diffusers names.
 *
 * Why: see ldm_names.h.  The generators below are the only place that knows
 * the LDM block numbering; the lookup is generic (longest matching prefix,
 * then the kind's suffix table), so adding a family is adding rules, not
 * code paths.  A few hundred rules times a few thousand keys is a linear
 * scan of well under a million short compares: not worth an index.
 */
#include "model/ldm_names.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct suffix_rule {
    const char *ldm;  /* prefix of the remaining name, or whole name when exact */
    const char *diff;
    tsr_ldm_xform xform; /* applied to ".weight" only, except for exact rules */
    int part;
    bool exact;
} suffix_rule;

static const suffix_rule unet_res[] = {
    {"in_layers.0.", "norm1.", TSR_XF_NONE, 0, false},
    {"in_layers.2.", "conv1.", TSR_XF_NONE, 0, false},
    {"emb_layers.1.", "time_emb_proj.", TSR_XF_NONE, 0, false},
    {"out_layers.0.", "norm2.", TSR_XF_NONE, 0, false},
    {"out_layers.3.", "conv2.", TSR_XF_NONE, 0, false},
    {"skip_connection.", "conv_shortcut.", TSR_XF_NONE, 0, false},
};

static const suffix_rule vae_res[] = {
    {"norm1.", "norm1.", TSR_XF_NONE, 0, false},
    {"conv1.", "conv1.", TSR_XF_NONE, 0, false},
    {"norm2.", "norm2.", TSR_XF_NONE, 0, false},
    {"conv2.", "conv2.", TSR_XF_NONE, 0, false},
    {"nin_shortcut.", "conv_shortcut.", TSR_XF_NONE, 0, false},
};

static const suffix_rule vae_attn[] = {
    {"norm.", "group_norm.", TSR_XF_NONE, 0, false},
    {"q.", "to_q.", TSR_XF_SQUEEZE, 0, false},
    {"k.", "to_k.", TSR_XF_SQUEEZE, 0, false},
    {"v.", "to_v.", TSR_XF_SQUEEZE, 0, false},
    {"proj_out.", "to_out.0.", TSR_XF_SQUEEZE, 0, false},
};

static const suffix_rule openclip_layer[] = {
    {"ln_1.", "layer_norm1.", TSR_XF_NONE, 0, false},
    {"ln_2.", "layer_norm2.", TSR_XF_NONE, 0, false},
    {"mlp.c_fc.", "mlp.fc1.", TSR_XF_NONE, 0, false},
    {"mlp.c_proj.", "mlp.fc2.", TSR_XF_NONE, 0, false},
    {"attn.out_proj.", "self_attn.out_proj.", TSR_XF_NONE, 0, false},
    {"attn.in_proj_weight", "self_attn.q_proj.weight", TSR_XF_SPLIT3, 0, true},
    {"attn.in_proj_weight", "self_attn.k_proj.weight", TSR_XF_SPLIT3, 1, true},
    {"attn.in_proj_weight", "self_attn.v_proj.weight", TSR_XF_SPLIT3, 2, true},
    {"attn.in_proj_bias", "self_attn.q_proj.bias", TSR_XF_SPLIT3, 0, true},
    {"attn.in_proj_bias", "self_attn.k_proj.bias", TSR_XF_SPLIT3, 1, true},
    {"attn.in_proj_bias", "self_attn.v_proj.bias", TSR_XF_SPLIT3, 2, true},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const suffix_rule *suffix_table(tsr_ldm_kind kind, size_t *n)
{
    switch (kind) {
    case TSR_LDM_UNET_RES: *n = COUNT(unet_res); return unet_res;
    case TSR_LDM_VAE_RES: *n = COUNT(vae_res); return vae_res;
    case TSR_LDM_VAE_ATTN: *n = COUNT(vae_attn); return vae_attn;
    case TSR_LDM_OPENCLIP_LAYER: *n = COUNT(openclip_layer); return openclip_layer;
    default: *n = 0; return NULL;
    }
}

void tsr_ldm_map_init(tsr_ldm_map *m) { memset(m, 0, sizeof *m); }

void tsr_ldm_map_free(tsr_ldm_map *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->rules[i].ldm);
        free(m->rules[i].diff);
    }
    free(m->rules);
    memset(m, 0, sizeof *m);
}

int tsr_ldm_map_add(tsr_ldm_map *m, const char *ldm, const char *diff, tsr_ldm_kind kind,
                    tsr_ldm_xform xform, bool exact, bool forward_only)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        tsr_ldm_rule *r = realloc(m->rules, cap * sizeof *r);
        if (!r)
            return tsr_errorf(TSR_ERR_NOMEM, "ldm names: out of memory");
        m->rules = r;
        m->cap = cap;
    }
    tsr_ldm_rule *r = &m->rules[m->n];
    memset(r, 0, sizeof *r);
    r->ldm = strdup(ldm);
    r->diff = diff ? strdup(diff) : NULL;
    if (!r->ldm || (diff && !r->diff)) {
        free(r->ldm);
        free(r->diff);
        return tsr_errorf(TSR_ERR_NOMEM, "ldm names: out of memory");
    }
    r->kind = kind;
    r->xform = xform;
    r->exact = exact;
    r->forward_only = forward_only;
    m->n++;
    return TSR_OK;
}

/* printf-style prefix rule */
static int addf(tsr_ldm_map *m, tsr_ldm_kind kind, const char *diff_fmt, const char *ldm_fmt, ...)
    TSR_PRINTF(4, 5);

static int addf(tsr_ldm_map *m, tsr_ldm_kind kind, const char *diff, const char *ldm_fmt, ...)
{
    char ldm[TSR_LDM_NAME_MAX];
    va_list ap;
    va_start(ap, ldm_fmt);
    vsnprintf(ldm, sizeof ldm, ldm_fmt, ap);
    va_end(ap);
    return tsr_ldm_map_add(m, ldm, diff, kind, TSR_XF_NONE, false, false);
}

#define DIFF(...) (snprintf(dbuf, sizeof dbuf, __VA_ARGS__), dbuf)

int tsr_ldm_unet_rules(const tsr_unet_desc *c, tsr_ldm_map *m)
{
    char dbuf[TSR_LDM_NAME_MAX];
    const int nb = c->n_blocks, L = c->layers_per_block;
    TSR_TRY(addf(m, TSR_LDM_SAME, "time_embedding.linear_1.", "time_embed.0."));
    TSR_TRY(addf(m, TSR_LDM_SAME, "time_embedding.linear_2.", "time_embed.2."));
    if (c->text_time) {
        TSR_TRY(addf(m, TSR_LDM_SAME, "add_embedding.linear_1.", "label_emb.0.0."));
        TSR_TRY(addf(m, TSR_LDM_SAME, "add_embedding.linear_2.", "label_emb.0.2."));
    }
    TSR_TRY(addf(m, TSR_LDM_SAME, "conv_in.", "input_blocks.0.0."));
    TSR_TRY(addf(m, TSR_LDM_SAME, "conv_norm_out.", "out.0."));
    TSR_TRY(addf(m, TSR_LDM_SAME, "conv_out.", "out.2."));
    for (int i = 0; i < nb; i++) {
        for (int j = 0; j < L; j++) {
            int n = 1 + i * (L + 1) + j;
            TSR_TRY(addf(m, TSR_LDM_UNET_RES, DIFF("down_blocks.%d.resnets.%d.", i, j),
                         "input_blocks.%d.0.", n));
            if (c->down_attn[i])
                TSR_TRY(addf(m, TSR_LDM_SAME, DIFF("down_blocks.%d.attentions.%d.", i, j),
                             "input_blocks.%d.1.", n));
        }
        if (i < nb - 1)
            TSR_TRY(addf(m, TSR_LDM_SAME, DIFF("down_blocks.%d.downsamplers.0.conv.", i),
                         "input_blocks.%d.0.op.", 1 + i * (L + 1) + L));
    }
    TSR_TRY(addf(m, TSR_LDM_UNET_RES, "mid_block.resnets.0.", "middle_block.0."));
    TSR_TRY(addf(m, TSR_LDM_SAME, "mid_block.attentions.0.", "middle_block.1."));
    TSR_TRY(addf(m, TSR_LDM_UNET_RES, "mid_block.resnets.1.", "middle_block.2."));
    for (int i = 0; i < nb; i++) {
        for (int j = 0; j <= L; j++) {
            int n = i * (L + 1) + j;
            TSR_TRY(addf(m, TSR_LDM_UNET_RES, DIFF("up_blocks.%d.resnets.%d.", i, j),
                         "output_blocks.%d.0.", n));
            if (c->up_attn[i])
                TSR_TRY(addf(m, TSR_LDM_SAME, DIFF("up_blocks.%d.attentions.%d.", i, j),
                             "output_blocks.%d.1.", n));
        }
        if (i < nb - 1)
            TSR_TRY(addf(m, TSR_LDM_SAME, DIFF("up_blocks.%d.upsamplers.0.conv.", i),
                         "output_blocks.%d.%d.conv.", i * (L + 1) + L, c->up_attn[i] ? 2 : 1));
    }
    return TSR_OK;
}

int tsr_ldm_vae_rules(const tsr_vae_desc *c, tsr_ldm_map *m)
{
    char dbuf[TSR_LDM_NAME_MAX];
    const int nb = c->n_blocks, L = c->layers_per_block;
    static const char *const parts[2] = {"encoder", "decoder"};
    for (int p = 0; p < 2; p++) {
        const char *s = parts[p];
        TSR_TRY(addf(m, TSR_LDM_SAME, DIFF("%s.conv_in.", s), "%s.conv_in.", s));
        TSR_TRY(addf(m, TSR_LDM_SAME, DIFF("%s.conv_out.", s), "%s.conv_out.", s));
        TSR_TRY(addf(m, TSR_LDM_SAME, DIFF("%s.conv_norm_out.", s), "%s.norm_out.", s));
        TSR_TRY(addf(m, TSR_LDM_VAE_RES, DIFF("%s.mid_block.resnets.0.", s), "%s.mid.block_1.", s));
        TSR_TRY(addf(m, TSR_LDM_VAE_RES, DIFF("%s.mid_block.resnets.1.", s), "%s.mid.block_2.", s));
        TSR_TRY(addf(m, TSR_LDM_VAE_ATTN, DIFF("%s.mid_block.attentions.0.", s), "%s.mid.attn_1.",
                     s));
    }
    for (int i = 0; i < nb; i++) {
        for (int j = 0; j < L; j++)
            TSR_TRY(addf(m, TSR_LDM_VAE_RES, DIFF("encoder.down_blocks.%d.resnets.%d.", i, j),
                         "encoder.down.%d.block.%d.", i, j));
        if (i < nb - 1)
            TSR_TRY(addf(m, TSR_LDM_SAME, DIFF("encoder.down_blocks.%d.downsamplers.0.conv.", i),
                         "encoder.down.%d.downsample.conv.", i));
        int u = nb - 1 - i; /* LDM numbers decoder blocks from the lowest resolution up */
        for (int j = 0; j <= L; j++)
            TSR_TRY(addf(m, TSR_LDM_VAE_RES, DIFF("decoder.up_blocks.%d.resnets.%d.", i, j),
                         "decoder.up.%d.block.%d.", u, j));
        if (i < nb - 1)
            TSR_TRY(addf(m, TSR_LDM_SAME, DIFF("decoder.up_blocks.%d.upsamplers.0.conv.", i),
                         "decoder.up.%d.upsample.conv.", u));
    }
    TSR_TRY(addf(m, TSR_LDM_SAME, "quant_conv.", "quant_conv."));
    TSR_TRY(addf(m, TSR_LDM_SAME, "post_quant_conv.", "post_quant_conv."));
    /* training-only discriminator/LPIPS weights some checkpoints carry */
    TSR_TRY(tsr_ldm_map_add(m, "loss.", NULL, TSR_LDM_IGNORE, TSR_XF_NONE, false, false));
    return TSR_OK;
}

int tsr_ldm_clip_hf_rules(tsr_ldm_map *m)
{
    TSR_TRY(tsr_ldm_map_add(m, "text_model.", "text_model.", TSR_LDM_SAME, TSR_XF_NONE, false,
                            false));
    /* transformers < 4.2 and >= 5 save CLIPTextModel without the "text_model." level */
    TSR_TRY(tsr_ldm_map_add(m, "embeddings.", "text_model.embeddings.", TSR_LDM_SAME, TSR_XF_NONE,
                            false, true));
    TSR_TRY(tsr_ldm_map_add(m, "encoder.", "text_model.encoder.", TSR_LDM_SAME, TSR_XF_NONE,
                            false, true));
    TSR_TRY(tsr_ldm_map_add(m, "final_layer_norm.", "text_model.final_layer_norm.", TSR_LDM_SAME,
                            TSR_XF_NONE, false, true));
    TSR_TRY(tsr_ldm_map_add(m, "text_model.embeddings.position_ids", NULL, TSR_LDM_IGNORE,
                            TSR_XF_NONE, true, false));
    TSR_TRY(tsr_ldm_map_add(m, "embeddings.position_ids", NULL, TSR_LDM_IGNORE, TSR_XF_NONE, true,
                            false));
    return TSR_OK;
}

int tsr_ldm_openclip_rules(int keep_layers, int total_layers, bool with_projection,
                           tsr_ldm_map *m)
{
    char dbuf[TSR_LDM_NAME_MAX];
    TSR_TRY(tsr_ldm_map_add(m, "token_embedding.weight",
                            "text_model.embeddings.token_embedding.weight", TSR_LDM_EXACT,
                            TSR_XF_NONE, true, false));
    TSR_TRY(tsr_ldm_map_add(m, "positional_embedding",
                            "text_model.embeddings.position_embedding.weight", TSR_LDM_EXACT,
                            TSR_XF_NONE, true, false));
    TSR_TRY(addf(m, TSR_LDM_SAME, "text_model.final_layer_norm.", "ln_final."));
    for (int i = 0; i < total_layers; i++) {
        if (i < keep_layers)
            TSR_TRY(addf(m, TSR_LDM_OPENCLIP_LAYER, DIFF("text_model.encoder.layers.%d.", i),
                         "transformer.resblocks.%d.", i));
        else
            TSR_TRY(addf(m, TSR_LDM_IGNORE, NULL, "transformer.resblocks.%d.", i));
    }
    if (with_projection)
        TSR_TRY(tsr_ldm_map_add(m, "text_projection", "text_projection.weight", TSR_LDM_EXACT,
                                TSR_XF_TRANSPOSE, true, false));
    else
        TSR_TRY(tsr_ldm_map_add(m, "text_projection", NULL, TSR_LDM_IGNORE, TSR_XF_NONE, true,
                                false));
    TSR_TRY(tsr_ldm_map_add(m, "logit_scale", NULL, TSR_LDM_IGNORE, TSR_XF_NONE, true, false));
    TSR_TRY(tsr_ldm_map_add(m, "attn_mask", NULL, TSR_LDM_IGNORE, TSR_XF_NONE, true, false));
    return TSR_OK;
}

static bool starts_with(const char *s, const char *prefix, size_t *len)
{
    size_t n = strlen(prefix);
    *len = n;
    return strncmp(s, prefix, n) == 0;
}

static bool join(char *dst, size_t size, const char *a, const char *b)
{
    int n = snprintf(dst, size, "%s%s", a, b);
    return n >= 0 && (size_t)n < size;
}

/* Apply a rule's suffix table to `rest`; returns targets written. */
static int apply_suffix(const tsr_ldm_rule *r, const char *rest, tsr_ldm_target out[3])
{
    if (r->kind == TSR_LDM_SAME)
        return join(out[0].name, sizeof out[0].name, r->diff, rest) ? (out[0].xform = TSR_XF_NONE,
                                                                       out[0].part = 0, 1)
                                                                    : 0;
    size_t n = 0, len = 0;
    const suffix_rule *t = suffix_table(r->kind, &n);
    int count = 0;
    for (size_t i = 0; i < n && count < 3; i++) {
        if (t[i].exact ? strcmp(rest, t[i].ldm) != 0 : !starts_with(rest, t[i].ldm, &len))
            continue;
        const char *tail = t[i].exact ? "" : rest + len;
        char mid[TSR_LDM_NAME_MAX];
        if (!join(mid, sizeof mid, t[i].diff, tail) ||
            !join(out[count].name, sizeof out[count].name, r->diff, mid))
            return 0;
        out[count].xform = TSR_XF_NONE;
        if (t[i].xform == TSR_XF_SPLIT3 || (t[i].xform != TSR_XF_NONE && strcmp(tail, "weight") == 0))
            out[count].xform = t[i].xform;
        out[count].part = t[i].part;
        count++;
        if (!t[i].exact)
            break;
    }
    return count;
}

int tsr_ldm_to_internal(const tsr_ldm_map *m, const char *ldm, tsr_ldm_target out[3],
                        bool *ignored)
{
    const tsr_ldm_rule *best = NULL;
    size_t best_len = 0;
    *ignored = false;
    for (size_t i = 0; i < m->n; i++) {
        const tsr_ldm_rule *r = &m->rules[i];
        size_t len = 0;
        if (r->exact) {
            if (strcmp(ldm, r->ldm) != 0)
                continue;
            len = strlen(r->ldm) + 1; /* an exact match beats any prefix */
        } else if (!starts_with(ldm, r->ldm, &len)) {
            continue;
        }
        if (!best || len > best_len) {
            best = r;
            best_len = len;
        }
    }
    if (!best)
        return 0;
    if (best->kind == TSR_LDM_IGNORE) {
        *ignored = true;
        return 0;
    }
    if (best->kind == TSR_LDM_EXACT) {
        if (!join(out[0].name, sizeof out[0].name, best->diff, ""))
            return 0;
        out[0].xform = best->xform;
        out[0].part = 0;
        return 1;
    }
    return apply_suffix(best, ldm + strlen(best->ldm), out);
}

bool tsr_ldm_from_internal(const tsr_ldm_map *m, const char *internal, char *ldm, size_t size,
                           tsr_ldm_xform *xform, int *part)
{
    const tsr_ldm_rule *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < m->n; i++) {
        const tsr_ldm_rule *r = &m->rules[i];
        size_t len = 0;
        if (!r->diff || r->forward_only)
            continue;
        if (r->kind == TSR_LDM_EXACT) {
            if (strcmp(internal, r->diff) != 0)
                continue;
            len = strlen(r->diff) + 1;
        } else if (!starts_with(internal, r->diff, &len)) {
            continue;
        }
        if (!best || len > best_len) {
            best = r;
            best_len = len;
        }
    }
    if (!best)
        return false;
    *xform = TSR_XF_NONE;
    *part = 0;
    if (best->kind == TSR_LDM_EXACT) {
        *xform = best->xform;
        return join(ldm, size, best->ldm, "");
    }
    const char *rest = internal + strlen(best->diff);
    if (best->kind == TSR_LDM_SAME)
        return join(ldm, size, best->ldm, rest);
    size_t n = 0, len = 0;
    const suffix_rule *t = suffix_table(best->kind, &n);
    for (size_t i = 0; i < n; i++) {
        if (t[i].exact ? strcmp(rest, t[i].diff) != 0 : !starts_with(rest, t[i].diff, &len))
            continue;
        const char *tail = t[i].exact ? "" : rest + len;
        char mid[TSR_LDM_NAME_MAX];
        if (!join(mid, sizeof mid, t[i].ldm, tail))
            return false;
        if (t[i].xform == TSR_XF_SPLIT3 || (t[i].xform != TSR_XF_NONE && strcmp(tail, "weight") == 0))
            *xform = t[i].xform;
        *part = t[i].part;
        return join(ldm, size, best->ldm, mid);
    }
    return false;
}
