/*
 * service/base/ids.h - random 64-bit ids and their text forms ("j_" /
 * "b_" + 16 hex digits): random so that ids from several api nodes sharing
 * one queue never collide and cannot be guessed from one another.
 */
#ifndef SVC_IDS_H
#define SVC_IDS_H

#include <stdbool.h>
#include <stdint.h>

/* 64 random bits from the kernel (getrandom); a time-based mix if that fails. */
uint64_t svc_random_u64(void);

/* "j_" / "b_" + 16 lowercase hex digits (buf >= 19 bytes). */
void svc_id_format(char prefix, uint64_t id, char *buf);
/* Parses exactly that form; false on anything else. */
bool svc_id_parse(const char *s, char prefix, uint64_t *id);
/* A route's "/<id>[/...]": *id gets the id with `prefix` (0 when the
 * segment is not one); returns what follows the id ("" or "/..."). */
const char *svc_route_id(const char *rest, char prefix, uint64_t *id);

#endif
