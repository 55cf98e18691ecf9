/*
 * tests/image/test_crop_region.c - image/crop_region.c, A1111's "inpaint
 * only masked" region.  Expected rectangles are what A1111's
 * masking.get_crop_region + expand_crop_region return for the same box,
 * padding and sizes (worked out with those Python functions).
 *   bbox     the binarized mask's bounding box; an empty mask; bad input
 *   borders  a box at each border and corner, padding past the edge
 *   expand   aspect expansion: centred, shifted at an edge, clamped when
 *            the wanted size exceeds the image
 */
#include "test.h"

#include <string.h>

#include "core/error.h"
#include "image/image.h"

#define ASSERT_RECT(r, a, b, c, d)                                                           \
    do {                                                                                     \
        const tsr_rect r_ = (r);                                                             \
        if (r_.x1 != (a) || r_.y1 != (b) || r_.x2 != (c) || r_.y2 != (d))                    \
            TSR_FAIL("rect (%d,%d,%d,%d), expected (%d,%d,%d,%d)", r_.x1, r_.y1, r_.x2,      \
                     r_.y2, (a), (b), (c), (d));                                             \
    } while (0)

/* A1111: crop = get_crop_region(box, pad); expand_crop_region(crop, pw, ph). */
static tsr_rect region(int x1, int y1, int x2, int y2, int pad, int pw, int ph)
{
    tsr_rect r = tsr_crop_region_pad((tsr_rect){x1, y1, x2, y2}, pad, 256, 192);
    return tsr_crop_region_expand(r, pw, ph, 256, 192);
}

static int test_bbox(void)
{
    tsr_image m = {0};
    ASSERT_OK(tsr_image_alloc(&m, 256, 192, 1));
    memset(m.data, 0, 256 * 192);
    tsr_rect box;
    ASSERT_EQ(tsr_mask_bbox(&m, 128, &box), 0);
    ASSERT_EQ(tsr_crop_region(&m, 32, 128, 128, &box), 0);
    m.data[80 * 256 + 100] = 128; /* not above A1111's 128 threshold */
    ASSERT_EQ(tsr_mask_bbox(&m, 128, &box), 0);
    m.data[80 * 256 + 100] = 129;
    m.data[89 * 256 + 119] = 255;
    ASSERT_EQ(tsr_mask_bbox(&m, 128, &box), 1);
    ASSERT_RECT(box, 100, 80, 120, 90);
    ASSERT_EQ(tsr_crop_region(&m, 32, 128, 128, &box), 1);
    ASSERT_RECT(box, 68, 43, 152, 127);
    /* a single pixel in the last corner */
    memset(m.data, 0, 256 * 192);
    m.data[191 * 256 + 255] = 255;
    ASSERT_EQ(tsr_mask_bbox(&m, 128, &box), 1);
    ASSERT_RECT(box, 255, 191, 256, 192);
    tsr_image rgb = {0};
    ASSERT_OK(tsr_image_alloc(&rgb, 4, 4, 3));
    ASSERT_TRUE(tsr_mask_bbox(&rgb, 128, &box) < 0);
    tsr_error_clear();
    tsr_image_free(&rgb);
    tsr_image_free(&m);
    return 0;
}

static int test_borders(void)
{
    /* padding clipped at the edge, then grown to square on the other axis */
    ASSERT_RECT(tsr_crop_region_pad((tsr_rect){0, 50, 10, 60}, 32, 256, 192), 0, 18, 42, 92);
    ASSERT_RECT(region(0, 50, 10, 60, 32, 128, 128), 0, 18, 74, 92);        /* left */
    ASSERT_RECT(region(250, 50, 256, 60, 32, 128, 128), 182, 18, 256, 92);  /* right */
    ASSERT_RECT(region(100, 0, 110, 5, 32, 128, 128), 68, 0, 142, 74);      /* top */
    ASSERT_RECT(region(100, 185, 110, 192, 32, 128, 128), 68, 118, 142, 192); /* bottom */
    ASSERT_RECT(region(240, 180, 256, 192, 8, 64, 128), 232, 144, 256, 192); /* corner */
    /* padding larger than the image: the whole image */
    ASSERT_RECT(region(100, 80, 120, 90, 256, 128, 128), 0, 0, 256, 192);
    return 0;
}

static int test_expand(void)
{
    ASSERT_RECT(region(100, 80, 120, 90, 32, 128, 128), 68, 43, 152, 127); /* centred */
    ASSERT_RECT(region(5, 5, 6, 6, 0, 128, 64), 5, 5, 7, 6);               /* 2:1 */
    /* wanted height past the image: clamped to it */
    ASSERT_RECT(region(0, 0, 200, 20, 0, 64, 128), 0, 0, 200, 192);
    ASSERT_RECT(region(10, 90, 250, 100, 4, 128, 128), 6, 0, 254, 192);
    /* already the aspect: unchanged */
    ASSERT_RECT(region(10, 10, 74, 74, 0, 128, 128), 10, 10, 74, 74);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"bbox", test_bbox},
    {"borders", test_borders},
    {"expand", test_expand},
};

TSR_TEST_TABLE_MAIN(tests)
