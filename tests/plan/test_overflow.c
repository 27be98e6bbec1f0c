/* Numbers at the edges of what the formats allow: op times of 1e308 s (finite, but their sums
 * are not), byte counts whose sums pass 2^64, PCIe at 1e308 and 1e-300 B/s, and a schedule past
 * MPRESS_MAX_SCHEDULE_SLOTS. Each expectation is worked out by hand in its comment. */
#include <float.h>
#include <stdlib.h>

#include "check.h"
#include "../../lib/plan/plan_internal.h"
#include "tiny.h"

static void with_times(struct mpress_profile *p, const double *t, int n)
{
    tiny_profile_init(p);
    for (int i = 0; i < n; i++) {
        struct mpress_op *op = tiny_op(p, "op", t[i], 0, 0, 1);
        op->bwd_s = t[i];
        op->tensors[0].bytes = MB;
        snprintf(op->tensors[0].name, sizeof(op->tensors[0].name), "t");
        op->tensors[0].recompute_op = i;
    }
}

int main(void)
{
    struct mpress_profile p;
    struct mpress_topology t;
    struct mpress_assignment a;
    struct mpress_plan_eval ev;
    struct mpress_plan_options o;
    struct mpress_plan plan;
    struct mpress_error err;
    mpress_error_clear(&err);
    mpress_plan_options_init(&o);
    o.micro_batches = 4;

    /* 1. Even partition of ops whose forward + backward is 2e308 s each (already past
     * DBL_MAX): op weights 1, 1, 1, 3 (x 1e308, forward and backward alike) in two stages.
     * Cutting after op 2 gives max(3, 3) = 3; after op 1 max(2, 4); after op 0 max(1, 5): so
     * stage 0 is ops 0..2 and stage 1 op 3. */
    const double big[4] = {1e308 / 3, 1e308 / 3, 1e308 / 3, 1e308};
    with_times(&p, big, 4);
    tiny_topo(&t, 2, 0, 1000);
    t.nvlinks[0][1] = t.nvlinks[1][0] = 1;
    CHECK_INT(mpress_assignment_init(&a, &p, &err), 0);
    char cut_ok[4] = {1, 1, 1, 1};
    int order[2] = {0, 1};
    CHECK_INT(plan_even_partition(&p, cut_ok, 2, order, &a), 2);
    CHECK_INT(a.stages[0].first_op, 0);
    CHECK_INT(a.stages[0].last_op, 2);
    CHECK_INT(a.stages[1].first_op, 3);
    CHECK_INT(a.stages[1].last_op, 3);
    /* The same with every op at 1e308 s each way: two ops per stage (ties go to the earlier
     * cut, and 2 + 2 beats 1 + 3 and 3 + 1). */
    for (int i = 0; i < 4; i++)
        p.ops[i].fwd_s = p.ops[i].bwd_s = 1e308;
    CHECK_INT(plan_even_partition(&p, cut_ok, 2, order, &a), 2);
    CHECK_INT(a.stages[0].last_op, 1);
    CHECK_INT(a.stages[1].first_op, 2);
    /* The baselines still make a valid assignment; the planner refuses the profile as input
     * that cannot be timed, naming no garbage op range. */
    mpress_assignment_finish(&a);
    CHECK_INT(mpress_plan_baseline(&p, &t, &o, MPRESS_POLICY_NONE, &a, &ev, &err), 0);
    CHECK_INT(a.stages[0].first_op, 0);
    CHECK_INT(a.stages[a.n_stages - 1].last_op, 3);
    CHECK_INT(mpress_plan_create(&p, &t, &o, &plan, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "sum to more than a double holds") != NULL);
    mpress_assignment_finish(&a);
    mpress_profile_finish(&p);

    /* 2. Bytes: two saved tensors of 2^63 - 1 bytes on one 1000 MB GPU. Their sum is
     * 2^64 - 2; with the 10 MB reserve a wrapping sum would come to 10 MB - 2 bytes and fit.
     * Saturated, the peak is UINT64_MAX and nothing fits. */
    const double one[1] = {0.01};
    with_times(&p, one, 1);
    p.ops[0].n_tensors = 2;
    p.ops[0].tensors = realloc(p.ops[0].tensors, 2 * sizeof(*p.ops[0].tensors));
    p.ops[0].tensors[1] = p.ops[0].tensors[0];
    snprintf(p.ops[0].tensors[1].id, sizeof(p.ops[0].tensors[1].id), "op0.t1");
    p.ops[0].tensors[0].bytes = p.ops[0].tensors[1].bytes = (uint64_t)INT64_MAX;
    tiny_topo(&t, 1, 0, 1000);
    CHECK_INT(mpress_assignment_init(&a, &p, &err), 0);
    a.n_stages = 1;
    a.stages[0] = (struct mpress_plan_stage){0, 0, 0, 0};
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_1F1B, 4, &a, &ev, &err), 0);
    CHECK(!ev.fits);
    CHECK_INT(ev.gpus[0].activations == UINT64_MAX - 1, 1); /* 2^64 - 2, one in flight */
    CHECK_INT(ev.gpus[0].peak == UINT64_MAX, 1);
    CHECK_INT(ev.short_gpu, 0);
    CHECK_INT(ev.short_bytes == UINT64_MAX - t.gpus[0].memory_bytes, 1);
    CHECK_INT(plan_shortfall(&ev) == UINT64_MAX - t.gpus[0].memory_bytes, 1);
    /* One tensor of 2^63 - 1 bytes, GPipe with 4 micro-batches in flight: 4 (2^63 - 1) =
     * 2^65 - 4 would wrap to 2^64 - 4; it saturates. */
    p.ops[0].tensors[1].bytes = 0;
    CHECK_INT(mpress_plan_evaluate(&p, &t, MPRESS_SCHEDULE_GPIPE, 4, &a, &ev, &err), 0);
    CHECK(!ev.fits);
    CHECK_INT(ev.gpus[0].activations == UINT64_MAX, 1);
    mpress_assignment_finish(&a);
    /* Every baseline and the planner agree that nothing fits. */
    p.ops[0].tensors[1].bytes = (uint64_t)INT64_MAX;
    const enum mpress_policy policies[] = {MPRESS_POLICY_NONE, MPRESS_POLICY_RECOMPUTE,
                                           MPRESS_POLICY_SWAP, MPRESS_POLICY_GREEDY};
    for (int i = 0; i < 4; i++) {
        CHECK_INT(mpress_plan_baseline(&p, &t, &o, policies[i], &a, &ev, &err), 0);
        CHECK_MSG(!ev.fits, "%s fits", mpress_policy_name(policies[i]));
        mpress_assignment_finish(&a);
    }
    o.policy = MPRESS_POLICY_GREEDY;
    CHECK_INT(mpress_plan_create(&p, &t, &o, &plan, &err), MPRESS_EINFEASIBLE);
    o.policy = MPRESS_POLICY_ILP;
    mpress_assignment_finish(&a);
    mpress_profile_finish(&p);

    /* 3. PCIe at the extremes on two GPUs joined by NVLink: the none baseline moves nothing
     * over PCIe, so it fits with the same iteration time as at 300 MB/s; the swap baseline at
     * 1e-300 B/s drains nothing and does not fit, at 1e308 B/s it costs no transfer time. */
    const double two[2] = {0.01, 0.02};
    with_times(&p, two, 2);
    tiny_topo(&t, 2, 0, 1000);
    t.nvlinks[0][1] = t.nvlinks[1][0] = 1;
    CHECK_INT(mpress_plan_baseline(&p, &t, &o, MPRESS_POLICY_NONE, &a, &ev, &err), 0);
    CHECK(ev.fits);
    double none_s = ev.iteration_s;
    mpress_assignment_finish(&a);
    const double pcie[2] = {1e308, 1e-300};
    for (int i = 0; i < 2; i++) {
        t.pcie_bytes_per_s = pcie[i];
        CHECK_INT(mpress_plan_baseline(&p, &t, &o, MPRESS_POLICY_NONE, &a, &ev, &err), 0);
        CHECK(ev.fits);
        CHECK_NEAR(ev.iteration_s, none_s, 1e-12);
        mpress_assignment_finish(&a);
        CHECK_INT(mpress_plan_baseline(&p, &t, &o, MPRESS_POLICY_SWAP, &a, &ev, &err), 0);
        CHECK_INT(ev.fits, i == 0);
        mpress_assignment_finish(&a);
        /* The planner gives a plan, or (when the solver fails on such coefficients) says so;
         * never that nothing fits while a baseline does. */
        mpress_error_clear(&err);
        int rc = mpress_plan_create(&p, &t, &o, &plan, &err);
        CHECK_MSG(rc == 0 || rc == MPRESS_ESYSTEM, "pcie %g: rc %d: %s", pcie[i], rc, err.text);
        if (rc == 0) {
            CHECK(plan.iteration_s <= none_s * (1 + 1e-9));
            mpress_plan_finish(&plan);
        }
    }
    mpress_profile_finish(&p);

    /* 4. The schedule limit: 2048 ops of one saved tensor each are 4096 slots per micro-batch,
     * so 2^26 / 4096 = 16384 micro-batches are the most; 16385 is refused at micro_batches. */
    tiny_profile_init(&p);
    for (int i = 0; i < 2048; i++)
        tiny_op(&p, "op", 1e-3, 0, 0, 1);
    tiny_topo(&t, 1, 0, 1000);
    CHECK_INT(mpress_assignment_init(&a, &p, &err), 0);
    a.n_stages = 1;
    a.stages[0] = (struct mpress_plan_stage){0, 2047, 0, 0};
    struct mpress_plan_fault f;
    CHECK_INT(mpress_plan_check(&p, &t, 16384, 1, a.stages, a.n_actions, a.actions, &f, &err),
              0);
    CHECK_INT(mpress_plan_check(&p, &t, 16385, 1, a.stages, a.n_actions, a.actions, &f, &err),
              MPRESS_EINPUT);
    CHECK_STR(f.path, "micro_batches");
    CHECK(strstr(err.text, "schedule slots") != NULL);
    mpress_assignment_finish(&a);
    mpress_profile_finish(&p);
    return check_done();
}
