/* A bound that forgets the mapping. On a direct-fabric server the MILP decides which GPU runs
 * each stage, and its relaxation, with the mapping fractional, is weak: gpt3-13b on dgx1 stops
 * at the node limit with a bound 14.6 % below its plan. The same model and profile on a server
 * whose every GPU pair is as well connected as any pair of the real one, with no links shared,
 * is a relaxation of it: each plan of the real server, its stages moved to GPUs 0, 1, ..., is
 * a plan of that server that fits where it fitted and is never slower. There the mapping is
 * fixed (NVSwitch), and its MILP's bound, a bound on every plan of the relaxed server, bounds
 * the real server's plans too (plan_second_search, at the end of this file, runs that MILP).
 * docs/cost-model.md, "The mapping-free bound", gives the argument term by term;
 * tests/plan/test_exact.c checks it on every enumerated assignment. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ilp_internal.h"

/* The GPUs are interchangeable in the cost model (the relaxed server puts stage k on GPU k). */
static int same_gpus(const struct mpress_topology *t)
{
    const struct mpress_topo_gpu *a = &t->gpus[0];
    for (int g = 1; g < t->n_gpus; g++) {
        const struct mpress_topo_gpu *b = &t->gpus[g];
        if (strcmp(a->model, b->model) != 0 || a->memory_bytes != b->memory_bytes ||
            a->reserve_bytes != b->reserve_bytes || a->flops_fp16 != b->flops_fp16 ||
            a->flops_fp32 != b->flops_fp32 || a->hbm_bytes_per_s != b->hbm_bytes_per_s)
            return 0;
    }
    return 1;
}

int plan_topology_relax(const struct mpress_topology *t, struct mpress_topology *out)
{
    const int G = t->n_gpus;
    if (!ilp_mapped(t) || G > MPRESS_MAX_GPUS || t->pcie_bytes_per_s <= 0 || !same_gpus(t))
        return -1;
    /* One port per GPU as fast as the fastest GPU's NVLinks and PCIe link together: a port
     * load of the relaxed server (a GPU's NVLink traffic plus the boundaries it sent over
     * PCIe) is then never above the busiest of the real links it came from, and any pair
     * runs at least as fast as the best real pair. */
    double port = 0;
    for (int g = 0; g < G; g++) {
        double sum = 0;
        for (int q = 0; q < G; q++)
            sum += plan_nvlink_bw(t, g, q);
        port = fmax(port, sum);
    }
    port += t->pcie_bytes_per_s;
    *out = *t;
    snprintf(out->name, sizeof(out->name), "%.50s-mapfree", t->name);
    out->fabric = MPRESS_FABRIC_NVSWITCH;
    out->nvlink_bytes_per_s = port;
    /* Each GPU behind its own PCIe switch (its uplink no slower than its own link) and on its
     * own socket: no host copy shares an uplink and no CPU optimizer step waits for another's
     * (each socket keeps the real one's memory bandwidth). */
    out->n_switches = G;
    out->n_sockets = G;
    if (out->socket_link_bytes_per_s <= 0)
        out->socket_link_bytes_per_s = t->pcie_bytes_per_s;
    for (int g = 0; g < G; g++) {
        out->gpus[g].nvlink_ports = 1;
        out->gpus[g].pcie_switch = g;
        out->gpus[g].socket = g;
        out->switches[g].uplink_bytes_per_s = t->pcie_bytes_per_s;
        out->switches[g].socket = g;
        for (int q = 0; q < G; q++)
            out->nvlinks[g][q] = g != q;
    }
    return 0;
}

int plan_topology_relax_sockets(const struct mpress_topology *t, struct mpress_topology *out)
{
    if (plan_topology_relax(t, out))
        return -1;
    /* A plan of t is the same plan here on the same GPUs: each pair is as fast as before, no
     * link is shared, and each CPU queue takes the steps it took on t. */
    out->n_sockets = t->n_sockets;
    for (int g = 0; g < t->n_gpus; g++) {
        out->gpus[g].socket = t->gpus[g].socket;
        out->switches[g].socket = t->gpus[g].socket;
    }
    return 0;
}

void plan_assignment_relax(const struct mpress_assignment *a, int n_gpus,
                           struct mpress_assignment *out)
{
    int to[MPRESS_MAX_GPUS], used[MPRESS_MAX_GPUS] = {0}, next = a->n_stages;
    for (int k = 0; k < a->n_stages; k++)
        used[a->stages[k].gpu] = 1;
    for (int g = 0; g < n_gpus; g++)
        if (!used[g])
            to[g] = next++;
    for (int k = 0; k < a->n_stages; k++)
        to[a->stages[k].gpu] = k;
    out->n_stages = a->n_stages;
    memcpy(out->stages, a->stages, sizeof(out->stages));
    for (int k = 0; k < a->n_stages; k++)
        out->stages[k].gpu = k;
    memcpy(out->actions, a->actions, sizeof(*out->actions) * (size_t)a->n_actions);
    for (int j = 0; j < a->n_actions; j++)
        for (int i = 0; i < out->actions[j].n_peers; i++)
            out->actions[j].peers[i] = to[a->actions[j].peers[i]];
}

void plan_assignment_unrelax(const struct mpress_assignment *rel,
                             const struct mpress_assignment *real, int n_gpus,
                             struct mpress_assignment *out)
{
    int back[MPRESS_MAX_GPUS], used[MPRESS_MAX_GPUS] = {0}, next = real ? real->n_stages : 0;
    for (int k = 0; real && k < real->n_stages; k++) {
        back[k] = real->stages[k].gpu;
        used[real->stages[k].gpu] = 1;
    }
    for (int g = 0; g < n_gpus; g++)
        if (!real || !used[g])
            back[next++] = g;
    out->n_stages = rel->n_stages;
    memcpy(out->stages, rel->stages, sizeof(out->stages));
    for (int k = 0; k < rel->n_stages; k++)
        out->stages[k].gpu = back[rel->stages[k].gpu];
    for (int j = 0; j < out->n_actions; j++) {
        struct mpress_plan_action *ac = &out->actions[j];
        *ac = rel->actions[j];
        ac->action = MPRESS_ACTION_KEEP;
        ac->n_peers = 0;
        ac->evict_after_op = ac->prefetch_before_op = -1;
    }
}

/* Whether plan_second_search runs both of its searches on topo where the first stops above
 * the gap: a server the relaxation applies to, with host optimizers on several sockets. */
static int mapping_search_follows(const struct mpress_topology *topo)
{
    struct mpress_topology relaxed;
    return plan_topology_relax(topo, &relaxed) == 0 && ilp_host_opt(topo) && topo->n_sockets >= 2;
}

/* After the mapping-free bound's search, where the gap is still open with optimizer states
 * that may go to the host on several sockets: the plan with the mapping fixed to the one
 * ilp_map_search finds from the relaxed plan's partition (rel, moved back onto this server's
 * GPUs through plan's mapping), when it is faster. gpt3-13b on dgx1: the first search keeps
 * 8.4910 s, with six host steps queued on two sockets; on the relaxed plan's partition two
 * host steps on either socket give 7.53 s (docs/benchmarks.md, "The mapping search"). On
 * gpt-20b at 32 micro-batches the search also moves blocks between slots: 22.6358 s on the
 * relaxed plan's even partition, 22.4030 s on 11, 11, 12, 12, 12, 13, 13, 12 layers
 * (docs/benchmarks.md, "The mapping search moves blocks"). Only its plan counts: its bound is
 * that of one mapping. */
static void map_search(const struct mpress_profile *p, const struct mpress_topology *topo,
                       const struct mpress_plan_options *o, const struct mpress_assignment *rel,
                       int rel_same_gpus, struct mpress_assignment *plan,
                       struct mpress_plan_solver *solver)
{
    if (solver->gap <= o->mip_gap || !mapping_search_follows(topo))
        return;
    struct mpress_assignment guide = {0}, got = {0};
    struct mpress_plan_solver st;
    struct mpress_plan_options so = *o;
    so.dump_lp = NULL;
    so.progress = NULL; /* its bound is not this server's */
    so.warm_start = plan;
    if (mpress_assignment_init(&guide, p, NULL) == 0) {
        plan_assignment_unrelax(rel, rel_same_gpus ? NULL : plan, topo->n_gpus, &guide);
        if (ilp_plan_run(p, topo, &so, ILP_MAP_SEARCH, &guide, &got, &st, NULL) == 0) {
            if (st.nodes > 0)
                solver->nodes += st.nodes;
            if (st.objective < solver->objective * (1 - 1e-9)) {
                mpress_assignment_finish(plan);
                *plan = got;
                memset(&got, 0, sizeof(got));
                solver->objective = st.objective;
                solver->bound = fmin(solver->bound, solver->objective);
                solver->gap = (solver->objective - solver->bound) / solver->objective;
                if (solver->gap <= o->mip_gap)
                    snprintf(solver->status, sizeof(solver->status), "gap_reached");
            }
        }
    }
    mpress_assignment_finish(&guide);
    mpress_assignment_finish(&got);
}

/* Where all three searches may run, the first one's branch and bound past 500 nodes, half of
 * the search before it and the local search after them only searched the mapping the third
 * search replaces: on gpt3-13b on dgx1 they took 19 of the 30 s and found nothing (the same
 * 7.51 s plan comes from the third search either way); every other dgx1 case of the planner
 * matrix closes the gap with the same plan within 635 nodes in all (docs/benchmarks.md, "The
 * first search shortened"). */
int plan_first_search(const struct mpress_profile *p, const struct mpress_topology *topo,
                      const struct mpress_plan_options *o, struct mpress_assignment *out,
                      struct mpress_plan_solver *stats, struct mpress_error *err)
{
    return ilp_plan_run(p, topo, o, mapping_search_follows(topo) ? ILP_FIRST_SHORT : 0, NULL,
                        out, stats, err);
}

/* The user's progress callback during a bound-only search on a relaxed server, whose
 * incumbents are not plans of the real one: the real plan's time as the incumbent and the
 * higher of the two bounds (each a bound on the real server's plans). */
struct bound_progress {
    const struct mpress_plan_options *o;
    double objective, bound;
};

static void on_bound_progress(void *ctx, double incumbent, double bound, double gap)
{
    const struct bound_progress *bp = ctx;
    (void)incumbent, (void)gap;
    double b = fmin(fmax(bp->bound, bound), bp->objective);
    bp->o->progress(bp->o->progress_ctx, bp->objective, b,
                    bp->objective > 0 ? (bp->objective - b) / bp->objective : 0);
}

/* Where no baseline fits and the mapping search has left the gap above mip_gap: whether any
 * plan is faster than the plan's time less mip_gap, asked of the MILP on the relaxed server
 * with the real sockets, whose plans include every plan of topo with its CPU queues shared as
 * on topo (ilp_plan_cutoff): where its tree proves that none is, the plan is within mip_gap
 * of the optimum. Its nodes, within the node limit (at most 5000), are only those whose
 * relaxation is faster than that time, which makes it cheaper than the same MILP searched
 * for its own optimum: on gpt-20b on dgx1 at 32 micro-batches 2,255 nodes prove 1 % of the
 * 22.4030 s plan, where the mapping-free bound stopped at 4.58 % after 5,751
 * (docs/benchmarks.md, "The certificate search"). */
static void certify(const struct mpress_profile *p, const struct mpress_topology *topo,
                    const struct mpress_plan_options *o, struct mpress_plan_solver *solver)
{
    struct mpress_topology relaxed;
    if (solver->gap <= o->mip_gap || plan_topology_relax_sockets(topo, &relaxed))
        return;
    double cut = solver->objective * (1 - o->mip_gap);
    struct mpress_plan_options so = *o;
    so.dump_lp = NULL;
    so.node_limit = o->node_limit > 0 && o->node_limit < 5000 ? o->node_limit : 5000;
    struct bound_progress bp = {.o = o, .objective = solver->objective, .bound = solver->bound};
    if (o->progress) {
        so.progress = on_bound_progress;
        so.progress_ctx = &bp;
    }
    struct mpress_plan_solver st;
    if (ilp_plan_cutoff(p, &relaxed, &so, ILP_BOUND_ONLY | ILP_SOCKET_FREE, cut, &st, NULL))
        return;
    if (st.nodes > 0)
        solver->nodes += st.nodes;
    if (st.bound >= cut) {
        solver->bound = cut;
        solver->gap = o->mip_gap;
        snprintf(solver->status, sizeof(solver->status), "gap_reached");
    } else if (st.bound > solver->bound) {
        solver->bound = st.bound;
        solver->gap = (solver->objective - solver->bound) / solver->objective;
    }
}

/* Two searches that help where the first stopped at its node limit above the gap:
 * - On a direct fabric (the MILP decides the mapping) the bound is the weak side; the MILP of
 *   the mapping-free relaxation (above), started from the plan moved onto it, bounds
 *   every plan of this server. Its plans are the relaxed server's, so only its bound counts.
 * - On more than ILP_HOST_FIRST_MAX slots of a fixed mapping the search gives the cycle its
 *   floor, whose tree raises the bound; branching on the placement first instead finds faster
 *   plans there but leaves the bound low (gpt-20b on dgx2-16: 7.8165 s at 1.35 % against
 *   7.7792 s at 4.27 %). It runs from the same start; both are bounds of the same MILP.
 * docs/benchmarks.md, "The mapping-free bound" and "Both searches on many slots". */
int plan_second_search(const struct mpress_profile *p, const struct mpress_topology *topo,
                       const struct mpress_plan_options *o, struct mpress_assignment *plan,
                       struct mpress_plan_solver *solver, struct mpress_error *err)
{
    /* Not after a time limit either: that is the user's cap on the search. */
    if (solver->gap <= o->mip_gap || strcmp(solver->status, "node_limit") != 0)
        return 0;
    struct mpress_topology relaxed;
    struct mpress_assignment warm = {0}, got = {0};
    struct mpress_plan_options so = *o;
    so.dump_lp = NULL;
    const struct mpress_topology *on = topo;
    struct bound_progress bp = {.o = o, .objective = solver->objective, .bound = solver->bound};
    int branch = 0, sockets = mapping_search_follows(topo) &&
                              (o->node_limit <= 0 || o->node_limit > PLAN_SOCKET_BOUND_NODES);
    if (!o->warm_start && !sockets && mapping_search_follows(topo)) {
        /* No baseline fits: the mapping search on the first search's own partition, then the
         * certificate search (certify). On gpt-20b on dgx1 at 32 micro-batches the
         * mapping-free search took 5,751 nodes for a relaxed plan of 25.28 s and a bound the
         * certificate replaces; the mapping search finds the same plan from either
         * partition. */
        map_search(p, topo, o, plan, 1, plan, solver); /* its guide is made before plan moves */
        certify(p, topo, o, solver);
        return 0;
    }
    if (sockets && plan_topology_relax_sockets(topo, &relaxed) == 0) {
        /* the plan as it is: the relaxed server keeps its GPUs' sockets */
        so.warm_start = plan;
        on = &relaxed;
        branch = ILP_BOUND_ONLY | ILP_SOCKET_FREE;
    } else if (plan_topology_relax(topo, &relaxed) == 0) {
        sockets = 0;
        if (mpress_assignment_init(&warm, p, err))
            return MPRESS_ESYSTEM;
        plan_assignment_relax(plan, topo->n_gpus, &warm);
        so.warm_start = &warm;
        on = &relaxed;
        branch = ILP_BOUND_ONLY;
    } else if (!ilp_mapped(topo) && ilp_host_opt(topo) && topo->n_gpus > ILP_HOST_FIRST_MAX) {
        branch = ILP_BRANCH_HOST_FIRST;
    } else {
        return 0;
    }
    if (on != topo && o->progress) {
        so.progress = on_bound_progress;
        so.progress_ctx = &bp;
    }
    struct mpress_plan_solver st;
    /* A failure here leaves the first answer as it was. */
    int rc = ilp_plan_run(p, on, &so, branch, NULL, &got, &st, NULL);
    mpress_assignment_finish(&warm);
    if (rc == 0) {
        if (st.nodes > 0)
            solver->nodes += st.nodes;
        if (on == topo && st.objective < solver->objective * (1 - 1e-9)) {
            mpress_assignment_finish(plan);
            *plan = got;
            memset(&got, 0, sizeof(got));
            solver->objective = st.objective;
        }
        solver->bound = fmin(fmax(solver->bound, st.bound), solver->objective);
        solver->gap = solver->objective > 0
                          ? (solver->objective - solver->bound) / solver->objective
                          : 0;
        if (solver->gap <= o->mip_gap)
            snprintf(solver->status, sizeof(solver->status), "gap_reached");
    }
    if (rc == 0 && on != topo)
        map_search(p, topo, o, &got, sockets, plan, solver);
    mpress_assignment_finish(&got);
    return 0;
}
