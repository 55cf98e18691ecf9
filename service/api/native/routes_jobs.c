/*
 * service/api/native/routes_jobs.c - /v1/jobs: submit, read, cancel, follow, and fetch
 * images (docs/service-design.md, "Endpoints").
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "gate.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "routes.h"
#include "server.h"
#include "sse.h"
#include "tiles.h"
#include "util.h"


/* ---------------------------------------------------------------- submit */

typedef struct submit_ctx {
    svc_req *r;
    svc_job *job;
} submit_ctx;

static cJSON *accepted_json(const svc_job *j)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->ids);
    cJSON_AddStringToObject(o, "state", svc_state_name(j->state));
    cJSON_AddNumberToObject(o, "position", j->position < 0 ? 0 : j->position);
    cJSON_AddNumberToObject(o, "images", j->n);
    cJSON_AddItemToObject(o, "seed", svc_json_u64(j->images[0].seed));
    cJSON_AddNumberToObject(o, "created", j->created);
    cJSON *urls = cJSON_AddObjectToObject(o, "urls");
    char buf[96];
    snprintf(buf, sizeof buf, "/v1/jobs/%s", j->ids);
    cJSON_AddStringToObject(urls, "self", buf);
    snprintf(buf, sizeof buf, "/v1/jobs/%s/events", j->ids);
    cJSON_AddStringToObject(urls, "events", buf);
    return o;
}

static void on_accepted(void *user, int status)
{
    submit_ctx *c = user;
    svc_req *r = c->r;
    svc_job *j = c->job;
    free(c);
    svc_gate g;
    if (!svc_gate_accepted(status, "the job", &g)) {
        svc_gate_reply(r, &g, NULL);
        return;
    }
    char loc[64];
    snprintf(loc, sizeof loc, "/v1/jobs/%s", j->ids);
    svc_req_add_header(r, "Location", loc);
    svc_reply_json(r, 202, accepted_json(j));
}

/* parse -> gate -> accept (service/jobs/gate.h) */
static void submit(svc_req *r)
{
    svc_server *s = r->srv;
    if (!svc_gate_open_or_reply(r))
        return;
    svc_gate g;
    cJSON *obj = svc_req_json_object(r);
    if (!obj)
        return;
    svc_params *p = NULL;
    svc_param_error pe;
    int rc = svc_gate_parse(s, obj, NULL, &p, &pe);
    cJSON_Delete(obj);
    if (rc < 0) {
        svc_reply_error(r, 400, "invalid_parameter", pe.field, "%s", pe.message);
        return;
    }
    if (!svc_gate_check(s, svc_key_name(r->key), &p, 1, &g)) {
        svc_params_unref(p);
        svc_gate_reply(r, &g, NULL);
        return;
    }
    svc_job *j = svc_job_new(svc_jobs_new_id(s->jobs), p, svc_now_unix());
    if (j)
        svc_job_set_owner(j, svc_key_name(r->key));
    submit_ctx *c = j ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        svc_job_free(j);
        if (!j)
            svc_params_unref(p);
        svc_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    c->r = r;
    c->job = j;
    svc_gate_accept(s, &j, 1, on_accepted, c);
}

/* ----------------------------------------------------------------- reads */

static void send_job(svc_req *r, svc_job *j, int status)
{
    svc_reply_json(r, status, svc_job_json(r->srv, j));
}

bool svc_native_last_event_id(svc_req *r, uint32_t *out)
{
    const char *h = svc_req_header(r, "Last-Event-ID");
    *out = 0;
    unsigned long long v = 0;
    bool ok = true;
    for (const char *p = h ? h : ""; ok && *p; p++) {
        ok = *p >= '0' && *p <= '9' && v <= 0xFFFFFFFFull;
        v = v * 10 + (unsigned)(*p - '0');
    }
    if (!ok || v > 0xFFFFFFFFull) {
        svc_reply_error(r, 400, "invalid_parameter", "Last-Event-ID",
                        "Last-Event-ID must be a non-negative integer event id");
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

static bool etag_matches(const char *header, const char *quoted)
{
    if (!header)
        return false;
    if (strstr(header, "*"))
        return true;
    return strstr(header, quoted) != NULL;
}

/* Cache-Control of the immutable bytes (PNGs, tiles): public for a year
 * with keys off; with keys on, public until the signed URL that let the
 * request in expires, or private when a key did (a shared cache must not
 * hand a key's answer to whoever asks next; docs/security.md). */
static void immutable_cache(svc_req *r)
{
    char v[80];
    if (r->signed_until > 0) {
        long long left = r->signed_until - (long long)svc_now_unix();
        snprintf(v, sizeof v, "public, max-age=%lld, immutable", left > 0 ? left : 0);
    } else {
        snprintf(v, sizeof v, "%s, max-age=31536000, immutable",
                 r->srv->keys.n > 0 ? "private" : "public");
    }
    svc_req_add_header(r, "Cache-Control", v);
}

/* The head of an immutable resource's answer (PNG, tile): its ETag and
 * Cache-Control; true when If-None-Match has it and r got its 304. */
static bool immutable_not_modified(svc_req *r, const char *etag_hex)
{
    char etag[40];
    snprintf(etag, sizeof etag, "\"%s\"", etag_hex);
    svc_req_add_header(r, "ETag", etag);
    immutable_cache(r);
    if (!etag_matches(svc_req_header(r, "If-None-Match"), etag))
        return false;
    svc_reply_buffer(r, 304, NULL, NULL);
    return true;
}

/* 200 with a copy of data[0..len) as `type`; 500 when out of memory. */
static void reply_bytes(svc_req *r, const char *type, const void *data, size_t len)
{
    struct evbuffer *buf = evbuffer_new();
    if (!buf || evbuffer_add(buf, data, len) < 0) {
        if (buf)
            evbuffer_free(buf);
        svc_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    svc_reply_buffer(r, 200, type, buf);
    evbuffer_free(buf);
}

static void send_image(svc_req *r, svc_job *j, int index)
{
    svc_server *s = r->srv;
    const svc_image *img = &j->images[index];
    if (img->state != SVC_DONE || !img->etag[0]) {
        svc_reply_error(r, 404, "not_found", NULL, "image %d of %s is not done (it is %s)", index,
                        j->ids, svc_state_name(img->state));
        return;
    }
    if (immutable_not_modified(r, img->etag))
        return;
    char *data = NULL;
    size_t len = 0;
    if (svc_store_read_image(s->cfg.data_dir, j->ids, index, &data, &len) < 0) {
        svc_reply_error(r, 404, "not_found", NULL, "image %d of %s is missing from the data "
                        "directory", index, j->ids);
        return;
    }
    reply_bytes(r, "image/png", data, len);
    free(data);
}

/* ----------------------------------------------------------------- tiles */

static void send_tile(svc_req *r, svc_job *j, int index, int version, int row, int col)
{
    const svc_tilemap *m = svc_image_tiles(r->srv, j, index);
    const svc_tile_blob *b = svc_tilemap_find(m, version, row, col);
    if (!b) {
        svc_reply_error(r, 404, "not_found", NULL, "no tile %d_%d version %d of image %d of %s",
                        row, col, version, index, j->ids);
        return;
    }
    if (!immutable_not_modified(r, b->etag))
        reply_bytes(r, "image/jpeg", b->jpeg, b->len);
}

static void send_manifest(svc_req *r, svc_job *j, int index)
{
    const svc_tilemap *m = svc_image_tiles(r->srv, j, index);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "image", index);
    cJSON_AddStringToObject(o, "state", svc_state_name(j->images[index].state));
    cJSON_AddBoolToObject(o, "final", m && m->final);
    cJSON_AddNumberToObject(o, "step", m ? m->step : 0);
    cJSON_AddNumberToObject(o, "tile_size", m ? m->tile_size : r->srv->cfg.tile_size);
    const cJSON *pw = cJSON_GetObjectItemCaseSensitive(j->view, "width");
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(j->view, "height");
    int w = m ? m->width : cJSON_IsNumber(pw) ? (int)pw->valuedouble : 0;
    int h = m ? m->height : cJSON_IsNumber(ph) ? (int)ph->valuedouble : 0;
    int ts = m ? m->tile_size : r->srv->cfg.tile_size;
    cJSON_AddNumberToObject(o, "width", w);
    cJSON_AddNumberToObject(o, "height", h);
    cJSON_AddNumberToObject(o, "rows", m ? m->rows : (h + ts - 1) / ts);
    cJSON_AddNumberToObject(o, "cols", m ? m->cols : (w + ts - 1) / ts);
    cJSON *arr = cJSON_AddArrayToObject(o, "tiles");
    for (int rr = 0; m && rr < m->rows; rr++) {
        for (int cc = 0; cc < m->cols; cc++) {
            const svc_tile_blob *b = svc_tilemap_current(m, rr, cc);
            if (!b)
                continue;
            cJSON *t = cJSON_CreateObject();
            cJSON_AddNumberToObject(t, "row", rr);
            cJSON_AddNumberToObject(t, "col", cc);
            cJSON_AddNumberToObject(t, "version", b->version);
            char url[256];
            svc_tile_url(r->srv, j, index, b->version, rr, cc, url, sizeof url);
            cJSON_AddStringToObject(t, "url", url);
            cJSON_AddItemToArray(arr, t);
        }
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) {
        svc_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    char hex[65], etag[40];
    svc_sha256_hex(text, strlen(text), hex);
    snprintf(etag, sizeof etag, "\"%.32s\"", hex);
    svc_req_add_header(r, "ETag", etag);
    /* a key's answer stays out of shared caches (immutable_cache) */
    svc_req_add_header(r, "Cache-Control",
                       r->srv->keys.n > 0 && r->signed_until <= 0 ? "private, no-cache"
                                                                  : "no-cache");
    if (etag_matches(svc_req_header(r, "If-None-Match"), etag)) {
        cJSON_free(text);
        svc_reply_buffer(r, 304, NULL, NULL);
        return;
    }
    struct evbuffer *buf = evbuffer_new();
    if (buf)
        evbuffer_add(buf, text, strlen(text));
    cJSON_free(text);
    svc_reply_buffer(r, 200, "application/json", buf);
    if (buf)
        evbuffer_free(buf);
}

/* A number as the server writes it in URLs: decimal digits, no sign, no
 * leading zero, at most max.  Advances *p past it.  One spelling per
 * number, so every image and tile has one URL (a CDN's cache rule and
 * its cache key match the URL as written). */
static bool url_number(const char **p, long max, long *out)
{
    const char *s = *p;
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
        return false;
    long v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        v = v * 10 + (*s - '0');
        if (v > max)
            return false;
    }
    *out = v;
    *p = s;
    return true;
}

/* "<i>/tiles" (manifest) or "<i>/tiles/<version>/<row>_<col>.jpg" after
 * /images/; false when name has neither shape. */
static bool parse_tile_path(const char *name, long *index, long *version, long *row, long *col,
                            bool *manifest)
{
    *version = *row = *col = 0;
    const char *p = name;
    if (!url_number(&p, 1000000, index) || strncmp(p, "/tiles", 6) != 0)
        return false;
    p += 6;
    *manifest = p[0] == '\0';
    if (*manifest)
        return true;
    if (*p++ != '/' || !url_number(&p, 1000000000, version) || *p++ != '/' ||
        !url_number(&p, 100000, row) || *p++ != '_' || !url_number(&p, 100000, col))
        return false;
    return strcmp(p, ".jpg") == 0;
}

/* --queue: what a tile or image request waits for on an api node whose
 * follower is a few events behind the node that announced the URL: the
 * resource, or the job's end. */
static bool resource_ready(svc_server *s, const char *rest, uint64_t id)
{
    svc_job *j = svc_jobs_find(s->jobs, id);
    if (!j || svc_state_final(j->state))
        return true;
    const char *name = strstr(rest, "/images/");
    if (!name)
        return true;
    name += 8;
    long index = 0, version = 0, row = 0, col = 0;
    bool manifest = false;
    if (parse_tile_path(name, &index, &version, &row, &col, &manifest)) {
        if (manifest || index < 0 || index >= j->n)
            return true;
        return svc_tilemap_find(j->images[index].tiles, (int)version, (int)row, (int)col) != NULL;
    }
    index = strtol(name, NULL, 10);
    return index < 0 || index >= j->n || svc_state_final(j->images[index].state);
}

/* --queue: a job another api node accepted is known here once the
 * follower has read its accept event (docs/scale-out.md), normally within
 * a millisecond of its 202.  A request for an unknown job (or batch) waits
 * for it up to LOOKUP_WAIT_S, looking again every 10 ms, before the 404;
 * a cancel waits for its own `cancel` event the same way (CANCEL_WAIT_S). */
#define LOOKUP_WAIT_S 1.0
#define CANCEL_WAIT_S 2.0


typedef struct lookup_wait {
    svc_req *r;
    const char *rest; /* in r's path */
    uint64_t id;
    double deadline;
    bool (*ready)(svc_server *s, const char *rest, uint64_t id);
    void (*again)(svc_req *r, const char *rest);
    struct event *ev;
} lookup_wait;

static void on_lookup_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lookup_wait *w = arg;
    if (!w->ready(w->r->srv, w->rest, w->id) && svc_now_mono() < w->deadline) {
        struct timeval tv = {0, 10000};
        evtimer_add(w->ev, &tv);
        return;
    }
    event_free(w->ev);
    svc_req *r = w->r;
    const char *rest = w->rest;
    void (*again)(svc_req *, const char *) = w->again;
    free(w);
    r->waited = true;
    again(r, rest);
}

bool svc_route_wait(svc_req *r, const char *rest, uint64_t id, double seconds,
                    bool (*ready)(svc_server *s, const char *rest, uint64_t id),
                    void (*again)(svc_req *r, const char *rest))
{
    lookup_wait *w = calloc(1, sizeof *w);
    if (!w)
        return false;
    w->r = r;
    w->rest = rest;
    w->id = id;
    w->deadline = svc_now_mono() + seconds;
    w->ready = ready;
    w->again = again;
    w->ev = evtimer_new(r->srv->base, on_lookup_timer, w);
    struct timeval tv = {0, 10000};
    if (!w->ev || evtimer_add(w->ev, &tv) < 0) {
        if (w->ev)
            event_free(w->ev);
        free(w);
        return false;
    }
    return true;
}

static bool job_known(svc_server *s, const char *rest, uint64_t id)
{
    (void)rest;
    return svc_jobs_find(s->jobs, id) != NULL;
}

static bool job_final(svc_server *s, const char *rest, uint64_t id)
{
    (void)rest;
    svc_job *j = svc_jobs_find(s->jobs, id);
    return !j || svc_state_final(j->state);
}

/* A cluster cancel's answer, once this node's follower has applied the
 * `cancel` event (so the job's `cancelled` event has the same id on every
 * api node), or CANCEL_WAIT_S later (Redis away: cancelled here alone). */
static void cancel_done(svc_req *r, const char *rest)
{
    svc_server *s = r->srv;
    uint64_t jid = 0;
    svc_route_id(rest, 'j', &jid);
    svc_job *j = jid ? svc_jobs_find(s->jobs, jid) : NULL;
    if (!j) {
        svc_reply_error(r, 404, "not_found", NULL, "no job %.40s", rest + 1);
        return;
    }
    if (!svc_state_final(j->state)) {
        SVC_WARN("job %s: the cluster's cancel did not come back in %.0f s; cancelled on this "
                 "node only",
                 j->ids, CANCEL_WAIT_S);
        svc_job_cancel(s, j);
        svc_jobs_update_positions(s);
    }
    if (j->state != SVC_CANCELLED) {
        svc_reply_error(r, 409, "conflict", NULL, "job %s is already %s", j->ids,
                        svc_state_name(j->state));
        return;
    }
    send_job(r, j, 200);
}

/* ------------------------------------------------------------- the routes */

void svc_jobs_submit(svc_req *r, const char *rest)
{
    (void)rest;
    submit(r);
}

bool svc_route_await(svc_req *r, const char *rest, uint64_t id, bool known,
                     bool (*ready)(svc_server *s, const char *rest, uint64_t id),
                     void (*handler)(svc_req *r, const char *rest))
{
    svc_server *s = r->srv;
    return !known && id && !r->waited && s->cluster && s->cfg.role != TSR_ROLE_WORKER &&
           svc_route_wait(r, rest, id, LOOKUP_WAIT_S, ready, handler);
}

static bool batch_known(svc_server *s, const char *rest, uint64_t id)
{
    (void)rest;
    return svc_jobs_find_batch(s->jobs, id) != NULL;
}

void *svc_route_lookup(svc_req *r, const char *rest, char kind,
                       void (*handler)(svc_req *r, const char *rest))
{
    svc_server *s = r->srv;
    uint64_t id;
    svc_route_id(rest, kind, &id);
    void *found = !id ? NULL
                  : kind == 'j' ? (void *)svc_jobs_find(s->jobs, id)
                                : (void *)svc_jobs_find_batch(s->jobs, id);
    /* another user key's job or batch answers as one that does not exist
     * (a batch's jobs share its owner); no wait for it under --queue */
    if (found && !svc_key_sees(r->key, kind == 'j' ? ((svc_job *)found)->owner
                                                  : svc_batch_owner((svc_batch *)found))) {
        svc_reply_error(r, 404, "not_found", NULL, "no %s %.40s", kind == 'j' ? "job" : "batch",
                        rest + 1);
        return NULL;
    }
    if (svc_route_await(r, rest, id, found != NULL, kind == 'j' ? job_known : batch_known,
                        handler))
        return NULL;
    if (!found)
        svc_reply_error(r, 404, "not_found", NULL, "no %s %.40s", kind == 'j' ? "job" : "batch",
                        rest + 1);
    return found;
}

/* GET, HEAD, DELETE /v1/jobs/<id> */
void svc_jobs_job(svc_req *r, const char *rest)
{
    svc_server *s = r->srv;
    svc_job *j = svc_route_lookup(r, rest, 'j', svc_jobs_job);
    if (!j)
        return;
    if (strcmp(r->method, "DELETE") == 0 && s->cluster && !svc_state_final(j->state) &&
        s->cfg.role != TSR_ROLE_WORKER) {
        /* every api node cancels it when its follower reads the cancel */
        svc_cluster_cancel(s->cluster, j->id);
        if (svc_route_wait(r, rest, j->id, CANCEL_WAIT_S, job_final, cancel_done))
            return;
    }
    if (strcmp(r->method, "DELETE") == 0) {
        if (!svc_job_cancel(s, j)) {
            svc_reply_error(r, 409, "conflict", NULL, "job %s is already %s", j->ids,
                            svc_state_name(j->state));
            return;
        }
        if (s->cluster)
            svc_cluster_cancel(s->cluster, j->id);
        svc_jobs_update_positions(s);
    }
    send_job(r, j, 200);
}

/* GET /v1/jobs/<id>/events */
void svc_jobs_events(svc_req *r, const char *rest)
{
    svc_job *j = svc_route_lookup(r, rest, 'j', svc_jobs_events);
    if (!j)
        return;
    uint32_t last = 0;
    if (!svc_native_last_event_id(r, &last))
        return;
    svc_sse_open_job(r->srv, r, j, last);
}

/* The name after "/<id>/images/". */
static const char *image_name(const char *rest)
{
    const char *p = strstr(rest, "/images/");
    return p ? p + 8 : "";
}

bool svc_jobs_is_tile_path(const char *rest)
{
    long index, version, row, col;
    bool manifest;
    return parse_tile_path(image_name(rest), &index, &version, &row, &col, &manifest);
}

/* "<i>.png": decimal, no sign, no leading zero. */
static bool png_index(const char *name, long *index)
{
    char *end = NULL;
    errno = 0;
    *index = strtol(name, &end, 10);
    return name[0] >= '0' && name[0] <= '9' && end && strcmp(end, ".png") == 0 && errno == 0 &&
           (name[0] != '0' || end == name + 1);
}

bool svc_jobs_is_image_name(const char *rest)
{
    long index;
    return png_index(image_name(rest), &index);
}

/* GET, HEAD /v1/jobs/<id>/images/<i>.png and .../<i>/tiles[/<v>/<row>_<col>.jpg] */
void svc_jobs_image(svc_req *r, const char *rest)
{
    svc_server *s = r->srv;
    svc_job *j = svc_route_lookup(r, rest, 'j', svc_jobs_image);
    if (!j || svc_route_await(r, rest, j->id, resource_ready(s, rest, j->id), resource_ready,
                              svc_jobs_image))
        return;
    const char *name = image_name(rest);
    long index = 0, version = 0, row = 0, col = 0;
    bool manifest = false;
    const bool tile = parse_tile_path(name, &index, &version, &row, &col, &manifest);
    if (!tile)
        png_index(name, &index);
    if (index < 0 || index >= j->n) {
        svc_reply_error(r, 404, "not_found", NULL, "job %s has %d image%s; no image %ld", j->ids,
                        j->n, j->n == 1 ? "" : "s", index);
        return;
    }
    if (!tile)
        send_image(r, j, (int)index);
    else if (manifest)
        send_manifest(r, j, (int)index);
    else
        send_tile(r, j, (int)index, (int)version, (int)row, (int)col);
}

void svc_jobs_tiles(svc_req *r, const char *rest)
{
    svc_jobs_image(r, rest);
}

void svc_jobs_no_image(svc_req *r, const char *rest)
{
    svc_reply_error(r, 404, "not_found", NULL, "no such image: %.60s", image_name(rest));
}
