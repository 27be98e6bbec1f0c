/* Internal to the MILP's formulation (ilp_form.c, ilp_links.c and ilp_tail.c): what every part
 * of it reads, and the column helpers its rows are written with. */
#ifndef MPRESS_ILP_FORM_INTERNAL_H
#define MPRESS_ILP_FORM_INTERNAL_H

#include "ilp_internal.h"

/* What every part of the formulation reads: the model, the instance, the server, and the
 * constants the big-M rows are built from. */
struct form {
    struct model *m;
    const struct inst *in;
    const struct mpress_topology *topo;
    enum mpress_schedule sched;
    struct cols *c;
    double sumOT, bigD, bigO, bigX, bigM, bigT, bigH;
    double bigC;    /* the slowest tied exchange, s (0: none) */
    double hbm_any; /* GB/s of the tail rows without the mapping (0: none) */
    double pcie, hsock; /* GB/s: a GPU's PCIe link; one socket's memory for host steps */
    int NK, split_sockets;
    /* The host chains being written hold on any socket (sock_free's rows of one step). */
    int any_socket;
};

/* x_kg: a column, or a constant (fixed mapping: slot k on GPU k). */
static inline void add_x(struct model *m, const struct inst *in, const struct cols *c,
                        int k, int g, double coef)
{
    if (in->mapped)
        ilp_row_add(m, c->x[IX2(k, g, in->N)], coef);
    else if (k == g)
        m->r.constant += coef;
}

static inline int x_possible(const struct inst *in, int k, int g)
{
    return in->mapped || k == g;
}

/* coef x [slot k runs on socket q]: sk_kq (sock_free), else sum_(g on q) x_kg. */
static inline void ilp_add_on_socket(const struct form *f, int k, int q, double coef)
{
    if (f->in->sock_free) {
        ilp_row_add(f->m, f->c->sk[IX2(k, q, f->NK)], coef);
        return;
    }
    for (int g = 0; g < f->in->N; g++)
        if (plan_socket(f->topo, g) == q)
            add_x(f->m, f->in, f->c, k, g, coef);
}

/* w_kr: blocks of run r in slots 0..k; the last slot completes every run. */
static inline void add_w(struct model *m, const struct inst *in, const struct cols *c,
                        int k, int r, double coef)
{
    if (k < 0)
        return;
    if (k == in->N - 1)
        m->r.constant += coef * in->run_len[r];
    else
        ilp_row_add(m, c->w[IX2(k, r, in->NR)], coef);
}

/* f_kr: run r has begun by slot k (= w_kr for a run of one block). */
static inline void add_f(struct model *m, const struct inst *in, const struct cols *c,
                        int k, int r, double coef)
{
    if (k < 0)
        return;
    if (k == in->N - 1)
        m->r.constant += coef;
    else if (in->run_len[r] == 1)
        ilp_row_add(m, c->w[IX2(k, r, in->NR)], coef);
    else
        ilp_row_add(m, c->f[IX2(k, r, in->NR)], coef);
}

/* y_kr: blocks of run r in slot k. */
static inline void add_y(struct model *m, const struct inst *in, const struct cols *c,
                        int k, int r, double coef)
{
    add_w(m, in, c, k, r, coef);
    add_w(m, in, c, k - 1, r, -coef);
}

/* O_k: output bytes of slot k's last op (0 for the last slot). Within a run the outputs are
 * equal, so sum_b X_b (u_kb - u_k(b+1)) telescopes to X_r (f_kr - f_k(r+1)). */
static inline void ilp_add_out(struct model *m, const struct inst *in, const struct cols *c,
                               int k, double coef)
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

/* The optimizer tail (ilp_tail.c; the rows are in ilp_form.c's header comment): the tied
 * exchange's column XE and its rows, and the drain and fill columns, before the slots' rows;
 * slot k's GPU step rows; the host steps' queue rows, after every slot's optimizer columns. */
void ilp_form_tail_columns(struct form *f);
void ilp_form_slot_tail(struct form *f, int k);
void ilp_form_host_tail(struct form *f);
/* ilp_links.c, after the slots' rows: host memory and the host tail, the products, the
 * links, the drain. */
void ilp_form_host(struct form *f);
void ilp_form_products(struct form *f);
void ilp_form_links(struct form *f);
void ilp_form_drain(struct form *f);

#endif
