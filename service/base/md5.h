/*
 * service/base/md5.h - MD5 (RFC 1321), for one thing only: the signatures of
 * signed image URLs (http/signed.h), whose format is nginx's secure_link
 * module's, and that module hashes with MD5.  MD5 is broken for collisions,
 * not for this use: a signature is MD5(expires, path, secret) over a secret
 * of 128 bits or more that an attacker does not know, and forging one means
 * a preimage-style attack on the keyed hash, not a collision.  Nothing else
 * in Tessera should use it (content hashes are SHA-256, base/hash.h).
 *
 * Written here (about a hundred lines, checked against RFC 1321's test
 * vectors by unit_signed_urls) rather than linking OpenSSL for one function.
 */
#ifndef SVC_MD5_H
#define SVC_MD5_H

#include <stddef.h>
#include <stdint.h>

/* The 16-byte MD5 digest of data[0..len). */
void svc_md5(const void *data, size_t len, uint8_t out[16]);

#endif
