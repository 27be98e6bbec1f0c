/* Exactness of the MILP: on random tiny instances (<= 5 ops, <= 4 saved tensors, <= 3 GPUs)
 * the MILP's optimum equals exhaustive enumeration of every partition x mapping x optimizer
 * placement x per-tensor action under the evaluator (mpress_plan_evaluate). On NVSwitch
 * servers with two sockets the MILP fixes the mapping (stage s of S on GPU N - S + s), so there
 * the enumeration's optimum over that mapping is the one compared, and how often another
 * mapping is faster is printed; 60 of the instances put a split tied matrix's owner and the
 * next slot on one socket and the copy on the other (the owner's CPU queue is not the copy's).
 *
 * D2D byte shares are continuous, so the enumeration cannot list them: for each discrete
 * choice with D2D tensors it solves the remaining split exactly as a small LP written here from
 * the cost model (split bytes per stage and peer; peers' memory; NVLink loads per pair, or per
 * NVSwitch port), independent of the MILP builder. Everything else the LP needs comes from the
 * evaluator: the memory without parked bytes and the cycle of every link the split does not
 * touch. The best split is then rounded to bytes and re-evaluated by the evaluator. */
#include <glpk.h>
#include <math.h>

#include "check.h"
#include "../../lib/plan/ilp_internal.h"
#include "tiny.h"

#define MAXT 4

struct brute {
    const struct mpress_profile *p;
    const struct mpress_topology *t;
    enum mpress_schedule sched;
    int M;
    double best;
    struct mpress_assignment a, best_a;
    long evals, lps;
    /* The mapping-free relaxation of a direct server (plan_topology_relax), NULL elsewhere:
     * every assignment that fits is checked to fit there too, never slower (ra: its copy). */
    const struct mpress_topology *rt;
    struct mpress_assignment ra;
    long relaxed;
    /* The same with the real sockets (plan_topology_relax_sockets), NULL elsewhere: every
     * assignment that fits is checked to fit there too on the same GPUs, never slower. */
    const struct mpress_topology *rts;
    long relaxed_sockets;
    /* NVSwitch with two sockets: the MILP fixes the mapping (slot k on GPU k, the empty slots
     * first: stage s of S on GPU N - S + s), which GPUs on different sockets make a choice;
     * best is over that mapping, best_any over all (how much the choice costs is counted). */
    int fixed_map;
    double best_any;
};

static int term_off(void *info, const char *s)
{
    (void)info, (void)s;
    return 1;
}

static int fits_margin(const struct mpress_plan_eval *ev)
{
    for (int g = 0; g < ev->n_gpus; g++)
        if ((double)ev->gpus[g].bound > (double)ev->gpus[g].capacity * (1 - PLAN_MEM_MARGIN))
            return 0;
    return ev->host_short == 0 && ev->drain_short == 0;
}

static int first_peer(const struct mpress_topology *t, int g)
{
    for (int q = 0; q < t->n_gpus; q++)
        if (plan_nvlink_bw(t, g, q) > 0)
            return q;
    return -1;
}

/* Solves the D2D split of b->a (every d2d action already names its first peer with all its
 * bytes). Returns the iteration time, or -1 when no split fits. Rewrites b->a's split. */
static double split_lp(struct brute *b)
{
    const struct mpress_topology *t = b->t;
    const int S = b->a.n_stages, G = t->n_gpus;
    struct mpress_plan_eval ev1, ev0;
    if (mpress_plan_evaluate(b->p, t, b->sched, b->M, &b->a, &ev1, NULL))
        return -1;
    /* Keep-version: the cycle of everything the split does not move. */
    struct mpress_plan_action saved[MAXT];
    for (int j = 0; j < b->a.n_actions; j++) {
        saved[j] = b->a.actions[j];
        if (b->a.actions[j].action == MPRESS_ACTION_D2D_SWAP) {
            b->a.actions[j].action = MPRESS_ACTION_KEEP;
            b->a.actions[j].n_peers = 0;
            b->a.actions[j].evict_after_op = b->a.actions[j].prefetch_before_op = -1;
        }
    }
    int rc = mpress_plan_evaluate(b->p, t, b->sched, b->M, &b->a, &ev0, NULL);
    for (int j = 0; j < b->a.n_actions; j++)
        b->a.actions[j] = saved[j];
    if (rc)
        return -1;
    double c0 = ev0.cycle_s;
    double lb = ev1.fill_drain_s + (b->M - 1) * c0 + ev1.tail_s;
    if (lb >= b->best * (1 + 1e-9))
        return -1;
    double base[MPRESS_MAX_GPUS];
    for (int g = 0; g < G; g++) {
        base[g] = (double)(ev1.gpus[g].bound - ev1.gpus[g].parked) / MB;
        if (base[g] > ev1.gpus[g].capacity * (1 - PLAN_MEM_MARGIN) / MB)
            return -1;
    }
    if (ev1.host_short || ev0.drain_short) /* ev0: host swaps alone already drain too slowly */
        return -1;
    b->lps++;

    /* Per stage: D2D bytes, GPU, in-flight count, boundary output. */
    double D[MPRESS_MAX_GPUS] = {0}, out[MPRESS_MAX_GPUS] = {0}, fwd[MPRESS_MAX_GPUS] = {0};
    int gpu[MPRESS_MAX_GPUS], n[MPRESS_MAX_GPUS], stage_on[MPRESS_MAX_GPUS];
    for (int g = 0; g < G; g++)
        stage_on[g] = -1;
    for (int k = 0; k < S; k++) {
        gpu[k] = b->a.stages[k].gpu;
        stage_on[gpu[k]] = k;
        n[k] = plan_in_flight(b->sched, S, k, b->M);
        out[k] = k + 1 < S ? (double)b->p->ops[b->a.stages[k].last_op].output_bytes / MB : 0;
        for (int i = b->a.stages[k].first_op; i <= b->a.stages[k].last_op; i++)
            fwd[k] += b->p->ops[i].fwd_s;
    }
    for (int j = 0; j < b->a.n_actions; j++) {
        const struct mpress_plan_action *ac = &b->a.actions[j];
        if (ac->action != MPRESS_ACTION_D2D_SWAP)
            continue;
        int k = 0;
        while (b->a.stages[k].last_op < ac->op)
            k++;
        D[k] += (double)b->p->ops[ac->op].tensors[ac->tensor].bytes / MB;
    }

    glp_prob *lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    int T = glp_add_cols(lp, 1);
    glp_set_col_bnds(lp, T, GLP_LO, c0, 0);
    glp_set_obj_coef(lp, T, 1);
    int e[MPRESS_MAX_GPUS][MPRESS_MAX_GPUS] = {{0}};
    for (int k = 0; k < S; k++)
        for (int g = 0; g < G; g++)
            if (D[k] > 0 && plan_nvlink_bw(t, gpu[k], g) > 0) {
                e[k][g] = glp_add_cols(lp, 1);
                glp_set_col_bnds(lp, e[k][g], GLP_LO, 0, 0);
            }
    int ind[64];
    double val[64];
    for (int k = 0; k < S; k++) { /* the whole D2D volume is split */
        if (D[k] <= 0)
            continue;
        int nz = 0;
        for (int g = 0; g < G; g++)
            if (e[k][g])
                ind[++nz] = e[k][g], val[nz] = 1;
        int r = glp_add_rows(lp, 1);
        glp_set_row_bnds(lp, r, GLP_FX, D[k], D[k]);
        glp_set_mat_row(lp, r, nz, ind, val);
    }
    for (int g = 0; g < G; g++) { /* peers' memory */
        int nz = 0;
        for (int k = 0; k < S; k++)
            if (e[k][g])
                ind[++nz] = e[k][g], val[nz] = n[k];
        if (!nz)
            continue;
        int r = glp_add_rows(lp, 1);
        glp_set_row_bnds(lp, r, GLP_UP, 0,
                         ev1.gpus[g].capacity * (1 - PLAN_MEM_MARGIN) / MB - base[g]);
        glp_set_mat_row(lp, r, nz, ind, val);
    }
    /* Drain: one micro-batch's evictions within PLAN_DRAIN_SHARE of the stage's forward, per
     * peer pair (direct) or through the stage GPU's ports (NVSwitch). */
    for (int k = 0; k < S; k++) {
        if (D[k] <= 0)
            continue;
        if (t->fabric == MPRESS_FABRIC_NVSWITCH) {
            int nz = 0;
            for (int g = 0; g < G; g++)
                if (e[k][g])
                    ind[++nz] = e[k][g], val[nz] = 1;
            int r = glp_add_rows(lp, 1);
            glp_set_row_bnds(lp, r, GLP_UP, 0,
                             PLAN_DRAIN_SHARE * fwd[k] * plan_port_bw(t, gpu[k]) / MB);
            glp_set_mat_row(lp, r, nz, ind, val);
        } else {
            for (int g = 0; g < G; g++)
                if (e[k][g])
                    glp_set_col_bnds(lp, e[k][g], GLP_DB, 0,
                                     PLAN_DRAIN_SHARE * fwd[k] *
                                         plan_nvlink_bw(t, gpu[k], g) / MB);
        }
    }
    /* Links: bytes each way per micro-batch over bandwidth <= T. */
    if (t->fabric == MPRESS_FABRIC_NVSWITCH) {
        for (int g = 0; g < G; g++) {
            int nz = 0, k = stage_on[g];
            ind[++nz] = T, val[nz] = plan_port_bw(t, g) / MB;
            for (int q = 0; q < G; q++) {
                if (k >= 0 && e[k][q])
                    ind[++nz] = e[k][q], val[nz] = -1;
                if (stage_on[q] >= 0 && e[stage_on[q]][g])
                    ind[++nz] = e[stage_on[q]][g], val[nz] = -1;
            }
            double bnd = k >= 0 ? out[k] + (k > 0 ? out[k - 1] : 0) : 0;
            int r = glp_add_rows(lp, 1);
            glp_set_row_bnds(lp, r, GLP_LO, bnd, 0);
            glp_set_mat_row(lp, r, nz, ind, val);
        }
    } else {
        for (int x = 0; x < G; x++)
            for (int y = x + 1; y < G; y++) {
                if (plan_nvlink_bw(t, x, y) <= 0)
                    continue;
                int nz = 0, kx = stage_on[x], ky = stage_on[y];
                ind[++nz] = T, val[nz] = plan_nvlink_bw(t, x, y) / MB;
                if (kx >= 0 && e[kx][y])
                    ind[++nz] = e[kx][y], val[nz] = -1;
                if (ky >= 0 && e[ky][x])
                    ind[++nz] = e[ky][x], val[nz] = -1;
                double bnd = 0;
                if (kx >= 0 && ky >= 0 && (kx == ky + 1 || ky == kx + 1))
                    bnd = out[kx < ky ? kx : ky];
                int r = glp_add_rows(lp, 1);
                glp_set_row_bnds(lp, r, GLP_LO, bnd, 0);
                glp_set_mat_row(lp, r, nz, ind, val);
            }
    }
    glp_smcp parm;
    glp_init_smcp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    double value = -1;
    if (glp_simplex(lp, &parm) == 0 && glp_get_status(lp) == GLP_OPT) {
        value = ev1.fill_drain_s + (b->M - 1) * glp_get_obj_val(lp) + ev1.tail_s;
        /* Write the split into the assignment: bytes per peer, tensor by tensor. */
        double left[MPRESS_MAX_GPUS][MPRESS_MAX_GPUS];
        for (int k = 0; k < S; k++)
            for (int g = 0; g < G; g++)
                left[k][g] = e[k][g] ? glp_get_col_prim(lp, e[k][g]) * MB : 0;
        for (int j = 0; j < b->a.n_actions; j++) {
            struct mpress_plan_action *ac = &b->a.actions[j];
            if (ac->action != MPRESS_ACTION_D2D_SWAP)
                continue;
            int k = 0;
            while (b->a.stages[k].last_op < ac->op)
                k++;
            uint64_t need = b->p->ops[ac->op].tensors[ac->tensor].bytes;
            ac->n_peers = 0;
            for (int g = 0; g < G && need > 0; g++) {
                if (!e[k][g] || left[k][g] < 0.5)
                    continue;
                uint64_t take = (uint64_t)llround(left[k][g]);
                if (take > need)
                    take = need;
                ac->peers[ac->n_peers] = g;
                ac->peer_bytes[ac->n_peers++] = take;
                need -= take;
                left[k][g] -= (double)take;
            }
            if (need > 0) { /* rounding: the last byte or so goes to the last peer used */
                if (ac->n_peers == 0) {
                    ac->peers[0] = first_peer(t, gpu[k]);
                    ac->peer_bytes[0] = 0;
                    ac->n_peers = 1;
                }
                ac->peer_bytes[ac->n_peers - 1] += need;
            }
        }
    }
    glp_delete_prob(lp);
    return value;
}

static void consider(struct brute *b)
{
    int has_d2d = 0;
    for (int j = 0; j < b->a.n_actions; j++)
        has_d2d |= b->a.actions[j].action == MPRESS_ACTION_D2D_SWAP;
    double v;
    b->evals++;
    if (has_d2d) {
        v = split_lp(b);
        if (v < 0)
            return;
    } else {
        struct mpress_plan_eval ev;
        if (mpress_plan_evaluate(b->p, b->t, b->sched, b->M, &b->a, &ev, NULL) || !fits_margin(&ev))
            return;
        v = ev.iteration_s;
    }
    if (b->rt) {
        struct mpress_plan_eval ev, evr;
        if (mpress_plan_evaluate(b->p, b->t, b->sched, b->M, &b->a, &ev, NULL) == 0 &&
            fits_margin(&ev)) {
            plan_assignment_relax(&b->a, b->t->n_gpus, &b->ra);
            b->relaxed++;
            CHECK_INT(mpress_plan_evaluate(b->p, b->rt, b->sched, b->M, &b->ra, &evr, NULL), 0);
            CHECK_MSG(fits_margin(&evr) &&
                          evr.iteration_s <= ev.iteration_s * (1 + 1e-9) + 1e-12,
                      "relaxed server: fits %d, %.9g s against %.9g s on the real one",
                      fits_margin(&evr), evr.iteration_s, ev.iteration_s);
        }
    }
    if (b->rts) {
        struct mpress_plan_eval ev, evs;
        if (mpress_plan_evaluate(b->p, b->t, b->sched, b->M, &b->a, &ev, NULL) == 0 &&
            fits_margin(&ev)) {
            b->relaxed_sockets++;
            CHECK_INT(mpress_plan_evaluate(b->p, b->rts, b->sched, b->M, &b->a, &evs, NULL), 0);
            CHECK_MSG(fits_margin(&evs) &&
                          evs.iteration_s <= ev.iteration_s * (1 + 1e-9) + 1e-12,
                      "relaxed server with sockets: fits %d, %.9g s against %.9g s on the real "
                      "one", fits_margin(&evs), evs.iteration_s, ev.iteration_s);
        }
    }
    b->best_any = fmin(b->best_any, v);
    for (int s = 0; b->fixed_map && s < b->a.n_stages; s++)
        if (b->a.stages[s].gpu != b->t->n_gpus - b->a.n_stages + s)
            return;
    if (v < b->best) {
        b->best = v;
        b->best_a.n_stages = b->a.n_stages;
        memcpy(b->best_a.stages, b->a.stages, sizeof(b->a.stages));
        memcpy(b->best_a.actions, b->a.actions, sizeof(*b->a.actions) * (size_t)b->a.n_actions);
    }
}

/* Every action vector for the current stages, mapping and optimizer placement. */
static void enum_actions(struct brute *b, int j)
{
    if (j == b->a.n_actions) {
        consider(b);
        return;
    }
    struct mpress_plan_action *ac = &b->a.actions[j];
    int k = 0;
    while (b->a.stages[k].last_op < ac->op)
        k++;
    for (int kind = 0; kind < 4; kind++) {
        ac->action = (enum mpress_action)kind;
        ac->n_peers = 0;
        ac->evict_after_op = kind ? ac->op : -1;
        ac->prefetch_before_op = kind ? b->a.stages[k].last_op : -1;
        if (kind == MPRESS_ACTION_D2D_SWAP) {
            int q = first_peer(b->t, b->a.stages[k].gpu);
            if (q < 0)
                continue;
            ac->n_peers = 1;
            ac->peers[0] = q;
            ac->peer_bytes[0] = b->p->ops[ac->op].tensors[ac->tensor].bytes;
        }
        enum_actions(b, j + 1);
    }
}

static void enum_mapping(struct brute *b, int k, unsigned used)
{
    int S = b->a.n_stages;
    if (k == S) {
        for (int mask = 0; mask < (1 << S); mask++) {
            for (int s = 0; s < S; s++)
                b->a.stages[s].optimizer_on_host = (mask >> s) & 1;
            enum_actions(b, 0);
        }
        return;
    }
    for (int g = 0; g < b->t->n_gpus; g++) {
        if (used & (1u << g))
            continue;
        b->a.stages[k].gpu = g;
        enum_mapping(b, k + 1, used | (1u << g));
    }
}

/* Stages S with cuts chosen as a bit mask over the n-1 op boundaries. */
static void enum_partitions(struct brute *b)
{
    int n = b->p->n_ops;
    for (unsigned mask = 0; mask < (1u << (n - 1)); mask++) {
        int S = __builtin_popcount(mask) + 1;
        if (S > b->t->n_gpus)
            continue;
        int k = 0, first = 0;
        for (int i = 0; i < n; i++)
            if (i == n - 1 || (mask >> i) & 1) {
                b->a.stages[k].first_op = first;
                b->a.stages[k].last_op = i;
                first = i + 1;
                k++;
            }
        b->a.n_stages = S;
        enum_mapping(b, 0, 0);
    }
}

/* Set for the instances after the first 400: three NVSwitch GPUs, the first two on one socket
 * and the third on the other, so that a split tied matrix's owner (slot 0) and the step
 * after it (slot 1) share a CPU queue the copy's step (slot 2) is not in. */
static int socket_split_;

/* Set for the instances after the first 460: held stage inputs. Every op after the first saves
 * two tensors of one class, the first recomputed from the op before it (as a layer's first
 * layernorm input is from the layer before), so that where a cut falls before the op,
 * recomputing that tensor holds its input (eval.c); the other is its own op's. */
static int held_;

static void held_instance(struct mpress_profile *p, struct mpress_topology *t,
                          enum mpress_schedule *sched, int *M)
{
    int G = tiny_range(2, 3);
    const int n = MAXT / 2; /* ops after the first, two tensors each */
    tiny_profile_init(p);
    uint64_t states = 0, acts = 0;
    static const uint64_t sizes[] = {40, 90, 150};
    static const double rec[] = {0.02, 0.12};
    uint64_t bytes = sizes[tiny_range(0, 2)] * MB;
    double rs = rec[tiny_range(0, 1)];
    struct mpress_op *op = tiny_op(p, "embed", 0.01 * tiny_range(1, 10), 0,
                                   (uint64_t)tiny_range(5, 60), 0);
    states += op->param_bytes;
    for (int i = 1; i <= n; i++) {
        op = tiny_op(p, "layer", 0.01 * tiny_range(1, 10), (uint64_t)tiny_range(0, 40),
                     (uint64_t)tiny_range(5, 60), 2);
        op->workspace_bytes = (uint64_t)tiny_range(0, 30) * MB;
        states += op->param_bytes + op->grad_bytes + op->optim_bytes;
        for (int k = 0; k < 2; k++) {
            struct mpress_saved_tensor *ts = &op->tensors[k];
            snprintf(ts->name, sizeof(ts->name), "input");
            ts->bytes = bytes;
            ts->recompute_s = rs;
            ts->recompute_op = k == 0 ? i - 1 : i;
            acts += ts->bytes;
        }
    }
    *M = tiny_range(2, 4);
    *sched = (enum mpress_schedule)tiny_range(0, 2);
    uint64_t hi = (states + acts * (uint64_t)*M) / MB + 100, lo = states / MB / (uint64_t)G + 20;
    tiny_topo(t, G, tiny_range(0, 1), lo + tiny_rand() % (hi - lo + 1));
    t->nvlink_bytes_per_s = 4000 * MB;
    t->pcie_bytes_per_s = tiny_range(0, 1) ? 600 * MB : 3000 * MB;
    t->switches[0].uplink_bytes_per_s = 4000 * MB;
    if (t->fabric == MPRESS_FABRIC_DIRECT)
        for (int a = 0; a < G; a++)
            for (int c = a + 1; c < G; c++)
                t->nvlinks[a][c] = t->nvlinks[c][a] = tiny_range(0, 2);
    if (tiny_range(0, 2) == 0)
        t->host_memory_bytes = (uint64_t)tiny_range(0, 600) * MB;
}

/* Whether a's stage s holds a stage input kept or swapped while a tensor of its class in the
 * stage is recomputed: what the MILP could not choose before its held rows counted the
 * class's other tensors. */
static int held_spared(const struct mpress_profile *p, const struct mpress_assignment *a)
{
    for (int j = 0; j < a->n_actions; j++) {
        const struct mpress_plan_action *h = &a->actions[j];
        int s = 0;
        while (a->stages[s].last_op < h->op)
            s++;
        if (p->ops[h->op].tensors[h->tensor].recompute_op >= a->stages[s].first_op ||
            h->action == MPRESS_ACTION_RECOMPUTE)
            continue;
        for (int q = 0; q < a->n_actions; q++) {
            const struct mpress_plan_action *o = &a->actions[q];
            if (q != j && o->action == MPRESS_ACTION_RECOMPUTE &&
                o->op >= a->stages[s].first_op && o->op <= a->stages[s].last_op)
                return 1;
        }
    }
    return 0;
}

static void random_instance(struct mpress_profile *p, struct mpress_topology *t,
                            enum mpress_schedule *sched, int *M)
{
    int G = tiny_range(1, 3);
    int nvswitch = G > 1 && tiny_range(0, 2) == 0;
    if (socket_split_)
        G = 3, nvswitch = 1;
    int n = tiny_range(1, 5);
    int tensors_left = tiny_range(1, MAXT);
    tiny_profile_init(p);
    uint64_t states = 0, acts = 0;
    static const uint64_t sizes[] = {40, 90, 150};
    static const double rec[] = {0.02, 0.12};
    for (int i = 0; i < n; i++) {
        if (i > 0 && tiny_range(0, 2) == 0 && p->ops[i - 1].n_tensors <= tensors_left) {
            /* A copy of the previous op: runs of identical blocks, like a model's layers. */
            const struct mpress_op prev = p->ops[i - 1];
            struct mpress_op *op = tiny_op(p, prev.kind, prev.fwd_s, 0, 0, prev.n_tensors);
            struct mpress_saved_tensor *keep = op->tensors;
            char name[96];
            memcpy(name, op->name, sizeof(name));
            *op = p->ops[i - 1];
            memcpy(op->name, name, sizeof(name));
            op->tensors = keep;
            for (int k = 0; k < op->n_tensors; k++) {
                char id[96];
                memcpy(id, keep[k].id, sizeof(id));
                keep[k] = p->ops[i - 1].tensors[k];
                memcpy(keep[k].id, id, sizeof(id));
                keep[k].recompute_op = i;
                acts += keep[k].bytes;
            }
            tensors_left -= op->n_tensors;
            states += op->param_bytes + op->grad_bytes + op->optim_bytes;
            continue;
        }
        int nt = tiny_range(0, 2);
        if (nt > tensors_left)
            nt = tensors_left;
        tensors_left -= nt;
        const char *kind = tiny_range(0, 1) ? "mlp" : "attn";
        /* Forwards of 10-100 ms: long enough for a tensor's eviction to drain during one
         * (the drain rows), so that every action can be optimal somewhere. */
        struct mpress_op *op = tiny_op(p, kind, 0.01 * tiny_range(1, 10),
                                       (uint64_t)tiny_range(0, 40), (uint64_t)tiny_range(5, 60),
                                       nt);
        op->workspace_bytes = (uint64_t)tiny_range(0, 30) * MB;
        states += op->param_bytes + op->grad_bytes + op->optim_bytes;
        for (int k = 0; k < nt; k++) {
            struct mpress_saved_tensor *ts = &op->tensors[k];
            snprintf(ts->name, sizeof(ts->name), "t%d", tiny_range(0, 1));
            ts->bytes = sizes[tiny_range(0, 2)] * MB;
            ts->recompute_s = rec[tiny_range(0, 1)];
            ts->recompute_op = i;
            acts += ts->bytes;
        }
    }
    *M = tiny_range(1, 4);
    *sched = (enum mpress_schedule)tiny_range(0, 2);
    uint64_t hi = (states + acts * (uint64_t)*M) / MB + 200, lo = states / MB / (uint64_t)G + 20;
    /* socket_split_: memory so short that optimizer states go to the host */
    tiny_topo(t, G, nvswitch, lo + tiny_rand() % (socket_split_ ? 40 : hi - lo + 1));
    t->nvlink_bytes_per_s = 4000 * MB;
    t->pcie_bytes_per_s = 3000 * MB;
    t->switches[0].uplink_bytes_per_s = 4000 * MB;
    if (!nvswitch) {
        for (int a = 0; a < G; a++)
            for (int c = a + 1; c < G; c++)
                t->nvlinks[a][c] = t->nvlinks[c][a] = tiny_range(0, 2);
        if (G > 1 && tiny_range(0, 1)) { /* two PCIe switches */
            t->n_switches = 2;
            t->switches[1].uplink_bytes_per_s = 2500 * MB;
            for (int g = 0; g < G; g++)
                t->gpus[g].pcie_switch = tiny_range(0, 1);
        }
    }
    if (G > 1 && tiny_range(0, 1)) { /* two sockets: host steps share only their own (on
                                       * direct fabrics the MILP maps stages to them; on
                                       * NVSwitch slot k's socket is GPU k's) */
        t->n_sockets = 2;
        for (int g = 0; g < G; g++)
            t->gpus[g].socket = tiny_range(0, 1);
    }
    if (socket_split_) {
        t->n_sockets = 2;
        for (int g = 0; g < G; g++)
            t->gpus[g].socket = g == 2;
    }
    if (tiny_range(0, 1)) /* a slow host link makes D2D worth its NVLink time */
        t->pcie_bytes_per_s = 600 * MB;
    if (tiny_range(0, 2) == 0)
        t->host_memory_bytes = (uint64_t)tiny_range(0, 600) * MB;
}

int main(void)
{
    glp_term_hook(term_off, NULL);
    tiny_state_ = 0x6d707265737321ULL; /* fixed seed */
    int instances = 540, feasible = 0, with_d2d = 0, with_host_swap = 0, with_host_opt = 0;
    int warm_started = 0;
    int with_tied_split = 0, with_tied_host = 0, relaxed_bounds = 0, relaxed_below = 0;
    int two_socket_fixed = 0, two_socket_costs = 0, split_queue = 0;
    int sock_checked = 0, cutoff_checked = 0, cutoff_limited = 0, sock_below = 0, sock_above = 0;
    int held_feasible = 0, held_spared_optima = 0;
    long relaxed_checked = 0, sock_assignments = 0;
    for (int inst = 0; inst < instances; inst++) {
        struct mpress_profile p;
        struct mpress_topology t;
        enum mpress_schedule sched;
        int M;
        socket_split_ = inst >= 400 && inst < 460;
        held_ = inst >= 460;
        if (held_)
            held_instance(&p, &t, &sched, &M);
        else
            random_instance(&p, &t, &sched, &M);
        /* Every other instance ties its first op's weight to its last's, as GPT's embedding
         * and head do (plan_tied_find: the head's bytes are a copy's, its params 0): the
         * tied memory terms and the exchange before both steps. */
        int tied = (inst % 2 == 1 || socket_split_) && p.n_ops >= 2;
        if (tied) {
            snprintf(p.ops[0].name, sizeof(p.ops[0].name), "embedding");
            snprintf(p.ops[p.n_ops - 1].name, sizeof(p.ops[0].name), "head");
        }

        const char *only = getenv("MPRESS_EXACT_ONLY");
        if (only && atoi(only) != inst) {
            mpress_profile_finish(&p);
            continue;
        }
        struct brute b = {.p = &p, .t = &t, .sched = sched, .M = M, .best = INFINITY,
                          .best_any = INFINITY,
                          .fixed_map = t.fabric == MPRESS_FABRIC_NVSWITCH && t.n_sockets > 1};
        struct mpress_topology rt, rts;
        if (plan_topology_relax(&t, &rt) == 0)
            b.rt = &rt;
        if (t.n_sockets > 1 && plan_topology_relax_sockets(&t, &rts) == 0)
            b.rts = &rts;
        mpress_assignment_init(&b.a, &p, NULL);
        mpress_assignment_init(&b.best_a, &p, NULL);
        mpress_assignment_init(&b.ra, &p, NULL);
        enum_partitions(&b);
        relaxed_checked += b.relaxed;
        sock_assignments += b.relaxed_sockets;

        struct mpress_plan_options o;
        mpress_plan_options_init(&o);
        o.schedule = sched;
        o.micro_batches = M;
        o.cuts = MPRESS_CUTS_OPS;
        o.mip_gap = 0;
        o.dump_lp = getenv("MPRESS_EXACT_LP");
        struct mpress_assignment ia;
        struct mpress_plan_solver st;
        struct mpress_error err;
        mpress_error_clear(&err);
        int rc = mpress_plan_ilp(&p, &t, &o, &ia, &st, &err);
        if (isinf(b.best)) {
            CHECK_MSG(rc == MPRESS_EINFEASIBLE,
                      "instance %d: nothing fits but the MILP says %d (%s)", inst, rc, err.text);
            if (rc == 0) {
                struct mpress_plan_eval ev;
                mpress_plan_evaluate(&p, &t, sched, M, &ia, &ev, NULL);
                fprintf(stderr, "  MILP plan: objective %.9g, evaluated %.9g, fits %d\n",
                        st.objective, ev.iteration_s, ev.fits);
                for (int g = 0; g < ev.n_gpus; g++)
                    fprintf(stderr, "  gpu %d: bound %llu of %llu\n", g,
                            (unsigned long long)ev.gpus[g].bound,
                            (unsigned long long)ev.gpus[g].capacity);
                mpress_assignment_finish(&ia);
            }
        } else {
            feasible++;
            if (held_) {
                held_feasible++;
                held_spared_optima += held_spared(&p, &b.best_a);
            }
            CHECK_MSG(rc == 0, "instance %d: the MILP failed: %d %s", inst, rc, err.text);
            if (rc == 0) {
                CHECK_MSG(fabs(st.objective - b.best) <= 1e-6 * b.best + 1e-9,
                          "instance %d (G=%d %s M=%d %s, %d ops): MILP %.9g, enumeration %.9g",
                          inst, t.n_gpus, t.fabric ? "nvswitch" : "direct", M,
                          mpress_schedule_name(sched), p.n_ops, st.objective, b.best);
                struct mpress_plan_eval ev;
                CHECK_INT(mpress_plan_evaluate(&p, &t, sched, M, &ia, &ev, &err), 0);
                CHECK_MSG(ev.fits, "instance %d: MILP plan short on GPU %d by %llu", inst,
                          ev.short_gpu, (unsigned long long)ev.short_bytes);
                if (getenv("MPRESS_EXACT_DEBUG")) {
                    fprintf(stderr, "fd %.6g cycle %.6g tail %.6g\n", ev.fill_drain_s, ev.cycle_s, ev.tail_s);
                    for (int k = 0; k < ia.n_stages; k++)
                        fprintf(stderr, "stage %d ops %d-%d gpu %d host %d\n", k, ia.stages[k].first_op, ia.stages[k].last_op, ia.stages[k].gpu, ia.stages[k].optimizer_on_host);
                }
                CHECK_MSG(fabs(ev.iteration_s - st.objective) <= 1e-6 * st.objective,
                          "instance %d: evaluated %.9g, MILP objective %.9g", inst,
                          ev.iteration_s, st.objective);
                for (int j = 0; j < ia.n_actions; j++)
                    if (ia.actions[j].action == MPRESS_ACTION_D2D_SWAP) {
                        with_d2d++;
                        break;
                    }
                for (int j = 0; j < ia.n_actions; j++)
                    if (ia.actions[j].action == MPRESS_ACTION_HOST_SWAP) {
                        with_host_swap++;
                        break;
                    }
                for (int k = 0; k < ia.n_stages; k++)
                    if (ia.stages[k].optimizer_on_host) {
                        with_host_opt++;
                        break;
                    }
                if (tied && ia.n_stages > 1 && p.ops[p.n_ops - 1].param_bytes > 0) {
                    with_tied_split++;
                    with_tied_host += ia.stages[0].optimizer_on_host ||
                                      ia.stages[ia.n_stages - 1].optimizer_on_host;
                }
                mpress_assignment_finish(&ia);
            }
            /* Started from the greedy baseline (when it fits), the MILP reaches the same optimum. */
            struct mpress_assignment ga;
            struct mpress_plan_eval gev;
            if (mpress_plan_baseline(&p, &t, &o, MPRESS_POLICY_GREEDY, &ga, &gev, &err) == 0) {
                if (gev.fits) {
                    warm_started++;
                    o.warm_start = &ga;
                    CHECK_INT(mpress_plan_ilp(&p, &t, &o, &ia, &st, &err), 0);
                    CHECK_MSG(fabs(st.objective - b.best) <= 1e-6 * b.best + 1e-9,
                              "instance %d warm-started: MILP %.9g, enumeration %.9g", inst,
                              st.objective, b.best);
                    mpress_assignment_finish(&ia);
                    o.warm_start = NULL;
                }
                mpress_assignment_finish(&ga);
            }
            /* The relaxed server's MILP bounds the real server's optimum from below. */
            double mapfree = -1;
            if (b.rt) {
                CHECK_INT(mpress_plan_ilp(&p, b.rt, &o, &ia, &st, &err), 0);
                mapfree = st.objective;
                CHECK_MSG(st.bound <= b.best * (1 + 1e-6) + 1e-9 &&
                              st.objective <= b.best * (1 + 1e-6) + 1e-9,
                          "instance %d: relaxed bound %.9g, objective %.9g, enumeration %.9g",
                          inst, st.bound, st.objective, b.best);
                relaxed_bounds++;
                relaxed_below += st.objective < b.best * (1 - 1e-6);
                mpress_assignment_finish(&ia);
            }
            /* With the real sockets kept, the MILP that chooses each slot's socket
             * (ILP_SOCKET_FREE) equals the enumeration over every mapping on that server, and
             * lies between the mapping-free optimum and the real server's. */
            if (b.rts) {
                struct brute bs = {.p = &p, .t = &rts, .sched = sched, .M = M, .best = INFINITY,
                                   .best_any = INFINITY};
                mpress_assignment_init(&bs.a, &p, NULL);
                mpress_assignment_init(&bs.best_a, &p, NULL);
                enum_partitions(&bs);
                CHECK_MSG(bs.best <= b.best * (1 + 1e-9),
                          "instance %d: sockets relaxed %.9g above the real optimum %.9g", inst,
                          bs.best, b.best);
                rc = ilp_plan_run(&p, &rts, &o, ILP_SOCKET_FREE, NULL, &ia, &st, &err);
                CHECK_MSG(rc == 0, "instance %d: the socket-choosing MILP failed: %d %s", inst,
                          rc, err.text);
                if (rc == 0) {
                    CHECK_MSG(fabs(st.objective - bs.best) <= 1e-6 * bs.best + 1e-9,
                              "instance %d: socket-choosing MILP %.9g, enumeration %.9g", inst,
                              st.objective, bs.best);
                    struct mpress_plan_eval ev;
                    CHECK_INT(mpress_plan_evaluate(&p, &rts, sched, M, &ia, &ev, &err), 0);
                    CHECK_MSG(ev.fits && fabs(ev.iteration_s - st.objective) <=
                                             1e-6 * st.objective,
                              "instance %d: socket-choosing plan evaluated %.9g (fits %d), "
                              "MILP %.9g", inst, ev.iteration_s, ev.fits, st.objective);
                    CHECK_MSG(mapfree < 0 || mapfree <= st.objective * (1 + 1e-6) + 1e-9,
                              "instance %d: mapping-free %.9g above the socket bound %.9g",
                              inst, mapfree, st.objective);
                    sock_checked++;
                    sock_below += bs.best < b.best * (1 - 1e-6);
                    /* The certificate search (ilp_plan_cutoff): a cutoff under the optimum
                     * is proved, one above it is not and bounds at the optimum. */
                    struct mpress_plan_solver cs;
                    double under = bs.best * (1 - 1e-3), over = bs.best * (1 + 1e-3);
                    CHECK_INT(ilp_plan_cutoff(&p, &rts, &o, ILP_SOCKET_FREE, under, &cs, &err),
                              0);
                    CHECK_MSG(strcmp(cs.status, "cut_off") == 0 && cs.bound == under,
                              "instance %d: cutoff %.9g under the optimum %.9g: %s, bound %.9g",
                              inst, under, bs.best, cs.status, cs.bound);
                    CHECK_INT(ilp_plan_cutoff(&p, &rts, &o, ILP_SOCKET_FREE, over, &cs, &err),
                              0);
                    CHECK_MSG(strcmp(cs.status, "cut_off") != 0 &&
                                  cs.bound <= bs.best * (1 + 1e-6) + 1e-9 &&
                                  cs.bound >= bs.best * (1 - o.mip_gap) * (1 - 1e-6) - 1e-9,
                              "instance %d: cutoff %.9g over the optimum %.9g: %s, bound %.9g",
                              inst, over, bs.best, cs.status, cs.bound);
                    /* Stopped at one node, its bound still bounds the optimum. */
                    struct mpress_plan_options o1 = o;
                    o1.node_limit = 1;
                    CHECK_INT(ilp_plan_cutoff(&p, &rts, &o1, ILP_SOCKET_FREE, over, &cs, &err),
                              0);
                    CHECK_MSG(cs.bound <= bs.best * (1 + 1e-6) + 1e-9,
                              "instance %d: cutoff search at one node: %s, bound %.9g above the "
                              "optimum %.9g", inst, cs.status, cs.bound, bs.best);
                    cutoff_limited += strcmp(cs.status, "node_limit") == 0;
                    cutoff_checked++;
                    sock_above += mapfree >= 0 && mapfree < st.objective * (1 - 1e-6);
                    mpress_assignment_finish(&ia);
                }
                mpress_assignment_finish(&bs.a);
                mpress_assignment_finish(&bs.best_a);
            }
            if (b.fixed_map) {
                split_queue += socket_split_ && tied && b.best_a.n_stages == 3 &&
                               b.best_a.stages[0].optimizer_on_host &&
                               b.best_a.stages[1].optimizer_on_host;
                two_socket_fixed++;
                two_socket_costs += b.best_any < b.best * (1 - 1e-9);
            }
            /* The enumeration's best, with its split rounded to bytes, evaluates to its value. */
            struct mpress_plan_eval ev;
            CHECK_INT(mpress_plan_evaluate(&p, &t, sched, M, &b.best_a, &ev, NULL), 0);
            CHECK_NEAR(ev.iteration_s, b.best, 1e-6);
        }
        mpress_assignment_finish(&b.a);
        mpress_assignment_finish(&b.best_a);
        mpress_assignment_finish(&b.ra);
        mpress_profile_finish(&p);
    }
    fprintf(stderr,
            "mapping-free relaxation: %ld assignments that fit checked, %d relaxed optima "
            "checked, %d of them below the real server's\n",
            relaxed_checked, relaxed_bounds, relaxed_below);
    CHECK_MSG(relaxed_checked > 10000 && relaxed_bounds > 50 && relaxed_below > 5,
              "the relaxation was exercised (%ld, %d, %d)", relaxed_checked, relaxed_bounds,
              relaxed_below);
    fprintf(stderr,
            "%d instances, %d feasible, %d optimal plans use D2D, %d host swap, %d host "
            "optimizer, %d also solved from the greedy plan; %d split a tied weight, %d of "
            "them with a tied side's optimizer on the host\n",
            instances, feasible, with_d2d, with_host_swap, with_host_opt, warm_started,
            with_tied_split, with_tied_host);
    fprintf(stderr,
            "%d feasible on two-socket NVSwitch servers, where another mapping than the MILP's "
            "is faster on %d; %d optima with a tied owner's and the next slot's host steps on "
            "one socket, the copy's on the other\n",
            two_socket_fixed, two_socket_costs, split_queue);
    fprintf(stderr,
            "relaxed server with its sockets: %ld assignments that fit checked, %d optima of "
            "the socket-choosing MILP against enumeration, %d below the real server's, %d above "
            "the mapping-free one's\n",
            sock_assignments, sock_checked, sock_below, sock_above);
    fprintf(stderr,
            "held stage inputs: %d feasible instances, %d of whose enumerated optima keep or "
            "swap a stage input while recomputing a tensor of its class\n",
            held_feasible, held_spared_optima);
    CHECK(held_feasible >= 40 && held_spared_optima >= 3);
    CHECK(sock_assignments > 1000 && sock_checked >= 20 && sock_below >= 1 && sock_above >= 1);
    fprintf(stderr, "certificate search: %d cutoffs proved and refused, %d stopped at one node\n",
            cutoff_checked, cutoff_limited);
    CHECK(cutoff_checked == sock_checked && cutoff_limited >= 5);
    CHECK(two_socket_fixed >= 10);
    CHECK(split_queue >= 5);
    CHECK(feasible >= 200);
    CHECK(with_d2d >= 10);
    CHECK(with_host_swap >= 5);
    CHECK(with_tied_split >= 20);
    CHECK(with_tied_host >= 5);
    return check_done();
}
