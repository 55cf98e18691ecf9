/*
 * fuzz/fuzz_safetensors.c - libFuzzer driver for the safetensors reader.
 *
 * Why: the reader's contract is "after a successful open every entry is
 * safe to read".  libFuzzer hands us an exact-size heap copy of each input,
 * so ASan turns any read past the image into a crash; this driver opens
 * the bytes with tsr_st_open_memory() and, when that succeeds, touches every
 * byte of every tensor and checks the index's invariants (sorted names,
 * find() returns the entry, sizes consistent, data inside the section),
 * trapping if one fails.  Failures to open are the expected outcome for
 * most inputs and are simply ignored (the message must still be a string).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/safetensors.h"
#include "tessera.h"

#define CHECK(c)                  \
    do {                          \
        if (!(c))                 \
            __builtin_trap();     \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tsr_safetensors *st = NULL;
    int rc = tsr_st_open_memory(data, size, "fuzz.safetensors", &st);
    if (rc < 0) {
        CHECK(st == NULL);
        CHECK(strlen(tsr_last_error()) > 0);
        return 0;
    }
    const uint8_t *section = size ? data + 8 + tsr_st_header_size(st) : data;
    CHECK(8 + tsr_st_header_size(st) + tsr_st_data_size(st) == size);
    volatile uint8_t sink = 0;
    size_t n = tsr_st_count(st);
    for (size_t i = 0; i < n; i++) {
        const tsr_st_entry *e = tsr_st_entry_at(st, i);
        CHECK(e != NULL && e->name != NULL);
        if (i > 0)
            CHECK(strcmp(tsr_st_entry_at(st, i - 1)->name, e->name) < 0);
        CHECK(tsr_st_find(st, e->name) == e);
        CHECK(e->ndim >= 0 && e->ndim <= TSR_ST_MAX_DIMS);
        CHECK(tsr_st_numel(e) * tsr_st_dtype_size(e->dtype) == e->nbytes);
        CHECK(e->offset <= tsr_st_data_size(st) && e->nbytes <= tsr_st_data_size(st) - e->offset);
        const uint8_t *p = tsr_st_data(st, e);
        CHECK(p == section + e->offset);
        for (uint64_t j = 0; j < e->nbytes; j++)
            sink ^= p[j];
        (void)tsr_st_data_aligned(st, e);
        tsr_dtype td;
        (void)tsr_st_dtype_to_tsr(e->dtype, &td);
    }
    CHECK(tsr_st_entry_at(st, n) == NULL);
    size_t nm = tsr_st_metadata_count(st);
    for (size_t i = 0; i < nm; i++) {
        const char *k = NULL, *v = NULL;
        CHECK(tsr_st_metadata_at(st, i, &k, &v) && k && v);
        CHECK(tsr_st_metadata(st, k) == v);
        sink ^= (uint8_t)strlen(v);
    }
    (void)sink;
    tsr_st_close(st);
    return 0;
}
