/*
 * service/api/comfy/comfy_run.c - an accepted prompt's jobs, told as
 * ComfyUI's execution messages on the websocket (comfy_ws.c).
 *
 * Why from the jobs' events: a prompt is one native job per sampled chain
 * (comfy_plan.c), so there is no node-by-node execution to report; each
 * job's own events (the ones its SSE stream carries) are mapped onto the
 * nodes of the plan's order that its chain needs, in the order ComfyUI
 * would send them, all under the one prompt_id (the first chain's job id):
 *
 *   first start  execution_start, execution_cached (none)
 *   a start      executing for each node of that chain up to its KSampler
 *                (not yet announced: nodes chains share are announced once)
 *   step         progress {value, max, node: the chain's KSampler} (image 0's)
 *   done         executing for the chain's nodes after it (VAEDecode,
 *                ImageScale, SaveImage), executed {node, output: {images}}
 *                per output node of the chain; when every chain is done:
 *                execution_success, executing {node: null}, status
 *   tiles        with extra_data.preview_method other than "none" (previews
 *                are off by default, as ComfyUI's --preview-method is: a
 *                client such as comfy-api-simplified takes any binary frame
 *                for a result): a binary preview frame (image 0's current
 *                preview tiles as one JPEG, after ComfyUI's 8-byte head:
 *                event 1 = PREVIEW_IMAGE, format 1 = JPEG, both big-endian),
 *                only to sockets with nothing waiting, and only when one
 *                listens
 *   failed       execution_error (on the chain's KSampler), executing null,
 *                status
 *   cancelled    execution_interrupted, executing null, status
 *
 * A failed or cancelled chain ends the prompt, as a failing node ends a
 * ComfyUI prompt: the other chains' jobs still queued or running are
 * cancelled (at a safe point after the event, never inside it).  Chains
 * run as the queue takes them, possibly in the same UNet calls, so two
 * chains' messages may interleave.
 *
 * A run lives from the accept to its last job's end (svc_job_watch; a
 * watched job is never collected); it is freed at a safe point after its
 * last event.  Runs are counted for status's queue_remaining.  Sockets
 * hear a run only if their client id is the prompt's and their key sees
 * the jobs.
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

typedef struct run_chain {
    struct comfy_run *run;
    svc_job *job;
    svc_watch watch;
    bool watching;
    int sampler_at;             /* its KSampler in the order (-1: none) */
} run_chain;

struct comfy_run {
    svc_server *srv;
    run_chain chains[COMFY_MAX_CHAINS];
    int n_chains, n_done;
    bool started, over;
    char prompt_id[20];
    char sid[257];
    char owner[64];
    bool previews;              /* extra_data.preview_method asked for them */
    char *order[COMFY_MAX_NODES];
    const char *classes[COMFY_MAX_NODES];
    unsigned char masks[COMFY_MAX_NODES]; /* bit c: chain c needs the node */
    bool announced[COMFY_MAX_NODES];
    int n_order;
    comfy_output outputs[COMFY_MAX_OUT_NODES];
    int n_outputs;
};

static int n_runs; /* attached and not over: queue_remaining */

int comfy_runs_pending(void) { return n_runs; }

comfy_run *comfy_run_new(const comfy_plan *plan, const char *sid, bool previews)
{
    comfy_run *run = calloc(1, sizeof *run);
    if (!run)
        return NULL;
    run->previews = previews;
    snprintf(run->sid, sizeof run->sid, "%s", sid ? sid : "");
    run->n_chains = plan->n_chains;
    for (int c = 0; c < plan->n_chains; c++) {
        run->chains[c].run = run;
        run->chains[c].sampler_at = -1;
    }
    for (int i = 0; i < plan->n_order; i++) {
        run->order[run->n_order] = strdup(plan->order[i]);
        if (!run->order[run->n_order])
            continue;
        run->classes[run->n_order] = plan->order_class[i];
        run->masks[run->n_order] = plan->order_chains[i];
        for (int c = 0; c < plan->n_chains; c++)
            if (strcmp(plan->order[i], plan->chains[c].sampler_node) == 0)
                run->chains[c].sampler_at = run->n_order;
        run->n_order++;
    }
    memcpy(run->outputs, plan->outputs, sizeof run->outputs);
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

static const char *sid_of(const comfy_run *run) { return run->sid[0] ? run->sid : NULL; }

static void tell(comfy_run *run, const char *type, cJSON *data)
{
    comfy_ws_send(sid_of(run), run->owner[0] ? run->owner : NULL, type, data);
}

static cJSON *with_id(const comfy_run *run)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "prompt_id", run->prompt_id);
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
    cJSON_AddStringToObject(d, "prompt_id", run->prompt_id);
    tell(run, "executing", d);
}

/* executing for chain c's nodes not yet announced, up to its KSampler
 * (all: every one) */
static void announce(comfy_run *run, int c, bool all)
{
    const int upto = all ? run->n_order - 1 : run->chains[c].sampler_at;
    for (int i = 0; i <= upto && i < run->n_order; i++) {
        if (!(run->masks[i] & (1u << c)) || run->announced[i])
            continue;
        run->announced[i] = true;
        executing(run, run->order[i]);
    }
}

static const char *sampler_id(const run_chain *ch)
{
    return ch->sampler_at >= 0 ? ch->run->order[ch->sampler_at] : "";
}

static const char *sampler_class(const run_chain *ch)
{
    return ch->sampler_at >= 0 ? ch->run->classes[ch->sampler_at] : "";
}

static cJSON *executed_list(const comfy_run *run)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < run->n_order; i++)
        if (run->announced[i])
            cJSON_AddItemToArray(a, cJSON_CreateString(run->order[i]));
    return a;
}

/* chain c's job is done: its last nodes and outputs; true when it was the
 * prompt's last */
static bool on_done(comfy_run *run, int c)
{
    svc_job *j = run->chains[c].job;
    announce(run, c, true);
    for (int k = 0; k < run->n_outputs; k++) {
        if (run->outputs[k].chain != c)
            continue;
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "node", run->outputs[k].node);
        cJSON_AddStringToObject(d, "display_node", run->outputs[k].node);
        cJSON *out = cJSON_AddObjectToObject(d, "output");
        cJSON_AddItemToObject(out, "images",
                              comfy_output_images(run->prompt_id, k, &run->outputs[k], j));
        cJSON_AddStringToObject(d, "prompt_id", run->prompt_id);
        tell(run, "executed", d);
    }
    if (++run->n_done < run->n_chains)
        return false;
    tell(run, "execution_success", stamped(run));
    return true;
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

static void send_preview(run_chain *ch, const svc_event *ev)
{
    comfy_run *run = ch->run;
    const char *owner = run->owner[0] ? run->owner : NULL;
    if (!run->previews || ev->a != 0 || !comfy_ws_idle(sid_of(run), owner))
        return;
    const svc_tilemap *m = svc_image_tiles(run->srv, ch->job, 0);
    if (!m || m->final)
        return;
    size_t len = 0;
    uint8_t *frame = preview_frame(m, &len);
    if (frame)
        comfy_ws_send_binary(sid_of(run), owner, frame, len);
    free(frame);
}

/* After the prompt's last message: the chains still queued or running are
 * cancelled (a failed or cancelled chain ends the prompt), every watch
 * ends, the run goes.  A safe point: never inside a job's event. */
static void end_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    comfy_run *run = arg;
    bool cancelled = false;
    for (int c = 0; c < run->n_chains; c++) {
        run_chain *ch = &run->chains[c];
        if (ch->watching && !svc_state_final(ch->job->state))
            cancelled |= svc_job_cancel(run->srv, ch->job);
        if (ch->watching)
            svc_job_unwatch(ch->job, &ch->watch);
        ch->watching = false;
    }
    if (cancelled)
        svc_jobs_update_positions(run->srv);
    comfy_run_free(run);
}

/* The prompt's end: executing null, out of the count, status to everyone. */
static void finish(comfy_run *run)
{
    executing(run, NULL);
    run->over = true;
    n_runs--;
    comfy_ws_send(NULL, NULL, "status", comfy_status_data(NULL));
    struct timeval zero = {0, 0};
    if (event_base_once(run->srv->base, -1, EV_TIMEOUT, end_later, run, &zero) < 0) {
        /* no timer: the loop is ending; stop watching, nothing reads it */
        for (int c = 0; c < run->n_chains; c++)
            if (run->chains[c].watching)
                svc_job_unwatch(run->chains[c].job, &run->chains[c].watch);
        comfy_run_free(run);
    }
}

/* execution_error / execution_interrupted on chain c's KSampler */
static void tell_end(comfy_run *run, const run_chain *ch, const char *type)
{
    cJSON *d = stamped(run);
    cJSON_AddStringToObject(d, "node_id", sampler_id(ch));
    cJSON_AddStringToObject(d, "node_type", sampler_class(ch));
    cJSON_AddItemToObject(d, "executed", executed_list(run));
    if (strcmp(type, "execution_error") == 0) {
        const svc_job *j = ch->job;
        cJSON_AddStringToObject(d, "exception_message",
                                j->error_message ? j->error_message : "the job failed");
        cJSON_AddStringToObject(d, "exception_type", j->error_code ? j->error_code : "error");
        cJSON_AddArrayToObject(d, "traceback");
        cJSON_AddObjectToObject(d, "current_inputs");
        cJSON_AddObjectToObject(d, "current_outputs");
    }
    tell(run, type, d);
}

static void on_event(svc_server *s, svc_job *j, const svc_event *ev, void *arg)
{
    (void)s;
    (void)j;
    run_chain *ch = arg;
    comfy_run *run = ch->run;
    const int c = (int)(ch - run->chains);
    if (run->over)
        return;
    switch (ev->kind) {
    case SVC_EV_STARTED:
        if (!run->started) {
            run->started = true;
            tell(run, "execution_start", stamped(run));
            cJSON *d = stamped(run);
            cJSON_AddArrayToObject(d, "nodes");
            tell(run, "execution_cached", d);
        }
        announce(run, c, false);
        return;
    case SVC_EV_STEP: {
        if (ev->a != 0)
            return;
        announce(run, c, false);
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "value", ev->b);
        cJSON_AddNumberToObject(d, "max", ev->c);
        cJSON_AddStringToObject(d, "prompt_id", run->prompt_id);
        cJSON_AddStringToObject(d, "node", sampler_id(ch));
        tell(run, "progress", d);
        return;
    }
    case SVC_EV_TILES: send_preview(ch, ev); return;
    case SVC_EV_DONE:
        if (!on_done(run, c))
            return;
        break;
    case SVC_EV_FAILED: tell_end(run, ch, "execution_error"); break;
    case SVC_EV_CANCELLED: tell_end(run, ch, "execution_interrupted"); break;
    default: return;
    }
    finish(run);
}

void comfy_run_attach(svc_server *s, comfy_run *run, svc_job *const *jobs, int n)
{
    if (!run)
        return;
    run->srv = s;
    snprintf(run->prompt_id, sizeof run->prompt_id, "%s", jobs[0]->ids);
    snprintf(run->owner, sizeof run->owner, "%s", jobs[0]->owner);
    run->n_chains = n < run->n_chains ? n : run->n_chains;
    for (int c = 0; c < run->n_chains; c++) {
        run_chain *ch = &run->chains[c];
        ch->job = jobs[c];
        ch->watch.on_event = on_event;
        ch->watch.arg = ch;
        svc_job_watch(jobs[c], &ch->watch);
        ch->watching = true;
    }
    n_runs++;
    comfy_ws_send(NULL, NULL, "status", comfy_status_data(NULL));
}
