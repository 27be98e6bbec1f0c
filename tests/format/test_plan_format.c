/* mpress-plan v1: names, init/finish, round trip, hashes, deterministic bytes, the shipped
 * sample file, mpress_validate_file, and one case per rejection path of the strict loader. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "samples.h"

static int load_plan(const char *file, struct mpress_error *err)
{
    struct mpress_plan p;
    mpress_plan_init(&p);
    int rc = mpress_plan_load(file, &p, err);
    /* a failed load leaves nothing allocated in *out */
    if (rc != 0 && (p.stages || p.actions || p.gpus || p.profile.ops))
        return -1;
    mpress_plan_finish(&p);
    return rc;
}

static void check_equal(const struct mpress_plan *a, const struct mpress_plan *b)
{
    CHECK_STR(a->generator, b->generator);
    CHECK_STR(a->policy, b->policy);
    CHECK_INT(a->profile.n_ops, b->profile.n_ops);
    CHECK_STR(a->profile.ops[7].name, b->profile.ops[7].name);
    CHECK_STR(a->topology.name, b->topology.name);
    CHECK_INT(a->topology.nvlinks[2][3], b->topology.nvlinks[2][3]);
    CHECK_INT(a->schedule, b->schedule);
    CHECK_INT(a->micro_batches, b->micro_batches);
    CHECK_INT(a->prefetch_lookahead, b->prefetch_lookahead);
    CHECK_INT(a->n_stages, b->n_stages);
    for (int i = 0; i < a->n_stages && i < b->n_stages; i++) {
        CHECK_INT(a->stages[i].first_op, b->stages[i].first_op);
        CHECK_INT(a->stages[i].last_op, b->stages[i].last_op);
        CHECK_INT(a->stages[i].gpu, b->stages[i].gpu);
        CHECK_INT(a->stages[i].optimizer_on_host, b->stages[i].optimizer_on_host);
    }
    CHECK_INT(a->n_actions, b->n_actions);
    for (int i = 0; i < a->n_actions && i < b->n_actions; i++) {
        const struct mpress_plan_action *x = &a->actions[i], *y = &b->actions[i];
        CHECK_INT(x->op, y->op);
        CHECK_INT(x->tensor, y->tensor);
        CHECK_INT(x->action, y->action);
        CHECK_INT(x->n_peers, y->n_peers);
        for (int k = 0; k < x->n_peers && k < y->n_peers; k++) {
            CHECK_INT(x->peers[k], y->peers[k]);
            CHECK_INT(x->peer_bytes[k], y->peer_bytes[k]);
        }
        CHECK_INT(x->evict_after_op, y->evict_after_op);
        CHECK_INT(x->prefetch_before_op, y->prefetch_before_op);
    }
    CHECK_INT(a->n_gpus, b->n_gpus);
    for (int i = 0; i < a->n_gpus && i < b->n_gpus; i++) {
        const struct mpress_plan_gpu *x = &a->gpus[i], *y = &b->gpus[i];
        CHECK_INT(x->gpu, y->gpu);
        CHECK_INT(x->stage, y->stage);
        CHECK_INT(x->capacity, y->capacity);
        CHECK_INT(x->peak, y->peak);
        CHECK_INT(x->bound, y->bound);
        CHECK_INT(x->weights, y->weights);
        CHECK_INT(x->gradients, y->gradients);
        CHECK_INT(x->optimizer, y->optimizer);
        CHECK_INT(x->activations, y->activations);
        CHECK_INT(x->parked, y->parked);
        CHECK_INT(x->working, y->working);
        CHECK_INT(x->buffers, y->buffers);
        CHECK_INT(x->reserve, y->reserve);
    }
    CHECK(a->iteration_s == b->iteration_s);
    CHECK(a->samples_per_s == b->samples_per_s);
    CHECK_STR(a->solver.status, b->solver.status);
    CHECK(a->solver.objective == b->solver.objective);
    CHECK(a->solver.bound == b->solver.bound);
    CHECK(a->solver.gap == b->solver.gap);
    CHECK_INT(a->solver.rows, b->solver.rows);
    CHECK_INT(a->solver.cols, b->solver.cols);
    CHECK_INT(a->solver.integer_cols, b->solver.integer_cols);
    CHECK_INT(a->solver.nonzeros, b->solver.nonzeros);
    CHECK_INT(a->solver.nodes, b->solver.nodes);
    CHECK_INT(a->n_baselines, b->n_baselines);
    for (int i = 0; i < a->n_baselines && i < b->n_baselines; i++) {
        CHECK_STR(a->baselines[i].policy, b->baselines[i].policy);
        CHECK_INT(a->baselines[i].fits, b->baselines[i].fits);
        CHECK(a->baselines[i].iteration_s == b->baselines[i].iteration_s);
    }
}

#define REJECT(doc, path, text, marker) CHECK(expect_reject(load_plan, doc, path, text, marker) == 0)

static int validate(const char *file, struct mpress_error *err)
{
    char kind[32];
    return mpress_validate_file(file, kind, sizeof(kind), err);
}

int main(void)
{
    struct mpress_plan p, back;
    struct mpress_error err;

    /* names both ways */
    for (int a = 0; a < 4; a++) {
        enum mpress_action x;
        CHECK_INT(mpress_action_parse(mpress_action_name((enum mpress_action)a), &x), 0);
        CHECK_INT(x, a);
    }
    CHECK_STR(mpress_action_name(MPRESS_ACTION_D2D_SWAP), "d2d_swap");
    CHECK_STR(mpress_action_name(MPRESS_ACTION_HOST_SWAP), "host_swap");
    enum mpress_action act;
    CHECK_INT(mpress_action_parse("swap", &act), -1);
    CHECK_INT(mpress_action_parse(NULL, &act), -1);
    for (int s = 0; s < 3; s++) {
        enum mpress_schedule x;
        CHECK_INT(mpress_schedule_parse(mpress_schedule_name((enum mpress_schedule)s), &x), 0);
        CHECK_INT(x, s);
    }
    CHECK_STR(mpress_schedule_name(MPRESS_SCHEDULE_1F1B), "1f1b");
    CHECK_STR(mpress_schedule_name(MPRESS_SCHEDULE_GPIPE), "gpipe");
    enum mpress_schedule sch;
    CHECK_INT(mpress_schedule_parse("1F1B", &sch), -1);

    sample_plan(&p);
    const char *f1 = test_path("a.json");
    CHECK_INT(mpress_plan_save(f1, &p, &err), 0);
    char *s1 = read_all(f1, NULL);
    CHECK_INT(mpress_plan_load(f1, &back, &err), 0);
    check_equal(&p, &back);
    /* the hashes are those of the embedded documents' canonical serializations */
    {
        char h[17];
        json_t *jp = mpress_profile_to_json(&p.profile), *jt = mpress_topology_to_json(&p.topology);
        char *a = mpress_json_dumps(jp), *b = mpress_json_dumps(jt);
        mpress_hash_hex(a, strlen(a), h);
        CHECK_STR(back.profile_hash, h);
        mpress_hash_hex(b, strlen(b), h);
        CHECK_STR(back.topology_hash, h);
        /* and the profile saved alone has those exact bytes */
        CHECK_INT(mpress_profile_save(test_path("prof.json"), &p.profile, &err), 0);
        char *alone = read_all(test_path("prof.json"), NULL);
        CHECK(alone && strcmp(alone, a) == 0);
        free(alone);
        free(a);
        free(b);
        json_decref(jp);
        json_decref(jt);
    }
    CHECK_INT(mpress_plan_save(test_path("b.json"), &back, &err), 0);
    char *s2 = read_all(test_path("b.json"), NULL);
    CHECK(s1 && s2 && strcmp(s1, s2) == 0);
    CHECK(s1 && strstr(s1, "seconds") == NULL); /* no wall-clock time in plans */
    free(s2);
    mpress_plan_finish(&back);
    CHECK(back.stages == NULL && back.profile.ops == NULL);

    char kind[32];
    CHECK_INT(mpress_validate_file(f1, kind, sizeof(kind), &err), 0);
    CHECK_STR(kind, "mpress-plan");
    CHECK_INT(mpress_validate_file(test_path("prof.json"), kind, sizeof(kind), &err), 0);
    CHECK_STR(kind, "mpress-profile");

    const char *src = getenv("MPRESS_SRCDIR");
    if (src) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/tests/format/data/plan.json", src);
        if (getenv("MPRESS_REGEN")) /* on purpose only: MPRESS_REGEN=1 meson test ... */
            CHECK_INT(mpress_plan_save(path, &p, &err), 0);
        char *shipped = read_all(path, NULL);
        CHECK_MSG(shipped && strcmp(shipped, s1) == 0, "%s differs from the saved sample", path);
        free(shipped);
        snprintf(path, sizeof(path), "%s/tests/format/data/topology.json", src);
        CHECK_INT(mpress_validate_file(path, kind, sizeof(kind), &err), 0);
        CHECK_STR(kind, "mpress-topology");
    }

    /* An inconsistent plan is not written. */
    p.stages[1].first_op = 4;
    CHECK_INT(mpress_plan_save(test_path("c.json"), &p, &err), MPRESS_ESYSTEM);
    CHECK(strstr(err.text, "refusing to write an invalid plan: stages[1].first_op") != NULL);
    CHECK(access(test_path("c.json"), F_OK) != 0);
    p.stages[1].first_op = 3;
    p.actions[0].tensor = 5; /* no such tensor in op 1 */
    CHECK_INT(mpress_plan_save(test_path("c.json"), &p, &err), MPRESS_ESYSTEM);
    CHECK(access(test_path("c.json"), F_OK) != 0);
    p.actions[0].tensor = 0;

    json_t *base = mpress_plan_to_json(&p);
    CHECK(base != NULL);
#define COPY json_deep_copy(base)
    json_t *m;

    /* header, fields */
    m = COPY; jset(m, "format", json_string("mpress-profile"));
    REJECT(m, "format", "expected \"mpress-plan\", got \"mpress-profile\"", NULL);
    m = COPY; jset(m, "version", json_integer(9));
    REJECT(m, "version", "unsupported mpress-plan version 9 (this build reads 1 to 2)", NULL);
    m = COPY; jdel(m, "micro_batches");
    REJECT(m, "micro_batches", "missing field", NULL);
    m = COPY; jset(m, "seconds", json_real(1.5));
    REJECT(m, "seconds", "unknown field", NULL);
    m = COPY; jset(m, "solver.seconds", json_real(1.5));
    REJECT(m, "solver.seconds", "unknown field", NULL);
    m = COPY; jset(m, "micro_batches", json_integer(0));
    REJECT(m, "micro_batches", "expected an integer in [1, ", NULL);
    /* The supported limit: MPRESS_MAX_MICRO_BATCHES passes the plan rules (and then fails the
     * samples/s check, which follows them), one more is refused at micro_batches. */
    m = COPY; jset(m, "micro_batches", json_integer(MPRESS_MAX_MICRO_BATCHES));
    REJECT(m, "samples_per_s", "expected micro_batches x micro_batch / iteration_s", NULL);
    m = COPY; jset(m, "micro_batches", json_integer(MPRESS_MAX_MICRO_BATCHES + 1));
    REJECT(m, "micro_batches", "expected 1 to 65536 micro-batches (the supported limit), got 65537",
           "65537");
    m = COPY; jset(m, "micro_batches", json_integer(1431655766));
    REJECT(m, "micro_batches", "the supported limit", NULL);
    m = COPY; jset(m, "schedule", json_string("zero-bubble"));
    REJECT(m, "schedule", "expected one of \"1f1b\", \"gpipe\", \"async\"", "\"zero-bubble\"");
    m = COPY; jset(m, "iteration_s", json_real(-0.25));
    REJECT(m, "iteration_s", "expected a non-negative number", NULL);
    m = COPY; jset(m, "samples_per_s", json_real(33.0));
    REJECT(m, "samples_per_s", "expected micro_batches x micro_batch / iteration_s = 32", NULL);
    /* embedded documents and their hashes */
    m = COPY; jset(m, "profile.ops[2].tensors[1].bytes", json_string("x"));
    REJECT(m, "profile.ops[2].tensors[1].bytes", "expected a non-negative integer, got a string",
           "\"x\"");
    m = COPY; jset(m, "topology.format", json_string("mpress-plan"));
    REJECT(m, "topology.format", "expected \"mpress-topology\"", NULL);
    m = COPY; jset(m, "topology.nvlinks[0][3]", json_integer(1));
    REJECT(m, "topology.nvlinks[0][3]", "not symmetric", NULL);
    m = COPY; jset(m, "profile.ops[0].fwd_s", json_real(0.5));
    REJECT(m, "profile_hash", "does not match the embedded profile", NULL);
    m = COPY; jset(m, "topology.pcie_bytes_per_s", json_real(16e9));
    REJECT(m, "topology_hash", "does not match the embedded topology", NULL);
    m = COPY; jset(m, "profile_hash", json_string("0123456789abcdef"));
    REJECT(m, "profile_hash", "the plan was edited by hand or made from another profile",
           "\"0123456789abcdef\"");
    m = COPY; jset(m, "topology_hash", json_string("XYZ"));
    REJECT(m, "topology_hash", "expected 16 lower-case hex digits", NULL);
    m = COPY; jdel(m, "profile");
    REJECT(m, "profile", "missing field", NULL);
    /* stages: a contiguous cover of all ops, each on its own existing GPU */
    m = COPY; jset(m, "stages[1].first_op", json_integer(4));
    REJECT(m, "stages[1].first_op", "expected 3 (stages must cover the ops contiguously", NULL);
    m = COPY; jset(m, "stages[1].first_op", json_integer(2));
    REJECT(m, "stages[1].first_op", "expected 3", NULL);
    m = COPY; jset(m, "stages[0].first_op", json_integer(1));
    REJECT(m, "stages[0].first_op", "expected 0", NULL);
    m = COPY; jset(m, "stages[2].last_op", json_integer(6));
    REJECT(m, "stages[2].last_op", "the last stage must end at the last op (7), got 6", NULL);
    m = COPY; jset(m, "stages[2].last_op", json_integer(8));
    REJECT(m, "stages[2].last_op", "op 8 does not exist (ops has 8)", NULL);
    m = COPY; jset(m, "stages[1].last_op", json_integer(2));
    REJECT(m, "stages[1].last_op", "expected at least first_op (3), got 2", NULL);
    m = COPY; jset(m, "stages[1].gpu", json_integer(4));
    REJECT(m, "stages[1].gpu", "GPU 4 does not exist (the topology has 4)", NULL);
    m = COPY; jset(m, "stages[1].gpu", json_integer(-1));
    REJECT(m, "stages[1].gpu", "GPU -1 does not exist", NULL);
    m = COPY; jset(m, "stages[2].gpu", json_integer(2));
    REJECT(m, "stages[2].gpu", "GPU 2 already runs stages[0]", NULL);
    m = COPY; jset(m, "stages", json_array());
    REJECT(m, "stages", "expected 1 to 4 stages", NULL);
    m = COPY; jset(m, "stages[0].optimizer_on_host", json_integer(0));
    REJECT(m, "stages[0].optimizer_on_host", "expected a boolean", NULL);
    /* actions: exactly one per saved tensor, in profile order, referring to real things */
    m = COPY; jset(m, "actions[4].op", json_integer(8));
    REJECT(m, "actions[4].op", "op 8 does not exist (ops has 8)", NULL);
    m = COPY; jset(m, "actions[4].tensor", json_string("layer1.attn.nothing"));
    REJECT(m, "actions[4].tensor", "tensor \"layer1.attn.nothing\" does not exist",
           "\"layer1.attn.nothing\"");
    m = COPY; jset(m, "actions[4].op", json_integer(2));
    REJECT(m, "actions[4].tensor", "tensor \"layer1.attn.qkv_out\" is saved by ops[3], not ops[2]",
           NULL);
    m = COPY; jset(m, "actions[5].tensor", json_string("layer1.attn.qkv_out"));
    REJECT(m, "actions[5].tensor",
           "a second action for tensor \"layer1.attn.qkv_out\" (the first is actions[4])", NULL);
    m = COPY; jdel(m, "actions[7]");
    REJECT(m, "actions", "no action for tensor \"layer1.mlp.gelu_out\" (ops[4].tensors[1])",
           NULL);
    m = COPY;
    {
        /* swap two keep actions: both still valid alone, but out of order */
        json_t *arr = jget(m, "actions");
        json_t *a7 = json_incref(json_array_get(arr, 7)), *a8 = json_incref(json_array_get(arr, 8));
        json_array_set_new(arr, 7, a8);
        json_array_set_new(arr, 8, a7);
    }
    REJECT(m, "actions[7]",
           "expected tensor \"layer1.mlp.gelu_out\" here, got \"final_ln.ln_out\"", NULL);
    m = COPY; jset(m, "actions[2].action", json_string("swap"));
    REJECT(m, "actions[2].action", "expected one of \"keep\", \"recompute\", \"host_swap\", "
                                   "\"d2d_swap\", got \"swap\"", NULL);
    m = COPY; jset(m, "actions[2].peers", json_pack("[{s:i,s:i}]", "gpu", 1, "bytes", 524288));
    REJECT(m, "actions[2].peers", "only d2d_swap actions have peers (this one is host_swap)",
           NULL);
    m = COPY; jset(m, "actions[3].peers", json_array());
    REJECT(m, "actions[3].peers", "expected 1 to 3 peers for a d2d_swap, got 0", NULL);
    m = COPY; jset(m, "actions[3].peers[0].gpu", json_integer(7));
    REJECT(m, "actions[3].peers[0].gpu", "GPU 7 does not exist (the topology has 4)", NULL);
    m = COPY; jset(m, "actions[3].peers[1].gpu", json_integer(2));
    REJECT(m, "actions[3].peers[1].gpu", "GPU 2 runs the tensor's own stage (stages[0])", NULL);
    m = COPY; jset(m, "actions[3].peers[1].gpu", json_integer(1));
    REJECT(m, "actions[3].peers[1].gpu", "GPU 1 is listed twice", NULL);
    m = COPY; jset(m, "actions[3].peers[1].bytes", json_integer(262143));
    REJECT(m, "actions[3].peers", "peer bytes sum to 524288, not the tensor's 524289 bytes",
           NULL);
    m = COPY; jset(m, "actions[3].peers[1].bytes", json_integer(INT64_MAX));
    jset(m, "actions[3].peers[0].bytes", json_integer(INT64_MAX));
    jset(m, "actions[3].peers", json_pack("[o,o,{s:i,s:i}]",
                                          json_deep_copy(jget(m, "actions[3].peers[0]")),
                                          json_deep_copy(jget(m, "actions[3].peers[1]")),
                                          "gpu", 3, "bytes", 3));
    REJECT(m, "actions[3].peers", "peer bytes sum to more than", NULL);
    m = COPY; jset(m, "actions[3].peers[0].bytes", json_integer(-1));
    REJECT(m, "actions[3].peers[0].bytes", "got a negative integer", NULL);
    m = COPY; jset(m, "actions[0].evict_after_op", json_integer(1));
    REJECT(m, "actions[0].evict_after_op", "expected -1 for a kept tensor, got 1", NULL);
    m = COPY; jset(m, "actions[1].evict_after_op", json_integer(0));
    REJECT(m, "actions[1].evict_after_op", "expected an op in [1, 2]", NULL);
    m = COPY; jset(m, "actions[9].prefetch_before_op", json_integer(-1));
    REJECT(m, "actions[9].prefetch_before_op", "expected an op in [6, 7]", NULL);
    m = COPY; jset(m, "actions[5].prefetch_before_op", json_integer(5));
    REJECT(m, "actions[5].prefetch_before_op", "expected an op in [3, 4]", NULL);
    m = COPY; jdel(m, "actions[5].peers");
    REJECT(m, "actions[5].peers", "missing field", NULL);
    /* per-GPU predictions */
    m = COPY; jdel(m, "gpus[3]");
    REJECT(m, "gpus", "expected 4 entries (one per topology GPU), got 3", NULL);
    m = COPY; jset(m, "gpus[1].gpu", json_integer(2));
    REJECT(m, "gpus[1].gpu", "expected 1 (entries follow GPU order), got 2", NULL);
    m = COPY; jset(m, "gpus[1].stage", json_integer(0));
    REJECT(m, "gpus[1].stage", "expected -1", NULL);
    m = COPY; jset(m, "gpus[2].stage", json_integer(1));
    REJECT(m, "gpus[2].stage", "expected 0", NULL);
    m = COPY; jset(m, "gpus[0].capacity_bytes", json_integer(17179869184LL));
    REJECT(m, "gpus[0].capacity_bytes", "expected the topology GPU's memory_bytes", NULL);
    m = COPY; jset(m, "gpus[3].parked_bytes", json_integer(1));
    REJECT(m, "gpus[3].peak_bytes", "expected the sum of the parts", NULL);
    m = COPY; jset(m, "gpus[3].working_bytes", json_integer(-7));
    REJECT(m, "gpus[3].working_bytes", "got a negative integer", NULL);
    m = COPY; jset(m, "gpus[2].bound_bytes", json_integer(1000));
    REJECT(m, "gpus[2].bound_bytes", "expected at least peak_bytes", NULL);
    m = COPY; jdel(m, "gpus[2].bound_bytes");
    REJECT(m, "gpus[2].bound_bytes", "missing field", NULL);
    /* Version 1 has no bound_bytes (its peak_bytes was the bound): it loads with bound = peak,
     * and refuses the field. */
    m = COPY; jset(m, "version", json_integer(1));
    REJECT(m, "gpus[0].bound_bytes", "unknown field", NULL);
    {
        m = COPY;
        jset(m, "version", json_integer(1));
        for (int g = 0; g < 4; g++) {
            char key[32];
            snprintf(key, sizeof(key), "gpus[%d].bound_bytes", g);
            jdel(m, key);
        }
        const char *f = test_path("v1.json");
        CHECK_INT(json_dump_file(m, f, JSON_SORT_KEYS | JSON_INDENT(2)), 0);
        json_decref(m);
        struct mpress_plan v1;
        mpress_plan_init(&v1);
        CHECK_INT(mpress_plan_load(f, &v1, &err), 0);
        for (int g = 0; g < v1.n_gpus; g++)
            CHECK_INT(v1.gpus[g].bound, p.gpus[g].peak);
        mpress_plan_finish(&v1);
    }
    /* solver and baselines */
    m = COPY; jset(m, "solver.nodes", json_integer(-2));
    REJECT(m, "solver.nodes", "expected an integer >= -1", NULL);
    m = COPY; jset(m, "solver.gap", json_real(-0.1));
    REJECT(m, "solver.gap", "expected a non-negative number", NULL);
    m = COPY; jset(m, "solver.status", json_string(""));
    REJECT(m, "solver.status", "expected a non-empty string", NULL);
    m = COPY; jset(m, "baselines[2].policy", json_string("recompute"));
    REJECT(m, "baselines[2].policy", "duplicate baseline \"recompute\" (also baselines[1])",
           NULL);
    m = COPY; jset(m, "baselines[0].iteration_s", json_real(0.5));
    REJECT(m, "baselines[0].iteration_s", "expected 0 for a baseline that does not fit", NULL);
    m = COPY;
    {
        json_t *arr = jget(m, "baselines");
        for (int i = 0; i < 6; i++)
            json_array_append_new(arr, json_pack("{s:s#,s:b,s:f}", "policy", "abcdef" + i, 6 - i,
                                                 "fits", 1, "iteration_s", 1.0));
    }
    REJECT(m, "baselines", "expected at most 8, got 9", NULL);

    /* validate: any of the three, and a clear message for anything else */
    CHECK(expect_reject_text(validate, "{\"format\": \"mpress-report\", \"version\": 1}\n",
                             "format", "unknown format \"mpress-report\"", "\"mpress-report\"") ==
          0);
    CHECK(expect_reject_text(validate, "{\"version\": 1}\n", "format", "missing field", NULL) ==
          0);
    m = COPY; jset(m, "actions[0].op", json_string("1"));
    CHECK(expect_reject(validate, m, "actions[0].op", "expected an integer, got a string",
                        NULL) == 0);

    json_decref(base);
    free(s1);
    mpress_plan_finish(&p);
    test_cleanup();
    return check_done();
}
