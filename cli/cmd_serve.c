/*
 * cli/cmd_serve.c - `tessera serve`: the HTTP service (service/).
 *
 * This file only turns flags into a tsr_service_config; everything else is
 * service/ (docs/service-design.md).  The defaults are tsr_service_config_init's
 * (service/server.c), the one place they are written: every flag's
 * variable starts from the config, and its help prints "(default {})"
 * from that variable (args.h).  Flags are checked before anything
 * starts, so a typo fails at once with a message naming the flag.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "commands.h"
#include "core/log.h"
#include "service.h"
#include "tessera.h"

/* "HOST:PORT", "[V6]:PORT", ":PORT" or "PORT" into host (static storage) and port. */
static int parse_listen(const char *v, const char **host, int *port)
{
    static char buf[256];
    const char *colon = strrchr(v, ':');
    const char *p = colon ? colon + 1 : v;
    char *end = NULL;
    long n = strtol(p, &end, 10);
    if (!*p || *end || n < 0 || n > 65535)
        return -1;
    *port = (int)n;
    if (!colon || colon == v)
        return 0; /* keep the default host */
    size_t len = (size_t)(colon - v);
    if (v[0] == '[' && len >= 2 && v[len - 1] == ']') {
        v++;
        len -= 2;
    }
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, v, len);
    buf[len] = '\0';
    *host = buf;
    return 0;
}

int tsr_cmd_serve(int argc, char **argv)
{
    tsr_service_config c;
    tsr_service_config_init(&c);
    const char *listen = NULL, *host = c.host, *level = NULL, *batching = NULL;
    int64_t port = c.port, threads = 0, max_batch = c.max_batch, max_queue = c.max_queue;
    int64_t max_memory = c.max_memory;
    int64_t key_max_queue = c.key_max_queue;
    int64_t max_wait = c.max_wait_ms, drain = c.drain_timeout_s, max_body = c.max_body;
    int64_t max_bodies = c.max_bodies;
    int64_t lora_cache_mb = 0, comfy_session_ttl = 0;
    int64_t tile_size = c.tile_size, preview_every = c.preview_every, tile_threads = c.tile_threads;
    int64_t keep_jobs = c.keep_jobs, tile_cache = c.tile_cache_mb,
            journal_compact = c.journal_compact_kb;
    const char *role = NULL;
    bool insecure = false;
    int64_t url_ttl = c.url_ttl_s;
    const char *allowed_last = NULL;
    int64_t result_ttl = c.result_ttl_s, claim_idle = c.claim_idle_ms,
            max_attempts = c.max_attempts;
    double tile_threshold = c.tile_threshold, keep_hours = c.keep_hours;
    const tsr_arg_spec specs[] = {
        {"model", TSR_ARG_STRING, &c.model, "DIR_OR_FILE",
         "diffusers folder or single .safetensors (default: models/demo)", 0, 0, 0, 0},
        {"listen", TSR_ARG_STRING, &listen, "HOST:PORT",
         "address to listen on (port 0 = any free port)", 0, 0, 0, 0},
        {"host", TSR_ARG_STRING, &host, "HOST", "the host part of --listen (default {})", 0, 0, 0, 0},
        {"port", TSR_ARG_INT, &port, "PORT", "the port part of --listen (default {})", 0, 65535, 0, 0},
        {"device", TSR_ARG_STRING, &c.device, "DEV[,DEV...]",
         "auto (default), cpu, cuda:N; a list runs one worker per entry (cpu,cpu)", 0, 0, 0, 0},
        {"threads", TSR_ARG_INT, &threads, "N",
         "CPU threads in all, split across CPU workers (0 = all cores)", 0, 1024, 0, 0},
        {"parallel", TSR_ARG_STRING, &c.parallel, "auto|data|cfg",
         "several devices: data = each runs its own images; cfg = devices 2k, 2k+1 pair up and "
         "split every image's rows (lower latency); auto (default) = a lone image runs split "
         "when the queue is empty and its pair is idle, data parallel under load",
         0, 0, 0, 0},
        {"precision", TSR_ARG_STRING, &c.precision, "f32|bf16",
         "f32 (default; equals diffusers) or bf16: the CPU's fast mode where it has AVX512_BF16",
         0, 0, 0, 0},
        {"lora-dir", TSR_ARG_STRING, &c.lora_dir, "DIR",
         "LoRA files (NAME.safetensors) that prompts' <lora:NAME:W> tags and the 'loras' field "
         "name; listed by /sdapi/v1/loras", 0, 0, 0, 0},
        {"embeddings-dir", TSR_ARG_STRING, &c.embeddings_dir, "DIR",
         "textual-inversion embeddings (NAME.safetensors), used where NAME is a word of a prompt; "
         "listed by /sdapi/v1/embeddings", 0, 0, 0, 0},
        {"comfy-ui", TSR_ARG_STRING, &c.comfy_ui_dir, "DIR",
         "serve ComfyUI's web UI at /comfy/: DIR is the static folder of PyPI's "
         "comfyui-frontend-package (scripts/setup-comfy-ui.sh puts it in .cache/comfy-ui/frontend)",
         0, 0, 0, 0},
        {"comfy-session-ttl", TSR_ARG_INT, &comfy_session_ttl, "S",
         "with --keys: how long a sign-in at /comfy/login lasts, in seconds (default 43200, "
         "12 h)", 1, 30 * 86400, 0, 0},
        {"lora-cache-mb", TSR_ARG_INT, &lora_cache_mb, "MIB",
         "loaded LoRAs kept per worker, least recently used evicted, never one in use "
         "(default 1024)", 0, 1 << 20, 0, 0},
        {"max-batch", TSR_ARG_INT, &max_batch, "N",
         "images per UNet call, 1..32 (default {}; rows = 2N with guidance)", 1, 32, 0, 0},
        {"max-queue", TSR_ARG_INT, &max_queue, "N",
         "images waiting before new work gets 429 (default {}); an image larger or longer "
         "than the model's default size at 30 steps counts its pixels x steps over that",
         1, 1000000, 0, 0},
        {"key-max-queue", TSR_ARG_INT, &key_max_queue, "N",
         "images one API key may have waiting before its new work gets 429 (other keys go "
         "on; 0 = no cap, the default; keys off: one cap for all)", 0, 1000000, 0, 0},
        {"max-memory", TSR_ARG_INT, &max_memory, "BYTES",
         "working memory one batch of a request's images may need; larger requests get 422 "
         "(0 = the device's memory; default {})", 0, (int64_t)1 << 50, 0, 0},
        {"data-dir", TSR_ARG_STRING, &c.data_dir, "DIR",
         "journal, images and job records (default {})", 0, 0, 0, 0},
        {"token-file", TSR_ARG_STRING, &c.token_file, "FILE",
         "require 'Authorization: Bearer <token>' on /v1/ (the file's first line)", 0, 0, 0, 0},
        {"keys", TSR_ARG_STRING, &c.keys_file, "FILE",
         "API keys, one 'NAME user|admin SHA256HEX' a line (make them with `tessera keys new`); "
         "requests to /v1/ and /sdapi/ need 'Authorization: Bearer KEY'", 0, 0, 0, 0},
        {"url-secret-file", TSR_ARG_STRING, &c.url_secret_file, "FILE",
         "with keys: the secret image URLs are signed with (16..256 base64 characters, "
         "shared with nginx; default: <data-dir>/url-secret, made once)", 0, 0, 0, 0},
        {"url-ttl", TSR_ARG_INT, &url_ttl, "S",
         "with keys: a signed image URL's lifetime: it expires S/2 to 1.5 S seconds after it is "
         "handed out, one URL per job for all viewers (default {})", 1, 315360000, 0,
         0},
        {"insecure-no-auth", TSR_ARG_FLAG, &insecure, NULL,
         "allow a non-loopback --listen without --keys or --token-file (anyone who reaches "
         "the port may use the server)", 0, 0, 0, 0},
        {"allowed-host", TSR_ARG_STRING, &allowed_last, "NAME[,NAME...]",
         "on a loopback --listen, also answer requests whose Host is NAME (repeatable; "
         "localhost, 127.0.0.1 and [::1] always are)", 0, 0, 0, 0},
        {"cors-origin", TSR_ARG_STRING, &c.cors_origin, "ORIGIN",
         "send Access-Control-Allow-Origin: ORIGIN (e.g. * or http://localhost:3000)", 0, 0, 0,
         0},
        {"batching", TSR_ARG_STRING, &batching, "MODE",
         "continuous (default: images join and leave between steps) or static (a batch "
         "admits images only when empty; for comparisons)",
         0, 0, 0, 0},
        {"max-wait-ms", TSR_ARG_INT, &max_wait, "MS",
         "a new group of images waits up to MS for company (default {})", 0, 60000, 0, 0},
        {"drain-timeout", TSR_ARG_INT, &drain, "S",
         "on SIGTERM, let running images finish for up to S seconds (default {})", 0, 86400, 0,
         0},
        {"max-body", TSR_ARG_INT, &max_body, "BYTES",
         "largest request body (default {})", 1024, (int64_t)1 << 32, 0, 0},
        {"max-bodies", TSR_ARG_INT, &max_bodies, "BYTES",
         "request bodies held at once, all connections together; past it new uploads get 503 "
         "(default {}; at least --max-body)",
         1024, (int64_t)1 << 40, 0, 0},
        {"tile-size", TSR_ARG_INT, &tile_size, "PX",
         "preview tiles are PX x PX image pixels (default {})", 8, 4096, 0, 0},
        {"preview-every", TSR_ARG_INT, &preview_every, "K",
         "publish preview tiles every K UNet calls (default {})", 1, 1000, 0, 0},
        {"tile-threshold", TSR_ARG_FLOAT, &tile_threshold, "MAD",
         "re-publish a tile when its mean absolute difference passes MAD (0..255, default {})",
         0, 0, 0, 255},
        {"tile-threads", TSR_ARG_INT, &tile_threads, "N", "JPEG encoder threads (default {})", 1,
         8, 0, 0},
        {"keep-jobs", TSR_ARG_INT, &keep_jobs, "N",
         "keep the N newest finished jobs, delete older ones with their files (default {}; "
         "0 = all)",
         0, 100000000, 0, 0},
        {"keep-hours", TSR_ARG_FLOAT, &keep_hours, "H",
         "delete finished jobs (and files) H hours after they finished (0 = never; default {})",
         0, 0, 0, 1e6},
        {"tile-cache-mb", TSR_ARG_INT, &tile_cache, "MB",
         "preview tiles of finished jobs kept in RAM, MiB; past it the oldest go and their "
         "final tiles are read from --data-dir (default {}; 0 = none)",
         0, 1048576, 0, 0},
        {"journal-compact-kb", TSR_ARG_INT, &journal_compact, "KB",
         "rewrite the journal while running once its records no longer needed pass KB KiB and "
         "outweigh the rest (default {}; 0 = only at start-up)",
         0, 1048576, 0, 0},
        {"queue", TSR_ARG_STRING, &c.queue_url, "URL",
         "redis[s]://[USER@]HOST[:PORT][/DB]: share one Redis Streams queue with other nodes "
         "(docs/scale-out.md); rediss:// is TLS; no password in the URL", 0, 0, 0, 0},
        {"queue-password-file", TSR_ARG_STRING, &c.queue_password_file, "FILE",
         "with --queue: the Redis password, one line (mode 600); default: "
         "$TESSERA_REDIS_PASSWORD, else no AUTH", 0, 0, 0, 0},
        {"queue-ca", TSR_ARG_STRING, &c.queue_ca, "FILE",
         "with rediss://: the CA certificate(s), PEM, Redis's certificate must chain to "
         "(default: the system's trust store)", 0, 0, 0, 0},
        {"role", TSR_ARG_STRING, &role, "ROLE",
         "with --queue: api (accept and serve), worker (run) or both (default)", 0, 0, 0, 0},
        {"result-ttl", TSR_ARG_INT, &result_ttl, "S",
         "with --queue: results stay in Redis S seconds (default {})", 1, 100000000, 0, 0},
        {"claim-idle-ms", TSR_ARG_INT, &claim_idle, "MS",
         "with --queue: an image taken by a silent worker this long is run by another "
         "(default {})",
         100, 86400000, 0, 0},
        {"max-attempts", TSR_ARG_INT, &max_attempts, "N",
         "with --queue: takes of an image before it goes to the dead-letter stream (default {})",
         1, 1000, 0, 0},
        {"log-level", TSR_ARG_STRING, &level, "LEVEL", "debug, info, warn, error or none", 0, 0,
         0, 0},
    };
    const tsr_cli_command cmd = {
        .name = "serve",
        .synopsis = "serve [--model DIR_OR_FILE] [--listen HOST:PORT] [--device DEV[,DEV...]] "
                    "[options]",
        .summary = "serve the HTTP API (jobs, batches, events, images)",
        .description =
            "Images of all requests share UNet calls (step-level continuous batching); each\n"
            "image equals what `tessera generate` makes with the same parameters and seed.\n"
            "Accepted jobs are journaled in --data-dir before the 202, and survive restarts.\n"
            "SIGTERM or SIGINT drains: new work gets 503, running images finish.\n"
            "The HTTP contract: docs/service-design.md; examples: README.md.",
        .specs = specs,
        .n_specs = (int)(sizeof specs / sizeof specs[0]),
    };
    int rc = tsr_args_parse(&cmd, argc, argv, NULL, 0, NULL);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc)
        return TSR_EXIT_USAGE;
    if (host)
        c.host = host;
    if (port >= 0)
        c.port = (int)port;
    /* after --host and --port, which start from the defaults: --listen wins */
    if (listen && parse_listen(listen, &c.host, &c.port) < 0) {
        fprintf(stderr, "tessera serve: --listen must be HOST:PORT (port 0..65535), got '%s'\n",
                listen);
        return TSR_EXIT_USAGE;
    }
    c.log_level = tsr_log_level_current;
    if (level) {
        int l = tsr_log_level_parse(level);
        if (l < 0) {
            fprintf(stderr,
                    "tessera serve: --log-level must be debug, info, warn, error or none\n");
            return TSR_EXIT_USAGE;
        }
        c.log_level = l;
    }
    if (batching) {
        if (strcmp(batching, "static") == 0) {
            c.static_batching = 1;
        } else if (strcmp(batching, "continuous") != 0) {
            fprintf(stderr, "tessera serve: --batching must be continuous or static, got '%s'\n",
                    batching);
            return TSR_EXIT_USAGE;
        }
    }
    if (c.parallel && strcmp(c.parallel, "auto") != 0 && strcmp(c.parallel, "data") != 0 &&
        strcmp(c.parallel, "cfg") != 0) {
        fprintf(stderr, "tessera serve: --parallel must be auto, data or cfg, not '%s'\n",
                c.parallel);
        return TSR_EXIT_USAGE;
    }
    if (c.queue_url) {
        char err[400];
        if (tsr_service_check_queue_url(c.queue_url, err, sizeof err) < 0) {
            fprintf(stderr, "tessera serve: --queue %s\n", err);
            return TSR_EXIT_USAGE;
        }
    }
    if (role) {
        if (strcmp(role, "both") == 0)
            c.role = TSR_ROLE_BOTH;
        else if (strcmp(role, "api") == 0)
            c.role = TSR_ROLE_API;
        else if (strcmp(role, "worker") == 0)
            c.role = TSR_ROLE_WORKER;
        else {
            fprintf(stderr, "tessera serve: --role must be api, worker or both\n");
            return TSR_EXIT_USAGE;
        }
        if (!c.queue_url) {
            fprintf(stderr, "tessera serve: --role needs --queue\n");
            return TSR_EXIT_USAGE;
        }
    }
    if (c.precision && strcmp(c.precision, "f32") != 0 && strcmp(c.precision, "bf16") != 0) {
        fprintf(stderr, "tessera serve: --precision must be f32 or bf16, not '%s'\n", c.precision);
        return TSR_EXIT_USAGE;
    }
    if (c.comfy_ui_dir) {
        char index[4200];
        snprintf(index, sizeof index, "%s/index.html", c.comfy_ui_dir);
        if (access(index, R_OK) != 0) {
            fprintf(stderr,
                    "tessera serve: --comfy-ui %s: no readable index.html there (give the "
                    "frontend's static folder, e.g. .cache/comfy-ui/frontend from "
                    "scripts/setup-comfy-ui.sh)\n",
                    c.comfy_ui_dir);
            return TSR_EXIT_USAGE;
        }
    }
    c.result_ttl_s = (int)result_ttl;
    c.claim_idle_ms = (int)claim_idle;
    c.max_attempts = (int)max_attempts;
    if (!c.model)
        c.model = tsr_cli_default_model();
    c.threads = (int)threads;
    c.lora_cache_mb = (int)lora_cache_mb;
    c.comfy_session_ttl_s = (int)comfy_session_ttl;
    c.max_batch = (int)max_batch;
    c.max_queue = (int)max_queue;
    c.key_max_queue = (int)key_max_queue;
    c.max_memory = max_memory;
    c.max_wait_ms = (int)max_wait;
    c.drain_timeout_s = (int)drain;
    c.max_body = max_body;
    c.max_bodies = max_bodies;
    c.tile_size = (int)tile_size;
    c.preview_every = (int)preview_every;
    c.tile_threshold = tile_threshold;
    c.tile_threads = (int)tile_threads;
    c.keep_jobs = (int)keep_jobs;
    c.keep_hours = keep_hours;
    c.tile_cache_mb = (int)tile_cache;
    c.journal_compact_kb = (int)journal_compact;
    c.ready_out = stdout;
    c.insecure_no_auth = insecure;
    c.url_ttl_s = (int)url_ttl;
    /* --allowed-host may repeat: every value, joined with commas */
    static char allowed[4096];
    size_t used = 0;
    for (int i = 1; allowed_last && i < argc; i++) {
        const char *v = NULL;
        if (strcmp(argv[i], "--allowed-host") == 0 && i + 1 < argc)
            v = argv[++i];
        else if (strncmp(argv[i], "--allowed-host=", 15) == 0)
            v = argv[i] + 15;
        if (v && used + strlen(v) + 2 < sizeof allowed)
            used += (size_t)snprintf(allowed + used, sizeof allowed - used, "%s%s",
                                     used ? "," : "", v);
    }
    if (allowed_last)
        c.allowed_hosts = allowed;
    char err[640];
    if (tsr_service_check_auth(&c, err, sizeof err) < 0) {
        fprintf(stderr, "tessera serve: %s\n", err);
        return TSR_EXIT_USAGE;
    }
    if (tsr_service_check_queue(&c, err, sizeof err) < 0) {
        fprintf(stderr, "tessera serve: %s\n", err);
        return TSR_EXIT_USAGE;
    }
    rc = tsr_service_run(&c);
    return rc == 0 ? TSR_EXIT_OK : TSR_EXIT_FAILURE;
}
