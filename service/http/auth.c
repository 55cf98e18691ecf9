/*
 * service/http/auth.c - see auth.h.
 */
#include "auth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "util.h"

int svc_auth_load(const char *path, char **token, size_t *len)
{
    char *text = NULL;
    size_t n = 0;
    *token = NULL;
    *len = 0;
    int rc = svc_read_file(path, &text, &n, 4096);
    if (rc < 0) {
        SVC_ERROR("--token-file %s: %s", path,
                  rc == -EFBIG ? "larger than 4 KiB" : strerror(-rc));
        return -1;
    }
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ' ||
                 text[n - 1] == '\t'))
        text[--n] = '\0';
    if (n == 0 || strlen(text) != n || strchr(text, '\n')) {
        SVC_ERROR("--token-file %s: the file must hold one token on one line", path);
        free(text);
        return -1;
    }
    *token = text;
    *len = n;
    return 0;
}

bool svc_auth_check(const char *token, size_t len, const char *header)
{
    static const char prefix[] = "Bearer ";
    if (!header || strncasecmp(header, prefix, sizeof prefix - 1) != 0)
        return false;
    const char *got = header + sizeof prefix - 1;
    size_t n = strlen(got);
    /* no early exit on the first difference, nor on the length */
    volatile unsigned char diff = (unsigned char)(n != len);
    for (size_t i = 0; i < len; i++)
        diff |= (unsigned char)(token[i] ^ (i < n ? got[i] : 0));
    return diff == 0;
}

/* Same time whatever the input, as above. */
static bool same_token(const char *token, size_t len, const char *got, size_t n)
{
    volatile unsigned char diff = (unsigned char)(n != len);
    for (size_t i = 0; i < len; i++)
        diff |= (unsigned char)(token[i] ^ (i < n ? got[i] : 0));
    return diff == 0;
}

bool svc_auth_check_basic(const char *token, size_t len, const char *header)
{
    static const char prefix[] = "Basic ";
    if (!header || strncasecmp(header, prefix, sizeof prefix - 1) != 0)
        return false;
    const char *b64 = header + sizeof prefix - 1;
    while (*b64 == ' ')
        b64++;
    uint8_t *raw = NULL;
    size_t n = 0;
    char why[64];
    if (strlen(b64) > 4096 || !svc_base64_decode(b64, strlen(b64), &raw, &n, why, sizeof why))
        return false;
    /* user:password; the user is not checked */
    const char *colon = memchr(raw, ':', n);
    bool ok = false;
    if (colon) {
        const char *pw = colon + 1;
        ok = same_token(token, len, pw, n - (size_t)(pw - (const char *)raw));
    }
    free(raw);
    return ok;
}
