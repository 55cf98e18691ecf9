/*
 * tests/core/test_core.c - core building blocks: dtype conversion against
 * exact bit patterns torch produces, arena planning, the thread pool, error
 * details and backend selection.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "backend/arena.h"
#include "core/error.h"
#include "core/pool.h"
#include "core/tensor.h"
#include "test.h"

static int test_dtype_f16(void)
{
    /* values and the f16 bits torch.tensor(v, dtype=torch.float16) gives */
    static const struct {
        float v;
        uint16_t bits;
    } cases[] = {
        {0.0f, 0x0000},      {-0.0f, 0x8000},   {1.0f, 0x3c00},      {-2.0f, 0xc000},
        {65504.0f, 0x7bff},  {65520.0f, 0x7c00}, {1e-8f, 0x0000},    {6.0e-8f, 0x0001},
        {0.1f, 0x2e66},      {3.14159265f, 0x4248}, {1.0009765625f, 0x3c01},
        {1.00048828125f, 0x3c00}, /* tie rounds to even */
        {1.00146484375f, 0x3c02}, /* tie rounds to even (up) */
        {6.1035156e-05f, 0x0400}, {6.0975552e-05f, 0x03ff},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = tsr_f32_to_f16(cases[i].v);
        if (h != cases[i].bits)
            TSR_FAIL("f32_to_f16(%.9g) = 0x%04x, want 0x%04x", cases[i].v, h, cases[i].bits);
    }
    /* every finite f16 survives f16 -> f32 -> f16 */
    for (uint32_t b = 0; b < 0x10000; b++) {
        if ((b & 0x7c00) == 0x7c00)
            continue;
        float f = tsr_f16_to_f32((uint16_t)b);
        ASSERT_EQ(tsr_f32_to_f16(f), b);
    }
    ASSERT_TRUE(isinf(tsr_f16_to_f32(0x7c00)));
    ASSERT_TRUE(isnan(tsr_f16_to_f32(0x7e00)));
    ASSERT_TRUE(isnan(tsr_f16_to_f32(tsr_f32_to_f16(NAN))));
    return 0;
}

static int test_dtype_bf16(void)
{
    ASSERT_EQ(tsr_f32_to_bf16(1.0f), 0x3f80);
    ASSERT_EQ(tsr_f32_to_bf16(3.14159265f), 0x4049);
    ASSERT_EQ(tsr_f32_to_bf16(-0.1f), 0xbdcd);
    for (uint32_t b = 0; b < 0x10000; b++) {
        if ((b & 0x7f80) == 0x7f80)
            continue;
        ASSERT_EQ(tsr_f32_to_bf16(tsr_bf16_to_f32((uint16_t)b)), b);
    }
    float src[3] = {1.5f, -2.25f, 1024.0f}; /* exactly representable in bf16 */
    uint16_t h[3];
    float back[3];
    tsr_convert_from_f32(h, TSR_BF16, src, 3);
    tsr_convert_to_f32(back, h, TSR_BF16, 3);
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(back[i], src[i], 0);
    return 0;
}

static int test_arena_alignment(void)
{
    tsr_arena a;
    ASSERT_OK(tsr_arena_init(&a, NULL, 4096));
    void *p1 = tsr_arena_alloc(&a, 3);
    void *p2 = tsr_arena_alloc(&a, 100);
    ASSERT_TRUE(p1 && p2);
    ASSERT_EQ((uintptr_t)p1 % TSR_ARENA_ALIGN, 0);
    ASSERT_EQ((uintptr_t)p2 % TSR_ARENA_ALIGN, 0);
    size_t mark = tsr_arena_mark(&a);
    tsr_tensor t;
    int64_t ne[4] = {2, 8, 8, 4};
    ASSERT_OK(tsr_arena_tensor(&a, &t, TSR_F32, 4, ne));
    ASSERT_EQ(tsr_tensor_nbytes(&t), 2 * 8 * 8 * 4 * 4);
    tsr_arena_reset(&a, mark);
    tsr_tensor t2;
    ASSERT_OK(tsr_arena_tensor(&a, &t2, TSR_F32, 4, ne));
    ASSERT_TRUE(t.data == t2.data);
    tsr_arena_free(&a);
    return 0;
}

static int test_arena_measure(void)
{
    tsr_arena m;
    tsr_arena_init_measure(&m, NULL);
    int64_t ne[2] = {10, 10};
    tsr_tensor t;
    ASSERT_OK(tsr_arena_tensor(&m, &t, TSR_F32, 2, ne)); /* 400 -> 448 */
    size_t mark = tsr_arena_mark(&m);
    ASSERT_OK(tsr_arena_tensor(&m, &t, TSR_F16, 2, ne)); /* 200 -> 256 */
    tsr_arena_reset(&m, mark);
    ASSERT_OK(tsr_arena_tensor(&m, &t, TSR_F32, 1, ne)); /* 40 -> 64 */
    ASSERT_TRUE(t.data == NULL);
    ASSERT_EQ(m.peak, 448 + 256);
    /* a real arena of exactly the planned size fits the same sequence */
    tsr_arena a;
    ASSERT_OK(tsr_arena_init(&a, NULL, m.peak));
    ASSERT_OK(tsr_arena_tensor(&a, &t, TSR_F32, 2, ne));
    ASSERT_OK(tsr_arena_tensor(&a, &t, TSR_F16, 2, ne));
    tsr_arena_free(&a);
    return 0;
}

static int test_arena_exhausted(void)
{
    tsr_arena a;
    ASSERT_OK(tsr_arena_init(&a, NULL, 128));
    ASSERT_TRUE(tsr_arena_alloc(&a, 64) != NULL);
    ASSERT_TRUE(tsr_arena_alloc(&a, 65) == NULL);
    ASSERT_TRUE(strstr(tsr_last_error(), "arena exhausted") != NULL);
    ASSERT_TRUE(tsr_arena_alloc(&a, SIZE_MAX) == NULL);
    tsr_tensor t;
    int64_t huge[4] = {INT64_MAX / 2, 4, 4, 4};
    ASSERT_EQ(tsr_arena_tensor(&a, &t, TSR_F32, 4, huge), TSR_ERR_RANGE);
    int64_t neg[1] = {-1};
    ASSERT_EQ(tsr_arena_tensor(&a, &t, TSR_F32, 1, neg), TSR_ERR_RANGE);
    tsr_arena_free(&a);
    return 0;
}

typedef struct sum_ctx {
    int *hits;
    atomic_int calls;
} sum_ctx;

static void mark_range(void *ctx_, int64_t begin, int64_t end, int worker)
{
    sum_ctx *ctx = ctx_;
    (void)worker;
    atomic_fetch_add(&ctx->calls, 1);
    for (int64_t i = begin; i < end; i++)
        ctx->hits[i]++;
}

static int test_pool_parallel_for(void)
{
    tsr_pool *pool;
    ASSERT_OK(tsr_pool_create(4, &pool));
    ASSERT_EQ(tsr_pool_size(pool), 4);
    enum { N = 100003 };
    int *hits = calloc(N, sizeof *hits);
    ASSERT_TRUE(hits);
    for (int round = 0; round < 50; round++) {
        sum_ctx ctx = {hits, 0};
        tsr_pool_parallel_for(pool, N, 100, mark_range, &ctx);
        ASSERT_TRUE(atomic_load(&ctx.calls) > 1);
    }
    for (int i = 0; i < N; i++)
        if (hits[i] != 50)
            TSR_FAIL("item %d processed %d times, want 50", i, hits[i]);
    free(hits);
    tsr_pool_destroy(pool);
    return 0;
}

static int test_pool_inline(void)
{
    int hits[10] = {0};
    sum_ctx ctx = {hits, 0};
    tsr_pool_parallel_for(NULL, 10, 1, mark_range, &ctx);
    ASSERT_EQ(atomic_load(&ctx.calls), 1);
    for (int i = 0; i < 10; i++)
        ASSERT_EQ(hits[i], 1);
    tsr_pool *pool;
    ASSERT_EQ(tsr_pool_create(100000, &pool), TSR_ERR_INVALID);
    return 0;
}

static int test_error_detail(void)
{
    tsr_error_clear();
    ASSERT_STR_EQ(tsr_last_error(), "");
    ASSERT_EQ(tsr_errorf(TSR_ERR_FORMAT, "tensor '%s' is bad", "x"), TSR_ERR_FORMAT);
    ASSERT_EQ(tsr_error_prefix(TSR_ERR_FORMAT, "%s", "a.safetensors"), TSR_ERR_FORMAT);
    ASSERT_STR_EQ(tsr_last_error(), "a.safetensors: tensor 'x' is bad");
    ASSERT_STR_EQ(tsr_strerror(TSR_ERR_UNSAFE), "refused as unsafe");
    ASSERT_STR_EQ(tsr_strerror(12345), "unknown error");
    return 0;
}

static int test_backend_open_cpu(void)
{
    tsr_backend *b;
    ASSERT_OK(tsr_backend_open("cpu", 2, &b));
    ASSERT_EQ(b->kind, TSR_BACKEND_CPU);
    ASSERT_TRUE(b->host_visible);
    ASSERT_TRUE(tsr_backend_missing_op(b) == NULL);
    float *p = tsr_backend_alloc(b, 1000);
    ASSERT_TRUE(p && (uintptr_t)p % 64 == 0);
    float src[4] = {1, 2, 3, 4}, dst[4] = {0};
    ASSERT_OK(tsr_backend_upload(b, p, src, sizeof src));
    ASSERT_OK(tsr_backend_download(b, dst, p, sizeof dst));
    ASSERT_OK(tsr_backend_sync(b));
    ASSERT_NEAR(dst[3], 4, 0);
    tsr_backend_free(b, p);
    tsr_backend_destroy(b);
    return 0;
}

static int test_backend_open_bad_spec(void)
{
    static const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0", "cpu:1", "cuda:999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tsr_backend *b = NULL;
        int rc = tsr_backend_open(bad[i], 1, &b);
        if (rc == TSR_OK)
            TSR_FAIL("device spec '%s' was accepted", bad[i]);
        ASSERT_TRUE(b == NULL);
        ASSERT_TRUE(tsr_last_error()[0] != '\0');
    }
    return 0;
}

static int test_backend_auto_falls_back(void)
{
    /* CI has no GPU: auto must give a working backend either way */
    tsr_backend *b;
    ASSERT_OK(tsr_backend_open("auto", 1, &b));
    ASSERT_TRUE(b->kind == TSR_BACKEND_CPU || b->kind == TSR_BACKEND_CUDA);
    /* whatever auto picks can run every op the models need */
    ASSERT_TRUE(tsr_backend_missing_op(b) == NULL);
    tsr_backend_destroy(b);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"dtype_f16", test_dtype_f16},
    {"dtype_bf16", test_dtype_bf16},
    {"arena_alignment", test_arena_alignment},
    {"arena_measure", test_arena_measure},
    {"arena_exhausted", test_arena_exhausted},
    {"pool_parallel_for", test_pool_parallel_for},
    {"pool_inline", test_pool_inline},
    {"error_detail", test_error_detail},
    {"backend_open_cpu", test_backend_open_cpu},
    {"backend_open_bad_spec", test_backend_open_bad_spec},
    {"backend_auto_falls_back", test_backend_auto_falls_back},
};

TSR_TEST_TABLE_MAIN(tests)
