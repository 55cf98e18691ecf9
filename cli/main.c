/*
 * cli/main.c - the `tessera` executable: a dispatcher over
 * subcommands.  Global flags come before the subcommand name.  This is the
 * only place in the project that decides the process exit status.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "core/log.h"
#include "tessera.h"

typedef struct command_entry {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command_entry;

static const command_entry commands[] = {
    {"inspect", tsr_cmd_inspect, "describe a model: family, dtype, parameters per component"},
    {"convert", tsr_cmd_convert, "convert between a diffusers folder and a single LDM-named file"},
    {"tokenize", tsr_cmd_tokenize, "print CLIP token ids for prompts"},
    {"encode", tsr_cmd_encode, "encode a prompt and print embedding statistics"},
    {"generate", tsr_cmd_generate, "generate images from a prompt"},
    {"bench", tsr_cmd_bench, "benchmark ops and models on a backend"},
    {"serve", tsr_cmd_serve, "serve the HTTP API (jobs, batches, events, images)"},
    {"keys", tsr_cmd_keys, "make API keys for serve --keys (keys new NAME --keys FILE)"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tessera [--log-level LEVEL] COMMAND [options]\n\n"
            "Tessera %s: Stable Diffusion image generation in C.\n\ncommands:\n",
            tsr_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\nglobal options:\n"
            "  --log-level LEVEL   debug, info, warn, error or none (default info)\n"
            "  --version           print the version\n"
            "  --help              show this help\n\n"
            "Run 'tessera COMMAND --help' for the options of a command.\n\n"
            "%s\n",
            TSR_ARGS_EXIT_HELP);
}

void tsr_cli_report(const char *cmd, int status)
{
    const char *detail = tsr_last_error();
    if (detail[0])
        fprintf(stderr, "tessera %s: %s\n", cmd, detail);
    else
        fprintf(stderr, "tessera %s: %s\n", cmd, tsr_strerror(status));
}

const char *tsr_cli_default_model(void)
{
    const char *env = getenv("TESSERA_DEFAULT_MODEL");
    return env && *env ? env : TSR_SOURCE_DIR "/models/demo";
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return TSR_EXIT_OK;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("tessera %s\n", tsr_version());
            return TSR_EXIT_OK;
        }
        if (strcmp(argv[i], "--log-level") == 0 && i + 1 < argc) {
            int level = tsr_log_level_parse(argv[++i]);
            if (level < 0) {
                fprintf(stderr, "tessera: --log-level must be debug, info, warn, error or none\n");
                return TSR_EXIT_USAGE;
            }
            tsr_log_set_level((tsr_log_level)level);
            continue;
        }
        fprintf(stderr, "tessera: unknown option '%s' (see tessera --help)\n", argv[i]);
        return TSR_EXIT_USAGE;
    }
    if (i >= argc) {
        usage(stderr);
        return TSR_EXIT_USAGE;
    }
    for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++)
        if (strcmp(argv[i], commands[c].name) == 0)
            return commands[c].fn(argc - i, argv + i);
    fprintf(stderr, "tessera: unknown command '%s' (see tessera --help)\n", argv[i]);
    return TSR_EXIT_USAGE;
}
