/* service/tiles/preview.c - a running image's latest preview, composed from
 * its current tiles.
 *
 * The tiles are the one source of previews: the SSE `tiles` events and the
 * CDN carry them as JPEG tiles, and the dialects that want a whole picture
 * (A1111's progress current_image, OpenAI's partial images, ComfyUI's
 * binary preview frames) paste the current version of every tile into one
 * RGB frame here, then encode it as their protocol asks.  Two policies:
 * `need_all` (OpenAI, ComfyUI) gives NULL while any tile is missing or does
 * not decode to its cell's size, so a client never sees a half-painted
 * frame; without it (A1111, whose clients poll) missing cells stay mid-grey.
 */
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "images.h"
#include "tiles.h"

uint8_t *svc_tiles_compose_rgb(const svc_tilemap *m, bool need_all)
{
    if (!m)
        return NULL;
    int w = m->width, h = m->height, ts = m->tile_size;
    if (w < 1 || h < 1 || ts < 1 || w > 4096 || h > 4096 || (!need_all && m->n_pubs == 0))
        return NULL;
    uint8_t *rgb = malloc((size_t)w * (size_t)h * 3);
    if (!rgb)
        return NULL;
    memset(rgb, 128, (size_t)w * (size_t)h * 3);
    char why[128];
    for (int row = 0; row < m->rows; row++) {
        for (int col = 0; col < m->cols; col++) {
            const svc_tile_blob *b = svc_tilemap_current(m, row, col);
            uint8_t *px = NULL;
            int tw = 0, th = 0, x0 = col * ts, y0 = row * ts;
            int ew = w - x0 < ts ? w - x0 : ts, eh = h - y0 < ts ? h - y0 : ts;
            bool ok = b && ew > 0 && eh > 0 &&
                      svc_image_decode(b->jpeg, b->len, 3, &px, &tw, &th, why, sizeof why) >= 0 &&
                      tw == ew && th == eh;
            if (!ok) {
                free(px);
                if (need_all) {
                    free(rgb);
                    return NULL;
                }
                continue;
            }
            for (int y = 0; y < th; y++)
                memcpy(rgb + ((size_t)(y0 + y) * (size_t)w + (size_t)x0) * 3,
                       px + (size_t)y * (size_t)tw * 3, (size_t)tw * 3);
            free(px);
        }
    }
    return rgb;
}

char *svc_tiles_preview_png_b64(const svc_tilemap *m, bool need_all)
{
    uint8_t *rgb = svc_tiles_compose_rgb(m, need_all);
    if (!rgb)
        return NULL;
    uint8_t *png = NULL;
    size_t len = 0;
    char why[128];
    int rc = svc_png_encode(rgb, m->width, m->height, NULL, &png, &len, why, sizeof why);
    free(rgb);
    if (rc < 0)
        return NULL;
    char *b64 = svc_base64_encode(png, len);
    free(png);
    return b64;
}
