/* `mpress plan` as a library call: runs every baseline, the chosen policy, evaluates the result
 * with the one cost model and assembles a plan that embeds its profile and topology. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpress/mpress.h"
#include "plan_internal.h"

static const char *const policy_names[MPRESS_N_POLICIES] = {"ilp", "greedy", "recompute",
                                                             "swap", "none"};

const char *mpress_policy_name(enum mpress_policy p)
{
    return (unsigned)p < MPRESS_N_POLICIES ? policy_names[p] : "unknown";
}

int mpress_policy_parse(const char *s, enum mpress_policy *out)
{
    for (int i = 0; i < MPRESS_N_POLICIES; i++)
        if (s && strcmp(s, policy_names[i]) == 0) {
            *out = (enum mpress_policy)i;
            return 0;
        }
    return -1;
}

/* The baselines in the order plans list them. */
static const enum mpress_policy baseline_policies[] = {
    MPRESS_POLICY_NONE, MPRESS_POLICY_RECOMPUTE, MPRESS_POLICY_SWAP, MPRESS_POLICY_GREEDY};
#define N_BASELINES 4

void mpress_plan_options_init(struct mpress_plan_options *o)
{
    memset(o, 0, sizeof(*o));
    o->schedule = MPRESS_SCHEDULE_1F1B;
    o->micro_batches = 16;
    o->policy = MPRESS_POLICY_ILP;
    o->cuts = MPRESS_CUTS_AUTO;
    o->mip_gap = 0.01;
    /* A solve that cannot close the gap still ends, after the same nodes on every machine. */
    o->node_limit = 5000;
}

/* The worst-off GPU (or the host) of an evaluation, for infeasibility messages. */
static void explain_short(const struct mpress_plan_eval *ev, const char *policy,
                          struct mpress_error *err)
{
    if (ev->short_gpu < 0 && !ev->host_short && ev->drain_gpu >= 0)
        mpress_error_set(err, MPRESS_EINFEASIBLE,
                         "no plan fits: in the closest plan (%s) GPU %d evicts more than its "
                         "links drain during one forward (backlog %llu bytes)",
                         policy, ev->drain_gpu, (unsigned long long)ev->drain_short);
    else if (ev->short_gpu >= 0) {
        char over[32], cap[32];
        mpress_error_set(err, MPRESS_EINFEASIBLE,
                         "no plan fits: in the closest plan (%s) GPU %d is short by %llu bytes "
                         "(%s over its %s)",
                         policy, ev->short_gpu, (unsigned long long)ev->short_bytes,
                         mpress_format_bytes(ev->short_bytes, over, sizeof(over)),
                         mpress_format_bytes(ev->gpus[ev->short_gpu].capacity, cap,
                                             sizeof(cap)));
    }
    else
        mpress_error_set(err, MPRESS_EINFEASIBLE,
                         "no plan fits: in the closest plan (%s) host memory is short by %llu "
                         "bytes",
                         policy, (unsigned long long)ev->host_short);
}

/* a's GPUs ga and gb exchanged wherever a names them (stages, D2D peers); 0 when no stage
 * runs on either. */
static int exchange_gpus(struct mpress_assignment *a, int ga, int gb)
{
    int used = 0;
    for (int k = 0; k < a->n_stages; k++) {
        int *g = &a->stages[k].gpu;
        used |= *g == ga || *g == gb;
        *g = *g == ga ? gb : *g == gb ? ga : *g;
    }
    for (int j = 0; j < a->n_actions; j++)
        for (int q = 0; q < a->actions[j].n_peers; q++) {
            int *g = &a->actions[j].peers[q];
            *g = *g == ga ? gb : *g == gb ? ga : *g;
        }
    return used;
}

/* a's D2D swaps whose peers an exchange of GPUs left without an NVLink to the tensor's stage,
 * turned into host swaps at the same ops: the bytes leave the stage's GPU as before, over PCIe
 * instead. Without it such an exchange is no plan; with it the default job's polished start
 * leads branch and bound to 3.9716 s instead of 3.9729 s (docs/benchmarks.md, "The answer's
 * mapping polished"). */
static void lost_peers_to_host(const struct mpress_profile *p, const struct mpress_topology *topo,
                               struct mpress_assignment *a)
{
    int j = 0;
    for (int k = 0; k < a->n_stages; k++)
        for (int i = a->stages[k].first_op; i <= a->stages[k].last_op; i++)
            for (int q = 0; q < p->ops[i].n_tensors; q++, j++) {
                struct mpress_plan_action *ac = &a->actions[j];
                int lost = 0;
                for (int r = 0; ac->action == MPRESS_ACTION_D2D_SWAP && r < ac->n_peers; r++)
                    lost |= !(plan_nvlink_bw(topo, a->stages[k].gpu, ac->peers[r]) > 0);
                if (lost) {
                    ac->action = MPRESS_ACTION_HOST_SWAP;
                    ac->n_peers = 0;
                }
            }
}

/* The warm start with two of its GPUs exchanged while that makes it faster and it still fits
 * (steepest descent, at most 16 rounds). The baselines map stages along NVLink rings, which
 * leaves the tied word matrix's exchange between the first and last stage on whatever pair
 * the ring ends on. On the default job this takes greedy from 4.0247 s to 3.9994 s (4.0090 s
 * before lost_peers_to_host); with the short local search from it (ilp_solve.c, pre_search)
 * branch and bound closed the gap in 364 nodes when measured, against 2,437 with this alone
 * and 2,461 with neither. Direct fabrics only: NVSwitch
 * servers fix the MILP's mapping. 0, or MPRESS_ESYSTEM. */
static int polish_mapping(const struct mpress_profile *p, const struct mpress_topology *topo,
                          const struct mpress_plan_options *o, struct mpress_assignment *a,
                          double *best_s, struct mpress_error *err)
{
    if (topo->fabric == MPRESS_FABRIC_NVSWITCH || topo->n_gpus < 2)
        return 0;
    struct mpress_assignment t;
    if (mpress_assignment_init(&t, p, err))
        return MPRESS_ESYSTEM;
    const int G = topo->n_gpus;
    for (int round = 0; round < 16; round++) {
        int ba = -1, bb = -1;
        double best = *best_s;
        for (int ga = 0; ga < G; ga++)
            for (int gb = ga + 1; gb < G; gb++) {
                plan_assignment_copy(&t, a);
                if (!exchange_gpus(&t, ga, gb))
                    continue;
                lost_peers_to_host(p, topo, &t);
                struct mpress_plan_eval ev;
                struct mpress_error e2;
                if (mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, &t, &ev,
                                         &e2) == 0 &&
                    ev.fits && ev.iteration_s < best * (1 - 1e-9)) {
                    best = ev.iteration_s;
                    ba = ga, bb = gb;
                }
            }
        if (ba < 0)
            break;
        exchange_gpus(a, ba, bb);
        lost_peers_to_host(p, topo, a);
        *best_s = best;
    }
    mpress_assignment_finish(&t);
    return 0;
}

/* t's stage k made to end at the previous (dir < 0) or next (dir > 0) allowed cut, the next
 * stage starting after it; 0 when either stage would be left without ops. */
static int shift_boundary(const char *cut_ok, struct mpress_assignment *t, int k, int dir)
{
    int e = t->stages[k].last_op + (dir < 0 ? -1 : 1);
    while (e >= t->stages[k].first_op && e < t->stages[k + 1].last_op && !cut_ok[e])
        e += dir < 0 ? -1 : 1;
    if (e < t->stages[k].first_op || e >= t->stages[k + 1].last_op)
        return 0;
    t->stages[k].last_op = e;
    t->stages[k + 1].first_op = e + 1;
    return 1;
}

/* t's stages k and k + 1 made one, on stage k's GPU (stage k + 1's GPU left idle). */
static void merge_stages(struct mpress_assignment *t, int k)
{
    t->stages[k].last_op = t->stages[k + 1].last_op;
    for (int j = k + 1; j + 1 < t->n_stages; j++)
        t->stages[j] = t->stages[j + 1];
    t->n_stages--;
}

/* The evaluated time of t with cut-off D2D peers sent to the host, or HUGE_VAL when it is no
 * plan or does not fit. */
static double trial_time(const struct mpress_profile *p, const struct mpress_topology *topo,
                         const struct mpress_plan_options *o, struct mpress_assignment *t)
{
    struct mpress_plan_eval ev;
    struct mpress_error e2;
    lost_peers_to_host(p, topo, t);
    if (mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, t, &ev, &e2) != 0 ||
        !ev.fits)
        return HUGE_VAL;
    return ev.iteration_s;
}

/* Steepest descent on a's partition from its time best: each boundary moved by one allowed
 * cut either way and, with merges, each pair of adjacent stages made one; t and bt scratch.
 * Returns the time reached (a holds its plan). */
static double descend_partition(const struct mpress_profile *p,
                                const struct mpress_topology *topo,
                                const struct mpress_plan_options *o, const char *cut_ok,
                                struct mpress_assignment *a, double best, int merges,
                                struct mpress_assignment *t, struct mpress_assignment *bt)
{
    for (int round = 0; round < 64; round++) {
        double rb = best;
        for (int k = 0; k + 1 < a->n_stages; k++)
            for (int m = 0; m < (merges ? 3 : 2); m++) {
                plan_assignment_copy(t, a);
                if (m == 2)
                    merge_stages(t, k);
                else if (!shift_boundary(cut_ok, t, k, m ? 1 : -1))
                    continue;
                double v = trial_time(p, topo, o, t);
                if (v < rb * (1 - 1e-12)) {
                    rb = v;
                    plan_assignment_copy(bt, t);
                }
            }
        if (!(rb < best))
            break;
        plan_assignment_copy(a, bt);
        best = rb;
    }
    return best;
}

/* The answer's partition improved under the evaluator: descent by boundary moves and merges,
 * then, while that helps (at most 8 times), the best of every merge of two adjacent stages
 * each followed by its own descent by boundary moves. Branch and bound stops within its gap,
 * and on megatron-bert-3.9b on 16 GPUs of dgx2 it stopped on 16 stages at 0.3968954 s where 14
 * give 0.3966255 s (docs/benchmarks.md, "The answer's partition polished"). *best_s: the
 * plan's time, lowered when a faster plan is found. 0, or MPRESS_ESYSTEM. */
static int polish_partition(const struct mpress_profile *p, const struct mpress_topology *topo,
                            const struct mpress_plan_options *o, struct mpress_assignment *a,
                            double *best_s, struct mpress_error *err)
{
    char *cut_ok = malloc((size_t)p->n_ops);
    struct mpress_assignment t = {0}, bt = {0}, kick = {0}, bk = {0};
    int rc = MPRESS_ESYSTEM;
    if (!cut_ok || mpress_assignment_init(&t, p, err) || mpress_assignment_init(&bt, p, err) ||
        mpress_assignment_init(&kick, p, err) || mpress_assignment_init(&bk, p, err))
        goto out;
    plan_cut_points(p, o->cuts, cut_ok);
    double best = descend_partition(p, topo, o, cut_ok, a, *best_s, 1, &t, &bt);
    for (int it = 0; it < 8; it++) {
        double rb = best;
        for (int k = 0; k + 1 < a->n_stages; k++) {
            plan_assignment_copy(&kick, a);
            merge_stages(&kick, k);
            double v = descend_partition(p, topo, o, cut_ok, &kick,
                                         trial_time(p, topo, o, &kick), 0, &t, &bt);
            if (v < rb * (1 - 1e-12)) {
                rb = v;
                plan_assignment_copy(&bk, &kick);
            }
        }
        if (!(rb < best))
            break;
        plan_assignment_copy(a, &bk);
        best = descend_partition(p, topo, o, cut_ok, a, rb, 1, &t, &bt);
    }
    *best_s = best;
    rc = 0;
out:
    free(cut_ok);
    mpress_assignment_finish(&t);
    mpress_assignment_finish(&bt);
    mpress_assignment_finish(&kick);
    mpress_assignment_finish(&bk);
    return rc;
}

/* The MILP's answer a (evaluated: *ev) with its GPUs exchanged pairwise as the warm start's
 * are (polish_mapping), then its partition polished (polish_partition): branch and bound
 * stops within its gap, and where it stopped the mapping or the partition can still be a few
 * moves from a faster plan (docs/benchmarks.md, "The answer's mapping polished" and "The
 * answer's partition polished"). A faster plan updates *ev and the solver's objective and
 * gap; the bound stays, since it bounds every plan. 0, or an error code. */
static int polish_answer(const struct mpress_profile *p, const struct mpress_topology *topo,
                         const struct mpress_plan_options *o, struct mpress_assignment *a,
                         struct mpress_plan_eval *ev, struct mpress_plan_solver *solver,
                         struct mpress_error *err)
{
    double polished = ev->iteration_s;
    int rc = polish_mapping(p, topo, o, a, &polished, err);
    if (!rc)
        rc = polish_partition(p, topo, o, a, &polished, err);
    if (rc || !(polished < ev->iteration_s))
        return rc;
    rc = mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, a, ev, err);
    if (rc == 0 && ev->iteration_s < solver->objective) {
        solver->objective = ev->iteration_s;
        solver->bound = fmin(solver->bound, solver->objective);
        solver->gap = (solver->objective - solver->bound) / solver->objective;
        if (solver->gap <= o->mip_gap && strcmp(solver->status, "node_limit") == 0)
            snprintf(solver->status, sizeof(solver->status), "gap_reached");
    }
    return rc;
}

/* The MILP's first incumbent: the fastest fitting baseline (*warm its index, -1: none),
 * copied into *start (zeroed when none) and polished (polish_mapping). */
static int warm_start(const struct mpress_profile *p, const struct mpress_topology *topo,
                      const struct mpress_plan_options *o, const struct mpress_assignment *base,
                      const struct mpress_plan_eval *bev, struct mpress_assignment *start,
                      int *warm, struct mpress_error *err)
{
    *warm = -1;
    for (int i = 0; i < N_BASELINES; i++)
        if (bev[i].fits && (*warm < 0 || bev[i].iteration_s < bev[*warm].iteration_s))
            *warm = i;
    if (*warm < 0)
        return 0;
    const struct mpress_assignment *b = &base[*warm];
    double start_s = bev[*warm].iteration_s;
    if (mpress_assignment_init(start, p, err))
        return MPRESS_ESYSTEM;
    plan_assignment_copy(start, b);
    int rc = polish_mapping(p, topo, o, start, &start_s, err);
    if (rc)
        mpress_assignment_finish(start);
    return rc;
}

/* A stage that holds one micro-batch at a time gains nothing by swapping (its working set
 * takes the tensor back before the same backward), so the MILP is indifferent to such swaps
 * wherever its links have room; in a replay the copy out and back must both fit inside one
 * forward and the backward waits for them. Keeping them costs no memory on the stage and frees
 * the peer's or the host's, and removes link load, so the plan is no worse under the model. */
static void keep_single_flight(const struct mpress_profile *p,
                               const struct mpress_plan_options *o, struct mpress_assignment *a)
{
    int j = 0;
    for (int k = 0; k < a->n_stages; k++) {
        const struct mpress_plan_stage *st = &a->stages[k];
        int single = plan_in_flight(o->schedule, a->n_stages, k, o->micro_batches) == 1;
        for (int i = st->first_op; i <= st->last_op; i++)
            for (int t = 0; t < p->ops[i].n_tensors; t++, j++) {
                struct mpress_plan_action *ac = &a->actions[j];
                if (!single || (ac->action != MPRESS_ACTION_HOST_SWAP &&
                                ac->action != MPRESS_ACTION_D2D_SWAP))
                    continue;
                ac->action = MPRESS_ACTION_KEEP;
                ac->n_peers = 0;
                ac->evict_after_op = ac->prefetch_before_op = -1;
            }
    }
}

int mpress_plan_create(const struct mpress_profile *p, const struct mpress_topology *topo,
                       const struct mpress_plan_options *o, struct mpress_plan *out,
                       struct mpress_error *err)
{
    if (o->micro_batches < 1)
        return mpress_error_set(err, MPRESS_EUSAGE, "micro-batches must be at least 1");
    if ((unsigned)o->policy >= MPRESS_N_POLICIES)
        return mpress_error_set(err, MPRESS_EUSAGE, "unknown policy %d", (int)o->policy);
    int is_ilp = o->policy == MPRESS_POLICY_ILP;
    /* Each time is finite (the loader checks), but an iteration adds them all up: a profile
     * whose sum overflows a double has no predicted time to plan by. */
    double total_s = 0;
    for (int i = 0; i < p->n_ops; i++) {
        total_s += p->ops[i].fwd_s + p->ops[i].bwd_s;
        for (int t = 0; t < p->ops[i].n_tensors; t++)
            total_s += p->ops[i].tensors[t].recompute_s;
    }
    if (!isfinite(total_s))
        return mpress_error_set(err, MPRESS_EINPUT,
                                "the ops' forward, backward and recompute times sum to more "
                                "than a double holds (%g s is the largest)", DBL_MAX);

    struct mpress_assignment base[N_BASELINES], chosen;
    struct mpress_plan_eval bev[N_BASELINES], ev;
    memset(base, 0, sizeof(base));
    memset(&chosen, 0, sizeof(chosen));
    struct mpress_plan_solver solver;
    memset(&solver, 0, sizeof(solver));
    int rc = 0, closest = -1, chosen_idx = -1;
    for (int i = 0; i < N_BASELINES; i++) {
        rc = mpress_plan_baseline(p, topo, o, baseline_policies[i], &base[i], &bev[i], err);
        if (rc)
            goto done;
        if (closest < 0 || plan_shortfall(&bev[i]) < plan_shortfall(&bev[closest]))
            closest = i;
        if (o->policy == baseline_policies[i])
            chosen_idx = i;
    }
    if (is_ilp) {
        /* The fastest fitting baseline is the MILP's first incumbent: the MILP can then never
         * return a plan predicted slower than a baseline. */
        struct mpress_plan_options io = *o;
        struct mpress_assignment start = {0};
        int warm = -1;
        if ((rc = warm_start(p, topo, o, base, bev, &start, &warm, err)))
            goto done;
        io.warm_start = warm >= 0 ? &start : NULL;
        /* Infeasible: the MILP's message names the GPU short under the most memory-saving
         * actions. */
        if (!(rc = plan_first_search(p, topo, &io, &chosen, &solver, err)))
            rc = plan_second_search(p, topo, &io, &chosen, &solver, err);
        mpress_assignment_finish(&start);
        if (rc == MPRESS_EINFEASIBLE && warm >= 0) {
            /* A baseline fits under the same cost model, so the MILP's infeasibility is
             * numerical (extreme coefficients), not a fact about the instance. */
            rc = mpress_error_set(err, MPRESS_ESYSTEM,
                                  "the MILP found no plan although the %s baseline fits "
                                  "(%.4f s per iteration): a numerical failure of the solver; "
                                  "--policy %s gives that plan",
                                  mpress_policy_name(baseline_policies[warm]),
                                  bev[warm].iteration_s,
                                  mpress_policy_name(baseline_policies[warm]));
            goto done;
        }
        if (rc)
            goto done;
        keep_single_flight(p, o, &chosen);
        rc = mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, &chosen, &ev, err);
        if (rc)
            goto done;
        if (!ev.fits) {
            rc = mpress_error_set(err, MPRESS_ESYSTEM,
                                  "the MILP's plan does not fit when evaluated (GPU %d short by "
                                  "%llu bytes, drain backlog %llu bytes): a cost-model mismatch",
                                  ev.short_gpu, (unsigned long long)ev.short_bytes,
                                  (unsigned long long)ev.drain_short);
            goto done;
        }
        if ((rc = polish_answer(p, topo, o, &chosen, &ev, &solver, err)))
            goto done;
    } else {
        if (!bev[chosen_idx].fits) {
            explain_short(&bev[chosen_idx], mpress_policy_name(baseline_policies[chosen_idx]),
                          err);
            rc = MPRESS_EINFEASIBLE;
            goto done;
        }
        chosen = base[chosen_idx];
        memset(&base[chosen_idx], 0, sizeof(base[chosen_idx]));
        ev = bev[chosen_idx];
        snprintf(solver.status, sizeof(solver.status), "heuristic");
        solver.objective = ev.iteration_s;
        solver.bound = 0;
        solver.gap = 1;
        solver.nodes = -1;
    }

    if (!isfinite(ev.iteration_s)) {
        rc = mpress_error_set(err, MPRESS_EINPUT,
                              "the predicted iteration time is not finite (a bandwidth too small "
                              "for the bytes it carries)");
        goto done;
    }
    mpress_plan_init(out);
    snprintf(out->generator, sizeof(out->generator), "mpress %s", mpress_version());
    snprintf(out->policy, sizeof(out->policy), "%s", mpress_policy_name(o->policy));
    rc = mpress_profile_copy(&out->profile, p, err);
    if (rc)
        goto fail;
    out->topology = *topo;
    out->schedule = o->schedule;
    out->micro_batches = o->micro_batches;
    /* Prefetches are issued at the start of the forward that precedes the backward needing
     * them, so that their copy overlaps that forward as the cycle assumes (docs/cost-model.md,
     * "Prefetch"). */
    out->prefetch_lookahead = plan_schedule_prefetches(p, &chosen);
    out->n_stages = chosen.n_stages;
    out->stages = calloc((size_t)chosen.n_stages, sizeof(*out->stages));
    out->n_actions = chosen.n_actions;
    out->actions = chosen.actions;
    chosen.actions = NULL;
    out->n_gpus = topo->n_gpus;
    out->gpus = calloc((size_t)topo->n_gpus, sizeof(*out->gpus));
    if (!out->stages || !out->gpus) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto fail;
    }
    memcpy(out->stages, chosen.stages, sizeof(*out->stages) * (size_t)chosen.n_stages);
    memcpy(out->gpus, ev.gpus, sizeof(*out->gpus) * (size_t)topo->n_gpus);
    out->iteration_s = ev.iteration_s;
    out->samples_per_s = ev.samples_per_s;
    out->solver = solver;
    out->n_baselines = N_BASELINES;
    for (int i = 0; i < N_BASELINES; i++) {
        struct mpress_plan_baseline *b = &out->baselines[i];
        snprintf(b->policy, sizeof(b->policy), "%s", mpress_policy_name(baseline_policies[i]));
        b->fits = bev[i].fits;
        b->iteration_s = bev[i].fits ? bev[i].iteration_s : 0;
    }
    rc = 0;
    goto done;
fail:
    mpress_plan_finish(out);
done:
    for (int i = 0; i < N_BASELINES; i++)
        mpress_assignment_finish(&base[i]);
    mpress_assignment_finish(&chosen);
    return rc;
}
