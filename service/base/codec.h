/*
 * service/base/codec.h - text codecs for what clients send: base64 (images in
 * JSON bodies) and UTF-8 validation (prompts).  Both are strict, since
 * their input comes from the network, and report what is wrong.
 */
#ifndef SVC_CODEC_H
#define SVC_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Base64 (RFC 4648, standard alphabet; the URL-safe '-' '_' are accepted
 * too).  Decoding skips ASCII whitespace, accepts missing padding and
 * rejects anything else.  *out is malloc'd (free()), NUL-terminated for
 * convenience; returns false on bad input or out of memory, with a reason
 * in err. */
bool svc_base64_decode(const char *in, size_t len, uint8_t **out, size_t *out_len, char *err,
                       size_t err_size);
/* NULL on out of memory; free(). */
char *svc_base64_encode(const uint8_t *in, size_t len);

/* Whether s[0..len) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF);
 * *max_cp (may be NULL) gets the largest code point. */
bool svc_utf8_valid(const char *s, size_t len, uint32_t *max_cp);

#endif
