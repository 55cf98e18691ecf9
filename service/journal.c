/*
 * service/journal.c - the local journal (svc_journal, see queue.h).
 *
 * File format: records back to back, each
 *     u32 length (little-endian) | u32 CRC-32 of the payload | payload
 * where the payload is one JSON object (docs/service-design.md,
 * "Durability").  Appends are one write() of all records then fdatasync, so
 * a record is durable before the caller answers 202.  A crash can leave a
 * torn tail (a short header, a short payload, a CRC that does not match);
 * at open the file is read record by record, the first bad one and
 * everything after it are cut off with a warning, and the good records are
 * replayed.  Never a crash: lengths are checked against the bytes left
 * before anything is read.
 *
 * Owner: the loop thread during start-up, then the storage thread only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"
#include "queue.h"
#include "util.h"

#define JOURNAL_MAX_RECORD (256u << 20)

typedef struct local_journal {
    svc_journal base;
    int fd;
    char path[PATH_MAX];
} local_journal;

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int write_all(int fd, const char *const *payloads, const size_t *lens, int n)
{
    for (int i = 0; i < n; i++) {
        if (lens[i] > JOURNAL_MAX_RECORD)
            return -EFBIG;
        uint8_t head[8];
        put_u32(head, (uint32_t)lens[i]);
        put_u32(head + 4, svc_crc32(payloads[i], lens[i]));
        struct iovec iov[2] = {{head, 8}, {(void *)payloads[i], lens[i]}};
        size_t total = 8 + lens[i], done = 0;
        while (done < total) {
            ssize_t w = writev(fd, iov, 2);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return -errno;
            }
            done += (size_t)w;
            /* advance the iovecs past what was written */
            size_t adv = (size_t)w;
            for (int k = 0; k < 2; k++) {
                size_t take = adv < iov[k].iov_len ? adv : iov[k].iov_len;
                iov[k].iov_base = (char *)iov[k].iov_base + take;
                iov[k].iov_len -= take;
                adv -= take;
            }
        }
    }
    return 0;
}

static int j_append(svc_journal *base, const char *const *payloads, const size_t *lens, int n)
{
    local_journal *j = (local_journal *)base;
    off_t end = lseek(j->fd, 0, SEEK_END);
    int rc = write_all(j->fd, payloads, lens, n);
    if (rc == 0 && fdatasync(j->fd) != 0)
        rc = -errno;
    if (rc < 0 && end >= 0) {
        /* do not leave half a record for the next append to follow */
        if (ftruncate(j->fd, end) != 0)
            SVC_WARN("journal: cannot cut a failed append back: %s", strerror(errno));
    }
    return rc;
}

static int j_rewrite(svc_journal *base, const char *const *payloads, const size_t *lens, int n)
{
    local_journal *j = (local_journal *)base;
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", j->path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int rc = write_all(fd, payloads, lens, n);
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        unlink(tmp);
        return rc;
    }
    if (rename(tmp, j->path) != 0) {
        rc = -errno;
        close(fd);
        unlink(tmp);
        return rc;
    }
    close(j->fd);
    j->fd = open(j->path, O_WRONLY | O_APPEND | O_CLOEXEC);
    close(fd);
    if (j->fd < 0)
        return -errno;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", j->path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    return svc_fsync_dir(dir);
}

static void j_close(svc_journal *base)
{
    local_journal *j = (local_journal *)base;
    if (!j)
        return;
    if (j->fd >= 0)
        close(j->fd);
    free(j);
}

static const svc_journal_ops local_ops = {j_append, j_rewrite, j_close};

int svc_journal_local_open(const char *path, svc_journal_fn fn, void *user, svc_journal **out)
{
    *out = NULL;
    local_journal *j = calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    j->base.ops = &local_ops;
    snprintf(j->path, sizeof j->path, "%s", path);
    j->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (j->fd < 0) {
        int e = -errno;
        free(j);
        return e;
    }
    char *data = NULL;
    size_t size = 0;
    int rc = svc_read_file(path, &data, &size, SIZE_MAX / 2);
    if (rc < 0) {
        close(j->fd);
        free(j);
        return rc;
    }
    size_t off = 0, records = 0;
    const char *why = NULL;
    while (off < size) {
        if (size - off < 8) {
            why = "a torn record header";
            break;
        }
        uint32_t len = get_u32((const uint8_t *)data + off);
        uint32_t crc = get_u32((const uint8_t *)data + off + 4);
        if (len == 0) {
            /* never written: records are JSON objects (a zero-filled,
             * preallocated tail reads as empty records with CRC 0) */
            why = "an empty record";
            break;
        }
        if (len > JOURNAL_MAX_RECORD) {
            why = "a record length past the limit";
            break;
        }
        if (len > size - off - 8) {
            why = "a torn record";
            break;
        }
        if (svc_crc32(data + off + 8, len) != crc) {
            why = "a record whose CRC does not match";
            break;
        }
        if (fn && fn(user, data + off + 8, len) != 0)
            break;
        off += 8 + (size_t)len;
        records++;
    }
    if (why) {
        SVC_WARN("journal %s: %s at byte %zu (after %zu good records); cutting %zu bytes off",
                 path, why, off, records, size - off);
        if (ftruncate(j->fd, (off_t)off) != 0 || fsync(j->fd) != 0) {
            int e = -errno;
            free(data);
            close(j->fd);
            free(j);
            return e;
        }
    }
    free(data);
    if (lseek(j->fd, 0, SEEK_END) < 0) {
        int e = -errno;
        close(j->fd);
        free(j);
        return e;
    }
    *out = &j->base;
    return 0;
}
