/* libFuzzer target: documents that load must not crash what comes after. The input is
 *
 *   one control byte, then a mpress-profile, optionally followed by "\n%%\n" and a
 *   mpress-topology (without one, the control byte picks a built-in server).
 *
 * Control byte: bits 0-1 GPUs - 1 (1..4), bits 2-4 micro-batches - 1 (1..8), bits 5-6 the
 * built-in server (dgx1, dgx-a100, dgx2, dgx-h100), bit 7 the schedule (1f1b or gpipe).
 * Accepted documents go on through `mpress plan --policy greedy` (mpress_plan_create), the
 * plan's JSON, `mpress explain`, and a one-iteration simulation with all its outputs, as
 * `mpress run` does. Inputs are kept tiny so that each run is fast: at most 32 ops and 256
 * saved tensors (larger profiles are only loaded). */
#include "fuzz_file.h"
#include "mpress/json.h"
#include "mpress/plan.h"
#include "mpress/planner.h"
#include "mpress/profile.h"
#include "mpress/sim.h"
#include "mpress/topology.h"

#define MAX_OPS 32
#define MAX_TENSORS 256

static const char *const servers[4] = {"dgx1", "dgx-a100", "dgx2", "dgx-h100"};

static void simulate(const struct mpress_plan *plan)
{
    struct mpress_sim_options so;
    struct mpress_sim *sim = NULL;
    struct mpress_error err;
    mpress_sim_options_init(&so);
    so.iterations = 1;
    mpress_error_clear(&err);
    int rc = mpress_sim_run(plan, &so, &sim, &err);
    FUZZ_CHECK_ERROR(rc, err);
    FUZZ_ASSERT(rc != MPRESS_ESYSTEM, "simulation of a planned profile: %s", err.text);
    if (rc == MPRESS_OK) {
        const struct mpress_sim_summary *s = mpress_sim_summary_get(sim);
        FUZZ_ASSERT(s && s->iterations == 1, "summary of a one-iteration run");
        json_t *rep = mpress_sim_report_json(sim);
        char *txt = rep ? mpress_json_dumps(rep) : NULL;
        free(txt);
        json_decref(rep);
        free(mpress_sim_trace(sim));
        free(mpress_sim_svg(sim));
        free(mpress_sim_render(sim));
        free(mpress_sim_oom_text(sim));
    }
    mpress_sim_destroy(sim);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned ctl = data[0];
    const char *doc = (const char *)data + 1;
    size_t n = size - 1, prof_n = n;
    const char *sep = NULL;
    for (size_t i = 0; i + 4 <= n; i++)
        if (memcmp(doc + i, "\n%%\n", 4) == 0) {
            sep = doc + i;
            prof_n = i;
            break;
        }

    struct mpress_profile p;
    struct mpress_topology topo;
    struct mpress_error err;
    mpress_profile_init(&p);
    mpress_error_clear(&err);
    int rc = mpress_profile_load(fuzz_file(0, doc, prof_n), &p, &err);
    FUZZ_CHECK_ERROR(rc, err);
    if (rc != MPRESS_OK)
        goto out;
    int tensors = 0;
    for (int i = 0; i < p.n_ops; i++)
        tensors += p.ops[i].n_tensors;
    if (p.n_ops > MAX_OPS || tensors > MAX_TENSORS)
        goto out;
    mpress_error_clear(&err);
    if (sep)
        rc = mpress_topology_load(fuzz_file(1, sep + 4, n - prof_n - 4), &topo, &err);
    else
        rc = mpress_topology_builtin(servers[(ctl >> 5) & 3], &topo, &err);
    FUZZ_CHECK_ERROR(rc, err);
    if (rc != MPRESS_OK)
        goto out;
    int gpus = 1 + (int)(ctl & 3);
    if (gpus > topo.n_gpus)
        gpus = topo.n_gpus;
    mpress_error_clear(&err);
    rc = mpress_topology_restrict(&topo, gpus, &err);
    FUZZ_ASSERT(rc == MPRESS_OK, "restrict to %d of %d GPUs: %s", gpus, topo.n_gpus, err.text);

    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    o.policy = MPRESS_POLICY_GREEDY;
    o.micro_batches = 1 + (int)((ctl >> 2) & 7);
    if (ctl & 0x80)
        FUZZ_ASSERT(mpress_schedule_parse("gpipe", &o.schedule) == 0, "schedule gpipe");
    struct mpress_plan plan;
    mpress_plan_init(&plan);
    mpress_error_clear(&err);
    rc = mpress_plan_create(&p, &topo, &o, &plan, &err);
    FUZZ_CHECK_ERROR(rc, err);
    FUZZ_ASSERT(rc != MPRESS_ESYSTEM, "greedy plan: %s", err.text);
    if (rc == MPRESS_OK) {
        /* the plan written by `mpress plan -o` loads again */
        json_t *j = mpress_plan_to_json(&plan);
        char *s = j ? mpress_json_dumps(j) : NULL;
        FUZZ_ASSERT(s != NULL, "plan did not serialize");
        struct mpress_plan back;
        mpress_plan_init(&back);
        mpress_error_clear(&err);
        int brc = mpress_plan_load(fuzz_file(1, s, strlen(s)), &back, &err);
        FUZZ_ASSERT(brc == MPRESS_OK, "planned plan does not load: %s: %s", err.path, err.text);
        mpress_plan_finish(&back);
        free(s);
        json_decref(j);
        free(mpress_plan_explain(&plan));
        simulate(&plan);
    }
    mpress_plan_finish(&plan);
out:
    mpress_profile_finish(&p);
    return 0;
}
