/*
 * backend/cuda/ops_elementwise.cu - activations, broadcasting arithmetic and
 * the data-movement ops (scale, concat, nearest upsample, timestep
 * embedding, embedding lookup, dtype conversion), plus the conv/linear
 * epilogue.
 *
 * Why this way: these ops are memory-bound, so each is one grid-stride pass
 * over its output.  The storage dtype is a kernel argument, not a template
 * parameter: every load widens to f32 and every store rounds to nearest
 * even through cuda_math.h (tsr_cu_load/tsr_cu_store), the functions the
 * host tests check; a branch on a warp-uniform dtype costs nothing next to
 * the memory traffic, and one kernel per op keeps the four-architecture
 * build small.  Vectorised (half2, 16-byte) variants are the speed issue's.
 */
#include "ops_elementwise.cuh"

#define EW_THREADS 256

#define GRID_STRIDE(i, n)                                                                     \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                 \
         i += (int64_t)blockDim.x * gridDim.x)

/* ---- unary, geglu, scale, convert ---- */

__global__ void k_unary(int kind, const void *x, void *y, int dt, int64_t n)
{
    GRID_STRIDE(i, n) tsr_cu_store(y, dt, i, tsr_cu_act(kind, tsr_cu_load(x, dt, i)));
}

int tsr_cu_unary(tsr_backend *b, tsr_unary_kind kind, const tsr_tensor *x, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "unary");
    if (rc < 0)
        return rc;
    const int64_t n = tsr_tensor_numel(x);
    k_unary<<<tsr_cu_blocks(n, EW_THREADS), EW_THREADS, 0, tsr_cu_ctx(b)->stream>>>(
        (int)kind, x->data, y->data, (int)x->dtype, n);
    TSR_CUDA_LAUNCHED("unary");
    return TSR_OK;
}

__global__ void k_geglu(const void *x, void *y, int dt, int64_t rows, int64_t d)
{
    GRID_STRIDE(i, rows * d)
    {
        int64_t r = i / d, c = i % d;
        float a = tsr_cu_load(x, dt, r * 2 * d + c), g = tsr_cu_load(x, dt, r * 2 * d + d + c);
        tsr_cu_store(y, dt, i, a * tsr_cu_gelu(g));
    }
}

int tsr_cu_geglu(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "geglu");
    if (rc < 0)
        return rc;
    const int64_t d = y->ne[y->ndim - 1], rows = tsr_tensor_numel(y) / d;
    k_geglu<<<tsr_cu_blocks(rows * d, EW_THREADS), EW_THREADS, 0, tsr_cu_ctx(b)->stream>>>(
        x->data, y->data, (int)x->dtype, rows, d);
    TSR_CUDA_LAUNCHED("geglu");
    return TSR_OK;
}

__global__ void k_scale(const void *x, void *y, int dt, float s, int64_t n)
{
    GRID_STRIDE(i, n) tsr_cu_store(y, dt, i, tsr_cu_load(x, dt, i) * s);
}

int tsr_cu_scale(tsr_backend *b, const tsr_tensor *x, float s, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "scale");
    if (rc < 0)
        return rc;
    const int64_t n = tsr_tensor_numel(x);
    k_scale<<<tsr_cu_blocks(n, EW_THREADS), EW_THREADS, 0, tsr_cu_ctx(b)->stream>>>(
        x->data, y->data, (int)x->dtype, s, n);
    TSR_CUDA_LAUNCHED("scale");
    return TSR_OK;
}

__global__ void k_convert(const void *x, int xdt, void *y, int ydt, int64_t n)
{
    GRID_STRIDE(i, n) tsr_cu_store(y, ydt, i, tsr_cu_load(x, xdt, i));
}

int tsr_cu_convert(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "convert");
    if (rc < 0)
        return rc;
    const int64_t n = tsr_tensor_numel(x);
    if (x->dtype == y->dtype) {
        if (x->data != y->data)
            TSR_CUDA_CHECK(cudaMemcpyAsync(y->data, x->data, tsr_tensor_nbytes(x),
                                           cudaMemcpyDeviceToDevice, tsr_cu_ctx(b)->stream));
        return TSR_OK;
    }
    k_convert<<<tsr_cu_blocks(n, EW_THREADS), EW_THREADS, 0, tsr_cu_ctx(b)->stream>>>(
        x->data, (int)x->dtype, y->data, (int)y->dtype, n);
    TSR_CUDA_LAUNCHED("convert");
    return TSR_OK;
}

/* ---- binary with broadcasting, and the epilogue ---- */

typedef struct bcast4 {
    int64_t a4[4], bs[4];
} bcast4;

static bcast4 bcast_make(const tsr_tensor *a, const tsr_tensor *bt)
{
    bcast4 g;
    tsr_cu_shape4(a->ne, a->ndim, g.a4);
    tsr_cu_bcast_strides(a->ne, a->ndim, bt->ne, bt->ndim, g.bs);
    return g;
}

__global__ void k_binary(int mul, const void *a, int adt, const void *bb, int bdt, void *y,
                         bcast4 g, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float va = tsr_cu_load(a, adt, i), vb = tsr_cu_load(bb, bdt, tsr_cu_bcast_index(i, g.a4, g.bs));
        tsr_cu_store(y, adt, i, mul ? va * vb : va + vb);
    }
}

int tsr_cu_binary(tsr_backend *b, tsr_binary_kind kind, const tsr_tensor *a, const tsr_tensor *bt,
                  tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "binary");
    if (rc < 0)
        return rc;
    const int64_t n = tsr_tensor_numel(a);
    k_binary<<<tsr_cu_blocks(n, EW_THREADS), EW_THREADS, 0, tsr_cu_ctx(b)->stream>>>(
        kind == TSR_BINARY_MUL, a->data, (int)a->dtype, bt->data, (int)bt->dtype, y->data,
        bcast_make(a, bt), n);
    TSR_CUDA_LAUNCHED("binary");
    return TSR_OK;
}

/* y = act((y + bias) + r), each step in f32 and the result rounded once. */
__global__ void k_epilogue(void *y, int ydt, const void *bias, int bdt, int64_t c,
                           const void *r, int rdt, bcast4 g, int act, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float v = tsr_cu_load(y, ydt, i);
        if (bias)
            v += tsr_cu_load(bias, bdt, i % c);
        if (r)
            v += tsr_cu_load(r, rdt, tsr_cu_bcast_index(i, g.a4, g.bs));
        if (act >= 0)
            v = tsr_cu_act(act, v);
        tsr_cu_store(y, ydt, i, v);
    }
}

int tsr_cu_epilogue(tsr_backend *b, tsr_tensor *y, const tsr_tensor *bias, const tsr_epilogue *e,
                    const char *op)
{
    const tsr_tensor *r = e ? e->residual : NULL;
    const int act = e && e->has_act ? (int)e->act : -1;
    if (!bias && !r && act < 0)
        return TSR_OK;
    bcast4 g;
    memset(&g, 0, sizeof g);
    if (r)
        g = bcast_make(y, r);
    const int64_t n = tsr_tensor_numel(y), c = y->ne[y->ndim - 1];
    k_epilogue<<<tsr_cu_blocks(n, EW_THREADS), EW_THREADS, 0, tsr_cu_ctx(b)->stream>>>(
        y->data, (int)y->dtype, bias ? bias->data : NULL, bias ? (int)bias->dtype : 0, c,
        r ? r->data : NULL, r ? (int)r->dtype : 0, g, act, n);
    TSR_CUDA_LAUNCHED(op);
    return TSR_OK;
}

/* ---- concat, nearest upsample ---- */

__global__ void k_concat(const void *a, const void *bb, void *y, int dt, int64_t ca, int64_t cb,
                         int64_t n)
{
    GRID_STRIDE(i, n)
    {
        const int64_t cy = ca + cb, r = i / cy, c = i % cy;
        float v = c < ca ? tsr_cu_load(a, dt, r * ca + c) : tsr_cu_load(bb, dt, r * cb + c - ca);
        tsr_cu_store(y, dt, i, v);
    }
}

int tsr_cu_concat(tsr_backend *b, const tsr_tensor *a, const tsr_tensor *bt, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "concat");
    if (rc < 0)
        return rc;
    const int64_t n = tsr_tensor_numel(y);
    k_concat<<<tsr_cu_blocks(n, EW_THREADS), EW_THREADS, 0, tsr_cu_ctx(b)->stream>>>(
        a->data, bt->data, y->data, (int)y->dtype, a->ne[a->ndim - 1], bt->ne[bt->ndim - 1], n);
    TSR_CUDA_LAUNCHED("concat");
    return TSR_OK;
}

/* torch "nearest": source row floor(i * H / Ho), column floor(j * W / Wo). */
__global__ void k_upsample(const void *x, void *y, int dt, int64_t h, int64_t w, int64_t c,
                           int64_t ho, int64_t wo, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        int64_t ch = i % c, t = i / c, j = t % wo;
        t /= wo;
        int64_t r = t % ho, img = t / ho;
        int64_t sr = r * h / ho, sc = j * w / wo;
        tsr_cu_store(y, dt, i, tsr_cu_load(x, dt, ((img * h + sr) * w + sc) * c + ch));
    }
}

int tsr_cu_upsample_nearest(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "upsample_nearest");
    if (rc < 0)
        return rc;
    const int64_t n = tsr_tensor_numel(y);
    k_upsample<<<tsr_cu_blocks(n, EW_THREADS), EW_THREADS, 0, tsr_cu_ctx(b)->stream>>>(
        x->data, y->data, (int)y->dtype, x->ne[1], x->ne[2], x->ne[3], y->ne[1], y->ne[2], n);
    TSR_CUDA_LAUNCHED("upsample_nearest");
    return TSR_OK;
}

/* ---- timestep embedding, embedding lookup ---- */

__global__ void k_timestep(const float *t, void *y, int dt, int64_t dim, int flip, float shift,
                           int64_t n)
{
    const int64_t nf = dim / 2;
    GRID_STRIDE(i, n)
    {
        int64_t row = i / dim, col = i % dim;
        float v = 0.0f;
        if (col < 2 * nf) {
            /* unflipped: [sin | cos]; flipped: [cos | sin] */
            const int64_t k = col < nf ? col : col - nf;
            const bool first = col < nf;
            const float arg = tsr_cu_timestep_arg(t[row], k, nf, shift);
            v = (first != (flip != 0)) ? sinf(arg) : cosf(arg);
        }
        tsr_cu_store(y, dt, i, v);
    }
}

int tsr_cu_timestep_embedding(tsr_backend *b, const tsr_tensor *t, const tsr_timestep_params *p,
                              tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "timestep_embedding");
    if (rc < 0)
        return rc;
    const int64_t n = tsr_tensor_numel(y);
    k_timestep<<<tsr_cu_blocks(n, EW_THREADS), EW_THREADS, 0, tsr_cu_ctx(b)->stream>>>(
        (const float *)t->data, y->data, (int)y->dtype, p->dim, p->flip_sin_to_cos ? 1 : 0,
        p->downscale_freq_shift, n);
    TSR_CUDA_LAUNCHED("timestep_embedding");
    return TSR_OK;
}

/* Rows of out-of-range ids are written as zeros and the smallest bad
 * position (+1) is recorded in *bad, which the host reads back. */
__global__ void k_embedding(const int32_t *ids, const void *table, int tdt, void *y, int ydt,
                            int64_t v, int64_t d, int64_t n, int *bad)
{
    GRID_STRIDE(i, n)
    {
        int64_t pos = i / d, c = i % d;
        int32_t id = ids[pos];
        float val = 0.0f;
        if (id < 0 || id >= v) {
            if (c == 0)
                atomicMin(bad, (int)(pos < 0x7ffffffe ? pos + 1 : 0x7ffffffe));
        } else {
            val = tsr_cu_load(table, tdt, (int64_t)id * d + c);
        }
        tsr_cu_store(y, ydt, i, val);
    }
}

int tsr_cu_embedding(tsr_backend *b, const tsr_tensor *ids, const tsr_tensor *table,
                     tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "embedding");
    if (rc < 0)
        return rc;
    cuda_ctx *c = tsr_cu_ctx(b);
    const int64_t v = table->ne[0], d = table->ne[1], n = tsr_tensor_numel(y);
    const int none = 0x7fffffff;
    *c->flag_host = none;
    TSR_CUDA_CHECK(cudaMemcpyAsync(c->flag_dev, c->flag_host, sizeof(int), cudaMemcpyHostToDevice,
                                   c->stream));
    k_embedding<<<tsr_cu_blocks(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(
        (const int32_t *)ids->data, table->data, (int)table->dtype, y->data, (int)y->dtype, v, d,
        n, c->flag_dev);
    TSR_CUDA_LAUNCHED("embedding");
    /* the one host wait of the op: the range check (a prompt's ids, once
     * per text encoding, not per denoising step) */
    TSR_CUDA_CHECK(cudaMemcpyAsync(c->flag_host, c->flag_dev, sizeof(int), cudaMemcpyDeviceToHost,
                                   c->stream));
    TSR_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    if (*c->flag_host != none) {
        const long long pos = (long long)*c->flag_host - 1;
        int32_t id = 0;
        TSR_CUDA_CHECK(cudaMemcpy(&id, (const int32_t *)ids->data + pos, sizeof id,
                                  cudaMemcpyDeviceToHost));
        return tsr_errorf(TSR_ERR_RANGE, "embedding: id %d at position %lld is outside [0, %lld)",
                          (int)id, pos, (long long)v);
    }
    return TSR_OK;
}
