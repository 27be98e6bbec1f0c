/* The certificate search's tree as subtrees searched side by side (docs/cost-model.md, "The
 * certificate search"). Its tree proves that no plan is faster than the cutoff by searching
 * every node whose relaxation is below it; which nodes those are hardly depends on the order
 * they are searched in, so the tree can be cut near its root into subtrees that threads search
 * independently. On gpt-20b on dgx1 at 32 micro-batches the one tree takes 2,255 nodes, and
 * the split and its 16 subtrees 2,279 in all (docs/benchmarks.md, "The certificate search's
 * subtrees").
 *
 * Deterministic: the subtrees come from a fixed rule (split the subtree of least relaxation on
 * the column ilp_solve.c would branch on first), each is searched to its end in a fresh copy
 * of its own, and whether they end within the node limit together does not depend on the
 * order they ran in. Where they do not, the one tree is searched as before (ilp_solve.c), so
 * that the bound at a node limit is the best-bound search's rather than that of subtrees cut
 * short. Only the time limit, the user's cap on the wall clock, makes the outcome depend on
 * the machine. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "ilp_internal.h"

/* Subtrees cut from the root, and threads at most. */
#define CUT_LEAVES 16
#define CUT_WORKERS_MAX 8

int ilp_cutoff_threads = 0;

struct leaf {
    glp_prob *lp; /* the subtree's problem (the caller's GLPK environment), relaxation solved */
    double z;     /* its relaxation */
    int order;    /* when it was made: the tie-break of equal relaxations */
    int whole;    /* no column to split on */
    int state;    /* 0: waiting, 1: searched, 2: not searched (the limits were reached) */
    int failed;   /* GLPK failed inside, or its relaxation had no optimum */
    struct ilp_leaf_run r;
};

struct pool {
    struct leaf *lv;
    int n, next, finished;
    const struct inst *in;
    const unsigned char *first;
    double cutoff, deadline; /* deadline: monotonic seconds, 0 for none */
    const struct mpress_plan_options *o;
    long budget;
    atomic_long work; /* the nodes of all subtrees so far */
    int timed_out;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

const char *const ilp_cut_status[] = {"cut_off", "optimal", "node_limit", "time_limit"};

int ilp_cutoff_outcome(glp_prob *lp, int ret, double root_bound, double cb_bound,
                       double cutoff, double mip_gap, double *bound)
{
    int status = glp_mip_status(lp);
    if (ret == 0 && status == GLP_NOFEAS) {
        *bound = cutoff;
        return ILP_CUT_OFF;
    }
    if (ret == 0 && status == GLP_OPT) {
        *bound = glp_mip_obj_val(lp);
        return ILP_CUT_PLAN;
    }
    *bound = fmin(fmax(root_bound, cb_bound), cutoff);
    if (status == GLP_FEAS) {
        double z = glp_mip_obj_val(lp);
        if (ret == GLP_EMIPGAP) /* within mip_gap of its plan below the cutoff */
            *bound = fmax(*bound, z * (1 - mip_gap));
        *bound = fmin(*bound, z);
    }
    return ret == GLP_ETMLIM ? ILP_CUT_TIME : ILP_CUT_NODES;
}

/* Column j of lp bounded to [lb, ub] (either may be infinite). */
static void set_bounds(glp_prob *lp, int j, double lb, double ub)
{
    int lo = lb > -HUGE_VAL, hi = ub < HUGE_VAL;
    int type = lo && hi ? (lb == ub ? GLP_FX : GLP_DB) : lo ? GLP_LO : hi ? GLP_UP : GLP_FR;
    glp_set_col_bnds(lp, j, type, lo ? lb : 0, hi ? ub : 0);
}

static double col_lb(glp_prob *lp, int j)
{
    int t = glp_get_col_type(lp, j);
    return t == GLP_FR || t == GLP_UP ? -HUGE_VAL : glp_get_col_lb(lp, j);
}

static double col_ub(glp_prob *lp, int j)
{
    int t = glp_get_col_type(lp, j);
    return t == GLP_FR || t == GLP_LO ? HUGE_VAL : glp_get_col_ub(lp, j);
}

static int by_bound(const void *a, const void *b)
{
    const struct leaf *x = a, *y = b;
    if (x->z != y->z)
        return x->z < y->z ? -1 : 1;
    return x->order - y->order;
}

/* Cuts lp's tree into at most CUT_LEAVES subtrees whose relaxations are below the cutoff,
 * splitting the one of least relaxation each time; their problems into lv (sorted by
 * relaxation), their count into *n, the nodes solved into *nodes. 0, or 1 where a relaxation
 * ends without an optimum or infeasibility (the caller searches one tree). */
static int split(glp_prob *lp, const unsigned char *first, double cutoff, struct leaf *lv,
                 int *n, long *nodes)
{
    int made = 0;
    *n = 0;
    *nodes = 1;
    lv[0] = (struct leaf){.lp = glp_create_prob(), .z = glp_get_obj_val(lp), .order = made++};
    glp_copy_prob(lv[0].lp, lp, GLP_OFF);
    *n = 1;
    for (int tries = 0; *n < CUT_LEAVES && tries < 4 * CUT_LEAVES; tries++) {
        int lo = -1;
        for (int i = 0; i < *n; i++)
            if (!lv[i].whole && (lo < 0 || lv[i].z < lv[lo].z))
                lo = i;
        if (lo < 0)
            break;
        glp_prob *a = lv[lo].lp;
        int j = ilp_first_column(a, NULL, first, 1);
        if (!j) {
            lv[lo].whole = 1;
            continue;
        }
        double v = glp_get_col_prim(a, j);
        glp_prob *b = glp_create_prob();
        glp_copy_prob(b, a, GLP_OFF);
        set_bounds(a, j, col_lb(a, j), floor(v));
        set_bounds(b, j, ceil(v), col_ub(b, j));
        lv[*n] = (struct leaf){.lp = b, .order = made++};
        (*n)++;
        int slot[2] = {lo, *n - 1};
        for (int c = 0; c < 2; c++) {
            struct leaf *l = &lv[slot[c]];
            int st = ilp_root_relaxation(l->lp);
            *nodes += 1;
            if (st != GLP_OPT && st != GLP_NOFEAS)
                return 1;
            l->z = st == GLP_OPT ? glp_get_obj_val(l->lp) : HUGE_VAL;
        }
        /* Subtrees whose relaxation is infeasible or not below the cutoff hold no plan faster
         * than it. */
        int keep = 0;
        for (int i = 0; i < *n; i++) {
            if (lv[i].z < cutoff)
                lv[keep++] = lv[i];
            else
                glp_delete_prob(lv[i].lp);
        }
        *n = keep;
    }
    qsort(lv, (size_t)*n, sizeof(*lv), by_bound);
    return 0;
}

/* Subtree i searched on a copy made in the calling thread's GLPK environment. */
static void search_leaf(struct pool *pl, int i, double tm_lim_s)
{
    struct leaf *l = &pl->lv[i];
    l->r = (struct ilp_leaf_run){.tm_lim_s = tm_lim_s, .work = &pl->work,
                                 .work_limit = pl->budget};
    glp_prob *cp = glp_create_prob();
    glp_copy_prob(cp, l->lp, GLP_OFF);
    l->failed = ilp_cutoff_bb(cp, pl->in, pl->first, pl->cutoff, pl->o, &l->r) != 0;
    glp_delete_prob(cp);
}

struct worker {
    struct pool *pl;
    int thread; /* on a thread (a GLPK environment) of its own */
    int cur;    /* the subtree it searches */
    jmp_buf jump;
};

static void worker_error(void *info)
{
    longjmp(((struct worker *)info)->jump, 1);
}

static int worker_term(void *info, const char *s)
{
    (void)info, (void)s;
    return 1;
}

/* Subtree i searched by w; on a thread of its own inside its own guard: where GLPK fails
 * inside, the thread's environment goes with the copy and the subtree counts as failed. */
static void guarded_search(struct worker *w, int i, double tm)
{
    struct pool *pl = w->pl;
    w->cur = i;
    if (w->thread) {
        glp_term_hook(worker_term, NULL);
        glp_error_hook(worker_error, w);
        if (setjmp(w->jump)) {
            glp_free_env();
            pl->lv[w->cur].failed = 1;
            return;
        }
    }
    search_leaf(pl, i, tm);
}

/* Takes the subtrees in order, with the time left, until none is left or the nodes of all
 * of them together pass the node limit. */
static void *work(void *arg)
{
    struct worker *w = arg;
    struct pool *pl = w->pl;
    for (;;) {
        pthread_mutex_lock(&pl->mu);
        int i = pl->next < pl->n ? pl->next++ : -1;
        double tm = 0;
        if (i >= 0 && pl->deadline > 0) {
            tm = pl->deadline - now_s();
            if (tm <= 0)
                pl->timed_out = 1;
        }
        int skip = i >= 0 && (atomic_load(&pl->work) > pl->budget || pl->timed_out);
        if (skip) {
            pl->lv[i].state = 2;
            pl->finished++;
            pthread_cond_signal(&pl->cv);
        }
        pthread_mutex_unlock(&pl->mu);
        if (i < 0)
            break;
        if (skip)
            continue;
        guarded_search(w, i, tm);
        pthread_mutex_lock(&pl->mu);
        pl->lv[i].state = 1;
        pl->finished++;
        if (!pl->lv[i].failed && pl->lv[i].r.kind == ILP_CUT_TIME)
            pl->timed_out = 1;
        pthread_cond_signal(&pl->cv);
        pthread_mutex_unlock(&pl->mu);
    }
    if (w->thread)
        glp_free_env();
    return NULL;
}

/* The least bound of the subtrees: searched ones' own, the rest their relaxation's. */
static double pool_bound(const struct pool *pl)
{
    double b = pl->cutoff;
    for (int i = 0; i < pl->n; i++) {
        const struct leaf *l = &pl->lv[i];
        b = fmin(b, l->state == 1 && !l->failed ? l->r.bound : l->z);
    }
    return b;
}

/* The subtrees searched by up to CUT_WORKERS_MAX threads (as many as the machine has CPUs;
 * none where GLPK shares one environment among threads), the caller reporting progress. */
static void run_pool(struct pool *pl)
{
    long cpus = ilp_cutoff_threads > 0 ? ilp_cutoff_threads : sysconf(_SC_NPROCESSORS_ONLN);
    int nw = glp_config("TLS") == NULL ? 0
             : cpus < 1               ? 1
             : cpus > CUT_WORKERS_MAX ? CUT_WORKERS_MAX
                                      : (int)cpus;
    struct worker w[CUT_WORKERS_MAX];
    pthread_t th[CUT_WORKERS_MAX];
    int started = 0;
    for (int k = 0; k < nw; k++) {
        w[started] = (struct worker){.pl = pl, .thread = 1};
        if (pthread_create(&th[started], NULL, work, &w[started]) == 0)
            started++;
    }
    if (!started) {
        struct worker self = {.pl = pl};
        work(&self);
        return;
    }
    pthread_mutex_lock(&pl->mu);
    for (int seen = 0; pl->finished < pl->n;) {
        pthread_cond_wait(&pl->cv, &pl->mu);
        if (pl->o->progress && pl->finished > seen) {
            seen = pl->finished;
            double b = pool_bound(pl);
            pthread_mutex_unlock(&pl->mu);
            pl->o->progress(pl->o->progress_ctx, -1, b, 1.0);
            pthread_mutex_lock(&pl->mu);
        }
    }
    pthread_mutex_unlock(&pl->mu);
    for (int k = 0; k < started; k++)
        pthread_join(th[k], NULL);
}

int ilp_cutoff_split(glp_prob *lp, const struct inst *in, const unsigned char *first,
                     double cutoff, const struct mpress_plan_options *o,
                     struct mpress_plan_solver *stats)
{
    if (ilp_cutoff_threads < 0)
        return 1;
    struct leaf *lv = calloc(CUT_LEAVES, sizeof(*lv));
    if (!lv)
        return -1;
    int n = 0;
    long split_nodes = 0;
    int rc = split(lp, first, cutoff, lv, &n, &split_nodes);
    if (rc || n == 1) {
        /* Nothing to share (or a relaxation went wrong): the one tree as before. */
        for (int i = 0; i < n; i++)
            glp_delete_prob(lv[i].lp);
        free(lv);
        return 1;
    }
    long limit = o->node_limit > 0 ? o->node_limit : LONG_MAX;
    struct pool pl = {.lv = lv, .n = n, .in = in, .first = first, .cutoff = cutoff, .o = o,
                      .budget = limit > split_nodes ? limit - split_nodes : 0,
                      .deadline = o->time_limit_s > 0 ? now_s() + o->time_limit_s : 0};
    atomic_init(&pl.work, 0);
    pthread_mutex_init(&pl.mu, NULL);
    pthread_cond_init(&pl.cv, NULL);
    run_pool(&pl);
    pthread_cond_destroy(&pl.cv);
    pthread_mutex_destroy(&pl.mu);
    for (int i = 0; i < n; i++)
        glp_delete_prob(lv[i].lp);
    /* Past the node limit together (which happens or not whatever the order the subtrees
     * ran in): the one tree decides, as where there is no split. */
    if (atomic_load(&pl.work) > pl.budget && !pl.timed_out) {
        free(lv);
        stats->nodes = limit;
        return 1;
    }
    long used = split_nodes;
    double bound = cutoff;
    int kind = ILP_CUT_OFF;
    for (int i = 0; i < n; i++) {
        const struct leaf *l = &lv[i];
        if (l->state != 1 || l->failed) {
            /* not searched (the time limit), or GLPK failed on it: its relaxation's bound */
            bound = fmin(bound, l->z);
            kind = pl.timed_out ? ILP_CUT_TIME : kind > ILP_CUT_NODES ? kind : ILP_CUT_NODES;
            continue;
        }
        used += l->r.nodes;
        bound = fmin(bound, l->r.bound);
        kind = l->r.kind > kind ? l->r.kind : kind;
    }
    free(lv);
    stats->nodes = used;
    stats->bound = kind == ILP_CUT_OFF ? cutoff : bound;
    snprintf(stats->status, sizeof(stats->status), "%s", ilp_cut_status[kind]);
    return 0;
}
