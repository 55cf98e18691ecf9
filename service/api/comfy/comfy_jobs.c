/*
 * service/api/comfy/comfy_jobs.c - ComfyUI's jobs API, which its web UI's
 * queue and history panels read (docs/compat-comfyui.md "The web UI"):
 *
 *   GET /jobs?status=S[,S...]&limit=N&offset=K&sort_order=desc|asc
 *       {"jobs": [job...], "pagination": {offset, limit, total, has_more}}
 *   GET /jobs/{prompt_id}
 *       one job with its "outputs" ({node: {images: [...]}}) and "prompt"
 *   POST /jobs/{prompt_id}/cancel, POST /jobs/cancel {"job_ids": [...]}
 *       cancel prompts (all their chains' jobs), as /queue delete and
 *       /interrupt do; the job (or {"cancelled": [ids]}) after it
 *
 * A job here is a prompt (its chains' native jobs together, as /history
 * counts it): status pending, in_progress, completed, failed or cancelled
 * from comfy_prompt_state; times in ms since the epoch; preview_output its
 * first image.  It reads what /history reads (comfy_prompts_each, the
 * prompt files, the job table), so a key sees only its own prompts.
 */
#include "comfy.h"
#include "comfy_ui.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "jobs.h"
#include "server.h"

#define JOBS_LIMIT_MAX 10000

static const char *const k_status[] = {"pending", "in_progress", "completed", "failed",
                                       "cancelled"};

/* svc_state -> the jobs API's status (index into k_status). */
static int status_of(int st)
{
    switch (st) {
    case SVC_QUEUED: return 0;
    case SVC_RUNNING: return 1;
    case SVC_DONE: return 2;
    case SVC_FAILED: return 3;
    default: return 4;
    }
}

static double ms(double unix_s) { return (double)(long long)(unix_s * 1000); }

/* The job object of a prompt; detail: with outputs and the prompt. */
static cJSON *job_json(svc_job **jobs, int n, cJSON *pf, bool detail)
{
    const char *pid = jobs[0]->ids;
    const int st = comfy_prompt_state(jobs, n);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", pid);
    cJSON_AddStringToObject(o, "status", k_status[status_of(st)]);
    const cJSON *num = cJSON_GetObjectItem(pf, "number");
    cJSON_AddNumberToObject(o, "priority", cJSON_IsNumber(num) ? num->valuedouble : 0);
    cJSON_AddNumberToObject(o, "create_time", ms(jobs[0]->created));
    double started, finished;
    const char *why;
    comfy_prompt_times(jobs, n, &started, &finished, &why);
    const bool final = svc_state_final(st);
    if (started > 0)
        cJSON_AddNumberToObject(o, "execution_start_time", ms(started));
    else
        cJSON_AddNullToObject(o, "execution_start_time");
    if (final && finished > 0)
        cJSON_AddNumberToObject(o, "execution_end_time", ms(finished));
    else
        cJSON_AddNullToObject(o, "execution_end_time");
    /* the outputs: every output node's images */
    cJSON *outputs = cJSON_CreateObject();
    cJSON *first = NULL;
    int count = 0;
    comfy_output out;
    for (int k = 0; comfy_prompt_output(pf, k, &out); k++) {
        cJSON *images = comfy_output_images(pid, k, &out, out.chain < n ? jobs[out.chain] : NULL);
        count += cJSON_GetArraySize(images);
        if (!first && cJSON_GetArraySize(images) > 0) {
            first = cJSON_Duplicate(cJSON_GetArrayItem(images, 0), true);
            cJSON_AddStringToObject(first, "nodeId", out.node);
            cJSON_AddStringToObject(first, "mediaType", "images");
        }
        cJSON *node = cJSON_AddObjectToObject(outputs, out.node);
        cJSON_AddItemToObject(node, "images", images);
    }
    if (first)
        cJSON_AddItemToObject(o, "preview_output", first);
    else
        cJSON_AddNullToObject(o, "preview_output");
    cJSON_AddNumberToObject(o, "outputs_count", count);
    cJSON_AddNumberToObject(o, "previewable_outputs_count", count);
    if (st == SVC_FAILED) {
        cJSON *e = cJSON_AddObjectToObject(o, "execution_error");
        cJSON_AddStringToObject(e, "prompt_id", pid);
        cJSON_AddStringToObject(e, "node_id", "");
        cJSON_AddStringToObject(e, "node_type", "");
        cJSON_AddStringToObject(e, "exception_message", why ? why : "the prompt failed");
        cJSON_AddStringToObject(e, "exception_type", "RuntimeError");
        cJSON_AddArrayToObject(e, "traceback");
    } else {
        cJSON_AddNullToObject(o, "execution_error");
    }
    cJSON_AddNullToObject(o, "workflow_id");
    if (detail) {
        cJSON_AddItemToObject(o, "outputs", outputs);
        cJSON_AddNumberToObject(o, "update_time",
                                ms(finished > started ? finished
                                   : started > 0      ? started
                                                      : jobs[0]->created));
        cJSON *wf = cJSON_AddObjectToObject(o, "workflow");
        cJSON *prompt = cJSON_DetachItemFromObject(pf, "prompt");
        cJSON_AddItemToObject(wf, "prompt", prompt ? prompt : cJSON_CreateObject());
        cJSON_AddObjectToObject(wf, "extra_data");
    } else {
        cJSON_Delete(outputs);
    }
    return o;
}

/* ---------------------------------------------------------------- list */

typedef struct list_ctx {
    unsigned wanted;  /* bit i: k_status[i] */
    cJSON *all;       /* oldest first */
    const char *id;   /* one job: its prompt id */
    const cJSON *ids; /* POST /jobs/cancel: these prompt ids */
    bool cancel;      /* cancel what matches */
    cJSON *one;
    cJSON *cancelled; /* the ids cancelled */
} list_ctx;

static bool listed(const cJSON *ids, const char *id)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, ids)
    {
        if (cJSON_IsString(it) && strcmp(it->valuestring, id) == 0)
            return true;
    }
    return false;
}

static bool add_job(svc_req *r, svc_job **jobs, int n, cJSON *pf, void *u)
{
    list_ctx *c = u;
    if (c->ids) {
        if (listed(c->ids, jobs[0]->ids)) {
            for (int i = 0; i < n; i++)
                if (jobs[i])
                    svc_job_cancel(r->srv, jobs[i]);
            cJSON_AddItemToArray(c->cancelled, cJSON_CreateString(jobs[0]->ids));
        }
        return true;
    }
    if (c->id) {
        if (strcmp(jobs[0]->ids, c->id) != 0)
            return true;
        for (int i = 0; c->cancel && i < n; i++)
            if (jobs[i])
                svc_job_cancel(r->srv, jobs[i]);
        c->one = job_json(jobs, n, pf, true);
        return false;
    }
    if (c->wanted & (1u << status_of(comfy_prompt_state(jobs, n))))
        cJSON_AddItemToArray(c->all, job_json(jobs, n, pf, false));
    return cJSON_GetArraySize(c->all) < 100000;
}

static bool parse_count(const char *s, long max, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 0 || v > max)
        return false;
    *out = v;
    return true;
}

static void bad(svc_req *r, const char *msg)
{
    svc_reply_errorf(r, r->dialect, 400, "invalid_request", NULL, "%s", msg);
}

/* GET /jobs, GET /jobs/{id} */
void svc_comfy_jobs(svc_req *r, const char *rest)
{
    list_ctx c = {.wanted = 0x1f};
    if (rest[0] == '/') {
        c.id = rest + 1;
        comfy_prompts_each(r, add_job, &c);
        if (!c.one) {
            svc_reply_errorf(r, r->dialect, 404, "not_found", NULL, "no such job: %.64s", c.id);
            return;
        }
        svc_reply_json(r, 200, c.one);
        return;
    }
    char status[128], limit_s[16], offset_s[16], order[8];
    if (!comfy_query_get(r->query, "status", status, sizeof status) ||
        !comfy_query_get(r->query, "limit", limit_s, sizeof limit_s) ||
        !comfy_query_get(r->query, "offset", offset_s, sizeof offset_s) ||
        !comfy_query_get(r->query, "sort_order", order, sizeof order)) {
        bad(r, "a query value is too long");
        return;
    }
    if (status[0]) {
        c.wanted = 0;
        for (char *tok = strtok(status, ","); tok; tok = strtok(NULL, ",")) {
            int k = 0;
            while (k < 5 && strcmp(tok, k_status[k]) != 0)
                k++;
            if (k == 5) {
                bad(r, "status is a comma list of pending, in_progress, completed, failed, "
                       "cancelled");
                return;
            }
            c.wanted |= 1u << k;
        }
    }
    long limit = JOBS_LIMIT_MAX, offset = 0;
    if ((limit_s[0] && !parse_count(limit_s, JOBS_LIMIT_MAX, &limit)) ||
        (offset_s[0] && !parse_count(offset_s, 1L << 30, &offset))) {
        bad(r, "limit is 0..10000 and offset a count from 0");
        return;
    }
    const bool asc = strcmp(order, "asc") == 0;
    if (order[0] && !asc && strcmp(order, "desc") != 0) {
        bad(r, "sort_order is asc or desc");
        return;
    }
    c.all = cJSON_CreateArray();
    comfy_prompts_each(r, add_job, &c);
    const long total = cJSON_GetArraySize(c.all);
    cJSON **v = calloc((size_t)total + 1, sizeof *v);
    long k = 0;
    for (cJSON *it = c.all->child; v && it; it = it->next)
        v[k++] = it;
    cJSON *page = cJSON_CreateArray();
    for (long i = offset; v && i < total && i < offset + limit; i++) {
        cJSON *it = v[asc ? i : total - 1 - i]; /* newest first unless asc */
        cJSON_AddItemToArray(page, cJSON_DetachItemViaPointer(c.all, it));
    }
    free(v);
    cJSON_Delete(c.all);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "jobs", page);
    cJSON *p = cJSON_AddObjectToObject(o, "pagination");
    cJSON_AddNumberToObject(p, "offset", (double)offset);
    cJSON_AddNumberToObject(p, "limit", (double)limit);
    cJSON_AddNumberToObject(p, "total", (double)total);
    cJSON_AddBoolToObject(p, "has_more", offset + limit < total);
    svc_reply_json(r, 200, o);
}

/* POST /jobs/{id}/cancel, POST /jobs/cancel {"job_ids": [...]} */
void svc_comfy_jobs_cancel(svc_req *r, const char *rest)
{
    list_ctx c = {.wanted = 0x1f, .cancel = true};
    char id[64];
    if (strcmp(rest, "/cancel") != 0) {
        const char *end = strstr(rest + 1, "/cancel");
        size_t len = end ? (size_t)(end - rest - 1) : 0;
        if (!end || len == 0 || len >= sizeof id) {
            svc_reply_errorf(r, r->dialect, 404, "not_found", NULL, "no such path: %.200s",
                             r->path);
            return;
        }
        memcpy(id, rest + 1, len);
        id[len] = '\0';
        c.id = id;
        comfy_prompts_each(r, add_job, &c);
        if (!c.one) {
            svc_reply_errorf(r, r->dialect, 404, "not_found", NULL, "no such job: %.64s", id);
            return;
        }
        svc_reply_json(r, 200, c.one);
        return;
    }
    cJSON *body = svc_req_json_object(r);
    if (!body)
        return;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(body, "job_ids");
    const cJSON *it;
    bool ok = cJSON_IsArray(ids);
    cJSON_ArrayForEach(it, ids) ok = ok && cJSON_IsString(it);
    if (!ok) {
        cJSON_Delete(body);
        bad(r, "the body is {\"job_ids\": [prompt ids]}");
        return;
    }
    c.ids = ids;
    c.cancelled = cJSON_CreateArray();
    comfy_prompts_each(r, add_job, &c);
    cJSON_Delete(body);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "cancelled", c.cancelled);
    svc_reply_json(r, 200, o);
}
