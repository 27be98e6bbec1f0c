/* The host backend's math, checked independently: Philox 4x32-10 against the Random123
 * known-answer vectors, bf16 rounding on hand-worked values, every op's backward against a
 * central finite difference of its forward (accumulated in double precision), recompute
 * reproducing every saved tensor bit for bit, backward needing no activation that is not
 * saved, and every op's scratch memory against the formulas and the cost model's charge. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../../lib/runtime/host_ops.h"

/* ---- Philox and bf16 --------------------------------------------------------------------- */

static void test_philox(void)
{
    /* Random123 tests/kat_vectors, the three "philox4x32 10" lines: ctr[4] key[2] -> out[4] */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        mpress_philox4x32_10(kat[i], kat[i] + 4, out);
        for (int j = 0; j < 4; j++)
            CHECK_MSG(out[j] == kat[i][6 + j], "vector %d word %d: %08x", i, j, out[j]);
    }
    /* the stream: element i is word i % 4 of block i / 4, whatever the first element */
    struct mpress_rng_key k = {0xa4093822299f31d0ull, 7, 3, 5};
    uint32_t all[11], part[5];
    mpress_rng_fill(&k, 0, 11, all);
    mpress_rng_fill(&k, 6, 5, part);
    CHECK(memcmp(all + 6, part, sizeof(part)) == 0);
    CHECK(mpress_rng_word(&k, 9) == all[9]);
    uint32_t ctr[4] = {2, 5, 3, 7}, key[2] = {0x299f31d0, 0xa4093822}, w[4];
    mpress_philox4x32_10(ctr, key, w);
    CHECK(w[1] == all[9]);
}

static void test_bf16(void)
{
    CHECK_INT(mpress_f32_to_bf16(1.0f), 0x3f80);
    CHECK_INT(mpress_f32_to_bf16(-2.0f), 0xc000);
    /* 1 + 2^-8 is halfway between 0x3f80 and 0x3f81: ties to even */
    CHECK_INT(mpress_f32_to_bf16(1.00390625f), 0x3f80);
    /* 1 + 3·2^-8 is halfway between 0x3f81 and 0x3f82 */
    CHECK_INT(mpress_f32_to_bf16(1.01171875f), 0x3f82);
    CHECK_INT(mpress_f32_to_bf16(1.0f + 1.0f / 64.0f), 0x3f82);
    CHECK(mpress_bf16_to_f32(0x3f82) == 1.015625f);
}

/* ---- finite differences ------------------------------------------------------------------ */

static double gauss(uint64_t *s)
{
    /* Irwin-Hall: sum of 12 uniforms - 6 (test data only) */
    double x = 0;
    for (int i = 0; i < 12; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        x += (double)(*s >> 11) / 9007199254740992.0;
    }
    return x - 6.0;
}

static void fill_f32(float *x, size_t n, double scale, uint64_t *s)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * gauss(s));
}

struct opbufs {
    void *in[MPRESS_MODEL_MAX_IO], *out[MPRESS_MODEL_MAX_IO], *w[MPRESS_MODEL_MAX_WEIGHTS];
    void *saved[MPRESS_MODEL_MAX_SAVED], *dout[MPRESS_MODEL_MAX_IO];
    void *din[MPRESS_MODEL_MAX_IO], *dw[MPRESS_MODEL_MAX_WEIGHTS];
};

static size_t nel(const struct mpress_model_tensor *t)
{
    return (size_t)(t->bytes / (uint64_t)mpress_dtype_size(t->dtype));
}

static void wire(struct opbufs *b, struct mpress_host_io *io)
{
    memset(io, 0, sizeof(*io));
    for (int i = 0; i < MPRESS_MODEL_MAX_IO; i++) {
        io->in[i] = b->in[i];
        io->out[i] = b->out[i];
        io->dout[i] = b->dout[i];
        io->din[i] = b->din[i];
    }
    for (int i = 0; i < MPRESS_MODEL_MAX_WEIGHTS; i++) {
        io->w[i] = b->w[i];
        io->dw[i] = b->dw[i];
    }
    for (int i = 0; i < MPRESS_MODEL_MAX_SAVED; i++)
        io->saved[i] = b->saved[i];
}

/* f = sum over outputs of out · R (R = the output gradient), in double. */
static double objective(const struct mpress_model *m, int op, const struct mpress_host_hparams *hp,
                        const struct mpress_rng_key *k, struct opbufs *b)
{
    struct mpress_host_io io;
    wire(b, &io);
    struct mpress_error err;
    mpress_error_clear(&err);
    int rc = mpress_host_forward(m, op, hp, k, &io, &err);
    CHECK_MSG(rc == 0, "forward %s: %s", m->ops[op].name, err.text);
    const struct mpress_model_op *o = &m->ops[op];
    double f = 0;
    for (int i = 0; i < o->n_outputs; i++) {
        const float *y = b->out[i], *r = b->dout[i];
        for (size_t j = 0; j < nel(&o->outputs[i]); j++)
            f += (double)y[j] * (double)r[j];
    }
    return f;
}

struct fd_stats {
    double worst;   /* largest |a - n| / (atol + rtol max(|a|, |n|)) */
    long checked;
};

#define FD_H 1e-2
#define FD_RTOL 2e-3
#define FD_ATOL 2e-4

static void fd_compare(const struct mpress_model *m, int op, const struct mpress_host_hparams *hp,
                       const struct mpress_rng_key *k, struct opbufs *b, float *x,
                       const float *analytic, size_t n, const char *what, struct fd_stats *st)
{
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        double h = FD_H * (fabs((double)keep) > 1 ? fabs((double)keep) : 1);
        x[i] = (float)((double)keep + h);
        double hp_ = (double)x[i] - (double)keep;
        double fp = objective(m, op, hp, k, b);
        x[i] = (float)((double)keep - h);
        double hm_ = (double)keep - (double)x[i];
        double fm = objective(m, op, hp, k, b);
        x[i] = keep;
        double num = (fp - fm) / (hp_ + hm_);
        double a = analytic[i];
        double tol = FD_ATOL + FD_RTOL * fmax(fabs(a), fabs(num));
        double r = fabs(a - num) / tol;
        if (r > st->worst)
            st->worst = r;
        st->checked++;
        CHECK_MSG(r <= 1.0, "%s %s[%zu]: analytic %.7g, numeric %.7g", m->ops[op].name, what, i,
                  a, num);
    }
}

static void fd_op(const struct mpress_model *m, int op, uint64_t *seed, struct fd_stats *st)
{
    const struct mpress_model_op *o = &m->ops[op];
    struct mpress_host_hparams hp;
    mpress_host_hparams_default(&hp);
    struct mpress_rng_key k = {42, 3, 1, (uint32_t)op};
    struct opbufs b;
    memset(&b, 0, sizeof(b));
    for (int i = 0; i < o->n_inputs; i++) {
        const struct mpress_model_tensor *t = &o->inputs[i];
        b.in[i] = calloc(1, (size_t)t->bytes);
        if (t->dtype == MPRESS_DTYPE_I64) {
            int64_t *v = b.in[i];
            /* tokens < vocab; token types and NSP labels 0/1; labels < vocab */
            int64_t lim = strcmp(t->role, "token_types") == 0 || strcmp(t->role, "nsp_labels") == 0
                              ? 2 : m->config.vocab;
            for (size_t j = 0; j < nel(t); j++)
                v[j] = (int64_t)((uint64_t)(gauss(seed) * 1e6 + 1e7) % (uint64_t)lim);
        } else {
            fill_f32(b.in[i], nel(t), 1.0, seed);
            b.din[i] = calloc(1, (size_t)t->bytes);
        }
    }
    for (int i = 0; i < o->n_outputs; i++) {
        b.out[i] = calloc(1, (size_t)o->outputs[i].bytes);
        b.dout[i] = calloc(1, (size_t)o->outputs[i].bytes);
        fill_f32(b.dout[i], nel(&o->outputs[i]), 1.0, seed);
    }
    for (int i = 0; i < o->n_weights; i++) {
        b.w[i] = calloc(1, (size_t)o->weights[i].bytes);
        b.dw[i] = calloc(1, (size_t)o->weights[i].bytes);
        fill_f32(b.w[i], nel(&o->weights[i]), 0.5, seed);
    }
    for (int i = 0; i < o->n_saved; i++)
        b.saved[i] = calloc(1, (size_t)o->saved[i].bytes);
    objective(m, op, &hp, &k, &b);
    struct mpress_host_io io;
    wire(&b, &io);
    struct mpress_error err;
    mpress_error_clear(&err);
    int rc = mpress_host_backward(m, op, &hp, &k, &io, &err);
    CHECK_MSG(rc == 0, "backward %s: %s", o->name, err.text);
    for (int i = 0; i < o->n_inputs; i++)
        if (b.din[i])
            fd_compare(m, op, &hp, &k, &b, b.in[i], b.din[i], nel(&o->inputs[i]),
                       o->inputs[i].role, st);
    for (int i = 0; i < o->n_weights; i++)
        fd_compare(m, op, &hp, &k, &b, b.w[i], b.dw[i], nel(&o->weights[i]), o->weights[i].role,
                   st);
    for (int i = 0; i < MPRESS_MODEL_MAX_IO; i++) {
        free(b.in[i]);
        free(b.out[i]);
        free(b.dout[i]);
        free(b.din[i]);
    }
    for (int i = 0; i < MPRESS_MODEL_MAX_WEIGHTS; i++) {
        free(b.w[i]);
        free(b.dw[i]);
    }
    for (int i = 0; i < MPRESS_MODEL_MAX_SAVED; i++)
        free(b.saved[i]);
}

static void tiny(struct mpress_model_config *c, const char *family, int flash)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "fd-%s", family);
    snprintf(c->family, sizeof(c->family), "%s", family);
    c->layers = 1;
    c->hidden = 8;
    c->heads = 2;
    c->ffn = 16;
    c->seq = 5;
    c->vocab = 7;
    c->micro_batch = 2;
    snprintf(c->dtype, sizeof(c->dtype), "fp32");
    snprintf(c->optimizer, sizeof(c->optimizer), "adam");
    c->flash_attention = flash;
}

static void test_finite_differences(void)
{
    static const char *const fam[2] = {"gpt", "bert"};
    uint64_t seed = 12345;
    for (int f = 0; f < 2; f++)
        for (int flash = 0; flash < 2; flash++) {
            struct mpress_model_config c;
            tiny(&c, fam[f], flash);
            struct mpress_model m;
            struct mpress_error err;
            CHECK(mpress_model_build(&c, &m, &err) == 0);
            struct fd_stats st = {0, 0};
            int kinds = 0;
            for (int op = 0; op < m.n_ops; op++) {
                /* every kind once (the layer's ops are the same in every layer) */
                if (flash && strcmp(m.ops[op].kind, "attn_core") != 0)
                    continue;
                fd_op(&m, op, &seed, &st);
                kinds++;
            }
            fprintf(stderr, "finite differences %s%s: %d ops, %ld derivatives, worst %.3f of "
                    "the tolerance\n", fam[f], flash ? " flash" : "", kinds, st.checked, st.worst);
            CHECK(st.checked > 100);
            mpress_model_finish(&m);
        }
}

/* ---- recompute --------------------------------------------------------------------------- */

static uint8_t *corpus(size_t *n)
{
    const char *src = getenv("MPRESS_SRCDIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/docs/cost-model.md", src ? src : ".");
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open '%s'\n", path);
        exit(1);
    }
    uint8_t *d = malloc(1 << 20);
    *n = fread(d, 1, 1 << 20, f);
    fclose(f);
    return d;
}

static void test_recompute(const char *name, const char *dtype, int flash)
{
    size_t n;
    uint8_t *data = corpus(&n);
    struct mpress_model_config c;
    CHECK(mpress_model_find(name, &c) == 0);
    snprintf(c.dtype, sizeof(c.dtype), "%s", dtype);
    c.flash_attention = flash;
    struct mpress_host_trainer_options o;
    mpress_host_trainer_options_default(&o);
    struct mpress_host_trainer *t;
    struct mpress_error err;
    CHECK(mpress_host_trainer_create(&c, &o, data, n, &t, &err) == 0);
    t->step = 4;
    float loss;
    int rc = mpress_host_trainer_micro_batch(t, 1, &loss, &err);
    CHECK_MSG(rc == 0, "%s", err.text);
    int same = 0, derived = 0, masks_differ = 0, masks = 0;
    for (int i = 0; i < t->model.n_ops; i++) {
        const struct mpress_model_op *op = &t->model.ops[i];
        for (int j = 0; j < op->n_saved; j++) {
            const struct mpress_model_tensor *s = &op->saved[j];
            uint8_t *again = malloc((size_t)s->bytes);
            memset(again, 0xcd, (size_t)s->bytes);
            if (s->producer == i) {
                struct mpress_host_io io;
                mpress_host_trainer_io(t, i, &io);
                memset(io.out, 0, sizeof(io.out));
                memset(io.saved, 0, sizeof(io.saved));
                io.saved[j] = again;
                struct mpress_rng_key k = {o.seed, 4, 1, (uint32_t)i};
                CHECK(mpress_host_forward(&t->model, i, &o.hp, &k, &io, &err) == 0);
                same++;
                if (strcmp(s->role, "dropout_mask") == 0) {
                    /* another micro-batch draws another mask */
                    uint8_t *other = malloc((size_t)s->bytes);
                    io.saved[j] = other;
                    k.micro_batch = 2;
                    CHECK(mpress_host_forward(&t->model, i, &o.hp, &k, &io, &err) == 0);
                    masks++;
                    masks_differ += memcmp(other, again, (size_t)s->bytes) != 0;
                    free(other);
                }
            } else {
                CHECK(mpress_host_saved_derive(&t->model, i, j, t->out[s->producer][0], again) ==
                      0);
                derived++;
            }
            CHECK_MSG(memcmp(again, t->saved[i][j], (size_t)s->bytes) == 0,
                      "%s %s.%s is not reproduced", name, op->name, s->role);
            free(again);
        }
    }
    fprintf(stderr, "recompute %s %s%s: %d rerun, %d derived, bit-identical\n", name, dtype,
            flash ? " flash" : "", same, derived);
    CHECK(same > 0 && derived > 0);
    CHECK(masks > 0 && masks_differ == masks);
    mpress_host_trainer_destroy(t);
    free(data);
}

/* Backward reads only saved tensors, output gradients, weights and data-loader inputs: with
 * every activation poisoned (NaN) and its input pointers NULL, a micro-batch's weight gradients
 * are bit-identical to the trainer's. */
static void test_backward_reads(const char *name, const char *dtype, int flash)
{
    size_t n;
    uint8_t *data = corpus(&n);
    struct mpress_model_config c;
    CHECK(mpress_model_find(name, &c) == 0);
    snprintf(c.dtype, sizeof(c.dtype), "%s", dtype);
    c.flash_attention = flash;
    struct mpress_host_trainer_options o;
    mpress_host_trainer_options_default(&o);
    struct mpress_host_trainer *a, *b;
    struct mpress_error err;
    CHECK(mpress_host_trainer_create(&c, &o, data, n, &a, &err) == 0);
    CHECK(mpress_host_trainer_create(&c, &o, data, n, &b, &err) == 0);
    float la;
    CHECK(mpress_host_trainer_micro_batch(a, 0, &la, &err) == 0);
    const struct mpress_model *m = &b->model;
    CHECK(mpress_host_batch_fill(&c, data, n, o.seed, 0, 0, &b->batch, &err) == 0);
    struct mpress_host_io io;
    for (int i = 0; i < m->n_ops; i++) {
        struct mpress_rng_key k = {o.seed, 0, 0, (uint32_t)i};
        mpress_host_trainer_io(b, i, &io);
        CHECK(mpress_host_forward(m, i, &o.hp, &k, &io, &err) == 0);
    }
    int last = m->n_ops - 1;
    for (int i = 0; i < last; i++)
        for (int j = 0; j < m->ops[i].n_outputs; j++)
            memset(b->out[i][j], 0xff, (size_t)m->ops[i].outputs[j].bytes);
    memcpy(b->dout[last][0], &b->loss_grad, sizeof(float));
    for (int i = last; i >= 0; i--) {
        struct mpress_rng_key k = {o.seed, 0, 0, (uint32_t)i};
        mpress_host_trainer_io(b, i, &io);
        for (int j = 0; j < m->ops[i].n_inputs; j++)
            if (m->ops[i].inputs[j].producer >= 0)
                io.in[j] = NULL;
        memset(io.out, 0, sizeof(io.out));
        int rc = mpress_host_backward(m, i, &o.hp, &k, &io, &err);
        CHECK_MSG(rc == 0, "%s: %s", m->ops[i].name, err.text);
    }
    int same = 1;
    for (int i = 0; i < a->params.n; i++)
        same &= memcmp(a->params.p[i].g, b->params.p[i].g,
                       (size_t)a->params.p[i].n * (size_t)mpress_dtype_size(a->params.p[i].dtype))
                == 0;
    CHECK_MSG(same, "%s %s: gradients differ without the activations", name, dtype);
    mpress_host_trainer_destroy(a);
    mpress_host_trainer_destroy(b);
    free(data);
}

/* BERT's loss keeps its NSP softmax (fp32 [b, 2], produced by the loss itself), and its
 * backward gives the same gradients, bit for bit, when the nsp_logits input it was run on is
 * overwritten with NaN after forward; the NSP gradient is finite and not all zero. */
static void test_loss_nsp(const char *dtype)
{
    size_t n;
    uint8_t *data = corpus(&n);
    struct mpress_model_config c;
    CHECK(mpress_model_find("bert-tiny", &c) == 0);
    snprintf(c.dtype, sizeof(c.dtype), "%s", dtype);
    struct mpress_host_trainer_options o;
    mpress_host_trainer_options_default(&o);
    struct mpress_host_trainer *t;
    struct mpress_error err;
    CHECK(mpress_host_trainer_create(&c, &o, data, n, &t, &err) == 0);
    const struct mpress_model *m = &t->model;
    int last = m->n_ops - 1;
    const struct mpress_model_op *lo = &m->ops[last];
    CHECK_STR(lo->kind, "loss");
    CHECK_INT(lo->n_saved, 2);
    CHECK_STR(lo->saved[1].role, "nsp_softmax");
    CHECK(lo->saved[1].dtype == MPRESS_DTYPE_FP32);
    CHECK_INT(lo->saved[1].producer, last);
    CHECK_INT(lo->saved[1].bytes, 4 * 2 * c.micro_batch);
    CHECK_STR(lo->inputs[2].role, "nsp_logits");
    CHECK(mpress_host_batch_fill(&c, data, n, o.seed, 0, 0, &t->batch, &err) == 0);
    struct mpress_host_io io;
    for (int i = 0; i < m->n_ops; i++) {
        struct mpress_rng_key k = {o.seed, 0, 0, (uint32_t)i};
        mpress_host_trainer_io(t, i, &io);
        CHECK(mpress_host_forward(m, i, &o.hp, &k, &io, &err) == 0);
    }
    memcpy(t->dout[last][0], &t->loss_grad, sizeof(float));
    size_t zb = (size_t)lo->inputs[0].bytes, nb = (size_t)lo->inputs[2].bytes;
    void *dz[2] = {calloc(1, zb), calloc(1, zb)}, *dn[2] = {calloc(1, nb), calloc(1, nb)};
    struct mpress_rng_key k = {o.seed, 0, 0, (uint32_t)last};
    for (int r = 0; r < 2; r++) {
        if (r == 1)   /* all-ones bytes: NaN in fp32, fp16 and bf16 */
            memset((void *)t->out[lo->inputs[2].producer][lo->inputs[2].producer_output], 0xff,
                   nb);
        mpress_host_trainer_io(t, last, &io);
        io.din[0] = dz[r];
        io.din[2] = dn[r];
        int rc = mpress_host_backward(m, last, &o.hp, &k, &io, &err);
        CHECK_MSG(rc == 0, "%s", err.text);
    }
    CHECK_MSG(memcmp(dz[0], dz[1], zb) == 0 && memcmp(dn[0], dn[1], nb) == 0,
              "bert-tiny %s: the loss backward depends on its nsp_logits input", dtype);
    size_t ng = (size_t)(2 * c.micro_batch);
    float *g = malloc(ng * sizeof(float));
    mpress_host_load(g, dn[0], lo->inputs[2].dtype, ng);
    int finite = 1, nonzero = 0;
    for (size_t i = 0; i < ng; i++) {
        finite &= isfinite(g[i]) != 0;
        nonzero |= g[i] != 0;
    }
    free(g);
    CHECK(finite && nonzero);
    for (int r = 0; r < 2; r++) {
        free(dz[r]);
        free(dn[r]);
    }
    mpress_host_trainer_destroy(t);
    free(data);
}


/* ---- scratch ----------------------------------------------------------------------------- */

struct sc_count {
    uint64_t cur, peak;
    int fail_at;        /* > 0: the fail_at-th allocation fails (MPRESS_EINFEASIBLE) */
    int calls;
};

static int cnt_alloc(void *ctx, uint64_t bytes, void **out, struct mpress_error *err)
{
    struct sc_count *s = ctx;
    if (++s->calls == s->fail_at)
        return mpress_error_set(err, MPRESS_EINFEASIBLE, "test arena full");
    *out = malloc(bytes ? (size_t)bytes : 1);
    s->cur += bytes;
    if (s->cur > s->peak)
        s->peak = s->cur;
    return 0;
}

static void cnt_free(void *ctx, void *p, uint64_t bytes)
{
    struct sc_count *s = ctx;
    s->cur -= bytes;
    free(p);
}

/* The scratch an op takes per call (docs/runtime.md, "Kernels"), from the formulas there: none,
 * but for attention's per-head buffers (unfused: S x S fp32 scores and probabilities; flash
 * keeps its row blocks on the stack; 16-bit storage: fp32 copies of one head's S x D operands)
 * and BERT's head backward (fp32 gradients of its two [T, H] intermediates and of the pooler
 * [B, H]). */
static uint64_t scratch_formula(const struct mpress_model *m, int op, int bwd)
{
    const struct mpress_model_config *c = &m->config;
    const struct mpress_model_op *o = &m->ops[op];
    uint64_t S = (uint64_t)c->seq, D = (uint64_t)(c->hidden / c->heads), H = (uint64_t)c->hidden;
    uint64_t T = S * (uint64_t)c->micro_batch, B = (uint64_t)c->micro_batch;
    int bf = strcmp(c->dtype, "fp32") != 0;
    if (o->op_kind == MPRESS_OP_ATTN_CORE) {
        uint64_t sd = bf ? (bwd ? 7 : 4) * S * D : 0;
        uint64_t ss = c->flash_attention ? 0 : bf ? (bwd ? 3 : 2) : (bwd ? 1 : 0);
        return 4 * (ss * S * S + sd);
    }
    if (o->op_kind == MPRESS_OP_HEAD && strcmp(c->family, "bert") == 0 && bwd)
        return 4 * (2 * T * H + B * H);
    return 0;
}

/* What the cost model charges an op beyond the tensors the executor holds for it (its
 * activation inputs' gradients and its outputs' gradients): workspace_bytes less those. */
static uint64_t scratch_charge(const struct mpress_model_op *o)
{
    uint64_t t = 0;
    for (int i = 0; i < o->n_inputs; i++)
        if (o->inputs[i].dtype != MPRESS_DTYPE_I64)
            t += o->inputs[i].bytes;
    for (int i = 0; i < o->n_outputs; i++)
        t += o->outputs[i].bytes;
    return o->workspace_bytes - t;
}

/* Every op's scratch, forward and backward, is what the formulas say, all of it is returned by
 * the end of the call, and it is within what the cost model charges except where docs/runtime.md
 * says it is not (16-bit flash attention's operand copies; BERT's head backward). An
 * allocation that fails ends the op with the allocator's error and message, nothing held. */
static void test_scratch(const char *name, const char *dtype, int flash)
{
    size_t n;
    uint8_t *data = corpus(&n);
    struct mpress_model_config c;
    CHECK(mpress_model_find(name, &c) == 0);
    snprintf(c.dtype, sizeof(c.dtype), "%s", dtype);
    c.flash_attention = flash;
    int bf = strcmp(dtype, "fp32") != 0;
    struct mpress_host_trainer_options o;
    mpress_host_trainer_options_default(&o);
    struct mpress_host_trainer *t;
    struct mpress_error err;
    CHECK(mpress_host_trainer_create(&c, &o, data, n, &t, &err) == 0);
    const struct mpress_model *m = &t->model;
    CHECK(mpress_host_batch_fill(&c, data, n, o.seed, 0, 0, &t->batch, &err) == 0);
    struct sc_count cnt;
    struct mpress_host_scratch sc = {&cnt, cnt_alloc, cnt_free};
    struct mpress_host_io io;
    uint64_t most = 0, over = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < m->n_ops; j++) {
            int i = pass ? m->n_ops - 1 - j : j;
            if (pass && i == m->n_ops - 1)
                memcpy(t->dout[i][0], &t->loss_grad, sizeof(float));
            struct mpress_rng_key k = {o.seed, 0, 0, (uint32_t)i};
            mpress_host_trainer_io(t, i, &io);
            io.scratch = &sc;
            memset(&cnt, 0, sizeof(cnt));
            int rc = pass ? mpress_host_backward(m, i, &o.hp, &k, &io, &err)
                          : mpress_host_forward(m, i, &o.hp, &k, &io, &err);
            CHECK_MSG(rc == 0, "%s: %s", m->ops[i].name, err.text);
            CHECK_INT(cnt.cur, 0);
            uint64_t want = scratch_formula(m, i, pass), charge = scratch_charge(&m->ops[i]);
            CHECK_MSG(cnt.peak == want, "%s %s %s %s: scratch %llu, formula %llu", name, dtype,
                      m->ops[i].name, pass ? "bwd" : "fwd", (unsigned long long)cnt.peak,
                      (unsigned long long)want);
            int excused = flash && bf && m->ops[i].op_kind == MPRESS_OP_ATTN_CORE;
            excused |= m->ops[i].op_kind == MPRESS_OP_HEAD && c.family[0] == 'b' && pass;
            CHECK_MSG(cnt.peak <= charge || excused, "%s %s %s: scratch %llu over the charge %llu",
                      name, dtype, m->ops[i].name, (unsigned long long)cnt.peak,
                      (unsigned long long)charge);
            most = cnt.peak > most ? cnt.peak : most;
            if (cnt.peak > charge)
                over++;
            if (cnt.peak && pass) { /* the last allocation fails: nothing is left held */
                int calls = cnt.calls;
                memset(&cnt, 0, sizeof(cnt));
                cnt.fail_at = calls;
                mpress_error_clear(&err);
                rc = mpress_host_backward(m, i, &o.hp, &k, &io, &err);
                CHECK_INT(rc, MPRESS_EINFEASIBLE);
                CHECK(strcmp(err.text, "test arena full") == 0);
                CHECK_INT(cnt.cur, 0);
            }
        }
    fprintf(stderr, "scratch %s %s%s: largest %llu bytes, %llu op calls over the model's "
            "charge\n", name, dtype, flash ? " flash" : "", (unsigned long long)most,
            (unsigned long long)over);
    mpress_host_trainer_destroy(t);
    free(data);
}

/* Dropout masks from their definition: element i of op k's mask in micro-batch j of step t is
 * kept when (word_i >> 8) / 2^24 >= p, word_i from mpress_rng_fill with key {seed, t, j, k}
 * (the kernels draw the words their own way, blocks side by side). gpt-tiny fp32: the
 * embedding's and an unfused attention's saved masks, at the default p and at p = 0.5. */
static void test_masks(void)
{
    size_t n;
    uint8_t *data = corpus(&n);
    struct mpress_model_config c;
    CHECK(mpress_model_find("gpt-tiny", &c) == 0);
    snprintf(c.dtype, sizeof(c.dtype), "fp32");
    for (int half = 0; half < 2; half++) {
        struct mpress_host_trainer_options o;
        mpress_host_trainer_options_default(&o);
        if (half)
            o.hp.hidden_dropout = o.hp.attn_dropout = 0.5f;
        struct mpress_host_trainer *t;
        struct mpress_error err;
        CHECK(mpress_host_trainer_create(&c, &o, data, n, &t, &err) == 0);
        float loss;
        CHECK(mpress_host_trainer_micro_batch(t, 3, &loss, &err) == 0);
        const struct mpress_model *m = &t->model;
        for (int i = 0; i < m->n_ops; i++)
            for (int j = 0; j < m->ops[i].n_saved; j++) {
                if (strcmp(m->ops[i].saved[j].role, "dropout_mask") != 0 ||
                    (i != 0 && m->ops[i].op_kind != MPRESS_OP_ATTN_CORE))
                    continue;
                float p = m->ops[i].op_kind == MPRESS_OP_ATTN_CORE ? o.hp.attn_dropout
                                                                    : o.hp.hidden_dropout;
                uint64_t ne = m->ops[i].saved[j].bytes, bad = 0, kept = 0;
                uint32_t *w = malloc(ne * sizeof(uint32_t));
                struct mpress_rng_key k = {o.seed, 0, 3, (uint32_t)i};
                mpress_rng_fill(&k, 0, ne, w);
                const uint8_t *mk = t->saved[i][j];
                for (uint64_t e = 0; e < ne; e++) {
                    uint8_t want = (double)(w[e] >> 8) / 16777216.0 >= (double)p;
                    bad += mk[e] != want;
                    kept += want;
                }
                CHECK_MSG(bad == 0, "%s mask: %llu of %llu differ", m->ops[i].name,
                          (unsigned long long)bad, (unsigned long long)ne);
                CHECK(kept > 0 && kept < ne);
                free(w);
            }
        mpress_host_trainer_destroy(t);
    }
    free(data);
}

int main(void)
{
    test_philox();
    test_bf16();
    test_finite_differences();
    test_masks();
    test_recompute("gpt-tiny", "fp32", 0);
    test_recompute("gpt-tiny", "bf16", 0);
    test_recompute("gpt-tiny", "fp16", 1);
    test_recompute("bert-tiny", "fp16", 0);
    test_recompute("bert-tiny", "fp32", 1);
    test_backward_reads("gpt-tiny", "fp16", 0);
    test_backward_reads("gpt-tiny", "fp32", 1);
    test_backward_reads("bert-tiny", "bf16", 0);
    test_backward_reads("bert-tiny", "fp32", 1);
    test_loss_nsp("fp32");
    test_loss_nsp("bf16");
    test_loss_nsp("fp16");
    test_scratch("gpt-tiny", "fp32", 0);
    test_scratch("gpt-tiny", "bf16", 0);
    test_scratch("gpt-tiny", "fp16", 1);
    test_scratch("bert-tiny", "fp32", 0);
    test_scratch("bert-tiny", "bf16", 0);
    test_scratch("bert-tiny", "fp32", 1);
    return check_done();
}
