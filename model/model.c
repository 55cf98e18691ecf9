/*
 * model/model.c - opening a model: format sniffing, diffusers folders, the
 * shared index and the accessors of model/model.h.
 *
 * Why this shape: whatever the layout, opening ends in the same index (per
 * component: config + sorted internal names -> file entries), so everything
 * downstream (weights, inspect, convert, the pipelines) is layout-blind.
 * The folder path is small because a diffusers folder already uses internal
 * names; the work there is choosing the weight file (plain before .fp16,
 * single before sharded) and refusing pickles with advice instead of a
 * generic "not found".  Single files live in model/model_single.c.
 *
 * Sniffing trusts content over names: a file starting with a zip or pickle
 * header is refused even if it is called .safetensors, and a .ckpt/.bin/
 * .pt/.pth is refused without being read at all.
 */
#include "model/model_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/json.h"
#include "core/log.h"

static const char *const comp_names[TSR_COMP_COUNT] = {"unet", "vae", "text_encoder",
                                                       "text_encoder_2"};

const char *tsr_component_name(tsr_component c)
{
    return (unsigned)c < TSR_COMP_COUNT ? comp_names[c] : "?";
}

const char *tsr_family_name(tsr_family f)
{
    switch (f) {
    case TSR_FAMILY_SD1: return "SD1.x";
    case TSR_FAMILY_SD2: return "SD2.x";
    case TSR_FAMILY_SDXL: return "SDXL";
    default: return "unknown";
    }
}

#define PICKLE_ADVICE                                                                          \
    "unpickling a PyTorch checkpoint can execute arbitrary code, so Tessera refuses it.  "      \
    "Convert it once, in a Python environment you trust, to safetensors, e.g.\n"                \
    "  python -c \"import torch, safetensors.torch as st; "                                     \
    "sd = torch.load('IN', map_location='cpu', weights_only=True); "                            \
    "sd = sd.get('state_dict', sd); "                                                           \
    "st.save_file({k: v.contiguous() for k, v in sd.items() if hasattr(v, 'contiguous')}, "     \
    "'OUT.safetensors')\"\n"                                                                    \
    "or with diffusers: StableDiffusionPipeline.from_single_file('IN').save_pretrained('DIR')"

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

/* TSR_ERR_UNSAFE for pickle files, judged by extension, then by magic. */
static int refuse_pickle(const char *path)
{
    static const char *const exts[] = {".ckpt", ".pt", ".pth", ".bin", ".pkl", ".pickle"};
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++)
        if (has_suffix(path, exts[i]))
            return tsr_errorf(TSR_ERR_UNSAFE, "%s: %s", path, PICKLE_ADVICE);
    FILE *f = fopen(path, "rb");
    if (!f)
        return TSR_OK; /* the reader reports the I/O error */
    unsigned char magic[4] = {0};
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    bool zip = got >= 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
    bool pickle = got >= 2 && magic[0] == 0x80 && magic[1] >= 2 && magic[1] <= 5;
    if (zip || pickle)
        return tsr_errorf(TSR_ERR_UNSAFE, "%s: this is a %s PyTorch checkpoint, not safetensors; %s",
                          path, zip ? "zip (torch.save)" : "pickle", PICKLE_ADVICE);
    return TSR_OK;
}

static bool is_dir(const char *p)
{
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

static bool is_file(const char *p)
{
    struct stat s;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

/* ---- index building (shared with model_single.c) ---- */

int tsr_model_add_file(tsr_model *m, tsr_safetensors *st)
{
    if (m->n_files == m->cap_files) {
        size_t cap = m->cap_files ? m->cap_files * 2 : 8;
        tsr_safetensors **f = realloc(m->files, cap * sizeof *f);
        if (!f) {
            tsr_st_close(st);
            return tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
        }
        m->files = f;
        m->cap_files = cap;
    }
    m->files[m->n_files++] = st;
    return TSR_OK;
}

int tsr_model_add_tensor(tsr_model *m, tsr_component c, const char *name,
                         const tsr_safetensors *file, const tsr_st_entry *entry)
{
    tsr_model_component *mc = &m->comp[c];
    if (mc->n == mc->cap) {
        size_t cap = mc->cap ? mc->cap * 2 : 256;
        tsr_tensor_ref *t = realloc(mc->tensors, cap * sizeof *t);
        if (!t)
            return tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
        mc->tensors = t;
        mc->cap = cap;
    }
    tsr_tensor_ref *r = &mc->tensors[mc->n];
    r->name = strdup(name);
    if (!r->name)
        return tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
    r->file = file;
    r->entry = *entry;
    mc->n++;
    return TSR_OK;
}

int tsr_model_add_unrecognised(tsr_model *m, const char *key)
{
    if (m->n_unrec == m->cap_unrec) {
        size_t cap = m->cap_unrec ? m->cap_unrec * 2 : 32;
        char **u = realloc(m->unrecognised, cap * sizeof *u);
        if (!u)
            return tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
        m->unrecognised = u;
        m->cap_unrec = cap;
    }
    if (!(m->unrecognised[m->n_unrec] = strdup(key)))
        return tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
    m->n_unrec++;
    return TSR_OK;
}

static int cmp_ref(const void *a, const void *b)
{
    return strcmp(((const tsr_tensor_ref *)a)->name, ((const tsr_tensor_ref *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int tsr_model_finish_index(tsr_model *m)
{
    for (int c = 0; c < TSR_COMP_COUNT; c++) {
        tsr_model_component *mc = &m->comp[c];
        if (mc->n > 1)
            qsort(mc->tensors, mc->n, sizeof *mc->tensors, cmp_ref);
        for (size_t i = 1; i < mc->n; i++)
            if (strcmp(mc->tensors[i - 1].name, mc->tensors[i].name) == 0)
                return tsr_errorf(TSR_ERR_FORMAT,
                                  "%s: %s tensor '%s' appears twice (from '%s' and '%s')", m->path,
                                  comp_names[c], mc->tensors[i].name,
                                  mc->tensors[i - 1].entry.name, mc->tensors[i].entry.name);
    }
    if (m->n_unrec > 1)
        qsort(m->unrecognised, m->n_unrec, sizeof *m->unrecognised, cmp_str);
    return TSR_OK;
}

int tsr_model_parse_component_config(tsr_model *m, tsr_component c, const char *label)
{
    tsr_model_component *mc = &m->comp[c];
    switch (c) {
    case TSR_COMP_UNET: return tsr_unet_desc_parse(mc->config, label, &mc->unet);
    case TSR_COMP_VAE: return tsr_vae_desc_parse(mc->config, label, &mc->vae);
    default: return tsr_textenc_desc_parse(mc->config, label, &mc->clip);
    }
}

/* ---- diffusers folders ---- */

static int join_path(char *buf, size_t size, const char *a, const char *b)
{
    int n = snprintf(buf, size, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= size)
        return tsr_errorf(TSR_ERR_RANGE, "%s: path too long", a);
    return TSR_OK;
}

/* transformers 5 saves a CLIPTextModel built from scratch without the
 * "text_model." level ("embeddings.token_embedding.weight"); indexed under
 * the transformers 4 name that the text encoder looks up.  A folder holding
 * both spellings of one tensor fails in tsr_model_finish_index. */
static const char *const clip_unprefixed[] = {"embeddings.", "encoder.", "final_layer_norm."};

/* Index one weight file under component c. */
static int add_weight_file(tsr_model *m, tsr_component c, const char *path)
{
    tsr_safetensors *st = NULL;
    TSR_TRY(refuse_pickle(path));
    TSR_TRY(tsr_st_open(path, &st));
    TSR_TRY(tsr_model_add_file(m, st));
    const bool text = c == TSR_COMP_TEXT_ENCODER || c == TSR_COMP_TEXT_ENCODER_2;
    for (size_t i = 0; i < tsr_st_count(st); i++) {
        const tsr_st_entry *e = tsr_st_entry_at(st, i);
        /* a non-persistent buffer older transformers versions saved */
        if (strcmp(e->name, "text_model.embeddings.position_ids") == 0 ||
            (text && strcmp(e->name, "embeddings.position_ids") == 0)) {
            m->n_ignored++;
            continue;
        }
        bool unprefixed = false;
        for (size_t k = 0; text && k < sizeof clip_unprefixed / sizeof *clip_unprefixed; k++)
            unprefixed |= strncmp(e->name, clip_unprefixed[k], strlen(clip_unprefixed[k])) == 0;
        if (unprefixed) {
            char name[1024];
            int n = snprintf(name, sizeof name, "text_model.%s", e->name);
            if (n < 0 || (size_t)n >= sizeof name)
                return tsr_errorf(TSR_ERR_RANGE, "%s: tensor name too long", path);
            TSR_TRY(tsr_model_add_tensor(m, c, name, st, e));
        } else {
            TSR_TRY(tsr_model_add_tensor(m, c, e->name, st, e));
        }
    }
    return TSR_OK;
}

/* Sharded weights: NAME.safetensors.index.json with a "weight_map". */
static int add_sharded(tsr_model *m, tsr_component c, const char *dir, const char *index_path)
{
    cJSON *idx = NULL;
    int rc = tsr_json_load_file(index_path, &idx);
    if (rc < 0)
        return rc;
    const cJSON *map = tsr_json_member(idx, "weight_map");
    if (!cJSON_IsObject(map)) {
        rc = tsr_errorf(TSR_ERR_FORMAT, "%s: no \"weight_map\" object", index_path);
        goto done;
    }
    /* distinct shard names, in order of first appearance */
    const cJSON *it = NULL;
    const char *seen[256];
    int n_seen = 0;
    cJSON_ArrayForEach(it, map)
    {
        if (!cJSON_IsString(it)) {
            rc = tsr_errorf(TSR_ERR_FORMAT, "%s: weight_map[\"%s\"] is not a string", index_path,
                            it->string ? it->string : "");
            goto done;
        }
        const char *shard = it->valuestring;
        if (strchr(shard, '/') || strcmp(shard, "..") == 0 || !has_suffix(shard, ".safetensors")) {
            rc = tsr_errorf(TSR_ERR_FORMAT, "%s: shard name \"%s\" is not a plain .safetensors name",
                            index_path, shard);
            goto done;
        }
        bool dup = false;
        for (int i = 0; i < n_seen && !dup; i++)
            dup = strcmp(seen[i], shard) == 0;
        if (dup)
            continue;
        if (n_seen == (int)(sizeof seen / sizeof seen[0])) {
            rc = tsr_errorf(TSR_ERR_RANGE, "%s: more than 256 shards", index_path);
            goto done;
        }
        seen[n_seen++] = shard;
    }
    for (int i = 0; i < n_seen; i++) {
        char p[4096];
        TSR_CHECK_GOTO(rc, join_path(p, sizeof p, dir, seen[i]), done);
        TSR_CHECK_GOTO(rc, add_weight_file(m, c, p), done);
    }
    rc = TSR_OK;
done:
    cJSON_Delete(idx);
    return rc;
}

static int open_component_dir(tsr_model *m, tsr_component c)
{
    char dir[4096], p[4096], label[256];
    const char *name = comp_names[c];
    const char *stem = (c == TSR_COMP_UNET || c == TSR_COMP_VAE) ? "diffusion_pytorch_model"
                                                                  : "model";
    TSR_TRY(join_path(dir, sizeof dir, m->path, name));
    if (!is_dir(dir))
        return tsr_errorf(TSR_ERR_NOT_FOUND,
                          "%s: model_index.json lists \"%s\" but the folder %s/ is missing",
                          m->path, name, name);
    TSR_TRY(join_path(p, sizeof p, dir, "config.json"));
    if (!is_file(p))
        return tsr_errorf(TSR_ERR_NOT_FOUND, "%s: %s/config.json is missing", m->path, name);
    TSR_TRY(tsr_json_load_file(p, &m->comp[c].config));
    snprintf(label, sizeof label, "%s/config.json", name);
    TSR_TRY(tsr_model_parse_component_config(m, c, label));

    static const char *const variants[][2] = {
        {".safetensors", NULL},
        {".fp16.safetensors", NULL},
        {".safetensors.index.json", "sharded"},
        {".fp16.safetensors.index.json", "sharded"},
    };
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        char file[256];
        snprintf(file, sizeof file, "%s%s", stem, variants[v][0]);
        TSR_TRY(join_path(p, sizeof p, dir, file));
        if (!is_file(p))
            continue;
        m->comp[c].present = true;
        if (variants[v][1])
            return add_sharded(m, c, dir, p);
        return add_weight_file(m, c, p);
    }
    static const char *const pickles[] = {".bin", ".fp16.bin", ".ckpt", ".pt"};
    for (size_t v = 0; v < sizeof pickles / sizeof pickles[0]; v++) {
        char file[256];
        snprintf(file, sizeof file, "%s%s", stem, pickles[v]);
        TSR_TRY(join_path(p, sizeof p, dir, file));
        if (is_file(p))
            return tsr_errorf(TSR_ERR_UNSAFE, "%s: %s has only pickle weights (%s); %s", m->path,
                              name, file, PICKLE_ADVICE);
    }
    return tsr_errorf(TSR_ERR_NOT_FOUND,
                      "%s: %s/ has no weights (%s.safetensors or %s.fp16.safetensors)", m->path,
                      name, stem, stem);
}

/* model_index.json lists a component as ["library", "Class"]; the refiner
 * lists its missing first encoder as [null, null]. */
static bool index_lists(const cJSON *index, const char *name)
{
    const cJSON *v = tsr_json_member(index, name);
    return cJSON_IsArray(v) && cJSON_GetArraySize(v) >= 1 &&
           cJSON_IsString(cJSON_GetArrayItem(v, 0));
}

static int detect_folder_family(tsr_model *m)
{
    const tsr_unet_desc *u = &m->comp[TSR_COMP_UNET].unet;
    bool has_unet = m->comp[TSR_COMP_UNET].present;
    bool gelu = m->comp[TSR_COMP_TEXT_ENCODER].present &&
                m->comp[TSR_COMP_TEXT_ENCODER].clip.hidden_act == TSR_TEXTENC_GELU;
    m->inpainting = has_unet && u->in_channels == 9;
    if (!has_unet) {
        /* a partial folder (e.g. text encoders only): judge by the encoders */
        m->family = m->comp[TSR_COMP_TEXT_ENCODER_2].present ? TSR_FAMILY_SDXL
                    : gelu                                    ? TSR_FAMILY_SD2
                                                              : TSR_FAMILY_SD1;
        m->refiner = m->family == TSR_FAMILY_SDXL && !m->comp[TSR_COMP_TEXT_ENCODER].present;
    } else if (u->text_time) {
        m->family = TSR_FAMILY_SDXL;
        m->refiner = !m->comp[TSR_COMP_TEXT_ENCODER].present ||
                     u->cross_attention_dim == 1280;
    } else if (u->cross_attention_dim == 768) {
        m->family = TSR_FAMILY_SD1;
    } else if (u->cross_attention_dim == 1024) {
        m->family = TSR_FAMILY_SD2;
    } else {
        /* smaller models of either family: SD2 uses OpenCLIP (gelu) and
         * linear projections */
        m->family = (gelu || u->use_linear_projection) ? TSR_FAMILY_SD2 : TSR_FAMILY_SD1;
    }
    m->prediction = TSR_PREDICTION_EPSILON;
    if (m->scheduler) {
        const char *pt = NULL;
        TSR_TRY(tsr_json_get_string(m->scheduler, "scheduler/scheduler_config.json",
                                    "prediction_type", "epsilon", &pt));
        if (strcmp(pt, "v_prediction") == 0)
            m->prediction = TSR_PREDICTION_V;
        else if (strcmp(pt, "epsilon") != 0)
            return tsr_errorf(TSR_ERR_UNSUPPORTED,
                              "%s: scheduler prediction_type \"%s\" is not supported", m->path, pt);
    }
    return TSR_OK;
}

static int open_folder(tsr_model *m)
{
    char p[4096];
    m->layout = TSR_LAYOUT_DIFFUSERS;
    TSR_TRY(join_path(p, sizeof p, m->path, "model_index.json"));
    if (!is_file(p))
        return tsr_errorf(TSR_ERR_NOT_FOUND,
                          "%s: not a diffusers folder (no model_index.json) and not a file", m->path);
    TSR_TRY(tsr_json_load_file(p, &m->index));
    TSR_TRY(tsr_json_expect_object(m->index, "model_index.json", "an object"));
    TSR_TRY(tsr_json_check_unique_keys(m->index, "model_index.json"));
    for (int c = 0; c < TSR_COMP_COUNT; c++) {
        /* every listed component must be complete; which ones a use needs
         * (a pipeline needs the UNet and VAE) is checked by that use */
        if (index_lists(m->index, comp_names[c]))
            TSR_TRY(open_component_dir(m, (tsr_component)c));
    }
    bool any = false;
    for (int c = 0; c < TSR_COMP_COUNT; c++)
        any = any || m->comp[c].present;
    if (!any)
        return tsr_errorf(TSR_ERR_NOT_FOUND,
                          "%s: model_index.json lists none of unet, vae, text_encoder, "
                          "text_encoder_2",
                          m->path);
    TSR_TRY(join_path(p, sizeof p, m->path, "scheduler/scheduler_config.json"));
    if (is_file(p)) {
        TSR_TRY(tsr_json_load_file(p, &m->scheduler));
        TSR_TRY(tsr_json_expect_object(m->scheduler, "scheduler/scheduler_config.json",
                                       "an object"));
    }
    static const char *const tok[2] = {"tokenizer", "tokenizer_2"};
    for (int i = 0; i < 2; i++) {
        TSR_TRY(join_path(p, sizeof p, m->path, tok[i]));
        if (is_dir(p) && !(m->tokenizer_dir[i] = strdup(p)))
            return tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
    }
    TSR_TRY(tsr_model_finish_index(m));
    return detect_folder_family(m);
}

int tsr_model_open(const char *path, tsr_model **out)
{
    *out = NULL;
    if (!path || !*path)
        return tsr_errorf(TSR_ERR_INVALID, "model: empty path");
    tsr_model *m = calloc(1, sizeof *m);
    if (!m)
        return tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
    int rc = TSR_OK;
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    m->path = strndup(path, len);
    if (!m->path) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
        goto fail;
    }
    if (is_dir(m->path)) {
        TSR_CHECK_GOTO(rc, open_folder(m), fail);
    } else {
        struct stat s;
        if (stat(m->path, &s) != 0) {
            rc = tsr_errorf(TSR_ERR_NOT_FOUND, "%s: %s", m->path, strerror(errno));
            goto fail;
        }
        TSR_CHECK_GOTO(rc, refuse_pickle(m->path), fail);
        TSR_CHECK_GOTO(rc, tsr_model_open_single(m, m->path), fail);
    }
    *out = m;
    return TSR_OK;
fail:
    tsr_model_close(m);
    return rc;
}

void tsr_model_close(tsr_model *m)
{
    if (!m)
        return;
    for (int c = 0; c < TSR_COMP_COUNT; c++) {
        tsr_model_component *mc = &m->comp[c];
        for (size_t i = 0; i < mc->n; i++)
            free(mc->tensors[i].name);
        free(mc->tensors);
        cJSON_Delete(mc->config);
    }
    for (size_t i = 0; i < m->n_files; i++)
        tsr_st_close(m->files[i]);
    free(m->files);
    free(m->mem_image);
    cJSON_Delete(m->index);
    cJSON_Delete(m->scheduler);
    tsr_model_remove_tmp(m);
    free(m->tokenizer_dir[0]);
    free(m->tokenizer_dir[1]);
    for (size_t i = 0; i < m->n_unrec; i++)
        free(m->unrecognised[i]);
    free(m->unrecognised);
    free(m->path);
    free(m);
}

/* ---- accessors ---- */

const char *tsr_model_path(const tsr_model *m) { return m->path; }
tsr_model_layout tsr_model_layout_of(const tsr_model *m) { return m->layout; }
tsr_family tsr_model_family(const tsr_model *m) { return m->family; }
tsr_prediction tsr_model_prediction(const tsr_model *m) { return m->prediction; }
bool tsr_model_prediction_assumed(const tsr_model *m) { return m->prediction_assumed; }
void tsr_model_set_prediction(tsr_model *m, tsr_prediction p)
{
    m->prediction = p;
    m->prediction_assumed = false;
}
bool tsr_model_is_inpainting(const tsr_model *m) { return m->inpainting; }
bool tsr_model_is_refiner(const tsr_model *m) { return m->refiner; }

bool tsr_model_has(const tsr_model *m, tsr_component c)
{
    return (unsigned)c < TSR_COMP_COUNT && m->comp[c].present;
}

const cJSON *tsr_model_config(const tsr_model *m, tsr_component c)
{
    return tsr_model_has(m, c) ? m->comp[c].config : NULL;
}

const tsr_unet_desc *tsr_model_unet_desc(const tsr_model *m)
{
    return tsr_model_has(m, TSR_COMP_UNET) ? &m->comp[TSR_COMP_UNET].unet : NULL;
}

const tsr_vae_desc *tsr_model_vae_desc(const tsr_model *m)
{
    return tsr_model_has(m, TSR_COMP_VAE) ? &m->comp[TSR_COMP_VAE].vae : NULL;
}

const tsr_textenc_desc *tsr_model_textenc_desc(const tsr_model *m, int which)
{
    tsr_component c = which ? TSR_COMP_TEXT_ENCODER_2 : TSR_COMP_TEXT_ENCODER;
    return tsr_model_has(m, c) ? &m->comp[c].clip : NULL;
}

const cJSON *tsr_model_index(const tsr_model *m) { return m->index; }
const cJSON *tsr_model_scheduler_config(const tsr_model *m) { return m->scheduler; }

const char *tsr_model_tokenizer_dir(const tsr_model *m, int which)
{
    return (which == 0 || which == 1) ? m->tokenizer_dir[which] : NULL;
}

size_t tsr_model_tensor_count(const tsr_model *m, tsr_component c)
{
    return tsr_model_has(m, c) ? m->comp[c].n : 0;
}

int tsr_model_tensor_at(const tsr_model *m, tsr_component c, size_t i, const char **name,
                        const tsr_safetensors **file, const tsr_st_entry **entry)
{
    if (!tsr_model_has(m, c) || i >= m->comp[c].n)
        return tsr_errorf(TSR_ERR_RANGE, "%s: %s tensor index %zu out of range", m->path,
                          tsr_component_name(c), i);
    const tsr_tensor_ref *r = &m->comp[c].tensors[i];
    if (name)
        *name = r->name;
    if (file)
        *file = r->file;
    if (entry)
        *entry = &r->entry;
    return TSR_OK;
}

int tsr_model_tensor_find(const tsr_model *m, tsr_component c, const char *name,
                          const tsr_safetensors **file, const tsr_st_entry **entry)
{
    if (tsr_model_has(m, c)) {
        const tsr_model_component *mc = &m->comp[c];
        size_t lo = 0, hi = mc->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int k = strcmp(mc->tensors[mid].name, name);
            if (k == 0)
                return tsr_model_tensor_at(m, c, mid, NULL, file, entry);
            if (k < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
    }
    return tsr_errorf(TSR_ERR_NOT_FOUND, "%s: %s has no tensor '%s'", m->path,
                      tsr_component_name(c), name);
}

size_t tsr_model_unrecognised_count(const tsr_model *m) { return m->n_unrec; }

const char *tsr_model_unrecognised_at(const tsr_model *m, size_t i)
{
    return i < m->n_unrec ? m->unrecognised[i] : NULL;
}

uint64_t tsr_model_param_count(const tsr_model *m, tsr_component c)
{
    uint64_t n = 0;
    for (size_t i = 0; i < tsr_model_tensor_count(m, c); i++)
        n += tsr_st_numel(&m->comp[c].tensors[i].entry);
    return n;
}
