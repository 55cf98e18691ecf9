/*
 * tests/comm/test_comm_gpu.c - the nccl comm on one real GPU (label gpu).
 *
 * Why one rank: the machines we can borrow have one GPU at most, and NCCL
 * refuses two ranks on one device.  One rank still runs every path that
 * matters here on the hardware: the loader (libnccl.so.2 from the toolkit or
 * the nvidia-nccl wheel, libcuda.so.1), ncclCommInitAll, each collective's
 * enqueue on the comm's stream, the polling wait, barrier's device scratch,
 * abort, and the refusals (two ranks on one device, more ranks than
 * devices).  The buffers are the CUDA backend's own device memory, as the
 * server's will be.  Without a GPU (the CUDA backend cannot be opened) it
 * exits 77, which ctest reports as skipped; with a GPU but no NCCL it
 * fails, printing the loader's reason, since run.sh expects NCCL there.
 * Bounded: a few MiB, well under a second of GPU time.
 */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/comm/comm.h"
#include "core/error.h"
#include "test.h"

#define N (1 << 20) /* elements: 4 MiB of f32 */

static int check_f32(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            TSR_FAIL("%s: element %zu is %g, want %g", what, i, (double)got[i], (double)want[i]);
    return 0;
}

static int test_nccl_one_rank(void)
{
    tsr_backend *be = NULL;
    if (tsr_backend_open("cuda:0", 0, &be) != TSR_OK) {
        printf("skip: no CUDA device for the nccl check: %s\n", tsr_last_error());
        return TSR_TEST_SKIP;
    }
    int rc = 1;
    tsr_comm_group *g = NULL;
    float *host = NULL, *back = NULL, *zero = NULL;
    void *d_send = NULL, *d_recv = NULL;
    tsr_comm_options o;
    tsr_comm_options_init(&o);
    o.kind = TSR_COMM_NCCL;
    o.size = 1;
    o.timeout_s = 20;
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    if (tsr_comm_group_create(&o, &g) != TSR_OK) {
        fprintf(stderr, "a GPU is here (%s) but the nccl comm is not: %s\n", be->name,
                tsr_last_error());
        goto out;
    }
    tsr_comm *c = tsr_comm_group_rank(g, 0);
    printf("nccl comm: rank %d of %d on CUDA device %d (%s)\n", tsr_comm_rank(c), tsr_comm_size(c),
           tsr_comm_device(c), be->name);
    host = malloc(N * sizeof(float));
    back = malloc(N * sizeof(float));
    zero = calloc(N, sizeof(float));
    d_send = tsr_backend_alloc(be, N * sizeof(float));
    d_recv = tsr_backend_alloc(be, N * sizeof(float));
    if (!host || !back || !zero || !d_send || !d_recv) {
        fprintf(stderr, "out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < N; i++)
        host[i] = (float)i * 0.25f - 1000.0f;
    if (tsr_backend_upload(be, d_send, host, N * sizeof(float)) != TSR_OK ||
        tsr_backend_sync(be) != TSR_OK) {
        fprintf(stderr, "upload: %s\n", tsr_last_error());
        goto out;
    }
#define STEP(expr)                                                                                 \
    do {                                                                                           \
        if ((expr) != TSR_OK) {                                                                    \
            fprintf(stderr, "%s: %s\n", #expr, tsr_last_error());                                  \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)
/* d_recv zeroed, and the backend's stream idle before NCCL's runs */
#define CLEAR_RECV()                                                                               \
    do {                                                                                           \
        STEP(tsr_backend_upload(be, d_recv, zero, N * sizeof(float)));                             \
        STEP(tsr_backend_sync(be));                                                                \
    } while (0)
#define EXPECT_RECV(what, want)                                                                    \
    do {                                                                                           \
        STEP(tsr_backend_download(be, back, d_recv, N * sizeof(float)));                           \
        STEP(tsr_backend_sync(be));                                                                \
        if (check_f32(what, back, want, N))                                                        \
            goto out;                                                                              \
        printf("ok %s\n", what);                                                                   \
    } while (0)

    /* broadcast (root 0, in place): the buffer is unchanged */
    STEP(tsr_backend_upload(be, d_recv, host, N * sizeof(float)));
    STEP(tsr_backend_sync(be));
    STEP(tsr_comm_broadcast(c, d_recv, N, TSR_COMM_F32, 0));
    EXPECT_RECV("broadcast f32", host);
    /* all_gather of one rank: a copy, in each dtype (f16 as raw bits);
     * the async form on the comm's own stream, then waited for */
    CLEAR_RECV();
    STEP(tsr_comm_all_gather(c, d_send, d_recv, N, TSR_COMM_F32));
    EXPECT_RECV("all_gather f32", host);
    CLEAR_RECV();
    STEP(tsr_comm_all_gather_async(c, d_send, d_recv, 2 * (size_t)N, TSR_COMM_F16, NULL));
    STEP(tsr_comm_wait(c, NULL));
    EXPECT_RECV("all_gather_async f16 (raw bits) + wait", host);
    CLEAR_RECV();
    STEP(tsr_comm_all_gather(c, d_send, d_recv, 4 * (size_t)N, TSR_COMM_BYTES));
    EXPECT_RECV("all_gather bytes", host);
    CLEAR_RECV();
    STEP(tsr_comm_all_reduce(c, d_send, d_recv, N, TSR_COMM_F32));
    EXPECT_RECV("all_reduce f32 (one rank: the identity)", host);
    CLEAR_RECV();
    STEP(tsr_comm_broadcast_async(c, d_send, N, TSR_COMM_F32, 0, NULL));
    STEP(tsr_comm_all_reduce_async(c, d_send, d_recv, N, TSR_COMM_F32, NULL));
    STEP(tsr_comm_wait(c, NULL));
    EXPECT_RECV("broadcast_async + all_reduce_async + wait", host);
    STEP(tsr_comm_barrier(c));
    printf("ok barrier\n");
    /* out of place (tsr_comm_broadcast_from): a device copy through NCCL,
     * what a one-rank weight broadcast (a replica on this GPU) runs */
    CLEAR_RECV();
    STEP(tsr_comm_broadcast_from(c, d_send, d_recv, 4 * (size_t)N, TSR_COMM_BYTES, 0));
    EXPECT_RECV("broadcast_from bytes", host);

    /* what NCCL cannot do on one GPU is refused with a reason */
    {
        tsr_comm_group *g2 = NULL;
        int devs[2] = {0, 0};
        tsr_comm_options o2 = o;
        o2.size = 2;
        o2.devices = devs;
        if (tsr_comm_group_create(&o2, &g2) != TSR_ERR_INVALID ||
            !strstr(tsr_last_error(), "both on CUDA device 0")) {
            fprintf(stderr, "two ranks on device 0: %s\n", tsr_last_error());
            tsr_comm_group_destroy(g2);
            goto out;
        }
        printf("ok refused: %s\n", tsr_last_error());
    }
    /* abort: later ops fail at once, naming op, rank and reason */
    tsr_comm_abort(c, "simulated device failure");
    if (tsr_comm_broadcast(c, d_recv, N, TSR_COMM_F32, 0) != TSR_ERR_BACKEND ||
        !strstr(tsr_last_error(), "broadcast (rank 0 of 1): the group is broken: rank 0 left "
                                  "the group: simulated device failure")) {
        fprintf(stderr, "after abort: %s\n", tsr_last_error());
        goto out;
    }
    printf("ok abort: %s\n", tsr_last_error());
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    printf("nccl one-rank check: %.2f s\n",
           (double)(ts1.tv_sec - ts0.tv_sec) + 1e-9 * (double)(ts1.tv_nsec - ts0.tv_nsec));
    rc = 0;
out:
    tsr_comm_group_destroy(g);
    tsr_backend_free(be, d_send);
    tsr_backend_free(be, d_recv);
    free(host);
    free(back);
    free(zero);
    tsr_backend_destroy(be);
    return rc;
}

static const tsr_test_entry tests[] = {{"nccl_one_rank", test_nccl_one_rank}};

TSR_TEST_TABLE_MAIN(tests)
