/* The simulator's event engine: tasks of the schedule become ready when their last
 * predecessor ends; a compute stream starts its head task once ready, a copy engine or CPU
 * queue its oldest ready task; a copy runs as a flow in the network model (net.c), anything
 * else for its duration (an event on a heap ordered by time, then by push order). Memory lists
 * are applied at starts and ends and logged, so that everything reported can be replayed. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

static void heap_push(struct mpress_sim *sim, double t, int task)
{
    if (sim_grow((void **)&sim->heap, &sim->cap_heap, sim->n_heap + 1, sizeof(*sim->heap))) {
        sim->failed = 1;
        return;
    }
    long i = sim->n_heap++;
    struct sim_ev ev = {t, sim->ev_seq++, task};
    while (i > 0) {
        long p = (i - 1) / 2;
        struct sim_ev *P = &sim->heap[p];
        if (P->t < ev.t || (P->t == ev.t && P->seq < ev.seq))
            break;
        sim->heap[i] = *P;
        i = p;
    }
    sim->heap[i] = ev;
}

static struct sim_ev heap_pop(struct mpress_sim *sim)
{
    struct sim_ev top = sim->heap[0], last = sim->heap[--sim->n_heap];
    long i = 0, n = sim->n_heap;
    for (;;) {
        long c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && (sim->heap[c + 1].t < sim->heap[c].t ||
                          (sim->heap[c + 1].t == sim->heap[c].t &&
                           sim->heap[c + 1].seq < sim->heap[c].seq)))
            c++;
        if (last.t < sim->heap[c].t || (last.t == sim->heap[c].t && last.seq < sim->heap[c].seq))
            break;
        sim->heap[i] = sim->heap[c];
        i = c;
    }
    if (n > 0)
        sim->heap[i] = last;
    return top;
}

static void log_group(struct mpress_sim *sim, int task, int phase)
{
    if (sim_grow((void **)&sim->log, &sim->cap_log, sim->n_log + 1, sizeof(*sim->log))) {
        sim->failed = 1;
        return;
    }
    sim->log[sim->n_log++] = (struct mpress_run_mem_event){sim->now, task, phase};
}

/* The schedule's memory list of task (-1: the initial one) at its start (phase 0) or end. */
static const struct mpress_mem_delta *mem_list(const struct mpress_sim *sim, int task, int phase,
                                               int *n)
{
    if (task < 0)
        return mpress_sched_mem_initial(sim->sched, n);
    return phase ? mpress_sched_mem_end(sim->sched, task, n)
                 : mpress_sched_mem_start(sim->sched, task, n);
}

/* Applies and logs one list. Peaks and out-of-memory moments are found afterwards by replaying
 * the log (mpress_run_replay_memory); the engine only keeps the totals that
 * --wait-for-memory looks at. */
static void apply_group(struct mpress_sim *sim, int task, int phase)
{
    int n;
    const struct mpress_mem_delta *d = mem_list(sim, task, phase, &n);
    if (n == 0)
        return;
    log_group(sim, task, phase);
    for (int i = 0; i < n; i++) {
        int dev = d[i].device < 0 ? sim->n_gpus : d[i].device;
        sim->cur[dev][d[i].kind] += (uint64_t)d[i].bytes;
        sim->total[dev] += (uint64_t)d[i].bytes;
    }
}

void sim_apply_initial(struct mpress_sim *sim)
{
    apply_group(sim, -1, 0);
}

static void make_ready(struct mpress_sim *sim, int t);

static void try_start_stream(struct mpress_sim *sim, int k);
static void try_start_queue(struct mpress_sim *sim, int q);
static int must_wait_for_memory(struct mpress_sim *sim, int t, int dev);

static void start_task(struct mpress_sim *sim, int t)
{
    struct sim_task *T = &sim->tasks[t];
    T->state = 2;
    T->pub.start_s = sim->now;
    apply_group(sim, t, 0);
    if (T->n_path > 0 && T->pub.bytes > 0) {
        T->remaining = T->pub.bytes;
        T->rate = 0;
        sim->active[sim->n_active++] = t;
        sim->rates_dirty = 1;
    } else {
        heap_push(sim, sim->now + T->dur, t);
    }
}

static void try_start_stream(struct mpress_sim *sim, int k)
{
    int pos = sim->seq_pos[k];
    if (pos >= sim->seq_len[k])
        return;
    int t = sim->seq[k][pos];
    struct sim_task *T = &sim->tasks[t];
    if (T->state != 1)
        return;
    if (pos > 0 && sim->tasks[sim->seq[k][pos - 1]].state != 3)
        return;
    int g = sim->stage_gpu[k], it = T->pub.iteration;
    /* --wait-for-memory: hold a task whose allocations would not fit while evictions from
     * this GPU are still to free memory (a runtime that waits instead of failing). */
    if (sim->wait_for_memory) {
        if (must_wait_for_memory(sim, t, g)) {
            if (!T->mem_wait) {
                T->mem_wait = 1;
                T->mem_wait_s = sim->now;
            }
            sim->mem_blocked[k] = 1;
            return;
        }
        if (T->mem_wait) {
            sim->stall_mem[g * sim->N + it] += sim->now - T->mem_wait_s;
            sim->busy[g * sim->N + it] += T->dur;
            start_task(sim, t);
            return;
        }
    }
    /* Stall attribution: the wait after the stream reached this task, caused by the
     * dependency that completed last, counted from when that copy became ready. */
    double wait = sim->now - T->head_s;
    if (wait > 0 && T->last_dep >= 0) {
        const struct sim_task *D = &sim->tasks[T->last_dep];
        double from = D->pub.ready_s > T->head_s ? D->pub.ready_s : T->head_s;
        double st = sim->now - from;
        if (st > 0) {
            switch (D->pub.kind) {
            case MPRESS_TASK_EVICT:
            case MPRESS_TASK_PREFETCH:
                sim->stall_swap[g * sim->N + it] += st;
                break;
            case MPRESS_TASK_SEND_ACT:
            case MPRESS_TASK_SEND_GRAD:
                sim->stall_boundary[g * sim->N + it] += st;
                break;
            case MPRESS_TASK_WEIGHTS_H2D:
            case MPRESS_TASK_GRAD_D2H:
                sim->stall_opt[g * sim->N + it] += st;
                break;
            default:
                break;
            }
        }
    }
    sim->busy[g * sim->N + it] += T->dur;
    start_task(sim, t);
}

/* --wait-for-memory: does task t's start allocate more on GPU dev than fits while evictions
 * from dev are pending? Then it waits. */
static int must_wait_for_memory(struct mpress_sim *sim, int t, int dev)
{
    if (!sim->wait_for_memory || dev < 0 || dev >= sim->n_gpus || sim->pending_evict[dev] <= 0)
        return 0;
    int64_t need = 0;
    int n;
    const struct mpress_mem_delta *d = mpress_sched_mem_start(sim->sched, t, &n);
    for (int i = 0; i < n; i++)
        if (d[i].device == dev)
            need += d[i].bytes;
    return need > 0 && sim->total[dev] + (uint64_t)need > sim->capacity[dev];
}

static void try_start_queue(struct mpress_sim *sim, int q)
{
    struct sim_queue *Q = &sim->queues[q];
    if (Q->busy >= 0 || Q->head < 0)
        return;
    int t = Q->head;
    if (must_wait_for_memory(sim, t, sim->tasks[t].pub.dst)) {
        sim->queue_blocked[q] = 1;
        return;
    }
    Q->head = sim->tasks[t].q_next;
    if (Q->head < 0)
        Q->tail = -1;
    Q->busy = t;
    start_task(sim, t);
}

static void make_ready(struct mpress_sim *sim, int t)
{
    struct sim_task *T = &sim->tasks[t];
    T->state = 1;
    T->pub.ready_s = sim->now;
    if (T->pub.kind == MPRESS_TASK_EVICT)
        sim->pending_evict[T->pub.src]++;
    if (T->stream >= 0) {
        try_start_stream(sim, T->stream);
    } else {
        struct sim_queue *Q = &sim->queues[T->queue];
        T->q_next = -1;
        if (Q->tail >= 0)
            sim->tasks[Q->tail].q_next = t;
        else
            Q->head = t;
        Q->tail = t;
        try_start_queue(sim, T->queue);
    }
}

static void finish_task(struct mpress_sim *sim, int t)
{
    struct sim_task *T = &sim->tasks[t];
    T->state = 3;
    T->pub.end_s = sim->now;
    apply_group(sim, t, 1);
    if (mpress_sched_task(sim->sched, t)->ends_iteration) {
        int it = T->pub.iteration;
        if (++sim->iter_steps[it] == sim->n_stages) {
            sim->iter_end[it] = sim->now;
            for (int r = 0; r < sim->n_res; r++)
                sim->res[r].snap[it] = sim->res[r].bytes;
        }
    }
    if (T->stream >= 0) {
        int k = T->stream;
        sim->seq_pos[k]++;
        if (sim->seq_pos[k] < sim->seq_len[k])
            sim->tasks[sim->seq[k][sim->seq_pos[k]]].head_s = sim->now;
    } else if (T->queue >= 0) {
        sim->queues[T->queue].busy = -1;
    }
    if (T->pub.kind == MPRESS_TASK_EVICT)
        sim->pending_evict[T->pub.src]--;
    int n_succ;
    const int *succ = mpress_sched_succs(sim->sched, t, &n_succ);
    for (int e = 0; e < n_succ; e++) {
        struct sim_task *S = &sim->tasks[succ[e]];
        S->last_dep = t;
        if (--S->deps_left == 0)
            make_ready(sim, succ[e]);
    }
    if (T->stream >= 0)
        try_start_stream(sim, T->stream);
    else if (T->queue >= 0)
        try_start_queue(sim, T->queue);
    /* memory may have been freed: streams held by --wait-for-memory try again */
    for (int k = 0; sim->wait_for_memory && k < sim->n_stages; k++)
        if (sim->mem_blocked[k]) {
            sim->mem_blocked[k] = 0;
            try_start_stream(sim, k);
        }
    for (int q = 0; sim->wait_for_memory && q < sim->n_queues; q++)
        if (sim->queue_blocked[q]) {
            sim->queue_blocked[q] = 0;
            try_start_queue(sim, q);
        }
}

int sim_run_events(struct mpress_sim *sim)
{
    for (int t = 0; t < sim->n_tasks; t++)
        if (sim->tasks[t].deps_left == 0 && sim->tasks[t].state == 0)
            make_ready(sim, t);
    while (!sim->failed) {
        if (sim->rates_dirty)
            sim_net_compute_rates(sim);
        double tf = DBL_MAX;
        int fi = -1;
        for (int i = 0; i < sim->n_active; i++) {
            struct sim_task *T = &sim->tasks[sim->active[i]];
            double te = T->rate > 0 ? sim->now + T->remaining / T->rate : DBL_MAX;
            if (te < tf) {
                tf = te;
                fi = i;
            }
        }
        double th = sim->n_heap ? sim->heap[0].t : DBL_MAX;
        if (fi < 0 && !sim->n_heap)
            break;
        if (fi >= 0 && tf <= th) {
            sim_net_advance(sim, tf);
            /* Every flow done by now (the earliest one, and any within rounding of it) ends,
             * in task order so that the run does not depend on array order. */
            int *done = sim->scratch, nd = 0;
            for (int i = 0; i < sim->n_active; i++) {
                struct sim_task *T = &sim->tasks[sim->active[i]];
                if (i == fi || T->remaining <= 1e-9 * T->pub.bytes + 1e-6)
                    done[nd++] = sim->active[i];
            }
            for (int a = 1; a < nd; a++)
                for (int b = a; b > 0 && done[b - 1] > done[b]; b--) {
                    int x = done[b];
                    done[b] = done[b - 1];
                    done[b - 1] = x;
                }
            for (int d = 0; d < nd; d++) {
                for (int i = 0; i < sim->n_active; i++)
                    if (sim->active[i] == done[d]) {
                        sim->active[i] = sim->active[--sim->n_active];
                        break;
                    }
                sim->tasks[done[d]].remaining = 0;
                sim->rates_dirty = 1;
            }
            for (int d = 0; d < nd; d++)
                finish_task(sim, done[d]);
        } else {
            struct sim_ev ev = heap_pop(sim);
            sim_net_advance(sim, ev.t);
            finish_task(sim, ev.task);
        }
    }
    return sim->failed ? -1 : 0;
}
