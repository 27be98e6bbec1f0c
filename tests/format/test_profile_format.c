/* mpress-profile v1: init/copy/finish, sums, round trip, deterministic bytes, the shipped
 * sample file, and one case per rejection path of the strict loader. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "samples.h"

static int load_profile(const char *file, struct mpress_error *err)
{
    struct mpress_profile p;
    mpress_profile_init(&p);
    int rc = mpress_profile_load(file, &p, err);
    /* a failed load leaves nothing allocated in *out */
    if (rc != 0 && (p.ops != NULL || p.n_ops != 0))
        return -1;
    mpress_profile_finish(&p);
    return rc;
}

static void check_equal(const struct mpress_profile *a, const struct mpress_profile *b)
{
    CHECK_STR(a->source, b->source);
    CHECK_STR(a->device, b->device);
    const struct mpress_model_config *x = &a->model, *y = &b->model;
    CHECK_STR(x->name, y->name);
    CHECK_STR(x->family, y->family);
    CHECK_INT(x->layers, y->layers);
    CHECK_INT(x->hidden, y->hidden);
    CHECK_INT(x->heads, y->heads);
    CHECK_INT(x->ffn, y->ffn);
    CHECK_INT(x->seq, y->seq);
    CHECK_INT(x->vocab, y->vocab);
    CHECK_INT(x->micro_batch, y->micro_batch);
    CHECK_STR(x->dtype, y->dtype);
    CHECK_STR(x->optimizer, y->optimizer);
    CHECK_INT(x->flash_attention, y->flash_attention);
    CHECK_INT(a->n_ops, b->n_ops);
    for (int i = 0; i < a->n_ops && i < b->n_ops; i++) {
        const struct mpress_op *o = &a->ops[i], *q = &b->ops[i];
        CHECK_STR(o->name, q->name);
        CHECK_STR(o->kind, q->kind);
        CHECK_INT(o->layer, q->layer);
        /* 10 significant digits: exact for short decimals, within 5e-10 relative otherwise */
        CHECK_NEAR(o->fwd_s, q->fwd_s, 5e-10);
        CHECK_NEAR(o->bwd_s, q->bwd_s, 5e-10);
        CHECK_NEAR(o->fwd_flops, q->fwd_flops, 5e-10);
        CHECK_INT(o->params, q->params);
        CHECK_INT(o->param_bytes, q->param_bytes);
        CHECK_INT(o->grad_bytes, q->grad_bytes);
        CHECK_INT(o->optim_bytes, q->optim_bytes);
        CHECK_INT(o->workspace_bytes, q->workspace_bytes);
        CHECK_INT(o->output_bytes, q->output_bytes);
        CHECK_INT(o->n_tensors, q->n_tensors);
        for (int k = 0; k < o->n_tensors && k < q->n_tensors; k++) {
            CHECK_STR(o->tensors[k].id, q->tensors[k].id);
            CHECK_STR(o->tensors[k].name, q->tensors[k].name);
            CHECK_INT(o->tensors[k].bytes, q->tensors[k].bytes);
            CHECK_NEAR(o->tensors[k].recompute_s, q->tensors[k].recompute_s, 5e-10);
            CHECK_INT(o->tensors[k].recompute_op, q->tensors[k].recompute_op);
        }
    }
}

#define REJECT(doc, path, text, marker)                                                          \
    CHECK(expect_reject(load_profile, doc, path, text, marker) == 0)

int main(void)
{
    struct mpress_profile p, back, copy;
    struct mpress_error err;
    sample_profile(&p);

    /* Sums against the hand-added numbers of sample_profile. */
    CHECK_INT(mpress_profile_saved_bytes(&p), 393216 + 262144 + 524288 + 524289 + 393216 +
                                                  262144 + 524288 + 524289 + 131072 + 512000);
    CHECK_INT(mpress_profile_params(&p), 256000 + 263168 + 525568 + 263168 + 525568 + 512 +
                                             256000 + 0);

    /* Copy is deep: changing the copy leaves the original alone. */
    CHECK_INT(mpress_profile_copy(&copy, &p, &err), 0);
    check_equal(&p, &copy);
    CHECK(copy.ops != p.ops && copy.ops[1].tensors != p.ops[1].tensors);
    copy.ops[1].tensors[0].bytes = 1;
    CHECK_INT(p.ops[1].tensors[0].bytes, 393216);
    mpress_profile_finish(&copy);
    CHECK(copy.ops == NULL && copy.n_ops == 0);
    mpress_profile_finish(&copy); /* finishing twice is harmless */

    /* Round trip, exact bytes twice, and an exact real for a short decimal. */
    const char *f1 = test_path("a.json");
    CHECK_INT(mpress_profile_save(f1, &p, &err), 0);
    char *s1 = read_all(f1, NULL);
    CHECK_INT(mpress_profile_load(f1, &back, &err), 0);
    check_equal(&p, &back);
    CHECK(back.ops[2].fwd_s == 0.00375);
    CHECK(back.ops[3].fwd_s != 0.0); /* 1/3 ms: close, not necessarily equal */
    CHECK_INT(mpress_profile_save(test_path("b.json"), &back, &err), 0);
    char *s2 = read_all(test_path("b.json"), NULL);
    CHECK(s1 && s2 && strcmp(s1, s2) == 0);
    CHECK(s1 && strstr(s1, "\"fwd_s\": 0.0003333333333,") != NULL);
    mpress_profile_finish(&back);
    free(s2);

    const char *src = getenv("MPRESS_SRCDIR");
    if (src) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/tests/format/data/profile.json", src);
        if (getenv("MPRESS_REGEN")) /* on purpose only: MPRESS_REGEN=1 meson test ... */
            CHECK_INT(mpress_profile_save(path, &p, &err), 0);
        char *shipped = read_all(path, NULL);
        CHECK_MSG(shipped && strcmp(shipped, s1) == 0, "%s differs from the saved sample", path);
        free(shipped);
    }

    /* Inconsistent structs are not written. */
    p.ops[4].tensors[1].recompute_op = 99;
    CHECK_INT(mpress_profile_save(test_path("c.json"), &p, &err), MPRESS_ESYSTEM);
    CHECK(strstr(err.text, "ops[4].tensors[1].recompute_op: op 99 does not exist") != NULL);
    CHECK(access(test_path("c.json"), F_OK) != 0);
    p.ops[4].tensors[1].recompute_op = 4;
    p.ops[2].fwd_s = 0.0 / 0.0;
    CHECK_INT(mpress_profile_save(test_path("c.json"), &p, &err), MPRESS_ESYSTEM);
    CHECK(access(test_path("c.json"), F_OK) != 0);
    p.ops[2].fwd_s = 0.00375;

    json_t *base = mpress_profile_to_json(&p);
    CHECK(base != NULL);
#define COPY json_deep_copy(base)
    json_t *m;

    m = COPY; jset(m, "format", json_string("mpress-profile-x"));
    REJECT(m, "format", "expected \"mpress-profile\"", "\"mpress-profile-x\"");
    m = COPY; jset(m, "version", json_integer(0));
    REJECT(m, "version", "unsupported mpress-profile version 0", NULL);
    m = COPY; jset(m, "version", json_string("1"));
    REJECT(m, "version", "expected an integer, got a string", NULL);
    /* missing, mistyped, unknown fields */
    m = COPY; jdel(m, "ops[1].fwd_s");
    REJECT(m, "ops[1].fwd_s", "missing field", NULL);
    m = COPY; jdel(m, "model");
    REJECT(m, "model", "missing field", NULL);
    m = COPY; jset(m, "ops[3].tensors[1].bytes", json_string("256 KiB"));
    REJECT(m, "ops[3].tensors[1].bytes", "expected a non-negative integer, got a string",
           "\"256 KiB\"");
    m = COPY; jset(m, "ops[2].tensors", json_object());
    REJECT(m, "ops[2].tensors", "expected an array, got an object", NULL);
    m = COPY; jset(m, "ops[2].tensors[0]", json_string("x"));
    REJECT(m, "ops[2].tensors[0]", "expected an object", NULL);
    m = COPY; jset(m, "ops[5]", json_null());
    REJECT(m, "ops[5]", "expected an object", NULL);
    m = COPY; jset(m, "model.flash_attention", json_integer(1));
    REJECT(m, "model.flash_attention", "expected a boolean, got an integer", NULL);
    m = COPY; jset(m, "model.colour", json_string("blue"));
    REJECT(m, "model.colour", "unknown field", "\"blue\"");
    m = COPY; jset(m, "ops[6].tensors[0].shape", json_array());
    REJECT(m, "ops[6].tensors[0].shape", "unknown field", NULL);
    m = COPY; jset(m, "source", json_string("guess"));
    REJECT(m, "source", "expected one of \"analytic\", \"cupti\", \"host\", \"import\"",
           "\"guess\"");
    m = COPY; jset(m, "model.dtype", json_string("fp8"));
    REJECT(m, "model.dtype", "expected one of \"fp16\", \"bf16\", \"fp32\"", "\"fp8\"");
    m = COPY; jset(m, "model.optimizer", json_string("lamb"));
    REJECT(m, "model.optimizer", "got \"lamb\"", NULL);
    m = COPY; jset(m, "model.micro_batch", json_integer(0));
    REJECT(m, "model.micro_batch", "expected an integer in [1, ", NULL);
    m = COPY; jset(m, "ops[0].layer", json_integer(-2));
    REJECT(m, "ops[0].layer", "expected an integer in [-1, ", NULL);
    m = COPY; jset(m, "ops[4].name", json_string(""));
    REJECT(m, "ops[4].name", "expected a non-empty string", NULL);
    {
        char longname[200];
        memset(longname, 'x', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = '\0';
        m = COPY; jset(m, "ops[4].name", json_string(longname));
        REJECT(m, "ops[4].name", "string too long (199 bytes, at most 95)", NULL);
    }
    /* negative sizes and times */
    m = COPY; jset(m, "ops[0].param_bytes", json_integer(-4));
    REJECT(m, "ops[0].param_bytes", "got a negative integer", NULL);
    m = COPY; jset(m, "ops[7].output_bytes", json_real(1.5));
    REJECT(m, "ops[7].output_bytes", "expected a non-negative integer, got a real number", NULL);
    m = COPY; jset(m, "ops[1].bwd_s", json_real(-0.5));
    REJECT(m, "ops[1].bwd_s", "expected a non-negative number, got -0.5", NULL);
    m = COPY; jset(m, "ops[2].tensors[1].recompute_s", json_real(-1e-3));
    REJECT(m, "ops[2].tensors[1].recompute_s", "expected a non-negative number", NULL);
    {
        /* bytes beyond int64 in the text: refused while parsing, still with its path */
        char *text = mpress_json_dumps(base);
        char *at = strstr(text, "\"bytes\": 512000") + strlen("\"bytes\": ");
        char big[16384];
        snprintf(big, sizeof(big), "%.*s99999999999999999999%s", (int)(at - text), text,
                 at + strlen("512000"));
        CHECK(expect_reject_text(load_profile, big, "ops[6].tensors[0].bytes",
                                 "integer 99999999999999999999 does not fit in 64 bits",
                                 "99999999999999999999") == 0);
        /* an earlier -2^63 fits (same double as -2^63-1): the report names the real culprit */
        char *layer = strstr(big, "\"layer\": -1") + strlen("\"layer\": ");
        char big2[16500];
        snprintf(big2, sizeof(big2), "%.*s-9223372036854775808%s", (int)(layer - big), big,
                 layer + 2);
        CHECK(expect_reject_text(load_profile, big2, "ops[6].tensors[0].bytes",
                                 "integer 99999999999999999999 does not fit",
                                 "99999999999999999999") == 0);
        free(text);
    }
    /* duplicates and dangling references */
    m = COPY; jset(m, "ops[4].name", json_string("layer0.mlp"));
    REJECT(m, "ops[4].name", "duplicate op name \"layer0.mlp\" (also ops[2])", NULL);
    m = COPY; jset(m, "ops[4].tensors[1].id", json_string("layer0.attn.qkv_out"));
    REJECT(m, "ops[4].tensors[1].id", "duplicate tensor id \"layer0.attn.qkv_out\"",
           "\"layer0.attn.qkv_out\",\n          \"name\": \"gelu_out\"");
    m = COPY; jset(m, "ops[1].tensors[1].id", json_string("layer0.attn.qkv_out"));
    REJECT(m, "ops[1].tensors[1].id", "duplicate tensor id", NULL);
    m = COPY; jset(m, "ops[5].tensors[0].recompute_op", json_integer(8));
    REJECT(m, "ops[5].tensors[0].recompute_op", "op 8 does not exist (ops has 8)", NULL);
    m = COPY; jset(m, "ops[5].tensors[0].recompute_op", json_integer(-1));
    REJECT(m, "ops[5].tensors[0].recompute_op", "op -1 does not exist", NULL);
    m = COPY; jset(m, "ops", json_array());
    REJECT(m, "ops", "expected at least one op", NULL);
    /* Limits: MPRESS_MAX_OPS ops pass the count check (and fail later, at the first op that is
     * no object); one more is refused at "ops". Zeros keep the documents small. */
    {
        json_t *zeros = json_array();
        for (int i = 0; i < MPRESS_MAX_OPS; i++)
            json_array_append_new(zeros, json_integer(0));
        m = COPY; jset(m, "ops", json_deep_copy(zeros));
        REJECT(m, "ops[0]", "expected an object", NULL);
        json_array_append_new(zeros, json_integer(0));
        m = COPY; jset(m, "ops", json_deep_copy(zeros));
        REJECT(m, "ops", "expected at most 262144 ops (the supported limit), got 262145", NULL);
        json_decref(zeros);
        /* Saved tensors: MPRESS_MAX_TENSORS in all pass the count (ops[1] holds all but the
         * 8 of the other ops: 2, 2, 2, 1, 1 in ops[2..6]); one more is refused at the op whose
         * tensors cross the limit, ops[6]. */
        zeros = json_array();
        for (int i = 0; i < MPRESS_MAX_TENSORS - 8; i++)
            json_array_append_new(zeros, json_integer(0));
        m = COPY; jset(m, "ops[1].tensors", json_deep_copy(zeros));
        REJECT(m, "ops[1].tensors[0]", "expected an object", NULL);
        json_array_append_new(zeros, json_integer(0));
        m = COPY; jset(m, "ops[1].tensors", json_deep_copy(zeros));
        REJECT(m, "ops[6].tensors", "more than 1048576 saved tensors", NULL);
        json_decref(zeros);
    }
    /* not JSON at all, and the wrong top level */
    CHECK(expect_reject_text(load_profile, "{\n  \"format\": \"mpress-profile\",\n  oops\n}\n",
                             "", "invalid JSON", NULL) == 0);
    CHECK(expect_reject_text(load_profile, "[1, 2]\n", "", "expected a JSON object", NULL) == 0);
    CHECK(expect_reject_text(load_profile, "{\"format\": 1}\n", "format",
                             "expected a string, got an integer", "1}") == 0);

    json_decref(base);
    free(s1);
    mpress_profile_finish(&p);
    test_cleanup();
    return check_done();
}
