/*
 * scheduler/sched_config.c - scheduler_config.json, per-class defaults, and
 * the names users type for samplers and schedules.
 *
 * Why defaults are resolved per sampler: diffusers' `Class.from_config(cfg)`
 * takes the keys present in the model's config and the class's own defaults
 * for the rest, and ignores keys the class does not know.  The same model
 * config therefore means "leading" spacing for DDIM but "linspace" for
 * Euler when the file is silent, and rescale_betas_zero_snr does nothing to
 * Heun.  tsr_sched_resolve() reproduces exactly that.
 */
#include <ctype.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/json.h"
#include "scheduler/sched_internal.h"

void tsr_sched_config_init(tsr_sched_config *c)
{
    memset(c, 0, sizeof *c);
    c->num_train_timesteps = -1;
    c->beta_start = c->beta_end = NAN;
    c->steps_offset = -1;
    c->rescale_betas_zero_snr = -1;
    c->clip_sample = -1;
    c->clip_sample_range = NAN;
    c->set_alpha_to_one = -1;
    c->skip_prk_steps = -1;
    c->solver_order = -1;
    c->lower_order_final = -1;
    c->euler_at_final = -1;
    c->use_karras_sigmas = -1;
    c->use_exponential_sigmas = -1;
    c->original_inference_steps = -1;
    c->timestep_scaling = NAN;
    c->sigma_min = c->sigma_max = NAN;
    c->variance_type = TSR_VARIANCE_UNSET;
}

static int get_tri(const cJSON *o, const char *label, const char *key, int *out)
{
    if (!tsr_json_has(o, key))
        return 0;
    bool b;
    TSR_TRY(tsr_json_get_bool(o, label, key, false, &b));
    *out = b;
    return 0;
}

static int get_enum(const cJSON *o, const char *label, const char *key, const char *const *names,
                    int n, int *out)
{
    const char *v = NULL;
    TSR_TRY(tsr_json_get_string(o, label, key, NULL, &v));
    if (!v)
        return 0;
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(v, names[i]) == 0) {
            *out = i;
            return 0;
        }
    return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: \"%s\" = \"%s\" is not supported", label, key, v);
}

static int get_dbl(const cJSON *o, const char *label, const char *key, double min, double max,
                   double *out)
{
    if (!tsr_json_has(o, key))
        return 0;
    return tsr_json_get_double(o, label, key, 0, min, max, out);
}

int tsr_sched_config_from_json(const cJSON *o, const char *label, tsr_sched_config *c)
{
    tsr_sched_config_init(c);
    if (!o)
        return 0;
    if (!label)
        label = "scheduler_config.json";
    TSR_TRY(tsr_json_expect_object(o, label, "scheduler config"));
    if (tsr_json_has(o, "num_train_timesteps"))
        TSR_TRY(tsr_json_get_int(o, label, "num_train_timesteps", 1000, 2, TSR_SCHED_MAX_TRAIN,
                                 &c->num_train_timesteps));
    TSR_TRY(get_dbl(o, label, "beta_start", 0, 1, &c->beta_start));
    TSR_TRY(get_dbl(o, label, "beta_end", 0, 1, &c->beta_end));
    static const char *const betas[] = {NULL, "linear", "scaled_linear", "squaredcos_cap_v2"};
    TSR_TRY(get_enum(o, label, "beta_schedule", betas, 4, &c->beta_schedule));
    static const char *const spacing[] = {NULL, "leading", "trailing", "linspace"};
    TSR_TRY(get_enum(o, label, "timestep_spacing", spacing, 4, &c->timestep_spacing));
    if (tsr_json_has(o, "steps_offset"))
        TSR_TRY(tsr_json_get_int(o, label, "steps_offset", 0, 0, 100, &c->steps_offset));
    static const char *const pred[] = {NULL, "epsilon", "v_prediction", "sample"};
    TSR_TRY(get_enum(o, label, "prediction_type", pred, 4, &c->prediction_type));
    TSR_TRY(get_tri(o, label, "rescale_betas_zero_snr", &c->rescale_betas_zero_snr));
    static const char *const fin[] = {NULL, "zero", "sigma_min"};
    TSR_TRY(get_enum(o, label, "final_sigmas_type", fin, 3, &c->final_sigmas_type));
    static const char *const interp[] = {NULL, "linear", "log_linear"};
    TSR_TRY(get_enum(o, label, "interpolation_type", interp, 3, &c->interpolation_type));
    if (c->interpolation_type == TSR_INTERP_LOG_LINEAR)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: interpolation_type \"log_linear\" is not supported",
                          label);
    TSR_TRY(get_tri(o, label, "clip_sample", &c->clip_sample));
    TSR_TRY(get_dbl(o, label, "clip_sample_range", 0, 1e6, &c->clip_sample_range));
    TSR_TRY(get_tri(o, label, "set_alpha_to_one", &c->set_alpha_to_one));
    TSR_TRY(get_tri(o, label, "skip_prk_steps", &c->skip_prk_steps));
    if (tsr_json_has(o, "solver_order"))
        TSR_TRY(tsr_json_get_int(o, label, "solver_order", 2, 1, 3, &c->solver_order));
    TSR_TRY(get_tri(o, label, "lower_order_final", &c->lower_order_final));
    TSR_TRY(get_tri(o, label, "euler_at_final", &c->euler_at_final));
    TSR_TRY(get_tri(o, label, "use_karras_sigmas", &c->use_karras_sigmas));
    TSR_TRY(get_tri(o, label, "use_exponential_sigmas", &c->use_exponential_sigmas));
    if (tsr_json_has(o, "original_inference_steps"))
        TSR_TRY(tsr_json_get_int(o, label, "original_inference_steps", 50, 1, TSR_SCHED_MAX_TRAIN,
                                 &c->original_inference_steps));
    TSR_TRY(get_dbl(o, label, "timestep_scaling", 0, 1e6, &c->timestep_scaling));
    TSR_TRY(get_dbl(o, label, "sigma_min", 1e-10, 1e6, &c->sigma_min));
    TSR_TRY(get_dbl(o, label, "sigma_max", 1e-10, 1e6, &c->sigma_max));

    /* options that change the math and that we do not implement */
    static const char *const off_keys[] = {"thresholding", "use_beta_sigmas", "use_flow_sigmas",
                                           "use_lu_lambdas", "use_dynamic_shifting"};
    for (size_t i = 0; i < sizeof off_keys / sizeof *off_keys; i++) {
        int v = -1;
        TSR_TRY(get_tri(o, label, off_keys[i], &v));
        if (v == 1)
            return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: \"%s\": true is not supported", label,
                              off_keys[i]);
    }
    if (tsr_json_has(o, "trained_betas"))
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: \"trained_betas\" is not supported", label);
    const char *tt = NULL;
    TSR_TRY(tsr_json_get_string(o, label, "timestep_type", NULL, &tt));
    if (tt && strcmp(tt, "discrete") != 0)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "%s: \"timestep_type\" = \"%s\" is not supported",
                          label, tt);
    static const char *const var[] = {NULL, "fixed_small", "fixed_small_log"};
    TSR_TRY(get_enum(o, label, "variance_type", var, 3, &c->variance_type));
    if (c->use_karras_sigmas == 1 && c->use_exponential_sigmas == 1)
        return tsr_errorf(TSR_ERR_INVALID,
                          "%s: use_karras_sigmas and use_exponential_sigmas are both set", label);
    return 0;
}

/* ------------------------------------------------------------------ names */

static const struct {
    const char *name, *display, *cls;
} k_names[TSR_SAMPLER_COUNT] = {
    [TSR_SAMPLER_EULER] = {"euler", "Euler", "EulerDiscreteScheduler"},
    [TSR_SAMPLER_EULER_A] = {"euler_a", "Euler a", "EulerAncestralDiscreteScheduler"},
    [TSR_SAMPLER_HEUN] = {"heun", "Heun", "HeunDiscreteScheduler"},
    [TSR_SAMPLER_DPMPP_2M] = {"dpmpp_2m", "DPM++ 2M", "DPMSolverMultistepScheduler"},
    [TSR_SAMPLER_DPMPP_2M_SDE] = {"dpmpp_2m_sde", "DPM++ 2M SDE", "DPMSolverMultistepScheduler"},
    [TSR_SAMPLER_DPMPP_SDE] = {"dpmpp_sde", "DPM++ SDE", "DPMSolverSDEScheduler"},
    [TSR_SAMPLER_DDIM] = {"ddim", "DDIM", "DDIMScheduler"},
    [TSR_SAMPLER_PNDM] = {"pndm", "PNDM", "PNDMScheduler"},
    [TSR_SAMPLER_LMS] = {"lms", "LMS", "LMSDiscreteScheduler"},
    [TSR_SAMPLER_UNIPC] = {"unipc", "UniPC", "UniPCMultistepScheduler"},
    [TSR_SAMPLER_LCM] = {"lcm", "LCM", "LCMScheduler"},
    /* PNDMScheduler again: class-name lookups take the first entry (pndm) */
    [TSR_SAMPLER_PLMS] = {"plms", "PLMS", "PNDMScheduler"},
    [TSR_SAMPLER_DPM2] = {"dpm2", "DPM2", "KDPM2DiscreteScheduler"},
    [TSR_SAMPLER_DPM2_A] = {"dpm2_a", "DPM2 a", "KDPM2AncestralDiscreteScheduler"},
    [TSR_SAMPLER_DPMPP_2S_A] = {"dpmpp_2s_a", "DPM++ 2S a", "(k-diffusion sample_dpmpp_2s_ancestral)"},
    /* DPMSolverMultistepScheduler again: a class name alone means 2M */
    [TSR_SAMPLER_DPMPP_3M_SDE] = {"dpmpp_3m_sde", "DPM++ 3M SDE", "DPMSolverMultistepScheduler"},
    [TSR_SAMPLER_DDPM] = {"ddpm", "DDPM", "DDPMScheduler"},
};

static const struct {
    const char *name, *display;
} s_names[TSR_SCHEDULE_COUNT] = {
    [TSR_SCHEDULE_DEFAULT] = {"default", "Automatic"},
    [TSR_SCHEDULE_KARRAS] = {"karras", "Karras"},
    [TSR_SCHEDULE_EXPONENTIAL] = {"exponential", "Exponential"},
    [TSR_SCHEDULE_SGM_UNIFORM] = {"sgm_uniform", "SGM Uniform"},
    [TSR_SCHEDULE_COMFY_NORMAL] = {"comfy_normal", "Comfy Normal"},
    [TSR_SCHEDULE_COMFY_KARRAS] = {"comfy_karras", "Comfy Karras"},
    [TSR_SCHEDULE_COMFY_EXPONENTIAL] = {"comfy_exponential", "Comfy Exponential"},
    [TSR_SCHEDULE_COMFY_SGM_UNIFORM] = {"comfy_sgm_uniform", "Comfy SGM Uniform"},
    [TSR_SCHEDULE_COMFY_SIMPLE] = {"comfy_simple", "Comfy Simple"},
    [TSR_SCHEDULE_COMFY_DDIM_UNIFORM] = {"comfy_ddim_uniform", "Comfy DDIM Uniform"},
    [TSR_SCHEDULE_COMFY_BETA] = {"comfy_beta", "Comfy Beta"},
};

const char *tsr_sampler_name(tsr_sampler_kind k)
{
    return (unsigned)k < TSR_SAMPLER_COUNT ? k_names[k].name : "?";
}
const char *tsr_sampler_display_name(tsr_sampler_kind k)
{
    return (unsigned)k < TSR_SAMPLER_COUNT ? k_names[k].display : "?";
}
const char *tsr_sampler_class_name(tsr_sampler_kind k)
{
    return (unsigned)k < TSR_SAMPLER_COUNT ? k_names[k].cls : "?";
}
const char *tsr_schedule_name(tsr_schedule s)
{
    return (unsigned)s < TSR_SCHEDULE_COUNT ? s_names[s].name : "?";
}
const char *tsr_schedule_display_name(tsr_schedule s)
{
    return (unsigned)s < TSR_SCHEDULE_COUNT ? s_names[s].display : "?";
}

/* lower-case, with ' ' and '-' folded to '_' */
static void norm(const char *in, char *out, size_t size)
{
    size_t j = 0;
    for (; *in && j + 1 < size; in++) {
        char ch = (char)tolower((unsigned char)*in);
        out[j++] = (ch == ' ' || ch == '-') ? '_' : ch;
    }
    out[j] = 0;
}

int tsr_schedule_parse(const char *name, tsr_schedule *out)
{
    char b[64];
    if (!name)
        return tsr_errorf(TSR_ERR_INVALID, "schedule: no name");
    norm(name, b, sizeof b);
    if (strcmp(b, "automatic") == 0 || strcmp(b, "auto") == 0 || strcmp(b, "default") == 0 ||
        strcmp(b, "normal") == 0) {
        *out = TSR_SCHEDULE_DEFAULT;
        return 0;
    }
    for (int i = 0; i < TSR_SCHEDULE_COUNT; i++)
        if (strcmp(b, s_names[i].name) == 0) {
            *out = (tsr_schedule)i;
            return 0;
        }
    return tsr_errorf(TSR_ERR_INVALID,
                      "unknown schedule \"%s\" (expected default, karras, exponential, sgm_uniform "
                      "or ComfyUI's comfy_normal, comfy_karras, comfy_exponential, "
                      "comfy_sgm_uniform, comfy_simple, comfy_ddim_uniform, comfy_beta)",
                      name);
}

int tsr_sampler_parse(const char *name, tsr_sampler_kind *kind, tsr_schedule *schedule)
{
    char b[96];
    if (!name || !*name)
        return tsr_errorf(TSR_ERR_INVALID, "sampler: no name");
    norm(name, b, sizeof b);
    /* short names */
    for (int i = 0; i < TSR_SAMPLER_COUNT; i++)
        if (strcmp(b, k_names[i].name) == 0) {
            *kind = (tsr_sampler_kind)i;
            return 0;
        }
    /* extra aliases (k-diffusion / ComfyUI spellings) */
    static const struct {
        const char *alias;
        tsr_sampler_kind k;
    } aliases[] = {{"euler_ancestral", TSR_SAMPLER_EULER_A}, {"k_euler", TSR_SAMPLER_EULER},
                   {"k_euler_a", TSR_SAMPLER_EULER_A},     {"k_heun", TSR_SAMPLER_HEUN},
                   {"k_lms", TSR_SAMPLER_LMS},             {"k_dpm_2", TSR_SAMPLER_DPM2},
                   {"k_dpm_2_a", TSR_SAMPLER_DPM2_A},      {"dpm_2", TSR_SAMPLER_DPM2},
                   {"dpm_2_a", TSR_SAMPLER_DPM2_A},        {"dpm_2_ancestral", TSR_SAMPLER_DPM2_A},
                   {"dpm2_ancestral", TSR_SAMPLER_DPM2_A}, {"k_dpmpp_2s_a", TSR_SAMPLER_DPMPP_2S_A},
                   {"dpmpp_2s_ancestral", TSR_SAMPLER_DPMPP_2S_A},
                   {"dpm++_2m", TSR_SAMPLER_DPMPP_2M},     {"dpm++_2m_sde", TSR_SAMPLER_DPMPP_2M_SDE},
                   {"dpm++_sde", TSR_SAMPLER_DPMPP_SDE},   {"dpm++_2s_a", TSR_SAMPLER_DPMPP_2S_A},
                   {"dpm++_3m_sde", TSR_SAMPLER_DPMPP_3M_SDE}, {"uni_pc", TSR_SAMPLER_UNIPC}};
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (strcmp(b, aliases[i].alias) == 0) {
            *kind = aliases[i].k;
            return 0;
        }
    /* diffusers class names (DPMSolverMultistepScheduler means 2M) */
    for (int i = 0; i < TSR_SAMPLER_COUNT; i++)
        if (strcasecmp(name, k_names[i].cls) == 0) {
            *kind = (tsr_sampler_kind)i;
            return 0;
        }
    /* A1111 display names, optionally followed by a schedule */
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < TSR_SAMPLER_COUNT; i++) {
        char d[64];
        norm(k_names[i].display, d, sizeof d);
        size_t l = strlen(d);
        if (strncmp(b, d, l) == 0 && (b[l] == 0 || b[l] == '_') && l > best_len) {
            best = i;
            best_len = l;
        }
    }
    if (best >= 0) {
        const char *rest = b + best_len;
        if (*rest == '_') {
            tsr_schedule sch;
            if (tsr_schedule_parse(rest + 1, &sch) < 0)
                return tsr_errorf(TSR_ERR_INVALID, "unknown sampler \"%s\"", name);
            *schedule = sch;
        }
        *kind = (tsr_sampler_kind)best;
        return 0;
    }
    return tsr_errorf(TSR_ERR_INVALID, "unknown sampler \"%s\" (expected one of " TSR_SAMPLER_NAMES
                      ", a diffusers class or an A1111 name)",
                      name);
}

int tsr_sampler_from_config(const cJSON *obj, tsr_sampler_kind *kind)
{
    const char *cls = NULL;
    if (!obj || tsr_json_get_string(obj, "scheduler_config.json", "_class_name", NULL, &cls) < 0 ||
        !cls)
        return tsr_errorf(TSR_ERR_NOT_FOUND, "scheduler_config.json: no _class_name");
    for (int i = 0; i < TSR_SAMPLER_COUNT; i++)
        if (strcmp(cls, k_names[i].cls) == 0) {
            *kind = (tsr_sampler_kind)i;
            if (i == TSR_SAMPLER_DPMPP_2M) {
                const char *alg = NULL;
                int order = 2;
                if (tsr_json_get_string(obj, "scheduler_config.json", "algorithm_type", NULL,
                                        &alg) == 0 &&
                    alg && strcmp(alg, "sde-dpmsolver++") == 0) {
                    *kind = TSR_SAMPLER_DPMPP_2M_SDE;
                    if (tsr_json_get_int(obj, "scheduler_config.json", "solver_order", 2, 1, 3,
                                         &order) == 0 &&
                        order == 3)
                        *kind = TSR_SAMPLER_DPMPP_3M_SDE;
                }
            }
            tsr_error_clear();
            return 0;
        }
    return tsr_errorf(TSR_ERR_NOT_FOUND, "scheduler_config.json: scheduler class %s is not supported",
                      cls);
}

bool tsr_sampler_supports_schedule(tsr_sampler_kind k, tsr_schedule s)
{
    if (s == TSR_SCHEDULE_DEFAULT || s == TSR_SCHEDULE_SGM_UNIFORM)
        return (unsigned)k < TSR_SAMPLER_COUNT;
    /* ComfyUI's sigma lists drive the samplers whose step reads only the
     * sigma list (sched_comfy.c, docs/samplers.md) */
    if (tsr_schedule_is_comfy(s))
        return k == TSR_SAMPLER_EULER || k == TSR_SAMPLER_EULER_A || k == TSR_SAMPLER_HEUN ||
               k == TSR_SAMPLER_LMS || k == TSR_SAMPLER_DPMPP_2M;
    switch (k) {
    case TSR_SAMPLER_EULER:
    case TSR_SAMPLER_HEUN:
    case TSR_SAMPLER_DPMPP_2M:
    case TSR_SAMPLER_DPMPP_2M_SDE:
    case TSR_SAMPLER_DPMPP_SDE:
    case TSR_SAMPLER_LMS:
    case TSR_SAMPLER_UNIPC:
    case TSR_SAMPLER_DPM2:
    case TSR_SAMPLER_DPM2_A:
    case TSR_SAMPLER_DPMPP_2S_A:
    case TSR_SAMPLER_DPMPP_3M_SDE:
        return s == TSR_SCHEDULE_KARRAS || s == TSR_SCHEDULE_EXPONENTIAL;
    default:
        return false;
    }
}
