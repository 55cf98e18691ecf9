/*
 * tests/ops/test_ops_checks.c - op tests that need no golden: shapes too
 * large to commit (a conv whose im2col buffer is tiled, attention over
 * several query blocks) checked against naive double loops on the backend
 * under test (through the harness, test_ops.h), and the wrappers' refusals
 * (bad shapes, partial aliasing, out-of-range ids, unsupported dtypes),
 * which are backend-independent and run on the CPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "test.h"
#include "test_ops.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *rand_buf(size_t n)
{
    float *p = malloc(n * sizeof(float));
    if (p)
        for (size_t i = 0; i < n; i++)
            p[i] = frand();
    return p;
}

static float *nan_buf(size_t n)
{
    float *p = malloc(n * sizeof(float));
    if (p)
        for (size_t i = 0; i < n; i++)
            p[i] = NAN;
    return p;
}

/* Naive NHWC/OHWI conv in double. */
static void conv_ref(const float *x, const float *w, const float *bias, float *y, int n, int h,
                     int wd, int ci, int co, int kh, int kw, const tsr_conv2d_params *p, int ho,
                     int wo)
{
    for (int b = 0; b < n; b++)
        for (int oh = 0; oh < ho; oh++)
            for (int ow = 0; ow < wo; ow++)
                for (int o = 0; o < co; o++) {
                    double s = bias ? bias[o] : 0.0;
                    for (int a = 0; a < kh; a++) {
                        int ih = oh * p->stride_h - p->pad_t + a;
                        if (ih < 0 || ih >= h)
                            continue;
                        for (int c = 0; c < kw; c++) {
                            int iw = ow * p->stride_w - p->pad_l + c;
                            if (iw < 0 || iw >= wd)
                                continue;
                            const float *xp = x + (((size_t)b * h + ih) * wd + iw) * ci;
                            const float *wp = w + (((size_t)o * kh + a) * kw + c) * ci;
                            for (int i = 0; i < ci; i++)
                                s += (double)xp[i] * wp[i];
                        }
                    }
                    y[(((size_t)b * ho + oh) * wo + ow) * co + o] = (float)s;
                }
}

static int run_conv(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_conv2d(be, s[0], s[1], s[2], c->params, y);
}

int test_conv2d_tiled(void)
{
    if (!ops_device())
        return OPS_SKIP;
    /* 64x64x160 with a 3x3 kernel: one output row of columns is 64*1440
     * floats, so the 16 MiB column buffer holds 45 of 64 rows: two tiles. */
    const int n = 1, h = 64, wd = 64, ci = 160, co = 8;
    const tsr_conv2d_params ps[2] = {tsr_conv2d_params_make(1, 1), {2, 2, 0, 0, 1, 1, false}};
    float *x = rand_buf((size_t)n * h * wd * ci), *w = rand_buf((size_t)co * 9 * ci);
    float *bias = rand_buf(co);
    float *ref = nan_buf((size_t)n * h * wd * co);
    ASSERT_TRUE(x && w && bias && ref);
    ops_tally tally = {0};
    for (int i = 0; i < 2; i++) {
        const tsr_conv2d_params *p = &ps[i];
        int ho = (h + p->pad_t + p->pad_b - 3) / p->stride_h + 1;
        int wo = (wd + p->pad_l + p->pad_r - 3) / p->stride_w + 1;
        tsr_tensor tx = tsr_tensor_4d(TSR_F32, n, h, wd, ci, x);
        tsr_tensor tw = tsr_tensor_4d(TSR_F32, co, 3, 3, ci, w);
        tsr_tensor tb = tsr_tensor_1d(TSR_F32, co, bias);
        tsr_tensor tr = tsr_tensor_4d(TSR_F32, n, ho, wo, co, ref);
        conv_ref(x, w, bias, ref, n, h, wd, ci, co, 3, 3, p, ho, wo);
        ops_case c = {.op = "conv2d_tiled", .name = i ? "s2" : "s1", .n_src = 3,
                      .src = {&tx, &tw, &tb}, .role = {OPS_ACT, OPS_PARAM, OPS_PARAM},
                      .want = &tr, .y = tr, .tol = 1e-5, .run = run_conv, .params = p};
        ops_tally_add(&tally, ops_check(&c));
    }
    free(x);
    free(w);
    free(bias);
    free(ref);
    return ops_tally_result(&tally);
}

static void attn_ref(const float *q, const float *k, const float *v, float *y, int b, int lq,
                     int lk, int heads, int d, bool causal)
{
    int hd = heads * d;
    double *s = malloc((size_t)lk * sizeof(double));
    if (!s)
        return;
    for (int bi = 0; bi < b; bi++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < lq; i++) {
                int nv = causal ? i + (lk - lq) + 1 : lk;
                nv = nv < 0 ? 0 : (nv > lk ? lk : nv);
                double m = -INFINITY, sum = 0;
                for (int j = 0; j < nv; j++) {
                    double dot = 0;
                    for (int c = 0; c < d; c++)
                        dot += (double)q[((size_t)bi * lq + i) * hd + h * d + c] *
                               k[((size_t)bi * lk + j) * hd + h * d + c];
                    s[j] = dot / sqrt((double)d);
                    m = s[j] > m ? s[j] : m;
                }
                for (int j = 0; j < nv; j++)
                    sum += (s[j] = exp(s[j] - m));
                for (int c = 0; c < d; c++) {
                    double acc = 0;
                    for (int j = 0; j < nv; j++)
                        acc += s[j] * v[((size_t)bi * lk + j) * hd + h * d + c];
                    y[((size_t)bi * lq + i) * hd + h * d + c] = nv ? (float)(acc / sum) : 0.0f;
                }
            }
    free(s);
}

static int run_attn(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_attention(be, s[0], s[1], s[2], c->params, y);
}

int test_attention_long(void)
{
    if (!ops_device())
        return OPS_SKIP;
    /* 600 keys: blocks of 256 queries, so 3 blocks per head, the last partial */
    const int b = 2, lq = 600, lk = 600, heads = 2, d = 16, hd = heads * d;
    float *q = rand_buf((size_t)b * lq * hd), *k = rand_buf((size_t)b * lk * hd);
    float *v = rand_buf((size_t)b * lk * hd);
    float *ref = nan_buf((size_t)b * lq * hd);
    ASSERT_TRUE(q && k && v && ref);
    ops_tally tally = {0};
    for (int causal = 0; causal < 2; causal++) {
        tsr_tensor tq = tsr_tensor_3d(TSR_F32, b, lq, hd, q), tk = tsr_tensor_3d(TSR_F32, b, lk, hd, k);
        tsr_tensor tv = tsr_tensor_3d(TSR_F32, b, lk, hd, v), tr = tsr_tensor_3d(TSR_F32, b, lq, hd, ref);
        tsr_attention_params p = {.heads = heads, .scale = 0.0f, .causal = causal != 0};
        attn_ref(q, k, v, ref, b, lq, lk, heads, d, causal != 0);
        ops_case c = {.op = "attention_long", .name = causal ? "causal" : "full", .n_src = 3,
                      .src = {&tq, &tk, &tv}, .role = {OPS_ACT, OPS_ACT, OPS_ACT}, .want = &tr,
                      .y = tr, .tol = 1e-5, .run = run_attn, .params = &p};
        ops_tally_add(&tally, ops_check(&c));
    }
    free(q);
    free(k);
    free(v);
    free(ref);
    return ops_tally_result(&tally);
}

int test_embedding_range(void)
{
    tsr_backend *be = ops_test_backend();
    ASSERT_TRUE(be != NULL);
    float table[4 * 3] = {0}, out[2 * 3];
    int32_t ids[2] = {1, 4};
    tsr_tensor tid = tsr_tensor_1d(TSR_I32, 2, ids), tt = tsr_tensor_2d(TSR_F32, 4, 3, table);
    tsr_tensor ty = tsr_tensor_2d(TSR_F32, 2, 3, out);
    ASSERT_EQ(tsr_embedding(be, &tid, &tt, &ty), TSR_ERR_RANGE);
    ASSERT_TRUE(strstr(tsr_last_error(), "embedding") != NULL);
    ids[1] = -1;
    ASSERT_EQ(tsr_embedding(be, &tid, &tt, &ty), TSR_ERR_RANGE);
    ids[1] = 3;
    table[3 * 3 + 2] = 7.0f;
    ASSERT_OK(tsr_embedding(be, &tid, &tt, &ty));
    ASSERT_NEAR(out[5], 7.0, 0);
    /* float ids are refused */
    tsr_tensor fid = tsr_tensor_1d(TSR_F32, 2, table);
    ASSERT_EQ(tsr_embedding(be, &fid, &tt, &ty), TSR_ERR_INVALID);
    return 0;
}

#define EXPECT_REJECT(expr, opname)                                                 \
    do {                                                                            \
        int rc_ = (expr);                                                           \
        if (rc_ != TSR_ERR_INVALID && rc_ != TSR_ERR_RANGE)                         \
            TSR_FAIL("%s: expected a rejection, got %d", #expr, rc_);               \
        if (!strstr(tsr_last_error(), opname))                                      \
            TSR_FAIL("%s: message '%s' does not name %s", #expr, tsr_last_error(),  \
                     opname);                                                       \
    } while (0)

int test_reject_shapes(void)
{
    tsr_backend *be = ops_test_backend();
    ASSERT_TRUE(be != NULL);
    static float buf[8][4096];
    tsr_tensor x = tsr_tensor_4d(TSR_F32, 1, 8, 8, 4, buf[0]);
    tsr_tensor w = tsr_tensor_4d(TSR_F32, 6, 3, 3, 4, buf[1]);
    tsr_tensor w_bad = tsr_tensor_4d(TSR_F32, 6, 3, 3, 5, buf[1]);
    tsr_tensor bias = tsr_tensor_1d(TSR_F32, 6, buf[2]), bias_bad = tsr_tensor_1d(TSR_F32, 5, buf[2]);
    tsr_tensor y = tsr_tensor_4d(TSR_F32, 1, 8, 8, 6, buf[3]);
    tsr_tensor y_bad = tsr_tensor_4d(TSR_F32, 1, 7, 8, 6, buf[3]);
    tsr_conv2d_params p = tsr_conv2d_params_make(1, 1), p_bad = tsr_conv2d_params_make(0, 1);
    tsr_conv2d_params p_neg = {1, 1, -1, 0, 0, 0, false};
    ASSERT_OK(tsr_conv2d(be, &x, &w, &bias, &p, &y));
    EXPECT_REJECT(tsr_conv2d(be, &x, &w_bad, &bias, &p, &y), "conv2d");
    EXPECT_REJECT(tsr_conv2d(be, &x, &w, &bias_bad, &p, &y), "conv2d");
    EXPECT_REJECT(tsr_conv2d(be, &x, &w, &bias, &p, &y_bad), "conv2d");
    EXPECT_REJECT(tsr_conv2d(be, &x, &w, &bias, &p_bad, &y), "conv2d");
    EXPECT_REJECT(tsr_conv2d(be, &x, &w, &bias, &p_neg, &y), "conv2d");
    /* circular padding wraps once at most: a pad of 9 around 8 rows is refused */
    tsr_tensor y_big = tsr_tensor_4d(TSR_F32, 1, 24, 8, 6, buf[3]);
    tsr_conv2d_params p_wrap = {1, 1, 9, 1, 9, 1, true};
    EXPECT_REJECT(tsr_conv2d(be, &x, &w, &bias, &p_wrap, &y_big), "conv2d");
    p_wrap.pad_t = p_wrap.pad_b = 8; /* exactly the size: allowed (torch too) */
    tsr_tensor y_ok = tsr_tensor_4d(TSR_F32, 1, 22, 8, 6, buf[3]);
    ASSERT_OK(tsr_conv2d(be, &x, &w, &bias, &p_wrap, &y_ok));
    tsr_tensor x3 = tsr_tensor_3d(TSR_F32, 1, 64, 4, buf[0]);
    EXPECT_REJECT(tsr_conv2d(be, &x3, &w, &bias, &p, &y), "conv2d");
    tsr_tensor big_k = tsr_tensor_4d(TSR_F32, 6, 11, 11, 4, buf[1]);
    tsr_conv2d_params p0 = tsr_conv2d_params_make(1, 0);
    EXPECT_REJECT(tsr_conv2d(be, &x, &big_k, NULL, &p0, &y), "conv2d");
    tsr_tensor hostile = tsr_tensor_4d(TSR_F32, 1, INT64_C(1) << 40, 8, 4, buf[0]);
    EXPECT_REJECT(tsr_conv2d(be, &hostile, &w, &bias, &p, &y), "conv2d");
    tsr_tensor zero = tsr_tensor_4d(TSR_F32, 1, 0, 8, 4, buf[0]);
    EXPECT_REJECT(tsr_conv2d(be, &zero, &w, &bias, &p, &y), "conv2d");
    tsr_tensor nodata = tsr_tensor_4d(TSR_F32, 1, 8, 8, 4, NULL);
    EXPECT_REJECT(tsr_conv2d(be, &nodata, &w, &bias, &p, &y), "conv2d");
    EXPECT_REJECT(tsr_conv2d(be, &x, &w, &bias, NULL, &y), "conv2d");

    /* linear */
    tsr_tensor lx = tsr_tensor_3d(TSR_F32, 2, 5, 7, buf[0]), lw = tsr_tensor_2d(TSR_F32, 3, 7, buf[1]);
    tsr_tensor ly = tsr_tensor_3d(TSR_F32, 2, 5, 3, buf[3]);
    tsr_tensor lw_bad = tsr_tensor_2d(TSR_F32, 3, 6, buf[1]), ly_bad = tsr_tensor_3d(TSR_F32, 2, 5, 4, buf[3]);
    ASSERT_OK(tsr_linear(be, &lx, &lw, NULL, &ly));
    EXPECT_REJECT(tsr_linear(be, &lx, &lw_bad, NULL, &ly), "linear");
    EXPECT_REJECT(tsr_linear(be, &lx, &lw, NULL, &ly_bad), "linear");
    EXPECT_REJECT(tsr_linear(be, &lx, &lw, &bias, &ly), "linear");
    tsr_tensor lx16 = lx;
    lx16.dtype = TSR_F16;
    EXPECT_REJECT(tsr_linear(be, &lx16, &lw, NULL, &ly), "linear");
    /* an activation that is no float says what was expected (once "x is
     * i32, expected i32": its own dtype) */
    tsr_tensor lxi = lx;
    lxi.dtype = TSR_I32;
    EXPECT_REJECT(tsr_linear(be, &lxi, &lw, NULL, &ly), "x is i32, expected a float dtype");

    /* matmul */
    tsr_tensor ma = tsr_tensor_3d(TSR_F32, 2, 3, 4, buf[0]), mb = tsr_tensor_3d(TSR_F32, 3, 4, 5, buf[1]);
    tsr_tensor my = tsr_tensor_3d(TSR_F32, 2, 3, 5, buf[3]);
    EXPECT_REJECT(tsr_matmul(be, &ma, &mb, false, false, 1.0f, &my), "matmul");
    tsr_tensor mb2 = tsr_tensor_3d(TSR_F32, 2, 5, 5, buf[1]);
    EXPECT_REJECT(tsr_matmul(be, &ma, &mb2, false, false, 1.0f, &my), "matmul");
    EXPECT_REJECT(tsr_matmul(be, &ma, &mb2, false, false, NAN, &my), "matmul");

    /* norms, softmax */
    tsr_tensor gx = tsr_tensor_4d(TSR_F32, 1, 4, 4, 12, buf[0]), gy = tsr_tensor_4d(TSR_F32, 1, 4, 4, 12, buf[3]);
    tsr_tensor g12 = tsr_tensor_1d(TSR_F32, 12, buf[1]), g10 = tsr_tensor_1d(TSR_F32, 10, buf[1]);
    ASSERT_OK(tsr_group_norm(be, &gx, &g12, &g12, 4, 1e-5f, false, &gy));
    EXPECT_REJECT(tsr_group_norm(be, &gx, &g12, &g12, 5, 1e-5f, false, &gy), "group_norm");
    EXPECT_REJECT(tsr_group_norm(be, &gx, &g10, &g12, 4, 1e-5f, false, &gy), "group_norm");
    EXPECT_REJECT(tsr_group_norm(be, &gx, &g12, &g12, 4, -1.0f, false, &gy), "group_norm");
    EXPECT_REJECT(tsr_layer_norm(be, &gx, &g10, NULL, 1e-5f, &gy), "layer_norm");
    EXPECT_REJECT(tsr_softmax(be, &gx, &y), "softmax");

    /* attention */
    tsr_tensor q = tsr_tensor_3d(TSR_F32, 2, 5, 12, buf[0]), k = tsr_tensor_3d(TSR_F32, 2, 7, 12, buf[1]);
    tsr_tensor v = tsr_tensor_3d(TSR_F32, 2, 7, 12, buf[2]), ay = tsr_tensor_3d(TSR_F32, 2, 5, 12, buf[3]);
    tsr_tensor v_bad = tsr_tensor_3d(TSR_F32, 2, 6, 12, buf[2]), k_bad = tsr_tensor_3d(TSR_F32, 1, 7, 12, buf[1]);
    tsr_attention_params ap = {.heads = 3}, ap_bad = {.heads = 5};
    ASSERT_OK(tsr_attention(be, &q, &k, &v, &ap, &ay));
    EXPECT_REJECT(tsr_attention(be, &q, &k, &v_bad, &ap, &ay), "attention");
    EXPECT_REJECT(tsr_attention(be, &q, &k_bad, &v, &ap, &ay), "attention");
    EXPECT_REJECT(tsr_attention(be, &q, &k, &v, &ap_bad, &ay), "attention");

    /* elementwise */
    tsr_tensor ea = tsr_tensor_3d(TSR_F32, 2, 3, 4, buf[0]), eb = tsr_tensor_2d(TSR_F32, 2, 4, buf[1]);
    tsr_tensor ey = tsr_tensor_3d(TSR_F32, 2, 3, 4, buf[3]), eb4 = tsr_tensor_4d(TSR_F32, 1, 2, 3, 4, buf[1]);
    EXPECT_REJECT(tsr_binary(be, TSR_BINARY_ADD, &ea, &eb, &ey), "add");
    EXPECT_REJECT(tsr_binary(be, TSR_BINARY_MUL, &ea, &eb4, &ey), "mul");
    EXPECT_REJECT(tsr_binary(be, (tsr_binary_kind)7, &ea, &ea, &ey), "binary");
    EXPECT_REJECT(tsr_unary(be, (tsr_unary_kind)9, &ea, &ey), "unary");
    tsr_tensor odd = tsr_tensor_2d(TSR_F32, 2, 5, buf[0]), gy2 = tsr_tensor_2d(TSR_F32, 2, 2, buf[3]);
    EXPECT_REJECT(tsr_geglu(be, &odd, &gy2), "geglu");
    tsr_tensor ca = tsr_tensor_2d(TSR_F32, 2, 3, buf[0]), cb = tsr_tensor_2d(TSR_F32, 3, 3, buf[1]);
    tsr_tensor cy = tsr_tensor_2d(TSR_F32, 2, 6, buf[3]);
    EXPECT_REJECT(tsr_concat(be, &ca, &cb, &cy), "concat");
    tsr_tensor ux = tsr_tensor_4d(TSR_F32, 1, 2, 3, 4, buf[0]), uy = tsr_tensor_4d(TSR_F32, 1, 4, 5, 4, buf[3]);
    EXPECT_REJECT(tsr_upsample_nearest2x(be, &ux, &uy), "upsample_nearest2x");
    tsr_tensor tt = tsr_tensor_1d(TSR_F32, 2, buf[0]), ty = tsr_tensor_2d(TSR_F32, 2, 8, buf[3]);
    tsr_timestep_params tp = {.dim = 8}, tp_bad = {.dim = 8, .downscale_freq_shift = 4.0f};
    ASSERT_OK(tsr_timestep_embedding(be, &tt, &tp, &ty));
    EXPECT_REJECT(tsr_timestep_embedding(be, &tt, &tp_bad, &ty), "timestep_embedding");
    tp.dim = 9;
    EXPECT_REJECT(tsr_timestep_embedding(be, &tt, &tp, &ty), "timestep_embedding");
    return 0;
}

int test_aliasing(void)
{
    tsr_backend *be = ops_test_backend();
    ASSERT_TRUE(be != NULL);
    float buf[64];
    for (int i = 0; i < 64; i++)
        buf[i] = (float)(i % 7) - 3.0f;
    /* in-place softmax equals out-of-place */
    float ref[16];
    tsr_tensor x = tsr_tensor_2d(TSR_F32, 2, 8, buf), r = tsr_tensor_2d(TSR_F32, 2, 8, ref);
    ASSERT_OK(tsr_softmax(be, &x, &r));
    ASSERT_OK(tsr_softmax(be, &x, &x));
    ASSERT_CLOSE("softmax_inplace", buf, ref, 16, 0);
    /* in-place add with broadcast */
    tsr_tensor a = tsr_tensor_2d(TSR_F32, 4, 4, buf + 16), bb = tsr_tensor_1d(TSR_F32, 4, buf + 40);
    float before = buf[16 + 5];
    ASSERT_OK(tsr_binary(be, TSR_BINARY_ADD, &a, &bb, &a));
    ASSERT_NEAR(buf[16 + 5], before + buf[40 + 1], 1e-6);
    /* partial overlap is refused */
    tsr_tensor shifted = tsr_tensor_2d(TSR_F32, 2, 8, buf + 4);
    EXPECT_REJECT(tsr_softmax(be, &x, &shifted), "softmax");
    tsr_tensor s8 = tsr_tensor_1d(TSR_F32, 8, buf), s8b = tsr_tensor_1d(TSR_F32, 8, buf + 1);
    EXPECT_REJECT(tsr_scale(be, &s8, 2.0f, &s8b), "scale");
    /* ops that never alias refuse even an exact alias */
    tsr_tensor la = tsr_tensor_2d(TSR_F32, 4, 4, buf), lw = tsr_tensor_2d(TSR_F32, 4, 4, buf + 16);
    EXPECT_REJECT(tsr_linear(be, &la, &lw, NULL, &la), "linear");
    return 0;
}

int test_supports_op(void)
{
    tsr_backend *be = ops_test_backend();
    ASSERT_TRUE(be != NULL);
    for (int op = 0; op < TSR_OP_COUNT; op++) {
        ASSERT_TRUE(tsr_backend_supports(be, (tsr_op)op, TSR_F32));
        /* the f32 backend computes nothing in f16, but converts to it */
        ASSERT_EQ(tsr_backend_supports(be, (tsr_op)op, TSR_F16), op == TSR_OP_CONVERT);
        ASSERT_TRUE(strcmp(tsr_op_name((tsr_op)op), "unknown") != 0);
    }
    ASSERT_STR_EQ(tsr_op_name(TSR_OP_CONV2D), "conv2d");
    ASSERT_STR_EQ(tsr_op_name(TSR_OP_COUNT), "unknown");
    /* f16 tensors pass validation but the CPU backend refuses them */
    uint16_t h[8] = {0};
    tsr_tensor x = tsr_tensor_1d(TSR_F16, 8, h), y = tsr_tensor_1d(TSR_F16, 8, h);
    ASSERT_EQ(tsr_scale(be, &x, 2.0f, &y), TSR_ERR_UNSUPPORTED);
    /* a backend with a NULL op */
    tsr_backend_iface empty;
    memset(&empty, 0, sizeof empty);
    tsr_backend fake = *be;
    fake.iface = &empty;
    float f[8] = {0};
    tsr_tensor fx = tsr_tensor_1d(TSR_F32, 8, f);
    ASSERT_EQ(tsr_scale(&fake, &fx, 2.0f, &fx), TSR_ERR_UNSUPPORTED);
    ASSERT_TRUE(strstr(tsr_last_error(), "scale") != NULL);
    return 0;
}
