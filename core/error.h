/*
 * core/error.h - raising errors with detail.
 *
 * Every failing function returns a negative tsr_status.  The place that first
 * detects a failure calls tsr_errorf(), which records a formatted detail in a
 * thread-local buffer and returns the code, so the idiom is
 *
 *     if (off > size) return tsr_errorf(TSR_ERR_FORMAT, "%s: offset past end", path);
 *
 * Callers higher up may prefix context with tsr_error_prefix().  Nothing here
 * exits or aborts: a server fails one request, not the process.
 */
#ifndef TSR_CORE_ERROR_H
#define TSR_CORE_ERROR_H

#include "tessera.h"

#if defined(__GNUC__)
#define TSR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TSR_PRINTF(a, b)
#endif

/* Record a detail message for this thread and return `code`. */
int tsr_errorf(int code, const char *fmt, ...) TSR_PRINTF(2, 3);

/* Prepend "prefix: " to the current detail message; returns `code`. */
int tsr_error_prefix(int code, const char *fmt, ...) TSR_PRINTF(2, 3);

/* Forget the detail of the last error on this thread. */
void tsr_error_clear(void);

/* Propagate a failure: evaluate `expr`, return its status if negative. */
#define TSR_TRY(expr)                    \
    do {                                 \
        int tsr_try_rc_ = (expr);        \
        if (tsr_try_rc_ < 0)             \
            return tsr_try_rc_;          \
    } while (0)

/* Same, but jump to a cleanup label with `rc` set. */
#define TSR_CHECK_GOTO(rc, expr, label)  \
    do {                                 \
        (rc) = (expr);                   \
        if ((rc) < 0)                    \
            goto label;                  \
    } while (0)

#endif
