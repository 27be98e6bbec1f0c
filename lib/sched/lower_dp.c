/* A data-parallel ZeRO step lowered into the schedule's task graph, so that the simulator
 * replays it with its shared links like any plan (docs/schedule.md, "Data-parallel steps").
 *
 * The plan is mpress_dp_plan's: one "stage" per GPU, each running every op. Per GPU and
 * micro-batch the compute queue runs the forward of every unit (a layer, or one op
 * outside the layers) in order and then the backward of every unit in reverse, with a layer's
 * forwards run again before its backward under activation checkpointing. Collectives are ring
 * steps (mpress_rings_find): step j of ring r sends one chunk (bytes / n / rings) from g to
 * next_r(g) on g's peer engine, after step j - 1 of ring r into g and after g's own step
 * j - 1 of that ring (step 0 after what triggers the collective on g); all-gather steps are
 * SEND_ACT tasks, reduce-scatter steps SEND_GRAD tasks. ZeRO-3 and ZeRO-Infinity gather a
 * unit's weights before each of its phases, at most two phases ahead of the compute (the
 * gather of phase i waits for the end of phase i - 2); ZeRO-Infinity first copies the GPU's
 * partition up from the host (WEIGHTS_H2D). Every policy reduce-scatters a unit's gradients
 * after its backward (ZeRO-Infinity then copies the partition down, GRAD_D2H). The step: on the
 * GPU for ZeRO-3 (OPTIMIZER, bytes = what it touches); for ZeRO-Offload gradients down, a CPU
 * step, the weight partition up, an all-gather of the weights and a copy into the weight
 * buffer on the GPU; for ZeRO-Infinity a CPU step. */
#include <stdlib.h>
#include <string.h>

#include "mpress/compare.h"
#include "sched_internal.h"

#define DP_MAX_UNITS 4096

struct dp {
    const struct mpress_dp_config *c;
    struct mpress_rings rings;
    int prev[MPRESS_MAX_RINGS][MPRESS_MAX_GPUS];
    int n, R, steps;            /* GPUs, rings, ring steps (n - 1) */
    int U;
    int ufirst[DP_MAX_UNITS], ulast[DP_MAX_UNITS];
    uint64_t pu[DP_MAX_UNITS], gu[DP_MAX_UNITS];
    uint64_t P, G, O;           /* resident model states of the whole model */
    int ckpt_ops;               /* ops of layer units (run again under checkpointing) */
    /* per GPU, the current iteration's phases: first and last compute task */
    int *ph_first, *ph_last;    /* [g * phases + i] */
    int phases;                 /* 2 U a */
    int *step_end;              /* [g]: the task that ended the previous iteration, -1 */
};

static uint64_t part(uint64_t x, int n)
{
    return n > 1 ? (x + (uint64_t)n - 1) / (uint64_t)n : x;
}

static int is_layer(const struct mpress_profile *p, const struct dp *d, int u)
{
    return p->ops[d->ufirst[u]].layer >= 0;
}

/* A ring collective of `bytes` (the full tensor) over every GPU. trig[g]: the task after
 * which g sends its first chunk (-1: none). done[r * n + g] receives ring r's last step into
 * g. Returns the first task it made on each GPU in first[g] (-1 when there are no steps). */
static void lay_ring(struct mpress_sched *s, struct dp *d, enum mpress_task_kind kind, int it,
                     int mb, uint64_t bytes, const int *trig, int *done, int *first)
{
    int n = d->n, R = d->R;
    for (int g = 0; g < n; g++)
        first[g] = -1;
    if (d->steps < 1 || R < 1) {
        for (int i = 0; i < R * n; i++)
            done[i] = -1;
        return;
    }
    uint64_t chunk = (bytes + (uint64_t)(n * R) - 1) / (uint64_t)(n * R);
    int prev_step[MPRESS_MAX_RINGS][MPRESS_MAX_GPUS];
    for (int j = 0; j < d->steps; j++) {
        int cur[MPRESS_MAX_RINGS][MPRESS_MAX_GPUS];
        for (int r = 0; r < R; r++)
            for (int g = 0; g < n; g++) {
                int t = sched_new_task(s, kind, g, it, mb, -1);
                if (t < 0)
                    return;
                struct mpress_task *T = &s->bt[t].pub;
                T->dst = d->rings.next[r][g];
                T->bytes = chunk;
                T->queue = g * s->epg + 3 + T->dst;
                /* a step forwards (all-gather) or adds to its own partial sum
                 * (reduce-scatter) what the previous step brought: after that step into g
                 * and after g's own previous step (a rank runs its steps in order) */
                sched_add_edge(s, j == 0 ? trig[g] : prev_step[r][d->prev[r][g]], t);
                if (j > 0)
                    sched_add_edge(s, prev_step[r][g], t);
                if (first[g] < 0)
                    first[g] = t;
                cur[r][g] = t;
            }
        memcpy(prev_step, cur, sizeof(prev_step));
    }
    for (int r = 0; r < R; r++)
        for (int g = 0; g < n; g++)
            done[r * n + g] = prev_step[r][d->prev[r][g]];
}

/* Compute tasks of one GPU for one iteration: phases in stream order (their first and last
 * tasks recorded in d->ph_first / ph_last), memory of activations, workspace and gradient
 * buckets. */
static void lay_compute(struct mpress_sched *s, struct dp *d, int g, int it, int a)
{
    const struct mpress_profile *p = &s->plan->profile;
    int ck = d->c->checkpoint;
    for (int m = 0; m < a; m++) {
        for (int u = 0; u < d->U; u++) {
            int i = (m * 2) * d->U + u, layer = ck && is_layer(p, d, u);
            for (int o = d->ufirst[u]; o <= d->ulast[u]; o++) {
                const struct mpress_op *op = &p->ops[o];
                int t = sched_new_task(s, MPRESS_TASK_FORWARD, g, it, m, o);
                if (t < 0)
                    return;
                struct sched_btask *T = &s->bt[t];
                if (layer && o == d->ufirst[u] && o > 0)
                    sched_add_mem(s, &T->mem_start, g, MPRESS_MEM_ACTIVATIONS, g, it, m,
                                  (int64_t)p->ops[o - 1].output_bytes);
                int64_t transient = sched_forward_transient(op, o);
                sched_add_mem(s, &T->mem_start, g, MPRESS_MEM_WORKING, g, it, m, transient);
                for (int j = 0; j < op->n_tensors; j++)
                    sched_add_mem(s, &T->mem_start, g, MPRESS_MEM_ACTIVATIONS, g, it, m,
                                  (int64_t)op->tensors[j].bytes);
                sched_add_mem(s, &T->mem_end, g, MPRESS_MEM_WORKING, g, it, m, -transient);
                if (o == d->ufirst[u])
                    d->ph_first[g * d->phases + i] = t;
                d->ph_last[g * d->phases + i] = t;
                sched_seq_push(s, g, t);
            }
            if (layer) {
                /* checkpointing: the layer's saved tensors go once its forward ends */
                int t = d->ph_last[g * d->phases + i];
                for (int o = d->ufirst[u]; o <= d->ulast[u]; o++)
                    for (int j = 0; j < p->ops[o].n_tensors; j++)
                        sched_add_mem(s, &s->bt[t].mem_end, g, MPRESS_MEM_ACTIVATIONS, g, it,
                                      m, -(int64_t)p->ops[o].tensors[j].bytes);
            }
        }
        for (int u = d->U - 1; u >= 0; u--) {
            int i = (m * 2 + 1) * d->U + (d->U - 1 - u), layer = ck && is_layer(p, d, u);
            int first = -1;
            if (layer)
                for (int o = d->ufirst[u]; o <= d->ulast[u]; o++) {
                    const struct mpress_op *op = &p->ops[o];
                    int t = sched_new_task(s, MPRESS_TASK_FORWARD, g, it, m, o);
                    if (t < 0)
                        return;
                    struct sched_btask *T = &s->bt[t];
                    int64_t transient = sched_forward_transient(op, o);
                    sched_add_mem(s, &T->mem_start, g, MPRESS_MEM_WORKING, g, it, m, transient);
                    for (int j = 0; j < op->n_tensors; j++)
                        sched_add_mem(s, &T->mem_start, g, MPRESS_MEM_WORKING, g, it, m,
                                      (int64_t)op->tensors[j].bytes);
                    sched_add_mem(s, &T->mem_end, g, MPRESS_MEM_WORKING, g, it, m, -transient);
                    first = first < 0 ? t : first;
                    sched_seq_push(s, g, t);
                }
            int t = -1;
            for (int o = d->ulast[u]; o >= d->ufirst[u]; o--) {
                const struct mpress_op *op = &p->ops[o];
                t = sched_new_task(s, MPRESS_TASK_BACKWARD, g, it, m, o);
                if (t < 0)
                    return;
                struct sched_btask *T = &s->bt[t];
                first = first < 0 ? t : first;
                sched_add_mem(s, &T->mem_start, g, MPRESS_MEM_WORKING, g, it, m,
                              (int64_t)op->workspace_bytes);
                sched_add_mem(s, &T->mem_end, g, MPRESS_MEM_WORKING, g, it, m,
                              -(int64_t)op->workspace_bytes);
                for (int j = 0; j < op->n_tensors; j++)
                    sched_add_mem(s, &T->mem_end, g, layer ? MPRESS_MEM_WORKING
                                                          : MPRESS_MEM_ACTIVATIONS,
                                  g, it, m, -(int64_t)op->tensors[j].bytes);
                if (layer && o == d->ufirst[u] && o > 0)
                    sched_add_mem(s, &T->mem_end, g, MPRESS_MEM_ACTIVATIONS, g, it, m,
                                  -(int64_t)p->ops[o - 1].output_bytes);
                sched_seq_push(s, g, t);
            }
            /* the unit's full gradients, until their reduce-scatter is done */
            sched_add_mem(s, &s->bt[first].mem_start, g, MPRESS_MEM_GRADIENTS, g, it, m,
                          (int64_t)d->gu[u]);
            d->ph_first[g * d->phases + i] = first;
            d->ph_last[g * d->phases + i] = t;
        }
    }
}

static int cpu_queue(const struct mpress_sched *s, int g)
{
    const struct mpress_topology *tp = &s->plan->topology;
    int ns = tp->n_sockets > 0 ? tp->n_sockets : 1, q = tp->gpus[g].socket;
    return s->n_gpus * s->epg + (q >= 0 && q < ns ? q : 0);
}

static int new_copy(struct mpress_sched *s, enum mpress_task_kind kind, int g, int it, int mb,
                    int to_host, uint64_t bytes)
{
    int t = sched_new_task(s, kind, g, it, mb, -1);
    if (t < 0)
        return -1;
    struct mpress_task *T = &s->bt[t].pub;
    T->bytes = bytes;
    if (to_host) {
        T->dst = -1;
        T->queue = g * s->epg + 1;
    } else {
        T->src = -1;
        T->queue = g * s->epg + 2;
    }
    return t;
}

static int new_cpu_step(struct mpress_sched *s, int g, int it, uint64_t bytes)
{
    int t = sched_new_task(s, MPRESS_TASK_OPTIMIZER, g, it, -1, -1);
    if (t < 0)
        return -1;
    struct mpress_task *T = &s->bt[t].pub;
    T->src = T->dst = -1;
    T->bytes = bytes;
    T->queue = cpu_queue(s, g);
    return t;
}

/* The step of iteration it after its micro-batches (lay_iteration): ZeRO-3 on the GPU,
 * ZeRO-Infinity on the CPU after the gradients' copies down, ZeRO-Offload's copies down, CPU
 * step, copies up and the gathering of the new weights. trig, done and first are scratch arrays
 * of lay_ring; rs_done and d2h_last the reduce-scatters and gradient copies the step waits for.
 * -1 when a task could not be had. */
static int lay_step(struct mpress_sched *s, struct dp *d, int it, int *trig, int *done,
                    int *first, const int *rs_done, const int *d2h_last)
{
    const struct mpress_plan *plan = s->plan;
    int n = d->n, R = d->R;
    enum mpress_dp_policy pol = d->c->policy;
    /* the step: each rank steps its partition of the model states; what the step reads and
     * writes is mpress_optimizer_step_traffic's count, as for a plan's step */
    struct mpress_optimizer_traffic tr;
    mpress_optimizer_step_traffic(&plan->profile.model, (double)d->P, (double)d->G,
                                  (double)d->O, &tr);
    uint64_t touched = part((uint64_t)tr.memory_bytes, n);
    for (int g = 0; g < n; g++) {
        int last = s->seq_len[g] ? s->seq[g][s->seq_len[g] - 1] : -1;
        int end = -1;
        if (pol == MPRESS_DP_ZERO3) {
            end = sched_new_task(s, MPRESS_TASK_OPTIMIZER, g, it, -1, -1);
            if (end < 0)
                return -1;
            s->bt[end].pub.bytes = touched;
            for (int x = 0; x < d->U * R; x++)
                sched_add_edge(s, rs_done[x * n + g], end);
            sched_seq_push(s, g, end);
        } else if (pol == MPRESS_DP_ZERO_INFINITY) {
            end = new_cpu_step(s, g, it, touched);
            if (end < 0)
                return -1;
            sched_add_edge(s, last, end);
            for (int u = 0; u < d->U; u++)
                sched_add_edge(s, d2h_last[u * n + g], end);
        }
        d->step_end[g] = end;
    }
    if (pol == MPRESS_DP_ZERO_OFFLOAD) {
        for (int g = 0; g < n; g++) {
            int last = s->seq_len[g] ? s->seq[g][s->seq_len[g] - 1] : -1;
            int dn = new_copy(s, MPRESS_TASK_GRAD_D2H, g, it, -1, 1,
                              part((uint64_t)tr.pcie_down_bytes, n));
            int cs = new_cpu_step(s, g, it, touched);
            int up = new_copy(s, MPRESS_TASK_WEIGHTS_H2D, g, it, -1, 0,
                              part((uint64_t)tr.pcie_up_bytes, n));
            if (dn < 0 || cs < 0 || up < 0)
                return -1;
            sched_add_edge(s, last, dn);
            for (int x = 0; x < d->U * R; x++)
                sched_add_edge(s, rs_done[x * n + g], dn);
            sched_add_edge(s, dn, cs);
            sched_add_edge(s, cs, up);
            trig[g] = up;
        }
        lay_ring(s, d, MPRESS_TASK_SEND_ACT, it, -1, d->P, trig, done, first);
        for (int g = 0; g < n && !s->failed; g++) {
            /* the gathered weights copied into the GPU's weight buffer: ends the iteration */
            int t = sched_new_task(s, MPRESS_TASK_OPTIMIZER, g, it, -1, -1);
            if (t < 0)
                return -1;
            s->bt[t].pub.bytes = 2 * part(d->P, n);
            sched_add_edge(s, trig[g], t);
            for (int r = 0; r < R; r++)
                sched_add_edge(s, done[r * n + g], t);
            sched_seq_push(s, g, t);
            d->step_end[g] = t;
        }
    }
    return s->failed ? -1 : 0;
}

static void lay_iteration(struct mpress_sched *s, struct dp *d, int it)
{
    const struct mpress_plan *plan = s->plan;
    int n = d->n, R = d->R, a = plan->micro_batches;
    enum mpress_dp_policy pol = d->c->policy;
    int gathers = pol != MPRESS_DP_ZERO_OFFLOAD;
    int *trig = malloc(sizeof(int) * (size_t)n), *first = malloc(sizeof(int) * (size_t)n);
    int *done = malloc(sizeof(int) * (size_t)(R > 0 ? R : 1) * (size_t)n);
    /* reduce-scatters of the last micro-batch, for the step: [u * R * n + r * n + g] */
    int *rs_done = malloc(sizeof(int) * (size_t)d->U * (size_t)(R > 0 ? R : 1) * (size_t)n);
    int *d2h_last = malloc(sizeof(int) * (size_t)d->U * (size_t)n);
    if (!trig || !first || !done || !rs_done || !d2h_last) {
        s->failed = s->failed ? s->failed : 1;
        goto out;
    }
    for (int g = 0; g < n && !s->failed; g++) {
        int before = s->seq_len[g];
        lay_compute(s, d, g, it, a);
        if (!s->failed && d->step_end[g] >= 0 && before < s->seq_len[g])
            sched_add_edge(s, d->step_end[g], s->seq[g][before]);
    }
    if (s->failed)
        goto out;
    for (int m = 0; m < a && !s->failed; m++)
        for (int half = 0; half < 2 && !s->failed; half++)
            for (int k = 0; k < d->U; k++) {
                int u = half ? d->U - 1 - k : k, i = (m * 2 + half) * d->U + k;
                /* weights gathered for this phase */
                if (gathers && d->pu[u] > 0) {
                    for (int g = 0; g < n; g++) {
                        int back = i >= 2 ? d->ph_last[g * d->phases + i - 2] : d->step_end[g];
                        trig[g] = back;
                        if (pol == MPRESS_DP_ZERO_INFINITY) {
                            int h = new_copy(s, MPRESS_TASK_WEIGHTS_H2D, g, it, m, 0,
                                             part(d->pu[u], n));
                            if (h < 0)
                                goto out;
                            sched_add_edge(s, back, h);
                            sched_add_mem(s, &s->bt[h].mem_start, g, MPRESS_MEM_WEIGHTS, g, it,
                                          m, (int64_t)d->pu[u]);
                            trig[g] = h;
                        }
                    }
                    lay_ring(s, d, MPRESS_TASK_SEND_ACT, it, m, d->pu[u], trig, done, first);
                    if (s->failed)
                        goto out;
                    for (int g = 0; g < n; g++) {
                        int f = d->ph_first[g * d->phases + i], l = d->ph_last[g * d->phases + i];
                        int at = pol == MPRESS_DP_ZERO_INFINITY ? trig[g]
                                 : first[g] >= 0 ? first[g] : f;
                        if (pol != MPRESS_DP_ZERO_INFINITY)
                            sched_add_mem(s, &s->bt[at].mem_start, g, MPRESS_MEM_WEIGHTS, g, it,
                                          m, (int64_t)d->pu[u]);
                        sched_add_mem(s, &s->bt[l].mem_end, g, MPRESS_MEM_WEIGHTS, g, it, m,
                                      -(int64_t)d->pu[u]);
                        for (int r = 0; r < R; r++)
                            sched_add_edge(s, done[r * n + g], f);
                        if (pol == MPRESS_DP_ZERO_INFINITY)
                            sched_add_edge(s, trig[g], f);
                    }
                }
                if (!half)
                    continue;
                /* the unit's gradients reduce-scattered after its backward */
                for (int g = 0; g < n; g++)
                    trig[g] = d->ph_last[g * d->phases + i];
                lay_ring(s, d, MPRESS_TASK_SEND_GRAD, it, m, d->gu[u], trig, done, first);
                if (s->failed)
                    goto out;
                for (int g = 0; g < n; g++) {
                    int free_at = R > 0 && done[g] >= 0 ? done[g] : trig[g];
                    if (pol == MPRESS_DP_ZERO_INFINITY) {
                        int t = new_copy(s, MPRESS_TASK_GRAD_D2H, g, it, m, 1, part(d->gu[u], n));
                        if (t < 0)
                            goto out;
                        sched_add_edge(s, trig[g], t);
                        for (int r = 0; r < R; r++)
                            sched_add_edge(s, done[r * n + g], t);
                        free_at = t;
                        d2h_last[u * n + g] = t;
                    }
                    sched_add_mem(s, &s->bt[free_at].mem_end, g, MPRESS_MEM_GRADIENTS, g, it, m,
                                  -(int64_t)d->gu[u]);
                    /* two units' gradients wait at most (DeepSpeed's reduce buckets): the
                     * backward two units on waits until these are gone */
                    if (k + 2 < d->U) {
                        int next = d->ph_first[g * d->phases + i + 2];
                        if (pol == MPRESS_DP_ZERO_INFINITY || R == 0)
                            sched_add_edge(s, free_at, next);
                        else
                            for (int r = 0; r < R; r++)
                                sched_add_edge(s, done[r * n + g], next);
                    }
                    for (int r = 0; r < R; r++)
                        rs_done[(u * R + r) * n + g] = done[r * n + g];
                }
            }
    if (s->failed)
        goto out;
    if (lay_step(s, d, it, trig, done, first, rs_done, d2h_last))
        goto out;
    for (int g = 0; g < n && !s->failed; g++)
        if (d->step_end[g] >= 0)
            s->bt[d->step_end[g]].pub.ends_iteration = 1;
out:
    free(trig);
    free(first);
    free(done);
    free(rs_done);
    free(d2h_last);
}

static void lay_initial(struct mpress_sched *s, const struct dp *d)
{
    const struct mpress_topology *tp = &s->plan->topology;
    int n = d->n;
    for (int g = 0; g < n; g++) {
        sched_add_mem(s, &s->init_mem, g, MPRESS_MEM_RESERVE, g, -1, -1,
                      (int64_t)tp->gpus[g].reserve_bytes);
        switch (d->c->policy) {
        case MPRESS_DP_ZERO3:
            sched_add_mem(s, &s->init_mem, g, MPRESS_MEM_WEIGHTS, g, -1, -1,
                          (int64_t)part(d->P, n));
            sched_add_mem(s, &s->init_mem, g, MPRESS_MEM_GRADIENTS, g, -1, -1,
                          (int64_t)part(d->G, n));
            sched_add_mem(s, &s->init_mem, g, MPRESS_MEM_OPTIMIZER, g, -1, -1,
                          (int64_t)part(d->O, n));
            break;
        case MPRESS_DP_ZERO_OFFLOAD:
            sched_add_mem(s, &s->init_mem, g, MPRESS_MEM_WEIGHTS, g, -1, -1, (int64_t)d->P);
            sched_add_mem(s, &s->init_mem, g, MPRESS_MEM_GRADIENTS, g, -1, -1,
                          (int64_t)part(d->G, n));
            sched_add_mem(s, &s->init_mem, -1, MPRESS_MEM_OPTIMIZER, g, -1, -1,
                          (int64_t)part(d->O, n));
            sched_add_mem(s, &s->init_mem, -1, MPRESS_MEM_GRADIENTS, g, -1, -1,
                          (int64_t)part(d->G, n));
            break;
        default:
            sched_add_mem(s, &s->init_mem, -1, MPRESS_MEM_WEIGHTS, g, -1, -1,
                          (int64_t)part(d->P, n));
            sched_add_mem(s, &s->init_mem, -1, MPRESS_MEM_GRADIENTS, g, -1, -1,
                          (int64_t)part(d->G, n));
            sched_add_mem(s, &s->init_mem, -1, MPRESS_MEM_OPTIMIZER, g, -1, -1,
                          (int64_t)part(d->O, n));
            break;
        }
    }
}

/* Tasks the lowering makes, counted in 64 bits before anything is allocated. */
static int64_t count(const struct mpress_sched *s, const struct dp *d)
{
    const struct mpress_profile *p = &s->plan->profile;
    int64_t a = s->plan->micro_batches, ring = (int64_t)d->steps * d->R;
    enum mpress_dp_policy pol = d->c->policy;
    int64_t per_mb = 2 * (int64_t)p->n_ops + (d->c->checkpoint ? d->ckpt_ops : 0);
    for (int u = 0; u < d->U; u++) {
        if (pol != MPRESS_DP_ZERO_OFFLOAD && d->pu[u] > 0)
            per_mb += 2 * (ring + (pol == MPRESS_DP_ZERO_INFINITY));
        per_mb += ring + (pol == MPRESS_DP_ZERO_INFINITY);
    }
    int64_t step = pol == MPRESS_DP_ZERO_OFFLOAD ? 4 + ring : 1;
    return (int64_t)s->N * d->n * (a * per_mb + step);
}

static int lower_dp(struct mpress_sched *s, void *ctx, struct mpress_error *err)
{
    const struct mpress_plan *plan = s->plan;
    const struct mpress_profile *p = &plan->profile;
    struct dp *d = calloc(1, sizeof(*d));
    if (!d)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    int rc = 0;
    d->c = ctx;
    d->n = s->n_gpus;
    if (plan->n_stages != d->n || p->n_ops < 1 || plan->micro_batches < 1) {
        rc = mpress_error_set(err, MPRESS_EINPUT, "a data-parallel plan needs one stage per "
                              "GPU (%d stages, %d GPUs), ops and micro-batches",
                              plan->n_stages, d->n);
        goto out;
    }
    for (int k = 0; k < plan->n_stages; k++)
        if (plan->stages[k].gpu != k) {
            rc = mpress_error_set(err, MPRESS_EINPUT, "stages[%d]: a data-parallel plan runs "
                                  "stage k on gpu k", k);
            goto out;
        }
    mpress_rings_find(&plan->topology, &d->rings);
    d->R = d->n > 1 ? d->rings.n_rings : 0;
    d->steps = d->n - 1;
    for (int r = 0; r < d->R; r++)
        for (int g = 0; g < d->n; g++)
            d->prev[r][d->rings.next[r][g]] = g;
    for (int first = 0; first < p->n_ops;) {
        if (d->U == DP_MAX_UNITS) {
            rc = mpress_error_set(err, MPRESS_EINPUT, "more than %d units", DP_MAX_UNITS);
            goto out;
        }
        int last = mpress_dp_unit_end(p, first), u = d->U++;
        d->ufirst[u] = first;
        d->ulast[u] = last;
        for (int o = first; o <= last; o++) {
            d->pu[u] += p->ops[o].param_bytes;
            d->gu[u] += p->ops[o].grad_bytes;
            if (mpress_dp_state_op(p, o)) {
                d->P += p->ops[o].param_bytes;
                d->G += p->ops[o].grad_bytes;
                d->O += p->ops[o].optim_bytes;
            }
        }
        if (p->ops[first].layer >= 0)
            d->ckpt_ops += last - first + 1;
        first = last + 1;
    }
    int64_t total = count(s, d);
    if (total > MPRESS_SCHED_MAX_TASKS) {
        rc = mpress_error_set(err, MPRESS_EINPUT, "the data-parallel step needs %lld tasks, "
                              "more than %d", (long long)total, MPRESS_SCHED_MAX_TASKS);
        goto out;
    }
    s->expected_tasks = (int)total;
    d->phases = 2 * d->U * plan->micro_batches;
    d->ph_first = malloc(sizeof(int) * (size_t)d->phases * (size_t)d->n);
    d->ph_last = malloc(sizeof(int) * (size_t)d->phases * (size_t)d->n);
    d->step_end = malloc(sizeof(int) * (size_t)d->n);
    s->bt = malloc((size_t)total * sizeof(*s->bt));
    s->cap_tasks = (int)total;
    s->seq = calloc((size_t)s->n_stages, sizeof(int *));
    s->seq_len = calloc((size_t)s->n_stages, sizeof(int));
    s->seq_cap = calloc((size_t)s->n_stages, sizeof(int));
    if (!d->ph_first || !d->ph_last || !d->step_end || !s->bt || !s->seq || !s->seq_len ||
        !s->seq_cap) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto out;
    }
    for (int g = 0; g < d->n; g++)
        d->step_end[g] = -1;
    lay_initial(s, d);
    for (int it = 0; it < s->N && !s->failed; it++)
        lay_iteration(s, d, it);
    if (s->failed == 2)
        rc = mpress_error_set(err, MPRESS_EINPUT, "the data-parallel step needs more edges or "
                              "memory changes than the schedule can count");
    else if (s->failed == 3 || (!s->failed && s->n_tasks != s->expected_tasks))
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "internal error: the data-parallel step "
                              "made %d tasks, %d were counted", s->n_tasks, s->expected_tasks);
    else if (s->failed)
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
out:
    if (d) {
        free(d->ph_first);
        free(d->ph_last);
        free(d->step_end);
    }
    free(d);
    return rc;
}

int mpress_sched_create_dp(const struct mpress_plan *plan, const struct mpress_dp_config *c,
                           const struct mpress_sched_options *opt, struct mpress_sched **out,
                           struct mpress_error *err)
{
    return sched_create_with(plan, opt, lower_dp, (void *)c, out, err);
}
