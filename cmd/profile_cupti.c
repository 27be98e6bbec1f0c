/* mpress profile_cupti (placeholder until its issue lands). */
#include "cli.h"

int cmd_profile_cupti(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("profile_cupti", "not implemented yet");
    return MPRESS_ESYSTEM;
}
