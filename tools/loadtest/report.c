/*
 * tools/loadtest/report.c - what a run measured: the terminal table, the
 * JSON summary (--json) and one CSV row per job (--csv).
 *
 * Definitions (docs/loadtest.md), all measured on the client's monotonic
 * clock from the moment its POST /v1/jobs was sent ("submit"):
 *   submit         -> the 202 was read
 *   queue wait     -> the `started` event arrived
 *   first preview  -> the first `step` or `tiles` event arrived, whichever
 *                     came first (the first sign of progress a UI can show)
 *   done           -> the `done` event arrived (successful jobs only)
 * Throughput is counted over the load's wall time: from the first
 * submission to the end of the last job.  Percentiles are nearest-rank
 * (the ceil(q n)-th smallest sample), so p50 <= p95 <= p99 <= max always.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lt.h"

void lt_err_kind(lt_err e, int http_status, char *out, size_t len)
{
    switch (e) {
    case LT_OK: snprintf(out, len, "%s", ""); break;
    case LT_ERR_HTTP: snprintf(out, len, "http_%d", http_status); break;
    case LT_ERR_CONNECTION: snprintf(out, len, "connection"); break;
    case LT_ERR_TIMEOUT: snprintf(out, len, "timeout"); break;
    case LT_ERR_FAILED: snprintf(out, len, "job_failed"); break;
    case LT_ERR_CANCELLED: snprintf(out, len, "job_cancelled"); break;
    case LT_ERR_PROTOCOL: snprintf(out, len, "protocol"); break;
    case LT_ERR_DROPPED: snprintf(out, len, "dropped"); break;
    default: snprintf(out, len, "unknown"); break;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double lt_percentile(const double *sorted, long n, double q)
{
    if (n <= 0)
        return NAN;
    long k = (long)ceil(q * (double)n);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return sorted[k - 1];
}

static void stats_of(double *v, long n, lt_stats *s)
{
    memset(s, 0, sizeof *s);
    s->count = n;
    if (n == 0) {
        s->p50 = s->p95 = s->p99 = s->mean = s->max = NAN;
        return;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += v[i];
    s->p50 = lt_percentile(v, n, 0.50);
    s->p95 = lt_percentile(v, n, 0.95);
    s->p99 = lt_percentile(v, n, 0.99);
    s->mean = sum / (double)n;
    s->max = v[n - 1];
}

void lt_summarize(const lt_run *run, lt_summary *s)
{
    memset(s, 0, sizeof *s);
    const long n = run->n_jobs;
    double *v[4];
    long c[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++)
        v[k] = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    s->jobs = n;
    for (long i = 0; i < n; i++) {
        const lt_job *j = run->jobs[i];
        s->images += j->images;
        s->err_count[j->err]++;
        if (j->err == LT_OK)
            s->done++;
        else
            s->errors++;
        if (j->err == LT_ERR_FAILED)
            s->failed_jobs++;
        if (!v[0] || !v[1] || !v[2] || !v[3])
            continue;
        if (j->t_accepted >= 0)
            v[0][c[0]++] = j->t_accepted - j->t_submit;
        if (j->t_started >= 0)
            v[1][c[1]++] = j->t_started - j->t_submit;
        double fp = lt_job_first_preview(j);
        if (fp >= 0)
            v[2][c[2]++] = fp - j->t_submit;
        if (j->err == LT_OK)
            v[3][c[3]++] = j->t_end - j->t_submit;
    }
    stats_of(v[0], c[0], &s->submit);
    stats_of(v[1], c[1], &s->queue_wait);
    stats_of(v[2], c[2], &s->first_preview);
    stats_of(v[3], c[3], &s->done_lat);
    for (int k = 0; k < 4; k++)
        free(v[k]);
    s->wall = run->t_load_end - run->t_load_start;
    if (s->wall > 0) {
        s->jobs_per_s = (double)s->done / s->wall;
        s->images_per_s = (double)s->images / s->wall;
    }
}

/* ------------------------------------------------------------ error kinds */

typedef struct kinds {
    char name[32][24];
    long count[32];
    int n;
} kinds;

static void count_kinds(const lt_run *run, kinds *k)
{
    memset(k, 0, sizeof *k);
    for (long i = 0; i < run->n_jobs; i++) {
        const lt_job *j = run->jobs[i];
        if (j->err == LT_OK)
            continue;
        char name[24];
        lt_err_kind(j->err, j->http_status, name, sizeof name);
        int x = 0;
        while (x < k->n && strcmp(k->name[x], name) != 0)
            x++;
        if (x == k->n) {
            if (k->n == 32)
                continue;
            snprintf(k->name[k->n++], sizeof k->name[0], "%s", name);
        }
        k->count[x]++;
    }
}

/* ------------------------------------------------------------ metrics */

static const char *const METRICS[] = {
    "tessera_images_total",
    "tessera_unet_calls_total",
    "tessera_unet_call_images_sum",
    "tessera_unet_call_images_count",
    "tessera_unet_call_seconds_sum",
    "tessera_jobs_total{state=\"done\"}",
    "tessera_jobs_total{state=\"failed\"}",
    "tessera_jobs_total{state=\"cancelled\"}",
    "tessera_http_responses_total{code=\"202\"}",
    "tessera_http_responses_total{code=\"429\"}",
    NULL,
};

static double delta(const lt_run *run, const char *key)
{
    double a = lt_metrics_get(&run->after, key), b = lt_metrics_get(&run->before, key);
    if (isnan(b) && !isnan(a) && run->before.ok)
        b = 0; /* a labelled counter appears once it is first counted */
    return a - b;
}

static bool have_metrics(const lt_run *run)
{
    return run->before.ok && run->after.ok;
}

/* ------------------------------------------------------------ the table */

static void row(FILE *out, const char *name, const lt_stats *s)
{
    if (s->count == 0) {
        fprintf(out, "  %-16s %6ld %9s %9s %9s %9s %9s\n", name, 0L, "-", "-", "-", "-", "-");
        return;
    }
    fprintf(out, "  %-16s %6ld %9.1f %9.1f %9.1f %9.1f %9.1f\n", name, s->count, s->p50 * 1e3,
            s->p95 * 1e3, s->p99 * 1e3, s->mean * 1e3, s->max * 1e3);
}

void lt_report_table(FILE *out, const lt_run *run, const lt_summary *s)
{
    const lt_config *c = run->cfg;
    fprintf(out, "\ntessera-loadtest: http://%s:%d, ", c->host, c->port);
    if (c->clients > 0)
        fprintf(out, "closed loop, %d client%s", c->clients, c->clients == 1 ? "" : "s");
    else
        fprintf(out, "open loop, %g jobs/s (Poisson, seed %llu)", c->rate,
                (unsigned long long)c->seed);
    fprintf(out, ", %d mix entr%s\n", c->profile->n_mix, c->profile->n_mix == 1 ? "y" : "ies");
    fprintf(out, "  jobs        %ld submitted, %ld done, %ld with errors; wall %.2f s\n", s->jobs,
            s->done, s->errors, s->wall);
    fprintf(out, "  throughput  %.3f jobs/s, %.3f images/s (%ld images)\n\n", s->jobs_per_s,
            s->images_per_s, s->images);
    fprintf(out, "  %-16s %6s %9s %9s %9s %9s %9s\n", "latency (ms)", "count", "p50", "p95",
            "p99", "mean", "max");
    row(out, "submit (202)", &s->submit);
    row(out, "queue wait", &s->queue_wait);
    row(out, "first preview", &s->first_preview);
    row(out, "done", &s->done_lat);
    kinds k;
    count_kinds(run, &k);
    fprintf(out, "\n  errors      ");
    if (k.n == 0)
        fprintf(out, "none");
    for (int i = 0; i < k.n; i++)
        fprintf(out, "%s%s %ld", i ? ", " : "", k.name[i], k.count[i]);
    fprintf(out, "\n");
    for (long i = 0, shown = 0; i < run->n_jobs && shown < 3; i++) {
        const lt_job *j = run->jobs[i];
        if (j->err != LT_OK && j->detail[0]) {
            char name[24];
            lt_err_kind(j->err, j->http_status, name, sizeof name);
            fprintf(out, "              e.g. job %d: %s: %s\n", j->seq, name, j->detail);
            shown++;
        }
    }
    if (!have_metrics(run)) {
        fprintf(out, "\n  server /metrics: not read\n\n");
        return;
    }
    const double images = delta(run, "tessera_images_total");
    const double calls = delta(run, "tessera_unet_calls_total");
    const double isum = delta(run, "tessera_unet_call_images_sum");
    const double icount = delta(run, "tessera_unet_call_images_count");
    const double usec = delta(run, "tessera_unet_call_seconds_sum");
    fprintf(out, "\n  server /metrics, after - before\n");
    fprintf(out, "    images                 %8.0f   (the client counted %ld: %s)\n", images,
            s->images, images == (double)s->images ? "equal" : "DIFFERENT");
    fprintf(out, "    UNet calls             %8.0f\n", calls);
    if (icount > 0)
        fprintf(out, "    images per UNet call   %8.2f\n", isum / icount);
    else
        fprintf(out, "    images per UNet call          -\n");
    fprintf(out, "    UNet seconds           %8.2f   (%.0f %% of the wall time)\n", usec,
            s->wall > 0 ? 100.0 * usec / s->wall : NAN);
    fprintf(out, "    jobs done/failed/cancelled  %.0f / %.0f / %.0f\n",
            delta(run, "tessera_jobs_total{state=\"done\"}"),
            delta(run, "tessera_jobs_total{state=\"failed\"}"),
            delta(run, "tessera_jobs_total{state=\"cancelled\"}"));
    fprintf(out, "\n");
}

/* ------------------------------------------------------------ JSON */

static cJSON *num(double v)
{
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

static cJSON *stats_json(const lt_stats *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)s->count);
    cJSON_AddItemToObject(o, "p50", num(s->p50 * 1e3));
    cJSON_AddItemToObject(o, "p95", num(s->p95 * 1e3));
    cJSON_AddItemToObject(o, "p99", num(s->p99 * 1e3));
    cJSON_AddItemToObject(o, "mean", num(s->mean * 1e3));
    cJSON_AddItemToObject(o, "max", num(s->max * 1e3));
    return o;
}

static cJSON *metrics_json(const lt_run *run)
{
    cJSON *m = cJSON_CreateObject();
    cJSON *before = cJSON_AddObjectToObject(m, "before");
    cJSON *after = cJSON_AddObjectToObject(m, "after");
    cJSON *d = cJSON_AddObjectToObject(m, "delta");
    for (int i = 0; METRICS[i]; i++) {
        cJSON_AddItemToObject(before, METRICS[i], num(lt_metrics_get(&run->before, METRICS[i])));
        cJSON_AddItemToObject(after, METRICS[i], num(lt_metrics_get(&run->after, METRICS[i])));
        cJSON_AddItemToObject(d, METRICS[i], num(delta(run, METRICS[i])));
    }
    const double isum = delta(run, "tessera_unet_call_images_sum");
    const double icount = delta(run, "tessera_unet_call_images_count");
    cJSON_AddItemToObject(m, "images_per_unet_call", num(icount > 0 ? isum / icount : NAN));
    cJSON_AddItemToObject(m, "rss_bytes_after",
                          num(lt_metrics_get(&run->after, "tessera_process_resident_bytes")));
    return m;
}

int lt_report_json(const char *path, const lt_run *run, const lt_summary *s)
{
    const lt_config *c = run->cfg;
    cJSON *o = cJSON_CreateObject();
    char target[300];
    snprintf(target, sizeof target, "http://%s:%d", c->host, c->port);
    cJSON_AddStringToObject(o, "target", target);
    cJSON *cf = cJSON_AddObjectToObject(o, "config");
    cJSON_AddStringToObject(cf, "mode", c->clients > 0 ? "closed" : "open");
    cJSON_AddNumberToObject(cf, "clients", c->clients);
    cJSON_AddNumberToObject(cf, "rate", c->rate);
    cJSON_AddNumberToObject(cf, "jobs", (double)c->max_jobs);
    cJSON_AddNumberToObject(cf, "duration", c->duration);
    cJSON_AddNumberToObject(cf, "timeout", c->timeout);
    cJSON_AddNumberToObject(cf, "seed", (double)c->seed);
    cJSON *mix = cJSON_AddArrayToObject(cf, "mix");
    for (int i = 0; i < c->profile->n_mix; i++) {
        const lt_mix *m = &c->profile->mix[i];
        long count = 0;
        for (long k = 0; k < run->n_jobs; k++)
            count += run->jobs[k]->mix == i;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "weight", m->weight);
        cJSON_AddNumberToObject(e, "width", m->width);
        cJSON_AddNumberToObject(e, "height", m->height);
        cJSON_AddNumberToObject(e, "steps", m->steps);
        cJSON_AddNumberToObject(e, "n", m->n);
        cJSON_AddNumberToObject(e, "jobs", (double)count);
        cJSON_AddItemToArray(mix, e);
    }
    cJSON_AddNumberToObject(o, "jobs", (double)s->jobs);
    cJSON_AddNumberToObject(o, "done", (double)s->done);
    cJSON_AddNumberToObject(o, "errors", (double)s->errors);
    cJSON_AddNumberToObject(o, "images", (double)s->images);
    cJSON_AddItemToObject(o, "wall_s", num(s->wall));
    cJSON_AddItemToObject(o, "jobs_per_s", num(s->jobs_per_s));
    cJSON_AddItemToObject(o, "images_per_s", num(s->images_per_s));
    cJSON *lat = cJSON_AddObjectToObject(o, "latency_ms");
    cJSON_AddItemToObject(lat, "submit", stats_json(&s->submit));
    cJSON_AddItemToObject(lat, "queue_wait", stats_json(&s->queue_wait));
    cJSON_AddItemToObject(lat, "first_preview", stats_json(&s->first_preview));
    cJSON_AddItemToObject(lat, "done", stats_json(&s->done_lat));
    kinds k;
    count_kinds(run, &k);
    cJSON *errs = cJSON_AddObjectToObject(o, "errors_by_kind");
    for (int i = 0; i < k.n; i++)
        cJSON_AddNumberToObject(errs, k.name[i], (double)k.count[i]);
    if (have_metrics(run))
        cJSON_AddItemToObject(o, "metrics", metrics_json(run));
    else
        cJSON_AddNullToObject(o, "metrics");
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text)
        return -1;
    FILE *f = fopen(path, "w");
    int rc = -1;
    if (f) {
        rc = fprintf(f, "%s\n", text) < 0 ? -1 : 0;
        if (fclose(f) != 0)
            rc = -1;
    }
    cJSON_free(text);
    return rc;
}

/* ------------------------------------------------------------ CSV */

static void ms_cell(FILE *f, double t, double from)
{
    if (t >= 0 && from >= 0)
        fprintf(f, ",%.3f", (t - from) * 1e3);
    else
        fputc(',', f);
}

int lt_report_csv(const char *path, const lt_run *run)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "seq,client,job_id,mix,width,height,steps,n,seed,t_submit_s,t_end_s,"
               "submit_ms,queue_wait_ms,first_step_ms,first_tiles_ms,first_preview_ms,done_ms,"
               "images,state,error,http_status,detail\n");
    const double t0 = run->t_load_start;
    for (long i = 0; i < run->n_jobs; i++) {
        const lt_job *j = run->jobs[i];
        char kind[24];
        lt_err_kind(j->err, j->http_status, kind, sizeof kind);
        fprintf(f, "%d,%d,%s,%d,%d,%d,%d,%d,%llu,%.4f,%.4f", j->seq, j->client, j->id, j->mix,
                j->width, j->height, j->steps, j->n, (unsigned long long)j->seed,
                j->t_submit - t0, j->t_end - t0);
        ms_cell(f, j->t_accepted, j->t_submit);
        ms_cell(f, j->t_started, j->t_submit);
        ms_cell(f, j->t_first_step, j->t_submit);
        ms_cell(f, j->t_first_tiles, j->t_submit);
        ms_cell(f, lt_job_first_preview(j), j->t_submit);
        if (j->err == LT_OK)
            ms_cell(f, j->t_end, j->t_submit);
        else
            fputc(',', f);
        fprintf(f, ",%d,%s,%s,%d,\"", j->images, j->err == LT_OK ? "done" : "error", kind,
                j->http_status);
        for (const char *p = j->detail; *p; p++) {
            if (*p == '"')
                fputc('"', f);
            fputc(*p, f);
        }
        fprintf(f, "\"\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}
