/* The planner always gives a right answer: a plan with its bound and gap whenever one exists,
 * checked against plans built and evaluated independently here (the baselines, and the greedy
 * baseline at fewer micro-batches evaluated at the asked number), and an infeasibility
 * message that names the GPU short under the most memory-saving actions and by how much. Each
 * case was a wrong answer: exit 1 "short by 0 bytes" while a baseline fits (the scaled root
 * relaxation misjudged infeasible), exit 4 with a node limit of 1, exit 4 when no baseline
 * fits although a plan does, exit 4 when nothing fits but branch and bound cannot prove it,
 * and a message from whichever baseline came closest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shipped.h"
#include "mpress/mpress.h"

/* The fastest fitting baseline's predicted time, or -1 when none fits. */
static double best_baseline(const struct mpress_profile *p, const struct mpress_topology *t,
                            const struct mpress_plan_options *o)
{
    static const enum mpress_policy pol[] = {MPRESS_POLICY_NONE, MPRESS_POLICY_RECOMPUTE,
                                             MPRESS_POLICY_SWAP, MPRESS_POLICY_GREEDY};
    double best = -1;
    for (int i = 0; i < 4; i++) {
        struct mpress_assignment a = {0};
        struct mpress_plan_eval ev;
        struct mpress_error err;
        if (mpress_plan_baseline(p, t, o, pol[i], &a, &ev, &err) == 0 && ev.fits &&
            (best < 0 || ev.iteration_s < best))
            best = ev.iteration_s;
        mpress_assignment_finish(&a);
    }
    return best;
}

/* Plans with o and checks the answer is a plan that fits, no slower than `no_worse_than`, with
 * 0 <= bound <= objective and the gap they imply. */
static void check_plan(const struct mpress_profile *p, const struct mpress_topology *t,
                       const struct mpress_plan_options *o, double no_worse_than,
                       const char *what)
{
    struct mpress_plan plan;
    struct mpress_error err;
    memset(&err, 0, sizeof(err));
    int rc = mpress_plan_create(p, t, o, &plan, &err);
    CHECK_MSG(rc == 0, "%s: rc %d: %s", what, rc, err.text);
    if (rc)
        return;
    struct mpress_assignment a = {0};
    struct mpress_plan_eval ev;
    CHECK(mpress_assignment_init(&a, p, &err) == 0);
    a.n_stages = plan.n_stages;
    memcpy(a.stages, plan.stages, sizeof(*plan.stages) * (size_t)plan.n_stages);
    memcpy(a.actions, plan.actions, sizeof(*a.actions) * (size_t)a.n_actions);
    CHECK(mpress_plan_evaluate(p, t, o->schedule, o->micro_batches, &a, &ev, &err) == 0);
    CHECK_MSG(ev.fits, "%s: the plan does not fit when re-evaluated", what);
    CHECK_MSG(plan.iteration_s <= no_worse_than * (1 + 1e-12), "%s: %.6f s > %.6f s", what,
              plan.iteration_s, no_worse_than);
    const struct mpress_plan_solver *s = &plan.solver;
    CHECK_MSG(s->bound >= 0 && s->bound <= s->objective * (1 + 1e-12),
              "%s: bound %.6f objective %.6f", what, s->bound, s->objective);
    CHECK_MSG(fabs(s->gap - (s->objective - s->bound) / s->objective) < 1e-9,
              "%s: gap %.9f", what, s->gap);
    mpress_assignment_finish(&a);
    mpress_plan_finish(&plan);
}

/* gpt3-6.7b on 16 GPUs of dgx2: the scaled root relaxation was declared infeasible. */
static void scaled_root(void)
{
    struct mpress_profile p;
    struct mpress_topology t;
    if (load_shipped("gpt3-6.7b.v100.json", "dgx2", 16, &p, &t)) {
        CHECK(0);
        return;
    }
    const int mbs[] = {4, 8, 9, 12};
    for (int i = 0; i < 4; i++) {
        struct mpress_plan_options o;
        mpress_plan_options_init(&o);
        o.micro_batches = mbs[i];
        o.node_limit = 10;
        double base = best_baseline(&p, &t, &o);
        CHECK_MSG(base > 0, "micro-batches %d: a baseline fits", mbs[i]);
        char what[64];
        snprintf(what, sizeof(what), "dgx2-16, %d micro-batches", mbs[i]);
        check_plan(&p, &t, &o, base, what);
    }
    mpress_profile_finish(&p);
}

/* A node limit of one: the best baseline (greedy here), its GPUs exchanged where that makes
 * it faster (planner.c, polish_mapping), with the root's bound: the same stages, optimizer
 * placement and actions on a permutation of the GPUs, no slower than the baseline. */
static void node_limit_one(void)
{
    struct mpress_profile p;
    struct mpress_topology t;
    if (load_shipped("gpt3-6.7b.v100.json", "dgx1", 0, &p, &t)) {
        CHECK(0);
        return;
    }
    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    o.node_limit = 1;
    double base = best_baseline(&p, &t, &o);
    CHECK(base > 0);
    check_plan(&p, &t, &o, base, "dgx1, node limit 1");
    struct mpress_plan plan;
    struct mpress_error err;
    struct mpress_assignment g = {0};
    struct mpress_plan_eval gev;
    CHECK(mpress_plan_baseline(&p, &t, &o, MPRESS_POLICY_GREEDY, &g, &gev, &err) == 0);
    CHECK_MSG(gev.fits && gev.iteration_s == base, "greedy is the best baseline");
    if (mpress_plan_create(&p, &t, &o, &plan, &err) == 0) {
        CHECK_STR(plan.solver.status, "node_limit");
        CHECK_MSG(plan.iteration_s <= base, "%.9f vs %.9f", plan.iteration_s, base);
        CHECK(plan.solver.bound > 0); /* the root relaxation was solved */
        CHECK_INT(plan.n_stages, g.n_stages);
        unsigned used = 0;
        for (int k = 0; k < plan.n_stages && k < g.n_stages; k++) {
            CHECK(plan.stages[k].first_op == g.stages[k].first_op);
            CHECK(plan.stages[k].last_op == g.stages[k].last_op);
            CHECK(plan.stages[k].optimizer_on_host == g.stages[k].optimizer_on_host);
            CHECK_MSG(!(used & (1u << plan.stages[k].gpu)), "stage %d's GPU used twice", k);
            used |= 1u << plan.stages[k].gpu;
        }
        /* The MILP decides counts per class of interchangeable tensors, so the baseline's
         * actions come back as the same bytes per action, but for its held stage inputs
         * (recomputed from an op of the stage before), which come back kept: keeping one
         * costs the same memory and no recompute (ilp_warm.c); and swaps count as one: the
         * start's GPU exchanges (planner.c, polish_mapping) turn a D2D swap whose peer loses
         * its NVLink into a host swap of the same bytes. */
        uint64_t bytes[2][MPRESS_N_ACTIONS] = {{0}};
        int held = 0;
        for (int w = 0; w < 2; w++) {
            const struct mpress_plan_action *ac = w ? plan.actions : g.actions;
            for (int j = 0, k = 0; j < g.n_actions && j < plan.n_actions; j++) {
                const struct mpress_saved_tensor *ts = &p.ops[ac[j].op].tensors[ac[j].tensor];
                while (g.stages[k].last_op < ac[j].op)
                    k++;
                int kind = ac[j].action;
                if (w == 0 && kind == MPRESS_ACTION_RECOMPUTE &&
                    ts->recompute_op < g.stages[k].first_op) {
                    kind = MPRESS_ACTION_KEEP;
                    held++;
                }
                if (kind == MPRESS_ACTION_D2D_SWAP)
                    kind = MPRESS_ACTION_HOST_SWAP;
                bytes[w][kind] += ts->bytes;
            }
        }
        CHECK_MSG(held > 0, "the baseline recomputes a held stage input (%d)", held);
        CHECK_MSG(plan.n_actions == g.n_actions &&
                      memcmp(bytes[0], bytes[1], sizeof(bytes[0])) == 0,
                  "the baseline's actions");
        mpress_plan_finish(&plan);
    }
    mpress_assignment_finish(&g);
    mpress_profile_finish(&p);
}

/* gpt-20b on dgx1 with 32 micro-batches: no baseline fits, the greedy plan for 16 does. */
static void start_from_fewer(void)
{
    struct mpress_profile p;
    struct mpress_topology t;
    if (load_shipped("gpt-20b.v100.json", "dgx1", 0, &p, &t)) {
        CHECK(0);
        return;
    }
    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    o.micro_batches = 32;
    o.node_limit = 5;
    CHECK_MSG(best_baseline(&p, &t, &o) < 0, "no baseline fits at 32 micro-batches");
    struct mpress_plan_options o16 = o;
    o16.micro_batches = 16;
    struct mpress_assignment a = {0};
    struct mpress_plan_eval ev;
    struct mpress_error err;
    CHECK(mpress_plan_baseline(&p, &t, &o16, MPRESS_POLICY_GREEDY, &a, &ev, &err) == 0);
    CHECK(mpress_plan_evaluate(&p, &t, o.schedule, 32, &a, &ev, &err) == 0);
    CHECK_MSG(ev.fits, "greedy for 16 micro-batches fits at 32");
    double at32 = ev.iteration_s;
    mpress_assignment_finish(&a);
    check_plan(&p, &t, &o, at32, "gpt-20b dgx1, 32 micro-batches");
    mpress_profile_finish(&p);
}

/* Nothing fits: exit 1 naming the GPU short under the most memory-saving actions (every
 * tensor recomputed, every optimizer on the host, on the even partition), by as many bytes as
 * the evaluator finds for that assignment built here from the recompute baseline. */
static void infeasible_named(void)
{
    struct mpress_profile p;
    struct mpress_topology t;
    if (load_shipped("gpt3-13b.v100.json", "dgx1", 2, &p, &t)) {
        CHECK(0);
        return;
    }
    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    struct mpress_assignment a = {0};
    struct mpress_plan_eval ev;
    struct mpress_error err;
    CHECK(mpress_plan_baseline(&p, &t, &o, MPRESS_POLICY_RECOMPUTE, &a, &ev, &err) == 0);
    for (int k = 0; k < a.n_stages; k++)
        a.stages[k].optimizer_on_host = 1;
    CHECK(mpress_plan_evaluate(&p, &t, o.schedule, o.micro_batches, &a, &ev, &err) == 0);
    CHECK(!ev.fits && ev.short_gpu >= 0 && ev.short_bytes > 0);
    mpress_assignment_finish(&a);
    struct mpress_plan plan;
    memset(&err, 0, sizeof(err));
    CHECK_INT(mpress_plan_create(&p, &t, &o, &plan, &err), MPRESS_EINFEASIBLE);
    unsigned long long bytes = 0;
    int gpu = -1;
    const char *at = strstr(err.text, "GPU ");
    CHECK_MSG(strstr(err.text, "every saved tensor recomputed and every optimizer on the host"),
              "'%s'", err.text);
    CHECK_MSG(at && sscanf(at, "GPU %d is still short by %llu bytes", &gpu, &bytes) == 2, "'%s'",
              err.text);
    CHECK_INT(gpu, ev.short_gpu);
    CHECK_INT(bytes, ev.short_bytes);
    mpress_profile_finish(&p);
}

/* gpt-20b on 4 GPUs of dgx1: the weights, gradients and one micro-batch's saved tensors alone
 * exceed the four GPUs' memory, so nothing fits; the MILP's relaxation cannot see it and the
 * search stopped at its node limit (exit 4) instead of answering. */
static void infeasible_by_floor(void)
{
    struct mpress_profile p;
    struct mpress_topology t;
    if (load_shipped("gpt-20b.v100.json", "dgx1", 4, &p, &t)) {
        CHECK(0);
        return;
    }
    double need = 0, have = 0;
    for (int i = 0; i < p.n_ops; i++) {
        need += (double)p.ops[i].param_bytes + (double)p.ops[i].grad_bytes;
        for (int k = 0; k < p.ops[i].n_tensors; k++)
            need += (double)p.ops[i].tensors[k].bytes;
    }
    for (int g = 0; g < t.n_gpus; g++)
        have += (double)t.gpus[g].memory_bytes - (double)t.gpus[g].reserve_bytes;
    CHECK_MSG(need > have, "%.3g > %.3g bytes", need, have);
    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    struct mpress_plan plan;
    struct mpress_error err;
    memset(&err, 0, sizeof(err));
    CHECK_INT(mpress_plan_create(&p, &t, &o, &plan, &err), MPRESS_EINFEASIBLE);
    unsigned long long bytes = 0;
    int gpu = -1;
    const char *at = strstr(err.text, "GPU ");
    CHECK_MSG(at && sscanf(at, "GPU %d is still short by %llu bytes", &gpu, &bytes) == 2 &&
                  gpu >= 0 && gpu < t.n_gpus && bytes > 0,
              "'%s'", err.text);
    mpress_profile_finish(&p);
}

static void tiny_case(const char *profile, const char *topology, enum mpress_schedule sched,
                      const char *what)
{
    char prof[1024], topo[1024];
    snprintf(prof, sizeof(prof), "%s/tests/plan/data/%s", src_dir(), profile);
    snprintf(topo, sizeof(topo), "%s/tests/plan/data/%s", src_dir(), topology);
    struct mpress_profile p;
    struct mpress_topology t;
    struct mpress_error err;
    mpress_profile_init(&p);
    if (mpress_profile_load(prof, &p, &err) || mpress_topology_load(topo, &t, &err)) {
        CHECK_MSG(0, "%s", err.text);
        mpress_profile_finish(&p);
        return;
    }
    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    o.schedule = sched;
    double base = best_baseline(&p, &t, &o);
    check_plan(&p, &t, &o, base > 0 ? base : 1e9, what);
    mpress_profile_finish(&p);
}

/* Plans at the edge of GLPK's tolerance on small devices, both exit 4 before ("the MILP's plan
 * does not fit when evaluated"). gpt-tiny profiled on the host backend on 4 emulated devices
 * of 500 KiB with links at 3e8 bytes/s: the D2D byte shares, rounded from a MILP that met its
 * drain row within GLPK's tolerance (1e-7 of a GB), put a peer 7 bytes past the drain check's.
 * bert-tiny (host profile) under GPipe on 8 emulated devices of 800 KiB: a memory row met
 * within the tolerance left GPU 2 16 bytes short, the margin of 1e-5 of its capacity being 8
 * bytes (now at least 1 KiB). Each plan fits when re-evaluated, with its bound and gap, no
 * slower than the best baseline. */
static void tiny_tolerances(void)
{
    tiny_case("gpt-tiny.host.json", "emu4-500k-slow.json", MPRESS_SCHEDULE_1F1B,
              "gpt-tiny host profile, 4 x 500 KiB at 3e8 bytes/s");
    tiny_case("bert-tiny.host.json", "emu8-800k.json", MPRESS_SCHEDULE_GPIPE,
              "bert-tiny host profile, gpipe, 8 x 800 KiB");
}

/* No baseline fits and best-bound search finds no plan within the node limit, although plans
 * exist: bert-tiny (another host profile) under GPipe on 8 emulated devices of 500 KiB at 3e8
 * bytes/s (best-bound search finds its first plan after 18,219 nodes) and of 550 KiB (within
 * 30,000). The planner exited 4 ("stopped before finding any plan"); the depth-first search
 * after it finds one (on 550 KiB only with pseudo-cost branching). */
static void first_plan_depth_first(void)
{
    tiny_case("bert-tiny.host-b.json", "emu8-500k-slow.json", MPRESS_SCHEDULE_GPIPE,
              "bert-tiny host profile b, gpipe, 8 x 500 KiB at 3e8 bytes/s");
    tiny_case("bert-tiny.host-b.json", "emu8-550k-slow.json", MPRESS_SCHEDULE_GPIPE,
              "bert-tiny host profile b, gpipe, 8 x 550 KiB at 3e8 bytes/s");
}

int main(void)
{
    scaled_root();
    node_limit_one();
    start_from_fewer();
    infeasible_named();
    infeasible_by_floor();
    tiny_tolerances();
    first_plan_depth_first();
    return check_done();
}
