/*
 * service/jobs/gate.c - the submit gate: whether the server takes a
 * request's work now, and the accept (see gate.h for the order of the
 * checks, and docs/service-design.md, "Limits: admission by cost").
 *
 * Why it is built this way:
 *
 * - One function decides for every dialect.  The four submit paths used to
 *   carry their own copies of the phase, role, reachability and 429 checks
 *   (issue 56), and the copies drifted.  The decision carries the native
 *   code, the status and Retry-After, never a body; svc_gate_reply gives it
 *   to the one error renderer in the request's dialect.
 * - Memory comes from the engine, not from a formula kept here.
 *   tsr_engine_memory_estimate walks the UNet's and the VAE's planners for
 *   the exact shape (the same passes that size the arenas a step
 *   allocates), so it follows the model and the backend; a formula written
 *   here from latent channels would be right for one model.  The walk takes
 *   about 20 us (16 x 4096x4096 on the demo model) and writes nothing in the
 *   engine, so the loop calls it on the workers' engines while they step.
 *   It is an upper bound: docs/service-design.md gives it against measured
 *   peaks.
 * - The queue's cost is counted without touching the queue.  The queue and
 *   the job table count images (and a --queue cluster's mirror counts
 *   images queued by other nodes too); every image counts at least one
 *   unit, so the queue's units are its images plus what its larger images
 *   add beyond one each.  Only that surplus is kept here: per job accepted
 *   through svc_gate_accept whose images count more than one, by id, and
 *   counted while its images are still queued (a job that started, ended or
 *   left the table drops out at the next check; ids, not pointers, so a job
 *   freed meanwhile is never touched).  Jobs this node did not accept
 *   (replayed at start, or queued by another api node) count one unit per
 *   image, as before.  Should this book lose an entry (out of memory), the
 *   check falls back to counting images, never to refusing what it cannot
 *   count.
 *
 * - A key's backlog (--key-max-queue, issue 62) is counted the same way,
 *   without a counter of its own to keep in step: the images still queued
 *   of the jobs it owns (the job table's queue order, which the started,
 *   cancel and end paths already keep) plus its accepts still waiting for
 *   the journal (listed in the book).  One walk of the queued jobs per
 *   submit; they are bounded by --max-queue.  Every key counts alike, admin
 *   included, and with keys off every request is the one key "": the cap
 *   is then one for all (docs/security.md, "Quotas and fair turns").
 *
 * Threads: the loop's only.  The book is the process's (one server per
 * process, as openai.c's live calls).
 */
#include "gate.h"

#include <errno.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "http.h"
#include "jobs.h"
#include "jobs_int.h"
#include "log.h"
#include "server.h"
#include "worker.h"

/* A job whose images each count `extra` units beyond one. */
typedef struct tracked {
    uint64_t job;
    double extra;
} tracked;

struct accept_ctx;

static struct {
    const svc_server *owner;
    tracked *v;
    int n, cap;
    double pending; /* extra units of accepts still waiting for the journal */
    struct accept_ctx *inflight; /* those accepts, for their keys' backlogs */
} book;

static void book_for(const svc_server *s)
{
    if (book.owner == s)
        return;
    free(book.v);
    memset(&book, 0, sizeof book);
    book.owner = s;
}

static void book_add(uint64_t job, double extra)
{
    if (book.n == book.cap) {
        int cap = book.cap ? book.cap * 2 : 64;
        tracked *v = realloc(book.v, (size_t)cap * sizeof *v);
        if (!v) {
            SVC_WARN("gate: out of memory; job %016llx counts one unit per image",
                     (unsigned long long)job);
            return;
        }
        book.v = v;
        book.cap = cap;
    }
    book.v[book.n++] = (tracked){job, extra};
}

/* What the queued images of the book's jobs add beyond one unit each;
 * drops the jobs with nothing queued any more. */
static double queued_extra(svc_server *s)
{
    double sum = book.pending;
    int k = 0;
    for (int i = 0; i < book.n; i++) {
        const svc_job *j = svc_jobs_find(s->jobs, book.v[i].job);
        int queued = 0;
        for (int x = 0; j && !svc_state_final(j->state) && x < j->n; x++)
            queued += j->images[x].state == SVC_QUEUED;
        if (queued == 0)
            continue; /* started, ended or gone: its images never queue again */
        sum += queued * book.v[i].extra;
        book.v[k++] = book.v[i];
    }
    book.n = k;
    return sum;
}

/* Images the key named owner ("" = none) has waiting: queued, or accepted
 * and not yet journaled. */
static int key_waiting(svc_server *s, const char *owner);

/* --------------------------------------------------------------- figures */

double svc_gate_image_units(svc_server *s, const svc_params *p)
{
    svc_params_ctx ctx;
    svc_server_params_ctx(s, &ctx);
    const double side = ctx.default_size > 0 ? ctx.default_size : 512;
    /* the hires fix's second pass counts at its own size and steps */
    int hw = 0, hh = 0, hsteps = 0;
    svc_params_hires(p, &hw, &hh, &hsteps);
    const double u = ((double)p->width * p->height * p->steps + (double)hw * hh * hsteps) /
                     (side * side * SVC_GATE_UNIT_STEPS);
    return u > 1.0 ? u : 1.0;
}

/* "42.7 GB", "380 MB" (decimal units, as device makers count) */
static const char *fmt_bytes(char *buf, size_t size, size_t bytes)
{
    if (bytes >= 1000000000u)
        snprintf(buf, size, "%.1f GB", bytes / 1e9);
    else
        snprintf(buf, size, "%.0f MB", bytes / 1e6);
    return buf;
}

/* "4", "4.5", "546133" */
static const char *fmt_units(char *buf, size_t size, double u)
{
    if (fabs(u - nearbyint(u)) < 0.05 || u >= 1000)
        snprintf(buf, size, "%.0f", u);
    else
        snprintf(buf, size, "%.1f", u);
    return buf;
}

/* The working memory of one batch of p's images on e: the batch a worker
 * runs them in (worker.c: rows = 2 x --max-batch, the engine's other batch
 * defaults), min(n, --max-batch) images together. */
static bool batch_bytes(const svc_server *s, tsr_engine *e, const svc_params *p, size_t *bytes)
{
    tsr_batch_options bo;
    tsr_batch_options_init(&bo);
    const int max_batch = s->cfg.max_batch > 0 ? s->cfg.max_batch : 16;
    bo.max_rows = 2 * max_batch;
    const int images = p->n < max_batch ? p->n : max_batch;
    /* a hires image's second pass is the larger one */
    int w = p->width, h = p->height;
    if (svc_params_hires(p, &w, &h, NULL) && (size_t)w * h < (size_t)p->width * p->height) {
        w = p->width;
        h = p->height;
    }
    if (tsr_engine_memory_estimate(e, &bo, images, w, h, p->cfg_scale > 1.0,
                                   bytes) < 0) {
        SVC_DEBUG("gate: no memory estimate for %dx%d: %s", p->width, p->height,
                  tsr_last_error());
        return false;
    }
    return true;
}

/* Whether some worker's device can ever hold one batch of p's images.
 * False with *need, *limit and the device's name of the first engine that
 * answered.  Unknown (no engine ready, as on a --role api node, or no
 * figure for the device) is true: the gate refuses only what it knows. */
static bool fits_a_device(svc_server *s, const svc_params *p, size_t *need, size_t *limit,
                          const char **device)
{
    bool first = true;
    for (int i = 0; s->workers && i < s->n_workers; i++) {
        tsr_engine *e = svc_worker_engine(s->workers[i]);
        size_t b = 0;
        if (!e || !batch_bytes(s, e, p, &b))
            continue;
        const size_t l = s->cfg.max_memory > 0 ? (size_t)s->cfg.max_memory
                                               : tsr_engine_device_memory(e);
        if (l == 0 || b <= l)
            return true;
        if (first) {
            *need = b;
            *limit = l;
            *device = tsr_engine_device(e);
            first = false;
        }
    }
    return first;
}

/* ------------------------------------------------------------------ gate */

int svc_gate_parse(svc_server *s, const cJSON *job, const cJSON *defaults, svc_params **out,
                   svc_param_error *err)
{
    svc_params_ctx ctx;
    svc_server_params_ctx(s, &ctx);
    return svc_params_parse(job, defaults, &ctx, out, err);
}

/* A refusal of checks 1-3 (503), or of the accept. */
static bool refuse(svc_gate *out, svc_gate_why why, int status, int retry_after, const char *msg)
{
    out->why = why;
    out->status = status;
    out->code = status == 503 ? "unavailable" : "internal";
    out->retry_after = retry_after;
    snprintf(out->message, sizeof out->message, "%s", msg);
    return false;
}

bool svc_gate_open(svc_server *s, svc_gate *out)
{
    memset(out, 0, sizeof *out);
    out->job = -1;
    if (s->phase == SVC_PHASE_LOADING)
        return refuse(out, SVC_GATE_LOADING, 503, 5, "the model is still loading");
    if (s->phase != SVC_PHASE_READY)
        return refuse(out, SVC_GATE_DRAINING, 503, 30, "the server is shutting down");
    if (s->devices.n > 0 && svc_devices_up(&s->devices) == 0)
        return refuse(out, SVC_GATE_NO_DEVICE, 503, 60,
                      "every device has failed (GET /readyz names them); nothing was accepted");
    if (s->cluster && s->cfg.role == TSR_ROLE_WORKER)
        return refuse(out, SVC_GATE_WORKER, 503, 30,
                      "this node is a worker (--role worker); submit work to an api node");
    if (s->cluster && !svc_cluster_reachable(s->cluster))
        return refuse(out, SVC_GATE_QUEUE_AWAY, 503, 5,
                      "the job queue (Redis, --queue) cannot be reached; nothing was accepted");
    return true;
}

bool svc_gate_open_or_reply(svc_req *r)
{
    svc_gate g;
    if (svc_gate_open(r->srv, &g))
        return true;
    svc_gate_reply(r, &g, NULL);
    return false;
}

bool svc_gate_accepted(int status, const char *what, svc_gate *out)
{
    memset(out, 0, sizeof *out);
    out->job = -1;
    if (status >= 0)
        return true;
    if (status == -EAGAIN)
        return refuse(out, SVC_GATE_QUEUE_AWAY, 503, 5,
                      "the job queue (Redis, --queue) cannot be reached; nothing was accepted");
    char msg[256];
    snprintf(msg, sizeof msg, "%s could not be journaled: %s", what, strerror(-status));
    return refuse(out, SVC_GATE_FAILED, 500, 0, msg);
}

bool svc_gate_check(svc_server *s, const char *owner, svc_params *const *jobs, int n,
                    svc_gate *out)
{
    if (!svc_gate_open(s, out))
        return false;
    book_for(s);
    svc_params_ctx ctx;
    svc_server_params_ctx(s, &ctx);
    const int side = ctx.default_size;
    char a[32], b[32], c[32];
    for (int i = 0; i < n; i++) {
        out->images += jobs[i]->n;
        out->units += jobs[i]->n * svc_gate_image_units(s, jobs[i]);
    }
    /* 1. what no device here can ever hold: refused for good (422).  A job
     * of the shape the previous one had fits as it did (a batch of 1,000
     * alike jobs walks the planners once). */
    for (int i = 0; i < n; i++) {
        const svc_params *p = jobs[i];
        const int together = p->n < s->cfg.max_batch ? p->n : s->cfg.max_batch;
        if (i > 0) {
            const svc_params *q = jobs[i - 1];
            if (p->width == q->width && p->height == q->height &&
                !svc_params_hires(p, NULL, NULL, NULL) && !svc_params_hires(q, NULL, NULL, NULL) &&
                (p->cfg_scale > 1.0) == (q->cfg_scale > 1.0) &&
                together == (q->n < s->cfg.max_batch ? q->n : s->cfg.max_batch))
                continue;
        }
        const char *device = "";
        if (fits_a_device(s, p, &out->need_bytes, &out->limit_bytes, &device))
            continue;
        char limit[160];
        if (s->cfg.max_memory > 0)
            snprintf(limit, sizeof limit, "the limit is %s (--max-memory)",
                     fmt_bytes(c, sizeof c, out->limit_bytes));
        else
            snprintf(limit, sizeof limit, "the device has %s (%.100s)",
                     fmt_bytes(c, sizeof c, out->limit_bytes), device);
        out->why = SVC_GATE_TOO_COSTLY;
        out->status = 422;
        out->code = "too_costly";
        out->job = i;
        snprintf(out->message, sizeof out->message,
                 "this request needs about %s of working memory per image batch (%d image%s of "
                 "%dx%d%s, run together); %s, so it can never run here.  It would also take %s "
                 "queue units of time (one unit: a %dx%d image at %d steps).  Ask for fewer "
                 "images per job or a smaller size",
                 fmt_bytes(a, sizeof a, out->need_bytes), together, together == 1 ? "" : "s",
                 p->width, p->height, p->cfg_scale > 1.0 ? " with guidance" : "", limit,
                 fmt_units(b, sizeof b, out->units), side, side, SVC_GATE_UNIT_STEPS);
        return false;
    }
    /* 2. the key's own backlog, in images (429 for this key only) */
    if (s->cfg.key_max_queue > 0) {
        const int mine = key_waiting(s, owner ? owner : "");
        if (mine + out->images > s->cfg.key_max_queue) {
            const bool alone = out->images > s->cfg.key_max_queue;
            out->why = SVC_GATE_KEY_FULL;
            out->status = 429;
            out->code = "queue_full";
            out->retry_after = 5;
            out->waiting_images = mine;
            snprintf(out->message, sizeof out->message,
                     "this key's queue is full: %s%.64s%s has %d image%s waiting and this "
                     "request (%d image%s) would pass --key-max-queue %d; other keys are not "
                     "affected%s",
                     owner && owner[0] ? "key '" : "", owner && owner[0] ? owner : "the client",
                     owner && owner[0] ? "'" : "", mine, mine == 1 ? "" : "s", out->images,
                     out->images == 1 ? "" : "s", s->cfg.key_max_queue,
                     alone ? "; it alone has more images than --key-max-queue" : "");
            return false;
        }
    }
    /* 3. the queue, in units (429: later may do).  A request that finds
     * nothing waiting is taken whatever its units, as long as its images
     * fit --max-queue: the bound is on the backlog ahead of a newcomer, and
     * a long request bound for an idle server would otherwise get 429 for
     * ever; once it runs, it waits ahead of nobody. */
    out->waiting_images = s->queue->ops->length(s->queue) + s->pending_images;
    out->waiting_units = out->waiting_images + queued_extra(s);
    const bool idle = out->waiting_images == 0 && out->waiting_units < 1e-9;
    if (out->waiting_units + out->units > s->cfg.max_queue + 1e-9 &&
        !(idle && out->images <= s->cfg.max_queue)) {
        const bool alone = out->images > s->cfg.max_queue;
        out->why = SVC_GATE_QUEUE_FULL;
        out->status = 429;
        out->code = "queue_full";
        out->retry_after = 5;
        fmt_units(a, sizeof a, out->waiting_units);
        fmt_units(b, sizeof b, out->units);
        snprintf(out->message, sizeof out->message,
                 "the queue is full: %d image%s waiting (%s queue unit%s) and this request "
                 "(%d image%s, %s unit%s) would pass --max-queue %d (one unit: a %dx%d image at "
                 "%d steps; a larger or longer image counts its pixels x steps over that)%s",
                 out->waiting_images, out->waiting_images == 1 ? "" : "s", a,
                 strcmp(a, "1") == 0 ? "" : "s", out->images, out->images == 1 ? "" : "s", b,
                 strcmp(b, "1") == 0 ? "" : "s",
                 s->cfg.max_queue, side, side, SVC_GATE_UNIT_STEPS,
                 alone ? "; it alone has more images than --max-queue" : "");
        return false;
    }
    return true;
}

void svc_gate_reply(svc_req *r, const svc_gate *g, const char *field)
{
    const bool openai_429 = r->dialect == SVC_DIALECT_OPENAI && g->status == 429;
    const svc_problem p = {.status = g->status,
                           .code = openai_429 ? "rate_limit_exceeded" : g->code,
                           .field = field,
                           .message = g->message,
                           .retry_after = g->retry_after};
    svc_reply_problem(r, r->dialect, &p);
}

/* ---------------------------------------------------------------- accept */

typedef struct accept_ctx {
    void (*done)(void *user, int status);
    void *user;
    double pending;
    char owner[64];  /* the jobs' key ("" = none) */
    int images;      /* their images */
    struct accept_ctx *prev, *next; /* book.inflight */
    int n;
    tracked jobs[]; /* the jobs whose images count more than one unit */
} accept_ctx;

static int key_waiting(svc_server *s, const char *owner)
{
    int n = 0;
    for (const svc_job *j = s->jobs->qhead; j; j = j->qnext)
        if (strcmp(j->owner, owner) == 0)
            n += j->queued_images;
    for (const accept_ctx *c = book.inflight; c; c = c->next)
        if (strcmp(c->owner, owner) == 0)
            n += c->images;
    return n;
}

void svc_gate_key_metrics(svc_server *s, struct evbuffer *out)
{
    if (s->keys.n == 0)
        return;
    book_for(s);
    evbuffer_add_printf(out, "# HELP tessera_key_waiting_images Images waiting (queued, not "
                             "running), per API key.\n"
                             "# TYPE tessera_key_waiting_images gauge\n");
    for (size_t i = 0; i < s->keys.n; i++)
        evbuffer_add_printf(out, "tessera_key_waiting_images{key=\"%s\"} %d\n",
                            s->keys.v[i].name, key_waiting(s, s->keys.v[i].name));
}

static void on_accepted(void *user, int status)
{
    accept_ctx *c = user;
    if (c->prev)
        c->prev->next = c->next;
    else
        book.inflight = c->next;
    if (c->next)
        c->next->prev = c->prev;
    book.pending -= c->pending;
    if (book.pending < 1e-9)
        book.pending = 0;
    for (int i = 0; status >= 0 && i < c->n; i++)
        book_add(c->jobs[i].job, c->jobs[i].extra);
    void (*done)(void *, int) = c->done;
    void *u = c->user;
    free(c);
    done(u, status);
}

void svc_gate_accept(svc_server *s, svc_job **jobs, int n, void (*done)(void *user, int status),
                     void *user)
{
    book_for(s);
    int big = 0;
    for (int i = 0; i < n; i++)
        big += jobs[i]->params && svc_gate_image_units(s, jobs[i]->params) > 1.0;
    accept_ctx *c = calloc(1, sizeof *c + (size_t)big * sizeof c->jobs[0]);
    if (!c) {
        SVC_WARN("gate: out of memory; these jobs count one unit per image, and not in their "
                 "key's backlog until journaled");
        svc_server_accept(s, jobs, n, done, user);
        return;
    }
    c->done = done;
    c->user = user;
    snprintf(c->owner, sizeof c->owner, "%s", n > 0 ? jobs[0]->owner : "");
    for (int i = 0; i < n; i++)
        c->images += jobs[i]->n;
    c->next = book.inflight;
    if (book.inflight)
        book.inflight->prev = c;
    book.inflight = c;
    for (int i = 0; i < n; i++) {
        const double extra =
            jobs[i]->params ? svc_gate_image_units(s, jobs[i]->params) - 1.0 : 0.0;
        if (extra <= 0)
            continue;
        c->jobs[c->n++] = (tracked){jobs[i]->id, extra};
        c->pending += extra * jobs[i]->n;
    }
    book.pending += c->pending;
    svc_server_accept(s, jobs, n, on_accepted, c);
}
