/*
 * text/unicode.c - UTF-8, table lookups, Python's str.lower() and NFC.
 *
 * Why this shape: the tokenizer works on arrays of code points (as Python
 * works on str), so every step can be written as the Python it mirrors.
 * Lookups bisect the generated range tables in text/unicode_tables.c; the
 * hot paths (ASCII) short-circuit before bisecting.  NFC follows UAX #15:
 * full canonical decomposition, canonical ordering, then primary
 * composition, with Hangul handled arithmetically; text below U+0300 is
 * already NFC and skips all of it.
 */
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int tsr_u32_push(tsr_u32buf *b, uint32_t cp)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof(uint32_t))
            return tsr_errorf(TSR_ERR_NOMEM, "text: code point buffer overflow");
        uint32_t *v = realloc(b->v, cap * sizeof(uint32_t));
        if (!v)
            return tsr_errorf(TSR_ERR_NOMEM, "text: out of memory");
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = cp;
    return 0;
}

void tsr_u32_free(tsr_u32buf *b)
{
    free(b->v);
    b->v = NULL;
    b->n = b->cap = 0;
}

int tsr_utf8_decode(const char *str, size_t len, tsr_u32buf *out, const char *what)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        uint32_t c = s[i];
        size_t need;
        uint32_t min;
        if (c < 0x80) {
            TSR_TRY(tsr_u32_push(out, c));
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            need = 1, min = 0x80, c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            need = 2, min = 0x800, c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            need = 3, min = 0x10000, c &= 0x07;
        } else {
            return tsr_errorf(TSR_ERR_INVALID, "%s: invalid UTF-8 at byte %zu", what, i);
        }
        if (len - i <= need)
            return tsr_errorf(TSR_ERR_INVALID, "%s: truncated UTF-8 at byte %zu", what, i);
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return tsr_errorf(TSR_ERR_INVALID, "%s: invalid UTF-8 at byte %zu", what, i);
            c = (c << 6) | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return tsr_errorf(TSR_ERR_INVALID, "%s: invalid UTF-8 at byte %zu", what, i);
        TSR_TRY(tsr_u32_push(out, c));
        i += need + 1;
    }
    return 0;
}

int tsr_utf8_put(uint32_t cp, char *buf)
{
    unsigned char *b = (unsigned char *)buf;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | (cp >> 18));
    b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

int tsr_u32_push_utf8(tsr_u32buf *b, const char *s)
{
    return tsr_utf8_decode(s, strlen(s), b, "table");
}

/* Both range tables start with {lo, hi}, sorted and disjoint. */
static int cmp_range(const void *key, const void *entry)
{
    const uint32_t cp = *(const uint32_t *)key;
    const uint32_t *lohi = entry; /* the first two uint32_t members */
    return cp < lohi[0] ? -1 : cp > lohi[1];
}

bool tsr_u_in(const tsr_u_range *r, size_t n, uint32_t cp)
{
    return bsearch(&cp, r, n, sizeof *r, cmp_range) != NULL;
}

uint32_t tsr_u_vlookup(const tsr_u_vrange *r, size_t n, uint32_t cp)
{
    const tsr_u_vrange *hit = bsearch(&cp, r, n, sizeof *r, cmp_range);
    return hit ? hit->v : 0;
}

/* Both table kinds start with the code point they are sorted by. */
static int cmp_cp(const void *key, const void *entry)
{
    const uint32_t a = *(const uint32_t *)key, b = *(const uint32_t *)entry;
    return (a > b) - (a < b);
}

const tsr_u_smap *tsr_u_smap_find(const tsr_u_smap *m, size_t n, uint32_t cp)
{
    return bsearch(&cp, m, n, sizeof *m, cmp_cp);
}

static const tsr_u_map *map_find(const tsr_u_map *m, size_t n, uint32_t cp)
{
    return bsearch(&cp, m, n, sizeof *m, cmp_cp);
}


int tsr_u_clip_cls(uint32_t cp)
{
    /* Table holds class XOR 4 (4 = punctuation/other is the default). */
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
            return 1;
        if (cp >= '0' && cp <= '9')
            return 2;
        if (cp == ' ')
            return 0;
    }
    return (int)(tsr_u_vlookup(tsr_u_clip_class, tsr_u_clip_class_n, cp) ^ 4u);
}

int tsr_uf_clip_cls(uint32_t cp)
{
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
            return 1;
        if (cp >= '0' && cp <= '9')
            return 2;
        if (cp == ' ')
            return 0;
    }
    return (int)(tsr_u_vlookup(tsr_uf_clip_class, tsr_uf_clip_class_n, cp) ^ 4u);
}

bool tsr_uf_space_cp(uint32_t cp)
{
    if (cp == ' ')
        return true;
    if (cp > ' ' && cp < 0x80)
        return false;
    return tsr_u_in(tsr_uf_space, tsr_uf_space_n, cp);
}

uint32_t tsr_u_fold_to_ascii(uint32_t cp)
{
    if (cp < 0x80)
        return ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') ? (cp | 0x20) : 0;
    const tsr_u_map *m = map_find(tsr_u_fold_ascii, tsr_u_fold_ascii_n, cp);
    return m ? m->to : 0;
}

/* ---- str.lower() ---- */

static bool cased(uint32_t cp)
{
    return tsr_u_in(tsr_u_cased, tsr_u_cased_n, cp);
}

static bool case_ignorable(uint32_t cp)
{
    return tsr_u_in(tsr_u_case_ignorable, tsr_u_case_ignorable_n, cp);
}

/* CPython's handle_capital_sigma: Final_Sigma context test. */
static uint32_t lower_sigma(const uint32_t *s, size_t n, size_t i)
{
    size_t j = i;
    bool final = false;
    while (j > 0 && case_ignorable(s[j - 1]))
        j--;
    final = j > 0 && cased(s[j - 1]);
    if (final) {
        j = i + 1;
        while (j < n && case_ignorable(s[j]))
            j++;
        final = j == n || !cased(s[j]);
    }
    return final ? 0x3C2 : 0x3C3;
}

int tsr_u_str_lower(const uint32_t *in, size_t n, tsr_u32buf *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t c = in[i];
        if (c < 0x80) {
            TSR_TRY(tsr_u32_push(out, (c >= 'A' && c <= 'Z') ? c + 32 : c));
            continue;
        }
        if (c == 0x3A3) {
            TSR_TRY(tsr_u32_push(out, lower_sigma(in, n, i)));
            continue;
        }
        const tsr_u_map *m = map_find(tsr_u_lower, tsr_u_lower_n, c);
        if (m) {
            TSR_TRY(tsr_u32_push(out, m->to));
            continue;
        }
        const tsr_u_smap *sm = tsr_u_smap_find(tsr_u_lower_multi, tsr_u_lower_multi_n, c);
        if (sm) {
            TSR_TRY(tsr_u32_push_utf8(out, sm->to));
            continue;
        }
        TSR_TRY(tsr_u32_push(out, c));
    }
    return 0;
}

int tsr_uf_str_lower(const uint32_t *in, size_t n, tsr_u32buf *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t c = in[i];
        if (c < 0x80) {
            TSR_TRY(tsr_u32_push(out, (c >= 'A' && c <= 'Z') ? c + 32 : c));
            continue;
        }
        const tsr_u_map *m = map_find(tsr_uf_lower, tsr_uf_lower_n, c);
        if (m) {
            TSR_TRY(tsr_u32_push(out, m->to));
            continue;
        }
        const tsr_u_smap *sm = tsr_u_smap_find(tsr_uf_lower_multi, tsr_uf_lower_multi_n, c);
        if (sm) {
            TSR_TRY(tsr_u32_push_utf8(out, sm->to));
            continue;
        }
        TSR_TRY(tsr_u32_push(out, c));
    }
    return 0;
}

/* ---- NFC ---- */

/* One engine's normalisation data: Python's unicodedata or the tokenizers
 * library's (the algorithm is the same). */
typedef struct nfc_data {
    const tsr_u_vrange *ccc;
    size_t ccc_n;
    const tsr_u_decomp *decomp;
    size_t decomp_n;
    const tsr_u_comp *comp;
    size_t comp_n;
} nfc_data;

enum {
    HANGUL_S = 0xAC00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11A7,
    HANGUL_LN = 19, HANGUL_VN = 21, HANGUL_TN = 28,
    HANGUL_NN = HANGUL_VN * HANGUL_TN, HANGUL_SN = HANGUL_LN * HANGUL_NN,
};

static uint32_t ccc_of(const nfc_data *u, uint32_t cp)
{
    return cp < 0x300 ? 0 : tsr_u_vlookup(u->ccc, u->ccc_n, cp);
}

static const tsr_u_decomp *decomp_find(const nfc_data *u, uint32_t cp)
{
    size_t lo = 0, hi = u->decomp_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < u->decomp[mid].cp)
            hi = mid;
        else if (cp > u->decomp[mid].cp)
            lo = mid + 1;
        else
            return &u->decomp[mid];
    }
    return NULL;
}

static int decompose(const nfc_data *u, uint32_t cp, tsr_u32buf *out, int depth)
{
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_SN) {
        uint32_t s = cp - HANGUL_S;
        TSR_TRY(tsr_u32_push(out, HANGUL_L + s / HANGUL_NN));
        TSR_TRY(tsr_u32_push(out, HANGUL_V + (s % HANGUL_NN) / HANGUL_TN));
        if (s % HANGUL_TN)
            TSR_TRY(tsr_u32_push(out, HANGUL_T + s % HANGUL_TN));
        return 0;
    }
    const tsr_u_decomp *d = cp >= 0xC0 && depth < 8 ? decomp_find(u, cp) : NULL;
    if (!d)
        return tsr_u32_push(out, cp);
    TSR_TRY(decompose(u, d->a, out, depth + 1));
    if (d->b)
        TSR_TRY(decompose(u, d->b, out, depth + 1));
    return 0;
}

static uint32_t compose_pair(const nfc_data *u, uint32_t a, uint32_t b)
{
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_LN && b >= HANGUL_V && b < HANGUL_V + HANGUL_VN)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_VN + (b - HANGUL_V)) * HANGUL_TN;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SN && (a - HANGUL_S) % HANGUL_TN == 0 &&
        b > HANGUL_T && b < HANGUL_T + HANGUL_TN)
        return a + (b - HANGUL_T);
    size_t lo = 0, hi = u->comp_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const tsr_u_comp *c = &u->comp[mid];
        if (a < c->a || (a == c->a && b < c->b))
            hi = mid;
        else if (a > c->a || b > c->b)
            lo = mid + 1;
        else
            return c->c;
    }
    return 0;
}

static int nfc(const nfc_data *u, const uint32_t *in, size_t n, tsr_u32buf *out)
{
    bool simple = true;
    for (size_t i = 0; i < n && simple; i++)
        simple = in[i] < 0x300;
    if (simple) {
        for (size_t i = 0; i < n; i++)
            TSR_TRY(tsr_u32_push(out, in[i]));
        return 0;
    }
    tsr_u32buf d = {0};
    int rc = 0;
    for (size_t i = 0; i < n; i++)
        TSR_CHECK_GOTO(rc, decompose(u, in[i], &d, 0), cleanup);
    /* Canonical ordering: stable insertion sort of each run of marks. */
    for (size_t i = 1; i < d.n; i++) {
        uint32_t c = d.v[i], cc = ccc_of(u, c);
        if (cc == 0)
            continue;
        size_t j = i;
        while (j > 0 && ccc_of(u, d.v[j - 1]) > cc) {
            d.v[j] = d.v[j - 1];
            j--;
        }
        d.v[j] = c;
    }
    /* Composition, in place: d.v[0..w) is the output so far. */
    size_t w = 0;
    long starter = -1;
    uint32_t last_cc = 0;
    for (size_t i = 0; i < d.n; i++) {
        uint32_t c = d.v[i], cc = ccc_of(u, c);
        if (starter >= 0) {
            bool adjacent = (size_t)starter == w - 1;
            if (adjacent || (last_cc != 0 && last_cc < cc)) {
                uint32_t comp = compose_pair(u, d.v[starter], c);
                if (comp) {
                    d.v[starter] = comp;
                    continue;
                }
            }
        }
        if (cc == 0) {
            starter = (long)w;
            last_cc = 0;
        } else {
            last_cc = cc;
        }
        d.v[w++] = c;
    }
    for (size_t i = 0; i < w; i++)
        TSR_CHECK_GOTO(rc, tsr_u32_push(out, d.v[i]), cleanup);
cleanup:
    tsr_u32_free(&d);
    return rc;
}

int tsr_u_nfc(const uint32_t *in, size_t n, tsr_u32buf *out)
{
    const nfc_data u = {tsr_u_ccc, tsr_u_ccc_n, tsr_u_decomp_tab, tsr_u_decomp_tab_n,
                        tsr_u_comp_tab, tsr_u_comp_tab_n};
    return nfc(&u, in, n, out);
}

int tsr_uf_nfc(const uint32_t *in, size_t n, tsr_u32buf *out)
{
    const nfc_data u = {tsr_uf_ccc, tsr_uf_ccc_n, tsr_uf_decomp_tab, tsr_uf_decomp_tab_n,
                        tsr_uf_comp_tab, tsr_uf_comp_tab_n};
    return nfc(&u, in, n, out);
}
