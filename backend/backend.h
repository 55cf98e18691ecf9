/*
 * backend/backend.h - the compute backend interface.
 *
 * Why it is built this way (after ggml's ggml-backend-impl.h): a backend is a
 * table of function pointers (tsr_backend_iface) plus an opaque context.  The
 * model code (text/, unet/, vae/) calls only the tsr_* wrappers below; they
 * validate shapes once, for every backend, and dispatch.  A backend may leave
 * an op NULL or refuse it in supports_op(); the caller then falls back to the
 * CPU backend.  Memory is the backend's: alloc/free return device pointers,
 * upload/download copy between host and device and may be asynchronous on the
 * backend's stream until sync().  That is all a CUDA backend needs to fit
 * behind the same calls: its tensors live in device memory, its ops are
 * enqueued on a stream, and results are visible to the host after sync().
 *
 * Precision: the CPU backend computes in f32.  A GPU backend may store
 * activations in f16/bf16 but must accumulate in f32 (GEMM, reductions).
 *
 * Op contracts (all tensors contiguous; shapes outermost first):
 *   conv2d      x NHWC [N,H,W,Ci], w OHWI [Co,KH,KW,Ci], b [Co] or NULL,
 *               y [N,Ho,Wo,Co] with Ho = (H+pad_t+pad_b-KH)/stride_h+1.
 *   linear      x [..., in], w [out, in], b [out] or NULL, y [..., out].
 *   matmul      a [B,M,K] (or [B,K,M] if trans_a), b [B,K,N] (or [B,N,K] if
 *               trans_b), y [B,M,N] = alpha * a @ b.  A batch of 1 on a or b
 *               broadcasts.  Rank-2 operands are a batch of one.
 *   group_norm  x [N, ..., C] channels last, groups | C, gamma/beta [C];
 *               optional fused SiLU.  Statistics per (n, group) over all the
 *               middle positions and the group's channels, as torch does.
 *   layer_norm  x [..., C], gamma/beta [C] (beta may be NULL).
 *   softmax     over the last dim; y may alias x.
 *   attention   q [B,Lq,H*D], k [B,Lk,H*D], v [B,Lk,H*D] -> y [B,Lq,H*D];
 *               scale 0 means 1/sqrt(D); optional causal mask (query i sees
 *               keys j <= i + (Lk - Lq)).  Memory beyond the output is
 *               bounded by the backend (query-chunked), never Lq*Lk per head
 *               for large Lq.
 *   unary       silu, gelu (erf), gelu_tanh, quick_gelu (x*sigmoid(1.702x));
 *               y may alias x.
 *   geglu       x [..., 2D] -> y [..., D] = x[..., :D] * gelu(x[..., D:]).
 *   binary      add / mul with numpy broadcasting of b onto a's shape
 *               (b's rank <= a's rank; dims of b are 1 or equal).  y may
 *               alias a.
 *   scale       y = x * s; y may alias x.
 *   concat      along the last (channel) dim: a [...,Ca], b [...,Cb] ->
 *               y [...,Ca+Cb]; leading dims equal.
 *   upsample    nearest to y's size: x NHWC [N,H,W,C] -> y [N,Ho,Wo,C], source
 *               row floor(i * H / Ho) and column floor(j * W / Wo) (torch's
 *               "nearest"); tsr_upsample_nearest2x is the Ho = 2H case.
 *   timestep_embedding  t [N] f32 -> y [N, dim], as diffusers'
 *               get_timestep_embedding (max_period 10000).
 *   embedding   ids [...] i32, table [V, D] -> y [..., D]; out-of-range ids
 *               fail with TSR_ERR_RANGE.
 */
#ifndef TSR_BACKEND_H
#define TSR_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "core/tensor.h"
#include "tessera.h"

typedef enum tsr_op {
    TSR_OP_CONV2D,
    TSR_OP_LINEAR,
    TSR_OP_MATMUL,
    TSR_OP_GROUP_NORM,
    TSR_OP_LAYER_NORM,
    TSR_OP_SOFTMAX,
    TSR_OP_ATTENTION,
    TSR_OP_UNARY,
    TSR_OP_GEGLU,
    TSR_OP_BINARY,
    TSR_OP_SCALE,
    TSR_OP_CONCAT,
    TSR_OP_UPSAMPLE_NEAREST,
    TSR_OP_TIMESTEP_EMBEDDING,
    TSR_OP_EMBEDDING,
    TSR_OP_COUNT
} tsr_op;

const char *tsr_op_name(tsr_op op);

typedef enum tsr_unary_kind {
    TSR_UNARY_SILU,
    TSR_UNARY_GELU,
    TSR_UNARY_GELU_TANH,
    TSR_UNARY_QUICK_GELU,
} tsr_unary_kind;

typedef enum tsr_binary_kind {
    TSR_BINARY_ADD,
    TSR_BINARY_MUL,
} tsr_binary_kind;

typedef struct tsr_conv2d_params {
    int stride_h, stride_w;
    int pad_t, pad_l, pad_b, pad_r;
} tsr_conv2d_params;

/* Symmetric padding and stride: the common case. */
static inline tsr_conv2d_params tsr_conv2d_params_make(int stride, int pad)
{
    tsr_conv2d_params p = {stride, stride, pad, pad, pad, pad};
    return p;
}

typedef struct tsr_attention_params {
    int heads;
    float scale; /* 0 = 1/sqrt(head_dim) */
    bool causal;
} tsr_attention_params;

typedef struct tsr_timestep_params {
    int dim;
    bool flip_sin_to_cos;
    float downscale_freq_shift;
} tsr_timestep_params;

typedef enum tsr_backend_kind {
    TSR_BACKEND_CPU,
    TSR_BACKEND_CUDA,
} tsr_backend_kind;

typedef struct tsr_backend tsr_backend;

/* Every op returns a tsr_status.  Any pointer may be NULL: the wrapper then
 * reports TSR_ERR_UNSUPPORTED so the caller can fall back. */
typedef struct tsr_backend_iface {
    void (*destroy)(tsr_backend *b);

    /* memory */
    void *(*alloc)(tsr_backend *b, size_t bytes);
    void (*free)(tsr_backend *b, void *ptr);
    int (*upload)(tsr_backend *b, void *dst, const void *src_host, size_t bytes);
    int (*download)(tsr_backend *b, void *dst_host, const void *src, size_t bytes);
    int (*sync)(tsr_backend *b);

    bool (*supports_op)(tsr_backend *b, tsr_op op, tsr_dtype dtype);

    /* ops: shapes are already validated by the wrappers */
    int (*conv2d)(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                  const tsr_conv2d_params *p, tsr_tensor *y);
    int (*linear)(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                  tsr_tensor *y);
    int (*matmul)(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bm, bool trans_a,
                  bool trans_b, float alpha, tsr_tensor *y);
    int (*group_norm)(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                      const tsr_tensor *beta, int groups, float eps, bool silu, tsr_tensor *y);
    int (*layer_norm)(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                      const tsr_tensor *beta, float eps, tsr_tensor *y);
    int (*softmax)(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
    int (*attention)(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k, const tsr_tensor *v,
                     const tsr_attention_params *p, tsr_tensor *y);
    int (*unary)(tsr_backend *b, tsr_unary_kind kind, const tsr_tensor *x, tsr_tensor *y);
    int (*geglu)(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
    int (*binary)(tsr_backend *b, tsr_binary_kind kind, const tsr_tensor *a, const tsr_tensor *bt,
                  tsr_tensor *y);
    int (*scale)(tsr_backend *b, const tsr_tensor *x, float s, tsr_tensor *y);
    int (*concat)(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bt, tsr_tensor *y);
    int (*upsample_nearest)(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
    int (*timestep_embedding)(tsr_backend *b, const tsr_tensor *t, const tsr_timestep_params *p,
                              tsr_tensor *y);
    int (*embedding)(tsr_backend *b, const tsr_tensor *ids, const tsr_tensor *table,
                     tsr_tensor *y);
} tsr_backend_iface;

struct tsr_backend {
    const tsr_backend_iface *iface;
    void *ctx;          /* owned by the backend */
    tsr_backend_kind kind;
    int device;         /* device index (0 for the CPU) */
    bool host_visible;  /* true when its memory is ordinary host memory */
    char name[64];      /* "cpu (2 threads)", "cuda:0 (NVIDIA H200)" */
};

/* Open a backend from a --device spec: "auto", "cpu", "cuda" or "cuda:N".
 * "auto" picks CUDA device 0 when the build has CUDA and a GPU is present,
 * and otherwise the CPU (logging why at info level).  n_threads is for the
 * CPU backend (0 = all cores).  Owned: free with tsr_backend_destroy(). */
int tsr_backend_open(const char *spec, int n_threads, tsr_backend **out);
void tsr_backend_destroy(tsr_backend *b);

/* Whether this build made the CUDA backend module (libtessera_cuda.so). */
bool tsr_backend_cuda_compiled(void);
/* CUDA devices through the module, loading it on first use (registry.c);
 * 0 when it cannot be loaded.  tsr_backend_cuda_loaded: whether it is. */
int tsr_backend_cuda_device_count(void);
bool tsr_backend_cuda_loaded(void);

/* memory */
void *tsr_backend_alloc(tsr_backend *b, size_t bytes);
void tsr_backend_free(tsr_backend *b, void *ptr);
int tsr_backend_upload(tsr_backend *b, void *dst, const void *src_host, size_t bytes);
int tsr_backend_download(tsr_backend *b, void *dst_host, const void *src, size_t bytes);
int tsr_backend_sync(tsr_backend *b);
bool tsr_backend_supports(tsr_backend *b, tsr_op op, tsr_dtype dtype);
/* The first op the backend cannot run (in f32 or f16), or NULL when it runs
 * them all.  Model code needs every op on one backend: "auto" only picks a
 * backend with none missing, and opening a model on one that has gaps fails
 * with its name. */
const char *tsr_backend_missing_op(tsr_backend *b);

/* ops: validate shapes, then dispatch (see the contracts above) */
int tsr_conv2d(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
               const tsr_conv2d_params *p, tsr_tensor *y);
int tsr_linear(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
               tsr_tensor *y);
int tsr_matmul(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bm, bool trans_a,
               bool trans_b, float alpha, tsr_tensor *y);
int tsr_group_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                   const tsr_tensor *beta, int groups, float eps, bool silu, tsr_tensor *y);
int tsr_layer_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                   const tsr_tensor *beta, float eps, tsr_tensor *y);
int tsr_softmax(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
int tsr_attention(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k, const tsr_tensor *v,
                  const tsr_attention_params *p, tsr_tensor *y);
int tsr_unary(tsr_backend *b, tsr_unary_kind kind, const tsr_tensor *x, tsr_tensor *y);
int tsr_geglu(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
int tsr_binary(tsr_backend *b, tsr_binary_kind kind, const tsr_tensor *a, const tsr_tensor *bt,
               tsr_tensor *y);
int tsr_scale(tsr_backend *b, const tsr_tensor *x, float s, tsr_tensor *y);
int tsr_concat(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bt, tsr_tensor *y);
int tsr_upsample_nearest(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
int tsr_upsample_nearest2x(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
int tsr_timestep_embedding(tsr_backend *b, const tsr_tensor *t, const tsr_timestep_params *p,
                           tsr_tensor *y);
int tsr_embedding(tsr_backend *b, const tsr_tensor *ids, const tsr_tensor *table, tsr_tensor *y);

#endif
