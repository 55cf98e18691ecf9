/*
 * service/api/fields.c - the typed field reader (see fields.h).
 *
 * Why it is built this way: the readers are small and alike, and what makes
 * them worth one file is the wording of their refusals, which clients and
 * tests read.  Every refusal goes through svc_fields_fail with the member's
 * name first, so the three dialects cannot word one case three ways again;
 * the few real differences (how a string is shown, a range or none, 0/1 as
 * booleans, "-0" as a seed) are arguments, not copies.  A1111's looser
 * types (pydantic's coercions: false for 0, 3.0 for 3, "7.5" for 7.5) are
 * one table, k_coercions, that the int, number and boolean readers consult
 * only when the reader's rules say PYDANTIC, so the rules are stated once,
 * tested as a table (tests/service/test_fields.c), and cannot leak into the
 * strict dialects.  The reader keeps no
 * allocation: strings are borrowed from the object, and the dialect copies
 * what it keeps.
 */
#include "fields.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "json.h"

void svc_fields_init(svc_fields *f, const cJSON *obj, const cJSON *defaults, bool show_strings)
{
    memset(f, 0, sizeof *f);
    f->obj = obj;
    f->defaults = defaults;
    f->show_strings = show_strings;
}

static bool source_of(const svc_fields *f, const char *name)
{
    for (int i = 0; i < f->n_src; i++)
        if (strcmp(f->src[i].name, name) == 0)
            return f->src[i].from_defaults;
    return false;
}

int svc_fields_fail(svc_fields *f, const char *field, const char *fmt, ...)
{
    snprintf(f->field, sizeof f->field, "%s", field ? field : "");
    f->from_defaults = field ? source_of(f, field) : false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->message, sizeof f->message, fmt, ap);
    va_end(ap);
    return -1;
}

const cJSON *svc_fields_get(svc_fields *f, const char *name)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(f->obj, name);
    bool from_defaults = false;
    if (!it && f->defaults) {
        it = cJSON_GetObjectItemCaseSensitive(f->defaults, name);
        from_defaults = it != NULL;
    }
    if (f->n_src < SVC_FIELDS_MAX_SOURCES) {
        f->src[f->n_src].name = name;
        f->src[f->n_src].from_defaults = from_defaults;
        f->n_src++;
    }
    return it && !cJSON_IsNull(it) ? it : NULL;
}

void svc_fields_describe(const svc_fields *f, const cJSON *it, char *buf, size_t size)
{
    if (cJSON_IsString(it) && f->show_strings)
        snprintf(buf, size, "\"%.40s\"", it->valuestring);
    else if (cJSON_IsString(it))
        snprintf(buf, size, "a string");
    else if (cJSON_IsBool(it))
        snprintf(buf, size, "%s", cJSON_IsTrue(it) ? "true" : "false");
    else if (cJSON_IsObject(it))
        snprintf(buf, size, "an object");
    else if (cJSON_IsArray(it))
        snprintf(buf, size, "an array");
    else if (cJSON_IsNumber(it))
        snprintf(buf, size, "%.40s", svc_json_literal(it) ? svc_json_literal(it) : "a number");
    else
        snprintf(buf, size, "null");
}

/* The integer an item's literal spells, if it is one within long long. */
static bool integer_of(const cJSON *it, long long *v)
{
    const char *lit = svc_json_literal(it);
    if (!cJSON_IsNumber(it) || !lit || !svc_json_literal_is_integer(lit))
        return false;
    errno = 0;
    long long r = strtoll(lit, NULL, 10);
    if (errno == ERANGE)
        return false;
    *v = r;
    return true;
}

/* ------------------------------------------------------ the coercion table */

/* |v| below 2^53: a double that holds an integer exactly. */
#define EXACT_INT 9007199254740992.0

static bool from_int01(const cJSON *it, double *v)
{
    long long i = 0;
    if (!integer_of(it, &i) || (i != 0 && i != 1))
        return false;
    *v = (double)i;
    return true;
}

static bool from_bool(const cJSON *it, double *v)
{
    if (!cJSON_IsBool(it))
        return false;
    *v = cJSON_IsTrue(it) ? 1 : 0;
    return true;
}

static bool from_integral_float(const cJSON *it, double *v)
{
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) ||
        it->valuedouble != floor(it->valuedouble) || fabs(it->valuedouble) >= EXACT_INT)
        return false;
    *v = it->valuedouble;
    return true;
}

/* A string of [+-]digits[.digits][e[+-]digits] only: what Python's float()
 * and int() read, less whitespace, "inf", "nan" and underscores. */
static bool from_string(const cJSON *it, bool integer, double *v)
{
    if (!cJSON_IsString(it) || !it->valuestring || (it->type & SVC_JSON_HAS_NUL))
        return false;
    const char *p = it->valuestring;
    size_t n = strlen(p);
    if (n == 0 || n > 64)
        return false;
    for (const char *c = p; *c; c++)
        if (!((*c >= '0' && *c <= '9') || *c == '+' || *c == '-' ||
              (!integer && (*c == '.' || *c == 'e' || *c == 'E'))))
            return false;
    char *end = NULL;
    errno = 0;
    const double d = strtod(p, &end);
    if (*end || errno == ERANGE || !isfinite(d) || (integer && fabs(d) >= EXACT_INT))
        return false;
    *v = d;
    return true;
}

static bool from_integer_string(const cJSON *it, double *v) { return from_string(it, true, v); }
static bool from_numeric_string(const cJSON *it, double *v) { return from_string(it, false, v); }

/* Pydantic's lax conversions that A1111 clients rely on; a value matched by
 * no row is refused.  (null is "absent" for every dialect: svc_fields_get.) */
static const struct {
    svc_coerce rules;
    char want; /* 'b' boolean, 'i' integer, 'n' number */
    bool (*take)(const cJSON *it, double *v);
    const char *example;
} k_coercions[] = {
    {SVC_COERCE_PYDANTIC, 'b', from_int01, "0 and 1 for false and true"},
    {SVC_COERCE_PYDANTIC, 'i', from_bool, "false and true for 0 and 1"},
    {SVC_COERCE_PYDANTIC, 'i', from_integral_float, "3.0 for 3"},
    {SVC_COERCE_PYDANTIC, 'i', from_integer_string, "\"3\" for 3"},
    {SVC_COERCE_PYDANTIC, 'n', from_numeric_string, "\"7.5\" for 7.5"},
};

bool svc_fields_coerce(svc_coerce rules, char want, const cJSON *it, double *v)
{
    for (size_t i = 0; i < sizeof k_coercions / sizeof k_coercions[0]; i++)
        if (k_coercions[i].rules == rules && k_coercions[i].want == want &&
            k_coercions[i].take(it, v))
            return true;
    return false;
}

int svc_fields_refuse(svc_fields *f, const char *name, const cJSON *it, const char *what)
{
    char got[64];
    svc_fields_describe(f, it, got, sizeof got);
    return svc_fields_fail(f, name, "%s must be %s, got %s", name, what, got);
}

int svc_fields_int(svc_fields *f, const char *name, long long lo, long long hi, long long dflt,
                   long long *out)
{
    const cJSON *it = svc_fields_get(f, name);
    *out = dflt;
    if (!it)
        return 0;
    long long v = 0;
    double c = 0;
    bool ok = integer_of(it, &v);
    if (!ok && svc_fields_coerce(f->coerce, 'i', it, &c)) {
        v = (long long)c;
        ok = true;
    }
    if (!ok || v < lo || v > hi) {
        char what[96];
        snprintf(what, sizeof what, "an integer between %lld and %lld", lo, hi);
        return svc_fields_refuse(f, name, it, what);
    }
    *out = v;
    return 0;
}

int svc_fields_number(svc_fields *f, const char *name, double lo, double hi, bool lo_open,
                      double dflt, double *out, bool *given)
{
    const cJSON *it = svc_fields_get(f, name);
    if (given)
        *given = it != NULL;
    *out = dflt;
    if (!it)
        return 0;
    const bool ranged = isfinite(lo) || isfinite(hi);
    double v = it->valuedouble;
    const bool number = cJSON_IsNumber(it) || svc_fields_coerce(f->coerce, 'n', it, &v);
    if (!number || !isfinite(v) || (lo_open ? v <= lo : v < lo) || v > hi) {
        char what[96] = "a number";
        if (ranged)
            snprintf(what, sizeof what, "a number in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
        return svc_fields_refuse(f, name, it, what);
    }
    *out = v;
    return 0;
}

int svc_fields_string(svc_fields *f, const char *name, size_t max, bool required,
                      const char **out)
{
    const cJSON *it = svc_fields_get(f, name);
    *out = NULL;
    if (!it) {
        if (required)
            return svc_fields_fail(f, name, "%s is required (a string)", name);
        return 0;
    }
    if (!cJSON_IsString(it) || !it->valuestring)
        return svc_fields_refuse(f, name, it, "a string");
    if (it->type & SVC_JSON_HAS_NUL)
        return svc_fields_fail(f, name, "%s must not contain U+0000 (NUL)", name);
    const size_t len = strlen(it->valuestring);
    if (len > max)
        return svc_fields_fail(f, name, "%s is %zu bytes long; at most %zu", name, len, max);
    *out = it->valuestring;
    return 0;
}

int svc_fields_enum(svc_fields *f, const char *name, const char *const *allowed,
                    const char **out)
{
    const cJSON *it = svc_fields_get(f, name);
    *out = NULL;
    if (!it)
        return 0;
    bool ok = cJSON_IsString(it) && !(it->type & SVC_JSON_HAS_NUL);
    for (const char *const *a = allowed; ok && *a; a++)
        if (strcmp(*a, it->valuestring) == 0) {
            *out = *a;
            return 0;
        }
    char list[256] = "";
    for (const char *const *a = allowed; *a; a++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"",
                 a == allowed ? "" : ", ", *a);
    char what[300];
    snprintf(what, sizeof what, "one of %s", list);
    return svc_fields_refuse(f, name, it, what);
}

int svc_fields_bool(svc_fields *f, const char *name, bool ints01, bool dflt, bool *out)
{
    const cJSON *it = svc_fields_get(f, name);
    *out = dflt;
    if (!it)
        return 0;
    long long v = 0;
    if (cJSON_IsBool(it)) {
        *out = cJSON_IsTrue(it);
        return 0;
    }
    if (ints01 && integer_of(it, &v) && (v == 0 || v == 1)) {
        *out = v == 1;
        return 0;
    }
    double c = 0;
    if (svc_fields_coerce(f->coerce, 'b', it, &c)) {
        *out = c != 0;
        return 0;
    }
    return svc_fields_refuse(f, name, it, "a boolean");
}

int svc_fields_kind(svc_fields *f, const char *name, int kind)
{
    const cJSON *it = svc_fields_get(f, name);
    if (!it)
        return 0;
    const bool array = kind == cJSON_Array;
    if (array ? cJSON_IsArray(it) : cJSON_IsObject(it))
        return 0;
    return svc_fields_refuse(f, name, it, array ? "an array" : "an object");
}

int svc_fields_seed(svc_fields *f, const char *name, bool minus_zero, const char *expected,
                    uint64_t *out, bool *random)
{
    const cJSON *it = svc_fields_get(f, name);
    *random = true;
    if (!it)
        return 0;
    const char *lit = svc_json_literal(it);
    double c = 0;
    if ((!cJSON_IsNumber(it) || !lit || !svc_json_literal_is_integer(lit)) &&
        svc_fields_coerce(f->coerce, 'i', it, &c) && c >= -1) {
        *random = c == -1;
        if (c >= 0)
            *out = (uint64_t)c;
        return 0;
    }
    if (!cJSON_IsNumber(it) || !lit || !svc_json_literal_is_integer(lit))
        return svc_fields_refuse(f, name, it, expected);
    if (strcmp(lit, "-1") == 0)
        return 0;
    if (minus_zero && strcmp(lit, "-0") == 0) {
        *out = 0;
        *random = false;
        return 0;
    }
    if (lit[0] == '-')
        return svc_fields_refuse(f, name, it, expected);
    uint64_t v = 0;
    for (const char *p = lit; *p; p++) {
        const uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return svc_fields_refuse(f, name, it, expected);
        v = v * 10 + d;
    }
    *out = v;
    *random = false;
    return 0;
}

int svc_fields_base64(const char *field, const char *s, uint8_t **out, size_t *out_len, char *err,
                      size_t err_size)
{
    *out = NULL;
    *out_len = 0;
    size_t len = strlen(s);
    if (strncmp(s, "data:", 5) == 0) {
        const char *comma = memchr(s, ',', len);
        if (!comma) {
            snprintf(err, err_size, "%s: a data URL needs a ',' before its data", field);
            return -1;
        }
        const char *semi = memchr(s, ';', (size_t)(comma - s));
        if (!semi || (size_t)(comma - semi) != 7 || strncmp(semi, ";base64", 7) != 0) {
            snprintf(err, err_size,
                     "%s: only base64 data URLs are accepted (data:...;base64,...)", field);
            return -1;
        }
        len -= (size_t)(comma + 1 - s);
        s = comma + 1;
    }
    if (len == 0) {
        snprintf(err, err_size, "%s is empty", field);
        return -1;
    }
    char why[128];
    if (!svc_base64_decode(s, len, out, out_len, why, sizeof why)) {
        snprintf(err, err_size, "%s is not valid base64: %s", field, why);
        return -1;
    }
    return 0;
}
