/*
 * tests/pipeline/pipeline_test.c - see pipeline_test.h.
 */
#include "pipeline_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

int pt_open_model(const char *rel, const char *lora_dir, int threads, tsr_engine **e)
{
    char path[512];
    tsr_engine_options o;
    tsr_engine_options_init(&o);
    o.model = tsr_test_path(rel, path, sizeof path);
    o.device = "cpu";
    o.lora_dir = lora_dir;
    if (threads > 0)
        o.threads = threads;
    ASSERT_OK(tsr_engine_open(&o, e));
    return 0;
}

int pt_run_all(tsr_batch *b)
{
    for (int guard = 0; tsr_batch_active(b) > 0; guard++) {
        if (guard >= 10000)
            TSR_FAIL("the batch did not finish in 10000 steps");
        ASSERT_OK(tsr_batch_step(b, NULL));
    }
    return 0;
}

int pt_run(tsr_engine *e, const tsr_image_params *p, int n, tsr_result *out,
           tsr_batch_stats *stats)
{
    int ids[16];
    ASSERT_TRUE(n >= 1 && n <= 16);
    tsr_batch *b;
    ASSERT_OK(tsr_batch_create(e, NULL, &b));
    for (int i = 0; i < n; i++)
        ASSERT_OK(tsr_batch_submit(b, &p[i], &ids[i]));
    if (pt_run_all(b))
        return 1;
    for (int i = 0; i < n; i++) {
        ASSERT_OK(tsr_batch_take(b, ids[i], &out[i]));
        ASSERT_EQ(out[i].status, TSR_OK);
    }
    if (stats)
        tsr_batch_stats_get(b, stats);
    tsr_batch_free(b);
    return 0;
}

cJSON *pt_load_json(const char *rel)
{
    char path[512];
    size_t size = 0;
    char *text = tsr_test_read_file(tsr_test_path(rel, path, sizeof path), &size);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", path);
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(text, size);
    free(text);
    if (!j)
        fprintf(stderr, "%s is not JSON\n", path);
    return j;
}

int pt_read_png(const char *rel, int channels, uint8_t **px, int *w, int *h)
{
    char path[512];
    size_t size = 0;
    void *data = tsr_test_read_file(tsr_test_path(rel, path, sizeof path), &size);
    if (!data)
        TSR_FAIL("cannot read %s", path);
    int rc = tsr_image_decode(data, size, channels, 0, px, w, h);
    free(data);
    ASSERT_OK(rc);
    return 0;
}

int pt_max_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    int worst = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        worst = d > worst ? d : worst;
    }
    return worst;
}

int pt_cli_open(pt_cli *c, const char *name, const char *model_rel)
{
    memset(c, 0, sizeof *c);
    c->bin = getenv("TSR_BIN");
    if (!c->bin || access(c->bin, X_OK) != 0) {
        printf("no TSR_BIN: skipped\n");
        return TSR_TEST_SKIP;
    }
    snprintf(c->dir, sizeof c->dir, "/tmp/tsr_%s_XXXXXX", name);
    if (!mkdtemp(c->dir))
        TSR_FAIL("mkdtemp %s failed", c->dir);
    snprintf(c->png, sizeof c->png, "%s/out.png", c->dir);
    snprintf(c->log, sizeof c->log, "%s/log.txt", c->dir);
    tsr_test_path(model_rel, c->model, sizeof c->model);
    return 0;
}

void pt_cli_close(const pt_cli *c)
{
    unlink(c->png);
    unlink(c->log);
    rmdir(c->dir);
}
