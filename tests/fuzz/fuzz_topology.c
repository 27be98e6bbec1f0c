/* libFuzzer target: mpress-topology files (mpress_topology_load). An input is either refused
 * with MPRESS_EINPUT and a message, or loaded; a loaded topology saves to JSON that loads
 * again to the same JSON (serialization is a fixed point). */
#include "fuzz_file.h"
#include "mpress/json.h"
#include "mpress/topology.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mpress_topology t, t2;
    struct mpress_error err;
    mpress_error_clear(&err);
    int rc = mpress_topology_load(fuzz_file(0, data, size), &t, &err);
    FUZZ_CHECK_ERROR(rc, err);
    FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EINPUT, "rc %d: %s", rc, err.text);
    if (rc != MPRESS_OK)
        return 0;
    json_t *j = mpress_topology_to_json(&t);
    char *s = j ? mpress_json_dumps(j) : NULL;
    FUZZ_ASSERT(s != NULL, "topology did not serialize");
    mpress_error_clear(&err);
    rc = mpress_topology_load(fuzz_file(1, s, strlen(s)), &t2, &err);
    FUZZ_ASSERT(rc == MPRESS_OK, "saved topology does not load: %s: %s", err.path, err.text);
    json_t *j2 = mpress_topology_to_json(&t2);
    char *s2 = j2 ? mpress_json_dumps(j2) : NULL;
    FUZZ_ASSERT(s2 && strcmp(s, s2) == 0, "saved, loaded and saved again differs");
    char *r = mpress_topology_render(&t);
    free(r);
    free(s2);
    json_decref(j2);
    free(s);
    json_decref(j);
    return 0;
}
