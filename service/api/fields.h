/*
 * service/api/fields.h - the typed field reader the three dialects share
 * (native params.c, A1111 a1111_params.c, OpenAI openai.c), in the manner
 * of Redis's get*FromObjectOrReply: one reader per type, written once, each
 * refusing with a message that names the field, says what was expected and
 * shows what came ("steps must be an integer between 1 and 1000, got
 * 30.5").
 *
 * Why one reader: each dialect had its own get_int / get_number /
 * get_string and its own describe(), and the copies had begun to differ.
 * The wording the clients and tests know is kept exactly: where the
 * dialects differ it is a setting of the reader (how a string is shown in
 * "got ...": "a string" natively and in A1111, its value for OpenAI) or
 * of the call (a number with or without a range, a boolean that takes 0
 * and 1 for A1111's forms, what a seed may be).
 *
 * Rules common to every dialect: JSON null counts as absent; integers are
 * judged by their literal (svc_json_parse keeps it), so 1e3 and 30.0 are
 * not integers; a string holding U+0000 is refused.  A reader may overlay
 * a second object (a native batch's `defaults`): a member missing from the
 * object is read there, and an error then says it came from the defaults.
 *
 * A reader returns 0 (the value, or the default when absent) or -1 with
 * the field and the message in the svc_fields; the dialect copies them into
 * its own error (status, code) and shape.
 */
#ifndef SVC_FIELDS_H
#define SVC_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define SVC_FIELDS_MAX_SOURCES 24

/* How a reader takes a value of another JSON type than the field's.
 * STRICT (native, OpenAI): none.  PYDANTIC (A1111, whose bodies pydantic
 * parses): the rows of fields.c's k_coercions, and nothing else. */
typedef enum { SVC_COERCE_STRICT = 0, SVC_COERCE_PYDANTIC } svc_coerce;

typedef struct svc_fields {
    const cJSON *obj;      /* the object read (borrowed) */
    const cJSON *defaults; /* read where obj lacks a member; NULL = none */
    bool show_strings;     /* "got \"abc\"" (OpenAI) rather than "got a string" */
    svc_coerce coerce;     /* set after svc_fields_init; STRICT by default */
    /* set by a refusal */
    char field[64];        /* the member refused; "" when not one member */
    bool from_defaults;    /* its value came from `defaults` */
    char message[512];
    /* where each member read came from (for from_defaults) */
    struct {
        const char *name;
        bool from_defaults;
    } src[SVC_FIELDS_MAX_SOURCES];
    int n_src;
} svc_fields;

/* A reader of obj (and defaults, or NULL). */
void svc_fields_init(svc_fields *f, const cJSON *obj, const cJSON *defaults, bool show_strings);

/* Refuse `field` (NULL: no one field) with a message; returns -1. */
int svc_fields_fail(svc_fields *f, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Refuse `name`: "<name> must be <what>, got <it described>"; -1. */
int svc_fields_refuse(svc_fields *f, const char *name, const cJSON *it, const char *what);

/* The member `name` (obj's, else the defaults'), NULL when absent or null. */
const cJSON *svc_fields_get(svc_fields *f, const char *name);

/* A value in a few characters for "got ...": "a string" or "\"abc\"",
 * "true", the number's literal, "an array", "an object", "null". */
void svc_fields_describe(const svc_fields *f, const cJSON *it, char *buf, size_t size);

/* The coercion table: what a field of type `want` ('b' boolean, 'i'
 * integer, 'n' number) takes from `it`, a value of another JSON type,
 * under `rules`.  true: *v is the value (0 or 1 for a boolean); false: no
 * row applies, and the reader refuses as it always did. */
bool svc_fields_coerce(svc_coerce rules, char want, const cJSON *it, double *v);

/* An integer in [lo, hi]. */
int svc_fields_int(svc_fields *f, const char *name, long long lo, long long hi, long long dflt,
                   long long *out);

/* A finite number in [lo, hi] ((lo, hi] when lo_open); with lo = -HUGE_VAL
 * and hi = HUGE_VAL any finite number, and the message names no range.
 * *given (may be NULL): the member was there. */
int svc_fields_number(svc_fields *f, const char *name, double lo, double hi, bool lo_open,
                      double dflt, double *out, bool *given);

/* A string of at most max bytes; *out borrowed from the object (NULL when
 * absent).  required: absent is "<name> is required (a string)". */
int svc_fields_string(svc_fields *f, const char *name, size_t max, bool required,
                      const char **out);

/* One of `allowed` (NULL-terminated); *out NULL when absent. */
int svc_fields_enum(svc_fields *f, const char *name, const char *const *allowed,
                    const char **out);

/* A boolean; with ints01 the integers 0 and 1 count too (A1111's forms). */
int svc_fields_bool(svc_fields *f, const char *name, bool ints01, bool dflt, bool *out);

/* An array (kind cJSON_Array) or an object (cJSON_Object), if present. */
int svc_fields_kind(svc_fields *f, const char *name, int kind);

/* A seed: an integer 0 .. 2^64-1, or -1 (*random; *out untouched).
 * minus_zero: "-0" reads as 0 (native) rather than being refused (A1111).
 * expected completes "<name> must be ..., got ..." in the refusal.
 * Absent: *random, *out untouched (the dialect draws). */
int svc_fields_seed(svc_fields *f, const char *name, bool minus_zero, const char *expected,
                    uint64_t *out, bool *random);

/* Image bytes sent as text, the one reader of every place that takes them
 * (native init_image and mask, A1111's init_images, mask and extras
 * images): base64, or a data: URL whose data is base64
 * ("data:image/png;base64,...").  Any other data URL is refused, not read
 * as base64.  *out is malloc'd (free()).  0, or -1 with a message naming
 * `field` in err ("<field> is empty", "<field> is not valid base64: ..."). */
int svc_fields_base64(const char *field, const char *s, uint8_t **out, size_t *out_len, char *err,
                      size_t err_size);

#endif
