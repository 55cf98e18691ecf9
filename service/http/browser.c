/*
 * service/http/browser.c - the defence against web pages, with or without
 * keys (issue 62, docs/security.md "Browser defence").
 *
 * Why these three checks, and here: a page the user opens can send simple
 * requests (a form, or fetch with text/plain) to any address, loopback
 * included, without a CORS preflight, and with DNS rebinding it can even
 * read the answers.  So, like FastAPI since CVE-2021-32677 and ComfyUI's
 * origin check: a body must carry the route's own media type (415), which
 * a page cannot send cross-site without a preflight; an Origin that is not
 * the server's own or --cors-origin is refused (403); and on a loopback
 * address a Host that is not a loopback name or an --allowed-host is
 * refused (403), which is what a rebound name sends.  The checks run in
 * http/router.c, the Origin and Host ones before the key, the media type
 * once the route (and with it the dialect) is known.
 */
#include "http.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "auth.h"
#include "server.h"

/* The host part of a Host value or of an authority: "[::1]" of "[::1]:80". */
static size_t host_len(const char *h)
{
    if (h[0] == '[') {
        const char *end = strchr(h, ']');
        return end ? (size_t)(end - h) + 1 : strlen(h);
    }
    const char *colon = strchr(h, ':');
    return colon ? (size_t)(colon - h) : strlen(h);
}

static bool same_name(const char *a, size_t n, const char *b)
{
    return strlen(b) == n && strncasecmp(a, b, n) == 0;
}

/* Whether `host` (a Host header) is allowed on a loopback listen address. */
static bool host_allowed(const svc_server *s, const char *host)
{
    size_t n = host_len(host);
    if (same_name(host, n, "localhost") || same_name(host, n, "127.0.0.1") ||
        same_name(host, n, "[::1]"))
        return true;
    const char *list = s->cfg.allowed_hosts;
    while (list && *list) {
        const char *comma = strchr(list, ',');
        size_t len = comma ? (size_t)(comma - list) : strlen(list);
        char item[256];
        if (len < sizeof item) {
            memcpy(item, list, len);
            item[len] = '\0';
            if (n == host_len(item) && strncasecmp(host, item, n) == 0)
                return true; /* "name" or "name:port": the name decides */
        }
        list = comma ? comma + 1 : NULL;
    }
    return false;
}

/* Whether Origin is this server's own origin: scheme://HOST where HOST is
 * the request's Host, or, when a proxy sent Host without a port (nginx's
 * `Host $host`), the same name on any port. */
static bool own_origin(const char *origin, const char *host)
{
    const char *sep = strstr(origin, "://");
    if (!host || !sep)
        return false;
    const char *auth = sep + 3;
    if (strcasecmp(auth, host) == 0)
        return true;
    return host_len(host) == strlen(host) && host_len(auth) == strlen(host) &&
           strncasecmp(auth, host, strlen(host)) == 0;
}

static void forbid(svc_req *r, const char *message)
{
    const bool openai =
        strncmp(r->path, "/v1/images", 10) == 0 || strncmp(r->path, "/v1/models/", 11) == 0;
    const bool sdapi = strncmp(r->path, "/sdapi/", 7) == 0;
    svc_problem p = {.status = 403, .code = "forbidden", .message = message};
    svc_reply_problem(r, openai ? SVC_DIALECT_OPENAI
                         : sdapi ? SVC_DIALECT_A1111
                                 : SVC_DIALECT_NATIVE,
                      &p);
}

bool svc_browser_check(svc_req *r)
{
    svc_server *s = r->srv;
    const char *host = svc_req_header(r, "Host");
    if (host && svc_host_is_loopback(s->cfg.host) && !host_allowed(s, host)) {
        forbid(r, "this server listens on a loopback address and answers only requests for "
                  "localhost, 127.0.0.1 or [::1] (or an --allowed-host)");
        return false;
    }
    const char *origin = svc_req_header(r, "Origin");
    const char *cors = s->cfg.cors_origin;
    if (origin && !own_origin(origin, host) &&
        !(cors && (strcmp(cors, "*") == 0 || strcasecmp(cors, origin) == 0))) {
        forbid(r, "requests from another origin are refused (see --cors-origin)");
        return false;
    }
    return true;
}

/* Cookies are sent by the browser whatever page asks, so a request that
 * the UI's session cookie signs in must come from the UI itself: SameSite
 * =Strict keeps the cookie off other sites' requests in today's browsers;
 * this holds without it (and against a sibling origin of the same site). */
bool svc_browser_cookie_ok(svc_req *r)
{
    const char *site = svc_req_header(r, "Sec-Fetch-Site");
    const char *origin = svc_req_header(r, "Origin");
    const bool safe = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
    if (site && strcasecmp(site, "same-origin") != 0 && strcasecmp(site, "none") != 0) {
        forbid(r, "the web UI's session cookie is taken only from the UI's own pages "
                  "(Sec-Fetch-Site is not same-origin)");
        return false;
    }
    if (origin && !own_origin(origin, svc_req_header(r, "Host"))) {
        forbid(r, "the web UI's session cookie is taken only from the UI's own origin");
        return false;
    }
    if (!safe && !origin && !site) {
        forbid(r, "a change signed in by the web UI's session cookie must say where it comes "
                  "from (Origin or Sec-Fetch-Site), as browsers do");
        return false;
    }
    return true;
}

bool svc_browser_body_ok(svc_req *r, bool multipart)
{
    const char *type = svc_req_header(r, "Content-Type");
    size_t body = evbuffer_get_length(evhttp_request_get_input_buffer(r->req));
    if (!type && body == 0)
        return true; /* a bodiless POST (interrupt, refresh) */
    const char *want = multipart ? "multipart/form-data" : "application/json";
    size_t n = strlen(want);
    if (type) {
        while (*type == ' ')
            type++;
        if (strncasecmp(type, want, n) == 0 &&
            (type[n] == '\0' || type[n] == ';' || type[n] == ' '))
            return true;
    }
    char msg[160];
    snprintf(msg, sizeof msg, "the body must be %s%s", want,
             type ? "" : " (no Content-Type was sent)");
    svc_problem p = {.status = 415, .code = "unsupported_media_type", .message = msg};
    svc_reply_problem(r, r->dialect, &p);
    return false;
}
