/* The reference trainer learns: gpt-tiny (16-bit config: bf16 storage, fp32 master weights and
 * AdamW) trained on a corpus generated here (corpus()) for STEPS steps of MICRO_BATCHES
 * micro-batches; the mean loss of the last tenth of the steps must fall below RATIO times the
 * first step's loss. The first loss must also be near ln(vocab), what initial weights of std
 * 0.02 predict. With LR 0 the loss does not fall and the test fails (6.2195 against 6.2469 at
 * 40 steps).
 * Usage: test_learn STEPS MICRO_BATCHES RATIO [LR] */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../../lib/runtime/host_ops.h"

/* splitmix64 (Steele, Lea and Flood 2014): one 64-bit state, the same stream on every libc */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* a number in [0, n) */
static unsigned below(uint64_t *state, unsigned n)
{
    return (unsigned)(splitmix64(state) % n);
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define PICK(state, a) ((a)[below(state, (unsigned)COUNT(a))])

struct text {
    uint8_t *d;
    size_t n, cap;
};

/* Appends one formatted sentence; one that would not fit is dropped (the caller stops first). */
static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf((char *)t->d + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    if (k > 0 && (size_t)k < t->cap - t->n)
        t->n += (size_t)k;
}

/* A made-up name of 2 to 4 syllables, each a consonant and a vowel ("kalomi"): letters that
 * follow a pattern, but which of them come cannot be learnt. */
static const char *name(uint64_t *state, char buf[16])
{
    static const char consonants[] = "bdfgklmnprstvz", vowels[] = "aeiou";
    unsigned syllables = 2 + below(state, 3), k = 0;
    for (unsigned i = 0; i < syllables; i++) {
        buf[k++] = consonants[below(state, sizeof(consonants) - 1)];
        buf[k++] = vowels[below(state, sizeof(vowels) - 1)];
    }
    buf[k] = 0;
    return buf;
}

/* CORPUS_BYTES of English-like sentences about pipelines, GPUs, tensors and micro-batches, made
 * here from a fixed seed so that the training data, and so the losses, do not move when anything
 * else in the repository changes. Each sentence is one of 12 templates filled from short word
 * lists, numbers and made-up names. The fixed words, the grammar of each template, the shape
 * of names and numbers and a few relations (a micro-batch leaving stage s enters stage s + 1,
 * a step's last two digits are its loss's decimals) are learnable; which word, digit or
 * syllable comes is not, so the loss falls well below ln(vocab) but stays far above zero. */
#define CORPUS_BYTES (256u << 10)
static uint8_t *corpus(size_t *n)
{
    static const char *const tensors[] = {"activations",  "gradients",      "weights",
                                          "stage inputs", "optimizer states", "attention scores",
                                          "logits",       "embeddings",     "master weights",
                                          "send buffers"};
    static const char *const moves[] = {"swaps",      "copies", "evicts",   "prefetches",
                                        "recomputes", "sends",  "receives", "frees"};
    static const char *const places[] = {"the host",    "a peer GPU",     "its neighbour",
                                         "host memory", "the next stage", "the previous stage"};
    static const char *const links[] = {"NVLink", "PCIe", "the network", "a switch", "InfiniBand",
                                        "Ethernet"};
    static const char *const agents[] = {"scheduler", "planner",    "executor",  "profiler",
                                         "runtime",   "cost model", "allocator"};
    static const char *const acts[] = {"delays", "orders",   "measures", "counts",
                                       "predicts", "checks", "overlaps", "bounds"};
    static const char *const events[] = {"prefetch", "eviction",  "all-reduce", "send",
                                         "receive",  "copy",      "recompute",  "optimizer step"};
    static const char *const adjs[] = {"slow", "fast", "large", "small", "late", "early",
                                       "pending", "ready", "busy", "idle", "tight", "loose"};
    static const char *const passes[] = {"forward", "backward"};
    static const char *const types[] = {"bf16", "fp32", "fp16", "int8"};
    static const char *const units[] = {"KiB", "MiB", "GiB"};
    struct text t = {malloc(CORPUS_BYTES), 0, CORPUS_BYTES};
    uint64_t s = 20240601;
    /* Every draw is a statement or a declarator of its own: the order in which a call's
     * arguments are evaluated is unspecified, and the bytes must not depend on the compiler. */
    while (t.d && t.n + 160 < t.cap) {
        unsigned stage = below(&s, 8), gpu = below(&s, 8), mb = below(&s, 64);
        unsigned a = below(&s, 100), b = below(&s, 100);
        const char *tensor = PICK(&s, tensors), *pass = PICK(&s, passes);
        const char *agent = PICK(&s, agents), *act = PICK(&s, acts);
        const char *event = PICK(&s, events), *adj = PICK(&s, adjs);
        const char *move = PICK(&s, moves), *place = PICK(&s, places);
        const char *link = PICK(&s, links), *unit = PICK(&s, units), *type = PICK(&s, types);
        char nm[16];
        name(&s, nm);
        switch (below(&s, 12)) {
        case 0:
            put(&t, "Stage %u runs the %s pass of micro-batch %u of job %s on GPU %u.\n", stage,
                pass, mb, nm, gpu);
            break;
        case 1:
            put(&t, "GPU %u %s the %s %s of layer %u to %s.\n", gpu, move, adj, tensor, a, place);
            break;
        case 2:
            put(&t, "The %s of job %s take %u.%u ms over %s.\n", tensor, nm, a, b % 10, link);
            break;
        case 3:
            put(&t, "After the %s pass of micro-batch %u, stage %u frees %u %s of job %s.\n",
                pass, mb, stage, 1 + a, unit, nm);
            break;
        case 4:
            put(&t, "Micro-batch %u leaves stage %u and enters stage %u.\n", mb, stage % 7,
                stage % 7 + 1);
            break;
        case 5:
            put(&t, "Layer %u holds tensor %s of %u x %u %s values.\n", a, nm, 16u << (b % 8),
                16u << (b / 8 % 8), type);
            break;
        case 6:
            put(&t, "The planner puts layers %u to %u on GPU %u.\n\n", stage * 3, stage * 3 + 2,
                gpu);
            break;
        case 7:
            put(&t, "The %s %s the %s %s of job %s before its %s pass.\n", agent, act, adj, event,
                nm, pass);
            break;
        case 8:
            put(&t, "Between GPU %u and GPU %u, %s moves %u.%u GB/s.\n", gpu,
                (gpu + 1 + b % 7) % 8, link, 1 + a * 6, b % 10);
            break;
        case 9:
            put(&t, "On GPU %u of node %s the peak is %u MiB, %u %% of its memory.\n", gpu, nm,
                1 + a * 800 + b, 1 + b);
            break;
        case 10:
            put(&t, "When memory is %s, the %s %s the %s of model %s.\n", adj, agent, act, tensor,
                nm);
            break;
        default:
            put(&t, "Step %u ends with a loss of %u.%02u.\n", a * 100 + b, mb % 11, b);
            break;
        }
    }
    *n = t.n;
    return t.d;
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
    /* One batch's loss at initialisation: ln(vocab) give or take the batch's tokens (0.1 % on
     * the generated corpus). */
    CHECK_NEAR(first, log((double)c.vocab), 0.05);
    CHECK_MSG(tail < ratio * first, "mean loss of the last %d steps %.4f, first %.4f", tail_n,
              tail, first);
    mpress_host_trainer_destroy(t);
    free(data);
    return check_done();
}
