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
 * Precision: a backend reports the dtype it wants weights stored in
 * (tsr_backend_weight_dtype) and the dtype of activations
 * (tsr_backend_act_dtype); model/weights.c and the model code follow them.
 * The CPU backend computes in f32; its "cpu-f16"/"cpu-bf16" test variants
 * store f16/bf16 and widen to f32 per op.  A GPU backend may store
 * activations in f16/bf16 but must accumulate in f32 (GEMM, reductions).
 * Activation inputs and outputs of one op share a dtype; parameters
 * (weights, biases, norm affines, embedding tables, tsr_binary's b) may be
 * any float dtype, and supports_op() says which combinations a backend runs.
 *
 * supports_op() sees the whole op (tsr_op_desc: kind, tensors, parameters),
 * so a backend can refuse one shape (an attention head size it has no
 * kernel for) and say why; the wrappers put the op's name and that reason
 * in the error.  Events order work between backends and the host; pinned
 * host memory makes uploads and downloads truly asynchronous.
 *
 * Op contracts (all tensors contiguous; shapes outermost first):
 *   conv2d      x NHWC [N,H,W,Ci], w OHWI [Co,KH,KW,Ci], b [Co] or NULL,
 *               y [N,Ho,Wo,Co] with Ho = (H+pad_t+pad_b-KH)/stride_h+1.
 *               circular: the padding wraps around (torch's padding_mode
 *               'circular': padded row -1 is row H-1), each pad at most
 *               the input's size; otherwise zeros.  Seamless tiling.
 *   linear      x [..., in], w [out, in], b [out] or NULL, y [..., out].
 *   epilogue    conv2d and linear (the _fused variants) take an optional
 *               residual r and activation: y = act((op(x) + b) + r), with r
 *               broadcast onto y as tsr_binary's b, added after the bias in
 *               exactly that order (so a fused call rounds like the separate
 *               add it replaces).  r must not overlap y.
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
 *   convert     x -> y of the same shape in y's dtype (f32/f16/bf16, round
 *               to nearest even); how host f32 inputs reach f16 activations.
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
    TSR_OP_CONVERT,
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
    bool circular; /* wrap-around padding instead of zeros (seamless tiling) */
} tsr_conv2d_params;

/* Symmetric padding and stride: the common case. */
static inline tsr_conv2d_params tsr_conv2d_params_make(int stride, int pad)
{
    tsr_conv2d_params p = {stride, stride, pad, pad, pad, pad, false};
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

/* What conv2d and linear may do after the bias (see "epilogue" above):
 * y = act((op(x) + bias) + residual).  Zero-initialised = nothing. */
typedef struct tsr_epilogue {
    const tsr_tensor *residual; /* borrowed; NULL = none */
    bool has_act;
    tsr_unary_kind act;
} tsr_epilogue;

/* An op as a backend's supports_op() sees it.  src[] holds the inputs in
 * the order of the op's wrapper below (conv2d/linear: x, weight, bias,
 * residual; group/layer norm: x, gamma, beta; attention: q, k, v;
 * binary/concat: a, b; embedding: ids, table; others: x), NULL where an
 * optional input is absent.  A coarse query (tsr_backend_supports: "does
 * this backend run the op at all in `dtype`?") has no tensors: dst NULL. */
#define TSR_OP_MAX_SRC 4
typedef struct tsr_op_desc {
    tsr_op op;
    tsr_dtype dtype; /* the activation dtype (x and y) */
    const tsr_tensor *src[TSR_OP_MAX_SRC];
    const tsr_tensor *dst; /* NULL in a coarse query */
    union {
        tsr_conv2d_params conv2d;
        tsr_attention_params attention;
        tsr_timestep_params timestep;
        struct {
            int groups;
            float eps;
            bool silu;
        } group_norm;
        float eps;   /* layer_norm */
        float scale; /* scale */
        struct {
            bool trans_a, trans_b;
            float alpha;
        } matmul;
        tsr_unary_kind unary;
        tsr_binary_kind binary;
    } p;
    tsr_epilogue epilogue; /* conv2d, linear */
} tsr_op_desc;

typedef enum tsr_backend_kind {
    TSR_BACKEND_CPU,
    TSR_BACKEND_CUDA,
} tsr_backend_kind;

/* Capability flags (tsr_backend.caps). */
enum {
    /* tsr_unet_forward pads its rows up to 1, 2, 4, 8, 16, 32 or 64 (copies
     * of the last row) so that a backend replaying captured graphs sees a
     * few shapes only; the padded outputs are dropped.  Off on the CPU,
     * where it would only cost (docs/perf.md). */
    TSR_BACKEND_CAP_ROUND_ROWS = 1u << 0,
};

typedef struct tsr_backend tsr_backend;
/* A point in a backend's stream of work (tsr_event_*).  Opaque. */
typedef struct tsr_event tsr_event;

/* Every op returns a tsr_status.  Any pointer may be NULL: the wrapper then
 * reports TSR_ERR_UNSUPPORTED so the caller can fall back; the optional
 * ones (events, pinned memory) then get the synchronous host behaviour. */
typedef struct tsr_backend_iface {
    void (*destroy)(tsr_backend *b);

    /* memory */
    void *(*alloc)(tsr_backend *b, size_t bytes);
    void (*free)(tsr_backend *b, void *ptr);
    int (*upload)(tsr_backend *b, void *dst, const void *src_host, size_t bytes);
    int (*download)(tsr_backend *b, void *dst_host, const void *src, size_t bytes);
    int (*sync)(tsr_backend *b);
    /* page-locked host memory for fast asynchronous copies */
    void *(*host_alloc_pinned)(tsr_backend *b, size_t bytes);
    void (*host_free_pinned)(tsr_backend *b, void *ptr);

    /* events: `impl` is the backend's own handle */
    int (*event_create)(tsr_backend *b, void **impl);
    void (*event_destroy)(tsr_backend *b, void *impl);
    int (*event_record)(tsr_backend *b, void *impl); /* after the work issued so far */
    int (*event_wait)(tsr_backend *b, void *impl);   /* later work waits; the host does not */
    int (*event_sync)(tsr_backend *b, void *impl);   /* the host waits */

    /* Whether the backend runs this op (see tsr_op_desc); when not, a short
     * reason ("head size 96 has no kernel") goes to why[0..why_size). */
    bool (*supports_op)(tsr_backend *b, const tsr_op_desc *op, char *why, size_t why_size);

    /* ops: shapes are already validated by the wrappers */
    int (*conv2d)(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                  const tsr_conv2d_params *p, const tsr_epilogue *e, tsr_tensor *y);
    int (*linear)(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
                  const tsr_epilogue *e, tsr_tensor *y);
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
    int (*convert)(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);
} tsr_backend_iface;

struct tsr_backend {
    const tsr_backend_iface *iface;
    void *ctx;          /* owned by the backend */
    tsr_backend_kind kind;
    int device;         /* device index (0 for the CPU) */
    bool host_visible;  /* true when its memory is ordinary host memory */
    tsr_dtype weight_dtype; /* how weights are stored (tsr_weights_load) */
    tsr_dtype act_dtype;    /* how activations are stored (model code) */
    unsigned caps;          /* TSR_BACKEND_CAP_* */
    int n_threads;          /* host threads its ops use (CPU); 0 when not applicable */
    char name[64];      /* "cpu (2 threads)", "cuda:0 (NVIDIA H200)" */
    size_t memory_bytes;    /* the device's memory in all: the GPU's, or the host's RAM
                             * (its cgroup limit when lower) for the CPU; 0 = unknown */
};

/* Open a backend from a --device spec: "auto", "cpu", "cuda" or "cuda:N",
 * and the CPU test variants "cpu-f16" / "cpu-bf16" (f16/bf16 weights and
 * activations, each op widened to f32 and its result rounded back: the f16
 * path of the model code, checked without a GPU).  "auto" picks CUDA device
 * 0 when the build has CUDA and a GPU is present, and otherwise the CPU
 * (logging why at info level).  n_threads is for the CPU backend (0 = all
 * cores).  Owned: free with tsr_backend_destroy(). */
int tsr_backend_open(const char *spec, int n_threads, tsr_backend **out);
void tsr_backend_destroy(tsr_backend *b);

/* Whether this build made the CUDA backend module (libtessera_cuda.so). */
bool tsr_backend_cuda_compiled(void);
/* CUDA devices through the module, loading it on first use (registry.c);
 * 0 when it cannot be loaded.  tsr_backend_cuda_loaded: whether it is. */
int tsr_backend_cuda_device_count(void);
bool tsr_backend_cuda_loaded(void);

/* what the backend wants and offers */
tsr_dtype tsr_backend_weight_dtype(const tsr_backend *b);
tsr_dtype tsr_backend_act_dtype(const tsr_backend *b);
bool tsr_backend_has_cap(const tsr_backend *b, unsigned cap);
/* Host threads the backend's ops run on (the CPU backend's pool size; 0 for
 * a device backend). */
int tsr_backend_threads(const tsr_backend *b);

/* memory */
void *tsr_backend_alloc(tsr_backend *b, size_t bytes);
void tsr_backend_free(tsr_backend *b, void *ptr);
/* Copies may run asynchronously on the backend's stream: the host memory
 * must stay valid and unchanged until tsr_backend_sync() (or an event
 * recorded after the copy has completed). */
int tsr_backend_upload(tsr_backend *b, void *dst, const void *src_host, size_t bytes);
int tsr_backend_download(tsr_backend *b, void *dst_host, const void *src, size_t bytes);
int tsr_backend_sync(tsr_backend *b);
/* Page-locked host memory for copies (plain aligned memory where the
 * backend has none); free with tsr_backend_host_free_pinned on the same
 * backend.  NULL after raising TSR_ERR_NOMEM. */
void *tsr_backend_host_alloc_pinned(tsr_backend *b, size_t bytes);
void tsr_backend_host_free_pinned(tsr_backend *b, void *ptr);

/* Events.  tsr_event_record marks the work issued to the event's backend so
 * far; tsr_event_wait makes later work of backend `b` wait for it (on the
 * device where b and the event's backend can do that, else the host
 * blocks); tsr_event_sync blocks the host.  On a backend whose ops finish
 * before they return (the CPU) they are no-ops.  Owned: tsr_event_destroy. */
int tsr_event_create(tsr_backend *b, tsr_event **out);
void tsr_event_destroy(tsr_event *e);
int tsr_event_record(tsr_event *e);
int tsr_event_wait(tsr_backend *b, tsr_event *e);
int tsr_event_sync(tsr_event *e);

/* Coarse: whether the backend runs `op` at all with `dtype` activations. */
bool tsr_backend_supports(tsr_backend *b, tsr_op op, tsr_dtype dtype);
/* Whether it runs this exact op; when not, why[] gets the reason. */
bool tsr_backend_supports_op(tsr_backend *b, const tsr_op_desc *op, char *why, size_t why_size);
/* The first op the backend cannot run (in f32 or f16), or NULL when it runs
 * them all.  Model code needs every op on one backend: "auto" only picks a
 * backend with none missing, and opening a model on one that has gaps fails
 * with its name. */
const char *tsr_backend_missing_op(tsr_backend *b);

/* ops: validate shapes, ask supports_op, then dispatch (see the contracts
 * above).  A refusal is TSR_ERR_UNSUPPORTED naming the op and the reason. */
int tsr_conv2d(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
               const tsr_conv2d_params *p, tsr_tensor *y);
int tsr_conv2d_fused(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w,
                     const tsr_tensor *bias, const tsr_conv2d_params *p, const tsr_epilogue *e,
                     tsr_tensor *y);
int tsr_linear(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w, const tsr_tensor *bias,
               tsr_tensor *y);
int tsr_linear_fused(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *w,
                     const tsr_tensor *bias, const tsr_epilogue *e, tsr_tensor *y);
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
int tsr_convert(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y);

#endif
