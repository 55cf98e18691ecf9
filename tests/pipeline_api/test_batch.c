/*
 * tests/pipeline_api/test_batch.c - the batch API's promise: images are
 * independent.  An image that joins a batch mid-way, next to an image with
 * another sampler, step count and guidance, comes out as it does alone;
 * cancelling one leaves the others untouched; a rejected submission adds
 * nothing.  Runs on the tiny SD1 model (64x64, a few steps).
 */
#include <stdlib.h>

#include "tessera.h"
#include "test.h"

typedef struct image {
    uint8_t *rgb;
    int w, h;
} image;

static int open_engine(tsr_engine **e)
{
    char path[512];
    tsr_engine_options o;
    tsr_engine_options_init(&o);
    o.model = tsr_test_path("models/sd1", path, sizeof path);
    o.device = "cpu";
    ASSERT_OK(tsr_engine_open(&o, e));
    return 0;
}

/* A batch with max_rows rows per UNet call, the other options default. */
static int create_rows(tsr_engine *e, int rows, tsr_batch **b)
{
    tsr_batch_options o;
    tsr_batch_options_init(&o);
    o.max_rows = rows;
    return tsr_batch_create(e, &o, b);
}

static tsr_image_params params_a(void)
{
    tsr_image_params p;
    tsr_image_params_init(&p);
    p.prompt = "a red cat";
    p.width = p.height = 64;
    p.steps = 4;
    p.seed = 1;
    p.sampler = "euler";
    return p;
}

static tsr_image_params params_b(void)
{
    tsr_image_params p = params_a();
    p.prompt = "a (blue:1.2) dog";
    p.negative_prompt = "blurry";
    p.steps = 6;
    p.seed = 2;
    p.sampler = "euler_a";
    p.cfg_scale = 5.0;
    return p;
}

static int run_all(tsr_batch *b)
{
    for (int guard = 0; tsr_batch_active(b) > 0; guard++) {
        if (guard > 1000)
            TSR_FAIL("batch never finished");
        ASSERT_OK(tsr_batch_step(b, NULL));
    }
    return 0;
}

static int take(tsr_batch *b, int job, image *out)
{
    tsr_result r;
    ASSERT_OK(tsr_batch_take(b, job, &r));
    ASSERT_OK(r.status);
    ASSERT_TRUE(r.rgb && r.parameters);
    out->rgb = r.rgb;
    out->w = r.width;
    out->h = r.height;
    r.rgb = NULL;
    tsr_result_free(&r);
    return 0;
}

static int alone(tsr_engine *e, const tsr_image_params *p, image *out)
{
    tsr_batch *b;
    int job;
    ASSERT_OK(create_rows(e, 2, &b));
    ASSERT_OK(tsr_batch_submit(b, p, &job));
    if (run_all(b) || take(b, job, out))
        return 1;
    tsr_batch_free(b);
    return 0;
}

static int max_diff(const image *a, const image *b)
{
    int m = 0;
    for (size_t i = 0; i < (size_t)a->w * a->h * 3; i++) {
        int d = abs((int)a->rgb[i] - (int)b->rgb[i]);
        m = d > m ? d : m;
    }
    return m;
}

static int test_join_mid_batch(void)
{
    tsr_engine *e;
    if (open_engine(&e))
        return 1;
    tsr_image_params pa = params_a(), pb = params_b();
    image a1, b1, a2, b2;
    if (alone(e, &pa, &a1) || alone(e, &pb, &b1))
        return 1;
    ASSERT_TRUE(max_diff(&a1, &b1) > 10); /* different images, or the test proves nothing */

    tsr_batch *b;
    int ja, jb, finished = 0;
    ASSERT_OK(create_rows(e, 8, &b));
    ASSERT_OK(tsr_batch_submit(b, &pa, &ja));
    ASSERT_OK(tsr_batch_step(b, &finished));
    ASSERT_OK(tsr_batch_step(b, &finished));
    ASSERT_EQ(finished, 0);
    ASSERT_OK(tsr_batch_submit(b, &pb, &jb)); /* joins at A's third step */
    ASSERT_EQ(tsr_batch_active(b), 2);
    ASSERT_EQ(tsr_batch_take(b, ja, &(tsr_result){0}), TSR_ERR_NOT_FOUND); /* still running */
    if (run_all(b) || take(b, ja, &a2) || take(b, jb, &b2))
        return 1;
    /* byte-identical: every GEMM covers one image (backend/cpu/ops_conv.c,
     * "Batch independence"), so sharing a call changes no arithmetic */
    int da = max_diff(&a1, &a2), db = max_diff(&b1, &b2);
    if (da > 0 || db > 0)
        TSR_FAIL("batched images differ from the same images alone: %d, %d", da, db);
    tsr_batch_free(b);
    free(a1.rgb);
    free(b1.rgb);
    free(a2.rgb);
    free(b2.rgb);
    tsr_engine_close(e);
    return 0;
}

static int test_cancel(void)
{
    tsr_engine *e;
    if (open_engine(&e))
        return 1;
    tsr_image_params pa = params_a(), pb = params_b();
    image a1, a2;
    if (alone(e, &pa, &a1))
        return 1;
    tsr_batch *b;
    int ja, jb;
    ASSERT_OK(create_rows(e, 8, &b));
    ASSERT_OK(tsr_batch_submit(b, &pb, &jb));
    ASSERT_OK(tsr_batch_submit(b, &pa, &ja));
    ASSERT_OK(tsr_batch_step(b, NULL));
    ASSERT_OK(tsr_batch_cancel(b, jb));
    ASSERT_EQ(tsr_batch_active(b), 1);
    tsr_result r;
    ASSERT_OK(tsr_batch_take(b, jb, &r));
    ASSERT_EQ(r.status, TSR_ERR_CANCELLED);
    ASSERT_TRUE(r.rgb == NULL);
    tsr_result_free(&r);
    if (run_all(b) || take(b, ja, &a2))
        return 1;
    ASSERT_EQ(max_diff(&a1, &a2), 0);
    ASSERT_EQ(tsr_batch_cancel(b, 12345), TSR_ERR_NOT_FOUND);
    tsr_batch_free(b);
    free(a1.rgb);
    free(a2.rgb);
    tsr_engine_close(e);
    return 0;
}

static int test_bad_params_add_nothing(void)
{
    tsr_engine *e;
    if (open_engine(&e))
        return 1;
    tsr_batch *b;
    ASSERT_OK(create_rows(e, 4, &b));
    ASSERT_EQ(create_rows(e, 0, &(tsr_batch *){NULL}), TSR_ERR_INVALID);
    tsr_image_params p = params_a();
    int job = -1;
    p.steps = 0;
    ASSERT_EQ(tsr_batch_submit(b, &p, &job), TSR_ERR_INVALID);
    p = params_a();
    p.steps = 10000;
    ASSERT_EQ(tsr_batch_submit(b, &p, &job), TSR_ERR_INVALID);
    p = params_a();
    p.width = 68;
    ASSERT_EQ(tsr_batch_submit(b, &p, &job), TSR_ERR_INVALID);
    ASSERT_TRUE(strstr(tsr_last_error(), "multiples of 8") != NULL);
    p = params_a();
    p.width = 32;
    ASSERT_EQ(tsr_batch_submit(b, &p, &job), TSR_ERR_INVALID);
    p = params_a();
    p.width = 100000;
    ASSERT_EQ(tsr_batch_submit(b, &p, &job), TSR_ERR_INVALID);
    p = params_a();
    p.sampler = "no_such_sampler";
    ASSERT_TRUE(tsr_batch_submit(b, &p, &job) < 0);
    p = params_a();
    p.sampler = "euler_a";
    p.schedule = "karras"; /* diffusers' EulerAncestral has no Karras option */
    ASSERT_TRUE(tsr_batch_submit(b, &p, &job) < 0);
    p = params_a();
    p.rng = "quantum";
    ASSERT_EQ(tsr_batch_submit(b, &p, &job), TSR_ERR_INVALID);
    p = params_a();
    uint8_t mask[64 * 64] = {0};
    p.mask = mask; /* a mask without an init image, on a non-inpainting model */
    ASSERT_TRUE(tsr_batch_submit(b, &p, &job) < 0);
    p = params_a();
    p.prompt = NULL;
    ASSERT_EQ(tsr_batch_submit(b, &p, &job), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_batch_active(b), 0);
    ASSERT_EQ(job, 0);
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

typedef struct seen {
    int calls, last_step, previews, finals;
} seen;

static void on_step(void *user, const tsr_step_info *info)
{
    seen *s = user;
    if (info->state != TSR_IMAGE_DENOISING) {
        s->finals += info->state == TSR_IMAGE_DONE;
        return;
    }
    s->calls++;
    s->last_step = info->step;
    if (info->preview_rgb && info->preview_width == info->latent_width &&
        info->preview_height == info->latent_height && info->latent_width > 0)
        s->previews++;
}

static int test_callback_and_previews(void)
{
    tsr_engine *e;
    if (open_engine(&e))
        return 1;
    tsr_batch *b;
    ASSERT_OK(create_rows(e, 4, &b));
    seen s = {0, 0, 0, 0};
    tsr_batch_set_callback(b, on_step, &s, 1);
    tsr_image_params p = params_a();
    p.sampler = "heun"; /* two evaluations per step but the last */
    int job;
    ASSERT_OK(tsr_batch_submit(b, &p, &job));
    if (run_all(b))
        return 1;
    ASSERT_EQ(s.calls, 2 * 4 - 1);
    ASSERT_EQ(s.last_step, 4);
    ASSERT_EQ(s.previews, s.calls);
    ASSERT_EQ(s.finals, 1); /* DONE is reported once */
    tsr_result r;
    ASSERT_OK(tsr_batch_take(b, job, &r));
    ASSERT_TRUE(strstr(r.parameters, "Steps: 4, Sampler: Heun") != NULL);
    tsr_result_free(&r);
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

static int test_row_limit(void)
{
    /* three images with guidance need six rows; a batch of four rows runs
     * them in several UNet calls and still finishes them all */
    tsr_engine *e;
    if (open_engine(&e))
        return 1;
    tsr_batch *b;
    ASSERT_OK(create_rows(e, 4, &b));
    int jobs[3];
    for (int i = 0; i < 3; i++) {
        tsr_image_params p = params_a();
        p.seed = 10 + i;
        ASSERT_OK(tsr_batch_submit(b, &p, &jobs[i]));
    }
    if (run_all(b))
        return 1;
    for (int i = 0; i < 3; i++) {
        image im;
        if (take(b, jobs[i], &im))
            return 1;
        free(im.rgb);
    }
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

/* tsr_engine_options.tokenizer: "a1111" turns the curly quote and the HTML
 * entity into ASCII (ftfy), the default keeps them (transformers 5). */
static int test_tokenizer_option(void)
{
    char path[512];
    tsr_engine_options o;
    tsr_engine_options_init(&o);
    ASSERT_TRUE(o.tokenizer == NULL);
    o.model = tsr_test_path("models/sd1", path, sizeof path);
    o.device = "cpu";
    o.tokenizer = "slow";
    tsr_engine *e = NULL;
    ASSERT_EQ(tsr_engine_open(&o, &e), TSR_ERR_INVALID);
    ASSERT_TRUE(e == NULL && strstr(tsr_last_error(), "a1111") != NULL);
    tsr_engine *dflt, *a1111;
    o.tokenizer = "default";
    ASSERT_OK(tsr_engine_open(&o, &dflt));
    o.tokenizer = "a1111";
    ASSERT_OK(tsr_engine_open(&o, &a1111));
    tsr_image_params fancy = params_a(), ascii = params_a();
    /* many tokens apart, so that even the tiny model shows it */
    fancy.prompt = "\xe2\x80\x9c&lt;&amp;&gt;\xe2\x80\x9d \xe2\x80\x98&quot;\xe2\x80\x99 "
                   "\xe2\x80\x9c&lt;&amp;&gt;\xe2\x80\x9d \xe2\x80\x98&quot;\xe2\x80\x99";
    ascii.prompt = "\"<&>\" '\"' \"<&>\" '\"'";
    fancy.cfg_scale = ascii.cfg_scale = 30; /* let the prompt show in a 64x64 image */
    image f_dflt, f_a1111, a_dflt;
    if (alone(dflt, &fancy, &f_dflt) || alone(a1111, &fancy, &f_a1111) ||
        alone(dflt, &ascii, &a_dflt))
        return 1;
    ASSERT_EQ(max_diff(&f_a1111, &a_dflt), 0);
    printf("  default vs a1111: max pixel difference %d\n", max_diff(&f_dflt, &a_dflt));
    ASSERT_TRUE(max_diff(&f_dflt, &a_dflt) > 0);
    free(f_dflt.rgb);
    free(f_a1111.rgb);
    free(a_dflt.rgb);
    tsr_engine_close(dflt);
    tsr_engine_close(a1111);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"join_mid_batch", test_join_mid_batch},
    {"cancel", test_cancel},
    {"bad_params_add_nothing", test_bad_params_add_nothing},
    {"callback_and_previews", test_callback_and_previews},
    {"row_limit", test_row_limit},
    {"tokenizer_option", test_tokenizer_option},
};

TSR_TEST_TABLE_MAIN(tests)
