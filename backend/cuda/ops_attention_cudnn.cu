/*
 * backend/cuda/ops_attention_cudnn.cu - attention on cuDNN's fused SDPA
 * ("flash attention": S = QK^T never reaches memory, softmax and both
 * products in one kernel, f32 accumulation), through the plain C backend
 * graph API of cudnn_graph.h: tensor descriptors -> one SDPA_FWD operation
 * -> operation graph -> engine heuristics -> execution plan -> variant pack.
 *
 * Why it is built this way:
 * - The dedicated CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR node (cuDNN
 *   9.13+; the installed headers are 9.19) is one descriptor with five
 *   tensors.  The older spelling, matmul -> pointwise scale -> reductions ->
 *   exp -> matmul, only reaches the fused engine when the graph matches
 *   cudnn-frontend's exact pattern (virtual tensors, a stats output, ...),
 *   which is easy to get subtly wrong without a GPU to try it on.  The C++
 *   cudnn-frontend is neither installed nor vendored; the backend API is
 *   part of the libcudnn the CUDA module already links (ops_conv.cu; cuDNN
 *   is linked into the dlopened tessera_cuda module, not dlopened itself),
 *   so nothing new is loaded.
 * - No copies: Tessera's q/k/v/y are [b, L, heads*d]; cuDNN is given the
 *   logical [b, heads, L, d] view with strides {L*heads*d, d, heads*d, 1}
 *   (the "BSHD" layout the engines support).  f16 only (Tessera's CUDA
 *   activations); the scale is a by-value f32 scalar, so a plan does not
 *   depend on it.
 * - One plan per (b, heads, lq, lk, d, causal, dtype), built and its
 *   heuristics (mode A, then FALLBACK) queried on the first call of that
 *   shape and kept in the context: a UNet call repeats a handful of shapes,
 *   and a later CUDA-graph capture must find every plan already built.  The
 *   first engine config whose plan finalizes with at most 1 GiB of workspace
 *   is taken; the workspace is the backend's grow-only scratch.  The cuDNN
 *   handle is the context's, bound to its stream at creation.
 * - Fallback: a shape outside the static checks (not f16, causal, head size
 *   not a multiple of 8 or over 256, pointers not 16-byte aligned) returns 1
 *   at once; a shape for which any step of the plan build returns a status
 *   other than success is marked refused (logged once at debug level with
 *   the step and cuDNN's status name) and returns 1 from then on; either
 *   way ops_attention.cu runs its own paths.  Executing a plan that was
 *   built is checked with TSR_CUDA_CHECK, like every other library call.
 * - Causal masking falls back: the SDPA_FWD node of these headers has no
 *   causal attribute (masks arrive with its score-modifier subgraph in later
 *   cuDNN versions).  Tessera's causal attention is the text encoders', over
 *   77 keys, which the WMMA kernel takes anyway.
 * - The variant pack (the data pointers) of the last call of each shape is
 *   kept and reused while q, k, v, y, the workspace and the scale are the
 *   same, which the arena-allocated UNet mostly gives, so a call is one
 *   cudnnBackendExecute.
 *
 * Checked without a GPU (tests/gpu/test_cudnn_sdpa_host.cu, label unit,
 * against the 9.19 library): the fallback and cache logic; cuDNN's own
 * checks of the tensors and the node for every SD shape; and cuDNN's
 * heuristics, asked about sm_80, sm_86 and sm_90 device descriptions
 * (CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR from JSON, the driver's stub loaded),
 * offering at least one engine config for every SD shape, head sizes 40, 80
 * and 160 included.  Those engines (global index 8, and 9 on sm_90) are
 * runtime-compiled: building a plan compiles its kernel (NVRTC) and loads
 * it through the driver (where the stub stops), so each shape's first call
 * pays a compile.
 * UNVERIFIED (no GPU in the session that wrote it): building the plans (the
 * compile, the module load, how long a shape's first call takes), the
 * results, the speed, and CUDA-graph capture of cudnnBackendExecute.  The
 * GPU check: tests/gpu/run.sh's gpu_unit stage
 * runs gpu_ops_attention_cudnn and gpu_ops_attention_sd_cudnn
 * (TSR_CUDA_ATTENTION=cudnn with TSR_CUDA_ATTENTION_CUDNN_STRICT=1, so a
 * shape cuDNN refuses fails instead of silently falling back), and its
 * timing stage times `bench ops --filter attention` under each path
 * (docs/perf.md, "cuDNN SDPA path").
 */
#include "ops_attention_cudnn.cuh"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SDPA_CACHE_MAX 128 /* shapes; SD's UNets use a handful per size and batch */
#define SDPA_MAX_CFGS 8    /* engine configs tried per shape */
#define SDPA_MAX_D 256
#define SDPA_WORKSPACE_MAX ((int64_t)1 << 30)
#define SDPA_MIN_VERSION 91300 /* the first cuDNN with the SDPA_FWD node */

/* The tensors' unique ids in the graph and the variant pack. */
enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_SCALE };

/* The descriptors one plan owns, in the order they are made. */
enum { D_Q, D_K, D_V, D_O, D_SCALE, D_OP, D_GRAPH, D_HEUR, D_CFG, D_PLAN, D_COUNT };

enum { SDPA_READY = 1, SDPA_REFUSED = 2 };

typedef struct sdpa_entry {
    int64_t key[7];                         /* b, heads, lq, lk, d, causal, dtype */
    int state;                              /* SDPA_READY or SDPA_REFUSED */
    char why[128];                          /* refused: the failing step and cuDNN's status name */
    cudnnBackendDescriptor_t desc[D_COUNT]; /* owned; NULL where not made */
    int64_t workspace;                      /* bytes the plan needs */
    int64_t engine;                         /* the engine's global index (log only) */
    cudnnBackendDescriptor_t pack;          /* owned; the last call's variant pack */
    void *pack_ptrs[4];                     /* q, k, v, y it was made for */
    void *pack_ws;
    float pack_scale;
    alignas(16) float scale; /* the by-value scale the pack points at */
} sdpa_entry;

struct tsr_cu_sdpa_cache {
    bool usable;      /* cudnnGetVersion() >= SDPA_MIN_VERSION */
    bool strict;      /* TSR_CUDA_ATTENTION_CUDNN_STRICT=1 */
    bool full_logged; /* the "cache full" line was logged */
    int n;
    sdpa_entry e[SDPA_CACHE_MAX];
};

/* Inside a function returning cudnnStatus_t with `const char **step`: the
 * first failing call returns its status and names its step. */
#define SDPA_STEP(name, call)                                                                      \
    do {                                                                                           \
        cudnnStatus_t sdpa_st_ = (call);                                                           \
        if (sdpa_st_ != CUDNN_STATUS_SUCCESS) {                                                    \
            *step = (name);                                                                        \
            return sdpa_st_;                                                                       \
        }                                                                                          \
    } while (0)

static void desc_destroy(cudnnBackendDescriptor_t *d)
{
    if (*d)
        cudnnBackendDestroyDescriptor(*d);
    *d = NULL;
}

/* Frees every descriptor of an entry (the key and state stay). */
static void entry_clear(sdpa_entry *e)
{
    desc_destroy(&e->pack);
    for (int i = D_COUNT - 1; i >= 0; i--)
        desc_destroy(&e->desc[i]);
}

static cudnnStatus_t make_tensor(cudnnBackendDescriptor_t *t, int64_t uid, cudnnDataType_t dt,
                                 const int64_t dims[4], const int64_t strides[4], bool by_value,
                                 const char **step)
{
    const int64_t align = 16;
    SDPA_STEP("tensor create", cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t));
    SDPA_STEP("tensor data type", cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE,
                                                           CUDNN_TYPE_DATA_TYPE, 1, &dt));
    SDPA_STEP("tensor dimensions", cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS,
                                                            CUDNN_TYPE_INT64, 4, dims));
    SDPA_STEP("tensor strides", cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES,
                                                         CUDNN_TYPE_INT64, 4, strides));
    SDPA_STEP("tensor uid",
              cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    SDPA_STEP("tensor alignment", cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT,
                                                           CUDNN_TYPE_INT64, 1, &align));
    if (by_value) {
        const bool yes = true;
        SDPA_STEP("tensor by value", cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_IS_BY_VALUE,
                                                              CUDNN_TYPE_BOOLEAN, 1, &yes));
    }
    SDPA_STEP("tensor finalize", cudnnBackendFinalize(*t));
    return CUDNN_STATUS_SUCCESS;
}

/* The operation graph of one SDPA_FWD node over e->key's shape. */
static cudnnStatus_t make_graph(cudnnHandle_t handle, sdpa_entry *e, const char **step)
{
    const int64_t b = e->key[0], heads = e->key[1], lq = e->key[2], lk = e->key[3], d = e->key[4];
    const cudnnDataType_t f16 = CUDNN_DATA_HALF, f32 = CUDNN_DATA_FLOAT;
    /* logical [b, heads, L, d] over Tessera's [b, L, heads*d] */
    const int64_t qdim[4] = {b, heads, lq, d}, kdim[4] = {b, heads, lk, d};
    const int64_t qstr[4] = {lq * heads * d, d, heads * d, 1};
    const int64_t kstr[4] = {lk * heads * d, d, heads * d, 1};
    const int64_t one[4] = {1, 1, 1, 1};
    cudnnStatus_t st;
    if ((st = make_tensor(&e->desc[D_Q], UID_Q, f16, qdim, qstr, false, step)) ||
        (st = make_tensor(&e->desc[D_K], UID_K, f16, kdim, kstr, false, step)) ||
        (st = make_tensor(&e->desc[D_V], UID_V, f16, kdim, kstr, false, step)) ||
        (st = make_tensor(&e->desc[D_O], UID_O, f16, qdim, qstr, false, step)) ||
        (st = make_tensor(&e->desc[D_SCALE], UID_SCALE, f32, one, one, true, step)))
        return st;

    cudnnBackendDescriptor_t *op = &e->desc[D_OP];
    SDPA_STEP("sdpa create",
              cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, op));
    static const cudnnBackendAttributeName_t io[5] = {
        CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC,
        CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC,
        CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC};
    for (int i = 0; i < 5; i++)
        SDPA_STEP("sdpa tensors",
                  cudnnBackendSetAttribute(*op, io[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                           &e->desc[D_Q + i]));
    SDPA_STEP("sdpa finalize", cudnnBackendFinalize(*op));

    cudnnBackendDescriptor_t *g = &e->desc[D_GRAPH];
    SDPA_STEP("graph create",
              cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, g));
    SDPA_STEP("graph ops", cudnnBackendSetAttribute(*g, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, op));
    SDPA_STEP("graph handle", cudnnBackendSetAttribute(*g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
                                                       CUDNN_TYPE_HANDLE, 1, &handle));
    SDPA_STEP("graph finalize", cudnnBackendFinalize(*g));
    return CUDNN_STATUS_SUCCESS;
}

/* An execution plan for `cfg`; its workspace in *ws. */
static cudnnStatus_t make_plan(cudnnHandle_t handle, cudnnBackendDescriptor_t cfg,
                               cudnnBackendDescriptor_t *plan, int64_t *ws, const char **step)
{
    int64_t n = 0;
    SDPA_STEP("plan create",
              cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan));
    SDPA_STEP("plan handle", cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                                      CUDNN_TYPE_HANDLE, 1, &handle));
    SDPA_STEP("plan engine config",
              cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
    SDPA_STEP("plan finalize", cudnnBackendFinalize(*plan));
    SDPA_STEP("plan workspace",
              cudnnBackendGetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, &n, ws));
    return CUDNN_STATUS_SUCCESS;
}

/* Heuristics over e's graph (mode A, then FALLBACK); the first config whose
 * plan finalizes within SDPA_WORKSPACE_MAX becomes e's plan.  On failure the
 * status and step of the last refusal. */
static cudnnStatus_t choose_plan(cudnnHandle_t handle, sdpa_entry *e, const char **step)
{
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    *step = "heuristics: no engine config";
    for (int m = 0; m < 2; m++) {
        cudnnBackendDescriptor_t cfgs[SDPA_MAX_CFGS] = {NULL};
        int64_t got = 0;
        cudnnStatus_t st;
        desc_destroy(&e->desc[D_HEUR]);
        cudnnBackendDescriptor_t *h = &e->desc[D_HEUR];
        if ((st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, h)) ||
            (st = cudnnBackendSetAttribute(*h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e->desc[D_GRAPH])) ||
            (st = cudnnBackendSetAttribute(*h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                                           &modes[m])) ||
            (st = cudnnBackendFinalize(*h))) {
            last = st;
            *step = m ? "heuristics (fallback mode)" : "heuristics (mode A)";
            continue;
        }
        int made = 0;
        for (; made < SDPA_MAX_CFGS; made++)
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[made]))
                break;
        st = made ? cudnnBackendGetAttribute(*h, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, made, &got, cfgs)
                  : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
        if (st) {
            last = st;
            *step = "heuristics results";
            got = 0;
        }
        int chosen = -1;
        for (int i = 0; i < got && i < made && chosen < 0; i++) {
            cudnnBackendDescriptor_t plan = NULL;
            int64_t ws = 0;
            st = make_plan(handle, cfgs[i], &plan, &ws, step);
            if (st == CUDNN_STATUS_SUCCESS && ws > SDPA_WORKSPACE_MAX) {
                st = CUDNN_STATUS_NOT_SUPPORTED;
                *step = "plan workspace over 1 GiB";
            }
            if (st) {
                last = st;
                desc_destroy(&plan);
                continue;
            }
            chosen = i;
            e->desc[D_PLAN] = plan;
            e->workspace = ws;
        }
        if (chosen >= 0) {
            e->desc[D_CFG] = cfgs[chosen];
            cfgs[chosen] = NULL;
        }
        for (int i = 0; i < made; i++)
            desc_destroy(&cfgs[i]);
        if (chosen >= 0)
            return CUDNN_STATUS_SUCCESS;
    }
    return last;
}

/* The chosen engine's global index, for the log; -1 where cuDNN will not say. */
static int64_t engine_index(cudnnBackendDescriptor_t cfg)
{
    cudnnBackendDescriptor_t eng = NULL;
    int64_t n = 0, idx = -1;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) ||
        cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &n, &eng) ||
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                 &idx))
        idx = -1;
    desc_destroy(&eng);
    return idx;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Builds e's plan, or marks it refused (descriptors freed, reason kept). */
static void entry_build(cudnnHandle_t handle, sdpa_entry *e)
{
    const char *step = "?";
    const double t0 = now_ms();
    cudnnStatus_t st = make_graph(handle, e, &step);
    if (st == CUDNN_STATUS_SUCCESS)
        st = choose_plan(handle, e, &step);
    if (st == CUDNN_STATUS_SUCCESS) {
        e->state = SDPA_READY;
        e->engine = engine_index(e->desc[D_CFG]);
        TSR_DEBUG("attention: cuDNN SDPA plan for b=%lld heads=%lld %lldx%lld d=%lld: engine %lld, "
                  "workspace %lld bytes, built in %.0f ms",
                  (long long)e->key[0], (long long)e->key[1], (long long)e->key[2],
                  (long long)e->key[3], (long long)e->key[4], (long long)e->engine,
                  (long long)e->workspace, now_ms() - t0);
        return;
    }
    entry_clear(e);
    e->state = SDPA_REFUSED;
    snprintf(e->why, sizeof e->why, "%s: %s", step, cudnnGetErrorString(st));
    TSR_DEBUG("attention: cuDNN SDPA refuses b=%lld heads=%lld %lldx%lld d=%lld (%s); the other "
              "paths run it",
              (long long)e->key[0], (long long)e->key[1], (long long)e->key[2],
              (long long)e->key[3], (long long)e->key[4], e->why);
}

/* The context's cache, made on first use; NULL when it cannot be allocated. */
static tsr_cu_sdpa_cache *cache_of(cuda_ctx *c)
{
    if (c->sdpa)
        return c->sdpa;
    tsr_cu_sdpa_cache *sc = (tsr_cu_sdpa_cache *)calloc(1, sizeof *sc);
    if (!sc)
        return NULL;
    const char *s = getenv("TSR_CUDA_ATTENTION_CUDNN_STRICT");
    sc->strict = s && strcmp(s, "1") == 0;
    const size_t ver = cudnnGetVersion();
    sc->usable = ver >= SDPA_MIN_VERSION;
    if (!sc->usable)
        TSR_DEBUG("attention: cuDNN %zu has no SDPA_FWD node (%d or later); the other paths run "
                  "attention",
                  ver, SDPA_MIN_VERSION);
    c->sdpa = sc;
    return sc;
}

/* A fresh variant pack for e: q, k, v, y, the scale, the workspace. */
static cudnnStatus_t make_pack(sdpa_entry *e, void *const ptrs[4], void *ws)
{
    static const int64_t uids[5] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE};
    void *all[5] = {ptrs[0], ptrs[1], ptrs[2], ptrs[3], &e->scale};
    cudnnStatus_t st;
    desc_destroy(&e->pack);
    if ((st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &e->pack)) ||
        (st = cudnnBackendSetAttribute(e->pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                       CUDNN_TYPE_INT64, 5, uids)) ||
        (st = cudnnBackendSetAttribute(e->pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                       CUDNN_TYPE_VOID_PTR, 5, all)) ||
        (st = cudnnBackendSetAttribute(e->pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                       CUDNN_TYPE_VOID_PTR, 1, &ws)) ||
        (st = cudnnBackendFinalize(e->pack))) {
        desc_destroy(&e->pack);
        return st;
    }
    memcpy(e->pack_ptrs, ptrs, sizeof e->pack_ptrs);
    e->pack_ws = ws;
    e->pack_scale = e->scale;
    return CUDNN_STATUS_SUCCESS;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

int tsr_cu_attention_cudnn(tsr_backend *b, const tsr_tensor *q, const tsr_tensor *k,
                           const tsr_tensor *v, const tsr_attention_params *p, tsr_tensor *y,
                           int64_t d, float scale)
{
    cuda_ctx *c = tsr_cu_ctx(b);
    const int64_t bsz = q->ne[0], lq = q->ne[1], lk = k->ne[1];
    if (q->dtype != TSR_F16 || k->dtype != TSR_F16 || v->dtype != TSR_F16 || y->dtype != TSR_F16 ||
        p->causal || d % 8 != 0 || d > SDPA_MAX_D || lq < 1 || lk < 1 || !aligned16(q->data) ||
        !aligned16(k->data) || !aligned16(v->data) || !aligned16(y->data))
        return 1;
    tsr_cu_sdpa_cache *sc = cache_of(c);
    if (!sc)
        return 1;
    if (!sc->usable)
        return sc->strict
                   ? tsr_errorf(TSR_ERR_BACKEND, "attention: cuDNN %zu has no SDPA node (needs %d)",
                                cudnnGetVersion(), SDPA_MIN_VERSION)
                   : 1;
    const int64_t key[7] = {bsz, p->heads, lq, lk, d, p->causal ? 1 : 0, (int64_t)q->dtype};
    sdpa_entry *e = NULL;
    for (int i = 0; i < sc->n && !e; i++)
        if (memcmp(sc->e[i].key, key, sizeof key) == 0)
            e = &sc->e[i];
    if (!e) {
        if (sc->n == SDPA_CACHE_MAX) {
            if (!sc->full_logged)
                TSR_INFO("attention: the cuDNN SDPA plan cache is full (%d shapes); new shapes run "
                         "on the other paths",
                         SDPA_CACHE_MAX);
            sc->full_logged = true;
            return sc->strict
                       ? tsr_errorf(TSR_ERR_BACKEND, "attention: the cuDNN SDPA plan cache is full")
                       : 1;
        }
        e = &sc->e[sc->n++];
        memcpy(e->key, key, sizeof key);
        entry_build(c->cudnn, e);
    }
    if (e->state != SDPA_READY)
        return sc->strict ? tsr_errorf(TSR_ERR_BACKEND,
                                       "attention: cuDNN SDPA builds no plan for b=%lld heads=%d "
                                       "%lldx%lld d=%lld (%s)",
                                       (long long)bsz, p->heads, (long long)lq, (long long)lk,
                                       (long long)d, e->why)
                          : 1;
    void *ws = NULL;
    if (e->workspace > 0) {
        ws = tsr_cu_scratch(b, (size_t)e->workspace);
        if (!ws) {
            tsr_error_clear(); /* the other paths need less */
            return 1;
        }
    }
    void *const ptrs[4] = {q->data, k->data, v->data, y->data};
    e->scale = scale;
    if (!e->pack || memcmp(ptrs, e->pack_ptrs, sizeof e->pack_ptrs) != 0 || ws != e->pack_ws ||
        scale != e->pack_scale)
        TSR_CUDA_CHECK(make_pack(e, ptrs, ws));
    TSR_CUDA_CHECK(cudnnBackendExecute(c->cudnn, e->desc[D_PLAN], e->pack));
    return TSR_OK;
}

void tsr_cu_attention_cudnn_release(cuda_ctx *c)
{
    if (!c->sdpa)
        return;
    for (int i = 0; i < c->sdpa->n; i++)
        entry_clear(&c->sdpa->e[i]);
    free(c->sdpa);
    c->sdpa = NULL;
}
