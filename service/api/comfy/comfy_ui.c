/*
 * service/api/comfy/comfy_ui.c - ComfyUI's web UI at /comfy/ (`serve
 * --comfy-ui DIR`, docs/compat-comfyui.md "The web UI"): the frontend's
 * static files, the path rewrite that sends its API calls to the ComfyUI
 * routes, and the small lists a fresh ComfyUI answers (/features, /i18n,
 * /experiment/models, /workflow_templates, /global_subgraphs,
 * /node_replacements, GET /prompt).  Users, settings and user data are
 * comfy_userdata.c's.
 *
 * Why a folder and not compiled in like web/: the frontend is a third-party
 * build of 120 MB that ships on PyPI (comfyui-frontend-package), fetched by
 * scripts/setup-comfy-ui.sh and never committed; the server reads it where
 * the operator unpacked it.
 *
 * Files: the path after /comfy/ is split into names, each 1..255 bytes of
 * printable characters without '\' and not starting with '.', so "..",
 * hidden files and control bytes never reach the file system; the names are
 * then opened one by one from the folder with O_NOFOLLOW, so a symbolic link
 * inside it cannot lead out either, and only a regular file is served.
 * Vite's content-hashed assets (assets/name-HASH8.ext) are cached for a
 * year as immutable; every other file is revalidated (no-cache + ETag).
 */
#include "comfy.h"
#include "comfy_ui.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "http.h"
#include "server.h"

#define UI_PATH_MAX 1024
#define UI_DEPTH_MAX 32

static const char *const k_ui_roots[] = {
    "/users",
    "/settings",
    "/userdata",
    "/v2/userdata",
    "/jobs",
    "/features",
    "/i18n",
    "/experiment",
    "/workflow_templates",
    "/global_subgraphs",
    "/node_replacements",
};

bool svc_comfy_ui_is_path(const char *path)
{
    for (size_t i = 0; i < sizeof k_ui_roots / sizeof k_ui_roots[0]; i++) {
        size_t n = strlen(k_ui_roots[i]);
        if (strncmp(path, k_ui_roots[i], n) == 0 && (path[n] == '\0' || path[n] == '/'))
            return true;
    }
    return false;
}

bool svc_comfy_ui_rewrite(svc_req *r)
{
    const size_t n = strlen(COMFY_UI_ROOT);
    if (!r->srv->cfg.comfy_ui_dir || strncmp(r->path, COMFY_UI_ROOT, n) != 0)
        return false;
    const char *rest = r->path + n;
    if (strncmp(rest, "/api/", 5) == 0 || strcmp(rest, "/ws") == 0) {
        memmove(r->path, rest, strlen(rest) + 1);
        return true;
    }
    return false;
}

bool svc_comfy_ui_any_body(svc_req *r)
{
    return svc_req_header(r, "Comfy-User") != NULL &&
           (strncmp(r->path, "/settings", 9) == 0 || strncmp(r->path, "/userdata", 9) == 0 ||
            strncmp(r->path, "/users", 6) == 0);
}

/* ------------------------------------------------------------ static files */

static const struct {
    const char *ext;
    const char *type;
} k_types[] = {
    {"html", "text/html; charset=utf-8"},
    {"js", "text/javascript; charset=utf-8"},
    {"mjs", "text/javascript; charset=utf-8"},
    {"css", "text/css; charset=utf-8"},
    {"json", "application/json"},
    {"map", "application/json"},
    {"txt", "text/plain; charset=utf-8"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"ico", "image/x-icon"},
    {"woff2", "font/woff2"},
    {"woff", "font/woff"},
    {"ttf", "font/ttf"},
    {"otf", "font/otf"},
    {"eot", "application/vnd.ms-fontobject"},
    {"wasm", "application/wasm"},
    {"webm", "video/webm"},
    {"mp4", "video/mp4"},
    {"mp3", "audio/mpeg"},
    {"wav", "audio/wav"},
};

static const char *content_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (dot)
        for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
            if (strcasecmp(dot + 1, k_types[i].ext) == 0)
                return k_types[i].type;
    return "application/octet-stream";
}

/* Vite's hashed asset name: assets/<stem>-<8 of [A-Za-z0-9_-]>.<ext>[.map]. */
static bool hashed_asset(const char *rel)
{
    if (strncmp(rel, "assets/", 7) != 0)
        return false;
    const char *name = strrchr(rel, '/') + 1;
    size_t len = strlen(name);
    if (len > 4 && strcmp(name + len - 4, ".map") == 0)
        len -= 4;
    const char *dot = NULL;
    for (size_t i = len; i-- > 0;)
        if (name[i] == '.') {
            dot = name + i;
            break;
        }
    if (!dot || dot - name < 10 || dot[-9] != '-')
        return false;
    for (const char *p = dot - 8; p < dot; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-'))
            return false;
    return true;
}

/* A name of the path: 1..255 printable bytes (UTF-8 allowed), no '\', not
 * starting with '.' (no "..", no hidden files). */
static bool name_ok(const char *s, size_t len)
{
    if (len == 0 || len > 255 || s[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || c == '\\')
            return false;
    }
    return true;
}

bool comfy_ui_path_ok(const char *rel)
{
    size_t len = strlen(rel);
    if (len == 0 || len > UI_PATH_MAX)
        return false;
    int depth = 0;
    for (const char *p = rel;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (!name_ok(p, n) || ++depth > UI_DEPTH_MAX)
            return false;
        if (!slash)
            return true;
        p = slash + 1;
    }
}

/* Open rel ("a/b/c.js", comfy_ui_path_ok) under the folder dir, one name at
 * a time with O_NOFOLLOW: a descriptor of a regular file (st filled), or -1. */
static int open_under(const char *dir, const char *rel, struct stat *st)
{
    if (!comfy_ui_path_ok(rel))
        return -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int depth = 0;
    const char *p = rel;
    while (fd >= 0) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        char name[256];
        if (!name_ok(p, len) || ++depth > UI_DEPTH_MAX) {
            close(fd);
            return -1;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (slash ? O_DIRECTORY : O_NONBLOCK);
        int next = openat(fd, name, flags);
        close(fd);
        fd = next;
        if (!slash)
            break;
        p = slash + 1;
    }
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void ui_not_found(svc_req *r)
{
    svc_reply_errorf(r, SVC_DIALECT_NATIVE, 404, "not_found", NULL,
                     "no such file of the UI: %.200s", r->path);
}

static bool ui_served(svc_req *r)
{
    if (r->srv->cfg.comfy_ui_dir)
        return true;
    svc_reply_errorf(r, SVC_DIALECT_NATIVE, 404, "not_found", NULL,
                     "ComfyUI's web UI is not served here (start the server with --comfy-ui "
                     "DIR, docs/compat-comfyui.md)");
    return false;
}

static void serve_file(svc_req *r, const char *rel);

void svc_comfy_ui_static(svc_req *r, const char *rest)
{
    if (!ui_served(r))
        return;
    if (rest[0] == '\0') { /* /comfy: the frontend's relative URLs need the slash */
        svc_req_add_header(r, "Location", COMFY_UI_ROOT "/");
        svc_reply_buffer(r, 301, NULL, NULL);
        return;
    }
    /* with keys on, the UI's page waits for a sign-in (its files need none) */
    const char *rel = rest[1] ? rest + 1 : "index.html";
    if (strcmp(rel, "index.html") == 0 && svc_comfy_ui_signed_out(r))
        return;
    serve_file(r, rel);
}

/* GET /assets/...: the few URLs the frontend writes absolute (its web
 * manifest's icons, the tab's progress icons) */
void svc_comfy_ui_assets(svc_req *r, const char *rest)
{
    char rel[UI_PATH_MAX + 8];
    if (!ui_served(r))
        return;
    if (strlen(rest) > UI_PATH_MAX) {
        ui_not_found(r);
        return;
    }
    snprintf(rel, sizeof rel, "assets%s", rest);
    serve_file(r, rel);
}

static void serve_file(svc_req *r, const char *rel)
{
    const char *dir = r->srv->cfg.comfy_ui_dir;
    if (strlen(rel) > UI_PATH_MAX) {
        ui_not_found(r);
        return;
    }
    struct stat st;
    int fd = open_under(dir, rel, &st);
    if (fd < 0) {
        ui_not_found(r);
        return;
    }
    char etag[64];
    snprintf(etag, sizeof etag, "\"%llx-%llx\"", (unsigned long long)st.st_size,
             (unsigned long long)st.st_mtim.tv_sec * 1000000000ull +
                 (unsigned long long)st.st_mtim.tv_nsec);
    svc_req_add_header(r, "ETag", etag);
    svc_req_add_header(r, "Cache-Control",
                       hashed_asset(rel) ? "public, max-age=31536000, immutable" : "no-cache");
    svc_req_add_header(r, "X-Content-Type-Options", "nosniff");
    const char *inm = svc_req_header(r, "If-None-Match");
    if (inm && strstr(inm, etag)) {
        close(fd);
        svc_reply_buffer(r, 304, NULL, NULL);
        return;
    }
    struct evbuffer *buf = evbuffer_new();
    if (!buf || (st.st_size > 0 && evbuffer_add_file(buf, fd, 0, st.st_size) < 0)) {
        close(fd);
        if (buf)
            evbuffer_free(buf);
        svc_reply_errorf(r, SVC_DIALECT_NATIVE, 500, "internal", NULL,
                         "the file could not be read");
        return;
    }
    if (st.st_size == 0)
        close(fd); /* evbuffer_add_file took it otherwise */
    svc_reply_buffer(r, 200, content_type(rel), buf);
    evbuffer_free(buf);
}

/* ------------------------------------------------- what a fresh ComfyUI lists */

cJSON *comfy_ui_feature_flags(svc_server *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "supports_preview_metadata", true);
    cJSON_AddNumberToObject(o, "max_upload_size", (double)s->cfg.max_body);
    cJSON_AddObjectToObject(o, "extension");
    return o;
}

/* GET /features: the server's feature flags (also sent on the websocket in
 * answer to the client's). */
void svc_comfy_features(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_json(r, 200, comfy_ui_feature_flags(r->srv));
}

/* GET /i18n: the custom nodes' translations (none are installed). */
void svc_comfy_i18n(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_json(r, 200, cJSON_CreateObject());
}

/* GET /workflow_templates, /global_subgraphs, /node_replacements: what
 * custom nodes add (none are installed). */
void svc_comfy_empty_object(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_json(r, 200, cJSON_CreateObject());
}

/* GET /experiment/models: [{name, folders}]; /experiment/models/{folder}:
 * [{name, pathIndex}].  Tessera's two folders: the loaded checkpoint and
 * --lora-dir's files (the folders are named, not given as server paths). */
void svc_comfy_experiment_models(svc_req *r, const char *rest)
{
    svc_server *s = r->srv;
    if (strncmp(rest, "/models", 7) != 0 || (rest[7] != '\0' && rest[7] != '/')) {
        svc_reply_errorf(r, r->dialect, 404, "not_found", NULL, "no such path: %.200s", r->path);
        return;
    }
    const char *folder = rest[7] ? rest + 8 : NULL;
    cJSON *a = cJSON_CreateArray();
    if (!folder) {
        static const char *const names[] = {"checkpoints", "loras"};
        for (int i = 0; i < 2; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", names[i]);
            cJSON *f = cJSON_AddArrayToObject(o, "folders");
            cJSON_AddItemToArray(f, cJSON_CreateString(names[i]));
            cJSON_AddItemToArray(a, o);
        }
        svc_reply_json(r, 200, a);
        return;
    }
    if (strcmp(folder, "checkpoints") == 0) {
        if (s->model_name[0]) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", s->model_name);
            cJSON_AddNumberToObject(o, "pathIndex", 0);
            cJSON_AddItemToArray(a, o);
        }
    } else if (strcmp(folder, "loras") == 0) {
        char **names = NULL;
        int n = 0;
        if (s->cfg.lora_dir && tsr_lora_list(s->cfg.lora_dir, &names, &n) == 0) {
            for (int i = 0; i < n; i++) {
                char file[300];
                snprintf(file, sizeof file, "%s.safetensors", names[i]);
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "name", file);
                cJSON_AddNumberToObject(o, "pathIndex", 0);
                cJSON_AddItemToArray(a, o);
            }
            tsr_lora_list_free(names, n);
        }
    } else {
        cJSON_Delete(a);
        svc_reply_errorf(r, r->dialect, 404, "not_found", NULL, "no such model folder: %.100s",
                         folder);
        return;
    }
    svc_reply_json(r, 200, a);
}

/* GET /prompt: {"exec_info": {"queue_remaining"}} (POST is comfy_routes.c's). */
void svc_comfy_prompt_info(svc_req *r, const char *rest)
{
    (void)rest;
    cJSON *d = comfy_status_data(NULL);
    cJSON *st = cJSON_DetachItemFromObject(d, "status");
    cJSON_Delete(d);
    svc_reply_json(r, 200, st ? st : cJSON_CreateObject());
}
