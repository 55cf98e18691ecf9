/*
 * tests/pipeline/pipeline_test.h - what the engine-level pipeline tests
 * (test_hires.c, test_tiling.c, test_lora.c) share: opening a test model,
 * running images through one batch to the end, reading goldens (JSON
 * manifests, PNGs) from tests/data, comparing pixels, and the program,
 * folder and files of the cases that run `tessera generate`.
 *
 * Why one file: each test had its own copy of these, and the copies had
 * begun to differ in small ways (one batch loop gave up after 1,000 steps,
 * another after 10,000; one PNG reader took a channel count, the other did
 * not).  The helpers fail the way the ASSERT_ macros do: 1 (or NULL) after
 * printing where and why, so a case writes `if (pt_...(...)) return 1;`.
 */
#ifndef TSR_TESTS_PIPELINE_TEST_H
#define TSR_TESTS_PIPELINE_TEST_H

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

/* The model at tests/data/<rel> on the CPU; lora_dir may be NULL, threads 0
 * for the engine's default. */
int pt_open_model(const char *rel, const char *lora_dir, int threads, tsr_engine **e);

/* Step b until no image is active (at most 10,000 steps). */
int pt_run_all(tsr_batch *b);

/* Run p[0..n) (n <= 16) in one new batch; out[i] gets image i's result,
 * which must have succeeded; stats (may be NULL) the batch's counters. */
int pt_run(tsr_engine *e, const tsr_image_params *p, int n, tsr_result *out,
           tsr_batch_stats *stats);

/* tests/data/<rel> parsed, or NULL (printed). */
cJSON *pt_load_json(const char *rel);

/* tests/data/<rel> decoded to `channels` channels (malloc'd *px). */
int pt_read_png(const char *rel, int channels, uint8_t **px, int *w, int *h);

/* The largest difference between two byte arrays of n values. */
int pt_max_diff(const uint8_t *a, const uint8_t *b, size_t n);

/* A case that runs `tessera generate`: the program ($TSR_BIN), a fresh
 * folder under /tmp, the paths of out.png and log.txt in it, and the test
 * model's folder. */
typedef struct pt_cli {
    const char *bin;
    char dir[64], png[600], log[600], model[512];
} pt_cli;

/* 0 when ready; TSR_TEST_SKIP (printed) when $TSR_BIN cannot be run; 1 on
 * failure.  model_rel is under tests/data. */
int pt_cli_open(pt_cli *c, const char *name, const char *model_rel);

/* Removes out.png, log.txt and the folder. */
void pt_cli_close(const pt_cli *c);

#endif
