/* The one plan check (mpress_plan_check) as the evaluator applies it: a D2D share to a GPU
 * without NVLink to the stage's GPU is refused (GPU 4 -> GPU 1 on dgx1, whose hybrid cube-mesh
 * joins GPU 4 to GPUs 0, 5, 6 and 7 only), one to an NVLink peer is evaluated; the fault names
 * the stage, action and peer and the JSON path the plan loader reports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mpress/planner.h"

/* The plan's decisions as an assignment (stages and a copy of the actions). */
static int to_assignment(const struct mpress_plan *plan, struct mpress_assignment *a)
{
    if (mpress_assignment_init(a, &plan->profile, NULL))
        return -1;
    a->n_stages = plan->n_stages;
    for (int k = 0; k < plan->n_stages; k++)
        a->stages[k] = plan->stages[k];
    if (a->n_actions != plan->n_actions)
        return -1;
    memcpy(a->actions, plan->actions, (size_t)plan->n_actions * sizeof(*a->actions));
    return 0;
}

/* Turns the first saved tensor of the stage on GPU from into a D2D swap to GPU to; returns the
 * action index and the stage in *stage. */
static int d2d_first(const struct mpress_plan *plan, struct mpress_assignment *a, int from,
                     int to, int *stage)
{
    int k = 0;
    while (a->stages[k].gpu != from)
        k++;
    *stage = k;
    int j = 0;
    while (a->actions[j].op < a->stages[k].first_op)
        j++;
    struct mpress_plan_action *ac = &a->actions[j];
    ac->action = MPRESS_ACTION_D2D_SWAP;
    ac->n_peers = 1;
    ac->peers[0] = to;
    ac->peer_bytes[0] = plan->profile.ops[ac->op].tensors[ac->tensor].bytes;
    ac->evict_after_op = ac->prefetch_before_op = ac->op;
    return j;
}

int main(void)
{
    const char *src = getenv("MPRESS_SRCDIR");
    char file[4096];
    snprintf(file, sizeof(file), "%s/plans/gpt3-6.7b.dgx1.json", src ? src : ".");
    struct mpress_plan plan;
    struct mpress_error err;
    mpress_error_clear(&err);
    mpress_plan_init(&plan);
    CHECK_INT(mpress_plan_load(file, &plan, &err), 0);
    if (check_failures_)
        return check_done();
    CHECK_STR(plan.topology.name, "dgx1");
    CHECK_INT(plan.topology.nvlinks[4][1], 0);
    CHECK(plan.topology.nvlinks[4][5] > 0);

    struct mpress_assignment a;
    struct mpress_plan_eval ev;
    struct mpress_plan_fault f;
    CHECK_INT(to_assignment(&plan, &a), 0);
    /* The plan as stored evaluates. */
    CHECK_INT(mpress_plan_evaluate(&plan.profile, &plan.topology, plan.schedule,
                                   plan.micro_batches, &a, &ev, &err), 0);

    /* GPU 4 -> GPU 1: no NVLink, refused by evaluation and by the check itself. */
    int k, j = d2d_first(&plan, &a, 4, 1, &k);
    char want[128];
    snprintf(want, sizeof(want), "actions[%d].peers[0].gpu", j);
    mpress_error_clear(&err);
    CHECK_INT(mpress_plan_evaluate(&plan.profile, &plan.topology, plan.schedule,
                                   plan.micro_batches, &a, &ev, &err), MPRESS_EINPUT);
    CHECK_STR(err.path, want);
    CHECK(strstr(err.text, "GPU 1 has no NVLink to GPU 4") != NULL);
    CHECK_INT(mpress_plan_check(&plan.profile, &plan.topology, plan.micro_batches, a.n_stages,
                                a.stages, a.n_actions, a.actions, &f, NULL), MPRESS_EINPUT);
    CHECK_STR(f.path, want);
    CHECK_INT(f.stage, k);
    CHECK_INT(f.action, j);
    CHECK_INT(f.peer, 0);
    CHECK_INT(f.op, a.actions[j].op);
    CHECK_INT(f.tensor, a.actions[j].tensor);

    /* GPU 4 -> GPU 5: an NVLink peer, evaluated. */
    mpress_assignment_finish(&a);
    CHECK_INT(to_assignment(&plan, &a) == 0 ? 0 : -1, 0);
    d2d_first(&plan, &a, 4, 5, &k);
    CHECK_INT(mpress_plan_evaluate(&plan.profile, &plan.topology, plan.schedule,
                                   plan.micro_batches, &a, &ev, &err), 0);
    CHECK_INT(mpress_plan_check(&plan.profile, &plan.topology, plan.micro_batches, a.n_stages,
                                a.stages, a.n_actions, a.actions, &f, &err), 0);

    /* Micro-batches past MPRESS_MAX_MICRO_BATCHES are named at "micro_batches". */
    CHECK_INT(mpress_plan_check(&plan.profile, &plan.topology, MPRESS_MAX_MICRO_BATCHES + 1,
                                a.n_stages, a.stages, a.n_actions, a.actions, &f, &err),
              MPRESS_EINPUT);
    CHECK_STR(f.path, "micro_batches");
    CHECK_INT(mpress_plan_check(&plan.profile, &plan.topology, MPRESS_MAX_MICRO_BATCHES,
                                a.n_stages, a.stages, a.n_actions, a.actions, &f, &err), 0);

    /* A stage on a GPU the topology lacks, and a reused GPU. */
    a.stages[1].gpu = 8;
    CHECK_INT(mpress_plan_check(&plan.profile, &plan.topology, 16, a.n_stages, a.stages,
                                a.n_actions, a.actions, &f, &err), MPRESS_EINPUT);
    CHECK_STR(f.path, "stages[1].gpu");
    CHECK_INT(f.stage, 1);
    a.stages[1].gpu = a.stages[0].gpu;
    CHECK_INT(mpress_plan_check(&plan.profile, &plan.topology, 16, a.n_stages, a.stages,
                                a.n_actions, a.actions, &f, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "already runs stages[0]") != NULL);

    mpress_assignment_finish(&a);
    mpress_plan_finish(&plan);

    /* One name table each for policies and actions: names round-trip, others are refused. */
    const char *const policies[MPRESS_N_POLICIES] = {"ilp", "greedy", "recompute", "swap",
                                                     "none"};
    for (int i = 0; i < MPRESS_N_POLICIES; i++) {
        enum mpress_policy back = MPRESS_POLICY_NONE;
        CHECK_STR(mpress_policy_name((enum mpress_policy)i), policies[i]);
        CHECK_INT(mpress_policy_parse(policies[i], &back), 0);
        CHECK_INT(back, i);
    }
    enum mpress_policy pol;
    CHECK_INT(mpress_policy_parse("milp", &pol), -1);
    CHECK_STR(mpress_policy_name((enum mpress_policy)MPRESS_N_POLICIES), "unknown");
    const char *const actions[MPRESS_N_ACTIONS] = {"keep", "recompute", "host_swap", "d2d_swap"};
    for (int i = 0; i < MPRESS_N_ACTIONS; i++) {
        enum mpress_action back = MPRESS_ACTION_KEEP;
        CHECK_STR(mpress_action_name((enum mpress_action)i), actions[i]);
        CHECK_INT(mpress_action_parse(actions[i], &back), 0);
        CHECK_INT(back, i);
    }
    CHECK_STR(mpress_action_name((enum mpress_action)MPRESS_N_ACTIONS), "unknown");
    return check_done();
}
