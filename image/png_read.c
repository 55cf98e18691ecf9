/*
 * image/png_read.c - PNG decoding of hostile files, through libpng.
 *
 * Why it is built this way:
 * - Before libpng sees a byte, the reader checks the signature and parses
 *   the IHDR itself, so the common failures get plain messages naming the
 *   file ("x.png: not a PNG file", "x.png: 40000x40000 exceeds the 16384
 *   limit") and the size limits hold before any allocation.  libpng's own
 *   limits (png_set_user_limits, chunk cache and chunk malloc caps, which
 *   bound zTXt decompression) back this up.
 * - The data source is one callback over either memory or a FILE (after the
 *   33 header bytes already read); running out of data raises "truncated"
 *   instead of libpng's generic read error.
 * - libpng's longjmp lands in decode(), the only function with a setjmp.
 *   Everything that outlives a jump (pixel buffer, row pointers, message)
 *   is in a context struct owned by the caller, reached through a pointer
 *   that never changes, so nothing is indeterminate after the jump and the
 *   caller frees it all on one exit path.
 * - libpng expands every colour type and depth to 8-bit gray, gray+alpha,
 *   RGB or RGBA (palette, tRNS, 1/2/4-bit gray, 16-bit strip, Adam7); the
 *   final conversion to the wanted channel count is tsr_image_convert_row,
 *   shared with the JPEG decoder.  Gamma and colour profiles are ignored,
 *   as PIL ignores them.
 */
#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/image.h"
#include "image/image_internal.h"

#define PNG_HEAD_BYTES 33                 /* signature + IHDR chunk */
#define PNG_TEXT_CHUNK_MAX (8u << 20)     /* one (decompressed) ancillary chunk */
#define PNG_CHUNK_CACHE_MAX 128           /* ancillary chunks kept (text, sPLT...) */
#define PNG_LIBPNG_BUDGET (64u << 20)     /* libpng's own live allocations */

typedef struct png_rctx {
    const char *name; /* borrowed: for messages */
    char msg[256];    /* libpng's error message */
    bool truncated;   /* the source ran out */

    /* source: the head bytes first, then memory or the FILE */
    uint8_t head[PNG_HEAD_BYTES];
    size_t head_len, head_pos;
    const uint8_t *mem; /* borrowed */
    size_t mem_size, mem_pos;
    FILE *f; /* borrowed */

    size_t libpng_live; /* bytes libpng holds now (see png_alloc) */
    bool over_budget;   /* png_alloc refused an allocation */

    bool want_text;
    uint32_t channels; /* after libpng's transforms: 1..4 */
    uint8_t *pixels;   /* owned: height * width * channels */
    png_bytep *rows;   /* owned */
} png_rctx;

static void on_error(png_structp png, png_const_charp msg)
{
    png_rctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof(c->msg), "%s", msg ? msg : "libpng error");
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* libpng's allocator.  libpng allocates a buffer of the declared length
 * for ancillary chunks (iTXt, iCCP, unknown) and only warns when that length
 * exceeds png_set_chunk_malloc_max, so a 60-byte file can ask for 2 GB.
 * Each allocation carries its size in a header and the live total is
 * capped; a refused allocation makes libpng skip the chunk or fail with
 * "out of memory", both clean. */
typedef union png_alloc_hdr {
    size_t size;
    max_align_t align;
} png_alloc_hdr;

static png_voidp png_alloc(png_structp png, png_alloc_size_t size)
{
    png_rctx *c = png_get_mem_ptr(png);
    if (size > PNG_LIBPNG_BUDGET || (c && size > PNG_LIBPNG_BUDGET - c->libpng_live)) {
        if (c)
            c->over_budget = true;
        return NULL;
    }
    png_alloc_hdr *h = malloc(sizeof(*h) + size);
    if (!h)
        return NULL;
    h->size = size;
    if (c)
        c->libpng_live += size;
    return h + 1;
}

static void png_dealloc(png_structp png, png_voidp p)
{
    if (!p)
        return;
    png_alloc_hdr *h = (png_alloc_hdr *)p - 1;
    png_rctx *c = png_get_mem_ptr(png);
    if (c)
        c->libpng_live -= h->size;
    free(h);
}

static size_t src_take(png_rctx *c, uint8_t *out, size_t n)
{
    size_t got = 0;
    if (c->head_pos < c->head_len) {
        size_t k = c->head_len - c->head_pos;
        if (k > n)
            k = n;
        memcpy(out, c->head + c->head_pos, k);
        c->head_pos += k;
        got += k;
    }
    if (got < n) {
        if (c->f) {
            got += fread(out + got, 1, n - got, c->f);
        } else if (c->mem) {
            size_t k = c->mem_size - c->mem_pos;
            if (k > n - got)
                k = n - got;
            memcpy(out + got, c->mem + c->mem_pos, k);
            c->mem_pos += k;
            got += k;
        }
    }
    return got;
}

static void on_read(png_structp png, png_bytep out, size_t n)
{
    png_rctx *c = png_get_io_ptr(png);
    if (src_take(c, out, n) != n) {
        c->truncated = true;
        png_error(png, "truncated");
    }
}

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Signature and IHDR checks on the first 33 bytes, before libpng. */
static int precheck(png_rctx *c, const tsr_image_limits *limits)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    c->head_len = src_take(c, c->head, PNG_HEAD_BYTES);
    if (c->head_len < 8 || memcmp(c->head, sig, 8) != 0) {
        if (c->head_len == 0)
            return tsr_errorf(TSR_ERR_FORMAT, "%s: not a PNG file (empty)", c->name);
        return tsr_errorf(TSR_ERR_FORMAT, "%s: not a PNG file", c->name);
    }
    if (c->head_len < PNG_HEAD_BYTES)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: truncated (%zu bytes, IHDR incomplete)", c->name,
                          c->head_len);
    if (be32(c->head + 8) != 13 || memcmp(c->head + 12, "IHDR", 4) != 0)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: first chunk is not a 13-byte IHDR", c->name);
    uint32_t w = be32(c->head + 16), h = be32(c->head + 20);
    return tsr_image_check_size(w, h, 4, limits, c->name);
}

/* The only function with a setjmp; see the file comment. */
static int decode(png_structp png, png_infop info, png_rctx *c, uint32_t max_side)
{
    if (setjmp(png_jmpbuf(png)))
        return -1;
    png_set_read_fn(png, c, on_read);
    png_set_user_limits(png, max_side, max_side);
    png_set_chunk_cache_max(png, PNG_CHUNK_CACHE_MAX);
    png_set_chunk_malloc_max(png, PNG_TEXT_CHUNK_MAX);
#ifdef PNG_SKIP_sRGB_CHECK_PROFILE
    png_set_option(png, PNG_SKIP_sRGB_CHECK_PROFILE, PNG_OPTION_ON);
#endif
    if (!c->want_text) {
        static const png_byte text_chunks[] = "tEXt\0zTXt\0iTXt";
        png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, text_chunks, 3);
    }
    png_read_info(png, info);

    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int depth = png_get_bit_depth(png, info), ct = png_get_color_type(png, info);
    if (depth == 16)
        png_set_strip_16(png);
    if (ct == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (ct == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS))
        png_set_tRNS_to_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);

    c->channels = png_get_channels(png, info);
    if (png_get_bit_depth(png, info) != 8 || c->channels < 1 || c->channels > 4 ||
        png_get_rowbytes(png, info) != (size_t)w * c->channels)
        png_error(png, "unexpected layout after expansion");

    /* w and h passed precheck's limits (and libpng's identical user limits),
     * so this is at most TSR_IMAGE_MAX_PIXELS * 4 bytes. */
    size_t stride = (size_t)w * c->channels;
    c->pixels = malloc(stride * h);
    c->rows = malloc(h * sizeof(*c->rows));
    if (!c->pixels || !c->rows)
        png_error(png, "out of memory");
    for (png_uint_32 y = 0; y < h; y++)
        c->rows[y] = c->pixels + y * stride;
    png_read_image(png, c->rows);
    png_read_end(png, info);
    return 0;
}

static int collect_texts(png_structp png, png_infop info, tsr_png_meta *meta, const char *name)
{
    png_textp text = NULL;
    int n = png_get_text(png, info, &text, NULL);
    if (n <= 0 || !text)
        return TSR_OK;
    meta->texts = calloc((size_t)n, sizeof(*meta->texts));
    if (!meta->texts)
        return tsr_errorf(TSR_ERR_NOMEM, "%s: out of memory for text chunks", name);
    for (int i = 0; i < n; i++) {
        const png_text *t = &text[i];
        if (!t->key || !t->text)
            continue;
        char *key = tsr_latin1_to_utf8(t->key, strlen(t->key));
        char *val = NULL;
        size_t vlen = strlen(t->text);
        if (t->compression == PNG_ITXT_COMPRESSION_NONE ||
            t->compression == PNG_ITXT_COMPRESSION_zTXt) {
            if (!tsr_utf8_valid(t->text, vlen, NULL)) {
                free(key);
                continue; /* PIL drops iTXt that is not UTF-8 */
            }
            val = malloc(vlen + 1);
            if (val)
                memcpy(val, t->text, vlen + 1);
        } else {
            val = tsr_latin1_to_utf8(t->text, vlen);
        }
        if (!key || !val) {
            free(key);
            free(val);
            return tsr_errorf(TSR_ERR_NOMEM, "%s: out of memory for text chunks", name);
        }
        meta->texts[meta->count].key = key;
        meta->texts[meta->count].text = val;
        meta->count++;
    }
    return TSR_OK;
}

int tsr_png_read_ex(const char *path, const void *data, size_t size, int want_channels,
                    const tsr_image_limits *limits, tsr_image *img, tsr_png_meta *meta)
{
    png_rctx c;
    memset(&c, 0, sizeof(c));
    png_structp png = NULL;
    png_infop info = NULL;
    tsr_image raw = {0};
    int rc = TSR_OK;
    if (img)
        memset(img, 0, sizeof(*img));
    if (meta)
        memset(meta, 0, sizeof(*meta));
    c.name = path ? path : "png";
    if (!img)
        return tsr_errorf(TSR_ERR_INVALID, "%s: no output image", c.name);
    if (want_channels != 0 && want_channels != 1 && want_channels != 3 && want_channels != 4)
        return tsr_errorf(TSR_ERR_INVALID, "%s: want_channels %d (0, 1, 3 or 4)", c.name,
                          want_channels);
    if (data) {
        c.mem = data;
        c.mem_size = size;
    } else {
        if (!path)
            return tsr_errorf(TSR_ERR_INVALID, "png read: no path and no data");
        c.f = fopen(path, "rb");
        if (!c.f)
            return tsr_errorf(TSR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    c.want_text = meta != NULL;
    TSR_CHECK_GOTO(rc, precheck(&c, limits), cleanup);

    png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, &c, on_error, on_warning, &c,
                                   png_alloc, png_dealloc);
    if (png)
        info = png_create_info_struct(png);
    if (!png || !info) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "%s: cannot create libpng state", c.name);
        goto cleanup;
    }
    uint32_t max_side = limits && limits->max_side && limits->max_side < TSR_IMAGE_MAX_SIDE
                            ? limits->max_side
                            : TSR_IMAGE_MAX_SIDE;
    if (decode(png, info, &c, max_side) < 0) {
        if (c.over_budget) /* the root cause, whatever libpng said after it */
            rc = tsr_errorf(TSR_ERR_FORMAT, "%s: %s (a chunk exceeds the %u MiB decoder budget)",
                            c.name, c.truncated ? "truncated" : c.msg, PNG_LIBPNG_BUDGET >> 20);
        else if (c.truncated)
            rc = tsr_errorf(TSR_ERR_FORMAT, "%s: truncated (unexpected end of data)", c.name);
        else if (strcmp(c.msg, "out of memory") == 0)
            rc = tsr_errorf(TSR_ERR_NOMEM, "%s: out of memory", c.name);
        else
            rc = tsr_errorf(TSR_ERR_FORMAT, "%s: %s", c.name, c.msg);
        goto cleanup;
    }

    raw.width = png_get_image_width(png, info);
    raw.height = png_get_image_height(png, info);
    uint32_t natural = c.channels == 2 ? 4 : c.channels;
    uint32_t target = want_channels ? (uint32_t)want_channels : natural;
    if (c.channels == target) {
        raw.channels = target;
        raw.data = c.pixels;
        c.pixels = NULL;
        *img = raw;
        raw.data = NULL;
    } else {
        TSR_CHECK_GOTO(rc, tsr_image_alloc(img, raw.width, raw.height, target), cleanup);
        size_t w = raw.width;
        for (uint32_t y = 0; y < raw.height; y++)
            tsr_image_convert_row(c.pixels + y * w * c.channels, c.channels,
                                  img->data + y * w * target, target, w);
    }
    if (meta) {
        rc = collect_texts(png, info, meta, c.name);
        if (rc < 0) {
            tsr_image_free(img);
            tsr_png_meta_free(meta);
        }
    }

cleanup:
    if (png)
        png_destroy_read_struct(&png, info ? &info : NULL, NULL);
    if (c.f)
        fclose(c.f);
    free(c.pixels);
    free(c.rows);
    return rc;
}

int tsr_png_read(const char *path, int want_channels, tsr_image *img, tsr_png_meta *meta)
{
    return tsr_png_read_ex(path, NULL, 0, want_channels, NULL, img, meta);
}

int tsr_png_read_memory(const void *data, size_t size, const char *name, int want_channels,
                        tsr_image *img, tsr_png_meta *meta)
{
    if (!data) {
        if (img)
            memset(img, 0, sizeof(*img));
        if (meta)
            memset(meta, 0, sizeof(*meta));
        return tsr_errorf(TSR_ERR_INVALID, "%s: no data", name ? name : "png");
    }
    return tsr_png_read_ex(name ? name : "png", data, size, want_channels, NULL, img, meta);
}

void tsr_png_meta_free(tsr_png_meta *meta)
{
    if (!meta)
        return;
    for (size_t i = 0; i < meta->count; i++) {
        free((char *)meta->texts[i].key);
        free((char *)meta->texts[i].text);
    }
    free(meta->texts);
    memset(meta, 0, sizeof(*meta));
}

const char *tsr_png_meta_find(const tsr_png_meta *meta, const char *key)
{
    if (!meta || !key)
        return NULL;
    for (size_t i = meta->count; i-- > 0;)
        if (strcmp(meta->texts[i].key, key) == 0)
            return meta->texts[i].text;
    return NULL;
}
