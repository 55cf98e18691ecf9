/*
 * text/prompt_lora.c - taking <lora:...> tags out of a prompt.
 *
 * Why this shape: A1111 matches extra-network tags with <(\w+):([^>]+)>,
 * splits the inside on ':', takes the first item as the name, then
 * positional multipliers (text encoder first, UNet second, the UNet
 * defaulting to the text encoder's) or named ones (te=, unet=), and removes
 * the tag from the text that is encoded.  This is that, for the `lora` and
 * `lyco` kinds only: other <kind:...> tags (hypernetworks) are left in the
 * text, since nothing here would act on them.  One pass, no allocation but
 * the stripped copy, bounded by the prompt's length.
 */
#include "text/prompt_lora.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static bool parse_num(const char *s, size_t n, double *v)
{
    char buf[64];
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    *v = strtod(buf, &end);
    return *end == '\0' && errno == 0 && isfinite(*v) && fabs(*v) <= 1000.0;
}

/* The inside of one tag (after "lora:", up to '>'). */
static int parse_tag(const char *s, size_t n, tsr_prompt_lora *out)
{
    memset(out, 0, sizeof *out);
    size_t i = 0, item = 0;
    bool have_te = false, have_unet = false;
    double pos[2] = {0};
    int npos = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != ':')
            j++;
        const char *it = s + i;
        const size_t len = j - i;
        if (item == 0) {
            size_t a = 0, b = len;
            while (a < b && it[a] == ' ')
                a++;
            while (b > a && it[b - 1] == ' ')
                b--;
            if (b == a || b - a > TSR_PROMPT_LORA_NAME_MAX)
                return tsr_errorf(TSR_ERR_INVALID, "prompt: <lora:%.*s>: the name must be 1..%d "
                                  "bytes", (int)(n > 200 ? 200 : n), s, TSR_PROMPT_LORA_NAME_MAX);
            memcpy(out->name, it + a, b - a);
            out->name[b - a] = '\0';
        } else {
            const char *eq = memchr(it, '=', len);
            double v;
            if (eq) {
                const size_t kl = (size_t)(eq - it);
                if (!parse_num(eq + 1, len - kl - 1, &v))
                    goto bad;
                if (kl == 2 && memcmp(it, "te", 2) == 0)
                    out->te = v, have_te = true;
                else if (kl == 4 && memcmp(it, "unet", 4) == 0)
                    out->unet = v, have_unet = true;
                /* other named items (dyn=) are accepted and ignored */
            } else {
                if (!parse_num(it, len, &v))
                    goto bad;
                if (npos < 2)
                    pos[npos] = v;
                npos++;
            }
        }
        item++;
        i = j + 1;
    }
    if (!have_te)
        out->te = npos >= 1 ? pos[0] : 1.0;
    if (!have_unet)
        out->unet = npos >= 2 ? pos[1] : out->te;
    return TSR_OK;
bad:
    return tsr_errorf(TSR_ERR_INVALID, "prompt: <lora:%.*s>: a multiplier is not a number "
                      "in -1000..1000", (int)(n > 200 ? 200 : n), s);
}

int tsr_prompt_take_loras(const char *prompt, char **stripped, tsr_prompt_lora *out, int max,
                          int *n)
{
    *stripped = NULL;
    *n = 0;
    if (!prompt)
        return tsr_errorf(TSR_ERR_INVALID, "prompt: NULL");
    const size_t len = strlen(prompt);
    char *dst = malloc(len + 1);
    if (!dst)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    size_t o = 0;
    int rc = TSR_OK;
    for (size_t i = 0; i < len;) {
        size_t k = 0;
        if (prompt[i] == '<' && (strncmp(prompt + i + 1, "lora:", 5) == 0 ||
                                 strncmp(prompt + i + 1, "lyco:", 5) == 0))
            k = 6;
        const char *close = k ? strchr(prompt + i + k, '>') : NULL;
        if (!close || close == prompt + i + k) {
            dst[o++] = prompt[i++];
            continue;
        }
        if (*n >= max) {
            rc = tsr_errorf(TSR_ERR_RANGE, "prompt: more than %d <lora:...> tags", max);
            goto fail;
        }
        TSR_CHECK_GOTO(rc, parse_tag(prompt + i + k, (size_t)(close - (prompt + i + k)), &out[*n]),
                       fail);
        (*n)++;
        i = (size_t)(close - prompt) + 1;
    }
    dst[o] = '\0';
    *stripped = dst;
    return TSR_OK;
fail:
    free(dst);
    *n = 0;
    return rc;
}
