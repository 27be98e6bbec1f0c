/* libFuzzer target: mpress-model config files (mpress_model_config_load). A loaded config
 * passes mpress_model_config_check; a small one is also built into its op list and its
 * analytic profile. */
#include "fuzz_file.h"
#include "mpress/model.h"
#include "mpress/profile.h"
#include "mpress/topology.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mpress_model_config m;
    struct mpress_error err;
    mpress_error_clear(&err);
    memset(&m, 0, sizeof(m));
    int rc = mpress_model_config_load(fuzz_file(0, data, size), &m, &err);
    FUZZ_CHECK_ERROR(rc, err);
    FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EINPUT, "rc %d: %s", rc, err.text);
    if (rc != MPRESS_OK)
        return 0;
    mpress_error_clear(&err);
    rc = mpress_model_config_check(&m, &err);
    FUZZ_ASSERT(rc == MPRESS_OK, "loaded config fails its check: %s: %s", err.path, err.text);
    if (m.layers <= 64) { /* keep each run fast: the op list grows with layers */
        struct mpress_model model;
        memset(&model, 0, sizeof(model));
        mpress_error_clear(&err);
        rc = mpress_model_build(&m, &model, &err);
        FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EUSAGE, "build rc %d: %s", rc, err.text);
        if (rc == MPRESS_OK) {
            (void)mpress_model_params(&model);
            (void)mpress_model_flops(&model);
            /* and its analytic profile on a V100, as `mpress profile --model-config` does */
            struct mpress_profile p;
            mpress_profile_init(&p);
            mpress_error_clear(&err);
            rc = mpress_profile_analytic(&m, mpress_gpu_spec_find("v100"), &p, &err);
            FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EUSAGE || rc == MPRESS_EINPUT,
                        "analytic rc %d: %s", rc, err.text);
            mpress_profile_finish(&p);
        }
        mpress_model_finish(&model);
    }
    return 0;
}
