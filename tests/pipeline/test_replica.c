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
 *
 * Replicas by broadcast (tsr_replica_group, the path GPUs take) run here on
 * CPU devices with the host comm, so CI checks the rebased tensor tables
 * and the collective sequence: (5) two replicas of a three-rank group give
 * the source's images byte for byte, and keep working with the source
 * closed (their own copy: ASan would see a borrowed one freed); a group of
 * one (rank 0 a replica on the source's device, its broadcast a copy) does
 * too; (6) a failed broadcast fails the open cleanly with the comm's error,
 * naming op and rank: the source leaves, the source never comes (timeout),
 * a replica gives up (the source's send fails); (7) the group's refusals.
 * (8) gpu_one_rank (label gpu, tests/gpu/run.sh's "replica" stage): the
 * same on a GPU, where tsr_engine_open_replica broadcasts through NCCL.
 */
#include <math.h>
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

/* ------------------------------------------------------- by broadcast */

typedef struct rank_arg {
    tsr_replica_group *g;
    int rank;
    tsr_engine *src;
    const tsr_engine_options *o;
    tsr_engine *out; /* the replica (rank > 0) */
    int rc;
    char error[512];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    if (a->rank == 0 && tsr_replica_group_size(a->g) > 1)
        a->rc = tsr_replica_group_send(a->g, a->src);
    else
        a->rc = tsr_engine_open_replica_bcast(a->g, a->rank, a->src, a->o, &a->out);
    snprintf(a->error, sizeof a->error, "%s", a->rc < 0 ? tsr_last_error() : "");
    return NULL;
}

/* Every rank of g on a thread of its own; TSR_OK when all succeeded. */
static int run_group(tsr_replica_group *g, tsr_engine *src, const tsr_engine_options *o,
                     rank_arg *args)
{
    const int n = tsr_replica_group_size(g);
    pthread_t t[8];
    for (int r = 0; r < n; r++) {
        args[r] = (rank_arg){g, r, src, o, NULL, 0, ""};
        if (pthread_create(&t[r], NULL, rank_main, &args[r]) != 0)
            return -1;
    }
    int rc = TSR_OK;
    for (int r = 0; r < n; r++) {
        pthread_join(t[r], NULL);
        if (args[r].rc < 0) {
            fprintf(stderr, "rank %d: %s\n", r, args[r].error);
            rc = args[r].rc;
        }
    }
    return rc;
}

static int same_results(run_arg *a, run_arg *b)
{
    ASSERT_OK(a->rc);
    ASSERT_OK(b->rc);
    for (int i = 0; i < N; i++) {
        ASSERT_EQ(a->out[i].status, TSR_OK);
        ASSERT_EQ(b->out[i].status, TSR_OK);
        ASSERT_TRUE(memcmp(a->out[i].rgb, b->out[i].rgb, (size_t)SIDE * SIDE * 3) == 0);
        ASSERT_TRUE(strcmp(a->out[i].parameters, b->out[i].parameters) == 0);
    }
    return 0;
}

static void free_results(run_arg *a)
{
    for (int i = 0; i < N; i++)
        tsr_result_free(&a->out[i]);
}

static int test_broadcast_images(void)
{
    char path[512];
    tsr_engine_options o;
    demo_options(&o, path, sizeof path);
    tsr_engine *src = NULL;
    ASSERT_OK(tsr_engine_open(&o, &src));
    const char *devs[3] = {"cpu", "cpu", "cpu"};
    tsr_replica_group *g = NULL;
    ASSERT_OK(tsr_replica_group_create(devs, 3, 0, &g));
    ASSERT_STR_EQ(tsr_replica_group_kind(g), "host");
    rank_arg ranks[3];
    ASSERT_OK(run_group(g, src, &o, ranks));
    tsr_replica_group_destroy(g);
    tsr_engine *r1 = ranks[1].out, *r2 = ranks[2].out;
    ASSERT_TRUE(r1 && r2 && !ranks[0].out);
    /* the source and a replica at once on two threads, then the other */
    static run_arg a, b, c;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    a.e = src;
    b.e = r1;
    c.e = r2;
    pthread_t ta, tb;
    ASSERT_EQ(pthread_create(&ta, NULL, run_images, &a), 0);
    ASSERT_EQ(pthread_create(&tb, NULL, run_images, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ASSERT_EQ(same_results(&a, &b), 0);
    free_results(&b);
    /* the source closed first: the replicas own their weights */
    tsr_engine_close(src);
    run_images(&c);
    ASSERT_EQ(same_results(&a, &c), 0);
    free_results(&c);
    tsr_engine_close(r2);
    memset(&b, 0, sizeof b);
    b.e = r1;
    run_images(&b);
    ASSERT_EQ(same_results(&a, &b), 0);
    free_results(&b);
    tsr_engine_close(r1);

    /* a group of one: rank 0 is a replica on the source's device, closed
     * before its source this time */
    ASSERT_OK(tsr_engine_open(&o, &src));
    const char *one[1] = {"cpu"};
    ASSERT_OK(tsr_replica_group_create(one, 1, 0, &g));
    ASSERT_STR_EQ(tsr_replica_group_kind(g), "self");
    ASSERT_OK(run_group(g, src, &o, ranks));
    tsr_replica_group_destroy(g);
    ASSERT_TRUE(ranks[0].out != NULL);
    memset(&b, 0, sizeof b);
    b.e = ranks[0].out;
    run_images(&b);
    tsr_engine_close(ranks[0].out);
    ASSERT_EQ(same_results(&a, &b), 0);
    free_results(&b);
    memset(&c, 0, sizeof c);
    c.e = src;
    run_images(&c);
    ASSERT_EQ(same_results(&a, &c), 0);
    free_results(&c);
    free_results(&a);
    tsr_engine_close(src);
    return 0;
}

static int test_broadcast_fails(void)
{
    char path[512];
    tsr_engine_options o;
    demo_options(&o, path, sizeof path);
    tsr_engine *src = NULL, *rep = (tsr_engine *)&o;
    ASSERT_OK(tsr_engine_open(&o, &src));
    const char *devs[2] = {"cpu", "cpu"};
    tsr_replica_group *g = NULL;

    /* the source leaves (its load failed): the replica's open fails at once */
    ASSERT_OK(tsr_replica_group_create(devs, 2, 0, &g));
    tsr_replica_group_abort(g, 0, "the source could not load");
    ASSERT_EQ(tsr_engine_open_replica_bcast(g, 1, src, &o, &rep), TSR_ERR_BACKEND);
    ASSERT_TRUE(rep == NULL);
    printf("source left: %s\n", tsr_last_error());
    ASSERT_TRUE(strstr(tsr_last_error(), "broadcast (rank 1 of 2)") != NULL);
    ASSERT_TRUE(strstr(tsr_last_error(), "rank 0 left the group: the source could not load"));
    tsr_replica_group_destroy(g);

    /* the source never comes: the replica's open fails within the timeout */
    ASSERT_OK(tsr_replica_group_create(devs, 2, 0.3, &g));
    ASSERT_EQ(tsr_engine_open_replica_bcast(g, 1, src, &o, &rep), TSR_ERR_BACKEND);
    ASSERT_TRUE(rep == NULL);
    printf("source absent: %s\n", tsr_last_error());
    ASSERT_STR_EQ(tsr_last_error(),
                  "broadcast (rank 1 of 2): peer rank 0 did not arrive within 0.3 s");
    tsr_replica_group_destroy(g);

    /* a replica gives up before the broadcast (bf16 weights cannot take the
     * source's f32 layout, or this CPU has no bf16): the source's send
     * fails, naming it, and the source is unharmed */
    ASSERT_OK(tsr_replica_group_create(devs, 2, 0, &g));
    tsr_engine_options bad = o;
    bad.precision = "bf16";
    rank_arg ranks[2];
    pthread_t t0;
    ranks[0] = (rank_arg){g, 0, src, &o, NULL, 0, ""};
    ASSERT_EQ(pthread_create(&t0, NULL, rank_main, &ranks[0]), 0);
    ASSERT_TRUE(tsr_engine_open_replica_bcast(g, 1, src, &bad, &rep) < 0);
    ASSERT_TRUE(rep == NULL);
    pthread_join(t0, NULL);
    printf("replica gave up: %s\n", ranks[0].error);
    ASSERT_EQ(ranks[0].rc, TSR_ERR_BACKEND);
    ASSERT_TRUE(strstr(ranks[0].error, "broadcast (rank 0 of 2)") != NULL);
    ASSERT_TRUE(strstr(ranks[0].error, "rank 1 left the group") != NULL);
    tsr_replica_group_destroy(g);
    static run_arg a;
    memset(&a, 0, sizeof a);
    a.e = src;
    run_images(&a);
    ASSERT_OK(a.rc);
    free_results(&a);
    tsr_engine_close(src);
    return 0;
}

static int test_broadcast_refusals(void)
{
    char path[512];
    tsr_engine_options o;
    demo_options(&o, path, sizeof path);
    tsr_replica_group *g = (tsr_replica_group *)&o;
    const char *mixed[2] = {"cpu", "cuda:0"};
    ASSERT_EQ(tsr_replica_group_create(mixed, 2, 0, &g), TSR_ERR_UNSUPPORTED);
    ASSERT_TRUE(g == NULL);
    printf("mixed: %s\n", tsr_last_error());
    const char *bad[2] = {"cpu", "tpu:1"};
    ASSERT_EQ(tsr_replica_group_create(bad, 2, 0, &g), TSR_ERR_INVALID);
    ASSERT_STR_EQ(tsr_last_error(),
                  "replica group: device 'tpu:1' of rank 1 is not cpu, cuda or cuda:N");
    ASSERT_EQ(tsr_replica_group_create(mixed, 0, 0, &g), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_replica_group_create(NULL, 2, 0, &g), TSR_ERR_INVALID);
    /* two CUDA ranks: NCCL, which this machine may lack (no GPU, no library) */
    const char *gpus[2] = {"cuda:0", "cuda:1"};
    int rc = tsr_replica_group_create(gpus, 2, 0, &g);
    printf("cuda:0,cuda:1: %s\n", rc == TSR_OK ? "an NCCL group" : tsr_last_error());
    if (rc == TSR_OK)
        tsr_replica_group_destroy(g);
    else
        ASSERT_TRUE(rc == TSR_ERR_UNSUPPORTED || rc == TSR_ERR_INVALID);

    tsr_engine *src = NULL, *rep = (tsr_engine *)&o;
    ASSERT_OK(tsr_engine_open(&o, &src));
    const char *two[2] = {"cpu", "cpu"};
    /* rank 0 of a group of two is the source, not a replica */
    ASSERT_OK(tsr_replica_group_create(two, 2, 0, &g));
    ASSERT_EQ(tsr_engine_open_replica_bcast(g, 0, src, &o, &rep), TSR_ERR_INVALID);
    ASSERT_TRUE(rep == NULL);
    ASSERT_EQ(tsr_engine_open_replica_bcast(g, 2, src, &o, &rep), TSR_ERR_INVALID);
    ASSERT_EQ(tsr_engine_open_replica_bcast(NULL, 1, src, &o, &rep), TSR_ERR_INVALID);
    tsr_replica_group_destroy(g);
    /* a group of one has nobody to send to */
    const char *one[1] = {"cpu"};
    ASSERT_OK(tsr_replica_group_create(one, 1, 0, &g));
    ASSERT_EQ(tsr_replica_group_send(g, src), TSR_ERR_INVALID);
    tsr_replica_group_destroy(g);
    tsr_engine_close(src);
    return 0;
}

/* ------------------------------------------------------- on a GPU (label gpu) */

/* PSNR (dB) of two SIDE x SIDE RGB images; INFINITY when equal. */
static double psnr(const unsigned char *a, const unsigned char *b, int *maxdiff)
{
    double se = 0;
    *maxdiff = 0;
    const size_t n = (size_t)SIDE * SIDE * 3;
    for (size_t i = 0; i < n; i++) {
        const int d = (int)a[i] - (int)b[i];
        se += (double)d * d;
        if (abs(d) > *maxdiff)
            *maxdiff = abs(d);
    }
    return se == 0 ? INFINITY : 10.0 * log10(255.0 * 255.0 / (se / (double)n));
}

/* want: the source's images; the replica's must match within 45 dB (one
 * GPU, the same kernels and weights: byte-identical expected). */
static int close_to(const char *what, run_arg *want, run_arg *got)
{
    ASSERT_OK(got->rc);
    for (int i = 0; i < N; i++) {
        int md = 0;
        ASSERT_EQ(got->out[i].status, TSR_OK);
        const double db = psnr(want->out[i].rgb, got->out[i].rgb, &md);
        printf("%s image %d: psnr %.2f dB, max diff %d%s\n", what, i, db, md,
               md == 0 ? " (byte-identical)" : "");
        ASSERT_TRUE(db >= 45.0);
    }
    return 0;
}

/* tests/gpu/run.sh's "replica" stage: tsr_engine_open_replica on the GPU,
 * which broadcasts (one GPU: rank 0 of a one-rank NCCL group, its
 * broadcast an NCCL device copy from the source's arenas; NCCL refuses two
 * ranks on one GPU); with a second GPU also a two-rank group to cuda:1. */
static int test_gpu_one_rank(void)
{
    char path[512];
    tsr_engine_options o;
    demo_options(&o, path, sizeof path);
    o.device = "cuda:0";
    tsr_engine *src = NULL, *rep = NULL, *rep2 = NULL;
    if (tsr_engine_open(&o, &src) != TSR_OK) {
        printf("skip: no CUDA device: %s\n", tsr_last_error());
        return TSR_TEST_SKIP;
    }
    static run_arg a, b, c;
    memset(&a, 0, sizeof a);
    a.e = src;
    run_images(&a);
    ASSERT_OK(a.rc);
    if (tsr_engine_open_replica(src, &o, &rep) != TSR_OK)
        TSR_FAIL("a replica on %s: %s", tsr_engine_device(src), tsr_last_error());
    memset(&b, 0, sizeof b);
    b.e = rep;
    run_images(&b);
    ASSERT_EQ(close_to("cuda:0 replica (one-rank nccl)", &a, &b), 0);
    /* the source closed first: the replica's weights are its own */
    tsr_engine_close(src);
    memset(&c, 0, sizeof c);
    c.e = rep;
    run_images(&c);
    ASSERT_EQ(close_to("cuda:0 replica, source closed", &b, &c), 0);
    free_results(&c);
    /* a second GPU: the two-rank NCCL group (rank 0 sends on a thread) */
    o.device = "cuda:1";
    tsr_engine *probe = NULL;
    if (tsr_engine_open(&o, &probe) == TSR_OK) {
        tsr_engine_close(probe);
        o.device = "cuda:0";
        ASSERT_OK(tsr_engine_open(&o, &src));
        o.device = "cuda:1";
        if (tsr_engine_open_replica(src, &o, &rep2) != TSR_OK)
            TSR_FAIL("a replica on cuda:1: %s", tsr_last_error());
        memset(&c, 0, sizeof c);
        c.e = rep2;
        run_images(&c);
        ASSERT_EQ(close_to("cuda:1 replica (two-rank nccl)", &a, &c), 0);
        free_results(&c);
        tsr_engine_close(rep2);
        tsr_engine_close(src);
    } else {
        printf("one GPU: the two-rank broadcast needs a second (%s)\n", tsr_last_error());
    }
    free_results(&a);
    free_results(&b);
    tsr_engine_close(rep);
    return 0;
}

static const tsr_test_entry k_tests[] = {
    {"same_images", test_same_images},
    {"no_second_copy", test_no_second_copy},
    {"refusals", test_refusals},
    {"broadcast_images", test_broadcast_images},
    {"broadcast_fails", test_broadcast_fails},
    {"broadcast_refusals", test_broadcast_refusals},
    {"gpu_one_rank", test_gpu_one_rank},
};
TSR_TEST_TABLE_MAIN(k_tests)
