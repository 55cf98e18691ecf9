/*
 * service/api/native/routes.h - what the native routes (/v1/jobs,
 * /v1/batches) share beyond http.h: their renderer for the submit gate's
 * decisions.  The gate (service/jobs/gate.h) decides and never writes a
 * body; each dialect passes svc_gate_reply a renderer in its own error
 * shape, and this is the native one ({"error": {code, message, field}}).
 */
#ifndef SVC_NATIVE_ROUTES_H
#define SVC_NATIVE_ROUTES_H

struct svc_req;

/* svc_gate_renderer for the native shape (routes_jobs.c); ends r. */
void svc_native_render(struct svc_req *r, int status, const char *code, const char *field,
                       const char *message);

#endif
