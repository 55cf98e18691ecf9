/*
 * tests/gpu/test_cudnn_sdpa_host.cu - backend/cuda/ops_attention_cudnn.cu
 * checked on the host, without a GPU (label unit; built where nvcc is).
 *
 * The implementation file is included, so its static functions are the ones
 * checked:
 *   static_checks   what returns 1 (falls back) before any cuDNN call: not
 *                   f16, causal, head size not a multiple of 8 or over 256,
 *                   a pointer not 16-byte aligned
 *   fallback_cache  a shape whose plan cannot be built (here: no cuDNN
 *                   handle, so the graph step fails) is cached as refused,
 *                   returns 1 from then on without building again, fails
 *                   with the step and cuDNN's status under
 *                   TSR_CUDA_ATTENTION_CUDNN_STRICT=1; release frees it all
 *   node_validates  the tensors and SDPA_FWD node of every SD shape finalize
 *                   (cuDNN's own checks of dims and strides), and a node with
 *                   a wrong output shape does not (so finalize checks)
 *   heuristics      cuDNN's heuristics (mode A) offer at least one engine
 *                   config for every SD shape's graph on sm_80, sm_86 and
 *                   sm_90 device descriptions, with no device: a
 *                   CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR made from cuDNN's
 *                   JSON form of the device properties.  cuDNN's engines
 *                   check support through libcuda, so this case needs a
 *                   loadable libcuda.so.1 (tests/gpu/CMakeLists.txt points it
 *                   at the toolkit's stub); it skips where there is none.
 * What this cannot check: building the plan (its kernels are compiled and
 * loaded through the driver), the results, the speed.  tests/gpu/run.sh
 * does those on a GPU (gpu_ops_attention_cudnn, gpu_ops_attention_sd_cudnn).
 */
#include "backend/cuda/ops_attention_cudnn.cu"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "test.h"
}

/* What the included file needs from cuda_backend.cu. */
extern "C" void tsr_cuda_mark_sticky(const char *what) { (void)what; }
void *tsr_cu_scratch(tsr_backend *b, size_t bytes)
{
    (void)b;
    (void)bytes;
    return NULL;
}

/* The attention shapes of SD1.5 (512^2 and 1024^2) and SDXL (1024^2), self
 * and cross, at batch 2 and 32: b, heads, lq, lk, d. */
static const int64_t sd_shapes[][5] = {
    {2, 8, 4096, 4096, 40},   {2, 8, 1024, 1024, 80},   {2, 8, 256, 256, 160},
    {2, 8, 4096, 77, 40},     {2, 8, 1024, 77, 80},     {2, 8, 256, 77, 160},
    {2, 8, 64, 77, 160},      {2, 10, 4096, 4096, 64},  {2, 20, 1024, 1024, 64},
    {2, 10, 4096, 77, 64},    {2, 20, 1024, 77, 64},    {32, 8, 4096, 4096, 40},
    {32, 8, 1024, 1024, 80},  {32, 10, 4096, 4096, 64}, {32, 20, 1024, 1024, 64},
    {2, 8, 16384, 16384, 40}, {2, 5, 4096, 4096, 64},
};
#define N_SD (sizeof sd_shapes / sizeof sd_shapes[0])

/* A fake CUDA backend: the context without a device (no stream, no handle). */
typedef struct fake_backend {
    tsr_backend b;
    cuda_ctx c;
} fake_backend;

static void fake_init(fake_backend *f)
{
    memset(f, 0, sizeof *f);
    f->b.ctx = &f->c;
}

/* Tensors over fake, 16-byte aligned device addresses (never dereferenced). */
static void qkvy(int64_t b, int64_t lq, int64_t lk, int64_t hd, tsr_dtype dt, tsr_tensor t[4])
{
    t[0] = tsr_tensor_3d(dt, b, lq, hd, (void *)(uintptr_t)0x10000);
    t[1] = tsr_tensor_3d(dt, b, lk, hd, (void *)(uintptr_t)0x20000);
    t[2] = tsr_tensor_3d(dt, b, lk, hd, (void *)(uintptr_t)0x30000);
    t[3] = tsr_tensor_3d(dt, b, lq, hd, (void *)(uintptr_t)0x40000);
}

static int call(fake_backend *f, tsr_tensor t[4], int heads, int64_t d, bool causal)
{
    tsr_attention_params p = {heads, 0.0f, causal};
    return tsr_cu_attention_cudnn(&f->b, &t[0], &t[1], &t[2], &p, &t[3], d, 1.0f / sqrtf((float)d));
}

static int test_static_checks(void)
{
    fake_backend f;
    fake_init(&f);
    tsr_tensor t[4];
    qkvy(2, 256, 256, 8 * 40, TSR_F32, t);
    ASSERT_EQ(call(&f, t, 8, 40, false), 1); /* f32 */
    qkvy(2, 256, 256, 8 * 40, TSR_BF16, t);
    ASSERT_EQ(call(&f, t, 8, 40, false), 1); /* bf16 */
    qkvy(2, 77, 77, 12 * 64, TSR_F16, t);
    ASSERT_EQ(call(&f, t, 12, 64, true), 1); /* causal (the text encoders) */
    qkvy(1, 4096, 4096, 512, TSR_F16, t);
    ASSERT_EQ(call(&f, t, 1, 512, false), 1); /* the VAE's 512-wide head */
    qkvy(2, 256, 256, 4 * 36, TSR_F16, t);
    ASSERT_EQ(call(&f, t, 4, 36, false), 1); /* not a multiple of 8 */
    qkvy(2, 256, 256, 8 * 40, TSR_F16, t);
    t[2].data = (void *)(uintptr_t)0x30008;
    ASSERT_EQ(call(&f, t, 8, 40, false), 1); /* v misaligned */
    ASSERT_TRUE(f.c.sdpa == NULL);           /* all before the cache or cuDNN */
    return 0;
}

static int test_fallback_cache(void)
{
    fake_backend f;
    fake_init(&f);
    tsr_tensor t[4];
    unsetenv("TSR_CUDA_ATTENTION_CUDNN_STRICT");
    qkvy(2, 4096, 4096, 8 * 40, TSR_F16, t);
    ASSERT_EQ(call(&f, t, 8, 40, false), 1); /* no handle: the plan cannot be built */
    ASSERT_TRUE(f.c.sdpa != NULL);
    if (!f.c.sdpa->usable) {
        printf("skip: cuDNN %zu has no SDPA node\n", cudnnGetVersion());
        tsr_cu_attention_cudnn_release(&f.c);
        return TSR_TEST_SKIP;
    }
    ASSERT_EQ(f.c.sdpa->n, 1);
    const sdpa_entry *e = &f.c.sdpa->e[0];
    ASSERT_EQ(e->state, SDPA_REFUSED);
    printf("refused as expected: %s\n", e->why);
    ASSERT_TRUE(strstr(e->why, "graph handle") != NULL); /* tensors and node were fine */
    for (int i = 0; i < D_COUNT; i++)
        ASSERT_TRUE(e->desc[i] == NULL); /* freed when refused */
    ASSERT_EQ(call(&f, t, 8, 40, false), 1);
    ASSERT_EQ(f.c.sdpa->n, 1); /* cached: not built again */
    qkvy(32, 4096, 4096, 8 * 40, TSR_F16, t);
    ASSERT_EQ(call(&f, t, 8, 40, false), 1);
    ASSERT_EQ(f.c.sdpa->n, 2); /* another batch is another shape */
    tsr_cu_attention_cudnn_release(&f.c);
    ASSERT_TRUE(f.c.sdpa == NULL);

    /* strict: the refusal is an error naming the step and cuDNN's status */
    setenv("TSR_CUDA_ATTENTION_CUDNN_STRICT", "1", 1);
    qkvy(2, 1024, 1024, 8 * 80, TSR_F16, t);
    const int rc = call(&f, t, 8, 80, false);
    unsetenv("TSR_CUDA_ATTENTION_CUDNN_STRICT");
    ASSERT_EQ(rc, TSR_ERR_BACKEND);
    printf("strict: %s\n", tsr_last_error());
    ASSERT_TRUE(strstr(tsr_last_error(), "1024x1024 d=80") != NULL);
    ASSERT_TRUE(strstr(tsr_last_error(), "CUDNN_STATUS_") != NULL);
    tsr_error_clear();
    /* still strict for this context (read once): a static-check miss is not
     * an error, only a refusal by cuDNN is */
    qkvy(2, 77, 77, 12 * 64, TSR_F16, t);
    ASSERT_EQ(call(&f, t, 12, 64, true), 1);
    tsr_cu_attention_cudnn_release(&f.c);
    return 0;
}

static int test_node_validates(void)
{
    if (cudnnGetVersion() < SDPA_MIN_VERSION) {
        printf("skip: cuDNN %zu has no SDPA node\n", cudnnGetVersion());
        return TSR_TEST_SKIP;
    }
    for (size_t i = 0; i < N_SD; i++) {
        sdpa_entry e;
        memset(&e, 0, sizeof e);
        memcpy(e.key, sd_shapes[i], sizeof sd_shapes[i]);
        e.key[6] = TSR_F16;
        const char *step = "?";
        const cudnnStatus_t st = make_graph(NULL, &e, &step);
        /* everything up to the graph's handle is built and finalized */
        if (st == CUDNN_STATUS_SUCCESS || strcmp(step, "graph handle") != 0 ||
            e.desc[D_OP] == NULL) {
            fprintf(stderr, "shape %zu: %s at %s\n", i, cudnnGetErrorString(st), step);
            entry_clear(&e);
            return 1;
        }
        entry_clear(&e);
    }
    /* control: an output whose head size differs from q's is refused */
    sdpa_entry e;
    memset(&e, 0, sizeof e);
    const char *step = "?";
    const int64_t qd[4] = {2, 8, 64, 64}, qs[4] = {64 * 8 * 64, 64, 8 * 64, 1};
    const int64_t od[4] = {2, 8, 64, 32}, os[4] = {64 * 8 * 32, 32, 8 * 32, 1};
    const int64_t one[4] = {1, 1, 1, 1};
    cudnnStatus_t st = make_tensor(&e.desc[D_Q], UID_Q, CUDNN_DATA_HALF, qd, qs, false, &step);
    if (!st)
        st = make_tensor(&e.desc[D_K], UID_K, CUDNN_DATA_HALF, qd, qs, false, &step);
    if (!st)
        st = make_tensor(&e.desc[D_V], UID_V, CUDNN_DATA_HALF, qd, qs, false, &step);
    if (!st)
        st = make_tensor(&e.desc[D_O], UID_O, CUDNN_DATA_HALF, od, os, false, &step);
    if (!st)
        st = make_tensor(&e.desc[D_SCALE], UID_SCALE, CUDNN_DATA_FLOAT, one, one, true, &step);
    ASSERT_EQ(st, CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(
        cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, &e.desc[D_OP]),
        CUDNN_STATUS_SUCCESS);
    const cudnnBackendAttributeName_t io[5] = {
        CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC,
        CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC,
        CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC};
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(cudnnBackendSetAttribute(e.desc[D_OP], io[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                           &e.desc[D_Q + i]),
                  CUDNN_STATUS_SUCCESS);
    st = cudnnBackendFinalize(e.desc[D_OP]);
    entry_clear(&e);
    ASSERT_TRUE(st != CUDNN_STATUS_SUCCESS);
    return 0;
}

/* cuDNN's JSON form of a device's properties (the fields libcudnn_graph
 * reads; values from the A100 / RTX A6000 / H100 datasheets). */
static int device_desc(int ver, int smem_optin, int threads_sm, int sms,
                       cudnnBackendDescriptor_t *d)
{
    char js[1024];
    snprintf(js, sizeof js,
             "{\"cudaDeviceId\":0,\"deviceName\":\"sm_%d\",\"deviceVer\":%d,\"driverVer\":13000,"
             "\"isTccDriver\":0,\"l2CacheSize\":41943040,\"maxCtasPerSM\":32,"
             "\"maxRegistersPerSM\":65536,\"maxSharedMemoryPerBlock\":49152,"
             "\"maxSharedMemoryPerBlockOptin\":%d,\"maxThreadsPerBlock\":1024,"
             "\"maxThreadsPerSM\":%d,\"memClockRateKHz\":2619000,\"multiProcessorCount\":%d,"
             "\"pciDeviceId\":0,\"regsPerBlock\":65536,\"reservedSharedMemoryPerBlock\":1024,"
             "\"smClockRateKHz\":1755000,\"supportCoopLaunch\":1,\"totalGlobalMem\":85029158912,"
             "\"warpSize\":32,\"maxGridSize\":[2147483647,65535,65535],"
             "\"maxBlockSize\":[1024,1024,64]}",
             ver / 10, ver, smem_optin, threads_sm, sms);
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, d);
    if (!st)
        st = cudnnBackendSetAttribute(*d, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
                                      CUDNN_TYPE_CHAR, (int64_t)strlen(js) + 1, js);
    if (!st)
        st = cudnnBackendFinalize(*d);
    if (st)
        fprintf(stderr, "sm_%d: no device description from JSON: %s\n", ver / 10,
                cudnnGetErrorString(st));
    return st ? -1 : 0;
}

/* Engine configs cuDNN's heuristics (mode A) offer for e's graph on `dev`. */
static int64_t heuristic_configs(sdpa_entry *e, cudnnBackendDescriptor_t dev, char *engines,
                                 size_t n)
{
    cudnnBackendDescriptor_t h = NULL, cfgs[SDPA_MAX_CFGS] = {NULL};
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    int64_t got = 0;
    cudnnStatus_t st = cudnnBackendFinalize(e->desc[D_GRAPH]);
    if (!st)
        st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &h);
    if (!st)
        st = cudnnBackendSetAttribute(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e->desc[D_GRAPH]);
    if (!st)
        st =
            cudnnBackendSetAttribute(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (!st)
        st = cudnnBackendSetAttribute(h, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dev);
    if (!st)
        st = cudnnBackendFinalize(h);
    for (int i = 0; i < SDPA_MAX_CFGS && !st; i++)
        st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]);
    if (!st)
        st = cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, SDPA_MAX_CFGS, &got, cfgs);
    engines[0] = '\0';
    for (int64_t i = 0; !st && i < got; i++) {
        const size_t len = strlen(engines);
        snprintf(engines + len, n - len, " %lld", (long long)engine_index(cfgs[i]));
    }
    for (int i = 0; i < SDPA_MAX_CFGS; i++)
        desc_destroy(&cfgs[i]);
    desc_destroy(&h);
    if (st) {
        snprintf(engines, n, "%s", cudnnGetErrorString(st));
        return -1;
    }
    return got;
}

static int test_heuristics(void)
{
    if (cudnnGetVersion() < SDPA_MIN_VERSION) {
        printf("skip: cuDNN %zu has no SDPA node\n", cudnnGetVersion());
        return TSR_TEST_SKIP;
    }
    void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!libcuda) {
        printf("skip: no libcuda.so.1 to load (cuDNN's engines check support through it)\n");
        return TSR_TEST_SKIP;
    }
    const struct {
        int ver, smem_optin, threads_sm, sms;
    } devs[] = {{800, 166912, 2048, 108}, {860, 101376, 1536, 84}, {900, 232448, 2048, 132}};
    int failed = 0;
    for (size_t k = 0; k < sizeof devs / sizeof devs[0]; k++) {
        cudnnBackendDescriptor_t dev = NULL;
        if (device_desc(devs[k].ver, devs[k].smem_optin, devs[k].threads_sm, devs[k].sms, &dev)) {
            desc_destroy(&dev);
            return 1;
        }
        for (size_t i = 0; i < N_SD; i++) {
            sdpa_entry e;
            memset(&e, 0, sizeof e);
            memcpy(e.key, sd_shapes[i], sizeof sd_shapes[i]);
            e.key[6] = TSR_F16;
            const char *step = "?";
            make_graph(NULL, &e, &step); /* stops at the handle; the graph has its node */
            char engines[128];
            const int64_t got = heuristic_configs(&e, dev, engines, sizeof engines);
            printf("sm_%d b=%lld heads=%lld %lldx%lld d=%lld: %lld configs (engines%s)\n",
                   devs[k].ver / 10, (long long)e.key[0], (long long)e.key[1], (long long)e.key[2],
                   (long long)e.key[3], (long long)e.key[4], (long long)got, engines);
            failed |= got < 1;
            entry_clear(&e);
        }
        desc_destroy(&dev);
    }
    return failed;
}

static const tsr_test_entry tests[] = {
    {"static_checks", test_static_checks},
    {"fallback_cache", test_fallback_cache},
    {"node_validates", test_node_validates},
    {"heuristics", test_heuristics},
};

int main(int argc, char **argv)
{
    return tsr_test_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
