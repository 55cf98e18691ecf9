/*
 * backend/registry.c - choosing a backend from a --device spec, and the
 * wrappers that are not ops: memory, pinned host memory, events, what a
 * backend reports about itself.  "auto" prefers a GPU and falls back to the
 * CPU cleanly when the build has no CUDA or the machine has no GPU: the same
 * binary runs in CI (no GPU) and on a GPU server.
 *
 * Events have one generic part (which backend made them) around the
 * backend's own handle, so a wait can cross backends: a backend whose ops
 * finish before they return (the CPU, which leaves the event functions
 * NULL) makes events that are always complete; between two backends of a
 * kind the device waits; otherwise the host blocks on the event.
 *
 * The CUDA backend is a separate shared module (libtessera_cuda.so, built
 * next to the tessera binary when nvcc is found) that this file dlopens
 * only when CUDA is asked for or "auto" finds an NVIDIA device node.  The
 * CUDA runtime and cuBLAS(Lt) are the module's dependencies, not the
 * program's: a CPU-only run neither maps them (about 220 MB of resident
 * memory for `tessera --help` when they were linked in) nor needs them
 * installed.  The module resolves Tessera's own functions (tsr_errorf, ...)
 * from the program that loads it, so the program exports its symbols
 * (CMake ENABLE_EXPORTS).  Where the module is looked for:
 *   $TSR_CUDA_MODULE (only there, when set; "/nonexistent" hides it),
 *   <dir of the program>/libtessera_cuda.so, <dir>/../lib/, <dir>/../bin/,
 *   then the loader's search path.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/log.h"

#define CUDA_MODULE_NAME "libtessera_cuda.so"

bool tsr_backend_cuda_compiled(void)
{
#ifdef TSR_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

static struct {
    pthread_once_t once;
    void *handle;
    int (*device_count)(void);
    int (*create)(int device, tsr_backend **out);
    char error[512]; /* why it could not be loaded */
} cuda_module = {PTHREAD_ONCE_INIT, NULL, NULL, NULL, ""};

static bool try_module(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(cuda_module.error, sizeof cuda_module.error, "%s", e ? e : path);
        return false;
    }
    void *count = dlsym(h, "tsr_cuda_device_count"), *create = dlsym(h, "tsr_backend_cuda_create");
    if (!count || !create) {
        snprintf(cuda_module.error, sizeof cuda_module.error, "%s: not a Tessera CUDA module", path);
        dlclose(h);
        return false;
    }
    cuda_module.handle = h;
    /* POSIX dlsym returns object pointers; function pointers convert */
    memcpy(&cuda_module.device_count, &count, sizeof count);
    memcpy(&cuda_module.create, &create, sizeof create);
    return true;
}

static void load_module(void)
{
    const char *env = getenv("TSR_CUDA_MODULE");
    if (env && *env) {
        try_module(env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            static const char *const rel[] = {"", "/../lib", "/../bin"};
            for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
                char p[PATH_MAX + 64];
                snprintf(p, sizeof p, "%s%s/" CUDA_MODULE_NAME, exe, rel[i]);
                if (access(p, F_OK) == 0 && try_module(p))
                    return;
            }
        }
    }
    try_module(CUDA_MODULE_NAME);
}

/* The module, loaded on first use; false (with the reason raised) when it
 * cannot be. */
static bool cuda_module_ready(void)
{
    pthread_once(&cuda_module.once, load_module);
    return cuda_module.handle != NULL;
}

/* A cheap look for an NVIDIA GPU before paying for the CUDA libraries:
 * the driver's device nodes. */
static bool nvidia_device_present(void)
{
    if (access("/dev/nvidiactl", F_OK) == 0)
        return true;
    char p[32];
    for (int i = 0; i < 16; i++) {
        snprintf(p, sizeof p, "/dev/nvidia%d", i);
        if (access(p, F_OK) == 0)
            return true;
    }
    return false;
}

int tsr_backend_cuda_device_count(void)
{
    return cuda_module_ready() ? cuda_module.device_count() : 0;
}

bool tsr_backend_cuda_loaded(void)
{
    return cuda_module.handle != NULL;
}

static int open_cuda(int device, tsr_backend **out)
{
    if (!cuda_module_ready()) {
        if (!tsr_backend_cuda_compiled())
            return tsr_errorf(TSR_ERR_UNSUPPORTED, "this build of tessera has no CUDA backend "
                                                   "(configure with -DTESSERA_CUDA=ON)");
        return tsr_errorf(TSR_ERR_UNSUPPORTED,
                          "the CUDA backend module could not be loaded (%s); install the CUDA "
                          "runtime and cuBLAS, set TSR_CUDA_MODULE, or use --device cpu",
                          cuda_module.error);
    }
    return cuda_module.create(device, out);
}

int tsr_backend_open(const char *spec, int n_threads, tsr_backend **out)
{
    *out = NULL;
    if (!spec || !*spec || strcmp(spec, "auto") == 0) {
        const char *env = getenv("TSR_CUDA_MODULE");
        if ((tsr_backend_cuda_compiled() || (env && *env)) && nvidia_device_present() &&
            tsr_backend_cuda_device_count() > 0 && open_cuda(0, out) == TSR_OK) {
            const char *missing = tsr_backend_missing_op(*out);
            if (!missing)
                return TSR_OK;
            TSR_INFO("%s cannot run %s yet; running on the CPU", (*out)->name, missing);
            tsr_backend_destroy(*out);
            *out = NULL;
        } else if (tsr_backend_cuda_compiled()) {
            TSR_INFO("no usable CUDA device; running on the CPU");
        }
        tsr_error_clear();
        return tsr_backend_cpu_create(n_threads, out);
    }
    if (strcmp(spec, "cpu") == 0)
        return tsr_backend_cpu_create(n_threads, out);
    if (strcmp(spec, "cpu-bf16gemm") == 0) {
        tsr_cpu_options o = {.n_threads = n_threads, .bf16gemm = true};
        return tsr_backend_cpu_create_ex(&o, out);
    }
    if (strcmp(spec, "cpu-f16") == 0 || strcmp(spec, "cpu-bf16") == 0) {
        tsr_cpu_options o = {.n_threads = n_threads, .storage = spec[4] == 'f' ? TSR_F16 : TSR_BF16};
        return tsr_backend_cpu_create_ex(&o, out);
    }
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
    return tsr_errorf(TSR_ERR_INVALID,
                      "bad device '%s': expected auto, cpu, cpu-bf16gemm, cuda or cuda:N (or the "
                      "CPU test variants cpu-f16, cpu-bf16)",
                      spec);
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

tsr_dtype tsr_backend_weight_dtype(const tsr_backend *b) { return b ? b->weight_dtype : TSR_F32; }
tsr_dtype tsr_backend_act_dtype(const tsr_backend *b) { return b ? b->act_dtype : TSR_F32; }
bool tsr_backend_has_cap(const tsr_backend *b, unsigned cap) { return b && (b->caps & cap) == cap; }
int tsr_backend_threads(const tsr_backend *b) { return b ? b->n_threads : 0; }

void *tsr_backend_host_alloc_pinned(tsr_backend *b, size_t bytes)
{
    void *p = NULL;
    if (b && b->iface->host_alloc_pinned)
        p = b->iface->host_alloc_pinned(b, bytes);
    else if (bytes <= SIZE_MAX - 63)
        p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p)
        tsr_errorf(TSR_ERR_NOMEM, "cannot allocate %zu bytes of pinned host memory", bytes);
    return p;
}

void tsr_backend_host_free_pinned(tsr_backend *b, void *ptr)
{
    if (!ptr)
        return;
    if (b && b->iface->host_free_pinned)
        b->iface->host_free_pinned(b, ptr);
    else
        free(ptr);
}

struct tsr_event {
    tsr_backend *owner; /* borrowed */
    void *impl;         /* the owner's handle; NULL = always complete */
};

int tsr_event_create(tsr_backend *b, tsr_event **out)
{
    *out = NULL;
    tsr_event *e = calloc(1, sizeof *e);
    if (!e)
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate an event");
    e->owner = b;
    if (b->iface->event_create) {
        int rc = b->iface->event_create(b, &e->impl);
        if (rc < 0) {
            free(e);
            return rc;
        }
    }
    *out = e;
    return TSR_OK;
}

void tsr_event_destroy(tsr_event *e)
{
    if (!e)
        return;
    if (e->impl && e->owner->iface->event_destroy)
        e->owner->iface->event_destroy(e->owner, e->impl);
    free(e);
}

int tsr_event_record(tsr_event *e)
{
    if (!e->impl || !e->owner->iface->event_record)
        return TSR_OK;
    return e->owner->iface->event_record(e->owner, e->impl);
}

int tsr_event_wait(tsr_backend *b, tsr_event *e)
{
    if (!e->impl)
        return TSR_OK; /* recorded on a synchronous backend: already complete */
    if (b->kind == e->owner->kind && b->iface->event_wait)
        return b->iface->event_wait(b, e->impl);
    return tsr_event_sync(e);
}

int tsr_event_sync(tsr_event *e)
{
    if (!e->impl || !e->owner->iface->event_sync)
        return TSR_OK;
    return e->owner->iface->event_sync(e->owner, e->impl);
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
    tsr_op_desc d;
    memset(&d, 0, sizeof d);
    d.op = op;
    d.dtype = dtype;
    char why[8];
    return tsr_backend_supports_op(b, &d, why, sizeof why);
}

bool tsr_backend_supports_op(tsr_backend *b, const tsr_op_desc *op, char *why, size_t why_size)
{
    if (why && why_size)
        why[0] = 0;
    if ((unsigned)op->op >= (unsigned)TSR_OP_COUNT) {
        if (why && why_size)
            snprintf(why, why_size, "unknown op %d", (int)op->op);
        return false;
    }
    if (!b->iface->supports_op) {
        if (why && why_size)
            snprintf(why, why_size, "the backend declares no ops");
        return false;
    }
    char dummy[8];
    if (!why || !why_size) {
        why = dummy;
        why_size = sizeof dummy;
    }
    return b->iface->supports_op(b, op, why, why_size);
}
