/* The schedule's public face: creating one (lowering in lower.c), packing the lists built while
 * lowering into arrays, the queues and their issue orders, and the accessors of sched.h. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"

/* Grows *p to hold need elements (doubling, capped at INT_MAX). -1 on allocation failure or
 * when need cannot be counted in an int. */
int sched_grow(void **p, int *cap, int need, size_t size)
{
    if (need <= *cap)
        return 0;
    if (need < 0)
        return -1;
    int64_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    if (n > INT_MAX)
        n = INT_MAX;
    if ((uint64_t)n > SIZE_MAX / size)
        return -1;
    void *q = realloc(*p, (size_t)n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = (int)n;
    return 0;
}

const char *mpress_task_kind_name(enum mpress_task_kind k)
{
    static const char *const names[MPRESS_TASK_KINDS] = {
        "forward",  "backward", "recompute", "optimizer", "evict",       "prefetch",
        "send_act", "send_grad", "grad_d2h", "weights_h2d", "tied_grad"};
    return (unsigned)k < MPRESS_TASK_KINDS ? names[k] : "?";
}

const char *mpress_mem_kind_name(enum mpress_mem_kind k)
{
    static const char *const names[MPRESS_MEM_KINDS] = {
        "weights", "gradients", "optimizer", "activations", "parked",
        "in_flight", "working", "buffers", "reserve"};
    return (unsigned)k < MPRESS_MEM_KINDS ? names[k] : "?";
}

const char *mpress_queue_kind_name(enum mpress_queue_kind k)
{
    static const char *const names[] = {"compute", "d2h", "h2d", "peer", "cpu", "peer_in",
                                        "park"};
    return (unsigned)k <= MPRESS_QUEUE_PARK ? names[k] : "?";
}

void mpress_sched_options_init(struct mpress_sched_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->iterations = 1;
    opt->tied_exchange = 1;
}

/* ---- packing ---------------------------------------------------------------------------- */

static int pack_edges(struct mpress_sched *s)
{
    int n = s->n_tasks, E = s->n_edges;
    s->succ_off = malloc(((size_t)n + 1) * sizeof(int));
    s->pred_off = calloc((size_t)n + 1, sizeof(int));
    s->succ = malloc(((size_t)E + 1) * sizeof(int));
    s->pred = malloc(((size_t)E + 1) * sizeof(int));
    int *fill = calloc((size_t)n + 1, sizeof(int));
    if (!s->succ_off || !s->pred_off || !s->succ || !s->pred || !fill) {
        free(fill);
        return -1;
    }
    int at = 0;
    for (int i = 0; i < n; i++) {
        s->succ_off[i] = at;
        for (int e = s->bt[i].edge_head; e >= 0; e = s->bedges[e].next)
            s->succ[at++] = s->bedges[e].to;
        s->pred_off[i + 1] = s->pred_off[i] + s->bt[i].n_preds;
    }
    s->succ_off[n] = at;
    /* predecessors in the order of (predecessor index, its edge order) */
    for (int i = 0; i < n; i++)
        for (int j = s->succ_off[i]; j < s->succ_off[i + 1]; j++) {
            int t = s->succ[j];
            s->pred[s->pred_off[t] + fill[t]++] = i;
        }
    free(fill);
    return 0;
}

static int pack_list(const struct mpress_sched *s, int head, struct mpress_mem_delta *out)
{
    int n = 0;
    for (int i = head; i >= 0; i = s->bdeltas[i].next)
        out[n++] = s->bdeltas[i].d;
    return n;
}

/* deltas = [initial][task 0 start][task 0 end][task 1 start]...; ms_off[i] and me_off[i] are
 * where task i's lists begin, ms_off[n] the end. */
static int pack_deltas(struct mpress_sched *s)
{
    int n = s->n_tasks;
    s->deltas = malloc(((size_t)s->n_deltas + 1) * sizeof(*s->deltas));
    s->ms_off = malloc(((size_t)n + 1) * sizeof(int));
    s->me_off = malloc(((size_t)n + 1) * sizeof(int));
    if (!s->deltas || !s->ms_off || !s->me_off)
        return -1;
    int at = pack_list(s, s->init_mem, s->deltas);
    s->n_init = at;
    for (int i = 0; i < n; i++) {
        s->ms_off[i] = at;
        at += pack_list(s, s->bt[i].mem_start, s->deltas + at);
        s->me_off[i] = at;
        at += pack_list(s, s->bt[i].mem_end, s->deltas + at);
    }
    s->ms_off[n] = s->me_off[n] = at;
    return 0;
}

/* One topological order of the graph with each compute queue's order as extra edges (Kahn's
 * algorithm, ready tasks taken first come first, starting in task order). Returns the number
 * of tasks ordered: fewer than n_tasks when the plan deadlocks. */
static int topo_order(const struct mpress_sched *s, const int *stream_next, int *order)
{
    int n = s->n_tasks, head = 0, tail = 0;
    int *left = malloc(((size_t)n + 1) * sizeof(int));
    if (!left)
        return -1;
    for (int i = 0; i < n; i++)
        left[i] = s->pred_off[i + 1] - s->pred_off[i];
    for (int i = 0; i < n; i++)
        if (stream_next[i] >= 0)
            left[stream_next[i]]++;
    for (int i = 0; i < n; i++)
        if (!left[i])
            order[tail++] = i;
    while (head < tail) {
        int t = order[head++];
        for (int j = s->succ_off[t]; j < s->succ_off[t + 1]; j++)
            if (--left[s->succ[j]] == 0)
                order[tail++] = s->succ[j];
        if (stream_next[t] >= 0 && --left[stream_next[t]] == 0)
            order[tail++] = stream_next[t];
    }
    free(left);
    return tail;
}

static int deadlock_error(const struct mpress_sched *s, const int *order, int n_ordered,
                          struct mpress_error *err)
{
    char *seen = calloc((size_t)s->n_tasks + 1, 1);
    if (!seen)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    for (int i = 0; i < n_ordered; i++)
        seen[order[i]] = 1;
    int t = 0;
    while (t < s->n_tasks && seen[t])
        t++;
    free(seen);
    const struct mpress_task *P = &s->tasks[t];
    return mpress_error_set(err, MPRESS_EINPUT, "the plan deadlocks: %s of stage %d, "
                            "iteration %d, micro-batch %d, op %d never ran",
                            mpress_task_kind_name(P->kind), P->stage, P->iteration,
                            P->micro_batch, P->op);
}

/* Queues and their issue orders: compute queues in stream order, the others in the
 * topological order's order. */
static int pack_queues(struct mpress_sched *s, struct mpress_error *err)
{
    const struct mpress_topology *tp = &s->plan->topology;
    int G = s->n_gpus, NK = tp->n_sockets > 0 ? tp->n_sockets : 1, n = s->n_tasks;
    s->n_queues = G * s->epg + NK;
    s->queues = calloc((size_t)s->n_queues, sizeof(*s->queues));
    s->q_off = calloc((size_t)s->n_queues + 1, sizeof(int));
    s->q_tasks = malloc(((size_t)n + 1) * sizeof(int));
    int *stream_next = malloc(((size_t)n + 1) * sizeof(int));
    int *order = malloc(((size_t)n + 1) * sizeof(int));
    int *fill = calloc((size_t)s->n_queues + 1, sizeof(int));
    int rc = 0;
    if (!s->queues || !s->q_off || !s->q_tasks || !stream_next || !order || !fill) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < s->epg; j++) {
            struct mpress_sched_queue *Q = &s->queues[g * s->epg + j];
            Q->kind = j == 0 ? MPRESS_QUEUE_COMPUTE : j == 1 ? MPRESS_QUEUE_D2H
                      : j == 2 ? MPRESS_QUEUE_H2D : j < 3 + G ? MPRESS_QUEUE_PEER
                      : j < 3 + 2 * G ? MPRESS_QUEUE_PEER_IN : MPRESS_QUEUE_PARK;
            Q->gpu = g;
            Q->peer = j >= 3 ? (j - 3) % G : -1;
        }
    for (int k = 0; k < NK; k++)
        s->queues[G * s->epg + k] = (struct mpress_sched_queue){MPRESS_QUEUE_CPU, k, -1};
    for (int i = 0; i < n; i++)
        stream_next[i] = -1;
    for (int k = 0; k < s->n_stages; k++)
        for (int j = 0; j + 1 < s->seq_len[k]; j++)
            stream_next[s->seq[k][j]] = s->seq[k][j + 1];
    int n_ordered = topo_order(s, stream_next, order);
    if (n_ordered < 0) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    if (n_ordered < n) {
        rc = deadlock_error(s, order, n_ordered, err);
        goto done;
    }
    for (int i = 0; i < n; i++)
        s->q_off[s->tasks[i].queue + 1]++;
    for (int q = 0; q < s->n_queues; q++)
        s->q_off[q + 1] += s->q_off[q];
    for (int k = 0; k < s->n_stages; k++) {
        int q = s->stage_gpu[k] * s->epg;
        for (int j = 0; j < s->seq_len[k]; j++)
            s->q_tasks[s->q_off[q] + fill[q]++] = s->seq[k][j];
    }
    for (int i = 0; i < n; i++) {
        int t = order[i], q = s->tasks[t].queue;
        if (s->queues[q].kind != MPRESS_QUEUE_COMPUTE)
            s->q_tasks[s->q_off[q] + fill[q]++] = t;
    }
done:
    free(stream_next);
    free(order);
    free(fill);
    return rc;
}

static void free_building(struct mpress_sched *s)
{
    free(s->bt);
    free(s->bedges);
    free(s->bdeltas);
    if (s->seq)
        for (int k = 0; k < s->n_stages; k++)
            free(s->seq[k]);
    free(s->seq);
    free(s->seq_len);
    free(s->seq_cap);
    s->bt = NULL;
    s->bedges = NULL;
    s->bdeltas = NULL;
    s->seq = NULL;
    s->seq_len = s->seq_cap = NULL;
}

static int finalize(struct mpress_sched *s, struct mpress_error *err)
{
    int n = s->n_tasks;
    s->tasks = malloc(((size_t)n + 1) * sizeof(*s->tasks));
    if (!s->tasks || pack_edges(s) || pack_deltas(s))
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    for (int i = 0; i < n; i++) {
        s->tasks[i] = s->bt[i].pub;
        s->count_kind[s->tasks[i].kind]++;
    }
    return pack_queues(s, err);
}

/* ---- public ------------------------------------------------------------------------------ */

void mpress_sched_destroy(struct mpress_sched *s)
{
    if (!s)
        return;
    free_building(s);
    free(s->tasks);
    free(s->succ_off);
    free(s->succ);
    free(s->pred_off);
    free(s->pred);
    free(s->ms_off);
    free(s->me_off);
    free(s->deltas);
    free(s->queues);
    free(s->q_off);
    free(s->q_tasks);
    free(s);
}

int mpress_sched_create(const struct mpress_plan *plan, const struct mpress_sched_options *opt,
                        struct mpress_sched **out, struct mpress_error *err)
{
    return sched_create_with(plan, opt, sched_lower, NULL, out, err);
}

int sched_create_with(const struct mpress_plan *plan, const struct mpress_sched_options *opt,
                      int (*lower)(struct mpress_sched *s, void *ctx, struct mpress_error *err),
                      void *ctx, struct mpress_sched **out, struct mpress_error *err)
{
    *out = NULL;
    struct mpress_sched_options dflt;
    if (!opt) {
        mpress_sched_options_init(&dflt);
        opt = &dflt;
    }
    if (opt->iterations < 1)
        return mpress_error_set(err, MPRESS_EUSAGE, "iterations is %d, must be >= 1",
                                opt->iterations);
    struct mpress_sched *s = calloc(1, sizeof(*s));
    if (!s)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    s->plan = plan;
    s->opt = *opt;
    s->n_gpus = plan->topology.n_gpus;
    s->n_stages = plan->n_stages;
    s->M = plan->micro_batches;
    s->N = opt->iterations;
    s->epg = 3 + 3 * s->n_gpus;
    s->init_mem = -1;
    for (int k = 0; k < plan->n_stages && k < MPRESS_MAX_GPUS; k++)
        s->stage_gpu[k] = plan->stages[k].gpu;
    int rc = lower(s, ctx, err);
    if (!rc)
        rc = finalize(s, err);
    if (rc) {
        mpress_sched_destroy(s);
        return rc;
    }
    free_building(s);
    *out = s;
    return 0;
}

const struct mpress_plan *mpress_sched_plan(const struct mpress_sched *s)
{
    return s->plan;
}

void mpress_sched_step_traffic(const struct mpress_sched *s, int stage,
                               struct mpress_optimizer_traffic *out)
{
    memset(out, 0, sizeof(*out));
    if (s && stage >= 0 && stage < s->n_stages)
        sched_step_traffic(s->plan, stage, out);
}

int mpress_sched_iterations(const struct mpress_sched *s)
{
    return s->N;
}

int mpress_sched_task_count(const struct mpress_sched *s)
{
    return s->n_tasks;
}

const struct mpress_task *mpress_sched_task(const struct mpress_sched *s, int i)
{
    return i >= 0 && i < s->n_tasks ? &s->tasks[i] : NULL;
}

int mpress_sched_count_kind(const struct mpress_sched *s, enum mpress_task_kind k)
{
    return (unsigned)k < MPRESS_TASK_KINDS ? s->count_kind[k] : 0;
}

static const int *slice(const int *base, const int *off, int i, int n_items, int *n)
{
    if (i < 0 || i >= n_items) {
        *n = 0;
        return NULL;
    }
    *n = off[i + 1] - off[i];
    return base + off[i];
}

const int *mpress_sched_preds(const struct mpress_sched *s, int i, int *n)
{
    return slice(s->pred, s->pred_off, i, s->n_tasks, n);
}

const int *mpress_sched_succs(const struct mpress_sched *s, int i, int *n)
{
    return slice(s->succ, s->succ_off, i, s->n_tasks, n);
}

int mpress_sched_edge_count(const struct mpress_sched *s)
{
    return s->succ_off[s->n_tasks];
}

int mpress_sched_queue_count(const struct mpress_sched *s)
{
    return s->n_queues;
}

const struct mpress_sched_queue *mpress_sched_queue(const struct mpress_sched *s, int q)
{
    return q >= 0 && q < s->n_queues ? &s->queues[q] : NULL;
}

const int *mpress_sched_queue_tasks(const struct mpress_sched *s, int q, int *n)
{
    return slice(s->q_tasks, s->q_off, q, s->n_queues, n);
}

int mpress_sched_compute_queue(const struct mpress_sched *s, int gpu)
{
    return gpu >= 0 && gpu < s->n_gpus ? gpu * s->epg : -1;
}

const struct mpress_mem_delta *mpress_sched_mem_start(const struct mpress_sched *s, int i,
                                                      int *n)
{
    if (i < 0 || i >= s->n_tasks) {
        *n = 0;
        return NULL;
    }
    *n = s->me_off[i] - s->ms_off[i];
    return s->deltas + s->ms_off[i];
}

const struct mpress_mem_delta *mpress_sched_mem_end(const struct mpress_sched *s, int i, int *n)
{
    if (i < 0 || i >= s->n_tasks) {
        *n = 0;
        return NULL;
    }
    *n = s->ms_off[i + 1] - s->me_off[i];
    return s->deltas + s->me_off[i];
}

const struct mpress_mem_delta *mpress_sched_mem_initial(const struct mpress_sched *s, int *n)
{
    *n = s->n_init;
    return s->deltas;
}
