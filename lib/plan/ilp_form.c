/* The planner's MILP (GLPK): stage partition, stage -> GPU mapping, per-class action counts,
 * D2D byte shares and optimizer placement, minimising the predicted iteration time of the
 * cost model in eval.c. Its optimum, mapped back to an assignment and re-evaluated by
 * mpress_plan_evaluate, gives the same time (tests/plan/test_exact.c checks this against
 * exhaustive enumeration). This file builds it (the host, product, link and drain rows in
 * ilp_links.c, the optimizer tail in ilp_tail.c); ilp_solve.c solves it. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "ilp_form_internal.h"

/*
 * The formulation. Slots k = 0..N-1 (N = GPUs), blocks (runs of ops between allowed cuts)
 * grouped into runs r of len_r identical consecutive blocks (a transformer's layers), classes c
 * (saved tensors with equal op kind, role, bytes and recompute time: interchangeable), GPUs g.
 * Stages are slots; empty slots come first, so slot k's in-flight count n_k = min(N - k, M)
 * (GPipe: M) and weight versions v_k (async: n_k, else 1) are constants.
 *
 * Per-block constants of run r: T_r fwd+bwd s, Tf_r fwd s, P_r/Gr_r/O_r weight/gradient/
 * optimizer bytes, A_r saved bytes, W_r largest workspace, X_r output bytes of its last op,
 * cnt_rc tensors of class c. Class constants: s_c bytes, r_c recompute s.
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
 *           + ws_k + 2 (O_(k-1) + O_k) - v_k Pt tsh_k
 *   (tied word embedding: form_memory_terms, docs/cost-model.md)
 * Constraints
 *   f_kr <= w_kr <= len_r f_kr,  len_r f_k(r+1) <= w_kr,  w_kr <= w_(k+1)r,
 *   w_(N-2)(last run) <= len - 1 (the last slot is used),  sum_r y_kr >= f_k0 (k >= 1)
 *   sum_g x_kg = 1,  sum_k x_kg = 1;  symmetry cut (sym_cut) on direct fabrics
 *   R_kc + H_kc + D_kc <= sum_r cnt_rc y_kr;   sum_c s_c D_kc = sum_g e_kg
 *   e_kg <= BigD sum_{a: NVLink a-g} x_ka
 *   C_k = sum_r T_r y_kr + sum_c r_c R_kc;   ws_k >= W_r ct_kr,  ct_kr >= y_kr / len_r
 *   ov_k >= sum_r O_r y_kr - BigO h_k;   oh_k >= sum_r O_r y_kr - BigO (1 - h_k)
 *   Mem_k + sum_j n_j e_jg <= cap_g (1 - margin) - reserve_g + BigM (1 - x_kg)   all k, g
 *   sum_r (v_k P_r + Gr_r) y_kr + ov_k - v_k Pt tsh_k + Gt tx_k
 *       <= cap_g (1 - margin) - reserve_g + BigM (1 - x_kg)   (the tied exchange's moment)
 *   ov_k, oh_k rows: less Ot tsh_k (one matrix's states on a shared stage)
 *   sum_k n_k Hb_k + sum_k oh_k <= host memory
 *   T >= C_k
 *   more than 8 slots, fixed mapping, host optimizers (ilp_lm_on), each run r of len_r > 1:
 *   lm_r in {0..len_r} (the most blocks of r in one slot):  y_kr <= lm_r,  T >= T_r lm_r
 *   (valid: T >= C_k >= T_r y_kr; branched on first, ilp_solve.c)
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
 *   tail (eval.c, optimizer_tail; times from slot 0's last backward):
 *   dr_k = sum_(j<k) (sum_r (T_r - Tf_r) y_jr + sum_c r_c R_jc) (the drain: k's last backward
 *   ends that early), fi_k = sum_(j<k) sum_r Tf_r y_jr (the next fill reaches k that late),
 *   slack_k = dr_k + fi_k
 *   TT >= opt_k / hbm_g - slack_k - BigT (1 - x_kg) - BigT h_k,
 *         opt_k = sum_r U_r y_kr   (U: optimizer-step traffic, mpress_optimizer_step_traffic)
 *   TT >= opt_k / max_g hbm_g - slack_k   (tail_any: where every run's host step is longer)
 *   ot_k >= opt_k - BigOT (1 - h_k)
 *   ots_kq >= ot_k - BigOT (1 - sum_(g on socket q) x_kg)   (mapped, several sockets)
 *   sock_free (ILP_SOCKET_FREE): sk_kq in {0,1}, sum_q sk_kq = 1, sum_k sk_kq = GPUs on q,
 *   sk_(N-1)0 = 1 where the sockets hold as many GPUs each; sk_kq for sum_(g on q) x_kg in
 *   the ots rows and the host chains, and the chains of one step alone once more with ot_k
 *   and no socket term (the fixed mapping's rows, which hold on any socket)
 *   pt_kq = sum_(i<=k) ots_iq   (fixed mapping or one socket: ot_i of the slots on q)
 *   host steps: one CPU queue per socket, in the order the gradients arrive (slots N-1 down;
 *   with a split tied matrix N-2 down to the owner's slot m + 1, then N-1, then m); for every
 *   chain of that queue from step j to step k (k's end waits for j's arrival and the touch
 *   of the steps between):
 *     TT >= -dr_j + Gr_j / pcie + (touch of the chain) / host_bw_socket + P_k / pcie - fi_k
 *           - BigH (2 - h_j - h_k) - BigH (sockets of j, k) - BigH (condition on tx)
 *     with XE for -dr_j where j is a tied step
 *   tied matrix split over two slots (tx_j = tx_k = 1, j < k = N-1; the copy's block sits
 *   in the last slot), c_ab = Gt / bw(a, b):
 *     XE >= c_min tx_k;  XE >= sum_b c_ab x_kb - BigC (1 - x_ja) - BigC (2 - tx_j - tx_k)
 *     the GPU rows again with + XE - fi_k for - slack_k, less (BigT + BigC) (1 - tx_k): both
 *     steps wait for the exchange after stage 0's last backward
 * Objective
 *   min sum_k C_k + (M - 1) T + sum_k,a,b 2 bnd_kab / bw(a,b) + TT
 */

void ilp_cols_free(struct cols *c)
{
    free(c->w), free(c->f), free(c->ct);
    free(c->x), free(c->h), free(c->R), free(c->H), free(c->D), free(c->e);
    free(c->C), free(c->ws), free(c->ov), free(c->oh), free(c->ot), free(c->hp);
    free(c->bnd), free(c->fl), free(c->ots), free(c->sk);
    free(c->tx), free(c->tsh), free(c->dr), free(c->fi), free(c->pt);
    free(c->st), free(c->lm);
}

/* Sums over the blocks and the big-M constants of the rows below. */
static void form_consts(struct form *f)
{
    const struct inst *in = f->in;
    const struct mpress_topology *topo = f->topo;
    const int B = in->B, M = in->M, G = in->N;
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
    f->bigD = sumA, f->bigO = sumO, f->bigX = sumX;
    /* Largest Mem_k + parked: every state with all versions, all activations of M micro-batches
     * for the stage and as parked bytes, workspace and four buffers. */
    f->bigM = (M + 1) * sumPG + sumO + 2.0 * M * sumA + maxW + 4 * sumX + 1;
    double min_hbm = 1e300;
    for (int g = 0; g < G; g++)
        if (topo->gpus[g].hbm_bytes_per_s > 0)
            min_hbm = fmin(min_hbm, topo->gpus[g].hbm_bytes_per_s / GB);
    /* The big-M of the tail rows: just above the longest step. Padded by a second, they let
     * GLPK's feasibility tolerance (1e-7 relative to the row's bound) shorten a tail of
     * microseconds by tenths of a microsecond. */
    f->bigT = min_hbm < 1e300 ? sumOT / min_hbm * (1 + 1e-3) : 0;
    f->pcie = topo->pcie_bytes_per_s / GB;
    f->hsock = topo->host_memory_bytes_per_s / GB; /* per socket */
    f->NK = topo->n_sockets > 0 ? topo->n_sockets : 1;
    /* Which socket a slot's host step runs on is decided with the mapping. */
    f->split_sockets = in->host_opt && (in->mapped || in->sock_free) && f->NK > 1;
    f->bigH = (sumGP / f->pcie + sumOT / (f->hsock > 0 ? f->hsock : 1)) * (1 + 1e-3);
    f->sumOT = sumOT;
    /* tail_any's bandwidth: the fastest GPU's, when every GPU has one and every run's host
     * step takes at least its step there (else 0: no such rows). */
    double hbm_max = 0;
    int all_hbm = 1;
    for (int g = 0; g < G; g++) {
        hbm_max = fmax(hbm_max, topo->gpus[g].hbm_bytes_per_s / GB);
        all_hbm = all_hbm && topo->gpus[g].hbm_bytes_per_s > 0;
    }
    f->hbm_any = all_hbm ? hbm_max : 0;
    for (int r = 0; f->hbm_any > 0 && in->host_opt && r < in->NR; r++)
        if (RB(r).gp / f->pcie + RB(r).opt_touch / (f->hsock > 0 ? f->hsock : 1) <
            RB(r).opt_touch / hbm_max)
            f->hbm_any = 0;
}

static int cols_alloc(struct cols *c, const struct inst *in, int NK)
{
    const int N = in->N, C = in->C, G = N, NR = in->NR;
    c->w = calloc((size_t)(N * NR), sizeof(int));
    c->f = calloc((size_t)(N * NR), sizeof(int));
    c->ct = calloc((size_t)(N * NR), sizeof(int));
    c->lm = calloc((size_t)NR, sizeof(int));
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
    c->sk = calloc((size_t)(N * NK), sizeof(int));
    c->hp = calloc((size_t)G, sizeof(int));
    c->bnd = calloc((size_t)(N * G * G), sizeof(int));
    c->fl = calloc((size_t)(N * G * G), sizeof(int));
    c->tx = calloc((size_t)N, sizeof(int));
    c->tsh = calloc((size_t)N, sizeof(int));
    c->dr = calloc((size_t)N, sizeof(int));
    c->pt = calloc((size_t)(N * NK), sizeof(int));
    c->fi = calloc((size_t)N, sizeof(int));
    c->st = calloc((size_t)(N * NR), sizeof(int));
    if (!c->tx || !c->tsh || !c->dr || !c->pt || !c->fi || !c->st)
        return -1;
    if (!c->w || !c->f || !c->ct || !c->x || !c->h || !c->R || !c->H || !c->D || !c->e ||
        !c->C || !c->ws ||
        !c->ov || !c->oh || !c->ot || !c->ots || !c->sk || !c->hp || !c->bnd || !c->fl)
        return -1;
    return 0;
}

/* Stages of at most cap seconds that cutting the blocks greedily from the first needs (INT_MAX
 * when one block alone is longer): the fewest of any cut, since taking a block into the
 * current stage never leaves more blocks for the stages after it. */
static int stages_needed(const struct inst *in, double cap)
{
    int n = 1;
    double run = 0;
    for (int b = 0; b < in->B; b++) {
        if (in->blk[b].t > cap)
            return INT_MAX;
        if (run + in->blk[b].t > cap)
            n++, run = 0;
        run += in->blk[b].t;
    }
    return n;
}

/* Bisection on the greedy test (the linear partition problem); lo never admits a cut into N
 * stages, so it stays below the least largest stage, and 100 halvings bring it within rounding
 * of it. */
double ilp_cycle_floor(const struct inst *in)
{
    double lo = 0, hi = 0;
    for (int b = 0; b < in->B; b++)
        hi += in->blk[b].t;
    for (int i = 0; i < 100 && hi > lo; i++) {
        double mid = 0.5 * (lo + hi);
        if (stages_needed(in, mid) <= in->N)
            hi = mid;
        else
            lo = mid;
    }
    return lo * (1 - 1e-9);
}

/* Where the mapping is fixed, the relaxation's weakest part past the memory wall is the
 * optimizer placement: fractional h_k buy each slot's optimizer memory at a fraction of its
 * host step, so a node whose partition is integral still sits 4 % below its best plan
 * (gpt3-13b on dgx2-8: 7.2821 s against 7.6026 s), and is exact once h is integral too. On up
 * to ILP_HOST_FIRST_MAX slots (at most 256 placements) branching on h first closes such
 * cases; on 16 slots the placements outnumber what a node limit can visit and the cycle's
 * floor, which the relaxation cannot see (it spreads the first blocks over every slot), does
 * more. docs/benchmarks.md, "The optimizer placement first", has the measurements. */
int ilp_host_first(const struct inst *in)
{
    return (!in->mapped || (in->branch & ILP_MAP_SEARCH)) && in->host_opt &&
           (in->N <= ILP_HOST_FIRST_MAX || (in->branch & ILP_BRANCH_HOST_FIRST));
}

int ilp_lm_on(const struct inst *in)
{
    return ilp_floor_on(in) && !(in->branch & ILP_NO_MOST);
}

int ilp_floor_on(const struct inst *in)
{
    return !in->mapped && in->host_opt && !ilp_host_first(in);
}

/* sock_free: slot k's host step on socket q (sk_kq), as many slots to a socket as it has GPUs;
 * where every socket has as many, the last slot's is socket 0 (the sockets are alike then). */
static void form_socket_choice(struct form *f)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    struct cols *c = f->c;
    const int N = in->N, NK = f->NK;
    int cap[MPRESS_MAX_GPUS] = {0}, alike = 1;
    char nm[64];
    for (int g = 0; g < N; g++)
        cap[plan_socket(f->topo, g)]++;
    for (int q = 1; q < NK; q++)
        alike = alike && cap[q] == cap[0];
    for (int k = 0; k < N; k++)
        for (int q = 0; q < NK; q++) {
            ilp_name(nm, "sk_%d_%d", k, q, 0);
            c->sk[IX2(k, q, NK)] = ilp_col_new(m, nm, GLP_BV, 0, 1, 0);
            if (alike && k == N - 1)
                glp_set_col_bnds(m->lp, c->sk[IX2(k, q, NK)], GLP_FX, q == 0, q == 0);
        }
    for (int k = 0; k < N; k++) {
        ilp_row_begin(m);
        for (int q = 0; q < NK; q++)
            ilp_row_add(m, c->sk[IX2(k, q, NK)], 1);
        ilp_name(nm, "socket_one_%d", k, 0, 0);
        ilp_row_end(m, nm, GLP_FX, 1);
    }
    for (int q = 0; q < NK; q++) {
        ilp_row_begin(m);
        for (int k = 0; k < N; k++)
            ilp_row_add(m, c->sk[IX2(k, q, NK)], 1);
        ilp_name(nm, "socket_gpus_%d", q, 0, 0);
        ilp_row_end(m, nm, GLP_FX, cap[q]);
    }
}

/* Columns, in the order the LP dump lists them. */
static void form_columns(struct form *f)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    const struct mpress_topology *topo = f->topo;
    struct cols *c = f->c;
    const int N = in->N, NR = in->NR, C = in->C, M = in->M, G = N;
    char nm[64];
    const int NK = f->NK, split_sockets = f->split_sockets;
    for (int k = 0; k + 1 < N; k++)
        for (int r = 0; r < NR; r++) {
            int len = in->run_len[r];
            ilp_name(nm, "w_%d_%d", k, r, 0);
            c->w[IX2(k, r, NR)] = ilp_col_new(m, nm, len == 1 ? GLP_BV : GLP_IV, 0, len, 0);
            if (len > 1) {
                ilp_name(nm, "f_%d_%d", k, r, 0);
                c->f[IX2(k, r, NR)] = ilp_col_new(m, nm, GLP_BV, 0, 1, 0);
            }
        }
    for (int r = 0; r < NR; r++)
        if (in->run_len[r] > 1 && ilp_lm_on(in)) {
            ilp_name(nm, "lm_%d", r, 0, 0);
            c->lm[r] = ilp_col_new(m, nm, GLP_IV, 0, in->run_len[r], 0);
        }
    for (int k = 0; k < N; k++)
        for (int r = 0; r < NR; r++)
            if (in->run_len[r] > 1 && RB(r).w > 0) {
                ilp_name(nm, "ct_%d_%d", k, r, 0);
                c->ct[IX2(k, r, NR)] = ilp_col_new(m, nm, GLP_BV, 0, 1, 0);
            }
    if (in->mapped)
        for (int k = 0; k < N; k++)
            for (int g = 0; g < G; g++) {
                ilp_name(nm, "x_%d_%d", k, g, 0);
                c->x[IX2(k, g, G)] = ilp_col_new(m, nm, GLP_BV, 0, 1, 0);
            }
    for (int k = 0; k < N; k++) {
        ilp_name(nm, "C_%d", k, 0, 0);
        c->C[k] = ilp_col_new(m, nm, GLP_CV, 0, -1, 1.0);
        ilp_name(nm, "ws_%d", k, 0, 0);
        c->ws[k] = ilp_col_new(m, nm, GLP_CV, 0, -1, 0);
        ilp_name(nm, "ov_%d", k, 0, 0);
        c->ov[k] = ilp_col_new(m, nm, GLP_CV, 0, -1, 0);
        if (in->host_opt) {
            ilp_name(nm, "h_%d", k, 0, 0);
            c->h[k] = ilp_col_new(m, nm, GLP_BV, 0, 1, 0);
            ilp_name(nm, "oh_%d", k, 0, 0);
            c->oh[k] = ilp_col_new(m, nm, GLP_CV, 0, -1, 0);
            ilp_name(nm, "ot_%d", k, 0, 0);
            c->ot[k] = ilp_col_new(m, nm, GLP_CV, 0, -1, 0);
            for (int q = 0; split_sockets && q < NK; q++) {
                ilp_name(nm, "ots_%d_%d", k, q, 0);
                c->ots[IX2(k, q, NK)] = ilp_col_new(m, nm, GLP_CV, 0, -1, 0);
            }
        }
        for (int cl = 0; cl < C; cl++) {
            ilp_name(nm, "R_%d_%d", k, cl, 0);
            c->R[IX2(k, cl, C)] = ilp_col_new(m, nm, GLP_IV, 0, -1, 0);
            ilp_name(nm, "H_%d_%d", k, cl, 0);
            c->H[IX2(k, cl, C)] = ilp_col_new(m, nm, GLP_IV, 0, -1, 0);
            if (in->d2d) {
                ilp_name(nm, "D_%d_%d", k, cl, 0);
                c->D[IX2(k, cl, C)] = ilp_col_new(m, nm, GLP_IV, 0, -1, 0);
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
                ilp_name(nm, "e_%d_%d", k, g, 0);
                c->e[IX2(k, g, G)] = ilp_col_new(m, nm, GLP_CV, 0, -1, 0);
            }
    }
    if (split_sockets && in->sock_free)
        form_socket_choice(f);
    c->T = ilp_col_new(m, "T", GLP_CV, ilp_floor_on(in) ? ilp_cycle_floor(in) : 0, -1,
                       (double)(M - 1));
    c->TT = ilp_col_new(m, "TT", GLP_CV, 0, -1, 1.0);
    for (int g = 0; g < G; g++) {
        ilp_name(nm, "hp_%d", g, 0, 0);
        c->hp[g] = ilp_col_new(m, nm, GLP_CV, 0, -1, 0);
    }
    for (int k = 0; k + 1 < N; k++)
        for (int a = 0; a < G; a++)
            for (int b = 0; b < G; b++) {
                if (a == b || !x_possible(in, k, a) || !x_possible(in, k + 1, b))
                    continue;
                ilp_name(nm, "bnd_%d_%d_%d", k, a, b);
                c->bnd[IX3(k, a, b, G)] =
                    ilp_col_new(m, nm, GLP_CV, 0, -1, 2.0 / (plan_boundary_bw(topo, a, b) / GB));
            }
    for (int k = 0; k < N; k++)
        for (int a = 0; a < G; a++)
            for (int b = 0; b < G; b++) {
                if (!x_possible(in, k, a) || !c->e[IX2(k, b, G)] ||
                    plan_nvlink_bw(topo, a, b) <= 0)
                    continue;
                ilp_name(nm, "fl_%d_%d_%d", k, a, b);
                c->fl[IX3(k, a, b, G)] = ilp_col_new(m, nm, GLP_CV, 0, -1, 0);
            }
}

/* Partition: slots take prefixes of the block sequence, run by run; the mapping is a
 * permutation. */
static void form_partition(struct form *f)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    struct cols *c = f->c;
    const int N = in->N, NR = in->NR, G = N;
    char nm[64];
    for (int k = 0; k + 1 < N; k++)
        for (int r = 0; r < NR; r++) {
            int len = in->run_len[r];
            if (len > 1) { /* f <= w <= len f */
                ilp_row_begin(m);
                add_f(m, in, c, k, r, 1);
                add_w(m, in, c, k, r, -1);
                ilp_name(nm, "begun_lo_%d_%d", k, r, 0);
                ilp_row_end(m, nm, GLP_UP, 0);
                ilp_row_begin(m);
                add_w(m, in, c, k, r, 1);
                add_f(m, in, c, k, r, -len);
                ilp_name(nm, "begun_hi_%d_%d", k, r, 0);
                ilp_row_end(m, nm, GLP_UP, 0);
            }
            if (r + 1 < NR) { /* run r+1 begins only after run r is complete */
                ilp_row_begin(m);
                add_f(m, in, c, k, r + 1, len);
                add_w(m, in, c, k, r, -1);
                ilp_name(nm, "stair_r_%d_%d", k, r, 0);
                ilp_row_end(m, nm, GLP_UP, 0);
            }
            if (k + 2 < N) {
                ilp_row_begin(m);
                add_w(m, in, c, k, r, 1);
                add_w(m, in, c, k + 1, r, -1);
                ilp_name(nm, "stair_k_%d_%d", k, r, 0);
                ilp_row_end(m, nm, GLP_UP, 0);
            }
        }
    /* The most blocks of a run in one slot, and the cycle it implies. */
    for (int r = 0; r < NR; r++) {
        if (!c->lm[r])
            continue;
        for (int k = 0; k < N; k++) {
            ilp_row_begin(m);
            add_y(m, in, c, k, r, 1);
            ilp_row_add(m, c->lm[r], -1);
            ilp_name(nm, "most_%d_%d", k, r, 0);
            ilp_row_end(m, nm, GLP_UP, 0);
        }
        ilp_row_begin(m);
        ilp_row_add(m, c->T, 1);
        ilp_row_add(m, c->lm[r], -RB(r).t);
        ilp_name(nm, "cycle_most_%d", r, 0, 0);
        ilp_row_end(m, nm, GLP_LO, 0);
    }
    if (N >= 2) { /* the last slot is never empty: it holds the last block */
        int r = NR - 1;
        glp_set_col_bnds(m->lp, c->w[IX2(N - 2, r, NR)], in->run_len[r] == 1 ? GLP_FX : GLP_DB,
                         0, in->run_len[r] - 1);
    }
    for (int k = 1; k < N; k++) { /* empty slots only before the first used one */
        ilp_row_begin(m);
        for (int r = 0; r < NR; r++)
            add_y(m, in, c, k, r, 1);
        add_f(m, in, c, k, 0, -1);
        ilp_name(nm, "nonempty_%d", k, 0, 0);
        ilp_row_end(m, nm, GLP_LO, 0);
    }
    /* Mapping: a permutation. */
    if (in->mapped) {
        for (int k = 0; k < N; k++) {
            ilp_row_begin(m);
            for (int g = 0; g < G; g++)
                add_x(m, in, c, k, g, 1);
            ilp_name(nm, "map_slot_%d", k, 0, 0);
            ilp_row_end(m, nm, GLP_FX, 1);
        }
        for (int g = 0; g < G; g++) {
            ilp_row_begin(m);
            for (int k = 0; k < N; k++)
                add_x(m, in, c, k, g, 1);
            ilp_name(nm, "map_gpu_%d", g, 0, 0);
            ilp_row_end(m, nm, GLP_FX, 1);
        }
    }
}

/* Slot k: action counts, the D2D split and its reach, compute time and workspace. */
static void form_slot_actions(struct form *f, int k)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    const struct mpress_topology *topo = f->topo;
    struct cols *c = f->c;
    const int N = in->N, NR = in->NR, C = in->C, G = N;
    char nm[64];
    const double bigD = f->bigD;
    for (int cl = 0; cl < C; cl++) {
        ilp_row_begin(m);
        ilp_row_add(m, c->R[IX2(k, cl, C)], 1);
        ilp_row_add(m, c->H[IX2(k, cl, C)], 1);
        if (in->d2d)
            ilp_row_add(m, c->D[IX2(k, cl, C)], 1);
        for (int b = 0; b < NR; b++)
            if (in->cnt[in->run_first[b] * C + cl])
                add_y(m, in, c, k, b, -(double)in->cnt[in->run_first[b] * C + cl]);
        ilp_name(nm, "count_%d_%d", k, cl, 0);
        ilp_row_end(m, nm, GLP_UP, 0);
    }
    if (in->d2d) {
        ilp_row_begin(m);
        for (int cl = 0; cl < C; cl++)
            ilp_row_add(m, c->D[IX2(k, cl, C)], in->cls[cl].s);
        for (int g = 0; g < G; g++)
            ilp_row_add(m, c->e[IX2(k, g, G)], -1);
        ilp_name(nm, "d2d_split_%d", k, 0, 0);
        ilp_row_end(m, nm, GLP_FX, 0);
        if (in->mapped)
            for (int g = 0; g < G; g++) {
                if (!c->e[IX2(k, g, G)])
                    continue;
                ilp_row_begin(m);
                ilp_row_add(m, c->e[IX2(k, g, G)], 1);
                for (int a = 0; a < G; a++)
                    if (plan_nvlink_bw(topo, a, g) > 0)
                        add_x(m, in, c, k, a, -bigD);
                ilp_name(nm, "reach_%d_%d", k, g, 0);
                ilp_row_end(m, nm, GLP_UP, 0);
            }
    }
    /* Compute time. */
    ilp_row_begin(m);
    ilp_row_add(m, c->C[k], 1);
    for (int b = 0; b < NR; b++)
        add_y(m, in, c, k, b, -RB(b).t);
    for (int cl = 0; cl < C; cl++)
        ilp_row_add(m, c->R[IX2(k, cl, C)], -in->cls[cl].r);
    ilp_name(nm, "compute_%d", k, 0, 0);
    ilp_row_end(m, nm, GLP_FX, 0);
    /* Workspace: the largest of the runs present in the slot. */
    for (int b = 0; b < NR; b++) {
        if (RB(b).w <= 0)
            continue;
        ilp_row_begin(m);
        ilp_row_add(m, c->ws[k], 1);
        if (in->run_len[b] == 1) {
            add_y(m, in, c, k, b, -RB(b).w);
            ilp_name(nm, "ws_%d_%d", k, b, 0);
        } else {
            ilp_row_add(m, c->ct[IX2(k, b, NR)], -RB(b).w);
            ilp_name(nm, "ws_%d_%d", k, b, 0);
            ilp_row_end(m, nm, GLP_LO, 0);
            ilp_row_begin(m); /* ct_kr >= y_kr / len */
            ilp_row_add(m, c->ct[IX2(k, b, NR)], 1);
            add_y(m, in, c, k, b, -1.0 / in->run_len[b]);
            ilp_name(nm, "ct_%d_%d", k, b, 0);
        }
        ilp_row_end(m, nm, GLP_LO, 0);
    }
}

/* Slot k: optimizer bytes on the GPU or the host, and its GPU optimizer step in the tail
 * (ilp_tail.c). */
static void form_slot_optimizer(struct form *f, int k)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    struct cols *c = f->c;
    const int NR = in->NR;
    char nm[64];
    const double sumOT = f->sumOT, bigO = f->bigO;
    const int NK = f->NK, split_sockets = f->split_sockets;
    /* Optimizer bytes on GPU / host. */
    ilp_row_begin(m);
    ilp_row_add(m, c->ov[k], 1);
    for (int b = 0; b < NR; b++)
        add_y(m, in, c, k, b, -RB(b).o);
    ilp_row_add(m, c->tsh[k], in->tied_o);
    if (in->host_opt)
        ilp_row_add(m, c->h[k], bigO);
    ilp_name(nm, "opt_gpu_%d", k, 0, 0);
    ilp_row_end(m, nm, GLP_LO, 0);
    if (in->host_opt) {
        ilp_row_begin(m);
        ilp_row_add(m, c->oh[k], 1);
        for (int b = 0; b < NR; b++)
            add_y(m, in, c, k, b, -RB(b).o);
        ilp_row_add(m, c->tsh[k], in->tied_o);
        ilp_row_add(m, c->h[k], -bigO);
        ilp_name(nm, "opt_host_%d", k, 0, 0);
        ilp_row_end(m, nm, GLP_LO, -bigO);
        ilp_row_begin(m);
        ilp_row_add(m, c->ot[k], 1);
        for (int b = 0; b < NR; b++)
            add_y(m, in, c, k, b, -RB(b).opt_touch);
        ilp_row_add(m, c->h[k], -sumOT);
        ilp_name(nm, "opt_touch_%d", k, 0, 0);
        ilp_row_end(m, nm, GLP_LO, -sumOT);
        /* ots_kq: ot_k when slot k's GPU sits on socket q (mapped, several sockets). */
        for (int q = 0; split_sockets && q < NK; q++) {
            ilp_row_begin(m);
            ilp_row_add(m, c->ots[IX2(k, q, NK)], 1);
            ilp_row_add(m, c->ot[k], -1);
            ilp_add_on_socket(f, k, q, -sumOT);
            ilp_name(nm, "opt_socket_%d_%d", k, q, 0);
            ilp_row_end(m, nm, GLP_LO, -sumOT);
        }
    }
    ilp_form_slot_tail(f, k);
}

/* 1 x [slot k holds run r] for a run of one block or one with a ct column (else nothing). */
static int add_holds(struct model *m, const struct inst *in, const struct cols *c, int k, int r,
                     double coef)
{
    if (in->run_len[r] == 1) {
        add_y(m, in, c, k, r, coef);
        return 1;
    }
    if (!c->ct[IX2(k, r, in->NR)])
        return 0;
    ilp_row_add(m, c->ct[IX2(k, r, in->NR)], coef);
    return 1;
}

/* a_k - b_k for "slot k holds run r" of runs of one block: f_kr - f_(k-1)r. */
static void add_holds1(struct model *m, const struct inst *in, const struct cols *c, int k,
                       int r, double coef)
{
    add_f(m, in, c, k, r, coef);
    add_f(m, in, c, k - 1, r, -coef);
}

/* Memory terms of the tied word embedding and of held stage inputs (eval.c, gpu_memory):
 *   tx_k >= |t_ko - t_kc| (slot k holds one side of the tied matrix: it receives the other's
 *   gradient after its backward pass; also tx_k <= t_ko + t_kc, 2 - t_ko - t_kc, so that it
 *   is exact), tsh_k <= t_ko, t_kc (it holds both: one matrix), with
 *   t_kr = f_kr - f_(k-1)r for the owner's and the copy's runs (one block each);
 *   held stage inputs: for each run r and class c with xcls_rc = h_rc > 0 (tensors of c in a
 *   block of r whose recompute reaches into the block before), slot k >= 1 with n_k > 1:
 *   st_kr >= [k holds r] - sum_(r'<r) y_kr' + f_(k-1)0 - 1 (slot k opens with run r after a
 *   used slot) and  R_kc + h_rc st_kr <= sum_r' cnt_r'c y_kr'  (held_kr_c: such a tensor is
 *   not recomputed where its block opens the slot: it would be held as received, which costs
 *   what keeping it costs and its recompute besides, so keeping it is never worse; the
 *   extraction gives it a kept or swapped place, ilp_extract.c). With n_k = 1 held and
 *   evicted take the same memory and the recompute costs what the evaluator charges. */
static void form_memory_terms(struct form *f)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    struct cols *c = f->c;
    const int N = in->N, NR = in->NR, C = in->C;
    char nm[64];
    for (int k = 0; k < N && in->tied; k++) {
        ilp_name(nm, "tx_%d", k, 0, 0);
        c->tx[k] = ilp_col_new(m, nm, GLP_CV, 0, 1, 0);
        ilp_name(nm, "tsh_%d", k, 0, 0);
        c->tsh[k] = ilp_col_new(m, nm, GLP_CV, 0, 1, 0);
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            ilp_row_begin(m);
            ilp_row_add(m, c->tx[k], 1);
            add_holds1(m, in, c, k, in->tied_ro, -sgn);
            add_holds1(m, in, c, k, in->tied_rc, sgn);
            ilp_name(nm, sgn < 0 ? "tied_one_a_%d" : "tied_one_b_%d", k, 0, 0);
            ilp_row_end(m, nm, GLP_LO, 0);
            ilp_row_begin(m);
            ilp_row_add(m, c->tsh[k], 1);
            add_holds1(m, in, c, k, sgn < 0 ? in->tied_ro : in->tied_rc, -1);
            ilp_name(nm, sgn < 0 ? "tied_both_a_%d" : "tied_both_b_%d", k, 0, 0);
            ilp_row_end(m, nm, GLP_UP, 0);
        }
        /* tx_k <= t_ko + t_kc and tx_k <= 2 - t_ko - t_kc: exactly one side, so that the tail
         * rows, which switch on tx_k, see it as it is. */
        for (int hi = 0; hi < 2; hi++) {
            ilp_row_begin(m);
            ilp_row_add(m, c->tx[k], 1);
            add_holds1(m, in, c, k, in->tied_ro, hi ? 1 : -1);
            add_holds1(m, in, c, k, in->tied_rc, hi ? 1 : -1);
            ilp_name(nm, hi ? "tied_one_hi_%d" : "tied_one_lo_%d", k, 0, 0);
            ilp_row_end(m, nm, GLP_UP, hi ? 2 : 0);
        }
    }
    if (!in->xcls)
        return;
    for (int k = 1; k < N; k++) {
        if (plan_in_flight(f->sched, N, k, in->M) <= 1)
            continue; /* held or evicted, one micro-batch's copy: the same memory */
        for (int r = 0; r < NR; r++) {
            int any = 0;
            for (int cl = 0; cl < C; cl++)
                any |= in->xcls[r * C + cl] != 0;
            if (!any)
                continue;
            ilp_name(nm, "st_%d_%d", k, r, 0);
            c->st[IX2(k, r, NR)] = ilp_col_new(m, nm, GLP_CV, 0, 1, 0);
            ilp_row_begin(m);
            ilp_row_add(m, c->st[IX2(k, r, NR)], 1);
            if (!add_holds(m, in, c, k, r, -1))
                m->r.constant -= 1; /* no indicator: as if it always opened the slot */
            for (int q = 0; q < r; q++)
                add_y(m, in, c, k, q, 1);
            add_f(m, in, c, k - 1, 0, -1);
            ilp_name(nm, "opens_%d_%d", k, r, 0);
            ilp_row_end(m, nm, GLP_LO, -1);
            for (int cl = 0; cl < C; cl++) {
                if (!in->xcls[r * C + cl])
                    continue;
                ilp_row_begin(m);
                ilp_row_add(m, c->R[IX2(k, cl, C)], 1);
                for (int q = 0; q < NR; q++)
                    if (in->cnt[in->run_first[q] * C + cl])
                        add_y(m, in, c, k, q, -(double)in->cnt[in->run_first[q] * C + cl]);
                ilp_row_add(m, c->st[IX2(k, r, NR)], (double)in->xcls[r * C + cl]);
                ilp_name(nm, "held_%d_%d_%d", k, r, cl);
                ilp_row_end(m, nm, GLP_UP, 0);
            }
        }
    }
}

/* Slot k: memory on each GPU it may use, with what others park there; cycle >= compute. */
static void form_slot_memory(struct form *f, int k)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    const struct mpress_topology *topo = f->topo;
    struct cols *c = f->c;
    const int N = in->N, NR = in->NR, C = in->C, M = in->M, G = N;
    char nm[64];
    const double bigM = f->bigM;
    const int n_k = plan_in_flight(f->sched, N, k, M);
    const int v_k = plan_weight_versions(f->sched, N, k, M);
    /* Memory of slot k on each GPU it may use, with what others park there. */
    for (int g = 0; g < G; g++) {
        if (!x_possible(in, k, g))
            continue;
        ilp_row_begin(m);
        for (int b = 0; b < NR; b++)
            add_y(m, in, c, k, b, v_k * RB(b).p + RB(b).g + n_k * RB(b).a);
        ilp_row_add(m, c->ov[k], 1);
        for (int cl = 0; cl < C; cl++) {
            double coef = -(double)(n_k - 1) * in->cls[cl].s;
            ilp_row_add(m, c->R[IX2(k, cl, C)], coef);
            ilp_row_add(m, c->H[IX2(k, cl, C)], coef);
            if (in->d2d)
                ilp_row_add(m, c->D[IX2(k, cl, C)], coef);
        }
        ilp_row_add(m, c->ws[k], 1);
        ilp_add_out(m, in, c, k - 1, 2);
        ilp_add_out(m, in, c, k, 2);
        ilp_row_add(m, c->tsh[k], -v_k * in->tied_p);
        for (int j = 0; j < N; j++)
            if (c->e[IX2(j, g, G)])
                ilp_row_add(m, c->e[IX2(j, g, G)], plan_in_flight(f->sched, N, j, M));
        double mem = (double)topo->gpus[g].memory_bytes;
        double cap = (mem - fmax(mem * PLAN_MEM_MARGIN, PLAN_MEM_MARGIN_BYTES) -
                      (double)topo->gpus[g].reserve_bytes) / GB;
        add_x(m, in, c, k, g, bigM);
        ilp_name(nm, "mem_%d_%d", k, g, 0);
        ilp_row_end(m, nm, GLP_UP, cap + bigM);
        if (!in->tied)
            continue;
        /* After the backward pass: model states and the received tied gradient. */
        ilp_row_begin(m);
        for (int b = 0; b < NR; b++)
            add_y(m, in, c, k, b, v_k * RB(b).p + RB(b).g);
        ilp_row_add(m, c->ov[k], 1);
        ilp_row_add(m, c->tsh[k], -v_k * in->tied_p);
        ilp_row_add(m, c->tx[k], in->tied_g);
        add_x(m, in, c, k, g, bigM);
        ilp_name(nm, "mem_tied_%d_%d", k, g, 0);
        ilp_row_end(m, nm, GLP_UP, cap + bigM);
    }
    /* Cycle >= compute. */
    ilp_row_begin(m);
    ilp_row_add(m, c->T, 1);
    ilp_row_add(m, c->C[k], -1);
    ilp_name(nm, "cycle_compute_%d", k, 0, 0);
    ilp_row_end(m, nm, GLP_LO, 0);
}

int ilp_build(struct model *m, const struct inst *in, const struct mpress_topology *topo,
              enum mpress_schedule sched, struct cols *c)
{
    struct form f = {.m = m, .in = in, .topo = topo, .sched = sched, .c = c};
    form_consts(&f);
    if (cols_alloc(c, in, f.NK))
        return -1;
    form_columns(&f);
    form_partition(&f);
    form_memory_terms(&f);
    ilp_form_tail_columns(&f);
    for (int k = 0; k < in->N; k++) {
        form_slot_actions(&f, k);
        form_slot_optimizer(&f, k);
        form_slot_memory(&f, k);
    }
    ilp_form_host(&f);
    ilp_form_products(&f);
    ilp_form_links(&f);
    ilp_form_drain(&f);
    return m->fail ? -1 : 0;
}
