/*
 * cli/cmd_tokenize.c - `tessera tokenize [--model DIR_OR_FILE]
 * [--file PROMPTS.txt] [--json] ["prompt" ...]`.
 *
 * Why: the token ids are the first thing to compare when an image differs
 * from another implementation's.  It runs exactly what generation runs
 * (the model's tokenizer, A1111 syntax, 75-token chunks) and prints one line
 * per prompt: the ids of every 77-token window, separated by spaces.
 * --json adds the per-token weights and the chunk structure.  --window
 * prints CLIPTokenizer(prompt, padding="max_length", max_length=77,
 * truncation=True) instead, with no syntax, for comparison with transformers.
 *
 * --tokenizer default|a1111 picks the mode (transformers >= 5, or the slow
 * tokenizer with ftfy as A1111 runs it; docs/prompts.md).
 *
 * Tokenizer choice: DIR/<subfolder> (default "tokenizer") when it holds
 * vocab.json or tokenizer.json, else DIR itself when it does, else (a single
 * .safetensors file, or no tokenizer files) the embedded CLIP BPE with SD 1.x
 * specials.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "text/prompt.h"
#include "text/tokenizer.h"

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* DIR holds a tokenizer: vocab.json (+ merges.txt), or tokenizer.json as
 * transformers 5 saves it. */
static bool is_tokenizer_dir(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    if (is_file(path))
        return true;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    return is_file(path);
}

static int open_tokenizer(const char *model, const char *sub, const char *pad, tsr_tokenizer **out)
{
    char path[4096];
    if (model && is_dir(model)) {
        snprintf(path, sizeof path, "%s/%s", model, sub);
        if (is_tokenizer_dir(path)) {
            TSR_INFO("tokenizer: %s", path);
            return tsr_tokenizer_load(path, out);
        }
        if (is_tokenizer_dir(model)) {
            TSR_INFO("tokenizer: %s", model);
            return tsr_tokenizer_load(model, out);
        }
        TSR_WARN("%s has no %s/vocab.json or tokenizer.json; using the embedded CLIP BPE", model,
                 sub);
    } else if (model && !is_file(model)) {
        return tsr_errorf(TSR_ERR_NOT_FOUND, "%s: no such file or folder", model);
    } else if (model) {
        TSR_INFO("%s is a single file: using the embedded CLIP BPE", model);
    }
    return tsr_tokenizer_load_default_pad(pad ? pad : "<|endoftext|>", out);
}

static int print_one(tsr_tokenizer *tok, const char *prompt, bool json, bool window,
                     const tsr_prompt_options *opt)
{
    tsr_prompt_tokens t = {0};
    int rc;
    if (window) {
        int32_t ids[TSR_CLIP_MAX_LENGTH];
        rc = tsr_tokenizer_encode_window(tok, prompt, strlen(prompt), ids);
        if (rc < 0)
            return rc;
        t.n_chunks = 1;
        t.ids = malloc(sizeof ids);
        t.weights = malloc(TSR_CLIP_MAX_LENGTH * sizeof(float));
        if (!t.ids || !t.weights) {
            tsr_prompt_tokens_free(&t);
            return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < TSR_CLIP_MAX_LENGTH; i++)
            t.ids[i] = ids[i], t.weights[i] = 1.0f;
    } else {
        rc = tsr_prompt_tokenize(tok, prompt, strlen(prompt), opt, &t);
        if (rc < 0)
            return rc;
    }
    if (!json) {
        for (int i = 0; i < t.n_chunks * TSR_CLIP_MAX_LENGTH; i++)
            printf(i ? " %d" : "%d", t.ids[i]);
        printf("\n");
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "prompt", prompt);
        cJSON_AddNumberToObject(o, "n_chunks", t.n_chunks);
        cJSON *chunks = cJSON_AddArrayToObject(o, "chunks");
        for (int c = 0; c < t.n_chunks; c++) {
            cJSON *ch = cJSON_CreateObject();
            cJSON *ids = cJSON_AddArrayToObject(ch, "ids");
            cJSON *ws = cJSON_AddArrayToObject(ch, "weights");
            for (int i = 0; i < TSR_CLIP_MAX_LENGTH; i++) {
                cJSON_AddItemToArray(ids, cJSON_CreateNumber(t.ids[c * TSR_CLIP_MAX_LENGTH + i]));
                char num[32];
                snprintf(num, sizeof num, "%.7g", t.weights[c * TSR_CLIP_MAX_LENGTH + i]);
                cJSON_AddItemToArray(ws, cJSON_CreateRaw(num));
            }
            cJSON_AddItemToArray(chunks, ch);
        }
        char *s = cJSON_PrintUnformatted(o);
        if (s)
            printf("%s\n", s);
        free(s);
        cJSON_Delete(o);
    }
    tsr_prompt_tokens_free(&t);
    return 0;
}

int tsr_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *sub = "tokenizer", *pad = NULL, *tokenizer = NULL;
    bool json = false, window = false, no_emphasis = false;
    int64_t backtrack = 20;
    const tsr_arg_spec specs[] = {
        {"model", TSR_ARG_STRING, &model, "DIR_OR_FILE",
         "model folder, tokenizer folder or single file (default: models/demo, else the "
         "embedded CLIP BPE)", 0, 0, 0, 0},
        {"file", TSR_ARG_STRING, &file, "PROMPTS.txt", "read prompts from a file, one per line",
         0, 0, 0, 0},
        {"json", TSR_ARG_FLAG, &json, NULL, "print JSON: chunks, ids and weights per prompt", 0,
         0, 0, 0},
        {"window", TSR_ARG_FLAG, &window, NULL,
         "print CLIPTokenizer's 77-token window (no syntax, truncated) instead", 0, 0, 0, 0},
        {"no-emphasis", TSR_ARG_FLAG, &no_emphasis, NULL, "take ( ) [ ] : \\ and BREAK literally",
         0, 0, 0, 0},
        {"subfolder", TSR_ARG_STRING, &sub, "NAME",
         "tokenizer subfolder of a model folder (tokenizer_2 for SDXL's second)", 0, 0, 0, 0},
        {"pad", TSR_ARG_STRING, &pad, "TOKEN",
         "pad token for the embedded tokenizer (\"!\" for OpenCLIP encoders)", 0, 0, 0, 0},
        {"comma-backtrack", TSR_ARG_INT, &backtrack, "N",
         "move text after a comma this close to a chunk end to the next chunk (0 = off)", 0, 75,
         0, 0},
        {"tokenizer", TSR_ARG_STRING, &tokenizer, "default|a1111", TSR_CLI_TOKENIZER_HELP, 0, 0, 0,
         0},
    };
    const tsr_cli_command cmd = {
        "tokenize",
        "tokenize [--model DIR_OR_FILE] [--file PROMPTS.txt] [--json]\n"
        "                [--tokenizer default|a1111] [\"prompt\" ...]",
        "print CLIP token ids for prompts",
        "Prints one line per prompt: the ids of every 77-token window ([BOS] up to 75 tokens\n"
        "[EOS] [PAD]...), separated by spaces.  Prompts use A1111 syntax: (word), (word:1.3),\n"
        "[word], \\( \\), BREAK (see docs/prompts.md).",
        specs, (int)(sizeof specs / sizeof specs[0])};
    const char *pos[64];
    int n_pos = 0;
    int rc = tsr_args_parse(&cmd, argc, argv, pos, 64, &n_pos);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc < 0)
        return TSR_EXIT_USAGE;
    if (n_pos == 0 && !file) {
        fprintf(stderr, "tessera tokenize: give a prompt or --file\n");
        return TSR_EXIT_USAGE;
    }
    tsr_tokenizer_mode tok_mode;
    if (tsr_tokenizer_mode_parse(tokenizer, &tok_mode) < 0) {
        tsr_cli_report("tokenize", TSR_ERR_INVALID);
        return TSR_EXIT_USAGE;
    }
    if (!model && is_dir(tsr_cli_default_model()))
        model = tsr_cli_default_model();
    tsr_tokenizer *tok = NULL;
    rc = open_tokenizer(model, sub, pad, &tok);
    if (rc < 0) {
        tsr_cli_report("tokenize", rc);
        return TSR_EXIT_FAILURE;
    }
    tsr_tokenizer_set_mode(tok, tok_mode);
    tsr_prompt_options opt;
    tsr_prompt_options_init(&opt);
    opt.emphasis = !no_emphasis;
    opt.comma_backtrack = (int)backtrack;
    int status = TSR_EXIT_OK;
    for (int i = 0; i < n_pos && status == TSR_EXIT_OK; i++) {
        rc = print_one(tok, pos[i], json, window, &opt);
        if (rc < 0) {
            tsr_cli_report("tokenize", rc);
            status = TSR_EXIT_FAILURE;
        }
    }
    if (file && status == TSR_EXIT_OK) {
        FILE *f = fopen(file, "rb");
        if (!f) {
            fprintf(stderr, "tessera tokenize: %s: cannot open\n", file);
            status = TSR_EXIT_FAILURE;
        } else {
            char *line = NULL;
            size_t cap = 0;
            ssize_t n;
            long lineno = 0;
            int failed = 0;
            while ((n = getline(&line, &cap, f)) >= 0) {
                lineno++;
                while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                    line[--n] = '\0';
                /* A failing line prints an empty line (so output lines stay
                 * aligned with input lines) and its error on stderr. */
                if (memchr(line, '\0', (size_t)n)) {
                    fprintf(stderr, "tessera tokenize: %s:%ld: NUL byte in prompt\n", file, lineno);
                    rc = -1;
                } else {
                    rc = print_one(tok, line, json, window, &opt);
                    if (rc < 0) {
                        tsr_error_prefix(rc, "%s:%ld", file, lineno);
                        tsr_cli_report("tokenize", rc);
                    }
                }
                if (rc < 0) {
                    printf("\n");
                    failed++;
                }
            }
            if (failed)
                status = TSR_EXIT_FAILURE;
            free(line);
            fclose(f);
        }
    }
    tsr_tokenizer_free(tok);
    return status;
}
