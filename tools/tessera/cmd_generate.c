/*
 * tools/tessera/cmd_generate.c - placeholder until the module behind it lands.
 */
#include <stdio.h>

#include "commands.h"

int tsr_cmd_generate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "tessera generate: not available in this build yet\n");
    return TSR_EXIT_FAILURE;
}
