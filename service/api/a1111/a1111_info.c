/*
 * service/api/a1111/a1111_info.c - the read-only side of /sdapi/v1: samplers,
 * schedulers, sd-models, cmd-flags, memory (options: a1111_options.c), and the
 * empty lists A1111 clients probe at start (scripts, upscalers, styles,
 * ...), so they find "nothing installed" instead of a 404
 * (docs/compat-a1111.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "a1111.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "server.h"
#include "tessera.h"

/* Paths answered with a fixed empty value (GET), or a no-op (POST). */
static const struct {
    const char *path, *value;
    bool post;
} k_fixed[] = {
    {"/scripts", "{\"txt2img\":[],\"img2img\":[]}", false},
    {"/script-info", "[]", false},
    /* the resamplers a1111_extras.c upscales with */
    {"/upscalers", "[{\"name\":\"None\",\"model_name\":null,\"model_path\":null,"
                   "\"model_url\":null,\"scale\":4},"
                   "{\"name\":\"Lanczos\",\"model_name\":null,\"model_path\":null,"
                   "\"model_url\":null,\"scale\":4},"
                   "{\"name\":\"Nearest\",\"model_name\":null,\"model_path\":null,"
                   "\"model_url\":null,\"scale\":4}]", false},
    /* the hires fix's latent upscalers (pipeline/upscale.c) */
    {"/latent-upscale-modes", "[{\"name\":\"Latent\"},{\"name\":\"Latent (antialiased)\"},"
                              "{\"name\":\"Latent (bicubic)\"},"
                              "{\"name\":\"Latent (bicubic antialiased)\"},"
                              "{\"name\":\"Latent (nearest)\"},"
                              "{\"name\":\"Latent (nearest-exact)\"}]", false},
    {"/sd-vae", "[]", false},
    {"/hypernetworks", "[]", false},
    {"/face-restorers", "[]", false},
    {"/realesrgan-models", "[]", false},
    {"/prompt-styles", "[]", false},
    {"/extensions", "[]", false},
    {"/refresh-checkpoints", "null", true},
    {"/refresh-vae", "null", true},
    {"/refresh-loras", "null", true},
    {"/refresh-embeddings", "null", true}, /* engines reload a changed folder themselves */
};

static bool is_fixed(const char *rest, bool post)
{
    for (size_t i = 0; i < sizeof k_fixed / sizeof k_fixed[0]; i++)
        if (strcmp(rest, k_fixed[i].path) == 0)
            return k_fixed[i].post == post;
    return false;
}

bool svc_a1111_is_fixed_get(const char *rest)
{
    return is_fixed(rest, false);
}

bool svc_a1111_is_fixed_post(const char *rest)
{
    return is_fixed(rest, true);
}

void svc_a1111_fixed(svc_req *r, const char *rest)
{
    for (size_t i = 0; i < sizeof k_fixed / sizeof k_fixed[0]; i++)
        if (strcmp(rest, k_fixed[i].path) == 0) {
            svc_reply_json(r, 200, cJSON_Parse(k_fixed[i].value));
            return;
        }
}

static cJSON *samplers(void)
{
    const tsr_sampler_desc *d = NULL;
    int n = tsr_samplers(&d);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", d[i].a1111);
        cJSON *al = cJSON_AddArrayToObject(o, "aliases");
        char k[80];
        snprintf(k, sizeof k, "k_%s", d[i].name);
        cJSON_AddItemToArray(al, cJSON_CreateString(k));
        cJSON_AddItemToArray(al, cJSON_CreateString(d[i].name));
        cJSON_AddObjectToObject(o, "options");
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static cJSON *schedulers(void)
{
    const tsr_schedule_desc *d = NULL;
    int n = tsr_schedules(&d);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        char name[64];
        size_t j = 0;
        for (const char *p = d[i].a1111; *p && j + 1 < sizeof name; p++)
            name[j++] = *p == ' ' ? '_' : (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        name[j] = '\0';
        cJSON_AddStringToObject(o, "name", name);
        cJSON_AddStringToObject(o, "label", d[i].a1111);
        cJSON *al = cJSON_AddArrayToObject(o, "aliases");
        cJSON_AddItemToArray(al, cJSON_CreateString(d[i].name));
        cJSON_AddNumberToObject(o, "default_rho", -1);
        cJSON_AddFalseToObject(o, "need_inner_model");
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* "demo [0123456789]" as A1111 titles a checkpoint (the hash when known). */
void svc_a1111_model_title(svc_server *s, char *buf, size_t size)
{
    const char *hash = s->engine0 ? tsr_engine_model_hash(s->engine0) : "";
    if (hash && hash[0])
        snprintf(buf, size, "%s [%s]", s->model_name, hash);
    else
        snprintf(buf, size, "%s", s->model_name);
}

static cJSON *sd_models(svc_server *s)
{
    char title[300];
    svc_a1111_model_title(s, title, sizeof title);
    const char *hash = s->engine0 ? tsr_engine_model_hash(s->engine0) : "";
    cJSON *a = cJSON_CreateArray();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "title", title);
    cJSON_AddStringToObject(o, "model_name", s->model_name);
    svc_json_add_string_or_null(o, "hash", hash && hash[0] ? hash : NULL);
    cJSON_AddNullToObject(o, "sha256");
    cJSON_AddStringToObject(o, "filename", s->cfg.model);
    cJSON_AddNullToObject(o, "config");
    cJSON_AddItemToArray(a, o);
    return a;
}

static cJSON *cmd_flags(svc_server *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddTrueToObject(o, "api");
    cJSON_AddTrueToObject(o, "nowebui");
    cJSON_AddBoolToObject(o, "listen", strcmp(s->cfg.host, "127.0.0.1") != 0 &&
                                           strcmp(s->cfg.host, "localhost") != 0);
    cJSON_AddNumberToObject(o, "port", s->port);
    cJSON_AddStringToObject(o, "ckpt", s->cfg.model);
    cJSON_AddStringToObject(o, "data_dir", s->cfg.data_dir);
    svc_json_add_string_or_null(o, "api_auth", !s->keys.n          ? NULL
                                               : s->cfg.keys_file ? "<keys>"
                                                                  : "<token file>");
    cJSON_AddStringToObject(o, "device", s->device_desc);
    cJSON_AddNumberToObject(o, "max_batch", s->cfg.max_batch);
    cJSON_AddNumberToObject(o, "max_queue", s->cfg.max_queue);
    return o;
}

static cJSON *memory(svc_server *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *ram = cJSON_AddObjectToObject(o, "ram");
    struct sysinfo si;
    if (sysinfo(&si) == 0) {
        double unit = si.mem_unit ? si.mem_unit : 1;
        double total = (double)si.totalram * unit, free_b = (double)si.freeram * unit;
        cJSON_AddNumberToObject(ram, "free", free_b);
        cJSON_AddNumberToObject(ram, "used", total - free_b);
        cJSON_AddNumberToObject(ram, "total", total);
    } else {
        cJSON_AddStringToObject(ram, "error", "sysinfo failed");
    }
    cJSON *cuda = cJSON_AddObjectToObject(o, "cuda");
    char msg[600];
    snprintf(msg, sizeof msg, "no CUDA memory statistics (device: %s)", s->device_desc);
    cJSON_AddStringToObject(cuda, "error", msg);
    return o;
}

/* ------------------------------------------------------------------ routes */

void svc_a1111_samplers(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_json(r, 200, samplers());
}

void svc_a1111_schedulers(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_json(r, 200, schedulers());
}

void svc_a1111_sd_models(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_json(r, 200, sd_models(r->srv));
}

/* A1111's /sdapi/v1/loras: the files of --lora-dir, read on every call (so
 * refresh-loras has nothing to do).  "path" is the file name only: the
 * server's folder is not the client's business. */
void svc_a1111_loras(svc_req *r, const char *rest)
{
    (void)rest;
    char **names = NULL;
    int n = 0;
    cJSON *a = cJSON_CreateArray();
    if (tsr_lora_list(r->srv->cfg.lora_dir, &names, &n) < 0)
        SVC_WARN("/sdapi/v1/loras: %s", tsr_last_error());
    for (int i = 0; a && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        char file[160];
        snprintf(file, sizeof file, "%s.safetensors", names[i]);
        cJSON_AddStringToObject(o, "name", names[i]);
        cJSON_AddStringToObject(o, "alias", names[i]);
        cJSON_AddStringToObject(o, "path", file);
        cJSON_AddItemToObject(o, "metadata", cJSON_CreateObject());
        cJSON_AddItemToArray(a, o);
    }
    tsr_lora_list_free(names, n);
    svc_reply_json(r, 200, a);
}

void svc_a1111_cmd_flags(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_json(r, 200, cmd_flags(r->srv));
}

void svc_a1111_memory(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_json(r, 200, memory(r->srv));
}
