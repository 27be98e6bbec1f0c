/* libFuzzer target: topology dump imports (mpress_topology_import: `nvidia-smi topo -m` text
 * in lib/topo/import_smi.c, NCCL topology XML in lib/topo/import_xml.c; the kind is detected
 * from the first character). Built twice, as fuzz_topo_smi and fuzz_topo_xml, with their own
 * seeds and dictionaries; the code is the same. An imported topology saves to JSON that loads
 * as a mpress-topology and renders. */
#include "fuzz_file.h" /* first: it sets _GNU_SOURCE; includes <string.h> */
#include "mpress/json.h"
#include "mpress/topology.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mpress_topology t, t2;
    struct mpress_error err;
    char notes[4096];
    mpress_error_clear(&err);
    int rc = mpress_topology_import(fuzz_file(0, data, size), &t, notes, sizeof(notes), &err);
    FUZZ_CHECK_ERROR(rc, err);
    /* A well-formed dump that implies no GPU model asks for --gpu (MPRESS_EUSAGE, exit 2). */
    FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EINPUT ||
                    (rc == MPRESS_EUSAGE && strstr(err.text, "--gpu") != NULL),
                "rc %d: %s", rc, err.text);
    if (rc != MPRESS_OK)
        return 0;
    json_t *j = mpress_topology_to_json(&t);
    char *s = j ? mpress_json_dumps(j) : NULL;
    FUZZ_ASSERT(s != NULL, "imported topology did not serialize");
    mpress_error_clear(&err);
    rc = mpress_topology_load(fuzz_file(1, s, strlen(s)), &t2, &err);
    FUZZ_ASSERT(rc == MPRESS_OK, "imported topology does not load: %s: %s", err.path, err.text);
    char *r = mpress_topology_render(&t2);
    free(r);
    free(s);
    json_decref(j);
    return 0;
}
