/* The executor's buffers and setup: the backend allocations it makes, the check that the
 * plan's profile is the model it names, the boundary cuts, the copies a recompute can find,
 * parameters and optimizer states, create and destroy (executor.c runs the tasks). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_internal.h"

double exec_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int exec_copy(struct mpress_exec *x, const struct mpress_task *t, int dst_dev, void *dst,
              int src_dev, const void *src, uint64_t bytes, struct mpress_error *err)
{
    if (!x->be->copy_ready || !t)
        return x->be->copy(x->be->ctx, dst_dev, dst, src_dev, src, bytes, err);
    pthread_mutex_lock(&x->lock);
    x->queue_moving[t->queue] = 1;
    pthread_mutex_unlock(&x->lock);
    double done = 0;
    int rc = x->be->copy_ready(x->be->ctx, dst_dev, dst, src_dev, src, bytes,
                               x->queue_ready[t->queue], &done, err);
    /* The bytes are there. Where the copy still has link time to wait out (--throttle), the
     * compute stream need not wait for it any more: on a GPU the copy's link time overlaps the
     * compute. Without link time the copy stays "moving" until its task has ended and freed
     * what it frees (the worker clears it): a compute task that started between the move and
     * the free found the evicted tensor still on the device, beside what it allocated, and a
     * plan packed to the byte ran out of memory. */
    if (!rc && done > exec_now_s()) {
        pthread_mutex_lock(&x->lock);
        x->queue_moving[t->queue] = 0;
        x->queue_link_done[t->queue] = done;
        exec_wake(x);
        pthread_mutex_unlock(&x->lock);
        rt_sleep_until(done);
    }
    return rc;
}

void mpress_exec_options_init(struct mpress_exec_options *o)
{
    memset(o, 0, sizeof(*o));
    o->seed = 1;
    o->pin_threads = 1;
}

int exec_gpu_of_stage(const struct mpress_exec *x, int k)
{
    return x->plan->stages[k].gpu;
}

/* ---- buffers ----------------------------------------------------------------------------- */

/* An allocation of `what`; on a GPU that is full it may wait for evictions to free memory
 * (exec_wait_for_evictions) and try again. */
static int xalloc_what(struct mpress_exec *x, struct xbuf *b, int dev, int kind, uint64_t bytes,
                       int zero, int locked, const char *what, struct mpress_error *err)
{
    int rc;
    while ((rc = x->be->alloc(x->be->ctx, dev, kind, bytes, what, &b->p, err)) ==
               MPRESS_EINFEASIBLE &&
           exec_wait_for_evictions(x, dev, locked, err))
        mpress_error_clear(err);
    if (rc)
        return rc;
    b->bytes = bytes;
    b->dev = dev;
    b->kind = kind;
    if (zero)
        return x->be->zero(x->be->ctx, dev, b->p, bytes, err);
    return 0;
}

static int xalloc_v(struct mpress_exec *x, struct xbuf *b, int dev, int kind, uint64_t bytes,
                    int zero, int locked, struct mpress_error *err, const char *fmt, va_list ap)
{
    char what[256];
    vsnprintf(what, sizeof(what), fmt, ap);
    return xalloc_what(x, b, dev, kind, bytes, zero, locked, what, err);
}

int exec_xalloc(struct mpress_exec *x, struct xbuf *b, int dev, int kind, uint64_t bytes,
                int zero, struct mpress_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = xalloc_v(x, b, dev, kind, bytes, zero, 0, err, fmt, ap);
    va_end(ap);
    return rc;
}

int exec_xalloc_locked(struct mpress_exec *x, struct xbuf *b, int dev, int kind, uint64_t bytes,
                       int zero, struct mpress_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = xalloc_v(x, b, dev, kind, bytes, zero, 1, err, fmt, ap);
    va_end(ap);
    return rc;
}

void exec_xfree(struct mpress_exec *x, struct xbuf *b)
{
    if (b->p)
        x->be->free(x->be->ctx, b->dev, b->kind, b->p, b->bytes);
    memset(b, 0, sizeof(*b));
}

/* "stage 1 (gpu 1), op layer1.qkv, <what>, micro-batch 2" */

/* ---- setup ------------------------------------------------------------------------------- */

/* The plan's profile must be the model it names, op for op. */
static int check_profile(const struct mpress_profile *pr, const struct mpress_model *m,
                         struct mpress_error *err)
{
    if (pr->n_ops != m->n_ops)
        return mpress_error_set(err, MPRESS_EINPUT, "the plan's profile has %d ops; model %s "
                                "(rebuilt from the profile's model config) has %d",
                                pr->n_ops, pr->model.name, m->n_ops);
    int wb, gb, ob;
    mpress_model_state_bytes(&m->config, &wb, &gb, &ob);
    for (int o = 0; o < m->n_ops; o++) {
        const struct mpress_op *po = &pr->ops[o];
        const struct mpress_model_op *mo = &m->ops[o];
        if (strcmp(po->name, mo->name) != 0 || strcmp(po->kind, mo->kind) != 0)
            return mpress_error_set(err, MPRESS_EINPUT, "profile op %d is %s (%s); the model "
                                    "has %s (%s)", o, po->name, po->kind, mo->name, mo->kind);
        if (po->n_tensors != mo->n_saved)
            return mpress_error_set(err, MPRESS_EINPUT, "profile op %s saves %d tensors; the "
                                    "model's saves %d", po->name, po->n_tensors, mo->n_saved);
        for (int j = 0; j < mo->n_saved; j++)
            if (po->tensors[j].bytes != mo->saved[j].bytes ||
                strcmp(po->tensors[j].name, mo->saved[j].role) != 0)
                return mpress_error_set(err, MPRESS_EINPUT, "profile tensor %s: %llu bytes; "
                                        "the model's %s.%s has %llu", po->tensors[j].id,
                                        (unsigned long long)po->tensors[j].bytes, mo->name,
                                        mo->saved[j].role,
                                        (unsigned long long)mo->saved[j].bytes);
        uint64_t wbytes = 0;
        for (int j = 0; j < mo->n_weights; j++)
            wbytes += mo->weights[j].bytes;
        if (po->param_bytes != wbytes || po->output_bytes != mo->output_bytes)
            return mpress_error_set(err, MPRESS_EINPUT, "profile op %s: %llu weight bytes and "
                                    "%llu output bytes; the model's: %llu and %llu", po->name,
                                    (unsigned long long)po->param_bytes,
                                    (unsigned long long)po->output_bytes,
                                    (unsigned long long)wbytes,
                                    (unsigned long long)mo->output_bytes);
    }
    return 0;
}

static int build_cuts(struct mpress_exec *x, struct mpress_error *err)
{
    const struct mpress_plan *plan = x->plan;
    int n = x->n_ops;
    for (int p = 0; p < n; p++)
        for (int r = 0; r < IO; r++)
            x->last_use[p * IO + r] = -1;
    for (int c = 0; c < n; c++)
        for (int i = 0; i < x->model.ops[c].n_inputs; i++) {
            const struct mpress_model_tensor *t = &x->model.ops[c].inputs[i];
            if (t->producer >= 0)
                x->last_use[t->producer * IO + t->producer_output] = c;
        }
    for (int k = 0; k + 1 < x->S; k++) {
        struct cut *ct = &x->cuts[k];
        int last = plan->stages[k].last_op;
        ct->prod = calloc((size_t)n * IO, sizeof(int));
        ct->idx = calloc((size_t)n * IO, sizeof(int));
        ct->off = calloc((size_t)n * IO, sizeof(uint64_t));
        if (!ct->prod || !ct->idx || !ct->off)
            return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        for (int p = 0; p <= last; p++)
            for (int r = 0; r < x->model.ops[p].n_outputs; r++)
                if (x->last_use[p * IO + r] > last) {
                    ct->prod[ct->n] = p;
                    ct->idx[ct->n] = r;
                    ct->off[ct->n] = ct->total;
                    ct->total += x->model.ops[p].outputs[r].bytes;
                    ct->n++;
                }
        if (ct->total != plan->profile.ops[last].output_bytes)
            return mpress_error_set(err, MPRESS_EINPUT, "the cut after op %s carries %llu bytes "
                                    "of tensors; the profile says %llu",
                                    x->model.ops[last].name, (unsigned long long)ct->total,
                                    (unsigned long long)plan->profile.ops[last].output_bytes);
    }
    return 0;
}

int exec_action_of(const struct mpress_exec *x, int op, int j)
{
    for (int i = 0; i < x->plan->n_actions; i++)
        if (x->plan->actions[i].op == op && x->plan->actions[i].tensor == j)
            return x->plan->actions[i].action;
    return MPRESS_ACTION_KEEP;
}

int exec_prefetch_point(const struct mpress_exec *x, int op, int j)
{
    for (int i = 0; i < x->plan->n_actions; i++)
        if (x->plan->actions[i].op == op && x->plan->actions[i].tensor == j)
            return x->plan->actions[i].prefetch_before_op < 0
                       ? op
                       : x->plan->actions[i].prefetch_before_op;
    return op;
}

/* Saved tensor j of op c is a plain copy of its producer's output 0. */
int exec_plain_copy(const struct mpress_model *m, int c, int j)
{
    const struct mpress_model_op *o = &m->ops[c];
    const struct mpress_model_tensor *t = &o->saved[j];
    if (t->producer == c || t->producer < 0)
        return 0;
    if (strcmp(o->kind, "attn_core") == 0 && o->inputs[0].producer == t->producer)
        return 0;
    return 1;
}

/* Whether output (q, 0) has a copy that is certainly on the stage's GPU when the recomputes
 * before the backward of op p run: a kept copy whose backward has not yet come (c <= p), one
 * recomputed in an earlier batch (later prefetch point) or earlier in the same batch, or a
 * swapped one brought back for an earlier slot, or for this one ahead of its own op's (the
 * schedule then lands it before the slot's recomputes). */
int exec_copy_present(const struct mpress_exec *x, int k, int q, int p, int before_op,
                        int before_j)
{
    const struct mpress_plan_stage *st = &x->plan->stages[k];
    for (int c = st->first_op; c <= st->last_op; c++)
        for (int j = 0; j < x->model.ops[c].n_saved; j++) {
            if (!exec_plain_copy(&x->model, c, j) || x->model.ops[c].saved[j].producer != q)
                continue;
            int a = exec_action_of(x, c, j);
            if (a == MPRESS_ACTION_KEEP && c <= p)
                return 1;
            if (a == MPRESS_ACTION_RECOMPUTE) {
                int pc = exec_prefetch_point(x, c, j);
                if (pc > p || (pc == p && (c < before_op || (c == before_op && j < before_j))))
                    return 1;
            }
            if (a == MPRESS_ACTION_HOST_SWAP || a == MPRESS_ACTION_D2D_SWAP) {
                int pc = exec_prefetch_point(x, c, j);
                if (c <= p && (pc > p || (pc == p && pc != c)))
                    return 1;
            }
        }
    return 0;
}

/* Marks the stage inputs a recompute on stage k can only regenerate from: the chain of
 * producers of what it needs, back to where a copy is present or into the previous stage. */
static void pin_walk(struct mpress_exec *x, int k, int q, int r, int p, int c0, int j0, int depth)
{
    const struct mpress_plan_stage *st = &x->plan->stages[k];
    if (q < 0 || depth > MAX_DEPTH)
        return;
    /* a copy that a consumer on the stage keeps (ln1's saved input, for a stage that begins at
     * ln1) serves before the stage input is held: pinning it anyway held a second copy of
     * the stage input for every micro-batch in flight, which the plan does not charge (a
     * memory-wall plan that recomputes layer0.qkv's input ran out of memory in every run,
     * test_pins_use_kept_copy) */
    if (r == 0 && exec_copy_present(x, k, q, p, c0, j0))
        return;
    if (q < st->first_op) {
        x->pinned[PIN(x, k, q, r)] = 1;
        return;
    }
    const struct mpress_model_op *o = &x->model.ops[q];
    for (int i = 0; i < o->n_inputs; i++)
        pin_walk(x, k, o->inputs[i].producer, o->inputs[i].producer_output, p, c0, j0,
                 depth + 1);
}

static void find_pins(struct mpress_exec *x)
{
    for (int i = 0; i < x->plan->n_actions; i++) {
        const struct mpress_plan_action *a = &x->plan->actions[i];
        if (a->action != MPRESS_ACTION_RECOMPUTE)
            continue;
        int k = x->stage_of[a->op];
        int p = a->prefetch_before_op < 0 ? a->op : a->prefetch_before_op;
        int prod = x->model.ops[a->op].saved[a->tensor].producer;
        if (prod == a->op) {
            const struct mpress_model_op *o = &x->model.ops[a->op];
            for (int in = 0; in < o->n_inputs; in++)
                pin_walk(x, k, o->inputs[in].producer, o->inputs[in].producer_output, p, a->op,
                         a->tensor, 0);
        } else {
            pin_walk(x, k, prod, 0, p, a->op, a->tensor, 0);
        }
    }
    for (int k = 1; k < x->S; k++) {
        const struct cut *ct = &x->cuts[k - 1];
        for (int i = 0; i < ct->n; i++)
            if (x->pinned[PIN(x, k, ct->prod[i], ct->idx[i])])
                x->pinned_bytes[exec_gpu_of_stage(x, k)] +=
                    x->model.ops[ct->prod[i]].outputs[ct->idx[i]].bytes *
                    (uint64_t)(x->plan->schedule == MPRESS_SCHEDULE_GPIPE || x->S - k > x->M
                                   ? x->M
                                   : x->S - k);
    }
}

/* Parameters: each stage holds its ops' weights, gradients and optimizer states; a tied
 * weight whose owner is on another stage is a full copy with its own states (stepped the same
 * way, so both copies stay equal); one on its owner's stage shares the weights. */
static int setup_params(struct mpress_exec *x, struct mpress_error *err)
{
    struct mpress_host_params *hp = &x->hp;
    int rc = mpress_host_params_create(&x->model, x->opt.seed, hp, err);
    if (rc)
        return rc;
    x->dp = calloc((size_t)hp->n + 1, sizeof(*x->dp));
    x->hostp = calloc((size_t)hp->n + 1, sizeof(*x->hostp));
    x->dp_alias = calloc((size_t)hp->n + 1, sizeof(int));
    if (!x->dp || !x->hostp || !x->dp_alias)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    for (int i = 0; i < hp->n; i++) {
        const struct mpress_host_param *p = &hp->p[i];
        const struct mpress_host_param *src = p->owner >= 0 ? &hp->p[p->owner] : p;
        int k = x->stage_of[p->op], g = exec_gpu_of_stage(x, k);
        int on_host = x->plan->stages[k].optimizer_on_host;
        const struct mpress_model_op *mo = &x->model.ops[p->op];
        const char *role = mo->weights[p->index].role;
        uint64_t bytes = p->n * (uint64_t)mpress_dtype_size(p->dtype);
        struct mpress_rt_param *d = &x->dp[i], *h = &x->hostp[i];
        d->dtype = h->dtype = p->dtype;
        d->n = h->n = p->n;
        d->decay = h->decay = src->decay;
        x->dp_alias[i] = p->owner >= 0 && x->stage_of[hp->p[p->owner].op] == k ? p->owner : -1;
        struct xbuf b;
#define ALLOC(dev, kind, nbytes, what_)                                                           \
    do {                                                                                         \
        if ((rc = exec_xalloc(x, &b, (dev), (kind), (nbytes), 1, err, "stage %d (gpu %d), op %s, "   \
                         "%s of weight %s", k, g, mo->name, (what_), role)) != 0)                 \
            return rc;                                                                           \
    } while (0)
        if (x->dp_alias[i] < 0) {
            ALLOC(g, MPRESS_MEM_WEIGHTS, bytes, "weights");
            d->w = b.p;
            if ((rc = x->be->upload(x->be->ctx, g, d->w, src->w, bytes, err)))
                return rc;
        }
        ALLOC(g, MPRESS_MEM_GRADIENTS, bytes, "gradients");
        d->g = b.p;
        if (x->dp_alias[i] >= 0)
            continue;           /* the owner's weights, step and states */
        int dev = on_host ? MPRESS_RT_HOST : g;
        struct mpress_rt_param *s = on_host ? h : d;
        uint64_t n4 = p->n * sizeof(float);
        if (src->master) {
            ALLOC(dev, MPRESS_MEM_OPTIMIZER, n4, "fp32 master weights");
            s->master = b.p;
            if ((rc = x->be->upload(x->be->ctx, dev, s->master, src->master, n4, err)))
                return rc;
        }
        ALLOC(dev, MPRESS_MEM_OPTIMIZER, n4, "momentum");
        s->m = b.p;
        if (!hp->sgd) {
            ALLOC(dev, MPRESS_MEM_OPTIMIZER, n4, "variance");
            s->v = b.p;
        }
        if (on_host) {
            ALLOC(MPRESS_RT_HOST, MPRESS_MEM_GRADIENTS, bytes, "gradient landing zone");
            h->g = b.p;
            /* the step's working weights (for fp32 models the master copy itself) */
            ALLOC(MPRESS_RT_HOST, MPRESS_MEM_WEIGHTS, bytes, "host weights");
            h->w = b.p;
            if ((rc = x->be->upload(x->be->ctx, MPRESS_RT_HOST, h->w, src->w, bytes, err)))
                return rc;
        }
#undef ALLOC
    }
    for (int i = 0; i < hp->n; i++)
        if (x->dp_alias[i] >= 0)
            x->dp[i].w = x->dp[x->dp_alias[i]].w;
    return 0;
}

static void free_param(struct mpress_exec *x, struct mpress_rt_param *p, int dev, int own_w)
{
    uint64_t bytes = p->n * (uint64_t)mpress_dtype_size(p->dtype), n4 = p->n * sizeof(float);
    if (own_w && p->w)
        x->be->free(x->be->ctx, dev, MPRESS_MEM_WEIGHTS, p->w, bytes);
    if (p->g)
        x->be->free(x->be->ctx, dev, MPRESS_MEM_GRADIENTS, p->g, bytes);
    if (p->master)
        x->be->free(x->be->ctx, dev, MPRESS_MEM_OPTIMIZER, p->master, n4);
    if (p->m)
        x->be->free(x->be->ctx, dev, MPRESS_MEM_OPTIMIZER, p->m, n4);
    if (p->v)
        x->be->free(x->be->ctx, dev, MPRESS_MEM_OPTIMIZER, p->v, n4);
    memset(p, 0, sizeof(*p));
}

void exec_free_step_state(struct mpress_exec *x)
{
    if (!x->out)
        return;
    for (size_t u = 0; u < (size_t)x->S * (size_t)x->M * (size_t)x->n_ops; u++)
        for (int r = 0; r < IO; r++) {
            exec_xfree(x, &x->out[u][r]);
            exec_xfree(x, &x->grad[u][r]);
        }
    for (int u = 0; u < x->M * x->n_ops; u++) {
        for (int j = 0; j < SV; j++) {
            struct saved_state *s = &x->saved[u][j];
            exec_xfree(x, &s->dev);
            for (int q = 0; q < MPRESS_MAX_GPUS; q++)
                exec_xfree(x, &s->part[q]);
            s->state = s->evicted = s->prefetched = s->prefetching = 0;
        }
    }
    int nb = x->M * (x->S - 1);
    for (int i = 0; i < nb; i++) {
        exec_xfree(x, &x->send_act[i]);
        exec_xfree(x, &x->recv_act[i]);
        exec_xfree(x, &x->send_grad[i]);
        exec_xfree(x, &x->recv_grad[i]);
    }
    for (int i = 0; i < x->n_tied; i++)
        exec_xfree(x, &x->tied[i].buf);
    x->n_tied = 0;
}

void mpress_exec_destroy(struct mpress_exec *x)
{
    if (!x)
        return;
    exec_free_step_state(x);
    for (int i = 0; x->dp && i < x->hp.n; i++) {
        int k = x->stage_of[x->hp.p[i].op];
        free_param(x, &x->dp[i], exec_gpu_of_stage(x, k), x->dp_alias[i] < 0);
        free_param(x, &x->hostp[i], MPRESS_RT_HOST, 1);
    }
    free(x->dp);
    free(x->hostp);
    free(x->dp_alias);
    mpress_host_params_finish(&x->hp);
    for (int k = 0; x->cuts && k + 1 < x->S; k++) {
        free(x->cuts[k].prod);
        free(x->cuts[k].idx);
        free(x->cuts[k].off);
    }
    free(x->cuts);
    for (int m = 0; x->batch && m < x->M; m++)
        mpress_host_batch_finish(&x->batch[m]);
    free(x->batch);
    free(x->loss);
    free(x->out);
    free(x->grad);
    free(x->saved);
    free(x->send_act);
    free(x->recv_act);
    free(x->send_grad);
    free(x->recv_grad);
    free(x->grad_unpacked);
    free(x->stage_of);
    free(x->last_use);
    free(x->pinned);
    free(x->done);
    free(x->times);
    free(x->ready);
    free(x->queue_ready);
    free(x->queue_head);
    free(x->queue_moving);
    free(x->queue_link_done);
    free(x->started);
    free(x->task_cpu);
    mpress_sched_destroy(x->sched);
    mpress_model_finish(&x->model);
    pthread_mutex_destroy(&x->lock);
    pthread_cond_destroy(&x->mem_cv);
    free(x);
}

int mpress_exec_create(const struct mpress_plan *plan, struct mpress_backend *be,
                       const struct mpress_exec_options *opt, struct mpress_exec **out,
                       struct mpress_error *err)
{
    *out = NULL;
    if (plan->schedule == MPRESS_SCHEDULE_ASYNC)
        return mpress_error_set(err, MPRESS_EUSAGE, "the runtime runs the synchronous "
                                "schedules (1f1b, gpipe); this plan's async schedule (PipeDream "
                                "weight stashing) is not implemented");
    if (!be->alloc || !be->free || !be->copy || !be->upload || !be->download || !be->zero ||
        !be->forward || !be->backward || !be->derive || !be->grad_add || !be->optimizer_step)
        return mpress_error_set(err, MPRESS_EUSAGE, "backend %s lacks a required function",
                                be->name ? be->name : "?");
    struct mpress_exec *x = calloc(1, sizeof(*x));
    if (!x)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    pthread_mutex_init(&x->lock, NULL);
    pthread_cond_init(&x->mem_cv, NULL);
    x->plan = plan;
    x->be = be;
    x->opt = *opt;
    struct mpress_host_optim ho;
    mpress_host_optim_default(&ho);
    x->optim = (struct mpress_rt_optim){0, opt->lr > 0 ? opt->lr : ho.lr, ho.beta1, ho.beta2,
                                        ho.eps, ho.weight_decay, ho.momentum};
    int rc = mpress_model_build(&plan->profile.model, &x->model, err);
    if (rc) {
        char why[sizeof(err->text)];
        memcpy(why, err ? err->text : "", err ? sizeof(why) : 1);
        mpress_exec_destroy(x);
        return mpress_error_set(err, rc == MPRESS_ESYSTEM ? rc : MPRESS_EINPUT,
                                "the plan's profile names no model the runtime can build "
                                "(model '%s', family '%s'): %s", plan->profile.model.name,
                                plan->profile.model.family, why);
    }
    x->optim.sgd = strcmp(x->model.config.optimizer, "sgd") == 0;
    if ((rc = check_profile(&plan->profile, &x->model, err)))
        goto fail;
    struct mpress_sched_options so;
    mpress_sched_options_init(&so);
    so.iterations = 1;
    if ((rc = mpress_sched_create(plan, &so, &x->sched, err)))
        goto fail;
    x->S = plan->n_stages;
    x->M = plan->micro_batches;
    x->n_ops = x->model.n_ops;
    int n = x->n_ops, M = x->M, S = x->S;
    x->stage_of = calloc((size_t)n, sizeof(int));
    x->last_use = calloc((size_t)n * IO, sizeof(int));
    x->pinned = calloc((size_t)S * (size_t)n * IO, 1);
    x->cuts = calloc((size_t)S, sizeof(*x->cuts));
    x->out = calloc((size_t)S * (size_t)M * (size_t)n, sizeof(*x->out));
    x->grad = calloc((size_t)S * (size_t)M * (size_t)n, sizeof(*x->grad));
    x->saved = calloc((size_t)M * (size_t)n, sizeof(*x->saved));
    size_t nb = (size_t)M * (size_t)S;
    x->send_act = calloc(nb, sizeof(struct xbuf));
    x->recv_act = calloc(nb, sizeof(struct xbuf));
    x->send_grad = calloc(nb, sizeof(struct xbuf));
    x->recv_grad = calloc(nb, sizeof(struct xbuf));
    x->grad_unpacked = calloc(nb, 1);
    x->batch = calloc((size_t)M, sizeof(*x->batch));
    x->loss = calloc((size_t)M, sizeof(float));
    int nt = mpress_sched_task_count(x->sched);
    x->done = calloc((size_t)nt + 1, 1);
    x->times = calloc(2 * (size_t)nt + 2, sizeof(double));
    x->ready = calloc((size_t)nt + 1, sizeof(double));
    x->queue_ready = calloc((size_t)mpress_sched_queue_count(x->sched) + 1, sizeof(double));
    x->queue_head = calloc((size_t)mpress_sched_queue_count(x->sched) + 1, sizeof(int));
    x->queue_moving = calloc((size_t)mpress_sched_queue_count(x->sched) + 1, 1);
    x->queue_link_done = calloc((size_t)mpress_sched_queue_count(x->sched) + 1, sizeof(double));
    x->started = calloc((size_t)nt + 1, 1);
    x->task_cpu = calloc((size_t)nt + 1, sizeof(int));
    if (!x->ready || !x->queue_ready || !x->queue_head || !x->started ||
        !x->queue_moving || !x->queue_link_done || !x->task_cpu) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto fail;
    }
    if (!x->stage_of || !x->last_use || !x->pinned || !x->cuts || !x->out || !x->grad ||
        !x->saved || !x->send_act || !x->recv_act || !x->send_grad || !x->recv_grad ||
        !x->grad_unpacked || !x->batch || !x->loss || !x->done || !x->times) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto fail;
    }
    for (int k = 0; k < S; k++)
        for (int o = plan->stages[k].first_op; o <= plan->stages[k].last_op; o++)
            x->stage_of[o] = k;
    for (int m = 0; m < M; m++)
        if ((rc = mpress_host_batch_init(&x->model.config, &x->batch[m], err)))
            goto fail;
    if ((rc = build_cuts(x, err)))
        goto fail;
    find_pins(x);
    if ((rc = setup_params(x, err)))
        goto fail;
    *out = x;
    return 0;
fail:
    mpress_exec_destroy(x);
    return rc;
}

