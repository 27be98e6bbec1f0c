/* The planner's cost model as one evaluator: memory per GPU, link loads, cycle and iteration
 * time of a full assignment. docs/cost-model.md ("Planner cost model") states every formula
 * used here; the MILP in ilp.c is a linear form of the same model and the baselines call this
 * evaluator directly. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_trial.h"
#include "plan_internal.h"

double plan_nvlink_bw(const struct mpress_topology *t, int a, int b)
{
    return mpress_topology_p2p_bytes_per_s(t, a, b);
}

double plan_port_bw(const struct mpress_topology *t, int g)
{
    int ports = t->gpus[g].nvlink_ports;
    if (ports <= 0)
        for (int j = 0; j < t->n_gpus; j++)
            if (t->nvlinks[g][j] > ports)
                ports = t->nvlinks[g][j];
    return ports * t->nvlink_bytes_per_s;
}

double plan_boundary_bw(const struct mpress_topology *t, int a, int b)
{
    double nv = plan_nvlink_bw(t, a, b);
    return nv > 0 ? nv : t->pcie_bytes_per_s;
}

double plan_host_bw(const struct mpress_topology *t)
{
    int sockets = t->n_sockets > 0 ? t->n_sockets : 1;
    return sockets * t->host_memory_bytes_per_s;
}

/* A recompute on a stage may rerun ops back to the stage's input (layer1.qkv's input from
 * ln1, ln2's from the residual add). A swapped copy of that input (ln1's saved input: made
 * before the stage, as large as what the previous stage sends) then comes back with the
 * recomputes, at the start of the stage's backward, instead of before its own op's backward:
 * the runtime reads it there, where otherwise it would hold the input as received for every
 * micro-batch in flight, which the plan does not charge (docs/cost-model.md, "Held stage
 * inputs"). Its bytes are already in the stage's working memory. j_end: the index after the
 * stage's last action. */
static void bring_back_stage_input(const struct mpress_profile *p,
                                   const struct mpress_plan_stage *st, struct mpress_assignment *a,
                                   int j_end)
{
    if (st->first_op == 0)
        return;
    uint64_t in_bytes = p->ops[st->first_op - 1].output_bytes;
    int j = j_end;
    for (int i = st->last_op; i >= st->first_op; i--)
        j -= p->ops[i].n_tensors;
    for (int i = st->first_op; i <= st->last_op; i++)
        for (int t = 0; t < p->ops[i].n_tensors; t++, j++) {
            const struct mpress_saved_tensor *ts = &p->ops[i].tensors[t];
            struct mpress_plan_action *ac = &a->actions[j];
            if ((ac->action == MPRESS_ACTION_HOST_SWAP || ac->action == MPRESS_ACTION_D2D_SWAP) &&
                plan_stage_input(ts, st->first_op) && ts->bytes == in_bytes)
                ac->prefetch_before_op = st->last_op;
        }
}

int plan_schedule_prefetches(const struct mpress_profile *p, struct mpress_assignment *a)
{
    /* Per stage: tasks from the backward slot of an op in micro-batch u back to the same op's
     * backward in micro-batch u - 1: the stage's n ops plus the recompute tasks (one per
     * recomputed tensor) that open every backward pass. Lookahead n + rec - 1 issues a
     * tensor's prefetch when the previous micro-batch has freed the same op's copy. */
    /* The least span over the swapping stages, so that no stage's copies overlap the previous
     * micro-batch's; a stage with a longer span issues its copies later than it could. */
    int L = -1, j = 0;
    for (int k = 0; k < a->n_stages; k++) {
        const struct mpress_plan_stage *st = &a->stages[k];
        int swaps = 0, rec = 0;
        for (int i = st->first_op; i <= st->last_op; i++)
            for (int t = 0; t < p->ops[i].n_tensors; t++, j++) {
                struct mpress_plan_action *ac = &a->actions[j];
                if (ac->action == MPRESS_ACTION_HOST_SWAP ||
                    ac->action == MPRESS_ACTION_D2D_SWAP) {
                    swaps = 1;
                    ac->prefetch_before_op = ac->op;
                }
                rec += ac->action == MPRESS_ACTION_RECOMPUTE;
            }
        int span = st->last_op - st->first_op + rec;
        if (swaps && (L < 0 || span < L))
            L = span;
        if (rec)
            bring_back_stage_input(p, st, a, j);
    }
    return L < 0 ? 0 : L;
}

int plan_tied_find(const struct mpress_profile *p, struct plan_tied *t)
{
    memset(t, 0, sizeof(*t));
    t->owner = t->copy = -1;
    if (strcmp(p->model.family, "gpt") != 0 && strcmp(p->model.family, "bert") != 0)
        return 0;
    int wb = 0, gb = 0, ob = 0;
    mpress_model_state_bytes(&p->model, &wb, &gb, &ob);
    if (wb <= 0)
        return 0;
    for (int i = 0; i < p->n_ops; i++) {
        const struct mpress_op *op = &p->ops[i];
        if (strcmp(op->name, "embedding") == 0)
            t->owner = i;
        else if (strcmp(op->name, "head") == 0 && op->param_bytes / (uint64_t)wb > op->params)
            t->copy = i;
    }
    if (t->owner < 0 || t->copy < 0)
        return 0;
    uint64_t n = p->ops[t->copy].param_bytes / (uint64_t)wb - p->ops[t->copy].params;
    t->p = n * (uint64_t)wb;
    t->g = n * (uint64_t)gb;
    t->o = n * (uint64_t)ob;
    return 1;
}

/* The tied weight of p (plan_tied_find: tied, tw) and the stages of a holding its owner (ko)
 * and its copy (kc), both -1 when p ties no weight that way. */
struct tied_at {
    struct plan_tied tw;
    int tied, ko, kc;
};

static void tied_stages(const struct stage_sums *s, const struct mpress_assignment *a,
                        struct tied_at *t)
{
    t->ko = t->kc = -1;
    t->tied = s->tied;
    t->tw = s->tw;
    for (int k = 0; t->tied && k < a->n_stages; k++) {
        if (t->tw.owner >= a->stages[k].first_op && t->tw.owner <= a->stages[k].last_op)
            t->ko = k;
        if (t->tw.copy >= a->stages[k].first_op && t->tw.copy <= a->stages[k].last_op)
            t->kc = k;
    }
    if (t->ko < 0 || t->kc < 0)
        t->ko = t->kc = -1;
}

uint64_t plan_shortfall(const struct mpress_plan_eval *ev)
{
    uint64_t s = plan_add(ev->host_short, ev->drain_short);
    for (int g = 0; g < ev->n_gpus; g++)
        if (ev->gpus[g].bound > ev->gpus[g].capacity)
            s = plan_add(s, ev->gpus[g].bound - ev->gpus[g].capacity);
    return s;
}

int plan_count_tensors(const struct mpress_profile *p)
{
    int n = 0;
    for (int i = 0; i < p->n_ops; i++)
        n += p->ops[i].n_tensors;
    return n;
}

int mpress_assignment_init(struct mpress_assignment *a, const struct mpress_profile *p,
                           struct mpress_error *err)
{
    memset(a, 0, sizeof(*a));
    int n = plan_count_tensors(p);
    a->actions = calloc(n > 0 ? (size_t)n : 1, sizeof(*a->actions));
    if (!a->actions)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    a->n_actions = n;
    int j = 0;
    for (int i = 0; i < p->n_ops; i++)
        for (int t = 0; t < p->ops[i].n_tensors; t++, j++) {
            a->actions[j].op = i;
            a->actions[j].tensor = t;
            a->actions[j].action = MPRESS_ACTION_KEEP;
            a->actions[j].evict_after_op = -1;
            a->actions[j].prefetch_before_op = -1;
        }
    return 0;
}

void plan_assignment_copy(struct mpress_assignment *d, const struct mpress_assignment *s)
{
    d->n_stages = s->n_stages;
    memcpy(d->stages, s->stages, sizeof(d->stages));
    memcpy(d->actions, s->actions, sizeof(*d->actions) * (size_t)d->n_actions);
}

void mpress_assignment_finish(struct mpress_assignment *a)
{
    if (!a)
        return;
    free(a->actions);
    memset(a, 0, sizeof(*a));
}

/* The cycle becomes t when t is above it, its bottleneck named by fmt; the name is formatted
 * only then: the greedy baseline and the local searches evaluate thousands of trials, and
 * formatting every stage's and link's name in each was 6 % of gpt-20b's plan on dgx1. */
__attribute__((format(printf, 3, 4))) static void
set_bottleneck(struct mpress_plan_eval *ev, double t, const char *fmt, ...)
{
    if (t > ev->cycle_s) {
        ev->cycle_s = t;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ev->bottleneck, sizeof(ev->bottleneck), fmt, ap);
        va_end(ap);
    }
}

void plan_sum_stages(const struct mpress_profile *p, const struct mpress_assignment *a,
                     struct stage_sums *s, struct mpress_plan_eval *ev)
{
    const int S = a->n_stages;
    uint64_t(*d2d)[MPRESS_MAX_GPUS] = s->d2d;
    s->tied = plan_tied_find(p, &s->tw);
    int j = 0;
    for (int k = 0; k < S; k++) {
        const struct mpress_plan_stage *st = &a->stages[k];
        for (int i = st->first_op; i <= st->last_op; i++) {
            const struct mpress_op *op = &p->ops[i];
            s->comp[k] += op->fwd_s + op->bwd_s;
            s->fwd[k] += op->fwd_s;
            s->pb[k] = plan_add(s->pb[k], op->param_bytes);
            s->gb[k] = plan_add(s->gb[k], op->grad_bytes);
            s->ob[k] = plan_add(s->ob[k], op->optim_bytes);
            if (op->workspace_bytes > s->ws[k])
                s->ws[k] = op->workspace_bytes;
            for (int t = 0; t < op->n_tensors; t++, j++) {
                const struct mpress_saved_tensor *ts = &op->tensors[t];
                const struct mpress_plan_action *ac = &a->actions[j];
                ev->action_bytes[ac->action] = plan_add(ev->action_bytes[ac->action], ts->bytes);
                /* A tensor recomputed from an op of an earlier stage: the stage cannot rerun
                 * that op, so it holds its input as received for every micro-batch in flight
                 * (held stage input), which costs what keeping the tensor costs. */
                int held = ac->action == MPRESS_ACTION_RECOMPUTE &&
                           plan_stage_input(ts, st->first_op);
                if (ac->action == MPRESS_ACTION_KEEP || held) {
                    s->kept[k] = plan_add(s->kept[k], ts->bytes);
                    if (held)
                        s->comp[k] += ts->recompute_s;
                    else
                        s->kc[k] = plan_add(s->kc[k], ts->bytes);
                    continue;
                }
                s->evicted[k] = plan_add(s->evicted[k], ts->bytes);
                if (ac->action == MPRESS_ACTION_RECOMPUTE)
                    s->comp[k] += ts->recompute_s;
                else if (ac->action == MPRESS_ACTION_HOST_SWAP)
                    s->host[k] = plan_add(s->host[k], ts->bytes);
                else
                    for (int q = 0; q < ac->n_peers; q++)
                        d2d[k][ac->peers[q]] = plan_add(d2d[k][ac->peers[q]], ac->peer_bytes[q]);
            }
            uint64_t at = plan_add(op->workspace_bytes, s->kc[k]);
            if (at > s->wv[k])
                s->wv[k] = at;
        }
        s->out[k] = k + 1 < S ? p->ops[st->last_op].output_bytes : 0;
    }
}

/* Memory per GPU: each part, the peak, and the largest overflow (short_bytes, short_gpu). */
static void gpu_memory(const struct mpress_profile *p, const struct mpress_topology *topo,
                       enum mpress_schedule schedule, int M,
                       const struct mpress_assignment *a, const struct stage_sums *s,
                       const struct tied_at *ta, struct mpress_plan_eval *ev)
{
    const int S = a->n_stages, G = topo->n_gpus;
    ev->n_gpus = G;
    for (int g = 0; g < G; g++) {
        struct mpress_plan_gpu *mg = &ev->gpus[g];
        mg->gpu = g;
        mg->stage = -1;
        mg->capacity = topo->gpus[g].memory_bytes;
        mg->reserve = topo->gpus[g].reserve_bytes;
    }
    for (int k = 0; k < S; k++) {
        int n = plan_in_flight(schedule, S, k, M);
        struct mpress_plan_gpu *mg = &ev->gpus[a->stages[k].gpu];
        mg->stage = k;
        mg->weights = plan_mul(s->pb[k], (uint64_t)plan_weight_versions(schedule, S, k, M));
        mg->gradients = s->gb[k];
        mg->optimizer = a->stages[k].optimizer_on_host ? 0 : s->ob[k];
        mg->activations = plan_mul((uint64_t)n, s->kept[k]);
        mg->working = plan_add(s->evicted[k], plan_workspace_at_peak(s, k));
        mg->buffers = plan_mul(2, plan_add(s->out[k], k > 0 ? s->out[k - 1] : 0));
        for (int g = 0; g < G; g++)
            ev->gpus[g].parked =
                plan_add(ev->gpus[g].parked, plan_mul((uint64_t)n, s->d2d[k][g]));
        ev->host_bytes = plan_add(ev->host_bytes, plan_mul((uint64_t)n, s->host[k]));
        if (a->stages[k].optimizer_on_host)
            ev->host_bytes = plan_add(ev->host_bytes, s->ob[k]);
    }
    const struct plan_tied tw = ta->tw;
    const int tied = ta->tied, ko = ta->ko, kc = ta->kc;
    if (tied && ko == kc && ko >= 0) {
        /* One stage holds both: one matrix, the owner's weights and states; the copy keeps
         * only its gradient, folded into the owner's before the step. */
        struct mpress_plan_gpu *mg = &ev->gpus[a->stages[ko].gpu];
        mg->weights -= tw.p * (uint64_t)plan_weight_versions(schedule, S, ko, M);
        if (a->stages[ko].optimizer_on_host)
            ev->host_bytes -= tw.o;
        else
            mg->optimizer -= tw.o;
    }
    ev->fits = 1;
    for (int g = 0; g < G; g++) {
        struct mpress_plan_gpu *mg = &ev->gpus[g];
        uint64_t parts[] = {mg->weights, mg->gradients, mg->optimizer, mg->activations,
                            mg->parked,  mg->working,   mg->buffers,   mg->reserve};
        mg->peak = 0;
        for (size_t q = 0; q < sizeof(parts) / sizeof(parts[0]); q++)
            mg->peak = plan_add(mg->peak, parts[q]);
        /* The bound counts the stage's largest workspace beside all its kept activations. */
        mg->bound = mg->stage >= 0 ? plan_add(mg->peak, s->ws[mg->stage] -
                                                            plan_workspace_at_peak(s, mg->stage))
                                   : mg->peak;
        /* On two stages, each receives the other's gradient of the matrix (V h gradient
         * bytes) once its own backward pass is done, before its step: then it holds its
         * model states, the reserve and that buffer, and nothing of the micro-batches. That
         * is the peak when the buffer outweighs what the pass held besides the states. */
        if (tied && ko != kc && (mg->stage == ko || mg->stage == kc)) {
            uint64_t states = plan_add(plan_add(mg->weights, mg->gradients),
                                       plan_add(mg->optimizer, mg->reserve));
            uint64_t at = plan_add(states, tw.g);
            if (at > mg->peak) {
                mg->activations = mg->parked = mg->working = 0;
                mg->buffers = tw.g;
                mg->peak = at;
            }
            if (at > mg->bound)
                mg->bound = at;
        }
        if (mg->bound > mg->capacity) {
            ev->fits = 0;
            if (mg->bound - mg->capacity > ev->short_bytes) {
                ev->short_bytes = mg->bound - mg->capacity;
                ev->short_gpu = g;
            }
        }
    }
}

/* Drain: stage k's host-swapped bytes of one micro-batch must cross its PCIe link, and its
 * switch's uplink together with those of the other GPUs behind that switch, within one
 * forward of the stage. Otherwise evictions queue up during the 1F1B warm-up (n_k forwards
 * back to back) and the prefetch issued at the start of a forward is late for the backward
 * after it. The shortfall is the backlog n_k (H_k - F_k bw) the GPU would hold. */
static void drain_check(const struct mpress_topology *topo, enum mpress_schedule schedule, int M,
                        const struct mpress_assignment *a, const struct stage_sums *s,
                        struct mpress_plan_eval *ev)
{
    const int S = a->n_stages, G = topo->n_gpus;
    double sw_host[MPRESS_MAX_GPUS] = {0};
    for (int k = 0; k < S; k++) {
        int w = topo->gpus[a->stages[k].gpu].pcie_switch;
        if (w >= 0 && w < topo->n_switches)
            sw_host[w] += (double)s->host[k];
    }
    for (int k = 0; k < S; k++) {
        int g = a->stages[k].gpu, w = topo->gpus[g].pcie_switch;
        const double F = s->fwd[k] * PLAN_DRAIN_SHARE;
        double over = (double)s->host[k] - F * topo->pcie_bytes_per_s;
        if (w >= 0 && w < topo->n_switches && topo->switches[w].uplink_bytes_per_s > 0 &&
            sw_host[w] > 0)
            over = fmax(over, sw_host[w] - F * topo->switches[w].uplink_bytes_per_s);
        /* D2D evictions: per peer over the pair's NVLinks (direct fabric), or all together
         * through the GPU's switch ports (NVSwitch). */
        double d2d_all = 0;
        for (int q = 0; q < G; q++) {
            d2d_all += (double)s->d2d[k][q];
            if (s->d2d[k][q] > 0 && topo->fabric != MPRESS_FABRIC_NVSWITCH)
                over = fmax(over, (double)s->d2d[k][q] - F * plan_nvlink_bw(topo, g, q));
        }
        if (d2d_all > 0 && topo->fabric == MPRESS_FABRIC_NVSWITCH)
            over = fmax(over, d2d_all - F * plan_port_bw(topo, g));
        /* GLPK's feasibility tolerance must not make a MILP plan fail here: 1e-7 relative, or
         * 1e-7 of the MILP's unit (GB, 100 bytes) on small values, where the byte shares
         * rounded from a row met within it ran a D2D peer 7 bytes over (gpt-tiny on 4 emulated
         * 500 KiB devices at 3e8 bytes/s: exit 4, "the MILP's plan does not fit"). */
        if (over <= 1e-6 * ((double)s->host[k] + d2d_all) + 256)
            continue;
        uint64_t backlog =
            plan_mul(plan_u64(ceil(over)), (uint64_t)plan_in_flight(schedule, S, k, M));
        ev->fits = 0;
        if (backlog > ev->drain_short) {
            ev->drain_short = backlog;
            ev->drain_gpu = g;
        }
    }
}

/* NVLink loads per micro-batch on an NVSwitch fabric: each GPU's switch ports carry its D2D
 * traffic both ways and its stage's boundary transfers. */
static void nvswitch_port_loads(const struct mpress_topology *topo, const int *stage_of,
                                const struct stage_sums *s, struct mpress_plan_eval *ev)
{
    const int G = topo->n_gpus;
    for (int g = 0; g < G; g++) {
        double load = 0;
        for (int q = 0; q < G; q++) {
            if (stage_of[g] >= 0)
                load += (double)s->d2d[stage_of[g]][q];
            if (stage_of[q] >= 0)
                load += (double)s->d2d[stage_of[q]][g];
        }
        int k = stage_of[g];
        if (k >= 0)
            load += (double)s->out[k] + (k > 0 ? (double)s->out[k - 1] : 0);
        double bw = plan_port_bw(topo, g);
        if (load > 0 && bw > 0) {
            set_bottleneck(ev, load / bw, "nvswitch port gpu %d", g);
        }
    }
}

/* NVLink loads per micro-batch on a direct fabric: each linked pair carries the D2D traffic
 * between its GPUs' stages and the boundary transfers between them. */
static void nvlink_pair_loads(const struct mpress_topology *topo, const int *stage_of,
                              const struct mpress_assignment *a, const struct stage_sums *s,
                              struct mpress_plan_eval *ev)
{
    const int S = a->n_stages, G = topo->n_gpus;
    for (int x = 0; x < G; x++)
        for (int y = x + 1; y < G; y++) {
            double bw = plan_nvlink_bw(topo, x, y);
            if (bw <= 0)
                continue;
            double load = 0;
            if (stage_of[x] >= 0)
                load += (double)s->d2d[stage_of[x]][y];
            if (stage_of[y] >= 0)
                load += (double)s->d2d[stage_of[y]][x];
            for (int k = 0; k + 1 < S; k++) {
                int ga = a->stages[k].gpu, gb2 = a->stages[k + 1].gpu;
                if ((ga == x && gb2 == y) || (ga == y && gb2 == x))
                    load += (double)s->out[k];
            }
            if (load > 0)
                set_bottleneck(ev, load / bw, "nvlink %d-%d", x, y);
        }
}

/* Link loads per micro-batch, per direction (each transfer has an equal reverse one:
 * evict/prefetch, activation/gradient), and the cycle: the slowest stage or link. */
static void cycle(const struct mpress_topology *topo, const struct mpress_assignment *a,
                  const struct stage_sums *s, struct mpress_plan_eval *ev)
{
    const int S = a->n_stages, G = topo->n_gpus;
    ev->cycle_s = 0;
    for (int k = 0; k < S; k++) {
        ev->stage_s[k] = s->comp[k];
        set_bottleneck(ev, s->comp[k], "stage %d compute", k);
    }
    int stage_of[MPRESS_MAX_GPUS];
    for (int g = 0; g < G; g++)
        stage_of[g] = ev->gpus[g].stage;
    double pcie_load[MPRESS_MAX_GPUS] = {0};
    for (int g = 0; g < G; g++)
        if (stage_of[g] >= 0)
            pcie_load[g] = (double)s->host[stage_of[g]];
    /* Boundary transfers: NVLink when the pair has it, else PCIe at both ends. */
    for (int k = 0; k + 1 < S; k++) {
        int ga = a->stages[k].gpu, gb2 = a->stages[k + 1].gpu;
        if (plan_nvlink_bw(topo, ga, gb2) <= 0) {
            pcie_load[ga] += (double)s->out[k];
            pcie_load[gb2] += (double)s->out[k];
        }
    }
    if (topo->fabric == MPRESS_FABRIC_NVSWITCH)
        nvswitch_port_loads(topo, stage_of, s, ev);
    else
        nvlink_pair_loads(topo, stage_of, a, s, ev);
    double uplink[MPRESS_MAX_GPUS] = {0};
    for (int g = 0; g < G; g++) {
        if (pcie_load[g] <= 0)
            continue;
        set_bottleneck(ev, pcie_load[g] / topo->pcie_bytes_per_s, "pcie gpu %d", g);
        int w = topo->gpus[g].pcie_switch;
        if (w >= 0 && w < topo->n_switches)
            uplink[w] += pcie_load[g];
    }
    for (int w = 0; w < topo->n_switches; w++)
        if (uplink[w] > 0 && topo->switches[w].uplink_bytes_per_s > 0) {
            set_bottleneck(ev, uplink[w] / topo->switches[w].uplink_bytes_per_s,
                           "pcie switch %d uplink", w);
        }
}

/* Fill and drain: one micro-batch through every stage, forward and backward, with the
 * boundary transfers in both directions. */
static double fill_drain(const struct mpress_topology *topo, const struct mpress_assignment *a,
                         const struct stage_sums *s)
{
    const int S = a->n_stages;
    double t = 0;
    for (int k = 0; k < S; k++) {
        t += s->comp[k];
        if (k + 1 < S)
            t += 2.0 * (double)s->out[k] /
                 plan_boundary_bw(topo, a->stages[k].gpu, a->stages[k + 1].gpu);
    }
    return t;
}

/* Optimizer tail, once per iteration, from the end of stage 0's last backward
 * (docs/cost-model.md, "Iteration time"). Stage k's last backward ends drain_k (the backward
 * and recompute time of stages 0..k-1, which the drain runs after it) earlier, and the next
 * iteration's first forward reaches it fill_k (the forward time of stages 0..k-1) after stage
 * 0's: only the part of its step that ends later than that delays the next iteration. The
 * two stages of a split tied matrix start their steps once both gradients of the matrix have
 * crossed, which begins at stage 0's last backward. GPU steps run on their GPUs; a host step
 * moves the gradients down over PCIe, waits for its socket's CPU queue, updates at the
 * socket's memory bandwidth and moves the weights back up. */
static double optimizer_tail(const struct mpress_profile *p, const struct mpress_topology *topo,
                             const struct mpress_assignment *a, const struct stage_sums *s,
                             const struct tied_at *ta)
{
    const int S = a->n_stages, ko = ta->ko, kc = ta->kc;
    double touch[MPRESS_MAX_GPUS], down_s[MPRESS_MAX_GPUS], up_s[MPRESS_MAX_GPUS];
    double drain[MPRESS_MAX_GPUS];
    double fill[MPRESS_MAX_GPUS], xchg = 0, tail = 0, run = 0, fwd = 0;
    if (ko != kc) /* one side's gradient of the matrix, each way at once */
        xchg = (double)ta->tw.g / plan_boundary_bw(topo, a->stages[ko].gpu, a->stages[kc].gpu);
    for (int k = 0; k < S; k++) {
        struct mpress_optimizer_traffic tr;
        mpress_optimizer_step_traffic(&p->model, (double)s->pb[k], (double)s->gb[k],
                                      (double)s->ob[k], &tr);
        touch[k] = tr.memory_bytes;
        down_s[k] = tr.pcie_down_bytes / topo->pcie_bytes_per_s;
        up_s[k] = tr.pcie_up_bytes / topo->pcie_bytes_per_s;
        drain[k] = run;
        fill[k] = fwd;
        run += s->comp[k] - s->fwd[k];
        fwd += s->fwd[k];
    }
    /* Host steps: each socket's CPU queue takes them in the order their gradients arrive:
     * the stages' own from the last down to the first (stage k's last backward comes first
     * for the highest k), then the tied stages after the exchange, the copy's before the
     * owner's. */
    int order[MPRESS_MAX_GPUS], n = 0;
    for (int k = S - 1; k >= 0; k--)
        if (ko == kc || (k != ko && k != kc))
            order[n++] = k;
    if (ko != kc)
        order[n++] = kc, order[n++] = ko;
    double busy[MPRESS_MAX_GPUS]; /* per socket: when its CPU queue is free */
    for (int q = 0; q < MPRESS_MAX_GPUS; q++)
        busy[q] = -HUGE_VAL;
    for (int i = 0; i < n; i++) {
        int k = order[i], tied = ko != kc && (k == ko || k == kc);
        double start = tied ? xchg : -drain[k], t;
        if (a->stages[k].optimizer_on_host) {
            int q = plan_socket(topo, a->stages[k].gpu);
            double arrive = start + down_s[k];
            busy[q] = fmax(busy[q], arrive) + touch[k] / topo->host_memory_bytes_per_s;
            t = busy[q] + up_s[k] - fill[k];
        } else {
            double hbm = topo->gpus[a->stages[k].gpu].hbm_bytes_per_s;
            t = start + (hbm > 0 ? touch[k] / hbm : 0) - fill[k];
        }
        if (t > tail)
            tail = t;
    }
    return tail;
}

void plan_eval_sums(const struct mpress_profile *p, const struct mpress_topology *topo,
                    enum mpress_schedule schedule, int M, const struct mpress_assignment *a,
                    const struct stage_sums *s, struct mpress_plan_eval *ev)
{
    struct tied_at ta;
    tied_stages(s, a, &ta);
    gpu_memory(p, topo, schedule, M, a, s, &ta, ev);
    drain_check(topo, schedule, M, a, s, ev);
    /* A host without a stated memory size is not checked. */
    if (topo->host_memory_bytes > 0 && ev->host_bytes > topo->host_memory_bytes) {
        ev->fits = 0;
        ev->host_short = ev->host_bytes - topo->host_memory_bytes;
    }
    cycle(topo, a, s, ev);
    ev->fill_drain_s = fill_drain(topo, a, s);
    ev->tail_s = optimizer_tail(p, topo, a, s, &ta);

    ev->iteration_s = ev->fill_drain_s + (M - 1) * ev->cycle_s + ev->tail_s;
    ev->samples_per_s =
        ev->iteration_s > 0 ? (double)M * p->model.micro_batch / ev->iteration_s : 0;
}

int plan_evaluate_unchecked(const struct mpress_profile *p, const struct mpress_topology *topo,
                            enum mpress_schedule schedule, int M,
                            const struct mpress_assignment *a, struct mpress_plan_eval *ev,
                            struct mpress_error *err)
{
    memset(ev, 0, sizeof(*ev));
    ev->short_gpu = -1;
    ev->drain_gpu = -1;
    struct stage_sums s = {0};
    s.d2d = calloc(MPRESS_MAX_GPUS, sizeof(*s.d2d));
    if (!s.d2d)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    plan_sum_stages(p, a, &s, ev);
    plan_eval_sums(p, topo, schedule, M, a, &s, ev);
    free(s.d2d);
    return 0;
}

int mpress_plan_evaluate(const struct mpress_profile *p, const struct mpress_topology *topo,
                         enum mpress_schedule schedule, int micro_batches,
                         const struct mpress_assignment *a, struct mpress_plan_eval *ev,
                         struct mpress_error *err)
{
    memset(ev, 0, sizeof(*ev));
    ev->short_gpu = -1;
    ev->drain_gpu = -1;
    if (micro_batches < 1 || micro_batches > MPRESS_MAX_MICRO_BATCHES)
        return mpress_error_set(err, MPRESS_EUSAGE, "micro-batches must be 1 to %d",
                                MPRESS_MAX_MICRO_BATCHES);
    /* The plan rules every consumer applies (docs/formats.md, "Plan rules"). */
    int rc = mpress_plan_check(p, topo, micro_batches, a->n_stages, a->stages, a->n_actions,
                               a->actions, NULL, err);
    if (rc)
        return rc;
    return plan_evaluate_unchecked(p, topo, schedule, micro_batches, a, ev, err);
}
