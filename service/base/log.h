/*
 * service/base/log.h - the server's one log stream (stderr, one line per call).
 *
 * Every thread logs through here: the event loop (access log, warnings),
 * the workers, the storage thread, and the engine itself (its lines are
 * routed here with tsr_log_set_callback).  A line is "<UTC time> <level>
 * <message>", written with one fputs under stdio's own lock, so lines from
 * different threads never interleave.  The level is tested before the
 * message is formatted (redis' serverLog), so a disabled debug line costs a
 * comparison.
 */
#ifndef SVC_LOG_H
#define SVC_LOG_H

#include "tessera.h"

void svc_log_set_level(tsr_log_level level);
int svc_log_enabled(tsr_log_level level);
void svc_log(tsr_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The engine's log callback (tsr_log_set_callback). */
void svc_log_engine(void *user, tsr_log_level level, const char *message);

#define SVC_LOG_AT(lvl, ...)                                                                       \
    do {                                                                                           \
        if (svc_log_enabled(lvl))                                                                  \
            svc_log(lvl, __VA_ARGS__);                                                             \
    } while (0)
#define SVC_DEBUG(...) SVC_LOG_AT(TSR_LOG_DEBUG, __VA_ARGS__)
#define SVC_INFO(...) SVC_LOG_AT(TSR_LOG_INFO, __VA_ARGS__)
#define SVC_WARN(...) SVC_LOG_AT(TSR_LOG_WARN, __VA_ARGS__)
#define SVC_ERROR(...) SVC_LOG_AT(TSR_LOG_ERROR, __VA_ARGS__)

#endif
