/* From an mpress-events trace to an mpress-profile with source "cupti".
 *
 * Every GPU activity and allocation carries a CUPTI correlation id; "corr" events map it to the
 * NVTX range that was innermost on the calling thread (the tracer pushes one external
 * correlation id per range). Ranges are classified by name (steps, forward and backward op
 * ranges, model-state ranges), op ranges are matched across steps, and times and bytes are
 * summed per op. The rules are written out in docs/event-format.md; keep the two in step. */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpress/model.h"
#include "trace_internal.h"

/* ---- indexing ------------------------------------------------------------------------- */

/* qsort with nothing to sort: the array may then be NULL, which qsort itself must not get. */
static void sort_n(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(base, n, size, cmp);
}

static int cmp_range_id(const void *a, const void *b)
{
    const struct trace_range *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_corr(const void *a, const void *b)
{
    const struct trace_corr *x = a, *y = b;
    return x->corr < y->corr ? -1 : x->corr > y->corr;
}

long trace_range_find(const struct mpress_trace *t, uint64_t id)
{
    size_t lo = 0, hi = t->n_ranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->ranges[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n_ranges && t->ranges[lo].id == id ? (long)lo : -1;
}

int trace_index(struct mpress_trace *t, struct mpress_error *err)
{
    uint64_t tmax = 0;
    for (size_t i = 0; i < t->n_acts; i++)
        if (t->acts[i].end > tmax)
            tmax = t->acts[i].end;
    for (size_t i = 0; i < t->n_mems; i++)
        if (t->mems[i].t > tmax)
            tmax = t->mems[i].t;
    for (size_t i = 0; i < t->n_pops; i++)
        if (t->pops[i].t > tmax)
            tmax = t->pops[i].t;
    for (size_t i = 0; i < t->n_ranges; i++)
        if (t->ranges[i].start > tmax)
            tmax = t->ranges[i].start;
    t->t_max = tmax;

    sort_n(t->ranges, t->n_ranges, sizeof(*t->ranges), cmp_range_id);
    for (size_t i = 0; i < t->n_ranges; i++) {
        struct trace_range *r = &t->ranges[i];
        if (i > 0 && r->id == t->ranges[i - 1].id)
            return mpress_error_at(err, MPRESS_EINPUT, "", (int)r->line, 0, "id",
                                   "range id %" PRIu64 " pushed twice", r->id);
        /* The tracer numbers ranges in push order, so a parent always has a smaller id; this
         * lets the analyser resolve ancestors in one pass. */
        if (r->parent >= r->id || (r->parent && trace_range_find(t, r->parent) < 0))
            return mpress_error_at(err, MPRESS_EINPUT, "", (int)r->line, 0, "parent",
                                   "range %" PRIu64 " has parent %" PRIu64
                                   ", which is not an earlier range",
                                   r->id, r->parent);
    }
    for (size_t i = 0; i < t->n_pops; i++) {
        long k = trace_range_find(t, t->pops[i].id);
        if (k < 0)
            return mpress_error_at(err, MPRESS_EINPUT, "", (int)t->pops[i].line, 0, "id",
                                   "pop of range %" PRIu64 ", which was never pushed",
                                   t->pops[i].id);
        if (t->pops[i].t < t->ranges[k].start)
            return mpress_error_at(err, MPRESS_EINPUT, "", (int)t->pops[i].line, 0, "t",
                                   "range %" PRIu64 " popped before it was pushed",
                                   t->pops[i].id);
        t->ranges[k].end = t->pops[i].t;
    }
    for (size_t i = 0; i < t->n_ranges; i++)
        if (t->ranges[i].end == UINT64_MAX)
            t->ranges[i].end = tmax;
    sort_n(t->corrs, t->n_corrs, sizeof(*t->corrs), cmp_corr);
    return 0;
}

/* Range index for a correlation id, or -1. */
static long corr_range(const struct mpress_trace *t, uint64_t corr)
{
    size_t lo = 0, hi = t->n_corrs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->corrs[mid].corr < corr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo >= t->n_corrs || t->corrs[lo].corr != corr)
        return -1;
    return trace_range_find(t, t->corrs[lo].ext);
}

/* ---- classification of ranges --------------------------------------------------------- */

enum rclass { RC_OTHER, RC_FWD, RC_BWD, RC_STEP, RC_PARAM, RC_OPTIM };

struct rinfo {
    enum rclass cls;
    char base[96];          /* op name for fwd/bwd, op named by param:/optim: */
    long long seq;          /* PyTorch "seq = N", -1 when absent */
    long oplevel;           /* outermost fwd/bwd range enclosing it (itself included), or -1 */
    long state;             /* innermost param:/optim: range enclosing it, or -1 */
    int step;               /* step containing its start, -1 outside steps */
    long long seqmin;       /* for op-level forward ranges: smallest seq inside */
    int op;                 /* op index for op-level ranges, -1 when unmatched */
    int under_step;         /* itself or an ancestor is a step range */
    int base_id;            /* equal bases, equal ids (0, 1, ... in name order) */
};

static long long parse_seq(const char *name)
{
    const char *p = strstr(name, "seq = ");
    if (!p)
        return -1;
    p += 6;
    if (!isdigit((unsigned char)*p))
        return -1;
    return strtoll(p, NULL, 10);
}

static int is_step_name(const char *n)
{
    return strncmp(n, "step", 4) == 0 && (n[4] == '\0' || n[4] == ':' || n[4] == ' ' ||
                                          n[4] == '#' || isdigit((unsigned char)n[4]));
}

static void classify(const char *name, struct rinfo *ri)
{
    ri->seq = parse_seq(name);
    ri->cls = RC_OTHER;
    ri->base[0] = '\0';
    if (strncmp(name, "fwd:", 4) == 0 || strncmp(name, "bwd:", 4) == 0) {
        ri->cls = name[0] == 'f' ? RC_FWD : RC_BWD;
        snprintf(ri->base, sizeof(ri->base), "%s", name + 4);
    } else if (strncmp(name, "param:", 6) == 0) {
        ri->cls = RC_PARAM;
        snprintf(ri->base, sizeof(ri->base), "%s", name + 6);
    } else if (strncmp(name, "optim:", 6) == 0) {
        ri->cls = RC_OPTIM;
        snprintf(ri->base, sizeof(ri->base), "%s", name + 6);
    } else if (is_step_name(name)) {
        ri->cls = RC_STEP;
    } else if (ri->seq >= 0) {
        /* torch.autograd.profiler.emit_nvtx: "aten::addmm, seq = 12, ..." in forward and
         * "AddmmBackward0, seq = 12" (or "stashed seq") for the backward node it created. */
        size_t len = strcspn(name, ",");
        if (len >= sizeof(ri->base))
            len = sizeof(ri->base) - 1;
        memcpy(ri->base, name, len);
        ri->base[len] = '\0';
        while (len > 0 && ri->base[len - 1] == ' ')
            ri->base[--len] = '\0';
        ri->cls = strstr(ri->base, "Backward") ? RC_BWD : RC_FWD;
    }
    /* A range that names no op ("fwd:", ", seq = 6") is not one: a profile's ops have names. */
    if (ri->cls != RC_OTHER && ri->cls != RC_STEP && ri->base[0] == '\0')
        ri->cls = RC_OTHER;
}

/* ---- steps ---------------------------------------------------------------------------- */

struct step {
    uint64_t start, end;
};

static int cmp_step(const void *a, const void *b)
{
    const struct step *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int step_of(const struct step *steps, int n, uint64_t t)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (steps[mid].start <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    int s = lo - 1;
    return s >= 0 && t <= steps[s].end ? s : -1;
}

/* steps are sorted by start */
static uint64_t next_step_start(const struct step *steps, int n, uint64_t t)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (steps[mid].start <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n ? steps[lo].start : UINT64_MAX;
}

/* ---- ops ------------------------------------------------------------------------------ */

struct opkey {
    char base[96];
    int base_id;
    int occ;                /* occurrence of base within a step, in start order */
};

/* (base id, occurrence) -> op index: open addressing on the packed pair. */
struct opmap {
    uint64_t *key;          /* pair + 1, 0 empty */
    int *val;
    size_t cap;
};

struct ctx {
    const struct mpress_trace *t;
    struct rinfo *ri;
    struct step *steps;
    int n_steps, first_used;
    int has_steps;
    struct opkey *ops;
    int n_ops, cap_ops;
    int *max_occ;           /* per op base: most occurrences in one step */
    struct opmap map;
    int n_bases;
    long *lists;            /* op-level ranges sorted by (step, class, start, id) */
    size_t *seg;            /* lists[seg[(s * 2 + bwd)] .. seg[(s * 2 + bwd) + 1]) */
};

static size_t opmap_slot(const struct opmap *m, uint64_t key)
{
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (m->cap - 1);
    while (m->key[h] && m->key[h] != key)
        h = (h + 1) & (m->cap - 1);
    return h;
}

static uint64_t op_pair(int base_id, int occ)
{
    return ((uint64_t)(unsigned)base_id << 32 | (unsigned)occ) + 1;
}

static int op_find(const struct ctx *c, int base_id, int occ)
{
    size_t h = opmap_slot(&c->map, op_pair(base_id, occ));
    return c->map.key[h] ? c->map.val[h] : -1;
}

static int op_add(struct ctx *c, const struct rinfo *r, int occ)
{
    size_t h = opmap_slot(&c->map, op_pair(r->base_id, occ));
    if (c->map.key[h])
        return c->map.val[h];
    if (c->n_ops == c->cap_ops) {
        int nc = c->cap_ops ? c->cap_ops * 2 : 32;
        struct opkey *p = realloc(c->ops, (size_t)nc * sizeof(*p));
        if (!p)
            return -2;
        c->ops = p;
        c->cap_ops = nc;
    }
    snprintf(c->ops[c->n_ops].base, sizeof(c->ops[0].base), "%s", r->base);
    c->ops[c->n_ops].base_id = r->base_id;
    c->ops[c->n_ops].occ = occ;
    c->map.key[h] = op_pair(r->base_id, occ);
    c->map.val[h] = c->n_ops;
    return c->n_ops++;
}

/* Sorting helpers take the context through a file-scope pointer: qsort has no argument. */
static const struct ctx *sort_ctx;

static int cmp_base(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    int k = strcmp(sort_ctx->ri[x].base, sort_ctx->ri[y].base);
    return k ? k : (x > y) - (x < y);
}

static int cmp_listed(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    const struct rinfo *rx = &sort_ctx->ri[x], *ry = &sort_ctx->ri[y];
    if (rx->step != ry->step)
        return rx->step < ry->step ? -1 : 1;
    if ((rx->cls == RC_BWD) != (ry->cls == RC_BWD))
        return rx->cls == RC_BWD ? 1 : -1;
    const struct trace_range *tx = &sort_ctx->t->ranges[x], *ty = &sort_ctx->t->ranges[y];
    if (tx->start != ty->start)
        return tx->start < ty->start ? -1 : 1;
    return tx->id < ty->id ? -1 : tx->id > ty->id;
}

/* Numbers the distinct bases and lists each step's op-level ranges by class and start: one
 * sort each, instead of a scan of every range per step and a scan of the earlier ones per
 * range. */
static int index_ranges(struct ctx *c)
{
    const struct mpress_trace *t = c->t;
    size_t n = t->n_ranges;
    long *v = malloc((n + 1) * sizeof(*v));
    c->lists = malloc((n + 1) * sizeof(*c->lists));
    c->seg = calloc((size_t)c->n_steps * 2 + 2, sizeof(*c->seg));
    c->map.cap = 64;
    while (c->map.cap < 2 * n + 2)
        c->map.cap *= 2;
    c->map.key = calloc(c->map.cap, sizeof(*c->map.key));
    c->map.val = malloc(c->map.cap * sizeof(*c->map.val));
    if (!v || !c->lists || !c->seg || !c->map.key || !c->map.val) {
        free(v);
        return -1;
    }
    sort_ctx = c;
    for (size_t i = 0; i < n; i++)
        v[i] = (long)i;
    sort_n(v, n, sizeof(*v), cmp_base);
    c->n_bases = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(c->ri[v[i]].base, c->ri[v[i - 1]].base) != 0)
            c->n_bases++;
        c->ri[v[i]].base_id = c->n_bases;
    }
    c->n_bases++;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const struct rinfo *r = &c->ri[i];
        if (r->oplevel == (long)i && (r->cls == RC_FWD || r->cls == RC_BWD) && r->step >= 0 &&
            r->step < c->n_steps)
            c->lists[k++] = (long)i;
    }
    sort_n(c->lists, k, sizeof(*c->lists), cmp_listed);
    for (size_t i = 0; i < k; i++) {
        const struct rinfo *r = &c->ri[c->lists[i]];
        c->seg[(size_t)r->step * 2 + (r->cls == RC_BWD) + 1]++;
    }
    for (size_t j = 1; j <= (size_t)c->n_steps * 2; j++)
        c->seg[j] += c->seg[j - 1];
    sort_ctx = NULL;
    free(v);
    return 0;
}

/* Op-level ranges of one class in one step, by start time. */
static const long *step_ranges(const struct ctx *c, int s, enum rclass cls, size_t *n)
{
    size_t j = (size_t)s * 2 + (cls == RC_BWD);
    *n = c->seg[j + 1] - c->seg[j];
    return c->lists + c->seg[j];
}

struct seqpos {
    long long seqmin;
    size_t j;
};

static int cmp_seqpos(const void *a, const void *b)
{
    const struct seqpos *x = a, *y = b;
    if (x->seqmin != y->seqmin)
        return x->seqmin < y->seqmin ? -1 : 1;
    return (x->j > y->j) - (x->j < y->j);
}

/* Assigns op indices to op-level forward ranges (creating ops from the used steps) and pairs
 * backward ranges with them. Time O(R log R) for R ranges. */
static int match_ops(struct ctx *c)
{
    if (index_ranges(c))
        return -1;
    int *cnt = calloc((size_t)c->n_bases + 1, sizeof(int));  /* per base, this step so far */
    int *bcnt = calloc((size_t)c->n_bases + 1, sizeof(int)); /* backward ones */
    struct seqpos *sp = malloc((c->t->n_ranges + 1) * sizeof(*sp));
    if (!cnt || !bcnt || !sp)
        goto oom;
    for (int pass = 0; pass < 2; pass++) {
        for (int s = 0; s < c->n_steps; s++) {
            size_t n;
            const long *v = step_ranges(c, s, RC_FWD, &n);
            for (size_t i = 0; i < n; i++) {
                struct rinfo *r = &c->ri[v[i]];
                int occ = cnt[r->base_id]++;
                int k = pass == 0 && s >= c->first_used ? op_add(c, r, occ)
                                                         : op_find(c, r->base_id, occ);
                if (k == -2)
                    goto oom;
                r->op = k;
            }
            for (size_t i = 0; i < n; i++)
                cnt[c->ri[v[i]].base_id] = 0;
        }
    }
    c->max_occ = calloc((size_t)c->n_ops + 1, sizeof(int));
    if (!c->max_occ)
        goto oom;
    for (int i = 0; i < c->n_ops; i++)
        if (c->ops[i].occ + 1 > cnt[c->ops[i].base_id])
            cnt[c->ops[i].base_id] = c->ops[i].occ + 1;
    for (int i = 0; i < c->n_ops; i++)
        c->max_occ[i] = cnt[c->ops[i].base_id];
    for (int i = 0; i < c->n_ops; i++)
        cnt[c->ops[i].base_id] = 0;

    for (int s = 0; s < c->n_steps; s++) {
        size_t nf, nb, ns = 0;
        const long *f = step_ranges(c, s, RC_FWD, &nf);
        const long *b = step_ranges(c, s, RC_BWD, &nb);
        for (size_t j = 0; j < nf; j++) {
            const struct rinfo *fj = &c->ri[f[j]];
            cnt[fj->base_id]++;
            if (fj->seqmin >= 0)
                sp[ns++] = (struct seqpos){fj->seqmin, j};
        }
        sort_n(sp, ns, sizeof(*sp), cmp_seqpos);
        for (size_t i = 0; i < nb; i++) {
            struct rinfo *bi = &c->ri[b[i]];
            bi->op = -1;
            if (bi->seq >= 0) {
                /* PyTorch: the forward op that was running when the sequence counter stood at
                 * this backward node's number is the last one whose first seq is <= it (of
                 * equal ones, the last to start). */
                size_t lo = 0, hi = ns;
                while (lo < hi) {
                    size_t mid = (lo + hi) / 2;
                    if (sp[mid].seqmin <= bi->seq)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                if (lo > 0)
                    bi->op = c->ri[f[sp[lo - 1].j]].op;
            } else {
                /* "bwd:NAME": backward visits repeated names in reverse, so the i-th backward
                 * occurrence belongs to the (n-1-i)-th forward one. */
                int nocc = cnt[bi->base_id], bocc = bcnt[bi->base_id];
                if (bocc < nocc)
                    bi->op = op_find(c, bi->base_id, nocc - 1 - bocc);
            }
            bcnt[bi->base_id]++;
        }
        for (size_t j = 0; j < nf; j++)
            cnt[c->ri[f[j]].base_id] = 0;
        for (size_t i = 0; i < nb; i++)
            bcnt[c->ri[b[i]].base_id] = 0;
    }
    free(cnt);
    free(bcnt);
    free(sp);
    return 0;
oom:
    free(cnt);
    free(bcnt);
    free(sp);
    return -1;
}

/* ---- per-op accumulation --------------------------------------------------------------- */

struct interval {
    int op, dir, step;
    uint64_t start, end;
};

static int cmp_interval(const void *a, const void *b)
{
    const struct interval *x = a, *y = b;
    if (x->op != y->op)
        return x->op - y->op;
    if (x->dir != y->dir)
        return x->dir - y->dir;
    if (x->step != y->step)
        return x->step - y->step;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of the non-negative entries of v[0..n) (negative = op absent that step); 0 if none. */
static double median(const double *v, int n)
{
    double *w = malloc((size_t)(n + 1) * sizeof(*w));
    if (!w)
        return 0;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i] >= 0)
            w[k++] = v[i];
    double m = 0;
    if (k > 0) {
        sort_n(w, (size_t)k, sizeof(*w), cmp_double);
        m = k % 2 ? w[k / 2] : 0.5 * (w[k / 2 - 1] + w[k / 2]);
    }
    free(w);
    return m;
}

/* Where an event with correlation corr and time ts belongs. */
struct where {
    long range;             /* innermost range, -1 */
    long L;                 /* op-level range, -1 */
    int op, dir, step;      /* op -1 when not in a matched op range; dir 0 fwd, 1 bwd */
    long state;             /* param:/optim: range, -1 */
};

static struct where locate(const struct ctx *c, uint64_t corr, uint64_t ts)
{
    struct where w = {.range = corr_range(c->t, corr), .L = -1, .op = -1, .state = -1};
    if (w.range >= 0) {
        const struct rinfo *r = &c->ri[w.range];
        w.L = r->oplevel;
        w.state = r->state;
        if (w.L >= 0) {
            w.op = c->ri[w.L].op;
            w.dir = c->ri[w.L].cls == RC_BWD;
            w.step = c->ri[w.L].step;
        } else {
            w.step = r->step;
        }
    } else {
        w.step = step_of(c->steps, c->n_steps, ts);
    }
    if (!c->has_steps)
        w.step = 0;
    return w;
}

/* Live allocations keyed by (device, address): open addressing, linear probing. */
struct live {
    size_t *slot;           /* mem index + 1, 0 empty */
    size_t cap;
};

static size_t live_hash(int dev, uint64_t addr, size_t cap)
{
    uint64_t h = addr * 0x9E3779B97F4A7C15ull ^ (uint64_t)(unsigned)dev * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h >> 17) & (cap - 1);
}

static size_t *live_slot(struct live *lv, const struct trace_mem *mems, int dev, uint64_t addr)
{
    size_t h = live_hash(dev, addr, lv->cap);
    for (;;) {
        size_t *s = &lv->slot[h];
        if (*s == 0 || (mems[*s - 1].dev == dev && mems[*s - 1].addr == addr))
            return s;
        h = (h + 1) & (lv->cap - 1);
    }
}

/* Removes the entry at slot s, re-inserting the rest of its probe run (no tombstones). */
static void live_remove(struct live *lv, const struct trace_mem *mems, size_t *s)
{
    size_t i = (size_t)(s - lv->slot);
    lv->slot[i] = 0;
    for (size_t j = (i + 1) & (lv->cap - 1); lv->slot[j]; j = (j + 1) & (lv->cap - 1)) {
        size_t v = lv->slot[j];
        lv->slot[j] = 0;
        *live_slot(lv, mems, mems[v - 1].dev, mems[v - 1].addr) = v;
    }
}

static int cmp_mem_time(const void *a, const void *b)
{
    const struct trace_mem *x = *(const struct trace_mem *const *)a;
    const struct trace_mem *y = *(const struct trace_mem *const *)b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

struct tensor_acc {
    int op;
    uint64_t bytes, t;
};

static int cmp_tensor(const void *a, const void *b)
{
    const struct tensor_acc *x = a, *y = b;
    if (x->op != y->op)
        return x->op - y->op;
    return x->t < y->t ? -1 : x->t > y->t;
}

static const struct mpress_profile *sort_prof;

static int cmp_op_name(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    int k = strcmp(sort_prof->ops[x].name, sort_prof->ops[y].name);
    return k ? k : (x > y) - (x < y);
}

/* by_name: op indices sorted by (name, index). The first op of that name, or -1. */
static int op_by_name(const struct mpress_profile *p, const int *by_name, const char *name)
{
    int lo = 0, hi = p->n_ops;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (strcmp(p->ops[by_name[mid]].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->n_ops && strcmp(p->ops[by_name[lo]].name, name) == 0 ? by_name[lo] : -1;
}

static int layer_of(const char *name)
{
    const char *p = strstr(name, "layer");
    while (p) {
        if (isdigit((unsigned char)p[5]))
            return atoi(p + 5);
        p = strstr(p + 5, "layer");
    }
    return -1;
}

void mpress_trace_options_init(struct mpress_trace_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->warmup_steps = -1;
}

static int memory_pass(struct ctx *c, struct mpress_profile *p, struct mpress_trace_summary *sum,
                       int ref_step, struct mpress_error *err);

/* Classify the ranges, find the steps (one open-ended step when the trace marks none) and
 * each range's step, and each op-level range's least PyTorch sequence number. */
static void classify_ranges(struct ctx *c)
{
    const struct mpress_trace *t = c->t;
    /* Classify; parents come first (smaller ids), so one pass resolves ancestors. */
    for (size_t i = 0; i < t->n_ranges; i++) {
        struct rinfo *r = &c->ri[i];
        classify(t->ranges[i].name, r);
        long par = t->ranges[i].parent ? trace_range_find(t, t->ranges[i].parent) : -1;
        long par_level = par >= 0 ? c->ri[par].oplevel : -1;
        r->state = r->cls == RC_PARAM || r->cls == RC_OPTIM ? (long)i
                   : par >= 0                               ? c->ri[par].state
                                                            : -1;
        /* Ops inside a model-state range (an optimizer step's own aten ops) are not model ops. */
        r->oplevel = par_level >= 0                                     ? par_level
                     : r->state >= 0                                    ? -1
                     : (r->cls == RC_FWD || r->cls == RC_BWD) ? (long)i
                                                                        : -1;
        r->seqmin = -1;
        r->op = -1;
        int in_step = par >= 0 && c->ri[par].under_step;
        if (r->cls == RC_STEP && !in_step) /* a step inside a step is part of the outer one */
            c->steps[c->n_steps++] = (struct step){t->ranges[i].start, t->ranges[i].end};
        r->under_step = in_step || r->cls == RC_STEP;
    }
    c->has_steps = c->n_steps > 0;
    if (!c->has_steps) {
        c->steps[0] = (struct step){0, UINT64_MAX};
        c->n_steps = 1;
    }
    sort_n(c->steps, (size_t)c->n_steps, sizeof(*c->steps), cmp_step);
    for (size_t i = 0; i < t->n_ranges; i++) {
        c->ri[i].step = c->has_steps ? step_of(c->steps, c->n_steps, t->ranges[i].start) : 0;
    }
    for (size_t i = 0; i < t->n_ranges; i++) {
        long L = c->ri[i].oplevel;
        if (L >= 0 && c->ri[i].seq >= 0 && (c->ri[L].seqmin < 0 || c->ri[i].seq < c->ri[L].seqmin))
            c->ri[L].seqmin = c->ri[i].seq;
    }
}

/* GPU busy time per (op, direction, step) into busy (-1 where the op did not run in that
 * step): the union of its activities' intervals (iv, sorted here), so kernels overlapping on
 * several streams are not counted twice. */
static void op_busy_times(const struct ctx *c, struct mpress_trace_summary *sum,
                          struct interval *iv, double *busy, size_t cells)
{
    const struct mpress_trace *t = c->t;
    for (size_t i = 0; i < cells; i++)
        busy[i] = -1;
    for (size_t i = 0; i < t->n_ranges; i++) {
        const struct rinfo *r = &c->ri[i];
        if (r->oplevel == (long)i && r->op >= 0 && r->step >= 0)
            busy[((size_t)r->op * 2 + (r->cls == RC_BWD)) * (size_t)c->n_steps +
                 (size_t)r->step] = 0;
    }
    size_t niv = 0;
    sum->n_gpu_activities = t->n_acts;
    for (size_t i = 0; i < t->n_acts; i++) {
        const struct trace_act *a = &t->acts[i];
        struct where w = locate(c, a->corr, a->start);
        if (w.op < 0 || w.step < 0) {
            sum->n_unattributed++;
            continue;
        }
        iv[niv++] = (struct interval){w.op, w.dir, w.step, a->start, a->end};
    }
    sort_n(iv, niv, sizeof(*iv), cmp_interval);
    for (size_t i = 0; i < niv;) {
        size_t j = i;
        uint64_t total = 0, cs = iv[i].start, ce = iv[i].end;
        for (j = i + 1; j < niv && iv[j].op == iv[i].op && iv[j].dir == iv[i].dir &&
                        iv[j].step == iv[i].step;
             j++) {
            if (iv[j].start > ce) {
                total += ce - cs;
                cs = iv[j].start;
                ce = iv[j].end;
            } else if (iv[j].end > ce) {
                ce = iv[j].end;
            }
        }
        total += ce - cs;
        busy[((size_t)iv[i].op * 2 + (size_t)iv[i].dir) * (size_t)c->n_steps +
             (size_t)iv[i].step] = (double)total * 1e-9;
        i = j;
    }
}

/* The profile skeleton: source, device, model config and one op per matched op, with its
 * name, kind, layer and median forward and backward times over the used steps. */
static int profile_ops(const struct ctx *c, const struct mpress_trace_options *opt,
                       const double *busy, struct mpress_profile *p, struct mpress_error *err)
{
    const struct mpress_trace *t = c->t;
    snprintf(p->source, sizeof(p->source), "cupti");
    snprintf(p->device, sizeof(p->device), "unknown");
    int best_dev = -1;
    for (int d = 0; d < t->n_devices; d++)
        if (t->devices[d].name[0] && (best_dev < 0 || t->devices[d].id < t->devices[best_dev].id))
            best_dev = d;
    if (best_dev >= 0)
        snprintf(p->device, sizeof(p->device), "%s", t->devices[best_dev].name);
    struct mpress_model_config *m = &p->model;
    snprintf(m->name, sizeof(m->name), "%s", opt->model_name[0] ? opt->model_name : "traced");
    snprintf(m->family, sizeof(m->family), "import");
    snprintf(m->dtype, sizeof(m->dtype), "%s", opt->dtype[0] ? opt->dtype : "fp16");
    snprintf(m->optimizer, sizeof(m->optimizer), "%s",
             opt->optimizer[0] ? opt->optimizer : "adam");
    m->micro_batch = 1;
    p->ops = calloc((size_t)c->n_ops, sizeof(*p->ops));
    if (!p->ops)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    p->n_ops = c->n_ops;
    int max_layer = -1;
    for (int k = 0; k < c->n_ops; k++) {
        struct mpress_op *op = &p->ops[k];
        if (c->max_occ[k] > 1)
            /* long names are cut, as everywhere in the profile */
            snprintf(op->name, sizeof(op->name), "%.*s.%d", (int)strlen(c->ops[k].base),
                     c->ops[k].base, c->ops[k].occ);
        else
            snprintf(op->name, sizeof(op->name), "%s", c->ops[k].base);
        snprintf(op->kind, sizeof(op->kind), "%.*s", (int)sizeof(op->kind) - 1, c->ops[k].base);
        op->layer = layer_of(op->name);
        if (op->layer > max_layer)
            max_layer = op->layer;
        size_t base = (size_t)k * 2 * (size_t)c->n_steps;
        op->fwd_s = median(busy + base + (size_t)c->first_used, c->n_steps - c->first_used);
        op->bwd_s = median(busy + base + (size_t)c->n_steps + (size_t)c->first_used,
                           c->n_steps - c->first_used);
    }
    m->layers = max_layer + 1;
    return 0;
}

/* The step whose saved tensors are listed, and the median step time into sum. */
static int step_times(const struct ctx *c, struct mpress_trace_summary *sum, double *stepw)
{
    const struct mpress_trace *t = c->t;
    /* Which steps trained: a step range holding no op range (the tail after the last
     * optimizer step that --nvtx-torch leaves open until exit) is not a step time, and the
     * step whose saved tensors are listed is the last one that ran a backward op (else a
     * forward one): a run that died mid-step, or such a tail, would list none. */
    int ref_step = -1, ref_fwd = -1;
    for (int s = 0; s < c->n_steps; s++)
        stepw[s] = -1;
    for (size_t i = 0; i < t->n_ranges; i++) {
        const struct rinfo *r = &c->ri[i];
        if (r->oplevel != (long)i || r->op < 0 || r->step < 0)
            continue;
        stepw[r->step] = 0;
        if (r->cls == RC_BWD && r->step > ref_step)
            ref_step = r->step;
        if (r->cls == RC_FWD && r->step > ref_fwd)
            ref_fwd = r->step;
    }
    if (ref_step < 0)
        ref_step = ref_fwd >= 0 ? ref_fwd : c->n_steps - 1;
    if (c->has_steps) {
        for (int s = 0; s < c->n_steps; s++)
            if (stepw[s] == 0)
                stepw[s] = (double)(c->steps[s].end - c->steps[s].start) * 1e-9;
        sum->step_s = median(stepw + c->first_used, c->n_steps - c->first_used);
    }
    return ref_step;
}

int mpress_trace_analyse(const struct mpress_trace *t, const struct mpress_trace_options *opt,
                         struct mpress_profile *p, struct mpress_trace_summary *sum_out,
                         struct mpress_error *err)
{
    struct mpress_trace_options dflt;
    if (!opt) {
        mpress_trace_options_init(&dflt);
        opt = &dflt;
    }
    mpress_profile_init(p);
    struct mpress_trace_summary sumv;
    struct mpress_trace_summary *sum = sum_out ? sum_out : &sumv;
    memset(sum, 0, sizeof(*sum));
    sum->tracer_ok = t->tracer_ok;
    snprintf(sum->tracer_error, sizeof(sum->tracer_error), "%s", t->tracer_error);
    sum->clean_exit = t->clean_exit;
    sum->truncated_line = t->truncated_line;
    sum->n_events = t->n_events;
    sum->dropped_records = t->dropped;
    sum->n_devices = t->n_devices;
    memcpy(sum->devices, t->devices, sizeof(sum->devices));

    int rc = MPRESS_ESYSTEM;
    struct ctx c = {.t = t};
    struct interval *iv = NULL;
    double *busy = NULL, *stepw = NULL;
    c.ri = calloc(t->n_ranges + 1, sizeof(*c.ri));
    c.steps = calloc(t->n_ranges + 1, sizeof(*c.steps));
    if (!c.ri || !c.steps)
        goto oom;

    classify_ranges(&c);
    int warm = opt->warmup_steps >= 0 ? opt->warmup_steps : (c.n_steps >= 2 ? 1 : 0);
    if (warm >= c.n_steps) {
        rc = mpress_error_set(err, MPRESS_EUSAGE,
                              "%d warm-up steps requested but the trace has only %d step%s",
                              warm, c.n_steps, c.n_steps == 1 ? "" : "s");
        goto fail;
    }
    c.first_used = warm;
    sum->n_steps = c.n_steps;
    sum->n_steps_used = c.n_steps - warm;

    if (match_ops(&c))
        goto oom;
    if (c.n_ops == 0) {
        rc = mpress_error_set(err, MPRESS_EINPUT,
                              "no op ranges in the trace: the program pushed no NVTX ranges "
                              "named \"fwd:NAME\" or carrying PyTorch \"seq = N\" (use "
                              "--nvtx-torch for PyTorch programs)");
        goto fail;
    }

    /* Busy time per (op, direction, step), then the profile's ops and the step times. */
    iv = malloc((t->n_acts + 1) * sizeof(*iv));
    size_t cells = (size_t)c.n_ops * 2 * (size_t)c.n_steps;
    busy = malloc((cells + 1) * sizeof(*busy));
    stepw = malloc(((size_t)c.n_steps + 1) * sizeof(*stepw));
    if (!iv || !busy || !stepw)
        goto oom;
    op_busy_times(&c, sum, iv, busy, cells);
    rc = profile_ops(&c, opt, busy, p, err);
    if (rc)
        goto fail;
    int ref_step = step_times(&c, sum, stepw);
    rc = memory_pass(&c, p, sum, ref_step, err);
    if (rc)
        goto fail;
    int weight_bytes, grad_bytes, optim_bytes;
    mpress_model_state_bytes(&p->model, &weight_bytes, &grad_bytes, &optim_bytes);
    for (int k = 0; k < p->n_ops; k++)
        p->ops[k].params = p->ops[k].param_bytes / (uint64_t)weight_bytes;
    rc = 0;
    goto done;
oom:
    rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
fail:
done:
    free(iv);
    free(busy);
    free(stepw);
    free(c.ri);
    free(c.steps);
    free(c.ops);
    free(c.max_occ);
    free(c.map.key);
    free(c.map.val);
    free(c.lists);
    free(c.seg);
    return rc;
}

/* The device-memory events in time order, with what the walks learn of each. */
struct mem_walk {
    size_t n;
    const struct trace_mem **ord;
    long *freed_by;  /* by position in ord */
    long *alloc_of;  /* release -> its allocation */
    size_t *pos_of;  /* mems index -> position in ord */
    struct where *wh;
};

/* Walk in time order: pair each release with the live allocation at its address (a later
 * allocation at the same address is a new tensor), track per-device live bytes (live_dev,
 * peaks into sum's devices, added as they appear). */
static void pair_releases(const struct mpress_trace *t, struct mpress_trace_summary *sum,
                          struct mem_walk *w, struct live *lv, uint64_t *live_dev)
{
    for (size_t i = 0; i < w->n; i++) {
        const struct trace_mem *e = w->ord[i];
        struct mpress_trace_device *dv = NULL;
        for (int d = 0; d < sum->n_devices; d++)
            if (sum->devices[d].id == e->dev)
                dv = &sum->devices[d];
        if (!dv && sum->n_devices < MPRESS_TRACE_MAX_DEVICES) {
            dv = &sum->devices[sum->n_devices++];
            memset(dv, 0, sizeof(*dv));
            dv->id = e->dev;
        }
        uint64_t *live = dv ? &live_dev[dv - sum->devices] : NULL;
        size_t *s = live_slot(lv, (const struct trace_mem *)t->mems, e->dev, e->addr);
        if (e->is_alloc) {
            sum->n_allocs++;
            if (*s) /* the old one's release was not traced: forget it */
                live_remove(lv, t->mems, s);
            s = live_slot(lv, t->mems, e->dev, e->addr);
            *s = (size_t)(e - t->mems) + 1;
            if (live) {
                *live += e->bytes;
                if (*live > dv->peak_bytes)
                    dv->peak_bytes = *live;
            }
        } else {
            sum->n_frees++;
            if (!*s) {
                sum->unmatched_frees++;
                continue;
            }
            const struct trace_mem *a = &t->mems[*s - 1];
            live_remove(lv, t->mems, s);
            if (live)
                *live -= a->bytes;
            w->freed_by[w->pos_of[a - t->mems]] = (long)i;
            w->alloc_of[i] = (long)w->pos_of[a - t->mems];
        }
    }
}

/* Workspace: bytes allocated and released inside the same op-level range, at their peak.
 * A second walk in time order so that the running sums (ws_cur, per range) see releases in
 * place. */
static void workspaces(const struct ctx *c, struct mpress_profile *p, const struct mem_walk *w,
                       uint64_t *ws_cur)
{
    const struct where *wh = w->wh;
    for (size_t i = 0; i < w->n; i++) {
        long ai = w->ord[i]->is_alloc ? (long)i : w->alloc_of[i];
        long fi = w->ord[i]->is_alloc ? w->freed_by[i] : (long)i;
        if (ai < 0)
            continue;
        if (fi < 0 || wh[ai].L < 0 || wh[ai].L != wh[fi].L || wh[ai].op < 0 ||
            wh[ai].step < c->first_used)
            continue;
        long L = wh[ai].L;
        if (w->ord[i]->is_alloc) {
            ws_cur[L] += w->ord[ai]->bytes;
            struct mpress_op *op = &p->ops[wh[ai].op];
            if (ws_cur[L] > op->workspace_bytes)
                op->workspace_bytes = ws_cur[L];
        } else {
            ws_cur[L] -= w->ord[ai]->bytes;
        }
    }
}

/* Classify each allocation by where it was made and where it was released: a saved tensor
 * of the reference step (into tens), an op's parameters or gradients, a param:/optim:
 * range's model state (the op found by name in by_name), or unattributed persistent bytes. */
static size_t classify_allocations(const struct ctx *c, struct mpress_profile *p,
                                   struct mpress_trace_summary *sum, const struct mem_walk *w,
                                   const int *by_name, int ref_step, struct tensor_acc *tens)
{
    size_t ntens = 0;
    for (size_t i = 0; i < w->n; i++) {
        if (!w->ord[i]->is_alloc)
            continue;
        const struct trace_mem *a = w->ord[i];
        const struct where *wa = &w->wh[i];
        const struct where *wf = w->freed_by[i] >= 0 ? &w->wh[w->freed_by[i]] : NULL;
        uint64_t ft = wf ? w->ord[w->freed_by[i]]->t : UINT64_MAX;
        uint64_t horizon = c->has_steps && wa->step >= 0 ? c->steps[wa->step].end
                           : c->has_steps ? next_step_start(c->steps, c->n_steps, a->t)
                                          : UINT64_MAX;
        int persistent = !wf || ft > horizon;
        if (!c->has_steps)
            persistent = !wf;
        if (wa->op >= 0) {
            struct mpress_op *op = &p->ops[wa->op];
            if (wa->dir == 0 && wf && wf->L >= 0 && wf->dir == 1 && wf->step == wa->step) {
                if (wa->step == ref_step)
                    tens[ntens++] = (struct tensor_acc){wa->op, a->bytes, a->t};
            } else if (persistent) {
                if (wa->dir == 0)
                    op->param_bytes += a->bytes;
                else
                    op->grad_bytes += a->bytes;
            }
            continue;
        }
        if (wa->state >= 0 && persistent) {
            const struct rinfo *sr = &c->ri[wa->state];
            int k = op_by_name(p, by_name, sr->base);
            if (k >= 0) {
                if (sr->cls == RC_PARAM)
                    p->ops[k].param_bytes += a->bytes;
                else
                    p->ops[k].optim_bytes += a->bytes;
                continue;
            }
        }
        if (persistent)
            sum->unattributed_persistent_bytes += a->bytes;
    }
    return ntens;
}

/* Output: in the reference step, the last allocation of an op's forward range still live
 * when the range ends: what the next op reads. */
static void op_outputs(const struct mpress_trace *t, struct mpress_profile *p,
                       const struct mem_walk *w, int ref_step)
{
    const struct where *wh = w->wh;
    for (size_t i = 0; i < w->n; i++) {
        if (!w->ord[i]->is_alloc || wh[i].op < 0 || wh[i].dir != 0 || wh[i].step != ref_step)
            continue;
        uint64_t range_end = t->ranges[wh[i].L].end;
        uint64_t ft = w->freed_by[i] >= 0 ? w->ord[w->freed_by[i]]->t : UINT64_MAX;
        if (ft > range_end)
            p->ops[wh[i].op].output_bytes = w->ord[i]->bytes; /* later ones overwrite */
    }
}

/* Saved tensors, per op in allocation order (tens sorted here). */
static int saved_tensors(struct mpress_profile *p, struct tensor_acc *tens, size_t ntens,
                         struct mpress_error *err)
{
    sort_n(tens, ntens, sizeof(*tens), cmp_tensor);
    for (size_t i = 0; i < ntens;) {
        size_t j = i;
        while (j < ntens && tens[j].op == tens[i].op)
            j++;
        struct mpress_op *op = &p->ops[tens[i].op];
        op->tensors = calloc(j - i, sizeof(*op->tensors));
        if (!op->tensors)
            return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        op->n_tensors = (int)(j - i);
        for (size_t k = i; k < j; k++) {
            struct mpress_saved_tensor *st = &op->tensors[k - i];
            snprintf(st->name, sizeof(st->name), "saved%zu", k - i);
            snprintf(st->id, sizeof(st->id), "%.80s.%.14s", op->name, st->name);
            st->bytes = tens[k].bytes;
            st->recompute_s = op->fwd_s;
            st->recompute_op = tens[i].op;
        }
        i = j;
    }
    return 0;
}

/* Device memory: peaks per device, saved tensors, model states, workspaces and outputs. */
static int memory_pass(struct ctx *c, struct mpress_profile *p, struct mpress_trace_summary *sum,
                       int ref_step, struct mpress_error *err)
{
    const struct mpress_trace *t = c->t;
    size_t n = t->n_mems;
    int rc = MPRESS_ESYSTEM;
    struct mem_walk w = {.n = n};
    w.ord = malloc((n + 1) * sizeof(*w.ord));
    w.freed_by = malloc((n + 1) * sizeof(*w.freed_by));
    w.alloc_of = malloc((n + 1) * sizeof(*w.alloc_of));
    w.pos_of = malloc((n + 1) * sizeof(*w.pos_of));
    w.wh = malloc((n + 1) * sizeof(*w.wh));
    struct tensor_acc *tens = malloc((n + 1) * sizeof(*tens));
    uint64_t *live_dev = calloc(MPRESS_TRACE_MAX_DEVICES, sizeof(*live_dev));
    uint64_t *ws_cur = calloc(t->n_ranges + 1, sizeof(*ws_cur));
    int *by_name = malloc(((size_t)p->n_ops + 1) * sizeof(*by_name));
    struct live lv = {0};
    lv.cap = 64;
    while (lv.cap < 2 * n + 2)
        lv.cap *= 2;
    lv.slot = calloc(lv.cap, sizeof(*lv.slot));
    if (!w.ord || !w.freed_by || !w.alloc_of || !w.pos_of || !w.wh || !tens || !live_dev ||
        !ws_cur || !lv.slot || !by_name) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < p->n_ops; k++)
        by_name[k] = k;
    sort_prof = p;
    sort_n(by_name, (size_t)p->n_ops, sizeof(*by_name), cmp_op_name);
    sort_prof = NULL;
    for (size_t i = 0; i < n; i++)
        w.ord[i] = &t->mems[i];
    sort_n(w.ord, n, sizeof(*w.ord), cmp_mem_time);
    for (size_t i = 0; i < n; i++) {
        w.freed_by[i] = -1;
        w.alloc_of[i] = -1;
        w.pos_of[w.ord[i] - t->mems] = i;
        w.wh[i] = locate(c, w.ord[i]->corr, w.ord[i]->t);
    }

    pair_releases(t, sum, &w, &lv, live_dev);
    workspaces(c, p, &w, ws_cur);
    size_t ntens = classify_allocations(c, p, sum, &w, by_name, ref_step, tens);
    op_outputs(t, p, &w, ref_step);
    rc = saved_tensors(p, tens, ntens, err);
    if (rc)
        goto done;
    /* devices in ordinal order, whatever order the trace named them in */
    for (int i = 1; i < sum->n_devices; i++)
        for (int j = i; j > 0 && sum->devices[j - 1].id > sum->devices[j].id; j--) {
            struct mpress_trace_device d = sum->devices[j];
            sum->devices[j] = sum->devices[j - 1];
            sum->devices[j - 1] = d;
        }
    rc = 0;
done:
    free(w.ord);
    free(w.freed_by);
    free(w.alloc_of);
    free(w.pos_of);
    free(w.wh);
    free(tens);
    free(live_dev);
    free(ws_cur);
    free(lv.slot);
    free(by_name);
    return rc;
}

int mpress_trace_merge_memory(struct mpress_profile *timing, const struct mpress_profile *mem,
                              struct mpress_error *err)
{
    if (timing->n_ops != mem->n_ops)
        return mpress_error_set(err, MPRESS_EINPUT,
                                "the memory pass has %d ops and the timing pass %d: the program "
                                "did not run the same ops in both",
                                mem->n_ops, timing->n_ops);
    for (int k = 0; k < timing->n_ops; k++)
        if (strcmp(timing->ops[k].name, mem->ops[k].name) != 0)
            return mpress_error_set(err, MPRESS_EINPUT,
                                    "op %d is '%s' in the timing pass and '%s' in the memory "
                                    "pass",
                                    k, timing->ops[k].name, mem->ops[k].name);
    for (int k = 0; k < timing->n_ops; k++) {
        struct mpress_op *to = &timing->ops[k];
        const struct mpress_op *mo = &mem->ops[k];
        struct mpress_saved_tensor *nt = NULL;
        if (mo->n_tensors > 0) {
            nt = calloc((size_t)mo->n_tensors, sizeof(*nt));
            if (!nt)
                return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
            memcpy(nt, mo->tensors, (size_t)mo->n_tensors * sizeof(*nt));
            for (int i = 0; i < mo->n_tensors; i++)
                nt[i].recompute_s = timing->ops[nt[i].recompute_op].fwd_s;
        }
        free(to->tensors);
        to->tensors = nt;
        to->n_tensors = mo->n_tensors;
        to->params = mo->params;
        to->param_bytes = mo->param_bytes;
        to->grad_bytes = mo->grad_bytes;
        to->optim_bytes = mo->optim_bytes;
        to->workspace_bytes = mo->workspace_bytes;
        to->output_bytes = mo->output_bytes;
    }
    return 0;
}
