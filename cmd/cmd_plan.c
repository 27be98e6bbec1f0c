/* mpress plan (placeholder until its issue lands). */
#include "cli.h"

int cmd_plan(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("plan", "not implemented yet");
    return MPRESS_ESYSTEM;
}
