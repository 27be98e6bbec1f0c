/* The greedy baseline at scale and where nothing can fit. (1) The shipped gpt3-2.7b V100
 * profile cut 32 times finer (its layer repeated 1024 times, 10,244 ops, 15,364 saved tensors,
 * times and bytes scaled by 1/32 and every layer varied by up to 20 %, so that no two tensors
 * are of one class) on dgx1 at 16 micro-batches: the greedy must fit, give a plan the plan
 * rules accept, and be no slower than recomputing every tensor (the recompute baseline,
 * which fits), like the greedy plan of the shipped profile (266 s of CPU before the greedy
 * scored its moves by trial evaluations, beyond this test's time limit). (2) GPUs too small for one micro-batch of each stage's
 * saved tensors besides its model states: no assignment fits, and the greedy must stop with
 * every tensor kept instead of moving them all. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shipped.h"
#include "mpress/mpress.h"
#include "tiny.h"

static int load(struct mpress_profile *p, struct mpress_topology *t)
{
    return load_shipped("gpt3-2.7b.v100.json", "dgx1", 0, p, t);
}

static void copy_op(struct mpress_op *dst, const struct mpress_op *src, double f, int layer,
                    int index)
{
    *dst = *src;
    dst->layer = layer;
    dst->fwd_s *= f, dst->bwd_s *= f, dst->fwd_flops *= f;
    dst->params = (uint64_t)((double)src->params * f);
    dst->param_bytes = (uint64_t)((double)src->param_bytes * f);
    dst->grad_bytes = (uint64_t)((double)src->grad_bytes * f);
    dst->optim_bytes = (uint64_t)((double)src->optim_bytes * f);
    dst->workspace_bytes = (uint64_t)((double)src->workspace_bytes * f);
    dst->output_bytes = (uint64_t)((double)src->output_bytes * f);
    snprintf(dst->name, sizeof(dst->name), "l%d.%d", layer, index);
    dst->tensors = calloc((size_t)(src->n_tensors ? src->n_tensors : 1), sizeof(*dst->tensors));
    for (int q = 0; q < src->n_tensors; q++) {
        dst->tensors[q] = src->tensors[q];
        dst->tensors[q].bytes = (uint64_t)((double)src->tensors[q].bytes * f);
        dst->tensors[q].recompute_s *= f;
        dst->tensors[q].recompute_op = index;
        snprintf(dst->tensors[q].id, sizeof(dst->tensors[q].id), "l%d.%d.%d", layer, index, q);
    }
}

/* The template's layer 0 repeated `layers` times between its first op and its ops after the
 * layer stack, scaled by 32 / layers and varied per layer. */
static void finer(const struct mpress_profile *src, int layers, struct mpress_profile *dst)
{
    int first = -1, last = -1;
    for (int i = 0; i < src->n_ops; i++)
        if (src->ops[i].layer == 0)
            last = i, first = first < 0 ? i : first;
    int per = last - first + 1, post = 0;
    for (int i = last + 1; i < src->n_ops; i++)
        post += src->ops[i].layer < 0;
    *dst = *src;
    dst->n_ops = first + layers * per + post;
    dst->ops = calloc((size_t)dst->n_ops, sizeof(*dst->ops));
    dst->model.layers = layers;
    int n = 0;
    for (int i = 0; i < first; i++, n++)
        copy_op(&dst->ops[n], &src->ops[i], 1.0, -1, n);
    for (int l = 0; l < layers; l++) {
        double f = 32.0 / layers * (0.8 + 0.4 * (tiny_rand() / 4294967296.0));
        for (int i = first; i <= last; i++, n++)
            copy_op(&dst->ops[n], &src->ops[i], f, l, n);
    }
    for (int i = last + 1; i < src->n_ops; i++)
        if (src->ops[i].layer < 0) {
            copy_op(&dst->ops[n], &src->ops[i], 1.0, -1, n);
            n++;
        }
}

int main(void)
{
    tiny_state_ = 0x853c49e6748fea9bULL;
    struct mpress_profile base, fine;
    struct mpress_topology t;
    if (load(&base, &t))
        return 1;
    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    o.micro_batches = 16;
    struct mpress_assignment a = {0}, b = {0};
    struct mpress_plan_eval ev, ev_base;
    struct mpress_error err;

    finer(&base, 1024, &fine);
    CHECK_INT(fine.n_ops, 10244);
    CHECK_INT(mpress_plan_baseline(&base, &t, &o, MPRESS_POLICY_GREEDY, &b, &ev_base, &err), 0);
    CHECK_INT(mpress_plan_baseline(&fine, &t, &o, MPRESS_POLICY_GREEDY, &a, &ev, &err), 0);
    CHECK(ev_base.fits);
    CHECK(ev.fits);
    CHECK_INT(mpress_plan_check(&fine, &t, o.micro_batches, a.n_stages, a.stages, a.n_actions,
                                a.actions, NULL, &err),
              0);
    struct mpress_assignment r = {0};
    struct mpress_plan_eval ev_rec;
    CHECK_INT(mpress_plan_baseline(&fine, &t, &o, MPRESS_POLICY_RECOMPUTE, &r, &ev_rec, &err), 0);
    CHECK(ev_rec.fits);
    CHECK_MSG(ev.iteration_s <= ev_rec.iteration_s, "greedy %.4f s, recompute %.4f s",
              ev.iteration_s, ev_rec.iteration_s);
    printf("greedy on %d ops: %.4f s (recompute %.4f s; shipped profile: greedy %.4f s)\n",
           fine.n_ops, ev.iteration_s, ev_rec.iteration_s, ev_base.iteration_s);
    mpress_assignment_finish(&r);
    mpress_assignment_finish(&a);
    mpress_assignment_finish(&b);
    mpress_profile_finish(&fine);

    /* (2) 6 GB GPUs: the model states and one micro-batch's tensors of a stage do not fit. */
    for (int g = 0; g < t.n_gpus; g++)
        t.gpus[g].memory_bytes = 6000 * MB;
    CHECK_INT(mpress_plan_baseline(&base, &t, &o, MPRESS_POLICY_GREEDY, &a, &ev, &err), 0);
    CHECK(!ev.fits);
    int moved = 0;
    for (int j = 0; j < a.n_actions; j++)
        moved += a.actions[j].action != MPRESS_ACTION_KEEP;
    for (int k = 0; k < a.n_stages; k++)
        moved += a.stages[k].optimizer_on_host;
    CHECK_INT(moved, 0);
    mpress_assignment_finish(&a);
    mpress_profile_finish(&base);
    return check_done();
}
