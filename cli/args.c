/*
 * cli/args.c - see args.h.
 */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"

/* A flag's help with "{}" replaced by the value its destination holds
 * (the default, when nothing on the command line set it yet): so a
 * default is written once, where the destination is initialised. */
static void print_help(FILE *out, const tsr_arg_spec *s)
{
    const char *mark = strstr(s->help, "{}");
    if (!mark) {
        fputs(s->help, out);
        return;
    }
    fwrite(s->help, 1, (size_t)(mark - s->help), out);
    switch (s->type) {
    case TSR_ARG_STRING: {
        const char *v = *(const char *const *)s->dest;
        fputs(v ? v : "none", out);
        break;
    }
    case TSR_ARG_INT: fprintf(out, "%lld", (long long)*(const int64_t *)s->dest); break;
    case TSR_ARG_FLOAT: fprintf(out, "%g", *(const double *)s->dest); break;
    case TSR_ARG_U64: fprintf(out, "%llu", (unsigned long long)*(const uint64_t *)s->dest); break;
    case TSR_ARG_FLAG: fputs(*(const bool *)s->dest ? "on" : "off", out); break;
    }
    fputs(mark + 2, out);
}

void tsr_args_usage(FILE *out, const tsr_cli_command *cmd)
{
    fprintf(out, "usage: tessera %s\n\n%s\n", cmd->synopsis, cmd->summary);
    if (cmd->description)
        fprintf(out, "\n%s\n", cmd->description);
    fprintf(out, "\noptions:\n");
    for (int i = 0; i < cmd->n_specs; i++) {
        const tsr_arg_spec *s = &cmd->specs[i];
        char left[64];
        if (s->type == TSR_ARG_FLAG)
            snprintf(left, sizeof left, "--%s", s->name);
        else
            snprintf(left, sizeof left, "--%s %s", s->name, s->metavar ? s->metavar : "VALUE");
        fprintf(out, "  %-26s ", left);
        print_help(out, s);
        fputc('\n', out);
    }
    fprintf(out, "  %-26s %s\n", "--help", "show this help");
    fprintf(out, "\n%s\n", TSR_ARGS_EXIT_HELP);
}

static const tsr_arg_spec *find_spec(const tsr_cli_command *cmd, const char *name, size_t len)
{
    for (int i = 0; i < cmd->n_specs; i++)
        if (strlen(cmd->specs[i].name) == len && strncmp(cmd->specs[i].name, name, len) == 0)
            return &cmd->specs[i];
    return NULL;
}

/* An optional sign and decimal digits only (strtoll/strtoull also take
 * leading blanks, and strtoull silently negates "-5"). */
static bool plain_integer(const char *v, bool allow_minus)
{
    const char *p = v;
    if (*p == '+' || (allow_minus && *p == '-'))
        p++;
    if (!*p)
        return false;
    for (; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

static int int_range_error(const tsr_cli_command *cmd, const tsr_arg_spec *s, const char *v)
{
    fprintf(stderr, "tessera %s: --%s must be between %lld and %lld, got %s\n", cmd->name, s->name,
            (long long)s->min, (long long)s->max, v);
    return TSR_ERR_INVALID;
}

static int float_range_error(const tsr_cli_command *cmd, const tsr_arg_spec *s, const char *v)
{
    if (s->fmin_open)
        fprintf(stderr, "tessera %s: --%s must be in (%g, %g], got %s\n", cmd->name, s->name,
                s->fmin, s->fmax, v);
    else
        fprintf(stderr, "tessera %s: --%s must be between %g and %g, got %s\n", cmd->name, s->name,
                s->fmin, s->fmax, v);
    return TSR_ERR_INVALID;
}

static int set_value(const tsr_cli_command *cmd, const tsr_arg_spec *s, const char *v)
{
    char *end = NULL;
    errno = 0;
    switch (s->type) {
    case TSR_ARG_STRING: *(const char **)s->dest = v; break;
    case TSR_ARG_INT: {
        if (!plain_integer(v, true)) {
            fprintf(stderr, "tessera %s: --%s expects an integer, got '%s'\n", cmd->name, s->name, v);
            return TSR_ERR_INVALID;
        }
        long long x = strtoll(v, &end, 10);
        if (errno == ERANGE || x < s->min || x > s->max)
            return int_range_error(cmd, s, v);
        *(int64_t *)s->dest = x;
        break;
    }
    case TSR_ARG_U64: {
        if (s->min == -1 && strcmp(v, "-1") == 0) {
            if (s->seen)
                *s->seen = false;
            return 0; /* "not given": the default applies */
        }
        if (!plain_integer(v, true)) {
            fprintf(stderr, "tessera %s: --%s expects an integer, got '%s'\n", cmd->name, s->name, v);
            return TSR_ERR_INVALID;
        }
        unsigned long long x = v[0] == '-' ? 0 : strtoull(v, &end, 10);
        if (v[0] == '-' || errno == ERANGE) {
            fprintf(stderr, "tessera %s: --%s must be between 0 and %llu%s, got %s\n", cmd->name,
                    s->name, (unsigned long long)UINT64_MAX, s->min == -1 ? " (or -1)" : "", v);
            return TSR_ERR_INVALID;
        }
        *(uint64_t *)s->dest = x;
        break;
    }
    case TSR_ARG_FLOAT: {
        double x = strtod(v, &end);
        if (!*v || *end || isnan(x)) {
            fprintf(stderr, "tessera %s: --%s expects a number, got '%s'\n", cmd->name, s->name, v);
            return TSR_ERR_INVALID;
        }
        if (!isfinite(x) || x < s->fmin || x > s->fmax || (s->fmin_open && x <= s->fmin))
            return float_range_error(cmd, s, v);
        *(double *)s->dest = x;
        break;
    }
    case TSR_ARG_FLAG: *(bool *)s->dest = true; break;
    default: return TSR_ERR_INTERNAL;
    }
    if (s->seen)
        *s->seen = true;
    return 0;
}

int tsr_args_parse(const tsr_cli_command *cmd, int argc, char **argv, const char **positional,
                   int max_pos, int *n_pos)
{
    int np = 0;
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (!only_pos && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            tsr_args_usage(stdout, cmd);
            return TSR_ARGS_HELP;
        }
        if (!only_pos && a[0] == '-' && a[1] == '-' && a[2]) {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            const tsr_arg_spec *s = find_spec(cmd, name, len);
            if (!s) {
                fprintf(stderr, "tessera %s: unknown option '--%.*s' (see tessera %s --help)\n",
                        cmd->name, (int)len, name, cmd->name);
                return TSR_ERR_INVALID;
            }
            if (s->type == TSR_ARG_FLAG) {
                if (eq) {
                    fprintf(stderr, "tessera %s: --%s takes no value\n", cmd->name, s->name);
                    return TSR_ERR_INVALID;
                }
                *(bool *)s->dest = true;
                if (s->seen)
                    *s->seen = true;
                continue;
            }
            const char *v = eq ? eq + 1 : NULL;
            if (!v) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "tessera %s: --%s needs a value (%s)\n", cmd->name, s->name,
                            s->metavar ? s->metavar : "VALUE");
                    return TSR_ERR_INVALID;
                }
                v = argv[++i];
            }
            int rc = set_value(cmd, s, v);
            if (rc)
                return rc;
            continue;
        }
        if (np >= max_pos) {
            fprintf(stderr, "tessera %s: unexpected argument '%s' (see tessera %s --help)\n",
                    cmd->name, a, cmd->name);
            return TSR_ERR_INVALID;
        }
        positional[np++] = a;
    }
    if (n_pos)
        *n_pos = np;
    return 0;
}
