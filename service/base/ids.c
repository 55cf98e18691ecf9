/*
 * service/base/ids.c - see ids.h.
 */
#include "ids.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

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
