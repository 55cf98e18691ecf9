/*
 * model/lora_keys.c - LoRA file keys -> (component, model weight, part).
 *
 * Why a table and not string surgery: kohya flattens a module path by
 * turning every '.' into '_' (lora_unet_down_blocks_0_attentions_0_proj_in),
 * and module names contain underscores of their own (to_out, proj_in,
 * time_emb_proj), so a flattened name cannot be split back reliably.  It
 * can be looked up: the table holds, for every `<module>.weight` of the
 * model, the flattened diffusers name and (UNet) the flattened LDM name
 * (input_blocks_4_1_..., what kohya writes for SDXL) produced by the same
 * rules that read single-file checkpoints (model/ldm_names.c), plus the
 * dotted diffusers name for PEFT/diffusers keys.  A key either finds its
 * module or is reported by name.  Parsing is pure (no model, no files), so
 * fuzz/fuzz_lora_keys.c drives it directly.
 */
#include "model/lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/ldm_names.h"

typedef struct suffix_form {
    const char *suffix;
    tsr_lora_part part;
} suffix_form;

/* Longest first where one suffix ends another. */
static const suffix_form forms[] = {
    {".lora_down.weight", TSR_LORA_PART_DOWN}, {".lora_up.weight", TSR_LORA_PART_UP},
    {".lora_A.weight", TSR_LORA_PART_DOWN},    {".lora_B.weight", TSR_LORA_PART_UP},
    {".lora.down.weight", TSR_LORA_PART_DOWN}, {".lora.up.weight", TSR_LORA_PART_UP},
    {"_lora.down.weight", TSR_LORA_PART_DOWN}, {"_lora.up.weight", TSR_LORA_PART_UP},
    {".alpha", TSR_LORA_PART_ALPHA},
};

/* Known adapter kinds this engine does not run: named, not "unknown". */
static const char *const unsupported[] = {
    ".lora_mid.weight", ".hada_", ".lokr_", ".dora_scale", ".lora_magnitude_vector",
    ".diff", ".diff_b", ".oft_", ".ia3_",
};

static bool ends_with(const char *s, size_t n, const char *suf)
{
    const size_t k = strlen(suf);
    return n >= k && memcmp(s + n - k, suf, k) == 0;
}

int tsr_lora_parse_key(const char *key, tsr_lora_key *out)
{
    memset(out, 0, sizeof *out);
    if (!key)
        return tsr_errorf(TSR_ERR_INVALID, "lora: NULL key");
    static const struct {
        const char *prefix;
        tsr_component comp;
        bool flat;
    } prefixes[] = {
        {"lora_unet_", TSR_COMP_UNET, true},
        {"lora_te1_", TSR_COMP_TEXT_ENCODER, true},
        {"lora_te2_", TSR_COMP_TEXT_ENCODER_2, true},
        {"lora_te_", TSR_COMP_TEXT_ENCODER, true},
        {"unet.", TSR_COMP_UNET, false},
        {"text_encoder_2.", TSR_COMP_TEXT_ENCODER_2, false},
        {"text_encoder.", TSR_COMP_TEXT_ENCODER, false},
    };
    size_t skip = 0;
    bool found = false;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        const size_t k = strlen(prefixes[i].prefix);
        if (strncmp(key, prefixes[i].prefix, k) == 0) {
            out->comp = prefixes[i].comp;
            out->flat = prefixes[i].flat;
            skip = k;
            found = true;
            break;
        }
    }
    if (!found)
        return tsr_errorf(TSR_ERR_NOT_FOUND, "lora: unknown key '%.200s' (not lora_unet_*, "
                          "lora_te*_*, unet.*, text_encoder*.*)", key);
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (strstr(key + skip, unsupported[i]))
            return tsr_errorf(TSR_ERR_UNSUPPORTED,
                              "lora: key '%.200s' is of an adapter kind not supported here "
                              "(LoRA and LoCon are; LoCon's Tucker lora_mid, LoHa, LoKr, DoRA, "
                              "OFT, IA3 and full diffs are not)", key);
    const char *body = key + skip;
    const size_t n = strlen(body);
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        if (!ends_with(body, n, forms[i].suffix))
            continue;
        size_t m = n - strlen(forms[i].suffix);
        if (m == 0 || m >= sizeof out->module)
            break;
        memcpy(out->module, body, m);
        out->module[m] = '\0';
        out->part = forms[i].part;
        if (forms[i].suffix[0] == '_') {
            /* old diffusers attention processors:
             * "<attn>.processor.to_q_lora.down.weight" -> "<attn>.to_q";
             * to_out_lora is to_out.0 */
            char *proc = strstr(out->module, ".processor.");
            if (out->flat || !proc)
                break;
            char tail[64];
            snprintf(tail, sizeof tail, "%s", proc + strlen(".processor."));
            *proc = '\0';
            const size_t left = sizeof out->module - strlen(out->module);
            snprintf(out->module + strlen(out->module), left, ".%s%s", tail,
                     strcmp(tail, "to_out") == 0 ? ".0" : "");
        }
        return TSR_OK;
    }
    return tsr_errorf(TSR_ERR_NOT_FOUND,
                      "lora: unknown key '%.200s' (no .lora_down/.lora_up/.lora_A/.lora_B/"
                      ".alpha suffix)", key);
}

/* ---- the module table ---- */

typedef struct name_pair {
    char *key;    /* owned: flattened or dotted module */
    char *weight; /* owned: "<module>.weight" (diffusers) */
} name_pair;

struct tsr_lora_names {
    name_pair *flat, *dotted;
    size_t n_flat, n_dotted, cap_flat;
};

static int cmp_pair(const void *a, const void *b)
{
    return strcmp(((const name_pair *)a)->key, ((const name_pair *)b)->key);
}

static int add_flat(tsr_lora_names *t, const char *module, const char *weight)
{
    if (t->n_flat == t->cap_flat) {
        size_t cap = t->cap_flat ? 2 * t->cap_flat : 256;
        name_pair *p = realloc(t->flat, cap * sizeof *p);
        if (!p)
            return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
        t->flat = p;
        t->cap_flat = cap;
    }
    char *k = strdup(module), *w = strdup(weight);
    if (!k || !w) {
        free(k);
        free(w);
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    }
    for (char *c = k; *c; c++)
        if (*c == '.')
            *c = '_';
    t->flat[t->n_flat++] = (name_pair){k, w};
    return TSR_OK;
}

void tsr_lora_names_free(tsr_lora_names *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_flat; i++) {
        free(t->flat[i].key);
        free(t->flat[i].weight);
    }
    for (size_t i = 0; i < t->n_dotted; i++) {
        free(t->dotted[i].key);
        free(t->dotted[i].weight);
    }
    free(t->flat);
    free(t->dotted);
    free(t);
}

int tsr_lora_names_build(const char *const *names, size_t n, const tsr_unet_desc *ldm,
                         tsr_lora_names **out)
{
    *out = NULL;
    tsr_lora_names *t = calloc(1, sizeof *t);
    if (!t || !(t->dotted = calloc(n ? n : 1, sizeof *t->dotted)))
        goto nomem;
    tsr_ldm_map map;
    tsr_ldm_map_init(&map);
    int rc = TSR_OK;
    if (ldm)
        TSR_CHECK_GOTO(rc, tsr_ldm_unet_rules(ldm, &map), fail);
    for (size_t i = 0; i < n; i++) {
        const size_t len = strlen(names[i]);
        if (!ends_with(names[i], len, ".weight") || len - 7 >= 256)
            continue;
        char module[256];
        memcpy(module, names[i], len - 7);
        module[len - 7] = '\0';
        name_pair *d = &t->dotted[t->n_dotted];
        d->key = strdup(module);
        d->weight = strdup(names[i]);
        t->n_dotted++;
        if (!d->key || !d->weight) {
            rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
            goto fail;
        }
        TSR_CHECK_GOTO(rc, add_flat(t, module, names[i]), fail);
        char l[TSR_LDM_NAME_MAX];
        tsr_ldm_xform xf;
        int part;
        if (ldm && tsr_ldm_from_internal(&map, names[i], l, sizeof l, &xf, &part)) {
            const size_t ll = strlen(l);
            if (ends_with(l, ll, ".weight")) {
                l[ll - 7] = '\0';
                TSR_CHECK_GOTO(rc, add_flat(t, l, names[i]), fail);
            }
        }
    }
    tsr_ldm_map_free(&map);
    qsort(t->flat, t->n_flat, sizeof *t->flat, cmp_pair);
    qsort(t->dotted, t->n_dotted, sizeof *t->dotted, cmp_pair);
    *out = t;
    return TSR_OK;
fail:
    tsr_ldm_map_free(&map);
    tsr_lora_names_free(t);
    return rc;
nomem:
    tsr_lora_names_free(t);
    return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
}

const char *tsr_lora_names_find(const tsr_lora_names *t, const tsr_lora_key *k)
{
    if (!t || !k)
        return NULL;
    const name_pair key = {(char *)k->module, NULL};
    const name_pair *p = k->flat ? bsearch(&key, t->flat, t->n_flat, sizeof key, cmp_pair)
                                 : bsearch(&key, t->dotted, t->n_dotted, sizeof key, cmp_pair);
    return p ? p->weight : NULL;
}
