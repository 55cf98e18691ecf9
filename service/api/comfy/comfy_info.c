/*
 * service/api/comfy/comfy_info.c - ComfyUI's read-only routes and the
 * upload: GET /object_info[/{class}], /system_stats, /embeddings,
 * /extensions, /models[/{folder}], POST /upload/image.
 *
 * Why they answer from the server's own facts: ComfyUI clients probe
 * these at start (comfy-api-simplified reads /object_info, the frontend
 * all of them) and build their menus from the answers, so each lists what
 * Tessera actually runs: the node table (comfy_nodes.c), the one loaded
 * checkpoint, the LoRAs of --lora-dir, the images uploaded here.  One
 * exception, as ComfyUI lists them: every scheduler is offered with every
 * sampler, and the pairs diffusers has no option for (euler_ancestral with
 * karras, ...) are refused on the KSampler (docs/compat-comfyui.md).
 *
 * Uploads: multipart "image" (and optional "overwrite", "type",
 * "subfolder": one folder name of [A-Za-z0-9._-]), checked to decode as PNG
 * or JPEG, written to <data-dir>/comfy/input[/<subfolder>] under a name of
 * [A-Za-z0-9._-] (others become '_'); an existing name gets "_1", "_2"...
 * unless overwrite is "true".  LoadImage names it "<subfolder>/<name>".
 */
#include "comfy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "http.h"
#include "images.h"
#include "log.h"
#include "multipart.h"
#include "server.h"

static void reply_error(svc_req *r, int status, const char *type, const char *message)
{
    svc_reply_json(r, status, comfy_error_body(type, message, ""));
}

/* The checkpoint and LoRA names (borrowed / owned: free_loras). */
static char **lora_names(svc_server *s)
{
    char **names = NULL;
    int n = 0;
    if (!s->cfg.lora_dir || tsr_lora_list(s->cfg.lora_dir, &names, &n) < 0)
        return calloc(1, sizeof(char *));
    char **v = calloc((size_t)n + 1, sizeof *v);
    for (int i = 0; v && i < n; i++) {
        size_t len = strlen(names[i]) + 13;
        v[i] = malloc(len);
        if (v[i])
            snprintf(v[i], len, "%s.safetensors", names[i]);
    }
    tsr_lora_list_free(names, n);
    return v;
}

static void free_loras(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

/* GET /system_stats */
void svc_comfy_system_stats(svc_req *r, const char *rest)
{
    (void)rest;
    svc_server *s = r->srv;
    cJSON *o = cJSON_CreateObject();
    cJSON *sys = cJSON_AddObjectToObject(o, "system");
    cJSON_AddStringToObject(sys, "os", "posix");
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES),
         psize = sysconf(_SC_PAGESIZE);
    cJSON_AddNumberToObject(sys, "ram_total", pages > 0 ? (double)pages * psize : 0);
    cJSON_AddNumberToObject(sys, "ram_free", avail > 0 ? (double)avail * psize : 0);
    cJSON_AddStringToObject(sys, "comfyui_version", "tessera");
    cJSON_AddStringToObject(sys, "python_version", "");
    cJSON_AddStringToObject(sys, "pytorch_version", "");
    cJSON_AddBoolToObject(sys, "embedded_python", false);
    cJSON_AddArrayToObject(sys, "argv");
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "name", s->device_desc[0] ? s->device_desc : "cpu");
    cJSON_AddStringToObject(d, "type", strstr(s->device_desc, "cuda") ? "cuda" : "cpu");
    cJSON_AddNumberToObject(d, "index", 0);
    size_t mem = s->engine0 ? tsr_engine_device_memory(s->engine0) : 0;
    cJSON_AddNumberToObject(d, "vram_total", (double)mem);
    cJSON_AddNumberToObject(d, "vram_free", (double)mem);
    cJSON_AddNumberToObject(d, "torch_vram_total", (double)mem);
    cJSON_AddNumberToObject(d, "torch_vram_free", (double)mem);
    cJSON_AddItemToArray(devs, d);
    svc_reply_json(r, 200, o);
}

/* GET /embeddings, GET /extensions: nothing installed (docs/compat-comfyui.md). */
void svc_comfy_list(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_json(r, 200, cJSON_CreateArray());
}

/* GET /models: the folders; GET /models/{folder}: their files. */
void svc_comfy_models(svc_req *r, const char *rest)
{
    svc_server *s = r->srv;
    cJSON *a = cJSON_CreateArray();
    if (!rest[0] || strcmp(rest, "/") == 0) {
        cJSON_AddItemToArray(a, cJSON_CreateString("checkpoints"));
        cJSON_AddItemToArray(a, cJSON_CreateString("loras"));
    } else if (strcmp(rest, "/checkpoints") == 0) {
        if (s->model_name[0])
            cJSON_AddItemToArray(a, cJSON_CreateString(s->model_name));
    } else if (strcmp(rest, "/loras") == 0) {
        char **loras = lora_names(s);
        for (char **p = loras; p && *p; p++)
            cJSON_AddItemToArray(a, cJSON_CreateString(*p));
        free_loras(loras);
    } else {
        cJSON_Delete(a);
        svc_reply_errorf(r, r->dialect, 404, "not_found", NULL, "no such model folder: %.100s",
                         rest + 1);
        return;
    }
    svc_reply_json(r, 200, a);
}

static void clean_name(const char *in, char *out, size_t size)
{
    const char *base = strrchr(in, '/');
    base = base ? base + 1 : in;
    size_t o = 0;
    for (const char *p = base; *p && o + 1 < size && o < 100; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        out[o++] = ok ? c : '_';
    }
    out[o] = '\0';
    while (out[0] == '.')
        out[0] = '_';
    if (!out[0])
        snprintf(out, size, "image.png");
}

static bool part_is(const svc_mp_form *f, const char *name, const char *value)
{
    const svc_mp_part *p = svc_mp_find(f, name, 0);
    return p && p->len == strlen(value) && memcmp(p->data, value, p->len) == 0;
}

/* POST /upload/image (multipart/form-data) */
void svc_comfy_upload_image(svc_req *r, const char *rest)
{
    (void)rest;
    svc_server *s = r->srv;
    char boundary[256], err[256];
    const char *ct = svc_req_header(r, "Content-Type");
    if (svc_mp_boundary(ct ? ct : "", boundary, sizeof boundary, err, sizeof err) < 0) {
        reply_error(r, 400, "invalid_request", err);
        return;
    }
    size_t len = 0;
    const char *body = svc_req_body(r, &len);
    svc_mp_form form = {0};
    if (svc_mp_parse((const uint8_t *)body, len, boundary, &form, err, sizeof err) < 0) {
        reply_error(r, 400, "invalid_request", err);
        return;
    }
    const svc_mp_part *img = svc_mp_find(&form, "image", 0);
    const svc_mp_part *sub = svc_mp_find(&form, "subfolder", 0);
    if (!img || !img->filename) {
        svc_mp_free(&form);
        reply_error(r, 400, "invalid_request", "the form needs a file named \"image\"");
        return;
    }
    char subdir[160] = "";
    if (sub && sub->len) {
        if (sub->len >= sizeof subdir) {
            svc_mp_free(&form);
            reply_error(r, 400, "invalid_request", "subfolder is longer than 128 bytes");
            return;
        }
        memcpy(subdir, sub->data, sub->len);
        subdir[sub->len] = '\0';
        if (!comfy_safe_name(subdir)) {
            svc_mp_free(&form);
            reply_error(r, 400, "invalid_request",
                        "subfolder must be one folder name of [A-Za-z0-9._-], not starting "
                        "with '.'");
            return;
        }
    }
    if (svc_mp_find(&form, "type", 0) && !part_is(&form, "type", "input")) {
        svc_mp_free(&form);
        reply_error(r, 400, "invalid_request", "type must be \"input\"");
        return;
    }
    uint8_t *pix = NULL;
    int w = 0, h = 0;
    if (svc_image_decode(img->data, img->len, 3, &pix, &w, &h, err, sizeof err) < 0) {
        svc_mp_free(&form);
        reply_error(r, 400, "invalid_request", err);
        return;
    }
    free(pix);
    char dir[1024], name[128], path[1300];
    snprintf(dir, sizeof dir, "%s/comfy/input%s%s", s->cfg.data_dir, subdir[0] ? "/" : "",
             subdir);
    clean_name(img->filename, name, sizeof name);
    bool overwrite = part_is(&form, "overwrite", "true") || part_is(&form, "overwrite", "1");
    if (svc_mkdirs(dir) < 0) {
        svc_mp_free(&form);
        reply_error(r, 500, "internal", "the input folder cannot be made");
        return;
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    for (int k = 1; !overwrite && stat(path, &st) == 0 && k < 10000; k++) {
        char stem[128];
        const char *dot = strrchr(name, '.');
        size_t sl = dot ? (size_t)(dot - name) : strlen(name);
        snprintf(stem, sizeof stem, "%.*s_%d%s", (int)(sl > 100 ? 100 : sl), name, k,
                 dot ? dot : "");
        snprintf(path, sizeof path, "%s/%s", dir, stem);
        if (stat(path, &st) != 0) {
            snprintf(name, sizeof name, "%s", stem);
            break;
        }
    }
    int rc = svc_write_file_atomic(path, img->data, img->len);
    svc_mp_free(&form);
    if (rc < 0) {
        reply_error(r, 500, "internal", "the image could not be written to the data directory");
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "subfolder", subdir);
    cJSON_AddStringToObject(o, "type", "input");
    svc_reply_json(r, 200, o);
}
