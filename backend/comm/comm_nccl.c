/*
 * backend/comm/comm_nccl.c - the comm of CUDA devices: NCCL, dlopened.
 *
 * Why it is built this way.  The program must run where there is no GPU and
 * no NCCL (CI, CPU servers), as it does for the CUDA backend (a module
 * dlopened on demand, backend/registry.c), so neither libnccl.so.2 nor
 * libcuda.so.1 is linked: both are dlopened when an nccl group is created,
 * and a missing one is a clear TSR_ERR_UNSUPPORTED ("nccl: libnccl.so.2 not
 * found (...)", "nccl: no CUDA device: libcuda.so.1 (the NVIDIA driver) is
 * not installed") rather than a crash.  The types and entry points come
 * from comm_nccl_abi.h, so this file compiles without CUDA headers; the
 * driver API (not the runtime, whose soname changes with every CUDA major)
 * gives the contexts and streams, and its CUstream is the runtime's
 * cudaStream_t, so the CUDA backend's stream can be passed in as is.
 * Where libnccl.so.2 is looked for: $TSR_NCCL_LIB (only there, when set),
 * the loader's path, $CUDA_HOME and /usr/local/cuda's lib dirs, next to the
 * program, then the nvidia-nccl-cu* wheels under python's site-packages
 * ($VIRTUAL_ENV, $CONDA_PREFIX, /usr/local, /usr, /opt/conda, ~/.local);
 * tests/gpu/run.sh sets TSR_NCCL_LIB from the wheel python imports.
 *
 * The group is one process driving several GPUs, one worker thread each, so
 * it is made with ncclCommInitAll; every rank also gets its device's
 * primary context (the one the CUDA runtime, and so the CUDA backend, uses)
 * and a non-blocking stream of its own for the synchronous calls and for
 * _async with stream NULL.
 *
 * Hangs.  An NCCL collective whose peer never launches its half spins on
 * the GPU forever.  So nothing here blocks in cudaStreamSynchronize:
 * tsr_comm_wait polls the stream (cuStreamQuery, backing off from 20 us to
 * 1 ms) and, between polls, NCCL's asynchronous error and the group's
 * broken flag; on a timeout, an error or a peer's break it aborts this
 * rank's communicator (ncclCommAbort stops its kernels) and breaks the
 * group, so the other ranks' waits abort theirs within a poll.  Each rank
 * counts the collectives it has enqueued, so a timeout names the peers that
 * are behind ("peer rank 1 did not arrive within 30 s").  Group creation
 * itself (ncclCommInitAll) is not under the timeout: it only involves this
 * process's devices.
 */
#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/comm/comm_impl.h"
#include "backend/comm/comm_nccl_abi.h"

#define NCCL_SONAME "libnccl.so.2"
#define CUDA_DRIVER_SONAME "libcuda.so.1"

/* The libraries, loaded once and kept for the life of the process (as the
 * CUDA module is).  A failed load is not remembered: the next group tries
 * again (TSR_NCCL_LIB may have changed). */
static struct {
    pthread_mutex_t mu;
    void *nccl_handle, *cuda_handle;
    tsr_nccl_api nccl;
    tsr_cu_api cu;
    int version; /* NCCL_VERSION_CODE of the loaded library */
    char nccl_path[PATH_MAX];
} lib = {.mu = PTHREAD_MUTEX_INITIALIZER};

typedef struct nccl_rank {
    tsr_nccl_comm comm;
    tsr_cu_device dev;
    tsr_cu_context ctx; /* the device's primary context, retained */
    bool ctx_held;
    tsr_cu_stream stream;     /* own; NULL when not made */
    tsr_cu_deviceptr scratch; /* one float, for barrier */
    bool aborted;
} nccl_rank;

typedef struct nccl_group {
    nccl_rank *ranks;                      /* [size] */
    uint64_t enqueued[TSR_COMM_MAX_RANKS]; /* collectives enqueued per rank (g->mu) */
} nccl_group;

/* ------------------------------------------------------------- loading */

static bool sym(void *h, const char *name, void *fn_ptr, const char **missing)
{
    void *p = dlsym(h, name);
    if (!p) {
        if (!*missing)
            *missing = name;
        return false;
    }
    memcpy(fn_ptr, &p, sizeof p); /* POSIX: object pointer to function pointer */
    return true;
}

/* dlopen `path` and resolve the NCCL entry points; false with *why set
 * (and *not_nccl when the file loaded but lacks an entry point). */
static bool try_nccl_ex(const char *path, char *why, size_t why_size, bool *not_nccl)
{
    *not_nccl = false;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, why_size, "%s", e ? e : path);
        return false;
    }
    tsr_nccl_api a;
    memset(&a, 0, sizeof a);
    const char *missing = NULL;
    sym(h, "ncclGetVersion", &a.get_version, &missing);
    sym(h, "ncclGetErrorString", &a.get_error_string, &missing);
    sym(h, "ncclCommInitAll", &a.comm_init_all, &missing);
    sym(h, "ncclCommDestroy", &a.comm_destroy, &missing);
    sym(h, "ncclCommAbort", &a.comm_abort, &missing);
    sym(h, "ncclCommGetAsyncError", &a.comm_get_async_error, &missing);
    sym(h, "ncclAllGather", &a.all_gather, &missing);
    sym(h, "ncclBroadcast", &a.broadcast, &missing);
    sym(h, "ncclAllReduce", &a.all_reduce, &missing);
    if (missing) {
        snprintf(why, why_size, "%s is not an NCCL 2.4+ library (no %s)", path, missing);
        dlclose(h);
        *not_nccl = true;
        return false;
    }
    const char *opt = NULL;
    sym(h, "ncclGetLastError", &a.get_last_error, &opt); /* 2.13+ */
    int v = 0;
    if (a.get_version(&v) != TSR_NCCL_SUCCESS)
        v = 0;
    lib.nccl = a;
    lib.version = v;
    lib.nccl_handle = h;
    snprintf(lib.nccl_path, sizeof lib.nccl_path, "%s", path);
    return true;
}

static bool try_nccl(const char *path, char *why, size_t why_size)
{
    bool not_nccl;
    return try_nccl_ex(path, why, why_size, &not_nccl);
}

/* The first match of a glob pattern that loads. */
static bool try_glob(const char *pattern, char *why, size_t why_size)
{
    glob_t gl;
    memset(&gl, 0, sizeof gl);
    bool ok = false;
    if (glob(pattern, 0, NULL, &gl) == 0) {
        for (size_t i = 0; i < gl.gl_pathc && !ok; i++)
            ok = try_nccl(gl.gl_pathv[i], why, why_size);
    }
    globfree(&gl);
    return ok;
}

/* Under lib.mu. */
static int load_nccl(void)
{
    if (lib.nccl_handle)
        return TSR_OK;
    char why[512] = "";
    const char *env = getenv("TSR_NCCL_LIB");
    if (env && *env) {
        bool not_nccl;
        if (try_nccl_ex(env, why, sizeof why, &not_nccl))
            return TSR_OK;
        if (not_nccl)
            return tsr_errorf(TSR_ERR_UNSUPPORTED, "nccl: TSR_NCCL_LIB=%s: %s", env, why);
        return tsr_errorf(TSR_ERR_UNSUPPORTED,
                          "nccl: " NCCL_SONAME " not found at TSR_NCCL_LIB=%s (%s)", env, why);
    }
    if (try_nccl(NCCL_SONAME, why, sizeof why))
        return TSR_OK;
    char loader_why[512];
    snprintf(loader_why, sizeof loader_why, "%s", why);
    char p[PATH_MAX + 64];
    const char *cuda_home = getenv("CUDA_HOME");
    const char *const roots[] = {cuda_home && *cuda_home ? cuda_home : NULL, "/usr/local/cuda"};
    for (size_t r = 0; r < sizeof roots / sizeof roots[0]; r++) {
        if (!roots[r])
            continue;
        static const char *const sub[] = {"lib64", "lib", "targets/x86_64-linux/lib",
                                          "targets/sbsa-linux/lib"};
        for (size_t s = 0; s < sizeof sub / sizeof sub[0]; s++) {
            snprintf(p, sizeof p, "%s/%s/" NCCL_SONAME, roots[r], sub[s]);
            if (access(p, F_OK) == 0 && try_nccl(p, why, sizeof why))
                return TSR_OK;
        }
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            static const char *const rel[] = {"", "/../lib"};
            for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
                snprintf(p, sizeof p, "%s%s/" NCCL_SONAME, exe, rel[i]);
                if (access(p, F_OK) == 0 && try_nccl(p, why, sizeof why))
                    return TSR_OK;
            }
        }
    }
    /* the nvidia-nccl-cu12/cu13 wheels: site-packages/nvidia/nccl/lib */
    const char *venv = getenv("VIRTUAL_ENV"), *conda = getenv("CONDA_PREFIX"),
               *home = getenv("HOME");
    const char *const prefixes[] = {venv && *venv ? venv : NULL,
                                    conda && *conda ? conda : NULL,
                                    "/usr/local",
                                    "/usr",
                                    "/opt/conda",
                                    home && *home ? home : NULL};
    const size_t n_prefixes = sizeof prefixes / sizeof prefixes[0];
    for (size_t i = 0; i < n_prefixes; i++) {
        if (!prefixes[i])
            continue;
        const char *mid = i == n_prefixes - 1 ? "/.local" : "";
        static const char *const kinds[] = {"site-packages", "dist-packages"};
        for (size_t k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s%s/lib/python3*/%s/nvidia/nccl/lib/" NCCL_SONAME, prefixes[i],
                     mid, kinds[k]);
            if (try_glob(p, why, sizeof why))
                return TSR_OK;
        }
    }
    return tsr_errorf(TSR_ERR_UNSUPPORTED,
                      "nccl: " NCCL_SONAME " not found (searched the loader's path, $CUDA_HOME "
                      "and /usr/local/cuda, the program's directory and nvidia-nccl wheels under "
                      "python's site-packages; set TSR_NCCL_LIB to its path): %s",
                      loader_why);
}

static const char *cu_name(tsr_cu_result r)
{
    const char *s = NULL;
    if (lib.cu.get_error_name && lib.cu.get_error_name(r, &s) == TSR_CU_SUCCESS && s)
        return s;
    return "unknown CUDA error";
}

/* Under lib.mu.  The driver, cuInit, and the device count. */
static int load_cuda(int *count)
{
    *count = 0;
    if (!lib.cuda_handle) {
        void *h = dlopen(CUDA_DRIVER_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            return tsr_errorf(TSR_ERR_UNSUPPORTED,
                              "nccl: no CUDA device: " CUDA_DRIVER_SONAME
                              " (the NVIDIA driver) is not installed (%s)",
                              e ? e : "dlopen failed");
        }
        tsr_cu_api a;
        memset(&a, 0, sizeof a);
        const char *missing = NULL;
        sym(h, "cuInit", &a.init, &missing);
        sym(h, "cuDeviceGetCount", &a.device_get_count, &missing);
        sym(h, "cuDeviceGet", &a.device_get, &missing);
        sym(h, "cuDevicePrimaryCtxRetain", &a.primary_ctx_retain, &missing);
        sym(h, "cuDevicePrimaryCtxRelease_v2", &a.primary_ctx_release, &missing);
        sym(h, "cuCtxSetCurrent", &a.ctx_set_current, &missing);
        sym(h, "cuStreamCreate", &a.stream_create, &missing);
        sym(h, "cuStreamDestroy_v2", &a.stream_destroy, &missing);
        sym(h, "cuStreamQuery", &a.stream_query, &missing);
        sym(h, "cuMemAlloc_v2", &a.mem_alloc, &missing);
        sym(h, "cuMemFree_v2", &a.mem_free, &missing);
        sym(h, "cuGetErrorName", &a.get_error_name, &missing);
        if (missing) {
            dlclose(h);
            return tsr_errorf(TSR_ERR_UNSUPPORTED,
                              "nccl: no CUDA device: " CUDA_DRIVER_SONAME " lacks %s (driver "
                              "too old?)",
                              missing);
        }
        lib.cu = a;
        lib.cuda_handle = h;
    }
    tsr_cu_result r = lib.cu.init(0);
    if (r != TSR_CU_SUCCESS)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "nccl: no CUDA device: cuInit: %s (%d)", cu_name(r),
                          r);
    r = lib.cu.device_get_count(count);
    if (r != TSR_CU_SUCCESS)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "nccl: no CUDA device: cuDeviceGetCount: %s",
                          cu_name(r));
    if (*count <= 0)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "nccl: no CUDA device (the driver sees none)");
    return TSR_OK;
}

/* ---------------------------------------------------------------- ops */

static tsr_nccl_data_type nccl_type(tsr_comm_dtype dt)
{
    switch (dt) {
    case TSR_COMM_F32: return TSR_NCCL_FLOAT32;
    case TSR_COMM_F16: return TSR_NCCL_FLOAT16;
    case TSR_COMM_BF16: return TSR_NCCL_BFLOAT16;
    default: return TSR_NCCL_UINT8;
    }
}

static const char *nccl_text(tsr_nccl_result r, tsr_nccl_comm comm)
{
    static _Thread_local char buf[384];
    const char *s = lib.nccl.get_error_string ? lib.nccl.get_error_string(r) : NULL;
    const char *last = lib.nccl.get_last_error && comm ? lib.nccl.get_last_error(comm) : NULL;
    snprintf(buf, sizeof buf, "%s%s%s", s ? s : "NCCL error", last && *last ? ": " : "",
             last && *last ? last : "");
    return buf;
}

/* Stop this rank's communicator (its kernels) once. */
static void abort_comm(nccl_rank *nr)
{
    if (nr->comm && !nr->aborted) {
        lib.nccl.comm_abort(nr->comm);
        nr->aborted = true;
    }
}

/* Under g->mu: the peers that have enqueued fewer collectives than `r`. */
static uint64_t behind(const tsr_comm_group *g, const nccl_group *ng, int r)
{
    uint64_t m = 0;
    for (int q = 0; q < g->size; q++)
        if (ng->enqueued[q] < ng->enqueued[r])
            m |= (uint64_t)1 << q;
    return m;
}

static int nccl_wait(tsr_comm *c, tsr_cu_stream s)
{
    tsr_comm_group *g = c->group;
    nccl_group *ng = g->impl;
    nccl_rank *nr = c->impl;
    const double deadline = tsr_comm_now() + g->timeout_s;
    long sleep_ns = 20000;
    for (;;) {
        tsr_cu_result r = nr->aborted ? TSR_CU_SUCCESS : lib.cu.stream_query(s);
        if (r != TSR_CU_SUCCESS && r != TSR_CU_ERROR_NOT_READY) {
            /* a CUDA error on this rank's stream: this device is to blame */
            abort_comm(nr);
            pthread_mutex_lock(&g->mu);
            tsr_comm_break_locked(g, (uint64_t)1 << c->rank,
                                  "rank %d: CUDA error on its stream: %s", c->rank, cu_name(r));
            pthread_mutex_unlock(&g->mu);
            return tsr_errorf(TSR_ERR_BACKEND, "CUDA error while waiting: %s (%d)", cu_name(r), r);
        }
        tsr_nccl_result ae = TSR_NCCL_SUCCESS;
        if (!nr->aborted && lib.nccl.comm_get_async_error(nr->comm, &ae) != TSR_NCCL_SUCCESS)
            ae = TSR_NCCL_SUCCESS;
        if (ae != TSR_NCCL_SUCCESS && ae != TSR_NCCL_IN_PROGRESS) {
            char text[384];
            snprintf(text, sizeof text, "%s", nccl_text(ae, nr->comm));
            abort_comm(nr);
            pthread_mutex_lock(&g->mu);
            tsr_comm_break_locked(g, 0, "NCCL error on rank %d: %s", c->rank, text);
            pthread_mutex_unlock(&g->mu);
            return tsr_errorf(TSR_ERR_BACKEND, "NCCL error: %s", text);
        }
        pthread_mutex_lock(&g->mu);
        const bool broken = g->broken;
        pthread_mutex_unlock(&g->mu);
        if (broken) {
            abort_comm(nr);
            return tsr_errorf(TSR_ERR_BACKEND, "%s", g->reason);
        }
        if (r == TSR_CU_SUCCESS)
            return TSR_OK;
        if (tsr_comm_now() > deadline) {
            abort_comm(nr);
            pthread_mutex_lock(&g->mu);
            const uint64_t late = behind(g, ng, c->rank);
            if (late) {
                char who[160];
                tsr_comm_format_ranks(late, who, sizeof who);
                tsr_comm_break_locked(g, late, "peer %s did not arrive within %g s", who,
                                      g->timeout_s);
            } else {
                tsr_comm_break_locked(g, 0,
                                      "not complete within %g s although every rank enqueued it "
                                      "(a device or the interconnect hung)",
                                      g->timeout_s);
            }
            pthread_mutex_unlock(&g->mu);
            return tsr_errorf(TSR_ERR_BACKEND, "%s", g->reason);
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000)
            sleep_ns *= 2;
    }
}

static int nccl_run(tsr_comm *c, const comm_args *a)
{
    tsr_comm_group *g = c->group;
    nccl_group *ng = g->impl;
    nccl_rank *nr = c->impl;
    tsr_cu_stream s = a->stream ? (tsr_cu_stream)a->stream : nr->stream;
    tsr_cu_result cr = lib.cu.ctx_set_current(nr->ctx);
    if (cr != TSR_CU_SUCCESS)
        return tsr_errorf(TSR_ERR_BACKEND, "cuCtxSetCurrent (device %d): %s", c->device,
                          cu_name(cr));
    if (a->op == COMM_OP_WAIT)
        return nccl_wait(c, s);
    if (a->dtype == TSR_COMM_BF16 && lib.version > 0 && lib.version < 21000)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "bf16 needs NCCL 2.10 or later (this is %d)",
                          lib.version);
    const tsr_nccl_data_type dt = nccl_type(a->dtype);
    tsr_nccl_result r;
    const char *fn;
    switch (a->op) {
    case COMM_OP_ALL_GATHER:
        fn = "ncclAllGather";
        r = lib.nccl.all_gather(a->send, a->recv, a->count, dt, nr->comm, s);
        break;
    case COMM_OP_BROADCAST:
        fn = "ncclBroadcast";
        /* send is the root's source (recv when in place; recv off the root) */
        r = lib.nccl.broadcast(a->send, a->recv, a->count, dt, a->root, nr->comm, s);
        break;
    case COMM_OP_ALL_REDUCE:
        fn = "ncclAllReduce";
        r = lib.nccl.all_reduce(a->send, a->recv, a->count, dt, TSR_NCCL_SUM, nr->comm, s);
        break;
    case COMM_OP_BARRIER: /* an all_reduce of one float, waited for */
        fn = "ncclAllReduce (barrier)";
        r = lib.nccl.all_reduce((const void *)(uintptr_t)nr->scratch,
                                (void *)(uintptr_t)nr->scratch, 1, TSR_NCCL_FLOAT32, TSR_NCCL_SUM,
                                nr->comm, s);
        break;
    default: return tsr_errorf(TSR_ERR_INTERNAL, "unknown op %d", (int)a->op);
    }
    if (r != TSR_NCCL_SUCCESS && r != TSR_NCCL_IN_PROGRESS) {
        char text[384];
        snprintf(text, sizeof text, "%s", nccl_text(r, nr->comm));
        abort_comm(nr);
        pthread_mutex_lock(&g->mu);
        tsr_comm_break_locked(g, 0, "%s failed on rank %d: %s", fn, c->rank, text);
        pthread_mutex_unlock(&g->mu);
        return tsr_errorf(TSR_ERR_BACKEND, "%s: %s", fn, text);
    }
    pthread_mutex_lock(&g->mu);
    ng->enqueued[c->rank]++;
    pthread_mutex_unlock(&g->mu);
    if (a->async && a->op != COMM_OP_BARRIER)
        return TSR_OK;
    return nccl_wait(c, s);
}

static void nccl_destroy(tsr_comm_group *g)
{
    nccl_group *ng = g->impl;
    if (!ng)
        return;
    for (int r = 0; r < g->size; r++) {
        nccl_rank *nr = &ng->ranks[r];
        if (nr->ctx_held)
            lib.cu.ctx_set_current(nr->ctx);
        if (nr->comm && !nr->aborted) {
            /* a broken group may have kernels waiting for a peer: abort */
            if (g->broken)
                lib.nccl.comm_abort(nr->comm);
            else
                lib.nccl.comm_destroy(nr->comm);
        }
        if (nr->scratch)
            lib.cu.mem_free(nr->scratch);
        if (nr->stream)
            lib.cu.stream_destroy(nr->stream);
        if (nr->ctx_held)
            lib.cu.primary_ctx_release(nr->dev);
    }
    free(ng->ranks);
    free(ng);
    g->impl = NULL;
}

static const comm_impl_ops nccl_ops = {nccl_run, NULL, nccl_destroy};

int tsr_comm_nccl_init(tsr_comm_group *g, const tsr_comm_options *o)
{
    int rc = TSR_OK, count = 0;
    int devs[TSR_COMM_MAX_RANKS];
    tsr_nccl_comm comms[TSR_COMM_MAX_RANKS];
    pthread_mutex_lock(&lib.mu);
    rc = load_nccl();
    if (rc == TSR_OK)
        rc = load_cuda(&count);
    pthread_mutex_unlock(&lib.mu);
    if (rc < 0)
        return rc;
    for (int r = 0; r < g->size; r++) {
        devs[r] = o->devices ? o->devices[r] : r;
        if (devs[r] < 0 || devs[r] >= count)
            return tsr_errorf(TSR_ERR_INVALID, "nccl: rank %d wants CUDA device %d, but %d exist%s",
                              r, devs[r], count, count == 1 ? "s" : "");
        for (int q = 0; q < r; q++)
            if (devs[q] == devs[r])
                return tsr_errorf(TSR_ERR_INVALID,
                                  "nccl: ranks %d and %d are both on CUDA device %d (NCCL needs "
                                  "one device per rank)",
                                  q, r, devs[r]);
    }
    nccl_group *ng = calloc(1, sizeof *ng);
    if (!ng)
        return tsr_errorf(TSR_ERR_NOMEM, "nccl: out of memory");
    ng->ranks = calloc((size_t)g->size, sizeof *ng->ranks);
    if (!ng->ranks) {
        free(ng);
        return tsr_errorf(TSR_ERR_NOMEM, "nccl: out of memory");
    }
    g->impl = ng;
    g->ops = &nccl_ops;
    for (int r = 0; r < g->size; r++) {
        nccl_rank *nr = &ng->ranks[r];
        tsr_cu_result cr = lib.cu.device_get(&nr->dev, devs[r]);
        if (cr == TSR_CU_SUCCESS) {
            cr = lib.cu.primary_ctx_retain(&nr->ctx, nr->dev);
            nr->ctx_held = cr == TSR_CU_SUCCESS;
        }
        if (cr == TSR_CU_SUCCESS)
            cr = lib.cu.ctx_set_current(nr->ctx);
        if (cr == TSR_CU_SUCCESS)
            cr = lib.cu.stream_create(&nr->stream, TSR_CU_STREAM_NON_BLOCKING);
        if (cr == TSR_CU_SUCCESS)
            cr = lib.cu.mem_alloc(&nr->scratch, sizeof(float));
        if (cr != TSR_CU_SUCCESS) {
            rc = tsr_errorf(TSR_ERR_BACKEND, "nccl: CUDA device %d: %s", devs[r], cu_name(cr));
            goto fail;
        }
        g->ranks[r].device = devs[r];
        g->ranks[r].impl = nr;
    }
    tsr_nccl_result nres = lib.nccl.comm_init_all(comms, g->size, devs);
    if (nres != TSR_NCCL_SUCCESS) {
        rc = tsr_errorf(TSR_ERR_BACKEND, "nccl: ncclCommInitAll over %d device%s (%s): %s", g->size,
                        g->size == 1 ? "" : "s", lib.nccl_path, nccl_text(nres, NULL));
        goto fail;
    }
    for (int r = 0; r < g->size; r++)
        ng->ranks[r].comm = comms[r];
    return TSR_OK;

fail:
    nccl_destroy(g);
    g->ops = NULL;
    return rc;
}
