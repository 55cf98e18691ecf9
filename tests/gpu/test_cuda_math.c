/*
 * tests/gpu/test_cuda_math.c - the CUDA kernels' arithmetic, checked on the
 * host (label unit; no GPU, no CUDA toolkit needed).
 *
 * backend/cuda/cuda_math.h holds the per-element functions the kernels call
 * (f16/bf16 rounding, activations, broadcasting index, online softmax,
 * Welford/Chan statistics, timestep frequencies).  Here they run as plain C
 * and are compared with the CPU backend, the oracle: conversions bit for
 * bit over every f16/bf16 value and millions of f32 patterns; the
 * attention, group-norm and layer-norm kernels' algorithms (tiling, masking,
 * merge order) replayed on the host with those functions against
 * tsr_attention, tsr_group_norm and tsr_layer_norm.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_math.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd_u32(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}

/* uniform in [-a, a), never exactly zero */
static float rnd(float a)
{
    float v = ((float)(rnd_u32() >> 8) / 16777216.0f * 2.0f - 1.0f) * a;
    return v == 0.0f ? 1e-3f : v;
}

static float *rnd_buf(size_t n, float a)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; p && i < n; i++)
        p[i] = rnd(a);
    return p;
}

static tsr_backend *cpu(void)
{
    static tsr_backend *b;
    if (!b && tsr_backend_cpu_create(2, &b) < 0)
        return NULL;
    return b;
}

static tsr_tensor host(int ndim, const int64_t *ne, float *data)
{
    return tsr_tensor_make(TSR_F32, ndim, ne, data, cpu());
}

/* ---- conversions ---- */

static int same_f32(float a, float b)
{
    return (isnan(a) && isnan(b)) || tsr_cu_f32_bits(a) == tsr_cu_f32_bits(b);
}

static int test_f16_bf16(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        if (!same_f32(tsr_cu_f16_to_f32((uint16_t)h), tsr_f16_to_f32((uint16_t)h)))
            TSR_FAIL("f16 0x%04x widens to %g, not %g", h, tsr_cu_f16_to_f32((uint16_t)h),
                     tsr_f16_to_f32((uint16_t)h));
        if (!same_f32(tsr_cu_bf16_to_f32((uint16_t)h), tsr_bf16_to_f32((uint16_t)h)))
            TSR_FAIL("bf16 0x%04x widens differently", h);
        /* every f16 value round-trips */
        float f = tsr_cu_f16_to_f32((uint16_t)h);
        if (!isnan(f) && tsr_cu_f32_to_f16(f) != h)
            TSR_FAIL("f16 0x%04x does not round-trip (0x%04x)", h, tsr_cu_f32_to_f16(f));
    }
    /* edge cases, then random bit patterns and values near f16's range */
    const float edge[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e-8f, 2.98e-8f,
                          2.9802322e-8f, 5.96e-8f, 6.1035156e-5f, 6.1e-5f, INFINITY, -INFINITY,
                          NAN, 1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f, 3.4e38f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        ASSERT_EQ(tsr_cu_f32_to_f16(edge[i]), tsr_f32_to_f16(edge[i]));
        ASSERT_EQ(tsr_cu_f32_to_bf16(edge[i]), tsr_f32_to_bf16(edge[i]));
    }
    for (int i = 0; i < 4000000; i++) {
        uint32_t u = rnd_u32();
        if (i & 1) /* concentrate on exponents f16 can hold */
            u = (u & 0x807fffffu) | ((uint32_t)(100 + (u >> 24) % 45) << 23);
        float f = tsr_cu_bits_f32(u);
        if (tsr_cu_f32_to_f16(f) != tsr_f32_to_f16(f))
            TSR_FAIL("f32 0x%08x -> f16 0x%04x, core/tensor.c says 0x%04x", u,
                     tsr_cu_f32_to_f16(f), tsr_f32_to_f16(f));
        if (tsr_cu_f32_to_bf16(f) != tsr_f32_to_bf16(f))
            TSR_FAIL("f32 0x%08x -> bf16 0x%04x, core/tensor.c says 0x%04x", u,
                     tsr_cu_f32_to_bf16(f), tsr_f32_to_bf16(f));
    }
    /* the generic load/store the kernels use */
    uint16_t h16[3];
    float f32[3];
    for (int dt = 0; dt < 3; dt++) {
        void *p = dt == TSR_CU_F32 ? (void *)f32 : (void *)h16;
        tsr_cu_store(p, dt, 1, 0.333333f);
        float back = tsr_cu_load(p, dt, 1);
        float want = dt == 0 ? 0.333333f
                     : dt == 1 ? tsr_f16_to_f32(tsr_f32_to_f16(0.333333f))
                               : tsr_bf16_to_f32(tsr_f32_to_bf16(0.333333f));
        ASSERT_TRUE(same_f32(back, want));
    }
    return 0;
}

/* ---- activations ---- */

static int test_activations(void)
{
    enum { N = 20001 };
    float *x = malloc(N * sizeof(float)), *want = malloc(N * sizeof(float));
    float *got = malloc(N * sizeof(float));
    ASSERT_TRUE(x && want && got && cpu());
    for (int i = 0; i < N; i++)
        x[i] = -15.0f + 30.0f * (float)i / (N - 1);
    const int64_t ne[1] = {N};
    const tsr_unary_kind kinds[] = {TSR_UNARY_SILU, TSR_UNARY_GELU, TSR_UNARY_GELU_TANH,
                                    TSR_UNARY_QUICK_GELU};
    const int cu[] = {TSR_CU_SILU, TSR_CU_GELU, TSR_CU_GELU_TANH, TSR_CU_QUICK_GELU};
    for (int k = 0; k < 4; k++) {
        tsr_tensor tx = host(1, ne, x), ty = host(1, ne, want);
        ASSERT_OK(tsr_unary(cpu(), kinds[k], &tx, &ty));
        for (int i = 0; i < N; i++)
            got[i] = tsr_cu_act(cu[k], x[i]);
        char what[64];
        snprintf(what, sizeof what, "activation %d", k);
        /* the CPU's AVX2 exp is within a few ulp of expf */
        ASSERT_CLOSE(what, got, want, N, 2e-6);
    }
    /* geglu: a * gelu(g) */
    const int64_t xe[2] = {7, 64}, ye[2] = {7, 32};
    float *gx = rnd_buf(7 * 64, 4.0f), gy[7 * 32], gg[7 * 32];
    ASSERT_TRUE(gx);
    tsr_tensor tx = host(2, xe, gx), ty = host(2, ye, gy);
    ASSERT_OK(tsr_geglu(cpu(), &tx, &ty));
    for (int r = 0; r < 7; r++)
        for (int c = 0; c < 32; c++)
            gg[r * 32 + c] = gx[r * 64 + c] * tsr_cu_gelu(gx[r * 64 + 32 + c]);
    ASSERT_CLOSE("geglu", gg, gy, 7 * 32, 1e-6);
    free(gx);
    free(x);
    free(want);
    free(got);
    return 0;
}

/* ---- broadcasting ---- */

static int test_broadcast(void)
{
    /* a's shape, then b shapes that broadcast onto it (numpy rules) */
    const int64_t a_ne[4] = {2, 5, 6, 8};
    const int64_t b_shapes[][5] = {
        /* ndim, dims... */
        {1, 8}, {4, 2, 1, 1, 8}, {4, 2, 5, 6, 8}, {2, 6, 8}, {3, 5, 1, 8}, {4, 1, 5, 6, 1},
        {2, 6, 1}, {4, 2, 1, 6, 1}, {1, 1},
    };
    const int64_t n = 2 * 5 * 6 * 8;
    float *a = rnd_buf((size_t)n, 3.0f), *b = rnd_buf((size_t)n, 3.0f);
    float want[2 * 5 * 6 * 8], got[2 * 5 * 6 * 8];
    ASSERT_TRUE(a && b && cpu());
    for (size_t s = 0; s < sizeof b_shapes / sizeof b_shapes[0]; s++) {
        const int bnd = (int)b_shapes[s][0];
        int64_t b_ne[4] = {1, 1, 1, 1};
        for (int k = 0; k < bnd; k++)
            b_ne[k] = b_shapes[s][1 + k];
        for (int mul = 0; mul < 2; mul++) {
            tsr_tensor ta = host(4, a_ne, a), tb = host(bnd, b_ne, b), ty = host(4, a_ne, want);
            ASSERT_OK(tsr_binary(cpu(), mul ? TSR_BINARY_MUL : TSR_BINARY_ADD, &ta, &tb, &ty));
            int64_t a4[4], bs[4];
            tsr_cu_shape4(a_ne, 4, a4);
            tsr_cu_bcast_strides(a_ne, 4, b_ne, bnd, bs);
            for (int64_t i = 0; i < n; i++) {
                float vb = b[tsr_cu_bcast_index(i, a4, bs)];
                got[i] = mul ? a[i] * vb : a[i] + vb;
            }
            char what[64];
            snprintf(what, sizeof what, "broadcast case %zu (%s)", s, mul ? "mul" : "add");
            ASSERT_CLOSE(what, got, want, (size_t)n, 0.0);
        }
    }
    /* a of rank 3, b of rank 1 (a bias) */
    const int64_t a3[3] = {4, 3, 10}, b1[1] = {10};
    int64_t s4[4], bs[4];
    tsr_cu_shape4(a3, 3, s4);
    tsr_cu_bcast_strides(a3, 3, b1, 1, bs);
    for (int64_t i = 0; i < 120; i++)
        ASSERT_EQ(tsr_cu_bcast_index(i, s4, bs), i % 10);
    free(a);
    free(b);
    return 0;
}

/* ---- attention: the kernel's algorithm, replayed on the host ---- */

#define KT_MAX 32

/* ops_attention.cu's k_attention for one (batch, head, query row): key
 * tiles of KT (32 for head sizes up to 160, 16 above), the pre-scaled
 * query, lane-wise scores, the tile max and sum, the online rescale, then
 * o / l. */
static void attn_row(const float *q, const float *k, const float *v, float *y, int64_t lq,
                     int64_t lk, int64_t hd, int64_t d, int64_t bi, int64_t h, int64_t qi,
                     float scale, int causal)
{
    const int KT = d <= 160 ? 32 : 16;
    float qs[512], o[512], s[KT_MAX], p[KT_MAX];
    for (int64_t c = 0; c < d; c++) {
        qs[c] = q[(bi * lq + qi) * hd + h * d + c] * scale;
        o[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t k0 = 0; k0 < lk; k0 += KT) {
        float tmax = -INFINITY;
        for (int j = 0; j < KT; j++) {
            int64_t kj = k0 + j;
            s[j] = -INFINITY;
            if (kj < lk && (!causal || tsr_cu_causal_visible(qi, kj, lq, lk))) {
                float acc = 0.0f;
                for (int64_t c = 0; c < d; c++)
                    acc += qs[c] * k[(bi * lk + kj) * hd + h * d + c];
                s[j] = acc;
            }
            tmax = fmaxf(tmax, s[j]);
        }
        float mn = tsr_cu_osm_new_max(m, tmax), corr = tsr_cu_osm_rescale(m, mn), psum = 0.0f;
        for (int j = 0; j < KT; j++) {
            p[j] = tsr_cu_osm_weight(s[j], mn);
            psum += p[j];
        }
        l = l * corr + psum;
        m = mn;
        for (int64_t c = 0; c < d; c++) {
            o[c] *= corr;
            for (int j = 0; j < KT; j++)
                if (k0 + j < lk)
                    o[c] += p[j] * v[(bi * lk + k0 + j) * hd + h * d + c];
        }
    }
    for (int64_t c = 0; c < d; c++)
        y[(bi * lq + qi) * hd + h * d + c] = l > 0.0f ? o[c] / l : 0.0f;
}

static int test_online_softmax(void)
{
    /* SD1.x (40, 80, 160), SDXL/text encoders (64); self and cross attention;
     * causal with Lq == Lk (CLIP) and Lq < Lk */
    const struct {
        int64_t b, lq, lk, heads, d;
        int causal;
    } cases[] = {
        {2, 70, 77, 8, 40, 0}, {1, 64, 64, 2, 80, 0},  {1, 33, 100, 1, 160, 0},
        {2, 77, 77, 4, 64, 1}, {1, 20, 45, 2, 64, 1},  {1, 96, 96, 10, 64, 0},
        {1, 64, 100, 1, 512, 0}, /* the VAE's single head: 16-key tiles */
    };
    ASSERT_TRUE(cpu());
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t b = cases[t].b, lq = cases[t].lq, lk = cases[t].lk, d = cases[t].d;
        const int64_t hd = cases[t].heads * d;
        /* a wide spread of scores: online rescaling matters */
        float *q = rnd_buf((size_t)(b * lq * hd), 2.5f), *k = rnd_buf((size_t)(b * lk * hd), 2.5f);
        float *v = rnd_buf((size_t)(b * lk * hd), 1.0f);
        float *want = malloc((size_t)(b * lq * hd) * sizeof(float));
        float *got = malloc((size_t)(b * lq * hd) * sizeof(float));
        ASSERT_TRUE(q && k && v && want && got);
        const int64_t qe[3] = {b, lq, hd}, ke[3] = {b, lk, hd};
        tsr_tensor tq = host(3, qe, q), tk = host(3, ke, k), tv = host(3, ke, v);
        tsr_tensor ty = host(3, qe, want);
        tsr_attention_params p = {.heads = (int)cases[t].heads, .scale = 0.0f,
                                  .causal = cases[t].causal != 0};
        ASSERT_OK(tsr_attention(cpu(), &tq, &tk, &tv, &p, &ty));
        const float scale = 1.0f / sqrtf((float)d);
        for (int64_t bi = 0; bi < b; bi++)
            for (int64_t h = 0; h < cases[t].heads; h++)
                for (int64_t qi = 0; qi < lq; qi++)
                    attn_row(q, k, v, got, lq, lk, hd, d, bi, h, qi, scale, cases[t].causal);
        char what[96];
        snprintf(what, sizeof what, "attention case %zu (d %lld%s)", t, (long long)d,
                 cases[t].causal ? ", causal" : "");
        ASSERT_CLOSE(what, got, want, (size_t)(b * lq * hd), 2e-5);
        free(q);
        free(k);
        free(v);
        free(want);
        free(got);
    }
    /* the kernels' causal loop bound is the count of visible keys */
    for (int64_t lq = 1; lq <= 9; lq += 4)
        for (int64_t lk = 1; lk <= 9; lk += 2)
            for (int64_t i = 0; i < lq; i++) {
                int64_t n = 0;
                for (int64_t j = 0; j < lk; j++)
                    n += tsr_cu_causal_visible(i, j, lq, lk);
                ASSERT_TRUE(tsr_cu_causal_keys(i, lq, lk) == n);
            }
    /* the rescale never makes a NaN from a fully masked prefix */
    ASSERT_TRUE(tsr_cu_osm_rescale(-INFINITY, -INFINITY) == 0.0f);
    ASSERT_TRUE(tsr_cu_osm_weight(-INFINITY, -INFINITY) == 0.0f);
    ASSERT_TRUE(tsr_cu_osm_weight(1.0f, -INFINITY) == 0.0f);
    return 0;
}

/* ---- group norm / layer norm statistics: the kernels' blocking ---- */

#define THREADS 256

/* block_stats of ops_norm.cu: shuffle-down tree within each warp of 32,
 * then warp results merged in order by thread 0. */
static tsr_cu_stats block_merge(tsr_cu_stats *th)
{
    for (int w = 0; w < THREADS / 32; w++) {
        tsr_cu_stats *lane = th + w * 32;
        for (int off = 16; off > 0; off >>= 1)
            for (int i = 0; i < off; i++)
                lane[i] = tsr_cu_stats_merge(lane[i], lane[i + off]);
    }
    tsr_cu_stats t = {0.0f, 0.0f, 0.0f};
    for (int w = 0; w < THREADS / 32; w++)
        t = tsr_cu_stats_merge(t, th[w * 32]);
    return t;
}

static int test_group_norm_stats(void)
{
    const struct {
        int64_t n, h, w, c;
        int groups, split, silu;
    } cases[] = {
        {2, 16, 16, 320, 32, 1, 1}, {1, 32, 32, 64, 32, 3, 0}, {1, 8, 8, 960, 32, 2, 1},
        {2, 4, 4, 128, 8, 1, 0},
    };
    static tsr_cu_stats th[THREADS];
    ASSERT_TRUE(cpu());
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t n = cases[t].n, pos = cases[t].h * cases[t].w, c = cases[t].c;
        const int64_t cpg = c / cases[t].groups, total = n * pos * c;
        float *x = rnd_buf((size_t)total, 2.0f), *gamma = rnd_buf((size_t)c, 1.5f);
        float *beta = rnd_buf((size_t)c, 0.5f);
        float *want = malloc((size_t)total * sizeof(float)), *got = malloc((size_t)total * sizeof(float));
        ASSERT_TRUE(x && gamma && beta && want && got);
        for (int64_t i = 0; i < total; i++)
            x[i] += 3.0f; /* an offset mean: E[x^2] - E[x]^2 would cancel */
        const int64_t xe[4] = {n, cases[t].h, cases[t].w, c}, ce[1] = {c};
        tsr_tensor tx = host(4, xe, x), ty = host(4, xe, want), tg = host(1, ce, gamma);
        tsr_tensor tb = host(1, ce, beta);
        ASSERT_OK(tsr_group_norm(cpu(), &tx, &tg, &tb, cases[t].groups, 1e-5f, cases[t].silu != 0,
                                 &ty));
        const int split = cases[t].split;
        for (int64_t img = 0; img < n; img++)
            for (int g = 0; g < cases[t].groups; g++) {
                /* k_gn_stats per part, then k_gn_merge in part order */
                const int64_t count = pos * cpg;
                tsr_cu_stats all = {0.0f, 0.0f, 0.0f};
                for (int s = 0; s < split; s++) {
                    const int64_t k0 = count * s / split, k1 = count * (s + 1) / split;
                    memset(th, 0, sizeof th);
                    for (int tid = 0; tid < THREADS; tid++)
                        for (int64_t kk = k0 + tid; kk < k1; kk += THREADS)
                            tsr_cu_stats_add(&th[tid],
                                             x[img * pos * c + tsr_cu_gn_offset(kk, c, cpg, g)]);
                    all = tsr_cu_stats_merge(all, block_merge(th));
                }
                const float mean = all.mean, rstd = tsr_cu_stats_rstd(all, 1e-5f);
                for (int64_t pp = 0; pp < pos; pp++)
                    for (int64_t ch = g * cpg; ch < (g + 1) * cpg; ch++) {
                        const int64_t i = (img * pos + pp) * c + ch;
                        const float a = rstd * gamma[ch], sh = beta[ch] - mean * a;
                        float v = x[i] * a + sh;
                        got[i] = cases[t].silu ? tsr_cu_silu(v) : v;
                    }
            }
        char what[64];
        snprintf(what, sizeof what, "group norm case %zu", t);
        ASSERT_CLOSE(what, got, want, (size_t)total, 2e-5);
        free(x);
        free(gamma);
        free(beta);
        free(want);
        free(got);
    }
    return 0;
}

static int test_layer_norm_stats(void)
{
    const int64_t rows = 9, c = 1280;
    float *x = rnd_buf((size_t)(rows * c), 3.0f), *gamma = rnd_buf((size_t)c, 1.0f);
    float *beta = rnd_buf((size_t)c, 1.0f);
    float *want = malloc((size_t)(rows * c) * sizeof(float)), *got = malloc((size_t)(rows * c) * sizeof(float));
    static tsr_cu_stats th[THREADS];
    ASSERT_TRUE(x && gamma && beta && want && got && cpu());
    for (int64_t i = 0; i < rows * c; i++)
        x[i] -= 5.0f;
    const int64_t xe[2] = {rows, c}, ce[1] = {c};
    tsr_tensor tx = host(2, xe, x), ty = host(2, xe, want), tg = host(1, ce, gamma);
    tsr_tensor tb = host(1, ce, beta);
    ASSERT_OK(tsr_layer_norm(cpu(), &tx, &tg, &tb, 1e-5f, &ty));
    for (int64_t r = 0; r < rows; r++) {
        memset(th, 0, sizeof th);
        for (int tid = 0; tid < THREADS; tid++)
            for (int64_t i = tid; i < c; i += THREADS)
                tsr_cu_stats_add(&th[tid], x[r * c + i]);
        tsr_cu_stats st = block_merge(th);
        const float rstd = tsr_cu_stats_rstd(st, 1e-5f);
        for (int64_t i = 0; i < c; i++)
            got[r * c + i] = (x[r * c + i] - st.mean) * rstd * gamma[i] + beta[i];
    }
    ASSERT_CLOSE("layer norm", got, want, (size_t)(rows * c), 2e-5);
    free(x);
    free(gamma);
    free(beta);
    free(want);
    free(got);
    return 0;
}

/* ---- timestep embedding ---- */

static int test_timestep(void)
{
    const float ts[5] = {0.0f, 1.0f, 250.5f, 781.0f, 999.0f};
    const int dims[3] = {320, 1280, 257};
    ASSERT_TRUE(cpu());
    for (int di = 0; di < 3; di++)
        for (int flip = 0; flip < 2; flip++) {
            const int dim = dims[di];
            const int64_t nf = dim / 2;
            float want[5 * 1280], got[5 * 1280];
            float tcopy[5];
            memcpy(tcopy, ts, sizeof tcopy);
            const int64_t te[1] = {5}, ye[2] = {5, dim};
            tsr_tensor tt = host(1, te, tcopy), ty = host(2, ye, want);
            tsr_timestep_params p = {.dim = dim, .flip_sin_to_cos = flip != 0,
                                     .downscale_freq_shift = flip ? 0.0f : 1.0f};
            ASSERT_OK(tsr_timestep_embedding(cpu(), &tt, &p, &ty));
            for (int r = 0; r < 5; r++)
                for (int col = 0; col < dim; col++) {
                    float v = 0.0f;
                    if (col < 2 * nf) {
                        const int64_t k = col < nf ? col : col - nf;
                        const int first = col < nf;
                        const float arg = tsr_cu_timestep_arg(ts[r], k, nf,
                                                              p.downscale_freq_shift);
                        v = (first != flip) ? sinf(arg) : cosf(arg);
                    }
                    got[r * dim + col] = v;
                }
            ASSERT_CLOSE("timestep embedding", got, want, (size_t)(5 * dim), 1e-6);
        }
    return 0;
}

static const tsr_test_entry tests[] = {
    {"f16_bf16", test_f16_bf16},
    {"activations", test_activations},
    {"broadcast", test_broadcast},
    {"online_softmax", test_online_softmax},
    {"group_norm_stats", test_group_norm_stats},
    {"layer_norm_stats", test_layer_norm_stats},
    {"timestep", test_timestep},
};

TSR_TEST_TABLE_MAIN(tests)
