/*
 * service/json.h - a strict JSON reader (RFC 8259) that builds a cJSON tree.
 *
 * Why not cJSON_Parse: request bodies need what cJSON's parser does not
 * give - UTF-8 validation of the whole body, rejection of duplicate keys,
 * a depth limit, and the literal text of every number, so that `1e3` and
 * `30.5` can be told from `1000` and seeds up to 2^64-1 are read exactly.
 * The reader keeps each number's literal in its item's `valuestring`
 * (cJSON_Delete frees it), and its value in `valuedouble` as usual.
 * A string containing U+0000 is kept cut at the NUL and marked with
 * SVC_JSON_HAS_NUL in its type bits, so the field that reads it can refuse
 * it by name (C strings cannot hold it); keys containing it are refused.
 */
#ifndef SVC_JSON_H
#define SVC_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define SVC_JSON_MAX_DEPTH 64
/* A type bit cJSON does not use: the string held U+0000. */
#define SVC_JSON_HAS_NUL (1 << 12)

/* Parse buf[0..len).  Returns the tree (cJSON_Delete) or NULL with a
 * message ("invalid UTF-8 at byte 12", "duplicate key \"steps\"", ...). */
cJSON *svc_json_parse(const char *buf, size_t len, char *err, size_t err_size);

/* The literal of a number item parsed by svc_json_parse, or NULL. */
const char *svc_json_literal(const cJSON *item);

/* Whether a literal is a JSON integer (no fraction, no exponent). */
bool svc_json_literal_is_integer(const char *lit);

/* Numbers as exact text: raw items.  cJSON prints a double with 15 digits
 * whenever that reads back within its tolerance (not exactly), so a value
 * that must survive a round trip (a journaled cfg_scale) is written here as
 * the shortest of %.15g/%.16g/%.17g that strtod turns back into the same
 * double; a value that is not finite becomes null. */
cJSON *svc_json_u64(uint64_t v);
cJSON *svc_json_double(double v);
/* Adds `name`: svc_json_double(v). */
void svc_json_add_double(cJSON *obj, const char *name, double v);
/* Adds `name`: string or null. */
void svc_json_add_string_or_null(cJSON *obj, const char *name, const char *s);
/* Adds `name`: svc_json_double(v), or null when !present. */
void svc_json_add_number_or_null(cJSON *obj, const char *name, double v, bool present);

#endif
