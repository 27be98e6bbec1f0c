/* A local search over the partition around a plan of the MILP, after branch and bound.
 *
 * The full MILP's relaxation balances fractional layers across stages, so on large models its
 * search spends thousands of nodes without finding a plan better than the warm start. With the
 * partition (and on direct fabrics the mapping) fixed, what is left (action counts, D2D split,
 * optimizer placement) has a tight relaxation and solves in a few hundred to a few thousand
 * nodes. The search therefore first solves that restricted MILP on the start's partition and
 * mapping, then the MILP with every stage boundary free to move by one, then two, blocks around
 * the best plan's (the mapping still fixed), and on direct fabrics the best partition with the
 * mapping free, each from the best plan and re-centred while it finds a faster one. Every
 * solution of a restricted MILP is one of the full MILP (checked against its rows), so this
 * never returns a plan the MILP does not allow, and only node budgets stop it: the result does
 * not depend on the machine. Budgets and where it runs: ilp_solve.c.
 *
 * The placement search (ilp_placement_search), for more than 8 slots of a fixed mapping with
 * host optimizers, where 2^N placements are too many to branch on: on the start's partition,
 * the relaxation's value for each threshold placement (the optimizers of slots k0 and later on
 * the host, the others on their GPUs), then single flips while one lowers it; on the best
 * placement, relax and fix slot by slot (each slot's counts integral in turn, solved within a
 * per-slot node budget, then fixed). Its result is checked against every row like the rest. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "ilp_internal.h"

struct sub_cb {
    long limit, nodes;
    const double *heur;
    int given;
    long after; /* ilp_dive: nodes it goes on for past its first integer plan */
    int first;  /* ilp_dive: no integer plan yet */
};

static void sub_callback(glp_tree *tree, void *info)
{
    struct sub_cb *s = info;
    int reason = glp_ios_reason(tree);
    if (reason == GLP_IBINGO && s->first) {
        int a_cnt, n_cnt, t_cnt;
        glp_ios_tree_size(tree, &a_cnt, &n_cnt, &t_cnt);
        if (t_cnt + s->after < s->limit)
            s->limit = t_cnt + s->after;
        s->first = 0;
        return;
    }
    if (reason == GLP_IHEUR && s->heur && !s->given) {
        glp_ios_heur_sol(tree, s->heur);
        s->given = 1;
        return;
    }
    if (reason != GLP_ISELECT)
        return;
    int a_cnt, n_cnt, t_cnt;
    glp_ios_tree_size(tree, &a_cnt, &n_cnt, &t_cnt);
    s->nodes = t_cnt;
    if (t_cnt >= s->limit)
        glp_ios_terminate(tree);
}

/* Blocks in slots 0..k of the solution x, for every slot (u[N-1] = B). */
static void partition_of(const struct inst *in, const struct cols *c, const double *x, int *u)
{
    for (int k = 0; k + 1 < in->N; k++) {
        long s = 0;
        for (int r = 0; r < in->NR; r++)
            s += lround(x[c->w[IX2(k, r, in->NR)]]);
        u[k] = (int)s;
    }
    u[in->N - 1] = in->B;
}

static void fix_col(glp_prob *lp, int col, double v)
{
    if (col)
        glp_set_col_bnds(lp, col, GLP_FX, v, v);
}

/* Bounds the partition columns of lp to within delta blocks of u at every slot boundary
 * (delta 0: fixed to u), and fixes the mapping to that of x when it is decided. */
static void fix_partition(glp_prob *lp, const struct inst *in, const struct cols *c,
                          const int *u, int delta, int free_map, const double *x)
{
    const int N = in->N, NR = in->NR;
    for (int r = 0; r < NR; r++) {
        int prev = 0, len = in->run_len[r];
        for (int k = 0; k < N; k++) {
            int lo = u[k] - delta - in->run_first[r], hi = u[k] + delta - in->run_first[r];
            lo = lo < 0 ? 0 : lo > len ? len : lo;
            hi = hi < 0 ? 0 : hi > len ? len : hi;
            int col = k + 1 < N ? c->w[IX2(k, r, NR)] : 0;
            if (delta == 0) {
                fix_col(lp, col, lo);
                if (k + 1 < N)
                    fix_col(lp, c->f[IX2(k, r, NR)], lo > 0);
                fix_col(lp, c->ct[IX2(k, r, NR)], lo > prev);
                prev = lo;
            } else if (col) { /* within the column's own bounds (the last slot is used) */
                double l = fmax(lo, glp_get_col_lb(lp, col)), h = fmin(hi, glp_get_col_ub(lp, col));
                glp_set_col_bnds(lp, col, l >= h ? GLP_FX : GLP_DB, l, l >= h ? l : h);
            }
        }
    }
    if (in->mapped && !free_map)
        for (int k = 0; k < N; k++)
            for (int g = 0; g < N; g++)
                fix_col(lp, c->x[IX2(k, g, N)], x[c->x[IX2(k, g, N)]] > 0.5);
}

/* The solution of lp with its integer columns at those of x (rounded) and its continuous ones
 * from an LP, checked against every row of lp; NULL when that fails. */
static double *complete_vector(glp_prob *lp, const double *x)
{
    int n = glp_get_num_cols(lp);
    glp_prob *cp = glp_create_prob();
    glp_copy_prob(cp, lp, GLP_OFF);
    for (int j = 1; j <= n; j++)
        if (glp_get_col_kind(cp, j) != GLP_CV)
            glp_set_col_bnds(cp, j, GLP_FX, round(x[j]), round(x[j]));
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = GLP_MSG_OFF;
    sp.it_lim = 50 * (glp_get_num_rows(cp) + n) + 10000;
    double *v = NULL;
    /* Integer columns within lp's own bounds (ilp_vector_feasible checks the rows). */
    for (int j = 1; j <= n; j++) {
        int t = glp_get_col_type(lp, j);
        double r = round(x[j]);
        if (glp_get_col_kind(lp, j) != GLP_CV &&
            (((t == GLP_LO || t == GLP_DB || t == GLP_FX) && r < glp_get_col_lb(lp, j) - 1e-9) ||
             ((t == GLP_UP || t == GLP_DB || t == GLP_FX) && r > glp_get_col_ub(lp, j) + 1e-9))) {
            glp_delete_prob(cp);
            return NULL;
        }
    }
    if (glp_simplex(cp, &sp) == 0 && glp_get_status(cp) == GLP_OPT &&
        (v = malloc(sizeof(double) * (size_t)(n + 1)))) {
        v[0] = 0;
        for (int j = 1; j <= n; j++)
            v[j] = glp_get_col_kind(cp, j) != GLP_CV ? round(x[j]) : glp_get_col_prim(cp, j);
    }
    glp_delete_prob(cp);
    if (v && !ilp_vector_feasible(lp, v)) {
        free(v);
        v = NULL;
    }
    return v;
}

/* The MILP solution of cp (a copy of lp with bounds changed or rows added) as a checked
 * vector of lp (complete_vector), or NULL. */
static double *mip_vector(glp_prob *lp, glp_prob *cp)
{
    int n = glp_get_num_cols(lp);
    double *y = malloc(sizeof(double) * (size_t)(n + 1));
    if (!y)
        return NULL;
    y[0] = 0;
    for (int j = 1; j <= n; j++)
        y[j] = glp_mip_col_val(cp, j);
    double *v = complete_vector(lp, y);
    free(y);
    return v;
}

double ilp_objective(glp_prob *lp, const double *x)
{
    double z = glp_get_obj_coef(lp, 0);
    for (int j = 1; j <= glp_get_num_cols(lp); j++)
        z += glp_get_obj_coef(lp, j) * x[j];
    return z;
}

/* The relaxation of cp (a copy of lp with bounds changed or rows added), then branch and
 * bound on it with the local search's settings: pseudo-cost (pch) or Driebeck-Tomlin
 * branching, depth first (dfs) or by best local bound, Gomory cuts, and MIR and cover cuts
 * where the mapping is fixed (!mapped); cb counts and limits the nodes. glp_intopt's return,
 * or -1 when the relaxation has no optimum (deterministic iteration bound). */
static int sub_intopt(glp_prob *cp, struct sub_cb *cb, int pch, int dfs, int mapped)
{
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = GLP_MSG_OFF;
    sp.it_lim = 50 * (glp_get_num_rows(cp) + glp_get_num_cols(cp)) + 10000;
    if (glp_simplex(cp, &sp) != 0 || glp_get_status(cp) != GLP_OPT)
        return -1;
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_OFF;
    parm.mip_gap = 1e-4;
    parm.br_tech = pch ? GLP_BR_PCH : GLP_BR_DTH;
    parm.bt_tech = dfs ? GLP_BT_DFS : GLP_BT_BLB;
    parm.gmi_cuts = GLP_ON;
    parm.mir_cuts = parm.cov_cuts = mapped ? GLP_OFF : GLP_ON;
    parm.cb_func = sub_callback;
    parm.cb_info = cb;
    return glp_intopt(cp, &parm);
}

int ilp_cutoff_row(glp_prob *lp, double cutoff)
{
    int n = glp_get_num_cols(lp), len = 0;
    int *ind = malloc(sizeof(int) * (size_t)(n + 1));
    double *val = malloc(sizeof(double) * (size_t)(n + 1));
    if (!ind || !val) {
        free(ind);
        free(val);
        return -1;
    }
    for (int j = 1; j <= n; j++)
        if (glp_get_obj_coef(lp, j) != 0) {
            len++;
            ind[len] = j;
            val[len] = glp_get_obj_coef(lp, j);
        }
    int row = glp_add_rows(lp, 1);
    glp_set_row_name(lp, row, "cutoff");
    glp_set_mat_row(lp, row, len, ind, val);
    glp_set_row_bnds(lp, row, GLP_UP, 0, cutoff - glp_get_obj_coef(lp, 0));
    free(ind);
    free(val);
    return 0;
}

/* The restricted MILP of lp on partition u, or within delta blocks of it (fix_partition),
 * with x's mapping, cut off at objective `cutoff`, within `nodes` nodes; start: an incumbent to
 * offer (a solution inside the restriction), or NULL. Returns the best plan it finds below the
 * cut-off as a checked vector of lp, or NULL; *used: the nodes it took. */
static double *solve_restricted(glp_prob *lp, const struct inst *in, const struct cols *c,
                                const int *u, int delta, int free_map, const double *x,
                                const double *start, double cutoff, long nodes,
                                int mapped_settings, int dive, const int *hfix, long *used)
{
    glp_prob *cp = glp_create_prob();
    glp_copy_prob(cp, lp, GLP_OFF);
    fix_partition(cp, in, c, u, delta, free_map, x);
    for (int k = 0; hfix && k < in->N; k++)
        fix_col(cp, c->h[k], hfix[k]);
    double *v = NULL;
    *used = 0;
    /* The cut-off: only plans faster than the best so far are of use. */
    if (ilp_cutoff_row(cp, cutoff))
        goto out;
    struct sub_cb cb = {.limit = nodes, .heur = start};
    if (sub_intopt(cp, &cb, mapped_settings, dive, mapped_settings) < 0)
        goto out;
    *used = cb.nodes;
    int st = glp_mip_status(cp);
    if (st == GLP_OPT || st == GLP_FEAS)
        v = mip_vector(lp, cp);
    if (v && ilp_objective(lp, v) >= cutoff) { /* the start itself, or no better */
        free(v);
        v = NULL;
    }
out:
    glp_delete_prob(cp);
    return v;
}

double *ilp_dive(glp_prob *lp, const struct inst *in, long nodes, long after, int pch,
                 long *used, int *none)
{
    glp_prob *cp = glp_create_prob();
    glp_copy_prob(cp, lp, GLP_OFF);
    double *v = NULL;
    *used = 0;
    *none = 0;
    struct sub_cb cb = {.limit = nodes, .after = after, .first = 1};
    int ret = sub_intopt(cp, &cb, pch, 1, in->mapped);
    if (ret < 0) {
        glp_delete_prob(cp);
        return NULL;
    }
    *used = cb.nodes;
    int st = glp_mip_status(cp);
    /* the whole tree searched without a plan: none exists */
    *none = (ret == 0 || ret == GLP_ENOPFS) && st == GLP_NOFEAS;
    if (st == GLP_OPT || st == GLP_FEAS)
        v = mip_vector(lp, cp);
    glp_delete_prob(cp);
    return v;
}

double *ilp_local_search(glp_prob *lp, const struct inst *in, const struct cols *c,
                         const double *start, double beat, const struct ilp_ls_budget *bud,
                         struct ilp_ls_stats *st)
{
    const int N = in->N;
    memset(st, 0, sizeof(*st));
    if (N < 2 || !start)
        return NULL;
    /* start as a solution when it is one; else only its partition and mapping are used. */
    double *best = complete_vector(lp, start);
    double zbest = best ? ilp_objective(lp, best) : beat;
    zbest = zbest < beat ? zbest : beat;
    st->start = zbest;
    int u[MPRESS_MAX_GPUS], improved = 0;
    partition_of(in, c, start, u);
    long left = bud->nodes, used;
    /* start's own partition and mapping first, from start. */
    double *v = solve_restricted(lp, in, c, u, 0, 0, start, best, zbest * (1 - 1e-6),
                                 bud->first_nodes, in->mapped, bud->dive, NULL, &used);
    left -= used;
    st->solves++;
    if (!best && !v)
        return NULL;
    if (v) {
        free(best);
        best = v;
        zbest = ilp_objective(lp, best);
        improved = 1;
    }
    /* Then, from the best plan: every boundary within delta blocks of its partition (the
     * mapping fixed), and on direct fabrics its partition with the mapping free; each search
     * that finds a plan faster by 0.01 % at least re-centres the next on it, a box that finds
     * none is doubled, until the budget or the rounds are spent or delta passes its cap. */
    int delta = bud->box_delta, map_tried = !in->mapped;
    for (int it = 0; delta > 0 && delta <= bud->box_max && it < bud->box_rounds && left > 1;
         it++) {
        int by_map = !map_tried && it > 0;
        long lim = by_map ? bud->map_nodes : bud->box_nodes;
        lim = lim < left ? lim : left;
        v = solve_restricted(lp, in, c, u, by_map ? 0 : delta, by_map, best, best,
                             zbest * (1 - 1e-4), lim, in->mapped, bud->dive, NULL, &used);
        left -= used > 0 ? used : 1;
        st->solves++;
        if (!v) {
            if (by_map)
                map_tried = 1;
            else
                delta *= 2;
            continue;
        }
        free(best);
        best = v;
        zbest = ilp_objective(lp, best);
        partition_of(in, c, best, u);
        improved = 1;
        st->moves++;
        map_tried = !in->mapped || by_map;
    }
    st->nodes = bud->nodes - left;
    st->found = zbest;
    if (!improved) {
        free(best);
        return NULL;
    }
    return best;
}

/* Relax and fix on lp with partition u (x's mapping) and placement h fixed: the action counts
 * of every slot continuous but slot k's, whose small MILP (within `nodes`) fixes them; slot by
 * slot from the first. retry: a slot whose MILP ends without an integer plan by best local
 * bound is searched once more depth first within as many nodes. The plan as a checked vector
 * of lp, or NULL. */
static double *relax_fix_restricted(glp_prob *lp, const struct inst *in, const struct cols *c,
                                    const int *u, const int *h, const double *x, long nodes,
                                    long total, int retry, long *used)
{
    const int N = in->N, C = in->C;
    int n = glp_get_num_cols(lp);
    glp_prob *cp = glp_create_prob();
    glp_copy_prob(cp, lp, GLP_OFF);
    fix_partition(cp, in, c, u, 0, 0, x);
    for (int k = 0; k < N; k++)
        fix_col(cp, c->h[k], h[k]);
    double *y = malloc(sizeof(double) * (size_t)(n + 1)), *v = NULL;
    *used = 0;
    if (!y)
        goto out;
    for (int k = 0; k < N; k++)
        for (int cl = 0; cl < C; cl++) {
            int js[3] = {c->R[IX2(k, cl, C)], c->H[IX2(k, cl, C)],
                         in->d2d ? c->D[IX2(k, cl, C)] : 0};
            for (int i = 0; i < 3; i++)
                if (js[i])
                    glp_set_col_kind(cp, js[i], GLP_CV);
        }
    if (c->lm)
        for (int r = 0; r < in->NR; r++)
            if (c->lm[r])
                glp_set_col_kind(cp, c->lm[r], GLP_CV);
    for (int k = 0; k < N; k++) {
        for (int cl = 0; cl < C; cl++) {
            int js[3] = {c->R[IX2(k, cl, C)], c->H[IX2(k, cl, C)],
                         in->d2d ? c->D[IX2(k, cl, C)] : 0};
            for (int i = 0; i < 3; i++)
                if (js[i])
                    glp_set_col_kind(cp, js[i], GLP_IV);
        }
        long lim = total - *used < nodes ? total - *used : nodes;
        if (lim < 1)
            goto out;
        struct sub_cb cb = {.limit = lim, .first = retry, .after = nodes / 4};
        int ret = sub_intopt(cp, &cb, 0, 0, in->mapped);
        *used += cb.nodes > 0 ? cb.nodes : 1;
        int st = glp_mip_status(cp);
        lim = total - *used < nodes ? total - *used : nodes;
        if (retry && ret >= 0 && st != GLP_OPT && st != GLP_FEAS && st != GLP_NOFEAS &&
            lim >= 1) {
            cb = (struct sub_cb){.limit = lim};
            ret = sub_intopt(cp, &cb, 0, 1, in->mapped);
            *used += cb.nodes > 0 ? cb.nodes : 1;
            st = glp_mip_status(cp);
        }
        if (ret < 0 || (st != GLP_OPT && st != GLP_FEAS))
            goto out;
        for (int cl = 0; cl < C; cl++) {
            int js[3] = {c->R[IX2(k, cl, C)], c->H[IX2(k, cl, C)],
                         in->d2d ? c->D[IX2(k, cl, C)] : 0};
            for (int i = 0; i < 3; i++)
                if (js[i])
                    fix_col(cp, js[i], round(glp_mip_col_val(cp, js[i])));
        }
    }
    y[0] = 0;
    for (int j = 1; j <= n; j++)
        y[j] = glp_mip_col_val(cp, j);
    v = complete_vector(lp, y);
out:
    free(y);
    glp_delete_prob(cp);
    return v;
}

/* The relaxation's objective with placement h on cp (the partition fixed); HUGE_VAL when it
 * has no optimum. Solved through GLPK's presolver first: with the partition fixed most columns
 * and rows drop out, and the reduced LP from scratch is faster than cp from its last basis
 * (the 561 solves of the mapping search on gpt3-13b on dgx1: 3.0 s against 4.0 s,
 * docs/benchmarks.md). Where the presolved solve fails, cp from its last basis, then from a
 * fresh one (a warm basis can stall where a cold one does not). */
static double placement_value(glp_prob *cp, const struct inst *in, const struct cols *c,
                              const int *h)
{
    for (int k = 0; k < in->N; k++)
        fix_col(cp, c->h[k], h[k]);
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = GLP_MSG_OFF;
    sp.it_lim = 50 * (glp_get_num_rows(cp) + glp_get_num_cols(cp)) + 10000;
    sp.presolve = GLP_ON;
    int ret = glp_simplex(cp, &sp);
    if (ret == 0 && glp_get_status(cp) == GLP_OPT)
        return glp_get_obj_val(cp);
    if (ret == GLP_ENOPFS || ret == GLP_ENODFS)
        return HUGE_VAL;
    sp.presolve = GLP_OFF;
    if (glp_simplex(cp, &sp) != 0 || glp_get_status(cp) != GLP_OPT) {
        glp_std_basis(cp);
        if (glp_simplex(cp, &sp) != 0 || glp_get_status(cp) != GLP_OPT)
            return HUGE_VAL;
    }
    return glp_get_obj_val(cp);
}

/* The least relaxation on cp over the threshold placements (slots k0.. on the host) into hb;
 * one LP solve each out of *left, counted in st when not NULL; HUGE_VAL when none has an
 * optimum. */
static double least_threshold(glp_prob *cp, const struct inst *in, const struct cols *c, int *hb,
                              long *left, struct ilp_ls_stats *st)
{
    double vb = HUGE_VAL;
    for (int k0 = in->N; k0 >= 0 && *left > 0; k0--, --*left) {
        int h[MPRESS_MAX_GPUS];
        for (int k = 0; k < in->N; k++)
            h[k] = k >= k0;
        double v = placement_value(cp, in, c, h);
        if (st)
            st->solves++;
        if (v < vb * (1 - 1e-9))
            vb = v, memcpy(hb, h, sizeof(h));
    }
    return vb;
}

/* The least relaxation over placements from hb: single flips, first improvement, while one
 * lowers it (at most 3 rounds, *left LP solves); hb and the value updated, the solves and
 * the improving flips counted in st when not NULL. */
static double flip_placement(glp_prob *cp, const struct inst *in, const struct cols *c,
                             int *hb, double vb, long *left, struct ilp_ls_stats *st)
{
    int h[MPRESS_MAX_GPUS];
    for (int again = 1, round = 0; again && round < 3; round++) {
        again = 0;
        for (int k = 0; k < in->N && *left > 0; k++, --*left) {
            memcpy(h, hb, sizeof(h));
            h[k] = !h[k];
            double v = placement_value(cp, in, c, h);
            if (st)
                st->solves++;
            if (v < vb * (1 - 1e-9)) {
                vb = v, memcpy(hb, h, sizeof(h));
                if (st)
                    st->moves++;
                again = 1;
            }
        }
    }
    return vb;
}

void ilp_fix_map(glp_prob *lp, const struct inst *in, const struct cols *c, const int *map)
{
    for (int k = 0; k < in->N; k++)
        for (int g = 0; g < in->N; g++)
            fix_col(lp, c->x[IX2(k, g, in->N)], g == map[k]);
}

double *ilp_placement_search(glp_prob *lp, const struct inst *in, const struct cols *c,
                             const double *start, long nodes, long per_slot,
                             struct ilp_ls_stats *st)
{
    const int N = in->N;
    memset(st, 0, sizeof(*st));
    double *best = complete_vector(lp, start);
    if (!best)
        return NULL;
    double zbest = ilp_objective(lp, best);
    st->start = st->found = zbest;
    if (!in->host_opt || N < 2)
        return best;
    int u[MPRESS_MAX_GPUS], hb[MPRESS_MAX_GPUS];
    partition_of(in, c, best, u);
    glp_prob *cp = glp_create_prob();
    glp_copy_prob(cp, lp, GLP_OFF);
    fix_partition(cp, in, c, u, 0, 0, best);
    /* The placement whose relaxation is least: thresholds (slots k0.. on the host, where the
     * drain hides most of a host step), then single flips, first improvement. */
    long left = nodes;
    double vb = least_threshold(cp, in, c, hb, &left, st);
    if (vb < HUGE_VAL)
        vb = flip_placement(cp, in, c, hb, vb, &left, st);
    glp_delete_prob(cp);
    long used = 0;
    double *v = vb < zbest * (1 - 1e-6) && left > 0
                    ? relax_fix_restricted(lp, in, c, u, hb, best, per_slot, left, 0, &used)
                    : NULL;
    st->nodes = nodes - left + used;
    if (v && ilp_objective(lp, v) < zbest * (1 - 1e-9)) {
        free(best);
        best = v;
        st->found = ilp_objective(lp, v);
    } else {
        free(v);
    }
    return best;
}

/* The mapping search's exchanges are judged by independent LPs: MAP_WORKERS threads share
 * each round, worker w taking candidates w, w + MAP_WORKERS, ... on a copy of its own. The
 * count is fixed, not the machine's, so every machine solves the same LPs on the same copies
 * in the same order, and the values are read in the candidates' order, so the move is the one
 * one thread would choose (each LP goes through the presolver from scratch; only a failed one
 * falls back on its copy's last basis). GLPK keeps an environment per thread
 * (glp_config("TLS")): a worker creates, solves and frees its copy in its own, and a GLPK
 * failure inside ends that worker alone, its remaining candidates unjudged (HUGE_VAL). On
 * 2 cores the 561 LPs of gpt3-13b on dgx1 take about half as long (docs/benchmarks.md, "The
 * mapping search's LPs on two cores"). */
#define MAP_WORKERS 4

struct exch {
    glp_prob *src; /* the round's problem, only read while the workers run */
    const struct inst *in;
    const struct cols *c;
    const int *map, *hb, *u; /* the round's mapping, placement and partition */
    /* cand[t][0] >= 0: exchange slots cand[t][0] and [1], flip slot [2] (-1: none);
     * cand[t][0] = -1: move the boundaries after slots [1]..[2] by one block (-2: back) */
    const int (*cand)[3];
    double *val;          /* [t]: candidate t's relaxation, HUGE_VAL until judged */
    long n;
    int w, thread; /* worker w; thread: on a thread (an environment) of its own */
    jmp_buf jump;
};

/* u with the boundaries after slots mv[1]..mv[2] moved one block later (mv[0] = -1: a block
 * of slot mv[2] + 1 taken into slot mv[1]) or earlier (-2: a block of slot mv[1] given to
 * slot mv[2] + 1), into v. */
static void shifted(const int *u, int N, const int *mv, int *v)
{
    memcpy(v, u, sizeof(*v) * (size_t)N);
    for (int k = mv[1]; k <= mv[2]; k++)
        v[k] += mv[0] == -1 ? 1 : -1;
}

/* Every slot of partition v holds a block. */
static int every_slot_used(const int *v, int N)
{
    for (int k = 0; k < N; k++)
        if (v[k] <= (k ? v[k - 1] : 0))
            return 0;
    return 1;
}

static void exch_error(void *info)
{
    longjmp(((struct exch *)info)->jump, 1);
}

static void *exch_run(void *arg)
{
    struct exch *e = arg;
    const int N = e->in->N;
    if (e->thread) {
        glp_term_out(GLP_OFF);
        glp_error_hook(exch_error, e);
        if (setjmp(e->jump)) {
            glp_free_env();
            return NULL;
        }
    }
    glp_prob *cp = glp_create_prob();
    glp_copy_prob(cp, e->src, GLP_OFF);
    for (long t = e->w; t < e->n; t += MAP_WORKERS) {
        int m[MPRESS_MAX_GPUS], h[MPRESS_MAX_GPUS];
        memcpy(m, e->map, sizeof(*m) * (size_t)N);
        memcpy(h, e->hb, sizeof(*h) * (size_t)N);
        int i = e->cand[t][0], j = e->cand[t][1], f = e->cand[t][2];
        if (i < 0) {
            int v[MPRESS_MAX_GPUS];
            shifted(e->u, N, e->cand[t], v);
            fix_partition(cp, e->in, e->c, v, 0, 1, NULL);
            e->val[t] = placement_value(cp, e->in, e->c, h);
            fix_partition(cp, e->in, e->c, e->u, 0, 1, NULL);
            continue;
        }
        m[i] = e->map[j], m[j] = e->map[i];
        if (f >= 0)
            h[f] = !h[f];
        ilp_fix_map(cp, e->in, e->c, m);
        e->val[t] = placement_value(cp, e->in, e->c, h);
    }
    glp_delete_prob(cp);
    if (e->thread)
        glp_free_env();
    return NULL;
}

/* Candidate t of a round judged into val[t] (HUGE_VAL where it has no optimum); a worker whose
 * thread cannot start runs on the caller's thread, after the others, in the same order. */
static void exch_round(glp_prob *cp, const struct inst *in, const struct cols *c, const int *map,
                       const int *hb, const int *u, const int (*cand)[3], long n, double *val)
{
    struct exch e[MAP_WORKERS];
    pthread_t th[MAP_WORKERS];
    /* A GLPK built without thread-local environments shares one among threads: no threads. */
    int threads = glp_config("TLS") != NULL;
    for (long t = 0; t < n; t++)
        val[t] = HUGE_VAL;
    for (int w = 0; w < MAP_WORKERS; w++) {
        e[w] = (struct exch){.src = cp, .in = in, .c = c, .map = map, .hb = hb, .u = u,
                             .cand = cand, .val = val, .n = n, .w = w, .thread = threads};
        /* written only where no thread started, which would read it */
        if (threads && pthread_create(&th[w], NULL, exch_run, &e[w]) != 0)
            e[w].thread = 0;
    }
    for (int w = 0; w < MAP_WORKERS; w++)
        if (e[w].thread)
            pthread_join(th[w], NULL);
    for (int w = 0; w < MAP_WORKERS; w++)
        if (!e[w].thread)
            exch_run(&e[w]);
}

/* The best of the n candidates judged into val, improving on vb; -1 when none does. */
static long best_candidate(const double *val, long n, double vb)
{
    long best = -1;
    for (long t = 0; t < n; t++)
        if (val[t] < vb * (1 - 1e-9))
            vb = val[t], best = t;
    return best;
}

double ilp_map_search(glp_prob *lp, const struct inst *in, const struct cols *c,
                      const double *layout, long lps, int *map, int *hb, int *u)
{
    const int N = in->N;
    memset(hb, 0, sizeof(*hb) * (size_t)N);
    partition_of(in, c, layout, u);
    for (int k = 0; k < N; k++)
        for (int g = 0; g < N; g++)
            if (layout[c->x[IX2(k, g, N)]] > 0.5)
                map[k] = g;
    glp_prob *cp = glp_create_prob();
    glp_copy_prob(cp, lp, GLP_OFF);
    fix_partition(cp, in, c, u, 0, 1, layout);
    ilp_fix_map(cp, in, c, map);
    /* The start's placement: the least threshold, then flips. */
    long left = lps;
    double vb = least_threshold(cp, in, c, hb, &left, NULL);
    if (vb < HUGE_VAL)
        vb = flip_placement(cp, in, c, hb, vb, &left, NULL);
    /* Steepest descent, each move judged at the best placement so far, which is then improved
     * by flips: rounds of exchanges of two slots' GPUs and rounds of block moves (a block
     * passed from one slot to another, the boundaries between them moved by one), in turn,
     * until neither finds a lower relaxation. */
    long most = (long)N * (N - 1) / 2 * (N + 1) + 2L * N * N;
    int(*cand)[3] = malloc(sizeof(*cand) * (size_t)most);
    double *val = malloc(sizeof(double) * (size_t)most);
    for (int stale = 0, blocks = 0; cand && val && vb < HUGE_VAL && left > 0 && stale < 2;
         blocks = !blocks) {
        long n = 0;
        if (!blocks) {
            for (int i = 0; i < N && n < left; i++)
                for (int j = i + 1; j < N && n < left; j++)
                    for (int f = -1; f < N && n < left; f++, n++)
                        cand[n][0] = i, cand[n][1] = j, cand[n][2] = f;
        } else {
            for (int lo = 0; lo + 1 < N; lo++)
                for (int hi = lo; hi + 1 < N; hi++)
                    for (int d = -2; d <= -1 && n < left; d++) {
                        int v[MPRESS_MAX_GPUS], mv[3] = {d, lo, hi};
                        shifted(u, N, mv, v);
                        if (every_slot_used(v, N))
                            memcpy(cand[n++], mv, sizeof(mv));
                    }
        }
        left -= n;
        exch_round(cp, in, c, map, hb, u, (const int(*)[3])cand, n, val);
        long best = best_candidate(val, n, vb);
        if (best < 0) {
            stale++;
            continue;
        }
        stale = 0;
        int i = cand[best][0], j = cand[best][1], f = cand[best][2];
        if (blocks) {
            int v[MPRESS_MAX_GPUS];
            shifted(u, N, cand[best], v);
            memcpy(u, v, sizeof(v));
            fix_partition(cp, in, c, u, 0, 1, NULL);
        } else {
            int t = map[i];
            map[i] = map[j], map[j] = t;
            ilp_fix_map(cp, in, c, map);
            if (f >= 0)
                hb[f] = !hb[f];
        }
        vb = flip_placement(cp, in, c, hb, val[best], &left, NULL);
    }
    free(cand);
    free(val);
    glp_delete_prob(cp);
    return vb;
}

double *ilp_map_start(glp_prob *lp, const struct inst *in, const struct cols *c,
                      const double *layout, const int *u, const int *map, const int *h,
                      long per_slot, long nodes, long *used)
{
    const int N = in->N;
    int n = glp_get_num_cols(lp);
    *used = 0;
    double *x = malloc(sizeof(double) * (size_t)(n + 1));
    if (!x)
        return NULL;
    memcpy(x, layout, sizeof(double) * (size_t)(n + 1));
    for (int k = 0; k < N; k++)
        for (int g = 0; g < N; g++)
            x[c->x[IX2(k, g, N)]] = g == map[k];
    double *v = relax_fix_restricted(lp, in, c, u, h, x, per_slot, nodes, 1, used);
    free(x);
    return v;
}
