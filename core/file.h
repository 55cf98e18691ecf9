/*
 * core/file.h - writing a file so that a failure never leaves a partial
 * one: data goes to "<path>.tmp", which is fsynced, closed and renamed over
 * <path>, and the folder is fsynced.  On any error the temporary file is
 * removed and <path> is untouched.  Used by every writer that produces
 * user-visible files (safetensors, PNG).
 */
#ifndef TSR_CORE_FILE_H
#define TSR_CORE_FILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct tsr_atomic_file {
    int fd;
    char *path; /* owned */
    char *tmp;  /* owned */
} tsr_atomic_file;

/* Create <path>.tmp.  On failure nothing exists and *f is reset. */
int tsr_atomic_open(tsr_atomic_file *f, const char *path);
/* Append n bytes (loops over short writes and EINTR). */
int tsr_atomic_write(tsr_atomic_file *f, const void *data, uint64_t n);
/* fsync, close, rename into place, fsync the folder.  Always releases f;
 * on failure the temporary file is removed. */
int tsr_atomic_commit(tsr_atomic_file *f);
/* Remove the temporary file and release f (safe on a reset f). */
void tsr_atomic_abort(tsr_atomic_file *f);

/* The whole file from one buffer. */
int tsr_write_file_atomic(const char *path, const void *data, size_t len);

#endif
