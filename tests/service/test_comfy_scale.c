/*
 * tests/service/test_comfy_scale.c - ComfyUI's ImageScale / ImageScaleBy
 * (service/api/comfy/comfy_scale.c) against torch and Pillow run the way
 * ComfyUI's nodes run them (tools/reference/make_comfy_scale_goldens.py,
 * tests/data/comfy/comfy_scale.json).
 *
 * What is checked, case by case (nearest-exact, bilinear, area, bicubic,
 * lanczos; up and down; crop center; 0 = from the other side; ImageScaleBy):
 * - the output size, exactly (Python's round, the crop's arithmetic);
 * - every float within 2e-6 of torch's (torch vectorises and may fuse
 *   multiply-adds, so a last bit may differ; nearest-exact and lanczos must
 *   be exact);
 * - the 8-bit image SaveImage writes (clip(255 x), truncated) and the one
 *   VAEEncode's pixels get (rounded) equal those of torch's floats, except
 *   where torch's 255 x lies within 1e-3 of the rounding edge (there a
 *   last-bit difference may flip it: at most 1 apart, and few of them).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "comfy.h"
#include "json.h"
#include "tessera.h"
#include "test.h"

static cJSON *load_goldens(void)
{
    char path[1024];
    size_t n = 0;
    char *txt = tsr_test_read_file(tsr_test_path("comfy/comfy_scale.json", path, sizeof path), &n);
    if (!txt)
        return NULL;
    char err[128];
    cJSON *o = svc_json_parse(txt, n, err, sizeof err);
    free(txt);
    return o;
}

static uint8_t source_px(int x, int y, int c)
{
    return (uint8_t)((37 * x + 91 * y + 53 * c + 11) % 256);
}

static int check_case(const cJSON *cs, const uint8_t *rgb, const float *in, int w, int h,
                      int *edges)
{
    const char *node = cJSON_GetObjectItem(cs, "node")->valuestring;
    const char *method = cJSON_GetObjectItem(cs, "method")->valuestring;
    comfy_scale op = {0};
    int m = comfy_scale_method_of(method);
    ASSERT_TRUE(m >= 0);
    op.method = (comfy_scale_method)m;
    if (strcmp(node, "ImageScaleBy") == 0) {
        op.scale_by = cJSON_GetObjectItem(cs, "scale_by")->valuedouble;
    } else {
        op.width = (int)cJSON_GetObjectItem(cs, "width")->valuedouble;
        op.height = (int)cJSON_GetObjectItem(cs, "height")->valuedouble;
        op.crop_center = strcmp(cJSON_GetObjectItem(cs, "crop")->valuestring, "center") == 0;
    }
    const int ow = (int)cJSON_GetObjectItem(cs, "out_width")->valuedouble;
    const int oh = (int)cJSON_GetObjectItem(cs, "out_height")->valuedouble;
    const char *b64 = cJSON_GetObjectItem(cs, "pixels")->valuestring;
    uint8_t *raw = NULL;
    size_t rlen = 0;
    char err[256];
    ASSERT_TRUE(svc_base64_decode(b64, strlen(b64), &raw, &rlen, err, sizeof err));
    ASSERT_EQ((long long)rlen, (long long)ow * oh * 3 * 4);
    float *want = malloc(rlen);
    memcpy(want, raw, rlen); /* little-endian float32, as x86 and arm64 keep them */
    free(raw);

    float *got = NULL;
    int gw = 0, gh = 0;
    ASSERT_OK(comfy_scale_apply(in, w, h, 3, &op, &got, &gw, &gh, err, sizeof err));
    if (gw != ow || gh != oh)
        TSR_FAIL("%s %s: %dx%d, torch %dx%d", node, method, gw, gh, ow, oh);
    const bool exact = op.method == CS_NEAREST_EXACT || op.method == CS_LANCZOS;
    double worst = 0;
    int same = 0;
    for (int i = 0; i < ow * oh * 3; i++) {
        double d = fabs((double)got[i] - want[i]);
        worst = d > worst ? d : worst;
        same += got[i] == want[i];
    }
    if (worst > (exact ? 0 : 2e-6))
        TSR_FAIL("%s %s %dx%d: max |diff| %.3g against torch", node, method, ow, oh, worst);
    /* the 8-bit images, from the RGB bytes (comfy_scale_rgb) */
    for (int save = 0; save < 2; save++) {
        uint8_t *px = NULL;
        ASSERT_OK(comfy_scale_rgb(rgb, w, h, &op, 1, save == 1, &px, &gw, &gh, err, sizeof err));
        for (int i = 0; i < ow * oh * 3; i++) {
            float v = 255.0f * want[i];
            v = v < 0 ? 0 : v > 255 ? 255 : v;
            const int ref = save ? (int)v : (int)nearbyintf(v);
            const double edge = save ? v - floor(v) : fabs(v - floor(v) - 0.5);
            const bool near_edge = save ? (edge < 1e-3 || edge > 1 - 1e-3) : edge < 1e-3;
            if (px[i] == ref)
                continue;
            if (!near_edge || abs(px[i] - ref) > 1)
                TSR_FAIL("%s %s %s: byte %d is %d, torch's %d (255x = %.6f)", node, method,
                         save ? "SaveImage" : "VAEEncode", i, px[i], ref, (double)v);
            (*edges)++;
        }
        free(px);
    }
    printf("  %-12s %-13s %2dx%-2d -> %2dx%-2d  max |diff| %.2g, %d of %d bit-equal\n", node,
           method, w, h, ow, oh, worst, same, ow * oh * 3);
    free(got);
    free(want);
    return 0;
}

static int test_goldens(void)
{
    cJSON *g = load_goldens();
    ASSERT_TRUE(g != NULL);
    const int w = (int)cJSON_GetObjectItem(g, "width")->valuedouble;
    const int h = (int)cJSON_GetObjectItem(g, "height")->valuedouble;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    float *in = malloc((size_t)w * h * 3 * sizeof *in);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                rgb[(y * w + x) * 3 + c] = source_px(x, y, c);
                in[(y * w + x) * 3 + c] = (float)source_px(x, y, c) / 255.0f;
            }
    int n = 0, edges = 0;
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(g, "cases")) {
        if (check_case(cs, rgb, in, w, h, &edges) != 0)
            return 1;
        n++;
    }
    printf("  %d cases; %d bytes at a rounding edge differ by 1\n", n, edges);
    ASSERT_TRUE(n >= 14);
    ASSERT_TRUE(edges <= 8);
    free(rgb);
    free(in);
    cJSON_Delete(g);
    return 0;
}

/* The nodes' size rules: ImageScale's 0, ImageScaleBy's round (ties to
 * even, as Python's), and the bound. */
static int test_sizes(void)
{
    int w, h;
    comfy_scale a = {.method = CS_BILINEAR, .width = 0, .height = 100};
    ASSERT_TRUE(comfy_scale_size(&a, 64, 48, &w, &h));
    ASSERT_EQ(w, 133); /* round(64 * 100 / 48 = 133.33) */
    ASSERT_EQ(h, 100);
    comfy_scale b = {.method = CS_AREA, .scale_by = 0.5};
    ASSERT_TRUE(comfy_scale_size(&b, 5, 7, &w, &h));
    ASSERT_EQ(w, 2); /* round(2.5) = 2: ties to even */
    ASSERT_EQ(h, 4); /* round(3.5) = 4 */
    comfy_scale c = {.method = CS_LANCZOS, .scale_by = 8};
    ASSERT_TRUE(!comfy_scale_size(&c, 1024, 64, &w, &h)); /* 8192 > COMFY_SCALE_MAX */
    comfy_scale d = {.method = CS_AREA, .scale_by = 0.01};
    ASSERT_TRUE(!comfy_scale_size(&d, 40, 40, &w, &h)); /* round(0.4) = 0 */
    comfy_scale e = {.method = CS_BICUBIC};
    ASSERT_TRUE(comfy_scale_size(&e, 30, 20, &w, &h)); /* 0 and 0: as is */
    ASSERT_EQ(w, 30);
    ASSERT_EQ(h, 20);
    ASSERT_EQ(comfy_scale_method_of("bislerp"), -1);
    ASSERT_EQ(comfy_scale_method_of("area"), CS_AREA);
    return 0;
}

/* A chain of two ops keeps floats between them (ComfyUI passes its IMAGE
 * on): nearest-exact 2x up then area 2x down gives the source back exactly. */
static int test_chain(void)
{
    uint8_t rgb[6 * 4 * 3];
    for (int i = 0; i < (int)sizeof rgb; i++)
        rgb[i] = (uint8_t)(i * 29 + 7);
    comfy_scale ops[2] = {{.method = CS_NEAREST_EXACT, .scale_by = 2},
                          {.method = CS_AREA, .width = 6, .height = 4}};
    uint8_t *out = NULL;
    int w, h;
    char err[128];
    ASSERT_OK(comfy_scale_rgb(rgb, 6, 4, ops, 2, true, &out, &w, &h, err, sizeof err));
    ASSERT_EQ(w, 6);
    ASSERT_EQ(h, 4);
    ASSERT_TRUE(memcmp(out, rgb, sizeof rgb) == 0);
    free(out);
    comfy_scale big = {.method = CS_BILINEAR, .width = 5000, .height = 8};
    ASSERT_TRUE(comfy_scale_rgb(rgb, 6, 4, &big, 1, true, &out, &w, &h, err, sizeof err) < 0);
    ASSERT_TRUE(strstr(err, "1..4096") != NULL);
    return 0;
}

static const tsr_test_entry k_tests[] = {
    {"goldens", test_goldens},
    {"sizes", test_sizes},
    {"chain", test_chain},
};

TSR_TEST_TABLE_MAIN(k_tests)
