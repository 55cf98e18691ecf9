/*
 * tests/image/test_image.c - JPEG encode/decode, the A1111 "parameters"
 * string, and SHA-256.
 *
 * Why: the A1111 expectations are written out by hand from A1111's
 * create_infotext (field order, quote(), omitted fields, strip()) so a
 * formatting drift shows as a string diff; SHA-256 is checked against the
 * FIPS 180-4 / NIST example vectors, including multi-block and incremental
 * inputs; JPEG is checked by decoding what we encode (lossy, so within a
 * tolerance) and by feeding the decoder broken files.
 */
#include <stdlib.h>
#include <unistd.h>

#include "image/image.h"
#include "test.h"

/* ---- JPEG ---- */

/* A smooth image (JPEG's favourite) with some texture. */
static void fill_smooth(tsr_image *img)
{
    for (uint32_t y = 0; y < img->height; y++)
        for (uint32_t x = 0; x < img->width; x++) {
            uint8_t *p = img->data + ((size_t)y * img->width + x) * img->channels;
            uint8_t v[4] = {(uint8_t)(x * 255 / img->width), (uint8_t)(y * 255 / img->height),
                            (uint8_t)((x + y) * 2), (uint8_t)(x ^ y)};
            memcpy(p, v, img->channels);
        }
}

static int jpeg_round_trip(uint32_t ch, uint32_t want_ch)
{
    tsr_image img, back;
    uint8_t *buf = NULL;
    size_t len = 0;
    ASSERT_OK(tsr_image_alloc(&img, 64, 48, ch));
    fill_smooth(&img);
    ASSERT_OK(tsr_jpeg_encode(&img, 95, &buf, &len));
    ASSERT_TRUE(len > 100 && buf[0] == 0xFF && buf[1] == 0xD8);
    ASSERT_TRUE(buf[len - 2] == 0xFF && buf[len - 1] == 0xD9);
    ASSERT_OK(tsr_jpeg_decode(buf, len, "rt.jpg", 0, NULL, &back));
    ASSERT_EQ(back.width, 64);
    ASSERT_EQ(back.height, 48);
    ASSERT_EQ(back.channels, want_ch);
    double sum = 0;
    int worst = 0;
    uint32_t cmp = want_ch < ch ? want_ch : ch;
    for (size_t i = 0; i < (size_t)64 * 48; i++)
        for (uint32_t c = 0; c < cmp; c++) {
            int d = abs((int)img.data[i * ch + c] - (int)back.data[i * want_ch + c]);
            sum += d;
            if (d > worst)
                worst = d;
        }
    double mean = sum / (64.0 * 48 * cmp);
    if (!(mean < 2.0 && worst <= 24))
        TSR_FAIL("jpeg q95 differs: mean %.3f, max %d", mean, worst);
    tsr_image_free(&back);

    /* lower quality makes a smaller file */
    uint8_t *small = NULL;
    size_t slen = 0;
    ASSERT_OK(tsr_jpeg_encode(&img, 20, &small, &slen));
    ASSERT_TRUE(slen < len);
    free(small);
    free(buf);
    tsr_image_free(&img);
    return 0;
}

static int test_jpeg_rgb(void) { return jpeg_round_trip(3, 3); }
static int test_jpeg_gray(void) { return jpeg_round_trip(1, 1); }
static int test_jpeg_rgba(void) { return jpeg_round_trip(4, 3); }

static int test_jpeg_errors(void)
{
    tsr_image img, back;
    uint8_t *buf = NULL;
    size_t len = 0;
    ASSERT_OK(tsr_image_alloc(&img, 40, 40, 3));
    fill_smooth(&img);
    ASSERT_ERR(tsr_jpeg_encode(&img, 0, &buf, &len), TSR_ERR_INVALID, "quality");
    ASSERT_ERR(tsr_jpeg_encode(&img, 101, &buf, &len), TSR_ERR_INVALID, "quality");
    ASSERT_OK(tsr_jpeg_encode(&img, 80, &buf, &len));

    ASSERT_ERR(tsr_jpeg_decode("GIF89a", 6, "a.jpg", 0, NULL, &back), TSR_ERR_FORMAT,
               "a.jpg: not a JPEG file");
    ASSERT_ERR(tsr_jpeg_decode(buf, 1, "b.jpg", 0, NULL, &back), TSR_ERR_FORMAT, "not a JPEG");
    /* truncated half way through the entropy-coded data */
    ASSERT_ERR(tsr_jpeg_decode(buf, len / 2, "half.jpg", 0, NULL, &back), TSR_ERR_FORMAT,
               "half.jpg: truncated");
    ASSERT_TRUE(back.data == NULL);
    /* every prefix fails cleanly */
    for (size_t n = 0; n < len - 2; n += 7) {
        int rc = tsr_jpeg_decode(buf, n, "cut.jpg", 0, NULL, &back);
        if (rc != TSR_ERR_FORMAT)
            TSR_FAIL("prefix %zu: rc %d %s", n, rc, tsr_last_error());
    }

    /* SOF0 size patched to 40000x40000: refused before decoding */
    uint8_t *copy = malloc(len);
    ASSERT_TRUE(copy != NULL);
    memcpy(copy, buf, len);
    size_t sof = 0;
    for (size_t i = 2; i + 9 < len; i++)
        if (copy[i] == 0xFF && copy[i + 1] == 0xC0) {
            sof = i;
            break;
        }
    ASSERT_TRUE(sof > 0);
    copy[sof + 5] = 40000 >> 8;
    copy[sof + 6] = 40000 & 255;
    copy[sof + 7] = 40000 >> 8;
    copy[sof + 8] = 40000 & 255;
    ASSERT_ERR(tsr_jpeg_decode(copy, len, "big.jpg", 0, NULL, &back), TSR_ERR_RANGE,
               "big.jpg: 40000x40000 exceeds the 16384 limit");
    tsr_image_limits lim = {32, 0};
    ASSERT_ERR(tsr_jpeg_decode(buf, len, "l.jpg", 0, &lim, &back), TSR_ERR_RANGE,
               "40x40 exceeds the 32 limit");

    /* garbage in the entropy-coded segment: an error, not a warning */
    memcpy(copy, buf, len);
    for (size_t i = len / 2; i < len / 2 + 32 && i < len - 2; i++)
        copy[i] = 0xFF;
    int rc = tsr_jpeg_decode(copy, len, "bad.jpg", 0, NULL, &back);
    ASSERT_EQ(rc, TSR_ERR_FORMAT);

    /* decode with conversion */
    ASSERT_OK(tsr_jpeg_decode(buf, len, "ok.jpg", 1, NULL, &back));
    ASSERT_EQ(back.channels, 1);
    tsr_image_free(&back);
    ASSERT_OK(tsr_jpeg_decode(buf, len, "ok.jpg", 4, NULL, &back));
    ASSERT_EQ(back.channels, 4);
    ASSERT_EQ(back.data[3], 255);
    tsr_image_free(&back);
    free(copy);
    free(buf);
    tsr_image_free(&img);
    return 0;
}

/* ---- A1111 parameters ---- */

static int check_params(const tsr_a1111_info *info, const char *want)
{
    char *got = NULL;
    ASSERT_OK(tsr_a1111_parameters(info, &got));
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "got:  [%s]\nwant: [%s]\n", got, want);
        free(got);
        return 1;
    }
    free(got);
    return 0;
}

static int test_a1111_full(void)
{
    tsr_a1111_info in;
    tsr_a1111_info_init(&in);
    in.prompt = "a photo of a cat, (masterpiece:1.2)";
    in.negative_prompt = "blurry, lowres";
    in.steps = 20;
    in.sampler = "DPM++ 2M";
    in.schedule_type = "Karras";
    in.cfg_scale = 7.0;
    in.seed = 1741860054;
    in.width = 512;
    in.height = 512;
    in.model_hash = "6ce0161689";
    in.model = "v1-5-pruned-emaonly";
    in.version = "v1.10.1";
    return check_params(&in,
                        "a photo of a cat, (masterpiece:1.2)\n"
                        "Negative prompt: blurry, lowres\n"
                        "Steps: 20, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7, "
                        "Seed: 1741860054, Size: 512x512, Model hash: 6ce0161689, "
                        "Model: v1-5-pruned-emaonly, Version: v1.10.1");
}

static int test_a1111_no_negative(void)
{
    tsr_a1111_info in;
    tsr_a1111_info_init(&in);
    in.prompt = "mushroom in outer space";
    in.steps = 30;
    in.sampler = "Euler a";
    in.cfg_scale = 7.5;
    in.seed = 42;
    in.width = 768;
    in.height = 512;
    const char *want = "mushroom in outer space\n"
                       "Steps: 30, Sampler: Euler a, CFG scale: 7.5, Seed: 42, Size: 768x512";
    if (check_params(&in, want))
        return 1;
    in.negative_prompt = ""; /* empty is omitted too (Python truthiness) */
    if (check_params(&in, want))
        return 1;
    in.negative_prompt = " "; /* but a space is not empty */
    return check_params(&in, "mushroom in outer space\nNegative prompt:  \n"
                             "Steps: 30, Sampler: Euler a, CFG scale: 7.5, Seed: 42, "
                             "Size: 768x512");
}

static int test_a1111_img2img(void)
{
    tsr_a1111_info in;
    tsr_a1111_info_init(&in);
    in.prompt = "  wooden house\n";
    in.negative_prompt = "ugly,\nbad hands";
    in.steps = 28;
    in.sampler = "DPM++ SDE";
    in.schedule_type = "Exponential";
    in.cfg_scale = 12.25;
    in.seed = 4294967295LL;
    in.width = 1024;
    in.height = 1536;
    in.model_hash = "31e35c80fc";
    in.model = "sd_xl_base_1.0";
    in.vae = "sdxl_vae";
    in.denoising_strength = 0.75;
    in.clip_skip = 2;
    in.rng = "CPU";
    return check_params(&in, "wooden house\n\nNegative prompt: ugly,\nbad hands\n"
                             "Steps: 28, Sampler: DPM++ SDE, Schedule type: Exponential, "
                             "CFG scale: 12.25, Seed: 4294967295, Size: 1024x1536, "
                             "Model hash: 31e35c80fc, Model: sd_xl_base_1.0, VAE: sdxl_vae, "
                             "Denoising strength: 0.75, Clip skip: 2, RNG: CPU");
}

static int test_a1111_quoting(void)
{
    tsr_a1111_info in;
    tsr_a1111_info_init(&in);
    in.prompt = "";
    in.steps = 1;
    in.sampler = "LCM";
    in.cfg_scale = 1.0;
    in.seed = 0;
    in.width = 8;
    in.height = 8;
    /* json.dumps('my "model", v2: final\t\x01\u00e9', ensure_ascii=False) */
    in.model = "my \"model\", v2: final\t\x01\xc3\xa9";
    in.denoising_strength = 1.0;
    in.clip_skip = 1; /* omitted */
    in.rng = "GPU";   /* A1111's default: omitted */
    if (check_params(&in, "Steps: 1, Sampler: LCM, CFG scale: 1, Seed: 0, Size: 8x8, "
                          "Model: \"my \\\"model\\\", v2: final\\t\\u0001\xc3\xa9\", "
                          "Denoising strength: 1"))
        return 1;
    /* a value equal to its key is written bare; numbers in shortest form */
    tsr_a1111_info_init(&in);
    in.prompt = "p";
    in.steps = 50;
    in.cfg_scale = 3.0000001;
    in.seed = UINT64_MAX; /* seeds are unsigned 64-bit, printed unsigned */
    in.width = 64;
    in.height = 32;
    in.model = "Model";
    in.denoising_strength = 0.1;
    if (check_params(&in, "p\nSteps: 50, CFG scale: 3.0000001, Seed: 18446744073709551615, "
                          "Size: 64x32, Model, Denoising strength: 0.1"))
        return 1;
    /* invalid UTF-8 is refused, not written */
    char *out = NULL;
    in.prompt = "bad \xff";
    ASSERT_EQ(tsr_a1111_parameters(&in, &out), TSR_ERR_INVALID);
    ASSERT_TRUE(out == NULL);
    return 0;
}

static int test_a1111_png(void)
{
    /* the parameters string survives a PNG round trip under "parameters" */
    tsr_a1111_info in;
    tsr_a1111_info_init(&in);
    in.prompt = "\xe7\x8c\xab, a cat";
    in.negative_prompt = "dog";
    in.steps = 20;
    in.sampler = "Euler";
    in.cfg_scale = 7;
    in.seed = 1;
    in.width = 4;
    in.height = 4;
    char *params = NULL;
    ASSERT_OK(tsr_a1111_parameters(&in, &params));
    tsr_image img, back;
    tsr_png_meta meta;
    ASSERT_OK(tsr_image_alloc(&img, 4, 4, 3));
    memset(img.data, 128, tsr_image_bytes(&img));
    tsr_png_text t = {"parameters", params};
    uint8_t *buf = NULL;
    size_t len = 0;
    ASSERT_OK(tsr_png_write_memory(&img, &t, 1, &buf, &len));
    ASSERT_OK(tsr_png_read_memory(buf, len, "p.png", 0, &back, &meta));
    ASSERT_STR_EQ(tsr_png_meta_find(&meta, "parameters"), params);
    tsr_png_meta_free(&meta);
    tsr_image_free(&back);
    tsr_image_free(&img);
    free(buf);
    free(params);
    return 0;
}

/* ---- SHA-256 ---- */

static int check_sha(const void *data, size_t len, const char *want)
{
    uint8_t d[32];
    char hex[65];
    tsr_sha256(data, len, d);
    tsr_sha256_hex(d, hex);
    ASSERT_STR_EQ(hex, want);
    /* incremental with awkward piece sizes gives the same digest */
    tsr_sha256_ctx ctx;
    tsr_sha256_init(&ctx);
    const uint8_t *p = data;
    size_t off = 0, piece = 1;
    while (off < len) {
        size_t k = len - off < piece ? len - off : piece;
        tsr_sha256_update(&ctx, p + off, k);
        off += k;
        piece = piece * 3 + 1;
        if (piece > 200)
            piece = 7;
    }
    tsr_sha256_final(&ctx, d);
    tsr_sha256_hex(d, hex);
    ASSERT_STR_EQ(hex, want);
    return 0;
}

static int test_sha256_vectors(void)
{
    if (check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") ||
        check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"))
        return 1;
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    if (check_sha(m448, strlen(m448),
                  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"))
        return 1;
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                       "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    if (check_sha(m896, strlen(m896),
                  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"))
        return 1;
    char *million = malloc(1000000);
    ASSERT_TRUE(million != NULL);
    memset(million, 'a', 1000000);
    int rc = check_sha(million, 1000000,
                       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
    return rc;
}

static int test_model_hash(void)
{
    char path[] = "/tmp/tsr_hash_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    /* 3 MiB + 3 bytes: several 1 MiB reads and a tail */
    size_t n = (3u << 20) + 3;
    uint8_t *data = malloc(n);
    ASSERT_TRUE(data != NULL);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 31 + (i >> 12));
    ASSERT_TRUE(write(fd, data, n) == (ssize_t)n);
    close(fd);
    uint8_t d[32], f[32];
    tsr_sha256(data, n, d);
    ASSERT_OK(tsr_sha256_file(path, f));
    ASSERT_TRUE(memcmp(d, f, 32) == 0);
    char hex[65], short_hash[11];
    tsr_sha256_hex(d, hex);
    ASSERT_OK(tsr_a1111_model_hash(path, short_hash));
    ASSERT_EQ(strlen(short_hash), 10);
    ASSERT_TRUE(strncmp(hex, short_hash, 10) == 0);
    unlink(path);
    free(data);

    /* "abc" in a file: the AutoV2 hash is the digest's first 10 hex digits */
    memcpy(path + strlen(path) - 6, "XXXXXX", 6);
    fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0 && write(fd, "abc", 3) == 3);
    close(fd);
    ASSERT_OK(tsr_a1111_model_hash(path, short_hash));
    ASSERT_STR_EQ(short_hash, "ba7816bf8f");
    unlink(path);
    ASSERT_ERR(tsr_a1111_model_hash("/nonexistent/model.safetensors", short_hash), TSR_ERR_IO,
               "/nonexistent/model.safetensors");
    return 0;
}

static const tsr_test_entry tests[] = {
    {"jpeg_rgb", test_jpeg_rgb},
    {"jpeg_gray", test_jpeg_gray},
    {"jpeg_rgba", test_jpeg_rgba},
    {"jpeg_errors", test_jpeg_errors},
    {"a1111_full", test_a1111_full},
    {"a1111_no_negative", test_a1111_no_negative},
    {"a1111_img2img", test_a1111_img2img},
    {"a1111_quoting", test_a1111_quoting},
    {"a1111_png", test_a1111_png},
    {"sha256_vectors", test_sha256_vectors},
    {"model_hash", test_model_hash},
};

TSR_TEST_TABLE_MAIN(tests)
