/*
 * service/api/comfy/comfy_view.c - GET /view?filename&subfolder&type: an
 * output PNG from the store, or an uploaded image.
 *
 * Why so strict: a ComfyUI client names a file with three query values,
 * and ComfyUI itself joins them into a path.  Here no value becomes a path
 * as given: an output is "<job-id>_<index:05>_.png" with no subfolder,
 * parsed into a job id (which the asking key must see) and an image index,
 * and read through the store like the native PNG route, or, for an output
 * behind ImageScale(By), "<prompt_id>_<index:05>_<output>_.png", the
 * stored image scaled as the prompt file says (comfy_prompt.c); an input is a name
 * (and optional subfolder) of [A-Za-z0-9._-] not starting with '.', under
 * <data-dir>/comfy/input.  Anything else is 404, so a "../" never reaches
 * the file system (docs/security.md).
 */
#include "comfy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "files.h"
#include "http.h"
#include "images.h"
#include "ids.h"
#include "jobs.h"
#include "server.h"
#include "store.h"
#include "tessera.h"

#define INPUT_MAX (32u << 20)

bool comfy_query_get(const char *query, const char *name, char *buf, size_t size)
{
    size_t n = strlen(name);
    buf[0] = '\0';
    for (const char *p = query; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
        if (strncmp(p, name, n) != 0 || p[n] != '=')
            continue;
        const char *v = p + n + 1, *end = strchr(v, '&');
        size_t len = end ? (size_t)(end - v) : strlen(v);
        char raw[512];
        if (len >= sizeof raw)
            return false;
        memcpy(raw, v, len);
        raw[len] = '\0';
        for (char *q = raw; *q; q++)
            if (*q == '+')
                *q = ' ';
        size_t out_len = 0;
        char *dec = evhttp_uridecode(raw, 0, &out_len);
        if (!dec || out_len != strlen(dec) || out_len >= size) {
            free(dec);
            return false;
        }
        memcpy(buf, dec, out_len + 1);
        free(dec);
        return true;
    }
    return true;
}

static void send_file_bytes(svc_req *r, const char *type, char *data, size_t len)
{
    struct evbuffer *b = evbuffer_new();
    if (!b || evbuffer_add(b, data, len) < 0) {
        if (b)
            evbuffer_free(b);
        free(data);
        svc_reply_json(r, 500, comfy_error_body("internal", "out of memory", ""));
        return;
    }
    free(data);
    svc_req_add_header(r, "Cache-Control", r->srv->keys.n ? "private, max-age=3600" :
                                           "public, max-age=3600");
    svc_reply_buffer(r, 200, type, b);
    evbuffer_free(b);
}

/* An output behind ImageScale(By): image `index` of the output's chain's
 * job, scaled as the prompt file says (comfy_scale.c, SaveImage's 8 bits),
 * with the stored image's infotext.  Computed on each request, on the loop
 * (the store keeps the sampled image only): bounded by COMFY_SCALE_MAX. */
static void send_scaled(svc_req *r, svc_job *first, int index, int k)
{
    svc_server *s = r->srv;
    cJSON *pf = comfy_prompt_read(s, first->ids);
    comfy_output out;
    svc_job *jobs[COMFY_MAX_CHAINS];
    int n = pf ? comfy_prompt_jobs(s, first, pf, jobs) : 0;
    const bool found = pf && comfy_prompt_output(pf, k, &out) && out.n_scales > 0 &&
                       out.chain < n && jobs[out.chain];
    cJSON_Delete(pf);
    svc_job *j = found ? jobs[out.chain] : NULL;
    if (!j || index >= j->n || j->images[index].state != SVC_DONE) {
        svc_reply_errorf(r, r->dialect, 404, "not_found", "filename", "no such file");
        return;
    }
    char *data = NULL, *text = NULL, err[256] = "";
    size_t len = 0;
    uint8_t *rgb = NULL, *scaled = NULL, *png = NULL;
    int w = 0, h = 0, sw = 0, sh = 0;
    size_t plen = 0;
    if (svc_store_read_image(s->cfg.data_dir, j->ids, index, &data, &len) < 0) {
        svc_reply_errorf(r, r->dialect, 404, "not_found", "filename",
                         "the image is missing from the data directory");
        return;
    }
    if (tsr_image_png_parameters(data, len, &text) != TSR_OK)
        text = NULL;
    if (svc_image_decode((const uint8_t *)data, len, 3, &rgb, &w, &h, err, sizeof err) < 0 ||
        comfy_scale_rgb(rgb, w, h, out.scales, out.n_scales, true, &scaled, &sw, &sh, err,
                        sizeof err) < 0 ||
        svc_png_encode(scaled, sw, sh, text, &png, &plen, err, sizeof err) < 0) {
        svc_reply_json(r, 500, comfy_error_body("internal", "the image cannot be scaled", err));
    } else {
        send_file_bytes(r, "image/png", (char *)png, plen);
        png = NULL; /* sent and freed */
    }
    free(data);
    free(text);
    free(rgb);
    free(scaled);
    free(png);
}

/* GET /view?filename=<job-id>_<index>_.png&subfolder=&type=output|temp|input */
void svc_comfy_view(svc_req *r, const char *rest)
{
    (void)rest;
    char filename[256], subfolder[256], type[32];
    if (!comfy_query_get(r->query, "filename", filename, sizeof filename) ||
        !comfy_query_get(r->query, "subfolder", subfolder, sizeof subfolder) ||
        !comfy_query_get(r->query, "type", type, sizeof type) || !filename[0]) {
        svc_reply_errorf(r, r->dialect, 400, "invalid_request", "filename",
                         "filename is required (and each value at most 255 bytes)");
        return;
    }
    if (strcmp(type, "input") == 0) {
        char dir[1024], path[1600];
        if (!comfy_safe_name(filename) || (subfolder[0] && !comfy_safe_name(subfolder))) {
            svc_reply_errorf(r, r->dialect, 404, "not_found", "filename", "no such file");
            return;
        }
        comfy_dir(r->srv, "input", dir, sizeof dir);
        snprintf(path, sizeof path, "%s/%s%s%s", dir, subfolder, subfolder[0] ? "/" : "",
                 filename);
        char *data = NULL;
        size_t len = 0;
        if (svc_read_file(path, &data, &len, INPUT_MAX) < 0) {
            svc_reply_errorf(r, r->dialect, 404, "not_found", "filename", "no such file");
            return;
        }
        bool png = len >= 4 && memcmp(data, "\x89PNG", 4) == 0;
        send_file_bytes(r, png ? "image/png" : "image/jpeg", data, len);
        return;
    }
    if (subfolder[0]) {
        svc_reply_errorf(r, r->dialect, 404, "not_found", "subfolder",
                         "no such file (Tessera's outputs have no subfolder)");
        return;
    }
    if (type[0] && strcmp(type, "output") != 0 && strcmp(type, "temp") != 0) {
        svc_reply_errorf(r, r->dialect, 400, "invalid_request", "type",
                         "type must be output, temp or input");
        return;
    }
    /* "<job-id>_<5 digits>_.png" or "<prompt_id>_<5 digits>_<output>_.png" */
    char ids[20];
    int index = -1, output = -1;
    svc_job *j = comfy_output_name_parse(filename, ids, &index, &output) ? comfy_find_job(r, ids)
                                                                         : NULL;
    if (j && output >= 0) {
        send_scaled(r, j, index, output);
        return;
    }
    if (!j || index >= j->n || j->images[index].state != SVC_DONE) {
        svc_reply_errorf(r, r->dialect, 404, "not_found", "filename", "no such file");
        return;
    }
    char *data = NULL;
    size_t len = 0;
    if (svc_store_read_image(r->srv->cfg.data_dir, j->ids, index, &data, &len) < 0) {
        svc_reply_errorf(r, r->dialect, 404, "not_found", "filename",
                         "the image is missing from the data directory");
        return;
    }
    send_file_bytes(r, "image/png", data, len);
}
