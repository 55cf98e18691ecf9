/*
 * cli/args.h - declarative command-line flags for the subcommands.
 *
 * Each subcommand lists its flags in a table; tsr_args_parse() fills the
 * destinations, checks numeric ranges, collects positional arguments and
 * prints the generated --help.  Every rejection names the flag, and a
 * number outside its range (including one too large for 64 bits) gets the
 * range in the message, worded as the help states it.
 *
 * Exit status, the same for every command (printed by every --help):
 *   0  success
 *   1  the command line was fine but the work failed: a named file is
 *      missing, unreadable or not a valid model or image, an output cannot
 *      be written, the backend or the generation failed
 *   2  the command line is wrong: unknown option, malformed or out-of-range
 *      value, missing or conflicting options, or a value the model cannot
 *      take (e.g. --clip-skip past its text encoder's layers)
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
    TSR_ARG_FLOAT,  /* double, checked against [fmin, fmax] ((fmin, fmax] with fmin_open) */
    TSR_ARG_U64,    /* uint64_t, 0..2^64-1; with min == -1 the value -1 is also
                     * accepted and means "not given" (*seen stays false) */
} tsr_arg_type;

typedef struct tsr_arg_spec {
    const char *name; /* "steps" for --steps */
    tsr_arg_type type;
    void *dest;
    const char *metavar; /* "N", "PATH" */
    const char *help;    /* "{}" in it prints the destination's value at
                          * --help time: write "(default {})" and the default
                          * stays where the destination is initialised */
    int64_t min, max;    /* TSR_ARG_INT */
    double fmin, fmax;   /* TSR_ARG_FLOAT */
    bool fmin_open;      /* TSR_ARG_FLOAT: fmin itself is excluded */
    bool *seen;          /* optional: set true when the flag is given */
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

/* The exit-status paragraph every --help ends with. */
#define TSR_ARGS_EXIT_HELP                                                                 \
    "exit status: 0 success; 1 the work failed (a file missing, unreadable or invalid, an\n" \
    "output not writable, the model or the backend failed); 2 a usage error (unknown\n"      \
    "option, bad or out-of-range value, missing or conflicting options, a value the\n"      \
    "model cannot take)."

#endif
