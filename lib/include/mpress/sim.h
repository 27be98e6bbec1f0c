/* The simulator: replays a plan event by event on its server (compute streams, copy engines,
 * links shared max-min fairly by concurrent transfers) with exact per-GPU memory accounting,
 * and reports time, memory and link use next to the plan's own predictions. It shares the
 * plan's data structures with the planner but none of its cost formulas: every number it
 * reports comes from the events it replays. How it models a plan: docs/simulator.md. */
#ifndef MPRESS_SIM_H
#define MPRESS_SIM_H

#include <stdint.h>
#include <jansson.h>
#include "mpress/error.h"
#include "mpress/plan.h"

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
void mpress_sim_options_init(struct mpress_sim_options *opt); /* iterations = 3 */

/* What a byte on a device is held for. */
enum mpress_sim_mem_kind {
    MPRESS_SIM_MEM_WEIGHTS = 0,  /* parameters (and stashed versions under async) */
    MPRESS_SIM_MEM_GRADIENTS,
    MPRESS_SIM_MEM_OPTIMIZER,
    MPRESS_SIM_MEM_ACTIVATIONS,  /* saved tensors kept since their forward */
    MPRESS_SIM_MEM_PARKED,       /* tensors other GPUs parked here by D2D swap */
    MPRESS_SIM_MEM_INFLIGHT,     /* swapped tensors while a copy of them is moving */
    MPRESS_SIM_MEM_WORKING,      /* op workspace, recompute outputs, prefetched tensors */
    MPRESS_SIM_MEM_BUFFERS,      /* boundary send/recv buffers */
    MPRESS_SIM_MEM_RESERVE,      /* CUDA context and allocator slack (topology reserve) */
    MPRESS_SIM_MEM_KINDS
};
const char *mpress_sim_mem_kind_name(enum mpress_sim_mem_kind k); /* "weights", ... */

#define MPRESS_SIM_RESIDENTS 5

struct mpress_sim_resident {
    char label[96];             /* e.g. "activations, iteration 2 micro-batch 3" */
    uint64_t bytes;
};

struct mpress_sim_gpu {
    int gpu;
    int stage;                  /* -1 when it runs none */
    uint64_t capacity;
    uint64_t peak;              /* highest total over the whole run, reserve included */
    double peak_time_s;         /* first time the peak is reached */
    uint64_t at_peak[MPRESS_SIM_MEM_KINDS];  /* breakdown at that moment */
    int n_residents;            /* largest residents at the peak, biggest first */
    struct mpress_sim_resident residents[MPRESS_SIM_RESIDENTS];
    int out_of_memory;          /* peak > capacity */
    double oom_time_s;          /* first time the total exceeded capacity */
    /* Over the reported (last) iteration: */
    double busy_s;              /* compute stream busy */
    double stall_swap_s;        /* compute waiting on an eviction or prefetch copy */
    double stall_boundary_s;    /* compute waiting on a boundary send/recv copy */
    double stall_optimizer_s;   /* compute waiting on a host optimizer step */
    double stall_memory_s;      /* compute held for memory (wait_for_memory only) */
};

struct mpress_sim_link {
    char name[48];              /* "pcie gpu0 up", "switch0 uplink down", "nvlink 0->1", ... */
    double bytes_per_s;         /* capacity */
    double bytes;               /* carried during the reported iteration */
    double utilization;         /* bytes / (capacity x iteration time) */
};

struct mpress_sim_summary {
    int iterations;
    double iteration_s;         /* the last iteration: end(last) - end(last - 1) */
    double iteration_start_s, iteration_end_s;
    double total_s;             /* end of the whole run */
    double samples_per_s;
    double model_tflops;        /* 3 x forward FLOPs per sample (recompute not counted) */
    double hardware_tflops;     /* model FLOPs plus the FLOPs recompute executes */
    int out_of_memory;          /* any GPU */
    int oom_gpu;                /* first GPU to run out (by time), -1 if none */
    uint64_t host_peak;         /* pinned host memory: host swaps and host optimizer states */
    uint64_t host_capacity;     /* the topology's host memory; 0 = unknown, not checked */
    int host_out_of_memory;     /* host_peak > host_capacity */
    int n_gpus;
    struct mpress_sim_gpu gpus[MPRESS_MAX_GPUS];
    int n_links;                /* links that carried bytes at any time in the run */
    struct mpress_sim_link *links;
};

/* One task the simulator ran, for tests and traces. */
enum mpress_sim_task_kind {
    MPRESS_SIM_FORWARD = 0,
    MPRESS_SIM_BACKWARD,
    MPRESS_SIM_RECOMPUTE,
    MPRESS_SIM_OPTIMIZER,       /* GPU step, or CPU step when the stage's optimizer is on host */
    MPRESS_SIM_EVICT,           /* tensor (part) leaves its GPU: to host or a peer */
    MPRESS_SIM_PREFETCH,        /* tensor (part) comes back */
    MPRESS_SIM_SEND_ACT,        /* boundary activation, stage k -> k+1 */
    MPRESS_SIM_SEND_GRAD,       /* boundary gradient, stage k+1 -> k */
    MPRESS_SIM_GRAD_D2H,        /* host optimizer: gradients down */
    MPRESS_SIM_WEIGHTS_H2D,     /* host optimizer: new weights up */
    MPRESS_SIM_TASK_KINDS
};
const char *mpress_sim_task_kind_name(enum mpress_sim_task_kind k);

struct mpress_sim_task {
    enum mpress_sim_task_kind kind;
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
int mpress_sim_run(const struct mpress_plan *plan, const struct mpress_sim_options *opt,
                   struct mpress_sim **out, struct mpress_error *err);
void mpress_sim_destroy(struct mpress_sim *sim);   /* accepts NULL */

const struct mpress_sim_summary *mpress_sim_summary_get(const struct mpress_sim *sim);
int mpress_sim_task_count(const struct mpress_sim *sim);
const struct mpress_sim_task *mpress_sim_task_get(const struct mpress_sim *sim, int i);
/* The first task matching kind, stage, iteration, micro-batch, op and action (-1 = any), or
 * NULL. For tests and tools. */
const struct mpress_sim_task *mpress_sim_task_find(const struct mpress_sim *sim,
                                                   enum mpress_sim_task_kind kind, int stage,
                                                   int iteration, int micro_batch, int op,
                                                   int action);
/* Memory of device gpu (-1 = host) right after everything that happened at time t. */
uint64_t mpress_sim_memory_at(const struct mpress_sim *sim, int gpu, double t);

/* Outputs. The report is a mpress-sim-report v1 object; the trace is Chrome trace event
 * format (opens in Perfetto and chrome://tracing); the SVG shows per-GPU memory over the
 * reported iteration and a stacked bar per GPU at its peak against capacity. The text is what
 * `mpress run` prints. Strings are malloc'd; NULL on allocation failure. */
#define MPRESS_SIM_REPORT_FORMAT "mpress-sim-report"
#define MPRESS_SIM_REPORT_VERSION 1
json_t *mpress_sim_report_json(const struct mpress_sim *sim);
char *mpress_sim_trace(const struct mpress_sim *sim);
char *mpress_sim_svg(const struct mpress_sim *sim);
char *mpress_sim_render(const struct mpress_sim *sim);
/* "out of memory on gpu G at T s: peak P of capacity C; largest residents: ..." (or the same
 * for pinned host memory), or NULL when everything fits. */
char *mpress_sim_oom_text(const struct mpress_sim *sim);

/* `mpress explain`: the plan in words and tables, from the plan alone (no simulation). */
char *mpress_plan_explain(const struct mpress_plan *plan);

#ifdef __cplusplus
}
#endif
#endif
