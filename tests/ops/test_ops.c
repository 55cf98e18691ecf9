/*
 * tests/ops/test_ops.c - every op against PyTorch goldens, on the backend
 * under test (TSR_TEST_DEVICE, default the CPU; see test_ops.h), plus the
 * wrappers' shape checks and the backend interface's own tests.
 *
 * Why: the CPU backend is the oracle for every other backend, so it is
 * itself checked against torch.nn.functional (computed in float64 by
 * tools/reference/make_op_goldens.py and committed under tests/data/ops/),
 * and any other backend is checked against both.  Each golden file holds
 * several cases ("<case>.<role>" tensors, parameters in the metadata); a
 * test runs all of one op's cases through ops_check (ops_harness.c), which
 * fails a case whose max error relative to max |reference| exceeds 1e-5 in
 * f32 (looser for f16/bf16 storage).  Tests that need no golden (bad
 * shapes, aliasing, a conv large enough to tile its im2col buffer) compare
 * against a naive loop in double (test_ops_checks.c, test_ops_backend.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "test.h"
#include "test_ops.h"

#define TOL 1e-5
#define MAX_CASES 16

typedef struct golden {
    tsr_safetensors *st;
    char names[MAX_CASES][48];
    int n;
} golden;

static int golden_open(const char *op, golden *g)
{
    char rel[128], path[512];
    memset(g, 0, sizeof *g);
    snprintf(rel, sizeof rel, "ops/%s.safetensors", op);
    int rc = tsr_st_open(tsr_test_path(rel, path, sizeof path), &g->st);
    if (rc < 0) {
        fprintf(stderr, "%s: %s\n", path, tsr_last_error());
        return rc;
    }
    const char *cases = tsr_st_metadata(g->st, "cases");
    if (!cases) {
        fprintf(stderr, "%s: no 'cases' metadata\n", path);
        return TSR_ERR_FORMAT;
    }
    while (*cases && g->n < MAX_CASES) {
        size_t len = strcspn(cases, ",");
        if (len >= sizeof g->names[0])
            return TSR_ERR_FORMAT;
        memcpy(g->names[g->n], cases, len);
        g->names[g->n++][len] = 0;
        cases += len + (cases[len] == ',');
    }
    return g->n > 0 ? TSR_OK : TSR_ERR_FORMAT;
}

static void golden_close(golden *g)
{
    tsr_st_close(g->st);
    g->st = NULL;
}

/* View of "<case>.<role>"; false when absent. */
static bool golden_get(const golden *g, const char *c, const char *role, tsr_tensor *t)
{
    char name[128];
    snprintf(name, sizeof name, "%s.%s", c, role);
    const tsr_st_entry *e = tsr_st_find(g->st, name);
    if (!e || e->ndim < 1 || e->ndim > TSR_MAX_DIMS)
        return false;
    tsr_dtype dt;
    if (e->dtype == TSR_ST_F32)
        dt = TSR_F32;
    else if (e->dtype == TSR_ST_I32)
        dt = TSR_I32;
    else
        return false;
    *t = tsr_tensor_make(dt, e->ndim, e->shape, (void *)tsr_st_data(g->st, e), NULL);
    return true;
}

/* Numeric parameter "key=value" of a case's metadata string. */
static double golden_param(const golden *g, const char *c, const char *key, double dflt)
{
    const char *m = tsr_st_metadata(g->st, c);
    size_t klen = strlen(key);
    for (const char *p = m; p && *p;) {
        if (strncmp(p, key, klen) == 0 && p[klen] == '=')
            return strtod(p + klen + 1, NULL);
        p = strchr(p, ' ');
        p = p ? p + 1 : NULL;
    }
    return dflt;
}

static const char *golden_str(const golden *g, const char *c, const char *key, char *buf,
                              size_t size)
{
    const char *m = tsr_st_metadata(g->st, c);
    size_t klen = strlen(key);
    buf[0] = 0;
    for (const char *p = m; p && *p;) {
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
            size_t len = strcspn(p + klen + 1, " ");
            if (len >= size)
                len = size - 1;
            memcpy(buf, p + klen + 1, len);
            buf[len] = 0;
            break;
        }
        p = strchr(p, ' ');
        p = p ? p + 1 : NULL;
    }
    return buf;
}

/* ---- golden cases through the harness ---- */

/* Opens op's golden and runs every case: `build` fills the case (inputs,
 * parameters, runner) from the golden; returns false when the golden lacks
 * something (a failure). */
typedef bool (*build_fn)(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params);

static int run_golden(const char *op, build_fn build, const char *kind_filter)
{
    if (!ops_device())
        return OPS_SKIP;
    golden g;
    ASSERT_OK(golden_open(op, &g));
    ops_tally tally = {0};
    for (int i = 0; i < g.n; i++) {
        const char *c = g.names[i];
        char kbuf[32];
        if (kind_filter && strcmp(golden_str(&g, c, "kind", kbuf, sizeof kbuf), kind_filter) != 0)
            continue;
        tsr_tensor t[OPS_MAX_SRC + 1];
        union {
            tsr_conv2d_params conv;
            tsr_attention_params attn;
            tsr_timestep_params ts;
            double d[4];
        } params;
        ops_case oc = {.op = op, .name = c, .tol = strcmp(op, "timestep_embedding") ? TOL : 1e-4,
                       .params = &params};
        /* t[OPS_MAX_SRC] is the golden output */
        if (!golden_get(&g, c, "y", &t[OPS_MAX_SRC]) || !build(&g, c, &oc, t, &params)) {
            fprintf(stderr, "%s/%s: golden incomplete\n", op, c);
            ops_tally_add(&tally, 1);
            continue;
        }
        oc.want = &t[OPS_MAX_SRC];
        oc.y = t[OPS_MAX_SRC];
        ops_tally_add(&tally, ops_check(&oc));
        if (oc.n_src == 1 && oc.inplace == false && oc.run && kind_filter) {
            oc.inplace = true; /* unary ops: y aliasing x gives the same */
            ops_tally_add(&tally, ops_check(&oc));
        }
    }
    golden_close(&g);
    ASSERT_TRUE(tally.ran + tally.skipped + tally.failed > 0);
    return ops_tally_result(&tally);
}

/* Input `role` of case c into t[i] / oc->src[i]. */
static bool in(const golden *g, const char *c, const char *role, ops_case *oc, tsr_tensor *t,
               int i, ops_role r, bool optional)
{
    if (!golden_get(g, c, role, &t[i]))
        return optional;
    oc->src[i] = &t[i];
    oc->role[i] = r;
    if (oc->n_src < i + 1)
        oc->n_src = i + 1;
    return true;
}

#define P(type) (*(const type *)c->params)
#define D(k) (((const double *)c->params)[k])

static int r_conv2d(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_conv2d(be, s[0], s[1], s[2], &P(tsr_conv2d_params), y);
}
static bool b_conv2d(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    tsr_conv2d_params *p = params;
    *p = (tsr_conv2d_params){.stride_h = (int)golden_param(g, c, "stride_h", 1),
                             .stride_w = (int)golden_param(g, c, "stride_w", 1),
                             .pad_t = (int)golden_param(g, c, "pad_t", 0),
                             .pad_l = (int)golden_param(g, c, "pad_l", 0),
                             .pad_b = (int)golden_param(g, c, "pad_b", 0),
                             .pad_r = (int)golden_param(g, c, "pad_r", 0),
                             .circular = golden_param(g, c, "circular", 0) != 0};
    oc->run = r_conv2d;
    return in(g, c, "x", oc, t, 0, OPS_ACT, false) && in(g, c, "w", oc, t, 1, OPS_PARAM, false) &&
           in(g, c, "b", oc, t, 2, OPS_PARAM, true);
}

static int r_linear(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    (void)c;
    return tsr_linear(be, s[0], s[1], s[2], y);
}
static bool b_linear(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    (void)params;
    oc->run = r_linear;
    return in(g, c, "x", oc, t, 0, OPS_ACT, false) && in(g, c, "w", oc, t, 1, OPS_PARAM, false) &&
           in(g, c, "b", oc, t, 2, OPS_PARAM, true);
}

static int r_matmul(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_matmul(be, s[0], s[1], D(0) != 0, D(1) != 0, (float)D(2), y);
}
static bool b_matmul(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    double *d = params;
    d[0] = golden_param(g, c, "trans_a", 0);
    d[1] = golden_param(g, c, "trans_b", 0);
    d[2] = golden_param(g, c, "alpha", 1);
    oc->run = r_matmul;
    return in(g, c, "a", oc, t, 0, OPS_ACT, false) && in(g, c, "b", oc, t, 1, OPS_ACT, false);
}

static int r_group_norm(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s,
                        tsr_tensor *y)
{
    return tsr_group_norm(be, s[0], s[1], s[2], (int)D(0), (float)D(1), D(2) != 0, y);
}
static bool b_group_norm(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    double *d = params;
    d[0] = golden_param(g, c, "groups", 32);
    d[1] = golden_param(g, c, "eps", 1e-5);
    d[2] = golden_param(g, c, "silu", 0);
    oc->run = r_group_norm;
    return in(g, c, "x", oc, t, 0, OPS_ACT, false) &&
           in(g, c, "gamma", oc, t, 1, OPS_PARAM, false) &&
           in(g, c, "beta", oc, t, 2, OPS_PARAM, false);
}

static int r_layer_norm(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s,
                        tsr_tensor *y)
{
    return tsr_layer_norm(be, s[0], s[1], s[2], (float)D(0), y);
}
static bool b_layer_norm(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    ((double *)params)[0] = golden_param(g, c, "eps", 1e-5);
    oc->run = r_layer_norm;
    return in(g, c, "x", oc, t, 0, OPS_ACT, false) &&
           in(g, c, "gamma", oc, t, 1, OPS_PARAM, false) &&
           in(g, c, "beta", oc, t, 2, OPS_PARAM, true);
}

static int r_softmax(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    (void)c;
    return tsr_softmax(be, s[0], y);
}
static bool b_softmax(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    (void)params;
    oc->run = r_softmax;
    return in(g, c, "x", oc, t, 0, OPS_ACT, false);
}

static int r_attention(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s,
                       tsr_tensor *y)
{
    return tsr_attention(be, s[0], s[1], s[2], &P(tsr_attention_params), y);
}
static bool b_attention(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    *(tsr_attention_params *)params =
        (tsr_attention_params){.heads = (int)golden_param(g, c, "heads", 1),
                               .scale = (float)golden_param(g, c, "scale", 0),
                               .causal = golden_param(g, c, "causal", 0) != 0};
    oc->run = r_attention;
    return in(g, c, "q", oc, t, 0, OPS_ACT, false) && in(g, c, "k", oc, t, 1, OPS_ACT, false) &&
           in(g, c, "v", oc, t, 2, OPS_ACT, false);
}

static int r_unary(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_unary(be, (tsr_unary_kind)D(0), s[0], y);
}
static bool b_unary(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    static const char *const kinds[] = {"silu", "gelu", "gelu_tanh", "quick_gelu"};
    char kbuf[32];
    golden_str(g, c, "kind", kbuf, sizeof kbuf);
    ((double *)params)[0] = -1;
    for (int k = 0; k < 4; k++)
        if (strcmp(kbuf, kinds[k]) == 0)
            ((double *)params)[0] = k;
    oc->run = r_unary;
    return ((double *)params)[0] >= 0 && in(g, c, "x", oc, t, 0, OPS_ACT, false);
}

static int r_geglu(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    (void)c;
    return tsr_geglu(be, s[0], y);
}
static bool b_geglu(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    (void)params;
    oc->run = r_geglu;
    return in(g, c, "x", oc, t, 0, OPS_ACT, false);
}

static int r_binary(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_binary(be, (tsr_binary_kind)D(0), s[0], s[1], y);
}
static bool b_binary(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    char kbuf[16];
    ((double *)params)[0] = strcmp(golden_str(g, c, "kind", kbuf, sizeof kbuf), "mul") == 0
                                ? TSR_BINARY_MUL
                                : TSR_BINARY_ADD;
    oc->run = r_binary;
    return in(g, c, "a", oc, t, 0, OPS_ACT, false) && in(g, c, "b", oc, t, 1, OPS_ACT, false);
}

static int r_scale(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_scale(be, s[0], (float)D(0), y);
}
static bool b_scale(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    ((double *)params)[0] = golden_param(g, c, "s", 1);
    oc->run = r_scale;
    return in(g, c, "x", oc, t, 0, OPS_ACT, false);
}

static int r_concat(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    (void)c;
    return tsr_concat(be, s[0], s[1], y);
}
static bool b_concat(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    (void)params;
    oc->run = r_concat;
    return in(g, c, "a", oc, t, 0, OPS_ACT, false) && in(g, c, "b", oc, t, 1, OPS_ACT, false);
}

static int r_up2x(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    (void)c;
    return tsr_upsample_nearest2x(be, s[0], y);
}
static int r_up(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    (void)c;
    return tsr_upsample_nearest(be, s[0], y);
}
static bool b_up2x(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    (void)params;
    oc->run = r_up2x;
    return in(g, c, "x", oc, t, 0, OPS_ACT, false);
}
static bool b_up(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    (void)params;
    oc->run = r_up;
    return in(g, c, "x", oc, t, 0, OPS_ACT, false);
}

static int r_timestep(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s, tsr_tensor *y)
{
    return tsr_timestep_embedding(be, s[0], &P(tsr_timestep_params), y);
}
static bool b_timestep(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    *(tsr_timestep_params *)params =
        (tsr_timestep_params){.dim = (int)golden_param(g, c, "dim", 320),
                              .flip_sin_to_cos = golden_param(g, c, "flip", 1) != 0,
                              .downscale_freq_shift = (float)golden_param(g, c, "shift", 0)};
    oc->run = r_timestep;
    return in(g, c, "t", oc, t, 0, OPS_ASIS, false);
}

static int r_embedding(tsr_backend *be, const ops_case *c, const tsr_tensor *const *s,
                       tsr_tensor *y)
{
    (void)c;
    return tsr_embedding(be, s[0], s[1], y);
}
static bool b_embedding(const golden *g, const char *c, ops_case *oc, tsr_tensor *t, void *params)
{
    (void)params;
    oc->run = r_embedding;
    return in(g, c, "ids", oc, t, 0, OPS_ASIS, false) &&
           in(g, c, "table", oc, t, 1, OPS_PARAM, false);
}

static int test_conv2d(void) { return run_golden("conv2d", b_conv2d, NULL); }
/* circular padding (seamless tiling): tools/reference/make_tiling_goldens.py */
static int test_conv2d_circular(void) { return run_golden("conv2d_circular", b_conv2d, NULL); }
static int test_linear(void) { return run_golden("linear", b_linear, NULL); }
static int test_matmul(void) { return run_golden("matmul", b_matmul, NULL); }
static int test_group_norm(void) { return run_golden("group_norm", b_group_norm, NULL); }
static int test_layer_norm(void) { return run_golden("layer_norm", b_layer_norm, NULL); }
static int test_softmax(void) { return run_golden("softmax", b_softmax, NULL); }
static int test_attention(void) { return run_golden("attention", b_attention, NULL); }
static int test_unary_silu(void) { return run_golden("unary", b_unary, "silu"); }
static int test_unary_gelu(void) { return run_golden("unary", b_unary, "gelu"); }
static int test_unary_gelu_tanh(void) { return run_golden("unary", b_unary, "gelu_tanh"); }
static int test_unary_quick_gelu(void) { return run_golden("unary", b_unary, "quick_gelu"); }
static int test_geglu(void) { return run_golden("geglu", b_geglu, NULL); }
static int test_binary(void) { return run_golden("binary", b_binary, NULL); }
static int test_scale(void) { return run_golden("scale", b_scale, NULL); }
static int test_concat(void) { return run_golden("concat", b_concat, NULL); }
static int test_upsample(void) { return run_golden("upsample_nearest2x", b_up2x, NULL); }
static int test_upsample_size(void) { return run_golden("upsample_nearest", b_up, NULL); }
static int test_timestep_embedding(void)
{
    return run_golden("timestep_embedding", b_timestep, NULL);
}
static int test_embedding(void) { return run_golden("embedding", b_embedding, NULL); }

static const tsr_test_entry tests[] = {
    {"conv2d", test_conv2d},
    {"conv2d_circular", test_conv2d_circular},
    {"conv2d_tiled", test_conv2d_tiled},
    {"linear", test_linear},
    {"matmul", test_matmul},
    {"group_norm", test_group_norm},
    {"layer_norm", test_layer_norm},
    {"softmax", test_softmax},
    {"attention", test_attention},
    {"attention_long", test_attention_long},
    {"unary_silu", test_unary_silu},
    {"unary_gelu", test_unary_gelu},
    {"unary_gelu_tanh", test_unary_gelu_tanh},
    {"unary_quick_gelu", test_unary_quick_gelu},
    {"geglu", test_geglu},
    {"binary", test_binary},
    {"scale", test_scale},
    {"concat", test_concat},
    {"upsample_nearest2x", test_upsample},
    {"upsample_nearest", test_upsample_size},
    {"timestep_embedding", test_timestep_embedding},
    {"embedding", test_embedding},
    {"embedding_range", test_embedding_range},
    {"reject_shapes", test_reject_shapes},
    {"aliasing", test_aliasing},
    {"supports_op", test_supports_op},
    {"epilogue", test_epilogue},
    {"epilogue_checks", test_epilogue_checks},
    {"supports_desc", test_supports_desc},
    {"convert", test_convert},
    {"events_pinned", test_events_pinned},
    {"storage_variant", test_storage_variant},
};

TSR_TEST_TABLE_MAIN(tests)
