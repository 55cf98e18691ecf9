/*
 * fuzz/fuzz_jpeg.c - libFuzzer driver for the JPEG decoder (and encoder).
 *
 * Why: tsr_jpeg_decode reads init images from users, so any bytes must give
 * either a clean error or a valid image within the limits, with libjpeg's
 * error and warning paths (which by default exit or print) turned into
 * returned errors.  On success the driver checks the image, touches every
 * pixel, and re-encodes it to check the encoder accepts whatever the
 * decoder produced.  A tightened pixel limit keeps each run small.
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
    const tsr_image_limits limits = {2048, 1u << 20};
    tsr_image img;
    int rc = tsr_jpeg_decode(data, size, "fuzz.jpg", want, &limits, &img);
    if (rc < 0) {
        CHECK(img.data == NULL);
        CHECK(strlen(tsr_last_error()) > 0);
        return 0;
    }
    CHECK(img.width >= 1 && img.height >= 1 && img.width <= 2048 && img.height <= 2048);
    CHECK(want ? img.channels == (uint32_t)want : (img.channels == 1 || img.channels == 3));
    volatile uint8_t sink = 0;
    size_t bytes = tsr_image_bytes(&img);
    for (size_t i = 0; i < bytes; i++)
        sink ^= img.data[i];
    (void)sink;
    uint8_t *buf = NULL;
    size_t len = 0;
    CHECK(tsr_jpeg_encode(&img, 75, &buf, &len) == 0 && len > 0);
    free(buf);
    tsr_image_free(&img);
    return 0;
}
