/* mpress run PLAN: executes a plan on a backend and reports time and memory next to the plan's
 * predictions. Only the simulator (`--backend sim`) exists in this build; it writes the
 * report, a Chrome trace and an SVG memory plot on request. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mpress/sim.h"

static void help(void)
{
    printf("usage: mpress run PLAN [--backend sim] [--iterations N] [--report FILE.json]\n"
           "                       [--trace FILE.json] [--svg FILE.svg]\n\n"
           "Replays PLAN event by event on its server and prints the iteration time,\n"
           "samples/s, model TFLOP/s, each GPU's peak memory against its capacity, time\n"
           "stalled on swaps and on boundary transfers, and link utilization; next to what\n"
           "the plan predicts (time, samples/s, TFLOP/s, peaks), the prediction and the\n"
           "difference in percent. The simulator models a\n"
           "compute stream and copy engines per GPU, links shared fairly by concurrent\n"
           "copies, and every allocation (docs/simulator.md). A plan whose simulated peak\n"
           "exceeds a GPU's capacity (or the host's memory, for pinned host buffers) fails\n"
           "with exit 1, naming the GPU, the time and the largest residents (the report is\n"
           "still printed and the requested files are still written).\n\n"
           "Options:\n"
           "  --backend NAME     sim (the default and the only backend in this build; host\n"
           "                     and cuda are not available yet and exit 4)\n"
           "  --iterations N     iterations to replay, 1 to 20 (default 3); the last one\n"
           "                     is reported as the steady state\n"
           "  --report FILE      write the report as mpress-sim-report JSON\n"
           "  --trace FILE       write a Chrome trace event file (open in Perfetto or\n"
           "                     chrome://tracing): one track per GPU stream and copy\n"
           "                     engine, counters per link and for each GPU's memory\n"
           "  --svg FILE         write an SVG: memory per GPU over the reported iteration\n"
           "                     and what is resident at each GPU's peak against capacity\n"
           "  --wait-for-memory  what-if: a compute op whose memory would not fit waits for\n"
           "                     pending evictions from its GPU instead of running out of\n"
           "                     memory (a runtime that throttles); reports the time held\n"
           "  -h, --help         show this help\n\n" CLI_EXIT_CODES);
}

static int write_text(const char *file, char *text, struct mpress_error *err)
{
    if (!text)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    int rc = mpress_write_file_atomic(file, text, strlen(text), err);
    free(text);
    return rc;
}

static int write_json(const char *file, json_t *root, struct mpress_error *err)
{
    if (!root)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    int rc = mpress_json_write_file(file, root, err);
    json_decref(root);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"backend", required_argument, NULL, 'b'},
        {"iterations", required_argument, NULL, 'i'},
        {"report", required_argument, NULL, 'r'},
        {"trace", required_argument, NULL, 't'},
        {"svg", required_argument, NULL, 's'},
        {"wait-for-memory", no_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *backend = "sim", *report = NULL, *trace = NULL, *svg = NULL;
    long iterations = 3;
    int c, wait_mem = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'b':
            backend = optarg;
            break;
        case 'i':
            if (cli_parse_int(optarg, 1, 20, &iterations))
                return cli_usage("run", "--iterations: expected an integer from 1 to 20, "
                                        "got '%s'", optarg);
            break;
        case 'r':
            report = optarg;
            break;
        case 't':
            trace = optarg;
            break;
        case 's':
            svg = optarg;
            break;
        case 'w':
            wait_mem = 1;
            break;
        case 'h':
            help();
            return 0;
        default:
            return cli_bad_option("run", c, argv);
        }
    }
    if (strcmp(backend, "host") == 0 || strcmp(backend, "cuda") == 0) {
        cli_error("run", "backend '%s' is not available in this build (only 'sim' is)",
                  backend);
        return MPRESS_ESYSTEM;
    }
    if (strcmp(backend, "sim") != 0)
        return cli_usage("run", "unknown backend '%s' (sim, host or cuda)", backend);
    if (optind >= argc)
        return cli_usage("run", "missing PLAN");
    if (optind + 1 < argc)
        return cli_usage("run", "one PLAN only, got '%s' too", argv[optind + 1]);
    const char *file = argv[optind];
    const char *inputs[] = {file, NULL};
    if ((report && cli_check_output("run", "--report", report, MPRESS_SIM_REPORT_FORMAT,
                                    inputs)) ||
        (trace && cli_check_output("run", "--trace", trace, CLI_KIND_TRACE, inputs)) ||
        (svg && cli_check_output("run", "--svg", svg, CLI_KIND_SVG, inputs)) ||
        cli_check_distinct("run", "--report", report, "--trace", trace) ||
        cli_check_distinct("run", "--report", report, "--svg", svg) ||
        cli_check_distinct("run", "--trace", trace, "--svg", svg))
        return MPRESS_EUSAGE;

    struct mpress_error err;
    mpress_error_clear(&err);
    struct mpress_plan *plan = malloc(sizeof(*plan));
    if (!plan) {
        cli_error("run", "out of memory");
        return MPRESS_ESYSTEM;
    }
    mpress_plan_init(plan);
    int rc = mpress_plan_load(file, plan, &err);
    if (rc) {
        rc = cli_fail("run", "cannot load plan", &err);
        mpress_plan_finish(plan);
        free(plan);
        return rc;
    }
    struct mpress_sim_options opt;
    mpress_sim_options_init(&opt);
    opt.iterations = (int)iterations;
    opt.wait_for_memory = wait_mem;
    struct mpress_sim *sim = NULL;
    rc = mpress_sim_run(plan, &opt, &sim, &err);
    if (rc) {
        char what[600];
        snprintf(what, sizeof(what), "cannot simulate '%s'", file);
        rc = cli_fail("run", what, &err);
        goto done;
    }
    /* the outputs read the neutral run report, as a real run's would */
    const struct mpress_run_report *rr = mpress_sim_run_report(sim);
    if ((report && write_json(report, mpress_run_report_json(rr), &err)) ||
        (trace && write_text(trace, mpress_run_trace(rr), &err)) ||
        (svg && write_text(svg, mpress_run_svg(rr), &err))) {
        rc = cli_fail("run", "cannot write output", &err);
        goto done;
    }
    char *text = mpress_run_render(rr);
    if (!text) {
        cli_error("run", "out of memory");
        rc = MPRESS_ESYSTEM;
        goto done;
    }
    fputs(text, stdout);
    free(text);
    char *oom = mpress_run_oom_text(rr);
    if (oom) {
        fflush(stdout);
        cli_error("run", "'%s' does not fit: %s", file, oom);
        free(oom);
        rc = MPRESS_EINFEASIBLE;
    }
done:
    mpress_sim_destroy(sim);
    mpress_plan_finish(plan);
    free(plan);
    return rc;
}
