/* `mpress run --backend sim`: the simulator's API and summary.
 *
 * The plan is lowered by the schedule module (mpress/sched.h) into the same task graph a
 * runtime walks; the simulator adds what only it decides: how long each task takes (an op's
 * profiled time, an optimizer step's bytes over memory bandwidth, a copy's flow over the links
 * of its path in the network model, net.c) and then runs the graph event by event (engine.c).
 * What it saw becomes a run report (mpress/run_report.h) that the outputs print. The rules are
 * written out in docs/simulator.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

int sim_grow(void **p, long *cap, long need, size_t size)
{
    if (need <= *cap)
        return 0;
    long n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, (size_t)n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

void mpress_sim_options_init(struct mpress_sim_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->iterations = 3;
}

/* ---- durations ------------------------------------------------------------------------- */

/* What the simulator decides for task i: its duration (compute and CPU tasks) or the links its
 * copy crosses (transfers). Tasks are visited in schedule order, so the first task the
 * topology cannot run names the error. */
static int task_cost(struct mpress_sim *sim, int i, struct mpress_error *err)
{
    const struct mpress_plan *plan = sim->plan;
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_topology *tp = &plan->topology;
    struct sim_task *T = &sim->tasks[i];
    const struct mpress_task *P = mpress_sched_task(sim->sched, i);
    switch (P->kind) {
    case MPRESS_TASK_FORWARD:
        T->dur = pr->ops[P->op].fwd_s;
        return 0;
    case MPRESS_TASK_BACKWARD:
        T->dur = pr->ops[P->op].bwd_s;
        return 0;
    case MPRESS_TASK_RECOMPUTE: {
        const struct mpress_plan_action *a = &plan->actions[P->action];
        T->dur = pr->ops[a->op].tensors[a->tensor].recompute_s;
        return 0;
    }
    case MPRESS_TASK_OPTIMIZER: {
        /* An elementwise Adam/SGD step is memory-bound: the bytes it reads and writes over
         * the memory bandwidth of where it runs (HBM for the GPU, host memory for the CPU).
         * A plan's step: the schedule's step traffic (mpress_optimizer_step_traffic over the
         * stage's model states). A data-parallel step (lower_dp.c) carries its own bytes: its
         * rank's partition, from the same function (sched.h). */
        double touched = (double)P->bytes;
        if (!P->bytes) {
            struct mpress_optimizer_traffic tr;
            mpress_sched_step_traffic(sim->sched, P->stage, &tr);
            touched = tr.memory_bytes;
        }
        double bw = P->src >= 0 ? tp->gpus[P->src].hbm_bytes_per_s : tp->host_memory_bytes_per_s;
        if (touched > 0 && !(bw > 0)) {
            if (P->src >= 0)
                return mpress_error_set(err, MPRESS_EINPUT, "gpu %d has no HBM bandwidth for "
                                        "its optimizer step", P->src);
            return mpress_error_set(err, MPRESS_EINPUT, "the host has no memory bandwidth for "
                                    "the CPU optimizer step of stage %d", P->stage);
        }
        T->dur = touched > 0 ? touched / bw : 0;
        return 0;
    }
    default:
        T->n_path = sim_net_path(sim, P->src, P->dst, T->path, err);
        return T->n_path < 0 ? (err && err->code ? err->code : MPRESS_EINPUT) : 0;
    }
}

/* Tasks of the simulation from the schedule's: kind and place copied, queue mapped (compute
 * tasks run on their stage's stream), dependency counts from the edges. */
static int setup_tasks(struct mpress_sim *sim, struct mpress_error *err)
{
    const struct mpress_sched *sc = sim->sched;
    sim->n_tasks = mpress_sched_task_count(sc);
    sim->n_queues = mpress_sched_queue_count(sc);
    sim->tasks = calloc((size_t)sim->n_tasks + 1, sizeof(*sim->tasks));
    sim->times = calloc((size_t)sim->n_tasks + 1, sizeof(*sim->times));
    sim->queues = calloc((size_t)sim->n_queues, sizeof(*sim->queues));
    sim->queue_blocked = calloc((size_t)sim->n_queues, sizeof(int));
    sim->seq = calloc((size_t)sim->n_stages, sizeof(*sim->seq));
    sim->seq_len = calloc((size_t)sim->n_stages, sizeof(int));
    sim->seq_pos = calloc((size_t)sim->n_stages, sizeof(int));
    if (!sim->tasks || !sim->times || !sim->queues || !sim->queue_blocked || !sim->seq ||
        !sim->seq_len || !sim->seq_pos)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    for (int q = 0; q < sim->n_queues; q++)
        sim->queues[q] = (struct sim_queue){-1, -1, -1};
    for (int i = 0; i < sim->n_tasks; i++) {
        const struct mpress_task *P = mpress_sched_task(sc, i);
        struct sim_task *T = &sim->tasks[i];
        T->pub = (struct mpress_sim_task){P->kind,  P->stage, P->iteration, P->micro_batch,
                                          P->op,    P->action, P->part,    P->src,
                                          P->dst,   (double)P->bytes, -1, -1, -1};
        int compute = mpress_sched_queue(sc, P->queue)->kind == MPRESS_QUEUE_COMPUTE;
        T->stream = compute ? P->stage : -1;
        T->queue = compute ? -1 : P->queue;
        mpress_sched_preds(sc, i, &T->deps_left);
        T->last_dep = -1;
        T->q_next = -1;
    }
    for (int k = 0; k < sim->n_stages; k++) {
        int q = mpress_sched_compute_queue(sc, sim->stage_gpu[k]);
        sim->seq[k] = mpress_sched_queue_tasks(sc, q, &sim->seq_len[k]);
        if (sim->seq_len[k])
            sim->tasks[sim->seq[k][0]].head_s = 0;
    }
    for (int i = 0; i < sim->n_tasks; i++) {
        int rc = task_cost(sim, i, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* FLOPs per iteration: forward + backward = 3 x forward (backward computes gradients with
 * respect to both inputs and weights: 2 x forward; Narayanan et al., SC 2021, eq. 3). */
static void count_flops(struct mpress_sim *sim)
{
    const struct mpress_plan *plan = sim->plan;
    int n_ops = plan->profile.n_ops;
    double model = 0;
    for (int o = 0; o < n_ops; o++)
        model += 3.0 * plan->profile.ops[o].fwd_flops * sim->M;
    sim->report.summary.model_flops_per_iter = model;
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
}

/* ---- summary ------------------------------------------------------------------------------ */

static int summarize_links(struct mpress_sim *sim)
{
    struct mpress_run_summary *S = &sim->report.summary;
    int R = sim->reported, nl = 0;
    for (int r = 0; r < sim->n_res; r++)
        if (sim->res[r].bytes > 0)
            nl++;
    S->links = calloc(nl ? (size_t)nl : 1, sizeof(*S->links));
    if (!S->links)
        return -1;
    for (int r = 0; r < sim->n_res; r++) {
        const struct sim_resource *Rs = &sim->res[r];
        if (!(Rs->bytes > 0))
            continue;
        struct mpress_run_link *L = &S->links[S->n_links++];
        snprintf(L->name, sizeof(L->name), "%s", sim->res_name[r]);
        L->bytes_per_s = Rs->cap;
        L->bytes = Rs->snap[R] - (R > 0 ? Rs->snap[R - 1] : 0);
        L->utilization = S->iteration_s > 0 ? L->bytes / (Rs->cap * S->iteration_s) : 0;
    }
    return 0;
}

static int summarize(struct mpress_sim *sim)
{
    const struct mpress_plan *plan = sim->plan;
    struct mpress_run_report *rep = &sim->report;
    struct mpress_run_summary *S = &rep->summary;
    int N = sim->N, R = sim->reported;
    for (int i = 0; i < sim->n_tasks; i++)
        sim->times[i] = (struct mpress_run_task_time){sim->tasks[i].pub.ready_s,
                                                      sim->tasks[i].pub.start_s,
                                                      sim->tasks[i].pub.end_s};
    rep->sched = sim->sched;
    rep->verb = "simulated";
    rep->wait_for_memory = sim->wait_for_memory;
    rep->times = sim->times;
    rep->n_mem = sim->n_log;
    rep->mem = sim->log;
    rep->n_link_names = sim->n_res;
    rep->link_names = (const char(*)[48])sim->res_name;
    rep->n_rates = sim->n_rates;
    rep->rates = sim->rates;
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
        S->model_tflops = S->model_flops_per_iter / S->iteration_s / 1e12;
        S->hardware_tflops = (S->model_flops_per_iter + sim->recompute_flops_per_iter) /
                             S->iteration_s / 1e12;
    }
    for (int g = 0; g < sim->n_gpus; g++) {
        struct mpress_run_gpu *G = &S->gpus[g];
        G->busy_s = sim->busy[g * N + R];
        G->stall_swap_s = sim->stall_swap[g * N + R];
        G->stall_boundary_s = sim->stall_boundary[g * N + R];
        G->stall_optimizer_s = sim->stall_opt[g * N + R];
        G->stall_memory_s = sim->stall_mem[g * N + R];
    }
    if (mpress_run_replay_memory(rep) || summarize_links(sim))
        return -1;
    return 0;
}

/* ---- public ------------------------------------------------------------------------------ */

void mpress_sim_destroy(struct mpress_sim *sim)
{
    if (!sim)
        return;
    mpress_sched_destroy(sim->sched);
    free(sim->tasks);
    free(sim->times);
    free(sim->seq);
    free(sim->seq_len);
    free(sim->seq_pos);
    sim_net_free(sim);
    free(sim->queues);
    free(sim->queue_blocked);
    free(sim->heap);
    free(sim->iter_end);
    free(sim->iter_steps);
    free(sim->log);
    free(sim->busy);
    free(sim->stall_swap);
    free(sim->stall_boundary);
    free(sim->stall_opt);
    free(sim->stall_mem);
    free(sim->report.summary.links);
    free(sim);
}

static struct mpress_sim *sim_new(const struct mpress_plan *plan,
                                  const struct mpress_sim_options *opt)
{
    struct mpress_sim *sim = calloc(1, sizeof(*sim));
    if (!sim)
        return NULL;
    sim->plan = plan;
    sim->n_gpus = plan->topology.n_gpus;
    sim->n_stages = plan->n_stages;
    sim->M = plan->micro_batches;
    /* Async has no flush: the last iteration simulated is a drain with fewer forwards, so one
     * more is simulated after the reported one to keep it in the steady state. */
    sim->reported = opt->iterations - 1;
    sim->N = opt->iterations + (plan->schedule == MPRESS_SCHEDULE_ASYNC ? 1 : 0);
    sim->wait_for_memory = opt->wait_for_memory;
    return sim;
}

/* Per-GPU and per-iteration state, once the schedule has checked the plan. */
static int setup_state(struct mpress_sim *sim, struct mpress_error *err)
{
    const struct mpress_plan *plan = sim->plan;
    struct mpress_run_summary *S = &sim->report.summary;
    int G = sim->n_gpus, N = sim->N;
    for (int k = 0; k < plan->n_stages; k++)
        sim->stage_gpu[k] = plan->stages[k].gpu;
    S->n_gpus = G;
    S->oom_gpu = -1;
    S->host_capacity = plan->topology.host_memory_bytes;
    for (int g = 0; g < G; g++) {
        S->gpus[g].gpu = g;
        S->gpus[g].stage = -1;
        S->gpus[g].capacity = plan->topology.gpus[g].memory_bytes;
        sim->capacity[g] = plan->topology.gpus[g].memory_bytes;
    }
    for (int k = 0; k < plan->n_stages; k++)
        S->gpus[plan->stages[k].gpu].stage = k;
    sim->capacity[G] = plan->topology.host_memory_bytes;
    size_t gn = (size_t)G * (size_t)N;
    sim->iter_end = malloc((size_t)N * sizeof(double));
    sim->iter_steps = calloc((size_t)N, sizeof(int));
    sim->busy = calloc(gn, sizeof(double));
    sim->stall_swap = calloc(gn, sizeof(double));
    sim->stall_boundary = calloc(gn, sizeof(double));
    sim->stall_opt = calloc(gn, sizeof(double));
    sim->stall_mem = calloc(gn, sizeof(double));
    if (!sim->iter_end || !sim->iter_steps || !sim->busy || !sim->stall_swap ||
        !sim->stall_boundary || !sim->stall_opt || !sim->stall_mem)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    for (int i = 0; i < N; i++)
        sim->iter_end[i] = -1;
    return 0;
}

static int simulate(struct mpress_sim *sim, struct mpress_error *err)
{
    struct mpress_sched_options so;
    mpress_sched_options_init(&so);
    so.iterations = sim->N;
    int rc = sim->sched ? 0 : mpress_sched_create(sim->plan, &so, &sim->sched, err);
    if (rc || (rc = setup_state(sim, err)) || (rc = sim_net_setup(sim, err)) ||
        (rc = setup_tasks(sim, err)))
        return rc;
    sim->active = malloc(((size_t)sim->n_tasks + 1) * sizeof(int));
    sim->scratch = malloc(((size_t)sim->n_tasks + (size_t)sim->n_res + 1) * sizeof(int));
    sim->busy_res = malloc(((size_t)sim->n_res + 1) * sizeof(int));
    if (!sim->active || !sim->scratch || !sim->busy_res)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    count_flops(sim);
    sim->now = 0;
    sim_apply_initial(sim);
    if (sim_run_events(sim))
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    /* The schedule refuses graphs with a cycle, so this is a safety net for the engine. */
    for (int t = 0; t < sim->n_tasks; t++)
        if (sim->tasks[t].state != 3) {
            const struct mpress_sim_task *P = &sim->tasks[t].pub;
            return mpress_error_set(err, MPRESS_EINPUT, "the plan deadlocks: %s of stage %d, "
                                    "iteration %d, micro-batch %d, op %d never ran",
                                    mpress_task_kind_name(P->kind), P->stage, P->iteration,
                                    P->micro_batch, P->op);
        }
    if (summarize(sim) || sim->failed)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    return 0;
}

int mpress_sim_run(const struct mpress_plan *plan, const struct mpress_sim_options *opt,
                   struct mpress_sim **out, struct mpress_error *err)
{
    return mpress_sim_run_sched(plan, NULL, opt, out, err);
}

int mpress_sim_run_sched(const struct mpress_plan *plan, struct mpress_sched *sched,
                         const struct mpress_sim_options *opt, struct mpress_sim **out,
                         struct mpress_error *err)
{
    *out = NULL;
    struct mpress_sim_options dflt;
    if (!opt) {
        mpress_sim_options_init(&dflt);
        opt = &dflt;
    }
    if (opt->iterations < 1 || opt->iterations >= MPRESS_SCHED_MAX_TASKS) {
        /* async adds one iteration: keep it countable */
        mpress_sched_destroy(sched);
        return mpress_error_set(err, MPRESS_EUSAGE, opt->iterations < 1
                                ? "iterations is %d, must be >= 1"
                                : "iterations is %d, more than the schedule can count",
                                opt->iterations);
    }
    struct mpress_sim *sim = sim_new(plan, opt);
    if (!sim) {
        mpress_sched_destroy(sched);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    sim->sched = sched;
    int rc = simulate(sim, err);
    if (rc) {
        mpress_sim_destroy(sim);
        return rc;
    }
    *out = sim;
    return 0;
}

const struct mpress_sim_summary *mpress_sim_summary_get(const struct mpress_sim *sim)
{
    return &sim->report.summary;
}

const struct mpress_run_report *mpress_sim_run_report(const struct mpress_sim *sim)
{
    return &sim->report;
}

const struct mpress_sched *mpress_sim_sched(const struct mpress_sim *sim)
{
    return sim->sched;
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
                                                   enum mpress_task_kind kind, int stage,
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
    return mpress_run_memory_at(&sim->report, gpu, t);
}

json_t *mpress_sim_report_json(const struct mpress_sim *sim)
{
    return mpress_run_report_json(&sim->report);
}

char *mpress_sim_trace(const struct mpress_sim *sim)
{
    return mpress_run_trace(&sim->report);
}

char *mpress_sim_svg(const struct mpress_sim *sim)
{
    return mpress_run_svg(&sim->report);
}

char *mpress_sim_render(const struct mpress_sim *sim)
{
    return mpress_run_render(&sim->report);
}

char *mpress_sim_oom_text(const struct mpress_sim *sim)
{
    return mpress_run_oom_text(&sim->report);
}
