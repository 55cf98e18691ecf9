/*
 * tests/demo/test_demo_v2.c - the instruments for issue 15's v2 demo model:
 * a shape scorer checked on the training renderer's own images, and the v2
 * bars measured on the committed model through the C engine.
 *
 * Why it is built this way: the v2 bars (shapes told apart by geometry,
 * flat backgrounds of every colour, "two X" drawn as two regions, new
 * phrasings, guidance that matters) must be measurable before a v2 model is
 * trained against them, and a scorer must first be shown right where the
 * answer is known.  So:
 *
 *   shape_scorer_self  the geometry of demo_shapes.c on the clean renders in
 *                      tests/data/demo/shape_sheet.png (written by
 *                      tools/demo-model/shape_sheet.py from dataset.render;
 *                      facts in shape_sheet.json): every shape is named
 *                      right on >= 97% of its tiles, every large one passes
 *                      the colour/place rule, backgrounds are flat
 *                      (< 0.5/255), a single shape is one region and a pair
 *                      two (unit; no model, no Python)
 *   shape_scorer_ports the same geometry on a decoder's blurred images: the
 *                      committed VAE's round trip of that sheet
 *                      (shape_sheet_vae.png, shape_sheet.py --roundtrip),
 *                      where every tile's verdict, region count, bays,
 *                      areas and solidity must equal what score.py recorded
 *                      in shape_sheet_vae.json - the ports agree off the
 *                      clean images too (unit)
 *   shape_scorer_human the same geometry on 48 images the model generated,
 *                      labelled by a person (tests/data/demo/human_sheet.png,
 *                      tools/demo-model/human_sheet.py): it must name what
 *                      the person saw on >= HUMAN_MIN of them, and equal
 *                      score.py's recorded verdicts (unit)
 *   v2_bars_report     every prompt of tools/demo-model/heldout2.json (a
 *                      second caption template set training never uses,
 *                      tools/demo-model/captions_eval.py) through `tessera
 *                      generate` at the default settings and at cfg 1.0; it
 *                      prints every v2 bar with PASS/FAIL for the record
 *                      and asserts the floors today's model holds
 *                      (FLOOR_*): since session 35 every bar, and one
 *                      prompt under what the model holds where it holds
 *                      more (golden)
 *   img2img_keeps      img2img at strength 0.1, cfg 1.0, from the sheet's
 *                      clean large tiles gives them back: shape kept, mean
 *                      abs difference bounded (the demo VAE's posterior is
 *                      a point, so encoding does not add noise; golden)
 *
 * The rules are those of tools/demo-model/score.py (--v2); see
 * docs/demo-model.md, "v2".  TSR_DEMO_KEEP=1 keeps the generated images.
 */
#include "test.h"

#include <cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "demo_common.h"
#include "image/image.h"

#define N_SHAPES 6
static const char *const k_shapes[N_SHAPES] = {"circle", "square", "triangle",
                                               "star",   "ring",   "cross"};

/* The v2 bars (issue 15). */
#define BAR_SHAPE 0.80      /* per shape */
#define BAR_PLACE 0.95      /* colour, place and background */
#define BAR_FLAT_SHARE 0.90 /* of a background's images under DEMO_FLAT_MAX */
#define BAR_TWO 0.70
#define BAR_DROP 0.25

/* Floors the committed model holds (session 35: the v2 recipe of session 31
 * without the polish stage, with no caption noise in the guide stage, the
 * interval stage's high-noise band (guidance x 0.6 at t >= 700) and DDIM
 * ending at alpha 1), measured with these instruments: colour/place 0.95
 * (114/120), cfg 1.0 drop 0.56; circles 0.95, squares 0.90, triangles 0.85,
 * stars 0.85, rings 0.85, crosses 1.00; two X 0.75; 120 of 120 backgrounds
 * flat; docs/demo-model.md).  It meets every v2 bar, so every bar is
 * asserted, each background colour's flat share included; where the model
 * holds more than a bar, the floor sits one prompt under what it holds, so
 * that a regression of the model, the engine or the instruments fails.
 * Session 31's model held colour/place 0.97, drop 0.55, circles 0.90,
 * squares 1.00, triangles 0.95, stars 0.90, rings 0.90, crosses 0.95, two X
 * 0.75, 112 flat (blue 5/6, pink 10/12 and cyan 12/15 under the bar).
 * Session 30's model (loosen 600 steps) held colour/place 0.97, drop 0.57,
 * circles 0.90, squares 1.00, triangles 0.95, stars 0.80, rings 0.90,
 * crosses 1.00, two X 0.67, 116 flat (purple 8/9 the one colour under).
 * Session 26's model (the same recipe, 10% of single shapes' captions
 * without a place) held colour/place 0.96, drop 0.67, circles 1.00, squares
 * 0.90, triangles 1.00, stars 0.90, rings 0.80, crosses 0.90, two X 0.75,
 * 110 flat (stars 0.75 and crosses 0.95 before session 29's bottom-notch
 * test, which names a star whose fifth bay the blur closed a star).
 * The model before (session 25, the same recipe in fp32) held colour/place
 * 0.95, drop 0.65, circles 0.95, squares 0.80, triangles 1.00, stars 0.80,
 * rings 0.80, crosses 0.95, two X 0.58, 106 flat; session 19's (interval
 * floor t 300, half of the "two X"
 * captions without places) held colour/place 0.97, drop 0.69, circles
 * 1.00, squares 0.85, triangles 1.00, stars 0.85, rings 0.80, crosses
 * 0.90, two X 0.42, 95 flat; session 17's (no interval stage) colour/place
 * 0.95, drop 0.60, circles 0.90, stars 1.00, rings 0.85, crosses 0.80,
 * triangles 0.40, squares 0.00, two X 0.38, 97 flat (the last two shapes
 * under the shape rule before session 21).  v1's floors were colour/place
 * 0.65, drop 0.25, circles 0.60, two X 0.30; v1 drew no star, ring or
 * cross (0.00, 0.00, 0.15). */
#define FLOOR_PLACE BAR_PLACE
#define FLOOR_PLACE_DROP BAR_DROP
#define FLOOR_TWO BAR_TWO
#define FLOOR_FLAT 0.97 /* of all single-shape backgrounds, every colour together */
#define FLOOR_FLAT_SHARE BAR_FLAT_SHARE /* of each background colour's */
static const struct {
    const char *shape;
    double min;
} k_shape_floors[] = {{"circle", 0.90}, {"star", 0.80}, {"ring", 0.80}, {"cross", 0.95},
                     {"triangle", 0.80}, {"square", 0.85}};

#define SELF_MIN 0.97
#define MAX_PROMPTS 256

static int shape_index(const char *name)
{
    for (int i = 0; name && i < N_SHAPES; i++)
        if (strcmp(k_shapes[i], name) == 0)
            return i;
    return -1;
}

/* Everything measured on one image. */
typedef struct measure {
    int place_ok; /* colour/place/background rule (single shapes) */
    const char *shape;
    demo_shape_features f;
    int regions;
    double flat;
} measure;

/* Labels `img` and measures it for `colour` with the shapes at `centres`. */
static int measure_image(const tsr_image *img, const demo_palette *p, int colour, int background,
                         const double (*centres)[2], int n, measure *m)
{
    memset(m, 0, sizeof *m);
    uint8_t *lab = malloc((size_t)img->width * img->height);
    if (!lab)
        return -1;
    demo_label(img, p, lab);
    int w = (int)img->width, h = (int)img->height;
    int rc = demo_shape_features_of(lab, w, h, colour, &m->f);
    m->regions = rc == 0 ? demo_count_regions(lab, w, h, colour) : -1;
    free(lab);
    if (rc != 0 || m->regions < 0)
        return -1;
    m->shape = demo_classify_shape(&m->f);
    m->flat = demo_flatness(img, centres, n);
    double fg = 0, bg = 0;
    m->place_ok = n == 1 ? demo_score_place(img, p, colour, background, centres[0][0],
                                            centres[0][1], &fg, &bg) == 1
                         : 0;
    return 0;
}

/* ---- shape_scorer_self, shape_scorer_ports ---- */

/* 1 when tile `it`'s "python" verdicts (score.py's, written by
 * shape_sheet.py --roundtrip) equal the C measurement; 1 also when the tile
 * has none. */
static int same_as_python(const cJSON *it, const measure *m, int n)
{
    const cJSON *py = cJSON_GetObjectItemCaseSensitive(it, "python");
    if (!py)
        return 1;
    const cJSON *reg = cJSON_GetObjectItemCaseSensitive(py, "regions");
    const cJSON *bays = cJSON_GetObjectItemCaseSensitive(py, "bays");
    const cJSON *area = cJSON_GetObjectItemCaseSensitive(py, "area");
    const cJSON *filled = cJSON_GetObjectItemCaseSensitive(py, "filled");
    const cJSON *sol = cJSON_GetObjectItemCaseSensitive(py, "solidity");
    const cJSON *hull = cJSON_GetObjectItemCaseSensitive(py, "hull_fill");
    const cJSON *notch = cJSON_GetObjectItemCaseSensitive(py, "notch");
    const char *shape = demo_jstr(py, "shape");
    int same = shape && strcmp(shape, m->shape) == 0 && cJSON_IsNumber(reg) &&
               reg->valueint == m->regions && cJSON_IsNumber(bays) && bays->valueint == m->f.bays &&
               cJSON_IsNumber(area) && (long)area->valuedouble == m->f.area &&
               cJSON_IsNumber(filled) && (long)filled->valuedouble == m->f.filled &&
               cJSON_IsNumber(sol) && fabs(sol->valuedouble - m->f.solidity) < 1e-9 &&
               cJSON_IsNumber(hull) && fabs(hull->valuedouble - m->f.hull_fill) < 1e-9 &&
               cJSON_IsNumber(notch) && fabs(notch->valuedouble - m->f.notch) < 1e-9;
    if (!same)
        printf("tile %3d: C says %s, regions %d, bays %d, area %ld, filled %ld, solidity %.6f, "
               "hull fill %.6f, notch %.6f; score.py says %s\n",
               n, m->shape, m->regions, m->f.bays, m->f.area, m->f.filled, m->f.solidity,
               m->f.hull_fill, m->f.notch, shape ? shape : "?");
    return same;
}

/* tests/data/demo/<name>.json (the sheet's facts, returned; NULL on any
 * error) and the sheet image, <name>.png or `png` when not NULL, with its
 * tile layout. */
static cJSON *load_sheet(const char *name, const char *png, tsr_image *sheet, int *cols, int *tile)
{
    char path[PATH_MAX], rel[64];
    size_t len = 0;
    snprintf(rel, sizeof rel, "demo/%s.json", name);
    char *text = tsr_test_read_file(tsr_test_path(rel, path, sizeof path), &len);
    cJSON *facts = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    const cJSON *tiles = cJSON_GetObjectItemCaseSensitive(facts, "tiles");
    const cJSON *cols_j = cJSON_GetObjectItemCaseSensitive(facts, "cols");
    const cJSON *tile_j = cJSON_GetObjectItemCaseSensitive(facts, "tile");
    snprintf(rel, sizeof rel, "demo/%s.png", name);
    if (!cJSON_IsArray(tiles) || !cJSON_IsNumber(cols_j) || !cJSON_IsNumber(tile_j) ||
        tsr_png_read(png ? png : tsr_test_path(rel, path, sizeof path), 3, sheet, NULL) != 0) {
        fprintf(stderr, "%s: the sheet's facts or image are missing or malformed\n", name);
        cJSON_Delete(facts);
        return NULL;
    }
    *cols = cols_j->valueint;
    *tile = tile_j->valueint;
    return facts;
}

/* Tile `n` of a sheet laid out `cols` tiles of t x t to a row, as a new
 * image; < 0 when it lies outside the sheet. */
static int sheet_tile(const tsr_image *sheet, int n, int cols, int t, tsr_image *tile)
{
    int tx = (n % cols) * t, ty = (n / cols) * t;
    return tsr_image_crop(sheet, (tsr_rect){tx, ty, tx + t, ty + t}, tile);
}

/* Measures every tile of tests/data/demo/<name>.png against <name>.json.
 * clean: the renderer's own images, held to SELF_MIN per shape, exact region
 * counts and flat backgrounds; otherwise (a VAE round trip) the C port must
 * only agree with score.py's recorded verdicts, tile for tile. */
static int check_sheet(const char *name, int clean)
{
    cJSON *held = demo_load_json("tools/demo-model/heldout2.json");
    ASSERT_TRUE(held != NULL);
    demo_palette p;
    ASSERT_OK(demo_load_palette(held, &p));
    /* TSR_DEMO_SHEET: another image of the same layout (e.g. a VAE round trip
     * of the sheet, tools/demo-model/vae_pilot.py --save) is measured instead,
     * every tile printed and nothing asserted: for comparing with score.py. */
    const char *other = clean ? getenv("TSR_DEMO_SHEET") : NULL;
    tsr_image sheet = {0};
    int cols = 0, t = 0;
    cJSON *facts = load_sheet(name, other, &sheet, &cols, &t);
    ASSERT_TRUE(facts != NULL);
    const cJSON *tiles = cJSON_GetObjectItemCaseSensitive(facts, "tiles");

    int right[N_SHAPES] = {0}, total[N_SHAPES] = {0}, count_bad = 0, n = 0, bad = 0, differ = 0;
    int placed[N_SHAPES] = {0}, large[N_SHAPES] = {0}; /* the colour/place rule, large tiles */
    double flat_max = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, tiles)
    {
        int s = shape_index(demo_jstr(it, "shape"));
        int colour = demo_colour_index(&p, demo_jstr(it, "colour"));
        int background = demo_colour_index(&p, demo_jstr(it, "background"));
        const cJSON *regs = cJSON_GetObjectItemCaseSensitive(it, "regions");
        int nreg = cJSON_GetArraySize(regs);
        double centres[2][2];
        int ok = s >= 0 && colour >= 0 && background >= 0 && nreg >= 1 && nreg <= 2;
        for (int k = 0; ok && k < nreg; k++)
            ok = demo_region_centre(held, cJSON_GetArrayItem(regs, k)->valuestring, &centres[k][0],
                                    &centres[k][1]) == 0;
        tsr_image tile = {0};
        if (!ok || sheet_tile(&sheet, n, cols, t, &tile) != 0) {
            fprintf(stderr, "shape_sheet.json: tile %d is malformed\n", n);
            bad = 1;
            break;
        }
        measure m;
        int rc =
            measure_image(&tile, &p, colour, background, (const double(*)[2])centres, nreg, &m);
        tsr_image_free(&tile);
        if (rc != 0) {
            bad = 1;
            break;
        }
        differ += !same_as_python(it, &m, n);
        flat_max = m.flat > flat_max ? m.flat : flat_max;
        if (m.regions != nreg)
            count_bad++;
        if (nreg == 1) {
            total[s]++;
            right[s] += strcmp(m.shape, k_shapes[s]) == 0;
            const char *size = demo_jstr(it, "size");
            if (size && strcmp(size, "large") == 0) {
                large[s]++;
                placed[s] += m.place_ok;
            }
        }
        if (other || (clean && ((nreg == 1 && strcmp(m.shape, k_shapes[s]) != 0) ||
                                m.regions != nreg)))
            printf("tile %3d %-8s %-5s -> %-8s regions %d/%d  hole %.3f solidity %.3f fill "
                   "%.3f top %.3f bays %d\n",
                   n, k_shapes[s], demo_jstr(it, "size"), m.shape, m.regions, nreg, m.f.hole,
                   m.f.solidity, m.f.fill, m.f.top, m.f.bays);
        n++;
    }
    tsr_image_free(&sheet);
    cJSON_Delete(facts);
    cJSON_Delete(held);
    ASSERT_EQ(bad, 0);
    if (other)
        return 0;
    if (!clean) {
        for (int s = 0; s < N_SHAPES; s++)
            printf("%-8s %2d/%2d named right\n", k_shapes[s], right[s], total[s]);
        printf("tiles %d, C and score.py differ on %d\n", n, differ);
        ASSERT_TRUE(n >= 100);
        ASSERT_EQ(differ, 0);
        return 0;
    }
    int fails = 0;
    for (int s = 0; s < N_SHAPES; s++) {
        double acc = total[s] ? (double)right[s] / total[s] : 0.0;
        /* every held-out prompt is a large shape: the place rule must pass
         * those (a ring only with its hole filled) */
        double at = large[s] ? (double)placed[s] / large[s] : 0.0;
        printf("%-8s %2d/%2d = %.2f named right; large ones at their place %2d/%2d\n", k_shapes[s],
               right[s], total[s], acc, placed[s], large[s]);
        fails += total[s] < 5 || acc < SELF_MIN || large[s] < 5 || at < SELF_MIN;
    }
    printf("tiles %d, region count wrong on %d, background flatness max %.3f/255\n", n, count_bad,
           flat_max);
    ASSERT_EQ(fails, 0);
    ASSERT_EQ(count_bad, 0);
    ASSERT_TRUE(flat_max < 0.5);
    return 0;
}

static int test_shape_scorer_self(void)
{
    return check_sheet("shape_sheet", 1);
}

static int test_shape_scorer_ports(void)
{
    return check_sheet("shape_sheet_vae", 0);
}

/* ---- v2_bars_report ---- */

typedef struct tally {
    int place, place_n;                           /* single shapes */
    int shape_right[N_SHAPES], shape_n[N_SHAPES]; /* single shapes */
    int two, two_n;                               /* "two X" */
    int flat_ok[DEMO_MAX_COLOURS], flat_n[DEMO_MAX_COLOURS];
    double flat_sum[DEMO_MAX_COLOURS], flat_max[DEMO_MAX_COLOURS];
} tally;

/* Renders and measures every prompt at one setting (cfg < 0: defaults). */
static int run_setting(const cJSON *j, const demo_palette *p, const char *dir, double cfg,
                       const char *tag, tally *t)
{
    memset(t, 0, sizeof *t);
    int i = 0;
    double secs_sum = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "prompts"))
    {
        const char *prompt = demo_jstr(it, "prompt"), *kind = demo_jstr(it, "kind");
        int colour = demo_colour_index(p, demo_jstr(it, "colour"));
        int background = demo_colour_index(p, demo_jstr(it, "background"));
        int s = shape_index(demo_jstr(it, "shape"));
        const cJSON *seed = cJSON_GetObjectItemCaseSensitive(it, "seed");
        int two = kind && strcmp(kind, "two") == 0;
        double centres[2][2];
        int ok = prompt && kind && colour >= 0 && background >= 0 && s >= 0 &&
                 cJSON_IsNumber(seed) && i < MAX_PROMPTS;
        if (ok && two) {
            const cJSON *regs = cJSON_GetObjectItemCaseSensitive(it, "regions");
            ok = cJSON_GetArraySize(regs) == 2;
            for (int k = 0; ok && k < 2; k++)
                ok = demo_region_centre(j, cJSON_GetArrayItem(regs, k)->valuestring, &centres[k][0],
                                        &centres[k][1]) == 0;
        } else if (ok) {
            ok =
                demo_region_centre(j, demo_jstr(it, "region"), &centres[0][0], &centres[0][1]) == 0;
        }
        if (!ok) {
            fprintf(stderr, "heldout2.json: prompt %d is malformed\n", i);
            return -1;
        }
        char out[PATH_MAX], log[PATH_MAX];
        snprintf(out, sizeof out, "%s/%s-%03d.png", dir, tag, i);
        snprintf(log, sizeof log, "%s/log.txt", dir);
        double secs = 0;
        if (demo_generate(prompt, (long long)seed->valuedouble, cfg, out, log, &secs) != 0)
            return -1;
        secs_sum += secs;
        tsr_image img = {0};
        if (tsr_png_read(out, 3, &img, NULL) != 0) {
            fprintf(stderr, "%s: cannot read: %s\n", out, tsr_last_error());
            return -1;
        }
        measure m;
        int rc = measure_image(&img, p, colour, background, (const double(*)[2])centres,
                               two ? 2 : 1, &m);
        tsr_image_free(&img);
        if (rc != 0)
            return -1;
        if (!getenv("TSR_DEMO_KEEP"))
            remove(out);
        if (two) {
            t->two_n++;
            t->two += m.regions == 2;
        } else {
            t->place_n++;
            t->place += m.place_ok;
            t->shape_n[s]++;
            t->shape_right[s] += strcmp(m.shape, k_shapes[s]) == 0;
            t->flat_n[background]++;
            t->flat_ok[background] += m.flat < DEMO_FLAT_MAX;
            t->flat_sum[background] += m.flat;
            if (m.flat > t->flat_max[background])
                t->flat_max[background] = m.flat;
        }
        printf("%s %03d place %s shape %-8s (%-8s) regions %d flat %5.1f  %s\n", tag, i,
               two          ? "-   "
               : m.place_ok ? "PASS"
                            : "FAIL",
               m.shape, k_shapes[s], m.regions, m.flat, prompt);
        i++;
    }
    printf("%s: %d images, %.2f s per image\n", tag, i, i ? secs_sum / i : 0.0);
    return i;
}

static double rate(int a, int n)
{
    return n ? (double)a / n : 0.0;
}

static const char *verdict(int ok)
{
    return ok ? "PASS" : "FAIL";
}

static void report(const demo_palette *p, const tally *d, const tally *o)
{
    printf("\n== v2 bars (issue 15) on the committed model: default settings | cfg 1.0 ==\n");
    double shape_all = 0, shape_all1 = 0;
    int right = 0, right1 = 0, n = 0;
    for (int s = 0; s < N_SHAPES; s++) {
        double r = rate(d->shape_right[s], d->shape_n[s]);
        printf("shape %-8s %2d/%2d = %.2f | %.2f   bar %.2f %s\n", k_shapes[s], d->shape_right[s],
               d->shape_n[s], r, rate(o->shape_right[s], o->shape_n[s]), BAR_SHAPE,
               verdict(r >= BAR_SHAPE));
        right += d->shape_right[s];
        right1 += o->shape_right[s];
        n += d->shape_n[s];
    }
    shape_all = rate(right, n);
    shape_all1 = rate(right1, n);
    double pl = rate(d->place, d->place_n), pl1 = rate(o->place, o->place_n);
    printf("shapes overall %.2f | %.2f\n", shape_all, shape_all1);
    printf("colour/place/background %d/%d = %.2f | %.2f   bar %.2f %s\n", d->place, d->place_n, pl,
           pl1, BAR_PLACE, verdict(pl >= BAR_PLACE));
    for (int b = 0; b < p->n; b++) {
        if (!d->flat_n[b])
            continue;
        double share = rate(d->flat_ok[b], d->flat_n[b]);
        printf("background %-7s flat (< %.0f/255) %2d/%2d, mean %5.1f max %5.1f /255 | mean "
               "%5.1f   bar %.2f %s\n",
               p->names[b], DEMO_FLAT_MAX, d->flat_ok[b], d->flat_n[b],
               d->flat_sum[b] / d->flat_n[b], d->flat_max[b],
               o->flat_n[b] ? o->flat_sum[b] / o->flat_n[b] : 0.0, BAR_FLAT_SHARE,
               verdict(share >= BAR_FLAT_SHARE));
    }
    double tw = rate(d->two, d->two_n), tw1 = rate(o->two, o->two_n);
    printf("two X as two regions %d/%d = %.2f | %.2f   bar %.2f %s\n", d->two, d->two_n, tw, tw1,
           BAR_TWO, verdict(tw >= BAR_TWO));
    printf("cfg 1.0 drop: colour/place %.2f, shapes %.2f, two X %.2f   bar %.2f %s\n", pl - pl1,
           shape_all - shape_all1, tw - tw1, BAR_DROP, verdict(pl - pl1 >= BAR_DROP));
}

static int test_v2_bars_report(void)
{
    cJSON *j = demo_load_json("tools/demo-model/heldout2.json");
    ASSERT_TRUE(j != NULL);
    demo_palette p;
    if (demo_load_palette(j, &p) != 0) {
        cJSON_Delete(j);
        TSR_FAIL("palette");
    }
    char dir[PATH_MAX];
    if (demo_make_tmp(dir, sizeof dir) != 0) {
        cJSON_Delete(j);
        TSR_FAIL("tmp");
    }
    static tally d, o;
    int n_def = run_setting(j, &p, dir, -1.0, "default", &d);
    int n_one = n_def > 0 ? run_setting(j, &p, dir, 1.0, "cfg1", &o) : -1;
    const char *names[] = {"log.txt"};
    demo_cleanup(dir, names, 1);
    cJSON_Delete(j);
    ASSERT_TRUE(n_def >= 100 && n_one == n_def);
    report(&p, &d, &o);
    double pl = rate(d.place, d.place_n), pl1 = rate(o.place, o.place_n);
    int flat_ok = 0, flat_n = 0, flat_colours_under = 0;
    for (int b = 0; b < p.n; b++) {
        flat_ok += d.flat_ok[b];
        flat_n += d.flat_n[b];
        flat_colours_under += d.flat_n[b] && rate(d.flat_ok[b], d.flat_n[b]) < FLOOR_FLAT_SHARE;
    }
    printf("asserted floors (today's model): colour/place >= %.2f, cfg 1.0 drop >= %.2f, "
           "two X >= %.2f, flat backgrounds >= %.2f (%d/%d) and >= %.2f for each colour "
           "(%d under)",
           FLOOR_PLACE, FLOOR_PLACE_DROP, FLOOR_TWO, FLOOR_FLAT, flat_ok, flat_n,
           FLOOR_FLAT_SHARE, flat_colours_under);
    int shape_fails = 0;
    for (size_t k = 0; k < sizeof k_shape_floors / sizeof k_shape_floors[0]; k++) {
        int s = shape_index(k_shape_floors[k].shape);
        double r = s >= 0 ? rate(d.shape_right[s], d.shape_n[s]) : 0.0;
        printf(", %s >= %.2f", k_shape_floors[k].shape, k_shape_floors[k].min);
        shape_fails += r < k_shape_floors[k].min;
    }
    printf("\n");
    ASSERT_TRUE(pl >= FLOOR_PLACE);
    ASSERT_TRUE(pl - pl1 >= FLOOR_PLACE_DROP);
    ASSERT_TRUE(rate(d.two, d.two_n) >= FLOOR_TWO);
    ASSERT_TRUE(rate(flat_ok, flat_n) >= FLOOR_FLAT);
    ASSERT_EQ(flat_colours_under, 0);
    ASSERT_EQ(shape_fails, 0);
    return 0;
}

/* ---- img2img_keeps ---- */

/* img2img at a low strength must give back the picture it was given: two
 * large single-shape tiles of each shape from the clean sheet, at strength
 * IMG2IMG_STRENGTH and cfg 1.0 (guidance itself redraws), each keep their
 * shape and the mean absolute difference to the input stays under
 * IMG2IMG_MAX_DIFF.  This holds the encoder's posterior to a point: img2img
 * samples it (diffusers' retrieve_latents and Tessera alike), and the demo
 * VAE trained before session 18 had a posterior std of ~1.0 against latent
 * means of std ~2.5, which alone put these tiles ~10/255 off and turned
 * squares wavy (train.py pin_logvar(); measured in docs/demo-model-log.md,
 * session 18). */
#define IMG2IMG_TILES_PER_SHAPE 2
#define IMG2IMG_STRENGTH 0.1
#define IMG2IMG_MAX_DIFF 7.5 /* /255, the mean over tiles */
#define IMG2IMG_MIN_KEPT 10  /* of 12 */

static int test_img2img_keeps(void)
{
    cJSON *held = demo_load_json("tools/demo-model/heldout2.json");
    ASSERT_TRUE(held != NULL);
    demo_palette p;
    ASSERT_OK(demo_load_palette(held, &p));
    tsr_image sheet = {0};
    int cols = 0, t = 0;
    cJSON *facts = load_sheet("shape_sheet", NULL, &sheet, &cols, &t);
    ASSERT_TRUE(facts != NULL);
    const cJSON *tiles = cJSON_GetObjectItemCaseSensitive(facts, "tiles");
    char dir[PATH_MAX];
    ASSERT_OK(demo_make_tmp(dir, sizeof dir));
    static const char *const names[] = {"in.png", "out.png", "log.txt"};
    int used[N_SHAPES] = {0}, n = 0, done = 0, kept = 0, bad = 0;
    double diff_sum = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, tiles)
    {
        int k = n++;
        int s = shape_index(demo_jstr(it, "shape"));
        const char *size = demo_jstr(it, "size"), *region = NULL;
        const cJSON *regs = cJSON_GetObjectItemCaseSensitive(it, "regions");
        if (s < 0 || !size || strcmp(size, "large") != 0 || cJSON_GetArraySize(regs) != 1 ||
            used[s] >= IMG2IMG_TILES_PER_SHAPE)
            continue;
        region = cJSON_GetArrayItem(regs, 0)->valuestring;
        const char *colour = demo_jstr(it, "colour"), *bg = demo_jstr(it, "background");
        double centre[1][2];
        int ci = demo_colour_index(&p, colour), bi = demo_colour_index(&p, bg);
        tsr_image tile = {0}, got = {0};
        if (ci < 0 || bi < 0 || !region ||
            demo_region_centre(held, region, &centre[0][0], &centre[0][1]) != 0 ||
            sheet_tile(&sheet, k, cols, t, &tile) != 0) {
            fprintf(stderr, "shape_sheet.json: tile %d is malformed\n", k);
            bad = 1;
            break;
        }
        used[s]++;
        char in[PATH_MAX], out[PATH_MAX], log[PATH_MAX], prompt[256];
        snprintf(in, sizeof in, "%s/in.png", dir);
        snprintf(out, sizeof out, "%s/out.png", dir);
        snprintf(log, sizeof log, "%s/log.txt", dir);
        snprintf(prompt, sizeof prompt, "a large %s %s in the %s on %s %s background", colour,
                 k_shapes[s], region, strchr("aeiou", bg[0]) ? "an" : "a", bg);
        measure m;
        int ok = tsr_png_write(in, &tile, NULL, 0) == 0 &&
                 demo_img2img(prompt, 1000 + k, 1.0, in, IMG2IMG_STRENGTH, out, log) == 0 &&
                 tsr_png_read(out, 3, &got, NULL) == 0 && got.width == tile.width &&
                 got.height == tile.height &&
                 measure_image(&got, &p, ci, bi, (const double(*)[2])centre, 1, &m) == 0;
        if (ok) {
            double d = 0;
            for (size_t i = 0; i < (size_t)t * t * 3; i++)
                d += abs((int)got.data[i] - (int)tile.data[i]);
            d /= (double)t * t * 3;
            diff_sum += d;
            kept += strcmp(m.shape, k_shapes[s]) == 0;
            done++;
            printf("tile %3d %-8s -> %-8s mean abs diff %.2f/255  \"%s\"\n", k, k_shapes[s],
                   m.shape, d, prompt);
        }
        tsr_image_free(&tile);
        tsr_image_free(&got);
        if (!ok) {
            bad = 1;
            break;
        }
    }
    tsr_image_free(&sheet);
    cJSON_Delete(facts);
    cJSON_Delete(held);
    demo_cleanup(dir, names, sizeof names / sizeof names[0]);
    ASSERT_EQ(bad, 0);
    ASSERT_EQ(done, N_SHAPES * IMG2IMG_TILES_PER_SHAPE);
    double mean = diff_sum / done;
    printf("img2img at strength %.2f, cfg 1.0: shape kept %d/%d (floor %d), mean abs diff "
           "%.2f/255 (bar %.1f)\n",
           IMG2IMG_STRENGTH, kept, done, IMG2IMG_MIN_KEPT, mean, IMG2IMG_MAX_DIFF);
    ASSERT_TRUE(kept >= IMG2IMG_MIN_KEPT);
    ASSERT_TRUE(mean < IMG2IMG_MAX_DIFF);
    return 0;
}

/* ---- shape_scorer_human ---- */

/* Share of a labelled sheet's generated images on which the scorer must name
 * the shape a person saw.  tests/data/demo/human_sheet.png (session 21, six
 * shapes): 44 of 48 = 0.92; the rule before it, which read the solidity
 * before "top" and the pixels' box fill rather than the hull's, 38 = 0.79.
 * human_sheet_stars.png (session 29, 70 stars and crosses that the earlier
 * "four bays make a cross" rule had to tell apart): 61 = 0.87 with the
 * bottom-notch test; the rule before it 31 = 0.44. */
#define HUMAN_MIN 0.85

static int check_human(const char *name)
{
    cJSON *held = demo_load_json("tools/demo-model/heldout2.json");
    ASSERT_TRUE(held != NULL);
    demo_palette p;
    ASSERT_OK(demo_load_palette(held, &p));
    double centre[1][2];
    ASSERT_OK(demo_region_centre(held, "centre", &centre[0][0], &centre[0][1]));
    tsr_image sheet = {0};
    int cols = 0, t = 0;
    cJSON *facts = load_sheet(name, NULL, &sheet, &cols, &t);
    ASSERT_TRUE(facts != NULL);
    int agree[N_SHAPES] = {0}, total[N_SHAPES] = {0}, n = 0, bad = 0, differ = 0, right = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(facts, "tiles"))
    {
        int s = shape_index(demo_jstr(it, "human"));
        int colour = demo_colour_index(&p, demo_jstr(it, "colour"));
        int background = demo_colour_index(&p, demo_jstr(it, "background"));
        tsr_image tile = {0};
        measure m;
        if (s < 0 || colour < 0 || background < 0 || sheet_tile(&sheet, n, cols, t, &tile) != 0 ||
            measure_image(&tile, &p, colour, background, (const double(*)[2])centre, 1, &m) != 0) {
            fprintf(stderr, "%s.json: tile %d is malformed\n", name, n);
            tsr_image_free(&tile);
            bad = 1;
            break;
        }
        tsr_image_free(&tile);
        differ += !same_as_python(it, &m, n);
        total[s]++;
        int ok = strcmp(m.shape, k_shapes[s]) == 0;
        agree[s] += ok;
        right += ok;
        if (!ok)
            printf("tile %2d: seen %-8s named %-8s (solidity %.3f, hull fill %.3f, top %.3f, "
                   "bays %d, notch %.3f)\n",
                   n, k_shapes[s], m.shape, m.f.solidity, m.f.hull_fill, m.f.top, m.f.bays,
                   m.f.notch);
        n++;
    }
    tsr_image_free(&sheet);
    cJSON_Delete(facts);
    cJSON_Delete(held);
    ASSERT_EQ(bad, 0);
    for (int s = 0; s < N_SHAPES; s++)
        if (total[s])
            printf("%s: %-8s named as seen %d/%d\n", name, k_shapes[s], agree[s], total[s]);
    printf("%s: tiles %d, named as seen %d (%.2f, bar %.2f), C and score.py differ on %d\n", name,
           n, right, n ? (double)right / n : 0.0, HUMAN_MIN, differ);
    ASSERT_TRUE(n >= 40);
    ASSERT_EQ(differ, 0);
    ASSERT_TRUE((double)right >= HUMAN_MIN * n);
    return 0;
}

static int test_shape_scorer_human(void)
{
    ASSERT_OK(check_human("human_sheet"));
    ASSERT_OK(check_human("human_sheet_stars"));
    return 0;
}

static const tsr_test_entry k_tests[] = {
    {"shape_scorer_self", test_shape_scorer_self},
    {"shape_scorer_ports", test_shape_scorer_ports},
    {"shape_scorer_human", test_shape_scorer_human},
    {"v2_bars_report", test_v2_bars_report},
    {"img2img_keeps", test_img2img_keeps},
};

int main(int argc, char **argv)
{
    return tsr_test_main(argc, argv, k_tests, sizeof k_tests / sizeof k_tests[0]);
}
