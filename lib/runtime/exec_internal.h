/* What the executor's three files share (executor.c: tasks; exec_queues.c: the queues'
 * threads and one step; exec_setup.c: buffers, setup, create and destroy). Internal to
 * lib/runtime. */
#ifndef MPRESS_RUNTIME_EXEC_INTERNAL_H
#define MPRESS_RUNTIME_EXEC_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "mpress/model.h"
#include "mpress/runtime.h"
#include "host_ops.h"
#include "runtime_internal.h"

#define IO 4
#define SV 8
#define MAX_DEPTH 64
#define MPRESS_EXEC_MAX_CPUS 1024
/* out and grad are per stage: a tensor passed through a stage, or held there for a recompute,
 * has its own buffer on each stage that holds it. */
#define SLOT(x, k, m) (((size_t)(k) * (size_t)(x)->M + (size_t)(m)) * (size_t)(x)->n_ops)
#define PIN(x, k, q, r) ((((size_t)(k) * (size_t)(x)->n_ops) + (size_t)(q)) * IO + (size_t)(r))


struct xbuf {
    void *p;
    uint64_t bytes;
    int dev, kind;
};

enum { SV_NONE = 0, SV_FWD, SV_PARKED, SV_BACK };

struct saved_state {
    struct xbuf dev;
    struct xbuf part[MPRESS_MAX_GPUS];
    int state, evicted, prefetched;
    int prefetching;            /* a part's prefetch has begun */
};

/* The tensors that cross the cut after stage k: (producer, output) with their offsets in the
 * boundary buffer. */
struct cut {
    int n;
    int *prod, *idx;
    uint64_t *off;
    uint64_t total;
};

struct tied_recv {
    int param;                  /* global param index on the receiving stage */
    struct xbuf buf;
};

struct mpress_exec {
    const struct mpress_plan *plan;
    struct mpress_backend *be;
    struct mpress_exec_options opt;
    struct mpress_rt_optim optim;
    struct mpress_model model;
    struct mpress_sched *sched;
    int S, M, n_ops;
    int *stage_of;              /* [op] */
    int *last_use;              /* [op * IO + r]: last op reading that output, -1 none */
    char *pinned;               /* [(k * n_ops + op) * IO + r]: a stage input stage k keeps
                                 * for a recompute */
    struct cut *cuts;           /* [S - 1] */
    /* parameters: host copies (init, checkpoints) and device ones, by global param index */
    struct mpress_host_params hp;
    struct mpress_rt_param *dp;     /* on the stage's GPU */
    struct mpress_rt_param *hostp;  /* host optimizer: g landing zone, w staging, states */
    int *dp_alias;              /* tied weight on its owner's stage: owner index, else -1 */
    int steps;
    /* per micro-batch state, [m * n_ops + op] */
    struct xbuf (*out)[IO];
    struct xbuf (*grad)[IO];
    struct saved_state (*saved)[SV];
    struct xbuf *send_act, *recv_act, *send_grad, *recv_grad;   /* [m * (S - 1) + k] */
    char *grad_unpacked;        /* [m * S + k] */
    struct mpress_host_batch *batch;    /* [M] */
    float *loss;                /* [M] */
    struct tied_recv tied[8];
    int n_tied;
    uint64_t pinned_bytes[MPRESS_MAX_GPUS];
    /* running */
    pthread_mutex_t lock;
    struct worker *workers;     /* the step's queue threads (exec_queues.c), n_workers started */
    int n_workers;
    long wakeups;               /* the step's returns from a worker's wait (for a test) */
    char *done;
    int failed;
    struct mpress_error err;
    double t0;
    double *times;              /* [2 * task] */
    double *ready;              /* [task]: every predecessor ended, from t0 */
    double *queue_ready;        /* [queue]: the running task's ready time (CLOCK_MONOTONIC) */
    int *queue_head;            /* [queue]: position of the task it runs or waits for next */
    char *started;              /* [task] */
    char *queue_moving;         /* [queue]: its task started and has bytes still to move */
    double *queue_link_done;    /* [queue]: when its running copy's link time ends
                                 * (CLOCK_MONOTONIC, --throttle), 0 when none waits it out */
    /* wait_for_memory: tasks ended in this step (what a waiting allocation waits to change),
     * the condition it waits on (x->lock), and its waits per GPU */
    long task_ends;
    pthread_cond_t mem_cv;
    long mem_waits[MPRESS_MAX_GPUS];
    double mem_wait_s[MPRESS_MAX_GPUS], mem_wait_last_s[MPRESS_MAX_GPUS];
    /* pin_threads: the CPUs of the process's affinity mask when the step starts, n_cpus of
     * them (0: nothing pinned) */
    int cpus[MPRESS_EXEC_MAX_CPUS];
    int n_cpus;
    int *task_cpu;              /* [task]: the CPU it started on in the last step */
};

/* The task the calling worker thread runs, -1 outside one (setup, checkpoints). */
extern _Thread_local int exec_current_task;


/* Where a buffer belongs, for messages. */
#define WHERE_FMT "stage %d (gpu %d), op %s, %s, micro-batch %d"

/* executor.c: runs task i of the schedule (the worker of its queue calls it) */
int exec_run_task(struct mpress_exec *x, int i, struct mpress_error *err);

/* exec_setup.c */
double exec_now_s(void);
/* A copy of task t through the backend, with the task's ready time where the backend takes
 * it (copy_ready). */
int exec_copy(struct mpress_exec *x, const struct mpress_task *t, int dst_dev, void *dst,
              int src_dev, const void *src, uint64_t bytes, struct mpress_error *err);
int exec_gpu_of_stage(const struct mpress_exec *x, int k);
int exec_xalloc(struct mpress_exec *x, struct xbuf *b, int dev, int kind, uint64_t bytes,
                int zero, struct mpress_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 8, 9)))
#endif
    ;
/* The same, called with x->lock held (a wait for memory releases it meanwhile). */
int exec_xalloc_locked(struct mpress_exec *x, struct xbuf *b, int dev, int kind, uint64_t bytes,
                       int zero, struct mpress_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 8, 9)))
#endif
    ;
void exec_xfree(struct mpress_exec *x, struct xbuf *b);
int exec_action_of(const struct mpress_exec *x, int op, int j);
int exec_prefetch_point(const struct mpress_exec *x, int op, int j);
int exec_plain_copy(const struct mpress_model *m, int c, int j);
int exec_copy_present(const struct mpress_exec *x, int k, int q, int p, int before_op,
                      int before_j);
void exec_free_step_state(struct mpress_exec *x);
/* Whether compute queue cq must wait for a copy of its own GPU's engines (a head that is
 * ready and has not moved its bytes); 0 for any other queue. Called with x->lock held. */
int exec_copy_pending(const struct mpress_exec *x, int cq);
/* After a change of the done, started, head or moving state (x->lock held): wakes each worker
 * whose awaited task may now start. */
void exec_wake(struct mpress_exec *x);
/* After an allocation on GPU dev failed for memory (locked: x->lock is held): with
 * wait_for_memory, and evictions from dev running or ready, waits for the next task to end
 * and returns 1 (try again). Else returns 0, having added to err's text how many bytes were
 * still leaving dev, if any. */
int exec_wait_for_evictions(struct mpress_exec *x, int dev, int locked, struct mpress_error *err);

#endif
