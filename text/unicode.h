/*
 * text/unicode.h - the Unicode services the CLIP tokenizer and the prompt
 * parser need: UTF-8 decoding, character classes, Python's str.lower(),
 * NFC and the ftfy fix tables.
 *
 * Why tables measured from Python: transformers' CLIPTokenizer runs on the
 * `regex` module, CPython's str methods, unicodedata and ftfy, each with its
 * own Unicode version and quirks (IGNORECASE folding, final sigma,
 * U+0130).  tools/reference/gen_unicode_tables.py measures each property
 * from the engine that uses it and writes text/unicode_tables.c as sorted
 * ranges; the lookups here bisect them.  Internal to text/.
 */
#ifndef TSR_TEXT_UNICODE_H
#define TSR_TEXT_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tsr_u_range {
    uint32_t lo, hi;
} tsr_u_range;
typedef struct tsr_u_vrange {
    uint32_t lo, hi;
    uint32_t v;
} tsr_u_vrange;
typedef struct tsr_u_map {
    uint32_t cp, to;
} tsr_u_map;
typedef struct tsr_u_smap {
    uint32_t cp;
    const char *to; /* UTF-8 */
} tsr_u_smap;
typedef struct tsr_u_decomp {
    uint32_t cp, a, b; /* b == 0: singleton */
} tsr_u_decomp;
typedef struct tsr_u_comp {
    uint32_t a, b, c;
} tsr_u_comp;
typedef struct tsr_u_entity {
    const char *name; /* "&amp;" */
    const char *utf8;
} tsr_u_entity;

#define TSR_U_TABLE(type, name) \
    extern const type name[];   \
    extern const size_t name##_n;
TSR_U_TABLE(tsr_u_vrange, tsr_u_clip_class)
TSR_U_TABLE(tsr_u_range, tsr_u_rx_space)
TSR_U_TABLE(tsr_u_range, tsr_u_py_space)
TSR_U_TABLE(tsr_u_range, tsr_u_re_space)
TSR_U_TABLE(tsr_u_range, tsr_u_re_word)
TSR_U_TABLE(tsr_u_vrange, tsr_u_re_digit)
TSR_U_TABLE(tsr_u_map, tsr_u_fold_ascii)
TSR_U_TABLE(tsr_u_map, tsr_u_lower)
TSR_U_TABLE(tsr_u_smap, tsr_u_lower_multi)
TSR_U_TABLE(tsr_u_range, tsr_u_cased)
TSR_U_TABLE(tsr_u_range, tsr_u_case_ignorable)
TSR_U_TABLE(tsr_u_vrange, tsr_u_ccc)
TSR_U_TABLE(tsr_u_decomp, tsr_u_decomp_tab)
TSR_U_TABLE(tsr_u_comp, tsr_u_comp_tab)
TSR_U_TABLE(tsr_u_smap, tsr_u_ftfy_width)
TSR_U_TABLE(tsr_u_smap, tsr_u_ftfy_ligature)
TSR_U_TABLE(tsr_u_smap, tsr_u_ftfy_c1)
TSR_U_TABLE(tsr_u_range, tsr_u_ftfy_control)
TSR_U_TABLE(tsr_u_entity, tsr_u_entities)
TSR_U_TABLE(tsr_u_smap, tsr_u_html_invalid_charref)
TSR_U_TABLE(tsr_u_range, tsr_u_html_invalid_cp)
/* The default tokenizer mode's data (transformers 5, `tokenizers`):
 * text/unicode_tables_fast.c. */
TSR_U_TABLE(tsr_u_vrange, tsr_uf_clip_class)
TSR_U_TABLE(tsr_u_range, tsr_uf_space)
TSR_U_TABLE(tsr_u_map, tsr_uf_lower)
TSR_U_TABLE(tsr_u_smap, tsr_uf_lower_multi)
TSR_U_TABLE(tsr_u_vrange, tsr_uf_ccc)
TSR_U_TABLE(tsr_u_decomp, tsr_uf_decomp_tab)
TSR_U_TABLE(tsr_u_comp, tsr_uf_comp_tab)
#undef TSR_U_TABLE

/* A growable array of code points.  `v` is owned. */
typedef struct tsr_u32buf {
    uint32_t *v;
    size_t n, cap;
} tsr_u32buf;

int tsr_u32_push(tsr_u32buf *b, uint32_t cp);
int tsr_u32_push_utf8(tsr_u32buf *b, const char *s); /* s: valid UTF-8 */
void tsr_u32_free(tsr_u32buf *b);

/* Decode UTF-8 into `out` (appended).  Rejects invalid UTF-8 (overlongs,
 * surrogates, > U+10FFFF, truncation) with TSR_ERR_INVALID naming the byte
 * offset.  `what` names the input in the message. */
int tsr_utf8_decode(const char *s, size_t len, tsr_u32buf *out, const char *what);
/* Encode one code point; returns the byte count (1..4).  buf >= 4 bytes. */
int tsr_utf8_put(uint32_t cp, char *buf);

/* Class in CLIP's pattern: */
enum { TSR_U_P = 0, TSR_U_L = 1, TSR_U_N = 2, TSR_U_S = 3 };
int tsr_u_clip_cls(uint32_t cp);
bool tsr_u_in(const tsr_u_range *r, size_t n, uint32_t cp);
uint32_t tsr_u_vlookup(const tsr_u_vrange *r, size_t n, uint32_t cp); /* 0 if absent */
const tsr_u_smap *tsr_u_smap_find(const tsr_u_smap *m, size_t n, uint32_t cp);
/* ASCII letter `cp` equals under regex IGNORECASE (its own lowercase for
 * ASCII letters), or 0. */
uint32_t tsr_u_fold_to_ascii(uint32_t cp);

/* Python's str.lower() of `in` appended to `out` (final sigma included). */
int tsr_u_str_lower(const uint32_t *in, size_t n, tsr_u32buf *out);
/* unicodedata.normalize("NFC") of `in` appended to `out`. */
int tsr_u_nfc(const uint32_t *in, size_t n, tsr_u32buf *out);

/* The same three services as the `tokenizers` library computes them
 * (transformers 5's CLIPTokenizer): Oniguruma's classes, Rust's
 * char::to_lowercase per code point (no final sigma), and the library's
 * NFC data (older than Python's). */
int tsr_uf_clip_cls(uint32_t cp);
bool tsr_uf_space_cp(uint32_t cp);
int tsr_uf_str_lower(const uint32_t *in, size_t n, tsr_u32buf *out);
int tsr_uf_nfc(const uint32_t *in, size_t n, tsr_u32buf *out);

#endif
