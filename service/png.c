/*
 * service/png.c - see svc_png.h.
 *
 * libpng and libjpeg report errors by longjmp.  Each codec has one function
 * that calls setjmp; it keeps everything that must survive the jump in a
 * context struct owned by its caller and changes no local after setjmp, and
 * the caller frees on one exit path (the same shape as image/png_write.c).
 */
#include "svc_png.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "util.h"

/* ---------------------------------------------------------------- decode */

static int check_dims(long long w, long long h, const char *what, char *err, size_t err_size)
{
    if (w < 1 || h < 1 || w > SVC_IMAGE_MAX_SIDE || h > SVC_IMAGE_MAX_SIDE) {
        snprintf(err, err_size, "%s image is %lldx%lld; each side must be 1..%d", what, w, h,
                 SVC_IMAGE_MAX_SIDE);
        return -1;
    }
    return 0;
}

static int decode_png(const uint8_t *data, size_t len, int channels, uint8_t **pixels, int *w,
                      int *h, char *err, size_t err_size)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, data, len)) {
        snprintf(err, err_size, "PNG: %s", img.message[0] ? img.message : "cannot read header");
        png_image_free(&img);
        return -1;
    }
    if (check_dims(img.width, img.height, "PNG", err, err_size) < 0) {
        png_image_free(&img);
        return -1;
    }
    img.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    size_t size = PNG_IMAGE_SIZE(img);
    uint8_t *buf = malloc(size);
    if (!buf) {
        snprintf(err, err_size, "PNG: out of memory for %ux%u", img.width, img.height);
        png_image_free(&img);
        return -1;
    }
    /* a transparent image is composed onto white, as browsers show it */
    png_color background = {255, 255, 255};
    if (!png_image_finish_read(&img, &background, buf, 0, NULL)) {
        snprintf(err, err_size, "PNG: %s", img.message[0] ? img.message : "cannot decode");
        free(buf);
        png_image_free(&img);
        return -1;
    }
    *pixels = buf;
    *w = (int)img.width;
    *h = (int)img.height;
    return 0;
}

typedef struct jpeg_ctx {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
    uint8_t *buf;       /* owned: the decoded pixels */
    int width, height;
    int failed_dims;    /* the header's size was refused */
} jpeg_ctx;

static void jpeg_on_error(j_common_ptr cinfo)
{
    jpeg_ctx *c = (jpeg_ctx *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, c->msg);
    longjmp(c->jump, 1);
}

static void jpeg_on_message(j_common_ptr cinfo, int level)
{
    (void)cinfo;
    (void)level; /* warnings (corrupt data recovered) are not errors */
}

/* The only function with a setjmp for JPEG. */
static int jpeg_run(struct jpeg_decompress_struct *cinfo, jpeg_ctx *c, const uint8_t *data,
                    size_t len, int channels)
{
    if (setjmp(c->jump))
        return -1;
    jpeg_create_decompress(cinfo);
    jpeg_mem_src(cinfo, data, (unsigned long)len);
    jpeg_read_header(cinfo, TRUE);
    if (cinfo->image_width < 1 || cinfo->image_height < 1 ||
        cinfo->image_width > SVC_IMAGE_MAX_SIDE || cinfo->image_height > SVC_IMAGE_MAX_SIDE) {
        c->failed_dims = 1;
        c->width = (int)cinfo->image_width;
        c->height = (int)cinfo->image_height;
        return -1;
    }
    cinfo->out_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_start_decompress(cinfo);
    if ((int)cinfo->output_components != channels) {
        snprintf(c->msg, sizeof c->msg, "unsupported colour conversion");
        return -1;
    }
    c->width = (int)cinfo->output_width;
    c->height = (int)cinfo->output_height;
    size_t stride = (size_t)c->width * (size_t)channels;
    c->buf = malloc(stride * (size_t)c->height);
    if (!c->buf) {
        snprintf(c->msg, sizeof c->msg, "out of memory");
        return -1;
    }
    while (cinfo->output_scanline < cinfo->output_height) {
        JSAMPROW row = c->buf + stride * cinfo->output_scanline;
        jpeg_read_scanlines(cinfo, &row, 1);
    }
    jpeg_finish_decompress(cinfo);
    return 0;
}

static int decode_jpeg(const uint8_t *data, size_t len, int channels, uint8_t **pixels, int *w,
                       int *h, char *err, size_t err_size)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_ctx c;
    memset(&cinfo, 0, sizeof cinfo);
    memset(&c, 0, sizeof c);
    cinfo.err = jpeg_std_error(&c.pub);
    c.pub.error_exit = jpeg_on_error;
    c.pub.emit_message = jpeg_on_message;
    int rc = jpeg_run(&cinfo, &c, data, len, channels);
    jpeg_destroy_decompress(&cinfo);
    if (rc < 0) {
        free(c.buf);
        if (c.failed_dims)
            return check_dims(c.width, c.height, "JPEG", err, err_size);
        snprintf(err, err_size, "JPEG: %s", c.msg[0] ? c.msg : "cannot decode");
        return -1;
    }
    *pixels = c.buf;
    *w = c.width;
    *h = c.height;
    return 0;
}

int svc_image_decode(const uint8_t *data, size_t len, int channels, uint8_t **pixels, int *width,
                     int *height, char *err, size_t err_size)
{
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    *pixels = NULL;
    *width = *height = 0;
    if (len >= 8 && memcmp(data, png_sig, 8) == 0)
        return decode_png(data, len, channels, pixels, width, height, err, err_size);
    if (len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
        return decode_jpeg(data, len, channels, pixels, width, height, err, err_size);
    snprintf(err, err_size, "not a PNG or JPEG image");
    return -1;
}

/* ---------------------------------------------------------------- encode */

typedef struct png_wctx {
    char msg[256];
    uint8_t *buf; /* owned: encoded bytes */
    size_t len, cap;
    png_bytep *rows; /* owned: row pointers into the borrowed image */
    png_text text;
    char *latin1;    /* owned: the text converted to Latin-1 (tEXt) */
    int ntexts;
} png_wctx;

static void on_error(png_structp png, png_const_charp msg)
{
    png_wctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg ? msg : "libpng error");
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void on_write(png_structp png, png_bytep data, size_t n)
{
    png_wctx *c = png_get_io_ptr(png);
    if (n > c->cap - c->len) {
        size_t cap = c->cap ? c->cap : 65536;
        while (n > cap - c->len) {
            if (cap > SIZE_MAX / 2)
                png_error(png, "output too large");
            cap *= 2;
        }
        uint8_t *nb = realloc(c->buf, cap);
        if (!nb)
            png_error(png, "out of memory");
        c->buf = nb;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, data, n);
    c->len += n;
}

static void on_flush(png_structp png)
{
    (void)png;
}

/* UTF-8 whose code points are all <= U+00FF, as Latin-1 (malloc'd). */
static char *to_latin1(const char *s, size_t len)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            out[o++] = (char)c;
            i++;
        } else {
            out[o++] = (char)(((c & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F));
            i += 2;
        }
    }
    out[o] = '\0';
    return out;
}

/* The only function with a setjmp for PNG writing. */
static int png_run(png_structp png, png_infop info, png_wctx *c, int width, int height)
{
    if (setjmp(png_jmpbuf(png)))
        return -1;
    png_set_write_fn(png, c, on_write, on_flush);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (c->ntexts)
        png_set_text(png, info, &c->text, c->ntexts);
    png_write_info(png, info);
    png_write_image(png, c->rows);
    png_write_end(png, NULL);
    return 0;
}

int svc_png_encode(const uint8_t *rgb, int width, int height, const char *parameters,
                   uint8_t **out, size_t *out_len, char *err, size_t err_size)
{
    png_wctx c;
    memset(&c, 0, sizeof c);
    png_structp png = NULL;
    png_infop info = NULL;
    int rc = -1;
    *out = NULL;
    *out_len = 0;
    if (!rgb || width < 1 || height < 1 || width > 65535 || height > 65535) {
        snprintf(err, err_size, "png: bad image %dx%d", width, height);
        return -1;
    }
    if (parameters) {
        size_t len = strlen(parameters);
        uint32_t max_cp = 0;
        if (!svc_utf8_valid(parameters, len, &max_cp)) {
            snprintf(err, err_size, "png: the parameters text is not valid UTF-8");
            return -1;
        }
        c.text.key = (png_charp) "parameters";
        if (max_cp <= 0xFF) {
            c.latin1 = to_latin1(parameters, len);
            if (!c.latin1) {
                snprintf(err, err_size, "png: out of memory");
                return -1;
            }
            c.text.compression = PNG_TEXT_COMPRESSION_NONE;
            c.text.text = c.latin1;
            c.text.text_length = strlen(c.latin1);
        } else {
            c.text.compression = PNG_ITXT_COMPRESSION_NONE;
            c.text.text = (png_charp)parameters;
            c.text.itxt_length = len;
            c.text.lang = (png_charp) "";
            c.text.lang_key = (png_charp) "";
        }
        c.ntexts = 1;
    }
    c.rows = malloc((size_t)height * sizeof *c.rows);
    if (!c.rows) {
        snprintf(err, err_size, "png: out of memory");
        goto done;
    }
    for (int y = 0; y < height; y++)
        c.rows[y] = (png_bytep)(rgb + (size_t)y * (size_t)width * 3);
    png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &c, on_error, on_warning);
    if (png)
        info = png_create_info_struct(png);
    if (!png || !info) {
        snprintf(err, err_size, "png: cannot create libpng state");
        goto done;
    }
    if (png_run(png, info, &c, width, height) < 0) {
        snprintf(err, err_size, "png: %s", c.msg);
        goto done;
    }
    *out = c.buf;
    *out_len = c.len;
    c.buf = NULL;
    rc = 0;
done:
    if (png)
        png_destroy_write_struct(&png, info ? &info : NULL);
    free(c.buf);
    free(c.rows);
    free(c.latin1);
    return rc;
}
