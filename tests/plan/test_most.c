/* The two parts of the MILP that only servers of more than 8 slots with a fixed mapping and host
 * optimizers get (ilp_floor_on): the column for the most blocks of a run in one slot
 * (ilp_form.c, form_partition) and the placement search before branch and bound (ilp_lns.c,
 * ilp_placement_search). Random instances of 9 or 10 GPUs on an NVSwitch, a run of 9 to 14
 * identical blocks between two other ops:
 * - the column cuts off no plan: every random plan (random cuts into the last slots, random
 *   keep / recompute / host swap per tensor, random optimizer placement) that the MILP without
 *   the column (ILP_NO_MOST) accepts, the MILP with it accepts too, every row checked, at the
 *   same objective; and the plans where the cycle row T >= t_r lm_r binds are counted, so that
 *   a coefficient too large fails here;
 * - its relaxation with the column is never lower than without; on the column's up branch (more
 *   than ceil(run / N) blocks in some slot) the relaxation's cycle is at least that many blocks'
 *   time, which a coefficient too small or a missing row fails;
 * - the placement search from the recompute baseline's solution returns a solution of the MILP
 *   (every row checked), no slower than that start and no faster than the relaxation, and
 *   faster than the start on some instances.
 * (Solving both MILPs to the end would be the direct check of "same optimum", but on 9 or more
 * slots GLPK does not finish it without the column in minutes; the per-plan check above is the
 * same claim, plan by plan.) */
#include <glpk.h>
#include <math.h>

#include "check.h"
#include "../../lib/plan/ilp_internal.h"
#include "tiny.h"

static int term_off(void *info, const char *s)
{
    (void)info, (void)s;
    return 1;
}

static void random_instance(struct mpress_profile *p, struct mpress_topology *t, int *M,
                            double *block_s)
{
    int G = tiny_range(9, 10), run = tiny_range(9, 14);
    tiny_profile_init(p);
    struct mpress_op *first = tiny_op(p, "embed", 0.01 * tiny_range(1, 5),
                                      (uint64_t)tiny_range(5, 40), 20, 0);
    /* Its states, read now: the next tiny_op moves the ops. */
    uint64_t emb = (first->param_bytes + first->grad_bytes + first->optim_bytes) / MB;
    int nt = tiny_range(1, 2);
    double fwd = 0.01 * tiny_range(2, 10);
    *block_s = 3 * fwd; /* forward and a backward of twice it (tiny_op) */
    uint64_t params = (uint64_t)tiny_range(5, 40);
    uint64_t bytes[2] = {(uint64_t)tiny_range(2, 15) * 10, (uint64_t)tiny_range(2, 15) * 10};
    double rec[2] = {0.01 * tiny_range(1, 4), 0.01 * tiny_range(1, 4)};
    for (int i = 0; i < run; i++) {
        struct mpress_op *op = tiny_op(p, "layer", fwd, params, 20, nt);
        op->workspace_bytes = 10 * MB;
        for (int k = 0; k < nt; k++) {
            snprintf(op->tensors[k].name, sizeof(op->tensors[k].name), "t%d", k);
            op->tensors[k].bytes = bytes[k] * MB;
            op->tensors[k].recompute_s = rec[k];
            op->tensors[k].recompute_op = p->n_ops - 1;
        }
    }
    struct mpress_op *last = tiny_op(p, "loss", 0.01 * tiny_range(1, 5), 0, 0, 0);
    (void)last;
    *M = tiny_range(2, 6);
    /* A GPU of the largest stage of near-even cuts (the embedding's states and the most blocks
     * a slot gets), from its states less the optimizer's to all of it kept for M micro-batches:
     * recompute, swaps and the host's optimizer decide the plans in between. */
    uint64_t most = (uint64_t)((run + G - 1) / G + 1);
    uint64_t block_states = 16 * params, block_acts = (bytes[0] + (nt > 1 ? bytes[1] : 0));
    uint64_t lo = emb / 2 + most * block_states / 2 + 60;
    uint64_t hi = emb + most * (block_states + block_acts * (uint64_t)*M) + 200;
    tiny_topo(t, G, 1, lo + tiny_rand() % (hi - lo + 1));
    t->nvlink_bytes_per_s = 4000 * MB;
    t->pcie_bytes_per_s = 3000 * MB;
    t->switches[0].uplink_bytes_per_s = 4000 * MB;
}

struct milp {
    struct model m;
    struct cols c;
    struct sym s;
    double lp;
};

/* Builds the MILP of in as the planner does (symmetry cut included) and solves its
 * relaxation (lp). */
static int milp_build(struct milp *q, const struct inst *in, const struct mpress_topology *t)
{
    memset(q, 0, sizeof(*q));
    q->m.lp = glp_create_prob();
    glp_set_obj_dir(q->m.lp, GLP_MIN);
    if (ilp_build(&q->m, in, t, MPRESS_SCHEDULE_1F1B, &q->c))
        return -1;
    ilp_sym_find(t, &q->s);
    ilp_sym_cut(&q->m, in, &q->c, &q->s);
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = GLP_MSG_OFF;
    if (glp_simplex(q->m.lp, &sp) != 0 || glp_get_status(q->m.lp) != GLP_OPT)
        return -1;
    q->lp = glp_get_obj_val(q->m.lp);
    return 0;
}

static void milp_free(struct milp *q)
{
    glp_delete_prob(q->m.lp);
    ilp_model_finish(&q->m);
    ilp_cols_free(&q->c);
    free(q->s.perm);
}

/* A random plan in a: S of the N slots used (the last S, as the fixed mapping has them),
 * random cuts, random actions and optimizer placement. */
static void random_plan(const struct mpress_profile *p, int N, struct mpress_assignment *a)
{
    int S = tiny_range(N - 2, N), n = p->n_ops;
    int cut[MPRESS_MAX_GPUS + 1];
    /* Near-even cuts, each moved by up to one op, kept increasing. */
    cut[0] = 0, cut[S] = n;
    for (int r = 1; r < S; r++) {
        int c = r * n / S + tiny_range(-1, 1);
        int lo = cut[r - 1] + 1, hi = n - (S - r);
        cut[r] = c < lo ? lo : c > hi ? hi : c;
    }
    a->n_stages = S;
    for (int r = 0; r < S; r++) {
        a->stages[r].first_op = cut[r];
        a->stages[r].last_op = cut[r + 1] - 1;
        a->stages[r].gpu = N - S + r;
        a->stages[r].optimizer_on_host = tiny_range(0, 2) == 0;
    }
    int keep_all = tiny_range(0, 2) == 0;
    for (int j = 0; j < a->n_actions; j++) {
        struct mpress_plan_action *ac = &a->actions[j];
        int kind = keep_all ? 0 : tiny_range(0, 2);
        int r = 0;
        while (a->stages[r].last_op < ac->op)
            r++;
        ac->action = kind == 0 ? MPRESS_ACTION_KEEP
                     : kind == 1 ? MPRESS_ACTION_RECOMPUTE
                                 : MPRESS_ACTION_HOST_SWAP;
        ac->n_peers = 0;
        ac->evict_after_op = kind ? ac->op : -1;
        ac->prefetch_before_op = kind ? a->stages[r].last_op : -1;
    }
}

/* The least slack of the cycle_most rows at x, relative to T (1: no such row). */
static double most_slack(glp_prob *lp, const struct cols *c, const double *x)
{
    double least = 1;
    for (int i = 1; i <= glp_get_num_rows(lp); i++) {
        const char *nm = glp_get_row_name(lp, i);
        if (!nm || strncmp(nm, "cycle_most_", 11) != 0)
            continue;
        int ind[8];
        double val[8];
        int len = glp_get_mat_row(lp, i, ind, val), has_t = 0;
        double act = 0;
        for (int e = 1; e <= len; e++) {
            act += val[e] * x[ind[e]];
            has_t |= ind[e] == c->T;
        }
        CHECK(len == 2 && has_t);
        least = fmin(least, act / fmax(x[c->T], 1e-12));
    }
    return least;
}

/* The relaxation of the branch that puts more than ceil(len / N) blocks of each run in some slot
 * (the column's up branch): at least block_s times that many, by the cycle row, which a
 * coefficient too small or a missing row fails. Bounds restored after. */
static int check_up_branch(int i, struct milp *q, const struct inst *in, double block_s)
{
    int v = 0;
    for (int r = 0; r < in->NR; r++)
        if (q->c.lm[r]) {
            int up = (in->run_len[r] + in->N - 1) / in->N + 1;
            up = up > in->run_len[r] ? in->run_len[r] : up;
            v = up > v ? up : v;
            glp_set_col_bnds(q->m.lp, q->c.lm[r], GLP_DB, up, in->run_len[r]);
        }
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = GLP_MSG_OFF;
    int ok = glp_simplex(q->m.lp, &sp) == 0;
    int st = glp_get_status(q->m.lp);
    int solved = ok && st == GLP_OPT;
    double z = glp_get_obj_val(q->m.lp), T = glp_get_col_prim(q->m.lp, q->c.T);
    CHECK_MSG(!solved || T >= block_s * v * (1 - 1e-7),
              "instance %d: up branch's cycle %.9f below %d blocks of %.3f s", i, T, v, block_s);
    CHECK_MSG(!solved || z >= q->lp * (1 - 1e-9), "instance %d: the branch lowered the bound", i);
    for (int r = 0; r < in->NR; r++)
        if (q->c.lm[r])
            glp_set_col_bnds(q->m.lp, q->c.lm[r], GLP_DB, 0, in->run_len[r]);
    return solved;
}

struct tally {
    int plans, accepted, tight, branches, improved, searched;
};

static void check_plans(int i, const struct mpress_profile *p, const struct mpress_topology *t,
                        int M, const struct inst *in, struct milp *with, struct milp *without,
                        struct tally *ty)
{
    struct mpress_assignment a;
    mpress_assignment_init(&a, p, NULL);
    for (int j = 0; j < 60; j++) {
        random_plan(p, in->N, &a);
        struct mpress_plan_eval ev;
        if (mpress_plan_evaluate(p, t, MPRESS_SCHEDULE_1F1B, M, &a, &ev, NULL) || !ev.fits)
            continue;
        ty->plans++;
        double *xo = ilp_warm_vector(without->m.lp, in, &without->c, p, &a, &without->s, NULL);
        if (!xo)
            continue;
        ty->accepted++;
        double *xw = ilp_warm_vector(with->m.lp, in, &with->c, p, &a, &with->s, NULL);
        CHECK_MSG(xw && ilp_vector_feasible(with->m.lp, xw),
                  "instance %d plan %d: a plan without the column is cut off by it", i, j);
        if (xw) {
            double zo = ilp_objective(without->m.lp, xo), zw = ilp_objective(with->m.lp, xw);
            CHECK_MSG(fabs(zo - zw) <= 1e-7 * fmax(1, zo),
                      "instance %d plan %d: %.12g with the column, %.12g without", i, j, zw, zo);
            ty->tight += most_slack(with->m.lp, &with->c, xw) <= 1e-6;
        }
        free(xw);
        free(xo);
    }
    mpress_assignment_finish(&a);
}

static void check_search(int i, const struct mpress_profile *p, const struct mpress_topology *t,
                         const struct mpress_plan_options *o, const struct inst *in,
                         struct milp *with, struct tally *ty)
{
    struct mpress_assignment a = {0};
    struct mpress_plan_eval ev;
    struct mpress_error err = {0};
    if (mpress_plan_baseline(p, t, o, MPRESS_POLICY_RECOMPUTE, &a, &ev, &err) == 0 && ev.fits) {
        double *x = ilp_warm_vector(with->m.lp, in, &with->c, p, &a, &with->s, NULL);
        CHECK_MSG(x != NULL, "instance %d: the baseline as a MILP solution", i);
        if (x) {
            ty->searched++;
            double z0 = ilp_objective(with->m.lp, x);
            struct ilp_ls_stats st;
            double *v = ilp_placement_search(with->m.lp, in, &with->c, x, 2000, 200, &st);
            CHECK_MSG(v && ilp_vector_feasible(with->m.lp, v),
                      "instance %d: the search's plan is a solution", i);
            if (v) {
                double z = ilp_objective(with->m.lp, v);
                CHECK_MSG(z <= z0 * (1 + 1e-9) && z >= with->lp * (1 - 1e-9),
                          "instance %d: %.9f from %.9f, relaxation %.9f", i, z, z0, with->lp);
                CHECK_MSG(fabs(st.found - z) <= 1e-9 * fmax(1, z), "instance %d", i);
                CHECK_MSG(fabs(st.start - z0) <= 1e-9 * fmax(1, z0), "instance %d", i);
                ty->improved += z < z0 * (1 - 1e-6);
            }
            free(v);
            free(x);
        }
    }
    mpress_assignment_finish(&a);
}

int main(void)
{
    glp_term_hook(term_off, NULL);
    tiny_state_ = 0x6d6f73742d72756eULL; /* fixed seed */
    const int instances = 24;
    struct tally ty = {0};
    for (int i = 0; i < instances; i++) {
        struct mpress_profile p;
        struct mpress_topology t;
        int M;
        double block_s;
        random_instance(&p, &t, &M, &block_s);
        struct mpress_plan_options o;
        mpress_plan_options_init(&o);
        o.micro_batches = M;
        struct mpress_error err = {0};
        struct inst in;
        if (ilp_inst_build(&p, &t, &o, &in, &err)) {
            CHECK_MSG(0, "instance %d: %s", i, err.text);
            mpress_profile_finish(&p);
            continue;
        }
        CHECK_MSG(ilp_floor_on(&in) && ilp_lm_on(&in), "instance %d: many slots", i);
        struct milp with, without;
        int ra = milp_build(&with, &in, &t);
        in.branch |= ILP_NO_MOST;
        CHECK(!ilp_lm_on(&in));
        int rb = milp_build(&without, &in, &t);
        in.branch &= ~ILP_NO_MOST;
        CHECK_MSG(ra == 0 && rb == 0, "instance %d: built and relaxed", i);
        if (ra == 0 && rb == 0) {
            int cols = 0;
            for (int r = 0; r < in.NR; r++)
                cols += with.c.lm[r] > 0;
            CHECK_MSG(cols > 0, "instance %d: no most-blocks column", i);
            CHECK_MSG(with.lp >= without.lp - 1e-9 * fmax(1, without.lp),
                      "instance %d: relaxation %.9f with, %.9f without", i, with.lp,
                      without.lp);
            ty.branches += check_up_branch(i, &with, &in, block_s);
            check_plans(i, &p, &t, M, &in, &with, &without, &ty);
            check_search(i, &p, &t, &o, &in, &with, &ty);
        }
        milp_free(&with);
        milp_free(&without);
        ilp_inst_free(&in);
        mpress_profile_finish(&p);
    }
    printf("%d instances: the column's up branch relaxed on %d; %d random plans fit, %d of them "
           "in the MILP, accepted with the column at the same objective (%d with the cycle row "
           "binding); the placement search beat the recompute baseline on %d of %d\n",
           instances, ty.branches, ty.plans, ty.accepted, ty.tight, ty.improved, ty.searched);
    CHECK_MSG(ty.branches >= instances / 2, "only %d up branches relaxed", ty.branches);
    CHECK_MSG(ty.accepted >= 100, "only %d plans checked", ty.accepted);
    CHECK_MSG(ty.tight > 0, "the cycle row never binds: a too large coefficient would pass");
    CHECK_MSG(ty.improved > 0, "the placement search never beat its start");
    return check_done();
}
