/* The MILP's warm start: an assignment (the fastest fitting baseline) turned into a full,
 * checked solution vector that GLPK takes as its first incumbent. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ilp_internal.h"

/* GLPK accepts a heuristic solution after checking only its integrality and bounds: check the
 * rows too, so that a bad warm start can never become the incumbent. */
int ilp_vector_feasible(glp_prob *lp, const double *x)
{
    int n = glp_get_num_cols(lp), ok = 1;
    int *ind = malloc(sizeof(int) * (size_t)(n + 1));
    double *val = malloc(sizeof(double) * (size_t)(n + 1));
    if (!ind || !val) {
        free(ind);
        free(val);
        return 0;
    }
    for (int i = 1; i <= glp_get_num_rows(lp) && ok; i++) {
        int len = glp_get_mat_row(lp, i, ind, val);
        double act = 0, mag = 1;
        for (int k = 1; k <= len; k++) {
            act += val[k] * x[ind[k]];
            mag = fmax(mag, fabs(val[k] * x[ind[k]]));
        }
        int type = glp_get_row_type(lp, i);
        double lb = glp_get_row_lb(lp, i), ub = glp_get_row_ub(lp, i), tol = 1e-7 * mag;
        if ((type == GLP_LO || type == GLP_DB || type == GLP_FX) && act < lb - tol)
            ok = 0;
        if ((type == GLP_UP || type == GLP_DB || type == GLP_FX) && act > ub + tol)
            ok = 0;
    }
    free(ind);
    free(val);
    return ok;
}

/* a's partition and mapping columns (w, f, ct, x) as a column vector of cp (malloc'd, every
 * other column 0), read from their fixed bounds in cp. */
static double *layout_of(glp_prob *cp, const struct inst *in, const struct cols *c)
{
    const int N = in->N, NR = in->NR;
    double *v = calloc((size_t)glp_get_num_cols(cp) + 1, sizeof(double));
    if (!v)
        return NULL;
    for (int k = 0; k < N; k++) {
        for (int r = 0; r < NR; r++) {
            int cc[3] = {k + 1 < N ? c->w[IX2(k, r, NR)] : 0, k + 1 < N ? c->f[IX2(k, r, NR)] : 0,
                         c->ct[IX2(k, r, NR)]};
            for (int i = 0; i < 3; i++)
                if (cc[i])
                    v[cc[i]] = glp_get_col_lb(cp, cc[i]);
        }
        for (int g = 0; in->mapped && g < N; g++)
            v[c->x[IX2(k, g, N)]] = glp_get_col_lb(cp, c->x[IX2(k, g, N)]);
    }
    return v;
}

/* sock_free: sk_kq = 1 for slot k's GPU's socket q, the sockets renamed so that the last
 * slot's is 0 where the MILP fixes it so (ilp_form.c, form_socket_choice). */
static void fix_sockets(glp_prob *cp, const struct inst *in, const struct cols *c,
                        const int *slot_gpu)
{
    const int N = in->N, NK = in->n_sockets;
    const int last = in->socket_of[slot_gpu[N - 1]];
    const int renamed = glp_get_col_type(cp, c->sk[IX2(N - 1, 0, NK)]) == GLP_FX;
    for (int k = 0; k < N; k++) {
        int q = in->socket_of[slot_gpu[k]];
        if (renamed) /* 0 and the last slot's socket exchanged */
            q = q == last ? 0 : q == 0 ? last : q;
        for (int r = 0; r < NK; r++)
            glp_set_col_bnds(cp, c->sk[IX2(k, r, NK)], GLP_FX, r == q, r == q);
    }
}

/* a's recomputes, host swaps and D2D swaps per slot (its stages on the last slots) and class:
 * cnt[(k * C + c) * 3 + action - 1], or NULL when memory runs out. */
static int *action_counts(const struct inst *in, const struct mpress_profile *p,
                          const struct mpress_assignment *a)
{
    const int N = in->N, C = in->C, S = a->n_stages;
    int *cnt = calloc((size_t)(N * 3 * (C ? C : 1)), sizeof(int));
    if (!cnt)
        return NULL;
    for (int j = 0, r = 0; j < a->n_actions; j++) {
        const struct mpress_plan_action *ac = &a->actions[j];
        while (a->stages[r].last_op < ac->op)
            r++;
        int kind = ac->action;
        if (kind == MPRESS_ACTION_D2D_SWAP && !in->d2d)
            kind = MPRESS_ACTION_HOST_SWAP;
        /* A held stage input (recomputed from an op of an earlier stage) costs what keeping
         * it costs and its recompute besides: the MILP keeps it instead (ilp_form.c, held). */
        if (kind == MPRESS_ACTION_RECOMPUTE &&
            plan_stage_input(&p->ops[ac->op].tensors[ac->tensor], a->stages[r].first_op))
            kind = MPRESS_ACTION_KEEP;
        if (kind != MPRESS_ACTION_KEEP)
            cnt[((N - S + r) * C + in->tcls[j]) * 3 + kind - 1]++;
    }
    return cnt;
}

/* The MILP solution closest to assignment a: its integer decisions (stages on the last slots,
 * mapped by the automorphism that satisfies the symmetry cut, action counts, optimizer
 * placement; a held stage input's recompute comes back kept) fixed, the continuous ones
 * (D2D split, loads) from an LP. NULL when a does not
 * fit the MILP's decision space (cuts elsewhere) or the LP fails. layout, when not NULL, gets
 * a's partition and mapping alone (layout_of) whenever a fits the decision space, so that a
 * search restricted to them can start where the full vector is refused (NULL otherwise). */
double *ilp_warm_vector(glp_prob *lp, const struct inst *in, const struct cols *c,
                        const struct mpress_profile *p, const struct mpress_assignment *a,
                        const struct sym *s, double **layout)
{
    if (layout)
        *layout = NULL;
    const int N = in->N, B = in->B, C = in->C, S = a->n_stages;
    if (S < 1 || S > N)
        return NULL;
    int slot_gpu[MPRESS_MAX_GPUS], stage_of_block[4096];
    if (B > 4096)
        return NULL;
    unsigned used = 0;
    for (int r = 0; r < S; r++) {
        slot_gpu[N - S + r] = a->stages[r].gpu;
        used |= 1u << a->stages[r].gpu;
    }
    for (int k = 0, g = 0; k < N - S; k++) {
        while (used & (1u << g))
            g++;
        slot_gpu[k] = g++;
    }
    if (in->sock_free) {
        /* the slots keep their GPUs' sockets; the MILP's GPU k is slot k's */
    } else if (!in->mapped) {
        for (int k = 0; k < N; k++)
            if (slot_gpu[k] != k)
                return NULL;
    } else if (s->n > 1) {
        int best = -1;
        for (int i = 0; i < s->n; i++) {
            const int *pi = s->perm[i];
            if (best < 0 || pi[slot_gpu[N - 1]] < s->perm[best][slot_gpu[N - 1]] ||
                (pi[slot_gpu[N - 1]] == s->perm[best][slot_gpu[N - 1]] && N >= 2 &&
                 pi[slot_gpu[N - 2]] < s->perm[best][slot_gpu[N - 2]]))
                best = i;
        }
        int mapped[MPRESS_MAX_GPUS];
        for (int k = 0; k < N; k++)
            mapped[k] = s->perm[best][slot_gpu[k]];
        memcpy(slot_gpu, mapped, sizeof(mapped));
    }
    for (int b = 0, r = 0; b < B; b++) {
        while (r < S && a->stages[r].last_op < in->blk[b].first)
            r++;
        if (r >= S || a->stages[r].first_op > in->blk[b].first ||
            a->stages[r].last_op < in->blk[b].last)
            return NULL;
        stage_of_block[b] = N - S + r;
    }
    glp_prob *cp = glp_create_prob();
    glp_copy_prob(cp, lp, GLP_OFF);
#define FIX(col, v)                                                                              \
    do {                                                                                         \
        if (col)                                                                                 \
            glp_set_col_bnds(cp, (col), GLP_FX, (v), (v));                                       \
    } while (0)
    for (int r = 0; r < in->NR; r++) {
        int most = 0;
        for (int k = 0; k < N; k++) {
            int here = 0;
            for (int b = in->run_first[r]; b < in->run_first[r] + in->run_len[r]; b++)
                here += stage_of_block[b] == k;
            most = here > most ? here : most;
        }
        FIX(c->lm[r], most);
    }
    for (int k = 0; k < N; k++)
        for (int r = 0; r < in->NR; r++) {
            int upto = 0, here = 0;
            for (int b = in->run_first[r]; b < in->run_first[r] + in->run_len[r]; b++) {
                upto += stage_of_block[b] <= k;
                here |= stage_of_block[b] == k;
            }
            if (k + 1 < N) {
                FIX(c->w[IX2(k, r, in->NR)], upto);
                FIX(c->f[IX2(k, r, in->NR)], upto > 0 ? 1.0 : 0.0);
            }
            FIX(c->ct[IX2(k, r, in->NR)], here);
        }
    if (in->mapped)
        for (int k = 0; k < N; k++)
            for (int g = 0; g < N; g++)
                FIX(c->x[IX2(k, g, N)], slot_gpu[k] == g ? 1.0 : 0.0);
    if (in->sock_free)
        fix_sockets(cp, in, c, slot_gpu);
    if (layout)
        *layout = layout_of(cp, in, c);
    for (int k = 0; k < N; k++) {
        int r = k - (N - S);
        if (in->host_opt)
            FIX(c->h[k], r >= 0 && a->stages[r].optimizer_on_host ? 1.0 : 0.0);
    }
    int *cnt = action_counts(in, p, a);
    if (!cnt) {
        glp_delete_prob(cp);
        return NULL;
    }
    for (int k = 0; k < N; k++)
        for (int cl = 0; cl < C; cl++) {
            FIX(c->R[IX2(k, cl, C)], cnt[(k * C + cl) * 3 + 0]);
            FIX(c->H[IX2(k, cl, C)], cnt[(k * C + cl) * 3 + 1]);
            FIX(c->D[IX2(k, cl, C)], cnt[(k * C + cl) * 3 + 2]);
        }
#undef FIX
    free(cnt);
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = GLP_MSG_OFF;
    sp.presolve = GLP_OFF; /* with fixed columns its presolver returned infeasible points */
    double *x = NULL;
    /* cp starts from lp's basis, whatever solve left it; where the simplex fails from there (a
     * singular or ill-conditioned start, seen after a branch's bounds), again from the standard
     * basis, so that a plan is never refused for the state its MILP was left in. */
    int rc = glp_simplex(cp, &sp);
    if (rc != 0) {
        glp_std_basis(cp);
        rc = glp_simplex(cp, &sp);
    }
    if (rc == 0 && glp_get_status(cp) == GLP_OPT) {
        int n = glp_get_num_cols(cp);
        x = malloc(sizeof(double) * (size_t)(n + 1));
        if (x) {
            x[0] = 0;
            for (int j = 1; j <= n; j++) {
                x[j] = glp_get_col_prim(cp, j);
                if (glp_get_col_kind(cp, j) != GLP_CV)
                    x[j] = round(x[j]);
            }
        }
    }
    glp_delete_prob(cp);
    if (x && !ilp_vector_feasible(lp, x)) {
        free(x);
        x = NULL;
    }
    return x;
}

int ilp_most_saving(const struct mpress_profile *p, const struct mpress_topology *topo,
                    const struct mpress_plan_options *o, struct mpress_assignment *out,
                    struct mpress_plan_eval *ev, int *host_opt)
{
    struct mpress_error err;
    int order[MPRESS_MAX_GPUS];
    char *cut_ok = malloc((size_t)p->n_ops);
    if (!cut_ok || mpress_assignment_init(out, p, &err)) {
        free(cut_ok);
        return 1;
    }
    plan_gpu_order(topo, order);
    plan_cut_points(p, o->cuts, cut_ok);
    plan_even_partition(p, cut_ok, topo->n_gpus, order, out);
    free(cut_ok);
    for (int j = 0, k = 0; j < out->n_actions; j++) {
        struct mpress_plan_action *ac = &out->actions[j];
        while (out->stages[k].last_op < ac->op)
            k++;
        ac->action = MPRESS_ACTION_RECOMPUTE;
        ac->n_peers = 0;
        ac->evict_after_op = ac->op;
        ac->prefetch_before_op =
            plan_prefetch_point(MPRESS_ACTION_RECOMPUTE, ac->op, out->stages[k].last_op);
    }
    /* Optimizer states on the host free the GPUs but may overfill the host: of the two, the
     * one short by less in all. */
    int can_host = plan_host_bw(topo) > 0 && topo->pcie_bytes_per_s > 0, best = -1;
    uint64_t best_short = 0;
    for (int h = 0; h <= can_host; h++) {
        for (int k = 0; k < out->n_stages; k++)
            out->stages[k].optimizer_on_host = h;
        if (mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, out, ev, &err)) {
            mpress_assignment_finish(out);
            return 1;
        }
        if (best < 0 || plan_shortfall(ev) < best_short) {
            best = h;
            best_short = plan_shortfall(ev);
        }
    }
    for (int k = 0; k < out->n_stages; k++)
        out->stages[k].optimizer_on_host = best;
    *host_opt = best;
    if (mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, out, ev, &err)) {
        mpress_assignment_finish(out);
        return 1;
    }
    return 0;
}

int ilp_warm_find(const struct mpress_profile *p, const struct mpress_topology *topo,
                  const struct mpress_plan_options *o, struct mpress_assignment *out)
{
    struct mpress_plan_options fewer = *o;
    fewer.warm_start = NULL;
    for (int mb = o->micro_batches / 2; mb >= 1; mb /= 2) {
        struct mpress_plan_eval ev;
        struct mpress_error err;
        fewer.micro_batches = mb;
        if (mpress_plan_baseline(p, topo, &fewer, MPRESS_POLICY_GREEDY, out, &ev, &err))
            return 1;
        if (mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, out, &ev, &err) == 0 &&
            ev.fits)
            return 0;
        mpress_assignment_finish(out);
    }
    struct mpress_plan_eval ev;
    int host;
    if (ilp_most_saving(p, topo, o, out, &ev, &host) == 0) {
        if (ev.fits)
            return 0;
        mpress_assignment_finish(out);
    }
    return 1;
}
