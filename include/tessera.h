/*
 * tessera.h - the public C API of Tessera.
 *
 * Why it looks like this: callers (the CLI, the HTTP service, embedders) see
 * only opaque handles, status codes and plain structs.  Every function that
 * can fail returns a tsr_status (0 = success, negative = error class); the
 * human-readable detail of the most recent failure on the calling thread is
 * available from tsr_last_error(), so a server can fail one request with a
 * precise message instead of the process.
 *
 * Ownership: pointers marked "owned" pass ownership to the receiver;
 * "borrowed" pointers stay owned by the caller and must outlive the call.
 */
#ifndef TESSERA_H
#define TESSERA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_VERSION_MAJOR 0
#define TESSERA_VERSION_MINOR 1
#define TESSERA_VERSION_PATCH 0

/* Status codes.  Negative values are errors; tsr_strerror names them. */
typedef enum tsr_status {
    TSR_OK = 0,
    TSR_ERR_NOMEM = -1,       /* an allocation failed */
    TSR_ERR_IO = -2,          /* a file could not be opened, read or written */
    TSR_ERR_FORMAT = -3,      /* a file or payload is malformed */
    TSR_ERR_INVALID = -4,     /* an argument is out of its domain */
    TSR_ERR_UNSUPPORTED = -5, /* valid, but not implemented / not supported here */
    TSR_ERR_NOT_FOUND = -6,   /* a named tensor, file or key is missing */
    TSR_ERR_RANGE = -7,       /* a size or index is out of range (hostile sizes) */
    TSR_ERR_BACKEND = -8,     /* the compute backend failed (CUDA, cuBLAS, ...) */
    TSR_ERR_UNSAFE = -9,      /* refused on safety grounds (pickle checkpoints) */
    TSR_ERR_CANCELLED = -10,  /* work was cancelled */
    TSR_ERR_INTERNAL = -11,   /* a bug: an invariant did not hold */
} tsr_status;

/* Short, static description of a status code ("out of memory", ...). */
const char *tsr_strerror(int status);

/* Detail of the last error raised on this thread (e.g. "model.safetensors:
 * tensor 'x' ends at 4096 past the end of the file (2048 bytes)").  Never
 * NULL; empty when no error was raised.  Borrowed: valid until the next
 * error on this thread. */
const char *tsr_last_error(void);

/* Log levels.  Messages below the current level are not even formatted. */
typedef enum tsr_log_level {
    TSR_LOG_DEBUG = 0,
    TSR_LOG_INFO = 1,
    TSR_LOG_WARN = 2,
    TSR_LOG_ERROR = 3,
    TSR_LOG_NONE = 4,
} tsr_log_level;

void tsr_log_set_level(tsr_log_level level);

/* "0.1.0" */
const char *tsr_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_H */
