/*
 * pipeline/lora.c - LoRAs through an image's life (see pipeline/lora.h).
 *
 * Why this shape: names are checked at submit (a typo fails the request,
 * naming "loras" or "prompt"), files are loaded in the prepare phase (a
 * load is seconds for a large file, and it belongs with the other slow
 * per-image work), the image holds its LoRAs in the engine's cache until
 * it is freed (so a LoRA in use is never evicted), and each UNet call
 * hands the UNet one set pointer per row.  An image's rows (uncond and
 * cond) share its set; images without LoRAs give NULL rows, and a call in
 * which no row has LoRAs passes no sets at all, so it runs exactly the
 * code it ran before LoRAs existed.
 */
#include "pipeline/lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "pipeline/pipeline_internal.h"
#include "text/prompt_lora.h"

#define DEFAULT_CACHE_MB 1024

struct tsr_engine_lora {
    tsr_lora_names *names[TSR_COMP_COUNT]; /* owned */
    tsr_lora_cache *cache;                 /* owned */
};

struct tsr_image_lora {
    int n;
    tsr_prompt_lora spec[TSR_LORA_MAX_PER_IMAGE];
    char *prompt;        /* owned: the prompt without tags */
    tsr_lora_cache *cache; /* borrowed: where the holds are */
    bool held;
    tsr_lora_set set;
    char hashes[TSR_LORA_MAX_PER_IMAGE * (TSR_PROMPT_LORA_NAME_MAX + 20)];
};

static int names_of(const tsr_weights *w, const tsr_unet_desc *ldm, tsr_lora_names **out)
{
    const size_t n = tsr_weights_count(w);
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const tsr_tensor *t;
        tsr_weights_at(w, i, &names[i], &t);
    }
    int rc = tsr_lora_names_build(names, n, ldm, out);
    free(names);
    return rc;
}

int tsr_engine_lora_open(tsr_engine *e, const tsr_engine_options *o)
{
    struct tsr_engine_lora *l = calloc(1, sizeof *l);
    if (!l)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    e->lora = l;
    tsr_lora_model m;
    memset(&m, 0, sizeof m);
    m.backend = e->backend;
    m.weights[TSR_COMP_UNET] = e->unet_w;
    m.weights[TSR_COMP_TEXT_ENCODER] = tsr_text_cond_weights(e->cond, 0);
    m.weights[TSR_COMP_TEXT_ENCODER_2] = tsr_text_cond_weights(e->cond, 1);
    for (int c = 0; c < TSR_COMP_COUNT; c++) {
        if (!m.weights[c])
            continue;
        TSR_TRY(names_of(m.weights[c], c == TSR_COMP_UNET ? tsr_model_unet_desc(e->model) : NULL,
                         &l->names[c]));
        m.names[c] = l->names[c];
    }
    const int mb = o->lora_cache_mb > 0 ? o->lora_cache_mb : DEFAULT_CACHE_MB;
    return tsr_lora_cache_create(o->lora_dir, (size_t)mb << 20, &m, &l->cache);
}

void tsr_engine_lora_close(tsr_engine *e)
{
    if (!e || !e->lora)
        return;
    tsr_lora_cache_free(e->lora->cache);
    for (int c = 0; c < TSR_COMP_COUNT; c++)
        tsr_lora_names_free(e->lora->names[c]);
    free(e->lora);
    e->lora = NULL;
}

/* The specs of p into l (prompt tags first, then p->loras). */
static int collect(const tsr_image_params *p, tsr_image_lora *l, const char **field)
{
    if (field)
        *field = "prompt";
    TSR_TRY(tsr_prompt_take_loras(p->prompt ? p->prompt : "", &l->prompt, l->spec,
                                  TSR_LORA_MAX_PER_IMAGE, &l->n));
    if (field)
        *field = "loras";
    if (p->n_loras < 0 || (p->n_loras > 0 && !p->loras))
        return tsr_errorf(TSR_ERR_INVALID, "loras: %d given with no array", p->n_loras);
    if (l->n + p->n_loras > TSR_LORA_MAX_PER_IMAGE)
        return tsr_errorf(TSR_ERR_RANGE, "loras: %d LoRAs (prompt tags included); at most %d",
                          l->n + p->n_loras, TSR_LORA_MAX_PER_IMAGE);
    for (int i = 0; i < p->n_loras; i++) {
        const tsr_lora_spec *s = &p->loras[i];
        TSR_TRY(tsr_lora_check_name(s->name));
        if (!(s->unet_weight >= -1000.0 && s->unet_weight <= 1000.0 && s->te_weight >= -1000.0 &&
              s->te_weight <= 1000.0))
            return tsr_errorf(TSR_ERR_INVALID, "loras: '%s': weights must be in -1000..1000",
                              s->name);
        tsr_prompt_lora *d = &l->spec[l->n++];
        snprintf(d->name, sizeof d->name, "%s", s->name);
        d->unet = s->unet_weight;
        d->te = s->te_weight;
    }
    for (int i = 0; i < l->n; i++)
        TSR_TRY(tsr_lora_check_name(l->spec[i].name));
    if (field)
        *field = NULL;
    return TSR_OK;
}

int tsr_image_lora_check(const tsr_engine *e, const tsr_image_params *p, const char **field)
{
    tsr_image_lora l;
    memset(&l, 0, sizeof l);
    int rc = collect(p, &l, field);
    for (int i = 0; rc == TSR_OK && i < l.n; i++) {
        char *path = NULL;
        rc = tsr_lora_resolve(tsr_lora_cache_dir(e->lora ? e->lora->cache : NULL), l.spec[i].name,
                              &path);
        free(path);
        if (rc < 0 && field)
            *field = "loras";
    }
    free(l.prompt);
    return rc;
}

int tsr_image_lora_create(const tsr_engine *e, const tsr_image_params *p, tsr_image_lora **out)
{
    *out = NULL;
    tsr_image_lora *l = calloc(1, sizeof *l);
    if (!l)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    int rc = collect(p, l, NULL);
    if (rc < 0 || l->n == 0) {
        tsr_image_lora_free(l);
        return rc;
    }
    l->cache = e->lora ? e->lora->cache : NULL;
    *out = l;
    return TSR_OK;
}

void tsr_image_lora_free(tsr_image_lora *l)
{
    if (!l)
        return;
    if (l->held)
        for (int i = 0; i < l->set.n; i++)
            tsr_lora_cache_release(l->cache, l->set.use[i].lora);
    free(l->prompt);
    free(l);
}

const char *tsr_image_lora_prompt(const tsr_image_lora *l) { return l ? l->prompt : NULL; }

int tsr_image_lora_acquire(tsr_engine *e, tsr_image_lora *l)
{
    if (!l || l->held)
        return TSR_OK;
    l->held = true;
    l->set.n = 0;
    size_t o = 0;
    l->hashes[0] = '\0';
    for (int i = 0; i < l->n; i++) {
        const tsr_lora *lo;
        TSR_TRY(tsr_lora_cache_acquire(l->cache, l->spec[i].name, &lo));
        tsr_lora_use *u = &l->set.use[l->set.n++];
        u->lora = lo;
        u->unet_scale = (float)l->spec[i].unet;
        u->te_scale = (float)l->spec[i].te;
        /* A1111 drops ':' and ',' from the name here */
        if (o + TSR_PROMPT_LORA_NAME_MAX + 20 < sizeof l->hashes) {
            if (i > 0)
                o += (size_t)snprintf(l->hashes + o, sizeof l->hashes - o, ", ");
            for (const char *c = l->spec[i].name; *c; c++)
                if (*c != ':' && *c != ',')
                    l->hashes[o++] = *c;
            o += (size_t)snprintf(l->hashes + o, sizeof l->hashes - o, ": %s", tsr_lora_hash(lo));
        }
    }
    (void)e;
    return TSR_OK;
}

const tsr_lora_set *tsr_image_lora_set(const tsr_image_lora *l)
{
    return l && l->held && l->set.n ? &l->set : NULL;
}

const char *tsr_image_lora_hashes(const tsr_image_lora *l)
{
    return l && l->held ? l->hashes : "";
}
