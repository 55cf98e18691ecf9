/*
 * unet/unet_internal.h - the UNet's blocks, shared by the unet/ sources only.
 *
 * Why split this way: unet.c walks the config (embeddings, the down / mid /
 * up block lists, skip connections, workspace planning), unet_resnet.c and
 * unet_transformer.c each implement one diffusers block type (binding its
 * weights with shape checks, and its forward pass).  The blocks hold only
 * borrowed pointers into the tsr_weights arena; the one thing a block owns
 * is its array of transformer layers.
 *
 * Forward-pass conventions shared by all blocks (see unet.c):
 *   - the workspace arena is a stack: a block allocates its temporaries at
 *     the top and resets to its entry mark before returning; outputs are
 *     allocated by the caller, which decides where they live;
 *   - in measuring mode (ws->measuring) tensors have NULL data and every op
 *     is skipped through OP(), so the same code sizes the workspace.
 */
#ifndef TSR_UNET_INTERNAL_H
#define TSR_UNET_INTERNAL_H

#include "backend/arena.h"
#include "core/error.h"
#include "model/lora.h"
#include "unet/unet.h"

#define OP(expr) TSR_ARENA_OP(ws, expr)

typedef struct unet_resnet {
    int cin, cout;
    const tsr_tensor *norm1_w, *norm1_b, *conv1_w, *conv1_b;
    const tsr_tensor *temb_w, *temb_b; /* time_emb_proj [cout, temb] */
    const tsr_tensor *norm2_w, *norm2_b, *conv2_w, *conv2_b;
    const tsr_tensor *short_w, *short_b; /* conv_shortcut (1x1), NULL when cin == cout */
    tsr_tensor short_w2d;                /* short_w viewed as [cout, cin] */
} unet_resnet;

/* Attention of a BasicTransformerBlock: to_q/k/v without bias, to_out.0. */
typedef struct unet_attn {
    const tsr_tensor *q_w, *k_w, *v_w, *o_w, *o_b;
} unet_attn;

typedef struct unet_tlayer {
    const tsr_tensor *ln1_w, *ln1_b, *ln2_w, *ln2_b, *ln3_w, *ln3_b;
    unet_attn self, cross;
    const tsr_tensor *ff1_w, *ff1_b; /* GEGLU proj [2*inner, C] */
    const tsr_tensor *ff2_w, *ff2_b; /* [C, inner] */
    int inner;
} unet_tlayer;

/* Transformer2DModel (continuous input). */
typedef struct unet_transformer {
    int channels, heads, n_layers, cross_dim;
    const tsr_tensor *norm_w, *norm_b;
    tsr_tensor proj_in_w, proj_out_w; /* [C, C] views (conv 1x1 or linear) */
    const tsr_tensor *proj_in_b, *proj_out_b;
    unet_tlayer *layers; /* owned, n_layers entries */
} unet_transformer;

/* Per-call state the blocks read. */
typedef struct unet_run {
    tsr_backend *be;           /* borrowed */
    tsr_arena *ws;             /* borrowed: workspace (or measuring arena) */
    const tsr_unet_desc *desc; /* borrowed */
    tsr_tensor temb_act;       /* SiLU(time embedding) [B, temb_dim] */
    tsr_tensor context;        /* [B, L, cross_attention_dim] */
    /* LoRAs per row (tsr_unet_inputs.loras; NULL = none) and their scratch */
    const tsr_lora_set *const *loras;
    int n_loras;
    tsr_lora_scratch *lora_scratch;
    bool circular; /* tsr_unet_inputs.circular: every padded conv wraps */
} unet_run;

/* The weight ops of the blocks (unet_lora.c): the base op over all rows,
 * then each row's LoRA deltas on that row alone.  An activation in the
 * epilogue moves after the deltas when a LoRA touches the weight. */
int unet_linear(unet_run *r, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *b,
                const tsr_epilogue *e, tsr_tensor *y);
int unet_conv(unet_run *r, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *b,
              const tsr_conv2d_params *p, const tsr_epilogue *e, tsr_tensor *y);
/* The same for x, y holding tokens of one row only (the feed-forward's chunks). */
int unet_linear_row(unet_run *r, int64_t row, const tsr_tensor *x, const tsr_tensor *w,
                    const tsr_tensor *b, const tsr_epilogue *e, tsr_tensor *y);

/* Fetch weight `name` and check it has exactly the shape ne[0..ndim). */
int unet_weight(const tsr_weights *w, const tsr_tensor **out, int ndim, const int64_t *ne,
                const char *name);
/* The same with a printf-style name built from prefix + suffix. */
int unet_weightf(const tsr_weights *w, const tsr_tensor **out, int ndim, const int64_t *ne,
                 const char *prefix, const char *suffix);

int unet_resnet_bind(const tsr_weights *w, const char *prefix, int cin, int cout, int temb_dim,
                     unet_resnet *out);
/* x [B,H,W,cin] -> out [B,H,W,cout] (out allocated by the caller, distinct
 * from x). */
int unet_resnet_forward(unet_run *r, const unet_resnet *rn, const tsr_tensor *x, tsr_tensor *out);

int unet_transformer_bind(const tsr_weights *w, const char *prefix, int channels, int heads,
                          int n_layers, int cross_dim, unet_transformer *out);
void unet_transformer_release(unet_transformer *t);
/* In place: x [B,H,W,C] <- x + transformer(x). */
int unet_transformer_forward(unet_run *r, const unet_transformer *t, tsr_tensor *x);

/* Allocate an NHWC activation in the workspace. */
int unet_alloc4(tsr_arena *ws, tsr_tensor *t, int64_t n, int64_t h, int64_t w, int64_t c);

#endif
