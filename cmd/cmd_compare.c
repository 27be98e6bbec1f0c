/* mpress compare: an mpress plan beside the systems a user would run instead on the same
 * server (DeepSpeed ZeRO policies, Megatron recompute), predicted and simulated. The rows come
 * from mpress_compare_create (lib/plan/compare.c); this file parses options and prints. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mpress/model.h"

static const char *const CMD = "compare";

static void help(void)
{
    printf("usage: mpress compare [PROFILE] [--gpus N] [--topology NAME|FILE]\n"
           "                      [--micro-batches M] [--node-limit N] [--plan PLAN]\n"
           "                      [--no-sim] [--json FILE]\n\n"
           "Plans PROFILE as `mpress plan` does (or takes --plan) and prints it beside what a\n"
           "user would run instead on the same server, at the same global batch (M x the\n"
           "profile's micro-batch): DeepSpeed ZeRO-Offload (ZeRO-2, optimizer on the CPU),\n"
           "ZeRO-3 and ZeRO-Infinity without NVMe (parameters and optimizer on the host), each\n"
           "with and without activation checkpointing, as data-parallel runs with ring\n"
           "collectives over the server's links; and Megatron-style selective (attention\n"
           "core) and full recompute on the plan's pipeline. Each row: whether it fits, the\n"
           "fullest GPU's predicted peak, the predicted and simulated iteration time, samples/s\n"
           "and the plan's speed-up over it. Formulas: docs/cost-model.md.\n\n"
           "Without PROFILE: the analytic profile of %s on the topology's GPU.\n\n"
           "Options:\n"
           "  --topology NAME|FILE  built-in server or mpress-topology file (default dgx1)\n"
           "  --gpus N              use the first N GPUs (default: all of the topology)\n"
           "  --micro-batches M     micro-batches per iteration (default 16)\n"
           "  --node-limit N        the plan's MILP node limit (default 5000)\n"
           "  --plan PLAN           compare against this plan (its server and batch) instead\n"
           "                        of planning\n"
           "  --no-sim              predictions only\n"
           "  --json FILE           also write the table as JSON ('-' for stdout)\n\n"
           CLI_EXIT_CODES,
           MPRESS_DEFAULT_MODEL);
}

static double gib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0 * 1024.0);
}

static void print_table(const struct mpress_plan *plan, const char *topo_arg,
                        const struct mpress_compare *t)
{
    const struct mpress_profile *p = &plan->profile;
    int mb = p->model.micro_batch > 0 ? p->model.micro_batch : 1;
    printf("%s (%s profile, %s) on %s, %d GPUs, global batch %d (%d micro-batches of %d)\n",
           p->model.name, p->source, p->device, topo_arg, plan->topology.n_gpus,
           plan->micro_batches * mb, plan->micro_batches, mb);
    printf("\n%-20s %-4s %12s %12s %12s %10s %8s\n", "policy", "fits", "peak GiB",
           "predicted s", "simulated s", "samples/s", "speed-up");
    for (int i = 0; i < t->n_rows; i++) {
        const struct mpress_compare_row *r = &t->rows[i];
        char pred[32] = "-", sim[32] = "-", sps[32] = "-", sp[32] = "-";
        if (r->fits) {
            snprintf(pred, sizeof(pred), "%.4f", r->predicted_s);
            snprintf(sps, sizeof(sps), "%.3f", r->samples_per_s);
            snprintf(sp, sizeof(sp), "%.2fx", r->speedup);
            if (r->simulated_s > 0)
                snprintf(sim, sizeof(sim), "%.4f%s", r->simulated_s, r->sim_oom ? " oom" : "");
        }
        char peak[32];
        snprintf(peak, sizeof(peak), "%.2f/%.0f", gib(r->peak), gib(r->capacity));
        printf("%-20s %-4s %12s %12s %12s %10s %8s\n", r->policy, r->fits ? "yes" : "no", peak,
               pred, sim, sps, sp);
    }
    int zero_rows = 0;
    for (int i = 0; i < t->n_rows; i++)
        zero_rows += strncmp(t->rows[i].policy, "zero", 4) == 0 &&
                     t->rows[i].samples != t->rows[0].samples;
    if (zero_rows)
        printf("\nZeRO rows whose batch differs: %d micro-batches do not split evenly over %d "
               "GPUs, each GPU runs ceil(M / N); samples/s counts what they run\n",
               plan->micro_batches, plan->topology.n_gpus);
}

static json_t *table_json(const struct mpress_plan *plan, const char *topo_arg,
                          const struct mpress_compare *t)
{
    json_t *root = json_object(), *rows = json_array();
    json_object_set_new(root, "format", json_string("mpress-compare"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "model", json_string(plan->profile.model.name));
    json_object_set_new(root, "topology", json_string(topo_arg));
    json_object_set_new(root, "gpus", json_integer(plan->topology.n_gpus));
    json_object_set_new(root, "micro_batches", json_integer(plan->micro_batches));
    for (int i = 0; i < t->n_rows; i++) {
        const struct mpress_compare_row *r = &t->rows[i];
        json_t *o = json_object();
        json_object_set_new(o, "policy", json_string(r->policy));
        json_object_set_new(o, "fits", json_boolean(r->fits));
        json_object_set_new(o, "peak_bytes", json_integer((json_int_t)r->peak));
        json_object_set_new(o, "capacity_bytes", json_integer((json_int_t)r->capacity));
        json_object_set_new(o, "predicted_s", json_real(r->predicted_s));
        json_object_set_new(o, "simulated_s", json_real(r->simulated_s));
        json_object_set_new(o, "simulated_out_of_memory", json_boolean(r->sim_oom));
        json_object_set_new(o, "simulated_peak_bytes", json_integer((json_int_t)r->sim_peak));
        json_object_set_new(o, "samples", json_real(r->samples));
        json_object_set_new(o, "samples_per_s", json_real(r->samples_per_s));
        json_object_set_new(o, "speedup", json_real(r->speedup));
        json_array_append_new(rows, o);
    }
    json_object_set_new(root, "rows", rows);
    return root;
}

/* The JSON file (when asked; '-' is stdout, and then no table) and the table. */
static int emit(const struct mpress_plan *plan, const char *topo_arg,
                const struct mpress_compare *t, const char *json_path, struct mpress_error *err)
{
    if (json_path) {
        json_t *j = table_json(plan, topo_arg, t);
        int rc = j ? mpress_json_write_file(json_path, j, err)
                   : mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        json_decref(j);
        if (rc)
            return rc;
    }
    if (!json_path || strcmp(json_path, "-") != 0)
        print_table(plan, topo_arg, t);
    return 0;
}

/* No pipeline plan fits: the ZeRO rows alone, after an mpress row that does not fit. */
static int zero_only(const struct mpress_profile *p, const struct mpress_topology *topo,
                     const char *topo_arg, int M, int do_sim, const char *json_path)
{
    struct mpress_error err;
    mpress_error_clear(&err);
    struct mpress_compare *t = malloc(sizeof(*t)), *z = malloc(sizeof(*t));
    struct mpress_plan shell;
    mpress_plan_init(&shell);
    int rc = !t || !z ? mpress_error_set(&err, MPRESS_ESYSTEM, "out of memory")
                      : mpress_compare_zero(p, topo, M, do_sim, z, &err);
    if (!rc) {
        memset(t, 0, sizeof(*t));
        struct mpress_compare_row *m = &t->rows[t->n_rows++];
        snprintf(m->policy, sizeof(m->policy), "mpress");
        for (int i = 0; i < z->n_rows && t->n_rows < MPRESS_COMPARE_MAX_ROWS; i++)
            t->rows[t->n_rows++] = z->rows[i];
        /* the header and JSON read the model, the server and the batch from a plan */
        shell.profile.model = p->model;
        snprintf(shell.profile.source, sizeof(shell.profile.source), "%s", p->source);
        snprintf(shell.profile.device, sizeof(shell.profile.device), "%s", p->device);
        shell.topology = *topo;
        shell.micro_batches = M;
        rc = emit(&shell, topo_arg, t, json_path, &err);
    }
    free(t);
    free(z);
    return rc ? cli_fail(CMD, "comparison failed", &err) : 0;
}

enum { OPT_GPUS = 256, OPT_TOPO, OPT_MB, OPT_NL, OPT_PLAN, OPT_NOSIM, OPT_JSON };

int cmd_compare(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"gpus", required_argument, NULL, OPT_GPUS},
        {"topology", required_argument, NULL, OPT_TOPO},
        {"micro-batches", required_argument, NULL, OPT_MB},
        {"node-limit", required_argument, NULL, OPT_NL},
        {"plan", required_argument, NULL, OPT_PLAN},
        {"no-sim", no_argument, NULL, OPT_NOSIM},
        {"json", required_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    const char *topo_arg = "dgx1", *plan_path = NULL, *json_path = NULL;
    long gpus = 0;
    int c, do_sim = 1, planning_opts = 0;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        long v;
        planning_opts += c == OPT_GPUS || c == OPT_TOPO || c == OPT_MB || c == OPT_NL;
        switch (c) {
        case 'h':
            help();
            return 0;
        case OPT_GPUS:
            if (cli_parse_int(optarg, 1, MPRESS_MAX_GPUS, &gpus))
                return cli_usage(CMD, "--gpus: expected 1 to %d, got '%s'", MPRESS_MAX_GPUS,
                                 optarg);
            break;
        case OPT_TOPO:
            topo_arg = optarg;
            break;
        case OPT_MB:
            if (cli_parse_int(optarg, 1, MPRESS_MAX_MICRO_BATCHES, &v))
                return cli_usage(CMD, "--micro-batches: expected 1 to %d, got '%s'",
                                 MPRESS_MAX_MICRO_BATCHES, optarg);
            o.micro_batches = (int)v;
            break;
        case OPT_NL:
            if (cli_parse_int(optarg, 1, 1000000000, &v))
                return cli_usage(CMD, "--node-limit: expected 1 to 1000000000, got '%s'", optarg);
            o.node_limit = v;
            break;
        case OPT_PLAN:
            plan_path = optarg;
            break;
        case OPT_NOSIM:
            do_sim = 0;
            break;
        case OPT_JSON:
            json_path = optarg;
            break;
        default:
            return cli_bad_option(CMD, c, argv);
        }
    }
    if (argc - optind > 1)
        return cli_usage(CMD, "expected at most one PROFILE, got '%s' and '%s'", argv[optind],
                         argv[optind + 1]);
    const char *profile_path = optind < argc ? argv[optind] : NULL;
    if (plan_path && profile_path)
        return cli_usage(CMD, "give PROFILE or --plan, not both");
    if (plan_path && planning_opts)
        return cli_usage(CMD, "--plan brings its own server and batch: --topology, --gpus, "
                         "--micro-batches and --node-limit do not apply");

    struct mpress_error err;
    mpress_error_clear(&err);
    struct mpress_plan plan;
    int rc;
    if (plan_path) {
        if ((rc = mpress_plan_load(plan_path, &plan, &err)))
            return cli_fail(CMD, "cannot load the plan", &err);
        topo_arg = plan.topology.name;
    } else {
        struct mpress_topology topo;
        if ((rc = mpress_topology_resolve(topo_arg, &topo, &err)))
            return cli_fail(CMD, "cannot load the topology", &err);
        if (gpus > 0 && (rc = mpress_topology_restrict(&topo, (int)gpus, &err)))
            return cli_fail(CMD, "--gpus", &err);
        struct mpress_profile prof;
        mpress_profile_init(&prof);
        if (profile_path) {
            if ((rc = mpress_profile_load(profile_path, &prof, &err)))
                return cli_fail(CMD, "cannot load the profile", &err);
        } else if ((rc = cli_default_profile(CMD, &topo, &prof)) != 0) {
            return rc;
        }
        rc = mpress_plan_create(&prof, &topo, &o, &plan, &err);
        if (rc == MPRESS_EINFEASIBLE) {
            /* what fits instead: the ZeRO rows */
            cli_fail(CMD, "infeasible", &err);
            rc = zero_only(&prof, &topo, topo_arg, o.micro_batches, do_sim, json_path);
            mpress_profile_finish(&prof);
            return rc ? rc : MPRESS_EINFEASIBLE;
        }
        mpress_profile_finish(&prof);
        if (rc)
            return cli_fail(CMD, "planning failed", &err);
    }
    struct mpress_compare *t = malloc(sizeof(*t));
    if (!t) {
        mpress_plan_finish(&plan);
        cli_error(CMD, "out of memory");
        return MPRESS_ESYSTEM;
    }
    rc = mpress_compare_create(&plan, do_sim, t, &err);
    if (rc) {
        free(t);
        mpress_plan_finish(&plan);
        return cli_fail(CMD, "comparison failed", &err);
    }
    rc = emit(&plan, topo_arg, t, json_path, &err);
    free(t);
    mpress_plan_finish(&plan);
    return rc ? cli_fail(CMD, "cannot write the table", &err) : 0;
}
