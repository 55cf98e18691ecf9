/*
 * tests/ops/test_ops.h - what the two files of the ops test binary share:
 * the process-wide CPU backend and the golden-free test cases.
 */
#ifndef TSR_TEST_OPS_H
#define TSR_TEST_OPS_H

#include "backend/backend.h"

/* A CPU backend with 3 threads (odd, to exercise uneven splits); borrowed,
 * lives for the process.  NULL when it cannot be created. */
tsr_backend *ops_test_backend(void);

int test_conv2d_tiled(void);
int test_attention_long(void);
int test_embedding_range(void);
int test_reject_shapes(void);
int test_aliasing(void);
int test_supports_op(void);

#endif
