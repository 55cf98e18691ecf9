/*
 * service/service.h - `tessera serve`, the HTTP service, as a library call.
 *
 * The CLI (cli/cmd_serve.c) fills a tsr_service_config and calls
 * tsr_service_run, which returns when the server has drained after SIGTERM
 * or SIGINT.  docs/service-design.md is the design and the HTTP contract.
 */
#ifndef TSR_SERVICE_H
#define TSR_SERVICE_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_service_config {
    const char *model;       /* diffusers folder or .safetensors (required) */
    const char *host;        /* default "127.0.0.1" */
    int port;                /* default 8080; 0 = any free port */
    const char *device;      /* "auto" (default), "cpu", "cpu,cpu", "cuda:0,cuda:1" */
    int threads;             /* CPU threads in all (0 = all cores), split across CPU workers */
    const char *parallel;    /* --parallel: "auto" (NULL, the default), "data" or "cfg": how
                              * several devices share work (docs/multi-gpu.md part 4) */
    const char *precision;   /* NULL/"f32" (default) or "bf16" (tsr_engine_options.precision) */
    int max_batch;           /* images per UNet call, 1..32 (default 16) */
    int max_queue;           /* images waiting, at most (default 256), counted in queue units:
                              * images at the default size and 30 steps (service/jobs/gate.h) */
    int key_max_queue;       /* --key-max-queue: images one key may have waiting (0 = no cap,
                              * the default); keys off: all requests are one key */
    long long max_memory;    /* working memory one image batch may need, bytes (0 = the
                              * device's memory, the default) */
    const char *data_dir;    /* default "./tessera-data" */
    const char *token_file;  /* NULL = no authentication; one admin key (http/auth.h) */
    const char *keys_file;   /* --keys: `NAME ROLE SHA256HEX` lines; NULL = none */
    const char *url_secret_file; /* --url-secret-file: signed URLs' secret (http/signed.h);
                              * NULL = <data_dir>/url-secret, made once */
    int url_ttl_s;           /* signed URLs' lifetime, seconds (default 86400) */
    int insecure_no_auth;    /* 1: listen on a non-loopback address without keys */
    const char *cors_origin; /* NULL = no CORS headers */
    const char *allowed_hosts; /* --allowed-host: comma list of extra Host names (loopback) */
    int max_wait_ms;         /* default 0 */
    int static_batching;     /* 1 = admit images only into an empty batch (--batching static) */
    int drain_timeout_s;     /* default 30 */
    long long max_body;      /* request body limit in bytes (default 32 MiB) */
    long long max_bodies;    /* bytes of all request bodies held at once (default 256 MiB) */
    int log_level;           /* tsr_log_level (default info) */
    int tile_size;           /* preview tile size in image pixels (default 64) */
    int preview_every;       /* previews every N UNet calls (default 1) */
    double tile_threshold;   /* mean abs difference (0..255) to re-publish a tile (default 2) */
    int tile_threads;        /* JPEG encoder threads (default 1) */
    int keep_jobs;           /* finished jobs kept (default 10000; 0 = all) */
    double keep_hours;       /* finished jobs kept this long (0 = forever) */
    int tile_cache_mb;       /* finished jobs' tiles held in RAM, MiB (default 32; 0 = none) */
    int journal_compact_kb;  /* compact the journal while running past this many KiB of
                              * dead records (default 1024; 0 = at start-up only) */
    FILE *ready_out;         /* the "listening on" line goes here (default stdout) */
    /* scale-out (docs/scale-out.md): NULL = the in-process queue */
    const char *queue_url;   /* "redis[s]://[USER@]HOST:PORT[/DB]" (rediss: TLS) */
    const char *queue_password_file; /* Redis password, one line; NULL: $TESSERA_REDIS_PASSWORD
                              * (unset: no AUTH); never on the command line */
    const char *queue_ca;    /* rediss://: the CA file (PEM) the server's certificate must chain
                              * to; NULL = the system's trust store */
    int role;                /* tsr_service_role (default TSR_ROLE_BOTH) */
    int result_ttl_s;        /* results kept in Redis (default 86400) */
    int claim_idle_ms;       /* an image pending this long is taken over (default 30000) */
    int max_attempts;        /* takes before the dead-letter stream (default 3) */
    const char *lora_dir;    /* --lora-dir: LoRA files (docs/lora.md); NULL = none */
    const char *embeddings_dir; /* --embeddings-dir: textual inversion (docs/lora.md); NULL = none */
    int lora_cache_mb;       /* --lora-cache-mb: loaded LoRAs per worker (0 = 1024) */
    const char *comfy_ui_dir; /* --comfy-ui: ComfyUI's frontend (its static folder), served at
                              * /comfy/ (docs/compat-comfyui.md); NULL = not served */
    int comfy_session_ttl_s; /* --comfy-session-ttl: a UI sign-in lasts (0 = 43200) */
} tsr_service_config;

typedef enum tsr_service_role {
    TSR_ROLE_BOTH = 0, /* accept HTTP work and run it */
    TSR_ROLE_API,      /* accept, queue, serve state and results; run nothing */
    TSR_ROLE_WORKER,   /* run queued work; HTTP for probes and /metrics only */
} tsr_service_role;

/* Check a --queue URL; 0, or -1 with the reason in err. */
int tsr_service_check_queue_url(const char *url, char *err, size_t err_size);

/* The --queue check `tessera serve` makes before loading the model (exit 2
 * on failure): the URL, the password (file or environment), --queue-ca,
 * then one connection: a wrong password, an untrusted certificate or TLS
 * against a plain port fail here with a one-line reason; Redis not
 * reachable yet passes (the node waits for it).  Ignores SIGPIPE, as
 * tsr_service_run does.  0, or -1 with the reason in err. */
int tsr_service_check_queue(const tsr_service_config *c, char *err, size_t err_size);

void tsr_service_config_init(tsr_service_config *c);

/* The checks `tessera serve` makes before starting (exit 2 on failure):
 * the key file and token file parse (a token has 16 bytes or more), and
 * protected mode: a non-loopback host needs keys or insecure_no_auth.
 * --url-secret-file needs keys, and a secret of 16..256 base64
 * characters that others cannot read.
 * 0, or -1 with the reason in err. */
int tsr_service_check_auth(const tsr_service_config *c, char *err, size_t err_size);

/* Run until drained.  Returns 0 after a clean drain, or a negative
 * tsr_status when the server could not start (the reason is logged). */
int tsr_service_run(const tsr_service_config *c);

#ifdef __cplusplus
}
#endif
#endif
