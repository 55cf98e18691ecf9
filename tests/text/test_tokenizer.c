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

/* Each prompt of `prompts` against its window in `ids` (padding dropped). */
static int check_prompts(tsr_tokenizer *tok, const cJSON *prompts, const cJSON *ids, int pad)
{
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
    if (bad)
        TSR_FAIL("%d of %d prompts differ from transformers", bad, n);
    printf("  %d prompts identical to transformers\n", n);
    return 0;
}

static int check_golden(tsr_tokenizer *tok, const char *rel)
{
    cJSON *j = load_json(rel);
    ASSERT_TRUE(j != NULL);
    int rc = check_prompts(tok, cJSON_GetObjectItem(j, "prompts"), cJSON_GetObjectItem(j, "ids"),
                           cJSON_GetObjectItem(j, "pad")->valueint);
    cJSON_Delete(j);
    return rc;
}

static int test_golden_default(void)
{
    tsr_tokenizer *tok = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&tok));
    tsr_tokenizer_set_mode(tok, TSR_TOKENIZER_A1111);
    ASSERT_EQ(tsr_tokenizer_vocab_size(tok), 49408);
    ASSERT_EQ(tsr_tokenizer_bos(tok), 49406);
    ASSERT_EQ(tsr_tokenizer_eos(tok), 49407);
    ASSERT_EQ(tsr_tokenizer_pad(tok), 49407);
    ASSERT_EQ(tsr_tokenizer_comma(tok), 267);
    int rc = check_golden(tok, "text/tok_golden.json");
    tsr_tokenizer_free(tok);
    return rc;
}

/* The embedded merges as [a, b] pairs, or "a b" strings. */
static cJSON *embedded_merges(bool strings)
{
    extern const char tsr_bpe_default_merges[];
    cJSON *list = cJSON_CreateArray();
    const char *line = strchr(tsr_bpe_default_merges, '\n') + 1; /* after "#version" */
    while (*line) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        char buf[256];
        if (n > 0 && n < sizeof buf) {
            memcpy(buf, line, n);
            buf[n] = '\0';
            char *sp = strchr(buf, ' ');
            if (strings) {
                cJSON_AddItemToArray(list, cJSON_CreateString(buf));
            } else if (sp) {
                *sp = '\0';
                cJSON *pair = cJSON_CreateArray();
                cJSON_AddItemToArray(pair, cJSON_CreateString(buf));
                cJSON_AddItemToArray(pair, cJSON_CreateString(sp + 1));
                cJSON_AddItemToArray(list, pair);
            }
        }
        line += n + (nl ? 1 : 0);
    }
    return list;
}

static int write_text(const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    fputs(s, f);
    ASSERT_EQ(fclose(f), 0);
    return 0;
}

/* Write the embedded vocabulary as a tokenizer folder with config_dir's
 * JSON files.  A tokenizer.json there is a template without its
 * vocabulary (tools/reference/make_tokenizer_goldens_tf5.py): it gets the
 * embedded vocab and merges ("a b" strings when the template's list holds
 * one), and the folder gets no vocab.json / merges.txt, as transformers 5
 * saves a tokenizer. */
static int write_folder(const char *dir, const char *config_dir)
{
    tsr_tokenizer *tok = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&tok));
    char path[1024];
    cJSON *v = cJSON_CreateObject();
    for (int32_t id = 0; id < tsr_tokenizer_vocab_size(tok); id++)
        cJSON_AddNumberToObject(v, tsr_tokenizer_token(tok, id), id);
    tsr_tokenizer_free(tok);
    cJSON *tj = NULL;
    if (config_dir) {
        char src[1024], rel[256];
        snprintf(rel, sizeof rel, "%s/tokenizer.json", config_dir);
        size_t size;
        char *buf = tsr_test_read_file(tsr_test_path(rel, src, sizeof src), &size);
        if (buf) {
            tj = cJSON_ParseWithLength(buf, size);
            free(buf);
            ASSERT_TRUE(tj != NULL);
        }
    }
    int rc = 0;
    if (tj) {
        cJSON *model = cJSON_GetObjectItem(tj, "model");
        bool strings = cJSON_GetArraySize(cJSON_GetObjectItem(model, "merges")) > 0;
        cJSON_ReplaceItemInObject(model, "vocab", v);
        cJSON_ReplaceItemInObject(model, "merges", embedded_merges(strings));
        char *s = cJSON_PrintUnformatted(tj);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        rc = write_text(path, s);
        free(s);
        cJSON_Delete(tj);
    } else {
        char *s = cJSON_PrintUnformatted(v);
        snprintf(path, sizeof path, "%s/vocab.json", dir);
        rc = write_text(path, s);
        free(s);
        cJSON_Delete(v);
        extern const char tsr_bpe_default_merges[];
        snprintf(path, sizeof path, "%s/merges.txt", dir);
        rc |= write_text(path, tsr_bpe_default_merges);
    }
    if (rc)
        return rc;
    const char *names[2] = {"tokenizer_config.json", "special_tokens_map.json"};
    for (int i = 0; config_dir && i < 2; i++) {
        char src[1024], rel[256];
        snprintf(rel, sizeof rel, "%s/%s", config_dir, names[i]);
        size_t size;
        char *buf = tsr_test_read_file(tsr_test_path(rel, src, sizeof src), &size);
        if (!buf)
            continue; /* a layout may have either file alone */
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "wb");
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
        tsr_tokenizer_set_mode(tok, TSR_TOKENIZER_A1111);
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

/* The default mode against transformers 5 on the same prompts. */
static int test_golden_tf5(void)
{
    tsr_tokenizer *tok = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&tok));
    ASSERT_EQ(tsr_tokenizer_get_mode(tok), TSR_TOKENIZER_DEFAULT);
    ASSERT_EQ(tsr_tokenizer_bos(tok), 49406);
    ASSERT_EQ(tsr_tokenizer_eos(tok), 49407);
    ASSERT_EQ(tsr_tokenizer_pad(tok), 49407);
    int rc = check_golden(tok, "text/tok_golden_tf5.json");
    tsr_tokenizer_free(tok);
    return rc;
}

/* The default mode's reading of tokenizer_config.json and
 * special_tokens_map.json: each layout of tests/data/text/tok_layouts/ next
 * to the embedded vocabulary, against transformers 5's special ids and
 * windows. */
static int test_layouts_tf5(void)
{
    cJSON *j = load_json("text/tok_layouts_tf5.json");
    ASSERT_TRUE(j != NULL);
    const cJSON *layout;
    int failed = 0, n = 0;
    cJSON_ArrayForEach(layout, cJSON_GetObjectItem(j, "layouts"))
    {
        char dir[] = "/tmp/tsr_tok_XXXXXX", rel[256];
        ASSERT_TRUE(mkdtemp(dir) != NULL);
        snprintf(rel, sizeof rel, "text/tok_layouts/%s", layout->string);
        int rc = write_folder(dir, rel);
        tsr_tokenizer *tok = NULL;
        if (rc == 0 && tsr_tokenizer_load(dir, &tok) < 0) {
            fprintf(stderr, "%s: %s\n", layout->string, tsr_last_error());
            rc = 1;
        }
        if (rc == 0) {
            printf("layout %s:\n", layout->string);
            const cJSON *pad = cJSON_GetObjectItem(layout, "pad");
            if (tsr_tokenizer_bos(tok) != cJSON_GetObjectItem(layout, "bos")->valueint ||
                tsr_tokenizer_eos(tok) != cJSON_GetObjectItem(layout, "eos")->valueint) {
                fprintf(stderr, "%s: bos/eos differ\n", layout->string);
                rc = 1;
            } else {
                rc = check_prompts(tok, cJSON_GetObjectItem(layout, "prompts"),
                                   cJSON_GetObjectItem(layout, "ids"), pad->valueint);
            }
        }
        tsr_tokenizer_free(tok);
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", dir);
        failed += rc != 0;
        n++;
    }
    cJSON_Delete(j);
    ASSERT_TRUE(n >= 12);
    if (failed)
        TSR_FAIL("%d of %d layouts differ from transformers 5", failed, n);
    return 0;
}

/* The two modes on the prompts the issue names, and the mode names. */
static int test_modes(void)
{
    tsr_tokenizer *tok = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&tok));
    static const struct {
        const char *text;
        int32_t fast[8], slow[8]; /* content ids (transformers 5 / 4.57.1), -1 ends */
    } cases[] = {
        {"it\xe2\x80\x99s", {585, 728, 503, 338, -1}, {585, 568, -1}},        /* it’s */
        {"&lt;b&gt;", {261, 3333, 282, 321, 261, 4725, 282, -1}, {283, 321, 285, -1}},
        {"a &amp; b", {320, 261, 6259, 282, 321, -1}, {320, 261, 321, -1}},
        {"\xe2\x80\x9cq\xe2\x80\x9d", {728, 506, 336, 728, 507, -1}, {257, 336, 257, -1}}, /* “q” */
        {"\xce\x9f\xce\xa3", {138, 123, 139, 481, -1}, {138, 123, 139, 480, -1}}, /* ΟΣ */
        {"a\x07" "b", {320, 451, 321, -1}, {3937, -1}},
        {"<|ENDOFTEXT|>", {27, 347, 40786, 4160, 91, 285, -1}, {49407, -1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int m = 0; m < 2; m++) {
            tsr_tokenizer_set_mode(tok, m ? TSR_TOKENIZER_A1111 : TSR_TOKENIZER_DEFAULT);
            const int32_t *want = m ? cases[c].slow : cases[c].fast;
            tsr_ids ids = {0};
            ASSERT_OK(tsr_tokenizer_encode(tok, cases[c].text, strlen(cases[c].text), &ids));
            size_t n = 0;
            while (want[n] >= 0)
                n++;
            bool same = ids.n == n;
            for (size_t i = 0; same && i < n; i++)
                same = ids.v[i] == want[i];
            if (!same) {
                fprintf(stderr, "case %zu mode %d:", c, m);
                for (size_t i = 0; i < ids.n; i++)
                    fprintf(stderr, " %d", ids.v[i]);
                fprintf(stderr, "\n");
            }
            tsr_ids_free(&ids);
            ASSERT_TRUE(same);
        }
    tsr_tokenizer_free(tok);
    tsr_tokenizer_mode m;
    ASSERT_OK(tsr_tokenizer_mode_parse(NULL, &m));
    ASSERT_EQ(m, TSR_TOKENIZER_DEFAULT);
    ASSERT_OK(tsr_tokenizer_mode_parse("default", &m));
    ASSERT_EQ(m, TSR_TOKENIZER_DEFAULT);
    ASSERT_OK(tsr_tokenizer_mode_parse("a1111", &m));
    ASSERT_EQ(m, TSR_TOKENIZER_A1111);
    ASSERT_EQ(tsr_tokenizer_mode_parse("slow", &m), TSR_ERR_INVALID);
    ASSERT_TRUE(strcmp(tsr_tokenizer_mode_name(TSR_TOKENIZER_A1111), "a1111") == 0);
    return 0;
}

static int window(tsr_tokenizer *tok, const char *s, int32_t *out)
{
    return tsr_tokenizer_encode_window(tok, s, strlen(s), out);
}

static int test_edges(void)
{
    tsr_tokenizer *tok = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&tok));
    tsr_tokenizer_set_mode(tok, TSR_TOKENIZER_A1111);
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
    /* a tokenizer.json that is not a BPE, or whose merges are malformed */
    char dir[] = "/tmp/tsr_tok_XXXXXX", path[256];
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    ASSERT_OK(write_text(path, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}"));
    tok = NULL;
    ASSERT_EQ(tsr_tokenizer_load(dir, &tok), TSR_ERR_FORMAT);
    ASSERT_TRUE(strstr(tsr_last_error(), "not BPE") != NULL);
    ASSERT_OK(write_text(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                               "\"merges\": [[\"a\"]]}}"));
    ASSERT_EQ(tsr_tokenizer_load(dir, &tok), TSR_ERR_FORMAT);
    ASSERT_TRUE(strstr(tsr_last_error(), "merge") != NULL);
    ASSERT_EQ(unlink(path), 0);
    ASSERT_EQ(tsr_tokenizer_load(dir, &tok), TSR_ERR_NOT_FOUND); /* neither file */
    ASSERT_EQ(rmdir(dir), 0);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"golden_default", test_golden_default},
    {"golden_folder_pad_bang", test_golden_folder_pad_bang},
    {"folder_default_specials", test_folder_default_specials},
    {"golden_tf5", test_golden_tf5},
    {"layouts_tf5", test_layouts_tf5},
    {"modes", test_modes},
    {"edges", test_edges},
    {"load_errors", test_load_errors},
};
TSR_TEST_TABLE_MAIN(tests)
