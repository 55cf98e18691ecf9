/*
 * backend/cuda/cuda_sticky.h - which CUDA devices a sticky error has made
 * unusable, one record per device.
 *
 * Why per device: a sticky error (an illegal address, a launch failure)
 * poisons the CUDA context it happened in, and the runtime has one primary
 * context per device, shared by every backend on that device.  So it takes
 * out that device, and only that one: cuda:1 faulting must not fail
 * cuda:0's next call (docs/multi-gpu.md part 3: the server takes a failed
 * device out and reruns its images on the others).  Each backend checks its
 * own device's record before every op (tsr_cu_usable).
 *
 * Plain C with atomics and no CUDA header, so the bookkeeping is compiled
 * into the CUDA module and also into a unit test that runs in every build
 * (tests/gpu/test_cuda_sticky.c).  The first error of a device wins; a
 * record is never cleared while the process lives (a poisoned context
 * cannot be repaired: restart the process).
 */
#ifndef TSR_CUDA_STICKY_H
#define TSR_CUDA_STICKY_H

#ifdef __cplusplus
extern "C" {
#endif

/* Devices with a record of their own; a higher index shares the last. */
#define TSR_CU_STICKY_DEVICES 64

/* Record `what` for `device` unless it has a record already.  device < 0
 * (the caller could not tell which context failed): every device. */
void tsr_cu_sticky_mark(int device, const char *what);
/* The device's recorded error (stable once returned), or NULL while it is
 * usable. */
const char *tsr_cu_sticky_error(int device);
/* Forget every record: for the unit test only (a real process cannot undo
 * a poisoned context). */
void tsr_cu_sticky_reset_for_test(void);

#ifdef __cplusplus
}
#endif

#endif
