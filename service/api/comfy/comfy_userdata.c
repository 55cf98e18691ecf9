/*
 * service/api/comfy/comfy_userdata.c - ComfyUI's users, settings and user
 * data routes, as a fresh single-user ComfyUI answers them (its
 * app/user_manager.py and app/app_settings.py; docs/compat-comfyui.md "The
 * web UI"):
 *
 *   GET  /users                         {"storage": "server", "migrated": bool}
 *   GET  /settings, /settings/{id}      the settings object, one value (null)
 *   POST /settings, /settings/{id}      merge an object, set one value
 *   GET  /userdata?dir=D[&recurse&full_info&split]   the files under D
 *   GET  /v2/userdata?path=P            files and folders under P
 *   GET|POST|DELETE /userdata/{file}    read, write (?overwrite, ?full_info), delete
 *   POST /userdata/{file}/move/{dest}   rename (?overwrite, ?full_info)
 *
 * Where: <data-dir>/comfy/user/<user>/, the settings in its
 * comfy.settings.json.  <user> is "default" with keys off, else
 * "key_<key name>": each key has its own settings and workflows, as each
 * sees only its own prompts (comfy_routes.c); an admin key too.
 *
 * Why strict names: {file} is one URL segment whose '/' came encoded as %2F
 * (the frontend's encodeURIComponent), so it is cut from the raw URL, not
 * from the decoded path, and decoded once.  Every name of the relative path
 * is 1..255 bytes, printable, without \ : * ? " < > |, and does not start
 * with '.' (no "..", no hidden files); at most 16 names and 512 bytes.  No
 * name is ever joined unchecked, the folder is the server's own (nothing in
 * it is a link it did not make), and a write goes through a temporary file
 * and a rename.  Bounds: a file is at most the server's --max-body (its
 * request could not be larger), a user folder at most 256 MiB in 10,000
 * files, the settings file at most 4 MiB.
 */
#include "comfy.h"
#include "comfy_ui.h"

#include <dirent.h>
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

#include "auth.h"
#include "files.h"
#include "http.h"
#include "json.h"
#include "server.h"

#define REL_MAX 512
#define REL_NAMES 16
#define SETTINGS_MAX (4u << 20)
#define USER_BYTES_MAX (256ull << 20)
#define USER_FILES_MAX 10000
#define LIST_MAX 10000
#define SETTINGS_FILE "comfy.settings.json"

/* ------------------------------------------------------------------ paths */

/* <data-dir>/comfy/user/<user> into buf. */
static void user_root(svc_req *r, char *buf, size_t size)
{
    char sub[SVC_KEY_NAME_MAX + 16];
    if (r->key)
        snprintf(sub, sizeof sub, "user/key_%s", svc_key_name(r->key));
    else
        snprintf(sub, sizeof sub, "user/default");
    comfy_dir(r->srv, sub, buf, size);
}

static bool name_char_ok(unsigned char c)
{
    return c >= 0x20 && c != 0x7f && c != '\\' && c != ':' && c != '*' && c != '?' && c != '"' &&
           c != '<' && c != '>' && c != '|';
}

/* A relative path of user data (see the top of the file; comfy_ui.h). */
bool comfy_userdata_path_ok(const char *rel)
{
    size_t len = strlen(rel);
    if (len == 0 || len > REL_MAX)
        return false;
    int names = 0;
    const char *p = rel;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 0 || n > 255 || p[0] == '.' || ++names > REL_NAMES)
            return false;
        for (size_t i = 0; i < n; i++)
            if (!name_char_ok((unsigned char)p[i]))
                return false;
        if (!slash)
            return true;
        p = slash + 1;
    }
}

/* A query value, decoded ('+' is a space), into buf; false when it is not
 * there (buf "") or cannot be decoded or does not fit.  Not comfy_query_get:
 * a user data path may take 512 decoded bytes, up to three times that
 * encoded, and a flag may come bare ("?recurse"). */
static bool query_value(const char *query, const char *name, char *buf, size_t size)
{
    size_t n = strlen(name);
    buf[0] = '\0';
    for (const char *p = query; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
        if (strncmp(p, name, n) != 0 || (p[n] != '=' && p[n] != '&' && p[n] != '\0'))
            continue;
        if (p[n] != '=')
            return true;
        const char *v = p + n + 1, *end = strchr(v, '&');
        size_t len = end ? (size_t)(end - v) : strlen(v);
        char raw[3 * REL_MAX + 4];
        if (len >= sizeof raw)
            return false;
        memcpy(raw, v, len);
        raw[len] = '\0';
        for (char *q = raw; *q; q++)
            if (*q == '+')
                *q = ' ';
        size_t out = 0;
        char *dec = evhttp_uridecode(raw, 0, &out);
        bool ok = dec && out == strlen(dec) && out < size;
        if (ok)
            memcpy(buf, dec, out + 1);
        free(dec);
        return ok;
    }
    return false;
}

static bool query_true(const char *query, const char *name)
{
    char v[16];
    return query_value(query, name, v, sizeof v) && strcasecmp(v, "true") == 0;
}

/* ?overwrite: anything but "false" overwrites (ComfyUI's rule). */
static bool query_overwrite(const char *query)
{
    char v[16];
    return !(query_value(query, "overwrite", v, sizeof v) && strcmp(v, "false") == 0);
}

static void reply_status(svc_req *r, int status, const char *code, const char *msg)
{
    svc_reply_errorf(r, r->dialect, status, code, NULL, "%s", msg);
}

/* ------------------------------------------------------------------ walks */

typedef struct entry {
    char *rel; /* relative to the walk's base */
    bool dir;
    long long size;
    double mtime, ctime;
} entry;

typedef struct walk {
    entry *v;
    int n, cap;
    bool truncated;
} walk;

static void walk_free(walk *w)
{
    for (int i = 0; i < w->n; i++)
        free(w->v[i].rel);
    free(w->v);
}

/* The entries under base/prefix (prefix "" or "a/b"), recursively when
 * recurse; only names rel_ok would take (others are not ComfyUI data). */
static void walk_dir(const char *base, const char *prefix, bool recurse, bool dirs, walk *w,
                     int depth)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", base, prefix[0] ? "/" : "", prefix);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !comfy_userdata_path_ok(e->d_name))
            continue;
        if (w->n >= LIST_MAX) {
            w->truncated = true;
            break;
        }
        char rel[REL_MAX + 300], full[4400];
        snprintf(rel, sizeof rel, "%s%s%s", prefix, prefix[0] ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", base, rel);
        struct stat st;
        if (strlen(rel) > REL_MAX || lstat(full, &st) != 0 ||
            !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
            continue;
        bool is_dir = S_ISDIR(st.st_mode);
        if (!is_dir || dirs) {
            if (w->n == w->cap) {
                int cap = w->cap ? w->cap * 2 : 32;
                entry *nv = realloc(w->v, (size_t)cap * sizeof *nv);
                if (!nv)
                    break;
                w->v = nv;
                w->cap = cap;
            }
            entry *x = &w->v[w->n];
            x->rel = strdup(rel);
            if (!x->rel)
                break;
            x->dir = is_dir;
            x->size = (long long)st.st_size;
            x->mtime = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
            x->ctime = (double)st.st_ctim.tv_sec + st.st_ctim.tv_nsec * 1e-9;
            w->n++;
        }
        if (is_dir && recurse && depth < REL_NAMES)
            walk_dir(base, rel, recurse, dirs, w, depth + 1);
    }
    closedir(d);
}

static int cmp_rel(const void *a, const void *b)
{
    return strcmp(((const entry *)a)->rel, ((const entry *)b)->rel);
}

/* {path, size, modified, created} (ms), ComfyUI's FileInfo. */
static cJSON *file_info(const char *rel, const struct stat *st)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", rel);
    cJSON_AddNumberToObject(o, "size", (double)st->st_size);
    cJSON_AddNumberToObject(
        o, "modified",
        (double)((long long)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000));
    cJSON_AddNumberToObject(
        o, "created",
        (double)((long long)st->st_ctim.tv_sec * 1000 + st->st_ctim.tv_nsec / 1000000));
    return o;
}

/* Bytes and files in a user folder (for the quota). */
static void user_usage(const char *root, unsigned long long *bytes, int *files)
{
    walk w = {0};
    walk_dir(root, "", true, false, &w, 0);
    *bytes = 0;
    for (int i = 0; i < w.n; i++)
        *bytes += (unsigned long long)w.v[i].size;
    *files = w.truncated ? LIST_MAX + 1 : w.n;
    walk_free(&w);
}

/* ------------------------------------------------------------------ users */

/* GET /users: single-user ComfyUI's answer; POST /users: refused (one user
 * per key here, docs/compat-comfyui.md). */
void svc_comfy_users(svc_req *r, const char *rest)
{
    (void)rest;
    if (strcmp(r->method, "POST") == 0) {
        reply_status(r, 400, "invalid_request",
                     "this server has no user profiles to create: each API key (or, with keys "
                     "off, the one default user) has its own settings and user data");
        return;
    }
    char root[4096];
    user_root(r, root, sizeof root);
    struct stat st;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "storage", "server");
    cJSON_AddBoolToObject(o, "migrated", stat(root, &st) == 0 && S_ISDIR(st.st_mode));
    svc_reply_json(r, 200, o);
}

/* --------------------------------------------------------------- settings */

static cJSON *read_settings(const char *root, char *err, size_t err_size)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" SETTINGS_FILE, root);
    char *text = NULL;
    size_t len = 0;
    int rc = svc_read_file(path, &text, &len, SETTINGS_MAX);
    if (rc == -ENOENT)
        return cJSON_CreateObject();
    if (rc < 0) {
        snprintf(err, err_size, "the settings file cannot be read: %s", strerror(-rc));
        return NULL;
    }
    cJSON *o = svc_json_parse(text, len, err, err_size);
    free(text);
    if (o && !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        snprintf(err, err_size, "the settings file does not hold a JSON object");
        return NULL;
    }
    return o;
}

static int write_settings(const char *root, const cJSON *o)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" SETTINGS_FILE, root);
    char *text = cJSON_Print(o);
    if (!text)
        return -ENOMEM;
    size_t len = strlen(text);
    int rc = len > SETTINGS_MAX ? -EFBIG : svc_mkdirs(root);
    if (rc == 0)
        rc = svc_write_file_atomic(path, text, len);
    cJSON_free(text);
    return rc;
}

void svc_comfy_settings(svc_req *r, const char *rest)
{
    char root[4096], err[300];
    user_root(r, root, sizeof root);
    const char *id = rest[0] == '/' ? rest + 1 : NULL;
    if (id && (!id[0] || strlen(id) > 256)) {
        reply_status(r, 400, "invalid_request", "a setting id is 1..256 bytes");
        return;
    }
    cJSON *settings = read_settings(root, err, sizeof err);
    if (!settings) {
        reply_status(r, 500, "internal", err);
        return;
    }
    if (strcmp(r->method, "POST") != 0) {
        if (!id) {
            svc_reply_json(r, 200, settings);
            return;
        }
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(settings, id);
        cJSON_Delete(settings);
        svc_reply_json(r, 200, v ? v : cJSON_CreateNull());
        return;
    }
    size_t len = 0;
    const char *body = svc_req_body(r, &len);
    cJSON *value = svc_json_parse(body, len, err, sizeof err);
    if (!value || (!id && !cJSON_IsObject(value))) {
        cJSON_Delete(settings);
        if (value)
            reply_status(r, 400, "invalid_json", "the body must be a JSON object of settings");
        else
            svc_reply_errorf(r, r->dialect, 400, "invalid_json", NULL,
                             "the body is not valid JSON: %s", err);
        cJSON_Delete(value);
        return;
    }
    if (id) {
        cJSON_DeleteItemFromObjectCaseSensitive(settings, id);
        cJSON_AddItemToObject(settings, id, value);
    } else {
        for (cJSON *it = value->child; it;) {
            cJSON *next = it->next;
            const char *k = it->string;
            cJSON *item = cJSON_DetachItemViaPointer(value, it);
            cJSON_DeleteItemFromObjectCaseSensitive(settings, k);
            cJSON_AddItemToObject(settings, item->string, item);
            it = next;
        }
        cJSON_Delete(value);
    }
    int rc = write_settings(root, settings);
    cJSON_Delete(settings);
    if (rc < 0) {
        svc_reply_errorf(r, r->dialect, rc == -EFBIG ? 413 : 500,
                         rc == -EFBIG ? "too_large" : "internal", NULL,
                         rc == -EFBIG ? "the settings would pass 4 MiB"
                                      : "the settings could not be written: %s",
                         strerror(-rc));
        return;
    }
    svc_reply_buffer(r, 200, NULL, NULL);
}

/* ---------------------------------------------------------- listing files */

/* GET /userdata?dir=D&recurse=true&full_info=true&split=false */
void svc_comfy_userdata_list(svc_req *r, const char *rest)
{
    (void)rest;
    char dir[REL_MAX + 1], root[4096], base[4700];
    if (!query_value(r->query, "dir", dir, sizeof dir) || !dir[0]) {
        reply_status(r, 400, "invalid_request",
                     "the query needs dir=<folder of your user data> (decodable, at most 512 "
                     "bytes)");
        return;
    }
    while (strlen(dir) > 1 && dir[strlen(dir) - 1] == '/')
        dir[strlen(dir) - 1] = '\0';
    if (!comfy_userdata_path_ok(dir)) {
        reply_status(r, 403, "forbidden", "dir is not a folder name this server takes");
        return;
    }
    user_root(r, root, sizeof root);
    snprintf(base, sizeof base, "%s/%s", root, dir);
    struct stat st;
    if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) {
        reply_status(r, 404, "not_found", "no such folder in your user data");
        return;
    }
    const bool recurse = query_true(r->query, "recurse"), full = query_true(r->query, "full_info"),
               split = query_true(r->query, "split");
    walk w = {0};
    walk_dir(base, "", recurse, false, &w, 0);
    if (w.n > 1)
        qsort(w.v, (size_t)w.n, sizeof *w.v, cmp_rel);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < w.n; i++) {
        const entry *x = &w.v[i];
        if (full) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "path", x->rel);
            cJSON_AddNumberToObject(o, "size", (double)x->size);
            cJSON_AddNumberToObject(o, "modified", (double)(long long)(x->mtime * 1000));
            cJSON_AddNumberToObject(o, "created", (double)(long long)(x->ctime * 1000));
            cJSON_AddItemToArray(a, o);
        } else if (split) {
            cJSON *s = cJSON_CreateArray();
            cJSON_AddItemToArray(s, cJSON_CreateString(x->rel));
            char tmp[REL_MAX + 300];
            snprintf(tmp, sizeof tmp, "%s", x->rel);
            for (char *p = tmp, *q; p; p = q) {
                q = strchr(p, '/');
                if (q)
                    *q++ = '\0';
                cJSON_AddItemToArray(s, cJSON_CreateString(p));
            }
            cJSON_AddItemToArray(a, s);
        } else {
            cJSON_AddItemToArray(a, cJSON_CreateString(x->rel));
        }
    }
    walk_free(&w);
    svc_reply_json(r, 200, a);
}

static int cmp_v2(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->dir != y->dir)
        return x->dir ? -1 : 1;
    const char *nx = strrchr(x->rel, '/'), *ny = strrchr(y->rel, '/');
    int c = strcasecmp(nx ? nx + 1 : x->rel, ny ? ny + 1 : y->rel);
    return c ? c : strcmp(x->rel, y->rel);
}

/* GET /v2/userdata?path=P: everything under P (recursive, as ComfyUI's
 * os.walk), folders first, then by name. */
void svc_comfy_userdata_v2(svc_req *r, const char *rest)
{
    (void)rest;
    char rel[REL_MAX + 1], root[4096], base[4700];
    if (!query_value(r->query, "path", rel, sizeof rel) && rel[0]) {
        reply_status(r, 400, "invalid_request", "path cannot be decoded");
        return;
    }
    while (rel[0] && rel[strlen(rel) - 1] == '/')
        rel[strlen(rel) - 1] = '\0';
    if (rel[0] && !comfy_userdata_path_ok(rel)) {
        reply_status(r, 400, "invalid_request", "path is not a folder name this server takes");
        return;
    }
    user_root(r, root, sizeof root);
    snprintf(base, sizeof base, "%s%s%s", root, rel[0] ? "/" : "", rel);
    struct stat st;
    if (stat(base, &st) != 0) {
        if (!rel[0]) {
            svc_reply_json(r, 200, cJSON_CreateArray());
            return;
        }
        reply_status(r, 404, "not_found", "no such folder in your user data");
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        reply_status(r, 400, "invalid_request", "path is a file, not a folder");
        return;
    }
    walk w = {0};
    walk_dir(base, "", true, true, &w, 0);
    if (w.n > 1)
        qsort(w.v, (size_t)w.n, sizeof *w.v, cmp_v2);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < w.n; i++) {
        const entry *x = &w.v[i];
        const char *name = strrchr(x->rel, '/');
        char path[2 * REL_MAX + 4];
        snprintf(path, sizeof path, "%s%s%s", rel, rel[0] ? "/" : "", x->rel);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", name ? name + 1 : x->rel);
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddStringToObject(o, "type", x->dir ? "directory" : "file");
        if (!x->dir) {
            cJSON_AddNumberToObject(o, "size", (double)x->size);
            cJSON_AddNumberToObject(o, "modified", x->mtime);
        }
        cJSON_AddItemToArray(a, o);
    }
    walk_free(&w);
    svc_reply_json(r, 200, a);
}

/* ------------------------------------------------------------- one file */

/* The raw (still percent-encoded) path after "/userdata/", cut into the
 * file and, for ".../move/<dest>", the destination, each decoded once.
 * false when the URL has another shape (404). */
static bool file_args(svc_req *r, char *file, char *dest, size_t size)
{
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(r->req);
    const char *raw = u ? evhttp_uri_get_path(u) : NULL;
    const char *m = raw ? strstr(raw, "/userdata/") : NULL;
    if (!m)
        return false;
    const char *p = m + 10;
    const char *slash = strchr(p, '/');
    char seg[2][3 * REL_MAX + 4];
    const char *segs[2] = {p, NULL};
    size_t lens[2] = {slash ? (size_t)(slash - p) : strlen(p), 0};
    if (slash) {
        if (strncmp(slash, "/move/", 6) != 0 || strchr(slash + 6, '/'))
            return false;
        segs[1] = slash + 6;
        lens[1] = strlen(segs[1]);
    }
    char *outs[2] = {file, dest};
    dest[0] = '\0';
    for (int i = 0; i < 2 && segs[i]; i++) {
        if (lens[i] == 0 || lens[i] >= sizeof seg[i])
            return false;
        memcpy(seg[i], segs[i], lens[i]);
        seg[i][lens[i]] = '\0';
        size_t out = 0;
        char *dec = evhttp_uridecode(seg[i], 0, &out);
        bool ok = dec && out == strlen(dec) && out < size;
        if (ok)
            memcpy(outs[i], dec, out + 1);
        free(dec);
        if (!ok)
            return false;
    }
    return true;
}

static void make_parent(const char *path)
{
    char parent[4700];
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (slash) {
        *slash = '\0';
        svc_mkdirs(parent);
    }
}

/* The answer to a write or move: the relative path, or its FileInfo. */
static void reply_written(svc_req *r, const char *path, const char *rel)
{
    struct stat st;
    if (query_true(r->query, "full_info") && stat(path, &st) == 0)
        svc_reply_json(r, 200, file_info(rel, &st));
    else
        svc_reply_json(r, 200, cJSON_CreateString(rel));
}

static void get_file(svc_req *r, const char *path, const char *rel)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        reply_status(r, 404, "not_found", "no such file in your user data");
        return;
    }
    /* user data never renders inline (ComfyUI's rule): a download, with
     * JSON and pictures typed and everything else octet-stream, except the
     * user.css the page links */
    const char *dot = strrchr(rel, '.');
    const bool css = strcmp(rel, "user.css") == 0;
    const char *type = css                                ? "text/css; charset=utf-8"
                       : dot && strcmp(dot, ".json") == 0 ? "application/json"
                       : dot && strcmp(dot, ".png") == 0  ? "image/png"
                       : dot && strcmp(dot, ".webp") == 0 ? "image/webp"
                       : dot && (strcmp(dot, ".jpg") == 0 || strcmp(dot, ".jpeg") == 0)
                           ? "image/jpeg"
                           : "application/octet-stream";
    svc_req_add_header(r, "X-Content-Type-Options", "nosniff");
    svc_req_add_header(r, "Content-Disposition", css ? "inline" : "attachment");
    svc_req_add_header(r, "Cache-Control", "no-cache");
    struct evbuffer *buf = evbuffer_new();
    if (!buf || (st.st_size > 0 && evbuffer_add_file(buf, fd, 0, st.st_size) < 0)) {
        close(fd);
        if (buf)
            evbuffer_free(buf);
        reply_status(r, 500, "internal", "the file could not be read");
        return;
    }
    if (st.st_size == 0)
        close(fd);
    svc_reply_buffer(r, 200, type, buf);
    evbuffer_free(buf);
}

static void post_file(svc_req *r, const char *root, const char *path, const char *rel)
{
    struct stat st;
    const bool exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) {
        reply_status(r, 400, "invalid_request", "that name is a folder of your user data");
        return;
    }
    if (exists && !query_overwrite(r->query)) {
        reply_status(r, 409, "conflict", "the file already exists (overwrite=false)");
        return;
    }
    size_t len = 0;
    const char *body = svc_req_body(r, &len);
    unsigned long long bytes = 0;
    int files = 0;
    user_usage(root, &bytes, &files);
    if (exists)
        bytes -= (unsigned long long)st.st_size < bytes ? (unsigned long long)st.st_size : bytes;
    if (bytes + len > USER_BYTES_MAX || (!exists && files >= USER_FILES_MAX)) {
        reply_status(r, 413, "too_large",
                     "your user data would pass its bounds (256 MiB in 10000 files)");
        return;
    }
    make_parent(path);
    int rc = svc_write_file_atomic(path, body ? body : "", len);
    if (rc < 0) {
        svc_reply_errorf(r, r->dialect, 400, "invalid_request", NULL,
                         "the file could not be written: %s", strerror(-rc));
        return;
    }
    reply_written(r, path, rel);
}

static void move_file(svc_req *r, const char *root, const char *from, const char *dest_rel)
{
    char to[4700];
    snprintf(to, sizeof to, "%s/%s", root, dest_rel);
    struct stat st;
    if (lstat(from, &st) != 0 || !S_ISREG(st.st_mode)) {
        reply_status(r, 404, "not_found", "no such file in your user data");
        return;
    }
    struct stat dst;
    const bool exists = lstat(to, &dst) == 0;
    if (exists && S_ISDIR(dst.st_mode)) {
        reply_status(r, 400, "invalid_request", "the destination is a folder of your user data");
        return;
    }
    if (exists && !query_overwrite(r->query)) {
        reply_status(r, 409, "conflict", "the destination already exists (overwrite=false)");
        return;
    }
    make_parent(to);
    if (rename(from, to) != 0) {
        svc_reply_errorf(r, r->dialect, 500, "internal", NULL, "the file could not be moved: %s",
                         strerror(errno));
        return;
    }
    reply_written(r, to, dest_rel);
}

/* GET|POST|DELETE /userdata/{file}, POST /userdata/{file}/move/{dest} */
void svc_comfy_userdata(svc_req *r, const char *rest)
{
    (void)rest;
    char file[REL_MAX + 1], dest[REL_MAX + 1], root[4096], path[4700];
    if (!file_args(r, file, dest, sizeof file)) {
        reply_status(r, 404, "not_found",
                     "no such path: user data is /userdata/<file> with the file's '/' sent as "
                     "%2F, or /userdata/<file>/move/<dest>");
        return;
    }
    if (!comfy_userdata_path_ok(file) || (dest[0] && !comfy_userdata_path_ok(dest))) {
        reply_status(r, 403, "forbidden",
                     "a user data path is 1..16 names of 1..255 printable bytes without "
                     "\\ : * ? \" < > |, none starting with '.'");
        return;
    }
    user_root(r, root, sizeof root);
    snprintf(path, sizeof path, "%s/%s", root, file);
    const bool post = strcmp(r->method, "POST") == 0;
    if (dest[0]) {
        if (!post) {
            svc_reply_method_not_allowed(r, r->dialect, "POST");
            return;
        }
        move_file(r, root, path, dest);
    } else if (post) {
        post_file(r, root, path, file);
    } else if (strcmp(r->method, "DELETE") == 0) {
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            reply_status(r, 404, "not_found", "no such file in your user data");
            return;
        }
        if (unlink(path) != 0) {
            svc_reply_errorf(r, r->dialect, 500, "internal", NULL,
                             "the file could not be deleted: %s", strerror(errno));
            return;
        }
        svc_reply_buffer(r, 204, NULL, NULL);
    } else {
        get_file(r, path, file);
    }
}
