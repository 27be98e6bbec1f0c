/* The systems a user would run instead of an mpress plan on the same server, in the same cost
 * model and in the simulator: DeepSpeed's data-parallel ZeRO policies (ZeRO-Offload, ZeRO-3,
 * ZeRO-Infinity without NVMe; Rajbhandari et al. SC'20, Ren et al. ATC'21, Rajbhandari et al.
 * SC'21) and Megatron-style recompute (selective: the attention core's s^2 tensors,
 * Korthikanti et al. 2022; full) on the plan's own pipeline. The formulas are written out in
 * docs/cost-model.md, "Data-parallel comparisons". */
#ifndef MPRESS_COMPARE_H
#define MPRESS_COMPARE_H

#include <stdint.h>
#include "mpress/error.h"
#include "mpress/plan.h"
#include "mpress/planner.h"
#include "mpress/profile.h"
#include "mpress/sched.h"
#include "mpress/topology.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ZeRO model states (ZeRO paper, section 5.1 and figure 1) ------------------------------ */

/* Per-GPU model-state bytes of ZeRO stage 0 (plain data parallelism), 1, 2 or 3 for psi
 * parameters, k optimizer bytes per parameter and n GPUs, with 16-bit weights and gradients:
 * stage 0 (4 + k) psi, 1: 4 psi + k psi / n, 2: 2 psi + (2 + k) psi / n, 3: (4 + k) psi / n. */
MPRESS_API
double mpress_zero_state_bytes(int stage, double psi, double k, int n);

/* ---- rings -------------------------------------------------------------------------------- */

#define MPRESS_MAX_RINGS 16

/* Directed rings a collective runs over (NCCL-style): on a direct NVLink fabric as many
 * link-disjoint Hamiltonian cycles as the links allow, each one link per hop (a ring and its
 * reverse use the two directions of the same links); on NVSwitch one ring at each GPU's port
 * rate; without an NVLink cycle one ring in GPU order at the slowest hop's rate (PCIe where
 * there is no NVLink). */
struct mpress_rings {
    int n;                      /* GPUs */
    int n_rings;
    int next[MPRESS_MAX_RINGS][MPRESS_MAX_GPUS];  /* next[r][g]: whom g sends to in ring r */
    double bytes_per_s[MPRESS_MAX_RINGS];         /* per hop of ring r, per direction */
    double total_bytes_per_s;                     /* sum over the rings */
};
MPRESS_API
void mpress_rings_find(const struct mpress_topology *topo, struct mpress_rings *out);
/* Ring reduce-scatter or all-gather of a tensor of `bytes` (the full size): every GPU sends
 * (n - 1) / n of it, split over the rings: (n - 1) / n x bytes / total_bytes_per_s. An
 * all-reduce is twice this: 2 (n - 1) / n x bytes / bw. No latency term. */
MPRESS_API
double mpress_rings_collective_s(const struct mpress_rings *r, double bytes);

/* ---- data-parallel policies --------------------------------------------------------------- */

enum mpress_dp_policy {
    MPRESS_DP_ZERO_OFFLOAD = 0, /* ZeRO-2 + optimizer states and step on the CPU */
    MPRESS_DP_ZERO3 = 1,        /* parameters, gradients, optimizer states partitioned */
    MPRESS_DP_ZERO_INFINITY = 2, /* ZeRO-3 with parameters and optimizer states on the host */
    MPRESS_DP_POLICIES
};
MPRESS_API
const char *mpress_dp_policy_name(enum mpress_dp_policy p); /* "zero-offload", ... */

/* Units of a data-parallel step: a transformer layer's ops, or one op outside the layers;
 * ZeRO-3 gathers and reduce-scatters one unit at a time. The last op of the unit starting at
 * op first. */
MPRESS_API
int mpress_dp_unit_end(const struct mpress_profile *p, int first);
/* 1 when op o's model states are resident states of the data-parallel model: ops with
 * parameters (a tied head's copy has none; it reuses the embedding's), or every op when the
 * profile counts no parameters at all. */
MPRESS_API
int mpress_dp_state_op(const struct mpress_profile *p, int o);

struct mpress_dp_config {
    enum mpress_dp_policy policy;
    int checkpoint;             /* 1: activation checkpointing per transformer layer */
    int micro_batches;          /* global micro-batches per iteration (the pipeline plan's M) */
};

struct mpress_dp_eval {
    int fits;                   /* every GPU and the host within capacity */
    int n_gpus;
    int per_gpu_micro_batches;  /* ceil(M / n): gradient-accumulation steps per GPU */
    double samples;             /* per iteration: n x per_gpu x micro_batch */
    /* per GPU (all GPUs hold the same), bytes */
    uint64_t states;            /* resident weights + gradients + optimizer partition */
    uint64_t gathered;          /* ZeRO-3 / Infinity: gathered unit weights (two units) */
    uint64_t grad_buckets;      /* full gradients of two units before their reduce-scatter */
    uint64_t activations;       /* one micro-batch's saved tensors (checkpointed or not) */
    uint64_t workspace;         /* the largest op workspace */
    uint64_t reserve;
    uint64_t peak, capacity;
    uint64_t host_bytes, host_capacity;
    double fwd_s, bwd_s;        /* compute of one micro-batch's forward and backward
                                   (recompute included) */
    double step_s;              /* from the end of the last backward to the end of the
                                   iteration: the step, with its copies and all-gather */
    double iteration_s, samples_per_s;
    struct mpress_rings rings;
};

/* Predicts memory and time of one policy (docs/cost-model.md): memory by formula, time by
 * the timeline of one GPU's compute, ring, H2D and D2H. The profile's per-op model states give
 * the bytes per parameter; op times are the profile's. */
MPRESS_API
int mpress_dp_evaluate(const struct mpress_profile *p, const struct mpress_topology *topo,
                       const struct mpress_dp_config *c, struct mpress_dp_eval *ev,
                       struct mpress_error *err);

/* A data-parallel step lowered into the schedule's task graph: each GPU runs the whole model
 * per micro-batch on its compute queue; collectives are ring steps between neighbour GPUs on
 * peer queues; offload copies on the D2H / H2D queues; CPU steps on the CPU queues. plan must
 * come from mpress_dp_plan (one stage per GPU, whose plan it describes). */
MPRESS_API
int mpress_sched_create_dp(const struct mpress_plan *plan, const struct mpress_dp_config *c,
                           const struct mpress_sched_options *opt, struct mpress_sched **out,
                           struct mpress_error *err);

/* A plan that stands for the data-parallel run: every GPU a "stage" over all ops, with the
 * predictions of ev (so a simulated report shows them beside its own numbers). */
MPRESS_API
int mpress_dp_plan(const struct mpress_profile *p, const struct mpress_topology *topo,
                   const struct mpress_dp_config *c, const struct mpress_dp_eval *ev,
                   struct mpress_plan *out, struct mpress_error *err);

/* ---- the comparison table ----------------------------------------------------------------- */

struct mpress_compare_row {
    char policy[32];            /* "mpress", "zero-offload", "zero-3+ckpt", "megatron-sel", ... */
    int fits;
    uint64_t peak, capacity;    /* fullest GPU, predicted */
    double predicted_s;         /* iteration, 0 when it does not fit */
    double simulated_s;         /* 0 when not simulated (does not fit) */
    int sim_oom;                /* the replay ran out of memory */
    uint64_t sim_peak;          /* fullest GPU in the replay */
    double samples;             /* per iteration */
    double samples_per_s;       /* predicted */
    double speedup;             /* mpress's samples/s over this row's (0: does not fit) */
};

#define MPRESS_COMPARE_MAX_ROWS 12

struct mpress_compare {
    int n_rows;
    struct mpress_compare_row rows[MPRESS_COMPARE_MAX_ROWS];
};

/* Every row for plan (an mpress plan from mpress_plan_create): the plan itself, the ZeRO
 * policies with and without checkpointing, and Megatron selective and full recompute on the
 * plan's partition. simulate 0: predictions only. */
MPRESS_API
int mpress_compare_create(const struct mpress_plan *plan, int simulate,
                          struct mpress_compare *out, struct mpress_error *err);

/* Only the ZeRO rows, for a job no pipeline plan fits (no speed-ups). */
MPRESS_API
int mpress_compare_zero(const struct mpress_profile *p, const struct mpress_topology *topo,
                        int micro_batches, int simulate, struct mpress_compare *out,
                        struct mpress_error *err);

/* The fastest ZeRO policy (with or without checkpointing) that fits, by predicted samples/s:
 * 0 and its config and evaluation; MPRESS_EINFEASIBLE when none fits. */
MPRESS_API
int mpress_zero_best(const struct mpress_profile *p, const struct mpress_topology *topo,
                     int micro_batches, struct mpress_dp_config *best, struct mpress_dp_eval *ev,
                     struct mpress_error *err);

/* Megatron-style recompute on the partition of plan: selective 1 recomputes the attention
 * core's softmax_out, dropout_mask and dropout_out (Korthikanti et al. 2022), 0 every saved
 * tensor; everything else kept, optimizer states on the GPU. Fills out with the actions, its
 * evaluation and predictions (a plan that may not fit). out's embedded profile charges each
 * producer op's forward once, on its first recomputed tensor (one rerun of an op regenerates
 * all it produced), where the profile gives every tensor its producer's whole forward. */
MPRESS_API
int mpress_recompute_plan(const struct mpress_plan *plan, int selective, struct mpress_plan *out,
                          struct mpress_plan_eval *ev, struct mpress_error *err);

#ifdef __cplusplus
}
#endif
#endif
