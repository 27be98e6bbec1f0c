/* mpress run (placeholder until its issue lands). */
#include "cli.h"

int cmd_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("run", "not implemented yet");
    return MPRESS_ESYSTEM;
}
