/*
 * cli/lora_opts.c - `tessera generate --lora NAME[:W[:W_UNET]][,...]`.
 *
 * Why through the prompt parser: the flag means exactly what the prompt's
 * <lora:NAME:W[:W_UNET]> tags mean (A1111's order: the text encoders'
 * multiplier, then the UNet's, which defaults to the first), so each item
 * is wrapped in a tag and read by the same code, and the two ways of
 * asking cannot drift apart.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "generate.h"
#include "text/prompt_lora.h"

int gen_parse_loras(const char *arg, tsr_lora_spec *out, int max, int *n, char **buf)
{
    *n = 0;
    *buf = NULL;
    const size_t len = strlen(arg);
    /* "a:1,b" -> "<lora:a:1><lora:b>" */
    char *tags = malloc(len * 8 + 16);
    tsr_prompt_lora *pl = calloc((size_t)max, sizeof *pl);
    char *names = NULL;
    int rc = TSR_OK;
    if (!tags || !pl) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t o = 0;
    for (const char *s = arg; *s;) {
        const char *e = strchr(s, ',');
        const size_t k = e ? (size_t)(e - s) : strlen(s);
        if (k == 0 || memchr(s, '<', k) || memchr(s, '>', k)) {
            rc = tsr_errorf(TSR_ERR_INVALID, "'%s': expected NAME[:W[:W_UNET]][,...]", arg);
            goto done;
        }
        o += (size_t)sprintf(tags + o, "<lora:%.*s>", (int)k, s);
        s += k + (e ? 1 : 0);
    }
    tags[o] = '\0';
    char *rest = NULL;
    TSR_CHECK_GOTO(rc, tsr_prompt_take_loras(tags, &rest, pl, max, n), done);
    free(rest);
    names = malloc((size_t)*n * (TSR_PROMPT_LORA_NAME_MAX + 1) + 1);
    if (!names) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < *n; i++) {
        char *nm = names + (size_t)i * (TSR_PROMPT_LORA_NAME_MAX + 1);
        memcpy(nm, pl[i].name, TSR_PROMPT_LORA_NAME_MAX + 1);
        out[i].name = nm;
        out[i].te_weight = pl[i].te;
        out[i].unet_weight = pl[i].unet;
    }
    *buf = names;
    names = NULL;
done:
    free(tags);
    free(pl);
    free(names);
    if (rc < 0)
        *n = 0;
    return rc;
}
