/*
 * service/jobs/admission.h - the submit gate's cost checks, shared by every
 * dialect (native /v1/jobs and /v1/batches, A1111's txt2img/img2img,
 * OpenAI's generations/edits).
 *
 * Each route parses its body into native parameters (svc_params), then asks
 * svc_admit_check whether the server takes them now, renders a refusal in
 * its own error shape, and accepts through svc_admit_accept.  The decision
 * is the same whatever the dialect: it is made here, once.  This is the
 * first piece of issue 56's single submit gate (phase, role and queue
 * reachability still live in the routes).
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
#ifndef SVC_ADMISSION_H
#define SVC_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>

#include "params.h"

struct svc_server;
struct svc_job;
struct svc_req;

/* A queue unit's steps (params.c's default for `steps`). */
#define SVC_ADMIT_UNIT_STEPS 30

typedef struct svc_admit {
    /* the decision */
    int status;          /* 0 admitted; 422 too costly for the device; 429 queue full */
    const char *code;    /* "too_costly" or "queue_full" (native names); NULL if admitted */
    int retry_after;     /* seconds for Retry-After (429), else 0 */
    int job;             /* the job (index into the request's jobs) a 422 names, else -1 */
    char message[768];   /* says why, with the estimates */
    /* the figures behind it */
    int images;          /* images of the request */
    double units;        /* what the request counts, in queue units */
    int waiting_images;  /* images waiting before it (queued, or accepted and not journaled) */
    double waiting_units;
    size_t need_bytes;   /* working memory of the job's image batch (the 422's job) */
    size_t limit_bytes;  /* what the device or --max-memory gives; 0 = unknown */
} svc_admit;

/* What one image of these parameters counts, in queue units (>= 1). */
double svc_admit_image_units(struct svc_server *s, const svc_params *p);

/* The gate: may these n jobs (one request: a job, a batch's jobs, an A1111
 * call's chunks) be accepted now?  True, or false with *out filled for the
 * caller to render (status, code, Retry-After, message). */
bool svc_admit_check(struct svc_server *s, svc_params *const *jobs, int n, svc_admit *out);

/* A refusal in the native shape ({"error": {code, message, field}}, with
 * Retry-After when it has one); ends r.  The other dialects render out
 * themselves (a1111.c, openai.c). */
void svc_admit_reply(struct svc_req *r, const svc_admit *v, const char *field);

/* Accept admitted jobs: svc_server_accept, keeping count of what their
 * larger-than-one images add to the queue.  Same contract as
 * svc_server_accept (done(user, status) on the loop; the jobs are the
 * server's). */
void svc_admit_accept(struct svc_server *s, struct svc_job **jobs, int n,
                      void (*done)(void *user, int status), void *user);

#endif
