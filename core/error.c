/*
 * core/error.c - status names and the thread-local error detail.
 */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define TSR_ERROR_DETAIL_MAX 1024

static _Thread_local char error_detail[TSR_ERROR_DETAIL_MAX];

const char *tsr_strerror(int status)
{
    switch (status) {
    case TSR_OK: return "success";
    case TSR_ERR_NOMEM: return "out of memory";
    case TSR_ERR_IO: return "input/output error";
    case TSR_ERR_FORMAT: return "malformed data";
    case TSR_ERR_INVALID: return "invalid argument";
    case TSR_ERR_UNSUPPORTED: return "not supported";
    case TSR_ERR_NOT_FOUND: return "not found";
    case TSR_ERR_RANGE: return "size or index out of range";
    case TSR_ERR_BACKEND: return "compute backend failure";
    case TSR_ERR_UNSAFE: return "refused as unsafe";
    case TSR_ERR_CANCELLED: return "cancelled";
    case TSR_ERR_INTERNAL: return "internal error";
    default: return "unknown error";
    }
}

const char *tsr_last_error(void)
{
    return error_detail;
}

void tsr_error_clear(void)
{
    error_detail[0] = '\0';
}

int tsr_errorf(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_detail, sizeof error_detail, fmt, ap);
    va_end(ap);
    return code;
}

int tsr_error_prefix(int code, const char *fmt, ...)
{
    char prefix[TSR_ERROR_DETAIL_MAX];
    char old[TSR_ERROR_DETAIL_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, error_detail, sizeof old);
    if (old[0])
        snprintf(error_detail, sizeof error_detail, "%s: %s", prefix, old);
    else
        snprintf(error_detail, sizeof error_detail, "%s: %s", prefix, tsr_strerror(code));
    return code;
}
