/*
 * text/tokenizer_files.c - see tokenizer_files.h.
 */
#include "text/tokenizer_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static const char *const special_keys[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};

int tsr_tok_read_file(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tsr_errorf(TSR_ERR_NOT_FOUND, "%s: cannot open", path);
    int rc = 0;
    char *buf = NULL;
    long size;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0) {
        rc = tsr_errorf(TSR_ERR_IO, "%s: cannot seek", path);
        goto cleanup;
    }
    if ((unsigned long)size > TSR_TOK_MAX_FILE) {
        rc = tsr_errorf(TSR_ERR_RANGE, "%s: %ld bytes is too large", path, size);
        goto cleanup;
    }
    rewind(f);
    buf = malloc((size_t)size + 1);
    if (!buf) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "%s: out of memory", path);
        goto cleanup;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        rc = tsr_errorf(TSR_ERR_IO, "%s: read failed", path);
        goto cleanup;
    }
    buf[size] = '\0';
    *out = buf;
    *len = (size_t)size;
    buf = NULL;
cleanup:
    free(buf);
    fclose(f);
    return rc;
}

/* An optional JSON object file: *root stays NULL when the file is absent. */
static int read_json(const char *path, cJSON **root)
{
    *root = NULL;
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return 0;
    fclose(probe);
    char *buf = NULL;
    size_t len = 0;
    TSR_TRY(tsr_tok_read_file(path, &buf, &len));
    *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        return tsr_errorf(TSR_ERR_FORMAT, "%s: not a JSON object", path);
    }
    return 0;
}

void tsr_tok_files_free(tsr_tok_files *f)
{
    for (int k = 0; k < 4; k++) {
        free(f->cfg[k].tok.content);
        free(f->map[k].tok.content);
    }
    for (int i = 0; i < f->n_listed; i++)
        free(f->listed[i].content);
    cJSON_Delete(f->tokenizer_json);
    memset(f, 0, sizeof *f);
}

static bool json_flag(const cJSON *obj, const char *key, bool dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* An AddedToken object -> tok (content copied, id -1). */
static int parse_added(const cJSON *v, bool normalized_default, const char *path, const char *key,
                       tsr_tok_added *tok)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(c))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: %s has no string \"content\"", path, key);
    bool special = json_flag(v, "special", false);
    tok->content = strdup(c->valuestring);
    if (!tok->content)
        return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
    tok->id = -1;
    tok->lstrip = json_flag(v, "lstrip", false);
    tok->rstrip = json_flag(v, "rstrip", false);
    tok->normalized = json_flag(v, "normalized", normalized_default && !special);
    return 0;
}

/* Insert an added token with file id `id` into f->listed in id order. */
static int list_added(tsr_tok_files *f, const cJSON *item, int64_t id, const char *path,
                      const char *key)
{
    if (id < 0 || id > INT32_MAX)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: bad %s entry", path, key);
    if (f->n_listed == TSR_TOK_MAX_ADDED) {
        f->too_many = true;
        return 0;
    }
    int at = f->n_listed;
    while (at > 0 && f->listed[at - 1].id > id) {
        f->listed[at] = f->listed[at - 1];
        at--;
    }
    f->listed[at] = (tsr_tok_added){0};
    f->n_listed++;
    TSR_TRY(parse_added(item, true, path, key, &f->listed[at]));
    f->listed[at].id = (int32_t)id;
    return 0;
}

/* The four specials of one file (is_map: special_tokens_map.json). */
static int read_specials(const cJSON *root, const char *path, bool is_map, tsr_tok_files *f)
{
    tsr_tok_spec *specs = is_map ? f->map : f->cfg;
    for (int k = 0; k < 4; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, special_keys[k]);
        if (!v)
            continue;
        tsr_tok_spec *sv = &specs[k];
        sv->present = true;
        sv->tok.id = -1;
        if (cJSON_IsNull(v)) {
            sv->null = true;
        } else if (cJSON_IsString(v)) {
            sv->tok.content = strdup(v->valuestring);
            if (!sv->tok.content)
                return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
        } else if (cJSON_IsObject(v)) {
            TSR_TRY(parse_added(v, !is_map, path, special_keys[k], &sv->tok));
        } else {
            return tsr_errorf(TSR_ERR_FORMAT, "%s: %s must be a string or an AddedToken object",
                              path, special_keys[k]);
        }
    }
    return 0;
}

int tsr_tok_files_read(const char *dir, tsr_tok_files *f)
{
    memset(f, 0, sizeof *f);
    char path[4096];
    cJSON *root = NULL;
    int rc = 0;

    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    TSR_CHECK_GOTO(rc, read_json(path, &root), done);
    if (root) {
        TSR_CHECK_GOTO(rc, read_specials(root, path, false, f), done);
        const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "added_tokens_decoder");
        if (cJSON_IsObject(dec)) {
            f->has_decoder = true;
            const cJSON *item;
            cJSON_ArrayForEach(item, dec)
            {
                char *end = NULL;
                long key = item->string ? strtol(item->string, &end, 10) : -1;
                if (!cJSON_IsObject(item) || !end || *end)
                    key = -1;
                TSR_CHECK_GOTO(rc, list_added(f, item, key, path, "added_tokens_decoder"), done);
            }
        }
        cJSON_Delete(root);
        root = NULL;
    }

    snprintf(path, sizeof path, "%s/special_tokens_map.json", dir);
    TSR_CHECK_GOTO(rc, read_json(path, &root), done);
    if (root)
        TSR_CHECK_GOTO(rc, read_specials(root, path, true, f), done);
    cJSON_Delete(root);
    root = NULL;

    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    TSR_CHECK_GOTO(rc, read_json(path, &f->tokenizer_json), done);
    /* Its added_tokens stand where an added_tokens_decoder would
     * (transformers 5 reads them only when tokenizer_config.json has none). */
    const cJSON *added = f->tokenizer_json
                             ? cJSON_GetObjectItemCaseSensitive(f->tokenizer_json, "added_tokens")
                             : NULL;
    if (!f->has_decoder && cJSON_IsArray(added)) {
        const cJSON *item;
        cJSON_ArrayForEach(item, added)
        {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "id");
            int64_t v = cJSON_IsNumber(id) && id->valuedouble == (double)(int64_t)id->valuedouble
                            ? (int64_t)id->valuedouble
                            : -1;
            if (!cJSON_IsObject(item))
                v = -1;
            TSR_CHECK_GOTO(rc, list_added(f, item, v, path, "added_tokens"), done);
        }
    }
done:
    cJSON_Delete(root);
    return rc;
}

static const cJSON *bpe_model(const tsr_tok_files *f, const char *dir, int *rc)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(f->tokenizer_json, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(model) || (type && !(cJSON_IsString(type) &&
                                             strcmp(type->valuestring, "BPE") == 0))) {
        *rc = tsr_errorf(TSR_ERR_FORMAT, "%s/tokenizer.json: the model is not BPE", dir);
        return NULL;
    }
    return model;
}

int tsr_tok_files_vocab(const tsr_tok_files *f, const char *dir, const cJSON **vocab)
{
    int rc = 0;
    *vocab = NULL;
    if (!f->tokenizer_json)
        return tsr_errorf(TSR_ERR_NOT_FOUND, "%s: no vocab.json and no tokenizer.json", dir);
    const cJSON *model = bpe_model(f, dir, &rc);
    if (!model)
        return rc;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(v))
        return tsr_errorf(TSR_ERR_FORMAT, "%s/tokenizer.json: model.vocab is not an object", dir);
    *vocab = v;
    return 0;
}

int tsr_tok_files_merges(const tsr_tok_files *f, const char *dir, char **text, size_t *len)
{
    int rc = 0;
    *text = NULL;
    const cJSON *model = bpe_model(f, dir, &rc);
    if (!model)
        return rc;
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges))
        return tsr_errorf(TSR_ERR_FORMAT, "%s/tokenizer.json: model.merges is not a list", dir);
    /* pass 0 measures, pass 1 writes */
    static const char header[] = "#version: 0.2\n";
    size_t n = 0;
    char *buf = NULL;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        if (pass) {
            buf = malloc(*len + 1);
            if (!buf)
                return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
            memcpy(buf, header, sizeof header - 1);
        }
        n = sizeof header - 1;
        const cJSON *m;
        cJSON_ArrayForEach(m, merges)
        {
            const char *a = NULL, *b = NULL;
            if (cJSON_IsString(m)) {
                a = m->valuestring; /* "a b" */
            } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                       cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                       cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
                a = cJSON_GetArrayItem(m, 0)->valuestring;
                b = cJSON_GetArrayItem(m, 1)->valuestring;
            } else {
                free(buf);
                return tsr_errorf(TSR_ERR_FORMAT,
                                  "%s/tokenizer.json: a merge is neither \"a b\" nor [a, b]", dir);
            }
            size_t la = strlen(a), lb = b ? strlen(b) : 0;
            if (pass) {
                memcpy(buf + n, a, la);
                if (b) {
                    buf[n + la] = ' ';
                    memcpy(buf + n + la + 1, b, lb);
                }
                buf[n + la + (b ? lb + 1 : 0)] = '\n';
            }
            n += la + (b ? lb + 1 : 0) + 1;
        }
        *len = n;
    }
    buf[n] = '\0';
    *text = buf;
    return 0;
}
