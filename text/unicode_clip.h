/*
 * text/unicode_clip.h - CLIPTokenizer's text cleanup and pre-tokenisation
 * on code points.  Internal to text/.
 */
#ifndef TSR_TEXT_UNICODE_CLIP_H
#define TSR_TEXT_UNICODE_CLIP_H

#include "text/unicode.h"

/* whitespace_clean(ftfy.fix_text(s)).lower(), appended to `out`. */
int tsr_clip_clean(const uint32_t *s, size_t n, tsr_u32buf *out);

/* re.findall(CLIP pattern, s): the next match at or after *pos.  Returns
 * its length and sets *start (and advances *pos past it), or 0 at the end. */
size_t tsr_clip_next_token(const uint32_t *s, size_t n, size_t *pos, size_t *start);

/* The default mode (transformers 5's CLIPTokenizer, `tokenizers`): its
 * normalizer Sequence[NFC, Replace(\s+ -> " "), Lowercase], appended to
 * `out` (no strip: whitespace is dropped by the pre-tokeniser anyway). */
int tsr_clip_normalize_fast(const uint32_t *s, size_t n, tsr_u32buf *out);

/* Its Split pre-tokeniser: CLIP's pattern without IGNORECASE, on Oniguruma's
 * classes.  Same contract as tsr_clip_next_token; *special is set when the
 * match is one of the literals <|startoftext|> / <|endoftext|>. */
size_t tsr_clip_next_token_fast(const uint32_t *s, size_t n, size_t *pos, size_t *start,
                                bool *special);

#endif
