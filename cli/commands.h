/*
 * cli/commands.h - the subcommands of the `tessera` executable.
 * Each lives in its own cmd_<name>.c and returns a process exit code.
 */
#ifndef TSR_CLI_COMMANDS_H
#define TSR_CLI_COMMANDS_H

int tsr_cmd_inspect(int argc, char **argv);
int tsr_cmd_convert(int argc, char **argv);
int tsr_cmd_tokenize(int argc, char **argv);
int tsr_cmd_encode(int argc, char **argv);
int tsr_cmd_generate(int argc, char **argv);
int tsr_cmd_bench(int argc, char **argv);
int tsr_cmd_serve(int argc, char **argv);
int tsr_cmd_keys(int argc, char **argv);

/* Exit codes shared by the subcommands. */
enum { TSR_EXIT_OK = 0, TSR_EXIT_FAILURE = 1, TSR_EXIT_USAGE = 2 };

/* Print "tessera CMD: <strerror>: <detail>" for a failed status. */
void tsr_cli_report(const char *cmd, int status);

/* --help text of --tokenizer (generate, tokenize, encode). */
#define TSR_CLI_TOKENIZER_HELP                                                           \
    "default: as transformers >= 5 (diffusers today); a1111: the slow tokenizer with " \
    "ftfy, as A1111 runs it (docs/prompts.md)"

/* The built-in default model directory (models/demo in the source tree). */
const char *tsr_cli_default_model(void);

#endif
