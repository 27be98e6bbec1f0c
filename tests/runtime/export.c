/* Runs one training step of the sequential reference trainer and writes what PyTorch needs to
 * redo it independently (tests/runtime/torch_check.py): the config, hyper-parameters, initial
 * weights, each micro-batch's tokens, labels and dropout masks, each micro-batch's loss, the
 * accumulated gradients and the weights after the AdamW step.
 * Usage: export MODEL DTYPE MICRO_BATCHES OUT [CORPUS|-] [SEQ] (- : docs/cost-model.md)
 * File: "MPRTEST1", then records: u32 name length, name, u32 dtype (0 f32, 1 i64, 2 u8),
 * u32 ndim, i64 dims[ndim], the data (little-endian). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/runtime/host_ops.h"

static FILE *out;

static void rec(const char *name, uint32_t dtype, int ndim, const int64_t *dims, const void *data)
{
    uint32_t len = (uint32_t)strlen(name), nd = (uint32_t)ndim;
    size_t n = 1, esz = dtype == 0 ? 4 : dtype == 1 ? 8 : 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)dims[i];
    fwrite(&len, 4, 1, out);
    fwrite(name, 1, len, out);
    fwrite(&dtype, 4, 1, out);
    fwrite(&nd, 4, 1, out);
    fwrite(dims, 8, (size_t)ndim, out);
    fwrite(data, esz, n, out);
}

static void rec_tensor(const char *prefix, const char *opname, const struct mpress_model_tensor *t,
                       const void *data)
{
    char name[256];
    snprintf(name, sizeof(name), "%s%s.%s", prefix, opname, t->role);
    uint32_t dt = t->dtype == MPRESS_DTYPE_FP32 ? 0 : t->dtype == MPRESS_DTYPE_I64 ? 1 : 2;
    rec(name, dt, t->ndim, t->shape, data);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: export MODEL DTYPE MICRO_BATCHES OUT [CORPUS|-] [SEQ]\n");
        return 2;
    }
    struct mpress_model_config c;
    if (mpress_model_find(argv[1], &c) != 0) {
        fprintf(stderr, "unknown model '%s'\n", argv[1]);
        return 2;
    }
    snprintf(c.dtype, sizeof(c.dtype), "%s", argv[2]);
    int M = atoi(argv[3]);
    char path[4096];
    if (argc > 6)
        c.seq = atoi(argv[6]);
    if (argc > 5 && strcmp(argv[5], "-") != 0)
        snprintf(path, sizeof(path), "%s", argv[5]);
    else
        snprintf(path, sizeof(path), "%s/docs/cost-model.md",
                 getenv("MPRESS_SRCDIR") ? getenv("MPRESS_SRCDIR") : ".");
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open '%s'\n", path);
        return 4;
    }
    uint8_t *data = malloc(1 << 22);
    size_t n = fread(data, 1, 1 << 22, f);
    fclose(f);

    struct mpress_host_trainer_options o;
    mpress_host_trainer_options_default(&o);
    o.seed = 7;
    struct mpress_host_trainer *t;
    struct mpress_error err;
    if (mpress_host_trainer_create(&c, &o, data, n, &t, &err) != 0) {
        fprintf(stderr, "%s\n", err.text);
        return 1;
    }
    out = fopen(argv[4], "wb");
    if (!out)
        return 4;
    fwrite("MPRTEST1", 1, 8, out);
    int64_t cfg[8] = {c.layers, c.hidden, c.heads, c.ffn, c.seq, c.vocab, c.micro_batch,
                      strcmp(c.family, "bert") == 0};
    int64_t d8 = 8, d1 = 1;
    rec("config", 1, 1, &d8, cfg);
    float hp[8] = {o.hp.hidden_dropout, o.hp.attn_dropout, o.hp.ln_eps, o.optim.lr,
                   o.optim.beta1, o.optim.beta2, o.optim.eps, o.optim.weight_decay};
    rec("hparams", 0, 1, &d8, hp);
    int64_t m64 = M;
    rec("micro_batches", 1, 1, &d1, &m64);

    const struct mpress_model *m = &t->model;
    uint64_t most = 1;
    for (int i = 0; i < t->params.n; i++)
        most = t->params.p[i].n > most ? t->params.p[i].n : most;
    float *tmp = malloc(sizeof(float) * (size_t)most);
    if (!tmp)
        return 4;
    /* own weights, as fp32 */
    for (int i = 0; i < t->params.n; i++) {
        struct mpress_host_param *p = &t->params.p[i];
        if (p->owner >= 0)
            continue;
        const struct mpress_model_tensor *w = &m->ops[p->op].weights[p->index];
        mpress_host_load(tmp, p->w, p->dtype, (size_t)p->n);
        struct mpress_model_tensor w32 = *w;
        w32.dtype = MPRESS_DTYPE_FP32;
        rec_tensor("w0/", m->ops[p->op].name, &w32, tmp);
    }
    mpress_host_params_zero_grad(&t->params);
    t->loss_grad = 1.0f / (float)M;
    for (int mb = 0; mb < M; mb++) {
        float loss;
        if (mpress_host_trainer_micro_batch(t, (uint32_t)mb, &loss, &err) != 0) {
            fprintf(stderr, "%s\n", err.text);
            return 1;
        }
        char pre[32];
        snprintf(pre, sizeof(pre), "mb%d/", mb);
        for (int i = 0; i < m->n_ops; i++) {
            const struct mpress_model_op *op = &m->ops[i];
            for (int j = 0; j < op->n_inputs; j++)
                if (op->inputs[j].producer < 0)
                    rec_tensor(pre, "data", &op->inputs[j],
                               mpress_host_batch_input(&c, &t->batch,
                                                       op->inputs[j].producer_output));
            for (int j = 0; j < op->n_saved; j++)
                if (strcmp(op->saved[j].role, "dropout_mask") == 0)
                    rec_tensor(pre, op->name, &op->saved[j], t->saved[i][j]);
        }
        char name[64];
        snprintf(name, sizeof(name), "%sloss", pre);
        rec(name, 0, 1, &d1, &loss);
    }
    mpress_host_trainer_apply(t);
    for (int i = 0; i < t->params.n; i++) {
        struct mpress_host_param *p = &t->params.p[i];
        if (p->owner >= 0)
            continue;
        struct mpress_model_tensor w32 = m->ops[p->op].weights[p->index];
        w32.dtype = MPRESS_DTYPE_FP32;
        mpress_host_load(tmp, p->g, p->dtype, (size_t)p->n);
        rec_tensor("g/", m->ops[p->op].name, &w32, tmp);
        mpress_host_load(tmp, p->w, p->dtype, (size_t)p->n);
        rec_tensor("w1/", m->ops[p->op].name, &w32, tmp);
        int64_t dec = p->decay;
        char name[256];
        snprintf(name, sizeof(name), "decay/%s.%s", m->ops[p->op].name,
                 m->ops[p->op].weights[p->index].role);
        rec(name, 1, 1, &d1, &dec);
    }
    free(tmp);
    int rc = fclose(out) == 0 ? 0 : 4;
    mpress_host_trainer_destroy(t);
    free(data);
    return rc;
}
