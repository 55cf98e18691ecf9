/*
 * service/tiles/tile_file.c - the .tiles file of an image (tiles.h gives
 * the layout): its final tiles, written by the storage thread beside the
 * PNG and read back when a finished job's map is not in RAM, or, with
 * --queue, when an api node reads the tiles a worker node published.
 *
 * A JSON header and the JPEG bytes after it: the header is small and
 * self-describing (cJSON is already linked), the bytes are served as they
 * are, and a reader checks every offset against the file's length.
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tiles.h"

#define TILES_MAGIC "TSRTILE1"

int svc_tiles_file_encode(const svc_tileset *ts, uint8_t **out, size_t *len)
{
    cJSON *h = cJSON_CreateObject();
    if (!h)
        return -1;
    cJSON_AddNumberToObject(h, "width", ts->width);
    cJSON_AddNumberToObject(h, "height", ts->height);
    cJSON_AddNumberToObject(h, "tile_size", ts->tile_size);
    cJSON_AddNumberToObject(h, "rows", ts->rows);
    cJSON_AddNumberToObject(h, "cols", ts->cols);
    cJSON_AddNumberToObject(h, "step", ts->step);
    cJSON *arr = cJSON_AddArrayToObject(h, "tiles");
    size_t off = 0;
    for (int i = 0; i < ts->n; i++) {
        const svc_tile_blob *b = &ts->tiles[i];
        cJSON *e = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateNumber(b->row));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(b->col));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(b->version));
        cJSON_AddItemToArray(e, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(e, cJSON_CreateNumber((double)b->len));
        cJSON_AddItemToArray(e, cJSON_CreateString(b->etag));
        cJSON_AddItemToArray(arr, e);
        off += b->len;
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!text)
        return -1;
    const size_t hl = strlen(text);
    uint8_t *buf = malloc(8 + 4 + hl + off);
    if (!buf) {
        cJSON_free(text);
        return -1;
    }
    memcpy(buf, TILES_MAGIC, 8);
    buf[8] = (uint8_t)hl;
    buf[9] = (uint8_t)(hl >> 8);
    buf[10] = (uint8_t)(hl >> 16);
    buf[11] = (uint8_t)(hl >> 24);
    memcpy(buf + 12, text, hl);
    cJSON_free(text);
    size_t p = 12 + hl;
    for (int i = 0; i < ts->n; i++) {
        memcpy(buf + p, ts->tiles[i].jpeg, ts->tiles[i].len);
        p += ts->tiles[i].len;
    }
    *out = buf;
    *len = p;
    return 0;
}

static int geti(const cJSON *o, const char *name)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(it) ? (int)it->valuedouble : -1;
}

svc_tilemap *svc_tilemap_from_file(const uint8_t *data, size_t len)
{
    if (len < 12 || memcmp(data, TILES_MAGIC, 8) != 0)
        return NULL;
    const size_t hl = (size_t)data[8] | (size_t)data[9] << 8 | (size_t)data[10] << 16 |
                      (size_t)data[11] << 24;
    if (hl > len - 12)
        return NULL;
    cJSON *h = cJSON_ParseWithLength((const char *)data + 12, hl);
    if (!h)
        return NULL;
    const uint8_t *body = data + 12 + hl;
    const size_t blen = len - 12 - hl;
    svc_tilemap *m = svc_tilemap_new(geti(h, "width"), geti(h, "height"), geti(h, "tile_size"),
                             geti(h, "rows"), geti(h, "cols"));
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(h, "tiles");
    bool ok = m && cJSON_IsArray(arr);
    const cJSON *e;
    if (ok) {
        m->step = geti(h, "step");
        m->final = true;
        cJSON_ArrayForEach(e, arr)
        {
            if (cJSON_GetArraySize(e) != 6) {
                ok = false;
                break;
            }
            svc_tile_blob b;
            memset(&b, 0, sizeof b);
            b.row = (int)cJSON_GetArrayItem(e, 0)->valuedouble;
            b.col = (int)cJSON_GetArrayItem(e, 1)->valuedouble;
            b.version = (int)cJSON_GetArrayItem(e, 2)->valuedouble;
            double off = cJSON_GetArrayItem(e, 3)->valuedouble;
            double l = cJSON_GetArrayItem(e, 4)->valuedouble;
            const char *etag = cJSON_GetStringValue(cJSON_GetArrayItem(e, 5));
            if (off < 0 || l <= 0 || off + l > (double)blen || !etag || strlen(etag) != 32 ||
                b.row < 0 || b.row >= m->rows || b.col < 0 || b.col >= m->cols) {
                ok = false;
                break;
            }
            b.len = (size_t)l;
            b.jpeg = malloc(b.len);
            if (!b.jpeg) {
                ok = false;
                break;
            }
            memcpy(b.jpeg, body + (size_t)off, b.len);
            memcpy(b.etag, etag, 33);
            if (!svc_tilemap_add(m, &b)) {
                free(b.jpeg);
                ok = false;
                break;
            }
        }
    }
    cJSON_Delete(h);
    if (!ok) {
        svc_tilemap_free(m);
        return NULL;
    }
    return m;
}

svc_tileset *svc_tileset_from_file(const uint8_t *data, size_t len)
{
    svc_tilemap *m = svc_tilemap_from_file(data, len);
    if (!m)
        return NULL;
    svc_tileset *ts = calloc(1, sizeof *ts);
    int n = 0;
    for (int c = 0; c < m->rows * m->cols; c++)
        n += m->cells[c].n;
    if (ts)
        ts->tiles = calloc((size_t)(n ? n : 1), sizeof *ts->tiles);
    if (!ts || !ts->tiles) {
        free(ts);
        svc_tilemap_free(m);
        return NULL;
    }
    ts->width = m->width;
    ts->height = m->height;
    ts->tile_size = m->tile_size;
    ts->rows = m->rows;
    ts->cols = m->cols;
    ts->step = m->step;
    /* row-major, as the encoder publishes them; each cell holds one version */
    for (int c = 0; c < m->rows * m->cols; c++)
        for (int v = 0; v < m->cells[c].n; v++) {
            ts->tiles[ts->n] = m->cells[c].vers[v];
            m->cells[c].vers[v].jpeg = NULL;
            if (ts->tiles[ts->n].version > ts->version)
                ts->version = ts->tiles[ts->n].version;
            ts->n++;
        }
    svc_tilemap_free(m);
    return ts;
}
