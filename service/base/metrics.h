/*
 * service/base/metrics.h - counters and histograms for GET /metrics (Prometheus
 * text format 0.0.4).
 *
 * Owner: the event loop.  Workers report UNet calls through the mailbox;
 * nothing here is touched from another thread, so there are no atomics.
 */
#ifndef SVC_METRICS_H
#define SVC_METRICS_H

#include <stdint.h>

struct evbuffer;

#define SVC_HIST_MAX 16

typedef struct svc_hist {
    int n;                          /* buckets (upper bounds), +Inf implied */
    double bounds[SVC_HIST_MAX];
    uint64_t counts[SVC_HIST_MAX];  /* per bucket (not cumulative) */
    uint64_t count;
    double sum;
} svc_hist;

typedef enum svc_job_counter {
    SVC_JC_QUEUED,    /* accepted */
    SVC_JC_RUNNING,   /* first image started */
    SVC_JC_DONE,
    SVC_JC_FAILED,
    SVC_JC_CANCELLED,
    SVC_JC_COUNT
} svc_job_counter;

typedef struct svc_metrics {
    uint64_t jobs[SVC_JC_COUNT];
    uint64_t http[600];             /* responses by status code */
    uint64_t unet_calls;
    uint64_t images;                /* images stored */
    uint64_t tiles_published, tile_bytes;
    double tile_encode_seconds;     /* encoder CPU time (diff + JPEG) */
    svc_hist unet_images, unet_seconds, first_step, done;
} svc_metrics;

/* Gauges the caller reads at scrape time. */
typedef struct svc_gauges {
    int queue_images, running_images, workers, sse_clients;
    unsigned long long body_bytes;    /* request bodies held (--max-bodies) */
    unsigned long long accept_errors; /* accept() failures (descriptors out) */
} svc_gauges;

void svc_metrics_init(svc_metrics *m);
void svc_hist_observe(svc_hist *h, double v);
void svc_metrics_render(const svc_metrics *m, const svc_gauges *g, struct evbuffer *out);

#endif
