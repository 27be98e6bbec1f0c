/* The planner's MILP (GLPK): stage partition, stage -> GPU mapping, per-class action counts,
 * D2D byte shares and optimizer placement, minimising the predicted iteration time of the
 * cost model in eval.c. Its optimum, mapped back to an assignment and re-evaluated by
 * mpress_plan_evaluate, gives the same time (tests/plan/test_exact.c checks this against
 * exhaustive enumeration). */
#include <glpk.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

/* Units inside the MILP: bytes in GB (1e9) and seconds, so that coefficients of a row such as
 * "cycle x bandwidth >= bytes" stay within a few orders of magnitude of each other. */
#define GB 1e9

/*
 * The formulation. Slots k = 0..N-1 (N = GPUs), blocks (runs of ops between allowed cuts)
 * grouped into runs r of len_r identical consecutive blocks (a transformer's layers), classes c
 * (saved tensors with equal op kind, role, bytes and recompute time: interchangeable), GPUs g.
 * Stages are slots; empty slots come first, so slot k's in-flight count n_k = min(N - k, M)
 * (GPipe: M) and weight versions v_k (async: n_k, else 1) are constants.
 *
 * Per-block constants of run r: T_r fwd+bwd s, Tf_r fwd s, P_r/Gr_r/O_r weight/gradient/optimizer bytes,
 * A_r saved bytes, W_r largest workspace, X_r output bytes of its last op, cnt_rc tensors of
 * class c. Class constants: s_c bytes, r_c recompute s.
 *
 * Variables
 *   w_kr in {0..len_r}  blocks of run r in slots 0..k (slots take prefixes); w_(N-1)r = len_r
 *   f_kr in {0,1}  run r has begun by slot k (f_kr = w_kr when len_r = 1)
 *   ct_kr in {0,1} slot k holds a block of run r (for the workspace maximum)
 *   x_kg in {0,1}  slot k runs on GPU g (fixed to k = g on NVSwitch servers: all mappings
 *                  are equivalent there)
 *   h_k in {0,1}   slot k's optimizer states live on the host (when the host can take them)
 *   R_kc, H_kc, D_kc in Z+  tensors of class c in slot k recomputed / host-swapped / D2D
 *   e_kg >= 0      bytes per micro-batch slot k parks on GPU g
 *   C_k, ws_k, ov_k, oh_k, ot_k >= 0, T >= 0 (cycle), TT >= 0 (optimizer tail)
 *   bnd_kab >= 0   boundary bytes of slot k when k on a and k+1 on b (x products, linearised)
 *   fl_kab >= 0    e_kb when slot k is on a (linearised product)
 *   hp_g >= 0      host-swap bytes of the slot on g
 * Expressions
 *   y_kr = w_kr - w_(k-1)r         (blocks of run r in slot k)
 *   O_k  = sum_r X_r (f_kr - f_k(r+1))   (output of slot k's last op; O_(N-1) = 0)
 *   E_k  = sum_c s_c (R_kc + H_kc + D_kc),  Hb_k = sum_c s_c H_kc
 *   Mem_k = sum_r (v_k P_r + Gr_r + n_k A_r) y_kr + ov_k - (n_k - 1) E_k
 *           + ws_k + 2 (O_(k-1) + O_k)
 * Constraints
 *   f_kr <= w_kr <= len_r f_kr,  len_r f_k(r+1) <= w_kr,  w_kr <= w_(k+1)r,
 *   w_(N-2)(last run) <= len - 1 (the last slot is used),  sum_r y_kr >= f_k0 (k >= 1)
 *   sum_g x_kg = 1,  sum_k x_kg = 1;  symmetry cut (sym_cut) on direct fabrics
 *   R_kc + H_kc + D_kc <= sum_r cnt_rc y_kr;   sum_c s_c D_kc = sum_g e_kg
 *   e_kg <= BigD sum_{a: NVLink a-g} x_ka
 *   C_k = sum_r T_r y_kr + sum_c r_c R_kc;   ws_k >= W_r ct_kr,  ct_kr >= y_kr / len_r
 *   ov_k >= sum_r O_r y_kr - BigO h_k;   oh_k >= sum_r O_r y_kr - BigO (1 - h_k)
 *   Mem_k + sum_j n_j e_jg <= cap_g (1 - margin) - reserve_g + BigM (1 - x_kg)   all k, g
 *   sum_k n_k Hb_k + sum_k oh_k <= host memory
 *   T >= C_k
 *   bnd_kab >= O_k - BigX (2 - x_ka - x_(k+1)b);   fl_kab >= e_kb - BigD (1 - x_ka)
 *   hp_g >= Hb_k - BigD (1 - x_kg)
 *   direct fabric, NVLink pair a<b:  T bw_ab >= sum_k fl_kab + fl_kba + bnd_kab + bnd_kba
 *   NVSwitch, GPU g:  T port_g >= sum_k,b (fl_kgb + fl_kbg + bnd_kgb + bnd_kbg)
 *   PCIe of g:  T pcie >= pl_g := hp_g + sum_k,b without NVLink (bnd_kgb + bnd_kbg)
 *   uplink w:   T up_w >= sum_{g behind w} pl_g
 *   drain (one forward drains a micro-batch's host swaps), F_k = sum_r Tf_r y_kr (forward s):
 *     Hb_k <= pcie F_k;   sum_{g' behind w} hp_g' <= up_w F_k + BigD (2 - x_kg - f_k0)
 *     for every slot k and GPU g behind switch w (f_k0 = 1: slot k is used);
 *     direct fabric: e_kg <= bw_ag F_k + BigD (1 - x_ka) for every NVLink pair (a, g);
 *     NVSwitch: sum_g e_kg <= port_k F_k
 *   slack_k = sum_(j<k) (sum_r (T_r - Tf_r) y_jr + sum_c r_c R_jc)   (drain order)
 *   TT >= opt_k / hbm_g - slack_k - BigT (1 - x_kg) - BigT h_k,
 *         opt_k = sum_r U_r y_kr   (U: optimizer-step traffic, mpress_optimizer_step_traffic)
 *   ot_k >= opt_k - BigOT (1 - h_k)
 *   ots_kq >= ot_k - BigOT (1 - sum_(g on socket q) x_kg)   (mapped, several sockets)
 *   TT >= (sum_r (Gr_r + P_r) y_kr) / pcie + sum_(j<=k) ots_jq / host_bw_socket - slack_k
 *         - BigH (1 - h_k) - BigH (1 - sum_(g on socket q) x_kg)   for every socket q
 *         (fixed mapping or one socket: ot_j of the slots j on k's socket, no x term)
 * Objective
 *   min sum_k C_k + (M - 1) T + sum_k,a,b 2 bnd_kab / bw(a,b) + TT
 */

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

/* ---- model building ------------------------------------------------------------------ */

struct row {
    int n, cap;
    int *ind;     /* 1-based for GLPK: ind[1..n] */
    double *val;
    double constant;
    int *pos;     /* column -> position in this row, 0 when absent */
};

struct model {
    glp_prob *lp;
    int ncols;
    struct row r;
    int *pos;
    int pos_cap;
    int fail;
};

static int col_new(struct model *m, const char *name, int kind, double lb, double ub, double obj)
{
    int j = glp_add_cols(m->lp, 1);
    glp_set_col_name(m->lp, j, name);
    glp_set_col_kind(m->lp, j, kind);
    if (kind == GLP_BV)
        ;
    else if (ub < 0)
        glp_set_col_bnds(m->lp, j, GLP_LO, lb, 0);
    else if (ub == lb)
        glp_set_col_bnds(m->lp, j, GLP_FX, lb, lb);
    else
        glp_set_col_bnds(m->lp, j, GLP_DB, lb, ub);
    glp_set_obj_coef(m->lp, j, obj);
    m->ncols = j;
    return j;
}

static void row_begin(struct model *m)
{
    for (int i = 1; i <= m->r.n; i++)
        m->pos[m->r.ind[i]] = 0;
    m->r.n = 0;
    m->r.constant = 0;
}

static void row_add(struct model *m, int col, double coef)
{
    if (coef == 0 || m->fail)
        return;
    if (col <= 0) { /* a fixed value folded into the constant by the caller */
        return;
    }
    if (col >= m->pos_cap) {
        int cap = m->pos_cap ? m->pos_cap : 1024;
        while (cap <= col)
            cap *= 2;
        int *np = realloc(m->pos, sizeof(int) * (size_t)cap);
        if (!np) {
            m->fail = 1;
            return;
        }
        memset(np + m->pos_cap, 0, sizeof(int) * (size_t)(cap - m->pos_cap));
        m->pos = np;
        m->pos_cap = cap;
    }
    if (m->pos[col]) {
        m->r.val[m->pos[col]] += coef;
        return;
    }
    if (m->r.n + 2 > m->r.cap) {
        int cap = m->r.cap ? 2 * m->r.cap : 256;
        int *ni = realloc(m->r.ind, sizeof(int) * (size_t)cap);
        if (ni)
            m->r.ind = ni;
        double *nv = realloc(m->r.val, sizeof(double) * (size_t)cap);
        if (nv)
            m->r.val = nv;
        if (!ni || !nv) {
            m->fail = 1;
            return;
        }
        m->r.cap = cap;
    }
    m->r.n++;
    m->r.ind[m->r.n] = col;
    m->r.val[m->r.n] = coef;
    m->pos[col] = m->r.n;
}

/* Adds the row  sum + constant  (type)  bound;  GLP_LO: >= lo, GLP_UP: <= up, GLP_FX: = lo. */
static void row_end(struct model *m, const char *name, int type, double bound)
{
    if (m->fail)
        return;
    for (int i = 1; i <= m->r.n; i++)
        m->pos[m->r.ind[i]] = 0;
    /* Drop zero coefficients (merged terms can cancel). */
    int n = 0;
    for (int i = 1; i <= m->r.n; i++)
        if (fabs(m->r.val[i]) > 1e-12) { /* cancellation leaves dust: 1e-12 GB < 1 byte */
            n++;
            m->r.ind[n] = m->r.ind[i];
            m->r.val[n] = m->r.val[i];
        }
    m->r.n = n;
    if (n == 0) {
        m->r.n = 0;
        return; /* constant rows are checked by the caller where they matter */
    }
    int i = glp_add_rows(m->lp, 1);
    glp_set_row_name(m->lp, i, name);
    double b = bound - m->r.constant;
    glp_set_row_bnds(m->lp, i, type, type == GLP_UP ? 0 : b, type == GLP_UP ? b : 0);
    if (type == GLP_FX)
        glp_set_row_bnds(m->lp, i, GLP_FX, b, b);
    glp_set_mat_row(m->lp, i, n, m->r.ind, m->r.val);
    m->r.n = 0;
}

/* ---- instance data ------------------------------------------------------------------- */

struct block {
    int first, last;
    double t, tf, opt_touch; /* fwd + bwd s, fwd s */
    double p, g, o, a, w, x; /* GB */
    double gp;               /* gradient + weight GB (host optimizer transfer) */
};

struct tclass {
    int op, tensor;          /* a representative */
    double s, r;             /* GB, seconds */
};

struct inst {
    int N, B, C, M;
    struct block *blk;
    int NR;                  /* runs of identical consecutive blocks */
    int *run_first, *run_len;
    struct tclass *cls;
    int *cnt;                /* cnt[b * C + c] */
    int *tcls;               /* class of each saved tensor (flat) */
    int mapped;              /* x decided by the MILP */
    int host_opt, d2d;
};

static void inst_free(struct inst *in)
{
    free(in->run_first);
    free(in->run_len);
    free(in->blk);
    free(in->cls);
    free(in->cnt);
    free(in->tcls);
}

static int inst_build(const struct mpress_profile *p, const struct mpress_topology *topo,
                      const struct mpress_plan_options *o, struct inst *in,
                      struct mpress_error *err)
{
    memset(in, 0, sizeof(*in));
    int n = p->n_ops, nt = plan_count_tensors(p);
    char *cut_ok = malloc((size_t)n);
    in->blk = calloc((size_t)n, sizeof(*in->blk));
    in->cls = calloc((size_t)(nt + 1), sizeof(*in->cls));
    in->tcls = calloc((size_t)(nt + 1), sizeof(int));
    if (!cut_ok || !in->blk || !in->cls || !in->tcls) {
        free(cut_ok);
        inst_free(in);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    plan_cut_points(p, o->cuts, cut_ok);
    int b = 0, start = 0, j = 0;
    for (int i = 0; i < n; i++) {
        const struct mpress_op *op = &p->ops[i];
        struct block *bk = &in->blk[b];
        bk->t += op->fwd_s + op->bwd_s;
        bk->tf += op->fwd_s;
        bk->p += op->param_bytes / GB;
        bk->g += op->grad_bytes / GB;
        bk->o += op->optim_bytes / GB;
        bk->opt_touch +=
            plan_optimizer_bytes(p, op->param_bytes, op->grad_bytes, op->optim_bytes) / GB;
        bk->gp += (double)(op->grad_bytes + op->param_bytes) / GB;
        if (op->workspace_bytes / GB > bk->w)
            bk->w = op->workspace_bytes / GB;
        for (int t = 0; t < op->n_tensors; t++, j++) {
            const struct mpress_saved_tensor *ts = &op->tensors[t];
            bk->a += ts->bytes / GB;
            int c = 0;
            for (; c < in->C; c++) {
                const struct tclass *k = &in->cls[c];
                const struct mpress_op *ok = &p->ops[k->op];
                const struct mpress_saved_tensor *tk = &ok->tensors[k->tensor];
                if (plan_same_class(ok, tk, op, ts))
                    break;
            }
            if (c == in->C) {
                in->cls[c].op = i;
                in->cls[c].tensor = t;
                in->cls[c].s = ts->bytes / GB;
                in->cls[c].r = ts->recompute_s;
                in->C++;
            }
            in->tcls[j] = c;
        }
        if (cut_ok[i]) {
            bk->first = start;
            bk->last = i;
            bk->x = op->output_bytes / GB;
            start = i + 1;
            b++;
        }
    }
    in->B = b;
    free(cut_ok);
    in->cnt = calloc((size_t)(in->B * (in->C ? in->C : 1)), sizeof(int));
    if (!in->cnt) {
        inst_free(in);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    j = 0;
    b = 0;
    for (int i = 0; i < n; i++) {
        while (in->blk[b].last < i)
            b++;
        for (int t = 0; t < p->ops[i].n_tensors; t++, j++)
            in->cnt[b * in->C + in->tcls[j]]++;
    }
    /* Runs: blocks identical in every constant and class count (a transformer's layers) are
     * interchangeable, so the MILP decides how many of a run each slot takes. */
    in->run_first = calloc((size_t)in->B, sizeof(int));
    in->run_len = calloc((size_t)in->B, sizeof(int));
    if (!in->run_first || !in->run_len) {
        inst_free(in);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    for (b = 0; b < in->B; b++) {
        if (in->NR > 0) {
            const struct block *x = &in->blk[in->run_first[in->NR - 1]], *y = &in->blk[b];
            int same = x->t == y->t && x->tf == y->tf && x->opt_touch == y->opt_touch &&
                       x->p == y->p && x->g == y->g && x->o == y->o && x->a == y->a &&
                       x->w == y->w && x->x == y->x && x->gp == y->gp;
            for (int c = 0; c < in->C && same; c++)
                same = in->cnt[in->run_first[in->NR - 1] * in->C + c] == in->cnt[b * in->C + c];
            if (same) {
                in->run_len[in->NR - 1]++;
                continue;
            }
        }
        in->run_first[in->NR] = b;
        in->run_len[in->NR] = 1;
        in->NR++;
    }
    in->N = topo->n_gpus;
    in->M = o->micro_batches;
    in->mapped = topo->fabric != MPRESS_FABRIC_NVSWITCH && topo->n_gpus > 1;
    in->host_opt = topo->pcie_bytes_per_s > 0 && plan_host_bw(topo) > 0;
    for (int a = 0; a < topo->n_gpus; a++)
        for (int g = 0; g < topo->n_gpus; g++)
            if (plan_nvlink_bw(topo, a, g) > 0)
                in->d2d = 1;
    return 0;
}

/* ---- solving ------------------------------------------------------------------------- */

struct cb_ctx {
    const struct mpress_plan_options *o;
    double bound;       /* best bound seen, MILP units (seconds) */
    double incumbent;
    long nodes;
    int stopped_by_nodes;
    double *heur;       /* a warm-start solution (1-based column values), or NULL */
};

static void ilp_callback(glp_tree *tree, void *info)
{
    struct cb_ctx *c = info;
    int reason = glp_ios_reason(tree);
    if (reason == GLP_IHEUR && c->heur) {
        glp_ios_heur_sol(tree, c->heur);
        free(c->heur);
        c->heur = NULL;
        return;
    }
    if (reason != GLP_ISELECT && reason != GLP_IBINGO && reason != GLP_IBRANCH)
        return;
    int a_cnt, n_cnt, t_cnt;
    glp_ios_tree_size(tree, &a_cnt, &n_cnt, &t_cnt);
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
    if (c->o->node_limit > 0 && t_cnt >= c->o->node_limit) {
        c->stopped_by_nodes = 1;
        glp_ios_terminate(tree);
    }
}

/* Column indices of the model, 0 where a variable does not exist. */
struct cols {
    int *w, *f, *ct; /* [k][run]: blocks of the run in slots <= k, run begun, run in slot k */
    int *x, *h, *R, *H, *D, *e, *C, *ws, *ov, *oh, *ot, *hp;
    int *bnd, *fl; /* [k][a][b] */
    int *ots;      /* [k][socket] */
    int T, TT;
};

#define IX2(k, i, n) ((k) * (n) + (i))
#define IX3(k, a, b, n) (((k) * (n) + (a)) * (n) + (b))

static void cols_free(struct cols *c)
{
    free(c->w), free(c->f), free(c->ct);
    free(c->x), free(c->h), free(c->R), free(c->H), free(c->D), free(c->e);
    free(c->C), free(c->ws), free(c->ov), free(c->oh), free(c->ot), free(c->hp);
    free(c->bnd), free(c->fl), free(c->ots);
}

/* x_kg: a column, or a constant (fixed mapping: slot k on GPU k). */
static void add_x(struct model *m, const struct inst *in, const struct cols *c, int k, int g,
                  double coef)
{
    if (in->mapped)
        row_add(m, c->x[IX2(k, g, in->N)], coef);
    else if (k == g)
        m->r.constant += coef;
}

static int x_possible(const struct inst *in, int k, int g)
{
    return in->mapped || k == g;
}

/* w_kr: blocks of run r in slots 0..k; the last slot completes every run. */
static void add_w(struct model *m, const struct inst *in, const struct cols *c, int k, int r,
                  double coef)
{
    if (k < 0)
        return;
    if (k == in->N - 1)
        m->r.constant += coef * in->run_len[r];
    else
        row_add(m, c->w[IX2(k, r, in->NR)], coef);
}

/* f_kr: run r has begun by slot k (= w_kr for a run of one block). */
static void add_f(struct model *m, const struct inst *in, const struct cols *c, int k, int r,
                  double coef)
{
    if (k < 0)
        return;
    if (k == in->N - 1)
        m->r.constant += coef;
    else if (in->run_len[r] == 1)
        row_add(m, c->w[IX2(k, r, in->NR)], coef);
    else
        row_add(m, c->f[IX2(k, r, in->NR)], coef);
}

/* y_kr: blocks of run r in slot k. */
static void add_y(struct model *m, const struct inst *in, const struct cols *c, int k, int r,
                  double coef)
{
    add_w(m, in, c, k, r, coef);
    add_w(m, in, c, k - 1, r, -coef);
}

/* O_k: output bytes of slot k's last op (0 for the last slot). Within a run the outputs are
 * equal, so sum_b X_b (u_kb - u_k(b+1)) telescopes to X_r (f_kr - f_k(r+1)). */
static void add_out(struct model *m, const struct inst *in, const struct cols *c, int k,
                    double coef)
{
    if (k < 0 || k >= in->N - 1)
        return;
    for (int r = 0; r < in->NR; r++) {
        double x = in->blk[in->run_first[r]].x;
        add_f(m, in, c, k, r, coef * x);
        if (r + 1 < in->NR)
            add_f(m, in, c, k, r + 1, -coef * x);
    }
}

static void name(char *buf, const char *fmt, int a, int b, int d)
{
    snprintf(buf, 64, fmt, a, b, d);
}

/* -pl_g: host-swap bytes of the slot on g and boundary bytes that cross PCIe at g. */
static void add_pcie_load(struct model *m, const struct inst *in, const struct cols *c,
                          const struct mpress_topology *topo, int g)
{
    const int N = in->N, G = N;
    row_add(m, c->hp[g], -1);
    for (int k = 0; k + 1 < N; k++)
        for (int q = 0; q < G; q++) {
            if (q == g || plan_nvlink_bw(topo, g, q) > 0)
                continue;
            row_add(m, c->bnd[IX3(k, g, q, G)], -1);
            row_add(m, c->bnd[IX3(k, q, g, G)], -1);
        }
}

#define RB(r) (in->blk[in->run_first[(r)]])

/* slack_k: backward and recompute seconds of slots 0..k-1, by which slot k's last backward of
 * an iteration ends before slot 0's (the 1F1B / GPipe drain runs the stages in reverse). */
static void add_slack(struct model *m, const struct inst *in, const struct cols *c, int k,
                      double coef)
{
    for (int j = 0; j < k; j++) {
        for (int r = 0; r < in->NR; r++)
            add_y(m, in, c, j, r, coef * (RB(r).t - RB(r).tf));
        for (int cl = 0; cl < in->C; cl++)
            row_add(m, c->R[IX2(j, cl, in->C)], coef * in->cls[cl].r);
    }
}

static int build(struct model *m, const struct inst *in, const struct mpress_topology *topo,
                 enum mpress_schedule sched, struct cols *c)
{
    const int N = in->N, B = in->B, C = in->C, M = in->M, G = N;
    char nm[64];
    double sumA = 0, sumO = 0, sumX = 0, sumOT = 0, sumGP = 0, sumPG = 0;
    for (int b = 0; b < B; b++) {
        sumA += in->blk[b].a;
        sumO += in->blk[b].o;
        sumOT += in->blk[b].opt_touch;
        sumGP += in->blk[b].gp;
        sumPG += in->blk[b].p + in->blk[b].g;
        if (in->blk[b].x > sumX)
            sumX = in->blk[b].x;
    }
    double maxW = 0;
    for (int b = 0; b < B; b++)
        maxW = fmax(maxW, in->blk[b].w);
    const double bigD = sumA, bigO = sumO, bigX = sumX;
    /* Largest Mem_k + parked: every state with all versions, all activations of M micro-batches
     * for the stage and as parked bytes, workspace and four buffers. */
    const double bigM = (M + 1) * sumPG + sumO + 2.0 * M * sumA + maxW + 4 * sumX + 1;
    double min_hbm = 1e300;
    for (int g = 0; g < G; g++)
        if (topo->gpus[g].hbm_bytes_per_s > 0)
            min_hbm = fmin(min_hbm, topo->gpus[g].hbm_bytes_per_s / GB);
    const double bigT = min_hbm < 1e300 ? sumOT / min_hbm + 1 : 1;
    const double pcie = topo->pcie_bytes_per_s / GB;
    const double hsock = topo->host_memory_bytes_per_s / GB; /* per socket */
    const int NK = topo->n_sockets > 0 ? topo->n_sockets : 1;
    /* Which socket a slot's host step runs on is decided with the mapping. */
    const int split_sockets = in->host_opt && in->mapped && NK > 1;
    const double bigH = sumGP / pcie + sumOT / (hsock > 0 ? hsock : 1) + 1;

    const int NR = in->NR;
    c->w = calloc((size_t)(N * NR), sizeof(int));
    c->f = calloc((size_t)(N * NR), sizeof(int));
    c->ct = calloc((size_t)(N * NR), sizeof(int));
    c->x = calloc((size_t)(N * G), sizeof(int));
    c->h = calloc((size_t)N, sizeof(int));
    c->R = calloc((size_t)(N * (C + 1)), sizeof(int));
    c->H = calloc((size_t)(N * (C + 1)), sizeof(int));
    c->D = calloc((size_t)(N * (C + 1)), sizeof(int));
    c->e = calloc((size_t)(N * G), sizeof(int));
    c->C = calloc((size_t)N, sizeof(int));
    c->ws = calloc((size_t)N, sizeof(int));
    c->ov = calloc((size_t)N, sizeof(int));
    c->oh = calloc((size_t)N, sizeof(int));
    c->ot = calloc((size_t)N, sizeof(int));
    c->ots = calloc((size_t)(N * NK), sizeof(int));
    c->hp = calloc((size_t)G, sizeof(int));
    c->bnd = calloc((size_t)(N * G * G), sizeof(int));
    c->fl = calloc((size_t)(N * G * G), sizeof(int));
    if (!c->w || !c->f || !c->ct || !c->x || !c->h || !c->R || !c->H || !c->D || !c->e ||
        !c->C || !c->ws ||
        !c->ov || !c->oh || !c->ot || !c->ots || !c->hp || !c->bnd || !c->fl)
        return -1;

    /* Columns. */
    for (int k = 0; k + 1 < N; k++)
        for (int r = 0; r < NR; r++) {
            int len = in->run_len[r];
            name(nm, "w_%d_%d", k, r, 0);
            c->w[IX2(k, r, NR)] = col_new(m, nm, len == 1 ? GLP_BV : GLP_IV, 0, len, 0);
            if (len > 1) {
                name(nm, "f_%d_%d", k, r, 0);
                c->f[IX2(k, r, NR)] = col_new(m, nm, GLP_BV, 0, 1, 0);
            }
        }
    for (int k = 0; k < N; k++)
        for (int r = 0; r < NR; r++)
            if (in->run_len[r] > 1 && RB(r).w > 0) {
                name(nm, "ct_%d_%d", k, r, 0);
                c->ct[IX2(k, r, NR)] = col_new(m, nm, GLP_BV, 0, 1, 0);
            }
    if (in->mapped)
        for (int k = 0; k < N; k++)
            for (int g = 0; g < G; g++) {
                name(nm, "x_%d_%d", k, g, 0);
                c->x[IX2(k, g, G)] = col_new(m, nm, GLP_BV, 0, 1, 0);
            }
    for (int k = 0; k < N; k++) {
        name(nm, "C_%d", k, 0, 0);
        c->C[k] = col_new(m, nm, GLP_CV, 0, -1, 1.0);
        name(nm, "ws_%d", k, 0, 0);
        c->ws[k] = col_new(m, nm, GLP_CV, 0, -1, 0);
        name(nm, "ov_%d", k, 0, 0);
        c->ov[k] = col_new(m, nm, GLP_CV, 0, -1, 0);
        if (in->host_opt) {
            name(nm, "h_%d", k, 0, 0);
            c->h[k] = col_new(m, nm, GLP_BV, 0, 1, 0);
            name(nm, "oh_%d", k, 0, 0);
            c->oh[k] = col_new(m, nm, GLP_CV, 0, -1, 0);
            name(nm, "ot_%d", k, 0, 0);
            c->ot[k] = col_new(m, nm, GLP_CV, 0, -1, 0);
            for (int q = 0; split_sockets && q < NK; q++) {
                name(nm, "ots_%d_%d", k, q, 0);
                c->ots[IX2(k, q, NK)] = col_new(m, nm, GLP_CV, 0, -1, 0);
            }
        }
        for (int cl = 0; cl < C; cl++) {
            name(nm, "R_%d_%d", k, cl, 0);
            c->R[IX2(k, cl, C)] = col_new(m, nm, GLP_IV, 0, -1, 0);
            name(nm, "H_%d_%d", k, cl, 0);
            c->H[IX2(k, cl, C)] = col_new(m, nm, GLP_IV, 0, -1, 0);
            if (in->d2d) {
                name(nm, "D_%d_%d", k, cl, 0);
                c->D[IX2(k, cl, C)] = col_new(m, nm, GLP_IV, 0, -1, 0);
            }
        }
        if (in->d2d)
            for (int g = 0; g < G; g++) {
                int reach = 0;
                for (int a = 0; a < G; a++)
                    if (x_possible(in, k, a) && plan_nvlink_bw(topo, a, g) > 0)
                        reach = 1;
                if (!reach)
                    continue;
                name(nm, "e_%d_%d", k, g, 0);
                c->e[IX2(k, g, G)] = col_new(m, nm, GLP_CV, 0, -1, 0);
            }
    }
    c->T = col_new(m, "T", GLP_CV, 0, -1, (double)(M - 1));
    c->TT = col_new(m, "TT", GLP_CV, 0, -1, 1.0);
    for (int g = 0; g < G; g++) {
        name(nm, "hp_%d", g, 0, 0);
        c->hp[g] = col_new(m, nm, GLP_CV, 0, -1, 0);
    }
    for (int k = 0; k + 1 < N; k++)
        for (int a = 0; a < G; a++)
            for (int b = 0; b < G; b++) {
                if (a == b || !x_possible(in, k, a) || !x_possible(in, k + 1, b))
                    continue;
                name(nm, "bnd_%d_%d_%d", k, a, b);
                c->bnd[IX3(k, a, b, G)] =
                    col_new(m, nm, GLP_CV, 0, -1, 2.0 / (plan_boundary_bw(topo, a, b) / GB));
            }
    for (int k = 0; k < N; k++)
        for (int a = 0; a < G; a++)
            for (int b = 0; b < G; b++) {
                if (!x_possible(in, k, a) || !c->e[IX2(k, b, G)] ||
                    plan_nvlink_bw(topo, a, b) <= 0)
                    continue;
                name(nm, "fl_%d_%d_%d", k, a, b);
                c->fl[IX3(k, a, b, G)] = col_new(m, nm, GLP_CV, 0, -1, 0);
            }

    /* Partition: slots take prefixes of the block sequence, run by run. */
    for (int k = 0; k + 1 < N; k++)
        for (int r = 0; r < NR; r++) {
            int len = in->run_len[r];
            if (len > 1) { /* f <= w <= len f */
                row_begin(m);
                add_f(m, in, c, k, r, 1);
                add_w(m, in, c, k, r, -1);
                name(nm, "begun_lo_%d_%d", k, r, 0);
                row_end(m, nm, GLP_UP, 0);
                row_begin(m);
                add_w(m, in, c, k, r, 1);
                add_f(m, in, c, k, r, -len);
                name(nm, "begun_hi_%d_%d", k, r, 0);
                row_end(m, nm, GLP_UP, 0);
            }
            if (r + 1 < NR) { /* run r+1 begins only after run r is complete */
                row_begin(m);
                add_f(m, in, c, k, r + 1, len);
                add_w(m, in, c, k, r, -1);
                name(nm, "stair_r_%d_%d", k, r, 0);
                row_end(m, nm, GLP_UP, 0);
            }
            if (k + 2 < N) {
                row_begin(m);
                add_w(m, in, c, k, r, 1);
                add_w(m, in, c, k + 1, r, -1);
                name(nm, "stair_k_%d_%d", k, r, 0);
                row_end(m, nm, GLP_UP, 0);
            }
        }
    if (N >= 2) { /* the last slot is never empty: it holds the last block */
        int r = NR - 1;
        glp_set_col_bnds(m->lp, c->w[IX2(N - 2, r, NR)], in->run_len[r] == 1 ? GLP_FX : GLP_DB,
                         0, in->run_len[r] - 1);
    }
    for (int k = 1; k < N; k++) { /* empty slots only before the first used one */
        row_begin(m);
        for (int r = 0; r < NR; r++)
            add_y(m, in, c, k, r, 1);
        add_f(m, in, c, k, 0, -1);
        name(nm, "nonempty_%d", k, 0, 0);
        row_end(m, nm, GLP_LO, 0);
    }
    /* Mapping: a permutation. */
    if (in->mapped) {
        for (int k = 0; k < N; k++) {
            row_begin(m);
            for (int g = 0; g < G; g++)
                add_x(m, in, c, k, g, 1);
            name(nm, "map_slot_%d", k, 0, 0);
            row_end(m, nm, GLP_FX, 1);
        }
        for (int g = 0; g < G; g++) {
            row_begin(m);
            for (int k = 0; k < N; k++)
                add_x(m, in, c, k, g, 1);
            name(nm, "map_gpu_%d", g, 0, 0);
            row_end(m, nm, GLP_FX, 1);
        }
    }

    for (int k = 0; k < N; k++) {
        const int n_k = plan_in_flight(sched, N, k, M);
        const int v_k = plan_weight_versions(sched, N, k, M);
        /* Counts. */
        for (int cl = 0; cl < C; cl++) {
            row_begin(m);
            row_add(m, c->R[IX2(k, cl, C)], 1);
            row_add(m, c->H[IX2(k, cl, C)], 1);
            if (in->d2d)
                row_add(m, c->D[IX2(k, cl, C)], 1);
            for (int b = 0; b < NR; b++)
                if (in->cnt[in->run_first[b] * C + cl])
                    add_y(m, in, c, k, b, -(double)in->cnt[in->run_first[b] * C + cl]);
            name(nm, "count_%d_%d", k, cl, 0);
            row_end(m, nm, GLP_UP, 0);
        }
        if (in->d2d) {
            row_begin(m);
            for (int cl = 0; cl < C; cl++)
                row_add(m, c->D[IX2(k, cl, C)], in->cls[cl].s);
            for (int g = 0; g < G; g++)
                row_add(m, c->e[IX2(k, g, G)], -1);
            name(nm, "d2d_split_%d", k, 0, 0);
            row_end(m, nm, GLP_FX, 0);
            if (in->mapped)
                for (int g = 0; g < G; g++) {
                    if (!c->e[IX2(k, g, G)])
                        continue;
                    row_begin(m);
                    row_add(m, c->e[IX2(k, g, G)], 1);
                    for (int a = 0; a < G; a++)
                        if (plan_nvlink_bw(topo, a, g) > 0)
                            add_x(m, in, c, k, a, -bigD);
                    name(nm, "reach_%d_%d", k, g, 0);
                    row_end(m, nm, GLP_UP, 0);
                }
        }
        /* Compute time. */
        row_begin(m);
        row_add(m, c->C[k], 1);
        for (int b = 0; b < NR; b++)
            add_y(m, in, c, k, b, -RB(b).t);
        for (int cl = 0; cl < C; cl++)
            row_add(m, c->R[IX2(k, cl, C)], -in->cls[cl].r);
        name(nm, "compute_%d", k, 0, 0);
        row_end(m, nm, GLP_FX, 0);
        /* Workspace: the largest of the runs present in the slot. */
        for (int b = 0; b < NR; b++) {
            if (RB(b).w <= 0)
                continue;
            row_begin(m);
            row_add(m, c->ws[k], 1);
            if (in->run_len[b] == 1) {
                add_y(m, in, c, k, b, -RB(b).w);
                name(nm, "ws_%d_%d", k, b, 0);
            } else {
                row_add(m, c->ct[IX2(k, b, NR)], -RB(b).w);
                name(nm, "ws_%d_%d", k, b, 0);
                row_end(m, nm, GLP_LO, 0);
                row_begin(m); /* ct_kr >= y_kr / len */
                row_add(m, c->ct[IX2(k, b, NR)], 1);
                add_y(m, in, c, k, b, -1.0 / in->run_len[b]);
                name(nm, "ct_%d_%d", k, b, 0);
            }
            row_end(m, nm, GLP_LO, 0);
        }
        /* Optimizer bytes on GPU / host. */
        row_begin(m);
        row_add(m, c->ov[k], 1);
        for (int b = 0; b < NR; b++)
            add_y(m, in, c, k, b, -RB(b).o);
        if (in->host_opt)
            row_add(m, c->h[k], bigO);
        name(nm, "opt_gpu_%d", k, 0, 0);
        row_end(m, nm, GLP_LO, 0);
        if (in->host_opt) {
            row_begin(m);
            row_add(m, c->oh[k], 1);
            for (int b = 0; b < NR; b++)
                add_y(m, in, c, k, b, -RB(b).o);
            row_add(m, c->h[k], -bigO);
            name(nm, "opt_host_%d", k, 0, 0);
            row_end(m, nm, GLP_LO, -bigO);
            row_begin(m);
            row_add(m, c->ot[k], 1);
            for (int b = 0; b < NR; b++)
                add_y(m, in, c, k, b, -RB(b).opt_touch);
            row_add(m, c->h[k], -sumOT);
            name(nm, "opt_touch_%d", k, 0, 0);
            row_end(m, nm, GLP_LO, -sumOT);
            /* ots_kq: ot_k when slot k's GPU sits on socket q (mapped, several sockets). */
            for (int q = 0; split_sockets && q < NK; q++) {
                row_begin(m);
                row_add(m, c->ots[IX2(k, q, NK)], 1);
                row_add(m, c->ot[k], -1);
                for (int g = 0; g < G; g++)
                    if (plan_socket(topo, g) == q)
                        add_x(m, in, c, k, g, -sumOT);
                name(nm, "opt_socket_%d_%d", k, q, 0);
                row_end(m, nm, GLP_LO, -sumOT);
            }
        }
        /* GPU optimizer step in the tail. */
        for (int g = 0; g < G; g++) {
            if (!x_possible(in, k, g) || topo->gpus[g].hbm_bytes_per_s <= 0)
                continue;
            double hbm = topo->gpus[g].hbm_bytes_per_s / GB;
            row_begin(m);
            row_add(m, c->TT, 1);
            add_slack(m, in, c, k, 1);
            for (int b = 0; b < NR; b++)
                add_y(m, in, c, k, b, -RB(b).opt_touch / hbm);
            add_x(m, in, c, k, g, -bigT);
            if (in->host_opt)
                row_add(m, c->h[k], bigT);
            name(nm, "tail_gpu_%d_%d", k, g, 0);
            row_end(m, nm, GLP_LO, -bigT);
        }
        /* Memory of slot k on each GPU it may use, with what others park there. */
        for (int g = 0; g < G; g++) {
            if (!x_possible(in, k, g))
                continue;
            row_begin(m);
            for (int b = 0; b < NR; b++)
                add_y(m, in, c, k, b, v_k * RB(b).p + RB(b).g + n_k * RB(b).a);
            row_add(m, c->ov[k], 1);
            for (int cl = 0; cl < C; cl++) {
                double coef = -(double)(n_k - 1) * in->cls[cl].s;
                row_add(m, c->R[IX2(k, cl, C)], coef);
                row_add(m, c->H[IX2(k, cl, C)], coef);
                if (in->d2d)
                    row_add(m, c->D[IX2(k, cl, C)], coef);
            }
            row_add(m, c->ws[k], 1);
            add_out(m, in, c, k - 1, 2);
            add_out(m, in, c, k, 2);
            for (int j = 0; j < N; j++)
                if (c->e[IX2(j, g, G)])
                    row_add(m, c->e[IX2(j, g, G)], plan_in_flight(sched, N, j, M));
            double cap = ((double)topo->gpus[g].memory_bytes * (1 - PLAN_MEM_MARGIN) -
                          (double)topo->gpus[g].reserve_bytes) / GB;
            add_x(m, in, c, k, g, bigM);
            name(nm, "mem_%d_%d", k, g, 0);
            row_end(m, nm, GLP_UP, cap + bigM);
        }
        /* Cycle >= compute. */
        row_begin(m);
        row_add(m, c->T, 1);
        row_add(m, c->C[k], -1);
        name(nm, "cycle_compute_%d", k, 0, 0);
        row_end(m, nm, GLP_LO, 0);
    }
    /* Host optimizer tail: slot k's transfers, then every host step of slots 0..k (they start
     * no earlier) on the same socket, at that socket's memory bandwidth, less k's slack. */
    for (int k = 0; in->host_opt && k < N; k++)
        for (int q = 0; q < NK; q++) {
            if (!split_sockets && NK > 1 && plan_socket(topo, k) != q)
                continue; /* fixed mapping: slot k is on GPU k */
            row_begin(m);
            row_add(m, c->TT, 1);
            add_slack(m, in, c, k, 1);
            for (int b = 0; b < NR; b++)
                add_y(m, in, c, k, b, -RB(b).gp / pcie);
            for (int j = 0; j <= k; j++) {
                if (split_sockets)
                    row_add(m, c->ots[IX2(j, q, NK)], -1.0 / hsock);
                else if (NK == 1 || plan_socket(topo, j) == q)
                    row_add(m, c->ot[j], -1.0 / hsock);
            }
            row_add(m, c->h[k], -bigH);
            double lo = -bigH;
            if (split_sockets) {
                for (int g = 0; g < G; g++)
                    if (plan_socket(topo, g) == q)
                        add_x(m, in, c, k, g, -bigH);
                lo -= bigH;
            }
            name(nm, "tail_host_%d_%d", k, q, 0);
            row_end(m, nm, GLP_LO, lo);
        }
    /* Host memory. */
    if (topo->host_memory_bytes > 0) {
        row_begin(m);
        for (int k = 0; k < N; k++) {
            int n_k = plan_in_flight(sched, N, k, M);
            for (int cl = 0; cl < C; cl++)
                row_add(m, c->H[IX2(k, cl, C)], n_k * in->cls[cl].s);
            if (in->host_opt)
                row_add(m, c->oh[k], 1);
        }
        row_end(m, "host_memory", GLP_UP, (double)topo->host_memory_bytes / GB);
    }
    /* Linearised products. */
    for (int k = 0; k + 1 < N; k++)
        for (int a = 0; a < G; a++)
            for (int b = 0; b < G; b++) {
                int col = c->bnd[IX3(k, a, b, G)];
                if (!col)
                    continue;
                row_begin(m);
                row_add(m, col, 1);
                add_out(m, in, c, k, -1);
                add_x(m, in, c, k, a, -bigX);
                add_x(m, in, c, k + 1, b, -bigX);
                name(nm, "bnd_%d_%d_%d", k, a, b);
                row_end(m, nm, GLP_LO, -2 * bigX);
            }
    for (int k = 0; k < N; k++)
        for (int a = 0; a < G; a++)
            for (int b = 0; b < G; b++) {
                int col = c->fl[IX3(k, a, b, G)];
                if (!col)
                    continue;
                row_begin(m);
                row_add(m, col, 1);
                row_add(m, c->e[IX2(k, b, G)], -1);
                add_x(m, in, c, k, a, -bigD);
                name(nm, "fl_%d_%d_%d", k, a, b);
                row_end(m, nm, GLP_LO, -bigD);
            }
    for (int k = 0; k < N; k++)
        for (int g = 0; g < G; g++) {
            if (!x_possible(in, k, g))
                continue;
            row_begin(m);
            row_add(m, c->hp[g], 1);
            for (int cl = 0; cl < C; cl++)
                row_add(m, c->H[IX2(k, cl, C)], -in->cls[cl].s);
            add_x(m, in, c, k, g, -bigD);
            name(nm, "hp_%d_%d", k, g, 0);
            row_end(m, nm, GLP_LO, -bigD);
        }
    /* Links. */
    if (topo->fabric == MPRESS_FABRIC_NVSWITCH) {
        for (int g = 0; g < G; g++) {
            double bw = plan_port_bw(topo, g) / GB;
            if (bw <= 0)
                continue;
            row_begin(m);
            row_add(m, c->T, bw);
            for (int k = 0; k < N; k++)
                for (int q = 0; q < G; q++) {
                    row_add(m, c->fl[IX3(k, g, q, G)], -1);
                    row_add(m, c->fl[IX3(k, q, g, G)], -1);
                    if (k + 1 < N) {
                        row_add(m, c->bnd[IX3(k, g, q, G)], -1);
                        row_add(m, c->bnd[IX3(k, q, g, G)], -1);
                    }
                }
            name(nm, "port_%d", g, 0, 0);
            row_end(m, nm, GLP_LO, 0);
        }
    } else {
        for (int a = 0; a < G; a++)
            for (int b = a + 1; b < G; b++) {
                double bw = plan_nvlink_bw(topo, a, b) / GB;
                if (bw <= 0)
                    continue;
                row_begin(m);
                row_add(m, c->T, bw);
                for (int k = 0; k < N; k++) {
                    row_add(m, c->fl[IX3(k, a, b, G)], -1);
                    row_add(m, c->fl[IX3(k, b, a, G)], -1);
                    if (k + 1 < N) {
                        row_add(m, c->bnd[IX3(k, a, b, G)], -1);
                        row_add(m, c->bnd[IX3(k, b, a, G)], -1);
                    }
                }
                name(nm, "nvlink_%d_%d", a, b, 0);
                row_end(m, nm, GLP_LO, 0);
            }
    }
    /* PCIe per GPU and per switch uplink. */
    for (int g = 0; g < G; g++) {
        row_begin(m);
        add_pcie_load(m, in, c, topo, g);
        row_add(m, c->T, pcie);
        name(nm, "pcie_%d", g, 0, 0);
        row_end(m, nm, GLP_LO, 0);
    }
    for (int w = 0; w < topo->n_switches; w++) {
        double up = topo->switches[w].uplink_bytes_per_s / GB;
        if (up <= 0)
            continue;
        row_begin(m);
        for (int g = 0; g < G; g++)
            if (topo->gpus[g].pcie_switch == w)
                add_pcie_load(m, in, c, topo, g);
        row_add(m, c->T, up);
        name(nm, "uplink_%d", w, 0, 0);
        row_end(m, nm, GLP_LO, 0);
    }
    /* Drain: a micro-batch's host swaps and D2D evictions leave within one forward of their
     * stage. */
    for (int k = 0; k < N; k++) {
        if (in->d2d && topo->fabric == MPRESS_FABRIC_NVSWITCH) {
            row_begin(m);
            for (int g = 0; g < G; g++)
                if (c->e[IX2(k, g, G)])
                    row_add(m, c->e[IX2(k, g, G)], 1);
            double bw = plan_port_bw(topo, k) / GB * PLAN_DRAIN_SHARE;
            for (int b = 0; b < NR; b++)
                add_y(m, in, c, k, b, -bw * RB(b).tf);
            name(nm, "drain_port_%d", k, 0, 0);
            row_end(m, nm, GLP_UP, 0);
        } else if (in->d2d) {
            for (int g = 0; g < G; g++)
                for (int a = 0; a < G; a++) {
                    double bw = plan_nvlink_bw(topo, a, g) / GB * PLAN_DRAIN_SHARE;
                    if (!c->e[IX2(k, g, G)] || !x_possible(in, k, a) || bw <= 0)
                        continue;
                    row_begin(m);
                    row_add(m, c->e[IX2(k, g, G)], 1);
                    for (int b = 0; b < NR; b++)
                        add_y(m, in, c, k, b, -bw * RB(b).tf);
                    add_x(m, in, c, k, a, bigD);
                    name(nm, "drain_nvl_%d_%d_%d", k, a, g);
                    row_end(m, nm, GLP_UP, bigD);
                }
        }
        row_begin(m);
        for (int cl = 0; cl < C; cl++)
            row_add(m, c->H[IX2(k, cl, C)], in->cls[cl].s);
        for (int b = 0; b < NR; b++)
            add_y(m, in, c, k, b, -pcie * PLAN_DRAIN_SHARE * RB(b).tf);
        name(nm, "drain_pcie_%d", k, 0, 0);
        row_end(m, nm, GLP_UP, 0);
        for (int g = 0; g < G; g++) {
            int w = topo->gpus[g].pcie_switch;
            if (!x_possible(in, k, g) || w < 0 || w >= topo->n_switches ||
                topo->switches[w].uplink_bytes_per_s <= 0)
                continue;
            double up = topo->switches[w].uplink_bytes_per_s / GB;
            row_begin(m);
            for (int q = 0; q < G; q++)
                if (topo->gpus[q].pcie_switch == w)
                    row_add(m, c->hp[q], 1);
            for (int b = 0; b < NR; b++)
                add_y(m, in, c, k, b, -up * PLAN_DRAIN_SHARE * RB(b).tf);
            add_x(m, in, c, k, g, bigD);
            add_f(m, in, c, k, 0, bigD);
            name(nm, "drain_up_%d_%d", k, g, 0);
            row_end(m, nm, GLP_UP, 2 * bigD);
        }
    }
    return m->fail ? -1 : 0;
}

/* ---- symmetry of the server ----------------------------------------------------------- */

/* Automorphisms of a direct-fabric server: GPU permutations that keep NVLink counts, GPU
 * specs and the PCIe switch grouping (with uplink rates). The cost model cannot tell a plan
 * from its image under one, so the MILP may require the last slot's GPU to be the smallest of
 * its orbit, and the slot before it the smallest of its orbit under the permutations that
 * keep the last slot's GPU: an exact cut of symmetric duplicates. */
struct sym {
    int n;
    int (*perm)[MPRESS_MAX_GPUS];
};

static int gpu_same(const struct mpress_topology *t, int a, int b)
{
    const struct mpress_topo_gpu *x = &t->gpus[a], *y = &t->gpus[b];
    int sa = x->pcie_switch, sb = y->pcie_switch;
    double ua = sa >= 0 && sa < t->n_switches ? t->switches[sa].uplink_bytes_per_s : -1;
    double ub = sb >= 0 && sb < t->n_switches ? t->switches[sb].uplink_bytes_per_s : -1;
    return x->memory_bytes == y->memory_bytes && x->reserve_bytes == y->reserve_bytes &&
           x->hbm_bytes_per_s == y->hbm_bytes_per_s && x->nvlink_ports == y->nvlink_ports &&
           ua == ub;
}

static void sym_search(const struct mpress_topology *t, int *pi, int depth, unsigned used,
                       struct sym *s, int cap)
{
    if (s->n >= cap)
        return;
    if (depth == t->n_gpus) {
        memcpy(s->perm[s->n++], pi, sizeof(int) * MPRESS_MAX_GPUS);
        return;
    }
    for (int g = 0; g < t->n_gpus; g++) {
        if (used & (1u << g) || !gpu_same(t, depth, g))
            continue;
        int ok = 1;
        for (int a = 0; a < depth && ok; a++)
            ok = t->nvlinks[a][depth] == t->nvlinks[pi[a]][g] &&
                 (t->gpus[a].pcie_switch == t->gpus[depth].pcie_switch) ==
                     (t->gpus[pi[a]].pcie_switch == t->gpus[g].pcie_switch) &&
                 /* host optimizer steps share their socket */
                 (plan_socket(t, a) == plan_socket(t, depth)) ==
                     (plan_socket(t, pi[a]) == plan_socket(t, g));
        if (!ok)
            continue;
        pi[depth] = g;
        sym_search(t, pi, depth + 1, used | (1u << g), s, cap);
    }
}

static void sym_find(const struct mpress_topology *t, struct sym *s)
{
    enum { CAP = 4096 };
    s->n = 0;
    s->perm = NULL;
    if (t->n_gpus < 2 || t->n_gpus > 12)
        return;
    s->perm = malloc(sizeof(*s->perm) * CAP);
    if (!s->perm)
        return;
    int pi[MPRESS_MAX_GPUS] = {0};
    sym_search(t, pi, 0, 0, s, CAP);
    if (s->n >= CAP) { /* too many to list: no symmetry cut (still exact) */
        free(s->perm);
        s->perm = NULL;
        s->n = 0;
    }
}

/* Smallest image of g under the automorphisms that map fix to fix_to (fix < 0: all). */
static int sym_min_image(const struct sym *s, int g, int fix, int fix_to)
{
    int best = g;
    for (int i = 0; i < s->n; i++)
        if ((fix < 0 || s->perm[i][fix] == fix_to) && s->perm[i][g] < best)
            best = s->perm[i][g];
    return best;
}

/* x_(N-1)r = 0 unless r is the least of its orbit; x_(N-1)r + x_(N-2)g <= 1 unless g is the
 * least of its orbit under the stabiliser of r. */
static void sym_cut(struct model *m, const struct inst *in, const struct cols *c,
                    const struct sym *s)
{
    const int N = in->N;
    char nm[64];
    if (!in->mapped || s->n <= 1)
        return;
    for (int r = 0; r < N; r++) {
        if (sym_min_image(s, r, -1, 0) != r) {
            glp_set_col_bnds(m->lp, c->x[IX2(N - 1, r, N)], GLP_FX, 0, 0);
            continue;
        }
        for (int g = 0; g < N; g++) {
            if (g == r || sym_min_image(s, g, r, r) == g)
                continue;
            row_begin(m);
            row_add(m, c->x[IX2(N - 1, r, N)], 1);
            row_add(m, c->x[IX2(N - 2, g, N)], 1);
            name(nm, "sym_%d_%d", r, g, 0);
            row_end(m, nm, GLP_UP, 1);
        }
    }
}

/* ---- warm start ---------------------------------------------------------------------- */

/* The MILP solution closest to assignment a: its integer decisions (stages on the last slots,
 * mapped by the automorphism that satisfies the symmetry cut, action counts, optimizer
 * placement) fixed, the continuous ones (D2D split, loads) from an LP. NULL when a does not
 * fit the MILP's decision space (cuts elsewhere) or the LP fails. */
/* GLPK accepts a heuristic solution after checking only its integrality and bounds: check the
 * rows too, so that a bad warm start can never become the incumbent. */
static int vector_feasible(glp_prob *lp, const double *x)
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

static double *warm_vector(glp_prob *lp, const struct inst *in, const struct cols *c,
                           const struct mpress_profile *p, const struct mpress_assignment *a,
                           const struct sym *s)
{
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
    if (!in->mapped) {
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
    for (int k = 0; k < N; k++) {
        int r = k - (N - S);
        if (in->host_opt)
            FIX(c->h[k], r >= 0 && a->stages[r].optimizer_on_host ? 1.0 : 0.0);
    }
    int *cnt = calloc((size_t)(N * 3 * (C ? C : 1)), sizeof(int));
    if (!cnt) {
        glp_delete_prob(cp);
        return NULL;
    }
    for (int j = 0, r = 0; j < a->n_actions; j++) {
        while (a->stages[r].last_op < a->actions[j].op)
            r++;
        int kind = a->actions[j].action;
        if (kind == MPRESS_ACTION_D2D_SWAP && !in->d2d)
            kind = MPRESS_ACTION_HOST_SWAP;
        if (kind != MPRESS_ACTION_KEEP)
            cnt[((N - S + r) * C + in->tcls[j]) * 3 + kind - 1]++;
    }
    for (int k = 0; k < N; k++)
        for (int cl = 0; cl < C; cl++) {
            FIX(c->R[IX2(k, cl, C)], cnt[(k * C + cl) * 3 + 0]);
            FIX(c->H[IX2(k, cl, C)], cnt[(k * C + cl) * 3 + 1]);
            FIX(c->D[IX2(k, cl, C)], cnt[(k * C + cl) * 3 + 2]);
        }
#undef FIX
    free(cnt);
    (void)p;
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = GLP_MSG_OFF;
    sp.presolve = GLP_OFF; /* with fixed columns its presolver returned infeasible points */
    double *x = NULL;
    if (glp_simplex(cp, &sp) == 0 && glp_get_status(cp) == GLP_OPT) {
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
    if (x && !vector_feasible(lp, x)) {
        free(x);
        x = NULL;
    }
    return x;
}

/* Maps the MILP solution back to an assignment. */
static int extract(const struct mpress_profile *p, const struct mpress_topology *topo,
                   const struct inst *in, const struct cols *c, glp_prob *lp,
                   struct mpress_assignment *a)
{
    const int N = in->N, B = in->B, C = in->C, G = N;
#define VAL(col) ((col) ? glp_mip_col_val(lp, (col)) : 0.0)
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
        /* Actions per class, in profile order: recompute, host swap, then D2D. */
        long left[3 * 4096];
        long *rl = C <= 4096 ? left : malloc(sizeof(long) * 3 * (size_t)C);
        if (!rl)
            return -1;
        for (int cl = 0; cl < C; cl++) {
            rl[3 * cl] = lround(VAL(c->R[IX2(k, cl, C)]));
            rl[3 * cl + 1] = lround(VAL(c->H[IX2(k, cl, C)]));
            rl[3 * cl + 2] = in->d2d ? lround(VAL(c->D[IX2(k, cl, C)])) : 0;
        }
        /* D2D byte targets per peer, integer, summing to the D2D bytes. */
        int64_t target[MPRESS_MAX_GPUS] = {0};
        int64_t dsum = 0, tsum = 0;
        int j = 0;
        for (int i = 0; i < st->first_op; i++)
            j += p->ops[i].n_tensors;
        int j0 = j;
        for (int i = st->first_op; i <= st->last_op; i++)
            for (int t = 0; t < p->ops[i].n_tensors; t++, j++) {
                int cl = in->tcls[j];
                struct mpress_plan_action *ac = &a->actions[j];
                enum mpress_action kind = MPRESS_ACTION_KEEP;
                for (int q = 0; q < 3; q++)
                    if (rl[3 * cl + q] > 0) {
                        rl[3 * cl + q]--;
                        kind = (enum mpress_action)(q + 1);
                        break;
                    }
                ac->action = kind;
                ac->n_peers = 0;
                ac->evict_after_op = kind == MPRESS_ACTION_KEEP ? -1 : i;
                ac->prefetch_before_op = plan_prefetch_point(kind, i, st->last_op);
                if (kind == MPRESS_ACTION_D2D_SWAP)
                    dsum += (int64_t)p->ops[i].tensors[t].bytes;
            }
        if (rl != left)
            free(rl);
        int best = -1;
        for (int g = 0; g < G; g++) {
            if (!c->e[IX2(k, g, G)] || plan_nvlink_bw(topo, st->gpu, g) <= 0)
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
        /* Every D2D tensor is striped over the peers in proportion to their targets, so that
         * each NVLink carries its share of every eviction as the forward produces it (a peer
         * fed only the last layers' tensors would still be copying when the backward starts).
         * Floors first, then the leftover bytes to peers with room: the shares of each tensor
         * sum to its bytes and each peer's total to its target. */
        int64_t rest = dsum;
        for (j = j0; j < a->n_actions && a->actions[j].op <= st->last_op; j++) {
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
        prev_end = last;
        S++;
    }
    a->n_stages = S;
#undef VAL
    return 0;
}

struct solve {
    struct model m;
    struct cols cols;
    struct sym sym;
    struct cb_ctx cb;
};

int mpress_plan_ilp(const struct mpress_profile *p, const struct mpress_topology *topo,
                    const struct mpress_plan_options *o, struct mpress_assignment *out,
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
    int rc = inst_build(p, topo, o, &in, err);
    if (rc)
        return rc;
    rc = mpress_assignment_init(out, p, err);
    if (rc) {
        inst_free(&in);
        return rc;
    }

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
        /* GLPK failed inside: its environment is unusable and must be freed whole. */
        glp_free_env();
        sv->m.lp = NULL;
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "the GLPK solver failed internally");
        goto done;
    }
    struct model *m = &sv->m;
    sv->cb.o = o;
    sv->cb.incumbent = -1;
    m->lp = glp_create_prob();
    glp_set_prob_name(m->lp, "mpress_plan");
    glp_set_obj_dir(m->lp, GLP_MIN);
    if (build(m, &in, topo, o->schedule, &sv->cols)) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory while building the MILP");
        goto done;
    }
    sym_find(topo, &sv->sym);
    sym_cut(m, &in, &sv->cols, &sv->sym);
    stats->rows = glp_get_num_rows(m->lp);
    stats->cols = glp_get_num_cols(m->lp);
    stats->integer_cols = glp_get_num_int(m->lp);
    stats->nonzeros = glp_get_num_nz(m->lp);
    if (o->dump_lp && glp_write_lp(m->lp, NULL, o->dump_lp) != 0) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "cannot write '%s'", o->dump_lp);
        goto done;
    }
    glp_scale_prob(m->lp, GLP_SF_AUTO);
    if (o->warm_start)
        sv->cb.heur = warm_vector(m->lp, &in, &sv->cols, p, o->warm_start, &sv->sym);
    /* The relaxation first, so that glp_intopt can run without its presolver and accept the
     * warm start in the problem's own columns. */
    glp_smcp sparm;
    glp_init_smcp(&sparm);
    sparm.msg_lev = GLP_MSG_OFF;
    int sret = glp_simplex(m->lp, &sparm);
    if (sret == 0 && glp_get_status(m->lp) == GLP_NOFEAS) {
        snprintf(stats->status, sizeof(stats->status), "infeasible");
        rc = mpress_error_set(err, MPRESS_EINFEASIBLE, "no assignment fits in memory");
        goto done;
    }
    if (sret != 0 || glp_get_status(m->lp) != GLP_OPT) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "GLPK glp_simplex failed (code %d)", sret);
        goto done;
    }
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_OFF;
    parm.mip_gap = o->mip_gap;
    /* Measured on the planner benchmark (docs/benchmarks.md, "Solver settings"). With the
     * mapping decided (dgx1): pseudo-cost branching without cuts. No other GLPK setting
     * (cuts, preprocessing, backtracking, heuristics) helped across instances: each one that
     * saved nodes on one case cost them on a case perturbed by rounding. With the mapping
     * fixed (NVSwitch): Driebeck-Tomlin branching with MIR, Gomory and cover cuts; Gomory and
     * cover cuts together narrow most node-limited gaps (gpt-20b on 16 GPUs: 21 % -> 17 %),
     * neither does alone. */
    if (in.mapped) {
        parm.br_tech = GLP_BR_PCH;
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
    parm.cb_info = &sv->cb;
    int ret = glp_intopt(m->lp, &parm);
    int status = glp_mip_status(m->lp);
    if (ret == GLP_ENOPFS || status == GLP_NOFEAS) {
        snprintf(stats->status, sizeof(stats->status), "infeasible");
        rc = mpress_error_set(err, MPRESS_EINFEASIBLE, "no assignment fits in memory");
        goto done;
    }
    if (ret != 0 && ret != GLP_ETMLIM && ret != GLP_ESTOP && ret != GLP_EMIPGAP) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "GLPK glp_intopt failed (code %d)", ret);
        goto done;
    }
    if (status != GLP_OPT && status != GLP_FEAS) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM,
                              "the solver stopped (%s) before finding any plan",
                              ret == GLP_ETMLIM ? "time limit" : "node limit");
        goto done;
    }
    stats->objective = glp_mip_obj_val(m->lp);
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
    stats->nodes = sv->cb.nodes;
    if (extract(p, topo, &in, &sv->cols, m->lp, out)) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "cannot map the MILP solution back to a plan");
        goto done;
    }
    rc = 0;
done:
    if (sv) {
        if (sv->m.lp)
            glp_delete_prob(sv->m.lp);
        free(sv->m.r.ind);
        free(sv->m.r.val);
        free(sv->m.pos);
        cols_free(&sv->cols);
        free(sv->sym.perm);
        free(sv->cb.heur);
        free(sv);
    }
    glp_error_hook(NULL, NULL);
    glp_term_hook(NULL, NULL);
    inst_free(&in);
    if (rc)
        mpress_assignment_finish(out);
    return rc;
}
