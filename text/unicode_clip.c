/*
 * text/unicode_clip.c - CLIPTokenizer._tokenize before BPE:
 *
 *     text = whitespace_clean(ftfy.fix_text(text)).lower()
 *     re.findall(r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|"
 *                r"[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+", text, IGNORECASE)
 *
 * Why a hand-written scanner instead of a regex engine: the pattern is a
 * fixed alternation whose branches are literals and single-class runs, so
 * "first alternative that matches at this position" is a few comparisons.
 * The classes come from the `regex` module itself (text/unicode_tables.c),
 * IGNORECASE included: literal letters also match the non-ASCII code points
 * that fold to them (U+017F long s, U+212A Kelvin, U+0130).  Code points no
 * branch matches (whitespace, U+0345) are skipped, as findall skips them.
 */
#include "text/unicode_clip.h"

#include "core/error.h"
#include "text/unicode_ftfy.h"
#include <string.h>

static bool rx_space(uint32_t c)
{
    if (c == ' ')
        return true;
    if (c > ' ' && c < 0x80)
        return false;
    return tsr_u_in(tsr_u_rx_space, tsr_u_rx_space_n, c);
}

static bool py_space(uint32_t c)
{
    if (c == ' ')
        return true;
    if (c > ' ' && c < 0x80)
        return false;
    return tsr_u_in(tsr_u_py_space, tsr_u_py_space_n, c);
}

int tsr_clip_clean(const uint32_t *s, size_t n, tsr_u32buf *out)
{
    tsr_u32buf fixed = {0}, ws = {0};
    int rc = 0;
    TSR_CHECK_GOTO(rc, tsr_ftfy_fix_text(s, n, &fixed), cleanup);
    /* re.sub(r"\s+", " ", text) */
    for (size_t i = 0; i < fixed.n;) {
        if (rx_space(fixed.v[i])) {
            while (i < fixed.n && rx_space(fixed.v[i]))
                i++;
            TSR_CHECK_GOTO(rc, tsr_u32_push(&ws, ' '), cleanup);
        } else {
            TSR_CHECK_GOTO(rc, tsr_u32_push(&ws, fixed.v[i++]), cleanup);
        }
    }
    /* .strip() */
    size_t a = 0, b = ws.n;
    while (a < b && py_space(ws.v[a]))
        a++;
    while (b > a && py_space(ws.v[b - 1]))
        b--;
    if (b > a)
        TSR_CHECK_GOTO(rc, tsr_u_str_lower(ws.v + a, b - a, out), cleanup);
cleanup:
    tsr_u32_free(&fixed);
    tsr_u32_free(&ws);
    return rc;
}

/* Case-insensitive match of an ASCII literal at s[i]. */
static bool lit(const uint32_t *s, size_t n, size_t i, const char *l)
{
    for (; *l; l++, i++) {
        if (i >= n)
            return false;
        uint32_t c = (unsigned char)*l;
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') {
            if (tsr_u_fold_to_ascii(s[i]) != c)
                return false;
        } else if (s[i] != c) {
            return false;
        }
    }
    return true;
}

size_t tsr_clip_next_token(const uint32_t *s, size_t n, size_t *pos, size_t *start)
{
    static const char *const lits[] = {"<|startoftext|>", "<|endoftext|>", "'s", "'t", "'re",
                                       "'ve", "'m", "'ll", "'d"};
    for (size_t i = *pos; i < n; i++) {
        uint32_t c = s[i];
        if (c == '<' || c == '\'') {
            for (size_t k = 0; k < sizeof lits / sizeof lits[0]; k++) {
                size_t len = strlen(lits[k]);
                if (lit(s, n, i, lits[k])) {
                    *start = i;
                    *pos = i + len;
                    return len;
                }
            }
        }
        int cls = tsr_u_clip_cls(c);
        int bit = (cls & 1) ? 1 : (cls & 2) ? 2 : (cls & 4) ? 4 : 0;
        if (!bit)
            continue;
        size_t j = i + 1;
        if (bit != 2)
            while (j < n && (tsr_u_clip_cls(s[j]) & bit))
                j++;
        *start = i;
        *pos = j;
        return j - i;
    }
    *pos = n;
    return 0;
}

/* ---- the default mode: transformers 5 (tokenizers) ---- */

int tsr_clip_normalize_fast(const uint32_t *s, size_t n, tsr_u32buf *out)
{
    tsr_u32buf nfc = {0}, ws = {0};
    int rc = 0;
    TSR_CHECK_GOTO(rc, tsr_uf_nfc(s, n, &nfc), cleanup);
    /* Replace(Regex(r"\s+"), " ") */
    for (size_t i = 0; i < nfc.n;) {
        if (tsr_uf_space_cp(nfc.v[i])) {
            while (i < nfc.n && tsr_uf_space_cp(nfc.v[i]))
                i++;
            TSR_CHECK_GOTO(rc, tsr_u32_push(&ws, ' '), cleanup);
        } else {
            TSR_CHECK_GOTO(rc, tsr_u32_push(&ws, nfc.v[i++]), cleanup);
        }
    }
    TSR_CHECK_GOTO(rc, tsr_uf_str_lower(ws.v, ws.n, out), cleanup);
cleanup:
    tsr_u32_free(&nfc);
    tsr_u32_free(&ws);
    return rc;
}

/* Case-sensitive match of an ASCII literal at s[i]. */
static bool lit_exact(const uint32_t *s, size_t n, size_t i, const char *l)
{
    for (; *l; l++, i++)
        if (i >= n || s[i] != (uint32_t)(unsigned char)*l)
            return false;
    return true;
}

size_t tsr_clip_next_token_fast(const uint32_t *s, size_t n, size_t *pos, size_t *start,
                                bool *special)
{
    static const char *const lits[] = {"<|startoftext|>", "<|endoftext|>", "'s", "'t", "'re",
                                       "'ve", "'m", "'ll", "'d"};
    for (size_t i = *pos; i < n; i++) {
        uint32_t c = s[i];
        if (c == '<' || c == '\'') {
            for (size_t k = 0; k < sizeof lits / sizeof lits[0]; k++) {
                size_t len = strlen(lits[k]);
                if (lit_exact(s, n, i, lits[k])) {
                    *start = i;
                    *pos = i + len;
                    *special = k < 2;
                    return len;
                }
            }
        }
        int cls = tsr_uf_clip_cls(c);
        if (!cls)
            continue;
        size_t j = i + 1;
        if (cls != 2)
            while (j < n && tsr_uf_clip_cls(s[j]) == cls)
                j++;
        *start = i;
        *pos = j;
        *special = false;
        return j - i;
    }
    *pos = n;
    return 0;
}
