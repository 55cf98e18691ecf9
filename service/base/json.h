/*
 * service/base/json.h - a strict JSON reader (RFC 8259) that builds a cJSON tree.
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
 *
 * Bodies come from anyone who can reach the port and are read on the event
 * loop, so a parse costs time linear in the body (duplicate keys are found
 * through a keyed hash, not a search of the object) and the tree is bounded
 * by the SVC_JSON_MAX_* limits below.  A number item's literal shares its
 * item's allocation and the item carries cJSON_IsReference (cJSON_Delete
 * frees both at once; cJSON_Duplicate makes an ordinary copy): do not free
 * or replace a parsed number's valuestring.  All memory comes from
 * cJSON_malloc, so cJSON_InitHooks sees it.
 */
#ifndef SVC_JSON_H
#define SVC_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define SVC_JSON_MAX_DEPTH 64

/* Bounds on what one document may hold, so that reading a body costs time
 * linear in it and memory a small multiple of it (about 120 bytes a value
 * plus the strings, which never grow when decoded).  A body past a bound is
 * refused like any invalid JSON ("more than 4096 members in one object at
 * byte 52130"): 400 invalid_json from every route.  Each bound leaves
 * headroom over the largest document the API has a use for:
 *
 * Members of one object: the largest objects clients send are A1111's
 * settings (POST /sdapi/v1/options: A1111 itself has several hundred, more
 * with extensions, and tools that copy settings between servers send them
 * all) and A1111 generation bodies (about 80 fields); a native job has
 * about 20.  4096 is 5-10x the largest. */
#define SVC_JSON_MAX_MEMBERS 4096
/* Elements of one array: the longest array the API reads is a batch's
 * `jobs` (at most 1,000, routes_batches.c); A1111's `styles`,
 * `init_images` and `script_args` hold a handful.  10x the batch cap. */
#define SVC_JSON_MAX_ELEMENTS 10000
/* Values (objects, arrays, strings, numbers, literals) in one document: a
 * 1,000-job batch setting every job field is about 21,000; 100,000 is 5x
 * that, and caps the tree at about 12 MB beyond the body's own strings
 * whatever shape a 32 MiB body takes (a 16 MiB body of [[0,0,...],...]
 * would be 8 million values, 900 MB). */
#define SVC_JSON_MAX_VALUES 100000
/* Objects with at most this many members find duplicate keys by a scan of
 * their members; larger ones through a hash set (json.c). */
#define SVC_JSON_SCAN_KEYS 8

#define SVC_JSON_STR_(x) #x
/* A bound's value as a string literal, for messages. */
#define SVC_JSON_STR(x) SVC_JSON_STR_(x)
/* A type bit cJSON does not use: the string held U+0000. */
#define SVC_JSON_HAS_NUL (1 << 12)

/* Parse buf[0..len).  Returns the tree (cJSON_Delete) or NULL with a
 * message ("invalid UTF-8 at byte 12", "duplicate key \"steps\"", ...). */
cJSON *svc_json_parse(const char *buf, size_t len, char *err, size_t err_size);

/* The end of the JSON number (RFC 8259's grammar) that starts at s, within
 * [s, end); NULL when s does not start one, with *bad (may be NULL) where
 * a digit was wanted.  The one statement of the grammar: the parser and
 * the OpenAI form fields (openai_edits.c) both use it. */
const char *svc_json_scan_number(const char *s, const char *end, const char **bad);

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
