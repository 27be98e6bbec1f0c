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

#include "mpress/model.h"
#include "mpress/runtime.h"
#include "host_ops.h"
#include "runtime_internal.h"

#define IO 4
#define SV 8
#define MAX_DEPTH 64
/* out and grad are per stage: a tensor passed through a stage, or held there for a recompute,
 * has its own buffer on each stage that holds it. */
#define SLOT(x, k, m) (((size_t)(k) * (size_t)(x)->M + (size_t)(m)) * (size_t)(x)->n_ops)
#define PIN(x, k, q, r) ((((size_t)(k) * (size_t)(x)->n_ops) + (size_t)(q)) * IO + (size_t)(r))

struct xbuf {
    void *p;
    uint64_t bytes;
    int dev, kind;
};

enum { SV_NONE = 0, SV_FWD, SV_PARKED, SV_BACK };

struct saved_state {
    struct xbuf dev;
    struct xbuf part[MPRESS_MAX_GPUS];
    int state, evicted, prefetched;
    int prefetching;            /* a part's prefetch has begun */
};

/* The tensors that cross the cut after stage k: (producer, output) with their offsets in the
 * boundary buffer. */
struct cut {
    int n;
    int *prod, *idx;
    uint64_t *off;
    uint64_t total;
};

struct tied_recv {
    int param;                  /* global param index on the receiving stage */
    struct xbuf buf;
};

struct mpress_exec {
    const struct mpress_plan *plan;
    struct mpress_backend *be;
    struct mpress_exec_options opt;
    struct mpress_rt_optim optim;
    struct mpress_model model;
    struct mpress_sched *sched;
    int S, M, n_ops;
    int *stage_of;              /* [op] */
    int *last_use;              /* [op * IO + r]: last op reading that output, -1 none */
    char *pinned;               /* [(k * n_ops + op) * IO + r]: a stage input stage k keeps
                                 * for a recompute */
    struct cut *cuts;           /* [S - 1] */
    /* parameters: host copies (init, checkpoints) and device ones, by global param index */
    struct mpress_host_params hp;
    struct mpress_rt_param *dp;     /* on the stage's GPU */
    struct mpress_rt_param *hostp;  /* host optimizer: g landing zone, w staging, states */
    int *dp_alias;              /* tied weight on its owner's stage: owner index, else -1 */
    int steps;
    /* per micro-batch state, [m * n_ops + op] */
    struct xbuf (*out)[IO];
    struct xbuf (*grad)[IO];
    struct saved_state (*saved)[SV];
    struct xbuf *send_act, *recv_act, *send_grad, *recv_grad;   /* [m * (S - 1) + k] */
    char *grad_unpacked;        /* [m * S + k] */
    struct mpress_host_batch *batch;    /* [M] */
    float *loss;                /* [M] */
    struct tied_recv tied[8];
    int n_tied;
    uint64_t pinned_bytes[MPRESS_MAX_GPUS];
    /* running */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char *done;
    int failed;
    struct mpress_error err;
    double t0;
    double *times;              /* [2 * task] */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mpress_exec_options_init(struct mpress_exec_options *o)
{
    memset(o, 0, sizeof(*o));
    o->seed = 1;
}

static int gpu_of_stage(const struct mpress_exec *x, int k)
{
    return x->plan->stages[k].gpu;
}

/* ---- buffers ----------------------------------------------------------------------------- */

static int xalloc(struct mpress_exec *x, struct xbuf *b, int dev, int kind, uint64_t bytes,
                  int zero, struct mpress_error *err, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    int rc = x->be->alloc(x->be->ctx, dev, kind, bytes, what, &b->p, err);
    if (rc)
        return rc;
    b->bytes = bytes;
    b->dev = dev;
    b->kind = kind;
    if (zero)
        return x->be->zero(x->be->ctx, dev, b->p, bytes, err);
    return 0;
}

static void xfree(struct mpress_exec *x, struct xbuf *b)
{
    if (b->p)
        x->be->free(x->be->ctx, b->dev, b->kind, b->p, b->bytes);
    memset(b, 0, sizeof(*b));
}

/* "stage 1 (gpu 1), op layer1.qkv, <what>, micro-batch 2" */
#define WHERE_FMT "stage %d (gpu %d), op %s, %s, micro-batch %d"

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

static int action_of(const struct mpress_exec *x, int op, int j)
{
    for (int i = 0; i < x->plan->n_actions; i++)
        if (x->plan->actions[i].op == op && x->plan->actions[i].tensor == j)
            return x->plan->actions[i].action;
    return MPRESS_ACTION_KEEP;
}

static int prefetch_point(const struct mpress_exec *x, int op, int j)
{
    for (int i = 0; i < x->plan->n_actions; i++)
        if (x->plan->actions[i].op == op && x->plan->actions[i].tensor == j)
            return x->plan->actions[i].prefetch_before_op < 0
                       ? op
                       : x->plan->actions[i].prefetch_before_op;
    return op;
}

/* Saved tensor j of op c is a plain copy of its producer's output 0. */
static int plain_copy(const struct mpress_model *m, int c, int j)
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
 * before the backward of op p run: a kept copy whose backward has not yet come (c <= p), or
 * one recomputed in an earlier batch (later prefetch point) or earlier in the same batch. */
static int copy_present(const struct mpress_exec *x, int k, int q, int p, int before_op,
                        int before_j)
{
    const struct mpress_plan_stage *st = &x->plan->stages[k];
    for (int c = st->first_op; c <= st->last_op; c++)
        for (int j = 0; j < x->model.ops[c].n_saved; j++) {
            if (!plain_copy(&x->model, c, j) || x->model.ops[c].saved[j].producer != q)
                continue;
            int a = action_of(x, c, j);
            if (a == MPRESS_ACTION_KEEP && c <= p)
                return 1;
            if (a == MPRESS_ACTION_RECOMPUTE) {
                int pc = prefetch_point(x, c, j);
                if (pc > p || (pc == p && (c < before_op || (c == before_op && j < before_j))))
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
    if (q < st->first_op) {
        x->pinned[PIN(x, k, q, r)] = 1;
        return;
    }
    if (r == 0 && copy_present(x, k, q, p, c0, j0))
        return;
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
                x->pinned_bytes[gpu_of_stage(x, k)] +=
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
        int k = x->stage_of[p->op], g = gpu_of_stage(x, k);
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
        if ((rc = xalloc(x, &b, (dev), (kind), (nbytes), 1, err, "stage %d (gpu %d), op %s, "   \
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

static void free_step_state(struct mpress_exec *x)
{
    if (!x->out)
        return;
    for (size_t u = 0; u < (size_t)x->S * (size_t)x->M * (size_t)x->n_ops; u++)
        for (int r = 0; r < IO; r++) {
            xfree(x, &x->out[u][r]);
            xfree(x, &x->grad[u][r]);
        }
    for (int u = 0; u < x->M * x->n_ops; u++) {
        for (int j = 0; j < SV; j++) {
            struct saved_state *s = &x->saved[u][j];
            xfree(x, &s->dev);
            for (int q = 0; q < MPRESS_MAX_GPUS; q++)
                xfree(x, &s->part[q]);
            s->state = s->evicted = s->prefetched = s->prefetching = 0;
        }
    }
    int nb = x->M * (x->S - 1);
    for (int i = 0; i < nb; i++) {
        xfree(x, &x->send_act[i]);
        xfree(x, &x->recv_act[i]);
        xfree(x, &x->send_grad[i]);
        xfree(x, &x->recv_grad[i]);
    }
    for (int i = 0; i < x->n_tied; i++)
        xfree(x, &x->tied[i].buf);
    x->n_tied = 0;
}

void mpress_exec_destroy(struct mpress_exec *x)
{
    if (!x)
        return;
    free_step_state(x);
    for (int i = 0; x->dp && i < x->hp.n; i++) {
        int k = x->stage_of[x->hp.p[i].op];
        free_param(x, &x->dp[i], gpu_of_stage(x, k), x->dp_alias[i] < 0);
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
    mpress_sched_destroy(x->sched);
    mpress_model_finish(&x->model);
    pthread_mutex_destroy(&x->lock);
    pthread_cond_destroy(&x->cond);
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
    pthread_cond_init(&x->cond, NULL);
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

static void param_io(struct mpress_exec *x, int op, struct mpress_rt_io *io)
{
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
 * or the producer's forward run again (recursively). */
static int produce(struct mpress_exec *x, int k, int m, int q, int r, struct temps *tp,
                   const void **out, int depth, struct mpress_error *err)
{
    int g = gpu_of_stage(x, k);
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
                if (!plain_copy(&x->model, c, j) || x->model.ops[c].saved[j].producer != q)
                    continue;
                struct saved_state *s = sv_at(x, m, c, j);
                if (s->dev.p && (s->state == SV_BACK ||
                                 (s->state == SV_FWD &&
                                  action_of(x, c, j) == MPRESS_ACTION_KEEP))) {
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
                         &io.in[i], depth + 1, err);
        if (rc)
            return rc;
    }
    struct xbuf *b = &tp->b[tp->n];
    int rc = xalloc(x, b, g, MPRESS_MEM_WORKING, o->outputs[r].bytes, 0, err,
                    WHERE_FMT, k, g, o->name, "output rerun for a recompute", m);
    if (rc)
        return rc;
    tp->n++;
    io.out[r] = b->p;
    param_io(x, q, &io);
    memset(io.dw, 0, sizeof(io.dw));
    struct mpress_rt_key key = {x->opt.seed, (uint32_t)x->steps, (uint32_t)m, (uint32_t)q};
    if ((rc = x->be->forward(x->be->ctx, g, q, &key, &io, err)))
        return rc;
    *out = b->p;
    return 0;
}

static int unpack(struct mpress_exec *x, const struct cut *ct, const struct xbuf *from, int k,
                  int m, int grads, struct mpress_error *err)
{
    int g = gpu_of_stage(x, k);
    for (int i = 0; i < ct->n; i++) {
        int p = ct->prod[i], r = ct->idx[i];
        struct xbuf *b = grads ? &x->grad[SLOT(x, k, m) + p][r] : &x->out[SLOT(x, k, m) + p][r];
        uint64_t bytes = x->model.ops[p].outputs[r].bytes;
        int kind = !grads && x->pinned[PIN(x, k, p, r)] ? MPRESS_MEM_ACTIVATIONS
                                                         : MPRESS_MEM_WORKING;
        int rc = xalloc(x, b, g, kind, bytes, 0, err, WHERE_FMT, k, g, x->model.ops[p].name,
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
    int g = gpu_of_stage(x, k);
    int rc = xalloc(x, to, g, MPRESS_MEM_BUFFERS, ct->total, 0, err, WHERE_FMT, k, g,
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
            xfree(x, b);    /* activations: freed by the forward's clean-up */
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
        if ((rc = xalloc(x, &x->out[SLOT(x, k, m) + o][i], g, MPRESS_MEM_WORKING,
                         op->outputs[i].bytes, 0, err, WHERE_FMT, k, g, op->name,
                         op->outputs[i].role, m)))
            return rc;
        io.out[i] = x->out[SLOT(x, k, m) + o][i].p;
    }
    for (int j = 0; j < op->n_saved; j++) {
        struct saved_state *s = sv_at(x, m, o, j);
        char what[64];
        snprintf(what, sizeof(what), "saved tensor %s", op->saved[j].role);
        if ((rc = xalloc(x, &s->dev, g, MPRESS_MEM_ACTIVATIONS, op->saved[j].bytes, 0, err,
                         WHERE_FMT, k, g, op->name, what, m)))
            return rc;
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
        xfree(x, &s->dev);
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
                xfree(x, b);
        }
    if (o == st->first_op && k > 0)
        xfree(x, &x->recv_act[m * x->S + k - 1]);
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
    if ((rc = xalloc(x, &s->dev, g, MPRESS_MEM_WORKING, op->saved[j].bytes, 0, err, WHERE_FMT,
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
                         &io.in[i], 1, err);
        if (!rc) {
            io.saved[j] = s->dev.p;
            param_io(x, c, &io);
            memset(io.dw, 0, sizeof(io.dw));
            struct mpress_rt_key key = {x->opt.seed, (uint32_t)x->steps, (uint32_t)m,
                                        (uint32_t)c};
            rc = x->be->forward(x->be->ctx, g, c, &key, &io, err);
        }
    } else {
        const void *src = NULL;
        rc = produce(x, k, m, prod, 0, tp, &src, 1, err);
        if (!rc && x->be->derive(x->be->ctx, g, c, j, src, s->dev.p) != 0)
            rc = mpress_error_set(err, MPRESS_ESYSTEM, "internal error: %s.%s cannot be "
                                  "derived from its producer", op->name, op->saved[j].role);
    }
    for (int i = tp->n - 1; i >= 0; i--)
        xfree(x, &tp->b[i]);
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
            if ((rc = xalloc(x, b, g, MPRESS_MEM_WORKING, op->outputs[i].bytes, 1, err,
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
        if (!b->p && (rc = xalloc(x, b, g, MPRESS_MEM_WORKING,
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
        xfree(x, &s->dev);
        s->state = SV_NONE;
    }
    pthread_mutex_unlock(&x->lock);
    for (int i = 0; i < op->n_outputs; i++)
        xfree(x, &x->grad[SLOT(x, k, m) + o][i]);
    for (int i = 0; i < op->n_inputs; i++) {
        const struct mpress_model_tensor *in = &op->inputs[i];
        if (in->producer >= 0 && needed_by_loss_backward(x, in->producer, in->producer_output))
            xfree(x, &x->out[SLOT(x, k, m) + in->producer][in->producer_output]);
    }
    if (o == st->last_op && k + 1 < x->S)
        xfree(x, &x->recv_grad[m * x->S + k]);
    if (o == st->first_op) {
        if (k > 0 && (rc = pack(x, &x->cuts[k - 1], &x->send_grad[m * x->S + k - 1], k, m, 1,
                                err)))
            return rc;
        /* pinned stage inputs of this micro-batch are no longer needed */
        for (int p = 0; p < st->first_op; p++)
            for (int r = 0; r < IO; r++)
                if (x->pinned[PIN(x, k, p, r)])
                    xfree(x, &x->out[SLOT(x, k, m) + p][r]);
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
    int rc = xalloc(x, &s->part[q], t->dst, MPRESS_MEM_PARKED, t->bytes, 0, err, WHERE_FMT,
                    t->stage, t->src, op->name, what, m);
    if (!rc && !s->dev.p)
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "internal error: %s.%s is not on gpu %d to "
                              "evict", op->name, op->saved[a->tensor].role, t->src);
    if (!rc)
        rc = x->be->copy(x->be->ctx, t->dst, s->part[q].p, t->src, (char *)s->dev.p + off,
                         t->bytes, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&x->lock);
    /* The GPU's copy goes when every part has left, unless a part is already coming back
     * (a prefetch waits only for its own part's eviction): then the copy stays, intact. */
    if (++s->evicted == parts && !s->prefetching) {
        xfree(x, &s->dev);
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
    if (!s->dev.p) {
        char what[80];
        snprintf(what, sizeof(what), "prefetched %s", op->saved[a->tensor].role);
        rc = xalloc(x, &s->dev, g, MPRESS_MEM_WORKING, op->saved[a->tensor].bytes, 0, err,
                    WHERE_FMT, t->stage, g, op->name, what, m);
    }
    pthread_mutex_unlock(&x->lock);
    if (!rc && !s->part[q].p)
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "internal error: %s.%s part %d is not "
                              "parked", op->name, op->saved[a->tensor].role, q);
    if (!rc)
        rc = x->be->copy(x->be->ctx, g, (char *)s->dev.p + off, t->src, s->part[q].p, t->bytes,
                         err);
    if (rc)
        return rc;
    pthread_mutex_lock(&x->lock);
    xfree(x, &s->part[q]);
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
    int rc = xalloc(x, to, t->dst, MPRESS_MEM_BUFFERS, t->bytes, 0, err, WHERE_FMT, recv_stage,
                    t->dst, x->model.ops[t->op].name,
                    grads ? "boundary gradient receive buffer" : "boundary receive buffer", m);
    if (!rc)
        rc = x->be->copy(x->be->ctx, t->dst, to->p, t->src, from->p, t->bytes, err);
    xfree(x, from);
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
    int rc = xalloc(x, &tr->buf, t->dst, MPRESS_MEM_BUFFERS, bytes, 0, err, "stage %d (gpu %d), "
                    "op %s, tied-weight gradient from gpu %d", x->stage_of[t->tied_op], t->dst,
                    x->model.ops[t->tied_op].name, t->src);
    if (!rc)
        rc = x->be->copy(x->be->ctx, t->dst, tr->buf.p, t->src, x->dp[ps].g, bytes, err);
    return rc;
}

/* Folds into stage k's gradients the tied-weight gradients it received and those of tied
 * copies on the stage itself (owner += copy, as the sequential trainer adds them). */
static int fold_tied(struct mpress_exec *x, int k, struct mpress_error *err)
{
    int g = gpu_of_stage(x, k), rc = 0;
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
        xfree(x, &tr->buf);
    }
    pthread_mutex_unlock(&x->lock);
    return rc;
}

static int run_step_task(struct mpress_exec *x, const struct mpress_task *t,
                         struct mpress_error *err)
{
    int k = t->stage, g = gpu_of_stage(x, k), rc = 0;
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
            rc = x->be->copy(x->be->ctx, MPRESS_RT_HOST, h->g, g, d->g, bytes, err);
            break;
        case MPRESS_TASK_WEIGHTS_H2D:
            rc = x->be->copy(x->be->ctx, g, d->w, MPRESS_RT_HOST, h->w, bytes, err);
            break;
        default:
            rc = x->be->optimizer_step(x->be->ctx, on_host ? MPRESS_RT_HOST : g, &x->optim,
                                       x->steps + 1, on_host ? h : d, err);
        }
    }
    return rc;
}

static int run_task(struct mpress_exec *x, int i, struct mpress_error *err)
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

/* ---- the queues -------------------------------------------------------------------------- */

struct worker {
    struct mpress_exec *x;
    int queue;
    pthread_t thread;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct mpress_exec *x = w->x;
    int n = 0;
    const int *tasks = mpress_sched_queue_tasks(x->sched, w->queue, &n);
    for (int q = 0; q < n; q++) {
        int i = tasks[q], np = 0;
        const int *preds = mpress_sched_preds(x->sched, i, &np);
        pthread_mutex_lock(&x->lock);
        for (;;) {
            int ready = 1;
            for (int p = 0; p < np && ready; p++)
                ready = x->done[preds[p]];
            if (ready || x->failed)
                break;
            pthread_cond_wait(&x->cond, &x->lock);
        }
        int stop = x->failed;
        pthread_mutex_unlock(&x->lock);
        if (stop)
            break;
        struct mpress_error e;
        mpress_error_clear(&e);
        x->times[2 * i] = now_s() - x->t0;
        int rc = run_task(x, i, &e);
        x->times[2 * i + 1] = now_s() - x->t0;
        pthread_mutex_lock(&x->lock);
        if (rc) {
            if (!x->failed) {
                x->failed = rc;
                x->err = e;
                x->err.code = rc;
            }
        } else {
            x->done[i] = 1;
        }
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        if (rc)
            break;
    }
    return NULL;
}

int mpress_exec_step(struct mpress_exec *x, double *loss, double *seconds,
                     struct mpress_error *err)
{
    int rc = 0;
    for (int m = 0; m < x->M && !rc; m++)
        rc = mpress_host_batch_fill(&x->model.config, x->opt.data, x->opt.n_data, x->opt.seed,
                                    (uint32_t)x->steps, (uint32_t)m, &x->batch[m], err);
    if (rc)
        return rc;
    for (int i = 0; i < x->hp.n && !rc; i++) {
        int g = gpu_of_stage(x, x->stage_of[x->hp.p[i].op]);
        rc = x->be->zero(x->be->ctx, g, x->dp[i].g,
                         x->dp[i].n * (uint64_t)mpress_dtype_size(x->dp[i].dtype), err);
    }
    if (rc)
        return rc;
    int nt = mpress_sched_task_count(x->sched), nq = mpress_sched_queue_count(x->sched);
    memset(x->done, 0, (size_t)nt);
    memset(x->grad_unpacked, 0, (size_t)x->M * (size_t)x->S);
    for (int i = 0; i < 2 * nt; i++)
        x->times[i] = -1;
    x->failed = 0;
    mpress_error_clear(&x->err);
    struct worker *w = calloc((size_t)nq + 1, sizeof(*w));
    if (!w)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    x->t0 = now_s();
    int started = 0;
    for (int q = 0; q < nq; q++) {
        int n = 0;
        mpress_sched_queue_tasks(x->sched, q, &n);
        if (!n)
            continue;
        w[started].x = x;
        w[started].queue = q;
        if (pthread_create(&w[started].thread, NULL, worker_main, &w[started]) != 0) {
            pthread_mutex_lock(&x->lock);
            if (!x->failed) {
                x->failed = MPRESS_ESYSTEM;
                mpress_error_set(&x->err, MPRESS_ESYSTEM, "cannot start a queue thread");
            }
            pthread_cond_broadcast(&x->cond);
            pthread_mutex_unlock(&x->lock);
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(w[i].thread, NULL);
    free(w);
    if (x->be->synchronize)
        for (int g = 0; g < x->plan->topology.n_gpus && !x->failed; g++)
            if ((rc = x->be->synchronize(x->be->ctx, g, &x->err)))
                x->failed = rc;
    double dt = now_s() - x->t0;
    if (x->failed) {
        if (err)
            *err = x->err;
        free_step_state(x);
        return x->failed;
    }
    for (int i = 0; i < nt; i++)
        if (!x->done[i]) {
            free_step_state(x);
            return mpress_error_set(err, MPRESS_ESYSTEM, "internal error: task %d did not run",
                                    i);
        }
    /* Every tensor of the step has been freed by the task the schedule gives it: anything
     * left (but model states and reserves) is a bug in the data flow, not memory to carry. */
    for (int d = -1; x->be->usage && d < x->plan->topology.n_gpus; d++) {
        uint64_t cur[MPRESS_MEM_KINDS];
        x->be->usage(x->be->ctx, d, cur);
        for (int kd = MPRESS_MEM_ACTIVATIONS; kd <= MPRESS_MEM_BUFFERS; kd++)
            if (cur[kd]) {
                free_step_state(x);
                return mpress_error_set(err, MPRESS_ESYSTEM, "internal error: %llu bytes of "
                                        "%s left on %s %d after the step",
                                        (unsigned long long)cur[kd], mpress_mem_kind_name(kd),
                                        d < 0 ? "host" : "gpu", d);
            }
    }
    free_step_state(x);     /* resets the per-step bookkeeping; frees nothing now */
    double sum = 0;
    for (int m = 0; m < x->M; m++)
        sum += x->loss[m];
    x->steps++;
    if (loss)
        *loss = sum / x->M;
    if (seconds)
        *seconds = dt;
    return 0;
}

int mpress_exec_steps_done(const struct mpress_exec *x)
{
    return x->steps;
}

const struct mpress_sched *mpress_exec_sched(const struct mpress_exec *x)
{
    return x->sched;
}

const double *mpress_exec_task_times(const struct mpress_exec *x)
{
    return x->times;
}

uint64_t mpress_exec_pinned_bytes(const struct mpress_exec *x, int gpu)
{
    return gpu >= 0 && gpu < MPRESS_MAX_GPUS ? x->pinned_bytes[gpu] : 0;
}

/* ---- checkpoints ------------------------------------------------------------------------- */

/* Copies the device state of every owned parameter into (to_host = 1) or out of the host
 * copies in x->hp. */
static int sync_params(struct mpress_exec *x, int to_host, struct mpress_error *err)
{
    int rc = 0;
    for (int i = 0; i < x->hp.n && !rc; i++) {
        struct mpress_host_param *p = &x->hp.p[i];
        int k = x->stage_of[p->op], g = gpu_of_stage(x, k);
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
