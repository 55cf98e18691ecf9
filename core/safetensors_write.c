/*
 * core/safetensors_write.c - the safetensors writer (tsr_st_write).
 *
 * Why it is built this way: `tessera convert` and the tests write files that
 * the reader in core/safetensors.c (and the Python package) must accept, and
 * a crash or a full disk must never leave a half-written model where a good
 * one was.  So every entry is validated before a byte is written (names
 * non-empty and unique, dtypes known, shapes non-negative, sizes without
 * overflow, data present), the header is built by hand (not with
 * cJSON_Print, which may format large integers in exponent notation) and
 * padded with spaces so the data section starts 8-byte aligned, and the
 * bytes go to "<path>.tmp", which is fsynced and renamed over `path`.
 */
#include "core/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file.h"

#define ST_MAX_EXACT 9007199254740992.0 /* 2^53: the reader's limit on numbers */
#define ST_METADATA_KEY "__metadata__"

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_u64(sbuf *b, uint64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    sb_put(b, tmp, (size_t)n);
}

/* A JSON string literal: quotes, backslashes and control bytes escaped;
 * other bytes (UTF-8) pass through. */
static void sb_json_string(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sort `names` and fail on the first duplicate. */
static int check_unique(const char *path, const char **names, size_t n, const char *what)
{
    qsort(names, n, sizeof *names, cmp_str_ptr);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            return tsr_errorf(TSR_ERR_INVALID, "%s: duplicate %s '%s'", path, what, names[i]);
    return TSR_OK;
}

static int validate_write(const char *path, const tsr_st_write_entry *entries, size_t n,
                          const char *const *metadata, uint64_t *nbytes_out)
{
    int rc = TSR_OK;
    const char **names = NULL;
    size_t n_meta = 0;
    if (metadata)
        while (metadata[2 * n_meta]) {
            if (!metadata[2 * n_meta + 1])
                return tsr_errorf(TSR_ERR_INVALID, "%s: metadata key '%s' has a NULL value", path,
                                  metadata[2 * n_meta]);
            n_meta++;
        }
    size_t most = n > n_meta ? n : n_meta;
    if (most) {
        names = malloc(most * sizeof *names);
        if (!names)
            return tsr_errorf(TSR_ERR_NOMEM, "%s: no memory to check names", path);
    }
    for (size_t i = 0; i < n_meta; i++)
        names[i] = metadata[2 * i];
    if (n_meta)
        TSR_CHECK_GOTO(rc, check_unique(path, names, n_meta, "metadata key"), cleanup);

    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const tsr_st_write_entry *w = &entries[i];
        if (!w->name || !w->name[0]) {
            rc = tsr_errorf(TSR_ERR_INVALID, "%s: tensor %zu has no name", path, i);
            goto cleanup;
        }
        if (strcmp(w->name, ST_METADATA_KEY) == 0) {
            rc = tsr_errorf(TSR_ERR_INVALID, "%s: '%s' is reserved and cannot name a tensor",
                            path, w->name);
            goto cleanup;
        }
        if ((unsigned)w->dtype >= TSR_ST_DTYPE_COUNT) {
            rc = tsr_errorf(TSR_ERR_INVALID, "%s: tensor '%s' has an invalid dtype %d", path,
                            w->name, (int)w->dtype);
            goto cleanup;
        }
        if (w->ndim < 0 || w->ndim > TSR_ST_MAX_DIMS) {
            rc = tsr_errorf(TSR_ERR_INVALID, "%s: tensor '%s' has %d dimensions (0..%d allowed)",
                            path, w->name, w->ndim, TSR_ST_MAX_DIMS);
            goto cleanup;
        }
        uint64_t numel = 1, nb;
        for (int d = 0; d < w->ndim; d++) {
            if (w->shape[d] < 0 || !tsr_mul_overflow_u64(numel, (uint64_t)w->shape[d], &numel)) {
                rc = tsr_errorf(TSR_ERR_RANGE, "%s: tensor '%s' has a negative or overflowing shape",
                                path, w->name);
                goto cleanup;
            }
        }
        if (!tsr_mul_overflow_u64(numel, tsr_st_dtype_size(w->dtype), &nb) || nb > ST_MAX_EXACT ||
            total + nb > ST_MAX_EXACT) {
            rc = tsr_errorf(TSR_ERR_RANGE, "%s: tensor '%s' is too large", path, w->name);
            goto cleanup;
        }
        if (nb > 0 && !w->data) {
            rc = tsr_errorf(TSR_ERR_INVALID, "%s: tensor '%s' has %llu bytes but no data", path,
                            w->name, (unsigned long long)nb);
            goto cleanup;
        }
        total += nb;
        names[i] = w->name;
    }
    if (n)
        TSR_CHECK_GOTO(rc, check_unique(path, names, n, "tensor name"), cleanup);
    *nbytes_out = total;
cleanup:
    free(names);
    return rc;
}

static uint64_t write_entry_nbytes(const tsr_st_write_entry *w)
{
    uint64_t nb = tsr_st_dtype_size(w->dtype); /* validated: no overflow */
    for (int d = 0; d < w->ndim; d++)
        nb *= (uint64_t)w->shape[d];
    return nb;
}

static int build_header(const char *path, const tsr_st_write_entry *entries, size_t n,
                        const char *const *metadata, sbuf *b)
{
    sb_put(b, "{", 1);
    bool first = true;
    if (metadata && metadata[0]) {
        sb_str(b, "\"" ST_METADATA_KEY "\":{");
        for (size_t i = 0; metadata[2 * i]; i++) {
            if (i)
                sb_put(b, ",", 1);
            sb_json_string(b, metadata[2 * i]);
            sb_put(b, ":", 1);
            sb_json_string(b, metadata[2 * i + 1]);
        }
        sb_put(b, "}", 1);
        first = false;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const tsr_st_write_entry *w = &entries[i];
        uint64_t nb = write_entry_nbytes(w);
        if (!first)
            sb_put(b, ",", 1);
        first = false;
        sb_json_string(b, w->name);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, tsr_st_dtype_name(w->dtype));
        sb_str(b, "\",\"shape\":[");
        for (int d = 0; d < w->ndim; d++) {
            if (d)
                sb_put(b, ",", 1);
            sb_u64(b, (uint64_t)w->shape[d]);
        }
        sb_str(b, "],\"data_offsets\":[");
        sb_u64(b, off);
        sb_put(b, ",", 1);
        sb_u64(b, off + nb);
        sb_str(b, "]}");
        off += nb;
    }
    sb_put(b, "}", 1);
    /* Pad with spaces so the data section starts 8-byte aligned. */
    while (!b->oom && b->len % 8 != 0)
        sb_put(b, " ", 1);
    if (b->oom)
        return tsr_errorf(TSR_ERR_NOMEM, "%s: no memory for the header", path);
    if (b->len > TSR_ST_MAX_HEADER)
        return tsr_errorf(TSR_ERR_RANGE, "%s: the header (%zu bytes) exceeds the %u byte limit",
                          path, b->len, TSR_ST_MAX_HEADER);
    return TSR_OK;
}



int tsr_st_write(const char *path, const tsr_st_write_entry *entries, size_t n,
                 const char *const *metadata)
{
    if (!path || (n && !entries))
        return tsr_errorf(TSR_ERR_INVALID, "safetensors write: NULL path or entries");
    uint64_t total = 0;
    TSR_TRY(validate_write(path, entries, n, metadata, &total));

    int rc = TSR_OK;
    sbuf hdr = {0};
    tsr_atomic_file f = {-1, NULL, NULL};
    TSR_CHECK_GOTO(rc, build_header(path, entries, n, metadata, &hdr), cleanup);
    TSR_CHECK_GOTO(rc, tsr_atomic_open(&f, path), cleanup);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hdr.len >> (8 * i));
    TSR_CHECK_GOTO(rc, tsr_atomic_write(&f, len8, 8), cleanup);
    TSR_CHECK_GOTO(rc, tsr_atomic_write(&f, hdr.p, hdr.len), cleanup);
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = write_entry_nbytes(&entries[i]);
        if (nb)
            TSR_CHECK_GOTO(rc, tsr_atomic_write(&f, entries[i].data, nb), cleanup);
    }
    rc = tsr_atomic_commit(&f); /* releases f either way */
cleanup:
    if (f.path)
        tsr_atomic_abort(&f);
    free(hdr.p);
    return rc;
}
