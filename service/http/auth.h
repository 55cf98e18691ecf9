/*
 * service/http/auth.h - API keys (--keys FILE, --token-file).
 *
 * Why a table of hashes: the server never holds a key, only the SHA-256 of
 * each (the line `NAME ROLE SHA256HEX` that `tessera keys new` appends), so
 * a leaked key file or core dump gives no one a working key; a key has 128
 * bits or more, so a plain SHA-256 is enough (no salt or slow hash: nothing
 * to brute-force).  A request's key is hashed once and compared with EVERY
 * row, each compare constant time, with no early exit, so neither the time
 * of a match nor its row leaks.  --token-file is the shorthand of a table of
 * one `admin` row named "admin" (the token's hash); a token under 16 bytes
 * is refused, since it could be guessed.  `Authorization: Bearer KEY`
 * (scheme case-insensitive, RFC 7235) everywhere; HTTP Basic with the key
 * as password and any user name on /sdapi/ only (what webuiapi sends).
 */
#ifndef SVC_AUTH_H
#define SVC_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SVC_KEY_NAME_MAX 64 /* bytes with the NUL */
#define SVC_TOKEN_MIN 16    /* bytes of a --token-file token, at least */

typedef enum svc_key_role { SVC_KEY_USER = 0, SVC_KEY_ADMIN = 1 } svc_key_role;

typedef struct svc_key {
    char name[SVC_KEY_NAME_MAX];
    svc_key_role role;
    uint8_t hash[32]; /* SHA-256 of the key */
    unsigned long long jobs, images; /* accepted, stored: /metrics key="NAME" */
} svc_key;

typedef struct svc_keys {
    svc_key *v;
    size_t n; /* 0: authentication is off */
} svc_keys;

/* Load --keys (keys_path) and/or --token-file (token_path) into *out.
 * 0, or -1 with the reason (the file, and the line of a bad line) in err.
 * warn: log a warning when a file is readable by group or others. */
int svc_keys_load(const char *keys_path, const char *token_path, bool warn, svc_keys *out,
                  char *err, size_t err_size);
void svc_keys_free(svc_keys *k);
/* The key an Authorization header value carries, or NULL.  basic_ok: also
 * HTTP Basic with the key as password (/sdapi/). */
const svc_key *svc_keys_check(const svc_keys *k, const char *header, bool basic_ok);
/* Whether name is a valid key name: 1..63 of [A-Za-z0-9_.-]. */
bool svc_key_name_ok(const char *name);
/* Whether the key k may see a job owned by owner ("" = none): keys off
 * (k NULL) or admin: all; a user key: its own jobs only. */
bool svc_key_sees(const svc_key *k, const char *owner);
/* The key's name, "" for NULL (the owner a new job gets). */
const char *svc_key_name(const svc_key *k);
/* Count an accepted job / a stored image for the key named owner (none: nothing). */
void svc_keys_count(svc_keys *k, const char *owner, unsigned jobs, unsigned images);
/* tessera_key_jobs_total and tessera_key_images_total, one line per key. */
struct evbuffer;
void svc_keys_metrics(const svc_keys *k, struct evbuffer *out);
/* Whether a listen host is a loopback one (localhost, 127.x, ::1). */
bool svc_host_is_loopback(const char *host);

#endif
