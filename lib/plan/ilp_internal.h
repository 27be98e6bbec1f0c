/* What the files of the planner's MILP share (lib/plan/ilp_*.c): the LP builder (ilp_lp.c),
 * the instance the MILP sees (ilp_instance.c), the formulation (ilp_form.c, which states it as
 * mathematics), the symmetry cut (ilp_sym.c), the warm start (ilp_warm.c) and the solve with
 * the mapping of its solution back to a plan (ilp_solve.c, ilp_extract.c). Private to
 * lib/plan. */
#ifndef MPRESS_PLAN_ILP_INTERNAL_H
#define MPRESS_PLAN_ILP_INTERNAL_H

#include <glpk.h>
#include <stdatomic.h>

#include "plan_internal.h"

/* Units inside the MILP: bytes in GB (1e9) and seconds, so that coefficients of a row such as
 * "cycle x bandwidth >= bytes" stay within a few orders of magnitude of each other. */
#define GB 1e9

/* ---- LP builder (ilp_lp.c) ------------------------------------------------------------ */

struct row {
    int n, cap;
    int *ind;     /* 1-based for GLPK: ind[1..n] */
    double *val;
    double constant;
    int *pos;     /* column -> position in this row, 0 when absent */
};

/* A GLPK problem built one row at a time; fail is set when memory runs out and every later
 * call is then a no-op. */
struct model {
    glp_prob *lp;
    int ncols;
    struct row r;
    int *pos;
    int pos_cap;
    int fail;
};

/* A new column; kind GLP_BV ignores the bounds, ub < 0 means no upper bound. */
int ilp_col_new(struct model *m, const char *name, int kind, double lb, double ub, double obj);
void ilp_row_begin(struct model *m);
/* Adds coef x col to the open row (merging repeats); col <= 0 is ignored. */
void ilp_row_add(struct model *m, int col, double coef);
/* Adds the row  sum + constant  (type)  bound;  GLP_LO: >= lo, GLP_UP: <= up, GLP_FX: = lo. */
void ilp_row_end(struct model *m, const char *name, int type, double bound);
/* Formats a row or column name (up to 64 bytes) from up to three indices. */
void ilp_name(char *buf, const char *fmt, int a, int b, int d);
/* Frees the builder's buffers (not the GLPK problem). */
void ilp_model_finish(struct model *m);

/* ---- instance (ilp_instance.c) -------------------------------------------------------- */

struct block {
    int first, last;
    double t, tf, opt_touch; /* fwd + bwd s, fwd s */
    double p, g, o, a, w, x; /* GB */
    double gp;               /* gradient + weight GB (host optimizer transfer) */
};

struct tclass {
    int op, tensor;          /* a representative */
    double s, r;             /* GB, seconds */
};

struct inst {
    int N, B, C, M;
    struct block *blk;
    int NR;                  /* runs of identical consecutive blocks */
    int *run_first, *run_len;
    struct tclass *cls;
    int *cnt;                /* cnt[b * C + c] */
    int *tcls;               /* class of each saved tensor (flat) */
    int mapped;              /* x decided by the MILP */
    int host_opt, d2d;
    /* The tied word embedding (plan_tied_find): the runs of the owner's and the copy's blocks
     * (runs of one block) and the copy's weight, gradient and optimizer GB. */
    int tied, tied_ro, tied_rc;
    double tied_p, tied_g, tied_o;
    /* xcls[r * C + c]: how many tensors of class c a block of run r holds whose recompute_op
     * lies before the block (the most over the run's blocks); recomputed where the block
     * opens a stage, such a tensor is held like a kept tensor (plan_stage_input), so the
     * MILP's held rows never recompute it there (ilp_form.c) and the extraction gives it a
     * kept or swapped place first (ilp_extract.c). NULL when none. */
    unsigned char *xcls;
    /* ILP_BRANCH_HOST_FIRST: branch on the optimizer placement first however many slots there
     * are, without the cycle's floor (ilp_plan_run; ilp_host_first explains). */
    int branch;
    /* ILP_SOCKET_FREE on a fixed mapping with host optimizers on several sockets: the MILP
     * chooses each slot's socket (sk_kq), as many slots to a socket as it has GPUs. */
    int sock_free;
    int n_sockets, socket_of[MPRESS_MAX_GPUS]; /* sock_free: the server's sockets, each GPU's */
};

/* Whether the MILP decides the mapping on topo (not NVSwitch, several GPUs: inst.mapped), and
 * whether optimizer states may go to the host (inst.host_opt). */
int ilp_mapped(const struct mpress_topology *topo);
int ilp_host_opt(const struct mpress_topology *topo);
int ilp_inst_build(const struct mpress_profile *p, const struct mpress_topology *topo,
                   const struct mpress_plan_options *o, struct inst *in,
                   struct mpress_error *err);
void ilp_inst_free(struct inst *in);

/* The first block of run r. */
#define RB(r) (in->blk[in->run_first[(r)]])

/* ---- formulation (ilp_form.c) --------------------------------------------------------- */

/* Column indices of the model, 0 where a variable does not exist. */
struct cols {
    int *w, *f, *ct; /* [k][run]: blocks of the run in slots <= k, run begun, run in slot k */
    int *x, *h, *R, *H, *D, *e, *C, *ws, *ov, *oh, *ot, *hp;
    int *bnd, *fl; /* [k][a][b] */
    int *ots;      /* [k][socket] */
    int *sk;       /* [k][socket]: slot k's host step runs on the socket (sock_free) */
    int T, TT;
    int *tx, *tsh;    /* [k]: slot k holds one side of the tied matrix / both (continuous) */
    int *dr, *fi;     /* [k]: slot k's drain and fill seconds (the tail rows' slack) */
    int *pt;          /* [k][socket]: host step touch of slots 0..k on the socket */
    int XE;           /* seconds the tied matrix's gradient exchange takes (0: no column) */
    int *st;          /* [k][run]: slot k opens with run r (held stage inputs) */
    int *lm;          /* [run]: the most blocks of the run in one slot (0: no column) */
};

#define IX2(k, i, n) ((k) * (n) + (i))
#define IX3(k, a, b, n) (((k) * (n) + (a)) * (n) + (b))

/* How the search treats in (ilp_form.c explains why): where the MILP fixes the mapping and
 * decides where at most ILP_HOST_FIRST_MAX slots keep their optimizer states, branch and bound
 * branches on that placement first (ilp_host_first); where it decides it for more slots, the
 * cycle's floor (ilp_cycle_floor) is T's lower bound (ilp_floor_on). */
#define ILP_HOST_FIRST_MAX 8
#define ILP_BRANCH_HOST_FIRST 1
/* The search is the mapping-free bound's (ilp_relax.c): only its bound counts, so no search
 * for plans before branch and bound (the placement search). */
#define ILP_BOUND_ONLY 2
/* Without the most-blocks column (tests/plan/test_most.c compares the MILP without it). */
#define ILP_NO_MOST 4
/* The mapping fixed to the one ilp_map_search finds from a guide's partition (plan_second_search
 * gives the guide), and the placement branched on first as where the mapping is fixed. */
#define ILP_MAP_SEARCH 8
/* The first of the three searches on a direct fabric with host optimizers on several sockets
 * (plan_first_search, ilp_relax.c, explains): the search before branch and bound within half
 * its nodes, branch and bound within 500 nodes of the node limit (a tenth of it past 5000),
 * and no local search after it. */
#define ILP_FIRST_SHORT 16
/* ... and where its gap is still above ILP_FIRST_FAR after ILP_FIRST_LOOK nodes of branch and
 * bound, it stops there: on the planner matrix's dgx1 cases the gap at 200 nodes is at most
 * 6.8 % on six (four of which this search closes within its 500 nodes) and at least 17 % on
 * the other two, which 300 more nodes leave as wide (docs/benchmarks.md, "The first search
 * gives up early"). */
#define ILP_FIRST_LOOK 200
#define ILP_FIRST_FAR 0.12
/* The relaxed server with the real one's sockets (plan_topology_relax_sockets): the MILP
 * chooses each slot's socket (inst.sock_free; ilp_relax.c explains). */
#define ILP_SOCKET_FREE 32
int ilp_host_first(const struct inst *in);
int ilp_floor_on(const struct inst *in);
int ilp_lm_on(const struct inst *in);
/* The least largest stage time (fwd + bwd of its blocks) of any cut of the blocks into at most
 * N contiguous stages, from below: no plan's cycle is shorter. */
double ilp_cycle_floor(const struct inst *in);

/* Adds the columns and rows of the MILP for in to m; -1 when memory runs out. */
int ilp_build(struct model *m, const struct inst *in, const struct mpress_topology *topo,
              enum mpress_schedule sched, struct cols *c);
void ilp_cols_free(struct cols *c);

/* ---- symmetry (ilp_sym.c) ------------------------------------------------------------- */

/* Automorphisms of a direct-fabric server (ilp_sym.c explains which). */
struct sym {
    int n;
    int (*perm)[MPRESS_MAX_GPUS];
};

void ilp_sym_find(const struct mpress_topology *t, struct sym *s);
/* Adds the exact symmetry cut on the last two slots' GPUs. */
void ilp_sym_cut(struct model *m, const struct inst *in, const struct cols *c,
                 const struct sym *s);

/* ---- warm start (ilp_warm.c) ---------------------------------------------------------- */

/* A full column vector (1-based, malloc'd) of lp for assignment a, checked against every row;
 * NULL when a does not fit the MILP's decision space or the vector would be infeasible.
 * layout (when not NULL) gets a's partition and mapping columns alone, every other column 0,
 * whenever a fits the decision space (NULL otherwise). */
double *ilp_warm_vector(glp_prob *lp, const struct inst *in, const struct cols *c,
                        const struct mpress_profile *p, const struct mpress_assignment *a,
                        const struct sym *s, double **layout);

/* The most memory-saving actions on the baselines' even partition: every saved tensor
 * recomputed (which frees as much of the stage's GPU as a swap, and costs no host or peer
 * memory), and every optimizer on the host or none, whichever leaves the smaller shortfall
 * (*host_opt says which). 0 with the assignment in out and its evaluation in ev; 1 on an
 * error (out left empty). */
int ilp_most_saving(const struct mpress_profile *p, const struct mpress_topology *topo,
                    const struct mpress_plan_options *o, struct mpress_assignment *out,
                    struct mpress_plan_eval *ev, int *host_opt);

/* A start for a search that has none: the greedy baseline planned for M/2, M/4, ..., 1
 * micro-batches (o->micro_batches = M) and evaluated at M, the first that fits (with 1F1B a
 * stage holds min(S - k, M) micro-batches, so fewer micro-batches than M often give greedy the
 * time trade-offs of a plan that still fits at M); else the most memory-saving assignment
 * (ilp_most_saving) if it fits. 0 and the start in out when one fits; 1 when none does or on
 * an error (out left empty). */
int ilp_warm_find(const struct mpress_profile *p, const struct mpress_topology *topo,
                  const struct mpress_plan_options *o, struct mpress_assignment *out);

/* Checks x (1-based column values) against every row of lp, with a tolerance relative to the
 * terms' magnitudes. */
int ilp_vector_feasible(glp_prob *lp, const double *x);

/* ---- local search (ilp_lns.c) --------------------------------------------------------- */

/* The objective of lp at the (1-based) column values x. */
double ilp_objective(glp_prob *lp, const double *x);

/* Node budgets of the local search: all of it, the warm start's own partition, each search
 * within box_delta blocks of the best partition (at most box_rounds of them). */
struct ilp_ls_budget {
    long nodes, first_nodes, box_nodes, map_nodes;
    int box_delta, box_max, box_rounds;
    int dive; /* 1: the restricted MILPs search depth first, else by best local bound */
};

struct ilp_ls_stats {
    int solves, moves; /* restricted MILPs solved; re-centrings on a faster plan */
    long nodes;
    double start, found; /* MILP objectives of the start and of the best plan found */
};

/* The restricted MILPs around start (a solution of lp, or only its partition and mapping
 * columns): its partition, then every stage boundary within box_delta blocks of the best
 * (ilp_lns.c explains). The best plan found when it is faster than both start and `beat` (a
 * checked malloc'd vector), else NULL. */
double *ilp_local_search(glp_prob *lp, const struct inst *in, const struct cols *c,
                         const double *start, double beat, const struct ilp_ls_budget *bud,
                         struct ilp_ls_stats *st);

/* Where optimizer states may go to the host (ilp_lns.c explains): on start's partition and
 * mapping, the placement whose relaxation is least (thresholds, then single flips), then relax
 * and fix on it, slot by slot within per_slot nodes and `nodes` in all. The best plan (start
 * completed when nothing beats it; NULL when start is not a solution); st->nodes the nodes. */
double *ilp_placement_search(glp_prob *lp, const struct inst *in, const struct cols *c,
                             const double *start, long nodes, long per_slot,
                             struct ilp_ls_stats *st);

/* On a decided mapping with host optimizers (ilp_lns.c explains): from layout's partition and
 * mapping, the partition and mapping whose relaxation is least over the optimizer placements
 * tried (thresholds, then flips; then, in turn, rounds of exchanges of two slots' GPUs and
 * rounds of blocks passed between slots, steepest first, each move followed by flips), within
 * `lps` LP solves. The mapping in map ([slot] = GPU), the placement in hb, the partition in u
 * (blocks in slots 0..k) and its value (HUGE_VAL when no relaxation has an optimum). */
double ilp_map_search(glp_prob *lp, const struct inst *in, const struct cols *c,
                      const double *layout, long lps, int *map, int *hb, int *u);
/* A plan on partition u with the mapping map and the optimizer placement h (layout's other
 * columns as a guide): relax and fix, slot by slot within per_slot nodes and `nodes` in all
 * (*used: the nodes taken). The plan as a checked vector of lp (malloc'd), or NULL. */
double *ilp_map_start(glp_prob *lp, const struct inst *in, const struct cols *c,
                      const double *layout, const int *u, const int *map, const int *h,
                      long per_slot, long nodes, long *used);
/* Fixes every mapping column of lp to the permutation map (slot k on GPU map[k]). */
void ilp_fix_map(glp_prob *lp, const struct inst *in, const struct cols *c, const int *map);

/* ---- solution to assignment (ilp_extract.c) ------------------------------------------ */

/* The solution x (1-based column values) of in's MILP as an assignment in a (initialised for
 * p); -1 when it does not map back (memory, or D2D bytes that do not fit their peers). */
int ilp_extract(const struct mpress_profile *p, const struct mpress_topology *topo,
                const struct inst *in, const struct cols *c, const double *x,
                struct mpress_assignment *a);

/* mpress_plan_ilp with the branching rule `branch` (flags ILP_*); guide: the assignment whose
 * partition ILP_MAP_SEARCH searches on (else NULL). ilp_solve.c; the second searches
 * (ilp_relax.c) run it with other flags. */
int ilp_plan_run(const struct mpress_profile *p, const struct mpress_topology *topo,
                 const struct mpress_plan_options *o, int branch,
                 const struct mpress_assignment *guide, struct mpress_assignment *out,
                 struct mpress_plan_solver *stats, struct mpress_error *err);

/* Whether any plan of topo is faster than cutoff s: branch and bound on the MILP (with
 * `branch`, as ilp_plan_run) with the row "iteration time <= cutoff" and no start, for a bound
 * only (stats: bound, nodes, status "cut_off" where the tree proved it; ilp_solve.c,
 * solve_cutoff). */
int ilp_plan_cutoff(const struct mpress_profile *p, const struct mpress_topology *topo,
                    const struct mpress_plan_options *o, int branch, double cutoff,
                    struct mpress_plan_solver *stats, struct mpress_error *err);

/* ---- the certificate search (ilp_solve.c, ilp_cutoff.c) --------------------------------- */

/* How a certificate search's tree (or one of its subtrees) ended: no plan below the cutoff,
 * its best plan below it, at its node limit, at its time limit; ilp_cut_status names them
 * as stats->status does. */
enum { ILP_CUT_OFF, ILP_CUT_PLAN, ILP_CUT_NODES, ILP_CUT_TIME };
extern const char *const ilp_cut_status[];

/* One subtree's branch and bound. In: tm_lim_s (> 0: its time limit), work and work_limit
 * (it adds its nodes to *work as it goes and stops once *work passes work_limit). Out: nodes,
 * kind (ILP_CUT_*), bound (on its tree's plans). */
struct ilp_leaf_run {
    double tm_lim_s;
    atomic_long *work;
    long work_limit;
    long nodes;
    int kind;
    double bound;
};

/* The certificate search's outcome after glp_intopt returned ret on lp (root_bound: its
 * relaxation; cb_bound: the least bound of its open nodes): the bound on the plans of lp's
 * tree into *bound, and its kind (ILP_CUT_*). ilp_cutoff.c. */
int ilp_cutoff_outcome(glp_prob *lp, int ret, double root_bound, double cb_bound,
                       double cutoff, double mip_gap, double *bound);

/* Below this node limit the certificate search is one tree (ilp_solve.c, solve_cutoff). */
#define ILP_CUT_SPLIT_MIN 1000
/* The threads searching the subtrees: 0 (the default) as many as the machine has CPUs, at
 * most 8; n > 0 that many (the outcome is the same for every count); -1 none, the one tree
 * searched instead. For tests. */
extern int ilp_cutoff_threads;

/* The column branching takes first on lp's relaxation (ilp_solve.c, branch_partition_first):
 * the lowest rank of `first` (NULL: none ranked) with a fractional column, the most
 * fractional of that rank, the lowest column on a tie; with unranked, the most fractional of
 * the other integer columns after them. Fractional: as tree can branch on (glp_ios_can_branch),
 * or without a tree by 1e-9. 0 when there is none. */
int ilp_first_column(glp_prob *lp, glp_tree *tree, const unsigned char *first, int unranked);

/* Adds to lp the row "objective (without its constant) <= cutoff less the constant", named
 * "cutoff": only plans faster than cutoff remain. 0, or -1 when memory runs out (ilp_lns.c). */
int ilp_cutoff_row(glp_prob *lp, double cutoff);

/* Solves lp's relaxation (the attempts: ilp_solve.c): GLP_OPT, or the last attempt's status. */
int ilp_root_relaxation(glp_prob *lp);

/* Branch and bound on lp (with its cutoff row; its relaxation is solved first) as the
 * certificate search runs it, first ranks in first (as ilp_solve.c branches), within r's
 * limits: 0, or -1 where its relaxation has no optimum or GLPK fails (ilp_solve.c). */
int ilp_cutoff_bb(glp_prob *lp, const struct inst *in, const unsigned char *first, double cutoff,
                  const struct mpress_plan_options *o, struct ilp_leaf_run *r);

/* The certificate search on lp (with its cutoff row, its relaxation solved) as subtrees
 * searched side by side (ilp_cutoff.c): 0 with stats' status, bound and nodes when they end
 * within the node limit together (or at the time limit); 1 when its root cannot be split or
 * they pass the node limit (stats->nodes: the limit), and the caller searches the one tree;
 * -1 when memory runs out. */
int ilp_cutoff_split(glp_prob *lp, const struct inst *in, const unsigned char *first,
                     double cutoff, const struct mpress_plan_options *o,
                     struct mpress_plan_solver *stats);

/* Depth-first branch and bound on the whole of lp (no columns fixed, no cut-off) within
 * `nodes` nodes, and at most `after` nodes past its first integer plan, branching by pseudo
 * costs (pch) or Driebeck-Tomlin: the best plan it finds as a checked vector of lp, or NULL;
 * *used: the nodes it took; *none: 1 when it searched the whole tree and found that no plan
 * exists. For a first plan where the best-bound search found none and no baseline fits. */
double *ilp_dive(glp_prob *lp, const struct inst *in, long nodes, long after, int pch,
                 long *used, int *none);

#endif
