/*
 * service/api/native/routes_ops.c - what operators and clients ask about the server:
 * GET /healthz, /readyz, /metrics, /v1/models, /v1/samplers,
 * /v1/schedulers.
 */
#include <string.h>

#include <event2/buffer.h>

#include "gate.h"
#include "http.h"
#include "json.h"
#include "queue.h"
#include "routes.h"
#include "server.h"
#include "sse.h"

static cJSON *status_json(const char *status)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", status);
    return o;
}

void svc_ops_readyz(svc_req *r, const char *rest)
{
    (void)rest;
    svc_server *s = r->srv;
    const int up = svc_devices_up(&s->devices);
    if (s->phase == SVC_PHASE_READY && s->devices.n > 0 && up == 0) {
        /* every device failed (docs/multi-gpu.md part 3): the error object
         * and the devices, so a probe's log says which and why */
        cJSON *o = cJSON_CreateObject();
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "code", "unavailable");
        cJSON_AddStringToObject(e, "message", "every device has failed");
        cJSON_AddNullToObject(e, "field");
        cJSON_AddStringToObject(o, "status", "failed");
        cJSON_AddItemToObject(o, "devices", svc_devices_json(&s->devices));
        svc_req_add_header(r, "Retry-After", "60");
        svc_reply_json(r, 503, o);
        return;
    }
    if (s->phase == SVC_PHASE_READY) {
        cJSON *o = status_json(up < s->devices.n ? "degraded" : "ready");
        if (s->devices.n > 1 || up < s->devices.n)
            cJSON_AddItemToObject(o, "devices", svc_devices_json(&s->devices));
        svc_reply_json(r, 200, o);
        return;
    }
    svc_reply_unavailable(r); /* the 503 error object, with Retry-After */
}

void svc_ops_metrics(svc_req *r, const char *rest)
{
    (void)rest;
    svc_server *s = r->srv;
    struct evbuffer *buf = evbuffer_new();
    if (!buf) {
        svc_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    svc_gauges g = {s->queue->ops->length(s->queue), s->running_images, s->n_workers,
                    svc_sse_count(s->sse), s->body_bytes, s->accept_errors};
    svc_metrics_render(&s->metrics, &g, buf);
    svc_keys_metrics(&s->keys, buf);
    svc_gate_key_metrics(s, buf);
    svc_cluster_metrics(s->cluster, buf);
    svc_devices_metrics(&s->devices, buf);
    svc_reply_buffer(r, 200, "text/plain; version=0.0.4; charset=utf-8", buf);
    evbuffer_free(buf);
}

void svc_ops_models(svc_req *r, const char *rest)
{
    (void)rest;
    svc_server *s = r->srv;
    if (s->phase == SVC_PHASE_LOADING) {
        svc_reply_unavailable(r);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)(long long)s->model_created);
    cJSON_AddStringToObject(m, "owned_by", "tessera");
    cJSON_AddStringToObject(m, "family", s->family);
    cJSON_AddNumberToObject(m, "default_size", s->default_size);
    cJSON_AddStringToObject(m, "device", s->device_desc);
    cJSON_AddBoolToObject(m, "inpainting", s->inpainting);
    cJSON_AddItemToArray(data, m);
    svc_reply_json(r, 200, o);
}

void svc_ops_samplers(svc_req *r, const char *rest)
{
    (void)rest;
    const tsr_sampler_desc *sd = NULL;
    const tsr_schedule_desc *sc = NULL;
    int n = tsr_samplers(&sd), ns = tsr_schedules(&sc);
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "samplers");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", sd[i].name);
        svc_json_add_string_or_null(e, "a1111", sd[i].a1111);
        svc_json_add_string_or_null(e, "diffusers", sd[i].diffusers);
        cJSON *sched = cJSON_AddArrayToObject(e, "schedules");
        for (int k = 0; k < ns && k < 32; k++)
            if (sd[i].schedules & (1u << k))
                cJSON_AddItemToArray(sched, cJSON_CreateString(sc[k].name));
        cJSON_AddItemToArray(arr, e);
    }
    svc_reply_json(r, 200, o);
}

void svc_ops_schedulers(svc_req *r, const char *rest)
{
    (void)rest;
    const tsr_schedule_desc *sc = NULL;
    int n = tsr_schedules(&sc);
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "schedulers");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", sc[i].name);
        svc_json_add_string_or_null(e, "a1111", sc[i].a1111);
        cJSON_AddItemToArray(arr, e);
    }
    svc_reply_json(r, 200, o);
}

void svc_ops_healthz(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_json(r, 200, status_json("ok"));
}
