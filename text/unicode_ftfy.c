/*
 * text/unicode_ftfy.c - the subset of ftfy.fix_text (6.3.1, default config)
 * that CLIPTokenizer applies to prompts, on code point arrays.
 *
 * Why a subset: fix_text is a loop of independent fixers run to a fixed
 * point, per line.  Every fixer that can change ordinary text is here, in
 * ftfy's order: unescape_html (in "auto" mode: off from the first line that
 * contains '<'), fix_c1_controls, fix_latin_ligatures, fix_character_width,
 * uncurl_quotes, fix_line_breaks, remove_terminal_escapes,
 * remove_control_chars and NFC.  fix_surrogates cannot apply (input is valid
 * UTF-8).  NOT implemented: fix_encoding, ftfy's mojibake detector and
 * repair (is_bad / re-decoding as Latin-1, cp1252, ...); text that ftfy
 * judges to be mojibake (e.g. "Ã©" for "é") keeps its characters here.
 * docs/prompts.md lists this difference.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/unicode.h"
#include "text/unicode_ftfy.h"

#define FTFY_MAX_SEGMENT 1000000 /* config.max_decode_length */

static bool ascii_alnum(uint32_t c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

static int hexval(uint32_t c)
{
    if (c >= '0' && c <= '9')
        return (int)(c - '0');
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
        return (int)((c | 0x20) - 'a' + 10);
    return -1;
}

static const tsr_u_entity *entity_find(const char *name)
{
    size_t lo = 0, hi = tsr_u_entities_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, tsr_u_entities[mid].name);
        if (c < 0)
            hi = mid;
        else if (c > 0)
            lo = mid + 1;
        else
            return &tsr_u_entities[mid];
    }
    return NULL;
}

/* html.unescape of a whole "&#...;" reference known to match
 * &#(\d+|[xX][0-9a-fA-F]+);  Appends the result. */
static int numeric_ref(const uint32_t *body, size_t n, tsr_u32buf *out, bool *has_semicolon)
{
    uint64_t num = 0;
    bool big = false;
    size_t i = 0;
    int base = 10;
    if (body[0] == 'x' || body[0] == 'X')
        base = 16, i = 1;
    for (; i < n; i++) {
        int v = base == 16 ? hexval(body[i]) : (int)(body[i] - '0');
        num = num * (uint64_t)base + (uint64_t)v;
        if (num > 0x10FFFF)
            big = true, num = 0x110000;
    }
    *has_semicolon = false;
    if (!big) {
        const tsr_u_smap *m =
            tsr_u_smap_find(tsr_u_html_invalid_charref, tsr_u_html_invalid_charref_n, (uint32_t)num);
        if (m)
            return tsr_u32_push_utf8(out, m->to);
    }
    if (big || (num >= 0xD800 && num <= 0xDFFF))
        return tsr_u32_push(out, 0xFFFD);
    if (tsr_u_in(tsr_u_html_invalid_cp, tsr_u_html_invalid_cp_n, (uint32_t)num))
        return 0;
    *has_semicolon = num == ';';
    return tsr_u32_push(out, (uint32_t)num);
}

/* ftfy.fixes.unescape_html: HTML_ENTITY_RE.sub(_unescape_fixup, text). */
static int unescape_html(const uint32_t *s, size_t n, tsr_u32buf *out)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] != '&') {
            TSR_TRY(tsr_u32_push(out, s[i++]));
            continue;
        }
        size_t j = i + 1;
        bool hash = j < n && s[j] == '#';
        if (hash)
            j++;
        size_t k = j;
        while (k < n && ascii_alnum(s[k]) && k - j < 25)
            k++;
        size_t run = k - j;
        if (run < 1 || run > 24 || k >= n || s[k] != ';') {
            TSR_TRY(tsr_u32_push(out, s[i++]));
            continue;
        }
        /* Matched s[i..k]. */
        size_t mlen = k + 1 - i;
        char name[32];
        for (size_t t = 0; t < mlen; t++)
            name[t] = (char)s[i + t];
        name[mlen] = '\0';
        const tsr_u_entity *e = entity_find(name);
        bool keep = true;
        if (e) {
            TSR_TRY(tsr_u32_push_utf8(out, e->utf8));
            keep = false;
        } else if (hash) {
            const uint32_t *body = s + j;
            bool valid = true;
            if (body[0] == 'x' || body[0] == 'X') {
                valid = run >= 2;
                for (size_t t = 1; t < run && valid; t++)
                    valid = hexval(body[t]) >= 0;
            } else {
                for (size_t t = 0; t < run && valid; t++)
                    valid = body[t] >= '0' && body[t] <= '9';
            }
            if (valid) {
                size_t mark = out->n;
                bool semi;
                TSR_TRY(numeric_ref(body, run, out, &semi));
                if (semi)
                    out->n = mark; /* ";" in the result: ftfy keeps the text */
                else
                    keep = false;
            }
        }
        if (keep)
            for (size_t t = i; t <= k; t++)
                TSR_TRY(tsr_u32_push(out, s[t]));
        i = k + 1;
    }
    return 0;
}

static int translate(const uint32_t *s, size_t n, tsr_u32buf *out, const tsr_u_smap *m,
                     size_t mn, uint32_t lo, uint32_t hi)
{
    for (size_t i = 0; i < n; i++) {
        const tsr_u_smap *e = s[i] >= lo && s[i] <= hi ? tsr_u_smap_find(m, mn, s[i]) : NULL;
        if (e)
            TSR_TRY(tsr_u32_push_utf8(out, e->to));
        else
            TSR_TRY(tsr_u32_push(out, s[i]));
    }
    return 0;
}

static bool re_digit(uint32_t c)
{
    return (c >= '0' && c <= '9') || (c >= 0x80 && tsr_u_vlookup(tsr_u_re_digit, tsr_u_re_digit_n, c));
}

static int simple_fixes(const uint32_t *s, size_t n, tsr_u32buf *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t c = s[i];
        /* uncurl_quotes */
        if (c >= 0x201C && c <= 0x201F)
            c = '"';
        else if (c == 0x2BC || (c >= 0x2018 && c <= 0x201B))
            c = '\'';
        TSR_TRY(tsr_u32_push(out, c));
    }
    return 0;
}

static int line_breaks(const uint32_t *s, size_t n, tsr_u32buf *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t c = s[i];
        if (c == '\r' && i + 1 < n && s[i + 1] == '\n')
            continue; /* "\r\n" -> "\n": emit the "\n" next */
        if (c == '\r' || c == 0x2028 || c == 0x2029 || c == 0x85)
            c = '\n';
        TSR_TRY(tsr_u32_push(out, c));
    }
    return 0;
}

/* remove_terminal_escapes (\033\[(\d|;)*[a-zA-Z]) and remove_control_chars. */
static int strip_escapes_controls(const uint32_t *s, size_t n, tsr_u32buf *out, bool controls)
{
    for (size_t i = 0; i < n; i++) {
        if (!controls && s[i] == 0x1B && i + 1 < n && s[i + 1] == '[') {
            size_t j = i + 2;
            while (j < n && (re_digit(s[j]) || s[j] == ';'))
                j++;
            if (j < n && (s[j] | 0x20) >= 'a' && (s[j] | 0x20) <= 'z') {
                i = j;
                continue;
            }
        }
        if (controls && tsr_u_in(tsr_u_ftfy_control, tsr_u_ftfy_control_n, s[i]))
            continue;
        TSR_TRY(tsr_u32_push(out, s[i]));
    }
    return 0;
}

static bool same(const tsr_u32buf *a, const tsr_u32buf *b)
{
    return a->n == b->n && (a->n == 0 || memcmp(a->v, b->v, a->n * sizeof(uint32_t)) == 0);
}

/* One segment, fixers to a fixed point.  `seg` is consumed (swapped). */
static int fix_segment(tsr_u32buf *seg, bool unescape, tsr_u32buf *out)
{
    tsr_u32buf a = {0}, b = {0}, orig = {0};
    int rc = 0;
    a = *seg;
    *seg = (tsr_u32buf){0};
    for (int iter = 0; iter < 64; iter++) {
        orig.n = 0;
        for (size_t i = 0; i < a.n; i++)
            TSR_CHECK_GOTO(rc, tsr_u32_push(&orig, a.v[i]), cleanup);
#define STEP(call)                                           \
    do {                                                     \
        b.n = 0;                                             \
        TSR_CHECK_GOTO(rc, (call), cleanup);                 \
        tsr_u32buf t_ = a;                                   \
        a = b;                                               \
        b = t_;                                              \
    } while (0)
        if (unescape)
            STEP(unescape_html(a.v, a.n, &b));
        STEP(translate(a.v, a.n, &b, tsr_u_ftfy_c1, tsr_u_ftfy_c1_n, 0x80, 0x9F));
        STEP(translate(a.v, a.n, &b, tsr_u_ftfy_ligature, tsr_u_ftfy_ligature_n, 0x132, 0xFB06));
        STEP(translate(a.v, a.n, &b, tsr_u_ftfy_width, tsr_u_ftfy_width_n, 0x3000, 0xFFEF));
        STEP(simple_fixes(a.v, a.n, &b));
        STEP(line_breaks(a.v, a.n, &b));
        STEP(strip_escapes_controls(a.v, a.n, &b, false));
        STEP(strip_escapes_controls(a.v, a.n, &b, true));
        STEP(tsr_u_nfc(a.v, a.n, &b));
#undef STEP
        if (same(&a, &orig))
            break;
    }
    for (size_t i = 0; i < a.n; i++)
        TSR_CHECK_GOTO(rc, tsr_u32_push(out, a.v[i]), cleanup);
cleanup:
    tsr_u32_free(&a);
    tsr_u32_free(&b);
    tsr_u32_free(&orig);
    return rc;
}

int tsr_ftfy_fix_text(const uint32_t *s, size_t n, tsr_u32buf *out)
{
    bool unescape = true; /* "auto" */
    size_t pos = 0;
    int rc = 0;
    tsr_u32buf seg = {0};
    while (pos < n) {
        size_t end = pos;
        while (end < n && s[end] != '\n')
            end++;
        end = end < n ? end + 1 : n;
        if (end - pos > FTFY_MAX_SEGMENT)
            end = pos + FTFY_MAX_SEGMENT;
        seg.n = 0;
        for (size_t i = pos; i < end; i++) {
            TSR_CHECK_GOTO(rc, tsr_u32_push(&seg, s[i]), cleanup);
            if (s[i] == '<')
                unescape = false;
        }
        TSR_CHECK_GOTO(rc, fix_segment(&seg, unescape, out), cleanup);
        pos = end;
    }
cleanup:
    tsr_u32_free(&seg);
    return rc;
}
