/*
 * tests/image/test_png.c - PNG read/write: round trips, text chunks, every
 * colour type and depth, and hostile files.
 *
 * Why: the decoder cases (tests/data/image/, one file per layout) were written by an
 * independent hand-rolled encoder (make_png_cases.py) from a formula that
 * expect_pixel() below repeats, so a decode is checked against the formula,
 * not against our own writer.  Hostile inputs are derived in memory from a
 * valid file (every truncation length, flipped CRCs, patched IHDRs) so they
 * need no data files.
 */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/image.h"
#include "test.h"

/* ---- helpers ---- */

static uint32_t crc_table[256];

static uint32_t crc32_png(const uint8_t *p, size_t n)
{
    if (!crc_table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            crc_table[i] = c;
        }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 255] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Patch the IHDR size of an encoded PNG and fix its CRC. */
static void patch_ihdr(uint8_t *png, uint32_t w, uint32_t h)
{
    put_be32(png + 16, w);
    put_be32(png + 20, h);
    put_be32(png + 29, crc32_png(png + 12, 17));
}

static uint8_t pattern(uint32_t x, uint32_t y, uint32_t c)
{
    return (uint8_t)((x * 37 + y * 101 + c * 53 + x * y * 7) & 255);
}

static void fill_pattern(tsr_image *img)
{
    for (uint32_t y = 0; y < img->height; y++)
        for (uint32_t x = 0; x < img->width; x++)
            for (uint32_t c = 0; c < img->channels; c++)
                img->data[((size_t)y * img->width + x) * img->channels + c] = pattern(x, y, c);
}

static int make_png(uint32_t w, uint32_t h, uint32_t ch, uint8_t **buf, size_t *len)
{
    tsr_image img;
    ASSERT_OK(tsr_image_alloc(&img, w, h, ch));
    fill_pattern(&img);
    int rc = tsr_png_write_memory(&img, NULL, 0, buf, len);
    tsr_image_free(&img);
    ASSERT_OK(rc);
    return 0;
}

static const uint8_t *find_bytes(const uint8_t *hay, size_t n, const void *needle, size_t m)
{
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(hay + i, needle, m) == 0)
            return hay + i;
    return NULL;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- round trips ---- */

static int round_trip(uint32_t ch)
{
    tsr_image img, back;
    uint8_t *buf = NULL;
    size_t len = 0;
    ASSERT_OK(tsr_image_alloc(&img, 17, 9, ch));
    fill_pattern(&img);
    ASSERT_OK(tsr_png_write_memory(&img, NULL, 0, &buf, &len));
    ASSERT_TRUE(len > 33 && memcmp(buf, "\x89PNG\r\n\x1a\n", 8) == 0);
    ASSERT_OK(tsr_png_read_memory(buf, len, "rt.png", 0, &back, NULL));
    ASSERT_EQ(back.width, 17);
    ASSERT_EQ(back.height, 9);
    ASSERT_EQ(back.channels, ch);
    ASSERT_TRUE(memcmp(back.data, img.data, tsr_image_bytes(&img)) == 0);
    tsr_image_free(&back);

    /* and through a file, atomically */
    char path[] = "/tmp/tsr_png_rt_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    ASSERT_OK(tsr_png_write(path, &img, NULL, 0));
    char tmp[64];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    ASSERT_TRUE(!file_exists(tmp));
    ASSERT_OK(tsr_png_read(path, 0, &back, NULL));
    ASSERT_TRUE(back.channels == ch && memcmp(back.data, img.data, tsr_image_bytes(&img)) == 0);
    unlink(path);
    tsr_image_free(&back);
    tsr_image_free(&img);
    free(buf);
    return 0;
}

static int test_round_trip_gray(void) { return round_trip(1); }
static int test_round_trip_rgb(void) { return round_trip(3); }
static int test_round_trip_rgba(void) { return round_trip(4); }

static int test_text_round_trip(void)
{
    const tsr_png_text texts[] = {
        {"parameters", "a cat\nNegative prompt: dog\nSteps: 20, Sampler: Euler a"},
        {"latin", "caf\xc3\xa9 \xc2\xb5"},                /* fits Latin-1 -> tEXt */
        {"utf8", "\xe7\x8c\xab \xf0\x9f\x90\x88 ok"},     /* CJK + emoji -> iTXt */
        {"empty", ""},
    };
    tsr_image img, back;
    tsr_png_meta meta;
    uint8_t *buf = NULL;
    size_t len = 0;
    ASSERT_OK(tsr_image_alloc(&img, 5, 4, 3));
    fill_pattern(&img);
    ASSERT_OK(tsr_png_write_memory(&img, texts, 4, &buf, &len));

    /* chunk choice and placement as PIL: tEXt/iTXt before IDAT */
    const uint8_t *idat = find_bytes(buf, len, "IDAT", 4);
    const uint8_t *t1 = find_bytes(buf, len, "tEXtparameters\0a cat\nNegative", 29);
    const uint8_t *t2 = find_bytes(buf, len, "tEXtlatin\0caf\xe9 \xb5", 16);
    const uint8_t *t3 = find_bytes(buf, len, "iTXtutf8\0\0\0\0\0\xe7\x8c\xab", 16);
    ASSERT_TRUE(idat && t1 && t2 && t3);
    ASSERT_TRUE(t1 < idat && t2 < idat && t3 < idat);

    ASSERT_OK(tsr_png_read_memory(buf, len, "t.png", 0, &back, &meta));
    ASSERT_EQ(meta.count, 4);
    for (size_t i = 0; i < 4; i++) {
        ASSERT_STR_EQ(meta.texts[i].key, texts[i].key);
        ASSERT_STR_EQ(meta.texts[i].text, texts[i].text);
    }
    ASSERT_STR_EQ(tsr_png_meta_find(&meta, "utf8"), texts[2].text);
    ASSERT_TRUE(tsr_png_meta_find(&meta, "missing") == NULL);
    tsr_png_meta_free(&meta);
    tsr_image_free(&back);

    /* without meta the text is not even stored, pixels still decode */
    ASSERT_OK(tsr_png_read_memory(buf, len, "t.png", 0, &back, NULL));
    ASSERT_TRUE(memcmp(back.data, img.data, tsr_image_bytes(&img)) == 0);
    tsr_image_free(&back);
    tsr_image_free(&img);
    free(buf);
    return 0;
}

static int test_text_rejects(void)
{
    tsr_image img;
    uint8_t *buf = NULL;
    size_t len = 0;
    ASSERT_OK(tsr_image_alloc(&img, 2, 2, 1));
    memset(img.data, 0, 4);
    const char *bad_keys[] = {"", " lead", "trail ", "two  spaces", "k\xc3\xa9y",
                              ("0123456789012345678901234567890123456789"
                               "0123456789012345678901234567890123456789")}; /* 80 bytes */
    for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++) {
        tsr_png_text t = {bad_keys[i], "x"};
        ASSERT_EQ(tsr_png_write_memory(&img, &t, 1, &buf, &len), TSR_ERR_INVALID);
        ASSERT_TRUE(buf == NULL && len == 0);
    }
    tsr_png_text t = {"ok", "bad \xc3\x28 utf8"};
    ASSERT_ERR(tsr_png_write_memory(&img, &t, 1, &buf, &len), TSR_ERR_INVALID, "UTF-8");
    tsr_png_text ov = {"ok", "overlong \xc0\xaf"};
    ASSERT_EQ(tsr_png_write_memory(&img, &ov, 1, &buf, &len), TSR_ERR_INVALID);

    /* a failing write leaves neither the file nor its .tmp */
    char dir[] = "/tmp/tsr_png_dir_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    char path[96], tmp[96];
    snprintf(path, sizeof(path), "%s/out.png", dir);
    snprintf(tmp, sizeof(tmp), "%s/out.png.tmp", dir);
    ASSERT_ERR(tsr_png_write(path, &img, &t, 1), TSR_ERR_INVALID, "out.png");
    ASSERT_TRUE(!file_exists(path) && !file_exists(tmp));
    char nodir[128];
    snprintf(nodir, sizeof(nodir), "%s/missing/out.png", dir);
    ASSERT_ERR(tsr_png_write(nodir, &img, NULL, 0), TSR_ERR_IO, "missing/out.png.tmp");
    ASSERT_OK(tsr_png_write(path, &img, NULL, 0));
    ASSERT_TRUE(file_exists(path) && !file_exists(tmp));
    unlink(path);
    rmdir(dir);

    /* invalid images */
    tsr_image bad = img;
    bad.channels = 2;
    ASSERT_EQ(tsr_png_write_memory(&bad, NULL, 0, &buf, &len), TSR_ERR_INVALID);
    bad.channels = 1;
    bad.width = 0;
    ASSERT_EQ(tsr_png_write_memory(&bad, NULL, 0, &buf, &len), TSR_ERR_RANGE);
    tsr_image_free(&img);
    return 0;
}

static int test_pil_text(void)
{
    char path[512];
    tsr_image img;
    tsr_png_meta meta;
    ASSERT_OK(tsr_png_read(tsr_test_path("image/pil_text.png", path, sizeof(path)), 0, &img,
                           &meta));
    ASSERT_EQ(img.width, 4);
    ASSERT_EQ(img.channels, 3);
    ASSERT_EQ(img.data[0], 10);
    ASSERT_EQ(img.data[2], 30);
    ASSERT_EQ(meta.count, 3);
    ASSERT_STR_EQ(tsr_png_meta_find(&meta, "parameters"),
                  "caf\xc3\xa9 au lait\nSteps: 20, Sampler: Euler a");
    ASSERT_STR_EQ(tsr_png_meta_find(&meta, "prompt_ja"), "\xe7\x8c\xab\xe3\x81\xa8\xe7\x8a\xac");
    ASSERT_STR_EQ(tsr_png_meta_find(&meta, "comment"), "zipped latin-1 \xc3\xbc");
    tsr_png_meta_free(&meta);
    tsr_image_free(&img);
    return 0;
}

/* ---- decoding every layout ---- */

static void palette_color(uint32_t i, uint8_t rgb[3])
{
    rgb[0] = (uint8_t)((i * 73) & 255);
    rgb[1] = (uint8_t)((i * 151 + 20) & 255);
    rgb[2] = (uint8_t)((255 - i * 13) & 255);
}

/* Expected natural-layout pixel of each case file (see make_png_cases.py). */
static void expect_pixel(const char *name, uint32_t x, uint32_t y, uint8_t out[4])
{
    uint8_t g = pattern(x, y, 0), rgb[3];
    uint32_t pi = (x + 3 * y) % 16;
    if (!strcmp(name, "gray8") || !strcmp(name, "gray16")) {
        out[0] = g;
    } else if (!strcmp(name, "gray1")) {
        out[0] = ((x ^ y) & 1) ? 255 : 0;
    } else if (!strcmp(name, "gray2_adam7")) {
        out[0] = (uint8_t)(((x + y) % 4) * 85);
    } else if (!strcmp(name, "graya8")) {
        out[0] = out[1] = out[2] = g;
        out[3] = pattern(x, y, 3);
    } else if (!strcmp(name, "gray8_trns")) {
        out[0] = out[1] = out[2] = g;
        out[3] = g == 37 ? 0 : 255;
    } else if (!strcmp(name, "rgb8") || !strcmp(name, "rgb8_adam7") ||
               !strcmp(name, "rgba16")) {
        for (int c = 0; c < 4; c++)
            out[c] = pattern(x, y, (uint32_t)c);
    } else { /* palette4_trns, palette8 */
        palette_color(pi, rgb);
        memcpy(out, rgb, 3);
        out[3] = (uint8_t)((pi * 17) & 255);
    }
}

static int check_case(const char *name, uint32_t natural)
{
    char rel[64], path[512];
    snprintf(rel, sizeof(rel), "image/%s.png", name);
    tsr_test_path(rel, path, sizeof(path));
    tsr_image img;
    ASSERT_OK(tsr_png_read(path, 0, &img, NULL));
    ASSERT_EQ(img.width, 13);
    ASSERT_EQ(img.height, 7);
    ASSERT_EQ(img.channels, natural);
    for (uint32_t y = 0; y < 7; y++)
        for (uint32_t x = 0; x < 13; x++) {
            uint8_t want[4];
            expect_pixel(name, x, y, want);
            const uint8_t *got = img.data + ((size_t)y * 13 + x) * natural;
            for (uint32_t c = 0; c < natural; c++)
                if (got[c] != want[c])
                    TSR_FAIL("%s (%u,%u) channel %u: %u != %u", name, x, y, c, got[c],
                             want[c]);
        }
    tsr_image_free(&img);

    /* every wanted layout agrees with converting the natural one */
    tsr_image nat;
    ASSERT_OK(tsr_png_read(path, 0, &nat, NULL));
    for (int want = 1; want <= 4; want++) {
        if (want == 2)
            continue;
        tsr_image conv, direct;
        ASSERT_OK(tsr_image_convert(&nat, (uint32_t)want, &conv));
        ASSERT_OK(tsr_png_read(path, want, &direct, NULL));
        ASSERT_EQ(direct.channels, want);
        ASSERT_TRUE(memcmp(conv.data, direct.data, tsr_image_bytes(&conv)) == 0);
        tsr_image_free(&conv);
        tsr_image_free(&direct);
    }
    tsr_image_free(&nat);
    return 0;
}

static int test_decode_gray8(void) { return check_case("gray8", 1); }
static int test_decode_gray1(void) { return check_case("gray1", 1); }
static int test_decode_gray2_adam7(void) { return check_case("gray2_adam7", 1); }
static int test_decode_gray16(void) { return check_case("gray16", 1); }
static int test_decode_graya8(void) { return check_case("graya8", 4); }
static int test_decode_gray8_trns(void) { return check_case("gray8_trns", 4); }
static int test_decode_rgb8(void) { return check_case("rgb8", 3); }
static int test_decode_rgb8_adam7(void) { return check_case("rgb8_adam7", 3); }
static int test_decode_rgba16(void) { return check_case("rgba16", 4); }
static int test_decode_palette4_trns(void) { return check_case("palette4_trns", 4); }
static int test_decode_palette8(void) { return check_case("palette8", 3); }

static int test_convert(void)
{
    tsr_image rgb, gray, rgba, back;
    ASSERT_OK(tsr_image_alloc(&rgb, 3, 1, 3));
    const uint8_t px[9] = {255, 0, 0, 0, 255, 0, 10, 200, 30};
    memcpy(rgb.data, px, 9);
    ASSERT_OK(tsr_image_convert(&rgb, 1, &gray));
    /* PIL: L = R*299/1000 + G*587/1000 + B*114/1000 */
    ASSERT_EQ(gray.data[0], 76);  /* 76.245 */
    ASSERT_EQ(gray.data[1], 150); /* 149.685 */
    ASSERT_EQ(gray.data[2], 124); /* 2.99 + 117.4 + 3.42 = 123.81 */
    ASSERT_OK(tsr_image_convert(&rgb, 4, &rgba));
    ASSERT_EQ(rgba.data[3], 255);
    ASSERT_EQ(rgba.data[4], 0);
    ASSERT_OK(tsr_image_convert(&gray, 3, &back));
    ASSERT_TRUE(back.data[0] == 76 && back.data[1] == 76 && back.data[2] == 76);
    tsr_image_free(&back);
    ASSERT_EQ(tsr_image_convert(&rgb, 2, &back), TSR_ERR_INVALID);
    ASSERT_TRUE(back.data == NULL);
    tsr_image_free(&rgb);
    tsr_image_free(&gray);
    tsr_image_free(&rgba);
    return 0;
}

/* ---- hostile files ---- */

static int test_not_png(void)
{
    tsr_image img;
    tsr_png_meta meta;
    const char *text = "hello, this is not a PNG at all";
    ASSERT_ERR(tsr_png_read_memory(text, strlen(text), "init.png", 0, &img, &meta),
               TSR_ERR_FORMAT, "init.png: not a PNG file");
    ASSERT_TRUE(img.data == NULL && meta.count == 0 && meta.texts == NULL);
    ASSERT_ERR(tsr_png_read_memory("", 0, "empty.png", 0, &img, NULL), TSR_ERR_FORMAT,
               "empty.png: not a PNG file");
    /* a JPEG is not a PNG */
    const uint8_t jpg[] = {0xFF, 0xD8, 0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F'};
    ASSERT_ERR(tsr_png_read_memory(jpg, sizeof(jpg), "x.png", 0, &img, NULL), TSR_ERR_FORMAT,
               "not a PNG");
    ASSERT_ERR(tsr_png_read("/nonexistent/dir/init.png", 0, &img, NULL), TSR_ERR_IO,
               "/nonexistent/dir/init.png: cannot open");
    ASSERT_EQ(tsr_png_read_memory("x", 1, "x.png", 2, &img, NULL), TSR_ERR_INVALID);
    return 0;
}

static int test_truncated(void)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    if (make_png(40, 30, 3, &buf, &len))
        return 1;
    /* every proper prefix fails with a clean error, none crashes or leaks */
    for (size_t n = 0; n < len; n++) {
        tsr_image img;
        tsr_png_meta meta;
        int rc = tsr_png_read_memory(buf, n, "cut.png", 0, &img, &meta);
        if (rc != TSR_ERR_FORMAT)
            TSR_FAIL("prefix %zu of %zu: rc %d (%s)", n, len, rc, tsr_last_error());
        if (n >= 8 && !strstr(tsr_last_error(), "truncated"))
            TSR_FAIL("prefix %zu: \"%s\" does not say truncated", n, tsr_last_error());
        ASSERT_TRUE(img.data == NULL && meta.texts == NULL);
    }
    tsr_image img;
    ASSERT_OK(tsr_png_read_memory(buf, len, "whole.png", 0, &img, NULL));
    tsr_image_free(&img);
    free(buf);
    return 0;
}

static int test_bad_crc(void)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    tsr_image img;
    if (make_png(20, 10, 3, &buf, &len))
        return 1;
    uint8_t *copy = malloc(len);
    ASSERT_TRUE(copy != NULL);

    /* a bit flipped inside the IDAT data: zlib or the CRC refuses it */
    const uint8_t *idat = find_bytes(buf, len, "IDAT", 4);
    ASSERT_TRUE(idat != NULL);
    size_t at = (size_t)(idat - buf) + 10;
    memcpy(copy, buf, len);
    copy[at] ^= 0x10;
    ASSERT_ERR(tsr_png_read_memory(copy, len, "data.png", 0, &img, NULL), TSR_ERR_FORMAT,
               "data.png: ");

    /* the IDAT's own CRC: a critical chunk, so an error */
    size_t idat_len = ((size_t)idat[-4] << 24) | ((size_t)idat[-3] << 16) |
                      ((size_t)idat[-2] << 8) | idat[-1];
    memcpy(copy, buf, len);
    copy[(size_t)(idat - buf) + 4 + idat_len] ^= 0x01;
    ASSERT_ERR(tsr_png_read_memory(copy, len, "crc.png", 0, &img, NULL), TSR_ERR_FORMAT,
               "crc.png: IDAT: CRC error");

    /* IHDR CRC */
    memcpy(copy, buf, len);
    copy[32] ^= 1;
    ASSERT_ERR(tsr_png_read_memory(copy, len, "ihdr.png", 0, &img, NULL), TSR_ERR_FORMAT,
               "CRC");

    /* IEND CRC: everything decoded, still refused (no silent acceptance) */
    memcpy(copy, buf, len);
    copy[len - 1] ^= 1;
    ASSERT_EQ(tsr_png_read_memory(copy, len, "iend.png", 0, &img, NULL), TSR_ERR_FORMAT);

    /* chunk length far past the end */
    memcpy(copy, buf, len);
    put_be32(copy + (idat - buf) - 4, 0x7FFFFFF0u);
    ASSERT_EQ(tsr_png_read_memory(copy, len, "len.png", 0, &img, NULL), TSR_ERR_FORMAT);
    ASSERT_TRUE(img.data == NULL);
    free(copy);
    free(buf);
    return 0;
}

static int test_huge_dims(void)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    tsr_image img;
    if (make_png(8, 8, 3, &buf, &len))
        return 1;
    patch_ihdr(buf, 40000, 40000);
    ASSERT_ERR(tsr_png_read_memory(buf, len, "init.png", 0, &img, NULL), TSR_ERR_RANGE,
               "init.png: 40000x40000 exceeds the 16384 limit");
    patch_ihdr(buf, 0x7FFFFFFFu, 1);
    ASSERT_ERR(tsr_png_read_memory(buf, len, "w.png", 0, &img, NULL), TSR_ERR_RANGE,
               "exceeds the 16384 limit");
    patch_ihdr(buf, 16384, 16385);
    ASSERT_EQ(tsr_png_read_memory(buf, len, "h.png", 0, &img, NULL), TSR_ERR_RANGE);

    /* a size within the limits but far beyond the data: an error, not a
     * success with garbage */
    patch_ihdr(buf, 1000, 1000);
    ASSERT_EQ(tsr_png_read_memory(buf, len, "short.png", 0, &img, NULL), TSR_ERR_FORMAT);
    ASSERT_TRUE(img.data == NULL);

    /* caller limits: side and total pixels */
    patch_ihdr(buf, 8, 8);
    tsr_image_limits lim = {4, 0};
    ASSERT_ERR(tsr_png_read_ex("l.png", buf, len, 0, &lim, &img, NULL), TSR_ERR_RANGE,
               "8x8 exceeds the 4 limit");
    tsr_image_limits lim2 = {0, 63};
    ASSERT_ERR(tsr_png_read_ex("p.png", buf, len, 0, &lim2, &img, NULL), TSR_ERR_RANGE,
               "63-pixel limit");
    tsr_image_limits lim3 = {8, 64};
    ASSERT_OK(tsr_png_read_ex("ok.png", buf, len, 0, &lim3, &img, NULL));
    tsr_image_free(&img);
    free(buf);
    return 0;
}

static int test_zero_size(void)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    tsr_image img;
    if (make_png(8, 8, 1, &buf, &len))
        return 1;
    patch_ihdr(buf, 0, 8);
    ASSERT_ERR(tsr_png_read_memory(buf, len, "z.png", 0, &img, NULL), TSR_ERR_RANGE,
               "z.png: 0x8: zero size");
    patch_ihdr(buf, 8, 0);
    ASSERT_ERR(tsr_png_read_memory(buf, len, "z.png", 0, &img, NULL), TSR_ERR_RANGE,
               "zero size");
    /* IHDR not first / wrong length */
    patch_ihdr(buf, 8, 8);
    buf[12] = 'X';
    ASSERT_ERR(tsr_png_read_memory(buf, len, "n.png", 0, &img, NULL), TSR_ERR_FORMAT,
               "not a 13-byte IHDR");
    ASSERT_EQ(tsr_image_alloc(&img, 0, 1, 3), TSR_ERR_RANGE);
    ASSERT_EQ(tsr_image_alloc(&img, 1, 1, 5), TSR_ERR_INVALID);
    free(buf);
    return 0;
}

static int test_bad_ihdr_fields(void)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    tsr_image img;
    if (make_png(8, 8, 3, &buf, &len))
        return 1;
    struct {
        int off;
        uint8_t v;
    } cases[] = {
        {24, 7},  /* bit depth 7 */
        {25, 5},  /* colour type 5 */
        {24, 16}, /* RGB 16-bit, but the data is 8-bit: too little data */
        {26, 1},  /* compression method 1 */
        {28, 2},  /* interlace method 2 */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t *copy = malloc(len);
        ASSERT_TRUE(copy != NULL);
        memcpy(copy, buf, len);
        copy[cases[i].off] = cases[i].v;
        put_be32(copy + 29, crc32_png(copy + 12, 17));
        int rc = tsr_png_read_memory(copy, len, "f.png", 0, &img, NULL);
        free(copy);
        if (rc != TSR_ERR_FORMAT)
            TSR_FAIL("case %zu: rc %d %s", i, rc, tsr_last_error());
        ASSERT_TRUE(img.data == NULL);
    }
    free(buf);
    return 0;
}

static int test_huge_chunk(void)
{
    /* an ancillary chunk declaring 1.3 GB in a tiny file: libpng would
     * allocate the declared size; our allocator budget refuses it */
    uint8_t *buf = NULL;
    size_t len = 0;
    if (make_png(8, 8, 3, &buf, &len))
        return 1;
    const char *types[] = {"iTXt", "zTXt", "tEXt", "iCCP", "xxXx"};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        uint8_t *evil = malloc(len + 64);
        ASSERT_TRUE(evil != NULL);
        memcpy(evil, buf, 33);
        put_be32(evil + 33, 0x52000000u);
        memcpy(evil + 37, types[t], 4);
        memset(evil + 41, 'A', 40);
        memcpy(evil + 81, buf + 33, len - 33);
        tsr_image img;
        tsr_png_meta meta;
        int rc = tsr_png_read_memory(evil, len + 48, "evil.png", 0, &img, &meta);
        free(evil);
        if (rc != TSR_ERR_FORMAT)
            TSR_FAIL("%s: rc %d %s", types[t], rc, tsr_last_error());
        ASSERT_TRUE(img.data == NULL && meta.texts == NULL);
        /* text chunks are read whole, so they must hit the budget; libpng
         * reads iCCP in pieces and skips unknown chunks without a buffer */
        if (t < 3 && !strstr(tsr_last_error(), "decoder budget"))
            TSR_FAIL("%s: \"%s\" does not name the budget", types[t], tsr_last_error());
    }
    free(buf);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"round_trip_gray", test_round_trip_gray},
    {"round_trip_rgb", test_round_trip_rgb},
    {"round_trip_rgba", test_round_trip_rgba},
    {"text_round_trip", test_text_round_trip},
    {"text_rejects", test_text_rejects},
    {"pil_text", test_pil_text},
    {"decode_gray8", test_decode_gray8},
    {"decode_gray1", test_decode_gray1},
    {"decode_gray2_adam7", test_decode_gray2_adam7},
    {"decode_gray16", test_decode_gray16},
    {"decode_graya8", test_decode_graya8},
    {"decode_gray8_trns", test_decode_gray8_trns},
    {"decode_rgb8", test_decode_rgb8},
    {"decode_rgb8_adam7", test_decode_rgb8_adam7},
    {"decode_rgba16", test_decode_rgba16},
    {"decode_palette4_trns", test_decode_palette4_trns},
    {"decode_palette8", test_decode_palette8},
    {"convert", test_convert},
    {"not_png", test_not_png},
    {"truncated", test_truncated},
    {"bad_crc", test_bad_crc},
    {"huge_dims", test_huge_dims},
    {"zero_size", test_zero_size},
    {"bad_ihdr_fields", test_bad_ihdr_fields},
    {"huge_chunk", test_huge_chunk},
};

TSR_TEST_TABLE_MAIN(tests)
