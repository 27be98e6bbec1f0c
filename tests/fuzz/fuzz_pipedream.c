/* libFuzzer target: PipeDream profiler graphs (lib/model/pipedream.c): the graph reader
 * (mpress_pipedream_load) and the import as a profile (mpress_profile_import_pipedream). A
 * loaded graph has its topological order as a permutation of its nodes; an imported profile
 * saves to JSON that loads as a mpress-profile. A small one is imported again with --stages
 * (1 to 3): the same ops in another order, and a slowest stage no worse than the best ranges of
 * Kahn's order give. */
#include "fuzz_file.h"
#include "mpress/json.h"
#include "mpress/model.h"
#include "mpress/profile.h"

/* The least slowest stage of `stages` contiguous ranges of p's op order. */
static double ranges_best(const struct mpress_profile *p, int stages)
{
    int n = p->n_ops;
    double *best = malloc((size_t)(n + 1) * sizeof(double)), *next = malloc((size_t)(n + 1) *
                                                                            sizeof(double));
    FUZZ_ASSERT(best && next, "out of memory");
    double *pre = calloc((size_t)n + 1, sizeof(double));
    FUZZ_ASSERT(pre != NULL, "out of memory");
    for (int i = 0; i < n; i++)
        pre[i + 1] = pre[i] + p->ops[i].fwd_s + p->ops[i].bwd_s;
    for (int j = 0; j <= n; j++)
        best[j] = j ? pre[j] : -1;
    for (int k = 1; k < stages; k++) {
        for (int j = 0; j <= n; j++) {
            next[j] = -1;
            for (int i = 1; i < j; i++) {
                if (best[i] < 0)
                    continue;
                double m = best[i] > pre[j] - pre[i] ? best[i] : pre[j] - pre[i];
                if (next[j] < 0 || m < next[j])
                    next[j] = m;
            }
        }
        double *t = best;
        best = next;
        next = t;
    }
    double r = best[n];
    free(best);
    free(next);
    free(pre);
    return r;
}

static void check_stages(const char *file, const struct mpress_profile *p, int stages)
{
    struct mpress_profile q;
    struct mpress_error err;
    mpress_profile_init(&q);
    mpress_error_clear(&err);
    double got = -1;
    int rc = mpress_profile_import_pipedream_stages(file, stages, &q, &got, &err);
    FUZZ_CHECK_ERROR(rc, err);
    FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EINPUT || rc == MPRESS_EUSAGE,
                "--stages %d: rc %d: %s", stages, rc, err.text);
    if (rc == MPRESS_OK) {
        FUZZ_ASSERT(q.n_ops == p->n_ops, "--stages %d: %d ops, %d without", stages, q.n_ops,
                    p->n_ops);
        char *seen = calloc((size_t)p->n_ops + 1, 1);
        FUZZ_ASSERT(seen != NULL, "out of memory");
        for (int i = 0; i < q.n_ops; i++) {
            int k = 0;
            while (k < p->n_ops && strcmp(p->ops[k].name, q.ops[i].name) != 0)
                k++;
            FUZZ_ASSERT(k < p->n_ops && !seen[k], "--stages %d: op %s is not one of the "
                        "import's, or twice", stages, q.ops[i].name);
            seen[k] = 1;
        }
        free(seen);
        double kahn = ranges_best(p, stages);
        FUZZ_ASSERT(kahn < 0 || got <= kahn * (1 + 1e-9) + 1e-12,
                    "--stages %d: slowest stage %g, Kahn's order allows %g", stages, got, kahn);
    }
    mpress_profile_finish(&q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *file = fuzz_file(0, data, size);
    struct mpress_pipedream_graph g;
    struct mpress_error err;
    memset(&g, 0, sizeof(g));
    mpress_error_clear(&err);
    int rc = mpress_pipedream_load(file, &g, &err);
    FUZZ_CHECK_ERROR(rc, err);
    FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EINPUT, "rc %d: %s", rc, err.text);
    if (rc == MPRESS_OK) {
        char *seen = calloc((size_t)g.n_nodes + 1, 1);
        FUZZ_ASSERT(seen != NULL, "out of memory");
        for (int i = 0; i < g.n_nodes; i++) {
            FUZZ_ASSERT(g.order[i] >= 0 && g.order[i] < g.n_nodes && !seen[g.order[i]],
                        "order[%d] = %d is not a permutation", i, g.order[i]);
            seen[g.order[i]] = 1;
        }
        free(seen);
    }
    mpress_pipedream_finish(&g);

    struct mpress_profile p, p2;
    mpress_profile_init(&p);
    mpress_profile_init(&p2);
    mpress_error_clear(&err);
    int rc2 = mpress_profile_import_pipedream(file, &p, &err);
    FUZZ_CHECK_ERROR(rc2, err);
    FUZZ_ASSERT(rc2 == MPRESS_OK || rc2 == MPRESS_EINPUT, "import rc %d: %s", rc2, err.text);
    FUZZ_ASSERT(rc != MPRESS_OK || rc2 == MPRESS_OK || rc2 == MPRESS_EINPUT,
                "graph loads but import fails with %d", rc2);
    if (rc2 == MPRESS_OK) {
        json_t *j = mpress_profile_to_json(&p);
        char *s = j ? mpress_json_dumps(j) : NULL;
        FUZZ_ASSERT(s != NULL, "imported profile did not serialize");
        mpress_error_clear(&err);
        int rc3 = mpress_profile_load(fuzz_file(1, s, strlen(s)), &p2, &err);
        FUZZ_ASSERT(rc3 == MPRESS_OK, "imported profile does not load: %s: %s", err.path,
                    err.text);
        free(s);
        json_decref(j);
        if (p.n_ops <= 64)
            check_stages(file, &p, 1 + (int)(size % 3));
    }
    mpress_profile_finish(&p2);
    mpress_profile_finish(&p);
    return 0;
}
