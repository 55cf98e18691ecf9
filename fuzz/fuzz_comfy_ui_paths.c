/*
 * fuzz/fuzz_comfy_ui_paths.c - the two path checks of ComfyUI's web UI
 * (service/api/comfy/comfy_ui.h): comfy_ui_path_ok, which every file under
 * /comfy/ passes before a name reaches openat, and comfy_userdata_path_ok,
 * which every user data path passes before it is joined to the user's
 * folder.  Any bytes, no crash; and what either accepts cannot leave its
 * folder: not empty, not absolute, no empty name ("a//b"), no name "." or
 * "..", none starting with '.', no byte below 0x20, no DEL, no '\', within
 * the length and depth bounds; a user data path also has none of
 * : * ? " < > |.  Each is checked here by walking the accepted string
 * again, independently of the code under test.  The same bytes are also a
 * Cookie header for comfy_login_cookie_token (the web UI's session cookie):
 * a token it finds is 64 of [0-9a-f], stands in the header right after
 * "tessera_comfy=", and ends there (at ';', blanks or the end).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comfy_ui.h"

static void must(bool cond)
{
    if (!cond)
        abort();
}

/* The invariants of an accepted path (see the top). */
static void check_accepted(const char *s, size_t max_len, int max_names, bool userdata)
{
    size_t len = strlen(s);
    must(len >= 1 && len <= max_len);
    must(s[0] != '/' && s[len - 1] != '/');
    int names = 0;
    const char *p = s;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        must(n >= 1 && n <= 255);
        must(p[0] != '.'); /* so neither "." nor ".." nor a hidden file */
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)p[i];
            must(c >= 0x20 && c != 0x7f && c != '\\');
            if (userdata)
                must(!strchr(":*?\"<>|", c));
        }
        names++;
        if (!slash)
            break;
        p = slash + 1;
    }
    must(names <= max_names);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0'; /* an embedded NUL ends the string, as in a decoded URL */
    if (comfy_ui_path_ok(s))
        check_accepted(s, 1024, 32, false);
    if (comfy_userdata_path_ok(s))
        check_accepted(s, 512, 16, true);
    /* a user data path is always a valid static path too (stricter rules) */
    if (comfy_userdata_path_ok(s))
        must(comfy_ui_path_ok(s));
    char tok[COMFY_TOKEN_HEX + 1];
    memset(tok, 'Z', sizeof tok);
    if (comfy_login_cookie_token(s, tok, sizeof tok)) {
        must(strlen(tok) == COMFY_TOKEN_HEX);
        for (size_t i = 0; i < COMFY_TOKEN_HEX; i++)
            must((tok[i] >= '0' && tok[i] <= '9') || (tok[i] >= 'a' && tok[i] <= 'f'));
        const char *at = strstr(s, COMFY_COOKIE "=");
        bool seen = false;
        for (; at && !seen; at = strstr(at + 1, COMFY_COOKIE "=")) {
            const char *v = at + strlen(COMFY_COOKIE "=");
            char end = v[COMFY_TOKEN_HEX < strlen(v) ? COMFY_TOKEN_HEX : strlen(v)];
            seen = strncmp(v, tok, COMFY_TOKEN_HEX) == 0 &&
                   (end == '\0' || end == ';' || end == ' ' || end == '\t');
        }
        must(seen);
    } else {
        must(tok[0] == 'Z'); /* nothing written */
    }
    free(s);
    return 0;
}
