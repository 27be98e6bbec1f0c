/* mpress_profile_host through the library: the progress callback's contract (warmup + repeat
 * whole forward passes in op order, then as many whole backward passes in reverse, done
 * counting 1 .. 2 P n for P passes of n ops: each op is timed between its neighbours, as in a
 * training step, not back to back with itself), option checks, the fields of the
 * result, and that the caller's OpenBLAS thread count is restored. The bytes against the
 * analytic profile and the loop to the planner are in host_loop.sh. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mpress/model.h"
#include "../../lib/runtime/host_ops.h"

struct seen {
    const struct mpress_model *model;
    int passes;
    int calls, bad_order, bad_total, bad_name;
};

static void progress(void *ctx, int done, int total, const char *op)
{
    struct seen *s = ctx;
    int n = s->model->n_ops, pn = s->passes * n;
    s->calls++;
    if (done != s->calls)
        s->bad_order++;
    if (total != 2 * pn)
        s->bad_total++;
    /* forward passes: op (done - 1) mod n; backward passes: n - 1 - ((done - P n - 1) mod n) */
    int op_index = done <= pn ? (done - 1) % n : n - 1 - (done - pn - 1) % n;
    if (op_index < 0 || op_index >= n || strcmp(op, s->model->ops[op_index].name) != 0)
        s->bad_name++;
}

int main(void)
{
    const char *names[] = {"gpt-tiny", "bert-tiny"};
    for (int k = 0; k < 2; k++) {
        struct mpress_model_config c;
        struct mpress_model model;
        struct mpress_error err;
        CHECK(mpress_model_find(names[k], &c) == 0);
        CHECK(mpress_model_build(&c, &model, &err) == 0);

        struct mpress_host_profile_options o;
        mpress_host_profile_options_init(&o);
        CHECK_INT(o.warmup, 2);
        CHECK_INT(o.repeat, 9);
        CHECK_INT(o.threads, 1);
        struct seen s = {&model, 2 + 3, 0, 0, 0, 0};
        o.progress = progress;
        o.progress_ctx = &s;
        o.repeat = 3;
        o.threads = 2;
        mpress_host_blas_threads(3);
        struct mpress_profile p;
        mpress_profile_init(&p);
        CHECK_INT(mpress_profile_host(&c, &o, &p, &err), 0);
        CHECK_INT(mpress_host_blas_threads(1), 3);   /* the caller's count came back */
        CHECK_INT(s.calls, 2 * s.passes * model.n_ops);
        CHECK_INT(s.bad_order, 0);
        CHECK_INT(s.bad_total, 0);
        CHECK_INT(s.bad_name, 0);
        CHECK_STR(p.source, "host");
        CHECK_STR(p.device, MPRESS_HOST_DEVICE);
        CHECK_INT(p.n_ops, model.n_ops);
        CHECK_STR(p.model.name, c.name);
        for (int i = 0; i < p.n_ops; i++) {
            CHECK_MSG(p.ops[i].fwd_s > 0 && p.ops[i].bwd_s > 0, "%s", p.ops[i].name);
            CHECK_STR(p.ops[i].name, model.ops[i].name);
            CHECK_INT(p.ops[i].n_tensors, model.ops[i].n_saved);
        }

        /* bad options are refused and leave the profile as it was */
        struct mpress_host_profile_options bad = o;
        bad.repeat = 0;
        CHECK_INT(mpress_profile_host(&c, &bad, &p, &err), MPRESS_EUSAGE);
        bad = o;
        bad.warmup = -1;
        CHECK_INT(mpress_profile_host(&c, &bad, &p, &err), MPRESS_EUSAGE);
        bad = o;
        bad.threads = 0;
        CHECK_INT(mpress_profile_host(&c, &bad, &p, &err), MPRESS_EUSAGE);
        CHECK_INT(p.n_ops, model.n_ops);
        struct mpress_model_config broken = c;
        broken.heads = 3;   /* hidden 64 is not divisible by 3 */
        CHECK_INT(mpress_profile_host(&broken, &o, &p, &err), MPRESS_EUSAGE);
        CHECK_INT(p.n_ops, model.n_ops);
        mpress_profile_finish(&p);
        mpress_model_finish(&model);
    }
    return check_done();
}
