/* Baseline policies on the planner's cost model: none (save nothing), recompute (Megatron /
 * DAPPLE full recompute), swap (every saved tensor to host) and greedy (per short GPU, the
 * action with the most bytes freed per second lost). All use an even partition by time and a
 * GPU order that follows NVLink, so the MILP's gain over them is measured on equal terms. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

void plan_cut_points(const struct mpress_profile *p, enum mpress_cuts cuts, char *cut_ok)
{
    int has_layers = 0;
    for (int i = 0; i < p->n_ops; i++)
        if (p->ops[i].layer >= 0)
            has_layers = 1;
    int layers = cuts == MPRESS_CUTS_LAYERS || (cuts == MPRESS_CUTS_AUTO && has_layers);
    for (int i = 0; i < p->n_ops; i++)
        cut_ok[i] = i + 1 == p->n_ops || !layers || p->ops[i].layer != p->ops[i + 1].layer;
}

int plan_even_partition(const struct mpress_profile *p, const char *cut_ok, int s,
                        const int *order, struct mpress_assignment *a)
{
    /* Blocks between allowed cuts; f[j][b] = best largest stage time for blocks 0..b in j+1
     * stages (dynamic programming over the last stage's first block). */
    int n = p->n_ops, nb = 0;
    int *end = malloc(sizeof(int) * (size_t)n);
    double *pre = malloc(sizeof(double) * (size_t)(n + 1));
    if (!end || !pre) {
        free(end);
        free(pre);
        return 0;
    }
    /* Op times are finite but their sum need not be (1e308 s each): then the prefix sums are
     * taken on times scaled by 2^-32, which is exact, keeps every partial sum of at most
     * MPRESS_MAX_OPS ops finite and leaves the best partition what it was; a span is then
     * never inf - inf. */
    double total = 0, scale = 1;
    for (int i = 0; i < n; i++)
        total += p->ops[i].fwd_s + p->ops[i].bwd_s;
    if (!isfinite(total))
        scale = ldexp(1.0, -32);
    pre[0] = 0;
    for (int i = 0; i < n; i++) {
        pre[i + 1] = pre[i] + (p->ops[i].fwd_s * scale + p->ops[i].bwd_s * scale);
        if (cut_ok[i])
            end[nb++] = i;
    }
    if (s > nb)
        s = nb;
    double *f = malloc(sizeof(double) * (size_t)(s * nb));
    int *from = malloc(sizeof(int) * (size_t)(s * nb));
    if (!f || !from) {
        free(end), free(pre), free(f), free(from);
        return 0;
    }
#define SPAN(b0, b1) (pre[end[b1] + 1] - pre[(b0) > 0 ? end[(b0)-1] + 1 : 0])
    for (int b = 0; b < nb; b++) {
        f[b] = SPAN(0, b);
        from[b] = 0;
    }
    for (int j = 1; j < s; j++)
        for (int b = 0; b < nb; b++) {
            f[j * nb + b] = DBL_MAX;
            from[j * nb + b] = -1;
            for (int c = j; c <= b; c++) { /* last stage = blocks c..b */
                double v = fmax(f[(j - 1) * nb + c - 1], SPAN(c, b));
                /* The first candidate always counts, so every state has a last stage. */
                if (from[j * nb + b] < 0 || v < f[j * nb + b]) {
                    f[j * nb + b] = v;
                    from[j * nb + b] = c;
                }
            }
        }
    int b = nb - 1;
    for (int j = s - 1; j >= 0; j--) {
        int c = from[j * nb + b];
        a->stages[j].first_op = c > 0 ? end[c - 1] + 1 : 0;
        a->stages[j].last_op = end[b];
        a->stages[j].gpu = order[j];
        a->stages[j].optimizer_on_host = 0;
        b = c - 1;
    }
#undef SPAN
    a->n_stages = s;
    free(end), free(pre), free(f), free(from);
    return s;
}

static int path_dfs(const struct mpress_topology *t, int *order, int depth, int *used)
{
    if (depth == t->n_gpus)
        return 1;
    int last = order[depth - 1];
    for (int g = 0; g < t->n_gpus; g++) {
        if (used[g] || plan_nvlink_bw(t, last, g) <= 0)
            continue;
        used[g] = 1;
        order[depth] = g;
        if (path_dfs(t, order, depth + 1, used))
            return 1;
        used[g] = 0;
    }
    return 0;
}

void plan_gpu_order(const struct mpress_topology *t, int *order)
{
    for (int start = 0; start < t->n_gpus; start++) {
        int used[MPRESS_MAX_GPUS] = {0};
        order[0] = start;
        used[start] = 1;
        if (path_dfs(t, order, 1, used))
            return;
    }
    for (int g = 0; g < t->n_gpus; g++)
        order[g] = g;
}

static void set_action(struct mpress_plan_action *ac, enum mpress_action kind, int stage_last)
{
    ac->action = kind;
    ac->n_peers = 0;
    ac->evict_after_op = kind == MPRESS_ACTION_KEEP ? -1 : ac->op;
    ac->prefetch_before_op = plan_prefetch_point(kind, ac->op, stage_last);
}

/* One greedy step: among the keep tensors of every stage (one per class: the rest are
 * interchangeable) and every action, and moving a stage's optimizer to host, apply the move
 * with the most shortfall removed per second of iteration time added. 0: moved, 1: none. */
static int greedy_step(const struct mpress_profile *p, const struct mpress_topology *topo,
                       const struct mpress_plan_options *o, struct mpress_assignment *a,
                       struct mpress_plan_eval *ev)
{
    uint64_t short0 = plan_shortfall(ev);
    double t0 = ev->iteration_s;
    double best_score = -1;
    int best_j = -1, best_kind = 0, best_peer = -1, best_stage = -1;
    struct mpress_plan_eval trial;
    int j0 = 0;
    for (int k = 0; k < a->n_stages; k++) {
        struct mpress_plan_stage *st = &a->stages[k];
        int first_j = j0;
        for (int i = st->first_op; i <= st->last_op; i++)
            j0 += p->ops[i].n_tensors;
        /* Only stages on a short GPU, or parking on one, can help. */
        int g = st->gpu,
            relevant = ev->gpus[g].peak > ev->gpus[g].capacity || ev->drain_gpu == g;
        for (int h = 0; h < topo->n_gpus && !relevant; h++)
            relevant = ev->gpus[h].peak > ev->gpus[h].capacity && ev->gpus[h].parked > 0;
        if (!relevant && !ev->host_short)
            continue;
        /* The host takes optimizer states only when it can run their step. */
        if (!st->optimizer_on_host && plan_host_bw(topo) > 0 && topo->pcie_bytes_per_s > 0) {
            st->optimizer_on_host = 1;
            if (mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, a, &trial, NULL) ==
                0) {
                uint64_t s1 = plan_shortfall(&trial);
                if (s1 < short0) {
                    double score = (double)(short0 - s1) / fmax(trial.iteration_s - t0, 1e-12);
                    if (score > best_score) {
                        best_score = score, best_stage = k, best_j = -1;
                    }
                }
            }
            st->optimizer_on_host = 0;
        }
        for (int j = first_j; j < j0; j++) {
            struct mpress_plan_action *ac = &a->actions[j];
            const struct mpress_op *op = &p->ops[ac->op];
            const struct mpress_saved_tensor *ts = &op->tensors[ac->tensor];
            if (ts->bytes == 0)
                continue;
            /* Moves away from keep, d2d -> host for parked bytes on a short GPU, and a swap ->
             * recompute where evictions outrun their links (the drain rows). */
            int from_d2d = ac->action == MPRESS_ACTION_D2D_SWAP;
            int from_host = ac->action == MPRESS_ACTION_HOST_SWAP;
            if (ac->action != MPRESS_ACTION_KEEP && !from_d2d && !from_host)
                continue;
            if (from_host && ev->drain_gpu != g)
                continue;
            int dup = 0;
            for (int q = first_j; q < j && !dup; q++) {
                const struct mpress_plan_action *aq = &a->actions[q];
                dup = aq->action == ac->action &&
                      (!from_d2d || (aq->peers[0] == ac->peers[0])) &&
                      plan_same_class(&p->ops[aq->op], &p->ops[aq->op].tensors[aq->tensor], op,
                                      ts);
            }
            if (dup)
                continue;
            struct mpress_plan_action saved = *ac;
            for (int kind = 1; kind < 3 + topo->n_gpus - 1; kind++) {
                int peer = -1;
                if (from_host && kind != MPRESS_ACTION_RECOMPUTE)
                    continue;
                if (kind >= 3) {
                    peer = kind - 3;
                    if (peer >= g)
                        peer++;
                    if (plan_nvlink_bw(topo, g, peer) <= 0 || from_d2d)
                        continue;
                    /* Only a peer with room for every copy in flight can help. */
                    uint64_t copies = ts->bytes * (uint64_t)plan_in_flight(
                                                      o->schedule, a->n_stages, k,
                                                      o->micro_batches);
                    if (ev->gpus[peer].peak + copies > ev->gpus[peer].capacity)
                        continue;
                }
                set_action(ac, kind >= 3 ? MPRESS_ACTION_D2D_SWAP : (enum mpress_action)kind,
                           st->last_op);
                if (peer >= 0) {
                    ac->n_peers = 1;
                    ac->peers[0] = peer;
                    ac->peer_bytes[0] = ts->bytes;
                }
                if (mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, a, &trial,
                                         NULL) == 0) {
                    uint64_t s1 = plan_shortfall(&trial);
                    if (s1 < short0) {
                        double score =
                            (double)(short0 - s1) / fmax(trial.iteration_s - t0, 1e-12);
                        if (score > best_score) {
                            best_score = score, best_j = j, best_kind = kind, best_peer = peer;
                            best_stage = k;
                        }
                    }
                }
                *ac = saved;
            }
        }
    }
    if (best_score < 0)
        return 1;
    if (best_j < 0) {
        a->stages[best_stage].optimizer_on_host = 1;
        return mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, a, ev, NULL) ? 1 : 0;
    }
    /* Apply the move to best_j, then to the other keep tensors of its class in the stage
     * (interchangeable, so the same move is the best one among them) for as long as each
     * application still reduces the shortfall and costs no more time than the first one did:
     * one search per class instead of per tensor. */
    const struct mpress_op *bop = &p->ops[a->actions[best_j].op];
    const struct mpress_saved_tensor *bts = &bop->tensors[a->actions[best_j].tensor];
    enum mpress_action from = a->actions[best_j].action;
    int from_d2d = from == MPRESS_ACTION_D2D_SWAP;
    int from_peer = from_d2d ? a->actions[best_j].peers[0] : -1;
    double dt_first = 0;
    for (int j = best_j; j < a->n_actions && a->actions[j].op <= a->stages[best_stage].last_op;
         j++) {
        struct mpress_plan_action *ac = &a->actions[j];
        const struct mpress_op *op = &p->ops[ac->op];
        if (j != best_j &&
            (ac->action != from ||
             (from_d2d && ac->peers[0] != from_peer) ||
             !plan_same_class(bop, bts, op, &op->tensors[ac->tensor])))
            continue;
        struct mpress_plan_action saved = *ac;
        set_action(ac, best_kind >= 3 ? MPRESS_ACTION_D2D_SWAP : (enum mpress_action)best_kind,
                   a->stages[best_stage].last_op);
        if (best_peer >= 0) {
            ac->n_peers = 1;
            ac->peers[0] = best_peer;
            ac->peer_bytes[0] = op->tensors[ac->tensor].bytes;
        }
        uint64_t s0 = plan_shortfall(ev);
        double t0j = ev->iteration_s;
        if (mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, a, &trial, NULL)) {
            *ac = saved;
            break;
        }
        uint64_t s1 = plan_shortfall(&trial);
        double dt = trial.iteration_s - t0j;
        if (j == best_j)
            dt_first = dt;
        else if (s1 >= s0 || dt > dt_first + 1e-9 * t0j) {
            *ac = saved;
            break;
        }
        *ev = trial;
        if (ev->fits)
            break;
    }
    return 0;
}

int mpress_plan_baseline(const struct mpress_profile *p, const struct mpress_topology *topo,
                         const struct mpress_plan_options *o, enum mpress_policy policy,
                         struct mpress_assignment *out, struct mpress_plan_eval *ev,
                         struct mpress_error *err)
{
    enum mpress_action all;
    if (policy == MPRESS_POLICY_NONE || policy == MPRESS_POLICY_GREEDY)
        all = MPRESS_ACTION_KEEP;
    else if (policy == MPRESS_POLICY_RECOMPUTE)
        all = MPRESS_ACTION_RECOMPUTE;
    else if (policy == MPRESS_POLICY_SWAP)
        all = MPRESS_ACTION_HOST_SWAP;
    else
        return mpress_error_set(err, MPRESS_EUSAGE, "'%s' is not a baseline policy",
                                mpress_policy_name(policy));
    if (p->n_ops < 1)
        return mpress_error_set(err, MPRESS_EINPUT, "the profile has no ops");
    int rc = mpress_assignment_init(out, p, err);
    if (rc)
        return rc;
    char *cut_ok = malloc((size_t)p->n_ops);
    if (!cut_ok) {
        mpress_assignment_finish(out);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    int order[MPRESS_MAX_GPUS];
    plan_gpu_order(topo, order);
    plan_cut_points(p, o->cuts, cut_ok);
    plan_even_partition(p, cut_ok, topo->n_gpus, order, out);
    free(cut_ok);
    int k = 0;
    for (int j = 0; j < out->n_actions; j++) {
        while (out->stages[k].last_op < out->actions[j].op)
            k++;
        set_action(&out->actions[j], all, out->stages[k].last_op);
    }
    rc = mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, out, ev, err);
    if (rc == 0 && policy == MPRESS_POLICY_GREEDY)
        while (!ev->fits && greedy_step(p, topo, o, out, ev) == 0)
            ;
    if (rc)
        mpress_assignment_finish(out);
    return rc;
}
