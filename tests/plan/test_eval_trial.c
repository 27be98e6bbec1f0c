/* The greedy baseline's trial evaluation (lib/plan/eval_trial.c: one changed action on the
 * stage sums of a base assignment) against the full evaluator, mpress_plan_evaluate, on random
 * valid assignments of shipped profiles, with every layer's numbers varied so that no two
 * tensors are alike, on a direct NVLink server (dgx1) and an NVSwitch one (dgx2): after each
 * random change of one action (keep, recompute, host, D2D to one or two peers) or of a stage's
 * optimizer placement, memory, shortfall, fit and byte totals must be the full evaluation's
 * exactly, and the times too unless a recompute was added or removed, when they must lie
 * within the bound the trial states (itself below 1e-9 of the iteration). A third of the
 * changes are committed into the base (plan_trial_commit), so later trials run on sums that
 * were never summed from scratch. A profile with a
 * tensor of 2^62 bytes takes the trial's fallback to the full evaluation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shipped.h"
#include "../../lib/plan/eval_trial.h"
#include "../../lib/plan/plan_internal.h"
#include "tiny.h"

static double unit(void)
{
    return tiny_rand() / 4294967296.0;
}

/* Load a shipped profile and vary each op's times and bytes by up to 20 %. */
static int load(const char *name, const char *server, int gpus, struct mpress_profile *p,
                struct mpress_topology *t)
{
    if (load_shipped(name, server, gpus, p, t))
        return -1;
    for (int i = 0; i < p->n_ops; i++) {
        struct mpress_op *op = &p->ops[i];
        double f = 0.8 + 0.4 * unit();
        op->fwd_s *= f;
        op->bwd_s *= f;
        for (int q = 0; q < op->n_tensors; q++) {
            op->tensors[q].bytes = (uint64_t)((double)op->tensors[q].bytes * f);
            op->tensors[q].recompute_s *= f;
        }
    }
    return 0;
}

/* A random action for tensor j of stage st on GPU g (D2D only to NVLink peers). */
static void random_action(const struct mpress_profile *p, const struct mpress_topology *t,
                          const struct mpress_plan_stage *st, struct mpress_plan_action *ac)
{
    uint64_t bytes = p->ops[ac->op].tensors[ac->tensor].bytes;
    int g = st->gpu, peers[MPRESS_MAX_GPUS], n = 0;
    for (int q = 0; q < t->n_gpus; q++)
        if (q != g && plan_nvlink_bw(t, g, q) > 0)
            peers[n++] = q;
    int kind = tiny_range(0, n > 0 ? 3 : 2);
    ac->action = (enum mpress_action)kind;
    ac->n_peers = 0;
    ac->evict_after_op = kind == MPRESS_ACTION_KEEP ? -1 : ac->op;
    ac->prefetch_before_op = plan_prefetch_point(ac->action, ac->op, st->last_op);
    if (kind == MPRESS_ACTION_D2D_SWAP) {
        int a = tiny_range(0, n - 1), b = tiny_range(0, n - 1);
        ac->peers[0] = peers[a];
        ac->peer_bytes[0] = bytes;
        if (b != a && bytes > 1) {
            ac->n_peers = 2;
            ac->peers[1] = peers[b];
            ac->peer_bytes[1] = bytes / 3;
            ac->peer_bytes[0] = bytes - bytes / 3;
        } else {
            ac->n_peers = 1;
        }
    }
}

static int stage_of_op(const struct mpress_assignment *a, int op)
{
    int k = 0;
    while (a->stages[k].last_op < op)
        k++;
    return k;
}

/* Trial and full evaluation of a as it stands agree (j: the changed action, old its base). */
static void compare(struct plan_trial *tr, const struct mpress_profile *p,
                    const struct mpress_topology *t, int M, struct mpress_assignment *a, int j,
                    const struct mpress_plan_action *old, const char *what, double *worst)
{
    struct mpress_plan_eval full, trial;
    struct mpress_error err;
    double bound = -1;
    CHECK_INT(mpress_plan_evaluate(p, t, MPRESS_SCHEDULE_1F1B, M, a, &full, &err), 0);
    CHECK_INT(plan_trial_eval(tr, p, t, MPRESS_SCHEDULE_1F1B, M, a, j, old, &trial, &bound), 0);
    int timed = j >= 0 && (old->action == MPRESS_ACTION_RECOMPUTE) !=
                              (a->actions[j].action == MPRESS_ACTION_RECOMPUTE);
    double drift = 0;
    for (int k = 0; k < a->n_stages; k++)
        drift += tr->drift[k];
    CHECK_MSG(timed || drift > 0 || bound == 0,
              "%s: a time bound %g for a change without recompute", what, bound);
    CHECK_MSG(bound >= 0 && bound < 1e-9 * full.iteration_s, "%s: bound %g of %g s", what, bound,
              full.iteration_s);
    CHECK_MSG(trial.fits == full.fits && trial.short_gpu == full.short_gpu &&
                  trial.short_bytes == full.short_bytes && trial.host_bytes == full.host_bytes &&
                  trial.host_short == full.host_short && trial.drain_gpu == full.drain_gpu &&
                  trial.drain_short == full.drain_short && trial.n_gpus == full.n_gpus &&
                  plan_shortfall(&trial) == plan_shortfall(&full),
              "%s: fit or shortfall differs", what);
    CHECK_MSG(memcmp(trial.gpus, full.gpus, sizeof(full.gpus)) == 0 &&
                  memcmp(trial.action_bytes, full.action_bytes, sizeof(full.action_bytes)) == 0,
              "%s: memory differs", what);
    double times[][2] = {{trial.iteration_s, full.iteration_s}, {trial.cycle_s, full.cycle_s},
                         {trial.fill_drain_s, full.fill_drain_s}, {trial.tail_s, full.tail_s}};
    for (int q = 0; q < 4; q++) {
        double d = fabs(times[q][0] - times[q][1]);
        CHECK_MSG(d <= bound, "%s: time %d differs by %g (bound %g)", what, q, d, bound);
        if (bound > 0 && d / bound > *worst)
            *worst = d / bound;
    }
    for (int k = 0; k < a->n_stages; k++)
        CHECK_MSG(fabs(trial.stage_s[k] - full.stage_s[k]) <= bound, "%s: stage %d time", what,
                  k);
    if (bound == 0)
        CHECK_MSG(strcmp(trial.bottleneck, full.bottleneck) == 0 &&
                      trial.samples_per_s == full.samples_per_s,
                  "%s: bottleneck %s / %s", what, trial.bottleneck, full.bottleneck);
}

/* a: the baselines' even partition of p over t's GPUs (every tensor kept); tr ready for it. */
static void even_start(const struct mpress_profile *p, const struct mpress_topology *t,
                       struct mpress_assignment *a, struct plan_trial *tr)
{
    struct mpress_error err;
    CHECK_INT(mpress_assignment_init(a, p, &err), 0);
    CHECK_INT(plan_trial_init(tr, p, &err), 0);
    char *cut_ok = malloc((size_t)p->n_ops);
    int order[MPRESS_MAX_GPUS];
    plan_gpu_order(t, order);
    plan_cut_points(p, MPRESS_CUTS_AUTO, cut_ok);
    plan_even_partition(p, cut_ok, t->n_gpus, order, a);
    free(cut_ok);
}

static void run_case(const char *profile, const char *server, int gpus, int huge)
{
    struct mpress_profile p;
    struct mpress_topology t;
    if (load(profile, server, gpus, &p, &t)) {
        CHECK(0);
        return;
    }
    if (huge) /* together more than 64 bits hold */
        p.ops[p.n_ops / 2].tensors[0].bytes = p.ops[p.n_ops / 2 + 1].tensors[0].bytes =
            (uint64_t)1 << 63;
    struct mpress_assignment a;
    struct mpress_error err;
    struct plan_trial tr;
    even_start(&p, &t, &a, &tr);
    const int M = 8;
    double worst = 0;
    long trials = 0;
    for (int round = 0; round < 4; round++) {
        for (int j = 0; j < a.n_actions; j++)
            random_action(&p, &t, &a.stages[stage_of_op(&a, a.actions[j].op)], &a.actions[j]);
        for (int k = 0; k < a.n_stages; k++)
            a.stages[k].optimizer_on_host = tiny_range(0, 3) == 0;
        struct mpress_plan_eval base, full;
        plan_trial_base(&tr, &p, &t, MPRESS_SCHEDULE_1F1B, M, &a, &base);
        CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, M, &a, &full, &err), 0);
        CHECK_MSG(memcmp(&base, &full, sizeof(full)) == 0, "%s: base differs", profile);
        CHECK_INT(tr.exact_bytes, !huge);
        for (int n = 0; n < 300; n++, trials++) {
            char what[128];
            if (n % 10 == 0) { /* an optimizer moved instead */
                int k = tiny_range(0, a.n_stages - 1);
                snprintf(what, sizeof(what), "%s on %s, stage %d optimizer", profile, server, k);
                a.stages[k].optimizer_on_host ^= 1;
                compare(&tr, &p, &t, M, &a, -1, NULL, what, &worst);
                a.stages[k].optimizer_on_host ^= 1;
                continue;
            }
            int j = tiny_range(0, a.n_actions - 1);
            struct mpress_plan_action old = a.actions[j];
            random_action(&p, &t, &a.stages[stage_of_op(&a, old.op)], &a.actions[j]);
            snprintf(what, sizeof(what), "%s on %s, action %d %s -> %s", profile, server, j,
                     mpress_action_name(old.action), mpress_action_name(a.actions[j].action));
            compare(&tr, &p, &t, M, &a, j, &old, what, &worst);
            if (n % 3 == 0) /* kept: later trials are on the sums with this change committed */
                plan_trial_commit(&tr, &p, &a, j, &old);
            else
                a.actions[j] = old;
        }
    }
    printf("%s on %s (%d GPUs%s): %ld trials, largest time difference %.3g of its bound\n",
           profile, server, t.n_gpus, huge ? ", two 2^63-byte tensors" : "", trials, worst);
    plan_trial_free(&tr);
    mpress_assignment_finish(&a);
    mpress_profile_finish(&p);
}

/* A trial reads the base's sums only: it scans no op names (the tied weight is found with the
 * sums). Renamed after the base, the ops still give the base's tied terms in a trial; before,
 * each trial looked the tied weight up by name over every op, and the greedy on 100k ops
 * spent 338 of its 342 s of CPU in strcmp (docs/benchmarks.md, "Scale"). */
static void names_read_once(void)
{
    struct mpress_profile p;
    struct mpress_topology t;
    if (load("gpt-tiny.v100.json", "dgx1", 4, &p, &t)) {
        CHECK(0);
        return;
    }
    struct mpress_assignment a;
    struct mpress_error err;
    struct plan_trial tr;
    even_start(&p, &t, &a, &tr);
    struct mpress_plan_eval base, trial, untied;
    plan_trial_base(&tr, &p, &t, MPRESS_SCHEDULE_1F1B, 8, &a, &base);
    CHECK(tr.s.tied);
    for (int i = 0; i < p.n_ops; i++)
        snprintf(p.ops[i].name, sizeof(p.ops[i].name), "op%d", i);
    double err_s;
    CHECK_INT(plan_trial_eval(&tr, &p, &t, MPRESS_SCHEDULE_1F1B, 8, &a, -1, NULL, &trial,
                              &err_s), 0);
    CHECK_MSG(memcmp(&base, &trial, sizeof(base)) == 0, "a trial looked up op names again");
    /* the renamed profile itself ties nothing: the full evaluation sees that */
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 8, &a, &untied, &err), 0);
    CHECK(untied.tail_s != base.tail_s || memcmp(untied.gpus, base.gpus, sizeof(base.gpus)) != 0);
    plan_trial_free(&tr);
    mpress_assignment_finish(&a);
    mpress_profile_finish(&p);
}

int main(void)
{
    tiny_state_ = 0x9e3779b97f4a7c15ULL;
    run_case("gpt-tiny.v100.json", "dgx1", 0, 0);
    run_case("gpt3-2.7b.v100.json", "dgx1", 0, 0);
    run_case("bert-large.v100.json", "dgx2", 8, 0);
    run_case("gpt-tiny.v100.json", "dgx1", 4, 1);
    names_read_once();
    return check_done();
}
