/*
 * model/embeddings.c - see embeddings.h.
 *
 * Why every check is here and nowhere later: the conditioner trusts the
 * table (each part's width equals its encoder's, 1..75 vectors), so a file
 * that does not fit the model is refused once, at load, with its name and
 * the widths the model takes, and shows up in A1111's "skipped" list
 * instead of failing images.  A1111 does the same: an embedding of the
 * wrong shape is skipped, not an error of the prompt that names it.
 */
#include "model/embeddings.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "model/named_file.h"
#include "tessera.h"

void tsr_ti_embedding_free(tsr_ti_embedding *e)
{
    if (!e)
        return;
    free(e->name);
    free(e->vec[0]);
    free(e->vec[1]);
    memset(e, 0, sizeof *e);
}

/* SHA-256 of the whole file, first 12 hex digits (A1111's TI shorthash). */
static int file_hash(const char *path, char out[13])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tsr_errorf(TSR_ERR_IO, "cannot open the file");
    tsr_sha256_ctx ctx;
    tsr_sha256_init(&ctx);
    unsigned char buf[1 << 14];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        tsr_sha256_update(&ctx, buf, got);
    fclose(f);
    uint8_t d[32];
    tsr_sha256_final(&ctx, d);
    char hex[65];
    tsr_sha256_hex(d, hex);
    memcpy(out, hex, 12);
    out[12] = '\0';
    return TSR_OK;
}

/* A [n, d] or [d] float tensor: its rows and width. */
static int tensor_rows(const char *name, const tsr_st_entry *t, int *n, int *d)
{
    tsr_dtype dt;
    if (!tsr_st_dtype_to_tsr(t->dtype, &dt) || dt == TSR_I32)
        return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': tensor '%s' is %s, not F32/F16/BF16",
                          name, t->name, tsr_st_dtype_name(t->dtype));
    if (t->ndim == 1) {
        *n = 1;
        *d = (int)(t->shape[0] <= TSR_EMB_MAX_DIM ? t->shape[0] : -1);
    } else if (t->ndim == 2) {
        *n = t->shape[0] <= 1 << 20 ? (int)t->shape[0] : -1;
        *d = t->shape[1] <= TSR_EMB_MAX_DIM ? (int)t->shape[1] : -1;
    } else {
        return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': tensor '%s' has %d dimensions, not "
                          "[vectors, width]", name, t->name, t->ndim);
    }
    if (*d < 1)
        return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': tensor '%s' is not 1..%d wide", name,
                          t->name, TSR_EMB_MAX_DIM);
    if (*n < 1 || *n > TSR_EMB_MAX_VECTORS)
        return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': %lld vectors (1..%d fit in a prompt's "
                          "75-token chunk)", name, (long long)t->shape[0], TSR_EMB_MAX_VECTORS);
    return TSR_OK;
}

static int copy_rows(const tsr_safetensors *st, const tsr_st_entry *t, int n, int d, float **out)
{
    tsr_dtype dt;
    tsr_st_dtype_to_tsr(t->dtype, &dt);
    const void *src = tsr_st_data(st, t);
    *out = malloc((size_t)n * d * sizeof(float));
    if (!src || !*out)
        return tsr_errorf(TSR_ERR_NOMEM, "embedding: out of memory");
    tsr_convert_to_f32(*out, src, dt, (size_t)n * d);
    for (size_t i = 0; i < (size_t)n * d; i++)
        if (!((*out)[i] > -1e30f && (*out)[i] < 1e30f))
            return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s' holds a non-finite value",
                              t->name);
    return TSR_OK;
}

static int load_parts(const tsr_safetensors *st, const char *name, const int *dims, int n_dims,
                      tsr_ti_embedding *e, int *vectors, int *shape)
{
    const tsr_st_entry *l = tsr_st_find(st, "clip_l"), *g = tsr_st_find(st, "clip_g");
    const tsr_st_entry *one = tsr_st_find(st, "emb_params");
    if (!one && !l && !g && tsr_st_count(st) == 1)
        one = tsr_st_entry_at(st, 0); /* diffusers: {token: [dim]} */
    if (l || g) {
        if (!l || !g)
            return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': has %s but not %s", name,
                              l ? "clip_l" : "clip_g", l ? "clip_g" : "clip_l");
        int nl, dl, ng, dg;
        TSR_TRY(tensor_rows(name, l, &nl, &dl));
        TSR_TRY(tensor_rows(name, g, &ng, &dg));
        *vectors = nl;
        *shape = dl + dg;
        if (nl != ng)
            return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': clip_l has %d vectors, clip_g %d",
                              name, nl, ng);
        if (n_dims != 2 || dl != dims[0] || dg != dims[1]) {
            if (n_dims == 2)
                return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': clip_l [%d, %d] and clip_g "
                                  "[%d, %d], but this model's text encoders take widths %d and %d",
                                  name, nl, dl, ng, dg, dims[0], dims[1]);
            return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s' is for SDXL (clip_l and clip_g), "
                              "but this model has one text encoder of width %d", name, dims[0]);
        }
        e->n_vectors = nl;
        e->n_parts = 2;
        e->dim[0] = dl;
        e->dim[1] = dg;
        TSR_TRY(copy_rows(st, l, nl, dl, &e->vec[0]));
        return copy_rows(st, g, ng, dg, &e->vec[1]);
    }
    if (!one)
        return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': no 'emb_params', no 'clip_l'/'clip_g' "
                          "and not a single tensor (%zu tensors)", name, tsr_st_count(st));
    int n, d;
    TSR_TRY(tensor_rows(name, one, &n, &d));
    *vectors = n;
    *shape = d;
    if (n_dims != 1)
        return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': one tensor [%d, %d], but this SDXL "
                          "model needs 'clip_l' [n, %d] and 'clip_g' [n, %d]", name, n, d,
                          dims[0], dims[1]);
    if (d != dims[0])
        return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': vectors of width %d, but this model's "
                          "text encoder takes %d", name, d, dims[0]);
    e->n_vectors = n;
    e->n_parts = 1;
    e->dim[0] = d;
    return copy_rows(st, one, n, d, &e->vec[0]);
}

int tsr_embedding_load_file(const char *path, const char *name, const int *dims, int n_dims,
                            tsr_ti_embedding *out, int *vectors, int *shape)
{
    memset(out, 0, sizeof *out);
    *vectors = *shape = 0;
    if (n_dims < 1 || n_dims > 2)
        return tsr_errorf(TSR_ERR_INVALID, "embedding: %d text encoders (1 or 2)", n_dims);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return tsr_errorf(TSR_ERR_IO, "embedding '%s': %s", name, strerror(errno));
    if ((uint64_t)sb.st_size > TSR_EMB_MAX_FILE)
        return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': a file of %lld bytes (at most %u)",
                          name, (long long)sb.st_size, TSR_EMB_MAX_FILE);
    tsr_safetensors *st = NULL;
    int rc = tsr_st_open(path, &st);
    if (rc < 0) {
        /* the reader names the path; the message names the embedding only */
        char why[512];
        const char *msg = tsr_last_error(), *at = strstr(msg, path);
        if (at) {
            at += strlen(path);
            at += strncmp(at, ": ", 2) == 0 ? 2 : 0;
        }
        snprintf(why, sizeof why, "%s", at ? at : msg);
        return tsr_errorf(rc, "embedding '%s': not a safetensors file we can read: %s", name,
                          why);
    }
    rc = load_parts(st, name, dims, n_dims, out, vectors, shape);
    tsr_st_close(st);
    if (rc >= 0)
        rc = file_hash(path, out->hash);
    if (rc >= 0 && !(out->name = strdup(name)))
        rc = tsr_errorf(TSR_ERR_NOMEM, "embedding: out of memory");
    if (rc < 0)
        tsr_ti_embedding_free(out);
    return rc;
}

int tsr_embedding_load_memory(const void *data, size_t size, const char *name, const int *dims,
                              int n_dims, tsr_ti_embedding *out, int *vectors, int *shape)
{
    memset(out, 0, sizeof *out);
    *vectors = *shape = 0;
    if (n_dims < 1 || n_dims > 2)
        return tsr_errorf(TSR_ERR_INVALID, "embedding: %d text encoders (1 or 2)", n_dims);
    if (size > TSR_EMB_MAX_FILE)
        return tsr_errorf(TSR_ERR_FORMAT, "embedding '%s': %zu bytes (at most %u)", name, size,
                          TSR_EMB_MAX_FILE);
    tsr_safetensors *st = NULL;
    int rc = tsr_st_open_memory(data, size, name, &st);
    if (rc < 0)
        return tsr_error_prefix(rc, "embedding '%s'", name);
    rc = load_parts(st, name, dims, n_dims, out, vectors, shape);
    tsr_st_close(st);
    if (rc >= 0) {
        tsr_sha256_ctx ctx;
        tsr_sha256_init(&ctx);
        tsr_sha256_update(&ctx, data, size);
        uint8_t d[32];
        tsr_sha256_final(&ctx, d);
        char hex[65];
        tsr_sha256_hex(d, hex);
        memcpy(out->hash, hex, 12);
        out->hash[12] = '\0';
        if (!(out->name = strdup(name)))
            rc = tsr_errorf(TSR_ERR_NOMEM, "embedding: out of memory");
    }
    if (rc < 0)
        tsr_ti_embedding_free(out);
    return rc;
}

void tsr_embedding_db_free(tsr_embedding_db *db)
{
    if (!db)
        return;
    for (int i = 0; i < db->n; i++)
        tsr_ti_embedding_free(&db->emb[i]);
    for (int i = 0; i < db->n_skip; i++) {
        free(db->skip[i].name);
        free(db->skip[i].reason);
    }
    free(db->emb);
    free(db->skip);
    free(db);
}

static int add_skip(tsr_embedding_db *db, const char *name, int vectors, int shape,
                    const char *reason)
{
    tsr_embedding_skip *s = realloc(db->skip, (size_t)(db->n_skip + 1) * sizeof *s);
    if (!s)
        return tsr_errorf(TSR_ERR_NOMEM, "embedding: out of memory");
    db->skip = s;
    s = &db->skip[db->n_skip];
    s->name = strdup(name);
    s->reason = strdup(reason);
    s->vectors = vectors;
    s->shape = shape;
    if (!s->name || !s->reason) {
        free(s->name);
        free(s->reason);
        return tsr_errorf(TSR_ERR_NOMEM, "embedding: out of memory");
    }
    db->n_skip++;
    return TSR_OK;
}

/* Pickle files are named in "skipped" so an operator sees why they do not
 * work: loading one would run its code. */
static int skip_pickles(const char *dir, tsr_embedding_db *db)
{
    DIR *d = opendir(dir);
    if (!d)
        return TSR_OK;
    const struct dirent *de;
    int rc = TSR_OK;
    while (rc >= 0 && (de = readdir(d)) != NULL) {
        const char *dot = strrchr(de->d_name, '.');
        if (!dot || dot == de->d_name || de->d_name[0] == '.' ||
            (strcmp(dot, ".pt") && strcmp(dot, ".bin") && strcmp(dot, ".ckpt")))
            continue;
        char stem[256];
        snprintf(stem, sizeof stem, "%.*s", (int)(dot - de->d_name), de->d_name);
        rc = add_skip(db, stem, 0, 0, "pickle files (.pt, .bin, .ckpt) are not read: convert "
                                      "it to .safetensors");
    }
    closedir(d);
    return rc;
}

int tsr_embedding_db_load(const char *dir, const int *dims, int n_dims, tsr_embedding_db **out)
{
    *out = NULL;
    tsr_embedding_db *db = calloc(1, sizeof *db);
    if (!db)
        return tsr_errorf(TSR_ERR_NOMEM, "embedding: out of memory");
    if (!dir || !*dir) {
        *out = db;
        return TSR_OK;
    }
    char **names = NULL;
    int n = 0, rc = tsr_named_list(&tsr_named_embedding, dir, &names, &n);
    if (rc < 0) {
        free(db);
        return rc;
    }
    db->emb = calloc(n ? (size_t)n : 1, sizeof *db->emb);
    if (!db->emb)
        rc = tsr_errorf(TSR_ERR_NOMEM, "embedding: out of memory");
    for (int i = 0; rc >= 0 && i < n; i++) {
        char *path = NULL;
        int vectors = 0, shape = 0;
        int r = tsr_named_resolve(&tsr_named_embedding, dir, names[i], &path);
        if (r >= 0)
            r = tsr_embedding_load_file(path, names[i], dims, n_dims, &db->emb[db->n], &vectors,
                                        &shape);
        free(path);
        if (r >= 0)
            db->n++;
        else
            rc = add_skip(db, names[i], vectors, shape, tsr_last_error());
    }
    tsr_error_clear();
    if (rc >= 0)
        rc = skip_pickles(dir, db);
    tsr_lora_list_free(names, n);
    if (rc < 0) {
        tsr_embedding_db_free(db);
        return rc;
    }
    *out = db;
    return TSR_OK;
}
