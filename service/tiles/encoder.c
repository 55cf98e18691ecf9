/*
 * service/tiles/encoder.c - see tiles.h: the encoder pool.  The loop's
 * tile maps are tilemap.c's, the .tiles file format tile_file.c's.
 *
 * Why a pool of its own: JPEG encoding must stay off the event loop (it
 * serves HTTP) and off the worker (its time is UNet time).  The worker only
 * copies the preview (a memcpy of w*h*3 bytes) and queues it; an image
 * never has more than one preview waiting, so a slow encoder costs
 * intermediate previews, never memory or UNet time.
 */
#include "tiles.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turbojpeg.h>

#include "log.h"
#include "mailbox.h"
#include "store.h"
#include "util.h"

#define MAX_THREADS 8

typedef struct tile_task {
    int version, step, width, height;
    uint8_t *rgb;
    char *infotext;
    bool final;
} tile_task;

/* One image being previewed. */
typedef struct img_state {
    uint64_t job;
    int index;
    int width, height;
    uint8_t *last;       /* the published pixels of every tile (w*h*3), NULL before the first */
    bool busy, queued, forget;
    tile_task *preview;  /* waiting (at most one) */
    tile_task *final;
    struct img_state *next;  /* every state */
    struct img_state *qnext; /* ready queue */
} img_state;

struct svc_tiles {
    svc_tiles_config cfg;
    pthread_t threads[MAX_THREADS];
    int n_threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_cond_t idle_cv;   /* signalled when an encode ends */
    bool stopping;
    img_state *states;
    img_state *qhead, *qtail;
};

static void task_free(tile_task *t)
{
    if (!t)
        return;
    free(t->rgb);
    free(t->infotext);
    free(t);
}

void svc_tileset_free(svc_tileset *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n; i++)
        free(t->tiles[i].jpeg);
    free(t->tiles);
    free(t);
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Mean absolute difference of a tile between two images (bytes, 0..255). */
static double tile_mad(const uint8_t *a, const uint8_t *b, int stride, int x0, int y0, int tw,
                       int th)
{
    uint64_t sum = 0;
    for (int y = y0; y < y0 + th; y++) {
        const uint8_t *pa = a + (size_t)y * stride + (size_t)x0 * 3;
        const uint8_t *pb = b + (size_t)y * stride + (size_t)x0 * 3;
        for (int k = 0; k < tw * 3; k++)
            sum += (unsigned)abs((int)pa[k] - (int)pb[k]);
    }
    return (double)sum / ((double)tw * th * 3);
}

static void copy_tile(uint8_t *dst, const uint8_t *src, int stride, int x0, int y0, int tw, int th)
{
    for (int y = y0; y < y0 + th; y++)
        memcpy(dst + (size_t)y * stride + (size_t)x0 * 3, src + (size_t)y * stride + (size_t)x0 * 3,
               (size_t)tw * 3);
}

/* Encode the changed tiles of one task (all of them for a final). */
static svc_tileset *encode(svc_tiles *t, tjhandle tj, img_state *st, tile_task *task)
{
    const double c0 = cpu_now();
    const int ts = t->cfg.tile_size, w = task->width, h = task->height, stride = w * 3;
    const int rows = (h + ts - 1) / ts, cols = (w + ts - 1) / ts;
    svc_tileset *out = calloc(1, sizeof *out);
    if (!out)
        return NULL;
    out->width = w;
    out->height = h;
    out->tile_size = ts;
    out->rows = rows;
    out->cols = cols;
    out->step = task->step;
    out->version = task->version;
    out->final = task->final;
    out->tiles = calloc((size_t)rows * cols, sizeof *out->tiles);
    if (!out->tiles) {
        free(out);
        return NULL;
    }
    if (st->last && (st->width != w || st->height != h)) {
        free(st->last);
        st->last = NULL;
    }
    bool first = st->last == NULL;
    if (first) {
        st->last = malloc((size_t)w * h * 3);
        st->width = w;
        st->height = h;
    }
    /* debug log: every tile's MAD (tools/tiles/measure_mad.py reads it) */
    char madlog[1024];
    size_t madlen = 0;
    madlog[0] = '\0';
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) {
            const int x0 = c * ts, y0 = r * ts;
            const int tw = x0 + ts <= w ? ts : w - x0, th = y0 + ts <= h ? ts : h - y0;
            if (!task->final && !first && st->last) {
                const double mad = tile_mad(task->rgb, st->last, stride, x0, y0, tw, th);
                if (madlen < sizeof madlog - 16)
                    madlen += (size_t)snprintf(madlog + madlen, sizeof madlog - madlen, " %.2f",
                                               mad);
                if (mad <= t->cfg.threshold)
                    continue;
            }
            unsigned char *jpeg = NULL;
            unsigned long jlen = 0;
            const int q = task->final ? t->cfg.final_quality : t->cfg.quality;
            const int sub = task->final ? TJSAMP_444 : TJSAMP_420;
            if (tjCompress2(tj, task->rgb + (size_t)y0 * stride + (size_t)x0 * 3, tw, stride, th,
                            TJPF_RGB, &jpeg, &jlen, sub, q, TJFLAG_FASTDCT) != 0) {
                SVC_WARN("tiles: JPEG encode failed: %s", tjGetErrorStr2(tj));
                tjFree(jpeg);
                continue;
            }
            svc_tile_blob *b = &out->tiles[out->n];
            b->jpeg = malloc(jlen);
            if (!b->jpeg) {
                tjFree(jpeg);
                continue;
            }
            memcpy(b->jpeg, jpeg, jlen);
            tjFree(jpeg);
            b->len = jlen;
            b->row = r;
            b->col = c;
            b->version = task->version;
            char hex[65];
            svc_sha256_hex(b->jpeg, b->len, hex);
            memcpy(b->etag, hex, 32);
            b->etag[32] = '\0';
            out->n++;
            if (st->last)
                copy_tile(st->last, task->rgb, stride, x0, y0, tw, th);
        }
    }
    out->encode_seconds = cpu_now() - c0;
    if (madlen)
        SVC_DEBUG("tiles: mad step %d version %d:%s", task->step, task->version, madlog);
    return out;
}

static void enqueue_locked(svc_tiles *t, img_state *st)
{
    if (st->queued || st->busy)
        return;
    st->queued = true;
    st->qnext = NULL;
    if (t->qtail)
        t->qtail->qnext = st;
    else
        t->qhead = st;
    t->qtail = st;
    pthread_cond_signal(&t->cv);
}

static void remove_state_locked(svc_tiles *t, img_state *st)
{
    for (img_state **p = &t->states; *p; p = &(*p)->next) {
        if (*p == st) {
            *p = st->next;
            break;
        }
    }
    task_free(st->preview);
    task_free(st->final);
    free(st->last);
    free(st);
}

static void post_tiles(svc_tiles *t, img_state *st, svc_tileset *ts)
{
    svc_msg *m = svc_msg_new(SVC_MSG_TILES);
    if (!m) {
        svc_tileset_free(ts);
        return;
    }
    m->job = st->job;
    m->index = st->index;
    m->step = ts->step;
    m->tiles = ts;
    svc_mailbox_post(t->cfg.mailbox, m);
}

static void *encoder_main(void *arg)
{
    svc_tiles *t = arg;
    tjhandle tj = tjInitCompress();
    if (!tj)
        SVC_ERROR("tiles: cannot start a TurboJPEG compressor");
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->qhead && !t->stopping)
            pthread_cond_wait(&t->cv, &t->mu);
        img_state *st = t->qhead;
        if (!st)
            break; /* stopping and nothing queued */
        t->qhead = st->qnext;
        if (!t->qhead)
            t->qtail = NULL;
        st->queued = false;
        tile_task *task = st->final ? st->final : st->preview;
        if (st->final) {
            st->final = NULL;
            task_free(st->preview);
            st->preview = NULL;
        } else {
            st->preview = NULL;
        }
        if (!task || (t->stopping && !task->final)) {
            task_free(task);
            continue;
        }
        st->busy = true;
        pthread_mutex_unlock(&t->mu);

        svc_tileset *ts = tj ? encode(t, tj, st, task) : NULL;
        uint8_t *file = NULL;
        size_t file_len = 0;
        /* the file before the post: the loop takes the blobs over */
        if (ts && task->final && svc_tiles_file_encode(ts, &file, &file_len) < 0)
            file = NULL;
        if (ts)
            post_tiles(t, st, ts); /* ts belongs to the message now */
        if (task->final) {
            if (file)
                svc_store_tiles(t->cfg.store, st->job, st->index, file, file_len);
            /* the PNG after the tiles: the loop hears of the tiles first */
            svc_store_image(t->cfg.store, st->job, st->index, task->rgb, task->width,
                            task->height, task->infotext);
            task->rgb = NULL;
            task->infotext = NULL;
        }
        const bool done = task->final;
        task_free(task);

        pthread_mutex_lock(&t->mu);
        st->busy = false;
        pthread_cond_broadcast(&t->idle_cv);
        if (done || st->forget)
            remove_state_locked(t, st);
        else if (st->preview || st->final)
            enqueue_locked(t, st);
    }
    pthread_mutex_unlock(&t->mu);
    if (tj)
        tjDestroy(tj);
    return NULL;
}

svc_tiles *svc_tiles_start(const svc_tiles_config *cfg)
{
    svc_tiles *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->cfg = *cfg;
    if (t->cfg.threads < 1)
        t->cfg.threads = 1;
    if (t->cfg.threads > MAX_THREADS)
        t->cfg.threads = MAX_THREADS;
    if (t->cfg.tile_size < 8)
        t->cfg.tile_size = 64;
    if (t->cfg.quality < 1 || t->cfg.quality > 100)
        t->cfg.quality = 75;
    if (t->cfg.final_quality < 1 || t->cfg.final_quality > 100)
        t->cfg.final_quality = 95;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_cond_init(&t->idle_cv, NULL);
    for (int i = 0; i < t->cfg.threads; i++) {
        if (pthread_create(&t->threads[i], NULL, encoder_main, t) != 0)
            break;
        t->n_threads++;
    }
    if (t->n_threads == 0) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
    }
    return t;
}

void svc_tiles_stop(svc_tiles *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stopping = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n_threads; i++)
        pthread_join(t->threads[i], NULL);
    while (t->states)
        remove_state_locked(t, t->states);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static img_state *state_locked(svc_tiles *t, uint64_t job, int index, bool create)
{
    for (img_state *st = t->states; st; st = st->next)
        if (st->job == job && st->index == index)
            return st;
    if (!create)
        return NULL;
    img_state *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->job = job;
    st->index = index;
    st->next = t->states;
    t->states = st;
    return st;
}

static void submit(svc_tiles *t, uint64_t job, int index, tile_task *task)
{
    pthread_mutex_lock(&t->mu);
    img_state *st = t->stopping && !task->final ? NULL : state_locked(t, job, index, true);
    if (!st) {
        pthread_mutex_unlock(&t->mu);
        if (task->final) {
            /* no tiles, but the image must still be stored */
            SVC_WARN("tiles: image %d: no encoder state; stored without tiles", index);
        }
        task_free(task);
        return;
    }
    if (task->final) {
        task_free(st->final);
        st->final = task;
        if (st->preview) {
            task_free(st->preview);
            st->preview = NULL;
        }
    } else {
        if (st->preview)
            task_free(st->preview); /* stale: the encoder fell behind */
        st->preview = task;
    }
    enqueue_locked(t, st);
    pthread_mutex_unlock(&t->mu);
}

void svc_tiles_preview(svc_tiles *t, uint64_t job, int index, int version, int step,
                       uint8_t *rgb, int width, int height)
{
    tile_task *task = calloc(1, sizeof *task);
    if (!task) {
        free(rgb);
        return;
    }
    *task = (tile_task){version, step, width, height, rgb, NULL, false};
    submit(t, job, index, task);
}

void svc_tiles_final(svc_tiles *t, uint64_t job, int index, int version, int step, uint8_t *rgb,
                     int width, int height, char *infotext)
{
    tile_task *task = calloc(1, sizeof *task);
    if (!task) {
        svc_store_image(t->cfg.store, job, index, rgb, width, height, infotext);
        return;
    }
    *task = (tile_task){version, step, width, height, rgb, infotext, true};
    pthread_mutex_lock(&t->mu);
    img_state *st = state_locked(t, job, index, true);
    pthread_mutex_unlock(&t->mu);
    if (!st) {
        task->rgb = NULL;
        task->infotext = NULL;
        task_free(task);
        svc_store_image(t->cfg.store, job, index, rgb, width, height, infotext);
        return;
    }
    submit(t, job, index, task);
}

void svc_tiles_forget(svc_tiles *t, uint64_t job, int index)
{
    pthread_mutex_lock(&t->mu);
    img_state *st = state_locked(t, job, index, false);
    if (st) {
        if (st->busy || st->queued) {
            st->forget = true;
            task_free(st->preview);
            st->preview = NULL;
            if (!st->busy) {
                /* take it out of the queue */
                img_state **p = &t->qhead;
                img_state *prev = NULL;
                while (*p && *p != st) {
                    prev = *p;
                    p = &(*p)->qnext;
                }
                if (*p) {
                    *p = st->qnext;
                    if (t->qtail == st)
                        t->qtail = prev;
                }
                remove_state_locked(t, st);
            }
        } else {
            remove_state_locked(t, st);
        }
    }
    pthread_mutex_unlock(&t->mu);
}

void svc_tiles_flush(svc_tiles *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        bool pending = false;
        for (img_state *st = t->states; st && !pending; st = st->next)
            pending = st->busy || st->final;
        if (!pending)
            break;
        pthread_cond_wait(&t->idle_cv, &t->mu);
    }
    pthread_mutex_unlock(&t->mu);
}
