/*
 * service/api/comfy/comfy_nodes.c - the node classes Tessera runs, as data,
 * and GET /object_info rendered from them.
 *
 * Why one table: ComfyUI's clients (its frontend, comfy-api-simplified,
 * scripts) learn the nodes from /object_info and then send workflows the
 * validator checks.  When both read the same rows, what /object_info
 * promises is exactly what POST /prompt accepts: an input's type, default,
 * range and choices are written once.  The ranges are Tessera's where they
 * are narrower than ComfyUI's (sizes 64..4096, at most 16 images a job), so
 * a client that honours /object_info never meets a refusal from the engine.
 *
 * Names: ComfyUI's sampler and scheduler names map to Tessera's here; a
 * ComfyUI name Tessera has no counterpart for is simply not offered (a
 * workflow naming it gets value_not_in_list, as ComfyUI answers an unknown
 * name).  docs/compat-comfyui.md lists the pairs and where the arithmetic
 * differs from ComfyUI's.
 */
#include "comfy.h"
#include "tessera.h"

#include <stdint.h>
#include <string.h>

#define LINK(n, t) {.name = n, .type = t}
#define INT(n, d, lo, hi) {.name = n, .type = CT_INT, .def = d, .min = lo, .max = hi, .step = 1}
#define INT8(n, d, lo, hi) {.name = n, .type = CT_INT, .def = d, .min = lo, .max = hi, .step = 8}
#define FLT(n, d, lo, hi, st) {.name = n, .type = CT_FLOAT, .def = d, .min = lo, .max = hi, .step = st}
#define COMBO(n, c) {.name = n, .type = CT_COMBO, .choices = c}
#define SEED_MAX 18446744073709551615.0

static const comfy_class k_classes[] = {
    {.name = "CheckpointLoaderSimple", .display = "Load Checkpoint", .category = "loaders",
     .description = "The model Tessera loaded (serve --model); no other checkpoint can be named.",
     .inputs = {COMBO("ckpt_name", CC_CHECKPOINTS)},
     .outputs = {CT_MODEL, CT_CLIP, CT_VAE}, .output_names = {"MODEL", "CLIP", "VAE"},
     .n_outputs = 3},
    {.name = "CLIPTextEncode", .display = "CLIP Text Encode (Prompt)", .category = "conditioning",
     .description = "A prompt (A1111's emphasis syntax and <lora:...> tags are read as "
                    "Tessera reads them).",
     .inputs = {{.name = "text", .type = CT_STRING, .sdef = "", .multiline = true},
                LINK("clip", CT_CLIP)},
     .outputs = {CT_CONDITIONING}, .output_names = {"CONDITIONING"}, .n_outputs = 1},
    {.name = "CLIPSetLastLayer", .display = "CLIP Set Last Layer", .category = "conditioning",
     .description = "-1 = the last layer; -2 = A1111's clip skip 2.",
     .inputs = {LINK("clip", CT_CLIP), INT("stop_at_clip_layer", -1, -12, -1)},
     .outputs = {CT_CLIP}, .output_names = {"CLIP"}, .n_outputs = 1},
    {.name = "LoraLoader", .display = "Load LoRA", .category = "loaders",
     .description = "A LoRA from serve --lora-dir (docs/lora.md).",
     .inputs = {LINK("model", CT_MODEL), LINK("clip", CT_CLIP), COMBO("lora_name", CC_LORAS),
                FLT("strength_model", 1.0, -100, 100, 0.01),
                FLT("strength_clip", 1.0, -100, 100, 0.01)},
     .outputs = {CT_MODEL, CT_CLIP}, .output_names = {"MODEL", "CLIP"}, .n_outputs = 2},
    {.name = "EmptyLatentImage", .display = "Empty Latent Image", .category = "latent",
     .inputs = {INT8("width", 512, 64, 4096), INT8("height", 512, 64, 4096),
                INT("batch_size", 1, 1, 16)},
     .outputs = {CT_LATENT}, .output_names = {"LATENT"}, .n_outputs = 1},
    {.name = "KSampler", .display = "KSampler", .category = "sampling",
     .inputs = {LINK("model", CT_MODEL), INT("seed", 0, 0, SEED_MAX), INT("steps", 20, 1, 1000),
                FLT("cfg", 8.0, 0, 100, 0.1), COMBO("sampler_name", CC_SAMPLERS),
                COMBO("scheduler", CC_SCHEDULERS), LINK("positive", CT_CONDITIONING),
                LINK("negative", CT_CONDITIONING), LINK("latent_image", CT_LATENT),
                FLT("denoise", 1.0, 0, 1, 0.01)},
     .outputs = {CT_LATENT}, .output_names = {"LATENT"}, .n_outputs = 1},
    {.name = "KSamplerAdvanced", .display = "KSampler (Advanced)", .category = "sampling",
     .description = "add_noise enable, start_at_step 0, end_at_step >= steps and "
                    "return_with_leftover_noise disable only (a whole run, as KSampler).",
     .inputs = {LINK("model", CT_MODEL), COMBO("add_noise", CC_ENABLE),
                INT("noise_seed", 0, 0, SEED_MAX), INT("steps", 20, 1, 1000),
                FLT("cfg", 8.0, 0, 100, 0.1), COMBO("sampler_name", CC_SAMPLERS),
                COMBO("scheduler", CC_SCHEDULERS), LINK("positive", CT_CONDITIONING),
                LINK("negative", CT_CONDITIONING), LINK("latent_image", CT_LATENT),
                INT("start_at_step", 0, 0, 10000), INT("end_at_step", 10000, 0, 10000),
                COMBO("return_with_leftover_noise", CC_ENABLE)},
     .outputs = {CT_LATENT}, .output_names = {"LATENT"}, .n_outputs = 1},
    {.name = "LatentUpscale", .display = "Upscale Latent", .category = "latent",
     .description = "Between two KSamplers: the hires fix (its size is the final image's).",
     .inputs = {LINK("samples", CT_LATENT), COMBO("upscale_method", CC_UPSCALE),
                INT8("width", 512, 64, 4096), INT8("height", 512, 64, 4096),
                COMBO("crop", CC_CROP)},
     .outputs = {CT_LATENT}, .output_names = {"LATENT"}, .n_outputs = 1},
    {.name = "LatentUpscaleBy", .display = "Upscale Latent By", .category = "latent",
     .description = "Between two KSamplers: the hires fix (hires_scale).",
     .inputs = {LINK("samples", CT_LATENT), COMBO("upscale_method", CC_UPSCALE),
                FLT("scale_by", 1.5, 0.01, 8.0, 0.01)},
     .outputs = {CT_LATENT}, .output_names = {"LATENT"}, .n_outputs = 1},
    {.name = "ImageScale", .display = "Upscale Image", .category = "image/upscaling",
     .description = "ComfyUI's resize (comfy_scale.c): of LoadImage into VAEEncode (img2img), "
                    "of VAEDecode into SaveImage / PreviewImage, or between VAEDecode of a first "
                    "KSampler and VAEEncode into a second (the hires fix in image space: "
                    "lanczos and nearest-exact, crop disabled).  0 = from the other side's ratio.",
     .inputs = {LINK("image", CT_IMAGE), COMBO("upscale_method", CC_IMAGE_UPSCALE),
                INT("width", 512, 0, COMFY_SCALE_MAX), INT("height", 512, 0, COMFY_SCALE_MAX),
                COMBO("crop", CC_IMAGE_CROP)},
     .outputs = {CT_IMAGE}, .output_names = {"IMAGE"}, .n_outputs = 1},
    {.name = "ImageScaleBy", .display = "Upscale Image By", .category = "image/upscaling",
     .description = "ImageScale by a factor (each side round(side * scale_by)): of LoadImage "
                    "into VAEEncode, or of VAEDecode into SaveImage / PreviewImage.",
     .inputs = {LINK("image", CT_IMAGE), COMBO("upscale_method", CC_IMAGE_UPSCALE),
                FLT("scale_by", 1.0, 0.01, 8.0, 0.01)},
     .outputs = {CT_IMAGE}, .output_names = {"IMAGE"}, .n_outputs = 1},
    {.name = "VAEDecode", .display = "VAE Decode", .category = "latent",
     .inputs = {LINK("samples", CT_LATENT), LINK("vae", CT_VAE)},
     .outputs = {CT_IMAGE}, .output_names = {"IMAGE"}, .n_outputs = 1},
    {.name = "VAEEncode", .display = "VAE Encode", .category = "latent",
     .description = "img2img: its pixels are the init image (KSampler's denoise = strength).",
     .inputs = {LINK("pixels", CT_IMAGE), LINK("vae", CT_VAE)},
     .outputs = {CT_LATENT}, .output_names = {"LATENT"}, .n_outputs = 1},
    {.name = "SetLatentNoiseMask", .display = "Set Latent Noise Mask", .category = "latent/inpaint",
     .description = "Inpainting: a VAEEncode latent of LoadImage, changed only under the "
                    "mask (LoadImage's MASK: its alpha); denoise = strength.",
     .inputs = {LINK("samples", CT_LATENT), LINK("mask", CT_MASK)},
     .outputs = {CT_LATENT}, .output_names = {"LATENT"}, .n_outputs = 1},
    {.name = "VAEEncodeForInpaint", .display = "VAE Encode (for Inpainting)",
     .category = "latent/inpaint",
     .description = "Inpainting with the masked area filled first (A1111's fill); "
                    "grow_mask_by is not applied yet (docs/compat-comfyui.md).",
     .inputs = {LINK("pixels", CT_IMAGE), LINK("vae", CT_VAE), LINK("mask", CT_MASK),
                INT("grow_mask_by", 6, 0, 64)},
     .outputs = {CT_LATENT}, .output_names = {"LATENT"}, .n_outputs = 1},
    {.name = "LoadImage", .display = "Load Image", .category = "image",
     .description = "An image sent to POST /upload/image (its sides multiples of 8).",
     .inputs = {COMBO("image", CC_IMAGES)},
     .outputs = {CT_IMAGE, CT_MASK}, .output_names = {"IMAGE", "MASK"}, .n_outputs = 2},
    {.name = "SaveImage", .display = "Save Image", .category = "image",
     .inputs = {LINK("images", CT_IMAGE),
                {.name = "filename_prefix", .type = CT_STRING, .sdef = "ComfyUI"}},
     .n_outputs = 0, .output_node = true},
    {.name = "PreviewImage", .display = "Preview Image", .category = "image",
     .inputs = {LINK("images", CT_IMAGE)}, .n_outputs = 0, .output_node = true},
};

int comfy_classes(const comfy_class **out)
{
    *out = k_classes;
    return (int)(sizeof k_classes / sizeof k_classes[0]);
}

const comfy_class *comfy_class_find(const char *name)
{
    for (size_t i = 0; i < sizeof k_classes / sizeof k_classes[0]; i++)
        if (strcmp(k_classes[i].name, name) == 0)
            return &k_classes[i];
    return NULL;
}

const char *comfy_type_name(comfy_type t)
{
    static const char *const names[CT_COUNT] = {
        "INT", "FLOAT", "STRING", "BOOLEAN", "COMBO", "MODEL", "CLIP", "VAE",
        "CONDITIONING", "LATENT", "IMAGE", "MASK"};
    return (unsigned)t < CT_COUNT ? names[t] : "?";
}

/* ComfyUI's name -> Tessera's (docs/compat-comfyui.md, "Samplers"). */
static const char *const k_samplers[][2] = {
    {"euler", "euler"},           {"euler_ancestral", "euler_a"}, {"heun", "heun"},
    {"dpm_2", "dpm2"},            {"dpm_2_ancestral", "dpm2_a"}, {"lms", "lms"},
    {"dpmpp_2s_ancestral", "dpmpp_2s_a"}, {"dpmpp_sde", "dpmpp_sde"},
    {"dpmpp_2m", "dpmpp_2m"},     {"dpmpp_2m_sde", "dpmpp_2m_sde"},
    {"dpmpp_3m_sde", "dpmpp_3m_sde"}, {"ddpm", "ddpm"}, {"lcm", "lcm"},
    /* ComfyUI's ddim is k-diffusion's euler (comfy/samplers.py sampler_object) */
    {"ddim", "euler"},            {"uni_pc", "unipc"},
};
/* ComfyUI's scheduler -> Tessera's ComfyUI-exact schedule (sched_comfy.c),
 * for the samplers that take one; for the others diffusers' nearest
 * schedule (not ComfyUI's sigmas), or none (the engine refuses the pair). */
static const char *const k_schedulers[][3] = {
    {"normal", "comfy_normal", "default"},
    {"karras", "comfy_karras", "karras"},
    {"exponential", "comfy_exponential", "exponential"},
    {"sgm_uniform", "comfy_sgm_uniform", "sgm_uniform"},
    {"simple", "comfy_simple", NULL},
    {"ddim_uniform", "comfy_ddim_uniform", NULL},
    {"beta", "comfy_beta", NULL},
};
/* ComfyUI's latent upscale methods -> A1111's hires upscaler names. */
static const char *const k_upscale[][2] = {
    {"nearest-exact", "Latent (nearest-exact)"}, {"bilinear", "Latent"},
    {"bicubic", "Latent (bicubic)"},
};

/* ImageScale's methods (ComfyUI's list, comfy_scale.c runs them all) -> the
 * engine's image-space hires upscalers, for ImageScale between two
 * KSamplers: Pillow's Lanczos, and Pillow's nearest (which samples pixel
 * centres, as nearest-exact does); NULL = no hires path. */
static const char *const k_image_upscale[][2] = {
    {"nearest-exact", "Nearest"}, {"bilinear", NULL}, {"area", NULL}, {"bicubic", NULL},
    {"lanczos", "Lanczos"},
};

#define N(a) (sizeof a / sizeof a[0])

static const char *lookup(const char *const (*t)[2], size_t n, const char *name)
{
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(t[i][0], name) == 0)
            return t[i][1];
    return NULL;
}

const char *comfy_sampler_to_tessera(const char *c) { return lookup(k_samplers, N(k_samplers), c); }
const char *comfy_scheduler_to_tessera(const char *sampler, const char *c)
{
    for (size_t i = 0; c && i < N(k_schedulers); i++) {
        if (strcmp(k_schedulers[i][0], c) != 0)
            continue;
        if (!k_schedulers[i][2] || !sampler)
            return k_schedulers[i][1];
        /* does the engine's sampler offer the comfy_* schedule? */
        const tsr_sampler_desc *sd = NULL;
        const tsr_schedule_desc *sc = NULL;
        int n = tsr_samplers(&sd), ns = tsr_schedules(&sc), bit = -1;
        for (int k = 0; k < ns && k < 32; k++)
            if (strcmp(sc[k].name, k_schedulers[i][1]) == 0)
                bit = k;
        for (int k = 0; k < n; k++)
            if (strcmp(sd[k].name, sampler) == 0 && bit >= 0 && (sd[k].schedules & (1u << bit)))
                return k_schedulers[i][1];
        return k_schedulers[i][2];
    }
    return NULL;
}
const char *comfy_upscale_to_tessera(const char *c) { return lookup(k_upscale, N(k_upscale), c); }
const char *comfy_image_upscale_to_tessera(const char *c)
{
    return lookup(k_image_upscale, N(k_image_upscale), c);
}

const char *const *comfy_choice_list(comfy_choices c, const comfy_context *ctx)
{
    static const char *samplers[N(k_samplers) + 1], *schedulers[N(k_schedulers) + 1],
        *upscale[N(k_upscale) + 1], *image_upscale[N(k_image_upscale) + 1];
    static const char *const crop[] = {"disabled", NULL};
    static const char *const image_crop[] = {"disabled", "center", NULL};
    static const char *const enable[] = {"enable", "disable", NULL};
    static const char *const none[] = {NULL};
    switch (c) {
    case CC_SAMPLERS:
        for (size_t i = 0; i < N(k_samplers); i++)
            samplers[i] = k_samplers[i][0];
        return samplers;
    case CC_SCHEDULERS:
        for (size_t i = 0; i < N(k_schedulers); i++)
            schedulers[i] = k_schedulers[i][0];
        return schedulers;
    case CC_UPSCALE:
        for (size_t i = 0; i < N(k_upscale); i++)
            upscale[i] = k_upscale[i][0];
        return upscale;
    case CC_IMAGE_UPSCALE:
        for (size_t i = 0; i < N(k_image_upscale); i++)
            image_upscale[i] = k_image_upscale[i][0];
        return image_upscale;
    case CC_CROP: return crop;
    case CC_IMAGE_CROP: return image_crop;
    case CC_ENABLE: return enable;
    case CC_CHECKPOINTS: return ctx && ctx->checkpoints ? ctx->checkpoints : none;
    case CC_LORAS: return ctx && ctx->loras ? ctx->loras : none;
    case CC_IMAGES: return ctx && ctx->images ? ctx->images : none;
    case CC_NONE: break;
    }
    return none;
}

/* ------------------------------------------------------------ /object_info */

/* One input as ComfyUI writes it: [TYPE, {options}] or [[choices], {}]. */
static cJSON *input_json(const comfy_input *in, const comfy_context *ctx)
{
    cJSON *a = cJSON_CreateArray();
    cJSON *opt = cJSON_CreateObject();
    if (in->type == CT_COMBO) {
        cJSON *list = cJSON_CreateArray();
        for (const char *const *c = comfy_choice_list(in->choices, ctx); *c; c++)
            cJSON_AddItemToArray(list, cJSON_CreateString(*c));
        cJSON_AddItemToArray(a, list);
        if (in->choices == CC_IMAGES)
            cJSON_AddBoolToObject(opt, "image_upload", true);
    } else {
        cJSON_AddItemToArray(a, cJSON_CreateString(comfy_type_name(in->type)));
        if (in->type == CT_INT || in->type == CT_FLOAT) {
            cJSON_AddNumberToObject(opt, "default", in->def);
            cJSON_AddNumberToObject(opt, "min", in->min);
            cJSON_AddNumberToObject(opt, "max", in->max);
            cJSON_AddNumberToObject(opt, "step", in->step);
            if (strcmp(in->name, "seed") == 0 || strcmp(in->name, "noise_seed") == 0)
                cJSON_AddBoolToObject(opt, "control_after_generate", true);
        } else if (in->type == CT_STRING) {
            cJSON_AddStringToObject(opt, "default", in->sdef ? in->sdef : "");
            if (in->multiline)
                cJSON_AddBoolToObject(opt, "multiline", true);
        }
    }
    cJSON_AddItemToArray(a, opt);
    return a;
}

static cJSON *class_json(const comfy_class *c, const comfy_context *ctx)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *input = cJSON_AddObjectToObject(o, "input");
    cJSON *req = cJSON_AddObjectToObject(input, "required");
    cJSON *order = cJSON_CreateObject();
    cJSON *req_order = cJSON_AddArrayToObject(order, "required");
    for (int i = 0; i < COMFY_MAX_INPUTS && c->inputs[i].name; i++) {
        cJSON_AddItemToObject(req, c->inputs[i].name, input_json(&c->inputs[i], ctx));
        cJSON_AddItemToArray(req_order, cJSON_CreateString(c->inputs[i].name));
    }
    cJSON_AddItemToObject(o, "input_order", order);
    cJSON *out = cJSON_AddArrayToObject(o, "output");
    cJSON *is_list = cJSON_AddArrayToObject(o, "output_is_list");
    cJSON *names = cJSON_AddArrayToObject(o, "output_name");
    for (int i = 0; i < c->n_outputs; i++) {
        cJSON_AddItemToArray(out, cJSON_CreateString(comfy_type_name(c->outputs[i])));
        cJSON_AddItemToArray(is_list, cJSON_CreateFalse());
        cJSON_AddItemToArray(names, cJSON_CreateString(c->output_names[i]));
    }
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddStringToObject(o, "display_name", c->display);
    cJSON_AddStringToObject(o, "description", c->description ? c->description : "");
    cJSON_AddStringToObject(o, "python_module", "nodes");
    cJSON_AddStringToObject(o, "category", c->category);
    cJSON_AddBoolToObject(o, "output_node", c->output_node);
    cJSON_AddBoolToObject(o, "deprecated", false);
    cJSON_AddBoolToObject(o, "experimental", false);
    return o;
}

cJSON *comfy_object_info(const comfy_context *ctx, const char *name)
{
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < N(k_classes); i++) {
        if (name && strcmp(name, k_classes[i].name) != 0)
            continue;
        cJSON_AddItemToObject(o, k_classes[i].name, class_json(&k_classes[i], ctx));
    }
    if (name && !cJSON_GetArraySize(o)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
