/*
 * service/api/comfy/comfy_run.c - an accepted prompt's job, told as
 * ComfyUI's execution messages on the websocket (comfy_ws.c).
 *
 * Why from the job's events: a prompt is one native job (comfy_graph.c),
 * so there is no node-by-node execution to report; the job's own events
 * (the ones its SSE stream carries) are mapped onto the nodes of the
 * plan's order, in the order ComfyUI would send them:
 *
 *   started    execution_start, execution_cached (none), executing for
 *              each node up to the KSampler
 *   step       progress {value, max, node: the KSampler} (image 0's)
 *   done       executing for the nodes after it (VAEDecode, SaveImage),
 *              executed {node, output: {images}} per output node,
 *              execution_success, executing {node: null}, status
 *   tiles      with extra_data.preview_method other than "none" (previews
 *              are off by default, as ComfyUI's --preview-method is: a
 *              client such as comfy-api-simplified takes any binary frame
 *              for a result): a binary preview frame (image 0's current
 *              preview tiles as one JPEG, after ComfyUI's 8-byte head:
 *              event 1 = PREVIEW_IMAGE, format 1 = JPEG, both big-endian),
 *              only to sockets with nothing waiting, and only when one
 *              listens
 *   failed     execution_error (on the KSampler), executing null, status
 *   cancelled  execution_interrupted, executing null, status
 *
 * A run lives from the accept to the job's end (svc_job_watch; a watched
 * job is never collected); it is freed at a safe point after its last
 * event.  Runs are counted for status's queue_remaining.  Sockets hear a
 * run only if their client id is the prompt's and their key sees the job.
 */
#include "comfy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <turbojpeg.h>

#include "clock.h"
#include "images.h"
#include "jobs.h"
#include "server.h"
#include "tiles.h"

#define PREVIEW_QUALITY 75

struct comfy_run {
    svc_server *srv;
    svc_job *job;
    svc_watch watch;
    bool watching, done;
    char sid[257];
    char owner[64];
    bool previews;              /* extra_data.preview_method asked for them */
    char *order[COMFY_MAX_NODES];
    const char *classes[COMFY_MAX_NODES];
    int n_order, sampler_at, announced;
    char outputs[8][COMFY_MAX_ID + 1];
    bool temp[8];
    int n_outputs;
    struct comfy_run *prev, *next;
};

static comfy_run *runs;
static int n_runs;

int comfy_runs_pending(void) { return n_runs; }

comfy_run *comfy_run_new(const comfy_plan *plan, const char *sid, bool previews)
{
    comfy_run *run = calloc(1, sizeof *run);
    if (!run)
        return NULL;
    run->previews = previews;
    snprintf(run->sid, sizeof run->sid, "%s", sid ? sid : "");
    run->sampler_at = -1;
    for (int i = 0; i < plan->n_order; i++) {
        run->order[run->n_order] = strdup(plan->order[i]);
        if (!run->order[run->n_order])
            continue;
        run->classes[run->n_order] = plan->order_class[i];
        if (strcmp(plan->order[i], plan->sampler_node) == 0)
            run->sampler_at = run->n_order;
        run->n_order++;
    }
    for (int i = 0; i < plan->n_outputs; i++) {
        snprintf(run->outputs[i], sizeof run->outputs[i], "%s", plan->outputs[i]);
        run->temp[i] = plan->temp[i];
    }
    run->n_outputs = plan->n_outputs;
    return run;
}

void comfy_run_free(comfy_run *run)
{
    if (!run)
        return;
    for (int i = 0; i < run->n_order; i++)
        free(run->order[i]);
    free(run);
}

static void free_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    comfy_run_free(arg);
}

static const char *sid_of(const comfy_run *run) { return run->sid[0] ? run->sid : NULL; }

static void tell(comfy_run *run, const char *type, cJSON *data)
{
    comfy_ws_send(sid_of(run), run->owner[0] ? run->owner : NULL, type, data);
}

static cJSON *with_id(const comfy_run *run)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", run->job->ids);
    return d;
}

static cJSON *stamped(const comfy_run *run)
{
    cJSON *d = with_id(run);
    cJSON_AddNumberToObject(d, "timestamp", (double)(long long)(svc_now_unix() * 1000));
    return d;
}

static void executing(comfy_run *run, const char *node)
{
    cJSON *d = cJSON_CreateObject();
    if (node) {
        cJSON_AddStringToObject(d, "node", node);
        cJSON_AddStringToObject(d, "display_node", node);
    } else {
        cJSON_AddNullToObject(d, "node");
        cJSON_AddNullToObject(d, "display_node");
    }
    cJSON_AddStringToObject(d, "prompt_id", run->job->ids);
    tell(run, "executing", d);
}

/* executing for the nodes up to (and with) index `upto` not yet announced */
static void announce(comfy_run *run, int upto)
{
    for (; run->announced <= upto && run->announced < run->n_order; run->announced++)
        executing(run, run->order[run->announced]);
}

static const char *sampler_id(const comfy_run *run)
{
    return run->sampler_at >= 0 ? run->order[run->sampler_at] : "";
}

static cJSON *executed_list(const comfy_run *run)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < run->announced && i < run->n_order; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(run->order[i]));
    return a;
}

static void on_done(comfy_run *run)
{
    svc_job *j = run->job;
    announce(run, run->n_order - 1);
    for (int k = 0; k < run->n_outputs; k++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "node", run->outputs[k]);
        cJSON_AddStringToObject(d, "display_node", run->outputs[k]);
        cJSON *out = cJSON_AddObjectToObject(d, "output");
        cJSON *imgs = cJSON_AddArrayToObject(out, "images");
        for (int i = 0; i < j->n; i++) {
            if (j->images[i].state != SVC_DONE)
                continue;
            char name[64];
            snprintf(name, sizeof name, "%s_%05d_.png", j->ids, i);
            cJSON *im = cJSON_CreateObject();
            cJSON_AddStringToObject(im, "filename", name);
            cJSON_AddStringToObject(im, "subfolder", "");
            cJSON_AddStringToObject(im, "type", run->temp[k] ? "temp" : "output");
            cJSON_AddItemToArray(imgs, im);
        }
        cJSON_AddStringToObject(d, "prompt_id", j->ids);
        tell(run, "executed", d);
    }
    tell(run, "execution_success", stamped(run));
}

/* Image 0's current preview tiles as one JPEG behind ComfyUI's head
 * (malloc'd, *len), or NULL while a tile is missing.  The same tiles feed
 * the SSE tiles, A1111's current_image and OpenAI's partial images. */
static uint8_t *preview_frame(const svc_tilemap *m, size_t *len)
{
    uint8_t *rgb = svc_tiles_compose_rgb(m, true);
    if (!rgb)
        return NULL;
    int w = m->width, h = m->height;
    tjhandle tj = tjInitCompress();
    unsigned char *jpeg = NULL;
    unsigned long jlen = 0;
    int rc = tj ? tjCompress2(tj, rgb, w, w * 3, h, TJPF_RGB, &jpeg, &jlen, TJSAMP_420,
                              PREVIEW_QUALITY, 0)
                : -1;
    free(rgb);
    uint8_t *out = rc == 0 ? malloc(8 + jlen) : NULL;
    if (out) {
        static const uint8_t head[8] = {0, 0, 0, 1, 0, 0, 0, 1};
        memcpy(out, head, 8);
        memcpy(out + 8, jpeg, jlen);
        *len = 8 + jlen;
    }
    if (jpeg)
        tjFree(jpeg);
    if (tj)
        tjDestroy(tj);
    return out;
}

static void send_preview(comfy_run *run, const svc_event *ev)
{
    const char *owner = run->owner[0] ? run->owner : NULL;
    if (!run->previews || ev->a != 0 || !comfy_ws_idle(sid_of(run), owner))
        return;
    const svc_tilemap *m = svc_image_tiles(run->srv, run->job, 0);
    if (!m || m->final)
        return;
    size_t len = 0;
    uint8_t *frame = preview_frame(m, &len);
    if (frame)
        comfy_ws_send_binary(sid_of(run), owner, frame, len);
    free(frame);
}

static void on_event(svc_server *s, svc_job *j, const svc_event *ev, void *arg)
{
    (void)s;
    comfy_run *run = arg;
    if (run->done)
        return;
    switch (ev->kind) {
    case SVC_EV_STARTED: {
        tell(run, "execution_start", stamped(run));
        cJSON *d = stamped(run);
        cJSON_AddArrayToObject(d, "nodes");
        tell(run, "execution_cached", d);
        announce(run, run->sampler_at);
        return;
    }
    case SVC_EV_STEP: {
        if (ev->a != 0)
            return;
        announce(run, run->sampler_at);
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "value", ev->b);
        cJSON_AddNumberToObject(d, "max", ev->c);
        cJSON_AddStringToObject(d, "prompt_id", j->ids);
        cJSON_AddStringToObject(d, "node", sampler_id(run));
        tell(run, "progress", d);
        return;
    }
    case SVC_EV_TILES: send_preview(run, ev); return;
    case SVC_EV_DONE: on_done(run); break;
    case SVC_EV_FAILED: {
        cJSON *d = stamped(run);
        cJSON_AddStringToObject(d, "node_id", sampler_id(run));
        cJSON_AddStringToObject(d, "node_type",
                                run->sampler_at >= 0 ? run->classes[run->sampler_at] : "");
        cJSON_AddItemToObject(d, "executed", executed_list(run));
        cJSON_AddStringToObject(d, "exception_message",
                                j->error_message ? j->error_message : "the job failed");
        cJSON_AddStringToObject(d, "exception_type", j->error_code ? j->error_code : "error");
        cJSON_AddArrayToObject(d, "traceback");
        cJSON_AddObjectToObject(d, "current_inputs");
        cJSON_AddObjectToObject(d, "current_outputs");
        tell(run, "execution_error", d);
        break;
    }
    case SVC_EV_CANCELLED: {
        cJSON *d = stamped(run);
        cJSON_AddStringToObject(d, "node_id", sampler_id(run));
        cJSON_AddStringToObject(d, "node_type",
                                run->sampler_at >= 0 ? run->classes[run->sampler_at] : "");
        cJSON_AddItemToObject(d, "executed", executed_list(run));
        tell(run, "execution_interrupted", d);
        break;
    }
    default: return;
    }
    /* final: the end of the prompt, then the queue's news to everyone */
    executing(run, NULL);
    run->done = true;
    svc_job_unwatch(j, &run->watch);
    run->watching = false;
    if (run->prev)
        run->prev->next = run->next;
    else if (runs == run)
        runs = run->next;
    if (run->next)
        run->next->prev = run->prev;
    n_runs--;
    comfy_ws_send(NULL, NULL, "status", comfy_status_data(NULL));
    struct timeval zero = {0, 0};
    if (event_base_once(run->srv->base, -1, EV_TIMEOUT, free_later, run, &zero) < 0)
        comfy_run_free(run); /* no timer: the loop is ending, nothing reads it */
}

void comfy_run_attach(svc_server *s, comfy_run *run, svc_job *j)
{
    if (!run)
        return;
    run->srv = s;
    run->job = j;
    snprintf(run->owner, sizeof run->owner, "%s", j->owner);
    if (svc_state_final(j->state)) {
        comfy_run_free(run);
        return;
    }
    run->watch.on_event = on_event;
    run->watch.arg = run;
    svc_job_watch(j, &run->watch);
    run->watching = true;
    run->next = runs;
    if (runs)
        runs->prev = run;
    runs = run;
    n_runs++;
    comfy_ws_send(NULL, NULL, "status", comfy_status_data(NULL));
}
