/* The mapping search on a direct-NVLink server (ilp_map_search, ilp_lns.c; map_search,
 * ilp_solve.c). gpt3-13b on dgx1 with the default settings: branch and bound and the local
 * searches keep 8.4910 s, six host optimizer steps queued on the two sockets' CPUs; with the
 * mapping fixed to 0 2 4 6 1 3 5 7 and the placement branched on first the same MILP reaches
 * 7.5615 s at a 0.14 % gap of its own (measured with the mapping columns' bounds fixed by
 * hand), so a plan at or below 7.60 s exists in the formulation. The answer must be such a
 * plan: it fits when the evaluator here re-judges it, its bound (the mapping-free one, which
 * bounds every mapping) stays below it, and the gap is within 2 %. About 33 s on 2 cores
 * (test_search.c plans this server twice at 1,000 nodes for determinism). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shipped.h"
#include "mpress/mpress.h"

static double plan_checked(const struct mpress_profile *p, const struct mpress_topology *t,
                           const struct mpress_plan_options *o, struct mpress_plan *out)
{
    struct mpress_error err;
    memset(&err, 0, sizeof(err));
    int rc = mpress_plan_create(p, t, o, out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err.text);
    if (rc)
        return -1;
    struct mpress_assignment a = {0};
    struct mpress_plan_eval ev;
    CHECK(mpress_assignment_init(&a, p, &err) == 0);
    a.n_stages = out->n_stages;
    memcpy(a.stages, out->stages, sizeof(*out->stages) * (size_t)out->n_stages);
    memcpy(a.actions, out->actions, sizeof(*a.actions) * (size_t)a.n_actions);
    int erc = mpress_plan_evaluate(p, t, o->schedule, o->micro_batches, &a, &ev, &err);
    CHECK(erc == 0);
    CHECK_MSG(erc == 0 && ev.fits, "the plan does not fit when re-evaluated");
    CHECK_MSG(erc == 0 && fabs(ev.iteration_s - out->iteration_s) <= 1e-12 * ev.iteration_s,
              "%.9f vs evaluated %.9f", out->iteration_s, ev.iteration_s);
    /* Host steps on each socket: the plan must not queue more of them than the other. */
    int per_socket[MPRESS_MAX_GPUS] = {0};
    for (int k = 0; k < out->n_stages; k++)
        if (out->stages[k].optimizer_on_host)
            per_socket[t->gpus[out->stages[k].gpu].socket]++;
    printf("gpt3-13b dgx1: %.4f s, bound %.4f s, gap %.3f %%, host steps %d + %d\n",
           out->iteration_s, out->solver.bound, 100 * out->solver.gap, per_socket[0],
           per_socket[1]);
    mpress_assignment_finish(&a);
    return erc == 0 ? ev.iteration_s : -1;
}

int main(void)
{
    struct mpress_profile p;
    struct mpress_topology t;
    if (load_shipped("gpt3-13b.v100.json", "dgx1", 0, &p, &t)) {
        CHECK(0);
        return check_done();
    }
    struct mpress_plan_options o;
    mpress_plan_options_init(&o);
    struct mpress_plan a;
    double ta = plan_checked(&p, &t, &o, &a);
    CHECK_MSG(ta > 0 && ta <= 7.60, "%.4f s, at most 7.60 s (8.4910 s before the search)", ta);
    if (ta > 0) {
        CHECK_MSG(a.solver.bound >= 7.40 && a.solver.bound <= ta, "bound %.4f s", a.solver.bound);
        CHECK_MSG(a.solver.gap <= 0.02, "gap %.3f %%", 100 * a.solver.gap);
        mpress_plan_finish(&a);
    }
    mpress_profile_finish(&p);
    return check_done();
}
