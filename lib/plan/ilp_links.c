/* The planner's MILP, its host, product, link and drain rows (ilp_form.c's header comment has
 * them, with the rest of the formulation): host memory and the host optimizer tail's queue
 * (ilp_tail.c), the linearised products of the mapping with boundary bytes, D2D flows and
 * host swaps, the load of every NVLink pair, NVSwitch port, PCIe link and uplink per cycle,
 * and what one forward must drain. */
#include <math.h>

#include "ilp_form_internal.h"

/* -pl_g: host-swap bytes of the slot on g and boundary bytes that cross PCIe at g. */
static void add_pcie_load(struct model *m, const struct inst *in, const struct cols *c,
                          const struct mpress_topology *topo, int g)
{
    const int N = in->N, G = N;
    ilp_row_add(m, c->hp[g], -1);
    for (int k = 0; k + 1 < N; k++)
        for (int q = 0; q < G; q++) {
            if (q == g || plan_nvlink_bw(topo, g, q) > 0)
                continue;
            ilp_row_add(m, c->bnd[IX3(k, g, q, G)], -1);
            ilp_row_add(m, c->bnd[IX3(k, q, g, G)], -1);
        }
}

void ilp_form_host(struct form *f)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    const struct mpress_topology *topo = f->topo;
    struct cols *c = f->c;
    const int N = in->N, C = in->C, M = in->M;
    ilp_form_host_tail(f);
    /* Host memory. */
    if (topo->host_memory_bytes > 0) {
        ilp_row_begin(m);
        for (int k = 0; k < N; k++) {
            int n_k = plan_in_flight(f->sched, N, k, M);
            for (int cl = 0; cl < C; cl++)
                ilp_row_add(m, c->H[IX2(k, cl, C)], n_k * in->cls[cl].s);
            if (in->host_opt)
                ilp_row_add(m, c->oh[k], 1);
        }
        ilp_row_end(m, "host_memory", GLP_UP, (double)topo->host_memory_bytes / GB);
    }
}

/* Linearised products: boundary bytes per GPU pair, D2D flows, host-swap bytes per GPU. */
void ilp_form_products(struct form *f)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    struct cols *c = f->c;
    const int N = in->N, C = in->C, G = N;
    char nm[64];
    const double bigD = f->bigD, bigX = f->bigX;
    for (int k = 0; k + 1 < N; k++)
        for (int a = 0; a < G; a++)
            for (int b = 0; b < G; b++) {
                int col = c->bnd[IX3(k, a, b, G)];
                if (!col)
                    continue;
                ilp_row_begin(m);
                ilp_row_add(m, col, 1);
                ilp_add_out(m, in, c, k, -1);
                add_x(m, in, c, k, a, -bigX);
                add_x(m, in, c, k + 1, b, -bigX);
                ilp_name(nm, "bnd_%d_%d_%d", k, a, b);
                ilp_row_end(m, nm, GLP_LO, -2 * bigX);
            }
    for (int k = 0; k < N; k++)
        for (int a = 0; a < G; a++)
            for (int b = 0; b < G; b++) {
                int col = c->fl[IX3(k, a, b, G)];
                if (!col)
                    continue;
                ilp_row_begin(m);
                ilp_row_add(m, col, 1);
                ilp_row_add(m, c->e[IX2(k, b, G)], -1);
                add_x(m, in, c, k, a, -bigD);
                ilp_name(nm, "fl_%d_%d_%d", k, a, b);
                ilp_row_end(m, nm, GLP_LO, -bigD);
            }
    for (int k = 0; k < N; k++)
        for (int g = 0; g < G; g++) {
            if (!x_possible(in, k, g))
                continue;
            ilp_row_begin(m);
            ilp_row_add(m, c->hp[g], 1);
            for (int cl = 0; cl < C; cl++)
                ilp_row_add(m, c->H[IX2(k, cl, C)], -in->cls[cl].s);
            add_x(m, in, c, k, g, -bigD);
            ilp_name(nm, "hp_%d_%d", k, g, 0);
            ilp_row_end(m, nm, GLP_LO, -bigD);
        }
}

void ilp_form_links(struct form *f)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    const struct mpress_topology *topo = f->topo;
    struct cols *c = f->c;
    const int N = in->N, G = N;
    char nm[64];
    const double pcie = f->pcie;
    /* Links. */
    if (topo->fabric == MPRESS_FABRIC_NVSWITCH) {
        for (int g = 0; g < G; g++) {
            double bw = plan_port_bw(topo, g) / GB;
            if (bw <= 0)
                continue;
            ilp_row_begin(m);
            ilp_row_add(m, c->T, bw);
            for (int k = 0; k < N; k++)
                for (int q = 0; q < G; q++) {
                    ilp_row_add(m, c->fl[IX3(k, g, q, G)], -1);
                    ilp_row_add(m, c->fl[IX3(k, q, g, G)], -1);
                    if (k + 1 < N) {
                        ilp_row_add(m, c->bnd[IX3(k, g, q, G)], -1);
                        ilp_row_add(m, c->bnd[IX3(k, q, g, G)], -1);
                    }
                }
            ilp_name(nm, "port_%d", g, 0, 0);
            ilp_row_end(m, nm, GLP_LO, 0);
        }
    } else {
        for (int a = 0; a < G; a++)
            for (int b = a + 1; b < G; b++) {
                double bw = plan_nvlink_bw(topo, a, b) / GB;
                if (bw <= 0)
                    continue;
                ilp_row_begin(m);
                ilp_row_add(m, c->T, bw);
                for (int k = 0; k < N; k++) {
                    ilp_row_add(m, c->fl[IX3(k, a, b, G)], -1);
                    ilp_row_add(m, c->fl[IX3(k, b, a, G)], -1);
                    if (k + 1 < N) {
                        ilp_row_add(m, c->bnd[IX3(k, a, b, G)], -1);
                        ilp_row_add(m, c->bnd[IX3(k, b, a, G)], -1);
                    }
                }
                ilp_name(nm, "nvlink_%d_%d", a, b, 0);
                ilp_row_end(m, nm, GLP_LO, 0);
            }
    }
    /* PCIe per GPU and per switch uplink. */
    for (int g = 0; g < G; g++) {
        ilp_row_begin(m);
        add_pcie_load(m, in, c, topo, g);
        ilp_row_add(m, c->T, pcie);
        ilp_name(nm, "pcie_%d", g, 0, 0);
        ilp_row_end(m, nm, GLP_LO, 0);
    }
    for (int w = 0; w < topo->n_switches; w++) {
        double up = topo->switches[w].uplink_bytes_per_s / GB;
        if (up <= 0)
            continue;
        ilp_row_begin(m);
        for (int g = 0; g < G; g++)
            if (topo->gpus[g].pcie_switch == w)
                add_pcie_load(m, in, c, topo, g);
        ilp_row_add(m, c->T, up);
        ilp_name(nm, "uplink_%d", w, 0, 0);
        ilp_row_end(m, nm, GLP_LO, 0);
    }
}

void ilp_form_drain(struct form *f)
{
    struct model *m = f->m;
    const struct inst *in = f->in;
    const struct mpress_topology *topo = f->topo;
    struct cols *c = f->c;
    const int N = in->N, NR = in->NR, C = in->C, G = N;
    char nm[64];
    const double bigD = f->bigD, pcie = f->pcie;
    /* Drain: a micro-batch's host swaps and D2D evictions leave within one forward of their
     * stage. */
    for (int k = 0; k < N; k++) {
        if (in->d2d && topo->fabric == MPRESS_FABRIC_NVSWITCH) {
            ilp_row_begin(m);
            for (int g = 0; g < G; g++)
                if (c->e[IX2(k, g, G)])
                    ilp_row_add(m, c->e[IX2(k, g, G)], 1);
            double bw = plan_port_bw(topo, k) / GB * PLAN_DRAIN_SHARE;
            for (int b = 0; b < NR; b++)
                add_y(m, in, c, k, b, -bw * RB(b).tf);
            ilp_name(nm, "drain_port_%d", k, 0, 0);
            ilp_row_end(m, nm, GLP_UP, 0);
        } else if (in->d2d) {
            for (int g = 0; g < G; g++)
                for (int a = 0; a < G; a++) {
                    double bw = plan_nvlink_bw(topo, a, g) / GB * PLAN_DRAIN_SHARE;
                    if (!c->e[IX2(k, g, G)] || !x_possible(in, k, a) || bw <= 0)
                        continue;
                    ilp_row_begin(m);
                    ilp_row_add(m, c->e[IX2(k, g, G)], 1);
                    for (int b = 0; b < NR; b++)
                        add_y(m, in, c, k, b, -bw * RB(b).tf);
                    add_x(m, in, c, k, a, bigD);
                    ilp_name(nm, "drain_nvl_%d_%d_%d", k, a, g);
                    ilp_row_end(m, nm, GLP_UP, bigD);
                }
        }
        ilp_row_begin(m);
        for (int cl = 0; cl < C; cl++)
            ilp_row_add(m, c->H[IX2(k, cl, C)], in->cls[cl].s);
        for (int b = 0; b < NR; b++)
            add_y(m, in, c, k, b, -pcie * PLAN_DRAIN_SHARE * RB(b).tf);
        ilp_name(nm, "drain_pcie_%d", k, 0, 0);
        ilp_row_end(m, nm, GLP_UP, 0);
        for (int g = 0; g < G; g++) {
            int w = topo->gpus[g].pcie_switch;
            if (!x_possible(in, k, g) || w < 0 || w >= topo->n_switches ||
                topo->switches[w].uplink_bytes_per_s <= 0)
                continue;
            double up = topo->switches[w].uplink_bytes_per_s / GB;
            ilp_row_begin(m);
            for (int q = 0; q < G; q++)
                if (topo->gpus[q].pcie_switch == w)
                    ilp_row_add(m, c->hp[q], 1);
            for (int b = 0; b < NR; b++)
                add_y(m, in, c, k, b, -up * PLAN_DRAIN_SHARE * RB(b).tf);
            add_x(m, in, c, k, g, bigD);
            add_f(m, in, c, k, 0, bigD);
            ilp_name(nm, "drain_up_%d_%d", k, g, 0);
            ilp_row_end(m, nm, GLP_UP, 2 * bigD);
        }
    }
}

