/* `mpress explain`: a plan in words and tables, from the plan file alone. It reads what the
 * planner decided and predicted; the only arithmetic here is bookkeeping that a reader could
 * redo by hand (sums of bytes, copy time = bytes / link bandwidth), stated next to each number.
 * The simulator is what checks the plan; explain only says what the plan is. */
#include <stdio.h>
#include <stdlib.h>

#include "mpress/planner.h"
#include "plan_internal.h"
#include "strbuf.h"

/* Bytes in GiB (2^30), the unit every command prints sizes in; rates stay in GB/s. */
static double gib(uint64_t v)
{
    return (double)v / 1073741824.0;
}

/* Micro-batches whose saved tensors stage k holds at once under the plan's schedule. */
static int in_flight(const struct mpress_plan *plan, int k)
{
    return plan_in_flight(plan->schedule, plan->n_stages, k, plan->micro_batches);
}

static double host_bw(const struct mpress_topology *tp, int g)
{
    double bw = tp->pcie_bytes_per_s;
    int s = tp->gpus[g].pcie_switch;
    if (s >= 0 && s < tp->n_switches && tp->switches[s].uplink_bytes_per_s < bw)
        bw = tp->switches[s].uplink_bytes_per_s;
    return bw;
}

static const char *short_range(const struct mpress_profile *pr, int first, int last, char *out,
                               size_t size)
{
    snprintf(out, size, "%s .. %s", pr->ops[first].name, pr->ops[last].name);
    return out;
}

char *mpress_plan_explain(const struct mpress_plan *plan)
{
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_topology *tp = &plan->topology;
    struct mpress_strbuf b = {0};
    char tmp[256];
    int S = plan->n_stages, M = plan->micro_batches;

    sb_printf(&b, "Plan for %s (%d layers, hidden %d, sequence %d, micro-batch %d, %s, %s) on %s "
            "(%d GPUs)\n",
        pr->model.name, pr->model.layers, pr->model.hidden, pr->model.seq,
        pr->model.micro_batch, pr->model.dtype, pr->model.optimizer, tp->name, tp->n_gpus);
    sb_printf(&b, "made by %s with policy %s; solver %s", plan->generator, plan->policy,
        plan->solver.status);
    if (plan->solver.gap > 0)
        sb_printf(&b, " (gap %.2f %%)", plan->solver.gap * 100);
    sb_printf(&b, "\nschedule %s, %d micro-batches per iteration, prefetch lookahead %d ops\n",
        mpress_schedule_name(plan->schedule), M, plan->prefetch_lookahead);
    sb_printf(&b, "predicted: %.4f s per iteration, %.3f samples/s\n\n", plan->iteration_s,
        plan->samples_per_s);

    /* Stages */
    sb_printf(&b, "Stages (one per GPU, in pipeline order)\n");
    sb_printf(&b, "%-5s %-4s %-44s %9s %10s %10s %9s %s\n", "stage", "gpu", "ops", "params",
        "fwd ms/mb", "bwd ms/mb", "in flight", "optimizer");
    for (int k = 0; k < S; k++) {
        const struct mpress_plan_stage *s = &plan->stages[k];
        uint64_t params = 0;
        double f = 0, bw = 0;
        for (int o = s->first_op; o <= s->last_op; o++) {
            params += pr->ops[o].params;
            f += pr->ops[o].fwd_s;
            bw += pr->ops[o].bwd_s;
        }
        sb_printf(&b, "%-5d %-4d %-44s %8.3fB %10.3f %10.3f %9d %s\n", k, s->gpu,
            short_range(pr, s->first_op, s->last_op, tmp, sizeof(tmp)), params / 1e9, f * 1e3,
            bw * 1e3, in_flight(plan, k), s->optimizer_on_host ? "host (CPU step)" : "gpu");
    }
    sb_printf(&b,
              "(in flight: micro-batches whose saved tensors the stage holds at once under %s)\n\n",
              mpress_schedule_name(plan->schedule));

    /* What each GPU holds */
    sb_printf(&b, "What each GPU holds at its predicted peak (GiB)\n");
    sb_printf(&b, "%-4s %5s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "gpu", "stage",
        "capacity", "peak", "bound", "weights", "grads", "optim", "activ", "parked", "working",
        "buffers", "reserve", "free");
    for (int i = 0; i < plan->n_gpus; i++) {
        const struct mpress_plan_gpu *g = &plan->gpus[i];
        char st[8];
        snprintf(st, sizeof(st), g->stage >= 0 ? "%d" : "-", g->stage);
        double fr = (double)g->capacity - (double)g->peak;
        sb_printf(&b,
                  "%-4d %5s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f "
                  "%8.2f\n",
            g->gpu, st, gib(g->capacity), gib(g->peak), gib(g->bound), gib(g->weights),
            gib(g->gradients),
            gib(g->optimizer), gib(g->activations), gib(g->parked), gib(g->working),
            gib(g->buffers), gib(g->reserve), fr / 1073741824.0);
    }
    sb_printf(&b, "(peak: the working set's workspace at its op's moment, beside the kept tensors "
                  "of that moment; bound: the largest workspace beside every kept tensor, what the "
                  "planner keeps within capacity)\n\n");

    /* Where the saved tensors go, per stage and action */
    sb_printf(&b, "Saved tensors by stage and action: bytes freed on the stage's GPU at its peak "
            "(bytes per micro-batch x micro-batches in flight) and seconds each iteration adds "
            "to the work (recompute: forward time run again; swaps: copy time out and back at "
            "the link's bandwidth, hidden where it overlaps compute)\n");
    sb_printf(&b, "%-5s %-10s %7s %12s %12s %14s  %s\n", "stage", "action", "tensors", "GiB per mb",
        "GiB freed", "s added/iter", "where");
    for (int k = 0; k < S; k++) {
        const struct mpress_plan_stage *s = &plan->stages[k];
        for (int act = MPRESS_ACTION_KEEP; act <= MPRESS_ACTION_D2D_SWAP; act++) {
            int n = 0;
            uint64_t bytes = 0;
            double added = 0;
            uint64_t to_peer[MPRESS_MAX_GPUS] = {0};
            for (int o = s->first_op; o <= s->last_op; o++)
                for (int j = 0; j < pr->ops[o].n_tensors; j++) {
                    const struct mpress_plan_action *a = NULL;
                    for (int i = 0; i < plan->n_actions; i++)
                        if (plan->actions[i].op == o && plan->actions[i].tensor == j) {
                            a = &plan->actions[i];
                            break;
                        }
                    int this_act = a ? (int)a->action : MPRESS_ACTION_KEEP;
                    if (this_act != act)
                        continue;
                    const struct mpress_saved_tensor *t = &pr->ops[o].tensors[j];
                    n++;
                    bytes += t->bytes;
                    if (act == MPRESS_ACTION_RECOMPUTE)
                        added += t->recompute_s * M;
                    else if (act == MPRESS_ACTION_HOST_SWAP)
                        added += 2.0 * (double)t->bytes / host_bw(tp, s->gpu) * M;
                    else if (act == MPRESS_ACTION_D2D_SWAP && a) {
                        /* shares move at once over their own links: the slowest one counts */
                        double worst = 0;
                        for (int q = 0; q < a->n_peers; q++) {
                            double c = (double)a->peer_bytes[q] /
                                       plan_boundary_bw(tp, s->gpu, a->peers[q]);
                            if (c > worst)
                                worst = c;
                            if (a->peers[q] >= 0 && a->peers[q] < MPRESS_MAX_GPUS)
                                to_peer[a->peers[q]] += a->peer_bytes[q];
                        }
                        added += 2.0 * worst * M;
                    }
                }
            if (!n)
                continue;
            char where[256] = "";
            size_t wl = 0;
            if (act == MPRESS_ACTION_KEEP)
                snprintf(where, sizeof(where), "stay on gpu %d", s->gpu);
            else if (act == MPRESS_ACTION_RECOMPUTE)
                snprintf(where, sizeof(where), "dropped after forward, rerun before backward");
            else if (act == MPRESS_ACTION_HOST_SWAP)
                snprintf(where, sizeof(where), "host memory over PCIe (%.1f GB/s)",
                         host_bw(tp, s->gpu) / 1e9);
            else
                for (int g = 0; g < tp->n_gpus && wl < sizeof(where) - 48; g++)
                    if (to_peer[g])
                        wl += (size_t)snprintf(where + wl, sizeof(where) - wl,
                                               "%sgpu %d %.3f GiB/mb (%.0f GB/s)",
                                               wl ? ", " : "", g, gib(to_peer[g]),
                                               plan_boundary_bw(tp, s->gpu, g) / 1e9);
            double freed = act == MPRESS_ACTION_KEEP ? 0 : gib(bytes) * in_flight(plan, k);
            sb_printf(&b, "%-5d %-10s %7d %12.3f %12.3f %14.4f  %s\n", k,
                mpress_action_name((enum mpress_action)act), n, gib(bytes), freed, added, where);
        }
    }
    sb_printf(&b, "\n");

    /* Baselines */
    if (plan->n_baselines > 0) {
        sb_printf(&b, "Baselines under the same cost model\n");
        sb_printf(&b, "%-10s %-5s %12s %12s\n", "policy", "fits", "iteration s", "this plan");
        for (int i = 0; i < plan->n_baselines; i++) {
            const struct mpress_plan_baseline *bl = &plan->baselines[i];
            char sp[32] = "-";
            if (bl->fits && plan->iteration_s > 0)
                snprintf(sp, sizeof(sp), "%.2fx faster", bl->iteration_s / plan->iteration_s);
            sb_printf(&b, "%-10s %-5s %12.4f %12s\n", bl->policy, bl->fits ? "yes" : "no",
                bl->iteration_s, bl->fits ? sp : "(does not fit)");
        }
    }
    return sb_finish(&b);
}
