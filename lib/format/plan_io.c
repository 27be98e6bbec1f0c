/* mpress-plan v2 (reads v1 too): names of actions and schedules, init/finish, writer, strict
 * loader, and mpress_validate_file for all three formats. Field names and rules are documented in
 * docs/formats.md; everything else in mpress reads struct mpress_plan only. */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format_internal.h"
#include "mpress/plan.h"

static const char *const action_names[MPRESS_N_ACTIONS + 1] = {"keep", "recompute", "host_swap",
                                                               "d2d_swap", NULL};
static const char *const schedule_names[] = {"1f1b", "gpipe", "async", NULL};

const char *mpress_action_name(enum mpress_action a)
{
    return (unsigned)a < MPRESS_N_ACTIONS ? action_names[a] : "unknown";
}

/* Index of s in names (NULL-terminated), or -1. */
static int name_index(const char *const *names, const char *s)
{
    for (int i = 0; s && names[i]; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

int mpress_action_parse(const char *s, enum mpress_action *out)
{
    int i = name_index(action_names, s);
    if (i < 0)
        return -1;
    *out = (enum mpress_action)i;
    return 0;
}

const char *mpress_schedule_name(enum mpress_schedule s)
{
    return (unsigned)s < 3 ? schedule_names[s] : "unknown";
}

int mpress_schedule_parse(const char *s, enum mpress_schedule *out)
{
    int i = name_index(schedule_names, s);
    if (i < 0)
        return -1;
    *out = (enum mpress_schedule)i;
    return 0;
}

void mpress_plan_init(struct mpress_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    mpress_profile_init(&plan->profile);
}

void mpress_plan_finish(struct mpress_plan *plan)
{
    if (!plan)
        return;
    free(plan->stages);
    free(plan->actions);
    free(plan->gpus);
    mpress_profile_finish(&plan->profile);
    memset(plan, 0, sizeof(*plan));
}

/* ---- writer ----------------------------------------------------------------------------- */

/* The tensor id of an action, or NULL when op/tensor are out of range. */
static const char *action_tensor_id(const struct mpress_plan *plan,
                                    const struct mpress_plan_action *a)
{
    if (a->op < 0 || a->op >= plan->profile.n_ops || a->tensor < 0 ||
        a->tensor >= plan->profile.ops[a->op].n_tensors)
        return NULL;
    return plan->profile.ops[a->op].tensors[a->tensor].id;
}

json_t *mpress_plan_to_json(const struct mpress_plan *plan)
{
    struct fmt_out o = {0};
    json_t *root = json_object();
    if (!root)
        return NULL;
    json_t *jp = mpress_profile_to_json(&plan->profile);
    json_t *jt = mpress_topology_to_json(&plan->topology);
    char hp[17], ht[17];
    /* The hashes are always those of what is embedded, never stale copies from the struct. */
    if (fmt_hash_json(jp, hp) || fmt_hash_json(jt, ht))
        o.bad = 1;
    fmt_set_str(&o, root, "format", MPRESS_PLAN_FORMAT);
    fmt_set_int(&o, root, "version", MPRESS_PLAN_VERSION);
    fmt_set_str(&o, root, "generator", plan->generator);
    fmt_set_str(&o, root, "policy", plan->policy);
    fmt_set(&o, root, "profile", jp);
    fmt_set(&o, root, "topology", jt);
    if (!o.bad) {
        fmt_set_str(&o, root, "profile_hash", hp);
        fmt_set_str(&o, root, "topology_hash", ht);
    }
    fmt_set_str(&o, root, "schedule", mpress_schedule_name(plan->schedule));
    fmt_set_int(&o, root, "micro_batches", plan->micro_batches);
    fmt_set_int(&o, root, "prefetch_lookahead", plan->prefetch_lookahead);

    json_t *stages = json_array();
    for (int i = 0; stages && i < plan->n_stages; i++) {
        const struct mpress_plan_stage *s = &plan->stages[i];
        json_t *js = json_object();
        if (js) {
            fmt_set_int(&o, js, "first_op", s->first_op);
            fmt_set_int(&o, js, "last_op", s->last_op);
            fmt_set_int(&o, js, "gpu", s->gpu);
            fmt_set_bool(&o, js, "optimizer_on_host", s->optimizer_on_host);
        }
        fmt_append(&o, stages, js);
    }
    fmt_set(&o, root, "stages", stages);

    json_t *actions = json_array();
    for (int i = 0; actions && i < plan->n_actions; i++) {
        const struct mpress_plan_action *a = &plan->actions[i];
        const char *id = action_tensor_id(plan, a);
        json_t *ja = json_object(), *peers = json_array();
        if (!id || !ja || !peers || a->n_peers < 0 || a->n_peers > MPRESS_MAX_GPUS) {
            o.bad = 1;
            json_decref(ja);
            json_decref(peers);
            break;
        }
        fmt_set_int(&o, ja, "op", a->op);
        fmt_set_str(&o, ja, "tensor", id);
        fmt_set_str(&o, ja, "action", mpress_action_name(a->action));
        for (int k = 0; k < a->n_peers; k++) {
            json_t *jq = json_object();
            if (jq) {
                fmt_set_int(&o, jq, "gpu", a->peers[k]);
                fmt_set_u64(&o, jq, "bytes", a->peer_bytes[k]);
            }
            fmt_append(&o, peers, jq);
        }
        fmt_set(&o, ja, "peers", peers);
        fmt_set_int(&o, ja, "evict_after_op", a->evict_after_op);
        fmt_set_int(&o, ja, "prefetch_before_op", a->prefetch_before_op);
        fmt_append(&o, actions, ja);
    }
    fmt_set(&o, root, "actions", actions);

    json_t *gpus = json_array();
    for (int i = 0; gpus && i < plan->n_gpus; i++) {
        const struct mpress_plan_gpu *g = &plan->gpus[i];
        json_t *jg = json_object();
        if (jg) {
            fmt_set_int(&o, jg, "gpu", g->gpu);
            fmt_set_int(&o, jg, "stage", g->stage);
            fmt_set_u64(&o, jg, "capacity_bytes", g->capacity);
            fmt_set_u64(&o, jg, "peak_bytes", g->peak);
            fmt_set_u64(&o, jg, "bound_bytes", g->bound);
            fmt_set_u64(&o, jg, "weights_bytes", g->weights);
            fmt_set_u64(&o, jg, "gradients_bytes", g->gradients);
            fmt_set_u64(&o, jg, "optimizer_bytes", g->optimizer);
            fmt_set_u64(&o, jg, "activations_bytes", g->activations);
            fmt_set_u64(&o, jg, "parked_bytes", g->parked);
            fmt_set_u64(&o, jg, "working_bytes", g->working);
            fmt_set_u64(&o, jg, "buffers_bytes", g->buffers);
            fmt_set_u64(&o, jg, "reserve_bytes", g->reserve);
        }
        fmt_append(&o, gpus, jg);
    }
    fmt_set(&o, root, "gpus", gpus);
    fmt_set_real(&o, root, "iteration_s", plan->iteration_s);
    fmt_set_real(&o, root, "samples_per_s", plan->samples_per_s);

    /* Solver statistics without wall-clock seconds: plans are byte-identical across machines. */
    json_t *solver = json_object();
    if (solver) {
        const struct mpress_plan_solver *s = &plan->solver;
        fmt_set_str(&o, solver, "status", s->status);
        fmt_set_real(&o, solver, "objective_s", s->objective);
        fmt_set_real(&o, solver, "bound_s", s->bound);
        fmt_set_real(&o, solver, "gap", s->gap);
        fmt_set_int(&o, solver, "rows", s->rows);
        fmt_set_int(&o, solver, "cols", s->cols);
        fmt_set_int(&o, solver, "integer_cols", s->integer_cols);
        fmt_set_int(&o, solver, "nonzeros", s->nonzeros);
        fmt_set_int(&o, solver, "nodes", s->nodes);
    }
    fmt_set(&o, root, "solver", solver);

    json_t *baselines = json_array();
    if (plan->n_baselines < 0 || plan->n_baselines > MPRESS_MAX_BASELINES)
        o.bad = 1;
    for (int i = 0; baselines && !o.bad && i < plan->n_baselines; i++) {
        const struct mpress_plan_baseline *b = &plan->baselines[i];
        json_t *jb = json_object();
        if (jb) {
            fmt_set_str(&o, jb, "policy", b->policy);
            fmt_set_bool(&o, jb, "fits", b->fits);
            fmt_set_real(&o, jb, "iteration_s", b->iteration_s);
        }
        fmt_append(&o, baselines, jb);
    }
    fmt_set(&o, root, "baselines", baselines);
    if (o.bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

int mpress_plan_save(const char *file, const struct mpress_plan *plan, struct mpress_error *err)
{
    return fmt_save_checked(file, mpress_plan_to_json(plan), "plan", fmt_plan_check, err);
}

/* ---- loader ----------------------------------------------------------------------------- */

static const char *const plan_keys[] = {
    "format", "version", "generator", "policy", "profile_hash", "topology_hash", "profile",
    "topology", "schedule", "micro_batches", "prefetch_lookahead", "stages", "actions", "gpus",
    "iteration_s", "samples_per_s", "solver", "baselines", NULL};
static const char *const stage_keys[] = {"first_op", "last_op", "gpu", "optimizer_on_host",
                                         NULL};
static const char *const action_keys[] = {"op", "tensor", "action", "peers", "evict_after_op",
                                          "prefetch_before_op", NULL};
static const char *const peer_keys[] = {"gpu", "bytes", NULL};
static const char *const gpu_keys[] = {
    "gpu", "stage", "capacity_bytes", "peak_bytes", "bound_bytes", "weights_bytes",
    "gradients_bytes", "optimizer_bytes", "activations_bytes", "parked_bytes", "working_bytes",
    "buffers_bytes", "reserve_bytes", NULL};
/* Version 1, before bound_bytes: peak_bytes was the bound. */
static const char *const gpu_keys_v1[] = {
    "gpu", "stage", "capacity_bytes", "peak_bytes", "weights_bytes", "gradients_bytes",
    "optimizer_bytes", "activations_bytes", "parked_bytes", "working_bytes", "buffers_bytes",
    "reserve_bytes", NULL};
static const char *const solver_keys[] = {"status", "objective_s", "bound_s", "gap", "rows",
                                          "cols", "integer_cols", "nonzeros", "nodes", NULL};
static const char *const baseline_keys[] = {"policy", "fits", "iteration_s", NULL};

static int read_hash(const struct mpress_json_doc *doc, const char *key, char out[17],
                     struct mpress_error *err)
{
    if (mpress_jread_str(doc, doc->root, "", key, out, 17, err))
        return MPRESS_EINPUT;
    int ok = strlen(out) == 16;
    for (int i = 0; ok && i < 16; i++)
        ok = (out[i] >= '0' && out[i] <= '9') || (out[i] >= 'a' && out[i] <= 'f');
    if (!ok)
        return mpress_json_doc_error(doc, err, key, "expected 16 lower-case hex digits");
    return 0;
}

static int check_hash(const struct mpress_json_doc *doc, const char *key, const char *what,
                      json_t *canonical, const char *stored, struct mpress_error *err)
{
    char h[17];
    int bad = fmt_hash_json(canonical, h);
    json_decref(canonical);
    if (bad)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    if (strcmp(h, stored) != 0)
        return mpress_json_doc_error(doc, err, key,
                                     "does not match the embedded %s (whose hash is %s): the "
                                     "plan was edited by hand or made from another %s",
                                     what, h, what);
    return 0;
}

/* Stages and actions are read here as values (types, names resolved to indices); what makes
 * them a valid plan is mpress_plan_check's, called once both are read. */
static int read_stages(const struct mpress_json_doc *doc, struct mpress_plan *p,
                       struct mpress_error *err)
{
    json_t *arr;
    char path[512];
    int n_gpus = p->topology.n_gpus;
    if (mpress_jread_array(doc, doc->root, "", "stages", &arr, err))
        return MPRESS_EINPUT;
    size_t n = json_array_size(arr);
    if (n < 1 || n > (size_t)n_gpus)
        return mpress_json_doc_error(doc, err, "stages",
                                     "expected 1 to %d stages (one GPU each), got %zu", n_gpus,
                                     n);
    p->stages = calloc(n, sizeof(*p->stages));
    if (!p->stages)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    p->n_stages = (int)n;
    for (int i = 0; i < p->n_stages; i++) {
        struct mpress_plan_stage *s = &p->stages[i];
        json_t *js;
        if (fmt_array_object(doc, arr, (size_t)i, "stages", &js, path, sizeof(path), err) ||
            fmt_check_keys(doc, js, path, stage_keys, err) ||
            mpress_jread_int(doc, js, path, "first_op", INT_MIN, INT_MAX, &s->first_op, err) ||
            mpress_jread_int(doc, js, path, "last_op", INT_MIN, INT_MAX, &s->last_op, err) ||
            mpress_jread_int(doc, js, path, "gpu", INT_MIN, INT_MAX, &s->gpu, err) ||
            mpress_jread_bool(doc, js, path, "optimizer_on_host", &s->optimizer_on_host, err))
            return MPRESS_EINPUT;
    }
    return 0;
}

static int read_peers(const struct mpress_json_doc *doc, const json_t *ja, const char *path,
                      struct mpress_plan_action *a, struct mpress_error *err)
{
    json_t *peers;
    char qpath[512];
    if (mpress_jread_array(doc, ja, path, "peers", &peers, err))
        return MPRESS_EINPUT;
    mpress_json_path_key(qpath, sizeof(qpath), path, "peers");
    size_t np = json_array_size(peers);
    if (np > MPRESS_MAX_GPUS)
        return mpress_json_doc_error(doc, err, qpath, "expected at most %d peers, got %zu",
                                     MPRESS_MAX_GPUS, np);
    a->n_peers = (int)np;
    for (int k = 0; k < a->n_peers; k++) {
        json_t *jq;
        char epath[512];
        if (fmt_array_object(doc, peers, (size_t)k, qpath, &jq, epath, sizeof(epath), err) ||
            fmt_check_keys(doc, jq, epath, peer_keys, err) ||
            mpress_jread_int(doc, jq, epath, "gpu", INT_MIN, INT_MAX, &a->peers[k], err) ||
            mpress_jread_u64(doc, jq, epath, "bytes", &a->peer_bytes[k], err))
            return MPRESS_EINPUT;
    }
    return 0;
}

static int read_actions(const struct mpress_json_doc *doc, struct mpress_plan *p,
                        struct mpress_error *err)
{
    const struct mpress_profile *prof = &p->profile;
    json_t *arr;
    char path[512], sub[512];
    int rc = MPRESS_EINPUT;
    if (mpress_jread_array(doc, doc->root, "", "actions", &arr, err))
        return MPRESS_EINPUT;

    /* Flat tensor index (profile order) of each id, and the op/tensor of each flat index. */
    int total = 0;
    for (int i = 0; i < prof->n_ops; i++)
        total += prof->ops[i].n_tensors;
    struct fmt_names ids = {0};
    int *flat_op = malloc(((size_t)total + 1) * sizeof(int));
    int *flat_k = malloc(((size_t)total + 1) * sizeof(int));
    int *seen = malloc(((size_t)total + 1) * sizeof(int));
    size_t n = json_array_size(arr);
    if (n > (size_t)total) {
        mpress_json_path_index(path, sizeof(path), "actions", (size_t)total);
        rc = mpress_json_doc_error(doc, err, total ? path : "actions",
                                   "%zu actions for %d saved tensors: every saved tensor needs "
                                   "exactly one",
                                   n, total);
        n = 0;
        goto done;
    }
    p->actions = n ? calloc(n, sizeof(*p->actions)) : NULL;
    if (!flat_op || !flat_k || !seen || (n && !p->actions) ||
        fmt_names_init(&ids, (size_t)total)) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    p->n_actions = (int)n;
    for (int i = 0, f = 0; i < prof->n_ops; i++)
        for (int k = 0; k < prof->ops[i].n_tensors; k++, f++) {
            flat_op[f] = i;
            flat_k[f] = k;
            seen[f] = -1;
            fmt_names_add(&ids, prof->ops[i].tensors[k].id, f);
        }

    for (int i = 0; i < p->n_actions; i++) {
        struct mpress_plan_action *a = &p->actions[i];
        json_t *ja;
        char id[sizeof(prof->ops[0].tensors[0].id)];
        int kind;
        if (fmt_array_object(doc, arr, (size_t)i, "actions", &ja, path, sizeof(path), err) ||
            fmt_check_keys(doc, ja, path, action_keys, err) ||
            mpress_jread_int(doc, ja, path, "op", INT_MIN, INT_MAX, &a->op, err))
            goto done;
        if (a->op < 0 || a->op >= prof->n_ops) {
            mpress_json_path_key(sub, sizeof(sub), path, "op");
            mpress_json_doc_error(doc, err, sub, "op %d does not exist (ops has %d)", a->op,
                                  prof->n_ops);
            goto done;
        }
        if (mpress_jread_str(doc, ja, path, "tensor", id, sizeof(id), err))
            goto done;
        mpress_json_path_key(sub, sizeof(sub), path, "tensor");
        int f = fmt_names_find(&ids, id);
        if (f < 0) {
            mpress_json_doc_error(doc, err, sub, "tensor \"%s\" does not exist in the profile",
                                  id);
            goto done;
        }
        if (flat_op[f] != a->op) {
            mpress_json_doc_error(doc, err, sub, "tensor \"%s\" is saved by ops[%d], not ops[%d]",
                                  id, flat_op[f], a->op);
            goto done;
        }
        if (seen[f] >= 0) {
            mpress_json_doc_error(doc, err, sub,
                                  "a second action for tensor \"%s\" (the first is "
                                  "actions[%d])",
                                  id, seen[f]);
            goto done;
        }
        seen[f] = i;
        a->tensor = flat_k[f];
        if (fmt_read_choice(doc, ja, path, "action", action_names, &kind, err))
            goto done;
        a->action = (enum mpress_action)kind;
        if (read_peers(doc, ja, path, a, err) ||
            mpress_jread_int(doc, ja, path, "evict_after_op", INT_MIN, INT_MAX,
                             &a->evict_after_op, err) ||
            mpress_jread_int(doc, ja, path, "prefetch_before_op", INT_MIN, INT_MAX,
                             &a->prefetch_before_op, err))
            goto done;
    }
    for (int f = 0; f < total; f++)
        if (seen[f] < 0) {
            mpress_json_doc_error(doc, err, "actions",
                                  "no action for tensor \"%s\" (ops[%d].tensors[%d]): every "
                                  "saved tensor needs exactly one",
                                  prof->ops[flat_op[f]].tensors[flat_k[f]].id, flat_op[f],
                                  flat_k[f]);
            goto done;
        }
    rc = 0;
done:
    fmt_names_free(&ids);
    free(flat_op);
    free(flat_k);
    free(seen);
    return rc;
}

/* The plan rules, with the offending value's position in the file. */
static int check_plan(const struct mpress_json_doc *doc, const struct mpress_plan *p,
                      struct mpress_error *err)
{
    struct mpress_plan_fault f;
    struct mpress_error e;
    mpress_error_clear(&e);
    if (mpress_plan_check(&p->profile, &p->topology, p->micro_batches, p->n_stages, p->stages,
                          p->n_actions, p->actions, &f, &e) == 0)
        return 0;
    return mpress_json_doc_error(doc, err, f.path, "%s", e.text);
}

static int read_gpus(const struct mpress_json_doc *doc, struct mpress_plan *p, int version,
                     struct mpress_error *err)
{
    json_t *arr;
    char path[512], sub[512];
    int n_gpus = p->topology.n_gpus;
    if (mpress_jread_array(doc, doc->root, "", "gpus", &arr, err))
        return MPRESS_EINPUT;
    if (json_array_size(arr) != (size_t)n_gpus)
        return mpress_json_doc_error(doc, err, "gpus",
                                     "expected %d entries (one per topology GPU), got %zu",
                                     n_gpus, json_array_size(arr));
    p->gpus = calloc((size_t)n_gpus, sizeof(*p->gpus));
    if (!p->gpus)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    p->n_gpus = n_gpus;
    for (int i = 0; i < n_gpus; i++) {
        struct mpress_plan_gpu *g = &p->gpus[i];
        json_t *jg;
        if (fmt_array_object(doc, arr, (size_t)i, "gpus", &jg, path, sizeof(path), err) ||
            fmt_check_keys(doc, jg, path, version >= 2 ? gpu_keys : gpu_keys_v1, err) ||
            mpress_jread_int(doc, jg, path, "gpu", INT_MIN, INT_MAX, &g->gpu, err) ||
            mpress_jread_int(doc, jg, path, "stage", INT_MIN, INT_MAX, &g->stage, err) ||
            mpress_jread_u64(doc, jg, path, "capacity_bytes", &g->capacity, err) ||
            mpress_jread_u64(doc, jg, path, "peak_bytes", &g->peak, err) ||
            mpress_jread_u64(doc, jg, path, "weights_bytes", &g->weights, err) ||
            mpress_jread_u64(doc, jg, path, "gradients_bytes", &g->gradients, err) ||
            mpress_jread_u64(doc, jg, path, "optimizer_bytes", &g->optimizer, err) ||
            mpress_jread_u64(doc, jg, path, "activations_bytes", &g->activations, err) ||
            mpress_jread_u64(doc, jg, path, "parked_bytes", &g->parked, err) ||
            mpress_jread_u64(doc, jg, path, "working_bytes", &g->working, err) ||
            mpress_jread_u64(doc, jg, path, "buffers_bytes", &g->buffers, err) ||
            mpress_jread_u64(doc, jg, path, "reserve_bytes", &g->reserve, err))
            return MPRESS_EINPUT;
        g->bound = g->peak;
        if (version >= 2 && mpress_jread_u64(doc, jg, path, "bound_bytes", &g->bound, err))
            return MPRESS_EINPUT;
        mpress_json_path_key(sub, sizeof(sub), path, "gpu");
        if (g->gpu != i)
            return mpress_json_doc_error(doc, err, sub, "expected %d (entries follow GPU order), "
                                         "got %d", i, g->gpu);
        int runs = -1;
        for (int s = 0; s < p->n_stages; s++)
            if (p->stages[s].gpu == i)
                runs = s;
        mpress_json_path_key(sub, sizeof(sub), path, "stage");
        if (g->stage != runs)
            return mpress_json_doc_error(doc, err, sub,
                                         "expected %d (the stage that stages[] maps to GPU %d, "
                                         "-1 for none), got %d",
                                         runs, i, g->stage);
        mpress_json_path_key(sub, sizeof(sub), path, "capacity_bytes");
        if (g->capacity != p->topology.gpus[i].memory_bytes)
            return mpress_json_doc_error(doc, err, sub,
                                         "expected the topology GPU's memory_bytes (%" PRIu64
                                         "), got %" PRIu64,
                                         p->topology.gpus[i].memory_bytes, g->capacity);
        const uint64_t parts[] = {g->weights, g->gradients, g->optimizer, g->activations,
                                  g->parked,  g->working,   g->buffers,   g->reserve};
        uint64_t sum = 0;
        int overflow = 0;
        for (size_t k = 0; k < sizeof(parts) / sizeof(parts[0]); k++) {
            if (parts[k] > UINT64_MAX - sum)
                overflow = 1;
            sum += parts[k];
        }
        mpress_json_path_key(sub, sizeof(sub), path, "peak_bytes");
        if (overflow || sum != g->peak)
            return mpress_json_doc_error(doc, err, sub,
                                         "expected the sum of the parts (%s%" PRIu64
                                         "), got %" PRIu64,
                                         overflow ? "more than " : "", sum, g->peak);
        mpress_json_path_key(sub, sizeof(sub), path, "bound_bytes");
        if (g->bound < g->peak)
            return mpress_json_doc_error(doc, err, sub,
                                         "expected at least peak_bytes (%" PRIu64 "), got %" PRIu64,
                                         g->peak, g->bound);
    }
    return 0;
}

static int read_solver(const struct mpress_json_doc *doc, struct mpress_plan *p,
                       struct mpress_error *err)
{
    json_t *js;
    struct mpress_plan_solver *s = &p->solver;
    if (mpress_jread_object(doc, doc->root, "", "solver", &js, err) ||
        fmt_check_keys(doc, js, "solver", solver_keys, err) ||
        fmt_read_name(doc, js, "solver", "status", s->status, sizeof(s->status), err) ||
        mpress_jread_real(doc, js, "solver", "objective_s", &s->objective, err) ||
        mpress_jread_real(doc, js, "solver", "bound_s", &s->bound, err) ||
        mpress_jread_nonneg(doc, js, "solver", "gap", &s->gap, err) ||
        mpress_jread_int(doc, js, "solver", "rows", 0, INT_MAX, &s->rows, err) ||
        mpress_jread_int(doc, js, "solver", "cols", 0, INT_MAX, &s->cols, err) ||
        mpress_jread_int(doc, js, "solver", "integer_cols", 0, INT_MAX, &s->integer_cols,
                         err) ||
        mpress_jread_int(doc, js, "solver", "nonzeros", 0, INT_MAX, &s->nonzeros, err))
        return MPRESS_EINPUT;
    json_t *v = json_object_get(js, "nodes");
    if (!v)
        return mpress_json_doc_error(doc, err, "solver.nodes", "missing field");
    if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) > LONG_MAX)
        return mpress_json_doc_error(doc, err, "solver.nodes",
                                     "expected an integer >= -1 (-1: not reported)");
    s->nodes = (long)json_integer_value(v);
    return 0;
}

static int read_baselines(const struct mpress_json_doc *doc, struct mpress_plan *p,
                          struct mpress_error *err)
{
    json_t *arr;
    char path[512], sub[512];
    if (mpress_jread_array(doc, doc->root, "", "baselines", &arr, err))
        return MPRESS_EINPUT;
    if (json_array_size(arr) > MPRESS_MAX_BASELINES)
        return mpress_json_doc_error(doc, err, "baselines", "expected at most %d, got %zu",
                                     MPRESS_MAX_BASELINES, json_array_size(arr));
    p->n_baselines = (int)json_array_size(arr);
    for (int i = 0; i < p->n_baselines; i++) {
        struct mpress_plan_baseline *b = &p->baselines[i];
        json_t *jb;
        if (fmt_array_object(doc, arr, (size_t)i, "baselines", &jb, path, sizeof(path), err) ||
            fmt_check_keys(doc, jb, path, baseline_keys, err) ||
            fmt_read_name(doc, jb, path, "policy", b->policy, sizeof(b->policy), err) ||
            mpress_jread_bool(doc, jb, path, "fits", &b->fits, err) ||
            mpress_jread_nonneg(doc, jb, path, "iteration_s", &b->iteration_s, err))
            return MPRESS_EINPUT;
        for (int k = 0; k < i; k++)
            if (strcmp(p->baselines[k].policy, b->policy) == 0) {
                mpress_json_path_key(sub, sizeof(sub), path, "policy");
                return mpress_json_doc_error(doc, err, sub,
                                             "duplicate baseline \"%s\" (also baselines[%d])",
                                             b->policy, k);
            }
        if (!b->fits && b->iteration_s != 0) {
            mpress_json_path_key(sub, sizeof(sub), path, "iteration_s");
            return mpress_json_doc_error(doc, err, sub,
                                         "expected 0 for a baseline that does not fit, got %g",
                                         b->iteration_s);
        }
    }
    return 0;
}

int fmt_plan_from_doc(const struct mpress_json_doc *doc, struct mpress_plan *out,
                      struct mpress_error *err)
{
    struct mpress_plan p;
    json_t *obj;
    int kind;
    mpress_plan_init(&p);
    int version = 0;
    if (mpress_jread_header(doc, doc->root, "", MPRESS_PLAN_FORMAT, MPRESS_PLAN_VERSION, &version,
                            err) ||
        fmt_check_keys(doc, doc->root, "", plan_keys, err) ||
        fmt_read_name(doc, doc->root, "", "generator", p.generator, sizeof(p.generator), err) ||
        fmt_read_name(doc, doc->root, "", "policy", p.policy, sizeof(p.policy), err) ||
        read_hash(doc, "profile_hash", p.profile_hash, err) ||
        read_hash(doc, "topology_hash", p.topology_hash, err) ||
        mpress_jread_object(doc, doc->root, "", "profile", &obj, err) ||
        mpress_profile_from_json(doc, obj, "profile", &p.profile, err))
        goto fail;
    if (mpress_jread_object(doc, doc->root, "", "topology", &obj, err) ||
        mpress_topology_from_json(doc, obj, "topology", &p.topology, err) ||
        check_hash(doc, "profile_hash", "profile", mpress_profile_to_json(&p.profile),
                   p.profile_hash, err) ||
        check_hash(doc, "topology_hash", "topology", mpress_topology_to_json(&p.topology),
                   p.topology_hash, err) ||
        fmt_read_choice(doc, doc->root, "", "schedule", schedule_names, &kind, err))
        goto fail;
    p.schedule = (enum mpress_schedule)kind;
    if (mpress_jread_int(doc, doc->root, "", "micro_batches", 1, INT_MAX, &p.micro_batches,
                         err) ||
        mpress_jread_int(doc, doc->root, "", "prefetch_lookahead", 0, INT_MAX,
                         &p.prefetch_lookahead, err) ||
        read_stages(doc, &p, err) || read_actions(doc, &p, err) || check_plan(doc, &p, err) ||
        read_gpus(doc, &p, version, err) ||
        mpress_jread_nonneg(doc, doc->root, "", "iteration_s", &p.iteration_s, err) ||
        mpress_jread_nonneg(doc, doc->root, "", "samples_per_s", &p.samples_per_s, err))
        goto fail;
    /* samples/s = micro-batches per iteration x samples per micro-batch / iteration time. */
    double want = p.iteration_s > 0
                      ? (double)p.micro_batches * p.profile.model.micro_batch / p.iteration_s
                      : 0;
    if (fabs(p.samples_per_s - want) > 1e-6 * want || (want == 0 && p.samples_per_s != 0)) {
        mpress_json_doc_error(doc, err, "samples_per_s",
                              "expected micro_batches x micro_batch / iteration_s = %.10g, "
                              "got %.10g",
                              want, p.samples_per_s);
        goto fail;
    }
    if (read_solver(doc, &p, err) || read_baselines(doc, &p, err))
        goto fail;
    *out = p;
    return 0;
fail:
    mpress_plan_finish(&p);
    return err && err->code ? err->code : MPRESS_EINPUT;
}

int fmt_plan_check(const struct mpress_json_doc *doc, struct mpress_error *err)
{
    struct mpress_plan p;
    int rc = fmt_plan_from_doc(doc, &p, err);
    if (rc == 0)
        mpress_plan_finish(&p);
    return rc;
}

int mpress_plan_load(const char *file, struct mpress_plan *out, struct mpress_error *err)
{
    struct mpress_json_doc doc;
    int rc = fmt_doc_load(&doc, file, err);
    if (rc == 0)
        rc = fmt_plan_from_doc(&doc, out, err);
    fmt_root_position(&doc, err);
    mpress_json_doc_finish(&doc);
    return rc;
}

/* ---- validate --------------------------------------------------------------------------- */

int mpress_validate_file(const char *file, char *kind, size_t kind_size,
                         struct mpress_error *err)
{
    struct mpress_json_doc doc;
    char fmt[64];
    int rc = fmt_doc_load(&doc, file, err);
    if (rc == 0)
        rc = mpress_jread_str(&doc, doc.root, "", "format", fmt, sizeof(fmt), err);
    if (rc == 0) {
        if (strcmp(fmt, MPRESS_TOPOLOGY_FORMAT) == 0)
            rc = fmt_topology_check(&doc, err);
        else if (strcmp(fmt, MPRESS_PROFILE_FORMAT) == 0)
            rc = fmt_profile_check(&doc, err);
        else if (strcmp(fmt, MPRESS_PLAN_FORMAT) == 0)
            rc = fmt_plan_check(&doc, err);
        else
            rc = mpress_json_doc_error(&doc, err, "format",
                                       "unknown format \"%s\" (expected \"%s\", \"%s\" or "
                                       "\"%s\")",
                                       fmt, MPRESS_TOPOLOGY_FORMAT, MPRESS_PROFILE_FORMAT,
                                       MPRESS_PLAN_FORMAT);
    }
    fmt_root_position(&doc, err);
    if (rc == 0 && kind && kind_size)
        snprintf(kind, kind_size, "%s", fmt);
    mpress_json_doc_finish(&doc);
    return rc;
}
