/*
 * service/api/comfy/comfy_routes.c - ComfyUI's HTTP routes on Tessera
 * (docs/compat-comfyui.md): POST /prompt, /history, /view, /queue,
 * /interrupt, /object_info, /system_stats, /embeddings, /extensions,
 * /models, POST /upload/image.
 *
 * Why this shape: a prompt is compiled (comfy_graph.c) into one native job
 * object, parsed by the same svc_gate_parse as POST /v1/jobs, and goes
 * through the one submit gate, journal and queue; its prompt_id IS the
 * job's id, so /history, /view and /queue read the job table and the
 * store, and everything survives a restart as native jobs do.  What only
 * ComfyUI needs (the workflow as sent, client_id, the output node ids) is
 * kept beside it in <data-dir>/comfy/prompts/<job-id>.json, written before
 * the job is accepted.  A prompt file whose job is gone (--keep-jobs) is
 * skipped, not yet removed (docs/compat-comfyui.md, "Not yet").
 *
 * Files: /view (comfy_view.c) parses "<job-id>_<index:05>_.png" strictly,
 * so no name reaches the file system; uploads go to <data-dir>/comfy/input[/<subfolder>] under names of
 * [A-Za-z0-9._-] only, checked to be a PNG or JPEG.
 *
 * Keys: every path here takes the key as /v1/ does (router.c), and a key
 * sees only its own prompts (a foreign prompt_id answers as unknown).
 */
#include "comfy.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "auth.h"
#include "clock.h"
#include "codec.h"
#include "files.h"
#include "gate.h"
#include "http.h"
#include "ids.h"
#include "images.h"
#include "json.h"
#include "log.h"
#include "multipart.h"
#include "server.h"
#include "store.h"

#define PROMPT_FILE_MAX (40u << 20)
#define INPUT_MAX (32u << 20)
#define LIST_MAX 10000

bool svc_comfy_is_path(const char *path)
{
    static const char *const roots[] = {"/prompt", "/history", "/view", "/queue", "/interrupt",
                                        "/object_info", "/system_stats", "/embeddings",
                                        "/extensions", "/models", "/upload", "/ws"};
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
        size_t n = strlen(roots[i]);
        if (strncmp(path, roots[i], n) == 0 && (path[n] == '\0' || path[n] == '/'))
            return true;
    }
    return false;
}

static void reply_comfy_error(svc_req *r, int status, const char *type, const char *message,
                              const char *details)
{
    svc_reply_json(r, status, comfy_error_body(type, message, details));
}

/* ----------------------------------------------------------- the files */

void comfy_dir(svc_server *s, const char *sub, char *buf, size_t size)
{
    snprintf(buf, size, "%s/comfy/%s", s->cfg.data_dir, sub);
}

/* An input image's name or subfolder: [A-Za-z0-9._-], 1..128 bytes, not
 * starting with '.'. */
bool comfy_safe_name(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > 128 || n[0] == '.')
        return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            return false;
    return true;
}

/* The names in a folder (sorted; NULL-terminated; free with free_names). */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char **list_dir(const char *dir, const char *suffix, int *count)
{
    DIR *d = opendir(dir);
    int n = 0, cap = 16;
    char **v = calloc((size_t)cap + 1, sizeof *v);
    if (!v) {
        if (d)
            closedir(d);
        return NULL;
    }
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && n < LIST_MAX) {
        size_t len = strlen(e->d_name), sl = suffix ? strlen(suffix) : 0;
        if (!comfy_safe_name(e->d_name) || (suffix && (len <= sl || strcmp(e->d_name + len - sl, suffix))))
            continue;
        if (n == cap) {
            char **nv = realloc(v, ((size_t)cap * 2 + 1) * sizeof *v);
            if (!nv)
                break;
            v = nv;
            cap *= 2;
        }
        v[n] = strdup(e->d_name);
        if (v[n])
            n++;
    }
    v[n] = NULL;
    if (d)
        closedir(d);
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    *count = n;
    return v;
}

static void free_names(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

/* The uploaded images: the folder's files, and "sub/name" for the files of
 * its subfolders (one level, as /upload/image writes them). */
static char **list_inputs(const char *dir)
{
    int n = 0, total = 0;
    char **top = list_dir(dir, NULL, &n);
    char **out = calloc(LIST_MAX + 1, sizeof *out);
    for (int i = 0; top && out && i < n && total < LIST_MAX; i++) {
        char path[1200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, top[i]);
        if (stat(path, &st) != 0)
            continue;
        if (S_ISREG(st.st_mode)) {
            out[total] = strdup(top[i]);
            total += out[total] != NULL;
            continue;
        }
        if (!S_ISDIR(st.st_mode))
            continue;
        int m = 0;
        char **sub = list_dir(path, NULL, &m);
        for (int k = 0; sub && k < m && total < LIST_MAX; k++) {
            size_t len = strlen(top[i]) + strlen(sub[k]) + 2;
            out[total] = malloc(len);
            if (out[total]) {
                snprintf(out[total], len, "%s/%s", top[i], sub[k]);
                total++;
            }
        }
        free_names(sub);
    }
    free_names(top);
    return out;
}

typedef struct route_ctx {
    svc_server *s;
    char **images;
    char **loras;
    const char *checkpoints[2];
} route_ctx;

/* "name" or "subfolder/name" of an uploaded image, both parts safe. */
static bool input_name_ok(const char *name)
{
    char sub[256];
    const char *slash = strchr(name, '/');
    if (!slash)
        return comfy_safe_name(name);
    size_t n = (size_t)(slash - name);
    if (n >= sizeof sub)
        return false;
    memcpy(sub, name, n);
    sub[n] = '\0';
    return comfy_safe_name(sub) && comfy_safe_name(slash + 1);
}

/* The bytes of an uploaded input image by LoadImage's name (*data
 * malloc'd), or -1 with why in err: a name that is not an upload's, or a
 * file that cannot be read. */
static int read_input(const route_ctx *c, const char *name, char **data, size_t *len, char *err,
                      size_t err_size)
{
    char dir[1024], path[1200];
    if (!input_name_ok(name)) {
        snprintf(err, err_size, "'%.100s' is not an uploaded image's name", name);
        return -1;
    }
    comfy_dir(c->s, "input", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (svc_read_file(path, data, len, INPUT_MAX) < 0) {
        snprintf(err, err_size, "'%.100s' cannot be read (upload it with POST /upload/image)",
                 name);
        return -1;
    }
    return 0;
}

static char *load_image(void *user, const char *name, char *err, size_t err_size)
{
    char *data = NULL;
    size_t len = 0;
    if (read_input(user, name, &data, &len, err, err_size) < 0)
        return NULL;
    char *b64 = svc_base64_encode((const uint8_t *)data, len);
    free(data);
    if (!b64)
        snprintf(err, err_size, "out of memory");
    return b64;
}

/* LoadImage's MASK, as ComfyUI makes it: 1 - the alpha channel (an image
 * without alpha masks nothing), as the white-is-repaint gray PNG the native
 * `mask` field takes. */
static char *load_mask(void *user, const char *name, char *err, size_t err_size)
{
    char *data = NULL;
    size_t len = 0;
    if (read_input(user, name, &data, &len, err, err_size) < 0)
        return NULL;
    uint8_t *px = NULL;
    int w = 0, h = 0;
    int rc = svc_image_decode((const uint8_t *)data, len, 4, &px, &w, &h, err, err_size);
    free(data);
    if (rc < 0)
        return NULL;
    size_t n = (size_t)w * (size_t)h;
    uint8_t *rgb = malloc(n * 3);
    if (!rgb) {
        free(px);
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = (uint8_t)(255 - px[4 * i + 3]);
    free(px);
    uint8_t *png = NULL;
    size_t plen = 0;
    rc = svc_png_encode(rgb, w, h, NULL, &png, &plen, err, err_size);
    free(rgb);
    if (rc < 0)
        return NULL;
    char *b64 = svc_base64_encode(png, plen);
    free(png);
    if (!b64)
        snprintf(err, err_size, "out of memory");
    return b64;
}

/* The context the compiler and /object_info see: the model, the LoRAs of
 * --lora-dir, the uploaded images. */
static void ctx_open(svc_server *s, route_ctx *rc, comfy_context *ctx)
{
    char dir[1024];
    memset(rc, 0, sizeof *rc);
    rc->s = s;
    rc->checkpoints[0] = s->model_name[0] ? s->model_name : NULL;
    comfy_dir(s, "input", dir, sizeof dir);
    rc->images = list_inputs(dir);
    char **names = NULL;
    int nl = 0;
    if (s->cfg.lora_dir && tsr_lora_list(s->cfg.lora_dir, &names, &nl) == 0) {
        rc->loras = calloc((size_t)nl + 1, sizeof *rc->loras);
        for (int i = 0; rc->loras && i < nl; i++) {
            size_t len = strlen(names[i]) + 13;
            rc->loras[i] = malloc(len);
            if (rc->loras[i])
                snprintf(rc->loras[i], len, "%s.safetensors", names[i]);
        }
        tsr_lora_list_free(names, nl);
    }
    memset(ctx, 0, sizeof *ctx);
    ctx->checkpoints = rc->checkpoints;
    ctx->loras = (const char *const *)rc->loras;
    ctx->images = (const char *const *)rc->images;
    ctx->load_image = load_image;
    ctx->load_mask = load_mask;
    ctx->user = rc;
}

static void ctx_close(route_ctx *rc)
{
    free_names(rc->images);
    free_names(rc->loras);
}

/* <data-dir>/comfy/prompts/<job-id>.json: what ComfyUI's views need. */
static cJSON *read_prompt_file(svc_server *s, const char *ids)
{
    char dir[1024], path[1200];
    comfy_dir(s, "prompts", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s.json", dir, ids);
    char *data = NULL;
    size_t len = 0;
    if (svc_read_file(path, &data, &len, PROMPT_FILE_MAX) < 0)
        return NULL;
    char err[128];
    cJSON *o = svc_json_parse(data, len, err, sizeof err);
    free(data);
    return o;
}

/* -------------------------------------------------------------- /prompt */

typedef struct submit_ctx {
    svc_req *r;
    svc_job *job;
    double number;
    comfy_run *run; /* the websocket's report of it (comfy_run.c) */
} submit_ctx;

/* ComfyUI's "number": the queue's order.  Milliseconds since the epoch,
 * kept increasing, so it orders prompts across restarts too. */
static double next_number(void)
{
    static double last;
    double now = (double)(long long)(svc_now_unix() * 1000.0);
    last = now > last ? now : last + 1;
    return last;
}

static void on_accepted(void *user, int status)
{
    submit_ctx *c = user;
    svc_req *r = c->r;
    svc_job *j = c->job;
    double number = c->number;
    comfy_run *run = c->run;
    free(c);
    svc_gate g;
    if (!svc_gate_accepted(status, "the prompt", &g)) {
        comfy_run_free(run);
        svc_gate_reply(r, &g, NULL);
        return;
    }
    comfy_run_attach(r->srv, run, j);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt_id", j->ids);
    cJSON_AddNumberToObject(o, "number", number);
    cJSON_AddObjectToObject(o, "node_errors");
    svc_reply_json(r, 200, o);
}

static int write_prompt_file(svc_server *s, const svc_job *j, const cJSON *prompt,
                             const cJSON *body, const comfy_plan *plan, double number)
{
    char dir[1024], path[1200];
    comfy_dir(s, "prompts", dir, sizeof dir);
    if (svc_mkdirs(dir) < 0)
        return -1;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "prompt", cJSON_Duplicate(prompt, true));
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(body, "client_id");
    if (cJSON_IsString(cid))
        cJSON_AddStringToObject(o, "client_id", cid->valuestring);
    cJSON *outs = cJSON_AddArrayToObject(o, "outputs");
    cJSON *temps = cJSON_AddArrayToObject(o, "temp");
    for (int i = 0; i < plan->n_outputs; i++) {
        cJSON_AddItemToArray(outs, cJSON_CreateString(plan->outputs[i]));
        cJSON_AddItemToArray(temps, cJSON_CreateBool(plan->temp[i]));
    }
    cJSON *order = cJSON_AddArrayToObject(o, "order");
    for (int i = 0; i < plan->n_order; i++)
        cJSON_AddItemToArray(order, cJSON_CreateString(plan->order[i]));
    cJSON_AddNumberToObject(o, "number", number);
    cJSON_AddNumberToObject(o, "created", j->created);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        return -1;
    snprintf(path, sizeof path, "%s/%s.json", dir, j->ids);
    int rc = svc_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

void svc_comfy_prompt(svc_req *r, const char *rest)
{
    (void)rest;
    svc_server *s = r->srv;
    if (!svc_gate_open_or_reply(r))
        return;
    cJSON *body = svc_req_json_object(r);
    if (!body)
        return;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (!prompt) {
        cJSON_Delete(body);
        reply_comfy_error(r, 400, "no_prompt", "No prompt provided", "");
        return;
    }
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(body, "client_id");
    if (cid && !(cJSON_IsString(cid) && strlen(cid->valuestring) <= 256)) {
        cJSON_Delete(body);
        reply_comfy_error(r, 400, "invalid_prompt", "client_id must be a string of at most 256 "
                          "bytes", "client_id");
        return;
    }
    route_ctx rc;
    comfy_context ctx;
    ctx_open(s, &rc, &ctx);
    comfy_plan plan;
    cJSON *err = NULL;
    int crc = comfy_compile(prompt, &ctx, &plan, &err);
    ctx_close(&rc);
    if (crc < 0) {
        cJSON_Delete(body);
        svc_reply_json(r, 400, err);
        return;
    }
    svc_params *p = NULL;
    svc_param_error pe;
    if (svc_gate_parse(s, plan.job, NULL, &p, &pe) < 0) {
        cJSON_Delete(body);
        cJSON *fe = comfy_field_error(&plan, pe.field, pe.message);
        comfy_plan_free(&plan);
        svc_reply_json(r, 400, fe);
        return;
    }
    svc_gate g;
    if (!svc_gate_check(s, svc_key_name(r->key), &p, 1, &g)) {
        cJSON_Delete(body);
        comfy_plan_free(&plan);
        svc_params_unref(p);
        svc_gate_reply(r, &g, NULL);
        return;
    }
    svc_job *j = svc_job_new(svc_jobs_new_id(s->jobs), p, svc_now_unix());
    if (j)
        svc_job_set_owner(j, svc_key_name(r->key));
    submit_ctx *c = j ? calloc(1, sizeof *c) : NULL;
    double number = next_number();
    if (!c || write_prompt_file(s, j, prompt, body, &plan, number) < 0) {
        bool file = c != NULL;
        free(c);
        svc_job_free(j);
        if (!j)
            svc_params_unref(p);
        cJSON_Delete(body);
        comfy_plan_free(&plan);
        reply_comfy_error(r, 500, "internal",
                          file ? "the prompt could not be written to the data directory"
                               : "out of memory", "");
        return;
    }
    /* previews on request, as ComfyUI's --preview-method (default none) */
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(body, "extra_data"), "preview_method");
    const bool previews = cJSON_IsString(pm) && strcmp(pm->valuestring, "none") != 0;
    c->run = comfy_run_new(&plan, cJSON_IsString(cid) ? cid->valuestring : NULL, previews);
    cJSON_Delete(body);
    comfy_plan_free(&plan);
    c->r = r;
    c->job = j;
    c->number = number;
    svc_gate_accept(s, &j, 1, on_accepted, c);
}

/* ------------------------------------------------------------- history */

/* A prompt's job when the asking key sees it (comfy.h). */
svc_job *comfy_find_job(svc_req *r, const char *ids)
{
    uint64_t id;
    if (!svc_id_parse(ids, 'j', &id))
        return NULL;
    svc_job *j = svc_jobs_find(r->srv->jobs, id);
    return j && svc_key_sees(r->key, j->owner) ? j : NULL;
}

/* [number, prompt_id, prompt, extra_data, outputs_to_execute] */
static cJSON *queue_item(const svc_job *j, cJSON *pf)
{
    cJSON *a = cJSON_CreateArray();
    const cJSON *num = cJSON_GetObjectItem(pf, "number");
    cJSON_AddItemToArray(a, cJSON_CreateNumber(cJSON_IsNumber(num) ? num->valuedouble : 0));
    cJSON_AddItemToArray(a, cJSON_CreateString(j->ids));
    cJSON *prompt = cJSON_DetachItemFromObject(pf, "prompt");
    cJSON_AddItemToArray(a, prompt ? prompt : cJSON_CreateObject());
    cJSON *extra = cJSON_CreateObject();
    const cJSON *cid = cJSON_GetObjectItem(pf, "client_id");
    if (cJSON_IsString(cid))
        cJSON_AddStringToObject(extra, "client_id", cid->valuestring);
    cJSON_AddItemToArray(a, extra);
    cJSON *outs = cJSON_DetachItemFromObject(pf, "outputs");
    cJSON_AddItemToArray(a, outs ? outs : cJSON_CreateArray());
    return a;
}

static cJSON *history_entry(svc_job *j, cJSON *pf)
{
    cJSON *e = cJSON_CreateObject();
    cJSON *outputs = cJSON_CreateObject();
    const cJSON *outs = cJSON_GetObjectItem(pf, "outputs");
    const cJSON *temps = cJSON_GetObjectItem(pf, "temp");
    int k = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, outs) {
        if (!cJSON_IsString(o))
            continue;
        bool temp = cJSON_IsTrue(cJSON_GetArrayItem(temps, k++));
        cJSON *node = cJSON_AddObjectToObject(outputs, o->valuestring);
        cJSON *imgs = cJSON_AddArrayToObject(node, "images");
        for (int i = 0; i < j->n; i++) {
            if (j->images[i].state != SVC_DONE)
                continue;
            char name[64];
            snprintf(name, sizeof name, "%s_%05d_.png", j->ids, i);
            cJSON *im = cJSON_CreateObject();
            cJSON_AddStringToObject(im, "filename", name);
            cJSON_AddStringToObject(im, "subfolder", "");
            cJSON_AddStringToObject(im, "type", temp ? "temp" : "output");
            cJSON_AddItemToArray(imgs, im);
        }
    }
    cJSON *status = cJSON_CreateObject();
    bool ok = j->state == SVC_DONE;
    cJSON_AddStringToObject(status, "status_str", ok ? "success" : "error");
    cJSON_AddBoolToObject(status, "completed", ok);
    cJSON *msgs = cJSON_AddArrayToObject(status, "messages");
    const char *last = ok ? "execution_success"
                       : j->state == SVC_CANCELLED ? "execution_interrupted" : "execution_error";
    const char *const kinds[] = {"execution_start", last};
    const double times[] = {j->started > 0 ? j->started : j->created,
                            j->finished > 0 ? j->finished : j->created};
    for (int i = 0; i < 2; i++) {
        cJSON *m = cJSON_CreateArray();
        cJSON_AddItemToArray(m, cJSON_CreateString(kinds[i]));
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "prompt_id", j->ids);
        cJSON_AddNumberToObject(d, "timestamp", (double)(long long)(times[i] * 1000));
        if (i == 1 && !ok && j->error_message)
            cJSON_AddStringToObject(d, "exception_message", j->error_message);
        cJSON_AddItemToArray(m, d);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON_AddItemToObject(e, "prompt", queue_item(j, pf));
    cJSON_AddItemToObject(e, "outputs", outputs);
    cJSON_AddItemToObject(e, "status", status);
    cJSON *meta = cJSON_AddObjectToObject(e, "meta");
    cJSON_ArrayForEach(o, cJSON_GetArrayItem(cJSON_GetObjectItem(e, "prompt"), 4)) {
        cJSON *m = cJSON_AddObjectToObject(meta, o->valuestring);
        cJSON_AddStringToObject(m, "node_id", o->valuestring);
        cJSON_AddStringToObject(m, "display_node", o->valuestring);
        cJSON_AddNullToObject(m, "parent_node");
        cJSON_AddStringToObject(m, "real_node_id", o->valuestring);
    }
    return e;
}

/* Each prompt whose job the key sees, oldest first; fn says whether to go on. */
static int cmp_created(const void *a, const void *b)
{
    const svc_job *x = *(svc_job *const *)a, *y = *(svc_job *const *)b;
    if (x->created != y->created)
        return x->created < y->created ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void each_prompt(svc_req *r, bool (*fn)(svc_req *r, svc_job *j, cJSON *pf, void *u),
                        void *u)
{
    svc_server *s = r->srv;
    char dir[1024];
    int n = 0, m = 0;
    comfy_dir(s, "prompts", dir, sizeof dir);
    char **names = list_dir(dir, ".json", &n);
    svc_job **jobs = names && n ? calloc((size_t)n, sizeof *jobs) : NULL;
    for (int i = 0; jobs && i < n; i++) {
        char ids[24];
        size_t len = strlen(names[i]) - 5;
        if (len >= sizeof ids)
            continue;
        memcpy(ids, names[i], len);
        ids[len] = '\0';
        uint64_t id;
        if (!svc_id_parse(ids, 'j', &id))
            continue;
        svc_job *j = svc_jobs_find(s->jobs, id);
        if (j && svc_key_sees(r->key, j->owner)) /* else dropped (--keep-jobs), not replayed
                                                  * yet, or another key's: the file stays */
            jobs[m++] = j;
    }
    free_names(names);
    if (!jobs)
        return;
    qsort(jobs, (size_t)m, sizeof *jobs, cmp_created);
    for (int i = 0; i < m; i++) {
        cJSON *pf = read_prompt_file(s, jobs[i]->ids);
        if (!pf)
            continue;
        bool go_on = fn(r, jobs[i], pf, u);
        cJSON_Delete(pf);
        if (!go_on)
            break;
    }
    free(jobs);
}

typedef struct hist_ctx {
    cJSON *out;
    long max;
    long n;
} hist_ctx;

static bool add_history(svc_req *r, svc_job *j, cJSON *pf, void *u)
{
    (void)r;
    hist_ctx *h = u;
    if (!svc_state_final(j->state))
        return true;
    cJSON_AddItemToObject(h->out, j->ids, history_entry(j, pf));
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

typedef struct forget_ctx {
    const cJSON *delete; /* NULL: clear */
    int removed;
} forget_ctx;

/* POST /history: drop a finished prompt's file (its job and images stay). */
static bool forget(svc_req *r, svc_job *j, cJSON *pf, void *u)
{
    (void)pf;
    forget_ctx *f = u;
    if (!svc_state_final(j->state))
        return true;
    bool hit = f->delete == NULL;
    const cJSON *it;
    cJSON_ArrayForEach(it, f->delete)
        hit |= cJSON_IsString(it) && strcmp(it->valuestring, j->ids) == 0;
    if (!hit)
        return true;
    char dir[1024], path[1200];
    comfy_dir(r->srv, "prompts", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s.json", dir, j->ids);
    f->removed += unlink(path) == 0;
    return true;
}

static void history_post(svc_req *r)
{
    cJSON *body = svc_req_json_object(r);
    if (!body)
        return;
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(body, "delete");
    const cJSON *clear = cJSON_GetObjectItemCaseSensitive(body, "clear");
    if ((del && !cJSON_IsArray(del)) || (clear && !cJSON_IsBool(clear))) {
        cJSON_Delete(body);
        reply_comfy_error(r, 400, "invalid_request",
                          "delete must be an array of prompt ids, clear a boolean", "");
        return;
    }
    forget_ctx f = {.delete = del};
    if (cJSON_IsTrue(clear) || del)
        each_prompt(r, forget, &f);
    cJSON_Delete(body);
    svc_reply_json(r, 200, cJSON_CreateObject());
}

/* GET /history[?max_items=N], GET /history/{prompt_id}; POST /history
 * {"clear": true} | {"delete": [prompt_id...]}: the key's finished prompts
 * leave the history (their jobs and images stay, as ComfyUI keeps outputs) */
void svc_comfy_history(svc_req *r, const char *rest)
{
    if (strcmp(r->method, "POST") == 0) {
        history_post(r);
        return;
    }
    cJSON *out = cJSON_CreateObject();
    if (rest[0] == '/') {
        svc_job *j = comfy_find_job(r, rest + 1);
        cJSON *pf = j && svc_state_final(j->state) ? read_prompt_file(r->srv, j->ids) : NULL;
        if (pf) {
            cJSON_AddItemToObject(out, j->ids, history_entry(j, pf));
            cJSON_Delete(pf);
        }
        svc_reply_json(r, 200, out);
        return;
    }
    hist_ctx h = {.out = out, .max = query_long(r->query, "max_items", LIST_MAX)};
    each_prompt(r, add_history, &h);
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

static bool queue_walk(svc_req *r, svc_job *j, cJSON *pf, void *u)
{
    queue_ctx *q = u;
    svc_server *s = r->srv;
    if (svc_state_final(j->state))
        return true;
    if (q->clear && j->state == SVC_QUEUED) {
        q->cancelled += svc_job_cancel(s, j);
        return true;
    }
    if (q->interrupt && j->state == SVC_RUNNING && (!q->only || strcmp(q->only, j->ids) == 0)) {
        q->cancelled += svc_job_cancel(s, j);
        return true;
    }
    if (q->delete) {
        const cJSON *it;
        cJSON_ArrayForEach(it, q->delete)
            if (cJSON_IsString(it) && strcmp(it->valuestring, j->ids) == 0)
                q->cancelled += svc_job_cancel(s, j);
        return true;
    }
    if (q->running)
        cJSON_AddItemToArray(j->state == SVC_RUNNING ? q->running : q->pending, queue_item(j, pf));
    return true;
}

/* GET /queue; POST /queue {"clear": true} | {"delete": [prompt_id...]} */
void svc_comfy_queue(svc_req *r, const char *rest)
{
    (void)rest;
    queue_ctx q = {0};
    if (strcmp(r->method, "POST") == 0) {
        cJSON *body = svc_req_json_object(r);
        if (!body)
            return;
        const cJSON *del = cJSON_GetObjectItemCaseSensitive(body, "delete");
        const cJSON *clear = cJSON_GetObjectItemCaseSensitive(body, "clear");
        if ((del && !cJSON_IsArray(del)) || (clear && !cJSON_IsBool(clear))) {
            cJSON_Delete(body);
            reply_comfy_error(r, 400, "invalid_request",
                              "delete must be an array of prompt ids, clear a boolean", "");
            return;
        }
        q.delete = del;
        q.clear = cJSON_IsTrue(clear);
        if (q.clear || q.delete)
            each_prompt(r, queue_walk, &q);
        if (q.cancelled)
            svc_jobs_update_positions(r->srv);
        cJSON_Delete(body);
        svc_reply_json(r, 200, cJSON_CreateObject());
        return;
    }
    cJSON *o = cJSON_CreateObject();
    q.running = cJSON_AddArrayToObject(o, "queue_running");
    q.pending = cJSON_AddArrayToObject(o, "queue_pending");
    each_prompt(r, queue_walk, &q);
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
    each_prompt(r, queue_walk, &q);
    if (q.cancelled)
        svc_jobs_update_positions(r->srv);
    cJSON_Delete(body);
    svc_reply_json(r, 200, cJSON_CreateObject());
}

/* GET /object_info, GET /object_info/{class} ({} for a class not run here) */
void svc_comfy_object_info(svc_req *r, const char *rest)
{
    route_ctx rc;
    comfy_context ctx;
    ctx_open(r->srv, &rc, &ctx);
    cJSON *o = comfy_object_info(&ctx, rest[0] == '/' ? rest + 1 : NULL);
    ctx_close(&rc);
    svc_reply_json(r, 200, o ? o : cJSON_CreateObject());
}
