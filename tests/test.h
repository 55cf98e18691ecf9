/*
 * tests/test.h - a minimal test harness.
 *
 * Typed assertions print both values, file and line (as libuv's ASSERT_EQ
 * does) and fail the current test by returning 1 from it.  A test binary
 * holds a table of named cases; `prog NAME` runs one (one ctest entry per
 * case), `prog` with no argument runs them all.
 */
#ifndef TSR_TEST_H
#define TSR_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* A case that cannot run here (no GPU, say) returns TSR_TEST_SKIP after
 * printing why; when every case run was skipped the program exits with it,
 * which ctest reports as skipped (SKIP_RETURN_CODE 77). */
#define TSR_TEST_SKIP 77

typedef int (*tsr_test_fn)(void);
typedef struct tsr_test_entry {
    const char *name;
    tsr_test_fn fn;
} tsr_test_entry;

/* Run the cases of `table` selected by argv (all when argc < 2). */
int tsr_test_main(int argc, char **argv, const tsr_test_entry *table, size_t n);

/* $TSR_TEST_DATA/<rel> (or tests/data/<rel> relative to the cwd). */
const char *tsr_test_path(const char *rel, char *buf, size_t size);

/* Read a whole file; returns malloc'd bytes (caller frees) or NULL. */
void *tsr_test_read_file(const char *path, size_t *size);

/* How a child process ended (tsr_test_spawn). */
typedef struct tsr_test_child {
    bool exited;     /* exited by itself (not signalled, not timed out) */
    bool timed_out;  /* killed after the timeout */
    int status;      /* exit status when exited, else the signal */
    double seconds;  /* wall time */
    long max_rss_kib; /* peak resident memory (getrusage ru_maxrss), 0 if unknown */
} tsr_test_child;

/* Runs argv (argv[0] = the program's path) in its own process group with
 * stdin from /dev/null, stdout to out_path and stderr to err_path (NULL: the
 * same file as stdout), and kills it after timeout seconds.  0 when it ran
 * (see *r), -1 when it could not be started or waited for. */
int tsr_test_spawn(char **argv, const char *out_path, const char *err_path, double timeout,
                   tsr_test_child *r);

/* Compare arrays: fails on any NaN/Inf in `got` or on max relative error
 * (|a-b| / max(|b|_inf, tiny)) above `tol`; prints the worst element. */
int tsr_test_check_close(const char *what, const float *got, const float *want, size_t n,
                         double tol);

#define TSR_FAIL(...)                                                  \
    do {                                                               \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                \
        fprintf(stderr, __VA_ARGS__);                                  \
        fprintf(stderr, "\n");                                         \
        return 1;                                                      \
    } while (0)

#define ASSERT_TRUE(c)                                                 \
    do {                                                               \
        if (!(c))                                                      \
            TSR_FAIL("assertion failed: %s", #c);                      \
    } while (0)

#define ASSERT_EQ(a, b)                                                \
    do {                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);            \
        if (a_ != b_)                                                  \
            TSR_FAIL("%s == %s: %lld != %lld", #a, #b, a_, b_);        \
    } while (0)

#define ASSERT_OK(expr)                                                \
    do {                                                               \
        int rc_ = (expr);                                              \
        if (rc_ != 0)                                                  \
            TSR_FAIL("%s failed: %d (%s) %s", #expr, rc_,              \
                     tsr_strerror(rc_), tsr_last_error());             \
    } while (0)

/* expr returns `code` and tsr_last_error() holds `substr`. */
#define ASSERT_ERR(expr, code, substr)                                 \
    do {                                                               \
        int rc__ = (expr);                                             \
        if (rc__ != (code))                                            \
            TSR_FAIL("%s: got %d (%s), want %d; %s", #expr, rc__,      \
                     tsr_strerror(rc__), (code), tsr_last_error());    \
        if (!strstr(tsr_last_error(), (substr)))                       \
            TSR_FAIL("%s: message \"%s\" lacks \"%s\"", #expr,        \
                     tsr_last_error(), (substr));                      \
    } while (0)

#define ASSERT_STR_EQ(a, b)                                            \
    do {                                                               \
        const char *a_ = (a), *b_ = (b);                               \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                         \
            TSR_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b,             \
                     a_ ? a_ : "(null)", b_ ? b_ : "(null)");          \
    } while (0)

#define ASSERT_NEAR(a, b, tol)                                         \
    do {                                                               \
        double a_ = (a), b_ = (b);                                     \
        if (!(fabs(a_ - b_) <= (tol)))                                 \
            TSR_FAIL("%s ~= %s: %.9g vs %.9g (tol %g)", #a, #b, a_,    \
                     b_, (double)(tol));                               \
    } while (0)

#define ASSERT_CLOSE(what, got, want, n, tol)                          \
    do {                                                               \
        if (tsr_test_check_close((what), (got), (want), (n), (tol)))   \
            TSR_FAIL("%s differs from the reference", (what));         \
    } while (0)

#define TSR_TEST_TABLE_MAIN(table)                                     \
    int main(int argc, char **argv)                                    \
    {                                                                  \
        return tsr_test_main(argc, argv, table,                        \
                             sizeof(table) / sizeof((table)[0]));      \
    }

#endif
