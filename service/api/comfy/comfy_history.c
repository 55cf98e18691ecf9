/*
 * service/api/comfy/comfy_history.c - ComfyUI's views of the prompts:
 * GET/POST /history, GET/POST /queue, POST /interrupt.
 *
 * Why they read the job table: a prompt is its jobs (one per sampled
 * chain) plus its file (comfy_prompt.c), so these routes walk the prompt
 * files a key sees and answer from the jobs' states and images; nothing of
 * ComfyUI's queue is kept apart from the native one, and everything
 * survives a restart as the jobs do.  A prompt counts as one entry however
 * many chains it has: running from its first job's start until all are
 * final, and /queue delete, /queue clear and /interrupt cancel all its
 * jobs together.
 */
#include "comfy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "http.h"
#include "ids.h"
#include "jobs.h"
#include "json.h"
#include "server.h"

#define LIST_MAX 10000

/* A prompt's job (prompt_id = "j_...") when the asking key sees it (comfy.h). */
svc_job *comfy_find_job(svc_req *r, const char *ids)
{
    uint64_t id;
    if (!svc_id_parse(ids, 'j', &id))
        return NULL;
    svc_job *j = svc_jobs_find(r->srv->jobs, id);
    return j && svc_key_sees(r->key, j->owner) ? j : NULL;
}

/* [number, prompt_id, prompt, extra_data, outputs_to_execute] */
static cJSON *queue_item(const char *prompt_id, cJSON *pf)
{
    cJSON *a = cJSON_CreateArray();
    const cJSON *num = cJSON_GetObjectItem(pf, "number");
    cJSON_AddItemToArray(a, cJSON_CreateNumber(cJSON_IsNumber(num) ? num->valuedouble : 0));
    cJSON_AddItemToArray(a, cJSON_CreateString(prompt_id));
    cJSON *prompt = cJSON_DetachItemFromObject(pf, "prompt");
    cJSON_AddItemToArray(a, prompt ? prompt : cJSON_CreateObject());
    cJSON *extra = cJSON_CreateObject();
    const cJSON *cid = cJSON_GetObjectItem(pf, "client_id");
    if (cJSON_IsString(cid))
        cJSON_AddStringToObject(extra, "client_id", cid->valuestring);
    cJSON_AddItemToArray(a, extra);
    cJSON_AddItemToArray(a, cJSON_Duplicate(cJSON_GetObjectItem(pf, "outputs"), true));
    return a;
}

static cJSON *history_entry(svc_job **jobs, int n, cJSON *pf)
{
    const char *pid = jobs[0]->ids;
    cJSON *e = cJSON_CreateObject();
    cJSON *outputs = cJSON_CreateObject();
    comfy_output out;
    for (int k = 0; comfy_prompt_output(pf, k, &out); k++) {
        cJSON *node = cJSON_AddObjectToObject(outputs, out.node);
        cJSON_AddItemToObject(node, "images", comfy_output_images(
                                  pid, k, &out, out.chain < n ? jobs[out.chain] : NULL));
    }
    const int st = comfy_prompt_state(jobs, n);
    const bool ok = st == SVC_DONE;
    /* the prompt's times: its first start, its last end */
    double started, finished;
    const char *why;
    comfy_prompt_times(jobs, n, &started, &finished, &why);
    cJSON *status = cJSON_CreateObject();
    cJSON_AddStringToObject(status, "status_str", ok ? "success" : "error");
    cJSON_AddBoolToObject(status, "completed", ok);
    cJSON *msgs = cJSON_AddArrayToObject(status, "messages");
    const char *last = ok ? "execution_success"
                       : st == SVC_CANCELLED ? "execution_interrupted" : "execution_error";
    const char *const kinds[] = {"execution_start", last};
    const double times[] = {started > 0 ? started : jobs[0]->created,
                            finished > 0 ? finished : jobs[0]->created};
    for (int i = 0; i < 2; i++) {
        cJSON *m = cJSON_CreateArray();
        cJSON_AddItemToArray(m, cJSON_CreateString(kinds[i]));
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "prompt_id", pid);
        cJSON_AddNumberToObject(d, "timestamp", (double)(long long)(times[i] * 1000));
        if (i == 1 && !ok && why)
            cJSON_AddStringToObject(d, "exception_message", why);
        cJSON_AddItemToArray(m, d);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON_AddItemToObject(e, "prompt", queue_item(pid, pf));
    cJSON_AddItemToObject(e, "outputs", outputs);
    cJSON_AddItemToObject(e, "status", status);
    cJSON *meta = cJSON_AddObjectToObject(e, "meta");
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetArrayItem(cJSON_GetObjectItem(e, "prompt"), 4)) {
        if (!cJSON_IsString(o))
            continue;
        cJSON *m = cJSON_AddObjectToObject(meta, o->valuestring);
        cJSON_AddStringToObject(m, "node_id", o->valuestring);
        cJSON_AddStringToObject(m, "display_node", o->valuestring);
        cJSON_AddNullToObject(m, "parent_node");
        cJSON_AddStringToObject(m, "real_node_id", o->valuestring);
    }
    return e;
}

typedef struct hist_ctx {
    cJSON *out;
    long max;
    long n;
} hist_ctx;

static bool add_history(svc_req *r, svc_job **jobs, int n, cJSON *pf, void *u)
{
    (void)r;
    hist_ctx *h = u;
    if (!svc_state_final(comfy_prompt_state(jobs, n)))
        return true;
    cJSON_AddItemToObject(h->out, jobs[0]->ids, history_entry(jobs, n, pf));
    return ++h->n < h->max;
}

static long query_long(const char *query, const char *name, long def)
{
    if (!query)
        return def;
    size_t n = strlen(name);
    for (const char *p = query; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == '=') {
            char *end = NULL;
            long v = strtol(p + n + 1, &end, 10);
            return end && (*end == '\0' || *end == '&') && v > 0 ? v : def;
        }
    }
    return def;
}

/* ComfyUI's {"clear": bool} / {"delete": [prompt_id...]} body of POST /history
 * and POST /queue: the body (owned) or NULL after a 400 was sent. */
static cJSON *clear_or_delete(svc_req *r, const cJSON **del, bool *clear)
{
    cJSON *body = svc_req_json_object(r);
    if (!body)
        return NULL;
    *del = cJSON_GetObjectItemCaseSensitive(body, "delete");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(body, "clear");
    if ((*del && !cJSON_IsArray(*del)) || (c && !cJSON_IsBool(c))) {
        cJSON_Delete(body);
        svc_reply_json(r, 400, comfy_error_body("invalid_request", "delete must be an array of "
                                                "prompt ids, clear a boolean", ""));
        return NULL;
    }
    *clear = cJSON_IsTrue(c);
    return body;
}

static bool listed(const cJSON *ids, const char *id)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, ids)
        if (cJSON_IsString(it) && strcmp(it->valuestring, id) == 0)
            return true;
    return false;
}

typedef struct forget_ctx {
    const cJSON *delete; /* NULL: clear */
} forget_ctx;

/* POST /history: drop a finished prompt's file (its jobs and images stay). */
static bool forget(svc_req *r, svc_job **jobs, int n, cJSON *pf, void *u)
{
    (void)pf;
    forget_ctx *f = u;
    if (svc_state_final(comfy_prompt_state(jobs, n)) &&
        (!f->delete || listed(f->delete, jobs[0]->ids)))
        comfy_prompt_remove(r->srv, jobs[0]->ids);
    return true;
}

/* GET /history[?max_items=N], GET /history/{prompt_id}; POST /history
 * {"clear": true} | {"delete": [prompt_id...]}: the key's finished prompts
 * leave the history (their jobs and images stay, as ComfyUI keeps outputs) */
void svc_comfy_history(svc_req *r, const char *rest)
{
    if (strcmp(r->method, "POST") == 0) {
        const cJSON *del = NULL;
        bool clear = false;
        cJSON *body = clear_or_delete(r, &del, &clear);
        if (!body)
            return;
        forget_ctx f = {.delete = del};
        if (clear || del)
            comfy_prompts_each(r, forget, &f);
        cJSON_Delete(body);
        svc_reply_json(r, 200, cJSON_CreateObject());
        return;
    }
    cJSON *out = cJSON_CreateObject();
    if (rest[0] == '/') {
        svc_job *j = comfy_find_job(r, rest + 1);
        cJSON *pf = j ? comfy_prompt_read(r->srv, j->ids) : NULL;
        svc_job *jobs[COMFY_MAX_CHAINS];
        int n = pf ? comfy_prompt_jobs(r->srv, j, pf, jobs) : 0;
        if (pf && svc_state_final(comfy_prompt_state(jobs, n)))
            cJSON_AddItemToObject(out, j->ids, history_entry(jobs, n, pf));
        cJSON_Delete(pf);
        svc_reply_json(r, 200, out);
        return;
    }
    hist_ctx h = {.out = out, .max = query_long(r->query, "max_items", LIST_MAX)};
    comfy_prompts_each(r, add_history, &h);
    svc_reply_json(r, 200, out);
}

/* --------------------------------------------------- /queue, /interrupt */

typedef struct queue_ctx {
    cJSON *running, *pending;
    /* POST: cancel these (NULL: all waiting, with clear) */
    const cJSON *delete;
    bool clear, interrupt;
    const char *only;
    int cancelled;
} queue_ctx;

static void cancel_prompt(svc_server *s, svc_job **jobs, int n, queue_ctx *q)
{
    for (int i = 0; i < n; i++)
        if (jobs[i])
            q->cancelled += svc_job_cancel(s, jobs[i]);
}

static bool queue_walk(svc_req *r, svc_job **jobs, int n, cJSON *pf, void *u)
{
    queue_ctx *q = u;
    const int st = comfy_prompt_state(jobs, n);
    const char *pid = jobs[0]->ids;
    if (svc_state_final(st))
        return true;
    if (q->clear && st == SVC_QUEUED)
        cancel_prompt(r->srv, jobs, n, q);
    else if (q->interrupt && st == SVC_RUNNING && (!q->only || strcmp(q->only, pid) == 0))
        cancel_prompt(r->srv, jobs, n, q);
    else if (q->delete && listed(q->delete, pid))
        cancel_prompt(r->srv, jobs, n, q);
    else if (q->running)
        cJSON_AddItemToArray(st == SVC_RUNNING ? q->running : q->pending, queue_item(pid, pf));
    return true;
}

/* GET /queue; POST /queue {"clear": true} | {"delete": [prompt_id...]} */
void svc_comfy_queue(svc_req *r, const char *rest)
{
    (void)rest;
    queue_ctx q = {0};
    if (strcmp(r->method, "POST") == 0) {
        cJSON *body = clear_or_delete(r, &q.delete, &q.clear);
        if (!body)
            return;
        if (q.clear || q.delete)
            comfy_prompts_each(r, queue_walk, &q);
        if (q.cancelled)
            svc_jobs_update_positions(r->srv);
        cJSON_Delete(body);
        svc_reply_json(r, 200, cJSON_CreateObject());
        return;
    }
    cJSON *o = cJSON_CreateObject();
    q.running = cJSON_AddArrayToObject(o, "queue_running");
    q.pending = cJSON_AddArrayToObject(o, "queue_pending");
    comfy_prompts_each(r, queue_walk, &q);
    svc_reply_json(r, 200, o);
}

/* POST /interrupt [{"prompt_id": id}]: cancel the running prompt(s) the key sees. */
void svc_comfy_interrupt(svc_req *r, const char *rest)
{
    (void)rest;
    size_t len = 0;
    svc_req_body(r, &len);
    cJSON *body = len ? svc_req_json_object(r) : NULL;
    if (len && !body)
        return;
    queue_ctx q = {.interrupt = true};
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(body, "prompt_id");
    if (cJSON_IsString(pid))
        q.only = pid->valuestring;
    comfy_prompts_each(r, queue_walk, &q);
    if (q.cancelled)
        svc_jobs_update_positions(r->srv);
    cJSON_Delete(body);
    svc_reply_json(r, 200, cJSON_CreateObject());
}
