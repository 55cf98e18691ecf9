/*
 * tools/loadtest/lt.h - tessera-loadtest, a load client for `tessera serve`.
 *
 * One thread, one libevent loop.  Every job is one HTTP connection: POST
 * /v1/jobs, then GET /v1/jobs/{id}/events on the same connection, read as
 * chunks (evhttp's chunked callback) and cut into server-sent events.  A
 * closed loop keeps N clients busy (a client submits its next job when its
 * last one ends); an open loop submits at Poisson arrival times (R jobs/s,
 * seeded).  Everything is bounded: a job count and/or a duration, a timeout
 * per job, a cap on jobs in flight.  docs/loadtest.md is the manual.
 *
 * Files: main.c (flags), profile.c (the job mix), run.c (the loop and the
 * HTTP client), metrics.c (Prometheus text), report.c (table, JSON, CSV).
 * Ownership: the lt_run owns its jobs and every libevent object; a job's
 * connection is freed outside evhttp's own callbacks (deferred), never
 * inside them.
 */
#ifndef LT_H
#define LT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#define LT_EXIT_OK 0
#define LT_EXIT_FAILED 1
#define LT_EXIT_USAGE 2

/* ------------------------------------------------------------ the mix */

/* One kind of job in the mix. */
typedef struct lt_mix {
    double weight;   /* > 0; the chance of this entry is weight / sum */
    int width, height, steps, n;
    char *prompt;    /* owned; NULL = the profile's prompts */
    cJSON *params;   /* owned; extra request fields (sampler, cfg_scale...) or NULL */
} lt_mix;

typedef struct lt_profile {
    lt_mix *mix;     /* owned */
    int n_mix;
    char **prompts;  /* owned; chosen at random per job */
    int n_prompts;
    cJSON *params;   /* owned; fields added to every job, or NULL */
    double total_weight;
} lt_profile;

/* Load and check a profile file.  0, or -1 with a message in err. */
int lt_profile_load(const char *path, lt_profile *p, char *err, size_t errlen);
/* A one-entry mix from the command-line size/steps/n. */
int lt_profile_single(lt_profile *p, int width, int height, int steps, int n, const char *prompt);
void lt_profile_free(lt_profile *p);
/* The entry a uniform draw u in [0,1) picks. */
int lt_profile_pick(const lt_profile *p, double u);

/* ------------------------------------------------------------ the RNG */

/* splitmix64: small, seedable, good enough for arrivals and mix draws. */
typedef struct lt_rng {
    uint64_t s;
} lt_rng;

uint64_t lt_rng_next(lt_rng *r);
double lt_rng_uniform(lt_rng *r); /* [0, 1) */

/* ------------------------------------------------------------ metrics */

/* One Prometheus sample: "name{labels}" and its value. */
typedef struct lt_sample {
    char *key;       /* owned: the name with its label set as written */
    double value;
} lt_sample;

typedef struct lt_metrics {
    lt_sample *s;    /* owned */
    int n, cap;
    bool ok;         /* fetched and parsed */
} lt_metrics;

/* Parse Prometheus text (0.0.4).  0, or -1 (out of memory). */
int lt_metrics_parse(lt_metrics *m, const char *text, size_t len);
/* The value of "name" or "name{labels}" exactly as the server writes it;
 * NAN when absent. */
double lt_metrics_get(const lt_metrics *m, const char *key);
void lt_metrics_free(lt_metrics *m);

/* ------------------------------------------------------------ jobs */

typedef enum lt_err {
    LT_OK = 0,
    LT_ERR_HTTP,       /* a status other than 202 (submit) or 200 (events) */
    LT_ERR_CONNECTION, /* refused, reset, closed early */
    LT_ERR_TIMEOUT,    /* the per-job timeout passed */
    LT_ERR_FAILED,     /* the job ended `failed` */
    LT_ERR_CANCELLED,  /* the job ended `cancelled` (someone else cancelled it) */
    LT_ERR_PROTOCOL,   /* a reply we cannot read: bad JSON, stream ended without an end */
    LT_ERR_DROPPED,    /* open loop: an arrival found --max-inflight jobs in flight */
    LT_ERR_COUNT
} lt_err;

/* The error kind as reported ("http_429", "timeout", ...). */
void lt_err_kind(lt_err e, int http_status, char *out, size_t len);

typedef enum lt_phase {
    LT_PH_SUBMIT,    /* POST in flight */
    LT_PH_EVENTS,    /* following the event stream */
    LT_PH_END,       /* final: timings fixed, connection released */
} lt_phase;

struct lt_run;

typedef struct lt_job {
    int seq;          /* 0.. in submission order */
    int client;       /* closed loop: the client; open loop: -1 */
    int mix;          /* entry of the profile */
    int width, height, steps, n;
    uint64_t seed;
    char id[64];      /* the server's job id */
    /* seconds since the run started; < 0 = never happened */
    double t_submit;  /* POST sent */
    double t_accepted; /* 202 read */
    double t_started; /* `started` event */
    double t_first_step, t_first_tiles;
    double t_end;     /* the final event (done, failed, cancelled) or the error */
    int images;       /* `image` events */
    int http_status;  /* of the failing request, or 202 */
    lt_err err;
    char detail[160]; /* the error's text, for the CSV */
    /* runtime */
    lt_phase phase;
    struct lt_run *run;
    struct evhttp_connection *conn;
    struct evhttp_request *req; /* the request in flight (borrowed from evhttp) */
    struct event *timer;        /* the per-job timeout */
    struct evhttp_connection *cancel_conn; /* DELETE of a timed-out job, best effort */
    int last_error;             /* enum evhttp_request_error seen by the error callback, or -1 */
    char *sse;                  /* unparsed stream bytes (owned) */
    size_t sse_len, sse_cap;
    bool released;
} lt_job;

/* time to first preview: the first `step` or `tiles` event, whichever came first */
double lt_job_first_preview(const lt_job *j);

/* ------------------------------------------------------------ the run */

typedef struct lt_config {
    char host[256];
    int port;
    const char *token;       /* borrowed; NULL = none */
    int clients;             /* closed loop: concurrent clients (> 0), else 0 */
    double rate;             /* open loop: arrivals per second (> 0), else 0 */
    long max_jobs;           /* stop submitting after this many (0 = no count limit) */
    double duration;         /* stop submitting after this many seconds (0 = no limit) */
    double timeout;          /* per job, seconds */
    int max_inflight;        /* open loop cap */
    uint64_t seed;
    bool metrics;            /* fetch /metrics before and after */
    bool progress;           /* a progress line on stderr every second */
    const lt_profile *profile; /* borrowed */
} lt_config;

typedef struct lt_run {
    const lt_config *cfg;
    struct event_base *base;
    lt_rng rng;
    lt_job **jobs;           /* owned, in submission order */
    long n_jobs, cap_jobs;
    long dropped;
    int inflight;
    bool stopping;           /* no more submissions */
    double t0_mono;          /* the run's start (monotonic seconds) */
    double t_load_start;     /* first submission, run-relative */
    double t_load_end;       /* last job's end, run-relative */
    struct event *arrival;   /* open loop timer */
    struct event *ticker;    /* progress and the duration check */
    bool finishing;          /* the after-metrics fetch has begun */
    double last_print;       /* the last progress line */
    lt_metrics before, after;
    char fatal[256];         /* why the run could not happen ("" = it ran) */
} lt_run;

/* Run the load.  0 when it ran (jobs may have failed: see the report), -1
 * when it could not (run->fatal says why). */
int lt_run_exec(lt_run *run, const lt_config *cfg);
void lt_run_free(lt_run *run);
double lt_now(void); /* monotonic seconds */

/* ------------------------------------------------------------ the report */

typedef struct lt_stats {
    long count;
    double p50, p95, p99, mean, max;
} lt_stats;

typedef struct lt_summary {
    long jobs, done, failed_jobs, images, errors;
    long err_count[LT_ERR_COUNT];
    double wall;             /* first submission to last end */
    double jobs_per_s, images_per_s;
    lt_stats submit, queue_wait, first_preview, done_lat;
} lt_summary;

void lt_summarize(const lt_run *run, lt_summary *s);
/* Nearest-rank percentile of sorted v[0..n-1] (q in (0, 1]). */
double lt_percentile(const double *sorted, long n, double q);
void lt_report_table(FILE *out, const lt_run *run, const lt_summary *s);
int lt_report_json(const char *path, const lt_run *run, const lt_summary *s);
int lt_report_csv(const char *path, const lt_run *run);

#endif
