/*
 * core/safetensors.h - a validating, zero-copy safetensors reader (and a
 * writer for `tessera convert` and tests).
 *
 * Why: model files come from strangers.  The reader maps the file with mmap
 * and trusts nothing: the header length is bounded, the JSON is parsed by
 * cJSON, every dtype must be a known safetensors dtype, every shape product
 * times the dtype size must equal the byte length (with overflow checks),
 * every [begin, end) must lie inside the data section, and no two tensors
 * may overlap.  After tsr_st_open() succeeds every entry is safe to read.
 * Failures name the file and the problem through tsr_errorf().
 *
 * All dtypes of the format are recognised (so real checkpoints with i64
 * position_ids or 0-d scalars open); only F32/F16/BF16 map to tsr_dtype.
 *
 * Error codes from opening: TSR_ERR_FORMAT for a malformed or truncated
 * file (bad JSON, wrong types, negative dims, offsets outside the data
 * section, length mismatch, overlap, duplicate names, non-string metadata),
 * TSR_ERR_RANGE for sizes beyond the limits (header length above
 * TSR_ST_MAX_HEADER, more than TSR_ST_MAX_DIMS dims, element or byte counts
 * that overflow, numbers above 2^53), TSR_ERR_UNSUPPORTED for an unknown
 * dtype, TSR_ERR_NOT_FOUND / TSR_ERR_IO for the file system.
 */
#ifndef TSR_CORE_SAFETENSORS_H
#define TSR_CORE_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

#define TSR_ST_MAX_DIMS 8
#define TSR_ST_MAX_HEADER (100u << 20) /* 100 MiB, as the reference implementation */

typedef enum tsr_st_dtype {
    TSR_ST_BOOL,
    TSR_ST_U8,
    TSR_ST_I8,
    TSR_ST_F8_E4M3,
    TSR_ST_F8_E5M2,
    TSR_ST_I16,
    TSR_ST_U16,
    TSR_ST_F16,
    TSR_ST_BF16,
    TSR_ST_I32,
    TSR_ST_U32,
    TSR_ST_F32,
    TSR_ST_F64,
    TSR_ST_I64,
    TSR_ST_U64,
    TSR_ST_DTYPE_COUNT
} tsr_st_dtype;

typedef struct tsr_st_entry {
    const char *name;   /* borrowed from the reader */
    tsr_st_dtype dtype;
    int ndim;           /* 0 for scalars */
    int64_t shape[TSR_ST_MAX_DIMS];
    uint64_t offset;    /* from the start of the data section */
    uint64_t nbytes;
} tsr_st_entry;

typedef struct tsr_safetensors tsr_safetensors;

/* Open and validate a file (mmap, read-only). Owned: tsr_st_close(). */
int tsr_st_open(const char *path, tsr_safetensors **out);
/* Validate an in-memory image (borrowed; must outlive the reader).  `label`
 * names it in error messages.  Used by the fuzzer and tests. */
int tsr_st_open_memory(const void *data, size_t size, const char *label, tsr_safetensors **out);
void tsr_st_close(tsr_safetensors *st);

const char *tsr_st_path(const tsr_safetensors *st);
size_t tsr_st_count(const tsr_safetensors *st);
/* Entries are sorted by name. */
const tsr_st_entry *tsr_st_entry_at(const tsr_safetensors *st, size_t i);
/* NULL if absent (binary search). */
const tsr_st_entry *tsr_st_find(const tsr_safetensors *st, const char *name);
const void *tsr_st_data(const tsr_safetensors *st, const tsr_st_entry *e);
/* Value of "__metadata__"[key], or NULL. */
const char *tsr_st_metadata(const tsr_safetensors *st, const char *key);

/* Number of "__metadata__" entries, and the i-th pair (borrowed); false
 * when i is out of range. */
size_t tsr_st_metadata_count(const tsr_safetensors *st);
bool tsr_st_metadata_at(const tsr_safetensors *st, size_t i, const char **key,
                        const char **value);
/* Sizes of the JSON header (padding included) and of the data section. */
uint64_t tsr_st_header_size(const tsr_safetensors *st);
uint64_t tsr_st_data_size(const tsr_safetensors *st);
/* Whether tsr_st_data() is aligned to the dtype size.  Files written by the
 * reference implementation (and tsr_st_write) pad the header to 8 bytes so
 * every tensor is aligned, but the format does not require it: when this is
 * false, read elements with memcpy rather than through a typed pointer. */
bool tsr_st_data_aligned(const tsr_safetensors *st, const tsr_st_entry *e);
/* Tell the kernel the mapped pages of this tensor will not be read soon
 * (MADV_DONTNEED): they leave the process's RSS and are read back from the
 * file if touched again.  For loaders that copy weights out once. */
void tsr_st_release(const tsr_safetensors *st, const tsr_st_entry *e);

const char *tsr_st_dtype_name(tsr_st_dtype dtype); /* "F16" */
/* "F16" -> TSR_ST_F16; false for an unknown name. */
bool tsr_st_dtype_from_name(const char *name, tsr_st_dtype *out);
size_t tsr_st_dtype_size(tsr_st_dtype dtype);
/* Map to a compute dtype; false for non-float dtypes. */
bool tsr_st_dtype_to_tsr(tsr_st_dtype dtype, tsr_dtype *out);
uint64_t tsr_st_numel(const tsr_st_entry *e);

/* Writing.  Tensors are written in the order given, 8-byte aligned header. */
typedef struct tsr_st_write_entry {
    const char *name;
    tsr_st_dtype dtype;
    int ndim;
    int64_t shape[TSR_ST_MAX_DIMS];
    const void *data; /* borrowed; nbytes = numel * dtype size */
} tsr_st_write_entry;

/* metadata: NULL or pairs {key, value, key, value, ..., NULL}. Writes to a
 * temporary file and renames, so a failure never leaves a partial file. */
int tsr_st_write(const char *path, const tsr_st_write_entry *entries, size_t n,
                 const char *const *metadata);

#endif
