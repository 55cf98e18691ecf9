/*
 * tests/demo/demo_common.c - the held-out JSON files, the palette, the
 * colour/place scoring rule and the `tessera generate` driver shared by the
 * demo-model tests (test_demo.c, test_demo_v2.c).
 *
 * Why here: the rule is a port of tools/demo-model/score.py (same
 * thresholds, same geometry), and the palette and region centres come from
 * the JSON files dataset.py and captions_eval.py write next to their
 * prompts, so C and Python score the same way from one source of truth.
 * The driver runs the real binary ($TSR_BIN) because the claims are about
 * what a user gets from `tessera generate --model models/demo`.
 */
#include "demo_common.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#define RUN_TIMEOUT 120.0

const char *demo_source_dir(void)
{
    const char *s = getenv("TSR_SOURCE_DIR");
    return s && *s ? s : ".";
}

cJSON *demo_load_json(const char *rel)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", demo_source_dir(), rel);
    size_t n = 0;
    char *text = tsr_test_read_file(path, &n);
    if (!text) {
        fprintf(stderr, "%s: cannot read\n", path);
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(text, n);
    free(text);
    if (!j || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "prompts")) ||
        !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "palette")) ||
        !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "region_centres"))) {
        fprintf(stderr, "%s: not a held-out file (prompts, palette, region_centres)\n", path);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int demo_load_palette(const cJSON *j, demo_palette *p)
{
    memset(p, 0, sizeof *p);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "palette"))
    {
        if (p->n >= DEMO_MAX_COLOURS || !c->string || strlen(c->string) >= sizeof p->names[0] ||
            !cJSON_IsArray(c) || cJSON_GetArraySize(c) != 3) {
            fprintf(stderr, "held-out file: bad palette entry\n");
            return -1;
        }
        snprintf(p->names[p->n], sizeof p->names[0], "%s", c->string);
        for (int k = 0; k < 3; k++) {
            const cJSON *v = cJSON_GetArrayItem(c, k);
            if (!cJSON_IsNumber(v))
                return -1;
            p->rgb[p->n][k] = v->valuedouble;
        }
        p->n++;
    }
    return p->n >= 2 ? 0 : -1;
}

int demo_colour_index(const demo_palette *p, const char *name)
{
    for (int i = 0; name && i < p->n; i++)
        if (strcmp(p->names[i], name) == 0)
            return i;
    return -1;
}

int demo_region_centre(const cJSON *j, const char *region, double *cx, double *cy)
{
    const cJSON *r = region ? cJSON_GetObjectItemCaseSensitive(
                                  cJSON_GetObjectItemCaseSensitive(j, "region_centres"), region)
                            : NULL;
    if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) != 2 ||
        !cJSON_IsNumber(cJSON_GetArrayItem(r, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(r, 1)))
        return -1;
    *cx = cJSON_GetArrayItem(r, 0)->valuedouble;
    *cy = cJSON_GetArrayItem(r, 1)->valuedouble;
    return 0;
}

const char *demo_jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int demo_nearest(const demo_palette *p, const uint8_t *px)
{
    int best = 0;
    double bd = 0;
    for (int i = 0; i < p->n; i++) {
        double d = 0;
        for (int k = 0; k < 3; k++) {
            double e = (double)px[k] - p->rgb[i][k];
            d += e * e;
        }
        if (i == 0 || d < bd) {
            bd = d;
            best = i;
        }
    }
    return best;
}

void demo_label(const tsr_image *img, const demo_palette *p, uint8_t *lab)
{
    size_t n = (size_t)img->width * img->height;
    for (size_t i = 0; i < n; i++)
        lab[i] = (uint8_t)demo_nearest(p, img->data + i * 3);
}

int demo_score_place(const tsr_image *img, const demo_palette *p, int colour, int background,
                     double cx, double cy, double *fg, double *bg)
{
    if (img->channels != 3 || img->width == 0 || img->height == 0 || colour < 0 || background < 0)
        return -1;
    const uint32_t w = img->width, h = img->height;
    const size_t n = (size_t)w * h;
    uint8_t *lab = malloc(n), *named = malloc(n), *filled = malloc(n);
    int rc = -1;
    if (!lab || !named || !filled)
        goto out;
    demo_label(img, p, lab);
    for (size_t i = 0; i < n; i++)
        named[i] = lab[i] == colour;
    /* the named colour counts with its holes filled, as score.py's
     * fill_holes(): a ring's hole is most of the core box */
    if (demo_fill_holes(named, (int)w, (int)h, filled))
        goto out;
    double sx = (double)w / DEMO_DATA_SIZE, sy = (double)h / DEMO_DATA_SIZE;
    size_t core = 0, core_hit = 0, rest = 0, rest_hit = 0;
    for (uint32_t y = 0; y < h; y++) {
        for (uint32_t x = 0; x < w; x++) {
            double dx = fabs(((double)x + 0.5) / sx - cx);
            double dy = fabs(((double)y + 0.5) / sy - cy);
            double d = dx > dy ? dx : dy;
            size_t i = (size_t)y * w + x;
            if (d <= DEMO_CORE) {
                core++;
                core_hit += filled[i];
            } else if (d > DEMO_REST) {
                rest++;
                rest_hit += lab[i] == background;
            }
        }
    }
    *fg = core ? (double)core_hit / (double)core : 0.0;
    *bg = rest ? (double)rest_hit / (double)rest : 0.0;
    rc = *fg >= DEMO_FG_MIN && *bg >= DEMO_BG_MIN;
out:
    free(lab);
    free(named);
    free(filled);
    return rc;
}

/* ---- running tessera ---- */

int demo_make_tmp(char *dir, size_t size)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, size, "%s/tsr-demo-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

static void print_log(const char *log)
{
    size_t n = 0;
    char *text = tsr_test_read_file(log, &n);
    if (text) {
        fprintf(stderr, "--- %s ---\n%.*s\n", log, (int)(n > 4000 ? 4000 : n), text);
        free(text);
    }
}

static int generate(const char *prompt, long long seed, double cfg, const char *init,
                    double strength, const char *out, const char *log, double *seconds)
{
    const char *bin = getenv("TSR_BIN");
    if (!bin || !*bin) {
        fprintf(stderr, "TSR_BIN is not set (run through ctest)\n");
        return -1;
    }
    char model[PATH_MAX], seed_s[32], cfg_s[32], strength_s[32];
    /* TSR_DEMO_MODEL scores another folder (a training snapshot) with the
     * same checks; ctest never sets it. */
    const char *other = getenv("TSR_DEMO_MODEL");
    if (other && *other)
        snprintf(model, sizeof model, "%s", other);
    else
        snprintf(model, sizeof model, "%s/models/demo", demo_source_dir());
    snprintf(seed_s, sizeof seed_s, "%lld", seed);
    snprintf(cfg_s, sizeof cfg_s, "%g", cfg);
    char *argv[28];
    int n = 0;
    argv[n++] = (char *)bin;
    argv[n++] = "generate";
    argv[n++] = "--model";
    argv[n++] = model;
    argv[n++] = "--prompt";
    argv[n++] = (char *)prompt;
    argv[n++] = "--seed";
    argv[n++] = seed_s;
    argv[n++] = "--width";
    argv[n++] = "128";
    argv[n++] = "--height";
    argv[n++] = "128";
    if (cfg >= 0) {
        argv[n++] = "--cfg-scale";
        argv[n++] = cfg_s;
    }
    if (init) {
        snprintf(strength_s, sizeof strength_s, "%g", strength);
        argv[n++] = "--init-image";
        argv[n++] = (char *)init;
        argv[n++] = "--strength";
        argv[n++] = strength_s;
    }
    /* One thread: ctest runs this beside other tests, and on a busy core
     * OpenBLAS's spinning workers made a 0.5 s image take 3 s (measured);
     * the image is the same at any thread count. */
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--quiet";
    argv[n++] = "--output";
    argv[n++] = (char *)out;
    argv[n] = NULL;
    tsr_test_child c;
    int rc = tsr_test_spawn(argv, log, NULL, RUN_TIMEOUT, &c) != 0 ? -1 : c.exited ? c.status : -1;
    if (rc == 0 && seconds)
        *seconds = c.seconds;
    if (rc != 0) {
        fprintf(stderr, "tessera generate exited %d for \"%s\"\n", rc, prompt);
        print_log(log);
        return -1;
    }
    return 0;
}

int demo_generate(const char *prompt, long long seed, double cfg, const char *out, const char *log,
                  double *seconds)
{
    return generate(prompt, seed, cfg, NULL, 0.0, out, log, seconds);
}

int demo_img2img(const char *prompt, long long seed, double cfg, const char *init, double strength,
                 const char *out, const char *log)
{
    return generate(prompt, seed, cfg, init, strength, out, log, NULL);
}

void demo_cleanup(const char *dir, const char *const *names, size_t n)
{
    if (getenv("TSR_DEMO_KEEP")) {
        printf("images kept in %s\n", dir);
        return;
    }
    char path[PATH_MAX];
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    rmdir(dir);
}
