/*
 * cli/cmd_convert.c - `tessera convert IN OUT [--to diffusers|single]
 * [--dtype f16|f32|keep]`.
 *
 * Why: people hold models in both layouts and some tools want one or the
 * other.  Conversion goes through the same index a generation would use
 * (tsr_model_open), so the output is exactly what Tessera reads; the LDM
 * names come from walking model/ldm_names.c's rules backwards (q/k/v rows are
 * re-fused, text_projection transposed back, VAE attention linears become
 * 1x1 convs).  Single files get "tessera.config.*" metadata so converting
 * back restores the configs exactly (head counts cannot be read from
 * shapes), and the rest of the folder that generation reads - the
 * scheduler config, model_index.json and the tokenizer files - as
 * "tessera.scheduler", "tessera.model_index" and "tessera.tokenizer/<file>",
 * so the single file generates the folder's images (model/model_single.c
 * reads them back).  A single file without them (a real LDM checkpoint)
 * becomes a folder with what diffusers' from_single_file() completes it
 * with: the family's scheduler config and CLIP tokenizer folders
 * (model/model_defaults.c, text/bpe_default.c).
 *
 * IN and OUT must be different places, neither inside the other: that is
 * checked on the resolved paths before anything is read or written.  All
 * buffers made here are owned by one list and freed at the end;
 * tsr_st_write writes to a temporary file and renames.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "model/ldm_names.h"
#include "model/model.h"
#include "text/tokenizer.h"

#define META_MAX 64 /* metadata pairs written into a single file */
#define TOKENIZER_FILE_MAX (16u << 20)

typedef struct out_list {
    tsr_st_write_entry *e;
    char **names;
    void **bufs; /* owned data buffers (NULL when borrowed) */
    size_t n, cap;
} out_list;

static void out_free(out_list *o)
{
    for (size_t i = 0; i < o->n; i++) {
        free(o->names[i]);
        free(o->bufs[i]);
    }
    free(o->e);
    free(o->names);
    free(o->bufs);
    memset(o, 0, sizeof *o);
}

static tsr_st_write_entry *out_add(out_list *o, const char *name, char **name_out)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 512;
        tsr_st_write_entry *e = realloc(o->e, cap * sizeof *e);
        if (e)
            o->e = e;
        char **nm = realloc(o->names, cap * sizeof *nm);
        if (nm)
            o->names = nm;
        void **b = realloc(o->bufs, cap * sizeof *b);
        if (b)
            o->bufs = b;
        if (!e || !nm || !b)
            return NULL;
        o->cap = cap;
    }
    size_t i = o->n;
    memset(&o->e[i], 0, sizeof o->e[i]);
    o->bufs[i] = NULL;
    if (!(o->names[i] = strdup(name)))
        return NULL;
    o->e[i].name = o->names[i];
    if (name_out)
        *name_out = o->names[i];
    o->n++;
    return &o->e[i];
}

static tsr_st_write_entry *out_find(out_list *o, const char *name, size_t *idx)
{
    for (size_t i = o->n; i-- > 0;)
        if (strcmp(o->names[i], name) == 0) {
            *idx = i;
            return &o->e[i];
        }
    return NULL;
}

/* Convert `src` (dtype sd, n elements) to the target dtype; returns an
 * owned buffer or NULL when no conversion is needed (*dt set either way). */
static int convert_dtype(const void *src, tsr_st_dtype sd, uint64_t n, const char *want,
                         tsr_st_dtype *dt, void **owned)
{
    *dt = sd;
    *owned = NULL;
    tsr_dtype from;
    if (!want || strcmp(want, "keep") == 0 || !tsr_st_dtype_to_tsr(sd, &from))
        return TSR_OK;
    tsr_st_dtype target = strcmp(want, "f16") == 0 ? TSR_ST_F16 : TSR_ST_F32;
    if (target == sd)
        return TSR_OK;
    float *tmp = malloc(n * 4 + 1);
    void *dst = malloc(n * tsr_st_dtype_size(target) + 1);
    void *copy = malloc(n * tsr_st_dtype_size(sd) + 1);
    if (!tmp || !dst || !copy) {
        free(tmp);
        free(dst);
        free(copy);
        return tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
    }
    memcpy(copy, src, n * tsr_st_dtype_size(sd));
    tsr_convert_to_f32(tmp, copy, from, n);
    tsr_convert_from_f32(dst, target == TSR_ST_F16 ? TSR_F16 : TSR_F32, tmp, n);
    free(tmp);
    free(copy);
    *dt = target;
    *owned = dst;
    return TSR_OK;
}

static int rules_for(const tsr_model *m, tsr_component c, tsr_ldm_map *map, const char **prefix)
{
    tsr_family f = tsr_model_family(m);
    const tsr_textenc_desc *te = NULL;
    switch (c) {
    case TSR_COMP_UNET:
        *prefix = "model.diffusion_model.";
        return tsr_ldm_unet_rules(tsr_model_unet_desc(m), map);
    case TSR_COMP_VAE:
        *prefix = "first_stage_model.";
        return tsr_ldm_vae_rules(tsr_model_vae_desc(m), map);
    case TSR_COMP_TEXT_ENCODER:
        te = tsr_model_textenc_desc(m, 0);
        if (f == TSR_FAMILY_SD2) {
            *prefix = "cond_stage_model.model.";
            return tsr_ldm_openclip_rules(te->num_hidden_layers, te->num_hidden_layers, false, map);
        }
        *prefix = f == TSR_FAMILY_SDXL ? "conditioner.embedders.0.transformer."
                                       : "cond_stage_model.transformer.";
        return tsr_ldm_clip_hf_rules(map);
    default:
        te = tsr_model_textenc_desc(m, 1);
        *prefix = tsr_model_is_refiner(m) ? "conditioner.embedders.0.model."
                                          : "conditioner.embedders.1.model.";
        return tsr_ldm_openclip_rules(te->num_hidden_layers, te->num_hidden_layers, true, map);
    }
}

static int add_ldm_component(const tsr_model *m, tsr_component c, const char *dtype,
                             out_list *o)
{
    tsr_ldm_map map;
    tsr_ldm_map_init(&map);
    const char *prefix = "";
    int rc = rules_for(m, c, &map, &prefix);
    for (size_t i = 0; rc >= 0 && i < tsr_model_tensor_count(m, c); i++) {
        const char *name;
        const tsr_safetensors *f;
        const tsr_st_entry *e;
        TSR_CHECK_GOTO(rc, tsr_model_tensor_at(m, c, i, &name, &f, &e), done);
        char rel[TSR_LDM_NAME_MAX], full[TSR_LDM_NAME_MAX * 2];
        tsr_ldm_xform xf;
        int part;
        if (!tsr_ldm_from_internal(&map, name, rel, sizeof rel, &xf, &part)) {
            rc = tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: %s tensor '%s' has no LDM name",
                            tsr_model_path(m), tsr_component_name(c), name);
            goto done;
        }
        snprintf(full, sizeof full, "%s%s", prefix, rel);
        void *conv = NULL;
        tsr_st_dtype dt;
        uint64_t numel = tsr_st_numel(e);
        TSR_CHECK_GOTO(rc, convert_dtype(tsr_st_data(f, e), e->dtype, numel, dtype, &dt, &conv),
                       done);
        const unsigned char *data = conv ? conv : tsr_st_data(f, e);
        size_t es = tsr_st_dtype_size(dt), nbytes = (size_t)numel * es;
        tsr_st_write_entry *w = NULL;
        size_t idx = 0;
        if (xf == TSR_XF_SPLIT3) {
            w = out_find(o, full, &idx);
            if (!w) {
                if (!(w = out_add(o, full, NULL))) {
                    free(conv);
                    rc = tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
                    goto done;
                }
                idx = o->n - 1;
                w->dtype = dt;
                w->ndim = e->ndim;
                memcpy(w->shape, e->shape, sizeof w->shape);
                w->shape[0] *= 3;
                o->bufs[idx] = calloc(3, nbytes + 1);
                w->data = o->bufs[idx];
                if (!o->bufs[idx]) {
                    free(conv);
                    rc = tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
                    goto done;
                }
            }
            memcpy((unsigned char *)o->bufs[idx] + (size_t)part * nbytes, data, nbytes);
            free(conv);
            continue;
        }
        if (!(w = out_add(o, full, NULL))) {
            free(conv);
            rc = tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
            goto done;
        }
        idx = o->n - 1;
        w->dtype = dt;
        w->ndim = e->ndim;
        memcpy(w->shape, e->shape, sizeof w->shape);
        o->bufs[idx] = conv;
        w->data = data;
        if (xf == TSR_XF_SQUEEZE && e->ndim == 2) {
            w->ndim = 4;
            w->shape[2] = w->shape[3] = 1;
        } else if (xf == TSR_XF_TRANSPOSE && e->ndim == 2) {
            size_t r = (size_t)e->shape[0], cl = (size_t)e->shape[1];
            unsigned char *t = malloc(nbytes + 1);
            if (!t) {
                rc = tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
                goto done;
            }
            for (size_t a = 0; a < r; a++)
                for (size_t b = 0; b < cl; b++)
                    memcpy(t + (b * r + a) * es, data + (a * cl + b) * es, es);
            free(conv);
            o->bufs[idx] = t;
            w->data = t;
            w->shape[0] = (int64_t)cl;
            w->shape[1] = (int64_t)r;
        }
    }
done:
    tsr_ldm_map_free(&map);
    return rc;
}

/* A whole small text file (tokenizer files), NUL-terminated; owned. */
static int read_text(const char *path, char **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return tsr_errorf(TSR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = malloc(TOKENIZER_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, TOKENIZER_FILE_MAX + 1, f) : 0;
    bool err = ferror(f);
    fclose(f);
    if (!buf)
        return tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
    if (err || n > TOKENIZER_FILE_MAX || memchr(buf, '\0', n)) {
        free(buf);
        return tsr_errorf(TSR_ERR_FORMAT, "%s: %s", path,
                          err ? "read failed" : "not a text file of at most 16 MiB");
    }
    buf[n] = '\0';
    *out = buf;
    return TSR_OK;
}

/* Metadata pairs with owned strings (keys and values freed together). */
typedef struct meta_list {
    const char *kv[2 * META_MAX + 1];
    char *owned[2 * META_MAX];
    int n, n_owned;
} meta_list;

static int meta_add(meta_list *l, const char *key, bool own_key, const char *value, bool own_value)
{
    if (own_key)
        l->owned[l->n_owned++] = (char *)key;
    if (own_value)
        l->owned[l->n_owned++] = (char *)value;
    if (!key || !value)
        return tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
    if (l->n == META_MAX)
        return tsr_errorf(TSR_ERR_INTERNAL, "convert: too many metadata entries");
    l->kv[2 * l->n] = key;
    l->kv[2 * l->n + 1] = value;
    l->n++;
    l->kv[2 * l->n] = NULL;
    return TSR_OK;
}

static void meta_free(meta_list *l)
{
    for (int i = 0; i < l->n_owned; i++)
        free(l->owned[i]);
    memset(l, 0, sizeof *l);
}

static char *json_text(const cJSON *j)
{
    char *s = cJSON_PrintUnformatted(j);
    char *copy = s ? strdup(s) : NULL; /* free() below, whatever cJSON's allocator */
    cJSON_free(s);
    return copy;
}

/* What generation reads besides weights: scheduler config (with the
 * model's prediction type, which --prediction may have changed),
 * model_index.json and the tokenizer folders. */
static int add_pipeline_metadata(const tsr_model *m, meta_list *l)
{
    if (tsr_model_scheduler_config(m)) {
        cJSON *sched = cJSON_Duplicate(tsr_model_scheduler_config(m), true);
        if (!sched)
            return tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
        cJSON_DeleteItemFromObject(sched, "prediction_type");
        const bool v = tsr_model_prediction(m) == TSR_PREDICTION_V;
        cJSON_AddStringToObject(sched, "prediction_type", v ? "v_prediction" : "epsilon");
        char *text = json_text(sched);
        cJSON_Delete(sched);
        TSR_TRY(meta_add(l, TSR_META_SCHEDULER, false, text, true));
    }
    if (tsr_model_index(m))
        TSR_TRY(meta_add(l, TSR_META_INDEX, false, json_text(tsr_model_index(m)), true));
    static const char *const files[] = TSR_TOKENIZER_FILES;
    static const char *const tok[2] = {"tokenizer", "tokenizer_2"};
    for (int i = 0; i < 2; i++) {
        const char *dir = tsr_model_tokenizer_dir(m, i);
        if (!dir)
            continue;
        for (int k = 0; k < TSR_N_TOKENIZER_FILES; k++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, files[k]);
            struct stat st;
            if (stat(p, &st) != 0)
                continue; /* the optional special-token files */
            char *text = NULL, key[128];
            TSR_TRY(read_text(p, &text));
            snprintf(key, sizeof key, TSR_META_TOKENIZER_PREFIX "%s/%s", tok[i], files[k]);
            TSR_TRY(meta_add(l, strdup(key), true, text, true));
        }
    }
    return TSR_OK;
}

static int to_single(const tsr_model *m, const char *out, const char *dtype)
{
    out_list o = {0};
    meta_list meta;
    memset(&meta, 0, sizeof meta);
    int rc = TSR_OK;
    for (int c = 0; c < TSR_COMP_COUNT; c++) {
        if (!tsr_model_has(m, (tsr_component)c))
            continue;
        TSR_CHECK_GOTO(rc, add_ldm_component(m, (tsr_component)c, dtype, &o), done);
        char key[64];
        snprintf(key, sizeof key, TSR_META_CONFIG_PREFIX "%s",
                 tsr_component_name((tsr_component)c));
        TSR_CHECK_GOTO(rc,
                       meta_add(&meta, strdup(key), true,
                                json_text(tsr_model_config(m, (tsr_component)c)), true),
                       done);
    }
    TSR_CHECK_GOTO(rc,
                   meta_add(&meta, TSR_META_PREDICTION, false,
                            tsr_model_prediction(m) == TSR_PREDICTION_V ? "v_prediction"
                                                                        : "epsilon",
                            false),
                   done);
    TSR_CHECK_GOTO(rc, add_pipeline_metadata(m, &meta), done);
    rc = tsr_st_write(out, o.e, o.n, meta.kv);
done:
    meta_free(&meta);
    out_free(&o);
    return rc;
}

static int mkdir_p(const char *p)
{
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return tsr_errorf(TSR_ERR_IO, "%s: cannot create folder: %s", p, strerror(errno));
    return TSR_OK;
}

static int write_json(const char *path, const cJSON *j)
{
    char *s = cJSON_Print(j);
    if (!s)
        return tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
    FILE *f = fopen(path, "w");
    int rc = TSR_OK;
    if (!f || fputs(s, f) < 0 || fputc('\n', f) < 0)
        rc = tsr_errorf(TSR_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    if (f && fclose(f) != 0 && rc == TSR_OK)
        rc = tsr_errorf(TSR_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    cJSON_free(s);
    return rc;
}

static int copy_dir_files(const char *from, const char *to)
{
    /* tokenizer folders are flat: copy the regular files we know */
    static const char *const files[] = {"vocab.json", "merges.txt", "tokenizer_config.json",
                                        "special_tokens_map.json", "tokenizer.json"};
    TSR_TRY(mkdir_p(to));
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/%s", from, files[i]);
        snprintf(b, sizeof b, "%s/%s", to, files[i]);
        FILE *in = fopen(a, "rb");
        if (!in)
            continue;
        FILE *out = fopen(b, "wb");
        if (!out) {
            fclose(in);
            return tsr_errorf(TSR_ERR_IO, "%s: cannot write: %s", b, strerror(errno));
        }
        char buf[65536];
        size_t n;
        int rc = TSR_OK;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0)
            if (fwrite(buf, 1, n, out) != n)
                rc = tsr_errorf(TSR_ERR_IO, "%s: write failed", b);
        fclose(in);
        if (fclose(out) != 0 && rc == TSR_OK)
            rc = tsr_errorf(TSR_ERR_IO, "%s: write failed", b);
        TSR_TRY(rc);
    }
    return TSR_OK;
}

extern const char tsr_bpe_default_merges[];
extern const size_t tsr_bpe_default_merges_len;

static int write_text(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return tsr_errorf(TSR_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    bool ok = fwrite(text, 1, len, f) == len;
    ok = fclose(f) == 0 && ok;
    return ok ? TSR_OK : tsr_errorf(TSR_ERR_IO, "%s: write failed", path);
}

/* A CLIPTokenizer folder for OpenAI CLIP's BPE (the embedded merges and the
 * vocabulary derived from them), with `pad` as the pad token, in the
 * layout of the SD repositories' tokenizer folders. */
static int write_default_tokenizer(const char *dir, const char *pad)
{
    static const char added[] = "{\"content\": \"%s\", \"lstrip\": false, \"normalized\": true, "
                                "\"rstrip\": false, \"single_word\": false}";
    char bos[160], eos[160], text[2048], p[4200];
    snprintf(bos, sizeof bos, added, "<|startoftext|>");
    snprintf(eos, sizeof eos, added, "<|endoftext|>");
    TSR_TRY(mkdir_p(dir));
    snprintf(p, sizeof p, "%s/special_tokens_map.json", dir);
    int n = snprintf(text, sizeof text,
                     "{\"bos_token\": %s, \"eos_token\": %s, \"pad_token\": \"%s\", "
                     "\"unk_token\": %s}\n",
                     bos, eos, pad, eos);
    TSR_TRY(write_text(p, text, (size_t)n));
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    n = snprintf(text, sizeof text,
                 "{\"add_prefix_space\": false, \"bos_token\": %s, \"do_lower_case\": true, "
                 "\"eos_token\": %s, \"errors\": \"replace\", \"model_max_length\": 77, "
                 "\"pad_token\": \"%s\", \"tokenizer_class\": \"CLIPTokenizer\", "
                 "\"unk_token\": %s}\n",
                 bos, eos, pad, eos);
    TSR_TRY(write_text(p, text, (size_t)n));
    snprintf(p, sizeof p, "%s/merges.txt", dir);
    TSR_TRY(write_text(p, tsr_bpe_default_merges, tsr_bpe_default_merges_len));
    tsr_tokenizer *t = NULL;
    TSR_TRY(tsr_tokenizer_load_default(&t));
    cJSON *v = cJSON_CreateObject();
    for (int32_t id = 0; v && id < tsr_tokenizer_vocab_size(t); id++)
        if (!cJSON_AddNumberToObject(v, tsr_tokenizer_token(t, id), id)) {
            cJSON_Delete(v);
            v = NULL;
        }
    tsr_tokenizer_free(t);
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    if (!s)
        return tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
    snprintf(p, sizeof p, "%s/vocab.json", dir);
    int rc = write_text(p, s, strlen(s));
    cJSON_free(s);
    return rc;
}

static int to_folder(const tsr_model *m, const char *out, const char *dtype)
{
    int rc = TSR_OK;
    cJSON *index = NULL, *sched = NULL;
    TSR_TRY(mkdir_p(out));
    tsr_family f = tsr_model_family(m);
    bool xl = f == TSR_FAMILY_SDXL;
    index = cJSON_CreateObject();
    if (!index)
        return tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
    const cJSON *src_index = tsr_model_index(m);
    const cJSON *src_class = cJSON_GetObjectItemCaseSensitive(src_index, "_class_name");
    cJSON_AddStringToObject(index, "_class_name",
                            cJSON_IsString(src_class) ? src_class->valuestring
                            : xl ? (tsr_model_is_refiner(m) ? "StableDiffusionXLImg2ImgPipeline"
                                                            : "StableDiffusionXLPipeline")
                            : tsr_model_is_inpainting(m) ? "StableDiffusionInpaintPipeline"
                                                         : "StableDiffusionPipeline");
    cJSON_AddStringToObject(index, "_diffusers_version", "0.35.2");
    if (src_index) {
        /* the source's pipeline flags (force_zeros_for_empty_prompt, ...) and
         * absent optional components ([null, null]); components are listed
         * below from what is written */
        const cJSON *it;
        cJSON_ArrayForEach(it, src_index)
        {
            if (!it->string || it->string[0] == '_')
                continue;
            const cJSON *first = cJSON_IsArray(it) ? cJSON_GetArrayItem(it, 0) : NULL;
            if (cJSON_IsString(first))
                continue;
            cJSON_AddItemToObject(index, it->string, cJSON_Duplicate(it, true));
        }
    } else {
        TSR_CHECK_GOTO(rc, tsr_model_default_index_flags(m, index), done);
    }
    static const char *const classes[TSR_COMP_COUNT][2] = {
        {"diffusers", "UNet2DConditionModel"},
        {"diffusers", "AutoencoderKL"},
        {"transformers", "CLIPTextModel"},
        {"transformers", "CLIPTextModelWithProjection"}};
    for (int c = 0; c < TSR_COMP_COUNT; c++) {
        const char *name = tsr_component_name((tsr_component)c);
        if (!tsr_model_has(m, (tsr_component)c)) {
            if (c == TSR_COMP_TEXT_ENCODER && xl) {
                cJSON *nul[2] = {cJSON_CreateNull(), cJSON_CreateNull()};
                cJSON *a = cJSON_AddArrayToObject(index, name);
                cJSON_AddItemToArray(a, nul[0]);
                cJSON_AddItemToArray(a, nul[1]);
            }
            continue;
        }
        cJSON_AddItemToObject(index, name, cJSON_CreateStringArray(classes[c], 2));
        char dir[4096], p[4096];
        snprintf(dir, sizeof dir, "%s/%s", out, name);
        TSR_CHECK_GOTO(rc, mkdir_p(dir), done);
        snprintf(p, sizeof p, "%s/config.json", dir);
        TSR_CHECK_GOTO(rc, write_json(p, tsr_model_config(m, (tsr_component)c)), done);
        out_list o = {0};
        for (size_t i = 0; i < tsr_model_tensor_count(m, (tsr_component)c); i++) {
            const char *tn;
            const tsr_safetensors *sf;
            const tsr_st_entry *e;
            void *conv = NULL;
            tsr_st_dtype dt;
            rc = tsr_model_tensor_at(m, (tsr_component)c, i, &tn, &sf, &e);
            if (rc >= 0)
                rc = convert_dtype(tsr_st_data(sf, e), e->dtype, tsr_st_numel(e), dtype, &dt,
                                   &conv);
            tsr_st_write_entry *w = rc >= 0 ? out_add(&o, tn, NULL) : NULL;
            if (!w) {
                free(conv);
                out_free(&o);
                if (rc >= 0)
                    rc = tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
                goto done;
            }
            o.bufs[o.n - 1] = conv;
            w->dtype = dt;
            w->ndim = e->ndim;
            memcpy(w->shape, e->shape, sizeof w->shape);
            w->data = conv ? conv : tsr_st_data(sf, e);
        }
        snprintf(p, sizeof p, "%s/%s.safetensors", dir,
                 c <= TSR_COMP_VAE ? "diffusion_pytorch_model" : "model");
        rc = tsr_st_write(p, o.e, o.n, NULL);
        out_free(&o);
        if (rc < 0)
            goto done;
    }
    static const char *const tok[2] = {"tokenizer", "tokenizer_2"};
    static const tsr_component tok_comp[2] = {TSR_COMP_TEXT_ENCODER, TSR_COMP_TEXT_ENCODER_2};
    for (int i = 0; i < 2; i++) {
        const char *src = tsr_model_tokenizer_dir(m, i);
        if (!src && !tsr_model_has(m, tok_comp[i]))
            continue;
        char dst[4096];
        snprintf(dst, sizeof dst, "%s/%s", out, tok[i]);
        /* the source's files, or (a real LDM file) the family's CLIP BPE */
        const char *pad = tsr_model_default_tokenizer_pad(m, i);
        TSR_CHECK_GOTO(rc, src ? copy_dir_files(src, dst) : write_default_tokenizer(dst, pad),
                       done);
        const char *cls[2] = {"transformers", "CLIPTokenizer"};
        cJSON_AddItemToObject(index, tok[i], cJSON_CreateStringArray(cls, 2));
    }
    /* scheduler: the source's, or what diffusers gives this family */
    if (tsr_model_scheduler_config(m)) {
        sched = cJSON_Duplicate(tsr_model_scheduler_config(m), true);
        if (!sched) {
            rc = tsr_errorf(TSR_ERR_NOMEM, "convert: out of memory");
            goto done;
        }
    } else {
        TSR_CHECK_GOTO(rc, tsr_model_default_scheduler(m, &sched), done);
    }
    cJSON_DeleteItemFromObject(sched, "prediction_type");
    cJSON_AddStringToObject(sched, "prediction_type",
                            tsr_model_prediction(m) == TSR_PREDICTION_V ? "v_prediction" : "epsilon");
    {
        char p[4096];
        snprintf(p, sizeof p, "%s/scheduler", out);
        TSR_CHECK_GOTO(rc, mkdir_p(p), done);
        snprintf(p, sizeof p, "%s/scheduler/scheduler_config.json", out);
        TSR_CHECK_GOTO(rc, write_json(p, sched), done);
        const char *cls[2] = {"diffusers", "EulerDiscreteScheduler"};
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(sched, "_class_name");
        if (cJSON_IsString(cn))
            cls[1] = cn->valuestring;
        cJSON_AddItemToObject(index, "scheduler", cJSON_CreateStringArray(cls, 2));
        snprintf(p, sizeof p, "%s/model_index.json", out);
        TSR_CHECK_GOTO(rc, write_json(p, index), done);
    }
done:
    cJSON_Delete(index);
    cJSON_Delete(sched);
    return rc;
}

/* `path` resolved (symlinks, "..") even when it does not exist yet: its
 * folder is resolved and its last component appended.  false when the
 * folder does not exist either (errno set). */
static bool resolve(const char *path, char *out)
{
    if (realpath(path, out))
        return true;
    if (errno != ENOENT)
        return false;
    char dir[PATH_MAX], parent[PATH_MAX];
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    snprintf(dir, sizeof dir, "%.*s", (int)len, path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    if (slash == dir)
        snprintf(parent, sizeof parent, "/");
    else if (slash)
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - dir), dir);
    else
        snprintf(parent, sizeof parent, ".");
    char real_parent[PATH_MAX];
    if (!realpath(parent, real_parent))
        return false;
    if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0 || !*base) {
        errno = EINVAL;
        return false;
    }
    snprintf(out, PATH_MAX, "%s%s%s", real_parent, strcmp(real_parent, "/") ? "/" : "", base);
    return true;
}

static bool inside(const char *child, const char *parent)
{
    size_t n = strlen(parent);
    return strncmp(child, parent, n) == 0 && (child[n] == '/' || strcmp(parent, "/") == 0);
}

/* Same-path and in-place conversions are refused before anything is
 * touched: the writer would replace or walk into what it is reading. */
static int check_paths(const char *in, const char *out)
{
    char rin[PATH_MAX], rout[PATH_MAX];
    if (!realpath(in, rin)) {
        fprintf(stderr, "tessera convert: %s: %s\n", in, strerror(errno));
        return TSR_EXIT_FAILURE;
    }
    if (!resolve(out, rout)) {
        fprintf(stderr, "tessera convert: %s: cannot write there: %s\n", out, strerror(errno));
        return TSR_EXIT_FAILURE;
    }
    const char *why = strcmp(rin, rout) == 0 ? "IN and OUT are the same path"
                      : inside(rout, rin)    ? "OUT is inside IN"
                      : inside(rin, rout)    ? "IN is inside OUT"
                                             : NULL;
    if (why) {
        fprintf(stderr,
                "tessera convert: %s (%s -> %s); convert to a new path outside the model\n", why,
                rin, rout);
        return TSR_EXIT_USAGE;
    }
    return TSR_EXIT_OK;
}

int tsr_cmd_convert(int argc, char **argv)
{
    const char *to = NULL, *dtype = "keep", *prediction = NULL;
    const tsr_arg_spec specs[] = {
        {"to", TSR_ARG_STRING, &to, "LAYOUT",
         "diffusers or single (default: the other layout than IN's)", 0, 0, 0, 0},
        {"dtype", TSR_ARG_STRING, &dtype, "TYPE", "f16, f32 or keep (default keep)", 0, 0, 0, 0},
        {"prediction", TSR_ARG_STRING, &prediction, "KIND",
         "record this prediction type: epsilon or v (SD 2.x single files cannot tell)", 0, 0, 0,
         0},
    };
    const tsr_cli_command cmd = {
        "convert", "convert [--to diffusers|single] [--dtype f16|f32|keep] IN OUT",
        "convert between a diffusers folder and a single LDM-named file",
        "A folder becomes one .safetensors with the original LDM key names; its configs,\n"
        "scheduler config, model_index.json and tokenizer files go into the file's metadata,\n"
        "so the file generates the folder's images and converts back to the same folder.  A\n"
        "single file becomes a diffusers folder with configs, model_index.json, a scheduler\n"
        "config and tokenizer folders (for a plain LDM checkpoint: what diffusers'\n"
        "from_single_file gives its family).  IN and OUT must be different paths, neither\n"
        "inside the other.",
        specs, (int)(sizeof specs / sizeof specs[0])};
    const char *pos[2];
    int n_pos = 0;
    int rc = tsr_args_parse(&cmd, argc, argv, pos, 2, &n_pos);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc < 0)
        return TSR_EXIT_USAGE;
    if (n_pos != 2) {
        tsr_args_usage(stderr, &cmd);
        return TSR_EXIT_USAGE;
    }
    if (strcmp(dtype, "f16") && strcmp(dtype, "f32") && strcmp(dtype, "keep")) {
        fprintf(stderr, "tessera convert: --dtype must be f16, f32 or keep\n");
        return TSR_EXIT_USAGE;
    }
    if (to && strcmp(to, "diffusers") && strcmp(to, "single")) {
        fprintf(stderr, "tessera convert: --to must be diffusers or single\n");
        return TSR_EXIT_USAGE;
    }
    if (prediction && strcmp(prediction, "epsilon") && strcmp(prediction, "v")) {
        fprintf(stderr, "tessera convert: --prediction must be epsilon or v\n");
        return TSR_EXIT_USAGE;
    }
    rc = check_paths(pos[0], pos[1]);
    if (rc != TSR_EXIT_OK)
        return rc;
    tsr_model *m = NULL;
    rc = tsr_model_open(pos[0], &m);
    if (rc >= 0) {
        if (prediction)
            tsr_model_set_prediction(m, prediction[0] == 'v' ? TSR_PREDICTION_V : TSR_PREDICTION_EPSILON);
        bool single = to ? strcmp(to, "single") == 0
                         : tsr_model_layout_of(m) == TSR_LAYOUT_DIFFUSERS;
        rc = single ? to_single(m, pos[1], dtype) : to_folder(m, pos[1], dtype);
    }
    tsr_model_close(m);
    if (rc < 0) {
        tsr_cli_report("convert", rc);
        return TSR_EXIT_FAILURE;
    }
    return TSR_EXIT_OK;
}
