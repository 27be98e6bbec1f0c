/* The schedule: a plan lowered into the task graph that both the simulator and a runtime walk.
 *
 * mpress_sched_create turns a loaded plan into tasks (forward, backward and recompute ops,
 * optimizer steps, evictions and prefetches, boundary sends, host-optimizer copies and the
 * tied-embedding gradient exchange), each on one queue (a GPU's in-order compute stream, one of
 * its copy engines, or a CPU socket), with dependency edges and the memory each task allocates
 * when it starts and frees when it ends. It decides what runs where and in which order; it
 * decides no durations. How plans are lowered: docs/schedule.md.
 *
 * Walking the graph (what a runtime does):
 *   - Each queue runs its tasks one at a time. A compute queue runs them in exactly the order
 *     mpress_sched_queue_tasks gives (the plan's pipeline schedule); a task may start once it
 *     is the queue's head, the task before it on the queue has ended, and all its predecessors
 *     (mpress_sched_preds) have ended.
 *   - Copy and CPU queues are FIFO. Issuing each in the order mpress_sched_queue_tasks gives
 *     is valid (that order comes from one topological order of the whole graph with the
 *     compute-queue order included, so it never deadlocks); so is appending a task to its queue
 *     when its last predecessor ends, which is what the simulator does.
 *   - When a task starts, apply its start deltas (mpress_sched_mem_start); when it ends, its end
 *     deltas. The initial deltas (model states, reserves) apply before the first task. Within
 *     one list, deltas apply in the order given.
 * Task, queue and edge order are deterministic: the same plan gives the same graph.
 *
 * Sizes: lowering counts the tasks in 64 bits before it allocates anything and refuses a plan
 * whose graph would exceed MPRESS_SCHED_MAX_TASKS tasks (MPRESS_EINPUT, err->path
 * "micro_batches", the count in the text); edges and memory deltas are refused past INT_MAX. */
#ifndef MPRESS_SCHED_H
#define MPRESS_SCHED_H

#include <stddef.h>
#include <stdint.h>
#include "mpress/error.h"
#include "mpress/model.h"
#include "mpress/plan.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most tasks a graph may hold, so that task indices, and the edges and deltas that grow with
 * them, fit in an int. */
#define MPRESS_SCHED_MAX_TASKS (1 << 28)

enum mpress_task_kind {
    MPRESS_TASK_FORWARD = 0,    /* op forward of one micro-batch */
    MPRESS_TASK_BACKWARD,       /* op backward of one micro-batch */
    MPRESS_TASK_RECOMPUTE,      /* regenerate one dropped tensor (action) before its backward */
    MPRESS_TASK_OPTIMIZER,      /* GPU step, or CPU step when the stage's optimizer is on host */
    MPRESS_TASK_EVICT,          /* tensor (part) leaves its GPU: to host or a peer */
    MPRESS_TASK_PREFETCH,       /* tensor (part) comes back */
    MPRESS_TASK_SEND_ACT,       /* boundary activation, stage k -> k+1 */
    MPRESS_TASK_SEND_GRAD,      /* boundary gradient, stage k+1 -> k */
    MPRESS_TASK_GRAD_D2H,       /* host optimizer: gradients down */
    MPRESS_TASK_WEIGHTS_H2D,    /* host optimizer: new weights up */
    MPRESS_TASK_TIED_GRAD,      /* a tied weight's gradient to the other stage holding a copy */
    MPRESS_TASK_KINDS
};
MPRESS_API
const char *mpress_task_kind_name(enum mpress_task_kind k); /* "forward", ...; "?" if unknown */

/* What a byte on a device is held for. */
enum mpress_mem_kind {
    MPRESS_MEM_WEIGHTS = 0,     /* parameters (and stashed versions under async) */
    MPRESS_MEM_GRADIENTS,
    MPRESS_MEM_OPTIMIZER,
    MPRESS_MEM_ACTIVATIONS,     /* saved tensors kept since their forward */
    MPRESS_MEM_PARKED,          /* tensors other GPUs parked here by D2D swap */
    MPRESS_MEM_INFLIGHT,        /* swapped tensors while a copy of them is moving */
    MPRESS_MEM_WORKING,         /* op workspace, recompute outputs, prefetched tensors */
    MPRESS_MEM_BUFFERS,         /* boundary send/recv buffers */
    MPRESS_MEM_RESERVE,         /* CUDA context and allocator slack (topology reserve) */
    MPRESS_MEM_KINDS
};
MPRESS_API
const char *mpress_mem_kind_name(enum mpress_mem_kind k); /* "weights", ...; "?" if unknown */

enum mpress_queue_kind {
    MPRESS_QUEUE_COMPUTE = 0,   /* a GPU's in-order compute stream */
    MPRESS_QUEUE_D2H,           /* a GPU's copy engine toward host memory */
    MPRESS_QUEUE_H2D,           /* a GPU's copy engine from host memory */
    MPRESS_QUEUE_PEER,          /* a GPU's copy engine toward one other GPU */
    MPRESS_QUEUE_CPU,           /* the host's CPU step queue of one socket */
    MPRESS_QUEUE_PEER_IN,       /* a GPU's copy engine from one other GPU: the D2D shares it
                                 * parked there, prefetched back */
    MPRESS_QUEUE_PARK,          /* a GPU's copy engine toward one other GPU for its D2D
                                 * evictions alone */
};
MPRESS_API
const char *mpress_queue_kind_name(enum mpress_queue_kind k); /* "compute", "d2h", ... */

/* Queues are numbered per GPU g: g * (3 + n_gpus) + 0 compute, + 1 D2H, + 2 H2D, + 3 + b the
 * peer engine toward GPU b (b == g exists but is never used); then one CPU queue per socket. */
struct mpress_sched_queue {
    enum mpress_queue_kind kind;
    int gpu;                    /* owning GPU; the socket for CPU queues */
    int peer;                   /* PEER: destination GPU; else -1 */
};

struct mpress_task {
    enum mpress_task_kind kind;
    int stage, iteration;
    int micro_batch;            /* within the iteration; -1 for per-iteration tasks */
    int op;                     /* profile op index, -1 where none */
    int action;                 /* index into plan->actions, -1 where none */
    int part;                   /* D2D part (peer index in the action), else 0 */
    int tied_op;                /* TIED_GRAD: the op on dst that shares the weight, else -1 */
    int src, dst;               /* devices: GPU index, -1 = host; compute: src = dst = GPU */
    uint64_t bytes;             /* transfers: bytes moved; 0 for compute and CPU tasks, but
                                 * for the optimizer tasks of a data-parallel lowering
                                 * (mpress_sched_create_dp): the bytes each reads and writes */
    int queue;                  /* index into the queues */
    int ends_iteration;         /* 1: the task that ends its stage's iteration: the GPU step,
                                 * or the weights' copy back after a host step */
};

/* One change of one device's memory. */
struct mpress_mem_delta {
    int device;                 /* GPU index, -1 = host memory */
    enum mpress_mem_kind kind;
    int owner;                  /* GPU the bytes belong to (parked, host swap, host states) */
    int iteration, micro_batch; /* -1 where it is not per micro-batch */
    int64_t bytes;              /* > 0 allocates, < 0 frees */
};

struct mpress_sched_options {
    int iterations;             /* >= 1: training iterations laid out */
    /* 1 (default): where a weight is tied across stages (the word embedding that GPT's and
     * BERT's heads reuse), each of the two stages keeps a copy with its own gradients and
     * optimizer states (the profile charges the copy to the reusing op) and they exchange
     * gradients before their steps: one TIED_GRAD each way, each step waiting for both.
     * 0: leave the exchange out, as the planner's cost model does; the simulator passes 0 so
     * that its timeline matches what the planner predicted (docs/schedule.md). */
    int tied_exchange;
};
MPRESS_API
void mpress_sched_options_init(struct mpress_sched_options *opt); /* iterations 1, tied 1 */

struct mpress_sched;            /* a lowered plan */

/* Lowers plan. The result borrows plan: keep it alive until mpress_sched_destroy. Errors:
 * MPRESS_EINPUT for a plan that cannot be lowered (text says why, err->path names the plan
 * field where one is to blame), MPRESS_EUSAGE for bad options, MPRESS_ESYSTEM for allocation
 * failure. */
MPRESS_API
int mpress_sched_create(const struct mpress_plan *plan, const struct mpress_sched_options *opt,
                        struct mpress_sched **out, struct mpress_error *err);
MPRESS_API
void mpress_sched_destroy(struct mpress_sched *s);     /* accepts NULL */

MPRESS_API
const struct mpress_plan *mpress_sched_plan(const struct mpress_sched *s);
MPRESS_API
int mpress_sched_iterations(const struct mpress_sched *s);

MPRESS_API
int mpress_sched_task_count(const struct mpress_sched *s);
MPRESS_API
const struct mpress_task *mpress_sched_task(const struct mpress_sched *s, int i); /* or NULL */
/* Tasks per kind, for checks. */
MPRESS_API
int mpress_sched_count_kind(const struct mpress_sched *s, enum mpress_task_kind k);

/* Dependencies of task i: the tasks that must end before it starts (preds), and those that
 * wait for it (succs, in the order the lowering added them). *n receives the count; the array
 * is owned by s. A compute task's predecessor on its own queue is implicit in the queue's
 * order and need not be an edge (the step before an iteration's first task also is one). */
MPRESS_API
const int *mpress_sched_preds(const struct mpress_sched *s, int i, int *n);
MPRESS_API
const int *mpress_sched_succs(const struct mpress_sched *s, int i, int *n);
MPRESS_API
int mpress_sched_edge_count(const struct mpress_sched *s);

MPRESS_API
int mpress_sched_queue_count(const struct mpress_sched *s);
MPRESS_API
const struct mpress_sched_queue *mpress_sched_queue(const struct mpress_sched *s, int q);
/* The queue's tasks in a valid issue order (see the top of this header). */
MPRESS_API
const int *mpress_sched_queue_tasks(const struct mpress_sched *s, int q, int *n);
/* The compute queue of GPU g. */
MPRESS_API
int mpress_sched_compute_queue(const struct mpress_sched *s, int gpu);

/* Memory deltas applied when task i starts / ends, and before the first task (model states,
 * stashed weight versions, reserves). Arrays owned by s. */
MPRESS_API
const struct mpress_mem_delta *mpress_sched_mem_start(const struct mpress_sched *s, int i,
                                                      int *n);
MPRESS_API
const struct mpress_mem_delta *mpress_sched_mem_end(const struct mpress_sched *s, int i, int *n);
MPRESS_API
const struct mpress_mem_delta *mpress_sched_mem_initial(const struct mpress_sched *s, int *n);

/* The optimizer step of stage k (one per iteration): the bytes it reads and writes where it
 * runs and, for a host step, what crosses PCIe (the GRAD_D2H and WEIGHTS_H2D tasks' bytes),
 * from mpress_optimizer_step_traffic over the stage's model states, the planner's count. A
 * data-parallel schedule's optimizer tasks carry their bytes instead (struct mpress_task). */
MPRESS_API
void mpress_sched_step_traffic(const struct mpress_sched *s, int stage,
                               struct mpress_optimizer_traffic *out);

#ifdef __cplusplus
}
#endif
#endif
