/* Internal state of a simulation, shared by its parts: the network model (net.c: links and
 * max-min fair flows), the event engine (engine.c) and the API and summary (sim.c). The task
 * graph itself is the schedule's (mpress/sched.h); this holds what the simulator adds to it:
 * durations, link paths, and the state of the run. Not installed. */
#ifndef MPRESS_SIM_INTERNAL_H
#define MPRESS_SIM_INTERNAL_H

#include <stdint.h>
#include "mpress/run_report.h"
#include "mpress/sched.h"
#include "mpress/sim.h"

#define SIM_MAX_PATH 8

struct sim_task {
    struct mpress_sim_task pub;
    int stream;                 /* compute: stage index; -1 otherwise */
    int queue;                  /* copy engine or CPU queue (schedule's numbering); -1 compute */
    int path[SIM_MAX_PATH];     /* transfers: link resources crossed */
    int n_path;
    double dur;                 /* compute and CPU tasks */
    int deps_left;
    double head_s;              /* compute: when it became the head of its stream */
    int last_dep;               /* the dependency that completed last, -1 */
    int q_next;                 /* next in its queue, -1 */
    double remaining, rate;     /* active transfers */
    int state;                  /* 0 waiting, 1 ready, 2 running, 3 done */
    int mem_wait;               /* held by --wait-for-memory since mem_wait_s */
    double mem_wait_s;
};

struct sim_resource {
    double cap;                 /* bytes/s */
    double bytes;               /* carried since the start */
    double rate;                /* current total */
    double *snap;               /* bytes at the end of each iteration */
    /* scratch for the fair-share computation */
    double rem, new_rate;
    int cnt, mark;
};

struct sim_queue {
    int busy;                   /* running task or -1 */
    int head, tail;
};

struct sim_ev {
    double t;
    long seq;
    int task;
};

struct mpress_sim {
    const struct mpress_plan *plan;   /* borrowed: must outlive the result */
    struct mpress_sched *sched;       /* owned */
    int n_gpus, n_stages, M, N;
    int reported;               /* index of the reported iteration */
    int stage_gpu[MPRESS_MAX_GPUS];

    struct sim_task *tasks;
    int n_tasks;

    const int **seq;            /* per stage: compute tasks in stream order (the schedule's) */
    int *seq_len, *seq_pos;

    /* network (net.c) */
    struct sim_resource *res;
    char (*res_name)[48];
    int n_res;
    int res_pcie, res_switch, res_socket, res_nv; /* first index of each family */
    int *active;                /* running transfers */
    int n_active;
    int *scratch;
    int *busy_res, n_busy_res;  /* links with a non-zero rate */
    struct mpress_run_rate_event *rates;
    long n_rates, cap_rates;
    int rates_dirty;

    struct sim_queue *queues;   /* the schedule's queues; compute ones unused */
    int n_queues;

    /* event heap */
    struct sim_ev *heap;
    long n_heap, cap_heap;
    long ev_seq;

    double now;
    double *iter_end;           /* per iteration, -1 until known */
    int *iter_steps;            /* steps done per iteration */

    /* memory: device n_gpus is host memory */
    uint64_t cur[MPRESS_MAX_GPUS + 1][MPRESS_MEM_KINDS];
    uint64_t total[MPRESS_MAX_GPUS + 1];
    uint64_t capacity[MPRESS_MAX_GPUS + 1];
    struct mpress_run_mem_event *log;
    long n_log, cap_log;

    /* per GPU per iteration stall and busy accumulators: [gpu * N + iteration] */
    double *busy, *stall_swap, *stall_boundary, *stall_opt, *stall_mem;
    int wait_for_memory;
    int pending_evict[MPRESS_MAX_GPUS + 1]; /* evictions from each GPU ready or running */
    int mem_blocked[MPRESS_MAX_GPUS];       /* stage held by --wait-for-memory */
    int *queue_blocked;                     /* copy engine held by --wait-for-memory */

    double recompute_flops_per_iter;
    struct mpress_run_task_time *times;     /* for the report */
    struct mpress_run_report report;        /* summary and event log, what the outputs read */
    int failed;                 /* allocation failure seen */
};

/* Grows a dynamic array (doubling). -1 on allocation failure. */
int sim_grow(void **p, long *cap, long need, size_t size);

/* net.c */
int sim_net_setup(struct mpress_sim *sim, struct mpress_error *err);
int sim_net_path(struct mpress_sim *sim, int src, int dst, int *path, struct mpress_error *err);
void sim_net_compute_rates(struct mpress_sim *sim);
void sim_net_advance(struct mpress_sim *sim, double t);
void sim_net_free(struct mpress_sim *sim);

/* engine.c */
void sim_apply_initial(struct mpress_sim *sim);
int sim_run_events(struct mpress_sim *sim);

#endif
