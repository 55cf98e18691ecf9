/*
 * service/tiles/tiles.h - progressive preview tiles (docs/tiles.md).
 *
 * Every --preview-every K UNet calls the worker's step callback copies each
 * running image's preview (TSR_PREVIEW_IMAGE, image-size RGB) and hands the
 * copy to this module's encoder pool.  An encoder thread cuts it into a grid
 * of tile_size x tile_size tiles, compares each tile with the version last
 * published for it (mean absolute difference of its bytes) and JPEG-encodes
 * (TurboJPEG) only the tiles that changed by more than the threshold.  The
 * result (a svc_tileset) goes to the loop through the mailbox, which keeps
 * it in the image's svc_tilemap and announces it as an SSE `tiles` event.
 *
 * The final image is handed over the same way (svc_tiles_final): every tile
 * is re-encoded from the final RGB at full quality, then the RGB goes on to
 * the storage thread for the PNG.  So a job's final tiles reach the loop
 * before its image is stored, and the tile file (<i>.tiles) is on disk
 * before the PNG and job.json (the storage thread keeps order).
 *
 * Stale previews are dropped: an image has at most one preview waiting; a
 * newer one replaces it, and a final
 * image replaces any waiting preview.  One image is encoded by one thread at
 * a time, so its versions are published in order.
 *
 * Memory (docs/service-design.md, "Limits: the data dir"): a running
 * image's map holds every version of every tile, since clients fetch them
 * as the events announce them.  Once its job is final the map is what
 * --tile-cache-mb budgets (jobs/tile_cache.c keeps the finished maps in least
 * recently used order): past the budget svc_tilemap_drop frees the JPEG
 * bytes and keeps only the publish list (a few bytes a tile, for the SSE
 * history), and the final versions are read back from the image's .tiles
 * file when asked for (svc_tilemap_reload): the same bytes and ETags the
 * map held, so the URLs stay immutable; intermediate versions are then
 * 404, as after a restart.
 *
 * Owner: the pool's queue and per-image state belong to the pool (its
 * mutex); a svc_tileset belongs to whoever holds it (encoder, message,
 * then the loop, which frees it after applying it); svc_tilemap is the
 * loop's.
 */
#ifndef SVC_TILES_H
#define SVC_TILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct svc_mailbox;
struct svc_store;

/* One encoded tile version.  jpeg is owned. */
typedef struct svc_tile_blob {
    int row, col, version;
    uint8_t *jpeg;
    size_t len;
    char etag[33]; /* first 32 hex digits of the SHA-256 of the bytes */
} svc_tile_blob;

/* What one preview (or the final image) published. */
typedef struct svc_tileset {
    int width, height, tile_size, rows, cols;
    int step, version;
    bool final;
    int n;                 /* tiles published (changed ones; all for the final) */
    svc_tile_blob *tiles;  /* owned */
    double encode_seconds; /* CPU time spent on this preview (diff + encode) */
} svc_tileset;

void svc_tileset_free(svc_tileset *t);

/* ------------------------------------------------------------ the pool */

typedef struct svc_tiles_config {
    int threads;           /* encoder threads (default 1) */
    int tile_size;         /* image pixels (default 64) */
    double threshold;      /* mean absolute difference, 0..255, to re-publish a tile */
    int quality;           /* JPEG quality of previews (default 75) */
    int final_quality;     /* JPEG quality of the final tiles (default 95, 4:4:4) */
    struct svc_mailbox *mailbox;
    struct svc_store *store;
} svc_tiles_config;

typedef struct svc_tiles svc_tiles;

svc_tiles *svc_tiles_start(const svc_tiles_config *cfg);
/* Encode what is queued (finals; previews are dropped), end the threads, free. */
void svc_tiles_stop(svc_tiles *t);
/* A preview of image (job, index) after UNet call `version` (1, 2, ...);
 * rgb (w x h x 3) is taken over.  Any thread (the worker's callback). */
void svc_tiles_preview(svc_tiles *t, uint64_t job, int index, int version, int step,
                       uint8_t *rgb, int width, int height);
/* The final image: rgb and infotext are taken over; after its tiles are
 * posted, both go to svc_store_image (and the tile file to the store). */
void svc_tiles_final(svc_tiles *t, uint64_t job, int index, int version, int step, uint8_t *rgb,
                     int width, int height, char *infotext);
/* The image left its batch without a final image: drop its state. */
void svc_tiles_forget(svc_tiles *t, uint64_t job, int index);
/* Block until every final image handed over has gone on to the store
 * (drain: before the storage thread's last barrier).  Milliseconds. */
void svc_tiles_flush(svc_tiles *t);

/* ------------------------------------------- the loop's view of an image */

typedef struct svc_tile_ref {
    int16_t row, col;
    int32_t version;
} svc_tile_ref;

typedef struct svc_tile_publish {
    int step;
    int n;
    svc_tile_ref *refs; /* owned */
} svc_tile_publish;

typedef struct svc_tile_cell {
    svc_tile_blob *vers; /* every version kept, oldest first (owned) */
    int n, cap;
} svc_tile_cell;

typedef struct svc_tilemap {
    int width, height, tile_size, rows, cols;
    bool final;
    int step;              /* of the last publish */
    svc_tile_cell *cells;  /* rows * cols */
    svc_tile_publish *pubs;
    int n_pubs, cap_pubs;
    size_t bytes;          /* all versions held */
    bool dropped;          /* svc_tilemap_drop: no versions held (cells NULL) */
} svc_tilemap;

/* An empty map of a grid (NULL when the grid is out of range or out of
 * memory). */
svc_tilemap *svc_tilemap_new(int width, int height, int tile_size, int rows, int cols);
/* Add a tile version, taking b->jpeg over (then NULL); false when not newer
 * than the cell's last version, or out of memory (b keeps its bytes). */
bool svc_tilemap_add(svc_tilemap *m, svc_tile_blob *b);
void svc_tilemap_free(svc_tilemap *m);
/* Take the tileset's blobs over (ts->tiles emptied); returns the publish
 * index, or -1 on out of memory or a final / dropped map.  A tileset of
 * another grid (an image that grew: the hires fix) replaces the map's grid
 * and drops the old grid's versions; the publish list goes on. */
int svc_tilemap_apply(svc_tilemap **m, svc_tileset *ts);
/* Free every version's bytes (the map must not take new publishes); the
 * grid and the publish list stay.  Returns the bytes freed. */
size_t svc_tilemap_drop(svc_tilemap *m);
/* The final versions from a .tiles file's bytes into *m (a new map when
 * *m is NULL, else the dropped map whose grid the file must match: its
 * publish list stays).  0, or -1 when malformed / out of memory. */
int svc_tilemap_reload(svc_tilemap **m, const uint8_t *data, size_t len);
/* The current version of a tile (NULL if none yet). */
const svc_tile_blob *svc_tilemap_current(const svc_tilemap *m, int row, int col);
const svc_tile_blob *svc_tilemap_find(const svc_tilemap *m, int version, int row, int col);

/* A running image's latest preview from its current tiles (tiles/preview.c):
 * RGB width*height*3 (malloc'd), or NULL.  need_all: NULL while any tile
 * is missing or wrong-sized (OpenAI partials, ComfyUI frames); otherwise
 * missing cells are mid-grey (A1111's current_image). */
uint8_t *svc_tiles_compose_rgb(const svc_tilemap *m, bool need_all);
/* The same as a base64 PNG (malloc'd), or NULL. */
char *svc_tiles_preview_png_b64(const svc_tilemap *m, bool need_all);

/* The .tiles file of an image: the final version of every tile.
 * "TSRTILE1", u32 LE header length, JSON header {"width", "height",
 * "tile_size", "rows", "cols", "tiles": [[row, col, version, offset, len,
 * etag], ...]}, then the JPEG bytes (offsets from the end of the header). */
int svc_tiles_file_encode(const svc_tileset *ts, uint8_t **out, size_t *len);
/* A tilemap (final) from a .tiles file's bytes; NULL when malformed. */
svc_tilemap *svc_tilemap_from_file(const uint8_t *data, size_t len);
/* The same bytes as a tileset (every tile of the file; version = the
 * highest tile version, final false): how a cluster api node reads the
 * tiles a worker node published (docs/scale-out.md).  NULL when malformed. */
svc_tileset *svc_tileset_from_file(const uint8_t *data, size_t len);

#endif
