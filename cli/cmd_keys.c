/*
 * cli/cmd_keys.c - `tessera keys new NAME [--admin] --keys FILE`.
 *
 * Why here and like this: a key is made where the operator is, never by
 * the server, and shown once: the file gets only `NAME ROLE SHA256HEX`
 * (service/http/auth.h reads it), so neither the file nor the server ever
 * holds a key.  256 bits from getrandom, written as 64 hex digits after a
 * "tsr_" prefix (easy to spot in a leaked log or a secret scanner).  The
 * file is created 0600 and appended with O_APPEND, one write per line, so
 * a running server's next start reads whole lines only.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "args.h"
#include "commands.h"
#include "tessera.h"

static bool name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && !strchr("_.-", name[i]))
            return false;
    return true;
}

/* Whether FILE already has a line for NAME (a missing file has none). */
static int name_taken(const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : -errno;
    char line[512];
    int taken = 0;
    size_t n = strlen(name);
    while (!taken && fgets(line, sizeof line, f)) {
        const char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        taken = strncmp(p, name, n) == 0 && (p[n] == ' ' || p[n] == '\t');
    }
    fclose(f);
    return taken;
}

static int keys_new(int argc, char **argv)
{
    const char *keys = NULL;
    bool admin = false;
    const tsr_arg_spec specs[] = {
        {"keys", TSR_ARG_STRING, &keys, "FILE", "the key file to append to (required)", 0, 0, 0,
         0},
        {"admin", TSR_ARG_FLAG, &admin, NULL, "the key's role is admin (default: user)", 0, 0, 0,
         0},
    };
    const tsr_cli_command cmd = {
        .name = "keys new",
        .synopsis = "keys new NAME [--admin] --keys FILE",
        .summary = "make an API key for `tessera serve --keys FILE`",
        .description = "Prints a new random key once (256 bits) and appends `NAME ROLE SHA256HEX`\n"
                       "to FILE (created 0600).  The key itself is stored nowhere: keep it.\n"
                       "A running server reads FILE at start (docs/security.md).",
        .specs = specs,
        .n_specs = (int)(sizeof specs / sizeof specs[0]),
    };
    const char *pos[1] = {NULL};
    int n_pos = 0;
    int rc = tsr_args_parse(&cmd, argc, argv, pos, 1, &n_pos);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc)
        return TSR_EXIT_USAGE;
    if (n_pos != 1 || !keys) {
        fprintf(stderr, "tessera keys new: usage: tessera keys new NAME [--admin] --keys FILE\n");
        return TSR_EXIT_USAGE;
    }
    const char *name = pos[0];
    if (!name_ok(name)) {
        fprintf(stderr, "tessera keys new: the name must be 1..63 of A-Z a-z 0-9 _ . -\n");
        return TSR_EXIT_USAGE;
    }
    int taken = name_taken(keys, name);
    if (taken < 0) {
        fprintf(stderr, "tessera keys new: %s: %s\n", keys, strerror(-taken));
        return TSR_EXIT_FAILURE;
    }
    if (taken) {
        fprintf(stderr, "tessera keys new: %s already has a key named '%s'\n", keys, name);
        return TSR_EXIT_USAGE;
    }
    uint8_t raw[32];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        fprintf(stderr, "tessera keys new: getrandom: %s\n", strerror(errno));
        return TSR_EXIT_FAILURE;
    }
    char hex[65], key[70], digest_hex[65];
    tsr_sha256_hex(raw, hex);
    snprintf(key, sizeof key, "tsr_%s", hex);
    uint8_t digest[32];
    tsr_sha256(key, strlen(key), digest);
    tsr_sha256_hex(digest, digest_hex);
    char line[160];
    int len = snprintf(line, sizeof line, "%s %s %s\n", name, admin ? "admin" : "user", digest_hex);
    int fd = open(keys, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, line, (size_t)len) != len || fsync(fd) != 0) {
        fprintf(stderr, "tessera keys new: %s: %s\n", keys, strerror(errno));
        if (fd >= 0)
            close(fd);
        return TSR_EXIT_FAILURE;
    }
    close(fd);
    printf("%s\n", key);
    fflush(stdout);
    return TSR_EXIT_OK;
}

int tsr_cmd_keys(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "new") == 0)
        return keys_new(argc - 1, argv + 1);
    fprintf(stderr, "usage: tessera keys new NAME [--admin] --keys FILE\n");
    return argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
               ? TSR_EXIT_OK
               : TSR_EXIT_USAGE;
}
