/*
 * service/api/comfy/comfy_plan.c - the compiler's second pass: a validated
 * workflow's output chains into native job objects, one per chain.
 *
 * Why backwards from the outputs: a native job is one sampled chain, so the
 * walk starts at each SaveImage / PreviewImage, through any ImageScale /
 * ImageScaleBy (kept on the output, applied to the stored image when /view
 * sends it: comfy_scale.c) to VAEDecode and its KSampler.  Outputs of one
 * KSampler share a chain; each distinct KSampler is one chain, one job
 * (at most COMFY_MAX_CHAINS, all accepted together by the route).  Then
 * each chain's KSampler is followed to its latent (EmptyLatentImage:
 * txt2img; VAEEncode of LoadImage, through ImageScale(By) if any: img2img;
 * LatentUpscale(By) of a first KSampler: the hires fix), its conditioning (CLIPTextEncode, through CLIPSetLastLayer and
 * LoraLoader to the checkpoint) and its model (through LoraLoader).  Each
 * native field written records the node and input that set it
 * (plan->fields), so an engine refusal later names the node.  A graph that
 * is valid ComfyUI but not native jobs (more than COMFY_MAX_CHAINS chains,
 * a hires pass with other settings than the first) is refused here as a
 * node error; docs/compat-comfyui.md has the table of fields.  Two chains may
 * share nodes (a checkpoint, a prompt, even a first KSampler whose image
 * one chain saves and another upscales): each job carries its own copy of
 * the settings and samples what it needs.
 */
#include "comfy_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "images.h"
#include "json.h"


static const cJSON *input(const gnode *nd, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(nd->inputs, name);
}

/* The node an input links to (validated: it exists). */
static gnode *src(graph *g, const gnode *nd, const char *name, int *index)
{
    const char *id;
    int ix = 0;
    if (!comfy_link_shape(input(nd, name), &id, &ix))
        return NULL;
    if (index)
        *index = ix;
    return comfy_find(g, id);
}

static double num(const gnode *nd, const char *name)
{
    const cJSON *v = input(nd, name);
    if (cJSON_IsNumber(v))
        return v->valuedouble;
    const comfy_input *in = comfy_class_input(nd->cls, name);
    return in ? in->def : 0;
}

static const char *str(const gnode *nd, const char *name)
{
    const cJSON *v = input(nd, name);
    if (cJSON_IsString(v))
        return v->valuestring;
    const comfy_input *in = comfy_class_input(nd->cls, name);
    return in && in->sdef ? in->sdef : "";
}

static bool is(const gnode *nd, const char *cls) { return nd && strcmp(nd->cls->name, cls) == 0; }

static void note_field(graph *g, const char *field, const gnode *nd, const char *input_name)
{
    comfy_chain *p = &g->plan->chains[g->chain];
    for (int i = 0; i < p->n_fields; i++)
        if (strcmp(p->fields[i].field, field) == 0)
            return; /* the first (outermost) setter names it */
    if (p->n_fields >= (int)(sizeof p->fields / sizeof p->fields[0]))
        return;
    p->fields[p->n_fields].field = field;
    snprintf(p->fields[p->n_fields].node, sizeof p->fields[0].node, "%s", nd->id);
    p->fields[p->n_fields].class_type = nd->cls->name;
    p->fields[p->n_fields].input = input_name;
    p->n_fields++;
}

/* A native field, and the node and input that set it. */
static void put_num(graph *g, cJSON *job, const char *field, double v, const gnode *nd,
                    const char *input_name)
{
    cJSON_AddNumberToObject(job, field, v);
    note_field(g, field, nd, input_name);
}

static void put_str(graph *g, cJSON *job, const char *field, const char *v, const gnode *nd,
                    const char *input_name)
{
    cJSON_AddStringToObject(job, field, v);
    note_field(g, field, nd, input_name);
}

/* A sampler node's settings (KSampler or KSamplerAdvanced). */
typedef struct sampling {
    gnode *node;
    const cJSON *seed;
    double steps, cfg, denoise;
    const char *sampler, *scheduler;
} sampling;

static bool read_sampler(graph *g, gnode *k, sampling *s)
{
    const bool adv = is(k, "KSamplerAdvanced");
    s->node = k;
    s->seed = input(k, adv ? "noise_seed" : "seed");
    s->steps = num(k, "steps");
    s->cfg = num(k, "cfg");
    s->sampler = str(k, "sampler_name");
    s->scheduler = str(k, "scheduler");
    s->denoise = adv ? 1.0 : num(k, "denoise");
    if (adv) {
        bool ok = true;
        if (strcmp(str(k, "add_noise"), "enable") != 0)
            comfy_node_error(g, k, "unsupported_value", "Not supported by Tessera yet", "add_noise",
                       NULL, "add_noise: only 'enable' (a whole run) is supported"), ok = false;
        if (num(k, "start_at_step") != 0)
            comfy_node_error(g, k, "unsupported_value", "Not supported by Tessera yet",
                       "start_at_step", NULL, "start_at_step: only 0 is supported"), ok = false;
        if (num(k, "end_at_step") < s->steps)
            comfy_node_error(g, k, "unsupported_value", "Not supported by Tessera yet", "end_at_step",
                       NULL, "end_at_step: must be >= steps (a whole run)"), ok = false;
        if (strcmp(str(k, "return_with_leftover_noise"), "disable") != 0)
            comfy_node_error(g, k, "unsupported_value", "Not supported by Tessera yet",
                       "return_with_leftover_noise", NULL,
                       "return_with_leftover_noise: only 'disable' is supported"), ok = false;
        return ok;
    }
    return true;
}

/* The clip chain of a CLIPTextEncode: clip skip and the LoRAs' te weights. */
typedef struct chain {
    int clip_skip;                    /* 1 = the last layer */
    const char *lora[16];
    double weight[16];
    int n;
} chain;

static bool walk_chain(graph *g, gnode *from, const char *in_name, chain *c, bool clip)
{
    gnode *nd = src(g, from, in_name, NULL);
    bool skip_set = false;
    c->clip_skip = 1;
    for (int guard = 0; nd && guard < COMFY_MAX_NODES; guard++) {
        if (is(nd, "CheckpointLoaderSimple"))
            return true;
        if (is(nd, "CLIPSetLastLayer")) {
            if (!skip_set) /* the layer nearest the encoder wins, as in ComfyUI */
                c->clip_skip = -(int)num(nd, "stop_at_clip_layer");
            skip_set = true;
            nd = src(g, nd, "clip", NULL);
        } else if (is(nd, "LoraLoader")) {
            if (c->n >= 16) {
                comfy_node_error(g, nd, "unsupported_graph", "Too many LoRAs", NULL, NULL,
                           "at most 16 LoRAs per image");
                return false;
            }
            c->lora[c->n] = str(nd, "lora_name");
            c->weight[c->n++] = num(nd, clip ? "strength_clip" : "strength_model");
            nd = src(g, nd, clip ? "clip" : "model", NULL);
        } else {
            return false;
        }
    }
    return nd != NULL;
}

static bool same_chain(const chain *a, const chain *b)
{
    if (a->clip_skip != b->clip_skip || a->n != b->n)
        return false;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->lora[i], b->lora[i]) != 0 || a->weight[i] != b->weight[i])
            return false;
    return true;
}

/* The LoRA file name without ".safetensors" (Tessera's names are stems). */
static void lora_stem(const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s", name);
    size_t n = strlen(buf);
    if (n > 12 && strcmp(buf + n - 12, ".safetensors") == 0)
        buf[n - 12] = '\0';
}

static void add_loras(cJSON *job, const chain *model, const chain *clip)
{
    if (!model->n && !clip->n)
        return;
    cJSON *arr = cJSON_AddArrayToObject(job, "loras");
    char stem[256];
    for (int i = 0; i < model->n; i++) {
        cJSON *o = cJSON_CreateObject();
        lora_stem(model->lora[i], stem, sizeof stem);
        cJSON_AddStringToObject(o, "name", stem);
        cJSON_AddNumberToObject(o, "unet_weight", model->weight[i]);
        double te = 0;
        for (int k = 0; k < clip->n; k++)
            if (strcmp(clip->lora[k], model->lora[i]) == 0)
                te = clip->weight[k];
        cJSON_AddNumberToObject(o, "te_weight", te);
        cJSON_AddItemToArray(arr, o);
    }
    for (int k = 0; k < clip->n; k++) {
        bool seen = false;
        for (int i = 0; i < model->n; i++)
            seen |= strcmp(clip->lora[k], model->lora[i]) == 0;
        if (seen)
            continue;
        cJSON *o = cJSON_CreateObject();
        lora_stem(clip->lora[k], stem, sizeof stem);
        cJSON_AddStringToObject(o, "name", stem);
        cJSON_AddNumberToObject(o, "unet_weight", 0);
        cJSON_AddNumberToObject(o, "te_weight", clip->weight[k]);
        cJSON_AddItemToArray(arr, o);
    }
}

static void unsupported(graph *g, gnode *nd, const char *input_name, const char *why)
{
    comfy_node_error(g, nd, "unsupported_graph", "Tessera cannot run this graph yet", input_name, NULL,
               "%s", why);
}

/* The conditioning, model and sampling fields of one sampler node. */
static bool compile_sampler(graph *g, const sampling *s, cJSON *job)
{
    gnode *k = s->node;
    gnode *pos = src(g, k, "positive", NULL), *neg = src(g, k, "negative", NULL);
    /* typing guarantees CONDITIONING comes from CLIPTextEncode (the only producer) */
    chain pc = {0}, nc = {0}, mc = {0};
    if (!walk_chain(g, pos, "clip", &pc, true) || !walk_chain(g, neg, "clip", &nc, true) ||
        !walk_chain(g, k, "model", &mc, false)) {
        unsupported(g, k, NULL, "the model or clip chain does not end at CheckpointLoaderSimple");
        return false;
    }
    if (!same_chain(&pc, &nc)) {
        unsupported(g, neg, "clip",
                    "the negative prompt's CLIP (clip skip, LoRAs) must be the positive's");
        return false;
    }
    put_str(g, job, "prompt", str(pos, "text"), pos, "text");
    put_str(g, job, "negative_prompt", str(neg, "text"), neg, "text");
    put_num(g, job, "clip_skip", pc.clip_skip, pos, "clip");
    add_loras(job, &mc, &pc);
    note_field(g, "loras", k, "model");
    unsigned long long seed = s->seed ? strtoull(svc_json_literal(s->seed) ?
                                                     svc_json_literal(s->seed) : "0", NULL, 10)
                                      : 0;
    if (s->seed && !svc_json_literal(s->seed))
        seed = (unsigned long long)s->seed->valuedouble;
    cJSON_AddItemToObject(job, "seed", svc_json_u64(seed));
    note_field(g, "seed", k, is(k, "KSamplerAdvanced") ? "noise_seed" : "seed");
    put_num(g, job, "steps", s->steps, k, "steps");
    put_num(g, job, "cfg_scale", s->cfg, k, "cfg");
    put_str(g, job, "sampler", comfy_sampler_to_tessera(s->sampler), k, "sampler_name");
    put_str(g, job, "scheduler",
            comfy_scheduler_to_tessera(comfy_sampler_to_tessera(s->sampler), s->scheduler), k,
            "scheduler");
    cJSON_AddStringToObject(job, "rng", "cpu");
    return true;
}

/* LoadImage's file (image, index 0) or mask (index 1) as base64. */
static bool load_into(graph *g, gnode *img, bool mask, cJSON *job, const char *field)
{
    char err[256] = "no image store";
    char *(*fn)(void *, const char *, char *, size_t) =
        mask ? g->ctx->load_mask : g->ctx->load_image;
    char *b64 = fn ? fn(g->ctx->user, str(img, "image"), err, sizeof err) : NULL;
    if (!b64) {
        comfy_node_error(g, img, "invalid_input_type", "The image cannot be loaded", "image",
                         NULL, "image: %s", err);
        return false;
    }
    cJSON_AddStringToObject(job, field, b64);
    free(b64);
    note_field(g, field, img, "image");
    return true;
}

/* An ImageScale / ImageScaleBy node's operation. */
static void read_scale(gnode *nd, comfy_scale *op)
{
    memset(op, 0, sizeof *op);
    int m = comfy_scale_method_of(str(nd, "upscale_method"));
    op->method = m < 0 ? CS_NEAREST_EXACT : (comfy_scale_method)m; /* validated: in the list */
    if (is(nd, "ImageScaleBy")) {
        op->scale_by = num(nd, "scale_by");
    } else {
        op->width = (int)num(nd, "width");
        op->height = (int)num(nd, "height");
        op->crop_center = strcmp(str(nd, "crop"), "center") == 0;
    }
    snprintf(op->node, sizeof op->node, "%s", nd->id);
}

/* The ImageScale(By) nodes from `from`'s input `name` back to the first
 * node that is not one (*end), as ops in the order they apply. */
static bool walk_scales(graph *g, gnode *from, const char *name, comfy_scale *ops, int *n,
                        gnode **end)
{
    gnode *nd = src(g, from, name, NULL), *seen[COMFY_MAX_SCALES];
    int k = 0;
    while (is(nd, "ImageScale") || is(nd, "ImageScaleBy")) {
        if (k == COMFY_MAX_SCALES) {
            unsupported(g, nd, "image", "at most 4 ImageScale / ImageScaleBy nodes in a row");
            return false;
        }
        seen[k++] = nd;
        nd = src(g, nd, "image", NULL);
    }
    for (int i = 0; i < k; i++)
        read_scale(seen[k - 1 - i], &ops[i]);
    *n = k;
    *end = nd;
    return true;
}

/* LoadImage -> ImageScale(By)... -> VAEEncode: the upload scaled as ComfyUI
 * scales it (comfy_scale.c), rounded to 8 bits, then cut to multiples of 8
 * as ComfyUI's VAE encode cuts its pixels (centred), as the init image. */
static bool load_scaled(graph *g, gnode *img, const comfy_scale *ops, int n, cJSON *job)
{
    char err[256] = "no image store";
    gnode *last = comfy_find(g, ops[n - 1].node);
    char *b64 = g->ctx->load_image ? g->ctx->load_image(g->ctx->user, str(img, "image"), err,
                                                        sizeof err)
                                   : NULL;
    uint8_t *file = NULL, *rgb = NULL, *scaled = NULL, *png = NULL;
    size_t flen = 0, plen = 0;
    int w = 0, h = 0, sw = 0, sh = 0;
    bool ok = false;
    if (!b64 || !svc_base64_decode(b64, strlen(b64), &file, &flen, err, sizeof err) ||
        svc_image_decode(file, flen, 3, &rgb, &w, &h, err, sizeof err) < 0) {
        comfy_node_error(g, img, "invalid_input_type", "The image cannot be loaded", "image",
                         NULL, "image: %s", err);
        goto out;
    }
    sw = w, sh = h;
    for (int i = 0; i < n; i++) {
        if (!comfy_scale_size(&ops[i], sw, sh, &sw, &sh)) {
            comfy_node_error(g, comfy_find(g, ops[i].node), "value_not_accepted",
                             "Tessera refused the value",
                             ops[i].scale_by > 0 ? "scale_by" : "width",
                             NULL, "scaling the %dx%d image gives a side outside 1..%d", sw, sh,
                             COMFY_SCALE_MAX);
            goto out;
        }
    }
    if (comfy_scale_rgb(rgb, w, h, ops, n, false, &scaled, &sw, &sh, err, sizeof err) < 0) {
        comfy_node_error(g, last, "value_not_accepted", "Tessera refused the value", "image", NULL,
                         "%s", err);
        goto out;
    }
    const int cw = sw / 8 * 8, chh = sh / 8 * 8, x0 = sw % 8 / 2, y0 = sh % 8 / 2;
    if (cw < 8 || chh < 8) {
        comfy_node_error(g, last, "value_not_accepted", "Tessera refused the value", "width", NULL,
                         "the scaled image (%dx%d) is smaller than the VAE's 8x8", sw, sh);
        goto out;
    }
    for (int y = 0; y < chh; y++) /* in place: rows only move towards the start */
        memmove(scaled + (size_t)y * cw * 3, scaled + ((size_t)(y + y0) * sw + x0) * 3,
                (size_t)cw * 3);
    if (svc_png_encode(scaled, cw, chh, NULL, &png, &plen, err, sizeof err) < 0) {
        comfy_node_error(g, last, "value_not_accepted", "Tessera refused the value", "image", NULL,
                         "%s", err);
        goto out;
    }
    free(b64);
    b64 = svc_base64_encode(png, plen);
    if (!b64) {
        comfy_node_error(g, last, "value_not_accepted", "Tessera refused the value", "image", NULL,
                         "out of memory");
        goto out;
    }
    put_str(g, job, "init_image", b64, last, ops[n - 1].scale_by > 0 ? "scale_by" : "width");
    ok = true;
out:
    free(b64);
    free(file);
    free(rgb);
    free(scaled);
    free(png);
    return ok;
}

/* Inpainting: SetLatentNoiseMask(VAEEncode(LoadImage), LoadImage's MASK), or
 * VAEEncodeForInpaint(LoadImage, vae, LoadImage's MASK): init_image, mask
 * (white = repaint), strength = denoise; the masked area starts from the
 * original (1) or, for VAEEncodeForInpaint, from A1111's fill (0). */
static bool compile_inpaint(graph *g, const sampling *s, gnode *lat, cJSON *job)
{
    const bool for_inpaint = is(lat, "VAEEncodeForInpaint");
    gnode *img = NULL;
    if (for_inpaint) {
        img = src(g, lat, "pixels", NULL);
    } else {
        gnode *enc = src(g, lat, "samples", NULL);
        if (!is(enc, "VAEEncode")) {
            unsupported(g, lat, "samples", "SetLatentNoiseMask's samples must come from VAEEncode");
            return false;
        }
        img = src(g, enc, "pixels", NULL);
    }
    int mix = 0;
    gnode *mimg = src(g, lat, "mask", &mix);
    if (!is(img, "LoadImage")) {
        unsupported(g, lat, for_inpaint ? "pixels" : "samples",
                    "the image to inpaint must come from LoadImage");
        return false;
    }
    if (!is(mimg, "LoadImage")) {
        unsupported(g, lat, "mask", "the mask must be LoadImage's MASK output");
        return false;
    }
    if (!load_into(g, img, false, job, "init_image") || !load_into(g, mimg, true, job, "mask"))
        return false;
    note_field(g, "mask", lat, "mask");
    put_num(g, job, "strength", s->denoise, s->node, "denoise");
    put_num(g, job, "mask_fill", for_inpaint ? 0 : 1, lat, for_inpaint ? "pixels" : "samples");
    return true;
}

/* The latent the first (or only) sampler starts from. */
static bool compile_latent(graph *g, const sampling *s, cJSON *job)
{
    gnode *lat = src(g, s->node, "latent_image", NULL);
    if (is(lat, "EmptyLatentImage")) {
        if (s->denoise < 1.0) {
            unsupported(g, s->node, "denoise",
                        "denoise < 1 on an empty latent is not supported yet (use VAEEncode "
                        "for img2img)");
            return false;
        }
        put_num(g, job, "width", num(lat, "width"), lat, "width");
        put_num(g, job, "height", num(lat, "height"), lat, "height");
        put_num(g, job, "n", num(lat, "batch_size"), lat, "batch_size");
        /* ComfyUI's noise: one randn over the batch from the seed */
        if (num(lat, "batch_size") > 1)
            cJSON_AddTrueToObject(job, "comfy_batch_noise");
        return true;
    }
    if (is(lat, "VAEEncode")) {
        comfy_scale ops[COMFY_MAX_SCALES];
        int n_ops = 0;
        gnode *img = NULL;
        if (!walk_scales(g, lat, "pixels", ops, &n_ops, &img))
            return false;
        if (!is(img, "LoadImage")) {
            unsupported(g, lat, "pixels",
                        "VAEEncode's pixels must come from LoadImage (or ImageScale / "
                        "ImageScaleBy of it)");
            return false;
        }
        if (n_ops ? !load_scaled(g, img, ops, n_ops, job) : !load_into(g, img, false, job,
                                                                        "init_image"))
            return false;
        put_num(g, job, "strength", s->denoise, s->node, "denoise");
        return true;
    }
    if (is(lat, "SetLatentNoiseMask") || is(lat, "VAEEncodeForInpaint"))
        return compile_inpaint(g, s, lat, job);
    unsupported(g, s->node, "latent_image",
                "latent_image must come from EmptyLatentImage, VAEEncode, SetLatentNoiseMask, "
                "VAEEncodeForInpaint (or, for the hires fix, LatentUpscale / LatentUpscaleBy of "
                "a first KSampler)");
    return false;
}

/* ImageScale's size and method as the hires pass's (image space). */
static bool compile_image_scale(graph *g, gnode *up, cJSON *job)
{
    const char *up_name = comfy_image_upscale_to_tessera(str(up, "upscale_method"));
    if (!up_name) {
        unsupported(g, up, "upscale_method",
                    "upscale_method: Tessera's image-space hires pass has lanczos and "
                    "nearest-exact only");
        return false;
    }
    if (strcmp(str(up, "crop"), "disabled") != 0) {
        unsupported(g, up, "crop", "crop: only 'disabled'");
        return false;
    }
    double w = num(up, "width"), h = num(up, "height");
    if (w == 0 && h == 0) {
        unsupported(g, up, "width", "width and height 0: the image would not be scaled");
        return false;
    }
    put_num(g, job, "hires_width", w, up, "width");
    put_num(g, job, "hires_height", h, up, "height");
    put_str(g, job, "hires_upscaler", up_name, up, "upscale_method");
    return true;
}

/* Two samplers around a latent upscale (LatentUpscale[By]) or an image one
 * (VAEDecode -> ImageScale -> VAEEncode): the hires fix. */
static bool compile_hires(graph *g, const sampling *second, gnode *up, cJSON *job)
{
    bool image = is(up, "ImageScale");
    gnode *k1;
    if (image) {
        gnode *dec = src(g, up, "image", NULL);
        if (!is(dec, "VAEDecode")) {
            unsupported(g, up, "image", "the image-space hires fix scales VAEDecode's image");
            return false;
        }
        k1 = src(g, dec, "samples", NULL);
        if (!is(k1, "KSampler") && !is(k1, "KSamplerAdvanced")) {
            unsupported(g, dec, "samples", "the hires fix decodes a KSampler's latent");
            return false;
        }
    } else {
        k1 = src(g, up, "samples", NULL);
        if (!is(k1, "KSampler") && !is(k1, "KSamplerAdvanced")) {
            unsupported(g, up, "samples", "the hires fix upscales a KSampler's latent");
            return false;
        }
    }
    sampling first;
    if (!read_sampler(g, k1, &first))
        return false;
    gnode *lat = src(g, k1, "latent_image", NULL);
    if (!is(lat, "EmptyLatentImage")) {
        unsupported(g, k1, "latent_image", "the hires fix runs on txt2img (EmptyLatentImage)");
        return false;
    }
    /* Tessera's hires pass reuses the first pass's settings */
    gnode *k2 = second->node;
    const char *const same[] = {"cfg", "sampler_name", "scheduler"};
    for (int i = 0; i < 3; i++) {
        const cJSON *a = input(k1, same[i]), *b = input(k2, same[i]);
        if (!cJSON_Compare(a, b, true)) {
            char why[160];
            snprintf(why, sizeof why,
                     "%s: the hires fix's second KSampler must use the first's (Tessera's "
                     "second pass reuses it)", same[i]);
            unsupported(g, k2, same[i], why);
            return false;
        }
    }
    if (src(g, k1, "positive", NULL) != src(g, k2, "positive", NULL) ||
        src(g, k1, "negative", NULL) != src(g, k2, "negative", NULL) ||
        src(g, k1, "model", NULL) != src(g, k2, "model", NULL)) {
        unsupported(g, k2, "positive",
                    "the hires fix's second KSampler must take the first's model and prompts");
        return false;
    }
    if (second->denoise <= 0) {
        unsupported(g, k2, "denoise", "the hires pass needs denoise > 0");
        return false;
    }
    if (!compile_sampler(g, &first, job) || !compile_latent(g, &first, job))
        return false;
    if (image) {
        if (!compile_image_scale(g, up, job))
            return false;
    } else if (is(up, "LatentUpscaleBy")) {
        put_num(g, job, "hires_scale", num(up, "scale_by"), up, "scale_by");
    } else {
        if (strcmp(str(up, "crop"), "disabled") != 0) {
            unsupported(g, up, "crop", "crop: only 'disabled'");
            return false;
        }
        put_num(g, job, "hires_width", num(up, "width"), up, "width");
        put_num(g, job, "hires_height", num(up, "height"), up, "height");
    }
    if (!image) {
        put_str(g, job, "hires_upscaler", comfy_upscale_to_tessera(str(up, "upscale_method")), up,
                "upscale_method");
    }
    put_num(g, job, "hires_steps", second->steps, k2, "steps");
    put_num(g, job, "hires_strength", second->denoise, k2, "denoise");
    return true;
}

/* One chain's job: its KSampler k and what k's latent comes from. */
static bool compile_chain(graph *g, gnode *k)
{
    comfy_chain *ch = &g->plan->chains[g->chain];
    sampling s;
    if (!read_sampler(g, k, &s))
        return false;
    snprintf(ch->sampler_node, sizeof ch->sampler_node, "%s", k->id);
    cJSON *job = cJSON_CreateObject();
    ch->job = job;
    gnode *lat = src(g, k, "latent_image", NULL);
    if (is(lat, "LatentUpscale") || is(lat, "LatentUpscaleBy"))
        return compile_hires(g, &s, lat, job);
    if (is(lat, "VAEEncode")) {
        gnode *px = src(g, lat, "pixels", NULL);
        if (is(px, "ImageScale") && is(src(g, px, "image", NULL), "VAEDecode"))
            return compile_hires(g, &s, px, job);
    }
    return compile_sampler(g, &s, job) && compile_latent(g, &s, job);
}

/* Each output's chain (through its ImageScale(By)s, VAEDecode, KSampler),
 * one job per distinct KSampler. */
bool comfy_emit(graph *g, gnode **outs, int n_outs)
{
    comfy_plan *p = g->plan;
    gnode *finals[COMFY_MAX_CHAINS];
    for (int i = 0; i < n_outs; i++) {
        comfy_output *o = &p->outputs[i];
        snprintf(o->node, sizeof o->node, "%s", outs[i]->id);
        o->temp = is(outs[i], "PreviewImage");
        gnode *dec = NULL;
        if (!walk_scales(g, outs[i], "images", o->scales, &o->n_scales, &dec))
            return false;
        if (!is(dec, "VAEDecode")) {
            unsupported(g, outs[i], "images",
                        "images must come from VAEDecode of a KSampler, directly or through "
                        "ImageScale / ImageScaleBy (Tessera saves sampled images)");
            return false;
        }
        gnode *k = src(g, dec, "samples", NULL);
        if (!is(k, "KSampler") && !is(k, "KSamplerAdvanced")) {
            unsupported(g, dec, "samples", "VAEDecode's samples must come from a KSampler");
            return false;
        }
        int c = 0;
        while (c < p->n_chains && finals[c] != k)
            c++;
        if (c == p->n_chains) {
            if (p->n_chains == COMFY_MAX_CHAINS) {
                comfy_node_error(g, k, "unsupported_graph", "Too many sampled chains", NULL, NULL,
                                 "at most %d sampled chains (KSampler -> VAEDecode -> SaveImage or "
                                 "PreviewImage) in one prompt; send the others as another prompt",
                                 COMFY_MAX_CHAINS);
                return false;
            }
            finals[p->n_chains++] = k;
        }
        o->chain = c;
    }
    p->n_outputs = n_outs;
    bool ok = true;
    for (int c = 0; c < p->n_chains; c++) {
        g->chain = c;
        ok &= compile_chain(g, finals[c]);
    }
    g->chain = 0;
    return ok;
}

/* A 400 body with one node error (value_not_accepted) on node `node`. */
static cJSON *one_node_error(const comfy_plan *p, const char *node, const char *class_type,
                             const char *input_name, const char *message)
{
    cJSON *o = comfy_error_body("prompt_outputs_failed_validation",
                                "Prompt outputs failed validation", message);
    cJSON *entry = cJSON_AddObjectToObject(cJSON_GetObjectItem(o, "node_errors"), node);
    cJSON *errs = cJSON_AddArrayToObject(entry, "errors");
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", "value_not_accepted");
    cJSON_AddStringToObject(e, "message", "Tessera refused the value");
    cJSON_AddStringToObject(e, "details", message);
    cJSON *x = cJSON_AddObjectToObject(e, "extra_info");
    cJSON_AddStringToObject(x, "input_name", input_name);
    cJSON_AddItemToArray(errs, e);
    cJSON *deps = cJSON_AddArrayToObject(entry, "dependent_outputs");
    for (int k = 0; k < p->n_outputs; k++)
        cJSON_AddItemToArray(deps, cJSON_CreateString(p->outputs[k].node));
    cJSON_AddStringToObject(entry, "class_type", class_type);
    return o;
}

cJSON *comfy_check_output_sizes(const comfy_plan *p, int c, int width, int height)
{
    for (int k = 0; k < p->n_outputs; k++) {
        const comfy_output *o = &p->outputs[k];
        int w = width, h = height;
        for (int i = 0; o->chain == c && i < o->n_scales; i++) {
            const comfy_scale *op = &o->scales[i];
            if (comfy_scale_size(op, w, h, &w, &h))
                continue;
            char msg[200];
            snprintf(msg, sizeof msg, "scaling the %dx%d image gives a side outside 1..%d", w, h,
                     COMFY_SCALE_MAX);
            return one_node_error(p, op->node, op->scale_by > 0 ? "ImageScaleBy" : "ImageScale",
                                  op->scale_by > 0 ? "scale_by" : "width", msg);
        }
    }
    return NULL;
}

cJSON *comfy_field_error(const comfy_plan *p, int c, const char *field, const char *message)
{
    const comfy_chain *ch = &p->chains[c];
    for (int i = 0; field && i < ch->n_fields; i++)
        if (strcmp(ch->fields[i].field, field) == 0)
            return one_node_error(p, ch->fields[i].node, ch->fields[i].class_type,
                                  ch->fields[i].input, message);
    return comfy_error_body("prompt_outputs_failed_validation", "Prompt outputs failed validation",
                            message);
}
