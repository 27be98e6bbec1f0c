/* The optimizer tail of the planner's MILP (ilp_form.c's header comment has its rows; eval.c,
 * optimizer_tail, the cost it equals): the tied word matrix's exchange, each slot's GPU step,
 * and the host steps through one CPU queue per socket. */
#include <math.h>

#include "ilp_form_internal.h"

/* drain_k = sum_(j<k) (sum_r (T_r - Tf_r) y_jr + sum_c r_c R_jc): slot k's last backward ends
 * that long before slot 0's (the drain runs the backwards of the slots before it after), and
 * fill_k = sum_(j<k) sum_r Tf_r y_jr: the next iteration's first forward reaches slot k that
 * long after slot 0's (eval.c, optimizer_tail). As sums, for their columns' rows. */
static void add_drain_sum(struct model *m, const struct inst *in, const struct cols *c, int k,
                          double coef)
{
    for (int j = 0; j < k; j++) {
        for (int r = 0; r < in->NR; r++)
            add_y(m, in, c, j, r, coef * (RB(r).t - RB(r).tf));
        for (int cl = 0; cl < in->C; cl++)
            ilp_row_add(m, c->R[IX2(j, cl, in->C)], coef * in->cls[cl].r);
    }
}

static void add_fill_sum(struct model *m, const struct inst *in, const struct cols *c, int k,
                         double coef)
{
    for (int j = 0; j < k; j++)
        for (int r = 0; r < in->NR; r++)
            add_y(m, in, c, j, r, coef * RB(r).tf);
}

/* drain_k and fill_k through their columns (form_tail_cols; 0 for slot 0). */
static void add_drain(struct model *m, const struct cols *c, int k, double coef)
{
    if (k > 0)
        ilp_row_add(m, c->dr[k], coef);
}

static void add_fill(struct model *m, const struct cols *c, int k, double coef)
{
    if (k > 0)
        ilp_row_add(m, c->fi[k], coef);
}

/* slack_k = drain_k + fill_k: how much of slot k's optimizer step the drain and the next
 * iteration's fill hide. */
static void add_slack(struct model *m, const struct cols *c, int k, double coef)
{
    add_drain(m, c, k, coef);
    add_fill(m, c, k, coef);
}

/* Seconds the tied matrix's gradient takes from a slot on GPU a to one on GPU b (eval.c,
 * optimizer_tail). */
static double tied_c(const struct form *f, int a, int b)
{
    return f->in->tied_g * GB / plan_boundary_bw(f->topo, a, b);
}

/* XE, the exchange's time when the tied matrix is split (rows in the header above): at least
 * the fastest pair's, and the pair's own when the mapping may put the two sides on a slower
 * pair. */
static void form_tied_exchange(struct form *f)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    struct cols *c = f->c;
    const int N = in->N, G = N;
    char nm[64];
    f->bigC = 0;
    if (!in->tied || N < 2)
        return;
    /* The copy sits in the last slot (it always does when nothing follows its block; a cut
     * between it and the loss gains nothing), so that the host queue's order below is known. */
    if (in->tied_rc != in->NR - 1) {
        ilp_row_begin(m);
        add_f(m, in, c, N - 2, in->tied_rc, 1);
        ilp_row_end(m, "tied_copy_last", GLP_UP, 0);
    }
    /* The owner's slot j < N - 1, the copy's k = N - 1. */
    const int k = N - 1;
    double cmin = 1e300;
    for (int j = 0; j < k; j++)
        for (int a = 0; a < G; a++)
            for (int b = 0; b < G; b++)
                if (a != b && x_possible(in, j, a) && x_possible(in, k, b)) {
                    cmin = fmin(cmin, tied_c(f, a, b));
                    f->bigC = fmax(f->bigC, tied_c(f, a, b));
                }
    if (f->bigC <= 0)
        return;
    const double bigC = f->bigC;
    c->XE = ilp_col_new(m, "XE", GLP_CV, 0, -1, 0);
    for (int s = 0; s < N; s++) {
        ilp_row_begin(m);
        ilp_row_add(m, c->XE, 1);
        ilp_row_add(m, c->tx[s], -cmin);
        ilp_name(nm, "xe_min_%d", s, 0, 0);
        ilp_row_end(m, nm, GLP_LO, 0);
    }
    for (int j = 0; j < k; j++)
        for (int a = 0; a < G; a++) {
            if (!x_possible(in, j, a))
                continue;
            double slowest = 0;
            for (int b = 0; b < G; b++)
                if (b != a && x_possible(in, k, b))
                    slowest = fmax(slowest, tied_c(f, a, b));
            if (slowest <= cmin)
                continue;
            ilp_row_begin(m);
            ilp_row_add(m, c->XE, 1);
            for (int b = 0; b < G; b++)
                if (b != a && x_possible(in, k, b))
                    add_x(m, in, c, k, b, -tied_c(f, a, b));
            add_x(m, in, c, j, a, -bigC);
            ilp_row_add(m, c->tx[j], -bigC);
            ilp_row_add(m, c->tx[k], -bigC);
            ilp_name(nm, "xe_%d_%d_%d", j, k, a);
            ilp_row_end(m, nm, GLP_LO, -3 * bigC);
        }
}

/* dr_k = drain_k and fi_k = fill_k as columns, so that the tail rows stay sparse. */
static void form_tail_cols(struct form *f)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    struct cols *c = f->c;
    char nm[64];
    for (int k = 1; k < in->N; k++)
        for (int which = 0; which < 2; which++) {
            ilp_name(nm, which ? "fi_%d" : "dr_%d", k, 0, 0);
            int col = ilp_col_new(m, nm, GLP_CV, 0, -1, 0);
            ilp_row_begin(m);
            ilp_row_add(m, col, 1);
            if (which)
                add_fill_sum(m, in, c, k, -1);
            else
                add_drain_sum(m, in, c, k, -1);
            ilp_name(nm, which ? "fill_%d" : "drain_%d", k, 0, 0);
            ilp_row_end(m, nm, GLP_FX, 0);
            (which ? c->fi : c->dr)[k] = col;
        }
}

void ilp_form_tail_columns(struct form *f)
{
    form_tied_exchange(f);
    form_tail_cols(f);
}

/* Slot k's GPU optimizer step on each GPU g it may run on: TT >= its start (minus its slack;
 * tied: after the exchange XE, minus its fill) + its touch / hbm_g, held when k runs on g and
 * keeps its optimizer there (and, tied, holds one side of a split tied matrix). */
static void tail_gpu_rows(struct form *f, int k, int tied)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    const struct mpress_topology *topo = f->topo;
    struct cols *c = f->c;
    const double bigT = f->bigT, bigTX = bigT + f->bigC;
    char nm[64];
    for (int g = 0; g < in->N; g++) {
        double hbm = topo->gpus[g].hbm_bytes_per_s / GB;
        if (!x_possible(in, k, g) || (!tied && hbm <= 0))
            continue;
        ilp_row_begin(m);
        ilp_row_add(m, c->TT, 1);
        if (tied) {
            ilp_row_add(m, c->XE, -1);
            add_fill(m, c, k, 1);
        } else {
            add_slack(m, c, k, 1);
        }
        for (int b = 0; hbm > 0 && b < in->NR; b++)
            add_y(m, in, c, k, b, -RB(b).opt_touch / hbm);
        add_x(m, in, c, k, g, -bigT);
        if (in->host_opt)
            ilp_row_add(m, c->h[k], bigT);
        if (tied)
            ilp_row_add(m, c->tx[k], -bigTX);
        ilp_name(nm, tied ? "tail_gpu_tied_%d_%d" : "tail_gpu_%d_%d", k, g, 0);
        ilp_row_end(m, nm, GLP_LO, tied ? -bigT - bigTX : -bigT);
    }
}

/* Slot k's GPU optimizer step in the tail: on its GPU, on any GPU at the fastest bandwidth
 * (tail_any), and after the tied exchange. */
void ilp_form_slot_tail(struct form *f, int k)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    struct cols *c = f->c;
    const double bigT = f->bigT;
    char nm[64];
    tail_gpu_rows(f, k, 0);
    /* The same on every GPU at once, without x or h: at the fastest GPU's memory bandwidth,
     * valid wherever each run's host step takes at least its GPU step. Redundant for integer
     * x and h, it keeps the tail in the relaxation (tail_any). */
    for (int tied = 0; f->hbm_any > 0 && tied <= (c->XE ? 1 : 0); tied++) {
        ilp_row_begin(m);
        ilp_row_add(m, c->TT, 1);
        for (int b = 0; b < in->NR; b++)
            add_y(m, in, c, k, b, -RB(b).opt_touch / f->hbm_any);
        double lo = 0;
        if (tied) {
            ilp_row_add(m, c->XE, -1);
            add_fill(m, c, k, 1);
            ilp_row_add(m, c->tx[k], -(bigT + f->bigC));
            lo = -(bigT + f->bigC);
        } else {
            add_slack(m, c, k, 1);
        }
        ilp_name(nm, tied ? "tail_any_tied_%d" : "tail_any_%d", k, 0, 0);
        ilp_row_end(m, nm, GLP_LO, lo);
    }
    if (c->XE)
        tail_gpu_rows(f, k, 1);
}

/* Slot k may run on socket q (the mapping decides where it is free). */
static int on_socket(const struct form *f, int k, int q)
{
    return f->split_sockets || f->NK == 1 || plan_socket(f->topo, k) == q;
}

/* The touch of slot i's host step on socket q, coef / socket bandwidth per GB. */
static void add_touch(struct form *f, int i, int q, double coef)
{
    const struct cols *c = f->c;
    if (f->split_sockets && !f->any_socket)
        ilp_row_add(f->m, c->ots[IX2(i, q, f->NK)], -coef / f->hsock);
    else
        ilp_row_add(f->m, c->ot[i], -coef / f->hsock);
}

/* Touch of slots lo..hi on socket q, through the prefix columns pt (form_host). */
static void add_touch_range(struct form *f, int lo, int hi, int q, double coef)
{
    if (hi < lo)
        return;
    const struct cols *c = f->c;
    ilp_row_add(f->m, c->pt[IX2(hi, q, f->NK)], -coef / f->hsock);
    if (lo > 0)
        ilp_row_add(f->m, c->pt[IX2(lo - 1, q, f->NK)], coef / f->hsock);
}

/* A chain row's start: TT >= slot j's start (after the exchange: XE; else minus its drain
 * slack) + its gradients down. */
static void chain_begin(struct form *f, int j, int after_exchange)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    const struct cols *c = f->c;
    ilp_row_begin(m);
    ilp_row_add(m, c->TT, 1);
    if (after_exchange)
        ilp_row_add(m, c->XE, -1);
    else
        add_drain(m, c, j, 1);
    for (int b = 0; b < in->NR; b++)
        add_y(m, in, c, j, b, -RB(b).g / f->pcie);
}

/* A chain row's end at slot k's step on socket q: + its weights up - fill_k. The row holds
 * when slots j (-1: none) and k keep their optimizer on the host on socket q and, for
 * cond > 0, column cond is 0; for cond < 0, column -cond is 1 (cond 0: no further condition).
 * Elsewhere big-M terms relax it. */
static void chain_end(struct form *f, int k, int q, int j, int cond, int after_exchange,
                      const char *fmt, int a, int b)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    const struct cols *c = f->c;
    const double bigH = f->bigH + (after_exchange ? f->bigC : 0);
    char nm[64];
    for (int r = 0; r < in->NR; r++)
        add_y(m, in, c, k, r, -RB(r).p / f->pcie);
    add_fill(m, c, k, 1);
    double lo = 0;
    int slots[2] = {k, j};
    for (int s = 0; s < 2; s++) {
        if (slots[s] < 0 || (s == 1 && j == k))
            continue;
        ilp_row_add(m, c->h[slots[s]], -bigH);
        lo -= bigH;
        if (f->split_sockets && !f->any_socket) {
            ilp_add_on_socket(f, slots[s], q, -bigH);
            lo -= bigH;
        }
    }
    if (cond > 0) {
        ilp_row_add(m, cond, bigH);
    } else if (cond < 0) {
        ilp_row_add(m, -cond, -bigH);
        lo -= bigH;
    }
    ilp_name(nm, fmt, a, b, q);
    ilp_row_end(m, nm, GLP_LO, lo);
}

/* sock_free: the chains of one step alone (each step's own queue time), on whichever socket it
 * runs, as the fixed mapping writes them for a slot alone on its socket: with the sockets
 * fractional in the relaxation, the socket rows' big-M terms leave these out. */
static void host_tail_one_step(struct form *f)
{
    const struct inst *in = f->in;
    const struct cols *c = f->c;
    const int N = in->N, split = c->XE != 0;
    f->any_socket = 1;
    for (int k = N - 1; k >= 0; k--) {
        chain_begin(f, k, 0);
        add_touch(f, k, 0, 1);
        chain_end(f, k, 0, k, 0, 0, "tail_host1_%d_%d_%d", k, k);
    }
    if (split) {
        chain_begin(f, N - 1, 1);
        add_touch(f, N - 1, 0, 1);
        chain_end(f, N - 1, 0, -1, -c->tx[N - 1], 1, "tail_host1_cc_%d_%d_%d", N - 1, 0);
        for (int mm = 0; mm + 1 < N; mm++) {
            chain_begin(f, mm, 1);
            add_touch(f, mm, 0, 1);
            chain_end(f, mm, 0, -1, -c->tx[mm], 1, "tail_host1_oo_%d_%d_%d", mm, 0);
        }
    }
    f->any_socket = 0;
}

void ilp_form_host_tail(struct form *f)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    struct cols *c = f->c;
    const int N = in->N, NK = f->NK;
    /* Host optimizer tail: each socket's CPU queue takes the host steps in the order their
     * gradients arrive (eval.c, optimizer_tail): slots N-1 down to the first when the tied
     * matrix is not split; when it is (the owner's slot m, tx_m = 1, the copy's the last),
     * slots N-2 down to m + 1, then N-1 and m after the exchange. One row per chain of that
     * queue from a step j to a step k: TT >= j's start + j's gradients down + the touch of the
     * steps from j to k + k's weights up - fill_k, each row valid for every plan. */
    /* pt_kq = the touch of slots 0..k on socket q */
    for (int q = 0; in->host_opt && q < NK; q++)
        for (int k = 0; k < N; k++) {
            char nm[64];
            ilp_name(nm, "pt_%d_%d", k, q, 0);
            c->pt[IX2(k, q, NK)] = ilp_col_new(m, nm, GLP_CV, 0, -1, 0);
            ilp_row_begin(m);
            ilp_row_add(m, c->pt[IX2(k, q, NK)], 1);
            if (k > 0)
                ilp_row_add(m, c->pt[IX2(k - 1, q, NK)], -1);
            if (on_socket(f, k, q))
                ilp_row_add(m, f->split_sockets ? c->ots[IX2(k, q, NK)] : c->ot[k], -1);
            ilp_name(nm, "prefix_touch_%d_%d", k, q, 0);
            ilp_row_end(m, nm, GLP_FX, 0);
        }
    if (in->host_opt && in->sock_free && f->split_sockets)
        host_tail_one_step(f);
    for (int q = 0; in->host_opt && q < NK; q++) {
        const int split = c->XE != 0;
        /* A: j >= k, both the stages' own (a step from the copy's slot starts no chain to a
         * lower slot when the matrix is split) */
        for (int jj = N - 1; jj >= 0; jj--)
            for (int k = jj; k >= 0; k--) {
                if (!on_socket(f, jj, q) || !on_socket(f, k, q))
                    continue;
                chain_begin(f, jj, 0);
                add_touch_range(f, k, jj, q, 1);
                chain_end(f, k, q, jj, split && jj == N - 1 && k < jj ? c->tx[N - 1] : 0, 0,
                          "tail_host_%d_%d_%d", jj, k);
            }
        if (!split)
            continue;
        /* B: to the copy's step (N-1), from a step j of the owner's m < j <= N-2 or from the
         * copy's own after the exchange */
        for (int mm = 0; mm + 1 < N; mm++)
            for (int jj = mm + 1; jj + 1 < N; jj++) {
                if (!on_socket(f, jj, q) || !on_socket(f, N - 1, q))
                    continue;
                chain_begin(f, jj, 0);
                add_touch_range(f, mm + 1, jj, q, 1);
                add_touch(f, N - 1, q, 1);
                chain_end(f, N - 1, q, jj, -c->tx[mm], 0, "tail_host_c_%d_%d_%d", mm, jj);
            }
        if (on_socket(f, N - 1, q)) {
            chain_begin(f, N - 1, 1);
            add_touch(f, N - 1, q, 1);
            chain_end(f, N - 1, q, -1, -c->tx[N - 1], 1, "tail_host_cc_%d_%d_%d", N - 1, 0);
        }
        /* C: to the owner's step m, from a step j of m < j <= N-2, from the copy's, or from
         * its own after the exchange */
        for (int mm = 0; mm + 1 < N; mm++) {
            if (!on_socket(f, mm, q))
                continue;
            for (int jj = mm + 1; jj + 1 < N; jj++) {
                if (!on_socket(f, jj, q))
                    continue;
                chain_begin(f, jj, 0);
                add_touch_range(f, mm, jj, q, 1);
                /* the copy's step comes between them only on its own socket */
                if (on_socket(f, N - 1, q))
                    add_touch(f, N - 1, q, 1);
                chain_end(f, mm, q, jj, -c->tx[mm], 0, "tail_host_o_%d_%d_%d", mm, jj);
            }
            if (on_socket(f, N - 1, q)) {
                chain_begin(f, N - 1, 1);
                add_touch(f, N - 1, q, 1);
                add_touch(f, mm, q, 1);
                chain_end(f, mm, q, N - 1, -c->tx[mm], 1, "tail_host_oc_%d_%d_%d", mm, N - 1);
            }
            chain_begin(f, mm, 1);
            add_touch(f, mm, q, 1);
            chain_end(f, mm, q, -1, -c->tx[mm], 1, "tail_host_oo_%d_%d_%d", mm, 0);
        }
    }
}
