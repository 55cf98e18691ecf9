/*
 * image/image.h - 8-bit images in memory, PNG read/write (libpng), JPEG
 * encode/decode (libjpeg-turbo), A1111 "parameters" metadata and SHA-256.
 *
 * Why it looks like this: the pipeline produces plain 8-bit RGB(A) pixels and
 * hands them here; everything that touches a file format lives behind this
 * one header so the rest of Tessera never sees libpng's or libjpeg's setjmp
 * error model.  Decoders treat every input as hostile: the size limits below
 * are checked from the header *before* any pixel buffer is allocated, and
 * every failure is a negative tsr_status with a message naming the file
 * ("init.png: 40000x40000 exceeds the 16384 limit"), never a crash.
 *
 * Writers go to "<path>.tmp", fsync and rename, so a failed or interrupted
 * write leaves no partial file under the final name.  Text chunks follow what
 * PIL (and therefore A1111) writes: tEXt when the text fits in Latin-1, iTXt
 * (uncompressed, UTF-8) otherwise, all before the first IDAT.
 *
 * Ownership: a tsr_image owns its `data` (free it with tsr_image_free);
 * "owned" out-pointers (malloc'd buffers and strings) pass to the caller, who
 * frees them with free() unless a *_free function is named.
 */
#ifndef TSR_IMAGE_IMAGE_H
#define TSR_IMAGE_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

/* ---- images ---- */

#define TSR_IMAGE_MAX_SIDE 16384u               /* per side, pixels */
#define TSR_IMAGE_MAX_PIXELS (UINT64_C(1) << 28) /* width * height */

typedef struct tsr_image {
    uint32_t width;
    uint32_t height;
    uint32_t channels; /* 1 gray, 3 RGB, 4 RGBA */
    uint8_t *data;     /* owned: height rows of width*channels bytes, no padding */
} tsr_image;

/* Limits applied by the decoders; zeros mean the defaults above.  A caller
 * (or a fuzzer) may tighten them; they can never be raised past the
 * defaults. */
typedef struct tsr_image_limits {
    uint32_t max_side;
    uint64_t max_pixels;
} tsr_image_limits;

/* Check width/height/channels against the limits (NULL = defaults).
 * `what` names the source in the message ("init.png: 0x10: zero size"). */
int tsr_image_check_size(uint32_t width, uint32_t height, uint32_t channels,
                         const tsr_image_limits *limits, const char *what);

/* Allocate an image (pixels uninitialised).  `img` is overwritten. */
int tsr_image_alloc(tsr_image *img, uint32_t width, uint32_t height, uint32_t channels);

/* Free the pixels and zero the struct; safe on a zeroed or freed image. */
void tsr_image_free(tsr_image *img);

/* Bytes of pixel data (width * height * channels). */
size_t tsr_image_bytes(const tsr_image *img);

/* Convert between 1, 3 and 4 channels into a new image `dst` (overwritten).
 * gray->RGB replicates; RGB->gray uses ITU-R 601 luma as PIL does
 * (L = (R*299 + G*587 + B*114) / 1000, rounded); adding alpha gives 255;
 * removing it drops it (no compositing). */
int tsr_image_convert(const tsr_image *src, uint32_t channels, tsr_image *dst);

/* Read a PNG or a JPEG, chosen by the file's first bytes (not its name);
 * want_channels as for tsr_png_read.  Anything else is TSR_ERR_FORMAT
 * naming the path. */
int tsr_image_read(const char *path, int want_channels, tsr_image *img);

/* The same from memory; `name` names the data in messages. */
int tsr_image_read_memory(const void *data, size_t size, const char *name, int want_channels,
                          const tsr_image_limits *limits, tsr_image *img);

/* ---- resizing (image/resize.c) ---- */

/* PIL's Image.resize((width, height), Image.LANCZOS, box): the same
 * separable Lanczos-3 with the same fixed-point arithmetic, so the pixels
 * equal Pillow's.  box = {x0, y0, x1, y1} in source pixels (NULL = the whole
 * image; a zero-size box is allowed, as in Pillow).  Channels are resampled
 * independently (RGBA without Pillow's alpha premultiplication).  `dst` is
 * overwritten (owned). */
int tsr_image_resize_box(const tsr_image *src, uint32_t width, uint32_t height,
                         const double box[4], tsr_image *dst);
int tsr_image_resize(const tsr_image *src, uint32_t width, uint32_t height, tsr_image *dst);

/* A1111's img2img resize modes (modules/images.py resize_image, upscaler
 * None):
 *   JUST  stretch to width x height;
 *   CROP  scale to cover, centre, crop the excess;
 *   FILL  scale to fit, centre, and fill the two borders with Lanczos
 *         resizes of the edge rows/columns (A1111's zero-size boxes);
 *         uncovered areas are black (A1111's Image.new). */
typedef enum tsr_resize_mode {
    TSR_RESIZE_JUST,
    TSR_RESIZE_CROP,
    TSR_RESIZE_FILL,
} tsr_resize_mode;

/* "just-resize", "crop-and-resize", "resize-and-fill" (also A1111's names
 * with spaces and its numbers 0, 1, 2). */
int tsr_resize_mode_parse(const char *s, tsr_resize_mode *out);
const char *tsr_resize_mode_name(tsr_resize_mode m);
int tsr_image_resize_a1111(const tsr_image *src, tsr_resize_mode mode, uint32_t width,
                           uint32_t height, tsr_image *dst);

/* ---- inpainting helpers (image/blur.c) ---- */

/* Pillow's ImageFilter.GaussianBlur(radius) (three box blurs of a fractional
 * radius, horizontal passes first), per channel; radius 0 copies.  What
 * A1111 before 1.6 did to an inpainting mask for "Mask blur" (A1111 1.6+
 * uses OpenCV's GaussianBlur, which differs by a few levels).  *dst owned. */
int tsr_image_gaussian_blur_pil(const tsr_image *src, double radius, tsr_image *dst);

/* The inpainting overlay: the original shown through where the mask is 0,
 * the generated image where it is 255, mixed in between:
 * out = (gen * m + orig * (255 - m) + 127) / 255 (integer division).  RGB
 * images and a gray mask of the same size.  *out owned. */
int tsr_image_mask_overlay(const tsr_image *generated, const tsr_image *original,
                           const tsr_image *mask, tsr_image *out);

/* ---- A1111's "inpaint only masked" region (image/crop_region.c) ---- */

/* A half-open rectangle: [x1, x2) x [y1, y2). */
typedef struct tsr_rect {
    int x1, y1, x2, y2;
} tsr_rect;

/* The bounding box of the gray mask's pixels above `threshold`: 1 and *box,
 * 0 when none is (box all zero), < 0 on bad input. */
int tsr_mask_bbox(const tsr_image *mask, uint8_t threshold, tsr_rect *box);

/* `box` grown by `padding` on every side, clipped to the image
 * (A1111's masking.get_crop_region). */
tsr_rect tsr_crop_region_pad(tsr_rect box, int padding, int image_width, int image_height);

/* The region grown to the aspect width:height: the shorter dimension grows
 * by the truncated difference, half on each side; past an edge the region
 * shifts back inside, and it is clipped to the image where it is larger
 * (A1111's masking.expand_crop_region).  The aspect is then only
 * approximate; the crop is resized to width x height anyway. */
tsr_rect tsr_crop_region_expand(tsr_rect r, int width, int height, int image_width,
                                int image_height);

/* Both, on the mask binarized as A1111 does (> 128 is set): 1 and *out,
 * 0 when the mask has no set pixel, < 0 on bad input. */
int tsr_crop_region(const tsr_image *mask, int padding, int width, int height, tsr_rect *out);

/* The region of `src` (inside it, not empty) as a new image.  *dst owned. */
int tsr_image_crop(const tsr_image *src, tsr_rect r, tsr_image *dst);

/* ---- PNG ---- */

/* One text chunk.  For writing both strings are borrowed UTF-8: the key must
 * be 1-79 printable ASCII characters without leading, trailing or double
 * spaces (the PNG keyword rules, narrowed to ASCII); the text is any valid
 * UTF-8 (written as Latin-1 tEXt when every character fits, else iTXt).  For reading
 * both are owned by the tsr_png_meta that holds them, converted to UTF-8
 * (tEXt/zTXt are Latin-1 on disk). */
typedef struct tsr_png_text {
    const char *key;
    const char *text;
} tsr_png_text;

/* Text chunks read from a PNG, in file order (tEXt, zTXt and iTXt; iTXt
 * whose text is not valid UTF-8 is skipped, as PIL skips it). */
typedef struct tsr_png_meta {
    size_t count;
    tsr_png_text *texts; /* owned, with every key/text string */
} tsr_png_meta;

void tsr_png_meta_free(tsr_png_meta *meta);

/* The text of the LAST chunk named `key` (PIL's info dict keeps the last),
 * or NULL.  Borrowed from `meta`. */
const char *tsr_png_meta_find(const tsr_png_meta *meta, const char *key);

/* Write an 8-bit PNG (gray, RGB or RGBA by img->channels) with `n` text
 * chunks to `path` atomically ("<path>.tmp", fsync, rename; on failure the
 * temporary file is removed and `path` is untouched). */
int tsr_png_write(const char *path, const tsr_image *img, const tsr_png_text *texts, size_t n);

/* The same PNG into memory: *out (owned, free()) and *out_len. */
int tsr_png_write_memory(const tsr_image *img, const tsr_png_text *texts, size_t n,
                         uint8_t **out, size_t *out_len);

/* Read any PNG (every colour type and bit depth, palette, tRNS, 16-bit,
 * interlaced) as 8-bit pixels.  want_channels: 0 keeps the file's layout
 * (gray -> 1, RGB/palette -> 3, anything with alpha or tRNS -> 4; gray+alpha
 * becomes RGBA), or 1, 3 or 4 to convert.  16-bit samples keep their high
 * byte (as PIL does for RGB).  `meta` may be NULL; when given it receives the
 * text chunks (pre- and post-IDAT).  On failure `img` and `meta` are left
 * zeroed. */
int tsr_png_read(const char *path, int want_channels, tsr_image *img, tsr_png_meta *meta);

/* From memory; `name` names the data in messages (e.g. "upload.png"). */
int tsr_png_read_memory(const void *data, size_t size, const char *name, int want_channels,
                        tsr_image *img, tsr_png_meta *meta);

/* Either of the above with explicit limits (NULL = defaults): reads the
 * file `path` when data is NULL, else the `size` bytes at `data` with
 * `path` only naming them in messages. */
int tsr_png_read_ex(const char *path, const void *data, size_t size, int want_channels,
                    const tsr_image_limits *limits, tsr_image *img, tsr_png_meta *meta);

/* ---- JPEG ---- */

/* Baseline JPEG of a 1-, 3- or 4-channel image (alpha is dropped), quality
 * 1..100, 4:2:0 chroma subsampling for colour.  *out is owned (free()). */
int tsr_jpeg_encode(const tsr_image *img, int quality, uint8_t **out, size_t *out_len);

/* Decode a JPEG (baseline or progressive; gray, YCbCr or RGB - CMYK/YCCK
 * is refused) to 8-bit pixels; want_channels as for tsr_png_read (0 keeps 1 or
 * 3).  Corrupt or truncated data is an error, not a warning.  `name` names
 * the data in messages; `limits` may be NULL. */
int tsr_jpeg_decode(const void *data, size_t size, const char *name, int want_channels,
                    const tsr_image_limits *limits, tsr_image *img);

/* Read a JPEG file (tsr_jpeg_decode on its bytes; files over 256 MiB are
 * refused).  `parameters` may be NULL; when given it receives A1111's
 * generation parameters when the file has them (EXIF UserComment, see
 * tsr_jpeg_write), else NULL.  Owned (free()). */
int tsr_jpeg_read(const char *path, int want_channels, tsr_image *img, char **parameters);

/* The A1111 parameters of JPEG bytes (EXIF UserComment), or *out = NULL when
 * there are none.  Hostile input gives NULL or an error, never a crash. */
int tsr_jpeg_parameters(const void *data, size_t size, char **out);

/* Write a JPEG (quality 1..100, as tsr_jpeg_encode) atomically, as
 * tsr_png_write does.  `parameters` (UTF-8, may be NULL) goes where A1111
 * puts it: an EXIF APP1 segment whose Exif IFD holds one UserComment in
 * piexif's "UNICODE" encoding (8-byte "UNICODE\0" prefix, UTF-16BE text,
 * big-endian TIFF), which A1111's PNG Info tab and piexif read back.  EXIF
 * fits 64 KiB: longer parameters are TSR_ERR_RANGE. */
int tsr_jpeg_write(const char *path, const tsr_image *img, int quality, const char *parameters);

/* ---- A1111 "parameters" ---- */

/* The generation settings that tsr_a1111_parameters writes, in A1111's
 * create_infotext order.  Strings are borrowed UTF-8; NULL omits an optional
 * field.  See image/a1111.c for the exact rules. */
typedef struct tsr_a1111_info {
    const char *prompt;          /* required (may be "") */
    const char *negative_prompt; /* NULL or "" omits the "Negative prompt:" line */
    int steps;                   /* "Steps: 30" */
    const char *sampler;         /* A1111 display name: "Euler a", "DPM++ 2M" */
    const char *schedule_type;   /* "Karras", "Exponential", "SGM Uniform", "Automatic" */
    double cfg_scale;            /* "CFG scale: 7" / "7.5" (shortest form) */
    uint64_t seed;               /* "Seed: 1234" (unsigned 64-bit, as torch's manual_seed) */
    int width, height;           /* "Size: 512x768" */
    const char *model_hash;      /* "Model hash: 6ce0161689" (tsr_a1111_model_hash) */
    const char *model;           /* "Model: v1-5-pruned-emaonly" (file stem) */
    const char *vae_hash;        /* "VAE hash: ..." */
    const char *vae;             /* "VAE: ..." */
    double denoising_strength;   /* img2img; < 0 (or NaN) omits */
    int clip_skip;               /* <= 1 omits (A1111 omits 1) */
    const char *rng;             /* "CPU" / "NV"; NULL or "GPU" (A1111's default) omits */
    int tiling;                  /* "Tiling: True" after RNG (A1111's create_infotext); 0 omits */
    const char *version;         /* "Version: tessera 0.1.0"; NULL omits */
    /* the hires fix's extra parameters, after RNG (A1111's
     * extra_generation_params): "Hires upscale: 2" (<= 0 omits), or "Hires
     * resize: 1024x0" (both 0 omit), "Hires steps: 10" (0 omits), "Hires
     * upscaler: Latent" (NULL omits) */
    double hires_upscale;
    int hires_resize_x, hires_resize_y;
    int hires_steps;
    const char *hires_upscaler;
    /* "Lora hashes: \"name: 0123456789ab, ...\"" (A1111's, after the hires
     * fields: an extra_generation_params entry); NULL or "" omits */
    const char *lora_hashes;
    /* "TI hashes: \"name: 0123456789ab, ...\"" (A1111's, textual-inversion
     * embeddings the prompts used, after Lora hashes); NULL or "" omits */
    const char *ti_hashes;
} tsr_a1111_info;

/* Fill `info` with "omitted" values (negative denoising, clip_skip 0, NULLs). */
void tsr_a1111_info_init(tsr_a1111_info *info);

/* Format the "parameters" string exactly as A1111's create_infotext does.
 * *out is owned (free()). */
int tsr_a1111_parameters(const tsr_a1111_info *info, char **out);

/* A1111's "Model hash" (AutoV2): the first 10 hex digits of the SHA-256 of
 * the whole file.  Reads the whole checkpoint (seconds for a multi-GB file):
 * the caller decides whether to pay for it.  out: 11 bytes incl. NUL. */
int tsr_a1111_model_hash(const char *path, char out[11]);

/* ---- SHA-256 (FIPS 180-4) ---- */

/* tsr_sha256_ctx and the one-shot helpers are public (tessera.h). */

/* Hash a whole file in 1 MiB reads. */
int tsr_sha256_file(const char *path, uint8_t digest[32]);

#endif
