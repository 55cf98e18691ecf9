/*
 * tests/image/test_resize.c - image/resize.c against Pillow.
 *
 *   pillow_lanczos   every "plain" case of tests/data/image/resize/
 *                    manifest.json: Image.resize(size, LANCZOS, box) on an
 *                    RGB and a gray source (up, down, odd sizes, a box,
 *                    zero-size boxes): equal pixel for pixel
 *   a1111_modes      the "a1111" cases: just-resize, crop-and-resize and
 *                    resize-and-fill to four target shapes: equal
 *   edge_cases       identity (a copy), 1x1 images, bad boxes and names
 *
 * The references were written by tools/reference/make_resize_refs.py with
 * Pillow; the test needs no Python.
 */
#include "test.h"

#include <cJSON.h>
#include <stdlib.h>

#include "image/image.h"
#include "tessera.h"

#define TOLERANCE 0 /* Pillow's integer arithmetic is reproduced exactly */

static cJSON *load_manifest(void)
{
    char path[1024];
    tsr_test_path("image/resize/manifest.json", path, sizeof path);
    size_t n = 0;
    char *text = tsr_test_read_file(path, &n);
    cJSON *m = text ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    return m;
}

static int read_png(const char *name, tsr_image *img)
{
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "image/resize/%s", name);
    ASSERT_OK(tsr_png_read(tsr_test_path(rel, path, sizeof path), 0, img, NULL));
    return 0;
}

static int compare(const char *what, const tsr_image *got, const tsr_image *want)
{
    if (got->width != want->width || got->height != want->height ||
        got->channels != want->channels)
        TSR_FAIL("%s: got %ux%ux%u, want %ux%ux%u", what, got->width, got->height, got->channels,
                 want->width, want->height, want->channels);
    int mx = 0;
    size_t worst = 0;
    for (size_t i = 0; i < tsr_image_bytes(want); i++) {
        int d = abs((int)got->data[i] - (int)want->data[i]);
        if (d > mx)
            mx = d, worst = i;
    }
    printf("%-40s max diff %d\n", what, mx);
    if (mx > TOLERANCE)
        TSR_FAIL("%s: max diff %d at byte %zu (got %d, want %d)", what, mx, worst,
                 got->data[worst], want->data[worst]);
    return 0;
}

static int run_cases(const char *kind)
{
    cJSON *m = load_manifest();
    ASSERT_TRUE(m != NULL);
    int n = 0, fail = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "cases"))
    {
        if (strcmp(cJSON_GetObjectItemCaseSensitive(c, "kind")->valuestring, kind) != 0)
            continue;
        const char *src_name = cJSON_GetObjectItemCaseSensitive(c, "source")->valuestring;
        const char *ref_name = cJSON_GetObjectItemCaseSensitive(c, "reference")->valuestring;
        uint32_t w = (uint32_t)cJSON_GetObjectItemCaseSensitive(c, "width")->valueint;
        uint32_t h = (uint32_t)cJSON_GetObjectItemCaseSensitive(c, "height")->valueint;
        tsr_image src = {0}, ref = {0}, got = {0};
        if (read_png(src_name, &src) || read_png(ref_name, &ref)) {
            fail++;
            continue;
        }
        int rc;
        if (strcmp(kind, "plain") == 0) {
            const cJSON *box = cJSON_GetObjectItemCaseSensitive(c, "box");
            double b[4];
            for (int i = 0; cJSON_IsArray(box) && i < 4; i++)
                b[i] = cJSON_GetArrayItem(box, i)->valuedouble;
            rc = tsr_image_resize_box(&src, w, h, cJSON_IsArray(box) ? b : NULL, &got);
        } else {
            tsr_resize_mode mode;
            ASSERT_OK(tsr_resize_mode_parse(cJSON_GetObjectItemCaseSensitive(c, "mode")->valuestring,
                                            &mode));
            rc = tsr_image_resize_a1111(&src, mode, w, h, &got);
        }
        if (rc != 0) {
            fprintf(stderr, "%s: %s\n", ref_name, tsr_last_error());
            fail++;
        } else if (compare(ref_name, &got, &ref)) {
            fail++;
        }
        n++;
        tsr_image_free(&src);
        tsr_image_free(&ref);
        tsr_image_free(&got);
    }
    cJSON_Delete(m);
    ASSERT_TRUE(n >= 9);
    ASSERT_EQ(fail, 0);
    return 0;
}

static int test_pillow_lanczos(void) { return run_cases("plain"); }
static int test_a1111_modes(void) { return run_cases("a1111"); }

static int test_edge_cases(void)
{
    tsr_image src, out;
    ASSERT_OK(tsr_image_alloc(&src, 3, 2, 3));
    for (size_t i = 0; i < tsr_image_bytes(&src); i++)
        src.data[i] = (uint8_t)(i * 37);
    /* same size, whole box: a copy */
    ASSERT_OK(tsr_image_resize(&src, 3, 2, &out));
    ASSERT_EQ(memcmp(out.data, src.data, tsr_image_bytes(&src)), 0);
    tsr_image_free(&out);
    /* a 1x1 image spreads to a flat one */
    tsr_image one;
    ASSERT_OK(tsr_image_alloc(&one, 1, 1, 1));
    one.data[0] = 200;
    ASSERT_OK(tsr_image_resize_a1111(&one, TSR_RESIZE_FILL, 16, 8, &out));
    for (size_t i = 0; i < tsr_image_bytes(&out); i++)
        ASSERT_EQ(out.data[i], 200);
    tsr_image_free(&out);
    ASSERT_OK(tsr_image_resize_a1111(&one, TSR_RESIZE_CROP, 8, 16, &out));
    ASSERT_EQ(out.data[0], 200);
    tsr_image_free(&out);
    tsr_image_free(&one);
    /* boxes outside the image, zero sizes, names */
    const double bad[4] = {0, 0, 4, 2};
    ASSERT_EQ(tsr_image_resize_box(&src, 3, 2, bad, &out), TSR_ERR_INVALID);
    ASSERT_TRUE(out.data == NULL);
    ASSERT_TRUE(tsr_image_resize(&src, 0, 2, &out) < 0);
    tsr_resize_mode m;
    ASSERT_OK(tsr_resize_mode_parse("Crop and resize", &m));
    ASSERT_EQ(m, TSR_RESIZE_CROP);
    ASSERT_OK(tsr_resize_mode_parse("resize-and-fill", &m));
    ASSERT_EQ(m, TSR_RESIZE_FILL);
    ASSERT_EQ(tsr_resize_mode_parse("stretch", &m), TSR_ERR_INVALID);
    ASSERT_STR_EQ(tsr_resize_mode_name(TSR_RESIZE_JUST), "just-resize");
    tsr_image_free(&src);
    return 0;
}

/* The public API (tessera.h): tsr_image_resample is image/resize.c's
 * Lanczos and Pillow's nearest; tsr_image_png_parameters reads back what
 * tsr_image_encode_png wrote. */
static int test_public_api(void)
{
    uint8_t px[2 * 2 * 3] = {0, 0, 0, 255, 255, 255, 10, 20, 30, 40, 50, 60};
    uint8_t *out = NULL;
    ASSERT_EQ(tsr_image_resample(px, 2, 2, 3, 4, 4, 0, TSR_RESAMPLE_NEAREST, &out), TSR_OK);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++)
            ASSERT_TRUE(memcmp(out + (y * 4 + x) * 3, px + ((y / 2) * 2 + x / 2) * 3, 3) == 0);
    free(out);
    tsr_image src = {2, 2, 3, px}, ref;
    memset(&ref, 0, sizeof ref);
    ASSERT_EQ(tsr_image_resize(&src, 5, 3, &ref), TSR_OK);
    ASSERT_EQ(tsr_image_resample(px, 2, 2, 3, 5, 3, 0, TSR_RESAMPLE_LANCZOS, &out), TSR_OK);
    ASSERT_TRUE(memcmp(out, ref.data, 5 * 3 * 3) == 0);
    free(out);
    tsr_image_free(&ref);
    /* bounded before allocating */
    ASSERT_EQ(tsr_image_resample(px, 2, 2, 3, 100000, 100000, 0, TSR_RESAMPLE_LANCZOS, &out),
              TSR_ERR_INVALID);
    ASSERT_TRUE(out == NULL);
    ASSERT_EQ(tsr_image_resample(px, 2, 2, 3, 8192, 8, 4096, TSR_RESAMPLE_NEAREST, &out),
              TSR_ERR_INVALID);
    uint8_t *png = NULL;
    size_t len = 0;
    char *text = NULL;
    ASSERT_EQ(tsr_image_encode_png(px, 2, 2, "a cat\nSteps: 20", &png, &len), TSR_OK);
    ASSERT_EQ(tsr_image_png_parameters(png, len, &text), TSR_OK);
    ASSERT_STR_EQ(text, "a cat\nSteps: 20");
    free(text);
    free(png);
    ASSERT_EQ(tsr_image_encode_png(px, 2, 2, NULL, &png, &len), TSR_OK);
    ASSERT_EQ(tsr_image_png_parameters(png, len, &text), TSR_OK);
    ASSERT_TRUE(text == NULL);
    free(png);
    ASSERT_TRUE(tsr_image_png_parameters("not a png", 9, &text) != TSR_OK);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"pillow_lanczos", test_pillow_lanczos},
    {"a1111_modes", test_a1111_modes},
    {"edge_cases", test_edge_cases},
    {"public_api", test_public_api},
};

TSR_TEST_TABLE_MAIN(tests)
