/* libFuzzer target: PipeDream profiler graphs (lib/model/pipedream.c): the graph reader
 * (mpress_pipedream_load) and the import as a profile (mpress_profile_import_pipedream). A
 * loaded graph has its topological order as a permutation of its nodes; an imported profile
 * saves to JSON that loads as a mpress-profile. */
#include "fuzz_file.h"
#include "mpress/json.h"
#include "mpress/model.h"
#include "mpress/profile.h"

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
    }
    mpress_profile_finish(&p2);
    mpress_profile_finish(&p);
    return 0;
}
