/* mpress plan: profile + server + training config -> plan.json, with a summary on stdout.
 * The planning itself is mpress_plan_create (lib/plan/); this file parses options, loads
 * inputs, prints and writes. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "mpress/model.h"
#include "mpress/planner.h"

static const char *const CMD = "plan";

static void help(void)
{
    printf("usage: mpress plan [PROFILE] [--gpus N] [--topology NAME|FILE] [--micro-batches M]\n"
           "                   [--schedule 1f1b|gpipe|async]\n"
           "                   [--policy ilp|greedy|recompute|swap|none] [--time-limit S]\n"
           "                   [--node-limit N] [--mip-gap G] [--cuts auto|ops|layers]\n"
           "                   [--dump-lp FILE] [-o PLAN]\n\n"
           "Chooses a contiguous partition of PROFILE's ops into at most N pipeline stages, the\n"
           "GPU of each stage, one action per saved tensor (keep, recompute, host swap, or D2D\n"
           "swap striped over NVLink peers) and where each stage's optimizer states live, so\n"
           "that every GPU fits and the predicted iteration time is least (GLPK MILP), then\n"
           "prints a summary and writes the plan.\n\n"
           "Without PROFILE: the analytic profile of %s on the topology's GPU.\n\n"
           "Options:\n"
           "  --topology NAME|FILE  built-in server or mpress-topology file (default dgx1)\n"
           "  --gpus N              use the first N GPUs (default: all of the topology)\n"
           "  --micro-batches M     micro-batches per iteration (default 16)\n"
           "  --schedule S          1f1b (default), gpipe, or async (PipeDream weight stashing)\n"
           "  --policy P            ilp (default); or a baseline: greedy, recompute (even\n"
           "                        partition, recompute everything), swap (even partition,\n"
           "                        everything to host), none (even partition, save nothing)\n"
           "  --time-limit S        stop the MILP after S seconds with the best plan so far\n"
           "                        and its bound and gap (wall clock: not reproducible)\n",
           MPRESS_DEFAULT_MODEL);
    /* Two calls: one string of this length is past what C17 asks compilers to take. */
    printf("  --node-limit N        stop the MILP after N branch-and-bound nodes (default 5000;\n"
           "                        reproducible, unlike --time-limit; the local searches\n"
           "                        before and after it add at most 1.15 N, N capped at 5000\n"
           "                        (1.55 N on more than 8 GPUs of an NVSwitch server, where\n"
           "                        a search for the optimizer placement comes first);\n"
           "                        where it stops at N above the gap, a second search as\n"
           "                        limited may raise the bound or find a faster plan: the\n"
           "                        MILP without the mapping on a direct-NVLink server,\n"
           "                        which chooses each stage's socket where N is above\n"
           "                        5000 or 0 and optimizers may go to the host on several\n"
           "                        sockets, so that its bound sees the CPU queues\n"
           "                        (then, with optimizers that may go to the host on\n"
           "                        several sockets, a third, as limited, on the mapping\n"
           "                        a search from that MILP's partition picks, which may\n"
           "                        move blocks between stages, from a plan found there\n"
           "                        in at most 0.4 N nodes more; where no baseline fits\n"
           "                        and N is at most 5000, that search starts from the\n"
           "                        first search's partition in place of the second\n"
           "                        search, and a last one, as limited, asks the\n"
           "                        MILP with the sockets whether any plan beats the\n"
           "                        answer by more than the gap; the first\n"
           "                        search there has half the nodes before branching\n"
           "                        (none where no baseline fits), branches within 500\n"
           "                        nodes (N/10 past 5000; 200 where its gap is still\n"
           "                        above 12 %% there) and no local search follows it),\n"
           "                        or branching on the optimizer placement first on\n"
           "                        more than 8 GPUs of an NVSwitch server)\n"
           "  --mip-gap G           stop when the relative gap is at most G (default 0.01)\n"
           "  --cuts C              where stages may be cut: auto (layer boundaries when the\n"
           "                        profile has layers, default), ops (after any op; a\n"
           "                        tied head stays in the last stage), layers\n"
           "  --dump-lp FILE        write the MILP in CPLEX LP format\n"
           "  -o, --output PLAN     plan file (default plan.json; an existing file is only\n"
           "                        replaced when it is an mpress plan); '-' for stdout\n\n"
           "The plan records every baseline's predicted iteration time (or that it does not\n"
           "fit). Progress (incumbent, bound, gap) goes to stderr when it is a terminal.\n\n"
           CLI_EXIT_CODES);
}

static void progress(void *ctx, double incumbent, double bound, double gap)
{
    (void)ctx;
    if (incumbent >= 0)
        fprintf(stderr, "\rmpress: plan: incumbent %.4f s, bound %.4f s, gap %.2f%%   ",
                incumbent, bound, 100 * gap);
    else
        fprintf(stderr, "\rmpress: plan: no plan yet, bound %.4f s   ", bound);
}

static double gib(uint64_t b)
{
    return (double)b / 1073741824.0;
}

/* The data-parallel policy a user would otherwise run (mpress/compare.h), at the same
 * global batch: samples/s ratio, since ZeRO's batch per iteration may round up. */
static void print_zero_line(const struct mpress_plan *plan)
{
    struct mpress_dp_config best;
    struct mpress_dp_eval ev;
    struct mpress_error err;
    mpress_error_clear(&err);
    int rc = mpress_zero_best(&plan->profile, &plan->topology, plan->micro_batches, &best, &ev,
                              &err);
    if (rc == MPRESS_EINFEASIBLE)
        printf("best ZeRO policy: none fits on %d GPUs\n", plan->topology.n_gpus);
    else if (rc == 0)
        printf("best ZeRO policy: %s%s %.4f s, %.3f samples/s (this plan %.2fx)\n",
               mpress_dp_policy_name(best.policy), best.checkpoint ? "+ckpt" : "",
               ev.iteration_s, ev.samples_per_s,
               ev.samples_per_s > 0 ? plan->samples_per_s / ev.samples_per_s : 0);
}

static void print_summary(const struct mpress_plan *plan, const char *topo_arg, double secs)
{
    const struct mpress_profile *p = &plan->profile;
    printf("%s (%s profile, %s) on %s, %d GPUs, %s, %d micro-batches\n", p->model.name,
           p->source, p->device, topo_arg, plan->topology.n_gpus,
           mpress_schedule_name(plan->schedule), plan->micro_batches);
    const char *assumed = mpress_topology_assumption(&plan->topology);
    if (assumed)
        printf("topology: %s; the plan uses that GPU's memory, FLOP/s and bandwidths: "
               "re-import with `mpress topo import --gpu TYPE` if the server has another\n",
               assumed);
    const struct mpress_plan_solver *s = &plan->solver;
    if (strcmp(plan->policy, "ilp") == 0 && strcmp(s->status, "solver_failed") == 0)
        fprintf(stderr, "mpress: plan: note: the GLPK solver failed internally; the plan is the "
                        "MILP's start (the fastest baseline that fits), not a searched one\n");
    if (strcmp(plan->policy, "ilp") == 0)
        printf("policy ilp: %s, objective %.4f s, bound %.4f s, gap %.3f%%, %d rows x %d cols "
               "(%d integer), %ld nodes, solved in %.2f s\n",
               s->status, s->objective, s->bound, 100 * s->gap, s->rows, s->cols,
               s->integer_cols, s->nodes, secs);
    else
        printf("policy %s (heuristic baseline), planned in %.2f s\n", plan->policy, secs);

    printf("\nstage  ops          layers    gpu  optimizer\n");
    for (int k = 0; k < plan->n_stages; k++) {
        const struct mpress_plan_stage *st = &plan->stages[k];
        int l0 = -1, l1 = -1;
        for (int i = st->first_op; i <= st->last_op; i++)
            if (p->ops[i].layer >= 0) {
                if (l0 < 0)
                    l0 = p->ops[i].layer;
                l1 = p->ops[i].layer;
            }
        char layers[32];
        if (l0 >= 0)
            snprintf(layers, sizeof(layers), "%d-%d", l0, l1);
        else
            snprintf(layers, sizeof(layers), "-");
        printf("%5d  %4d-%-7d  %-8s  %3d  %s\n", k, st->first_op, st->last_op, layers, st->gpu,
               st->optimizer_on_host ? "host" : "gpu");
    }

    printf("\nmemory per GPU at its peak in GiB (# states, = activations, + parked, - other; "
           "width = capacity)\n");
    for (int g = 0; g < plan->n_gpus; g++) {
        const struct mpress_plan_gpu *m = &plan->gpus[g];
        enum { W = 40 };
        char bar[W + 1];
        double cap = m->capacity ? (double)m->capacity : 1;
        int a = (int)(W * (double)(m->weights + m->gradients + m->optimizer) / cap + 0.5);
        int b = a + (int)(W * (double)m->activations / cap + 0.5);
        int c = b + (int)(W * (double)m->parked / cap + 0.5);
        int d = (int)(W * (double)m->peak / cap + 0.5);
        for (int i = 0; i < W; i++)
            bar[i] = i < a ? '#' : i < b ? '=' : i < c ? '+' : i < d ? '-' : '.';
        bar[W] = 0;
        char stage[24];
        if (m->stage >= 0)
            snprintf(stage, sizeof(stage), "stage %d", m->stage);
        else
            snprintf(stage, sizeof(stage), "no stage");
        printf("  gpu %2d [%s] %6.2f / %.2f GiB  %s\n", g, bar, gib(m->peak), gib(m->capacity),
               stage);
    }

    uint64_t by[MPRESS_N_ACTIONS] = {0};
    int count[MPRESS_N_ACTIONS] = {0};
    for (int i = 0; i < plan->n_actions; i++) {
        const struct mpress_plan_action *a = &plan->actions[i];
        by[a->action] += p->ops[a->op].tensors[a->tensor].bytes;
        count[a->action]++;
    }
    printf("\nsaved tensors per micro-batch: keep %.2f GiB (%d), recompute %.2f GiB (%d), "
           "host swap %.2f GiB (%d), d2d swap %.2f GiB (%d)\n",
           gib(by[0]), count[0], gib(by[1]), count[1], gib(by[2]), count[2], gib(by[3]),
           count[3]);
    printf("predicted iteration %.4f s, %.3f samples/s\n", plan->iteration_s,
           plan->samples_per_s);
    printf("baselines:");
    for (int i = 0; i < plan->n_baselines; i++) {
        const struct mpress_plan_baseline *b = &plan->baselines[i];
        if (b->fits)
            printf("%s %s %.4f s (this plan %.2fx)", i ? "," : "", b->policy, b->iteration_s,
                   plan->iteration_s > 0 ? b->iteration_s / plan->iteration_s : 0);
        else
            printf("%s %s does not fit", i ? "," : "", b->policy);
    }
    printf("\n");
    print_zero_line(plan);
}

enum { OPT_GPUS = 256, OPT_TOPO, OPT_MB, OPT_SCHED, OPT_POLICY, OPT_TL, OPT_NL, OPT_GAP,
       OPT_CUTS, OPT_DUMP };

int cmd_plan(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"gpus", required_argument, NULL, OPT_GPUS},
        {"topology", required_argument, NULL, OPT_TOPO},
        {"micro-batches", required_argument, NULL, OPT_MB},
        {"schedule", required_argument, NULL, OPT_SCHED},
        {"policy", required_argument, NULL, OPT_POLICY},
        {"time-limit", required_argument, NULL, OPT_TL},
        {"node-limit", required_argument, NULL, OPT_NL},
        {"mip-gap", required_argument, NULL, OPT_GAP},
        {"cuts", required_argument, NULL, OPT_CUTS},
        {"dump-lp", required_argument, NULL, OPT_DUMP},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    const char *topo_arg = "dgx1", *out_path = "plan.json";
    long gpus = 0;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":ho:", longopts, NULL)) != -1) {
        long v;
        double d;
        switch (c) {
        case 'h':
            help();
            return 0;
        case 'o':
            out_path = optarg;
            break;
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
        case OPT_SCHED:
            if (mpress_schedule_parse(optarg, &o.schedule))
                return cli_usage(CMD, "--schedule: expected 1f1b, gpipe or async, got '%s'",
                                 optarg);
            break;
        case OPT_POLICY:
            if (mpress_policy_parse(optarg, &o.policy))
                return cli_usage(CMD,
                                 "--policy: expected ilp, greedy, recompute, swap or none, got "
                                 "'%s'",
                                 optarg);
            break;
        case OPT_TL:
            if (cli_parse_real(optarg, &d) || d <= 0)
                return cli_usage(CMD, "--time-limit: expected seconds > 0, got '%s'", optarg);
            o.time_limit_s = d;
            break;
        case OPT_NL:
            if (cli_parse_int(optarg, 1, 1000000000, &v))
                return cli_usage(CMD, "--node-limit: expected 1 to 1000000000, got '%s'", optarg);
            o.node_limit = v;
            break;
        case OPT_GAP:
            if (cli_parse_real(optarg, &d) || d >= 1)
                return cli_usage(CMD, "--mip-gap: expected 0 <= G < 1, got '%s'", optarg);
            o.mip_gap = d;
            break;
        case OPT_CUTS:
            if (strcmp(optarg, "auto") == 0)
                o.cuts = MPRESS_CUTS_AUTO;
            else if (strcmp(optarg, "ops") == 0)
                o.cuts = MPRESS_CUTS_OPS;
            else if (strcmp(optarg, "layers") == 0)
                o.cuts = MPRESS_CUTS_LAYERS;
            else
                return cli_usage(CMD, "--cuts: expected auto, ops or layers, got '%s'", optarg);
            break;
        case OPT_DUMP:
            o.dump_lp = optarg;
            break;
        default:
            return cli_bad_option(CMD, c, argv);
        }
    }
    if (argc - optind > 1)
        return cli_usage(CMD, "expected at most one PROFILE, got '%s' and '%s'", argv[optind],
                         argv[optind + 1]);
    const char *profile_path = optind < argc ? argv[optind] : NULL;

    struct mpress_error err;
    mpress_error_clear(&err);
    struct mpress_topology topo;
    int rc = mpress_topology_resolve(topo_arg, &topo, &err);
    if (rc)
        return cli_fail(CMD, "cannot load the topology", &err);
    if (gpus > 0 && (rc = mpress_topology_restrict(&topo, (int)gpus, &err)))
        return cli_fail(CMD, "--gpus", &err);
    /* a topology given as a file is an input too */
    const char *inputs[] = {profile_path ? profile_path : "-",
                            access(topo_arg, F_OK) == 0 ? topo_arg : "-",
                            NULL};
    if ((rc = cli_check_output(CMD, "-o", out_path, MPRESS_PLAN_FORMAT, inputs)) != 0)
        return rc;
    if (o.dump_lp && ((rc = cli_check_output(CMD, "--dump-lp", o.dump_lp, CLI_KIND_LP, inputs)) ||
                      (rc = cli_check_distinct(CMD, "-o", out_path, "--dump-lp", o.dump_lp))))
        return rc;

    struct mpress_profile prof;
    mpress_profile_init(&prof);
    if (profile_path) {
        rc = mpress_profile_load(profile_path, &prof, &err);
        if (rc)
            return cli_fail(CMD, "cannot load the profile", &err);
    } else if ((rc = cli_default_profile(CMD, &topo, &prof)) != 0) {
        return rc;
    }

    if (isatty(STDERR_FILENO)) {
        o.progress = progress;
        o.progress_ctx = NULL;
    }
    /* The LP goes to a temporary file renamed into place once written, like every output. */
    struct mpress_atomic_file lp;
    const char *lp_path = o.dump_lp;
    if (lp_path) {
        if (mpress_atomic_begin(&lp, lp_path, &err) != 0) {
            mpress_profile_finish(&prof);
            return cli_fail(CMD, "--dump-lp", &err);
        }
        close(lp.fd);
        lp.fd = -1;
        o.dump_lp = lp.tmp;
    }
    struct mpress_plan plan;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = mpress_plan_create(&prof, &topo, &o, &plan, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (lp_path) {
        /* Written before the solve: kept when the solve fails, not when the writing did. */
        struct stat lst;
        if ((rc && strstr(err.text, lp.tmp)) || stat(lp.tmp, &lst) != 0 || lst.st_size == 0) {
            int failed_write = rc && strstr(err.text, lp.tmp);
            mpress_atomic_abort(&lp);
            if (failed_write)
                snprintf(err.text, sizeof(err.text),
                         "cannot write '%.900s' (GLPK could not write the LP; is the disk "
                         "full?)", lp_path);
        } else if (mpress_atomic_commit(&lp, rc ? NULL : &err) != 0 && !rc) {
            mpress_plan_finish(&plan);
            mpress_profile_finish(&prof);
            return cli_fail(CMD, "--dump-lp", &err);
        }
    }
    if (o.progress)
        fprintf(stderr, "\r%60s\r", "");
    mpress_profile_finish(&prof);
    if (rc)
        return cli_fail(CMD, rc == MPRESS_EINFEASIBLE ? "infeasible" : "planning failed", &err);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    rc = mpress_plan_save(out_path, &plan, &err);
    if (rc) {
        mpress_plan_finish(&plan);
        return cli_fail(CMD, "cannot write the plan", &err);
    }
    if (strcmp(out_path, "-") != 0) {
        print_summary(&plan, topo_arg, secs);
        printf("wrote %s\n", out_path);
    }
    mpress_plan_finish(&plan);
    return 0;
}
