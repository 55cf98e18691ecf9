/*
 * tests/safetensors/test_safetensors.c - the safetensors reader and writer.
 *
 * Why these cases: the reader's promise is that after tsr_st_open*()
 * succeeds every entry is safe to read, and that every hostile file fails
 * with the right code and a message naming the problem.  So each rule of
 * core/safetensors.c has one hostile image here, built in memory (a JSON
 * header and a data section assembled in C), checked for its code and for
 * a word of its message.  Valid files come from the writer (round trips of
 * every float dtype) and from the Python `safetensors` package
 * (tests/data/safetensors/python_small.safetensors, made by
 * tools/reference/make_safetensors_cases.py), whose exact values are
 * checked here.  Run under ASan/UBSan, the hostile cases also prove the
 * reader does not over-read.
 */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "tessera.h"
#include "test.h"

/* ---- helpers ---- */

/* An image: 8-byte little-endian `hlen`, then the header text, then `data`.
 * Owned by the caller (free).  The header is copied into its own malloc'd
 * block first so that ASan catches a read past its end. */
static uint8_t *image_raw(uint64_t hlen, const char *header, const void *data, size_t dlen,
                          size_t *size)
{
    size_t htext = strlen(header);
    *size = 8 + htext + dlen;
    uint8_t *buf = malloc(*size ? *size : 1);
    if (!buf)
        return NULL;
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + 8, header, htext);
    if (dlen)
        memcpy(buf + 8 + htext, data, dlen);
    return buf;
}

static uint8_t *image(const char *header, const void *data, size_t dlen, size_t *size)
{
    return image_raw(strlen(header), header, data, dlen, size);
}

/* Open an image and expect `code`; on failure also expect `word` in the
 * message (when non-NULL). */
static int expect_open(const char *header, const void *data, size_t dlen, int code,
                       const char *word)
{
    size_t size;
    uint8_t *buf = image(header, data, dlen, &size);
    ASSERT_TRUE(buf != NULL);
    tsr_safetensors *st = NULL;
    tsr_error_clear();
    int rc = tsr_st_open_memory(buf, size, "hostile.safetensors", &st);
    int ok = 1;
    if (rc != code) {
        fprintf(stderr, "header %s: got %d (%s: %s), want %d\n", header, rc, tsr_strerror(rc),
                tsr_last_error(), code);
    } else if (code != 0 && word && !strstr(tsr_last_error(), word)) {
        fprintf(stderr, "header %s: message '%s' lacks '%s'\n", header, tsr_last_error(), word);
    } else if (code != 0 && !strstr(tsr_last_error(), "hostile.safetensors")) {
        fprintf(stderr, "message '%s' does not name the file\n", tsr_last_error());
    } else if (code != 0 && st != NULL) {
        fprintf(stderr, "failed open left a reader\n");
    } else {
        ok = 0;
    }
    if (st) {
        /* A valid image must be readable end to end. */
        for (size_t i = 0; i < tsr_st_count(st); i++) {
            const tsr_st_entry *e = tsr_st_entry_at(st, i);
            const uint8_t *p = tsr_st_data(st, e);
            volatile uint8_t sink = 0;
            for (uint64_t j = 0; j < e->nbytes; j++)
                sink ^= p[j];
            (void)sink;
        }
        tsr_st_close(st);
    }
    free(buf);
    return ok;
}

#define EXPECT_OPEN(h, d, n, code, word) ASSERT_EQ(expect_open((h), (d), (n), (code), (word)), 0)

static const char *tmp_path(const char *name, char *buf, size_t size)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, size, "%s/tsr_st_%d_%s", dir ? dir : "/tmp", (int)getpid(), name);
    return buf;
}

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- valid files ---- */

static int test_round_trip(void)
{
    /* Every float dtype, plus an integer tensor, a scalar and an empty one. */
    float f32[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 65504.0f};
    uint16_t f16[6], bf16[6];
    for (int i = 0; i < 6; i++) {
        f16[i] = tsr_f32_to_f16(f32[i]);
        bf16[i] = tsr_f32_to_bf16(f32[i]);
    }
    double f64[3] = {1.0 / 3.0, -1e300, 2.0};
    uint8_t f8a[4] = {0x00, 0x38, 0xb8, 0x7e}, f8b[4] = {0x3c, 0xbc, 0x00, 0x7b};
    int64_t i64[5] = {0, 1, -1, INT64_MAX, INT64_MIN};
    float scalar = 4.6052f;
    char name_quote[] = "odd \"name\"\\with\tescapes";
    tsr_st_write_entry w[] = {
        {"f32", TSR_ST_F32, 2, {2, 3}, f32},
        {"f16", TSR_ST_F16, 2, {3, 2}, f16},
        {"bf16", TSR_ST_BF16, 1, {6}, bf16},
        {"f64", TSR_ST_F64, 1, {3}, f64},
        {"f8_e4m3", TSR_ST_F8_E4M3, 2, {2, 2}, f8a},
        {"f8_e5m2", TSR_ST_F8_E5M2, 3, {1, 2, 2}, f8b},
        {"ids", TSR_ST_I64, 2, {1, 5}, i64},
        {"scalar", TSR_ST_F32, 0, {0}, &scalar},
        {"empty", TSR_ST_F16, 2, {0, 7}, NULL},
        {name_quote, TSR_ST_U8, 1, {1}, "x"},
    };
    size_t n = sizeof w / sizeof w[0];
    const char *meta[] = {"format", "pt", "quote\"key", "line\nbreak", NULL};
    char path[512], tmp[600];
    tmp_path("round_trip.safetensors", path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ASSERT_OK(tsr_st_write(path, w, n, meta));
    ASSERT_TRUE(!file_exists(tmp));

    tsr_safetensors *st = NULL;
    ASSERT_OK(tsr_st_open(path, &st));
    int rc = 0;
    if (tsr_st_count(st) != n) {
        fprintf(stderr, "count %zu != %zu\n", tsr_st_count(st), n);
        rc = 1;
    }
    if (tsr_st_header_size(st) % 8 != 0) {
        fprintf(stderr, "header size %llu not padded to 8\n",
                (unsigned long long)tsr_st_header_size(st));
        rc = 1;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        const tsr_st_entry *e = tsr_st_find(st, w[i].name);
        if (!e) {
            fprintf(stderr, "'%s' not found\n", w[i].name);
            rc = 1;
            break;
        }
        uint64_t nb = tsr_st_dtype_size(w[i].dtype);
        for (int d = 0; d < w[i].ndim; d++)
            nb *= (uint64_t)w[i].shape[d];
        if (e->dtype != w[i].dtype || e->ndim != w[i].ndim || e->nbytes != nb ||
            tsr_st_numel(e) * tsr_st_dtype_size(e->dtype) != nb ||
            (nb && memcmp(tsr_st_data(st, e), w[i].data, nb) != 0) ||
            !tsr_st_data_aligned(st, e)) {
            fprintf(stderr, "'%s' differs after the round trip\n", w[i].name);
            rc = 1;
        }
        for (int d = 0; d < e->ndim; d++)
            if (e->shape[d] != w[i].shape[d])
                rc = 1;
    }
    /* Entries come back sorted by name. */
    for (size_t i = 1; i < tsr_st_count(st); i++)
        if (strcmp(tsr_st_entry_at(st, i - 1)->name, tsr_st_entry_at(st, i)->name) >= 0)
            rc = 1;
    if (!tsr_st_metadata(st, "format") || strcmp(tsr_st_metadata(st, "format"), "pt") != 0 ||
        !tsr_st_metadata(st, "quote\"key") ||
        strcmp(tsr_st_metadata(st, "quote\"key"), "line\nbreak") != 0 ||
        tsr_st_metadata(st, "absent") != NULL || tsr_st_metadata_count(st) != 2)
        rc = 1;
    if (tsr_st_find(st, "nope") != NULL || tsr_st_entry_at(st, n) != NULL)
        rc = 1;
    tsr_st_close(st);
    unlink(path);
    return rc;
}

static int test_write_many_and_find(void)
{
    /* 300 tensors written in reverse order: binary search must find each. */
    enum { N = 300 };
    tsr_st_write_entry *w = calloc(N, sizeof *w);
    char(*names)[32] = calloc(N, sizeof *names);
    uint32_t *vals = calloc(N, sizeof *vals);
    ASSERT_TRUE(w && names && vals);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "layer.%03d.weight", N - 1 - i);
        vals[i] = (uint32_t)(N - 1 - i) * 2654435761u;
        w[i] = (tsr_st_write_entry){names[i], TSR_ST_U32, 1, {1}, &vals[i]};
    }
    char path[512];
    tmp_path("many.safetensors", path, sizeof path);
    int rc = tsr_st_write(path, w, N, NULL);
    tsr_safetensors *st = NULL;
    if (rc == 0)
        rc = tsr_st_open(path, &st);
    int bad = rc != 0;
    for (int k = 0; k < N && st && !bad; k++) {
        char name[32];
        snprintf(name, sizeof name, "layer.%03d.weight", k);
        const tsr_st_entry *e = tsr_st_find(st, name);
        uint32_t v = 0;
        if (!e || e->nbytes != 4) {
            bad = 1;
            break;
        }
        memcpy(&v, tsr_st_data(st, e), 4);
        bad = v != (uint32_t)k * 2654435761u;
    }
    if (st && tsr_st_metadata_count(st) != 0)
        bad = 1;
    tsr_st_close(st);
    unlink(path);
    free(w);
    free(names);
    free(vals);
    return bad;
}

static int test_write_rejects(void)
{
    float x[2] = {1, 2};
    char path[512], tmp[600];
    tmp_path("rejected.safetensors", path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(path);
    tsr_st_write_entry dup[] = {{"a", TSR_ST_F32, 1, {2}, x}, {"a", TSR_ST_F32, 1, {2}, x}};
    ASSERT_EQ(tsr_st_write(path, dup, 2, NULL), TSR_ERR_INVALID);
    ASSERT_TRUE(strstr(tsr_last_error(), "duplicate") != NULL);
    tsr_st_write_entry neg[] = {{"a", TSR_ST_F32, 1, {-2}, x}};
    ASSERT_EQ(tsr_st_write(path, neg, 1, NULL), TSR_ERR_RANGE);
    tsr_st_write_entry big[] = {{"a", TSR_ST_F32, 3, {1 << 30, 1 << 30, 1 << 30}, x}};
    ASSERT_EQ(tsr_st_write(path, big, 1, NULL), TSR_ERR_RANGE);
    tsr_st_write_entry nodata[] = {{"a", TSR_ST_F32, 1, {2}, NULL}};
    ASSERT_EQ(tsr_st_write(path, nodata, 1, NULL), TSR_ERR_INVALID);
    tsr_st_write_entry reserved[] = {{"__metadata__", TSR_ST_F32, 1, {2}, x}};
    ASSERT_EQ(tsr_st_write(path, reserved, 1, NULL), TSR_ERR_INVALID);
    tsr_st_write_entry baddt[] = {{"a", TSR_ST_DTYPE_COUNT, 1, {2}, x}};
    ASSERT_EQ(tsr_st_write(path, baddt, 1, NULL), TSR_ERR_INVALID);
    tsr_st_write_entry dims[] = {{"a", TSR_ST_F32, TSR_ST_MAX_DIMS + 1, {1}, x}};
    ASSERT_EQ(tsr_st_write(path, dims, 1, NULL), TSR_ERR_INVALID);
    tsr_st_write_entry ok[] = {{"a", TSR_ST_F32, 1, {2}, x}};
    const char *dupmeta[] = {"k", "1", "k", "2", NULL};
    ASSERT_EQ(tsr_st_write(path, ok, 1, dupmeta), TSR_ERR_INVALID);
    const char *nullval[] = {"k", NULL, NULL};
    ASSERT_EQ(tsr_st_write(path, ok, 1, nullval), TSR_ERR_INVALID);
    /* Nothing was written, not even a temporary. */
    ASSERT_TRUE(!file_exists(path));
    ASSERT_TRUE(!file_exists(tmp));
    /* An unwritable directory fails with an I/O error and leaves nothing. */
    ASSERT_EQ(tsr_st_write("/nonexistent-dir/x.safetensors", ok, 1, NULL), TSR_ERR_IO);
    return 0;
}

static int test_python_file(void)
{
    char path[512];
    tsr_test_path("safetensors/python_small.safetensors", path, sizeof path);
    tsr_safetensors *st = NULL;
    ASSERT_OK(tsr_st_open(path, &st));
    int rc = 1;
    const tsr_st_entry *e;
    if (tsr_st_count(st) != 10)
        goto done;
    if (!tsr_st_metadata(st, "format") || strcmp(tsr_st_metadata(st, "format"), "pt") != 0 ||
        !tsr_st_metadata(st, "note") || strcmp(tsr_st_metadata(st, "note"), "tessera test") != 0)
        goto done;

    /* conv_in.weight: F32 [2,3,2,2] = arange(24) * 0.5 */
    e = tsr_st_find(st, "conv_in.weight");
    if (!e || e->dtype != TSR_ST_F32 || e->ndim != 4 || e->shape[0] != 2 || e->shape[1] != 3 ||
        e->shape[3] != 2 || tsr_st_numel(e) != 24 || !tsr_st_data_aligned(st, e))
        goto done;
    for (int i = 0; i < 24; i++) {
        float v;
        memcpy(&v, (const uint8_t *)tsr_st_data(st, e) + 4 * i, 4);
        if (v != 0.5f * (float)i)
            goto done;
    }
    tsr_dtype td;
    if (!tsr_st_dtype_to_tsr(e->dtype, &td) || td != TSR_F32)
        goto done;

    /* norm.weight: F16 arange(6) - 2 */
    e = tsr_st_find(st, "norm.weight");
    if (!e || e->dtype != TSR_ST_F16 || e->nbytes != 12)
        goto done;
    for (int i = 0; i < 6; i++) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)tsr_st_data(st, e) + 2 * i, 2);
        if (tsr_f16_to_f32(h) != (float)(i - 2))
            goto done;
    }
    /* proj.bf16: BF16 [[1,2],[3,4]] */
    e = tsr_st_find(st, "proj.bf16");
    if (!e || e->dtype != TSR_ST_BF16 || e->ndim != 2)
        goto done;
    for (int i = 0; i < 4; i++) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)tsr_st_data(st, e) + 2 * i, 2);
        if (tsr_bf16_to_f32(h) != (float)(i + 1))
            goto done;
    }
    /* position_ids: I64 [1, 77] = arange(77); not a compute dtype */
    e = tsr_st_find(st, "text_model.embeddings.position_ids");
    if (!e || e->dtype != TSR_ST_I64 || e->ndim != 2 || e->shape[1] != 77 ||
        tsr_st_dtype_to_tsr(e->dtype, &td))
        goto done;
    for (int i = 0; i < 77; i++) {
        int64_t v;
        memcpy(&v, (const uint8_t *)tsr_st_data(st, e) + 8 * i, 8);
        if (v != i)
            goto done;
    }
    /* logit_scale: a 0-d F32 scalar */
    e = tsr_st_find(st, "logit_scale");
    if (!e || e->ndim != 0 || tsr_st_numel(e) != 1 || e->nbytes != 4)
        goto done;
    float s;
    memcpy(&s, tsr_st_data(st, e), 4);
    if (s != 4.6052f)
        goto done;
    /* double, mask, bytes, i32, empty */
    e = tsr_st_find(st, "double");
    double d[2];
    if (!e || e->dtype != TSR_ST_F64)
        goto done;
    memcpy(d, tsr_st_data(st, e), 16);
    if (d[0] != 1.5 || d[1] != -2.25)
        goto done;
    e = tsr_st_find(st, "mask");
    if (!e || e->dtype != TSR_ST_BOOL || e->nbytes != 3 ||
        memcmp(tsr_st_data(st, e), "\1\0\1", 3) != 0)
        goto done;
    e = tsr_st_find(st, "bytes");
    if (!e || e->dtype != TSR_ST_U8 || memcmp(tsr_st_data(st, e), "\0\1\2\3\4", 5) != 0)
        goto done;
    e = tsr_st_find(st, "i32");
    int32_t iv[3];
    if (!e || e->dtype != TSR_ST_I32)
        goto done;
    memcpy(iv, tsr_st_data(st, e), 12);
    if (iv[0] != -7 || iv[1] != 0 || iv[2] != 7)
        goto done;
    e = tsr_st_find(st, "empty");
    if (!e || e->nbytes != 0 || e->ndim != 2 || e->shape[0] != 0 || e->shape[1] != 4)
        goto done;
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "python_small.safetensors: unexpected contents\n");
    tsr_st_close(st);
    return rc;
}

static int test_zero_data_section(void)
{
    /* 0-element tensors and no data at all: valid. */
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                    "\"b\":{\"dtype\":\"F16\",\"shape\":[2,0,3],\"data_offsets\":[0,0]}}";
    size_t size;
    uint8_t *buf = image(h, NULL, 0, &size);
    tsr_safetensors *st = NULL;
    int rc = tsr_st_open_memory(buf, size, "zero.safetensors", &st);
    int bad = rc != 0 || tsr_st_count(st) != 2 || tsr_st_data_size(st) != 0 ||
              tsr_st_find(st, "b")->ndim != 3 || tsr_st_numel(tsr_st_find(st, "b")) != 0;
    if (rc)
        fprintf(stderr, "%s\n", tsr_last_error());
    tsr_st_close(st);
    free(buf);
    /* An empty header object with no tensors is valid too. */
    EXPECT_OPEN("{}      ", NULL, 0, TSR_OK, NULL);
    EXPECT_OPEN("{\"__metadata__\":{}}", NULL, 0, TSR_OK, NULL);
    return bad;
}

static int test_gaps_and_unaligned(void)
{
    /* A gap between tensors and an unpadded header are both allowed. */
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}", "abc", 3,
                TSR_OK, NULL);
    const char *h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    ASSERT_TRUE(strlen(h) % 4 != 0);
    size_t size;
    /* Allocate one more so that the image itself is 8-aligned by malloc. */
    uint8_t *buf = image(h, "\0\0\x80?", 4, &size);
    tsr_safetensors *st = NULL;
    ASSERT_OK(tsr_st_open_memory(buf, size, "unaligned.safetensors", &st));
    const tsr_st_entry *e = tsr_st_find(st, "x");
    int bad = !e || tsr_st_data_aligned(st, e);
    float v = 0;
    memcpy(&v, tsr_st_data(st, e), 4);
    bad |= v != 1.0f;
    tsr_st_close(st);
    free(buf);
    return bad;
}

/* ---- hostile images ---- */

static int test_empty_file(void)
{
    tsr_safetensors *st = NULL;
    ASSERT_EQ(tsr_st_open_memory("", 0, "empty.safetensors", &st), TSR_ERR_FORMAT);
    ASSERT_TRUE(st == NULL && strstr(tsr_last_error(), "empty") != NULL);
    ASSERT_EQ(tsr_st_open_memory(NULL, 0, "empty.safetensors", &st), TSR_ERR_FORMAT);
    /* The same through the file system (mmap of 0 bytes must be avoided). */
    char path[512];
    tmp_path("empty.safetensors", path, sizeof path);
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    fclose(f);
    int rc = tsr_st_open(path, &st);
    unlink(path);
    ASSERT_EQ(rc, TSR_ERR_FORMAT);
    ASSERT_EQ(tsr_st_open("/nonexistent/none.safetensors", &st), TSR_ERR_NOT_FOUND);
    ASSERT_EQ(tsr_st_open("/", &st), TSR_ERR_IO);
    return 0;
}

static int test_truncated_header(void)
{
    tsr_safetensors *st = NULL;
    for (size_t n = 1; n < 8; n++) {
        uint8_t *buf = malloc(n);
        ASSERT_TRUE(buf);
        memset(buf, 0, n);
        int rc = tsr_st_open_memory(buf, n, "short.safetensors", &st);
        free(buf);
        ASSERT_EQ(rc, TSR_ERR_FORMAT);
        ASSERT_TRUE(strstr(tsr_last_error(), "too short") != NULL);
    }
    return 0;
}

static int test_header_past_file(void)
{
    const char *h = "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    size_t size;
    /* Header length one past the text, and the file ends at the text. */
    uint8_t *buf = image_raw(strlen(h) + 1, h, NULL, 0, &size);
    tsr_safetensors *st = NULL;
    int rc = tsr_st_open_memory(buf, size, "cut.safetensors", &st);
    free(buf);
    ASSERT_EQ(rc, TSR_ERR_FORMAT);
    ASSERT_TRUE(strstr(tsr_last_error(), "past the end") != NULL);
    /* A real file cut short in its data section. */
    EXPECT_OPEN("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "abcd", 4,
                TSR_ERR_FORMAT, "ends past the data section");
    return 0;
}

static int test_huge_header_len(void)
{
    uint64_t lens[] = {UINT64_MAX, (uint64_t)TSR_ST_MAX_HEADER + 1, 1ull << 63};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        size_t size;
        uint8_t *buf = image_raw(lens[i], "{}", NULL, 0, &size);
        tsr_safetensors *st = NULL;
        int rc = tsr_st_open_memory(buf, size, "huge.safetensors", &st);
        free(buf);
        ASSERT_EQ(rc, TSR_ERR_RANGE);
        ASSERT_TRUE(strstr(tsr_last_error(), "limit") != NULL);
    }
    return 0;
}

static int test_bad_json(void)
{
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",", NULL, 0, TSR_ERR_FORMAT, "byte");
    EXPECT_OPEN("{\"x\" 1}", NULL, 0, TSR_ERR_FORMAT, "syntax error");
    EXPECT_OPEN("{} trailing", NULL, 0, TSR_ERR_FORMAT, "trailing");
    EXPECT_OPEN("[1, 2, 3]", NULL, 0, TSR_ERR_FORMAT, "'{'");
    EXPECT_OPEN("{\"\xff\":{}}", NULL, 0, TSR_ERR_FORMAT, "UTF-8");
    EXPECT_OPEN("{\"\xc0\x80\":{}}", NULL, 0, TSR_ERR_FORMAT, "UTF-8");     /* overlong NUL */
    EXPECT_OPEN("{\"\xed\xa0\x80\":{}}", NULL, 0, TSR_ERR_FORMAT, "UTF-8"); /* surrogate */
    EXPECT_OPEN("{\"\xe2\x82\":{}}", NULL, 0, TSR_ERR_FORMAT, "UTF-8");     /* cut short */
    EXPECT_OPEN("{\"caf\xc3\xa9 \xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[0],"
                "\"data_offsets\":[0,0]}}", NULL, 0, TSR_OK, NULL);
    EXPECT_OPEN("{\"x\":1}", NULL, 0, TSR_ERR_FORMAT, "not a JSON object");
    EXPECT_OPEN("{\"x\":{\"shape\":[1],\"data_offsets\":[0,1]}}", "a", 1, TSR_ERR_FORMAT, "dtype");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", "a", 1, TSR_ERR_FORMAT, "shape");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[1]}}", "a", 1, TSR_ERR_FORMAT, "data_offsets");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", "ab", 2,
                TSR_ERR_FORMAT, "exactly 2");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", "a", 1,
                TSR_ERR_FORMAT, "exactly 2");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,\"1\"]}}", "a", 1,
                TSR_ERR_FORMAT, "not a number");
    /* Deep nesting is bounded by cJSON's limit, not the stack. */
    char deep[4200];
    size_t k = 0;
    deep[k++] = '{';
    memcpy(deep + k, "\"a\":", 4);
    k += 4;
    for (int i = 0; i < 2000; i++)
        deep[k++] = '[';
    deep[k] = '\0';
    EXPECT_OPEN(deep, NULL, 0, TSR_ERR_FORMAT, NULL);
    return 0;
}

static int test_unknown_dtype(void)
{
    EXPECT_OPEN("{\"x\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,1]}}", "a", 1,
                TSR_ERR_UNSUPPORTED, "unknown dtype 'F7'");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd", 4,
                TSR_ERR_UNSUPPORTED, "unknown dtype");
    EXPECT_OPEN("{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd", 4,
                TSR_ERR_FORMAT, "dtype");
    return 0;
}

static int test_bad_shapes(void)
{
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", "a", 1,
                TSR_ERR_FORMAT, "negative");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", "a", 1,
                TSR_ERR_FORMAT, "not an integer");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[\"1\"],\"data_offsets\":[0,1]}}", "a", 1,
                TSR_ERR_FORMAT, "not a number");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[1e300],\"data_offsets\":[0,1]}}", "a", 1,
                TSR_ERR_RANGE, "too large");
    /* 2^32 cubed overflows 64 bits. */
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],"
                "\"data_offsets\":[0,1]}}", "a", 1, TSR_ERR_RANGE, "overflows");
    /* Fits as a count, overflows as bytes. */
    EXPECT_OPEN("{\"x\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967295],"
                "\"data_offsets\":[0,1]}}", "a", 1, TSR_ERR_RANGE, "overflows");
    /* A zero dim makes an overflowing product harmless, but the data must match. */
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[0,9007199254740992,9007199254740992],"
                "\"data_offsets\":[0,0]}}", NULL, 0, TSR_OK, NULL);
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
                "a", 1, TSR_ERR_RANGE, "dimensions");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":{},\"data_offsets\":[0,1]}}", "a", 1,
                TSR_ERR_FORMAT, "shape");
    return 0;
}

static int test_offsets_out_of_range(void)
{
    EXPECT_OPEN("{\"conv_in.weight\":{\"dtype\":\"U8\",\"shape\":[4096],"
                "\"data_offsets\":[100,4196]}}", "abcd", 4, TSR_ERR_FORMAT,
                "tensor 'conv_in.weight' data [100, 4196) ends past the data section (4 bytes)");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[5,5]}}", "abcd", 4,
                TSR_ERR_FORMAT, "ends past");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,1]}}", "abcd", 4,
                TSR_ERR_FORMAT, "begins after it ends");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", "abcd", 4,
                TSR_ERR_FORMAT, "negative");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],"
                "\"data_offsets\":[18446744073709551615,18446744073709551616]}}", "abcd", 4,
                TSR_ERR_RANGE, "too large");
    return 0;
}

static int test_overlap(void)
{
    EXPECT_OPEN("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", "abc", 3,
                TSR_ERR_FORMAT, "overlaps");
    /* Identical ranges; and one tensor inside another. */
    EXPECT_OPEN("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                "\"b\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[0,2]}}", "ab", 2,
                TSR_ERR_FORMAT, "overlaps");
    EXPECT_OPEN("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", "abcd", 4,
                TSR_ERR_FORMAT, "overlaps");
    /* Adjacent and empty tensors do not overlap. */
    EXPECT_OPEN("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[1,1]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", "abcd", 4,
                TSR_OK, NULL);
    return 0;
}

static int test_length_mismatch(void)
{
    EXPECT_OPEN("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
                "abcdefgh", 8, TSR_ERR_FORMAT, "needs 8");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[0,4]}}", "abcd", 4,
                TSR_ERR_FORMAT, "scalar");
    return 0;
}

static int test_duplicate_names(void)
{
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", "ab", 2,
                TSR_ERR_FORMAT, "duplicate key 'x'");
    EXPECT_OPEN("{\"__metadata__\":{},\"__metadata__\":{}}", NULL, 0, TSR_ERR_FORMAT,
                "duplicate");
    EXPECT_OPEN("{\"x\":{\"dtype\":\"U8\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                "a", 1, TSR_ERR_FORMAT, "duplicate");
    return 0;
}

static int test_bad_metadata(void)
{
    EXPECT_OPEN("{\"__metadata__\":{\"format\":1}}", NULL, 0, TSR_ERR_FORMAT, "not a string");
    EXPECT_OPEN("{\"__metadata__\":{\"a\":\"b\",\"format\":null}}", NULL, 0, TSR_ERR_FORMAT,
                "'format'");
    EXPECT_OPEN("{\"__metadata__\":[\"pt\"]}", NULL, 0, TSR_ERR_FORMAT, "not a JSON object");
    EXPECT_OPEN("{\"__metadata__\":\"pt\"}", NULL, 0, TSR_ERR_FORMAT, "not a JSON object");
    return 0;
}

static int test_json_helpers(void)
{
    const char *doc = "{\"in_channels\": 4, \"scale\": 0.18215, \"flip\": true, \"name\": \"unet\","
                      " \"heads\": [5, 10, 20, 20], \"head\": 8, \"none\": null, \"frac\": 8.5,"
                      " \"types\": [\"Down\", \"Up\"], \"big\": 1e30}";
    cJSON *j = NULL;
    ASSERT_OK(tsr_json_parse(doc, strlen(doc), "cfg.json", &j));
    int v = 0, arr[4], n = 0;
    double d = 0;
    bool b = false;
    const char *s = NULL, *ss[4];
    int rc = 1;
    if (tsr_json_get_int(j, "cfg.json", "in_channels", 0, 1, 64, &v) || v != 4)
        goto done;
    if (tsr_json_get_int(j, "cfg.json", "absent", 7, 1, 64, &v) || v != 7)
        goto done;
    if (tsr_json_get_int(j, "cfg.json", "none", 9, 1, 64, &v) || v != 9)
        goto done;
    if (tsr_json_get_int(j, "cfg.json", "in_channels", 0, 5, 64, &v) != TSR_ERR_RANGE ||
        !strstr(tsr_last_error(), "cfg.json") || !strstr(tsr_last_error(), "in_channels"))
        goto done;
    if (tsr_json_get_int(j, "cfg.json", "frac", 0, 0, 64, &v) != TSR_ERR_RANGE)
        goto done;
    if (tsr_json_get_int(j, "cfg.json", "big", 0, 0, 64, &v) != TSR_ERR_RANGE)
        goto done;
    if (tsr_json_get_int(j, "cfg.json", "name", 0, 0, 64, &v) != TSR_ERR_FORMAT)
        goto done;
    if (tsr_json_need_int(j, "cfg.json", "absent", 0, 64, &v) != TSR_ERR_NOT_FOUND)
        goto done;
    if (tsr_json_get_double(j, "cfg.json", "scale", 1.0, 0.0, 1.0, &d) || d != 0.18215)
        goto done;
    if (tsr_json_get_bool(j, "cfg.json", "flip", false, &b) || !b)
        goto done;
    if (tsr_json_get_bool(j, "cfg.json", "in_channels", false, &b) != TSR_ERR_FORMAT)
        goto done;
    if (tsr_json_get_string(j, "cfg.json", "name", NULL, &s) || strcmp(s, "unet") != 0)
        goto done;
    if (tsr_json_get_int_array(j, "cfg.json", "heads", 1, 64, arr, 4, &n) || n != 4 ||
        arr[2] != 20)
        goto done;
    if (tsr_json_get_int_array(j, "cfg.json", "heads", 1, 64, arr, 3, &n) != TSR_ERR_RANGE)
        goto done;
    if (tsr_json_get_int_array(j, "cfg.json", "head", 1, 64, arr, 4, &n) || n != 1 || arr[0] != 8)
        goto done;
    if (tsr_json_get_string_array(j, "cfg.json", "types", ss, 4, &n) || n != 2 ||
        strcmp(ss[1], "Up") != 0)
        goto done;
    if (tsr_json_get_string_array(j, "cfg.json", "heads", ss, 4, &n) != TSR_ERR_FORMAT)
        goto done;
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "json helper check failed: %s\n", tsr_last_error());
    cJSON_Delete(j);
    return rc;
}

static int test_json_files(void)
{
    char path[512];
    tmp_path("cfg.json", path, sizeof path);
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    fputs("{\n  \"a\": 1,\n  \"b\": [1, 2,]\n}\n", f);
    fclose(f);
    cJSON *j = NULL;
    int rc = tsr_json_load_file(path, &j);
    char msg[1100];
    snprintf(msg, sizeof msg, "%s", tsr_last_error());
    ASSERT_EQ(rc, TSR_ERR_FORMAT);
    ASSERT_TRUE(j == NULL);
    /* The message names the file and the line of the stray ']'. */
    ASSERT_TRUE(strstr(msg, path) != NULL);
    ASSERT_TRUE(strstr(msg, "line 3") != NULL);
    f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    fputs("{\"sample_size\": 64, \"down\": [\"CrossAttnDownBlock2D\"]}  \n", f);
    fclose(f);
    ASSERT_OK(tsr_json_load_file(path, &j));
    int v = 0;
    rc = tsr_json_need_int(j, path, "sample_size", 8, 256, &v);
    cJSON_Delete(j);
    ASSERT_OK(rc);
    ASSERT_EQ(v, 64);
    /* The size bound is checked before reading. */
    rc = tsr_json_load_file_max(path, 16, &j);
    unlink(path);
    ASSERT_EQ(rc, TSR_ERR_RANGE);
    ASSERT_EQ(tsr_json_load_file(path, &j), TSR_ERR_NOT_FOUND);
    ASSERT_EQ(tsr_json_load_file("/", &j), TSR_ERR_IO);
    /* Parse: empty input, a bare scalar, trailing data, NUL inside. */
    ASSERT_EQ(tsr_json_parse("", 0, "x", &j), TSR_ERR_FORMAT);
    ASSERT_OK(tsr_json_parse("42", 2, "x", &j));
    ASSERT_TRUE(cJSON_IsNumber(j));
    ASSERT_EQ(tsr_json_expect_object(j, "x", NULL), TSR_ERR_FORMAT);
    cJSON_Delete(j);
    ASSERT_EQ(tsr_json_parse("{}{}", 4, "x", &j), TSR_ERR_FORMAT);
    ASSERT_EQ(tsr_json_parse("{}\0 ", 4, "x", &j), TSR_ERR_FORMAT);
    /* Only `len` bytes are read: the closing brace is outside. */
    ASSERT_EQ(tsr_json_parse("{\"a\":1}", 6, "x", &j), TSR_ERR_FORMAT);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"round_trip", test_round_trip},
    {"write_many_and_find", test_write_many_and_find},
    {"write_rejects", test_write_rejects},
    {"python_file", test_python_file},
    {"zero_data_section", test_zero_data_section},
    {"gaps_and_unaligned", test_gaps_and_unaligned},
    {"empty_file", test_empty_file},
    {"truncated_header", test_truncated_header},
    {"header_past_file", test_header_past_file},
    {"huge_header_len", test_huge_header_len},
    {"bad_json", test_bad_json},
    {"unknown_dtype", test_unknown_dtype},
    {"bad_shapes", test_bad_shapes},
    {"offsets_out_of_range", test_offsets_out_of_range},
    {"overlap", test_overlap},
    {"length_mismatch", test_length_mismatch},
    {"duplicate_names", test_duplicate_names},
    {"bad_metadata", test_bad_metadata},
    {"json_helpers", test_json_helpers},
    {"json_files", test_json_files},
};

TSR_TEST_TABLE_MAIN(tests)
