/*
 * tests/unet/test_unet.c - the UNet against diffusers, family by family.
 *
 * Goldens come from tools/reference/make_unet_goldens.py: tiny random UNets
 * of each family (SD 1.x, SD 1.x inpainting, SD 2.x-v with linear
 * projections and per-block heads, SDXL with text_time, plus a 3-block SD1
 * and a 5-time-id SDXL refiner-like config), a batch of 3 rows with
 * different timesteps, contexts and time_ids, and diffusers' output computed
 * ROW BY ROW.  Each case runs the batch in one call and checks the relative
 * error (max abs error / max abs reference) <= 1e-4 in f32, then runs each
 * row alone and checks that too (rows must not mix).  Inputs are copied out
 * of the mmapped file because safetensors does not promise alignment.
 *
 * The *_f16 / *_bf16 cases run the same goldens on the CPU's storage
 * variants (backend "cpu-f16"/"cpu-bf16": f16 weights and activations, each
 * op computed in f32 and rounded back), which exercises the model code's
 * f16 path; they are held to F16_TOL / BF16_TOL and print the error they
 * observed.  round_rows runs a 3-row batch on a CPU backend that rounds
 * rows up (TSR_BACKEND_CAP_ROUND_ROWS: 4 rows computed, 3 returned).
 */
#include <stdlib.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "model/model.h"
#include "core/safetensors.h"
#include "test.h"
#include "unet/unet.h"

#define TOL 1e-4
/* Observed (2 threads, max error over max |golden|, batch and rows alone):
 * f16 at most 8.5e-4 (sd1 7.9e-4, sd2v 5.5e-4, sdxl 7.3e-4, sd1_3block_odd
 * 6.3e-4), bf16 4.2e-3 (sdxl); the bounds leave ~3x. */
#define F16_TOL 3e-3
#define BF16_TOL 2e-2

typedef struct golden {
    tsr_backend *be;
    tsr_model *model;
    tsr_weights *weights;
    tsr_unet *unet;
    tsr_safetensors *ref;
    tsr_unet_inputs in;
    float *buf[6]; /* owned copies: latents, timesteps, context, text_embeds, time_ids, expected */
    int64_t out_n;
} golden;

static void golden_free(golden *g)
{
    tsr_unet_free(g->unet);
    tsr_weights_free(g->weights);
    tsr_model_close(g->model);
    tsr_st_close(g->ref);
    tsr_backend_destroy(g->be);
    for (int i = 0; i < 6; i++)
        free(g->buf[i]);
}

/* An owned f32 copy of tensor `name` (NULL, n = 0 when absent). */
static float *copy_f32(const tsr_safetensors *st, const char *name, const tsr_st_entry **e_out)
{
    const tsr_st_entry *e = tsr_st_find(st, name);
    *e_out = e;
    if (!e || e->dtype != TSR_ST_F32)
        return NULL;
    float *p = malloc(e->nbytes ? e->nbytes : 1);
    if (p)
        memcpy(p, tsr_st_data(st, e), e->nbytes);
    return p;
}

static int golden_open_on(golden *g, const char *name, bool committed_model, const char *device)
{
    char rel[256], path[512];
    memset(g, 0, sizeof *g);
    ASSERT_OK(tsr_backend_open(device, 0, &g->be));
    char folder[64];
    snprintf(folder, sizeof folder, "%s", name);
    char *odd = strstr(folder, "_odd"); /* same weights, odd-size golden */
    if (odd && odd[4] == '\0')
        *odd = '\0';
    snprintf(rel, sizeof rel, committed_model ? "models/%s" : "unet/%s", folder);
    ASSERT_OK(tsr_model_open(tsr_test_path(rel, path, sizeof path), &g->model));
    ASSERT_TRUE(tsr_model_has(g->model, TSR_COMP_UNET));
    ASSERT_OK(tsr_weights_load(g->model, TSR_COMP_UNET, g->be, &g->weights));
    const tsr_unet_desc *d = tsr_model_unet_desc(g->model);
    ASSERT_TRUE(d != NULL);
    ASSERT_OK(tsr_unet_create(d, g->weights, g->be, &g->unet));
    snprintf(rel, sizeof rel, "unet/%s.safetensors", name);
    ASSERT_OK(tsr_st_open(tsr_test_path(rel, path, sizeof path), &g->ref));

    static const char *const names[6] = {"latents", "timesteps", "context",
                                         "text_embeds", "time_ids", "expected"};
    const tsr_st_entry *e[6];
    for (int i = 0; i < 6; i++)
        g->buf[i] = copy_f32(g->ref, names[i], &e[i]);
    for (int i = 0; i < 6; i++)
        if (i != 3 && i != 4)
            ASSERT_TRUE(g->buf[i] != NULL);
    ASSERT_EQ(e[0]->ndim, 4);
    ASSERT_EQ(e[2]->ndim, 3);
    ASSERT_EQ(e[5]->ndim, 4);
    g->in = (tsr_unet_inputs){
        .batch = (int)e[0]->shape[0],
        .height = (int)e[0]->shape[1],
        .width = (int)e[0]->shape[2],
        .channels = (int)e[0]->shape[3],
        .context_len = (int)e[2]->shape[1],
        .latents = g->buf[0],
        .timesteps = g->buf[1],
        .context = g->buf[2],
        .text_embeds = g->buf[3],
        .time_ids = g->buf[4],
        .n_time_ids = e[4] ? (int)e[4]->shape[1] : 0,
    };
    ASSERT_EQ(d->text_time, g->buf[3] != NULL);
    ASSERT_EQ(e[5]->shape[3], d->out_channels);
    g->out_n = (int64_t)tsr_st_numel(e[5]);
    return 0;
}

static int golden_open(golden *g, const char *name, bool committed_model)
{
    return golden_open_on(g, name, committed_model, "cpu");
}

/* Row r of the inputs as a batch of one. */
static tsr_unet_inputs row_inputs(const golden *g, int r)
{
    const tsr_unet_desc *d = tsr_unet_get_desc(g->unet);
    tsr_unet_inputs in = g->in;
    const size_t hw = (size_t)in.height * in.width, L = (size_t)in.context_len;
    in.batch = 1;
    in.latents += (size_t)r * hw * in.channels;
    in.timesteps += r;
    in.context += (size_t)r * L * d->cross_attention_dim;
    if (d->text_time) {
        const int nt = in.n_time_ids ? in.n_time_ids : 6;
        const int pooled = d->projection_class_embeddings_input_dim - nt * d->addition_time_embed_dim;
        in.text_embeds += (size_t)r * pooled;
        in.time_ids += (size_t)r * nt;
    }
    return in;
}

/* max |got - want| / max |want|, for the log */
static double rel_err(const float *got, const float *want, int64_t n)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)got[i] - want[i]));
        m = fmax(m, fabs((double)want[i]));
    }
    return m > 0 ? e / m : e;
}

static int check_family_on(const char *name, bool committed_model, const char *device, double tol)
{
    golden g;
    int rc = golden_open_on(&g, name, committed_model, device);
    float *out = rc ? NULL : malloc((size_t)g.out_n * sizeof(float));
    if (!rc && !out)
        rc = 1;
    if (!rc) {
        /* the whole batch in one call: rows at different steps */
        int st = tsr_unet_forward(g.unet, &g.in, out);
        if (st) {
            fprintf(stderr, "forward: %s\n", tsr_last_error());
            rc = 1;
        } else {
            char what[128];
            snprintf(what, sizeof what, "%s batch of %d on %s", name, g.in.batch, g.be->name);
            rc = tsr_test_check_close(what, out, g.buf[5], (size_t)g.out_n, tol);
            fprintf(stderr, "%s: relative error %.2e, workspace %.2f MiB\n", what,
                    rel_err(out, g.buf[5], g.out_n),
                    (double)tsr_unet_workspace_bytes(g.unet) / (1 << 20));
        }
    }
    /* each row alone (a different plan) gives the same row */
    const int64_t row_n = rc ? 0 : g.out_n / g.in.batch;
    for (int r = 0; !rc && r < g.in.batch; r++) {
        tsr_unet_inputs in = row_inputs(&g, r);
        if (tsr_unet_forward(g.unet, &in, out)) {
            fprintf(stderr, "row %d: %s\n", r, tsr_last_error());
            rc = 1;
            break;
        }
        char what[128];
        snprintf(what, sizeof what, "%s row %d alone", name, r);
        rc = tsr_test_check_close(what, out, g.buf[5] + r * row_n, (size_t)row_n, tol);
    }
    free(out);
    golden_free(&g);
    return rc;
}

static int check_family(const char *name, bool committed_model)
{
    return check_family_on(name, committed_model, "cpu", TOL);
}

static int t_sd1_f16(void) { return check_family_on("sd1", true, "cpu-f16", F16_TOL); }
static int t_sd2v_f16(void) { return check_family_on("sd2v", true, "cpu-f16", F16_TOL); }
static int t_sdxl_f16(void) { return check_family_on("sdxl", true, "cpu-f16", F16_TOL); }
static int t_sd1_3block_odd_f16(void)
{
    return check_family_on("sd1_3block_odd", false, "cpu-f16", F16_TOL);
}
static int t_sdxl_bf16(void) { return check_family_on("sdxl", true, "cpu-bf16", BF16_TOL); }

/* A backend that rounds rows up: 3 rows run as 4 (the last row repeated),
 * 3 come back, equal to diffusers and (within rounding) to the unpadded
 * call; 5 rows run as 8; the workspace is planned for the padded count. */
static int t_round_rows(void)
{
    golden g;
    if (golden_open(&g, "sdxl", true))
        return 1;
    tsr_backend *rb = NULL;
    tsr_unet *ru = NULL;
    tsr_cpu_options o = {.n_threads = 0, .round_rows = true};
    int rc = tsr_backend_cpu_create_ex(&o, &rb);
    if (!rc)
        rc = tsr_unet_create(tsr_unet_get_desc(g.unet), g.weights, rb, &ru);
    float *a = malloc((size_t)g.out_n * sizeof(float)), *b = malloc((size_t)g.out_n * sizeof(float));
    if (rc || !a || !b) {
        fprintf(stderr, "round_rows setup: %s\n", tsr_last_error());
        rc = 1;
    }
    if (!rc && (tsr_unet_rows(ru, 3) != 4 || tsr_unet_rows(ru, 5) != 8 || tsr_unet_rows(ru, 64) != 64 ||
                tsr_unet_rows(ru, 1) != 1 || tsr_unet_rows(g.unet, 3) != 3)) {
        fprintf(stderr, "tsr_unet_rows: unexpected counts\n");
        rc = 1;
    }
    if (!rc && (tsr_unet_forward(ru, &g.in, a) || tsr_unet_forward(g.unet, &g.in, b))) {
        fprintf(stderr, "forward: %s\n", tsr_last_error());
        rc = 1;
    }
    if (!rc) {
        rc = tsr_test_check_close("3 rows padded to 4 vs diffusers", a, g.buf[5], (size_t)g.out_n, TOL);
        rc |= tsr_test_check_close("3 rows padded to 4 vs unpadded", a, b, (size_t)g.out_n, 1e-5);
        fprintf(stderr, "padded vs unpadded: relative difference %.2e (%s)\n",
                rel_err(a, b, g.out_n),
                memcmp(a, b, (size_t)g.out_n * sizeof(float)) ? "not bit-identical" : "bit-identical");
    }
    /* one row alone needs no padding; the plan follows the padded count */
    if (!rc) {
        tsr_unet_inputs one = row_inputs(&g, 2);
        rc = tsr_unet_forward(ru, &one, a) != 0;
        const int64_t row_n = g.out_n / g.in.batch;
        rc |= tsr_test_check_close("row 2 alone", a, g.buf[5] + 2 * row_n, (size_t)row_n, TOL);
    }
    free(a);
    free(b);
    tsr_unet_free(ru);
    tsr_backend_destroy(rb);
    golden_free(&g);
    return rc;
}

static int t_sd1(void) { return check_family("sd1", true); }
static int t_sd1_inpaint(void) { return check_family("sd1_inpaint", true); }
static int t_sd2v(void) { return check_family("sd2v", true); }
static int t_sdxl(void) { return check_family("sdxl", true); }
static int t_sd1_3block(void) { return check_family("sd1_3block", false); }
static int t_sd1_3block_odd(void) { return check_family("sd1_3block_odd", false); }
static int t_sdxl_refiner(void) { return check_family("sdxl_refiner", false); }

/* 33 rows (more than the 32 the service needs): the three golden rows
 * repeated; every row must equal its reference. */
static int t_many_rows(void)
{
    golden g;
    if (golden_open(&g, "sdxl", true))
        return 1;
    const int R = 33, B = g.in.batch;
    const tsr_unet_desc *d = tsr_unet_get_desc(g.unet);
    const size_t lat = (size_t)g.in.height * g.in.width * g.in.channels;
    const size_t ctx = (size_t)g.in.context_len * d->cross_attention_dim;
    const int nt = g.in.n_time_ids ? g.in.n_time_ids : 6;
    const size_t pooled =
        (size_t)(d->projection_class_embeddings_input_dim - nt * d->addition_time_embed_dim);
    const size_t row_n = (size_t)g.out_n / (size_t)B;
    float *lat_b = malloc(R * lat * sizeof(float)), *t_b = malloc(R * sizeof(float));
    float *ctx_b = malloc(R * ctx * sizeof(float)), *te_b = malloc(R * pooled * sizeof(float));
    float *id_b = malloc(R * (size_t)nt * sizeof(float)), *out = malloc(R * row_n * sizeof(float));
    int rc = !(lat_b && t_b && ctx_b && te_b && id_b && out);
    for (int r = 0; !rc && r < R; r++) {
        int s = (r * 7) % B; /* a mixed order */
        memcpy(lat_b + r * lat, g.buf[0] + s * lat, lat * sizeof(float));
        t_b[r] = g.buf[1][s];
        memcpy(ctx_b + r * ctx, g.buf[2] + s * ctx, ctx * sizeof(float));
        memcpy(te_b + r * pooled, g.buf[3] + s * pooled, pooled * sizeof(float));
        memcpy(id_b + r * nt, g.buf[4] + s * nt, (size_t)nt * sizeof(float));
    }
    tsr_unet_inputs in = g.in;
    in.batch = R;
    in.latents = lat_b;
    in.timesteps = t_b;
    in.context = ctx_b;
    in.text_embeds = te_b;
    in.time_ids = id_b;
    if (!rc && tsr_unet_forward(g.unet, &in, out)) {
        fprintf(stderr, "forward: %s\n", tsr_last_error());
        rc = 1;
    }
    for (int r = 0; !rc && r < R; r++) {
        char what[64];
        snprintf(what, sizeof what, "row %d of %d", r, R);
        rc = tsr_test_check_close(what, out + r * row_n, g.buf[5] + ((r * 7) % B) * row_n, row_n,
                                  TOL);
    }
    free(lat_b);
    free(t_b);
    free(ctx_b);
    free(te_b);
    free(id_b);
    free(out);
    golden_free(&g);
    return rc;
}

static int expect_error(tsr_unet *u, const tsr_unet_inputs *in, float *out, const char *needle)
{
    int rc = tsr_unet_forward(u, in, out);
    if (rc != TSR_ERR_INVALID) {
        fprintf(stderr, "expected TSR_ERR_INVALID containing '%s', got %d (%s)\n", needle, rc,
                tsr_last_error());
        return 1;
    }
    if (!strstr(tsr_last_error(), needle)) {
        fprintf(stderr, "error '%s' does not mention '%s'\n", tsr_last_error(), needle);
        return 1;
    }
    return 0;
}

static int t_bad_inputs(void)
{
    golden g;
    if (golden_open(&g, "sdxl", true))
        return 1;
    float *out = malloc((size_t)g.out_n * sizeof(float));
    ASSERT_TRUE(out != NULL);
    tsr_unet_inputs in;
    int rc = 0;
#define BAD(field_change, needle)                              \
    do {                                                       \
        in = g.in;                                             \
        field_change;                                          \
        rc |= expect_error(g.unet, &in, out, needle);          \
    } while (0)
    BAD(in.channels = 9, "channels");
    BAD(in.channels = 3, "takes 4");
    BAD(in.height = 0, "latent size");
    BAD(in.width = 100000, "latent size");
    BAD(in.height = 0, "outside");
    BAD(in.batch = TSR_UNET_MAX_BATCH + 1, "rows");
    BAD(in.batch = 0, "rows");
    BAD(in.context_len = 0, "context length");
    BAD(in.latents = NULL, "required");
    BAD(in.text_embeds = NULL, "pooled");
    BAD(in.time_ids = NULL, "time_ids");
    BAD(in.n_time_ids = 12, "time_ids");
#undef BAD
    /* a failed call leaves the model usable */
    if (!rc && tsr_unet_forward(g.unet, &g.in, out) == 0)
        rc = tsr_test_check_close("after errors", out, g.buf[5], (size_t)g.out_n, TOL);
    else if (!rc)
        rc = 1;
    free(out);
    golden_free(&g);
    if (rc)
        return rc;

    /* SD1: SDXL-only inputs are refused, not ignored */
    if (golden_open(&g, "sd1", true))
        return 1;
    out = malloc((size_t)g.out_n * sizeof(float));
    ASSERT_TRUE(out != NULL);
    float te[64] = {0};
    in = g.in;
    in.text_embeds = te;
    rc = expect_error(g.unet, &in, out, "text_time");
    free(out);
    golden_free(&g);
    return rc;
}

/* Weights that do not match the config fail at create, naming the tensor. */
static int t_bad_weights(void)
{
    golden g;
    if (golden_open(&g, "sd1", true))
        return 1;
    tsr_unet_desc d = *tsr_unet_get_desc(g.unet);
    tsr_unet *u = NULL;
    int rc = 0;
    d.cross_attention_dim = 17;
    if (tsr_unet_create(&d, g.weights, g.be, &u) != TSR_ERR_FORMAT ||
        !strstr(tsr_last_error(), "attn2.to_k.weight")) {
        fprintf(stderr, "cross dim: %s\n", tsr_last_error());
        rc = 1;
    }
    tsr_unet_free(u);
    u = NULL;
    d = *tsr_unet_get_desc(g.unet);
    d.layers_per_block = 3;
    if (tsr_unet_create(&d, g.weights, g.be, &u) != TSR_ERR_NOT_FOUND ||
        !strstr(tsr_last_error(), "resnets.2")) {
        fprintf(stderr, "layers: %s\n", tsr_last_error());
        rc = 1;
    }
    tsr_unet_free(u);
    golden_free(&g);
    return rc;
}

static const tsr_test_entry tests[] = {
    {"sd1", t_sd1},
    {"sd1_inpaint", t_sd1_inpaint},
    {"sd2v", t_sd2v},
    {"sdxl", t_sdxl},
    {"sd1_3block", t_sd1_3block},
    {"sd1_3block_odd", t_sd1_3block_odd},
    {"sdxl_refiner", t_sdxl_refiner},
    {"many_rows", t_many_rows},
    {"bad_inputs", t_bad_inputs},
    {"bad_weights", t_bad_weights},
    {"sd1_f16", t_sd1_f16},
    {"sd2v_f16", t_sd2v_f16},
    {"sdxl_f16", t_sdxl_f16},
    {"sd1_3block_odd_f16", t_sd1_3block_odd_f16},
    {"sdxl_bf16", t_sdxl_bf16},
    {"round_rows", t_round_rows},
};

TSR_TEST_TABLE_MAIN(tests)
