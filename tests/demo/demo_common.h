/*
 * tests/demo/demo_common.h - what the demo-model tests share: the held-out
 * JSON files and their palette, the colour/place scoring rule, the v2 shape
 * geometry, and running `tessera generate`.
 *
 * Why one header over two files: test_demo.c (the v1 bar) and test_demo_v2.c
 * (issue 15's v2 bars) must score with exactly the rules of
 * tools/demo-model/score.py, so each rule exists once in C:
 * demo_common.c holds the JSON, palette, colour/place rule and subprocess
 * driver; demo_shapes.c the geometry (regions, holes, convex hull, shape
 * class, region count, background flatness).
 */
#ifndef TSR_DEMO_COMMON_H
#define TSR_DEMO_COMMON_H

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "image/image.h"

#define DEMO_MAX_COLOURS 32
#define DEMO_DATA_SIZE 128.0 /* the JSON files' coordinates are in 128-pixel units */

/* Mirrors tools/demo-model/score.py (CORE, REST, FG_MIN, BG_MIN). */
#define DEMO_CORE 12.0
#define DEMO_REST 28.0
#define DEMO_FG_MIN 0.5
#define DEMO_BG_MIN 0.6

typedef struct demo_palette {
    int n;
    char names[DEMO_MAX_COLOURS][16];
    double rgb[DEMO_MAX_COLOURS][3];
} demo_palette;

/* $TSR_SOURCE_DIR, or "." */
const char *demo_source_dir(void);

/* Parses <source>/<rel> and checks it has prompts, palette and
 * region_centres; returns an owned cJSON (cJSON_Delete) or NULL. */
cJSON *demo_load_json(const char *rel);
int demo_load_palette(const cJSON *j, demo_palette *p);
int demo_colour_index(const demo_palette *p, const char *name);
int demo_region_centre(const cJSON *j, const char *region, double *cx, double *cy);
const char *demo_jstr(const cJSON *o, const char *key);

/* Nearest palette entry (squared RGB distance, ties to the earlier entry, as
 * numpy's argmin). */
int demo_nearest(const demo_palette *p, const uint8_t *px);
/* Every pixel of an RGB image -> its nearest palette index (w*h bytes). */
void demo_label(const tsr_image *img, const demo_palette *p, uint8_t *lab);

/* The colour/place rule: 1 pass, 0 fail, -1 bad input or out of memory;
 * fg/bg receive the covered fractions of the core box (by the named colour
 * with its holes filled) and of the rest. */
int demo_score_place(const tsr_image *img, const demo_palette *p, int colour, int background,
                     double cx, double cy, double *fg, double *bg);

/* ---- demo_shapes.c: the v2 geometry (score.py's shape_features etc.) ---- */

/* Thresholds, as score.py. */
#define DEMO_HOLE_MIN 0.12
#define DEMO_STAR_SOLIDITY 0.66
#define DEMO_CROSS_SOLIDITY 0.86
/* four bays and a bottom notch in [DEMO_STAR_NOTCH, DEMO_STAR_NOTCH_MAX): a star
 * (clean 0.13-0.18); deeper is a gap between merged shapes */
#define DEMO_STAR_NOTCH 0.085
#define DEMO_STAR_NOTCH_MAX 0.33
#define DEMO_SQUARE_FILL 0.88
#define DEMO_CIRCLE_FILL 0.64
#define DEMO_TRIANGLE_TOP 0.37
#define DEMO_MIN_REGION 40 /* pixels at 128x128 */
#define DEMO_FLAT_MAX 6.0  /* /255 */

/* filled := mask[i] != 0 with its holes filled: every pixel outside the
 * mask that cannot reach the image border through other such pixels
 * (4-connected), as score.py's fill_holes().  0, or -1 when out of memory. */
int demo_fill_holes(const uint8_t *mask, int w, int h, uint8_t *filled);

typedef struct demo_shape_features {
    int present; /* 0: the colour is absent */
    long area, filled;
    double hole, solidity, fill, hull_fill, aspect, top;
    int bays;     /* hull areas outside the shape of >= 2% of the hull: star 5, cross 4 */
    double notch; /* empty run up from the box's bottom, middle fifth of columns, / height */
} demo_shape_features;

/* Geometry of the largest 4-connected region of `colour` in `lab` (w*h
 * palette indices).  0, or -1 when out of memory. */
int demo_shape_features_of(const uint8_t *lab, int w, int h, int colour, demo_shape_features *f);
/* "circle", "square", "triangle", "star", "ring", "cross" or "none". */
const char *demo_classify_shape(const demo_shape_features *f);
/* Separate 4-connected regions of `colour` of at least DEMO_MIN_REGION
 * pixels (scaled to w*h); -1 when out of memory. */
int demo_count_regions(const uint8_t *lab, int w, int h, int colour);
/* RMS over R, G, B of each channel's std (/255) over the pixels farther than
 * DEMO_REST (Chebyshev, 128-pixel units) from every centre. */
double demo_flatness(const tsr_image *img, const double (*centres)[2], int n);

/* ---- running tessera ---- */

int demo_make_tmp(char *dir, size_t size);
/* `$TSR_BIN generate` on models/demo, 128x128, --threads 1, at the default
 * settings (cfg < 0) or at `cfg`; writes `out`, logs to `log`.  0 on
 * success. */
int demo_generate(const char *prompt, long long seed, double cfg, const char *out, const char *log,
                  double *seconds);
/* The same from the picture `init` (img2img) at `strength`. */
int demo_img2img(const char *prompt, long long seed, double cfg, const char *init, double strength,
                 const char *out, const char *log);
/* Removes dir/names[i] and dir unless TSR_DEMO_KEEP is set. */
void demo_cleanup(const char *dir, const char *const *names, size_t n);

#endif
