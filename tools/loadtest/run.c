/*
 * tools/loadtest/run.c - the load: one libevent loop, one HTTP connection
 * per job (POST /v1/jobs, then its event stream on the same connection).
 *
 * Life of a job: submit() sends the POST and arms the job's timeout;
 * on_submit_done() reads the 202 and asks for /v1/jobs/{id}/events with a
 * chunked callback; on_events_chunk() cuts the chunks into server-sent
 * events and stamps the times (started, first step, first tiles, images);
 * the final event (done, failed, cancelled), an HTTP or connection error,
 * or the timeout ends the job (end_job).  Ending never frees anything
 * inside evhttp's callbacks: the connection is released by a zero-delay
 * event on the next loop turn (redis' freeClientAsync), and evhttp frees
 * its pending requests without calling back.  Job records live until the
 * run is freed, so a late callback finds its job ended and does nothing.
 *
 * Bounds: submissions stop at --jobs or --duration; every job ends by its
 * --timeout; the open loop holds at most --max-inflight jobs (an arrival
 * past that is recorded as `dropped`).  So the loop always exits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "lt.h"

#define SSE_MAX (4u << 20) /* one unfinished event may not pass this */

double lt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double rel(const lt_run *r)
{
    return lt_now() - r->t0_mono;
}

double lt_job_first_preview(const lt_job *j)
{
    if (j->t_first_step >= 0 && j->t_first_tiles >= 0)
        return j->t_first_step < j->t_first_tiles ? j->t_first_step : j->t_first_tiles;
    return j->t_first_step >= 0 ? j->t_first_step : j->t_first_tiles;
}

static void submit(lt_run *r, int client);
static void check_finish(lt_run *r);

/* ------------------------------------------------------------ helpers */

static void defer(lt_run *r, event_callback_fn fn, void *arg)
{
    const struct timeval zero = {0, 0};
    if (event_base_once(r->base, -1, EV_TIMEOUT, fn, arg, &zero) != 0)
        fn(-1, EV_TIMEOUT, arg); /* out of memory: do it now, outside callbacks anyway */
}

static void add_headers(lt_run *r, struct evhttp_request *req, const char *accept)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    char host[300];
    snprintf(host, sizeof host, "%s:%d", r->cfg->host, r->cfg->port);
    evhttp_add_header(h, "Host", host);
    evhttp_add_header(h, "Accept", accept);
    evhttp_add_header(h, "User-Agent", "tessera-loadtest");
    if (r->cfg->token) {
        char auth[600];
        snprintf(auth, sizeof auth, "Bearer %s", r->cfg->token);
        evhttp_add_header(h, "Authorization", auth);
    }
}

static struct evhttp_connection *connect_to(lt_run *r, double timeout_s)
{
    struct evhttp_connection *c =
        evhttp_connection_base_new(r->base, NULL, r->cfg->host, (ev_uint16_t)r->cfg->port);
    if (c) {
        evhttp_connection_set_retries(c, 0);
        int t = (int)ceil(timeout_s);
        evhttp_connection_set_timeout(c, t > 0 ? t : 1);
    }
    return c;
}

/* The text of an error reply: "code: message" from the JSON, else the body's start. */
static void error_text(struct evhttp_request *req, char *out, size_t len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    out[0] = '\0';
    if (n == 0)
        return;
    char *body = malloc(n + 1);
    if (!body)
        return;
    evbuffer_copyout(in, body, n);
    body[n] = '\0';
    cJSON *o = cJSON_Parse(body);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
    if (cJSON_IsString(code))
        snprintf(out, len, "%s%s%s", code->valuestring, cJSON_IsString(msg) ? ": " : "",
                 cJSON_IsString(msg) ? msg->valuestring : "");
    else
        snprintf(out, len, "%.*s", (int)(len - 1), body);
    for (char *p = out; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    cJSON_Delete(o);
    free(body);
}

static const char *evreq_error_name(int e)
{
    switch (e) {
    case EVREQ_HTTP_TIMEOUT: return "read/write timeout";
    case EVREQ_HTTP_EOF: return "connection closed";
    case EVREQ_HTTP_INVALID_HEADER: return "invalid reply header";
    case EVREQ_HTTP_BUFFER_ERROR: return "connection failed";
    case EVREQ_HTTP_REQUEST_CANCEL: return "cancelled";
    case EVREQ_HTTP_DATA_TOO_LONG: return "reply too long";
    default: return "cannot connect";
    }
}

/* ------------------------------------------------------------ ending a job */

static void release_cb(evutil_socket_t fd, short what, void *arg)
{
    lt_job *j = arg;
    if (j->conn) {
        evhttp_connection_free(j->conn); /* frees its requests, no callbacks */
        j->conn = NULL;
    }
    j->req = NULL;
    if (j->timer) {
        event_free(j->timer);
        j->timer = NULL;
    }
    free(j->sse);
    j->sse = NULL;
    j->sse_len = j->sse_cap = 0;
    j->released = true;
}

static void next_cb(evutil_socket_t fd, short what, void *arg)
{
    lt_job *j = arg;
    submit(j->run, j->client);
}

static void end_job(lt_job *j, lt_err err, int status, const char *detail)
{
    if (j->phase == LT_PH_END)
        return;
    lt_run *r = j->run;
    j->phase = LT_PH_END;
    j->t_end = rel(r);
    j->err = err;
    if (status)
        j->http_status = status;
    if (detail && !j->detail[0])
        snprintf(j->detail, sizeof j->detail, "%s", detail);
    if (j->timer)
        evtimer_del(j->timer);
    r->inflight--;
    if (j->t_end > r->t_load_end)
        r->t_load_end = j->t_end;
    defer(r, release_cb, j);
    if (j->client >= 0)
        defer(r, next_cb, j); /* the closed loop's client goes on (or stops) */
    else
        check_finish(r);
}

static void cancel_free_cb(evutil_socket_t fd, short what, void *arg)
{
    lt_job *j = arg;
    if (j->cancel_conn) {
        evhttp_connection_free(j->cancel_conn);
        j->cancel_conn = NULL;
    }
}

static void on_cancel_done(struct evhttp_request *req, void *arg)
{
    lt_job *j = arg;
    defer(j->run, cancel_free_cb, j);
}

/* Best effort: a job we gave up on should not keep the server busy. */
static void cancel_on_server(lt_job *j)
{
    lt_run *r = j->run;
    if (!j->id[0] || j->cancel_conn)
        return;
    j->cancel_conn = connect_to(r, 10);
    struct evhttp_request *req = j->cancel_conn ? evhttp_request_new(on_cancel_done, j) : NULL;
    if (!req) {
        cancel_free_cb(-1, 0, j);
        return;
    }
    add_headers(r, req, "application/json");
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", j->id);
    evhttp_make_request(j->cancel_conn, req, EVHTTP_REQ_DELETE, path);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    lt_job *j = arg;
    char d[64];
    snprintf(d, sizeof d, "no end after %g s", j->run->cfg->timeout);
    end_job(j, LT_ERR_TIMEOUT, 0, d);
    cancel_on_server(j);
}

static void on_req_error(enum evhttp_request_error e, void *arg)
{
    lt_job *j = arg;
    j->last_error = (int)e;
}

/* A request that got no HTTP reply at all. */
static void end_no_reply(lt_job *j)
{
    lt_err e = j->last_error == EVREQ_HTTP_TIMEOUT ? LT_ERR_TIMEOUT : LT_ERR_CONNECTION;
    end_job(j, e, 0, evreq_error_name(j->last_error));
}

/* ------------------------------------------------------------ events */

static void on_event(lt_job *j, const char *name, const char *data)
{
    lt_run *r = j->run;
    const double t = rel(r);
    if (strcmp(name, "started") == 0) {
        if (j->t_started < 0)
            j->t_started = t;
    } else if (strcmp(name, "step") == 0) {
        if (j->t_first_step < 0)
            j->t_first_step = t;
    } else if (strcmp(name, "tiles") == 0) {
        if (j->t_first_tiles < 0)
            j->t_first_tiles = t;
    } else if (strcmp(name, "image") == 0) {
        j->images++;
    } else if (strcmp(name, "done") == 0) {
        if (j->images == j->n)
            end_job(j, LT_OK, 0, NULL);
        else {
            char d[96];
            snprintf(d, sizeof d, "done after %d image events of %d", j->images, j->n);
            end_job(j, LT_ERR_PROTOCOL, 0, d);
        }
    } else if (strcmp(name, "failed") == 0) {
        char d[160] = "failed";
        cJSON *o = cJSON_Parse(data);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
        if (cJSON_IsString(code))
            snprintf(d, sizeof d, "%s: %s", code->valuestring,
                     cJSON_IsString(msg) ? msg->valuestring : "");
        cJSON_Delete(o);
        end_job(j, LT_ERR_FAILED, 0, d);
    } else if (strcmp(name, "cancelled") == 0) {
        end_job(j, LT_ERR_CANCELLED, 0, "cancelled by someone else");
    }
}

/* Cut j->sse into events ("\n\n"-terminated blocks) and handle each. */
static void parse_sse(lt_job *j)
{
    size_t start = 0;
    for (;;) {
        char *blk = j->sse + start;
        char *end = strstr(blk, "\n\n");
        if (!end)
            break;
        *end = '\0';
        const char *name = "message";
        char *data = NULL;
        size_t data_len = 0;
        for (char *line = blk; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            size_t ll = strlen(line);
            if (ll && line[ll - 1] == '\r')
                line[--ll] = '\0';
            if (strncmp(line, "event:", 6) == 0) {
                name = line + 6 + (line[6] == ' ');
            } else if (strncmp(line, "data:", 5) == 0) {
                const char *v = line + 5 + (line[5] == ' ');
                size_t vl = strlen(v);
                char *nd = realloc(data, data_len + vl + 2);
                if (nd) {
                    data = nd;
                    if (data_len)
                        data[data_len++] = '\n';
                    memcpy(data + data_len, v, vl + 1);
                    data_len += vl;
                }
            } /* id:, retry: and ": comments" are not needed */
            line = nl ? nl + 1 : NULL;
        }
        if (data || strcmp(name, "message") != 0)
            on_event(j, name, data ? data : "{}");
        free(data);
        start = (size_t)(end - j->sse) + 2;
        if (j->phase == LT_PH_END)
            break;
    }
    if (start > 0 && j->sse) {
        memmove(j->sse, j->sse + start, j->sse_len - start + 1);
        j->sse_len -= start;
    }
}

static void on_events_chunk(struct evhttp_request *req, void *arg)
{
    lt_job *j = arg;
    if (j->phase != LT_PH_EVENTS || evhttp_request_get_response_code(req) != 200)
        return;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (j->sse_len + n + 1 > j->sse_cap) {
        size_t cap = j->sse_cap ? j->sse_cap : 4096;
        while (cap < j->sse_len + n + 1)
            cap *= 2;
        char *nb = cap <= SSE_MAX ? realloc(j->sse, cap) : NULL;
        if (!nb) {
            end_job(j, LT_ERR_PROTOCOL, 0, "event stream: an event over 4 MiB");
            return;
        }
        j->sse = nb;
        j->sse_cap = cap;
    }
    evbuffer_remove(in, j->sse + j->sse_len, n);
    j->sse_len += n;
    j->sse[j->sse_len] = '\0';
    parse_sse(j);
}

static void on_events_done(struct evhttp_request *req, void *arg)
{
    lt_job *j = arg;
    j->req = NULL;
    if (j->phase != LT_PH_EVENTS)
        return;
    if (!req || evhttp_request_get_response_code(req) == 0) {
        end_no_reply(j);
        return;
    }
    int code = evhttp_request_get_response_code(req);
    if (code != 200) {
        char d[160];
        error_text(req, d, sizeof d);
        end_job(j, LT_ERR_HTTP, code, d);
        return;
    }
    end_job(j, LT_ERR_PROTOCOL, 0, "the event stream ended before the job did");
}

/* ------------------------------------------------------------ submitting */

static void on_submit_done(struct evhttp_request *req, void *arg)
{
    lt_job *j = arg;
    lt_run *r = j->run;
    j->req = NULL;
    if (j->phase != LT_PH_SUBMIT)
        return;
    if (!req || evhttp_request_get_response_code(req) == 0) {
        end_no_reply(j);
        return;
    }
    int code = evhttp_request_get_response_code(req);
    if (code != 202) {
        char d[160];
        error_text(req, d, sizeof d);
        end_job(j, LT_ERR_HTTP, code, d);
        return;
    }
    j->http_status = 202;
    j->t_accepted = rel(r);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    char *body = malloc(n + 1);
    cJSON *o = NULL;
    if (body) {
        evbuffer_copyout(in, body, n);
        body[n] = '\0';
        o = cJSON_Parse(body);
        free(body);
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (!cJSON_IsString(id) || !id->valuestring[0] ||
        strlen(id->valuestring) >= sizeof j->id) {
        cJSON_Delete(o);
        end_job(j, LT_ERR_PROTOCOL, 202, "the 202 reply has no job id");
        return;
    }
    snprintf(j->id, sizeof j->id, "%s", id->valuestring);
    cJSON_Delete(o);
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/events", j->id);
    struct evhttp_request *ev = evhttp_request_new(on_events_done, j);
    if (!ev) {
        end_job(j, LT_ERR_CONNECTION, 0, "out of memory");
        return;
    }
    evhttp_request_set_chunked_cb(ev, on_events_chunk);
    evhttp_request_set_error_cb(ev, on_req_error);
    add_headers(r, ev, "text/event-stream");
    j->phase = LT_PH_EVENTS;
    j->last_error = -1;
    j->req = ev;
    /* the same connection: evhttp dispatches it once this reply is done */
    if (evhttp_make_request(j->conn, ev, EVHTTP_REQ_GET, path) != 0 && j->phase != LT_PH_END)
        end_job(j, LT_ERR_CONNECTION, 0, "cannot send the events request");
}

/* May another job start?  Sets `stopping` (for good) when not. */
static bool may_submit(lt_run *r)
{
    const lt_config *c = r->cfg;
    if (!r->stopping && ((c->max_jobs > 0 && r->n_jobs >= c->max_jobs) ||
                         (c->duration > 0 && rel(r) - r->t_load_start >= c->duration)))
        r->stopping = true;
    return !r->stopping;
}

static lt_job *new_job(lt_run *r, int client)
{
    if (r->n_jobs == r->cap_jobs) {
        long cap = r->cap_jobs ? 2 * r->cap_jobs : 256;
        lt_job **nj = realloc(r->jobs, (size_t)cap * sizeof *nj);
        if (!nj)
            return NULL;
        r->jobs = nj;
        r->cap_jobs = cap;
    }
    lt_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    const lt_profile *p = r->cfg->profile;
    j->seq = (int)r->n_jobs;
    j->run = r;
    j->client = client;
    j->mix = lt_profile_pick(p, lt_rng_uniform(&r->rng));
    j->width = p->mix[j->mix].width;
    j->height = p->mix[j->mix].height;
    j->steps = p->mix[j->mix].steps;
    j->n = p->mix[j->mix].n;
    j->seed = lt_rng_next(&r->rng) & 0xffffffffu;
    j->t_submit = j->t_accepted = j->t_started = j->t_first_step = j->t_first_tiles =
        j->t_end = -1;
    j->last_error = -1;
    r->jobs[r->n_jobs++] = j;
    return j;
}

static char *job_body(lt_run *r, const lt_job *j)
{
    const lt_profile *p = r->cfg->profile;
    const lt_mix *m = &p->mix[j->mix];
    cJSON *o = p->params ? cJSON_Duplicate(p->params, 1) : cJSON_CreateObject();
    if (!o)
        return NULL;
    for (const cJSON *c = m->params ? m->params->child : NULL; c; c = c->next) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, c->string);
        cJSON_AddItemToObject(o, c->string, cJSON_Duplicate(c, 1));
    }
    const char *prompt = m->prompt;
    if (!prompt) /* a draw from the rng even with one prompt keeps runs comparable */
        prompt = p->prompts[lt_rng_next(&r->rng) % (uint64_t)p->n_prompts];
    static const char *const fixed[] = {"prompt", "width", "height", "steps", "n", "seed"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(o, fixed[i]);
    cJSON_AddStringToObject(o, "prompt", prompt);
    cJSON_AddNumberToObject(o, "width", j->width);
    cJSON_AddNumberToObject(o, "height", j->height);
    cJSON_AddNumberToObject(o, "steps", j->steps);
    cJSON_AddNumberToObject(o, "n", j->n);
    cJSON_AddNumberToObject(o, "seed", (double)j->seed);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static void submit(lt_run *r, int client)
{
    if (!may_submit(r)) {
        check_finish(r);
        return;
    }
    lt_job *j = new_job(r, client);
    if (!j) {
        snprintf(r->fatal, sizeof r->fatal, "out of memory");
        r->stopping = true;
        check_finish(r);
        return;
    }
    r->inflight++;
    j->t_submit = rel(r);
    j->phase = LT_PH_SUBMIT;
    const lt_config *c = r->cfg;
    if (client < 0 && r->inflight > c->max_inflight) {
        char d[64];
        snprintf(d, sizeof d, "%d jobs in flight (--max-inflight)", c->max_inflight);
        end_job(j, LT_ERR_DROPPED, 0, d);
        return;
    }
    char *body = job_body(r, j);
    j->timer = evtimer_new(r->base, on_timeout, j);
    j->conn = connect_to(r, c->timeout + 1);
    struct evhttp_request *req = j->conn ? evhttp_request_new(on_submit_done, j) : NULL;
    if (!body || !j->timer || !req) {
        if (req)
            evhttp_request_free(req);
        free(body);
        end_job(j, LT_ERR_CONNECTION, 0, "out of memory");
        return;
    }
    const struct timeval tv = {(time_t)c->timeout,
                               (suseconds_t)((c->timeout - floor(c->timeout)) * 1e6)};
    evtimer_add(j->timer, &tv);
    evhttp_request_set_error_cb(req, on_req_error);
    add_headers(r, req, "application/json");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "application/json");
    evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
    cJSON_free(body);
    j->req = req;
    if (evhttp_make_request(j->conn, req, EVHTTP_REQ_POST, "/v1/jobs") != 0 &&
        j->phase != LT_PH_END)
        end_job(j, LT_ERR_CONNECTION, 0, "cannot connect");
}

/* ------------------------------------------------------------ /metrics */

typedef struct fetch {
    lt_run *run;
    lt_metrics *into;
    void (*then)(lt_run *);
    struct evhttp_connection *conn;
    int last_error;
    char why[128];
} fetch;

static fetch g_fetch; /* one fetch at a time: before the load, then after it */

static void fetch_then(evutil_socket_t fd, short what, void *arg)
{
    fetch *f = arg;
    if (f->conn)
        evhttp_connection_free(f->conn);
    f->conn = NULL;
    f->then(f->run);
}

static void on_fetch_error(enum evhttp_request_error e, void *arg)
{
    ((fetch *)arg)->last_error = (int)e;
}

static void on_fetch_done(struct evhttp_request *req, void *arg)
{
    fetch *f = arg;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    if (code == 200) {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        const char *text = (const char *)evbuffer_pullup(in, (ev_ssize_t)n);
        if (lt_metrics_parse(f->into, text ? text : "", text ? n : 0) < 0)
            snprintf(f->why, sizeof f->why, "out of memory parsing /metrics");
    } else if (code) {
        snprintf(f->why, sizeof f->why, "GET /metrics answered %d", code);
    } else {
        snprintf(f->why, sizeof f->why, "GET /metrics: %s", evreq_error_name(f->last_error));
    }
    defer(f->run, fetch_then, f);
}

static void fetch_metrics(lt_run *r, lt_metrics *into, void (*then)(lt_run *))
{
    fetch *f = &g_fetch;
    memset(f, 0, sizeof *f);
    f->run = r;
    f->into = into;
    f->then = then;
    f->last_error = -1;
    f->conn = connect_to(r, 30);
    struct evhttp_request *req = f->conn ? evhttp_request_new(on_fetch_done, f) : NULL;
    if (!req) {
        snprintf(f->why, sizeof f->why, "out of memory");
        defer(r, fetch_then, f);
        return;
    }
    evhttp_request_set_error_cb(req, on_fetch_error);
    add_headers(r, req, "text/plain");
    if (evhttp_make_request(f->conn, req, EVHTTP_REQ_GET, "/metrics") != 0 && !f->why[0]) {
        snprintf(f->why, sizeof f->why, "GET /metrics: cannot connect");
        defer(r, fetch_then, f);
    }
}

/* ------------------------------------------------------------ the run */

static void after_done(lt_run *r)
{
    if (!r->after.ok)
        fprintf(stderr, "tessera-loadtest: warning: %s; the report has no server figures\n",
                g_fetch.why);
    event_base_loopexit(r->base, NULL);
}

static void check_finish(lt_run *r)
{
    if (!r->stopping || r->inflight > 0 || r->finishing)
        return;
    r->finishing = true;
    if (r->arrival)
        evtimer_del(r->arrival);
    if (r->cfg->metrics && !r->fatal[0])
        fetch_metrics(r, &r->after, after_done);
    else
        event_base_loopexit(r->base, NULL);
}

static void schedule_arrival(lt_run *r)
{
    /* exponential gaps: a Poisson process of rate R */
    double gap = -log(1.0 - lt_rng_uniform(&r->rng)) / r->cfg->rate;
    struct timeval tv = {(time_t)gap, (suseconds_t)((gap - floor(gap)) * 1e6)};
    evtimer_add(r->arrival, &tv);
}

static void on_arrival(evutil_socket_t fd, short what, void *arg)
{
    lt_run *r = arg;
    submit(r, -1);
    if (!r->stopping)
        schedule_arrival(r);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    lt_run *r = arg;
    if (!r->stopping && r->cfg->duration > 0 && rel(r) - r->t_load_start >= r->cfg->duration) {
        r->stopping = true;
        check_finish(r);
    }
    const double t = rel(r);
    if (r->cfg->progress && t - r->last_print >= (isatty(2) ? 1.0 : 10.0)) {
        r->last_print = t;
        long done = 0, errors = 0;
        for (long i = 0; i < r->n_jobs; i++) {
            done += r->jobs[i]->phase == LT_PH_END && r->jobs[i]->err == LT_OK;
            errors += r->jobs[i]->phase == LT_PH_END && r->jobs[i]->err != LT_OK;
        }
        fprintf(stderr, "%s%6.1f s  submitted %ld  done %ld  in flight %d  errors %ld%s",
                isatty(2) ? "\r" : "", t - r->t_load_start, r->n_jobs, done, r->inflight,
                errors, isatty(2) ? "   " : "\n");
    }
}

static void start_load(lt_run *r)
{
    if (r->cfg->metrics && !r->before.ok) {
        snprintf(r->fatal, sizeof r->fatal, "cannot read the server's metrics at %s:%d: %s",
                 r->cfg->host, r->cfg->port, g_fetch.why);
        event_base_loopexit(r->base, NULL);
        return;
    }
    r->t_load_start = rel(r);
    r->t_load_end = r->t_load_start;
    struct timeval tick = {0, 250000};
    r->ticker = event_new(r->base, -1, EV_PERSIST, on_tick, r);
    if (r->ticker)
        event_add(r->ticker, &tick);
    if (r->cfg->clients > 0) {
        for (int i = 0; i < r->cfg->clients && !r->stopping; i++)
            submit(r, i);
    } else {
        r->arrival = evtimer_new(r->base, on_arrival, r);
        if (!r->arrival) {
            snprintf(r->fatal, sizeof r->fatal, "out of memory");
            event_base_loopexit(r->base, NULL);
            return;
        }
        submit(r, -1); /* the first arrival at t = 0 */
        if (!r->stopping)
            schedule_arrival(r);
    }
    check_finish(r);
}

int lt_run_exec(lt_run *r, const lt_config *cfg)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->rng.s = cfg->seed;
    r->base = event_base_new();
    if (!r->base) {
        snprintf(r->fatal, sizeof r->fatal, "cannot create the event loop");
        return -1;
    }
    r->t0_mono = lt_now();
    if (cfg->metrics)
        fetch_metrics(r, &r->before, start_load);
    else
        start_load(r);
    event_base_dispatch(r->base);
    if (cfg->progress && r->last_print > 0 && isatty(2))
        fputc('\n', stderr); /* end the \r progress line */
    return r->fatal[0] ? -1 : 0;
}

void lt_run_free(lt_run *r)
{
    for (long i = 0; i < r->n_jobs; i++) {
        lt_job *j = r->jobs[i];
        if (!j->released)
            release_cb(-1, 0, j);
        cancel_free_cb(-1, 0, j);
        free(j);
    }
    free(r->jobs);
    if (g_fetch.conn) {
        evhttp_connection_free(g_fetch.conn);
        g_fetch.conn = NULL;
    }
    if (r->arrival)
        event_free(r->arrival);
    if (r->ticker)
        event_free(r->ticker);
    if (r->base)
        event_base_free(r->base);
    lt_metrics_free(&r->before);
    lt_metrics_free(&r->after);
    memset(r, 0, sizeof *r);
}
