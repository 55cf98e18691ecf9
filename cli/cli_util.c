/*
 * cli/cli_util.c - see cli_util.h.
 */
#include "cli_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double tsr_cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tsr_cli_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tsr_cli_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof(double), tsr_cli_cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

double tsr_cli_proc_mib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    double v = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtod(line + klen + 1, NULL) / 1024.0;
            break;
        }
    fclose(f);
    return v;
}

bool tsr_cli_reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

void tsr_cli_fill_normal(float *p, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i += 2) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            *s = *s * 6364136223846793005ull + 1442695040888963407ull;
            u[k] = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
        }
        double r = sqrt(-2.0 * log(u[0])), a = 6.283185307179586 * u[1];
        p[i] = (float)(r * cos(a));
        if (i + 1 < n)
            p[i + 1] = (float)(r * sin(a));
    }
}
