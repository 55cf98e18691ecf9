/*
 * tests/textenc/test_ti.c - textual-inversion embeddings (issue 58 part 2).
 *
 * Why these checks: the goldens (tests/data/ti, written by
 * tools/reference/make_ti_goldens.py) are what diffusers computes after
 * load_textual_inversion: the conditioning of a prompt and a negative
 * prompt that name embeddings (SD1: a 3-vector A1111 file and a 1-vector
 * diffusers file; SDXL: a clip_l/clip_g file), and the images, which the
 * embeddings move by 29/255 and more, so an embedding not applied fails.
 * Then A1111's rules that diffusers does not share: n vectors count as n
 * tokens of a 75-token chunk, and a name matches whole tokens only (a longer
 * word that starts with the name is not the name).  Then the refusals: files
 * that do not fit the model, are not safetensors, hold too many vectors, or
 * whose name or link would leave the folder.  And the CLI's
 * --embeddings-dir against the same golden.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "image/image.h"
#include "model/embeddings.h"
#include "model/model.h"
#include "model/named_file.h"
#include "tessera.h"
#include "test.h"
#include "text/conditioner.h"
#include "text/prompt.h"

#define TOL 1e-4

typedef struct fixture {
    tsr_backend *be;
    tsr_model *model;
    tsr_text_cond *cond;
    tsr_embedding_db *db;
    tsr_safetensors *ref;
} fixture;

static void fixture_free(fixture *f)
{
    tsr_text_cond_free(f->cond);
    tsr_embedding_db_free(f->db);
    tsr_model_close(f->model);
    tsr_st_close(f->ref);
    tsr_backend_destroy(f->be);
}

/* The conditioner of models/<model> with ti/<dir>'s embeddings (dir NULL:
 * none) and, when ref is given, the reference ti/<ref>. */
static int fixture_open(fixture *f, const char *model, const char *dir, const char *ref)
{
    char rel[256], path[512];
    memset(f, 0, sizeof *f);
    ASSERT_OK(tsr_backend_open("cpu", 0, &f->be));
    snprintf(rel, sizeof rel, "models/%s", model);
    ASSERT_OK(tsr_model_open(tsr_test_path(rel, path, sizeof path), &f->model));
    ASSERT_OK(tsr_text_cond_open(f->model, f->be, &f->cond));
    if (dir) {
        int dims[2];
        const int nd = tsr_text_cond_encoder_dims(f->cond, dims);
        snprintf(rel, sizeof rel, "ti/%s", dir);
        ASSERT_OK(tsr_embedding_db_load(tsr_test_path(rel, path, sizeof path), dims, nd, &f->db));
        ASSERT_OK(tsr_text_cond_set_embeddings(f->cond, f->db));
    }
    if (ref) {
        snprintf(rel, sizeof rel, "ti/%s", ref);
        ASSERT_OK(tsr_st_open(tsr_test_path(rel, path, sizeof path), &f->ref));
    }
    return 0;
}

static int check(const fixture *f, const char *ref, const float *got, size_t n)
{
    const tsr_st_entry *e = tsr_st_find(f->ref, ref);
    if (!e || tsr_st_numel(e) != n)
        TSR_FAIL("reference %s missing or of another size (want %zu)", ref, n);
    return tsr_test_check_close(ref, got, tsr_st_data(f->ref, e), n, TOL);
}

static int cond_case(const char *model, const char *dir, const char *ref, const char *prompt,
                     const char *negative, bool pooled)
{
    fixture f;
    if (fixture_open(&f, model, dir, ref))
        return 1;
    ASSERT_TRUE(f.db->n >= 1);
    tsr_text_embedding p, n;
    tsr_text_cond_reset_used(f.cond);
    ASSERT_OK(tsr_text_cond_encode(f.cond, &prompt, 1, 1, &p));
    ASSERT_OK(tsr_text_cond_encode(f.cond, &negative, 1, 1, &n));
    ASSERT_EQ(p.n_tokens, 77);
    int failed = check(&f, "prompt", p.context, (size_t)p.n_tokens * p.dim);
    failed |= check(&f, "negative", n.context, (size_t)n.n_tokens * n.dim);
    if (pooled) {
        failed |= check(&f, "pooled", p.pooled, (size_t)p.pooled_dim);
        failed |= check(&f, "negative_pooled", n.pooled, (size_t)n.pooled_dim);
    }
    /* every embedding of the folder was used, and named with its hash */
    char hashes[512];
    ASSERT_OK(tsr_text_cond_used_hashes(f.cond, hashes, sizeof hashes));
    printf("TI hashes: %s\n", hashes);
    for (int i = 0; i < f.db->n; i++) {
        char want[200];
        snprintf(want, sizeof want, "%s: %s", f.db->emb[i].name, f.db->emb[i].hash);
        ASSERT_TRUE(strstr(hashes, want) != NULL);
    }
    /* without the embeddings the conditioning differs (the test can fail) */
    fixture g;
    if (fixture_open(&g, model, NULL, NULL))
        return 1;
    tsr_text_embedding q;
    ASSERT_OK(tsr_text_cond_encode(g.cond, &prompt, 1, 1, &q));
    double d = 0;
    for (size_t i = 0; i < (size_t)q.n_tokens * q.dim; i++)
        d = fmax(d, fabs((double)q.context[i] - p.context[i]));
    printf("the embeddings move the conditioning by up to %g\n", d);
    ASSERT_TRUE(d > 0.1);
    tsr_text_embedding_free(&p);
    tsr_text_embedding_free(&n);
    tsr_text_embedding_free(&q);
    fixture_free(&g);
    fixture_free(&f);
    return failed;
}

static int test_sd1_cond(void)
{
    return cond_case("sd1_sharp", "sd1", "cond_sd1.safetensors",
                     "a photo of tiemb on a green sofa", "tione, blurry", false);
}

static int test_sdxl_cond(void)
{
    return cond_case("sdxl_sharp", "sdxl", "cond_sdxl.safetensors",
                     "a photo of tixl on a green sofa", "blurry tixl", true);
}

/* SD 2.x's OpenCLIP-H layout (the tiny v model), conditioning only */
static int test_sd2v_cond(void)
{
    return cond_case("sd2v", "sd2", "cond_sd2v.safetensors", "a tisd2 sitting on a chair", "tisd2",
                     false);
}

/* Count the fixes of tokens t and where the first one is. */
static int fixes(const tsr_prompt_tokens *t, int *first_chunk, int *first_pos)
{
    int n = 0;
    *first_chunk = *first_pos = -1;
    for (int i = 0; i < t->n_chunks * 77; i++)
        if (t->fix[i] >= 0) {
            if (n++ == 0) {
                *first_chunk = i / 77;
                *first_pos = i % 77;
            }
        }
    return n;
}

/* A1111's chunking: "tiemb" (3 vectors) after k plain tokens fits the first
 * chunk while k + 3 <= 75, and otherwise opens the next one. */
static int test_chunking(void)
{
    fixture f;
    if (fixture_open(&f, "sd1_sharp", "sd1", NULL))
        return 1;
    /* the tokenizer the conditioner uses, with the names it was given */
    tsr_tokenizer *tok = NULL;
    char path[512];
    ASSERT_OK(tsr_tokenizer_load(tsr_test_path("models/sd1_sharp/tokenizer", path, sizeof path),
                                 &tok));
    tsr_ids name = {0};
    ASSERT_OK(tsr_tokenizer_encode(tok, "tiemb", 5, &name));
    tsr_prompt_embedding pe = {name.v, (int)name.n, 3};
    tsr_prompt_options o;
    tsr_prompt_options_init(&o);
    o.embeddings = &pe;
    o.n_embeddings = 1;
    /* "a" is one token in the tiny vocabulary */
    tsr_ids one = {0};
    ASSERT_OK(tsr_tokenizer_encode(tok, "a", 1, &one));
    ASSERT_EQ((int)one.n, 1);
    for (int k = 70; k <= 74; k++) {
        char text[512] = "";
        for (int i = 0; i < k; i++)
            strcat(text, "a ");
        strcat(text, "tiemb a");
        tsr_prompt_tokens t;
        ASSERT_OK(tsr_prompt_tokenize(tok, text, strlen(text), &o, &t));
        int c, p;
        ASSERT_EQ(fixes(&t, &c, &p), 3);
        const int want_chunk = k + 3 <= 75 ? 0 : 1;
        printf("%d tokens + 3 vectors: chunk %d position %d, %d chunks\n", k, c, p, t.n_chunks);
        ASSERT_EQ(c, want_chunk);
        ASSERT_EQ(p, want_chunk ? 1 : k + 1);
        ASSERT_EQ(t.n_chunks, k + 3 + 1 <= 75 ? 1 : 2);
        /* the ids under the vectors are 0, as A1111 writes them */
        ASSERT_EQ(t.ids[c * 77 + p], 0);
        ASSERT_EQ(t.fix[c * 77 + p + 2], TSR_PROMPT_FIX(0, 2));
        tsr_prompt_tokens_free(&t);
    }
    tsr_ids_free(&one);
    tsr_ids_free(&name);
    tsr_tokenizer_free(tok);
    fixture_free(&f);
    return 0;
}

/* A name matches whole tokens: "tiembed" and "tiembs" are other words; the
 * prompt then encodes exactly as without embeddings. */
static int test_word_rule(void)
{
    fixture f, g;
    if (fixture_open(&f, "sd1_sharp", "sd1", NULL) || fixture_open(&g, "sd1_sharp", NULL, NULL))
        return 1;
    const char *prompts[] = {"a photo of tiembed on a sofa", "tiembs and tiones", "ti emb"};
    for (size_t i = 0; i < sizeof prompts / sizeof prompts[0]; i++) {
        tsr_text_embedding a, b;
        ASSERT_OK(tsr_text_cond_encode(f.cond, &prompts[i], 1, 1, &a));
        ASSERT_OK(tsr_text_cond_encode(g.cond, &prompts[i], 1, 1, &b));
        ASSERT_EQ(a.n_tokens, b.n_tokens);
        ASSERT_TRUE(memcmp(a.context, b.context, (size_t)a.n_tokens * a.dim * sizeof(float)) == 0);
        tsr_text_embedding_free(&a);
        tsr_text_embedding_free(&b);
    }
    /* and the name itself, with punctuation around it, does match */
    const char *hit = "(tiemb), x";
    tsr_text_embedding a, b;
    ASSERT_OK(tsr_text_cond_encode(f.cond, &hit, 1, 1, &a));
    ASSERT_OK(tsr_text_cond_encode(g.cond, &hit, 1, 1, &b));
    ASSERT_TRUE(memcmp(a.context, b.context, (size_t)a.n_tokens * a.dim * sizeof(float)) != 0);
    tsr_text_embedding_free(&a);
    tsr_text_embedding_free(&b);
    fixture_free(&f);
    fixture_free(&g);
    return 0;
}

static char tmpdir[256];

static int write_st(const char *file, const char *const *names, const int64_t (*shapes)[2],
                    int n, tsr_st_dtype dt)
{
    /* values 0.01 * (i % 7) in the file's dtype */
    static float f32[4096];
    static uint16_t half[4096];
    for (int i = 0; i < 4096; i++) {
        f32[i] = 0.01f * (float)(i % 7);
        half[i] = dt == TSR_ST_F16 ? tsr_f32_to_f16(f32[i]) : tsr_f32_to_bf16(f32[i]);
    }
    const void *zeros = dt == TSR_ST_F16 || dt == TSR_ST_BF16 ? (const void *)half : f32;
    tsr_st_write_entry e[4];
    for (int i = 0; i < n; i++) {
        e[i].name = names[i];
        e[i].dtype = dt;
        e[i].ndim = shapes[i][0] ? 2 : 1;
        e[i].shape[0] = shapes[i][0] ? shapes[i][0] : shapes[i][1];
        e[i].shape[1] = shapes[i][1];
        e[i].data = zeros;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, file);
    ASSERT_OK(tsr_st_write(path, e, (size_t)n, NULL));
    return 0;
}

static int expect_refused(const char *file, const int *dims, int nd, const char *needle)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, file);
    tsr_ti_embedding e;
    int v, s;
    const int rc = tsr_embedding_load_file(path, "x", dims, nd, &e, &v, &s);
    printf("%s: %s\n", file, rc < 0 ? tsr_last_error() : "loaded");
    ASSERT_TRUE(rc < 0);
    ASSERT_TRUE(strstr(tsr_last_error(), needle) != NULL);
    ASSERT_TRUE(strstr(tsr_last_error(), tmpdir) == NULL); /* the name, never the path */
    tsr_error_clear();
    return 0;
}

static int test_bad_files(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr_ti_XXXXXX");
    ASSERT_TRUE(mkdtemp(tmpdir) != NULL);
    const int sd1[1] = {16}, xl[2] = {16, 32};
    const char *emb[] = {"emb_params"}, *two[] = {"a", "b"}, *lg[] = {"clip_l", "clip_g"},
               *l[] = {"clip_l"};
    const int64_t s_16[][2] = {{2, 16}}, s_24[][2] = {{2, 24}}, s_many[][2] = {{76, 16}},
                  s_two[][2] = {{1, 16}, {1, 16}}, s_lg[][2] = {{2, 16}, {2, 32}},
                  s_lg_bad[][2] = {{2, 16}, {3, 32}}, s_vec[][2] = {{0, 16}};
    if (write_st("ok.safetensors", emb, s_16, 1, TSR_ST_F16) ||
        write_st("wide.safetensors", emb, s_24, 1, TSR_ST_F32) ||
        write_st("many.safetensors", emb, s_many, 1, TSR_ST_F32) ||
        write_st("twokeys.safetensors", two, s_two, 2, TSR_ST_F32) ||
        write_st("xl.safetensors", lg, s_lg, 2, TSR_ST_F32) ||
        write_st("xlbad.safetensors", lg, s_lg_bad, 2, TSR_ST_F32) ||
        write_st("lonly.safetensors", l, s_16, 1, TSR_ST_F32) ||
        write_st("ints.safetensors", emb, s_16, 1, TSR_ST_I32) ||
        write_st("vec.safetensors", emb, s_vec, 1, TSR_ST_BF16))
        return 1;
    char path[512];
    snprintf(path, sizeof path, "%s/junk.safetensors", tmpdir);
    FILE *fp = fopen(path, "wb");
    ASSERT_TRUE(fp != NULL);
    fputs("\xff\xff\xff\xff\xff\xff\xff\x7f{not a header", fp);
    fclose(fp);
    snprintf(path, sizeof path, "%s/pickled.pt", tmpdir);
    fp = fopen(path, "wb");
    ASSERT_TRUE(fp != NULL);
    fputs("\x80\x02}q\x00.", fp);
    fclose(fp);
    int failed = expect_refused("wide.safetensors", sd1, 1, "width 24, but this model's text "
                                                            "encoder takes 16");
    failed |= expect_refused("many.safetensors", sd1, 1, "76 vectors");
    failed |= expect_refused("twokeys.safetensors", sd1, 1, "no 'emb_params'");
    failed |= expect_refused("xl.safetensors", sd1, 1, "is for SDXL");
    failed |= expect_refused("ok.safetensors", xl, 2, "needs 'clip_l' [n, 16] and 'clip_g' [n, 32]");
    failed |= expect_refused("xlbad.safetensors", xl, 2, "clip_l has 2 vectors, clip_g 3");
    failed |= expect_refused("lonly.safetensors", xl, 2, "has clip_l but not clip_g");
    failed |= expect_refused("ints.safetensors", sd1, 1, "not F32/F16/BF16");
    failed |= expect_refused("junk.safetensors", sd1, 1, "embedding 'x'");
    if (failed)
        return 1;
    /* the good ones load, with their shapes */
    tsr_ti_embedding e;
    int v, s;
    snprintf(path, sizeof path, "%s/ok.safetensors", tmpdir);
    ASSERT_OK(tsr_embedding_load_file(path, "ok", sd1, 1, &e, &v, &s));
    ASSERT_EQ(e.n_vectors, 2);
    ASSERT_EQ((int)strlen(e.hash), 12);
    ASSERT_NEAR(e.vec[0][1], 0.01f, 1e-4);
    tsr_ti_embedding_free(&e);
    snprintf(path, sizeof path, "%s/vec.safetensors", tmpdir);
    ASSERT_OK(tsr_embedding_load_file(path, "vec", sd1, 1, &e, &v, &s));
    ASSERT_EQ(e.n_vectors, 1);
    tsr_ti_embedding_free(&e);
    /* the folder: loaded and skipped, pickles named, nothing fails */
    tsr_embedding_db *db = NULL;
    ASSERT_OK(tsr_embedding_db_load(tmpdir, sd1, 1, &db));
    printf("folder: %d loaded, %d skipped\n", db->n, db->n_skip);
    ASSERT_EQ(db->n, 2); /* ok, vec */
    ASSERT_EQ(db->n_skip, 9);
    bool pickle = false;
    for (int i = 0; i < db->n_skip; i++)
        pickle |= strcmp(db->skip[i].name, "pickled") == 0 && strstr(db->skip[i].reason, "pickle");
    ASSERT_TRUE(pickle);
    tsr_embedding_db_free(db);
    return 0;
}

/* Names never leave the folder: the resolver LoRAs use. */
static int test_names_stay_inside(void)
{
    char dir[512], outside[600], link[600];
    ASSERT_TRUE(realpath(tsr_test_path("ti/sd1", dir, sizeof dir), outside) != NULL);
    snprintf(dir, sizeof dir, "/tmp/tsr_ti_names_XXXXXX");
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    snprintf(link, sizeof link, "%s/escape.safetensors", dir);
    strcat(outside, "/tiemb.safetensors");
    ASSERT_EQ(symlink(outside, link), 0);
    char *path = NULL;
    const char *bad[] = {"../sd1/tiemb", "a/b", ".hidden", "x:y", "escape"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const int rc = tsr_named_resolve(&tsr_named_embedding, dir, bad[i], &path);
        printf("'%s': %s\n", bad[i], tsr_last_error());
        ASSERT_TRUE(rc < 0);
        ASSERT_TRUE(strncmp(tsr_last_error(), "embedding: ", 11) == 0);
        tsr_error_clear();
    }
    const int dims[1] = {16};
    tsr_embedding_db *db = NULL;
    ASSERT_OK(tsr_embedding_db_load(dir, dims, 1, &db));
    ASSERT_EQ(db->n, 0); /* the link out is not listed */
    tsr_embedding_db_free(db);
    unlink(link);
    rmdir(dir);
    return 0;
}

/* Images through the public API: diffusers' within 1/255; the listing. */
static int image_case(const char *model, const char *dir, const char *prompt, const char *neg,
                      uint64_t seed, const char *golden)
{
    char mpath[512], dpath[512], rel[256];
    snprintf(rel, sizeof rel, "models/%s", model);
    tsr_engine_options o;
    tsr_engine_options_init(&o);
    o.model = tsr_test_path(rel, mpath, sizeof mpath);
    o.device = "cpu";
    snprintf(rel, sizeof rel, "ti/%s", dir);
    o.embeddings_dir = tsr_test_path(rel, dpath, sizeof dpath);
    tsr_engine *e = NULL;
    ASSERT_OK(tsr_engine_open(&o, &e));
    tsr_embedding_info *list = NULL;
    int nl = 0;
    ASSERT_OK(tsr_engine_embeddings(e, &list, &nl));
    ASSERT_TRUE(nl >= 1);
    for (int i = 0; i < nl; i++) {
        printf("%s: loaded %d, %d vectors of %d, hash %s\n", list[i].name, list[i].loaded,
               list[i].vectors, list[i].shape, list[i].hash);
        ASSERT_EQ(list[i].loaded, 1);
    }
    tsr_embedding_info_free(list, nl);
    tsr_batch *b = NULL;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    tsr_image_params p;
    tsr_image_params_init(&p);
    p.prompt = prompt;
    p.negative_prompt = neg;
    p.width = p.height = 64;
    p.steps = 4;
    p.seed = seed;
    p.sampler = "euler";
    int id;
    ASSERT_OK(tsr_batch_submit(b, &p, &id));
    for (int guard = 0; tsr_batch_active(b) > 0; guard++) {
        if (guard > 1000)
            TSR_FAIL("batch never finished");
        ASSERT_OK(tsr_batch_step(b, NULL));
    }
    tsr_result r;
    ASSERT_OK(tsr_batch_take(b, id, &r));
    ASSERT_EQ(r.status, 0);
    char gpath[512];
    snprintf(rel, sizeof rel, "ti/%s", golden);
    tsr_image img;
    ASSERT_OK(tsr_image_read(tsr_test_path(rel, gpath, sizeof gpath), 3, &img));
    ASSERT_EQ(img.width, r.width);
    int m = 0;
    for (size_t i = 0; i < (size_t)r.width * r.height * 3; i++) {
        const int d = abs((int)r.rgb[i] - (int)img.data[i]);
        m = d > m ? d : m;
    }
    printf("%s: max diff vs diffusers %d/255\n", golden, m);
    ASSERT_TRUE(m <= 1);
    tsr_image_free(&img);
    tsr_result_free(&r);
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

static int test_sd1_image(void)
{
    return image_case("sd1_sharp", "sd1", "a photo of tiemb on a green sofa", "tione, blurry", 11,
                      "sd1_ti.png");
}

static int test_sdxl_image(void)
{
    return image_case("sdxl_sharp", "sdxl", "a photo of tixl on a green sofa", "blurry tixl", 21,
                      "sdxl_ti.png");
}

/* An SD1 engine lists the SDXL folder's file as skipped, with the widths. */
static int test_skipped_listing(void)
{
    char mpath[512], dpath[512];
    tsr_engine_options o;
    tsr_engine_options_init(&o);
    o.model = tsr_test_path("models/sd1_sharp", mpath, sizeof mpath);
    o.device = "cpu";
    o.embeddings_dir = tsr_test_path("ti/sdxl", dpath, sizeof dpath);
    tsr_engine *e = NULL;
    ASSERT_OK(tsr_engine_open(&o, &e));
    tsr_embedding_info *list = NULL;
    int n = 0;
    ASSERT_OK(tsr_engine_embeddings(e, &list, &n));
    ASSERT_EQ(n, 1);
    printf("%s: %s\n", list[0].name, list[0].error ? list[0].error : "loaded");
    ASSERT_EQ(list[0].loaded, 0);
    ASSERT_EQ(list[0].shape, 32);
    ASSERT_EQ(list[0].vectors, 2);
    ASSERT_TRUE(strstr(list[0].error, "is for SDXL") != NULL);
    tsr_embedding_info_free(list, n);
    tsr_engine_close(e);
    o.embeddings_dir = "/nonexistent/tessera-ti";
    ASSERT_TRUE(tsr_engine_open(&o, &e) < 0);
    printf("missing folder: %s\n", tsr_last_error());
    tsr_error_clear();
    return 0;
}

/* `tessera generate --embeddings-dir DIR` gives the golden; a folder that
 * does not exist fails the run before any work. */
static int test_cli(void)
{
    const char *bin = getenv("TSR_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        printf("no TSR_BIN: skipped\n");
        return TSR_TEST_SKIP;
    }
    char model[512], dir[512], out[] = "/tmp/tsr_ti_cli_XXXXXX";
    ASSERT_TRUE(mkdtemp(out) != NULL);
    char png[600], log[600];
    snprintf(png, sizeof png, "%s/out.png", out);
    snprintf(log, sizeof log, "%s/log.txt", out);
    tsr_test_path("models/sd1_sharp", model, sizeof model);
    tsr_test_path("ti/sd1", dir, sizeof dir);
    char *argv[] = {(char *)bin, "--log-level", "warn", "generate", "--model", model,
                    "--embeddings-dir", dir, "--prompt", "a photo of tiemb on a green sofa",
                    "--negative-prompt", "tione, blurry", "--seed", "11", "--steps", "4",
                    "--width", "64", "--height", "64", "--sampler", "euler", "--quiet",
                    "--output", png, NULL};
    tsr_test_child r;
    ASSERT_TRUE(tsr_test_spawn(argv, log, NULL, 300, &r) == 0);
    ASSERT_TRUE(r.exited && r.status == 0);
    tsr_image img, gold;
    char gpath[512];
    ASSERT_OK(tsr_image_read(png, 3, &img));
    ASSERT_OK(tsr_image_read(tsr_test_path("ti/sd1_ti.png", gpath, sizeof gpath), 3, &gold));
    ASSERT_EQ(img.width, gold.width);
    int m = 0;
    for (size_t i = 0; i < (size_t)img.width * img.height * 3; i++) {
        const int d = abs((int)img.data[i] - (int)gold.data[i]);
        m = d > m ? d : m;
    }
    printf("generate --embeddings-dir: max diff vs diffusers %d/255\n", m);
    ASSERT_TRUE(m <= 1);
    tsr_image_free(&img);
    tsr_image_free(&gold);
    unlink(png);
    argv[7] = "/nonexistent/tessera-ti";
    ASSERT_TRUE(tsr_test_spawn(argv, log, NULL, 300, &r) == 0);
    ASSERT_TRUE(r.exited && r.status != 0);
    ASSERT_TRUE(access(png, F_OK) != 0);
    unlink(log);
    rmdir(out);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"sd1_cond", test_sd1_cond},
    {"sdxl_cond", test_sdxl_cond},
    {"sd2v_cond", test_sd2v_cond},
    {"chunking", test_chunking},
    {"word_rule", test_word_rule},
    {"bad_files", test_bad_files},
    {"names_stay_inside", test_names_stay_inside},
    {"sd1_image", test_sd1_image},
    {"sdxl_image", test_sdxl_image},
    {"skipped_listing", test_skipped_listing},
    {"cli", test_cli},
};

TSR_TEST_TABLE_MAIN(tests)
