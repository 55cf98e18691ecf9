/*
 * tests/gpu/test_cuda.c - the CUDA backend on a real GPU: device memory
 * round trips through the backend interface (asynchronous copies on the
 * backend's stream, then sync), events and pinned host memory, the dtypes
 * it asks for, and what "auto" chooses.  Exits 77 (skipped) when the
 * machine has no GPU.  The op cases run through the shared harness:
 * TSR_TEST_DEVICE=cuda ctest -R ops_ (tests/gpu/run.sh).
 */
#include <stdlib.h>

#include "backend/backend.h"
#include "test.h"

#define SKIP 77

static int test_memory_roundtrip(void)
{
    if (tsr_backend_cuda_device_count() == 0)
        return SKIP;
    tsr_backend *b;
    ASSERT_OK(tsr_backend_open("cuda:0", 0, &b));
    ASSERT_EQ(b->kind, TSR_BACKEND_CUDA);
    ASSERT_TRUE(!b->host_visible);
    enum { N = 1 << 20 };
    float *host = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
    ASSERT_TRUE(host && back);
    for (int i = 0; i < N; i++)
        host[i] = (float)i * 0.5f;
    void *dev = tsr_backend_alloc(b, N * sizeof(float));
    ASSERT_TRUE(dev != NULL);
    ASSERT_OK(tsr_backend_upload(b, dev, host, N * sizeof(float)));
    ASSERT_OK(tsr_backend_download(b, back, dev, N * sizeof(float)));
    ASSERT_OK(tsr_backend_sync(b));
    for (int i = 0; i < N; i++)
        if (back[i] != host[i])
            TSR_FAIL("element %d came back as %g, not %g", i, back[i], host[i]);
    tsr_backend_free(b, dev);
    free(host);
    free(back);
    tsr_backend_destroy(b);
    return 0;
}

/* Pinned host memory through events: upload, record, a second backend on
 * the same device waits on the event (device side) and downloads. */
static int test_events_pinned(void)
{
    if (tsr_backend_cuda_device_count() == 0)
        return SKIP;
    tsr_backend *a, *b;
    ASSERT_OK(tsr_backend_open("cuda:0", 0, &a));
    ASSERT_OK(tsr_backend_open("cuda:0", 0, &b));
    ASSERT_EQ(tsr_backend_act_dtype(a), TSR_F16);
    ASSERT_EQ(tsr_backend_weight_dtype(a), TSR_F16);
    ASSERT_TRUE(tsr_backend_has_cap(a, TSR_BACKEND_CAP_ROUND_ROWS));
    enum { N = 1 << 22 };
    float *host = tsr_backend_host_alloc_pinned(a, N * sizeof(float));
    float *back = tsr_backend_host_alloc_pinned(b, N * sizeof(float));
    ASSERT_TRUE(host && back);
    for (int i = 0; i < N; i++)
        host[i] = (float)i;
    void *dev = tsr_backend_alloc(a, N * sizeof(float));
    ASSERT_TRUE(dev != NULL);
    tsr_event *e;
    ASSERT_OK(tsr_event_create(a, &e));
    ASSERT_OK(tsr_backend_upload(a, dev, host, N * sizeof(float)));
    ASSERT_OK(tsr_event_record(e));
    ASSERT_OK(tsr_event_wait(b, e)); /* b's stream waits for a's upload */
    ASSERT_OK(tsr_backend_download(b, back, dev, N * sizeof(float)));
    ASSERT_OK(tsr_backend_sync(b));
    ASSERT_OK(tsr_event_sync(e));
    for (int i = 0; i < N; i++)
        if (back[i] != host[i])
            TSR_FAIL("element %d came back as %g", i, back[i]);
    tsr_event_destroy(e);
    tsr_backend_free(a, dev);
    tsr_backend_host_free_pinned(a, host);
    tsr_backend_host_free_pinned(b, back);
    tsr_backend_destroy(b);
    tsr_backend_destroy(a);
    return 0;
}

static int test_auto_choice(void)
{
    if (tsr_backend_cuda_device_count() == 0)
        return SKIP;
    tsr_backend *b;
    ASSERT_OK(tsr_backend_open("auto", 0, &b));
    /* auto takes the GPU only once its backend runs every op */
    tsr_backend *cuda;
    ASSERT_OK(tsr_backend_open("cuda", 0, &cuda));
    const bool complete = tsr_backend_missing_op(cuda) == NULL;
    ASSERT_EQ(b->kind, complete ? TSR_BACKEND_CUDA : TSR_BACKEND_CPU);
    tsr_backend_destroy(cuda);
    tsr_backend_destroy(b);
    return 0;
}

int main(int argc, char **argv)
{
    static const tsr_test_entry tests[] = {
        {"memory_roundtrip", test_memory_roundtrip},
        {"events_pinned", test_events_pinned},
        {"auto_choice", test_auto_choice},
    };
    /* one case per process (ctest): pass a skip through as 77 */
    for (size_t i = 0; argc == 2 && i < sizeof tests / sizeof tests[0]; i++)
        if (strcmp(argv[1], tests[i].name) == 0) {
            int rc = tests[i].fn();
            printf("%s %s\n", rc == SKIP ? "skip" : rc ? "FAIL" : "ok  ", tests[i].name);
            return rc;
        }
    return tsr_test_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
