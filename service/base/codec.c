/*
 * service/base/codec.c - see codec.h.
 */
#include "codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

bool svc_base64_decode(const char *in, size_t len, uint8_t **out, size_t *out_len, char *err,
                       size_t err_size)
{
    *out = NULL;
    *out_len = 0;
    if (len > (SIZE_MAX - 4) / 3 * 4) {
        snprintf(err, err_size, "too long");
        return false;
    }
    uint8_t *buf = malloc(len / 4 * 3 + 4);
    if (!buf) {
        snprintf(err, err_size, "out of memory");
        return false;
    }
    size_t n = 0, pad = 0;
    uint32_t acc = 0;
    int have = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
            continue;
        if (c == '=') {
            pad++;
            continue;
        }
        int v = b64_value(c);
        if (v < 0 || pad) {
            snprintf(err, err_size,
                     pad ? "data after '=' padding at offset %zu"
                         : "invalid base64 character at offset %zu",
                     i);
            free(buf);
            return false;
        }
        acc = acc << 6 | (uint32_t)v;
        if (++have == 4) {
            buf[n++] = (uint8_t)(acc >> 16);
            buf[n++] = (uint8_t)(acc >> 8);
            buf[n++] = (uint8_t)acc;
            acc = 0;
            have = 0;
        }
    }
    if (have == 1 || pad > 2 || (pad && (have + pad) % 4 != 0)) {
        snprintf(err, err_size, "truncated base64 (length not a multiple of 4)");
        free(buf);
        return false;
    }
    if (have == 2) {
        buf[n++] = (uint8_t)(acc >> 4);
    } else if (have == 3) {
        buf[n++] = (uint8_t)(acc >> 10);
        buf[n++] = (uint8_t)(acc >> 2);
    }
    buf[n] = 0;
    *out = buf;
    *out_len = n;
    return true;
}

char *svc_base64_encode(const uint8_t *in, size_t len)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (len > (SIZE_MAX - 8) / 4 * 3)
        return NULL;
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = tab[v >> 18];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = tab[(v >> 6) & 63];
        out[o++] = tab[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = tab[v >> 18];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = tab[v >> 18];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = tab[(v >> 6) & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

/* ---- UTF-8 ---- */

bool svc_utf8_valid(const char *s, size_t len, uint32_t *max_cp)
{
    const unsigned char *p = (const unsigned char *)s;
    uint32_t top = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t c = p[i];
        int n;
        uint32_t min;
        if (c < 0x80) {
            i++;
            if (c > top)
                top = c;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1;
            c &= 0x1F;
            min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2;
            c &= 0x0F;
            min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3;
            c &= 0x07;
            min = 0x10000;
        } else {
            return false;
        }
        if (len - i <= (size_t)n)
            return false;
        for (int k = 1; k <= n; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
            c = c << 6 | (p[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return false;
        if (c > top)
            top = c;
        i += (size_t)n + 1;
    }
    if (max_cp)
        *max_cp = top;
    return true;
}
