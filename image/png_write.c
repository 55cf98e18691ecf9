/*
 * image/png_write.c - 8-bit PNG encoding with text chunks, through libpng.
 *
 * Why it is built this way:
 * - libpng reports errors by longjmp.  Everything that must survive a jump
 *   (the output buffer, the row pointers, the converted texts, the message)
 *   lives in a context struct owned by the caller of the one function that
 *   calls setjmp; that function changes no local variable after setjmp, so
 *   no `volatile` dance is needed, and the caller frees everything on a
 *   single exit path whether libpng jumped or not.
 * - The encoder always writes to memory; tsr_png_write then puts the bytes
 *   on disk atomically.  One code path, and a failed encode never touches
 *   the filesystem.
 * - Text chunks follow PIL's PngInfo.add_text, which A1111 uses for its
 *   "parameters": text that encodes to Latin-1 goes in tEXt, anything else
 *   in an uncompressed iTXt with empty language and translated keyword; all
 *   of them before IDAT.  A1111 metadata readers therefore see exactly what
 *   they see in A1111's own files.
 */
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/file.h"
#include "image/image.h"
#include "image/image_internal.h"

#define PNG_KEY_MAX 79

typedef struct png_wctx {
    char msg[256];     /* libpng's error message */
    uint8_t *buf;      /* owned: encoded bytes */
    size_t len, cap;
    png_bytep *rows;   /* owned: row pointers into the (borrowed) image */
    png_text *texts;   /* owned array; strings below */
    char **strings;    /* owned: converted texts (one per text) */
    size_t ntexts;
} png_wctx;

static void on_error(png_structp png, png_const_charp msg)
{
    png_wctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof(c->msg), "%s", msg ? msg : "libpng error");
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

/* PNG keyword rules (ISO 15948 11.3.4.2) narrowed to printable ASCII. */
static int check_key(const char *key)
{
    if (!key)
        return tsr_errorf(TSR_ERR_INVALID, "png: text chunk without a key");
    size_t n = strlen(key);
    if (n == 0 || n > PNG_KEY_MAX)
        return tsr_errorf(TSR_ERR_INVALID, "png: text key \"%.79s\" must be 1-%d characters", key,
                          PNG_KEY_MAX);
    if (key[0] == ' ' || key[n - 1] == ' ')
        return tsr_errorf(TSR_ERR_INVALID, "png: text key \"%s\" has leading/trailing spaces",
                          key);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)key[i];
        if (ch < 0x20 || ch > 0x7E)
            return tsr_errorf(TSR_ERR_INVALID,
                              "png: text key \"%s\" must be printable ASCII", key);
        if (ch == ' ' && key[i + 1] == ' ')
            return tsr_errorf(TSR_ERR_INVALID, "png: text key \"%s\" has consecutive spaces",
                              key);
    }
    return TSR_OK;
}

/* Validate and convert the texts into c->texts before any libpng call. */
static int prepare_texts(png_wctx *c, const tsr_png_text *texts, size_t n)
{
    if (n == 0)
        return TSR_OK;
    if (!texts)
        return tsr_errorf(TSR_ERR_INVALID, "png: %zu texts but no array", n);
    if (n > 4096)
        return tsr_errorf(TSR_ERR_INVALID, "png: %zu text chunks (at most 4096)", n);
    c->texts = calloc(n, sizeof(*c->texts));
    c->strings = calloc(n, sizeof(*c->strings));
    if (!c->texts || !c->strings)
        return tsr_errorf(TSR_ERR_NOMEM, "png: out of memory for %zu texts", n);
    c->ntexts = n;
    for (size_t i = 0; i < n; i++) {
        TSR_TRY(check_key(texts[i].key));
        const char *v = texts[i].text ? texts[i].text : "";
        size_t len = strlen(v);
        uint32_t max_cp = 0;
        if (!tsr_utf8_valid(v, len, &max_cp))
            return tsr_errorf(TSR_ERR_INVALID, "png: text \"%s\" is not valid UTF-8",
                              texts[i].key);
        png_text *t = &c->texts[i];
        t->key = (png_charp)texts[i].key;
        if (max_cp <= 0xFF) {
            /* PIL: value.encode("latin-1") succeeded -> tEXt */
            c->strings[i] = tsr_utf8_to_latin1(v, len);
            if (!c->strings[i])
                return tsr_errorf(TSR_ERR_NOMEM, "png: out of memory");
            t->compression = PNG_TEXT_COMPRESSION_NONE;
            t->text = c->strings[i];
            t->text_length = strlen(c->strings[i]);
        } else {
            /* PIL: add_itxt(key, value) -> iTXt, uncompressed, lang "" */
            t->compression = PNG_ITXT_COMPRESSION_NONE;
            t->text = (png_charp)v;
            t->itxt_length = len;
            t->lang = (png_charp) "";
            t->lang_key = (png_charp) "";
        }
    }
    return TSR_OK;
}

/* The only function with a setjmp.  It writes to *c only through the
 * pointer and touches no local after setjmp, so nothing is indeterminate
 * after a longjmp. */
static int encode(png_structp png, png_infop info, png_wctx *c, const tsr_image *img)
{
    if (setjmp(png_jmpbuf(png)))
        return -1;
    static const int color_types[5] = {0, PNG_COLOR_TYPE_GRAY, 0, PNG_COLOR_TYPE_RGB,
                                       PNG_COLOR_TYPE_RGB_ALPHA};
    png_set_write_fn(png, c, on_write, on_flush);
    png_set_IHDR(png, info, img->width, img->height, 8, color_types[img->channels],
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (c->ntexts)
        png_set_text(png, info, c->texts, (int)c->ntexts);
    png_write_info(png, info);
    png_write_image(png, c->rows);
    png_write_end(png, NULL);
    return 0;
}

int tsr_png_write_memory(const tsr_image *img, const tsr_png_text *texts, size_t n,
                         uint8_t **out, size_t *out_len)
{
    png_wctx c;
    memset(&c, 0, sizeof(c));
    png_structp png = NULL;
    png_infop info = NULL;
    int rc = TSR_OK;
    if (out)
        *out = NULL;
    if (out_len)
        *out_len = 0;
    if (!img || !img->data || !out || !out_len)
        return tsr_errorf(TSR_ERR_INVALID, "png write: missing image or output");
    TSR_TRY(tsr_image_check_size(img->width, img->height, img->channels, NULL, "png write"));
    TSR_CHECK_GOTO(rc, prepare_texts(&c, texts, n), cleanup);

    c.rows = malloc(img->height * sizeof(*c.rows));
    if (!c.rows) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "png write: out of memory");
        goto cleanup;
    }
    size_t stride = (size_t)img->width * img->channels;
    for (uint32_t y = 0; y < img->height; y++)
        c.rows[y] = img->data + y * stride;

    png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &c, on_error, on_warning);
    if (png)
        info = png_create_info_struct(png);
    if (!png || !info) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "png write: cannot create libpng state");
        goto cleanup;
    }
    if (encode(png, info, &c, img) < 0) {
        rc = tsr_errorf(strstr(c.msg, "out of memory") ? TSR_ERR_NOMEM : TSR_ERR_INTERNAL,
                        "png write: %s", c.msg);
        goto cleanup;
    }
    *out = c.buf;
    *out_len = c.len;
    c.buf = NULL;

cleanup:
    if (png)
        png_destroy_write_struct(&png, info ? &info : NULL);
    free(c.buf);
    free(c.rows);
    for (size_t i = 0; i < c.ntexts; i++)
        free(c.strings ? c.strings[i] : NULL);
    free(c.strings);
    free(c.texts);
    return rc;
}

int tsr_png_write(const char *path, const tsr_image *img, const tsr_png_text *texts, size_t n)
{
    if (!path)
        return tsr_errorf(TSR_ERR_INVALID, "png write: no path");
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = tsr_png_write_memory(img, texts, n, &buf, &len);
    if (rc < 0)
        return tsr_error_prefix(rc, "%s", path);
    rc = tsr_write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}
