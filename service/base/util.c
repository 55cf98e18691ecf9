/*
 * service/base/util.c - see util.h.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double svc_now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double svc_now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t svc_random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) == (ssize_t)sizeof v)
        return v;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
        ((uint64_t)getpid() << 32);
    v ^= v >> 31;
    v *= 0xBF58476D1CE4E5B9ull;
    return v ^ (v >> 29);
}

void svc_id_format(char prefix, uint64_t id, char *buf)
{
    snprintf(buf, 19, "%c_%016llx", prefix, (unsigned long long)id);
}

const char *svc_route_id(const char *rest, char prefix, uint64_t *id)
{
    char seg[20] = {0};
    const char *slash = strchr(rest + 1, '/');
    size_t len = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
    *id = 0;
    if (len < sizeof seg) {
        memcpy(seg, rest + 1, len);
        if (!svc_id_parse(seg, prefix, id))
            *id = 0;
    }
    return slash ? slash : "";
}

bool svc_id_parse(const char *s, char prefix, uint64_t *id)
{
    if (!s || s[0] != prefix || s[1] != '_')
        return false;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[2 + i];
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else
            return false;
        v = v << 4 | (uint64_t)d;
    }
    if (s[18] != '\0')
        return false;
    *id = v;
    return true;
}

/* ---- base64 ---- */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

bool svc_base64_decode(const char *in, size_t len, uint8_t **out, size_t *out_len, char *err,
                       size_t err_size)
{
    *out = NULL;
    *out_len = 0;
    if (len > (SIZE_MAX - 4) / 3 * 4) {
        snprintf(err, err_size, "too long");
        return false;
    }
    uint8_t *buf = malloc(len / 4 * 3 + 4);
    if (!buf) {
        snprintf(err, err_size, "out of memory");
        return false;
    }
    size_t n = 0, pad = 0;
    uint32_t acc = 0;
    int have = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
            continue;
        if (c == '=') {
            pad++;
            continue;
        }
        int v = b64_value(c);
        if (v < 0 || pad) {
            snprintf(err, err_size,
                     pad ? "data after '=' padding at offset %zu"
                         : "invalid base64 character at offset %zu",
                     i);
            free(buf);
            return false;
        }
        acc = acc << 6 | (uint32_t)v;
        if (++have == 4) {
            buf[n++] = (uint8_t)(acc >> 16);
            buf[n++] = (uint8_t)(acc >> 8);
            buf[n++] = (uint8_t)acc;
            acc = 0;
            have = 0;
        }
    }
    if (have == 1 || pad > 2 || (pad && (have + pad) % 4 != 0)) {
        snprintf(err, err_size, "truncated base64 (length not a multiple of 4)");
        free(buf);
        return false;
    }
    if (have == 2) {
        buf[n++] = (uint8_t)(acc >> 4);
    } else if (have == 3) {
        buf[n++] = (uint8_t)(acc >> 10);
        buf[n++] = (uint8_t)(acc >> 2);
    }
    buf[n] = 0;
    *out = buf;
    *out_len = n;
    return true;
}

char *svc_base64_encode(const uint8_t *in, size_t len)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (len > (SIZE_MAX - 8) / 4 * 3)
        return NULL;
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = tab[v >> 18];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = tab[(v >> 6) & 63];
        out[o++] = tab[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = tab[v >> 18];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = tab[v >> 18];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = tab[(v >> 6) & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

/* ---- SHA-256 (the engine's, through tessera.h) ---- */

void svc_sha256_hex(const void *data, size_t len, char hex[65])
{
    uint8_t d[32];
    tsr_sha256(data, len, d);
    tsr_sha256_hex(d, hex);
}

/* ---- CRC-32 ---- */

uint32_t svc_crc32(const void *data, size_t len)
{
    static uint32_t table[256];
    static int ready; /* benign race: every thread computes the same table */
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    const uint8_t *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++)
        crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

/* ---- UTF-8 ---- */

bool svc_utf8_valid(const char *s, size_t len, uint32_t *max_cp)
{
    const unsigned char *p = (const unsigned char *)s;
    uint32_t top = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t c = p[i];
        int n;
        uint32_t min;
        if (c < 0x80) {
            i++;
            if (c > top)
                top = c;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1;
            c &= 0x1F;
            min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2;
            c &= 0x0F;
            min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3;
            c &= 0x07;
            min = 0x10000;
        } else {
            return false;
        }
        if (len - i <= (size_t)n)
            return false;
        for (int k = 1; k <= n; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
            c = c << 6 | (p[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return false;
        if (c > top)
            top = c;
        i += (size_t)n + 1;
    }
    if (max_cp)
        *max_cp = top;
    return true;
}

/* ---- files ---- */

int svc_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

int svc_mkdirs(const char *path)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char keep = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return -errno;
            buf[i] = keep;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int svc_write_file_atomic(const char *path, const void *data, size_t len)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    const uint8_t *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int e = -errno;
            close(fd);
            unlink(tmp);
            return e;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = -errno;
        close(fd);
        unlink(tmp);
        return e;
    }
    if (close(fd) != 0) {
        int e = -errno;
        unlink(tmp);
        return e;
    }
    if (rename(tmp, path) != 0) {
        int e = -errno;
        unlink(tmp);
        return e;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    return svc_fsync_dir(dir);
}

int svc_read_file(const char *path, char **out, size_t *len, size_t max_len)
{
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno ? -errno : -EINVAL;
        close(fd);
        return e;
    }
    if ((uint64_t)st.st_size > max_len) {
        close(fd);
        return -EFBIG;
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    *out = buf;
    *len = got;
    return 0;
}

int svc_peer_state(int fd)
{
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0)
        return SVC_PEER_SENT;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return SVC_PEER_CLOSED;
    return SVC_PEER_QUIET;
}
