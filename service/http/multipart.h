/*
 * service/http/multipart.h - a bounded multipart/form-data parser (RFC 7578,
 * RFC 2046 section 5.1) for the OpenAI images edits route.
 *
 * The whole body is in memory already (evhttp buffers it under --max-body),
 * so the parser works on one byte range and the parts' data are borrowed
 * slices of it: nothing is copied but the few header strings.  Bounds:
 * at most SVC_MP_MAX_PARTS parts, SVC_MP_MAX_HEAD bytes of headers per part,
 * a boundary of 1..70 characters.  Every rejection says what is wrong and
 * where ("part 2: no Content-Disposition header").  Lines end in CRLF, as
 * the RFC says; a bare LF is not a line end.  The preamble and epilogue are
 * ignored.  Only the Content-Disposition (name, filename) and Content-Type
 * headers are read; others are skipped.  Fuzzed by fuzz/fuzz_multipart.c.
 */
#ifndef SVC_MULTIPART_H
#define SVC_MULTIPART_H

#include <stddef.h>
#include <stdint.h>

#define SVC_MP_MAX_PARTS 64
#define SVC_MP_MAX_HEAD 8192
#define SVC_MP_MAX_BOUNDARY 70

typedef struct svc_mp_part {
    char *name;              /* owned; the form field's name (may be "") */
    char *filename;          /* owned; NULL when the part is not a file */
    char *content_type;      /* owned; NULL when absent */
    const uint8_t *data;     /* borrowed from the body */
    size_t len;
} svc_mp_part;

typedef struct svc_mp_form {
    svc_mp_part *parts;      /* owned */
    int n;
} svc_mp_form;

/* The boundary of a Content-Type header value "multipart/form-data;
 * boundary=..." (quoted or not) into out (size >= SVC_MP_MAX_BOUNDARY + 1).
 * 0, or -1 with a message in err. */
int svc_mp_boundary(const char *content_type, char *out, size_t size, char *err,
                    size_t err_size);

/* Parse body (len bytes) into *form.  0, or -1 with a message in err (and
 * *form empty).  The parts borrow from body: keep it alive. */
int svc_mp_parse(const uint8_t *body, size_t len, const char *boundary, svc_mp_form *form,
                 char *err, size_t err_size);

void svc_mp_free(svc_mp_form *form);

/* The nth (0, 1, ...) part named `name` (NULL if none). */
const svc_mp_part *svc_mp_find(const svc_mp_form *form, const char *name, int nth);
/* How many parts are named `name`. */
int svc_mp_count(const svc_mp_form *form, const char *name);

#endif
