/* The planner: one cost-model evaluator (docs/cost-model.md, "Planner cost model"), the
 * baseline policies built on it, and the GLPK MILP that chooses stages, the stage -> GPU
 * mapping, one action per saved tensor and the optimizer placement. */
#ifndef MPRESS_PLANNER_H
#define MPRESS_PLANNER_H

#include <stdint.h>
#include "mpress/error.h"
#include "mpress/plan.h"
#include "mpress/profile.h"
#include "mpress/topology.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A full decision: stages (op ranges, GPUs, optimizer placement) and one action per saved
 * tensor in profile order (actions[j] for the j-th tensor counting op by op). */
struct mpress_assignment {
    int n_stages;
    struct mpress_plan_stage stages[MPRESS_MAX_GPUS];
    int n_actions;
    struct mpress_plan_action *actions; /* malloc'd by mpress_assignment_init */
};

/* Allocates one keep action per saved tensor of p (stages left empty). */
MPRESS_API
int mpress_assignment_init(struct mpress_assignment *a, const struct mpress_profile *p,
                           struct mpress_error *err);
MPRESS_API
void mpress_assignment_finish(struct mpress_assignment *a); /* accepts zeroed structs */

/* What the cost model predicts for one assignment. */
struct mpress_plan_eval {
    int fits;                   /* every GPU and the host within capacity */
    int short_gpu;              /* GPU most over capacity, -1 when none (see host_short) */
    uint64_t short_bytes;       /* by how much */
    uint64_t host_bytes, host_short; /* host memory used by swaps and optimizer states */
    double iteration_s, cycle_s, fill_drain_s, tail_s, samples_per_s;
    double stage_s[MPRESS_MAX_GPUS];  /* per micro-batch compute of each stage */
    int n_gpus;
    struct mpress_plan_gpu gpus[MPRESS_MAX_GPUS];
    uint64_t action_bytes[MPRESS_N_ACTIONS]; /* saved bytes per micro-batch by enum mpress_action */
    char bottleneck[64];        /* what sets the cycle: "stage 2 compute", "nvlink 0-3", ... */
    /* Host swaps PCIe cannot drain during one forward (docs/cost-model.md, "Drain"): the
     * stage's GPU would hold drain_short more bytes than the memory model counts, so such a
     * plan does not fit; drain_gpu is the GPU most over (-1: none). */
    int drain_gpu;
    uint64_t drain_short;
};

/* The cost model. topo is already restricted to the GPUs in use. Returns MPRESS_EUSAGE for
 * micro_batches outside [1, MPRESS_MAX_MICRO_BATCHES] and MPRESS_EINPUT (reason in err->text,
 * JSON path in err->path) when the assignment breaks the plan rules of mpress_plan_check; a
 * plan that does not fit is still evaluated (ev->fits = 0). Byte sums saturate at UINT64_MAX
 * (such a plan never fits); times may come out infinite for absurd inputs. */
MPRESS_API
int mpress_plan_evaluate(const struct mpress_profile *p, const struct mpress_topology *topo,
                         enum mpress_schedule schedule, int micro_batches,
                         const struct mpress_assignment *a, struct mpress_plan_eval *ev,
                         struct mpress_error *err);

/* Which op boundaries a stage cut may use. */
enum mpress_cuts {
    MPRESS_CUTS_AUTO = 0,   /* layer boundaries when the profile has layers, else every op */
    MPRESS_CUTS_OPS = 1,    /* after any op */
    MPRESS_CUTS_LAYERS = 2, /* only where ops[i].layer != ops[i+1].layer */
};

/* Planning policies: the MILP and the baselines. Names (one table, mpress_policy_name) are
 * what `mpress plan --policy` takes and what plans store in "policy". */
enum mpress_policy {
    MPRESS_POLICY_ILP = 0,
    MPRESS_POLICY_GREEDY = 1,
    MPRESS_POLICY_RECOMPUTE = 2,
    MPRESS_POLICY_SWAP = 3,
    MPRESS_POLICY_NONE = 4,
};
#define MPRESS_N_POLICIES 5
MPRESS_API
const char *mpress_policy_name(enum mpress_policy p); /* "ilp", "greedy", ...; "unknown" */
MPRESS_API
int mpress_policy_parse(const char *s, enum mpress_policy *out); /* 0 ok, -1 unknown */

struct mpress_plan_options {
    enum mpress_schedule schedule;
    int micro_batches;
    enum mpress_policy policy;
    enum mpress_cuts cuts;
    double time_limit_s;        /* 0: none (wall clock: never used for goldens) */
    long node_limit;            /* stop after this many branch-and-bound nodes, 0: none */
    double mip_gap;             /* relative gap at which the MILP stops */
    const char *dump_lp;        /* write the MILP in CPLEX LP format here, NULL: no */
    /* Optional: called now and then during a MILP solve with incumbent (seconds, or a
     * negative value when there is none yet), best bound and relative gap. */
    void (*progress)(void *ctx, double incumbent, double bound, double gap);
    void *progress_ctx;
    /* Optional: a plan the MILP starts from as its first incumbent (e.g. the best baseline). */
    const struct mpress_assignment *warm_start;
};

/* Defaults: 1f1b, 16 micro-batches, ilp, automatic cuts, gap 1 %, 5000 nodes, no time limit. */
MPRESS_API
void mpress_plan_options_init(struct mpress_plan_options *o);

/* Builds the assignment of one baseline policy (any but MPRESS_POLICY_ILP) and evaluates it.
 * Returns 0 with ev->fits telling whether it fits. */
MPRESS_API
int mpress_plan_baseline(const struct mpress_profile *p, const struct mpress_topology *topo,
                         const struct mpress_plan_options *o, enum mpress_policy policy,
                         struct mpress_assignment *out, struct mpress_plan_eval *ev,
                         struct mpress_error *err);

/* Solves the MILP. On success fills out (re-evaluate it with mpress_plan_evaluate) and stats
 * (objective is the MILP's predicted iteration time). Without o->warm_start it looks for a
 * start itself (docs/cost-model.md, "Always an answer"); with a start it always returns a plan
 * (the start itself when the solver ends without one of its own). MPRESS_EINFEASIBLE when
 * nothing fits; MPRESS_ESYSTEM on a solver failure or when a limit stopped it before any
 * solution and no start exists. */
MPRESS_API
int mpress_plan_ilp(const struct mpress_profile *p, const struct mpress_topology *topo,
                    const struct mpress_plan_options *o, struct mpress_assignment *out,
                    struct mpress_plan_solver *stats, struct mpress_error *err);

/* The whole `mpress plan`: baselines, the chosen policy, evaluation, and a plan with embedded
 * copies of p and topo (already restricted). Infeasible: MPRESS_EINFEASIBLE and err names the
 * GPU that is short and by how many bytes: with the MILP, under the most memory-saving actions
 * (every tensor recomputed, optimizers on the host or not, whichever leaves less short); with
 * a baseline policy, in its evaluation. */
MPRESS_API
int mpress_plan_create(const struct mpress_profile *p, const struct mpress_topology *topo,
                       const struct mpress_plan_options *o, struct mpress_plan *out,
                       struct mpress_error *err);

/* `mpress explain`: the plan in words and tables, from the plan alone (no simulation); a
 * malloc'd string, NULL when out of memory. */
MPRESS_API
char *mpress_plan_explain(const struct mpress_plan *plan);

#ifdef __cplusplus
}
#endif
#endif
