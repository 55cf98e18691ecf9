/*
 * image/util.c - text encodings for PNG chunks and the atomic file write.
 *
 * Why: PNG tEXt is Latin-1 and iTXt is UTF-8, while everything inside
 * Tessera is UTF-8; these converters are the only place the two meet.  The
 * UTF-8 check is strict (it rejects overlongs, surrogates and values past
 * U+10FFFF) because PIL decodes iTXt strictly and we must agree with it on
 * which chunks exist.  Files are written to "<path>.tmp", fsynced and
 * renamed, so a reader never sees a half-written image under its real name.
 */
#include "image/image_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

bool tsr_utf8_valid(const char *s, size_t len, uint32_t *max_cp)
{
    const uint8_t *p = (const uint8_t *)s;
    uint32_t maxc = 0;
    size_t i = 0;
    while (i < len) {
        uint8_t c = p[i];
        uint32_t cp;
        size_t n;
        if (c < 0x80) {
            cp = c;
            n = 1;
        } else if (c >= 0xC2 && c <= 0xDF) {
            cp = c & 0x1Fu;
            n = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            cp = c & 0x0Fu;
            n = 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            cp = c & 0x07u;
            n = 4;
        } else {
            return false; /* continuation byte, C0/C1 overlong lead, or > F4 */
        }
        if (n > len - i)
            return false;
        for (size_t k = 1; k < n; k++) {
            uint8_t cc = p[i + k];
            if ((cc & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (cc & 0x3Fu);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        if (cp > maxc)
            maxc = cp;
        i += n;
    }
    if (max_cp)
        *max_cp = maxc;
    return true;
}

char *tsr_latin1_to_utf8(const char *s, size_t len)
{
    if (len > (SIZE_MAX - 1) / 2)
        return NULL;
    char *out = malloc(len * 2 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        if (c < 0x80) {
            out[o++] = (char)c;
        } else {
            out[o++] = (char)(0xC0 | (c >> 6));
            out[o++] = (char)(0x80 | (c & 0x3F));
        }
    }
    out[o] = '\0';
    return out;
}

char *tsr_utf8_to_latin1(const char *s, size_t len)
{
    if (len == SIZE_MAX)
        return NULL;
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        if (c < 0x80) {
            out[o++] = (char)c;
        } else if (i + 1 < len) { /* caller guarantees a 2-byte sequence <= U+00FF */
            out[o++] = (char)(((c & 0x03u) << 6) | ((uint8_t)s[i + 1] & 0x3Fu));
            i++;
        }
    }
    out[o] = '\0';
    return out;
}

