/*
 * service/http/multipart.c - see multipart.h.
 *
 * One pass over the body: find the first delimiter ("--boundary" at the
 * start, or after a CRLF), then for each part read its header block (up to
 * the blank line, at most SVC_MP_MAX_HEAD bytes), and its data up to the
 * next "\r\n--boundary".  Searches use memmem (linear), so a hostile body
 * of near-boundaries costs O(length), not O(length x boundary).
 */
#include "multipart.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int fail(char *err, size_t size, int part, const char *what)
{
    snprintf(err, size, "part %d: %s", part, what);
    return -1;
}

static bool is_bchar(unsigned char c)
{
    /* RFC 2046 bcharsnospace plus space (not last) */
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c != 0 && strchr("'()+_,-./:=? ", c) != NULL;
}

int svc_mp_boundary(const char *ct, char *out, size_t size, char *err, size_t err_size)
{
    out[0] = '\0';
    if (!ct) {
        snprintf(err, err_size, "the request has no Content-Type (multipart/form-data expected)");
        return -1;
    }
    while (*ct == ' ' || *ct == '\t')
        ct++;
    static const char mt[] = "multipart/form-data";
    if (strncasecmp(ct, mt, sizeof mt - 1) != 0 ||
        (ct[sizeof mt - 1] != ';' && ct[sizeof mt - 1] != ' ' && ct[sizeof mt - 1] != '\0')) {
        snprintf(err, err_size, "Content-Type must be multipart/form-data, got \"%.60s\"", ct);
        return -1;
    }
    const char *p = ct + sizeof mt - 1;
    while (*p) {
        while (*p == ';' || *p == ' ' || *p == '\t')
            p++;
        const char *key = p;
        while (*p && *p != '=' && *p != ';')
            p++;
        size_t klen = (size_t)(p - key);
        while (klen && (key[klen - 1] == ' ' || key[klen - 1] == '\t'))
            klen--;
        if (*p != '=')
            continue;
        p++;
        char val[SVC_MP_MAX_BOUNDARY + 2];
        size_t vlen = 0;
        bool quoted = *p == '"', bad = false;
        if (quoted) {
            p++;
            while (*p && *p != '"') {
                if (*p == '\\' && p[1])
                    p++;
                if (vlen < sizeof val - 1)
                    val[vlen++] = *p;
                else
                    bad = true;
                p++;
            }
            if (*p != '"')
                bad = true;
            else
                p++;
        } else {
            while (*p && *p != ';' && *p != ' ' && *p != '\t') {
                if (vlen < sizeof val - 1)
                    val[vlen++] = *p;
                else
                    bad = true;
                p++;
            }
        }
        val[vlen] = '\0';
        if (klen == 8 && strncasecmp(key, "boundary", 8) == 0) {
            bool ok = !bad && vlen >= 1 && vlen <= SVC_MP_MAX_BOUNDARY && val[vlen - 1] != ' ';
            for (size_t i = 0; ok && i < vlen; i++)
                ok = is_bchar((unsigned char)val[i]);
            if (!ok || vlen + 1 > size) {
                snprintf(err, err_size, "the multipart boundary must be 1 to %d characters of "
                         "RFC 2046's set", SVC_MP_MAX_BOUNDARY);
                return -1;
            }
            memcpy(out, val, vlen + 1);
            return 0;
        }
    }
    snprintf(err, err_size, "Content-Type multipart/form-data has no boundary parameter");
    return -1;
}

/* A header parameter's value (token or quoted-string) starting at *pp,
 * within [*pp, end): malloc'd, NULL on a NUL byte, bad quoting or no memory. */
static char *param_value(const char **pp, const char *end)
{
    const char *p = *pp;
    size_t cap = (size_t)(end - p) + 1, n = 0;
    char *v = malloc(cap);
    if (!v)
        return NULL;
    if (p < end && *p == '"') {
        p++;
        while (p < end && *p != '"') {
            if (*p == '\\' && p + 1 < end)
                p++;
            if (*p == '\0' || *p == '\r' || *p == '\n') {
                free(v);
                return NULL;
            }
            v[n++] = *p++;
        }
        if (p >= end) {
            free(v);
            return NULL;
        }
        p++;
    } else {
        while (p < end && *p != ';' && *p != ' ' && *p != '\t') {
            if (*p == '\0') {
                free(v);
                return NULL;
            }
            v[n++] = *p++;
        }
    }
    v[n] = '\0';
    *pp = p;
    return v;
}

/* Content-Disposition: form-data; name="..."; filename="..." */
static int parse_disposition(const char *p, const char *end, svc_mp_part *part)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    static const char fd[] = "form-data";
    if ((size_t)(end - p) < sizeof fd - 1 || strncasecmp(p, fd, sizeof fd - 1) != 0)
        return -1;
    p += sizeof fd - 1;
    while (p < end) {
        while (p < end && (*p == ';' || *p == ' ' || *p == '\t'))
            p++;
        const char *key = p;
        while (p < end && *p != '=' && *p != ';')
            p++;
        size_t klen = (size_t)(p - key);
        while (klen && (key[klen - 1] == ' ' || key[klen - 1] == '\t'))
            klen--;
        if (p >= end || *p != '=')
            continue;
        p++;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        char *v = param_value(&p, end);
        if (!v)
            return -1;
        char **slot = NULL;
        if (klen == 4 && strncasecmp(key, "name", 4) == 0)
            slot = &part->name;
        else if (klen == 8 && strncasecmp(key, "filename", 8) == 0)
            slot = &part->filename;
        if (slot) {
            free(*slot);
            *slot = v;
        } else {
            free(v);
        }
    }
    return part->name ? 0 : -1;
}

static int parse_headers(const char *p, const char *end, int index, svc_mp_part *part, char *err,
                         size_t err_size)
{
    while (p < end) {
        const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        const char *le = eol ? eol : end;
        if (*p == ' ' || *p == '\t')
            return fail(err, err_size, index, "folded header lines are not "
                        "supported");
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (!colon || colon == p)
            return fail(err, err_size, index, "a header line has no name");
        size_t nlen = (size_t)(colon - p);
        const char *v = colon + 1;
        if (nlen == 19 && strncasecmp(p, "Content-Disposition", 19) == 0) {
            if (parse_disposition(v, le, part) < 0)
                return fail(err, err_size, index,
                            "Content-Disposition must be form-data with a name");
        } else if (nlen == 12 && strncasecmp(p, "Content-Type", 12) == 0) {
            while (v < le && (*v == ' ' || *v == '\t'))
                v++;
            size_t vl = (size_t)(le - v);
            if (memchr(v, '\0', vl))
                return fail(err, err_size, index, "Content-Type holds a NUL byte");
            free(part->content_type);
            part->content_type = strndup(v, vl);
            if (!part->content_type)
                return fail(err, err_size, index, "out of memory");
        }
        p = eol ? eol + 2 : end;
    }
    if (!part->name)
        return fail(err, err_size, index, "no Content-Disposition header");
    return 0;
}

static void part_clear(svc_mp_part *p)
{
    free(p->name);
    free(p->filename);
    free(p->content_type);
    memset(p, 0, sizeof *p);
}

void svc_mp_free(svc_mp_form *form)
{
    if (!form)
        return;
    for (int i = 0; i < form->n; i++)
        part_clear(&form->parts[i]);
    free(form->parts);
    form->parts = NULL;
    form->n = 0;
}

int svc_mp_parse(const uint8_t *body, size_t len, const char *boundary, svc_mp_form *form,
                 char *err, size_t err_size)
{
    memset(form, 0, sizeof *form);
    size_t bl = strlen(boundary);
    if (bl < 1 || bl > SVC_MP_MAX_BOUNDARY) {
        snprintf(err, err_size, "the multipart boundary must be 1 to %d characters",
                 SVC_MP_MAX_BOUNDARY);
        return -1;
    }
    /* "\r\n--" boundary */
    char delim[SVC_MP_MAX_BOUNDARY + 5];
    memcpy(delim, "\r\n--", 4);
    memcpy(delim + 4, boundary, bl);
    size_t dl = bl + 4;
    const char *b = (const char *)body, *end = b + len, *p;
    if (len >= dl - 2 && memcmp(b, delim + 2, dl - 2) == 0) {
        p = b + dl - 2;
    } else {
        const char *f = memmem(b, len, delim, dl);
        if (!f) {
            snprintf(err, err_size, "the body holds no multipart boundary line (--%s)", boundary);
            return -1;
        }
        p = f + dl;
    }
    form->parts = calloc(SVC_MP_MAX_PARTS, sizeof *form->parts);
    if (!form->parts) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    for (;;) {
        int index = form->n + 1;
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return 0; /* the close delimiter; the epilogue is ignored */
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') {
            svc_mp_free(form);
            return fail(err, err_size, index,
                        end - p < 2 ? "the body ends after a boundary line (no closing "
                                      "boundary)"
                                    : "the boundary line does not end in CRLF");
        }
        p += 2;
        if (form->n == SVC_MP_MAX_PARTS) {
            svc_mp_free(form);
            snprintf(err, err_size, "more than %d parts", SVC_MP_MAX_PARTS);
            return -1;
        }
        const char *hs = p, *he, *ds;
        if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') {
            he = p;
            ds = p + 2;
        } else {
            size_t room = (size_t)(end - p);
            if (room > SVC_MP_MAX_HEAD + 4)
                room = SVC_MP_MAX_HEAD + 4;
            const char *blank = memmem(p, room, "\r\n\r\n", 4);
            if (!blank) {
                svc_mp_free(form);
                return fail(err, err_size, index,
                            (size_t)(end - p) > SVC_MP_MAX_HEAD + 4
                                ? "headers longer than 8192 bytes"
                                : "the headers do not end (no blank line)");
            }
            he = blank;
            ds = blank + 4;
        }
        svc_mp_part *part = &form->parts[form->n];
        form->n++;
        if (parse_headers(hs, he, index, part, err, err_size) < 0) {
            svc_mp_free(form);
            return -1;
        }
        const char *de = memmem(ds, (size_t)(end - ds), delim, dl);
        if (!de) {
            svc_mp_free(form);
            return fail(err, err_size, index, "the body ends before its closing boundary");
        }
        part->data = (const uint8_t *)ds;
        part->len = (size_t)(de - ds);
        p = de + dl;
    }
}

const svc_mp_part *svc_mp_find(const svc_mp_form *form, const char *name, int nth)
{
    for (int i = 0; i < form->n; i++)
        if (strcmp(form->parts[i].name, name) == 0 && nth-- == 0)
            return &form->parts[i];
    return NULL;
}

int svc_mp_count(const svc_mp_form *form, const char *name)
{
    int n = 0;
    for (int i = 0; i < form->n; i++)
        n += strcmp(form->parts[i].name, name) == 0;
    return n;
}
