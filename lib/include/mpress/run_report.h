/* What a run of a schedule did, simulated or real: a neutral summary plus an event log (when
 * each task of the schedule ran, when each memory list was applied, how fast each link moved),
 * and the outputs that print it: the report JSON, the Chrome trace, the SVG and the text table.
 * The simulator fills one (mpress_sim_run_report); a runtime fills the same struct from what it
 * measured, and both print through the same code. */
#ifndef MPRESS_RUN_REPORT_H
#define MPRESS_RUN_REPORT_H

#include <stdint.h>
#include <jansson.h>
#include "mpress/plan.h"
#include "mpress/sched.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MPRESS_RUN_RESIDENTS 5

struct mpress_run_resident {
    char label[96];             /* e.g. "activations, iteration 2 micro-batch 3" */
    uint64_t bytes;
};

struct mpress_run_gpu {
    int gpu;
    int stage;                  /* -1 when it runs none */
    uint64_t capacity;
    uint64_t peak;              /* highest total over the whole run, reserve included */
    double peak_time_s;         /* first time the peak is reached */
    uint64_t at_peak[MPRESS_MEM_KINDS];  /* breakdown at that moment */
    int n_residents;            /* largest residents at the peak, biggest first */
    struct mpress_run_resident residents[MPRESS_RUN_RESIDENTS];
    int out_of_memory;          /* peak > capacity */
    double oom_time_s;          /* first time the total exceeded capacity */
    /* Over the reported (last) iteration: */
    double busy_s;              /* compute stream busy */
    double stall_swap_s;        /* compute waiting on an eviction or prefetch copy */
    double stall_boundary_s;    /* compute waiting on a boundary send/recv copy */
    double stall_optimizer_s;   /* compute waiting on a host optimizer step */
    double stall_memory_s;      /* compute held for memory (wait_for_memory only) */
};

struct mpress_run_link {
    char name[48];              /* "pcie gpu0 up", "switch0 uplink down", "nvlink 0->1", ... */
    double bytes_per_s;         /* capacity */
    double bytes;               /* carried during the reported iteration */
    double utilization;         /* bytes / (capacity x iteration time) */
};

struct mpress_run_summary {
    int iterations;
    double iteration_s;         /* the last iteration: end(last) - end(last - 1) */
    double iteration_start_s, iteration_end_s;
    double total_s;             /* end of the whole run */
    double samples_per_s;
    double model_tflops;        /* 3 x forward FLOPs per sample (recompute not counted) */
    double hardware_tflops;     /* model FLOPs plus the FLOPs recompute executes */
    double model_flops_per_iter; /* the model FLOPs behind model_tflops */
    int out_of_memory;          /* any GPU */
    int oom_gpu;                /* first GPU to run out (by time), -1 if none */
    uint64_t host_peak;         /* pinned host memory: host swaps and host optimizer states */
    uint64_t host_capacity;     /* the topology's host memory; 0 = unknown, not checked */
    int host_out_of_memory;     /* host_peak > host_capacity */
    int n_gpus;
    struct mpress_run_gpu gpus[MPRESS_MAX_GPUS];
    int n_links;                /* links that carried bytes at any time in the run */
    struct mpress_run_link *links;
};

/* When task i of the schedule ran (-1 where it did not). */
struct mpress_run_task_time {
    double ready_s;             /* all dependencies done */
    double start_s, end_s;
};

/* One memory list of the schedule applied at time t: task -1 is the initial list (model
 * states, reserves), else task's start (phase 0) or end (phase 1) list. */
struct mpress_run_mem_event {
    double t;
    int task;
    int phase;
};

/* A link's total rate changed at time t (the trace's counter tracks). */
struct mpress_run_rate_event {
    double t;
    int link;                   /* index into link_names */
    double bytes_per_s;
};

struct mpress_run_report {
    const struct mpress_sched *sched;   /* what ran; its plan is mpress_sched_plan(sched) */
    const char *verb;           /* required: how the numbers were obtained ("simulated",
                                 * "measured"); heads the text and its first column */
    int wait_for_memory;        /* the run held tasks for memory instead of failing */
    struct mpress_run_summary summary;
    const struct mpress_run_task_time *times;    /* one per task of sched */
    long n_mem;
    const struct mpress_run_mem_event *mem;      /* in the order they were applied */
    int n_link_names;
    const char (*link_names)[48];                /* every link a rate event may name */
    long n_rates;
    const struct mpress_run_rate_event *rates;   /* may be 0 (a runtime that has none) */
};

/* Replays the memory log against the schedule's lists: fills each GPU's peak, its time, the
 * breakdown and largest residents at it, out-of-memory flags and times against capacities
 * (summary.gpus[].capacity, summary.host_capacity), and host_peak. The rest of the summary is
 * the caller's. 0, or MPRESS_ESYSTEM on allocation failure. */
MPRESS_API
int mpress_run_replay_memory(struct mpress_run_report *r);

/* Memory of device gpu (-1 = host) right after everything that happened at time t. */
MPRESS_API
uint64_t mpress_run_memory_at(const struct mpress_run_report *r, int gpu, double t);

/* Outputs. The report is a mpress-sim-report v1 object (its "simulated" keys hold what the
 * run reports, whatever its verb); the trace is Chrome trace event format (opens in Perfetto and
 * chrome://tracing); the SVG shows per-GPU memory over the reported iteration and a stacked bar
 * per GPU at its peak against capacity; the text is what `mpress run` prints. Strings are
 * malloc'd; NULL on allocation failure. */
#define MPRESS_RUN_REPORT_FORMAT "mpress-sim-report"
#define MPRESS_RUN_REPORT_VERSION 1
MPRESS_API
json_t *mpress_run_report_json(const struct mpress_run_report *r);
MPRESS_API
char *mpress_run_trace(const struct mpress_run_report *r);
MPRESS_API
char *mpress_run_svg(const struct mpress_run_report *r);
MPRESS_API
char *mpress_run_render(const struct mpress_run_report *r);
/* "out of memory on gpu G at T s: peak P of capacity C; largest residents: ..." (or the same
 * for pinned host memory), or NULL when everything fits. */
MPRESS_API
char *mpress_run_oom_text(const struct mpress_run_report *r);

#ifdef __cplusplus
}
#endif
#endif
