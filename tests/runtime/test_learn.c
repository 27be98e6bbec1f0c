/* The reference trainer learns: gpt-tiny (16-bit config: bf16 storage, fp32 master weights and
 * AdamW) trained on the repository's docs/ for STEPS steps of MICRO_BATCHES micro-batches; the
 * mean loss of the last tenth of the steps must fall below RATIO times the first step's loss.
 * The first loss must also be near ln(vocab), what initial weights of std 0.02 predict.
 * Usage: test_learn STEPS MICRO_BATCHES RATIO [LR] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../../lib/runtime/host_ops.h"

/* markdown files of docs/ in the source tree, concatenated in a fixed order */
static uint8_t *corpus(size_t *n)
{
    static const char *const files[] = {"cost-model.md", "models.md", "simulator.md",
                                        "topologies.md", "formats.md", "benchmarks.md"};
    const char *src = getenv("MPRESS_SRCDIR");
    size_t cap = 1 << 21;
    uint8_t *d = malloc(cap);
    *n = 0;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/docs/%s", src ? src : ".", files[i]);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        *n += fread(d + *n, 1, cap - *n, f);
        fclose(f);
    }
    return d;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 40;
    int mbs = argc > 2 ? atoi(argv[2]) : 1;
    double ratio = argc > 3 ? atof(argv[3]) : 0.8;
    size_t n;
    uint8_t *data = corpus(&n);
    CHECK_MSG(n > 10000, "corpus of %zu bytes", n);
    struct mpress_model_config c;
    CHECK(mpress_model_find("gpt-tiny", &c) == 0);
    struct mpress_host_trainer_options o;
    mpress_host_trainer_options_default(&o);
    if (argc > 4)
        o.optim.lr = (float)atof(argv[4]);
    struct mpress_host_trainer *t;
    struct mpress_error err;
    if (mpress_host_trainer_create(&c, &o, data, n, &t, &err) != 0) {
        fprintf(stderr, "%s\n", err.text);
        return 1;
    }
    double first = 0, tail = 0;
    int tail_n = steps / 10 > 0 ? steps / 10 : 1;
    for (int s = 0; s < steps; s++) {
        double loss;
        if (mpress_host_trainer_step(t, mbs, &loss, &err) != 0) {
            fprintf(stderr, "%s\n", err.text);
            return 1;
        }
        if (s == 0)
            first = loss;
        if (s >= steps - tail_n)
            tail += loss / tail_n;
        if (s % 10 == 0 || s == steps - 1)
            fprintf(stderr, "step %d loss %.4f\n", s + 1, loss);
    }
    fprintf(stderr, "first loss %.4f, mean of the last %d steps %.4f (%.3f of the first)\n", first,
            tail_n, tail, tail / first);
    /* One batch's loss at initialisation: ln(vocab) give or take the batch's tokens, which move
     * with every edit of the docs it samples (0.5 % and 2.4 % on two revisions). */
    CHECK_NEAR(first, log((double)c.vocab), 0.05);
    CHECK_MSG(tail < ratio * first, "mean loss of the last %d steps %.4f, first %.4f", tail_n,
              tail, first);
    mpress_host_trainer_destroy(t);
    free(data);
    return check_done();
}
