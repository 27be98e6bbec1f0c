/* A local search over the partition around the MILP's warm start, before branch and bound.
 *
 * The full MILP's relaxation balances fractional layers across stages, so on large models its
 * search spends thousands of nodes without finding a plan better than the warm start. With the
 * partition (and on direct fabrics the mapping) fixed, what is left (action counts, D2D split,
 * optimizer placement) has a tight relaxation and solves in a few nodes. The search therefore
 * first solves that restricted MILP on the warm start's partition, then moves one stage
 * boundary by one block at a time, keeping a move when its restricted MILP, cut off at the best
 * plan so far, finds a faster plan; the best plan found becomes the full search's first
 * incumbent. Every solution of a restricted MILP is one of the full MILP, so this never loses a
 * plan, and only node budgets stop it: the result does not depend on the machine. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ilp_internal.h"

struct sub_cb {
    long limit, nodes;
    const double *heur;
    int given;
};

static void sub_callback(glp_tree *tree, void *info)
{
    struct sub_cb *s = info;
    int reason = glp_ios_reason(tree);
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

/* Whether u is a partition the MILP allows: nondecreasing prefixes, empty slots only before
 * the first used one, the last slot used. */
static int partition_ok(const struct inst *in, const int *u)
{
    for (int k = 0; k < in->N; k++) {
        int prev = k ? u[k - 1] : 0;
        if (u[k] < prev || u[k] > in->B || (k + 1 < in->N && u[k] > in->B - 1))
            return 0;
        if (k >= 1 && u[k] > 0 && u[k] == prev)
            return 0;
    }
    return 1;
}

static void fix_col(glp_prob *lp, int col, double v)
{
    if (col)
        glp_set_col_bnds(lp, col, GLP_FX, v, v);
}

/* Fixes the partition columns of lp to u, and the mapping to that of x when it is decided. */
static void fix_partition(glp_prob *lp, const struct inst *in, const struct cols *c,
                          const int *u, const double *x)
{
    const int N = in->N, NR = in->NR;
    for (int r = 0; r < NR; r++) {
        int prev = 0;
        for (int k = 0; k < N; k++) {
            int w = u[k] - in->run_first[r];
            w = w < 0 ? 0 : w > in->run_len[r] ? in->run_len[r] : w;
            if (k + 1 < N) {
                fix_col(lp, c->w[IX2(k, r, NR)], w);
                fix_col(lp, c->f[IX2(k, r, NR)], w > 0);
            }
            fix_col(lp, c->ct[IX2(k, r, NR)], w > prev);
            prev = w;
        }
    }
    if (in->mapped)
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

static double objective_of(glp_prob *lp, const double *x)
{
    double z = glp_get_obj_coef(lp, 0);
    for (int j = 1; j <= glp_get_num_cols(lp); j++)
        z += glp_get_obj_coef(lp, j) * x[j];
    return z;
}

/* The restricted MILP of lp on partition u (and x's mapping), cut off below `best`, within
 * `nodes` nodes; start: an incumbent to offer (a solution on u), or NULL. Returns the best
 * plan it finds as a checked vector of lp, or NULL; *used: the nodes it took. */
static double *solve_restricted(glp_prob *lp, const struct inst *in, const struct cols *c,
                                const int *u, const double *x, const double *start,
                                double best, long nodes, int mapped_settings, long *used)
{
    int n = glp_get_num_cols(lp);
    glp_prob *cp = glp_create_prob();
    glp_copy_prob(cp, lp, GLP_OFF);
    fix_partition(cp, in, c, u, x);
    /* The cut-off: only plans faster than the best so far are of use. */
    int *ind = malloc(sizeof(int) * (size_t)(n + 1));
    double *val = malloc(sizeof(double) * (size_t)(n + 1));
    double *v = NULL;
    *used = 0;
    if (!ind || !val)
        goto out;
    int len = 0;
    for (int j = 1; j <= n; j++)
        if (glp_get_obj_coef(cp, j) != 0) {
            len++;
            ind[len] = j;
            val[len] = glp_get_obj_coef(cp, j);
        }
    int row = glp_add_rows(cp, 1);
    glp_set_row_bnds(cp, row, GLP_UP, 0, best * (1 - 1e-6) - glp_get_obj_coef(cp, 0));
    glp_set_mat_row(cp, row, len, ind, val);
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = GLP_MSG_OFF;
    sp.it_lim = 50 * (glp_get_num_rows(cp) + n) + 10000;
    if (glp_simplex(cp, &sp) != 0 || glp_get_status(cp) != GLP_OPT)
        goto out;
    struct sub_cb cb = {.limit = nodes, .heur = start};
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_OFF;
    parm.mip_gap = 1e-4;
    parm.br_tech = mapped_settings ? GLP_BR_PCH : GLP_BR_DTH;
    parm.gmi_cuts = GLP_ON;
    parm.mir_cuts = parm.cov_cuts = mapped_settings ? GLP_OFF : GLP_ON;
    const char *e = getenv("MPRESS_LS_SET");
    if (e && *e == 'd')
        parm.br_tech = GLP_BR_DTH;
    if (e && *e == 'p')
        parm.br_tech = GLP_BR_PCH;
    if (e && e[1] == 'c')
        parm.mir_cuts = parm.gmi_cuts = parm.cov_cuts = GLP_ON;
    if (e && e[1] == 'g')
        parm.gmi_cuts = GLP_ON;
    if (e && e[1] == 'm')
        parm.mir_cuts = GLP_ON;
    parm.bt_tech = GLP_BT_BLB;
    parm.tol_int = 1e-10;
    parm.cb_func = sub_callback;
    parm.cb_info = &cb;
    glp_intopt(cp, &parm);
    *used = cb.nodes;
    int st = glp_mip_status(cp);
    if (st == GLP_OPT || st == GLP_FEAS) {
        double *y = malloc(sizeof(double) * (size_t)(n + 1));
        if (y) {
            y[0] = 0;
            for (int j = 1; j <= n; j++)
                y[j] = glp_mip_col_val(cp, j);
            v = complete_vector(lp, y);
            free(y);
        }
    }
out:
    free(ind);
    free(val);
    glp_delete_prob(cp);
    return v;
}

double *ilp_local_search(glp_prob *lp, const struct inst *in, const struct cols *c,
                         const double *start, const struct ilp_ls_budget *bud,
                         struct ilp_ls_stats *st)
{
    const int N = in->N, n = glp_get_num_cols(lp);
    memset(st, 0, sizeof(*st));
    if (N < 2 || !start)
        return NULL;
    double *best = malloc(sizeof(double) * (size_t)(n + 1));
    if (!best)
        return NULL;
    memcpy(best, start, sizeof(double) * (size_t)(n + 1));
    double zbest = objective_of(lp, best);
    st->start = zbest;
    int u[MPRESS_MAX_GPUS], improved = 0;
    partition_of(in, c, best, u);
    long left = bud->nodes, used;
    /* The warm start's own partition first, from the warm start. */
    double *v = solve_restricted(lp, in, c, u, best, best, zbest, bud->first_nodes, in->mapped,
                                 &used);
    left -= used;
    st->solves++;
    if (v) {
        free(best);
        best = v;
        zbest = objective_of(lp, best);
        improved = 1;
    }
    /* Then one boundary by one block at a time, first improvement, until a whole round of
     * moves finds nothing or the budget is spent. */
    for (int round = 0, moved = 1; moved && round < bud->rounds && left > 0; round++) {
        moved = 0;
        for (int k = 0; k + 1 < N && left > 0; k++)
            for (int d = -1; d <= 1 && left > 0; d += 2) {
                int t[MPRESS_MAX_GPUS];
                memcpy(t, u, sizeof(t));
                t[k] += d;
                if (!partition_ok(in, t))
                    continue;
                long lim = bud->move_nodes < left ? bud->move_nodes : left;
                v = solve_restricted(lp, in, c, t, best, NULL, zbest, lim, in->mapped, &used);
                left -= used > 0 ? used : 1;
                st->solves++;
                if (!v)
                    continue;
                double z = objective_of(lp, v);
                if (z < zbest * (1 - 1e-9)) {
                    free(best);
                    best = v;
                    zbest = z;
                    memcpy(u, t, sizeof(u));
                    improved = moved = 1;
                    st->moves++;
                } else {
                    free(v);
                }
            }
        st->rounds = round + 1;
    }
    st->nodes = bud->nodes - left;
    st->found = zbest;
    if (!improved) {
        free(best);
        return NULL;
    }
    return best;
}
