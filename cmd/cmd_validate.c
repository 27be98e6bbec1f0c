/* mpress validate (placeholder until its issue lands). */
#include "cli.h"

int cmd_validate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("validate", "not implemented yet");
    return MPRESS_ESYSTEM;
}
