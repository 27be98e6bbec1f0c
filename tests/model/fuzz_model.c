/* Mutation fuzzing of the two text inputs of lib/model: PipeDream graphs and mpress-model
 * config files. Each mutant must either load (and then satisfy the invariants) or fail with
 * MPRESS_EINPUT naming the file; never crash, hang or leak (run it under ASan to see leaks).
 * Deterministic: a fixed xorshift seed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mpress/model.h"

static const char graph[] =
    "node1 -- Input0 -- forward_compute_time=0.000, backward_compute_time=0.000, "
    "activation_size=0.0, parameter_size=0.000\n"
    "node2 -- LSTM(8, 8) -- forward_compute_time=1.5, backward_compute_time=2.5, "
    "activation_size=[64.0; 8.0; 8.0], parameter_size=1088.000\n"
    "node3 -- __getitem__(0) -- forward_compute_time=0.0, backward_compute_time=0.0, "
    "activation_size=64.0, parameter_size=0.000\n"
    "node4 -- Add -- forward_compute_time=0.01, backward_compute_time=0.0, "
    "activation_size=64.0, parameter_size=0.000\n"
    "\tnode1 -- node2\n\tnode2 -- node3\n\tnode3 -- node4\n\tnode1 -- node4\n";

static const char config[] =
    "{\"format\": \"mpress-model\", \"version\": 1, \"name\": \"f\", \"family\": \"bert\",\n"
    " \"layers\": 2, \"hidden\": 64, \"heads\": 4, \"seq\": 16, \"vocab\": 100,\n"
    " \"micro_batch\": 2, \"dtype\": \"bf16\", \"optimizer\": \"sgd\", \"flash_attention\": "
    "false}\n";

static unsigned long long rng = 0x9e3779b97f4a7c15ull;
static unsigned next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng >> 11);
}

/* One to four edits: replace, delete or insert a byte, or splice in a token that matters to
 * the parsers. */
static size_t mutate(const char *in, size_t n, char *out, size_t cap)
{
    static const char *const tokens[] = {" -- ", "\t", "\n", "[", "]", ";", ",", "=", "-1",
                                         "1e309", "99999999999999999999", "\"", "{", "}",
                                         "node9", "0", ":", "null", "true"};
    memcpy(out, in, n);
    int edits = 1 + (int)(next() % 4);
    for (int e = 0; e < edits && n > 0; e++) {
        size_t at = next() % n;
        switch (next() % 4) {
        case 0:
            out[at] = (char)(32 + next() % 95);
            break;
        case 1:
            memmove(out + at, out + at + 1, n - at - 1);
            n--;
            break;
        case 2:
        case 3: {
            const char *t = tokens[next() % (sizeof(tokens) / sizeof(tokens[0]))];
            size_t k = strlen(t);
            if (n + k >= cap)
                break;
            memmove(out + at + k, out + at, n - at);
            memcpy(out + at, t, k);
            n += k;
            break;
        }
        }
    }
    return n;
}

static void put(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

int main(void)
{
    char dir[] = "/tmp/mpress-fuzz-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char gpath[256], cpath[256];
    snprintf(gpath, sizeof(gpath), "%s/g.txt", dir);
    snprintf(cpath, sizeof(cpath), "%s/m.json", dir);
    static char buf[8192];
    int loaded = 0, refused = 0;
    for (int i = 0; i < 600; i++) {
        size_t n = mutate(graph, sizeof(graph) - 1, buf, sizeof(buf));
        put(gpath, buf, n);
        struct mpress_profile p;
        struct mpress_error err;
        mpress_profile_init(&p);
        int rc = mpress_profile_import_pipedream(gpath, &p, &err);
        CHECK_MSG(rc == 0 || rc == MPRESS_EINPUT, "rc %d: %s", rc, err.text);
        if (rc == 0) {
            loaded++;
            uint64_t total = 0;
            for (int k = 0; k < p.n_ops; k++)
                total += p.ops[k].n_tensors ? p.ops[k].tensors[0].bytes : 0;
            for (int k = 0; k < p.n_ops; k++)
                CHECK(p.ops[k].output_bytes <= total);
            CHECK(p.n_ops >= 1);
        } else {
            refused++;
            CHECK_STR(err.file, gpath);
        }
        mpress_profile_finish(&p);
    }
    for (int i = 0; i < 600; i++) {
        size_t n = mutate(config, sizeof(config) - 1, buf, sizeof(buf));
        put(cpath, buf, n);
        struct mpress_model_config c;
        struct mpress_error err;
        int rc = mpress_model_config_load(cpath, &c, &err);
        CHECK_MSG(rc == 0 || rc == MPRESS_EINPUT, "rc %d: %s", rc, err.text);
        if (rc == 0) {
            loaded++;
            CHECK_INT(mpress_model_config_check(&c, &err), 0);
        } else {
            refused++;
            CHECK_STR(err.file, cpath);
        }
    }
    fprintf(stderr, "%d mutants loaded, %d refused\n", loaded, refused);
    CHECK(loaded > 0 && refused > 0);
    unlink(gpath);
    unlink(cpath);
    rmdir(dir);
    return check_done();
}
