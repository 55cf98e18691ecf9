/*
 * pipeline/engine.c - opening a model for generation: every component on
 * one backend, the scheduler config (with the prediction override), and the
 * facts the batch needs (latent channels, size multiple, default size, the
 * linear preview map).
 *
 * Loading is the slow part of a process's life (weights are widened to f32
 * once here), so everything that can be decided once is decided here and
 * the per-image path only looks it up.
 *
 * A replica (tsr_engine_open_replica, docs/multi-gpu.md part 2) is a second
 * engine on another host-memory backend that borrows its source's weights
 * instead of reading the checkpoint again: weights are read-only once
 * loaded (LoRAs run beside them), so one copy serves every CPU device.
 * Everything that is written while generating (the backend's threads and
 * scratch, the UNet's and VAE's arenas, caches, LoRA and embedding tables)
 * is the replica's own.  The replica holds a reference on its source, so
 * the weights outlive whichever of the two is closed first.  A replica on
 * a GPU (or, asked for, on a CPU) gets its own copy of the weights by
 * broadcast instead (pipeline/replica.c); it owns them and holds no
 * reference.
 */
#include <stdatomic.h>
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "image/image.h"
#include "pipeline/embeddings.h"
#include "pipeline/lora.h"
#include "pipeline/pipeline_internal.h"

void tsr_engine_options_init(tsr_engine_options *o)
{
    memset(o, 0, sizeof *o);
    o->device = "auto";
}

void tsr_engine_close(tsr_engine *e)
{
    if (!e || atomic_fetch_sub(&e->refs, 1) > 1)
        return; /* a replica still borrows its weights */
    tsr_taesd_free(e->taesd);
    tsr_vae_free(e->vae);
    tsr_engine_lora_close(e);
    tsr_engine_emb_close(e);
    tsr_unet_free(e->unet);
    if (!e->src) {
        tsr_weights_free(e->vae_w);
        tsr_weights_free(e->unet_w);
    }
    tsr_text_cond_free(e->cond);
    tsr_model_close(e->model);
    tsr_backend_destroy(e->backend);
    tsr_engine *src = e->src;
    free(e);
    tsr_engine_close(src); /* its reference */
}

static void model_stem(const char *path, char *out, size_t size)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t start = n;
    while (start > 0 && path[start - 1] != '/')
        start--;
    size_t len = n - start;
    const char *dot = NULL;
    for (size_t i = start; i < n; i++)
        if (path[i] == '.')
            dot = path + i;
    if (dot && strncmp(dot, ".safetensors", 12) == 0)
        len = (size_t)(dot - (path + start));
    if (len >= size)
        len = size - 1;
    memcpy(out, path + start, len);
    out[len] = '\0';
}

static int open_scheduler(tsr_engine *e, const char *prediction)
{
    const cJSON *json = tsr_model_scheduler_config(e->model);
    TSR_TRY(tsr_sched_config_from_json(json, "scheduler_config.json", &e->sched));
    /* The model's own scheduler, or Euler (with SD's training schedule
     * defaults) for single files that carry none. */
    if (!json || tsr_sampler_from_config(json, &e->default_sampler) != TSR_OK)
        e->default_sampler = TSR_SAMPLER_EULER;
    tsr_error_clear();
    if (prediction) {
        if (strcmp(prediction, "epsilon") == 0)
            e->sched.prediction_type = TSR_PRED_EPSILON;
        else if (strcmp(prediction, "v") == 0 || strcmp(prediction, "v_prediction") == 0)
            e->sched.prediction_type = TSR_PRED_V;
        else
            return tsr_errorf(TSR_ERR_INVALID, "prediction must be epsilon or v, not '%s'",
                              prediction);
    } else if (e->sched.prediction_type == TSR_PRED_UNSET) {
        e->sched.prediction_type =
            tsr_model_prediction(e->model) == TSR_PREDICTION_V ? TSR_PRED_V : TSR_PRED_EPSILON;
    }
    return TSR_OK;
}

/* The linear preview map: the published factors only for the family's
 * standard VAE (their numbers describe that latent space and no other);
 * any other VAE gets a map fitted to it.  A failed fit costs the previews,
 * not the engine. */
static void choose_preview_map(tsr_engine *e, const tsr_vae_desc *vd)
{
    e->preview_linear = false;
    if (tsr_preview_vae_is_published(e->family, vd) &&
        tsr_preview_published_map(e->family, &e->preview_map) == TSR_OK) {
        e->preview_linear = true;
        return;
    }
    if (tsr_preview_fit(e->vae, &e->preview_map) != TSR_OK) {
        TSR_WARN("no linear previews for this VAE: %s", tsr_last_error());
        tsr_error_clear();
        return;
    }
    e->preview_linear = true;
    TSR_INFO("linear previews: factors fitted to this VAE (%d latent channels)",
             e->preview_map.channels);
}

/* A replica by broadcast: rank `rank` of g, its weights `from`'s. */
typedef struct engine_bcast {
    tsr_replica_group *g;
    int rank;
    const tsr_engine *from;
} engine_bcast;

static int engine_open(const tsr_engine_options *o, tsr_engine *src, const engine_bcast *bc,
                       tsr_engine **out)
{
    *out = NULL;
    if (!o || !o->model)
        return tsr_errorf(TSR_ERR_INVALID, "no model given");
    tsr_tokenizer_mode tok_mode;
    TSR_TRY(tsr_tokenizer_mode_parse(o->tokenizer, &tok_mode));
    tsr_engine *e = calloc(1, sizeof *e);
    if (!e)
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate the engine");
    atomic_init(&e->refs, 1);
    int rc;
    const char *device = o->device;
    if (o->precision && strcmp(o->precision, "f32") != 0) {
        if (strcmp(o->precision, "bf16") != 0) {
            rc = tsr_errorf(TSR_ERR_INVALID, "precision must be f32 or bf16, not '%s'",
                            o->precision);
            goto fail;
        }
        if (device && *device && strcmp(device, "auto") != 0 && strcmp(device, "cpu") != 0) {
            rc = tsr_errorf(TSR_ERR_INVALID,
                            "precision bf16 is the CPU's fast mode: use it with device auto or "
                            "cpu, not '%s'",
                            device);
            goto fail;
        }
        device = "cpu-bf16gemm";
    }
    TSR_CHECK_GOTO(rc, tsr_backend_open(device, o->threads, &e->backend), fail);
    if (src) {
        /* borrowing needs the same bytes in the same kind of memory */
        if (!e->backend->host_visible || !src->backend->host_visible ||
            tsr_backend_weight_dtype(e->backend) != tsr_backend_weight_dtype(src->backend)) {
            rc = tsr_errorf(TSR_ERR_UNSUPPORTED,
                            "a replica on %s cannot borrow the weights of an engine on %s (both "
                            "must be host memory with one weight dtype; GPUs would broadcast: "
                            "docs/multi-gpu.md part 2)",
                            e->backend->name, src->backend->name);
            goto fail;
        }
        atomic_fetch_add(&src->refs, 1);
        e->src = src;
    }
    const char *missing = tsr_backend_missing_op(e->backend);
    if (missing) {
        rc = tsr_errorf(TSR_ERR_UNSUPPORTED, "%s cannot run %s yet; use --device cpu (or auto)",
                        e->backend->name, missing);
        goto fail;
    }
    TSR_CHECK_GOTO(rc, tsr_model_open(o->model, &e->model), fail);
    const char *path = tsr_model_path(e->model);
    for (int c = TSR_COMP_UNET; c <= TSR_COMP_VAE; c++)
        if (!tsr_model_has(e->model, (tsr_component)c)) {
            rc = tsr_errorf(TSR_ERR_NOT_FOUND, "%s: the model has no %s", path,
                            tsr_component_name((tsr_component)c));
            goto fail;
        }
    e->family = tsr_model_family(e->model);
    e->sdxl = e->family == TSR_FAMILY_SDXL;
    TSR_CHECK_GOTO(rc, open_scheduler(e, o->prediction), fail);
    if (bc) {
        /* every weight arena of `from`'s layout, filled by the broadcast
         * (e->unet_w and e->vae_w set; the encoders' go to the conditioner) */
        tsr_weights *te[2];
        TSR_CHECK_GOTO(rc, tsr_engine_receive_weights(e, bc->from, bc->g, bc->rank, te), fail);
        TSR_CHECK_GOTO(rc, tsr_text_cond_open_given(e->model, e->backend, te, &e->cond), fail);
    } else if (e->src) {
        TSR_CHECK_GOTO(rc, tsr_text_cond_open_shared(e->model, e->backend, e->src->cond, &e->cond),
                       fail);
    } else {
        TSR_CHECK_GOTO(rc, tsr_text_cond_open(e->model, e->backend, &e->cond), fail);
    }
    tsr_text_cond_set_tokenizer(e->cond, tok_mode);
    TSR_CHECK_GOTO(rc, tsr_engine_emb_open(e, o), fail);

    const tsr_unet_desc *ud = tsr_model_unet_desc(e->model);
    const tsr_vae_desc *vd = tsr_model_vae_desc(e->model);
    if (!ud || !vd) {
        rc = tsr_errorf(TSR_ERR_NOT_FOUND, "%s: missing UNet or VAE config", path);
        goto fail;
    }
    if (e->src)
        e->unet_w = e->src->unet_w;
    else if (!bc)
        TSR_CHECK_GOTO(rc, tsr_weights_load(e->model, TSR_COMP_UNET, e->backend, &e->unet_w),
                       fail);
    TSR_CHECK_GOTO(rc, tsr_unet_create(ud, e->unet_w, e->backend, &e->unet), fail);
    TSR_CHECK_GOTO(rc, tsr_engine_lora_open(e, o), fail);
    if (e->src)
        e->vae_w = e->src->vae_w;
    else if (!bc)
        TSR_CHECK_GOTO(rc, tsr_weights_load(e->model, TSR_COMP_VAE, e->backend, &e->vae_w), fail);
    TSR_CHECK_GOTO(rc, tsr_vae_create(vd, e->vae_w, e->backend, &e->vae), fail);
    if (o->taesd)
        TSR_CHECK_GOTO(rc, tsr_taesd_open(o->taesd, e->backend, &e->taesd), fail);

    e->in_channels = ud->in_channels;
    e->latent_channels = vd->latent_channels;
    const int extra = ud->in_channels - vd->latent_channels;
    if (extra != 0 && extra != vd->latent_channels + 1) {
        rc = tsr_errorf(TSR_ERR_FORMAT, "%s: UNet takes %d channels but the VAE makes %d", path,
                        ud->in_channels, vd->latent_channels);
        goto fail;
    }
    if (ud->out_channels != vd->latent_channels) {
        rc = tsr_errorf(TSR_ERR_FORMAT, "%s: UNet predicts %d channels, VAE latents have %d", path,
                        ud->out_channels, vd->latent_channels);
        goto fail;
    }
    if (tsr_text_cond_dim(e->cond) != ud->cross_attention_dim) {
        rc = tsr_errorf(TSR_ERR_FORMAT, "%s: text encoders give %d channels, the UNet wants %d",
                        path, tsr_text_cond_dim(e->cond), ud->cross_attention_dim);
        goto fail;
    }
    e->vae_factor = tsr_vae_factor(e->vae);
    if (e->taesd && (e->vae_factor != 8 ||
                     tsr_taesd_latent_channels(e->taesd) != vd->latent_channels)) {
        rc = tsr_errorf(TSR_ERR_INVALID,
                        "%s: TAESD decodes %d-channel latents 8x; this VAE has %d channels and "
                        "factor %d",
                        o->taesd, tsr_taesd_latent_channels(e->taesd), vd->latent_channels,
                        e->vae_factor);
        goto fail;
    }
    choose_preview_map(e, vd);
    e->size_multiple = e->vae_factor; /* the UNet takes any latent size */

    bool force_zeros = false;
    const cJSON *index = tsr_model_index(e->model);
    const cJSON *fz = index ? cJSON_GetObjectItemCaseSensitive(index, "force_zeros_for_empty_prompt")
                            : NULL;
    if (cJSON_IsBool(fz))
        force_zeros = cJSON_IsTrue(fz);
    else if (!index)
        force_zeros = e->sdxl; /* single files: diffusers' SDXL default */
    e->force_zeros = force_zeros;

    /* Default size: the family's published resolution, or what the UNet was
     * configured for when that differs (small custom models). */
    int size = e->sdxl ? 1024 : 512;
    if (e->family == TSR_FAMILY_SD2 && e->sched.prediction_type == TSR_PRED_V)
        size = 768;
    if (ud->sample_size > 0 && ud->sample_size * e->vae_factor != size && ud->sample_size < 64)
        size = ud->sample_size * e->vae_factor;
    e->default_size = size;
    model_stem(path, e->model_name, sizeof e->model_name);
    /* A1111's "Model hash" is defined for single checkpoint files; hashing
     * reads the whole file, so it is done once here, not per image. */
    if (e->src || bc) {
        memcpy(e->model_hash, (bc ? bc->from : e->src)->model_hash, sizeof e->model_hash);
    } else if (tsr_model_layout_of(e->model) == TSR_LAYOUT_SINGLE_FILE &&
               tsr_a1111_model_hash(path, e->model_hash) != TSR_OK) {
        TSR_WARN("no model hash for the infotext: %s", tsr_last_error());
        e->model_hash[0] = '\0';
        tsr_error_clear();
    }
    TSR_INFO("model %s (%s) on %s%s", e->model_name, tsr_family_name(e->family), e->backend->name,
             e->src ? ", weights shared with the first engine"
             : bc   ? ", weights broadcast from the first engine"
                    : "");
    *out = e;
    return TSR_OK;
fail:
    tsr_engine_close(e);
    return rc;
}

int tsr_engine_open(const tsr_engine_options *o, tsr_engine **out)
{
    return engine_open(o, NULL, NULL, out);
}

int tsr_engine_open_replica(tsr_engine *src, const tsr_engine_options *o, tsr_engine **out)
{
    if (out)
        *out = NULL;
    if (!src || !o || !out)
        return tsr_errorf(TSR_ERR_INVALID, "tsr_engine_open_replica: NULL argument");
    tsr_engine_options ro = *o;
    ro.model = tsr_model_path(src->model); /* the source's model, whatever o says */
    if (!src->backend->host_visible) /* a GPU's weights travel by broadcast */
        return tsr_engine_replica_by_broadcast(src, &ro, out);
    return engine_open(&ro, src, NULL, out);
}

int tsr_engine_open_replica_bcast(tsr_replica_group *g, int rank, tsr_engine *src,
                                  const tsr_engine_options *o, tsr_engine **out)
{
    if (out)
        *out = NULL;
    if (!g || !src || !o || !out)
        return tsr_errorf(TSR_ERR_INVALID, "tsr_engine_open_replica_bcast: NULL argument");
    if (rank < 0 || rank >= tsr_replica_group_size(g))
        return tsr_errorf(TSR_ERR_INVALID, "tsr_engine_open_replica_bcast: rank %d of a group of %d",
                          rank, tsr_replica_group_size(g));
    if (rank == 0 && tsr_replica_group_size(g) > 1) {
        tsr_replica_group_abort(g, 0, "rank 0 is the source");
        return tsr_errorf(TSR_ERR_INVALID,
                          "tsr_engine_open_replica_bcast: rank 0 of a group of %d is the source "
                          "(tsr_replica_group_send)",
                          tsr_replica_group_size(g));
    }
    tsr_engine_options ro = *o;
    ro.model = tsr_model_path(src->model);
    const engine_bcast bc = {g, rank, src};
    const int rc = engine_open(&ro, NULL, &bc, out);
    /* a rank that gives up leaves its group: its peers fail at once
     * instead of waiting out the timeout (nothing changes for them once
     * the broadcast is over) */
    if (rc < 0)
        tsr_replica_group_abort(g, rank, tsr_last_error());
    return rc;
}

int tsr_engine_default_size(const tsr_engine *e)
{
    return e->default_size;
}

const char *tsr_engine_family(const tsr_engine *e)
{
    return tsr_family_name(e->family);
}

const char *tsr_engine_device(const tsr_engine *e)
{
    return e->backend->name;
}

int tsr_engine_is_inpainting(const tsr_engine *e)
{
    return e->in_channels != e->latent_channels;
}

const char *tsr_engine_model_name(const tsr_engine *e)
{
    return e->model_name;
}

const char *tsr_engine_model_hash(const tsr_engine *e)
{
    return e->model_hash;
}

size_t tsr_engine_device_memory(const tsr_engine *e)
{
    return e->backend->memory_bytes;
}

int tsr_engine_memory_estimate(tsr_engine *e, const tsr_batch_options *o, int images, int width,
                               int height, int cfg, size_t *bytes)
{
    *bytes = 0;
    tsr_batch_options def;
    if (!o) {
        tsr_batch_options_init(&def);
        o = &def;
    }
    if (images < 1 || width < TSR_MIN_SIZE || height < TSR_MIN_SIZE || width > TSR_MAX_SIZE ||
        height > TSR_MAX_SIZE || width % e->vae_factor || height % e->vae_factor)
        return tsr_errorf(TSR_ERR_INVALID, "memory estimate: %d images of %dx%d", images, width,
                          height);
    const int per = cfg ? 2 : 1;
    int rows = images * per;
    if (rows > o->max_rows)
        rows = o->max_rows - o->max_rows % per;
    const size_t lh = (size_t)height / e->vae_factor, lw = (size_t)width / e->vae_factor;
    const size_t C = (size_t)e->latent_channels, Cin = (size_t)e->in_channels;
    const size_t L = 77 * 4; /* prompts up to 4 windows of 77 tokens */
    const size_t D = (size_t)tsr_text_cond_dim(e->cond), P = (size_t)tsr_text_cond_pooled_dim(e->cond);
    /* 1. the UNet's workspace for `rows` rows */
    tsr_unet_inputs in;
    memset(&in, 0, sizeof in);
    in.batch = rows;
    in.height = (int)lh;
    in.width = (int)lw;
    in.channels = (int)Cin;
    in.context_len = (int)L;
    float dummy = 0;
    in.latents = in.timesteps = in.context = &dummy;
    if (e->sdxl) {
        in.text_embeds = in.time_ids = &dummy;
        in.n_time_ids = 6;
    }
    size_t unet_ws;
    TSR_TRY(tsr_unet_workspace_need(e->unet, &in, &unet_ws));
    /* 2. the batch's row buffers: inputs, outputs, contexts, guidance */
    size_t batch_bufs = sizeof(float) * ((size_t)rows * lh * lw * (Cin + C) +
                                         (size_t)rows * L * (D + P + 7) + lh * lw * C);
    /* 3. one VAE decode chunk (tiled above the pixel limit: 64x64-latent tiles) */
    int chunk = images < o->max_decode_images ? images : o->max_decode_images;
    size_t vae_ws;
    const bool tiled = (long long)width * height > o->max_decode_pixels;
    const int dh = tiled && lh > 64 ? 64 : (int)lh, dw = tiled && lw > 64 ? 64 : (int)lw;
    TSR_TRY(tsr_vae_decode_workspace_need(e->vae, chunk, dh, dw, &vae_ws));
    const size_t npix = (size_t)width * height;
    size_t decode_io = (size_t)chunk * (lh * lw * C + npix * 3) * sizeof(float);
    if (tiled) /* the tile's own input/output copies */
        decode_io += (size_t)chunk * (64 * 64 * C + 512 * 512 * 3) * sizeof(float);
    /* 4. per image: latent, x0, masks, conditioning, the finished RGB, a
     *    preview at image size */
    size_t per_image = sizeof(float) * (3 * lh * lw * C + lh * lw + 2 * L * D + 2 * P) + npix * 3;
    size_t preview = npix * 3 + lh * lw * 3;
    /* 5. what no planner sees: the backend's scratch (the CPU's im2col tiles
     *    and attention score blocks per thread) and allocator slack */
    const size_t planned =
        unet_ws + batch_bufs + vae_ws + decode_io + (size_t)images * per_image + preview;
    *bytes = planned + planned / 10 + ((size_t)64 << 20);
    return TSR_OK;
}

int tsr_batch_image_infotext(const tsr_engine *e, tsr_batch_image *j)
{
    tsr_a1111_info info;
    tsr_a1111_info_init(&info);
    info.prompt = j->prompt;
    info.negative_prompt = j->negative;
    info.steps = j->steps;
    info.sampler = tsr_sampler_display_name(j->sampler_kind);
    info.schedule_type = j->schedule == TSR_SCHEDULE_DEFAULT ? "Automatic"
                                                             : tsr_schedule_display_name(j->schedule);
    info.cfg_scale = j->cfg_scale;
    info.seed = (int64_t)j->seed;
    info.width = j->res.width; /* the first pass's size, as A1111 writes it */
    info.height = j->res.height;
    info.model_hash = e->model_hash[0] ? e->model_hash : NULL;
    info.model = e->model_name;
    info.denoising_strength = j->strength;
    info.clip_skip = j->clip_skip;
    info.rng = j->rng_kind == TSR_RNG_CUDA ? NULL : "CPU";
    info.tiling = j->params.tiling;
    char version[32];
    snprintf(version, sizeof version, "tessera %s", tsr_version());
    info.version = version;
    info.lora_hashes = tsr_image_lora_hashes(j->lora);
    info.ti_hashes = j->ti_hashes;
    if (j->step_offset > 0) { /* a hires image, its second pass done */
        const tsr_image_params *p = &j->params;
        info.denoising_strength = p->hires_strength;
        if (p->hires_width || p->hires_height) {
            info.hires_resize_x = p->hires_width;
            info.hires_resize_y = p->hires_height;
        } else {
            info.hires_upscale = p->hires_scale;
        }
        info.hires_steps = p->hires_steps;
        info.hires_upscaler = j->upscaler;
    }
    return tsr_a1111_parameters(&info, &j->parameters);
}
