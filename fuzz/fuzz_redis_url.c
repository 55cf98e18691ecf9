/*
 * fuzz/fuzz_redis_url.c - the --queue URL parser (service/queue/redis/redis_url.c):
 * any bytes, no crash, and an accepted URL has a host and a port in range,
 * TLS exactly when it starts with rediss://, no password, and a user only
 * when it has an '@'; a refusal's message never holds what was typed
 * between ':' and '@' (a password), and neither does the redacted URL.
 */
#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "redis_url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    svc_redis_url u;
    char err[128];
    if (svc_redis_url_parse(s, &u, err, sizeof err) == 0) {
        assert(u.host[0] != '\0');
        assert(u.port >= 1 && u.port <= 65535);
        assert(u.db >= 0 && u.db <= 65535);
        assert(u.tls == (strncmp(s, "rediss://", 9) == 0));
        assert(u.password[0] == '\0');
        assert(!u.user[0] || strchr(s, '@'));
        assert(!strchr(u.user, ':') && !strchr(u.user, '@'));
    } else {
        assert(err[0] != '\0');
    }
    /* a password typed in the URL (between the first ':' after "://" and
     * the last '@') is replaced by "***" in the redacted URL, and is not in
     * the message: checked when it has a byte no message has (a control or
     * non-ASCII byte; the messages are fixed English text) */
    char shown[512];
    svc_redis_url_redact(s, shown, sizeof shown);
    const char *at = strrchr(s, '@'), *sch = strstr(s, "://");
    const char *colon = at && sch && sch < at ? memchr(sch + 3, ':', (size_t)(at - sch - 3)) : NULL;
    if (colon && strlen(s) < 400) {
        size_t pre = (size_t)(colon - s);
        assert(strncmp(shown, s, pre) == 0 && strcmp(shown + pre + 4, at) == 0);
        assert(strncmp(shown + pre, ":***", 4) == 0);
        bool odd = false;
        for (const char *c = colon + 1; c < at; c++)
            odd |= (unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f;
        if (odd && at - colon - 1 < 64) {
            char secret[64];
            memcpy(secret, colon + 1, (size_t)(at - colon - 1));
            secret[at - colon - 1] = '\0';
            assert(!strstr(err, secret));
        }
    } else if (strlen(s) < 400) {
        assert(strcmp(shown, s) == 0); /* nothing to hide: shown as typed */
    }
    free(s);
    return 0;
}
