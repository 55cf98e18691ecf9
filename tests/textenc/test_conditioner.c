/*
 * tests/textenc/test_conditioner.c - prompt -> UNet conditioning for each
 * family against what diffusers' pipelines compute (encode_prompt), plus
 * long prompts (several 77-token windows), A1111 emphasis, clip skip, the
 * cached empty prompt, and prompts that must not crash.
 */
#include <stdlib.h>

#include "backend/backend.h"
#include "model/model.h"
#include "core/safetensors.h"
#include "test.h"
#include "text/conditioner.h"

#define TOL 1e-4
#define PROMPT "a red cat sitting on a blue chair"
#define LONG_WORDS "a small red circle on a blue square"

typedef struct fixture {
    tsr_backend *be;
    tsr_model *model;
    tsr_text_cond *cond;
    tsr_safetensors *ref;
} fixture;

static void fixture_free(fixture *f)
{
    tsr_text_cond_free(f->cond);
    tsr_model_close(f->model);
    tsr_st_close(f->ref);
    tsr_backend_destroy(f->be);
}

static int fixture_open(fixture *f, const char *name)
{
    char rel[256], path[512];
    memset(f, 0, sizeof *f);
    ASSERT_OK(tsr_backend_open("cpu", 0, &f->be));
    snprintf(rel, sizeof rel, "models/%s", name);
    ASSERT_OK(tsr_model_open(tsr_test_path(rel, path, sizeof path), &f->model));
    ASSERT_OK(tsr_text_cond_open(f->model, f->be, &f->cond));
    snprintf(rel, sizeof rel, "conditioner/%s.safetensors", name);
    ASSERT_OK(tsr_st_open(tsr_test_path(rel, path, sizeof path), &f->ref));
    return 0;
}

static int check(const fixture *f, const char *ref, const float *got, size_t n)
{
    const tsr_st_entry *e = tsr_st_find(f->ref, ref);
    if (!e || tsr_st_numel(e) != n) {
        fprintf(stderr, "reference %s missing or has %llu values, want %zu\n", ref,
                e ? (unsigned long long)tsr_st_numel(e) : 0ull, n);
        return 1;
    }
    return tsr_test_check_close(ref, got, tsr_st_data(f->ref, e), n, TOL);
}

static int check_family(const char *name)
{
    fixture f;
    if (fixture_open(&f, name))
        return 1;
    const int D = tsr_text_cond_dim(f.cond), P = tsr_text_cond_pooled_dim(f.cond);
    char long_prompt[1024] = "";
    for (int i = 0; i < 12; i++)
        snprintf(long_prompt + strlen(long_prompt), sizeof long_prompt - strlen(long_prompt),
                 "%s%s", i ? " " : "", LONG_WORDS);
    const char *prompts[] = {PROMPT, "", long_prompt, "a (red:1.5) cat"};
    tsr_text_embedding e[4];
    ASSERT_OK(tsr_text_cond_encode(f.cond, prompts, 4, 1, e));
    int failed = 0;
    ASSERT_EQ(e[0].n_tokens, 77);
    ASSERT_EQ(e[0].dim, D);
    failed |= check(&f, "plain", e[0].context, 77 * (size_t)D);
    failed |= check(&f, "negative", e[1].context, 77 * (size_t)D);
    ASSERT_EQ(e[2].n_tokens, 385);
    failed |= check(&f, "long", e[2].context, 385 * (size_t)D);
    failed |= check(&f, "weighted", e[3].context, 77 * (size_t)D);
    if (P) {
        failed |= check(&f, "plain_pooled", e[0].pooled, (size_t)P);
        failed |= check(&f, "negative_pooled", e[1].pooled, (size_t)P);
    } else {
        ASSERT_TRUE(e[0].pooled == NULL);
    }
    for (int i = 0; i < 4; i++)
        tsr_text_embedding_free(&e[i]);

    /* A1111 clip skip 2 == diffusers clip_skip=1 */
    ASSERT_OK(tsr_text_cond_encode(f.cond, prompts, 1, 2, e));
    failed |= check(&f, "clip_skip", e[0].context, 77 * (size_t)D);
    if (P)
        failed |= check(&f, "clip_skip_pooled", e[0].pooled, (size_t)P);
    tsr_text_embedding_free(&e[0]);
    fixture_free(&f);
    return failed;
}

static int test_sd1(void) { return check_family("sd1"); }
static int test_sd2v(void) { return check_family("sd2v"); }
static int test_sdxl(void) { return check_family("sdxl"); }

static int test_empty_cache_and_pad(void)
{
    fixture f;
    if (fixture_open(&f, "sd1"))
        return 1;
    const int D = tsr_text_cond_dim(f.cond);
    const tsr_text_embedding *a, *b;
    ASSERT_OK(tsr_text_cond_empty(f.cond, 1, &a));
    ASSERT_OK(tsr_text_cond_empty(f.cond, 1, &b));
    ASSERT_TRUE(a == b); /* cached, not recomputed */
    int failed = check(&f, "negative", a->context, 77 * (size_t)D);

    const char *p = PROMPT;
    tsr_text_embedding e;
    ASSERT_OK(tsr_text_cond_encode(f.cond, &p, 1, 1, &e));
    ASSERT_OK(tsr_text_cond_pad(f.cond, 1, &e, 3 * 77));
    ASSERT_EQ(e.n_tokens, 3 * 77);
    failed |= check(&f, "plain", e.context, 77 * (size_t)D);
    failed |= tsr_test_check_close("pad window", e.context + 2 * 77 * (size_t)D, a->context,
                                   77 * (size_t)D, 0);
    ASSERT_EQ(tsr_text_cond_pad(f.cond, 1, &e, 100), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_text_cond_pad(f.cond, 1, &e, 77), TSR_ERR_INVALID);
    tsr_text_embedding_free(&e);
    fixture_free(&f);
    return failed;
}

static int test_edge_prompts(void)
{
    fixture f;
    if (fixture_open(&f, "sdxl"))
        return 1;
    char *huge = malloc(10001);
    ASSERT_TRUE(huge);
    for (int i = 0; i < 10000; i++)
        huge[i] = "ab (c:1.2) [d] , "[i % 17];
    huge[10000] = '\0';
    const char *ok[] = {"   ", "(((())))", "((unbalanced", "a) b] c(", "\xe7\x8c\xab \xf0\x9f\x90\x88",
                        "BREAK", "a BREAK b"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        tsr_text_embedding e;
        int rc = tsr_text_cond_encode(f.cond, &ok[i], 1, 1, &e);
        if (rc)
            TSR_FAIL("prompt '%s': %s", ok[i], tsr_last_error());
        ASSERT_TRUE(e.n_tokens % 77 == 0 && e.n_tokens >= 77);
        for (size_t k = 0; k < (size_t)e.n_tokens * e.dim; k++)
            ASSERT_TRUE(isfinite(e.context[k]));
        tsr_text_embedding_free(&e);
    }
    /* "a BREAK b" is two windows */
    tsr_text_embedding e;
    const char *brk = "a BREAK b";
    ASSERT_OK(tsr_text_cond_encode(f.cond, &brk, 1, 1, &e));
    ASSERT_EQ(e.n_tokens, 154);
    tsr_text_embedding_free(&e);
    /* 10,000 characters: a defined result or a clear error, never a crash */
    const char *h = huge;
    int rc = tsr_text_cond_encode(f.cond, &h, 1, 1, &e);
    if (rc == TSR_OK)
        tsr_text_embedding_free(&e);
    else
        ASSERT_TRUE(rc == TSR_ERR_RANGE && strstr(tsr_last_error(), "prompt") != NULL);
    free(huge);
    const char *bad_utf8 = "\xff\xfe";
    ASSERT_TRUE(tsr_text_cond_encode(f.cond, &bad_utf8, 1, 1, &e) < 0);
    const char *null_prompt = NULL;
    ASSERT_EQ(tsr_text_cond_encode(f.cond, &null_prompt, 1, 1, &e), TSR_ERR_INVALID);
    const char *p = PROMPT;
    ASSERT_EQ(tsr_text_cond_encode(f.cond, &p, 1, 0, &e), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_text_cond_encode(f.cond, &p, 1, 5, &e), TSR_ERR_INVALID); /* 2 layers: skip <= 3 */
    fixture_free(&f);
    return 0;
}

/* The tokenizer mode reaches every encoder: in a1111 mode ftfy turns
 * curly quotes and HTML entities into ASCII, so the fancy prompt encodes
 * exactly as its ASCII spelling does in the default mode, where it does
 * not (transformers 5 keeps them). */
static int test_tokenizer_modes(void)
{
    fixture f;
    if (fixture_open(&f, "sdxl"))
        return 1;
    const char *fancy = "it\xe2\x80\x99s &amp; \xe2\x80\x9cq\xe2\x80\x9d";
    const char *ascii = "it's & \"q\"";
    tsr_text_embedding dflt, a1111, plain;
    ASSERT_OK(tsr_text_cond_encode(f.cond, &fancy, 1, 1, &dflt));
    ASSERT_OK(tsr_text_cond_encode(f.cond, &ascii, 1, 1, &plain));
    tsr_text_cond_set_tokenizer(f.cond, TSR_TOKENIZER_A1111);
    ASSERT_OK(tsr_text_cond_encode(f.cond, &fancy, 1, 1, &a1111));
    const size_t n = (size_t)plain.n_tokens * plain.dim;
    ASSERT_EQ(a1111.n_tokens, plain.n_tokens);
    int failed = tsr_test_check_close("a1111 fancy vs ascii", a1111.context, plain.context, n, 0);
    failed |= tsr_test_check_close("a1111 pooled", a1111.pooled, plain.pooled,
                                   (size_t)plain.pooled_dim, 0);
    bool differs = dflt.n_tokens != plain.n_tokens;
    for (size_t i = 0; !differs && i < n; i++)
        differs = dflt.context[i] != plain.context[i];
    ASSERT_TRUE(differs);
    /* the empty prompt is the same in both modes, and still cached */
    const tsr_text_embedding *empty;
    ASSERT_OK(tsr_text_cond_empty(f.cond, 1, &empty));
    ASSERT_EQ(empty->n_tokens, 77);
    tsr_text_embedding_free(&dflt);
    tsr_text_embedding_free(&a1111);
    tsr_text_embedding_free(&plain);
    fixture_free(&f);
    return failed;
}

static const tsr_test_entry tests[] = {
    {"sd1", test_sd1},
    {"sd2v", test_sd2v},
    {"sdxl", test_sdxl},
    {"empty_cache_and_pad", test_empty_cache_and_pad},
    {"edge_prompts", test_edge_prompts},
    {"tokenizer_modes", test_tokenizer_modes},
};

TSR_TEST_TABLE_MAIN(tests)
