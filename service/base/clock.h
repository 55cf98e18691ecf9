/*
 * service/base/clock.h - the two clocks the service reads: monotonic for
 * durations and deadlines, wall time for what clients and files see.
 */
#ifndef SVC_CLOCK_H
#define SVC_CLOCK_H

/* Seconds on the monotonic clock / since the Unix epoch. */
double svc_now_mono(void);
double svc_now_unix(void);

#endif
