/* The run report is neutral: a run that is not the simulator's (here a hand-made serial one,
 * as a runtime would record it) prints through the same outputs, and the memory replay finds
 * its peaks.
 *
 * The fixture: two stages of one op each on GPUs 0 and 1, one micro-batch, one iteration,
 * nothing swapped; per op a 0.5 GB saved tensor, 0.25 GB workspace, model states 0.1 + 0.1 +
 * 0.2 GB; reserve 0.5 GB; boundary tensor 1 GB. The serial order a queue-by-queue walk gives is
 *   F(0) [0,1]  send_act [1,2]  F(1) [2,3]  B(1) [3,4]  step(1) [4,5]  send_grad [5,6]
 *   B(0) [6,7]  step(0) [7,8]
 * gpu1 peaks when F(1) starts at 2: 0.9 states and reserve + 1 receive buffer + 0.25 workspace
 * + 0.5 tensor = 2.65 GB. gpu0 peaks when B(0) starts at 6: 0.9 + 0.5 tensor + 1 gradient
 * buffer + 0.25 workspace = 2.65 GB (at 1 it held 0.9 + 0.5 + 1 send buffer = 2.4). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mpress/run_report.h"

#define GB 1000000000ll

int main(void)
{
    struct mpress_plan p;
    memset(&p, 0, sizeof(p));
    struct mpress_op ops[2];
    struct mpress_saved_tensor ts[2];
    memset(ops, 0, sizeof(ops));
    memset(ts, 0, sizeof(ts));
    snprintf(p.profile.model.name, sizeof(p.profile.model.name), "toy");
    snprintf(p.topology.name, sizeof(p.topology.name), "two");
    snprintf(p.policy, sizeof(p.policy), "test");
    p.profile.n_ops = 2;
    p.profile.ops = ops;
    for (int o = 0; o < 2; o++) {
        snprintf(ops[o].name, sizeof(ops[o].name), "op%d", o);
        ops[o].param_bytes = GB / 10;
        ops[o].grad_bytes = GB / 10;
        ops[o].optim_bytes = GB / 5;
        ops[o].workspace_bytes = GB / 4;
        ops[o].output_bytes = o == 0 ? GB : 0;
        ops[o].n_tensors = 1;
        ops[o].tensors = &ts[o];
        snprintf(ts[o].id, sizeof(ts[o].id), "op%d.t", o);
        ts[o].bytes = GB / 2;
        ts[o].recompute_op = o;         /* each op's own product, not a saved input */
    }
    p.topology.n_gpus = 2;
    p.topology.n_sockets = 1;
    for (int g = 0; g < 2; g++) {
        p.topology.gpus[g].memory_bytes = 10 * GB;
        p.topology.gpus[g].reserve_bytes = GB / 2;
    }
    struct mpress_plan_stage st[2] = {{0, 0, 0, 0}, {1, 1, 1, 0}};
    p.n_stages = 2;
    p.stages = st;
    p.micro_batches = 1;
    /* both tensors kept: one keep action per saved tensor, as every plan names */
    struct mpress_plan_action acts[2];
    for (int o = 0; o < 2; o++)
        acts[o] = (struct mpress_plan_action){.op = o, .tensor = 0,
                                              .action = MPRESS_ACTION_KEEP,
                                              .evict_after_op = -1, .prefetch_before_op = -1};
    p.n_actions = 2;
    p.actions = acts;
    struct mpress_sched *s = NULL;
    struct mpress_error err;
    mpress_error_clear(&err);
    CHECK_MSG(mpress_sched_create(&p, NULL, &s, &err) == 0, "%s", err.text);
    if (!s)
        return check_done();
    int n = mpress_sched_task_count(s);
    CHECK_INT(n, 8);

    /* the serial walk: each queue in turn runs what it can, one second per task */
    struct mpress_run_task_time *times = calloc((size_t)n, sizeof(*times));
    struct mpress_run_mem_event *mem = calloc(2 * (size_t)n + 1, sizeof(*mem));
    int *pos = calloc((size_t)mpress_sched_queue_count(s), sizeof(int));
    char *ran = calloc((size_t)n, 1);
    long nm = 0;
    mem[nm++] = (struct mpress_run_mem_event){0, -1, 0};
    double t = 0;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int q = 0; q < mpress_sched_queue_count(s); q++) {
            int len;
            const int *order = mpress_sched_queue_tasks(s, q, &len);
            while (pos[q] < len) {
                int task = order[pos[q]], np, ok = 1;
                const int *pr = mpress_sched_preds(s, task, &np);
                for (int j = 0; j < np; j++)
                    ok &= ran[pr[j]];
                if (!ok)
                    break;
                times[task] = (struct mpress_run_task_time){t, t, t + 1};
                int k;
                if (mpress_sched_mem_start(s, task, &k) && k)
                    mem[nm++] = (struct mpress_run_mem_event){t, task, 0};
                if (mpress_sched_mem_end(s, task, &k) && k)
                    mem[nm++] = (struct mpress_run_mem_event){t + 1, task, 1};
                t += 1;
                ran[task] = 1;
                pos[q]++;
                progress = 1;
            }
        }
    }
    CHECK_NEAR(t, 8, 1e-12);
    struct mpress_run_report r;
    memset(&r, 0, sizeof(r));
    r.sched = s;
    r.verb = "measured";
    r.times = times;
    r.mem = mem;
    r.n_mem = nm;
    r.summary.n_gpus = 2;
    r.summary.iterations = 1;
    r.summary.iteration_end_s = r.summary.total_s = r.summary.iteration_s = 8;
    for (int g = 0; g < 2; g++) {
        r.summary.gpus[g].gpu = g;
        r.summary.gpus[g].stage = g;
        r.summary.gpus[g].capacity = 10 * GB;
    }
    CHECK_INT(mpress_run_replay_memory(&r), 0);
    const struct mpress_run_gpu *g0 = &r.summary.gpus[0], *g1 = &r.summary.gpus[1];
    CHECK_INT(g1->peak, 265 * GB / 100);
    CHECK_NEAR(g1->peak_time_s, 2, 1e-12);
    CHECK_INT(g0->peak, 265 * GB / 100);
    CHECK_NEAR(g0->peak_time_s, 6, 1e-12);
    CHECK_INT(g0->at_peak[MPRESS_MEM_BUFFERS], GB);
    CHECK_INT(g0->at_peak[MPRESS_MEM_ACTIVATIONS], GB / 2);
    CHECK_INT(g0->at_peak[MPRESS_MEM_WORKING], GB / 4);
    CHECK_INT(g0->at_peak[MPRESS_MEM_RESERVE], GB / 2);
    CHECK_INT(g0->residents[0].bytes, GB);
    CHECK(!r.summary.out_of_memory && r.summary.oom_gpu == -1);
    CHECK_INT(mpress_run_memory_at(&r, 0, 1.5), 24 * GB / 10);
    CHECK_INT(mpress_run_memory_at(&r, 1, 8), 9 * GB / 10);   /* back to states + reserve */

    char *txt = mpress_run_render(&r);
    CHECK(txt && strncmp(txt, "measured toy on two:", 20) == 0);
    free(txt);
    char *trace = mpress_run_trace(&r);
    CHECK(trace && strstr(trace, "\"name\": \"send activation mb0 -> gpu1\"") != NULL);
    free(trace);
    char *svg = mpress_run_svg(&r);
    CHECK(svg && strstr(svg, "</svg>") != NULL);
    free(svg);
    json_t *j = mpress_run_report_json(&r);
    CHECK(j && json_integer_value(json_object_get(
                   json_object_get(json_array_get(json_object_get(j, "gpus"), 1), "peak"),
                   "simulated")) == 265 * GB / 100);
    json_decref(j);

    /* an allocation over capacity is out of memory at the moment it happens */
    r.summary.gpus[1].capacity = 2 * GB;
    CHECK_INT(mpress_run_replay_memory(&r), 0);
    CHECK(r.summary.out_of_memory && r.summary.oom_gpu == 1);
    /* the receive buffer at 1 leaves 1.9 GB; F(1)'s start at 2 takes it to 2.65 */
    CHECK_NEAR(r.summary.gpus[1].oom_time_s, 2, 1e-12);
    char *oom = mpress_run_oom_text(&r);
    CHECK(oom && strstr(oom, "out of memory on gpu 1") != NULL);
    free(oom);

    free(times);
    free(mem);
    free(pos);
    free(ran);
    mpress_sched_destroy(s);
    return check_done();
}
