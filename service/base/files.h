/*
 * service/base/files.h - durable file writes and bounded reads for the data
 * directory.  They return 0 or -errno, not tessera.h's codes: the storage
 * thread and the journal log strerror(-rc) and tell a full disk from a
 * missing directory, which core/file.c's tsr_atomic_* (TSR_ERR_IO plus a
 * thread-local message, an fsync of the folder that may fail silently)
 * does not give them.  docs/ARCHITECTURE.md, "One base", says why the
 * service keeps these few lines instead of a public export.
 */
#ifndef SVC_FILES_H
#define SVC_FILES_H

#include <stddef.h>

/* Durable writes: data to path through path.tmp, fsync, rename, fsync of the
 * directory.  Returns 0 or -errno. */
int svc_write_file_atomic(const char *path, const void *data, size_t len);
/* fsync a directory; 0 or -errno. */
int svc_fsync_dir(const char *dir);
/* mkdir -p; 0 or -errno. */
int svc_mkdirs(const char *path);
/* Whole file into a malloc'd buffer (NUL-terminated); 0 or -errno. */
int svc_read_file(const char *path, char **out, size_t *len, size_t max_len);

#endif
