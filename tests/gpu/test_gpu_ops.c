/*
 * tests/gpu/test_gpu_ops.c - every op at the shapes of SD1.5, SD2.x and SDXL
 * (UNet, VAE, text encoders) on the device under test (TSR_TEST_DEVICE,
 * "cuda" in tests/gpu/run.sh) against the CPU backend, through the shared
 * op harness (tests/ops/ops_harness.c): random inputs, never zeros, fresh
 * per case; the output is poisoned (NaN) before the op runs; any NaN fails;
 * relative error (to max |reference|) at most 3e-3 in f16.
 *
 * One ctest entry per op family (label gpu); each prints one line per shape
 * so run.sh's log shows which shape failed.  Without a device a case exits
 * 77 (skipped); on "cpu" they check the harness itself (slow: the CPU
 * computes both sides), so ctest runs them only with TSR_TEST_DEVICE set.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_ops.h"

#define TOL 3e-3

static uint64_t seed = 0x2545f4914f6cdd1dull;

/* uniform in [-a, a) \ {0}, a fresh stream per buffer */
static float *rnd(size_t n, float a)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; p && i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        float v = ((float)(seed >> 40) / 16777216.0f * 2.0f - 1.0f) * a;
        p[i] = v == 0.0f ? a * 1e-3f : v;
    }
    return p;
}

typedef struct bufs {
    float *p[OPS_MAX_SRC];
    int n;
} bufs;

static float *keep(bufs *b, float *p)
{
    b->p[b->n++] = p;
    return p;
}

static void release(bufs *b)
{
    for (int i = 0; i < b->n; i++)
        free(b->p[i]);
    b->n = 0;
}

static tsr_tensor t4(int64_t a, int64_t b_, int64_t c, int64_t d, float *p)
{
    return tsr_tensor_4d(TSR_F32, a, b_, c, d, p);
}

static int finish(ops_tally *t, const char *op, const char *name, int rc)
{
    printf("%-18s %-34s %s\n", op, name, rc == OPS_SKIP ? "skip" : rc ? "FAIL" : "ok");
    fflush(stdout);
    ops_tally_add(t, rc);
    return rc;
}

/* ---- conv2d ---- */

typedef struct conv_p {
    tsr_conv2d_params p;
    tsr_epilogue e;
} conv_p;

static int run_conv(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    const conv_p *cp = c->params;
    tsr_epilogue e = cp->e;
    e.residual = s[3];
    return tsr_conv2d_fused(be, s[0], s[1], s[2], &cp->p, &e, y);
}

static int test_conv2d(void)
{
    const struct {
        const char *name;
        int64_t n, h, w, ci, co, k;
        int stride, pt, pl, pb, pr, resid, circ; /* circ: circular padding (tiling) */
    } cs[] = {
        {"sd15 unet 64x64x320 3x3", 2, 64, 64, 320, 320, 3, 1, 1, 1, 1, 1, 1, 0},
        {"sd15 unet down 64->32 s2", 2, 64, 64, 320, 320, 3, 2, 1, 1, 1, 1, 0, 0},
        {"sd15 unet 32x32 640->640", 2, 32, 32, 640, 640, 3, 1, 1, 1, 1, 1, 0, 0},
        {"sd15 unet 16x16 1920->1280", 2, 16, 16, 1920, 1280, 3, 1, 1, 1, 1, 1, 0, 0},
        {"sd15 unet 8x8 2560->1280 1x1", 2, 8, 8, 2560, 1280, 1, 1, 0, 0, 0, 0, 1, 0},
        {"sd15 proj_in 64x64 320->320 1x1", 2, 64, 64, 320, 320, 1, 1, 0, 0, 0, 0, 0, 0},
        {"unet conv_in 64x64 4->320", 2, 64, 64, 4, 320, 3, 1, 1, 1, 1, 1, 0, 0},
        {"unet conv_out 64x64 320->4", 2, 64, 64, 320, 4, 3, 1, 1, 1, 1, 1, 0, 0},
        {"sdxl unet 128x128x320", 1, 128, 128, 320, 320, 3, 1, 1, 1, 1, 1, 0, 0},
        {"vae dec 256x256 512->256", 1, 256, 256, 512, 256, 3, 1, 1, 1, 1, 1, 0, 0},
        {"vae dec 512x512x128", 1, 512, 512, 128, 128, 3, 1, 1, 1, 1, 1, 0, 0},
        {"vae enc down pad(0,1) s2", 1, 256, 256, 128, 128, 3, 2, 0, 0, 1, 1, 0, 0},
        {"vae dec conv_out 128->3", 1, 256, 256, 128, 3, 3, 1, 1, 1, 1, 1, 0, 0},
        /* seamless tiling: k_pad wraps into scratch, then an unpadded cuDNN conv */
        {"sd15 unet 64x64x320 3x3 circular", 2, 64, 64, 320, 320, 3, 1, 1, 1, 1, 1, 1, 1},
        {"sd15 unet down 64->32 s2 circular", 2, 64, 64, 320, 320, 3, 2, 1, 1, 1, 1, 0, 1},
        {"unet down 33x17 s2 circular", 2, 33, 17, 64, 64, 3, 2, 1, 1, 1, 1, 0, 1},
        {"vae dec 256x256 512->256 circular", 1, 256, 256, 512, 256, 3, 1, 1, 1, 1, 1, 0, 1},
    };
    ops_tally t = {0};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const int64_t ho = (cs[i].h + cs[i].pt + cs[i].pb - cs[i].k) / cs[i].stride + 1;
        const int64_t wo = (cs[i].w + cs[i].pl + cs[i].pr - cs[i].k) / cs[i].stride + 1;
        bufs b = {0};
        const float wa = 1.0f / sqrtf((float)(cs[i].k * cs[i].k * cs[i].ci));
        tsr_tensor x = t4(cs[i].n, cs[i].h, cs[i].w, cs[i].ci,
                          keep(&b, rnd((size_t)(cs[i].n * cs[i].h * cs[i].w * cs[i].ci), 1.0f)));
        tsr_tensor w = t4(cs[i].co, cs[i].k, cs[i].k, cs[i].ci,
                          keep(&b, rnd((size_t)(cs[i].co * cs[i].k * cs[i].k * cs[i].ci), wa)));
        tsr_tensor bias = tsr_tensor_1d(TSR_F32, cs[i].co, keep(&b, rnd((size_t)cs[i].co, 0.5f)));
        tsr_tensor r = t4(cs[i].n, ho, wo, cs[i].co,
                          cs[i].resid ? keep(&b, rnd((size_t)(cs[i].n * ho * wo * cs[i].co), 1.0f)) : NULL);
        conv_p cp = {.p = {cs[i].stride, cs[i].stride, cs[i].pt, cs[i].pl, cs[i].pb, cs[i].pr,
                           cs[i].circ != 0}};
        if (cs[i].resid) {
            cp.e.has_act = true;
            cp.e.act = TSR_UNARY_SILU;
        }
        ops_case c = {.op = "conv2d", .name = cs[i].name, .n_src = 4,
                      .src = {&x, &w, &bias, cs[i].resid ? &r : NULL},
                      .role = {OPS_ACT, OPS_PARAM, OPS_PARAM, OPS_ACT},
                      .y = t4(cs[i].n, ho, wo, cs[i].co, NULL), .tol = TOL, .run = run_conv,
                      .params = &cp};
        finish(&t, "conv2d", cs[i].name, ops_check(&c));
        release(&b);
    }
    return ops_tally_result(&t);
}

/* ---- linear, matmul ---- */

static int run_linear(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    tsr_epilogue e = *(const tsr_epilogue *)c->params;
    e.residual = s[3];
    return tsr_linear_fused(be, s[0], s[1], s[2], &e, y);
}

static int test_linear(void)
{
    const struct {
        const char *name;
        int64_t rows, in, out;
        int bias, resid, act;
    } cs[] = {
        {"sd15 q 2x4096 320->320", 2 * 4096, 320, 320, 0, 0, -1},
        {"sd15 to_out +res 4096x320", 2 * 4096, 320, 320, 1, 1, -1},
        {"sd15 geglu proj 320->2560", 2 * 4096, 320, 2560, 1, 0, -1},
        {"sd15 ff out 1280->320", 2 * 4096, 1280, 320, 1, 1, -1},
        {"sd15 k ctx 77x768->320", 2 * 77, 768, 320, 0, 0, -1},
        {"sdxl k ctx 77x2048->1280", 2 * 77, 2048, 1280, 0, 0, -1},
        {"sdxl 1024x1280->1280", 2 * 1024, 1280, 1280, 1, 0, -1},
        {"time emb 320->1280 silu", 2, 320, 1280, 1, 0, TSR_UNARY_SILU},
        {"clip mlp 77x768->3072 qgelu", 2 * 77, 768, 3072, 1, 0, TSR_UNARY_QUICK_GELU},
        {"bigG mlp 77x1280->5120 gelu", 2 * 77, 1280, 5120, 1, 0, TSR_UNARY_GELU},
    };
    ops_tally t = {0};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        bufs b = {0};
        const int64_t rows = cs[i].rows, in = cs[i].in, out = cs[i].out;
        tsr_tensor x = tsr_tensor_2d(TSR_F32, rows, in, keep(&b, rnd((size_t)(rows * in), 1.0f)));
        tsr_tensor w = tsr_tensor_2d(TSR_F32, out, in,
                                     keep(&b, rnd((size_t)(out * in), 1.0f / sqrtf((float)in))));
        tsr_tensor bias = tsr_tensor_1d(TSR_F32, out, cs[i].bias ? keep(&b, rnd((size_t)out, 0.5f)) : NULL);
        tsr_tensor r = tsr_tensor_2d(TSR_F32, rows, out,
                                     cs[i].resid ? keep(&b, rnd((size_t)(rows * out), 1.0f)) : NULL);
        tsr_epilogue e = {0};
        if (cs[i].act >= 0) {
            e.has_act = true;
            e.act = (tsr_unary_kind)cs[i].act;
        }
        ops_case c = {.op = "linear", .name = cs[i].name, .n_src = 4,
                      .src = {&x, &w, cs[i].bias ? &bias : NULL, cs[i].resid ? &r : NULL},
                      .role = {OPS_ACT, OPS_PARAM, OPS_PARAM, OPS_ACT},
                      .y = tsr_tensor_2d(TSR_F32, rows, out, NULL), .tol = TOL, .run = run_linear,
                      .params = &e};
        finish(&t, "linear", cs[i].name, ops_check(&c));
        release(&b);
    }
    return ops_tally_result(&t);
}

typedef struct mm_p {
    bool ta, tb;
    float alpha;
} mm_p;

static int run_matmul(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    const mm_p *p = c->params;
    return tsr_matmul(be, s[0], s[1], p->ta, p->tb, p->alpha, y);
}

static int test_matmul(void)
{
    const struct {
        const char *name;
        int64_t ba, bb, m, k, n;
        bool ta, tb;
    } cs[] = {
        {"16x 1024x64 . 64x77^T", 16, 16, 1024, 64, 77, false, true},
        {"batch-1 b broadcast", 8, 1, 256, 320, 320, false, false},
        {"a^T 40x4096 . 4096x40", 4, 4, 40, 4096, 40, true, false},
        {"rank-2 2048x768 . 768x768", 1, 1, 2048, 768, 768, false, false},
    };
    ops_tally t = {0};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        bufs b = {0};
        const int64_t m = cs[i].m, k = cs[i].k, n = cs[i].n, bt = cs[i].ba > cs[i].bb ? cs[i].ba : cs[i].bb;
        tsr_tensor a = cs[i].ta ? tsr_tensor_3d(TSR_F32, cs[i].ba, k, m, NULL)
                                : tsr_tensor_3d(TSR_F32, cs[i].ba, m, k, NULL);
        tsr_tensor bm = cs[i].tb ? tsr_tensor_3d(TSR_F32, cs[i].bb, n, k, NULL)
                                 : tsr_tensor_3d(TSR_F32, cs[i].bb, k, n, NULL);
        a.data = keep(&b, rnd((size_t)(cs[i].ba * m * k), 1.0f));
        bm.data = keep(&b, rnd((size_t)(cs[i].bb * k * n), 1.0f));
        tsr_tensor y = tsr_tensor_3d(TSR_F32, bt, m, n, NULL);
        if (i == 3) {
            a = tsr_tensor_2d(TSR_F32, m, k, a.data);
            bm = tsr_tensor_2d(TSR_F32, k, n, bm.data);
            y = tsr_tensor_2d(TSR_F32, m, n, NULL);
        }
        mm_p p = {cs[i].ta, cs[i].tb, 1.0f / sqrtf((float)k)};
        ops_case c = {.op = "matmul", .name = cs[i].name, .n_src = 2, .src = {&a, &bm},
                      .role = {OPS_ACT, OPS_ACT}, .y = y, .tol = TOL, .run = run_matmul,
                      .params = &p};
        finish(&t, "matmul", cs[i].name, ops_check(&c));
        release(&b);
    }
    return ops_tally_result(&t);
}

/* ---- attention ---- */

static int run_attn(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_attention(be, s[0], s[1], s[2], c->params, y);
}

static int test_attention(void)
{
    const struct {
        const char *name;
        int64_t b, lq, lk, heads, d;
        int causal;
    } cs[] = {
        {"sd15 self 4096 h8 d40", 2, 4096, 4096, 8, 40, 0},
        {"sd15 cross 4096x77 h8 d40", 2, 4096, 77, 8, 40, 0},
        {"sd15 self 1024 h8 d80", 2, 1024, 1024, 8, 80, 0},
        {"sd15 self 256 h8 d160", 2, 256, 256, 8, 160, 0},
        {"sd15 mid 64 h8 d160 cross", 2, 64, 77, 8, 160, 0},
        {"sd2 self 4096 h5 d64", 2, 4096, 4096, 5, 64, 0},
        {"sdxl self 1024 h10 d64", 2, 1024, 1024, 10, 64, 0},
        {"sdxl cross 1024x77 h20 d64", 2, 1024, 77, 20, 64, 0},
        {"clip-L causal 77 h12 d64", 2, 77, 77, 12, 64, 1},
        {"bigG causal 77 h20 d64", 1, 77, 77, 20, 64, 1},
        {"causal lq<lk 50x77 d40", 1, 50, 77, 2, 40, 1},
        {"causal lq>lk 77x50 d64", 1, 77, 50, 2, 64, 1}, /* rows 0..26 see no key: 0 */
        {"vae mid 64x64 h1 d512", 1, 4096, 4096, 1, 512, 0},
        {"vae mid 32x32 h1 d512 b2", 2, 1024, 1024, 1, 512, 0},
    };
    ops_tally t = {0};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        bufs b = {0};
        const int64_t hd = cs[i].heads * cs[i].d;
        tsr_tensor q = tsr_tensor_3d(TSR_F32, cs[i].b, cs[i].lq, hd,
                                     keep(&b, rnd((size_t)(cs[i].b * cs[i].lq * hd), 2.0f)));
        tsr_tensor k = tsr_tensor_3d(TSR_F32, cs[i].b, cs[i].lk, hd,
                                     keep(&b, rnd((size_t)(cs[i].b * cs[i].lk * hd), 2.0f)));
        tsr_tensor v = tsr_tensor_3d(TSR_F32, cs[i].b, cs[i].lk, hd,
                                     keep(&b, rnd((size_t)(cs[i].b * cs[i].lk * hd), 1.0f)));
        tsr_attention_params p = {.heads = (int)cs[i].heads, .scale = 0.0f,
                                  .causal = cs[i].causal != 0};
        ops_case c = {.op = "attention", .name = cs[i].name, .n_src = 3, .src = {&q, &k, &v},
                      .role = {OPS_ACT, OPS_ACT, OPS_ACT},
                      .y = tsr_tensor_3d(TSR_F32, cs[i].b, cs[i].lq, hd, NULL), .tol = TOL,
                      .run = run_attn, .params = &p};
        finish(&t, "attention", cs[i].name, ops_check(&c));
        release(&b);
    }
    return ops_tally_result(&t);
}

/* Every SD attention shape of a UNet call at 512^2 (SD1.5) and 1024^2 (SDXL),
 * self and cross, at batch 2 (one image with CFG) and 32 (sixteen), plus
 * SD1.5 at 1024^2: the shapes the cuDNN SDPA path (backend/cuda/
 * ops_attention_cudnn.cu) is meant for.  Run with TSR_CUDA_ATTENTION=cudnn and
 * TSR_CUDA_ATTENTION_CUDNN_STRICT=1 (tests/gpu/CMakeLists.txt), a shape
 * cuDNN builds no plan for fails with cuDNN's reason instead of passing on
 * another path.  The first shapes run a second time on fresh buffers: the
 * cached plan with new pointers. */
static int test_attention_sd(void)
{
    const struct {
        const char *name;
        int64_t lq, lk, heads, d;
    } cs[] = {
        {"sd15 self 4096 h8 d40", 4096, 4096, 8, 40},
        {"sd15 self 1024 h8 d80", 1024, 1024, 8, 80},
        {"sd15 self 256 h8 d160", 256, 256, 8, 160},
        {"sd15 cross 4096x77 h8 d40", 4096, 77, 8, 40},
        {"sd15 cross 1024x77 h8 d80", 1024, 77, 8, 80},
        {"sd15 cross 256x77 h8 d160", 256, 77, 8, 160},
        {"sdxl self 4096 h10 d64", 4096, 4096, 10, 64},
        {"sdxl self 1024 h20 d64", 1024, 1024, 20, 64},
        {"sdxl cross 4096x77 h10 d64", 4096, 77, 10, 64},
        {"sdxl cross 1024x77 h20 d64", 1024, 77, 20, 64},
    };
    const size_t n = sizeof cs / sizeof cs[0];
    if (!ops_device())
        return OPS_SKIP; /* before making gigabytes of inputs for nothing */
    const struct {
        int64_t b;
        size_t i; /* index into cs; n = SD1.5 at 1024^2 */
        const char *tag;
    } runs[] = {
        {2, 0, "b2"},   {2, 1, "b2"},   {2, 2, "b2"},   {2, 3, "b2"},   {2, 4, "b2"},
        {2, 5, "b2"},   {2, 6, "b2"},   {2, 7, "b2"},   {2, 8, "b2"},   {2, 9, "b2"},
        {32, 0, "b32"}, {32, 1, "b32"}, {32, 2, "b32"}, {32, 3, "b32"}, {32, 4, "b32"},
        {32, 5, "b32"}, {32, 6, "b32"}, {32, 7, "b32"}, {32, 8, "b32"}, {32, 9, "b32"},
        {2, n, "b2"},   {2, 0, "b2 again"}, {2, 1, "b2 again"}, {2, 6, "b2 again"},
    };
    ops_tally t = {0};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        const int big = runs[r].i == n;
        const char *base = big ? "sd15 1024px self 16384 h8 d40" : cs[runs[r].i].name;
        const int64_t bsz = runs[r].b, lq = big ? 16384 : cs[runs[r].i].lq;
        const int64_t lk = big ? 16384 : cs[runs[r].i].lk;
        const int64_t heads = big ? 8 : cs[runs[r].i].heads, d = big ? 40 : cs[runs[r].i].d;
        char name[64];
        snprintf(name, sizeof name, "%s %s", base, runs[r].tag);
        bufs b = {0};
        const int64_t hd = heads * d;
        tsr_tensor q = tsr_tensor_3d(TSR_F32, bsz, lq, hd,
                                     keep(&b, rnd((size_t)(bsz * lq * hd), 2.0f)));
        tsr_tensor k = tsr_tensor_3d(TSR_F32, bsz, lk, hd,
                                     keep(&b, rnd((size_t)(bsz * lk * hd), 2.0f)));
        tsr_tensor v = tsr_tensor_3d(TSR_F32, bsz, lk, hd,
                                     keep(&b, rnd((size_t)(bsz * lk * hd), 1.0f)));
        tsr_attention_params p = {.heads = (int)heads, .scale = 0.0f, .causal = false};
        ops_case c = {.op = "attention", .name = name, .n_src = 3, .src = {&q, &k, &v},
                      .role = {OPS_ACT, OPS_ACT, OPS_ACT},
                      .y = tsr_tensor_3d(TSR_F32, bsz, lq, hd, NULL), .tol = TOL,
                      .run = run_attn, .params = &p};
        finish(&t, "attention", name, ops_check(&c));
        release(&b);
    }
    return ops_tally_result(&t);
}

/* ---- norms, softmax ---- */

typedef struct gn_p {
    int groups;
    bool silu;
} gn_p;

static int run_gn(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    const gn_p *p = c->params;
    return tsr_group_norm(be, s[0], s[1], s[2], p->groups, 1e-5f, p->silu, y);
}

static int run_ln(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_layer_norm(be, s[0], s[1], s[2], 1e-5f, y);
}

static int run_softmax(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s,
                       tsr_tensor *y)
{
    return tsr_softmax(be, s[0], y);
}

static int test_norms(void)
{
    const struct {
        const char *name;
        int64_t n, h, w, c;
        int silu;
    } gs[] = {
        {"sd15 gn 64x64x320 silu", 2, 64, 64, 320, 1}, {"sd15 gn 8x8x2560", 2, 8, 8, 2560, 0},
        {"sdxl gn 128x128x320 silu", 2, 128, 128, 320, 1},
        {"vae gn 512x512x128 silu", 1, 512, 512, 128, 1}, {"vae gn 64x64x512", 1, 64, 64, 512, 0},
    };
    ops_tally t = {0};
    for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) {
        bufs b = {0};
        const size_t n = (size_t)(gs[i].n * gs[i].h * gs[i].w * gs[i].c);
        float *xp = keep(&b, rnd(n, 2.0f));
        for (size_t j = 0; xp && j < n; j++)
            xp[j] += 1.5f; /* an offset mean */
        tsr_tensor x = t4(gs[i].n, gs[i].h, gs[i].w, gs[i].c, xp);
        tsr_tensor g = tsr_tensor_1d(TSR_F32, gs[i].c, keep(&b, rnd((size_t)gs[i].c, 1.5f)));
        tsr_tensor be = tsr_tensor_1d(TSR_F32, gs[i].c, keep(&b, rnd((size_t)gs[i].c, 0.5f)));
        gn_p p = {32, gs[i].silu != 0};
        ops_case c = {.op = "group_norm", .name = gs[i].name, .n_src = 3, .src = {&x, &g, &be},
                      .role = {OPS_ACT, OPS_PARAM, OPS_PARAM},
                      .y = t4(gs[i].n, gs[i].h, gs[i].w, gs[i].c, NULL), .tol = TOL, .run = run_gn,
                      .params = &p};
        finish(&t, "group_norm", gs[i].name, ops_check(&c));
        release(&b);
    }
    const struct {
        const char *name;
        int64_t rows, c;
    } ls[] = {{"sd15 ln 2x4096x320", 2 * 4096, 320}, {"sdxl ln 2x1024x1280", 2 * 1024, 1280},
              {"clip ln 2x77x768", 2 * 77, 768}, {"bigG ln 77x1280", 77, 1280}};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
        bufs b = {0};
        tsr_tensor x = tsr_tensor_2d(TSR_F32, ls[i].rows, ls[i].c,
                                     keep(&b, rnd((size_t)(ls[i].rows * ls[i].c), 3.0f)));
        tsr_tensor g = tsr_tensor_1d(TSR_F32, ls[i].c, keep(&b, rnd((size_t)ls[i].c, 1.5f)));
        tsr_tensor be = tsr_tensor_1d(TSR_F32, ls[i].c, keep(&b, rnd((size_t)ls[i].c, 0.5f)));
        ops_case c = {.op = "layer_norm", .name = ls[i].name, .n_src = 3, .src = {&x, &g, &be},
                      .role = {OPS_ACT, OPS_PARAM, OPS_PARAM},
                      .y = tsr_tensor_2d(TSR_F32, ls[i].rows, ls[i].c, NULL), .tol = TOL,
                      .run = run_ln};
        finish(&t, "layer_norm", ls[i].name, ops_check(&c));
        release(&b);
    }
    {
        bufs b = {0};
        tsr_tensor x = tsr_tensor_3d(TSR_F32, 16, 256, 4096,
                                     keep(&b, rnd((size_t)16 * 256 * 4096, 8.0f)));
        ops_case c = {.op = "softmax", .name = "16x256x4096", .n_src = 1, .src = {&x},
                      .role = {OPS_ACT}, .y = tsr_tensor_3d(TSR_F32, 16, 256, 4096, NULL),
                      .tol = TOL, .run = run_softmax};
        finish(&t, "softmax", "16x256x4096", ops_check(&c));
        c.inplace = true;
        c.name = "16x256x4096 in place";
        finish(&t, "softmax", c.name, ops_check(&c));
        release(&b);
    }
    return ops_tally_result(&t);
}

/* ---- elementwise and data movement ---- */

static int run_unary(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_unary(be, *(const tsr_unary_kind *)c->params, s[0], y);
}
static int run_geglu(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_geglu(be, s[0], y);
}
static int run_binary(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s,
                      tsr_tensor *y)
{
    return tsr_binary(be, *(const tsr_binary_kind *)c->params, s[0], s[1], y);
}
static int run_scale(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_scale(be, s[0], 0.18215f, y);
}
static int run_concat(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s,
                      tsr_tensor *y)
{
    return tsr_concat(be, s[0], s[1], y);
}
static int run_up(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_upsample_nearest(be, s[0], y);
}
static int run_ts(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_timestep_embedding(be, s[0], c->params, y);
}
static int run_emb(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_embedding(be, s[0], s[1], y);
}
static int run_convert(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s,
                       tsr_tensor *y)
{
    return tsr_convert(be, s[0], y);
}

static int test_elementwise(void)
{
    ops_tally t = {0};
    bufs b = {0};
    /* unary on an SD1.5 block's activations, each kind */
    const tsr_unary_kind kinds[] = {TSR_UNARY_SILU, TSR_UNARY_GELU, TSR_UNARY_GELU_TANH,
                                    TSR_UNARY_QUICK_GELU};
    const char *kn[] = {"silu 2x64x64x320", "gelu 2x64x64x320", "gelu_tanh 2x64x64x320",
                        "quick_gelu 2x64x64x320"};
    tsr_tensor x = t4(2, 64, 64, 320, keep(&b, rnd((size_t)2 * 64 * 64 * 320, 6.0f)));
    for (int k = 0; k < 4; k++) {
        ops_case c = {.op = "unary", .name = kn[k], .n_src = 1, .src = {&x}, .role = {OPS_ACT},
                      .y = t4(2, 64, 64, 320, NULL), .tol = TOL, .run = run_unary,
                      .params = &kinds[k]};
        finish(&t, "unary", kn[k], ops_check(&c));
        c.inplace = true;
        finish(&t, "unary", "(in place)", ops_check(&c));
    }
    {
        ops_case c = {.op = "scale", .name = "vae latents 2x128x128x4", .n_src = 1, .src = {&x},
                      .role = {OPS_ACT}, .y = t4(2, 64, 64, 320, NULL), .tol = TOL,
                      .run = run_scale};
        finish(&t, "scale", "2x64x64x320", ops_check(&c));
    }
    release(&b);
    /* geglu: SD1.5 ff 2x4096x2560 -> 1280; SDXL 2x1024x10240 -> 5120 */
    const int64_t gd[2][2] = {{2 * 4096, 1280}, {2 * 1024, 5120}};
    for (int i = 0; i < 2; i++) {
        tsr_tensor gx = tsr_tensor_2d(TSR_F32, gd[i][0], 2 * gd[i][1],
                                      keep(&b, rnd((size_t)(gd[i][0] * 2 * gd[i][1]), 4.0f)));
        ops_case c = {.op = "geglu", .name = i ? "sdxl 2048x10240" : "sd15 8192x2560", .n_src = 1,
                      .src = {&gx}, .role = {OPS_ACT},
                      .y = tsr_tensor_2d(TSR_F32, gd[i][0], gd[i][1], NULL), .tol = TOL,
                      .run = run_geglu};
        finish(&t, "geglu", c.name, ops_check(&c));
        release(&b);
    }
    /* binary: bias [C], per-image time embedding [N,1,1,C], full, rank-3 */
    const struct {
        const char *name;
        int nb;
        int64_t bne[4];
    } bs[] = {{"+ bias [320]", 1, {320}},
              {"+ temb [2,1,1,320]", 4, {2, 1, 1, 320}},
              {"+ full [2,64,64,320]", 4, {2, 64, 64, 320}},
              {"+ [64,1,320] (mid bcast)", 3, {64, 1, 320}}};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        for (int mul = 0; mul < 2; mul++) {
            size_t nb = 1;
            for (int k = 0; k < bs[i].nb; k++)
                nb *= (size_t)bs[i].bne[k];
            tsr_tensor a = t4(2, 64, 64, 320, keep(&b, rnd((size_t)2 * 64 * 64 * 320, 2.0f)));
            tsr_tensor bt = tsr_tensor_make(TSR_F32, bs[i].nb, bs[i].bne, keep(&b, rnd(nb, 2.0f)),
                                            NULL);
            tsr_binary_kind kind = mul ? TSR_BINARY_MUL : TSR_BINARY_ADD;
            ops_case c = {.op = "binary", .name = bs[i].name, .n_src = 2, .src = {&a, &bt},
                          .role = {OPS_ACT, OPS_PARAM}, .y = t4(2, 64, 64, 320, NULL), .tol = TOL,
                          .run = run_binary, .params = &kind};
            finish(&t, mul ? "binary mul" : "binary add", bs[i].name, ops_check(&c));
            release(&b);
        }
    /* concat (UNet skip), nearest upsample */
    {
        tsr_tensor a = t4(2, 32, 32, 1280, keep(&b, rnd((size_t)2 * 32 * 32 * 1280, 2.0f)));
        tsr_tensor c2 = t4(2, 32, 32, 640, keep(&b, rnd((size_t)2 * 32 * 32 * 640, 2.0f)));
        ops_case c = {.op = "concat", .name = "1280+640 at 32x32", .n_src = 2, .src = {&a, &c2},
                      .role = {OPS_ACT, OPS_ACT}, .y = t4(2, 32, 32, 1920, NULL), .tol = TOL,
                      .run = run_concat};
        finish(&t, "concat", c.name, ops_check(&c));
        ops_case u = {.op = "upsample", .name = "2x 32->64 x1280", .n_src = 1, .src = {&a},
                      .role = {OPS_ACT}, .y = t4(2, 64, 64, 1280, NULL), .tol = TOL, .run = run_up};
        finish(&t, "upsample", u.name, ops_check(&u));
        u.y = t4(2, 48, 80, 1280, NULL);
        u.name = "32x32 -> 48x80";
        finish(&t, "upsample", u.name, ops_check(&u));
        release(&b);
    }
    /* timestep embedding (SD: 320, flip; SDXL add_time: 256) */
    {
        float ts[6] = {999.0f, 981.0f, 500.5f, 21.0f, 1.0f, 0.25f};
        tsr_tensor tt = tsr_tensor_1d(TSR_F32, 6, ts);
        tsr_timestep_params tp = {.dim = 320, .flip_sin_to_cos = true, .downscale_freq_shift = 0};
        ops_case c = {.op = "timestep_embedding", .name = "320 flip", .n_src = 1, .src = {&tt},
                      .role = {OPS_ASIS}, .y = tsr_tensor_2d(TSR_F32, 6, 320, NULL), .tol = TOL,
                      .run = run_ts, .params = &tp};
        finish(&t, "timestep", c.name, ops_check(&c));
        tsr_timestep_params tp2 = {.dim = 256, .flip_sin_to_cos = false,
                                   .downscale_freq_shift = 1.0f};
        c.params = &tp2;
        c.name = "256 shift 1";
        c.y = tsr_tensor_2d(TSR_F32, 6, 256, NULL);
        finish(&t, "timestep", c.name, ops_check(&c));
    }
    /* embedding: CLIP-L token table, then out-of-range ids on the device */
    {
        int32_t ids[2 * 77];
        for (int i = 0; i < 2 * 77; i++)
            ids[i] = (int32_t)((i * 7919u + 13u) % 49408u);
        ids[0] = 49406;
        ids[76] = 49407;
        tsr_tensor ti = tsr_tensor_2d(TSR_I32, 2, 77, ids);
        tsr_tensor tab = tsr_tensor_2d(TSR_F32, 49408, 768, keep(&b, rnd((size_t)49408 * 768, 0.1f)));
        ops_case c = {.op = "embedding", .name = "clip-L 2x77 of 49408x768", .n_src = 2,
                      .src = {&ti, &tab}, .role = {OPS_ASIS, OPS_PARAM},
                      .y = tsr_tensor_3d(TSR_F32, 2, 77, 768, NULL), .tol = TOL, .run = run_emb};
        finish(&t, "embedding", c.name, ops_check(&c));
        release(&b);
    }
    /* convert: f32 host data to the device's activations and back is every
     * case's path already; here a device-side f32 -> f16 -> f32 */
    {
        tsr_tensor cx = tsr_tensor_2d(TSR_F32, 1024, 1000, keep(&b, rnd((size_t)1024 * 1000, 100.0f)));
        ops_case c = {.op = "convert", .name = "1024x1000", .n_src = 1, .src = {&cx},
                      .role = {OPS_ASIS}, .y = tsr_tensor_2d(TSR_F32, 1024, 1000, NULL),
                      .tol = TOL, .run = run_convert};
        finish(&t, "convert", c.name, ops_check(&c));
        release(&b);
    }
    return ops_tally_result(&t);
}

/* Out-of-range ids fail with TSR_ERR_RANGE on the device too, and the
 * backend stays usable. */
static int test_embedding_range_device(void)
{
    tsr_backend *be = ops_device();
    if (!be)
        return OPS_SKIP;
    const int64_t v = 10, d = 8;
    void *tab = tsr_backend_alloc(be, (size_t)(v * d) * tsr_dtype_size(be->weight_dtype));
    void *ids = tsr_backend_alloc(be, 4 * sizeof(int32_t));
    void *y = tsr_backend_alloc(be, (size_t)(4 * d) * tsr_dtype_size(be->act_dtype));
    ASSERT_TRUE(tab && ids && y);
    int32_t host_ids[4] = {1, 2, 10, 3};
    ASSERT_OK(tsr_backend_upload(be, ids, host_ids, sizeof host_ids));
    ASSERT_OK(tsr_backend_sync(be));
    tsr_tensor ti = tsr_tensor_1d(TSR_I32, 4, ids), tt = tsr_tensor_2d(be->weight_dtype, v, d, tab);
    tsr_tensor ty = tsr_tensor_2d(be->act_dtype, 4, d, y);
    ti.backend = tt.backend = ty.backend = be;
    ASSERT_EQ(tsr_embedding(be, &ti, &tt, &ty), TSR_ERR_RANGE);
    ASSERT_TRUE(strstr(tsr_last_error(), "position 2") != NULL);
    host_ids[2] = -5;
    ASSERT_OK(tsr_backend_upload(be, ids, host_ids, sizeof host_ids));
    ASSERT_EQ(tsr_embedding(be, &ti, &tt, &ty), TSR_ERR_RANGE);
    host_ids[2] = 9;
    ASSERT_OK(tsr_backend_upload(be, ids, host_ids, sizeof host_ids));
    ASSERT_OK(tsr_embedding(be, &ti, &tt, &ty));
    ASSERT_OK(tsr_backend_sync(be));
    tsr_backend_free(be, tab);
    tsr_backend_free(be, ids);
    tsr_backend_free(be, y);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"conv2d", test_conv2d},         {"linear", test_linear},       {"matmul", test_matmul},
    {"attention", test_attention},   {"norms", test_norms},         {"elementwise", test_elementwise},
    {"attention_sd", test_attention_sd},
    {"embedding_range", test_embedding_range_device},
};

TSR_TEST_TABLE_MAIN(tests)
