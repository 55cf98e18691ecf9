/*
 * core/log.h - levelled logging to stderr.
 *
 * The macros test the level before evaluating or formatting their arguments
 * (as redis does), so debug logging in a hot loop costs one branch.
 */
#ifndef TSR_CORE_LOG_H
#define TSR_CORE_LOG_H

#include "core/error.h"
#include "tessera.h"

extern tsr_log_level tsr_log_level_current;

void tsr_log_write(tsr_log_level level, const char *file, int line, const char *fmt, ...)
    TSR_PRINTF(4, 5);

/* Parse "debug" / "info" / "warn" / "error" / "none"; returns -1 if unknown. */
int tsr_log_level_parse(const char *name);

#define TSR_LOG(level, ...)                                               \
    do {                                                                  \
        if ((level) >= tsr_log_level_current)                            \
            tsr_log_write((level), __FILE__, __LINE__, __VA_ARGS__);      \
    } while (0)

#define TSR_DEBUG(...) TSR_LOG(TSR_LOG_DEBUG, __VA_ARGS__)
#define TSR_INFO(...) TSR_LOG(TSR_LOG_INFO, __VA_ARGS__)
#define TSR_WARN(...) TSR_LOG(TSR_LOG_WARN, __VA_ARGS__)
#define TSR_ERROR(...) TSR_LOG(TSR_LOG_ERROR, __VA_ARGS__)

#endif
