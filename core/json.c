/*
 * core/json.c - bounded parsing and checked, typed reads over cJSON.
 *
 * Why it is built this way: every caller of these helpers reads a file that
 * came from somewhere else, so the checks live here once instead of being
 * repeated (and forgotten) at each key.  The parse copies the input into a
 * NUL-terminated buffer before handing it to cJSON, so a bug or an
 * assumption in cJSON about termination cannot read past the caller's
 * bytes; the copy is cheap next to parsing.  Numbers are read from
 * valuedouble (valueint saturates silently) and must be finite, integral
 * where an integer is asked for, and exactly representable (|v| <= 2^53).
 */
#include "core/json.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"

/* Integers beyond 2^53 are not exactly representable in a double. */
#define TSR_JSON_MAX_EXACT 9007199254740992.0

static const char *lbl(const char *label)
{
    return label ? label : "json";
}

static bool is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Printable excerpt of up to 16 bytes at p (bounded by end) into buf. */
static void excerpt(const char *p, const char *end, char *buf, size_t size)
{
    size_t j = 0;
    for (; p < end && j + 1 < size && j < 16; p++) {
        unsigned char c = (unsigned char)*p;
        buf[j++] = (c >= 0x20 && c < 0x7f && c != '\'') ? (char)c : '?';
    }
    buf[j] = '\0';
}

static int syntax_error(const char *buf, size_t len, size_t off, const char *label,
                        const char *what)
{
    size_t line = 1, col = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (buf[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char near[20];
    excerpt(buf + (off < len ? off : len), buf + len, near, sizeof near);
    if (off >= len)
        return tsr_errorf(TSR_ERR_FORMAT,
                          "%s: JSON %s at byte %zu (line %zu, column %zu): unexpected end of input",
                          lbl(label), what, off, line, col);
    return tsr_errorf(TSR_ERR_FORMAT, "%s: JSON %s at byte %zu (line %zu, column %zu) near '%s'",
                      lbl(label), what, off, line, col, near);
}

int tsr_json_parse(const char *buf, size_t len, const char *label, cJSON **out)
{
    *out = NULL;
    if (!buf && len)
        return tsr_errorf(TSR_ERR_INVALID, "%s: NULL JSON buffer", lbl(label));
    if (len > TSR_JSON_MAX_PARSE)
        return tsr_errorf(TSR_ERR_RANGE, "%s: JSON document of %zu bytes exceeds the %u byte limit",
                          lbl(label), len, TSR_JSON_MAX_PARSE);
    char *copy = malloc(len + 1);
    if (!copy)
        return tsr_errorf(TSR_ERR_NOMEM, "%s: no memory for a %zu byte JSON copy", lbl(label), len);
    if (len)
        memcpy(copy, buf, len);
    copy[len] = '\0';

    int rc = TSR_OK;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, 0);
    if (!root) {
        size_t off = (end && end >= copy && end <= copy + len) ? (size_t)(end - copy) : len;
        rc = syntax_error(copy, len, off, label, "syntax error");
        goto cleanup;
    }
    /* Only whitespace may follow the value. */
    size_t pos = (end && end >= copy && end <= copy + len) ? (size_t)(end - copy) : len;
    while (pos < len && is_json_space(copy[pos]))
        pos++;
    if (pos < len) {
        rc = syntax_error(copy, len, pos, label, "trailing data");
        cJSON_Delete(root);
        goto cleanup;
    }
    *out = root;
cleanup:
    free(copy);
    return rc;
}

int tsr_json_load_file_max(const char *path, size_t max_bytes, cJSON **out)
{
    *out = NULL;
    if (max_bytes > TSR_JSON_MAX_PARSE)
        max_bytes = TSR_JSON_MAX_PARSE;
    int rc = TSR_OK;
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return tsr_errorf(errno == ENOENT ? TSR_ERR_NOT_FOUND : TSR_ERR_IO, "%s: cannot open: %s",
                          path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        rc = tsr_errorf(TSR_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto cleanup;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = tsr_errorf(TSR_ERR_IO, "%s: not a regular file", path);
        goto cleanup;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > max_bytes) {
        rc = tsr_errorf(TSR_ERR_RANGE, "%s: %lld bytes exceeds the %zu byte limit for JSON files",
                        path, (long long)st.st_size, max_bytes);
        goto cleanup;
    }
    size_t size = (size_t)st.st_size;
    buf = malloc(size + 1);
    if (!buf) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "%s: no memory for %zu bytes", path, size);
        goto cleanup;
    }
    /* Read one byte more than stat said, to notice a file that grew. */
    size_t got = fread(buf, 1, size + 1, f);
    if (ferror(f)) {
        rc = tsr_errorf(TSR_ERR_IO, "%s: read error", path);
        goto cleanup;
    }
    if (got != size) {
        rc = tsr_errorf(TSR_ERR_IO, "%s: file changed size while reading", path);
        goto cleanup;
    }
    rc = tsr_json_parse(buf, size, path, out);
cleanup:
    free(buf);
    fclose(f);
    return rc;
}

int tsr_json_load_file(const char *path, cJSON **out)
{
    return tsr_json_load_file_max(path, TSR_JSON_MAX_FILE, out);
}

const cJSON *tsr_json_member(const cJSON *obj, const char *key)
{
    if (!obj || !cJSON_IsObject(obj) || !key)
        return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v))
        return NULL;
    return v;
}

bool tsr_json_has(const cJSON *obj, const char *key)
{
    return tsr_json_member(obj, key) != NULL;
}

static int cmp_key(const void *a, const void *b)
{
    const char *x = *(const char *const *)a;
    const char *y = *(const char *const *)b;
    return strcmp(x, y);
}

const char *tsr_json_duplicate_key(const cJSON *obj, bool *nomem)
{
    if (nomem)
        *nomem = false;
    if (!obj || !cJSON_IsObject(obj))
        return NULL;
    size_t n = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        n++;
    if (n < 2)
        return NULL;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) {
        if (nomem)
            *nomem = true;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        keys[i++] = c->string ? c->string : "";
    qsort(keys, n, sizeof *keys, cmp_key);
    const char *dup = NULL;
    for (i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            dup = keys[i];
    free(keys);
    return dup;
}

int tsr_json_check_unique_keys(const cJSON *obj, const char *label)
{
    bool nomem = false;
    const char *dup = tsr_json_duplicate_key(obj, &nomem);
    if (nomem)
        return tsr_errorf(TSR_ERR_NOMEM, "%s: no memory to check for duplicate keys", lbl(label));
    if (dup)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: duplicate key '%s'", lbl(label), dup);
    return TSR_OK;
}

static const char *type_name(const cJSON *v)
{
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsNull(v)) return "null";
    return "an invalid value";
}

int tsr_json_expect_object(const cJSON *obj, const char *label, const char *what)
{
    if (!obj || !cJSON_IsObject(obj))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: %s must be a JSON object, not %s", lbl(label),
                          what ? what : "the document", obj ? type_name(obj) : "missing");
    return TSR_OK;
}

int tsr_json_item_int64(const cJSON *item, const char *label, const char *what, int64_t min,
                        int64_t max, int64_t *out)
{
    if (!item || !cJSON_IsNumber(item))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: \"%s\" must be an integer, not %s", lbl(label),
                          what, item ? type_name(item) : "missing");
    double v = item->valuedouble;
    if (!isfinite(v) || v != floor(v) || fabs(v) > TSR_JSON_MAX_EXACT || v < (double)min ||
        v > (double)max)
        return tsr_errorf(TSR_ERR_RANGE, "%s: \"%s\" = %.17g is not an integer in [%lld, %lld]",
                          lbl(label), what, v, (long long)min, (long long)max);
    int64_t iv = (int64_t)v;
    /* (double)min/max may round outward for bounds beyond 2^53. */
    if (iv < min || iv > max)
        return tsr_errorf(TSR_ERR_RANGE, "%s: \"%s\" = %lld is not in [%lld, %lld]", lbl(label),
                          what, (long long)iv, (long long)min, (long long)max);
    *out = iv;
    return TSR_OK;
}

int tsr_json_get_int64(const cJSON *obj, const char *label, const char *key, int64_t def,
                       int64_t min, int64_t max, int64_t *out)
{
    const cJSON *v = tsr_json_member(obj, key);
    if (!v) {
        *out = def;
        return TSR_OK;
    }
    return tsr_json_item_int64(v, label, key, min, max, out);
}

int tsr_json_get_int(const cJSON *obj, const char *label, const char *key, int def, int min,
                     int max, int *out)
{
    int64_t v = 0;
    TSR_TRY(tsr_json_get_int64(obj, label, key, def, min, max, &v));
    *out = (int)v;
    return TSR_OK;
}

int tsr_json_need_int(const cJSON *obj, const char *label, const char *key, int min, int max,
                      int *out)
{
    if (!tsr_json_member(obj, key))
        return tsr_errorf(TSR_ERR_NOT_FOUND, "%s: missing required key \"%s\"", lbl(label), key);
    return tsr_json_get_int(obj, label, key, 0, min, max, out);
}

int tsr_json_get_double(const cJSON *obj, const char *label, const char *key, double def,
                        double min, double max, double *out)
{
    const cJSON *v = tsr_json_member(obj, key);
    if (!v) {
        *out = def;
        return TSR_OK;
    }
    if (!cJSON_IsNumber(v))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: \"%s\" must be a number, not %s", lbl(label), key,
                          type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d < min || d > max)
        return tsr_errorf(TSR_ERR_RANGE, "%s: \"%s\" = %.17g is not in [%g, %g]", lbl(label), key,
                          d, min, max);
    *out = d;
    return TSR_OK;
}

int tsr_json_need_double(const cJSON *obj, const char *label, const char *key, double min,
                         double max, double *out)
{
    if (!tsr_json_member(obj, key))
        return tsr_errorf(TSR_ERR_NOT_FOUND, "%s: missing required key \"%s\"", lbl(label), key);
    return tsr_json_get_double(obj, label, key, 0.0, min, max, out);
}

int tsr_json_get_bool(const cJSON *obj, const char *label, const char *key, bool def,
                      bool *out)
{
    const cJSON *v = tsr_json_member(obj, key);
    if (!v) {
        *out = def;
        return TSR_OK;
    }
    if (!cJSON_IsBool(v))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: \"%s\" must be true or false, not %s", lbl(label),
                          key, type_name(v));
    *out = cJSON_IsTrue(v);
    return TSR_OK;
}

int tsr_json_get_string(const cJSON *obj, const char *label, const char *key, const char *def,
                        const char **out)
{
    const cJSON *v = tsr_json_member(obj, key);
    if (!v) {
        *out = def;
        return TSR_OK;
    }
    if (!cJSON_IsString(v) || !v->valuestring)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: \"%s\" must be a string, not %s", lbl(label), key,
                          type_name(v));
    *out = v->valuestring;
    return TSR_OK;
}

int tsr_json_need_string(const cJSON *obj, const char *label, const char *key,
                         const char **out)
{
    if (!tsr_json_member(obj, key))
        return tsr_errorf(TSR_ERR_NOT_FOUND, "%s: missing required key \"%s\"", lbl(label), key);
    return tsr_json_get_string(obj, label, key, NULL, out);
}

int tsr_json_get_int_array(const cJSON *obj, const char *label, const char *key, int min,
                           int max, int *out, int max_n, int *n)
{
    const cJSON *v = tsr_json_member(obj, key);
    if (!v) {
        *n = 0;
        return TSR_OK;
    }
    if (max_n < 0)
        return tsr_errorf(TSR_ERR_INVALID, "%s: \"%s\": negative capacity", lbl(label), key);
    if (cJSON_IsNumber(v)) {
        if (max_n < 1)
            return tsr_errorf(TSR_ERR_RANGE, "%s: \"%s\" has more than %d elements", lbl(label),
                              key, max_n);
        int64_t x = 0;
        TSR_TRY(tsr_json_item_int64(v, label, key, min, max, &x));
        out[0] = (int)x;
        *n = 1;
        return TSR_OK;
    }
    if (!cJSON_IsArray(v))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: \"%s\" must be an integer or an array of integers, not %s",
                          lbl(label), key, type_name(v));
    int count = 0;
    for (const cJSON *c = v->child; c; c = c->next) {
        if (count >= max_n)
            return tsr_errorf(TSR_ERR_RANGE, "%s: \"%s\" has more than %d elements", lbl(label),
                              key, max_n);
        char what[160];
        snprintf(what, sizeof what, "%s[%d]", key, count);
        int64_t x = 0;
        TSR_TRY(tsr_json_item_int64(c, label, what, min, max, &x));
        out[count++] = (int)x;
    }
    *n = count;
    return TSR_OK;
}

int tsr_json_get_string_array(const cJSON *obj, const char *label, const char *key,
                              const char **out, int max_n, int *n)
{
    const cJSON *v = tsr_json_member(obj, key);
    if (!v) {
        *n = 0;
        return TSR_OK;
    }
    if (max_n < 0)
        return tsr_errorf(TSR_ERR_INVALID, "%s: \"%s\": negative capacity", lbl(label), key);
    if (cJSON_IsString(v) && v->valuestring) {
        if (max_n < 1)
            return tsr_errorf(TSR_ERR_RANGE, "%s: \"%s\" has more than %d elements", lbl(label),
                              key, max_n);
        out[0] = v->valuestring;
        *n = 1;
        return TSR_OK;
    }
    if (!cJSON_IsArray(v))
        return tsr_errorf(TSR_ERR_FORMAT, "%s: \"%s\" must be a string or an array of strings, not %s",
                          lbl(label), key, type_name(v));
    int count = 0;
    for (const cJSON *c = v->child; c; c = c->next) {
        if (count >= max_n)
            return tsr_errorf(TSR_ERR_RANGE, "%s: \"%s\" has more than %d elements", lbl(label),
                              key, max_n);
        if (!cJSON_IsString(c) || !c->valuestring)
            return tsr_errorf(TSR_ERR_FORMAT, "%s: \"%s[%d]\" must be a string, not %s",
                              lbl(label), key, count, type_name(c));
        out[count++] = c->valuestring;
    }
    *n = count;
    return TSR_OK;
}
