/* libFuzzer target: CUPTI event files (lib/profile/trace_load.c, through the buffer entry
 * mpress_trace_parse, and mpress_trace_load on the same bytes) and their analysis into a
 * profile (lib/profile/trace_analyse.c). Both entries give the same verdict; an analysed
 * profile saves to JSON that loads as a mpress-profile. */
#include "fuzz_file.h"
#include "mpress/json.h"
#include "mpress/profile.h"
#include "mpress/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mpress_trace *t = NULL, *t2 = NULL;
    struct mpress_error err, err2;
    mpress_error_clear(&err);
    mpress_error_clear(&err2);
    int rc = mpress_trace_parse((const char *)data, size, "fuzz.events", &t, &err);
    FUZZ_CHECK_ERROR(rc, err);
    FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EINPUT, "rc %d: %s", rc, err.text);
    int rc2 = mpress_trace_load(fuzz_file(0, data, size), &t2, &err2);
    FUZZ_ASSERT(rc == rc2, "parse says %d (%s), load says %d (%s)", rc, err.text, rc2, err2.text);
    mpress_trace_destroy(t2);
    if (rc != MPRESS_OK)
        return 0;
    struct mpress_trace_options opt;
    struct mpress_trace_summary sum;
    struct mpress_profile p, p2;
    mpress_trace_options_init(&opt);
    mpress_profile_init(&p2);
    mpress_error_clear(&err);
    rc = mpress_trace_analyse(t, &opt, &p, &sum, &err);
    FUZZ_CHECK_ERROR(rc, err);
    FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EINPUT, "analyse rc %d: %s", rc, err.text);
    if (rc == MPRESS_OK) {
        json_t *j = mpress_profile_to_json(&p);
        char *s = j ? mpress_json_dumps(j) : NULL;
        FUZZ_ASSERT(s != NULL, "analysed profile did not serialize");
        mpress_error_clear(&err);
        rc = mpress_profile_load(fuzz_file(1, s, strlen(s)), &p2, &err);
        FUZZ_ASSERT(rc == MPRESS_OK, "analysed profile does not load: %s: %s", err.path,
                    err.text);
        free(s);
        json_decref(j);
    }
    mpress_profile_finish(&p2);
    mpress_profile_finish(&p);
    mpress_trace_destroy(t);
    return 0;
}
