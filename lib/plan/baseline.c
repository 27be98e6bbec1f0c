/* Baseline policies on the planner's cost model: none (save nothing), recompute (Megatron /
 * DAPPLE full recompute), swap (every saved tensor to host) and greedy (per short GPU, the
 * action with the most bytes freed per second lost). All use an even partition by time and a
 * GPU order that follows NVLink, so the MILP's gain over them is measured on equal terms. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval_trial.h"
#include "plan_internal.h"

void plan_cut_points(const struct mpress_profile *p, enum mpress_cuts cuts, char *cut_ok)
{
    int has_layers = 0;
    for (int i = 0; i < p->n_ops; i++)
        if (p->ops[i].layer >= 0)
            has_layers = 1;
    int layers = cuts == MPRESS_CUTS_LAYERS || (cuts == MPRESS_CUTS_AUTO && has_layers);
    for (int i = 0; i < p->n_ops; i++)
        cut_ok[i] = i + 1 == p->n_ops || !layers || p->ops[i].layer != p->ops[i + 1].layer;
}

int plan_even_partition(const struct mpress_profile *p, const char *cut_ok, int s,
                        const int *order, struct mpress_assignment *a)
{
    /* Blocks between allowed cuts; f[j][b] = best largest stage time for blocks 0..b in j+1
     * stages (dynamic programming over the last stage's first block). */
    int n = p->n_ops, nb = 0;
    int *end = malloc(sizeof(int) * (size_t)n);
    double *pre = malloc(sizeof(double) * (size_t)(n + 1));
    if (!end || !pre) {
        free(end);
        free(pre);
        return 0;
    }
    /* Op times are finite but their sum need not be (1e308 s each): then the prefix sums are
     * taken on times scaled by 2^-32, which is exact, keeps every partial sum of at most
     * MPRESS_MAX_OPS ops finite and leaves the best partition what it was; a span is then
     * never inf - inf. */
    double total = 0, scale = 1;
    for (int i = 0; i < n; i++)
        total += p->ops[i].fwd_s + p->ops[i].bwd_s;
    if (!isfinite(total))
        scale = ldexp(1.0, -32);
    pre[0] = 0;
    for (int i = 0; i < n; i++) {
        pre[i + 1] = pre[i] + (p->ops[i].fwd_s * scale + p->ops[i].bwd_s * scale);
        if (cut_ok[i])
            end[nb++] = i;
    }
    if (s > nb)
        s = nb;
    double *f = malloc(sizeof(double) * (size_t)(s * nb));
    int *from = malloc(sizeof(int) * (size_t)(s * nb));
    if (!f || !from) {
        free(end), free(pre), free(f), free(from);
        return 0;
    }
#define SPAN(b0, b1) (pre[end[b1] + 1] - pre[(b0) > 0 ? end[(b0)-1] + 1 : 0])
    for (int b = 0; b < nb; b++) {
        f[b] = SPAN(0, b);
        from[b] = 0;
    }
    /* The last stage is blocks c..b, for the least c in [j, b] that minimises
     * max(f[j-1][c-1], SPAN(c, b)). The first term never decreases with c (more blocks never
     * shorten the best largest stage) and the second never increases (the prefix sums of
     * non-negative times are monotone, and so is their rounding), so the best c is where they
     * cross, found by bisection: O(s B log B) for B blocks instead of O(s B^2), with the same
     * cuts (tests/plan/test_partition.c checks this against the full scan). */
    for (int j = 1; j < s; j++)
        for (int b = 0; b < nb; b++) {
            f[j * nb + b] = DBL_MAX;
            from[j * nb + b] = -1;
            if (b < j)
                continue;
            const double *prev = f + (j - 1) * nb; /* prev[c - 1]: the first term */
            int lo = j, hi = b + 1;                 /* the first c with prev[c-1] >= SPAN */
            while (lo < hi) {
                int mid = lo + (hi - lo) / 2;
                if (prev[mid - 1] >= SPAN(mid, b))
                    hi = mid;
                else
                    lo = mid + 1;
            }
            int c = lo;
            if (c > j) {
                /* Left of c the span decides: its least value is SPAN(c - 1, b), reached
                 * first at the least c' with that span (zero-time blocks repeat it). */
                double left = SPAN(c - 1, b);
                if (c > b || !(prev[c - 1] < left)) {
                    for (lo = j, hi = c - 1; lo < hi;) {
                        int mid = lo + (hi - lo) / 2;
                        if (SPAN(mid, b) <= left)
                            hi = mid;
                        else
                            lo = mid + 1;
                    }
                    c = lo;
                }
            }
            f[j * nb + b] = fmax(prev[c - 1], SPAN(c, b));
            from[j * nb + b] = c;
        }
    int b = nb - 1;
    for (int j = s - 1; j >= 0; j--) {
        int c = from[j * nb + b];
        a->stages[j].first_op = c > 0 ? end[c - 1] + 1 : 0;
        a->stages[j].last_op = end[b];
        a->stages[j].gpu = order[j];
        a->stages[j].optimizer_on_host = 0;
        b = c - 1;
    }
#undef SPAN
    a->n_stages = s;
    free(end), free(pre), free(f), free(from);
    return s;
}

static int path_dfs(const struct mpress_topology *t, int *order, int depth, int *used)
{
    if (depth == t->n_gpus)
        return 1;
    int last = order[depth - 1];
    for (int g = 0; g < t->n_gpus; g++) {
        if (used[g] || plan_nvlink_bw(t, last, g) <= 0)
            continue;
        used[g] = 1;
        order[depth] = g;
        if (path_dfs(t, order, depth + 1, used))
            return 1;
        used[g] = 0;
    }
    return 0;
}

void plan_gpu_order(const struct mpress_topology *t, int *order)
{
    for (int start = 0; start < t->n_gpus; start++) {
        int used[MPRESS_MAX_GPUS] = {0};
        order[0] = start;
        used[start] = 1;
        if (path_dfs(t, order, 1, used))
            return;
    }
    for (int g = 0; g < t->n_gpus; g++)
        order[g] = g;
}

static void set_action(struct mpress_plan_action *ac, enum mpress_action kind, int stage_last)
{
    ac->action = kind;
    ac->n_peers = 0;
    ac->evict_after_op = kind == MPRESS_ACTION_KEEP ? -1 : ac->op;
    ac->prefetch_before_op = plan_prefetch_point(kind, ac->op, stage_last);
}

/* The greedy search. Each step scores candidate moves on the current assignment: a stage's
 * optimizer states to host, or a saved tensor's action changed (keep -> recompute, host or an
 * NVLink peer; d2d -> host for parked bytes; host -> recompute where evictions outrun their
 * links), only on stages that can help, one tensor per class (the rest are interchangeable),
 * and applies the one with the most shortfall removed per second of iteration time added.
 * Scores come from trial evaluations of the one change on the step's stage sums
 * (eval_trial.h); the trial's times can differ from the full evaluation's in the last bits
 * when a recompute is added, so the candidates that could be the best within that error are
 * scored again by the full evaluation, and the choice is the full evaluation's. Per stage and
 * kind of action held, at most GREEDY_TOP classes by bytes and GREEDY_TOP by bytes per second
 * of recompute are tried (every class when there are fewer: all shipped profiles). */
#define GREEDY_TOP 32
/* Full evaluations a step spends at most to settle near-ties of trial scores. */
#define GREEDY_VERIFY 16

struct greedy_cand {
    int stage, j, kind, peer; /* j < 0: the stage's optimizer to host; kind >= 3: D2D */
    int grp;                  /* the group of the action held (stage_reps) */
    double score, lo, hi;     /* the trial's score and bounds on the full evaluation's */
};

struct greedy {
    const struct mpress_profile *p;
    const struct mpress_topology *topo;
    const struct mpress_plan_options *o;
    struct plan_trial trial;
    int *first_j;   /* first action of each stage, n_stages + 1 */
    int *cls;       /* class of each action: the least action index of its class */
    int *name_id;   /* the least action index of the same op kind and tensor name */
    char bounded[MPRESS_MAX_GPUS][3]; /* this step left out some of stage k's group */
    int *seen;      /* per class: token of the stage visit it was last met as keep */
    int *seen_host; /* ... as host swap */
    int *seen_d2d;  /* ... as D2D, with the peers met in d2d_mask */
    uint32_t *d2d_mask;
    int token;
    int base_ok; /* the trial's base is the assignment as it stands */
    int *reps;   /* representatives of one stage (scratch) */
    char *group; /* their group: 0 keep, 1 host, 2 d2d; 3 when left out */
    char *pick;  /* scratch for bound_reps */
    struct greedy_cand *cand;
    int n_cand, cap_cand;
};

struct class_key {
    const char *kind, *name;
    uint64_t bytes;
    double recompute_s;
    int j;
};

static int class_cmp(const void *x, const void *y)
{
    const struct class_key *a = x, *b = y;
    int c = strcmp(a->kind, b->kind);
    if (c == 0)
        c = strcmp(a->name, b->name);
    if (c == 0)
        c = (a->bytes > b->bytes) - (a->bytes < b->bytes);
    if (c == 0)
        c = (a->recompute_s > b->recompute_s) - (a->recompute_s < b->recompute_s);
    return c ? c : (a->j > b->j) - (a->j < b->j);
}

/* cls[j]: the least action index whose tensor is of j's class (plan_same_class). */
static int greedy_classes(struct greedy *g, const struct mpress_assignment *a)
{
    int n = a->n_actions;
    struct class_key *keys = malloc(sizeof(*keys) * (size_t)(n > 0 ? n : 1));
    if (!keys)
        return -1;
    for (int j = 0; j < n; j++) {
        const struct mpress_op *op = &g->p->ops[a->actions[j].op];
        const struct mpress_saved_tensor *ts = &op->tensors[a->actions[j].tensor];
        keys[j] = (struct class_key){op->kind, ts->name, ts->bytes, ts->recompute_s, j};
    }
    qsort(keys, (size_t)n, sizeof(*keys), class_cmp);
    for (int q = 0, first = -1, named = -1; q < n; q++) {
        int name = q == 0 || strcmp(keys[q].kind, keys[q - 1].kind) != 0 ||
                   strcmp(keys[q].name, keys[q - 1].name) != 0;
        if (name)
            named = keys[q].j;
        if (name || keys[q].bytes != keys[q - 1].bytes ||
            keys[q].recompute_s != keys[q - 1].recompute_s)
            first = keys[q].j;
        g->cls[keys[q].j] = first;
        g->name_id[keys[q].j] = named;
    }
    free(keys);
    return 0;
}

static void greedy_free(struct greedy *g)
{
    plan_trial_free(&g->trial);
    free(g->first_j), free(g->cls), free(g->name_id), free(g->seen), free(g->seen_host), free(g->seen_d2d);
    free(g->d2d_mask), free(g->reps), free(g->group), free(g->pick), free(g->cand);
}

static int greedy_init(struct greedy *g, const struct mpress_profile *p,
                       const struct mpress_topology *topo, const struct mpress_plan_options *o,
                       const struct mpress_assignment *a, struct mpress_error *err)
{
    memset(g, 0, sizeof(*g));
    g->p = p, g->topo = topo, g->o = o;
    int rc = plan_trial_init(&g->trial, p, err);
    if (rc)
        return rc;
    size_t n = (size_t)(a->n_actions > 0 ? a->n_actions : 1);
    g->first_j = malloc(sizeof(int) * (size_t)(a->n_stages + 1));
    g->cls = malloc(sizeof(int) * n);
    g->name_id = malloc(sizeof(int) * n);
    g->seen = calloc(n, sizeof(int));
    g->seen_host = calloc(n, sizeof(int));
    g->seen_d2d = calloc(n, sizeof(int));
    g->d2d_mask = calloc(n, sizeof(uint32_t));
    g->reps = malloc(sizeof(int) * n);
    g->group = malloc(n);
    g->pick = malloc(n);
    if (!g->first_j || !g->cls || !g->name_id || !g->seen || !g->seen_host || !g->seen_d2d || !g->d2d_mask ||
        !g->reps || !g->group || !g->pick || greedy_classes(g, a)) {
        greedy_free(g);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    int j = 0;
    for (int k = 0; k < a->n_stages; k++) {
        g->first_j[k] = j;
        for (int i = a->stages[k].first_op; i <= a->stages[k].last_op; i++)
            j += p->ops[i].n_tensors;
    }
    g->first_j[a->n_stages] = j;
    return 0;
}

/* Give action ac the move's action (kind >= 3: D2D to peer, the whole tensor). */
static void make_move(struct mpress_plan_action *ac, int kind, int peer, int stage_last,
                      uint64_t bytes)
{
    set_action(ac, kind >= 3 ? MPRESS_ACTION_D2D_SWAP : (enum mpress_action)kind, stage_last);
    if (peer >= 0) {
        ac->n_peers = 1;
        ac->peers[0] = peer;
        ac->peer_bytes[0] = bytes;
    }
}

/* Score of the evaluation trial against the step's start (shortfall short0, time t0), and
 * bounds on the score of a full evaluation whose time is within err of trial's; -1 when it
 * removes nothing. */
static double score_of(const struct mpress_plan_eval *trial, double err, uint64_t short0,
                       double t0, double *lo, double *hi)
{
    uint64_t s1 = plan_shortfall(trial);
    if (s1 >= short0)
        return *lo = *hi = -1;
    double d = (double)(short0 - s1), it = trial->iteration_s;
    double score = d / fmax(it - t0, 1e-12);
    *lo = err > 0 ? d / fmax((it + err) - t0, 1e-12) : score;
    *hi = err > 0 ? d / fmax((it - err) - t0, 1e-12) : score;
    return score;
}

/* Record a candidate move with its trial evaluation (nothing when it removes nothing). */
static int add_cand(struct greedy *g, const struct mpress_plan_eval *trial, double err,
                    uint64_t short0, double t0, int stage, int j, int kind, int peer, int grp)
{
    struct greedy_cand c = {.stage = stage, .j = j, .kind = kind, .peer = peer, .grp = grp};
    c.score = score_of(trial, err, short0, t0, &c.lo, &c.hi);
    if (c.score < 0)
        return 0;
    if (g->n_cand == g->cap_cand) {
        int cap = g->cap_cand ? 2 * g->cap_cand : 256;
        struct greedy_cand *q = realloc(g->cand, sizeof(*q) * (size_t)cap);
        if (!q)
            return -1;
        g->cand = q, g->cap_cand = cap;
    }
    g->cand[g->n_cand++] = c;
    return 0;
}

/* The representatives of stage k that a step may move: one tensor per class and action held
 * (and D2D peer), with bytes, in action order; their groups in g->group. Returns how many. */
static int stage_reps(struct greedy *g, const struct mpress_assignment *a,
                      const struct mpress_plan_eval *ev, int k)
{
    const int gpu = a->stages[k].gpu, tok = ++g->token;
    int n = 0;
    for (int j = g->first_j[k]; j < g->first_j[k + 1]; j++) {
        const struct mpress_plan_action *ac = &a->actions[j];
        if (g->p->ops[ac->op].tensors[ac->tensor].bytes == 0)
            continue;
        int c = g->cls[j], grp;
        if (ac->action == MPRESS_ACTION_KEEP) {
            if (g->seen[c] == tok)
                continue;
            g->seen[c] = tok, grp = 0;
        } else if (ac->action == MPRESS_ACTION_HOST_SWAP) {
            if (ev->drain_gpu != gpu || g->seen_host[c] == tok)
                continue;
            g->seen_host[c] = tok, grp = 1;
        } else if (ac->action == MPRESS_ACTION_D2D_SWAP) {
            if (g->seen_d2d[c] != tok)
                g->seen_d2d[c] = tok, g->d2d_mask[c] = 0;
            uint32_t bit = (uint32_t)1 << ac->peers[0];
            if (g->d2d_mask[c] & bit)
                continue;
            g->d2d_mask[c] |= bit, grp = 2;
        } else {
            continue;
        }
        g->reps[n] = j;
        g->group[n++] = (char)grp;
    }
    return n;
}

/* Mark in pick the GREEDY_TOP representatives of group grp with the most bytes (by_ratio:
 * bytes per second of recompute), earlier ones first among equals. */
static void top_pick(const struct greedy *g, const struct mpress_assignment *a, int n, int grp,
                     int by_ratio, char *pick)
{
    double key[GREEDY_TOP];
    int pos[GREEDY_TOP], m = 0;
    for (int q = 0; q < n; q++) {
        if (g->group[q] != grp)
            continue;
        const struct mpress_plan_action *ac = &a->actions[g->reps[q]];
        const struct mpress_saved_tensor *ts = &g->p->ops[ac->op].tensors[ac->tensor];
        double v = (double)ts->bytes;
        if (by_ratio)
            v = ts->recompute_s > 0 ? v / ts->recompute_s : INFINITY;
        if (m == GREEDY_TOP && !(v > key[m - 1]))
            continue;
        int at = m < GREEDY_TOP ? m++ : m - 1;
        for (; at > 0 && v > key[at - 1]; at--)
            key[at] = key[at - 1], pos[at] = pos[at - 1];
        key[at] = v, pos[at] = q;
    }
    for (int i = 0; i < m; i++)
        pick[pos[i]] = 1;
}

/* Leave out (group 3) the representatives of stage k beyond the bound of each group. */
static void bound_reps(struct greedy *g, const struct mpress_assignment *a, int k, int n,
                       char *pick)
{
    for (int grp = 0; grp < 3; grp++) {
        int count = 0;
        for (int q = 0; q < n; q++)
            count += g->group[q] == grp;
        g->bounded[k][grp] = count > GREEDY_TOP;
        if (count <= GREEDY_TOP)
            continue;
        memset(pick, 0, (size_t)n);
        top_pick(g, a, n, grp, 0, pick);
        top_pick(g, a, n, grp, 1, pick);
        for (int q = 0; q < n; q++)
            if (g->group[q] == grp && !pick[q])
                g->group[q] = 3;
    }
}

/* Trial-evaluate every move of tensor j (stage k) into the candidates. 0, or -1 out of
 * memory. */
static int try_tensor(struct greedy *g, struct mpress_assignment *a,
                      const struct mpress_plan_eval *ev, int k, int j, uint64_t short0, double t0)
{
    const struct mpress_topology *topo = g->topo;
    const struct mpress_plan_options *o = g->o;
    const struct mpress_plan_stage *st = &a->stages[k];
    struct mpress_plan_action *ac = &a->actions[j];
    const struct mpress_saved_tensor *ts = &g->p->ops[ac->op].tensors[ac->tensor];
    int from_d2d = ac->action == MPRESS_ACTION_D2D_SWAP;
    int from_host = ac->action == MPRESS_ACTION_HOST_SWAP;
    struct mpress_plan_action saved = *ac;
    struct mpress_plan_eval trial;
    for (int kind = 1; kind < 3 + topo->n_gpus - 1; kind++) {
        int peer = -1;
        if (from_host && kind != MPRESS_ACTION_RECOMPUTE)
            continue;
        if (kind >= 3) {
            peer = kind - 3;
            if (peer >= st->gpu)
                peer++;
            if (plan_nvlink_bw(topo, st->gpu, peer) <= 0 || from_d2d)
                continue;
            /* Only a peer with room for every copy in flight can help. */
            uint64_t copies = plan_mul(ts->bytes, (uint64_t)plan_in_flight(
                                                      o->schedule, a->n_stages, k,
                                                      o->micro_batches));
            if (plan_add(ev->gpus[peer].bound, copies) > ev->gpus[peer].capacity)
                continue;
        }
        make_move(ac, kind, peer, st->last_op, ts->bytes);
        double err;
        int rc = plan_trial_eval(&g->trial, g->p, topo, o->schedule, o->micro_batches, a, j,
                                 &saved, &trial, &err);
        *ac = saved;
        if (rc || add_cand(g, &trial, err, short0, t0, k, j, kind, peer,
                           from_host ? 1 : from_d2d ? 2 : 0))
            return -1;
    }
    return 0;
}

/* Score candidate c by the full evaluation (its bounds become its score). 0 or -1. */
static int verify_cand(struct greedy *g, struct mpress_assignment *a, struct greedy_cand *c,
                       uint64_t short0, double t0)
{
    struct mpress_plan_action *ac = &a->actions[c->j];
    struct mpress_plan_action saved = *ac;
    const struct mpress_saved_tensor *ts = &g->p->ops[ac->op].tensors[ac->tensor];
    make_move(ac, c->kind, c->peer, a->stages[c->stage].last_op, ts->bytes);
    struct mpress_plan_eval full;
    int rc = plan_evaluate_unchecked(g->p, g->topo, g->o->schedule, g->o->micro_batches, a,
                                     &full, NULL);
    *ac = saved;
    if (rc)
        return -1;
    c->score = score_of(&full, 0, short0, t0, &c->lo, &c->hi);
    return 0;
}

/* The best candidate (the first of the highest score), the near-ties of the trial scores
 * settled by full evaluations. -1: none; -2: out of memory. */
static int greedy_choose(struct greedy *g, struct mpress_assignment *a, uint64_t short0,
                         double t0)
{
    double floor_best = -1; /* the best score is at least this */
    for (int q = 0; q < g->n_cand; q++)
        floor_best = fmax(floor_best, g->cand[q].lo);
    for (int v = 0; v < GREEDY_VERIFY; v++) {
        int w = -1;
        for (int q = 0; q < g->n_cand; q++) {
            const struct greedy_cand *c = &g->cand[q];
            if (c->lo < c->hi && c->hi >= floor_best && (w < 0 || c->hi > g->cand[w].hi))
                w = q;
        }
        if (w < 0)
            break;
        if (verify_cand(g, a, &g->cand[w], short0, t0))
            return -2;
        g->cand[w].hi = g->cand[w].lo; /* settled, even if its score came out -1 */
        floor_best = fmax(floor_best, g->cand[w].lo);
    }
    int best = -1;
    for (int q = 0; q < g->n_cand; q++)
        if (g->cand[q].score >= 0 && (best < 0 || g->cand[q].score > g->cand[best].score))
            best = q;
    return best;
}

/* Apply the move to best->j, then to the other tensors of its class in the stage that hold
 * the same action (interchangeable, so the same move is the best one among them) for as long
 * as each application still reduces the shortfall and costs no more time than the first one
 * did: one search per class instead of per tensor. Each application is a trial on the sums
 * with the ones before it committed (O(GPUs), so that a class of thousands costs no more than
 * one sum of the plan); the times compared are within 1e-15 or so of the full evaluation's,
 * far inside the 1e-9 slack of the comparison. At the end *ev is the full evaluation of the
 * assignment, which is the trial's base again. 0, or -1 out of memory. */
static int apply_to_class(struct greedy *g, struct mpress_assignment *a,
                          struct mpress_plan_eval *ev, const struct greedy_cand *best)
{
    const struct mpress_topology *topo = g->topo;
    const struct mpress_plan_options *o = g->o;
    const int best_j = best->j, stage_last = a->stages[best->stage].last_op;
    enum mpress_action from = a->actions[best_j].action;
    int from_d2d = from == MPRESS_ACTION_D2D_SWAP;
    int from_peer = from_d2d ? a->actions[best_j].peers[0] : -1;
    double dt_first = 0;
    struct mpress_plan_eval trial;
    int rc = 0;
    for (int j = best_j; j < g->first_j[best->stage + 1]; j++) {
        struct mpress_plan_action *ac = &a->actions[j];
        if (j != best_j && (ac->action != from || (from_d2d && ac->peers[0] != from_peer) ||
                            g->cls[j] != g->cls[best_j]))
            continue;
        struct mpress_plan_action saved = *ac;
        make_move(ac, best->kind, best->peer, stage_last,
                  g->p->ops[ac->op].tensors[ac->tensor].bytes);
        uint64_t s0 = plan_shortfall(ev);
        double t0j = ev->iteration_s, err;
        if (plan_trial_eval(&g->trial, g->p, topo, o->schedule, o->micro_batches, a, j, &saved,
                            &trial, &err)) {
            *ac = saved;
            rc = -1;
            break;
        }
        uint64_t s1 = plan_shortfall(&trial);
        double dt = trial.iteration_s - t0j;
        if (j == best_j)
            dt_first = dt;
        else if (s1 >= s0 || dt > dt_first + 1e-9 * t0j) {
            *ac = saved;
            break;
        }
        plan_trial_commit(&g->trial, g->p, a, j, &saved);
        *ev = trial;
        if (ev->fits)
            break;
    }
    plan_trial_base(&g->trial, g->p, topo, o->schedule, o->micro_batches, a, ev);
    g->base_ok = 1;
    return rc;
}

/* When the step left out some of the group of the best move's tensor (its stage has more
 * classes than a step tries), the move also goes to the stage's other tensors of the same op
 * kind and tensor name that hold the same action, in action order: each one whose score on
 * the assignment as it stands (trials on the committed sums) is at least `runner_up`, the
 * best score of the step outside that kind and name. These are moves the next steps would
 * make one by one; batching them keeps the number of steps, each a sum of the plan, from
 * growing with the tensors moved. *ev follows, the full evaluation at the end. */
static int extend_group(struct greedy *g, struct mpress_assignment *a,
                        struct mpress_plan_eval *ev, const struct greedy_cand *best,
                        const struct mpress_plan_action *held, double runner_up)
{
    const struct mpress_topology *topo = g->topo;
    const struct mpress_plan_options *o = g->o;
    const int stage_last = a->stages[best->stage].last_op;
    struct mpress_plan_eval trial;
    int rc = 0;
    for (int j = g->first_j[best->stage]; j < g->first_j[best->stage + 1] && !ev->fits; j++) {
        struct mpress_plan_action *ac = &a->actions[j];
        uint64_t bytes = g->p->ops[ac->op].tensors[ac->tensor].bytes;
        if (g->name_id[j] != g->name_id[best->j] || ac->action != held->action ||
            (held->action == MPRESS_ACTION_D2D_SWAP && ac->peers[0] != held->peers[0]) ||
            bytes == 0)
            continue;
        struct mpress_plan_action saved = *ac;
        make_move(ac, best->kind, best->peer, stage_last, bytes);
        double err;
        if (plan_trial_eval(&g->trial, g->p, topo, o->schedule, o->micro_batches, a, j, &saved,
                            &trial, &err)) {
            *ac = saved;
            rc = -1;
            break;
        }
        uint64_t s0 = plan_shortfall(ev), s1 = plan_shortfall(&trial);
        int ok = s1 < s0 && (best->peer < 0 || trial.gpus[best->peer].bound <=
                                                   trial.gpus[best->peer].capacity);
        if (ok)
            ok = (double)(s0 - s1) / fmax(trial.iteration_s - ev->iteration_s, 1e-12) >=
                 runner_up;
        if (!ok) {
            *ac = saved;
            continue;
        }
        plan_trial_commit(&g->trial, g->p, a, j, &saved);
        *ev = trial;
    }
    plan_trial_base(&g->trial, g->p, topo, o->schedule, o->micro_batches, a, ev);
    return rc;
}

/* Only stages on a short GPU, or parking on one, can help (or any when the host is short). */
static int stage_can_help(const struct mpress_topology *topo, const struct mpress_plan_eval *ev,
                          int g)
{
    int relevant = ev->gpus[g].bound > ev->gpus[g].capacity || ev->drain_gpu == g;
    for (int h = 0; h < topo->n_gpus && !relevant; h++)
        relevant = ev->gpus[h].bound > ev->gpus[h].capacity && ev->gpus[h].parked > 0;
    return relevant || ev->host_short;
}

/* One greedy step on a, whose evaluation is *ev. 0: moved, 1: no move helps, -1: out of
 * memory. */
static int greedy_step(struct greedy *g, struct mpress_assignment *a, struct mpress_plan_eval *ev)
{
    const struct mpress_topology *topo = g->topo;
    const struct mpress_plan_options *o = g->o;
    if (!g->base_ok)
        plan_trial_base(&g->trial, g->p, topo, o->schedule, o->micro_batches, a, ev);
    g->base_ok = 1;
    uint64_t short0 = plan_shortfall(ev);
    double t0 = ev->iteration_s;
    struct mpress_plan_eval trial;
    double err;
    g->n_cand = 0;
    for (int k = 0; k < a->n_stages; k++) {
        struct mpress_plan_stage *st = &a->stages[k];
        if (!stage_can_help(topo, ev, st->gpu))
            continue;
        /* The host takes optimizer states only when it can run their step. */
        if (!st->optimizer_on_host && plan_host_bw(topo) > 0 && topo->pcie_bytes_per_s > 0) {
            st->optimizer_on_host = 1;
            int rc = plan_trial_eval(&g->trial, g->p, topo, o->schedule, o->micro_batches, a,
                                     -1, NULL, &trial, &err);
            st->optimizer_on_host = 0;
            if (rc || add_cand(g, &trial, err, short0, t0, k, -1, 0, -1, 0))
                return -1;
        }
        int n = stage_reps(g, a, ev, k);
        bound_reps(g, a, k, n, g->pick);
        for (int q = 0; q < n; q++)
            if (g->group[q] != 3 && try_tensor(g, a, ev, k, g->reps[q], short0, t0))
                return -1;
    }
    int best = greedy_choose(g, a, short0, t0);
    if (best < 0)
        return best == -1 ? 1 : -1;
    const struct greedy_cand *c = &g->cand[best];
    if (c->j >= 0) {
        struct mpress_plan_action held = a->actions[c->j];
        int rc = apply_to_class(g, a, ev, c);
        if (rc || ev->fits || !g->bounded[c->stage][c->grp])
            return rc;
        double runner_up = 0;
        for (int q = 0; q < g->n_cand; q++) {
            const struct greedy_cand *d = &g->cand[q];
            if (d->j < 0 || d->stage != c->stage || g->name_id[d->j] != g->name_id[c->j])
                runner_up = fmax(runner_up, d->score);
        }
        return extend_group(g, a, ev, c, &held, runner_up);
    }
    a->stages[c->stage].optimizer_on_host = 1;
    plan_trial_base(&g->trial, g->p, topo, o->schedule, o->micro_batches, a, ev);
    return 0;
}

/* Whether some GPU is over its capacity whatever the actions: a stage holds at least one
 * micro-batch of each saved tensor (kept ones n times, evicted ones in the working set) besides
 * its model states (the optimizer's only when the host cannot take them), largest workspace,
 * boundary buffers and reserve (docs/cost-model.md). Then no move can make the plan fit, and
 * the greedy stops at once instead of moving every tensor. */
static int cannot_fit(const struct greedy *g, const struct mpress_assignment *a,
                      const struct mpress_plan_eval *ev)
{
    const struct stage_sums *s = &g->trial.s;
    int host_ok = plan_host_bw(g->topo) > 0 && g->topo->pcie_bytes_per_s > 0;
    for (int k = 0; k < a->n_stages; k++) {
        const struct mpress_plan_gpu *mg = &ev->gpus[a->stages[k].gpu];
        uint64_t floor = plan_add(mg->weights, mg->gradients);
        if (!host_ok && !a->stages[k].optimizer_on_host)
            floor = plan_add(floor, mg->optimizer);
        floor = plan_add(floor, plan_add(s->kept[k], s->evicted[k]));
        floor = plan_add(floor, plan_add(s->ws[k], plan_add(mg->buffers, mg->reserve)));
        if (floor > mg->capacity)
            return 1;
    }
    return 0;
}

/* Greedy steps until the assignment fits or no move helps; the plan rules are checked once,
 * on the result. */
static int greedy(const struct mpress_profile *p, const struct mpress_topology *topo,
                  const struct mpress_plan_options *o, struct mpress_assignment *a,
                  struct mpress_plan_eval *ev, struct mpress_error *err)
{
    struct greedy g;
    int rc = greedy_init(&g, p, topo, o, a, err);
    if (rc)
        return rc;
    plan_trial_base(&g.trial, p, topo, o->schedule, o->micro_batches, a, ev);
    g.base_ok = 1;
    if (!cannot_fit(&g, a, ev))
        while (!ev->fits && (rc = greedy_step(&g, a, ev)) == 0)
            ;
    greedy_free(&g);
    if (rc < 0)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    return mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, a, ev, err);
}

int mpress_plan_baseline(const struct mpress_profile *p, const struct mpress_topology *topo,
                         const struct mpress_plan_options *o, enum mpress_policy policy,
                         struct mpress_assignment *out, struct mpress_plan_eval *ev,
                         struct mpress_error *err)
{
    enum mpress_action all;
    if (policy == MPRESS_POLICY_NONE || policy == MPRESS_POLICY_GREEDY)
        all = MPRESS_ACTION_KEEP;
    else if (policy == MPRESS_POLICY_RECOMPUTE)
        all = MPRESS_ACTION_RECOMPUTE;
    else if (policy == MPRESS_POLICY_SWAP)
        all = MPRESS_ACTION_HOST_SWAP;
    else
        return mpress_error_set(err, MPRESS_EUSAGE, "'%s' is not a baseline policy",
                                mpress_policy_name(policy));
    if (p->n_ops < 1)
        return mpress_error_set(err, MPRESS_EINPUT, "the profile has no ops");
    int rc = mpress_assignment_init(out, p, err);
    if (rc)
        return rc;
    char *cut_ok = malloc((size_t)p->n_ops);
    if (!cut_ok) {
        mpress_assignment_finish(out);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    int order[MPRESS_MAX_GPUS];
    plan_gpu_order(topo, order);
    plan_cut_points(p, o->cuts, cut_ok);
    plan_even_partition(p, cut_ok, topo->n_gpus, order, out);
    free(cut_ok);
    int k = 0;
    for (int j = 0; j < out->n_actions; j++) {
        while (out->stages[k].last_op < out->actions[j].op)
            k++;
        set_action(&out->actions[j], all, out->stages[k].last_op);
    }
    rc = mpress_plan_evaluate(p, topo, o->schedule, o->micro_batches, out, ev, err);
    if (rc == 0 && policy == MPRESS_POLICY_GREEDY && !ev->fits)
        rc = greedy(p, topo, o, out, ev, err);
    if (rc)
        mpress_assignment_finish(out);
    return rc;
}
