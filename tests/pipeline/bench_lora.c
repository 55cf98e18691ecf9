/*
 * tests/pipeline/bench_lora.c - what per-row LoRAs cost a UNet call.
 *
 * Why this shape: issue 58 asks for one UNet call of 16 images, each with a
 * different LoRA, against the same call with none.  This builds that call
 * directly on the UNet (no sampler, no VAE, no text encoder: only the part
 * whose cost changes): 16 images with guidance = 32 rows, rows 2i and
 * 2i+1 carrying LoRA i.  The LoRAs are random, written as PEFT files and
 * read back through tsr_lora_load like any other.  They touch every
 * attention projection, feed-forward and proj_in/out linear (rank R) and
 * every resnet conv1/conv2 (LoCon, rank R/2), as a typical kohya LoCon
 * does.  The output gives the median wall and process CPU seconds of
 * --iters calls each way, and checks that the rows of one image with a
 * LoRA equal that image run alone with it, byte for byte.
 *
 * Usage: bench_lora MODEL_DIR [SIZE=128] [RANK=16] [ITERS=3] [IMAGES=16]
 * (not a ctest case: minutes on a full-size UNet; docs/perf.md has the runs)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/safetensors.h"
#include "model/lora.h"
#include "model/model.h"
#include "unet/unet.h"

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((float)(*s >> 40) / (float)(1 << 24) - 0.5f);
}

static bool wanted(const char *n)
{
    static const char *suf[] = {".to_q.weight", ".to_k.weight", ".to_v.weight", ".to_out.0.weight",
                                ".ff.net.0.proj.weight", ".ff.net.2.weight", ".proj_in.weight",
                                ".proj_out.weight", ".conv1.weight", ".conv2.weight"};
    const size_t len = strlen(n);
    for (size_t i = 0; i < sizeof suf / sizeof suf[0]; i++) {
        const size_t k = strlen(suf[i]);
        if (len > k && strcmp(n + len - k, suf[i]) == 0)
            return strncmp(n, "down_blocks", 11) == 0 || strncmp(n, "up_blocks", 9) == 0 ||
                   strncmp(n, "mid_block", 9) == 0;
    }
    return false;
}

/* A random PEFT file for weights w at rank r (convs r/2). */
static int write_lora(const char *path, const tsr_weights *w, int rank, uint64_t seed)
{
    const size_t n = tsr_weights_count(w);
    tsr_st_write_entry *e = calloc(2 * n, sizeof *e);
    char **names = calloc(2 * n, sizeof *names);
    float **bufs = calloc(2 * n, sizeof *bufs);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name;
        const tsr_tensor *t;
        tsr_weights_at(w, i, &name, &t);
        if (!wanted(name))
            continue;
        const bool conv = t->ndim == 4 && t->ne[1] > 1;
        const int r = conv ? rank / 2 : rank;
        const int64_t out = t->ne[0], in = t->ndim == 4 ? t->ne[3] : t->ne[1];
        const int64_t kh = conv ? t->ne[1] : 1, kw = conv ? t->ne[2] : 1;
        const size_t nl = strlen(name) - strlen(".weight");
        for (int part = 0; part < 2; part++) {
            names[k] = malloc(nl + 32);
            snprintf(names[k], nl + 32, "unet.%.*s.lora_%c.weight", (int)nl, name, part ? 'B' : 'A');
            const size_t cnt = part ? (size_t)(out * r) : (size_t)(r * in * kh * kw);
            bufs[k] = malloc(cnt * sizeof(float));
            for (size_t j = 0; j < cnt; j++)
                bufs[k][j] = frand(&seed) * (part ? 0.02f : 0.2f);
            e[k].name = names[k];
            e[k].dtype = TSR_ST_F32;
            e[k].data = bufs[k];
            if (part) {
                e[k].ndim = 2;
                e[k].shape[0] = out;
                e[k].shape[1] = r;
            } else if (conv) {
                e[k].ndim = 4;
                e[k].shape[0] = r;
                e[k].shape[1] = in;
                e[k].shape[2] = kh;
                e[k].shape[3] = kw;
            } else {
                e[k].ndim = 2;
                e[k].shape[0] = r;
                e[k].shape[1] = in;
            }
            k++;
        }
    }
    const int rc = tsr_st_write(path, e, k, NULL);
    for (size_t i = 0; i < k; i++) {
        free(names[i]);
        free(bufs[i]);
    }
    free(names);
    free(bufs);
    free(e);
    return rc;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_lora MODEL_DIR [SIZE=128] [RANK=16] [ITERS=3] [IMAGES=16]\n");
        return 2;
    }
    const int size = argc > 2 ? atoi(argv[2]) : 128, rank = argc > 3 ? atoi(argv[3]) : 16;
    const int iters = argc > 4 ? atoi(argv[4]) : 3, images = argc > 5 ? atoi(argv[5]) : 16;
    if (size < 64 || rank < 2 || iters < 1 || images < 1 || images > 32)
        return 2;
    tsr_model *m;
    tsr_backend *be;
    tsr_weights *w;
    tsr_unet *u;
    tsr_lora_names *names;
    if (tsr_model_open(argv[1], &m) < 0 || tsr_backend_open("cpu", 0, &be) < 0 ||
        tsr_weights_load(m, TSR_COMP_UNET, be, &w) < 0 ||
        tsr_unet_create(tsr_model_unet_desc(m), w, be, &u) < 0) {
        fprintf(stderr, "bench_lora: %s\n", tsr_last_error());
        return 1;
    }
    const size_t nw = tsr_weights_count(w);
    const char **nm = malloc(nw * sizeof *nm);
    for (size_t i = 0; i < nw; i++) {
        const tsr_tensor *t;
        tsr_weights_at(w, i, &nm[i], &t);
    }
    if (tsr_lora_names_build(nm, nw, tsr_model_unet_desc(m), &names) < 0)
        return 1;
    tsr_lora_model lm;
    memset(&lm, 0, sizeof lm);
    lm.backend = be;
    lm.weights[TSR_COMP_UNET] = w;
    lm.names[TSR_COMP_UNET] = names;
    char dir[] = "/tmp/bench_lora_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    tsr_lora **loras = calloc((size_t)images, sizeof *loras);
    tsr_lora_set *sets = calloc((size_t)images, sizeof *sets);
    size_t lora_bytes = 0;
    for (int i = 0; i < images; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/l%d.safetensors", dir, i);
        if (write_lora(path, w, rank, 1000 + (uint64_t)i) < 0 || tsr_lora_load(path, &lm, &loras[i]) < 0) {
            fprintf(stderr, "bench_lora: %s\n", tsr_last_error());
            return 1;
        }
        unlink(path);
        lora_bytes += tsr_lora_bytes(loras[i]);
        sets[i].n = 1;
        sets[i].use[0] = (tsr_lora_use){loras[i], 0.8f, 0.8f};
    }
    rmdir(dir);
    const tsr_unet_desc *d = tsr_model_unet_desc(m);
    const int rows = 2 * images, L = 77, D = d->cross_attention_dim, lh = size / 8;
    const size_t nl = (size_t)lh * lh * d->in_channels;
    float *lat = malloc(rows * nl * sizeof(float)), *ctx = malloc((size_t)rows * L * D * sizeof(float));
    float *ts = malloc(rows * sizeof(float)), *out = malloc(rows * nl * sizeof(float));
    float *solo = malloc(2 * nl * sizeof(float));
    uint64_t s = 7;
    for (size_t i = 0; i < rows * nl; i++)
        lat[i] = frand(&s) * 2;
    for (size_t i = 0; i < (size_t)rows * L * D; i++)
        ctx[i] = frand(&s);
    for (int i = 0; i < rows; i++)
        ts[i] = 900.0f - 10.0f * (float)(i / 2);
    const tsr_lora_set **row_sets = calloc((size_t)rows, sizeof *row_sets);
    for (int i = 0; i < rows; i++)
        row_sets[i] = &sets[i / 2];
    tsr_unet_inputs in = {.batch = rows, .height = lh, .width = lh, .channels = d->in_channels,
                          .context_len = L, .latents = lat, .timesteps = ts, .context = ctx};
    printf("UNet call: %d images (%d rows), %dx%d px, LoRA rank %d (convs %d), %.1f MiB of "
           "LoRA matrices, %s\n",
           images, rows, size, size, rank, rank / 2, lora_bytes / 1048576.0, be->name);
    if (tsr_unet_forward(u, &in, out) < 0) /* plans the workspace */
        return 1;
    double wall[2][16], cpu[2][16];
    for (int it = 0; it < iters && it < 16; it++)
        for (int mode = 0; mode < 2; mode++) {
            in.loras = mode ? (const struct tsr_lora_set *const *)row_sets : NULL;
            const double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
            if (tsr_unet_forward(u, &in, out) < 0) {
                fprintf(stderr, "bench_lora: %s\n", tsr_last_error());
                return 1;
            }
            wall[mode][it] = now(CLOCK_MONOTONIC) - w0;
            cpu[mode][it] = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
        }
    const int n = iters < 16 ? iters : 16;
    for (int mode = 0; mode < 2; mode++) {
        qsort(wall[mode], (size_t)n, sizeof(double), cmp_d);
        qsort(cpu[mode], (size_t)n, sizeof(double), cmp_d);
    }
    printf("no LoRA:       wall %.3f s  cpu %.3f s (median of %d)\n", wall[0][n / 2], cpu[0][n / 2], n);
    printf("16 LoRAs:      wall %.3f s  cpu %.3f s\n", wall[1][n / 2], cpu[1][n / 2]);
    printf("ratio:         wall %.3fx  cpu %.3fx\n", wall[1][n / 2] / wall[0][n / 2],
           cpu[1][n / 2] / cpu[0][n / 2]);
    /* image 0's rows batched with LoRAs vs image 0 alone with its LoRA */
    in.loras = (const struct tsr_lora_set *const *)row_sets;
    if (tsr_unet_forward(u, &in, out) < 0)
        return 1;
    tsr_unet_inputs one = in;
    one.batch = 2;
    if (tsr_unet_forward(u, &one, solo) < 0)
        return 1;
    const bool same = memcmp(out, solo, 2 * nl * sizeof(float)) == 0;
    printf("image 0 batched vs alone: %s\n", same ? "byte-identical" : "DIFFERENT");
    for (int i = 0; i < images; i++)
        tsr_lora_free(loras[i]);
    tsr_unet_free(u);
    tsr_lora_names_free(names);
    tsr_weights_free(w);
    tsr_backend_destroy(be);
    tsr_model_close(m);
    return same ? 0 : 1;
}
