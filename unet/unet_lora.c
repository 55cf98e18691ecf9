/*
 * unet/unet_lora.c - the UNet's linear and conv ops with per-row LoRAs.
 *
 * Why here and not in the backend: a LoRA is a property of a row (an
 * image), and only the UNet knows which rows a tensor holds.  The base op
 * keeps running once over every row (one GEMM/conv for the whole call, as
 * without LoRAs); model/lora.c then adds each row's deltas on that row's
 * slice.  Without LoRAs (loras NULL) these are the plain fused ops.  With
 * an activation in the epilogue (the time and add embeddings' SiLU) and a
 * LoRA on that weight, the activation runs after the delta, as in the
 * LoRA-wrapped module.
 */
#include "unet/unet_internal.h"

static int op(unet_run *r, int64_t row, const tsr_tensor *x, const tsr_tensor *w,
              const tsr_tensor *b, const tsr_conv2d_params *p, const tsr_epilogue *e,
              tsr_tensor *y)
{
    tsr_backend *be = r->be;
    const tsr_epilogue none = {0};
    if (!e)
        e = &none;
    bool touched;
    if (row >= 0)
        touched = row < r->n_loras && r->loras &&
                  tsr_lora_set_touches(r->loras[row], TSR_COMP_UNET, w);
    else
        touched = tsr_lora_rows_touch(r->loras, r->n_loras, TSR_COMP_UNET, w);
    if (!touched)
        return p ? tsr_conv2d_fused(be, x, w, b, p, e, y) : tsr_linear_fused(be, x, w, b, e, y);
    tsr_epilogue base = *e;
    base.has_act = false;
    TSR_TRY(p ? tsr_conv2d_fused(be, x, w, b, p, &base, y) : tsr_linear_fused(be, x, w, b, &base, y));
    if (row >= 0)
        TSR_TRY(p ? tsr_lora_conv2d(r->lora_scratch, r->loras[row], TSR_COMP_UNET, w, x, p, y)
                  : tsr_lora_linear(r->lora_scratch, r->loras[row], TSR_COMP_UNET, w, x, y));
    else
        TSR_TRY(p ? tsr_lora_conv2d_rows(r->lora_scratch, r->loras, r->n_loras, TSR_COMP_UNET, w,
                                         x, p, y)
                  : tsr_lora_linear_rows(r->lora_scratch, r->loras, r->n_loras, TSR_COMP_UNET, w,
                                         x, y));
    if (e->has_act)
        TSR_TRY(tsr_unary(be, e->act, y, y));
    return TSR_OK;
}

int unet_linear(unet_run *r, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *b,
                const tsr_epilogue *e, tsr_tensor *y)
{
    return op(r, -1, x, w, b, NULL, e, y);
}

int unet_conv(unet_run *r, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *b,
              const tsr_conv2d_params *p, const tsr_epilogue *e, tsr_tensor *y)
{
    return op(r, -1, x, w, b, p, e, y);
}

int unet_linear_row(unet_run *r, int64_t row, const tsr_tensor *x, const tsr_tensor *w,
                    const tsr_tensor *b, const tsr_epilogue *e, tsr_tensor *y)
{
    return op(r, row, x, w, b, NULL, e, y);
}
