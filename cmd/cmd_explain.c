/* mpress explain (placeholder until its issue lands). */
#include "cli.h"

int cmd_explain(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("explain", "not implemented yet");
    return MPRESS_ESYSTEM;
}
