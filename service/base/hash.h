/*
 * service/base/hash.h - content hashes: SHA-256 as hex (ETags, the engine's
 * tsr_sha256 through tessera.h, not a second copy) and CRC-32 (the
 * journal's record checksums).
 */
#ifndef SVC_HASH_H
#define SVC_HASH_H

#include <stddef.h>
#include <stdint.h>

/* SHA-256 (tsr_sha256, tessera.h). */
/* hex (65 bytes) of the SHA-256 of data. */
void svc_sha256_hex(const void *data, size_t len, char hex[65]);

/* CRC-32 (IEEE, zlib's). */
uint32_t svc_crc32(const void *data, size_t len);

#endif
