/* Solving the planner's MILP with GLPK: the relaxation, branch and bound from the warm start
 * within the node and gap limits, and the status, bound and gap of the answer (ilp_extract.c
 * maps its solution back to an assignment). */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ilp_internal.h"

/* ---- GLPK wrapping ------------------------------------------------------------------- */

struct glpk_guard {
    jmp_buf jump;
};

static void on_glpk_error(void *info)
{
    struct glpk_guard *g = info;
    longjmp(g->jump, 1);
}

static int on_glpk_term(void *info, const char *s)
{
    (void)info;
    (void)s;
    return 1; /* swallow: the library never prints */
}

/* ---- branch and bound ---------------------------------------------------------------- */

struct cb_ctx {
    const struct mpress_plan_options *o;
    double bound;       /* best bound seen, MILP units (seconds) */
    double incumbent;
    long nodes;
    int stopped_by_nodes;
    double *heur;       /* a warm-start solution (1-based column values), or NULL */
    int heur_given;     /* heur has been offered to GLPK */
    unsigned char *first; /* [column]: rank of the columns branched on first (0: none) */
    int n_cols;
    long first_nodes;     /* ... within the first first_nodes nodes of the tree */
    long cap;             /* > 0: branch and bound's node limit instead of o's */
    int first_short;      /* the first of three searches: it may give up at ILP_FIRST_LOOK */
    atomic_long *work; /* a subtree of the certificate search (ilp_cutoff.c): the nodes of */
    long work_limit;   /* ... all subtrees, counted as they come; it stops past work_limit */
    long counted;      /* ... its own nodes counted in *work so far */
};

/* Branching, within the first half of the node limit: a partition column (w, f: how many
 * blocks of each run the slots take) while one is fractional, the most fractional first (the
 * lowest column on a tie), GLPK's choice (pseudo cost or Driebeck-Tomlin) once the partition
 * is integral; after that half, GLPK's choice everywhere. Where ilp_host_first holds, the
 * optimizer placement (h_k) comes before the partition in the same way: the lowest rank of
 * c->first with a fractional column, then the most fractional of that rank. The relaxation balances fractional
 * layers across the stages, and once the layer counts are integers the rest (action counts,
 * D2D bytes, optimizer placement) is nearly integral on its own, so branching on the partition
 * first raises the bound where branching on an action count splits nodes that differ by one
 * tensor. GLPK's own branching in the second half is what finds integral plans past the
 * memory wall: with the partition first throughout, gpt-20b on 16 GPUs of dgx2 at 64
 * micro-batches kept its 29.64 s start, with the switch it finds 20.35 s (docs/benchmarks.md,
 * "Branching on the partition first"). Deterministic: it reads only node counts and the
 * node's LP solution. */
int ilp_first_column(glp_prob *lp, glp_tree *tree, const unsigned char *first, int unranked)
{
    int n = glp_get_num_cols(lp), best = 0, best_rank = 0;
    double best_frac = 0;
    for (int j = 1; j <= n; j++) {
        int rank = first && first[j] ? first[j] : unranked ? UCHAR_MAX + 1 : 0;
        if (!rank)
            continue;
        double v = glp_get_col_prim(lp, j);
        double frac = fmin(v - floor(v), ceil(v) - v);
        if (tree ? !glp_ios_can_branch(tree, j)
                 : glp_get_col_kind(lp, j) == GLP_CV || frac < 1e-9)
            continue;
        if (!best || rank < best_rank || (rank == best_rank && frac > best_frac + 1e-12)) {
            best = j;
            best_frac = frac;
            best_rank = rank;
        }
    }
    return best;
}

static void branch_partition_first(glp_tree *tree, const struct cb_ctx *c)
{
    int best = ilp_first_column(glp_ios_get_prob(tree), tree, c->first, 0);
    if (best)
        glp_ios_branch_upon(tree, best, GLP_NO_BRNCH);
}

/* The columns branched on first, ranked in a [column] array (calloc'd; NULL when memory
 * runs out, and branching is then GLPK's alone): the partition's 1, or, where ilp_host_first
 * holds, the optimizer placement's 1 and the partition's 2; where ilp_lm_on holds, the
 * most-blocks columns 1 and the others ranked one later; 0 for the rest. */
static unsigned char *partition_columns(const struct inst *in, const struct cols *c, int n_cols)
{
    unsigned char *first = calloc((size_t)n_cols + 1, 1);
    if (!first)
        return NULL;
    for (int k = 0; k < in->N; k++)
        for (int r = 0; r < in->NR; r++) {
            int w = c->w[IX2(k, r, in->NR)], f = c->f[IX2(k, r, in->NR)];
            if (w > 0)
                first[w] = 1;
            if (f > 0)
                first[f] = 1;
        }
    if (ilp_host_first(in)) {
        for (int j = 1; j <= n_cols; j++)
            first[j] *= 2;
        for (int k = 0; k < in->N; k++)
            if (c->h[k] > 0)
                first[c->h[k]] = 1;
    }
    if (in->sock_free) {
        for (int j = 1; j <= n_cols; j++)
            first[j] += first[j] ? 1 : 0;
        for (int k = 0; k < in->N * in->n_sockets; k++)
            if (c->sk[k] > 0)
                first[c->sk[k]] = 1;
    }
    if (ilp_lm_on(in)) {
        for (int j = 1; j <= n_cols; j++)
            first[j] += first[j] ? 1 : 0;
        for (int r = 0; r < in->NR; r++)
            if (c->lm[r] > 0)
                first[c->lm[r]] = 1;
    }
    return first;
}

static void ilp_callback(glp_tree *tree, void *info)
{
    struct cb_ctx *c = info;
    int reason = glp_ios_reason(tree);
    if (reason == GLP_IHEUR && c->heur && !c->heur_given) {
        glp_ios_heur_sol(tree, c->heur);
        c->heur_given = 1;
        return;
    }
    if (reason != GLP_ISELECT && reason != GLP_IBINGO && reason != GLP_IBRANCH)
        return;
    int a_cnt, n_cnt, t_cnt;
    glp_ios_tree_size(tree, &a_cnt, &n_cnt, &t_cnt);
    if (reason == GLP_IBRANCH && c->first && t_cnt < c->first_nodes)
        branch_partition_first(tree, c);
    c->nodes = t_cnt;
    int best = glp_ios_best_node(tree);
    if (best)
        c->bound = glp_ios_node_bound(tree, best);
    glp_prob *lp = glp_ios_get_prob(tree);
    int have = glp_mip_status(lp) == GLP_FEAS || glp_mip_status(lp) == GLP_OPT;
    double inc = have ? glp_mip_obj_val(lp) : -1;
    if (c->o->progress && (reason == GLP_IBINGO || (t_cnt % 200) == 0))
        c->o->progress(c->o->progress_ctx, inc, c->bound, have ? glp_ios_mip_gap(tree) : 1.0);
    c->incumbent = inc;
    /* The first of three searches gives up early where it cannot close the gap: past
     * ILP_FIRST_LOOK nodes with a gap above ILP_FIRST_FAR, its plan is only the next search's
     * start (plan_first_search). */
    if (c->work) {
        long all = atomic_fetch_add(c->work, t_cnt - c->counted) + (t_cnt - c->counted);
        c->counted = t_cnt;
        if (all > c->work_limit) {
            glp_ios_terminate(tree);
            return;
        }
    }
    if (c->first_short && reason == GLP_ISELECT && t_cnt >= ILP_FIRST_LOOK && have &&
        glp_ios_mip_gap(tree) > ILP_FIRST_FAR) {
        c->stopped_by_nodes = 1;
        glp_ios_terminate(tree);
        return;
    }
    /* The root's heuristic call, which offers the warm start, comes after its selection: a
     * limit of one node still ends with the warm start as the incumbent. */
    long lim = c->cap > 0 ? c->cap : c->o->node_limit;
    if (lim > 0 && t_cnt >= lim && (!c->heur || c->heur_given || t_cnt > lim)) {
        c->stopped_by_nodes = 1;
        glp_ios_terminate(tree);
    }
}

/* ---- the solve ----------------------------------------------------------------------- */

struct solve {
    struct model m;
    struct cols cols;
    struct sym sym;
    struct cb_ctx cb;
    glp_prob *orig;     /* the problem before branch and bound, for the local search */
    double *layout;     /* the warm start's partition and mapping columns, or NULL */
    const struct mpress_assignment *guide; /* ILP_MAP_SEARCH: whose partition it searches on */
    double *map_start;  /* ILP_MAP_SEARCH: a plan on the mapping map_fix chose, or NULL */
    long map_nodes;     /* ... and the nodes its relax and fix took */
    int attempt;        /* 0: the measured settings; 1: after GLPK failed inside on them */
    int found_start;    /* the start is ilp_warm_find's (no baseline fits), not the caller's */
    double cutoff;      /* > 0: ilp_plan_cutoff's search, whether a plan is faster than this */
};

/* Branch and bound from the solved relaxation. The settings were measured on the planner
 * benchmark (docs/benchmarks.md, "Solver settings"). With the mapping decided (dgx1):
 * pseudo-cost branching without cuts. No other GLPK setting (cuts, preprocessing,
 * backtracking, heuristics) helped across instances: each one that saved nodes on one case
 * cost them on a case perturbed by rounding. With the mapping fixed (NVSwitch):
 * Driebeck-Tomlin branching with MIR, Gomory and cover cuts; Gomory and cover cuts together
 * narrow most node-limited gaps (gpt-20b on 16 GPUs: 21 % -> 17 %), neither does alone. */
static int intopt_on(glp_prob *lp, struct cb_ctx *cb, int cut, int attempt, const struct inst *in,
                     const struct mpress_plan_options *o)
{
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_OFF;
    parm.mip_gap = o->mip_gap;
    if (cut) {
        /* Without GLPK's cuts: with them about as many nodes, up to three times as long
         * (docs/benchmarks.md, "The certificate search"). */
        parm.br_tech = GLP_BR_DTH;
    } else if (in->mapped && attempt == 0) {
        parm.br_tech = GLP_BR_PCH;
    } else if (in->mapped) {
        /* GLPK's pseudo-cost branching can fail inside (glpios09.c asserts 'dx != 0.0' when a
         * trial dual simplex step on a near-degenerate relaxation moves nothing: small models
         * on dgx1 at some PCIe bandwidths); the retry branches by Driebeck-Tomlin, which
         * needs no trial steps. */
        parm.br_tech = GLP_BR_DTH;
    } else {
        parm.br_tech = GLP_BR_DTH;
        parm.mir_cuts = GLP_ON;
        parm.gmi_cuts = GLP_ON;
        parm.cov_cuts = GLP_ON;
    }
    parm.bt_tech = GLP_BT_BLB;
    /* Big-M rows turn integer tolerance into bytes: 1e-5 x 1 TB would be 10 MB. */
    parm.tol_int = 1e-10;
    parm.tm_lim = o->time_limit_s > 0 ? (int)fmin(o->time_limit_s * 1000.0, 2e9) : INT32_MAX;
    parm.cb_func = ilp_callback;
    parm.cb_info = cb;
    return glp_intopt(lp, &parm);
}

static int intopt(struct solve *sv, const struct inst *in, const struct mpress_plan_options *o)
{
    return intopt_on(sv->m.lp, &sv->cb, sv->cutoff > 0, sv->attempt, in, o);
}

/* The status, objective, bound and gap of a finished glp_intopt that has a solution. */
static void solve_stats(const struct solve *sv, const struct mpress_plan_options *o, int ret,
                        int status, struct mpress_plan_solver *stats)
{
    stats->objective = glp_mip_obj_val(sv->m.lp);
    if (ret == 0 && status == GLP_OPT) {
        snprintf(stats->status, sizeof(stats->status), "optimal");
        stats->bound = stats->objective;
    } else {
        snprintf(stats->status, sizeof(stats->status), "%s",
                 ret == GLP_EMIPGAP  ? "gap_reached"
                 : ret == GLP_ETMLIM ? "time_limit"
                 : sv->cb.stopped_by_nodes ? "node_limit"
                                       : "feasible");
        stats->bound = sv->cb.bound <= stats->objective ? sv->cb.bound : stats->objective;
        /* Stopping at the gap, GLPK has proved a bound within mip_gap of the incumbent; the
         * last bound the callback saw may be older. */
        if (ret == GLP_EMIPGAP && stats->bound < stats->objective * (1 - o->mip_gap))
            stats->bound = stats->objective * (1 - o->mip_gap);
    }
    stats->gap = stats->objective > 0 ? (stats->objective - stats->bound) / stats->objective : 0;
    if (stats->gap < 0)
        stats->gap = 0;
    /* The bound set just above gives back mip_gap only up to rounding (on gpt-20b on dgx2-16
     * a hair above it), and "gap_reached" means within it. */
    if (ret == GLP_EMIPGAP && stats->gap > o->mip_gap)
        stats->gap = o->mip_gap;
    stats->nodes = sv->cb.nodes;
}

/* Solves the LP relaxation of lp (already scaled) to optimality; returns GLPK's status of the
 * last attempt (GLP_OPT on success). The simplex on the scaled problem is tried first. When it
 * ends anywhere but at an optimum (on some instances, after glp_scale_prob, it declares the
 * relaxation infeasible although the unscaled one solves and a warm start satisfies every
 * row), the problem is unscaled, started from the standard basis and solved again by the
 * primal then the dual simplex, and then by the exact (rational) simplex, whose verdict is
 * about the rows as stored rather than as rounding in the floating-point simplex sees them.
 * Every attempt is deterministic. */
int ilp_root_relaxation(glp_prob *lp)
{
    glp_smcp sparm;
    glp_init_smcp(&sparm);
    sparm.msg_lev = GLP_MSG_OFF;
    /* A bound on the iterations of each attempt: with op times of 1e6 s and more beside bytes
     * in GB the scaled simplex cycles without end (gpt-tiny with its times x 1e12). The bound
     * is far above what any instance of the benchmark needs, and deterministic. */
    sparm.it_lim = 50 * (glp_get_num_rows(lp) + glp_get_num_cols(lp)) + 10000;
    int ret = glp_simplex(lp, &sparm);
    if (ret == 0 && glp_get_status(lp) == GLP_OPT)
        return GLP_OPT;
    glp_unscale_prob(lp);
    const int meth[2] = {GLP_PRIMAL, GLP_DUALP};
    for (int i = 0; i < 2; i++) {
        glp_std_basis(lp);
        sparm.meth = meth[i];
        ret = glp_simplex(lp, &sparm);
        if (ret == 0 && glp_get_status(lp) == GLP_OPT)
            return GLP_OPT;
    }
    glp_std_basis(lp);
    sparm.meth = GLP_PRIMAL;
    ret = glp_exact(lp, &sparm);
    return ret == 0 ? glp_get_status(lp) : GLP_UNDEF;
}

/* The answer when GLPK ends without a solution of its own although the warm start fits (a
 * limit reached before the root's heuristic call, a relaxation the simplex misjudges, or a
 * warm start the MILP's margins refuse): the warm start itself, its predicted time from the
 * evaluator, and the best bound known (0 when none is). */
static int answer_warm(const struct mpress_profile *p, const struct mpress_topology *topo,
                       const struct mpress_plan_options *o, const struct solve *sv,
                       const struct mpress_assignment *warm, double bound, const char *status,
                       struct mpress_assignment *out, struct mpress_plan_solver *stats,
                       struct mpress_error *err)
{
    struct mpress_plan_eval ev;
    int rc = mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, warm, &ev, err);
    if (rc)
        return rc;
    if (!ev.fits)
        return mpress_error_set(err, MPRESS_ESYSTEM, "the warm start does not fit");
    plan_assignment_copy(out, warm);
    snprintf(stats->status, sizeof(stats->status), "%s", status);
    stats->objective = ev.iteration_s;
    stats->bound = bound > 0 && bound <= ev.iteration_s ? bound : 0;
    /* An optimum above the start's evaluated time is a numerical artefact, not a proof. */
    if (stats->bound == 0 && strcmp(status, "optimal") == 0)
        snprintf(stats->status, sizeof(stats->status), "feasible");
    stats->gap = ev.iteration_s > 0 ? (ev.iteration_s - stats->bound) / ev.iteration_s : 0;
    stats->nodes = sv->cb.nodes;
    return 0;
}

/* Nothing fits: names the GPU (or the host) that is short, and by how much, under the most
 * memory-saving actions (ilp_most_saving). */
static int explain_infeasible(const struct mpress_profile *p, const struct mpress_topology *topo,
                              const struct mpress_plan_options *o, struct mpress_error *err)
{
    struct mpress_assignment a = {0};
    struct mpress_plan_eval ev;
    int host = 0;
    if (ilp_most_saving(p, topo, o, &a, &ev, &host) || ev.fits) {
        mpress_assignment_finish(&a);
        return mpress_error_set(err, MPRESS_EINFEASIBLE, "no plan fits in memory");
    }
    mpress_assignment_finish(&a);
    const char *how = host ? "with every saved tensor recomputed and every optimizer on the host"
                           : "with every saved tensor recomputed";
    char over[32], cap[32];
    if (ev.short_gpu >= 0)
        return mpress_error_set(err, MPRESS_EINFEASIBLE,
                                "no plan fits: %s (even partition), GPU %d is still short by "
                                "%llu bytes (%s over its %s)",
                                how, ev.short_gpu, (unsigned long long)ev.short_bytes,
                                mpress_format_bytes(ev.short_bytes, over, sizeof(over)),
                                mpress_format_bytes(ev.gpus[ev.short_gpu].capacity, cap,
                                                    sizeof(cap)));
    if (ev.host_short > 0)
        return mpress_error_set(err, MPRESS_EINFEASIBLE,
                                "no plan fits: %s (even partition), host memory is still short "
                                "by %llu bytes",
                                how, (unsigned long long)ev.host_short);
    return mpress_error_set(err, MPRESS_EINFEASIBLE,
                            "no plan fits: %s (even partition), GPU %d evicts more than its "
                            "links drain during one forward (backlog %llu bytes)",
                            how, ev.drain_gpu, (unsigned long long)ev.drain_short);
}

/* A proof that nothing fits, from memory alone: every stage holds its weights (one version at
 * least), its gradients, its optimizer states unless they may go to the host, and one
 * micro-batch's saved tensors (the backward's working set: recomputing or swapping frees only
 * the other micro-batches' copies), wherever the stages sit, and D2D only moves bytes between
 * GPUs. When that exceeds all the GPUs' memory less their reserves, no plan fits. The MILP's
 * big-M memory rows cannot see this in their relaxation, so branch and bound would stop at its
 * node limit without an answer. */
static int memory_floor_exceeds(const struct inst *in, const struct mpress_topology *topo)
{
    double need = 0, have = 0;
    for (int b = 0; b < in->B; b++)
        need += in->blk[b].p + in->blk[b].g + in->blk[b].a + (in->host_opt ? 0 : in->blk[b].o);
    for (int g = 0; g < topo->n_gpus; g++)
        have += ((double)topo->gpus[g].memory_bytes - (double)topo->gpus[g].reserve_bytes) / GB;
    return need > have;
}

/* Runs the local search from start within bud and, when it finds a plan faster than stats'
 * objective, makes it *x with its objective and gap in stats (the bound stays the search's). */
static void search_from(struct solve *sv, const struct inst *in, const double *start,
                        const struct ilp_ls_budget *bud, double **x,
                        struct mpress_plan_solver *stats)
{
    struct ilp_ls_stats ls;
    double *better = ilp_local_search(sv->orig, in, &sv->cols, start, stats->objective, bud, &ls);
    stats->nodes += ls.nodes;
    if (!better || ls.found >= stats->objective * (1 - 1e-9)) {
        free(better);
        return;
    }
    free(*x);
    *x = better;
    stats->objective = ls.found;
    if (stats->bound > stats->objective)
        stats->bound = stats->objective;
    stats->gap = (stats->objective - stats->bound) / stats->objective;
}

/* The local search's budget from a start after branch and bound (L the node limit, at most
 * 5000): 3/5 L in all, 2/5 L on its own partition and mapping, L/5 per box of 1, then 2,
 * blocks, L/10 with the mapping free. */
static struct ilp_ls_budget warm_budget(long lim)
{
    return (struct ilp_ls_budget){.nodes = lim * 3 / 5, .first_nodes = lim * 2 / 5,
                                  .box_nodes = lim / 5, .box_delta = 1, .box_max = 2,
                                  .map_nodes = lim / 10, .box_rounds = 8};
}

/* The solution of the finished search (1-based column values, malloc'd; NULL when memory runs
 * out). When the search stopped before reaching the gap limit, a local search (ilp_lns.c), on
 * a copy of the problem made before the search, from the warm start (its solution vector, or
 * when the MILP's rows refused it, its partition and mapping) within 3/5 of the node limit L
 * (L at most 5000): up to 2/5 L on its own partition and mapping, then up to L/5 per search
 * with every stage boundary within 1, then 2, blocks of the best plan's, and on direct fabrics
 * up to L/10 with the best partition and the mapping free; then, when branch and bound moved
 * away from the warm start, from its plan within 2/5 L in the same proportions. A faster plan
 * replaces the solution. It runs after branch and bound rather than before so that the search,
 * and with it every plan that closes the gap, stays what it was without it, and the answer is
 * never slower than branch and bound's (docs/benchmarks.md, "Planner"). */
static double *solution(struct solve *sv, const struct inst *in,
                        const struct mpress_plan_options *o, struct mpress_plan_solver *stats)
{
    glp_prob *lp = sv->m.lp;
    int n = glp_get_num_cols(lp);
    /* Without a solution of GLPK's (the answer so far is the warm start), x stays NULL unless
     * the local search finds a faster plan. */
    int have = glp_mip_status(lp) == GLP_FEAS || glp_mip_status(lp) == GLP_OPT;
    double *x = have ? malloc(sizeof(double) * (size_t)(n + 1)) : NULL;
    if (have && !x)
        return NULL;
    for (int j = 0; have && j <= n; j++)
        x[j] = j ? glp_mip_col_val(lp, j) : 0;
    long lim = o->node_limit > 0 && o->node_limit < 5000 ? o->node_limit : 5000;
    /* The first of three searches that stopped at its node limit: the third replaces the
     * mapping this search would keep (plan_first_search). A bound-only search's plans are the
     * relaxed server's: only its bound counts, and its plan is at most the mapping search's
     * guide (ilp_relax.c); on gpt-20b dgx1 at 32 micro-batches and gpt3-13b dgx1 at 1,000 nodes
     * the answers are the same without this search after it, 1.5 s sooner on the first
     * (docs/benchmarks.md, "No local search after the bound's search"). */
    int followed = ((in->branch & ILP_FIRST_SHORT) && strcmp(stats->status, "node_limit") == 0) ||
                   (in->branch & ILP_BOUND_ONLY);
    if (!sv->orig || followed || strcmp(stats->status, "gap_reached") == 0 ||
        strcmp(stats->status, "optimal") == 0 || stats->gap <= o->mip_gap || lim < 5)
        return x;
    double *from = sv->cb.heur ? sv->cb.heur : sv->layout;
    int moved = have;
    if (have && sv->cb.heur)
        moved = stats->objective < ilp_objective(lp, sv->cb.heur) * (1 - 1e-9);
    struct ilp_ls_budget warm = warm_budget(lim);
    struct ilp_ls_budget mine = {.nodes = lim * 2 / 5, .first_nodes = lim / 5,
                                 .box_nodes = lim / 10, .box_delta = 1, .box_max = 2,
                                 .map_nodes = lim / 20, .box_rounds = 8};
    if (from)
        search_from(sv, in, from, &warm, &x, stats);
    if (moved) {
        double *mine_x = malloc(sizeof(double) * (size_t)(n + 1));
        if (mine_x) {
            mine_x[0] = 0;
            for (int j = 1; j <= n; j++)
                mine_x[j] = glp_mip_col_val(lp, j);
            search_from(sv, in, mine_x, &mine, &x, stats);
            free(mine_x);
        }
    }
    /* Nothing above moved from the warm start: the restricted MILP on its partition and
     * mapping once more, depth first. Searching by best local bound can spend its nodes on
     * fractional subproblems without reaching one integer plan: gpt-tiny on 4 emulated
     * devices of 2.2 MB kept its warm start (recompute everything, 12.3 % above the bound)
     * through 2,000 such nodes on the best plans' own partition; depth first finds one 10.5 %
     * faster (test_search). Of the planner matrix only gpt3-13b on dgx1 gets here (its answer
     * is the warm start as the search before branch and bound left it): 9 more nodes, the same
     * plan. */
    if (sv->cb.heur && stats->objective >= ilp_objective(lp, sv->cb.heur) * (1 - 1e-9) &&
        stats->gap > o->mip_gap) {
        struct ilp_ls_budget dive = {.nodes = lim / 5, .first_nodes = lim / 5, .dive = 1};
        search_from(sv, in, sv->cb.heur, &dive, &x, stats);
    }
    return x;
}

/* Before branch and bound, a short local search from the warm start's vector (L/20 nodes on
 * its partition and mapping, L/20 with each stage boundary within one block, L/20 with the
 * mapping free; L the node limit, at most 5000; L/40 each in the first of three searches,
 * ILP_FIRST_SHORT): a faster plan becomes the first incumbent instead. From the default job's
 * polished start (planner.c, polish_mapping) branch and bound then closes the gap in 254
 * nodes in all, against 4,763 without this search (and 380 with L/20 each). None in the
 * mapping search (ILP_MAP_SEARCH): its start is its own relax and fix plan, around which this
 * search found nothing on gpt3-13b and gpt-20b on dgx1 (367 nodes, 1.4 s). Where the cycle
 * gets its floor, then the placement search (ilp_lns.c) within 2L/5 nodes, L/16 a slot of its
 * relax and fix: gpt-20b on dgx2-16 then closes the gap in 1,355 nodes in all, against 20,506
 * (with the most-blocks column; docs/benchmarks.md). Returns the nodes it used. */
static long pre_search(struct solve *sv, const struct inst *in,
                       const struct mpress_plan_options *o)
{
    if (!sv->cb.heur)
        return 0;
    long lim = o->node_limit > 0 && o->node_limit < 5000 ? o->node_limit : 5000;
    /* Nor in the first of three searches from ilp_warm_find's start (no baseline fits): that
     * start is the greedy plan for fewer micro-batches, and the later searches replace its
     * partition and mapping; on gpt-20b on dgx1 at 32 micro-batches this search found nothing
     * in 375 nodes (1.4 s of 9.8 s), the answer the same without it. */
    if (lim < 100 || (in->branch & ILP_MAP_SEARCH) ||
        ((in->branch & ILP_FIRST_SHORT) && sv->found_start))
        return 0;
    long d = in->branch & ILP_FIRST_SHORT ? 40 : 20;
    struct ilp_ls_budget bud = {.nodes = lim * 3 / d, .first_nodes = lim / d,
                                .box_nodes = lim / d, .box_delta = 1, .box_max = 2,
                                .map_nodes = lim / d, .box_rounds = 2};
    double z = ilp_objective(sv->m.lp, sv->cb.heur);
    struct ilp_ls_stats ls;
    double *better = ilp_local_search(sv->orig, in, &sv->cols, sv->cb.heur, z, &bud, &ls);
    if (better && ls.found < z * (1 - 1e-9)) {
        free(sv->cb.heur);
        sv->cb.heur = better;
    } else {
        free(better);
    }
    long pn = 0;
    /* Where the cycle gets its floor (more than ILP_HOST_FIRST_MAX slots of a fixed mapping
     * with host optimizers), the placement search (ilp_lns.c) from the best start so far. */
    if (ilp_floor_on(in) && !(in->branch & ILP_BOUND_ONLY)) {
        struct ilp_ls_stats ps;
        double *pb = ilp_placement_search(sv->orig, in, &sv->cols, sv->cb.heur, lim * 2 / 5,
                                          lim / 16, &ps);
        if (pb && ps.found < ilp_objective(sv->m.lp, sv->cb.heur) * (1 - 1e-9)) {
            free(sv->cb.heur);
            sv->cb.heur = pb;
        } else {
            free(pb);
        }
        pn = ps.nodes;
    }
    return ls.nodes + pn;
}

/* Branch and bound stopped without a plan, no baseline fits, and nothing proved that none
 * does: depth first on the whole MILP within 4 L nodes and L past its first plan (L the node
 * limit, at most 5000), which reaches integer plans where best-bound search spends its nodes
 * on fractional subproblems, then the local search from its best plan (warm_budget). bert-tiny
 * under GPipe on 8 emulated 500 KiB devices at 3e8 bytes/s has plans (18,219 nodes of
 * best-bound search find one) but none within 5,000, and the planner exited 4. Nodes only
 * decide, so the answer stays deterministic; the bound is branch and bound's. A tree searched
 * to its end without a plan proves that none fits. */
static int first_plan(struct solve *sv, const struct mpress_profile *p,
                      const struct mpress_topology *topo, const struct mpress_plan_options *o,
                      const struct inst *in, int ret, double root_bound, long pre_nodes,
                      struct mpress_assignment *out, struct mpress_plan_solver *stats,
                      struct mpress_error *err)
{
    long lim = o->node_limit > 0 && o->node_limit < 5000 ? o->node_limit : 5000;
    long used = 0;
    int none = 0;
    /* Pseudo-cost branching, except on the retry after GLPK failed inside (intopt): on
     * bert-tiny under GPipe on 8 x 500 KiB it finds the same plan as Driebeck-Tomlin, and on
     * 8 x 550 KiB a plan (0.01903 s, 13,150 nodes) where Driebeck-Tomlin finds none in 20,000
     * (best-bound search: 0.01919 s within 30,000). */
    double *x = sv->orig ? ilp_dive(sv->orig, in, 4 * lim, lim, sv->attempt == 0, &used, &none)
                         : NULL;
    if (!x && none) {
        snprintf(stats->status, sizeof(stats->status), "infeasible");
        return explain_infeasible(p, topo, o, err);
    }
    if (!x)
        return mpress_error_set(err, MPRESS_ESYSTEM,
                                "the solver stopped (%s) before finding any plan or proving "
                                "that none fits (no baseline fits; %ld more nodes depth first "
                                "found none); a larger %s may decide",
                                ret == GLP_ETMLIM ? "time limit" : "node limit", used,
                                ret == GLP_ETMLIM ? "--time-limit" : "--node-limit");
    snprintf(stats->status, sizeof(stats->status), "%s",
             ret == GLP_ETMLIM ? "time_limit" : "node_limit");
    stats->objective = ilp_objective(sv->orig, x);
    double bound = sv->cb.bound > root_bound ? sv->cb.bound : root_bound;
    stats->bound = bound < stats->objective ? bound : stats->objective;
    stats->gap = stats->objective > 0 ? (stats->objective - stats->bound) / stats->objective : 0;
    stats->nodes = sv->cb.nodes + pre_nodes + used;
    if (stats->gap > o->mip_gap && lim >= 5) {
        struct ilp_ls_budget bud = warm_budget(lim);
        double *from = malloc(sizeof(double) * (size_t)(glp_get_num_cols(sv->orig) + 1));
        if (from) {
            memcpy(from, x, sizeof(double) * (size_t)(glp_get_num_cols(sv->orig) + 1));
            search_from(sv, in, from, &bud, &x, stats);
            free(from);
        }
    }
    int xrc = ilp_extract(p, topo, in, &sv->cols, x, out);
    free(x);
    if (xrc)
        return mpress_error_set(err, MPRESS_ESYSTEM, "cannot map the MILP solution back to a plan");
    return 0;
}

/* ILP_MAP_SEARCH: the mapping columns of the problem fixed to the mapping ilp_map_search
 * finds from the guide's partition and mapping, and the start made by relax and fix on the
 * partition it moved to; 1 when the guide gives no partition or no relaxation has an
 * optimum. */
static int map_fix(struct solve *sv, const struct inst *in, const struct mpress_profile *p,
                   const struct mpress_plan_options *o)
{
    double *lay = NULL;
    free(ilp_warm_vector(sv->m.lp, in, &sv->cols, p, sv->guide, &sv->sym, &lay));
    if (!lay)
        return 1;
    int map[MPRESS_MAX_GPUS], hb[MPRESS_MAX_GPUS], u[MPRESS_MAX_GPUS];
    /* As many LP solves as three rounds of exchanges, each pair at N + 1 placements, with
     * their flips (837 on 8 GPUs), within the node limit (at most 5000); the rounds of block
     * moves between them take theirs from the same count. */
    long n = in->N, lim = o->node_limit > 0 && o->node_limit < 5000 ? o->node_limit : 5000;
    long lps = 3 * (n * (n - 1) / 2 * (n + 1) + 3 * n) + n + 1;
    lps = lps < lim ? lps : lim;
    double v = ilp_map_search(sv->m.lp, in, &sv->cols, lay, lps, map, hb, u);
    if (!(v < HUGE_VAL)) {
        free(lay);
        return 1;
    }
    ilp_fix_map(sv->m.lp, in, &sv->cols, map);
    sv->map_start = ilp_map_start(sv->m.lp, in, &sv->cols, lay, u, map, hb, lim / 5,
                                  lim * 2 / 5, &sv->map_nodes);
    free(lay);
    return 0;
}

/* Whether the warm vector's mapping is the one map_fix fixed. */
static int map_agrees(const struct solve *sv, const struct inst *in)
{
    for (int k = 0; k < in->N; k++)
        for (int g = 0; g < in->N; g++) {
            int col = sv->cols.x[IX2(k, g, in->N)];
            if (fabs(sv->cb.heur[col] - glp_get_col_lb(sv->m.lp, col)) > 0.5)
                return 0;
        }
    return 1;
}

/* Builds in's MILP into sv (symmetry rows, the columns branched on first, the first search's
 * node cap) and its size into stats, and writes it where o->dump_lp asks. */
static int build(struct solve *sv, const struct mpress_topology *topo,
                 const struct mpress_plan_options *o, const struct inst *in,
                 struct mpress_plan_solver *stats, struct mpress_error *err)
{
    struct model *m = &sv->m;
    sv->cb.o = o;
    sv->cb.incumbent = -1;
    m->lp = glp_create_prob();
    glp_set_prob_name(m->lp, "mpress_plan");
    glp_set_obj_dir(m->lp, GLP_MIN);
    if (ilp_build(m, in, topo, o->schedule, &sv->cols))
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory while building the MILP");
    ilp_sym_find(topo, &sv->sym);
    if (in->branch & ILP_MAP_SEARCH)
        sv->sym.n = 0; /* the mapping gets fixed, and the start is taken as it is */
    else
        ilp_sym_cut(m, in, &sv->cols, &sv->sym);
    sv->cb.n_cols = glp_get_num_cols(m->lp);
    sv->cb.first = partition_columns(in, &sv->cols, sv->cb.n_cols);
    sv->cb.first_nodes = (o->node_limit > 0 ? o->node_limit : 5000) / 2;
    /* The first of three searches: branch and bound within the node limit N up to 500
     * nodes, a tenth of it past 5000. */
    if ((in->branch & ILP_FIRST_SHORT) && o->node_limit > 500) {
        sv->cb.cap = o->node_limit > 5000 ? o->node_limit / 10 : 500;
        sv->cb.first_short = 1;
    }
    stats->rows = glp_get_num_rows(m->lp);
    stats->cols = glp_get_num_cols(m->lp);
    stats->integer_cols = glp_get_num_int(m->lp);
    stats->nonzeros = glp_get_num_nz(m->lp);
    if (o->dump_lp && glp_write_lp(m->lp, NULL, o->dump_lp) != 0)
        return mpress_error_set(err, MPRESS_ESYSTEM, "cannot write '%s'", o->dump_lp);
    return 0;
}

/* Builds, solves and extracts inside GLPK's error guard (set by the caller). warm: the warm
 * start, or NULL. */
static int solve(struct solve *sv, const struct mpress_profile *p,
                 const struct mpress_topology *topo, const struct mpress_plan_options *o,
                 const struct inst *in, const struct mpress_assignment *warm,
                 struct mpress_assignment *out, struct mpress_plan_solver *stats,
                 struct mpress_error *err)
{
    struct model *m = &sv->m;
    int brc = build(sv, topo, o, in, stats, err);
    if (brc)
        return brc;
    glp_scale_prob(m->lp, GLP_SF_AUTO);
    if ((in->branch & ILP_MAP_SEARCH) && map_fix(sv, in, p, o))
        return answer_warm(p, topo, o, sv, warm, 0, "feasible", out, stats, err);
    if (warm)
        sv->cb.heur = ilp_warm_vector(m->lp, in, &sv->cols, p, warm, &sv->sym, &sv->layout);
    if (sv->cb.heur && (in->branch & ILP_MAP_SEARCH) && !map_agrees(sv, in)) {
        free(sv->cb.heur); /* the start runs on another mapping */
        sv->cb.heur = NULL;
    }
    if (sv->map_start && (!sv->cb.heur || ilp_objective(m->lp, sv->map_start) <
                                              ilp_objective(m->lp, sv->cb.heur))) {
        free(sv->cb.heur);
        sv->cb.heur = sv->map_start;
        sv->map_start = NULL;
    }
    /* The relaxation first, so that glp_intopt can run without its presolver and accept the
     * warm start in the problem's own columns. */
    int sret = ilp_root_relaxation(m->lp);
    if (sret != GLP_OPT && warm)
        return answer_warm(p, topo, o, sv, warm, 0, "feasible", out, stats, err);
    if (sret == GLP_NOFEAS) {
        snprintf(stats->status, sizeof(stats->status), "infeasible");
        return explain_infeasible(p, topo, o, err);
    }
    if (sret != GLP_OPT)
        return mpress_error_set(err, MPRESS_ESYSTEM, "GLPK glp_simplex failed (status %d)", sret);
    double root_bound = glp_get_obj_val(m->lp);
    /* The problem as the local search after branch and bound needs it (the search adds cuts). */
    sv->orig = glp_create_prob();
    glp_copy_prob(sv->orig, m->lp, GLP_OFF);
    long pre_nodes = pre_search(sv, in, o) + sv->map_nodes;
    int ret = intopt(sv, in, o);
    int status = glp_mip_status(m->lp);
    if (status != GLP_OPT && status != GLP_FEAS && warm) {
        /* GLPK's bound is only a bound when it has not declared the MILP infeasible. */
        double bound = status == GLP_NOFEAS || ret == GLP_ENOPFS ? 0
                       : sv->cb.bound > root_bound             ? sv->cb.bound
                                                               : root_bound;
        int rc = answer_warm(p, topo, o, sv, warm, bound,
                             ret == GLP_ETMLIM          ? "time_limit"
                             : sv->cb.stopped_by_nodes ? "node_limit"
                                                       : "feasible",
                             out, stats, err);
        stats->nodes += pre_nodes;
        if (rc || !sv->layout || status == GLP_NOFEAS || ret == GLP_ENOPFS)
            return rc;
        /* The MILP's rows refused the warm start and branch and bound found nothing: the local
         * search from its partition and mapping, to beat its evaluated time. */
        double *x = solution(sv, in, o, stats);
        if (x && ilp_extract(p, topo, in, &sv->cols, x, out))
            rc = mpress_error_set(err, MPRESS_ESYSTEM,
                                  "cannot map the MILP solution back to a plan");
        free(x);
        return rc;
    }
    if (ret == GLP_ENOPFS || status == GLP_NOFEAS) {
        snprintf(stats->status, sizeof(stats->status), "infeasible");
        return explain_infeasible(p, topo, o, err);
    }
    if (ret != 0 && ret != GLP_ETMLIM && ret != GLP_ESTOP && ret != GLP_EMIPGAP)
        return mpress_error_set(err, MPRESS_ESYSTEM, "GLPK glp_intopt failed (code %d)", ret);
    if (status != GLP_OPT && status != GLP_FEAS)
        return first_plan(sv, p, topo, o, in, ret, root_bound, pre_nodes, out, stats, err);
    solve_stats(sv, o, ret, status, stats);
    stats->nodes += pre_nodes;
    double *x = solution(sv, in, o, stats);
    if (!x)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    int xrc = ilp_extract(p, topo, in, &sv->cols, x, out);
    free(x);
    if (xrc)
        return mpress_error_set(err, MPRESS_ESYSTEM, "cannot map the MILP solution back to a plan");
    /* A warm start GLPK never saw (its vector did not pass the MILP's rows, e.g. within the
     * memory margin) may still beat the MILP's plan, and so may one it saw when GLPK's
     * feasibility tolerance (1e-7 on a row) let the plan's time fall short of its evaluated
     * time (an iteration of microseconds): the answer is never slower than the warm start. */
    if (warm) {
        struct mpress_plan_eval ev, got;
        if (mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, warm, &ev, err) == 0 &&
            mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, out, &got, err) == 0 &&
            ev.fits && ev.iteration_s < fmax(got.iteration_s, stats->objective) * (1 - 1e-9)) {
            char st[sizeof(stats->status)];
            snprintf(st, sizeof(st), "%s", stats->status);
            return answer_warm(p, topo, o, sv, warm, stats->bound, st, out, stats, err);
        }
    }
    return 0;
}

/* ilp_plan_cutoff's search: in's MILP with the row "iteration time <= cutoff", branch and
 * bound without a start. A tree searched to its end without a plan proves that no plan of
 * in's server is faster than the cutoff (bound: the cutoff); an optimum below it is the bound
 * itself; at the node limit the bound is the least of the open nodes' (each at most the
 * cutoff, so every plan the row leaves out is no faster). No plan comes back: stats holds the
 * bound and the nodes. */
static int solve_cutoff(struct solve *sv, const struct mpress_topology *topo,
                        const struct mpress_plan_options *o, const struct inst *in,
                        struct mpress_plan_solver *stats, struct mpress_error *err)
{
    int rc = build(sv, topo, o, in, stats, err);
    if (rc)
        return rc;
    /* The sockets, then the partition, branched on first throughout: with the sockets first
     * only in the first half of 2,500 nodes, gpt-20b on dgx1 at 32 micro-batches stopped at
     * 3.05 % where it otherwise proves 1 % in 2,255. */
    sv->cb.first_nodes = LONG_MAX;
    glp_prob *lp = sv->m.lp;
    if (ilp_cutoff_row(lp, sv->cutoff))
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    glp_scale_prob(lp, GLP_SF_AUTO);
    int sret = ilp_root_relaxation(lp);
    stats->nodes = 0;
    if (sret == GLP_NOFEAS) {
        snprintf(stats->status, sizeof(stats->status), "cut_off");
        stats->bound = sv->cutoff;
        return 0;
    }
    if (sret != GLP_OPT)
        return mpress_error_set(err, MPRESS_ESYSTEM, "GLPK glp_simplex failed (status %d)", sret);
    double root_bound = glp_get_obj_val(lp);
    /* Past ILP_CUT_SPLIT_MIN nodes, subtrees searched side by side (ilp_cutoff.c). */
    if (o->node_limit <= 0 || o->node_limit >= ILP_CUT_SPLIT_MIN) {
        int src = ilp_cutoff_split(lp, in, sv->cb.first, sv->cutoff, o, stats);
        if (src < 0)
            return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        if (src == 0)
            return 0;
    }
    /* stats->nodes: those of subtrees that passed the node limit together, else 0 */
    long before = stats->nodes;
    int ret = intopt(sv, in, o);
    stats->nodes = before + sv->cb.nodes;
    if (ret != 0 && ret != GLP_ETMLIM && ret != GLP_ESTOP && ret != GLP_EMIPGAP)
        return mpress_error_set(err, MPRESS_ESYSTEM, "GLPK glp_intopt failed (code %d)", ret);
    int kind = ilp_cutoff_outcome(lp, ret, root_bound, sv->cb.bound, sv->cutoff, o->mip_gap,
                              &stats->bound);
    snprintf(stats->status, sizeof(stats->status), "%s", ilp_cut_status[kind]);
    return 0;
}

/* A subtree's branch and bound (lp with the cutoff row) as the certificate search runs it. */
int ilp_cutoff_bb(glp_prob *lp, const struct inst *in, const unsigned char *first, double cutoff,
                  const struct mpress_plan_options *o, struct ilp_leaf_run *r)
{
    struct mpress_plan_options lo = *o;
    lo.progress = NULL; /* the caller reports the subtrees' bound */
    lo.node_limit = 0;
    lo.time_limit_s = r->tm_lim_s;
    struct cb_ctx cb = {.o = &lo, .incumbent = -1, .first = (unsigned char *)first,
                        .n_cols = glp_get_num_cols(lp), .first_nodes = LONG_MAX,
                        .work = r->work, .work_limit = r->work_limit};
    r->nodes = 0;
    if (ilp_root_relaxation(lp) != GLP_OPT)
        return -1;
    double root_bound = glp_get_obj_val(lp);
    int ret = intopt_on(lp, &cb, 1, 0, in, &lo);
    if (ret != 0 && ret != GLP_ETMLIM && ret != GLP_ESTOP && ret != GLP_EMIPGAP)
        return -1;
    r->nodes = cb.nodes;
    r->kind = ilp_cutoff_outcome(lp, ret, root_bound, cb.bound, cutoff, o->mip_gap, &r->bound);
    return 0;
}

/* Frees what one solve built (GLPK's problem unless its environment is gone) and clears it. */
static void solve_reset(struct solve *sv)
{
    if (sv->m.lp)
        glp_delete_prob(sv->m.lp);
    ilp_model_finish(&sv->m);
    ilp_cols_free(&sv->cols);
    free(sv->sym.perm);
    free(sv->cb.heur);
    free(sv->cb.first);
    free(sv->layout);
    free(sv->map_start);
    if (sv->orig)
        glp_delete_prob(sv->orig);
    memset(sv, 0, sizeof(*sv));
}

/* ilp_plan_run, and with cutoff > 0 ilp_plan_cutoff. */
static int run(const struct mpress_profile *p, const struct mpress_topology *topo,
               const struct mpress_plan_options *o, int branch, double cutoff,
               const struct mpress_assignment *guide, struct mpress_assignment *out,
               struct mpress_plan_solver *stats, struct mpress_error *err)
{
    memset(stats, 0, sizeof(*stats));
    stats->nodes = -1;
    if (p->n_ops < 1)
        return mpress_error_set(err, MPRESS_EINPUT, "the profile has no ops");
    if (topo->n_gpus < 1)
        return mpress_error_set(err, MPRESS_EINPUT, "the topology has no GPUs");
    if (topo->pcie_bytes_per_s <= 0)
        return mpress_error_set(err, MPRESS_EINPUT, "the topology has no PCIe bandwidth");
    struct inst in;
    int rc = ilp_inst_build(p, topo, o, &in, err);
    if (rc)
        return rc;
    in.branch = branch;
    /* The relaxed server with its real sockets (ilp_relax.c): the MILP chooses the sockets. */
    in.n_sockets = topo->n_sockets > 0 ? topo->n_sockets : 1;
    in.sock_free = (branch & ILP_SOCKET_FREE) && !in.mapped && in.host_opt && in.n_sockets > 1;
    for (int g = 0; g < topo->n_gpus; g++)
        in.socket_of[g] = plan_socket(topo, g);
    rc = mpress_assignment_init(out, p, err);
    if (rc) {
        ilp_inst_free(&in);
        return rc;
    }

    /* Without a warm start (no baseline fits) the search starts from a plan that fits if one
     * of the greedy baseline's at fewer micro-batches does (ilp_warm_find). Found before
     * GLPK's guard is set, so that the error path sees it unchanged. */
    struct mpress_assignment found = {0};
    const struct mpress_assignment *warm = cutoff > 0 ? NULL : o->warm_start;
    /* The memory floor is checked first: it is cheap, and where it already proves that nothing
     * fits, the start search (greedy at each smaller micro-batch count, seconds each on large
     * models) cannot find a start. */
    int floor_exceeded = !warm && cutoff <= 0 && memory_floor_exceeds(&in, topo);
    if (!warm && cutoff <= 0 && !floor_exceeded && ilp_warm_find(p, topo, o, &found) == 0)
        warm = &found;

    /* Everything GLPK's error path must still see lives on the heap behind a volatile pointer:
     * locals changed between setjmp and longjmp are indeterminate afterwards. */
    struct solve *volatile sv = calloc(1, sizeof(struct solve));
    struct glpk_guard guard;
    if (!sv) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    glp_term_hook(on_glpk_term, NULL);
    glp_error_hook(on_glpk_error, &guard);
    if (setjmp(guard.jump)) {
        /* GLPK failed inside: its environment is unusable and must be freed whole. The solve
         * is tried once more with other branching (intopt), then the start is the answer. */
        glp_free_env();
        sv->m.lp = NULL;
        sv->orig = NULL;
        int next = sv->attempt + 1;
        solve_reset(sv);
        sv->attempt = next;
        glp_term_hook(on_glpk_term, NULL);
        glp_error_hook(on_glpk_error, &guard);
        if (next > 1 || !in.mapped) {
            if (warm) {
                struct solve fresh = {0};
                rc = answer_warm(p, topo, o, &fresh, warm, 0, "solver_failed", out, stats, err);
            } else {
                rc = mpress_error_set(err, MPRESS_ESYSTEM, "the GLPK solver failed internally");
            }
            goto done;
        }
        sv->guide = guide;
        sv->found_start = warm == &found;
        sv->cutoff = cutoff;
        rc = cutoff > 0 ? solve_cutoff(sv, topo, o, &in, stats, err)
                        : solve(sv, p, topo, o, &in, warm, out, stats, err);
        goto done;
    }
    if (floor_exceeded) {
        snprintf(stats->status, sizeof(stats->status), "infeasible");
        rc = explain_infeasible(p, topo, o, err);
    } else {
        sv->guide = guide;
        sv->found_start = warm == &found;
        sv->cutoff = cutoff;
        rc = cutoff > 0 ? solve_cutoff(sv, topo, o, &in, stats, err)
                        : solve(sv, p, topo, o, &in, warm, out, stats, err);
    }
done:
    if (sv) {
        solve_reset(sv);
        free(sv);
    }
    glp_error_hook(NULL, NULL);
    glp_term_hook(NULL, NULL);
    ilp_inst_free(&in);
    mpress_assignment_finish(&found);
    if (rc)
        mpress_assignment_finish(out);
    return rc;
}

int ilp_plan_run(const struct mpress_profile *p, const struct mpress_topology *topo,
                 const struct mpress_plan_options *o, int branch,
                 const struct mpress_assignment *guide, struct mpress_assignment *out,
                 struct mpress_plan_solver *stats, struct mpress_error *err)
{
    return run(p, topo, o, branch, 0, guide, out, stats, err);
}

int ilp_plan_cutoff(const struct mpress_profile *p, const struct mpress_topology *topo,
                    const struct mpress_plan_options *o, int branch, double cutoff,
                    struct mpress_plan_solver *stats, struct mpress_error *err)
{
    if (!(cutoff > 0 && cutoff < HUGE_VAL))
        return mpress_error_set(err, MPRESS_EINPUT, "the cutoff must be a positive time");
    struct mpress_assignment scratch = {0};
    int rc = run(p, topo, o, branch, cutoff, NULL, &scratch, stats, err);
    mpress_assignment_finish(&scratch);
    return rc;
}

int mpress_plan_ilp(const struct mpress_profile *p, const struct mpress_topology *topo,
                    const struct mpress_plan_options *o, struct mpress_assignment *out,
                    struct mpress_plan_solver *stats, struct mpress_error *err)
{
    return ilp_plan_run(p, topo, o, 0, NULL, out, stats, err);
}
