/*
 * cli/cli_util.h - small helpers the subcommands share: a
 * monotonic clock, medians, the process's memory figures from /proc, and
 * a seeded normal fill for benchmark inputs.
 */
#ifndef TSR_CLI_UTIL_H
#define TSR_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Seconds on a monotonic clock. */
double tsr_cli_now(void);
/* qsort comparator for doubles. */
int tsr_cli_cmp_double(const void *a, const void *b);
/* Sorts t[0..n) and returns its median (n >= 1). */
double tsr_cli_median(double *t, int n);
/* "VmRSS" / "VmHWM" from /proc/self/status in MiB; -1 when unavailable. */
double tsr_cli_proc_mib(const char *key);
/* Reset VmHWM to the current RSS (Linux >= 4.0); false when unsupported. */
bool tsr_cli_reset_peak_rss(void);
/* n standard normals (Box-Muller over a 64-bit LCG advanced in *state). */
void tsr_cli_fill_normal(float *p, size_t n, uint64_t *state);

#endif
