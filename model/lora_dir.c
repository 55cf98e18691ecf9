/*
 * model/lora_dir.c - names of files inside a configured folder: LoRAs in
 * --lora-dir, textual-inversion embeddings in --embeddings-dir.
 *
 * One mechanism for both (model/named_file.h): the kind only changes the
 * words of the messages.
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
#include "model/named_file.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

#include "core/error.h"

const tsr_named_kind tsr_named_lora = {"lora", "LoRA", "LoRA folder", "--lora-dir"};
const tsr_named_kind tsr_named_embedding = {"embedding", "embedding", "embeddings folder",
                                            "--embeddings-dir"};

int tsr_named_check(const tsr_named_kind *k, const char *name)
{
    if (!name || !*name)
        return tsr_errorf(TSR_ERR_INVALID, "%s: empty name", k->tag);
    const size_t n = strlen(name);
    if (n > TSR_LORA_NAME_MAX)
        return tsr_errorf(TSR_ERR_INVALID, "%s: name of %zu bytes (at most %d)", k->tag, n,
                          TSR_LORA_NAME_MAX);
    if (name[0] == '.')
        return tsr_errorf(TSR_ERR_UNSAFE, "%s: name '%s' starts with '.'", k->tag, name);
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        if (*c == '/' || *c == '\\' || *c < 0x20 || *c == 0x7f || *c == ':')
            return tsr_errorf(TSR_ERR_UNSAFE,
                              "%s: name '%.*s' has a path separator, ':' or a control character",
                              k->tag, (int)n, name);
    if (strstr(name, ".."))
        return tsr_errorf(TSR_ERR_UNSAFE, "%s: name '%s' contains '..'", k->tag, name);
    return TSR_OK;
}

int tsr_lora_check_name(const char *name)
{
    return tsr_named_check(&tsr_named_lora, name);
}

int tsr_lora_resolve(const char *dir, const char *name, char **path)
{
    return tsr_named_resolve(&tsr_named_lora, dir, name, path);
}

int tsr_named_resolve(const tsr_named_kind *k, const char *dir, const char *name, char **path)
{
    *path = NULL;
    if (!dir || !*dir)
        return tsr_errorf(TSR_ERR_NOT_FOUND, "%s: '%s' asked for, but no %s is set (%s)", k->tag,
                          name ? name : "", k->folder, k->flag);
    TSR_TRY(tsr_named_check(k, name));
    char *real_dir = realpath(dir, NULL);
    if (!real_dir)
        return tsr_errorf(TSR_ERR_IO, "%s: folder '%s': %s", k->tag, dir, strerror(errno));
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
        rc = tsr_errorf(TSR_ERR_NOT_FOUND, "%s: no %s '%s' (%s.safetensors in the %s)", k->tag,
                        k->what, name, name, k->folder);
        goto done;
    }
    if (strncmp(real, real_dir, nd) != 0 || real[nd] != '/' || strchr(real + nd + 1, '/')) {
        rc = tsr_errorf(TSR_ERR_UNSAFE, "%s: '%s' resolves outside the %s", k->tag, name,
                        k->folder);
        goto done;
    }
    struct stat sb;
    if (stat(real, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = tsr_errorf(TSR_ERR_NOT_FOUND, "%s: '%s' is not a regular file", k->tag, name);
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

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void tsr_lora_list_free(char **names, int n)
{
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

int tsr_lora_list(const char *dir, char ***names, int *n)
{
    return tsr_named_list(&tsr_named_lora, dir, names, n);
}

int tsr_named_list(const tsr_named_kind *k, const char *dir, char ***names, int *n)
{
    *names = NULL;
    *n = 0;
    if (!dir || !*dir)
        return TSR_OK;
    DIR *d = opendir(dir);
    if (!d)
        return tsr_errorf(TSR_ERR_IO, "%s: folder '%s': %s", k->tag, dir, strerror(errno));
    char **out = NULL;
    int cnt = 0, cap = 0, rc = TSR_OK;
    const struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const size_t len = strlen(de->d_name), ext = strlen(".safetensors");
        if (len <= ext || strcmp(de->d_name + len - ext, ".safetensors") != 0 ||
            len - ext > TSR_LORA_NAME_MAX)
            continue;
        char stem[TSR_LORA_NAME_MAX + 1];
        memcpy(stem, de->d_name, len - ext);
        stem[len - ext] = '\0';
        char *path = NULL;
        if (tsr_named_resolve(k, dir, stem, &path) < 0) { /* bad names, links out: left out */
            tsr_error_clear();
            continue;
        }
        free(path);
        if (cnt == cap) {
            cap = cap ? 2 * cap : 16;
            char **g = realloc(out, (size_t)cap * sizeof *g);
            if (!g) {
                rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
                break;
            }
            out = g;
        }
        if (!(out[cnt] = strdup(stem))) {
            rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
            break;
        }
        cnt++;
    }
    closedir(d);
    if (rc < 0) {
        tsr_lora_list_free(out, cnt);
        return rc;
    }
    qsort(out, (size_t)cnt, sizeof *out, cmp_str);
    *names = out;
    *n = cnt;
    return TSR_OK;
}
