/*
 * fuzz/fuzz_image_read.c - libFuzzer driver for tsr_image_read_memory, the
 * reader `tessera generate` uses for --init-image and --mask (PNG or JPEG,
 * chosen by the first bytes), and for the A1111 resize that follows it.
 *
 * Why: init images and masks come from users (and, later, from uploads to
 * the service), so any bytes must give either a clean error or an image
 * within the limits; the format sniffing must never hand one decoder the
 * other's data unchecked.  On success the driver checks the image, fits it
 * to a small target with the resize mode picked from the input size (the
 * exact path the CLI takes next) and touches every output pixel, and reads
 * any A1111 parameters a JPEG carries in EXIF (tsr_jpeg_parameters parses
 * TIFF offsets from the file).  The seed corpus holds PNGs and JPEGs
 * (fuzz/corpus/image_read/).
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int wants[4] = {0, 1, 3, 4};
    const int want = wants[size & 3];
    const tsr_image_limits limits = {1024, 1u << 18};
    char *params = NULL;
    if (size >= 2 && data[0] == 0xFF && data[1] == 0xD8 &&
        tsr_jpeg_parameters(data, size, &params) == 0 && params)
        CHECK(strlen(params) < size * 2);
    free(params);
    tsr_image img;
    int rc = tsr_image_read_memory(data, size, "fuzz.img", want, &limits, &img);
    if (rc < 0) {
        CHECK(img.data == NULL);
        CHECK(strlen(tsr_last_error()) > 0);
        return 0;
    }
    CHECK(img.width >= 1 && img.height >= 1 && img.width <= 1024 && img.height <= 1024);
    CHECK(want ? img.channels == (uint32_t)want
               : (img.channels == 1 || img.channels == 3 || img.channels == 4));
    tsr_image fit;
    const tsr_resize_mode mode = (tsr_resize_mode)((size >> 2) % 3);
    const uint32_t w = 8 + 8 * (uint32_t)((size >> 4) & 3), h = 8 + 8 * (uint32_t)((size >> 6) & 3);
    CHECK(tsr_image_resize_a1111(&img, mode, w, h, &fit) == 0);
    CHECK(fit.width == w && fit.height == h && fit.channels == img.channels);
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < tsr_image_bytes(&fit); i++)
        sink ^= fit.data[i];
    (void)sink;
    tsr_image_free(&fit);
    tsr_image_free(&img);
    return 0;
}
