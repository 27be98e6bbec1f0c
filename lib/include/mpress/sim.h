/* The simulator: replays a plan's schedule (mpress/sched.h) event by event on its server
 * (compute streams, copy engines, links shared max-min fairly by concurrent transfers) with
 * exact per-GPU memory accounting, and reports time, memory and link use next to the plan's own
 * predictions. It shares the plan's data structures and task graph with the planner and the
 * runtime but none of the planner's cost formulas: it decides each task's duration and every
 * number it reports comes from the events it replays. Its result is a run report
 * (mpress/run_report.h), printed by the same code as a real run's. How it models a plan:
 * docs/simulator.md. */
#ifndef MPRESS_SIM_H
#define MPRESS_SIM_H

#include <stdint.h>
#include <jansson.h>
#include "mpress/error.h"
#include "mpress/plan.h"
#include "mpress/run_report.h"
#include "mpress/sched.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mpress_sim_options {
    int iterations;             /* >= 1; the last one is reported as the steady state */
    /* 0 (default): allocations never wait; going over capacity is out of memory.
     * 1: a compute task whose allocations would not fit waits while evictions from its GPU
     * are pending (what a runtime that throttles instead of failing would do). */
    int wait_for_memory;
};
MPRESS_API
void mpress_sim_options_init(struct mpress_sim_options *opt); /* iterations = 3 */

/* Names from before the schedule and the run report had headers of their own; kept so that
 * code written against them still builds. */
#define mpress_sim_mem_kind mpress_mem_kind
#define mpress_sim_mem_kind_name mpress_mem_kind_name
#define MPRESS_SIM_MEM_WEIGHTS MPRESS_MEM_WEIGHTS
#define MPRESS_SIM_MEM_GRADIENTS MPRESS_MEM_GRADIENTS
#define MPRESS_SIM_MEM_OPTIMIZER MPRESS_MEM_OPTIMIZER
#define MPRESS_SIM_MEM_ACTIVATIONS MPRESS_MEM_ACTIVATIONS
#define MPRESS_SIM_MEM_PARKED MPRESS_MEM_PARKED
#define MPRESS_SIM_MEM_INFLIGHT MPRESS_MEM_INFLIGHT
#define MPRESS_SIM_MEM_WORKING MPRESS_MEM_WORKING
#define MPRESS_SIM_MEM_BUFFERS MPRESS_MEM_BUFFERS
#define MPRESS_SIM_MEM_RESERVE MPRESS_MEM_RESERVE
#define MPRESS_SIM_MEM_KINDS MPRESS_MEM_KINDS
#define MPRESS_SIM_RESIDENTS MPRESS_RUN_RESIDENTS
#define mpress_sim_resident mpress_run_resident
#define mpress_sim_gpu mpress_run_gpu
#define mpress_sim_link mpress_run_link
#define mpress_sim_summary mpress_run_summary
#define mpress_sim_task_kind mpress_task_kind
#define mpress_sim_task_kind_name mpress_task_kind_name
#define MPRESS_SIM_FORWARD MPRESS_TASK_FORWARD
#define MPRESS_SIM_BACKWARD MPRESS_TASK_BACKWARD
#define MPRESS_SIM_RECOMPUTE MPRESS_TASK_RECOMPUTE
#define MPRESS_SIM_OPTIMIZER MPRESS_TASK_OPTIMIZER
#define MPRESS_SIM_EVICT MPRESS_TASK_EVICT
#define MPRESS_SIM_PREFETCH MPRESS_TASK_PREFETCH
#define MPRESS_SIM_SEND_ACT MPRESS_TASK_SEND_ACT
#define MPRESS_SIM_SEND_GRAD MPRESS_TASK_SEND_GRAD
#define MPRESS_SIM_GRAD_D2H MPRESS_TASK_GRAD_D2H
#define MPRESS_SIM_WEIGHTS_H2D MPRESS_TASK_WEIGHTS_H2D
#define MPRESS_SIM_TASK_KINDS MPRESS_TASK_KINDS
#define MPRESS_SIM_REPORT_FORMAT MPRESS_RUN_REPORT_FORMAT
#define MPRESS_SIM_REPORT_VERSION MPRESS_RUN_REPORT_VERSION

/* One task of the schedule and when the simulator ran it, for tests and tools. */
struct mpress_sim_task {
    enum mpress_task_kind kind;
    int stage, iteration, micro_batch;  /* micro_batch -1 for optimizer tasks */
    int op;                     /* op index, -1 where none */
    int action;                 /* index into plan->actions, -1 where none */
    int part;                   /* D2D part (peer index in the action), else 0 */
    int src, dst;               /* devices: GPU index, -1 = host; compute: src = dst = GPU */
    double bytes;               /* transfers */
    double ready_s;             /* all dependencies done */
    double start_s, end_s;
};

struct mpress_sim;              /* a finished simulation */

/* Validates plan for simulation and replays it. On success *out holds the result (even when a
 * GPU ran out of memory: see summary.out_of_memory). Errors: MPRESS_EINPUT for a plan the
 * simulator cannot replay (text says why), MPRESS_ESYSTEM for allocation failure. */
/* The result borrows plan: keep it alive until mpress_sim_destroy. */
MPRESS_API
int mpress_sim_run(const struct mpress_plan *plan, const struct mpress_sim_options *opt,
                   struct mpress_sim **out, struct mpress_error *err);
/* As mpress_sim_run, replaying sched (NULL: the plan's own schedule) instead of lowering the
 * plan; the simulation owns sched from the call on, also on failure. sched's iterations must be
 * opt->iterations (async: one more). The plan is then not held to the plan rules
 * (mpress_plan_check, which lowering a plan applies): the data-parallel comparisons
 * (mpress/compare.h) replay a stand-in plan whose stages each cover every op. */
MPRESS_API
int mpress_sim_run_sched(const struct mpress_plan *plan, struct mpress_sched *sched,
                         const struct mpress_sim_options *opt, struct mpress_sim **out,
                         struct mpress_error *err);
MPRESS_API
void mpress_sim_destroy(struct mpress_sim *sim);   /* accepts NULL */

MPRESS_API
const struct mpress_sim_summary *mpress_sim_summary_get(const struct mpress_sim *sim);
/* The run as a neutral report (for the mpress_run_* outputs) and the schedule it replayed;
 * both owned by sim. */
MPRESS_API
const struct mpress_run_report *mpress_sim_run_report(const struct mpress_sim *sim);
MPRESS_API
const struct mpress_sched *mpress_sim_sched(const struct mpress_sim *sim);
MPRESS_API
int mpress_sim_task_count(const struct mpress_sim *sim);
MPRESS_API
const struct mpress_sim_task *mpress_sim_task_get(const struct mpress_sim *sim, int i);
/* The first task matching kind, stage, iteration, micro-batch, op and action (-1 = any), or
 * NULL. For tests and tools. */
MPRESS_API
const struct mpress_sim_task *mpress_sim_task_find(const struct mpress_sim *sim,
                                                   enum mpress_sim_task_kind kind, int stage,
                                                   int iteration, int micro_batch, int op,
                                                   int action);
/* Memory of device gpu (-1 = host) right after everything that happened at time t. */
MPRESS_API
uint64_t mpress_sim_memory_at(const struct mpress_sim *sim, int gpu, double t);

/* The mpress_run_* outputs of mpress_sim_run_report(sim) (mpress/run_report.h). */
MPRESS_API
json_t *mpress_sim_report_json(const struct mpress_sim *sim);
MPRESS_API
char *mpress_sim_trace(const struct mpress_sim *sim);
MPRESS_API
char *mpress_sim_svg(const struct mpress_sim *sim);
MPRESS_API
char *mpress_sim_render(const struct mpress_sim *sim);
/* "out of memory on gpu G at T s: peak P of capacity C; largest residents: ..." (or the same
 * for pinned host memory), or NULL when everything fits. */
MPRESS_API
char *mpress_sim_oom_text(const struct mpress_sim *sim);

#ifdef __cplusplus
}
#endif
#endif
