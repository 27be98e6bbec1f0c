/* The evaluator in two halves (per-stage sums, then everything computed from them) and a trial
 * evaluation that changes one saved tensor's action in the sums of an assignment instead of
 * summing the whole plan again: O(stages x GPUs) per trial instead of O(ops + tensors). The
 * greedy baseline scores its candidate moves with it (docs/benchmarks.md, "Scale"). */
#ifndef MPRESS_PLAN_EVAL_TRIAL_H
#define MPRESS_PLAN_EVAL_TRIAL_H

#include <stdint.h>

#include "mpress/model.h"
#include "mpress/planner.h"
#include "plan_internal.h"

/* What one micro-batch of each stage k costs and holds, summed over the stage's ops and saved
 * tensors by the assignment's actions. */
struct stage_sums {
    double comp[MPRESS_MAX_GPUS]; /* forward + backward + recompute seconds */
    double fwd[MPRESS_MAX_GPUS];  /* forward seconds */
    /* parameter, gradient and optimizer-state bytes */
    uint64_t pb[MPRESS_MAX_GPUS], gb[MPRESS_MAX_GPUS], ob[MPRESS_MAX_GPUS];
    uint64_t kept[MPRESS_MAX_GPUS], evicted[MPRESS_MAX_GPUS];
    uint64_t host[MPRESS_MAX_GPUS]; /* host-swapped bytes */
    uint64_t ws[MPRESS_MAX_GPUS];   /* largest workspace */
    /* The workspace at its moment (docs/cost-model.md, "Memory"): kc the kept bytes (keep
     * only, not held inputs), wv the largest workspace_bytes of op i plus the kept bytes of
     * ops first_op..i; the working set then holds wv - kc of workspace beside the activations. */
    uint64_t kc[MPRESS_MAX_GPUS], wv[MPRESS_MAX_GPUS];
    uint64_t out[MPRESS_MAX_GPUS];  /* boundary output to stage k + 1 (0 for the last) */
    /* The tied weight (plan_tied_find), found once with the sums: a trial scans no op names. */
    struct plan_tied tw;
    int tied;
    /* d2d[k][g]: bytes per micro-batch stage k parks on GPU g. */
    uint64_t (*d2d)[MPRESS_MAX_GPUS];
};

/* Stage k's workspace at the moment its op runs, within the largest (ws): the kept tensors of
 * the ops after that op are not made yet in its forward and freed already in its backward. */
static inline uint64_t plan_workspace_at_peak(const struct stage_sums *s, int k)
{
    uint64_t w = s->wv[k] >= s->kc[k] ? s->wv[k] - s->kc[k] : 0;
    return w < s->ws[k] ? w : s->ws[k];
}

/* Sum the stages' ops and the bytes of each action into s (zeroed, d2d allocated) and
 * ev->action_bytes. */
void plan_sum_stages(const struct mpress_profile *p, const struct mpress_assignment *a,
                     struct stage_sums *s, struct mpress_plan_eval *ev);
/* The rest of the evaluation from the sums: memory, drain, host, cycle and times. ev is zeroed
 * but for action_bytes, with short_gpu = drain_gpu = -1. */
void plan_eval_sums(const struct mpress_profile *p, const struct mpress_topology *topo,
                    enum mpress_schedule schedule, int M, const struct mpress_assignment *a,
                    const struct stage_sums *s, struct mpress_plan_eval *ev);
/* mpress_plan_evaluate without the plan rules (for assignments already checked, changed only
 * in ways that keep them valid). 0 or MPRESS_ESYSTEM. */
int plan_evaluate_unchecked(const struct mpress_profile *p, const struct mpress_topology *topo,
                            enum mpress_schedule schedule, int M,
                            const struct mpress_assignment *a, struct mpress_plan_eval *ev,
                            struct mpress_error *err);

/* The sums of one assignment (the base) and what a trial needs to know about them. */
struct plan_trial {
    struct stage_sums s;
    uint64_t action_bytes[MPRESS_N_ACTIONS];
    int exact_bytes;                 /* no byte sum can saturate: byte deltas are exact */
    int finite;                      /* every stage's time is finite */
    int stale;                       /* commits left the times unbounded: trials are full */
    double comp_err[MPRESS_MAX_GPUS]; /* bound on rounding of comp[k] after one change */
    double drift[MPRESS_MAX_GPUS];    /* rounding that commits added to comp[k] since */
    int *stage_of;                   /* stage of each action */
    int n_actions;
    /* Per op i, over the ops of its stage, of workspace_bytes(i') + the kept bytes (keep only)
     * of ops first_op..i': the largest for i' <= i (pre) and for i' >= i (suf), from which a
     * trial has the stage's wv in O(1). */
    uint64_t *pre, *suf;
    /* the stages those facts are for (they depend on the cuts, not the actions) */
    int n_stages, first_op[MPRESS_MAX_GPUS], last_op[MPRESS_MAX_GPUS];
    int stages_finite;
};

/* Allocate a trial for assignments of p's tensors. 0 or MPRESS_ESYSTEM. */
int plan_trial_init(struct plan_trial *t, const struct mpress_profile *p,
                    struct mpress_error *err);
void plan_trial_free(struct plan_trial *t);
/* Make assignment a the base (O(ops + tensors)) and write its full evaluation into ev, the
 * same as plan_evaluate_unchecked gives. */
void plan_trial_base(struct plan_trial *t, const struct mpress_profile *p,
                     const struct mpress_topology *topo, enum mpress_schedule schedule, int M,
                     const struct mpress_assignment *a, struct mpress_plan_eval *ev);
/* Evaluate a, which differs from the base only in action j (whose base action was *old; j < 0:
 * in no action) and in the stages' optimizer_on_host flags, into ev. Memory, shortfall and fit
 * are those of plan_evaluate_unchecked exactly; the times are too unless the change adds or
 * removes a recompute, when they may differ in the last bits and *time_err bounds by how much
 * |ev->iteration_s| and every other time differs (0 otherwise). The base is left as it was.
 * 0 or MPRESS_ESYSTEM (a fallback to the full evaluation ran out of memory). */
int plan_trial_eval(struct plan_trial *t, const struct mpress_profile *p,
                    const struct mpress_topology *topo, enum mpress_schedule schedule, int M,
                    const struct mpress_assignment *a, int j,
                    const struct mpress_plan_action *old, struct mpress_plan_eval *ev,
                    double *time_err);

/* Make the change of action j (base action *old, a's action now) part of the base without
 * summing the plan again (O(GPUs + the stage's ops)): later trials are of a as it stands. The
 * stage's time then carries the rounding of the changes made since plan_trial_base, which the
 * trials' time_err includes. */
void plan_trial_commit(struct plan_trial *t, const struct mpress_profile *p,
                       const struct mpress_assignment *a, int j,
                       const struct mpress_plan_action *old);

#endif
