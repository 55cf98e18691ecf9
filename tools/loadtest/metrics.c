/*
 * tools/loadtest/metrics.c - the server's /metrics (Prometheus text 0.0.4)
 * as a list of samples.
 *
 * Only what the report needs: every sample line "name{labels} value
 * [timestamp]" is kept with its key written as the server wrote it
 * ("tessera_jobs_total{state=\"done\"}"), so a lookup is an exact string
 * match.  Comments (# HELP, # TYPE) and blank lines are skipped; a line
 * that does not parse is skipped too (the report then shows the metric as
 * absent rather than failing the run).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lt.h"

static int add(lt_metrics *m, const char *key, size_t klen, double v)
{
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 64;
        lt_sample *ns = realloc(m->s, (size_t)cap * sizeof *ns);
        if (!ns)
            return -1;
        m->s = ns;
        m->cap = cap;
    }
    char *k = malloc(klen + 1);
    if (!k)
        return -1;
    memcpy(k, key, klen);
    k[klen] = '\0';
    m->s[m->n].key = k;
    m->s[m->n].value = v;
    m->n++;
    return 0;
}

static double parse_value(const char *s, const char *end)
{
    char buf[64];
    size_t len = (size_t)(end - s);
    if (len == 0 || len >= sizeof buf)
        return NAN;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (strcmp(buf, "+Inf") == 0)
        return INFINITY;
    if (strcmp(buf, "-Inf") == 0)
        return -INFINITY;
    char *e = NULL;
    double v = strtod(buf, &e);
    return (e && *e == '\0') ? v : NAN;
}

int lt_metrics_parse(lt_metrics *m, const char *text, size_t len)
{
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *q = p;
        while (q < le && (*q == ' ' || *q == '\t'))
            q++;
        if (q < le && *q != '#') {
            /* the key: the name, then a label set that may hold spaces in
             * quoted values */
            const char *k = q;
            while (q < le && *q != ' ' && *q != '{')
                q++;
            if (q < le && *q == '{') {
                bool quoted = false;
                for (; q < le; q++) {
                    if (*q == '\\' && quoted && q + 1 < le)
                        q++;
                    else if (*q == '"')
                        quoted = !quoted;
                    else if (*q == '}' && !quoted)
                        break;
                }
                if (q < le)
                    q++;
            }
            const char *kend = q;
            while (q < le && *q == ' ')
                q++;
            const char *v = q;
            while (q < le && *q != ' ' && *q != '\r')
                q++;
            double val = parse_value(v, q);
            if (kend > k && !isnan(val) && add(m, k, (size_t)(kend - k), val) < 0)
                return -1;
        }
        p = nl ? nl + 1 : end;
    }
    m->ok = true;
    return 0;
}

double lt_metrics_get(const lt_metrics *m, const char *key)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->s[i].key, key) == 0)
            return m->s[i].value;
    return NAN;
}

void lt_metrics_free(lt_metrics *m)
{
    for (int i = 0; i < m->n; i++)
        free(m->s[i].key);
    free(m->s);
    memset(m, 0, sizeof *m);
}
