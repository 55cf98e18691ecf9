/*
 * service/api/a1111/a1111_names.c - A1111's names to Tessera's: samplers
 * (with a schedule in the name, "DPM++ 2M Karras", and the old k_ aliases),
 * schedulers, and the native field names back to A1111's for errors.
 *
 * Why a file of its own: the translator (a1111_params.c) reads fields and
 * applies rules; these lookups are pure functions over the engine's tables
 * (tsr_samplers, tsr_schedules) that the options and info routes use too, so
 * they live apart and the translator stays short enough to read.
 */
#include "a1111.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "tessera.h"

/* ------------------------------------------------------------------ names */

/* lower-case; ' ', '-' and '_' dropped: "DPM++ 2M" ~ "dpm++_2m" ~ "dpm++2m" */
static void fold(const char *in, char *out, size_t size)
{
    size_t j = 0;
    for (; *in && j + 1 < size; in++) {
        char c = *in;
        if (c == ' ' || c == '-' || c == '_')
            continue;
        out[j++] = (char)tolower((unsigned char)c);
    }
    out[j] = '\0';
}

bool svc_a1111_schedule(const char *name, const char **schedule, const char **label)
{
    const tsr_schedule_desc *sd = NULL;
    int ns = tsr_schedules(&sd);
    char want[64], a[64], b[64];
    if (!name || strlen(name) >= sizeof want)
        return false;
    fold(name, want, sizeof want);
    for (int i = 0; i < ns; i++) {
        fold(sd[i].name, a, sizeof a);
        fold(sd[i].a1111, b, sizeof b);
        if (strcmp(want, a) == 0 || strcmp(want, b) == 0) {
            *schedule = sd[i].name;
            *label = sd[i].a1111;
            return true;
        }
    }
    return false;
}

static const tsr_sampler_desc *find_sampler(const char *name)
{
    const tsr_sampler_desc *sd = NULL;
    int n = tsr_samplers(&sd);
    char want[96], a[96];
    if (strlen(name) >= sizeof want)
        return NULL;
    fold(name, want, sizeof want);
    const char *bare = strncmp(want, "k", 1) == 0 ? want + 1 : NULL; /* k_euler_a */
    for (int i = 0; i < n; i++) {
        fold(sd[i].a1111, a, sizeof a);
        if (strcmp(want, a) == 0)
            return &sd[i];
        fold(sd[i].name, a, sizeof a);
        if (strcmp(want, a) == 0 || (bare && strcmp(bare, a) == 0))
            return &sd[i];
    }
    return NULL;
}

bool svc_a1111_sampler(const char *name, const char **sampler, const char **a1111_name,
                       const char **schedule)
{
    *schedule = NULL;
    if (!name || !name[0] || strlen(name) > 80)
        return false;
    const tsr_sampler_desc *d = find_sampler(name);
    if (!d) {
        /* old style: the schedule's label at the end ("DPM++ 2M Karras") */
        const tsr_schedule_desc *sd = NULL;
        int ns = tsr_schedules(&sd);
        size_t len = strlen(name);
        for (int i = 0; i < ns && !d; i++) {
            size_t ll = strlen(sd[i].a1111);
            if (len > ll + 1 && name[len - ll - 1] == ' ' &&
                strcasecmp(name + len - ll, sd[i].a1111) == 0) {
                char base[96];
                snprintf(base, sizeof base, "%.*s", (int)(len - ll - 1), name);
                d = find_sampler(base);
                if (d)
                    *schedule = sd[i].name;
            }
        }
    }
    if (!d)
        return false;
    *sampler = d->name;
    *a1111_name = d->a1111;
    return true;
}

const char *svc_a1111_field(const char *f)
{
    static const struct {
        const char *native, *a1111;
    } map[] = {
        {"sampler", "sampler_name"},     {"strength", "denoising_strength"},
        {"init_image", "init_images"},   {"clip_skip", "override_settings.CLIP_stop_at_last_layers"},
        {"n", "batch_size"},             {"hires_scale", "hr_scale"},
        {"hires_width", "hr_resize_x"},  {"hires_height", "hr_resize_y"},
        {"hires_steps", "hr_second_pass_steps"}, {"hires_strength", "denoising_strength"},
        {"hires_upscaler", "hr_upscaler"}, {"mask_fill", "inpainting_fill"},
    };
    if (!f)
        return "";
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(f, map[i].native) == 0)
            return map[i].a1111;
    return f;
}
