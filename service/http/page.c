/*
 * service/http/page.c - the page (web/: index.html, app.js, style.css),
 * compiled in by cmake/embed.cmake and served at /, /app.js, /style.css.
 *
 * Why compiled in: the binary is the whole service, with no directory of
 * assets to install or keep in step.  The router (router.c) asks here
 * once no route of its table matched.  Each asset gets a strong ETag (its
 * SHA-256) and `Cache-Control: no-cache`, so a browser revalidates and
 * gets a 304 until the binary changes.
 */
#include "http.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "util.h"
#include "web_assets.h"

bool svc_page_serve(svc_req *r)
{
    const char *name = strcmp(r->path, "/") == 0 ? "index.html" : r->path + 1;
    const svc_web_asset *a = NULL;
    for (const svc_web_asset *x = svc_web_assets; x->name; x++)
        if (strcmp(x->name, name) == 0)
            a = x;
    if (!a)
        return false;
    if (strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0) {
        svc_reply_method_not_allowed(r, SVC_DIALECT_NATIVE, "GET, HEAD");
        return true;
    }
    char hex[65], etag[40];
    svc_sha256_hex(a->data, a->len, hex);
    snprintf(etag, sizeof etag, "\"%.32s\"", hex);
    svc_req_add_header(r, "ETag", etag);
    svc_req_add_header(r, "Cache-Control", "no-cache");
    svc_req_add_header(r, "X-Content-Type-Options", "nosniff");
    const char *inm = svc_req_header(r, "If-None-Match");
    if (inm && strstr(inm, etag)) {
        svc_reply_buffer(r, 304, NULL, NULL);
        return true;
    }
    struct evbuffer *buf = evbuffer_new();
    if (buf)
        evbuffer_add(buf, a->data, a->len);
    svc_reply_buffer(r, 200, a->content_type, buf);
    if (buf)
        evbuffer_free(buf);
    return true;
}

