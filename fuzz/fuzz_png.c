/*
 * fuzz/fuzz_png.c - libFuzzer driver for the PNG reader (and writer).
 *
 * Why: the reader's contract is "any bytes give either a clean error or a
 * valid image within the limits".  libFuzzer hands an exact-size heap copy
 * of each input, so ASan turns any over-read into a crash.  The driver
 * reads the bytes from memory with a tightened pixel limit (so a hostile
 * header cannot make each run allocate a gigabyte), picking the wanted
 * channel count from the input size; on success it checks the image's
 * invariants, touches every pixel, checks every text is a string, then
 * re-encodes the pixels and decodes them again, trapping unless the round
 * trip is exact.  Texts that our stricter writer accepts are round-tripped
 * too.  libpng is not instrumented and refuses any chunk whose CRC is
 * wrong, so for half of the inputs the driver first rewrites every chunk's
 * CRC to the right value; mutations then reach the chunk parsers and zlib
 * instead of stopping at the CRC check.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "tessera.h"

#define CHECK(c)              \
    do {                      \
        if (!(c))             \
            __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t crc_update(uint32_t c, const uint8_t *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t v = i;
            for (int k = 0; k < 8; k++)
                v = (v & 1) ? 0xEDB88320u ^ (v >> 1) : v >> 1;
            table[i] = v;
        }
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 255] ^ (c >> 8);
    return c;
}

/* Walk the chunks after the signature and write correct CRCs in place. */
static void fix_crcs(uint8_t *p, size_t size)
{
    size_t off = 8;
    while (off + 12 <= size) {
        uint32_t len = ((uint32_t)p[off] << 24) | ((uint32_t)p[off + 1] << 16) |
                       ((uint32_t)p[off + 2] << 8) | p[off + 3];
        if (len > size - off - 12)
            break;
        uint32_t c = crc_update(0xFFFFFFFFu, p + off + 4, 4 + (size_t)len) ^ 0xFFFFFFFFu;
        uint8_t *q = p + off + 8 + len;
        q[0] = (uint8_t)(c >> 24);
        q[1] = (uint8_t)(c >> 16);
        q[2] = (uint8_t)(c >> 8);
        q[3] = (uint8_t)c;
        off += 12 + (size_t)len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int wants[4] = {0, 1, 3, 4};
    const int want = wants[size & 3];
    const tsr_image_limits limits = {4096, 1u << 20};
    tsr_image img;
    tsr_png_meta meta;
    uint8_t *fixed = NULL;
    if ((size >> 2) & 1) {
        fixed = malloc(size ? size : 1);
        if (!fixed)
            return 0;
        memcpy(fixed, data, size);
        fix_crcs(fixed, size);
        data = fixed;
    }
    int rc = tsr_png_read_ex("fuzz.png", data, size, want, &limits, &img, &meta);
    free(fixed);
    if (rc < 0) {
        CHECK(img.data == NULL && meta.texts == NULL && meta.count == 0);
        CHECK(strlen(tsr_last_error()) > 0);
        return 0;
    }
    CHECK(img.width >= 1 && img.height >= 1 && img.width <= 4096 && img.height <= 4096);
    CHECK((uint64_t)img.width * img.height <= (1u << 20));
    CHECK(want ? img.channels == (uint32_t)want
               : (img.channels == 1 || img.channels == 3 || img.channels == 4));
    volatile uint8_t sink = 0;
    size_t bytes = tsr_image_bytes(&img);
    for (size_t i = 0; i < bytes; i++)
        sink ^= img.data[i];
    for (size_t i = 0; i < meta.count; i++) {
        CHECK(meta.texts[i].key && meta.texts[i].text);
        sink ^= (uint8_t)(strlen(meta.texts[i].key) + strlen(meta.texts[i].text));
    }
    (void)sink;

    /* pixels: encode and decode again, exactly */
    uint8_t *buf = NULL;
    size_t len = 0;
    CHECK(tsr_png_write_memory(&img, NULL, 0, &buf, &len) == 0);
    tsr_image back;
    CHECK(tsr_png_read_memory(buf, len, "again.png", 0, &back, NULL) == 0);
    CHECK(back.width == img.width && back.height == img.height &&
          back.channels == img.channels);
    CHECK(memcmp(back.data, img.data, bytes) == 0);
    tsr_image_free(&back);
    free(buf);

    /* texts: when our writer accepts them they come back unchanged */
    tsr_image one = {1, 1, 1, (uint8_t[1]){0}};
    if (meta.count > 0 &&
        tsr_png_write_memory(&one, meta.texts, meta.count, &buf, &len) == 0) {
        tsr_png_meta meta2;
        CHECK(tsr_png_read_memory(buf, len, "texts.png", 0, &back, &meta2) == 0);
        CHECK(meta2.count == meta.count);
        for (size_t i = 0; i < meta.count; i++)
            CHECK(strcmp(meta.texts[i].key, meta2.texts[i].key) == 0 &&
                  strcmp(meta.texts[i].text, meta2.texts[i].text) == 0);
        tsr_png_meta_free(&meta2);
        tsr_image_free(&back);
        free(buf);
    }
    tsr_png_meta_free(&meta);
    tsr_image_free(&img);
    return 0;
}
