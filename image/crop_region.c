/*
 * image/crop_region.c - the region A1111's "inpaint only masked"
 * (inpaint_full_res) crops, inpaints at the target size and pastes back.
 *
 * Restated from A1111's modules/masking.py: get_crop_region (the bounding
 * box of the mask's set pixels, grown by `padding` on every side and
 * clipped to the image) and expand_crop_region (grow the box's shorter
 * dimension, half on each side, until its aspect is the target's; where it
 * runs past an edge it shifts back inside, and it is clipped to the image
 * when it is larger than the image).  Coordinates are half-open:
 * [x1, x2) x [y1, y2).
 */
#include <string.h>

#include "core/error.h"
#include "image/image.h"

int tsr_mask_bbox(const tsr_image *mask, uint8_t threshold, tsr_rect *box)
{
    memset(box, 0, sizeof *box);
    if (!mask || !mask->data || mask->channels != 1 || !mask->width || !mask->height)
        return tsr_errorf(TSR_ERR_INVALID, "mask bounding box: needs a gray mask");
    const int W = (int)mask->width, H = (int)mask->height;
    int x1 = W, y1 = H, x2 = -1, y2 = -1;
    for (int y = 0; y < H; y++) {
        const uint8_t *row = mask->data + (size_t)y * W;
        for (int x = 0; x < W; x++)
            if (row[x] > threshold) {
                if (x < x1)
                    x1 = x;
                if (x > x2)
                    x2 = x;
                if (y < y1)
                    y1 = y;
                y2 = y;
            }
    }
    if (x2 < 0)
        return 0; /* nothing set */
    *box = (tsr_rect){x1, y1, x2 + 1, y2 + 1};
    return 1;
}

tsr_rect tsr_crop_region_pad(tsr_rect box, int padding, int image_width, int image_height)
{
    tsr_rect r = {box.x1 - padding, box.y1 - padding, box.x2 + padding, box.y2 + padding};
    if (r.x1 < 0)
        r.x1 = 0;
    if (r.y1 < 0)
        r.y1 = 0;
    if (r.x2 > image_width)
        r.x2 = image_width;
    if (r.y2 > image_height)
        r.y2 = image_height;
    return r;
}

/* Grow [*a, *b) by `diff` (half before, the rest after), shift it back
 * inside [0, limit) where it runs past an edge, and clip it to the image
 * when it is longer than the image (A1111's expand_crop_region, one axis). */
static void grow_axis(int *a, int *b, int diff, int limit)
{
    *a -= diff / 2;
    *b += diff - diff / 2;
    if (*b >= limit) {
        const int over = *b - limit;
        *b -= over;
        *a -= over;
    }
    if (*a < 0) {
        *b -= *a;
        *a = 0;
    }
    if (*b >= limit)
        *b = limit;
}

tsr_rect tsr_crop_region_expand(tsr_rect r, int width, int height, int image_width,
                                int image_height)
{
    const int w = r.x2 - r.x1, h = r.y2 - r.y1;
    if (w <= 0 || h <= 0 || width <= 0 || height <= 0)
        return r;
    /* A1111 compares and scales in doubles and truncates the difference */
    const double ratio_crop = (double)w / h, ratio_target = (double)width / height;
    if (ratio_crop > ratio_target) {
        const int diff = (int)((double)w / ratio_target - h);
        grow_axis(&r.y1, &r.y2, diff, image_height);
    } else {
        const int diff = (int)((double)h * ratio_target - w);
        grow_axis(&r.x1, &r.x2, diff, image_width);
    }
    return r;
}

int tsr_crop_region(const tsr_image *mask, int padding, int width, int height, tsr_rect *out)
{
    tsr_rect box;
    int rc = tsr_mask_bbox(mask, 128, &box);
    if (rc <= 0) {
        *out = box;
        return rc;
    }
    const int W = (int)mask->width, H = (int)mask->height;
    *out = tsr_crop_region_expand(tsr_crop_region_pad(box, padding, W, H), width, height, W, H);
    return 1;
}

int tsr_image_crop(const tsr_image *src, tsr_rect r, tsr_image *dst)
{
    memset(dst, 0, sizeof *dst);
    if (!src || !src->data || r.x1 < 0 || r.y1 < 0 || r.x2 <= r.x1 || r.y2 <= r.y1 ||
        r.x2 > (int)src->width || r.y2 > (int)src->height)
        return tsr_errorf(TSR_ERR_INVALID, "crop: region (%d,%d)-(%d,%d) outside the %ux%u image",
                          r.x1, r.y1, r.x2, r.y2, src ? src->width : 0, src ? src->height : 0);
    TSR_TRY(tsr_image_alloc(dst, (uint32_t)(r.x2 - r.x1), (uint32_t)(r.y2 - r.y1), src->channels));
    const size_t C = src->channels, row = (size_t)(r.x2 - r.x1) * C;
    for (int y = r.y1; y < r.y2; y++)
        memcpy(dst->data + (size_t)(y - r.y1) * row,
               src->data + ((size_t)y * src->width + (size_t)r.x1) * C, row);
    return TSR_OK;
}
