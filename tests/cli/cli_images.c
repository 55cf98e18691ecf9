/*
 * tests/cli/cli_images.c - the `tessera` program's image contract: JPEG
 * output and input, resize modes, mask blur, full-resolution inpainting,
 * and convert round trips that must give the same pixels.
 */
#include "test.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_harness.h"
#include "image/image.h"
#include "tessera.h"
#include "text/tokenizer.h"
/* ---- JPEG ---- */

int test_jpeg_output(void)
{
    run_out r;
    char demo[PATH_MAX], out[PATH_MAX], p[PATH_MAX], png[PATH_MAX];
    model_path("demo", demo);
    RUN(&r, "generate", "--model", demo, "--prompt", "a red circle, \xe7\x8c\xab", "--steps", "2",
        "--seed", "41", "--batch-size", "2", "--output", tmp_path("x.jpg", out));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    for (int i = 0; i < 2; i++) {
        char name[32], want[64];
        snprintf(name, sizeof name, "x-%d.jpg", i);
        tsr_image img = {0};
        char *params = NULL;
        ASSERT_OK(tsr_jpeg_read(tmp_path(name, p), 3, &img, &params));
        ASSERT_EQ(img.width, 128);
        ASSERT_EQ(img.height, 128);
        ASSERT_TRUE(params != NULL);
        printf("%s: %s\n", name, params);
        snprintf(want, sizeof want, "Seed: %d,", 41 + i);
        bool ok = strncmp(params, "a red circle, \xe7\x8c\xab\nSteps: 2,", 25) == 0 &&
                  strstr(params, want) && strstr(params, "Model: demo");
        free(params);
        tsr_image_free(&img);
        if (!ok)
            TSR_FAIL("%s: parameters", name);
    }
    /* .jpeg, and the pixels are the PNG's up to JPEG's loss */
    RUN(&r, "generate", "--model", demo, "--prompt", "a red circle", "--steps", "2", "--seed",
        "41", "--output", tmp_path("y.JPEG", out));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "a red circle", "--steps", "2", "--seed",
        "41", "--output", tmp_path("y.png", png));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    tsr_image a = {0}, b = {0};
    ASSERT_OK(tsr_image_read(out, 3, &a));
    ASSERT_OK(tsr_image_read(png, 3, &b));
    double sum = 0;
    for (size_t i = 0; i < tsr_image_bytes(&a); i++)
        sum += abs((int)a.data[i] - (int)b.data[i]);
    double mean = sum / (double)tsr_image_bytes(&a);
    printf("JPEG vs PNG: mean abs diff %.2f\n", mean);
    tsr_image_free(&a);
    tsr_image_free(&b);
    ASSERT_TRUE(mean < 6.0);
    return 0;
}

/* An init image as JPEG, of another size and aspect: fitted with the
 * resize mode exactly as image/resize.c fits it. */
int test_init_jpeg_resize(void)
{
    run_out r;
    char sd1[PATH_MAX], inp[PATH_MAX], init_src[PATH_MAX], mask_src[PATH_MAX];
    char jpg[PATH_MAX], mjpg[PATH_MAX], ref[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
    model_path("sd1", sd1);
    model_path("sd1_inpaint", inp);
    data_path("pipeline/init.png", init_src);
    data_path("pipeline/mask.png", mask_src);
    tsr_image src = {0}, wide = {0}, dec = {0}, fit = {0};
    ASSERT_OK(tsr_png_read(init_src, 3, &src, NULL));
    ASSERT_OK(tsr_image_resize(&src, 100, 60, &wide));
    ASSERT_OK(tsr_jpeg_write(tmp_path("init.jpg", jpg), &wide, 95, NULL));
    ASSERT_OK(tsr_jpeg_read(jpg, 3, &dec, NULL));
    static const char *const modes[] = {"just-resize", "crop-and-resize", "resize-and-fill"};
    for (int m = 0; m < 3; m++) {
        tsr_resize_mode mode;
        ASSERT_OK(tsr_resize_mode_parse(modes[m], &mode));
        ASSERT_OK(tsr_image_resize_a1111(&dec, mode, 64, 64, &fit));
        ASSERT_OK(tsr_png_write(tmp_path("fit.png", ref), &fit, NULL, 0));
        tsr_image_free(&fit);
        RUN(&r, "generate", "--model", sd1, "--prompt", "a cat", "--steps", "3", "--width", "64",
            "--height", "64", "--seed", "7", "--init-image", jpg, "--strength", "0.6",
            "--resize-mode", modes[m], "--output", tmp_path("a.png", a));
        EXPECT(&r, 0, "100x60 -> 64x64");
        run_free(&r);
        RUN(&r, "generate", "--model", sd1, "--prompt", "a cat", "--steps", "3", "--width", "64",
            "--height", "64", "--seed", "7", "--init-image", ref, "--strength", "0.6", "--output",
            tmp_path("b.png", b));
        ASSERT_EQ(r.status, 0);
        run_free(&r);
        if (png_diff(a, b) != 0)
            TSR_FAIL("%s: the CLI's fitted init image differs from image/resize.c's", modes[m]);
    }
    /* a JPEG mask of yet another size, on the inpainting model */
    tsr_image mask = {0}, tall = {0};
    ASSERT_OK(tsr_png_read(mask_src, 1, &mask, NULL));
    ASSERT_OK(tsr_image_resize(&mask, 48, 80, &tall));
    ASSERT_OK(tsr_jpeg_write(tmp_path("mask.jpg", mjpg), &tall, 95, NULL));
    RUN(&r, "generate", "--model", inp, "--prompt", "a cat", "--steps", "2", "--width", "64",
        "--height", "64", "--seed", "7", "--init-image", jpg, "--mask", mjpg, "--resize-mode",
        "resize-and-fill", "--output", tmp_path("c.png", a));
    EXPECT(&r, 0, "--mask: 48x80 -> 64x64");
    run_free(&r);
    tsr_image_free(&mask);
    tsr_image_free(&tall);
    tsr_image_free(&src);
    tsr_image_free(&wide);
    tsr_image_free(&dec);
    return 0;
}

/* Inpainting with an ordinary 4-channel model: --mask-blur 0 is the engine's
 * (diffusers') image; the default (4) pastes it over the init image through
 * the mask blurred with Pillow's GaussianBlur(4), doubled - pixel for pixel
 * what image/blur.c computes. */
int test_mask_blur(void)
{
    run_out r;
    char sd1[PATH_MAX], init[PATH_MAX], maskp[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
    model_path("sd1", sd1);
    data_path("pipeline/init.png", init);
    data_path("pipeline/mask.png", maskp);
    RUN(&r, "generate", "--model", sd1, "--prompt", "a cat", "--steps", "2", "--width", "64",
        "--height", "64", "--seed", "3", "--init-image", init, "--mask", maskp, "--mask-blur",
        "0", "--output", tmp_path("raw.png", a));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    RUN(&r, "generate", "--model", sd1, "--prompt", "a cat", "--steps", "2", "--width", "64",
        "--height", "64", "--seed", "3", "--init-image", init, "--mask", maskp, "--output",
        tmp_path("pasted.png", b));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    tsr_image raw = {0}, pasted = {0}, orig = {0}, mask = {0}, blurred = {0}, want = {0};
    ASSERT_OK(tsr_png_read(a, 3, &raw, NULL));
    ASSERT_OK(tsr_png_read(b, 3, &pasted, NULL));
    ASSERT_OK(tsr_png_read(init, 3, &orig, NULL));
    ASSERT_OK(tsr_png_read(maskp, 1, &mask, NULL));
    ASSERT_OK(tsr_image_gaussian_blur_pil(&mask, 4, &blurred));
    for (size_t i = 0; i < 64 * 64; i++)
        blurred.data[i] = blurred.data[i] >= 128 ? 255 : (uint8_t)(2 * blurred.data[i]);
    ASSERT_OK(tsr_image_mask_overlay(&raw, &orig, &blurred, &want));
    ASSERT_TRUE(memcmp(want.data, pasted.data, 64 * 64 * 3) == 0);
    ASSERT_TRUE(memcmp(raw.data, pasted.data, 64 * 64 * 3) != 0);
    /* far from the mask the init image comes back exactly */
    ASSERT_TRUE(memcmp(pasted.data, orig.data, 3) == 0);
    tsr_image_free(&raw);
    tsr_image_free(&pasted);
    tsr_image_free(&orig);
    tsr_image_free(&mask);
    tsr_image_free(&blurred);
    tsr_image_free(&want);
    RUN(&r, "generate", "--model", sd1, "--prompt", "x", "--mask-blur", "65", "--init-image",
        init, "--mask", maskp);
    EXPECT(&r, 2, "--mask-blur");
    run_free(&r);
    return 0;
}

/* A1111's "inpaint only masked" on the demo model (128x128): a 256x192
 * init image with a small mask comes back at 256x192; outside the blurred
 * mask (restricted to the region) the init image exactly, inside the mask
 * the inpainted pixels.  Flag checks before the model loads; a blank mask
 * refused naming --mask. */
int test_inpaint_full_res(void)
{
    run_out r;
    char demo[PATH_MAX], initp[PATH_MAX], maskp[PATH_MAX], blank[PATH_MAX], out[PATH_MAX];
    model_path("demo", demo);
    tsr_image init = {0}, mask = {0}, got = {0}, blurred = {0};
    ASSERT_OK(tsr_image_alloc(&init, 256, 192, 3));
    for (uint32_t y = 0; y < 192; y++)
        for (uint32_t x = 0; x < 256; x++) {
            uint8_t *p = &init.data[(y * 256 + x) * 3];
            p[0] = (uint8_t)x;
            p[1] = (uint8_t)(y + 40);
            p[2] = (uint8_t)((x * 7 + y * 3) & 255);
        }
    ASSERT_OK(tsr_png_write(tmp_path("init.png", initp), &init, NULL, 0));
    ASSERT_OK(tsr_image_alloc(&mask, 256, 192, 1));
    memset(mask.data, 0, 256 * 192);
    ASSERT_OK(tsr_png_write(tmp_path("blank.png", blank), &mask, NULL, 0));
    for (int y = 70; y < 100; y++)
        for (int x = 150; x < 190; x++)
            mask.data[y * 256 + x] = 255;
    ASSERT_OK(tsr_png_write(tmp_path("mask.png", maskp), &mask, NULL, 0));

    RUN(&r, "generate", "--model", demo, "--prompt", "a cat", "--steps", "2", "--seed", "5",
        "--init-image", initp, "--mask", maskp, "--inpaint-full-res", "--output",
        tmp_path("out.png", out));
    /* box 150,70 40x30, padding 32 -> 118,38 104x94, square -> 118,33 104x104 */
    EXPECT(&r, 0, "--inpaint-full-res: region 118,33 104x104 of 256x192");
    run_free(&r);
    ASSERT_OK(tsr_png_read(out, 3, &got, NULL));
    ASSERT_EQ(got.width, 256);
    ASSERT_EQ(got.height, 192);
    char *params = png_parameters(out);
    ASSERT_TRUE(params && strstr(params, "Inpaint area: Only masked, Masked area padding: 32"));
    free(params);
    ASSERT_OK(tsr_image_gaussian_blur_pil(&mask, 4, &blurred));
    size_t same_outside = 0, outside = 0, inside = 0, differ_inside = 0;
    for (int y = 0; y < 192; y++)
        for (int x = 0; x < 256; x++) {
            const size_t i = (size_t)y * 256 + x;
            const bool in_region = x >= 118 && x < 222 && y >= 33 && y < 137;
            const bool differs = memcmp(&got.data[3 * i], &init.data[3 * i], 3) != 0;
            if (!in_region || blurred.data[i] == 0) {
                outside++;
                same_outside += !differs;
            } else if (mask.data[i]) {
                inside++;
                differ_inside += differs;
            }
        }
    if (same_outside != outside)
        TSR_FAIL("%zu of %zu pixels outside the blurred mask differ from the init image",
                 outside - same_outside, outside);
    if (differ_inside * 10 < inside * 9)
        TSR_FAIL("only %zu of %zu pixels inside the mask were repainted", differ_inside, inside);
    tsr_image_free(&got);
    tsr_image_free(&blurred);

    /* a mask of another size is fitted to the init image first */
    tsr_image small = {0};
    ASSERT_OK(tsr_image_resize(&mask, 128, 96, &small));
    ASSERT_OK(tsr_png_write(tmp_path("small.png", maskp), &small, NULL, 0));
    tsr_image_free(&small);
    RUN(&r, "generate", "--model", demo, "--prompt", "a cat", "--steps", "2", "--seed", "5",
        "--init-image", initp, "--mask", maskp, "--inpaint-full-res",
        "--inpaint-full-res-padding", "0", "--width", "64", "--height", "128", "--output",
        tmp_path("out2.png", out));
    /* box 150,70 40x30, aspect 1:2 -> 150,45 40x80 */
    EXPECT(&r, 0, "--mask: 128x96 -> 256x192", "region 150,45 40x80 of 256x192 (padding 0)");
    run_free(&r);
    ASSERT_OK(tsr_png_read(out, 3, &got, NULL));
    ASSERT_EQ(got.width, 256);
    ASSERT_EQ(got.height, 192);
    tsr_image_free(&got);

    /* checks before the model loads */
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", initp,
        "--inpaint-full-res");
    EXPECT(&r, 2, "--inpaint-full-res", "--mask");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", initp, "--mask",
        maskp, "--inpaint-full-res", "--inpaint-full-res-padding", "257");
    EXPECT(&r, 2, "--inpaint-full-res-padding");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", initp, "--mask",
        maskp, "--inpaint-full-res", "--inpaint-full-res-padding", "-1");
    EXPECT(&r, 2, "--inpaint-full-res-padding");
    run_free(&r);
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--init-image", initp, "--mask",
        maskp, "--inpaint-full-res-padding", "8");
    EXPECT(&r, 2, "--inpaint-full-res-padding needs --inpaint-full-res");
    ASSERT_NOT_LOADED(&r);
    run_free(&r);
    /* a mask with nothing to repaint */
    RUN(&r, "generate", "--model", demo, "--prompt", "x", "--steps", "2", "--init-image", initp,
        "--mask", blank, "--inpaint-full-res", "--output", tmp_path("none.png", out));
    EXPECT(&r, 2, "--mask", "no white pixel");
    ASSERT_TRUE(!exists(out));
    run_free(&r);
    tsr_image_free(&init);
    tsr_image_free(&mask);
    return 0;
}

/* ---- convert ---- */

int test_convert_in_place(void)
{
    run_out r;
    char demo[PATH_MAX], m[PATH_MAX], single[PATH_MAX], link[PATH_MAX], cmd[3 * PATH_MAX];
    model_path("demo", demo);
    tmp_path("m", m);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s' && ls -lR '%s' > '%s/before.txt'", demo, m, m,
             g_tmp);
    ASSERT_EQ(system(cmd), 0);
    RUN(&r, "convert", m, m);
    EXPECT(&r, 2, "IN and OUT are the same path");
    run_free(&r);
    char inner[PATH_MAX];
    snprintf(inner, sizeof inner, "%s/unet/x.safetensors", m);
    RUN(&r, "convert", m, inner);
    EXPECT(&r, 2, "OUT is inside IN");
    run_free(&r);
    ASSERT_EQ(symlink(m, tmp_path("link", link)), 0);
    RUN(&r, "convert", link, m);
    EXPECT(&r, 2, "same path");
    run_free(&r);
    RUN(&r, "convert", m, tmp_path("m.safetensors", single));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    RUN(&r, "convert", single, g_tmp);
    EXPECT(&r, 2, "IN is inside OUT");
    run_free(&r);
    RUN(&r, "convert", single, single);
    EXPECT(&r, 2, "same path");
    run_free(&r);
    /* the model folder was not touched */
    snprintf(cmd, sizeof cmd, "ls -lR '%s' > '%s/after.txt' && cmp '%s/before.txt' '%s/after.txt'",
             m, g_tmp, g_tmp, g_tmp);
    ASSERT_EQ(system(cmd), 0);
    return 0;
}

/* A real LDM file (no tessera metadata) becomes the folder diffusers'
 * from_single_file makes for its family. */
int test_convert_ldm_folder(void)
{
    static const struct {
        const char *file, *scheduler, *prediction, *pad[2];
        int force_zeros; /* -1: absent */
    } cases[] = {
        {"sd1.safetensors", "PNDMScheduler", "epsilon", {"<|endoftext|>", NULL}, -1},
        {"sd2v.safetensors", "DDIMScheduler", "v_prediction", {"!", NULL}, -1},
        {"sdxl.safetensors", "EulerDiscreteScheduler", "epsilon", {"<|endoftext|>", "!"}, 1},
    };
    tsr_tokenizer *def = NULL;
    ASSERT_OK(tsr_tokenizer_load_default(&def));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_out r;
        char rel[128], src[PATH_MAX], out[PATH_MAX], p[PATH_MAX * 2];
        snprintf(rel, sizeof rel, "models/%s", cases[i].file);
        data_path(rel, src);
        snprintf(rel, sizeof rel, "folder%zu", i);
        RUN(&r, "convert", src, tmp_path(rel, out));
        ASSERT_EQ(r.status, 0);
        run_free(&r);
        snprintf(p, sizeof p, "%s/scheduler/scheduler_config.json", out);
        cJSON *s = load_json(p);
        ASSERT_TRUE(s != NULL);
        ASSERT_STR_EQ(cJSON_GetObjectItem(s, "_class_name")->valuestring, cases[i].scheduler);
        ASSERT_STR_EQ(cJSON_GetObjectItem(s, "prediction_type")->valuestring, cases[i].prediction);
        ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(s, "clip_sample")));
        ASSERT_EQ(cJSON_GetObjectItem(s, "steps_offset")->valueint, 1);
        cJSON_Delete(s);
        snprintf(p, sizeof p, "%s/model_index.json", out);
        cJSON *idx = load_json(p);
        ASSERT_TRUE(idx != NULL);
        ASSERT_STR_EQ(cJSON_GetArrayItem(cJSON_GetObjectItem(idx, "scheduler"), 1)->valuestring,
                      cases[i].scheduler);
        const cJSON *fz = cJSON_GetObjectItem(idx, "force_zeros_for_empty_prompt");
        ASSERT_EQ(fz ? cJSON_IsTrue(fz) : -1, cases[i].force_zeros);
        static const char *const tok[2] = {"tokenizer", "tokenizer_2"};
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/%s", out, tok[k]);
            if (!cases[i].pad[k]) {
                ASSERT_TRUE(!exists(p));
                continue;
            }
            ASSERT_TRUE(cJSON_IsArray(cJSON_GetObjectItem(idx, tok[k])));
            tsr_tokenizer *t = NULL;
            ASSERT_OK(tsr_tokenizer_load(p, &t));
            ASSERT_EQ(tsr_tokenizer_vocab_size(t), 49408);
            ASSERT_STR_EQ(tsr_tokenizer_token(t, tsr_tokenizer_pad(t)), cases[i].pad[k]);
            /* the same ids as the embedded tokenizer */
            static const char prompt[] = "a (photo:1.2) of an astronaut riding a horse, 4k";
            int32_t x[TSR_CLIP_MAX_LENGTH], y[TSR_CLIP_MAX_LENGTH];
            int nx = tsr_tokenizer_encode_window(t, prompt, sizeof prompt - 1, x);
            int ny = tsr_tokenizer_encode_window(def, prompt, sizeof prompt - 1, y);
            ASSERT_EQ(nx, ny);
            ASSERT_EQ(memcmp(x, y, (size_t)nx * sizeof x[0]), 0);
            tsr_tokenizer_free(t);
        }
        cJSON_Delete(idx);
    }
    tsr_tokenizer_free(def);
    return 0;
}

/* folder -> single file -> folder: the same images as the original for
 * every sampler (and the model's default), 4 steps (PNDM's minimum). */
static int convert_images(const char *model, int size, bool inpaint)
{
    run_out r;
    char src[PATH_MAX], file[PATH_MAX], back[PATH_MAX], init[PATH_MAX], mask[PATH_MAX];
    model_path(model, src);
    data_path("pipeline/init.png", init);
    data_path("pipeline/mask.png", mask);
    RUN(&r, "convert", src, tmp_path("m.safetensors", file));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    RUN(&r, "convert", file, tmp_path("back", back));
    ASSERT_EQ(r.status, 0);
    run_free(&r);
    static const char *const samplers[] = {"",     "euler",  "euler_a", "heun",
                                           "dpmpp_2m", "dpmpp_2m_sde", "dpmpp_sde", "ddim",
                                           "pndm", "lms",    "unipc",   "lcm"};
    char side[16];
    snprintf(side, sizeof side, "%d", size);
    const char *paths[3] = {src, file, back};
    for (size_t s = 0; s < sizeof samplers / sizeof samplers[0]; s++) {
        char outs[3][PATH_MAX];
        for (int k = 0; k < 3; k++) {
            char name[64];
            snprintf(name, sizeof name, "o%d.png", k);
            tmp_path(name, outs[k]);
            const char *sampler_flag = samplers[s][0] ? "--sampler" : "--steps";
            const char *sampler_value = samplers[s][0] ? samplers[s] : "4";
            if (inpaint)
                RUN(&r, "generate", "--model", paths[k], "--prompt", "a red cat", "--steps", "4",
                    "--width", side, "--height", side, "--seed", "11", sampler_flag,
                    sampler_value, "--init-image", init, "--mask", mask, "--strength", "1",
                    "--output", outs[k]);
            else
                RUN(&r, "generate", "--model", paths[k], "--prompt", "a red cat",
                    "--negative-prompt", "blue", "--steps", "4", "--width", side, "--height",
                    side, "--seed", "11", sampler_flag, sampler_value, "--output", outs[k]);
            if (r.status != 0)
                TSR_FAIL("%s with sampler '%s' failed", paths[k], samplers[s]);
            run_free(&r);
        }
        for (int k = 1; k < 3; k++) {
            int d = png_diff(outs[0], outs[k]);
            if (d != 0)
                TSR_FAIL("sampler '%s': %s differs from the original folder by %d", samplers[s],
                         k == 1 ? "the single file" : "the folder converted back", d);
        }
    }
    /* the folder converted back holds what the original does */
    static const char *const same[] = {"scheduler/scheduler_config.json", "tokenizer/vocab.json",
                                       "tokenizer/merges.txt"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char a[PATH_MAX * 2], b[PATH_MAX * 2];
        snprintf(a, sizeof a, "%s/%s", src, same[i]);
        snprintf(b, sizeof b, "%s/%s", back, same[i]);
        cJSON *ja = strstr(same[i], ".json") ? load_json(a) : NULL;
        cJSON *jb = ja ? load_json(b) : NULL;
        bool eq;
        if (ja) {
            eq = cJSON_Compare(ja, jb, true);
        } else {
            char *ta = slurp(a), *tb = slurp(b);
            eq = strcmp(ta, tb) == 0;
            free(ta);
            free(tb);
        }
        cJSON_Delete(ja);
        cJSON_Delete(jb);
        if (!eq)
            TSR_FAIL("%s differs after folder -> file -> folder", same[i]);
    }
    return 0;
}

int test_convert_images_demo(void) { return convert_images("demo", 64, false); }
int test_convert_images_sd1(void) { return convert_images("sd1", 64, false); }
int test_convert_images_sd2v(void) { return convert_images("sd2v", 64, false); }
int test_convert_images_sdxl(void) { return convert_images("sdxl", 64, false); }
int test_convert_images_sd1_inpaint(void) { return convert_images("sd1_inpaint", 64, true); }
