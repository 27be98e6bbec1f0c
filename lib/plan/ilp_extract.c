/* The MILP's solution mapped back to an assignment: the partition, the mapping (or, where the
 * MILP chose sockets, GPUs of them), the optimizer placement, each saved tensor's action and
 * the D2D bytes striped over the peers. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "ilp_internal.h"

#define VAL(col) ((col) ? x[(col)] : 0.0)

/* Slot k's actions per class: R_kc recomputed, H_kc host-swapped, D_kc D2D, the rest kept.
 * The held candidates (recompute_op before the stage: recomputing them would hold their input,
 * eval.c) come first and take, in profile order, a kept place, then a host swap, then a D2D
 * swap, and a recompute only where nothing else is left (never, where the MILP's held rows
 * hold: ilp_form.c); the other tensors then take, in profile order, recompute, host swap,
 * D2D, then keep. Returns the bytes the stage sends by D2D, or -1 when memory runs out. */
static int64_t extract_actions(const struct mpress_profile *p, const struct inst *in,
                               const struct cols *c, const double *x, int k, int j0,
                               const struct mpress_plan_stage *st, struct mpress_assignment *a)
{
    const int C = in->C;
    long left[4 * 1024];
    long *rl = C <= 1024 ? left : malloc(sizeof(long) * 4 * (size_t)C);
    if (!rl)
        return -1;
    for (int cl = 0; cl < C; cl++) {
        rl[4 * cl] = 0; /* kept: counted below */
        rl[4 * cl + 1] = lround(VAL(c->R[IX2(k, cl, C)]));
        rl[4 * cl + 2] = lround(VAL(c->H[IX2(k, cl, C)]));
        rl[4 * cl + 3] = in->d2d ? lround(VAL(c->D[IX2(k, cl, C)])) : 0;
    }
    for (int i = st->first_op, j = j0; i <= st->last_op; i++)
        for (int t = 0; t < p->ops[i].n_tensors; t++, j++)
            rl[4 * in->tcls[j]]++;
    for (int cl = 0; cl < C; cl++)
        rl[4 * cl] -= rl[4 * cl + 1] + rl[4 * cl + 2] + rl[4 * cl + 3];
    /* the order each kind of tensor takes its action in, as indices into rl (action + 0) */
    static const int held_order[4] = {0, 2, 3, 1}, other_order[4] = {1, 2, 3, 0};
    int64_t dsum = 0;
    for (int pass = 0; pass < 2; pass++) {
        const int *order = pass == 0 ? held_order : other_order;
        int j = j0;
        for (int i = st->first_op; i <= st->last_op; i++)
            for (int t = 0; t < p->ops[i].n_tensors; t++, j++) {
                int held = plan_stage_input(&p->ops[i].tensors[t], st->first_op);
                if (held != (pass == 0))
                    continue;
                int cl = in->tcls[j];
                struct mpress_plan_action *ac = &a->actions[j];
                enum mpress_action kind = MPRESS_ACTION_KEEP;
                for (int q = 0; q < 4; q++)
                    if (rl[4 * cl + order[q]] > 0) {
                        rl[4 * cl + order[q]]--;
                        kind = (enum mpress_action)order[q];
                        break;
                    }
                ac->action = kind;
                ac->n_peers = 0;
                ac->evict_after_op = kind == MPRESS_ACTION_KEEP ? -1 : i;
                ac->prefetch_before_op = plan_prefetch_point(kind, i, st->last_op);
                if (kind == MPRESS_ACTION_D2D_SWAP)
                    dsum += (int64_t)p->ops[i].tensors[t].bytes;
            }
    }
    if (rl != left)
        free(rl);
    return dsum;
}

/* D2D byte targets per peer of slot k, integer, summing to dsum. */
static int extract_targets(const struct mpress_topology *topo, const struct inst *in,
                           const struct cols *c, const double *x, int k, int gpu, int64_t dsum,
                           int64_t *target)
{
    const int G = in->N;
    int64_t tsum = 0;
    int best = -1;
    for (int g = 0; g < G; g++) {
        if (!c->e[IX2(k, g, G)] || plan_nvlink_bw(topo, gpu, g) <= 0)
            continue;
        target[g] = llround(VAL(c->e[IX2(k, g, G)]) * GB);
        if (target[g] < 0)
            target[g] = 0;
        tsum += target[g];
        if (best < 0 || target[g] > target[best])
            best = g;
    }
    if (dsum > 0) {
        if (best < 0)
            return -1;
        target[best] += dsum - tsum;
        if (target[best] < 0) /* rounding went the wrong way: move the excess */
            for (int g = 0; g < G && target[best] < 0; g++)
                if (g != best && target[g] > 0) {
                    int64_t mv = target[g] < -target[best] ? target[g] : -target[best];
                    target[g] -= mv;
                    target[best] += mv;
                }
    }
    return 0;
}

/* Every D2D tensor is striped over the peers in proportion to their targets, so that each
 * NVLink carries its share of every eviction as the forward produces it (a peer fed only the
 * last layers' tensors would still be copying when the backward starts). Floors first, then
 * the leftover bytes to peers with room: the shares of each tensor sum to its bytes and each
 * peer's total to its target. */
static int stripe_d2d(const struct mpress_profile *p, const struct mpress_topology *topo, int G,
                      const struct mpress_plan_stage *st, int j0, int64_t dsum,
                      int64_t *target, struct mpress_assignment *a)
{
    int64_t rest = dsum;
    for (int j = j0; j < a->n_actions && a->actions[j].op <= st->last_op; j++) {
        struct mpress_plan_action *ac = &a->actions[j];
        if (ac->action != MPRESS_ACTION_D2D_SWAP)
            continue;
        int64_t need = (int64_t)p->ops[ac->op].tensors[ac->tensor].bytes, take[MPRESS_MAX_GPUS];
        int64_t left_b = need;
        for (int g = 0; g < G; g++) {
            take[g] = 0;
            if (target[g] <= 0 || rest <= 0)
                continue;
            take[g] = (int64_t)floor((double)need * (double)target[g] / (double)rest);
            if (take[g] > target[g])
                take[g] = target[g];
            if (take[g] > left_b)
                take[g] = left_b;
            left_b -= take[g];
        }
        for (int g = 0; g < G && left_b > 0; g++) {
            int64_t room = target[g] - take[g];
            int64_t mv = room < left_b ? room : left_b;
            if (mv > 0) {
                take[g] += mv;
                left_b -= mv;
            }
        }
        if (left_b > 0)
            return -1;
        for (int g = 0; g < G; g++)
            if (take[g] > 0) {
                ac->peers[ac->n_peers] = g;
                ac->peer_bytes[ac->n_peers] = (uint64_t)take[g];
                ac->n_peers++;
                target[g] -= take[g];
            }
        rest -= need;
        if (ac->n_peers == 0) { /* a zero-byte tensor: any peer */
            for (int g = 0; g < G; g++)
                if (plan_nvlink_bw(topo, st->gpu, g) > 0) {
                    ac->peers[0] = g;
                    ac->peer_bytes[0] = 0;
                    ac->n_peers = 1;
                    break;
                }
        }
    }
    return 0;
}

/* sock_free: the plan, whose slot k ran on GPU k, moved so that slot k runs on a GPU of the
 * socket sk_k chose (the lowest one left, slot by slot): on the relaxed server, whose GPUs
 * differ only by socket, the same plan (ilp_relax.c). Peers move with their GPUs. */
static void place_on_sockets(const struct inst *in, const struct cols *c, const double *x,
                             struct mpress_assignment *a)
{
    int to[MPRESS_MAX_GPUS];
    unsigned used = 0;
    for (int k = 0; k < in->N; k++) {
        int q = 0;
        for (int r = 1; r < in->n_sockets; r++)
            if (VAL(c->sk[IX2(k, r, in->n_sockets)]) > VAL(c->sk[IX2(k, q, in->n_sockets)]))
                q = r;
        int g = 0;
        while (g < in->N && ((used & (1u << g)) || in->socket_of[g] != q))
            g++;
        if (g == in->N) /* not a plan's sockets: keep what is left, in order */
            for (g = 0; used & (1u << g); g++)
                ;
        to[k] = g;
        used |= 1u << g;
    }
    for (int s = 0; s < a->n_stages; s++)
        a->stages[s].gpu = to[a->stages[s].gpu];
    for (int j = 0; j < a->n_actions; j++)
        for (int i = 0; i < a->actions[j].n_peers; i++)
            a->actions[j].peers[i] = to[a->actions[j].peers[i]];
}

int ilp_extract(const struct mpress_profile *p, const struct mpress_topology *topo,
                   const struct inst *in, const struct cols *c, const double *x,
                   struct mpress_assignment *a)
{
    const int N = in->N, B = in->B, G = N;
    int S = 0;
    int prev_end = -1;
    for (int k = 0; k < N; k++) {
        /* Slots take prefixes: the blocks in slots <= k are the first sum_r w_kr. */
        int last = B - 1;
        if (k < N - 1) {
            long upto = 0;
            for (int r = 0; r < in->NR; r++)
                upto += lround(VAL(c->w[IX2(k, r, in->NR)]));
            last = (int)upto - 1;
        }
        if (last <= prev_end)
            continue;
        struct mpress_plan_stage *st = &a->stages[S];
        st->first_op = in->blk[prev_end + 1].first;
        st->last_op = in->blk[last].last;
        st->gpu = k;
        if (in->mapped)
            for (int g = 0; g < G; g++)
                if (VAL(c->x[IX2(k, g, G)]) > 0.5)
                    st->gpu = g;
        st->optimizer_on_host = in->host_opt && VAL(c->h[k]) > 0.5;
        int j0 = 0;
        for (int i = 0; i < st->first_op; i++)
            j0 += p->ops[i].n_tensors;
        int64_t dsum = extract_actions(p, in, c, x, k, j0, st, a);
        int64_t target[MPRESS_MAX_GPUS] = {0};
        if (dsum < 0 || extract_targets(topo, in, c, x, k, st->gpu, dsum, target) ||
            stripe_d2d(p, topo, G, st, j0, dsum, target, a))
            return -1;
        prev_end = last;
        S++;
    }
    a->n_stages = S;
    if (in->sock_free)
        place_on_sockets(in, c, x, a);
    return 0;
}
#undef VAL
