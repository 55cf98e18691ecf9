/*
 * tests/text/test_prompt.c - the A1111 prompt syntax against a Python
 * reimplementation of parse_prompt_attention / tokenize_line
 * (tools/reference/make_tokenizer_goldens.py), plus the edge cases issue 3
 * names: empty prompt, only spaces, only syntax, unbalanced brackets,
 * 10,000 characters.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "core/error.h"
#include "test.h"
#include "text/prompt.h"

static int check_record(tsr_tokenizer *tok, cJSON *rec, int idx)
{
    const char *p = cJSON_GetObjectItem(rec, "p")->valuestring;
    size_t len = strlen(p);
    if (cJSON_IsTrue(cJSON_GetObjectItem(rec, "error"))) {
        tsr_prompt_tokens t;
        int rc = tsr_prompt_tokenize(tok, p, len, NULL, &t);
        if (rc != TSR_ERR_INVALID)
            TSR_FAIL("record %d %s: want TSR_ERR_INVALID, got %d", idx, p, rc);
        return 0;
    }
    /* parse: segments and weights */
    tsr_prompt_parsed parsed;
    ASSERT_OK(tsr_prompt_parse(p, len, &parsed));
    cJSON *want = cJSON_GetObjectItem(rec, "parse");
    int ok = (int)parsed.n == cJSON_GetArraySize(want);
    for (int i = 0; ok && i < (int)parsed.n; i++) {
        cJSON *w = cJSON_GetArrayItem(want, i);
        ok = strcmp(parsed.seg[i].text, cJSON_GetArrayItem(w, 0)->valuestring) == 0 &&
             parsed.seg[i].weight == cJSON_GetArrayItem(w, 1)->valuedouble;
    }
    if (!ok) {
        fprintf(stderr, "record %d %s: parse differs; got", idx, p);
        for (size_t i = 0; i < parsed.n; i++)
            fprintf(stderr, " [\"%s\", %.17g]", parsed.seg[i].text, parsed.seg[i].weight);
        fprintf(stderr, "\n  want %s\n", cJSON_PrintUnformatted(want));
    }
    tsr_prompt_parsed_free(&parsed);
    if (!ok)
        return 1;
    /* chunks */
    tsr_prompt_tokens t;
    ASSERT_OK(tsr_prompt_tokenize(tok, p, len, NULL, &t));
    cJSON *ids = cJSON_GetObjectItem(rec, "ids"), *ws = cJSON_GetObjectItem(rec, "w");
    int pad = tsr_tokenizer_pad(tok);
    ok = t.n_chunks == cJSON_GetArraySize(ids);
    for (int c = 0; ok && c < t.n_chunks; c++) {
        cJSON *ci = cJSON_GetArrayItem(ids, c), *cw = cJSON_GetArrayItem(ws, c);
        int n = cJSON_GetArraySize(ci);
        float wexp[TSR_CLIP_MAX_LENGTH];
        int k = 0;
        cJSON *run;
        cJSON_ArrayForEach(run, cw)
        {
            double v = cJSON_GetArrayItem(run, 0)->valuedouble;
            int cnt = cJSON_GetArrayItem(run, 1)->valueint;
            for (int r = 0; r < cnt && k < TSR_CLIP_MAX_LENGTH; r++)
                wexp[k++] = (float)v;
        }
        while (k < TSR_CLIP_MAX_LENGTH)
            wexp[k++] = 1.0f;
        for (int i = 0; ok && i < TSR_CLIP_MAX_LENGTH; i++) {
            int want_id = i < n ? cJSON_GetArrayItem(ci, i)->valueint : pad;
            ok = t.ids[c * TSR_CLIP_MAX_LENGTH + i] == want_id &&
                 fabsf(t.weights[c * TSR_CLIP_MAX_LENGTH + i] - wexp[i]) <= 1e-6f * fabsf(wexp[i]);
            if (!ok)
                fprintf(stderr, "record %d %s: chunk %d pos %d: id %d w %.9g, want %d w %.9g\n",
                        idx, p, c, i, t.ids[c * TSR_CLIP_MAX_LENGTH + i],
                        t.weights[c * TSR_CLIP_MAX_LENGTH + i], want_id, wexp[i]);
        }
    }
    if (!ok && t.n_chunks != cJSON_GetArraySize(ids))
        fprintf(stderr, "record %d %s: %d chunks, want %d\n", idx, p, t.n_chunks,
                cJSON_GetArraySize(ids));
    tsr_prompt_tokens_free(&t);
    return ok ? 0 : 1;
}

static int check_golden(const char *rel, tsr_tokenizer_mode mode)
{
    char path[1024];
    size_t size = 0;
    char *buf = tsr_test_read_file(tsr_test_path(rel, path, sizeof path), &size);
    ASSERT_TRUE(buf != NULL);
    cJSON *j = cJSON_ParseWithLength(buf, size);
    free(buf);
    ASSERT_TRUE(j != NULL);
    tsr_tokenizer *tok = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&tok));
    tsr_tokenizer_set_mode(tok, mode);
    cJSON *recs = cJSON_GetObjectItem(j, "records");
    int n = cJSON_GetArraySize(recs), bad = 0;
    for (int i = 0; i < n; i++)
        bad += check_record(tok, cJSON_GetArrayItem(recs, i), i) != 0;
    tsr_tokenizer_free(tok);
    cJSON_Delete(j);
    if (bad)
        TSR_FAIL("%d of %d prompts differ from the A1111 reference", bad, n);
    printf("  %d prompts identical to the A1111 reference\n", n);
    return 0;
}

/* a1111 mode: ids from transformers 4.57.1 slow + ftfy. */
static int test_golden(void)
{
    return check_golden("text/prompt_golden.json", TSR_TOKENIZER_A1111);
}

/* default mode: the same syntax prompts chunked with transformers 5's ids. */
static int test_golden_tf5(void)
{
    return check_golden("text/prompt_golden_tf5.json", TSR_TOKENIZER_DEFAULT);
}

static int tokenize(tsr_tokenizer *tok, const char *s, tsr_prompt_tokens *t)
{
    return tsr_prompt_tokenize(tok, s, strlen(s), NULL, t);
}

static int test_edges(void)
{
    tsr_tokenizer *tok = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&tok));
    tsr_prompt_tokens t;
    /* empty / spaces / only syntax: one window BOS EOS PAD... */
    const char *empties[] = {"", "    ", "()", "[[]]", "(((:1.5)))", "\\", "BREAK"};
    for (size_t i = 0; i < sizeof empties / sizeof *empties; i++) {
        ASSERT_OK(tokenize(tok, empties[i], &t));
        ASSERT_EQ(t.n_chunks, strcmp(empties[i], "BREAK") == 0 ? 1 : 1);
        ASSERT_EQ(t.ids[0], 49406);
        ASSERT_EQ(t.ids[1], 49407);
        ASSERT_EQ(t.ids[76], 49407);
        tsr_prompt_tokens_free(&t);
    }
    /* emphasis */
    ASSERT_OK(tokenize(tok, "a (cat:1.5) [dog] ((fox))", &t));
    ASSERT_EQ(t.n_chunks, 1);
    ASSERT_EQ(t.ids[1], 320);
    ASSERT_NEAR(t.weights[1], 1.0, 0);
    ASSERT_EQ(t.ids[2], 2368);
    ASSERT_NEAR(t.weights[2], 1.5, 1e-7);
    ASSERT_NEAR(t.weights[3], 1 / 1.1, 1e-7);
    ASSERT_NEAR(t.weights[4], 1.21, 1e-6);
    tsr_prompt_tokens_free(&t);
    /* unbalanced: "(a" closes at the end, ")" alone is text */
    ASSERT_OK(tokenize(tok, "(a", &t));
    ASSERT_NEAR(t.weights[1], 1.1, 1e-7);
    tsr_prompt_tokens_free(&t);
    ASSERT_OK(tokenize(tok, "a)", &t));
    ASSERT_EQ(t.ids[2], 264); /* ")</w>" */
    tsr_prompt_tokens_free(&t);
    /* BREAK forces a new window */
    ASSERT_OK(tokenize(tok, "a BREAK b", &t));
    ASSERT_EQ(t.n_chunks, 2);
    ASSERT_EQ(t.ids[1], 320);
    ASSERT_EQ(t.ids[77 + 1], 321);
    /* padding a batch to a common length */
    ASSERT_OK(tsr_prompt_tokens_pad_chunks(&t, tok, 3));
    ASSERT_EQ(t.n_chunks, 3);
    ASSERT_EQ(t.ids[154], 49406);
    ASSERT_EQ(t.ids[155], 49407);
    tsr_prompt_tokens_free(&t);
    /* a bad weight is a clear error */
    ASSERT_EQ(tokenize(tok, "(a:1.2.3)", &t), TSR_ERR_INVALID);
    ASSERT_TRUE(strstr(tsr_last_error(), "1.2.3") != NULL);
    /* 10,000 characters of mixed syntax: defined chunks, no crash */
    char *big = malloc(10001);
    ASSERT_TRUE(big != NULL);
    for (int i = 0; i < 10000; i++)
        big[i] = "a, (b:1.2) [c] \\( BREAK d"[i % 25];
    big[10000] = '\0';
    ASSERT_OK(tokenize(tok, big, &t));
    ASSERT_TRUE(t.n_chunks > 10);
    for (int c = 0; c < t.n_chunks; c++)
        ASSERT_EQ(t.ids[c * 77], 49406);
    tsr_prompt_tokens_free(&t);
    tsr_prompt_options o;
    tsr_prompt_options_init(&o);
    o.max_chunks = 4;
    ASSERT_EQ(tsr_prompt_tokenize(tok, big, 10000, &o, &t), TSR_ERR_RANGE);
    memset(big, '(', 10000);
    ASSERT_OK(tokenize(tok, big, &t));
    ASSERT_EQ(t.n_chunks, 1);
    tsr_prompt_tokens_free(&t);
    free(big);
    /* plain prompt = CLIPTokenizer window */
    int32_t w[77];
    const char *plain = "a photo of an astronaut riding a horse on mars, highly detailed";
    ASSERT_OK(tokenize(tok, plain, &t));
    ASSERT_TRUE(tsr_tokenizer_encode_window(tok, plain, strlen(plain), w) > 0);
    for (int i = 0; i < 77; i++) {
        ASSERT_EQ(t.ids[i], w[i]);
        ASSERT_NEAR(t.weights[i], 1.0, 0);
    }
    tsr_prompt_tokens_free(&t);
    tsr_tokenizer_free(tok);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"golden", test_golden},
    {"golden_tf5", test_golden_tf5},
    {"edges", test_edges},
};
TSR_TEST_TABLE_MAIN(tests)
