/*
 * tests/ops/test_ops.h - the op-test harness shared by the ops test files.
 *
 * After ggml's test-backend-ops: every op case runs on the backend under
 * test, chosen by the environment variable TSR_TEST_DEVICE ("cpu" by
 * default; "cuda", "cuda:1", or the CPU storage variants "cpu-f16" and
 * "cpu-bf16"), with its inputs converted to the dtypes that backend asks
 * for and uploaded through the backend interface, and its output is
 * compared with the PyTorch golden (when the case has one) and with the CPU
 * backend's f32 result on the same inputs (the oracle).  So the same cases
 * check a GPU backend later, unchanged.  When the device cannot be opened
 * (no GPU, a build without CUDA) a case prints why and exits 77, which
 * ctest reports as skipped; an op the device refuses (supports_op) is
 * skipped the same way, naming the op and the backend's reason.
 */
#ifndef TSR_TEST_OPS_H
#define TSR_TEST_OPS_H

#include "backend/backend.h"
#include "test.h"

#define OPS_SKIP TSR_TEST_SKIP
#define OPS_MAX_SRC 6

/* The CPU oracle: f32, 3 threads (odd, to exercise uneven splits);
 * borrowed, lives for the process.  NULL when it cannot be created. */
tsr_backend *ops_test_backend(void);
/* The backend under test (TSR_TEST_DEVICE); the oracle itself for "cpu".
 * NULL when it cannot be opened, after printing the skip message. */
tsr_backend *ops_device(void);
/* The device's spec ("cpu" when unset). */
const char *ops_device_spec(void);

/* How an input reaches the device: as an activation (the device's
 * activation dtype), a parameter (its weight dtype), or unchanged (f32
 * timesteps, i32 ids). */
typedef enum ops_role { OPS_ACT, OPS_PARAM, OPS_ASIS } ops_role;

typedef struct ops_case ops_case;
/* Calls the op on `be`: src[] are tensors on `be` (NULL where absent), y
 * the output on `be`. */
typedef int (*ops_run_fn)(tsr_backend *be, const ops_case *c, const tsr_tensor *const *src,
                          tsr_tensor *y);

struct ops_case {
    const char *op;   /* "conv2d" */
    const char *name; /* the golden case, "c0" */
    int n_src;
    const tsr_tensor *src[OPS_MAX_SRC]; /* host tensors; NULL = absent input */
    ops_role role[OPS_MAX_SRC];
    const tsr_tensor *want; /* golden, host f32; NULL = compare with the oracle only */
    tsr_tensor y;           /* output shape (data unused) */
    bool inplace;           /* y is src[0] itself (ops that allow y == x) */
    double tol;             /* max error relative to max |reference| in f32 */
    ops_run_fn run;
    const void *params; /* for run */
};

/* Runs one case on the device and the oracle and compares: 0 passed, 1
 * failed, OPS_SKIP when the device refused the op (printed). */
int ops_check(const ops_case *c);
/* Folds case results: 1 if any failed, else OPS_SKIP if all skipped, else 0. */
typedef struct ops_tally {
    int ran, skipped, failed;
} ops_tally;
void ops_tally_add(ops_tally *t, int rc);
int ops_tally_result(const ops_tally *t);

/* Golden-free cases (test_ops_checks.c, test_ops_backend.c) */
int test_conv2d_tiled(void);
int test_attention_long(void);
int test_embedding_range(void);
int test_reject_shapes(void);
int test_aliasing(void);
int test_supports_op(void);
int test_epilogue(void);
int test_epilogue_checks(void);
int test_supports_desc(void);
int test_convert(void);
int test_events_pinned(void);
int test_storage_variant(void);

#endif
