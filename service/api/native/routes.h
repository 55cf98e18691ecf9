/*
 * service/api/native/routes.h - the native API's handlers, as the route
 * table (http/router.c) calls them.
 *
 * Handlers: rest is the path after the row's root ("/<id>[/...]" under
 * /v1/jobs and /v1/batches).  The table has checked the method; each
 * handler answers r once.
 */
#ifndef SVC_NATIVE_ROUTES_H
#define SVC_NATIVE_ROUTES_H

#include <stdbool.h>
#include <stdint.h>

struct svc_req;

/* GET /healthz, /readyz, /metrics, /v1/models, /v1/samplers,
 * /v1/schedulers (routes_ops.c) */
void svc_ops_healthz(struct svc_req *r, const char *rest);
void svc_ops_readyz(struct svc_req *r, const char *rest);
void svc_ops_metrics(struct svc_req *r, const char *rest);
void svc_ops_models(struct svc_req *r, const char *rest);
void svc_ops_samplers(struct svc_req *r, const char *rest);
void svc_ops_schedulers(struct svc_req *r, const char *rest);

/* /v1/jobs (routes_jobs.c): POST; /{id} GET, HEAD, DELETE; /{id}/events;
 * /{id}/images/{i}.png; /{id}/images/{i}/tiles[/{v}/{row}_{col}.jpg]; any
 * other name under /images/ is a 404. */
void svc_jobs_submit(struct svc_req *r, const char *rest);
void svc_jobs_job(struct svc_req *r, const char *rest);
void svc_jobs_events(struct svc_req *r, const char *rest);
void svc_jobs_image(struct svc_req *r, const char *rest);
void svc_jobs_tiles(struct svc_req *r, const char *rest);
void svc_jobs_no_image(struct svc_req *r, const char *rest);
/* The shapes of an image's and a tile's name, after "/<id>/images/". */
bool svc_jobs_is_image_name(const char *rest);
bool svc_jobs_is_tile_path(const char *rest);

/* The Last-Event-ID of a job's or a batch's event stream: absent or empty
 * is 0, else decimal digits up to 2^32-1 and nothing else (no sign, no
 * space).  false: r has been answered 400 (routes_jobs.c). */
bool svc_native_last_event_id(struct svc_req *r, uint32_t *out);

/* /v1/batches (routes_batches.c): POST; /{id} GET, HEAD, DELETE;
 * /{id}/events. */
void svc_batches_submit(struct svc_req *r, const char *rest);
void svc_batches_batch(struct svc_req *r, const char *rest);
void svc_batches_events(struct svc_req *r, const char *rest);

#endif
