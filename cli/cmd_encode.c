/*
 * cli/cmd_encode.c - `tessera encode [--model DIR_OR_FILE]
 * [--clip-skip N] [--device D] "prompt" ...`: a debugging aid that runs the
 * model's prompt conditioning (tokenizer, A1111 syntax, text encoders, the
 * family's layer rule) and prints, per prompt, the shape of the context and
 * pooled embeddings with summary statistics.  Comparing these numbers with
 * another implementation's is the quickest way to tell whether a difference
 * in an image starts in the text side.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "backend/backend.h"
#include "commands.h"
#include "core/error.h"
#include "model/model.h"
#include "text/conditioner.h"

#define MAX_PROMPTS 64

static void print_stats(const char *what, const float *v, size_t n, int rows, int cols)
{
    double sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
        sq += (double)v[i] * v[i];
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    const double mean = sum / (double)n;
    const double var = sq / (double)n - mean * mean;
    printf("  %-8s [%d, %d]  mean %+.6f  std %.6f  min %+.6f  max %+.6f\n", what, rows, cols,
           mean, sqrt(var > 0 ? var : 0), lo, hi);
}

int tsr_cmd_encode(int argc, char **argv)
{
    const char *model_path = NULL, *device = "auto", *tokenizer = NULL;
    int64_t clip_skip = 1, threads = 0;
    const tsr_arg_spec specs[] = {
        {"model", TSR_ARG_STRING, &model_path, "DIR_OR_FILE",
         "diffusers folder or single .safetensors (default: the built-in demo model)", 0, 0, 0, 0},
        {"clip-skip", TSR_ARG_INT, &clip_skip, "N",
         "1 = the family's default layer, 2 = one earlier, ... (A1111)", 1, 12, 0, 0},
        {"device", TSR_ARG_STRING, &device, "DEV", "auto, cpu, cuda or cuda:N", 0, 0, 0, 0},
        {"threads", TSR_ARG_INT, &threads, "N", "CPU threads (0 = all cores)", 0, 1024, 0, 0},
        {"tokenizer", TSR_ARG_STRING, &tokenizer, "default|a1111", TSR_CLI_TOKENIZER_HELP, 0, 0, 0,
         0},
    };
    const tsr_cli_command cmd = {
        .name = "encode",
        .synopsis = "encode [--model DIR_OR_FILE] [--clip-skip N] [--device D]\n"
                    "              [--tokenizer default|a1111] PROMPT...",
        .summary = "encode prompts and print embedding shapes and statistics",
        .description = "Runs the model's text conditioning exactly as generation does: the\n"
                       "tokenizer, A1111 emphasis syntax, 75-token windows, the text encoder(s)\n"
                       "and the family's layer choice (SDXL: both encoders, concatenated, plus\n"
                       "the pooled projection).  A debugging aid.",
        .specs = specs,
        .n_specs = (int)(sizeof specs / sizeof specs[0]),
    };
    const char *prompts[MAX_PROMPTS];
    int n = 0;
    int rc = tsr_args_parse(&cmd, argc, argv, prompts, MAX_PROMPTS, &n);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc)
        return TSR_EXIT_USAGE;
    if (n == 0) {
        fprintf(stderr, "tessera encode: give at least one prompt (see tessera encode --help)\n");
        return TSR_EXIT_USAGE;
    }
    if (!model_path)
        model_path = tsr_cli_default_model();
    tsr_tokenizer_mode tok_mode;
    if (tsr_tokenizer_mode_parse(tokenizer, &tok_mode) < 0) {
        tsr_cli_report("encode", TSR_ERR_INVALID);
        return TSR_EXIT_USAGE;
    }

    tsr_backend *be = NULL;
    tsr_model *model = NULL;
    tsr_text_cond *cond = NULL;
    tsr_text_embedding *emb = calloc((size_t)n, sizeof *emb);
    int exit_code = TSR_EXIT_FAILURE;
    if (!emb) {
        tsr_cli_report("encode", tsr_errorf(TSR_ERR_NOMEM, "out of memory"));
        return TSR_EXIT_FAILURE;
    }
    TSR_CHECK_GOTO(rc, tsr_backend_open(device, (int)threads, &be), fail);
    if (tsr_backend_missing_op(be)) {
        rc = tsr_errorf(TSR_ERR_UNSUPPORTED, "%s cannot run %s yet; use --device cpu", be->name,
                        tsr_backend_missing_op(be));
        goto fail;
    }
    TSR_CHECK_GOTO(rc, tsr_model_open(model_path, &model), fail);
    TSR_CHECK_GOTO(rc, tsr_text_cond_open(model, be, &cond), fail);
    tsr_text_cond_set_tokenizer(cond, tok_mode);
    TSR_CHECK_GOTO(rc, tsr_text_cond_encode(cond, prompts, n, (int)clip_skip, emb), fail);
    printf("model: %s (%s), backend: %s\n", model_path, tsr_family_name(tsr_model_family(model)),
           be->name);
    for (int i = 0; i < n; i++) {
        printf("prompt %d: \"%s\"\n", i, prompts[i]);
        print_stats("context", emb[i].context, (size_t)emb[i].n_tokens * emb[i].dim,
                    emb[i].n_tokens, emb[i].dim);
        if (emb[i].pooled)
            print_stats("pooled", emb[i].pooled, (size_t)emb[i].pooled_dim, 1, emb[i].pooled_dim);
    }
    exit_code = TSR_EXIT_OK;
fail:
    if (exit_code != TSR_EXIT_OK)
        tsr_cli_report("encode", rc);
    for (int i = 0; i < n; i++)
        tsr_text_embedding_free(&emb[i]);
    free(emb);
    tsr_text_cond_free(cond);
    tsr_model_close(model);
    tsr_backend_destroy(be);
    return exit_code;
}
