/*
 * fuzz/fuzz_json_cost.c - libFuzzer target for the COST of the strict JSON
 * reader (service/base/json.c), not only its crashes.
 *
 * Why: request bodies are parsed on the event loop, so a body that costs
 * time or memory out of proportion to its size stalls or starves every
 * client (issue 61: 40,000 distinct keys took 4-5 s, a 16 MiB array 912 MB).
 * A crash-only target never notices either.  This one checks, per input:
 *   memory: the peak of the bytes live through cJSON's hooks (a counting
 *           malloc/free installed with cJSON_InitHooks, each block charged
 *           MEM_PER_ALLOC more for the allocator's own overhead) stays below
 *           MEM_PER_BYTE * len + MEM_FIXED, and below the absolute bound the
 *           SVC_JSON_MAX_VALUES cap gives (MEM_BIG_FIXED + 2 * len); every
 *           byte is handed back by cJSON_Delete;
 *   time:   the thread's CPU time for parse + delete stays below
 *           TIME_FIXED_NS + TIME_PER_BYTE_NS * len (CPU time, so a busy
 *           machine does not make it flake; generous for ASan + UBSan);
 *   errors: a refused document has a message.
 * A bound exceeded is an abort() with the figures, so libFuzzer saves the
 * input.  TSR_FUZZ_COST_VERBOSE=1 prints every input's figures (replay the
 * seeds with -runs=0 to see them).
 *
 * Inputs: the first byte picks how the rest is read.
 *   even  the rest is the document;
 *   odd   a template "prefix|unit|suffix": the unit is repeated (each copy's
 *         '#' bytes replaced by the copy's number) until the document
 *         reaches EXPAND_SMALL bytes (bit 1 clear) or EXPAND_BIG (bit 1
 *         set), so that a few bytes of input stand for the big documents
 *         where superlinear costs show (libFuzzer's inputs stay small).
 *         EXPAND_SMALL keeps most runs fast and is big enough for a
 *         quadratic time to show; EXPAND_BIG is past the size where the
 *         absolute memory bound becomes the lower one.  Without two '|'
 *         the rest is read like even.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MEM_PER_ALLOC 16u          /* a malloc'd block's header and rounding */
#define MEM_PER_BYTE 64u           /* worst case is ~41: "0," is an 82-byte item */
#define MEM_FIXED (64u * 1024u)    /* the first key set, the root, ... */
#define MEM_BIG_FIXED ((size_t)SVC_JSON_MAX_VALUES * 160u)
#define TIME_FIXED_NS 50000000ull  /* 50 ms */
#define TIME_PER_BYTE_NS 2000ull   /* 2 us a byte: ~25x the ASan build's rate */
#define EXPAND_SMALL (64u * 1024u)
#define EXPAND_BIG (1024u * 1024u) /* past ~270 KB, where MEM_BIG_FIXED + 2 * len is lower */
#define EXPAND_MAX_COPIES 200000u

/* ---- counting hooks ---------------------------------------------------- */
typedef union block_head {
    size_t size;
    max_align_t align;
} block_head;

static size_t g_live, g_peak;

static void *count_malloc(size_t n)
{
    block_head *h = malloc(sizeof *h + n);
    if (!h)
        return NULL;
    h->size = n;
    g_live += n + MEM_PER_ALLOC;
    if (g_live > g_peak)
        g_peak = g_live;
    return h + 1;
}

static void count_free(void *p)
{
    if (!p)
        return;
    block_head *h = (block_head *)p - 1;
    g_live -= h->size + MEM_PER_ALLOC;
    free(h);
}

/* ---- templates --------------------------------------------------------- */
static char *g_doc;
static size_t g_doc_cap;

static int doc_put(size_t *len, const uint8_t *s, size_t n)
{
    if (n == 0)
        return 0;
    if (*len + n > g_doc_cap) {
        size_t cap = g_doc_cap ? g_doc_cap : 4096;
        while (cap < *len + n)
            cap *= 2;
        char *d = realloc(g_doc, cap);
        if (!d)
            return -1;
        g_doc = d;
        g_doc_cap = cap;
    }
    memcpy(g_doc + *len, s, n);
    *len += n;
    return 0;
}

/* Builds the document of a template into g_doc; -1 when data is no template. */
static int expand(const uint8_t *data, size_t size, size_t target, size_t *out_len)
{
    const uint8_t *bar1 = memchr(data, '|', size);
    if (!bar1)
        return -1;
    const uint8_t *bar2 = memchr(bar1 + 1, '|', size - (size_t)(bar1 + 1 - data));
    if (!bar2)
        return -1;
    const uint8_t *unit = bar1 + 1, *suffix = bar2 + 1;
    size_t unit_len = (size_t)(bar2 - unit), suffix_len = size - (size_t)(suffix - data);
    size_t len = 0;
    if (doc_put(&len, data, (size_t)(bar1 - data)) < 0)
        return -1;
    bool numbered = memchr(unit, '#', unit_len) != NULL;
    for (unsigned copy = 0; unit_len && copy < EXPAND_MAX_COPIES && len < target;
         copy++) {
        if (!numbered) {
            if (doc_put(&len, unit, unit_len) < 0)
                return -1;
            continue;
        }
        char num[16];
        int nl = snprintf(num, sizeof num, "%u", copy);
        const uint8_t *u = unit, *u_end = unit + unit_len;
        while (u < u_end) {
            const uint8_t *hash = memchr(u, '#', (size_t)(u_end - u));
            const uint8_t *stop = hash ? hash : u_end;
            if (doc_put(&len, u, (size_t)(stop - u)) < 0 ||
                (hash && doc_put(&len, (const uint8_t *)num, (size_t)nl) < 0))
                return -1;
            u = hash ? hash + 1 : u_end;
        }
    }
    if (doc_put(&len, suffix, suffix_len) < 0)
        return -1;
    *out_len = len;
    return 0;
}

/* ---- the checks --------------------------------------------------------- */
static uint64_t thread_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void over(const char *what, unsigned long long got, unsigned long long bound, size_t len,
                 const char *err)
{
    fprintf(stderr,
            "fuzz_json_cost: %s %llu over its bound %llu for a %zu-byte document "
            "(parse: %s)\n",
            what, got, bound, len, err[0] ? err : "ok");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int hooked;
    if (!hooked) {
        cJSON_Hooks hooks = {count_malloc, count_free};
        cJSON_InitHooks(&hooks);
        hooked = 1;
    }
    if (size < 1)
        return 0;
    const char *doc = (const char *)data + 1;
    size_t len = size - 1;
    size_t target = data[0] & 2 ? EXPAND_BIG : EXPAND_SMALL;
    if ((data[0] & 1) && expand(data + 1, size - 1, target, &len) == 0)
        doc = g_doc;
    else
        len = size - 1;

    char err[256];
    g_live = g_peak = 0;
    uint64_t t0 = thread_ns();
    cJSON *v = svc_json_parse(doc, len, err, sizeof err);
    size_t peak = g_peak;
    cJSON_Delete(v);
    uint64_t ns = thread_ns() - t0;

    if (getenv("TSR_FUZZ_COST_VERBOSE"))
        fprintf(stderr,
                "fuzz_json_cost: %zu bytes, peak %zu bytes (%.1f a byte), %.3f ms CPU: %s\n",
                len, peak, len ? (double)peak / (double)len : 0.0, (double)ns / 1e6,
                v ? "parsed" : err);
    if (!v && err[0] == '\0')
        over("a refusal without a message:", 0, 0, len, err);
    if (g_live != 0)
        over("bytes left allocated after cJSON_Delete:", g_live, 0, len, err);
    size_t mem_bound = MEM_FIXED + (size_t)MEM_PER_BYTE * len;
    size_t big_bound = MEM_BIG_FIXED + 2 * len;
    if (big_bound < mem_bound)
        mem_bound = big_bound;
    if (peak > mem_bound)
        over("peak bytes", peak, mem_bound, len, err);
    uint64_t time_bound = TIME_FIXED_NS + TIME_PER_BYTE_NS * (uint64_t)len;
    if (ns > time_bound)
        over("CPU ns", ns, time_bound, len, err);
    return 0;
}
