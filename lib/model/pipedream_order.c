/* A topological order of a PipeDream graph in which the best straight pipeline of N stages is
 * N contiguous ranges. PipeDream's optimizer (Narayanan et al., SOSP 2019, section 3.1) cuts a
 * graph along antichains: a stage is the difference of two downward-closed node sets ("ideals"),
 * and a dynamic program over ideals minimises the slowest stage's compute (forward + backward
 * per micro-batch, memory and communication not counted). mpress's stages are ranges of one op
 * order, so one fixed order can miss that optimum (a residual block's shortcut on the wrong
 * side of a cut). Here the same dynamic program runs over every ideal of the graph, and the
 * order becomes: the nodes of the first optimal stage, then the second's, ..., each stage's
 * nodes in the Kahn order of mpress_pipedream_load. Ranges of that order then include the
 * optimal partition, so the planner can reach it.
 *
 * Cost: the ideals are enumerated breadth-first from the empty set (each ideal plus one node
 * whose predecessors it holds), deduplicated by hash; S ideals of an n-node graph cost
 * O(S n n/64) to enumerate and O(S^2 n/64 + N S^2) for the program. Graphs past the limits
 * below are refused (a wide graph has exponentially many ideals). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpress/model.h"
#include "pipedream_internal.h"

struct ideals {
    int n, cap, words;
    uint64_t *bits;  /* ideal i: bits[i * words .. (i + 1) * words) */
    double *time;    /* its nodes' summed time, s */
    int *size;       /* its node count */
    int *slot;       /* hash table of ideal indices, -1 empty; capacity hcap (a power of 2) */
    int hcap;
};

static uint64_t *bits_of(const struct ideals *s, int i)
{
    return s->bits + (size_t)i * (size_t)s->words;
}

static uint64_t hash_bits(const uint64_t *b, int words)
{
    uint64_t h = 1469598103934665603ull;
    for (int w = 0; w < words; w++) {
        h ^= b[w];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

/* Index of the ideal with bits b, or -1 (then *where is the free slot). */
static int find_ideal(const struct ideals *s, const uint64_t *b, int *where)
{
    size_t mask = (size_t)s->hcap - 1, k = (size_t)hash_bits(b, s->words) & mask;
    while (s->slot[k] >= 0) {
        if (!memcmp(bits_of(s, s->slot[k]), b, (size_t)s->words * sizeof(uint64_t)))
            return s->slot[k];
        k = (k + 1) & mask;
    }
    *where = (int)k;
    return -1;
}

static void ideals_free(struct ideals *s)
{
    free(s->bits);
    free(s->time);
    free(s->size);
    free(s->slot);
}

/* Every ideal of the graph (preds[v]: v's predecessors as a bitset), in breadth-first order,
 * so sizes never decrease. MPRESS_EINPUT past MPRESS_PIPEDREAM_MAX_IDEALS. */
static int enumerate(int n, const uint64_t *preds, const double *t, struct ideals *s,
                     const char *file, struct mpress_error *err)
{
    memset(s, 0, sizeof(*s));
    s->words = (n + 63) / 64;
    s->cap = MPRESS_PIPEDREAM_MAX_IDEALS;
    s->hcap = 2 * 8192;
    while (s->hcap < 2 * s->cap)
        s->hcap *= 2;
    s->bits = calloc((size_t)(s->cap + 1) * (size_t)s->words, sizeof(uint64_t));
    s->time = calloc((size_t)s->cap, sizeof(double));
    s->size = calloc((size_t)s->cap, sizeof(int));
    s->slot = malloc((size_t)s->hcap * sizeof(int));
    if (!s->bits || !s->time || !s->size || !s->slot)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    for (int k = 0; k < s->hcap; k++)
        s->slot[k] = -1;
    int where = 0;
    (void)find_ideal(s, bits_of(s, 0), &where);
    s->slot[where] = 0;
    s->n = 1;
    uint64_t *next = bits_of(s, s->cap); /* scratch: one ideal past the stored ones */
    for (int i = 0; i < s->n; i++) {
        for (int v = 0; v < n; v++) {
            const uint64_t *b = bits_of(s, i), *pv = preds + (size_t)v * (size_t)s->words;
            if (b[v / 64] >> (v % 64) & 1)
                continue;
            int ok = 1;
            for (int w = 0; ok && w < s->words; w++)
                ok = (pv[w] & ~b[w]) == 0;
            if (!ok)
                continue;
            memcpy(next, b, (size_t)s->words * sizeof(uint64_t));
            next[v / 64] |= 1ull << (v % 64);
            if (find_ideal(s, next, &where) >= 0)
                continue;
            if (s->n == s->cap)
                return mpress_error_set(err, MPRESS_EINPUT,
                                        "%s: the graph has more than %d downward-closed node "
                                        "sets (cuts along its antichains); --stages cannot "
                                        "order it (import it without --stages)",
                                        file, MPRESS_PIPEDREAM_MAX_IDEALS);
            memcpy(bits_of(s, s->n), next, (size_t)s->words * sizeof(uint64_t));
            s->time[s->n] = s->time[i] + t[v];
            s->size[s->n] = s->size[i] + 1;
            s->slot[where] = s->n++;
        }
    }
    return 0;
}

/* The dynamic program: best[k][i] = the smallest slowest stage of ideal i cut into k + 1
 * nonempty stages; from[k][i] the ideal before the last stage. Ties keep the first ideal in
 * breadth-first order. Writes the chain of ideals (indices, the last the whole graph). */
static int program(const struct ideals *s, int stages, int full, int *chain, double *bottleneck,
                   struct mpress_error *err)
{
    int S = s->n;
    size_t pairs = (size_t)S * (size_t)S;
    unsigned char *sub = calloc((pairs + 7) / 8, 1); /* bit j*S+i: ideal j strictly inside i */
    double *best = malloc((size_t)stages * (size_t)S * sizeof(double));
    int *from = malloc((size_t)stages * (size_t)S * sizeof(int));
    if (!sub || !best || !from) {
        free(sub);
        free(best);
        free(from);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    for (int i = 0; i < S; i++)
        for (int j = 1; j < S && s->size[j] < s->size[i]; j++) {
            const uint64_t *a = bits_of(s, j), *b = bits_of(s, i);
            int in = 1;
            for (int w = 0; in && w < s->words; w++)
                in = (a[w] & ~b[w]) == 0;
            if (in) {
                size_t bit = (size_t)j * (size_t)S + (size_t)i;
                sub[bit / 8] |= (unsigned char)(1u << (bit % 8));
            }
        }
    for (int i = 0; i < S; i++) {
        best[i] = i ? s->time[i] : -1; /* -1: not cut (the empty set has no stage) */
        from[i] = 0;
    }
    for (int k = 1; k < stages; k++)
        for (int i = 0; i < S; i++) {
            double b = -1;
            int arg = -1;
            for (int j = 1; j < S && s->size[j] < s->size[i]; j++) {
                size_t bit = (size_t)j * (size_t)S + (size_t)i;
                double prev = best[(size_t)(k - 1) * (size_t)S + (size_t)j];
                if (!(sub[bit / 8] >> (bit % 8) & 1) || prev < 0)
                    continue;
                double last = s->time[i] - s->time[j];
                double m = prev > last ? prev : last;
                if (arg < 0 || m < b) {
                    b = m;
                    arg = j;
                }
            }
            best[(size_t)k * (size_t)S + (size_t)i] = b;
            from[(size_t)k * (size_t)S + (size_t)i] = arg < 0 ? 0 : arg;
        }
    *bottleneck = best[(size_t)(stages - 1) * (size_t)S + (size_t)full];
    int cur = full;
    for (int k = stages - 1; k >= 0; k--) {
        chain[k] = cur;
        cur = from[(size_t)k * (size_t)S + (size_t)cur];
    }
    free(sub);
    free(best);
    free(from);
    return 0;
}

/* A __getitem__ node that nothing reads (PipeDream's optimizer removes these unused outputs). */
static int unused_item(const struct mpress_pipedream_graph *g, const int *outs, int v)
{
    return outs[v] == 0 && strncmp(g->nodes[v].desc, "__getitem__", 11) == 0;
}

int mpress_pipedream_order_stages(struct mpress_pipedream_graph *g, int stages, const char *file,
                                  double *bottleneck_s, struct mpress_error *err)
{
    int n = g->n_nodes;
    *bottleneck_s = 0;
    if (stages < 1 || stages > n)
        return mpress_error_set(err, MPRESS_EUSAGE, "%s: --stages %d: the graph has %d nodes",
                                file, stages, n);
    if (n > MPRESS_PIPEDREAM_MAX_ORDER_NODES)
        return mpress_error_set(err, MPRESS_EINPUT,
                                "%s: --stages orders graphs of up to %d nodes; this one has %d "
                                "(import it without --stages)",
                                file, MPRESS_PIPEDREAM_MAX_ORDER_NODES, n);
    /* As PipeDream's optimizer: model inputs and unused __getitem__ outputs are not
     * partitioned. Inputs go first (stage 0), such outputs with their last producer. */
    int *keep = malloc((size_t)n * sizeof(int));   /* v -> index among the kept, or -1 */
    int *outs = calloc((size_t)n, sizeof(int));    /* out-edges to kept nodes */
    int *stage = malloc((size_t)n * sizeof(int));
    int *order = malloc((size_t)n * sizeof(int));
    int *chain = malloc((size_t)stages * sizeof(int));
    uint64_t *preds = NULL;
    double *t = NULL;
    struct ideals s;
    memset(&s, 0, sizeof(s));
    int rc = 0, m = 0;
    if (!keep || !outs || !stage || !order || !chain) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    for (int v = 0; v < n; v++)
        keep[v] = mpress_pipedream_is_input(g, v) ? -1 : 0;
    for (int e = 0; e < g->n_edges; e++)
        outs[g->edges[e].src] += keep[g->edges[e].dst] == 0;
    for (int v = 0; v < n; v++)
        keep[v] = keep[v] < 0 || unused_item(g, outs, v) ? -1 : m++;
    if (stages > m) {
        rc = mpress_error_set(err, MPRESS_EUSAGE, "%s: --stages %d: the graph has %d nodes to "
                              "partition (model inputs and unused outputs aside)",
                              file, stages, m);
        goto done;
    }
    int words = (m + 63) / 64;
    preds = calloc((size_t)m * (size_t)words, sizeof(uint64_t));
    t = malloc((size_t)m * sizeof(double));
    if (!preds || !t) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    for (int e = 0; e < g->n_edges; e++) {
        int u = keep[g->edges[e].src], v = keep[g->edges[e].dst];
        if (u >= 0 && v >= 0)
            preds[(size_t)v * (size_t)words + (size_t)(u / 64)] |= 1ull << (u % 64);
    }
    for (int v = 0; v < n; v++)
        if (keep[v] >= 0)
            t[keep[v]] = (g->nodes[v].fwd_ms + g->nodes[v].bwd_ms) / 1000;
    rc = enumerate(m, preds, t, &s, file, err);
    if (rc)
        goto done;
    int full = -1;
    for (int i = s.n - 1; i >= 0 && full < 0; i--)
        if (s.size[i] == m)
            full = i;
    rc = program(&s, stages, full, chain, bottleneck_s, err);
    if (rc)
        goto done;
    /* stage of a kept node: the first ideal of the chain that holds it */
    for (int v = 0; v < n; v++) {
        stage[v] = 0;
        for (int k = 0; keep[v] >= 0 && k < stages; k++)
            if (bits_of(&s, chain[k])[keep[v] / 64] >> (keep[v] % 64) & 1) {
                stage[v] = k;
                break;
            }
    }
    /* an unused output goes with its last producer (edges may come in any file order) */
    for (int changed = 1; changed;) {
        changed = 0;
        for (int e = 0; e < g->n_edges; e++) {
            int u = g->edges[e].src, v = g->edges[e].dst;
            if (keep[v] < 0 && !mpress_pipedream_is_input(g, v) && stage[u] > stage[v]) {
                stage[v] = stage[u];
                changed = 1;
            }
        }
    }
    /* stable by stage over the Kahn order: an edge u -> v has stage[u] <= stage[v] (the ideals
     * are downward closed), and within a stage the Kahn order already has u first */
    int k = 0;
    for (int st = 0; st < stages; st++)
        for (int i = 0; i < n; i++)
            if (stage[g->order[i]] == st)
                order[k++] = g->order[i];
    memcpy(g->order, order, (size_t)n * sizeof(int));
done:
    ideals_free(&s);
    free(keep);
    free(outs);
    free(preds);
    free(t);
    free(chain);
    free(stage);
    free(order);
    return rc;
}
