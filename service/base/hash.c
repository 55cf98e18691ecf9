/*
 * service/base/hash.c - see hash.h.
 */
#include "hash.h"

#include "tessera.h"

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
