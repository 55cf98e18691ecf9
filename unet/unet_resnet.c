/*
 * unet/unet_resnet.c - ResnetBlock2D (diffusers) and weight lookup helpers.
 *
 *   h = conv1(SiLU(GroupNorm1(x)))
 *   h = h + time_emb_proj(SiLU(temb))[:, None, None, :]
 *   h = conv2(SiLU(GroupNorm2(h)))          (dropout is identity at inference)
 *   out = h + (conv_shortcut(x) if cin != cout else x)
 *
 * SiLU(temb) is the same for every resnet of a call, so unet.c computes it
 * once (unet_run.temb_act).  GroupNorm and SiLU are one fused backend op,
 * and both adds are the convolutions' fused residuals (conv1 + the
 * projected time embedding broadcast over H, W; conv2 + the shortcut), so
 * the block is seven backend calls.
 * Temporaries are laid out so the block needs (cin + cout + B) floats per
 * pixel beyond its output: the second norm reuses the first norm's buffer
 * when it fits, and the shortcut reuses conv1's buffer (both dead by then).
 */
#include <stdio.h>
#include <string.h>

#include "unet/unet_internal.h"

int unet_weight(const tsr_weights *w, const tsr_tensor **out, int ndim, const int64_t *ne,
                const char *name)
{
    TSR_TRY(tsr_weights_get(w, name, out));
    const tsr_tensor *t = *out;
    bool ok = t->ndim == ndim &&
              (t->dtype == TSR_F32 || t->dtype == TSR_F16 || t->dtype == TSR_BF16);
    for (int i = 0; ok && i < ndim; i++)
        ok = t->ne[i] == ne[i];
    if (!ok) {
        char got[64], want[64];
        tsr_tensor expect = tsr_tensor_make(TSR_F32, ndim, ne, NULL, NULL);
        return tsr_errorf(TSR_ERR_FORMAT, "unet: weight '%s' has shape %s, expected %s", name,
                          tsr_tensor_shape_str(t, got, sizeof got),
                          tsr_tensor_shape_str(&expect, want, sizeof want));
    }
    return TSR_OK;
}

int unet_weightf(const tsr_weights *w, const tsr_tensor **out, int ndim, const int64_t *ne,
                 const char *prefix, const char *suffix)
{
    char name[256];
    int n = snprintf(name, sizeof name, "%s%s", prefix, suffix);
    if (n < 0 || (size_t)n >= sizeof name)
        return tsr_errorf(TSR_ERR_RANGE, "unet: weight name '%s%s' is too long", prefix, suffix);
    return unet_weight(w, out, ndim, ne, name);
}

int unet_alloc4(tsr_arena *ws, tsr_tensor *t, int64_t n, int64_t h, int64_t w, int64_t c)
{
    int64_t ne[4] = {n, h, w, c};
    return tsr_arena_act(ws, t, 4, ne);
}

int unet_resnet_bind(const tsr_weights *w, const char *p, int cin, int cout, int temb_dim,
                     unet_resnet *r)
{
    memset(r, 0, sizeof *r);
    r->cin = cin;
    r->cout = cout;
    const int64_t vin[1] = {cin}, vout[1] = {cout};
    const int64_t c1[4] = {cout, 3, 3, cin}, c2[4] = {cout, 3, 3, cout};
    const int64_t tw[2] = {cout, temb_dim}, sw[4] = {cout, 1, 1, cin};
    TSR_TRY(unet_weightf(w, &r->norm1_w, 1, vin, p, "norm1.weight"));
    TSR_TRY(unet_weightf(w, &r->norm1_b, 1, vin, p, "norm1.bias"));
    TSR_TRY(unet_weightf(w, &r->conv1_w, 4, c1, p, "conv1.weight"));
    TSR_TRY(unet_weightf(w, &r->conv1_b, 1, vout, p, "conv1.bias"));
    TSR_TRY(unet_weightf(w, &r->temb_w, 2, tw, p, "time_emb_proj.weight"));
    TSR_TRY(unet_weightf(w, &r->temb_b, 1, vout, p, "time_emb_proj.bias"));
    TSR_TRY(unet_weightf(w, &r->norm2_w, 1, vout, p, "norm2.weight"));
    TSR_TRY(unet_weightf(w, &r->norm2_b, 1, vout, p, "norm2.bias"));
    TSR_TRY(unet_weightf(w, &r->conv2_w, 4, c2, p, "conv2.weight"));
    TSR_TRY(unet_weightf(w, &r->conv2_b, 1, vout, p, "conv2.bias"));
    if (cin != cout) {
        TSR_TRY(unet_weightf(w, &r->short_w, 4, sw, p, "conv_shortcut.weight"));
        TSR_TRY(unet_weightf(w, &r->short_b, 1, vout, p, "conv_shortcut.bias"));
        r->short_w2d = tsr_tensor_view2(r->short_w, cout, cin);
    }
    return TSR_OK;
}

int unet_resnet_forward(unet_run *r, const unet_resnet *rn, const tsr_tensor *x, tsr_tensor *out)
{
    tsr_arena *ws = r->ws;
    tsr_backend *be = r->be;
    const int groups = r->desc->norm_num_groups;
    const float eps = (float)r->desc->norm_eps;
    const int64_t B = x->ne[0], H = x->ne[1], W = x->ne[2];
    tsr_conv2d_params p3 = tsr_conv2d_params_make(1, 1);
    p3.circular = r->circular;
    const size_t mark = tsr_arena_mark(ws);

    tsr_tensor t1, c1, tp;
    TSR_TRY(unet_alloc4(ws, &t1, B, H, W, rn->cin));
    TSR_TRY(unet_alloc4(ws, &c1, B, H, W, rn->cout));
    TSR_TRY(unet_alloc4(ws, &tp, B, 1, 1, rn->cout));
    tsr_tensor tp2 = tsr_tensor_view2(&tp, B, rn->cout);

    OP(tsr_group_norm(be, x, rn->norm1_w, rn->norm1_b, groups, eps, true, &t1));
    OP(unet_linear(r, &r->temb_act, rn->temb_w, rn->temb_b, NULL, &tp2));
    /* conv1 + bias, then + the time embedding [B,1,1,C] broadcast */
    OP(unet_conv(r, &t1, rn->conv1_w, rn->conv1_b, &p3, &(tsr_epilogue){.residual = &tp}, &c1));

    /* t1 is dead: the second norm's output reuses it when it fits. */
    tsr_tensor t2 = c1;
    if (rn->cout <= rn->cin)
        t2.data = t1.data;
    else
        TSR_TRY(unet_alloc4(ws, &t2, B, H, W, rn->cout));
    OP(tsr_group_norm(be, &c1, rn->norm2_w, rn->norm2_b, groups, eps, true, &t2));

    /* out = conv2 + bias, then + the shortcut: x itself, or conv_shortcut
     * (1x1, a GEMM over pixels) computed first into c1 (dead by now). */
    const tsr_tensor *shortcut = x;
    if (rn->short_w) {
        /* [B, HW, C]: one GEMM per image (batch independence) */
        tsr_tensor x2 = tsr_tensor_view3(x, B, H * W, rn->cin);
        tsr_tensor s2 = tsr_tensor_view3(&c1, B, H * W, rn->cout);
        OP(unet_linear(r, &x2, &rn->short_w2d, rn->short_b, NULL, &s2));
        shortcut = &c1;
    }
    OP(unet_conv(r, &t2, rn->conv2_w, rn->conv2_b, &p3, &(tsr_epilogue){.residual = shortcut},
                 out));
    tsr_arena_reset(ws, mark);
    return TSR_OK;
}
