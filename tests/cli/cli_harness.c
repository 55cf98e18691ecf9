/*
 * tests/cli/cli_harness.c - running the `tessera` program for the CLI
 * tests, and the files they compare (see cli_harness.h).
 */
#include "test.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_harness.h"
#include "image/image.h"
#include "tessera.h"
#include "text/tokenizer.h"
/* ---- running the program ---- */


char g_tmp[PATH_MAX];

void run_free(run_out *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

char *slurp(const char *path)
{
    size_t n = 0;
    char *s = tsr_test_read_file(path, &n);
    char *z = s ? realloc(s, n + 1) : NULL;
    if (!z) {
        free(s);
        return strdup("");
    }
    z[n] = '\0';
    return z;
}

/* Run `tessera ARGS...` (NULL-terminated); prints the command and stderr. */
static int run_v(run_out *r, const char *first, va_list ap)
{
    memset(r, 0, sizeof *r);
    const char *bin = getenv("TSR_BIN");
    if (!bin)
        return -1;
    char *argv[MAX_ARGS];
    int n = 0;
    argv[n++] = (char *)bin;
    for (const char *a = first; a && n < MAX_ARGS - 1; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    argv[n] = NULL;
    printf("$ tessera");
    for (int i = 1; i < n; i++)
        printf(" '%s'", argv[i]);
    printf("\n");
    char out[PATH_MAX + 16], err[PATH_MAX + 16];
    snprintf(out, sizeof out, "%s/stdout.txt", g_tmp);
    snprintf(err, sizeof err, "%s/stderr.txt", g_tmp);
    tsr_test_child c;
    if (tsr_test_spawn(argv, out, err, TIMEOUT, &c) != 0)
        return -1;
    r->status = c.exited ? c.status : -1;
    r->rss_kib = c.max_rss_kib;
    r->out = slurp(out);
    r->err = slurp(err);
    printf("  -> exit %d, %.2f s\n%s", r->status, c.seconds, r->err);
    return 0;
}

int run(run_out *r, const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    int rc = run_v(r, first, ap);
    va_end(ap);
    return rc;
}

/* Exit status `code` and every word in the message (NULL-terminated). */
int expect(const run_out *r, int code, ...)
{
    if (r->status != code)
        TSR_FAIL("exit %d, expected %d", r->status, code);
    va_list ap;
    va_start(ap, code);
    for (const char *w = va_arg(ap, const char *); w; w = va_arg(ap, const char *))
        if (!strstr(r->err, w)) {
            va_end(ap);
            TSR_FAIL("the message does not say \"%s\": %s", w, r->err);
        }
    va_end(ap);
    return 0;
}

/* ---- paths and files ---- */

const char *tmp_path(const char *name, char *buf)
{
    snprintf(buf, PATH_MAX, "%s/%s", g_tmp, name);
    return buf;
}

const char *model_path(const char *name, char *buf)
{
    if (strcmp(name, "demo") == 0) {
        const char *src = getenv("TSR_SOURCE_DIR");
        snprintf(buf, PATH_MAX, "%s/models/demo", src ? src : ".");
        return buf;
    }
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s", name);
    return tsr_test_path(rel, buf, PATH_MAX);
}

const char *data_path(const char *rel, char *buf)
{
    return tsr_test_path(rel, buf, PATH_MAX);
}

int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    chmod(path, 0755);
    remove(path);
    return 0;
}

bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Max abs difference of two PNGs' pixels (-1 on a read or size mismatch). */
int png_diff(const char *a, const char *b)
{
    tsr_image x = {0}, y = {0};
    int mx = -1;
    if (tsr_image_read(a, 3, &x) == 0 && tsr_image_read(b, 3, &y) == 0 && x.width == y.width &&
        x.height == y.height) {
        mx = 0;
        for (size_t i = 0; i < tsr_image_bytes(&x); i++) {
            int d = abs((int)x.data[i] - (int)y.data[i]);
            mx = d > mx ? d : mx;
        }
    } else {
        fprintf(stderr, "cannot compare %s and %s: %s\n", a, b, tsr_last_error());
    }
    tsr_image_free(&x);
    tsr_image_free(&y);
    return mx;
}

/* The PNG's "parameters" text (owned) or NULL. */
char *png_parameters(const char *path)
{
    tsr_image img = {0};
    tsr_png_meta meta = {0};
    char *p = NULL;
    if (tsr_png_read(path, 0, &img, &meta) == 0 && tsr_png_meta_find(&meta, "parameters"))
        p = strdup(tsr_png_meta_find(&meta, "parameters"));
    tsr_image_free(&img);
    tsr_png_meta_free(&meta);
    return p;
}

cJSON *load_json(const char *path)
{
    char *s = slurp(path);
    cJSON *j = cJSON_Parse(s);
    free(s);
    return j;
}
