/*
 * tests/pipeline/test_generate.c - end-to-end tests of `tessera generate`
 * against images made by diffusers' own pipelines.
 *
 * Why a subprocess driver: the claim under test is about the command a user
 * runs - its flags, its output files, its exit status and its messages - so
 * the driver runs the real binary ($TSR_BIN) with the exact arguments that
 * tests/data/pipeline/manifest.json records for each case (written by
 * tools/reference/make_pipeline_goldens.py together with the reference
 * PNGs), then reads what it wrote with the project's own PNG reader.  Data
 * drive everything: a new case is a manifest entry, and
 * tests/pipeline/CMakeLists.txt turns every entry into its own ctest entry.
 *
 *   test_generate CASE      a golden case ("sd1_euler"): exit 0, every
 *                           output within `tolerance` (max abs per 8-bit
 *                           value) of its reference, and an A1111
 *                           "parameters" text chunk with the case's settings
 *   test_generate CASE      an error case ("bad_sampler"): a non-zero exit
 *                           (not a crash), a message naming the problem,
 *                           and no file written
 *   test_generate self_*    checks of this driver itself, run against a fake
 *                           generator (this same binary, see fake_generate)
 *                           so that they pass or fail without the pipeline
 *
 * Paths in the manifest are relative to the repository root; "tests/data/"
 * is mapped to $TSR_TEST_DATA, "{tmp}" to the case's own temporary folder
 * (removed afterwards unless TSR_E2E_KEEP is set).  Each run has its own
 * timeout (TSR_E2E_TIMEOUT seconds, default 280, under ctest's 300).
 */
#include "test.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "image/image.h"
#include "scheduler/scheduler.h"
#include "tessera.h"

#define MAX_ARGS 64

/* ---- small helpers ---- */

static cJSON *g_manifest; /* owned, freed at exit */
static char g_self[PATH_MAX];

static cJSON *load_manifest(void)
{
    char path[PATH_MAX];
    tsr_test_path("pipeline/manifest.json", path, sizeof path);
    size_t n = 0;
    char *text = tsr_test_read_file(path, &n);
    if (!text) {
        fprintf(stderr, "%s: cannot read\n", path);
        return NULL;
    }
    cJSON *m = cJSON_ParseWithLength(text, n);
    free(text);
    if (!m || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(m, "cases")) ||
        !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(m, "error_cases"))) {
        fprintf(stderr, "%s: not a manifest (cases, error_cases)\n", path);
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

static const cJSON *find_case(const char *list, const char *name)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(g_manifest, list))
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return c;
    }
    return NULL;
}

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double jnum(const cJSON *o, const char *key, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* Map a manifest path or argument to a real one (malloc'd). */
static char *resolve_arg(const char *arg, const char *tmp)
{
    const char *data = getenv("TSR_TEST_DATA");
    char buf[PATH_MAX * 2];
    size_t o = 0;
    const char *p = arg;
    if (data && strncmp(p, "tests/data/", 11) == 0) {
        o = (size_t)snprintf(buf, sizeof buf, "%s/", data);
        p += 11;
    }
    for (; *p && o + 1 < sizeof buf; p++) {
        if (strncmp(p, "{tmp}", 5) == 0 && tmp) {
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s", tmp);
            if (o >= sizeof buf)
                return NULL;
            p += 4;
        } else {
            buf[o++] = *p;
        }
    }
    buf[o < sizeof buf ? o : sizeof buf - 1] = '\0';
    return strdup(buf);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir)
{
    if (dir && dir[0] && !getenv("TSR_E2E_KEEP"))
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Names in `dir` (the output folder) - a failed run must leave none. */
static int count_files(const char *dir, char *first, size_t first_size)
{
    int n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (n++ == 0 && first)
            snprintf(first, first_size, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

static int write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* ---- running the binary ---- */

typedef struct run_result {
    int exited;      /* exited normally (not killed by a signal or timeout) */
    int status;      /* exit status, or the signal */
    char *err;       /* stderr (owned, NUL-terminated) */
} run_result;

/* argv[0] is the binary. */
static int run_binary(char **argv, const char *tmp, run_result *r)
{
    memset(r, 0, sizeof *r);
    char out_path[PATH_MAX], err_path[PATH_MAX];
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", tmp);
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", tmp);
    const char *to = getenv("TSR_E2E_TIMEOUT");
    double timeout = to ? atof(to) : 280.0;
    tsr_test_child c;
    if (tsr_test_spawn(argv, out_path, err_path, timeout, &c) != 0)
        return -1;
    r->exited = c.exited;
    r->status = c.status;
    if (c.timed_out) {
        r->err = strdup("(timeout)");
        return 0;
    }
    size_t n = 0;
    r->err = tsr_test_read_file(err_path, &n);
    if (r->err) {
        char *z = realloc(r->err, n + 1);
        if (z) {
            z[n] = '\0';
            r->err = z;
        } else {
            free(r->err);
            r->err = NULL;
        }
    }
    if (!r->err)
        r->err = strdup("");
    printf("ran in %.1f s: %s %d\n", c.seconds, r->exited ? "exit" : "signal", r->status);
    return 0;
}

/* argv for `BIN generate <args> <extra_args> [--output OUT]` (strings owned
 * by the caller's array; free_argv releases them). */
static int build_argv(const char *bin, const cJSON *c, const char *tmp, const char *output,
                      char **argv)
{
    int n = 0;
    argv[n++] = strdup(bin);
    argv[n++] = strdup("generate");
    const char *lists[2] = {"args", "extra_args"};
    for (int l = 0; l < 2; l++) {
        const cJSON *a;
        cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(c, lists[l]))
        {
            if (!cJSON_IsString(a) || n >= MAX_ARGS - 4)
                return -1;
            argv[n++] = resolve_arg(a->valuestring, tmp);
        }
    }
    if (output) {
        argv[n++] = strdup("--output");
        argv[n++] = strdup(output);
    }
    argv[n] = NULL;
    for (int i = 0; i < n; i++)
        if (!argv[i])
            return -1;
    return n;
}

static void free_argv(char **argv)
{
    for (int i = 0; argv[i]; i++)
        free(argv[i]);
    argv[0] = NULL;
}

static void print_command(char **argv)
{
    printf("$");
    for (int i = 0; argv[i]; i++)
        printf(strpbrk(argv[i], " ,'") ? " '%s'" : " %s", argv[i]);
    printf("\n");
}

/* ---- comparing images ---- */

/* Max abs difference and the count of values above `tol`; 1 on a size
 * mismatch or read error (message printed). */
static int compare_png(const char *got_path, const char *ref_path, int tol, int *max_diff,
                       size_t *over, tsr_png_meta *meta)
{
    tsr_image got = {0}, ref = {0};
    int fail = 1;
    *max_diff = -1;
    *over = 0;
    if (tsr_png_read(got_path, 3, &got, meta) != 0) {
        fprintf(stderr, "%s: %s\n", got_path, tsr_last_error());
        goto done;
    }
    if (tsr_png_read(ref_path, 3, &ref, NULL) != 0) {
        fprintf(stderr, "%s: %s\n", ref_path, tsr_last_error());
        goto done;
    }
    if (got.width != ref.width || got.height != ref.height) {
        fprintf(stderr, "%s is %ux%u, the reference %ux%u\n", got_path, got.width, got.height,
                ref.width, ref.height);
        goto done;
    }
    int mx = 0;
    size_t nbytes = tsr_image_bytes(&ref), worst = 0;
    for (size_t i = 0; i < nbytes; i++) {
        int d = abs((int)got.data[i] - (int)ref.data[i]);
        if (d > mx) {
            mx = d;
            worst = i;
        }
        if (d > tol)
            (*over)++;
    }
    *max_diff = mx;
    printf("%s: max abs diff %d (at x=%zu y=%zu c=%zu: got %d, want %d), %zu of %zu values "
           "over %d\n",
           ref_path, mx, (worst / 3) % ref.width, worst / 3 / ref.width, worst % 3,
           got.data[worst], ref.data[worst], *over, nbytes, tol);
    fail = 0;
done:
    tsr_image_free(&got);
    tsr_image_free(&ref);
    return fail;
}

/* Value of "Key: value" in the A1111 settings line, copied to buf. */
static const char *infotext_field(const char *line, const char *key, char *buf, size_t size)
{
    size_t kl = strlen(key);
    const char *p = line;
    while (p && *p) {
        if (strncmp(p, key, kl) == 0 && p[kl] == ':' && p[kl + 1] == ' ') {
            const char *v = p + kl + 2, *end = strstr(v, ", ");
            size_t n = end ? (size_t)(end - v) : strlen(v);
            if (n >= size)
                n = size - 1;
            memcpy(buf, v, n);
            buf[n] = '\0';
            return buf;
        }
        p = strstr(p, ", ");
        if (p)
            p += 2;
    }
    return NULL;
}

/* The A1111 "parameters" chunk for image `index` of case `c`. */
static int check_parameters(const cJSON *c, const tsr_png_meta *meta, int index)
{
    const char *text = tsr_png_meta_find(meta, "parameters");
    if (!text)
        TSR_FAIL("no \"parameters\" text chunk in the output PNG");
    const char *prompt = jstr(c, "prompt"), *neg = jstr(c, "negative_prompt");
    size_t pl = strlen(prompt);
    if (strncmp(text, prompt, pl) != 0 || text[pl] != '\n')
        TSR_FAIL("parameters do not start with the prompt line: \"%s\"", text);
    const char *rest = text + pl + 1;
    if (neg && neg[0]) {
        const char *tag = "Negative prompt: ";
        size_t tl = strlen(tag), nl = strlen(neg);
        if (strncmp(rest, tag, tl) != 0 || strncmp(rest + tl, neg, nl) != 0 ||
            rest[tl + nl] != '\n')
            TSR_FAIL("parameters lack the line \"Negative prompt: %s\": \"%s\"", neg, text);
        rest += tl + nl + 1;
    } else if (strncmp(rest, "Negative prompt:", 16) == 0) {
        TSR_FAIL("a negative prompt line without a negative prompt: \"%s\"", text);
    }
    if (strncmp(rest, "Steps: ", 7) != 0 || strchr(rest, '\n'))
        TSR_FAIL("the settings line must be the last and start with \"Steps: \": \"%s\"", rest);
    printf("parameters: %s\n", rest);
    char v[256], want[256];
#define FIELD_EQ(key, expect)                                                             \
    do {                                                                                  \
        if (!infotext_field(rest, key, v, sizeof v) || strcmp(v, (expect)) != 0)          \
            TSR_FAIL("parameters: %s should be \"%s\" in \"%s\"", key, (expect), rest);   \
    } while (0)
    snprintf(want, sizeof want, "%d", (int)jnum(c, "steps", -1));
    FIELD_EQ("Steps", want);
    const char *sampler = jstr(c, "sampler"), *schedule = jstr(c, "schedule");
    if (sampler) {
        tsr_sampler_kind kind;
        tsr_schedule sch = TSR_SCHEDULE_DEFAULT;
        ASSERT_OK(tsr_sampler_parse(sampler, &kind, &sch));
        if (schedule)
            ASSERT_OK(tsr_schedule_parse(schedule, &sch));
        FIELD_EQ("Sampler", tsr_sampler_display_name(kind));
        if (sch != TSR_SCHEDULE_DEFAULT)
            FIELD_EQ("Schedule type", tsr_schedule_display_name(sch));
    } else if (!infotext_field(rest, "Sampler", v, sizeof v) || !v[0]) {
        TSR_FAIL("parameters: no Sampler in \"%s\"", rest);
    }
    if (!infotext_field(rest, "CFG scale", v, sizeof v) ||
        fabs(atof(v) - jnum(c, "cfg_scale", -1)) > 1e-9)
        TSR_FAIL("parameters: CFG scale should be %g in \"%s\"", jnum(c, "cfg_scale", -1), rest);
    const cJSON *seeds = cJSON_GetObjectItemCaseSensitive(c, "seeds");
    const cJSON *seed = cJSON_GetArrayItem(seeds, index);
    snprintf(want, sizeof want, "%.0f", cJSON_IsNumber(seed) ? seed->valuedouble : -1.0);
    FIELD_EQ("Seed", want);
    snprintf(want, sizeof want, "%dx%d", (int)jnum(c, "width", -1), (int)jnum(c, "height", -1));
    FIELD_EQ("Size", want);
    FIELD_EQ("Model", jstr(c, "model_name"));
    FIELD_EQ("RNG", "CPU");
    double strength = jnum(c, "strength", -1);
    if (strength >= 0) {
        if (!infotext_field(rest, "Denoising strength", v, sizeof v) ||
            fabs(atof(v) - strength) > 1e-9)
            TSR_FAIL("parameters: Denoising strength should be %g in \"%s\"", strength, rest);
    } else if (infotext_field(rest, "Denoising strength", v, sizeof v)) {
        TSR_FAIL("parameters: Denoising strength without an init image: \"%s\"", rest);
    }
#undef FIELD_EQ
    return 0;
}

/* ---- one golden case ---- */

static int output_name(const char *out_png, int batch, int i, char *buf, size_t size)
{
    if (batch == 1)
        return snprintf(buf, size, "%s", out_png) >= (int)size;
    size_t n = strlen(out_png) - 4; /* ".png" */
    return snprintf(buf, size, "%.*s-%d.png", (int)n, out_png, i) >= (int)size;
}

/* One run of the program for a case: its temporary folder, the output
 * folder in it (which must then hold exactly the case's files), the name
 * given to --output, the command and how it ended. */
typedef struct case_run {
    char tmp[32], outdir[PATH_MAX], out_png[PATH_MAX];
    char *argv[MAX_ARGS];
    run_result r;
} case_run;

static int prepare_error_case(const cJSON *c, const char *tmp);

/* Make the folders (and an error case's files), build the command and run
 * it; 0 when it ran, whatever its exit status.  case_end in every case. */
static int case_start(case_run *x, const cJSON *c, const char *bin, bool error_case)
{
    memset(x, 0, sizeof *x);
    snprintf(x->tmp, sizeof x->tmp, "/tmp/tsr_e2e_XXXXXX");
    if (!mkdtemp(x->tmp)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        x->tmp[0] = '\0';
        return 1;
    }
    snprintf(x->outdir, sizeof x->outdir, "%s/out", x->tmp);
    snprintf(x->out_png, sizeof x->out_png, "%s/out.png", x->outdir);
    if (mkdir(x->outdir, 0755) != 0 || (error_case && prepare_error_case(c, x->tmp) != 0) ||
        build_argv(bin, c, x->tmp, x->out_png, x->argv) < 0) {
        fprintf(stderr, "cannot prepare the case\n");
        return 1;
    }
    print_command(x->argv);
    return run_binary(x->argv, x->tmp, &x->r) != 0;
}

/* Free and remove what case_start made; returns fail. */
static int case_end(case_run *x, int fail)
{
    free_argv(x->argv);
    free(x->r.err);
    if (x->tmp[0])
        remove_tree(x->tmp);
    return fail;
}

static int run_golden(const cJSON *c, const char *bin)
{
    case_run x;
    if (case_start(&x, c, bin, false) != 0)
        return case_end(&x, 1);
    const run_result r = x.r;
    if (!r.exited || r.status != 0) {
        fprintf(stderr, "tessera generate failed (%s %d):\n%s\n", r.exited ? "exit" : "signal",
                r.status, r.err);
        return case_end(&x, 1);
    }
    const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(c, "outputs");
    int batch = cJSON_GetArraySize(outputs);
    int tol = (int)jnum(g_manifest, "tolerance", 2);
    int bad = 0;
    for (int i = 0; i < batch; i++) {
        char got[PATH_MAX], ref[PATH_MAX], rel[PATH_MAX];
        const cJSON *o = cJSON_GetArrayItem(outputs, i);
        if (!cJSON_IsString(o) || output_name(x.out_png, batch, i, got, sizeof got))
            return case_end(&x, 1);
        snprintf(rel, sizeof rel, "pipeline/%s", o->valuestring);
        tsr_test_path(rel, ref, sizeof ref);
        tsr_png_meta meta = {0};
        int mx;
        size_t over;
        if (compare_png(got, ref, tol, &mx, &over, &meta) != 0) {
            bad++;
            continue;
        }
        if (mx > tol) {
            fprintf(stderr, "image %d differs from diffusers: max abs diff %d > %d (%zu values)\n",
                    i, mx, tol, over);
            bad++;
        }
        if (check_parameters(c, &meta, i) != 0)
            bad++;
        tsr_png_meta_free(&meta);
    }
    char first[256] = "";
    int files = count_files(x.outdir, first, sizeof first);
    if (files != batch) {
        fprintf(stderr, "%d files in the output folder, expected %d (first: %s)\n", files, batch,
                first);
        bad++;
    }
    return case_end(&x, bad != 0);
}

/* ---- one error case ---- */

static int prepare_error_case(const cJSON *c, const char *tmp)
{
    const cJSON *mw = cJSON_GetObjectItemCaseSensitive(c, "model_without");
    if (mw) {
        const cJSON *model = cJSON_GetArrayItem(mw, 0), *part = cJSON_GetArrayItem(mw, 1);
        if (!cJSON_IsString(model) || !cJSON_IsString(part))
            return -1;
        char src[PATH_MAX], rel[PATH_MAX], dst[PATH_MAX], real[PATH_MAX];
        snprintf(rel, sizeof rel, "models/%s", model->valuestring);
        if (!realpath(tsr_test_path(rel, src, sizeof src), real))
            return -1;
        snprintf(dst, sizeof dst, "%s/model", tmp);
        if (mkdir(dst, 0755) != 0)
            return -1;
        DIR *d = opendir(real);
        if (!d)
            return -1;
        struct dirent *e;
        int linked = 0;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.' || strcmp(e->d_name, part->valuestring) == 0)
                continue;
            char from[PATH_MAX * 2], to[PATH_MAX * 2];
            snprintf(from, sizeof from, "%s/%s", real, e->d_name);
            snprintf(to, sizeof to, "%s/%s", dst, e->d_name);
            if (symlink(from, to) != 0) {
                closedir(d);
                return -1;
            }
            linked++;
        }
        closedir(d);
        if (linked == 0)
            return -1;
    }
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(c, "write"), *f;
    cJSON_ArrayForEach(f, w)
    {
        char path[PATH_MAX * 2];
        if (!cJSON_IsString(f))
            return -1;
        snprintf(path, sizeof path, "%s/%s", tmp, f->string);
        if (write_file(path, f->valuestring, strlen(f->valuestring)) != 0)
            return -1;
    }
    const cJSON *wt = cJSON_GetObjectItemCaseSensitive(c, "write_truncated");
    cJSON_ArrayForEach(f, wt)
    {
        const cJSON *from = cJSON_GetArrayItem(f, 0), *len = cJSON_GetArrayItem(f, 1);
        char path[PATH_MAX * 2];
        if (!cJSON_IsString(from) || !cJSON_IsNumber(len) || len->valueint < 0)
            return -1;
        char *src = resolve_arg(from->valuestring, tmp);
        size_t n = 0;
        void *data = src ? tsr_test_read_file(src, &n) : NULL;
        free(src);
        if (!data || n <= (size_t)len->valueint) {
            free(data);
            return -1;
        }
        snprintf(path, sizeof path, "%s/%s", tmp, f->string);
        int rc = write_file(path, data, (size_t)len->valueint);
        free(data);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int run_error(const cJSON *c, const char *bin)
{
    case_run x;
    if (case_start(&x, c, bin, true) != 0)
        return case_end(&x, 1);
    const run_result r = x.r;
    printf("stderr: %s", r.err);
    int bad = 0;
    if (!r.exited) {
        fprintf(stderr, "tessera generate crashed (signal %d) instead of failing cleanly\n",
                r.status);
        bad++;
    } else if (r.status == 0) {
        fprintf(stderr, "tessera generate succeeded on bad input\n");
        bad++;
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(c, "message"))
    {
        if (cJSON_IsString(m) && !strcasestr(r.err, m->valuestring)) {
            fprintf(stderr, "the message does not name \"%s\"\n", m->valuestring);
            bad++;
        }
    }
    char first[256] = "";
    int files = count_files(x.outdir, first, sizeof first);
    if (files != 0) {
        fprintf(stderr, "%d file(s) written despite the error (first: %s)\n", files, first);
        bad++;
    }
    return case_end(&x, bad != 0);
}

/* ---- the fake generator and self checks ---- */

/* `test_generate generate <tessera args>`: writes the references of
 * case $TSR_E2E_FAKE_CASE to --output with a parameters chunk, altered by
 * $TSR_E2E_FAKE_MODE: exact, plus2 (every value +2, clamped), plus3 (one
 * value +3), noparams, wrongseed, extrafile, fail, crash. */
static int fake_generate(int argc, char **argv)
{
    const char *name = getenv("TSR_E2E_FAKE_CASE"), *mode = getenv("TSR_E2E_FAKE_MODE");
    const char *output = NULL;
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], "--output") == 0)
            output = argv[i + 1];
    const cJSON *c = name ? find_case("cases", name) : NULL;
    if (!c || !output || !mode)
        return 3;
    if (strcmp(mode, "fail") == 0) {
        fprintf(stderr, "tessera generate: --sampler: unknown sampler\n");
        return 2;
    }
    if (strcmp(mode, "crash") == 0)
        raise(SIGKILL);
    const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(c, "outputs");
    int batch = cJSON_GetArraySize(outputs);
    for (int i = 0; i < batch; i++) {
        char ref[PATH_MAX], rel[PATH_MAX], got[PATH_MAX];
        snprintf(rel, sizeof rel, "pipeline/%s", cJSON_GetArrayItem(outputs, i)->valuestring);
        tsr_test_path(rel, ref, sizeof ref);
        if (output_name(output, batch, i, got, sizeof got))
            return 3;
        tsr_image img = {0};
        if (tsr_png_read(ref, 3, &img, NULL) != 0)
            return 3;
        if (strcmp(mode, "plus2") == 0)
            for (size_t k = 0; k < tsr_image_bytes(&img); k++)
                img.data[k] = (uint8_t)(img.data[k] > 253 ? 255 : img.data[k] + 2);
        if (strcmp(mode, "plus3") == 0)
            img.data[77] = (uint8_t)(img.data[77] > 127 ? img.data[77] - 3 : img.data[77] + 3);
        tsr_a1111_info info;
        tsr_a1111_info_init(&info);
        tsr_sampler_kind kind = TSR_SAMPLER_DDIM;
        tsr_schedule sch = TSR_SCHEDULE_DEFAULT;
        if (jstr(c, "sampler"))
            tsr_sampler_parse(jstr(c, "sampler"), &kind, &sch);
        if (jstr(c, "schedule"))
            tsr_schedule_parse(jstr(c, "schedule"), &sch);
        info.prompt = jstr(c, "prompt");
        info.negative_prompt = jstr(c, "negative_prompt");
        info.steps = (int)jnum(c, "steps", 0);
        info.sampler = tsr_sampler_display_name(kind);
        info.schedule_type = sch == TSR_SCHEDULE_DEFAULT ? "Automatic" : tsr_schedule_display_name(sch);
        info.cfg_scale = jnum(c, "cfg_scale", 0);
        info.seed = (int64_t)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "seeds"), i)
                        ->valuedouble + (strcmp(mode, "wrongseed") == 0);
        info.width = (int)img.width;
        info.height = (int)img.height;
        info.model = jstr(c, "model_name");
        info.denoising_strength = jnum(c, "strength", -1);
        info.rng = "CPU";
        char *params = NULL;
        if (tsr_a1111_parameters(&info, &params) != 0)
            return 3;
        tsr_png_text t = {"parameters", params};
        int rc = tsr_png_write(got, &img, &t, strcmp(mode, "noparams") == 0 ? 0 : 1);
        free(params);
        tsr_image_free(&img);
        if (rc != 0)
            return 3;
    }
    if (strcmp(mode, "extrafile") == 0) {
        char extra[PATH_MAX + 8];
        snprintf(extra, sizeof extra, "%s.tmp", output);
        write_file(extra, "x", 1);
    }
    return 0;
}

static int expect_golden(const char *name, const char *mode, int want_fail)
{
    const cJSON *c = find_case("cases", name);
    if (!c)
        TSR_FAIL("no case %s in the manifest", name);
    setenv("TSR_E2E_FAKE_CASE", name, 1);
    setenv("TSR_E2E_FAKE_MODE", mode, 1);
    printf("-- fake %s on %s: expect %s\n", mode, name, want_fail ? "FAIL" : "pass");
    int got = run_golden(c, g_self);
    if (got != want_fail)
        TSR_FAIL("driver %s a %s run of %s", got ? "failed" : "passed", mode, name);
    return 0;
}

/* The comparison, the parameters check and the output-folder check can each
 * fail: a fake generator that gets them right passes, one that gets any of
 * them wrong fails. */
static int self_golden(void)
{
    int bad = 0;
    bad += expect_golden("sd1_euler", "exact", 0);
    bad += expect_golden("sd1_negative", "exact", 0);
    bad += expect_golden("sd1_batch2_euler_a", "exact", 0);
    bad += expect_golden("sd1_img2img_euler_a", "exact", 0);
    bad += expect_golden("sd1_dpmpp_2m_karras", "plus2", 0);
    bad += expect_golden("sd1_euler", "plus3", 1);
    bad += expect_golden("sd1_batch2_euler_a", "plus3", 1);
    bad += expect_golden("sd1_euler", "noparams", 1);
    bad += expect_golden("sd1_batch2_euler_a", "wrongseed", 1);
    bad += expect_golden("sd1_euler", "extrafile", 1);
    bad += expect_golden("sd1_euler", "fail", 1);
    bad += expect_golden("sd1_euler", "crash", 1);
    return bad ? 1 : 0;
}

/* An error case passes only for a clean, named failure that writes nothing. */
static int self_error(void)
{
    const cJSON *c = find_case("error_cases", "bad_sampler");
    if (!c)
        TSR_FAIL("no bad_sampler case");
    cJSON *copy = cJSON_Duplicate(c, 1);
    int bad = 0;
    setenv("TSR_E2E_FAKE_CASE", "sd1_euler", 1);
    const char *modes[] = {"fail", "crash", "exact"};
    const int want_fail[] = {1, 1, 1};
    /* fake "fail" names "sampler" but not "euler_b": still a failure */
    for (int i = 0; i < 3; i++) {
        setenv("TSR_E2E_FAKE_MODE", modes[i], 1);
        printf("-- fake %s on bad_sampler: expect %s\n", modes[i], want_fail[i] ? "FAIL" : "pass");
        if (run_error(copy, g_self) != want_fail[i]) {
            fprintf(stderr, "driver misjudged a %s run\n", modes[i]);
            bad++;
        }
    }
    /* with the message narrowed to what the fake prints, "fail" passes */
    cJSON_ReplaceItemInObjectCaseSensitive(copy, "message", cJSON_CreateStringArray(
                                                                 (const char *[]){"sampler"}, 1));
    setenv("TSR_E2E_FAKE_MODE", "fail", 1);
    printf("-- fake fail on bad_sampler (message \"sampler\"): expect pass\n");
    if (run_error(copy, g_self) != 0) {
        fprintf(stderr, "driver rejected a clean failure\n");
        bad++;
    }
    cJSON_Delete(copy);
    return bad ? 1 : 0;
}

/* Every case is well formed and its references are there. */
static int self_manifest(void)
{
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(g_manifest, "cases"))
    {
        const char *name = jstr(c, "name");
        ASSERT_TRUE(name && jstr(c, "prompt") && jstr(c, "model_name"));
        const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(c, "outputs");
        const cJSON *seeds = cJSON_GetObjectItemCaseSensitive(c, "seeds");
        ASSERT_TRUE(cJSON_GetArraySize(outputs) >= 1);
        ASSERT_EQ(cJSON_GetArraySize(outputs), cJSON_GetArraySize(seeds));
        char *argv[MAX_ARGS] = {0};
        int na = build_argv("tessera", c, "/tmp", NULL, argv);
        ASSERT_TRUE(na > 2);
        bool model = false, rng = false;
        for (int i = 2; i + 1 < na; i++) {
            model |= strcmp(argv[i], "--model") == 0;
            rng |= strcmp(argv[i], "--rng") == 0 && strcmp(argv[i + 1], "cpu") == 0;
        }
        free_argv(argv);
        if (!model || !rng)
            TSR_FAIL("%s: needs --model and --rng cpu", name);
        if (jstr(c, "sampler")) {
            tsr_sampler_kind k;
            tsr_schedule s = TSR_SCHEDULE_DEFAULT;
            ASSERT_OK(tsr_sampler_parse(jstr(c, "sampler"), &k, &s));
        }
        const cJSON *o;
        cJSON_ArrayForEach(o, outputs)
        {
            char ref[PATH_MAX], rel[PATH_MAX];
            snprintf(rel, sizeof rel, "pipeline/%s", o->valuestring);
            tsr_image img = {0};
            ASSERT_OK(tsr_png_read(tsr_test_path(rel, ref, sizeof ref), 3, &img, NULL));
            bool ok = img.width == (uint32_t)jnum(c, "width", 0) &&
                      img.height == (uint32_t)jnum(c, "height", 0);
            tsr_image_free(&img);
            if (!ok)
                TSR_FAIL("%s: reference size differs from the case", rel);
        }
        n++;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(g_manifest, "error_cases"))
    {
        ASSERT_TRUE(jstr(c, "name"));
        ASSERT_TRUE(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "message")) >= 1);
    }
    printf("%d golden cases\n", n);
    ASSERT_TRUE(n >= 20);
    return 0;
}

/* References of different cases differ by more than the tolerance, so that
 * a test cannot pass with the wrong sampler or seed. */
static int self_distinct(void)
{
    const char *pairs[][2] = {{"sd1_euler.png", "sd1_euler_a.png"},
                              {"sd1_dpmpp_2m.png", "sd1_dpmpp_2m_karras.png"},
                              {"sd1_batch2_euler_a-0.png", "sd1_batch2_euler_a-1.png"},
                              {"sdxl_euler.png", "sdxl_dpmpp_2m.png"},
                              {"sd1_ddim.png", "sd1_model_default.png"}};
    int tol = (int)jnum(g_manifest, "tolerance", 2);
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char a[PATH_MAX], b[PATH_MAX], ra[PATH_MAX], rb[PATH_MAX];
        snprintf(ra, sizeof ra, "pipeline/%s", pairs[i][0]);
        snprintf(rb, sizeof rb, "pipeline/%s", pairs[i][1]);
        tsr_test_path(ra, a, sizeof a);
        tsr_test_path(rb, b, sizeof b);
        int mx;
        size_t over;
        tsr_png_meta meta = {0};
        ASSERT_EQ(compare_png(a, b, tol, &mx, &over, &meta), 0);
        tsr_png_meta_free(&meta);
        bool same_sampler = strcmp(pairs[i][0], "sd1_ddim.png") == 0;
        if (same_sampler ? mx > tol : mx <= 4 * tol)
            TSR_FAIL("%s vs %s: max diff %d", pairs[i][0], pairs[i][1], mx);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "generate") == 0) { /* the fake, run by self_* */
        g_manifest = load_manifest();
        int rc = g_manifest ? fake_generate(argc, argv) : 3;
        cJSON_Delete(g_manifest);
        return rc;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE | self_manifest | self_distinct | self_golden | "
                        "self_error\n",
                argv[0]);
        return 2;
    }
    ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (n <= 0)
        return 2;
    g_self[n] = '\0';
    g_manifest = load_manifest();
    if (!g_manifest)
        return 1;
    int rc;
    const char *name = argv[1];
    if (strcmp(name, "self_manifest") == 0)
        rc = self_manifest();
    else if (strcmp(name, "self_distinct") == 0)
        rc = self_distinct();
    else if (strcmp(name, "self_golden") == 0)
        rc = self_golden();
    else if (strcmp(name, "self_error") == 0)
        rc = self_error();
    else {
        const char *bin = getenv("TSR_BIN");
        const cJSON *c;
        if (!bin || !bin[0]) {
            fprintf(stderr, "TSR_BIN is not set (the tessera binary)\n");
            rc = 1;
        } else if ((c = find_case("cases", name))) {
            rc = run_golden(c, bin);
        } else if ((c = find_case("error_cases", name))) {
            rc = run_error(c, bin);
        } else {
            fprintf(stderr, "no case %s in the manifest\n", name);
            rc = 2;
        }
    }
    printf("%s %s\n", rc ? "FAIL" : "ok  ", name);
    cJSON_Delete(g_manifest);
    return rc;
}
