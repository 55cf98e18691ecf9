/*
 * tools/loadtest/main.c - `tessera-loadtest`: flags, checks, the run, the
 * report.  docs/loadtest.md is the manual.
 *
 * Every flag is checked before anything is sent, and a bad one is a usage
 * error naming it (exit 2), as with the `tessera` CLI; a run that cannot
 * happen (no server, an output that cannot be written) or whose errors pass
 * --max-error-rate exits 1.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lt.h"

static const char USAGE[] =
    "usage: tessera-loadtest [--url http://HOST:PORT] (--clients N | --rate R)\n"
    "                        [--jobs N] [--duration S] [options]\n"
    "\n"
    "Load `tessera serve` with native jobs (POST /v1/jobs), follow each job's event\n"
    "stream, and report throughput, latency percentiles, errors and the server's\n"
    "/metrics before and after.  Stops by itself: at --jobs and/or --duration (default\n"
    "--jobs 20), every job bounded by --timeout.\n"
    "\n"
    "load:\n"
    "  --url URL           the server (default http://127.0.0.1:8080)\n"
    "  --clients N         closed loop: N clients, each submits its next job when its\n"
    "                      last one ends (default 1)\n"
    "  --rate R            open loop: Poisson arrivals at R jobs/s (seeded)\n"
    "  --jobs N            submit N jobs in all\n"
    "  --duration S        stop submitting after S seconds (running jobs finish)\n"
    "  --timeout S         a job that has not ended S seconds after its submission is\n"
    "                      an error `timeout` (default 300)\n"
    "  --max-inflight N    open loop: an arrival with N jobs in flight is `dropped`\n"
    "                      (default 256)\n"
    "  --seed N            the seed of arrivals, the mix draws and the job seeds (default 1)\n"
    "jobs:\n"
    "  --profile FILE      the job mix: JSON {\"mix\": [{\"weight\", \"width\", \"height\",\n"
    "                      \"steps\", \"n\", \"prompt\", \"params\"}...], \"prompts\": [...],\n"
    "                      \"params\": {...}}; fields an entry leaves out come from:\n"
    "  --size WxH          image size (default 64x64)\n"
    "  --steps N           steps per image (default 4)\n"
    "  --n N               images per job, 1..16 (default 1)\n"
    "  --prompt TEXT       the prompt (default \"a red circle on a blue background\")\n"
    "  --token TOKEN       send Authorization: Bearer TOKEN\n"
    "  --token-file FILE   the same, the token being FILE's first line\n"
    "output:\n"
    "  --json FILE         the summary as JSON\n"
    "  --csv FILE          one row per job with its timings (tools/loadtest/plot.py charts it)\n"
    "  --no-metrics        do not read the server's /metrics\n"
    "  --quiet             no progress line on stderr\n"
    "  --max-error-rate F  exit 1 when more than this fraction of jobs failed (default 0)\n"
    "  --help              this text\n"
    "\n"
    "Exit status: 0 the run completed within --max-error-rate, 1 it could not run or had\n"
    "too many errors, 2 the command line is wrong.\n";

static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "tessera-loadtest: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n(tessera-loadtest --help lists the options)\n");
    return LT_EXIT_USAGE;
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* "http://HOST:PORT[/]" (or "HOST:PORT") into cfg. */
static bool parse_url(const char *url, lt_config *c)
{
    const char *p = url;
    if (strncmp(p, "http://", 7) == 0)
        p += 7;
    else if (strstr(p, "://"))
        return false; /* https and friends: not supported */
    size_t len = strcspn(p, "/");
    if (p[len] && strcmp(p + len, "/") != 0)
        return false; /* a path prefix is not supported */
    char hp[300];
    if (len == 0 || len >= sizeof hp)
        return false;
    memcpy(hp, p, len);
    hp[len] = '\0';
    char *colon = strrchr(hp, ':');
    long port = 80;
    if (colon) {
        if (!parse_long(colon + 1, 1, 65535, &port))
            return false;
        *colon = '\0';
    }
    char *host = hp;
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        host++;
    }
    if (!*host || strlen(host) >= sizeof c->host)
        return false;
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = (int)port;
    return true;
}

static char *read_token(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char line[512];
    char *t = fgets(line, sizeof line, f) ? strdup(line) : NULL;
    fclose(f);
    if (t)
        t[strcspn(t, "\r\n")] = '\0';
    return t;
}

static bool writable(const char *path)
{
    FILE *f = fopen(path, "a");
    if (!f)
        return false;
    fclose(f);
    return true;
}

enum {
    O_URL = 256, O_CLIENTS, O_RATE, O_JOBS, O_DURATION, O_TIMEOUT, O_MAX_INFLIGHT, O_SEED,
    O_PROFILE, O_SIZE, O_STEPS, O_N, O_PROMPT, O_TOKEN, O_TOKEN_FILE, O_JSON, O_CSV,
    O_NO_METRICS, O_QUIET, O_MAX_ERR, O_HELP,
};

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"url", required_argument, 0, O_URL},
        {"clients", required_argument, 0, O_CLIENTS},
        {"rate", required_argument, 0, O_RATE},
        {"jobs", required_argument, 0, O_JOBS},
        {"duration", required_argument, 0, O_DURATION},
        {"timeout", required_argument, 0, O_TIMEOUT},
        {"max-inflight", required_argument, 0, O_MAX_INFLIGHT},
        {"seed", required_argument, 0, O_SEED},
        {"profile", required_argument, 0, O_PROFILE},
        {"size", required_argument, 0, O_SIZE},
        {"steps", required_argument, 0, O_STEPS},
        {"n", required_argument, 0, O_N},
        {"prompt", required_argument, 0, O_PROMPT},
        {"token", required_argument, 0, O_TOKEN},
        {"token-file", required_argument, 0, O_TOKEN_FILE},
        {"json", required_argument, 0, O_JSON},
        {"csv", required_argument, 0, O_CSV},
        {"no-metrics", no_argument, 0, O_NO_METRICS},
        {"quiet", no_argument, 0, O_QUIET},
        {"max-error-rate", required_argument, 0, O_MAX_ERR},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    lt_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.host, sizeof c.host, "127.0.0.1");
    c.port = 8080;
    c.timeout = 300;
    c.max_inflight = 256;
    c.seed = 1;
    c.metrics = true;
    c.progress = true;
    long clients = 0, width = 64, height = 64, steps = 4, n = 1, v = 0;
    double rate = 0, max_err = 0;
    const char *profile_path = NULL, *prompt = "a red circle on a blue background";
    const char *token = NULL, *token_file = NULL, *json_path = NULL, *csv_path = NULL;
    bool have_clients = false, have_rate = false;

    opterr = 0; /* our own messages */
    int o;
    while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        const char *a = optarg;
        switch (o) {
        case O_URL:
            if (!parse_url(a, &c))
                return usage_error("--url must be http://HOST:PORT, got '%s'%s", a, "");
            break;
        case O_CLIENTS:
            if (!parse_long(a, 1, 10000, &clients))
                return usage_error("--clients must be an integer 1..10000, got '%s'%s", a, "");
            have_clients = true;
            break;
        case O_RATE:
            if (!parse_double(a, 1e-6, 100000, &rate) || rate <= 0)
                return usage_error("--rate must be a number of jobs/s > 0, got '%s'%s", a, "");
            have_rate = true;
            break;
        case O_JOBS:
            if (!parse_long(a, 1, 10000000, &c.max_jobs))
                return usage_error("--jobs must be an integer 1..10000000, got '%s'%s", a, "");
            break;
        case O_DURATION:
            if (!parse_double(a, 0.001, 604800, &c.duration))
                return usage_error("--duration must be seconds > 0 (up to a week), got '%s'%s",
                                   a, "");
            break;
        case O_TIMEOUT:
            if (!parse_double(a, 0.001, 86400, &c.timeout))
                return usage_error("--timeout must be seconds > 0 (up to a day), got '%s'%s", a,
                                   "");
            break;
        case O_MAX_INFLIGHT:
            if (!parse_long(a, 1, 100000, &v))
                return usage_error("--max-inflight must be an integer 1..100000, got '%s'%s", a,
                                   "");
            c.max_inflight = (int)v;
            break;
        case O_SEED: {
            char *end = NULL;
            errno = 0;
            unsigned long long s = strtoull(a, &end, 10);
            if (!*a || *end || errno || a[0] == '-')
                return usage_error("--seed must be an unsigned integer, got '%s'%s", a, "");
            c.seed = s;
            break;
        }
        case O_PROFILE: profile_path = a; break;
        case O_SIZE: {
            char *x = strchr(a, 'x');
            char wbuf[32];
            if (!x || (size_t)(x - a) >= sizeof wbuf)
                return usage_error("--size must be WxH (e.g. 64x64), got '%s'%s", a, "");
            memcpy(wbuf, a, (size_t)(x - a));
            wbuf[x - a] = '\0';
            if (!parse_long(wbuf, 64, 4096, &width) || !parse_long(x + 1, 64, 4096, &height) ||
                width % 8 || height % 8)
                return usage_error("--size must be WxH, each 64..4096 and a multiple of 8, "
                                   "got '%s'%s",
                                   a, "");
            break;
        }
        case O_STEPS:
            if (!parse_long(a, 1, 1000, &steps))
                return usage_error("--steps must be an integer 1..1000, got '%s'%s", a, "");
            break;
        case O_N:
            if (!parse_long(a, 1, 16, &n))
                return usage_error("--n must be an integer 1..16, got '%s'%s", a, "");
            break;
        case O_PROMPT:
            if (!a[0])
                return usage_error("--prompt must not be empty%s%s", "", "");
            prompt = a;
            break;
        case O_TOKEN: token = a; break;
        case O_TOKEN_FILE: token_file = a; break;
        case O_JSON: json_path = a; break;
        case O_CSV: csv_path = a; break;
        case O_NO_METRICS: c.metrics = false; break;
        case O_QUIET: c.progress = false; break;
        case O_MAX_ERR:
            if (!parse_double(a, 0, 1, &max_err))
                return usage_error("--max-error-rate must be a fraction 0..1, got '%s'%s", a,
                                   "");
            break;
        case O_HELP: fputs(USAGE, stdout); return LT_EXIT_OK;
        case ':':
            return usage_error("%s needs a value%s", argv[optind - 1], "");
        default:
            return usage_error("unknown option '%s'%s", argv[optind - 1], "");
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'%s", argv[optind], "");
    if (have_clients && have_rate)
        return usage_error("--clients (closed loop) and --rate (open loop) exclude each other%s%s",
                           "", "");
    if (token && token_file)
        return usage_error("--token and --token-file exclude each other%s%s", "", "");
    c.clients = have_rate ? 0 : (have_clients ? (int)clients : 1);
    c.rate = have_rate ? rate : 0;
    if (c.max_jobs == 0 && c.duration == 0)
        c.max_jobs = 20;

    lt_profile prof;
    if (lt_profile_single(&prof, (int)width, (int)height, (int)steps, (int)n, prompt) < 0) {
        fprintf(stderr, "tessera-loadtest: out of memory\n");
        return LT_EXIT_FAILED;
    }
    if (profile_path) {
        char err[512];
        if (access(profile_path, R_OK) != 0) {
            fprintf(stderr, "tessera-loadtest: --profile %s: %s\n", profile_path,
                    strerror(errno));
            lt_profile_free(&prof);
            return LT_EXIT_FAILED;
        }
        if (lt_profile_load(profile_path, &prof, err, sizeof err) < 0) {
            lt_profile_free(&prof);
            return usage_error("%s%s", err, "");
        }
    }
    c.profile = &prof;
    char *tok = NULL;
    int rc = LT_EXIT_FAILED;
    if (token_file) {
        tok = read_token(token_file);
        if (!tok || !tok[0]) {
            fprintf(stderr, "tessera-loadtest: --token-file %s: %s\n", token_file,
                    tok ? "empty first line" : strerror(errno));
            goto out;
        }
        c.token = tok;
    } else {
        c.token = token;
    }
    const char *outs[2] = {json_path, csv_path};
    for (int i = 0; i < 2; i++) {
        if (outs[i] && !writable(outs[i])) {
            fprintf(stderr, "tessera-loadtest: --%s %s: %s\n", i ? "csv" : "json", outs[i],
                    strerror(errno));
            goto out;
        }
    }

    lt_run run;
    if (lt_run_exec(&run, &c) < 0) {
        fprintf(stderr, "tessera-loadtest: %s\n", run.fatal);
        lt_run_free(&run);
        goto out;
    }
    lt_summary s;
    lt_summarize(&run, &s);
    lt_report_table(stdout, &run, &s);
    fflush(stdout);
    rc = LT_EXIT_OK;
    if (json_path && lt_report_json(json_path, &run, &s) < 0) {
        fprintf(stderr, "tessera-loadtest: --json %s: cannot write it\n", json_path);
        rc = LT_EXIT_FAILED;
    }
    if (csv_path && lt_report_csv(csv_path, &run) < 0) {
        fprintf(stderr, "tessera-loadtest: --csv %s: cannot write it\n", csv_path);
        rc = LT_EXIT_FAILED;
    }
    if (s.jobs > 0 && (double)s.errors / (double)s.jobs > max_err) {
        fprintf(stderr, "tessera-loadtest: %ld of %ld jobs had errors (--max-error-rate %g)\n",
                s.errors, s.jobs, max_err);
        rc = LT_EXIT_FAILED;
    }
    lt_run_free(&run);
out:
    free(tok);
    lt_profile_free(&prof);
    return rc;
}
