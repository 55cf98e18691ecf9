/*
 * fuzz/fuzz_multipart.c - libFuzzer target for the multipart/form-data
 * parser of the OpenAI edits route (service/http/multipart.c).
 *
 * Why: the edits route parses a form straight from the network.  Input: a
 * first line is the Content-Type header value (boundary parsing), the rest
 * is the body.  Checked: a body that parses has parts whose data lie inside
 * the body and whose names are NUL-terminated strings; every part can be
 * found by name again.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "multipart.h"

#define CHECK(c)              \
    do {                      \
        if (!(c))             \
            __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size < 512 ? size : 512);
    if (!nl)
        return 0;
    size_t hl = (size_t)(nl - data);
    char *ct = malloc(hl + 1);
    if (!ct)
        return 0;
    memcpy(ct, data, hl);
    ct[hl] = '\0';
    /* the body as evhttp hands it over: a copy of its own */
    size_t bl = size - hl - 1;
    uint8_t *body = malloc(bl ? bl : 1);
    if (!body) {
        free(ct);
        return 0;
    }
    memcpy(body, nl + 1, bl);
    char boundary[SVC_MP_MAX_BOUNDARY + 1], err[256];
    if (svc_mp_boundary(ct, boundary, sizeof boundary, err, sizeof err) == 0) {
        CHECK(strlen(boundary) >= 1 && strlen(boundary) <= SVC_MP_MAX_BOUNDARY);
        svc_mp_form form;
        if (svc_mp_parse(body, bl, boundary, &form, err, sizeof err) == 0) {
            CHECK(form.n >= 0 && form.n <= SVC_MP_MAX_PARTS);
            for (int i = 0; i < form.n; i++) {
                const svc_mp_part *p = &form.parts[i];
                CHECK(p->name != NULL);
                CHECK(p->data >= body && p->data + p->len <= body + bl);
                CHECK(svc_mp_find(&form, p->name, 0) != NULL);
                CHECK(svc_mp_count(&form, p->name) >= 1);
                (void)strlen(p->name);
                if (p->filename)
                    (void)strlen(p->filename);
                if (p->content_type)
                    (void)strlen(p->content_type);
            }
            svc_mp_free(&form);
        } else {
            CHECK(form.n == 0 && form.parts == NULL && err[0]);
        }
    } else {
        CHECK(err[0]);
    }
    free(body);
    free(ct);
    return 0;
}
