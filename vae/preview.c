/*
 * vae/preview.c - the linear latent -> RGB preview.
 *
 * The factors are numbers published in ComfyUI's comfy/latent_formats.py
 * (classes SD15 and SDXL; https://github.com/comfyanonymous/ComfyUI),
 * fitted so that latent @ factors + bias approximates the decoded image in
 * [-1, 1] at 1/8 resolution.  They apply to UNet-scale latents (ComfyUI
 * previews the sampler's x0 in model space).  The 8-bit mapping copies
 * ComfyUI's preview_to_image: ((x + 1) / 2).clamp(0, 1) * 255, then a cast
 * to uint8, which truncates.
 */
#include "vae/preview.h"

#include <stddef.h>

#include "core/error.h"

/* Rows: latent channels 0..3; columns: R, G, B. */
static const float sd15_factors[4][3] = {
    {0.3512f, 0.2297f, 0.3227f},
    {0.3250f, 0.4974f, 0.2350f},
    {-0.2829f, 0.1762f, 0.2721f},
    {-0.2120f, -0.2616f, -0.7177f},
};
static const float sd15_bias[3] = {0.0f, 0.0f, 0.0f};

static const float sdxl_factors[4][3] = {
    {0.3651f, 0.4232f, 0.4341f},
    {-0.2533f, -0.0042f, 0.1068f},
    {0.1076f, 0.1111f, -0.0362f},
    {-0.3165f, -0.2492f, -0.2188f},
};
static const float sdxl_bias[3] = {0.1084f, -0.0175f, -0.0011f};

int tsr_preview_linear(tsr_family family, const float *latents, int h, int w, int channels,
                       float *rgb_f, uint8_t *rgb)
{
    const float(*fac)[3];
    const float *bias;
    switch (family) {
    case TSR_FAMILY_SD1:
    case TSR_FAMILY_SD2:
        fac = sd15_factors;
        bias = sd15_bias;
        break;
    case TSR_FAMILY_SDXL:
        fac = sdxl_factors;
        bias = sdxl_bias;
        break;
    default:
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "preview: no latent RGB factors for family %s",
                          tsr_family_name(family));
    }
    if (!latents)
        return tsr_errorf(TSR_ERR_INVALID, "preview: NULL latents");
    if (channels != 4)
        return tsr_errorf(TSR_ERR_INVALID, "preview: %s latents have 4 channels, got %d",
                          tsr_family_name(family), channels);
    if (h < 1 || w < 1 || h > 16384 || w > 16384)
        return tsr_errorf(TSR_ERR_INVALID, "preview: latent size %dx%d outside 1..16384", w, h);
    const size_t n = (size_t)h * w;
    for (size_t p = 0; p < n; p++) {
        const float *l = latents + 4 * p;
        for (int c = 0; c < 3; c++) {
            /* same accumulation order as torch's matmul over 4 terms, then + bias */
            float x = l[0] * fac[0][c] + l[1] * fac[1][c] + l[2] * fac[2][c] + l[3] * fac[3][c];
            x += bias[c];
            if (rgb_f)
                rgb_f[3 * p + c] = x;
            if (rgb) {
                float v = (x + 1.0f) / 2.0f;
                v = v > 0.0f ? (v < 1.0f ? v : 1.0f) : 0.0f;
                rgb[3 * p + c] = (uint8_t)(v * 255.0f);
            }
        }
    }
    return TSR_OK;
}
