/* Hand-worked timelines for the simulator, checked event by event.
 *
 * The fixture: two stages of one op each (forward 1 s, backward 2 s per micro-batch), 1F1B,
 * boundary tensors of 1 GB over one NVLink of 2 GB/s (0.5 s), an optimizer step that touches
 * 0.2 GB at 0.8 GB/s HBM (0.25 s), PCIe links and switch uplinks of 1 GB/s. Every expected time
 * below is worked out by hand in the comment above its checks. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mpress/sim.h"

#define GB 1000000000ull

struct fixture {
    struct mpress_plan plan;
    struct mpress_op ops[2];
    struct mpress_saved_tensor tensors[2];
    struct mpress_plan_stage stages[2];
    struct mpress_plan_action actions[2];
};

static void fixture_init(struct fixture *f, int micro_batches, uint64_t tensor_bytes)
{
    memset(f, 0, sizeof(*f));
    struct mpress_plan *p = &f->plan;
    snprintf(p->policy, sizeof(p->policy), "test");
    snprintf(p->profile.model.name, sizeof(p->profile.model.name), "toy");
    p->profile.model.micro_batch = 1;
    p->profile.n_ops = 2;
    p->profile.ops = f->ops;
    for (int o = 0; o < 2; o++) {
        struct mpress_op *op = &f->ops[o];
        snprintf(op->name, sizeof(op->name), "op%d", o);
        snprintf(op->kind, sizeof(op->kind), "toy");
        op->fwd_s = 1;
        op->bwd_s = 2;
        op->fwd_flops = 1e12;
        op->param_bytes = GB / 10;
        op->grad_bytes = GB / 10;
        op->output_bytes = o == 0 ? GB : 0;
        op->n_tensors = 1;
        op->tensors = &f->tensors[o];
        snprintf(f->tensors[o].id, sizeof(f->tensors[o].id), "op%d.t", o);
        f->tensors[o].bytes = tensor_bytes;
        f->tensors[o].recompute_s = 0.5;
        f->tensors[o].recompute_op = o;
    }
    struct mpress_topology *t = &p->topology;
    snprintf(t->name, sizeof(t->name), "toy");
    t->n_gpus = 3;
    for (int g = 0; g < 3; g++) {
        t->gpus[g].memory_bytes = 10 * GB;
        t->gpus[g].reserve_bytes = GB / 2;
        t->gpus[g].hbm_bytes_per_s = 0.8e9;
        t->gpus[g].pcie_switch = 0;
    }
    t->fabric = MPRESS_FABRIC_DIRECT;
    t->nvlinks[0][1] = t->nvlinks[1][0] = 1;
    t->nvlinks[0][2] = t->nvlinks[2][0] = 1;
    t->nvlink_bytes_per_s = 2e9;
    t->pcie_bytes_per_s = 1e9;
    t->n_switches = 2;
    t->switches[0].uplink_bytes_per_s = 1e9;
    t->switches[1].uplink_bytes_per_s = 1e9;
    t->n_sockets = 1;
    t->host_memory_bytes = 100 * GB;
    t->host_memory_bytes_per_s = 1e10;
    p->schedule = MPRESS_SCHEDULE_1F1B;
    p->micro_batches = micro_batches;
    p->n_stages = 2;
    p->stages = f->stages;
    f->stages[0] = (struct mpress_plan_stage){0, 0, 0, 0};
    f->stages[1] = (struct mpress_plan_stage){1, 1, 1, 0};
    /* A plan names one action per saved tensor (mpress_plan_check): every tensor is kept
     * until add_action says otherwise. */
    p->actions = f->actions;
    p->n_actions = 2;
    for (int o = 0; o < 2; o++)
        f->actions[o] = (struct mpress_plan_action){.op = o, .tensor = 0,
                                                    .action = MPRESS_ACTION_KEEP,
                                                    .evict_after_op = -1,
                                                    .prefetch_before_op = -1};
}

/* Replaces the action of op's tensor (each op saves one: actions[op] is its action). */
static void add_action(struct fixture *f, int op, enum mpress_action act)
{
    struct mpress_plan_action *a = &f->actions[op];
    memset(a, 0, sizeof(*a));
    a->op = op;
    a->tensor = 0;
    a->action = act;
    a->evict_after_op = op;
    a->prefetch_before_op = op;
}

static const struct mpress_sim_task *find(const struct mpress_sim *s,
                                          enum mpress_sim_task_kind k, int stage, int it, int mb)
{
    const struct mpress_sim_task *t = mpress_sim_task_find(s, k, stage, it, mb, -1, -1);
    if (!t) {
        fprintf(stderr, "no %s task stage %d it %d mb %d\n", mpress_sim_task_kind_name(k),
                stage, it, mb);
        static const struct mpress_sim_task none = {.start_s = -99, .end_s = -99};
        return &none;
    }
    return t;
}

#define CHECK_SPAN(t, s, e)                                                                      \
    do {                                                                                         \
        const struct mpress_sim_task *t_ = (t);                                                  \
        CHECK_NEAR(t_->start_s, (s), 1e-9);                                                      \
        CHECK_NEAR(t_->end_s, (e), 1e-9);                                                        \
    } while (0)

static struct mpress_sim *run(struct fixture *f, int iterations)
{
    struct mpress_sim_options o;
    mpress_sim_options_init(&o);
    o.iterations = iterations;
    struct mpress_sim *s = NULL;
    struct mpress_error err;
    mpress_error_clear(&err);
    int rc = mpress_sim_run(&f->plan, &o, &s, &err);
    CHECK_MSG(rc == 0, "mpress_sim_run: %s", err.text);
    return s;
}

/* 2 stages x 2 micro-batches, nothing saved. Stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1:
 *   s0 F0 [0,1]  act0 [1,1.5]  s1 F0 [1.5,2.5]  s1 B0 [2.5,4.5]  grad0 [4.5,5]  s0 B0 [5,7]
 *   s0 F1 [1,2]  act1 [2.5,3]  s1 F1 [4.5,5.5]  s1 B1 [5.5,7.5]  grad1 [7.5,8]  s0 B1 [8,10]
 *   (act1 waits for s1 F0, which frees act0's receive buffer: one buffer per boundary and
 *   direction on the receiver); steps: s1 [7.5,7.75], s0 [10,10.25]; iteration 1 repeats
 *   shifted by 10.25 s.
 * Memory (reserve 0.5 + weights 0.1 + grads 0.1 = 0.7 GB at start):
 *   gpu0 peaks at t=1: 0.7 + F0's tensor 0.5 + send buffer 1 + F1's tensor 0.5 = 2.7 GB;
 *   gpu1 peaks at t=4.5: 0.7 + mb1's receive buffer (since 2.5) 1 + B0's gradient send buffer
 *   1 + F1's tensor 0.5 = 3.2 GB (before, the same at t=2, with mb0's and mb1's receive
 *   buffers both held).
 * Stalls (iteration 1): gpu0 waits 0.5 s for each gradient copy (B0 from head 2 to 5, copy
 * ready at 4.5; B1 from head 7, ready 7.5, arrives 8), gpu1 0.5 s for act0 (F0). */
static void test_no_saving(void)
{
    struct fixture f;
    fixture_init(&f, 2, GB / 2);
    struct mpress_sim *s = run(&f, 2);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 0, 0, 0), 0, 1);
    CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 0, 0, 1), 1, 2);
    CHECK_SPAN(find(s, MPRESS_SIM_SEND_ACT, 0, 0, 0), 1, 1.5);
    CHECK_SPAN(find(s, MPRESS_SIM_SEND_ACT, 0, 0, 1), 2.5, 3);
    CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 1, 0, 0), 1.5, 2.5);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 1, 0, 0), 2.5, 4.5);
    CHECK_SPAN(find(s, MPRESS_SIM_SEND_GRAD, 1, 0, 0), 4.5, 5);
    CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 1, 0, 1), 4.5, 5.5);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 1, 0, 1), 5.5, 7.5);
    CHECK_SPAN(find(s, MPRESS_SIM_SEND_GRAD, 1, 0, 1), 7.5, 8);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 0), 5, 7);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 1), 8, 10);
    CHECK_SPAN(find(s, MPRESS_SIM_OPTIMIZER, 1, 0, -1), 7.5, 7.75);
    CHECK_SPAN(find(s, MPRESS_SIM_OPTIMIZER, 0, 0, -1), 10, 10.25);
    CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 0, 1, 0), 10.25, 11.25);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 1, 1), 18.25, 20.25);
    const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
    CHECK_NEAR(S->iteration_s, 10.25, 1e-9);
    CHECK_NEAR(S->iteration_start_s, 10.25, 1e-9);
    CHECK_NEAR(S->samples_per_s, 2 / 10.25, 1e-9);
    /* 2 ops x 1 TFLOP forward x 3 x 2 micro-batches per iteration */
    CHECK_NEAR(S->model_tflops, 12.0 / 10.25, 1e-9);
    CHECK_INT(S->gpus[0].peak, 27 * GB / 10);
    CHECK_NEAR(S->gpus[0].peak_time_s, 1, 1e-12);
    CHECK_INT(S->gpus[1].peak, 32 * GB / 10);
    CHECK_NEAR(S->gpus[1].peak_time_s, 4.5, 1e-12);
    CHECK_INT(S->gpus[1].at_peak[MPRESS_SIM_MEM_BUFFERS], 2 * GB);
    CHECK_INT(S->gpus[1].at_peak[MPRESS_SIM_MEM_ACTIVATIONS], GB / 2);
    CHECK_INT(S->gpus[2].peak, GB / 2);                 /* the idle GPU: its reserve */
    CHECK(!S->out_of_memory);
    CHECK_INT(mpress_sim_memory_at(s, 0, 3.0), 17 * GB / 10);   /* 0.7 + two tensors */
    CHECK_INT(mpress_sim_memory_at(s, 0, 10.1), 7 * GB / 10);
    CHECK_NEAR(S->gpus[0].stall_boundary_s, 1.0, 1e-9);
    CHECK_NEAR(S->gpus[1].stall_boundary_s, 0.5, 1e-9);
    CHECK_NEAR(S->gpus[0].stall_swap_s, 0, 1e-12);
    CHECK_NEAR(S->gpus[0].busy_s, 6.25, 1e-9);
    /* the NVLink 0->1 carried two 1 GB activations in the reported iteration */
    int found = 0;
    for (int i = 0; i < S->n_links; i++)
        if (strcmp(S->links[i].name, "nvlink 0->1") == 0) {
            found = 1;
            CHECK_NEAR(S->links[i].bytes, 2e9, 1e-9);
            CHECK_NEAR(S->links[i].utilization, 2e9 / (2e9 * 10.25), 1e-9);
        }
    CHECK(found);
    mpress_sim_destroy(s);
}

/* The same with stage 0's tensor (0.5 GB) swapped to host: 0.5 s each way at 1 GB/s.
 *   evict mb0 [1,1.5] after F0; prefetch mb0 issued when the stream reaches B0's slot (F1
 *   ends at 2) -> [2,2.5], long before B0 at 5: it fits the overlap window, the timeline is
 *   unchanged. evict mb1 [2,2.5]; prefetch mb1 when B0 ends -> [7,7.5], before B1 at 8.
 * At t=3 gpu0 holds 0.7 + mb0 back (0.5) and not mb1 (on host): 1.2 GB instead of 1.7. */
static void test_host_swap_fits(void)
{
    struct fixture f;
    fixture_init(&f, 2, GB / 2);
    add_action(&f, 0, MPRESS_ACTION_HOST_SWAP);
    struct mpress_sim *s = run(&f, 2);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 0, 0, 0), 1, 1.5);
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 0), 2, 2.5);
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 0, 0, 1), 2, 2.5);
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 1), 7, 7.5);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 0), 5, 7);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 1), 8, 10);
    const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
    CHECK_NEAR(S->iteration_s, 10.25, 1e-9);
    CHECK_NEAR(S->gpus[0].stall_swap_s, 0, 1e-12);
    CHECK_INT(mpress_sim_memory_at(s, 0, 3.0), 12 * GB / 10);
    CHECK_INT(mpress_sim_memory_at(s, -1, 3.0), GB / 2);        /* mb1 on the host */
    CHECK_INT(mpress_sim_memory_at(s, -1, 1.25), GB / 2);       /* mb0 lands from the start */
    CHECK_INT(mpress_sim_memory_at(s, -1, 7.75), 0);
    CHECK_INT(S->host_peak, GB);                                /* both at once in [2,2.5) */
    CHECK(!S->host_out_of_memory);
    mpress_sim_destroy(s);
    /* with 0.9 GB of host memory the two parked micro-batches do not fit */
    f.plan.topology.host_memory_bytes = 9 * GB / 10;
    s = run(&f, 1);
    if (!s)
        return;
    S = mpress_sim_summary_get(s);
    CHECK(S->host_out_of_memory && !S->out_of_memory);
    char *txt = mpress_sim_oom_text(s);
    /* printed in GiB: 10^9 B = 0.931 GiB, 0.9 x 10^9 B = 0.838 GiB */
    CHECK(txt && strcmp(txt, "out of pinned host memory: peak 0.931 GiB of 0.838 GiB (host swaps "
                             "and host optimizer states)") == 0);
    free(txt);
    mpress_sim_destroy(s);
}

/* A 4 GB tensor takes 4 s each way: it does not fit.
 *   evict mb0 [1,5]; evict mb1 ready at 2 but the D2H engine is busy -> [5,9];
 *   prefetch mb0 waits for its eviction -> [5,9] (H2D, the other direction: full rate);
 *   B0 (gradient there at 5) waits for it -> [9,11]; prefetch mb1 issued when B0 ends and
 *   its eviction is done -> [11,15]; B1 [15,17]; step [17,17.25]: iteration 17.25 s.
 * Swap stall (iteration 1): B0 waits from 5 (prefetch ready) to 9, B1 from 11 to 15: 8 s. */
static void test_host_swap_does_not_fit(void)
{
    struct fixture f;
    fixture_init(&f, 2, 4 * GB);
    add_action(&f, 0, MPRESS_ACTION_HOST_SWAP);
    struct mpress_sim *s = run(&f, 2);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 0, 0, 0), 1, 5);
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 0, 0, 1), 5, 9);
    CHECK_NEAR(find(s, MPRESS_SIM_EVICT, 0, 0, 1)->ready_s, 2, 1e-12);
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 0), 5, 9);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 0), 9, 11);
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 1), 11, 15);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 1), 15, 17);
    CHECK_SPAN(find(s, MPRESS_SIM_OPTIMIZER, 0, 0, -1), 17, 17.25);
    CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 0, 1, 0), 17.25, 18.25);
    const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
    CHECK_NEAR(S->iteration_s, 17.25, 1e-9);
    CHECK_NEAR(S->gpus[0].stall_swap_s, 8, 1e-9);
    CHECK_NEAR(S->gpus[0].stall_boundary_s, 0, 1e-12);
    /* A tensor waiting for the D2H engine is still on the GPU (the backlog the planner's
     * memory model leaves out): at t=3, 0.7 + mb0 in flight 4 + mb1 queued 4 = 8.7 GB; at t=6,
     * 0.7 + mb0 coming back 4 + mb1 going out 4 + gradient buffer mb0 1 = 9.7 GB. */
    CHECK_INT(mpress_sim_memory_at(s, 0, 3.0), 87 * GB / 10);
    CHECK_INT(mpress_sim_memory_at(s, 0, 6.0), 97 * GB / 10);
    mpress_sim_destroy(s);
}

/* One micro-batch; both stages swap a 1.5 GB tensor to host; both GPUs sit behind switch 0
 * (uplink 1 GB/s, like each GPU's own PCIe link); boundary tensors are empty.
 *   s0 evict from 1: alone at 1 GB/s until s1's eviction starts at 2 (after s1 F0 [1,2]),
 *   then each gets half the uplink: s0 ends at 2 + 0.5/0.5 = 3; s1 has 1 GB left at 3 and
 *   runs alone -> 4. Prefetches mirror it downward: s0 [3,5] (alone until 4, then half),
 *   s1 [4,6]. s1 B0 [6,8], s0 B0 [8,10], s0 step [10,10.25].
 * Behind separate switches nobody shares: s0 evict [1,2.5], s1 evict [2,3.5]. */
static void test_shared_uplink(void)
{
    struct fixture f;
    fixture_init(&f, 1, 15 * GB / 10);
    f.ops[0].output_bytes = 0;
    add_action(&f, 0, MPRESS_ACTION_HOST_SWAP);
    add_action(&f, 1, MPRESS_ACTION_HOST_SWAP);
    struct mpress_sim *s = run(&f, 1);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 0, 0, 0), 1, 3);
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 1, 0, 0), 2, 4);
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 0), 3, 5);
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 1, 0, 0), 4, 6);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 1, 0, 0), 6, 8);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 0), 8, 10);
    const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
    CHECK_NEAR(S->iteration_s, 10.25, 1e-9);
    for (int i = 0; i < S->n_links; i++)
        if (strcmp(S->links[i].name, "switch0 uplink up") == 0)
            CHECK_NEAR(S->links[i].bytes, 3e9, 1e-9);
    mpress_sim_destroy(s);

    f.plan.topology.gpus[1].pcie_switch = 1;
    f.plan.topology.switches[1].uplink_bytes_per_s = 1e9;
    s = run(&f, 1);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 0, 0, 0), 1, 2.5);
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 1, 0, 0), 2, 3.5);
    mpress_sim_destroy(s);
}

/* Stage 0 parks its 1 GB tensor on idle gpu 2 over one 2 GB/s NVLink (0.5 s each way).
 *   evict mb0 [1,1.5], evict mb1 [2,2.5]; prefetch mb0 [2,2.5] (issued when F1 ends),
 *   prefetch mb1 [7,7.5] (issued when B0 ends).
 * gpu2 (reserve 0.5): 1.5 GB from t=1, 2.5 GB at t=2 (both micro-batches parked: mb0 leaves
 * only when its prefetch ends at 2.5), back to 1.5 at 2.5 and 0.5 at 7.5. Its peak is 2.5 GB
 * at t=2: 2 GB parked + reserve.
 * gpu0 at 1.25: 0.7 + mb0 in flight 1 + mb1 kept 1 + send buffer 1 = 3.7 GB; at 1.75 the
 * copies are done: 1.7 GB; at 3: mb0 back (working) 1 + 0.7 = 1.7 GB. */
static void test_d2d_park(void)
{
    struct fixture f;
    fixture_init(&f, 2, GB);
    add_action(&f, 0, MPRESS_ACTION_D2D_SWAP);
    f.actions[0].n_peers = 1;
    f.actions[0].peers[0] = 2;
    f.actions[0].peer_bytes[0] = GB;
    struct mpress_sim *s = run(&f, 2);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 0, 0, 0), 1, 1.5);
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 0, 0, 1), 2, 2.5);
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 0), 2, 2.5);
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 1), 7, 7.5);
    CHECK_INT(find(s, MPRESS_SIM_EVICT, 0, 0, 0)->dst, 2);
    CHECK_INT(mpress_sim_memory_at(s, 2, 1.25), 15 * GB / 10);
    CHECK_INT(mpress_sim_memory_at(s, 2, 2.25), 25 * GB / 10);
    CHECK_INT(mpress_sim_memory_at(s, 2, 3), 15 * GB / 10);
    CHECK_INT(mpress_sim_memory_at(s, 2, 8), GB / 2);
    CHECK_INT(mpress_sim_memory_at(s, 0, 1.25), 37 * GB / 10);
    CHECK_INT(mpress_sim_memory_at(s, 0, 1.75), 17 * GB / 10);
    CHECK_INT(mpress_sim_memory_at(s, 0, 3), 17 * GB / 10);
    const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
    const struct mpress_sim_gpu *g2 = &S->gpus[2];
    CHECK_INT(g2->peak, 25 * GB / 10);
    CHECK_NEAR(g2->peak_time_s, 2, 1e-12);
    CHECK_INT(g2->at_peak[MPRESS_SIM_MEM_PARKED], 2 * GB);
    CHECK_INT(g2->at_peak[MPRESS_SIM_MEM_RESERVE], GB / 2);
    CHECK_INT(g2->n_residents, 3);
    CHECK_INT(g2->residents[0].bytes, GB);
    CHECK_STR(g2->residents[0].label, "parked from gpu 0, iteration 0 micro-batch 0");
    CHECK_STR(g2->residents[1].label, "parked from gpu 0, iteration 0 micro-batch 1");
    CHECK_STR(g2->residents[2].label, "reserve");
    uint64_t sum = 0;
    for (int k = 0; k < MPRESS_SIM_MEM_KINDS; k++)
        sum += S->gpus[0].at_peak[k];
    CHECK_INT(sum, S->gpus[0].peak);
    CHECK_NEAR(S->iteration_s, 10.25, 1e-9);
    mpress_sim_destroy(s);
}

/* Two D2D shares to two peers move at once on separate NVLinks: 1 GB split 0.5/0.5 over
 * 0->1 and 0->2 (2 GB/s each) takes 0.25 s, not 0.5. The 0->1 share leaves on its own engine
 * (park), beside the boundary activation (1 GB from 1): the two share the 0->1 link, 1 GB/s
 * each, so the share takes [1,1.5] (and the activation [1,1.75]). */
static void test_d2d_striping(void)
{
    struct fixture f;
    fixture_init(&f, 2, GB);
    add_action(&f, 0, MPRESS_ACTION_D2D_SWAP);
    f.actions[0].n_peers = 2;
    f.actions[0].peers[0] = 2;
    f.actions[0].peer_bytes[0] = GB / 2;
    f.actions[0].peers[1] = 1;
    f.actions[0].peer_bytes[1] = GB / 2;
    struct mpress_sim *s = run(&f, 1);
    if (!s)
        return;
    const struct mpress_sim_task *e0 = mpress_sim_task_find(s, MPRESS_SIM_EVICT, 0, 0, 0, -1, -1);
    CHECK(e0 && e0->part == 0);
    if (e0)
        CHECK_SPAN(e0, 1, 1.25);
    int n = mpress_sim_task_count(s);
    for (int i = 0; i < n; i++) {
        const struct mpress_sim_task *t = mpress_sim_task_get(s, i);
        if (t->kind == MPRESS_SIM_EVICT && t->micro_batch == 0 && t->part == 1)
            CHECK_SPAN(t, 1, 1.5);
    }
    CHECK_SPAN(find(s, MPRESS_SIM_SEND_ACT, 0, 0, 0), 1, 1.75);
    mpress_sim_destroy(s);
}

/* Recompute: the tensor is dropped after forward and regenerated (0.5 s) right before its
 * backward, once the stage's backward pass has begun (its gradient arrived). Stage 0: the
 * gradient of mb0 arrives at 5 -> recompute [5,5.5], B0 [5.5,7.5]; mb1's at 8 -> recompute
 * [8,8.5], B1 [8.5,10.5]; step [10.5,10.75]: iteration 10.75 s. Hardware FLOPs add 0.5 s of
 * op0's 1 TFLOP/s forward for each of the 2 micro-batches. */
static void test_recompute(void)
{
    struct fixture f;
    fixture_init(&f, 2, GB / 2);
    add_action(&f, 0, MPRESS_ACTION_RECOMPUTE);
    struct mpress_sim *s = run(&f, 2);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_RECOMPUTE, 0, 0, 0), 5, 5.5);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 0), 5.5, 7.5);
    CHECK_SPAN(find(s, MPRESS_SIM_RECOMPUTE, 0, 0, 1), 8, 8.5);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 1), 8.5, 10.5);
    const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
    CHECK_NEAR(S->iteration_s, 10.75, 1e-9);
    CHECK_NEAR(S->hardware_tflops, (12.0 + 1.0) / 10.75, 1e-9);
    /* at t=3 nothing of stage 0's is kept: 0.7 GB */
    CHECK_INT(mpress_sim_memory_at(s, 0, 3), 7 * GB / 10);
    mpress_sim_destroy(s);
}

/* Kept activations at the peak, by schedule (DESIGN: 1F1B holds min(S-k, M) micro-batches on
 * stage k, GPipe M). Four micro-batches, boundary copies empty so buffers do not blur it. */
static void test_schedules_in_flight(void)
{
    enum mpress_schedule sch[] = {MPRESS_SCHEDULE_1F1B, MPRESS_SCHEDULE_GPIPE,
                                  MPRESS_SCHEDULE_ASYNC};
    int want0[] = {2, 4, 2}, want1[] = {1, 4, 1};
    for (int i = 0; i < 3; i++) {
        struct fixture f;
        fixture_init(&f, 4, GB / 2);
        f.ops[0].output_bytes = 0;
        f.plan.schedule = sch[i];
        struct mpress_sim *s = run(&f, 3);
        if (!s)
            continue;
        const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
        CHECK_INT(S->gpus[0].at_peak[MPRESS_SIM_MEM_ACTIVATIONS], want0[i] * GB / 2);
        CHECK_INT(S->gpus[1].at_peak[MPRESS_SIM_MEM_ACTIVATIONS], want1[i] * GB / 2);
        /* async stashes one weight version per micro-batch in flight: 2 on stage 0 */
        CHECK_INT(S->gpus[0].at_peak[MPRESS_SIM_MEM_WEIGHTS],
                  (sch[i] == MPRESS_SCHEDULE_ASYNC ? 2 : 1) * GB / 10);
        CHECK(S->iteration_s > 0);
        /* 1F1B and GPipe, zero-cost boundaries: 4 x (1 + 2) on stage 0, plus the
         * pipeline fill/drain of stage 1 (1 + 2) and the step (0.25) */
        if (sch[i] != MPRESS_SCHEDULE_ASYNC)
            CHECK_NEAR(S->iteration_s, 12 + 3 + 0.25, 1e-9);
        mpress_sim_destroy(s);
    }
}

/* Capacity 1.5 GB: at t=1 stage 0 reaches 0.7 + 0.5 + 1 (send buffer) and gpu 1 0.7 + 1 (recv
 * buffer): both run out at 1 s; gpu 0's event comes first, so it is named. */
/* An op that saves its input holds it once in its forward: the input is among the tensors its
 * workspace stands for (the gradients of its inputs and outputs) and a saved tensor charged
 * from the op's start. One stage on gpu 0, one micro-batch; op0 saves a tensor of its own
 * (0.5 GB), op1 saves its input (0.5 GB, regenerated by op0) and has a workspace of 1 GB.
 * States and reserve 0.9 GB; F0 [0,1], F1 [1,2], B1 [2,6], B0 [6,8]. During F1: 0.9 + 0.5 +
 * op1's saved input 0.5 + its workspace less that input 0.5 = 2.4 GB (2.9 before, the input
 * counted twice); the same tensor as op1's own product: 2.9. B1 holds the whole workspace
 * beside both tensors, 2.9, either way. */
static void test_saved_input_once(void)
{
    for (int own = 0; own < 2; own++) {
        struct fixture f;
        fixture_init(&f, 1, GB / 2);
        f.plan.n_stages = 1;
        f.stages[0] = (struct mpress_plan_stage){0, 1, 0, 0};
        f.ops[0].output_bytes = 0;
        f.ops[1].workspace_bytes = GB;
        f.tensors[1].recompute_op = own ? 1 : 0;
        struct mpress_sim *s = run(&f, 1);
        if (!s)
            return;
        CHECK_INT(mpress_sim_memory_at(s, 0, 1.5), (own ? 29 : 24) * GB / 10);
        CHECK_INT(mpress_sim_memory_at(s, 0, 3.0), 29 * GB / 10);
        CHECK_INT(mpress_sim_summary_get(s)->gpus[0].peak, 29 * GB / 10);
        mpress_sim_destroy(s);
    }
}

/* A swapped tensor brought back for an earlier slot than its op's (the planner does so for a
 * stage input's copy that a recompute reads, docs/schedule.md): one stage of op0 and op1, op0's
 * tensor host-swapped (0.5 GB at 1 GB/s) and due before op1's backward, op1's recomputed there.
 * 1F1B, lookahead 0: F0 [0,1], evict [1,1.5], F1 [1,2]; the prefetch is issued as F1 ends,
 * [2,2.5], and the recompute waits for it: [2.5,3] (it ran at [2,2.5] without the tensor before).
 * GPipe, lookahead 2: F0 F1 of both micro-batches [0,4]; micro-batch 0's prefetch, which the
 * lookahead issues as its F1 ends (2), waits until micro-batch 1's copy, the last forward's,
 * has left ([3,3.5], after that F0 [2,3]): [3.5,4]; R [4,4.5], B1 [4.5,6.5], B0 [6.5,8.5].
 * Micro-batch 1's prefetch, which the lookahead issues as R of micro-batch 0 ends (4.5), waits until B0 of micro-batch 0 has freed
 * that one's copy: [8.5,9], and its R [9,9.5] (two copies of the tensor stood on the GPU from
 * 5 to 8.5 before). D2D in two shares of 0.25 GB over NVLinks of 2 GB/s (1F1B): both come
 * back over [2,2.125] on their own engines, and the recompute runs [2.125,2.625]. */
static void test_prefetch_for_recompute(void)
{
    for (int variant = 0; variant < 3; variant++) { /* 1F1B host, GPipe host, 1F1B D2D */
        struct fixture f;
        fixture_init(&f, 2, GB / 2);
        f.plan.n_stages = 1;
        f.stages[0] = (struct mpress_plan_stage){0, 1, 0, 0};
        f.ops[0].output_bytes = 0;
        add_action(&f, 0, variant == 2 ? MPRESS_ACTION_D2D_SWAP : MPRESS_ACTION_HOST_SWAP);
        if (variant == 2) { /* D2D in two shares: both land before the recompute */
            f.actions[0].n_peers = 2;
            f.actions[0].peers[0] = 1;
            f.actions[0].peers[1] = 2;
            f.actions[0].peer_bytes[0] = f.actions[0].peer_bytes[1] = GB / 4;
        }
        add_action(&f, 1, MPRESS_ACTION_RECOMPUTE);
        f.actions[0].prefetch_before_op = 1;
        if (variant == 1) {
            f.plan.schedule = MPRESS_SCHEDULE_GPIPE;
            f.plan.prefetch_lookahead = 2;
        }
        struct mpress_sim *s = run(&f, 1);
        if (!s)
            return;
        if (variant == 0) {
            CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 0), 2, 2.5);
            CHECK_SPAN(find(s, MPRESS_SIM_RECOMPUTE, 0, 0, 0), 2.5, 3);
        } else if (variant == 2) {
            CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 0), 2, 2.125);
            CHECK_SPAN(find(s, MPRESS_SIM_RECOMPUTE, 0, 0, 0), 2.125, 2.625);
        } else {
            CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 0), 3.5, 4);
            CHECK_SPAN(find(s, MPRESS_SIM_RECOMPUTE, 0, 0, 0), 4, 4.5);
            CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 1), 8.5, 9);
            CHECK_SPAN(find(s, MPRESS_SIM_RECOMPUTE, 0, 0, 1), 9, 9.5);
        }
        mpress_sim_destroy(s);
    }
}

/* GPipe, one stage (ops 0 and 1 on gpu 0), two micro-batches of 1 GB tensors: op 0's
 * recomputed before op 1's backward (its slot begins with that recompute), op 1's swapped to
 * the host (1 s a copy at 1e9 bytes/s), lookahead 2 (the planner's n + r - 1). The stream:
 * F0(0) [0,1] F0(1) [1,2] F1(0) [2,3] F1(1) [3,4], R0 [4,4.5]; evict mb0 [2,3], mb1 [4,5];
 * prefetch mb0 waits for mb1's eviction (the GPipe edge): [5,6]; B0(1) [6,8], B0(0) [8,10],
 * R1 [10,10.5]. The lookahead counted back from mb1's slot (R1) lands on R0, one task before
 * B0(1): mb1's prefetch was issued at 4.5, took the engine when mb1's eviction ended ([5,6],
 * mb0's then [6,7], B0(1) [7,9]) and stood beside mb0's copy: 0.9 GB of states and reserve +
 * mb0's recomputed tensor + both copies = 3.9 GB, where the cost model counts one
 * micro-batch's. It now waits for B0(1): [8,9], and the peak is 2.9 GB. */
static void test_prefetch_after_previous_backward(void)
{
    struct fixture f;
    fixture_init(&f, 2, GB);
    f.plan.n_stages = 1;
    f.stages[0] = (struct mpress_plan_stage){0, 1, 0, 0};
    f.ops[0].output_bytes = 0;
    f.plan.schedule = MPRESS_SCHEDULE_GPIPE;
    f.plan.prefetch_lookahead = 2;
    add_action(&f, 0, MPRESS_ACTION_RECOMPUTE);
    f.actions[0].prefetch_before_op = 1;
    add_action(&f, 1, MPRESS_ACTION_HOST_SWAP);
    struct mpress_sim *s = run(&f, 1);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 0), 5, 6);
    const struct mpress_sim_task *b01 =
        mpress_sim_task_find(s, MPRESS_SIM_BACKWARD, 0, 0, 0, 1, -1);
    CHECK(b01 != NULL);
    if (b01)
        CHECK_SPAN(b01, 6, 8);
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 1), 8, 9);
    CHECK_INT(mpress_sim_summary_get(s)->gpus[0].peak, 29 * GB / 10);
    mpress_sim_destroy(s);
}

/* GPipe with a slower receiver: a sender a whole pass ahead must not pile up send buffers.
 * Four micro-batches, tensors kept (0.5 GB each), states and reserve 0.7 GB.
 * Forward (stage 1's op takes 3 s): s0 F0 [0,1] F1 [1,2] F2 [2,3]; each copy waits for the
 * receiver's previous consumer: act0 [1,1.5], s1 F0 [1.5,4.5], act1 [4.5,5], s1 F1 [5,8], act2
 * [8,8.5], s1 F2 [8.5,11.5], act3 [11.5,12], s1 F3 [12,15]. s0 F3 waits until act1 has left:
 * [5,6] (it ran [3,4] before, and gpu 0 then held buffers 1, 2 and 3 at t=4: 0.7 + 4 x 0.5 + 3
 * = 5.7 GB). Now gpu 0 peaks when F3 ends, at 6: 0.7 + 2 + buffers 2 and 3 = 4.7 GB, the cost
 * model's 2 (X_(k-1) + X_k) of buffers. Backward: s1 B0 [15,17], B1 [17,19], B2 [19,21], B3
 * [21,23]; grad0 [17,17.5], s0 B0 [17.5,19.5], grad1 [19.5,20], s0 B1 [20,22], grad2 [22,22.5],
 * s0 B2 [22.5,24.5], grad3 [24.5,25], s0 B3 [25,27], step [27,27.25]: the same 27.25 s either way.
 * Backward (stage 0's op takes 6 s, stage 1's forward 1 s): forwards [0,4] on s0, s1 F3
 * [6,7]; s1 B0 [7,9], grad0 [9,9.5], s1 B1 [9,11], s0 B0 [9.5,15.5], grad1 [15.5,16], s1 B2
 * [11,13]; s1 B3 waits until grad1 has left: [16,18] (before [13,15], and gpu 1 held gradient
 * buffers 1, 2 and 3 at t=15.5: 0.7 + 3 = 3.7 GB); now at 15.5 it holds B3's tensor and buffers 1
 * and 2: 3.2 GB. s0 B1 [16,22], grad2 [22,22.5], s0 B2 [22.5,28.5], grad3 [28.5,29], s0 B3
 * [29,35], step [35,35.25]. */
static void test_gpipe_send_buffers(void)
{
    for (int slow_bwd = 0; slow_bwd < 2; slow_bwd++) {
        struct fixture f;
        fixture_init(&f, 4, GB / 2);
        f.plan.schedule = MPRESS_SCHEDULE_GPIPE;
        if (slow_bwd)
            f.ops[0].bwd_s = 6;
        else
            f.ops[1].fwd_s = 3;
        struct mpress_sim *s = run(&f, 1);
        if (!s)
            return;
        const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
        if (!slow_bwd) {
            CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 0, 0, 2), 2, 3);
            CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 0, 0, 3), 5, 6);
            CHECK_SPAN(find(s, MPRESS_SIM_SEND_ACT, 0, 0, 3), 11.5, 12);
            CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 1, 0, 3), 12, 15);
            CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 3), 25, 27);
            CHECK_INT(S->gpus[0].peak, 47 * GB / 10);
            CHECK_NEAR(S->gpus[0].peak_time_s, 6, 1e-12);
            CHECK_INT(S->gpus[0].at_peak[MPRESS_SIM_MEM_BUFFERS], 2 * GB);
            CHECK_INT(mpress_sim_memory_at(s, 0, 4.5), 42 * GB / 10);
            CHECK_NEAR(S->iteration_s, 27.25, 1e-9);
        } else {
            CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 1, 0, 2), 11, 13);
            CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 1, 0, 3), 16, 18);
            CHECK_SPAN(find(s, MPRESS_SIM_SEND_GRAD, 1, 0, 3), 28.5, 29);
            CHECK_SPAN(find(s, MPRESS_SIM_OPTIMIZER, 1, 0, -1), 18, 18.25);
            CHECK_INT(mpress_sim_memory_at(s, 1, 15.5), 32 * GB / 10);
            CHECK_NEAR(S->iteration_s, 35.25, 1e-9);
        }
        mpress_sim_destroy(s);
    }
}

/* 1F1B with a slower second stage: stage 0 runs S = 4 forwards before its first backward, and
 * without a bound its send buffers piled up as under GPipe. Four stages of one op each (gpus
 * 0-3, one NVLink per neighbour pair; op1's forward 3 s, the others 1 s; backward 2 s;
 * tensors 0.5 GB, kept; boundaries 1 GB, 0.5 s), four micro-batches. Forwards of micro-batch
 * 0: s0 [0,1], act [1,1.5], s1 [1.5,4.5], act [4.5,5], s2 [5,6], act [6,6.5], s3 [6.5,7.5];
 * s3 B0 [7.5,9.5], grad [9.5,10]. Micro-batch 1: s0 [1,2], act (after s1's F0) [4.5,5], s1
 * [5,8], act [8,8.5], s2 [8.5,9.5], act [9.5,10]; s2 B0 [10,12], grad [12,12.5]. Micro-batch
 * 2: s0 [2,3], act (after s1's F1) [8,8.5], s1 [8.5,11.5]; s1 B0 [12.5,14.5], grad [14.5,15];
 * s0 B0 [15,17]. Stage 0's F3 waits until micro-batch 1's copy has left: [5,6] (before [3,4],
 * gpu 0 then holding send buffers 1, 2 and 3 at t=4.5: 0.7 + 4 x 0.5 + 3 = 5.7 GB; now 0.7 +
 * 3 x 0.5 + buffers 1 and 2 = 4.2 GB), and gpu 0 peaks when F3 ends: 0.7 + 2 + 2 = 4.7 GB,
 * the cost model's 2 (X_(k-1) + X_k). Its first backward starts at 15 either way. */
static void test_1f1b_send_buffers(void)
{
    struct mpress_plan p;
    struct mpress_op ops[4];
    struct mpress_saved_tensor ts[4];
    struct mpress_plan_stage st[4];
    struct mpress_plan_action ac[4];
    struct fixture f;
    fixture_init(&f, 4, GB / 2);
    p = f.plan;
    p.profile.n_ops = 4;
    p.profile.ops = ops;
    p.n_stages = 4;
    p.stages = st;
    p.n_actions = 4;
    p.actions = ac;
    for (int o = 0; o < 4; o++) {
        ops[o] = f.ops[0];
        snprintf(ops[o].name, sizeof(ops[o].name), "op%d", o);
        ops[o].fwd_s = o == 1 ? 3 : 1;
        ops[o].output_bytes = o < 3 ? GB : 0;
        ops[o].tensors = &ts[o];
        ts[o] = f.tensors[0];
        snprintf(ts[o].id, sizeof(ts[o].id), "op%d.t", o);
        ts[o].recompute_op = o;
        st[o] = (struct mpress_plan_stage){o, o, o, 0};
        ac[o] = (struct mpress_plan_action){.op = o, .tensor = 0, .action = MPRESS_ACTION_KEEP,
                                             .evict_after_op = -1, .prefetch_before_op = -1};
    }
    struct mpress_topology *t = &p.topology;
    t->n_gpus = 4;
    t->gpus[3] = t->gpus[0];
    memset(t->nvlinks, 0, sizeof(t->nvlinks));
    for (int g = 0; g + 1 < 4; g++)
        t->nvlinks[g][g + 1] = t->nvlinks[g + 1][g] = 1;
    f.plan = p;
    struct mpress_sim *s = run(&f, 1);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 1, 0, 2), 8.5, 11.5);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 2, 0, 0), 10, 12);
    CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 0, 0, 3), 5, 6);
    CHECK_SPAN(find(s, MPRESS_SIM_SEND_ACT, 0, 0, 3), 11.5, 12);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 0), 15, 17);
    CHECK_INT(mpress_sim_memory_at(s, 0, 4.5), 42 * GB / 10);
    const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
    CHECK_INT(S->gpus[0].peak, 47 * GB / 10);
    CHECK_NEAR(S->gpus[0].peak_time_s, 6, 1e-12);
    CHECK_INT(S->gpus[0].at_peak[MPRESS_SIM_MEM_BUFFERS], 2 * GB);
    mpress_sim_destroy(s);
}

static void test_out_of_memory(void)
{
    struct fixture f;
    fixture_init(&f, 2, GB / 2);
    for (int g = 0; g < 3; g++)
        f.plan.topology.gpus[g].memory_bytes = 15 * GB / 10;
    struct mpress_sim *s = run(&f, 1);
    if (!s)
        return;
    const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
    CHECK(S->out_of_memory);
    CHECK_INT(S->oom_gpu, 0);
    CHECK_NEAR(S->gpus[0].oom_time_s, 1, 1e-12);
    CHECK_NEAR(S->gpus[1].oom_time_s, 1, 1e-12);
    char *txt = mpress_sim_oom_text(s);
    CHECK(txt && strstr(txt, "out of memory on gpu 0 at 1.000000 s"));
    CHECK(txt && strstr(txt, "buffers, iteration 0 micro-batch 0 0.931 GiB")); /* 10^9 B */
    free(txt);
    mpress_sim_destroy(s);
}

/* Plans the simulator must refuse, with a reason. */
static void test_rejects(void)
{
    struct fixture f;
    struct mpress_sim *s = NULL;
    struct mpress_error err;
    fixture_init(&f, 2, GB);
    f.stages[1].gpu = 0;
    CHECK_INT(mpress_sim_run(&f.plan, NULL, &s, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "GPU 0 already runs stages[0]") != NULL);
    CHECK(strcmp(err.path, "stages[1].gpu") == 0);
    fixture_init(&f, 2, GB);
    add_action(&f, 0, MPRESS_ACTION_D2D_SWAP);
    f.actions[0].n_peers = 1;
    f.actions[0].peers[0] = 2;
    f.actions[0].peer_bytes[0] = GB - 1;
    CHECK_INT(mpress_sim_run(&f.plan, NULL, &s, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "peer bytes sum to 999999999, not the tensor's 1000000000") != NULL);
    CHECK(strcmp(err.path, "actions[0].peers") == 0);
    /* gpus 1 and 2 have no NVLink between them: stage 1 (gpu 1) may not park on gpu 2 */
    fixture_init(&f, 2, GB);
    add_action(&f, 1, MPRESS_ACTION_D2D_SWAP);
    f.actions[1].n_peers = 1;
    f.actions[1].peers[0] = 2;
    f.actions[1].peer_bytes[0] = GB;
    CHECK_INT(mpress_sim_run(&f.plan, NULL, &s, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "GPU 2 has no NVLink to GPU 1") != NULL);
    CHECK(strcmp(err.path, "actions[1].peers[0].gpu") == 0);
    /* a plan that leaves a saved tensor without an action */
    fixture_init(&f, 2, GB);
    f.plan.n_actions = 1;
    CHECK_INT(mpress_sim_run(&f.plan, NULL, &s, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "no action for tensor \"op1.t\"") != NULL);
    /* beyond the plan rules, lowering needs a lookahead it can count back from */
    fixture_init(&f, 2, GB);
    f.plan.prefetch_lookahead = -1;
    CHECK_INT(mpress_sim_run(&f.plan, NULL, &s, &err), MPRESS_EINPUT);
    CHECK(strcmp(err.path, "prefetch_lookahead") == 0);
    fixture_init(&f, 2, GB);
    add_action(&f, 0, MPRESS_ACTION_HOST_SWAP);
    f.plan.topology.pcie_bytes_per_s = 0;
    CHECK_INT(mpress_sim_run(&f.plan, NULL, &s, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "pcie gpu0 up") != NULL);
    CHECK(s == NULL);
}


/* The D2D share that the plan loader and the evaluator refuse (GPU 4 -> GPU 1 on dgx1, no
 * NVLink between them) is refused by the simulator too, handed the plan directly, with the
 * same message and JSON path; GPU 4 -> GPU 5 (an NVLink peer) lowers. */
static void test_rejects_d2d_no_nvlink(void)
{
    const char *src = getenv("MPRESS_SRCDIR");
    char file[4096];
    snprintf(file, sizeof(file), "%s/plans/gpt3-6.7b.dgx1.json", src ? src : ".");
    struct mpress_plan plan;
    struct mpress_error err;
    mpress_error_clear(&err);
    mpress_plan_init(&plan);
    CHECK_MSG(mpress_plan_load(file, &plan, &err) == 0, "%s", err.text);
    if (err.code) {
        mpress_plan_finish(&plan);
        return;
    }
    int k = 0, j = 0;
    while (k < plan.n_stages && plan.stages[k].gpu != 4)
        k++;
    CHECK(k < plan.n_stages);
    if (k == plan.n_stages) {
        mpress_plan_finish(&plan);
        return;
    }
    while (plan.actions[j].op < plan.stages[k].first_op)
        j++;
    struct mpress_plan_action *a = &plan.actions[j];
    a->action = MPRESS_ACTION_D2D_SWAP;
    a->n_peers = 1;
    a->peers[0] = 1;
    a->peer_bytes[0] = plan.profile.ops[a->op].tensors[a->tensor].bytes;
    a->evict_after_op = a->prefetch_before_op = a->op;
    struct mpress_sim_options o;
    mpress_sim_options_init(&o);
    o.iterations = 1;
    struct mpress_sim *s = NULL;
    CHECK_INT(mpress_sim_run(&plan, &o, &s, &err), MPRESS_EINPUT);
    CHECK(s == NULL);
    char want[64];
    snprintf(want, sizeof(want), "actions[%d].peers[0].gpu", j);
    CHECK(strcmp(err.path, want) == 0);
    CHECK(strstr(err.text, "GPU 1 has no NVLink to GPU 4, which runs the tensor's stage") !=
          NULL);
    a->peers[0] = 5;
    mpress_error_clear(&err);
    CHECK_MSG(mpress_sim_run(&plan, &o, &s, &err) == 0, "%s", err.text);
    mpress_sim_destroy(s);
    mpress_plan_finish(&plan);
}

/* NVSwitch: any pair runs at full rate but a GPU's ports are shared by everything it sends.
 * One port of 2 GB/s per GPU; stage 0 parks a 1 GB tensor as two 0.5 GB shares on gpus 2 and 1.
 *   At 1: activation mb0 (1 GB, engine 0->1) and the two shares (each on its own park engine)
 *   share gpu0's out port, 2/3 GB/s each: both shares end at 1.75; the activation has 0.5 GB
 *   left, alone at 2 GB/s -> 2.0. */
static void test_nvswitch_ports(void)
{
    struct fixture f;
    fixture_init(&f, 2, GB);
    struct mpress_topology *t = &f.plan.topology;
    t->fabric = MPRESS_FABRIC_NVSWITCH;
    for (int a = 0; a < 3; a++) {
        t->gpus[a].nvlink_ports = 1;
        for (int b = 0; b < 3; b++)
            t->nvlinks[a][b] = a == b ? 0 : 1;
    }
    add_action(&f, 0, MPRESS_ACTION_D2D_SWAP);
    f.actions[0].n_peers = 2;
    f.actions[0].peers[0] = 2;
    f.actions[0].peer_bytes[0] = GB / 2;
    f.actions[0].peers[1] = 1;
    f.actions[0].peer_bytes[1] = GB / 2;
    struct mpress_sim *s = run(&f, 1);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_SEND_ACT, 0, 0, 0), 1, 2.0);
    int n = mpress_sim_task_count(s), seen = 0;
    for (int i = 0; i < n; i++) {
        const struct mpress_sim_task *e = mpress_sim_task_get(s, i);
        if (e->kind != MPRESS_SIM_EVICT || e->micro_batch != 0)
            continue;
        seen++;
        CHECK_SPAN(e, 1, 1.75);
    }
    CHECK_INT(seen, 2);
    mpress_sim_destroy(s);
}

/* Without NVLink the boundary goes PCIe peer-to-peer; across sockets it crosses both switch
 * uplinks and the socket link, the slowest of which (0.5 GB/s) sets the rate: 1 GB in 2 s.
 *   s0 F0 [0,1], activation [1,3], s1 F0 [3,4]. */
static void test_cross_socket_boundary(void)
{
    struct fixture f;
    fixture_init(&f, 1, GB / 2);
    struct mpress_topology *t = &f.plan.topology;
    t->nvlinks[0][1] = t->nvlinks[1][0] = 0;
    t->gpus[1].pcie_switch = 1;
    t->gpus[1].socket = 1;
    t->switches[1].socket = 1;
    t->n_sockets = 2;
    t->socket_link_bytes_per_s = 0.5e9;
    struct mpress_sim *s = run(&f, 1);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_SEND_ACT, 0, 0, 0), 1, 3);
    CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 1, 0, 0), 3, 4);
    const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
    int found = 0;
    for (int i = 0; i < S->n_links; i++)
        if (strcmp(S->links[i].name, "socket link 0->1") == 0 ||
            strcmp(S->links[i].name, "switch0 uplink up") == 0 ||
            strcmp(S->links[i].name, "switch1 uplink down") == 0) {
            found++;
            CHECK_NEAR(S->links[i].bytes, 1e9, 1e-9);
        }
    CHECK_INT(found, 3);
    mpress_sim_destroy(s);
}

/* Stage 1 steps on the CPU: its 0.1 GB of gradients go down at 1 GB/s (0.1 s), the CPU step
 * touches grad + 2 x optim + param = 0.2 GB at 10 GB/s (0.02 s), the 0.1 GB of weights come
 * back (0.1 s): after B1 ends at 7.5, [7.5,7.6], [7.6,7.62], [7.62,7.72]. The next iteration's
 * F0 on stage 1 also needs activation 0 (11.75), so the iteration stays 10.25 s. Host memory
 * holds the stage's gradient landing zone (0.1 GB; its optimizer states are 0 here). */
static void test_host_optimizer(void)
{
    struct fixture f;
    fixture_init(&f, 2, GB / 2);
    f.stages[1].optimizer_on_host = 1;
    struct mpress_sim *s = run(&f, 2);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_GRAD_D2H, 1, 0, -1), 7.5, 7.6);
    CHECK_SPAN(find(s, MPRESS_SIM_OPTIMIZER, 1, 0, -1), 7.6, 7.62);
    CHECK_SPAN(find(s, MPRESS_SIM_WEIGHTS_H2D, 1, 0, -1), 7.62, 7.72);
    CHECK_INT(find(s, MPRESS_SIM_OPTIMIZER, 1, 0, -1)->src, -1);
    const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
    CHECK_NEAR(S->iteration_s, 10.25, 1e-9);
    CHECK_INT(S->host_peak, GB / 10);
    CHECK_INT(mpress_sim_memory_at(s, 1, 0), 7 * GB / 10);
    mpress_sim_destroy(s);
}

/* --wait-for-memory: 4 GB host swap on stage 0, empty boundary tensors, 8 GB of capacity.
 *   At t=1 F1 wants 4 GB while gpu 0 holds 0.7 + mb0 in flight 4: 8.7 > 8, and mb0's eviction
 *   is pending, so F1 waits for it to end at 5: F1 [5,6]. Evict mb1 [6,10]. Prefetch mb0
 *   (issued when F1 ends) would make 8.7 GB while mb1's eviction is pending: the H2D engine
 *   waits until 10: [10,14]; B0 [14,16]; prefetch mb1 [16,20]; B1 [20,22]; step [22,22.25].
 *   Stage 1 (no swaps): F0 [1,2], B0 [2,4], F1 [6,7], B1 [7,9]. Iteration 22.25 s; F1 held
 *   4 s for memory (the held prefetch shows up as B0's swap stall); peak 4.7 GB. */
static void test_wait_for_memory(void)
{
    struct fixture f;
    fixture_init(&f, 2, 4 * GB);
    f.ops[0].output_bytes = 0;
    for (int g = 0; g < 3; g++)
        f.plan.topology.gpus[g].memory_bytes = 8 * GB;
    add_action(&f, 0, MPRESS_ACTION_HOST_SWAP);
    struct mpress_sim_options o;
    mpress_sim_options_init(&o);
    o.iterations = 2;
    o.wait_for_memory = 1;
    struct mpress_sim *s = NULL;
    struct mpress_error err;
    CHECK_INT(mpress_sim_run(&f.plan, &o, &s, &err), 0);
    if (!s)
        return;
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 0, 0, 0), 1, 5);
    CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 0, 0, 1), 5, 6);
    CHECK_SPAN(find(s, MPRESS_SIM_EVICT, 0, 0, 1), 6, 10);
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 0), 10, 14);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 0), 14, 16);
    CHECK_SPAN(find(s, MPRESS_SIM_PREFETCH, 0, 0, 1), 16, 20);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 0, 0, 1), 20, 22);
    CHECK_SPAN(find(s, MPRESS_SIM_FORWARD, 1, 0, 1), 6, 7);
    CHECK_SPAN(find(s, MPRESS_SIM_BACKWARD, 1, 0, 1), 7, 9);
    const struct mpress_sim_summary *S = mpress_sim_summary_get(s);
    CHECK_NEAR(S->iteration_s, 22.25, 1e-9);
    CHECK_NEAR(S->gpus[0].stall_memory_s, 4, 1e-9);
    CHECK_INT(S->gpus[0].peak, 47 * GB / 10);
    CHECK(!S->out_of_memory);
    mpress_sim_destroy(s);
    /* without it, the same plan runs out of memory when F1 starts at t=1 */
    o.wait_for_memory = 0;
    CHECK_INT(mpress_sim_run(&f.plan, &o, &s, &err), 0);
    if (!s)
        return;
    CHECK(mpress_sim_summary_get(s)->out_of_memory);
    CHECK_NEAR(mpress_sim_summary_get(s)->gpus[0].oom_time_s, 1, 1e-12);
    mpress_sim_destroy(s);
}

/* Invariants over many random plans (seeded, so the run is reproducible): the replay finishes,
 * no two tasks overlap on one compute stream, no task starts before it is ready, every byte
 * allocated is freed by the end (each GPU returns to model states + reserve, the host to 0), and
 * the steady-state iteration is no shorter than the busiest stage's compute. */
static unsigned rng_state = 12345u;
static unsigned rng(void)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return (rng_state >> 16) & 0x7fff;
}

static void test_random_invariants(void)
{
    enum { OPS = 12, GPUS = 4 };
    static struct mpress_op ops[OPS];
    static struct mpress_saved_tensor tens[OPS][3];
    double held = 0;
    for (int trial = 0; trial < 60; trial++) {
        struct mpress_plan p;
        struct mpress_plan_stage stages[GPUS];
        static struct mpress_plan_action acts[OPS * 3];
        memset(&p, 0, sizeof(p));
        memset(ops, 0, sizeof(ops));
        int S = 1 + (int)(rng() % GPUS), M = 1 + (int)(rng() % 6);
        struct mpress_topology *t = &p.topology;
        t->n_gpus = GPUS;
        for (int g = 0; g < GPUS; g++) {
            /* every fourth trial is tight and waits for memory: it must still finish */
            t->gpus[g].memory_bytes = trial % 4 == 0 ? GB / 2 : 100 * GB;
            t->gpus[g].reserve_bytes = GB / 4;
            t->gpus[g].hbm_bytes_per_s = 1e12;
            t->gpus[g].pcie_switch = g / 2;
            t->gpus[g].socket = g / 2;
            t->gpus[g].nvlink_ports = 6;
        }
        t->fabric = trial % 2 ? MPRESS_FABRIC_NVSWITCH : MPRESS_FABRIC_DIRECT;
        for (int a = 0; a < GPUS; a++)
            for (int b = 0; b < GPUS; b++)
                t->nvlinks[a][b] = a == b ? 0 : t->fabric ? 6 : (a + b) % 3;
        t->nvlink_bytes_per_s = 25e9;
        t->pcie_bytes_per_s = 12e9;
        t->n_switches = 2;
        t->switches[0] = (struct mpress_topo_switch){12e9, 0};
        t->switches[1] = (struct mpress_topo_switch){12e9, 1};
        t->n_sockets = 2;
        t->socket_link_bytes_per_s = 20e9;
        t->host_memory_bytes = 1000 * GB;
        t->host_memory_bytes_per_s = 1e11;
        p.profile.model.micro_batch = 1;
        p.profile.n_ops = OPS;
        p.profile.ops = ops;
        int na = 0;
        for (int o = 0; o < OPS; o++) {
            ops[o].fwd_s = 0.001 * (1 + rng() % 9);
            ops[o].bwd_s = 2 * ops[o].fwd_s;
            ops[o].fwd_flops = 1e9;
            ops[o].param_bytes = ops[o].grad_bytes = 1000000 * (1 + rng() % 5);
            ops[o].optim_bytes = 6 * ops[o].param_bytes;
            ops[o].workspace_bytes = 100000 * (rng() % 3);
            ops[o].output_bytes = 1000000 * (rng() % 20);
            ops[o].n_tensors = 1 + (int)(rng() % 3);
            ops[o].tensors = tens[o];
            snprintf(ops[o].name, sizeof(ops[o].name), "op%d", o);
            for (int j = 0; j < ops[o].n_tensors; j++) {
                snprintf(tens[o][j].id, sizeof(tens[o][j].id), "op%d.t%d", o, j);
                tens[o][j].bytes = 1000000 * (1 + rng() % 50);
                tens[o][j].recompute_s = 0.0005;
                tens[o][j].recompute_op = o;
            }
        }
        for (int k = 0; k < S; k++)
            stages[k] = (struct mpress_plan_stage){OPS * k / S, OPS * (k + 1) / S - 1,
                                                   (k + trial) % GPUS, (int)(rng() % 4 == 0)};
        for (int o = 0; o < OPS; o++) {
            int k = 0;
            while (o > stages[k].last_op)
                k++;
            for (int j = 0; j < ops[o].n_tensors; j++) {
                struct mpress_plan_action *a = &acts[na++];
                memset(a, 0, sizeof(*a));
                a->op = o;
                a->tensor = j;
                a->action = (enum mpress_action)(rng() % 4);
                if (a->action == MPRESS_ACTION_D2D_SWAP && S == 1 && GPUS < 2)
                    a->action = MPRESS_ACTION_KEEP;
                a->evict_after_op = a->prefetch_before_op = -1;
                if (a->action == MPRESS_ACTION_KEEP)
                    continue;
                a->evict_after_op = o + (int)(rng() % (stages[k].last_op - o + 1));
                a->prefetch_before_op = o + (int)(rng() % (stages[k].last_op - o + 1));
                if (a->action == MPRESS_ACTION_D2D_SWAP) {
                    /* shares go to the first NVLink peers after g (D2D only goes over
                     * NVLink: mpress_plan_check); every GPU here has at least two */
                    int g = stages[k].gpu;
                    a->n_peers = 1 + (int)(rng() % 2);
                    int np = 0;
                    for (int d = 1; d < GPUS && np < a->n_peers; d++)
                        if (t->nvlinks[g][(g + d) % GPUS] > 0)
                            a->peers[np++] = (g + d) % GPUS;
                    CHECK_INT(np, a->n_peers);
                    uint64_t b = tens[o][j].bytes;
                    a->peer_bytes[0] = a->n_peers == 2 ? b / 3 : b;
                    a->peer_bytes[1] = b - b / 3;
                }
            }
        }
        p.schedule = (enum mpress_schedule)(trial % 3);
        p.micro_batches = M;
        p.prefetch_lookahead = (int)(rng() % 4);
        p.n_stages = S;
        p.stages = stages;
        p.n_actions = na;
        p.actions = acts;
        struct mpress_sim_options o;
        mpress_sim_options_init(&o);
        o.iterations = 2;
        o.wait_for_memory = trial % 4 == 0;
        struct mpress_sim *s = NULL;
        struct mpress_error err;
        mpress_error_clear(&err);
        int rc = mpress_sim_run(&p, &o, &s, &err);
        CHECK_MSG(rc == 0, "trial %d: %s", trial, err.text);
        if (rc)
            continue;
        const struct mpress_sim_summary *R = mpress_sim_summary_get(s);
        for (int g = 0; g < GPUS; g++)
            held += R->gpus[g].stall_memory_s;
        int n = mpress_sim_task_count(s);
        double last_end[GPUS] = {0};
        int order_ok = 1, ready_ok = 1;
        for (int i = 0; i < n; i++) {
            const struct mpress_sim_task *T = mpress_sim_task_get(s, i);
            ready_ok &= T->start_s >= T->ready_s - 1e-12 && T->end_s >= T->start_s;
        }
        /* compute tasks of a stage are laid out in stream order: each starts after the last */
        for (int i = 0; i < n; i++) {
            const struct mpress_sim_task *T = mpress_sim_task_get(s, i);
            if (T->kind > MPRESS_SIM_OPTIMIZER || T->src < 0)
                continue;
            if (T->kind == MPRESS_SIM_OPTIMIZER && stages[T->stage].optimizer_on_host)
                continue;
            order_ok &= T->start_s >= last_end[T->src] - 1e-12;
            last_end[T->src] = T->end_s;
        }
        CHECK_MSG(ready_ok, "trial %d: a task starts before it is ready", trial);
        CHECK_MSG(order_ok, "trial %d: compute tasks overlap on a stream", trial);
        for (int g = 0; g < GPUS; g++) {
            uint64_t init = GB / 4;
            for (int k = 0; k < S; k++)
                if (stages[k].gpu == g)
                    for (int q = stages[k].first_op; q <= stages[k].last_op; q++) {
                        int versions = 1;
                        if (p.schedule == MPRESS_SCHEDULE_ASYNC)
                            versions = S - k < 3 * M ? S - k : 3 * M; /* 2 + 1 simulated */
                        init += ops[q].param_bytes * versions + ops[q].grad_bytes +
                                (stages[k].optimizer_on_host ? 0 : ops[q].optim_bytes);
                    }
            CHECK_MSG(mpress_sim_memory_at(s, g, R->total_s) == init,
                      "trial %d gpu %d: %llu bytes left at the end, want %llu", trial, g,
                      (unsigned long long)mpress_sim_memory_at(s, g, R->total_s),
                      (unsigned long long)init);
        }
        uint64_t host = 0;
        for (int k = 0; k < S; k++)
            if (stages[k].optimizer_on_host)
                for (int q = stages[k].first_op; q <= stages[k].last_op; q++)
                    host += ops[q].optim_bytes + ops[q].grad_bytes;
        CHECK_INT(mpress_sim_memory_at(s, -1, R->total_s), host);
        for (int k = 0; k < S; k++) {
            double c = 0;
            for (int q = stages[k].first_op; q <= stages[k].last_op; q++)
                c += ops[q].fwd_s + ops[q].bwd_s;
            CHECK_MSG(R->iteration_s >= M * c - 1e-12, "trial %d: iteration %.6f < stage %d "
                      "compute %.6f", trial, R->iteration_s, k, M * c);
        }
        mpress_sim_destroy(s);
    }
    CHECK_MSG(held > 0, "no random trial waited for memory: the tight trials test nothing");
}

int main(void)
{
    test_no_saving();
    test_host_swap_fits();
    test_host_swap_does_not_fit();
    test_shared_uplink();
    test_d2d_park();
    test_d2d_striping();
    test_recompute();
    test_schedules_in_flight();
    test_out_of_memory();
    test_saved_input_once();
    test_prefetch_for_recompute();
    test_prefetch_after_previous_backward();
    test_gpipe_send_buffers();
    test_1f1b_send_buffers();
    test_rejects();
    test_rejects_d2d_no_nvlink();
    test_nvswitch_ports();
    test_host_optimizer();
    test_wait_for_memory();
    test_cross_socket_boundary();
    test_random_invariants();
    return check_done();
}
