/* mpress topo (placeholder until its issue lands). */
#include "cli.h"

int cmd_topo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("topo", "not implemented yet");
    return MPRESS_ESYSTEM;
}
