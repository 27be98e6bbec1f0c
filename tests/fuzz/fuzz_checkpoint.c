/* libFuzzer target: the runtime's checkpoint files (mpress_checkpoint_load, docs/formats.md,
 * "Checkpoint") for one small GPT with bf16 weights and AdamW (every stored part: weights,
 * fp32 master, momentum, variance). Refused with MPRESS_EINPUT and a message, or loaded; a
 * loaded checkpoint saves to a file that loads again to the same parameters and step, and
 * saving that gives the same bytes.
 *
 * The seed corpus is written by the target itself: with MPRESS_FUZZ_WRITE_SEED=FILE it saves
 * a valid checkpoint of its model to FILE and exits (scripts/fuzz does this). */
#include "fuzz_file.h" /* first: it asks for _GNU_SOURCE (memfd_create) */

#include <stdint.h>

#include "mpress/json.h"
#include "mpress/model.h"
#include "runtime_internal.h"

static struct mpress_model model;
static struct mpress_host_params params, again;
static char dir[] = "/tmp/mpress-fuzz-ckpt-XXXXXX";
static char out[2][256];
static const uint64_t seed = 7;

static void fail(const char *what, const struct mpress_error *err)
{
    fprintf(stderr, "fuzz_checkpoint: %s: %s\n", what, err->text);
    abort();
}

static void cleanup(void)
{
    for (int i = 0; i < 2; i++)
        unlink(out[i]);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    struct mpress_model_config c;
    memset(&c, 0, sizeof(c));
    snprintf(c.name, sizeof(c.name), "fuzz-gpt");
    snprintf(c.family, sizeof(c.family), "gpt");
    c.layers = 1, c.hidden = 8, c.heads = 2, c.ffn = 32, c.seq = 4, c.vocab = 16;
    c.micro_batch = 1;
    snprintf(c.dtype, sizeof(c.dtype), "bf16");
    snprintf(c.optimizer, sizeof(c.optimizer), "adam");
    struct mpress_error err;
    mpress_error_clear(&err);
    if (mpress_model_config_check(&c, &err) || mpress_model_build(&c, &model, &err))
        fail("model", &err);
    if (mpress_host_params_create(&model, seed, &params, &err) ||
        mpress_host_params_create(&model, seed, &again, &err))
        fail("parameters", &err);
    const char *seed_file = getenv("MPRESS_FUZZ_WRITE_SEED");
    if (seed_file) {
        if (mpress_checkpoint_save(seed_file, &model, &params, 3, seed, &err))
            fail(seed_file, &err);
        exit(0);
    }
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        abort();
    }
    for (int i = 0; i < 2; i++)
        snprintf(out[i], sizeof(out[i]), "%s/%d.ckpt", dir, i);
    atexit(cleanup);
    return 0;
}

static int same_params(const struct mpress_host_params *a, const struct mpress_host_params *b)
{
    for (int i = 0; i < a->n; i++) {
        const struct mpress_host_param *p = &a->p[i], *q = &b->p[i];
        size_t n4 = (size_t)p->n * sizeof(float);
        if (memcmp(p->w, q->w, (size_t)p->n * (size_t)mpress_dtype_size(p->dtype)) ||
            (p->master && memcmp(p->master, q->master, n4)) ||
            (p->m && memcmp(p->m, q->m, n4)) || (p->v && memcmp(p->v, q->v, n4)))
            return 0;
    }
    return 1;
}

static char *slurp(const char *file, size_t *size)
{
    char *text = NULL;
    struct mpress_error err;
    mpress_error_clear(&err);
    if (mpress_read_file(file, 0, &text, size, &err))
        fail(file, &err);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mpress_error err;
    mpress_error_clear(&err);
    uint32_t step = 0;
    int rc = mpress_checkpoint_load(fuzz_file(0, data, size), &model, &params, &step, seed, &err);
    FUZZ_CHECK_ERROR(rc, err);
    FUZZ_ASSERT(rc == MPRESS_OK || rc == MPRESS_EINPUT, "rc %d: %s", rc, err.text);
    if (rc != MPRESS_OK)
        return 0;
    rc = mpress_checkpoint_save(out[0], &model, &params, step, seed, &err);
    FUZZ_ASSERT(rc == MPRESS_OK, "a loaded checkpoint does not save: %s", err.text);
    uint32_t step2 = 0;
    rc = mpress_checkpoint_load(out[0], &model, &again, &step2, seed, &err);
    FUZZ_ASSERT(rc == MPRESS_OK, "a saved checkpoint does not load: %s", err.text);
    FUZZ_ASSERT(step2 == step, "step %u saved, %u loaded", step, step2);
    FUZZ_ASSERT(same_params(&params, &again), "saved and loaded parameters differ");
    rc = mpress_checkpoint_save(out[1], &model, &again, step2, seed, &err);
    FUZZ_ASSERT(rc == MPRESS_OK, "second save: %s", err.text);
    size_t n0, n1;
    char *a = slurp(out[0], &n0), *b = slurp(out[1], &n1);
    FUZZ_ASSERT(n0 == n1 && memcmp(a, b, n0) == 0, "saved twice, the files differ");
    free(a);
    free(b);
    return 0;
}
