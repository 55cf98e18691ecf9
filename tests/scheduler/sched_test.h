/*
 * tests/scheduler/sched_test.h - helpers shared by the scheduler test
 * sources (test_scheduler.c: RNG, full-sequence goldens, names; test_steps.c:
 * step counts 1..1000).
 */
#ifndef TSR_SCHED_TEST_H
#define TSR_SCHED_TEST_H

#include <stdbool.h>
#include <stddef.h>

#include "core/safetensors.h"

/* The goldens' model: 0.5 * input + float(0.8 * sin(0.01 t + 0.37 i)). */
void tsr_sched_test_fake_model(const float *in, double t, size_t n, float *out);
/* An F32 tensor of a golden file, NULL when absent; *n its element count. */
const float *tsr_sched_test_f32(tsr_safetensors *st, const char *name, size_t *n);
/* Max |got - want| relative to max |x| over want and prev (NULL: want only);
 * non-zero (and a message) above tol or on a non-finite got. */
int tsr_sched_test_close(const char *what, const float *got, const float *want, const float *prev,
                         size_t n, double tol);

/* test_steps.c */
int tsr_sched_test_steps(const char *sampler);
int tsr_sched_test_step_counts(void);

#endif
