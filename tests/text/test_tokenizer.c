/*
 * tests/text/test_tokenizer.c - the CLIP tokenizer against transformers.
 *
 * Why these cases: the goldens (tools/reference/make_tokenizer_goldens.py)
 * hold CLIPTokenizer's 77-token windows for >= 2,000 generated prompts; each
 * must match exactly.  The folder loader is checked by writing the embedded
 * vocabulary out as vocab.json/merges.txt next to SD 2.x's special-token
 * files (pad "!" as an AddedToken/string) and comparing with the goldens
 * made with that configuration.  Unit cases cover the edges.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "test.h"
#include "text/tokenizer.h"

static cJSON *load_json(const char *rel)
{
    char path[1024];
    size_t size = 0;
    char *buf = tsr_test_read_file(tsr_test_path(rel, path, sizeof path), &size);
    if (!buf) {
        fprintf(stderr, "cannot read %s\n", path);
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(buf, size);
    free(buf);
    return j;
}

static int check_golden(tsr_tokenizer *tok, const char *rel)
{
    cJSON *j = load_json(rel);
    ASSERT_TRUE(j != NULL);
    cJSON *prompts = cJSON_GetObjectItem(j, "prompts");
    cJSON *ids = cJSON_GetObjectItem(j, "ids");
    int pad = cJSON_GetObjectItem(j, "pad")->valueint;
    ASSERT_EQ(pad, tsr_tokenizer_pad(tok));
    int n = cJSON_GetArraySize(prompts), bad = 0;
    ASSERT_EQ(n, cJSON_GetArraySize(ids));
    for (int i = 0; i < n; i++) {
        const char *p = cJSON_GetArrayItem(prompts, i)->valuestring;
        cJSON *want = cJSON_GetArrayItem(ids, i);
        int32_t got[TSR_CLIP_MAX_LENGTH];
        int rc = tsr_tokenizer_encode_window(tok, p, strlen(p), got);
        if (rc < 0) {
            fprintf(stderr, "prompt %d: %s\n", i, tsr_last_error());
            bad++;
            continue;
        }
        int wn = cJSON_GetArraySize(want);
        bool ok = wn <= TSR_CLIP_MAX_LENGTH;
        for (int k = 0; k < TSR_CLIP_MAX_LENGTH && ok; k++)
            ok = got[k] == (k < wn ? cJSON_GetArrayItem(want, k)->valueint : pad);
        if (!ok) {
            if (bad < 10) {
                fprintf(stderr, "prompt %d %s\n  want:", i, cJSON_PrintUnformatted(cJSON_GetArrayItem(prompts, i)));
                for (int k = 0; k < wn; k++)
                    fprintf(stderr, " %d", cJSON_GetArrayItem(want, k)->valueint);
                fprintf(stderr, "\n  got: ");
                for (int k = 0; k < TSR_CLIP_MAX_LENGTH; k++)
                    fprintf(stderr, " %d", got[k]);
                fprintf(stderr, "\n");
            }
            bad++;
        }
    }
    cJSON_Delete(j);
    if (bad)
        TSR_FAIL("%d of %d prompts differ from transformers", bad, n);
    printf("  %d prompts identical to transformers\n", n);
    return 0;
}

static int test_golden_default(void)
{
    tsr_tokenizer *tok = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&tok));
    ASSERT_EQ(tsr_tokenizer_vocab_size(tok), 49408);
    ASSERT_EQ(tsr_tokenizer_bos(tok), 49406);
    ASSERT_EQ(tsr_tokenizer_eos(tok), 49407);
    ASSERT_EQ(tsr_tokenizer_pad(tok), 49407);
    ASSERT_EQ(tsr_tokenizer_comma(tok), 267);
    int rc = check_golden(tok, "text/tok_golden.json");
    tsr_tokenizer_free(tok);
    return rc;
}

/* Write the embedded vocabulary as a tokenizer folder. */
static int write_folder(const char *dir, const char *config_dir)
{
    tsr_tokenizer *tok = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&tok));
    char path[1024];
    cJSON *v = cJSON_CreateObject();
    for (int32_t id = 0; id < tsr_tokenizer_vocab_size(tok); id++)
        cJSON_AddNumberToObject(v, tsr_tokenizer_token(tok, id), id);
    char *s = cJSON_PrintUnformatted(v);
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    fputs(s, f);
    fclose(f);
    free(s);
    cJSON_Delete(v);
    tsr_tokenizer_free(tok);
    /* merges.txt from the embedded text */
    extern const char tsr_bpe_default_merges[];
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    fputs(tsr_bpe_default_merges, f);
    fclose(f);
    const char *names[2] = {"tokenizer_config.json", "special_tokens_map.json"};
    for (int i = 0; config_dir && i < 2; i++) {
        char src[1024], rel[256];
        snprintf(rel, sizeof rel, "%s/%s", config_dir, names[i]);
        size_t size;
        char *buf = tsr_test_read_file(tsr_test_path(rel, src, sizeof src), &size);
        ASSERT_TRUE(buf != NULL);
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        f = fopen(path, "wb");
        ASSERT_TRUE(f != NULL);
        fwrite(buf, 1, size, f);
        fclose(f);
        free(buf);
    }
    return 0;
}

static int test_golden_folder_pad_bang(void)
{
    char dir[] = "/tmp/tsr_tok_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    int rc = write_folder(dir, "text/tok_pad_bang");
    tsr_tokenizer *tok = NULL;
    if (rc == 0) {
        rc = tsr_tokenizer_load(dir, &tok);
        if (rc < 0)
            fprintf(stderr, "load: %s\n", tsr_last_error());
    }
    if (rc == 0) {
        rc = tsr_tokenizer_pad(tok) == 0 ? 0 : 1;
        if (rc == 0)
            rc = check_golden(tok, "text/tok_golden_pad_bang.json");
    }
    tsr_tokenizer_free(tok);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    return rc != 0;
}

static int test_folder_default_specials(void)
{
    /* No config files: transformers' defaults (pad = EOS). */
    char dir[] = "/tmp/tsr_tok_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    int rc = write_folder(dir, NULL);
    tsr_tokenizer *tok = NULL;
    if (rc == 0)
        rc = tsr_tokenizer_load(dir, &tok) < 0;
    if (rc == 0)
        rc = tsr_tokenizer_pad(tok) != 49407 || tsr_tokenizer_bos(tok) != 49406;
    tsr_tokenizer_free(tok);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    return rc != 0;
}

static int window(tsr_tokenizer *tok, const char *s, int32_t *out)
{
    return tsr_tokenizer_encode_window(tok, s, strlen(s), out);
}

static int test_edges(void)
{
    tsr_tokenizer *tok = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&tok));
    int32_t w[TSR_CLIP_MAX_LENGTH];
    /* empty and blank prompts: BOS EOS pad... */
    ASSERT_EQ(window(tok, "", w), 2);
    ASSERT_EQ(w[0], 49406);
    ASSERT_EQ(w[1], 49407);
    ASSERT_EQ(w[76], 49407);
    ASSERT_EQ(window(tok, "   \t\n ", w), 2);
    /* a known prompt */
    ASSERT_EQ(window(tok, "a photo of a cat", w), 7);
    ASSERT_EQ(w[1], 320);
    ASSERT_EQ(w[2], 1125);
    ASSERT_EQ(w[5], 2368);
    /* invalid UTF-8 is a clear error */
    ASSERT_EQ(tsr_tokenizer_encode_window(tok, "a\xff", 2, w), TSR_ERR_INVALID);
    ASSERT_TRUE(strstr(tsr_last_error(), "UTF-8") != NULL);
    ASSERT_EQ(tsr_tokenizer_encode_window(tok, "\xe2\x82", 2, w), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_tokenizer_encode_window(tok, "\xed\xa0\x80", 3, w), TSR_ERR_INVALID);
    /* 10,000 characters: truncated to 75 tokens */
    char *big = malloc(10001);
    ASSERT_TRUE(big != NULL);
    for (int i = 0; i < 10000; i++)
        big[i] = "ab, (c)[d]"[i % 10];
    big[10000] = '\0';
    ASSERT_EQ(window(tok, big, w), 77);
    tsr_ids ids = {0};
    ASSERT_OK(tsr_tokenizer_encode(tok, big, 10000, &ids));
    ASSERT_TRUE(ids.n > 75);
    tsr_ids_free(&ids);
    memset(big, 'z', 10000);
    ASSERT_EQ(window(tok, big, w), 77);
    free(big);
    /* a NUL byte inside the text is a control character ftfy removes */
    ASSERT_EQ(tsr_tokenizer_encode_window(tok, "a\0b", 3, w), 3);
    ASSERT_EQ(w[1], 3937); /* "ab</w>", as transformers gives */
    tsr_tokenizer_free(tok);
    return 0;
}

static int test_load_errors(void)
{
    tsr_tokenizer *tok = NULL;
    ASSERT_EQ(tsr_tokenizer_load("/nonexistent/dir", &tok), TSR_ERR_NOT_FOUND);
    ASSERT_TRUE(tok == NULL);
    ASSERT_EQ(tsr_tokenizer_load_default_pad("<notinvocab>", &tok), TSR_ERR_FORMAT);
    ASSERT_TRUE(strstr(tsr_last_error(), "pad_token") != NULL);
    ASSERT_OK(tsr_tokenizer_load_default_pad("!", &tok));
    ASSERT_EQ(tsr_tokenizer_pad(tok), 0);
    tsr_tokenizer_free(tok);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"golden_default", test_golden_default},
    {"golden_folder_pad_bang", test_golden_folder_pad_bang},
    {"folder_default_specials", test_folder_default_specials},
    {"edges", test_edges},
    {"load_errors", test_load_errors},
};
TSR_TEST_TABLE_MAIN(tests)
