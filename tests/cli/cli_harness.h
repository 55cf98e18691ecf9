/*
 * tests/cli/cli_harness.h - what the `tessera` program tests share: running
 * $TSR_BIN with a timeout and capturing its output, the per-run temporary
 * folder, test-data paths, and PNG/JSON comparisons.  The cases themselves
 * are in test_cli.c (exit codes, flags, seeds, CUDA kept out) and
 * cli_images.c (JPEG, masks, inpainting, convert round trips).
 */
#ifndef TSR_TESTS_CLI_HARNESS_H
#define TSR_TESTS_CLI_HARNESS_H

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/stat.h>

#define TIMEOUT 280.0
#define MAX_ARGS 64

typedef struct run_out {
    int status;   /* exit status, or -1 when it did not exit by itself */
    char *out;    /* stdout (owned) */
    char *err;    /* stderr (owned) */
    long rss_kib; /* peak resident memory */
} run_out;

extern char g_tmp[PATH_MAX]; /* this run's temporary folder */

void run_free(run_out *r);
char *slurp(const char *path);
/* Runs $TSR_BIN with the NULL-terminated arguments; 0 when it ran. */
int run(run_out *r, const char *first, ...);
/* 0 when the exit status is `code` and stderr holds every NULL-terminated
 * string given. */
int expect(const run_out *r, int code, ...);
const char *tmp_path(const char *name, char *buf);
const char *model_path(const char *name, char *buf);
const char *data_path(const char *rel, char *buf);
int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw);
bool exists(const char *path);
int png_diff(const char *a, const char *b);
char *png_parameters(const char *path);
cJSON *load_json(const char *path);

#define RUN(r, ...)                                                                           \
    do {                                                                                      \
        if (run((r), __VA_ARGS__, (const char *)NULL) != 0)                                   \
            TSR_FAIL("cannot run %s", getenv("TSR_BIN") ? getenv("TSR_BIN") : "$TSR_BIN");    \
    } while (0)

#define EXPECT(r, code, ...)                                                                  \
    do {                                                                                      \
        if (expect((r), (code), __VA_ARGS__, (const char *)NULL))                            \
            return 1;                                                                         \
    } while (0)

/* The engine logs "model NAME (FAMILY) on cpu ..." once it has loaded. */
#define ASSERT_NOT_LOADED(r)                                                                  \
    do {                                                                                      \
        if (strstr((r)->err, ") on "))                                                        \
            TSR_FAIL("the model was loaded before the error: %s", (r)->err);                  \
    } while (0)

/* cases in cli_images.c */
int test_jpeg_output(void);
int test_init_jpeg_resize(void);
int test_mask_blur(void);
int test_inpaint_full_res(void);
int test_convert_in_place(void);
int test_convert_ldm_folder(void);
int test_convert_images_demo(void);
int test_convert_images_sd1(void);
int test_convert_images_sd2v(void);
int test_convert_images_sdxl(void);
int test_convert_images_sd1_inpaint(void);

#endif
