/* Internal state of a schedule while it is lowered (lower.c) and once it is final (sched.c).
 * Not installed. */
#ifndef MPRESS_SCHED_INTERNAL_H
#define MPRESS_SCHED_INTERNAL_H

#include <stdint.h>
#include "mpress/sched.h"

/* While lowering, a task's successors and memory deltas are linked lists in append order
 * (the lowering adds to a task's lists long after the task was made); sched_finalize packs
 * them into arrays in that same order. */
struct sched_btask {
    struct mpress_task pub;
    int edge_head, edge_tail;   /* successors: index into edges, -1 */
    int mem_start, mem_end;     /* deltas applied at start and at end: index into deltas, -1 */
    int n_preds;
};

struct sched_bedge {
    int to, next;
};

struct sched_bdelta {
    struct mpress_mem_delta d;
    int next;
};

struct mpress_sched {
    const struct mpress_plan *plan;
    struct mpress_sched_options opt;
    int n_gpus, n_stages, M, N;     /* micro-batches per iteration, iterations */
    int stage_gpu[MPRESS_MAX_GPUS];
    int failed;                     /* allocation failure or a count past the limits */

    /* building */
    struct sched_btask *bt;
    int n_tasks, cap_tasks;
    int expected_tasks;             /* counted before lowering; checked after */
    struct sched_bedge *bedges;
    int n_edges, cap_edges;
    struct sched_bdelta *bdeltas;
    int n_deltas, cap_deltas;
    int init_mem;                   /* delta list applied before the first task */
    int **seq;                      /* per stage: compute tasks in stream order */
    int *seq_len, *seq_cap;

    /* final */
    struct mpress_task *tasks;
    int *succ_off, *succ;           /* [succ_off[i], succ_off[i + 1]) */
    int *pred_off, *pred;
    int *ms_off, *me_off;           /* start / end deltas of task i: deltas[off[i]..off[i+1]) */
    struct mpress_mem_delta *deltas;
    int n_init;                     /* the first n_init deltas are the initial ones */
    struct mpress_sched_queue *queues;
    int n_queues, epg;              /* queues per GPU: 3 + 3 n_gpus */
    int *q_off, *q_tasks;           /* tasks of queue q in issue order */
    int count_kind[MPRESS_TASK_KINDS];
};

/* lower.c: a plan's pipeline (ctx unused), and its building blocks for other lowerings */
int sched_lower(struct mpress_sched *s, void *ctx, struct mpress_error *err);
int sched_new_task(struct mpress_sched *s, enum mpress_task_kind kind, int stage, int it, int mb,
                   int op);
void sched_add_edge(struct mpress_sched *s, int from, int to);
void sched_add_mem(struct mpress_sched *s, int *list, int dev, enum mpress_mem_kind kind,
                   int owner, int it, int mb, int64_t delta);
void sched_seq_push(struct mpress_sched *s, int stage, int task);
/* Op o's transient memory during its forward: its workspace less the inputs it saves (a saved
 * tensor another op regenerates), which are charged as saved tensors from its start. */
int64_t sched_forward_transient(const struct mpress_op *op, int o);
/* The optimizer step's traffic of stage k of plan (mpress_sched_step_traffic). */
void sched_step_traffic(const struct mpress_plan *plan, int k,
                        struct mpress_optimizer_traffic *out);
/* sched.c */
int sched_grow(void **p, int *cap, int need, size_t size);
/* mpress_sched_create with another lowering: lower fills s (tasks counted into
 * s->expected_tasks, s->bt, s->seq*) and the result is packed as a plan's is. */
int sched_create_with(const struct mpress_plan *plan, const struct mpress_sched_options *opt,
                      int (*lower)(struct mpress_sched *s, void *ctx, struct mpress_error *err),
                      void *ctx, struct mpress_sched **out, struct mpress_error *err);

#endif
