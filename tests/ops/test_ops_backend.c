/*
 * tests/ops/test_ops_backend.c - the backend interface beyond single ops:
 * the fused conv2d/linear epilogue (bit-identical to the separate add and
 * activation on the CPU, and through the harness on the device under
 * test), what supports_op sees and how a refusal reads, the convert op,
 * events and pinned host memory (including how a wait crosses backends, on
 * a fake asynchronous backend), and the CPU's f16/bf16 storage variants.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "test.h"
#include "test_ops.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float *rand_buf(size_t n)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; p && i < n; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        p[i] = (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    }
    return p;
}

/* ---- epilogue ---- */

typedef struct epi_params {
    bool conv;
    tsr_conv2d_params p;
    tsr_epilogue e; /* residual pointer replaced by src[3] */
} epi_params;

static int run_fused(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    const epi_params *ep = c->params;
    tsr_epilogue e = ep->e;
    e.residual = s[3];
    return ep->conv ? tsr_conv2d_fused(be, s[0], s[1], s[2], &ep->p, &e, y)
                    : tsr_linear_fused(be, s[0], s[1], s[2], &e, y);
}

/* The old two- or three-call sequence on the CPU. */
static int separate(tsr_backend *be, const epi_params *ep, const tsr_tensor *x,
                    const tsr_tensor *w, const tsr_tensor *b, const tsr_tensor *r, tsr_tensor *y)
{
    TSR_TRY(ep->conv ? tsr_conv2d(be, x, w, b, &ep->p, y) : tsr_linear(be, x, w, b, y));
    if (r)
        TSR_TRY(tsr_binary(be, TSR_BINARY_ADD, y, r, y));
    if (ep->e.has_act)
        TSR_TRY(tsr_unary(be, ep->e.act, y, y));
    return TSR_OK;
}

/* One epilogue case: x, w, b and residual shape rs (rank rn, 0 = none). */
static int epi_case(const char *name, bool conv, const int64_t *xs, int xn, const int64_t *ws,
                    int wn, const int64_t *ys, int yn, const int64_t *rs, int rn, bool act,
                    tsr_unary_kind kind)
{
    tsr_backend *cpu = ops_test_backend();
    ASSERT_TRUE(cpu != NULL);
    tsr_tensor x = tsr_tensor_make(TSR_F32, xn, xs, NULL, NULL);
    tsr_tensor w = tsr_tensor_make(TSR_F32, wn, ws, NULL, NULL);
    tsr_tensor b = tsr_tensor_1d(TSR_F32, ws[0], NULL), y = tsr_tensor_make(TSR_F32, yn, ys, NULL, NULL);
    const int64_t one[1] = {1};
    tsr_tensor r = tsr_tensor_make(TSR_F32, rn ? rn : 1, rn ? rs : one, NULL, NULL);
    tsr_tensor y2 = y;
    x.data = rand_buf((size_t)tsr_tensor_numel(&x));
    w.data = rand_buf((size_t)tsr_tensor_numel(&w));
    b.data = rand_buf((size_t)ws[0]);
    r.data = rn ? rand_buf((size_t)tsr_tensor_numel(&r)) : NULL;
    y.data = malloc(tsr_tensor_nbytes(&y));
    y2.data = malloc(tsr_tensor_nbytes(&y));
    ASSERT_TRUE(x.data && w.data && b.data && (r.data || !rn) && y.data && y2.data);
    epi_params ep = {.conv = conv, .p = tsr_conv2d_params_make(1, conv ? (int)ws[1] / 2 : 0),
                     .e = {.has_act = act, .act = kind}};
    const tsr_tensor *srcs[4] = {&x, &w, &b, rn ? &r : NULL};
    int failed = 0;
    /* fused == separate, to the bit, on the CPU */
    if (run_fused(cpu, &(ops_case){.params = &ep}, srcs, &y) ||
        separate(cpu, &ep, &x, &w, &b, rn ? &r : NULL, &y2)) {
        fprintf(stderr, "%s: %s\n", name, tsr_last_error());
        failed = 1;
    } else if (memcmp(y.data, y2.data, tsr_tensor_nbytes(&y)) != 0) {
        fprintf(stderr, "%s: the fused result differs from the separate calls\n", name);
        failed = 1;
    }
    /* and the device against the golden of the separate calls */
    ops_case c = {.op = conv ? "conv2d_fused" : "linear_fused", .name = name, .n_src = 4,
                  .src = {&x, &w, &b, rn ? &r : NULL},
                  .role = {OPS_ACT, OPS_PARAM, OPS_PARAM, OPS_ACT}, .want = &y2, .y = y,
                  .tol = 1e-5, .run = run_fused, .params = &ep};
    int rc = failed ? 1 : ops_check(&c);
    free(x.data);
    free(w.data);
    free(b.data);
    free(r.data);
    free(y.data);
    free(y2.data);
    return rc;
}

int test_epilogue(void)
{
    if (!ops_device())
        return OPS_SKIP;
    /* a 3x3 conv big enough for two im2col tiles (see conv2d_tiled) */
    const int64_t xs[4] = {1, 64, 64, 160}, ws[4] = {8, 3, 3, 160}, ys[4] = {1, 64, 64, 8};
    const int64_t xs1[4] = {2, 5, 7, 12}, ws1[4] = {6, 1, 1, 12}, ys1[4] = {2, 5, 7, 6};
    const int64_t full[4] = {1, 64, 64, 8}, per_img[4] = {1, 1, 1, 8}, vec[1] = {8};
    const int64_t per_img1[4] = {2, 1, 1, 6};
    const int64_t lx[3] = {2, 9, 16}, lw[2] = {24, 16}, ly[3] = {2, 9, 24};
    const int64_t lrow[1] = {24}, lfull[3] = {2, 9, 24}, lmid[3] = {2, 1, 24};
    ops_tally t = {0};
    ops_tally_add(&t, epi_case("conv3x3_residual", true, xs, 4, ws, 4, ys, 4, full, 4, false, 0));
    ops_tally_add(&t, epi_case("conv3x3_per_image", true, xs, 4, ws, 4, ys, 4, per_img, 4, false, 0));
    ops_tally_add(&t, epi_case("conv3x3_vec_silu", true, xs, 4, ws, 4, ys, 4, vec, 1, true,
                               TSR_UNARY_SILU));
    ops_tally_add(&t, epi_case("conv1x1_per_image", true, xs1, 4, ws1, 4, ys1, 4, per_img1, 4,
                               false, 0));
    ops_tally_add(&t, epi_case("conv1x1_gelu", true, xs1, 4, ws1, 4, ys1, 4, NULL, 0, true,
                               TSR_UNARY_GELU));
    ops_tally_add(&t, epi_case("linear_residual", false, lx, 3, lw, 2, ly, 3, lfull, 3, false, 0));
    ops_tally_add(&t, epi_case("linear_row_quick_gelu", false, lx, 3, lw, 2, ly, 3, lrow, 1, true,
                               TSR_UNARY_QUICK_GELU));
    ops_tally_add(&t, epi_case("linear_mid_gelu_tanh", false, lx, 3, lw, 2, ly, 3, lmid, 3, true,
                               TSR_UNARY_GELU_TANH));
    ops_tally_add(&t, epi_case("linear_silu", false, lx, 3, lw, 2, ly, 3, NULL, 0, true,
                               TSR_UNARY_SILU));
    return ops_tally_result(&t);
}

#define EXPECT(expr, code, needle)                                                  \
    do {                                                                            \
        int rc_ = (expr);                                                           \
        if (rc_ != (code))                                                          \
            TSR_FAIL("%s: expected %d, got %d (%s)", #expr, (code), rc_,            \
                     tsr_last_error());                                             \
        if (!strstr(tsr_last_error(), needle))                                      \
            TSR_FAIL("%s: message '%s' lacks '%s'", #expr, tsr_last_error(), needle); \
    } while (0)

int test_epilogue_checks(void)
{
    tsr_backend *be = ops_test_backend();
    ASSERT_TRUE(be != NULL);
    static float buf[6][1024];
    tsr_tensor x = tsr_tensor_3d(TSR_F32, 2, 4, 8, buf[0]), w = tsr_tensor_2d(TSR_F32, 6, 8, buf[1]);
    tsr_tensor y = tsr_tensor_3d(TSR_F32, 2, 4, 6, buf[2]);
    tsr_tensor r_ok = tsr_tensor_3d(TSR_F32, 2, 1, 6, buf[3]);
    tsr_tensor r_bad = tsr_tensor_2d(TSR_F32, 3, 6, buf[3]);
    tsr_tensor r_rank = tsr_tensor_4d(TSR_F32, 1, 2, 4, 6, buf[3]);
    tsr_tensor r_f16 = tsr_tensor_3d(TSR_F16, 2, 1, 6, buf[3]);
    tsr_tensor r_over = tsr_tensor_3d(TSR_F32, 2, 4, 6, buf[2] + 3);
    ASSERT_OK(tsr_linear_fused(be, &x, &w, NULL, &(tsr_epilogue){.residual = &r_ok}, &y));
    EXPECT(tsr_linear_fused(be, &x, &w, NULL, &(tsr_epilogue){.residual = &r_bad}, &y),
           TSR_ERR_INVALID, "linear: residual");
    EXPECT(tsr_linear_fused(be, &x, &w, NULL, &(tsr_epilogue){.residual = &r_rank}, &y),
           TSR_ERR_INVALID, "higher rank");
    EXPECT(tsr_linear_fused(be, &x, &w, NULL, &(tsr_epilogue){.residual = &r_f16}, &y),
           TSR_ERR_INVALID, "residual is f16");
    EXPECT(tsr_linear_fused(be, &x, &w, NULL, &(tsr_epilogue){.residual = &r_over}, &y),
           TSR_ERR_INVALID, "overlaps input residual");
    EXPECT(tsr_linear_fused(be, &x, &w, NULL, &(tsr_epilogue){.residual = &y}, &y),
           TSR_ERR_INVALID, "overlaps");
    EXPECT(tsr_linear_fused(be, &x, &w, NULL,
                            &(tsr_epilogue){.has_act = true, .act = (tsr_unary_kind)9}, &y),
           TSR_ERR_INVALID, "activation");
    tsr_tensor cx = tsr_tensor_4d(TSR_F32, 1, 4, 4, 8, buf[0]), cw = tsr_tensor_4d(TSR_F32, 6, 3, 3, 8, buf[1]);
    tsr_tensor cy = tsr_tensor_4d(TSR_F32, 1, 4, 4, 6, buf[2]);
    tsr_tensor cr = tsr_tensor_4d(TSR_F32, 1, 4, 1, 6, buf[3]), cr_bad = tsr_tensor_4d(TSR_F32, 1, 3, 1, 6, buf[3]);
    const tsr_conv2d_params p = tsr_conv2d_params_make(1, 1);
    ASSERT_OK(tsr_conv2d_fused(be, &cx, &cw, NULL, &p, &(tsr_epilogue){.residual = &cr}, &cy));
    EXPECT(tsr_conv2d_fused(be, &cx, &cw, NULL, &p, &(tsr_epilogue){.residual = &cr_bad}, &cy),
           TSR_ERR_INVALID, "conv2d: residual");
    return 0;
}

/* ---- supports_op ---- */

/* A backend that runs attention only with head size 40 and remembers the
 * last op it was asked about. */
static tsr_op_desc seen;
static bool picky_supports(tsr_backend *b, const tsr_op_desc *d, char *why, size_t n)
{
    (void)b;
    seen = *d;
    if (d->op == TSR_OP_ATTENTION && d->dst) {
        int64_t hd = d->src[0]->ne[2] / d->p.attention.heads;
        if (hd != 40) {
            snprintf(why, n, "head size %lld has no kernel", (long long)hd);
            return false;
        }
    }
    return true;
}

static int picky_attention(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k,
                           const tsr_tensor *v, const tsr_attention_params *p, tsr_tensor *y)
{
    return ops_test_backend()->iface->attention(b, q, k, v, p, y);
}

int test_supports_desc(void)
{
    tsr_backend *cpu = ops_test_backend();
    ASSERT_TRUE(cpu != NULL);
    tsr_backend_iface iface = *cpu->iface;
    iface.supports_op = picky_supports;
    iface.attention = picky_attention;
    tsr_backend picky = *cpu;
    picky.iface = &iface;
    snprintf(picky.name, sizeof picky.name, "picky");
    static float buf[4][2 * 5 * 80];
    tsr_tensor q = tsr_tensor_3d(TSR_F32, 2, 5, 80, buf[0]), k = tsr_tensor_3d(TSR_F32, 2, 5, 80, buf[1]);
    tsr_tensor v = tsr_tensor_3d(TSR_F32, 2, 5, 80, buf[2]), y = tsr_tensor_3d(TSR_F32, 2, 5, 80, buf[3]);
    tsr_attention_params two = {.heads = 2}, four = {.heads = 4};
    ASSERT_OK(tsr_attention(&picky, &q, &k, &v, &two, &y));
    /* the backend saw the whole op */
    ASSERT_EQ(seen.op, TSR_OP_ATTENTION);
    ASSERT_EQ(seen.dtype, TSR_F32);
    ASSERT_TRUE(seen.src[0] == &q && seen.src[1] == &k && seen.src[2] == &v && seen.dst == &y);
    ASSERT_EQ(seen.p.attention.heads, 2);
    /* and its refusal names the op, the backend and the reason */
    EXPECT(tsr_attention(&picky, &q, &k, &v, &four, &y), TSR_ERR_UNSUPPORTED,
           "attention: backend picky cannot run it: head size 20 has no kernel");
    /* conv2d: parameters and the epilogue's residual reach supports_op */
    tsr_tensor cx = tsr_tensor_4d(TSR_F32, 1, 4, 4, 2, buf[0]), cw = tsr_tensor_4d(TSR_F32, 3, 3, 3, 2, buf[1]);
    tsr_tensor cy = tsr_tensor_4d(TSR_F32, 1, 2, 2, 3, buf[3]), cr = tsr_tensor_1d(TSR_F32, 3, buf[2]);
    const tsr_conv2d_params p = {2, 2, 1, 1, 0, 0, false};
    ASSERT_OK(tsr_conv2d_fused(&picky, &cx, &cw, NULL, &p,
                               &(tsr_epilogue){.residual = &cr, .has_act = true}, &cy));
    ASSERT_EQ(seen.op, TSR_OP_CONV2D);
    ASSERT_TRUE(seen.src[2] == NULL && seen.src[3] == &cr && seen.epilogue.has_act);
    ASSERT_EQ(seen.p.conv2d.stride_h, 2);
    ASSERT_EQ(seen.p.conv2d.pad_t, 1);
    /* coarse queries carry no tensors */
    ASSERT_TRUE(tsr_backend_supports(&picky, TSR_OP_ATTENTION, TSR_F16));
    ASSERT_TRUE(seen.dst == NULL && seen.src[0] == NULL && seen.dtype == TSR_F16);
    /* the CPU's refusal of an f16 weight says what is wrong */
    uint16_t h[64] = {0};
    tsr_tensor lx = tsr_tensor_2d(TSR_F32, 2, 4, buf[0]), lw16 = tsr_tensor_2d(TSR_F16, 3, 4, h);
    tsr_tensor ly = tsr_tensor_2d(TSR_F32, 2, 3, buf[3]);
    char want[160];
    snprintf(want, sizeof want, "linear: backend %s cannot run it: input 1 is f16", cpu->name);
    EXPECT(tsr_linear(cpu, &lx, &lw16, NULL, &ly), TSR_ERR_UNSUPPORTED, want);
    char why[128];
    tsr_op_desc d = {.op = TSR_OP_SOFTMAX, .dtype = TSR_BF16};
    ASSERT_TRUE(!tsr_backend_supports_op(cpu, &d, why, sizeof why));
    ASSERT_TRUE(strstr(why, "bf16") != NULL);
    d.op = (tsr_op)99;
    ASSERT_TRUE(!tsr_backend_supports_op(cpu, &d, why, sizeof why));
    ASSERT_TRUE(strstr(why, "unknown op") != NULL);
    return 0;
}

/* ---- convert ---- */

int test_convert(void)
{
    tsr_backend *be = ops_test_backend();
    ASSERT_TRUE(be != NULL);
    float src[7] = {0.0f, 1.0f, -2.5f, 65504.0f, 1e-8f, 3.14159265f, 70000.0f}, back[7];
    uint16_t h[7], bf[7], h2[7];
    tsr_tensor f = tsr_tensor_1d(TSR_F32, 7, src), fb = tsr_tensor_1d(TSR_F32, 7, back);
    tsr_tensor t16 = tsr_tensor_1d(TSR_F16, 7, h), tbf = tsr_tensor_1d(TSR_BF16, 7, bf);
    tsr_tensor t16b = tsr_tensor_1d(TSR_F16, 7, h2);
    ASSERT_OK(tsr_convert(be, &f, &t16));
    for (int i = 0; i < 7; i++)
        ASSERT_EQ(h[i], tsr_f32_to_f16(src[i]));
    ASSERT_OK(tsr_convert(be, &t16, &fb));
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(back[i], tsr_f16_to_f32(h[i]), 0);
    ASSERT_TRUE(isinf(back[6])); /* 70000 overflows f16 */
    ASSERT_OK(tsr_convert(be, &t16, &tbf)); /* 16 bits to 16 bits */
    for (int i = 0; i < 6; i++)
        ASSERT_EQ(bf[i], tsr_f32_to_bf16(tsr_f16_to_f32(h[i])));
    ASSERT_OK(tsr_convert(be, &tbf, &t16b));
    ASSERT_OK(tsr_convert(be, &t16, &t16)); /* same dtype in place: a no-op */
    tsr_tensor f6 = tsr_tensor_1d(TSR_F32, 6, back);
    EXPECT(tsr_convert(be, &f6, &t16), TSR_ERR_INVALID, "convert");
    tsr_tensor i32 = tsr_tensor_1d(TSR_I32, 7, src);
    EXPECT(tsr_convert(be, &i32, &t16), TSR_ERR_INVALID, "float dtype");
    return 0;
}

/* ---- events and pinned memory ---- */

/* A fake asynchronous backend: counts what the event wrappers call. */
static int n_create, n_record, n_wait, n_sync, n_destroy;
static int fk_create(tsr_backend *b, void **impl)
{
    (void)b;
    static int token;
    *impl = &token;
    n_create++;
    return TSR_OK;
}
static void fk_destroy(tsr_backend *b, void *impl) { (void)b, (void)impl, n_destroy++; }
static int fk_record(tsr_backend *b, void *impl) { return (void)b, (void)impl, n_record++, TSR_OK; }
static int fk_wait(tsr_backend *b, void *impl) { return (void)b, (void)impl, n_wait++, TSR_OK; }
static int fk_sync(tsr_backend *b, void *impl) { return (void)b, (void)impl, n_sync++, TSR_OK; }

int test_events_pinned(void)
{
    tsr_backend *cpu = ops_test_backend();
    ASSERT_TRUE(cpu != NULL);
    /* the CPU: events are always complete, pinned memory is plain memory */
    tsr_event *e;
    ASSERT_OK(tsr_event_create(cpu, &e));
    ASSERT_OK(tsr_event_record(e));
    ASSERT_OK(tsr_event_wait(cpu, e));
    ASSERT_OK(tsr_event_sync(e));
    float *pin = tsr_backend_host_alloc_pinned(cpu, 1000 * sizeof(float));
    ASSERT_TRUE(pin != NULL && ((uintptr_t)pin & 63) == 0);
    for (int i = 0; i < 1000; i++)
        pin[i] = (float)i;
    float *dev = tsr_backend_alloc(cpu, 1000 * sizeof(float));
    ASSERT_TRUE(dev != NULL);
    ASSERT_OK(tsr_backend_upload(cpu, dev, pin, 1000 * sizeof(float)));
    ASSERT_OK(tsr_event_record(e));
    ASSERT_OK(tsr_event_sync(e));
    ASSERT_NEAR(dev[999], 999.0, 0);
    tsr_backend_free(cpu, dev);
    tsr_backend_host_free_pinned(cpu, pin);
    tsr_backend_host_free_pinned(cpu, NULL);

    /* an asynchronous backend: a wait by a backend of its kind stays on the
     * device, a wait by another kind blocks the host */
    tsr_backend_iface iface = *cpu->iface;
    iface.event_create = fk_create;
    iface.event_destroy = fk_destroy;
    iface.event_record = fk_record;
    iface.event_wait = fk_wait;
    iface.event_sync = fk_sync;
    tsr_backend fake = *cpu;
    fake.iface = &iface;
    fake.kind = TSR_BACKEND_CUDA;
    tsr_event *fe;
    ASSERT_OK(tsr_event_create(&fake, &fe));
    ASSERT_OK(tsr_event_record(fe));
    ASSERT_OK(tsr_event_wait(&fake, fe));
    ASSERT_EQ(n_wait, 1);
    ASSERT_EQ(n_sync, 0);
    ASSERT_OK(tsr_event_wait(cpu, fe)); /* the CPU waits for the device on the host */
    ASSERT_EQ(n_sync, 1);
    ASSERT_OK(tsr_event_wait(&fake, e)); /* a CPU event never blocks a device */
    ASSERT_EQ(n_wait, 1);
    ASSERT_EQ(n_sync, 1);
    tsr_event_destroy(fe);
    ASSERT_EQ(n_create, 1);
    ASSERT_EQ(n_record, 1);
    ASSERT_EQ(n_destroy, 1);
    tsr_event_destroy(e);
    tsr_event_destroy(NULL);
    return 0;
}

/* ---- the CPU's storage variants ---- */

int test_storage_variant(void)
{
    tsr_backend *cpu = ops_test_backend();
    ASSERT_TRUE(cpu != NULL);
    ASSERT_EQ(tsr_backend_threads(cpu), 3);
    ASSERT_EQ(tsr_backend_weight_dtype(cpu), TSR_F32);
    ASSERT_EQ(tsr_backend_act_dtype(cpu), TSR_F32);
    ASSERT_TRUE(!tsr_backend_has_cap(cpu, TSR_BACKEND_CAP_ROUND_ROWS));
    static const struct {
        const char *spec;
        tsr_dtype dt;
        double tol;
    } v[2] = {{"cpu-f16", TSR_F16, 2e-3}, {"cpu-bf16", TSR_BF16, 1.5e-2}};
    for (int i = 0; i < 2; i++) {
        tsr_backend *be;
        ASSERT_OK(tsr_backend_open(v[i].spec, 2, &be));
        ASSERT_EQ(tsr_backend_weight_dtype(be), v[i].dt);
        ASSERT_EQ(tsr_backend_act_dtype(be), v[i].dt);
        ASSERT_EQ(tsr_backend_threads(be), 2);
        ASSERT_TRUE(strncmp(be->name, v[i].spec, strlen(v[i].spec)) == 0);
        ASSERT_TRUE(tsr_backend_missing_op(be) == NULL);
        /* a linear layer in the storage dtype, against f32 */
        enum { M = 5, K = 33, N = 7 };
        float *x = rand_buf(M * K), *w = rand_buf(N * K), y32[M * N], y[M * N];
        uint16_t x16[M * K], w16[N * K], y16[M * N];
        ASSERT_TRUE(x && w);
        tsr_convert_from_f32(x16, v[i].dt, x, M * K);
        tsr_convert_from_f32(w16, v[i].dt, w, N * K);
        tsr_tensor tx = tsr_tensor_2d(TSR_F32, M, K, x), tw = tsr_tensor_2d(TSR_F32, N, K, w);
        tsr_tensor ty = tsr_tensor_2d(TSR_F32, M, N, y32);
        tsr_tensor hx = tsr_tensor_2d(v[i].dt, M, K, x16), hw = tsr_tensor_2d(v[i].dt, N, K, w16);
        tsr_tensor hy = tsr_tensor_2d(v[i].dt, M, N, y16);
        ASSERT_OK(tsr_linear(cpu, &tx, &tw, NULL, &ty));
        ASSERT_OK(tsr_linear(be, &hx, &hw, NULL, &hy));
        tsr_convert_to_f32(y, y16, v[i].dt, M * N);
        ASSERT_CLOSE(v[i].spec, y, y32, M * N, v[i].tol);
        /* f32 operands pass straight through (TAESD keeps f32 weights) */
        ASSERT_OK(tsr_linear(be, &tx, &tw, NULL, &ty));
        /* mixed: f16 activations with f32 weights */
        ASSERT_OK(tsr_linear(be, &hx, &tw, NULL, &hy));
        free(x);
        free(w);
        tsr_backend_destroy(be);
    }
    tsr_backend *be = NULL;
    EXPECT(tsr_backend_open("cpu-f8", 1, &be), TSR_ERR_INVALID, "cpu-f16");
    tsr_cpu_options o = {.n_threads = 1, .storage = TSR_I32};
    EXPECT(tsr_backend_cpu_create_ex(&o, &be), TSR_ERR_INVALID, "not a float dtype");
    o = (tsr_cpu_options){.n_threads = 1, .round_rows = true};
    ASSERT_OK(tsr_backend_cpu_create_ex(&o, &be));
    ASSERT_TRUE(tsr_backend_has_cap(be, TSR_BACKEND_CAP_ROUND_ROWS));
    ASSERT_EQ(tsr_backend_act_dtype(be), TSR_F32);
    tsr_backend_destroy(be);
    return 0;
}
