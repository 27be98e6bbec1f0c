/* Parameters (allocation, init from a seed), AdamW and SGD, the byte-level data loader and the
 * sequential reference trainer of the host backend. Conventions: docs/runtime.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host_ops.h"

/* ---- parameters -------------------------------------------------------------------------- */

static int is_one(const char *role)
{
    return strcmp(role, "gamma") == 0 || strcmp(role, "ln_gamma") == 0;
}

static int is_zero(const char *role)
{
    size_t n = strlen(role);
    return strcmp(role, "beta") == 0 || strcmp(role, "ln_beta") == 0 ||
           (n >= 4 && strcmp(role + n - 4, "bias") == 0);
}

/* N(0, std) from Box-Muller on two Philox words per element. */
static void init_normal(float *x, uint64_t n, const struct mpress_rng_key *k, double std)
{
    for (uint64_t i = 0; i < n; i++) {
        uint32_t w[2];
        mpress_rng_fill(k, 2 * i, 2, w);
        double u1 = ((double)(w[0] >> 8) + 1.0) / 16777216.0; /* (0, 1] */
        double u2 = (double)(w[1] >> 8) / 16777216.0;         /* [0, 1) */
        x[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

void mpress_host_params_finish(struct mpress_host_params *ps)
{
    if (!ps)
        return;
    for (int i = 0; ps->p && i < ps->n; i++) {
        struct mpress_host_param *p = &ps->p[i];
        if (p->owner < 0)
            free(p->w);
        free(p->g);
        free(p->master);
        free(p->m);
        free(p->v);
    }
    free(ps->p);
    free(ps->first);
    memset(ps, 0, sizeof(*ps));
}

int mpress_host_params_create(const struct mpress_model *m, uint64_t seed,
                              struct mpress_host_params *out, struct mpress_error *err)
{
    memset(out, 0, sizeof(*out));
    int n = 0;
    for (int i = 0; i < m->n_ops; i++)
        n += m->ops[i].n_weights;
    out->p = calloc((size_t)(n ? n : 1), sizeof(*out->p));
    out->first = calloc((size_t)m->n_ops + 1, sizeof(int));
    out->sgd = strcmp(m->config.optimizer, "sgd") == 0;
    if (!out->p || !out->first)
        goto nomem;
    int L = m->config.layers;
    for (int o = 0; o < m->n_ops; o++) {
        const struct mpress_model_op *op = &m->ops[o];
        out->first[o] = out->n;
        for (int j = 0; j < op->n_weights; j++) {
            const struct mpress_model_tensor *t = &op->weights[j];
            struct mpress_host_param *p = &out->p[out->n++];
            p->op = o;
            p->index = j;
            p->owner = -1;
            p->dtype = t->dtype;
            p->n = t->bytes / (uint64_t)mpress_dtype_size(t->dtype);
            p->decay = !is_one(t->role) && !is_zero(t->role);
            size_t bytes = (size_t)t->bytes;
            p->g = calloc(bytes, 1);
            if (!p->g)
                goto nomem;
            if (t->producer >= 0) {
                /* tied: the owner's weight with the same role */
                const struct mpress_model_op *own = &m->ops[t->producer];
                for (int k = 0; k < own->n_weights; k++)
                    if (strcmp(own->weights[k].role, t->role) == 0)
                        p->owner = out->first[t->producer] + k;
                if (p->owner < 0 || out->p[p->owner].n != p->n) {
                    mpress_host_params_finish(out);
                    return mpress_error_set(err, MPRESS_EUSAGE,
                                            "op %s: tied weight %s has no owner", op->name,
                                            t->role);
                }
                p->w = out->p[p->owner].w;
                p->decay = 0;
                continue;
            }
            int fp32 = t->dtype == MPRESS_DTYPE_FP32;
            p->w = calloc(bytes, 1);
            p->m = calloc((size_t)p->n, sizeof(float));
            if (!out->sgd)
                p->v = calloc((size_t)p->n, sizeof(float));
            if (!fp32)
                p->master = calloc((size_t)p->n, sizeof(float));
            if (!p->w || !p->m || (!out->sgd && !p->v) || (!fp32 && !p->master))
                goto nomem;
            float *x = fp32 ? p->w : p->master;
            if (is_one(t->role)) {
                for (uint64_t i = 0; i < p->n; i++)
                    x[i] = 1.0f;
            } else if (!is_zero(t->role)) {
                /* GPT-2: N(0, 0.02), the residual projections scaled by 1/sqrt(2L) */
                double std = 0.02;
                if (strcmp(op->kind, "attn_proj") == 0 || strcmp(op->kind, "mlp_down") == 0)
                    std /= sqrt(2.0 * L);
                struct mpress_rng_key k = {seed, MPRESS_RNG_STEP_INIT, (uint32_t)j, (uint32_t)o};
                init_normal(x, p->n, &k, std);
            }
            if (!fp32)
                mpress_host_store(p->w, p->master, t->dtype, (size_t)p->n);
        }
    }
    out->first[m->n_ops] = out->n;
    return 0;
nomem:
    mpress_host_params_finish(out);
    return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory for parameters");
}

void mpress_host_params_zero_grad(struct mpress_host_params *ps)
{
    for (int i = 0; i < ps->n; i++)
        memset(ps->p[i].g, 0, (size_t)ps->p[i].n * (size_t)mpress_dtype_size(ps->p[i].dtype));
}

void mpress_host_tied_reduce(struct mpress_host_params *ps)
{
    for (int i = 0; i < ps->n; i++) {
        struct mpress_host_param *t = &ps->p[i];
        if (t->owner < 0)
            continue;
        struct mpress_host_param *o = &ps->p[t->owner];
        if (mpress_host_storage(o->dtype) == MPRESS_DTYPE_BF16) {
            uint16_t *d = o->g;
            const uint16_t *s = t->g;
            for (uint64_t k = 0; k < o->n; k++)
                d[k] = mpress_f32_to_bf16(mpress_bf16_to_f32(d[k]) + mpress_bf16_to_f32(s[k]));
        } else {
            float *d = o->g;
            const float *s = t->g;
            for (uint64_t k = 0; k < o->n; k++)
                d[k] += s[k];
        }
    }
}

/* ---- optimizer --------------------------------------------------------------------------- */

void mpress_host_optim_default(struct mpress_host_optim *o)
{
    o->lr = 1e-3f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->weight_decay = 0.01f;
    o->momentum = 0.9f;
}

static float grad_at(const struct mpress_host_param *p, uint64_t i)
{
    if (mpress_host_storage(p->dtype) == MPRESS_DTYPE_BF16)
        return mpress_bf16_to_f32(((const uint16_t *)p->g)[i]);
    return ((const float *)p->g)[i];
}

/* One AdamW update over n fp32 elements. */
static void adamw_chunk(const struct mpress_host_optim *o, float step, float bc2s, float wd,
                        const float *restrict g, float *restrict m, float *restrict v,
                        float *restrict x, size_t n)
{
    float b1 = o->beta1, b2 = o->beta2, c1 = 1.0f - o->beta1, c2 = 1.0f - o->beta2, eps = o->eps;
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + c1 * g[i];
        v[i] = b2 * v[i] + c2 * g[i] * g[i];
        float denom = sqrtf(v[i]) / bc2s + eps;
        x[i] = x[i] * wd - step * (m[i] / denom);
    }
}
void mpress_host_optim_step(const struct mpress_host_optim *o, int sgd, int t,
                            struct mpress_host_param *p)
{
    if (p->owner >= 0)
        return;
    float *x = p->master ? p->master : p->w;
    float wd = p->decay ? 1.0f - o->lr * o->weight_decay : 1.0f;
    if (sgd) {
        /* torch.optim.SGD with momentum (no dampening): m = mu m + g; x -= lr m */
        for (uint64_t i = 0; i < p->n; i++) {
            float g = grad_at(p, i);
            p->m[i] = t == 1 ? g : o->momentum * p->m[i] + g;
            x[i] = x[i] * wd - o->lr * p->m[i];
        }
    } else {
        /* torch.optim.AdamW: x *= 1 - lr wd; m, v moving averages; x -= lr / bc1 · m /
         * (sqrt(v) / sqrt(bc2) + eps) */
        float bc1 = (float)(1.0 - pow((double)o->beta1, t));
        float bc2s = (float)sqrt(1.0 - pow((double)o->beta2, t));
        float step = o->lr / bc1, gb[1024];
        int bf = mpress_host_storage(p->dtype) == MPRESS_DTYPE_BF16;
        for (uint64_t i = 0; i < p->n; i += 1024) {
            size_t k = (size_t)(p->n - i < 1024 ? p->n - i : 1024);
            const float *g = gb;
            if (bf)
                for (size_t j = 0; j < k; j++)
                    gb[j] = mpress_bf16_to_f32(((const uint16_t *)p->g)[i + j]);
            else
                g = (const float *)p->g + i;
            adamw_chunk(o, step, bc2s, wd, g, p->m + i, p->v + i, x + i, k);
        }
    }
    if (p->master)
        mpress_host_store(p->w, p->master, p->dtype, (size_t)p->n);
}

/* ---- data -------------------------------------------------------------------------------- */

int mpress_host_batch_init(const struct mpress_model_config *c, struct mpress_host_batch *b,
                           struct mpress_error *err)
{
    memset(b, 0, sizeof(*b));
    size_t n = (size_t)c->seq * (size_t)c->micro_batch;
    b->tokens = calloc(n, sizeof(int64_t));
    b->token_types = calloc(n, sizeof(int64_t));
    b->labels = calloc(n, sizeof(int64_t));
    b->nsp_labels = calloc((size_t)c->micro_batch, sizeof(int64_t));
    if (!b->tokens || !b->token_types || !b->labels || !b->nsp_labels) {
        mpress_host_batch_finish(b);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory for a batch");
    }
    return 0;
}

void mpress_host_batch_finish(struct mpress_host_batch *b)
{
    if (!b)
        return;
    free(b->tokens);
    free(b->token_types);
    free(b->labels);
    free(b->nsp_labels);
    memset(b, 0, sizeof(*b));
}

const int64_t *mpress_host_batch_input(const struct mpress_model_config *c,
                                       const struct mpress_host_batch *b, int k)
{
    if (strcmp(c->family, "bert") == 0) {
        const int64_t *in[4] = {b->tokens, b->token_types, b->labels, b->nsp_labels};
        return k >= 0 && k < 4 ? in[k] : NULL;
    }
    const int64_t *in[2] = {b->tokens, b->labels};
    return k >= 0 && k < 2 ? in[k] : NULL;
}

/* A start in [0, range) from two words of the data stream. */
static uint64_t pick(const struct mpress_rng_key *k, uint64_t element, uint64_t range)
{
    uint32_t w[2];
    mpress_rng_fill(k, 2 * element, 2, w);
    return (((uint64_t)w[0] << 32) | w[1]) % range;
}

int mpress_host_batch_fill(const struct mpress_model_config *c, const uint8_t *data, size_t n,
                           uint64_t seed, uint32_t step, uint32_t micro_batch,
                           struct mpress_host_batch *b, struct mpress_error *err)
{
    int64_t S = c->seq, B = c->micro_batch;
    int bert = strcmp(c->family, "bert") == 0;
    if (c->vocab < (bert ? 257 : 256))
        return mpress_error_set(err, MPRESS_EINPUT,
                                "byte-level data needs a vocabulary of at least %d (%s has %d)",
                                bert ? 257 : 256, c->name, c->vocab);
    if ((uint64_t)n < (uint64_t)S + 1)
        return mpress_error_set(err, MPRESS_EINPUT,
                                "the corpus has %zu bytes, fewer than seq + 1 = %lld", n,
                                (long long)S + 1);
    struct mpress_rng_key k = {seed, step, micro_batch, MPRESS_RNG_OP_DATA};
    uint64_t range = (uint64_t)n - (uint64_t)S;  /* starts with s + 1 bytes after them */
    for (int64_t r = 0; r < B; r++) {
        uint64_t start = pick(&k, (uint64_t)(4 * r), range);
        if (!bert) {
            for (int64_t i = 0; i < S; i++) {
                b->tokens[r * S + i] = data[start + (uint64_t)i];
                b->labels[r * S + i] = data[start + (uint64_t)i + 1];
            }
            continue;
        }
        /* segment A: the first s/2 bytes of the window; segment B: the window's continuation
         * (NSP label 0) or, when the coin says so, s - s/2 bytes from another start (label 1) */
        int64_t half = S / 2;
        int random_next = (mpress_rng_word(&k, (uint64_t)(8 * r + 2)) & 1u) != 0;
        uint64_t startb = start + (uint64_t)half;
        if (random_next)
            startb = pick(&k, (uint64_t)(4 * r + 2), (uint64_t)n - (uint64_t)(S - half) + 1);
        b->nsp_labels[r] = random_next;
        for (int64_t i = 0; i < S; i++) {
            int64_t v = i < half ? data[start + (uint64_t)i]
                                 : data[startb + (uint64_t)(i - half)];
            b->token_types[r * S + i] = i >= half;
            b->labels[r * S + i] = v;
            b->tokens[r * S + i] = v;
        }
    }
    if (bert) {
        /* MLM: 15 % of positions (Devlin et al. 2019) become the mask token vocab - 1; the loss
         * covers every position (labels are the unmasked bytes) */
        struct mpress_rng_key km = {seed, step, micro_batch, MPRESS_RNG_OP_MLM};
        uint32_t thr = (uint32_t)(0.15 * 16777216.0);
        for (int64_t i = 0; i < S * B; i++)
            if ((mpress_rng_word(&km, (uint64_t)i) >> 8) < thr)
                b->tokens[i] = c->vocab - 1;
    }
    return 0;
}

/* ---- the reference trainer --------------------------------------------------------------- */

void mpress_host_trainer_options_default(struct mpress_host_trainer_options *o)
{
    memset(o, 0, sizeof(*o));
    o->seed = 1;
    mpress_host_hparams_default(&o->hp);
    mpress_host_optim_default(&o->optim);
}

void mpress_host_trainer_destroy(struct mpress_host_trainer *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->model.n_ops; i++)
        for (int j = 0; j < MPRESS_MODEL_MAX_IO; j++) {
            if (t->out)
                free(t->out[i][j]);
            if (t->dout)
                free(t->dout[i][j]);
        }
    for (int i = 0; t->saved && i < t->model.n_ops; i++)
        for (int j = 0; j < MPRESS_MODEL_MAX_SAVED; j++)
            free(t->saved[i][j]);
    free(t->out);
    free(t->dout);
    free(t->saved);
    mpress_host_batch_finish(&t->batch);
    mpress_host_params_finish(&t->params);
    mpress_model_finish(&t->model);
    free(t);
}

int mpress_host_trainer_create(const struct mpress_model_config *c,
                               const struct mpress_host_trainer_options *o, const uint8_t *data,
                               size_t n_data, struct mpress_host_trainer **out,
                               struct mpress_error *err)
{
    *out = NULL;
    struct mpress_host_trainer *t = calloc(1, sizeof(*t));
    if (!t)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory for the trainer");
    int rc = mpress_model_build(c, &t->model, err);
    if (rc) {
        free(t);
        return rc;
    }
    t->opt = *o;
    t->data = data;
    t->n_data = n_data;
    t->loss_grad = 1.0f;
    rc = mpress_host_params_create(&t->model, o->seed, &t->params, err);
    if (!rc)
        rc = mpress_host_batch_init(c, &t->batch, err);
    if (rc) {
        mpress_host_trainer_destroy(t);
        return rc;
    }
    int n = t->model.n_ops;
    t->out = calloc((size_t)n, sizeof(*t->out));
    t->dout = calloc((size_t)n, sizeof(*t->dout));
    t->saved = calloc((size_t)n, sizeof(*t->saved));
    if (!t->out || !t->dout || !t->saved)
        goto nomem;
    for (int i = 0; i < n; i++) {
        const struct mpress_model_op *op = &t->model.ops[i];
        for (int j = 0; j < op->n_outputs; j++) {
            t->out[i][j] = calloc((size_t)op->outputs[j].bytes, 1);
            t->dout[i][j] = calloc((size_t)op->outputs[j].bytes, 1);
            if (!t->out[i][j] || !t->dout[i][j])
                goto nomem;
        }
        for (int j = 0; j < op->n_saved; j++)
            if (!(t->saved[i][j] = calloc((size_t)op->saved[j].bytes, 1)))
                goto nomem;
    }
    *out = t;
    return 0;
nomem:
    mpress_host_trainer_destroy(t);
    return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory for activations");
}

void mpress_host_trainer_io(const struct mpress_host_trainer *t, int op,
                            struct mpress_host_io *io)
{
    memset(io, 0, sizeof(*io));
    const struct mpress_model_op *o = &t->model.ops[op];
    for (int i = 0; i < o->n_inputs; i++) {
        const struct mpress_model_tensor *x = &o->inputs[i];
        if (x->producer < 0) {
            io->in[i] = mpress_host_batch_input(&t->model.config, &t->batch, x->producer_output);
        } else {
            io->in[i] = t->out[x->producer][x->producer_output];
            io->din[i] = t->dout[x->producer][x->producer_output];
        }
    }
    for (int i = 0; i < o->n_outputs; i++) {
        io->out[i] = t->out[op][i];
        io->dout[i] = t->dout[op][i];
    }
    for (int i = 0; i < o->n_saved; i++)
        io->saved[i] = t->saved[op][i];
    const struct mpress_host_param *p = &t->params.p[t->params.first[op]];
    for (int i = 0; i < o->n_weights; i++) {
        io->w[i] = p[i].w;
        io->dw[i] = p[i].g;
    }
}

int mpress_host_trainer_micro_batch(struct mpress_host_trainer *t, uint32_t micro_batch,
                                    float *loss, struct mpress_error *err)
{
    const struct mpress_model *m = &t->model;
    int rc = mpress_host_batch_fill(&m->config, t->data, t->n_data, t->opt.seed, t->step,
                                    micro_batch, &t->batch, err);
    if (rc)
        return rc;
    struct mpress_host_io io;
    for (int i = 0; i < m->n_ops; i++) {
        struct mpress_rng_key k = {t->opt.seed, t->step, micro_batch, (uint32_t)i};
        mpress_host_trainer_io(t, i, &io);
        if ((rc = mpress_host_forward(m, i, &t->opt.hp, &k, &io, err)) != 0)
            return rc;
    }
    int last = m->n_ops - 1;
    memcpy(loss, t->out[last][0], sizeof(float));
    for (int i = 0; i < m->n_ops; i++)
        for (int j = 0; j < m->ops[i].n_outputs; j++)
            memset(t->dout[i][j], 0, (size_t)m->ops[i].outputs[j].bytes);
    memcpy(t->dout[last][0], &t->loss_grad, sizeof(float));
    for (int i = last; i >= 0; i--) {
        struct mpress_rng_key k = {t->opt.seed, t->step, micro_batch, (uint32_t)i};
        mpress_host_trainer_io(t, i, &io);
        if ((rc = mpress_host_backward(m, i, &t->opt.hp, &k, &io, err)) != 0)
            return rc;
    }
    return 0;
}

int mpress_host_trainer_step(struct mpress_host_trainer *t, int micro_batches, double *loss,
                             struct mpress_error *err)
{
    if (micro_batches < 1)
        return mpress_error_set(err, MPRESS_EUSAGE, "need at least one micro-batch");
    mpress_host_params_zero_grad(&t->params);
    t->loss_grad = 1.0f / (float)micro_batches;
    double sum = 0;
    for (int mb = 0; mb < micro_batches; mb++) {
        float l;
        int rc = mpress_host_trainer_micro_batch(t, (uint32_t)mb, &l, err);
        if (rc)
            return rc;
        sum += l;
    }
    mpress_host_trainer_apply(t);
    *loss = sum / micro_batches;
    return 0;
}

void mpress_host_trainer_apply(struct mpress_host_trainer *t)
{
    mpress_host_tied_reduce(&t->params);
    t->step++;
    for (int i = 0; i < t->params.n; i++)
        mpress_host_optim_step(&t->opt.optim, t->params.sgd, (int)t->step, &t->params.p[i]);
}
