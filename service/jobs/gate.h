/*
 * service/jobs/gate.h - the submit gate: the one place that decides whether
 * the server takes a request's work now, for every dialect (native
 * /v1/jobs and /v1/batches, A1111's txt2img/img2img, OpenAI's
 * generations/edits).
 *
 * Why one gate: the checks used to be copied into each submit route, and
 * the copies drifted (a `--role worker` node refused native jobs with 503
 * but queued A1111 and OpenAI calls, and refused batches as "queue
 * unreachable").  As Redis's processCommand is the one gate before `call`,
 * every dialect now translates its body to native parameters and asks
 * here, in this order:
 *
 *   1. phase      loading or draining           503 unavailable + Retry-After
 *   1b. devices   every device has failed       503 unavailable + Retry-After
 *   2. role       --queue with --role worker    503 unavailable + Retry-After
 *   3. queue      --queue's Redis away          503 unavailable + Retry-After
 *   4. cost       no device can hold a batch    422 too_costly
 *   5. key        the asking key past --key-max-queue (images it has
 *                 waiting)                      429 queue_full + Retry-After
 *   6. backlog    past --max-queue              429 queue_full + Retry-After
 *   7. accept     svc_gate_accept (journal / Redis; its failure is mapped
 *                 back through svc_gate_accepted)
 *
 * 1-3 need no body and are also asked alone (svc_gate_open) before a body
 * is parsed, so a draining server answers 503 whatever it is sent, as
 * before.  The decision is data (svc_gate), made without knowing who asks;
 * svc_gate_reply hands it to the one error renderer (http/reply.c) in the
 * request's dialect (native, A1111 with `detail`, OpenAI), so the same
 * refusal reads the same in every shape.
 *
 * The cost model (docs/service-design.md, "Limits: admission by cost"):
 * - memory: one batch of min(n, --max-batch) images of a job's size runs
 *   together, and tsr_engine_memory_estimate gives its working memory;
 *   above what the device has (tsr_engine_device_memory, or --max-memory)
 *   the request can never run: 422 too_costly, with the estimate.
 * - time: a queue unit is one image at the model's default size and 30
 *   steps (the default of `steps`); an image counts max(1, its pixels x
 *   steps over that), so --max-queue keeps its meaning in images at the
 *   default size and anything smaller still counts one.  The queue's
 *   units = its images + what its larger images count beyond one each; past
 *   --max-queue: 429 queue_full, with both figures.  A request that finds
 *   nothing waiting is taken whatever its units if its images fit
 *   --max-queue (else a long one would get 429 for ever).
 *
 * Threads: the loop's only.
 */
#ifndef SVC_GATE_H
#define SVC_GATE_H

#include <stdbool.h>
#include <stddef.h>

#include "params.h"

struct svc_server;
struct svc_job;
struct svc_req;

/* A queue unit's steps (params.c's default for `steps`). */
#define SVC_GATE_UNIT_STEPS 30

/* Why the gate said no (SVC_GATE_OPEN: it did not). */
typedef enum svc_gate_why {
    SVC_GATE_OPEN = 0,
    SVC_GATE_LOADING,    /* 503: the engines are still opening */
    SVC_GATE_DRAINING,   /* 503: SIGTERM, running images finish */
    SVC_GATE_WORKER,     /* 503: --role worker takes no submissions */
    SVC_GATE_QUEUE_AWAY, /* 503: --queue's Redis cannot be reached */
    SVC_GATE_TOO_COSTLY, /* 422: no device here can ever hold it */
    SVC_GATE_KEY_FULL,   /* 429: the key is past --key-max-queue, later may do */
    SVC_GATE_QUEUE_FULL, /* 429: past --max-queue, later may do */
    SVC_GATE_FAILED,     /* 500: the accept itself failed (journal) */
    SVC_GATE_NO_DEVICE,  /* 503: every device has failed (docs/multi-gpu.md part 3) */
} svc_gate_why;

typedef struct svc_gate {
    /* the decision */
    svc_gate_why why;
    int status;          /* 0 open; else 503, 422, 429 or 500 */
    const char *code;    /* native code: "unavailable", "too_costly", "queue_full",
                          * "internal"; NULL when open */
    int retry_after;     /* seconds for Retry-After, else 0 */
    int job;             /* the job (index into the request's jobs) a 422 names, else -1 */
    char message[768];   /* says why, with the estimates */
    /* the figures behind a cost or backlog decision */
    int images;          /* images of the request */
    double units;        /* what the request counts, in queue units */
    int waiting_images;  /* images waiting before it (queued, or accepted and not journaled) */
    double waiting_units;
    size_t need_bytes;   /* working memory of the job's image batch (the 422's job) */
    size_t limit_bytes;  /* what the device or --max-memory gives; 0 = unknown */
} svc_gate;

/* A dialect's native job object (over a batch's defaults, or NULL) as
 * parameters, with this server's context (the model's size, the engine's
 * check): svc_params_parse's result, the gate's input. */
int svc_gate_parse(struct svc_server *s, const cJSON *job, const cJSON *defaults,
                   svc_params **out, svc_param_error *err);

/* What one image of these parameters counts, in queue units (>= 1). */
double svc_gate_image_units(struct svc_server *s, const svc_params *p);

/* Checks 1-3 (phase, role, queue reachability): may this node take work at
 * all?  True, or false with *out filled.  Asked before a body is parsed. */
bool svc_gate_open(struct svc_server *s, svc_gate *out);
/* The same for a submit route: true when the node takes work; false after
 * answering the refusal in r's dialect (svc_gate_reply), which ends r. */
bool svc_gate_open_or_reply(struct svc_req *r);

/* The whole gate, checks 1-6, for the n jobs of one request (a job, a
 * batch's jobs, an A1111 call's chunks) made by the key named owner (""
 * or NULL: keys off).  True, or false with *out filled for the caller to
 * render. */
bool svc_gate_check(struct svc_server *s, const char *owner, svc_params *const *jobs, int n,
                    svc_gate *out);

/* /metrics: tessera_key_waiting_images{key="NAME"}, one line per key (keys
 * on only): the images each key has waiting, as check 5 counts them. */
struct evbuffer;
void svc_gate_key_metrics(struct svc_server *s, struct evbuffer *out);

/* Accept admitted jobs: svc_server_accept, keeping count of what their
 * larger-than-one images add to the queue.  Same contract as
 * svc_server_accept (done(user, status) on the loop; the jobs are the
 * server's). */
void svc_gate_accept(struct svc_server *s, struct svc_job **jobs, int n,
                     void (*done)(void *user, int status), void *user);

/* The accept's status as a decision: true for success; else false with
 * *out filled (-EAGAIN: Redis went away, 503 as check 3; any other: 500,
 * "<what> could not be journaled: <why>", what = "the job", "the batch"). */
bool svc_gate_accepted(int status, const char *what, svc_gate *out);

/* Answer a refusal in r's dialect (the route's, r->dialect), with
 * Retry-After when it has one and the dialect's name for the code (OpenAI:
 * rate_limit_exceeded for queue_full); field NULL or the member named.
 * Ends r. */
void svc_gate_reply(struct svc_req *r, const svc_gate *g, const char *field);

#endif
