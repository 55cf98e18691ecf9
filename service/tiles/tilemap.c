/*
 * service/tiles/tilemap.c - the loop's view of an image's tiles (tiles.h):
 * every version of every tile, and the list of what each publish changed,
 * which is what a client that resumes a stream needs to fetch.
 *
 * A running image keeps every version, since a client may ask for any
 * version an event named; a finished one can drop its bytes under memory
 * pressure (svc_tilemap_drop, the --tile-cache-mb LRU in jobs/) and load
 * its final versions back from its .tiles file (svc_tilemap_reload),
 * keeping the publish list.  Only the loop thread touches a map.
 */
#include <stdlib.h>

#include "tiles.h"

/* Every version's bytes and the cells (NULL after). */
static void free_cells(svc_tilemap *m)
{
    for (int i = 0; m->cells && i < m->rows * m->cols; i++) {
        for (int k = 0; k < m->cells[i].n; k++)
            free(m->cells[i].vers[k].jpeg);
        free(m->cells[i].vers);
    }
    free(m->cells);
    m->cells = NULL;
}

void svc_tilemap_free(svc_tilemap *m)
{
    if (!m)
        return;
    free_cells(m);
    for (int i = 0; i < m->n_pubs; i++)
        free(m->pubs[i].refs);
    free(m->pubs);
    free(m);
}

svc_tilemap *svc_tilemap_new(int width, int height, int tile_size, int rows, int cols)
{
    if (rows <= 0 || cols <= 0 || rows > 4096 || cols > 4096)
        return NULL;
    svc_tilemap *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->width = width;
    m->height = height;
    m->tile_size = tile_size;
    m->rows = rows;
    m->cols = cols;
    m->cells = calloc((size_t)rows * cols, sizeof *m->cells);
    if (!m->cells) {
        free(m);
        return NULL;
    }
    return m;
}

bool svc_tilemap_add(svc_tilemap *m, svc_tile_blob *b)
{
    svc_tile_cell *c = &m->cells[b->row * m->cols + b->col];
    if (c->n && c->vers[c->n - 1].version >= b->version)
        return false; /* versions only grow */
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 4;
        svc_tile_blob *nv = realloc(c->vers, (size_t)cap * sizeof *nv);
        if (!nv)
            return false;
        c->vers = nv;
        c->cap = cap;
    }
    c->vers[c->n++] = *b;
    m->bytes += b->len;
    b->jpeg = NULL;
    return true;
}

int svc_tilemap_apply(svc_tilemap **mp, svc_tileset *ts)
{
    svc_tilemap *m = *mp;
    if (!m) {
        m = svc_tilemap_new(ts->width, ts->height, ts->tile_size, ts->rows, ts->cols);
        if (!m)
            return -1;
        *mp = m;
    }
    if (m->final || m->dropped)
        return -1;
    if (m->rows != ts->rows || m->cols != ts->cols || m->width != ts->width ||
        m->height != ts->height) {
        /* the image changed size mid-way (the hires fix's second pass): the
         * map takes the new grid; the old grid's versions go (their URLs
         * 404 from now on), the publish list and its indices go on */
        if (ts->rows <= 0 || ts->cols <= 0 || ts->rows > 4096 || ts->cols > 4096)
            return -1;
        svc_tile_cell *cells = calloc((size_t)ts->rows * ts->cols, sizeof *cells);
        if (!cells)
            return -1;
        free_cells(m);
        m->cells = cells;
        m->bytes = 0;
        m->width = ts->width;
        m->height = ts->height;
        m->tile_size = ts->tile_size;
        m->rows = ts->rows;
        m->cols = ts->cols;
    }
    if (m->n_pubs == m->cap_pubs) {
        int cap = m->cap_pubs ? m->cap_pubs * 2 : 16;
        svc_tile_publish *np = realloc(m->pubs, (size_t)cap * sizeof *np);
        if (!np)
            return -1;
        m->pubs = np;
        m->cap_pubs = cap;
    }
    svc_tile_publish *p = &m->pubs[m->n_pubs];
    p->step = ts->step;
    p->n = 0;
    p->refs = calloc((size_t)(ts->n ? ts->n : 1), sizeof *p->refs);
    if (!p->refs)
        return -1;
    for (int i = 0; i < ts->n; i++) {
        svc_tile_blob *b = &ts->tiles[i];
        if (b->row < 0 || b->row >= m->rows || b->col < 0 || b->col >= m->cols)
            continue;
        svc_tile_ref ref = {(int16_t)b->row, (int16_t)b->col, b->version};
        if (svc_tilemap_add(m, b))
            p->refs[p->n++] = ref;
    }
    m->step = ts->step;
    m->final = ts->final;
    return m->n_pubs++;
}

size_t svc_tilemap_drop(svc_tilemap *m)
{
    if (!m || m->dropped)
        return 0;
    const size_t freed = m->bytes;
    free_cells(m);
    m->bytes = 0;
    m->dropped = true;
    return freed;
}

int svc_tilemap_reload(svc_tilemap **mp, const uint8_t *data, size_t len)
{
    svc_tilemap *f = svc_tilemap_from_file(data, len);
    if (!f)
        return -1;
    svc_tilemap *m = *mp;
    if (!m) {
        *mp = f;
        return 0;
    }
    if (!m->dropped || f->rows != m->rows || f->cols != m->cols) {
        svc_tilemap_free(f);
        return -1;
    }
    m->cells = f->cells;
    m->bytes = f->bytes;
    m->final = true;
    m->dropped = false;
    f->cells = NULL;
    svc_tilemap_free(f);
    return 0;
}

const svc_tile_blob *svc_tilemap_current(const svc_tilemap *m, int row, int col)
{
    if (!m || !m->cells || row < 0 || row >= m->rows || col < 0 || col >= m->cols)
        return NULL;
    const svc_tile_cell *c = &m->cells[row * m->cols + col];
    return c->n ? &c->vers[c->n - 1] : NULL;
}

const svc_tile_blob *svc_tilemap_find(const svc_tilemap *m, int version, int row, int col)
{
    if (!m || !m->cells || row < 0 || row >= m->rows || col < 0 || col >= m->cols)
        return NULL;
    const svc_tile_cell *c = &m->cells[row * m->cols + col];
    for (int k = c->n - 1; k >= 0; k--)
        if (c->vers[k].version == version)
            return &c->vers[k];
    return NULL;
}
