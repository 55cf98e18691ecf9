/*
 * fuzz/fuzz_redis_url.c - the --queue URL parser (service/queue/redis/redis_url.c):
 * any bytes, no crash, and an accepted URL has a host and a port in range.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "redis_url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    svc_redis_url u;
    char err[128];
    if (svc_redis_url_parse(s, &u, err, sizeof err) == 0) {
        assert(u.host[0] != '\0');
        assert(u.port >= 1 && u.port <= 65535);
        assert(u.db >= 0 && u.db <= 65535);
    } else {
        assert(err[0] != '\0');
    }
    free(s);
    return 0;
}
