/* Test fixture tool: writes a simple mpress-plan so that `mpress run` and `mpress explain` can
 * be exercised without the planner. Stages split the ops evenly in op count, stage k on GPU
 * k; the policy decides stage 0's saved tensors (the heaviest stage under 1F1B):
 *   none       keep everything
 *   host       host_swap all of stage 0's tensors
 *   d2d        d2d_swap them, split in halves over the last two GPUs
 *   recompute  recompute them
 *   mix        cycle through d2d, host_swap and recompute
 * Predictions are left at zero except the memory breakdown's model states and reserve: this
 * is a fixture, not a plan anyone should trust. MODEL "toy" is a hand-made 8-op profile that
 * does not depend on the analytic model (so CLI goldens stay put when the model changes).
 * usage: make_plan OUT MODEL TOPOLOGY GPUS MICRO_BATCHES SCHEDULE POLICY */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpress/model.h"
#include "mpress/mpress.h"

/* 8 ops of 10 ms forward / 20 ms backward, 1 GB of saved tensors each in two tensors, 0.5 GB
 * model states, 0.25 GB boundary outputs. */
static int toy_profile(struct mpress_profile *pr)
{
    snprintf(pr->source, sizeof(pr->source), "analytic");
    snprintf(pr->device, sizeof(pr->device), "V100-SXM2-32GB");
    struct mpress_model_config *m = &pr->model;
    snprintf(m->name, sizeof(m->name), "toy");
    snprintf(m->family, sizeof(m->family), "gpt");
    m->layers = 8;
    m->hidden = 1024;
    m->heads = 16;
    m->ffn = 4096;
    m->seq = 1024;
    m->vocab = 1024;
    m->micro_batch = 2;
    snprintf(m->dtype, sizeof(m->dtype), "fp16");
    snprintf(m->optimizer, sizeof(m->optimizer), "adam");
    pr->n_ops = 8;
    pr->ops = calloc(8, sizeof(*pr->ops));
    if (!pr->ops)
        return -1;
    for (int o = 0; o < 8; o++) {
        struct mpress_op *op = &pr->ops[o];
        snprintf(op->name, sizeof(op->name), "layer%d", o);
        snprintf(op->kind, sizeof(op->kind), "block");
        op->layer = o;
        op->fwd_s = 0.010;
        op->bwd_s = 0.020;
        op->fwd_flops = 1e12;
        op->params = 31250000;
        op->param_bytes = 62500000;
        op->grad_bytes = 62500000;
        op->optim_bytes = 375000000;
        op->workspace_bytes = 50000000;
        op->output_bytes = 250000000;
        op->n_tensors = 2;
        op->tensors = calloc(2, sizeof(*op->tensors));
        if (!op->tensors)
            return -1;
        for (int j = 0; j < 2; j++) {
            struct mpress_saved_tensor *t = &op->tensors[j];
            snprintf(t->id, sizeof(t->id), "layer%d.%s", o, j ? "b" : "a");
            snprintf(t->name, sizeof(t->name), "%s", j ? "b" : "a");
            t->bytes = j ? 600000000 : 400000000;
            t->recompute_s = 0.004;
            t->recompute_op = o;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: make_plan OUT MODEL TOPOLOGY GPUS MICRO_BATCHES SCHEDULE "
                        "POLICY\n");
        return 2;
    }
    struct mpress_error err;
    mpress_error_clear(&err);
    struct mpress_plan *p = malloc(sizeof(*p));
    struct mpress_model_config mc;
    if (!p)
        return 4;
    mpress_plan_init(p);
    int S = atoi(argv[4]);
    if (mpress_topology_resolve(argv[3], &p->topology, &err) ||
        mpress_topology_restrict(&p->topology, S, &err))
        goto fail;
    if (strcmp(argv[2], "toy") == 0) {
        if (toy_profile(&p->profile))
            return 4;
    } else {
        const struct mpress_gpu_spec *gs = mpress_gpu_spec_find(p->topology.gpus[0].model);
        if (mpress_model_find(argv[2], &mc)) {
            fprintf(stderr, "make_plan: unknown model %s\n", argv[2]);
            return 2;
        }
        if (!gs || mpress_profile_analytic(&mc, gs, &p->profile, &err))
            goto fail;
    }
    snprintf(p->generator, sizeof(p->generator), "mpress test fixture");
    snprintf(p->policy, sizeof(p->policy), "fixture");
    if (mpress_schedule_parse(argv[6], &p->schedule))
        return 2;
    p->micro_batches = atoi(argv[5]);
    p->prefetch_lookahead = 2;
    const struct mpress_profile *pr = &p->profile;
    p->n_stages = S;
    p->stages = calloc((size_t)S, sizeof(*p->stages));
    p->n_gpus = p->topology.n_gpus;
    p->gpus = calloc((size_t)p->n_gpus, sizeof(*p->gpus));
    int total = 0;
    for (int o = 0; o < pr->n_ops; o++)
        total += pr->ops[o].n_tensors;
    p->actions = calloc((size_t)total, sizeof(*p->actions));
    if (!p->stages || !p->gpus || !p->actions)
        return 4;
    for (int k = 0; k < S; k++) {
        p->stages[k].first_op = pr->n_ops * k / S;
        p->stages[k].last_op = pr->n_ops * (k + 1) / S - 1;
        p->stages[k].gpu = k;
    }
    const char *pol = argv[7];
    int n = 0, cyc = 0;
    for (int o = 0; o < pr->n_ops; o++)
        for (int j = 0; j < pr->ops[o].n_tensors; j++) {
            struct mpress_plan_action *a = &p->actions[n++];
            a->op = o;
            a->tensor = j;
            a->action = MPRESS_ACTION_KEEP;
            a->evict_after_op = a->prefetch_before_op = -1;
            if (o > p->stages[0].last_op || strcmp(pol, "none") == 0)
                continue;
            int kind = strcmp(pol, "host") == 0        ? MPRESS_ACTION_HOST_SWAP
                       : strcmp(pol, "d2d") == 0       ? MPRESS_ACTION_D2D_SWAP
                       : strcmp(pol, "recompute") == 0 ? MPRESS_ACTION_RECOMPUTE
                                                       : MPRESS_ACTION_D2D_SWAP + 0 * cyc;
            if (strcmp(pol, "mix") == 0) {
                static const int order[] = {MPRESS_ACTION_D2D_SWAP, MPRESS_ACTION_HOST_SWAP,
                                            MPRESS_ACTION_RECOMPUTE};
                kind = order[cyc++ % 3];
            }
            a->action = (enum mpress_action)kind;
            a->evict_after_op = a->prefetch_before_op = o;
            if (kind == MPRESS_ACTION_D2D_SWAP) {
                uint64_t b = pr->ops[o].tensors[j].bytes;
                a->n_peers = S > 2 ? 2 : 1;
                a->peers[0] = S - 1;
                a->peer_bytes[0] = a->n_peers == 2 ? b / 2 : b;
                if (a->n_peers == 2) {
                    a->peers[1] = S - 2;
                    a->peer_bytes[1] = b - b / 2;
                }
            }
        }
    p->n_actions = n;
    for (int g = 0; g < p->n_gpus; g++) {
        struct mpress_plan_gpu *G = &p->gpus[g];
        G->gpu = g;
        G->stage = g < S ? g : -1;
        G->capacity = p->topology.gpus[g].memory_bytes;
        G->reserve = p->topology.gpus[g].reserve_bytes;
        if (g < S)
            for (int o = p->stages[g].first_op; o <= p->stages[g].last_op; o++) {
                G->weights += pr->ops[o].param_bytes;
                G->gradients += pr->ops[o].grad_bytes;
                G->optimizer += pr->ops[o].optim_bytes;
            }
        G->peak = G->weights + G->gradients + G->optimizer + G->reserve;
        G->bound = G->peak;
    }
    snprintf(p->solver.status, sizeof(p->solver.status), "heuristic");
    p->solver.nodes = -1;
    if (mpress_plan_save(argv[1], p, &err))
        goto fail;
    mpress_plan_finish(p);
    free(p);
    return 0;
fail:
    fprintf(stderr, "make_plan: %s\n", err.text);
    return err.code ? err.code : 4;
}
