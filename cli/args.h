/*
 * cli/args.h - declarative command-line flags for the subcommands.
 *
 * Each subcommand lists its flags in a table; tsr_args_parse() fills the
 * destinations, checks numeric ranges, collects positional arguments and
 * prints the generated --help.  Every rejection names the flag.
 */
#ifndef TSR_CLI_ARGS_H
#define TSR_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum tsr_arg_type {
    TSR_ARG_FLAG,   /* bool, no value */
    TSR_ARG_STRING, /* const char * */
    TSR_ARG_INT,    /* int64_t, checked against [min, max] */
    TSR_ARG_FLOAT,  /* double, checked against [fmin, fmax] */
} tsr_arg_type;

typedef struct tsr_arg_spec {
    const char *name; /* "steps" for --steps */
    tsr_arg_type type;
    void *dest;
    const char *metavar; /* "N", "PATH" */
    const char *help;
    int64_t min, max;    /* TSR_ARG_INT */
    double fmin, fmax;   /* TSR_ARG_FLOAT */
} tsr_arg_spec;

typedef struct tsr_cli_command {
    const char *name;
    const char *synopsis; /* "inspect [--json] PATH" */
    const char *summary;  /* one line */
    const char *description; /* paragraph(s) printed by --help; may be NULL */
    const tsr_arg_spec *specs;
    int n_specs;
} tsr_cli_command;

#define TSR_ARGS_HELP 1 /* tsr_args_parse printed --help */

/* Parse argv[1..argc) (argv[0] is the subcommand name).  Positional
 * arguments are stored in positional[] (up to max_pos; more is an error).
 * Returns 0, TSR_ARGS_HELP, or a negative status after printing the error. */
int tsr_args_parse(const tsr_cli_command *cmd, int argc, char **argv, const char **positional,
                   int max_pos, int *n_pos);
void tsr_args_usage(FILE *out, const tsr_cli_command *cmd);

#endif
