/*
 * service/base/log.c - see log.h.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static atomic_int g_level = TSR_LOG_INFO;

void svc_log_set_level(tsr_log_level level)
{
    atomic_store(&g_level, (int)level);
}

int svc_log_enabled(tsr_log_level level)
{
    return (int)level >= atomic_load(&g_level);
}

static const char *level_name(tsr_log_level level)
{
    switch (level) {
    case TSR_LOG_DEBUG: return "debug";
    case TSR_LOG_INFO: return "info";
    case TSR_LOG_WARN: return "warn";
    case TSR_LOG_ERROR: return "error";
    default: return "log";
    }
}

static void emit(tsr_log_level level, const char *prefix, const char *message)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char line[4096];
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %-5s %s%s\n",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (int)(tv.tv_usec / 1000), level_name(level), prefix, message);
    if (n >= (int)sizeof line) {
        /* keep the line a line: cut the message, keep the newline */
        line[sizeof line - 5] = '.';
        line[sizeof line - 4] = '.';
        line[sizeof line - 3] = '.';
        line[sizeof line - 2] = '\n';
        line[sizeof line - 1] = '\0';
    }
    fputs(line, stderr);
}

void svc_log(tsr_log_level level, const char *fmt, ...)
{
    if (!svc_log_enabled(level))
        return;
    char msg[3584];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    emit(level, "", msg);
}

void svc_log_engine(void *user, tsr_log_level level, const char *message)
{
    (void)user;
    if (svc_log_enabled(level))
        emit(level, "engine: ", message ? message : "");
}
