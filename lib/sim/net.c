/* The network model of the simulator: every link is a resource per direction, a copy is a
 * flow over the resources on its path, and whenever a flow starts or ends all flow rates are
 * recomputed by progressive filling (max-min fair share, Bertsekas & Gallager, "Data
 * Networks", 2nd ed., section 6.5.2). */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

/* ---- links ------------------------------------------------------------------------------------
 * Every link is one resource per direction. Resource families, in index order:
 *   PCIe link of each GPU (up = toward the CPU, down), uplink of each PCIe switch (up, down),
 *   the socket link for each ordered pair of sockets, and NVLink: DIRECT has one resource per
 *   ordered GPU pair (links x per-link bandwidth); NVSWITCH has each GPU's port total out and
 *   in, since any pair runs at full rate and only the GPUs' own ports limit it. */

int sim_net_setup(struct mpress_sim *sim, struct mpress_error *err)
{
    const struct mpress_topology *tp = &sim->plan->topology;
    int G = tp->n_gpus, NS = tp->n_switches > 0 ? tp->n_switches : 1;
    int NK = tp->n_sockets > 0 ? tp->n_sockets : 1;
    int nv = tp->fabric == MPRESS_FABRIC_NVSWITCH ? 2 * G : G * G;
    sim->res_pcie = 0;
    sim->res_switch = 2 * G;
    sim->res_socket = sim->res_switch + 2 * NS;
    sim->res_nv = sim->res_socket + NK * NK;
    sim->n_res = sim->res_nv + nv;
    sim->res = calloc((size_t)sim->n_res, sizeof(*sim->res));
    sim->res_name = calloc((size_t)sim->n_res, sizeof(*sim->res_name));
    if (!sim->res || !sim->res_name)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    for (int g = 0; g < G; g++) {
        struct sim_resource *u = &sim->res[2 * g], *d = &sim->res[2 * g + 1];
        snprintf(sim->res_name[2 * g], sizeof(sim->res_name[0]), "pcie gpu%d up", g);
        snprintf(sim->res_name[2 * g + 1], sizeof(sim->res_name[0]), "pcie gpu%d down", g);
        u->cap = d->cap = tp->pcie_bytes_per_s;
    }
    for (int s = 0; s < NS; s++) {
        int r = sim->res_switch + 2 * s;
        struct sim_resource *u = &sim->res[r], *d = u + 1;
        snprintf(sim->res_name[r], sizeof(sim->res_name[0]), "switch%d uplink up", s);
        snprintf(sim->res_name[r + 1], sizeof(sim->res_name[0]), "switch%d uplink down", s);
        u->cap = d->cap = s < tp->n_switches ? tp->switches[s].uplink_bytes_per_s : 0;
    }
    for (int a = 0; a < NK; a++)
        for (int b = 0; b < NK; b++) {
            struct sim_resource *r = &sim->res[sim->res_socket + a * NK + b];
            snprintf(sim->res_name[sim->res_socket + a * NK + b], sizeof(sim->res_name[0]),
                     "socket link %d->%d", a, b);
            r->cap = a == b ? 0 : tp->socket_link_bytes_per_s;
        }
    if (tp->fabric == MPRESS_FABRIC_NVSWITCH) {
        for (int g = 0; g < G; g++) {
            /* the GPU's own ports; where the topology leaves them 0, its widest pair */
            int ports = 0;
            for (int b = 0; b < G; b++)
                if (tp->nvlinks[g][b] > ports)
                    ports = tp->nvlinks[g][b];
            if (tp->gpus[g].nvlink_ports > 0)
                ports = tp->gpus[g].nvlink_ports;
            int r = sim->res_nv + 2 * g;
            struct sim_resource *o = &sim->res[r], *i = o + 1;
            snprintf(sim->res_name[r], sizeof(sim->res_name[0]), "nvswitch gpu%d out", g);
            snprintf(sim->res_name[r + 1], sizeof(sim->res_name[0]), "nvswitch gpu%d in", g);
            o->cap = i->cap = ports * tp->nvlink_bytes_per_s;
        }
    } else {
        for (int a = 0; a < G; a++)
            for (int b = 0; b < G; b++) {
                struct sim_resource *r = &sim->res[sim->res_nv + a * G + b];
                snprintf(sim->res_name[sim->res_nv + a * G + b], sizeof(sim->res_name[0]),
                         "nvlink %d->%d", a, b);
                r->cap = a == b ? 0 : tp->nvlinks[a][b] * tp->nvlink_bytes_per_s;
            }
    }
    for (int r = 0; r < sim->n_res; r++) {
        sim->res[r].snap = calloc((size_t)sim->N, sizeof(double));
        if (!sim->res[r].snap)
            return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    return 0;
}

static int switch_of(const struct mpress_topology *tp, int g)
{
    int s = tp->gpus[g].pcie_switch;
    return s >= 0 && s < tp->n_switches ? s : 0;
}

static int socket_of_switch(const struct mpress_topology *tp, int s)
{
    int k = s < tp->n_switches ? tp->switches[s].socket : 0;
    return k >= 0 && k < (tp->n_sockets > 0 ? tp->n_sockets : 1) ? k : 0;
}

/* The resources a copy from src to dst crosses (-1 = host memory, pinned on the socket of the
 * GPU's own switch, so host copies never cross the socket link). Peer copies use NVLink when
 * the pair has it, else PCIe peer-to-peer through the switches (and the socket link between
 * sockets). Returns the path length, or -1 (err filled) when a link on it has no bandwidth. */
int sim_net_path(struct mpress_sim *sim, int src, int dst, int *path, struct mpress_error *err)
{
    const struct mpress_topology *tp = &sim->plan->topology;
    int n = 0, G = tp->n_gpus, NK = tp->n_sockets > 0 ? tp->n_sockets : 1;
    if (src >= 0 && dst >= 0 && tp->nvlinks[src][dst] > 0) {
        if (tp->fabric == MPRESS_FABRIC_NVSWITCH) {
            path[n++] = sim->res_nv + 2 * src;
            path[n++] = sim->res_nv + 2 * dst + 1;
        } else {
            path[n++] = sim->res_nv + src * G + dst;
        }
    } else if (src >= 0 && dst < 0) {
        path[n++] = sim->res_pcie + 2 * src;
        path[n++] = sim->res_switch + 2 * switch_of(tp, src);
    } else if (src < 0 && dst >= 0) {
        path[n++] = sim->res_switch + 2 * switch_of(tp, dst) + 1;
        path[n++] = sim->res_pcie + 2 * dst + 1;
    } else {
        int sa = switch_of(tp, src), sb = switch_of(tp, dst);
        path[n++] = sim->res_pcie + 2 * src;
        if (sa != sb) {
            int ka = socket_of_switch(tp, sa), kb = socket_of_switch(tp, sb);
            path[n++] = sim->res_switch + 2 * sa;
            if (ka != kb)
                path[n++] = sim->res_socket + ka * NK + kb;
            path[n++] = sim->res_switch + 2 * sb + 1;
        }
        path[n++] = sim->res_pcie + 2 * dst + 1;
    }
    for (int i = 0; i < n; i++)
        if (!(sim->res[path[i]].cap > 0)) {
            char a[16], b[16];
            snprintf(a, sizeof(a), src < 0 ? "host" : "gpu %d", src);
            snprintf(b, sizeof(b), dst < 0 ? "host" : "gpu %d", dst);
            mpress_error_set(err, MPRESS_EINPUT,
                             "a copy from %s to %s crosses '%s', which has no bandwidth in the "
                             "topology", a, b, sim->res_name[path[i]]);
            return -1;
        }
    return n;
}

static void rate_log(struct mpress_sim *sim, int r, double rate)
{
    if (sim_grow((void **)&sim->rates, &sim->cap_rates, sim->n_rates + 1, sizeof(*sim->rates))) {
        sim->failed = 1;
        return;
    }
    sim->rates[sim->n_rates++] = (struct mpress_run_rate_event){sim->now, r, rate};
}

/* Max-min fair rates by progressive filling: repeatedly find the link whose remaining
 * capacity divided among its unfixed flows is smallest, fix those flows at that share, and
 * take their rate off every link they cross. (Over 100 lines: the filling and the rate-change
 * log share their scratch arrays and read best as one pass.) */
void sim_net_compute_rates(struct mpress_sim *sim)
{
    int n = sim->n_active;
    for (int i = 0; i < n; i++) {
        struct sim_task *T = &sim->tasks[sim->active[i]];
        T->rate = -1;
        for (int j = 0; j < T->n_path; j++) {
            sim->res[T->path[j]].rem = sim->res[T->path[j]].cap;
            sim->res[T->path[j]].cnt = 0;
        }
    }
    for (int i = 0; i < n; i++) {
        struct sim_task *T = &sim->tasks[sim->active[i]];
        for (int j = 0; j < T->n_path; j++)
            sim->res[T->path[j]].cnt++;
    }
    int left = n;
    while (left > 0) {
        double best = DBL_MAX;
        for (int i = 0; i < n; i++) {
            struct sim_task *T = &sim->tasks[sim->active[i]];
            if (T->rate >= 0)
                continue;
            for (int j = 0; j < T->n_path; j++) {
                struct sim_resource *r = &sim->res[T->path[j]];
                double share = r->rem / r->cnt;
                if (share < best)
                    best = share;
            }
        }
        if (best < 0)
            best = 0;
        /* Fix every flow that crosses a bottleneck link, then update the links. */
        int *fixed = sim->scratch, nf = 0;
        for (int i = 0; i < n; i++) {
            struct sim_task *T = &sim->tasks[sim->active[i]];
            if (T->rate >= 0)
                continue;
            for (int j = 0; j < T->n_path; j++) {
                struct sim_resource *r = &sim->res[T->path[j]];
                if (r->rem / r->cnt <= best * (1 + 1e-12)) {
                    fixed[nf++] = sim->active[i];
                    break;
                }
            }
        }
        for (int f = 0; f < nf; f++) {
            struct sim_task *T = &sim->tasks[fixed[f]];
            T->rate = best;
            for (int j = 0; j < T->n_path; j++) {
                struct sim_resource *r = &sim->res[T->path[j]];
                r->rem -= best;
                if (r->rem < 0)
                    r->rem = 0;
                r->cnt--;
            }
        }
        left -= nf;
    }
    /* New link rates; each change is logged for the trace's counter tracks. The links that
     * can change are those now carrying flows and those that carried flows before. */
    int nt = 0;
    for (int i = 0; i < sim->n_busy_res; i++) {
        int r = sim->busy_res[i];
        sim->res[r].new_rate = 0;
        sim->res[r].mark = 1;
        sim->scratch[nt++] = r;
    }
    for (int i = 0; i < n; i++) {
        struct sim_task *T = &sim->tasks[sim->active[i]];
        for (int j = 0; j < T->n_path; j++) {
            struct sim_resource *r = &sim->res[T->path[j]];
            if (!r->mark) {
                r->mark = 1;
                r->new_rate = 0;
                sim->scratch[nt++] = T->path[j];
            }
        }
    }
    for (int i = 0; i < n; i++) {
        struct sim_task *T = &sim->tasks[sim->active[i]];
        for (int j = 0; j < T->n_path; j++)
            sim->res[T->path[j]].new_rate += T->rate;
    }
    sim->n_busy_res = 0;
    for (int i = 0; i < nt; i++) {
        int r = sim->scratch[i];
        struct sim_resource *R = &sim->res[r];
        R->mark = 0;
        if (R->new_rate != R->rate) {
            R->rate = R->new_rate;
            rate_log(sim, r, R->rate);
        }
        if (R->rate > 0)
            sim->busy_res[sim->n_busy_res++] = r;
    }
    sim->rates_dirty = 0;
}

void sim_net_advance(struct mpress_sim *sim, double t)
{
    double dt = t - sim->now;
    if (dt > 0) {
        for (int i = 0; i < sim->n_active; i++) {
            struct sim_task *T = &sim->tasks[sim->active[i]];
            T->remaining -= T->rate * dt;
            for (int j = 0; j < T->n_path; j++)
                sim->res[T->path[j]].bytes += T->rate * dt;
        }
    }
    sim->now = t;
}

void sim_net_free(struct mpress_sim *sim)
{
    if (sim->res)
        for (int r = 0; r < sim->n_res; r++)
            free(sim->res[r].snap);
    free(sim->res);
    free(sim->res_name);
    free(sim->active);
    free(sim->scratch);
    free(sim->busy_res);
    free(sim->rates);
}
