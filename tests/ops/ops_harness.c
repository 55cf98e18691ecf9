/*
 * tests/ops/ops_harness.c - running an op case on the backend under test
 * and on the CPU oracle, and comparing (see test_ops.h).
 *
 * Everything goes through the backend interface (alloc, upload, download,
 * sync), never through a device pointer, so the harness works unchanged on
 * a backend whose memory the host cannot see.  Outputs start as NaN (in
 * the output's dtype) so an element an op forgets to write fails.
 *
 * Tolerances: a case's own (1e-5 for most ops, max error over max
 * |reference|) when the device stores f32; f16 storage rounds every input
 * and output to 11 significant bits, so it is held to F16_TOL, bf16 (8
 * bits) to BF16_TOL, against the golden and the oracle alike.  Measured on
 * the CPU storage variants: at most 9.6e-4 (f16, attention) and 8.3e-3
 * (bf16, layer norm) over every op case; the bounds leave 2x.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "test.h"
#include "test_ops.h"

#define F16_TOL 2e-3
#define BF16_TOL 1.6e-2

tsr_backend *ops_test_backend(void)
{
    static tsr_backend *b;
    if (!b && tsr_backend_cpu_create(3, &b) < 0) {
        fprintf(stderr, "cannot create the CPU backend: %s\n", tsr_last_error());
        return NULL;
    }
    return b;
}

const char *ops_device_spec(void)
{
    const char *s = getenv("TSR_TEST_DEVICE");
    return s && *s ? s : "cpu";
}

tsr_backend *ops_device(void)
{
    static tsr_backend *b;
    static bool tried;
    const char *spec = ops_device_spec();
    if (strcmp(spec, "cpu") == 0)
        return ops_test_backend();
    if (!tried) {
        tried = true;
        if (tsr_backend_open(spec, 3, &b) < 0) {
            printf("skip: device '%s' is not available: %s\n", spec, tsr_last_error());
            b = NULL;
        }
    }
    return b;
}

/* ---- tensors on a backend ---- */

static void drop(tsr_backend *be, tsr_tensor *t)
{
    if (t->data)
        tsr_backend_free(be, t->data);
    t->data = NULL;
}

/* A tensor of `dt` on `be` holding host tensor h's values (converted), or
 * NaN when h's data is NULL. */
static int put(tsr_backend *be, const tsr_tensor *h, tsr_dtype dt, tsr_tensor *out)
{
    *out = tsr_tensor_make(dt, h->ndim, h->ne, NULL, be);
    const size_t n = (size_t)tsr_tensor_numel(h), bytes = tsr_tensor_nbytes(out);
    out->data = tsr_backend_alloc(be, bytes);
    void *tmp = malloc(bytes ? bytes : 1);
    float *nan = h->data ? NULL : malloc(n * sizeof(float));
    if (!out->data || !tmp || (!h->data && !nan)) {
        free(tmp);
        free(nan);
        drop(be, out);
        return tsr_errorf(TSR_ERR_NOMEM, "harness: out of memory");
    }
    const void *src = h->data;
    tsr_dtype sdt = h->dtype;
    if (!src) {
        for (size_t i = 0; i < n; i++)
            nan[i] = NAN;
        src = nan;
        sdt = TSR_F32;
    }
    if (sdt == dt)
        memcpy(tmp, src, bytes);
    else if (sdt == TSR_F32)
        tsr_convert_from_f32(tmp, dt, src, n);
    else
        tsr_convert_to_f32(tmp, src, sdt, n); /* dt is f32 */
    int rc = tsr_backend_upload(be, out->data, tmp, bytes);
    if (rc == TSR_OK)
        rc = tsr_backend_sync(be);
    free(tmp);
    free(nan);
    if (rc < 0)
        drop(be, out);
    return rc;
}

/* t's values as host f32 (n elements). */
static int get(tsr_backend *be, const tsr_tensor *t, float *host)
{
    const size_t n = (size_t)tsr_tensor_numel(t), bytes = tsr_tensor_nbytes(t);
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp)
        return tsr_errorf(TSR_ERR_NOMEM, "harness: out of memory");
    int rc = tsr_backend_download(be, tmp, t->data, bytes);
    if (rc == TSR_OK)
        rc = tsr_backend_sync(be);
    if (rc == TSR_OK)
        tsr_convert_to_f32(host, tmp, t->dtype, n);
    free(tmp);
    return rc;
}

/* Runs c on `be`; the output lands in host f32 `out`. */
static int run_on(tsr_backend *be, const ops_case *c, float *out)
{
    tsr_tensor dev[OPS_MAX_SRC];
    const tsr_tensor *srcp[OPS_MAX_SRC] = {0};
    tsr_tensor y = {0};
    memset(dev, 0, sizeof dev);
    int rc = TSR_OK;
    for (int i = 0; i < c->n_src && rc == TSR_OK; i++) {
        if (!c->src[i])
            continue;
        tsr_dtype dt = c->role[i] == OPS_ACT     ? tsr_backend_act_dtype(be)
                       : c->role[i] == OPS_PARAM ? tsr_backend_weight_dtype(be)
                                                 : c->src[i]->dtype;
        rc = put(be, c->src[i], dt, &dev[i]);
        srcp[i] = &dev[i];
    }
    if (rc == TSR_OK && c->inplace) {
        y = dev[0];
    } else if (rc == TSR_OK) {
        tsr_tensor shape = c->y;
        shape.data = NULL;
        shape.dtype = TSR_F32;
        rc = put(be, &shape, tsr_backend_act_dtype(be), &y);
    }
    if (rc == TSR_OK)
        rc = c->run(be, c, srcp, &y);
    if (rc == TSR_OK)
        rc = tsr_backend_sync(be);
    if (rc == TSR_OK)
        rc = get(be, &y, out);
    for (int i = 0; i < c->n_src; i++)
        drop(be, &dev[i]);
    if (!c->inplace)
        drop(be, &y);
    return rc;
}

static double tol_for(const ops_case *c, tsr_backend *be)
{
    const tsr_dtype a = tsr_backend_act_dtype(be), w = tsr_backend_weight_dtype(be);
    if (a == TSR_BF16 || w == TSR_BF16)
        return fmax(c->tol, BF16_TOL);
    if (a == TSR_F16 || w == TSR_F16)
        return fmax(c->tol, F16_TOL);
    return c->tol;
}

int ops_check(const ops_case *c)
{
    tsr_backend *dev = ops_device(), *cpu = ops_test_backend();
    if (!dev || !cpu)
        return OPS_SKIP;
    const size_t n = (size_t)tsr_tensor_numel(&c->y);
    float *got = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
    char what[160];
    int failed = 0;
    if (!got || !ref) {
        free(got);
        free(ref);
        fprintf(stderr, "%s/%s: out of memory\n", c->op, c->name);
        return 1;
    }
    int rc = run_on(dev, c, got);
    if (rc == TSR_ERR_UNSUPPORTED) {
        printf("skip %s/%s on %s: %s\n", c->op, c->name, dev->name, tsr_last_error());
        free(got);
        free(ref);
        return OPS_SKIP;
    }
    const double tol = tol_for(c, dev);
    if (rc < 0) {
        fprintf(stderr, "%s/%s on %s: op failed: %d %s\n", c->op, c->name, dev->name, rc,
                tsr_last_error());
        failed = 1;
    } else if (c->want) {
        snprintf(what, sizeof what, "%s/%s%s on %s vs golden", c->op, c->name,
                 c->inplace ? " (in place)" : "", dev->name);
        failed |= tsr_test_check_close(what, got, c->want->data, n, tol);
    }
    if (!failed && dev != cpu) {
        rc = run_on(cpu, c, ref);
        if (rc < 0) {
            fprintf(stderr, "%s/%s on the oracle: %s\n", c->op, c->name, tsr_last_error());
            failed = 1;
        } else {
            snprintf(what, sizeof what, "%s/%s on %s vs %s", c->op, c->name, dev->name,
                     cpu->name);
            failed |= tsr_test_check_close(what, got, ref, n, tol);
        }
    }
    free(got);
    free(ref);
    return failed;
}

void ops_tally_add(ops_tally *t, int rc)
{
    if (rc == OPS_SKIP)
        t->skipped++;
    else if (rc)
        t->failed++;
    else
        t->ran++;
}

int ops_tally_result(const ops_tally *t)
{
    if (t->failed)
        return 1;
    return t->ran == 0 && t->skipped > 0 ? OPS_SKIP : 0;
}
