/* The model definition against published formulas, each recomputed here from the paper:
 * saved bytes per layer (Korthikanti et al. 2022), FLOPs per iteration and parameter counts
 * (Narayanan et al. 2021), published sizes of the named configs; plus the structure the planner
 * relies on (names, classes, recompute producers, what crosses a cut) and the time model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mpress/model.h"

static struct mpress_model_config cfg(const char *name, int mb, int seq, const char *dtype,
                                      int flash)
{
    struct mpress_model_config c;
    memset(&c, 0, sizeof(c));
    if (mpress_model_find(name, &c) != 0) {
        fprintf(stderr, "no config %s\n", name);
        exit(1);
    }
    if (mb)
        c.micro_batch = mb;
    if (seq)
        c.seq = seq;
    if (dtype)
        snprintf(c.dtype, sizeof(c.dtype), "%s", dtype);
    c.flash_attention = flash;
    return c;
}

static const struct mpress_model_op *find_op(const struct mpress_model *m, const char *name,
                                             int *index)
{
    for (int i = 0; i < m->n_ops; i++) {
        if (strcmp(m->ops[i].name, name) == 0) {
            if (index)
                *index = i;
            return &m->ops[i];
        }
    }
    return NULL;
}

/* Korthikanti et al. 2022, section 4.1, the per-layer total: s·b·h·(34 + 5·a·s/h) bytes in
 * 16-bit with 1-byte masks; flash attention leaves 34·s·b·h. In fp32 every 2-byte tensor is 4
 * bytes and the two sbh masks and the as²b mask stay 1: s·b·h·66 + 9·a·s²·b. */
static void test_saved_bytes(void)
{
    static const struct {
        const char *name;
        int mb, seq;
        const char *dtype;
        int flash;
    } cases[] = {
        {"gpt3-6.7b", 1, 0, NULL, 0},   {"gpt3-1.3b", 4, 0, NULL, 0},
        {"gpt2-124m", 8, 512, NULL, 0}, {"bert-large", 2, 0, "bf16", 0},
        {"megatron-bert-3.9b", 3, 0, NULL, 0}, {"gpt3-175b", 1, 0, NULL, 0},
        {"gpt3-6.7b", 1, 0, NULL, 1},   {"gpt-20b", 2, 4096, NULL, 1},
        {"bert-base", 4, 0, "fp32", 0}, {"gpt2-355m", 2, 0, "fp32", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mpress_model_config c = cfg(cases[i].name, cases[i].mb, cases[i].seq,
                                           cases[i].dtype, cases[i].flash);
        struct mpress_model m;
        struct mpress_error err;
        CHECK_INT(mpress_model_build(&c, &m, &err), 0);
        double s = c.seq, b = c.micro_batch, h = c.hidden, a = c.heads;
        double want;
        int fp32 = strcmp(c.dtype, "fp32") == 0;
        if (fp32)
            want = s * b * h * 66 + (c.flash_attention ? 0 : 9 * a * s * s * b);
        else
            want = s * b * h * (34 + (c.flash_attention ? 0 : 5 * a * s / h));
        for (int l = 0; l < c.layers; l += c.layers - 1 > 0 ? c.layers - 1 : 1) {
            double got = (double)mpress_model_layer_saved_bytes(&m, l);
            CHECK_NEAR(got, want, 0.01);
            if (!c.flash_attention)
                CHECK_NEAR(got, want, 1e-12); /* exact without flash */
        }
        mpress_model_finish(&m);
    }
}

/* Narayanan et al. 2021 (SC21), section 5.1: 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)) FLOPs per
 * iteration for GPT without activation recomputation (forward + backward). */
static void test_flops(void)
{
    static const struct {
        const char *name;
        int mb, seq;
    } cases[] = {{"gpt3-6.7b", 1, 0}, {"gpt3-175b", 2, 0}, {"gpt2-124m", 8, 1024},
                 {"gpt-20b", 1, 0},   {"gpt3-1.3b", 4, 4096}, {"gpt-tiny", 0, 0}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mpress_model_config c = cfg(cases[i].name, cases[i].mb, cases[i].seq, NULL, 0);
        struct mpress_model m;
        struct mpress_error err;
        CHECK_INT(mpress_model_build(&c, &m, &err), 0);
        double B = c.micro_batch, s = c.seq, L = c.layers, h = c.hidden, V = c.vocab;
        double want = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
        CHECK_NEAR(mpress_model_flops(&m), want, 0.01);
        mpress_model_finish(&m);
    }
    /* BERT: the same layers plus the MLM transform (2·s·b·h²), the decoder (2·s·b·h·V) and the
     * pooler + NSP classifier on the first token (2·b·h·(h + 2)), all times 3 */
    const char *berts[] = {"bert-large", "megatron-bert-3.9b", "bert-tiny"};
    for (int i = 0; i < 3; i++) {
        struct mpress_model_config c = cfg(berts[i], 4, 0, NULL, 0);
        struct mpress_model m;
        struct mpress_error err;
        CHECK_INT(mpress_model_build(&c, &m, &err), 0);
        double B = c.micro_batch, s = c.seq, L = c.layers, h = c.hidden, V = c.vocab;
        double fwd = L * (24 * B * s * h * h + 4 * B * s * s * h) + 2 * B * s * h * h +
                     2 * B * s * h * V + 2 * B * h * (h + 2);
        CHECK_NEAR(mpress_model_flops(&m), 3 * fwd, 1e-12);
        mpress_model_finish(&m);
    }
    /* Flash attention's backward recomputes the scores: more FLOPs than the formula, by
     * 0.5 x the attention forward 4·B·s²·h·L. */
    struct mpress_model_config c = cfg("gpt3-6.7b", 1, 0, NULL, 1);
    struct mpress_model m;
    struct mpress_error err;
    CHECK_INT(mpress_model_build(&c, &m, &err), 0);
    double B = 1, s = c.seq, L = c.layers, h = c.hidden, V = c.vocab;
    double want = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h)) +
                  0.5 * 4 * B * s * s * h * L;
    CHECK_NEAR(mpress_model_flops(&m), want, 1e-9);
    mpress_model_finish(&m);
}

/* Narayanan et al. 2021, section 5.1: P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)), which
 * counts weights and biases of the layers and word + position embeddings; the final LayerNorm
 * adds 2h. BERT adds token-type embeddings (2h), the MLM transform (h² + h dense, 2h LayerNorm),
 * the decoder bias (V), the pooler (h² + h) and the NSP classifier (2h + 2). */
static void test_params(void)
{
    const char *const *names = mpress_model_names();
    int n = 0;
    for (int i = 0; names[i]; i++, n++) {
        struct mpress_model_config c = cfg(names[i], 0, 0, NULL, 0);
        struct mpress_model m;
        struct mpress_error err;
        CHECK_INT(mpress_model_build(&c, &m, &err), 0);
        double l = c.layers, h = c.hidden, V = c.vocab, s = c.seq;
        double p = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h)) + 2 * h;
        if (strcmp(c.family, "bert") == 0)
            p += 2 * h + (h * h + h + 2 * h) + V + (h * h + h) + (2 * h + 2);
        double got = (double)mpress_model_params(&m);
        CHECK_NEAR(got, p, 0.01);
        CHECK_NEAR(got, p, 1e-12);
        /* and the leading term alone is within a few % for the real (non-tiny) models */
        if (c.hidden >= 768)
            CHECK_NEAR(got, 12 * l * h * h + V * h, 0.25);
        double pub = mpress_model_published_params(names[i]);
        if (pub > 0)
            CHECK_NEAR(got, pub, 0.03);
        mpress_model_finish(&m);
    }
    CHECK(n >= 16);
    /* the planner's benchmark case: 96 layers, hidden 4096, about 20B */
    struct mpress_model_config c = cfg("gpt-20b", 0, 0, NULL, 0);
    CHECK_INT(c.layers, 96);
    CHECK_INT(c.hidden, 4096);
    struct mpress_model m;
    struct mpress_error err;
    CHECK_INT(mpress_model_build(&c, &m, &err), 0);
    CHECK(mpress_model_params(&m) > 19e9 && mpress_model_params(&m) < 21e9);
    mpress_model_finish(&m);
    /* the default exists and is GPT-3 6.7B with micro-batch 1 */
    CHECK_INT(mpress_model_find(MPRESS_DEFAULT_MODEL, &c), 0);
    CHECK_INT(c.layers, 32);
    CHECK_INT(c.hidden, 4096);
    CHECK_INT(c.heads, 32);
    CHECK_INT(c.seq, 2048);
    CHECK_INT(c.micro_batch, 1);
    CHECK_INT(mpress_model_find("no-such-model", &c), -1);
}

/* Names, classes, producers and cut sizes, worked by hand for gpt-tiny (s 32, b 2, h 64,
 * ffn 256, V 512, 16-bit): sbh = 4096 elements. */
static void test_structure(void)
{
    struct mpress_model_config c = cfg("gpt-tiny", 0, 0, NULL, 0);
    struct mpress_model m;
    struct mpress_error err;
    CHECK_INT(mpress_model_build(&c, &m, &err), 0);
    CHECK_INT(m.n_ops, 1 + 10 * 2 + 3);
    CHECK_STR(m.ops[0].name, "embedding");
    CHECK_STR(m.ops[m.n_ops - 3].name, "final_layernorm");
    CHECK_STR(m.ops[m.n_ops - 2].name, "head");
    CHECK_STR(m.ops[m.n_ops - 1].name, "loss");
    /* Op kinds: the enum and the string agree op by op; a layer runs the ten kinds from ln1 to
     * mlp_residual in enum order; every name parses back to its kind. */
    CHECK_INT(m.ops[0].op_kind, MPRESS_OP_EMBEDDING);
    CHECK_INT(m.ops[m.n_ops - 1].op_kind, MPRESS_OP_LOSS);
    for (int i = 0; i < m.n_ops; i++)
        CHECK_STR(m.ops[i].kind, mpress_op_kind_name(m.ops[i].op_kind));
    for (int i = 0; i < 10; i++)
        CHECK_INT(m.ops[1 + 10 + i].op_kind, MPRESS_OP_LN1 + i);
    for (int k = 0; k < MPRESS_N_OP_KINDS; k++) {
        enum mpress_op_kind back = MPRESS_OP_LOSS;
        CHECK_INT(mpress_op_kind_parse(mpress_op_kind_name((enum mpress_op_kind)k), &back), 0);
        CHECK_INT(back, k);
    }
    /* Config ranges, stated once: a value one past the top is refused with its field. */
    const char *const fields[] = {"layers", "hidden", "heads", "ffn", "seq", "vocab",
                                  "micro_batch"};
    const int tops[] = {10000, 1 << 17, 1 << 17, 1 << 20, 1 << 20, 1 << 24, 1 << 16};
    for (int f = 0; f < 7; f++) {
        int lo = -1, hi = -1;
        CHECK_INT(mpress_model_config_range(fields[f], &lo, &hi), 0);
        CHECK_INT(lo, 1);
        CHECK_INT(hi, tops[f]);
        struct mpress_model_config big = c;
        int *fieldp[] = {&big.layers, &big.hidden, &big.heads, &big.ffn,
                         &big.seq,    &big.vocab,  &big.micro_batch};
        *fieldp[f] = hi + 1;
        CHECK_INT(mpress_model_config_check(&big, &err), MPRESS_EUSAGE);
        CHECK_STR(err.path, fields[f]);
    }
    int lo, hi;
    CHECK_INT(mpress_model_config_range("depth", &lo, &hi), -1);
    enum mpress_op_kind unused;
    CHECK_INT(mpress_op_kind_parse("attention", &unused), -1);
    const uint64_t sbh = 32 * 2 * 64, sbf = 32 * 2 * 256, sbv = 32 * 2 * 512;
    int iqkv, iln1, icore, ires, iup, ihead, iemb = 0;
    const struct mpress_model_op *qkv = find_op(&m, "layer1.qkv", &iqkv);
    const struct mpress_model_op *ln1 = find_op(&m, "layer1.ln1", &iln1);
    const struct mpress_model_op *core = find_op(&m, "layer1.attn_core", &icore);
    const struct mpress_model_op *res = find_op(&m, "layer1.mlp_residual", &ires);
    const struct mpress_model_op *up = find_op(&m, "layer1.mlp_up", &iup);
    const struct mpress_model_op *hd = find_op(&m, "head", &ihead);
    CHECK(qkv && ln1 && core && res && up && hd);
    if (!(qkv && ln1 && core && res && up && hd))
        return;
    /* recompute producers: qkv's input is ln1's output; q/k/v come from qkv; the softmax from
     * attention itself; ln1's input from the previous layer's residual */
    CHECK_STR(qkv->saved[0].role, "input");
    CHECK_INT(qkv->saved[0].producer, iln1);
    CHECK_INT(core->saved[0].producer, iqkv);
    CHECK_STR(core->saved[3].role, "softmax_out");
    CHECK_INT(core->saved[3].producer, icore);
    int prev_res;
    CHECK(find_op(&m, "layer0.mlp_residual", &prev_res) != NULL);
    CHECK_INT(ln1->saved[0].producer, prev_res);
    /* the head's weight is the embedding's (tied) and counted there */
    CHECK_INT(hd->params, 0);
    CHECK_INT(hd->weights[0].producer, iemb);
    CHECK_INT(m.ops[0].params, 512 * 64 + 32 * 64);
    /* cuts: residual only at a layer boundary; residual + branch inside the layer */
    CHECK_INT(res->output_bytes, 2 * sbh);
    CHECK_INT(ln1->output_bytes, 2 * sbh + 2 * sbh);
    CHECK_INT(qkv->output_bytes, 2 * sbh + 6 * sbh);
    CHECK_INT(core->output_bytes, 2 * sbh + 2 * sbh);
    CHECK_INT(up->output_bytes, 2 * sbh + 2 * sbf);
    CHECK_INT(m.ops[0].output_bytes, 2 * sbh);
    CHECK_INT(hd->output_bytes, 2 * sbv);
    CHECK_INT(m.ops[m.n_ops - 1].output_bytes, 0);
    /* loss keeps the fp32 softmax: 4·s·b·v */
    CHECK_INT(m.ops[m.n_ops - 1].saved[0].bytes, 4 * sbv);
    /* workspace of attention: qkv in + context out + scores and their gradient */
    CHECK_INT(core->workspace_bytes, 6 * sbh + 2 * sbh + 2 * 2 * (4 * 32 * 32 * 2));
    /* same op kind in every layer: same saved roles in the same order (one class each) */
    for (int i = 0; i < m.n_ops; i++) {
        if (m.ops[i].layer != 1)
            continue;
        char name0[96];
        snprintf(name0, sizeof(name0), "layer0.%s", m.ops[i].kind);
        const struct mpress_model_op *o0 = find_op(&m, name0, NULL);
        CHECK(o0 != NULL);
        if (!o0)
            continue;
        CHECK_INT(o0->n_saved, m.ops[i].n_saved);
        for (int k = 0; k < o0->n_saved && k < m.ops[i].n_saved; k++) {
            CHECK_STR(o0->saved[k].role, m.ops[i].saved[k].role);
            CHECK_INT(o0->saved[k].bytes, m.ops[i].saved[k].bytes);
        }
    }
    /* producers always precede (or are) the op; inputs come from earlier ops */
    for (int i = 0; i < m.n_ops; i++) {
        for (int k = 0; k < m.ops[i].n_saved; k++)
            CHECK(m.ops[i].saved[k].producer >= 0 && m.ops[i].saved[k].producer <= i);
        for (int k = 0; k < m.ops[i].n_inputs; k++)
            CHECK(m.ops[i].inputs[k].producer < i);
    }
    mpress_model_finish(&m);

    /* flash: no s² tensor left in attention */
    c.flash_attention = 1;
    CHECK_INT(mpress_model_build(&c, &m, &err), 0);
    core = find_op(&m, "layer0.attn_core", NULL);
    CHECK(core && core->n_saved == 4);
    CHECK(core && core->bwd_factor == MPRESS_ANALYTIC_FLASH_BWD_FACTOR);
    mpress_model_finish(&m);
}

static void test_states(void)
{
    static const struct {
        const char *dtype, *opt;
        int total;
    } cases[] = {{"fp16", "adam", 16}, {"bf16", "adam", 16}, {"fp32", "adam", 16},
                 {"fp16", "sgd", 12},  {"fp32", "sgd", 12}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mpress_model_config c = cfg("gpt-tiny", 0, 0, cases[i].dtype, 0);
        snprintf(c.optimizer, sizeof(c.optimizer), "%s", cases[i].opt);
        int w, g, o;
        mpress_model_state_bytes(&c, &w, &g, &o);
        CHECK_INT(w + g + o, cases[i].total);
        CHECK_INT(w, strcmp(cases[i].dtype, "fp32") == 0 ? 4 : 2);
    }
}

/* Roofline by hand on a made-up GPU: 100 TFLOP/s 16-bit, 10 TFLOP/s fp32, 1 TB/s. */
static void test_time(void)
{
    struct mpress_gpu_spec gpu = {"test", "Test-GPU", 1ull << 34, 100e12, 10e12, 1e12, 0, 0, 1, 4};
    struct mpress_model_config c = cfg("gpt3-6.7b", 0, 0, NULL, 0);
    struct mpress_profile p;
    struct mpress_error err;
    mpress_profile_init(&p);
    CHECK_INT(mpress_profile_analytic(&c, &gpu, &p, &err), 0);
    CHECK_STR(p.source, "analytic");
    CHECK_STR(p.device, "Test-GPU");
    CHECK_INT(p.n_ops, 1 + 10 * 32 + 3);
    double s = 2048, h = 4096;
    /* layer0.qkv = ops[2]: 2·s·h·3h FLOPs, compute-bound */
    CHECK_STR(p.ops[2].name, "layer0.qkv");
    double t_qkv = 2 * s * h * 3 * h / (100e12 * MPRESS_ANALYTIC_GEMM_EFFICIENCY);
    CHECK_NEAR(p.ops[2].fwd_s, t_qkv, 1e-12);
    CHECK_NEAR(p.ops[2].bwd_s, 2 * t_qkv, 1e-12);
    CHECK_NEAR(p.ops[2].fwd_flops, 2 * s * h * 3 * h, 1e-12);
    /* layer0.ln1 = ops[1]: read and write s·h in 16-bit plus gamma and beta */
    double t_ln = 2 * (2 * s * h + 2 * h) / (1e12 * MPRESS_ANALYTIC_MEMORY_EFFICIENCY);
    CHECK_NEAR(p.ops[1].fwd_s, t_ln, 1e-12);
    /* recomputing qkv's input costs ln1's forward */
    CHECK_INT(p.ops[2].tensors[0].recompute_op, 1);
    CHECK_NEAR(p.ops[2].tensors[0].recompute_s, t_ln, 1e-12);
    CHECK_STR(p.ops[2].tensors[0].id, "layer0.qkv.input");
    CHECK_STR(p.ops[2].tensors[0].name, "input");
    /* model states: 16 bytes per parameter with mixed-precision Adam, plus Megatron's second
     * copy of the tied word embedding (V x h parameters) on the head's stage, whose states the
     * head op carries while its parameter count stays 0 */
    uint64_t params = 0, states = 0;
    for (int i = 0; i < p.n_ops; i++) {
        params += p.ops[i].params;
        states += p.ops[i].param_bytes + p.ops[i].grad_bytes + p.ops[i].optim_bytes;
    }
    const struct mpress_op *hop = NULL;
    for (int i = 0; i < p.n_ops; i++)
        if (strcmp(p.ops[i].name, "head") == 0)
            hop = &p.ops[i];
    CHECK(hop != NULL);
    uint64_t tied = (uint64_t)p.model.vocab * (uint64_t)p.model.hidden;
    CHECK_INT(states, 16 * (params + tied));
    if (hop) {
        CHECK_INT(hop->params, 0);
        CHECK_INT(hop->param_bytes, 2 * tied);
        CHECK_INT(hop->optim_bytes, 12 * tied);
    }
    CHECK_INT(params, mpress_profile_params(&p));
    /* fp32 GEMMs use the fp32 peak */
    c = cfg("gpt3-6.7b", 0, 0, "fp32", 0);
    CHECK_INT(mpress_profile_analytic(&c, &gpu, &p, &err), 0);
    CHECK_NEAR(p.ops[2].fwd_s, 2 * s * h * 3 * h / (10e12 * MPRESS_ANALYTIC_GEMM_EFFICIENCY),
               1e-12);
    /* the real table's GPUs all give a profile that survives save and load */
    const char *keys[] = {"v100", "a100-40g", "a100-80g", "h100", "h200"};
    char dir[] = "/tmp/mpress-model-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/p.json", dir);
    for (int i = 0; i < 5; i++) {
        const struct mpress_gpu_spec *g = mpress_gpu_spec_find(keys[i]);
        CHECK(g != NULL);
        if (!g)
            continue;
        c = cfg(i % 2 ? "bert-tiny" : "gpt-tiny", 0, 0, NULL, i == 4);
        CHECK_INT(mpress_profile_analytic(&c, g, &p, &err), 0);
        CHECK_INT(mpress_profile_save(path, &p, &err), 0);
        struct mpress_profile q;
        mpress_profile_init(&q);
        CHECK_INT(mpress_profile_load(path, &q, &err), 0);
        CHECK_INT(q.n_ops, p.n_ops);
        CHECK_INT(mpress_profile_saved_bytes(&q), mpress_profile_saved_bytes(&p));
        mpress_profile_finish(&q);
    }
    unlink(path);
    rmdir(dir);
    mpress_profile_finish(&p);
    /* no GPU: refused, profile untouched */
    CHECK_INT(mpress_profile_analytic(&c, NULL, &p, &err), MPRESS_EUSAGE);
    /* bf16 runs at the 16-bit tensor-core rate where the GPU has bf16 tensor cores; V100 has
     * none, and a bf16 profile timed as if it had is refused */
    c = cfg("gpt-tiny", 0, 0, "bf16", 0);
    CHECK_INT(mpress_profile_analytic(&c, mpress_gpu_spec_find("a100-80g"), &p, &err), 0);
    CHECK_STR(p.model.dtype, "bf16");
    mpress_profile_finish(&p);
    CHECK_INT(mpress_profile_analytic(&c, mpress_gpu_spec_find("v100"), &p, &err),
              MPRESS_EUSAGE);
    CHECK(strstr(err.text, "bf16") != NULL);
    CHECK_INT(p.n_ops, 0);
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    fclose(f);
    return 0;
}

static void test_config_file(void)
{
    char dir[] = "/tmp/mpress-model-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/m.json", dir);
    struct mpress_model_config c;
    struct mpress_error err;
    write_file(path, "{\"format\": \"mpress-model\", \"version\": 1, \"name\": \"mine\",\n"
                     " \"family\": \"gpt\", \"layers\": 3, \"hidden\": 96, \"heads\": 6,\n"
                     " \"seq\": 64, \"vocab\": 1000, \"micro_batch\": 2, \"flash_attention\": "
                     "true}\n");
    CHECK_INT(mpress_model_config_load(path, &c, &err), 0);
    CHECK_STR(c.name, "mine");
    CHECK_INT(c.ffn, 4 * 96);
    CHECK_INT(c.micro_batch, 2);
    CHECK_STR(c.dtype, "fp16");
    CHECK_STR(c.optimizer, "adam");
    CHECK_INT(c.flash_attention, 1);

    write_file(path, "{\"format\": \"mpress-model\", \"version\": 1, \"name\": \"x\",\n"
                     " \"family\": \"gpt\", \"layers\": 3, \"hidden\": 100, \"heads\": 6,\n"
                     " \"seq\": 64, \"vocab\": 1000}\n");
    CHECK_INT(mpress_model_config_load(path, &c, &err), MPRESS_EINPUT);
    CHECK_STR(err.path, "heads");
    CHECK_INT(err.line, 2);
    CHECK_STR(err.file, path);

    write_file(path, "{\"format\": \"mpress-model\", \"version\": 1, \"name\": \"x\",\n"
                     " \"family\": \"gpt\", \"hidden\": 64, \"heads\": 4,\n"
                     " \"seq\": 64, \"vocab\": 1000}\n");
    CHECK_INT(mpress_model_config_load(path, &c, &err), MPRESS_EINPUT);
    CHECK_STR(err.path, "layers");
    CHECK(strstr(err.text, "missing") != NULL);

    write_file(path, "{\"format\": \"mpress-model\", \"version\": 1, \"name\": \"x\",\n"
                     " \"family\": \"gpt\", \"layers\": 1, \"hidden\": 64, \"heads\": 4,\n"
                     " \"seq\": 64, \"vocab\": 1000, \"colour\": 3}\n");
    CHECK_INT(mpress_model_config_load(path, &c, &err), MPRESS_EINPUT);
    CHECK_STR(err.path, "colour");
    CHECK_INT(err.line, 3);

    write_file(path, "{\"format\": \"mpress-plan\", \"version\": 1}\n");
    CHECK_INT(mpress_model_config_load(path, &c, &err), MPRESS_EINPUT);

    write_file(path, "{\"format\": \"mpress-model\", \"version\": 1, \"name\": \"x\",\n"
                     " \"family\": \"gpt\", \"layers\": 1, \"hidden\": 64, \"heads\": 4,\n"
                     " \"seq\": 64, \"vocab\": 1000, \"dtype\": \"int4\"}\n");
    CHECK_INT(mpress_model_config_load(path, &c, &err), MPRESS_EINPUT);
    CHECK_STR(err.path, "dtype");

    /* sizes whose byte counts would not stay exact are refused, not wrapped */
    CHECK_INT(mpress_model_find("gpt3-175b", &c), 0);
    c.seq = 1 << 20;
    c.micro_batch = 1 << 16;
    CHECK_INT(mpress_model_config_check(&c, &err), MPRESS_EUSAGE);

    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_saved_bytes();
    test_flops();
    test_params();
    test_structure();
    test_states();
    test_time();
    test_config_file();
    return check_done();
}
