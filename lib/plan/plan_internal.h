/* Facts the evaluator, the baselines and the MILP share, so that each is stated once. */
#ifndef MPRESS_PLAN_INTERNAL_H
#define MPRESS_PLAN_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "mpress/model.h"
#include "mpress/planner.h"

/* The MILP keeps every GPU this fraction below its capacity: GLPK's feasibility tolerance
 * (1e-7 relative, after scaling) and rounding D2D byte shares to integers must never turn a
 * MILP plan into one the evaluator finds short. */
#define PLAN_MEM_MARGIN 1e-5
/* and at least this many bytes: on small devices the tolerance, 1e-7 of the MILP's GB unit,
 * is about 100 bytes, more than the fraction (bert-tiny, GPipe, on 8 emulated 800 KiB devices:
 * exit 4, "the MILP's plan does not fit when evaluated (GPU 2 short by 16 bytes)") */
#define PLAN_MEM_MARGIN_BYTES 1024.0

/* Share of a link's bandwidth that one micro-batch's evictions may need during the stage's
 * forward (the drain rows). Below 1 because an eviction starts only after its op's forward
 * ends and shares its link with prefetches coming back and boundary tensors, so the last
 * forward of the 1F1B warm-up still has copies in flight when the first backward starts and
 * its prefetches land, which the memory model does not count: 0.5 keeps a margin for that
 * (docs/cost-model.md, "Drain"). */
#define PLAN_DRAIN_SHARE 0.5

/* Byte sums that saturate at UINT64_MAX instead of wrapping: a profile may state any 64-bit
 * size (a tensor of 2^63 - 1 bytes), and a sum that wrapped would make a plan that cannot fit
 * look small. A saturated total exceeds every capacity, so such a plan never fits. */
static inline uint64_t plan_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}
static inline uint64_t plan_mul(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}
/* A non-negative byte count held in a double, saturated into 64 bits. */
static inline uint64_t plan_u64(double x)
{
    return !(x > 0) ? 0 : x >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)x;
}

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
/* Optimizer step: the bytes it reads and writes where it runs (mpress_optimizer_step_traffic,
 * docs/cost-model.md, "Optimizer step"); its time is that over HBM or host memory bandwidth. */
static inline double plan_optimizer_bytes(const struct mpress_profile *p, uint64_t pb,
                                          uint64_t gb, uint64_t ob)
{
    struct mpress_optimizer_traffic tr;
    mpress_optimizer_step_traffic(&p->model, (double)pb, (double)gb, (double)ob, &tr);
    return tr.memory_bytes;
}
/* The CPU socket of GPU g, whose memory a host optimizer step of g's stage runs on. */
static inline int plan_socket(const struct mpress_topology *t, int g)
{
    int n = t->n_sockets > 0 ? t->n_sockets : 1, q = t->gpus[g].socket;
    return q >= 0 && q < n ? q : 0;
}
/* The tied word embedding of GPT and BERT (docs/cost-model.md, "Tied word embedding"): the
 * profile gives `head` the model states of a copy of the embedding's word matrix (its
 * param_bytes cover more parameters than its own `params`). owner and copy are op indices,
 * p, g, o the copy's weight, gradient and optimizer-state bytes. */
struct plan_tied {
    int owner, copy;
    uint64_t p, g, o;
};
/* 1 and *t filled when p's model ties a weight that way, else 0. */
int plan_tied_find(const struct mpress_profile *p, struct plan_tied *t);

/* Host memory bandwidth all sockets give together to CPU optimizer steps. */
double plan_host_bw(const struct mpress_topology *t);

/* The mapping-free relaxation of a direct-fabric server of identical GPUs (ilp_relax.c): the
 * same GPUs and host behind an NVSwitch-like fabric whose every pair is as fast as the real
 * server's best GPU links together, each GPU on its own PCIe switch and socket. -1 (out
 * untouched) where it does not apply: NVSwitch already, one GPU, or GPUs that differ. */
int plan_topology_relax(const struct mpress_topology *t, struct mpress_topology *out);
/* The same with each GPU on its real socket (and the real number of sockets): relaxes t with
 * every plan's GPUs kept, and the MILP on it, told to choose each slot's socket
 * (ILP_SOCKET_FREE), bounds t's plans with their CPU queues shared as on t. */
int plan_topology_relax_sockets(const struct mpress_topology *t, struct mpress_topology *out);
/* The node limit above which plan_second_search bounds on plan_topology_relax_sockets's server
 * instead of plan_topology_relax's (0, no limit, too): its tree is larger, and it certifies
 * where the mapping-free bound cannot (docs/benchmarks.md, "The socket-aware bound"). */
#define PLAN_SOCKET_BOUND_NODES 5000
/* a with stage k moved to GPU k and D2D peers renamed alike (out initialised for a's
 * profile): the same plan on the relaxed server. */
void plan_assignment_relax(const struct mpress_assignment *a, int n_gpus,
                           struct mpress_assignment *out);
/* The inverse move for a plan rel of the relaxed server: stage k's GPU k back to the GPU of
 * stage k of real (the plan that plan_assignment_relax moved; the GPUs real leaves unused in
 * ascending order for the relaxed ones past its stages). Only the partition, the mapping and
 * the optimizer placement are kept: every saved tensor is kept in out. */
void plan_assignment_unrelax(const struct mpress_assignment *rel,
                             const struct mpress_assignment *real, int n_gpus,
                             struct mpress_assignment *out);
/* The MILP's first search (mpress_plan_ilp), which plan_second_search follows up: where both
 * of its searches follow (a server plan_topology_relax relaxes, host optimizers on several
 * sockets), the search before branch and bound within half its nodes, branch and bound within
 * 500 nodes of the node limit (a tenth of it past 5000; ILP_FIRST_LOOK where its gap is still
 * above ILP_FIRST_FAR there) and no local search after it, since the third search replaces
 * the mapping those keep (ilp_relax.c). */
int plan_first_search(const struct mpress_profile *p, const struct mpress_topology *topo,
                      const struct mpress_plan_options *o, struct mpress_assignment *out,
                      struct mpress_plan_solver *stats, struct mpress_error *err);
/* Where the MILP stopped at its node limit above the gap, a second search within the same
 * limits (ilp_relax.c, plan_second_search, explains both): on a server plan_topology_relax
 * relaxes, the relaxed server's MILP from plan, whose bound alone counts, then (host
 * optimizers on several sockets, gap still open) the MILP with the mapping fixed to the one
 * ilp_map_search finds on the relaxed plan's partition, whose plan alone counts; on more than
 * ILP_HOST_FIRST_MAX GPUs of a fixed mapping, the MILP again branching on the optimizer
 * placement first, from o's start. plan and solver become the faster plan with the higher
 * bound (gap, and status "gap_reached" when it closes), nodes added. 0, or MPRESS_ESYSTEM
 * when out of memory. */
int plan_second_search(const struct mpress_profile *p, const struct mpress_topology *topo,
                       const struct mpress_plan_options *o, struct mpress_assignment *plan,
                       struct mpress_plan_solver *solver, struct mpress_error *err);

/* prefetch_before_op of a tensor of op `op` in a stage ending at `stage_last`. A swapped
 * tensor is awaited by its own op's backward: with the plan's lookahead this is a sliding
 * window, each copy issued the same number of tasks ahead of its use, so one micro-batch's
 * prefetches never pile on the previous one's (docs/cost-model.md, "Prefetch"). Recomputes
 * all run at the start of the stage's backward (the backward slot of its last op). */
static inline int plan_prefetch_point(enum mpress_action kind, int op, int stage_last)
{
    if (kind == MPRESS_ACTION_KEEP)
        return -1;
    return kind == MPRESS_ACTION_RECOMPUTE ? stage_last : op;
}

/* Sets the prefetch points of a's swapped tensors and returns the plan's prefetch_lookahead:
 * each tensor's prefetch is issued when the previous micro-batch's backward has freed the
 * same op's copy (in steady 1F1B, during the forward that precedes the backward needing it),
 * so that prefetched bytes are one micro-batch's worth and each copy has about a forward's
 * time to land (docs/cost-model.md, "Prefetch"). 0 without swaps. */
int plan_schedule_prefetches(const struct mpress_profile *p, struct mpress_assignment *a);

/* Bytes an evaluation is short by in all: every GPU over its capacity, the drain backlog and
 * the host (0 when it fits). */
uint64_t plan_shortfall(const struct mpress_plan_eval *ev);

/* Whether ts, saved in a stage whose first op is stage_first, is a stage input: its recompute
 * starts at an op of an earlier stage, so recomputing it holds the stage's input as received
 * (docs/cost-model.md, "Held stage inputs"). */
static inline int plan_stage_input(const struct mpress_saved_tensor *ts, int stage_first)
{
    return ts->recompute_op < stage_first;
}

/* Saved tensors of one class (same op kind, tensor name, bytes and recompute cost) are
 * interchangeable: the MILP counts them and the greedy baseline tries one of each. */
static inline int plan_same_class(const struct mpress_op *oa,
                                  const struct mpress_saved_tensor *ta,
                                  const struct mpress_op *ob,
                                  const struct mpress_saved_tensor *tb)
{
    return strcmp(oa->kind, ob->kind) == 0 && strcmp(ta->name, tb->name) == 0 &&
           ta->bytes == tb->bytes && ta->recompute_s == tb->recompute_s;
}

/* Total saved tensors of a profile. */
int plan_count_tensors(const struct mpress_profile *p);

/* d made a copy of s (both initialised for the same profile: eval.c). */
void plan_assignment_copy(struct mpress_assignment *d, const struct mpress_assignment *s);

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
