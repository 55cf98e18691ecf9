/*
 * service/http/signed.c - see signed.h.
 *
 * The checks mirror nginx's secure_link so that the edge and the origin
 * agree on every URL: the signature covers the expires text as sent, the
 * expiry passes while expires >= now, argument names are case-insensitive.
 * Where they could differ (a repeated argument, which nginx reads first
 * come), the origin refuses: it fails closed.
 */
#include "signed.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "clock.h"
#include "files.h"
#include "log.h"
#include "md5.h"

static const char k_b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* base64url without padding; out has room for 4 * ceil(n / 3) + 1. */
static void b64url(const uint8_t *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[o++] = k_b64url[v >> 18 & 63];
        out[o++] = k_b64url[v >> 12 & 63];
        if (i + 1 < n)
            out[o++] = k_b64url[v >> 6 & 63];
        if (i + 2 < n)
            out[o++] = k_b64url[v & 63];
    }
    out[o] = '\0';
}

static bool secret_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (c && strchr("+/=-_", c));
}

int svc_url_secret_read(const char *flag, const char *path, bool warn, char *secret,
                        size_t *len, char *err, size_t err_size)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, err_size, "%s %s: %s", flag, path, strerror(errno));
        return -1;
    }
    if (st.st_mode & 007) {
        snprintf(err, err_size, "%s %s can be read by others (mode %03o): chmod 600 it", flag,
                 path, (unsigned)(st.st_mode & 0777));
        return -1;
    }
    char *text = NULL;
    size_t n = 0;
    int rc = svc_read_file(path, &text, &n, 4096);
    if (rc < 0) {
        snprintf(err, err_size, "%s %s: %s", flag, path,
                 rc == -EFBIG ? "larger than 4 KiB" : strerror(-rc));
        return -1;
    }
    while (n && strchr("\r\n \t", text[n - 1]))
        text[--n] = '\0';
    rc = -1;
    size_t bad = 0;
    while (bad < n && secret_char(text[bad]))
        bad++;
    if (n < SVC_URL_SECRET_MIN || n > SVC_URL_SECRET_MAX)
        snprintf(err, err_size, "%s %s: the secret has %zu characters; it needs %d to %d (make "
                 "one with: head -c 32 /dev/urandom | base64 | tr -d =)", flag, path, n,
                 SVC_URL_SECRET_MIN, SVC_URL_SECRET_MAX);
    else if (bad < n)
        snprintf(err, err_size, "%s %s: character %zu is not a base64 one (A-Z a-z 0-9 + / = - "
                 "_): the secret goes into nginx's configuration as it is", flag, path, bad + 1);
    else {
        memcpy(secret, text, n + 1);
        *len = n;
        rc = 0;
        if (warn && (st.st_mode & 070))
            SVC_WARN("%s %s can be read by group (mode %03o); chmod 600 it", flag, path,
                     (unsigned)(st.st_mode & 0777));
    }
    volatile char *w = text;
    for (size_t i = 0; i < n; i++)
        w[i] = 0;
    free(text);
    return rc;
}

/* <data_dir>/url-secret: read it, or make it (32 bytes of getrandom). */
static int data_dir_secret(svc_url_signer *u, const char *path, char *err, size_t size)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return svc_url_secret_read("the URL secret", path, true, u->secret, &u->secret_len, err,
                                   size);
    uint8_t raw[32];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        snprintf(err, size, "getrandom: %s", strerror(errno));
        return -1;
    }
    b64url(raw, sizeof raw, u->secret);
    u->secret_len = strlen(u->secret);
    memset(raw, 0, sizeof raw);
    char line[SVC_URL_SECRET_MAX + 2];
    snprintf(line, sizeof line, "%s\n", u->secret);
    int rc = svc_write_file_atomic(path, line, strlen(line));
    if (rc < 0) {
        snprintf(err, size, "cannot write %s: %s", path, strerror(-rc));
        return -1;
    }
    SVC_INFO("signed URLs: made a new secret in %s", path);
    return 0;
}

int svc_url_signer_start(svc_url_signer *u, const char *secret_file, const char *data_dir,
                         long long ttl, char *err, size_t err_size)
{
    memset(u, 0, sizeof *u);
    u->ttl = ttl > 0 ? ttl : 86400;
    char own[4096], snippet[4096];
    snprintf(own, sizeof own, "%s/url-secret", data_dir);
    snprintf(snippet, sizeof snippet, "%s/url-secret.nginx", data_dir);
    int rc = secret_file ? svc_url_secret_read("--url-secret-file", secret_file, true, u->secret,
                                               &u->secret_len, err, err_size)
                         : data_dir_secret(u, own, err, err_size);
    if (rc < 0)
        return -1;
    char text[SVC_URL_SECRET_MAX + 200];
    snprintf(text, sizeof text,
             "# written by tessera serve at each start: the secret of its signed URLs\n"
             "# (docs/security.md); include it in nginx's server block\n"
             "set $tessera_url_secret \"%s\";\n",
             u->secret);
    rc = svc_write_file_atomic(snippet, text, strlen(text));
    if (rc < 0) {
        snprintf(err, err_size, "cannot write %s: %s", snippet, strerror(-rc));
        return -1;
    }
    u->on = true;
    SVC_INFO("signed URLs: secret %s, lifetime %lld s; nginx: include %s",
             secret_file ? secret_file : own, u->ttl, snippet);
    return 0;
}

long long svc_url_expires(const svc_url_signer *u, double created, double now)
{
    const long long ttl = u->ttl > 0 ? u->ttl : 1;
    const long long base = (long long)floor(created), t = (long long)floor(now);
    const long long half = (ttl + 1) / 2;
    long long e = base + ttl;
    if (e - t < half) {
        long long k = (t + half - base + ttl - 1) / ttl; /* the first window with half left */
        e = base + k * ttl;
    }
    return e;
}

void svc_url_signature(const svc_url_signer *u, const char *path, const char *expires,
                       char sig[SVC_URL_SIG_LEN + 1])
{
    char buf[2 * 4096];
    int n = snprintf(buf, sizeof buf, "%s%s %s", expires, path, u->secret);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    uint8_t d[16];
    svc_md5(buf, len, d);
    b64url(d, sizeof d, sig);
}

void svc_url_format(const svc_url_signer *u, const char *path, double created, char *buf,
                    size_t size)
{
    if (!u || !u->on) {
        snprintf(buf, size, "%s", path);
        return;
    }
    char exp[24], sig[SVC_URL_SIG_LEN + 1];
    snprintf(exp, sizeof exp, "%lld", svc_url_expires(u, created, svc_now_unix()));
    svc_url_signature(u, path, exp, sig);
    snprintf(buf, size, "%s?md5=%s&expires=%s", path, sig, exp);
}

/* The value of argument `name` in query (first NUL-free span up to '&'). */
typedef struct arg {
    const char *v;
    size_t n;
    int count;
} arg;

static void find_arg(const char *query, const char *name, arg *a)
{
    const size_t nl = strlen(name);
    a->v = NULL;
    a->n = 0;
    a->count = 0;
    for (const char *p = query; p && *p;) {
        const char *end = strchr(p, '&');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > nl && p[nl] == '=' && strncasecmp(p, name, nl) == 0) {
            if (a->count++ == 0) {
                a->v = p + nl + 1;
                a->n = len - nl - 1;
            }
        }
        p = end ? end + 1 : NULL;
    }
}

svc_url_verdict svc_url_verify(const svc_url_signer *u, const char *path, const char *query,
                               double now, long long *expires)
{
    arg md5, exp;
    *expires = 0;
    find_arg(query, "md5", &md5);
    find_arg(query, "expires", &exp);
    if (md5.count == 0 && exp.count == 0)
        return SVC_URL_UNSIGNED;
    if (!u->on || md5.count != 1 || exp.count != 1 || md5.n != SVC_URL_SIG_LEN || exp.n == 0 ||
        exp.n > 18)
        return SVC_URL_BAD;
    char etext[20];
    memcpy(etext, exp.v, exp.n);
    etext[exp.n] = '\0';
    long long e = 0;
    for (size_t i = 0; i < exp.n; i++) {
        if (etext[i] < '0' || etext[i] > '9')
            return SVC_URL_BAD;
        e = e * 10 + (etext[i] - '0');
    }
    if (e <= 0) /* nginx: not a time */
        return SVC_URL_BAD;
    char want[SVC_URL_SIG_LEN + 1];
    svc_url_signature(u, path, etext, want);
    volatile unsigned char diff = 0;
    for (size_t i = 0; i < SVC_URL_SIG_LEN; i++)
        diff |= (unsigned char)(want[i] ^ md5.v[i]);
    if (diff)
        return SVC_URL_BAD;
    if (e < (long long)floor(now))
        return SVC_URL_EXPIRED;
    *expires = e;
    return SVC_URL_OK;
}
