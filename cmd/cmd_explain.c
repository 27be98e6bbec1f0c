/* mpress explain PLAN: the plan in words and tables (stages, mapping, what each GPU holds,
 * where the saved tensors go and what that buys), from the plan file alone. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "mpress/planner.h"

static void help(void)
{
    printf("usage: mpress explain PLAN\n\n"
           "Describes PLAN without simulating it: the model and server, the schedule, each\n"
           "stage's op range, GPU, parameters, per-micro-batch times and optimizer placement;\n"
           "the predicted memory of each GPU at its peak by kind; per stage and action\n"
           "(keep, recompute, host_swap, d2d_swap) how many saved tensors, how many bytes\n"
           "that frees on the stage's GPU and how many seconds of work it adds per iteration,\n"
           "and where swapped tensors go; and the baselines the planner compared against.\n"
           "To check the plan's predictions, run it: mpress run PLAN.\n\n"
           "Options:\n"
           "  -h, --help   show this help\n\n" CLI_EXIT_CODES);
}

int cmd_explain(int argc, char **argv)
{
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            help();
            return 0;
        }
        return cli_bad_option("explain", c, argv);
    }
    if (optind != argc - 1)
        return cli_usage("explain", optind >= argc ? "missing PLAN" : "one PLAN only");
    struct mpress_plan *plan = malloc(sizeof(*plan));
    if (!plan) {
        cli_error("explain", "out of memory");
        return MPRESS_ESYSTEM;
    }
    struct mpress_error err;
    mpress_error_clear(&err);
    mpress_plan_init(plan);
    int rc = mpress_plan_load(argv[optind], plan, &err);
    if (rc) {
        rc = cli_fail("explain", "cannot load plan", &err);
    } else {
        char *text = mpress_plan_explain(plan);
        if (!text) {
            cli_error("explain", "out of memory");
            rc = MPRESS_ESYSTEM;
        } else {
            fputs(text, stdout);
            free(text);
        }
    }
    mpress_plan_finish(plan);
    free(plan);
    return rc;
}
