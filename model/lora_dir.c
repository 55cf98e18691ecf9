/*
 * model/lora_dir.c - LoRA names inside --lora-dir.
 *
 * Why this shape: a LoRA name comes from a prompt or a request body, so it
 * is hostile input that becomes a path.  The name is checked on its own
 * first (no separators, no "..", no leading dot, no control bytes, bounded
 * length; a NUL cannot arrive inside a C string, and the API layers refuse
 * one in JSON before it gets here), and then the file's real path, with
 * every link resolved, must lie inside the directory's real path.  The
 * second check is what stops a link planted in the directory from pointing
 * outside it; the first keeps the error message about the name rather
 * than about a path.
 */
#include "model/lora.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"

int tsr_lora_check_name(const char *name)
{
    if (!name || !*name)
        return tsr_errorf(TSR_ERR_INVALID, "lora: empty name");
    const size_t n = strlen(name);
    if (n > TSR_LORA_NAME_MAX)
        return tsr_errorf(TSR_ERR_INVALID, "lora: name of %zu bytes (at most %d)", n,
                          TSR_LORA_NAME_MAX);
    if (name[0] == '.')
        return tsr_errorf(TSR_ERR_UNSAFE, "lora: name '%s' starts with '.'", name);
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        if (*c == '/' || *c == '\\' || *c < 0x20 || *c == 0x7f || *c == ':')
            return tsr_errorf(TSR_ERR_UNSAFE,
                              "lora: name '%.*s' has a path separator, ':' or a control character",
                              (int)n, name);
    if (strstr(name, ".."))
        return tsr_errorf(TSR_ERR_UNSAFE, "lora: name '%s' contains '..'", name);
    return TSR_OK;
}

int tsr_lora_resolve(const char *dir, const char *name, char **path)
{
    *path = NULL;
    if (!dir || !*dir)
        return tsr_errorf(TSR_ERR_NOT_FOUND, "lora: '%s' asked for, but no LoRA folder is set "
                          "(--lora-dir)", name ? name : "");
    TSR_TRY(tsr_lora_check_name(name));
    char *real_dir = realpath(dir, NULL);
    if (!real_dir)
        return tsr_errorf(TSR_ERR_IO, "lora: folder '%s': %s", dir, strerror(errno));
    const size_t nd = strlen(real_dir);
    const size_t need = nd + strlen(name) + 16;
    char *cand = malloc(need);
    int rc = TSR_OK;
    char *real = NULL;
    if (!cand) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
        goto done;
    }
    snprintf(cand, need, "%s/%s.safetensors", real_dir, name);
    real = realpath(cand, NULL);
    if (!real) {
        rc = tsr_errorf(TSR_ERR_NOT_FOUND, "lora: no LoRA '%s' (%s.safetensors in the LoRA folder)",
                        name, name);
        goto done;
    }
    if (strncmp(real, real_dir, nd) != 0 || real[nd] != '/' || strchr(real + nd + 1, '/')) {
        rc = tsr_errorf(TSR_ERR_UNSAFE, "lora: '%s' resolves outside the LoRA folder", name);
        goto done;
    }
    struct stat sb;
    if (stat(real, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = tsr_errorf(TSR_ERR_NOT_FOUND, "lora: '%s' is not a regular file", name);
        goto done;
    }
    *path = real;
    real = NULL;
done:
    free(real);
    free(cand);
    free(real_dir);
    return rc;
}
