/* The comparison table: an mpress plan beside the systems a user would run instead on the
 * same server (mpress/compare.h): the ZeRO policies (zero.c, simulated through
 * lib/sched/lower_dp.c) and Megatron-style recompute on the plan's own partition, which are
 * ordinary plans judged by the planner's evaluator and the simulator. */
#include <stdlib.h>
#include <string.h>

#include "mpress/compare.h"
#include "mpress/mpress.h"
#include "mpress/sim.h"
#include "plan_internal.h"

/* Korthikanti et al. 2022, section 5 ("selective activation recomputation"): the attention
 * core's tensors that grow with s^2 are recomputed, everything else kept. */
static int selective_tensor(const struct mpress_op *op, const struct mpress_saved_tensor *t)
{
    return strcmp(op->kind, "attn_core") == 0 &&
           (strcmp(t->name, "softmax_out") == 0 || strcmp(t->name, "dropout_mask") == 0 ||
            strcmp(t->name, "dropout_out") == 0);
}

int mpress_recompute_plan(const struct mpress_plan *plan, int selective, struct mpress_plan *out,
                          struct mpress_plan_eval *ev, struct mpress_error *err)
{
    const struct mpress_profile *p = &plan->profile;
    struct mpress_assignment a;
    memset(&a, 0, sizeof(a));
    mpress_plan_init(out);
    int rc = mpress_assignment_init(&a, p, err);
    if (rc)
        return rc;
    a.n_stages = plan->n_stages;
    for (int k = 0; k < plan->n_stages; k++) {
        a.stages[k] = plan->stages[k];
        a.stages[k].optimizer_on_host = 0;   /* Megatron steps on the GPU */
    }
    for (int j = 0; j < a.n_actions; j++) {
        struct mpress_plan_action *ac = &a.actions[j];
        const struct mpress_op *op = &p->ops[ac->op];
        int last = p->n_ops - 1;
        for (int k = 0; k < plan->n_stages; k++)
            if (ac->op >= plan->stages[k].first_op && ac->op <= plan->stages[k].last_op)
                last = plan->stages[k].last_op;
        enum mpress_action kind = !selective || selective_tensor(op, &op->tensors[ac->tensor])
                                      ? MPRESS_ACTION_RECOMPUTE
                                      : MPRESS_ACTION_KEEP;
        ac->action = kind;
        ac->n_peers = 0;
        ac->evict_after_op = kind == MPRESS_ACTION_KEEP ? -1 : ac->op;
        ac->prefetch_before_op = plan_prefetch_point(kind, ac->op, last);
    }
    if ((rc = mpress_profile_copy(&out->profile, p, err)))
        goto fail;
    /* One rerun of an op regenerates every tensor it produces (Megatron reruns the attention
     * core once for its three s^2 tensors, the layer's forward once under full recompute),
     * but each saved tensor carries its producer's whole forward as recompute_s, which the
     * evaluator and the simulator add per tensor. So in these plans only the first
     * recomputed tensor of each producer keeps it. */
    char *charged = calloc((size_t)p->n_ops, 1);
    if (!charged) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto fail;
    }
    for (int j = 0; j < a.n_actions; j++) {
        if (a.actions[j].action != MPRESS_ACTION_RECOMPUTE)
            continue;
        struct mpress_saved_tensor *ts = &out->profile.ops[a.actions[j].op]
                                              .tensors[a.actions[j].tensor];
        int ro = ts->recompute_op >= 0 && ts->recompute_op < p->n_ops ? ts->recompute_op
                                                                      : a.actions[j].op;
        if (charged[ro])
            ts->recompute_s = 0;
        charged[ro] = 1;
    }
    free(charged);
    rc = mpress_plan_evaluate(&out->profile, &plan->topology, plan->schedule,
                              plan->micro_batches, &a, ev, err);
    if (rc)
        goto fail;
    snprintf(out->generator, sizeof(out->generator), "mpress %s", mpress_version());
    snprintf(out->policy, sizeof(out->policy), "%s", selective ? "megatron-sel" : "megatron-full");
    out->topology = plan->topology;
    out->schedule = plan->schedule;
    out->micro_batches = plan->micro_batches;
    out->prefetch_lookahead = plan_schedule_prefetches(&out->profile, &a);
    out->n_stages = a.n_stages;
    out->stages = calloc((size_t)a.n_stages, sizeof(*out->stages));
    out->n_gpus = plan->topology.n_gpus;
    out->gpus = calloc((size_t)out->n_gpus, sizeof(*out->gpus));
    if (!out->stages || !out->gpus) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto fail;
    }
    memcpy(out->stages, a.stages, sizeof(*out->stages) * (size_t)a.n_stages);
    memcpy(out->gpus, ev->gpus, sizeof(*out->gpus) * (size_t)out->n_gpus);
    out->n_actions = a.n_actions;
    out->actions = a.actions;
    a.actions = NULL;
    out->iteration_s = ev->iteration_s;
    out->samples_per_s = ev->samples_per_s;
    snprintf(out->solver.status, sizeof(out->solver.status), "heuristic");
    out->solver.nodes = -1;
    mpress_assignment_finish(&a);
    return 0;
fail:
    mpress_assignment_finish(&a);
    mpress_plan_finish(out);
    return rc;
}

/* The fullest GPU of a plan's predictions: the largest peak over capacity. */
static void fullest(const struct mpress_plan_gpu *g, int n, uint64_t *peak, uint64_t *cap)
{
    *peak = *cap = 0;
    double best = -1e300;
    for (int i = 0; i < n; i++) {
        double over = (double)g[i].peak - (double)g[i].capacity;
        if (over > best) {
            best = over;
            *peak = g[i].peak;
            *cap = g[i].capacity;
        }
    }
}

static int simulate(const struct mpress_plan *plan, struct mpress_sched *sched, int iterations,
                    struct mpress_compare_row *row, struct mpress_error *err)
{
    struct mpress_sim_options so;
    mpress_sim_options_init(&so);
    so.iterations = iterations;
    struct mpress_sim *sim = NULL;
    int rc = mpress_sim_run_sched(plan, sched, &so, &sim, err);
    if (rc)
        return rc;
    const struct mpress_sim_summary *S = mpress_sim_summary_get(sim);
    row->simulated_s = S->iteration_s;
    row->sim_oom = S->out_of_memory;
    row->sim_peak = 0;
    for (int g = 0; g < S->n_gpus; g++)
        if (S->gpus[g].peak > row->sim_peak)
            row->sim_peak = S->gpus[g].peak;
    mpress_sim_destroy(sim);
    return 0;
}

/* Data-parallel simulations replay two iterations (the second is the steady state); pipeline
 * plans three, as `mpress run` does. */
#define COMPARE_DP_ITERATIONS 2
#define COMPARE_PIPE_ITERATIONS 3

static int dp_row(const struct mpress_profile *p, const struct mpress_topology *topo, int M,
                  enum mpress_dp_policy pol, int ck, int do_sim, struct mpress_compare_row *row,
                  struct mpress_error *err)
{
    struct mpress_dp_config c = {pol, ck, M};
    struct mpress_dp_eval ev;
    int rc = mpress_dp_evaluate(p, topo, &c, &ev, err);
    if (rc)
        return rc;
    snprintf(row->policy, sizeof(row->policy), "%s%s", mpress_dp_policy_name(pol),
             ck ? "+ckpt" : "");
    row->fits = ev.fits;
    row->peak = ev.peak;
    row->capacity = ev.capacity;
    row->samples = ev.samples;
    row->predicted_s = ev.fits ? ev.iteration_s : 0;
    row->samples_per_s = ev.fits ? ev.samples_per_s : 0;
    if (!ev.fits || !do_sim)
        return 0;
    struct mpress_plan dp;
    if ((rc = mpress_dp_plan(p, topo, &c, &ev, &dp, err)))
        return rc;
    struct mpress_sched_options so;
    mpress_sched_options_init(&so);
    so.iterations = COMPARE_DP_ITERATIONS;
    so.tied_exchange = 0;
    struct mpress_sched *sched = NULL;
    rc = mpress_sched_create_dp(&dp, &c, &so, &sched, err);
    if (!rc)
        rc = simulate(&dp, sched, COMPARE_DP_ITERATIONS, row, err);
    mpress_plan_finish(&dp);
    return rc;
}

static int pipe_row(const struct mpress_plan *plan, const char *name, int fits, int do_sim,
                    struct mpress_compare_row *row, struct mpress_error *err)
{
    snprintf(row->policy, sizeof(row->policy), "%s", name);
    row->fits = fits;
    fullest(plan->gpus, plan->n_gpus, &row->peak, &row->capacity);
    row->samples = (double)plan->micro_batches *
                   (plan->profile.model.micro_batch > 0 ? plan->profile.model.micro_batch : 1);
    row->predicted_s = row->fits ? plan->iteration_s : 0;
    row->samples_per_s = row->fits ? plan->samples_per_s : 0;
    if (!row->fits || !do_sim)
        return 0;
    return simulate(plan, NULL, COMPARE_PIPE_ITERATIONS, row, err);
}

static int zero_rows(const struct mpress_profile *p, const struct mpress_topology *topo, int M,
                     int do_sim, struct mpress_compare *out, struct mpress_error *err)
{
    static const enum mpress_dp_policy order[] = {MPRESS_DP_ZERO_OFFLOAD, MPRESS_DP_ZERO3,
                                                  MPRESS_DP_ZERO_INFINITY};
    for (int i = 0; i < 3; i++)
        for (int ck = 0; ck < 2; ck++) {
            if (out->n_rows == MPRESS_COMPARE_MAX_ROWS)
                return mpress_error_set(err, MPRESS_ESYSTEM, "too many rows");
            int rc = dp_row(p, topo, M, order[i], ck, do_sim, &out->rows[out->n_rows++], err);
            if (rc)
                return rc;
        }
    return 0;
}

int mpress_compare_zero(const struct mpress_profile *p, const struct mpress_topology *topo,
                        int micro_batches, int do_sim, struct mpress_compare *out,
                        struct mpress_error *err)
{
    memset(out, 0, sizeof(*out));
    return zero_rows(p, topo, micro_batches, do_sim, out, err);
}

int mpress_compare_create(const struct mpress_plan *plan, int do_sim, struct mpress_compare *out,
                          struct mpress_error *err)
{
    memset(out, 0, sizeof(*out));
    /* "mpress", or "mpress (greedy)" for a plan a baseline policy made */
    char name[32];
    snprintf(name, sizeof(name), "mpress%s%.16s%s", strcmp(plan->policy, "ilp") ? " (" : "",
             strcmp(plan->policy, "ilp") ? plan->policy : "", strcmp(plan->policy, "ilp") ? ")" : "");
    int rc = pipe_row(plan, name, 1, do_sim, &out->rows[out->n_rows++], err);
    if (rc)
        return rc;
    if ((rc = zero_rows(&plan->profile, &plan->topology, plan->micro_batches, do_sim, out,
                        err)))
        return rc;
    for (int sel = 1; sel >= 0; sel--) {
        struct mpress_plan rp;
        struct mpress_plan_eval ev;
        if ((rc = mpress_recompute_plan(plan, sel, &rp, &ev, err)))
            return rc;
        struct mpress_compare_row *row = &out->rows[out->n_rows++];
        rc = pipe_row(&rp, sel ? "megatron-selective" : "megatron-full", ev.fits, do_sim, row,
                      err);
        mpress_plan_finish(&rp);
        if (rc)
            return rc;
    }
    const struct mpress_compare_row *m = &out->rows[0];
    for (int i = 0; i < out->n_rows; i++) {
        struct mpress_compare_row *r = &out->rows[i];
        r->speedup = r->fits && r->samples_per_s > 0 && m->samples_per_s > 0
                         ? m->samples_per_s / r->samples_per_s : 0;
    }
    return 0;
}
