/*
 * image/a1111.c - the A1111 "parameters" text and the A1111 model hash.
 *
 * Why: tools that read Stable Diffusion metadata (A1111's PNG Info tab,
 * civitai, image browsers) parse the string that A1111's create_infotext
 * (modules/processing.py) builds.  This file reproduces that function for
 * the fields Tessera has, byte for byte:
 *
 *   {prompt}[\nNegative prompt: {neg}]\n{k}: {v}, {k}: {v}, ...   then strip()
 *
 * - Field order is A1111's: Steps, Sampler, Schedule type, CFG scale, Seed,
 *   Size, Model hash, Model, VAE hash, VAE, Denoising strength, Clip skip,
 *   RNG, then the extra parameters in the order A1111 adds them (the hires
 *   fix's Hires upscale or Hires resize, Hires steps, Hires upscaler at
 *   init; Lora hashes when the networks load), Version.  Fields A1111 has
 *   that Tessera never produces (Image CFG scale, Face restoration, FP8
 *   weight, Variation seed, Seed resize from, Conditional mask weight, ENSD,
 *   Token merging, Init image hash, NGMS, Tiling, other extensions'
 *   parameters, User) are not supported; a field that is NULL / negative is
 *   omitted as A1111 omits None.
 * - The negative prompt line is omitted when it is empty (Python truthiness).
 * - Values go through A1111's quote(): a value containing ',', ':' or '\n'
 *   is written as json.dumps(value, ensure_ascii=False).  A value equal to
 *   its key is written as the bare key (a quirk of create_infotext, kept).
 * - Numbers: A1111 formats with str().  Its UI sends sliders through JSON,
 *   so an integral CFG scale arrives as the int 7 and prints "7", and 7.5
 *   prints "7.5"; we print the shortest fixed-point form that reads back to
 *   the same double, which agrees with every UI value (A1111's API path,
 *   which prints "7.0", is the exception we do not follow).
 * - The whole string is strip()ped with Python's notion of whitespace.
 *
 * Names the caller should pass (A1111 1.9+ display names, so that readers
 * map them back): sampler euler "Euler", euler_a "Euler a", heun "Heun",
 * dpmpp_2m "DPM++ 2M", dpmpp_2m_sde "DPM++ 2M SDE", dpmpp_sde "DPM++ SDE",
 * ddim "DDIM", lms "LMS", unipc "UniPC", lcm "LCM" (pndm has no A1111
 * equivalent: "PNDM"); schedule type default "Automatic" (what A1111
 * writes for its default), karras "Karras", exponential "Exponential",
 * sgm_uniform "SGM Uniform".  Model is the checkpoint's file name without
 * extension; Model hash is tsr_a1111_model_hash() (optional: it reads the
 * whole file); RNG is "CPU" for --rng cpu and omitted for --rng cuda, which
 * reproduces A1111's default GPU noise.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/image.h"
#include "image/image_internal.h"

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (n + 1 > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (n + 1 > cap - b->len) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static void sb_fmt(sbuf *b, const char *fmt, ...) TSR_PRINTF(2, 3);
static void sb_fmt(sbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* Shortest fixed-point decimal that parses back to exactly `v`. */
static void format_number(double v, char *out, size_t size)
{
    if (!isfinite(v)) {
        snprintf(out, size, "%s", isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
        return;
    }
    for (int d = 0; d <= 17; d++) {
        snprintf(out, size, "%.*f", d, v);
        if (strtod(out, NULL) == v)
            break;
    }
    if (strcmp(out, "-0") == 0)
        snprintf(out, size, "0");
}

/* A1111's infotext_utils.quote(): json.dumps(text, ensure_ascii=False)
 * when the text holds ',', '\n' or ':'. */
static void sb_quoted(sbuf *b, const char *v)
{
    if (!strpbrk(v, ",\n:")) {
        sb_str(b, v);
        return;
    }
    sb_add(b, "\"", 1);
    for (const char *p = v; *p; p++) {
        unsigned char c = (unsigned char)*p;
        switch (c) {
        case '"': sb_add(b, "\\\"", 2); break;
        case '\\': sb_add(b, "\\\\", 2); break;
        case '\n': sb_add(b, "\\n", 2); break;
        case '\r': sb_add(b, "\\r", 2); break;
        case '\t': sb_add(b, "\\t", 2); break;
        case '\b': sb_add(b, "\\b", 2); break;
        case '\f': sb_add(b, "\\f", 2); break;
        default:
            if (c < 0x20)
                sb_fmt(b, "\\u%04x", c);
            else
                sb_add(b, p, 1);
        }
    }
    sb_add(b, "\"", 1);
}

typedef struct fields {
    sbuf *b;
    bool first;
} fields;

static void field_sep(fields *f, const char *key)
{
    if (!f->first)
        sb_add(f->b, ", ", 2);
    f->first = false;
    sb_str(f->b, key);
}

static void field_str(fields *f, const char *key, const char *v)
{
    if (!v)
        return;
    field_sep(f, key);
    if (strcmp(key, v) == 0)
        return; /* create_infotext writes `k` alone when k == v */
    sb_add(f->b, ": ", 2);
    sb_quoted(f->b, v);
}

static void field_num(fields *f, const char *key, double v)
{
    char num[64];
    format_number(v, num, sizeof(num));
    field_sep(f, key);
    sb_add(f->b, ": ", 2);
    sb_str(f->b, num);
}

/* Python's str.isspace() for one code point. */
static bool py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 ||
           cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Decode the code point starting at s (valid UTF-8 assumed); returns its
 * length in bytes. */
static size_t utf8_decode(const unsigned char *s, uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] < 0xE0) {
        *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (s[0] < 0xF0) {
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
          ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

/* Python's str.strip() on valid UTF-8, in place. */
static void py_strip(char *s, size_t *len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t start = 0, end = *len;
    while (start < end) {
        uint32_t cp;
        size_t n = utf8_decode(u + start, &cp);
        if (!py_space(cp))
            break;
        start += n;
    }
    while (end > start) {
        size_t k = end - 1;
        while (k > start && (u[k] & 0xC0) == 0x80)
            k--;
        uint32_t cp;
        utf8_decode(u + k, &cp);
        if (!py_space(cp))
            break;
        end = k;
    }
    memmove(s, s + start, end - start);
    s[end - start] = '\0';
    *len = end - start;
}

void tsr_a1111_info_init(tsr_a1111_info *info)
{
    memset(info, 0, sizeof(*info));
    info->prompt = "";
    info->denoising_strength = -1.0;
}

static int check_utf8(const char *what, const char *s)
{
    if (s && !tsr_utf8_valid(s, strlen(s), NULL))
        return tsr_errorf(TSR_ERR_INVALID, "a1111 parameters: %s is not valid UTF-8", what);
    return TSR_OK;
}

int tsr_a1111_parameters(const tsr_a1111_info *info, char **out)
{
    if (out)
        *out = NULL;
    if (!info || !out)
        return tsr_errorf(TSR_ERR_INVALID, "a1111 parameters: missing info or output");
    const char *strs[] = {info->prompt,     info->negative_prompt, info->sampler,
                          info->schedule_type, info->model_hash,   info->model,
                          info->vae_hash,   info->vae,             info->rng,
                          info->version,    info->hires_upscaler, info->lora_hashes,
                          info->ti_hashes};
    static const char *names[] = {"prompt",     "negative prompt", "sampler", "schedule type",
                                  "model hash", "model",           "VAE hash", "VAE",
                                  "RNG",        "version",         "hires upscaler",
                                  "Lora hashes",    "TI hashes"};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        TSR_TRY(check_utf8(names[i], strs[i]));

    sbuf b = {0};
    sb_str(&b, info->prompt ? info->prompt : "");
    if (info->negative_prompt && info->negative_prompt[0]) {
        sb_str(&b, "\nNegative prompt: ");
        sb_str(&b, info->negative_prompt);
    }
    sb_add(&b, "\n", 1);

    fields f = {&b, true};
    field_sep(&f, "Steps");
    sb_fmt(&b, ": %d", info->steps);
    field_str(&f, "Sampler", info->sampler);
    field_str(&f, "Schedule type", info->schedule_type);
    field_num(&f, "CFG scale", info->cfg_scale);
    field_sep(&f, "Seed");
    sb_fmt(&b, ": %llu", (unsigned long long)info->seed);
    field_sep(&f, "Size");
    sb_fmt(&b, ": %dx%d", info->width, info->height);
    field_str(&f, "Model hash", info->model_hash);
    field_str(&f, "Model", info->model);
    field_str(&f, "VAE hash", info->vae_hash);
    field_str(&f, "VAE", info->vae);
    if (info->denoising_strength >= 0)
        field_num(&f, "Denoising strength", info->denoising_strength);
    if (info->clip_skip > 1) {
        field_sep(&f, "Clip skip");
        sb_fmt(&b, ": %d", info->clip_skip);
    }
    field_str(&f, "RNG", info->rng && strcmp(info->rng, "GPU") != 0 ? info->rng : NULL);
    field_str(&f, "Tiling", info->tiling ? "True" : NULL);
    if (info->hires_resize_x > 0 || info->hires_resize_y > 0) {
        field_sep(&f, "Hires resize");
        sb_fmt(&b, ": %dx%d", info->hires_resize_x, info->hires_resize_y);
    } else if (info->hires_upscale > 0) {
        field_num(&f, "Hires upscale", info->hires_upscale);
    }
    if (info->hires_steps > 0) {
        field_sep(&f, "Hires steps");
        sb_fmt(&b, ": %d", info->hires_steps);
    }
    field_str(&f, "Hires upscaler", info->hires_upscaler);
    field_str(&f, "Lora hashes", info->lora_hashes && info->lora_hashes[0] ? info->lora_hashes : NULL);
    field_str(&f, "TI hashes", info->ti_hashes && info->ti_hashes[0] ? info->ti_hashes : NULL);
    field_str(&f, "Version", info->version);

    if (b.oom) {
        free(b.p);
        return tsr_errorf(TSR_ERR_NOMEM, "a1111 parameters: out of memory");
    }
    py_strip(b.p, &b.len);
    *out = b.p;
    return TSR_OK;
}

int tsr_a1111_model_hash(const char *path, char out[11])
{
    uint8_t digest[32];
    char hex[65];
    out[0] = '\0';
    TSR_TRY(tsr_sha256_file(path, digest));
    tsr_sha256_hex(digest, hex);
    memcpy(out, hex, 10);
    out[10] = '\0';
    return TSR_OK;
}
