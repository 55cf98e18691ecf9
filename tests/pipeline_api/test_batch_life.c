/*
 * tests/pipeline_api/test_batch_life.c - the batch API as a server drives
 * it: parameter checks that name the field, job states and progress, the
 * job cap, the step callback's allowed calls (run under ASan in CI), the
 * log callback, image-size previews, and the memory bound of a batch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"
#include "test.h"

static int open_model(const char *rel, const char *taesd, tsr_engine **e)
{
    char path[512], tpath[512];
    tsr_engine_options o;
    tsr_engine_options_init(&o);
    o.model = tsr_test_path(rel, path, sizeof path);
    o.device = "cpu";
    if (taesd)
        o.taesd = tsr_test_path(taesd, tpath, sizeof tpath);
    ASSERT_OK(tsr_engine_open(&o, e));
    return 0;
}

static tsr_image_params small(uint64_t seed)
{
    tsr_image_params p;
    tsr_image_params_init(&p);
    p.prompt = "a red cat";
    p.width = p.height = 64;
    p.steps = 3;
    p.seed = seed;
    p.sampler = "euler";
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

/* Each bad parameter fails the check with its field, and submit gives the
 * same status and message. */
static int test_check_names_field(void)
{
    tsr_engine *e;
    if (open_model("models/sd1", NULL, &e))
        return 1;
    tsr_batch *b;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    static const struct {
        const char *field;
        int status;
    } cases[] = {
        {"width", TSR_ERR_INVALID},   {"height", TSR_ERR_INVALID},
        {"steps", TSR_ERR_INVALID},   {"cfg_scale", TSR_ERR_INVALID},
        {"sampler", TSR_ERR_INVALID}, {"scheduler", TSR_ERR_INVALID},
        {"rng", TSR_ERR_INVALID},     {"clip_skip", TSR_ERR_INVALID},
        {"strength", TSR_ERR_INVALID}, {"mask", TSR_ERR_INVALID},
        {"guidance_rescale", TSR_ERR_INVALID}, {"prompt", TSR_ERR_INVALID},
    };
    static uint8_t rgb[64 * 64 * 3], gray[64 * 64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tsr_image_params p = small(1);
        const char *f = cases[i].field;
        if (!strcmp(f, "width"))
            p.width = 70;
        else if (!strcmp(f, "height"))
            p.height = 5000;
        else if (!strcmp(f, "steps"))
            p.steps = 1001;
        else if (!strcmp(f, "cfg_scale"))
            p.cfg_scale = -1;
        else if (!strcmp(f, "sampler"))
            p.sampler = "no such sampler";
        else if (!strcmp(f, "scheduler"))
            p.schedule = "sideways";
        else if (!strcmp(f, "rng"))
            p.rng = "quantum";
        else if (!strcmp(f, "clip_skip"))
            p.clip_skip = 12; /* the tiny encoder has 2 layers */
        else if (!strcmp(f, "strength")) {
            p.init_image = rgb;
            p.strength = 0;
        } else if (!strcmp(f, "mask"))
            p.mask = gray; /* without an init image */
        else if (!strcmp(f, "guidance_rescale"))
            p.guidance_rescale = 2;
        else if (!strcmp(f, "prompt"))
            p.prompt = NULL;
        const char *field = NULL;
        int rc = tsr_image_params_check(e, &p, &field);
        if (rc != cases[i].status || !field || strcmp(field, f) != 0)
            TSR_FAIL("%s: check gave %d, field %s (%s)", f, rc, field ? field : "NULL",
                     tsr_last_error());
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tsr_last_error());
        int job = 7;
        ASSERT_EQ(tsr_batch_submit(b, &p, &job), cases[i].status);
        ASSERT_STR_EQ(tsr_last_error(), msg);
        ASSERT_EQ(job, 0);
    }
    tsr_image_params ok = small(1);
    const char *field = "x";
    ASSERT_OK(tsr_image_params_check(e, &ok, &field));
    ASSERT_TRUE(field == NULL);
    ASSERT_EQ(tsr_batch_active(b), 0);
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

/* QUEUED -> (prepare) DENOISING -> DONE, with progress and timings. */
static int test_states(void)
{
    tsr_engine *e;
    if (open_model("models/sd1", NULL, &e))
        return 1;
    tsr_batch *b;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    tsr_image_params p = small(3);
    int job;
    ASSERT_OK(tsr_batch_submit(b, &p, &job));
    tsr_image_info info;
    ASSERT_OK(tsr_batch_image_info(b, job, &info));
    ASSERT_EQ(info.state, TSR_IMAGE_QUEUED);
    ASSERT_EQ(info.step, 0);
    ASSERT_EQ(info.steps, 3);
    ASSERT_STR_EQ(tsr_image_state_name(info.state), "queued");
    int prepared = 0;
    ASSERT_OK(tsr_batch_prepare(b, 0, &prepared));
    ASSERT_EQ(prepared, 1);
    ASSERT_OK(tsr_batch_image_info(b, job, &info));
    ASSERT_EQ(info.state, TSR_IMAGE_DENOISING);
    ASSERT_TRUE(info.prepare_seconds > 0);
    ASSERT_OK(tsr_batch_step(b, NULL));
    ASSERT_OK(tsr_batch_image_info(b, job, &info));
    ASSERT_EQ(info.step, 1);
    ASSERT_TRUE(info.denoise_seconds > 0);
    if (run_all(b))
        return 1;
    ASSERT_OK(tsr_batch_image_info(b, job, &info));
    ASSERT_EQ(info.state, TSR_IMAGE_DONE);
    ASSERT_EQ(info.step, 3);
    ASSERT_TRUE(info.decode_seconds > 0);
    tsr_batch_stats st;
    tsr_batch_stats_get(b, &st);
    ASSERT_EQ(st.unet_calls, 3);
    ASSERT_EQ(st.finished, 1);
    ASSERT_EQ(st.last_call_images, 1);
    tsr_result r;
    ASSERT_OK(tsr_batch_take(b, job, &r));
    tsr_result_free(&r);
    ASSERT_EQ(tsr_batch_image_info(b, job, &info), TSR_ERR_NOT_FOUND);
    /* cancel: final at once; a second cancel is refused */
    ASSERT_OK(tsr_batch_submit(b, &p, &job));
    ASSERT_OK(tsr_batch_cancel(b, job));
    ASSERT_OK(tsr_batch_image_info(b, job, &info));
    ASSERT_EQ(info.state, TSR_IMAGE_CANCELLED);
    ASSERT_EQ(tsr_batch_cancel(b, job), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_batch_active(b), 0);
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

static int test_job_cap(void)
{
    tsr_engine *e;
    if (open_model("models/sd1", NULL, &e))
        return 1;
    tsr_batch_options o;
    tsr_batch_options_init(&o);
    o.max_images = 2;
    tsr_batch *b;
    ASSERT_OK(tsr_batch_create(e, &o, &b));
    tsr_image_params p = small(1);
    int j1, j2, j3 = 9;
    ASSERT_OK(tsr_batch_submit(b, &p, &j1));
    ASSERT_OK(tsr_batch_submit(b, &p, &j2));
    ASSERT_EQ(tsr_batch_submit(b, &p, &j3), TSR_ERR_RANGE);
    ASSERT_TRUE(strstr(tsr_last_error(), "limit") != NULL);
    ASSERT_EQ(j3, 0);
    if (run_all(b))
        return 1;
    /* finished but not taken still count */
    ASSERT_EQ(tsr_batch_submit(b, &p, &j3), TSR_ERR_RANGE);
    tsr_result r;
    ASSERT_OK(tsr_batch_take(b, j1, &r));
    tsr_result_free(&r);
    ASSERT_OK(tsr_batch_submit(b, &p, &j3));
    o.max_images = 0;
    ASSERT_EQ(tsr_batch_create(e, &o, &(tsr_batch *){NULL}), TSR_ERR_INVALID);
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

/* ---- the callback contract ---- */

typedef struct cb_state {
    tsr_batch *b;
    int victim;         /* cancel this one at its first evaluation */
    int submitted;      /* the job submitted from inside the callback */
    int taken;          /* jobs taken from inside the callback on DONE */
    int step_rc;        /* what tsr_batch_step said from inside */
    int finals, cancels_reported;
    uint8_t *taken_rgb[8];
} cb_state;

static void contract_cb(void *user, const tsr_step_info *info)
{
    cb_state *s = user;
    if (info->state == TSR_IMAGE_DENOISING) {
        if (info->image == s->victim && info->step == 1)
            tsr_batch_cancel(s->b, s->victim); /* the image being reported */
        if (!s->submitted) {
            tsr_image_params p = small(77);
            tsr_batch_submit(s->b, &p, &s->submitted);
            s->step_rc = tsr_batch_step(s->b, NULL);
        }
        tsr_image_info ji;
        tsr_batch_image_info(s->b, info->image, &ji);
        return;
    }
    s->finals++;
    if (info->state == TSR_IMAGE_CANCELLED)
        s->cancels_reported++;
    if (info->state == TSR_IMAGE_DONE && s->taken < 8) {
        tsr_result r;
        if (tsr_batch_take(s->b, info->image, &r) == TSR_OK) {
            s->taken_rgb[s->taken++] = r.rgb;
            r.rgb = NULL;
            tsr_result_free(&r);
        }
    }
}

static int test_callback_contract(void)
{
    tsr_engine *e;
    if (open_model("models/sd1", NULL, &e))
        return 1;
    tsr_batch *b;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    cb_state s;
    memset(&s, 0, sizeof s);
    s.b = b;
    tsr_batch_set_callback(b, contract_cb, &s, TSR_PREVIEW_LATENT);
    int keep, victim;
    tsr_image_params p = small(5);
    ASSERT_OK(tsr_batch_submit(b, &p, &keep));
    p.seed = 6;
    ASSERT_OK(tsr_batch_submit(b, &p, &victim));
    s.victim = victim;
    if (run_all(b))
        return 1;
    ASSERT_EQ(s.step_rc, TSR_ERR_INVALID); /* no step inside a step */
    ASSERT_TRUE(s.submitted > 0);
    ASSERT_EQ(s.cancels_reported, 0); /* a cancel is the caller's own doing */
    ASSERT_EQ(s.taken, 2);            /* `keep` and the one submitted inside */
    ASSERT_EQ(s.finals, 2);
    tsr_result r;
    ASSERT_OK(tsr_batch_take(b, victim, &r));
    ASSERT_EQ(r.status, TSR_ERR_CANCELLED);
    tsr_result_free(&r);
    ASSERT_EQ(tsr_batch_take(b, keep, &r), TSR_ERR_NOT_FOUND); /* taken inside */
    for (int i = 0; i < s.taken; i++) {
        ASSERT_TRUE(s.taken_rgb[i] != NULL);
        free(s.taken_rgb[i]);
    }
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

/* ---- log callback ---- */

typedef struct log_seen {
    int n;
    tsr_log_level level;
    char last[256];
} log_seen;

static void on_log(void *user, tsr_log_level level, const char *msg)
{
    log_seen *l = user;
    l->n++;
    l->level = level;
    snprintf(l->last, sizeof l->last, "%s", msg);
}

static int test_log_callback(void)
{
    log_seen l;
    memset(&l, 0, sizeof l);
    tsr_log_set_callback(on_log, &l);
    tsr_engine *e;
    int rc = open_model("models/sd1", NULL, &e); /* logs "model ... on cpu" at info */
    tsr_log_set_callback(NULL, NULL);
    if (rc)
        return 1;
    ASSERT_TRUE(l.n > 0);
    ASSERT_EQ(l.level, TSR_LOG_INFO);
    ASSERT_TRUE(strstr(l.last, "model") != NULL);
    ASSERT_STR_EQ(tsr_engine_model_name(e), "sd1");
    ASSERT_STR_EQ(tsr_engine_model_hash(e), ""); /* a folder has no A1111 hash */
    tsr_engine_close(e);
    return 0;
}

/* ---- previews ---- */

typedef struct prev_seen {
    int n, w, h;
    long sum;
} prev_seen;

static void on_prev(void *user, const tsr_step_info *info)
{
    prev_seen *s = user;
    if (!info->preview_rgb)
        return;
    s->n++;
    s->w = info->preview_width;
    s->h = info->preview_height;
    for (int i = 0; i < s->w * s->h * 3; i += 97)
        s->sum += info->preview_rgb[i];
}

static int previews(const char *model, const char *taesd, int mode, prev_seen *s)
{
    tsr_engine *e;
    if (open_model(model, taesd, &e))
        return 1;
    tsr_batch *b;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    memset(s, 0, sizeof *s);
    tsr_batch_set_callback(b, on_prev, s, mode);
    tsr_image_params p = small(9);
    p.width = 96;
    p.height = 64;
    int job;
    ASSERT_OK(tsr_batch_submit(b, &p, &job));
    if (run_all(b))
        return 1;
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

static int test_previews_image_size(void)
{
    prev_seen s;
    if (previews("models/sd1", NULL, TSR_PREVIEW_LATENT, &s))
        return 1;
    ASSERT_EQ(s.n, 3);
    ASSERT_TRUE(s.w < 96 && 96 % s.w == 0 && s.w * 64 == s.h * 96); /* latent size */
    if (previews("models/sd1", NULL, TSR_PREVIEW_IMAGE, &s))
        return 1;
    ASSERT_EQ(s.n, 3);
    ASSERT_EQ(s.w, 96);
    ASSERT_EQ(s.h, 64);
    /* TAESD (random weights, 4 latent channels) gives image-size previews on
     * a model whose VAE is 8x (sd1_f8, as real checkpoints); the tiny 2x one
     * refuses it */
    tsr_engine *e = NULL;
    char path[512], tpath[512];
    tsr_engine_options o;
    tsr_engine_options_init(&o);
    o.model = tsr_test_path("models/sd1", path, sizeof path);
    o.device = "cpu";
    o.taesd = tsr_test_path("vae/taesd_random_decoder.safetensors", tpath, sizeof tpath);
    ASSERT_EQ(tsr_engine_open(&o, &e), TSR_ERR_INVALID);
    ASSERT_TRUE(strstr(tsr_last_error(), "TAESD") != NULL);
    if (previews("models/sd1_f8", "vae/taesd_random_decoder.safetensors", TSR_PREVIEW_LATENT,
                 &s))
        return 1;
    ASSERT_EQ(s.n, 3);
    ASSERT_EQ(s.w, 96);
    ASSERT_EQ(s.h, 64);
    return 0;
}

/* ---- memory bound ---- */

static long proc_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n))
            v = strtol(line + n, NULL, 10);
    fclose(f);
    return v;
}

static int reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* 16 images of size x size on the demo model, one step: the peak RSS growth
 * stays under tsr_engine_memory_estimate, and the memory goes back when the
 * batch runs empty. */
static int test_memory_bound(void)
{
    const int size = 512, n = 16; /* 1024: docs/api.md (19 min here) */
    tsr_engine *e;
    if (open_model("../../models/demo", NULL, &e))
        return 1;
    tsr_batch *b;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    size_t est;
    ASSERT_OK(tsr_engine_memory_estimate(e, NULL, n, size, size, 1, &est));
    for (int i = 0; i < n; i++) {
        tsr_image_params p;
        tsr_image_params_init(&p);
        p.prompt = "a red circle in the centre on a blue background";
        p.width = p.height = size;
        p.steps = 1;
        p.seed = (uint64_t)i;
        ASSERT_OK(tsr_batch_submit(b, &p, &(int){0}));
    }
    if (reset_peak() != 0)
        printf("cannot reset VmHWM; measuring from process start\n");
    const long base = proc_kb("VmRSS:");
    if (run_all(b))
        return 1;
    const long peak = proc_kb("VmHWM:"), after = proc_kb("VmRSS:");
    const double grew = (double)(peak - base) / 1024.0, bound = (double)est / (1 << 20);
    printf("16 x %dx%d, 1 step: estimate %.1f MiB, peak growth %.1f MiB, after %.1f MiB over base\n",
           size, size, bound, grew, (double)(after - base) / 1024.0);
    /* the finished RGB images stay (16 x 3 MiB) until taken */
    if (grew > bound)
        TSR_FAIL("peak grew %.1f MiB, over the estimate %.1f MiB", grew, bound);
    if ((double)(after - base) / 1024.0 > 0.5 * grew + n * 3.0 * size * size / (1 << 20))
        TSR_FAIL("memory not released after the batch ran empty: %.1f MiB",
                 (double)(after - base) / 1024.0);
    tsr_batch_free(b);
    tsr_engine_close(e);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"check_names_field", test_check_names_field},
    {"states", test_states},
    {"job_cap", test_job_cap},
    {"callback_contract", test_callback_contract},
    {"log_callback", test_log_callback},
    {"previews_image_size", test_previews_image_size},
    {"memory_bound", test_memory_bound},
};

TSR_TEST_TABLE_MAIN(tests)
