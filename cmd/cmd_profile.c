/* mpress profile (placeholder until its issue lands). */
#include "cli.h"

int cmd_profile(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("profile", "not implemented yet");
    return MPRESS_ESYSTEM;
}
