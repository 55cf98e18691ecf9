/*
 * service/store/journal.c - the local journal (svc_journal, see journal.h).
 *
 * File format: records back to back, each
 *     u32 length (little-endian) | u32 CRC-32 of the payload | payload
 * where the payload is one JSON object (docs/service-design.md,
 * "Durability").  Appends are one write() of all records then fdatasync, so
 * a record is durable before the caller answers 202.
 *
 * Why it reads the file this way: a crash can leave a torn tail (a short
 * header, a short payload, a CRC that does not match) and that tail is cut
 * off with a warning, as before.  But a damaged record in the middle (a
 * flipped bit on disk, a bad sector) must not take every later record with
 * it: each record carries its own CRC, so the reader skips the damaged bytes
 * and resynchronises at the next offset where a whole, CRC-verified record
 * starts (length in range, payload inside the file, '{' ... '}', CRC
 * equal).  A false resynchronisation inside a payload would need a header
 * JSON text cannot hold for any record under 16 MiB (the length's top
 * byte is then zero, and the JSON cJSON writes never holds a NUL byte) and
 * a CRC-32 that matches by chance besides.  When anything but a tail was
 * skipped, the damaged file is first copied to <path>.corrupt-<epoch>
 * (open fails if that copy cannot be written: nothing is rewritten without
 * it), every skipped range is logged with the job ids still readable in
 * it, and the file is rewritten with the intact records.  Never a crash:
 * lengths are checked against the bytes left before anything is read.
 *
 * Compaction while running: the journal keeps an index of live records
 * (per key, the last record the caller's classify function called LIVE,
 * until an END for that key), so it can rewrite itself without the loop:
 * after an append, once the dead bytes pass compact_bytes and outweigh the
 * live ones, the live records are copied (pread, CRC checked again) into
 * <path>.tmp, fsync'd and renamed over the file.  That runs on the thread
 * that appends (the storage thread), between two appends, so no append can
 * race it; a crash leaves either file whole.  The rewrite costs about the
 * live bytes and happens after at least as many dead bytes were appended,
 * so compaction at most doubles the bytes written.  If the index cannot
 * grow (out of memory) running compaction stops until the next rewrite.
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
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "journal.h"
#include "util.h"

#define JOURNAL_MAX_RECORD (256u << 20)
#define NOT_FOUND SIZE_MAX

/* A key's live record: 8 + len bytes at off. */
typedef struct live_rec {
    uint64_t key; /* 0 = empty slot */
    uint64_t off;
    uint32_t len;
} live_rec;

typedef struct local_journal {
    svc_journal base;
    int fd;
    char path[PATH_MAX];
    svc_journal_class_fn classify;
    uint64_t compact_bytes;
    uint64_t size;       /* bytes in the file */
    uint64_t live_bytes; /* of the live records, headers included */
    uint64_t next_try;   /* after a failed compaction: not before this size */
    bool index_ok;       /* false: out of memory once, no running compaction */
    live_rec *slots;     /* open addressing, linear probing; cap a power of 2 */
    size_t cap, count;
} local_journal;

/* A record to write: payload bytes (header made here) or, for compaction,
 * a whole record read back from the old file. */
typedef struct rec_src {
    const char *payload;
    size_t len;
} rec_src;

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

/* ------------------------------------------------------------- the index */

static size_t slot_of(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)(key & (cap - 1));
}

static size_t index_find(const local_journal *j, uint64_t key)
{
    if (!j->cap)
        return NOT_FOUND;
    for (size_t i = slot_of(key, j->cap);; i = (i + 1) & (j->cap - 1)) {
        if (j->slots[i].key == key)
            return i;
        if (j->slots[i].key == 0)
            return NOT_FOUND;
    }
}

static bool index_grow(local_journal *j)
{
    size_t cap = j->cap ? j->cap * 2 : 64;
    live_rec *ns = calloc(cap, sizeof *ns);
    if (!ns)
        return false;
    for (size_t i = 0; i < j->cap; i++) {
        if (!j->slots[i].key)
            continue;
        size_t k = slot_of(j->slots[i].key, cap);
        while (ns[k].key)
            k = (k + 1) & (cap - 1);
        ns[k] = j->slots[i];
    }
    free(j->slots);
    j->slots = ns;
    j->cap = cap;
    return true;
}

static void index_put(local_journal *j, uint64_t key, uint64_t off, uint32_t len)
{
    size_t i = index_find(j, key);
    if (i != NOT_FOUND) {
        j->live_bytes -= 8 + (uint64_t)j->slots[i].len;
    } else {
        if ((j->count + 1) * 4 > j->cap * 3 && !index_grow(j)) {
            SVC_WARN("journal: out of memory for its index; no compaction until the next start");
            j->index_ok = false;
            return;
        }
        i = slot_of(key, j->cap);
        while (j->slots[i].key)
            i = (i + 1) & (j->cap - 1);
        j->count++;
    }
    j->slots[i] = (live_rec){key, off, len};
    j->live_bytes += 8 + (uint64_t)len;
}

/* Backward-shift deletion: no tombstones. */
static void index_del(local_journal *j, uint64_t key)
{
    size_t i = index_find(j, key);
    if (i == NOT_FOUND)
        return;
    j->live_bytes -= 8 + (uint64_t)j->slots[i].len;
    j->count--;
    const size_t mask = j->cap - 1;
    for (size_t k = (i + 1) & mask; j->slots[k].key; k = (k + 1) & mask) {
        size_t home = slot_of(j->slots[k].key, j->cap);
        /* move k into the hole at i unless its home lies in (i, k] */
        bool stays = i <= k ? (home > i && home <= k) : (home > i || home <= k);
        if (!stays) {
            j->slots[i] = j->slots[k];
            i = k;
        }
    }
    j->slots[i].key = 0;
}

static void index_clear(local_journal *j)
{
    if (j->slots)
        memset(j->slots, 0, j->cap * sizeof *j->slots);
    j->count = 0;
    j->live_bytes = 0;
    j->index_ok = true;
}

static void index_record(local_journal *j, const char *payload, size_t len, uint64_t off)
{
    if (!j->classify || !j->index_ok)
        return;
    uint64_t key = 0;
    svc_journal_class c = j->classify(payload, len, &key);
    if (key == 0)
        return;
    if (c == SVC_JOURNAL_LIVE)
        index_put(j, key, off, (uint32_t)len);
    else if (c == SVC_JOURNAL_END)
        index_del(j, key);
}

/* ------------------------------------------------------------ writing */

static int write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int write_records(int fd, const char *const *payloads, const size_t *lens, int n)
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

static int fsync_parent(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    return svc_fsync_dir(dir);
}

/* fill(fd, arg) writes the new content into <path>.tmp; then fsync, rename
 * over the journal and take the new file as j->fd.  0 or -errno (the old
 * file is then untouched). */
static int replace_file(local_journal *j, int (*fill)(int fd, void *arg), void *arg)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", j->path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rc = fill(fd, arg);
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, j->path) != 0)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        unlink(tmp);
        return rc;
    }
    close(j->fd);
    j->fd = fd;
    return fsync_parent(j->path);
}

typedef struct payload_list {
    const char *const *payloads;
    const size_t *lens;
    int n;
} payload_list;

static int fill_payloads(int fd, void *arg)
{
    const payload_list *pl = arg;
    return write_records(fd, pl->payloads, pl->lens, pl->n);
}

/* The file now holds exactly these records from byte 0: size and index. */
static void reindex(local_journal *j, const char *const *payloads, const size_t *lens, int n)
{
    index_clear(j);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        index_record(j, payloads[i], lens[i], off);
        off += 8 + (uint64_t)lens[i];
    }
    j->size = off;
    j->next_try = 0;
}

/* --------------------------------------------------- running compaction */

static int cmp_off(const void *a, const void *b)
{
    const live_rec *x = *(live_rec *const *)a, *y = *(live_rec *const *)b;
    return x->off < y->off ? -1 : x->off > y->off;
}

typedef struct live_copy {
    local_journal *j;
    live_rec **recs; /* by offset in the old file */
    size_t n;
    uint64_t *new_off;
} live_copy;

static int fill_live(int fd, void *arg)
{
    live_copy *lc = arg;
    uint64_t out = 0;
    int rc = 0;
    char *buf = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < lc->n && rc == 0; i++) {
        const live_rec *r = lc->recs[i];
        size_t total = 8 + (size_t)r->len;
        if (total > cap) {
            char *nb = realloc(buf, total);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            buf = nb;
            cap = total;
        }
        size_t got = 0;
        while (got < total) {
            ssize_t k = pread(lc->j->fd, buf + got, total - got, (off_t)(r->off + got));
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                rc = k < 0 ? -errno : -EIO;
                break;
            }
            got += (size_t)k;
        }
        if (rc == 0 && (get_u32((uint8_t *)buf) != r->len ||
                        get_u32((uint8_t *)buf + 4) != svc_crc32(buf + 8, r->len)))
            rc = -EIO; /* the index and the file disagree: keep the file */
        if (rc == 0)
            rc = write_full(fd, buf, total);
        lc->new_off[i] = out;
        out += total;
    }
    free(buf);
    return rc;
}

static int compact_live(local_journal *j)
{
    live_copy lc = {j, NULL, 0, NULL};
    int rc = -ENOMEM;
    lc.recs = malloc((j->count ? j->count : 1) * sizeof *lc.recs);
    lc.new_off = malloc((j->count ? j->count : 1) * sizeof *lc.new_off);
    if (!lc.recs || !lc.new_off)
        goto out;
    for (size_t i = 0; i < j->cap; i++)
        if (j->slots[i].key)
            lc.recs[lc.n++] = &j->slots[i];
    qsort(lc.recs, lc.n, sizeof *lc.recs, cmp_off);
    rc = replace_file(j, fill_live, &lc);
    if (rc < 0)
        goto out;
    uint64_t size = 0;
    for (size_t i = 0; i < lc.n; i++) {
        lc.recs[i]->off = lc.new_off[i];
        size = lc.new_off[i] + 8 + lc.recs[i]->len;
    }
    j->size = size;
out:
    free(lc.recs);
    free(lc.new_off);
    return rc;
}

static void maybe_compact(local_journal *j)
{
    if (!j->compact_bytes || !j->classify || !j->index_ok || j->size < j->next_try)
        return;
    const uint64_t dead = j->size - j->live_bytes;
    if (dead < j->compact_bytes || dead < j->live_bytes)
        return;
    const uint64_t before = j->size;
    int rc = compact_live(j);
    if (rc < 0) {
        j->next_try = j->size + j->compact_bytes;
        SVC_WARN("journal %s: compaction while running failed (%s); it is tried again after "
                 "%llu more bytes",
                 j->path, strerror(-rc), (unsigned long long)j->compact_bytes);
        return;
    }
    SVC_INFO("journal %s: compacted while running, %llu -> %llu bytes (%zu live record%s)",
             j->path, (unsigned long long)before, (unsigned long long)j->size, j->count,
             j->count == 1 ? "" : "s");
}

/* --------------------------------------------------------------- ops */

static int j_append(svc_journal *base, const char *const *payloads, const size_t *lens, int n)
{
    local_journal *j = (local_journal *)base;
    off_t end = lseek(j->fd, 0, SEEK_END);
    int rc = write_records(j->fd, payloads, lens, n);
    if (rc == 0 && fdatasync(j->fd) != 0)
        rc = -errno;
    if (rc < 0) {
        /* do not leave half a record for the next append to follow */
        if (end >= 0 && ftruncate(j->fd, end) != 0)
            SVC_WARN("journal: cannot cut a failed append back: %s", strerror(errno));
        return rc;
    }
    uint64_t off = end >= 0 ? (uint64_t)end : j->size;
    for (int i = 0; i < n; i++) {
        index_record(j, payloads[i], lens[i], off);
        off += 8 + (uint64_t)lens[i];
    }
    j->size = off;
    maybe_compact(j);
    return 0;
}

static int j_rewrite(svc_journal *base, const char *const *payloads, const size_t *lens, int n)
{
    local_journal *j = (local_journal *)base;
    payload_list pl = {payloads, lens, n};
    int rc = replace_file(j, fill_payloads, &pl);
    if (rc == 0)
        reindex(j, payloads, lens, n);
    return rc;
}

static bool j_holds(svc_journal *base, uint64_t key)
{
    local_journal *j = (local_journal *)base;
    /* an index that could not grow answers yes: an extra record is harmless */
    return key && (!j->index_ok || index_find(j, key) != NOT_FOUND);
}

static void j_close(svc_journal *base)
{
    local_journal *j = (local_journal *)base;
    if (!j)
        return;
    if (j->fd >= 0)
        close(j->fd);
    free(j->slots);
    free(j);
}

static const svc_journal_ops local_ops = {j_append, j_rewrite, j_holds, j_close};

/* ------------------------------------------------------------ reading */

/* NULL when a whole record starts at off (*len its payload length), else
 * what is wrong with it. */
static const char *record_at(const char *data, size_t size, size_t off, uint32_t *len)
{
    if (size - off < 8)
        return "a torn record header";
    *len = get_u32((const uint8_t *)data + off);
    uint32_t crc = get_u32((const uint8_t *)data + off + 4);
    /* never written: records are JSON objects (a zero-filled, preallocated
     * tail reads as empty records with CRC 0) */
    if (*len == 0)
        return "an empty record";
    if (*len > JOURNAL_MAX_RECORD)
        return "a record length past the limit";
    if (*len > size - off - 8)
        return "a torn record";
    if (svc_crc32(data + off + 8, *len) != crc)
        return "a record whose CRC does not match";
    return NULL;
}

/* The first offset >= from where a whole JSON record starts, or NOT_FOUND. */
static size_t resync(const char *data, size_t size, size_t from)
{
    for (size_t p = from; p + 8 < size; p++) {
        uint32_t len = get_u32((const uint8_t *)data + p);
        if (len < 2 || len > JOURNAL_MAX_RECORD || len > size - p - 8)
            continue;
        if (data[p + 8] != '{' || data[p + 8 + len - 1] != '}')
            continue;
        if (svc_crc32(data + p + 8, len) == get_u32((const uint8_t *)data + p + 4))
            return p;
    }
    return NOT_FOUND;
}

/* The job ids still readable in damaged bytes ("j_" + 16 hex after an
 * "id" key), for the log: "j_..., j_..." (at most four). */
static void ids_in(const char *p, size_t n, char *out, size_t size)
{
    static const char key[] = "\"id\":\"j_";
    const size_t kl = sizeof key - 1;
    size_t used = 0;
    int found = 0;
    out[0] = '\0';
    for (size_t i = 0; i + kl + 16 <= n && found < 4; i++) {
        if (memcmp(p + i, key, kl) != 0)
            continue;
        const char *h = p + i + kl;
        size_t k = 0;
        while (k < 16 && ((h[k] >= '0' && h[k] <= '9') || (h[k] >= 'a' && h[k] <= 'f')))
            k++;
        if (k != 16)
            continue;
        int w = snprintf(out + used, size - used, "%sj_%.16s", found ? ", " : "", h);
        if (w < 0 || (size_t)w >= size - used)
            break;
        used += (size_t)w;
        found++;
    }
}

typedef struct good_rec {
    size_t off;
    uint32_t len;
} good_rec;

/* <path>.corrupt-<epoch>[-k]: the damaged file as it was read. */
static int keep_copy(const char *path, const char *data, size_t size, char *copy, size_t csize)
{
    const long long now = (long long)time(NULL);
    for (int k = 0; k < 100; k++) {
        if (k == 0)
            snprintf(copy, csize, "%s.corrupt-%lld", path, now);
        else
            snprintf(copy, csize, "%s.corrupt-%lld-%d", path, now, k);
        if (access(copy, F_OK) != 0)
            return svc_write_file_atomic(copy, data, size);
    }
    return -EEXIST;
}

int svc_journal_local_open(const char *path, const svc_journal_options *opt, svc_journal **out)
{
    *out = NULL;
    char *data = NULL;
    size_t size = 0, n_good = 0, cap_good = 0, skipped = 0, regions = 0;
    good_rec *good = NULL;
    const char **payloads = NULL;
    size_t *lens = NULL;
    int rc = 0;
    local_journal *j = calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    j->base.ops = &local_ops;
    j->fd = -1;
    j->classify = opt ? opt->classify : NULL;
    j->compact_bytes = opt ? opt->compact_bytes : 0;
    j->index_ok = true;
    snprintf(j->path, sizeof j->path, "%s", path);
    j->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (j->fd < 0) {
        rc = -errno;
        goto fail;
    }
    rc = svc_read_file(path, &data, &size, SIZE_MAX / 2);
    if (rc < 0)
        goto fail;
    size_t off = 0;
    const char *tail_why = NULL;
    while (off < size) {
        uint32_t len = 0;
        const char *why = record_at(data, size, off, &len);
        if (why) {
            size_t next = resync(data, size, off + 1);
            if (next == NOT_FOUND) {
                tail_why = why;
                break;
            }
            char ids[96];
            ids_in(data + off, next - off, ids, sizeof ids);
            SVC_WARN("journal %s: %s at byte %zu (after %zu good records); skipped %zu bytes "
                     "[%zu, %zu) up to the next intact record%s%s%s",
                     path, why, off, n_good, next - off, off, next,
                     ids[0] ? " (the damaged bytes name " : "", ids, ids[0] ? ")" : "");
            skipped += next - off;
            regions++;
            off = next;
            continue;
        }
        if (opt && opt->replay && opt->replay(opt->user, data + off + 8, len) != 0) {
            rc = -ENOMEM;
            goto fail;
        }
        if (n_good == cap_good) {
            size_t nc = cap_good ? cap_good * 2 : 64;
            good_rec *ng = realloc(good, nc * sizeof *ng);
            if (!ng) {
                rc = -ENOMEM;
                goto fail;
            }
            good = ng;
            cap_good = nc;
        }
        good[n_good++] = (good_rec){off, len};
        off += 8 + (size_t)len;
    }
    if (tail_why)
        SVC_WARN("journal %s: %s at byte %zu (after %zu good records); cutting %zu bytes off "
                 "(a torn tail)",
                 path, tail_why, off, n_good, size - off);
    if (regions) {
        /* damage before intact records: copy, then rewrite without it */
        char copy[PATH_MAX + 40];
        rc = keep_copy(path, data, size, copy, sizeof copy);
        if (rc < 0) {
            SVC_ERROR("journal %s is damaged and a copy cannot be kept (%s); not starting, so "
                      "that nothing is rewritten",
                      path, strerror(-rc));
            goto fail;
        }
        payloads = calloc(n_good ? n_good : 1, sizeof *payloads);
        lens = calloc(n_good ? n_good : 1, sizeof *lens);
        if (!payloads || !lens) {
            rc = -ENOMEM;
            goto fail;
        }
        for (size_t i = 0; i < n_good; i++) {
            payloads[i] = data + good[i].off + 8;
            lens[i] = good[i].len;
        }
        payload_list pl = {payloads, lens, (int)n_good};
        rc = replace_file(j, fill_payloads, &pl);
        if (rc < 0)
            goto fail;
        reindex(j, payloads, lens, (int)n_good);
        SVC_WARN("journal %s: %zu damaged region%s (%zu bytes) skipped, %zu intact records "
                 "kept; the jobs whose records were there are lost unless they finished "
                 "(their job.json); the damaged file is kept as %s",
                 path, regions, regions == 1 ? "" : "s", skipped, n_good, copy);
    } else {
        if (tail_why && (ftruncate(j->fd, (off_t)off) != 0 || fsync(j->fd) != 0)) {
            rc = -errno;
            goto fail;
        }
        index_clear(j);
        for (size_t i = 0; i < n_good; i++)
            index_record(j, data + good[i].off + 8, good[i].len, good[i].off);
        j->size = off;
    }
    free(data);
    free(good);
    free(payloads);
    free(lens);
    *out = &j->base;
    return 0;
fail:
    free(data);
    free(good);
    free(payloads);
    free(lens);
    j_close(&j->base);
    return rc;
}
