/*
 * core/log.c - levelled logging.  One fprintf per message so lines from
 * different threads do not interleave mid-line.
 */
#include "core/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

tsr_log_level tsr_log_level_current = TSR_LOG_INFO;

/* The sink: stderr, or the embedder's function.  Set before threads log
 * (at start-up); read with relaxed atomics so a late change is still safe. */
static _Atomic(tsr_log_fn) g_log_fn;
static _Atomic(void *) g_log_user;

void tsr_log_set_callback(tsr_log_fn fn, void *user)
{
    atomic_store(&g_log_user, user);
    atomic_store(&g_log_fn, fn);
}

void tsr_log_set_level(tsr_log_level level)
{
    tsr_log_level_current = level;
}

int tsr_log_level_parse(const char *name)
{
    static const char *names[] = {"debug", "info", "warn", "error", "none"};
    for (int i = 0; i < 5; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

void tsr_log_write(tsr_log_level level, const char *file, int line, const char *fmt, ...)
{
    static const char *tags[] = {"debug", "info", "warn", "error", ""};
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    tsr_log_fn fn = atomic_load(&g_log_fn);
    if (fn) {
        if (level == TSR_LOG_DEBUG) {
            char where[2200];
            snprintf(where, sizeof where, "%s:%d: %s", base, line, msg);
            fn(atomic_load(&g_log_user), level, where);
        } else {
            fn(atomic_load(&g_log_user), level, msg);
        }
        return;
    }
    if (level == TSR_LOG_DEBUG)
        fprintf(stderr, "tessera %s %s:%d: %s\n", tags[level], base, line, msg);
    else
        fprintf(stderr, "tessera %s: %s\n", tags[level], msg);
}

const char *tsr_version(void)
{
    return "0.1.0";
}
