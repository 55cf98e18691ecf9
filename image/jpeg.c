/*
 * image/jpeg.c - JPEG encode (preview tiles) and decode (init images, tests)
 * through libjpeg-turbo.
 *
 * Why it is built this way:
 * - libjpeg's default error handler calls exit(); a server must fail one
 *   request instead.  Our error manager formats the message and longjmps
 *   back to the one function per direction that holds the setjmp.  As in
 *   the PNG code, everything that must survive the jump lives in a context
 *   struct owned by the caller and reached through an unchanging pointer,
 *   so no local is indeterminate after the jump and cleanup is one path.
 * - The encoder uses its own growable memory destination instead of
 *   jpeg_mem_dest: libjpeg-turbo's keeps a grown buffer private until
 *   jpeg_finish_compress, so an error half way would leak it.
 * - The decoder is strict: libjpeg's "warnings" (corrupt data, premature
 *   end of file) become errors, the header's size is checked against the
 *   limits before decompression starts, libjpeg's working memory is capped,
 *   and a progress monitor refuses files with absurd numbers of scans (a
 *   known CPU-exhaustion trick with progressive JPEGs).
 */
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "core/error.h"
#include "image/image.h"
#include "image/image_internal.h"

#define JPEG_MAX_SCANS 256
#define JPEG_MAX_MEMORY ((long)1 << 30)

typedef struct jpg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX];
    bool strict;    /* warnings are errors (decoder) */
    bool truncated; /* the data ended early */
} jpg_err;

static void err_exit(j_common_ptr cinfo)
{
    jpg_err *e = (jpg_err *)cinfo->err;
    if (cinfo->err->msg_code == JWRN_JPEG_EOF)
        e->truncated = true;
    cinfo->err->format_message(cinfo, e->msg);
    longjmp(e->jmp, 1);
}

static void err_emit(j_common_ptr cinfo, int level)
{
    jpg_err *e = (jpg_err *)cinfo->err;
    if (level < 0) {
        cinfo->err->num_warnings++;
        if (e->strict)
            err_exit(cinfo);
    }
}

static void err_output(j_common_ptr cinfo)
{
    (void)cinfo; /* never print to stderr */
}

static void err_setup(jpg_err *e, bool strict)
{
    jpeg_std_error(&e->pub);
    e->pub.error_exit = err_exit;
    e->pub.emit_message = err_emit;
    e->pub.output_message = err_output;
    e->strict = strict;
}

/* ---- encode ---- */

typedef struct jpg_dest {
    struct jpeg_destination_mgr pub;
    uint8_t *buf; /* owned until handed to the caller */
    size_t cap, len;
} jpg_dest;

typedef struct jpg_cctx {
    struct jpeg_compress_struct cinfo;
    jpg_err err;
    jpg_dest dest;
} jpg_cctx;

static void dest_init(j_compress_ptr cinfo)
{
    jpg_dest *d = (jpg_dest *)cinfo->dest;
    d->cap = 65536;
    d->buf = malloc(d->cap);
    if (!d->buf)
        ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
    d->pub.next_output_byte = d->buf;
    d->pub.free_in_buffer = d->cap;
}

static boolean dest_empty(j_compress_ptr cinfo)
{
    jpg_dest *d = (jpg_dest *)cinfo->dest;
    size_t old = d->cap; /* the whole buffer is full when this is called */
    if (old > SIZE_MAX / 2)
        ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 1);
    uint8_t *nb = realloc(d->buf, old * 2);
    if (!nb)
        ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 1);
    d->buf = nb;
    d->cap = old * 2;
    d->pub.next_output_byte = d->buf + old;
    d->pub.free_in_buffer = d->cap - old;
    return TRUE;
}

static void dest_term(j_compress_ptr cinfo)
{
    jpg_dest *d = (jpg_dest *)cinfo->dest;
    d->len = d->cap - d->pub.free_in_buffer;
}

static int compress(jpg_cctx *c, const tsr_image *img, int quality)
{
    if (setjmp(c->err.jmp))
        return -1;
    jpeg_create_compress(&c->cinfo);
    c->dest.pub.init_destination = dest_init;
    c->dest.pub.empty_output_buffer = dest_empty;
    c->dest.pub.term_destination = dest_term;
    c->cinfo.dest = &c->dest.pub;
    c->cinfo.image_width = img->width;
    c->cinfo.image_height = img->height;
    if (img->channels == 1) {
        c->cinfo.input_components = 1;
        c->cinfo.in_color_space = JCS_GRAYSCALE;
    } else if (img->channels == 3) {
        c->cinfo.input_components = 3;
        c->cinfo.in_color_space = JCS_RGB;
    } else {
        c->cinfo.input_components = 4; /* libjpeg-turbo: RGBX ignores the 4th byte */
        c->cinfo.in_color_space = JCS_EXT_RGBX;
    }
    jpeg_set_defaults(&c->cinfo);
    jpeg_set_quality(&c->cinfo, quality, TRUE);
    jpeg_start_compress(&c->cinfo, TRUE);
    size_t stride = (size_t)img->width * img->channels;
    while (c->cinfo.next_scanline < c->cinfo.image_height) {
        JSAMPROW row = img->data + (size_t)c->cinfo.next_scanline * stride;
        jpeg_write_scanlines(&c->cinfo, &row, 1);
    }
    jpeg_finish_compress(&c->cinfo);
    return 0;
}

int tsr_jpeg_encode(const tsr_image *img, int quality, uint8_t **out, size_t *out_len)
{
    if (out)
        *out = NULL;
    if (out_len)
        *out_len = 0;
    if (!img || !img->data || !out || !out_len)
        return tsr_errorf(TSR_ERR_INVALID, "jpeg encode: missing image or output");
    if (quality < 1 || quality > 100)
        return tsr_errorf(TSR_ERR_INVALID, "jpeg encode: quality %d (1..100)", quality);
    TSR_TRY(tsr_image_check_size(img->width, img->height, img->channels, NULL, "jpeg encode"));
    if (img->width > JPEG_MAX_DIMENSION || img->height > JPEG_MAX_DIMENSION)
        return tsr_errorf(TSR_ERR_RANGE, "jpeg encode: %ux%u too large for JPEG", img->width,
                          img->height);

    jpg_cctx *c = calloc(1, sizeof(*c));
    if (!c)
        return tsr_errorf(TSR_ERR_NOMEM, "jpeg encode: out of memory");
    err_setup(&c->err, false);
    c->cinfo.err = &c->err.pub;
    int rc = TSR_OK;
    if (compress(c, img, quality) < 0) {
        rc = tsr_errorf(c->err.pub.msg_code == JERR_OUT_OF_MEMORY ? TSR_ERR_NOMEM
                                                                   : TSR_ERR_INTERNAL,
                        "jpeg encode: %s", c->err.msg);
    } else {
        *out = c->dest.buf;
        *out_len = c->dest.len;
        c->dest.buf = NULL;
    }
    jpeg_destroy_compress(&c->cinfo);
    free(c->dest.buf);
    free(c);
    return rc;
}

/* ---- decode ---- */

typedef struct jpg_dctx {
    struct jpeg_decompress_struct cinfo;
    jpg_err err;
    struct jpeg_progress_mgr progress;
    const char *name;               /* borrowed */
    const tsr_image_limits *limits; /* borrowed */
    int status;                     /* a tsr_status raised without a jump */
    uint8_t *pixels;                /* owned: height * width * channels */
    uint32_t width, height, channels;
} jpg_dctx;

static void on_progress(j_common_ptr cinfo)
{
    if (cinfo->is_decompressor) {
        j_decompress_ptr d = (j_decompress_ptr)cinfo;
        if (d->input_scan_number > JPEG_MAX_SCANS) {
            jpg_err *e = (jpg_err *)cinfo->err;
            snprintf(e->msg, sizeof(e->msg), "more than %d scans", JPEG_MAX_SCANS);
            longjmp(e->jmp, 1);
        }
    }
}

static int decompress(jpg_dctx *c, const void *data, size_t size)
{
    if (setjmp(c->err.jmp))
        return -1;
    jpeg_create_decompress(&c->cinfo);
    c->cinfo.mem->max_memory_to_use = JPEG_MAX_MEMORY;
    c->progress.progress_monitor = on_progress;
    c->cinfo.progress = &c->progress;
    jpeg_mem_src(&c->cinfo, (const unsigned char *)data, (unsigned long)size);
    jpeg_read_header(&c->cinfo, TRUE);

    c->status = tsr_image_check_size(c->cinfo.image_width, c->cinfo.image_height, 3, c->limits,
                                     c->name);
    if (c->status < 0)
        return -1;
    if (c->cinfo.jpeg_color_space == JCS_CMYK || c->cinfo.jpeg_color_space == JCS_YCCK) {
        c->status = tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: CMYK JPEG is not supported", c->name);
        return -1;
    }
    c->cinfo.out_color_space = c->cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&c->cinfo);
    if (c->cinfo.output_components != 1 && c->cinfo.output_components != 3)
        ERREXIT(&c->cinfo, JERR_BAD_J_COLORSPACE);
    c->width = c->cinfo.output_width;
    c->height = c->cinfo.output_height;
    c->channels = (uint32_t)c->cinfo.output_components;
    size_t stride = (size_t)c->width * c->channels;
    c->pixels = malloc(stride * c->height);
    if (!c->pixels)
        ERREXIT1(&c->cinfo, JERR_OUT_OF_MEMORY, 2);
    while (c->cinfo.output_scanline < c->cinfo.output_height) {
        JSAMPROW row = c->pixels + (size_t)c->cinfo.output_scanline * stride;
        jpeg_read_scanlines(&c->cinfo, &row, 1);
    }
    jpeg_finish_decompress(&c->cinfo);
    return 0;
}

int tsr_jpeg_decode(const void *data, size_t size, const char *name, int want_channels,
                    const tsr_image_limits *limits, tsr_image *img)
{
    if (!name)
        name = "jpeg";
    if (img)
        memset(img, 0, sizeof(*img));
    if (!img || (!data && size))
        return tsr_errorf(TSR_ERR_INVALID, "%s: no data or no output image", name);
    if (want_channels != 0 && want_channels != 1 && want_channels != 3 && want_channels != 4)
        return tsr_errorf(TSR_ERR_INVALID, "%s: want_channels %d (0, 1, 3 or 4)", name,
                          want_channels);
    if (size < 2 || ((const uint8_t *)data)[0] != 0xFF || ((const uint8_t *)data)[1] != 0xD8)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: not a JPEG file", name);
#if SIZE_MAX > ULONG_MAX
    if (size > ULONG_MAX)
        return tsr_errorf(TSR_ERR_RANGE, "%s: too large", name);
#endif

    jpg_dctx *c = calloc(1, sizeof(*c));
    if (!c)
        return tsr_errorf(TSR_ERR_NOMEM, "%s: out of memory", name);
    err_setup(&c->err, true);
    c->cinfo.err = &c->err.pub;
    c->name = name;
    c->limits = limits;
    int rc = TSR_OK;
    if (decompress(c, data, size) < 0) {
        if (c->status < 0)
            rc = c->status;
        else if (c->err.truncated)
            rc = tsr_errorf(TSR_ERR_FORMAT, "%s: truncated (unexpected end of data)", name);
        else if (c->err.pub.msg_code == JERR_OUT_OF_MEMORY)
            rc = tsr_errorf(TSR_ERR_NOMEM, "%s: %s", name, c->err.msg);
        else
            rc = tsr_errorf(TSR_ERR_FORMAT, "%s: %s", name, c->err.msg);
        goto cleanup;
    }
    uint32_t target = want_channels ? (uint32_t)want_channels : c->channels;
    if (target == c->channels) {
        img->width = c->width;
        img->height = c->height;
        img->channels = c->channels;
        img->data = c->pixels;
        c->pixels = NULL;
    } else {
        TSR_CHECK_GOTO(rc, tsr_image_alloc(img, c->width, c->height, target), cleanup);
        size_t w = c->width;
        for (uint32_t y = 0; y < c->height; y++)
            tsr_image_convert_row(c->pixels + y * w * c->channels, c->channels,
                                  img->data + y * w * target, target, w);
    }
cleanup:
    jpeg_destroy_decompress(&c->cinfo);
    free(c->pixels);
    free(c);
    return rc;
}
