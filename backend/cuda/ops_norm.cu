/*
 * backend/cuda/ops_norm.cu - group norm (with optional fused SiLU), layer
 * norm and softmax.
 *
 * Why this way: statistics are reduced in f32 with Welford's update per
 * thread and Chan's pairwise merge across threads (cuda_math.h, checked on
 * the host against the CPU's double sums), which does not cancel the way
 * E[x^2] - E[x]^2 does in f32.  Group norm is two kernels: one block per
 * (image, group) [split into several blocks along positions for large
 * images, whose partial statistics a second tiny pass merges in a fixed
 * order, so results do not depend on scheduling] writes mean and rstd; then
 * one elementwise pass applies gamma/beta and the optional SiLU.  Layer norm
 * and softmax take one block per row (rows are at most a few thousand wide
 * in SD models).
 */
#include "ops_norm.cuh"

#define NORM_THREADS 256
/* Blocks per (image, group) slice for the statistics pass. */
#define GN_SPLIT_MAX 32
#define GN_PER_BLOCK (1 << 16) /* elements per statistics block, at least */

/* Merge one tsr_cu_stats per thread of the block into thread 0's, in a
 * fixed tree order; every thread gets the result. */
__device__ tsr_cu_stats block_stats(tsr_cu_stats s)
{
    __shared__ float sn[NORM_THREADS / 32], sm[NORM_THREADS / 32], sq[NORM_THREADS / 32];
    __shared__ tsr_cu_stats total;
    for (int off = 16; off > 0; off >>= 1) {
        tsr_cu_stats o;
        o.n = __shfl_down_sync(0xffffffffu, s.n, off);
        o.mean = __shfl_down_sync(0xffffffffu, s.mean, off);
        o.m2 = __shfl_down_sync(0xffffffffu, s.m2, off);
        s = tsr_cu_stats_merge(s, o);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        sn[warp] = s.n;
        sm[warp] = s.mean;
        sq[warp] = s.m2;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        tsr_cu_stats t = {0.0f, 0.0f, 0.0f};
        for (int w = 0; w < (int)(blockDim.x / 32); w++) {
            tsr_cu_stats o = {sn[w], sm[w], sq[w]};
            t = tsr_cu_stats_merge(t, o);
        }
        total = t;
    }
    __syncthreads();
    return total;
}

/* grid (split, groups, n): partial statistics of one slice part. */
__global__ void k_gn_stats(const void *x, int dt, int64_t positions, int64_t c, int64_t cpg,
                           tsr_cu_stats *part)
{
    const int split = gridDim.x, s = blockIdx.x, g = blockIdx.y, img = blockIdx.z;
    const int64_t count = positions * cpg;
    const int64_t k0 = count * s / split, k1 = count * (s + 1) / split;
    const int64_t base = (int64_t)img * positions * c;
    tsr_cu_stats st = {0.0f, 0.0f, 0.0f};
    for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x)
        tsr_cu_stats_add(&st, tsr_cu_load(x, dt, base + tsr_cu_gn_offset(k, c, cpg, g)));
    st = block_stats(st);
    if (threadIdx.x == 0)
        part[((int64_t)img * gridDim.y + g) * split + s] = st;
}

/* one thread per (image, group): merge the parts in order, write mean, rstd */
__global__ void k_gn_merge(const tsr_cu_stats *part, int split, int64_t slices, float eps,
                           float2 *mr)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= slices)
        return;
    tsr_cu_stats t = {0.0f, 0.0f, 0.0f};
    for (int s = 0; s < split; s++)
        t = tsr_cu_stats_merge(t, part[i * split + s]);
    mr[i] = make_float2(t.mean, tsr_cu_stats_rstd(t, eps));
}

__global__ void k_gn_apply(const void *x, void *y, int dt, const void *gamma, int gdt,
                           const void *beta, int bdt, const float2 *mr, int64_t positions,
                           int64_t c, int64_t cpg, int groups, int silu, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)blockDim.x * gridDim.x) {
        const int64_t ch = i % c, img = i / (positions * c);
        const float2 s = mr[img * groups + ch / cpg];
        const float a = s.y * tsr_cu_load(gamma, gdt, ch);
        const float sh = (beta ? tsr_cu_load(beta, bdt, ch) : 0.0f) - s.x * a;
        float v = tsr_cu_load(x, dt, i) * a + sh;
        if (silu)
            v = tsr_cu_silu(v);
        tsr_cu_store(y, dt, i, v);
    }
}

int tsr_cu_group_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                      const tsr_tensor *beta, int groups, float eps, bool silu, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "group_norm");
    if (rc < 0)
        return rc;
    cuda_ctx *c = tsr_cu_ctx(b);
    const int64_t n = x->ne[0], ch = x->ne[x->ndim - 1];
    const int64_t positions = tsr_tensor_numel(x) / (n * ch), cpg = ch / groups;
    int64_t split = positions * cpg / GN_PER_BLOCK;
    split = split < 1 ? 1 : split > GN_SPLIT_MAX ? GN_SPLIT_MAX : split;
    const int64_t slices = n * groups;
    const size_t part_bytes = (size_t)(slices * split) * sizeof(tsr_cu_stats);
    char *scratch = (char *)tsr_cu_scratch(b, part_bytes + (size_t)slices * sizeof(float2) + 16);
    if (!scratch)
        return TSR_ERR_NOMEM;
    tsr_cu_stats *part = (tsr_cu_stats *)scratch;
    float2 *mr = (float2 *)(scratch + ((part_bytes + 15) & ~(size_t)15));
    if (n > 65535 || groups > 65535)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "group_norm: %lld images of %d groups is too many",
                          (long long)n, groups);
    dim3 grid((unsigned)split, (unsigned)groups, (unsigned)n);
    k_gn_stats<<<grid, NORM_THREADS, 0, c->stream>>>(x->data, (int)x->dtype, positions, ch, cpg,
                                                     part);
    TSR_CUDA_LAUNCHED("group_norm");
    k_gn_merge<<<tsr_cu_blocks(slices, 128), 128, 0, c->stream>>>(part, (int)split, slices, eps,
                                                                   mr);
    TSR_CUDA_LAUNCHED("group_norm");
    const int64_t total = tsr_tensor_numel(x);
    k_gn_apply<<<tsr_cu_blocks(total, NORM_THREADS), NORM_THREADS, 0, c->stream>>>(
        x->data, y->data, (int)x->dtype, gamma->data, (int)gamma->dtype, beta ? beta->data : NULL,
        beta ? (int)beta->dtype : 0, mr, positions, ch, cpg, groups, silu ? 1 : 0, total);
    TSR_CUDA_LAUNCHED("group_norm");
    return TSR_OK;
}

/* one block per row */
__global__ void k_layer_norm(const void *x, void *y, int dt, const void *gamma, int gdt,
                             const void *beta, int bdt, int64_t c, float eps)
{
    const int64_t row = blockIdx.x, base = row * c;
    tsr_cu_stats st = {0.0f, 0.0f, 0.0f};
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x)
        tsr_cu_stats_add(&st, tsr_cu_load(x, dt, base + i));
    st = block_stats(st);
    const float rstd = tsr_cu_stats_rstd(st, eps);
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
        float v = (tsr_cu_load(x, dt, base + i) - st.mean) * rstd * tsr_cu_load(gamma, gdt, i);
        if (beta)
            v += tsr_cu_load(beta, bdt, i);
        tsr_cu_store(y, dt, base + i, v);
    }
}

int tsr_cu_layer_norm(tsr_backend *b, const tsr_tensor *x, const tsr_tensor *gamma,
                      const tsr_tensor *beta, float eps, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "layer_norm");
    if (rc < 0)
        return rc;
    const int64_t c = x->ne[x->ndim - 1], rows = tsr_tensor_numel(x) / c;
    if (rows > 0x7fffffff)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "layer_norm: %lld rows", (long long)rows);
    k_layer_norm<<<(unsigned)rows, NORM_THREADS, 0, tsr_cu_ctx(b)->stream>>>(
        x->data, y->data, (int)x->dtype, gamma->data, (int)gamma->dtype, beta ? beta->data : NULL,
        beta ? (int)beta->dtype : 0, c, eps);
    TSR_CUDA_LAUNCHED("layer_norm");
    return TSR_OK;
}

__device__ float block_reduce(float v, bool is_max)
{
    __shared__ float sh[NORM_THREADS / 32];
    __shared__ float result;
    for (int off = 16; off > 0; off >>= 1) {
        float o = __shfl_down_sync(0xffffffffu, v, off);
        v = is_max ? fmaxf(v, o) : v + o;
    }
    if (threadIdx.x % 32 == 0)
        sh[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = sh[0];
        for (int w = 1; w < (int)(blockDim.x / 32); w++)
            t = is_max ? fmaxf(t, sh[w]) : t + sh[w];
        result = t;
    }
    __syncthreads();
    return result;
}

/* one block per row; y may alias x (each element is read before written by
 * the same thread, and the row's statistics are complete before any write) */
__global__ void k_softmax(const void *x, void *y, int dt, int64_t c)
{
    const int64_t base = (int64_t)blockIdx.x * c;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x)
        m = fmaxf(m, tsr_cu_load(x, dt, base + i));
    m = block_reduce(m, true);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x)
        s += tsr_cu_osm_weight(tsr_cu_load(x, dt, base + i), m);
    s = block_reduce(s, false);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x)
        tsr_cu_store(y, dt, base + i, tsr_cu_osm_weight(tsr_cu_load(x, dt, base + i), m) * inv);
}

int tsr_cu_softmax(tsr_backend *b, const tsr_tensor *x, tsr_tensor *y)
{
    int rc = tsr_cu_usable(b, "softmax");
    if (rc < 0)
        return rc;
    const int64_t c = x->ne[x->ndim - 1], rows = tsr_tensor_numel(x) / c;
    if (rows > 0x7fffffff)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "softmax: %lld rows", (long long)rows);
    k_softmax<<<(unsigned)rows, NORM_THREADS, 0, tsr_cu_ctx(b)->stream>>>(x->data, y->data,
                                                                         (int)x->dtype, c);
    TSR_CUDA_LAUNCHED("softmax");
    return TSR_OK;
}
