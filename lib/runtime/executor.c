/* The executor: runs a plan's task graph (mpress/sched.h) for real through a backend table.
 * One worker thread per queue that has tasks (each GPU's compute stream, its copy engines, the
 * CPU queue) issues its tasks in the order the schedule gives and starts each once every
 * predecessor has ended; so what runs concurrently is what the schedule allows, and nothing
 * else orders the work. The executor owns the data flow: which buffer holds each op output,
 * saved tensor (as its action says: keep, recompute, host swap, D2D swap), boundary buffer,
 * gradient and optimizer state, when each is allocated and freed, and how a recompute finds
 * the inputs its producer needs. docs/runtime.md, "The executor". */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_internal.h"

/* ---- tasks ------------------------------------------------------------------------------- */

/* Temporaries of one task (recompute chains), freed when it ends. */
struct temps {
    int n;
    struct xbuf b[2 * MAX_DEPTH + 8];
};

static const void *batch_input(struct mpress_exec *x, int m, int k)
{
    return mpress_host_batch_input(&x->model.config, &x->batch[m], k);
}

static int on_oom(void *arg, int dev, struct mpress_error *err)
{
    return exec_wait_for_evictions(arg, dev, 0, err);
}

/* An op call's weights and their gradients, and what its scratch does when it does not fit. */
static void param_io(struct mpress_exec *x, int op, struct mpress_rt_io *io)
{
    io->on_oom = on_oom;
    io->on_oom_arg = x;
    int f = x->hp.first[op];
    for (int j = 0; j < x->model.ops[op].n_weights; j++) {
        io->w[j] = x->dp[f + j].w;
        io->dw[j] = x->dp[f + j].g;
    }
}

static struct saved_state *sv_at(struct mpress_exec *x, int m, int op, int j)
{
    return &x->saved[m * x->n_ops + op][j];
}

/* A buffer holding output r of op q for micro-batch m on stage k's GPU, for a recompute: the
 * data loader's, a live or pinned output, a copy saved by a consumer that is on the GPU now,
 * or the producer's forward run again (recursively), into `into` when it is not NULL (the
 * recomputed tensor itself, when it is that whole output), else into a temporary. */
static int produce(struct mpress_exec *x, int k, int m, int q, int r, struct temps *tp,
                   const void **out, int depth, void *into, struct mpress_error *err)
{
    int g = exec_gpu_of_stage(x, k);
    const struct mpress_plan_stage *st = &x->plan->stages[k];
    if (q < 0) {
        *out = batch_input(x, m, r);
        return 0;
    }
    if (x->out[SLOT(x, k, m) + q][r].p) {
        *out = x->out[SLOT(x, k, m) + q][r].p;
        return 0;
    }
    if (r == 0) {
        pthread_mutex_lock(&x->lock);
        for (int c = st->first_op; c <= st->last_op; c++)
            for (int j = 0; j < x->model.ops[c].n_saved; j++) {
                if (!exec_plain_copy(&x->model, c, j) || x->model.ops[c].saved[j].producer != q)
                    continue;
                struct saved_state *s = sv_at(x, m, c, j);
                if (s->dev.p && (s->state == SV_BACK ||
                                 (s->state == SV_FWD &&
                                  exec_action_of(x, c, j) == MPRESS_ACTION_KEEP))) {
                    *out = s->dev.p;
                    pthread_mutex_unlock(&x->lock);
                    return 0;
                }
            }
        pthread_mutex_unlock(&x->lock);
    }
    const struct mpress_model_op *o = &x->model.ops[q];
    if (q < st->first_op || q > st->last_op || depth > MAX_DEPTH ||
        tp->n >= (int)(sizeof(tp->b) / sizeof(tp->b[0])))
        return mpress_error_set(err, MPRESS_EINPUT, "recompute on stage %d (gpu %d), "
                                "micro-batch %d: needs %s.%s, which is not on the GPU and "
                                "cannot be regenerated there", k, g, m, o->name,
                                o->outputs[r].role);
    struct mpress_rt_io io;
    memset(&io, 0, sizeof(io));
    for (int i = 0; i < o->n_inputs; i++) {
        int rc = produce(x, k, m, o->inputs[i].producer, o->inputs[i].producer_output, tp,
                         &io.in[i], depth + 1, NULL, err);
        if (rc)
            return rc;
    }
    int rc = 0;
    if (into) {
        io.out[r] = into;
    } else {
        struct xbuf *b = &tp->b[tp->n];
        if ((rc = exec_xalloc(x, b, g, MPRESS_MEM_WORKING, o->outputs[r].bytes, 0, err,
                              WHERE_FMT, k, g, o->name, "output rerun for a recompute", m)))
            return rc;
        tp->n++;
        io.out[r] = b->p;
    }
    param_io(x, q, &io);
    memset(io.dw, 0, sizeof(io.dw));
    struct mpress_rt_key key = {x->opt.seed, (uint32_t)x->steps, (uint32_t)m, (uint32_t)q};
    if ((rc = x->be->forward(x->be->ctx, g, q, &key, &io, err)))
        return rc;
    *out = io.out[r];
    return 0;
}

static int unpack(struct mpress_exec *x, const struct cut *ct, const struct xbuf *from, int k,
                  int m, int grads, struct mpress_error *err)
{
    int g = exec_gpu_of_stage(x, k);
    for (int i = 0; i < ct->n; i++) {
        int p = ct->prod[i], r = ct->idx[i];
        struct xbuf *b = grads ? &x->grad[SLOT(x, k, m) + p][r] : &x->out[SLOT(x, k, m) + p][r];
        uint64_t bytes = x->model.ops[p].outputs[r].bytes;
        int kind = !grads && x->pinned[PIN(x, k, p, r)] ? MPRESS_MEM_ACTIVATIONS
                                                         : MPRESS_MEM_WORKING;
        int rc = exec_xalloc(x, b, g, kind, bytes, 0, err, WHERE_FMT, k, g, x->model.ops[p].name,
                        grads ? "received gradient" : "received activation", m);
        if (rc)
            return rc;
        rc = x->be->copy(x->be->ctx, g, b->p, g, (const char *)from->p + ct->off[i], bytes,
                         err);
        if (rc)
            return rc;
    }
    return 0;
}

static int pack(struct mpress_exec *x, const struct cut *ct, struct xbuf *to, int k, int m,
                int grads, struct mpress_error *err)
{
    int g = exec_gpu_of_stage(x, k);
    int rc = exec_xalloc(x, to, g, MPRESS_MEM_BUFFERS, ct->total, 0, err, WHERE_FMT, k, g,
                    x->model.ops[grads ? x->plan->stages[k].first_op
                                       : x->plan->stages[k].last_op].name,
                    grads ? "boundary gradient send buffer" : "boundary send buffer", m);
    for (int i = 0; !rc && i < ct->n; i++) {
        int p = ct->prod[i], r = ct->idx[i];
        struct xbuf *b = grads ? &x->grad[SLOT(x, k, m) + p][r] : &x->out[SLOT(x, k, m) + p][r];
        uint64_t bytes = x->model.ops[p].outputs[r].bytes;
        char *dst = (char *)to->p + ct->off[i];
        if (b->p)
            rc = x->be->copy(x->be->ctx, g, dst, g, b->p, bytes, err);
        else if (grads)
            rc = x->be->zero(x->be->ctx, g, dst, bytes, err);
        else
            rc = mpress_error_set(err, MPRESS_ESYSTEM, "internal error: stage %d has no %s.%s "
                                  "to send", k, x->model.ops[p].name,
                                  x->model.ops[p].outputs[r].role);
        if (grads)
            exec_xfree(x, b);    /* activations: freed by the forward's clean-up */
    }
    return rc;
}

/* The BERT loss's backward reads its NSP-logits input (the model saves no NSP softmax). */
static int needed_by_loss_backward(const struct mpress_exec *x, int p, int r)
{
    int last = x->n_ops - 1;
    const struct mpress_model_op *L = &x->model.ops[last];
    return L->n_inputs > 2 && L->inputs[2].producer == p && L->inputs[2].producer_output == r;
}

/* The buffer of the op output that saved tensor j of op o (micro-batch m, stage k) is a copy
 * of, when o is its last reader on the stage: o's forward then takes that buffer over as the
 * saved tensor instead of copying it, as a framework keeps the input it saves for backward
 * (the planner counts a saved tensor once: docs/cost-model.md). Else NULL: a copy is saved
 * (the output is read later, is a held stage input, the loss backward needs it, or the
 * backend cannot retag memory). */
static struct xbuf *handed_over(struct mpress_exec *x, int k, int m, int o, int j)
{
    const struct mpress_model_op *op = &x->model.ops[o];
    const struct mpress_model_tensor *sv = &op->saved[j], *in = &op->inputs[0];
    const struct mpress_plan_stage *st = &x->plan->stages[k];
    if (!x->be->retag || op->n_inputs < 1 || strcmp(sv->role, "input") != 0 ||
        in->producer < 0 || sv->producer != in->producer ||
        sv->producer_output != in->producer_output || sv->bytes != in->bytes ||
        sv->dtype != in->dtype)
        return NULL;
    int p = in->producer, r = in->producer_output;
    struct xbuf *b = &x->out[SLOT(x, k, m) + p][r];
    if (!b->p || b->bytes != sv->bytes || x->pinned[PIN(x, k, p, r)] ||
        x->last_use[p * IO + r] != o ||
        (st->last_op == x->n_ops - 1 && needed_by_loss_backward(x, p, r)))
        return NULL;
    return b;
}

static int run_forward(struct mpress_exec *x, const struct mpress_task *t,
                       struct mpress_error *err)
{
    int k = t->stage, m = t->micro_batch, o = t->op, g = t->dst, n = x->n_ops;
    const struct mpress_plan_stage *st = &x->plan->stages[k];
    const struct mpress_model_op *op = &x->model.ops[o];
    int rc;
    if (o == st->first_op && k > 0 &&
        (rc = unpack(x, &x->cuts[k - 1], &x->recv_act[m * x->S + k - 1], k, m, 0, err)))
        return rc;
    struct mpress_rt_io io;
    memset(&io, 0, sizeof(io));
    for (int i = 0; i < op->n_inputs; i++) {
        const struct mpress_model_tensor *in = &op->inputs[i];
        io.in[i] = in->producer < 0 ? batch_input(x, m, in->producer_output)
                                    : x->out[SLOT(x, k, m) + in->producer][in->producer_output].p;
        if (!io.in[i])
            return mpress_error_set(err, MPRESS_ESYSTEM, "internal error: " WHERE_FMT
                                    ": input %s is not on the GPU", k, g, op->name, "forward",
                                    m, in->role);
    }
    for (int i = 0; i < op->n_outputs; i++) {
        if ((rc = exec_xalloc(x, &x->out[SLOT(x, k, m) + o][i], g, MPRESS_MEM_WORKING,
                         op->outputs[i].bytes, 0, err, WHERE_FMT, k, g, op->name,
                         op->outputs[i].role, m)))
            return rc;
        io.out[i] = x->out[SLOT(x, k, m) + o][i].p;
    }
    for (int j = 0; j < op->n_saved; j++) {
        struct saved_state *s = sv_at(x, m, o, j);
        char what[64];
        snprintf(what, sizeof(what), "saved tensor %s", op->saved[j].role);
        struct xbuf *own = handed_over(x, k, m, o, j);
        if (own) {
            x->be->retag(x->be->ctx, g, own->p, own->bytes, own->kind, MPRESS_MEM_ACTIVATIONS);
            s->dev = *own;
            s->dev.kind = MPRESS_MEM_ACTIVATIONS;
            memset(own, 0, sizeof(*own));
        } else if ((rc = exec_xalloc(x, &s->dev, g, MPRESS_MEM_ACTIVATIONS, op->saved[j].bytes,
                                     0, err, WHERE_FMT, k, g, op->name, what, m))) {
            return rc;
        }
        s->state = SV_FWD;
        s->evicted = s->prefetched = s->prefetching = 0;
        io.saved[j] = s->dev.p;
    }
    param_io(x, o, &io);
    memset(io.dw, 0, sizeof(io.dw));
    struct mpress_rt_key key = {x->opt.seed, (uint32_t)x->steps, (uint32_t)m, (uint32_t)o};
    if ((rc = x->be->forward(x->be->ctx, g, o, &key, &io, err)))
        return rc;
    if (o == n - 1 &&
        (rc = x->be->download(x->be->ctx, g, &x->loss[m], io.out[0], sizeof(float), err)))
        return rc;
    /* recomputed tensors leave after the forward of their last use */
    for (int i = 0; i < x->plan->n_actions; i++) {
        const struct mpress_plan_action *a = &x->plan->actions[i];
        int e = a->evict_after_op < 0 ? a->op : a->evict_after_op;
        if (a->action != MPRESS_ACTION_RECOMPUTE || e != o)
            continue;
        struct saved_state *s = sv_at(x, m, a->op, a->tensor);
        pthread_mutex_lock(&x->lock);
        exec_xfree(x, &s->dev);
        s->state = SV_NONE;
        pthread_mutex_unlock(&x->lock);
    }
    if (o == st->last_op && k + 1 < x->S &&
        (rc = pack(x, &x->cuts[k], &x->send_act[m * x->S + k], k, m, 0, err)))
        return rc;
    /* outputs whose last reader on this stage was this op */
    for (int p = 0; p <= o; p++)
        for (int r = 0; r < x->model.ops[p].n_outputs; r++) {
            struct xbuf *b = &x->out[SLOT(x, k, m) + p][r];
            int lu = x->last_use[p * IO + r];
            if (!b->p || x->pinned[PIN(x, k, p, r)] ||
                (st->last_op == n - 1 && needed_by_loss_backward(x, p, r)))
                continue;
            if (lu == o || lu < 0 || (lu > st->last_op && o == st->last_op))
                exec_xfree(x, b);
        }
    if (o == st->first_op && k > 0)
        exec_xfree(x, &x->recv_act[m * x->S + k - 1]);
    return 0;
}

static int unpack_grads(struct mpress_exec *x, int k, int m, struct mpress_error *err)
{
    if (k + 1 >= x->S || x->grad_unpacked[m * x->S + k])
        return 0;
    x->grad_unpacked[m * x->S + k] = 1;
    return unpack(x, &x->cuts[k], &x->recv_grad[m * x->S + k], k, m, 1, err);
}

static int run_recompute(struct mpress_exec *x, const struct mpress_task *t,
                         struct mpress_error *err)
{
    int k = t->stage, m = t->micro_batch, g = t->dst;
    const struct mpress_plan_action *a = &x->plan->actions[t->action];
    int c = a->op, j = a->tensor;
    const struct mpress_model_op *op = &x->model.ops[c];
    int rc = unpack_grads(x, k, m, err);
    if (rc)
        return rc;
    struct saved_state *s = sv_at(x, m, c, j);
    char what[80];
    snprintf(what, sizeof(what), "recomputed %s", op->saved[j].role);
    if ((rc = exec_xalloc(x, &s->dev, g, MPRESS_MEM_WORKING, op->saved[j].bytes, 0, err, WHERE_FMT,
                     k, g, op->name, what, m)))
        return rc;
    struct temps *tp = calloc(1, sizeof(*tp));
    if (!tp)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    int prod = op->saved[j].producer;
    if (prod == c) {
        struct mpress_rt_io io;
        memset(&io, 0, sizeof(io));
        for (int i = 0; i < op->n_inputs && !rc; i++)
            rc = produce(x, k, m, op->inputs[i].producer, op->inputs[i].producer_output, tp,
                         &io.in[i], 1, NULL, err);
        if (!rc) {
            io.saved[j] = s->dev.p;
            param_io(x, c, &io);
            memset(io.dw, 0, sizeof(io.dw));
            struct mpress_rt_key key = {x->opt.seed, (uint32_t)x->steps, (uint32_t)m,
                                        (uint32_t)c};
            rc = x->be->forward(x->be->ctx, g, c, &key, &io, err);
        }
    } else {
        /* a tensor that is its producer's whole output 0 is rerun into its own buffer, not
         * into a temporary copied over (the cost model charges a recompute its output only:
         * the temporary beside it ran a plan packed to its capacity out of memory, at
         * layer1.gelu's rerun for mlp_down's input, test_recompute_in_place) */
        const struct mpress_model_tensor *sv = &op->saved[j];
        int whole = exec_plain_copy(&x->model, c, j) && sv->producer_output == 0 &&
                    sv->bytes == x->model.ops[prod].outputs[0].bytes;
        const void *src = NULL;
        rc = produce(x, k, m, prod, 0, tp, &src, 1, whole ? s->dev.p : NULL, err);
        if (!rc && src != s->dev.p && x->be->derive(x->be->ctx, g, c, j, src, s->dev.p) != 0)
            rc = mpress_error_set(err, MPRESS_ESYSTEM, "internal error: %s.%s cannot be "
                                  "derived from its producer", op->name, op->saved[j].role);
    }
    for (int i = tp->n - 1; i >= 0; i--)
        exec_xfree(x, &tp->b[i]);
    free(tp);
    if (rc)
        return rc;
    pthread_mutex_lock(&x->lock);
    s->state = SV_BACK;
    pthread_mutex_unlock(&x->lock);
    return 0;
}

static int run_backward(struct mpress_exec *x, const struct mpress_task *t,
                        struct mpress_error *err)
{
    int k = t->stage, m = t->micro_batch, o = t->op, g = t->dst, n = x->n_ops;
    const struct mpress_plan_stage *st = &x->plan->stages[k];
    const struct mpress_model_op *op = &x->model.ops[o];
    int rc = unpack_grads(x, k, m, err);
    if (rc)
        return rc;
    struct mpress_rt_io io;
    memset(&io, 0, sizeof(io));
    for (int j = 0; j < op->n_saved; j++) {
        struct saved_state *s = sv_at(x, m, o, j);
        pthread_mutex_lock(&x->lock);
        int ok = s->dev.p && (s->state == SV_FWD || s->state == SV_BACK);
        io.saved[j] = s->dev.p;
        pthread_mutex_unlock(&x->lock);
        if (!ok)
            return mpress_error_set(err, MPRESS_EINPUT, WHERE_FMT ": the backward needs saved "
                                    "tensor %s, which is not on the GPU (the schedule did not "
                                    "bring it back)", k, g, op->name, "backward", m,
                                    op->saved[j].role);
    }
    for (int i = 0; i < op->n_outputs; i++) {
        struct xbuf *b = &x->grad[SLOT(x, k, m) + o][i];
        if (!b->p) {
            if ((rc = exec_xalloc(x, b, g, MPRESS_MEM_WORKING, op->outputs[i].bytes, 1, err,
                             WHERE_FMT, k, g, op->name, "output gradient", m)))
                return rc;
            if (o == n - 1 && i == 0) {
                float lg = 1.0f / (float)x->M;
                if ((rc = x->be->upload(x->be->ctx, g, b->p, &lg, sizeof(lg), err)))
                    return rc;
            }
        }
        io.dout[i] = b->p;
    }
    for (int i = 0; i < op->n_inputs; i++) {
        const struct mpress_model_tensor *in = &op->inputs[i];
        if (in->producer < 0) {
            io.in[i] = batch_input(x, m, in->producer_output);
            continue;
        }
        if (needed_by_loss_backward(x, in->producer, in->producer_output))
            io.in[i] = x->out[SLOT(x, k, m) + in->producer][in->producer_output].p;
        struct xbuf *b = &x->grad[SLOT(x, k, m) + in->producer][in->producer_output];
        if (!b->p && (rc = exec_xalloc(x, b, g, MPRESS_MEM_WORKING,
                                  x->model.ops[in->producer].outputs[in->producer_output].bytes,
                                  1, err, WHERE_FMT, k, g, op->name, "input gradient", m)))
            return rc;
        io.din[i] = b->p;
    }
    param_io(x, o, &io);
    struct mpress_rt_key key = {x->opt.seed, (uint32_t)x->steps, (uint32_t)m, (uint32_t)o};
    if ((rc = x->be->backward(x->be->ctx, g, o, &key, &io, err)))
        return rc;
    pthread_mutex_lock(&x->lock);
    for (int j = 0; j < op->n_saved; j++) {
        struct saved_state *s = sv_at(x, m, o, j);
        exec_xfree(x, &s->dev);
        s->state = SV_NONE;
    }
    pthread_mutex_unlock(&x->lock);
    for (int i = 0; i < op->n_outputs; i++)
        exec_xfree(x, &x->grad[SLOT(x, k, m) + o][i]);
    for (int i = 0; i < op->n_inputs; i++) {
        const struct mpress_model_tensor *in = &op->inputs[i];
        if (in->producer >= 0 && needed_by_loss_backward(x, in->producer, in->producer_output))
            exec_xfree(x, &x->out[SLOT(x, k, m) + in->producer][in->producer_output]);
    }
    if (o == st->last_op && k + 1 < x->S)
        exec_xfree(x, &x->recv_grad[m * x->S + k]);
    if (o == st->first_op) {
        if (k > 0 && (rc = pack(x, &x->cuts[k - 1], &x->send_grad[m * x->S + k - 1], k, m, 1,
                                err)))
            return rc;
        /* pinned stage inputs of this micro-batch are no longer needed */
        for (int p = 0; p < st->first_op; p++)
            for (int r = 0; r < IO; r++)
                if (x->pinned[PIN(x, k, p, r)])
                    exec_xfree(x, &x->out[SLOT(x, k, m) + p][r]);
    }
    return 0;
}

static uint64_t part_offset(const struct mpress_plan_action *a, int q)
{
    uint64_t off = 0;
    for (int i = 0; i < q; i++)
        off += a->peer_bytes[i];
    return off;
}

static int run_evict(struct mpress_exec *x, const struct mpress_task *t, struct mpress_error *err)
{
    const struct mpress_plan_action *a = &x->plan->actions[t->action];
    int m = t->micro_batch, q = t->part;
    struct saved_state *s = sv_at(x, m, a->op, a->tensor);
    const struct mpress_model_op *op = &x->model.ops[a->op];
    int parts = a->action == MPRESS_ACTION_HOST_SWAP ? 1 : a->n_peers;
    uint64_t off = a->action == MPRESS_ACTION_HOST_SWAP ? 0 : part_offset(a, q);
    char what[96];
    snprintf(what, sizeof(what), "%s parked from gpu %d", op->saved[a->tensor].role, t->src);
    int rc = exec_xalloc(x, &s->part[q], t->dst, MPRESS_MEM_PARKED, t->bytes, 0, err, WHERE_FMT,
                    t->stage, t->src, op->name, what, m);
    if (!rc && !s->dev.p)
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "internal error: %s.%s is not on gpu %d to "
                              "evict", op->name, op->saved[a->tensor].role, t->src);
    if (!rc)
        rc = exec_copy(x, t, t->dst, s->part[q].p, t->src, (char *)s->dev.p + off,
                         t->bytes, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&x->lock);
    /* The GPU's copy goes when every part has left, unless a part is already coming back
     * (a prefetch waits only for its own part's eviction): then the copy stays, intact. */
    if (++s->evicted == parts && !s->prefetching) {
        exec_xfree(x, &s->dev);
        s->state = SV_PARKED;
    }
    pthread_mutex_unlock(&x->lock);
    return 0;
}

static int run_prefetch(struct mpress_exec *x, const struct mpress_task *t,
                        struct mpress_error *err)
{
    const struct mpress_plan_action *a = &x->plan->actions[t->action];
    int m = t->micro_batch, q = t->part, g = t->dst;
    struct saved_state *s = sv_at(x, m, a->op, a->tensor);
    const struct mpress_model_op *op = &x->model.ops[a->op];
    int parts = a->action == MPRESS_ACTION_HOST_SWAP ? 1 : a->n_peers;
    uint64_t off = a->action == MPRESS_ACTION_HOST_SWAP ? 0 : part_offset(a, q);
    int rc = 0;
    pthread_mutex_lock(&x->lock);
    s->prefetching = 1;
    while (!s->dev.p && !rc) {
        /* the first part to come back allocates the tensor; a wait for memory releases the
         * lock, and another part may have allocated it meanwhile */
        char what[80];
        snprintf(what, sizeof(what), "prefetched %s", op->saved[a->tensor].role);
        struct xbuf b;
        memset(&b, 0, sizeof(b));
        rc = exec_xalloc_locked(x, &b, g, MPRESS_MEM_WORKING, op->saved[a->tensor].bytes, 0,
                                err, WHERE_FMT, t->stage, g, op->name, what, m);
        if (!rc && s->dev.p)
            exec_xfree(x, &b);
        else if (!rc)
            s->dev = b;
    }
    pthread_mutex_unlock(&x->lock);
    if (!rc && !s->part[q].p)
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "internal error: %s.%s part %d is not "
                              "parked", op->name, op->saved[a->tensor].role, q);
    if (!rc)
        rc = exec_copy(x, t, g, (char *)s->dev.p + off, t->src, s->part[q].p, t->bytes,
                         err);
    if (rc)
        return rc;
    pthread_mutex_lock(&x->lock);
    exec_xfree(x, &s->part[q]);
    if (++s->prefetched == parts)
        s->state = SV_BACK;
    pthread_mutex_unlock(&x->lock);
    return 0;
}

static int run_send(struct mpress_exec *x, const struct mpress_task *t, struct mpress_error *err)
{
    int m = t->micro_batch;
    int grads = t->kind == MPRESS_TASK_SEND_GRAD;
    int cut = grads ? t->stage - 1 : t->stage;
    int recv_stage = grads ? cut : cut + 1;
    struct xbuf *from = grads ? &x->send_grad[m * x->S + cut] : &x->send_act[m * x->S + cut];
    struct xbuf *to = grads ? &x->recv_grad[m * x->S + cut] : &x->recv_act[m * x->S + cut];
    if (t->bytes != x->cuts[cut].total || !from->p)
        return mpress_error_set(err, MPRESS_ESYSTEM, "internal error: boundary %d sends %llu "
                                "bytes; %llu packed", cut, (unsigned long long)t->bytes,
                                (unsigned long long)x->cuts[cut].total);
    int rc = exec_xalloc(x, to, t->dst, MPRESS_MEM_BUFFERS, t->bytes, 0, err, WHERE_FMT, recv_stage,
                    t->dst, x->model.ops[t->op].name,
                    grads ? "boundary gradient receive buffer" : "boundary receive buffer", m);
    if (!rc)
        rc = exec_copy(x, t, t->dst, to->p, t->src, from->p, t->bytes, err);
    exec_xfree(x, from);
    return rc;
}

/* The global param index of the weight op `self` shares with op `other`. */
static int tied_param(const struct mpress_exec *x, int self, int other)
{
    const struct mpress_host_params *hp = &x->hp;
    for (int i = hp->first[self]; i < hp->first[self + 1]; i++) {
        if (hp->p[i].owner >= 0 && hp->p[hp->p[i].owner].op == other)
            return i;
        for (int j = hp->first[other]; j < hp->first[other + 1]; j++)
            if (hp->p[j].owner == i)
                return i;
    }
    return -1;
}

static int run_tied(struct mpress_exec *x, const struct mpress_task *t, struct mpress_error *err)
{
    int ps = tied_param(x, t->op, t->tied_op), pd = tied_param(x, t->tied_op, t->op);
    if (ps < 0 || pd < 0)
        return mpress_error_set(err, MPRESS_EINPUT, "ops %s and %s share no weight",
                                x->model.ops[t->op].name, x->model.ops[t->tied_op].name);
    uint64_t bytes = x->dp[ps].n * (uint64_t)mpress_dtype_size(x->dp[ps].dtype);
    pthread_mutex_lock(&x->lock);
    int slot = x->n_tied < 8 ? x->n_tied++ : -1;
    pthread_mutex_unlock(&x->lock);
    if (slot < 0)
        return mpress_error_set(err, MPRESS_ESYSTEM, "too many tied-weight exchanges");
    struct tied_recv *tr = &x->tied[slot];
    tr->param = pd;
    int rc = exec_xalloc(x, &tr->buf, t->dst, MPRESS_MEM_BUFFERS, bytes, 0, err, "stage %d (gpu %d), "
                    "op %s, tied-weight gradient from gpu %d", x->stage_of[t->tied_op], t->dst,
                    x->model.ops[t->tied_op].name, t->src);
    if (!rc)
        rc = exec_copy(x, t, t->dst, tr->buf.p, t->src, x->dp[ps].g, bytes, err);
    return rc;
}

/* Folds into stage k's gradients the tied-weight gradients it received and those of tied
 * copies on the stage itself (owner += copy, as the sequential trainer adds them). */
static int fold_tied(struct mpress_exec *x, int k, struct mpress_error *err)
{
    int g = exec_gpu_of_stage(x, k), rc = 0;
    for (int i = 0; i < x->hp.n && !rc; i++)
        if (x->dp_alias[i] >= 0 && x->stage_of[x->hp.p[i].op] == k)
            rc = x->be->grad_add(x->be->ctx, g, x->dp[i].dtype, x->dp[x->dp_alias[i]].g,
                                 x->dp[i].g, x->dp[i].n, err);
    pthread_mutex_lock(&x->lock);
    for (int i = 0; i < x->n_tied && !rc; i++) {
        struct tied_recv *tr = &x->tied[i];
        if (!tr->buf.p || x->stage_of[x->hp.p[tr->param].op] != k)
            continue;
        rc = x->be->grad_add(x->be->ctx, g, x->dp[tr->param].dtype, x->dp[tr->param].g,
                             tr->buf.p, x->dp[tr->param].n, err);
        exec_xfree(x, &tr->buf);
    }
    pthread_mutex_unlock(&x->lock);
    return rc;
}

static int run_step_task(struct mpress_exec *x, const struct mpress_task *t,
                         struct mpress_error *err)
{
    int k = t->stage, g = exec_gpu_of_stage(x, k), rc = 0;
    int on_host = x->plan->stages[k].optimizer_on_host;
    int first = t->kind == MPRESS_TASK_GRAD_D2H || (t->kind == MPRESS_TASK_OPTIMIZER && !on_host);
    if (first && (rc = fold_tied(x, k, err)))
        return rc;
    for (int i = 0; i < x->hp.n && !rc; i++) {
        if (x->stage_of[x->hp.p[i].op] != k || x->dp_alias[i] >= 0)
            continue;
        struct mpress_rt_param *d = &x->dp[i], *h = &x->hostp[i];
        uint64_t bytes = d->n * (uint64_t)mpress_dtype_size(d->dtype);
        switch (t->kind) {
        case MPRESS_TASK_GRAD_D2H:
            rc = exec_copy(x, t, MPRESS_RT_HOST, h->g, g, d->g, bytes, err);
            break;
        case MPRESS_TASK_WEIGHTS_H2D:
            rc = exec_copy(x, t, g, d->w, MPRESS_RT_HOST, h->w, bytes, err);
            break;
        default:
            rc = x->be->optimizer_step(x->be->ctx, on_host ? MPRESS_RT_HOST : g, &x->optim,
                                       x->steps + 1, on_host ? h : d, err);
        }
    }
    return rc;
}

int exec_run_task(struct mpress_exec *x, int i, struct mpress_error *err)
{
    const struct mpress_task *t = mpress_sched_task(x->sched, i);
    switch (t->kind) {
    case MPRESS_TASK_FORWARD: return run_forward(x, t, err);
    case MPRESS_TASK_BACKWARD: return run_backward(x, t, err);
    case MPRESS_TASK_RECOMPUTE: return run_recompute(x, t, err);
    case MPRESS_TASK_EVICT: return run_evict(x, t, err);
    case MPRESS_TASK_PREFETCH: return run_prefetch(x, t, err);
    case MPRESS_TASK_SEND_ACT:
    case MPRESS_TASK_SEND_GRAD: return run_send(x, t, err);
    case MPRESS_TASK_TIED_GRAD: return run_tied(x, t, err);
    case MPRESS_TASK_OPTIMIZER:
    case MPRESS_TASK_GRAD_D2H:
    case MPRESS_TASK_WEIGHTS_H2D: return run_step_task(x, t, err);
    default:
        return mpress_error_set(err, MPRESS_EUSAGE, "task kind %s is not supported",
                                mpress_task_kind_name(t->kind));
    }
}

/* ---- checkpoints ------------------------------------------------------------------------- */

/* Copies the device state of every owned parameter into (to_host = 1) or out of the host
 * copies in x->hp. */
static int sync_params(struct mpress_exec *x, int to_host, struct mpress_error *err)
{
    int rc = 0;
    for (int i = 0; i < x->hp.n && !rc; i++) {
        struct mpress_host_param *p = &x->hp.p[i];
        int k = x->stage_of[p->op], g = exec_gpu_of_stage(x, k);
        int on_host = x->plan->stages[k].optimizer_on_host;
        if (x->dp_alias[i] >= 0)
            continue;
        /* a tied copy on another stage takes the owner's state on load; save reads owners */
        struct mpress_host_param *src = p->owner >= 0 ? &x->hp.p[p->owner] : p;
        if (to_host && p->owner >= 0)
            continue;
        struct mpress_rt_param *d = &x->dp[i], *s = on_host ? &x->hostp[i] : &x->dp[i];
        int sdev = on_host ? MPRESS_RT_HOST : g;
        uint64_t bytes = p->n * (uint64_t)mpress_dtype_size(p->dtype), n4 = p->n * sizeof(float);
        if (to_host) {
            rc = x->be->download(x->be->ctx, g, src->w, d->w, bytes, err);
            if (!rc && s->master)
                rc = x->be->download(x->be->ctx, sdev, src->master, s->master, n4, err);
            if (!rc && s->m)
                rc = x->be->download(x->be->ctx, sdev, src->m, s->m, n4, err);
            if (!rc && s->v)
                rc = x->be->download(x->be->ctx, sdev, src->v, s->v, n4, err);
        } else {
            rc = x->be->upload(x->be->ctx, g, d->w, src->w, bytes, err);
            if (!rc && on_host)
                rc = x->be->upload(x->be->ctx, MPRESS_RT_HOST, x->hostp[i].w, src->w, bytes,
                                   err);
            if (!rc && s->master)
                rc = x->be->upload(x->be->ctx, sdev, s->master, src->master, n4, err);
            if (!rc && s->m)
                rc = x->be->upload(x->be->ctx, sdev, s->m, src->m, n4, err);
            if (!rc && s->v)
                rc = x->be->upload(x->be->ctx, sdev, s->v, src->v, n4, err);
        }
    }
    return rc;
}

int mpress_exec_save(struct mpress_exec *x, const char *file, struct mpress_error *err)
{
    int rc = sync_params(x, 1, err);
    if (rc)
        return rc;
    return mpress_checkpoint_save(file, &x->model, &x->hp, (uint32_t)x->steps, x->opt.seed,
                                  err);
}

int mpress_exec_load(struct mpress_exec *x, const char *file, struct mpress_error *err)
{
    uint32_t step = 0;
    int rc = mpress_checkpoint_load(file, &x->model, &x->hp, &step, x->opt.seed, err);
    if (rc)
        return rc;
    if ((rc = sync_params(x, 0, err)))
        return rc;
    x->steps = (int)step;
    return 0;
}
