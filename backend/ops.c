/*
 * backend/ops.c - the op wrappers shared by every backend.
 *
 * Why one place: backends (CPU, CUDA) trust the shapes they are given, so
 * every contract of backend.h is checked here, once, before dispatch: the
 * dtypes, the ranks, that every dimension is positive and small enough for
 * a BLAS int, that sizes do not overflow, that the output has exactly the
 * shape the op produces, and that outputs do not partially overlap inputs
 * (ops documented as "y may alias x" accept y == x exactly).  A failure
 * names the op and the offending shapes, e.g.
 *   "conv2d: weight [320, 3, 3, 4] expects 4 input channels, x is [2, 64, 64, 320]".
 * Only then is the backend asked whether it runs the op (supports_op sees
 * the whole op: tensors, parameters, epilogue) and its function pointer
 * called; a NULL pointer or a refusal gives TSR_ERR_UNSUPPORTED naming the
 * op and the backend's reason, so the caller can fall back to the CPU
 * backend.  Activation inputs and outputs must share a dtype; parameters
 * (weights, biases, affines, tables, binary's b) may be any float dtype.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"

#define SHAPE_BUF 96
#define SH(t, buf) tsr_tensor_shape_str((t), (buf), sizeof(buf))

const char *tsr_op_name(tsr_op op)
{
    static const char *const names[TSR_OP_COUNT] = {
        [TSR_OP_CONV2D] = "conv2d",
        [TSR_OP_LINEAR] = "linear",
        [TSR_OP_MATMUL] = "matmul",
        [TSR_OP_GROUP_NORM] = "group_norm",
        [TSR_OP_LAYER_NORM] = "layer_norm",
        [TSR_OP_SOFTMAX] = "softmax",
        [TSR_OP_ATTENTION] = "attention",
        [TSR_OP_UNARY] = "unary",
        [TSR_OP_GEGLU] = "geglu",
        [TSR_OP_BINARY] = "binary",
        [TSR_OP_SCALE] = "scale",
        [TSR_OP_CONCAT] = "concat",
        [TSR_OP_UPSAMPLE_NEAREST] = "upsample_nearest",
        [TSR_OP_TIMESTEP_EMBEDDING] = "timestep_embedding",
        [TSR_OP_EMBEDDING] = "embedding",
        [TSR_OP_CONVERT] = "convert",
    };
    return (unsigned)op < (unsigned)TSR_OP_COUNT ? names[op] : "unknown";
}

static bool is_float(tsr_dtype d)
{
    return d == TSR_F32 || d == TSR_F16 || d == TSR_BF16;
}

/* A tensor an op may read or write: sane rank and dims, data present, size
 * representable.  `role` names it ("x", "weight") in messages. */
static int check_tensor(const char *op, const char *role, const tsr_tensor *t)
{
    if (!t)
        return tsr_errorf(TSR_ERR_INVALID, "%s: %s is NULL", op, role);
    if (t->ndim < 1 || t->ndim > TSR_MAX_DIMS)
        return tsr_errorf(TSR_ERR_INVALID, "%s: %s has rank %d (expected 1..%d)", op, role, t->ndim,
                          TSR_MAX_DIMS);
    if ((unsigned)t->dtype >= (unsigned)TSR_DTYPE_COUNT)
        return tsr_errorf(TSR_ERR_INVALID, "%s: %s has an unknown dtype %d", op, role, (int)t->dtype);
    uint64_t n = tsr_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++) {
        if (t->ne[i] < 1 || t->ne[i] > INT_MAX) {
            char b[SHAPE_BUF];
            return tsr_errorf(TSR_ERR_RANGE, "%s: %s %s has dimension %d out of range [1, %d]", op,
                              role, SH(t, b), i, INT_MAX);
        }
        if (!tsr_mul_overflow_u64(n, (uint64_t)t->ne[i], &n) || n > (uint64_t)INT64_MAX / 2) {
            char b[SHAPE_BUF];
            return tsr_errorf(TSR_ERR_RANGE, "%s: %s %s is too large", op, role, SH(t, b));
        }
    }
    if (!t->data)
        return tsr_errorf(TSR_ERR_INVALID, "%s: %s has no data", op, role);
    return TSR_OK;
}

static int check_float(const char *op, const char *role, const tsr_tensor *t, tsr_dtype want)
{
    TSR_TRY(check_tensor(op, role, t));
    if (!is_float(t->dtype) || t->dtype != want)
        return tsr_errorf(TSR_ERR_INVALID, "%s: %s is %s, expected %s", op, role,
                          tsr_dtype_name(t->dtype), tsr_dtype_name(want));
    return TSR_OK;
}

/* Any float dtype: a parameter (weight, bias, affine, table), an output
 * whose dtype the op leaves free (timestep_embedding, embedding), or the
 * activation input whose dtype the op's other tensors must then share
 * (check_act). */
static int check_param(const char *op, const char *role, const tsr_tensor *t)
{
    TSR_TRY(check_tensor(op, role, t));
    if (!is_float(t->dtype))
        return tsr_errorf(TSR_ERR_INVALID, "%s: %s is %s, expected a float dtype", op, role,
                          tsr_dtype_name(t->dtype));
    return TSR_OK;
}

/* The activation input that sets the op's dtype (check_float's `want` for
 * the rest). */
static int check_act(const char *op, const char *role, const tsr_tensor *t)
{
    return check_param(op, role, t);
}

static int check_rank(const char *op, const char *role, const tsr_tensor *t, int lo, int hi)
{
    if (t->ndim < lo || t->ndim > hi) {
        char b[SHAPE_BUF];
        if (lo == hi)
            return tsr_errorf(TSR_ERR_INVALID, "%s: %s %s must have rank %d", op, role, SH(t, b), lo);
        return tsr_errorf(TSR_ERR_INVALID, "%s: %s %s must have rank %d..%d", op, role, SH(t, b),
                          lo, hi);
    }
    return TSR_OK;
}

/* y must have exactly the shape in ne[0..ndim). */
static int check_out(const char *op, const tsr_tensor *y, int ndim, const int64_t *ne,
                     const char *from, const tsr_tensor *src)
{
    tsr_tensor want = *y;
    want.ndim = ndim;
    for (int i = 0; i < TSR_MAX_DIMS; i++)
        want.ne[i] = i < ndim ? ne[i] : 1;
    if (!tsr_tensor_same_shape(y, &want)) {
        char a[SHAPE_BUF], b[SHAPE_BUF], c[SHAPE_BUF];
        return tsr_errorf(TSR_ERR_INVALID, "%s: output y is %s, expected %s for %s %s", op,
                          SH(y, a), SH(&want, b), from, SH(src, c));
    }
    return TSR_OK;
}

static int check_vec(const char *op, const char *role, const tsr_tensor *t, int64_t n)
{
    TSR_TRY(check_param(op, role, t));
    if (t->ndim != 1 || t->ne[0] != n) {
        char b[SHAPE_BUF];
        return tsr_errorf(TSR_ERR_INVALID, "%s: %s is %s, expected [%lld]", op, role, SH(t, b),
                          (long long)n);
    }
    return TSR_OK;
}

/* Host-visible memory ranges must not partially overlap; identical starts
 * are allowed when `alias_ok`. */
static int check_overlap(const char *op, const tsr_tensor *y, const char *role,
                         const tsr_tensor *x, bool alias_ok)
{
    if (!x || !y)
        return TSR_OK;
    uintptr_t y0 = (uintptr_t)y->data, y1 = y0 + tsr_tensor_nbytes(y);
    uintptr_t x0 = (uintptr_t)x->data, x1 = x0 + tsr_tensor_nbytes(x);
    if (y0 >= x1 || x0 >= y1)
        return TSR_OK;
    if (alias_ok && y0 == x0 && y1 == x1)
        return TSR_OK;
    return tsr_errorf(TSR_ERR_INVALID, "%s: output y overlaps input %s%s", op, role,
                      alias_ok ? " (only exact aliasing is allowed)" : "");
}

/* The op as supports_op sees it. */
static tsr_op_desc desc_make(tsr_op op, tsr_dtype dt, const tsr_tensor *s0, const tsr_tensor *s1,
                             const tsr_tensor *s2, const tsr_tensor *dst)
{
    tsr_op_desc d;
    memset(&d, 0, sizeof d);
    d.op = op;
    d.dtype = dt;
    d.src[0] = s0;
    d.src[1] = s1;
    d.src[2] = s2;
    d.dst = dst;
    return d;
}

static int dispatch_check(tsr_backend *b, const tsr_op_desc *d, const void *fn)
{
    const char *name = tsr_op_name(d->op);
    if (!b || !b->iface)
        return tsr_errorf(TSR_ERR_INVALID, "%s: no backend", name);
    if (!fn)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: not implemented by backend %s", name, b->name);
    char why[160] = "";
    if (!tsr_backend_supports_op(b, d, why, sizeof why))
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: backend %s cannot run it: %s", name, b->name,
                          why[0] ? why : "refused");
    return TSR_OK;
}

#define FN_PTR(b, name) ((b) && (b)->iface ? (const void *)(b)->iface->name : NULL)

/* b (or an epilogue's residual) broadcasts onto a's shape: rank <= a's,
 * every dim 1 or equal, right-aligned. */
static int check_broadcast(const char *op, const char *role, const tsr_tensor *bt,
                           const tsr_tensor *a)
{
    char s1[SHAPE_BUF], s2[SHAPE_BUF];
    if (bt->ndim > a->ndim)
        return tsr_errorf(TSR_ERR_INVALID, "%s: %s %s has a higher rank than %s", op, role,
                          SH(bt, s1), SH(a, s2));
    for (int i = 0; i < bt->ndim; i++) {
        int64_t db = bt->ne[bt->ndim - 1 - i], da = a->ne[a->ndim - 1 - i];
        if (db != 1 && db != da)
            return tsr_errorf(TSR_ERR_INVALID, "%s: %s %s does not broadcast onto %s", op, role,
                              SH(bt, s1), SH(a, s2));
    }
    return TSR_OK;
}

/* The epilogue of conv2d / linear against the output y. */
static int check_epilogue(const char *op, const tsr_epilogue *e, const tsr_tensor *y)
{
    if (!e)
        return TSR_OK;
    if (e->has_act && (unsigned)e->act > (unsigned)TSR_UNARY_QUICK_GELU)
        return tsr_errorf(TSR_ERR_INVALID, "%s: unknown epilogue activation %d", op, (int)e->act);
    if (!e->residual)
        return TSR_OK;
    TSR_TRY(check_float(op, "residual", e->residual, y->dtype));
    TSR_TRY(check_broadcast(op, "residual", e->residual, y));
    return check_overlap(op, y, "residual", e->residual, false);
}

/* ---- conv2d ---- */

int tsr_conv2d(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
               const tsr_conv2d_params *p, tsr_tensor *y)
{
    return tsr_conv2d_fused(b, x, w, bias, p, NULL, y);
}

int tsr_conv2d_fused(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w,
                     const tsr_tensor *bias, const tsr_conv2d_params *p, const tsr_epilogue *e,
                     tsr_tensor *y)
{
    const char *op = "conv2d";
    char s1[SHAPE_BUF], s2[SHAPE_BUF];
    TSR_TRY(check_act(op, "x", x));
    TSR_TRY(check_param(op, "weight", w));
    TSR_TRY(check_float(op, "y", y, x->dtype));
    TSR_TRY(check_rank(op, "x", x, 4, 4));
    TSR_TRY(check_rank(op, "weight", w, 4, 4));
    if (!p)
        return tsr_errorf(TSR_ERR_INVALID, "%s: no parameters", op);
    if (w->ne[3] != x->ne[3])
        return tsr_errorf(TSR_ERR_INVALID, "%s: weight %s expects %lld input channels, x is %s", op,
                          SH(w, s1), (long long)w->ne[3], SH(x, s2));
    if (bias)
        TSR_TRY(check_vec(op, "bias", bias, w->ne[0]));
    if (p->stride_h < 1 || p->stride_w < 1 || p->stride_h > 64 || p->stride_w > 64)
        return tsr_errorf(TSR_ERR_INVALID, "%s: stride %dx%d out of range [1, 64]", op, p->stride_h,
                          p->stride_w);
    if (p->pad_t < 0 || p->pad_l < 0 || p->pad_b < 0 || p->pad_r < 0 || p->pad_t > 1024 ||
        p->pad_l > 1024 || p->pad_b > 1024 || p->pad_r > 1024)
        return tsr_errorf(TSR_ERR_INVALID, "%s: padding (t %d, l %d, b %d, r %d) out of range [0, 1024]",
                          op, p->pad_t, p->pad_l, p->pad_b, p->pad_r);
    if (p->circular && (p->pad_t > x->ne[1] || p->pad_b > x->ne[1] || p->pad_l > x->ne[2] ||
                        p->pad_r > x->ne[2]))
        return tsr_errorf(TSR_ERR_INVALID,
                          "%s: circular padding (t %d, l %d, b %d, r %d) wraps more than once "
                          "around x %s",
                          op, p->pad_t, p->pad_l, p->pad_b, p->pad_r, SH(x, s1));
    int64_t hp = x->ne[1] + p->pad_t + p->pad_b, wp = x->ne[2] + p->pad_l + p->pad_r;
    if (hp < w->ne[1] || wp < w->ne[2])
        return tsr_errorf(TSR_ERR_INVALID, "%s: kernel %lldx%lld larger than padded input %lldx%lld (x %s)",
                          op, (long long)w->ne[1], (long long)w->ne[2], (long long)hp, (long long)wp,
                          SH(x, s1));
    int64_t ho = (hp - w->ne[1]) / p->stride_h + 1, wo = (wp - w->ne[2]) / p->stride_w + 1;
    int64_t k = w->ne[1] * w->ne[2] * w->ne[3];
    if (k > INT_MAX || x->ne[0] * ho * wo > INT_MAX || x->ne[0] * x->ne[1] * x->ne[2] > INT_MAX)
        return tsr_errorf(TSR_ERR_RANGE, "%s: x %s with weight %s exceeds the GEMM size limit", op,
                          SH(x, s1), SH(w, s2));
    int64_t ne[4] = {x->ne[0], ho, wo, w->ne[0]};
    TSR_TRY(check_out(op, y, 4, ne, "x", x));
    TSR_TRY(check_overlap(op, y, "x", x, false));
    TSR_TRY(check_overlap(op, y, "weight", w, false));
    TSR_TRY(check_overlap(op, y, "bias", bias, false));
    TSR_TRY(check_epilogue(op, e, y));
    tsr_op_desc d = desc_make(TSR_OP_CONV2D, x->dtype, x, w, bias, y);
    d.p.conv2d = *p;
    if (e) {
        d.epilogue = *e;
        d.src[3] = e->residual;
    }
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, conv2d)));
    return b->iface->conv2d(b, x, w, bias, p, e, y);
}

/* ---- linear ---- */

int tsr_linear(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
               tsr_tensor *y)
{
    return tsr_linear_fused(b, x, w, bias, NULL, y);
}

int tsr_linear_fused(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w,
                     const tsr_tensor *bias, const tsr_epilogue *e, tsr_tensor *y)
{
    const char *op = "linear";
    char s1[SHAPE_BUF], s2[SHAPE_BUF];
    TSR_TRY(check_act(op, "x", x));
    TSR_TRY(check_param(op, "weight", w));
    TSR_TRY(check_float(op, "y", y, x->dtype));
    TSR_TRY(check_rank(op, "weight", w, 2, 2));
    if (x->ne[x->ndim - 1] != w->ne[1])
        return tsr_errorf(TSR_ERR_INVALID, "%s: weight %s expects %lld inputs, x is %s", op,
                          SH(w, s1), (long long)w->ne[1], SH(x, s2));
    if (bias)
        TSR_TRY(check_vec(op, "bias", bias, w->ne[0]));
    int64_t rows = 1;
    for (int i = 0; i + 1 < x->ndim; i++)
        rows *= x->ne[i];
    if (rows > INT_MAX)
        return tsr_errorf(TSR_ERR_RANGE, "%s: x %s has too many rows", op, SH(x, s1));
    int64_t ne[TSR_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        ne[i] = x->ne[i];
    ne[x->ndim - 1] = w->ne[0];
    TSR_TRY(check_out(op, y, x->ndim, ne, "x", x));
    TSR_TRY(check_overlap(op, y, "x", x, false));
    TSR_TRY(check_overlap(op, y, "weight", w, false));
    TSR_TRY(check_overlap(op, y, "bias", bias, false));
    TSR_TRY(check_epilogue(op, e, y));
    tsr_op_desc d = desc_make(TSR_OP_LINEAR, x->dtype, x, w, bias, y);
    if (e) {
        d.epilogue = *e;
        d.src[3] = e->residual;
    }
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, linear)));
    return b->iface->linear(b, x, w, bias, e, y);
}

/* ---- matmul ---- */

int tsr_matmul(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bm, bool trans_a,
               bool trans_b, float alpha, tsr_tensor *y)
{
    const char *op = "matmul";
    char s1[SHAPE_BUF], s2[SHAPE_BUF];
    TSR_TRY(check_act(op, "a", a));
    TSR_TRY(check_float(op, "b", bm, a->dtype));
    TSR_TRY(check_float(op, "y", y, a->dtype));
    TSR_TRY(check_rank(op, "a", a, 2, 3));
    TSR_TRY(check_rank(op, "b", bm, 2, 3));
    if (!isfinite(alpha))
        return tsr_errorf(TSR_ERR_INVALID, "%s: alpha is not finite", op);
    int64_t ba = a->ndim == 3 ? a->ne[0] : 1, bb = bm->ndim == 3 ? bm->ne[0] : 1;
    int64_t ar = a->ne[a->ndim - 2], ac = a->ne[a->ndim - 1];
    int64_t br = bm->ne[bm->ndim - 2], bc = bm->ne[bm->ndim - 1];
    int64_t m = trans_a ? ac : ar, ka = trans_a ? ar : ac;
    int64_t kb = trans_b ? bc : br, n = trans_b ? br : bc;
    if (ka != kb)
        return tsr_errorf(TSR_ERR_INVALID, "%s: inner dimensions differ: a %s%s, b %s%s", op,
                          SH(a, s1), trans_a ? "^T" : "", SH(bm, s2), trans_b ? "^T" : "");
    if (ba != bb && ba != 1 && bb != 1)
        return tsr_errorf(TSR_ERR_INVALID, "%s: batch sizes %lld and %lld do not broadcast (a %s, b %s)",
                          op, (long long)ba, (long long)bb, SH(a, s1), SH(bm, s2));
    int64_t batch = ba > bb ? ba : bb;
    if (y->ndim == 2 && a->ndim == 2 && bm->ndim == 2) {
        int64_t ne[2] = {m, n};
        TSR_TRY(check_out(op, y, 2, ne, "a", a));
    } else {
        int64_t ne[3] = {batch, m, n};
        TSR_TRY(check_out(op, y, 3, ne, "a", a));
    }
    TSR_TRY(check_overlap(op, y, "a", a, false));
    TSR_TRY(check_overlap(op, y, "b", bm, false));
    tsr_op_desc d = desc_make(TSR_OP_MATMUL, a->dtype, a, bm, NULL, y);
    d.p.matmul.trans_a = trans_a;
    d.p.matmul.trans_b = trans_b;
    d.p.matmul.alpha = alpha;
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, matmul)));
    return b->iface->matmul(b, a, bm, trans_a, trans_b, alpha, y);
}

/* ---- norms ---- */

/* What group and layer norm share: eps finite and >= 0, gamma (and beta,
 * when given) one value per channel (c), y of x's shape, y may be x. */
static int check_norm(const char *op, const tsr_tensor *x, const tsr_tensor *gamma,
                      const tsr_tensor *beta, int64_t c, float eps, const tsr_tensor *y)
{
    if (!(eps >= 0.0f) || !isfinite(eps))
        return tsr_errorf(TSR_ERR_INVALID, "%s: eps %g is not a finite non-negative number", op,
                          (double)eps);
    TSR_TRY(check_vec(op, "gamma", gamma, c));
    if (beta)
        TSR_TRY(check_vec(op, "beta", beta, c));
    TSR_TRY(check_out(op, y, x->ndim, x->ne, "x", x));
    return check_overlap(op, y, "x", x, true);
}

int tsr_group_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                   const tsr_tensor *beta, int groups, float eps, bool silu, tsr_tensor *y)
{
    const char *op = "group_norm";
    char s1[SHAPE_BUF];
    TSR_TRY(check_act(op, "x", x));
    TSR_TRY(check_float(op, "y", y, x->dtype));
    TSR_TRY(check_rank(op, "x", x, 2, 4));
    int64_t c = x->ne[x->ndim - 1];
    if (groups < 1 || c % groups != 0)
        return tsr_errorf(TSR_ERR_INVALID, "%s: %d groups do not divide %lld channels of x %s", op,
                          groups, (long long)c, SH(x, s1));
    TSR_TRY(check_norm(op, x, gamma, beta, c, eps, y));
    tsr_op_desc d = desc_make(TSR_OP_GROUP_NORM, x->dtype, x, gamma, beta, y);
    d.p.group_norm.groups = groups;
    d.p.group_norm.eps = eps;
    d.p.group_norm.silu = silu;
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, group_norm)));
    return b->iface->group_norm(b, x, gamma, beta, groups, eps, silu, y);
}

int tsr_layer_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                   const tsr_tensor *beta, float eps, tsr_tensor *y)
{
    const char *op = "layer_norm";
    TSR_TRY(check_act(op, "x", x));
    TSR_TRY(check_float(op, "y", y, x->dtype));
    TSR_TRY(check_norm(op, x, gamma, beta, x->ne[x->ndim - 1], eps, y));
    tsr_op_desc d = desc_make(TSR_OP_LAYER_NORM, x->dtype, x, gamma, beta, y);
    d.p.eps = eps;
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, layer_norm)));
    return b->iface->layer_norm(b, x, gamma, beta, eps, y);
}

int tsr_softmax(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    const char *op = "softmax";
    TSR_TRY(check_act(op, "x", x));
    TSR_TRY(check_float(op, "y", y, x->dtype));
    TSR_TRY(check_out(op, y, x->ndim, x->ne, "x", x));
    TSR_TRY(check_overlap(op, y, "x", x, true));
    tsr_op_desc d = desc_make(TSR_OP_SOFTMAX, x->dtype, x, NULL, NULL, y);
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, softmax)));
    return b->iface->softmax(b, x, y);
}

/* ---- attention ---- */

int tsr_attention(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k, const tsr_tensor *v,
                  const tsr_attention_params *p, tsr_tensor *y)
{
    const char *op = "attention";
    char s1[SHAPE_BUF], s2[SHAPE_BUF];
    TSR_TRY(check_act(op, "q", q));
    TSR_TRY(check_float(op, "k", k, q->dtype));
    TSR_TRY(check_float(op, "v", v, q->dtype));
    TSR_TRY(check_float(op, "y", y, q->dtype));
    TSR_TRY(check_rank(op, "q", q, 3, 3));
    TSR_TRY(check_rank(op, "k", k, 3, 3));
    TSR_TRY(check_rank(op, "v", v, 3, 3));
    if (!p)
        return tsr_errorf(TSR_ERR_INVALID, "%s: no parameters", op);
    if (k->ne[0] != q->ne[0] || k->ne[2] != q->ne[2])
        return tsr_errorf(TSR_ERR_INVALID, "%s: k %s does not match q %s (batch and width must agree)",
                          op, SH(k, s1), SH(q, s2));
    if (!tsr_tensor_same_shape(k, v))
        return tsr_errorf(TSR_ERR_INVALID, "%s: v %s differs from k %s", op, SH(v, s1), SH(k, s2));
    if (p->heads < 1 || q->ne[2] % p->heads != 0)
        return tsr_errorf(TSR_ERR_INVALID, "%s: %d heads do not divide width %lld of q %s", op,
                          p->heads, (long long)q->ne[2], SH(q, s1));
    if (!isfinite(p->scale))
        return tsr_errorf(TSR_ERR_INVALID, "%s: scale is not finite", op);
    TSR_TRY(check_out(op, y, 3, q->ne, "q", q));
    TSR_TRY(check_overlap(op, y, "q", q, false));
    TSR_TRY(check_overlap(op, y, "k", k, false));
    TSR_TRY(check_overlap(op, y, "v", v, false));
    tsr_op_desc d = desc_make(TSR_OP_ATTENTION, q->dtype, q, k, v, y);
    d.p.attention = *p;
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, attention)));
    return b->iface->attention(b, q, k, v, p, y);
}

/* ---- elementwise ---- */

int tsr_unary(tsr_backend *b, tsr_unary_kind kind, const tsr_tensor *x, tsr_tensor *y)
{
    const char *op = "unary";
    TSR_TRY(check_act(op, "x", x));
    TSR_TRY(check_float(op, "y", y, x->dtype));
    if ((unsigned)kind > (unsigned)TSR_UNARY_QUICK_GELU)
        return tsr_errorf(TSR_ERR_INVALID, "%s: unknown kind %d", op, (int)kind);
    TSR_TRY(check_out(op, y, x->ndim, x->ne, "x", x));
    TSR_TRY(check_overlap(op, y, "x", x, true));
    tsr_op_desc d = desc_make(TSR_OP_UNARY, x->dtype, x, NULL, NULL, y);
    d.p.unary = kind;
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, unary)));
    return b->iface->unary(b, kind, x, y);
}

int tsr_geglu(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    const char *op = "geglu";
    char s1[SHAPE_BUF];
    TSR_TRY(check_act(op, "x", x));
    TSR_TRY(check_float(op, "y", y, x->dtype));
    if (x->ne[x->ndim - 1] % 2)
        return tsr_errorf(TSR_ERR_INVALID, "%s: last dim of x %s is odd", op, SH(x, s1));
    int64_t ne[TSR_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        ne[i] = x->ne[i];
    ne[x->ndim - 1] /= 2;
    TSR_TRY(check_out(op, y, x->ndim, ne, "x", x));
    TSR_TRY(check_overlap(op, y, "x", x, false));
    tsr_op_desc d = desc_make(TSR_OP_GEGLU, x->dtype, x, NULL, NULL, y);
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, geglu)));
    return b->iface->geglu(b, x, y);
}

int tsr_binary(tsr_backend *b, tsr_binary_kind kind, const tsr_tensor *a, const tsr_tensor *bt,
               tsr_tensor *y)
{
    const char *op = kind == TSR_BINARY_MUL ? "mul" : "add";
    TSR_TRY(check_act(op, "a", a));
    TSR_TRY(check_param(op, "b", bt));
    TSR_TRY(check_float(op, "y", y, a->dtype));
    if ((unsigned)kind > (unsigned)TSR_BINARY_MUL)
        return tsr_errorf(TSR_ERR_INVALID, "binary: unknown kind %d", (int)kind);
    TSR_TRY(check_broadcast(op, "b", bt, a));
    TSR_TRY(check_out(op, y, a->ndim, a->ne, "a", a));
    TSR_TRY(check_overlap(op, y, "a", a, true));
    TSR_TRY(check_overlap(op, y, "b", bt, tsr_tensor_same_shape(a, bt)));
    tsr_op_desc d = desc_make(TSR_OP_BINARY, a->dtype, a, bt, NULL, y);
    d.p.binary = kind;
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, binary)));
    return b->iface->binary(b, kind, a, bt, y);
}

int tsr_scale(tsr_backend *b, const tsr_tensor *x, float s, tsr_tensor *y)
{
    const char *op = "scale";
    TSR_TRY(check_act(op, "x", x));
    TSR_TRY(check_float(op, "y", y, x->dtype));
    TSR_TRY(check_out(op, y, x->ndim, x->ne, "x", x));
    TSR_TRY(check_overlap(op, y, "x", x, true));
    tsr_op_desc d = desc_make(TSR_OP_SCALE, x->dtype, x, NULL, NULL, y);
    d.p.scale = s;
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, scale)));
    return b->iface->scale(b, x, s, y);
}

int tsr_concat(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bt, tsr_tensor *y)
{
    const char *op = "concat";
    char s1[SHAPE_BUF], s2[SHAPE_BUF];
    TSR_TRY(check_act(op, "a", a));
    TSR_TRY(check_float(op, "b", bt, a->dtype));
    TSR_TRY(check_float(op, "y", y, a->dtype));
    bool ok = a->ndim == bt->ndim;
    for (int i = 0; ok && i + 1 < a->ndim; i++)
        ok = a->ne[i] == bt->ne[i];
    if (!ok)
        return tsr_errorf(TSR_ERR_INVALID, "%s: leading dims of a %s and b %s differ", op, SH(a, s1),
                          SH(bt, s2));
    int64_t ne[TSR_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++)
        ne[i] = a->ne[i];
    ne[a->ndim - 1] = a->ne[a->ndim - 1] + bt->ne[bt->ndim - 1];
    if (ne[a->ndim - 1] > INT_MAX)
        return tsr_errorf(TSR_ERR_RANGE, "%s: result is too wide", op);
    TSR_TRY(check_out(op, y, a->ndim, ne, "a", a));
    TSR_TRY(check_overlap(op, y, "a", a, false));
    TSR_TRY(check_overlap(op, y, "b", bt, false));
    tsr_op_desc d = desc_make(TSR_OP_CONCAT, a->dtype, a, bt, NULL, y);
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, concat)));
    return b->iface->concat(b, a, bt, y);
}

/* Nearest resize to y's spatial size (any size >= 1): diffusers' UNet
 * upsamples to the size of the skip it meets, which is 2H - 1 after an odd
 * downsample. */
int tsr_upsample_nearest(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    const char *op = "upsample_nearest";
    TSR_TRY(check_act(op, "x", x));
    TSR_TRY(check_float(op, "y", y, x->dtype));
    TSR_TRY(check_rank(op, "x", x, 4, 4));
    TSR_TRY(check_rank(op, "y", y, 4, 4));
    if (y->ne[1] > INT_MAX / 2 || y->ne[2] > INT_MAX / 2)
        return tsr_errorf(TSR_ERR_RANGE, "%s: y is too large", op);
    int64_t ne[4] = {x->ne[0], y->ne[1], y->ne[2], x->ne[3]};
    TSR_TRY(check_out(op, y, 4, ne, "x", x));
    TSR_TRY(check_overlap(op, y, "x", x, false));
    tsr_op_desc d = desc_make(TSR_OP_UPSAMPLE_NEAREST, x->dtype, x, NULL, NULL, y);
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, upsample_nearest)));
    return b->iface->upsample_nearest(b, x, y);
}

int tsr_upsample_nearest2x(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    const char *op = "upsample_nearest2x";
    TSR_TRY(check_tensor(op, "x", x));
    TSR_TRY(check_rank(op, "x", x, 4, 4));
    if (x->ne[1] > INT_MAX / 4 || x->ne[2] > INT_MAX / 4)
        return tsr_errorf(TSR_ERR_RANGE, "%s: x is too large", op);
    int64_t ne[4] = {x->ne[0], 2 * x->ne[1], 2 * x->ne[2], x->ne[3]};
    TSR_TRY(check_out(op, y, 4, ne, "x", x));
    return tsr_upsample_nearest(b, x, y);
}

int tsr_timestep_embedding(tsr_backend *b, const tsr_tensor *t, const tsr_timestep_params *p,
                           tsr_tensor *y)
{
    const char *op = "timestep_embedding";
    TSR_TRY(check_float(op, "t", t, TSR_F32));
    TSR_TRY(check_rank(op, "t", t, 1, 1));
    TSR_TRY(check_param(op, "y", y));
    if (!p)
        return tsr_errorf(TSR_ERR_INVALID, "%s: no parameters", op);
    if (p->dim < 2 || p->dim > (1 << 20))
        return tsr_errorf(TSR_ERR_INVALID, "%s: dim %d out of range [2, %d]", op, p->dim, 1 << 20);
    double denom = (double)(p->dim / 2) - (double)p->downscale_freq_shift;
    if (!isfinite(p->downscale_freq_shift) || fabs(denom) < 1e-6)
        return tsr_errorf(TSR_ERR_INVALID, "%s: downscale_freq_shift %g gives a zero denominator", op,
                          (double)p->downscale_freq_shift);
    int64_t ne[2] = {t->ne[0], p->dim};
    TSR_TRY(check_out(op, y, 2, ne, "t", t));
    TSR_TRY(check_overlap(op, y, "t", t, false));
    tsr_op_desc d = desc_make(TSR_OP_TIMESTEP_EMBEDDING, y->dtype, t, NULL, NULL, y);
    d.p.timestep = *p;
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, timestep_embedding)));
    return b->iface->timestep_embedding(b, t, p, y);
}

int tsr_embedding(tsr_backend *b, const tsr_tensor *ids, const tsr_tensor *table, tsr_tensor *y)
{
    const char *op = "embedding";
    TSR_TRY(check_tensor(op, "ids", ids));
    if (ids->dtype != TSR_I32)
        return tsr_errorf(TSR_ERR_INVALID, "%s: ids are %s, expected i32", op,
                          tsr_dtype_name(ids->dtype));
    TSR_TRY(check_rank(op, "ids", ids, 1, TSR_MAX_DIMS - 1));
    TSR_TRY(check_param(op, "table", table));
    TSR_TRY(check_rank(op, "table", table, 2, 2));
    TSR_TRY(check_param(op, "y", y));
    int64_t ne[TSR_MAX_DIMS];
    for (int i = 0; i < ids->ndim; i++)
        ne[i] = ids->ne[i];
    ne[ids->ndim] = table->ne[1];
    TSR_TRY(check_out(op, y, ids->ndim + 1, ne, "ids", ids));
    TSR_TRY(check_overlap(op, y, "ids", ids, false));
    TSR_TRY(check_overlap(op, y, "table", table, false));
    tsr_op_desc d = desc_make(TSR_OP_EMBEDDING, y->dtype, ids, table, NULL, y);
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, embedding)));
    return b->iface->embedding(b, ids, table, y);
}

int tsr_convert(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    const char *op = "convert";
    TSR_TRY(check_param(op, "x", x));
    TSR_TRY(check_param(op, "y", y));
    TSR_TRY(check_out(op, y, x->ndim, x->ne, "x", x));
    TSR_TRY(check_overlap(op, y, "x", x, x->dtype == y->dtype));
    tsr_op_desc d = desc_make(TSR_OP_CONVERT, y->dtype, x, NULL, NULL, y);
    TSR_TRY(dispatch_check(b, &d, FN_PTR(b, convert)));
    return b->iface->convert(b, x, y);
}
