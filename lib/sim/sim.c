/* The discrete-event engine behind `mpress run --backend sim`.
 *
 * A plan becomes a DAG of tasks: forward, backward and recompute ops and optimizer steps on each
 * GPU's in-order compute stream; evictions, prefetches, boundary sends and host-optimizer
 * copies on FIFO copy engines (per GPU: D2H, H2D, one peer engine per destination); CPU steps
 * on a FIFO per socket. A running copy is a flow over the link resources it crosses, and every
 * time a flow starts or ends all flow rates are recomputed by progressive filling (max-min fair
 * share, Bertsekas & Gallager, "Data Networks", 2nd ed., section 6.5.2). Memory changes are
 * attached to task starts and ends, applied as one group per event, and logged so that peaks,
 * residents and timelines can be replayed exactly. The rules are written out in
 * docs/simulator.md. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

/* ---- small dynamic arrays ------------------------------------------------------------------ */

static int grow(void **p, int *cap, int need, size_t size)
{
    if (need <= *cap)
        return 0;
    int n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, (size_t)n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int new_task(struct mpress_sim *sim, enum mpress_sim_task_kind kind, int stage, int it,
                    int mb, int op)
{
    if (grow((void **)&sim->tasks, &sim->cap_tasks, sim->n_tasks + 1, sizeof(*sim->tasks))) {
        sim->failed = 1;
        return -1;
    }
    struct sim_task *t = &sim->tasks[sim->n_tasks];
    memset(t, 0, sizeof(*t));
    t->pub.kind = kind;
    t->pub.stage = stage;
    t->pub.iteration = it;
    t->pub.micro_batch = mb;
    t->pub.op = op;
    t->pub.action = -1;
    t->pub.src = t->pub.dst = stage >= 0 ? sim->stage_gpu[stage] : -1;
    t->pub.ready_s = t->pub.start_s = t->pub.end_s = -1;
    t->stream = -1;
    t->queue = -1;
    t->edge_head = t->edge_tail = -1;
    t->mem_start = t->mem_end = -1;
    t->last_dep = -1;
    t->q_next = -1;
    return sim->n_tasks++;
}

static void add_edge(struct mpress_sim *sim, int from, int to)
{
    if (from < 0 || to < 0)
        return;
    if (grow((void **)&sim->edges, &sim->cap_edges, sim->n_edges + 1, sizeof(*sim->edges))) {
        sim->failed = 1;
        return;
    }
    /* Successors are kept in the order they were added, so that copies that become ready at
     * the same moment queue in the order the plan was laid out (boundary sends first). */
    struct sim_task *F = &sim->tasks[from];
    sim->edges[sim->n_edges] = (struct sim_edge){to, -1};
    if (F->edge_tail >= 0)
        sim->edges[F->edge_tail].next = sim->n_edges;
    else
        F->edge_head = sim->n_edges;
    F->edge_tail = sim->n_edges++;
    sim->tasks[to].deps_left++;
}

/* Appends a memory change to a group (a task's start or end list, or the initial list). */
static void add_mem(struct mpress_sim *sim, int *group, int dev, int kind, int owner, int it,
                    int mb, int64_t delta)
{
    if (delta == 0)
        return;
    if (grow((void **)&sim->memops, &sim->cap_memops, sim->n_memops + 1,
             sizeof(*sim->memops))) {
        sim->failed = 1;
        return;
    }
    /* Appended at the tail so a group applies in the order it was written. */
    struct sim_memop *m = &sim->memops[sim->n_memops];
    *m = (struct sim_memop){dev, kind, owner, it, mb, delta, -1};
    if (*group < 0) {
        *group = sim->n_memops++;
        return;
    }
    int i = *group;
    while (sim->memops[i].next >= 0)
        i = sim->memops[i].next;
    sim->memops[i].next = sim->n_memops++;
}

static void seq_push(struct mpress_sim *sim, int stage, int task)
{
    if (task < 0)
        return;
    if (grow((void **)&sim->seq[stage], &sim->seq_cap[stage], sim->seq_len[stage] + 1,
             sizeof(int))) {
        sim->failed = 1;
        return;
    }
    sim->seq[stage][sim->seq_len[stage]++] = task;
    sim->tasks[task].stream = stage;
}

static int seq_last(const struct mpress_sim *sim, int stage)
{
    return sim->seq_len[stage] ? sim->seq[stage][sim->seq_len[stage] - 1] : -1;
}

/* ---- names ---------------------------------------------------------------------------------- */

const char *mpress_sim_mem_kind_name(enum mpress_sim_mem_kind k)
{
    static const char *const names[] = {"weights",  "gradients", "optimizer",
                                        "activations", "parked", "in_flight",
                                        "working",  "buffers",   "reserve"};
    return (unsigned)k < MPRESS_SIM_MEM_KINDS ? names[k] : "?";
}

const char *mpress_sim_task_kind_name(enum mpress_sim_task_kind k)
{
    static const char *const names[] = {"forward",   "backward", "recompute",  "optimizer",
                                        "evict",     "prefetch", "send_act",   "send_grad",
                                        "grad_d2h",  "weights_h2d"};
    return (unsigned)k < MPRESS_SIM_TASK_KINDS ? names[k] : "?";
}

void mpress_sim_options_init(struct mpress_sim_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->iterations = 3;
}

/* ---- links ------------------------------------------------------------------------------------
 * Every link is one resource per direction. Resource families, in index order:
 *   PCIe link of each GPU (up = toward the CPU, down), uplink of each PCIe switch (up, down),
 *   the socket link for each ordered pair of sockets, and NVLink: DIRECT has one resource per
 *   ordered GPU pair (links x per-link bandwidth); NVSWITCH has each GPU's port total out and
 *   in, since any pair runs at full rate and only the GPUs' own ports limit it. */

static int setup_resources(struct mpress_sim *sim, struct mpress_error *err)
{
    const struct mpress_topology *tp = &sim->plan->topology;
    int G = tp->n_gpus, NS = tp->n_switches > 0 ? tp->n_switches : 1;
    int NK = tp->n_sockets > 0 ? tp->n_sockets : 1;
    int nv = tp->fabric == MPRESS_FABRIC_NVSWITCH ? 2 * G : G * G;
    sim->res_pcie = 0;
    sim->res_switch = 2 * G;
    sim->res_socket = sim->res_switch + 2 * NS;
    sim->res_nv = sim->res_socket + NK * NK;
    sim->n_res = sim->res_nv + nv;
    sim->res = calloc((size_t)sim->n_res, sizeof(*sim->res));
    if (!sim->res)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    for (int g = 0; g < G; g++) {
        struct sim_resource *u = &sim->res[2 * g], *d = &sim->res[2 * g + 1];
        snprintf(u->name, sizeof(u->name), "pcie gpu%d up", g);
        snprintf(d->name, sizeof(d->name), "pcie gpu%d down", g);
        u->cap = d->cap = tp->pcie_bytes_per_s;
    }
    for (int s = 0; s < NS; s++) {
        struct sim_resource *u = &sim->res[sim->res_switch + 2 * s];
        struct sim_resource *d = u + 1;
        snprintf(u->name, sizeof(u->name), "switch%d uplink up", s);
        snprintf(d->name, sizeof(d->name), "switch%d uplink down", s);
        u->cap = d->cap = s < tp->n_switches ? tp->switches[s].uplink_bytes_per_s : 0;
    }
    for (int a = 0; a < NK; a++)
        for (int b = 0; b < NK; b++) {
            struct sim_resource *r = &sim->res[sim->res_socket + a * NK + b];
            snprintf(r->name, sizeof(r->name), "socket link %d->%d", a, b);
            r->cap = a == b ? 0 : tp->socket_link_bytes_per_s;
        }
    if (tp->fabric == MPRESS_FABRIC_NVSWITCH) {
        for (int g = 0; g < G; g++) {
            /* the GPU's own ports; where the topology leaves them 0, its widest pair */
            int ports = 0;
            for (int b = 0; b < G; b++)
                if (tp->nvlinks[g][b] > ports)
                    ports = tp->nvlinks[g][b];
            if (tp->gpus[g].nvlink_ports > 0)
                ports = tp->gpus[g].nvlink_ports;
            struct sim_resource *o = &sim->res[sim->res_nv + 2 * g], *i = o + 1;
            snprintf(o->name, sizeof(o->name), "nvswitch gpu%d out", g);
            snprintf(i->name, sizeof(i->name), "nvswitch gpu%d in", g);
            o->cap = i->cap = ports * tp->nvlink_bytes_per_s;
        }
    } else {
        for (int a = 0; a < G; a++)
            for (int b = 0; b < G; b++) {
                struct sim_resource *r = &sim->res[sim->res_nv + a * G + b];
                snprintf(r->name, sizeof(r->name), "nvlink %d->%d", a, b);
                r->cap = a == b ? 0 : tp->nvlinks[a][b] * tp->nvlink_bytes_per_s;
            }
    }
    for (int r = 0; r < sim->n_res; r++) {
        sim->res[r].snap = calloc((size_t)sim->N, sizeof(double));
        if (!sim->res[r].snap)
            return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    return 0;
}

static int switch_of(const struct mpress_topology *tp, int g)
{
    int s = tp->gpus[g].pcie_switch;
    return s >= 0 && s < tp->n_switches ? s : 0;
}

static int socket_of_switch(const struct mpress_topology *tp, int s)
{
    int k = s < tp->n_switches ? tp->switches[s].socket : 0;
    return k >= 0 && k < (tp->n_sockets > 0 ? tp->n_sockets : 1) ? k : 0;
}

/* The resources a copy from src to dst crosses (-1 = host memory, pinned on the socket of the
 * GPU's own switch, so host copies never cross the socket link). Peer copies use NVLink when
 * the pair has it, else PCIe peer-to-peer through the switches (and the socket link between
 * sockets). Returns the path length, or -1 (err filled) when a link on it has no bandwidth. */
static int build_path(struct mpress_sim *sim, int src, int dst, int *path,
                      struct mpress_error *err)
{
    const struct mpress_topology *tp = &sim->plan->topology;
    int n = 0, G = tp->n_gpus, NK = tp->n_sockets > 0 ? tp->n_sockets : 1;
    if (src >= 0 && dst >= 0 && tp->nvlinks[src][dst] > 0) {
        if (tp->fabric == MPRESS_FABRIC_NVSWITCH) {
            path[n++] = sim->res_nv + 2 * src;
            path[n++] = sim->res_nv + 2 * dst + 1;
        } else {
            path[n++] = sim->res_nv + src * G + dst;
        }
    } else if (src >= 0 && dst < 0) {
        path[n++] = sim->res_pcie + 2 * src;
        path[n++] = sim->res_switch + 2 * switch_of(tp, src);
    } else if (src < 0 && dst >= 0) {
        path[n++] = sim->res_switch + 2 * switch_of(tp, dst) + 1;
        path[n++] = sim->res_pcie + 2 * dst + 1;
    } else {
        int sa = switch_of(tp, src), sb = switch_of(tp, dst);
        path[n++] = sim->res_pcie + 2 * src;
        if (sa != sb) {
            int ka = socket_of_switch(tp, sa), kb = socket_of_switch(tp, sb);
            path[n++] = sim->res_switch + 2 * sa;
            if (ka != kb)
                path[n++] = sim->res_socket + ka * NK + kb;
            path[n++] = sim->res_switch + 2 * sb + 1;
        }
        path[n++] = sim->res_pcie + 2 * dst + 1;
    }
    for (int i = 0; i < n; i++)
        if (!(sim->res[path[i]].cap > 0)) {
            char a[16], b[16];
            snprintf(a, sizeof(a), src < 0 ? "host" : "gpu %d", src);
            snprintf(b, sizeof(b), dst < 0 ? "host" : "gpu %d", dst);
            mpress_error_set(err, MPRESS_EINPUT,
                             "a copy from %s to %s crosses '%s', which has no bandwidth in the "
                             "topology", a, b, sim->res[path[i]].name);
            return -1;
        }
    return n;
}

/* ---- plan -> tasks ------------------------------------------------------------------------- */

static int stage_of_op(const struct mpress_plan *plan, int op)
{
    for (int k = 0; k < plan->n_stages; k++)
        if (op >= plan->stages[k].first_op && op <= plan->stages[k].last_op)
            return k;
    return -1;
}

static int validate(const struct mpress_plan *plan, int **action_of, struct mpress_error *err)
{
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_topology *tp = &plan->topology;
    if (plan->n_stages < 1 || !plan->stages)
        return mpress_error_set(err, MPRESS_EINPUT, "the plan has no stages");
    if (plan->micro_batches < 1)
        return mpress_error_set(err, MPRESS_EINPUT, "micro_batches is %d, must be >= 1",
                                plan->micro_batches);
    if (tp->n_gpus < 1 || tp->n_gpus > MPRESS_MAX_GPUS)
        return mpress_error_set(err, MPRESS_EINPUT, "the topology has %d GPUs", tp->n_gpus);
    if (plan->prefetch_lookahead < 0)
        return mpress_error_set(err, MPRESS_EINPUT, "prefetch_lookahead is negative");
    int used[MPRESS_MAX_GPUS] = {0};
    int next = 0;
    for (int k = 0; k < plan->n_stages; k++) {
        const struct mpress_plan_stage *s = &plan->stages[k];
        if (s->first_op != next || s->last_op < s->first_op || s->last_op >= pr->n_ops)
            return mpress_error_set(err, MPRESS_EINPUT,
                                    "stages[%d]: ops %d..%d do not continue the partition at "
                                    "op %d of %d", k, s->first_op, s->last_op, next, pr->n_ops);
        if (s->gpu < 0 || s->gpu >= tp->n_gpus)
            return mpress_error_set(err, MPRESS_EINPUT, "stages[%d]: gpu %d is not in the "
                                    "topology (%d GPUs)", k, s->gpu, tp->n_gpus);
        if (used[s->gpu]++)
            return mpress_error_set(err, MPRESS_EINPUT, "stages[%d]: gpu %d already runs "
                                    "another stage; the simulator runs one stage per GPU", k,
                                    s->gpu);
        next = s->last_op + 1;
    }
    if (next != pr->n_ops)
        return mpress_error_set(err, MPRESS_EINPUT, "the stages cover ops 0..%d of %d", next - 1,
                                pr->n_ops);
    /* action_of[op][tensor] = action index or -1 (keep). */
    int *base = NULL;
    int total = 0;
    for (int o = 0; o < pr->n_ops; o++)
        total += pr->ops[o].n_tensors;
    *action_of = base = malloc(((size_t)total + (size_t)pr->n_ops + 1) * sizeof(int));
    if (!base)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    /* first n_ops entries: offset of each op's tensors */
    int off = pr->n_ops;
    for (int o = 0; o < pr->n_ops; o++) {
        base[o] = off;
        for (int j = 0; j < pr->ops[o].n_tensors; j++)
            base[off + j] = -1;
        off += pr->ops[o].n_tensors;
    }
    for (int i = 0; i < plan->n_actions; i++) {
        const struct mpress_plan_action *a = &plan->actions[i];
        if (a->op < 0 || a->op >= pr->n_ops || a->tensor < 0 ||
            a->tensor >= pr->ops[a->op].n_tensors)
            return mpress_error_set(err, MPRESS_EINPUT, "actions[%d]: op %d tensor %d is not in "
                                    "the profile", i, a->op, a->tensor);
        int *slot = &base[base[a->op] + a->tensor];
        if (*slot >= 0)
            return mpress_error_set(err, MPRESS_EINPUT, "actions[%d]: tensor %s already has "
                                    "actions[%d]", i, pr->ops[a->op].tensors[a->tensor].id,
                                    *slot);
        *slot = i;
        if (a->action == MPRESS_ACTION_KEEP)
            continue;
        const struct mpress_plan_stage *s = &plan->stages[stage_of_op(plan, a->op)];
        int e = a->evict_after_op < 0 ? a->op : a->evict_after_op;
        int p = a->prefetch_before_op < 0 ? a->op : a->prefetch_before_op;
        if (e < a->op || e > s->last_op)
            return mpress_error_set(err, MPRESS_EINPUT, "actions[%d]: evict_after_op %d is "
                                    "not between its op %d and the end of its stage (op %d)",
                                    i, e, a->op, s->last_op);
        if (p < a->op || p > s->last_op)
            return mpress_error_set(err, MPRESS_EINPUT, "actions[%d]: prefetch_before_op %d "
                                    "is not between its op %d and the end of its stage (op %d)",
                                    i, p, a->op, s->last_op);
        if (a->action == MPRESS_ACTION_D2D_SWAP) {
            uint64_t sum = 0;
            if (a->n_peers < 1 || a->n_peers > MPRESS_MAX_GPUS)
                return mpress_error_set(err, MPRESS_EINPUT, "actions[%d]: d2d_swap with %d "
                                        "peers", i, a->n_peers);
            for (int q = 0; q < a->n_peers; q++) {
                if (a->peers[q] < 0 || a->peers[q] >= tp->n_gpus || a->peers[q] == s->gpu)
                    return mpress_error_set(err, MPRESS_EINPUT, "actions[%d]: peer %d is not "
                                            "another GPU of the topology", i, a->peers[q]);
                sum += a->peer_bytes[q];
            }
            if (sum != pr->ops[a->op].tensors[a->tensor].bytes)
                return mpress_error_set(err, MPRESS_EINPUT, "actions[%d]: peer shares sum to "
                                        "%llu bytes, the tensor has %llu", i,
                                        (unsigned long long)sum,
                                        (unsigned long long)pr->ops[a->op].tensors[a->tensor].bytes);
        }
    }
    return 0;
}

/* Per (global micro-batch, op): task ids, built as the streams are laid out. */
struct layout {
    int *fwd, *bwd, *bslot_pos;  /* [u * n_ops + op]; bslot_pos: stream index of the slot */
    int *bstart;                 /* [u * n_stages + k]: first task of the backward pass */
};

/* Compute tasks of one forward pass of stage k for micro-batch m of iteration it. */
static void lay_forward(struct mpress_sim *sim, struct layout *L, const int *action_of, int k,
                        int it, int m)
{
    const struct mpress_plan *plan = sim->plan;
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_plan_stage *s = &plan->stages[k];
    int g = s->gpu, u = it * sim->M + m;
    for (int o = s->first_op; o <= s->last_op; o++) {
        const struct mpress_op *op = &pr->ops[o];
        int t = new_task(sim, MPRESS_SIM_FORWARD, k, it, m, o);
        if (t < 0)
            return;
        struct sim_task *T = &sim->tasks[t];
        T->dur = op->fwd_s;
        add_mem(sim, &T->mem_start, g, MPRESS_SIM_MEM_WORKING, g, -1, -1,
                (int64_t)op->workspace_bytes);
        for (int j = 0; j < op->n_tensors; j++)
            add_mem(sim, &T->mem_start, g, MPRESS_SIM_MEM_ACTIVATIONS, g, it, m,
                    (int64_t)op->tensors[j].bytes);
        add_mem(sim, &T->mem_end, g, MPRESS_SIM_MEM_WORKING, g, -1, -1,
                -(int64_t)op->workspace_bytes);
        L->fwd[u * pr->n_ops + o] = t;
        seq_push(sim, k, t);
    }
    /* Recompute drops the tensor after the forward of its last use. */
    for (int o = s->first_op; o <= s->last_op; o++)
        for (int j = 0; j < pr->ops[o].n_tensors; j++) {
            int ai = action_of[action_of[o] + j];
            if (ai < 0 || plan->actions[ai].action != MPRESS_ACTION_RECOMPUTE)
                continue;
            const struct mpress_plan_action *a = &plan->actions[ai];
            int e = a->evict_after_op < 0 ? a->op : a->evict_after_op;
            struct sim_task *E = &sim->tasks[L->fwd[u * pr->n_ops + e]];
            add_mem(sim, &E->mem_end, g, MPRESS_SIM_MEM_ACTIVATIONS, g, it, m,
                    -(int64_t)pr->ops[o].tensors[j].bytes);
        }
}

static void lay_backward(struct mpress_sim *sim, struct layout *L, const int *action_of, int k,
                         int it, int m)
{
    const struct mpress_plan *plan = sim->plan;
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_plan_stage *s = &plan->stages[k];
    int g = s->gpu, u = it * sim->M + m;
    int before = sim->seq_len[k];
    for (int o = s->last_op; o >= s->first_op; o--) {
        L->bslot_pos[u * pr->n_ops + o] = sim->seq_len[k];
        /* Recompute right before the backward that first needs the tensor. */
        for (int o2 = s->first_op; o2 <= o; o2++)
            for (int j = 0; j < pr->ops[o2].n_tensors; j++) {
                int ai = action_of[action_of[o2] + j];
                if (ai < 0 || plan->actions[ai].action != MPRESS_ACTION_RECOMPUTE)
                    continue;
                const struct mpress_plan_action *a = &plan->actions[ai];
                int p = a->prefetch_before_op < 0 ? a->op : a->prefetch_before_op;
                if (p != o)
                    continue;
                const struct mpress_saved_tensor *ts = &pr->ops[o2].tensors[j];
                int t = new_task(sim, MPRESS_SIM_RECOMPUTE, k, it, m, o2);
                if (t < 0)
                    return;
                sim->tasks[t].pub.action = ai;
                sim->tasks[t].dur = ts->recompute_s;
                add_mem(sim, &sim->tasks[t].mem_start, g, MPRESS_SIM_MEM_WORKING, g, it, m,
                        (int64_t)ts->bytes);
                seq_push(sim, k, t);
            }
        const struct mpress_op *op = &pr->ops[o];
        int t = new_task(sim, MPRESS_SIM_BACKWARD, k, it, m, o);
        if (t < 0)
            return;
        struct sim_task *T = &sim->tasks[t];
        T->dur = op->bwd_s;
        add_mem(sim, &T->mem_start, g, MPRESS_SIM_MEM_WORKING, g, -1, -1,
                (int64_t)op->workspace_bytes);
        add_mem(sim, &T->mem_end, g, MPRESS_SIM_MEM_WORKING, g, -1, -1,
                -(int64_t)op->workspace_bytes);
        /* The saved tensors of op die with its backward. */
        for (int j = 0; j < op->n_tensors; j++) {
            int ai = action_of[action_of[o] + j];
            int kind = ai < 0 || plan->actions[ai].action == MPRESS_ACTION_KEEP
                           ? MPRESS_SIM_MEM_ACTIVATIONS
                           : MPRESS_SIM_MEM_WORKING;
            add_mem(sim, &T->mem_end, g, kind, g, it,
                    m, -(int64_t)op->tensors[j].bytes);
        }
        L->bwd[u * pr->n_ops + o] = t;
        seq_push(sim, k, t);
    }
    L->bstart[u * sim->n_stages + k] = sim->seq[k][before];
}

/* Optimizer step of stage k after iteration it. On the GPU it is a compute task; on the host it
 * is gradients down, a CPU step, weights up. An elementwise Adam/SGD step is memory-bound: it
 * reads the gradients and optimizer states and writes the states and weights once, so it takes
 * (grad + 2 x optim + param bytes) / memory bandwidth (HBM for the GPU, host memory for the
 * CPU). Returns the task that completes the step. */
static int lay_step(struct mpress_sim *sim, int k, int it, struct mpress_error *err)
{
    const struct mpress_plan *plan = sim->plan;
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_topology *tp = &plan->topology;
    const struct mpress_plan_stage *s = &plan->stages[k];
    int g = s->gpu;
    double pb = 0, gb = 0, ob = 0;
    for (int o = s->first_op; o <= s->last_op; o++) {
        pb += (double)pr->ops[o].param_bytes;
        gb += (double)pr->ops[o].grad_bytes;
        ob += (double)pr->ops[o].optim_bytes;
    }
    double touched = gb + 2 * ob + pb;
    if (!s->optimizer_on_host) {
        int t = new_task(sim, MPRESS_SIM_OPTIMIZER, k, it, -1, -1);
        if (t < 0)
            return -1;
        double bw = tp->gpus[g].hbm_bytes_per_s;
        if (touched > 0 && !(bw > 0)) {
            mpress_error_set(err, MPRESS_EINPUT, "gpu %d has no HBM bandwidth for its "
                             "optimizer step", g);
            return -1;
        }
        sim->tasks[t].dur = touched > 0 ? touched / bw : 0;
        seq_push(sim, k, t);
        return t;
    }
    int last = seq_last(sim, k);
    int d = new_task(sim, MPRESS_SIM_GRAD_D2H, k, it, -1, -1);
    int c = new_task(sim, MPRESS_SIM_OPTIMIZER, k, it, -1, -1);
    int h = new_task(sim, MPRESS_SIM_WEIGHTS_H2D, k, it, -1, -1);
    if (d < 0 || c < 0 || h < 0)
        return -1;
    struct sim_task *D = &sim->tasks[d], *C = &sim->tasks[c], *H = &sim->tasks[h];
    D->pub.dst = -1;
    D->pub.bytes = gb;
    D->queue = g * sim->engines_per_gpu + 0;
    if ((D->n_path = build_path(sim, g, -1, D->path, err)) < 0)
        return -1;
    int sock = tp->gpus[g].socket;
    if (sock < 0 || sock >= (tp->n_sockets > 0 ? tp->n_sockets : 1))
        sock = 0;
    C->pub.src = C->pub.dst = -1;
    C->queue = sim->cpu_queue0 + sock;
    double hbw = tp->host_memory_bytes_per_s;
    if (touched > 0 && !(hbw > 0)) {
        mpress_error_set(err, MPRESS_EINPUT, "the host has no memory bandwidth for the CPU "
                         "optimizer step of stage %d", k);
        return -1;
    }
    C->dur = touched > 0 ? touched / hbw : 0;
    H->pub.src = -1;
    H->pub.bytes = pb;
    H->queue = g * sim->engines_per_gpu + 1;
    if ((H->n_path = build_path(sim, -1, g, H->path, err)) < 0)
        return -1;
    add_edge(sim, last, d);
    add_edge(sim, d, c);
    add_edge(sim, c, h);
    return h;
}

/* Order of (forward/backward, micro-batch) slots of stage k. 1F1B (PipeDream-flush): min(S-k-1,
 * M) warm-up forwards, then one forward and one backward alternately, then the remaining
 * backwards; GPipe: all forwards, then all backwards, both in micro-batch order; async: 1F1B run
 * continuously over all iterations (no flush), the step after each M-th backward. */
static int lay_stage(struct mpress_sim *sim, struct layout *L, const int *action_of, int k,
                     int *step_task, struct mpress_error *err)
{
    const struct mpress_plan *plan = sim->plan;
    int S = sim->n_stages, M = sim->M, N = sim->N;
    if (plan->schedule == MPRESS_SCHEDULE_ASYNC) {
        int U = N * M, w = S - k - 1 < U ? S - k - 1 : U;
        int nf = 0;
        while (nf < w) {
            lay_forward(sim, L, action_of, k, nf / M, nf % M);
            nf++;
        }
        for (int nb = 0; nb < U; nb++) {
            if (nf < U) {
                lay_forward(sim, L, action_of, k, nf / M, nf % M);
                nf++;
            }
            lay_backward(sim, L, action_of, k, nb / M, nb % M);
            if (nb % M == M - 1) {
                int it = nb / M;
                step_task[it * S + k] = lay_step(sim, k, it, err);
                if (step_task[it * S + k] < 0)
                    return -1;
            }
        }
        return sim->failed ? -1 : 0;
    }
    for (int it = 0; it < N; it++) {
        int first = sim->seq_len[k];
        if (plan->schedule == MPRESS_SCHEDULE_GPIPE) {
            for (int m = 0; m < M; m++)
                lay_forward(sim, L, action_of, k, it, m);
            for (int m = 0; m < M; m++)
                lay_backward(sim, L, action_of, k, it, m);
        } else {
            int w = S - k - 1 < M ? S - k - 1 : M;
            for (int m = 0; m < w; m++)
                lay_forward(sim, L, action_of, k, it, m);
            for (int j = 0; j < M - w; j++) {
                lay_forward(sim, L, action_of, k, it, w + j);
                lay_backward(sim, L, action_of, k, it, j);
            }
            for (int m = M - w; m < M; m++)
                lay_backward(sim, L, action_of, k, it, m);
        }
        /* Synchronous schedules: the next iteration's first op waits for this step. */
        if (it > 0 && step_task[(it - 1) * S + k] >= 0 && first < sim->seq_len[k])
            add_edge(sim, step_task[(it - 1) * S + k], sim->seq[k][first]);
        step_task[it * S + k] = lay_step(sim, k, it, err);
        if (step_task[it * S + k] < 0)
            return -1;
    }
    return sim->failed ? -1 : 0;
}

static int lay_transfer(struct mpress_sim *sim, enum mpress_sim_task_kind kind, int stage,
                        int it, int m, int op, int src, int dst, double bytes,
                        struct mpress_error *err)
{
    int t = new_task(sim, kind, stage, it, m, op);
    if (t < 0)
        return -1;
    struct sim_task *T = &sim->tasks[t];
    T->pub.src = src;
    T->pub.dst = dst;
    T->pub.bytes = bytes;
    int epg = sim->engines_per_gpu;
    if (dst < 0)
        T->queue = src * epg + 0;              /* D2H engine of the source */
    else if (src < 0)
        T->queue = dst * epg + 1;              /* H2D engine of the destination */
    else
        T->queue = src * epg + 2 + dst;        /* source's peer engine toward dst */
    T->n_path = build_path(sim, src, dst, T->path, err);
    return T->n_path < 0 ? -1 : t;
}

/* One boundary send of `bytes` from GPU src to GPU dst: the sender's buffer is filled when task
 * `from` ends and freed when the copy ends; the receiver's is taken when the copy starts and
 * freed when task `consumer` ends; task `waiter` waits for the copy. */
static int lay_send(struct mpress_sim *sim, enum mpress_sim_task_kind kind, int stage, int it,
                    int m, int op, int src, int dst, uint64_t bytes, int from, int consumer,
                    int waiter, struct mpress_error *err)
{
    int t = lay_transfer(sim, kind, stage, it, m, op, src, dst, (double)bytes, err);
    if (t < 0)
        return -1;
    add_mem(sim, &sim->tasks[from].mem_end, src, MPRESS_SIM_MEM_BUFFERS, src, it, m,
            (int64_t)bytes);
    add_mem(sim, &sim->tasks[t].mem_end, src, MPRESS_SIM_MEM_BUFFERS, src, it, m,
            -(int64_t)bytes);
    add_mem(sim, &sim->tasks[t].mem_start, dst, MPRESS_SIM_MEM_BUFFERS, dst, it, m,
            (int64_t)bytes);
    add_mem(sim, &sim->tasks[consumer].mem_end, dst, MPRESS_SIM_MEM_BUFFERS, dst, it, m,
            -(int64_t)bytes);
    add_edge(sim, from, t);
    add_edge(sim, t, waiter);
    return 0;
}

static int lay_boundaries(struct mpress_sim *sim, struct layout *L, struct mpress_error *err)
{
    const struct mpress_plan *plan = sim->plan;
    const struct mpress_profile *pr = &plan->profile;
    int n_ops = pr->n_ops;
    for (int u = 0; u < sim->N * sim->M; u++) {
        int it = u / sim->M, m = u % sim->M;
        for (int k = 0; k + 1 < sim->n_stages; k++) {
            const struct mpress_plan_stage *a = &plan->stages[k], *b = &plan->stages[k + 1];
            uint64_t bytes = pr->ops[a->last_op].output_bytes;
            /* activation k -> k+1 */
            int f_src = L->fwd[u * n_ops + a->last_op], f_dst = L->fwd[u * n_ops + b->first_op];
            if (lay_send(sim, MPRESS_SIM_SEND_ACT, k, it, m, a->last_op, a->gpu, b->gpu, bytes,
                         f_src, f_dst, f_dst, err))
                return -1;
            /* gradient k+1 -> k, the same size. The backward pass of stage k starts (with any
             * recompute it needs first) when the gradient arrives; the buffer lives until the
             * stage's last op is done. */
            int b_src = L->bwd[u * n_ops + b->first_op], b_dst = L->bwd[u * n_ops + a->last_op];
            int b_start = L->bstart[u * sim->n_stages + k];
            if (lay_send(sim, MPRESS_SIM_SEND_GRAD, k + 1, it, m, b->first_op, b->gpu, a->gpu,
                         bytes, b_src, b_dst, b_start, err))
                return -1;
        }
    }
    return sim->failed ? -1 : 0;
}

/* Evictions leave after the forward of evict_after_op. Prefetches are issued when the compute
 * stream is prefetch_lookahead tasks short of the backward slot of prefetch_before_op (the
 * slot begins with that op's recomputes, if any): lookahead 0 issues it when the task before
 * the slot ends; larger lookaheads reach back into earlier backward ops and, past the start of
 * the backward pass, into the forward that precedes it on the stream. The backward of
 * prefetch_before_op waits for them. A D2D swap is one copy per peer share, each on its own
 * peer engine, so the shares move at once over their own NVLinks. */
static int lay_swaps(struct mpress_sim *sim, struct layout *L, struct mpress_error *err)
{
    const struct mpress_plan *plan = sim->plan;
    const struct mpress_profile *pr = &plan->profile;
    int n_ops = pr->n_ops, H = sim->n_gpus;
    int *trig_pairs = NULL, cap_pairs = 0, n_pairs = 0;
    for (int ai = 0; ai < plan->n_actions; ai++) {
        const struct mpress_plan_action *a = &plan->actions[ai];
        if (a->action != MPRESS_ACTION_HOST_SWAP && a->action != MPRESS_ACTION_D2D_SWAP)
            continue;
        int k = stage_of_op(plan, a->op);
        const struct mpress_plan_stage *s = &plan->stages[k];
        int g = s->gpu;
        int e = a->evict_after_op < 0 ? a->op : a->evict_after_op;
        int p = a->prefetch_before_op < 0 ? a->op : a->prefetch_before_op;
        int parts = a->action == MPRESS_ACTION_HOST_SWAP ? 1 : a->n_peers;
        for (int u = 0; u < sim->N * sim->M; u++) {
            int it = u / sim->M, m = u % sim->M;
            for (int q = 0; q < parts; q++) {
                int peer = a->action == MPRESS_ACTION_HOST_SWAP ? -1 : a->peers[q];
                uint64_t bytes = a->action == MPRESS_ACTION_HOST_SWAP
                                     ? pr->ops[a->op].tensors[a->tensor].bytes
                                     : a->peer_bytes[q];
                int pdev = peer < 0 ? H : peer;
                int ev = lay_transfer(sim, MPRESS_SIM_EVICT, k, it, m, a->op, g, peer,
                                      (double)bytes, err);
                if (ev < 0) {
                    free(trig_pairs);
                    return -1;
                }
                struct sim_task *E = &sim->tasks[ev];
                E->pub.action = ai;
                E->pub.part = q;
                add_mem(sim, &E->mem_start, g, MPRESS_SIM_MEM_ACTIVATIONS, g, it, m,
                        -(int64_t)bytes);
                add_mem(sim, &E->mem_start, g, MPRESS_SIM_MEM_INFLIGHT, g, it, m,
                        (int64_t)bytes);
                add_mem(sim, &E->mem_start, pdev, MPRESS_SIM_MEM_PARKED, g, it, m,
                        (int64_t)bytes);
                add_mem(sim, &E->mem_end, g, MPRESS_SIM_MEM_INFLIGHT, g, it, m,
                        -(int64_t)bytes);
                add_edge(sim, L->fwd[u * n_ops + e], ev);

                int pf = lay_transfer(sim, MPRESS_SIM_PREFETCH, k, it, m, a->op, peer, g,
                                      (double)bytes, err);
                if (pf < 0) {
                    free(trig_pairs);
                    return -1;
                }
                struct sim_task *P = &sim->tasks[pf];
                P->pub.action = ai;
                P->pub.part = q;
                add_mem(sim, &P->mem_start, g, MPRESS_SIM_MEM_INFLIGHT, g, it, m,
                        (int64_t)bytes);
                add_mem(sim, &P->mem_end, g, MPRESS_SIM_MEM_INFLIGHT, g, it, m,
                        -(int64_t)bytes);
                add_mem(sim, &P->mem_end, g, MPRESS_SIM_MEM_WORKING, g, it, m, (int64_t)bytes);
                add_mem(sim, &P->mem_end, pdev, MPRESS_SIM_MEM_PARKED, g, it, m,
                        -(int64_t)bytes);
                add_edge(sim, ev, pf);
                add_edge(sim, pf, L->bwd[u * n_ops + p]);
                if (grow((void **)&trig_pairs, &cap_pairs, 2 * n_pairs + 2, sizeof(int))) {
                    free(trig_pairs);
                    return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
                }
                /* issued when the task prefetch_lookahead places before the slot ends */
                int at = L->bslot_pos[u * n_ops + p] - 1 - plan->prefetch_lookahead;
                trig_pairs[2 * n_pairs] = at >= 0 ? sim->seq[k][at] : -1;
                trig_pairs[2 * n_pairs + 1] = pf;
                n_pairs++;
            }
        }
    }
    /* Prefetches that one task releases queue on their engine in the order the backward needs
     * them: the highest op first, so the trigger edges go in reverse profile order. */
    for (int i = n_pairs - 1; i >= 0; i--)
        add_edge(sim, trig_pairs[2 * i], trig_pairs[2 * i + 1]);
    free(trig_pairs);
    return sim->failed ? -1 : 0;
}

/* Model states, stashed weight versions and reserves, resident from the start. */
static void lay_initial_memory(struct mpress_sim *sim)
{
    const struct mpress_plan *plan = sim->plan;
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_topology *tp = &plan->topology;
    int H = sim->n_gpus;
    for (int g = 0; g < tp->n_gpus; g++) {
        sim->capacity[g] = tp->gpus[g].memory_bytes;
        add_mem(sim, &sim->init_mem, g, MPRESS_SIM_MEM_RESERVE, g, -1, -1,
                (int64_t)tp->gpus[g].reserve_bytes);
    }
    sim->capacity[H] = tp->host_memory_bytes;
    for (int k = 0; k < plan->n_stages; k++) {
        const struct mpress_plan_stage *s = &plan->stages[k];
        int64_t pb = 0, gb = 0, ob = 0;
        for (int o = s->first_op; o <= s->last_op; o++) {
            pb += (int64_t)pr->ops[o].param_bytes;
            gb += (int64_t)pr->ops[o].grad_bytes;
            ob += (int64_t)pr->ops[o].optim_bytes;
        }
        /* Async keeps one weight version per micro-batch in flight (PipeDream weight stashing,
         * Narayanan et al., SOSP 2019): S - k versions on stage k, the live one included. */
        int versions = 1;
        if (plan->schedule == MPRESS_SCHEDULE_ASYNC) {
            int U = sim->N * sim->M;
            versions = sim->n_stages - k < U ? sim->n_stages - k : U;
        }
        add_mem(sim, &sim->init_mem, s->gpu, MPRESS_SIM_MEM_WEIGHTS, s->gpu, -1, -1,
                pb * versions);
        add_mem(sim, &sim->init_mem, s->gpu, MPRESS_SIM_MEM_GRADIENTS, s->gpu, -1, -1, gb);
        if (s->optimizer_on_host) {
            /* optimizer states and a landing zone for the gradients in pinned host memory */
            add_mem(sim, &sim->init_mem, H, MPRESS_SIM_MEM_OPTIMIZER, s->gpu, -1, -1, ob);
            add_mem(sim, &sim->init_mem, H, MPRESS_SIM_MEM_GRADIENTS, s->gpu, -1, -1, gb);
        } else {
            add_mem(sim, &sim->init_mem, s->gpu, MPRESS_SIM_MEM_OPTIMIZER, s->gpu, -1, -1, ob);
        }
    }
}

/* ---- the event loop ------------------------------------------------------------------------ */

static void heap_push(struct mpress_sim *sim, double t, int task)
{
    if (grow((void **)&sim->heap, &sim->cap_heap, sim->n_heap + 1, sizeof(*sim->heap))) {
        sim->failed = 1;
        return;
    }
    int i = sim->n_heap++;
    struct sim_ev ev = {t, sim->ev_seq++, task};
    while (i > 0) {
        int p = (i - 1) / 2;
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
    int i = 0, n = sim->n_heap;
    for (;;) {
        int c = 2 * i + 1;
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
    if (sim->n_log + 1 > sim->cap_log) {
        long n = sim->cap_log ? sim->cap_log * 2 : 1024;
        void *q = realloc(sim->log, (size_t)n * sizeof(*sim->log));
        if (!q) {
            sim->failed = 1;
            return;
        }
        sim->log = q;
        sim->cap_log = n;
    }
    sim->log[sim->n_log++] = (struct sim_log){sim->now, task, phase};
}

static void apply_group(struct mpress_sim *sim, int head, int task, int phase)
{
    if (head < 0)
        return;
    log_group(sim, task, phase);
    for (int i = head; i >= 0; i = sim->memops[i].next) {
        const struct sim_memop *m = &sim->memops[i];
        sim->cur[m->dev][m->kind] += (uint64_t)m->delta;
        sim->total[m->dev] += (uint64_t)m->delta;
    }
    for (int i = head; i >= 0; i = sim->memops[i].next) {
        int d = sim->memops[i].dev;
        struct mpress_sim_gpu *G = d < sim->n_gpus ? &sim->summary.gpus[d] : NULL;
        uint64_t tot = sim->total[d];
        if (d == sim->n_gpus) {
            if (tot > sim->summary.host_peak)
                sim->summary.host_peak = tot;
            continue;
        }
        if (tot > G->peak) {
            G->peak = tot;
            G->peak_time_s = sim->now;
            memcpy(G->at_peak, sim->cur[d], sizeof(G->at_peak));
            sim->peak_log[d] = sim->n_log - 1;
        }
        if (tot > G->capacity && !G->out_of_memory) {
            G->out_of_memory = 1;
            G->oom_time_s = sim->now;
        }
    }
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
    apply_group(sim, T->mem_start, t, 0);
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
            case MPRESS_SIM_EVICT:
            case MPRESS_SIM_PREFETCH:
                sim->stall_swap[g * sim->N + it] += st;
                break;
            case MPRESS_SIM_SEND_ACT:
            case MPRESS_SIM_SEND_GRAD:
                sim->stall_boundary[g * sim->N + it] += st;
                break;
            case MPRESS_SIM_WEIGHTS_H2D:
            case MPRESS_SIM_GRAD_D2H:
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
    for (int m = sim->tasks[t].mem_start; m >= 0; m = sim->memops[m].next)
        if (sim->memops[m].dev == dev)
            need += sim->memops[m].delta;
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
    if (T->pub.kind == MPRESS_SIM_EVICT)
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
    apply_group(sim, T->mem_end, t, 1);
    if (T->ends_iteration) {
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
    if (T->pub.kind == MPRESS_SIM_EVICT)
        sim->pending_evict[T->pub.src]--;
    for (int e = T->edge_head; e >= 0; e = sim->edges[e].next) {
        struct sim_task *S = &sim->tasks[sim->edges[e].to];
        S->last_dep = t;
        if (--S->deps_left == 0)
            make_ready(sim, sim->edges[e].to);
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

static void rate_log(struct mpress_sim *sim, int r, double rate)
{
    if (grow((void **)&sim->rates, &sim->cap_rates, sim->n_rates + 1, sizeof(*sim->rates))) {
        sim->failed = 1;
        return;
    }
    sim->rates[sim->n_rates++] = (struct sim_rate){sim->now, r, rate};
}

/* Max-min fair rates by progressive filling: repeatedly find the link whose remaining
 * capacity divided among its unfixed flows is smallest, fix those flows at that share, and
 * take their rate off every link they cross. */
static void compute_rates(struct mpress_sim *sim)
{
    int n = sim->n_active;
    for (int i = 0; i < n; i++) {
        struct sim_task *T = &sim->tasks[sim->active[i]];
        T->rate = -1;
        for (int j = 0; j < T->n_path; j++) {
            sim->res[T->path[j]].rem = sim->res[T->path[j]].cap;
            sim->res[T->path[j]].cnt = 0;
        }
    }
    for (int i = 0; i < n; i++) {
        struct sim_task *T = &sim->tasks[sim->active[i]];
        for (int j = 0; j < T->n_path; j++)
            sim->res[T->path[j]].cnt++;
    }
    int left = n;
    while (left > 0) {
        double best = DBL_MAX;
        for (int i = 0; i < n; i++) {
            struct sim_task *T = &sim->tasks[sim->active[i]];
            if (T->rate >= 0)
                continue;
            for (int j = 0; j < T->n_path; j++) {
                struct sim_resource *r = &sim->res[T->path[j]];
                double share = r->rem / r->cnt;
                if (share < best)
                    best = share;
            }
        }
        if (best < 0)
            best = 0;
        /* Fix every flow that crosses a bottleneck link, then update the links. */
        int *fixed = sim->scratch, nf = 0;
        for (int i = 0; i < n; i++) {
            struct sim_task *T = &sim->tasks[sim->active[i]];
            if (T->rate >= 0)
                continue;
            for (int j = 0; j < T->n_path; j++) {
                struct sim_resource *r = &sim->res[T->path[j]];
                if (r->rem / r->cnt <= best * (1 + 1e-12)) {
                    fixed[nf++] = sim->active[i];
                    break;
                }
            }
        }
        for (int f = 0; f < nf; f++) {
            struct sim_task *T = &sim->tasks[fixed[f]];
            T->rate = best;
            for (int j = 0; j < T->n_path; j++) {
                struct sim_resource *r = &sim->res[T->path[j]];
                r->rem -= best;
                if (r->rem < 0)
                    r->rem = 0;
                r->cnt--;
            }
        }
        left -= nf;
    }
    /* New link rates; each change is logged for the trace's counter tracks. The links that
     * can change are those now carrying flows and those that carried flows before. */
    int nt = 0;
    for (int i = 0; i < sim->n_busy_res; i++) {
        int r = sim->busy_res[i];
        sim->res[r].new_rate = 0;
        sim->res[r].mark = 1;
        sim->scratch[nt++] = r;
    }
    for (int i = 0; i < n; i++) {
        struct sim_task *T = &sim->tasks[sim->active[i]];
        for (int j = 0; j < T->n_path; j++) {
            struct sim_resource *r = &sim->res[T->path[j]];
            if (!r->mark) {
                r->mark = 1;
                r->new_rate = 0;
                sim->scratch[nt++] = T->path[j];
            }
        }
    }
    for (int i = 0; i < n; i++) {
        struct sim_task *T = &sim->tasks[sim->active[i]];
        for (int j = 0; j < T->n_path; j++)
            sim->res[T->path[j]].new_rate += T->rate;
    }
    sim->n_busy_res = 0;
    for (int i = 0; i < nt; i++) {
        int r = sim->scratch[i];
        struct sim_resource *R = &sim->res[r];
        R->mark = 0;
        if (R->new_rate != R->rate) {
            R->rate = R->new_rate;
            rate_log(sim, r, R->rate);
        }
        if (R->rate > 0)
            sim->busy_res[sim->n_busy_res++] = r;
    }
    sim->rates_dirty = 0;
}

static void advance(struct mpress_sim *sim, double t)
{
    double dt = t - sim->now;
    if (dt > 0) {
        for (int i = 0; i < sim->n_active; i++) {
            struct sim_task *T = &sim->tasks[sim->active[i]];
            T->remaining -= T->rate * dt;
            for (int j = 0; j < T->n_path; j++)
                sim->res[T->path[j]].bytes += T->rate * dt;
        }
    }
    sim->now = t;
}

static int run_events(struct mpress_sim *sim)
{
    for (int t = 0; t < sim->n_tasks; t++)
        if (sim->tasks[t].deps_left == 0 && sim->tasks[t].state == 0)
            make_ready(sim, t);
    while (!sim->failed) {
        if (sim->rates_dirty)
            compute_rates(sim);
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
            advance(sim, tf);
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
            advance(sim, ev.t);
            finish_task(sim, ev.task);
        }
    }
    return sim->failed ? -1 : 0;
}

/* ---- public -------------------------------------------------------------------------------- */

void mpress_sim_destroy(struct mpress_sim *sim)
{
    if (!sim)
        return;
    free(sim->tasks);
    free(sim->edges);
    free(sim->memops);
    if (sim->seq)
        for (int k = 0; k < sim->n_stages; k++)
            free(sim->seq[k]);
    free(sim->seq);
    free(sim->seq_len);
    free(sim->seq_cap);
    free(sim->seq_pos);
    if (sim->res)
        for (int r = 0; r < sim->n_res; r++)
            free(sim->res[r].snap);
    free(sim->res);
    free(sim->queues);
    free(sim->queue_blocked);
    free(sim->active);
    free(sim->scratch);
    free(sim->busy_res);
    free(sim->rates);
    free(sim->heap);
    free(sim->iter_end);
    free(sim->iter_steps);
    free(sim->log);
    free(sim->busy);
    free(sim->stall_swap);
    free(sim->stall_boundary);
    free(sim->stall_opt);
    free(sim->stall_mem);
    free(sim->summary.links);
    free(sim);
}

static void summarize(struct mpress_sim *sim)
{
    const struct mpress_plan *plan = sim->plan;
    struct mpress_sim_summary *S = &sim->summary;
    int N = sim->N, R = sim->reported;
    S->iterations = R + 1;
    S->iteration_end_s = sim->iter_end[R];
    S->iteration_start_s = R > 0 ? sim->iter_end[R - 1] : 0;
    S->iteration_s = S->iteration_end_s - S->iteration_start_s;
    S->total_s = sim->now;
    double samples = (double)sim->M * (plan->profile.model.micro_batch > 0
                                           ? plan->profile.model.micro_batch
                                           : 1);
    if (S->iteration_s > 0) {
        S->samples_per_s = samples / S->iteration_s;
        S->model_tflops = sim->model_flops_per_iter / S->iteration_s / 1e12;
        S->hardware_tflops =
            (sim->model_flops_per_iter + sim->recompute_flops_per_iter) / S->iteration_s / 1e12;
    }
    S->oom_gpu = -1;
    S->host_capacity = sim->capacity[sim->n_gpus];
    S->host_out_of_memory = S->host_capacity > 0 && S->host_peak > S->host_capacity;
    for (int g = 0; g < sim->n_gpus; g++) {
        struct mpress_sim_gpu *G = &S->gpus[g];
        G->busy_s = sim->busy[g * N + R];
        G->stall_swap_s = sim->stall_swap[g * N + R];
        G->stall_boundary_s = sim->stall_boundary[g * N + R];
        G->stall_optimizer_s = sim->stall_opt[g * N + R];
        G->stall_memory_s = sim->stall_mem[g * N + R];
        if (G->out_of_memory) {
            S->out_of_memory = 1;
            if (S->oom_gpu < 0 || G->oom_time_s < S->gpus[S->oom_gpu].oom_time_s)
                S->oom_gpu = g;
        }
        sim_residents_at_peak(sim, g, G);
    }
    int nl = 0;
    for (int r = 0; r < sim->n_res; r++)
        if (sim->res[r].bytes > 0)
            nl++;
    S->links = calloc(nl ? (size_t)nl : 1, sizeof(*S->links));
    if (!S->links) {
        sim->failed = 1;
        return;
    }
    for (int r = 0; r < sim->n_res; r++) {
        const struct sim_resource *Rs = &sim->res[r];
        if (!(Rs->bytes > 0))
            continue;
        struct mpress_sim_link *L = &S->links[S->n_links++];
        snprintf(L->name, sizeof(L->name), "%s", Rs->name);
        L->bytes_per_s = Rs->cap;
        L->bytes = Rs->snap[R] - (R > 0 ? Rs->snap[R - 1] : 0);
        L->utilization = S->iteration_s > 0 ? L->bytes / (Rs->cap * S->iteration_s) : 0;
    }
}

int mpress_sim_run(const struct mpress_plan *plan, const struct mpress_sim_options *opt,
                   struct mpress_sim **out, struct mpress_error *err)
{
    *out = NULL;
    struct mpress_sim_options dflt;
    if (!opt) {
        mpress_sim_options_init(&dflt);
        opt = &dflt;
    }
    if (opt->iterations < 1)
        return mpress_error_set(err, MPRESS_EUSAGE, "iterations is %d, must be >= 1",
                                opt->iterations);
    int *action_of = NULL;
    int rc = validate(plan, &action_of, err);
    if (rc) {
        free(action_of);
        return rc;
    }
    struct mpress_sim *sim = calloc(1, sizeof(*sim));
    struct layout L = {0};
    int *step_task = NULL;
    if (!sim) {
        free(action_of);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    sim->plan = plan;
    sim->n_gpus = plan->topology.n_gpus;
    sim->n_stages = plan->n_stages;
    sim->M = plan->micro_batches;
    /* Async has no flush: the last iteration simulated is a drain with fewer forwards, so one
     * more is simulated after the reported one to keep it in the steady state. */
    sim->reported = opt->iterations - 1;
    sim->N = opt->iterations + (plan->schedule == MPRESS_SCHEDULE_ASYNC ? 1 : 0);
    sim->init_mem = -1;
    for (int g = 0; g < MPRESS_MAX_GPUS; g++)
        sim->gpu_stage[g] = -1;
    for (int k = 0; k < plan->n_stages; k++) {
        sim->stage_gpu[k] = plan->stages[k].gpu;
        sim->gpu_stage[plan->stages[k].gpu] = k;
    }
    for (int g = 0; g < sim->n_gpus; g++) {
        sim->summary.gpus[g].gpu = g;
        sim->summary.gpus[g].stage = sim->gpu_stage[g];
        sim->summary.gpus[g].capacity = plan->topology.gpus[g].memory_bytes;
        sim->peak_log[g] = -1;
    }
    sim->summary.n_gpus = sim->n_gpus;
    int S = sim->n_stages, N = sim->N, U = N * sim->M, n_ops = plan->profile.n_ops;
    int G = sim->n_gpus, NK = plan->topology.n_sockets > 0 ? plan->topology.n_sockets : 1;
    sim->engines_per_gpu = 2 + G;
    sim->cpu_queue0 = G * sim->engines_per_gpu;
    sim->n_queues = sim->cpu_queue0 + NK;
    size_t cells = (size_t)U * (size_t)n_ops;
    sim->seq = calloc((size_t)S, sizeof(int *));
    sim->seq_len = calloc((size_t)S, sizeof(int));
    sim->seq_cap = calloc((size_t)S, sizeof(int));
    sim->seq_pos = calloc((size_t)S, sizeof(int));
    sim->queues = calloc((size_t)sim->n_queues, sizeof(*sim->queues));
    sim->queue_blocked = calloc((size_t)sim->n_queues, sizeof(int));
    sim->iter_end = calloc((size_t)N, sizeof(double));
    sim->iter_steps = calloc((size_t)N, sizeof(int));
    sim->busy = calloc((size_t)(G * N), sizeof(double));
    sim->stall_swap = calloc((size_t)(G * N), sizeof(double));
    sim->stall_boundary = calloc((size_t)(G * N), sizeof(double));
    sim->stall_opt = calloc((size_t)(G * N), sizeof(double));
    sim->stall_mem = calloc((size_t)(G * N), sizeof(double));
    sim->wait_for_memory = opt->wait_for_memory;
    L.fwd = malloc(cells * sizeof(int));
    L.bwd = malloc(cells * sizeof(int));
    L.bslot_pos = malloc(cells * sizeof(int));
    L.bstart = malloc((size_t)U * (size_t)S * sizeof(int));
    step_task = malloc((size_t)(N * S) * sizeof(int));
    if (!sim->seq || !sim->seq_len || !sim->seq_cap || !sim->seq_pos || !sim->queues || !sim->queue_blocked ||
        !sim->iter_end || !sim->iter_steps || !sim->busy || !sim->stall_swap ||
        !sim->stall_boundary || !sim->stall_opt || !sim->stall_mem || !L.fwd || !L.bwd || !L.bslot_pos || !L.bstart ||
        !step_task) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto fail;
    }
    for (int q = 0; q < sim->n_queues; q++)
        sim->queues[q] = (struct sim_queue){-1, -1, -1};
    for (int i = 0; i < N; i++)
        sim->iter_end[i] = -1;
    if ((rc = setup_resources(sim, err)))
        goto fail;

    lay_initial_memory(sim);
    for (int k = 0; k < S; k++)
        if (lay_stage(sim, &L, action_of, k, step_task, err))
            goto fail_laid;
    for (int i = 0; i < N * S; i++)
        sim->tasks[step_task[i]].ends_iteration = 1;
    if (lay_boundaries(sim, &L, err) || lay_swaps(sim, &L, err))
        goto fail_laid;
    for (int k = 0; k < S; k++)
        if (sim->seq_len[k])
            sim->tasks[sim->seq[k][0]].head_s = 0;
    sim->active = malloc((size_t)(sim->n_tasks + 1) * sizeof(int));
    sim->scratch = malloc((size_t)(sim->n_tasks + sim->n_res + 1) * sizeof(int));
    sim->busy_res = malloc((size_t)(sim->n_res + 1) * sizeof(int));
    if (!sim->active || !sim->scratch || !sim->busy_res || sim->failed) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto fail;
    }

    /* FLOPs per iteration: forward + backward = 3 x forward (backward computes gradients with
     * respect to both inputs and weights: 2 x forward; Narayanan et al., SC 2021, eq. 3). */
    for (int o = 0; o < n_ops; o++)
        sim->model_flops_per_iter += 3.0 * plan->profile.ops[o].fwd_flops * sim->M;
    for (int i = 0; i < plan->n_actions; i++) {
        const struct mpress_plan_action *a = &plan->actions[i];
        if (a->action != MPRESS_ACTION_RECOMPUTE)
            continue;
        const struct mpress_saved_tensor *ts = &plan->profile.ops[a->op].tensors[a->tensor];
        int ro = ts->recompute_op >= 0 && ts->recompute_op < n_ops ? ts->recompute_op : a->op;
        const struct mpress_op *op = &plan->profile.ops[ro];
        if (op->fwd_s > 0)
            sim->recompute_flops_per_iter += ts->recompute_s / op->fwd_s * op->fwd_flops * sim->M;
    }

    sim->now = 0;
    apply_group(sim, sim->init_mem, -1, 0);
    if (run_events(sim)) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto fail;
    }
    for (int t = 0; t < sim->n_tasks; t++)
        if (sim->tasks[t].state != 3) {
            const struct mpress_sim_task *P = &sim->tasks[t].pub;
            rc = mpress_error_set(err, MPRESS_EINPUT, "the plan deadlocks: %s of stage %d, "
                                  "iteration %d, micro-batch %d, op %d never ran",
                                  mpress_sim_task_kind_name(P->kind), P->stage, P->iteration,
                                  P->micro_batch, P->op);
            goto fail;
        }
    summarize(sim);
    if (sim->failed) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto fail;
    }
    free(L.fwd);
    free(L.bwd);
    free(L.bslot_pos);
    free(L.bstart);
    free(step_task);
    free(action_of);
    *out = sim;
    return 0;

fail_laid:
    rc = err && err->code ? err->code : mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
fail:
    free(L.fwd);
    free(L.bwd);
    free(L.bslot_pos);
    free(L.bstart);
    free(step_task);
    free(action_of);
    mpress_sim_destroy(sim);
    return rc;
}

const struct mpress_sim_summary *mpress_sim_summary_get(const struct mpress_sim *sim)
{
    return &sim->summary;
}

int mpress_sim_task_count(const struct mpress_sim *sim)
{
    return sim->n_tasks;
}

const struct mpress_sim_task *mpress_sim_task_get(const struct mpress_sim *sim, int i)
{
    return i >= 0 && i < sim->n_tasks ? &sim->tasks[i].pub : NULL;
}

const struct mpress_sim_task *mpress_sim_task_find(const struct mpress_sim *sim,
                                                   enum mpress_sim_task_kind kind, int stage,
                                                   int iteration, int micro_batch, int op,
                                                   int action)
{
    for (int i = 0; i < sim->n_tasks; i++) {
        const struct mpress_sim_task *t = &sim->tasks[i].pub;
        if (t->kind == kind && (stage < 0 || t->stage == stage) &&
            (iteration < 0 || t->iteration == iteration) &&
            (micro_batch < 0 || t->micro_batch == micro_batch) && (op < 0 || t->op == op) &&
            (action < 0 || t->action == action))
            return t;
    }
    return NULL;
}

uint64_t mpress_sim_memory_at(const struct mpress_sim *sim, int gpu, double t)
{
    int dev = gpu < 0 ? sim->n_gpus : gpu;
    uint64_t total = 0;
    for (long i = 0; i < sim->n_log && sim->log[i].t <= t; i++) {
        const struct sim_log *l = &sim->log[i];
        int head = l->task < 0 ? sim->init_mem
                   : l->phase ? sim->tasks[l->task].mem_end
                              : sim->tasks[l->task].mem_start;
        for (int m = head; m >= 0; m = sim->memops[m].next)
            if (sim->memops[m].dev == dev)
                total += (uint64_t)sim->memops[m].delta;
    }
    return total;
}
