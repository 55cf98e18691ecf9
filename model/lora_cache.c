/*
 * model/lora_cache.c - LoRAs loaded on first use, bounded, LRU, pinned.
 *
 * Why this shape: a service may be asked for hundreds of LoRAs over a day
 * and a handful at once, so loading all of --lora-dir at start would waste
 * memory and time, while loading per image would read the same file every
 * few seconds.  Entries carry a hold count (images that use them, from
 * their prepare phase until they are freed) and a use stamp; a load that
 * takes the total past the bound frees the least recently used entries
 * with no holds.  The mutex is held while loading, which serialises loads:
 * they are rare, and two images asking for the same new LoRA then share
 * one load.
 */
#include "model/lora.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"

typedef struct cache_entry {
    char name[TSR_LORA_NAME_MAX + 1];
    tsr_lora *lora; /* owned */
    int holds;
    uint64_t used;
} cache_entry;

struct tsr_lora_cache {
    pthread_mutex_t mu;
    char *dir; /* owned; NULL = none */
    size_t cap, bytes;
    tsr_lora_model model;
    cache_entry *e;
    int n, alloc;
    uint64_t clock;
};

int tsr_lora_cache_create(const char *dir, size_t cap_bytes, const tsr_lora_model *m,
                          tsr_lora_cache **out)
{
    *out = NULL;
    tsr_lora_cache *c = calloc(1, sizeof *c);
    if (!c)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    if (dir && *dir && !(c->dir = strdup(dir))) {
        free(c);
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    c->cap = cap_bytes;
    c->model = *m;
    *out = c;
    return TSR_OK;
}

void tsr_lora_cache_free(tsr_lora_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        tsr_lora_free(c->e[i].lora);
    free(c->e);
    free(c->dir);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

const char *tsr_lora_cache_dir(const tsr_lora_cache *c) { return c ? c->dir : NULL; }

/* Free unheld entries, least recently used first, until `need` more bytes fit. */
static void evict(tsr_lora_cache *c, size_t need)
{
    while (c->bytes + need > c->cap) {
        int victim = -1;
        for (int i = 0; i < c->n; i++)
            if (c->e[i].holds == 0 && (victim < 0 || c->e[i].used < c->e[victim].used))
                victim = i;
        if (victim < 0)
            return;
        TSR_INFO("lora: evicting '%s' (%zu bytes)", c->e[victim].name,
                     tsr_lora_bytes(c->e[victim].lora));
        c->bytes -= tsr_lora_bytes(c->e[victim].lora);
        tsr_lora_free(c->e[victim].lora);
        c->e[victim] = c->e[--c->n];
    }
}

int tsr_lora_cache_acquire(tsr_lora_cache *c, const char *name, const tsr_lora **out)
{
    *out = NULL;
    if (!c)
        return tsr_errorf(TSR_ERR_INVALID, "lora: no LoRA cache");
    TSR_TRY(tsr_lora_check_name(name));
    pthread_mutex_lock(&c->mu);
    int rc = TSR_OK;
    for (int i = 0; i < c->n; i++) {
        if (strcmp(c->e[i].name, name) == 0) {
            c->e[i].holds++;
            c->e[i].used = ++c->clock;
            *out = c->e[i].lora;
            goto done;
        }
    }
    char *path = NULL;
    TSR_CHECK_GOTO(rc, tsr_lora_resolve(c->dir, name, &path), done);
    tsr_lora *l = NULL;
    rc = tsr_lora_load(path, &c->model, &l);
    free(path);
    if (rc < 0)
        goto done;
    evict(c, tsr_lora_bytes(l));
    if (c->n == c->alloc) {
        const int na = c->alloc ? 2 * c->alloc : 8;
        cache_entry *e = realloc(c->e, (size_t)na * sizeof *e);
        if (!e) {
            tsr_lora_free(l);
            rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
            goto done;
        }
        c->e = e;
        c->alloc = na;
    }
    cache_entry *e = &c->e[c->n++];
    memset(e, 0, sizeof *e);
    strncpy(e->name, name, TSR_LORA_NAME_MAX);
    e->lora = l;
    e->holds = 1;
    e->used = ++c->clock;
    c->bytes += tsr_lora_bytes(l);
    *out = l;
done:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void tsr_lora_cache_release(tsr_lora_cache *c, const tsr_lora *l)
{
    if (!c || !l)
        return;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (c->e[i].lora == l && c->e[i].holds > 0) {
            c->e[i].holds--;
            break;
        }
    evict(c, 0);
    pthread_mutex_unlock(&c->mu);
}

void tsr_lora_cache_stats(tsr_lora_cache *c, int *entries, size_t *bytes)
{
    pthread_mutex_lock(&c->mu);
    if (entries)
        *entries = c->n;
    if (bytes)
        *bytes = c->bytes;
    pthread_mutex_unlock(&c->mu);
}
