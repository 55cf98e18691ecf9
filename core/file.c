/*
 * core/file.c - see file.h.
 */
#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

static void sync_parent_dir(const char *path)
{
    char *dir = strdup(path);
    if (!dir)
        return;
    char *slash = strrchr(dir, '/');
    const char *d = ".";
    if (slash) {
        if (slash == dir)
            slash[1] = '\0';
        else
            *slash = '\0';
        d = dir;
    }
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

static void release(tsr_atomic_file *f)
{
    free(f->path);
    free(f->tmp);
    f->path = f->tmp = NULL;
    f->fd = -1;
}

int tsr_atomic_open(tsr_atomic_file *f, const char *path)
{
    f->fd = -1;
    f->path = strdup(path);
    size_t plen = strlen(path);
    f->tmp = malloc(plen + 5);
    if (!f->path || !f->tmp) {
        release(f);
        return tsr_errorf(TSR_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(f->tmp, path, plen);
    memcpy(f->tmp + plen, ".tmp", 5);
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        int rc = tsr_errorf(TSR_ERR_IO, "%s: cannot create: %s", f->tmp, strerror(errno));
        release(f);
        return rc;
    }
    return TSR_OK;
}

int tsr_atomic_write(tsr_atomic_file *f, const void *data, uint64_t n)
{
    const uint8_t *p = data;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t w = write(f->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return tsr_errorf(TSR_ERR_IO, "%s: write failed: %s", f->tmp, strerror(errno));
        }
        if (w == 0)
            return tsr_errorf(TSR_ERR_IO, "%s: write made no progress", f->tmp);
        p += w;
        n -= (uint64_t)w;
    }
    return TSR_OK;
}

void tsr_atomic_abort(tsr_atomic_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp)
        unlink(f->tmp);
    release(f);
}

int tsr_atomic_commit(tsr_atomic_file *f)
{
    int rc = TSR_OK;
    /* EINVAL/EROFS: the file system cannot sync (e.g. some pseudo fs) */
    if (fsync(f->fd) != 0 && errno != EINVAL && errno != EROFS) {
        rc = tsr_errorf(TSR_ERR_IO, "%s: fsync failed: %s", f->tmp, strerror(errno));
        tsr_atomic_abort(f);
        return rc;
    }
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0) {
        rc = tsr_errorf(TSR_ERR_IO, "%s: close failed: %s", f->tmp, strerror(errno));
        tsr_atomic_abort(f);
        return rc;
    }
    if (rename(f->tmp, f->path) != 0) {
        rc = tsr_errorf(TSR_ERR_IO, "%s: cannot rename %s into place: %s", f->path, f->tmp,
                        strerror(errno));
        tsr_atomic_abort(f);
        return rc;
    }
    sync_parent_dir(f->path);
    release(f);
    return TSR_OK;
}

int tsr_write_file_atomic(const char *path, const void *data, size_t len)
{
    tsr_atomic_file f;
    TSR_TRY(tsr_atomic_open(&f, path));
    int rc = tsr_atomic_write(&f, data, len);
    if (rc < 0) {
        tsr_atomic_abort(&f);
        return rc;
    }
    return tsr_atomic_commit(&f);
}
