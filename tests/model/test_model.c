/*
 * tests/model/test_model.c - opening models the way people have them.
 *
 * The tiny models under tests/data/models/ were written by
 * tools/reference/make_tiny_models.py with diffusers, together with LDM
 * single files whose mapping diffusers' own converters verified, and
 * expected.json (family, prediction, tensor and parameter counts).  Here
 * Tessera must agree with all of it, refuse pickles and broken folders with
 * clear errors, load weights in the documented layout, and round-trip
 * `tessera convert` without changing a single byte of any tensor.
 */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/json.h"
#include "model/ldm_names.h"
#include "model/model.h"
#include "model/model_config.h"
#include "core/safetensors.h"
#include "test.h"

static const char *data(const char *rel)
{
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    return tsr_test_path(rel, buf[k], sizeof buf[k]);
}

static int write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(bytes, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

static int copy_file(const char *from, const char *to)
{
    size_t n = 0;
    void *b = tsr_test_read_file(from, &n);
    if (!b)
        return -1;
    int rc = write_file(to, b, n);
    free(b);
    return rc;
}

static char *tmpdir(void)
{
    static char t[64];
    snprintf(t, sizeof t, "/tmp/tsr_model_XXXXXX");
    return mkdtemp(t);
}

static int test_open_folders(void)
{
    cJSON *exp = NULL;
    ASSERT_OK(tsr_json_load_file(data("models/expected.json"), &exp));
    const cJSON *it = NULL;
    int n = 0;
    cJSON_ArrayForEach(it, exp)
    {
        char rel[256];
        snprintf(rel, sizeof rel, "models/%s", it->string);
        tsr_model *m = NULL;
        ASSERT_OK(tsr_model_open(data(rel), &m));
        ASSERT_STR_EQ(tsr_family_name(tsr_model_family(m)),
                      cJSON_GetObjectItem(it, "family")->valuestring);
        ASSERT_EQ(tsr_model_is_inpainting(m), cJSON_IsTrue(cJSON_GetObjectItem(it, "inpainting")));
        ASSERT_EQ(tsr_model_is_refiner(m), 0);
        bool v = strcmp(cJSON_GetObjectItem(it, "prediction")->valuestring, "v_prediction") == 0;
        ASSERT_EQ(tsr_model_prediction(m), v ? TSR_PREDICTION_V : TSR_PREDICTION_EPSILON);
        ASSERT_EQ(tsr_model_prediction_assumed(m), 0);
        const cJSON *comps = cJSON_GetObjectItem(it, "components");
        for (int c = 0; c < TSR_COMP_COUNT; c++) {
            const cJSON *jc = cJSON_GetObjectItem(comps, tsr_component_name((tsr_component)c));
            ASSERT_EQ(tsr_model_has(m, (tsr_component)c), jc != NULL);
            if (!jc)
                continue;
            ASSERT_EQ(tsr_model_tensor_count(m, (tsr_component)c),
                      cJSON_GetObjectItem(jc, "tensors")->valuedouble);
            ASSERT_EQ(tsr_model_param_count(m, (tsr_component)c),
                      cJSON_GetObjectItem(jc, "params")->valuedouble);
        }
        ASSERT_TRUE(tsr_model_tokenizer_dir(m, 0) != NULL);
        ASSERT_TRUE(tsr_model_unet_desc(m) != NULL);
        tsr_model_close(m);
        n++;
    }
    ASSERT_EQ(n, 5); /* sd1, sd1_inpaint, sd1_f8, sd2v, sdxl */
    cJSON_Delete(exp);
    return 0;
}

/* Same components, names, shapes, dtypes and bytes. */
static int same_tensors(const tsr_model *a, const tsr_model *b)
{
    for (int c = 0; c < TSR_COMP_COUNT; c++) {
        tsr_component k = (tsr_component)c;
        ASSERT_EQ(tsr_model_has(a, k), tsr_model_has(b, k));
        ASSERT_EQ(tsr_model_tensor_count(a, k), tsr_model_tensor_count(b, k));
        for (size_t i = 0; i < tsr_model_tensor_count(a, k); i++) {
            const char *na, *nb;
            const tsr_safetensors *fa, *fb;
            const tsr_st_entry *ea, *eb;
            ASSERT_OK(tsr_model_tensor_at(a, k, i, &na, &fa, &ea));
            ASSERT_OK(tsr_model_tensor_at(b, k, i, &nb, &fb, &eb));
            ASSERT_STR_EQ(na, nb);
            ASSERT_EQ(ea->dtype, eb->dtype);
            ASSERT_EQ(ea->ndim, eb->ndim);
            for (int d = 0; d < ea->ndim; d++)
                ASSERT_EQ(ea->shape[d], eb->shape[d]);
            ASSERT_EQ(ea->nbytes, eb->nbytes);
            if (memcmp(tsr_st_data(fa, ea), tsr_st_data(fb, eb), (size_t)ea->nbytes) != 0)
                TSR_FAIL("%s/%s: values differ", tsr_component_name(k), na);
        }
    }
    return 0;
}

static int test_single_matches_folder(void)
{
    static const char *const names[] = {"sd1", "sd2v", "sdxl"};
    for (int i = 0; i < 3; i++) {
        char rel[128], rel2[128];
        snprintf(rel, sizeof rel, "models/%s", names[i]);
        snprintf(rel2, sizeof rel2, "models/%s.safetensors", names[i]);
        tsr_model *f = NULL, *s = NULL;
        ASSERT_OK(tsr_model_open(data(rel), &f));
        ASSERT_OK(tsr_model_open(data(rel2), &s));
        ASSERT_EQ(tsr_model_layout_of(s), TSR_LAYOUT_SINGLE_FILE);
        ASSERT_EQ(tsr_model_family(s), tsr_model_family(f));
        ASSERT_EQ(tsr_model_unrecognised_count(s), 0);
        /* SD2 single files cannot tell v from eps: v, flagged as assumed */
        ASSERT_EQ(tsr_model_prediction_assumed(s), i == 1);
        ASSERT_EQ(tsr_model_prediction(s), i == 1 ? TSR_PREDICTION_V : TSR_PREDICTION_EPSILON);
        if (same_tensors(f, s))
            TSR_FAIL("%s: single file and folder differ", names[i]);
        /* shape-inferred configs agree with the folder's on what shapes tell */
        const tsr_unet_desc *uf = tsr_model_unet_desc(f), *us = tsr_model_unet_desc(s);
        ASSERT_EQ(us->n_blocks, uf->n_blocks);
        ASSERT_EQ(us->layers_per_block, uf->layers_per_block);
        ASSERT_EQ(us->cross_attention_dim, uf->cross_attention_dim);
        ASSERT_EQ(us->use_linear_projection, uf->use_linear_projection);
        ASSERT_EQ(us->text_time, uf->text_time);
        ASSERT_EQ(us->addition_time_embed_dim, uf->addition_time_embed_dim);
        for (int b = 0; b < uf->n_blocks; b++) {
            ASSERT_EQ(us->block_out_channels[b], uf->block_out_channels[b]);
            ASSERT_EQ(us->down_attn[b], uf->down_attn[b]);
            if (uf->down_attn[b])
                ASSERT_EQ(us->transformer_layers[b], uf->transformer_layers[b]);
        }
        tsr_model_close(f);
        tsr_model_close(s);
    }
    return 0;
}

static int expect_fail(const char *path, int code, const char *needle)
{
    tsr_model *m = NULL;
    int rc = tsr_model_open(path, &m);
    if (rc != code)
        TSR_FAIL("%s: got %d (%s), want %d", path, rc, tsr_last_error(), code);
    ASSERT_TRUE(m == NULL);
    if (needle && !strstr(tsr_last_error(), needle))
        TSR_FAIL("%s: message lacks '%s': %s", path, needle, tsr_last_error());
    return 0;
}

static int test_pickle_refused(void)
{
    char *d = tmpdir();
    ASSERT_TRUE(d);
    char p[256];
    snprintf(p, sizeof p, "%s/model.ckpt", d);
    ASSERT_EQ(write_file(p, "anything", 8), 0);
    if (expect_fail(p, TSR_ERR_UNSAFE, "arbitrary code"))
        return 1;
    snprintf(p, sizeof p, "%s/zip.safetensors", d);
    ASSERT_EQ(write_file(p, "PK\x03\x04rest-of-zip", 16), 0);
    if (expect_fail(p, TSR_ERR_UNSAFE, "save_file"))
        return 1;
    snprintf(p, sizeof p, "%s/raw.safetensors", d);
    ASSERT_EQ(write_file(p, "\x80\x02}q\x00.", 6), 0);
    if (expect_fail(p, TSR_ERR_UNSAFE, "pickle"))
        return 1;
    /* a folder whose component has only pickle weights */
    char q[256];
    snprintf(q, sizeof q, "%s/f", d);
    mkdir(q, 0755);
    snprintf(p, sizeof p, "%s/model_index.json", q);
    const char *idx = "{\"text_encoder\": [\"transformers\", \"CLIPTextModel\"]}";
    ASSERT_EQ(write_file(p, idx, strlen(idx)), 0);
    snprintf(p, sizeof p, "%s/text_encoder", q);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/text_encoder/config.json", q);
    ASSERT_EQ(copy_file(data("models/sd1/text_encoder/config.json"), p), 0);
    snprintf(p, sizeof p, "%s/text_encoder/pytorch_model.bin", q);
    ASSERT_EQ(write_file(p, "PK", 2), 0);
    snprintf(p, sizeof p, "%s/text_encoder/model.bin", q);
    ASSERT_EQ(write_file(p, "PK", 2), 0);
    return expect_fail(q, TSR_ERR_UNSAFE, "arbitrary code");
}

/* A folder with model_index listing a text encoder, built step by step. */
static int make_te_folder(char *dir, size_t size, bool with_dir, bool with_config,
                          const char *config_text, const char *weights_name)
{
    char *d = tmpdir();
    if (!d)
        return -1;
    snprintf(dir, size, "%s", d);
    char p[512];
    snprintf(p, sizeof p, "%s/model_index.json", d);
    const char *idx = "{\"_class_name\": \"X\", \"text_encoder\": [\"transformers\", "
                      "\"CLIPTextModel\"], \"unet\": [null, null]}";
    if (write_file(p, idx, strlen(idx)))
        return -1;
    if (!with_dir)
        return 0;
    snprintf(p, sizeof p, "%s/text_encoder", d);
    mkdir(p, 0755);
    if (with_config) {
        snprintf(p, sizeof p, "%s/text_encoder/config.json", d);
        if (config_text ? write_file(p, config_text, strlen(config_text))
                        : copy_file(data("models/sd1/text_encoder/config.json"), p))
            return -1;
    }
    if (weights_name) {
        snprintf(p, sizeof p, "%s/text_encoder/%s", d, weights_name);
        if (copy_file(data("models/sd1/text_encoder/model.safetensors"), p))
            return -1;
    }
    return 0;
}

static int test_missing_component(void)
{
    char d[256];
    ASSERT_EQ(make_te_folder(d, sizeof d, false, false, NULL, NULL), 0);
    if (expect_fail(d, TSR_ERR_NOT_FOUND, "text_encoder"))
        return 1;
    ASSERT_EQ(make_te_folder(d, sizeof d, true, true, NULL, NULL), 0);
    if (expect_fail(d, TSR_ERR_NOT_FOUND, "no weights"))
        return 1;
    /* no model_index.json at all */
    char *e = tmpdir();
    ASSERT_TRUE(e);
    return expect_fail(e, TSR_ERR_NOT_FOUND, "model_index.json");
}

/* Both spellings of one text-encoder tensor (transformers 4's
 * "text_model.x" and transformers 5's "x") in one folder: refused, naming
 * both. */
static int test_text_encoder_mixed_layout(void)
{
    char d[256], p[512];
    ASSERT_EQ(make_te_folder(d, sizeof d, true, true, NULL, NULL), 0);
    const float v[2] = {1, 2};
    const tsr_st_write_entry w[] = {
        {"final_layer_norm.weight", TSR_ST_F32, 1, {2}, v},
        {"text_model.final_layer_norm.weight", TSR_ST_F32, 1, {2}, v},
    };
    snprintf(p, sizeof p, "%s/text_encoder/model.safetensors", d);
    ASSERT_OK(tsr_st_write(p, w, 2, NULL));
    return expect_fail(d, TSR_ERR_FORMAT, "'final_layer_norm.weight'");
}

static int test_missing_config(void)
{
    char d[256];
    ASSERT_EQ(make_te_folder(d, sizeof d, true, false, NULL, "model.safetensors"), 0);
    return expect_fail(d, TSR_ERR_NOT_FOUND, "config.json");
}

static int test_corrupt_config(void)
{
    char d[256];
    ASSERT_EQ(make_te_folder(d, sizeof d, true, true, "{\"hidden_size\": 16,", "model.safetensors"),
              0);
    if (expect_fail(d, TSR_ERR_FORMAT, "config.json"))
        return 1;
    ASSERT_EQ(make_te_folder(d, sizeof d, true, true, "{\"num_hidden_layers\": 1e9}",
                             "model.safetensors"),
              0);
    if (expect_fail(d, TSR_ERR_RANGE, "num_hidden_layers"))
        return 1;
    ASSERT_EQ(make_te_folder(d, sizeof d, true, true, "{\"hidden_act\": \"relu\"}",
                             "model.safetensors"),
              0);
    if (expect_fail(d, TSR_ERR_UNSUPPORTED, "relu"))
        return 1;
    /* config parsers directly: array lengths against the block count */
    cJSON *j = cJSON_Parse("{\"block_out_channels\": [32, 64], \"down_block_types\": "
                           "[\"DownBlock2D\"], \"norm_num_groups\": 8}");
    tsr_unet_desc u;
    ASSERT_EQ(tsr_unet_desc_parse(j, "unet", &u), TSR_ERR_FORMAT);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"block_out_channels\": [30], \"norm_num_groups\": 8, "
                    "\"down_block_types\": [\"DownBlock2D\"], \"up_block_types\": [\"UpBlock2D\"]}");
    ASSERT_EQ(tsr_unet_desc_parse(j, "unet", &u), TSR_ERR_RANGE);
    cJSON_Delete(j);
    return 0;
}

static int test_fp16_variant(void)
{
    char d[256], p[512];
    ASSERT_EQ(make_te_folder(d, sizeof d, true, true, NULL, "model.fp16.safetensors"), 0);
    tsr_model *m = NULL;
    ASSERT_OK(tsr_model_open(d, &m));
    ASSERT_EQ(tsr_model_tensor_count(m, TSR_COMP_TEXT_ENCODER), 36);
    const tsr_safetensors *f;
    ASSERT_OK(tsr_model_tensor_at(m, TSR_COMP_TEXT_ENCODER, 0, NULL, &f, NULL));
    ASSERT_TRUE(strstr(tsr_st_path(f), "model.fp16.safetensors") != NULL);
    ASSERT_EQ(tsr_model_has(m, TSR_COMP_UNET), 0); /* [null, null] in model_index */
    tsr_model_close(m);
    /* both present: the plain name wins */
    snprintf(p, sizeof p, "%s/text_encoder/model.safetensors", d);
    ASSERT_EQ(copy_file(data("models/sd1/text_encoder/model.safetensors"), p), 0);
    ASSERT_OK(tsr_model_open(d, &m));
    ASSERT_OK(tsr_model_tensor_at(m, TSR_COMP_TEXT_ENCODER, 0, NULL, &f, NULL));
    ASSERT_TRUE(strstr(tsr_st_path(f), "model.fp16") == NULL);
    tsr_model_close(m);
    return 0;
}

static int test_weights_load(void)
{
    tsr_backend *be = NULL;
    tsr_model *m = NULL;
    tsr_weights *w = NULL;
    ASSERT_OK(tsr_backend_open("cpu", 1, &be));
    ASSERT_OK(tsr_model_open(data("models/sd1.safetensors"), &m));
    ASSERT_OK(tsr_weights_load(m, TSR_COMP_VAE, be, &w));
    const tsr_tensor *t = NULL;
    /* 1x1 conv in the LDM file, linear [C, C] internally */
    ASSERT_OK(tsr_weights_get(w, "decoder.mid_block.attentions.0.to_q.weight", &t));
    ASSERT_EQ(t->ndim, 2);
    ASSERT_EQ(t->ne[0], 16);
    ASSERT_EQ(t->ne[1], 16);
    /* conv weights OIHW -> OHWI, values follow */
    ASSERT_OK(tsr_weights_get(w, "encoder.conv_in.weight", &t));
    ASSERT_EQ(t->ndim, 4);
    ASSERT_EQ(t->dtype, TSR_F32);
    int64_t O = t->ne[0], H = t->ne[1], W = t->ne[2], I = t->ne[3];
    ASSERT_EQ(O, 8);
    ASSERT_EQ(H, 3);
    ASSERT_EQ(I, 3);
    const tsr_safetensors *f;
    const tsr_st_entry *e;
    ASSERT_OK(tsr_model_tensor_find(m, TSR_COMP_VAE, "encoder.conv_in.weight", &f, &e));
    const float *src = tsr_st_data(f, e);
    const float *dst = t->data;
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < I; i++)
            for (int64_t y = 0; y < H; y++)
                for (int64_t x = 0; x < W; x++)
                    ASSERT_EQ(dst[((o * H + y) * W + x) * I + i] == src[((o * I + i) * H + y) * W + x], 1);
    int rc = tsr_weights_get(w, "encoder.no_such.weight", &t);
    ASSERT_EQ(rc, TSR_ERR_NOT_FOUND);
    ASSERT_TRUE(strstr(tsr_last_error(), "encoder.no_such.weight") != NULL);
    ASSERT_OK(tsr_weights_getf(w, &t, "decoder.up_blocks.%d.resnets.%d.conv1.bias", 1, 1));
    ASSERT_TRUE(tsr_weights_bytes(w) >= 43711 * 4);
    tsr_weights_free(w);
    /* SDXL text_encoder_2: split q/k/v and transposed projection load */
    tsr_model_close(m);
    ASSERT_OK(tsr_model_open(data("models/sdxl.safetensors"), &m));
    ASSERT_OK(tsr_weights_load(m, TSR_COMP_TEXT_ENCODER_2, be, &w));
    ASSERT_OK(tsr_weights_get(w, "text_projection.weight", &t));
    ASSERT_EQ(t->ne[0], 12);
    ASSERT_EQ(t->ne[1], 16);
    ASSERT_OK(tsr_weights_get(w, "text_model.encoder.layers.2.self_attn.v_proj.bias", &t));
    ASSERT_EQ(t->ne[0], 16);
    tsr_weights_free(w);
    tsr_model_close(m);
    tsr_backend_destroy(be);
    return 0;
}

static int run(const char *cmd)
{
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

/* Weights follow the backend's weight dtype: f32 on disk -> f16 on the
 * cpu-f16 variant (rounded as tsr_f32_to_f16, conv weights permuted), f16
 * on disk copied as is onto it, and widened exactly onto the f32 CPU. */
static int test_weights_load_f16(void)
{
    const char *bin = getenv("TSR_BIN");
    ASSERT_TRUE(bin != NULL);
    char *d = tmpdir(), cmd[2048], f16dir[512];
    ASSERT_TRUE(d);
    snprintf(f16dir, sizeof f16dir, "%s/sd1_f16", d);
    snprintf(cmd, sizeof cmd, "%s convert --to diffusers --dtype f16 %s %s >/dev/null", bin,
             data("models/sd1.safetensors"), f16dir);
    ASSERT_EQ(run(cmd), 0);
    tsr_backend *cpu = NULL, *h = NULL;
    ASSERT_OK(tsr_backend_open("cpu", 1, &cpu));
    ASSERT_OK(tsr_backend_open("cpu-f16", 1, &h));
    ASSERT_EQ(tsr_backend_weight_dtype(h), TSR_F16);
    tsr_model *m32 = NULL, *m16 = NULL;
    ASSERT_OK(tsr_model_open(data("models/sd1.safetensors"), &m32));
    ASSERT_OK(tsr_model_open(f16dir, &m16));
    tsr_weights *w[4] = {0}; /* f32 file on cpu, f32 file on f16, f16 file on f16, f16 file on cpu */
    ASSERT_OK(tsr_weights_load(m32, TSR_COMP_VAE, cpu, &w[0]));
    ASSERT_OK(tsr_weights_load(m32, TSR_COMP_VAE, h, &w[1]));
    ASSERT_OK(tsr_weights_load(m16, TSR_COMP_VAE, h, &w[2]));
    ASSERT_OK(tsr_weights_load(m16, TSR_COMP_VAE, cpu, &w[3]));
    ASSERT_EQ(tsr_weights_bytes(w[1]) < tsr_weights_bytes(w[0]) * 6 / 10, 1);
    ASSERT_EQ(tsr_weights_count(w[0]), tsr_weights_count(w[2]));
    for (size_t i = 0; i < tsr_weights_count(w[0]); i++) {
        const char *name;
        const tsr_tensor *t[4];
        ASSERT_OK(tsr_weights_at(w[0], i, &name, &t[0]));
        for (int k = 1; k < 4; k++)
            ASSERT_OK(tsr_weights_get(w[k], name, &t[k]));
        ASSERT_EQ(t[1]->dtype, TSR_F16);
        ASSERT_EQ(t[2]->dtype, TSR_F16);
        ASSERT_EQ(t[3]->dtype, TSR_F32);
        const int64_t n = tsr_tensor_numel(t[0]);
        for (int k = 1; k < 4; k++)
            ASSERT_TRUE(tsr_tensor_same_shape(t[0], t[k]));
        const float *f = t[0]->data, *f3 = t[3]->data;
        const uint16_t *a = t[1]->data, *b = t[2]->data;
        for (int64_t j = 0; j < n; j++) {
            if (a[j] != tsr_f32_to_f16(f[j]) || b[j] != a[j] || f3[j] != tsr_f16_to_f32(a[j]))
                TSR_FAIL("%s[%lld]: %g -> f16 %04x / %04x, widened %g", name, (long long)j, f[j],
                         a[j], b[j], f3[j]);
        }
    }
    for (int k = 0; k < 4; k++)
        tsr_weights_free(w[k]);
    tsr_model_close(m32);
    tsr_model_close(m16);
    tsr_backend_destroy(cpu);
    tsr_backend_destroy(h);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    return run(cmd);
}

static int test_convert_round_trip(void)
{
    const char *bin = getenv("TSR_BIN");
    ASSERT_TRUE(bin != NULL);
    char *d = tmpdir();
    ASSERT_TRUE(d);
    static const char *const names[] = {"sd1", "sd1_inpaint", "sd2v", "sdxl"};
    for (int i = 0; i < 4; i++) {
        char rel[128], cmd[4096];
        snprintf(rel, sizeof rel, "models/%s", names[i]);
        const char *src = data(rel);
        snprintf(cmd, sizeof cmd,
                 "'%s' convert '%s' '%s/%s.safetensors' && '%s' convert '%s/%s.safetensors' "
                 "'%s/%s' && '%s' inspect --tensors '%s' > '%s/a.txt' && '%s' inspect --tensors "
                 "'%s/%s.safetensors' > '%s/b.txt' && '%s' inspect --tensors '%s/%s' > '%s/c.txt' "
                 "&& cmp '%s/a.txt' '%s/b.txt' && cmp '%s/a.txt' '%s/c.txt'",
                 bin, src, d, names[i], bin, d, names[i], d, names[i], bin, src, d, bin, d,
                 names[i], d, bin, d, names[i], d, d, d, d, d);
        ASSERT_EQ(run(cmd), 0);
        size_t n = 0;
        char p[512];
        snprintf(p, sizeof p, "%s/a.txt", d);
        void *txt = tsr_test_read_file(p, &n);
        ASSERT_TRUE(txt && n > 1000); /* hundreds of tensors listed, not an empty file */
        free(txt);
        tsr_model *a = NULL, *b = NULL;
        snprintf(p, sizeof p, "%s/%s", d, names[i]);
        ASSERT_OK(tsr_model_open(src, &a));
        ASSERT_OK(tsr_model_open(p, &b));
        if (same_tensors(a, b))
            return 1;
        ASSERT_EQ(tsr_model_family(a), tsr_model_family(b));
        ASSERT_EQ(tsr_model_prediction(a), tsr_model_prediction(b));
        ASSERT_EQ(tsr_model_is_inpainting(a), tsr_model_is_inpainting(b));
        /* configs survive exactly through the single file's metadata */
        const tsr_unet_desc *ua = tsr_model_unet_desc(a), *ub = tsr_model_unet_desc(b);
        ASSERT_EQ(memcmp(ua->heads, ub->heads, sizeof ua->heads), 0);
        ASSERT_EQ(ua->norm_num_groups, ub->norm_num_groups);
        tsr_model_close(a);
        tsr_model_close(b);
    }
    return 0;
}

static int test_ldm_names_reverse(void)
{
    static const char *const names[] = {"models/sd1", "models/sd2v", "models/sdxl"};
    for (int i = 0; i < 3; i++) {
        tsr_model *m = NULL;
        ASSERT_OK(tsr_model_open(data(names[i]), &m));
        tsr_ldm_map map;
        tsr_ldm_map_init(&map);
        ASSERT_OK(tsr_ldm_unet_rules(tsr_model_unet_desc(m), &map));
        for (size_t k = 0; k < tsr_model_tensor_count(m, TSR_COMP_UNET); k++) {
            const char *name;
            ASSERT_OK(tsr_model_tensor_at(m, TSR_COMP_UNET, k, &name, NULL, NULL));
            char ldm[TSR_LDM_NAME_MAX];
            tsr_ldm_xform xf;
            int part;
            if (!tsr_ldm_from_internal(&map, name, ldm, sizeof ldm, &xf, &part))
                TSR_FAIL("%s: no LDM name", name);
            tsr_ldm_target t[3];
            bool ignored;
            ASSERT_EQ(tsr_ldm_to_internal(&map, ldm, t, &ignored), 1);
            ASSERT_STR_EQ(t[0].name, name);
        }
        /* a name no rule knows */
        tsr_ldm_target t[3];
        bool ignored;
        ASSERT_EQ(tsr_ldm_to_internal(&map, "input_blocks.99.0.in_layers.0.weight", t, &ignored), 0);
        ASSERT_EQ(ignored, 0);
        tsr_ldm_map_free(&map);
        tsr_model_close(m);
    }
    return 0;
}

/* UNet options the SD families leave at their defaults: the defaults (and
 * nulls, as diffusers writes them) parse; anything else is refused by name
 * rather than misread. */
static int test_unet_config_variants(void)
{
    static const char *base = "{\"block_out_channels\": [32, 64], \"norm_num_groups\": 8, "
                              "\"attention_head_dim\": 2, \"cross_attention_dim\": 16";
    static const struct {
        const char *extra;
        int want;
    } cases[] = {
        {"", TSR_OK},
        {", \"conv_in_kernel\": 3, \"resnet_time_scale_shift\": \"default\", "
         "\"mid_block_scale_factor\": 1, \"dual_cross_attention\": false, "
         "\"reverse_transformer_layers_per_block\": null, \"timestep_post_act\": null",
         TSR_OK},
        {", \"conv_in_kernel\": 5", TSR_ERR_UNSUPPORTED},
        {", \"resnet_time_scale_shift\": \"scale_shift\"", TSR_ERR_UNSUPPORTED},
        {", \"mid_block_scale_factor\": 1.5", TSR_ERR_UNSUPPORTED},
        {", \"only_cross_attention\": true", TSR_ERR_UNSUPPORTED},
        {", \"reverse_transformer_layers_per_block\": [[1], [2]]", TSR_ERR_UNSUPPORTED},
        {", \"time_embedding_type\": \"fourier\"", TSR_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s}", base, cases[i].extra);
        cJSON *j = cJSON_Parse(text);
        ASSERT_TRUE(j != NULL);
        tsr_unet_desc d;
        int rc = tsr_unet_desc_parse(j, "unet/config.json", &d);
        cJSON_Delete(j);
        if (rc != cases[i].want)
            TSR_FAIL("case %zu (%s): got %d, want %d (%s)", i, cases[i].extra, rc, cases[i].want,
                     tsr_last_error());
    }
    return 0;
}

static const tsr_test_entry tests[] = {
    {"unet_config_variants", test_unet_config_variants},
    {"open_folders", test_open_folders},
    {"single_matches_folder", test_single_matches_folder},
    {"pickle_refused", test_pickle_refused},
    {"missing_component", test_missing_component},
    {"missing_config", test_missing_config},
    {"corrupt_config", test_corrupt_config},
    {"fp16_variant", test_fp16_variant},
    {"weights_load", test_weights_load},
    {"weights_load_f16", test_weights_load_f16},
    {"convert_round_trip", test_convert_round_trip},
    {"ldm_names_reverse", test_ldm_names_reverse},
    {"text_encoder_mixed_layout", test_text_encoder_mixed_layout},
};

TSR_TEST_TABLE_MAIN(tests)
