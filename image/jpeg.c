/*
 * image/jpeg.c - JPEG encode (preview tiles, --output x.jpg) and decode
 * (init images and masks) through libjpeg-turbo, and A1111's parameters
 * in EXIF (written by tsr_jpeg_write, read by tsr_jpeg_parameters).
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
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "core/error.h"
#include "core/file.h"
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
    const uint8_t *app1; /* borrowed: an EXIF segment to write, or NULL */
    size_t app1_len;
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
    if (c->app1)
        jpeg_write_marker(&c->cinfo, JPEG_APP0 + 1, c->app1, (unsigned)c->app1_len);
    size_t stride = (size_t)img->width * img->channels;
    while (c->cinfo.next_scanline < c->cinfo.image_height) {
        JSAMPROW row = img->data + (size_t)c->cinfo.next_scanline * stride;
        jpeg_write_scanlines(&c->cinfo, &row, 1);
    }
    jpeg_finish_compress(&c->cinfo);
    return 0;
}

static int encode_with(const tsr_image *img, int quality, const uint8_t *app1, size_t app1_len,
                       uint8_t **out, size_t *out_len)
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
    c->app1 = app1;
    c->app1_len = app1_len;
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

int tsr_jpeg_encode(const tsr_image *img, int quality, uint8_t **out, size_t *out_len)
{
    return encode_with(img, quality, NULL, 0, out, out_len);
}

/* ---- A1111 parameters in EXIF ---- */

/* The largest APP1 payload a marker segment holds (length field 65535,
 * minus its own 2 bytes). */
#define APP1_MAX 65533u
#define EXIF_TAG_EXIF_IFD 0x8769u
#define EXIF_TAG_USER_COMMENT 0x9286u

static void put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, v >> 16);
    put16(p + 2, v & 0xFFFF);
}

/* "Exif\0\0" + big-endian TIFF: IFD0 with the Exif IFD pointer, the Exif
 * IFD with one UserComment ("UNICODE\0" + UTF-16BE), as piexif.dump with
 * piexif.helper.UserComment.dump(text, encoding="unicode") lays it out. */
static int exif_user_comment(const char *text, uint8_t **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    const size_t len = strlen(text);
    if (!tsr_utf8_valid(text, len, NULL))
        return tsr_errorf(TSR_ERR_INVALID, "jpeg: the parameters are not valid UTF-8");
    /* UTF-16 never needs more than 2 bytes per UTF-8 byte */
    const size_t head = 6 + 44, max = head + 8 + 2 * len;
    uint8_t *b = calloc(1, max);
    if (!b)
        return tsr_errorf(TSR_ERR_NOMEM, "jpeg: out of memory");
    memcpy(b, "Exif\0\0", 6);
    uint8_t *t = b + 6; /* TIFF offsets count from here */
    memcpy(t, "MM", 2);
    put16(t + 2, 42);
    put32(t + 4, 8);
    put16(t + 8, 1); /* IFD0: one entry */
    put16(t + 10, EXIF_TAG_EXIF_IFD);
    put16(t + 12, 4); /* LONG */
    put32(t + 14, 1);
    put32(t + 18, 26);
    put32(t + 22, 0); /* no next IFD */
    put16(t + 26, 1); /* Exif IFD: one entry */
    put16(t + 28, EXIF_TAG_USER_COMMENT);
    put16(t + 30, 7); /* UNDEFINED */
    put32(t + 36, 44);
    put32(t + 40, 0);
    uint8_t *u = t + 44;
    memcpy(u, "UNICODE\0", 8);
    size_t n = 8;
    const uint8_t *s = (const uint8_t *)text;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        if (s[i] < 0x80) {
            cp = s[i++];
        } else if (s[i] < 0xE0) {
            cp = ((uint32_t)(s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
            i += 2;
        } else if (s[i] < 0xF0) {
            cp = ((uint32_t)(s[i] & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) |
                 (s[i + 2] & 0x3F);
            i += 3;
        } else {
            cp = ((uint32_t)(s[i] & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                 ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
            i += 4;
        }
        if (cp >= 0x10000) {
            cp -= 0x10000;
            put16(u + n, 0xD800 | (cp >> 10));
            put16(u + n + 2, 0xDC00 | (cp & 0x3FF));
            n += 4;
        } else {
            put16(u + n, cp);
            n += 2;
        }
    }
    put32(t + 32, (uint32_t)n);
    if (head + n > APP1_MAX) {
        free(b);
        return tsr_errorf(TSR_ERR_RANGE,
                          "the parameters take %zu bytes of EXIF, more than a JPEG segment holds "
                          "(%u); write a .png instead",
                          head + n, APP1_MAX);
    }
    *out = b;
    *out_len = head + n;
    return TSR_OK;
}

int tsr_jpeg_write(const char *path, const tsr_image *img, int quality, const char *parameters)
{
    if (!path)
        return tsr_errorf(TSR_ERR_INVALID, "jpeg write: no path");
    uint8_t *exif = NULL, *buf = NULL;
    size_t exif_len = 0, len = 0;
    int rc = TSR_OK;
    if (parameters)
        TSR_CHECK_GOTO(rc, exif_user_comment(parameters, &exif, &exif_len), done);
    TSR_CHECK_GOTO(rc, encode_with(img, quality, exif, exif_len, &buf, &len), done);
    rc = tsr_write_file_atomic(path, buf, len);
done:
    if (rc < 0 && !strstr(tsr_last_error(), path))
        rc = tsr_error_prefix(rc, "%s", path);
    free(exif);
    free(buf);
    return rc;
}

static uint32_t get16(const uint8_t *p, bool be)
{
    return be ? (uint32_t)p[0] << 8 | p[1] : (uint32_t)p[1] << 8 | p[0];
}

static uint32_t get32(const uint8_t *p, bool be)
{
    return be ? get16(p, true) << 16 | get16(p + 2, true)
              : get16(p + 2, false) << 16 | get16(p, false);
}

/* Entry `tag` of the IFD at `off` in the TIFF block t[0..n): its value's
 * offset and count (type UNDEFINED/ASCII/BYTE, or LONG for pointers). */
static bool ifd_find(const uint8_t *t, size_t n, bool be, uint32_t off, uint32_t tag,
                     uint32_t *value_off, uint32_t *count)
{
    if (off > n || n - off < 2)
        return false;
    uint32_t entries = get16(t + off, be);
    for (uint32_t i = 0; i < entries; i++) {
        size_t e = (size_t)off + 2 + (size_t)i * 12;
        if (e + 12 > n)
            return false;
        if (get16(t + e, be) != tag)
            continue;
        uint32_t type = get16(t + e + 2, be), cnt = get32(t + e + 4, be);
        if (type == 4 && cnt == 1) {
            *value_off = get32(t + e + 8, be); /* a pointer */
            *count = 0;
            return true;
        }
        if (type != 1 && type != 2 && type != 7)
            return false;
        *count = cnt;
        *value_off = cnt <= 4 ? (uint32_t)(e + 8) : get32(t + e + 8, be);
        return *value_off <= n && cnt <= n - *value_off;
    }
    return false;
}

/* UserComment bytes -> UTF-8 (UNICODE: UTF-16 in the TIFF's byte order, as
 * exiftool and piexif read it; ASCII: as is).  NULL when unusable. */
static char *decode_comment(const uint8_t *c, uint32_t n, bool be)
{
    if (n < 8)
        return NULL;
    const bool unicode = memcmp(c, "UNICODE\0", 8) == 0;
    if (!unicode && memcmp(c, "ASCII\0\0\0", 8) != 0)
        return NULL;
    c += 8;
    n -= 8;
    char *out = malloc((size_t)n * 2 + 1); /* a UTF-16 unit -> at most 3 bytes per 2 */
    if (!out)
        return NULL;
    size_t o = 0;
    if (!unicode) {
        for (uint32_t i = 0; i < n && c[i]; i++)
            out[o++] = (char)c[i];
    } else {
        for (uint32_t i = 0; i + 1 < n; i += 2) {
            uint32_t cp = get16(c + i, be);
            if (cp >= 0xD800 && cp < 0xDC00 && i + 3 < n) {
                uint32_t lo = get16(c + i + 2, be);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 2;
                }
            }
            if (cp == 0)
                break;
            if (cp >= 0xD800 && cp < 0xE000)
                cp = 0xFFFD; /* an unpaired surrogate */
            if (cp < 0x80) {
                out[o++] = (char)cp;
            } else if (cp < 0x800) {
                out[o++] = (char)(0xC0 | cp >> 6);
                out[o++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                out[o++] = (char)(0xE0 | cp >> 12);
                out[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
                out[o++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[o++] = (char)(0xF0 | cp >> 18);
                out[o++] = (char)(0x80 | (cp >> 12 & 0x3F));
                out[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
                out[o++] = (char)(0x80 | (cp & 0x3F));
            }
        }
    }
    out[o] = '\0';
    if (!tsr_utf8_valid(out, o, NULL)) {
        free(out);
        return NULL;
    }
    return out;
}

int tsr_jpeg_parameters(const void *data, size_t size, char **out)
{
    *out = NULL;
    const uint8_t *p = data;
    if (!p || size < 4 || p[0] != 0xFF || p[1] != 0xD8)
        return tsr_errorf(TSR_ERR_FORMAT, "not a JPEG file");
    size_t i = 2;
    while (i + 4 <= size) {
        if (p[i] != 0xFF)
            return TSR_OK; /* not a marker: stop looking */
        uint8_t m = p[i + 1];
        if (m == 0xFF) {
            i++; /* fill byte */
            continue;
        }
        if (m == 0xDA || m == 0xD9)
            return TSR_OK; /* start of scan / end of image: no more headers */
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
            i += 2;
            continue;
        }
        size_t len = (size_t)p[i + 2] << 8 | p[i + 3];
        if (len < 2 || len > size - i - 2)
            return TSR_OK;
        const uint8_t *seg = p + i + 4;
        size_t n = len - 2;
        if (m == 0xE1 && n >= 14 && memcmp(seg, "Exif\0\0", 6) == 0) {
            const uint8_t *t = seg + 6;
            size_t tn = n - 6;
            bool be = t[0] == 'M' && t[1] == 'M';
            if ((be || (t[0] == 'I' && t[1] == 'I')) && get16(t + 2, be) == 42) {
                uint32_t exif_ifd, cnt, uc;
                if (ifd_find(t, tn, be, get32(t + 4, be), EXIF_TAG_EXIF_IFD, &exif_ifd, &cnt) &&
                    ifd_find(t, tn, be, exif_ifd, EXIF_TAG_USER_COMMENT, &uc, &cnt)) {
                    *out = decode_comment(t + uc, cnt, be);
                    if (*out)
                        return TSR_OK;
                }
            }
        }
        i += 2 + len;
    }
    return TSR_OK;
}

int tsr_jpeg_read(const char *path, int want_channels, tsr_image *img, char **parameters)
{
    if (img)
        memset(img, 0, sizeof *img);
    if (parameters)
        *parameters = NULL;
    if (!path || !img)
        return tsr_errorf(TSR_ERR_INVALID, "jpeg read: no path or no image");
    FILE *f = fopen(path, "rb");
    if (!f)
        return tsr_errorf(errno == ENOENT ? TSR_ERR_NOT_FOUND : TSR_ERR_IO, "%s: cannot open: %s",
                          path, strerror(errno));
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = TSR_OK;
    for (;;) {
        if (len == cap) {
            if (cap >= ((size_t)256 << 20)) {
                rc = tsr_errorf(TSR_ERR_RANGE, "%s: larger than 256 MiB", path);
                goto done;
            }
            cap = cap ? cap * 2 : 1 << 16;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                rc = tsr_errorf(TSR_ERR_NOMEM, "%s: out of memory", path);
                goto done;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f))
                rc = tsr_errorf(TSR_ERR_IO, "%s: read failed", path);
            break;
        }
    }
    if (rc < 0)
        goto done;
    TSR_CHECK_GOTO(rc, tsr_jpeg_decode(buf, len, path, want_channels, NULL, img), done);
    if (parameters && tsr_jpeg_parameters(buf, len, parameters) < 0)
        *parameters = NULL;
done:
    fclose(f);
    free(buf);
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
