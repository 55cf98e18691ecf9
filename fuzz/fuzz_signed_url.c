/*
 * fuzz/fuzz_signed_url.c - the signed-URL check (service/http/signed.c,
 * svc_url_verify), which reads the query of every image request with keys
 * on: any bytes, no crash; the input's first line is the path, the rest
 * the query.  A verdict of OK means the query holds exactly one md5 and
 * one expires and the md5 is the signature of that path and expiry; a URL
 * svc_url_format writes for the same path is always OK before its expiry,
 * and stops being OK when any byte of its signature changes.
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4000)
        return 0;
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    char *nl = strchr(s, '\n');
    const char *path = s, *query = NULL;
    if (nl) {
        *nl = '\0';
        query = nl + 1;
    }
    svc_url_signer u;
    memset(&u, 0, sizeof u);
    u.on = true;
    snprintf(u.secret, sizeof u.secret, "fuzz-secret-0123456789");
    u.secret_len = strlen(u.secret);
    u.ttl = 3600;
    long long e = -1;
    svc_url_verdict v = svc_url_verify(&u, path, query, 1.8e9, &e);
    assert(v >= SVC_URL_UNSIGNED && v <= SVC_URL_EXPIRED);
    assert(v == SVC_URL_OK ? e >= (long long)1.8e9 : e == 0);
    if (v == SVC_URL_OK) {
        assert(strcasestr(query, "md5=") != NULL && strcasestr(query, "expires=") != NULL);
    }
    /* round trip: what the server writes for this path, it takes */
    char url[8192];
    svc_url_format(&u, path, 1.8e9 - 10, url, sizeof url);
    const char *q = strrchr(url, '?');
    if (q && strlen(path) < 4000 && !strchr(path, '?')) {
        char p2[4096];
        snprintf(p2, sizeof p2, "%.*s", (int)(q - url), url);
        assert(svc_url_verify(&u, p2, q + 1, 1.8e9, &e) == SVC_URL_OK);
        char *sig = strstr(q, "md5=") + 4;
        sig[size % SVC_URL_SIG_LEN] ^= 1;
        assert(svc_url_verify(&u, p2, q + 1, 1.8e9, &e) == SVC_URL_BAD);
    }
    free(s);
    return 0;
}
