/*
 * tests/vae/test_preview.c - latent previews: the linear projection with
 * ComfyUI's published SD 1.5 / SDXL maps against the numbers computed in
 * Python (fitted maps: test_preview_fit.c), and the TAESD decoder (random
 * weights in madebyollin's format, f16) against a PyTorch implementation of
 * the same architecture (tools/reference/make_vae_goldens.py).
 */
#include <stdlib.h>

#include "backend/backend.h"
#include "core/safetensors.h"
#include "test.h"
#include "vae/preview.h"

static const tsr_st_entry *entry(const tsr_safetensors *st, const char *name, tsr_st_dtype dt)
{
    const tsr_st_entry *e = tsr_st_find(st, name);
    return e && e->dtype == dt ? e : NULL;
}

static int check_linear(tsr_family fam, const char *key)
{
    char path[512], name[64];
    tsr_safetensors *st;
    ASSERT_OK(tsr_st_open(tsr_test_path("vae/preview.safetensors", path, sizeof path), &st));
    const tsr_st_entry *le = entry(st, "latents", TSR_ST_F32);
    ASSERT_TRUE(le && le->ndim == 4 && le->shape[3] == 4);
    const int B = (int)le->shape[0], h = (int)le->shape[1], w = (int)le->shape[2];
    snprintf(name, sizeof name, "%s_rgb", key);
    const tsr_st_entry *re = entry(st, name, TSR_ST_F32);
    snprintf(name, sizeof name, "%s_u8", key);
    const tsr_st_entry *ue = entry(st, name, TSR_ST_U8);
    ASSERT_TRUE(re && ue);
    const float *lat = tsr_st_data(st, le), *want = tsr_st_data(st, re);
    const uint8_t *want_u8 = tsr_st_data(st, ue);
    const size_t n = (size_t)h * w * 3;
    float *rgb = malloc(n * sizeof(float));
    uint8_t *u8 = malloc(n);
    ASSERT_TRUE(rgb && u8);
    tsr_preview_linear_map map;
    ASSERT_OK(tsr_preview_published_map(fam, &map));
    ASSERT_EQ(map.channels, 4);
    int failed = 0;
    for (int b = 0; b < B && !failed; b++) {
        ASSERT_OK(tsr_preview_linear(&map, lat + (size_t)b * h * w * 4, h, w, 4, rgb, u8));
        failed |= tsr_test_check_close("rgb", rgb, want + b * n, n, 1e-5);
        for (size_t i = 0; i < n; i++)
            if (abs((int)u8[i] - (int)want_u8[b * n + i]) > 1)
                TSR_FAIL("pixel %zu: %d vs %d", i, u8[i], want_u8[b * n + i]);
    }
    free(rgb);
    free(u8);
    tsr_st_close(st);
    return failed;
}

static int test_sd15(void) { return check_linear(TSR_FAMILY_SD1, "sd15"); }
static int test_sdxl(void) { return check_linear(TSR_FAMILY_SDXL, "sdxl"); }

static int test_taesd(void)
{
    char path[512];
    tsr_backend *be;
    tsr_taesd *t;
    tsr_safetensors *st;
    ASSERT_OK(tsr_backend_open("cpu", 0, &be));
    ASSERT_OK(tsr_taesd_open(tsr_test_path("vae/taesd_random_decoder.safetensors", path, sizeof path),
                             be, &t));
    ASSERT_EQ(tsr_taesd_latent_channels(t), 4);
    ASSERT_OK(tsr_st_open(tsr_test_path("vae/taesd_golden.safetensors", path, sizeof path), &st));
    const tsr_st_entry *le = entry(st, "latents", TSR_ST_F32), *de = entry(st, "decoded", TSR_ST_F32);
    ASSERT_TRUE(le && de && le->ndim == 4 && de->ndim == 4);
    const int h = (int)le->shape[1], w = (int)le->shape[2];
    ASSERT_EQ(de->shape[1], 8 * h);
    const size_t n = (size_t)tsr_st_numel(de);
    float *img = malloc(n * sizeof(float));
    uint8_t *u8 = malloc(n);
    ASSERT_TRUE(img && u8);
    ASSERT_OK(tsr_taesd_decode(t, tsr_st_data(st, le), 1, h, w, img));
    int failed = tsr_test_check_close("taesd", img, tsr_st_data(st, de), n, 1e-4);
    ASSERT_OK(tsr_taesd_preview(t, tsr_st_data(st, le), h, w, u8));
    const float *want = tsr_st_data(st, de);
    for (size_t i = 0; i < n; i++) {
        float v = want[i] < 0 ? 0 : want[i] > 1 ? 1 : want[i];
        if (abs((int)u8[i] - (int)(v * 255.0f)) > 1)
            TSR_FAIL("preview pixel %zu: %d vs %.2f", i, u8[i], v * 255.0f);
    }
    free(img);
    free(u8);
    tsr_st_close(st);
    tsr_taesd_free(t);
    tsr_backend_destroy(be);
    return failed;
}

static int test_bad_inputs(void)
{
    float lat[16] = {0}, rgb[12];
    uint8_t u8[12];
    tsr_preview_linear_map map;
    ASSERT_EQ(tsr_preview_published_map(TSR_FAMILY_UNKNOWN, &map), TSR_ERR_UNSUPPORTED);
    ASSERT_OK(tsr_preview_published_map(TSR_FAMILY_SD1, &map));
    ASSERT_EQ(tsr_preview_linear(&map, lat, 2, 2, 16, rgb, u8), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_preview_linear(&map, lat, 0, 2, 4, rgb, u8), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_preview_linear(&map, NULL, 2, 2, 4, rgb, u8), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_preview_linear(NULL, lat, 2, 2, 4, rgb, u8), TSR_ERR_INVALID);
    map.channels = TSR_PREVIEW_MAX_CH + 1;
    ASSERT_EQ(tsr_preview_linear(&map, lat, 2, 2, 4, rgb, u8), TSR_ERR_INVALID);
    char path[512];
    tsr_backend *be;
    tsr_taesd *t = NULL;
    ASSERT_OK(tsr_backend_open("cpu", 0, &be));
    /* a safetensors file that is not a TAESD decoder */
    ASSERT_EQ(tsr_taesd_open(tsr_test_path("vae/preview.safetensors", path, sizeof path), be, &t),
              TSR_ERR_FORMAT);
    ASSERT_TRUE(t == NULL && strstr(tsr_last_error(), "taesd") != NULL);
    ASSERT_TRUE(tsr_taesd_open(tsr_test_path("vae/missing.safetensors", path, sizeof path), be, &t) <
                0);
    tsr_backend_destroy(be);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"linear_sd15", test_sd15},
    {"linear_sdxl", test_sdxl},
    {"taesd", test_taesd},
    {"bad_inputs", test_bad_inputs},
};

TSR_TEST_TABLE_MAIN(tests)
