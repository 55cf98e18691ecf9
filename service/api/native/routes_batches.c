/*
 * service/api/native/routes_batches.c - /v1/batches: many jobs in one request
 * (all-or-nothing validation), their combined state and event stream.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "routes.h"
#include "server.h"
#include "sse.h"
#include "util.h"

#define MAX_BATCH_JOBS 1000

typedef struct batch_ctx {
    svc_req *r;
    svc_batch *batch;
} batch_ctx;

static void on_accepted(void *user, int status)
{
    batch_ctx *c = user;
    svc_req *r = c->r;
    svc_batch *b = c->batch;
    free(c);
    svc_gate g;
    if (!svc_gate_accepted(status, "the batch", &g)) {
        svc_gate_reply(r, &g, NULL);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", b->ids);
    cJSON *jobs = cJSON_AddArrayToObject(o, "jobs");
    for (int i = 0; i < b->n; i++) {
        cJSON *jo = cJSON_CreateObject();
        cJSON_AddStringToObject(jo, "id", b->jobs[i]->ids);
        cJSON_AddNumberToObject(jo, "position", b->jobs[i]->position < 0 ? 0
                                                                         : b->jobs[i]->position);
        cJSON_AddItemToArray(jobs, jo);
    }
    cJSON_AddNumberToObject(o, "count", b->n);
    char loc[64];
    snprintf(loc, sizeof loc, "/v1/batches/%s", b->ids);
    svc_req_add_header(r, "Location", loc);
    svc_reply_json(r, 202, o);
}

/* parse -> gate -> accept (service/jobs/gate.h) */
static void submit(svc_req *r)
{
    svc_server *s = r->srv;
    if (!svc_gate_open_or_reply(r))
        return;
    svc_gate g;
    cJSON *obj = svc_req_json_object(r);
    if (!obj)
        return;
    svc_params **params = NULL;
    int n = 0;
    const cJSON *defaults = cJSON_GetObjectItemCaseSensitive(obj, "defaults");
    const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(obj, "jobs");
    if (defaults && cJSON_IsNull(defaults))
        defaults = NULL;
    if (defaults && !cJSON_IsObject(defaults)) {
        svc_reply_error(r, 400, "invalid_parameter", "defaults",
                        "defaults must be an object of job parameters");
        goto done;
    }
    if (!cJSON_IsArray(jobs)) {
        svc_reply_error(r, 400, "invalid_parameter", "jobs",
                        "jobs must be an array of 1 to %d job objects", MAX_BATCH_JOBS);
        goto done;
    }
    int count = cJSON_GetArraySize(jobs);
    if (count < 1 || count > MAX_BATCH_JOBS) {
        svc_reply_error(r, 400, "invalid_parameter", "jobs",
                        "jobs must hold 1 to %d job objects, got %d", MAX_BATCH_JOBS, count);
        goto done;
    }
    params = calloc((size_t)count, sizeof *params);
    if (!params) {
        svc_reply_error(r, 500, "internal", NULL, "out of memory");
        goto done;
    }
    const cJSON *job;
    cJSON_ArrayForEach(job, jobs)
    {
        char field[96];
        if (!cJSON_IsObject(job)) {
            snprintf(field, sizeof field, "jobs[%d]", n);
            svc_reply_error(r, 400, "invalid_parameter", field, "jobs[%d] must be an object", n);
            goto done;
        }
        svc_param_error pe;
        if (svc_gate_parse(s, job, defaults, &params[n], &pe) < 0) {
            if (pe.field[0] && pe.from_defaults)
                snprintf(field, sizeof field, "defaults.%s", pe.field);
            else if (pe.field[0])
                snprintf(field, sizeof field, "jobs[%d].%s", n, pe.field);
            else
                snprintf(field, sizeof field, "jobs[%d]", n);
            svc_reply_error(r, 400, "invalid_parameter", field, "jobs[%d]: %s", n, pe.message);
            goto done;
        }
        n++;
    }
    if (!svc_gate_check(s, svc_key_name(r->key), params, n, &g)) {
        char field[32] = "";
        if (g.job >= 0)
            snprintf(field, sizeof field, "jobs[%d]", g.job);
        if (g.job >= 0 && n > 1) { /* name the job the memory figure is about */
            char msg[sizeof g.message];
            snprintf(msg, sizeof msg, "jobs[%d]: %s", g.job, g.message);
            snprintf(g.message, sizeof g.message, "%s", msg);
        }
        svc_gate_reply(r, &g, field[0] ? field : NULL);
        goto done;
    }
    svc_job **list = calloc((size_t)n, sizeof *list);
    batch_ctx *c = calloc(1, sizeof *c);
    svc_batch *b = list && c ? svc_batch_new(s->jobs, svc_jobs_new_batch_id(s->jobs),
                                             svc_now_unix())
                             : NULL;
    if (!b) {
        free(list);
        free(c);
        svc_reply_error(r, 500, "internal", NULL, "out of memory");
        goto done;
    }
    const double now = svc_now_unix();
    for (int i = 0; i < n; i++) {
        list[i] = svc_job_new(svc_jobs_new_id(s->jobs), params[i], now);
        if (list[i])
            svc_job_set_owner(list[i], svc_key_name(r->key));
        if (!list[i]) {
            for (int k = 0; k < i; k++) {
                list[k]->params = NULL; /* params[] still holds those references */
                svc_job_free(list[k]);
            }
            free(list);
            free(c);
            svc_reply_error(r, 500, "internal", NULL, "out of memory");
            goto done; /* the empty batch stays; it is harmless */
        }
        list[i]->batch = b;
        list[i]->batch_index = i;
    }
    /* the jobs own their parameters now */
    for (int i = 0; i < n; i++) {
        svc_batch_add(b, list[i], i);
        params[i] = NULL;
    }
    c->r = r;
    c->batch = b;
    svc_gate_accept(s, list, n, on_accepted, c);
    free(list);
done:
    if (params)
        for (int i = 0; i < n; i++)
            svc_params_unref(params[i]);
    free(params);
    cJSON_Delete(obj);
}

/* --queue: a cancel waits for its jobs' `cancel` events (routes_jobs.c). */
static bool batch_final(svc_server *s, const char *rest, uint64_t id)
{
    (void)rest;
    svc_batch *b = svc_jobs_find_batch(s->jobs, id);
    for (int i = 0; b && i < b->n; i++)
        if (!svc_state_final(b->jobs[i]->state))
            return false;
    return true;
}

/* A cluster cancel of a batch, once the follower has applied its jobs'
 * `cancel` events (or 2 s later: cancelled here alone). */
static void batch_cancel_done(svc_req *r, const char *rest)
{
    svc_server *s = r->srv;
    uint64_t bid = 0;
    svc_route_id(rest, 'b', &bid);
    svc_batch *b = bid ? svc_jobs_find_batch(s->jobs, bid) : NULL;
    if (!b) {
        svc_reply_error(r, 404, "not_found", NULL, "no batch %.40s", rest + 1);
        return;
    }
    for (int i = 0; i < b->n; i++)
        svc_job_cancel(s, b->jobs[i]); /* Redis away: here alone */
    svc_jobs_update_positions(s);
    svc_reply_json(r, 200, svc_batch_json(s, b));
}

/* ------------------------------------------------------------- the routes */

void svc_batches_submit(svc_req *r, const char *rest)
{
    (void)rest;
    submit(r);
}

/* GET, HEAD, DELETE /v1/batches/<id> */
void svc_batches_batch(svc_req *r, const char *rest)
{
    svc_server *s = r->srv;
    svc_batch *b = svc_route_lookup(r, rest, 'b', svc_batches_batch);
    if (!b)
        return;
    if (strcmp(r->method, "DELETE") == 0 && s->cluster && s->cfg.role != TSR_ROLE_WORKER &&
        !batch_final(s, rest, b->id)) {
        /* every api node cancels them when its follower reads the cancels */
        for (int i = 0; i < b->n; i++)
            if (!svc_state_final(b->jobs[i]->state))
                svc_cluster_cancel(s->cluster, b->jobs[i]->id);
        if (svc_route_wait(r, rest, b->id, 2.0, batch_final, batch_cancel_done))
            return;
    }
    if (strcmp(r->method, "DELETE") == 0) {
        for (int i = 0; i < b->n; i++)
            if (svc_job_cancel(s, b->jobs[i]) && s->cluster)
                svc_cluster_cancel(s->cluster, b->jobs[i]->id);
        svc_jobs_update_positions(s);
    }
    svc_reply_json(r, 200, svc_batch_json(s, b));
}

/* GET /v1/batches/<id>/events */
void svc_batches_events(svc_req *r, const char *rest)
{
    svc_batch *b = svc_route_lookup(r, rest, 'b', svc_batches_events);
    if (!b)
        return;
    uint32_t last = 0;
    if (!svc_native_last_event_id(r, &last))
        return;
    svc_sse_open_batch(r->srv, r, b, last);
}
