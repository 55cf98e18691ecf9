/*
 * service/base/metrics.c - see metrics.h.
 */
#include "metrics.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

static void hist_init(svc_hist *h, const double *bounds, int n)
{
    memset(h, 0, sizeof *h);
    h->n = n;
    memcpy(h->bounds, bounds, (size_t)n * sizeof *bounds);
}

void svc_metrics_init(svc_metrics *m)
{
    memset(m, 0, sizeof *m);
    static const double images[] = {1, 2, 4, 8, 16, 32};
    static const double call[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
    static const double wait[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
    hist_init(&m->unet_images, images, 6);
    hist_init(&m->unet_seconds, call, 13);
    hist_init(&m->first_step, wait, 14);
    hist_init(&m->done, wait, 14);
}

void svc_hist_observe(svc_hist *h, double v)
{
    h->count++;
    h->sum += v;
    for (int i = 0; i < h->n; i++) {
        if (v <= h->bounds[i]) {
            h->counts[i]++;
            return;
        }
    }
}

static void render_hist(struct evbuffer *out, const char *name, const char *help,
                        const svc_hist *h)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        evbuffer_add_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i],
                            (unsigned long long)cum);
    }
    evbuffer_add_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                        (unsigned long long)h->count, name, h->sum, name,
                        (unsigned long long)h->count);
}

static long long resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    long long pages = 0, rss = 0;
    int n = fscanf(f, "%lld %lld", &pages, &rss);
    fclose(f);
    return n == 2 ? rss * sysconf(_SC_PAGESIZE) : -1;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

void svc_metrics_render(const svc_metrics *m, const svc_gauges *g, struct evbuffer *out)
{
    evbuffer_add_printf(out,
                        "# HELP tessera_queue_images Images waiting for a worker.\n"
                        "# TYPE tessera_queue_images gauge\ntessera_queue_images %d\n"
                        "# HELP tessera_running_images Images in the workers' batches.\n"
                        "# TYPE tessera_running_images gauge\ntessera_running_images %d\n"
                        "# HELP tessera_workers Workers (one per device).\n"
                        "# TYPE tessera_workers gauge\ntessera_workers %d\n"
                        "# HELP tessera_sse_clients Open event streams.\n"
                        "# TYPE tessera_sse_clients gauge\ntessera_sse_clients %d\n",
                        g->queue_images, g->running_images, g->workers, g->sse_clients);
    evbuffer_add_printf(out,
                        "# HELP tessera_http_body_bytes Request body bytes held now "
                        "(--max-bodies).\n"
                        "# TYPE tessera_http_body_bytes gauge\ntessera_http_body_bytes %llu\n"
                        "# HELP tessera_http_accept_errors_total accept() failures (e.g. out of "
                        "descriptors); accepting pauses 100 ms after each.\n"
                        "# TYPE tessera_http_accept_errors_total counter\n"
                        "tessera_http_accept_errors_total %llu\n",
                        g->body_bytes, g->accept_errors);
    static const char *states[SVC_JC_COUNT] = {"queued", "running", "done", "failed",
                                               "cancelled"};
    evbuffer_add_printf(out, "# HELP tessera_jobs_total Jobs that reached each state.\n"
                             "# TYPE tessera_jobs_total counter\n");
    for (int i = 0; i < SVC_JC_COUNT; i++)
        evbuffer_add_printf(out, "tessera_jobs_total{state=\"%s\"} %llu\n", states[i],
                            (unsigned long long)m->jobs[i]);
    evbuffer_add_printf(out, "# HELP tessera_http_responses_total HTTP responses by status.\n"
                             "# TYPE tessera_http_responses_total counter\n");
    for (int c = 100; c < 600; c++)
        if (m->http[c])
            evbuffer_add_printf(out, "tessera_http_responses_total{code=\"%d\"} %llu\n", c,
                                (unsigned long long)m->http[c]);
    evbuffer_add_printf(out,
                        "# HELP tessera_unet_calls_total UNet calls (each one batch step).\n"
                        "# TYPE tessera_unet_calls_total counter\ntessera_unet_calls_total %llu\n",
                        (unsigned long long)m->unet_calls);
    evbuffer_add_printf(out,
                        "# HELP tessera_tiles_published_total Preview/final tiles published.\n"
                        "# TYPE tessera_tiles_published_total counter\n"
                        "tessera_tiles_published_total %llu\n"
                        "# HELP tessera_tile_bytes_total JPEG bytes of the tiles published.\n"
                        "# TYPE tessera_tile_bytes_total counter\ntessera_tile_bytes_total %llu\n"
                        "# HELP tessera_tile_encode_seconds_total Encoder CPU seconds (diff + "
                        "JPEG).\n"
                        "# TYPE tessera_tile_encode_seconds_total counter\n"
                        "tessera_tile_encode_seconds_total %.6f\n",
                        (unsigned long long)m->tiles_published, (unsigned long long)m->tile_bytes,
                        m->tile_encode_seconds);
    render_hist(out, "tessera_unet_call_images", "Images per UNet call.", &m->unet_images);
    render_hist(out, "tessera_unet_call_seconds", "Seconds per UNet call.", &m->unet_seconds);
    render_hist(out, "tessera_job_first_step_seconds",
                "Seconds from submission to a job's first step.", &m->first_step);
    render_hist(out, "tessera_job_done_seconds", "Seconds from submission to a job's end.",
                &m->done);
    evbuffer_add_printf(out,
                        "# HELP tessera_images_total Images generated and stored.\n"
                        "# TYPE tessera_images_total counter\ntessera_images_total %llu\n"
                        "# HELP tessera_process_resident_bytes Resident memory.\n"
                        "# TYPE tessera_process_resident_bytes gauge\n"
                        "tessera_process_resident_bytes %lld\n"
                        "# HELP tessera_process_open_fds Open file descriptors.\n"
                        "# TYPE tessera_process_open_fds gauge\ntessera_process_open_fds %d\n",
                        (unsigned long long)m->images, resident_bytes(), open_fds());
}
