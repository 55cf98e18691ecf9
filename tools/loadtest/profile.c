/*
 * tools/loadtest/profile.c - the job mix: a small JSON file of weighted
 * entries (size, steps, n, prompt, extra request fields).
 *
 *   {"prompts": ["a red circle", "a blue square"],
 *    "params": {"cfg_scale": 7.5},
 *    "mix": [{"weight": 3, "width": 64, "height": 64, "steps": 2, "n": 1},
 *            {"weight": 1, "width": 128, "height": 128, "steps": 8, "n": 2}]}
 *
 * Checked strictly before anything is sent: an unknown key or an
 * out-of-range value is a usage error naming the entry and the key, so a
 * typo ("stpes") fails at once instead of silently falling back to a
 * default.  Entry fields left out take the command line's --size, --steps
 * and --n (lt_profile_load is called after those are known).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lt.h"

uint64_t lt_rng_next(lt_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double lt_rng_uniform(lt_rng *r)
{
    return (double)(lt_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

void lt_profile_free(lt_profile *p)
{
    for (int i = 0; i < p->n_mix; i++) {
        free(p->mix[i].prompt);
        cJSON_Delete(p->mix[i].params);
    }
    free(p->mix);
    for (int i = 0; i < p->n_prompts; i++)
        free(p->prompts[i]);
    free(p->prompts);
    cJSON_Delete(p->params);
    memset(p, 0, sizeof *p);
}

int lt_profile_pick(const lt_profile *p, double u)
{
    double x = u * p->total_weight;
    for (int i = 0; i < p->n_mix; i++) {
        if (x < p->mix[i].weight)
            return i;
        x -= p->mix[i].weight;
    }
    return p->n_mix - 1; /* rounding at the top end */
}

static char *read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "--profile %s: cannot open it", path);
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            if (cap > (1u << 20)) {
                snprintf(err, errlen, "--profile %s: larger than 1 MiB", path);
                goto fail;
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                snprintf(err, errlen, "--profile %s: out of memory", path);
                goto fail;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "--profile %s: read error", path);
        goto fail;
    }
    buf[len] = '\0';
    fclose(f);
    return buf;
fail:
    free(buf);
    fclose(f);
    return NULL;
}

/* An integer field in [lo, hi] (multiple of `mult`), or the default. */
static int get_int(const cJSON *o, const char *key, int def, int lo, int hi, int mult,
                   int *out, const char *where, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        *out = def;
        return 0;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || d != floor(d) || ((int)d % mult) != 0) {
        snprintf(err, errlen, "%s.%s must be an integer %d..%d%s", where, key, lo, hi,
                 mult > 1 ? " and a multiple of 8" : "");
        return -1;
    }
    *out = (int)d;
    return 0;
}

static int check_keys(const cJSON *o, const char *const *allowed, const char *where, char *err,
                      size_t errlen)
{
    for (const cJSON *c = o->child; c; c = c->next) {
        bool ok = false;
        for (int i = 0; allowed[i] && !ok; i++)
            ok = strcmp(c->string, allowed[i]) == 0;
        if (!ok) {
            snprintf(err, errlen, "%s: unknown key '%s'", where, c->string);
            return -1;
        }
    }
    return 0;
}

static int parse_entry(const cJSON *e, lt_mix *m, const lt_mix *def, const char *where,
                       char *err, size_t errlen)
{
    static const char *const keys[] = {"weight", "width", "height", "steps", "n",
                                       "prompt", "params", NULL};
    if (!cJSON_IsObject(e)) {
        snprintf(err, errlen, "%s must be an object", where);
        return -1;
    }
    if (check_keys(e, keys, where, err, errlen) < 0)
        return -1;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(e, "weight");
    m->weight = 1.0;
    if (w) {
        if (!cJSON_IsNumber(w) || !(w->valuedouble > 0) || !isfinite(w->valuedouble)) {
            snprintf(err, errlen, "%s.weight must be a number > 0", where);
            return -1;
        }
        m->weight = w->valuedouble;
    }
    if (get_int(e, "width", def->width, 64, 4096, 8, &m->width, where, err, errlen) < 0 ||
        get_int(e, "height", def->height, 64, 4096, 8, &m->height, where, err, errlen) < 0 ||
        get_int(e, "steps", def->steps, 1, 1000, 1, &m->steps, where, err, errlen) < 0 ||
        get_int(e, "n", def->n, 1, 16, 1, &m->n, where, err, errlen) < 0)
        return -1;
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(e, "prompt");
    if (pr) {
        if (!cJSON_IsString(pr) || !pr->valuestring[0]) {
            snprintf(err, errlen, "%s.prompt must be a non-empty string", where);
            return -1;
        }
        m->prompt = strdup(pr->valuestring);
    }
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(e, "params");
    if (pa) {
        if (!cJSON_IsObject(pa)) {
            snprintf(err, errlen, "%s.params must be an object", where);
            return -1;
        }
        m->params = cJSON_Duplicate(pa, 1);
    }
    return 0;
}

/* p->mix[0] holds the command-line defaults on entry (lt_profile_single). */
int lt_profile_load(const char *path, lt_profile *p, char *err, size_t errlen)
{
    static const char *const keys[] = {"mix", "prompts", "params", NULL};
    lt_mix def = p->mix[0];
    def.prompt = NULL;
    char *text = read_file(path, err, errlen);
    if (!text)
        return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    int rc = -1;
    lt_profile q;
    memset(&q, 0, sizeof q);
    char where[64];
    if (!root || !cJSON_IsObject(root)) {
        snprintf(err, errlen, "--profile %s: not a JSON object", path);
        goto out;
    }
    snprintf(where, sizeof where, "--profile %s", path);
    if (check_keys(root, keys, where, err, errlen) < 0)
        goto out;
    const cJSON *mix = cJSON_GetObjectItemCaseSensitive(root, "mix");
    int n = cJSON_GetArraySize(mix);
    if (!cJSON_IsArray(mix) || n < 1 || n > 256) {
        snprintf(err, errlen, "--profile %s: \"mix\" must be an array of 1..256 entries", path);
        goto out;
    }
    q.mix = calloc((size_t)n, sizeof *q.mix);
    if (!q.mix)
        goto oom;
    for (const cJSON *e = mix->child; e; e = e->next) {
        snprintf(where, sizeof where, "--profile: mix[%d]", q.n_mix);
        if (parse_entry(e, &q.mix[q.n_mix], &def, where, err, errlen) < 0) {
            q.n_mix++; /* freed with the rest */
            goto out;
        }
        q.total_weight += q.mix[q.n_mix].weight;
        q.n_mix++;
    }
    const cJSON *prompts = cJSON_GetObjectItemCaseSensitive(root, "prompts");
    if (prompts) {
        int np = cJSON_GetArraySize(prompts);
        if (!cJSON_IsArray(prompts) || np < 1) {
            snprintf(err, errlen, "--profile: \"prompts\" must be a non-empty array of strings");
            goto out;
        }
        q.prompts = calloc((size_t)np, sizeof *q.prompts);
        if (!q.prompts)
            goto oom;
        for (const cJSON *s = prompts->child; s; s = s->next) {
            if (!cJSON_IsString(s) || !s->valuestring[0]) {
                snprintf(err, errlen, "--profile: prompts[%d] must be a non-empty string",
                         q.n_prompts);
                goto out;
            }
            if (!(q.prompts[q.n_prompts++] = strdup(s->valuestring)))
                goto oom;
        }
    }
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "params");
    if (params) {
        if (!cJSON_IsObject(params)) {
            snprintf(err, errlen, "--profile: \"params\" must be an object");
            goto out;
        }
        q.params = cJSON_Duplicate(params, 1);
    }
    if (!q.prompts) { /* keep the command line's prompt */
        q.prompts = p->prompts;
        q.n_prompts = p->n_prompts;
        p->prompts = NULL;
        p->n_prompts = 0;
    }
    lt_profile_free(p);
    *p = q;
    memset(&q, 0, sizeof q);
    rc = 0;
    goto out;
oom:
    snprintf(err, errlen, "--profile: out of memory");
out:
    lt_profile_free(&q);
    cJSON_Delete(root);
    return rc;
}

int lt_profile_single(lt_profile *p, int width, int height, int steps, int n, const char *prompt)
{
    memset(p, 0, sizeof *p);
    p->mix = calloc(1, sizeof *p->mix);
    p->prompts = calloc(1, sizeof *p->prompts);
    if (!p->mix || !p->prompts) {
        lt_profile_free(p);
        return -1;
    }
    p->n_mix = 1;
    p->mix[0] = (lt_mix){1.0, width, height, steps, n, NULL, NULL};
    p->total_weight = 1.0;
    p->prompts[0] = strdup(prompt);
    if (!p->prompts[0]) {
        lt_profile_free(p);
        return -1;
    }
    p->n_prompts = 1;
    return 0;
}
