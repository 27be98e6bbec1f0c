/* Symmetry of the server for the MILP: the GPU permutations the cost model cannot tell apart,
 * and the exact cut that keeps one plan of each orbit. */
#include <stdlib.h>
#include <string.h>

#include "ilp_internal.h"

/* Automorphisms of a direct-fabric server: GPU permutations that keep NVLink counts, GPU
 * specs and the PCIe switch grouping (with uplink rates). The cost model cannot tell a plan
 * from its image under one, so the MILP may require the last slot's GPU to be the smallest of
 * its orbit, and the slot before it the smallest of its orbit under the permutations that
 * keep the last slot's GPU: an exact cut of symmetric duplicates. */

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

void ilp_sym_find(const struct mpress_topology *t, struct sym *s)
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
void ilp_sym_cut(struct model *m, const struct inst *in, const struct cols *c,
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
            ilp_row_begin(m);
            ilp_row_add(m, c->x[IX2(N - 1, r, N)], 1);
            ilp_row_add(m, c->x[IX2(N - 2, g, N)], 1);
            ilp_name(nm, "sym_%d_%d", r, g, 0);
            ilp_row_end(m, nm, GLP_UP, 1);
        }
    }
}
