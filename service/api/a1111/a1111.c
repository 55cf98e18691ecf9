/*
 * service/api/a1111/a1111.c - the AUTOMATIC1111-compatible API: the router of
 * /sdapi/v1, txt2img / img2img, progress, interrupt and skip
 * (docs/compat-a1111.md).  The read-only lists and /options live in
 * a1111_info.c, the request translator in a1111_params.c.
 *
 * A txt2img/img2img call ("call" below) is translated, split into native
 * jobs of at most 16 images, journaled and queued like any POST /v1/jobs,
 * then waits: a svc_watch on each job counts the final events, and when the
 * last job ends the PNGs are read back from the data directory and the
 * call answers in A1111's shape.  Nothing else differs from a native job,
 * so its images share UNet calls with everything else in the queue.
 *
 * A client that goes away while its call waits (EOF seen by a read watch on
 * the socket, as the SSE streams do, or evhttp freeing the connection)
 * cancels the call's jobs: nobody can receive the images any more (they
 * stay readable under /v1/jobs for what finished).  At shutdown the jobs
 * are left as they are (they rerun at the next start, as every queued job).
 *
 * Owner: the event loop, alone.
 */
#include "a1111.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "gate.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "server.h"
#include "images.h"
#include "stream.h"
#include "tiles.h"
#include "util.h"


typedef struct a1111_call a1111_call;

struct svc_a1111 {
    int clip_skip;                /* POST /options CLIP_stop_at_last_layers */
    cJSON *options;               /* the options set (a1111_options.c) */
    a1111_call *head, *tail;      /* calls in flight, oldest first */
    bool interrupted, skipped;    /* since the last call started */
    char job_timestamp[16];       /* of the last call */
};

typedef struct call_watch {
    svc_watch w;
    a1111_call *call;
} call_watch;

struct a1111_call {
    svc_server *s;
    svc_req *r;                   /* NULL once the client is gone */
    svc_a1111_req q;
    svc_job **jobs;               /* n_jobs, borrowed from the job table once accepted */
    call_watch *watches;          /* n_jobs */
    int n_jobs, finals;
    bool accepted, listed, holding, gone;
    double t0;                    /* monotonic start */
    char timestamp[16];
    svc_peer peer;                /* the client, while the call waits (stream.h) */
    a1111_call *prev, *next;
};

/* ------------------------------------------------------------------ state */

svc_a1111 *svc_a1111_state(svc_server *s)
{
    if (!s->a1111) {
        s->a1111 = calloc(1, sizeof *s->a1111);
        if (s->a1111) {
            s->a1111->clip_skip = 1;
            s->a1111->options = svc_a1111_options_load(s); /* may set clip_skip */
        }
    }
    return s->a1111;
}

cJSON *svc_a1111_options_set(svc_server *s)
{
    svc_a1111 *a = svc_a1111_state(s);
    return a ? a->options : NULL;
}

int svc_a1111_clip_skip(svc_server *s)
{
    svc_a1111 *a = svc_a1111_state(s);
    return a ? a->clip_skip : 1;
}

void svc_a1111_set_clip_skip(svc_server *s, int v)
{
    svc_a1111 *a = svc_a1111_state(s);
    if (a)
        a->clip_skip = v;
}

static void call_free(a1111_call *c);

void svc_a1111_free(svc_server *s)
{
    svc_a1111 *a = s->a1111;
    if (!a)
        return;
    /* calls still listed lost their connection with the HTTP server */
    while (a->head) {
        a1111_call *c = a->head;
        a->head = c->next;
        c->listed = false;
        call_free(c);
    }
    cJSON_Delete(a->options);
    free(a);
    s->a1111 = NULL;
}

/* ------------------------------------------------------------------ replies */

/* ------------------------------------------------------------------ calls */

static void list_remove(a1111_call *c)
{
    if (!c->listed)
        return;
    svc_a1111 *a = c->s->a1111;
    if (c->prev)
        c->prev->next = c->next;
    else
        a->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        a->tail = c->prev;
    c->prev = c->next = NULL;
    c->listed = false;
}

/* Stop hearing about the connection (before replying or freeing). */
static void detach_conn(a1111_call *c)
{
    svc_peer_stop(&c->peer);
}

static void unwatch_all(a1111_call *c)
{
    if (!c->accepted)
        return;
    for (int i = 0; i < c->n_jobs; i++)
        if (c->watches[i].call) {
            svc_job_unwatch(c->jobs[i], &c->watches[i].w);
            c->watches[i].call = NULL;
        }
}

static void call_free(a1111_call *c)
{
    if (!c)
        return;
    list_remove(c);
    detach_conn(c);
    unwatch_all(c);
    if (c->r) {
        /* only at shutdown: the connection is gone with the HTTP server */
        c->r->req = NULL;
        svc_req_finish(c->r, 499);
        c->r = NULL;
    }
    svc_a1111_req_free(&c->q);
    free(c->jobs);
    free(c->watches);
    free(c);
}

/* Cancel what has not ended (the loop may be re-entered through the watch,
 * which only counts while `holding`). */
static void cancel_jobs(a1111_call *c, int only_first)
{
    svc_server *s = c->s;
    if (!c->accepted || s->phase != SVC_PHASE_READY)
        return;
    c->holding = true;
    for (int i = 0; i < c->n_jobs; i++) {
        if (svc_state_final(c->jobs[i]->state))
            continue;
        svc_job_cancel(s, c->jobs[i]);
        if (only_first)
            break;
    }
    c->holding = false;
    svc_jobs_update_positions(s);
}

/* The client went away: cancel, then free. */
static void abandon(a1111_call *c)
{
    list_remove(c);
    detach_conn(c);
    unwatch_all(c);
    if (c->accepted) {
        for (int i = 0; i < c->n_jobs; i++)
            if (c->s->phase == SVC_PHASE_READY && !svc_state_final(c->jobs[i]->state))
                svc_job_cancel(c->s, c->jobs[i]);
        svc_jobs_update_positions(c->s);
        call_free(c);
    }
    /* not accepted yet: on_accepted frees it */
}

/* The client went away (stream.h's peer watch).  Closed by evhttp: r is
 * gone with the connection (a detached request is freed here).  EOF:
 * answer into the void (evhttp then sees the close).  Then cancel. */
static void on_gone(void *arg)
{
    a1111_call *c = arg;
    const char *what = c->q.img2img ? "img2img" : "txt2img";
    if (c->peer.closed) {
        svc_peer_release(&c->peer, c->r, false, 499);
        c->r = NULL;
        SVC_INFO("a1111: the connection of a %s call closed; %s", what,
                 c->s->phase == SVC_PHASE_READY ? "its jobs are cancelled"
                                                : "its jobs stay queued (shutdown)");
    } else {
        detach_conn(c);
        if (c->r)
            svc_a1111_reply_error(c->r, 499, "client_closed", NULL,
                                  "the client closed the connection");
        c->r = NULL;
        SVC_INFO("a1111: the client of a %s call went away; its jobs are cancelled", what);
    }
    c->gone = true;
    abandon(c);
}

static void watch_conn(a1111_call *c)
{
    svc_peer_watch(&c->peer, c->r, on_gone, c);
}

/* ------------------------------------------------------------------ answer */

static char *preview_b64(svc_server *s, svc_job *j, int index);

static char *image_b64(svc_server *s, const svc_job *j, int index)
{
    return svc_store_image_b64(s->cfg.data_dir, j->ids, index);
}

static void add_u64_array(cJSON *o, const char *name, uint64_t first, int n)
{
    cJSON *a = cJSON_AddArrayToObject(o, name);
    for (int i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, svc_json_u64(first + (uint64_t)i));
}

static cJSON *info_json(a1111_call *c, cJSON *infotexts)
{
    const svc_a1111_req *q = &c->q;
    svc_server *s = c->s;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "prompt", q->prompt);
    cJSON *ap = cJSON_AddArrayToObject(o, "all_prompts");
    cJSON *an = NULL;
    for (int i = 0; ap && i < q->total; i++)
        cJSON_AddItemToArray(ap, cJSON_CreateString(q->prompt));
    cJSON_AddStringToObject(o, "negative_prompt", q->negative_prompt);
    an = cJSON_AddArrayToObject(o, "all_negative_prompts");
    for (int i = 0; an && i < q->total; i++)
        cJSON_AddItemToArray(an, cJSON_CreateString(q->negative_prompt));
    cJSON_AddItemToObject(o, "seed", svc_json_u64(q->seed));
    add_u64_array(o, "all_seeds", q->seed, q->total);
    cJSON_AddItemToObject(o, "subseed", svc_json_u64((uint64_t)q->subseed));
    add_u64_array(o, "all_subseeds", (uint64_t)q->subseed, q->total);
    cJSON_AddNumberToObject(o, "subseed_strength", q->subseed_strength);
    cJSON_AddNumberToObject(o, "width", q->width);
    cJSON_AddNumberToObject(o, "height", q->height);
    cJSON_AddStringToObject(o, "sampler_name", q->sampler_name);
    cJSON_AddNumberToObject(o, "cfg_scale", q->cfg_scale);
    cJSON_AddNumberToObject(o, "steps", q->steps);
    cJSON_AddNumberToObject(o, "batch_size", q->batch_size);
    cJSON_AddFalseToObject(o, "restore_faces");
    cJSON_AddNullToObject(o, "face_restoration_model");
    cJSON_AddStringToObject(o, "sd_model_name", s->model_name);
    const char *hash = s->engine0 ? tsr_engine_model_hash(s->engine0) : "";
    svc_json_add_string_or_null(o, "sd_model_hash", hash && hash[0] ? hash : NULL);
    cJSON_AddNullToObject(o, "sd_vae_name");
    cJSON_AddNullToObject(o, "sd_vae_hash");
    cJSON_AddNumberToObject(o, "seed_resize_from_w", -1);
    cJSON_AddNumberToObject(o, "seed_resize_from_h", -1);
    svc_json_add_number_or_null(o, "denoising_strength", q->denoising_strength,
                                q->img2img || q->hires);
    cJSON *extra = cJSON_AddObjectToObject(o, "extra_generation_params");
    if (extra && strcmp(q->scheduler, "Automatic") != 0)
        cJSON_AddStringToObject(extra, "Schedule type", q->scheduler);
    if (extra && q->hires) { /* what A1111's txt2img init adds with enable_hr */
        cJSON_AddNumberToObject(extra, "Denoising strength", q->denoising_strength);
        if (q->hr_resize_x || q->hr_resize_y) {
            char size[48];
            snprintf(size, sizeof size, "%dx%d", q->hr_resize_x, q->hr_resize_y);
            cJSON_AddStringToObject(extra, "Hires resize", size);
        } else {
            cJSON_AddNumberToObject(extra, "Hires upscale", q->hr_scale);
        }
        if (q->hr_steps)
            cJSON_AddNumberToObject(extra, "Hires steps", q->hr_steps);
        if (q->hr_upscaler[0])
            cJSON_AddStringToObject(extra, "Hires upscaler", q->hr_upscaler);
    }
    cJSON_AddNumberToObject(o, "index_of_first_image", 0);
    cJSON_AddItemToObject(o, "infotexts", infotexts);
    cJSON *styles = q->styles && cJSON_IsArray(q->styles) ? cJSON_Duplicate(q->styles, true)
                                                          : cJSON_CreateArray();
    cJSON_AddItemToObject(o, "styles", styles);
    cJSON_AddStringToObject(o, "job_timestamp", c->timestamp);
    cJSON_AddNumberToObject(o, "clip_skip", q->clip_skip);
    cJSON_AddBoolToObject(o, "is_using_inpainting_conditioning",
                          q->img2img && s->inpainting &&
                              cJSON_GetObjectItemCaseSensitive(q->native, "mask") != NULL);
    char version[48];
    snprintf(version, sizeof version, "tessera-%s", tsr_version());
    cJSON_AddStringToObject(o, "version", version);
    return o;
}

/* Every job is final: answer. */
static void finish(a1111_call *c)
{
    svc_server *s = c->s;
    list_remove(c);
    detach_conn(c);
    unwatch_all(c);
    svc_req *r = c->r;
    c->r = NULL;
    if (!r) {
        call_free(c);
        return;
    }
    for (int i = 0; i < c->n_jobs; i++) {
        const svc_job *j = c->jobs[i];
        if (j->state == SVC_FAILED) {
            svc_a1111_reply_error(r, 500, j->error_code ? j->error_code : "generation_failed",
                                  NULL, "%s (job %s)",
                                  j->error_message ? j->error_message : "generation failed",
                                  j->ids);
            call_free(c);
            return;
        }
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *images = cJSON_AddArrayToObject(o, "images");
    cJSON *infotexts = cJSON_CreateArray();
    bool ok = o && images && infotexts;
    for (int i = 0; ok && i < c->n_jobs; i++) {
        svc_job *j = c->jobs[i];
        for (int k = 0; ok && k < j->n; k++) {
            const svc_image *img = &j->images[k];
            if (img->state == SVC_CANCELLED && img->step > 0 && c->q.send_images) {
                /* interrupted mid-way: A1111 answers with the image as far
                 * as it got; this is its latest preview */
                char *b = preview_b64(s, j, k);
                if (!b)
                    continue;
                char text[200];
                snprintf(text, sizeof text, "interrupted at step %d of %d; seed %llu; the "
                         "latest preview", img->step, img->steps, (unsigned long long)img->seed);
                cJSON_AddItemToArray(infotexts, cJSON_CreateString(text));
                cJSON_AddItemToArray(images, cJSON_CreateString(b));
                free(b);
                continue;
            }
            if (img->state != SVC_DONE)
                continue;
            cJSON_AddItemToArray(infotexts, cJSON_CreateString(img->infotext ? img->infotext
                                                                             : ""));
            if (!c->q.send_images)
                continue;
            char *b = image_b64(s, j, k);
            ok = b != NULL;
            if (ok)
                cJSON_AddItemToArray(images, cJSON_CreateString(b));
            free(b);
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        cJSON_Delete(infotexts);
        svc_a1111_reply_error(r, 500, "internal", NULL,
                              "an image could not be read back from the data directory");
        call_free(c);
        return;
    }
    cJSON_AddItemToObject(o, "parameters", c->q.parameters);
    c->q.parameters = NULL;
    cJSON *info = info_json(c, infotexts);
    char *text = info ? cJSON_PrintUnformatted(info) : NULL;
    cJSON_Delete(info);
    cJSON_AddStringToObject(o, "info", text ? text : "{}");
    cJSON_free(text);
    svc_reply_json(r, 200, o);
    call_free(c);
}

static void on_job_event(svc_server *s, svc_job *j, const svc_event *ev, void *arg)
{
    (void)s;
    (void)j;
    call_watch *w = arg;
    a1111_call *c = w->call;
    if (ev->kind != SVC_EV_DONE && ev->kind != SVC_EV_FAILED && ev->kind != SVC_EV_CANCELLED)
        return;
    svc_job_unwatch(j, &w->w);
    w->call = NULL;
    if (++c->finals == c->n_jobs && !c->holding)
        finish(c);
}

static void on_accepted(void *user, int status)
{
    a1111_call *c = user;
    svc_server *s = c->s;
    svc_gate g;
    if (!svc_gate_accepted(status, "the jobs", &g)) {
        /* the jobs were freed by svc_server_accept */
        c->n_jobs = 0;
        if (c->r) {
            detach_conn(c);
            svc_gate_reply(c->r, &g, NULL);
            c->r = NULL;
        }
        call_free(c);
        return;
    }
    c->accepted = true;
    if (c->gone) {
        abandon(c);
        return;
    }
    svc_a1111 *a = svc_a1111_state(s);
    a->interrupted = a->skipped = false;
    snprintf(a->job_timestamp, sizeof a->job_timestamp, "%s", c->timestamp);
    c->prev = a->tail;
    if (a->tail)
        a->tail->next = c;
    else
        a->head = c;
    a->tail = c;
    c->listed = true;
    c->holding = true;
    for (int i = 0; i < c->n_jobs; i++) {
        if (svc_state_final(c->jobs[i]->state)) {
            c->finals++;
            continue;
        }
        c->watches[i].w.on_event = on_job_event;
        c->watches[i].w.arg = &c->watches[i];
        c->watches[i].call = c;
        svc_job_watch(c->jobs[i], &c->watches[i].w);
    }
    c->holding = false;
    if (c->finals == c->n_jobs)
        finish(c);
}

/* parse -> gate -> accept (service/jobs/gate.h) */
static void generate(svc_req *r, bool img2img)
{
    svc_server *s = r->srv;
    if (!svc_gate_open_or_reply(r))
        return;
    svc_gate g;
    svc_a1111 *a = svc_a1111_state(s);
    a1111_call *c = a ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        svc_a1111_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    c->s = s;
    c->t0 = svc_now_mono();
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(c->timestamp, sizeof c->timestamp, "%Y%m%d%H%M%S", &tm);
    size_t len = 0;
    const char *body = svc_req_body(r, &len);
    char why[256];
    cJSON *obj = svc_json_parse(body, len, why, sizeof why);
    if (!obj) {
        free(c);
        svc_a1111_reply_error(r, 400, "invalid_json", NULL, "the body is not valid JSON: %s", why);
        return;
    }
    svc_a1111_defaults d = {svc_a1111_clip_skip(s), TSR_MAX_SIZE};
    svc_a1111_error e;
    int rc = svc_a1111_translate(obj, img2img, &d, &c->q, &e);
    cJSON_Delete(obj);
    if (rc < 0) {
        free(c);
        svc_a1111_reply_error(r, e.status, e.status == 422 ? "invalid_parameter" : "invalid_json",
                              e.field, "%s", e.message);
        return;
    }
    int n = svc_a1111_chunks(&c->q);
    c->jobs = calloc((size_t)n, sizeof *c->jobs);
    c->watches = calloc((size_t)n, sizeof *c->watches);
    svc_params **ps = calloc((size_t)n, sizeof *ps);
    if (!c->jobs || !c->watches || !ps) {
        free(ps);
        call_free(c);
        svc_a1111_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    int k = 0;
    for (; k < n; k++) {
        int images = 0;
        cJSON *chunk = svc_a1111_chunk(&c->q, k, &images);
        svc_param_error pe;
        if (!chunk) {
            svc_a1111_reply_error(r, 500, "internal", NULL, "out of memory");
            break;
        }
        rc = svc_gate_parse(s, chunk, NULL, &ps[k], &pe);
        cJSON_Delete(chunk);
        if (rc < 0) {
            /* native names in the message; A1111's in front when they differ */
            const char *f = svc_a1111_field(pe.field);
            if (strcmp(f, "scheduler") == 0 && c->q.schedule_in_name)
                f = "sampler_name"; /* "DDIM Karras": the schedule came with the name */
            if (f[0] && strcmp(f, pe.field) != 0)
                svc_a1111_reply_error(r, 422, "invalid_parameter", f, "%s: %s", f, pe.message);
            else
                svc_a1111_reply_error(r, 422, "invalid_parameter", f, "%s", pe.message);
            break;
        }
    }
    if (k == n && !svc_gate_check(s, svc_key_name(r->key), ps, n, &g)) {
        svc_gate_reply(r, &g, NULL);
        k = -1;
    }
    double created = svc_now_unix();
    for (int i = 0; k == n && i < n; i++) {
        c->jobs[i] = svc_job_new(svc_jobs_new_id(s->jobs), ps[i], created);
        if (c->jobs[i])
            svc_job_set_owner(c->jobs[i], svc_key_name(r->key));
        if (!c->jobs[i]) {
            svc_a1111_reply_error(r, 500, "internal", NULL, "out of memory");
            k = -1;
            break;
        }
        ps[i] = NULL; /* the job holds it */
        c->n_jobs = i + 1;
    }
    if (k != n) {
        for (int i = 0; i < n; i++) {
            svc_params_unref(ps[i]);
            if (c->jobs[i])
                svc_job_free(c->jobs[i]);
        }
        free(ps);
        c->n_jobs = 0;
        call_free(c);
        return;
    }
    free(ps);
    c->r = r;
    watch_conn(c);
    svc_gate_accept(s, c->jobs, n, on_accepted, c);
}

/* --------------------------------------------------------------- progress */

static bool query_flag(const svc_req *r, const char *name)
{
    if (!r->query)
        return false;
    size_t nl = strlen(name);
    for (const char *p = r->query; p && *p;) {
        if (strncmp(p, name, nl) == 0 && p[nl] == '=')
            return strncasecmp(p + nl + 1, "true", 4) == 0 || p[nl + 1] == '1';
        p = strchr(p, '&');
        if (p)
            p++;
    }
    return false;
}

/* The running image's latest preview, composed from its current tiles
 * (missing cells mid-grey: A1111's clients poll). */
static char *preview_b64(svc_server *s, svc_job *j, int index)
{
    return svc_tiles_preview_png_b64(svc_image_tiles(s, j, index), false);
}

/* Whether r's key may see call c: its own calls (a call's jobs share the
 * key that made them); keys off or admin: every call (docs/security.md). */
static bool call_seen(const svc_req *r, const a1111_call *c)
{
    return svc_key_sees(r->key, c->n_jobs > 0 && c->jobs[0] ? c->jobs[0]->owner : "");
}

/* The A1111 state (*a) and the oldest call in flight that r's key may see
 * (*c, NULL when none); false when out of memory, r answered. */
static bool oldest_seen(svc_req *r, svc_a1111 **a, a1111_call **c)
{
    *a = svc_a1111_state(r->srv);
    *c = NULL;
    if (!*a) {
        svc_a1111_reply_error(r, 500, "internal", NULL, "out of memory");
        return false;
    }
    for (*c = (*a)->head; *c && !call_seen(r, *c);)
        *c = (*c)->next;
    return true;
}

void svc_a1111_progress(svc_req *r, const char *rest)
{
    (void)rest;
    svc_server *s = r->srv;
    svc_a1111 *a;
    a1111_call *c;
    if (!oldest_seen(r, &a, &c))
        return;
    long long done = 0, total = 0;
    int job_no = 0, step = 0, steps = 0;
    svc_job *cur_job = NULL;
    int cur_index = -1, first_open = -1, seen = 0;
    for (int i = 0; c && i < c->n_jobs; i++) {
        svc_job *j = c->jobs[i];
        for (int k = 0; k < j->n; k++, seen++) {
            const svc_image *img = &j->images[k];
            total += img->steps;
            done += img->state == SVC_DONE ? img->steps : img->step;
            if (img->state == SVC_RUNNING && !cur_job) {
                cur_job = j;
                cur_index = k;
                step = img->step;
                steps = img->steps;
            }
            if (!svc_state_final(img->state) && first_open < 0)
                first_open = seen;
        }
    }
    if (c && first_open >= 0)
        job_no = first_open / (c->q.batch_size > 0 ? c->q.batch_size : 1);
    double prog = total > 0 ? (double)done / (double)total : 0.0;
    double elapsed = c ? svc_now_mono() - c->t0 : 0;
    double eta = prog > 0 ? elapsed / prog - elapsed : 0.0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "progress", prog);
    cJSON_AddNumberToObject(o, "eta_relative", eta);
    cJSON *st = cJSON_AddObjectToObject(o, "state");
    cJSON_AddBoolToObject(st, "skipped", a->skipped);
    cJSON_AddBoolToObject(st, "interrupted", a->interrupted);
    cJSON_AddFalseToObject(st, "stopping_generation");
    cJSON_AddStringToObject(st, "job", c ? (c->q.img2img ? "scripts_img2img" : "scripts_txt2img")
                                         : "");
    cJSON_AddNumberToObject(st, "job_count", c ? c->q.n_iter : 0);
    cJSON_AddStringToObject(st, "job_timestamp", a->job_timestamp[0] ? a->job_timestamp : "0");
    cJSON_AddNumberToObject(st, "job_no", job_no);
    cJSON_AddNumberToObject(st, "sampling_step", step);
    cJSON_AddNumberToObject(st, "sampling_steps", steps ? steps : c ? c->q.steps : 0);
    char *img = NULL;
    if (cur_job && !query_flag(r, "skip_current_image"))
        img = preview_b64(s, cur_job, cur_index);
    svc_json_add_string_or_null(o, "current_image", img);
    free(img);
    char text[96];
    if (c && cur_job)
        snprintf(text, sizeof text, "Step %d/%d", step, steps);
    else if (c)
        snprintf(text, sizeof text, "Queued");
    svc_json_add_string_or_null(o, "textinfo", c ? text : NULL);
    svc_reply_json(r, 200, o);
}

/* POST /interrupt: every call in flight ends now with what it has;
 * POST /skip: the oldest call's current job (up to 16 images) ends. */
static void stop_calls(svc_req *r, bool skip)
{
    svc_a1111 *a;
    a1111_call *c;
    if (!oldest_seen(r, &a, &c))
        return;
    if (c) {
        if (skip)
            a->skipped = true;
        else
            a->interrupted = true;
    }
    while (c) {
        a1111_call *next = c->next;
        if (!call_seen(r, c)) {
            c = next;
            continue;
        }
        cancel_jobs(c, skip);
        if (c->finals == c->n_jobs)
            finish(c);
        if (skip)
            break;
        c = next;
    }
    svc_reply_json(r, 200, cJSON_CreateObject());
}

/* ------------------------------------------------------------------ routes */

void svc_a1111_generate(svc_req *r, const char *rest)
{
    generate(r, strcmp(rest, "/img2img") == 0);
}

void svc_a1111_stop(svc_req *r, const char *rest)
{
    stop_calls(r, strcmp(rest, "/skip") == 0);
}
