/*
 * tests/textenc/test_clip.c - CLIP text encoders of each family against
 * transformers: last hidden state, penultimate (with and without the final
 * layer norm), pooled output and projected text embeddings, relative error
 * 1e-4 in f32.  The encoders are tiny random models with random layer-norm
 * affines, so every weight matters to the result.
 */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ref_folder: where reference_<component>.safetensors is (NULL: folder). */
static int fixture_open(fixture *f, const char *folder, const char *ref_folder, tsr_component comp)
{
    char path[512], ref[512];
    memset(f, 0, sizeof *f);
    ASSERT_OK(tsr_backend_open("cpu", 0, &f->be));
    /* folder: under the test data, or an absolute path */
    ASSERT_OK(tsr_model_open(folder[0] == '/' ? folder : tsr_test_path(folder, path, sizeof path),
                             &f->model));
    ASSERT_TRUE(tsr_model_has(f->model, comp));
    ASSERT_OK(tsr_weights_load(f->model, comp, f->be, &f->weights));
    const tsr_textenc_desc *cfg =
        tsr_model_textenc_desc(f->model, comp == TSR_COMP_TEXT_ENCODER_2 ? 1 : 0);
    ASSERT_TRUE(cfg != NULL);
    ASSERT_OK(tsr_clip_create(cfg, f->weights, f->be, &f->clip));
    snprintf(ref, sizeof ref, "%s/reference_%s.safetensors", ref_folder ? ref_folder : folder,
             tsr_component_name(comp));
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

static int check_encoder_ref(const char *folder, const char *ref_folder, tsr_component comp,
                             bool projected)
{
    fixture f;
    if (fixture_open(&f, folder, ref_folder, comp))
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

static int check_encoder(const char *folder, tsr_component comp, bool projected)
{
    return check_encoder_ref(folder, NULL, comp, projected);
}

static int test_sd1(void) { return check_encoder("textenc/sd1", TSR_COMP_TEXT_ENCODER, false); }
static int test_sd2(void) { return check_encoder("textenc/sd2", TSR_COMP_TEXT_ENCODER, false); }
static int test_sdxl1(void) { return check_encoder("textenc/sdxl", TSR_COMP_TEXT_ENCODER, false); }
static int test_sdxl2(void) { return check_encoder("textenc/sdxl", TSR_COMP_TEXT_ENCODER_2, true); }

static int copy_file(const char *from, const char *to)
{
    size_t n = 0;
    void *b = tsr_test_read_file(from, &n);
    FILE *f = b ? fopen(to, "wb") : NULL;
    int rc = f && fwrite(b, 1, n, f) == n ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(b);
    return rc;
}

/* dir/text_encoder_2: SDXL's tiny CLIPTextModelWithProjection with the
 * "text_model." level taken off its tensor names. */
static int write_unprefixed_te2(const char *dir)
{
    char src[512], p[1024];
    snprintf(p, sizeof p, "%s/model_index.json", dir);
    FILE *f = fopen(p, "wb");
    ASSERT_TRUE(f != NULL);
    fputs("{\"text_encoder_2\": [\"transformers\", \"CLIPTextModelWithProjection\"]}\n", f);
    ASSERT_EQ(fclose(f), 0);
    snprintf(p, sizeof p, "%s/text_encoder_2", dir);
    ASSERT_EQ(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/text_encoder_2/config.json", dir);
    ASSERT_EQ(copy_file(tsr_test_path("textenc/sdxl/text_encoder_2/config.json", src, sizeof src), p),
              0);
    tsr_safetensors *st = NULL;
    ASSERT_OK(tsr_st_open(tsr_test_path("textenc/sdxl/text_encoder_2/model.safetensors", src,
                                        sizeof src),
                          &st));
    const size_t n = tsr_st_count(st);
    tsr_st_write_entry *w = calloc(n, sizeof *w);
    ASSERT_TRUE(w != NULL);
    for (size_t i = 0; i < n; i++) {
        const tsr_st_entry *e = tsr_st_entry_at(st, i);
        const char *name = e->name;
        if (strncmp(name, "text_model.", 11) == 0)
            name += 11;
        w[i] = (tsr_st_write_entry){name, e->dtype, e->ndim, {0}, tsr_st_data(st, e)};
        memcpy(w[i].shape, e->shape, sizeof w[i].shape);
    }
    snprintf(p, sizeof p, "%s/text_encoder_2/model.safetensors", dir);
    const int rc = tsr_st_write(p, w, n, NULL);
    free(w);
    tsr_st_close(st);
    ASSERT_OK(rc);
    return 0;
}

/* transformers 5 writes CLIPTextModel without the "text_model." level
 * (tests/data/textenc/sdxl_tf5, saved by transformers 5 itself: see
 * tools/reference/make_tf5_text_encoders.py): the same weights give the same
 * outputs.  Likewise CLIPTextModelWithProjection spelled without it. */
static int test_tf5_layout(void)
{
    if (check_encoder_ref("textenc/sdxl_tf5", "textenc/sdxl", TSR_COMP_TEXT_ENCODER, false))
        return 1;
    char dir[] = "/tmp/tsr_te2_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    int rc = write_unprefixed_te2(dir);
    if (rc == 0)
        rc = check_encoder_ref(dir, "textenc/sdxl", TSR_COMP_TEXT_ENCODER_2, true);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    return rc;
}

static int test_bad_inputs(void)
{
    fixture f;
    if (fixture_open(&f, "textenc/sd1", NULL, TSR_COMP_TEXT_ENCODER))
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
    {"tf5_layout", test_tf5_layout},
    {"bad_inputs", test_bad_inputs},
};

TSR_TEST_TABLE_MAIN(tests)
