/*
 * service/http/auth.c - see auth.h.
 *
 * The key file is read whole at start and refused whole on any bad line
 * (named by its number), so a typo never silently drops a key or, worse,
 * leaves a server open that its operator believes closed.
 */
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <event2/buffer.h>

#include "codec.h"
#include "files.h"
#include "log.h"
#include "service.h"
#include "signed.h"
#include "tessera.h"
#include "util.h"

static void set_err(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
}

bool svc_key_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= SVC_KEY_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && !strchr("_.-", name[i]))
            return false;
    return true;
}

static void warn_mode(const char *flag, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && (st.st_mode & 077))
        SVC_WARN("%s %s can be read by group or others (mode %03o); chmod 600 it", flag, path,
                 (unsigned)(st.st_mode & 0777));
}

static int add_key(svc_keys *k, const char *name, svc_key_role role, const uint8_t hash[32])
{
    svc_key *v = realloc(k->v, (k->n + 1) * sizeof *v);
    if (!v)
        return -1;
    k->v = v;
    svc_key *e = &v[k->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->role = role;
    memcpy(e->hash, hash, 32);
    return 0;
}

static int hex_nibble(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One line `NAME ROLE SHA256HEX` (comments and blanks already gone). */
static int parse_line(char *line, svc_keys *k, const char *path, int no, char *err, size_t size)
{
    char *save = NULL;
    char *name = strtok_r(line, " \t", &save);
    char *role = strtok_r(NULL, " \t", &save);
    char *hex = strtok_r(NULL, " \t", &save);
    char *more = strtok_r(NULL, " \t", &save);
    if (!name || !role || !hex || more) {
        set_err(err, size, "--keys %s line %d: expected NAME ROLE SHA256HEX", path, no);
        return -1;
    }
    if (!svc_key_name_ok(name)) {
        set_err(err, size, "--keys %s line %d: the name must be 1..63 of A-Z a-z 0-9 _ . -",
                path, no);
        return -1;
    }
    svc_key_role r;
    if (strcmp(role, "user") == 0)
        r = SVC_KEY_USER;
    else if (strcmp(role, "admin") == 0)
        r = SVC_KEY_ADMIN;
    else {
        set_err(err, size, "--keys %s line %d: the role must be user or admin, not '%s'", path,
                no, role);
        return -1;
    }
    uint8_t hash[32];
    bool ok = strlen(hex) == 64;
    for (size_t i = 0; ok && i < 32; i++) {
        int hi = hex_nibble(hex[2 * i]), lo = hex_nibble(hex[2 * i + 1]);
        ok = hi >= 0 && lo >= 0;
        hash[i] = (uint8_t)((hi << 4) | (lo & 15));
    }
    if (!ok) {
        set_err(err, size, "--keys %s line %d: the hash must be 64 hex digits (SHA-256)", path,
                no);
        return -1;
    }
    for (size_t i = 0; i < k->n; i++)
        if (strcmp(k->v[i].name, name) == 0 || memcmp(k->v[i].hash, hash, 32) == 0) {
            set_err(err, size, "--keys %s line %d: the name or the key of '%s' is already there",
                    path, no, k->v[i].name);
            return -1;
        }
    if (add_key(k, name, r, hash) < 0) {
        set_err(err, size, "out of memory");
        return -1;
    }
    return 0;
}

static int load_keys(const char *path, svc_keys *k, char *err, size_t size)
{
    char *text = NULL;
    size_t n = 0;
    int rc = svc_read_file(path, &text, &n, 1 << 22);
    if (rc < 0) {
        set_err(err, size, "--keys %s: %s", path, rc == -EFBIG ? "larger than 4 MiB" : strerror(-rc));
        return -1;
    }
    if (strlen(text) != n) {
        set_err(err, size, "--keys %s: the file holds a NUL byte", path);
        free(text);
        return -1;
    }
    int no = 0;
    char *p = text;
    rc = 0;
    while (p && *p && rc == 0) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        no++;
        char *hash = strchr(p, '#');
        if (hash)
            *hash = '\0';
        size_t len = strlen(p);
        while (len && isspace((unsigned char)p[len - 1]))
            p[--len] = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p)
            rc = parse_line(p, k, path, no, err, size);
        p = nl ? nl + 1 : NULL;
    }
    free(text);
    return rc;
}

static int load_token(const char *path, svc_keys *k, char *err, size_t size)
{
    char *text = NULL;
    size_t n = 0;
    int rc = svc_read_file(path, &text, &n, 4096);
    if (rc < 0) {
        set_err(err, size, "--token-file %s: %s", path,
                rc == -EFBIG ? "larger than 4 KiB" : strerror(-rc));
        return -1;
    }
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ' ||
                 text[n - 1] == '\t'))
        text[--n] = '\0';
    rc = -1;
    if (n == 0 || strlen(text) != n || strchr(text, '\n'))
        set_err(err, size, "--token-file %s: the file must hold one token on one line", path);
    else if (n < SVC_TOKEN_MIN)
        set_err(err, size, "--token-file %s: the token has %zu bytes, fewer than %d (make one "
                "with `tessera keys new`, or e.g. `head -c 24 /dev/urandom | base64`)",
                path, n, SVC_TOKEN_MIN);
    else {
        uint8_t hash[32];
        tsr_sha256(text, n, hash);
        rc = add_key(k, "admin", SVC_KEY_ADMIN, hash);
        if (rc < 0)
            set_err(err, size, "out of memory");
    }
    /* the token itself leaves memory now: only its hash is kept */
    volatile char *w = text;
    for (size_t i = 0; i < n; i++)
        w[i] = 0;
    free(text);
    return rc;
}

int svc_keys_load(const char *keys_path, const char *token_path, bool warn, svc_keys *out,
                  char *err, size_t err_size)
{
    out->v = NULL;
    out->n = 0;
    if (err_size)
        err[0] = '\0';
    if (keys_path && load_keys(keys_path, out, err, err_size) < 0)
        goto fail;
    if (keys_path && out->n == 0) {
        set_err(err, err_size, "--keys %s: no keys (make one with `tessera keys new NAME --keys "
                "%s`)", keys_path, keys_path);
        goto fail;
    }
    if (token_path) {
        for (size_t i = 0; i < out->n; i++)
            if (strcmp(out->v[i].name, "admin") == 0) {
                set_err(err, err_size, "--keys %s names a key 'admin', the name --token-file's "
                        "key takes", keys_path);
                goto fail;
            }
        if (load_token(token_path, out, err, err_size) < 0)
            goto fail;
    }
    if (warn && keys_path)
        warn_mode("--keys", keys_path);
    if (warn && token_path)
        warn_mode("--token-file", token_path);
    return 0;
fail:
    svc_keys_free(out);
    return -1;
}

void svc_keys_free(svc_keys *k)
{
    free(k->v);
    k->v = NULL;
    k->n = 0;
}

/* Every row is compared, each in constant time; the index of the match is
 * picked with masks, not a branch on the secret. */
static const svc_key *find(const svc_keys *k, const char *key, size_t len)
{
    uint8_t h[32];
    tsr_sha256(key, len, h);
    size_t found = k->n;
    for (size_t i = 0; i < k->n; i++) {
        volatile uint8_t diff = 0;
        for (size_t b = 0; b < 32; b++)
            diff |= (uint8_t)(h[b] ^ k->v[i].hash[b]);
        /* all ones when diff == 0 and nothing matched before */
        size_t hit = (size_t)0 - (size_t)(((unsigned)diff - 1u) >> 8 & 1u);
        size_t unset = (size_t)0 - (size_t)(found == k->n);
        found = (found & ~(hit & unset)) | (i & hit & unset);
    }
    return found < k->n ? &k->v[found] : NULL;
}

static const svc_key *check_basic(const svc_keys *k, const char *b64)
{
    while (*b64 == ' ')
        b64++;
    uint8_t *raw = NULL;
    size_t n = 0;
    char why[64];
    if (strlen(b64) > 4096 || !svc_base64_decode(b64, strlen(b64), &raw, &n, why, sizeof why))
        return NULL;
    /* user:password; the user is not checked */
    const char *colon = memchr(raw, ':', n);
    const svc_key *key = NULL;
    if (colon) {
        const char *pw = colon + 1;
        key = find(k, pw, n - (size_t)(pw - (const char *)raw));
    }
    free(raw);
    return key;
}

const svc_key *svc_keys_check(const svc_keys *k, const char *header, bool basic_ok)
{
    static const char bearer[] = "Bearer ", basic[] = "Basic ";
    if (!header || k->n == 0)
        return NULL;
    if (strncasecmp(header, bearer, sizeof bearer - 1) == 0) {
        const char *got = header + sizeof bearer - 1;
        return find(k, got, strlen(got));
    }
    if (basic_ok && strncasecmp(header, basic, sizeof basic - 1) == 0)
        return check_basic(k, header + sizeof basic - 1);
    return NULL;
}

bool svc_key_sees(const svc_key *k, const char *owner)
{
    return !k || k->role == SVC_KEY_ADMIN || (owner && owner[0] && strcmp(owner, k->name) == 0);
}

const char *svc_key_name(const svc_key *k)
{
    return k ? k->name : "";
}

void svc_keys_count(svc_keys *k, const char *owner, unsigned jobs, unsigned images)
{
    for (size_t i = 0; owner && owner[0] && i < k->n; i++)
        if (strcmp(k->v[i].name, owner) == 0) {
            k->v[i].jobs += jobs;
            k->v[i].images += images;
            return;
        }
}

void svc_keys_metrics(const svc_keys *k, struct evbuffer *out)
{
    if (k->n == 0)
        return;
    evbuffer_add_printf(out, "# HELP tessera_key_jobs_total Jobs accepted, per API key.\n"
                             "# TYPE tessera_key_jobs_total counter\n");
    for (size_t i = 0; i < k->n; i++)
        evbuffer_add_printf(out, "tessera_key_jobs_total{key=\"%s\"} %llu\n", k->v[i].name,
                            k->v[i].jobs);
    evbuffer_add_printf(out, "# HELP tessera_key_images_total Images stored, per API key.\n"
                             "# TYPE tessera_key_images_total counter\n");
    for (size_t i = 0; i < k->n; i++)
        evbuffer_add_printf(out, "tessera_key_images_total{key=\"%s\"} %llu\n", k->v[i].name,
                            k->v[i].images);
}

bool svc_host_is_loopback(const char *host)
{
    return host && (strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 ||
                    strcmp(host, "[::1]") == 0 || strncmp(host, "127.", 4) == 0);
}

int tsr_service_check_auth(const tsr_service_config *c, char *err, size_t err_size)
{
    svc_keys k;
    if (svc_keys_load(c->keys_file, c->token_file, false, &k, err, err_size) < 0)
        return -1;
    const bool keys = k.n > 0;
    svc_keys_free(&k);
    if (c->url_secret_file && !keys) {
        set_err(err, err_size, "--url-secret-file needs --keys or --token-file: image URLs are "
                "signed only with keys on (docs/security.md)");
        return -1;
    }
    if (c->url_secret_file) {
        char secret[SVC_URL_SECRET_MAX + 1];
        size_t n = 0;
        int rc = svc_url_secret_read("--url-secret-file", c->url_secret_file, false, secret, &n,
                                     err, err_size);
        volatile char *w = secret;
        for (size_t i = 0; i < sizeof secret; i++)
            w[i] = 0;
        if (rc < 0)
            return -1;
    }
    const char *host = c->host ? c->host : "127.0.0.1";
    if (!keys && !c->insecure_no_auth && !svc_host_is_loopback(host)) {
        set_err(err, err_size,
                "protected mode: listening on %s (not loopback) without --keys or --token-file "
                "lets anyone who reaches the port use the server; make keys with `tessera keys "
                "new NAME --keys FILE`, or pass --insecure-no-auth (docs/security.md)",
                host);
        return -1;
    }
    return 0;
}
