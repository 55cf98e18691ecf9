/*
 * service/api/native/jobs_json.c - what jobs and batches look like on the wire: the
 * objects of GET /v1/jobs/{id} and /v1/batches/{id}, the job.json sidecar
 * (written, and read back at start), the journal's accept record, and SSE
 * event text (docs/service-design.md, "HTTP contract").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "jobs.h"
#include "json.h"
#include "server.h"
#include "tiles.h"
#include "util.h"

/* Every image, tile and manifest URL is written here, through
 * svc_url_format (signed with keys on; s NULL: the bare path). */
static void url(const svc_server *s, const svc_job *j, const char *path, char *buf, size_t size)
{
    svc_url_format(s ? &s->urls : NULL, path, j->created, buf, size);
}

void svc_image_url(const svc_server *s, const svc_job *j, int index, char *buf, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/images/%d.png", j->ids, index);
    url(s, j, path, buf, size);
}

void svc_tile_url(const svc_server *s, const svc_job *j, int index, int version, int row,
                  int col, char *buf, size_t size)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/images/%d/tiles/%d/%d_%d.jpg", j->ids, index,
             version, row, col);
    url(s, j, path, buf, size);
}

void svc_manifest_url(const svc_server *s, const svc_job *j, int index, char *buf, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/images/%d/tiles", j->ids, index);
    url(s, j, path, buf, size);
}

static cJSON *error_json(const svc_job *j)
{
    if (!j->error_code)
        return cJSON_CreateNull();
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "code", j->error_code);
    cJSON_AddStringToObject(e, "message", j->error_message ? j->error_message : "");
    return e;
}

static cJSON *job_json(const svc_server *s, const svc_job *j, bool file)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "id", j->ids);
    cJSON_AddStringToObject(o, "state", svc_state_name(j->state));
    svc_json_add_number_or_null(o, "position", j->position,
                                !file && j->queued_images > 0 && j->position >= 0);
    int step = 0, steps = 0;
    for (int i = 0; i < j->n; i++) {
        step += j->images[i].step;
        steps += j->images[i].steps;
    }
    cJSON_AddNumberToObject(o, "step", step);
    cJSON_AddNumberToObject(o, "steps", steps);
    cJSON_AddNumberToObject(o, "created", j->created);
    svc_json_add_number_or_null(o, "started", j->started, j->started > 0);
    svc_json_add_number_or_null(o, "finished", j->finished, j->finished > 0);
    cJSON_AddItemToObject(o, "error", error_json(j));
    svc_json_add_string_or_null(o, "batch", j->batch ? j->batch->ids : NULL);
    if (file)
        cJSON_AddNumberToObject(o, "batch_index", j->batch_index);
    cJSON_AddItemToObject(o, "params", cJSON_Duplicate(j->view, 1));
    cJSON *images = cJSON_AddArrayToObject(o, "images");
    for (int i = 0; i < j->n; i++) {
        const svc_image *img = &j->images[i];
        cJSON *im = cJSON_CreateObject();
        cJSON_AddNumberToObject(im, "index", i);
        cJSON_AddItemToObject(im, "seed", svc_json_u64(img->seed));
        cJSON_AddStringToObject(im, "state", svc_state_name(img->state));
        cJSON_AddNumberToObject(im, "step", img->step);
        bool stored = img->state == SVC_DONE && img->etag[0];
        char u[256];
        svc_image_url(file ? NULL : s, j, i, u, sizeof u); /* job.json: the bare path */
        svc_json_add_string_or_null(im, "url", stored ? u : NULL);
        svc_json_add_string_or_null(im, "infotext", stored ? img->infotext : NULL);
        if (file) {
            cJSON_AddNumberToObject(im, "steps", img->steps);
            svc_json_add_string_or_null(im, "etag", stored ? img->etag : NULL);
            cJSON_AddNumberToObject(im, "bytes", (double)img->bytes);
        }
        cJSON_AddItemToArray(images, im);
    }
    return o;
}

cJSON *svc_job_json(svc_server *s, const svc_job *j)
{
    return job_json(s, j, false);
}

cJSON *svc_job_file_json(svc_server *s, const svc_job *j)
{
    cJSON *o = job_json(s, j, true);
    if (o)
        cJSON_AddNumberToObject(o, "version", 1);
    if (o && j->owner[0])
        cJSON_AddStringToObject(o, "owner", j->owner);
    return o;
}

static void batch_counts(const svc_batch *b, int counts[5])
{
    memset(counts, 0, 5 * sizeof counts[0]);
    for (int i = 0; i < b->n; i++)
        counts[b->jobs[i]->state]++;
}

static cJSON *counts_json(const svc_batch *b)
{
    int counts[5];
    batch_counts(b, counts);
    cJSON *c = cJSON_CreateObject();
    for (int i = 0; i < 5; i++)
        cJSON_AddNumberToObject(c, svc_state_name((svc_state)i), counts[i]);
    return c;
}

cJSON *svc_batch_json(svc_server *s, const svc_batch *b)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "id", b->ids);
    cJSON_AddStringToObject(o, "state", b->final_jobs >= b->n ? "done" : "running");
    cJSON_AddItemToObject(o, "counts", counts_json(b));
    cJSON *jobs = cJSON_AddArrayToObject(o, "jobs");
    for (int i = 0; i < b->n; i++) {
        const svc_job *j = b->jobs[i];
        cJSON *jo = cJSON_CreateObject();
        cJSON_AddStringToObject(jo, "id", j->ids);
        cJSON_AddStringToObject(jo, "state", svc_state_name(j->state));
        cJSON *images = cJSON_AddArrayToObject(jo, "images");
        for (int k = 0; k < j->n; k++) {
            cJSON *im = cJSON_CreateObject();
            cJSON_AddNumberToObject(im, "index", k);
            char u[256];
            svc_image_url(s, j, k, u, sizeof u);
            svc_json_add_string_or_null(im, "url", j->images[k].state == SVC_DONE &&
                                                           j->images[k].etag[0]
                                                       ? u
                                                       : NULL);
            cJSON_AddItemToArray(images, im);
        }
        cJSON_AddItemToArray(jobs, jo);
    }
    return o;
}

static void sse_event(struct evbuffer *out, uint32_t id, const char *name, cJSON *data)
{
    char *text = data ? cJSON_PrintUnformatted(data) : NULL;
    evbuffer_add_printf(out, "id: %u\nevent: %s\ndata: %s\n\n", id, name, text ? text : "{}");
    cJSON_free(text);
    cJSON_Delete(data);
}

void svc_job_event_sse(const svc_server *s, const svc_job *j, uint32_t index,
                       struct evbuffer *out)
{
    const svc_event *ev = &j->hist.ev[index];
    cJSON *d = cJSON_CreateObject();
    const char *name = "message";
    char url[256];
    switch ((svc_event_kind)ev->kind) {
    case SVC_EV_QUEUED:
        name = "queued";
        cJSON_AddNumberToObject(d, "position", ev->a);
        break;
    case SVC_EV_STARTED: name = "started"; break;
    case SVC_EV_STEP:
        name = "step";
        cJSON_AddNumberToObject(d, "image", ev->a);
        cJSON_AddNumberToObject(d, "step", ev->b);
        cJSON_AddNumberToObject(d, "steps", ev->c);
        cJSON_AddNumberToObject(d, "eta", round((double)ev->eta * 1000.0) / 1000.0);
        break;
    case SVC_EV_IMAGE:
        name = "image";
        svc_image_url(s, j, ev->a, url, sizeof url);
        cJSON_AddNumberToObject(d, "index", ev->a);
        cJSON_AddStringToObject(d, "url", url);
        cJSON_AddItemToObject(d, "seed", svc_json_u64(j->images[ev->a].seed));
        break;
    case SVC_EV_DONE: name = "done"; break;
    case SVC_EV_FAILED:
        name = "failed";
        cJSON_AddItemToObject(d, "error", error_json(j));
        break;
    case SVC_EV_CANCELLED: name = "cancelled"; break;
    case SVC_EV_TILES: {
        name = "tiles";
        cJSON_AddNumberToObject(d, "image", ev->a);
        cJSON_AddNumberToObject(d, "step", ev->c);
        svc_manifest_url(s, j, ev->a, url, sizeof url);
        cJSON_AddStringToObject(d, "manifest", url);
        cJSON *arr = cJSON_AddArrayToObject(d, "tiles");
        const svc_tilemap *m = j->images[ev->a].tiles;
        if (m && ev->b >= 0 && ev->b < m->n_pubs) {
            const svc_tile_publish *p = &m->pubs[ev->b];
            for (int k = 0; k < p->n; k++) {
                cJSON *t = cJSON_CreateObject();
                cJSON_AddNumberToObject(t, "row", p->refs[k].row);
                cJSON_AddNumberToObject(t, "col", p->refs[k].col);
                cJSON_AddNumberToObject(t, "version", p->refs[k].version);
                char turl[256];
                svc_tile_url(s, j, ev->a, p->refs[k].version, p->refs[k].row, p->refs[k].col,
                             turl, sizeof turl);
                cJSON_AddStringToObject(t, "url", turl);
                cJSON_AddItemToArray(arr, t);
            }
        }
        break;
    }
    default: break;
    }
    sse_event(out, index + 1, name, d);
}

void svc_batch_event_sse(const svc_server *s, const svc_batch *b, uint32_t index,
                         struct evbuffer *out)
{
    const svc_event *ev = &b->hist.ev[index];
    cJSON *d = cJSON_CreateObject();
    const char *name = "message";
    const svc_job *j = ev->job >= 0 && ev->job < b->n ? b->jobs[ev->job] : NULL;
    char url[256];
    switch ((svc_event_kind)ev->kind) {
    case SVC_EV_B_IMAGE:
        name = "image";
        if (j) {
            svc_image_url(s, j, ev->a, url, sizeof url);
            cJSON_AddStringToObject(d, "job", j->ids);
            cJSON_AddNumberToObject(d, "index", ev->a);
            cJSON_AddStringToObject(d, "url", url);
            cJSON_AddItemToObject(d, "seed", svc_json_u64(j->images[ev->a].seed));
        }
        break;
    case SVC_EV_B_JOB:
        name = "job";
        if (j) {
            cJSON_AddStringToObject(d, "job", j->ids);
            cJSON_AddStringToObject(d, "state", svc_state_name(j->state));
        }
        break;
    case SVC_EV_B_DONE:
        name = "done";
        cJSON_AddItemToObject(d, "counts", counts_json(b));
        break;
    default: break;
    }
    sse_event(out, index + 1, name, d);
}

bool svc_job_stream_over(const svc_job *j)
{
    if (!j->hist.n)
        return false;
    uint8_t k = j->hist.ev[j->hist.n - 1].kind;
    return k == SVC_EV_DONE || k == SVC_EV_FAILED || k == SVC_EV_CANCELLED;
}

bool svc_batch_stream_over(const svc_batch *b)
{
    return b->hist.n && b->hist.ev[b->hist.n - 1].kind == SVC_EV_B_DONE;
}

/* ---------------------------------------------------------- persistence */

char *svc_job_accept_record(const svc_job *j)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "record", "accept");
    cJSON_AddStringToObject(o, "id", j->ids);
    cJSON_AddNumberToObject(o, "created", j->created);
    svc_json_add_string_or_null(o, "batch", j->batch ? j->batch->ids : NULL);
    cJSON_AddNumberToObject(o, "batch_index", j->batch_index);
    if (j->owner[0])
        cJSON_AddStringToObject(o, "owner", j->owner);
    cJSON *req = svc_params_request(j->params);
    if (!req) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToObject(o, "request", req);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

static uint64_t u64_of(const cJSON *it)
{
    const char *lit = svc_json_literal(it);
    return lit && svc_json_literal_is_integer(lit) && lit[0] != '-' ? strtoull(lit, NULL, 10) : 0;
}

static double num_of(const cJSON *o, const char *name)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(it) ? it->valuedouble : 0;
}

static const char *str_of(const cJSON *o, const char *name)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

static svc_state state_of(const char *name)
{
    for (int i = 0; i < 5; i++)
        if (name && strcmp(name, svc_state_name((svc_state)i)) == 0)
            return (svc_state)i;
    return (svc_state)-1;
}

svc_job *svc_job_from_file(const char *json, size_t len)
{
    char err[128];
    cJSON *o = svc_json_parse(json, len, err, sizeof err);
    if (!o)
        return NULL;
    svc_job *j = NULL;
    uint64_t id;
    const cJSON *images = cJSON_GetObjectItemCaseSensitive(o, "images");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(o, "params");
    svc_state state = state_of(str_of(o, "state"));
    int n = cJSON_GetArraySize(images);
    if (!svc_id_parse(str_of(o, "id"), 'j', &id) || !svc_state_final(state) ||
        !cJSON_IsArray(images) || n < 1 || n > SVC_MAX_IMAGES_PER_JOB || !cJSON_IsObject(params))
        goto done;
    j = calloc(1, sizeof *j);
    if (!j)
        goto done;
    j->id = id;
    svc_id_format('j', id, j->ids);
    j->state = state;
    j->n = n;
    j->created = num_of(o, "created");
    j->started = num_of(o, "started");
    j->finished = num_of(o, "finished");
    j->created_mono = svc_now_mono();
    j->position = -1;
    j->batch_index = (int)num_of(o, "batch_index");
    uint64_t bid = 0;
    if (svc_id_parse(str_of(o, "batch"), 'b', &bid))
        j->batch_id = bid;
    j->steps = (int)num_of(params, "steps");
    svc_job_set_owner(j, str_of(o, "owner"));
    j->persisted = true;
    j->view = cJSON_Duplicate(params, 1);
    j->images = calloc((size_t)n, sizeof *j->images);
    if (!j->view || !j->images) {
        svc_job_free(j);
        j = NULL;
        goto done;
    }
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(o, "error");
    if (cJSON_IsObject(error)) {
        const char *c = str_of(error, "code"), *m = str_of(error, "message");
        j->error_code = strdup(c ? c : "generation_failed");
        j->error_message = strdup(m ? m : "");
    }
    if (j->started > 0)
        svc_history_add(&j->hist, (svc_event){SVC_EV_STARTED, 0, 0, 0, 0, 0});
    int i = 0;
    const cJSON *img;
    cJSON_ArrayForEach(img, images)
    {
        svc_image *im = &j->images[i];
        im->state = state_of(str_of(img, "state"));
        if (!svc_state_final(im->state))
            im->state = SVC_CANCELLED;
        im->seed = u64_of(cJSON_GetObjectItemCaseSensitive(img, "seed"));
        im->steps = (int)num_of(img, "steps");
        im->step = (int)num_of(img, "step");
        const char *etag = str_of(img, "etag"), *info = str_of(img, "infotext");
        if (im->state == SVC_DONE && (!etag || strlen(etag) != 32))
            im->state = SVC_FAILED; /* no file to serve */
        if (etag && im->state == SVC_DONE)
            snprintf(im->etag, sizeof im->etag, "%s", etag);
        im->bytes = (size_t)num_of(img, "bytes");
        if (info)
            im->infotext = strdup(info);
        if (im->state == SVC_DONE)
            svc_history_add(&j->hist, (svc_event){SVC_EV_IMAGE, 0, i, 0, 0, 0});
        i++;
    }
    svc_history_add(&j->hist, (svc_event){state == SVC_DONE     ? SVC_EV_DONE
                                          : state == SVC_FAILED ? SVC_EV_FAILED
                                                                : SVC_EV_CANCELLED,
                                          0, 0, 0, 0, 0});
done:
    cJSON_Delete(o);
    return j;
}
