/*
 * service/api/comfy/comfy_plan.c - the compiler's second pass: a validated
 * workflow's output chain into one native job object.
 *
 * Why backwards from the outputs: a native job is one sampled chain, so the
 * walk starts at SaveImage / PreviewImage and follows VAEDecode to the
 * KSampler, then its latent (EmptyLatentImage: txt2img; VAEEncode of
 * LoadImage: img2img; LatentUpscale(By) of a first KSampler: the hires
 * fix), its conditioning (CLIPTextEncode, through CLIPSetLastLayer and
 * LoraLoader to the checkpoint) and its model (through LoraLoader).  Each
 * native field written records the node and input that set it
 * (plan->fields), so an engine refusal later names the node.  A graph that
 * is valid ComfyUI but not one native job (two sampled chains, a hires
 * pass with other settings than the first) is refused here as a node
 * error; docs/compat-comfyui.md has the table of fields.
 */
#include "comfy_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    comfy_plan *p = g->plan;
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
    cJSON_AddStringToObject(job, "prompt", str(pos, "text"));
    note_field(g, "prompt", pos, "text");
    cJSON_AddStringToObject(job, "negative_prompt", str(neg, "text"));
    note_field(g, "negative_prompt", neg, "text");
    cJSON_AddNumberToObject(job, "clip_skip", pc.clip_skip);
    note_field(g, "clip_skip", pos, "clip");
    add_loras(job, &mc, &pc);
    note_field(g, "loras", k, "model");
    unsigned long long seed = s->seed ? strtoull(svc_json_literal(s->seed) ?
                                                     svc_json_literal(s->seed) : "0", NULL, 10)
                                      : 0;
    if (s->seed && !svc_json_literal(s->seed))
        seed = (unsigned long long)s->seed->valuedouble;
    cJSON_AddItemToObject(job, "seed", svc_json_u64(seed));
    note_field(g, "seed", k, is(k, "KSamplerAdvanced") ? "noise_seed" : "seed");
    cJSON_AddNumberToObject(job, "steps", s->steps);
    note_field(g, "steps", k, "steps");
    cJSON_AddNumberToObject(job, "cfg_scale", s->cfg);
    note_field(g, "cfg_scale", k, "cfg");
    cJSON_AddStringToObject(job, "sampler", comfy_sampler_to_tessera(s->sampler));
    note_field(g, "sampler", k, "sampler_name");
    cJSON_AddStringToObject(job, "scheduler",
                            comfy_scheduler_to_tessera(comfy_sampler_to_tessera(s->sampler),
                                                       s->scheduler));
    note_field(g, "scheduler", k, "scheduler");
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
    cJSON_AddNumberToObject(job, "strength", s->denoise);
    note_field(g, "strength", s->node, "denoise");
    cJSON_AddNumberToObject(job, "mask_fill", for_inpaint ? 0 : 1);
    note_field(g, "mask_fill", lat, for_inpaint ? "pixels" : "samples");
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
        cJSON_AddNumberToObject(job, "width", num(lat, "width"));
        note_field(g, "width", lat, "width");
        cJSON_AddNumberToObject(job, "height", num(lat, "height"));
        note_field(g, "height", lat, "height");
        cJSON_AddNumberToObject(job, "n", num(lat, "batch_size"));
        note_field(g, "n", lat, "batch_size");
        /* ComfyUI's noise: one randn over the batch from the seed */
        if (num(lat, "batch_size") > 1)
            cJSON_AddTrueToObject(job, "comfy_batch_noise");
        return true;
    }
    if (is(lat, "VAEEncode")) {
        int ix = 0;
        gnode *img = src(g, lat, "pixels", &ix);
        if (!is(img, "LoadImage")) {
            unsupported(g, lat, "pixels", "VAEEncode's pixels must come from LoadImage");
            return false;
        }
        char err[256] = "no image store";
        char *b64 = g->ctx->load_image ? g->ctx->load_image(g->ctx->user, str(img, "image"),
                                                            err, sizeof err)
                                       : NULL;
        if (!b64) {
            comfy_node_error(g, img, "invalid_input_type", "The image cannot be loaded", "image", NULL,
                       "image: %s", err);
            return false;
        }
        cJSON_AddStringToObject(job, "init_image", b64);
        free(b64);
        note_field(g, "init_image", img, "image");
        cJSON_AddNumberToObject(job, "strength", s->denoise);
        note_field(g, "strength", s->node, "denoise");
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
    cJSON_AddNumberToObject(job, "hires_width", w);
    note_field(g, "hires_width", up, "width");
    cJSON_AddNumberToObject(job, "hires_height", h);
    note_field(g, "hires_height", up, "height");
    cJSON_AddStringToObject(job, "hires_upscaler", up_name);
    note_field(g, "hires_upscaler", up, "upscale_method");
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
        cJSON_AddNumberToObject(job, "hires_scale", num(up, "scale_by"));
        note_field(g, "hires_scale", up, "scale_by");
    } else {
        if (strcmp(str(up, "crop"), "disabled") != 0) {
            unsupported(g, up, "crop", "crop: only 'disabled'");
            return false;
        }
        cJSON_AddNumberToObject(job, "hires_width", num(up, "width"));
        note_field(g, "hires_width", up, "width");
        cJSON_AddNumberToObject(job, "hires_height", num(up, "height"));
        note_field(g, "hires_height", up, "height");
    }
    if (!image) {
        cJSON_AddStringToObject(job, "hires_upscaler",
                                comfy_upscale_to_tessera(str(up, "upscale_method")));
        note_field(g, "hires_upscaler", up, "upscale_method");
    }
    cJSON_AddNumberToObject(job, "hires_steps", second->steps);
    note_field(g, "hires_steps", k2, "steps");
    cJSON_AddNumberToObject(job, "hires_strength", second->denoise);
    note_field(g, "hires_strength", k2, "denoise");
    return true;
}

/* The outputs' one chain into the native job. */
bool comfy_emit(graph *g, gnode **outs, int n_outs)
{
    comfy_plan *p = g->plan;
    gnode *final = NULL;
    for (int i = 0; i < n_outs; i++) {
        gnode *dec = src(g, outs[i], "images", NULL);
        if (!is(dec, "VAEDecode")) {
            unsupported(g, outs[i], "images",
                        "images must come from VAEDecode of a KSampler (Tessera saves sampled "
                        "images)");
            return false;
        }
        gnode *k = src(g, dec, "samples", NULL);
        if (!is(k, "KSampler") && !is(k, "KSamplerAdvanced")) {
            unsupported(g, dec, "samples", "VAEDecode's samples must come from a KSampler");
            return false;
        }
        if (final && k != final) {
            unsupported(g, outs[i], "images",
                        "more than one sampled chain in one prompt is not supported yet "
                        "(send one prompt per KSampler output)");
            return false;
        }
        final = k;
    }
    sampling s;
    if (!read_sampler(g, final, &s))
        return false;
    snprintf(p->sampler_node, sizeof p->sampler_node, "%s", final->id);
    cJSON *job = cJSON_CreateObject();
    p->job = job;
    gnode *lat = src(g, final, "latent_image", NULL);
    if (is(lat, "LatentUpscale") || is(lat, "LatentUpscaleBy"))
        return compile_hires(g, &s, lat, job);
    if (is(lat, "VAEEncode")) {
        gnode *px = src(g, lat, "pixels", NULL);
        if (is(px, "ImageScale"))
            return compile_hires(g, &s, px, job);
    }
    return compile_sampler(g, &s, job) && compile_latent(g, &s, job);
}

cJSON *comfy_field_error(const comfy_plan *p, const char *field, const char *message)
{
    for (int i = 0; field && i < p->n_fields; i++) {
        if (strcmp(p->fields[i].field, field) != 0)
            continue;
        cJSON *o = comfy_error_body("prompt_outputs_failed_validation",
                                    "Prompt outputs failed validation", message);
        cJSON *entry = cJSON_AddObjectToObject(cJSON_GetObjectItem(o, "node_errors"),
                                               p->fields[i].node);
        cJSON *errs = cJSON_AddArrayToObject(entry, "errors");
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "type", "value_not_accepted");
        cJSON_AddStringToObject(e, "message", "Tessera refused the value");
        cJSON_AddStringToObject(e, "details", message);
        cJSON *x = cJSON_AddObjectToObject(e, "extra_info");
        cJSON_AddStringToObject(x, "input_name", p->fields[i].input);
        cJSON_AddItemToArray(errs, e);
        cJSON *deps = cJSON_AddArrayToObject(entry, "dependent_outputs");
        for (int k = 0; k < p->n_outputs; k++)
            cJSON_AddItemToArray(deps, cJSON_CreateString(p->outputs[k]));
        cJSON_AddStringToObject(entry, "class_type", p->fields[i].class_type);
        return o;
    }
    return comfy_error_body("prompt_outputs_failed_validation", "Prompt outputs failed validation",
                            message);
}
