/*
 * service/api/comfy/comfy_login.c - signing in to ComfyUI's web UI with an
 * API key (issue 59, docs/compat-comfyui.md "The web UI with keys",
 * docs/security.md "The web UI's sessions").
 *
 * Why a session and not the key in a cookie: the frontend cannot send an
 * Authorization header, and a cookie holding the key would put the key on
 * disk in the browser's jar and in every request's headers.  So GET
 * /comfy/login is a small page of our own where the person pastes the key,
 * POST /comfy/login checks it with svc_keys_check (constant time) and mints
 * a random token (256 bits from getrandom) that maps to the key's row; the
 * server keeps only the token's SHA-256, so a core dump holds no live
 * session.  Sessions live in memory: a restart signs everyone out (their key
 * is at hand), and nothing secret is written under <data-dir>.
 *
 * Bounds: a session lasts --comfy-session-ttl seconds (default 12 h);
 * at most COMFY_SESSIONS_MAX live at once, the one nearest its end leaving
 * for a new one; COMFY_FAILS_MAX failed sign-ins per client address a
 * minute, then 429 until the minute ends (before the key is even looked at,
 * so a 429 says nothing of the key).
 *
 * Where the cookie counts: only on the UI's API and websocket (the
 * /comfy/api/... and /comfy/ws paths, router.c) and on the index's redirect;
 * never on /v1/, /sdapi/ or ComfyUI's routes without /comfy, and a request
 * it signs in must pass svc_browser_cookie_ok (browser.c: no other site).
 */
#include "comfy.h"
#include "comfy_ui.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "auth.h"
#include "clock.h"
#include "http.h"
#include "server.h"
#include "tessera.h"
#include "util.h"

#define COMFY_SESSIONS_MAX 1024
#define COMFY_FAILS_MAX 10       /* failed sign-ins per address per window */
#define COMFY_FAIL_WINDOW 60.0   /* seconds */
#define COMFY_FAIL_ADDRS 256     /* addresses remembered */
#define COMFY_KEY_MAX 4096       /* bytes of a pasted key */
#define COMFY_TTL_DEFAULT 43200  /* 12 h */

typedef struct comfy_session {
    uint8_t hash[32]; /* SHA-256 of the token */
    size_t key;       /* row of s->keys (fixed for the server's life) */
    double expires;   /* svc_now_mono() */
} comfy_session;

typedef struct comfy_fail {
    char addr[64];
    double start; /* of the window */
    int n;
} comfy_fail;

struct svc_comfy_login {
    comfy_session v[COMFY_SESSIONS_MAX];
    size_t n;
    comfy_fail fails[COMFY_FAIL_ADDRS];
};

void svc_comfy_login_free(struct svc_comfy_login *l)
{
    if (l) {
        volatile uint8_t *w = (volatile uint8_t *)l;
        for (size_t i = 0; i < sizeof *l; i++)
            w[i] = 0;
    }
    free(l);
}

static struct svc_comfy_login *state(svc_server *s)
{
    if (!s->comfy_login)
        s->comfy_login = calloc(1, sizeof *s->comfy_login);
    return s->comfy_login;
}

static double ttl(const svc_server *s)
{
    return s->cfg.comfy_session_ttl_s > 0 ? s->cfg.comfy_session_ttl_s : COMFY_TTL_DEFAULT;
}

/* ------------------------------------------------------------ the cookie */

bool comfy_login_cookie_token(const char *header, char *out, size_t size)
{
    static const char name[] = COMFY_COOKIE "=";
    const size_t nn = sizeof name - 1;
    if (!header || size < COMFY_TOKEN_HEX + 1)
        return false;
    const char *p = header;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ';')
            p++;
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len == nn + COMFY_TOKEN_HEX && strncmp(p, name, nn) == 0) {
            bool hex = true;
            for (size_t i = 0; i < COMFY_TOKEN_HEX; i++) {
                char c = p[nn + i];
                hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
            }
            if (hex) {
                memcpy(out, p + nn, COMFY_TOKEN_HEX);
                out[COMFY_TOKEN_HEX] = '\0';
                return true;
            }
        }
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

/* The live session of the request's cookie (expired ones leave), or NULL. */
static comfy_session *find_session(svc_req *r)
{
    svc_server *s = r->srv;
    char token[COMFY_TOKEN_HEX + 1];
    if (s->keys.n == 0 || !s->comfy_login ||
        !comfy_login_cookie_token(svc_req_header(r, "Cookie"), token, sizeof token))
        return NULL;
    struct svc_comfy_login *l = s->comfy_login;
    uint8_t h[32];
    tsr_sha256(token, COMFY_TOKEN_HEX, h);
    const double now = svc_now_mono();
    comfy_session *hit = NULL;
    for (size_t i = 0; i < l->n;) {
        if (l->v[i].expires <= now) {
            l->v[i] = l->v[--l->n];
            continue;
        }
        volatile uint8_t diff = 0;
        for (size_t b = 0; b < 32; b++)
            diff |= (uint8_t)(h[b] ^ l->v[i].hash[b]);
        if (diff == 0)
            hit = &l->v[i];
        i++;
    }
    return hit;
}

const svc_key *svc_comfy_session_key(svc_req *r)
{
    comfy_session *e = find_session(r);
    return e && e->key < r->srv->keys.n ? &r->srv->keys.v[e->key] : NULL;
}

/* Secure when the browser reached us over TLS: the server speaks plain HTTP
 * itself, so only a proxy's X-Forwarded-Proto says so.  Trusting it from
 * anyone is safe: Secure only narrows where the browser sends the cookie,
 * so a forged header harms no one but the client that sent it. */
static bool over_tls(svc_req *r)
{
    const char *p = svc_req_header(r, "X-Forwarded-Proto");
    return p && strncasecmp(p, "https", 5) == 0 && (p[5] == '\0' || p[5] == ',' || p[5] == ' ');
}

static void set_cookie(svc_req *r, const char *value, long max_age)
{
    char c[256];
    snprintf(c, sizeof c, COMFY_COOKIE "=%s; Path=" COMFY_UI_ROOT "/; Max-Age=%ld; HttpOnly; "
             "SameSite=Strict%s", value, max_age, over_tls(r) ? "; Secure" : "");
    svc_req_add_header(r, "Set-Cookie", c);
    svc_req_add_header(r, "Cache-Control", "no-store");
}

/* ------------------------------------------------------- failed sign-ins */

static void peer(svc_req *r, char *out, size_t size)
{
    char *addr = NULL;
    ev_uint16_t port = 0;
    struct evhttp_connection *c = evhttp_request_get_connection(r->req);
    if (c)
        evhttp_connection_get_peer(c, &addr, &port);
    snprintf(out, size, "%s", addr ? addr : "?");
}

static comfy_fail *fail_slot(struct svc_comfy_login *l, const char *addr, bool make)
{
    comfy_fail *oldest = &l->fails[0];
    for (size_t i = 0; i < COMFY_FAIL_ADDRS; i++) {
        comfy_fail *f = &l->fails[i];
        if (f->addr[0] && strcmp(f->addr, addr) == 0)
            return f;
        if (!f->addr[0] || (oldest->addr[0] && f->start < oldest->start))
            oldest = f;
    }
    if (!make)
        return NULL;
    memset(oldest, 0, sizeof *oldest);
    snprintf(oldest->addr, sizeof oldest->addr, "%s", addr);
    oldest->start = svc_now_mono();
    return oldest;
}

/* ---------------------------------------------------------------- routes */

static const char k_page[] =
    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width\">\n"
    "<title>Sign in - ComfyUI on Tessera</title>\n"
    "<style>body{font:16px system-ui,sans-serif;background:#202020;color:#ddd;display:flex;"
    "justify-content:center;margin-top:15vh}form{width:22em}input{width:100%;box-sizing:"
    "border-box;padding:.5em;font:inherit}#msg{color:#f88;min-height:1.5em}</style>\n"
    "</head><body><form id=\"f\"><h1>ComfyUI</h1>\n"
    "<p><label for=\"key\">This server needs an API key. Paste yours:</label></p>\n"
    "<p><input id=\"key\" name=\"key\" type=\"password\" autocomplete=\"current-password\" "
    "autofocus required></p>\n<p><button type=\"submit\">Sign in</button></p>\n"
    "<p id=\"msg\" role=\"alert\"></p></form>\n"
    "<script>\n"
    "document.getElementById('f').addEventListener('submit', async (e) => {\n"
    "  e.preventDefault();\n"
    "  const msg = document.getElementById('msg');\n"
    "  msg.textContent = '';\n"
    "  let r;\n"
    "  try {\n"
    "    r = await fetch('login', {method: 'POST', headers: {'Content-Type': "
    "'application/json'},\n"
    "      body: JSON.stringify({key: document.getElementById('key').value.trim()})});\n"
    "  } catch (err) { msg.textContent = 'The server cannot be reached.'; return; }\n"
    "  if (r.ok) { location.replace('./'); return; }\n"
    "  let why = 'Sign-in failed (' + r.status + ').';\n"
    "  try { why = (await r.json()).error.message || why; } catch (err) {}\n"
    "  msg.textContent = why;\n"
    "});\n"
    "</script></body></html>\n";

static void page(svc_req *r)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        svc_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    evbuffer_add(b, k_page, sizeof k_page - 1);
    svc_req_add_header(r, "Cache-Control", "no-store");
    svc_req_add_header(r, "X-Frame-Options", "DENY");
    svc_req_add_header(r, "X-Content-Type-Options", "nosniff");
    svc_req_add_header(r, "Content-Security-Policy",
                       "default-src 'none'; script-src 'unsafe-inline'; style-src "
                       "'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'");
    svc_reply_buffer(r, 200, "text/html; charset=utf-8", b);
    evbuffer_free(b);
}

static bool keys_on(svc_req *r)
{
    if (r->srv->keys.n > 0 && r->srv->cfg.comfy_ui_dir)
        return true;
    svc_reply_error(r, 404, "not_found", NULL,
                    r->srv->cfg.comfy_ui_dir ? "keys are off here: the UI needs no sign-in "
                                               "(open /comfy/)"
                                             : "ComfyUI's web UI is not served here (start the "
                                               "server with --comfy-ui DIR)");
    return false;
}

/* The pasted key of a {"key": "..."} body: owned, or NULL (answered 400). */
static char *body_key(svc_req *r)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(r->req);
    size_t n = evbuffer_get_length(in);
    if (n == 0 || n > COMFY_KEY_MAX + 64) {
        svc_reply_error(r, 400, "invalid_request", "key", "the body must be {\"key\": \"...\"}");
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength((const char *)evbuffer_pullup(in, -1), n);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "key");
    char *key = NULL;
    if (cJSON_IsString(k) && k->valuestring[0] && strlen(k->valuestring) <= COMFY_KEY_MAX)
        key = strdup(k->valuestring);
    cJSON_Delete(j);
    if (!key)
        svc_reply_error(r, 400, "invalid_request", "key",
                        "the body must be {\"key\": \"...\"} with a key of 1..%d bytes",
                        COMFY_KEY_MAX);
    return key;
}

static void wipe_free(char *p)
{
    if (!p)
        return;
    volatile char *w = p;
    for (size_t i = 0; p[i]; i++)
        w[i] = 0;
    free(p);
}

static void sign_in(svc_req *r)
{
    svc_server *s = r->srv;
    struct svc_comfy_login *l = state(s);
    if (!l) {
        svc_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    char addr[64];
    peer(r, addr, sizeof addr);
    const double now = svc_now_mono();
    comfy_fail *f = fail_slot(l, addr, false);
    if (f && now - f->start >= COMFY_FAIL_WINDOW)
        memset(f, 0, sizeof *f), f = NULL;
    if (f && f->n >= COMFY_FAILS_MAX) {
        char after[32];
        snprintf(after, sizeof after, "%d", (int)(COMFY_FAIL_WINDOW - (now - f->start)) + 1);
        svc_req_add_header(r, "Retry-After", after);
        svc_reply_error(r, 429, "too_many_requests", NULL,
                        "too many failed sign-ins from this address; try again in %s s", after);
        return;
    }
    char *key = body_key(r);
    if (!key)
        return;
    size_t klen = strlen(key);
    char *hdr = malloc(klen + 8);
    const svc_key *k = NULL;
    if (hdr) {
        memcpy(hdr, "Bearer ", 7);
        memcpy(hdr + 7, key, klen + 1);
        k = svc_keys_check(&s->keys, hdr, false);
    }
    wipe_free(hdr);
    wipe_free(key);
    if (!k) {
        f = fail_slot(l, addr, true);
        f->n++;
        svc_reply_error(r, 401, "unauthorized", "key", "this is not a valid API key");
        return;
    }
    uint8_t raw[COMFY_TOKEN_HEX / 2];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        svc_reply_error(r, 500, "internal", NULL, "no random bytes for a session");
        return;
    }
    char token[COMFY_TOKEN_HEX + 1];
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(token + 2 * i, 3, "%02x", raw[i]);
    comfy_session *e;
    if (l->n < COMFY_SESSIONS_MAX) {
        e = &l->v[l->n++];
    } else { /* full: the one nearest its end makes room */
        e = &l->v[0];
        for (size_t i = 1; i < l->n; i++)
            if (l->v[i].expires < e->expires)
                e = &l->v[i];
    }
    tsr_sha256(token, COMFY_TOKEN_HEX, e->hash);
    e->key = (size_t)(k - s->keys.v);
    e->expires = now + ttl(s);
    set_cookie(r, token, (long)ttl(s));
    volatile char *w = token;
    for (size_t i = 0; i < sizeof token; i++)
        w[i] = 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", k->name);
    cJSON_AddNumberToObject(o, "expires_in", ttl(s));
    svc_reply_json(r, 200, o);
}

void svc_comfy_login(svc_req *r, const char *rest)
{
    (void)rest;
    if (!keys_on(r))
        return;
    if (strcmp(r->method, "POST") == 0)
        sign_in(r);
    else
        page(r);
}

void svc_comfy_logout(svc_req *r, const char *rest)
{
    (void)rest;
    if (!keys_on(r))
        return;
    comfy_session *e = find_session(r);
    if (e && !svc_browser_cookie_ok(r))
        return;
    if (e) {
        struct svc_comfy_login *l = r->srv->comfy_login;
        *e = l->v[--l->n];
    }
    set_cookie(r, "", 0);
    svc_reply_buffer(r, 204, NULL, NULL);
}

bool svc_comfy_ui_signed_out(svc_req *r)
{
    if (r->srv->keys.n == 0 || svc_comfy_session_key(r))
        return false;
    svc_req_add_header(r, "Location", COMFY_UI_ROOT "/login");
    svc_req_add_header(r, "Cache-Control", "no-store");
    svc_reply_buffer(r, 302, NULL, NULL);
    return true;
}
