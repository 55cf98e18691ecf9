/*
 * model/model_defaults.c - what diffusers would put next to a single-file
 * checkpoint's weights: the scheduler config, the tokenizer special tokens
 * and the pipeline flags of model_index.json, per family.
 *
 * Why: a single LDM file carries weights only.  diffusers'
 * from_single_file() completes it from a config repository chosen by the
 * checkpoint's family (loaders/single_file_utils.py,
 * DIFFUSERS_DEFAULT_PIPELINE_PATHS):
 *
 *   family          repository                                     scheduler
 *   SD 1.x          stable-diffusion-v1-5/stable-diffusion-v1-5     PNDMScheduler
 *   SD 1.x inpaint  stable-diffusion-v1-5/stable-diffusion-inpainting DDIMScheduler
 *   SD 2.x          stabilityai/stable-diffusion-2-1                DDIMScheduler, v_prediction
 *   SD 2.x inpaint  stabilityai/stable-diffusion-2-inpainting       DDIMScheduler
 *   SDXL base       stabilityai/stable-diffusion-xl-base-1.0        EulerDiscreteScheduler
 *   SDXL refiner    stabilityai/stable-diffusion-xl-refiner-1.0     EulerDiscreteScheduler
 *   SDXL inpaint    diffusers/stable-diffusion-xl-1.0-inpainting-0.1 EulerDiscreteScheduler
 *
 * The configs below are those repositories' scheduler_config.json files
 * (all with SD's training schedule: scaled_linear betas 0.00085..0.012,
 * 1000 steps, steps_offset 1, "leading" spacing, no clipping).  The
 * prediction type follows the model (an SD 2.x file is v unless
 * --prediction says otherwise).  Tokenizers: OpenAI CLIP's BPE for every
 * encoder (text/bpe_default.c); the pad token is "<|endoftext|>" for the
 * CLIP ViT-L encoders (SD 1.x, SDXL's first) and "!" for the OpenCLIP ones
 * (SD 2.x, SDXL's second), as in those repositories' tokenizer folders.
 */
#include <string.h>

#include <cJSON.h>

#include "core/error.h"
#include "model/model_internal.h"

static const char PNDM[] =
    "{\"_class_name\": \"PNDMScheduler\", \"_diffusers_version\": \"0.6.0\", "
    "\"beta_end\": 0.012, \"beta_schedule\": \"scaled_linear\", \"beta_start\": 0.00085, "
    "\"clip_sample\": false, \"num_train_timesteps\": 1000, \"set_alpha_to_one\": false, "
    "\"skip_prk_steps\": true, \"steps_offset\": 1, \"trained_betas\": null}";

static const char DDIM[] =
    "{\"_class_name\": \"DDIMScheduler\", \"_diffusers_version\": \"0.8.0\", "
    "\"beta_end\": 0.012, \"beta_schedule\": \"scaled_linear\", \"beta_start\": 0.00085, "
    "\"clip_sample\": false, \"num_train_timesteps\": 1000, \"set_alpha_to_one\": false, "
    "\"skip_prk_steps\": true, \"steps_offset\": 1, \"trained_betas\": null}";

static const char EULER[] =
    "{\"_class_name\": \"EulerDiscreteScheduler\", \"_diffusers_version\": \"0.19.0.dev0\", "
    "\"beta_end\": 0.012, \"beta_schedule\": \"scaled_linear\", \"beta_start\": 0.00085, "
    "\"clip_sample\": false, \"interpolation_type\": \"linear\", \"num_train_timesteps\": 1000, "
    "\"sample_max_value\": 1.0, \"set_alpha_to_one\": false, \"skip_prk_steps\": true, "
    "\"steps_offset\": 1, \"timestep_spacing\": \"leading\", \"trained_betas\": null, "
    "\"use_karras_sigmas\": false}";

int tsr_model_default_scheduler(const tsr_model *m, cJSON **out)
{
    *out = NULL;
    const char *text = m->family == TSR_FAMILY_SDXL ? EULER
                       : (m->family == TSR_FAMILY_SD2 || m->inpainting) ? DDIM
                                                                        : PNDM;
    cJSON *j = cJSON_Parse(text);
    if (!j)
        return tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
    cJSON_AddStringToObject(j, "prediction_type",
                            m->prediction == TSR_PREDICTION_V ? "v_prediction" : "epsilon");
    *out = j;
    return TSR_OK;
}

const char *tsr_model_default_tokenizer_pad(const tsr_model *m, int which)
{
    return (which == 1 || m->family == TSR_FAMILY_SD2) ? "!" : "<|endoftext|>";
}

int tsr_model_default_index_flags(const tsr_model *m, cJSON *index)
{
    if (m->family != TSR_FAMILY_SDXL)
        return TSR_OK;
    /* StableDiffusionXL(Img2Img)Pipeline's registered config */
    bool ok = cJSON_AddBoolToObject(index, "force_zeros_for_empty_prompt", !m->refiner) != NULL;
    if (m->refiner)
        ok = ok && cJSON_AddBoolToObject(index, "requires_aesthetics_score", true) != NULL;
    return ok ? TSR_OK : tsr_errorf(TSR_ERR_NOMEM, "model: out of memory");
}
