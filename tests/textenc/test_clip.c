/*
 * tests/textenc/test_clip.c - CLIP text encoders of each family against
 * transformers: last hidden state, penultimate (with and without the final
 * layer norm), pooled output and projected text embeddings, relative error
 * 1e-4 in f32.  The encoders are tiny random models with random layer-norm
 * affines, so every weight matters to the result.
 */
#include <stdlib.h>

#include "backend/backend.h"
#include "model/model.h"
#include "core/safetensors.h"
#include "test.h"
#include "text/clip.h"

#define TOL 1e-4

typedef struct fixture {
    tsr_backend *be;
    tsr_model *model;
    tsr_weights *weights;
    tsr_clip *clip;
    tsr_safetensors *ref;
} fixture;

static void fixture_free(fixture *f)
{
    tsr_clip_free(f->clip);
    tsr_weights_free(f->weights);
    tsr_model_close(f->model);
    tsr_st_close(f->ref);
    tsr_backend_destroy(f->be);
}

static int fixture_open(fixture *f, const char *folder, tsr_component comp)
{
    char path[512], ref[512];
    memset(f, 0, sizeof *f);
    ASSERT_OK(tsr_backend_open("cpu", 0, &f->be));
    ASSERT_OK(tsr_model_open(tsr_test_path(folder, path, sizeof path), &f->model));
    ASSERT_TRUE(tsr_model_has(f->model, comp));
    ASSERT_OK(tsr_weights_load(f->model, comp, f->be, &f->weights));
    const tsr_textenc_desc *cfg =
        tsr_model_textenc_desc(f->model, comp == TSR_COMP_TEXT_ENCODER_2 ? 1 : 0);
    ASSERT_TRUE(cfg != NULL);
    ASSERT_OK(tsr_clip_create(cfg, f->weights, f->be, &f->clip));
    snprintf(ref, sizeof ref, "%s/reference_%s.safetensors", folder, tsr_component_name(comp));
    ASSERT_OK(tsr_st_open(tsr_test_path(ref, path, sizeof path), &f->ref));
    return 0;
}

static const float *ref_f32(const tsr_safetensors *st, const char *name, size_t *n)
{
    const tsr_st_entry *e = tsr_st_find(st, name);
    if (!e || e->dtype != TSR_ST_F32)
        return NULL;
    *n = (size_t)tsr_st_numel(e);
    return tsr_st_data(st, e);
}

static int check_encoder(const char *folder, tsr_component comp, bool projected)
{
    fixture f;
    if (fixture_open(&f, folder, comp))
        return 1;
    const tsr_st_entry *ids_e = tsr_st_find(f.ref, "ids");
    ASSERT_TRUE(ids_e && ids_e->dtype == TSR_ST_I32 && ids_e->ndim == 2);
    const int B = (int)ids_e->shape[0], L = (int)ids_e->shape[1];
    const int32_t *ids = tsr_st_data(f.ref, ids_e);
    const tsr_textenc_desc *cfg = tsr_clip_get_config(f.clip);
    const size_t D = (size_t)cfg->hidden_size;
    float *hidden = malloc((size_t)B * L * D * sizeof(float));
    float *pooled = malloc((size_t)B * D * sizeof(float));
    float *proj = malloc((size_t)B * (cfg->projection_dim + 1) * sizeof(float));
    ASSERT_TRUE(hidden && pooled && proj);

    static const struct {
        const char *ref;
        tsr_clip_output o;
    } cases[] = {
        {"last_hidden_state", {1, true}},
        {"penultimate", {2, false}},
        {"penultimate_normed", {2, true}},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !failed; i++) {
        size_t n;
        const float *want = ref_f32(f.ref, cases[i].ref, &n);
        if (!want || n != (size_t)B * L * D)
            TSR_FAIL("reference %s missing or mis-sized", cases[i].ref);
        bool with_pool = i == 0;
        int rc = tsr_clip_encode(f.clip, ids, B, L, &cases[i].o, hidden, with_pool ? pooled : NULL,
                                 with_pool && projected ? proj : NULL);
        if (rc)
            TSR_FAIL("encode: %s", tsr_last_error());
        failed |= tsr_test_check_close(cases[i].ref, hidden, want, n, TOL);
        if (with_pool) {
            const float *pw = ref_f32(f.ref, "pooled", &n);
            ASSERT_TRUE(pw && n == (size_t)B * D);
            failed |= tsr_test_check_close("pooled", pooled, pw, n, TOL);
            if (projected) {
                const float *tw = ref_f32(f.ref, "text_embeds", &n);
                ASSERT_TRUE(tw && n == (size_t)B * cfg->projection_dim);
                failed |= tsr_test_check_close("text_embeds", proj, tw, n, TOL);
            }
        }
    }
    /* a second call with a smaller batch reuses the planned workspace */
    if (!failed) {
        size_t n;
        const float *want = ref_f32(f.ref, "last_hidden_state", &n);
        const tsr_clip_output o = {1, true};
        ASSERT_OK(tsr_clip_encode(f.clip, ids + L, 1, L, &o, hidden, NULL, NULL));
        failed |= tsr_test_check_close("row 1 alone", hidden, want + (size_t)L * D, (size_t)L * D,
                                       TOL);
    }
    free(hidden);
    free(pooled);
    free(proj);
    fixture_free(&f);
    return failed;
}

static int test_sd1(void) { return check_encoder("textenc/sd1", TSR_COMP_TEXT_ENCODER, false); }
static int test_sd2(void) { return check_encoder("textenc/sd2", TSR_COMP_TEXT_ENCODER, false); }
static int test_sdxl1(void) { return check_encoder("textenc/sdxl", TSR_COMP_TEXT_ENCODER, false); }
static int test_sdxl2(void) { return check_encoder("textenc/sdxl", TSR_COMP_TEXT_ENCODER_2, true); }

static int test_bad_inputs(void)
{
    fixture f;
    if (fixture_open(&f, "textenc/sd1", TSR_COMP_TEXT_ENCODER))
        return 1;
    int32_t ids[78] = {0};
    float out[78 * 32], proj[64];
    const tsr_clip_output o = {1, true}, bad_skip = {5, true}; /* 3 layers: 1..4 */
    ASSERT_EQ(tsr_clip_encode(f.clip, ids, 1, 78, &o, out, NULL, NULL), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_clip_encode(f.clip, ids, 0, 77, &o, out, NULL, NULL), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_clip_encode(f.clip, ids, 1, 77, &bad_skip, out, NULL, NULL), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_clip_encode(f.clip, ids, 1, 77, &o, out, NULL, proj), TSR_ERR_INVALID);
    ids[5] = 1000; /* vocabulary is 1000 */
    ASSERT_EQ(tsr_clip_encode(f.clip, ids, 1, 77, &o, out, NULL, NULL), TSR_ERR_RANGE);
    ids[5] = -1;
    ASSERT_EQ(tsr_clip_encode(f.clip, ids, 1, 77, &o, out, NULL, NULL), TSR_ERR_RANGE);
    fixture_free(&f);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"sd1_clip_l", test_sd1},
    {"sd2_openclip_h", test_sd2},
    {"sdxl_clip_l", test_sdxl1},
    {"sdxl_bigg", test_sdxl2},
    {"bad_inputs", test_bad_inputs},
};

TSR_TEST_TABLE_MAIN(tests)
