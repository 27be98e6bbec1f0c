/* Plan -> task graph. Each compute stream (one per stage, on its GPU) gets the plan's pipeline
 * schedule; boundary sends, swaps, host-optimizer copies and the tied-weight exchange are
 * copies on copy engines; host optimizer steps run on the CPU queue of the GPU's socket. Every
 * memory change is attached to the start or end of the task that causes it. Tasks are made in
 * a fixed order (stage by stage in stream order, then boundaries, then swaps, then the tied
 * exchange) and edges and deltas are appended in the order written here: the simulator's
 * tie-breaking follows these orders, so changing them changes its timelines. The rules are
 * written out in docs/schedule.md. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpress/model.h"
#include "sched_internal.h"

/* ---- building blocks ------------------------------------------------------------------------ */

static int new_task(struct mpress_sched *s, enum mpress_task_kind kind, int stage, int it,
                    int mb, int op)
{
    /* the count was made beforehand; a task beyond it is a bug in the count, not a big plan */
    if (s->failed || s->n_tasks >= s->expected_tasks) {
        s->failed = s->failed ? s->failed : 3;
        return -1;
    }
    struct sched_btask *t = &s->bt[s->n_tasks];
    memset(t, 0, sizeof(*t));
    t->pub.kind = kind;
    t->pub.stage = stage;
    t->pub.iteration = it;
    t->pub.micro_batch = mb;
    t->pub.op = op;
    t->pub.action = -1;
    t->pub.tied_op = -1;
    t->pub.src = t->pub.dst = stage >= 0 ? s->stage_gpu[stage] : -1;
    t->pub.queue = stage >= 0 ? s->stage_gpu[stage] * s->epg : -1;
    t->edge_head = t->edge_tail = -1;
    t->mem_start = t->mem_end = -1;
    return s->n_tasks++;
}

static void add_edge(struct mpress_sched *s, int from, int to)
{
    if (from < 0 || to < 0)
        return;
    if (sched_grow((void **)&s->bedges, &s->cap_edges, s->n_edges + 1, sizeof(*s->bedges))) {
        s->failed = s->failed ? s->failed : (s->n_edges == INT_MAX ? 2 : 1);
        return;
    }
    /* Successors are kept in the order they were added, so that copies that become ready at
     * the same moment queue in the order the plan was laid out (boundary sends first). */
    struct sched_btask *F = &s->bt[from];
    s->bedges[s->n_edges] = (struct sched_bedge){to, -1};
    if (F->edge_tail >= 0)
        s->bedges[F->edge_tail].next = s->n_edges;
    else
        F->edge_head = s->n_edges;
    F->edge_tail = s->n_edges++;
    s->bt[to].n_preds++;
}

/* Appends a memory change to a list (a task's start or end list, or the initial list). dev is
 * a GPU index or -1 for host memory. */
static void add_mem(struct mpress_sched *s, int *list, int dev, enum mpress_mem_kind kind,
                    int owner, int it, int mb, int64_t delta)
{
    if (delta == 0)
        return;
    if (sched_grow((void **)&s->bdeltas, &s->cap_deltas, s->n_deltas + 1,
                   sizeof(*s->bdeltas))) {
        s->failed = s->failed ? s->failed : (s->n_deltas == INT_MAX ? 2 : 1);
        return;
    }
    /* Appended at the tail so a list applies in the order it was written. */
    s->bdeltas[s->n_deltas] =
        (struct sched_bdelta){{dev, kind, owner, it, mb, delta}, -1};
    if (*list < 0) {
        *list = s->n_deltas++;
        return;
    }
    int i = *list;
    while (s->bdeltas[i].next >= 0)
        i = s->bdeltas[i].next;
    s->bdeltas[i].next = s->n_deltas++;
}

static void seq_push(struct mpress_sched *s, int stage, int task)
{
    if (task < 0)
        return;
    if (sched_grow((void **)&s->seq[stage], &s->seq_cap[stage], s->seq_len[stage] + 1,
                   sizeof(int))) {
        s->failed = s->failed ? s->failed : 1;
        return;
    }
    s->seq[stage][s->seq_len[stage]++] = task;
}

static int seq_last(const struct mpress_sched *s, int stage)
{
    return s->seq_len[stage] ? s->seq[stage][s->seq_len[stage] - 1] : -1;
}

static int stage_of_op(const struct mpress_plan *plan, int op)
{
    for (int k = 0; k < plan->n_stages; k++)
        if (op >= plan->stages[k].first_op && op <= plan->stages[k].last_op)
            return k;
    return -1;
}

/* ---- checks --------------------------------------------------------------------------------- */

/* Checks the plan and fills action_of: action_of[action_of[op] + tensor] = action index; the
 * first n_ops entries are each op's offset. What makes a plan valid is mpress_plan_check's (the
 * rules the loader and the evaluator apply too); what is left here is only what lowering needs
 * beyond them. */
static int validate(const struct mpress_plan *plan, int **action_of, struct mpress_error *err)
{
    const struct mpress_profile *pr = &plan->profile;
    *action_of = NULL;
    int rc = mpress_plan_check(pr, &plan->topology, plan->micro_batches, plan->n_stages,
                               plan->stages, plan->n_actions, plan->actions, NULL, err);
    if (rc)
        return rc;
    if (plan->prefetch_lookahead < 0) {
        if (err)
            snprintf(err->path, sizeof(err->path), "prefetch_lookahead");
        return mpress_error_set(err, MPRESS_EINPUT, "expected a prefetch_lookahead >= 0, got %d",
                                plan->prefetch_lookahead);
    }
    /* One action per saved tensor in profile order (checked above), so the map is the prefix
     * sums of the ops' tensor counts; n_actions is within MPRESS_MAX_SCHEDULE_SLOTS. */
    size_t total = (size_t)pr->n_ops + (size_t)plan->n_actions;
    int *base = malloc(total * sizeof(int));
    *action_of = base;
    if (!base)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    int off = pr->n_ops;
    for (int o = 0; o < pr->n_ops; o++) {
        base[o] = off;
        for (int j = 0; j < pr->ops[o].n_tensors; j++)
            base[off + j] = off - pr->n_ops + j;
        off += pr->ops[o].n_tensors;
    }
    return 0;
}

/* ---- tied weights --------------------------------------------------------------------------- */

/* A weight two ops of different stages share (GPT's and BERT's head reuses the embedding's
 * word matrix: lib/model/transformer.c). The profile holds no weights, so the pairs come from
 * rebuilding the model the profile names and matching ops by name; an imported profile, or
 * one whose op names are not the model's, has none. */
#define SCHED_MAX_TIED 16   /* GPT and BERT tie one */

struct tied {
    int op_a, op_b;             /* profile ops; op_a owns the weight */
    int stage_a, stage_b;
    uint64_t grad_bytes;
};

static int find_tied(const struct mpress_plan *plan, struct tied *out, int max, int *n,
                     struct mpress_error *err)
{
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_model_config *cfg = &pr->model;
    *n = 0;
    if (strcmp(cfg->family, "gpt") != 0 && strcmp(cfg->family, "bert") != 0)
        return 0;
    struct mpress_model model;
    struct mpress_error e2;
    mpress_error_clear(&e2);
    if (mpress_model_build(cfg, &model, &e2)) {
        mpress_model_finish(&model);
        if (e2.code == MPRESS_ESYSTEM)
            return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        return 0;   /* a hand-made profile (a fixture, an import) names no buildable model */
    }
    int wb, gb, ob;
    mpress_model_state_bytes(cfg, &wb, &gb, &ob);
    int rc = 0;
    for (int i = 0; i < model.n_ops && !rc; i++) {
        const struct mpress_model_op *mo = &model.ops[i];
        for (int w = 0; w < mo->n_weights && !rc; w++) {
            int owner = mo->weights[w].producer;
            if (owner < 0 || owner == i || owner >= model.n_ops)
                continue;
            int pa = -1, pb = -1;
            for (int o = 0; o < pr->n_ops; o++) {
                if (strcmp(pr->ops[o].name, model.ops[owner].name) == 0)
                    pa = o;
                if (strcmp(pr->ops[o].name, mo->name) == 0)
                    pb = o;
            }
            if (pa < 0 || pb < 0 || stage_of_op(plan, pa) == stage_of_op(plan, pb))
                continue;
            if (*n == max) {
                rc = mpress_error_set(err, MPRESS_EINPUT, "the model shares more than %d "
                                      "weights across stages", max);
                break;
            }
            uint64_t elems =
                mo->weights[w].bytes / (uint64_t)mpress_dtype_size(mo->weights[w].dtype);
            out[(*n)++] = (struct tied){pa, pb, stage_of_op(plan, pa), stage_of_op(plan, pb),
                                        elems * (uint64_t)gb};
        }
    }
    mpress_model_finish(&model);
    return rc;
}

/* ---- counting ------------------------------------------------------------------------------- */

static int mul_ok(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0 || (b > 0 && a > INT64_MAX / b))
        return 0;
    *out = a * b;
    return 1;
}

/* The number of tasks lowering will make, counted in 64 bits before anything is allocated, so
 * that a plan too big to count is refused with its numbers instead of wrapping an int. */
static int count_tasks(const struct mpress_sched *s, int n_tied, int *total,
                       struct mpress_error *err)
{
    const struct mpress_plan *plan = s->plan;
    int64_t per_u = 2 * (int64_t)plan->profile.n_ops + 2 * (int64_t)(s->n_stages - 1);
    int64_t per_it = 2 * (int64_t)n_tied;
    for (int i = 0; i < plan->n_actions; i++) {
        const struct mpress_plan_action *a = &plan->actions[i];
        if (a->action == MPRESS_ACTION_RECOMPUTE)
            per_u += 1;
        else if (a->action == MPRESS_ACTION_HOST_SWAP)
            per_u += 2;
        else if (a->action == MPRESS_ACTION_D2D_SWAP)
            per_u += 2 * (int64_t)a->n_peers;
    }
    for (int k = 0; k < s->n_stages; k++)
        per_it += plan->stages[k].optimizer_on_host ? 3 : 1;
    int64_t U, a, b;
    if (!mul_ok(s->N, s->M, &U) || !mul_ok(U, per_u, &a) || !mul_ok(s->N, per_it, &b) ||
        a > INT64_MAX - b || a + b > MPRESS_SCHED_MAX_TASKS) {
        if (err)
            snprintf(err->path, sizeof(err->path), "micro_batches");
        return mpress_error_set(err, MPRESS_EINPUT, "%d micro-batches x %d iterations would "
                                "make more than %d tasks (%lld per micro-batch), more than the "
                                "schedule can count", plan->micro_batches, s->N,
                                MPRESS_SCHED_MAX_TASKS, (long long)per_u);
    }
    *total = (int)(a + b);
    return 0;
}

/* ---- laying out ----------------------------------------------------------------------------- */

/* Per (global micro-batch u = iteration * M + m, op): task ids, filled as streams are laid. */
struct layout {
    const int *action_of;
    int *fwd, *bwd, *bslot_pos;  /* [u * n_ops + op]; bslot_pos: stream index of the slot */
    int *bstart;                 /* [u * n_stages + k]: first task of the backward pass */
    int *step_first, *step_last; /* [it * n_stages + k]: first and last task of the step */
};

static int action_at(const struct layout *L, int op, int j)
{
    return L->action_of[L->action_of[op] + j];
}

/* Compute tasks of one forward pass of stage k for micro-batch m of iteration it. */
static void lay_forward(struct mpress_sched *s, struct layout *L, int k, int it, int m)
{
    const struct mpress_plan *plan = s->plan;
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_plan_stage *st = &plan->stages[k];
    int g = st->gpu, u = it * s->M + m;
    for (int o = st->first_op; o <= st->last_op; o++) {
        const struct mpress_op *op = &pr->ops[o];
        int t = new_task(s, MPRESS_TASK_FORWARD, k, it, m, o);
        if (t < 0)
            return;
        struct sched_btask *T = &s->bt[t];
        int64_t transient = sched_forward_transient(op, o);
        add_mem(s, &T->mem_start, g, MPRESS_MEM_WORKING, g, -1, -1, transient);
        for (int j = 0; j < op->n_tensors; j++)
            add_mem(s, &T->mem_start, g, MPRESS_MEM_ACTIVATIONS, g, it, m,
                    (int64_t)op->tensors[j].bytes);
        add_mem(s, &T->mem_end, g, MPRESS_MEM_WORKING, g, -1, -1, -transient);
        L->fwd[u * pr->n_ops + o] = t;
        seq_push(s, k, t);
    }
    /* Recompute drops the tensor after the forward of its last use. */
    for (int o = st->first_op; o <= st->last_op; o++)
        for (int j = 0; j < pr->ops[o].n_tensors; j++) {
            int ai = action_at(L, o, j);
            if (plan->actions[ai].action != MPRESS_ACTION_RECOMPUTE)
                continue;
            const struct mpress_plan_action *a = &plan->actions[ai];
            int e = a->evict_after_op;
            if (L->fwd[u * pr->n_ops + e] < 0)
                return;
            struct sched_btask *E = &s->bt[L->fwd[u * pr->n_ops + e]];
            add_mem(s, &E->mem_end, g, MPRESS_MEM_ACTIVATIONS, g, it, m,
                    -(int64_t)pr->ops[o].tensors[j].bytes);
        }
}

/* Recomputes stage k needs right before the backward of op o (those whose
 * prefetch_before_op is o), in profile order. */
static void lay_recomputes(struct mpress_sched *s, struct layout *L, int k, int it, int m, int o)
{
    const struct mpress_plan *plan = s->plan;
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_plan_stage *st = &plan->stages[k];
    int g = st->gpu;
    for (int o2 = st->first_op; o2 <= o; o2++)
        for (int j = 0; j < pr->ops[o2].n_tensors; j++) {
            int ai = action_at(L, o2, j);
            if (plan->actions[ai].action != MPRESS_ACTION_RECOMPUTE)
                continue;
            const struct mpress_plan_action *a = &plan->actions[ai];
            int p = a->prefetch_before_op;
            if (p != o)
                continue;
            int t = new_task(s, MPRESS_TASK_RECOMPUTE, k, it, m, o2);
            if (t < 0)
                return;
            s->bt[t].pub.action = ai;
            add_mem(s, &s->bt[t].mem_start, g, MPRESS_MEM_WORKING, g, it, m,
                    (int64_t)pr->ops[o2].tensors[j].bytes);
            seq_push(s, k, t);
        }
}

static void lay_backward(struct mpress_sched *s, struct layout *L, int k, int it, int m)
{
    const struct mpress_plan *plan = s->plan;
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_plan_stage *st = &plan->stages[k];
    int g = st->gpu, u = it * s->M + m;
    int before = s->seq_len[k];
    for (int o = st->last_op; o >= st->first_op; o--) {
        L->bslot_pos[u * pr->n_ops + o] = s->seq_len[k];
        lay_recomputes(s, L, k, it, m, o);
        const struct mpress_op *op = &pr->ops[o];
        int t = new_task(s, MPRESS_TASK_BACKWARD, k, it, m, o);
        if (t < 0)
            return;
        struct sched_btask *T = &s->bt[t];
        add_mem(s, &T->mem_start, g, MPRESS_MEM_WORKING, g, -1, -1,
                (int64_t)op->workspace_bytes);
        add_mem(s, &T->mem_end, g, MPRESS_MEM_WORKING, g, -1, -1,
                -(int64_t)op->workspace_bytes);
        /* The saved tensors of op die with its backward. */
        for (int j = 0; j < op->n_tensors; j++) {
            int ai = action_at(L, o, j);
            enum mpress_mem_kind kind = plan->actions[ai].action == MPRESS_ACTION_KEEP
                                            ? MPRESS_MEM_ACTIVATIONS
                                            : MPRESS_MEM_WORKING;
            add_mem(s, &T->mem_end, g, kind, g, it, m, -(int64_t)op->tensors[j].bytes);
        }
        L->bwd[u * pr->n_ops + o] = t;
        seq_push(s, k, t);
    }
    if (!s->failed)
        L->bstart[u * s->n_stages + k] = s->seq[k][before];
}

/* The copy engine of a transfer. A GPU's D2D evictions have an engine of their own toward each
 * peer, and its D2D prefetches come back on its engine from that peer (as a host prefetch
 * comes back on its H2D engine), so that they queue only behind its own evictions and
 * prefetches. An eviction on the engine that carries the boundary sends queued behind a send
 * waiting for the receiver's consumer (one buffer per boundary), and a prefetch on the peer's
 * engine toward the owner headed it before it was ready (it waits for the owner's backward)
 * while the peer's own evictions queued behind it; either kept evicted tensors on a GPU while
 * another ran late (gpt-tiny and bert-tiny on 4 emulated 500-550 KiB devices ran out of
 * memory). */
static int transfer_queue(const struct mpress_sched *s, enum mpress_task_kind kind, int src,
                          int dst)
{
    if (dst < 0)
        return src * s->epg + 1;            /* D2H engine of the source */
    if (src < 0)
        return dst * s->epg + 2;            /* H2D engine of the destination */
    if (kind == MPRESS_TASK_EVICT)
        return src * s->epg + 3 + 2 * s->n_gpus + dst;  /* park engine toward dst */
    if (kind == MPRESS_TASK_PREFETCH)
        return dst * s->epg + 3 + s->n_gpus + src;      /* owner's engine from src */
    return src * s->epg + 3 + dst;          /* source's peer engine toward dst */
}

static int socket_of_gpu(const struct mpress_topology *tp, int g)
{
    int sock = tp->gpus[g].socket;
    return sock < 0 || sock >= (tp->n_sockets > 0 ? tp->n_sockets : 1) ? 0 : sock;
}

void sched_step_traffic(const struct mpress_plan *plan, int k,
                        struct mpress_optimizer_traffic *out)
{
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_plan_stage *st = &plan->stages[k];
    double pb = 0, gb = 0, ob = 0;
    for (int o = st->first_op; o <= st->last_op; o++) {
        pb += (double)pr->ops[o].param_bytes;
        gb += (double)pr->ops[o].grad_bytes;
        ob += (double)pr->ops[o].optim_bytes;
    }
    mpress_optimizer_step_traffic(&pr->model, pb, gb, ob, out);
}

/* Optimizer step of stage k after iteration it: on the GPU one compute task; on the host
 * gradients down, a CPU step, weights up. Records the step's first and last task. */
static void lay_step(struct mpress_sched *s, struct layout *L, int k, int it)
{
    const struct mpress_plan *plan = s->plan;
    const struct mpress_plan_stage *st = &plan->stages[k];
    int g = st->gpu, at = it * s->n_stages + k;
    if (!st->optimizer_on_host) {
        int t = new_task(s, MPRESS_TASK_OPTIMIZER, k, it, -1, -1);
        seq_push(s, k, t);
        L->step_first[at] = L->step_last[at] = t;
        return;
    }
    /* What crosses PCIe is the planner's fact too (mpress_optimizer_step_traffic): the
     * gradients down, the updated weights up. */
    struct mpress_optimizer_traffic tr;
    sched_step_traffic(plan, k, &tr);
    int last = seq_last(s, k);
    int d = new_task(s, MPRESS_TASK_GRAD_D2H, k, it, -1, -1);
    int c = new_task(s, MPRESS_TASK_OPTIMIZER, k, it, -1, -1);
    int h = new_task(s, MPRESS_TASK_WEIGHTS_H2D, k, it, -1, -1);
    if (d < 0 || c < 0 || h < 0)
        return;
    struct mpress_task *D = &s->bt[d].pub, *C = &s->bt[c].pub, *H = &s->bt[h].pub;
    D->dst = -1;
    D->bytes = (uint64_t)tr.pcie_down_bytes;
    D->queue = transfer_queue(s, MPRESS_TASK_GRAD_D2H, g, -1);
    C->src = C->dst = -1;
    C->queue = s->n_gpus * s->epg + socket_of_gpu(&plan->topology, g);
    H->src = -1;
    H->bytes = (uint64_t)tr.pcie_up_bytes;
    H->queue = transfer_queue(s, MPRESS_TASK_WEIGHTS_H2D, -1, g);
    add_edge(s, last, d);
    add_edge(s, d, c);
    add_edge(s, c, h);
    L->step_first[at] = d;
    L->step_last[at] = h;
}

/* Order of (forward/backward, micro-batch) slots of stage k. 1F1B (PipeDream-flush): min(S-k-1,
 * M) warm-up forwards, then one forward and one backward alternately, then the remaining
 * backwards; GPipe: all forwards, then all backwards, both in micro-batch order; async: 1F1B run
 * continuously over all iterations (no flush), the step after each M-th backward. */
static void lay_stage(struct mpress_sched *s, struct layout *L, int k)
{
    const struct mpress_plan *plan = s->plan;
    int S = s->n_stages, M = s->M, N = s->N;
    if (plan->schedule == MPRESS_SCHEDULE_ASYNC) {
        int U = N * M, w = S - k - 1 < U ? S - k - 1 : U;
        int nf = 0;
        for (; nf < w; nf++)
            lay_forward(s, L, k, nf / M, nf % M);
        for (int nb = 0; nb < U && !s->failed; nb++) {
            if (nf < U) {
                lay_forward(s, L, k, nf / M, nf % M);
                nf++;
            }
            lay_backward(s, L, k, nb / M, nb % M);
            if (nb % M == M - 1)
                lay_step(s, L, k, nb / M);
        }
        return;
    }
    for (int it = 0; it < N && !s->failed; it++) {
        int first = s->seq_len[k];
        if (plan->schedule == MPRESS_SCHEDULE_GPIPE) {
            for (int m = 0; m < M; m++)
                lay_forward(s, L, k, it, m);
            for (int m = 0; m < M; m++)
                lay_backward(s, L, k, it, m);
        } else {
            int w = S - k - 1 < M ? S - k - 1 : M;
            for (int m = 0; m < w; m++)
                lay_forward(s, L, k, it, m);
            for (int j = 0; j < M - w; j++) {
                lay_forward(s, L, k, it, w + j);
                lay_backward(s, L, k, it, j);
            }
            for (int m = M - w; m < M; m++)
                lay_backward(s, L, k, it, m);
        }
        if (s->failed)
            return;
        /* Synchronous schedules: the next iteration's first op waits for this step. */
        int prev = it > 0 ? L->step_last[(it - 1) * S + k] : -1;
        if (prev >= 0 && first < s->seq_len[k])
            add_edge(s, prev, s->seq[k][first]);
        lay_step(s, L, k, it);
    }
}

static int lay_transfer(struct mpress_sched *s, enum mpress_task_kind kind, int stage, int it,
                        int m, int op, int src, int dst, uint64_t bytes)
{
    int t = new_task(s, kind, stage, it, m, op);
    if (t < 0)
        return -1;
    struct mpress_task *T = &s->bt[t].pub;
    T->src = src;
    T->dst = dst;
    T->bytes = bytes;
    T->queue = transfer_queue(s, kind, src, dst);
    return t;
}

/* One boundary send of `bytes` from GPU src to GPU dst: the sender's buffer is filled when task
 * `from` ends and freed when the copy ends; the receiver's is taken when the copy starts and
 * freed when task `consumer` ends; task `waiter` waits for the copy. */
static int lay_send(struct mpress_sched *s, enum mpress_task_kind kind, int stage, int it,
                    int m, int op, int src, int dst, uint64_t bytes, int from, int consumer,
                    int waiter)
{
    int t = lay_transfer(s, kind, stage, it, m, op, src, dst, bytes);
    if (t < 0 || from < 0 || consumer < 0)
        return -1;
    add_mem(s, &s->bt[from].mem_end, src, MPRESS_MEM_BUFFERS, src, it, m, (int64_t)bytes);
    add_mem(s, &s->bt[t].mem_end, src, MPRESS_MEM_BUFFERS, src, it, m, -(int64_t)bytes);
    add_mem(s, &s->bt[t].mem_start, dst, MPRESS_MEM_BUFFERS, dst, it, m, (int64_t)bytes);
    add_mem(s, &s->bt[consumer].mem_end, dst, MPRESS_MEM_BUFFERS, dst, it, m,
            -(int64_t)bytes);
    add_edge(s, from, t);
    add_edge(s, t, waiter);
    return t;
}

/* Boundary copies, each into a receive buffer that lives until its consumer ends. A copy into
 * a stage waits for the consumer of the same boundary's previous micro-batch (the receiver
 * takes them in schedule order, as a pipeline's blocking receives do), so a receiver holds one
 * buffer per boundary and direction, as the cost model charges: in 1F1B the next stage can
 * return micro-batch u + 1's gradient before this stage has begun u's backward pass, whose
 * recomputes then ran beside two gradient buffers (a plan packed to 1 408 bytes of headroom
 * ran out of memory by timing). */
static void lay_boundaries(struct mpress_sched *s, struct layout *L)
{
    const struct mpress_plan *plan = s->plan;
    const struct mpress_profile *pr = &plan->profile;
    int n_ops = pr->n_ops;
    int sync = plan->schedule != MPRESS_SCHEDULE_ASYNC;
    int sent[3][MPRESS_MAX_GPUS][2]; /* [u % 3][k]: micro-batch u's send of act and gradient */
    for (int u = 0; u < s->N * s->M && !s->failed; u++) {
        int it = u / s->M, m = u % s->M;
        for (int k = 0; k + 1 < s->n_stages; k++) {
            const struct mpress_plan_stage *a = &plan->stages[k], *b = &plan->stages[k + 1];
            uint64_t bytes = pr->ops[a->last_op].output_bytes;
            /* activation k -> k+1 */
            int f_src = L->fwd[u * n_ops + a->last_op], f_dst = L->fwd[u * n_ops + b->first_op];
            int t = lay_send(s, MPRESS_TASK_SEND_ACT, k, it, m, a->last_op, a->gpu, b->gpu,
                             bytes, f_src, f_dst, f_dst);
            if (t >= 0 && u > 0 && L->fwd[(u - 1) * n_ops + b->first_op] >= 0)
                add_edge(s, L->fwd[(u - 1) * n_ops + b->first_op], t);
            sent[u % 3][k][0] = t;
            /* gradient k+1 -> k, the same size. The backward pass of stage k starts (with any
             * recompute it needs first) when the gradient arrives; the buffer lives until the
             * stage's last op is done. */
            int b_src = L->bwd[u * n_ops + b->first_op], b_dst = L->bwd[u * n_ops + a->last_op];
            int b_start = L->bstart[u * s->n_stages + k];
            t = lay_send(s, MPRESS_TASK_SEND_GRAD, k + 1, it, m, b->first_op, b->gpu, a->gpu,
                         bytes, b_src, b_dst, b_start);
            if (t >= 0 && u > 0 && L->bwd[(u - 1) * n_ops + a->last_op] >= 0)
                add_edge(s, L->bwd[(u - 1) * n_ops + a->last_op], t);
            sent[u % 3][k][1] = t;
            /* GPipe and 1F1B: a sender runs a whole pass (a 1F1B warm-up of S - k forwards)
             * ahead of a slower receiver, and each copy waits for the receiver's previous
             * consumer, so its send buffers would pile up (GPipe, gpt-tiny on 8 emulated 650
             * KiB devices: stage 0 ran out of memory on its fourth). The producer of
             * micro-batch u waits until u - 2's copy has left: at most two send buffers,
             * within the cost model's 2 (X_(k-1) + X_k) while the other direction's buffers
             * are empty. The receiver stays busy (u - 1's copy is ready when it wants it). */
            if (sync && m >= 2 && !s->failed) {
                const int *old = sent[(u - 2) % 3][k];
                if (old[0] >= 0 && f_src >= 0)
                    add_edge(s, old[0], f_src);
                if (old[1] >= 0 && b_src >= 0)
                    add_edge(s, old[1], b_src);
            }
        }
    }
}

/* The eviction and prefetch of one part of a swapped tensor for micro-batch u. Returns the
 * prefetch task, or -1. */
static int lay_swap_part(struct mpress_sched *s, struct layout *L, int ai, int q, int u,
                         int *ev_out)
{
    const struct mpress_plan *plan = s->plan;
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_plan_action *a = &plan->actions[ai];
    int k = stage_of_op(plan, a->op), g = plan->stages[k].gpu, n_ops = pr->n_ops;
    int it = u / s->M, m = u % s->M;
    int e = a->evict_after_op;
    int p = a->prefetch_before_op;
    int host = a->action == MPRESS_ACTION_HOST_SWAP;
    int peer = host ? -1 : a->peers[q];
    uint64_t bytes = host ? pr->ops[a->op].tensors[a->tensor].bytes : a->peer_bytes[q];
    int64_t b = (int64_t)bytes;
    int ev = lay_transfer(s, MPRESS_TASK_EVICT, k, it, m, a->op, g, peer, bytes);
    *ev_out = ev;
    if (ev < 0)
        return -1;
    struct sched_btask *E = &s->bt[ev];
    E->pub.action = ai;
    E->pub.part = q;
    add_mem(s, &E->mem_start, g, MPRESS_MEM_ACTIVATIONS, g, it, m, -b);
    add_mem(s, &E->mem_start, g, MPRESS_MEM_INFLIGHT, g, it, m, b);
    add_mem(s, &E->mem_start, peer, MPRESS_MEM_PARKED, g, it, m, b);
    add_mem(s, &E->mem_end, g, MPRESS_MEM_INFLIGHT, g, it, m, -b);
    add_edge(s, L->fwd[u * n_ops + e], ev);

    int pf = lay_transfer(s, MPRESS_TASK_PREFETCH, k, it, m, a->op, peer, g, bytes);
    if (pf < 0)
        return -1;
    struct sched_btask *P = &s->bt[pf];
    P->pub.action = ai;
    P->pub.part = q;
    add_mem(s, &P->mem_start, g, MPRESS_MEM_INFLIGHT, g, it, m, b);
    add_mem(s, &P->mem_end, g, MPRESS_MEM_INFLIGHT, g, it, m, -b);
    add_mem(s, &P->mem_end, g, MPRESS_MEM_WORKING, g, it, m, b);
    add_mem(s, &P->mem_end, peer, MPRESS_MEM_PARKED, g, it, m, -b);
    add_edge(s, ev, pf);
    add_edge(s, pf, L->bwd[u * n_ops + p]);
    /* Not before the previous micro-batch's backward of its op has freed that one's copy: the
     * cost model counts one micro-batch's copy of each swapped tensor. The lookahead issues it
     * after that backward where the slot holds no recomputes; where it does, the lookahead
     * reaches back past it by as many tasks (GPipe's back-to-back backward passes, the 1F1B
     * cool-down: a bert-tiny plan on 8 emulated 700 KiB devices at 3e8 bytes/s held two
     * micro-batches' softmax of the loss and ran out of memory by 6,792 bytes). */
    if (u > 0)
        add_edge(s, L->bwd[(u - 1) * n_ops + a->op], pf);
    if (p != a->op)
        /* brought back for an earlier slot than its op's (a recompute there reads it: the
         * stage input's copy, docs/schedule.md): before the slot's recomputes */
        add_edge(s, pf, s->seq[k][L->bslot_pos[u * n_ops + p]]);
    return pf;
}

/* Evictions leave after the forward of evict_after_op. Prefetches are issued when the compute
 * stream is prefetch_lookahead tasks short of the backward slot of prefetch_before_op (the
 * slot begins with that op's recomputes, if any): lookahead 0 issues it when the task before
 * the slot ends; larger lookaheads reach back into earlier backward ops and, past the start of
 * the backward pass, into the forward that precedes it on the stream. The backward of
 * prefetch_before_op waits for them. A D2D swap is one copy per peer share, each on its own
 * peer engine, so the shares move at once over their own NVLinks. */
static int lay_swaps(struct mpress_sched *s, struct layout *L, struct mpress_error *err)
{
    const struct mpress_plan *plan = s->plan;
    int n_ops = plan->profile.n_ops;
    int *trig = NULL, cap = 0, n = 0, U = s->N * s->M;
    for (int ai = 0; ai < plan->n_actions && !s->failed; ai++) {
        const struct mpress_plan_action *a = &plan->actions[ai];
        if (a->action != MPRESS_ACTION_HOST_SWAP && a->action != MPRESS_ACTION_D2D_SWAP)
            continue;
        int k = stage_of_op(plan, a->op);
        int p = a->prefetch_before_op;
        int parts = a->action == MPRESS_ACTION_HOST_SWAP ? 1 : a->n_peers;
        int n0 = n; /* trig[3 (n0 + u parts + q) ..]: trigger, prefetch, eviction */
        for (int u = 0; u < U; u++)
            for (int q = 0; q < parts; q++) {
                int ev = -1;
                int pf = lay_swap_part(s, L, ai, q, u, &ev);
                if (pf < 0)
                    break;
                if (n == INT_MAX / 3 || sched_grow((void **)&trig, &cap, 3 * n + 3, sizeof(int))) {
                    free(trig);
                    return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
                }
                /* issued when the task prefetch_lookahead places before the slot ends */
                int at = L->bslot_pos[u * n_ops + p] - 1 - plan->prefetch_lookahead;
                trig[3 * n] = at >= 0 ? s->seq[k][at] : -1;
                trig[3 * n + 1] = pf;
                trig[3 * n + 2] = ev;
                n++;
            }
        /* GPipe: a backward pass's prefetch of a tensor also waits until the same tensor of
         * the iteration's last forward has left. The backward pass begins right after that
         * forward, whose last evictions were still on their links while the lookahead brought
         * the first backward's copies of the same ops back beside them (gpt-tiny on 4
         * emulated 650 KiB devices, every tensor host-swapped: the last stage peaked 28 %
         * above its prediction in the simulator, 26 % on the host backend). Once an
         * iteration, so it costs at most one copy's time there. */
        if (plan->schedule != MPRESS_SCHEDULE_GPIPE || s->failed)
            continue;
        for (int u = 0; u < U; u++) {
            int last = (u / s->M) * s->M + s->M - 1;
            for (int q = 0; q < parts && u != last; q++)
                add_edge(s, trig[3 * (n0 + last * parts + q) + 2],
                         trig[3 * (n0 + u * parts + q) + 1]);
        }
    }
    /* Prefetches that one task releases queue on their engine in the order the backward needs
     * them: the highest op first, so the trigger edges go in reverse profile order. */
    for (int i = n - 1; i >= 0; i--)
        add_edge(s, trig[3 * i], trig[3 * i + 1]);
    free(trig);
    return 0;
}

/* Each side of a tied weight sends its gradient to the other once its last backward of the
 * weight's op in the iteration is done and the receiving stage's backward pass is over (its
 * last backward, of its first op, has ended), as Megatron-LM all-reduces the embedding
 * gradients after the pipeline flush: the receive buffer then never meets the pass's
 * activations and working set, only the model states (docs/cost-model.md, "Tied word
 * embedding"). Both steps wait for both copies (a step must not fold the incoming gradient in
 * before its own has left). The receive buffer lives until the step's first task ends. */
static void lay_tied(struct mpress_sched *s, struct layout *L, const struct tied *tw, int n_tied)
{
    const struct mpress_plan *plan = s->plan;
    int n_ops = plan->profile.n_ops, S = s->n_stages, M = s->M;
    for (int it = 0; it < s->N && !s->failed; it++)
        for (int i = 0; i < n_tied; i++) {
            const struct tied *T = &tw[i];
            int u = it * M + M - 1;
            for (int dir = 0; dir < 2; dir++) {
                int ks = dir ? T->stage_b : T->stage_a, kd = dir ? T->stage_a : T->stage_b;
                int os = dir ? T->op_b : T->op_a, od = dir ? T->op_a : T->op_b;
                int src = plan->stages[ks].gpu, dst = plan->stages[kd].gpu;
                int t = lay_transfer(s, MPRESS_TASK_TIED_GRAD, ks, it, -1, os, src, dst,
                                     T->grad_bytes);
                if (t < 0)
                    return;
                s->bt[t].pub.tied_op = od;
                int fold = L->step_first[it * S + kd];
                add_mem(s, &s->bt[t].mem_start, dst, MPRESS_MEM_BUFFERS, dst, it, -1,
                        (int64_t)T->grad_bytes);
                add_mem(s, &s->bt[fold].mem_end, dst, MPRESS_MEM_BUFFERS, dst, it, -1,
                        -(int64_t)T->grad_bytes);
                add_edge(s, L->bwd[u * n_ops + os], t);
                add_edge(s, L->bwd[u * n_ops + plan->stages[kd].first_op], t);
                add_edge(s, t, fold);
                add_edge(s, t, L->step_first[it * S + ks]);
            }
        }
}

/* Model states, stashed weight versions and reserves, resident from the start. */
static void lay_initial_memory(struct mpress_sched *s)
{
    const struct mpress_plan *plan = s->plan;
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_topology *tp = &plan->topology;
    for (int g = 0; g < tp->n_gpus; g++)
        add_mem(s, &s->init_mem, g, MPRESS_MEM_RESERVE, g, -1, -1,
                (int64_t)tp->gpus[g].reserve_bytes);
    for (int k = 0; k < plan->n_stages; k++) {
        const struct mpress_plan_stage *st = &plan->stages[k];
        int64_t pb = 0, gb = 0, ob = 0;
        for (int o = st->first_op; o <= st->last_op; o++) {
            pb += (int64_t)pr->ops[o].param_bytes;
            gb += (int64_t)pr->ops[o].grad_bytes;
            ob += (int64_t)pr->ops[o].optim_bytes;
        }
        /* Async keeps one weight version per micro-batch in flight (PipeDream weight stashing,
         * Narayanan et al., SOSP 2019): S - k versions on stage k, the live one included. */
        int versions = 1;
        if (plan->schedule == MPRESS_SCHEDULE_ASYNC) {
            int U = s->N * s->M;
            versions = s->n_stages - k < U ? s->n_stages - k : U;
        }
        add_mem(s, &s->init_mem, st->gpu, MPRESS_MEM_WEIGHTS, st->gpu, -1, -1, pb * versions);
        add_mem(s, &s->init_mem, st->gpu, MPRESS_MEM_GRADIENTS, st->gpu, -1, -1, gb);
        if (st->optimizer_on_host) {
            /* optimizer states and a landing zone for the gradients in pinned host memory */
            add_mem(s, &s->init_mem, -1, MPRESS_MEM_OPTIMIZER, st->gpu, -1, -1, ob);
            add_mem(s, &s->init_mem, -1, MPRESS_MEM_GRADIENTS, st->gpu, -1, -1, gb);
        } else {
            add_mem(s, &s->init_mem, st->gpu, MPRESS_MEM_OPTIMIZER, st->gpu, -1, -1, ob);
        }
    }
}

static int lower_all(struct mpress_sched *s, struct layout *L, const struct tied *tw, int n_tied,
                     struct mpress_error *err)
{
    lay_initial_memory(s);
    for (int k = 0; k < s->n_stages && !s->failed; k++)
        lay_stage(s, L, k);
    for (int i = 0; i < s->N * s->n_stages && !s->failed; i++)
        s->bt[L->step_last[i]].pub.ends_iteration = 1;
    if (!s->failed)
        lay_boundaries(s, L);
    if (!s->failed && lay_swaps(s, L, err))
        return err && err->code ? err->code : MPRESS_ESYSTEM;
    if (!s->failed && n_tied)
        lay_tied(s, L, tw, n_tied);
    if (s->failed == 2)
        return mpress_error_set(err, MPRESS_EINPUT, "the schedule needs more edges or memory "
                                "changes than it can count (%d)", INT_MAX);
    if (s->failed == 3 || (!s->failed && s->n_tasks != s->expected_tasks))
        return mpress_error_set(err, MPRESS_ESYSTEM, "internal error: the schedule made %d "
                                "tasks, %d were counted", s->n_tasks, s->expected_tasks);
    if (s->failed)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    return 0;
}

int sched_lower(struct mpress_sched *s, void *ctx, struct mpress_error *err)
{
    (void)ctx;
    const struct mpress_plan *plan = s->plan;
    int *action_of = NULL;
    int rc = validate(plan, &action_of, err);
    if (rc) {
        free(action_of);
        return rc;
    }
    struct tied tw[SCHED_MAX_TIED];
    int n_tied = 0;
    if (s->opt.tied_exchange && (rc = find_tied(plan, tw, SCHED_MAX_TIED, &n_tied, err))) {
        free(action_of);
        return rc;
    }
    int total = 0;
    if ((rc = count_tasks(s, n_tied, &total, err))) {
        free(action_of);
        return rc;
    }
    s->expected_tasks = total;
    int S = s->n_stages, N = s->N, U = N * s->M, n_ops = plan->profile.n_ops;
    size_t cells = (size_t)U * (size_t)n_ops;   /* <= total: each cell has a forward task */
    struct layout L = {action_of, NULL, NULL, NULL, NULL, NULL, NULL};
    L.fwd = malloc(cells * sizeof(int));
    L.bwd = malloc(cells * sizeof(int));
    L.bslot_pos = malloc(cells * sizeof(int));
    L.bstart = malloc((size_t)U * (size_t)S * sizeof(int));
    L.step_first = malloc((size_t)N * (size_t)S * sizeof(int));
    L.step_last = malloc((size_t)N * (size_t)S * sizeof(int));
    s->bt = malloc((size_t)total * sizeof(*s->bt));
    s->cap_tasks = total;
    s->seq = calloc((size_t)S, sizeof(int *));
    s->seq_len = calloc((size_t)S, sizeof(int));
    s->seq_cap = calloc((size_t)S, sizeof(int));
    if (!L.fwd || !L.bwd || !L.bslot_pos || !L.bstart || !L.step_first || !L.step_last ||
        !s->bt || !s->seq || !s->seq_len || !s->seq_cap)
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    else {
        for (size_t i = 0; i < cells; i++)
            L.fwd[i] = L.bwd[i] = L.bslot_pos[i] = -1;
        for (size_t i = 0; i < (size_t)U * (size_t)S; i++)
            L.bstart[i] = -1;
        rc = lower_all(s, &L, tw, n_tied, err);
    }
    free(L.fwd);
    free(L.bwd);
    free(L.bslot_pos);
    free(L.bstart);
    free(L.step_first);
    free(L.step_last);
    free(action_of);
    return rc;
}

/* The workspace stands for what an op holds while it runs: the gradients of its inputs and
 * outputs (the tensors' sizes) and its scratch. In the forward, an input the op saves is one
 * of those inputs and also a saved tensor charged from the op's start: a framework saves the
 * input itself, not a copy beside it (the host backend hands it over, docs/runtime.md), so it
 * is counted once. Charging both made the replay of memory-wall plans 2 % over their
 * prediction and out of memory where every run of the host backend fitted. */
int64_t sched_forward_transient(const struct mpress_op *op, int o)
{
    uint64_t inputs_saved = 0;
    for (int j = 0; j < op->n_tensors; j++)
        if (op->tensors[j].recompute_op != o)
            inputs_saved += op->tensors[j].bytes;
    return op->workspace_bytes > inputs_saved ? (int64_t)(op->workspace_bytes - inputs_saved)
                                              : 0;
}

/* The building blocks for other lowerings (lower_dp.c). */
int sched_new_task(struct mpress_sched *s, enum mpress_task_kind kind, int stage, int it, int mb,
                   int op)
{
    return new_task(s, kind, stage, it, mb, op);
}

void sched_add_edge(struct mpress_sched *s, int from, int to)
{
    add_edge(s, from, to);
}

void sched_add_mem(struct mpress_sched *s, int *list, int dev, enum mpress_mem_kind kind,
                   int owner, int it, int mb, int64_t delta)
{
    add_mem(s, list, dev, kind, owner, it, mb, delta);
}

void sched_seq_push(struct mpress_sched *s, int stage, int task)
{
    seq_push(s, stage, task);
}
