/*
 * tests/image/test_blur.c - image/blur.c: Pillow's GaussianBlur (against
 * Pillow's own output in tests/data/image/blur/, written by
 * tools/reference/make_blur_refs.py) and the inpainting mask overlay.
 *   pillow_gaussian  every radius bit-identical to Pillow
 *   overlay          the overlay formula at 0, 255 and in between; bad input
 */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/image.h"
#include "tessera.h"

static int read_png(const char *name, tsr_image *img)
{
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "image/blur/%s", name);
    ASSERT_OK(tsr_png_read(tsr_test_path(rel, path, sizeof path), 1, img, NULL));
    return 0;
}

static int test_pillow_gaussian(void)
{
    static const char *const radii[] = {"1", "2.5", "4", "9", "30"};
    tsr_image mask = {0};
    if (read_png("mask.png", &mask))
        return 1;
    for (size_t k = 0; k < sizeof radii / sizeof *radii; k++) {
        char name[64];
        snprintf(name, sizeof name, "blur_%s.png", radii[k]);
        tsr_image want = {0}, got = {0};
        if (read_png(name, &want))
            return 1;
        ASSERT_OK(tsr_image_gaussian_blur_pil(&mask, atof(radii[k]), &got));
        ASSERT_EQ(got.width, want.width);
        ASSERT_EQ(got.height, want.height);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < (size_t)got.width * got.height; i++)
            if (got.data[i] != want.data[i] && !bad++)
                first = i;
        if (bad)
            TSR_FAIL("radius %s: %zu pixels differ from Pillow, first at %zu (%d vs %d)",
                     radii[k], bad, first, got.data[first], want.data[first]);
        tsr_image_free(&want);
        tsr_image_free(&got);
    }
    /* radius 0 copies */
    tsr_image same = {0};
    ASSERT_OK(tsr_image_gaussian_blur_pil(&mask, 0, &same));
    ASSERT_TRUE(memcmp(same.data, mask.data, (size_t)mask.width * mask.height) == 0);
    tsr_image_free(&same);
    tsr_image bad = {0};
    ASSERT_TRUE(tsr_image_gaussian_blur_pil(&mask, -1, &bad) < 0);
    tsr_error_clear();
    tsr_image_free(&mask);
    return 0;
}

static int test_overlay(void)
{
    tsr_image gen = {0}, orig = {0}, m = {0}, out = {0};
    ASSERT_OK(tsr_image_alloc(&gen, 3, 1, 3));
    ASSERT_OK(tsr_image_alloc(&orig, 3, 1, 3));
    ASSERT_OK(tsr_image_alloc(&m, 3, 1, 1));
    memset(gen.data, 200, 9);
    memset(orig.data, 10, 9);
    m.data[0] = 0;
    m.data[1] = 255;
    m.data[2] = 128;
    ASSERT_OK(tsr_image_mask_overlay(&gen, &orig, &m, &out));
    ASSERT_EQ(out.data[0], 10);   /* outside the mask: the original */
    ASSERT_EQ(out.data[3], 200);  /* inside: the generated image */
    ASSERT_EQ(out.data[6], (200 * 128 + 10 * 127 + 127) / 255); /* 105 */
    tsr_image_free(&out);
    ASSERT_TRUE(tsr_image_mask_overlay(&gen, &orig, &gen, &out) < 0); /* mask not gray */
    tsr_error_clear();
    tsr_image_free(&gen);
    tsr_image_free(&orig);
    tsr_image_free(&m);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"pillow_gaussian", test_pillow_gaussian},
    {"overlay", test_overlay},
};

TSR_TEST_TABLE_MAIN(tests)
