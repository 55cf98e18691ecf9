/*
 * tests/model/test_lora.c - LoRA key mapping, loading checks and the cache
 * (model/lora.h), below the pipeline.
 *
 * Why apart from tests/pipeline/test_lora.c: these are the rules a file
 * meets before any image is made - which key spellings map where (kohya's
 * flattened diffusers and LDM names, PEFT's, the older diffusers ones),
 * which are refused by name, and how the cache evicts and pins - and they
 * run in milliseconds on the tiny models' weights.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/safetensors.h"
#include "model/lora.h"
#include "model/model.h"
#include "test.h"

static int t_parse(void)
{
    tsr_lora_key k;
    ASSERT_OK(tsr_lora_parse_key("lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight", &k));
    ASSERT_EQ(k.comp, TSR_COMP_UNET);
    ASSERT_TRUE(k.flat);
    ASSERT_EQ(k.part, TSR_LORA_PART_DOWN);
    ASSERT_STR_EQ(k.module, "down_blocks_0_attentions_0_proj_in");
    ASSERT_OK(tsr_lora_parse_key("lora_te2_text_model_encoder_layers_0_mlp_fc1.alpha", &k));
    ASSERT_EQ(k.comp, TSR_COMP_TEXT_ENCODER_2);
    ASSERT_EQ(k.part, TSR_LORA_PART_ALPHA);
    ASSERT_OK(tsr_lora_parse_key("lora_te_text_model_encoder_layers_0_mlp_fc1.lora_up.weight", &k));
    ASSERT_EQ(k.comp, TSR_COMP_TEXT_ENCODER);
    ASSERT_EQ(k.part, TSR_LORA_PART_UP);
    ASSERT_OK(tsr_lora_parse_key("unet.mid_block.resnets.0.conv1.lora_B.weight", &k));
    ASSERT_EQ(k.comp, TSR_COMP_UNET);
    ASSERT_TRUE(!k.flat);
    ASSERT_STR_EQ(k.module, "mid_block.resnets.0.conv1");
    ASSERT_OK(tsr_lora_parse_key("text_encoder_2.text_model.encoder.layers.1.self_attn.q_proj.lora.down.weight", &k));
    ASSERT_EQ(k.comp, TSR_COMP_TEXT_ENCODER_2);
    ASSERT_STR_EQ(k.module, "text_model.encoder.layers.1.self_attn.q_proj");
    ASSERT_OK(tsr_lora_parse_key(
        "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.processor.to_out_lora.up.weight", &k));
    ASSERT_STR_EQ(k.module, "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0");
    ASSERT_EQ(k.part, TSR_LORA_PART_UP);
    /* refused by name */
    ASSERT_EQ(tsr_lora_parse_key("model.diffusion_model.x.weight", &k), TSR_ERR_NOT_FOUND);
    ASSERT_TRUE(strstr(tsr_last_error(), "model.diffusion_model.x.weight") != NULL);
    ASSERT_EQ(tsr_lora_parse_key("lora_unet_x.weight", &k), TSR_ERR_NOT_FOUND);
    ASSERT_EQ(tsr_lora_parse_key("lora_unet_x.lora_mid.weight", &k), TSR_ERR_UNSUPPORTED);
    ASSERT_EQ(tsr_lora_parse_key("lora_unet_x.hada_w1_a", &k), TSR_ERR_UNSUPPORTED);
    ASSERT_EQ(tsr_lora_parse_key("lora_unet_.lora_down.weight", &k), TSR_ERR_NOT_FOUND);
    return 0;
}

/* A model's UNet weights on the CPU with their LoRA names, and the
 * tsr_lora_model a LoRA file is loaded against. */
typedef struct fixture {
    tsr_model *m;
    tsr_backend *be;
    tsr_weights *w;
    tsr_lora_names *names;
    tsr_lora_model lm;
} fixture;

static int fixture_open(const char *model_rel, fixture *f)
{
    char path[512];
    memset(f, 0, sizeof *f);
    ASSERT_OK(tsr_model_open(tsr_test_path(model_rel, path, sizeof path), &f->m));
    ASSERT_OK(tsr_backend_open("cpu", 1, &f->be));
    ASSERT_OK(tsr_weights_load(f->m, TSR_COMP_UNET, f->be, &f->w));
    const size_t n = tsr_weights_count(f->w);
    const char **nm = malloc(n * sizeof *nm);
    for (size_t i = 0; i < n; i++) {
        const tsr_tensor *t;
        tsr_weights_at(f->w, i, &nm[i], &t);
    }
    ASSERT_OK(tsr_lora_names_build(nm, n, tsr_model_unet_desc(f->m), &f->names));
    free(nm);
    f->lm.backend = f->be;
    f->lm.weights[TSR_COMP_UNET] = f->w;
    f->lm.names[TSR_COMP_UNET] = f->names;
    return 0;
}

static void fixture_close(fixture *f)
{
    tsr_lora_names_free(f->names);
    tsr_weights_free(f->w);
    tsr_backend_destroy(f->be);
    tsr_model_close(f->m);
}

/* kohya's SDXL spelling (LDM names) and SD1's (diffusers names) both find
 * the same weight; PEFT's dotted name too. */
static int t_names(void)
{
    fixture f;
    if (fixture_open("models/sd1", &f))
        return 1;
    tsr_lora_key k;
    ASSERT_OK(tsr_lora_parse_key(
        "lora_unet_down_blocks_0_attentions_1_transformer_blocks_0_attn2_to_k.lora_down.weight", &k));
    const char *a = tsr_lora_names_find(f.names, &k);
    ASSERT_TRUE(a != NULL);
    ASSERT_STR_EQ(a, "down_blocks.0.attentions.1.transformer_blocks.0.attn2.to_k.weight");
    /* LDM: input_blocks.2.1 is down block 0's second attention (2 layers per block) */
    ASSERT_OK(tsr_lora_parse_key(
        "lora_unet_input_blocks_2_1_transformer_blocks_0_attn2_to_k.lora_up.weight", &k));
    const char *b = tsr_lora_names_find(f.names, &k);
    ASSERT_TRUE(b != NULL);
    ASSERT_STR_EQ(b, a);
    ASSERT_OK(tsr_lora_parse_key("lora_unet_input_blocks_1_0_in_layers_2.lora_up.weight", &k));
    ASSERT_STR_EQ(tsr_lora_names_find(f.names, &k) ? tsr_lora_names_find(f.names, &k) : "",
                  "down_blocks.0.resnets.0.conv1.weight");
    ASSERT_OK(tsr_lora_parse_key("unet.down_blocks.0.resnets.0.conv1.lora_A.weight", &k));
    ASSERT_STR_EQ(tsr_lora_names_find(f.names, &k) ? tsr_lora_names_find(f.names, &k) : "",
                  "down_blocks.0.resnets.0.conv1.weight");
    ASSERT_OK(tsr_lora_parse_key("unet.down_blocks.0.resnets.0.conv9.lora_A.weight", &k));
    ASSERT_TRUE(tsr_lora_names_find(f.names, &k) == NULL);
    fixture_close(&f);
    return 0;
}

/* LRU with holds: a held LoRA survives a full cache; an unheld one goes. */
static int t_cache(void)
{
    fixture f;
    if (fixture_open("models/sd1_sharp", &f))
        return 1;
    char dir[512];
    tsr_test_path("lora/loras", dir, sizeof dir);
    tsr_lora_cache *c;
    /* a 1-byte bound holds nothing unheld (k_sd1_attn is a few KB as f32) */
    ASSERT_OK(tsr_lora_cache_create(dir, 1, &f.lm, &c));
    const tsr_lora *a, *a2, *b;
    ASSERT_OK(tsr_lora_cache_acquire(c, "k_sd1_attn", &a));
    ASSERT_OK(tsr_lora_cache_acquire(c, "k_sd1_attn", &a2));
    ASSERT_TRUE(a == a2); /* one load */
    int n;
    size_t bytes;
    tsr_lora_cache_stats(c, &n, &bytes);
    ASSERT_EQ(n, 1);
    ASSERT_TRUE(bytes > 1); /* over the bound: held */
    ASSERT_TRUE(tsr_lora_module_count(a, TSR_COMP_UNET) > 0);
    ASSERT_EQ(tsr_lora_module_count(a, TSR_COMP_TEXT_ENCODER), 0);
    tsr_lora_cache_release(c, a);
    tsr_lora_cache_stats(c, &n, NULL);
    ASSERT_EQ(n, 1); /* still held once */
    tsr_lora_cache_release(c, a2);
    tsr_lora_cache_stats(c, &n, &bytes);
    ASSERT_EQ(n, 0); /* unheld and over the bound: evicted */
    ASSERT_EQ(bytes, 0);
    /* a file with text-encoder keys on a UNet-only model: named */
    ASSERT_TRUE(tsr_lora_cache_acquire(c, "k_sd1", &b) < 0);
    ASSERT_TRUE(strstr(tsr_last_error(), "lora_te_") != NULL);
    tsr_lora_cache_free(c);
    fixture_close(&f);
    return 0;
}

/* Files that do not fit: each refused naming the key. */
static int t_misfit(void)
{
    fixture f;
    if (fixture_open("models/sd1", &f))
        return 1;
    const char *mod = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
    const tsr_tensor *q;
    ASSERT_OK(tsr_weights_get(f.w, "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight",
                              &q));
    const int64_t C = q->ne[1];
    float buf[4096] = {0}, alpha = 0;
    char kd[200], ku[200], ka[200];
    snprintf(kd, sizeof kd, "%s.lora_down.weight", mod);
    snprintf(ku, sizeof ku, "%s.lora_up.weight", mod);
    snprintf(ka, sizeof ka, "%s.alpha", mod);
    char path[] = "/tmp/tsr_lora_misfit_XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    struct {
        int64_t down[2], up[2];
        bool with_up, bad_alpha;
        const char *want;
    } cases[] = {
        {{2, C + 1}, {C, 2}, true, false, kd},  /* down's in is not the weight's */
        {{2, C}, {C, 3}, true, false, ku},      /* up's rank is not down's */
        {{2, C}, {C + 8, 2}, true, false, ku},  /* up's out is not the weight's */
        {{2, C}, {C, 2}, false, false, "no up"}, /* down alone */
        {{2, C}, {C, 2}, true, true, ka},       /* alpha 0 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tsr_st_write_entry e[3] = {
            {kd, TSR_ST_F32, 2, {cases[i].down[0], cases[i].down[1]}, buf},
            {ku, TSR_ST_F32, 2, {cases[i].up[0], cases[i].up[1]}, buf},
            {ka, TSR_ST_F32, 0, {0}, &alpha},
        };
        alpha = cases[i].bad_alpha ? 0.0f : 1.0f;
        size_t n = 0;
        tsr_st_write_entry use[3];
        use[n++] = e[0];
        if (cases[i].with_up)
            use[n++] = e[1];
        use[n++] = e[2];
        ASSERT_OK(tsr_st_write(path, use, n, NULL));
        tsr_lora *l = NULL;
        ASSERT_TRUE(tsr_lora_load(path, &f.lm, &l) < 0);
        printf("case %zu: %s\n", i, tsr_last_error());
        ASSERT_TRUE(strstr(tsr_last_error(), cases[i].want) != NULL);
        ASSERT_TRUE(strstr(tsr_last_error(), "/tmp/") == NULL); /* no server path */
    }
    /* keys that fit nothing: all named in one message, not dropped */
    tsr_st_write_entry odd[4] = {
        {kd, TSR_ST_F32, 2, {2, C}, buf},
        {ku, TSR_ST_F32, 2, {C, 2}, buf},
        {"lora_unet_down_blocks_0_nothing_here.lora_down.weight", TSR_ST_F32, 2, {2, C}, buf},
        {"some_other_key", TSR_ST_F32, 2, {2, C}, buf},
    };
    ASSERT_OK(tsr_st_write(path, odd, 4, NULL));
    tsr_lora *lx = NULL;
    ASSERT_TRUE(tsr_lora_load(path, &f.lm, &lx) < 0);
    printf("unknown keys: %s\n", tsr_last_error());
    ASSERT_TRUE(strstr(tsr_last_error(), "2 keys fit nothing") != NULL);
    ASSERT_TRUE(strstr(tsr_last_error(), "lora_unet_down_blocks_0_nothing_here") != NULL);
    ASSERT_TRUE(strstr(tsr_last_error(), "some_other_key") != NULL);
    /* and a fitting one loads */
    tsr_st_write_entry ok[2] = {{kd, TSR_ST_F32, 2, {2, C}, buf}, {ku, TSR_ST_F32, 2, {C, 2}, buf}};
    ASSERT_OK(tsr_st_write(path, ok, 2, NULL));
    tsr_lora *l = NULL;
    ASSERT_OK(tsr_lora_load(path, &f.lm, &l));
    ASSERT_EQ(tsr_lora_module_count(l, TSR_COMP_UNET), 1);
    tsr_lora_free(l);
    unlink(path);
    fixture_close(&f);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"misfit", t_misfit},
    {"parse", t_parse},
    {"names", t_names},
    {"cache", t_cache},
};

TSR_TEST_TABLE_MAIN(tests)
