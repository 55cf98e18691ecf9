/*
 * service/base/util.h - small pure helpers the service's files share: clocks,
 * random ids, base64, SHA-256, CRC-32, UTF-8 checks, durable file writes.
 *
 * Nothing here keeps state except the random source (getrandom, no state of
 * its own); every function is safe on any thread.
 */
#ifndef SVC_UTIL_H
#define SVC_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

/* Seconds on the monotonic clock / since the Unix epoch. */
double svc_now_mono(void);
/* What a read watch on a client's socket saw, without consuming it:
 * SVC_PEER_CLOSED (EOF or a socket error), SVC_PEER_SENT (bytes wait: a
 * pipelined request) or SVC_PEER_QUIET (nothing yet). */
enum { SVC_PEER_QUIET = 0, SVC_PEER_SENT = 1, SVC_PEER_CLOSED = 2 };
int svc_peer_state(int fd);
double svc_now_unix(void);

/* 64 random bits from the kernel (getrandom); a time-based mix if that fails. */
uint64_t svc_random_u64(void);

/* "j_" / "b_" + 16 lowercase hex digits (buf >= 19 bytes). */
void svc_id_format(char prefix, uint64_t id, char *buf);
/* Parses exactly that form; false on anything else. */
bool svc_id_parse(const char *s, char prefix, uint64_t *id);
/* A route's "/<id>[/...]": *id gets the id with `prefix` (0 when the
 * segment is not one); returns what follows the id ("" or "/..."). */
const char *svc_route_id(const char *rest, char prefix, uint64_t *id);

/* Base64 (RFC 4648, standard alphabet; the URL-safe '-' '_' are accepted
 * too).  Decoding skips ASCII whitespace, accepts missing padding and
 * rejects anything else.  *out is malloc'd (free()), NUL-terminated for
 * convenience; returns false on bad input or out of memory, with a reason
 * in err. */
bool svc_base64_decode(const char *in, size_t len, uint8_t **out, size_t *out_len, char *err,
                       size_t err_size);
/* NULL on out of memory; free(). */
char *svc_base64_encode(const uint8_t *in, size_t len);

/* SHA-256 (tsr_sha256, tessera.h). */
/* hex (65 bytes) of the SHA-256 of data. */
void svc_sha256_hex(const void *data, size_t len, char hex[65]);

/* CRC-32 (IEEE, zlib's). */
uint32_t svc_crc32(const void *data, size_t len);

/* Whether s[0..len) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF);
 * *max_cp (may be NULL) gets the largest code point. */
bool svc_utf8_valid(const char *s, size_t len, uint32_t *max_cp);

/* Durable writes: data to path through path.tmp, fsync, rename, fsync of the
 * directory.  Returns 0 or -errno. */
int svc_write_file_atomic(const char *path, const void *data, size_t len);
/* fsync a directory; 0 or -errno. */
int svc_fsync_dir(const char *dir);
/* mkdir -p; 0 or -errno. */
int svc_mkdirs(const char *path);
/* Whole file into a malloc'd buffer (NUL-terminated); 0 or -errno. */
int svc_read_file(const char *path, char **out, size_t *len, size_t max_len);

#endif
