/* Internal state of a simulation, shared by the engine (sim.c) and its outputs (sim_output.c).
 * Not installed. */
#ifndef MPRESS_SIM_INTERNAL_H
#define MPRESS_SIM_INTERNAL_H

#include <stdint.h>
#include "mpress/sim.h"

#define SIM_MAX_PATH 8

/* One change of one device's memory. dev is a GPU index, or n_gpus for host memory. */
struct sim_memop {
    int dev;
    int kind;                   /* enum mpress_sim_mem_kind */
    int owner;                  /* GPU the bytes belong to (parked / host swap), else dev */
    int iteration, micro_batch; /* -1 where it is not per micro-batch */
    int64_t delta;
    int next;                   /* next memop of the same group, -1 */
};

struct sim_task {
    struct mpress_sim_task pub;
    int stream;                 /* compute: stage index; -1 otherwise */
    int queue;                  /* copy engine or CPU queue index; -1 for compute */
    int path[SIM_MAX_PATH];     /* transfers: link resources crossed */
    int n_path;
    double dur;                 /* compute and CPU tasks */
    int deps_left;
    int edge_head, edge_tail;   /* successors: index into edges, -1 */
    int mem_start, mem_end;     /* memop groups applied at start and at end, -1 */
    double head_s;              /* compute: when it became the head of its stream */
    int last_dep;               /* the dependency that completed last, -1 */
    int q_next;                 /* next in its queue, -1 */
    double remaining, rate;     /* active transfers */
    int state;                  /* 0 waiting, 1 ready, 2 running, 3 done */
    int ends_iteration;         /* 1: the step that finishes its stage's iteration */
    int mem_wait;               /* held by --wait-for-memory since mem_wait_s */
    double mem_wait_s;
};

struct sim_edge {
    int to, next;
};

struct sim_resource {
    char name[48];
    double cap;                 /* bytes/s */
    double bytes;               /* carried since the start */
    double rate;                /* current total */
    double *snap;               /* bytes at the end of each iteration */
    /* scratch for the fair-share computation */
    double rem, new_rate;
    int cnt, mark;
};

/* A link's total rate changed at time t (for the trace's counter tracks). */
struct sim_rate {
    double t;
    int res;
    double rate;
};

struct sim_queue {
    int busy;                   /* running task or -1 */
    int head, tail;
};

/* Memory log: one entry per group applied, in order. task -1 is the initial model states. */
struct sim_log {
    double t;
    int task;
    int phase;                  /* 0 start, 1 end */
};

struct mpress_sim {
    const struct mpress_plan *plan;   /* borrowed: must outlive the result */
    int n_gpus, n_stages, M, N;
    int reported;               /* index of the reported iteration */
    int stage_gpu[MPRESS_MAX_GPUS];
    int gpu_stage[MPRESS_MAX_GPUS];

    struct sim_task *tasks;
    int n_tasks, cap_tasks;
    struct sim_edge *edges;
    int n_edges, cap_edges;
    struct sim_memop *memops;
    int n_memops, cap_memops;
    int init_mem;               /* group applied at time 0 */

    int **seq;                  /* per stage: compute tasks in stream order */
    int *seq_len, *seq_cap, *seq_pos;

    struct sim_resource *res;
    int n_res;
    int res_pcie, res_switch, res_socket, res_nv; /* first index of each family */

    struct sim_queue *queues;
    int n_queues;
    int engines_per_gpu;        /* D2H, H2D, then one peer engine per destination GPU */
    int cpu_queue0;

    int *active;                /* running transfers */
    int *scratch;
    int *busy_res, n_busy_res;   /* links with a non-zero rate */
    struct sim_rate *rates;
    int n_rates, cap_rates;
    int n_active;
    int rates_dirty;

    /* event heap */
    struct sim_ev { double t; long seq; int task; } *heap;
    int n_heap, cap_heap;
    long ev_seq;

    double now;
    double *iter_end;           /* per iteration, -1 until known */
    int *iter_steps;            /* steps done per iteration */

    /* memory */
    uint64_t cur[MPRESS_MAX_GPUS + 1][MPRESS_SIM_MEM_KINDS];
    uint64_t total[MPRESS_MAX_GPUS + 1];
    uint64_t capacity[MPRESS_MAX_GPUS + 1];
    long peak_log[MPRESS_MAX_GPUS + 1]; /* log index at which the peak was first reached */
    struct sim_log *log;
    long n_log, cap_log;

    /* per GPU per iteration stall and busy accumulators: [gpu * N + iteration] */
    double *busy, *stall_swap, *stall_boundary, *stall_opt, *stall_mem;
    int wait_for_memory;
    int pending_evict[MPRESS_MAX_GPUS + 1]; /* evictions from each GPU ready or running */
    int mem_blocked[MPRESS_MAX_GPUS];       /* stage held by --wait-for-memory */
    int *queue_blocked;                     /* copy engine held by --wait-for-memory */

    double model_flops_per_iter, recompute_flops_per_iter;
    struct mpress_sim_summary summary;
    int failed;                 /* allocation failure seen */
};

/* In sim_output.c, called by sim.c. */
void sim_residents_at_peak(struct mpress_sim *sim, int dev, struct mpress_sim_gpu *g);

#endif
