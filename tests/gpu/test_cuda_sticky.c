/*
 * tests/gpu/test_cuda_sticky.c - the CUDA backend's per-device record of
 * sticky errors (backend/cuda/cuda_sticky.c), on the host: plain C, every
 * build (label unit), no GPU.
 *
 * What matters for a server with several GPUs (docs/multi-gpu.md part 3):
 * a sticky error on one device makes that device, and no other, unusable;
 * the first error of a device is the one reported; an error whose device
 * is unknown takes out every device rather than none; and markers racing on
 * several threads (two workers faulting at once) leave each device one
 * whole message, never a torn one (run under ThreadSanitizer too).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_sticky.h"
#include "test.h"

static int test_per_device(void)
{
    tsr_cu_sticky_reset_for_test();
    for (int d = 0; d < 4; d++)
        ASSERT_TRUE(tsr_cu_sticky_error(d) == NULL);
    tsr_cu_sticky_mark(1, "an illegal memory access was encountered");
    ASSERT_TRUE(tsr_cu_sticky_error(0) == NULL);
    ASSERT_STR_EQ(tsr_cu_sticky_error(1), "an illegal memory access was encountered");
    ASSERT_TRUE(tsr_cu_sticky_error(2) == NULL);
    /* the first error of a device wins */
    tsr_cu_sticky_mark(1, "unspecified launch failure");
    ASSERT_STR_EQ(tsr_cu_sticky_error(1), "an illegal memory access was encountered");
    tsr_cu_sticky_mark(0, "unspecified launch failure");
    ASSERT_STR_EQ(tsr_cu_sticky_error(0), "unspecified launch failure");
    ASSERT_TRUE(tsr_cu_sticky_error(3) == NULL);
    ASSERT_TRUE(tsr_cu_sticky_error(-1) == NULL);
    /* no text still marks */
    tsr_cu_sticky_mark(2, NULL);
    ASSERT_STR_EQ(tsr_cu_sticky_error(2), "unknown CUDA error");
    /* devices past the table share its last record */
    tsr_cu_sticky_mark(TSR_CU_STICKY_DEVICES + 5, "device assert triggered");
    ASSERT_STR_EQ(tsr_cu_sticky_error(TSR_CU_STICKY_DEVICES - 1), "device assert triggered");
    ASSERT_TRUE(tsr_cu_sticky_error(TSR_CU_STICKY_DEVICES - 2) == NULL);
    /* an unknown device: every device, each keeping an earlier record */
    tsr_cu_sticky_mark(-1, "misaligned address");
    ASSERT_STR_EQ(tsr_cu_sticky_error(1), "an illegal memory access was encountered");
    ASSERT_STR_EQ(tsr_cu_sticky_error(3), "misaligned address");
    ASSERT_STR_EQ(tsr_cu_sticky_error(40), "misaligned address");
    tsr_cu_sticky_reset_for_test();
    ASSERT_TRUE(tsr_cu_sticky_error(1) == NULL);
    return 0;
}

#define THREADS 8
#define DEVICES 4

typedef struct race_arg {
    int id;
    int bad;
} race_arg;

static void text_of(int id, int device, char *buf, size_t size)
{
    snprintf(buf, size, "thread %d's error on device %d, padded to be long enough to tear", id,
             device);
}

static void *racer(void *p)
{
    race_arg *a = p;
    for (int round = 0; round < 2000; round++) {
        const int device = (a->id + round) % DEVICES;
        if (round % 3 == 0) {
            char text[128];
            text_of(a->id, device, text, sizeof text);
            tsr_cu_sticky_mark(device, text);
        }
        const char *seen = tsr_cu_sticky_error(device);
        if (seen && strcmp(seen, "a CUDA error (being recorded)") != 0) {
            int id = -1, dev = -1;
            char want[128];
            if (sscanf(seen, "thread %d's error on device %d", &id, &dev) != 2 || dev != device) {
                a->bad++;
                continue;
            }
            text_of(id, dev, want, sizeof want);
            a->bad += strcmp(seen, want) != 0;
        }
    }
    return NULL;
}

static int test_threads(void)
{
    tsr_cu_sticky_reset_for_test();
    pthread_t t[THREADS];
    race_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (race_arg){i, 0};
        ASSERT_EQ(pthread_create(&t[i], NULL, racer, &args[i]), 0);
    }
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        bad += args[i].bad;
    }
    ASSERT_EQ(bad, 0);
    for (int d = 0; d < DEVICES; d++) {
        const char *e = tsr_cu_sticky_error(d);
        ASSERT_TRUE(e != NULL);
        printf("device %d: %s\n", d, e);
    }
    ASSERT_TRUE(tsr_cu_sticky_error(DEVICES) == NULL);
    tsr_cu_sticky_reset_for_test();
    return 0;
}

static const tsr_test_entry k_tests[] = {
    {"per_device", test_per_device},
    {"threads", test_threads},
};
TSR_TEST_TABLE_MAIN(k_tests)
