/* The one rule set of a plan's decisions (docs/formats.md, "Plan rules"). The plan loader
 * resolves names and types and then calls this; the evaluator calls it on every assignment the
 * baselines and the MILP produce; the simulator calls it before it lowers a plan. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mpress/plan.h"

/* Records the fault and formats the message; returns MPRESS_EINPUT. */
static int fault_at(struct mpress_plan_fault *f, struct mpress_error *err, int stage, int action,
                    int op, int tensor, int peer, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 8, 9)))
#endif
    ;

static int fault_at(struct mpress_plan_fault *f, struct mpress_error *err, int stage, int action,
                    int op, int tensor, int peer, const char *fmt, ...)
{
    /* f->path is filled by the caller before the call. */
    f->stage = stage;
    f->action = action;
    f->op = op;
    f->tensor = tensor;
    f->peer = peer;
    if (err) {
        err->code = MPRESS_EINPUT;
        snprintf(err->path, sizeof(err->path), "%s", f->path);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->text, sizeof(err->text), fmt, ap);
        va_end(ap);
    }
    return MPRESS_EINPUT;
}

static void path_stage(struct mpress_plan_fault *f, int k, const char *key)
{
    mpress_json_path_index(f->path, sizeof(f->path), "stages", (size_t)k);
    mpress_json_path_key(f->path, sizeof(f->path), f->path, key);
}

/* actions[j], and its member key unless key is "". */
static void path_action(struct mpress_plan_fault *f, int j, const char *key)
{
    mpress_json_path_index(f->path, sizeof(f->path), "actions", (size_t)j);
    if (key[0])
        mpress_json_path_key(f->path, sizeof(f->path), f->path, key);
}

static void path_peer(struct mpress_plan_fault *f, int j, int q, const char *key)
{
    path_action(f, j, "peers");
    mpress_json_path_index(f->path, sizeof(f->path), f->path, (size_t)q);
    mpress_json_path_key(f->path, sizeof(f->path), f->path, key);
}

static int check_stages(const struct mpress_profile *p, const struct mpress_topology *t,
                        int n_stages, const struct mpress_plan_stage *stages,
                        struct mpress_plan_fault *f, struct mpress_error *err)
{
    if (n_stages < 1 || n_stages > t->n_gpus || !stages) {
        snprintf(f->path, sizeof(f->path), "stages");
        return fault_at(f, err, -1, -1, -1, -1, -1,
                        "expected 1 to %d stages (one GPU each), got %d", t->n_gpus, n_stages);
    }
    int runs[MPRESS_MAX_GPUS];
    for (int g = 0; g < MPRESS_MAX_GPUS; g++)
        runs[g] = -1;
    for (int k = 0; k < n_stages; k++) {
        const struct mpress_plan_stage *s = &stages[k];
        int want_first = k == 0 ? 0 : stages[k - 1].last_op + 1;
        if (s->first_op != want_first) {
            path_stage(f, k, "first_op");
            return fault_at(f, err, k, -1, -1, -1, -1,
                            "expected %d (stages must cover the ops contiguously, in order), "
                            "got %d",
                            want_first, s->first_op);
        }
        path_stage(f, k, "last_op");
        if (s->last_op < s->first_op)
            return fault_at(f, err, k, -1, -1, -1, -1, "expected at least first_op (%d), got %d",
                            s->first_op, s->last_op);
        if (s->last_op >= p->n_ops)
            return fault_at(f, err, k, -1, -1, -1, -1, "op %d does not exist (ops has %d)",
                            s->last_op, p->n_ops);
        if (k == n_stages - 1 && s->last_op != p->n_ops - 1)
            return fault_at(f, err, k, -1, -1, -1, -1,
                            "the last stage must end at the last op (%d), got %d", p->n_ops - 1,
                            s->last_op);
        path_stage(f, k, "gpu");
        if (s->gpu < 0 || s->gpu >= t->n_gpus)
            return fault_at(f, err, k, -1, -1, -1, -1,
                            "GPU %d does not exist (the topology has %d)", s->gpu, t->n_gpus);
        if (runs[s->gpu] >= 0)
            return fault_at(f, err, k, -1, -1, -1, -1, "GPU %d already runs stages[%d]", s->gpu,
                            runs[s->gpu]);
        runs[s->gpu] = k;
        if (s->optimizer_on_host != 0 && s->optimizer_on_host != 1) {
            path_stage(f, k, "optimizer_on_host");
            return fault_at(f, err, k, -1, -1, -1, -1, "expected 0 or 1, got %d",
                            s->optimizer_on_host);
        }
    }
    return 0;
}

/* The D2D peers of action j (tensor of op i, stage k on GPU g). */
static int check_peers(const struct mpress_topology *t, const struct mpress_plan_action *a,
                       int j, int k, int g, uint64_t tensor_bytes, struct mpress_plan_fault *f,
                       struct mpress_error *err)
{
    path_action(f, j, "peers");
    if (a->action != MPRESS_ACTION_D2D_SWAP) {
        if (a->n_peers != 0)
            return fault_at(f, err, k, j, a->op, a->tensor, -1,
                            "only d2d_swap actions have peers (this one is %s)",
                            mpress_action_name(a->action));
        return 0;
    }
    if (a->n_peers < 1 || a->n_peers > t->n_gpus - 1)
        return fault_at(f, err, k, j, a->op, a->tensor, -1,
                        "expected 1 to %d peers for a d2d_swap, got %d", t->n_gpus - 1,
                        a->n_peers);
    uint64_t sum = 0;
    int overflow = 0;
    for (int q = 0; q < a->n_peers; q++) {
        int peer = a->peers[q];
        path_peer(f, j, q, "gpu");
        if (peer < 0 || peer >= t->n_gpus)
            return fault_at(f, err, k, j, a->op, a->tensor, q,
                            "GPU %d does not exist (the topology has %d)", peer, t->n_gpus);
        if (peer == g)
            return fault_at(f, err, k, j, a->op, a->tensor, q,
                            "GPU %d runs the tensor's own stage (stages[%d]): a D2D swap goes "
                            "to another GPU",
                            peer, k);
        for (int r = 0; r < q; r++)
            if (a->peers[r] == peer)
                return fault_at(f, err, k, j, a->op, a->tensor, q,
                                "GPU %d is listed twice (also actions[%d].peers[%d])", peer, j,
                                r);
        /* MPress's D2D swap moves tensors over NVLink to a peer's spare memory; a share sent
         * over PCIe would be a slower host swap that also takes the peer's memory. */
        if (!(mpress_topology_p2p_bytes_per_s(t, g, peer) > 0))
            return fault_at(f, err, k, j, a->op, a->tensor, q,
                            "GPU %d has no NVLink to GPU %d, which runs the tensor's stage "
                            "(stages[%d]): a D2D swap goes only to an NVLink peer",
                            peer, g, k);
        if (a->peer_bytes[q] > UINT64_MAX - sum)
            overflow = 1;
        sum += a->peer_bytes[q];
    }
    if (overflow || sum != tensor_bytes) {
        path_action(f, j, "peers");
        return fault_at(f, err, k, j, a->op, a->tensor, -1,
                        "peer bytes sum to %s%" PRIu64 ", not the tensor's %" PRIu64 " bytes",
                        overflow ? "more than " : "", overflow ? UINT64_MAX : sum,
                        tensor_bytes);
    }
    return 0;
}

static int check_actions(const struct mpress_profile *p, const struct mpress_topology *t,
                         const struct mpress_plan_stage *stages, int n_actions,
                         const struct mpress_plan_action *actions, struct mpress_plan_fault *f,
                         struct mpress_error *err)
{
    int j = 0, k = 0;
    for (int i = 0; i < p->n_ops; i++) {
        while (stages[k].last_op < i)
            k++;
        const struct mpress_plan_stage *st = &stages[k];
        for (int ti = 0; ti < p->ops[i].n_tensors; ti++, j++) {
            const struct mpress_saved_tensor *ts = &p->ops[i].tensors[ti];
            if (j >= n_actions) {
                snprintf(f->path, sizeof(f->path), "actions");
                return fault_at(f, err, k, -1, i, ti, -1,
                                "no action for tensor \"%s\" (ops[%d].tensors[%d]): every "
                                "saved tensor needs exactly one",
                                ts->id, i, ti);
            }
            const struct mpress_plan_action *a = &actions[j];
            if (a->op != i || a->tensor != ti) {
                path_action(f, j, "");
                const char *got = a->op >= 0 && a->op < p->n_ops && a->tensor >= 0 &&
                                          a->tensor < p->ops[a->op].n_tensors
                                      ? p->ops[a->op].tensors[a->tensor].id
                                      : "(none)";
                return fault_at(f, err, k, j, i, ti, -1,
                                "actions must follow the profile's tensor order: expected "
                                "tensor \"%s\" here, got \"%s\" (ops[%d].tensors[%d] comes "
                                "next)",
                                ts->id, got, i, ti);
            }
            if ((int)a->action < 0 || (int)a->action >= MPRESS_N_ACTIONS) {
                path_action(f, j, "action");
                return fault_at(f, err, k, j, i, ti, -1, "unknown action kind %d",
                                (int)a->action);
            }
            int rc = check_peers(t, a, j, k, st->gpu, ts->bytes, f, err);
            if (rc)
                return rc;
            /* The tensor exists only after its op's forward and is read by that op's
             * backward; backward runs the stage's ops in reverse. */
            static const char *const keys[2] = {"evict_after_op", "prefetch_before_op"};
            const int vals[2] = {a->evict_after_op, a->prefetch_before_op};
            for (int w = 0; w < 2; w++) {
                path_action(f, j, keys[w]);
                if (a->action == MPRESS_ACTION_KEEP && vals[w] != -1)
                    return fault_at(f, err, k, j, i, ti, -1,
                                    "expected -1 for a kept tensor, got %d", vals[w]);
                if (a->action != MPRESS_ACTION_KEEP && (vals[w] < i || vals[w] > st->last_op))
                    return fault_at(f, err, k, j, i, ti, -1,
                                    "expected an op in [%d, %d] (from the action's op to the "
                                    "end of its stage), got %d",
                                    i, st->last_op, vals[w]);
            }
        }
    }
    if (n_actions != j) {
        path_action(f, j, "");
        return fault_at(f, err, -1, j, -1, -1, -1,
                        "%d actions for %d saved tensors: every saved tensor needs exactly one",
                        n_actions, j);
    }
    return 0;
}

int mpress_plan_check(const struct mpress_profile *p, const struct mpress_topology *t,
                      int micro_batches, int n_stages, const struct mpress_plan_stage *stages,
                      int n_actions, const struct mpress_plan_action *actions,
                      struct mpress_plan_fault *fault, struct mpress_error *err)
{
    struct mpress_plan_fault local;
    struct mpress_plan_fault *f = fault ? fault : &local;
    memset(f, 0, sizeof(*f));
    f->stage = f->action = f->op = f->tensor = f->peer = -1;
    if (micro_batches < 1 || micro_batches > MPRESS_MAX_MICRO_BATCHES) {
        snprintf(f->path, sizeof(f->path), "micro_batches");
        return fault_at(f, err, -1, -1, -1, -1, -1,
                        "expected 1 to %d micro-batches (the supported limit), got %d",
                        MPRESS_MAX_MICRO_BATCHES, micro_batches);
    }
    /* Counts a consumer multiplies: in 64 bits here. */
    long long slots = (long long)micro_batches * ((long long)p->n_ops + n_actions);
    if (slots > MPRESS_MAX_SCHEDULE_SLOTS) {
        snprintf(f->path, sizeof(f->path), "micro_batches");
        return fault_at(f, err, -1, -1, -1, -1, -1,
                        "%d micro-batches x (%d ops + %d saved tensors) = %lld schedule slots, "
                        "above the supported %ld",
                        micro_batches, p->n_ops, n_actions, slots, MPRESS_MAX_SCHEDULE_SLOTS);
    }
    if (t->n_gpus < 1 || t->n_gpus > MPRESS_MAX_GPUS) {
        snprintf(f->path, sizeof(f->path), "topology.gpus");
        return fault_at(f, err, -1, -1, -1, -1, -1, "expected 1 to %d GPUs, got %d",
                        MPRESS_MAX_GPUS, t->n_gpus);
    }
    if (p->n_ops < 1) {
        snprintf(f->path, sizeof(f->path), "profile.ops");
        return fault_at(f, err, -1, -1, -1, -1, -1, "the profile has no ops");
    }
    int rc = check_stages(p, t, n_stages, stages, f, err);
    if (rc == 0)
        rc = check_actions(p, t, stages, n_actions, actions, f, err);
    return rc;
}
