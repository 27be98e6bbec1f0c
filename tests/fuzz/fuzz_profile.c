/* libFuzzer target: mpress-profile files (mpress_profile_load). Refused with MPRESS_EINPUT and
 * a message, or loaded; a loaded profile saves to JSON that loads again to the same JSON. */
#include "fuzz_file.h"
#include "mpress/json.h"
#include "mpress/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mpress_profile p, p2;
    struct mpress_error err;
    mpress_error_clear(&err);
    mpress_profile_init(&p);
    mpress_profile_init(&p2);
    int rc = mpress_profile_load(fuzz_file(0, data, size), &p, &err);
    FUZZ_CHECK_ERROR(rc, err);
    FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EINPUT, "rc %d: %s", rc, err.text);
    if (rc == MPRESS_OK) {
        json_t *j = mpress_profile_to_json(&p);
        char *s = j ? mpress_json_dumps(j) : NULL;
        FUZZ_ASSERT(s != NULL, "profile did not serialize");
        mpress_error_clear(&err);
        rc = mpress_profile_load(fuzz_file(1, s, strlen(s)), &p2, &err);
        FUZZ_ASSERT(rc == MPRESS_OK, "saved profile does not load: %s: %s", err.path, err.text);
        json_t *j2 = mpress_profile_to_json(&p2);
        char *s2 = j2 ? mpress_json_dumps(j2) : NULL;
        FUZZ_ASSERT(s2 && strcmp(s, s2) == 0, "saved, loaded and saved again differs");
        free(s2);
        json_decref(j2);
        free(s);
        json_decref(j);
    }
    mpress_profile_finish(&p2);
    mpress_profile_finish(&p);
    return 0;
}
