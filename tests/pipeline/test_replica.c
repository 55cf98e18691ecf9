/*
 * tests/pipeline/test_replica.c - tsr_engine_open_replica (issue 57 part
 * 2): a second engine that borrows the first's weights.
 *
 * Why these cases: a replica is only worth having if it is the same engine
 * without the second copy, so the checks are (1) its images equal the
 * source's byte for byte, while both run at once on two threads; (2) it
 * does not hold a second copy of the weights (the process's resident
 * memory grows by far less than one engine's weights when it opens, while
 * a second tsr_engine_open grows it by about their size); (3) either may be
 * closed first (the weights live until the last one goes: run under ASan
 * to see a use after free); (4) the refusals: NULL arguments, a backend
 * that is not host memory with the same weight dtype.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"
#include "test.h"

#define SIDE 64
#define N 4

static void demo_options(tsr_engine_options *o, char *path, size_t size)
{
    const char *src = getenv("TSR_SOURCE_DIR");
    snprintf(path, size, "%s/models/demo", src ? src : ".");
    tsr_engine_options_init(o);
    o->model = path;
    o->device = "cpu";
    o->threads = 1;
}

static void params_of(int k, tsr_image_params *p)
{
    tsr_image_params_init(p);
    p->prompt = k % 2 ? "a red circle" : "two green stars on black";
    p->width = p->height = SIDE;
    p->steps = 2;
    p->seed = 900 + (uint64_t)k;
}

typedef struct run_arg {
    tsr_engine *e;
    tsr_result out[N];
    int rc;
} run_arg;

static void *run_images(void *arg)
{
    run_arg *a = arg;
    tsr_batch *b = NULL;
    int ids[N];
    a->rc = tsr_batch_create(a->e, NULL, &b);
    for (int i = 0; a->rc == TSR_OK && i < N; i++) {
        tsr_image_params p;
        params_of(i, &p);
        a->rc = tsr_batch_submit(b, &p, &ids[i]);
    }
    while (a->rc == TSR_OK && tsr_batch_active(b) > 0)
        a->rc = tsr_batch_step(b, NULL);
    for (int i = 0; a->rc == TSR_OK && i < N; i++)
        a->rc = tsr_batch_take(b, ids[i], &a->out[i]);
    tsr_batch_free(b);
    return NULL;
}

/* Resident kB of this process (/proc/self/statm), 0 where unknown. */
static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = 0;
    fclose(f);
    return res * 4;
}

static int test_same_images(void)
{
    char path[512];
    tsr_engine_options o;
    demo_options(&o, path, sizeof path);
    tsr_engine *src = NULL, *rep = NULL;
    ASSERT_OK(tsr_engine_open(&o, &src));
    ASSERT_OK(tsr_engine_open_replica(src, &o, &rep));
    static run_arg a, b;
    a.e = src;
    b.e = rep;
    pthread_t ta, tb;
    ASSERT_EQ(pthread_create(&ta, NULL, run_images, &a), 0);
    ASSERT_EQ(pthread_create(&tb, NULL, run_images, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ASSERT_OK(a.rc);
    ASSERT_OK(b.rc);
    for (int i = 0; i < N; i++) {
        ASSERT_EQ(a.out[i].status, TSR_OK);
        ASSERT_EQ(b.out[i].status, TSR_OK);
        ASSERT_TRUE(memcmp(a.out[i].rgb, b.out[i].rgb, (size_t)SIDE * SIDE * 3) == 0);
        ASSERT_TRUE(strcmp(a.out[i].parameters, b.out[i].parameters) == 0);
        tsr_result_free(&a.out[i]);
        tsr_result_free(&b.out[i]);
    }
    /* the source first: the replica's weights stay */
    tsr_engine_close(src);
    memset(&b, 0, sizeof b);
    b.e = rep;
    run_images(&b);
    ASSERT_OK(b.rc);
    for (int i = 0; i < N; i++)
        tsr_result_free(&b.out[i]);
    tsr_engine_close(rep);
    return 0;
}

static int test_no_second_copy(void)
{
    char path[512];
    tsr_engine_options o;
    demo_options(&o, path, sizeof path);
    tsr_engine *src = NULL, *rep = NULL, *full = NULL;
    ASSERT_OK(tsr_engine_open(&o, &src));
    const long r0 = rss_kb();
    ASSERT_OK(tsr_engine_open_replica(src, &o, &rep));
    const long r1 = rss_kb();
    ASSERT_OK(tsr_engine_open(&o, &full));
    const long r2 = rss_kb();
    printf("resident memory: replica +%ld kB, second full open +%ld kB\n", r1 - r0, r2 - r1);
    if (r0 > 0) {
        ASSERT_TRUE(r2 - r1 > 1024);           /* a full open holds its weights */
        ASSERT_TRUE(r1 - r0 < (r2 - r1) / 2);  /* a replica does not */
    }
    /* the replica last */
    tsr_engine_close(full);
    tsr_engine_close(src);
    tsr_engine_close(rep);
    return 0;
}

static int test_refusals(void)
{
    char path[512];
    tsr_engine_options o;
    demo_options(&o, path, sizeof path);
    tsr_engine *src = NULL, *rep = (tsr_engine *)&o;
    ASSERT_EQ(tsr_engine_open_replica(NULL, &o, &rep), TSR_ERR_INVALID);
    ASSERT_TRUE(rep == NULL);
    ASSERT_OK(tsr_engine_open(&o, &src));
    ASSERT_EQ(tsr_engine_open_replica(src, NULL, &rep), TSR_ERR_INVALID);
    /* bf16 stores the weights in another dtype: it cannot borrow f32 ones */
    o.precision = "bf16";
    int rc = tsr_engine_open_replica(src, &o, &rep);
    if (rc != TSR_ERR_UNSUPPORTED) /* a CPU without bf16 refuses the backend itself */
        ASSERT_TRUE(rc < 0);
    ASSERT_TRUE(rep == NULL);
    printf("bf16 replica of an f32 engine: %s\n", tsr_last_error());
    tsr_engine_close(src);
    return 0;
}

static const tsr_test_entry k_tests[] = {
    {"same_images", test_same_images},
    {"no_second_copy", test_no_second_copy},
    {"refusals", test_refusals},
};
TSR_TEST_TABLE_MAIN(k_tests)
