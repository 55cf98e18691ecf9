/*
 * cli/cmd_inspect.c - `tessera inspect PATH [--json] [--tensors]`.
 *
 * Why: the first thing to run on a model from the internet.  It opens the
 * model exactly as generation would (same sniffing, same mapping), so what
 * it prints is what Tessera will use: layout, family, prediction (marked
 * "(assumed)" when a single file cannot tell), inpainting, dtypes and
 * parameters per component, and for single files the keys that mapped to
 * nothing.  --tensors lists every internal name with shape and dtype, plus
 * an FNV-1a hash of the bytes, so two layouts of one model can be compared
 * with diff.
 */
#include <stdio.h>
#include <string.h>

#include <cJSON.h>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "model/model.h"

static uint64_t fnv1a(const unsigned char *p, uint64_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static const char *pred_name(const tsr_model *m)
{
    return tsr_model_prediction(m) == TSR_PREDICTION_V ? "v" : "eps";
}

static void shape_str(const tsr_st_entry *e, char *buf, size_t size)
{
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < e->ndim && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
    if (o < size)
        snprintf(buf + o, size - o, "]");
}

/* Distinct dtypes of a component, "F16" or "F16+F32". */
static void dtypes_of(const tsr_model *m, tsr_component c, char *buf, size_t size)
{
    bool seen[TSR_ST_DTYPE_COUNT] = {false};
    for (size_t i = 0; i < tsr_model_tensor_count(m, c); i++) {
        const tsr_st_entry *e = NULL;
        if (tsr_model_tensor_at(m, c, i, NULL, NULL, &e) == 0 && e->dtype < TSR_ST_DTYPE_COUNT)
            seen[e->dtype] = true;
    }
    buf[0] = 0;
    size_t o = 0;
    for (int d = 0; d < TSR_ST_DTYPE_COUNT && o < size; d++)
        if (seen[d])
            o += (size_t)snprintf(buf + o, size - o, "%s%s", o ? "+" : "",
                                  tsr_st_dtype_name((tsr_st_dtype)d));
}

static void print_tensors(const tsr_model *m)
{
    for (int c = 0; c < TSR_COMP_COUNT; c++) {
        for (size_t i = 0; i < tsr_model_tensor_count(m, (tsr_component)c); i++) {
            const char *name;
            const tsr_safetensors *f;
            const tsr_st_entry *e;
            if (tsr_model_tensor_at(m, (tsr_component)c, i, &name, &f, &e) < 0)
                continue;
            char shape[128];
            shape_str(e, shape, sizeof shape);
            printf("%s/%s %s %s %016llx\n", tsr_component_name((tsr_component)c), name, shape,
                   tsr_st_dtype_name(e->dtype),
                   (unsigned long long)fnv1a(tsr_st_data(f, e), e->nbytes));
        }
    }
}

static int print_json(const tsr_model *m)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return TSR_ERR_NOMEM;
    cJSON_AddStringToObject(o, "path", tsr_model_path(m));
    cJSON_AddStringToObject(o, "layout", tsr_model_layout_of(m) == TSR_LAYOUT_DIFFUSERS
                                             ? "diffusers"
                                             : "single_file");
    cJSON_AddStringToObject(o, "family", tsr_family_name(tsr_model_family(m)));
    cJSON_AddBoolToObject(o, "refiner", tsr_model_is_refiner(m));
    cJSON_AddBoolToObject(o, "inpainting", tsr_model_is_inpainting(m));
    cJSON_AddStringToObject(o, "prediction", tsr_model_prediction(m) == TSR_PREDICTION_V
                                                 ? "v_prediction"
                                                 : "epsilon");
    cJSON_AddBoolToObject(o, "prediction_assumed", tsr_model_prediction_assumed(m));
    cJSON *comps = cJSON_AddObjectToObject(o, "components");
    for (int c = 0; c < TSR_COMP_COUNT; c++) {
        if (!tsr_model_has(m, (tsr_component)c) || !comps)
            continue;
        cJSON *j = cJSON_AddObjectToObject(comps, tsr_component_name((tsr_component)c));
        char dt[64];
        dtypes_of(m, (tsr_component)c, dt, sizeof dt);
        if (!j)
            continue;
        cJSON_AddNumberToObject(j, "tensors", (double)tsr_model_tensor_count(m, (tsr_component)c));
        cJSON_AddNumberToObject(j, "params", (double)tsr_model_param_count(m, (tsr_component)c));
        cJSON_AddStringToObject(j, "dtype", dt);
    }
    cJSON *un = cJSON_AddArrayToObject(o, "unrecognised");
    for (size_t i = 0; un && i < tsr_model_unrecognised_count(m); i++)
        cJSON_AddItemToArray(un, cJSON_CreateString(tsr_model_unrecognised_at(m, i)));
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s)
        return TSR_ERR_NOMEM;
    printf("%s\n", s);
    cJSON_free(s);
    return TSR_OK;
}

static void print_text(const tsr_model *m)
{
    bool single = tsr_model_layout_of(m) == TSR_LAYOUT_SINGLE_FILE;
    printf("path:        %s\n", tsr_model_path(m));
    printf("layout:      %s\n", single ? "single file (LDM names)" : "diffusers folder");
    tsr_family f = tsr_model_family(m);
    if (f == TSR_FAMILY_SD2)
        printf("family:      SD2.x %s%s\n", pred_name(m),
               tsr_model_prediction_assumed(m) ? " (assumed; override with --prediction)" : "");
    else
        printf("family:      %s%s\n", tsr_family_name(f), tsr_model_is_refiner(m) ? " refiner" : "");
    printf("prediction:  %s%s\n", tsr_model_prediction(m) == TSR_PREDICTION_V ? "v_prediction" : "epsilon",
           tsr_model_prediction_assumed(m) ? " (assumed)" : "");
    printf("inpainting:  %s\n", tsr_model_is_inpainting(m) ? "yes" : "no");
    uint64_t total = 0;
    for (int c = 0; c < TSR_COMP_COUNT; c++) {
        if (!tsr_model_has(m, (tsr_component)c))
            continue;
        char dt[64];
        dtypes_of(m, (tsr_component)c, dt, sizeof dt);
        uint64_t p = tsr_model_param_count(m, (tsr_component)c);
        total += p;
        printf("  %-15s %6zu tensors %14llu params  %s\n", tsr_component_name((tsr_component)c),
               tsr_model_tensor_count(m, (tsr_component)c), (unsigned long long)p, dt);
    }
    printf("  %-15s %22llu params\n", "total", (unsigned long long)total);
    if (single) {
        size_t n = tsr_model_unrecognised_count(m);
        printf("unrecognised keys: %zu\n", n);
        for (size_t i = 0; i < n && i < 50; i++)
            printf("  %s\n", tsr_model_unrecognised_at(m, i));
        if (n > 50)
            printf("  ... and %zu more\n", n - 50);
    }
}

int tsr_cmd_inspect(int argc, char **argv)
{
    bool json = false, tensors = false;
    const char *prediction = NULL;
    const tsr_arg_spec specs[] = {
        {"json", TSR_ARG_FLAG, &json, NULL, "print JSON", 0, 0, 0, 0},
        {"tensors", TSR_ARG_FLAG, &tensors, NULL,
         "list internal tensor names, shapes, dtypes and content hashes", 0, 0, 0, 0},
        {"prediction", TSR_ARG_STRING, &prediction, "KIND",
         "override the prediction type: epsilon or v", 0, 0, 0, 0},
    };
    const tsr_cli_command cmd = {
        "inspect", "inspect [--json] [--tensors] PATH",
        "describe a model: family, dtype, parameters per component",
        "PATH is a diffusers folder or a single .safetensors file with the original LDM key\n"
        "names (SD 1.x, SD 2.x, SDXL base and refiner).  Pickle checkpoints are refused.",
        specs, (int)(sizeof specs / sizeof specs[0])};
    const char *pos[1];
    int n_pos = 0;
    int rc = tsr_args_parse(&cmd, argc, argv, pos, 1, &n_pos);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc < 0)
        return TSR_EXIT_USAGE;
    if (n_pos != 1) {
        tsr_args_usage(stderr, &cmd);
        return TSR_EXIT_USAGE;
    }
    if (prediction && strcmp(prediction, "epsilon") && strcmp(prediction, "v")) {
        fprintf(stderr, "tessera inspect: --prediction must be epsilon or v\n");
        return TSR_EXIT_USAGE;
    }
    tsr_model *m = NULL;
    rc = tsr_model_open(pos[0], &m);
    if (rc < 0) {
        tsr_cli_report("inspect", rc);
        return TSR_EXIT_FAILURE;
    }
    if (prediction)
        tsr_model_set_prediction(m, prediction[0] == 'v' ? TSR_PREDICTION_V : TSR_PREDICTION_EPSILON);
    if (tensors)
        print_tensors(m);
    else if (json)
        rc = print_json(m);
    else
        print_text(m);
    tsr_model_close(m);
    if (rc < 0) {
        tsr_cli_report("inspect", rc);
        return TSR_EXIT_FAILURE;
    }
    return TSR_EXIT_OK;
}
