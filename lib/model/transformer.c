/* GPT and BERT as data: the op sequence of a Megatron-style pre-LayerNorm transformer with, per
 * op, the tensors it reads, writes, owns and saves for backward, and its kernels' FLOPs and HBM
 * bytes. The analytic profiler times these kernels; runtimes execute the same ops.
 *
 * Activations are laid out [s, b, h] as in Megatron-LM. Saved tensors per layer follow
 * Korthikanti et al. 2022 (arXiv 2205.05198), section 4.1: 34·s·b·h + 5·a·s²·b bytes in 16-bit
 * with 1-byte dropout masks; with flash attention the three s² tensors are replaced by the
 * softmax log-sum-exp (4·a·s·b bytes, fp32), as FlashAttention keeps (Dao et al. 2022). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpress/model.h"

const char *mpress_dtype_name(enum mpress_dtype t)
{
    switch (t) {
    case MPRESS_DTYPE_FP16: return "fp16";
    case MPRESS_DTYPE_BF16: return "bf16";
    case MPRESS_DTYPE_FP32: return "fp32";
    case MPRESS_DTYPE_U8: return "u8";
    case MPRESS_DTYPE_I64: return "i64";
    }
    return "?";
}

int mpress_dtype_size(enum mpress_dtype t)
{
    switch (t) {
    case MPRESS_DTYPE_FP16:
    case MPRESS_DTYPE_BF16: return 2;
    case MPRESS_DTYPE_FP32: return 4;
    case MPRESS_DTYPE_U8: return 1;
    case MPRESS_DTYPE_I64: return 8;
    }
    return 0;
}

int mpress_dtype_parse(const char *s, enum mpress_dtype *out)
{
    for (int t = MPRESS_DTYPE_FP16; t <= MPRESS_DTYPE_I64; t++) {
        if (s && strcmp(s, mpress_dtype_name((enum mpress_dtype)t)) == 0) {
            *out = (enum mpress_dtype)t;
            return 0;
        }
    }
    return -1;
}

void mpress_model_state_bytes(const struct mpress_model_config *m, int *weight, int *grad,
                              int *optim)
{
    /* ZeRO (Rajbhandari et al. 2020, section 3.1): mixed-precision Adam keeps 2 + 2 bytes of
     * 16-bit weights and gradients and 12 of fp32 master weights, momentum and variance. In pure
     * fp32 the weights are the master copy: 4 + 4 + 8. SGD with momentum keeps one state
     * instead of two: 2 + 2 + 8 (master, momentum) mixed, 4 + 4 + 4 in fp32. */
    int fp32 = strcmp(m->dtype, "fp32") == 0;
    int sgd = strcmp(m->optimizer, "sgd") == 0;
    *weight = *grad = fp32 ? 4 : 2;
    if (fp32)
        *optim = sgd ? 4 : 8;
    else
        *optim = sgd ? 8 : 12;
}

/* ---- building ops ------------------------------------------------------------------------ */

struct builder {
    struct mpress_model *m;
    enum mpress_dtype act;   /* activation and weight dtype */
    int64_t s, b, h, a, d, f, v;
    int flash, bert;
};

/* A tensor of up to 4 dims; trailing zero dims are absent. */
static struct mpress_model_tensor tz(const char *role, enum mpress_dtype t, int producer,
                                     int producer_output, int64_t d0, int64_t d1, int64_t d2,
                                     int64_t d3)
{
    struct mpress_model_tensor x;
    memset(&x, 0, sizeof(x));
    snprintf(x.role, sizeof(x.role), "%s", role);
    x.dtype = t;
    x.producer = producer;
    x.producer_output = producer_output;
    int64_t dims[4] = {d0, d1, d2, d3};
    uint64_t n = 1;
    for (int i = 0; i < 4 && dims[i] > 0; i++) {
        x.shape[x.ndim++] = dims[i];
        n *= (uint64_t)dims[i];
    }
    x.bytes = n * (uint64_t)mpress_dtype_size(t);
    return x;
}

/* Indexed by enum mpress_op_kind. */
static const char *const op_kind_names[MPRESS_N_OP_KINDS] = {
    "embedding", "ln1",      "qkv",  "attn_core",    "attn_proj",       "attn_residual", "ln2",
    "mlp_up",    "gelu",     "mlp_down", "mlp_residual", "final_layernorm", "head",       "loss",
};

const char *mpress_op_kind_name(enum mpress_op_kind k)
{
    return (unsigned)k < MPRESS_N_OP_KINDS ? op_kind_names[k] : "unknown";
}

int mpress_op_kind_parse(const char *s, enum mpress_op_kind *out)
{
    for (int i = 0; i < MPRESS_N_OP_KINDS; i++)
        if (s && strcmp(s, op_kind_names[i]) == 0) {
            *out = (enum mpress_op_kind)i;
            return 0;
        }
    return -1;
}

static struct mpress_model_op *op_new(struct builder *bd, enum mpress_op_kind k, int layer)
{
    struct mpress_model_op *op = &bd->m->ops[bd->m->n_ops++];
    const char *kind = mpress_op_kind_name(k);
    memset(op, 0, sizeof(*op));
    op->op_kind = k;
    if (layer >= 0)
        snprintf(op->name, sizeof(op->name), "layer%d.%s", layer, kind);
    else
        snprintf(op->name, sizeof(op->name), "%s", kind);
    snprintf(op->kind, sizeof(op->kind), "%s", kind);
    op->layer = layer;
    op->bwd_factor = MPRESS_ANALYTIC_BWD_FACTOR;
    return op;
}

static int op_index(struct builder *bd, const struct mpress_model_op *op)
{
    return (int)(op - bd->m->ops);
}

static void add_input(struct mpress_model_op *op, struct mpress_model_tensor t)
{
    op->inputs[op->n_inputs++] = t;
}
static void add_output(struct mpress_model_op *op, struct mpress_model_tensor t)
{
    op->outputs[op->n_outputs++] = t;
}
static void add_weight(struct mpress_model_op *op, struct mpress_model_tensor t)
{
    op->weights[op->n_weights++] = t;
    if (t.producer < 0)
        op->params += t.bytes / (uint64_t)mpress_dtype_size(t.dtype);
}
static void add_saved(struct mpress_model_op *op, struct mpress_model_tensor t)
{
    op->saved[op->n_saved++] = t;
}
static void add_kernel(struct mpress_model_op *op, const char *name, enum mpress_kernel_kind k,
                       double flops, double bytes)
{
    struct mpress_model_kernel *kn = &op->kernels[op->n_kernels++];
    snprintf(kn->name, sizeof(kn->name), "%s", name);
    kn->kind = k;
    kn->flops = flops;
    kn->bytes = bytes;
    op->fwd_flops += flops;
}

/* An activation [s, b, n] produced by output 0 of op p. */
static struct mpress_model_tensor act3(struct builder *bd, const char *role, int p, int64_t n)
{
    return tz(role, bd->act, p, 0, bd->s, bd->b, n, 0);
}

/* LayerNorm over h: reads x, writes y; saves its input. Returns the op index. */
static int layernorm(struct builder *bd, enum mpress_op_kind kind, int layer, int x)
{
    struct mpress_model_op *op = op_new(bd, kind, layer);
    int self = op_index(bd, op);
    int e = mpress_dtype_size(bd->act);
    add_input(op, act3(bd, "input", x, bd->h));
    add_weight(op, tz("gamma", bd->act, -1, 0, bd->h, 0, 0, 0));
    add_weight(op, tz("beta", bd->act, -1, 0, bd->h, 0, 0, 0));
    add_output(op, act3(bd, "output", self, bd->h));
    add_saved(op, act3(bd, "input", x, bd->h));
    add_kernel(op, "layernorm", MPRESS_KERNEL_MEMORY, 0,
               (double)e * (2.0 * bd->s * bd->b * bd->h + 2.0 * bd->h));
    return self;
}

/* y = x W^T + bias with W [n, k]: x [s, b, k] -> y [s, b, n]; saves its input. */
static int linear(struct builder *bd, enum mpress_op_kind kind, int layer, int x, int64_t k, int64_t n)
{
    struct mpress_model_op *op = op_new(bd, kind, layer);
    int self = op_index(bd, op);
    int e = mpress_dtype_size(bd->act);
    double sb = (double)bd->s * bd->b;
    add_input(op, act3(bd, "input", x, k));
    add_weight(op, tz("weight", bd->act, -1, 0, n, k, 0, 0));
    add_weight(op, tz("bias", bd->act, -1, 0, n, 0, 0, 0));
    add_output(op, act3(bd, "output", self, n));
    add_saved(op, act3(bd, "input", x, k));
    add_kernel(op, "gemm", MPRESS_KERNEL_GEMM, 2.0 * sb * k * n,
               (double)e * (sb * k + (double)n * k + n + sb * n));
    return self;
}

/* Dropout of the branch, then the residual add: y = x + dropout(branch); saves the mask. */
static int residual(struct builder *bd, enum mpress_op_kind kind, int layer, int branch, int x)
{
    struct mpress_model_op *op = op_new(bd, kind, layer);
    int self = op_index(bd, op);
    int e = mpress_dtype_size(bd->act);
    double sbh = (double)bd->s * bd->b * bd->h;
    add_input(op, act3(bd, "branch", branch, bd->h));
    add_input(op, act3(bd, "residual", x, bd->h));
    add_output(op, act3(bd, "output", self, bd->h));
    add_saved(op, tz("dropout_mask", MPRESS_DTYPE_U8, self, 0, bd->s, bd->b, bd->h, 0));
    add_kernel(op, "dropout_add", MPRESS_KERNEL_MEMORY, 0, 3.0 * e * sbh + sbh);
    return self;
}

/* Scores, softmax, dropout and context: qkv [s, b, 3h] -> context [s, b, h]. */
static int attn_core(struct builder *bd, int layer, int qkv)
{
    struct mpress_model_op *op = op_new(bd, MPRESS_OP_ATTN_CORE, layer);
    int self = op_index(bd, op);
    int e = mpress_dtype_size(bd->act);
    int64_t s = bd->s, b = bd->b, a = bd->a, d = bd->d;
    double sbh = (double)s * b * bd->h, as2b = (double)a * s * s * b;
    add_input(op, act3(bd, "qkv", qkv, 3 * bd->h));
    add_output(op, act3(bd, "context", self, bd->h));
    add_saved(op, tz("q", bd->act, qkv, 0, b, a, s, d));
    add_saved(op, tz("k", bd->act, qkv, 0, b, a, s, d));
    add_saved(op, tz("v", bd->act, qkv, 0, b, a, s, d));
    /* Megatron's formula (Narayanan et al. 2021) counts the full s x s scores, also for causal
     * attention, and so does the unfused implementation timed here. */
    double gemm = 2.0 * b * (double)s * s * bd->h;
    if (bd->flash) {
        add_saved(op, tz("softmax_lse", MPRESS_DTYPE_FP32, self, 0, b, a, s, 0));
        add_kernel(op, "flash_attention", MPRESS_KERNEL_GEMM, 2.0 * gemm,
                   (double)e * 4.0 * sbh + 4.0 * a * s * b);
        op->bwd_factor = MPRESS_ANALYTIC_FLASH_BWD_FACTOR;
    } else {
        add_saved(op, tz("softmax_out", bd->act, self, 0, b, a, s, s));
        add_saved(op, tz("dropout_mask", MPRESS_DTYPE_U8, self, 0, b, a, s, s));
        add_saved(op, tz("dropout_out", bd->act, self, 0, b, a, s, s));
        add_kernel(op, "scores", MPRESS_KERNEL_GEMM, gemm, (double)e * (2.0 * sbh + as2b));
        add_kernel(op, "softmax", MPRESS_KERNEL_MEMORY, 0, (double)e * 2.0 * as2b);
        add_kernel(op, "dropout", MPRESS_KERNEL_MEMORY, 0, (double)e * 2.0 * as2b + as2b);
        add_kernel(op, "context", MPRESS_KERNEL_GEMM, gemm, (double)e * (as2b + 2.0 * sbh));
    }
    return self;
}

static int gelu(struct builder *bd, int layer, int x)
{
    struct mpress_model_op *op = op_new(bd, MPRESS_OP_GELU, layer);
    int self = op_index(bd, op);
    int e = mpress_dtype_size(bd->act);
    add_input(op, act3(bd, "input", x, bd->f));
    add_output(op, act3(bd, "output", self, bd->f));
    add_saved(op, act3(bd, "input", x, bd->f));
    add_kernel(op, "gelu", MPRESS_KERNEL_MEMORY, 0, (double)e * 2.0 * bd->s * bd->b * bd->f);
    return self;
}

static int embedding(struct builder *bd)
{
    struct mpress_model_op *op = op_new(bd, MPRESS_OP_EMBEDDING, -1);
    int self = op_index(bd, op);
    int e = mpress_dtype_size(bd->act);
    double sb = (double)bd->s * bd->b, sbh = sb * bd->h;
    add_input(op, tz("tokens", MPRESS_DTYPE_I64, -1, 0, bd->b, bd->s, 0, 0));
    add_weight(op, tz("word", bd->act, -1, 0, bd->v, bd->h, 0, 0));
    add_weight(op, tz("position", bd->act, -1, 0, bd->s, bd->h, 0, 0));
    double bytes = 8.0 * sb + e * sbh + (double)e * bd->s * bd->h;
    if (bd->bert) {
        add_input(op, tz("token_types", MPRESS_DTYPE_I64, -1, 1, bd->b, bd->s, 0, 0));
        add_weight(op, tz("token_type", bd->act, -1, 0, 2, bd->h, 0, 0));
        bytes += 8.0 * sb + e * sbh;
    }
    add_output(op, act3(bd, "output", self, bd->h));
    add_saved(op, tz("dropout_mask", MPRESS_DTYPE_U8, self, 0, bd->s, bd->b, bd->h, 0));
    /* gathers and adds fused with the embedding dropout: write output and mask */
    add_kernel(op, "embed_dropout", MPRESS_KERNEL_MEMORY, 0, bytes + e * sbh + sbh);
    return self;
}

/* GPT: logits = x E^T with the word embedding E tied. BERT: the MLM transform (dense, GELU,
 * LayerNorm) before the tied decoder with its own bias, plus the pooler and NSP classifier on
 * the first token (Devlin et al. 2019). */
static int head(struct builder *bd, int x, int emb)
{
    struct mpress_model_op *op = op_new(bd, MPRESS_OP_HEAD, -1);
    int self = op_index(bd, op);
    int e = mpress_dtype_size(bd->act);
    int64_t s = bd->s, b = bd->b, h = bd->h, v = bd->v;
    double sb = (double)s * b, sbh = sb * h;
    add_input(op, act3(bd, "input", x, h));
    add_saved(op, act3(bd, "input", x, h));
    add_output(op, tz("logits", bd->act, self, 0, s, b, v, 0));
    if (!bd->bert) {
        add_weight(op, tz("word", bd->act, emb, 0, v, h, 0, 0));
        add_kernel(op, "logits", MPRESS_KERNEL_GEMM, 2.0 * sbh * v,
                   (double)e * (sbh + (double)v * h + sb * v));
        return self;
    }
    add_output(op, tz("nsp_logits", bd->act, self, 1, b, 2, 0, 0));
    add_weight(op, tz("dense_weight", bd->act, -1, 0, h, h, 0, 0));
    add_weight(op, tz("dense_bias", bd->act, -1, 0, h, 0, 0, 0));
    add_weight(op, tz("ln_gamma", bd->act, -1, 0, h, 0, 0, 0));
    add_weight(op, tz("ln_beta", bd->act, -1, 0, h, 0, 0, 0));
    add_weight(op, tz("word", bd->act, emb, 0, v, h, 0, 0));
    add_weight(op, tz("decoder_bias", bd->act, -1, 0, v, 0, 0, 0));
    add_weight(op, tz("pooler_weight", bd->act, -1, 0, h, h, 0, 0));
    add_weight(op, tz("pooler_bias", bd->act, -1, 0, h, 0, 0, 0));
    add_weight(op, tz("nsp_weight", bd->act, -1, 0, 2, h, 0, 0));
    add_weight(op, tz("nsp_bias", bd->act, -1, 0, 2, 0, 0, 0));
    add_saved(op, tz("dense_out", bd->act, self, 0, s, b, h, 0));
    add_saved(op, tz("ln_input", bd->act, self, 0, s, b, h, 0));
    add_saved(op, tz("decoder_input", bd->act, self, 0, s, b, h, 0));
    add_saved(op, tz("pooler_out", bd->act, self, 0, b, h, 0, 0));
    add_kernel(op, "dense", MPRESS_KERNEL_GEMM, 2.0 * sbh * h,
               (double)e * (2.0 * sbh + (double)h * h + h));
    add_kernel(op, "gelu_layernorm", MPRESS_KERNEL_MEMORY, 0, (double)e * 4.0 * sbh);
    add_kernel(op, "decoder", MPRESS_KERNEL_GEMM, 2.0 * sbh * v,
               (double)e * (sbh + (double)v * h + v + sb * v));
    add_kernel(op, "pooler_nsp", MPRESS_KERNEL_GEMM, 2.0 * b * h * (h + 2.0),
               (double)e * ((double)h * (h + 2) + 2.0 * b * h));
    return self;
}

/* Softmax cross-entropy; keeps the softmax in fp32 for backward (Korthikanti et al. 2022,
 * section 4, input and output layers: 4·s·b·v bytes). BERT also keeps its NSP softmax in fp32
 * (4·b·2 bytes), so that backward needs none of the activations it was given. */
static int loss(struct builder *bd, int logits)
{
    struct mpress_model_op *op = op_new(bd, MPRESS_OP_LOSS, -1);
    int self = op_index(bd, op);
    int e = mpress_dtype_size(bd->act);
    int64_t s = bd->s, b = bd->b, v = bd->v;
    double sbv = (double)s * b * v;
    add_input(op, tz("logits", bd->act, logits, 0, s, b, v, 0));
    add_input(op, tz("labels", MPRESS_DTYPE_I64, -1, bd->bert ? 2 : 1, b, s, 0, 0));
    if (bd->bert) {
        add_input(op, tz("nsp_logits", bd->act, logits, 1, b, 2, 0, 0));
        add_input(op, tz("nsp_labels", MPRESS_DTYPE_I64, -1, 3, b, 0, 0, 0));
    }
    add_output(op, tz("loss", MPRESS_DTYPE_FP32, self, 0, 1, 0, 0, 0));
    add_saved(op, tz("softmax", MPRESS_DTYPE_FP32, self, 0, s, b, v, 0));
    if (bd->bert)
        add_saved(op, tz("nsp_softmax", MPRESS_DTYPE_FP32, self, 0, b, 2, 0, 0));
    add_kernel(op, "cross_entropy", MPRESS_KERNEL_MEMORY, 0, (double)e * sbv + 4.0 * sbv +
                                                               8.0 * s * b);
    return self;
}

static int is_activation(const struct mpress_model_tensor *t)
{
    return t->dtype != MPRESS_DTYPE_I64;
}

/* workspace: gradients of inputs and outputs live together during backward (each the size of
 * its tensor), plus scratch that is neither saved nor passed on: the pre-softmax scores and
 * their gradient (unfused attention), the fp32 gradient of the logits (loss). */
uint64_t mpress_model_op_gradient_bytes(const struct mpress_model_op *op)
{
    uint64_t w = 0;
    for (int i = 0; i < op->n_inputs; i++)
        if (is_activation(&op->inputs[i]))
            w += op->inputs[i].bytes;
    for (int i = 0; i < op->n_outputs; i++)
        w += op->outputs[i].bytes;
    return w;
}

static void finish_op(struct builder *bd, struct mpress_model_op *op)
{
    uint64_t w = mpress_model_op_gradient_bytes(op);
    uint64_t s = (uint64_t)bd->s, b = (uint64_t)bd->b;
    if (op->op_kind == MPRESS_OP_ATTN_CORE && !bd->flash)
        w += 2 * (uint64_t)bd->a * s * s * b * (uint64_t)mpress_dtype_size(bd->act);
    if (op->op_kind == MPRESS_OP_LOSS)
        w += 4 * s * b * (uint64_t)bd->v;
    op->workspace_bytes = w;
}

/* output_bytes of op k: every op output produced at or before k and read after k, once each
 * (what a pipeline stage ending at k must send on). */
static int fill_output_bytes(struct mpress_model *m)
{
    int n = m->n_ops;
    int *last = malloc(sizeof(int) * (size_t)n * MPRESS_MODEL_MAX_IO);
    if (!last)
        return -1;
    for (int i = 0; i < n * MPRESS_MODEL_MAX_IO; i++)
        last[i] = -1;
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < m->ops[j].n_inputs; i++) {
            const struct mpress_model_tensor *t = &m->ops[j].inputs[i];
            if (t->producer >= 0)
                last[t->producer * MPRESS_MODEL_MAX_IO + t->producer_output] = j;
        }
    }
    for (int k = 0; k < n; k++) {
        uint64_t sum = 0;
        for (int p = 0; p <= k; p++)
            for (int o = 0; o < m->ops[p].n_outputs; o++)
                if (last[p * MPRESS_MODEL_MAX_IO + o] > k)
                    sum += m->ops[p].outputs[o].bytes;
        m->ops[k].output_bytes = sum;
    }
    free(last);
    return 0;
}

int mpress_model_build(const struct mpress_model_config *cfg, struct mpress_model *out,
                       struct mpress_error *err)
{
    memset(out, 0, sizeof(*out));
    int rc = mpress_model_config_check(cfg, err);
    if (rc)
        return rc;
    struct builder bd;
    memset(&bd, 0, sizeof(bd));
    bd.m = out;
    mpress_dtype_parse(cfg->dtype, &bd.act);
    bd.s = cfg->seq;
    bd.b = cfg->micro_batch;
    bd.h = cfg->hidden;
    bd.a = cfg->heads;
    bd.d = cfg->hidden / cfg->heads;
    bd.f = cfg->ffn;
    bd.v = cfg->vocab;
    bd.flash = cfg->flash_attention != 0;
    bd.bert = strcmp(cfg->family, "bert") == 0;
    out->config = *cfg;
    int n = 1 + 10 * cfg->layers + 3;
    out->ops = calloc((size_t)n, sizeof(*out->ops));
    if (!out->ops)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory for %d ops", n);

    int emb = embedding(&bd);
    int x = emb; /* the op whose output 0 is the residual stream */
    for (int l = 0; l < cfg->layers; l++) {
        int ln1 = layernorm(&bd, MPRESS_OP_LN1, l, x);
        int qkv = linear(&bd, MPRESS_OP_QKV, l, ln1, bd.h, 3 * bd.h);
        int core = attn_core(&bd, l, qkv);
        int proj = linear(&bd, MPRESS_OP_ATTN_PROJ, l, core, bd.h, bd.h);
        int x1 = residual(&bd, MPRESS_OP_ATTN_RESIDUAL, l, proj, x);
        int ln2 = layernorm(&bd, MPRESS_OP_LN2, l, x1);
        int up = linear(&bd, MPRESS_OP_MLP_UP, l, ln2, bd.h, bd.f);
        int act = gelu(&bd, l, up);
        int down = linear(&bd, MPRESS_OP_MLP_DOWN, l, act, bd.f, bd.h);
        x = residual(&bd, MPRESS_OP_MLP_RESIDUAL, l, down, x1);
    }
    int fln = layernorm(&bd, MPRESS_OP_FINAL_LAYERNORM, -1, x);
    int hd = head(&bd, fln, emb);
    loss(&bd, hd);
    for (int i = 0; i < out->n_ops; i++)
        finish_op(&bd, &out->ops[i]);
    if (fill_output_bytes(out) != 0) {
        mpress_model_finish(out);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    return 0;
}

void mpress_model_finish(struct mpress_model *model)
{
    if (!model)
        return;
    free(model->ops);
    model->ops = NULL;
    model->n_ops = 0;
}

uint64_t mpress_model_params(const struct mpress_model *model)
{
    uint64_t n = 0;
    for (int i = 0; i < model->n_ops; i++)
        n += model->ops[i].params;
    return n;
}

double mpress_model_flops(const struct mpress_model *model)
{
    double f = 0;
    for (int i = 0; i < model->n_ops; i++)
        f += model->ops[i].fwd_flops * (1.0 + model->ops[i].bwd_factor);
    return f;
}

uint64_t mpress_model_layer_saved_bytes(const struct mpress_model *model, int layer)
{
    uint64_t n = 0;
    for (int i = 0; i < model->n_ops; i++)
        if (model->ops[i].layer == layer)
            for (int j = 0; j < model->ops[i].n_saved; j++)
                n += model->ops[i].saved[j].bytes;
    return n;
}
