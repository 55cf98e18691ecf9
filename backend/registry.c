/*
 * backend/registry.c - choosing a backend from a --device spec, and the
 * memory wrappers.  "auto" prefers a GPU and falls back to the CPU cleanly
 * when the build has no CUDA or the machine has no GPU: the same binary runs
 * in CI (no GPU) and on a GPU server.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/log.h"
#ifdef TSR_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

bool tsr_backend_cuda_compiled(void)
{
#ifdef TSR_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

static int open_cuda(int device, tsr_backend **out)
{
#ifdef TSR_HAVE_CUDA
    return tsr_backend_cuda_create(device, out);
#else
    (void)device;
    (void)out;
    return tsr_errorf(TSR_ERR_UNSUPPORTED, "this build of tessera has no CUDA backend "
                                           "(configure with -DTESSERA_CUDA=ON)");
#endif
}

int tsr_backend_open(const char *spec, int n_threads, tsr_backend **out)
{
    *out = NULL;
    if (!spec || !*spec || strcmp(spec, "auto") == 0) {
#ifdef TSR_HAVE_CUDA
        if (tsr_cuda_device_count() > 0 && open_cuda(0, out) == TSR_OK) {
            const char *missing = tsr_backend_missing_op(*out);
            if (!missing)
                return TSR_OK;
            TSR_INFO("%s cannot run %s yet; running on the CPU", (*out)->name, missing);
            tsr_backend_destroy(*out);
            *out = NULL;
        } else {
            TSR_INFO("no usable CUDA device; running on the CPU");
        }
        tsr_error_clear();
#endif
        return tsr_backend_cpu_create(n_threads, out);
    }
    if (strcmp(spec, "cpu") == 0)
        return tsr_backend_cpu_create(n_threads, out);
    if (strncmp(spec, "cuda", 4) == 0) {
        int device = 0;
        if (spec[4] == ':') {
            char *end = NULL;
            long d = strtol(spec + 5, &end, 10);
            if (!spec[5] || *end || d < 0 || d > 255)
                return tsr_errorf(TSR_ERR_INVALID, "bad device '%s': expected cuda:N", spec);
            device = (int)d;
        } else if (spec[4]) {
            return tsr_errorf(TSR_ERR_INVALID, "bad device '%s': expected auto, cpu, cuda or cuda:N",
                              spec);
        }
        return open_cuda(device, out);
    }
    return tsr_errorf(TSR_ERR_INVALID, "bad device '%s': expected auto, cpu, cuda or cuda:N", spec);
}

void tsr_backend_destroy(tsr_backend *b)
{
    if (b && b->iface->destroy)
        b->iface->destroy(b);
}

void *tsr_backend_alloc(tsr_backend *b, size_t bytes)
{
    return b->iface->alloc ? b->iface->alloc(b, bytes) : NULL;
}

void tsr_backend_free(tsr_backend *b, void *ptr)
{
    if (ptr && b->iface->free)
        b->iface->free(b, ptr);
}

int tsr_backend_upload(tsr_backend *b, void *dst, const void *src_host, size_t bytes)
{
    if (!b->iface->upload)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: no upload", b->name);
    return b->iface->upload(b, dst, src_host, bytes);
}

int tsr_backend_download(tsr_backend *b, void *dst_host, const void *src, size_t bytes)
{
    if (!b->iface->download)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: no download", b->name);
    return b->iface->download(b, dst_host, src, bytes);
}

int tsr_backend_sync(tsr_backend *b)
{
    return b->iface->sync ? b->iface->sync(b) : TSR_OK;
}

const char *tsr_backend_missing_op(tsr_backend *b)
{
    for (int op = 0; op < TSR_OP_COUNT; op++)
        if (!tsr_backend_supports(b, (tsr_op)op, TSR_F32) &&
            !tsr_backend_supports(b, (tsr_op)op, TSR_F16))
            return tsr_op_name((tsr_op)op);
    return NULL;
}

bool tsr_backend_supports(tsr_backend *b, tsr_op op, tsr_dtype dtype)
{
    return b->iface->supports_op && b->iface->supports_op(b, op, dtype);
}
