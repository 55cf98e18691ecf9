/*
 * vae/preview.c - the linear latent -> RGB preview: the published maps, the
 * rule for when they apply, and the fit for every other VAE.
 *
 * The published factors are numbers from ComfyUI's comfy/latent_formats.py
 * (classes SD15 and SDXL; https://github.com/comfyanonymous/ComfyUI),
 * fitted so that latent @ factors + bias approximates the decoded image in
 * [-1, 1] at 1/8 resolution.  They apply to UNet-scale latents (ComfyUI
 * previews the sampler's x0 in model space) of those VAEs only.  The 8-bit
 * mapping copies ComfyUI's preview_to_image: ((x + 1) / 2).clamp(0, 1) *
 * 255, then a cast to uint8, which truncates.
 *
 * Any other VAE gets a map fitted at load (tsr_preview_fit), as those
 * numbers were: flat-colour images (a 3x3x3 grid of levels {-0.8, 0, 0.8}
 * plus the 8 corners at +-0.4) are encoded in one batched call, each
 * image's mean latent is taken to UNet scale with tsr_vae_sample and
 * averaged over the image's latent pixels, and rgb ~= latent @ fac + bias
 * is solved by least squares.  The solve is the (C+1)x(C+1) normal
 * equations with the bias left unpenalised, written in its centred form
 * (subtract the means, solve the CxC covariance system, bias = mean_rgb -
 * mean_latent @ fac) by Cholesky in double precision.  A ridge of 3e-2
 * of the mean latent variance keeps directions the colours hardly excite
 * near zero weight: a VAE's latents of flat colours span at most three
 * dimensions (C may be up to 16), while a UNet's x0 also has energy off
 * that manifold, which the decoder smooths away but a large coefficient
 * would paint as colour noise.  Measured on the two demo VAEs (mean error
 * against the box-filtered decode, /255): on encoded test images the error
 * is flat within 1 from 3e-3 to 1e-1 (9 worse at 1e-4 on the older VAE);
 * on the final x0 of real generations (4 prompts, 20 steps) an older demo
 * model (VAE blocks 16/32/32/32) goes 110 -> 66 -> 51 for 1e-4 / 3e-3 /
 * 3e-2 (SD 1.5 factors: 73) and one with today's 16/32/64/64 VAE stays at
 * 28 (SD 1.5 factors: 75).  A VAE whose latents do not vary with colour
 * is refused (singular).
 *
 * The preview loop keeps the published maps bit-exact with the goldens:
 * x = l0*f0, then + l1*f1, ... in channel order, then + bias, in float (the
 * build is ISO C, so nothing is contracted into FMAs).
 */
#include "vae/preview.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"

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

int tsr_preview_published_map(tsr_family family, tsr_preview_linear_map *out)
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
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "preview: no published latent RGB factors for %s",
                          tsr_family_name(family));
    }
    if (!out)
        return tsr_errorf(TSR_ERR_INVALID, "preview: NULL map");
    memset(out, 0, sizeof *out);
    out->channels = 4;
    memcpy(out->fac, fac, sizeof sd15_factors);
    memcpy(out->bias, bias, sizeof sd15_bias);
    return TSR_OK;
}

bool tsr_preview_vae_is_published(tsr_family family, const tsr_vae_desc *d)
{
    static const int blocks[4] = {128, 256, 512, 512};
    double sf;
    switch (family) {
    case TSR_FAMILY_SD1:
    case TSR_FAMILY_SD2:
        sf = 0.18215;
        break;
    case TSR_FAMILY_SDXL:
        sf = 0.13025;
        break;
    default:
        return false;
    }
    if (!d || d->latent_channels != 4 || d->in_channels != 3 || d->out_channels != 3 ||
        d->n_blocks != 4 || d->shift_factor != 0.0)
        return false;
    for (int i = 0; i < 4; i++)
        if (d->block_out_channels[i] != blocks[i])
            return false;
    return fabs(d->scaling_factor - sf) < 1e-7;
}

/* ---- the fit ---- */

#define FIT_COLOURS (27 + 8)
#define FIT_SIDE 4 /* latent pixels per side of each flat image */
#define FIT_RIDGE 3e-2 /* times the mean latent variance (see the header) */

static void fit_colours(float col[FIT_COLOURS][3])
{
    static const float outer[3] = {-0.8f, 0.0f, 0.8f}, inner[2] = {-0.4f, 0.4f};
    int n = 0;
    for (int r = 0; r < 3; r++)
        for (int g = 0; g < 3; g++)
            for (int b = 0; b < 3; b++, n++) {
                col[n][0] = outer[r];
                col[n][1] = outer[g];
                col[n][2] = outer[b];
            }
    for (int r = 0; r < 2; r++)
        for (int g = 0; g < 2; g++)
            for (int b = 0; b < 2; b++, n++) {
                col[n][0] = inner[r];
                col[n][1] = inner[g];
                col[n][2] = inner[b];
            }
}

/* Ridge least squares of y [n][3] on x [n][C] (centred form); fills fac and
 * bias. */
static int fit_solve(double x[][TSR_PREVIEW_MAX_CH], double y[][3], int n, int C,
                     tsr_preview_linear_map *out)
{
    double mx[TSR_PREVIEW_MAX_CH] = {0}, my[3] = {0};
    double A[TSR_PREVIEW_MAX_CH][TSR_PREVIEW_MAX_CH] = {{0}}, B[TSR_PREVIEW_MAX_CH][3] = {{0}};
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < C; k++)
            mx[k] += x[i][k] / n;
        for (int c = 0; c < 3; c++)
            my[c] += y[i][c] / n;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < C; j++) {
            const double xj = x[i][j] - mx[j];
            for (int k = 0; k < C; k++)
                A[j][k] += xj * (x[i][k] - mx[k]);
            for (int c = 0; c < 3; c++)
                B[j][c] += xj * (y[i][c] - my[c]);
        }
    double trace = 0;
    for (int k = 0; k < C; k++)
        trace += A[k][k];
    if (!isfinite(trace) || !(trace > 1e-30))
        return tsr_errorf(TSR_ERR_FORMAT,
                          "preview fit: the VAE's latents do not vary with the image colour");
    const double ridge = FIT_RIDGE * trace / C;
    for (int k = 0; k < C; k++)
        A[k][k] += ridge;
    /* Cholesky A = L L^T in place (lower triangle). */
    for (int j = 0; j < C; j++) {
        double s = A[j][j];
        for (int k = 0; k < j; k++)
            s -= A[j][k] * A[j][k];
        if (!(s > 1e-12 * ridge))
            return tsr_errorf(TSR_ERR_FORMAT, "preview fit: singular normal equations");
        A[j][j] = sqrt(s);
        for (int i = j + 1; i < C; i++) {
            double t = A[i][j];
            for (int k = 0; k < j; k++)
                t -= A[i][k] * A[j][k];
            A[i][j] = t / A[j][j];
        }
    }
    memset(out, 0, sizeof *out);
    out->channels = C;
    for (int c = 0; c < 3; c++) {
        double z[TSR_PREVIEW_MAX_CH];
        for (int i = 0; i < C; i++) { /* L z = b */
            double t = B[i][c];
            for (int k = 0; k < i; k++)
                t -= A[i][k] * z[k];
            z[i] = t / A[i][i];
        }
        for (int i = C - 1; i >= 0; i--) { /* L^T f = z */
            double t = z[i];
            for (int k = i + 1; k < C; k++)
                t -= A[k][i] * z[k];
            z[i] = t / A[i][i];
        }
        double bias = my[c];
        for (int k = 0; k < C; k++) {
            out->fac[k][c] = (float)z[k];
            bias -= mx[k] * z[k];
        }
        out->bias[c] = (float)bias;
    }
    for (int k = 0; k < C; k++)
        for (int c = 0; c < 3; c++)
            if (!isfinite(out->fac[k][c]) || !isfinite(out->bias[c]))
                return tsr_errorf(TSR_ERR_FORMAT, "preview fit: non-finite solution");
    return TSR_OK;
}

int tsr_preview_fit(tsr_vae *vae, tsr_preview_linear_map *out)
{
    if (!vae || !out)
        return tsr_errorf(TSR_ERR_INVALID, "preview fit: NULL argument");
    const tsr_vae_desc *d = tsr_vae_get_desc(vae);
    const int C = d->latent_channels, f = tsr_vae_factor(vae);
    if (C < 1 || C > TSR_PREVIEW_MAX_CH)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "preview fit: %d latent channels (at most %d)", C,
                          TSR_PREVIEW_MAX_CH);
    if (d->in_channels != 3)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "preview fit: the VAE takes %d image channels, not 3",
                          d->in_channels);
    float col[FIT_COLOURS][3];
    fit_colours(col);
    const int S = FIT_SIDE * f;
    const size_t img_px = (size_t)S * S, lat_px = (size_t)FIT_SIDE * FIT_SIDE;
    const size_t n_lat = FIT_COLOURS * lat_px * (size_t)C;
    float *img = malloc(FIT_COLOURS * img_px * 3 * sizeof(float));
    float *mean = malloc(n_lat * sizeof(float)), *logvar = malloc(n_lat * sizeof(float));
    int rc;
    if (!img || !mean || !logvar) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "preview fit: out of memory");
        goto done;
    }
    for (int i = 0; i < FIT_COLOURS; i++)
        for (size_t p = 0; p < img_px; p++)
            memcpy(img + (i * img_px + p) * 3, col[i], 3 * sizeof(float));
    TSR_CHECK_GOTO(rc, tsr_vae_encode(vae, img, FIT_COLOURS, S, S, mean, logvar), done);
    tsr_vae_sample(d, mean, NULL, NULL, n_lat, mean);

    double x[FIT_COLOURS][TSR_PREVIEW_MAX_CH], y[FIT_COLOURS][3];
    for (int i = 0; i < FIT_COLOURS; i++) {
        for (int k = 0; k < C; k++) {
            double s = 0;
            for (size_t p = 0; p < lat_px; p++)
                s += mean[(i * lat_px + p) * C + k];
            x[i][k] = s / (double)lat_px;
            if (!isfinite(x[i][k])) {
                rc = tsr_errorf(TSR_ERR_FORMAT, "preview fit: the VAE encodes a flat colour to "
                                                "non-finite latents");
                goto done;
            }
        }
        for (int c = 0; c < 3; c++)
            y[i][c] = col[i][c];
    }
    TSR_CHECK_GOTO(rc, fit_solve(x, y, FIT_COLOURS, C, out), done);
    if (tsr_log_level_current <= TSR_LOG_DEBUG) {
        double se = 0;
        for (int i = 0; i < FIT_COLOURS; i++)
            for (int c = 0; c < 3; c++) {
                double v = out->bias[c] - y[i][c];
                for (int k = 0; k < C; k++)
                    v += x[i][k] * out->fac[k][c];
                se += v * v;
            }
        TSR_DEBUG("preview fit: %d channels, rms residual %.4f on %d colours", C,
                  sqrt(se / (3.0 * FIT_COLOURS)), FIT_COLOURS);
    }
done:
    free(img);
    free(mean);
    free(logvar);
    return rc;
}

/* ---- the projection ---- */

int tsr_preview_linear(const tsr_preview_linear_map *map, const float *latents, int h, int w,
                       int channels, float *rgb_f, uint8_t *rgb)
{
    if (!map || !latents)
        return tsr_errorf(TSR_ERR_INVALID, "preview: NULL map or latents");
    const int C = map->channels;
    if (C < 1 || C > TSR_PREVIEW_MAX_CH)
        return tsr_errorf(TSR_ERR_INVALID, "preview: a map of %d channels (1..%d)", C,
                          TSR_PREVIEW_MAX_CH);
    if (channels != C)
        return tsr_errorf(TSR_ERR_INVALID, "preview: the map takes %d latent channels, got %d", C,
                          channels);
    if (h < 1 || w < 1 || h > 16384 || w > 16384)
        return tsr_errorf(TSR_ERR_INVALID, "preview: latent size %dx%d outside 1..16384", w, h);
    const size_t n = (size_t)h * w;
    for (size_t p = 0; p < n; p++) {
        const float *l = latents + (size_t)C * p;
        for (int c = 0; c < 3; c++) {
            /* torch's matmul order: channel by channel, then + bias */
            float x = l[0] * map->fac[0][c];
            for (int k = 1; k < C; k++)
                x += l[k] * map->fac[k][c];
            x += map->bias[c];
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
