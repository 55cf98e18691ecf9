/*
 * service/http/sse.h - Server-Sent Event streams of jobs and batches.
 *
 * A client is a cursor into its job's (or batch's) event history: it is
 * sent every event after the cursor, one chunk in flight at a time (the
 * long-reply primitive, stream.h: a slow reader costs its own buffer and
 * nothing else; a `: keepalive` every 15 s; disconnects seen by a read
 * watch on the socket and by failed writes).  Last-Event-ID sets the
 * starting cursor; a client arriving after the end gets the history and
 * the final event, then the stream closes.
 *
 * Owner: the event loop.  A client is freed at a safe point after its
 * connection closes (never inside evhttp's own callback).
 */
#ifndef SVC_SSE_H
#define SVC_SSE_H

#include <stdint.h>

#include "jobs.h"

struct svc_server;
struct svc_req;
typedef struct svc_sse svc_sse;

svc_sse *svc_sse_new(struct svc_server *s);
void svc_sse_free(svc_sse *x);
/* Start a stream answering r (takes r over). */
void svc_sse_open_job(struct svc_server *s, struct svc_req *r, svc_job *j, uint32_t last_id);
void svc_sse_open_batch(struct svc_server *s, struct svc_req *r, svc_batch *b, uint32_t last_id);
/* New events were appended: write them to the subscribed clients. */
void svc_sse_job_notify(struct svc_server *s, svc_job *j);
void svc_sse_batch_notify(struct svc_server *s, svc_batch *b);
int svc_sse_count(const svc_sse *x);
/* End every stream (shutdown). */
void svc_sse_close_all(struct svc_server *s);

#endif
