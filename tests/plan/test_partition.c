/* The even partition (plan_even_partition, lib/plan/baseline.c), which bisects for each
 * stage's best first block, against the full scan of every first block written out here
 * (the dynamic programme the docstring states: least largest stage time, ties to the earlier
 * cut) on 20,000 random instances with equal times, zero-time ops, times whose sum passes
 * DBL_MAX, and random allowed cuts; then one profile of 262,144 ops cut after any op into 8
 * stages, which the full scan (8 x 262,144^2 / 2 steps) could not partition within the test's
 * time limit. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../../lib/plan/plan_internal.h"
#include "tiny.h"

/* The full scan: for each state every first block of the last stage. */
static int reference(const struct mpress_profile *p, const char *cut_ok, int s, int *last)
{
    int n = p->n_ops, nb = 0;
    int *end = malloc(sizeof(int) * (size_t)n);
    double *pre = malloc(sizeof(double) * (size_t)(n + 1));
    double total = 0, scale = 1;
    for (int i = 0; i < n; i++)
        total += p->ops[i].fwd_s + p->ops[i].bwd_s;
    if (!isfinite(total))
        scale = ldexp(1.0, -32);
    pre[0] = 0;
    for (int i = 0; i < n; i++) {
        pre[i + 1] = pre[i] + (p->ops[i].fwd_s * scale + p->ops[i].bwd_s * scale);
        if (cut_ok[i])
            end[nb++] = i;
    }
    if (s > nb)
        s = nb;
    double *f = malloc(sizeof(double) * (size_t)(s * nb));
    int *from = malloc(sizeof(int) * (size_t)(s * nb));
#define SPAN(b0, b1) (pre[end[b1] + 1] - pre[(b0) > 0 ? end[(b0)-1] + 1 : 0])
    for (int b = 0; b < nb; b++)
        f[b] = SPAN(0, b), from[b] = 0;
    for (int j = 1; j < s; j++)
        for (int b = 0; b < nb; b++) {
            f[j * nb + b] = DBL_MAX;
            from[j * nb + b] = -1;
            for (int c = j; c <= b; c++) {
                double v = fmax(f[(j - 1) * nb + c - 1], SPAN(c, b));
                if (from[j * nb + b] < 0 || v < f[j * nb + b])
                    f[j * nb + b] = v, from[j * nb + b] = c;
            }
        }
#undef SPAN
    int b = nb - 1;
    for (int j = s - 1; j >= 0; j--) {
        last[j] = end[b];
        b = from[j * nb + b] - 1;
    }
    free(end), free(pre), free(f), free(from);
    return s;
}

static void ops(struct mpress_profile *p, int n)
{
    p->ops = calloc((size_t)n, sizeof(*p->ops));
    p->n_ops = n;
}

static double random_time(int style)
{
    switch (style) {
    case 0: return tiny_range(0, 3) * 0.25;            /* few values: many ties */
    case 1: return tiny_range(0, 1) ? 0 : tiny_range(1, 1000) * 1e-4; /* zero-time ops */
    case 2: return tiny_range(1, 4) * 1e307;          /* a sum past DBL_MAX */
    default: return tiny_rand() / 4294967296.0 * 0.01;
    }
}

int main(void)
{
    tiny_state_ = 0x2545f4914f6cdd1dULL;
    int mismatches = 0;
    for (int round = 0; round < 20000; round++) {
        struct mpress_profile p = {0};
        int n = tiny_range(1, 60), style = tiny_range(0, 3), s = tiny_range(1, 10);
        ops(&p, n);
        char cut_ok[60];
        for (int i = 0; i < n; i++) {
            p.ops[i].fwd_s = random_time(style);
            p.ops[i].bwd_s = style == 0 ? 2 * p.ops[i].fwd_s : random_time(style);
            cut_ok[i] = i + 1 == n || tiny_range(0, 3) > 0;
        }
        int order[MPRESS_MAX_GPUS], want[MPRESS_MAX_GPUS];
        for (int k = 0; k < MPRESS_MAX_GPUS; k++)
            order[k] = k;
        struct mpress_assignment a = {0};
        int got = plan_even_partition(&p, cut_ok, s, order, &a);
        int ref = reference(&p, cut_ok, s, want);
        int same = got == ref && a.n_stages == got;
        for (int k = 0; same && k < got; k++)
            same = a.stages[k].last_op == want[k] &&
                   a.stages[k].first_op == (k > 0 ? want[k - 1] + 1 : 0);
        if (!same && mismatches++ < 5)
            fprintf(stderr, "round %d (%d ops, style %d, %d stages) differs from the scan\n",
                    round, n, style, s);
        free(p.ops);
    }
    CHECK_INT(mismatches, 0);

    /* The largest profile, no layers: cuts after every op. Equal ops: 32768 per stage. */
    struct mpress_profile p = {0};
    ops(&p, MPRESS_MAX_OPS);
    char *cut_ok = malloc(MPRESS_MAX_OPS);
    for (int i = 0; i < MPRESS_MAX_OPS; i++) {
        p.ops[i].fwd_s = 1e-3;
        p.ops[i].bwd_s = 2e-3;
        cut_ok[i] = 1;
    }
    int order[MPRESS_MAX_GPUS] = {0, 1, 2, 3, 4, 5, 6, 7};
    struct mpress_assignment a = {0};
    CHECK_INT(plan_even_partition(&p, cut_ok, 8, order, &a), 8);
    for (int k = 0; k < 8; k++)
        CHECK_INT(a.stages[k].last_op - a.stages[k].first_op + 1, MPRESS_MAX_OPS / 8);
    free(cut_ok);
    free(p.ops);
    return check_done();
}
