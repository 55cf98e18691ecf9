/*
 * service/base/json.c - see json.h.  A recursive-descent reader over a byte
 * span; every error names its byte offset.
 *
 * Why it is built this way: request bodies are read on the event loop, up
 * to --max-body (32 MiB), from anyone who can reach the port, so the cost
 * of a parse must be linear in the body and its memory a small multiple of
 * it, whatever the body holds.  Hence:
 * - duplicate keys are found through a hash set of each object's keys,
 *   built as the keys arrive (a linear scan while the object has at most
 *   SVC_JSON_SCAN_KEYS members), so the error comes at the same moment as
 *   a member-by-member search would give it, before the second key's value
 *   is read.  The hash is SipHash-1-3 under a key drawn per document, so no
 *   body can be built to make every key collide and bring the quadratic
 *   search back;
 * - members per object, elements per array and values per document are
 *   bounded (json.h says why each bound), which bounds the tree's memory to
 *   the body's strings plus about 120 bytes a value;
 * - a number's literal lives in the same allocation as its item (the item
 *   carries cJSON_IsReference, so cJSON_Delete frees the two as one block):
 *   one allocation per number instead of two;
 * - everything is allocated through cJSON_malloc, so cJSON_InitHooks sees
 *   every byte (fuzz/fuzz_json_cost.c counts them).
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
    size_t values; /* values read so far (SVC_JSON_MAX_VALUES) */
    bool keyed;    /* sip_k0/1 drawn (at the first object past SVC_JSON_SCAN_KEYS) */
    uint64_t sip_k0, sip_k1;
} reader;

static void fail(reader *r, const char *what)
{
    if (r->err && r->err[0] == '\0')
        snprintf(r->err, r->err_size, "%s at byte %zu", what, (size_t)(r->p - r->start));
}

/* SipHash-c-d (Aumasson and Bernstein), written from the paper's
 * description: a keyed hash, so a client cannot choose keys that collide. */
#define SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void sip_round(uint64_t v[4])
{
    v[0] += v[1];
    v[1] = SIP_ROTL(v[1], 13);
    v[1] ^= v[0];
    v[0] = SIP_ROTL(v[0], 32);
    v[2] += v[3];
    v[3] = SIP_ROTL(v[3], 16);
    v[3] ^= v[2];
    v[0] += v[3];
    v[3] = SIP_ROTL(v[3], 21);
    v[3] ^= v[0];
    v[2] += v[1];
    v[1] = SIP_ROTL(v[1], 17);
    v[1] ^= v[2];
    v[2] = SIP_ROTL(v[2], 32);
}

/* c compression rounds, d finalisation rounds (2, 4 for the paper's test
 * vectors; 1, 3 here). */
static uint64_t sip_hash(uint64_t k0, uint64_t k1, const unsigned char *m, size_t len, int c,
                         int d)
{
    uint64_t v[4] = {0x736f6d6570736575ULL ^ k0, 0x646f72616e646f6dULL ^ k1,
                     0x6c7967656e657261ULL ^ k0, 0x7465646279746573ULL ^ k1};
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = 0;
        for (int j = 7; j >= 0; j--)
            w = (w << 8) | m[i + (size_t)j];
        v[3] ^= w;
        for (int k = 0; k < c; k++)
            sip_round(v);
        v[0] ^= w;
    }
    uint64_t b = (uint64_t)len << 56;
    for (size_t j = 0; i + j < len; j++)
        b |= (uint64_t)m[i + j] << (8 * j);
    v[3] ^= b;
    for (int k = 0; k < c; k++)
        sip_round(v);
    v[0] ^= b;
    v[2] ^= 0xff;
    for (int k = 0; k < d; k++)
        sip_round(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* The keys of one object being read: open addressing with linear probing,
 * at most half full.  Keys are the members' own strings (the set never
 * outlives the object's parse). */
typedef struct key_slot {
    uint64_t hash;
    const char *key; /* NULL: free */
} key_slot;

typedef struct key_set {
    key_slot *slot;
    size_t cap; /* 0 until the object passes SVC_JSON_SCAN_KEYS members */
    size_t n;
} key_set;

static int key_set_grow(key_set *ks, size_t cap)
{
    key_slot *s = cJSON_malloc(cap * sizeof *s);
    if (!s)
        return -1;
    memset(s, 0, cap * sizeof *s);
    for (size_t i = 0; i < ks->cap; i++) {
        if (!ks->slot[i].key)
            continue;
        size_t j = (size_t)ks->slot[i].hash & (cap - 1);
        while (s[j].key)
            j = (j + 1) & (cap - 1);
        s[j] = ks->slot[i];
    }
    cJSON_free(ks->slot);
    ks->slot = s;
    ks->cap = cap;
    return 0;
}

/* Adds key unless it is there: 1 it was (a duplicate), 0 added, -1 out of
 * memory. */
static int key_set_add(key_set *ks, uint64_t hash, const char *key)
{
    if ((ks->n + 1) * 2 > ks->cap && key_set_grow(ks, ks->cap ? ks->cap * 2 : 32) < 0)
        return -1;
    size_t j = (size_t)hash & (ks->cap - 1);
    for (; ks->slot[j].key; j = (j + 1) & (ks->cap - 1))
        if (ks->slot[j].hash == hash && strcmp(ks->slot[j].key, key) == 0)
            return 1;
    ks->slot[j].hash = hash;
    ks->slot[j].key = key;
    ks->n++;
    return 0;
}

static uint64_t key_hash(reader *r, const char *key)
{
    if (!r->keyed) {
        r->sip_k0 = svc_random_u64();
        r->sip_k1 = svc_random_u64();
        r->keyed = true;
    }
    return sip_hash(r->sip_k0, r->sip_k1, (const unsigned char *)key, strlen(key), 1, 3);
}

/* Whether obj (n members so far, `ks` its key set) already has `key`; adds
 * it otherwise.  -1: out of memory. */
static int seen_key(reader *r, const cJSON *obj, size_t n, key_set *ks, const char *key)
{
    if (n < SVC_JSON_SCAN_KEYS) {
        for (const cJSON *c = obj->child; c; c = c->next)
            if (strcmp(c->string, key) == 0)
                return 1;
        return 0;
    }
    if (!ks->cap) {
        /* the first key past the scan: the set starts with the members so far */
        for (const cJSON *c = obj->child; c; c = c->next)
            if (key_set_add(ks, key_hash(r, c->string), c->string) < 0)
                return -1;
    }
    return key_set_add(ks, key_hash(r, key), key);
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

/* A refusal inside a string: the position at `at`, out freed; NULL. */
static char *string_fail(reader *r, const char *at, const char *msg, char *out)
{
    r->p = at;
    fail(r, msg);
    cJSON_free(out);
    return NULL;
}

/* Reads a string at r->p (on the opening quote); cJSON_malloc'd result.  A
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
    char *out = cJSON_malloc(raw + 1);
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
            if (n == 0 || (size_t)(s - q) < n || !svc_utf8_valid(q, n, NULL))
                return string_fail(r, q, "invalid UTF-8", out);
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
            if (s - q < 4 || hex4(q, &cp) < 0)
                return string_fail(r, q, "bad \\u escape", out);
            q += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (s - q < 6 || q[0] != '\\' || q[1] != 'u' || hex4(q + 2, &lo) < 0 ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return string_fail(r, q, "unpaired UTF-16 surrogate (invalid UTF-8)", out);
                q += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return string_fail(r, q, "unpaired UTF-16 surrogate (invalid UTF-8)", out);
            }
            if (cp == 0) {
                if (!has_nul)
                    return string_fail(r, q, "a key contains U+0000", out);
                *has_nul = true;
            }
            o += put_utf8(out + o, cp);
            break;
        }
        default:
            return string_fail(r, q - 1, "bad escape in string", out);
        }
    }
    out[o] = '\0';
    r->p = s + 1;
    return out;
}

static cJSON *read_value(reader *r);

/* The end of the digits from p on. */
static const char *skip_digits(const char *p, const char *end)
{
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    return p;
}

const char *svc_json_scan_number(const char *s, const char *end, const char **bad)
{
    const char *q = s < end && *s == '-' ? s + 1 : s;
    const char *e = skip_digits(q, end);
    if (e == q) {
        if (bad)
            *bad = s;
        return NULL;
    }
    q = *q == '0' ? q + 1 : e; /* no leading zeros: "01" is the number 0, then '1' */
    if (q < end && *q == '.') {
        e = skip_digits(++q, end);
        if (e == q) {
            if (bad)
                *bad = q;
            return NULL;
        }
        q = e;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < end && (*q == '+' || *q == '-'))
            q++;
        e = skip_digits(q, end);
        if (e == q) {
            if (bad)
                *bad = q;
            return NULL;
        }
        q = e;
    }
    return q;
}

static cJSON *read_number(reader *r)
{
    const char *s = r->p, *bad = NULL;
    const char *q = svc_json_scan_number(s, r->end, &bad);
    if (!q) {
        r->p = bad;
        fail(r, "invalid number");
        return NULL;
    }
    size_t n = (size_t)(q - s);
    if (n > 256) {
        fail(r, "number too long");
        return NULL;
    }
    /* the item and its literal in one block: cJSON_IsReference keeps
     * cJSON_Delete from freeing the literal on its own (a number has no
     * child); cJSON_Duplicate copies the literal and drops the flag */
    cJSON *item = cJSON_malloc(sizeof *item + n + 1);
    if (!item) {
        fail(r, "out of memory");
        return NULL;
    }
    memset(item, 0, sizeof *item);
    char *lit = (char *)(item + 1);
    memcpy(lit, s, n);
    lit[n] = '\0';
    item->type = cJSON_Number | cJSON_IsReference;
    item->valuestring = lit;
    cJSON_SetNumberHelper(item, strtod(lit, NULL));
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
    key_set keys = {NULL, 0, 0};
    size_t n = 0;
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
        if (n == SVC_JSON_MAX_MEMBERS) {
            fail(r, "more than " SVC_JSON_STR(SVC_JSON_MAX_MEMBERS) " members in one object");
            goto bad;
        }
        const char *key_at = r->p;
        char *key = read_string(r, NULL);
        if (!key)
            goto bad;
        int seen = seen_key(r, obj, n, &keys, key);
        if (seen != 0) {
            r->p = key_at;
            char msg[160];
            if (seen > 0)
                snprintf(msg, sizeof msg, "duplicate key \"%.100s\"", key);
            fail(r, seen > 0 ? msg : "out of memory");
            cJSON_free(key);
            goto bad;
        }
        skip_ws(r);
        if (r->p >= r->end || *r->p != ':') {
            cJSON_free(key);
            fail(r, "expected ':'");
            goto bad;
        }
        r->p++;
        cJSON *v = read_value(r);
        if (!v) {
            cJSON_free(key);
            goto bad;
        }
        v->string = key;
        append_child(obj, &last, v);
        n++;
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            cJSON_free(keys.slot);
            return obj;
        }
        fail(r, "expected ',' or '}'");
        goto bad;
    }
bad:
    cJSON_free(keys.slot);
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
    size_t n = 0;
    skip_ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return arr;
    }
    for (;;) {
        skip_ws(r);
        if (n == SVC_JSON_MAX_ELEMENTS) {
            fail(r, "more than " SVC_JSON_STR(SVC_JSON_MAX_ELEMENTS) " elements in one array");
            goto bad;
        }
        cJSON *v = read_value(r);
        if (!v)
            goto bad;
        append_child(arr, &last, v);
        n++;
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

/* A string item that owns s. */
static cJSON *new_string(reader *r, char *s)
{
    cJSON *v = cJSON_malloc(sizeof *v);
    if (!v) {
        cJSON_free(s);
        fail(r, "out of memory");
        return NULL;
    }
    memset(v, 0, sizeof *v);
    v->type = cJSON_String;
    v->valuestring = s;
    return v;
}

static cJSON *read_value(reader *r)
{
    skip_ws(r);
    if (r->p >= r->end) {
        fail(r, "unexpected end of input");
        return NULL;
    }
    if (r->values == SVC_JSON_MAX_VALUES) {
        fail(r, "more than " SVC_JSON_STR(SVC_JSON_MAX_VALUES) " values in one document");
        return NULL;
    }
    r->values++;
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
        v = new_string(r, s);
        if (v && nul)
            v->type |= SVC_JSON_HAS_NUL;
        return v;
    }
    case 't':
    case 'f':
    case 'n': {
        const char *word = *r->p == 't' ? "true" : *r->p == 'f' ? "false" : "null";
        if (!literal(r, word))
            break;
        v = *word == 't' ? cJSON_CreateTrue() : *word == 'f' ? cJSON_CreateFalse()
                                                             : cJSON_CreateNull();
        if (!v)
            fail(r, "out of memory");
        return v;
    }
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
    reader r = {buf, buf + len, buf, err, err_size, 0, 0, false, 0, 0};
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
