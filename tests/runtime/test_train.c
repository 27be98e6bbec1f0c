/* The host backend's parameters, optimizer, data loader and reference trainer: init by role and
 * seed, model-state bytes against mpress_model_state_bytes, AdamW and SGD on hand-worked steps,
 * the tied-gradient reduce, byte windows and BERT's segments, NSP and MLM masking, determinism,
 * flash against unfused attention and bf16 against fp32 storage on the whole model, and clean
 * refusals. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../../lib/runtime/host_ops.h"

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

static void config(struct mpress_model_config *c, const char *name, const char *dtype)
{
    CHECK(mpress_model_find(name, c) == 0);
    snprintf(c->dtype, sizeof(c->dtype), "%s", dtype);
}

static void test_init(void)
{
    static const char *const dtypes[2] = {"fp16", "fp32"};
    for (int d = 0; d < 2; d++) {
        struct mpress_model_config c;
        config(&c, "gpt-tiny", dtypes[d]);
        struct mpress_model m;
        struct mpress_error err;
        CHECK(mpress_model_build(&c, &m, &err) == 0);
        struct mpress_host_params a, b, other;
        CHECK(mpress_host_params_create(&m, 5, &a, &err) == 0);
        CHECK(mpress_host_params_create(&m, 5, &b, &err) == 0);
        CHECK(mpress_host_params_create(&m, 6, &other, &err) == 0);
        int wb, gb, ob;
        mpress_model_state_bytes(&c, &wb, &gb, &ob);
        uint64_t own = 0, state = 0;
        int differ = 0;
        for (int i = 0; i < a.n; i++) {
            struct mpress_host_param *p = &a.p[i];
            const struct mpress_model_tensor *t = &m.ops[p->op].weights[p->index];
            size_t bytes = (size_t)t->bytes;
            CHECK(memcmp(p->w, b.p[i].w, bytes) == 0);
            differ += memcmp(p->w, other.p[i].w, bytes) != 0;
            if (p->owner >= 0) {
                /* the head's word embedding is the embedding's */
                CHECK(p->w == a.p[p->owner].w);
                CHECK(!p->m && !p->v && !p->master);
                continue;
            }
            own += p->n;
            state += p->n * (uint64_t)((p->master ? 4 : 0) + (p->m ? 4 : 0) + (p->v ? 4 : 0));
            CHECK_INT(bytes, p->n * (uint64_t)wb);
            float *x = malloc(sizeof(float) * (size_t)p->n);
            mpress_host_load(x, p->w, t->dtype, (size_t)p->n);
            double s = 0, s2 = 0;
            for (uint64_t k = 0; k < p->n; k++) {
                s += x[k];
                s2 += (double)x[k] * x[k];
            }
            double mean = s / (double)p->n, sd = sqrt(s2 / (double)p->n - mean * mean);
            if (strcmp(t->role, "gamma") == 0)
                CHECK(mean == 1.0 && sd == 0);
            else if (strcmp(t->role, "beta") == 0 || strcmp(t->role, "bias") == 0)
                CHECK(mean == 0.0 && sd == 0);
            else if (p->n >= 4096) {
                double want = 0.02;
                if (strcmp(m.ops[p->op].kind, "attn_proj") == 0 ||
                    strcmp(m.ops[p->op].kind, "mlp_down") == 0)
                    want /= sqrt(2.0 * c.layers);
                CHECK_NEAR(sd, want, 0.05);
                CHECK(fabs(mean) < 0.1 * want);
            }
            free(x);
        }
        CHECK_INT(own, mpress_model_params(&m));
        /* per parameter: 16-bit: master, m, v (12 bytes); fp32: m, v (8) */
        CHECK_INT(state, own * (uint64_t)ob);
        CHECK(differ > 0);
        mpress_host_params_finish(&a);
        mpress_host_params_finish(&b);
        mpress_host_params_finish(&other);
        mpress_model_finish(&m);
    }
}

static void test_optim(void)
{
    struct mpress_host_optim o;
    mpress_host_optim_default(&o);
    float w = 1.0f, g = 0.5f, m = 0, v = 0;
    struct mpress_host_param p = {0};
    p.owner = -1;
    p.dtype = MPRESS_DTYPE_FP32;
    p.n = 1;
    p.decay = 1;
    p.w = &w;
    p.g = &g;
    p.m = &m;
    p.v = &v;
    /* AdamW step 1: m = 0.05, v = 2.5e-4, m / bc1 = 0.5, sqrt(v) / sqrt(bc2) = 0.5:
     * w = 1 · (1 - 1e-3 · 0.01) - 1e-3 · 0.5 / (0.5 + 1e-8) = 0.99899 */
    mpress_host_optim_step(&o, 0, 1, &p);
    CHECK_NEAR(m, 0.05, 1e-6);
    CHECK_NEAR(v, 2.5e-4, 1e-4); /* 1 - 0.999 in fp32 */
    CHECK_NEAR(w, 0.99899, 1e-6);
    /* step 2, g = -0.5: m = 0.045 - 0.05 = -0.005, v = 2.4975e-4 + 2.5e-4 = 4.9975e-4,
     * bc1 = 0.19, bc2 = 0.001999: step = -1e-3 · (-0.005 / 0.19) / (sqrt(4.9975e-4 / 0.001999)
     * + 1e-8) = +5.2635e-5 (to 5 digits); w = 0.99899 · (1 - 1e-5) + 5.2635e-5 */
    g = -0.5f;
    mpress_host_optim_step(&o, 0, 2, &p);
    CHECK_NEAR(m, -0.005, 1e-5);
    double want = 0.99899 * (1 - 1e-5) + 1e-3 * (0.005 / 0.19) / sqrt(4.9975e-4 / 0.001999);
    CHECK_NEAR(w, want, 1e-6);
    /* SGD, lr 0.1, momentum 0.9, no decay: m = 0.5, w = 1 - 0.05; then m = 0.95, w -= 0.095 */
    o.lr = 0.1f;
    w = 1.0f;
    g = 0.5f;
    m = 0;
    p.decay = 0;
    mpress_host_optim_step(&o, 1, 1, &p);
    CHECK_NEAR(w, 0.95, 1e-6);
    mpress_host_optim_step(&o, 1, 2, &p);
    CHECK_NEAR(w, 0.855, 1e-6);
}

static void test_tied_reduce(void)
{
    struct mpress_model_config c;
    config(&c, "gpt-tiny", "bf16");
    struct mpress_model m;
    struct mpress_error err;
    CHECK(mpress_model_build(&c, &m, &err) == 0);
    struct mpress_host_params ps;
    CHECK(mpress_host_params_create(&m, 1, &ps, &err) == 0);
    int tied = -1;
    for (int i = 0; i < ps.n; i++)
        if (ps.p[i].owner >= 0)
            tied = i;
    CHECK(tied >= 0);
    struct mpress_host_param *t = &ps.p[tied], *o = &ps.p[t->owner];
    uint16_t *gt = t->g, *go = o->g;
    gt[3] = mpress_f32_to_bf16(1.5f);
    go[3] = mpress_f32_to_bf16(0.25f);
    gt[4] = mpress_f32_to_bf16(-2.0f);
    mpress_host_tied_reduce(&ps);
    CHECK(mpress_bf16_to_f32(go[3]) == 1.75f);
    CHECK(mpress_bf16_to_f32(go[4]) == -2.0f);
    CHECK(mpress_bf16_to_f32(go[5]) == 0.0f);
    mpress_host_params_finish(&ps);
    mpress_model_finish(&m);
}

static void test_data(void)
{
    size_t n;
    uint8_t *data = corpus(&n);
    struct mpress_model_config c;
    struct mpress_error err;
    struct mpress_host_batch b, b2;
    config(&c, "gpt-tiny", "fp16");
    c.micro_batch = 3;
    CHECK(mpress_host_batch_init(&c, &b, &err) == 0);
    CHECK(mpress_host_batch_init(&c, &b2, &err) == 0);
    int64_t S = c.seq;
    CHECK(mpress_host_batch_fill(&c, data, n, 9, 4, 1, &b, &err) == 0);
    CHECK(mpress_host_batch_fill(&c, data, n, 9, 4, 1, &b2, &err) == 0);
    CHECK(memcmp(b.tokens, b2.tokens, sizeof(int64_t) * (size_t)(S * 3)) == 0);
    for (int r = 0; r < 3; r++) {
        uint8_t win[1024];
        for (int64_t i = 0; i < S; i++) {
            win[i] = (uint8_t)b.tokens[r * S + i];
            if (i + 1 < S)
                CHECK(b.labels[r * S + i] == b.tokens[r * S + i + 1]);
        }
        win[S] = (uint8_t)b.labels[r * S + S - 1];
        CHECK(memmem(data, n, win, (size_t)S + 1) != NULL);
    }
    CHECK(mpress_host_batch_fill(&c, data, n, 9, 4, 2, &b2, &err) == 0);
    CHECK(memcmp(b.tokens, b2.tokens, sizeof(int64_t) * (size_t)(S * 3)) != 0);
    CHECK(mpress_host_batch_fill(&c, data, (size_t)S, 9, 4, 1, &b, &err) == MPRESS_EINPUT);
    c.vocab = 255;
    CHECK(mpress_host_batch_fill(&c, data, n, 9, 4, 1, &b, &err) == MPRESS_EINPUT);
    mpress_host_batch_finish(&b);
    mpress_host_batch_finish(&b2);

    config(&c, "bert-tiny", "fp16");
    CHECK(mpress_host_batch_init(&c, &b, &err) == 0);
    S = c.seq;
    int64_t half = S / 2, masked = 0, total = 0, nsp1 = 0, rows = 0;
    for (uint32_t step = 0; step < 100; step++) {
        CHECK(mpress_host_batch_fill(&c, data, n, 3, step, 0, &b, &err) == 0);
        for (int r = 0; r < c.micro_batch; r++) {
            uint8_t row[1024];
            for (int64_t i = 0; i < S; i++) {
                int64_t tk = b.tokens[r * S + i], lab = b.labels[r * S + i];
                CHECK(b.token_types[r * S + i] == (i >= half));
                CHECK(tk == lab || tk == c.vocab - 1);
                CHECK(lab >= 0 && lab < 256);
                masked += tk != lab;
                total++;
                row[i] = (uint8_t)lab;
            }
            CHECK(memmem(data, n, row, (size_t)half) != NULL);
            CHECK(memmem(data, n, row + half, (size_t)(S - half)) != NULL);
            if (b.nsp_labels[r] == 0)
                CHECK(memmem(data, n, row, (size_t)S) != NULL);
            nsp1 += b.nsp_labels[r];
            rows++;
        }
    }
    CHECK_MSG(fabs((double)masked / (double)total - 0.15) < 0.02, "masked %lld of %lld",
              (long long)masked, (long long)total);
    CHECK_MSG(nsp1 > rows / 3 && nsp1 < 2 * rows / 3, "random next %lld of %lld",
              (long long)nsp1, (long long)rows);
    c.vocab = 256;
    CHECK(mpress_host_batch_fill(&c, data, n, 3, 0, 0, &b, &err) == MPRESS_EINPUT);
    mpress_host_batch_finish(&b);
    free(data);
}

static struct mpress_host_trainer *trainer(const char *name, const char *dtype, int flash,
                                           const uint8_t *data, size_t n)
{
    struct mpress_model_config c;
    config(&c, name, dtype);
    c.flash_attention = flash;
    struct mpress_host_trainer_options o;
    mpress_host_trainer_options_default(&o);
    struct mpress_host_trainer *t = NULL;
    struct mpress_error err;
    CHECK(mpress_host_trainer_create(&c, &o, data, n, &t, &err) == 0);
    return t;
}

/* max |a - b| / max |b| over all own gradients */
static double grad_diff(const struct mpress_host_trainer *a, const struct mpress_host_trainer *b)
{
    double worst = 0;
    for (int i = 0; i < a->params.n; i++) {
        const struct mpress_host_param *p = &a->params.p[i], *q = &b->params.p[i];
        if (p->owner >= 0)
            continue;
        float *x = malloc(sizeof(float) * (size_t)p->n), *y = malloc(sizeof(float) * (size_t)q->n);
        mpress_host_load(x, p->g, p->dtype, (size_t)p->n);
        mpress_host_load(y, q->g, q->dtype, (size_t)q->n);
        double d = 0, s = 1e-30;
        for (uint64_t k = 0; k < p->n; k++) {
            d = fmax(d, fabs((double)x[k] - y[k]));
            s = fmax(s, fabs((double)y[k]));
        }
        worst = fmax(worst, d / s);
        free(x);
        free(y);
    }
    return worst;
}

static void test_trainer(void)
{
    size_t n;
    uint8_t *data = corpus(&n);
    struct mpress_error err;
    static const char *const models[2] = {"gpt-tiny", "bert-tiny"};
    for (int mi = 0; mi < 2; mi++) {
        /* two runs of the same seed are bit-identical after 3 steps of 2 micro-batches */
        struct mpress_host_trainer *a = trainer(models[mi], "fp16", 0, data, n);
        struct mpress_host_trainer *b = trainer(models[mi], "fp16", 0, data, n);
        for (int s = 0; s < 3; s++) {
            double la, lb;
            CHECK(mpress_host_trainer_step(a, 2, &la, &err) == 0);
            CHECK(mpress_host_trainer_step(b, 2, &lb, &err) == 0);
            CHECK(la == lb);
        }
        int same = 1;
        for (int i = 0; i < a->params.n; i++)
            same &= memcmp(a->params.p[i].w, b->params.p[i].w,
                           (size_t)a->model.ops[a->params.p[i].op]
                               .weights[a->params.p[i].index].bytes) == 0;
        CHECK(same);
        mpress_host_trainer_destroy(a);
        mpress_host_trainer_destroy(b);

        /* flash-style attention computes the unfused one's math (fp32 storage); bf16 storage
         * is fp32 to bf16's precision */
        struct mpress_host_trainer *u = trainer(models[mi], "fp32", 0, data, n);
        struct mpress_host_trainer *f = trainer(models[mi], "fp32", 1, data, n);
        struct mpress_host_trainer *h = trainer(models[mi], "bf16", 0, data, n);
        float lu, lf, lh;
        CHECK(mpress_host_trainer_micro_batch(u, 0, &lu, &err) == 0);
        CHECK(mpress_host_trainer_micro_batch(f, 0, &lf, &err) == 0);
        CHECK(mpress_host_trainer_micro_batch(h, 0, &lh, &err) == 0);
        CHECK_NEAR(lf, lu, 1e-6);
        CHECK_NEAR(lh, lu, 1e-2);
        double df = grad_diff(f, u), dh = grad_diff(h, u);
        fprintf(stderr, "%s: flash vs unfused loss %.9g %.9g, gradients %.2e; bf16 vs fp32 loss "
                "%.6g %.6g, gradients %.2e\n", models[mi], lf, lu, df, lh, lu, dh);
        CHECK(df < 1e-4);
        CHECK(dh < 0.1);
        mpress_host_trainer_destroy(u);
        mpress_host_trainer_destroy(f);
        mpress_host_trainer_destroy(h);
    }

    /* a token outside the vocabulary is refused, not read out of bounds */
    struct mpress_host_trainer *t = trainer("gpt-tiny", "fp32", 0, data, n);
    CHECK(mpress_host_batch_fill(&t->model.config, data, n, 1, 0, 0, &t->batch, &err) == 0);
    t->batch.tokens[5] = t->model.config.vocab;
    struct mpress_host_io io;
    mpress_host_trainer_io(t, 0, &io);
    struct mpress_rng_key k = {1, 0, 0, 0};
    CHECK(mpress_host_forward(&t->model, 0, &t->opt.hp, &k, &io, &err) == MPRESS_EINPUT);
    CHECK(strstr(err.text, "vocabulary") != NULL);
    io.w[0] = NULL;
    CHECK(mpress_host_forward(&t->model, 0, &t->opt.hp, &k, &io, &err) == MPRESS_EUSAGE);
    mpress_host_trainer_destroy(t);
    free(data);
}

int main(void)
{
    test_init();
    test_optim();
    test_tied_reduce();
    test_data();
    test_trainer();
    return check_done();
}
