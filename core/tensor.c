/*
 * core/tensor.c - tensor descriptors and dtype conversions.
 *
 * The f16/bf16 conversions are bit-level so they give the same results on
 * every compiler and match torch's round-to-nearest-even.
 */
#include "core/tensor.h"

#include <stdio.h>
#include <string.h>

size_t tsr_dtype_size(tsr_dtype dtype)
{
    switch (dtype) {
    case TSR_F32: return 4;
    case TSR_F16: return 2;
    case TSR_BF16: return 2;
    case TSR_I32: return 4;
    default: return 0;
    }
}

const char *tsr_dtype_name(tsr_dtype dtype)
{
    switch (dtype) {
    case TSR_F32: return "f32";
    case TSR_F16: return "f16";
    case TSR_BF16: return "bf16";
    case TSR_I32: return "i32";
    default: return "?";
    }
}

tsr_tensor tsr_tensor_make(tsr_dtype dtype, int ndim, const int64_t *ne, void *data,
                           tsr_backend *backend)
{
    tsr_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.ndim = ndim;
    for (int i = 0; i < TSR_MAX_DIMS; i++)
        t.ne[i] = i < ndim ? ne[i] : 1;
    t.data = data;
    t.backend = backend;
    return t;
}

tsr_tensor tsr_tensor_1d(tsr_dtype dtype, int64_t n0, void *data)
{
    int64_t ne[1] = {n0};
    return tsr_tensor_make(dtype, 1, ne, data, NULL);
}

tsr_tensor tsr_tensor_2d(tsr_dtype dtype, int64_t n0, int64_t n1, void *data)
{
    int64_t ne[2] = {n0, n1};
    return tsr_tensor_make(dtype, 2, ne, data, NULL);
}

tsr_tensor tsr_tensor_3d(tsr_dtype dtype, int64_t n0, int64_t n1, int64_t n2, void *data)
{
    int64_t ne[3] = {n0, n1, n2};
    return tsr_tensor_make(dtype, 3, ne, data, NULL);
}

tsr_tensor tsr_tensor_4d(tsr_dtype dtype, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                         void *data)
{
    int64_t ne[4] = {n0, n1, n2, n3};
    return tsr_tensor_make(dtype, 4, ne, data, NULL);
}

tsr_tensor tsr_tensor_like(const tsr_tensor *like, int ndim, const int64_t *ne, void *data)
{
    return tsr_tensor_make(like->dtype, ndim, ne, data, like->backend);
}

tsr_tensor tsr_tensor_view(const tsr_tensor *t, int ndim, const int64_t *ne)
{
    return tsr_tensor_make(t->dtype, ndim, ne, t->data, t->backend);
}

tsr_tensor tsr_tensor_view2(const tsr_tensor *t, int64_t n0, int64_t n1)
{
    const int64_t ne[2] = {n0, n1};
    return tsr_tensor_view(t, 2, ne);
}

tsr_tensor tsr_tensor_view3(const tsr_tensor *t, int64_t n0, int64_t n1, int64_t n2)
{
    const int64_t ne[3] = {n0, n1, n2};
    return tsr_tensor_view(t, 3, ne);
}

tsr_tensor tsr_tensor_rows(const tsr_tensor *t, int64_t r0, int64_t n)
{
    tsr_tensor v = *t;
    v.ne[0] = n;
    if (v.data) {
        const int64_t row = t->ne[0] ? tsr_tensor_numel(t) / t->ne[0] : 0;
        v.data = (char *)v.data + (size_t)(r0 * row) * tsr_dtype_size(t->dtype);
    }
    return v;
}

int64_t tsr_tensor_numel(const tsr_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->ne[i];
    return n;
}

size_t tsr_tensor_nbytes(const tsr_tensor *t)
{
    return (size_t)tsr_tensor_numel(t) * tsr_dtype_size(t->dtype);
}

bool tsr_tensor_same_shape(const tsr_tensor *a, const tsr_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->ne[i] != b->ne[i])
            return false;
    return true;
}

char *tsr_tensor_shape_str(const tsr_tensor *t, char *buf, size_t size)
{
    size_t off = 0;
    off += (size_t)snprintf(buf + off, size - off, "[");
    for (int i = 0; i < t->ndim && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, i ? ", %lld" : "%lld", (long long)t->ne[i]);
    if (off < size)
        snprintf(buf + off, size - off, "]");
    return buf;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float tsr_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0)
            return bits_f32(sign);
        /* subnormal: value = mant * 2^-24 */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31)
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t tsr_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
    if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (abs < 0x38800000u) { /* below the smallest normal: subnormal or zero */
        /* add 0.5 (in f32) so the hardware's RNE does the rounding */
        float v = bits_f32(abs) + 0.5f;
        return (uint16_t)(sign | (f32_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (abs >> 13) & 1;
    abs += 0xc8000fffu + mant_odd; /* rebias exponent and round to nearest even */
    return (uint16_t)(sign | (abs >> 13));
}

float tsr_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t tsr_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* The 16-bit loads go through memcpy: `src` may point into a file's bytes
 * at any offset (a safetensors header's length need not be a multiple of 8,
 * and an in-memory copy may start anywhere), where a uint16_t load is
 * undefined; compilers emit the same plain load for it. */
static inline uint16_t load_u16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

void tsr_convert_to_f32(float *dst, const void *src, tsr_dtype src_dtype, size_t n)
{
    const unsigned char *b = src;
    switch (src_dtype) {
    case TSR_F32: memmove(dst, src, n * 4); break;
    case TSR_F16:
        for (size_t i = 0; i < n; i++)
            dst[i] = tsr_f16_to_f32(load_u16(b + 2 * i));
        break;
    case TSR_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = tsr_bf16_to_f32(load_u16(b + 2 * i));
        break;
    default: break;
    }
}

void tsr_convert_from_f32(void *dst, tsr_dtype dst_dtype, const float *src, size_t n)
{
    unsigned char *b = dst;
    switch (dst_dtype) {
    case TSR_F32: memmove(dst, src, n * 4); break;
    case TSR_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = tsr_f32_to_f16(src[i]);
            memcpy(b + 2 * i, &h, sizeof h);
        }
        break;
    case TSR_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = tsr_f32_to_bf16(src[i]);
            memcpy(b + 2 * i, &h, sizeof h);
        }
        break;
    default: break;
    }
}

bool tsr_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
