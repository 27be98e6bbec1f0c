/* The schedule module on hand-worked plans: task counts per kind, compute-queue order for
 * 1F1B and GPipe, the edges of each copy, the queue each task lands on, memory lists that
 * balance per iteration, a walk of the issue orders that must finish (what a runtime does),
 * the tied-embedding exchange on a real model, and plans too big to count.
 *
 * The fixture: two stages of one op each on GPUs 0 and 1 of a 3-GPU server, one saved tensor
 * per op (0.5 GB), op workspace 0.25 GB, model states 0.1 GB weights + 0.1 GB gradients +
 * 0.2 GB optimizer per op, reserve 0.5 GB per GPU, boundary tensor 1 GB. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mpress/model.h"
#include "mpress/planner.h"
#include "mpress/sched.h"
#include "mpress/sim.h"

#define GB 1000000000ll

struct fixture {
    struct mpress_plan plan;
    struct mpress_op ops[2];
    struct mpress_saved_tensor tensors[2];
    struct mpress_plan_stage stages[2];
    struct mpress_plan_action actions[2];
};

static void fixture_init(struct fixture *f, int micro_batches, enum mpress_schedule sched)
{
    memset(f, 0, sizeof(*f));
    struct mpress_plan *p = &f->plan;
    snprintf(p->profile.model.name, sizeof(p->profile.model.name), "toy");
    p->profile.n_ops = 2;
    p->profile.ops = f->ops;
    for (int o = 0; o < 2; o++) {
        struct mpress_op *op = &f->ops[o];
        snprintf(op->name, sizeof(op->name), "op%d", o);
        op->fwd_s = 1;
        op->bwd_s = 2;
        op->param_bytes = GB / 10;
        op->grad_bytes = GB / 10;
        op->optim_bytes = GB / 5;
        op->workspace_bytes = GB / 4;
        op->output_bytes = o == 0 ? GB : 0;
        op->n_tensors = 1;
        op->tensors = &f->tensors[o];
        snprintf(f->tensors[o].id, sizeof(f->tensors[o].id), "op%d.t", o);
        f->tensors[o].bytes = GB / 2;
        f->tensors[o].recompute_op = o;
    }
    struct mpress_topology *t = &p->topology;
    t->n_gpus = 3;
    for (int g = 0; g < 3; g++) {
        t->gpus[g].memory_bytes = 10 * GB;
        t->gpus[g].reserve_bytes = GB / 2;
    }
    /* NVLink between every pair, so D2D shares may go to either other GPU */
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            t->nvlinks[a][b] = a != b;
    t->nvlink_bytes_per_s = 25e9;
    t->n_sockets = 1;
    p->schedule = sched;
    p->micro_batches = micro_batches;
    p->n_stages = 2;
    p->stages = f->stages;
    f->stages[0] = (struct mpress_plan_stage){0, 0, 0, 0};
    f->stages[1] = (struct mpress_plan_stage){1, 1, 1, 0};
    /* A plan names one action per saved tensor (mpress_plan_check): every tensor is kept
     * until add_action says otherwise. */
    p->actions = f->actions;
    p->n_actions = 2;
    for (int o = 0; o < 2; o++)
        f->actions[o] = (struct mpress_plan_action){.op = o, .tensor = 0,
                                                    .action = MPRESS_ACTION_KEEP,
                                                    .evict_after_op = -1,
                                                    .prefetch_before_op = -1};
}

/* Replaces the action of op's tensor (each op saves one: actions[op] is its action). */
static void add_action(struct fixture *f, int op, enum mpress_action act)
{
    struct mpress_plan_action *a = &f->actions[op];
    memset(a, 0, sizeof(*a));
    a->op = op;
    a->action = act;
    a->evict_after_op = a->prefetch_before_op = act == MPRESS_ACTION_KEEP ? -1 : op;
    if (act == MPRESS_ACTION_D2D_SWAP) {
        a->n_peers = 2;
        a->peers[0] = 2;
        a->peers[1] = 1 - op;           /* the other stage's GPU */
        a->peer_bytes[0] = a->peer_bytes[1] = GB / 4;
    }
}

static struct mpress_sched *make(struct fixture *f, int iterations)
{
    struct mpress_sched_options o;
    mpress_sched_options_init(&o);
    o.iterations = iterations;
    struct mpress_sched *s = NULL;
    struct mpress_error err;
    mpress_error_clear(&err);
    int rc = mpress_sched_create(&f->plan, &o, &s, &err);
    CHECK_MSG(rc == 0, "mpress_sched_create: %s", err.text);
    return s;
}

/* Fills p->actions with a keep for every saved tensor of p's profile (freed by the caller). */
static int keep_all(struct mpress_plan *p)
{
    int n = 0;
    for (int o = 0; o < p->profile.n_ops; o++)
        n += p->profile.ops[o].n_tensors;
    p->actions = calloc((size_t)n + 1, sizeof(*p->actions));
    if (!p->actions)
        return -1;
    p->n_actions = 0;
    for (int o = 0; o < p->profile.n_ops; o++)
        for (int j = 0; j < p->profile.ops[o].n_tensors; j++)
            p->actions[p->n_actions++] = (struct mpress_plan_action){
                .op = o, .tensor = j, .action = MPRESS_ACTION_KEEP, .evict_after_op = -1,
                .prefetch_before_op = -1};
    return 0;
}

/* The first task matching, or -1. */
static int find(const struct mpress_sched *s, enum mpress_task_kind k, int stage, int it, int mb)
{
    for (int i = 0; i < mpress_sched_task_count(s); i++) {
        const struct mpress_task *t = mpress_sched_task(s, i);
        if (t->kind == k && t->stage == stage && t->iteration == it && t->micro_batch == mb)
            return i;
    }
    return -1;
}

static int has(const int *list, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (list[i] == x)
            return 1;
    return 0;
}

/* A runtime's walk with zero durations: each queue issues its tasks in the order the schedule
 * gives, one at a time, each once all its predecessors are done. The walk must finish, and
 * every edge must point forward in it. Returns the number of tasks run. */
static int walk(const struct mpress_sched *s)
{
    int nq = mpress_sched_queue_count(s), n = mpress_sched_task_count(s), done = 0;
    int *pos = calloc((size_t)nq, sizeof(int));
    char *ran = calloc((size_t)n + 1, 1);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int q = 0; q < nq; q++) {
            int len;
            const int *order = mpress_sched_queue_tasks(s, q, &len);
            while (pos[q] < len) {
                int t = order[pos[q]], np, ok = 1;
                const int *pr = mpress_sched_preds(s, t, &np);
                for (int j = 0; j < np; j++)
                    ok &= ran[pr[j]];
                if (!ok)
                    break;
                ran[t] = 1;
                pos[q]++;
                done++;
                progress = 1;
            }
        }
    }
    free(pos);
    free(ran);
    return done;
}

/* 1F1B, M = 3, 2 iterations; op0's tensor host-swapped, op1's recomputed:
 * per iteration 2 x 3 forwards and backwards, 3 recomputes (stage 1), 3 evictions and 3
 * prefetches (stage 0), 3 activation and 3 gradient sends, 2 steps: 29; x 2 = 58. */
static void test_counts(void)
{
    struct fixture f;
    fixture_init(&f, 3, MPRESS_SCHEDULE_1F1B);
    add_action(&f, 0, MPRESS_ACTION_HOST_SWAP);
    add_action(&f, 1, MPRESS_ACTION_RECOMPUTE);
    struct mpress_sched *s = make(&f, 2);
    if (!s)
        return;
    static const int want[MPRESS_TASK_KINDS] = {12, 12, 6, 4, 6, 6, 6, 6, 0, 0, 0};
    int sum = 0;
    for (int k = 0; k < MPRESS_TASK_KINDS; k++) {
        CHECK_MSG(mpress_sched_count_kind(s, k) == want[k], "%s: %d, want %d",
                  mpress_task_kind_name(k), mpress_sched_count_kind(s, k), want[k]);
        sum += mpress_sched_count_kind(s, k);
    }
    CHECK_INT(mpress_sched_task_count(s), 58);
    CHECK_INT(sum, 58);
    CHECK_INT(walk(s), 58);
    mpress_sched_destroy(s);

    /* stage 1's optimizer on the host: + gradients down and weights up per iteration; D2D on
     * stage 0 with two peer shares: two evictions and two prefetches per micro-batch */
    fixture_init(&f, 3, MPRESS_SCHEDULE_1F1B);
    f.stages[1].optimizer_on_host = 1;
    add_action(&f, 0, MPRESS_ACTION_D2D_SWAP);
    s = make(&f, 2);
    if (!s)
        return;
    CHECK_INT(mpress_sched_count_kind(s, MPRESS_TASK_EVICT), 12);
    CHECK_INT(mpress_sched_count_kind(s, MPRESS_TASK_PREFETCH), 12);
    CHECK_INT(mpress_sched_count_kind(s, MPRESS_TASK_GRAD_D2H), 2);
    CHECK_INT(mpress_sched_count_kind(s, MPRESS_TASK_WEIGHTS_H2D), 2);
    CHECK_INT(mpress_sched_count_kind(s, MPRESS_TASK_OPTIMIZER), 4);
    CHECK_INT(mpress_sched_count_kind(s, MPRESS_TASK_RECOMPUTE), 0);
    CHECK_INT(mpress_sched_task_count(s), 12 + 12 + 12 + 12 + 6 + 6 + 4 + 2 + 2);
    CHECK_INT(walk(s), mpress_sched_task_count(s));
    /* each share leaves on the owner's engine toward its peer and comes back on the owner's
     * engine from it (on the peer's engine toward the owner, a prefetch not yet ready held
     * up the peer's own evictions queued behind it) */
    for (int i = 0; i < mpress_sched_task_count(s); i++) {
        const struct mpress_task *t = mpress_sched_task(s, i);
        if (t->kind != MPRESS_TASK_EVICT && t->kind != MPRESS_TASK_PREFETCH)
            continue;
        int out = t->kind == MPRESS_TASK_EVICT, owner = out ? t->src : t->dst;
        const struct mpress_sched_queue *q = mpress_sched_queue(s, t->queue);
        CHECK_INT(owner, f.stages[0].gpu);
        CHECK_INT(q->gpu, owner);
        CHECK_INT(q->kind, out ? MPRESS_QUEUE_PARK : MPRESS_QUEUE_PEER_IN);
        CHECK_INT(q->peer, out ? t->dst : t->src);
    }
    mpress_sched_destroy(s);
}

/* "F0 F1 B0 ..." of a compute queue, optimizer steps as "S", recomputes as "R". */
static void queue_text(const struct mpress_sched *s, int gpu, char *out, size_t size)
{
    int n;
    const int *q = mpress_sched_queue_tasks(s, mpress_sched_compute_queue(s, gpu), &n);
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n && at + 8 < size; i++) {
        const struct mpress_task *t = mpress_sched_task(s, q[i]);
        char c = t->kind == MPRESS_TASK_FORWARD    ? 'F'
                 : t->kind == MPRESS_TASK_BACKWARD ? 'B'
                 : t->kind == MPRESS_TASK_RECOMPUTE ? 'R'
                                                     : 'S';
        if (c == 'S')
            at += (size_t)snprintf(out + at, size - at, "%sS", i ? " " : "");
        else
            at += (size_t)snprintf(out + at, size - at, "%s%c%d", i ? " " : "", c,
                                   t->micro_batch);
    }
}

/* 1F1B with S = 2, M = 3: stage 0 warms up with min(S - 1, M) = 1 forward, then alternates,
 * then drains; stage 1 alternates from the start; its recompute runs right before each
 * backward. GPipe: all forwards, then all backwards. One iteration each. */
static void test_stream_order(void)
{
    struct fixture f;
    char txt[256];
    fixture_init(&f, 3, MPRESS_SCHEDULE_1F1B);
    add_action(&f, 1, MPRESS_ACTION_RECOMPUTE);
    struct mpress_sched *s = make(&f, 1);
    if (!s)
        return;
    queue_text(s, 0, txt, sizeof(txt));
    CHECK_STR(txt, "F0 F1 B0 F2 B1 B2 S");
    queue_text(s, 1, txt, sizeof(txt));
    CHECK_STR(txt, "F0 R0 B0 F1 R1 B1 F2 R2 B2 S");
    queue_text(s, 2, txt, sizeof(txt));
    CHECK_STR(txt, "");
    mpress_sched_destroy(s);

    fixture_init(&f, 3, MPRESS_SCHEDULE_GPIPE);
    s = make(&f, 1);
    if (!s)
        return;
    queue_text(s, 0, txt, sizeof(txt));
    CHECK_STR(txt, "F0 F1 F2 B0 B1 B2 S");
    queue_text(s, 1, txt, sizeof(txt));
    CHECK_STR(txt, "F0 F1 F2 B0 B1 B2 S");
    mpress_sched_destroy(s);
}

/* Edges of one micro-batch (1F1B, M = 2, 2 iterations, op0 host-swapped):
 *   forward(0, mb) -> send_act(mb) -> forward(1, mb)
 *   backward(1, mb) -> send_grad(mb) -> backward(0, mb)
 *   forward(0, mb) -> evict(mb) -> prefetch(mb) -> backward(0, mb)
 *   step(k, it 0) -> first task of stage k in iteration 1
 * and the queues: compute on g * (3 + G), evictions on the source's D2H engine, prefetches on
 * the destination's H2D engine, activations on the sender's peer engine toward the receiver. */
static void test_edges_and_queues(void)
{
    struct fixture f;
    fixture_init(&f, 2, MPRESS_SCHEDULE_1F1B);
    add_action(&f, 0, MPRESS_ACTION_HOST_SWAP);
    struct mpress_sched *s = make(&f, 2);
    if (!s)
        return;
    int G = 3, epg = 3 + 3 * G, n;
    const int *l;
    for (int mb = 0; mb < 2; mb++) {
        int f0 = find(s, MPRESS_TASK_FORWARD, 0, 0, mb);
        int f1 = find(s, MPRESS_TASK_FORWARD, 1, 0, mb);
        int b0 = find(s, MPRESS_TASK_BACKWARD, 0, 0, mb);
        int b1 = find(s, MPRESS_TASK_BACKWARD, 1, 0, mb);
        int sa = find(s, MPRESS_TASK_SEND_ACT, 0, 0, mb);
        int sg = find(s, MPRESS_TASK_SEND_GRAD, 1, 0, mb);
        int ev = find(s, MPRESS_TASK_EVICT, 0, 0, mb);
        int pf = find(s, MPRESS_TASK_PREFETCH, 0, 0, mb);
        CHECK(f0 >= 0 && f1 >= 0 && b0 >= 0 && b1 >= 0 && sa >= 0 && sg >= 0 && ev >= 0 &&
              pf >= 0);
        if (f0 < 0 || f1 < 0 || b0 < 0 || b1 < 0 || sa < 0 || sg < 0 || ev < 0 || pf < 0)
            break;
        /* a receiver takes each boundary's copies in order: a copy into a stage also waits
         * for the consumer of the previous micro-batch's (one buffer per boundary and
         * direction on the receiver) */
        l = mpress_sched_preds(s, sa, &n);
        if (mb == 0)
            CHECK(n == 1 && l[0] == f0);
        else
            CHECK(n == 2 && has(l, n, f0) && has(l, n, find(s, MPRESS_TASK_FORWARD, 1, 0, 0)));
        l = mpress_sched_succs(s, sa, &n);
        CHECK(n == 1 && l[0] == f1);
        l = mpress_sched_preds(s, sg, &n);
        if (mb == 0)
            CHECK(n == 1 && l[0] == b1);
        else
            CHECK(n == 2 && has(l, n, b1) && has(l, n, find(s, MPRESS_TASK_BACKWARD, 0, 0, 0)));
        l = mpress_sched_succs(s, sg, &n);
        CHECK(n == 1 && l[0] == b0);
        l = mpress_sched_preds(s, ev, &n);
        CHECK(n == 1 && l[0] == f0);
        l = mpress_sched_preds(s, pf, &n);
        CHECK(has(l, n, ev));
        l = mpress_sched_succs(s, pf, &n);
        CHECK(n == 1 && l[0] == b0);
        l = mpress_sched_preds(s, b0, &n);
        CHECK(has(l, n, sg) && has(l, n, pf));
        CHECK_INT(mpress_sched_task(s, f0)->queue, 0 * epg);
        CHECK_INT(mpress_sched_task(s, f1)->queue, 1 * epg);
        CHECK_INT(mpress_sched_task(s, ev)->queue, 0 * epg + 1);
        CHECK_INT(mpress_sched_task(s, ev)->dst, -1);
        CHECK_INT(mpress_sched_task(s, pf)->queue, 0 * epg + 2);
        CHECK_INT(mpress_sched_task(s, pf)->src, -1);
        CHECK_INT(mpress_sched_task(s, sa)->queue, 0 * epg + 3 + 1);
        CHECK_INT(mpress_sched_task(s, sg)->queue, 1 * epg + 3 + 0);
        CHECK_INT(mpress_sched_task(s, sa)->bytes, GB);
        CHECK_INT(mpress_sched_task(s, ev)->bytes, GB / 2);
    }
    for (int k = 0; k < 2; k++) {
        int st = find(s, MPRESS_TASK_OPTIMIZER, k, 0, -1);
        int q = mpress_sched_compute_queue(s, k), len;
        const int *order = mpress_sched_queue_tasks(s, q, &len);
        int first = -1;
        for (int i = 0; i < len && first < 0; i++)
            if (mpress_sched_task(s, order[i])->iteration == 1)
                first = order[i];
        l = mpress_sched_preds(s, first, &n);
        CHECK(st >= 0 && has(l, n, st));
        CHECK(mpress_sched_task(s, st)->ends_iteration);
    }
    CHECK_INT(mpress_sched_queue(s, 0)->kind, MPRESS_QUEUE_COMPUTE);
    CHECK_INT(mpress_sched_queue(s, epg + 3 + 2)->kind, MPRESS_QUEUE_PEER);
    CHECK_INT(mpress_sched_queue(s, epg + 3 + 2)->peer, 2);
    CHECK_INT(mpress_sched_queue(s, epg + 3 + G + 2)->kind, MPRESS_QUEUE_PEER_IN);
    CHECK_INT(mpress_sched_queue(s, epg + 3 + G + 2)->peer, 2);
    CHECK_INT(mpress_sched_queue(s, epg + 3 + 2 * G + 2)->kind, MPRESS_QUEUE_PARK);
    CHECK_INT(mpress_sched_queue(s, epg + 3 + 2 * G + 2)->peer, 2);
    CHECK_INT(mpress_sched_queue_count(s), G * epg + 1);
    CHECK_INT(mpress_sched_queue(s, G * epg)->kind, MPRESS_QUEUE_CPU);
    mpress_sched_destroy(s);
}

/* The (iteration, device, kind) triples whose task deltas do not sum to zero; at most 3
 * iterations and 3 GPUs. */
static int unbalanced(const struct mpress_sched *s)
{
    int64_t bal[3][4][MPRESS_MEM_KINDS];
    memset(bal, 0, sizeof(bal));
    for (int t = 0; t < mpress_sched_task_count(s); t++) {
        int it = mpress_sched_task(s, t)->iteration, n;
        for (int ph = 0; ph < 2; ph++) {
            const struct mpress_mem_delta *d =
                ph ? mpress_sched_mem_end(s, t, &n) : mpress_sched_mem_start(s, t, &n);
            for (int i = 0; i < n; i++)
                bal[it][d[i].device + 1][d[i].kind] += d[i].bytes;
        }
    }
    int bad = 0;
    for (int it = 0; it < 3; it++)
        for (int dv = 0; dv < 4; dv++)
            for (int k = 0; k < MPRESS_MEM_KINDS; k++)
                bad += bal[it][dv][k] != 0;
    return bad;
}

/* Memory: the initial list holds reserves and model states (gpu0 = gpu1 = 0.5 + 0.1 + 0.1 +
 * 0.2 = 0.9 GB, gpu2 0.5 GB, nothing on the host); the tasks of each iteration allocate and
 * free the same bytes per device and kind; a forward's start list is its workspace then its
 * saved tensor, in that order. Checked with every action kind and the host optimizer. */
static void test_memory(void)
{
    static const enum mpress_action acts[] = {MPRESS_ACTION_KEEP, MPRESS_ACTION_RECOMPUTE,
                                              MPRESS_ACTION_HOST_SWAP, MPRESS_ACTION_D2D_SWAP};
    for (int a = 0; a < 4; a++)
        for (int sc = 0; sc < 3; sc++) {
            struct fixture f;
            fixture_init(&f, 4, (enum mpress_schedule)sc);
            add_action(&f, 0, acts[a]);
            add_action(&f, 1, acts[(a + 1) % 4]);
            f.stages[1].optimizer_on_host = a % 2;
            struct mpress_sched *s = make(&f, 3);
            if (!s)
                return;
            int n;
            const struct mpress_mem_delta *d = mpress_sched_mem_initial(s, &n);
            int64_t init[4] = {0};
            for (int i = 0; i < n; i++)
                init[d[i].device + 1] += d[i].bytes;
            int versions0 = sc == MPRESS_SCHEDULE_ASYNC ? 2 : 1;
            CHECK_INT(init[1], GB / 2 + versions0 * GB / 10 + GB / 10 + GB / 5);
            CHECK_INT(init[2], GB / 2 + GB / 10 + GB / 10 + (a % 2 ? 0 : GB / 5));
            CHECK_INT(init[3], GB / 2);
            CHECK_INT(init[0], a % 2 ? GB / 10 + GB / 5 : 0);
            int bad = unbalanced(s);
            CHECK_MSG(bad == 0, "action %d schedule %d: %d unbalanced (iteration, device, kind)",
                      a, sc, bad);
            int f0 = find(s, MPRESS_TASK_FORWARD, 0, 1, 2);
            d = mpress_sched_mem_start(s, f0, &n);
            CHECK(n == 2 && d[0].kind == MPRESS_MEM_WORKING && d[0].bytes == GB / 4 &&
                  d[1].kind == MPRESS_MEM_ACTIVATIONS && d[1].bytes == GB / 2 &&
                  d[1].iteration == 1 && d[1].micro_batch == 2 && d[1].device == 0);
            CHECK_INT(walk(s), mpress_sched_task_count(s));
            mpress_sched_destroy(s);
        }
}

/* gpt-tiny, analytic profile, two stages: the embedding (op 0) on stage 0 and the head on
 * stage 1 share the word matrix, vocab x hidden. Each iteration sends its gradient each way
 * (vocab x hidden x gradient bytes per parameter), after the last backward of the op on the
 * sending side, and both steps wait for both copies. Without the option: no exchange. */
static void test_tied(void)
{
    struct mpress_model_config cfg;
    CHECK(mpress_model_find("gpt-tiny", &cfg) == 0);
    const struct mpress_gpu_spec *gs = mpress_gpu_spec_find("V100-SXM2-32GB");
    CHECK(gs != NULL);
    struct mpress_plan p;
    memset(&p, 0, sizeof(p));
    struct mpress_error err;
    mpress_error_clear(&err);
    mpress_profile_init(&p.profile);
    if (!gs || mpress_profile_analytic(&cfg, gs, &p.profile, &err)) {
        CHECK_MSG(0, "profile: %s", err.text);
        return;
    }
    int n_ops = p.profile.n_ops, head = -1;
    for (int o = 0; o < n_ops; o++)
        if (strcmp(p.profile.ops[o].name, "head") == 0)
            head = o;
    CHECK(head > 1 && strcmp(p.profile.ops[0].name, "embedding") == 0);
    struct mpress_plan_stage st[2] = {{0, n_ops / 2 - 1, 0, 0}, {n_ops / 2, n_ops - 1, 1, 0}};
    p.topology.n_gpus = 2;
    p.topology.n_sockets = 1;
    p.micro_batches = 2;
    p.n_stages = 2;
    p.stages = st;
    CHECK(keep_all(&p) == 0);
    struct mpress_sched_options o;
    mpress_sched_options_init(&o);
    o.iterations = 2;
    struct mpress_sched *s = NULL;
    CHECK_MSG(mpress_sched_create(&p, &o, &s, &err) == 0, "%s", err.text);
    if (s) {
        int wb, gb, ob;
        mpress_model_state_bytes(&cfg, &wb, &gb, &ob);
        uint64_t want = (uint64_t)cfg.vocab * (uint64_t)cfg.hidden * (uint64_t)gb;
        CHECK_INT(mpress_sched_count_kind(s, MPRESS_TASK_TIED_GRAD), 4);
        for (int i = 0; i < mpress_sched_task_count(s); i++) {
            const struct mpress_task *t = mpress_sched_task(s, i);
            if (t->kind != MPRESS_TASK_TIED_GRAD)
                continue;
            CHECK_INT(t->bytes, want);
            CHECK(t->src != t->dst && t->src == st[t->stage].gpu);
            CHECK(t->op == (t->stage == 0 ? 0 : head) && t->tied_op == (t->stage == 0 ? head : 0));
            /* after the sender's last backward of the op and the receiver's last backward
             * (of its first op: its backward pass is over) */
            int np;
            const int *pr = mpress_sched_preds(s, i, &np);
            int kd = t->stage == 0 ? 1 : 0, own = np == 2 && mpress_sched_task(s, pr[0])->stage ==
                                                                t->stage ? 0 : 1;
            const struct mpress_task *b = np == 2 ? mpress_sched_task(s, pr[own]) : NULL;
            const struct mpress_task *r = np == 2 ? mpress_sched_task(s, pr[1 - own]) : NULL;
            CHECK(b && b->kind == MPRESS_TASK_BACKWARD && b->op == t->op &&
                  b->iteration == t->iteration && b->micro_batch == 1);
            CHECK(r && r->kind == MPRESS_TASK_BACKWARD && r->stage == kd &&
                  r->op == st[kd].first_op && r->iteration == t->iteration &&
                  r->micro_batch == 1);
            const int *su = mpress_sched_succs(s, i, &np);
            CHECK(np == 2 && has(su, np, find(s, MPRESS_TASK_OPTIMIZER, 0, t->iteration, -1)) &&
                  has(su, np, find(s, MPRESS_TASK_OPTIMIZER, 1, t->iteration, -1)));
        }
        int n = mpress_sched_task_count(s);
        CHECK_INT(walk(s), n);
        CHECK_INT(unbalanced(s), 0);
        mpress_sched_destroy(s);
        /* stage 1 steps on the host: the incoming gradient is folded in before it goes down */
        st[1].optimizer_on_host = 1;
        CHECK(mpress_sched_create(&p, &o, &s, &err) == 0);
        for (int i = 0; s && i < mpress_sched_task_count(s); i++) {
            const struct mpress_task *t = mpress_sched_task(s, i);
            if (t->kind != MPRESS_TASK_TIED_GRAD)
                continue;
            int np;
            const int *su = mpress_sched_succs(s, i, &np);
            CHECK(np == 2 && has(su, np, find(s, MPRESS_TASK_GRAD_D2H, 1, t->iteration, -1)));
        }
        CHECK(s && walk(s) == mpress_sched_task_count(s) && unbalanced(s) == 0);
        mpress_sched_destroy(s);
        st[1].optimizer_on_host = 0;
        /* GPipe and async too: the exchange never closes a cycle */
        for (int sc = 1; sc < 3; sc++) {
            p.schedule = (enum mpress_schedule)sc;
            CHECK(mpress_sched_create(&p, &o, &s, &err) == 0);
            CHECK(s && mpress_sched_count_kind(s, MPRESS_TASK_TIED_GRAD) == 4);
            CHECK(s && walk(s) == mpress_sched_task_count(s) && unbalanced(s) == 0);
            mpress_sched_destroy(s);
        }
        p.schedule = MPRESS_SCHEDULE_1F1B;
        o.tied_exchange = 0;
        CHECK(mpress_sched_create(&p, &o, &s, &err) == 0);
        CHECK_INT(mpress_sched_count_kind(s, MPRESS_TASK_TIED_GRAD), 0);
        CHECK_INT(mpress_sched_task_count(s), n - 4);
        mpress_sched_destroy(s);
    }
    free(p.actions);
    mpress_profile_finish(&p.profile);
}

/* A plan too big to count is refused, naming micro_batches, not wrapped. 1431655766
 * micro-batches (x 3 iterations would overflow an int: 2^32 + 2) are past the plan rules'
 * limit (mpress_plan_check), in the schedule and in the simulator alike. Within that limit the
 * schedule still counts what the iterations multiply: 6 tasks per micro-batch and 2 steps per
 * iteration (nothing saved) make N x (6 x 65536 + 2) = N x 393218 tasks, over
 * MPRESS_SCHED_MAX_TASKS = 2^28 from N = 683 (682 x 393218 = 268174676 fits; the count is
 * checked before anything is allocated, so only the refusal is run here). */
static void test_too_big(void)
{
    struct fixture f;
    fixture_init(&f, 1431655766, MPRESS_SCHEDULE_1F1B);
    struct mpress_sched_options o;
    mpress_sched_options_init(&o);
    o.iterations = 3;
    struct mpress_sched *s = NULL;
    struct mpress_error err;
    mpress_error_clear(&err);
    CHECK_INT(mpress_sched_create(&f.plan, &o, &s, &err), MPRESS_EINPUT);
    CHECK(s == NULL);
    CHECK_STR(err.path, "micro_batches");
    CHECK(strstr(err.text, "expected 1 to 65536 micro-batches") != NULL);
    /* the simulator refuses it the same way (it used to wrap 3 x M in an int) */
    struct mpress_sim *sim = NULL;
    struct mpress_sim_options so;
    mpress_sim_options_init(&so);
    mpress_error_clear(&err);
    CHECK_INT(mpress_sim_run(&f.plan, &so, &sim, &err), MPRESS_EINPUT);
    CHECK(sim == NULL);
    CHECK_STR(err.path, "micro_batches");
    f.plan.micro_batches = INT_MAX;
    o.iterations = INT_MAX;
    mpress_error_clear(&err);
    CHECK_INT(mpress_sched_create(&f.plan, &o, &s, &err), MPRESS_EINPUT);
    CHECK(s == NULL);
    f.plan.micro_batches = MPRESS_MAX_MICRO_BATCHES;
    o.iterations = 683;
    mpress_error_clear(&err);
    CHECK_INT(mpress_sched_create(&f.plan, &o, &s, &err), MPRESS_EINPUT);
    CHECK(s == NULL);
    CHECK_STR(err.path, "micro_batches");
    CHECK(strstr(err.text, "more than the schedule can count") != NULL);
    o.iterations = INT_MAX;
    mpress_error_clear(&err);
    CHECK_INT(mpress_sched_create(&f.plan, &o, &s, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "more than the schedule can count") != NULL);
}

/* A host optimizer step states its bytes once (mpress_optimizer_step_traffic), and the planner,
 * the schedule and the simulator must all count the same: gpt-tiny on one V100 of dgx1, one
 * stage stepping on the host, in fp16 (mixed precision: memory P + G + 2 O) and fp32 (the
 * weights are the master: 2 P + G + 2 O), gradients down and weights up over PCIe either way.
 * The planner's bytes are read back from its predictions alone: with one stage its tail is
 * (down + up) / PCIe + memory / host bandwidth, so changing one bandwidth and dividing the
 * change of tail_s by the change of 1 / bandwidth gives that term's bytes. These must equal
 * the schedule's GRAD_D2H + WEIGHTS_H2D bytes, the schedule's step traffic, the hand formula
 * over the profile's model states, and the simulator's CPU step time x host bandwidth. */
static double planner_tail(const struct mpress_plan *p, const struct mpress_topology *t)
{
    struct mpress_assignment a;
    struct mpress_error err;
    mpress_error_clear(&err);
    if (mpress_assignment_init(&a, &p->profile, &err))
        return -1;
    a.n_stages = 1;
    a.stages[0] = p->stages[0];
    struct mpress_plan_eval ev;
    int rc = mpress_plan_evaluate(&p->profile, t, p->schedule, p->micro_batches, &a, &ev, &err);
    CHECK_MSG(rc == 0, "mpress_plan_evaluate: %s", err.text);
    mpress_assignment_finish(&a);
    return rc ? -1 : ev.tail_s;
}

static void test_host_step_bytes(void)
{
    static const char *const dtypes[2] = {"fp16", "fp32"};
    for (int d = 0; d < 2; d++) {
        struct mpress_model_config cfg;
        CHECK(mpress_model_find("gpt-tiny", &cfg) == 0);
        snprintf(cfg.dtype, sizeof(cfg.dtype), "%s", dtypes[d]);
        const struct mpress_gpu_spec *gs = mpress_gpu_spec_find("V100-SXM2-32GB");
        struct mpress_plan p;
        memset(&p, 0, sizeof(p));
        struct mpress_error err;
        mpress_error_clear(&err);
        mpress_profile_init(&p.profile);
        if (!gs || mpress_profile_analytic(&cfg, gs, &p.profile, &err) ||
            mpress_topology_resolve("dgx1", &p.topology, &err) ||
            mpress_topology_restrict(&p.topology, 1, &err) || keep_all(&p)) {
            CHECK_MSG(0, "%s: %s", dtypes[d], err.text);
            mpress_profile_finish(&p.profile);
            return;
        }
        struct mpress_plan_stage st = {0, p.profile.n_ops - 1, 0, 1};
        p.n_stages = 1;
        p.stages = &st;
        p.micro_batches = 2;
        double P = 0, G = 0, O = 0;
        for (int o = 0; o < p.profile.n_ops; o++) {
            P += (double)p.profile.ops[o].param_bytes;
            G += (double)p.profile.ops[o].grad_bytes;
            O += (double)p.profile.ops[o].optim_bytes;
        }
        double hand_mem = (d == 1 ? 2 * P : P) + G + 2 * O;
        CHECK(P > 0 && G > 0 && O > 0);

        /* the planner */
        double pcie = p.topology.pcie_bytes_per_s, host = p.topology.host_memory_bytes_per_s;
        CHECK(pcie > 0 && host > 0);
        struct mpress_topology t = p.topology;
        double t0 = planner_tail(&p, &t);
        t.pcie_bytes_per_s = 2 * pcie;
        double t1 = planner_tail(&p, &t);
        t = p.topology;
        t.host_memory_bytes_per_s = 2 * host;
        double t2 = planner_tail(&p, &t);
        /* 1 / b - 1 / 2b = 1 / 2b */
        double plan_pcie = (t0 - t1) * 2 * pcie, plan_mem = (t0 - t2) * 2 * host;
        CHECK_NEAR(plan_pcie, P + G, 1e-9);
        CHECK_NEAR(plan_mem, hand_mem, 1e-9);

        /* the schedule */
        struct mpress_sched_options o;
        mpress_sched_options_init(&o);
        o.iterations = 2;
        struct mpress_sched *s = NULL;
        CHECK_MSG(mpress_sched_create(&p, &o, &s, &err) == 0, "%s", err.text);
        if (s) {
            for (int it = 0; it < 2; it++) {
                int dn = find(s, MPRESS_TASK_GRAD_D2H, 0, it, -1);
                int up = find(s, MPRESS_TASK_WEIGHTS_H2D, 0, it, -1);
                CHECK(dn >= 0 && up >= 0);
                if (dn < 0 || up < 0)
                    continue;
                uint64_t bd = mpress_sched_task(s, dn)->bytes;
                uint64_t bu = mpress_sched_task(s, up)->bytes;
                CHECK_NEAR((double)bd, G, 0);
                CHECK_NEAR((double)bu, P, 0);
                CHECK_NEAR((double)(bd + bu), plan_pcie, 1e-9);
            }
            struct mpress_optimizer_traffic tr, want;
            mpress_sched_step_traffic(s, 0, &tr);
            mpress_optimizer_step_traffic(&p.profile.model, P, G, O, &want);
            CHECK_NEAR(tr.memory_bytes, hand_mem, 0);
            CHECK_NEAR(tr.memory_bytes, want.memory_bytes, 0);
            CHECK_NEAR(tr.pcie_down_bytes + tr.pcie_up_bytes, G + P, 0);
            CHECK_NEAR(tr.memory_bytes, plan_mem, 1e-9);
            mpress_sched_destroy(s);
        }

        /* the simulator: the CPU step takes its memory bytes over host memory bandwidth */
        struct mpress_sim *sim = NULL;
        struct mpress_sim_options so;
        mpress_sim_options_init(&so);
        CHECK_MSG(mpress_sim_run(&p, &so, &sim, &err) == 0, "%s", err.text);
        const struct mpress_sim_task *c =
            sim ? mpress_sim_task_find(sim, MPRESS_SIM_OPTIMIZER, 0, 0, -1, -1, -1) : NULL;
        CHECK(c != NULL);
        if (c)
            CHECK_NEAR((c->end_s - c->start_s) * p.topology.host_memory_bytes_per_s, plan_mem,
                       1e-9);
        mpress_sim_destroy(sim);
        free(p.actions);
        mpress_profile_finish(&p.profile);
    }
}

int main(void)
{
    test_counts();
    test_stream_order();
    test_edges_and_queues();
    test_memory();
    test_tied();
    test_too_big();
    test_host_step_bytes();
    return check_done();
}
