/*
 * service/http/auth.h - bearer tokens (--token-file).
 *
 * The token is the file's content without trailing whitespace (one line);
 * an empty or unreadable file is refused at start, since an empty token
 * would let anyone in.  Requests to /v1/ and /sdapi/ must carry
 * `Authorization: Bearer <token>` (scheme case-insensitive, RFC 7235); the
 * comparison takes the same time wherever the first difference is and
 * whatever the lengths.
 */
#ifndef SVC_AUTH_H
#define SVC_AUTH_H

#include <stdbool.h>
#include <stddef.h>

/* Read the token (malloc'd into *token).  0, or -1 with the reason logged. */
int svc_auth_load(const char *path, char **token, size_t *len);
/* Whether an Authorization header value carries the token. */
bool svc_auth_check(const char *token, size_t len, const char *header);
/* Whether an Authorization header is HTTP Basic with the token as the
 * password, any user name (what A1111 clients send for --api-auth;
 * accepted on /sdapi/ only). */
bool svc_auth_check_basic(const char *token, size_t len, const char *header);

#endif
