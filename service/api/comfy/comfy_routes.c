/*
 * service/api/comfy/comfy_routes.c - ComfyUI's HTTP routes on Tessera
 * (docs/compat-comfyui.md): POST /prompt, /history, /view, /queue,
 * /interrupt, /object_info, /system_stats, /embeddings, /extensions,
 * /models, POST /upload/image.
 *
 * Why this shape: a prompt is compiled (comfy_graph.c) into one native job
 * object per sampled chain, each parsed by the same svc_gate_parse as POST
 * /v1/jobs; all of them pass the one submit gate together and are
 * journaled in one accept (all or none), so nothing runs half a graph.
 * The prompt_id IS the first chain's job id, so /history, /view and
 * /queue (comfy_history.c) read the job table and the store, and
 * everything survives a restart as native jobs do.  What only ComfyUI
 * needs (the workflow as sent, client_id, the outputs, the jobs' ids) is
 * kept beside them in <data-dir>/comfy/prompts/<prompt_id>.json
 * (comfy_prompt.c), written before the jobs are accepted and removed when
 * the accept fails or, later, when the first job is gone.
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

/* -------------------------------------------------------------- /prompt */

typedef struct submit_ctx {
    svc_req *r;
    svc_job *jobs[COMFY_MAX_CHAINS];
    int n;
    uint64_t id;                /* the prompt's: jobs[0]'s (freed when the accept fails) */
    char prompt_id[20];
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
    svc_gate g;
    comfy_prompt_inflight(c->id, false);
    if (!svc_gate_accepted(status, "the prompt", &g)) {
        /* the jobs are gone (freed by the accept): so is the prompt */
        comfy_prompt_remove(r->srv, c->prompt_id);
        comfy_run_free(c->run);
        free(c);
        svc_gate_reply(r, &g, NULL);
        return;
    }
    comfy_run_attach(r->srv, c->run, c->jobs, c->n);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt_id", c->jobs[0]->ids);
    cJSON_AddNumberToObject(o, "number", c->number);
    cJSON_AddObjectToObject(o, "node_errors");
    free(c);
    svc_reply_json(r, 200, o);
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
    /* every chain's job parses, and its outputs' scaled sizes fit, before
     * anything is queued: all the prompt's jobs are accepted, or none */
    svc_params *p[COMFY_MAX_CHAINS] = {0};
    const int n = plan.n_chains;
    cJSON *fe = NULL;
    for (int c = 0; c < n && !fe; c++) {
        svc_param_error pe;
        if (svc_gate_parse(s, plan.chains[c].job, NULL, &p[c], &pe) < 0) {
            fe = comfy_field_error(&plan, c, pe.field, pe.message);
            break;
        }
        int w = p[c]->width, h = p[c]->height;
        svc_params_hires(p[c], &w, &h, NULL);
        fe = comfy_check_output_sizes(&plan, c, w, h);
    }
    svc_gate g;
    if (fe || !svc_gate_check(s, svc_key_name(r->key), p, n, &g)) {
        cJSON_Delete(body);
        comfy_plan_free(&plan);
        for (int c = 0; c < n; c++)
            if (p[c])
                svc_params_unref(p[c]);
        if (fe)
            svc_reply_json(r, 400, fe);
        else
            svc_gate_reply(r, &g, NULL);
        return;
    }
    submit_ctx *c = calloc(1, sizeof *c);
    const double now = svc_now_unix();
    int made = 0;
    for (int k = 0; c && k < n; k++) {
        c->jobs[k] = svc_job_new(svc_jobs_new_id(s->jobs), p[k], now);
        if (!c->jobs[k])
            break;
        p[k] = NULL; /* the job holds it */
        svc_job_set_owner(c->jobs[k], svc_key_name(r->key));
        made++;
    }
    double number = next_number();
    const char *client = cJSON_IsString(cid) ? cid->valuestring : NULL;
    if (made < n || comfy_prompt_write(s, c->jobs, n, prompt, client, &plan, number) < 0) {
        for (int k = 0; c && k < made; k++)
            svc_job_free(c->jobs[k]);
        for (int k = 0; k < n; k++)
            if (p[k])
                svc_params_unref(p[k]);
        const bool file = made == n;
        free(c);
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
    c->run = comfy_run_new(&plan, client, previews);
    cJSON_Delete(body);
    comfy_plan_free(&plan);
    c->r = r;
    c->n = n;
    c->id = c->jobs[0]->id;
    snprintf(c->prompt_id, sizeof c->prompt_id, "%s", c->jobs[0]->ids);
    c->number = number;
    comfy_prompt_inflight(c->id, true);
    svc_gate_accept(s, c->jobs, n, on_accepted, c);
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
