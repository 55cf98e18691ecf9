/*
 * core/json.h - safe, typed helpers over cJSON for files we do not trust.
 *
 * Why: model configs (diffusers config.json, scheduler_config.json),
 * tokenizer files and safetensors headers are JSON written by strangers.
 * cJSON parses them well but its accessors are permissive: valueint
 * saturates, a missing key is indistinguishable from a mistyped one, and
 * objects may hold duplicate keys.  These helpers make every read explicit:
 * the parse is size-bounded and reports the byte offset, line and column of
 * a syntax error; each getter checks the JSON type and an inclusive range
 * and raises an error that names the file (`label`) and the key, e.g.
 *
 *     unet/config.json: "in_channels" = 4.5 is not an integer in [1, 64]
 *
 * Conventions shared by all getters:
 *  - `obj` is a borrowed cJSON object; `label` (borrowed) names the file or
 *    document in error messages and may be NULL ("json").
 *  - A key that is absent or JSON null yields the default (`get_*`), or a
 *    TSR_ERR_NOT_FOUND error (`need_*`).  Diffusers writes null for unset
 *    optional fields, so null means "absent".
 *  - A present value of the wrong type is TSR_ERR_FORMAT; a value outside
 *    [min, max] or not exactly representable is TSR_ERR_RANGE.
 *  - JSON has one number type: an integer getter accepts 8 and 8.0 but
 *    rejects 8.5, NaN-like overflow (1e999) and values beyond the range.
 *  - Strings returned are borrowed from the cJSON tree: valid until
 *    cJSON_Delete() of its root.
 *  - On error *out (and *n) is left unchanged, though an array getter may
 *    have filled some elements of out[].
 *
 * Parsing uses the C locale's strtod inside cJSON: do not call setlocale()
 * with a locale whose decimal point is not '.'.
 */
#ifndef TSR_CORE_JSON_H
#define TSR_CORE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

/* Largest document tsr_json_parse() accepts (a safetensors header may be
 * 100 MiB, so this is above TSR_ST_MAX_HEADER). */
#define TSR_JSON_MAX_PARSE (128u << 20)
/* Largest file tsr_json_load_file() reads. */
#define TSR_JSON_MAX_FILE (16u << 20)

/* Parse `len` bytes at `buf` (borrowed; need not be NUL-terminated).  Only
 * whitespace may follow the value.  On success *out is an owned tree
 * (cJSON_Delete).  Errors: TSR_ERR_RANGE (too large), TSR_ERR_FORMAT
 * ("label: JSON syntax error at byte 17 (line 2, column 5) near '...'"),
 * TSR_ERR_NOMEM. */
int tsr_json_parse(const char *buf, size_t len, const char *label, cJSON **out);

/* Read and parse a file of at most TSR_JSON_MAX_FILE bytes; errors name
 * the path.  *out owned. */
int tsr_json_load_file(const char *path, cJSON **out);
/* Same with an explicit size bound (<= TSR_JSON_MAX_PARSE). */
int tsr_json_load_file_max(const char *path, size_t max_bytes, cJSON **out);

/* Object members.  NULL when absent or JSON null.  Case-sensitive. */
const cJSON *tsr_json_member(const cJSON *obj, const char *key);
bool tsr_json_has(const cJSON *obj, const char *key);

/* Name of a key that appears twice in `obj` (borrowed), or NULL when all
 * keys are distinct (cJSON keeps duplicates; a later duplicate would be
 * invisible to lookups).  O(n log n); NULL if `obj` is not an object.
 * Returns NULL with *nomem set on allocation failure when nomem != NULL. */
const char *tsr_json_duplicate_key(const cJSON *obj, bool *nomem);
/* Raise TSR_ERR_FORMAT naming the duplicate if `obj` has one. */
int tsr_json_check_unique_keys(const cJSON *obj, const char *label);

/* Require `obj` to be a JSON object (e.g. the root of config.json). */
int tsr_json_expect_object(const cJSON *obj, const char *label, const char *what);

/* Typed getters (see the conventions above). */
int tsr_json_get_int(const cJSON *obj, const char *label, const char *key, int def, int min,
                     int max, int *out);
int tsr_json_get_int64(const cJSON *obj, const char *label, const char *key, int64_t def,
                       int64_t min, int64_t max, int64_t *out);
int tsr_json_get_double(const cJSON *obj, const char *label, const char *key, double def,
                        double min, double max, double *out);
int tsr_json_get_bool(const cJSON *obj, const char *label, const char *key, bool def,
                      bool *out);
/* *out borrowed from the tree (or `def`, which may be NULL). */
int tsr_json_get_string(const cJSON *obj, const char *label, const char *key, const char *def,
                        const char **out);

/* Required variants: TSR_ERR_NOT_FOUND when absent or null. */
int tsr_json_need_int(const cJSON *obj, const char *label, const char *key, int min, int max,
                      int *out);
int tsr_json_need_double(const cJSON *obj, const char *label, const char *key, double min,
                         double max, double *out);
int tsr_json_need_string(const cJSON *obj, const char *label, const char *key,
                         const char **out);

/* An array of integers, each in [min, max], into out[0..max_n).  A scalar
 * number is accepted as a one-element array (diffusers allows both
 * `"attention_head_dim": 8` and `[5, 10, 20, 20]`).  Absent/null: *n = 0
 * and success.  More than max_n elements: TSR_ERR_RANGE. */
int tsr_json_get_int_array(const cJSON *obj, const char *label, const char *key, int min,
                           int max, int *out, int max_n, int *n);
/* An array of strings (a single string counts as one); borrowed pointers.
 * Absent/null: *n = 0. */
int tsr_json_get_string_array(const cJSON *obj, const char *label, const char *key,
                              const char **out, int max_n, int *n);

/* Check a single number item (not a member) as an integer in [min, max];
 * `what` names it in errors (e.g. "merges[3]").  For iterating arrays or
 * objects such as a tokenizer vocabulary. */
int tsr_json_item_int64(const cJSON *item, const char *label, const char *what, int64_t min,
                        int64_t max, int64_t *out);

#endif
