/* Trial evaluations of one changed action on the stage sums of a base assignment
 * (eval_trial.h). The sums after the change are the base's with the tensor's bytes (and, for a
 * recompute, its time) moved from one term to another; everything after the sums is the
 * evaluator's own code (plan_eval_sums), so only the order in which a stage's times are added
 * can differ from the full evaluation. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval_trial.h"
#include "plan_internal.h"

int plan_trial_init(struct plan_trial *t, const struct mpress_profile *p,
                    struct mpress_error *err)
{
    memset(t, 0, sizeof(*t));
    t->n_actions = plan_count_tensors(p);
    t->s.d2d = calloc(MPRESS_MAX_GPUS, sizeof(*t->s.d2d));
    t->stage_of = malloc(sizeof(int) * (size_t)(t->n_actions > 0 ? t->n_actions : 1));
    t->pre = calloc(p->n_ops > 0 ? (size_t)p->n_ops : 1, sizeof(*t->pre));
    t->suf = calloc(p->n_ops > 0 ? (size_t)p->n_ops : 1, sizeof(*t->suf));
    if (!t->s.d2d || !t->stage_of || !t->pre || !t->suf) {
        plan_trial_free(t);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    return 0;
}

void plan_trial_free(struct plan_trial *t)
{
    free(t->s.d2d);
    free(t->stage_of);
    free(t->pre);
    free(t->suf);
    memset(t, 0, sizeof(*t));
}

/* Start of an evaluation: what mpress_plan_evaluate zeroes and sets. */
static void eval_clear(struct mpress_plan_eval *ev)
{
    memset(ev, 0, sizeof(*ev));
    ev->short_gpu = -1;
    ev->drain_gpu = -1;
}

/* Whether t's stage facts are those of a's stages (they depend on the cuts only). */
static int stages_known(const struct plan_trial *t, const struct mpress_assignment *a)
{
    if (t->n_stages != a->n_stages)
        return 0;
    for (int k = 0; k < a->n_stages; k++)
        if (t->first_op[k] != a->stages[k].first_op || t->last_op[k] != a->stages[k].last_op)
            return 0;
    return 1;
}

/* What the trials of a's stages need to know whatever the actions: the stage of each action,
 * whether byte deltas are exact, and the rounding bound of each stage's time. */
static void stage_facts(struct plan_trial *t, const struct mpress_profile *p,
                        const struct mpress_assignment *a)
{
    t->n_stages = a->n_stages;
    /* Byte deltas are exact when no sum of saved bytes can saturate, whatever the actions:
     * then every stage sum is the plain sum, in any order. */
    uint64_t all = 0;
    t->exact_bytes = 1;
    t->stages_finite = 1;
    int j = 0;
    for (int k = 0; k < a->n_stages; k++) {
        const struct mpress_plan_stage *st = &a->stages[k];
        uint64_t stage = 0;
        double mag = 0;
        long terms = 0;
        for (int i = st->first_op; i <= st->last_op; i++) {
            const struct mpress_op *op = &p->ops[i];
            mag += fabs(op->fwd_s + op->bwd_s);
            terms++;
            for (int q = 0; q < op->n_tensors; q++, j++) {
                uint64_t b = op->tensors[q].bytes;
                if (b > UINT64_MAX - stage || b > UINT64_MAX - all)
                    t->exact_bytes = 0;
                stage = plan_add(stage, b);
                all = plan_add(all, b);
                mag += fabs(op->tensors[q].recompute_s);
                terms++;
                t->stage_of[j] = k;
            }
            if (op->workspace_bytes > UINT64_MAX - stage)
                t->exact_bytes = 0; /* pre and suf could saturate */
        }
        /* Two sums of the same terms in different orders differ by at most twice the
         * worst-case rounding of one: 2 (n + 1) u sum |terms| (u = 2^-53), doubled again. */
        t->comp_err[k] = (double)(terms + 2) * ldexp(mag, -51);
        if (!isfinite(t->comp_err[k]))
            t->stages_finite = 0;
        t->first_op[k] = st->first_op, t->last_op[k] = st->last_op;
    }
}

/* pre and suf of stage k's ops (plan_trial), whose first action is j0. */
static void stage_extremes(struct plan_trial *t, const struct mpress_profile *p,
                           const struct mpress_assignment *a, int k, int j0)
{
    const struct mpress_plan_stage *st = &a->stages[k];
    uint64_t kc = 0, best = 0;
    int j = j0;
    for (int i = st->first_op; i <= st->last_op; i++) {
        const struct mpress_op *op = &p->ops[i];
        for (int q = 0; q < op->n_tensors; q++, j++)
            if (a->actions[j].action == MPRESS_ACTION_KEEP)
                kc = plan_add(kc, op->tensors[q].bytes);
        uint64_t v = plan_add(op->workspace_bytes, kc);
        t->suf[i] = v; /* the value itself, until the backward sweep below */
        if (v > best)
            best = v;
        t->pre[i] = best;
    }
    best = 0;
    for (int i = st->last_op; i >= st->first_op; i--) {
        if (t->suf[i] > best)
            best = t->suf[i];
        t->suf[i] = best;
    }
}

/* The first action of stage k's first op. */
static int stage_first_action(const struct mpress_profile *p, const struct mpress_assignment *a,
                              int k)
{
    int j = 0;
    for (int i = 0; i < a->stages[k].first_op; i++)
        j += p->ops[i].n_tensors;
    return j;
}

void plan_trial_base(struct plan_trial *t, const struct mpress_profile *p,
                     const struct mpress_topology *topo, enum mpress_schedule schedule, int M,
                     const struct mpress_assignment *a, struct mpress_plan_eval *ev)
{
    uint64_t(*d2d)[MPRESS_MAX_GPUS] = t->s.d2d;
    memset(&t->s, 0, sizeof(t->s));
    memset(d2d, 0, sizeof(*d2d) * MPRESS_MAX_GPUS);
    t->s.d2d = d2d;
    eval_clear(ev);
    plan_sum_stages(p, a, &t->s, ev);
    memcpy(t->action_bytes, ev->action_bytes, sizeof(t->action_bytes));
    if (!stages_known(t, a))
        stage_facts(t, p, a);
    t->finite = t->stages_finite;
    t->stale = 0;
    int j0 = 0;
    for (int k = 0; k < a->n_stages; k++) {
        t->drift[k] = 0;
        if (!isfinite(t->s.comp[k]))
            t->finite = 0;
        stage_extremes(t, p, a, k, j0);
        for (int i = a->stages[k].first_op; i <= a->stages[k].last_op; i++)
            j0 += p->ops[i].n_tensors;
    }
    plan_eval_sums(p, topo, schedule, M, a, &t->s, ev);
    if (!isfinite(ev->iteration_s))
        t->finite = 0;
}

/* Add (sign 1) or remove (sign -1) the bytes of tensor ts under action ac in stage k of the
 * sums, and its bytes in action_bytes (exact when t->exact_bytes), and with timed its recompute
 * time. */
static void move_terms(struct plan_trial *t, int k, int first_op,
                       const struct mpress_saved_tensor *ts, const struct mpress_plan_action *ac,
                       int sign, int timed)
{
    struct stage_sums *s = &t->s;
    uint64_t b = ts->bytes;
#define DELTA(x, v) ((x) = sign > 0 ? (x) + (v) : (x) - (v))
    DELTA(t->action_bytes[ac->action], b);
    /* recomputed from an earlier stage's op: held like a kept tensor (plan_sum_stages) */
    int held = ac->action == MPRESS_ACTION_RECOMPUTE && plan_stage_input(ts, first_op);
    if (ac->action == MPRESS_ACTION_KEEP || held) {
        DELTA(s->kept[k], b);
        if (!held)
            DELTA(s->kc[k], b);
        if (held && timed)
            s->comp[k] += sign * ts->recompute_s;
        return;
    }
    DELTA(s->evicted[k], b);
    if (ac->action == MPRESS_ACTION_RECOMPUTE) {
        if (timed)
            s->comp[k] += sign * ts->recompute_s;
    }
    else if (ac->action == MPRESS_ACTION_HOST_SWAP)
        DELTA(s->host[k], b);
    else
        for (int q = 0; q < ac->n_peers; q++)
            DELTA(s->d2d[k][ac->peers[q]], ac->peer_bytes[q]);
#undef DELTA
}

int plan_trial_eval(struct plan_trial *t, const struct mpress_profile *p,
                    const struct mpress_topology *topo, enum mpress_schedule schedule, int M,
                    const struct mpress_assignment *a, int j,
                    const struct mpress_plan_action *old, struct mpress_plan_eval *ev,
                    double *time_err)
{
    *time_err = 0;
    const struct mpress_plan_action *ac = j >= 0 ? &a->actions[j] : NULL;
    int timed = ac && (old->action == MPRESS_ACTION_RECOMPUTE) !=
                          (ac->action == MPRESS_ACTION_RECOMPUTE);
    if (!t->exact_bytes || t->stale || (timed && !t->finite))
        return plan_evaluate_unchecked(p, topo, schedule, M, a, ev, NULL) ? MPRESS_ESYSTEM : 0;
    eval_clear(ev);
    const int k = ac ? t->stage_of[j] : 0;
    if (ac) {
        const struct mpress_saved_tensor *ts = &p->ops[ac->op].tensors[ac->tensor];
        struct stage_sums keep = t->s; /* the arrays; d2d is restored by the reverse moves */
        uint64_t keep_bytes[MPRESS_N_ACTIONS];
        memcpy(keep_bytes, t->action_bytes, sizeof(keep_bytes));
        move_terms(t, k, a->stages[k].first_op, ts, old, -1, timed);
        move_terms(t, k, a->stages[k].first_op, ts, ac, 1, timed);
        /* Only the values of ops ac->op onwards move, by the change in kept bytes. */
        uint64_t after = t->suf[ac->op], kc0 = keep.kc[k], kc1 = t->s.kc[k];
        after = kc1 >= kc0 ? plan_add(after, kc1 - kc0) : after - (kc0 - kc1);
        uint64_t before = ac->op > a->stages[k].first_op ? t->pre[ac->op - 1] : 0;
        t->s.wv[k] = after > before ? after : before;
        memcpy(ev->action_bytes, t->action_bytes, sizeof(ev->action_bytes));
        plan_eval_sums(p, topo, schedule, M, a, &t->s, ev);
        move_terms(t, k, a->stages[k].first_op, ts, ac, -1, 0);
        move_terms(t, k, a->stages[k].first_op, ts, old, 1, 0);
        keep.d2d = t->s.d2d;
        t->s = keep;
        memcpy(t->action_bytes, keep_bytes, sizeof(keep_bytes));
    } else {
        memcpy(ev->action_bytes, t->action_bytes, sizeof(ev->action_bytes));
        plan_eval_sums(p, topo, schedule, M, a, &t->s, ev);
    }
    /* comp[k] moves by comp_err[k] at most, and every stage by the rounding its commits
     * added; the iteration time takes a stage's time once in the fill and drain, M - 1 times
     * in the cycle and once in the optimizer tail's slack, and every later operation may
     * round once more. */
    double moved = timed ? t->comp_err[k] : 0;
    for (int q = 0; q < a->n_stages; q++)
        moved += t->drift[q];
    if (moved > 0) {
        double mag = fmax(fabs(ev->iteration_s), fabs(ev->fill_drain_s) + fabs(ev->tail_s));
        *time_err = 2 * ((double)(M + a->n_stages + 2) * moved +
                         (double)(a->n_stages + 8) * ldexp(mag, -52));
    }
    return 0;
}

void plan_trial_commit(struct plan_trial *t, const struct mpress_profile *p,
                       const struct mpress_assignment *a, int j,
                       const struct mpress_plan_action *old)
{
    const struct mpress_plan_action *ac = &a->actions[j];
    if (!t->exact_bytes)
        return; /* the trials fall back to the full evaluation */
    const int k = t->stage_of[j];
    const struct mpress_saved_tensor *ts = &p->ops[ac->op].tensors[ac->tensor];
    int timed =
        (old->action == MPRESS_ACTION_RECOMPUTE) != (ac->action == MPRESS_ACTION_RECOMPUTE);
    move_terms(t, k, a->stages[k].first_op, ts, old, -1, timed);
    move_terms(t, k, a->stages[k].first_op, ts, ac, 1, timed);
    stage_extremes(t, p, a, k, stage_first_action(p, a, k));
    t->s.wv[k] = t->pre[a->stages[k].last_op];
    if (timed)
        t->drift[k] += ldexp(fabs(t->s.comp[k]) + fabs(ts->recompute_s), -51);
    if (timed && !(t->finite && isfinite(t->drift[k])))
        t->stale = 1; /* no bound on the times: full evaluations until the next base */
}
