/*
 * service/json.c - see json.h.  A recursive-descent reader over a byte
 * span; every error names its byte offset.
 */
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct reader {
    const char *p, *end, *start;
    char *err;
    size_t err_size;
    int depth;
} reader;

static void fail(reader *r, const char *what)
{
    if (r->err && r->err[0] == '\0')
        snprintf(r->err, r->err_size, "%s at byte %zu", what, (size_t)(r->p - r->start));
}

static void skip_ws(reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int hex4(const char *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Reads a string at r->p (on the opening quote); malloc'd result.  A
 * \u0000 is kept as a NUL byte (the C string then ends early) and reported
 * through *has_nul; NULL has_nul refuses it (object keys). */
static char *read_string(reader *r, bool *has_nul)
{
    r->p++; /* opening quote */
    const char *s = r->p;
    /* first pass: find the end, check raw bytes */
    size_t raw = 0;
    while (s < r->end && *s != '"') {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20) {
            r->p = s;
            fail(r, "control character in string");
            return NULL;
        }
        if (c == '\\') {
            if (s + 1 >= r->end)
                break;
            s += 2;
            raw += 2;
            continue;
        }
        s++;
        raw++;
    }
    if (s >= r->end) {
        fail(r, "unterminated string");
        return NULL;
    }
    /* the output never grows: \uXXXX (6 bytes) -> at most 3 bytes, pairs 12 -> 4 */
    char *out = malloc(raw + 1);
    if (!out) {
        fail(r, "out of memory");
        return NULL;
    }
    size_t o = 0;
    const char *q = r->p;
    while (q < s) {
        unsigned char c = (unsigned char)*q;
        if (c != '\\') {
            /* validate a UTF-8 sequence in place */
            size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                                   : (c & 0xF8) == 0xF0  ? 4
                                                         : 0;
            if (n == 0 || (size_t)(s - q) < n || !svc_utf8_valid(q, n, NULL)) {
                r->p = q;
                fail(r, "invalid UTF-8");
                free(out);
                return NULL;
            }
            memcpy(out + o, q, n);
            o += n;
            q += n;
            continue;
        }
        q++;
        char e = *q++;
        switch (e) {
        case '"': out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; break;
        case '/': out[o++] = '/'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (s - q < 4 || hex4(q, &cp) < 0) {
                r->p = q;
                fail(r, "bad \\u escape");
                free(out);
                return NULL;
            }
            q += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (s - q < 6 || q[0] != '\\' || q[1] != 'u' || hex4(q + 2, &lo) < 0 ||
                    lo < 0xDC00 || lo > 0xDFFF) {
                    r->p = q;
                    fail(r, "unpaired UTF-16 surrogate (invalid UTF-8)");
                    free(out);
                    return NULL;
                }
                q += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                r->p = q;
                fail(r, "unpaired UTF-16 surrogate (invalid UTF-8)");
                free(out);
                return NULL;
            }
            if (cp == 0) {
                if (!has_nul) {
                    r->p = q;
                    fail(r, "a key contains U+0000");
                    free(out);
                    return NULL;
                }
                *has_nul = true;
            }
            o += put_utf8(out + o, cp);
            break;
        }
        default:
            r->p = q - 1;
            fail(r, "bad escape in string");
            free(out);
            return NULL;
        }
    }
    out[o] = '\0';
    r->p = s + 1;
    return out;
}

static cJSON *read_value(reader *r);

static cJSON *read_number(reader *r)
{
    const char *s = r->p;
    const char *q = s;
    if (q < r->end && *q == '-')
        q++;
    if (q >= r->end || !(*q >= '0' && *q <= '9')) {
        fail(r, "invalid number");
        return NULL;
    }
    if (*q == '0') {
        q++;
    } else {
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < r->end && *q == '.') {
        q++;
        if (q >= r->end || !(*q >= '0' && *q <= '9')) {
            r->p = q;
            fail(r, "invalid number");
            return NULL;
        }
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < r->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < r->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= r->end || !(*q >= '0' && *q <= '9')) {
            r->p = q;
            fail(r, "invalid number");
            return NULL;
        }
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
    }
    size_t n = (size_t)(q - s);
    if (n > 256) {
        fail(r, "number too long");
        return NULL;
    }
    char *lit = malloc(n + 1);
    if (!lit) {
        fail(r, "out of memory");
        return NULL;
    }
    memcpy(lit, s, n);
    lit[n] = '\0';
    cJSON *item = cJSON_CreateNumber(strtod(lit, NULL));
    if (!item) {
        free(lit);
        fail(r, "out of memory");
        return NULL;
    }
    item->valuestring = lit;
    r->p = q;
    return item;
}

static bool literal(reader *r, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) >= n && memcmp(r->p, word, n) == 0) {
        r->p += n;
        return true;
    }
    return false;
}

/* Append v to parent's children in O(1): `last` is the current last child
 * (cJSON_AddItemTo* walk the whole list, quadratic for big documents). */
static void append_child(cJSON *parent, cJSON **last, cJSON *v)
{
    if (!*last) {
        parent->child = v;
        v->prev = v;
    } else {
        (*last)->next = v;
        v->prev = *last;
        parent->child->prev = v;
    }
    *last = v;
}

static cJSON *read_object(reader *r)
{
    r->p++;
    cJSON *obj = cJSON_CreateObject();
    if (!obj) {
        fail(r, "out of memory");
        return NULL;
    }
    cJSON *last = NULL;
    skip_ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return obj;
    }
    for (;;) {
        skip_ws(r);
        if (r->p >= r->end || *r->p != '"') {
            fail(r, "expected a string key");
            goto bad;
        }
        const char *key_at = r->p;
        char *key = read_string(r, NULL);
        if (!key)
            goto bad;
        if (cJSON_GetObjectItemCaseSensitive(obj, key)) {
            r->p = key_at;
            char msg[160];
            snprintf(msg, sizeof msg, "duplicate key \"%.100s\"", key);
            fail(r, msg);
            free(key);
            goto bad;
        }
        skip_ws(r);
        if (r->p >= r->end || *r->p != ':') {
            free(key);
            fail(r, "expected ':'");
            goto bad;
        }
        r->p++;
        cJSON *v = read_value(r);
        if (!v) {
            free(key);
            goto bad;
        }
        v->string = key;
        append_child(obj, &last, v);
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            return obj;
        }
        fail(r, "expected ',' or '}'");
        goto bad;
    }
bad:
    cJSON_Delete(obj);
    return NULL;
}

static cJSON *read_array(reader *r)
{
    r->p++;
    cJSON *arr = cJSON_CreateArray();
    if (!arr) {
        fail(r, "out of memory");
        return NULL;
    }
    cJSON *last = NULL;
    skip_ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return arr;
    }
    for (;;) {
        cJSON *v = read_value(r);
        if (!v)
            goto bad;
        append_child(arr, &last, v);
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            return arr;
        }
        fail(r, "expected ',' or ']'");
        goto bad;
    }
bad:
    cJSON_Delete(arr);
    return NULL;
}

static cJSON *read_value(reader *r)
{
    skip_ws(r);
    if (r->p >= r->end) {
        fail(r, "unexpected end of input");
        return NULL;
    }
    cJSON *v = NULL;
    switch (*r->p) {
    case '{':
    case '[':
        if (++r->depth > SVC_JSON_MAX_DEPTH) {
            fail(r, "nested too deeply");
            return NULL;
        }
        v = *r->p == '{' ? read_object(r) : read_array(r);
        r->depth--;
        return v;
    case '"': {
        bool nul = false;
        char *s = read_string(r, &nul);
        if (!s)
            return NULL;
        v = cJSON_CreateString("");
        if (!v) {
            free(s);
            fail(r, "out of memory");
            return NULL;
        }
        cJSON_free(v->valuestring);
        v->valuestring = s;
        if (nul)
            v->type |= SVC_JSON_HAS_NUL;
        return v;
    }
    case 't':
        if (literal(r, "true"))
            return cJSON_CreateTrue();
        break;
    case 'f':
        if (literal(r, "false"))
            return cJSON_CreateFalse();
        break;
    case 'n':
        if (literal(r, "null"))
            return cJSON_CreateNull();
        break;
    default:
        if (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))
            return read_number(r);
        break;
    }
    fail(r, (unsigned char)*r->p >= 0x80 ? "unexpected non-ASCII byte" : "unexpected character");
    return NULL;
}

cJSON *svc_json_parse(const char *buf, size_t len, char *err, size_t err_size)
{
    if (err && err_size)
        err[0] = '\0';
    reader r = {buf, buf + len, buf, err, err_size, 0};
    if (!buf) {
        fail(&r, "empty body");
        return NULL;
    }
    /* a UTF-8 byte order mark is not JSON (RFC 8259 8.1: MUST NOT add) */
    cJSON *v = read_value(&r);
    if (!v)
        return NULL;
    skip_ws(&r);
    if (r.p != r.end) {
        fail(&r, "trailing data after the JSON value");
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

const char *svc_json_literal(const cJSON *item)
{
    return item && cJSON_IsNumber(item) ? item->valuestring : NULL;
}

bool svc_json_literal_is_integer(const char *lit)
{
    if (!lit)
        return false;
    return strpbrk(lit, ".eE") == NULL;
}

cJSON *svc_json_u64(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return cJSON_CreateRaw(buf);
}

cJSON *svc_json_double(double v)
{
    if (!isfinite(v))
        return cJSON_CreateNull();
    char buf[32];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return cJSON_CreateRaw(buf);
}

void svc_json_add_double(cJSON *obj, const char *name, double v)
{
    cJSON_AddItemToObject(obj, name, svc_json_double(v));
}

void svc_json_add_string_or_null(cJSON *obj, const char *name, const char *s)
{
    if (s)
        cJSON_AddStringToObject(obj, name, s);
    else
        cJSON_AddNullToObject(obj, name);
}

void svc_json_add_number_or_null(cJSON *obj, const char *name, double v, bool present)
{
    if (present)
        svc_json_add_double(obj, name, v);
    else
        cJSON_AddNullToObject(obj, name);
}
