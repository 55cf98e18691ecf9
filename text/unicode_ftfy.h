/*
 * text/unicode_ftfy.h - ftfy.fix_text as CLIPTokenizer applies it (see
 * text/unicode_ftfy.c for what is covered and what is not).  Internal to
 * text/.
 */
#ifndef TSR_TEXT_UNICODE_FTFY_H
#define TSR_TEXT_UNICODE_FTFY_H

#include "text/unicode.h"

/* Append ftfy.fix_text(s) to `out`. */
int tsr_ftfy_fix_text(const uint32_t *s, size_t n, tsr_u32buf *out);

#endif
