/*
 * service/jobs/tile_cache.c - finished images' preview tiles in RAM.
 *
 * A finished job's tiles are by far the larger part of its memory, so they
 * are budgeted apart from the job (--tile-cache-mb): finalize puts each
 * finished image that holds tile bytes at the end of a least-recently-used
 * list, svc_image_tiles moves it to the end on every use, and eviction
 * drops the oldest maps' bytes past the budget.  Eviction runs only where
 * no route holds a tile pointer: in svc_jobs_gc and at the start of
 * svc_image_tiles.  A dropped map comes back from <i>.tiles (tiles.h).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "jobs_int.h"
#include "log.h"
#include "server.h"
#include "tiles.h"
#include "util.h"

void svc_jobs_tile_lru_remove(svc_jobs *t, svc_image *img)
{
    if (!img->in_tile_lru)
        return;
    if (img->tile_prev)
        img->tile_prev->tile_next = img->tile_next;
    else
        t->tl_head = img->tile_next;
    if (img->tile_next)
        img->tile_next->tile_prev = img->tile_prev;
    else
        t->tl_tail = img->tile_prev;
    img->tile_prev = img->tile_next = NULL;
    t->tl_bytes -= img->tile_lru_bytes;
    img->tile_lru_bytes = 0;
    img->in_tile_lru = false;
}

/* At the end (most recently used); only maps that hold bytes. */
void svc_jobs_tile_lru_push(svc_jobs *t, svc_image *img)
{
    svc_jobs_tile_lru_remove(t, img);
    if (!img->tiles || img->tiles->dropped || img->tiles->bytes == 0)
        return;
    img->tile_lru_bytes = img->tiles->bytes;
    img->tile_prev = t->tl_tail;
    img->tile_next = NULL;
    if (t->tl_tail)
        t->tl_tail->tile_next = img;
    else
        t->tl_head = img;
    t->tl_tail = img;
    t->tl_bytes += img->tile_lru_bytes;
    img->in_tile_lru = true;
}

/* Drop the least recently used finished images' tile bytes past the budget. */
void svc_jobs_tile_evict(svc_server *s)
{
    svc_jobs *t = s->jobs;
    const size_t budget =
        s->cfg.tile_cache_mb > 0 ? (size_t)s->cfg.tile_cache_mb << 20 : (size_t)0;
    while (t->tl_bytes > budget && t->tl_head) {
        svc_image *img = t->tl_head;
        svc_jobs_tile_lru_remove(t, img);
        svc_tilemap_drop(img->tiles);
    }
}

svc_tilemap *svc_image_tiles(svc_server *s, svc_job *j, int index)
{
    svc_image *img = &j->images[index];
    svc_tilemap *m = img->tiles;
    if (m && !m->dropped) {
        if (img->in_tile_lru)
            svc_jobs_tile_lru_push(s->jobs, img); /* used: to the end */
        return m;
    }
    /* not in RAM (after a restart, or dropped past --tile-cache-mb): the
     * final versions from <i>.tiles, for a done image only */
    if (img->state != SVC_DONE || img->tiles_unreadable)
        return m;
    svc_jobs_tile_evict(s); /* make room first: nothing else is handed out now */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/jobs/%s/%d.tiles", s->cfg.data_dir, j->ids, index);
    char *data = NULL;
    size_t len = 0;
    int rc = svc_read_file(path, &data, &len, 256u << 20);
    if (rc == 0 && svc_tilemap_reload(&img->tiles, (const uint8_t *)data, len) < 0) {
        SVC_WARN("%s: not a tile file (or out of memory); ignored", path);
        rc = -EINVAL;
    }
    free(data);
    if (rc < 0) {
        img->tiles_unreadable = rc != -ENOMEM;
        return img->tiles;
    }
    if (svc_state_final(j->state))
        svc_jobs_tile_lru_push(s->jobs, img);
    return img->tiles;
}
