/* Facts the evaluator, the baselines and the MILP share, so that each is stated once. */
#ifndef MPRESS_PLAN_INTERNAL_H
#define MPRESS_PLAN_INTERNAL_H

#include "mpress/planner.h"

/* The MILP keeps every GPU this fraction below its capacity: GLPK's feasibility tolerance
 * (1e-7 relative, after scaling) and rounding D2D byte shares to integers must never turn a
 * MILP plan into one the evaluator finds short. */
#define PLAN_MEM_MARGIN 1e-5

/* Micro-batches whose saved tensors stage k of n_stages holds at once (DESIGN.md): 1F1B and
 * async: min(S - k, M); GPipe: M. */
static inline int plan_in_flight(enum mpress_schedule s, int n_stages, int k, int m)
{
    if (s == MPRESS_SCHEDULE_GPIPE)
        return m;
    return n_stages - k < m ? n_stages - k : m;
}

/* Weight versions a stage keeps: async (PipeDream) stashes one per micro-batch in flight. */
static inline int plan_weight_versions(enum mpress_schedule s, int n_stages, int k, int m)
{
    return s == MPRESS_SCHEDULE_ASYNC ? plan_in_flight(s, n_stages, k, m) : 1;
}

/* Bytes/s per direction between GPUs a and b over NVLink (0: none). On NVSwitch servers
 * nvlinks[a][b] holds the ports each GPU can use toward any peer. */
double plan_nvlink_bw(const struct mpress_topology *t, int a, int b);
/* Per-direction NVLink capacity of GPU g toward the switch (NVSwitch fabric). */
double plan_port_bw(const struct mpress_topology *t, int g);
/* Bandwidth a boundary transfer between a and b gets: NVLink when there is one, else PCIe. */
double plan_boundary_bw(const struct mpress_topology *t, int a, int b);
/* Optimizer step time: bytes it touches (read P, G, O; write P, O) over a bandwidth. */
static inline double plan_optimizer_bytes(uint64_t pb, uint64_t gb, uint64_t ob)
{
    return 2.0 * (double)pb + (double)gb + 2.0 * (double)ob;
}
/* Host memory bandwidth all sockets give together to CPU optimizer steps. */
double plan_host_bw(const struct mpress_topology *t);

/* Total saved tensors of a profile. */
int plan_count_tensors(const struct mpress_profile *p);

/* Cut candidates: cut_ok[i] = 1 when a stage may end after op i (always for the last op). */
void plan_cut_points(const struct mpress_profile *p, enum mpress_cuts cuts, char *cut_ok);

/* Even partition by time into exactly s stages at allowed cuts (minimises the largest stage's
 * forward + backward time, ties broken toward earlier cuts); stage k on gpu order[k]. Returns
 * the number of stages made (fewer when there are fewer cut blocks than s). */
int plan_even_partition(const struct mpress_profile *p, const char *cut_ok, int s,
                        const int *order, struct mpress_assignment *a);

/* A GPU order for pipelines of n stages on topo: consecutive GPUs joined by NVLink when such
 * a path exists (depth-first search, lowest index first), else 0, 1, 2, ... */
void plan_gpu_order(const struct mpress_topology *t, int *order);

#endif
