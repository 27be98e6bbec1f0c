/* The planner's cost model on hand-worked cases (numbers computed by hand from the formulas in
 * docs/cost-model.md, "Planner cost model"), malformed assignments, and a whole plan made by
 * mpress_plan_create that the strict plan loader accepts. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mpress/sim.h"
#include "../../lib/plan/plan_internal.h"
#include "tiny.h"

/* Two ops on two GPUs joined by one NVLink (1000 MB/s), PCIe 300 MB/s, one switch 400 MB/s.
 * op0: fwd 10 ms, bwd 20 ms, 10 M params (P 20 MB, G 20 MB, O 120 MB), output 5 MB, saves
 * t0 = 100 MB (recompute 4 ms). op1: fwd 20 ms, bwd 40 ms, no params, saves t1 = 50 MB. */
static void instance(struct mpress_profile *p, struct mpress_topology *t, uint64_t cap_mb)
{
    tiny_profile_init(p);
    struct mpress_op *op = tiny_op(p, "mlp", 0.010, 10, 5, 1);
    snprintf(op->tensors[0].name, sizeof(op->tensors[0].name), "t0");
    op->tensors[0].bytes = 100 * MB;
    op->tensors[0].recompute_s = 0.004;
    op = tiny_op(p, "attn", 0.020, 0, 7, 1);
    snprintf(op->tensors[0].name, sizeof(op->tensors[0].name), "t1");
    op->tensors[0].bytes = 50 * MB;
    op->tensors[0].recompute_s = 0.010;
    op->tensors[0].recompute_op = 1;
    tiny_topo(t, 2, 0, cap_mb);
    t->nvlinks[0][1] = t->nvlinks[1][0] = 1;
}

static void two_stages(struct mpress_assignment *a)
{
    a->n_stages = 2;
    a->stages[0] = (struct mpress_plan_stage){0, 0, 0, 0};
    a->stages[1] = (struct mpress_plan_stage){1, 1, 1, 0};
}

static void set(struct mpress_assignment *a, int j, enum mpress_action kind)
{
    a->actions[j].action = kind;
    a->actions[j].n_peers = 0;
    a->actions[j].evict_after_op = kind ? a->actions[j].op : -1;
    a->actions[j].prefetch_before_op = kind ? a->actions[j].op : -1;
}

static int op_index(const struct mpress_profile *p, const char *name)
{
    for (int i = 0; i < p->n_ops; i++)
        if (strcmp(p->ops[i].name, name) == 0)
            return i;
    return -1;
}

/* The memory terms of the zoo's own structure on gpt-tiny (docs/cost-model.md, "Tied word
 * embedding" and "Held stage inputs"), each against bytes computed here from the profile
 * and the model config: one matrix when embedding and head share a stage, the exchange's
 * moment on a stage that holds little else, a tensor recomputed from the previous stage held
 * like a kept one; and the MILP, which models the same terms, on 1 and 3 GPUs. */
static void zoo_terms(void)
{
    struct mpress_model_config cfg;
    struct mpress_profile p;
    struct mpress_topology t;
    struct mpress_assignment a;
    struct mpress_plan_eval ev;
    struct mpress_error err;
    mpress_error_clear(&err);
    mpress_profile_init(&p);
    CHECK_INT(mpress_model_find("gpt-tiny", &cfg), 0);
    CHECK_INT(mpress_profile_analytic(&cfg, mpress_gpu_spec_find("a100-80g"), &p, &err), 0);
    int wb, gb, ob;
    mpress_model_state_bytes(&cfg, &wb, &gb, &ob);
    const uint64_t vh = (uint64_t)cfg.vocab * (uint64_t)cfg.hidden;
    uint64_t P = 0, G = 0, O = 0, A = 0;
    for (int i = 0; i < p.n_ops; i++) {
        P += p.ops[i].param_bytes;
        G += p.ops[i].grad_bytes;
        O += p.ops[i].optim_bytes;
        for (int j = 0; j < p.ops[i].n_tensors; j++)
            A += p.ops[i].tensors[j].bytes;
    }
    tiny_topo(&t, 3, 0, 1000);
    for (int g = 0; g < 3; g++)
        t.gpus[g].reserve_bytes = 0;
    t.host_memory_bytes_per_s = 0; /* no host optimizer: memory alone decides below */
    CHECK_INT(mpress_assignment_init(&a, &p, &err), 0);

    /* One stage: the head's copy of the word matrix is the embedding's own (weights and
     * optimizer states once; the copy's gradient is kept and folded in). */
    a.n_stages = 1;
    a.stages[0] = (struct mpress_plan_stage){0, p.n_ops - 1, 0, 0};
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_INT(ev.gpus[0].weights, P - vh * (uint64_t)wb);
    CHECK_INT(ev.gpus[0].gradients, G);
    CHECK_INT(ev.gpus[0].optimizer, O - vh * (uint64_t)ob);
    CHECK_INT(ev.gpus[0].activations, A);
    uint64_t one_peak = ev.gpus[0].peak;

    /* Three stages: [embedding], [layer 0, layer 1], [final_layernorm, head, loss]. Stage 0
     * holds its states, and after its backward pass the head's gradient of the matrix, more
     * than its micro-batches ever hold: that moment is its peak. */
    int l0 = op_index(&p, "layer0.ln1"), fl = op_index(&p, "final_layernorm");
    CHECK(l0 == 1 && fl > l0);
    a.n_stages = 3;
    a.stages[0] = (struct mpress_plan_stage){0, 0, 0, 0};
    a.stages[1] = (struct mpress_plan_stage){1, fl - 1, 1, 0};
    a.stages[2] = (struct mpress_plan_stage){fl, p.n_ops - 1, 2, 0};
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    const struct mpress_op *emb = &p.ops[0];
    CHECK_INT(ev.gpus[0].peak, emb->param_bytes + emb->grad_bytes + emb->optim_bytes +
                                   vh * (uint64_t)gb);
    CHECK_INT(ev.gpus[0].buffers, vh * (uint64_t)gb);
    CHECK_INT(ev.gpus[0].activations, 0);
    /* The head's stage also receives one, but holds far more during its pass. */
    CHECK(ev.gpus[2].activations > 0 && ev.gpus[2].buffers == 2 * p.ops[fl - 1].output_bytes);

    /* Stage 1 (2 micro-batches in flight): layer0.ln1's input is recomputed by embedding,
     * on stage 0, so stage 1 holds it as received: as if kept. layer0.qkv's input is
     * recomputed by layer0.ln1, on the stage: one micro-batch's copy, in the working set. */
    uint64_t keep_act = ev.gpus[1].activations, keep_work = ev.gpus[1].working;
    uint64_t A1 = 0;
    for (int i = l0; i < fl; i++)
        for (int j = 0; j < p.ops[i].n_tensors; j++)
            A1 += p.ops[i].tensors[j].bytes;
    CHECK_INT(keep_act, 2 * A1);
    int j_ln1 = 0, j_qkv = 0;
    for (int i = 0; i < l0; i++)
        j_ln1 += p.ops[i].n_tensors;
    j_qkv = j_ln1 + p.ops[l0].n_tensors;
    CHECK(p.ops[l0].tensors[0].recompute_op == 0 && p.ops[l0 + 1].tensors[0].recompute_op == l0);
    uint64_t s_qkv = p.ops[l0 + 1].tensors[0].bytes;
    set(&a, j_ln1, MPRESS_ACTION_RECOMPUTE);
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_INT(ev.gpus[1].activations, keep_act);
    CHECK_INT(ev.gpus[1].working, keep_work);
    set(&a, j_ln1, MPRESS_ACTION_KEEP);
    set(&a, j_qkv, MPRESS_ACTION_RECOMPUTE);
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_INT(ev.gpus[1].activations, keep_act - 2 * s_qkv);
    CHECK_INT(ev.gpus[1].working, keep_work + s_qkv);
    mpress_assignment_finish(&a);

    /* The MILP on one GPU just large enough for the one-matrix stage: it finds that plan
     * (charging the copy it would find none: nothing else saves memory on one stage). */
    struct mpress_topology t1;
    tiny_topo(&t1, 1, 0, 1000);
    t1.gpus[0].reserve_bytes = 0;
    t1.host_memory_bytes_per_s = 0;
    t1.gpus[0].memory_bytes = one_peak + one_peak / 10000;
    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    o.micro_batches = 4;
    struct mpress_plan plan;
    CHECK_INT(mpress_plan_create(&p, &t1, &o, &plan, &err), 0);
    if (err.code == 0) {
        CHECK_INT(plan.gpus[0].peak, one_peak);
        mpress_plan_finish(&plan);
    }
    /* On three GPUs from roomy down to the memory wall: every MILP plan fits when the
     * evaluator judges it (the planner fails a plan that does not: a cost-model mismatch),
     * and once the capacity forces recomputes they are not the held ones alone. */
    for (int pct = 70; pct >= 54; pct--) {
        tiny_topo(&t, 3, 0, 1000);
        t.host_memory_bytes_per_s = 0;
        for (int g = 0; g < 3; g++) {
            t.gpus[g].reserve_bytes = 0;
            t.gpus[g].memory_bytes = (uint64_t)((double)one_peak * pct / 100.0);
        }
        mpress_error_clear(&err);
        int rc = mpress_plan_create(&p, &t, &o, &plan, &err);
        CHECK_MSG(rc == 0 || rc == MPRESS_EINFEASIBLE, "%d %%: %s", pct, err.text);
        int rec = 0;
        if (rc == 0) {
            for (int i = 0; i < plan.n_actions; i++)
                rec += plan.actions[i].action == MPRESS_ACTION_RECOMPUTE;
            fprintf(stderr, "gpt-tiny, 3 GPUs of %d %% of the one-stage peak: %d stages, %d "
                    "recomputed, %.6f s\n", pct, plan.n_stages, rec, plan.iteration_s);
            mpress_plan_finish(&plan);
        } else {
            fprintf(stderr, "gpt-tiny, 3 GPUs of %d %% of the one-stage peak: none fits\n", pct);
        }
    }
    mpress_profile_finish(&p);
}

/* The workspace at its moment (docs/cost-model.md, "Memory"): one stage on one GPU, no model
 * states, three ops A, B, C saving 100, 50 and 20 MB with workspaces of 10, 80 and 5 MB.
 * B's workspace is live in B's forward (A's and B's tensors made, C's not yet) and in B's
 * backward (C's freed): kept activations of the micro-batches in flight beside 80 - 20 MB.
 * The simulator replays each plan to the same peak; the bound counts 80 MB beside all 170. */
static double moment_sim_peak(const struct mpress_profile *p, const struct mpress_topology *t,
                              enum mpress_schedule sched, int M,
                              const struct mpress_assignment *a)
{
    struct mpress_plan plan;
    mpress_plan_init(&plan);
    plan.profile = *p;
    plan.topology = *t;
    plan.schedule = sched;
    plan.micro_batches = M;
    plan.n_stages = a->n_stages;
    plan.stages = (struct mpress_plan_stage *)a->stages;
    plan.n_actions = a->n_actions;
    plan.actions = a->actions;
    struct mpress_sim_options so;
    mpress_sim_options_init(&so);
    so.iterations = 2;
    struct mpress_sim *sim = NULL;
    struct mpress_error err;
    mpress_error_clear(&err);
    int rc = mpress_sim_run(&plan, &so, &sim, &err);
    CHECK_MSG(rc == 0, "mpress_sim_run: %s", err.text);
    double peak = rc ? -1 : (double)mpress_sim_summary_get(sim)->gpus[0].peak;
    mpress_sim_destroy(sim);
    return peak;
}

static void workspace_moment(void)
{
    struct mpress_profile p;
    struct mpress_topology t;
    struct mpress_assignment a;
    struct mpress_plan_eval ev;
    struct mpress_error err;
    tiny_profile_init(&p);
    static const uint64_t saves[3] = {100, 50, 20}, ws[3] = {10, 80, 5};
    for (int i = 0; i < 3; i++) {
        struct mpress_op *op = tiny_op(&p, "op", 0.010, 0, 0, 1);
        op->workspace_bytes = ws[i] * MB;
        op->tensors[0].bytes = saves[i] * MB;
        op->tensors[0].recompute_s = 0.001;
        op->tensors[0].recompute_op = i;
    }
    tiny_topo(&t, 1, 0, 1000);
    CHECK_INT(mpress_assignment_init(&a, &p, &err), 0);
    a.n_stages = 1;
    a.stages[0] = (struct mpress_plan_stage){0, 2, 0, 0};

    /* 1F1B, M = 2, one stage: n = 1. Activations 170, workspace 80 - 20 (C's tensor). */
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 2, &a, &ev, &err), 0);
    CHECK_INT(ev.gpus[0].activations, 170 * MB);
    CHECK_INT(ev.gpus[0].working, 60 * MB);
    CHECK_INT(ev.gpus[0].peak, 240 * MB);  /* 170 + 60 + 10 reserve */
    CHECK_INT(ev.gpus[0].bound, 260 * MB); /* 170 + 80 + 10 */
    CHECK_NEAR(moment_sim_peak(&p, &t, MPRESS_SCHEDULE_1F1B, 2, &a), 240.0 * MB, 0.5);
    /* It fits by the bound: a GPU between the two is short. */
    t.gpus[0].memory_bytes = 250 * MB;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 2, &a, &ev, &err), 0);
    CHECK(!ev.fits);
    CHECK_INT(ev.short_bytes, 10 * MB);
    t.gpus[0].memory_bytes = 1000 * MB + MB / 2;

    /* GPipe, M = 2: one whole micro-batch more (n = 2). */
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_GPIPE, 2, &a, &ev, &err), 0);
    CHECK_INT(ev.gpus[0].peak, 410 * MB);  /* 340 + 60 + 10 */
    CHECK_INT(ev.gpus[0].bound, 430 * MB);
    CHECK_NEAR(moment_sim_peak(&p, &t, MPRESS_SCHEDULE_GPIPE, 2, &a), 410.0 * MB, 0.5);

    /* C recomputed: nothing kept after B, whose workspace meets 150 MB of activations and C's
     * 20 MB, back in the working set. */
    set(&a, 2, MPRESS_ACTION_RECOMPUTE);
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 2, &a, &ev, &err), 0);
    CHECK_INT(ev.gpus[0].activations, 150 * MB);
    CHECK_INT(ev.gpus[0].working, 100 * MB); /* 20 + 80 */
    CHECK_INT(ev.gpus[0].peak, 260 * MB);
    CHECK_INT(ev.gpus[0].bound, 260 * MB);
    mpress_assignment_finish(&a);
    mpress_profile_finish(&p);
}

int main(void)
{
    struct mpress_profile p;
    struct mpress_topology t;
    struct mpress_assignment a;
    struct mpress_plan_eval ev;
    struct mpress_error err;
    mpress_error_clear(&err);
    instance(&p, &t, 1000);
    CHECK_INT(mpress_assignment_init(&a, &p, &err), 0);
    two_stages(&a);

    /* A: keep everything, 1F1B, M = 4: n_0 = 2, n_1 = 1. */
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_INT(ev.gpus[0].weights, 20 * MB);
    CHECK_INT(ev.gpus[0].optimizer, 120 * MB);
    CHECK_INT(ev.gpus[0].activations, 200 * MB);
    CHECK_INT(ev.gpus[0].buffers, 10 * MB);       /* 2 x (0 in + 5 out) */
    CHECK_INT(ev.gpus[0].peak, 380 * MB);         /* 20+20+120+200+10+10 reserve */
    CHECK_INT(ev.gpus[1].peak, 70 * MB);          /* 50 + 2 x 5 + 10 */
    CHECK_NEAR(ev.cycle_s, 0.060, 1e-12);         /* stage 1 compute */
    CHECK_NEAR(ev.fill_drain_s, 0.100, 1e-12);    /* 0.03 + 0.06 + 2 x 5 MB / 1000 MB/s */
    /* Mixed-precision Adam: read G + O, write O + P (the fp32 master is in O). */
    CHECK_NEAR(ev.tail_s, 0.0028, 1e-12);         /* (20+240+20) MB / 100000 MB/s */
    CHECK_NEAR(ev.iteration_s, 0.2828, 1e-12);    /* 0.1 + 3 x 0.06 + 0.0028 */
    CHECK_NEAR(ev.samples_per_s, 4 / 0.2828, 1e-12);
    CHECK(ev.fits);
    CHECK_STR(ev.bottleneck, "stage 1 compute");

    /* GPipe holds all M micro-batches; async stashes n_k weight versions. */
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_GPIPE, 4, &a, &ev, &err), 0);
    CHECK_INT(ev.gpus[0].peak, 580 * MB);
    CHECK_INT(ev.gpus[1].peak, 220 * MB);
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_ASYNC, 4, &a, &ev, &err), 0);
    CHECK_INT(ev.gpus[0].weights, 40 * MB);
    CHECK_INT(ev.gpus[0].peak, 400 * MB);

    /* B: t0 D2D to GPU 1, t1 to host, stage 0's optimizer on the host. */
    a.actions[0].action = MPRESS_ACTION_D2D_SWAP;
    a.actions[0].n_peers = 1;
    a.actions[0].peers[0] = 1;
    a.actions[0].peer_bytes[0] = 100 * MB;
    a.actions[0].evict_after_op = a.actions[0].prefetch_before_op = 0;
    set(&a, 1, MPRESS_ACTION_HOST_SWAP);
    a.stages[0].optimizer_on_host = 1;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_INT(ev.gpus[0].peak, 160 * MB);   /* 20+20+0 opt+0 act+100 working+10+10 */
    CHECK_INT(ev.gpus[1].parked, 200 * MB); /* n_0 = 2 copies of 100 MB */
    CHECK_INT(ev.gpus[1].peak, 270 * MB);   /* 0 act + 50 working + 10 + 200 parked + 10 */
    CHECK_INT(ev.host_bytes, 170 * MB);     /* 1 x 50 MB swapped + 120 MB optimizer */
    /* NVLink 0-1 carries 100 + 5 MB: 0.105 s; PCIe of GPU 1: 50 / 300; uplink 50 / 400. */
    CHECK_NEAR(ev.cycle_s, 50.0 / 300.0, 1e-12);
    CHECK_STR(ev.bottleneck, "pcie gpu 1");
    /* Host step: (20 G down + 20 P up) MB / 300 MB/s over PCIe, then 280 MB / 2000 MB/s. */
    CHECK_NEAR(ev.tail_s, 40.0 / 300.0 + 0.14, 1e-12);
    CHECK_NEAR(ev.iteration_s, 0.1 + 3 * (50.0 / 300.0) + 40.0 / 300.0 + 0.14, 1e-12);
    CHECK_INT(ev.action_bytes[MPRESS_ACTION_D2D_SWAP], 100 * MB);
    CHECK_INT(ev.action_bytes[MPRESS_ACTION_HOST_SWAP], 50 * MB);
    /* Drain: a forward may use half of each link. Stage 0 (10 ms) evicts 100 MB over the
     * NVLink, which takes 0.5 x 0.010 x 1000 = 5 MB: 95 MB short; its switch's uplink carries
     * stage 1's 50 MB against 0.5 x 0.010 x 400 = 2 MB: 48 MB short. Stage 1 (20 ms): PCIe
     * 50 - 3 = 47 MB, uplink 50 - 4 = 46 MB. The backlog is n_k times the worst: 2 x 95 MB
     * on GPU 0 against 1 x 47 MB on GPU 1. */
    CHECK(!ev.fits);
    CHECK_INT(ev.short_gpu, -1);
    CHECK_INT(ev.drain_gpu, 0);
    CHECK_NEAR((double)ev.drain_short, 190.0 * MB, 2);

    /* C: recompute t0 instead: 4 ms more compute in stage 0, still under stage 1's 60 ms. */
    set(&a, 0, MPRESS_ACTION_RECOMPUTE);
    set(&a, 1, MPRESS_ACTION_KEEP);
    a.stages[0].optimizer_on_host = 0;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_NEAR(ev.stage_s[0], 0.034, 1e-12);
    CHECK_NEAR(ev.iteration_s, 0.104 + 3 * 0.06 + 0.0028, 1e-12);
    CHECK_INT(ev.gpus[0].activations, 0);
    CHECK_INT(ev.gpus[0].working, 100 * MB);
    CHECK(ev.fits);
    CHECK_INT(ev.drain_gpu, -1);

    /* Optimizer steps overlap the drain and the next iteration's fill: stage 1 with 10 M
     * parameters on a GPU with 5000 MB/s touches 280 MB in 0.056 s, but its last backward
     * ends stage 0's backward + recompute (0.020 + 0.004 s) before stage 0's, and the next
     * iteration's first forward reaches it stage 0's forward (0.010 s) after stage 0's:
     * tail = max(0.0028, 0.056 - 0.034) = 0.022 s. On the host instead: (20 + 20) MB /
     * 300 MB/s + 280 MB / 2000 MB/s - 0.034 s. */
    p.ops[1].param_bytes = p.ops[1].grad_bytes = 20 * MB;
    p.ops[1].optim_bytes = 120 * MB;
    t.gpus[1].hbm_bytes_per_s = 5000 * MB;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_NEAR(ev.tail_s, 0.022, 1e-12);
    /* In fp32 the weights are the master copy and are read as well: 2P + G + 2O = 300 MB. */
    snprintf(p.model.dtype, sizeof(p.model.dtype), "fp32");
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_NEAR(ev.tail_s, 0.060 - 0.034, 1e-12);
    snprintf(p.model.dtype, sizeof(p.model.dtype), "fp16");
    a.stages[1].optimizer_on_host = 1;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_NEAR(ev.tail_s, 40.0 / 300.0 + 0.14 - 0.034, 1e-12);
    /* Both on the host: one CPU queue, stage 1's step first (its gradients arrive first, at
     * -0.024 + 20 / 300 s), stage 0's after it: stage 0's weights are back at -0.024 + 20 / 300
     * + 0.14 + 0.14 + 20 / 300 s. */
    a.stages[0].optimizer_on_host = 1;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_NEAR(ev.tail_s, 40.0 / 300.0 + 0.28 - 0.024, 1e-12);
    /* GPU 1 on a second socket: each step has its socket to itself, stage 0 sets the tail. */
    t.n_sockets = 2;
    t.gpus[1].socket = 1;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_NEAR(ev.tail_s, 40.0 / 300.0 + 0.14, 1e-12);
    t.n_sockets = 1;
    t.gpus[1].socket = 0;
    /* Op 0 an embedding whose matrix op 1, a head, uses again (10 M parameters of a copy):
     * each stage sends the other its 20 MB of gradients over their NVLink (1000 MB/s) once
     * stage 0's last backward is done, and both steps wait for both: 0.02 s. On the GPUs:
     * stage 0 0.02 + 280 / 100000 s, stage 1 0.02 + 0.056 - 0.010 s (its fill; the drain does
     * not hide it any more). On the host: stage 1's step first, then stage 0's, both from
     * 0.02 s: 0.02 + 20 / 300 + 0.14 + 0.14 + 20 / 300 s. */
    snprintf(p.ops[0].name, sizeof(p.ops[0].name), "embedding");
    snprintf(p.ops[1].name, sizeof(p.ops[1].name), "head");
    p.ops[1].params = 0;
    a.stages[0].optimizer_on_host = a.stages[1].optimizer_on_host = 0;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_NEAR(ev.tail_s, 0.02 + 0.056 - 0.010, 1e-12);
    a.stages[0].optimizer_on_host = a.stages[1].optimizer_on_host = 1;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK_NEAR(ev.tail_s, 0.02 + 40.0 / 300.0 + 0.28, 1e-12);
    snprintf(p.ops[0].name, sizeof(p.ops[0].name), "op0");
    snprintf(p.ops[1].name, sizeof(p.ops[1].name), "op1");
    a.stages[0].optimizer_on_host = a.stages[1].optimizer_on_host = 0;
    p.ops[1].param_bytes = p.ops[1].grad_bytes = p.ops[1].optim_bytes = 0;
    t.gpus[1].hbm_bytes_per_s = 100000 * MB;

    /* Prefetch points: one stage holding both ops, t0 swapped and t1 recomputed. From op 0's
     * backward slot in one micro-batch back to op 0's backward in the previous one the stream
     * runs 2 backward ops and 1 recompute: lookahead 2 issues the prefetch as that backward
     * ends. Without the recompute the span is 1. The swapped tensor waits at its own op. */
    {
        struct mpress_assignment one;
        CHECK_INT(mpress_assignment_init(&one, &p, &err), 0);
        one.n_stages = 1;
        one.stages[0] = (struct mpress_plan_stage){0, 1, 0, 0};
        set(&one, 0, MPRESS_ACTION_HOST_SWAP);
        set(&one, 1, MPRESS_ACTION_RECOMPUTE);
        one.actions[0].prefetch_before_op = 1;
        CHECK_INT(plan_schedule_prefetches(&p, &one), 2);
        CHECK_INT(one.actions[0].prefetch_before_op, 0);
        set(&one, 1, MPRESS_ACTION_KEEP);
        CHECK_INT(plan_schedule_prefetches(&p, &one), 1);
        set(&one, 0, MPRESS_ACTION_KEEP);
        CHECK_INT(plan_schedule_prefetches(&p, &one), 0);
        mpress_assignment_finish(&one);
    }

    /* The stage input's copy comes back with the recomputes: op1 saves its input (made by
     * op0 on the previous stage, as large as op0's output), op2 saves op1's output. With op1's
     * copy swapped and op2's input recomputed (rerun from op1, which reads the stage input),
     * the copy is prefetched before the stage's last op, where recomputes run; kept or
     * without a recompute it waits at its own op, and so does a tensor made before the stage
     * that is not the whole input (a slice of it, as q of a qkv output). */
    {
        struct mpress_profile q;
        tiny_profile_init(&q);
        tiny_op(&q, "mlp", 0.010, 0, 5, 0);
        struct mpress_op *o1 = tiny_op(&q, "layernorm", 0.010, 0, 5, 1);
        o1->tensors[0].bytes = 5 * MB;
        o1->tensors[0].recompute_op = 0;
        struct mpress_op *o2 = tiny_op(&q, "qkv", 0.010, 0, 5, 1);
        o2->tensors[0].bytes = 5 * MB;
        o2->tensors[0].recompute_op = 1;
        struct mpress_assignment two;
        CHECK_INT(mpress_assignment_init(&two, &q, &err), 0);
        two.n_stages = 2;
        two.stages[0] = (struct mpress_plan_stage){0, 0, 0, 0};
        two.stages[1] = (struct mpress_plan_stage){1, 2, 1, 0};
        for (int kind = MPRESS_ACTION_HOST_SWAP; kind <= MPRESS_ACTION_D2D_SWAP; kind++) {
            set(&two, 0, (enum mpress_action)kind);
            set(&two, 1, MPRESS_ACTION_RECOMPUTE);
            plan_schedule_prefetches(&q, &two);
            CHECK_INT(two.actions[0].prefetch_before_op, 2);
            set(&two, 1, MPRESS_ACTION_KEEP);
            plan_schedule_prefetches(&q, &two);
            CHECK_INT(two.actions[0].prefetch_before_op, 1);
        }
        set(&two, 1, MPRESS_ACTION_RECOMPUTE);
        q.ops[1].tensors[0].bytes = 5 * MB / 3;
        plan_schedule_prefetches(&q, &two);
        CHECK_INT(two.actions[0].prefetch_before_op, 1);
        mpress_assignment_finish(&two);
        mpress_profile_finish(&q);
    }

    /* Short by half a MB: capacity 379.5 MB against a peak of 380 MB. */
    set(&a, 0, MPRESS_ACTION_KEEP);
    t.gpus[0].memory_bytes = 379 * MB + MB / 2;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK(!ev.fits);
    CHECK_INT(ev.short_gpu, 0);
    CHECK_INT(ev.short_bytes, MB / 2);

    /* Malformed: D2D to a GPU without NVLink, shares that do not add up, a gap in the ops. */
    t.nvlinks[0][1] = t.nvlinks[1][0] = 0;
    a.actions[0].action = MPRESS_ACTION_D2D_SWAP;
    a.actions[0].n_peers = 1;
    a.actions[0].peers[0] = 1;
    a.actions[0].peer_bytes[0] = 100 * MB;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), MPRESS_EINPUT);
    t.nvlinks[0][1] = t.nvlinks[1][0] = 1;
    a.actions[0].peer_bytes[0] = 99 * MB;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), MPRESS_EINPUT);
    set(&a, 0, MPRESS_ACTION_KEEP);
    a.stages[1].first_op = 2;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), MPRESS_EINPUT);
    mpress_assignment_finish(&a);

    /* Baselines on the instance (capacity 1000 MB): one stage per GPU, cut after op 0. */
    t.gpus[0].memory_bytes = 1000 * MB;
    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    o.micro_batches = 4;
    CHECK_INT(mpress_plan_baseline(&p, &t, &o, MPRESS_POLICY_RECOMPUTE, &a, &ev, &err), 0);
    CHECK_INT(a.n_stages, 2);
    CHECK_INT(a.actions[0].action, MPRESS_ACTION_RECOMPUTE);
    CHECK_NEAR(ev.iteration_s, 0.114 + 3 * 0.07 + 0.0028, 1e-12);
    mpress_assignment_finish(&a);

    /* A whole plan: the MILP beats or ties every baseline, and the strict loader accepts it. */
    struct mpress_plan plan;
    CHECK_INT(mpress_plan_create(&p, &t, &o, &plan, &err), 0);
    for (int i = 0; i < plan.n_baselines; i++)
        if (plan.baselines[i].fits)
            CHECK(plan.iteration_s <= plan.baselines[i].iteration_s * (1 + 1e-9));
    char path[] = "plan-eval-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    mpress_error_clear(&err);
    CHECK_INT(mpress_plan_save(path, &plan, &err), 0);
    char kind[32];
    CHECK_INT(mpress_validate_file(path, kind, sizeof(kind), &err), 0);
    CHECK_STR(kind, "mpress-plan");
    unlink(path);
    mpress_plan_finish(&plan);

    /* Nothing fits in 100 MB per GPU: infeasible, naming a GPU and a shortfall. */
    t.gpus[0].memory_bytes = t.gpus[1].memory_bytes = 100 * MB;
    CHECK_INT(mpress_plan_create(&p, &t, &o, &plan, &err), MPRESS_EINFEASIBLE);
    CHECK(strstr(err.text, "short by") != NULL);
    mpress_profile_finish(&p);
    zoo_terms();
    workspace_moment();
    return check_done();
}
