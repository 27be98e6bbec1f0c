/* libFuzzer target: mpress-plan files (mpress_plan_load) and mpress_validate_file. Refused
 * with MPRESS_EINPUT and a message, or loaded; a loaded plan saves to JSON that loads again
 * to the same JSON. */
#include "fuzz_file.h"
#include "mpress/json.h"
#include "mpress/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mpress_plan pl, pl2;
    struct mpress_error err;
    mpress_error_clear(&err);
    mpress_plan_init(&pl);
    mpress_plan_init(&pl2);
    const char *file = fuzz_file(0, data, size);
    int rc = mpress_plan_load(file, &pl, &err);
    FUZZ_CHECK_ERROR(rc, err);
    FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EINPUT, "rc %d: %s", rc, err.text);
    if (rc == MPRESS_OK) {
        json_t *j = mpress_plan_to_json(&pl);
        char *s = j ? mpress_json_dumps(j) : NULL;
        FUZZ_ASSERT(s != NULL, "plan did not serialize");
        mpress_error_clear(&err);
        rc = mpress_plan_load(fuzz_file(1, s, strlen(s)), &pl2, &err);
        FUZZ_ASSERT(rc == MPRESS_OK, "saved plan does not load: %s: %s", err.path, err.text);
        json_t *j2 = mpress_plan_to_json(&pl2);
        char *s2 = j2 ? mpress_json_dumps(j2) : NULL;
        FUZZ_ASSERT(s2 && strcmp(s, s2) == 0, "saved, loaded and saved again differs");
        free(s2);
        json_decref(j2);
        free(s);
        json_decref(j);
    }
    /* validate reads any of the three formats: the same verdict class as the loader's. */
    char kind[32];
    struct mpress_error verr;
    mpress_error_clear(&verr);
    int vrc = mpress_validate_file(file, kind, sizeof(kind), &verr);
    FUZZ_CHECK_ERROR(vrc, verr);
    FUZZ_ASSERT(vrc == MPRESS_OK || vrc == MPRESS_EINPUT, "validate rc %d: %s", vrc, verr.text);
    mpress_plan_finish(&pl2);
    mpress_plan_finish(&pl);
    return 0;
}
