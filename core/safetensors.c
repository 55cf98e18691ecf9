/*
 * core/safetensors.c - validate once, then read without checks.
 *
 * Why it is built this way: a checkpoint is a few gigabytes from an unknown
 * source, so the reader maps it (MAP_PRIVATE, PROT_READ: nothing is copied
 * and nothing can be written back) and validates the whole header up front.
 * Every later access (tsr_st_data) is then a pointer addition that cannot
 * leave the mapping.  The checks, in order:
 *
 *   1. at least 8 bytes; the little-endian header length is at most
 *      TSR_ST_MAX_HEADER and fits in the file; the header starts with '{'
 *      and is valid UTF-8;
 *   2. the header parses as a JSON object (core/json.c: size-bounded,
 *      nothing but whitespace after it) with no duplicate keys (cJSON keeps
 *      both; the second would shadow the first silently);
 *   3. "__metadata__", when present, is an object of strings;
 *   4. every tensor is an object with a known dtype, at most
 *      TSR_ST_MAX_DIMS non-negative integer dims whose product times the
 *      dtype size does not overflow, and data_offsets [begin, end) with
 *      begin <= end <= data section size and end - begin == that product;
 *   5. sorted by offset, no two non-empty tensors overlap.  (Gaps and
 *      trailing bytes are allowed, unlike the Rust reference, which wants
 *      the tensors to tile the data section: they are harmless to us.)
 *
 * Numbers arrive as JSON doubles; they must be integral and at most 2^53
 * (exactly representable), which bounds any offset to far beyond a real
 * file.  Error codes: TSR_ERR_FORMAT for a malformed file (including
 * truncation), TSR_ERR_RANGE for sizes beyond the limits (header length,
 * dims, products that overflow), TSR_ERR_UNSUPPORTED for an unknown dtype
 * (a newer format version), TSR_ERR_IO/NOT_FOUND for the file system.
 *
 * Entry names and metadata strings are borrowed from the cJSON tree, which
 * lives as long as the reader.  Entries are sorted by name for binary
 * search.  One hazard remains outside our control: if another process
 * truncates the file while it is mapped, reading the lost pages raises
 * SIGBUS.  Do not edit model files that a server has open.
 *
 * The writer is in core/safetensors_write.c.
 */
#include "core/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/json.h"

#define ST_MAX_EXACT 9007199254740992.0 /* 2^53 */
#define ST_METADATA_KEY "__metadata__"

struct tsr_safetensors {
    char *label;            /* owned: the path, or the caller's label */
    const uint8_t *base;    /* the whole image: mapped (owned) or borrowed */
    size_t size;
    bool mapped;
    const uint8_t *data;    /* base + 8 + header length */
    uint64_t data_size;
    uint64_t header_size;
    cJSON *root;            /* owned; names and metadata borrow from it */
    const cJSON *metadata;  /* borrowed from root; NULL when absent */
    tsr_st_entry *entries;  /* owned, sorted by name */
    size_t n;
};

/* ---- dtypes ---- */

static const struct {
    const char *name;
    size_t size;
} st_dtypes[TSR_ST_DTYPE_COUNT] = {
    [TSR_ST_BOOL] = {"BOOL", 1},     [TSR_ST_U8] = {"U8", 1},
    [TSR_ST_I8] = {"I8", 1},         [TSR_ST_F8_E4M3] = {"F8_E4M3", 1},
    [TSR_ST_F8_E5M2] = {"F8_E5M2", 1}, [TSR_ST_I16] = {"I16", 2},
    [TSR_ST_U16] = {"U16", 2},       [TSR_ST_F16] = {"F16", 2},
    [TSR_ST_BF16] = {"BF16", 2},     [TSR_ST_I32] = {"I32", 4},
    [TSR_ST_U32] = {"U32", 4},       [TSR_ST_F32] = {"F32", 4},
    [TSR_ST_F64] = {"F64", 8},       [TSR_ST_I64] = {"I64", 8},
    [TSR_ST_U64] = {"U64", 8},
};

const char *tsr_st_dtype_name(tsr_st_dtype dtype)
{
    if ((unsigned)dtype >= TSR_ST_DTYPE_COUNT)
        return "?";
    return st_dtypes[dtype].name;
}

size_t tsr_st_dtype_size(tsr_st_dtype dtype)
{
    if ((unsigned)dtype >= TSR_ST_DTYPE_COUNT)
        return 0;
    return st_dtypes[dtype].size;
}

bool tsr_st_dtype_from_name(const char *name, tsr_st_dtype *out)
{
    if (!name)
        return false;
    for (int i = 0; i < TSR_ST_DTYPE_COUNT; i++) {
        if (strcmp(name, st_dtypes[i].name) == 0) {
            *out = (tsr_st_dtype)i;
            return true;
        }
    }
    return false;
}

bool tsr_st_dtype_to_tsr(tsr_st_dtype dtype, tsr_dtype *out)
{
    switch (dtype) {
    case TSR_ST_F32: *out = TSR_F32; return true;
    case TSR_ST_F16: *out = TSR_F16; return true;
    case TSR_ST_BF16: *out = TSR_BF16; return true;
    default: return false;
    }
}

uint64_t tsr_st_numel(const tsr_st_entry *e)
{
    /* Validated at open: the product cannot overflow. */
    uint64_t n = 1;
    for (int i = 0; i < e->ndim; i++)
        n *= (uint64_t)e->shape[i];
    return n;
}

/* ---- accessors ---- */

const char *tsr_st_path(const tsr_safetensors *st)
{
    return st->label;
}

size_t tsr_st_count(const tsr_safetensors *st)
{
    return st->n;
}

const tsr_st_entry *tsr_st_entry_at(const tsr_safetensors *st, size_t i)
{
    return i < st->n ? &st->entries[i] : NULL;
}

const tsr_st_entry *tsr_st_find(const tsr_safetensors *st, const char *name)
{
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->entries[mid].name, name);
        if (c == 0)
            return &st->entries[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const void *tsr_st_data(const tsr_safetensors *st, const tsr_st_entry *e)
{
    return st->data + e->offset;
}

bool tsr_st_data_aligned(const tsr_safetensors *st, const tsr_st_entry *e)
{
    size_t a = tsr_st_dtype_size(e->dtype);
    return a == 0 || ((uintptr_t)tsr_st_data(st, e) % a) == 0;
}

void tsr_st_release(const tsr_safetensors *st, const tsr_st_entry *e)
{
    if (!st->mapped || e->nbytes == 0)
        return;
    /* only whole pages inside the tensor: neighbours may still be needed */
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t begin = (uintptr_t)tsr_st_data(st, e), end = begin + (uintptr_t)e->nbytes;
    begin = (begin + page - 1) & ~(page - 1);
    end &= ~(page - 1);
    if (end > begin)
        madvise((void *)begin, end - begin, MADV_DONTNEED);
}

uint64_t tsr_st_data_size(const tsr_safetensors *st)
{
    return st->data_size;
}

uint64_t tsr_st_header_size(const tsr_safetensors *st)
{
    return st->header_size;
}

const char *tsr_st_metadata(const tsr_safetensors *st, const char *key)
{
    if (!st->metadata || !key)
        return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(st->metadata, key);
    return v ? v->valuestring : NULL; /* validated: every value is a string */
}

size_t tsr_st_metadata_count(const tsr_safetensors *st)
{
    size_t n = 0;
    if (st->metadata)
        for (const cJSON *c = st->metadata->child; c; c = c->next)
            n++;
    return n;
}

bool tsr_st_metadata_at(const tsr_safetensors *st, size_t i, const char **key,
                        const char **value)
{
    if (!st->metadata)
        return false;
    for (const cJSON *c = st->metadata->child; c; c = c->next, i--) {
        if (i == 0) {
            *key = c->string;
            *value = c->valuestring;
            return true;
        }
    }
    return false;
}

/* ---- validation ---- */

/* A JSON number that must be a non-negative integer <= 2^53. */
static int read_uint(const cJSON *v, const char *label, const char *tensor, const char *what,
                     uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: tensor '%s': %s is not a number", label, tensor,
                          what);
    double d = v->valuedouble;
    if (isnan(d) || d != floor(d))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: tensor '%s': %s = %.17g is not an integer", label,
                          tensor, what, d);
    if (d < 0)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: tensor '%s': %s = %.17g is negative", label,
                          tensor, what, d);
    if (d > ST_MAX_EXACT)
        return tsr_errorf(TSR_ERR_RANGE, "%s: tensor '%s': %s = %.17g is too large", label,
                          tensor, what, d);
    *out = (uint64_t)d;
    return TSR_OK;
}

static int parse_entry(const tsr_safetensors *st, const cJSON *item, tsr_st_entry *e)
{
    const char *label = st->label;
    const char *name = item->string ? item->string : "";
    memset(e, 0, sizeof *e);
    e->name = name;
    if (!cJSON_IsObject(item))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: tensor '%s' is not a JSON object", label, name);
    TSR_TRY(tsr_json_check_unique_keys(item, label));

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!dt || !cJSON_IsString(dt) || !dt->valuestring)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: tensor '%s': missing or non-string \"dtype\"",
                          label, name);
    if (!tsr_st_dtype_from_name(dt->valuestring, &e->dtype)) {
        char shown[32];
        snprintf(shown, sizeof shown, "%s", dt->valuestring);
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: tensor '%s': unknown dtype '%s'", label, name,
                          shown);
    }
    if (!shape || !cJSON_IsArray(shape))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: tensor '%s': missing or non-array \"shape\"", label,
                          name);
    if (!offs || !cJSON_IsArray(offs))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: tensor '%s': missing or non-array \"data_offsets\"",
                          label, name);

    uint64_t numel = 1;
    int ndim = 0;
    for (const cJSON *d = shape->child; d; d = d->next) {
        if (ndim >= TSR_ST_MAX_DIMS)
            return tsr_errorf(TSR_ERR_RANGE, "%s: tensor '%s' has more than %d dimensions", label,
                              name, TSR_ST_MAX_DIMS);
        char what[32];
        snprintf(what, sizeof what, "shape[%d]", ndim);
        uint64_t dim = 0;
        TSR_TRY(read_uint(d, label, name, what, &dim));
        if (!tsr_mul_overflow_u64(numel, dim, &numel))
            return tsr_errorf(TSR_ERR_RANGE, "%s: tensor '%s': the element count overflows",
                              label, name);
        e->shape[ndim++] = (int64_t)dim;
    }
    e->ndim = ndim;
    uint64_t nbytes;
    if (!tsr_mul_overflow_u64(numel, st_dtypes[e->dtype].size, &nbytes))
        return tsr_errorf(TSR_ERR_RANGE, "%s: tensor '%s': the byte size overflows", label, name);

    const cJSON *b = offs->child, *en = b ? b->next : NULL;
    if (!b || !en || en->next)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" must hold exactly 2 numbers",
                          label, name);
    uint64_t begin = 0, end = 0;
    TSR_TRY(read_uint(b, label, name, "data_offsets[0]", &begin));
    TSR_TRY(read_uint(en, label, name, "data_offsets[1]", &end));
    if (begin > end)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: tensor '%s' data [%llu, %llu) begins after it ends",
                          label, name, (unsigned long long)begin, (unsigned long long)end);
    if (end > st->data_size)
        return tsr_errorf(TSR_ERR_FORMAT,
                          "%s: tensor '%s' data [%llu, %llu) ends past the data section (%llu bytes)",
                          label, name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)st->data_size);
    if (end - begin != nbytes)
        return tsr_errorf(TSR_ERR_FORMAT,
                          "%s: tensor '%s' data [%llu, %llu) holds %llu bytes but %s%s needs %llu",
                          label, name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)(end - begin), st_dtypes[e->dtype].name,
                          ndim ? " of that shape" : " scalar", (unsigned long long)nbytes);
    e->offset = begin;
    e->nbytes = nbytes;
    return TSR_OK;
}

static int check_metadata(const tsr_safetensors *st, const cJSON *meta)
{
    if (!cJSON_IsObject(meta))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: \"__metadata__\" is not a JSON object", st->label);
    TSR_TRY(tsr_json_check_unique_keys(meta, st->label));
    for (const cJSON *c = meta->child; c; c = c->next)
        if (!cJSON_IsString(c) || !c->valuestring)
            return tsr_errorf(TSR_ERR_FORMAT, "%s: \"__metadata__\" value of '%s' is not a string",
                              st->label, c->string ? c->string : "");
    return TSR_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const tsr_st_entry *)a)->name, ((const tsr_st_entry *)b)->name);
}

static int cmp_offset(const void *a, const void *b)
{
    const tsr_st_entry *x = *(const tsr_st_entry *const *)a;
    const tsr_st_entry *y = *(const tsr_st_entry *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

static int check_overlap(const tsr_safetensors *st)
{
    if (st->n < 2)
        return TSR_OK;
    const tsr_st_entry **by_off = malloc(st->n * sizeof *by_off);
    if (!by_off)
        return tsr_errorf(TSR_ERR_NOMEM, "%s: no memory to check %zu tensors", st->label, st->n);
    for (size_t i = 0; i < st->n; i++)
        by_off[i] = &st->entries[i];
    qsort(by_off, st->n, sizeof *by_off, cmp_offset);
    int rc = TSR_OK;
    const tsr_st_entry *prev = NULL; /* the non-empty tensor that ends last so far */
    for (size_t i = 0; i < st->n; i++) {
        const tsr_st_entry *e = by_off[i];
        if (e->nbytes == 0)
            continue;
        if (prev && e->offset < prev->offset + prev->nbytes) {
            rc = tsr_errorf(TSR_ERR_FORMAT,
                            "%s: tensor '%s' data [%llu, %llu) overlaps tensor '%s' [%llu, %llu)",
                            st->label, e->name, (unsigned long long)e->offset,
                            (unsigned long long)(e->offset + e->nbytes), prev->name,
                            (unsigned long long)prev->offset,
                            (unsigned long long)(prev->offset + prev->nbytes));
            break;
        }
        prev = e;
    }
    free(by_off);
    return rc;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF),
 * as the format requires of the header; names then print safely. */
static bool utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* Validate st->base[0..size) and fill the index. */
static int st_parse(tsr_safetensors *st)
{
    const char *label = st->label;
    if (st->size == 0)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: empty file (not a safetensors file)", label);
    if (st->size < 8)
        return tsr_errorf(TSR_ERR_FORMAT,
                          "%s: %zu bytes is too short for the 8-byte header length", label,
                          st->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | st->base[i];
    if (hlen > TSR_ST_MAX_HEADER)
        return tsr_errorf(TSR_ERR_RANGE, "%s: header length %llu exceeds the %u byte limit "
                          "(not a safetensors file?)", label, (unsigned long long)hlen,
                          TSR_ST_MAX_HEADER);
    if (hlen > st->size - 8)
        return tsr_errorf(TSR_ERR_FORMAT,
                          "%s: header length %llu runs past the end of the file (%zu bytes): truncated?",
                          label, (unsigned long long)hlen, st->size);
    if (hlen < 2 || st->base[8] != '{')
        return tsr_errorf(TSR_ERR_FORMAT, "%s: the header does not start with '{'", label);
    if (!utf8_valid(st->base + 8, (size_t)hlen))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: the header is not valid UTF-8", label);
    st->header_size = hlen;
    st->data = st->base + 8 + hlen;
    st->data_size = st->size - 8 - hlen;

    TSR_TRY(tsr_json_parse((const char *)st->base + 8, (size_t)hlen, label, &st->root));
    if (!cJSON_IsObject(st->root))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: the header is not a JSON object", label);
    TSR_TRY(tsr_json_check_unique_keys(st->root, label));

    size_t n = 0;
    for (const cJSON *c = st->root->child; c; c = c->next) {
        if (c->string && strcmp(c->string, ST_METADATA_KEY) == 0) {
            TSR_TRY(check_metadata(st, c));
            st->metadata = c;
        } else {
            n++;
        }
    }
    if (n) {
        st->entries = calloc(n, sizeof *st->entries);
        if (!st->entries)
            return tsr_errorf(TSR_ERR_NOMEM, "%s: no memory for %zu tensor entries", label, n);
    }
    for (const cJSON *c = st->root->child; c; c = c->next) {
        if (c == st->metadata)
            continue;
        TSR_TRY(parse_entry(st, c, &st->entries[st->n]));
        st->n++;
    }
    TSR_TRY(check_overlap(st));
    if (st->n > 1)
        qsort(st->entries, st->n, sizeof *st->entries, cmp_name);
    return TSR_OK;
}

static tsr_safetensors *st_alloc(const char *label)
{
    tsr_safetensors *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->label = strdup(label ? label : "safetensors");
    if (!st->label) {
        free(st);
        return NULL;
    }
    return st;
}

void tsr_st_close(tsr_safetensors *st)
{
    if (!st)
        return;
    if (st->mapped && st->base)
        munmap((void *)st->base, st->size);
    cJSON_Delete(st->root);
    free(st->entries);
    free(st->label);
    free(st);
}

int tsr_st_open_memory(const void *data, size_t size, const char *label, tsr_safetensors **out)
{
    *out = NULL;
    if (!data && size)
        return tsr_errorf(TSR_ERR_INVALID, "%s: NULL data", label ? label : "safetensors");
    tsr_safetensors *st = st_alloc(label);
    if (!st)
        return tsr_errorf(TSR_ERR_NOMEM, "%s: no memory for a reader", label ? label : "safetensors");
    static const uint8_t empty[1];
    st->base = data ? data : empty;
    st->size = size;
    int rc = st_parse(st);
    if (rc < 0) {
        tsr_st_close(st);
        return rc;
    }
    *out = st;
    return TSR_OK;
}

int tsr_st_open(const char *path, tsr_safetensors **out)
{
    *out = NULL;
    int rc = TSR_OK;
    tsr_safetensors *st = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tsr_errorf(errno == ENOENT ? TSR_ERR_NOT_FOUND : TSR_ERR_IO, "%s: cannot open: %s",
                          path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        rc = tsr_errorf(TSR_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto cleanup;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = tsr_errorf(TSR_ERR_IO, "%s: not a regular file", path);
        goto cleanup;
    }
    st = st_alloc(path);
    if (!st) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "%s: no memory for a reader", path);
        goto cleanup;
    }
    st->size = (size_t)sb.st_size;
    if (st->size > 0) {
        void *p = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            rc = tsr_errorf(TSR_ERR_IO, "%s: cannot map %zu bytes: %s", path, st->size,
                            strerror(errno));
            goto cleanup;
        }
        st->base = p;
        st->mapped = true;
    } else {
        static const uint8_t empty[1];
        st->base = empty;
    }
    rc = st_parse(st);
cleanup:
    close(fd);
    if (rc < 0) {
        tsr_st_close(st);
        return rc;
    }
    *out = st;
    return TSR_OK;
}
