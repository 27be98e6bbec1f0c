/* Plans: stage partition, stage -> GPU mapping, one action per saved tensor, model-state
 * placement, predictions and solver statistics. A plan embeds the profile and topology it was
 * made from, so `mpress run PLAN` needs nothing else. */
#ifndef MPRESS_PLAN_H
#define MPRESS_PLAN_H

#include <stdint.h>
#include <jansson.h>
#include "mpress/error.h"
#include "mpress/json.h"
#include "mpress/profile.h"
#include "mpress/topology.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mpress_action {
    MPRESS_ACTION_KEEP = 0,
    MPRESS_ACTION_RECOMPUTE = 1,
    MPRESS_ACTION_HOST_SWAP = 2,
    MPRESS_ACTION_D2D_SWAP = 3,
};
#define MPRESS_N_ACTIONS 4      /* number of enum mpress_action values */
MPRESS_API
const char *mpress_action_name(enum mpress_action a); /* "keep", "recompute", ... */
MPRESS_API
int mpress_action_parse(const char *s, enum mpress_action *out); /* 0 ok, -1 unknown */

enum mpress_schedule {
    MPRESS_SCHEDULE_1F1B = 0,
    MPRESS_SCHEDULE_GPIPE = 1,
    MPRESS_SCHEDULE_ASYNC = 2,   /* PipeDream-style 1F1B with stashed weight versions */
};
MPRESS_API
const char *mpress_schedule_name(enum mpress_schedule s); /* "1f1b", "gpipe", "async" */
MPRESS_API
int mpress_schedule_parse(const char *s, enum mpress_schedule *out);

struct mpress_plan_stage {
    int first_op, last_op;      /* inclusive op range in the profile */
    int gpu;                    /* GPU index in the topology */
    int optimizer_on_host;      /* 1: optimizer states in host memory, step on the CPU */
};

struct mpress_plan_action {
    int op;                     /* op index in the profile */
    int tensor;                 /* index into that op's tensors (JSON: the tensor id) */
    enum mpress_action action;
    /* D2D swap only: peers and the bytes each receives (sum = tensor bytes). */
    int n_peers;
    int peers[MPRESS_MAX_GPUS];
    uint64_t peer_bytes[MPRESS_MAX_GPUS];
    /* Swaps and recompute: after the forward of op evict_after_op the tensor leaves the GPU;
     * before the backward of op prefetch_before_op it must be back (or regenerated).
     * -1 for keep. */
    int evict_after_op;
    int prefetch_before_op;
};

/* Predicted per-GPU memory at its peak, by kind. Bytes. */
struct mpress_plan_gpu {
    int gpu;
    int stage;                  /* stage it runs, -1 if none (it may still hold parked bytes) */
    uint64_t capacity;          /* memory_bytes of the GPU */
    uint64_t peak;              /* sum of the parts below: the predicted peak */
    /* The planner's bound, >= peak: the parts with the stage's largest workspace in full
     * beside every kept activation, the form the MILP can write; a plan fits when every
     * GPU's bound is within capacity (docs/cost-model.md, "Memory"). */
    uint64_t bound;
    uint64_t weights, gradients, optimizer;
    uint64_t activations;       /* kept activations of all micro-batches in flight */
    uint64_t parked;            /* bytes other stages park here by D2D swap */
    uint64_t working;           /* backward working set: recompute outputs, prefetched tensors */
    uint64_t buffers;           /* boundary send/recv buffers */
    uint64_t reserve;
};

struct mpress_plan_solver {
    char status[24];            /* "optimal", "feasible", "infeasible", "heuristic", ... */
    double objective;           /* seconds */
    double bound;               /* best bound, seconds */
    double gap;                 /* relative, 0..1 */
    int rows, cols, integer_cols, nonzeros;
    long nodes;                 /* branch-and-bound nodes (GLPK does not report; -1) */
};

struct mpress_plan_baseline {
    char policy[16];            /* "none", "recompute", "swap", "greedy" */
    int fits;
    double iteration_s;         /* 0 when it does not fit */
};

#define MPRESS_MAX_BASELINES 8

struct mpress_plan {
    char generator[64];         /* "mpress 0.1.0" */
    char policy[16];            /* policy that made it: "ilp", "greedy", ... */
    char profile_hash[17], topology_hash[17]; /* mpress_hash_hex of canonical JSON */
    struct mpress_profile profile;   /* embedded copy */
    struct mpress_topology topology; /* embedded copy, already restricted to --gpus */
    enum mpress_schedule schedule;
    int micro_batches;          /* per iteration */
    int prefetch_lookahead;     /* ops ahead of its backward a prefetch is issued */
    int n_stages;
    struct mpress_plan_stage *stages;
    int n_actions;
    struct mpress_plan_action *actions;  /* one per saved tensor, in profile order */
    int n_gpus;
    struct mpress_plan_gpu *gpus;         /* one per topology GPU */
    double iteration_s;         /* predicted */
    double samples_per_s;       /* predicted: micro_batches * micro_batch / iteration_s */
    struct mpress_plan_solver solver;
    int n_baselines;
    struct mpress_plan_baseline baselines[MPRESS_MAX_BASELINES];
};

MPRESS_API
void mpress_plan_init(struct mpress_plan *plan);
MPRESS_API
void mpress_plan_finish(struct mpress_plan *plan);    /* frees; accepts zeroed structs */

/* Supported sizes of a plan (docs/formats.md, "Limits"). Stages are at most the topology's
 * GPUs (MPRESS_MAX_GPUS); ops and saved tensors are the profile's (MPRESS_MAX_OPS,
 * MPRESS_MAX_TENSORS). micro_batches x (ops + saved tensors) bounds the tasks of one
 * iteration's schedule, which consumers count in int. */
#define MPRESS_MAX_MICRO_BATCHES 65536
#define MPRESS_MAX_SCHEDULE_SLOTS (1L << 26)

/* Where mpress_plan_check found a plan wrong: the stage, action (index into actions), op,
 * tensor (index within the op) and peer (index into the action's peers) concerned, each -1
 * when it is not about one, and the JSON path of the offending value in an mpress-plan file
 * ("stages[2].gpu", "actions[7].peers[1].gpu", "micro_batches"). */
struct mpress_plan_fault {
    int stage, action, op, tensor, peer;
    char path[128];
};

/* The one set of rules a plan's decisions obey (docs/formats.md, "Plan rules"), used by the
 * plan loader, the evaluator and the simulator: 1 to n_gpus stages covering the ops in order,
 * one GPU each; one action per saved tensor in profile order; D2D peers are other GPUs with a
 * direct NVLink to the stage's GPU, each once, shares summing to the tensor's bytes; eviction
 * and prefetch points -1 for kept tensors, else from the op to the end of its stage;
 * micro_batches in [1, MPRESS_MAX_MICRO_BATCHES] and within MPRESS_MAX_SCHEDULE_SLOTS.
 * Returns 0, or MPRESS_EINPUT with the reason in err->text, err->path = fault->path (err and
 * fault may be NULL). */
MPRESS_API
int mpress_plan_check(const struct mpress_profile *p, const struct mpress_topology *t,
                      int micro_batches, int n_stages, const struct mpress_plan_stage *stages,
                      int n_actions, const struct mpress_plan_action *actions,
                      struct mpress_plan_fault *fault, struct mpress_error *err);

/* mpress-plan v2 (v1 adds no bound_bytes; it loads with bound = peak) */
#define MPRESS_PLAN_FORMAT "mpress-plan"
#define MPRESS_PLAN_VERSION 2
MPRESS_API
int mpress_plan_load(const char *file, struct mpress_plan *out, struct mpress_error *err);
MPRESS_API
json_t *mpress_plan_to_json(const struct mpress_plan *plan);
MPRESS_API
int mpress_plan_save(const char *file, const struct mpress_plan *plan, struct mpress_error *err);

/* "mpress-topology", "mpress-profile" or "mpress-plan" of a file, after full validation with
 * the matching loader. kind receives the format name. */
MPRESS_API
int mpress_validate_file(const char *file, char *kind, size_t kind_size,
                         struct mpress_error *err);

#ifdef __cplusplus
}
#endif
#endif
