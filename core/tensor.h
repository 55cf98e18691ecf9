/*
 * core/tensor.h - the tensor descriptor shared by every layer.
 *
 * A tensor is a plain struct: dtype, up to four dimensions in PyTorch order
 * (ne[0] is the outermost, ne[ndim-1] the innermost and contiguous), a data
 * pointer and the backend whose memory holds it (NULL = ordinary host
 * memory).  Tensors never own their data: weights point into the model's
 * arena (or the mmap of a safetensors file), activations into a workspace.
 * That keeps creating, copying and viewing a tensor free of allocation.
 *
 * Layout conventions (see docs/ARCHITECTURE.md):
 *   activations  NHWC  [N, H, W, C]   (channels innermost)
 *   sequences          [N, L, C]
 *   conv weights OHWI  [Cout, KH, KW, Cin]  (converted once at load from
 *                      PyTorch's OIHW)
 *   linear weights     [out, in]  (PyTorch's own layout)
 */
#ifndef TSR_CORE_TENSOR_H
#define TSR_CORE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TSR_MAX_DIMS 4

typedef enum tsr_dtype {
    TSR_F32 = 0,
    TSR_F16 = 1,
    TSR_BF16 = 2,
    TSR_I32 = 3, /* token ids and indices */
    TSR_DTYPE_COUNT
} tsr_dtype;

typedef struct tsr_backend tsr_backend;

typedef struct tsr_tensor {
    tsr_dtype dtype;
    int ndim;
    int64_t ne[TSR_MAX_DIMS]; /* shape, outermost first; unused dims are 1 */
    void *data;               /* borrowed */
    tsr_backend *backend;     /* borrowed; NULL = host memory */
} tsr_tensor;

size_t tsr_dtype_size(tsr_dtype dtype);
const char *tsr_dtype_name(tsr_dtype dtype);

/* Describe a contiguous tensor over `data` (which may be NULL for planning). */
tsr_tensor tsr_tensor_make(tsr_dtype dtype, int ndim, const int64_t *ne, void *data,
                           tsr_backend *backend);
tsr_tensor tsr_tensor_1d(tsr_dtype dtype, int64_t n0, void *data);
tsr_tensor tsr_tensor_2d(tsr_dtype dtype, int64_t n0, int64_t n1, void *data);
tsr_tensor tsr_tensor_3d(tsr_dtype dtype, int64_t n0, int64_t n1, int64_t n2, void *data);
tsr_tensor tsr_tensor_4d(tsr_dtype dtype, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                         void *data);

/* A tensor like `like` (same dtype and backend) shaped ne[0..ndim) over
 * `data`: what model code uses instead of making a tensor and then setting
 * its backend. */
tsr_tensor tsr_tensor_like(const tsr_tensor *like, int ndim, const int64_t *ne, void *data);
/* t's data, dtype and backend under another shape of at most t's size. */
tsr_tensor tsr_tensor_view(const tsr_tensor *t, int ndim, const int64_t *ne);
tsr_tensor tsr_tensor_view2(const tsr_tensor *t, int64_t n0, int64_t n1);
tsr_tensor tsr_tensor_view3(const tsr_tensor *t, int64_t n0, int64_t n1, int64_t n2);
/* Rows [r0, r0 + n) of the outermost dimension (NULL data stays NULL, so a
 * planning pass can take views too). */
tsr_tensor tsr_tensor_rows(const tsr_tensor *t, int64_t r0, int64_t n);

int64_t tsr_tensor_numel(const tsr_tensor *t);
size_t tsr_tensor_nbytes(const tsr_tensor *t);
bool tsr_tensor_same_shape(const tsr_tensor *a, const tsr_tensor *b);
/* "[2, 64, 64, 320]" into buf; returns buf. */
char *tsr_tensor_shape_str(const tsr_tensor *t, char *buf, size_t size);

/* Scalar and bulk conversions (round-to-nearest-even, as PyTorch does). */
float tsr_f16_to_f32(uint16_t h);
uint16_t tsr_f32_to_f16(float f);
float tsr_bf16_to_f32(uint16_t h);
uint16_t tsr_f32_to_bf16(float f);
/* Convert n elements of `src_dtype` at src to f32 at dst. */
void tsr_convert_to_f32(float *dst, const void *src, tsr_dtype src_dtype, size_t n);
/* Convert n f32 elements at src to `dst_dtype` at dst. */
void tsr_convert_from_f32(void *dst, tsr_dtype dst_dtype, const float *src, size_t n);

/* Checked size arithmetic for hostile inputs: return false on overflow. */
bool tsr_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out);

#endif
