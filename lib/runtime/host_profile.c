/* The host profile: every op of a zoo model timed forward and backward on this CPU with the host
 * backend's math, turned into an mpress-profile (source "host") by the same construction as the
 * analytic profile, so the two differ in their times only. Method: docs/runtime.md, "Host
 * profiles". */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mpress/model.h"
#include "host_ops.h"

void mpress_host_profile_options_init(struct mpress_host_profile_options *o)
{
    memset(o, 0, sizeof(*o));
    o->warmup = 2;
    o->repeat = 9;
    o->threads = 1;
    o->seed = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n samples (sorts them). */
static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof(*x), cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* Every gradient buffer a backward pass accumulates into (each op's input and output
 * gradients and its weights' gradients) set to zero, and the loss's output gradient to 1: the
 * state a backward pass of training starts from. */
static void zero_grads(struct mpress_host_trainer *t, const struct mpress_model *model)
{
    struct mpress_host_io io;
    for (int i = 0; i < model->n_ops; i++) {
        const struct mpress_model_op *op = &model->ops[i];
        mpress_host_trainer_io(t, i, &io);
        for (int j = 0; j < op->n_outputs; j++)
            memset(t->dout[i][j], 0, (size_t)op->outputs[j].bytes);
        for (int j = 0; j < op->n_inputs; j++)
            if (io.din[j])
                memset(io.din[j], 0, (size_t)op->inputs[j].bytes);
        for (int j = 0; j < op->n_weights; j++)
            if (io.dw[j])
                memset(io.dw[j], 0, (size_t)op->weights[j].bytes);
    }
    float one = 1.0f;
    memcpy(t->dout[model->n_ops - 1][0], &one, sizeof(one));
}

/* What the reference trainer holds (parameters with their gradients and optimizer state, each
 * op's outputs, output gradients and saved tensors) against this machine's RAM, so that a model
 * too large is refused with a message rather than by the kernel killing the process. */
/* A scratch allocator that counts: the largest total any one call held (malloc underneath). */
struct scratch_count {
    uint64_t now, high;
};

static int count_alloc(void *ctx, uint64_t bytes, void **out, struct mpress_error *err)
{
    struct scratch_count *c = ctx;
    *out = malloc(bytes ? (size_t)bytes : 1);
    if (!*out)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory for %llu bytes of scratch",
                                (unsigned long long)bytes);
    c->now += bytes;
    if (c->now > c->high)
        c->high = c->now;
    return 0;
}

static void count_free(void *ctx, void *p, uint64_t bytes)
{
    struct scratch_count *c = ctx;
    c->now -= bytes;
    free(p);
}

/* What the op's backward holds besides its tensors in the host backend: the gradients of its
 * inputs and outputs (each the size of its tensor, as the executor allocates them) and the
 * largest scratch a forward or backward call of it took (measured). The profile records this
 * as workspace_bytes, where the analytic model states a GPU's (docs/cost-model.md). */
static uint64_t host_workspace(const struct mpress_model_op *op, uint64_t scratch)
{
    return mpress_model_op_gradient_bytes(op) + scratch;
}

static int check_ram(const struct mpress_model_config *c, struct mpress_error *err)
{
    struct mpress_model model;
    int rc = mpress_model_build(c, &model, err);
    if (rc)
        return rc;
    int wb, gb, ob;
    mpress_model_state_bytes(c, &wb, &gb, &ob);
    double need = (double)mpress_model_params(&model) * (wb + gb + ob);
    for (int i = 0; i < model.n_ops; i++) {
        const struct mpress_model_op *op = &model.ops[i];
        for (int j = 0; j < op->n_outputs; j++)
            need += 2.0 * (double)op->outputs[j].bytes;
        for (int j = 0; j < op->n_saved; j++)
            need += (double)op->saved[j].bytes;
    }
    mpress_model_finish(&model);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    double have = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (have > 0 && need > have)
        return mpress_error_set(err, MPRESS_EINFEASIBLE,
                                "profiling %s on the host needs %.2f GiB of RAM for its "
                                "parameters and one micro-batch, this machine has %.2f GiB",
                                c->name, need / 1073741824.0, have / 1073741824.0);
    return 0;
}

int mpress_profile_host(const struct mpress_model_config *m,
                        const struct mpress_host_profile_options *o, struct mpress_profile *out,
                        struct mpress_error *err)
{
    mpress_error_clear(err);
    if (o->warmup < 0 || o->repeat < 1 || o->threads < 1)
        return mpress_error_set(err, MPRESS_EUSAGE,
                                "a host profile needs warmup >= 0, repeat >= 1, threads >= 1");
    int rc = mpress_model_config_check(m, err);
    if (rc)
        return rc;
    if ((rc = check_ram(m, err)) != 0)
        return rc;

    /* A synthetic corpus: the timing does not depend on which bytes the tokens are, and the
     * data loader still draws the windows, the BERT masking and NSP coins as in training. */
    size_t n_data = 4 * (size_t)m->seq + 64;
    uint8_t *data = malloc(n_data);
    if (!data)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    for (size_t i = 0; i < n_data; i++)
        data[i] = (uint8_t)(i * 131u + 7u);

    struct mpress_host_trainer_options to;
    mpress_host_trainer_options_default(&to);
    to.seed = o->seed;
    struct mpress_host_trainer *t = NULL;
    double *fwd = NULL, *bwd = NULL, *samples = NULL;
    uint64_t *scratch = NULL;
    int threads = mpress_host_blas_threads(o->threads);
    rc = mpress_host_trainer_create(m, &to, data, n_data, &t, err);
    if (rc)
        goto done;
    const struct mpress_model *model = &t->model;
    int n = model->n_ops;
    fwd = calloc((size_t)n, sizeof(*fwd));
    bwd = calloc((size_t)n, sizeof(*bwd));
    if (!fwd || !bwd) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    rc = mpress_host_batch_fill(&model->config, data, n_data, o->seed, 0, 0, &t->batch, err);
    if (rc)
        goto done;

    /* Each op is timed where it runs in a training step: whole forward passes in op order,
     * then whole backward passes in reverse order, warmup + repeat of each, so that an op
     * finds the caches its predecessors left, as in training, rather than its own inputs
     * still warm from a repetition of itself (ops timed back to back ran 1.27x faster than
     * they do in a step of `mpress run --backend host`; docs/benchmarks.md, "Host backend").
     * Each op's inputs are its producers' outputs, and rerunning an op with the same RNG key
     * writes the same outputs, so every run sees real data. */
    const int passes = o->warmup + o->repeat;
    struct mpress_host_io io;
    struct scratch_count count[1];
    const struct mpress_host_scratch counted = {count, count_alloc, count_free};
    scratch = calloc((size_t)n, sizeof(*scratch));
    samples = calloc((size_t)n * (size_t)o->repeat, sizeof(*samples));
    if (!scratch || !samples) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    const int total = 2 * passes * n;
    for (int r = 0; r < passes; r++)
        for (int i = 0; i < n; i++) {
            struct mpress_rng_key k = {o->seed, 0, 0, (uint32_t)i};
            mpress_host_trainer_io(t, i, &io);
            *count = (struct scratch_count){0, 0};
            io.scratch = &counted;
            double t0 = now_s();
            rc = mpress_host_forward(model, i, &to.hp, &k, &io, err);
            double t1 = now_s();
            if (rc)
                goto done;
            if (r >= o->warmup)
                samples[(size_t)i * (size_t)o->repeat + (size_t)(r - o->warmup)] = t1 - t0;
            if (count->high > scratch[i])
                scratch[i] = count->high;
            if (o->progress)
                o->progress(o->progress_ctx, r * n + i + 1, total, model->ops[i].name);
        }
    for (int i = 0; i < n; i++)
        fwd[i] = median(samples + (size_t)i * (size_t)o->repeat, o->repeat);

    /* Backward in reverse op order from the loss gradient, as the trainer runs it; every pass
     * starts from zero gradients, so that each op accumulates into what its pass wrote. */
    for (int r = 0; r < passes; r++) {
        zero_grads(t, model);
        for (int i = n - 1; i >= 0; i--) {
            struct mpress_rng_key k = {o->seed, 0, 0, (uint32_t)i};
            mpress_host_trainer_io(t, i, &io);
            *count = (struct scratch_count){0, 0};
            io.scratch = &counted;
            double t0 = now_s();
            rc = mpress_host_backward(model, i, &to.hp, &k, &io, err);
            double t1 = now_s();
            if (rc)
                goto done;
            if (r >= o->warmup)
                samples[(size_t)i * (size_t)o->repeat + (size_t)(r - o->warmup)] = t1 - t0;
            if (count->high > scratch[i])
                scratch[i] = count->high;
            if (o->progress)
                o->progress(o->progress_ctx, passes * n + r * n + (n - i), total,
                            model->ops[i].name);
        }
    }
    for (int i = 0; i < n; i++)
        bwd[i] = median(samples + (size_t)i * (size_t)o->repeat, o->repeat);
    rc = mpress_profile_from_model(model, fwd, bwd, "host", MPRESS_HOST_DEVICE, out, err);
    for (int i = 0; !rc && i < n && i < out->n_ops; i++)
        out->ops[i].workspace_bytes = host_workspace(&model->ops[i], scratch[i]);
done:
    mpress_host_blas_threads(threads);
    mpress_host_trainer_destroy(t);
    free(data);
    free(fwd);
    free(bwd);
    free(samples);
    free(scratch);
    return rc;
}
