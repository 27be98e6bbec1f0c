/* PipeDream graph import: the real GNMT profile (tests/data/pipedream) read here independently
 * with a plain scan of its lines, then compared with the importer's graph and profile; and bad
 * files rejected with their line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "mpress/model.h"

#define MAXN 256

struct ref {
    int n_nodes, n_edges;
    char id[MAXN][32];
    double fwd[MAXN], bwd[MAXN], act[MAXN], par[MAXN];
    int src[4 * MAXN], dst[4 * MAXN];
};

static int ref_find(const struct ref *r, const char *id)
{
    for (int i = 0; i < r->n_nodes; i++)
        if (strcmp(r->id[i], id) == 0)
            return i;
    return -1;
}

static double value_after(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    if (!p)
        return -1;
    p += strlen(key);
    if (*p != '[')
        return atof(p);
    double sum = 0; /* "[a; b; c]" */
    for (p++; *p && *p != ']';) {
        sum += strtod(p, (char **)&p);
        while (*p == ';' || *p == ' ')
            p++;
    }
    return sum;
}

/* Independent reading: node lines start with their id, edges with a TAB. */
static int ref_load(const char *file, struct ref *r)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return -1;
    char line[4096];
    memset(r, 0, sizeof(*r));
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '\t') {
            char a[32], b[32];
            if (sscanf(line, " %31s -- %31s", a, b) == 2) {
                r->src[r->n_edges] = ref_find(r, a);
                r->dst[r->n_edges] = ref_find(r, b);
                r->n_edges++;
            }
        } else if (line[0] != '\n') {
            int i = r->n_nodes++;
            sscanf(line, "%31s", r->id[i]);
            r->fwd[i] = value_after(line, "forward_compute_time=");
            r->bwd[i] = value_after(line, "backward_compute_time=");
            r->act[i] = value_after(line, "activation_size=");
            r->par[i] = value_after(line, "parameter_size=");
        }
    }
    fclose(f);
    return 0;
}

static void test_gnmt(const char *file)
{
    static struct ref r;
    CHECK_INT(ref_load(file, &r), 0);
    CHECK_INT(r.n_nodes, 48);
    CHECK_INT(r.n_edges, 58);

    struct mpress_pipedream_graph g;
    struct mpress_error err;
    CHECK_INT(mpress_pipedream_load(file, &g, &err), 0);
    CHECK_INT(g.n_nodes, r.n_nodes);
    CHECK_INT(g.n_edges, r.n_edges);
    mpress_pipedream_finish(&g);

    struct mpress_profile p;
    mpress_profile_init(&p);
    CHECK_INT(mpress_profile_import_pipedream(file, &p, &err), 0);
    CHECK_INT(p.n_ops, 48);
    CHECK_STR(p.source, "import");
    CHECK_STR(p.model.name, "gnmt");
    /* every node exactly once; totals equal the file's sums */
    int pos[MAXN];
    for (int i = 0; i < r.n_nodes; i++)
        pos[i] = -1;
    double fwd = 0, bwd = 0, rf = 0, rb = 0, ra = 0, rp = 0;
    uint64_t pbytes = 0;
    for (int k = 0; k < p.n_ops; k++) {
        int i = ref_find(&r, p.ops[k].name);
        CHECK(i >= 0);
        if (i < 0)
            continue;
        CHECK(pos[i] < 0);
        pos[i] = k;
        fwd += p.ops[k].fwd_s;
        bwd += p.ops[k].bwd_s;
        pbytes += p.ops[k].param_bytes;
        CHECK_NEAR(p.ops[k].fwd_s, r.fwd[i] / 1000, 1e-12);
        CHECK_INT(p.ops[k].param_bytes, (uint64_t)r.par[i]);
        CHECK_INT(p.ops[k].params * 4, (uint64_t)r.par[i]);
        uint64_t saved = p.ops[k].n_tensors ? p.ops[k].tensors[0].bytes : 0;
        CHECK_INT(saved, (uint64_t)r.act[i]);
    }
    for (int i = 0; i < r.n_nodes; i++) {
        rf += r.fwd[i];
        rb += r.bwd[i];
        ra += r.act[i];
        rp += r.par[i];
    }
    CHECK_NEAR(fwd, rf / 1000, 1e-12);
    CHECK_NEAR(bwd, rb / 1000, 1e-12);
    CHECK_INT(pbytes, (uint64_t)rp);
    CHECK_INT(mpress_profile_saved_bytes(&p), (uint64_t)ra);
    /* a topological order: every edge goes forward */
    for (int e = 0; e < r.n_edges; e++) {
        CHECK(r.src[e] >= 0 && r.dst[e] >= 0);
        if (r.src[e] >= 0 && r.dst[e] >= 0)
            CHECK_MSG(pos[r.src[e]] < pos[r.dst[e]], "edge %s -> %s", r.id[r.src[e]],
                      r.id[r.dst[e]]);
    }
    /* what a cut after op k sends: each node placed at or before k with a consumer after k,
     * its activation once */
    for (int k = 0; k < p.n_ops; k++) {
        double want = 0;
        for (int i = 0; i < r.n_nodes; i++) {
            if (pos[i] > k)
                continue;
            int crosses = 0;
            for (int e = 0; e < r.n_edges; e++)
                crosses |= r.src[e] == i && pos[r.dst[e]] > k;
            if (crosses)
                want += r.act[i];
        }
        CHECK_MSG(p.ops[k].output_bytes == (uint64_t)want, "cut after %s: %llu, want %.0f",
                  p.ops[k].name, (unsigned long long)p.ops[k].output_bytes, want);
    }
    /* the first LSTM's three outputs (a list in the file) are summed */
    int i7 = ref_find(&r, "node7");
    CHECK(i7 >= 0 && r.act[i7] == 6291456.0 + 131072.0 + 131072.0);
    /* the result is a valid profile */
    char dir[] = "/tmp/mpress-pd-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/g.json", dir);
    CHECK_INT(mpress_profile_save(path, &p, &err), 0);
    struct mpress_profile q;
    mpress_profile_init(&q);
    CHECK_INT(mpress_profile_load(path, &q, &err), 0);
    CHECK_INT(q.n_ops, 48);
    mpress_profile_finish(&q);
    unlink(path);
    rmdir(dir);
    mpress_profile_finish(&p);
}

static void expect_bad(const char *text, int line, const char *what)
{
    char dir[] = "/tmp/mpress-pd-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/bad.txt", dir);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    struct mpress_profile p;
    struct mpress_error err;
    mpress_profile_init(&p);
    CHECK_INT(mpress_profile_import_pipedream(path, &p, &err), MPRESS_EINPUT);
    CHECK_INT(err.line, line);
    CHECK_STR(err.file, path);
    CHECK_MSG(strstr(err.text, what) != NULL, "'%s' lacks '%s'", err.text, what);
    CHECK_INT(p.n_ops, 0);
    unlink(path);
    rmdir(dir);
}

#define N(id, rest) id " -- Linear(4, 4) -- " rest "\n"
#define OK "forward_compute_time=1.0, backward_compute_time=2.0, activation_size=8.0, " \
           "parameter_size=80.000"

static void test_bad(void)
{
    expect_bad(N("node1", OK) N("node2", "forward_compute_time=1.0, activation_size=8.0, "
                                         "backward_compute_time=2.0"),
               2, "missing attribute 'parameter_size'");
    expect_bad(N("node1", OK) N("node2", "forward_compute_time=x, backward_compute_time=2.0, "
                                         "activation_size=8.0, parameter_size=1"),
               2, "bad value of 'forward_compute_time'");
    expect_bad(N("node1", OK) "\tnode1 -- node9\n", 2, "unknown node 'node9'");
    expect_bad(N("node1", OK) N("node2", OK) "\tnode1 -- node2\n\tnode2 -- node1\n", 1,
               "cycle");
    expect_bad(N("node1", OK) N("node1", OK), 2, "defined twice");
    expect_bad(N("node1", "forward_compute_time=1.0, backward_compute_time=2.0, "
                          "activation_size=[1.0; oops], parameter_size=1"),
               1, "activation_size");
    expect_bad(N("node1", OK) "node2 has no separators\n", 2, "expected 'ID -- DESCRIPTION");
    expect_bad(N("node1", OK ", colour=3"), 1, "unknown attribute 'colour'");
    expect_bad("\n\n", 0, "no node lines");
    /* the separators overlap: once read past the end of the line */
    expect_bad("a -- -- b\n", 1, "expected 'ID -- DESCRIPTION");
    expect_bad(N("node1", OK) "node2 -- Lin\xff" "ear -- " OK "\n", 2, "not UTF-8 text");
    expect_bad(N("node1", OK) "node2 -- \xc3\xa9\xc3(x) -- " OK "\n", 2, "not UTF-8 text");
    /* 1025 activations of 9e15 bytes sum past 2^63-1 (9.22e18): refused at the one that does */
    {
        static char big[1100 * 140];
        size_t n = 0;
        for (int i = 0; i < 1100; i++)
            n += (size_t)snprintf(big + n, sizeof(big) - n,
                                  "node%d -- L -- forward_compute_time=1, backward_compute_time=1, "
                                  "activation_size=9e15, parameter_size=0\n",
                                  i);
        expect_bad(big, 1025, "sum to more than 2^63-1 bytes");
    }
    /* the duplicate comes before the syntax error: it is the one reported */
    expect_bad(N("node1", OK) N("node1", OK) "junk\n", 2, "defined twice");
    expect_bad(N("node1", OK) "junk\n" N("node1", OK), 2, "expected 'ID -- DESCRIPTION");
}

/* Long descriptions in two-byte UTF-8 are cut on character boundaries: the profile writes. */
static void test_utf8_cut(void)
{
    char dir[] = "/tmp/mpress-pd-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], out[300];
    snprintf(path, sizeof(path), "%s/u\xe9.txt", dir); /* a Latin-1 file name */
    snprintf(out, sizeof(out), "%s/p.json", dir);
    FILE *f = fopen(path, "w");
    fputs("node1 -- x", f);
    for (int i = 0; i < 300; i++)
        fputs("\xc3\xa9", f); /* U+00E9 */
    fputs(" -- " OK "\n", f);
    fclose(f);
    struct mpress_profile p;
    struct mpress_error err;
    mpress_profile_init(&p);
    CHECK_INT(mpress_profile_import_pipedream(path, &p, &err), 0);
    CHECK_INT(p.n_ops, 1);
    CHECK_STR(p.model.name, "u?");
    /* "x" + 18 whole characters (37 bytes: the 38th byte would split one), "~", 8 hex */
    CHECK_INT(strlen(p.ops[0].kind), 1 + 36 + 1 + 8);
    CHECK_INT(mpress_profile_save(out, &p, &err), 0);
    mpress_profile_finish(&p);
    unlink(out);
    unlink(path);
    rmdir(dir);
}

/* A random DAG against a plain O(n^2) reference of the order (smallest ready node number
 * first) and of the bytes crossing each cut; then a long chain, which must load in about
 * linear time (the earlier quadratic reader took minutes for 100,000 nodes). */
static void test_scale(void)
{
    enum { RN = 1500 };
    char dir[] = "/tmp/mpress-pd-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/dag.txt", dir);
    static int es[4 * RN], ed[4 * RN], indeg[RN], done[RN], order[RN], pos[RN], lastc[RN];
    static long act[RN];
    int ne = 0;
    unsigned seed = 12345;
    FILE *f = fopen(path, "w");
    /* node ids permuted against file order so that the order is not the file's */
    for (int i = 0; i < RN; i++) {
        int id = (i * 7919) % RN;
        seed = seed * 1103515245u + 12345u;
        act[id] = (long)(seed >> 16) % 1000;
        fprintf(f, "node%d -- Op -- forward_compute_time=1, backward_compute_time=1, "
                   "activation_size=%ld, parameter_size=0\n",
                id, act[id]);
    }
    for (int v = 1; v < RN; v++)
        for (int k = 0; k < 3; k++) {
            seed = seed * 1103515245u + 12345u;
            if (k && (seed >> 20) % 2)
                continue;
            int u = (int)((seed >> 8) % (unsigned)v); /* u < v: acyclic */
            es[ne] = u;
            ed[ne] = v;
            fprintf(f, "\tnode%d -- node%d\n", u, v);
            ne++;
        }
    fclose(f);
    for (int e = 0; e < ne; e++)
        indeg[ed[e]]++;
    for (int k = 0; k < RN; k++) {
        int best = -1;
        for (int i = 0; i < RN && best < 0; i++)
            if (!done[i] && !indeg[i])
                best = i; /* ids are numbers: smallest first */
        done[best] = 1;
        order[k] = best;
        pos[best] = k;
        for (int e = 0; e < ne; e++)
            if (es[e] == best)
                indeg[ed[e]]--;
    }
    for (int i = 0; i < RN; i++)
        lastc[i] = pos[i];
    for (int e = 0; e < ne; e++)
        if (pos[ed[e]] > lastc[es[e]])
            lastc[es[e]] = pos[ed[e]];
    struct mpress_profile p;
    struct mpress_error err;
    mpress_profile_init(&p);
    CHECK_INT(mpress_profile_import_pipedream(path, &p, &err), 0);
    CHECK_INT(p.n_ops, RN);
    int bad_order = 0, bad_cross = 0;
    for (int k = 0; k < RN && p.n_ops == RN; k++) {
        char want[32];
        snprintf(want, sizeof(want), "node%d", order[k]);
        bad_order += strcmp(p.ops[k].name, want) != 0;
        uint64_t cross = 0;
        for (int j = 0; j <= k; j++)
            if (lastc[order[j]] > k)
                cross += (uint64_t)act[order[j]];
        bad_cross += p.ops[k].output_bytes != cross;
    }
    CHECK_INT(bad_order, 0);
    CHECK_INT(bad_cross, 0);
    mpress_profile_finish(&p);

    enum { CN = 100000 };
    f = fopen(path, "w");
    for (int i = 0; i < CN; i++)
        fprintf(f, "node%d -- Op -- forward_compute_time=1, backward_compute_time=1, "
                   "activation_size=4, parameter_size=0\n", i);
    for (int i = 0; i + 1 < CN; i++)
        fprintf(f, "\tnode%d -- node%d\n", i, i + 1);
    fclose(f);
    clock_t t0 = clock();
    CHECK_INT(mpress_profile_import_pipedream(path, &p, &err), 0);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK_INT(p.n_ops, CN);
    CHECK_INT(p.n_ops == CN ? p.ops[CN / 2].output_bytes : 0, 4);
    CHECK_MSG(secs < 10, "a %d-node chain took %.1f s of CPU", CN, secs);
    mpress_profile_finish(&p);
    unlink(path);
    rmdir(dir);
}

/* Description cut into a kind: short kept, long ones distinct. */
static void test_kinds(void)
{
    char dir[] = "/tmp/mpress-pd-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/k.graph.txt", dir);
    FILE *f = fopen(path, "w");
    fputs("node1 -- Input0 -- " OK "\n"
          "node2 -- Sequential(  (0): Linear(in_features=1024, out_features=4096)  (1): ReLU) -- "
          OK "\n"
          "node3 -- Sequential(  (0): Linear(in_features=1024, out_features=4096)  (1): Tanh) -- "
          OK "\n"
          "\tnode1 -- node2\n\tnode2 -- node3\n",
          f);
    fclose(f);
    struct mpress_profile p;
    struct mpress_error err;
    mpress_profile_init(&p);
    CHECK_INT(mpress_profile_import_pipedream(path, &p, &err), 0);
    CHECK_INT(p.n_ops, 3);
    CHECK_STR(p.model.name, "k");
    CHECK_STR(p.ops[0].kind, "Input0");
    CHECK(strlen(p.ops[1].kind) == 47 && strchr(p.ops[1].kind, '~'));
    CHECK(strcmp(p.ops[1].kind, p.ops[2].kind) != 0);
    CHECK_INT(p.ops[0].output_bytes, 8);
    CHECK_INT(p.ops[2].output_bytes, 0);
    mpress_profile_finish(&p);
    unlink(path);
    rmdir(dir);
}

/* A model input (source node described "Input...") costs nothing, as PipeDream's optimizer
 * has it; a later node of that description, or a source of another kind, keeps its times. */
static void test_input_costs_nothing(void)
{
    char dir[] = "mpress-pd-XXXXXX"; /* in the test's working directory */
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/in.graph.txt", dir);
    FILE *f = fopen(path, "w");
    fputs("node1 -- Input0 -- forward_compute_time=635.9, backward_compute_time=0.5, "
          "activation_size=8.0, parameter_size=0.0\n"
          "node2 -- Linear(4, 4) -- " OK "\n"
          "node3 -- InputScale() -- " OK "\n"
          "node4 -- Embedding(4, 4) -- " OK "\n"
          "\tnode1 -- node2\n\tnode2 -- node3\n\tnode4 -- node3\n",
          f);
    fclose(f);
    struct mpress_profile p;
    struct mpress_error err;
    mpress_profile_init(&p);
    CHECK_INT(mpress_profile_import_pipedream(path, &p, &err), 0);
    CHECK_INT(p.n_ops, 4);
    for (int k = 0; k < p.n_ops; k++) {
        int input = strcmp(p.ops[k].name, "node1") == 0;
        CHECK_NEAR(p.ops[k].fwd_s, input ? 0.0 : 1e-3, 1e-12);
        CHECK_NEAR(p.ops[k].bwd_s, input ? 0.0 : 2e-3, 1e-12);
    }
    mpress_profile_finish(&p);
    unlink(path);
    rmdir(dir);
}

/* --stages N against exhaustive enumeration: on random DAGs of up to 8 nodes (times from a
 * small set, so that ties happen), every assignment of nodes to N nonempty stages that never
 * decreases along an edge is tried; the smallest slowest stage must equal the bottleneck the
 * import reports and the best N contiguous ranges of its op order (checked by a DP over
 * prefixes here), and the order must be topological. A residual block shows what Kahn's order
 * alone misses. */
static double ranges_best(const double *t, int n, int stages)
{
    double best[9][9]; /* best[k][j]: ops 0..j-1 in k ranges */
    for (int k = 0; k <= stages; k++)
        for (int j = 0; j <= n; j++)
            best[k][j] = -1;
    best[0][0] = 0;
    for (int k = 1; k <= stages; k++)
        for (int j = 1; j <= n; j++)
            for (int i = k - 1; i < j; i++) {
                if (best[k - 1][i] < 0)
                    continue;
                double sum = 0;
                for (int x = i; x < j; x++)
                    sum += t[x];
                double m = best[k - 1][i] > sum ? best[k - 1][i] : sum;
                if (best[k][j] < 0 || m < best[k][j])
                    best[k][j] = m;
            }
    return best[stages][n];
}

static void test_stage_order(void)
{
    char dir[] = "mpress-pd-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/r.graph.txt", dir);
    static const double choice[5] = {0, 1, 2, 3.5, 5};
    unsigned seed = 12345;
    int wins = 0;
    for (int trial = 0; trial < 300; trial++) {
        seed = seed * 1103515245u + 12345u;
        int n = 1 + (int)(seed >> 16) % 8;
        double t[8];
        int pred[8][8];
        memset(pred, 0, sizeof(pred));
        FILE *f = fopen(path, "w");
        for (int v = 0; v < n; v++) {
            seed = seed * 1103515245u + 12345u;
            t[v] = choice[(seed >> 16) % 5];
            /* forward 1/4 of the time, backward 3/4: the stage time is their sum */
            fprintf(f, "node%d -- Op%d -- forward_compute_time=%g, backward_compute_time=%g, "
                       "activation_size=4.0, parameter_size=0.0\n", v, v, t[v] / 4, 3 * t[v] / 4);
        }
        for (int v = 1; v < n; v++)
            for (int u = 0; u < v; u++) {
                seed = seed * 1103515245u + 12345u;
                if ((seed >> 16) % 100 < 35) {
                    pred[v][u] = 1;
                    fprintf(f, "\tnode%d -- node%d\n", u, v);
                }
            }
        fclose(f);
        for (int stages = 1; stages <= 3 && stages <= n; stages++) {
            double want = -1;
            int assign[8] = {0}, total = 1;
            for (int v = 0; v < n; v++)
                total *= stages;
            for (int code = 0; code < total; code++) {
                int c = code, used = 0;
                for (int v = 0; v < n; v++) {
                    assign[v] = c % stages;
                    c /= stages;
                    used |= 1 << assign[v];
                }
                int ok = used == (1 << stages) - 1;
                for (int v = 0; ok && v < n; v++)
                    for (int u = 0; ok && u < n; u++)
                        ok = !(pred[v][u] && assign[u] > assign[v]);
                if (!ok)
                    continue;
                double worst = 0;
                for (int k = 0; k < stages; k++) {
                    double sum = 0;
                    for (int v = 0; v < n; v++)
                        sum += assign[v] == k ? t[v] : 0;
                    worst = sum > worst ? sum : worst;
                }
                if (want < 0 || worst < want)
                    want = worst;
            }
            struct mpress_profile p, kahn;
            struct mpress_error err;
            mpress_profile_init(&p);
            mpress_profile_init(&kahn);
            double got = -1;
            CHECK_INT(mpress_profile_import_pipedream_stages(path, stages, &p, &got, &err), 0);
            CHECK_INT(mpress_profile_import_pipedream(path, &kahn, &err), 0);
            CHECK_MSG(fabs(got - want / 1000) < 1e-12, "trial %d, %d stages: %g, want %g", trial,
                      stages, got, want / 1000);
            double ot[8], kt[8];
            int pos[8], bad = 0;
            for (int k = 0; k < p.n_ops; k++) {
                int v = atoi(p.ops[k].name + 4);
                pos[v] = k;
                ot[k] = (p.ops[k].fwd_s + p.ops[k].bwd_s) * 1000;
                kt[k] = (kahn.ops[k].fwd_s + kahn.ops[k].bwd_s) * 1000;
            }
            for (int v = 0; v < n; v++)
                for (int u = 0; u < n; u++)
                    bad += pred[v][u] && pos[u] > pos[v];
            CHECK_INT(bad, 0);
            CHECK_NEAR(ranges_best(ot, n, stages), want, 1e-9);
            wins += ranges_best(kt, n, stages) > want + 1e-9;
            mpress_profile_finish(&p);
            mpress_profile_finish(&kahn);
        }
    }
    /* the enumeration includes graphs where Kahn's order cannot reach the optimum */
    fprintf(stderr, "stage order: Kahn's order missed the optimum in %d of the cases\n", wins);
    CHECK(wins > 0);

    /* A residual block: a -> b -> c -> d -> add, and a -> s -> add (the shortcut, numbered
     * last, so Kahn's order puts it just before the add). Two stages: the best cut is {a, s,
     * b} | {c, d, add} (6 | 6); contiguous ranges of Kahn's order a b c d s add give 7 | 5 at
     * best. */
    FILE *f = fopen(path, "w");
    static const char *const names[6] = {"a", "b", "c", "d", "add", "s"};
    static const double times[6] = {1, 2, 2, 2, 2, 3};
    for (int v = 0; v < 6; v++)
        fprintf(f, "node%d -- %s -- forward_compute_time=%g, backward_compute_time=0.0, "
                   "activation_size=4.0, parameter_size=0.0\n", v, names[v], times[v]);
    fputs("\tnode0 -- node1\n\tnode1 -- node2\n\tnode2 -- node3\n\tnode3 -- node4\n"
          "\tnode0 -- node5\n\tnode5 -- node4\n", f);
    fclose(f);
    struct mpress_profile p;
    struct mpress_error err;
    mpress_profile_init(&p);
    double got = 0;
    CHECK_INT(mpress_profile_import_pipedream_stages(path, 2, &p, &got, &err), 0);
    CHECK_NEAR(got, 6e-3, 1e-12);
    static const char *const want_order[6] = {"node0", "node1", "node5", "node2", "node3",
                                              "node4"};
    for (int k = 0; k < p.n_ops && k < 6; k++)
        CHECK_STR(p.ops[k].name, want_order[k]);
    /* stages outside 1 .. nodes: a usage error */
    CHECK_INT(mpress_profile_import_pipedream_stages(path, 7, &p, &got, &err), MPRESS_EUSAGE);
    mpress_profile_finish(&p);

    /* a graph with more downward-closed sets than the limit (13 independent nodes: 8192) */
    f = fopen(path, "w");
    for (int v = 0; v < 13; v++)
        fprintf(f, "node%d -- Op -- " OK "\n", v);
    fclose(f);
    mpress_profile_init(&p);
    CHECK_INT(mpress_profile_import_pipedream_stages(path, 2, &p, &got, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "downward-closed") != NULL);
    mpress_profile_finish(&p);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_stage_order();
    test_bad();
    test_input_costs_nothing();
    test_kinds();
    test_utf8_cut();
    test_scale();
    const char *data = getenv("MPRESS_TESTDATA");
    char file[1024];
    snprintf(file, sizeof(file), "%s/pipedream/gnmt.graph.txt", data ? data : "tests/data");
    CHECK(access(file, R_OK) == 0);
    if (access(file, R_OK) == 0) {
        test_gnmt(file);
        /* --stages on GNMT: the slowest stage PipeDream's own optimizer prints for a straight
         * pipeline (optimizer_graph_hierarchical.py --straight_pipeline -n N, run beside by
         * scripts/bench-pipedream; docs/benchmarks.md), its inputs and unused outputs aside */
        static const int n[3] = {2, 4, 8};
        static const double ms[3] = {45.936, 25.868, 19.032};
        for (int k = 0; k < 3; k++) {
            struct mpress_profile p;
            struct mpress_error err;
            double got = 0;
            mpress_profile_init(&p);
            CHECK_INT(mpress_profile_import_pipedream_stages(file, n[k], &p, &got, &err), 0);
            CHECK_NEAR(got * 1e3, ms[k], 5e-4);
            mpress_profile_finish(&p);
        }
    }
    return check_done();
}
