/*
 * service/api/openai/openai_stream.c - `stream: true` on the OpenAI images routes:
 * Server-Sent Events in OpenAI's shapes (docs/compat-openai.md).
 *
 *   event: image_generation.partial_image   (image_edit.* for edits)
 *   data: {"type", "b64_json", "partial_image_index", "created_at", "size",
 *          "quality", "background", "output_format"}
 *   ...
 *   event: image_generation.completed       (one per image)
 *   data: {"type", "b64_json", "created_at", "size", "quality", "background",
 *          "output_format", "usage"}
 *
 * Partial images come from the job's preview tiles (tiles.h): when a
 * preview of image i is published at step s and s has reached the next
 * partial's share of the steps (partial k of P is due at step
 * ceil((k+1) * steps / (P+1))), the image's current tiles are decoded,
 * assembled and sent as a PNG.  Previews that the encoder dropped, or a job
 * that ends first, give fewer partials than asked (OpenAI says "up to").
 * A failed or cancelled job ends the stream with `event: error`, whose
 * data {"type": "error", "error": {...}} the official client raises.
 *
 * The reply is the long-reply primitive's (stream.h): one chunk in
 * flight, the rest waits in `pending` (bounded: at most n x
 * (partial_images + 1) events), a comment line every 15 s.  A client that
 * goes away cancels its job (openai.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "openai.h"
#include "log.h"
#include "server.h"
#include "images.h"
#include "tiles.h"
#include "util.h"

/* The stream asks for its next chunk: what is pending; complete once the
 * job's end was queued and sent. */
static bool next_chunk(void *arg, struct evbuffer *out)
{
    oai_call *c = arg;
    if (evbuffer_get_length(c->pending)) {
        evbuffer_add_buffer(out, c->pending);
        return true;
    }
    return !c->closing;
}

/* The stream ended whole: r was answered. */
static void on_done(void *arg)
{
    oai_call *c = arg;
    c->r = NULL;
    oai_call_finish(c);
}

static void end_now(oai_call *c)
{
    if (svc_stream_end(&c->st, NULL))
        c->r = NULL;
    oai_call_finish(c);
}

void oai_stream_start(oai_call *c)
{
    svc_req *r = c->r;
    c->pending = evbuffer_new();
    if (!c->pending || !r || !r->req) {
        oai_stream_abort(c);
        return;
    }
    svc_req_add_header(r, "X-Tessera-Job", c->job->ids);
    c->started = true;
    svc_stream_begin(&c->st, &c->peer, next_chunk, on_done, c);
}

void oai_stream_abort(oai_call *c)
{
    if (c->done)
        return;
    if (c->pending)
        evbuffer_drain(c->pending, evbuffer_get_length(c->pending));
    if (!c->started || c->peer.closed) {
        /* nothing more can be sent: the deferred free ends what is left */
        oai_call_finish(c);
        return;
    }
    end_now(c);
}

static void error_event(oai_call *c, const char *code, const char *msg);

void oai_stream_shutdown(oai_call *c)
{
    if (c->done)
        return;
    if (c->started && !c->peer.closed && c->r && svc_peer_answerable(&c->peer)) {
        error_event(c, "unavailable", "the server is shutting down: the job reruns at the next "
                    "start (see X-Tessera-Job)");
        /* past the flow control: the last bytes go out with the end */
        if (svc_stream_end(&c->st, c->pending))
            c->r = NULL;
    }
    oai_stream_abort(c);
}

/* ------------------------------------------------------------ the events */

static void add_event(oai_call *c, const char *name, cJSON *data)
{
    char *text = cJSON_PrintUnformatted(data);
    cJSON_Delete(data);
    if (!text) {
        SVC_WARN("openai: out of memory writing a stream event of %s", c->job->ids);
        return;
    }
    evbuffer_add_printf(c->pending, "event: %s\ndata: %s\n\n", name, text);
    cJSON_free(text);
    svc_stream_pump(&c->st);
}

static cJSON *image_event(oai_call *c, const char *kind, char *type, size_t type_size,
                          const char *b64)
{
    snprintf(type, type_size, "%s.%s", c->edit ? "image_edit" : "image_generation", kind);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddStringToObject(o, "b64_json", b64);
    cJSON_AddNumberToObject(o, "created_at", (double)(long long)svc_now_unix());
    char size[32];
    snprintf(size, sizeof size, "%dx%d", c->width, c->height);
    cJSON_AddStringToObject(o, "size", size);
    cJSON_AddStringToObject(o, "quality", c->quality);
    cJSON_AddStringToObject(o, "background", c->background);
    cJSON_AddStringToObject(o, "output_format", "png");
    return o;
}

static void error_event(oai_call *c, const char *code, const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "error");
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", "server_error");
    cJSON_AddNullToObject(e, "param");
    cJSON_AddStringToObject(e, "code", code);
    add_event(c, "error", o);
}


static void maybe_partial(oai_call *c, const svc_event *ev)
{
    svc_job *j = c->job;
    int idx = ev->a;
    if (c->partial_images <= 0 || idx < 0 || idx >= j->n)
        return;
    int sent = c->partials_sent[idx];
    if (sent >= c->partial_images)
        return;
    const svc_tilemap *m = svc_image_tiles(c->srv, j, idx);
    if (!m || m->final)
        return;
    int steps = j->images[idx].steps > 0 ? j->images[idx].steps : j->steps;
    int parts = c->partial_images + 1;
    int due = ((sent + 1) * steps + parts - 1) / parts;
    if (ev->c < due)
        return;
    char *b = svc_tiles_preview_png_b64(m, true);
    if (!b)
        return;
    char type[48];
    cJSON *o = image_event(c, "partial_image", type, sizeof type, b);
    free(b);
    cJSON_AddNumberToObject(o, "partial_image_index", sent);
    c->partials_sent[idx] = sent + 1;
    add_event(c, type, o);
}

void oai_stream_event(oai_call *c, const svc_event *ev)
{
    if (c->done || c->closing)
        return;
    switch (ev->kind) {
    case SVC_EV_TILES:
        maybe_partial(c, ev);
        break;
    case SVC_EV_IMAGE: {
        char *b = oai_image_b64(c, ev->a);
        if (!b) {
            error_event(c, "internal", "an image is missing from the data directory");
            c->closing = true;
            break;
        }
        char type[48];
        cJSON *o = image_event(c, "completed", type, sizeof type, b);
        free(b);
        cJSON_AddItemToObject(o, "usage", oai_usage_json(c));
        add_event(c, type, o);
        break;
    }
    case SVC_EV_DONE:
        c->closing = true;
        break;
    case SVC_EV_FAILED: {
        char msg[700];
        snprintf(msg, sizeof msg, "job %s failed: %.600s", c->job->ids,
                 c->job->error_message ? c->job->error_message : "unknown error");
        error_event(c, "generation_failed", msg);
        c->closing = true;
        break;
    }
    case SVC_EV_CANCELLED: {
        char msg[160];
        snprintf(msg, sizeof msg, "job %s was cancelled (DELETE /v1/jobs/{id}, or the server is "
                 "shutting down)", c->job->ids);
        error_event(c, "cancelled", msg);
        c->closing = true;
        break;
    }
    default:
        break;
    }
    if (c->closing && !c->done) {
        if (c->watching) {
            svc_job_unwatch(c->job, &c->watch);
            c->watching = false;
        }
        svc_stream_pump(&c->st);
    }
}
