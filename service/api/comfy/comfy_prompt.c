/*
 * service/api/comfy/comfy_prompt.c - a prompt's file, its jobs, its state
 * and its output images' names.
 *
 * Why a file beside the jobs: a prompt is one native job per sampled chain
 * (comfy_plan.c), and the jobs already carry everything an image needs and
 * survive a restart; what only ComfyUI's views need - the workflow as
 * sent, client_id, the number, the output nodes (which chain each saves,
 * through which ImageScale ops), the order of the nodes, and the jobs'
 * ids - is kept in <data-dir>/comfy/prompts/<prompt_id>.json, written
 * before the jobs are accepted.  The prompt id is the first chain's job
 * id, so a one-chain prompt is exactly its job (GET /v1/jobs/{prompt_id}
 * works); a file without "jobs" (written before prompts had chains) is
 * that one job.
 *
 * A prompt's state is its jobs' together: queued while all are, running
 * from the first start until all are final, then done only if all are
 * done (failed before cancelled; a job that is gone counts as failed).
 *
 * Names: an output image is "<job-id>_<index:05>_.png" (the chain's job
 * and the image's index; the stored PNG as is), or, for an output behind
 * ImageScale(By), "<prompt_id>_<index:05>_<output>_.png" (output: the
 * output node's place in the prompt's list), which /view scales from the
 * stored image (comfy_view.c).  Both are parsed strictly: no name reaches
 * the file system.
 *
 * Files of prompts whose first job is gone (--keep-jobs, --keep-hours, a
 * job deleted) are removed when a listing (/history, /queue, /interrupt)
 * meets them, once the server is ready (unfinished jobs are back in the
 * table then) and unless the prompt is still being accepted.
 */
#include "comfy.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "files.h"
#include "http.h"
#include "ids.h"
#include "jobs.h"
#include "json.h"
#include "log.h"
#include "server.h"

#define PROMPT_FILE_MAX (40u << 20)
#define LIST_MAX 10000

/* ------------------------------------------------------------ in flight */

/* Prompts written and not yet accepted or refused: their jobs are not in
 * the table yet, and their files must stay. */
static uint64_t *inflight;
static int n_inflight, cap_inflight;

void comfy_prompt_inflight(uint64_t id, bool on)
{
    for (int i = 0; i < n_inflight; i++)
        if (inflight[i] == id) {
            if (!on)
                inflight[i] = inflight[--n_inflight];
            return;
        }
    if (!on)
        return;
    if (n_inflight == cap_inflight) {
        int cap = cap_inflight ? 2 * cap_inflight : 16;
        uint64_t *v = realloc(inflight, (size_t)cap * sizeof *v);
        if (!v)
            return; /* not listed: its file could go early; a listing then says so */
        inflight = v;
        cap_inflight = cap;
    }
    inflight[n_inflight++] = id;
}

static bool is_inflight(uint64_t id)
{
    for (int i = 0; i < n_inflight; i++)
        if (inflight[i] == id)
            return true;
    return false;
}

/* ---------------------------------------------------------- the file */

static void prompt_path(svc_server *s, const char *ids, char *buf, size_t size)
{
    char dir[1024];
    comfy_dir(s, "prompts", dir, sizeof dir);
    snprintf(buf, size, "%s/%s.json", dir, ids);
}

static cJSON *scale_json(const comfy_scale *op)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "method", comfy_scale_method_name(op->method));
    cJSON_AddNumberToObject(o, "width", op->width);
    cJSON_AddNumberToObject(o, "height", op->height);
    cJSON_AddNumberToObject(o, "scale_by", op->scale_by);
    cJSON_AddBoolToObject(o, "crop_center", op->crop_center);
    cJSON_AddStringToObject(o, "node", op->node);
    return o;
}

int comfy_prompt_write(svc_server *s, svc_job *const *jobs, int n, const cJSON *prompt,
                       const char *client_id, const comfy_plan *plan, double number)
{
    char dir[1024], path[1200];
    comfy_dir(s, "prompts", dir, sizeof dir);
    if (svc_mkdirs(dir) < 0)
        return -1;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "prompt", cJSON_Duplicate(prompt, true));
    if (client_id)
        cJSON_AddStringToObject(o, "client_id", client_id);
    cJSON *outs = cJSON_AddArrayToObject(o, "outputs");
    cJSON *temps = cJSON_AddArrayToObject(o, "temp");
    cJSON *chain = cJSON_AddArrayToObject(o, "chain");
    cJSON *scales = cJSON_AddArrayToObject(o, "scales");
    for (int i = 0; i < plan->n_outputs; i++) {
        const comfy_output *out = &plan->outputs[i];
        cJSON_AddItemToArray(outs, cJSON_CreateString(out->node));
        cJSON_AddItemToArray(temps, cJSON_CreateBool(out->temp));
        cJSON_AddItemToArray(chain, cJSON_CreateNumber(out->chain));
        cJSON *ops = cJSON_CreateArray();
        for (int k = 0; k < out->n_scales; k++)
            cJSON_AddItemToArray(ops, scale_json(&out->scales[k]));
        cJSON_AddItemToArray(scales, ops);
    }
    cJSON *ids = cJSON_AddArrayToObject(o, "jobs");
    for (int c = 0; c < n; c++)
        cJSON_AddItemToArray(ids, cJSON_CreateString(jobs[c]->ids));
    cJSON *order = cJSON_AddArrayToObject(o, "order");
    for (int i = 0; i < plan->n_order; i++)
        cJSON_AddItemToArray(order, cJSON_CreateString(plan->order[i]));
    cJSON_AddNumberToObject(o, "number", number);
    cJSON_AddNumberToObject(o, "created", jobs[0]->created);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        return -1;
    snprintf(path, sizeof path, "%s/%s.json", dir, jobs[0]->ids);
    int rc = svc_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

cJSON *comfy_prompt_read(svc_server *s, const char *ids)
{
    char path[1200];
    prompt_path(s, ids, path, sizeof path);
    char *data = NULL;
    size_t len = 0;
    if (svc_read_file(path, &data, &len, PROMPT_FILE_MAX) < 0)
        return NULL;
    char err[128];
    cJSON *o = svc_json_parse(data, len, err, sizeof err);
    free(data);
    return o;
}

int comfy_prompt_remove(svc_server *s, const char *ids)
{
    char path[1200];
    prompt_path(s, ids, path, sizeof path);
    return unlink(path);
}

bool comfy_prompt_output(const cJSON *pf, int k, comfy_output *out)
{
    memset(out, 0, sizeof *out);
    const cJSON *node = cJSON_GetArrayItem(cJSON_GetObjectItem(pf, "outputs"), k);
    if (!cJSON_IsString(node))
        return false;
    snprintf(out->node, sizeof out->node, "%s", node->valuestring);
    out->temp = cJSON_IsTrue(cJSON_GetArrayItem(cJSON_GetObjectItem(pf, "temp"), k));
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(pf, "chain"), k);
    out->chain = cJSON_IsNumber(c) && c->valuedouble >= 0 && c->valuedouble < COMFY_MAX_CHAINS
                     ? (int)c->valuedouble : 0;
    const cJSON *op;
    cJSON_ArrayForEach(op, cJSON_GetArrayItem(cJSON_GetObjectItem(pf, "scales"), k)) {
        if (out->n_scales == COMFY_MAX_SCALES)
            return false;
        comfy_scale *sc = &out->scales[out->n_scales++];
        const cJSON *m = cJSON_GetObjectItem(op, "method");
        int method = comfy_scale_method_of(cJSON_IsString(m) ? m->valuestring : NULL);
        if (method < 0)
            return false;
        sc->method = (comfy_scale_method)method;
        sc->width = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(op, "width"));
        sc->height = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(op, "height"));
        sc->scale_by = cJSON_GetNumberValue(cJSON_GetObjectItem(op, "scale_by"));
        sc->crop_center = cJSON_IsTrue(cJSON_GetObjectItem(op, "crop_center"));
        if (sc->width < 0 || sc->height < 0 || !(sc->scale_by >= 0))
            return false;
    }
    return true;
}

/* ------------------------------------------------------- jobs and state */

int comfy_prompt_jobs(svc_server *s, svc_job *first, const cJSON *pf, svc_job **jobs)
{
    const cJSON *ids = cJSON_GetObjectItem(pf, "jobs");
    jobs[0] = first;
    if (!cJSON_IsArray(ids))
        return 1;
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, ids) {
        if (n == COMFY_MAX_CHAINS)
            break;
        uint64_t id;
        svc_job *j = cJSON_IsString(it) && svc_id_parse(it->valuestring, 'j', &id)
                         ? svc_jobs_find(s->jobs, id) : NULL;
        /* another key's job under this prompt cannot happen; check anyway */
        jobs[n] = n == 0 ? first : j && strcmp(j->owner, first->owner) == 0 ? j : NULL;
        n++;
    }
    return n ? n : 1;
}

int comfy_prompt_state(svc_job *const *jobs, int n)
{
    bool all_final = true, started = false, failed = false, cancelled = false;
    for (int i = 0; i < n; i++) {
        if (!jobs[i]) {
            failed = true;
            continue;
        }
        svc_state st = jobs[i]->state;
        all_final &= svc_state_final(st);
        started |= st != SVC_QUEUED;
        failed |= st == SVC_FAILED;
        cancelled |= st == SVC_CANCELLED;
    }
    if (!all_final)
        return started ? SVC_RUNNING : SVC_QUEUED;
    return failed ? SVC_FAILED : cancelled ? SVC_CANCELLED : SVC_DONE;
}

void comfy_prompt_times(svc_job *const *jobs, int n, double *started, double *finished,
                        const char **why)
{
    *started = *finished = 0;
    *why = NULL;
    for (int i = 0; i < n; i++) {
        const svc_job *j = jobs[i];
        if (!j) {
            *why = *why ? *why : "a job of the prompt is gone (--keep-jobs)";
            continue;
        }
        if (j->started > 0 && (*started == 0 || j->started < *started))
            *started = j->started;
        *finished = j->finished > *finished ? j->finished : *finished;
        if (j->state == SVC_FAILED && j->error_message && !*why)
            *why = j->error_message;
    }
}

/* ---------------------------------------------------------- the names */

cJSON *comfy_output_images(const char *prompt_id, int k, const comfy_output *out,
                           const svc_job *j)
{
    cJSON *imgs = cJSON_CreateArray();
    for (int i = 0; j && i < j->n; i++) {
        if (j->images[i].state != SVC_DONE)
            continue;
        char name[64];
        if (out->n_scales)
            snprintf(name, sizeof name, "%s_%05d_%d_.png", prompt_id, i, k);
        else
            snprintf(name, sizeof name, "%s_%05d_.png", j->ids, i);
        cJSON *im = cJSON_CreateObject();
        cJSON_AddStringToObject(im, "filename", name);
        cJSON_AddStringToObject(im, "subfolder", "");
        cJSON_AddStringToObject(im, "type", out->temp ? "temp" : "output");
        cJSON_AddItemToArray(imgs, im);
    }
    return imgs;
}

bool comfy_output_name_parse(const char *name, char ids[20], int *index, int *output)
{
    /* "j_<16 hex>_<5 digits>_.png" or "j_<16 hex>_<5 digits>_<digit>_.png" */
    const size_t len = strlen(name);
    if ((len != 29 && len != 31) || name[18] != '_' || strcmp(name + len - 5, "_.png") != 0)
        return false;
    memcpy(ids, name, 18);
    ids[18] = '\0';
    uint64_t id;
    if (!svc_id_parse(ids, 'j', &id))
        return false;
    int v = 0;
    for (int i = 19; i < 24; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        v = v * 10 + (name[i] - '0');
    }
    *index = v;
    *output = -1;
    if (len == 31) {
        if (name[24] != '_' || name[25] < '0' || name[25] > '9' ||
            name[25] - '0' >= COMFY_MAX_OUT_NODES)
            return false;
        *output = name[25] - '0';
    }
    return true;
}

/* ------------------------------------------------------------ listing */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_created(const void *a, const void *b)
{
    const svc_job *x = *(svc_job *const *)a, *y = *(svc_job *const *)b;
    if (x->created != y->created)
        return x->created < y->created ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void comfy_prompts_each(svc_req *r, comfy_prompt_fn fn, void *u)
{
    svc_server *s = r->srv;
    char dir[1024];
    comfy_dir(s, "prompts", dir, sizeof dir);
    DIR *d = opendir(dir);
    if (!d)
        return;
    int n = 0, m = 0, cap = 64;
    char **names = malloc((size_t)cap * sizeof *names);
    struct dirent *e;
    while (names && (e = readdir(d)) != NULL && n < LIST_MAX) {
        size_t len = strlen(e->d_name);
        if (len != 23 || strcmp(e->d_name + 18, ".json") != 0)
            continue;
        if (n == cap) {
            char **nv = realloc(names, (size_t)cap * 2 * sizeof *names);
            if (!nv)
                break;
            names = nv;
            cap *= 2;
        }
        if ((names[n] = strdup(e->d_name)) != NULL)
            n++;
    }
    closedir(d);
    if (!names)
        return;
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    svc_job **jobs = n ? calloc((size_t)n, sizeof *jobs) : NULL;
    for (int i = 0; jobs && i < n; i++) {
        char ids[20];
        memcpy(ids, names[i], 18);
        ids[18] = '\0';
        uint64_t id;
        if (!svc_id_parse(ids, 'j', &id))
            continue;
        svc_job *j = svc_jobs_find(s->jobs, id);
        if (j) {
            if (svc_key_sees(r->key, j->owner))
                jobs[m++] = j; /* else another key's: not listed */
            continue;
        }
        /* its job is gone (collected, deleted) or not back yet */
        if (s->phase != SVC_PHASE_LOADING && !is_inflight(id) && comfy_prompt_remove(s, ids) == 0)
            SVC_INFO("comfy: prompt %s removed: its job is gone", ids);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (!jobs)
        return;
    qsort(jobs, (size_t)m, sizeof *jobs, cmp_created);
    for (int i = 0; i < m; i++) {
        cJSON *pf = comfy_prompt_read(s, jobs[i]->ids);
        if (!pf)
            continue;
        svc_job *all[COMFY_MAX_CHAINS];
        int nj = comfy_prompt_jobs(s, jobs[i], pf, all);
        bool go_on = fn(r, all, nj, pf, u);
        cJSON_Delete(pf);
        if (!go_on)
            break;
    }
    free(jobs);
}
